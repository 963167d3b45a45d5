//! Packet buffers.
//!
//! A [`Packet`] is the bytes of one frame plus the metadata the datapath
//! keeps beside it (input port, receive hash). Its storage is either a heap
//! buffer with headroom, or (for AF_XDP) a frame of a UMEM, so forwarding
//! between ports that share a UMEM moves a descriptor, not bytes.
//!
//! Ownership: whoever holds a `Packet` owns its buffer. Handing it to
//! [`crate::Netdev::tx_batch`] gives it to the port; dropping it frees (or
//! recycles) the buffer.

/// Bytes kept free in front of heap packets so a VLAN push (or a later
/// tunnel header) does not move the payload.
pub const HEADROOM: usize = 64;

use std::sync::Arc;

/// The owner of externally stored frames (an AF_XDP UMEM pool): takes a
/// frame back when the [`Packet`] holding it is dropped.
///
/// Implementations must be cheap and must not block for long: `release`
/// runs wherever a packet is dropped (any thread).
pub trait FrameOwner: Send + Sync {
    /// Takes back the frame at `frame_addr` (as given to [`FrameBuf::new`]).
    fn release(&self, frame_addr: u64);
}

/// One frame of external memory owned by a packet: the bytes, the frame's
/// address in its owner's address space (a UMEM offset), and the owner.
/// Dropping it returns the frame to the owner.
pub struct FrameBuf {
    bytes: &'static mut [u8],
    addr: u64,
    owner: Option<Arc<dyn FrameOwner>>,
}

impl FrameBuf {
    /// Wraps frame `addr` of `owner`, whose bytes are `bytes`.
    ///
    /// The `'static` lifetime is the provider's promise that the memory
    /// stays mapped while this frame exists (it keeps `owner`, which keeps
    /// the mapping, alive) and that nothing else accesses these bytes until
    /// the frame is released.
    pub fn new(bytes: &'static mut [u8], addr: u64, owner: Arc<dyn FrameOwner>) -> FrameBuf {
        FrameBuf { bytes, addr, owner: Some(owner) }
    }

    /// The frame's address as given to [`FrameBuf::new`].
    pub fn addr(&self) -> u64 {
        self.addr
    }

    pub fn owner(&self) -> &Arc<dyn FrameOwner> {
        self.owner.as_ref().expect("frame owner present until into_raw")
    }

    /// Gives up the frame without releasing it: the caller now owns frame
    /// `addr` of the returned owner (e.g. it queued it for transmission).
    pub fn into_raw(mut self) -> (u64, Arc<dyn FrameOwner>) {
        (self.addr, self.owner.take().expect("frame owner present until into_raw"))
    }
}

impl Drop for FrameBuf {
    fn drop(&mut self) {
        if let Some(owner) = self.owner.take() {
            owner.release(self.addr);
        }
    }
}

enum Buf {
    Heap(HeapBuf),
    Frame(FrameBuf),
}

/// Size of the heap buffers that are recycled: headroom and a standard
/// 2 KiB frame. Smaller packets get one of these, larger ones an exact
/// allocation.
const POOLED: usize = HEADROOM + 2048;
/// Buffers a thread keeps for reuse.
const POOL_MAX: usize = 1024;

