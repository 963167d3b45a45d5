//! The bridge's lock, shaped so that rule changes never cost a packet.
//!
//! The OpenFlow bridge ([`Ofproto`]) is read by poll threads (a translation
//! per cache miss or stale megaflow) and written by the control plane (flow
//! mods, port changes). A poll thread never waits for it: it *tries* the
//! read lock, and when a writer holds it, parks the packet and carries on
//! ([`dpif::Pmd::poll_deferred`] replays the parked packets, in order, on
//! its next iterations). What keeps a parked packet from waiting long, or
//! from being dropped when the parking queue fills, is the writer's side:
//!
//! * Write sections are short: one flow mod (or one bundle) per section,
//!   and the bulk of freeing deleted rules happens in small chunks after
//!   the change is committed ([`OfprotoLock::purge_in_chunks`]).
//! * A writer lets parked packets through first. Each poll thread
//!   publishes how many packets it holds parked; before taking the write
//!   lock, a writer waits (a few microseconds typically, at most
//!   [`YIELD_MAX`]) until none are parked. So a stream of flow mods, each
//!   taking the lock briefly, cannot keep a poll thread's parked packets
//!   out forever: between two sections the parked packets get the lock.
//!
//! With both, a packet waits at most one write section plus one poll
//! iteration, and a 200,000-rule `add-flows` or `del-flows` loses nothing
//! of an unrelated stream (tests/safety.rs, bench/churn.py).
//!
//! Why not translate against an immutable snapshot (RCU)? The classifier
//! is versioned, so readers could look up at a committed version while a
//! writer stages the next; but Rust's aliasing rules need the writer's
//! `&mut` and the readers' `&` to be distinct objects, i.e. either a
//! concurrent classifier (lock-free maps) or two copies kept in step
//! (left-right). Both are much larger changes than this, for the same
//! observable result at the rates a control plane changes rules.

use ofproto::Ofproto;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{LockResult, RwLock, RwLockReadGuard, RwLockWriteGuard, TryLockResult};
use std::time::{Duration, Instant};

/// Longest a writer defers to parked packets (a poll thread that stopped
/// polling must not stop the control plane).
pub const YIELD_MAX: Duration = Duration::from_millis(20);

/// Rules freed per write section when a large delete is purged.
pub const PURGE_CHUNK: usize = 2048;

/// After freeing this many rules, the freed heap goes back to the kernel.
pub const RELEASE_AFTER: usize = 10_000;

pub struct OfprotoLock {
    lock: RwLock<Ofproto>,
    /// Packets each poll thread holds parked (written by that thread).
    parked: Vec<AtomicU32>,
}

impl OfprotoLock {
    pub fn new(of: Ofproto, n_pmd: usize) -> OfprotoLock {
        OfprotoLock { lock: RwLock::new(of), parked: (0..n_pmd).map(|_| AtomicU32::new(0)).collect() }
    }

    pub fn read(&self) -> LockResult<RwLockReadGuard<'_, Ofproto>> {
        self.lock.read()
    }

    /// What poll threads use: never waits.
    pub fn try_read(&self) -> TryLockResult<RwLockReadGuard<'_, Ofproto>> {
        self.lock.try_read()
    }

    /// The write lock, taken once no poll thread has parked packets (or
    /// after [`YIELD_MAX`]).
    pub fn write(&self) -> LockResult<RwLockWriteGuard<'_, Ofproto>> {
        self.yield_to_parked();
        self.lock.write()
    }

    fn yield_to_parked(&self) {
        if self.parked() == 0 {
            return;
        }
        let deadline = Instant::now() + YIELD_MAX;
        while self.parked() > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_micros(20));
        }
    }

    /// Packets parked by all poll threads now.
    pub fn parked(&self) -> u32 {
        self.parked.iter().map(|p| p.load(Ordering::Acquire)).sum()
    }

    /// Poll thread `pmd` publishes how many packets it holds parked.
    pub fn set_parked(&self, pmd: usize, n: usize) {
        if let Some(p) = self.parked.get(pmd) {
            let n = n.min(u32::MAX as usize) as u32;
            if p.load(Ordering::Relaxed) != n {
                p.store(n, Ordering::Release);
            }
        }
    }

    /// Frees deleted rules no reader can see any more, [`PURGE_CHUNK`] at
    /// a time, each chunk its own write section. Returns how many.
    pub fn purge_in_chunks(&self) -> usize {
        let mut total = 0;
        loop {
            let n = self.write().unwrap_or_else(|e| e.into_inner()).purge_some(PURGE_CHUNK);
            total += n;
            if n < PURGE_CHUNK {
                if total >= RELEASE_AFTER {
                    netdev_linux::sys::release_free_memory();
                }
                return total;
            }
        }
    }
}
