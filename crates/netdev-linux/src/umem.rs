//! UMEM: the packet memory shared by AF_XDP sockets, and its frame pool.
//!
//! The area is `nframes` frames of `frame_size` bytes (aligned chunk mode,
//! so a descriptor's frame is `addr & !(frame_size - 1)`). Every frame is
//! at any time in exactly one place:
//!
//! * the free list (user space, unused),
//! * a [`Packet`](netdev::Packet) (user space, via a `FrameBuf`),
//! * a kernel ring of one socket: fill/RX, or TX/completion.
//!
//! Frames handed to the kernel are tagged with the socket's tag. When a
//! socket closes, the kernel forgets every frame it held for it (including
//! frames it had taken from the fill ring into private caches), so the
//! frames still tagged with that socket go back to the free list. This lets
//! ports that share a UMEM come and go without leaking frames.
//!
//! Locking: the free list is a `Mutex<Vec<u64>>` taken once per batch
//! (refilling a fill ring, reaping a completion ring, allocating TX copy
//! frames), and once per packet only when a datapath drops a received
//! packet individually. Tags are relaxed atomics written only by the thread
//! that owns the socket.

use crate::sys::{Mmap, UmemReg};
use netdev::packet::{FrameBuf, FrameOwner};
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Tag of frames owned by user space.
pub(crate) const USER: u32 = 0;

/// Size and count of UMEM frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UmemConfig {
    /// 2048 or 4096 bytes.
    pub frame_size: u32,
    pub nframes: u32,
    /// Extra bytes the kernel leaves free before received data (on top of
    /// its own XDP headroom).
    pub headroom: u32,
}

impl Default for UmemConfig {
    fn default() -> Self {
        UmemConfig { frame_size: 4096, nframes: 8192, headroom: 0 }
    }
}

