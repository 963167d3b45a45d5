//! AF_XDP single-producer/single-consumer rings mapped from the kernel.
//!
//! Each ring is an array of `size` (a power of two) entries plus a
//! producer index, a consumer index and a flags word, all in memory shared
//! with the kernel. The indexes run freely and wrap at 2^32; an entry's
//! slot is `index & (size - 1)`.
//!
//! Ordering, for the side we play:
//! * producer (fill, TX): write entries, then store the producer index
//!   with Release so the kernel sees the entries before the index; read
//!   the kernel's consumer index with Acquire before reusing slots.
//! * consumer (RX, completion): load the producer index with Acquire before
//!   reading entries; store the consumer index with Release after reading
//!   them, so the kernel does not overwrite slots we are still reading.
//!
//! Indexes are cached so the shared cache lines are touched once per batch.

use crate::sys::{Mmap, RingOffset, XDP_RING_NEED_WAKEUP};
use std::io;
use std::marker::PhantomData;
use std::mem::{align_of, size_of};
use std::sync::atomic::{AtomicU32, Ordering};

struct Raw<T> {
    // Keeps the mapping alive for the pointers below.
    _map: Mmap,
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    flags: *const AtomicU32,
    entries: *mut T,
    size: u32,
    mask: u32,
}

// SAFETY: the raw pointers point into `map`, which moves with the ring; the
// ring has one user-space owner at a time (`&mut self` for every access).
unsafe impl<T: Send> Send for Raw<T> {}

impl<T: Copy> Raw<T> {
    fn new(map: Mmap, off: &RingOffset, size: u32) -> io::Result<Raw<T>> {
        let bad = |what: &str| io::Error::other(format!("AF_XDP ring: bad {what} offset from the kernel"));
        if !size.is_power_of_two() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "ring size must be a power of two"));
        }
        let len = map.size() as u64;
        for (what, o) in [("producer", off.producer), ("consumer", off.consumer), ("flags", off.flags)] {
            if o % 4 != 0 || o + 4 > len {
                return Err(bad(what));
            }
        }
        if off.desc & (align_of::<T>() as u64 - 1) != 0 || off.desc + size as u64 * size_of::<T>() as u64 > len {
            return Err(bad("descriptor"));
        }
        let base = map.as_ptr();
        // SAFETY: every offset was checked above to lie inside the mapping,
        // with the alignment of the type placed there.
        let (producer, consumer, flags, entries) = unsafe {
            (
                base.add(off.producer as usize) as *const AtomicU32,
                base.add(off.consumer as usize) as *const AtomicU32,
                base.add(off.flags as usize) as *const AtomicU32,
                base.add(off.desc as usize) as *mut T,
            )
        };
        Ok(Raw { _map: map, producer, consumer, flags, entries, size, mask: size - 1 })
    }

    #[inline]
    fn producer(&self) -> &AtomicU32 {
        // SAFETY: checked in-bounds and aligned in `new`; the mapping lives
        // as long as `self`; the kernel accesses it atomically too.
        unsafe { &*self.producer }
    }

    #[inline]
    fn consumer(&self) -> &AtomicU32 {
        // SAFETY: as for `producer`.
        unsafe { &*self.consumer }
    }

    #[inline]
    fn flags(&self) -> &AtomicU32 {
        // SAFETY: as for `producer`.
        unsafe { &*self.flags }
    }

    #[inline]
    fn read(&self, idx: u32) -> T {
        // `idx & mask` < size, and `size` entries fit in the mapping
        // (checked in `new`). Callers only read slots the kernel published
        // (Acquire on the producer index); volatile because the memory is
        // shared with the kernel.
        // SAFETY: the conditions above hold.
        unsafe { self.entries.add((idx & self.mask) as usize).read_volatile() }
    }

    #[inline]
    fn write(&mut self, idx: u32, v: T) {
        // In bounds as in `read`. Callers only write slots the
        // kernel has released (Acquire on the consumer index) and not yet
        // published.
        // SAFETY: the conditions above hold.
        unsafe { self.entries.add((idx & self.mask) as usize).write_volatile(v) }
    }
}

