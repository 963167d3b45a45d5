//! The tracker's one hardware hint: start loading a cache line that a
//! later probe will read.
//!
//! A new connection's first lookup reads one bucket of a table that holds
//! millions of connections, a cache (and TLB) miss each time, and the
//! shard lock taken before it is an atomic read-modify-write, which on
//! x86 waits for earlier loads: one packet's miss cannot start before the
//! previous packet's has finished. Prefetching every bucket of a batch
//! before the batch is processed lets those misses overlap (see
//! [`crate::Conntrack::prefetch`]).
//!
//! This is the crate's only `unsafe`, a hint that cannot change the
//! program's behaviour, which is why it is allowed in a crate that does
//! not touch the kernel.
#![allow(unsafe_code)]

/// Asks the CPU to bring the cache line at `addr` into all cache levels.
/// Any address is allowed: an invalid or stale one is ignored.
#[inline]
pub(crate) fn line(addr: usize) {
    // PREFETCHT0 only hints the cache: it never faults (addresses that are
    // unmapped or not canonical are dropped), reads nothing into a
    // register and writes no memory; this pointer is never dereferenced.
    #[cfg(target_arch = "x86_64")]
    // SAFETY: sound for any address, as said above.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(addr as *const i8)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = addr;
}