pub(crate) struct Umem {
    area: Mmap,
    cfg: UmemConfig,
    shift: u32,
    free: Mutex<Vec<u64>>,
    tags: Box<[AtomicU32]>,
    /// Bound sockets as (tag, fd): a new socket shares the UMEM through
    /// any of them. Held while binding or closing a socket.
    sockets: Mutex<Vec<(u32, RawFd)>>,
    next_tag: AtomicU32,
    /// need_wakeup setting of the socket that registered the UMEM, which
    /// sharing sockets inherit.
    need_wakeup: AtomicBool,
    /// Multi-buffer packets, as the UMEM's first socket was bound.
    sg: AtomicBool,
    /// Registered with room for TX metadata in front of each packet, so
    /// sockets can ask the kernel to fill checksums (see [`Umem::reg`]).
    tx_meta: AtomicBool,
    /// Process-unique id, for logs.
    pub(crate) id: u64,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

impl Umem {
    pub(crate) fn new(cfg: UmemConfig) -> io::Result<Arc<Umem>> {
        if cfg.frame_size != 2048 && cfg.frame_size != 4096 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "UMEM frame size must be 2048 or 4096"));
        }
        if cfg.nframes == 0 || cfg.headroom >= cfg.frame_size / 2 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "bad UMEM frame count or headroom"));
        }
        let len = cfg.frame_size as usize * cfg.nframes as usize;
        let area = Mmap::anonymous(len)?;
        let free = (0..cfg.nframes as u64).rev().map(|i| i * cfg.frame_size as u64).collect();
        let tags = (0..cfg.nframes).map(|_| AtomicU32::new(USER)).collect();
        Ok(Arc::new(Umem {
            area,
            cfg,
            shift: cfg.frame_size.trailing_zeros(),
            free: Mutex::new(free),
            tags,
            sockets: Mutex::new(Vec::new()),
            next_tag: AtomicU32::new(1),
            need_wakeup: AtomicBool::new(false),
            sg: AtomicBool::new(false),
            tx_meta: AtomicBool::new(false),
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        }))
    }

    pub(crate) fn config(&self) -> UmemConfig {
        self.cfg
    }

    /// The registration; with `tx_meta`, room for `struct xsk_tx_metadata`
    /// in front of every transmitted packet (a kernel without TX metadata
    /// refuses it, and the caller registers without).
    pub(crate) fn reg(&self, tx_meta: bool) -> UmemReg {
        UmemReg {
            addr: self.area.as_ptr() as u64,
            len: self.area.size() as u64,
            chunk_size: self.cfg.frame_size,
            headroom: self.cfg.headroom,
            flags: if tx_meta { crate::sys::XDP_UMEM_TX_METADATA_LEN } else { 0 },
            tx_metadata_len: if tx_meta { crate::sys::XSK_TX_METADATA_LEN } else { 0 },
        }
    }

    pub(crate) fn set_tx_meta(&self, on: bool) {
        self.tx_meta.store(on, Ordering::Relaxed);
    }

    /// Sockets of this UMEM may put TX metadata in front of a packet.
    pub(crate) fn tx_meta(&self) -> bool {
        self.tx_meta.load(Ordering::Relaxed)
    }

    pub(crate) fn set_need_wakeup(&self, on: bool) {
        self.need_wakeup.store(on, Ordering::Relaxed);
    }

    pub(crate) fn need_wakeup(&self) -> bool {
        self.need_wakeup.load(Ordering::Relaxed)
    }

    /// Records whether the UMEM's first socket got multi-buffer
    /// (`XDP_USE_SG`); sockets sharing the UMEM inherit it.
    pub(crate) fn set_sg(&self, on: bool) {
        self.sg.store(on, Ordering::Relaxed);
    }

    pub(crate) fn sg(&self) -> bool {
        self.sg.load(Ordering::Relaxed)
    }

    pub(crate) fn new_tag(&self) -> u32 {
        self.next_tag.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn sockets(&self) -> MutexGuard<'_, Vec<(u32, RawFd)>> {
        self.sockets.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn free_list(&self) -> MutexGuard<'_, Vec<u64>> {
        self.free.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The frame holding UMEM address `addr`.
    #[inline]
    pub(crate) fn frame_of(&self, addr: u64) -> u64 {
        addr & !(self.cfg.frame_size as u64 - 1)
    }

    #[inline]
    pub(crate) fn valid_frame(&self, frame: u64) -> bool {
        (frame >> self.shift) < self.cfg.nframes as u64
    }

    #[inline]
    pub(crate) fn set_tag(&self, frame: u64, tag: u32) {
        self.tags[(frame >> self.shift) as usize].store(tag, Ordering::Relaxed);
    }

    /// Takes up to `n` free frames (one lock), appending them to `out`.
    pub(crate) fn alloc(&self, n: usize, out: &mut Vec<u64>) -> usize {
        let mut free = self.free_list();
        let k = n.min(free.len());
        let at = free.len() - k;
        out.extend(free.drain(at..));
        k
    }

    /// Returns frames to the free list (one lock).
    pub(crate) fn free_batch(&self, frames: &[u64]) {
        if !frames.is_empty() {
            self.free_list().extend_from_slice(frames);
        }
    }

    pub(crate) fn free_count(&self) -> usize {
        self.free_list().len()
    }

    /// Frees every frame still tagged `tag` (its socket is closed).
    pub(crate) fn reclaim(&self, tag: u32) -> usize {
        let mut back = Vec::new();
        for (i, t) in self.tags.iter().enumerate() {
            if t.load(Ordering::Relaxed) == tag {
                t.store(USER, Ordering::Relaxed);
                back.push((i as u64) << self.shift);
            }
        }
        self.free_batch(&back);
        back.len()
    }

    /// Starts loading the two cache lines at `addr` (a received frame's
    /// headers) into this core's cache. The kernel wrote them on another
    /// core; the switch reads them first in extraction, and without this
    /// every frame's first read waits for the line to cross cores.
    #[inline]
    pub(crate) fn prefetch(&self, addr: u64) {
        if addr + 128 > self.area.size() as u64 {
            return;
        }
        // The address is inside the area (checked above), so it points at
        // memory this process maps.
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a prefetch is a hint: it never faults and writes no memory.
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            let p = self.area.as_ptr().add(addr as usize) as *const i8;
            _mm_prefetch::<_MM_HINT_T0>(p);
            _mm_prefetch::<_MM_HINT_T0>(p.add(64));
        }
    }

    /// Wraps `frame`, just taken off an RX ring, into a `FrameBuf`.
    pub(crate) fn frame_buf(self: &Arc<Self>, frame: u64) -> FrameBuf {
        assert!(self.valid_frame(frame) && frame & (self.cfg.frame_size as u64 - 1) == 0);
        // The frame lies inside the area (asserted above). It came
        // off an RX ring, so the kernel has given it up and no other user
        // space reference to it exists until the `FrameBuf` releases it.
        // The `FrameBuf` holds an `Arc<Umem>`, which keeps the mapping alive
        // for as long as the slice exists, so the `'static` never dangles
        // while it can be used.
        // SAFETY: the conditions above hold.
        let bytes: &'static mut [u8] = unsafe {
            std::slice::from_raw_parts_mut(self.area.as_ptr().add(frame as usize), self.cfg.frame_size as usize)
        };
        FrameBuf::new(bytes, frame, self.clone() as Arc<dyn FrameOwner>)
    }

    /// Copies `data` into free `frame` at `offset`.
    /// Appends `len` bytes at `offset` of `frame` to `out`.
    pub(crate) fn read_frame(&self, frame: u64, offset: usize, len: usize, out: &mut Vec<u8>) {
        assert!(self.valid_frame(frame) && offset + len <= self.cfg.frame_size as usize);
        // The range is inside the area (asserted). The frame came off an RX
        // ring, so the kernel has given it up, and the caller frees it only
        // after this copy: nothing writes it meanwhile.
        // SAFETY: the conditions above hold.
        let bytes = unsafe { std::slice::from_raw_parts(self.area.as_ptr().add(frame as usize + offset), len) };
        out.extend_from_slice(bytes);
    }

    pub(crate) fn write_frame(&self, frame: u64, offset: usize, data: &[u8]) {
        assert!(self.valid_frame(frame) && offset + data.len() <= self.cfg.frame_size as usize);
        // The range is inside the area (asserted). The caller owns
        // `frame`: it took it from the free list, or out of a packet
        // (`FrameBuf::into_raw`), and has not handed it to the kernel or to
        // a packet (again) yet, so nothing else reads or writes it.
        // SAFETY: the conditions above hold.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.area.as_ptr().add(frame as usize + offset), data.len())
        };
    }
}

impl FrameOwner for Umem {
    fn release(&self, frame_addr: u64) {
        self.free_list().push(frame_addr);
    }
}

/// A UMEM to share between AF_XDP ports (`XDP_SHARED_UMEM`): pass clones
/// of one handle in [`crate::AfxdpConfig::shared_umem`] of every port that
/// should forward to the others without copying.
#[derive(Clone)]
pub struct UmemHandle(pub(crate) Arc<Umem>);

impl UmemHandle {
    pub fn new(cfg: UmemConfig) -> io::Result<UmemHandle> {
        Ok(UmemHandle(Umem::new(cfg)?))
    }

    pub fn config(&self) -> UmemConfig {
        self.0.cfg
    }

    /// Frames currently in the free list.
    pub fn free_frames(&self) -> usize {
        self.0.free_count()
    }

    /// Unique id of this UMEM in the process.
    pub fn id(&self) -> u64 {
        self.0.id
    }
}

impl std::fmt::Debug for UmemHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Umem#{}({:?})", self.0.id, self.0.cfg)
    }
}