/// A ring user space produces into (fill ring, TX ring).
pub struct ProdRing<T> {
    raw: Raw<T>,
    cached_prod: u32,
    /// Consumer index + size: the producer may advance up to here.
    cached_limit: u32,
    _t: PhantomData<T>,
}

impl<T: Copy> ProdRing<T> {
    pub fn new(map: Mmap, off: &RingOffset, size: u32) -> io::Result<ProdRing<T>> {
        let raw = Raw::new(map, off, size)?;
        let cached_prod = raw.producer().load(Ordering::Relaxed);
        let cached_limit = raw.consumer().load(Ordering::Acquire).wrapping_add(size);
        Ok(ProdRing { raw, cached_prod, cached_limit, _t: PhantomData })
    }

    pub fn size(&self) -> u32 {
        self.raw.size
    }

    /// Free slots, refreshing the kernel's consumer index only if fewer
    /// than `want` are known to be free.
    #[inline]
    pub fn free(&mut self, want: u32) -> u32 {
        let free = self.cached_limit.wrapping_sub(self.cached_prod);
        if free >= want {
            return free;
        }
        self.cached_limit = self.raw.consumer().load(Ordering::Acquire).wrapping_add(self.raw.size);
        self.cached_limit.wrapping_sub(self.cached_prod)
    }

    /// Entries produced but not yet consumed by the kernel.
    pub fn outstanding(&mut self) -> u32 {
        self.raw.size - self.free(self.raw.size)
    }

    /// Writes entry `i` of the next batch (slot `producer + i`). `i` must
    /// be below a `free()` result obtained since the last `submit`.
    #[inline]
    pub fn set(&mut self, i: u32, v: T) {
        debug_assert!(i < self.cached_limit.wrapping_sub(self.cached_prod));
        self.raw.write(self.cached_prod.wrapping_add(i), v);
    }

    /// Publishes the first `n` entries written with `set`.
    #[inline]
    pub fn submit(&mut self, n: u32) {
        if n == 0 {
            return;
        }
        self.cached_prod = self.cached_prod.wrapping_add(n);
        self.raw.producer().store(self.cached_prod, Ordering::Release);
    }

    /// Whether the kernel asked to be woken (`XDP_USE_NEED_WAKEUP`).
    #[inline]
    pub fn needs_wakeup(&self) -> bool {
        self.raw.flags().load(Ordering::Relaxed) & XDP_RING_NEED_WAKEUP != 0
    }
}

/// A ring user space consumes from (RX ring, completion ring).
pub struct ConsRing<T> {
    raw: Raw<T>,
    cached_cons: u32,
    cached_prod: u32,
    _t: PhantomData<T>,
}

impl<T: Copy> ConsRing<T> {
    pub fn new(map: Mmap, off: &RingOffset, size: u32) -> io::Result<ConsRing<T>> {
        let raw = Raw::new(map, off, size)?;
        let cached_cons = raw.consumer().load(Ordering::Relaxed);
        let cached_prod = raw.producer().load(Ordering::Acquire);
        Ok(ConsRing { raw, cached_cons, cached_prod, _t: PhantomData })
    }

    /// The ring size, the most one `peek` can return.
    pub fn size_hint(&self) -> u32 {
        self.raw.size
    }

    /// Entries ready, up to `max`; refreshes the producer index only when
    /// the cached view has none left.
    #[inline]
    pub fn peek(&mut self, max: u32) -> u32 {
        let mut avail = self.cached_prod.wrapping_sub(self.cached_cons);
        if avail == 0 {
            self.cached_prod = self.raw.producer().load(Ordering::Acquire);
            avail = self.cached_prod.wrapping_sub(self.cached_cons);
        }
        avail.min(max)
    }

    /// Entry `i` of the batch returned by `peek`.
    #[inline]
    pub fn get(&self, i: u32) -> T {
        debug_assert!(i < self.cached_prod.wrapping_sub(self.cached_cons));
        self.raw.read(self.cached_cons.wrapping_add(i))
    }

    /// Gives the first `n` peeked slots back to the kernel.
    #[inline]
    pub fn release(&mut self, n: u32) {
        if n == 0 {
            return;
        }
        self.cached_cons = self.cached_cons.wrapping_add(n);
        self.raw.consumer().store(self.cached_cons, Ordering::Release);
    }
}