thread_local! {
    /// Freed heap buffers of [`POOLED`] bytes, for the next packets this
    /// thread allocates. A poll thread frees what it received when it
    /// sends it, so in steady state its packets cost no malloc/free (and
    /// glibc's slow path for this size, with 64 packets per batch
    /// overflowing its per-thread cache, was a fifth of the forwarding
    /// time between vhost-user ports).
    static POOL: std::cell::RefCell<Vec<Box<[u8]>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A packet's heap buffer; [`POOLED`]-sized ones go back to the freeing
/// thread's pool.
struct HeapBuf(Box<[u8]>);

impl HeapBuf {
    /// Like [`HeapBuf::with_len`], but a recycled buffer's bytes are left
    /// as they were: for a caller that overwrites `HEADROOM..HEADROOM + len`
    /// at once ([`Packet::filled`]).
    fn with_len_unzeroed(len: usize) -> HeapBuf {
        if HEADROOM + len > POOLED {
            return HeapBuf(vec![0u8; HEADROOM + len].into_boxed_slice());
        }
        let recycled = POOL.try_with(|p| p.borrow_mut().pop()).ok().flatten();
        HeapBuf(recycled.unwrap_or_else(|| vec![0u8; POOLED].into_boxed_slice()))
    }

    /// A buffer for `len` bytes after the headroom; only those bytes are
    /// zeroed (a recycled buffer's other bytes are never exposed: a
    /// packet's data is its `start..start + len`, and growing it zeroes
    /// what it adds).
    fn with_len(len: usize) -> HeapBuf {
        let mut b = HeapBuf::with_len_unzeroed(len);
        b.0[HEADROOM..HEADROOM + len].fill(0);
        b
    }
}

impl Drop for HeapBuf {
    fn drop(&mut self) {
        if self.0.len() == POOLED {
            let b = std::mem::take(&mut self.0);
            // After the thread's pool is gone (thread exit) or when full,
            // the buffer is simply freed.
            let _ = POOL.try_with(|p| {
                let mut p = p.borrow_mut();
                if p.len() < POOL_MAX {
                    p.push(b);
                }
            });
        }
    }
}

impl Buf {
    #[inline]
    fn bytes(&self) -> &[u8] {
        match self {
            Buf::Heap(b) => &b.0,
            Buf::Frame(f) => f.bytes,
        }
    }

    #[inline]
    fn bytes_mut(&mut self) -> &mut [u8] {
        match self {
            Buf::Heap(b) => &mut b.0,
            Buf::Frame(f) => f.bytes,
        }
    }
}

/// Where a frame-backed packet's bytes are, for a provider that hands the
/// frame to hardware or the kernel instead of copying it.
#[derive(Debug)]
pub struct FrameParts {
    /// Address of the frame (as given to [`FrameBuf::new`]).
    pub addr: u64,
    /// Offset of the first packet byte within the frame.
    pub offset: usize,
    pub len: usize,
}

pub struct Packet {
    buf: Buf,
    start: usize,
    len: usize,
    /// Datapath port number the packet arrived on.
    pub in_port: u32,
    /// Receive hash from the NIC/XDP metadata, if the port supplied one.
    pub rx_hash: Option<u32>,
    /// Tunnel metadata: the flow key's tunnel words (`flow::key::TNL_WORDS`:
    /// tun_id, tun_src/dst, tun_flags/tos/ttl/gbp, tun_metadata,
    /// tun_ipv6_src/dst; `flow::key::TnlWords`, which the datapath assigns
    /// here, so the two cannot drift apart). Set by a
    /// tunnel port on receive, and by the datapath on output when the
    /// pipeline set tunnel fields; boxed so packets without it stay small.
    pub tnl: Option<Box<[u64; 8]>>,
    /// The TCP or UDP checksum still owed: the field holds only the
    /// pseudo-header sum, as a local stack with checksum offload leaves it
    /// (Linux CHECKSUM_PARTIAL). The datapath sets it on receive when the
    /// ports can finish the job on transmit (AF_XDP TX metadata, the
    /// paper's O5); [`Packet::complete_checksum`] does it in software
    /// wherever they cannot.
    pub csum_partial: Option<CsumPartial>,
    /// The receiving port vouches that no checksum in the frame is left
    /// to finish (a vhost-user port, which does not offer checksum offload
    /// and drops frames that ask for it), so the datapath does not look
    /// for a partial one. Kept through copies; it costs no space (it sits
    /// in what was padding).
    pub csum_complete: bool,
}

/// Where a checksum left to offload is (see [`Packet::csum_partial`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CsumPartial {
    /// Start of the L4 segment, from the first byte of the frame.
    pub start: u16,
    /// The checksum field, from `start` (16 for TCP, 6 for UDP).
    pub offset: u16,
    /// Length of the L4 segment (Ethernet padding excluded).
    pub len: u16,
}

impl Packet {
    /// A heap packet holding a copy of `data`.
    pub fn from_slice(data: &[u8]) -> Packet {
        let mut p = Packet::zeroed(data.len());
        p.data_mut().copy_from_slice(data);
        p
    }

