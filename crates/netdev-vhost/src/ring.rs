//! The split-virtqueue data path, over the guest memory mapped into this
//! process.
//!
//! `virtio-queue` walks a virtqueue through `vm-memory`'s generic accessors:
//! every descriptor, ring slot and byte copy looks its region up again and
//! goes through a volatile-slice copy. Measured on VM-to-VM forwarding
//! (two testpmd vNICs, one poll thread), that cost about 200 of the 284 ns
//! the poll thread spent per packet. Here the guest's regions are
//! translated once per memory table ([`GuestMap`]) and a ring once per
//! batch ([`Ring`]); descriptors and ring slots are read in place, and
//! frame bytes are copied once, straight between guest memory and the
//! packet. The control plane (`vhost-user-backend`, `virtio-queue`'s
//! `Queue`) still owns the queue: a batch starts from its `next_avail` /
//! `next_used` and hands them back.
//!
//! All pointer work of the crate is here. Every guest address is checked
//! against the mapped regions (whole range inside one region) before it is
//! turned into a pointer, every ring index is reduced modulo the ring size,
//! and rings whose addresses break the spec's alignment are refused, so the
//! guest can make the port read garbage but never read or write outside
//! the memory it shared.
#![allow(unsafe_code)]

use std::sync::atomic::{fence, AtomicU16, Ordering};
use std::sync::Arc;

use virtio_queue::{Queue, QueueT};
use vm_memory::{GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion, MemoryRegionAddress};

/// `flags` of a descriptor: the chain continues at `next`.
const DESC_F_NEXT: u16 = 1;
/// `flags` of a descriptor: the device writes this buffer.
const DESC_F_WRITE: u16 = 2;
/// `flags` of a descriptor: an indirect table (not offered, so refused).
const DESC_F_INDIRECT: u16 = 4;
/// `used->flags`: the device does not want kicks.
const USED_F_NO_NOTIFY: u16 = 1;
/// `avail->flags`: the driver does not want interrupts.
const AVAIL_F_NO_INTERRUPT: u16 = 1;

/// The guest's memory regions as host addresses, and the mapping they
/// live in (kept alive while this exists).
pub(crate) struct GuestMap {
    /// Held, not read: the host addresses below stay mapped while it is.
    _mem: Arc<GuestMemoryMmap>,
    /// (guest physical start, length, host address) per region.
    regions: Vec<(u64, u64, usize)>,
}

impl GuestMap {
    pub fn new(mem: Arc<GuestMemoryMmap>) -> GuestMap {
        let regions = mem
            .iter()
            .filter_map(|r| {
                let host = r.get_host_address(MemoryRegionAddress(0)).ok()?;
                Some((r.start_addr().0, r.len(), host as usize))
            })
            .collect();
        GuestMap { _mem: mem, regions }
    }

    /// The host address of guest bytes `[gpa, gpa+len)`, if one region
    /// holds them all.
    #[inline]
    fn host(&self, gpa: u64, len: u64) -> Option<*mut u8> {
        let end = gpa.checked_add(len)?;
        self.regions
            .iter()
            .find(|&&(start, size, _)| gpa >= start && end <= start + size)
            .map(|&(start, _, host)| (host + (gpa - start) as usize) as *mut u8)
    }
}

/// A buffer of a descriptor chain: host address and length, inside a
/// region of the [`GuestMap`] it was found in.
#[derive(Clone, Copy)]
pub(crate) struct Seg {
    /// Host address (as a number: a port keeps its scratch list of these
    /// between batches, and moves between threads).
    ptr: usize,
    len: usize,
}

/// One split virtqueue, translated for a batch.
pub(crate) struct Ring<'m> {
    map: &'m GuestMap,
    desc: *mut u8,
    avail: *mut u8,
    used: *mut u8,
    size: u16,
    /// `size - 1`: split rings are a power of two long, so an index is
    /// reduced with a mask (a 16-bit division per ring access was 5% of
    /// the port's receive time).
    mask: u16,
    /// The next available entry to take, and used entry to fill.
    pub next_avail: u16,
    pub next_used: u16,
    avail_idx: u16,
}