    /// A heap packet of `len` zero bytes, for a port to fill.
    pub fn zeroed(len: usize) -> Packet {
        Packet::filled(len, |_| 0)
    }

    /// A heap packet of `len` bytes that `fill` writes; it returns how many
    /// it wrote, and any it left are zeroed. Unlike [`Packet::zeroed`], a
    /// recycled buffer is not cleared first only to be overwritten (a
    /// vhost-user port's receive copy: the clearing was 2% of a poll
    /// thread forwarding between two VMs).
    #[inline]
    pub fn filled(len: usize, fill: impl FnOnce(&mut [u8]) -> usize) -> Packet {
        let mut buf = HeapBuf::with_len_unzeroed(len);
        let data = &mut buf.0[HEADROOM..HEADROOM + len];
        let n = fill(data).min(len);
        if n < len {
            // (Only when short: an empty `fill` is still a call to memset.)
            data[n..].fill(0);
        }
        Packet::in_buf(Buf::Heap(buf), HEADROOM, len)
    }

    /// A packet stored in `frame`: `len` bytes at `offset` within it. The
    /// bytes in front of `offset` serve as headroom.
    ///
    /// # Panics
    /// If `offset + len` exceeds the frame.
    pub fn from_frame(frame: FrameBuf, offset: usize, len: usize) -> Packet {
        assert!(offset + len <= frame.bytes.len(), "packet beyond its frame");
        Packet::in_buf(Buf::Frame(frame), offset, len)
    }

    /// A packet of `len` bytes at `start` in `buf`, with no metadata yet.
    #[inline]
    fn in_buf(buf: Buf, start: usize, len: usize) -> Packet {
        Packet { buf, start, len, in_port: 0, rx_hash: None, tnl: None, csum_partial: None, csum_complete: false }
    }

    /// The owner of the frame holding this packet, if it is frame-backed.
    #[inline]
    pub fn frame_owner(&self) -> Option<&Arc<dyn FrameOwner>> {
        match &self.buf {
            Buf::Frame(f) => Some(f.owner()),
            Buf::Heap(_) => None,
        }
    }

    /// Splits a frame-backed packet into its frame and where the bytes
    /// are in it; the caller takes over the frame (see
    /// [`FrameBuf::into_raw`]). Heap packets come back unchanged.
    pub fn into_frame(mut self) -> Result<(FrameBuf, FrameParts), Packet> {
        if let Some(b) = self.tnl.take() {
            tnl_pool::put(b);
        }
        match self.buf {
            Buf::Frame(f) => {
                let parts = FrameParts { addr: f.addr, offset: self.start, len: self.len };
                Ok((f, parts))
            }
            buf @ Buf::Heap(_) => Err(Packet { buf, ..self }),
        }
    }

    #[inline]
    pub fn data(&self) -> &[u8] {
        &self.buf.bytes()[self.start..self.start + self.len]
    }

    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        let (s, l) = (self.start, self.len);
        &mut self.buf.bytes_mut()[s..s + l]
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Bytes in front of the data (for a packet in a frame: its offset
    /// within the frame).
    #[inline]
    pub fn headroom(&self) -> usize {
        self.start
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Inserts `n` zero bytes at `offset` (e.g. a VLAN tag at 12), moving
    /// the first `offset` bytes into the headroom.
    pub fn insert_bytes(&mut self, offset: usize, n: usize) {
        let offset = offset.min(self.len);
        if self.start < n {
            // Grow: reallocate on the heap with fresh headroom (a frame
            // moved this way goes back to its owner).
            let mut nb = HeapBuf::with_len(n + self.len);
            nb.0[HEADROOM + n..HEADROOM + n + self.len].copy_from_slice(self.data());
            self.buf = Buf::Heap(nb);
            self.start = HEADROOM + n;
        }
        let s = self.start;
        let buf = self.buf.bytes_mut();
        buf.copy_within(s..s + offset, s - n);
        buf[s - n + offset..s + offset].fill(0);
        self.start -= n;
        self.len += n;
    }

    /// Removes `n` bytes at `offset` (e.g. a VLAN tag at 12).
    pub fn remove_bytes(&mut self, offset: usize, n: usize) {
        if offset + n > self.len {
            return;
        }
        let s = self.start;
        self.buf.bytes_mut().copy_within(s..s + offset, s + n);
        self.start += n;
        self.len -= n;
    }

    /// Shortens the packet to `len` bytes.
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Computes the checksum [`Packet::csum_partial`] says is owed, in
    /// software, and clears it. The field already holds the pseudo-header
    /// sum, so the checksum is that of the segment as it stands. Returns
    /// whether one was owed.
    pub fn complete_checksum(&mut self) -> bool {
        let Some(c) = self.csum_partial.take() else { return false };
        let (start, field, end) =
            (c.start as usize, c.start as usize + c.offset as usize, c.start as usize + c.len as usize);
        let d = self.data_mut();
        if field + 2 > end || end > d.len() {
            return false;
        }
        let mut v = wire::checksum::checksum(&d[start..end]);
        // UDP writes a computed 0 as 0xffff (0 means "no checksum").
        if c.offset == 6 && v == 0 {
            v = 0xffff;
        }
        d[field..field + 2].copy_from_slice(&v.to_be_bytes());
        true
    }
}

/// Boxes for [`Packet::tnl`], reused instead of freed. Through the
/// allocator a batch of 32 decapsulated frames overran glibc's per-thread
/// cache (seven chunks of a size) both when it took its boxes and when it
/// gave them back: `malloc`/`free` were 3.7% of the core in decapsulation.
/// Each thread keeps up to [`MAGAZINE`] x 2 spare boxes, and boxes given up
/// on another thread than the one that took them (a frame may cross
/// bridges' poll threads) come back in whole magazines, one lock per
/// [`MAGAZINE`] boxes.
mod tnl_pool {
    use std::cell::RefCell;
    use std::sync::Mutex;

    pub(super) type TnlBox = Box<[u64; 8]>;
    pub(super) const MAGAZINE: usize = 64;
    /// Full magazines kept for other threads; beyond this, boxes are freed.
    const SHARED_MAX: usize = 32;

    static SHARED: Mutex<Vec<Vec<TnlBox>>> = Mutex::new(Vec::new());

    thread_local! {
        static LOCAL: RefCell<Vec<TnlBox>> = const { RefCell::new(Vec::new()) };
    }

    #[inline]
    pub(super) fn get(words: [u64; 8]) -> TnlBox {
        LOCAL.with(|l| {
            let mut l = l.borrow_mut();
            if l.is_empty() {
                let m = SHARED.lock().unwrap_or_else(|e| e.into_inner()).pop();
                if let Some(m) = m {
                    *l = m;
                }
            }
            match l.pop() {
                Some(mut b) => {
                    *b = words;
                    b
                }
                None => Box::new(words),
            }
        })
    }

    #[cfg(test)]
    pub(super) fn spare() -> usize {
        LOCAL.with(|l| l.borrow().len())
    }

    #[inline]
    pub(super) fn put(b: TnlBox) {
        LOCAL.with(|l| {
            let mut l = l.borrow_mut();
            if l.len() >= 2 * MAGAZINE {
                let m = l.split_off(MAGAZINE);
                let mut s = SHARED.lock().unwrap_or_else(|e| e.into_inner());
                if s.len() < SHARED_MAX {
                    s.push(m);
                }
            }
            l.push(b);
        })
    }
}

impl Packet {
    /// Sets the tunnel metadata ([`Packet::tnl`]), in a reused box when
    /// there is one.
    #[inline]
    pub fn set_tnl(&mut self, words: [u64; 8]) {
        match &mut self.tnl {
            Some(b) => **b = words,
            None => self.tnl = Some(tnl_pool::get(words)),
        }
    }

    /// Takes the tunnel metadata off the packet; its box is kept for the
    /// next [`Packet::set_tnl`].
    #[inline]
    pub fn take_tnl(&mut self) -> Option<[u64; 8]> {
        let b = self.tnl.take()?;
        let w = *b;
        tnl_pool::put(b);
        Some(w)
    }
}

impl Clone for Packet {
    /// A heap copy (used when one packet goes to several ports).
    fn clone(&self) -> Packet {
        let mut p = Packet::from_slice(self.data());
        p.in_port = self.in_port;
        p.rx_hash = self.rx_hash;
        p.tnl.clone_from(&self.tnl);
        p.csum_partial = self.csum_partial;
        p.csum_complete = self.csum_complete;
        p
    }
}

impl std::fmt::Debug for Packet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = if matches!(self.buf, Buf::Frame(_)) { ", frame" } else { "" };
        write!(f, "Packet(in_port={}, len={}{kind})", self.in_port, self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_checksum_flag_fits_in_padding() {
        // Packets move by value through every batch: the flag must not
        // make them bigger than before it existed.
        #[cfg(target_pointer_width = "64")]
        assert_eq!(std::mem::size_of::<Packet>(), 88);
    }

    /// Leaves a buffer full of 0xff in this thread's pool; its address.
    fn dirty_buffer_in_pool() -> *const u8 {
        let mut p = Packet::zeroed(100);
        p.data_mut().fill(0xff);
        p.data().as_ptr()
    }

    #[test]
    fn heap_buffers_are_recycled_and_come_back_zeroed() {
        let at = dirty_buffer_in_pool();
        // The next small packet on this thread reuses the buffer, and sees
        // zeros, not the last packet's bytes.
        let mut q = Packet::zeroed(60);
        assert_eq!(q.data().as_ptr(), at);
        assert!(q.data().iter().all(|&b| b == 0));
        // Bytes it gains in front come from the headroom, zeroed too.
        q.insert_bytes(12, 4);
        assert_eq!(q.len(), 64);
        assert!(q.data().iter().all(|&b| b == 0));
        // Large packets are exact allocations, not pooled.
        let big = Packet::zeroed(9000);
        assert_eq!(big.len(), 9000);
        assert!(big.data().iter().all(|&b| b == 0));
    }

    #[test]
    fn a_filled_packet_shows_what_was_written_and_zeros_after_it() {
        let at = dirty_buffer_in_pool();
        // The recycled buffer is not cleared first; what the filler wrote
        // is there, and what it did not write is zero, not old bytes.
        let q = Packet::filled(80, |d| {
            d[..50].fill(7);
            50
        });
        assert_eq!(q.data().as_ptr(), at);
        assert_eq!(q.len(), 80);
        assert!(q.data()[..50].iter().all(|&b| b == 7));
        assert!(q.data()[50..].iter().all(|&b| b == 0));
        // A filler that claims more than the length is held to it.
        let r = Packet::filled(10, |d| {
            d.fill(1);
            99
        });
        assert_eq!(r.data(), &[1; 10]);
        let big = Packet::filled(9000, |d| {
            d[..4].copy_from_slice(b"abcd");
            4
        });
        assert_eq!(&big.data()[..4], b"abcd");
        assert!(big.data()[4..].iter().all(|&b| b == 0));
    }
    #[test]
    fn insert_remove() {
        let mut p = Packet::from_slice(&[1, 2, 3, 4, 5, 6]);
        p.insert_bytes(2, 4);
        assert_eq!(p.data(), &[1, 2, 0, 0, 0, 0, 3, 4, 5, 6]);
        p.data_mut()[2] = 9;
        p.remove_bytes(2, 4);
        assert_eq!(p.data(), &[1, 2, 3, 4, 5, 6]);
        for _ in 0..40 {
            p.insert_bytes(0, 4);
        }
        assert_eq!(p.len(), 166);
        assert_eq!(&p.data()[160..], &[1, 2, 3, 4, 5, 6]);
    }

    struct Owner(std::sync::Mutex<Vec<u64>>);
    impl FrameOwner for Owner {
        fn release(&self, addr: u64) {
            self.0.lock().unwrap().push(addr);
        }
    }

    fn frame(owner: &Arc<Owner>, addr: u64, size: usize) -> FrameBuf {
        let bytes: &'static mut [u8] = Box::leak(vec![0u8; size].into_boxed_slice());
        FrameBuf::new(bytes, addr, owner.clone())
    }

    #[test]
    fn frame_packets_edit_in_place_and_release_on_drop() {
        let owner = Arc::new(Owner(Default::default()));
        let f = frame(&owner, 4096, 256);
        f.bytes[100..106].copy_from_slice(&[1, 2, 3, 4, 5, 6]);
        let mut p = Packet::from_frame(f, 100, 6);
        assert_eq!(p.data(), &[1, 2, 3, 4, 5, 6]);
        p.insert_bytes(2, 4);
        assert_eq!(p.data(), &[1, 2, 0, 0, 0, 0, 3, 4, 5, 6]);
        assert!(p.frame_owner().is_some());
        p.remove_bytes(2, 4);
        p.truncate(5);
        assert_eq!(p.data(), &[1, 2, 3, 4, 5]);
        let c = p.clone();
        assert!(c.frame_owner().is_none());
        drop(p);
        assert_eq!(*owner.0.lock().unwrap(), vec![4096]);
        // Growing past the frame's headroom moves to the heap and releases.
        let mut p = Packet::from_frame(frame(&owner, 8192, 64), 2, 10);
        p.insert_bytes(0, 4);
        assert!(p.frame_owner().is_none());
        assert_eq!(p.len(), 14);
        assert_eq!(*owner.0.lock().unwrap(), vec![4096, 8192]);
        // into_frame hands the frame over without releasing it.
        let p = Packet::from_frame(frame(&owner, 0, 64), 8, 20);
        let (fb, parts) = p.into_frame().unwrap();
        assert_eq!((parts.addr, parts.offset, parts.len), (0, 8, 20));
        let (addr, _o) = fb.into_raw();
        assert_eq!(addr, 0);
        assert_eq!(owner.0.lock().unwrap().len(), 2);
        assert!(Packet::from_slice(&[1]).into_frame().is_err());
    }

    #[test]
    fn tunnel_metadata_boxes_are_reused_not_freed() {
        let mut p = Packet::from_slice(&[0u8; 60]);
        assert_eq!(p.take_tnl(), None);
        p.set_tnl([1, 2, 3, 4, 5, 6, 7, 8]);
        let first = p.tnl.as_deref().map(|b| b as *const [u64; 8]);
        // Overwritten in place.
        p.set_tnl([9; 8]);
        assert_eq!(p.tnl.as_deref().map(|b| b as *const [u64; 8]), first);
        assert_eq!(p.take_tnl(), Some([9; 8]));
        assert!(p.tnl.is_none());
        // The next packet on this thread gets the same box back, with its
        // own words.
        let mut q = Packet::from_slice(&[0u8; 60]);
        q.set_tnl([7; 8]);
        assert_eq!(q.tnl.as_deref().map(|b| b as *const [u64; 8]), first);
        assert_eq!(*q.tnl.as_deref().unwrap(), [7; 8]);
        // A clone has its own box.
        let c = q.clone();
        assert_ne!(c.tnl.as_deref().map(|b| b as *const [u64; 8]), first);
        assert_eq!(c.tnl.as_deref(), q.tnl.as_deref());
        // Many boxes in flight on one thread: all words stay distinct, and
        // the spare list stays bounded when they all come back.
        let mut many: Vec<Packet> = (0..500u64)
            .map(|i| {
                let mut p = Packet::from_slice(&[0u8; 60]);
                p.set_tnl([i; 8]);
                p
            })
            .collect();
        for (i, p) in many.iter_mut().enumerate() {
            assert_eq!(p.take_tnl(), Some([i as u64; 8]));
        }
        assert!(tnl_pool::spare() <= 2 * tnl_pool::MAGAZINE);
    }

    /// An Ethernet + IPv4 frame: `proto`, IP id `id`, and 8 bytes of L4
    /// starting with the ports.
    fn v4(proto: u8, id: u16, l4: [u8; 8]) -> Vec<u8> {
        let mut f = vec![0u8; 14];
        f[12..14].copy_from_slice(&[8, 0]);
        let mut ip = [0x45, 0, 0, 28, 0, 0, 0x40, 0, 64, proto, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2];
        ip[4..6].copy_from_slice(&id.to_be_bytes());
        let mut sum: u32 = ip.chunks(2).map(|w| u16::from_be_bytes([w[0], w[1]]) as u32).sum();
        sum = (sum & 0xffff) + (sum >> 16);
        ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
        f.extend_from_slice(&ip);
        f.extend_from_slice(&l4);
        f
    }

    #[test]
    fn flow_hash_is_per_flow_not_per_packet() {
        // Two packets of one UDP flow: other IP ids, checksums, payload.
        let a = v4(17, 1, [0x27, 0x10, 0x13, 0x89, 0, 8, 0x12, 0x34]);
        let b = v4(17, 2, [0x27, 0x10, 0x13, 0x89, 0, 8, 0xab, 0xcd]);
        assert_ne!(a[24..26], b[24..26], "the IP checksums differ");
        assert_eq!(frame_flow_hash(&a), frame_flow_hash(&b));
        // Another source port: another flow.
        let c = v4(17, 1, [0x27, 0x11, 0x13, 0x89, 0, 8, 0x12, 0x34]);
        assert_ne!(frame_flow_hash(&a), frame_flow_hash(&c));
        // ICMP echoes of one ping: other sequence numbers and checksums.
        let d = v4(1, 7, [8, 0, 0x11, 0x22, 0, 1, 0, 1]);
        let e = v4(1, 8, [8, 0, 0x33, 0x44, 0, 1, 0, 2]);
        assert_eq!(frame_flow_hash(&d), frame_flow_hash(&e));
        // Flows spread: 1,024 source ports give 1,024 hashes, and their low
        // 8 bits (what picks a queue or varies a tunnel's source port) fill
        // most of 256 buckets.
        let hashes: std::collections::HashSet<u32> = (0..1024u16)
            .map(|p| {
                let sp = (10_000 + p).to_be_bytes();
                frame_flow_hash(&v4(17, 1, [sp[0], sp[1], 0x13, 0x89, 0, 8, 0, 0]))
            })
            .collect();
        assert_eq!(hashes.len(), 1024);
        let buckets: std::collections::HashSet<u32> = hashes.iter().map(|h| h & 0xff).collect();
        assert!(buckets.len() > 240, "{} of 256 buckets", buckets.len());
        // Not IPv4: the Ethernet header; short frames do not panic.
        let mut x = a.clone();
        x[12..14].copy_from_slice(&[0x86, 0xdd]);
        assert_ne!(frame_flow_hash(&x), frame_flow_hash(&a));
        let _ = frame_flow_hash(&a[..10]);
    }

    #[test]
    fn packet_is_send() {
        fn is_send<T: Send>() {}
        is_send::<Packet>();
    }
}

/// A hash of an Ethernet frame's flow: for IPv4 its protocol, addresses and
/// (TCP, UDP, SCTP, unfragmented) ports, otherwise its Ethernet header. For
/// spreading flows over queues or tunnel source ports when the port gave no
/// receive hash. Nothing that changes from packet to packet of a flow is
/// hashed (it read the IP checksum once, so each packet of a TCP stream got
/// its own tunnel source port, and an ECMP underlay could reorder them).
pub fn frame_flow_hash(f: &[u8]) -> u32 {
    // The fields as a few words, mixed with multiplications (a byte-wise
    // FNV over the same 13 bytes was a chain of 13 dependent multiplies:
    // 30 ns of every encapsulated frame).
    #[inline(always)]
    fn mix(a: u64, b: u64) -> u32 {
        let h = (a ^ 0x9e37_79b9_7f4a_7c15).wrapping_mul(0xbf58_476d_1ce4_e5b9) ^ b;
        let h = (h ^ (h >> 31)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (h ^ (h >> 29) ^ (h >> 32)) as u32
    }
    let word = |at: usize, n: usize| f[at..at + n].iter().fold(0u64, |w, &b| w << 8 | b as u64);
    if f.len() >= 34 && f[12..14] == [8, 0] {
        let proto = f[23] as u64;
        let addrs = word(26, 8);
        let l4 = 14 + (f[14] & 0x0f) as usize * 4;
        let fragment = u16::from_be_bytes([f[20], f[21]]) & 0x3fff != 0;
        let ports = if matches!(proto, 6 | 17 | 132) && !fragment && f.len() >= l4 + 4 { word(l4, 4) } else { 0 };
        mix(addrs, ports << 8 | proto)
    } else if f.len() >= 14 {
        mix(word(0, 8), word(8, 6) | 1 << 63)
    } else {
        mix(word(0, f.len()), f.len() as u64)
    }
}