impl<'m> Ring<'m> {
    /// The ring of `q` in `map`, or `None` if its areas are not in the
    /// guest memory, not aligned as the spec requires, or the queue's
    /// size is not a power of two (zero included), as split rings' must be.
    pub fn new(map: &'m GuestMap, q: &Queue) -> Option<Ring<'m>> {
        let size = q.size();
        if !size.is_power_of_two() {
            return None;
        }
        let n = u64::from(size);
        let desc = map.host(q.desc_table(), 16 * n)?;
        let avail = map.host(q.avail_ring(), 6 + 2 * n)?;
        let used = map.host(q.used_ring(), 6 + 8 * n)?;
        // The host addresses, not only the guest's: a memory table may map
        // a region at any offset.
        if !(desc as usize).is_multiple_of(16)
            || !(avail as usize).is_multiple_of(2)
            || !(used as usize).is_multiple_of(4)
        {
            return None;
        }
        Some(Ring {
            map,
            desc,
            avail,
            used,
            size,
            mask: size - 1,
            next_avail: q.next_avail(),
            next_used: q.next_used(),
            avail_idx: q.next_avail(),
        })
    }

    /// Hands the batch's positions back to the queue.
    pub fn store(&self, q: &mut Queue) {
        q.set_next_avail(self.next_avail);
        q.set_next_used(self.next_used);
    }

    fn idx_u16(&self, base: *mut u8, off: usize) -> &AtomicU16 {
        // `base` is the avail or used ring, translated in `new` for its
        // whole length (6 + ring entries), so `off` (0, 2, or a slot of the
        // ring) is inside the mapping, which `map` keeps alive for 'm. The
        // ring base is 2-aligned (checked in `new`; for the used ring
        // 4-aligned) and `off` is even, so the u16 is aligned.
        // SAFETY: in bounds of a live mapping and aligned; the guest changes
        // it concurrently, hence the atomic.
        unsafe { AtomicU16::from_ptr(base.add(off).cast()) }
    }

    /// Makes the batch start where the ring itself says the device is,
    /// if the queue's positions disagree with it; returns the positions it
    /// replaced, `(next_avail, next_used)`, if it did.
    ///
    /// The port returns every chain it takes within the batch that took
    /// it, in order, so between batches the device has used exactly what
    /// it took: `next_avail == next_used == used->idx`. Positions that
    /// break this came from the control plane, and only one case makes
    /// them: a frontend whose device outlived the backend's previous
    /// connection (the switch restarted or was killed, so nobody asked it
    /// for `GET_VRING_BASE`). DPDK's `net_virtio_user` then sends
    /// `SET_VRING_BASE` 0, and `vhost-user-backend` takes `next_used` from
    /// the ring at `SET_VRING_ADDR`: the port would take "available"
    /// chains from slot 0 on while marking used entries from `used->idx`
    /// on. A driver that recycles its buffers in ring order (DPDK's
    /// in-order path) then reads buffers the port never wrote (zeroed
    /// frames of the right length), and the transmit queue replays a whole
    /// ring's worth of stale frames. The ring's used index is what the
    /// driver has seen completed, so both positions resume from it (as
    /// DPDK's vhost library and QEMU's libvhost-user do); a chain the old
    /// connection took but never returned is taken again.
    pub fn take_over_positions(&mut self) -> Option<(u16, u16)> {
        let used = self.ring_used_idx();
        if self.next_avail == used && self.next_used == used {
            return None;
        }
        let was = (self.next_avail, self.next_used);
        self.next_avail = used;
        self.next_used = used;
        self.avail_idx = used;
        Some(was)
    }

    /// The used index as the ring holds it (what the driver sees).
    pub fn ring_used_idx(&self) -> u16 {
        self.idx_u16(self.used, 2).load(Ordering::Acquire)
    }

    /// Refreshes the guest's available index; returns how many entries
    /// are waiting.
    pub fn poll_avail(&mut self) -> u16 {
        self.avail_idx = self.idx_u16(self.avail, 2).load(Ordering::Acquire);
        self.avail_idx.wrapping_sub(self.next_avail)
    }

    /// Takes the next available chain's head, if the last poll saw one.
    pub fn pop(&mut self) -> Option<u16> {
        if self.next_avail == self.avail_idx {
            return None;
        }
        let slot = 4 + 2 * usize::from(self.next_avail & self.mask);
        let head = self.idx_u16(self.avail, slot).load(Ordering::Relaxed);
        self.next_avail = self.next_avail.wrapping_add(1);
        Some(head)
    }

    /// Puts `n` popped chains back (their frame did not fit).
    pub fn unpop(&mut self, n: u16) {
        self.next_avail = self.next_avail.wrapping_sub(n);
    }

    /// Descriptor `i`: (guest address, length, flags, next).
    fn desc(&self, i: u16) -> (u64, u32, u16, u16) {
        let at = 16 * usize::from(i & self.mask);
        let mut raw = [0u8; 16];
        // The descriptor table was translated for 16 * size bytes and
        // `at + 16` is at most that; `raw` is a local buffer. The guest may
        // be writing it (it must not, while the chain is ours): we get some
        // 16 bytes, checked like any guest input by the callers.
        // SAFETY: source in bounds of a live mapping, destination local.
        unsafe { std::ptr::copy_nonoverlapping(self.desc.add(at), raw.as_mut_ptr(), 16) };
        (
            u64::from_le_bytes(raw[0..8].try_into().unwrap()),
            u32::from_le_bytes(raw[8..12].try_into().unwrap()),
            u16::from_le_bytes(raw[12..14].try_into().unwrap()),
            u16::from_le_bytes(raw[14..16].try_into().unwrap()),
        )
    }

    /// The buffers of chain `head` into `segs` (cleared first): all must
    /// be device-writable (`writable`) or all device-readable, inside the
    /// guest memory, at most `size` of them, with no indirect table.
    /// Returns their total length, or `None` for a malformed chain.
    pub fn chain(&self, head: u16, writable: bool, segs: &mut Vec<Seg>) -> Option<usize> {
        segs.clear();
        if head >= self.size {
            return None;
        }
        let (mut i, mut total) = (head, 0usize);
        for _ in 0..self.size {
            let (addr, len, flags, next) = self.desc(i);
            if flags & DESC_F_INDIRECT != 0 || (flags & DESC_F_WRITE != 0) != writable {
                return None;
            }
            let ptr = self.map.host(addr, u64::from(len))?;
            segs.push(Seg { ptr: ptr as usize, len: len as usize });
            total += len as usize;
            if flags & DESC_F_NEXT == 0 {
                return Some(total);
            }
            if next >= self.size {
                return None;
            }
            i = next;
        }
        None // a loop
    }

    /// Marks chain `head` used, with `len` bytes written into it.
    pub fn push_used(&mut self, head: u16, len: u32) {
        let at = 4 + 8 * usize::from(self.next_used & self.mask);
        let mut e = [0u8; 8];
        e[..4].copy_from_slice(&u32::from(head).to_le_bytes());
        e[4..].copy_from_slice(&len.to_le_bytes());
        // The used ring was translated for 6 + 8 * size bytes and `at + 8`
        // is within it; the driver does not read this entry before
        // `publish_used` moves the index past it.
        // SAFETY: destination in bounds of a live mapping, source local.
        unsafe { std::ptr::copy_nonoverlapping(e.as_ptr(), self.used.add(at), 8) };
        self.next_used = self.next_used.wrapping_add(1);
    }

    /// Makes the used entries pushed so far visible to the guest.
    pub fn publish_used(&self) {
        self.idx_u16(self.used, 2).store(self.next_used, Ordering::Release);
    }

    /// Asks the guest not to kick this queue (the port polls it).
    pub fn suppress_kicks(&self) {
        let f = self.idx_u16(self.used, 0);
        let v = f.load(Ordering::Relaxed);
        if v & USED_F_NO_NOTIFY == 0 {
            f.store(v | USED_F_NO_NOTIFY, Ordering::Relaxed);
        }
    }

    /// Whether the guest wants its call eventfd signalled for used
    /// buffers (it did not set `VRING_AVAIL_F_NO_INTERRUPT`). Read after
    /// the used index was published.
    pub fn wants_call(&self) -> bool {
        fence(Ordering::SeqCst);
        self.idx_u16(self.avail, 0).load(Ordering::Relaxed) & AVAIL_F_NO_INTERRUPT == 0
    }
}

/// Copies the bytes of `segs` (found by [`Ring::chain`] in this batch, its
/// map still held) from offset `skip` on into `dst` (as many as fit).
/// Returns how many bytes it copied.
pub(crate) fn read_segs(segs: &[Seg], mut skip: usize, dst: &mut [u8]) -> usize {
    let mut at = 0;
    for s in segs {
        if at == dst.len() {
            break;
        }
        if skip >= s.len {
            skip -= s.len;
            continue;
        }
        let n = (s.len - skip).min(dst.len() - at);
        // `s` was checked to lie inside a mapped guest region, and the
        // `GuestMap` it was found in is alive for the batch (callers use
        // segments only between `Ring::chain` and the end of the batch);
        // `skip + n <= s.len`, and `dst[at..at + n]` is in bounds. Guest
        // memory is shared, never a Rust reference, so it cannot overlap
        // `dst`.
        // SAFETY: both ranges in bounds and live, and disjoint.
        unsafe { std::ptr::copy_nonoverlapping((s.ptr as *const u8).add(skip), dst.as_mut_ptr().add(at), n) };
        at += n;
        skip = 0;
    }
    at
}

/// The first two bytes of the chain `segs` (a virtio-net header's `flags`
/// and `gso_type`), read in place when the first buffer holds them (a
/// two-byte copy through `read_segs` was a call into libc per frame).
#[inline]
pub(crate) fn read_hdr2(segs: &[Seg]) -> [u8; 2] {
    match segs.first() {
        Some(s) if s.len >= 2 => {
            // `s` lies inside a mapped guest region that is alive for the
            // batch (as in `read_segs`), and is at least 2 bytes long.
            // SAFETY: in bounds of a live mapping; unaligned read of plain bytes.
            unsafe { std::ptr::read_unaligned(s.ptr as *const [u8; 2]) }
        }
        _ => {
            let mut h = [0u8; 2];
            read_segs(segs, 0, &mut h);
            h
        }
    }
}

/// Writes [`net_hdr`]`(num_buffers)` at the start of the chain `segs`.
/// When the first buffer holds it, it is compared in place and stored only
/// where it differs. A driver that recycles its receive buffers finds the
/// header it was last given there (no offloads, the same `num_buffers`),
/// and a line the port only reads stays shared with the guest's core: a
/// store would take it away and the guest's read of the header would
/// fetch it back, two cross-core transfers per frame. DPDK's vhost library
/// writes the header's fields the same way. Building the header on the
/// stack and copying it with `write_segs` cost a libc call and a stalled
/// load per frame.
#[inline]
pub(crate) fn write_hdr(segs: &[Seg], num_buffers: u16) {
    match segs.first() {
        Some(s) if s.len >= 12 => {
            let v = (u32::from(num_buffers) << 16).to_le();
            // `s` lies inside a mapped guest region alive for the batch,
            // device-writable and ours until published used (as in
            // `write_segs`), and holds at least 12 bytes.
            // SAFETY: both loads and stores in bounds of a live, writable
            // mapping; unaligned accesses of plain integers.
            unsafe {
                let (lo, hi) = (s.ptr as *mut u64, (s.ptr + 8) as *mut u32);
                if std::ptr::read_unaligned(lo) != 0 {
                    std::ptr::write_unaligned(lo, 0);
                }
                if std::ptr::read_unaligned(hi) != v {
                    std::ptr::write_unaligned(hi, v);
                }
            }
        }
        _ => {
            write_segs(segs, 0, &net_hdr(num_buffers));
        }
    }
}

/// The 12-byte virtio-net header the port writes: all zero (no offloads)
/// but for `num_buffers` (bytes 10..12, little endian).
pub(crate) fn net_hdr(num_buffers: u16) -> [u8; 12] {
    let mut h = [0u8; 12];
    h[10..12].copy_from_slice(&num_buffers.to_le_bytes());
    h
}

/// Copies `src` into the bytes of `segs` from offset `skip` on (as many as
/// fit); returns how many were written.
pub(crate) fn write_segs(segs: &[Seg], mut skip: usize, src: &[u8]) -> usize {
    let mut at = 0;
    for s in segs {
        if at == src.len() {
            break;
        }
        if skip >= s.len {
            skip -= s.len;
            continue;
        }
        let n = (s.len - skip).min(src.len() - at);
        // SAFETY: as in `read_segs`; the chain is device-writable and
        // ours until it is published as used.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr().add(at), (s.ptr as *mut u8).add(skip), n) };
        at += n;
        skip = 0;
    }
    at
}

/// How many bytes at the start of a chain are prefetched before a batch's
/// copies: a small frame whole (its virtio-net header usually sits in the
/// cache line before the frame's first byte), a large one's first lines,
/// after which the hardware prefetcher follows the stream.
pub(crate) const PREFETCH_BYTES: usize = 256;

/// Starts fetching the cache lines that hold the first `bytes` bytes of
/// the chain `segs`: for writing those holding a byte at or after chain
/// offset `write_from`, for reading the others. A guest transmit chain is
/// only read (`write_from` past its end); a receive chain about to take a
/// frame is written after its virtio-net header, whose line is only read
/// ([`write_hdr`] usually leaves it as it is).
#[inline]
pub(crate) fn prefetch_segs(segs: &[Seg], bytes: usize, write_from: usize) {
    let (mut left, mut at) = (bytes, 0usize);
    for s in segs {
        if left == 0 {
            break;
        }
        let n = s.len.min(left);
        left -= n;
        let end = s.ptr + n;
        // The address in this segment from which lines are for writing.
        let w = s.ptr.saturating_add(write_from.saturating_sub(at));
        let mut line = s.ptr & !63;
        while line < end {
            prefetch_line(line, line + 64 > w);
            line += 64;
        }
        at += n;
    }
}

#[inline]
fn prefetch_line(addr: usize, write: bool) {
    // `prefetchw` is written out because `_mm_prefetch::<_MM_HINT_ET0>`
    // compiles to a plain read prefetch unless the whole build targets
    // `prfchw`: the line then arrives shared, and the store that follows
    // fetches it a second time from the core that owns it (the guest's,
    // which wrote the buffer last). CPUs without PRFCHW run it as a no-op.
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint: it never faults and changes no memory,
    // whatever the address.
    unsafe {
        if write {
            std::arch::asm!("prefetchw byte ptr [{0}]", in(reg) addr, options(nostack, preserves_flags, readonly));
        } else {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(addr as *const i8)
        }
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (addr, write);
}

#[cfg(test)]
mod tests {
    use super::*;
    use vm_memory::{Bytes, GuestAddress};

    const DESC: u64 = 0x1000;
    const AVAIL: u64 = 0x2000;
    const USED: u64 = 0x3000;
    const SIZE: u16 = 8;

    /// 64 KiB of guest memory and a queue of 8 entries in it, as a driver
    /// would set them up.
    fn setup() -> (Arc<GuestMemoryMmap>, Queue) {
        let mem = Arc::new(GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), 0x10000)]).unwrap());
        let mut q = Queue::new(SIZE).unwrap();
        q.set_size(SIZE);
        q.set_desc_table_address(Some(DESC as u32), Some(0));
        q.set_avail_ring_address(Some(AVAIL as u32), Some(0));
        q.set_used_ring_address(Some(USED as u32), Some(0));
        q.set_ready(true);
        (mem, q)
    }

    fn desc(mem: &GuestMemoryMmap, i: u16, addr: u64, len: u32, flags: u16, next: u16) {
        let at = GuestAddress(DESC + 16 * u64::from(i));
        mem.write_obj(addr.to_le(), at).unwrap();
        mem.write_obj(len.to_le(), at.unchecked_add(8)).unwrap();
        mem.write_obj(flags.to_le(), at.unchecked_add(12)).unwrap();
        mem.write_obj(next.to_le(), at.unchecked_add(14)).unwrap();
    }

    /// Offers chains starting at `heads`, in order.
    fn offer(mem: &GuestMemoryMmap, heads: &[u16]) {
        for (k, &h) in heads.iter().enumerate() {
            mem.write_obj(h.to_le(), GuestAddress(AVAIL + 4 + 2 * k as u64)).unwrap();
        }
        mem.write_obj((heads.len() as u16).to_le(), GuestAddress(AVAIL + 2)).unwrap();
    }

    use vm_memory::Address;

    #[test]
    fn chains_are_read_in_place_and_returned_used() {
        let (mem, mut q) = setup();
        mem.write_slice(b"hello, ", GuestAddress(0x4000)).unwrap();
        mem.write_slice(b"world", GuestAddress(0x5000)).unwrap();
        desc(&mem, 0, 0x4000, 7, DESC_F_NEXT, 3);
        desc(&mem, 3, 0x5000, 5, 0, 0);
        offer(&mem, &[0]);
        let map = GuestMap::new(mem.clone());
        let mut ring = Ring::new(&map, &q).unwrap();
        assert_eq!(ring.poll_avail(), 1);
        let head = ring.pop().unwrap();
        let mut segs = Vec::new();
        assert_eq!(ring.chain(head, false, &mut segs), Some(12));
        let mut out = [0u8; 12];
        read_segs(&segs, 0, &mut out);
        assert_eq!(&out, b"hello, world");
        let mut tail = [0u8; 4];
        read_segs(&segs, 8, &mut tail);
        assert_eq!(&tail, b"orld");
        assert_eq!(ring.pop(), None);
        ring.push_used(head, 0);
        ring.publish_used();
        ring.store(&mut q);
        assert_eq!((q.next_avail(), q.next_used()), (1, 1));
        let idx: u16 = mem.read_obj(GuestAddress(USED + 2)).unwrap();
        let id: u32 = mem.read_obj(GuestAddress(USED + 4)).unwrap();
        assert_eq!((u16::from_le(idx), u32::from_le(id)), (1, 0));
    }

    #[test]
    fn malformed_chains_are_refused() {
        let (mem, q) = setup();
        let map = GuestMap::new(mem.clone());
        let ring = Ring::new(&map, &q).unwrap();
        let mut segs = Vec::new();
        // A buffer beyond the guest's memory.
        desc(&mem, 0, 0xfff0, 0x20, 0, 0);
        assert_eq!(ring.chain(0, false, &mut segs), None);
        // A loop.
        desc(&mem, 1, 0x4000, 8, DESC_F_NEXT, 2);
        desc(&mem, 2, 0x4100, 8, DESC_F_NEXT, 1);
        assert_eq!(ring.chain(1, false, &mut segs), None);
        // An indirect table (not offered).
        desc(&mem, 3, 0x4000, 16, DESC_F_INDIRECT, 0);
        assert_eq!(ring.chain(3, false, &mut segs), None);
        // A device-writable buffer where the device must read, and back.
        desc(&mem, 4, 0x4000, 8, DESC_F_WRITE, 0);
        assert_eq!(ring.chain(4, false, &mut segs), None);
        assert_eq!(ring.chain(4, true, &mut segs), Some(8));
        // A next index or head outside the table.
        desc(&mem, 5, 0x4000, 8, DESC_F_NEXT, SIZE);
        assert_eq!(ring.chain(5, false, &mut segs), None);
        assert_eq!(ring.chain(SIZE, false, &mut segs), None);
    }

    #[test]
    fn rings_outside_memory_are_refused() {
        // (Misaligned ring addresses never get this far: the queue refuses
        // them when the frontend sets them.)
        let (mem, mut q) = setup();
        let map = GuestMap::new(mem);
        q.set_used_ring_address(Some(0xfff8), Some(0));
        assert!(Ring::new(&map, &q).is_none(), "used ring past the end");
    }

    #[test]
    fn ring_indices_wrap_at_the_ring_size() {
        let (mem, mut q) = setup();
        // The driver's indices run freely over u16; slots repeat every SIZE.
        q.set_next_avail(u16::MAX - 1);
        q.set_next_used(u16::MAX - 1);
        desc(&mem, 3, 0x4000, 4, 0, 0);
        desc(&mem, 5, 0x4100, 4, 0, 0);
        // Slots (u16::MAX - 1) % 8 = 6 and u16::MAX % 8 = 7 hold heads 3, 5.
        mem.write_obj(3u16.to_le(), GuestAddress(AVAIL + 4 + 2 * 6)).unwrap();
        mem.write_obj(5u16.to_le(), GuestAddress(AVAIL + 4 + 2 * 7)).unwrap();
        mem.write_obj(u16::MAX.wrapping_add(1).to_le(), GuestAddress(AVAIL + 2)).unwrap();
        let map = GuestMap::new(mem.clone());
        let mut ring = Ring::new(&map, &q).unwrap();
        assert_eq!(ring.poll_avail(), 2);
        assert_eq!((ring.pop(), ring.pop(), ring.pop()), (Some(3), Some(5), None));
        ring.push_used(3, 0);
        ring.push_used(5, 0);
        ring.publish_used();
        let id: u32 = mem.read_obj(GuestAddress(USED + 4 + 8 * 7)).unwrap();
        let idx: u16 = mem.read_obj(GuestAddress(USED + 2)).unwrap();
        assert_eq!((u32::from_le(id), u16::from_le(idx)), (5, 0));
    }

    /// A frontend whose device kept running while the backend restarted
    /// says `SET_VRING_BASE` 0 while its ring stands at 40: the batch
    /// resumes at the ring's used index, so the next chain filled is the
    /// one in the slot the driver reads next, and its used entry lands
    /// there. Positions that agree with the ring are left alone.
    #[test]
    fn positions_out_of_step_with_the_ring_resume_from_it() {
        let (mem, mut q) = setup();
        mem.write_obj(40u16.to_le(), GuestAddress(USED + 2)).unwrap();
        // The driver made slots 40..44 available, heads 0..4 (40 % 8 = 0).
        for k in 0..4u16 {
            mem.write_obj(k.to_le(), GuestAddress(AVAIL + 4 + 2 * u64::from((40 + k) % SIZE))).unwrap();
            desc(&mem, k, 0x4000 + 0x100 * u64::from(k), 64, DESC_F_WRITE, 0);
        }
        mem.write_obj(44u16.to_le(), GuestAddress(AVAIL + 2)).unwrap();
        q.set_next_avail(0);
        q.set_next_used(40);
        let map = GuestMap::new(mem.clone());
        let mut ring = Ring::new(&map, &q).unwrap();
        assert_eq!(ring.take_over_positions(), Some((0, 40)));
        assert_eq!(ring.poll_avail(), 4, "only what the driver made available since");
        let head = ring.pop().unwrap();
        assert_eq!(head, 0);
        ring.push_used(head, 64);
        ring.publish_used();
        ring.store(&mut q);
        assert_eq!((q.next_avail(), q.next_used()), (41, 41));
        let id: u32 = mem.read_obj(GuestAddress(USED + 4)).unwrap();
        assert_eq!(u32::from_le(id), 0, "used entry in slot 40 % 8 = 0");
        // In step now: nothing to take over.
        let mut ring = Ring::new(&map, &q).unwrap();
        assert_eq!(ring.take_over_positions(), None);
    }

    #[test]
    fn kicks_suppressed_and_interrupt_wishes_read() {
        let (mem, q) = setup();
        let map = GuestMap::new(mem.clone());
        let ring = Ring::new(&map, &q).unwrap();
        assert!(ring.wants_call());
        mem.write_obj(AVAIL_F_NO_INTERRUPT.to_le(), GuestAddress(AVAIL)).unwrap();
        assert!(!ring.wants_call());
        ring.suppress_kicks();
        let f: u16 = mem.read_obj(GuestAddress(USED)).unwrap();
        assert_eq!(u16::from_le(f) & USED_F_NO_NOTIFY, USED_F_NO_NOTIFY);
    }

    #[test]
    fn writes_spread_over_a_chain() {
        let (mem, _q) = setup();
        let map = GuestMap::new(mem.clone());
        let segs = [
            Seg { ptr: map.host(0x4000, 4).unwrap() as usize, len: 4 },
            Seg { ptr: map.host(0x5000, 8).unwrap() as usize, len: 8 },
        ];
        assert_eq!(write_segs(&segs, 2, b"abcdefgh"), 8);
        let mut a = [0u8; 4];
        let mut b = [0u8; 8];
        mem.read_slice(&mut a, GuestAddress(0x4000)).unwrap();
        mem.read_slice(&mut b, GuestAddress(0x5000)).unwrap();
        assert_eq!(&a, b"\0\0ab");
        assert_eq!(&b, b"cdefgh\0\0");
    }

    #[test]
    fn headers_in_place_and_split() {
        let (mem, _q) = setup();
        let map = GuestMap::new(mem.clone());
        mem.write_slice(&[0xaa; 16], GuestAddress(0x4000)).unwrap();
        mem.write_slice(&[0xaa; 16], GuestAddress(0x5000)).unwrap();
        mem.write_slice(&[0xaa; 16], GuestAddress(0x6000)).unwrap();
        // In place: one buffer holds the header.
        let one = [Seg { ptr: map.host(0x4000, 16).unwrap() as usize, len: 16 }];
        write_hdr(&one, 0x0302);
        let mut h = [0u8; 14];
        mem.read_slice(&mut h, GuestAddress(0x4000)).unwrap();
        assert_eq!(h, [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 3, 0xaa, 0xaa]);
        assert_eq!(read_hdr2(&one), [0, 0]);
        // Written only where stale (a recycled buffer): a flag byte, then
        // only `num_buffers`, then nothing; each time the same header.
        for stale in [&[(0u64, 1u8)][..], &[(11, 9)], &[]] {
            for &(at, v) in stale {
                mem.write_slice(&[v], GuestAddress(0x4000 + at)).unwrap();
            }
            write_hdr(&one, 0x0302);
            mem.read_slice(&mut h, GuestAddress(0x4000)).unwrap();
            assert_eq!(h, [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 3, 0xaa, 0xaa]);
        }
        // Split over two buffers: the same bytes, nothing past them.
        let two = [
            Seg { ptr: map.host(0x5000, 1).unwrap() as usize, len: 1 },
            Seg { ptr: map.host(0x6000, 16).unwrap() as usize, len: 16 },
        ];
        mem.write_slice(&[7], GuestAddress(0x5000)).unwrap();
        mem.write_slice(&[9], GuestAddress(0x6000)).unwrap();
        assert_eq!(read_hdr2(&two), [7, 9]);
        write_hdr(&two, 1);
        let (mut a, mut b) = ([0u8; 2], [0u8; 13]);
        mem.read_slice(&mut a, GuestAddress(0x5000)).unwrap();
        mem.read_slice(&mut b, GuestAddress(0x6000)).unwrap();
        assert_eq!(a, [0, 0xaa]);
        assert_eq!(b, [0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0xaa, 0xaa]);
    }
}
