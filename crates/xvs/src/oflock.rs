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
//! * A large delete is planned under the read lock and staged in chunks
//!   of [`DELETE_CHUNK`] rules, each its own write section, then committed
//!   in one more ([`OfprotoLock::delete_in_chunks`]). Staged changes are
//!   invisible to readers (the classifier is versioned), so the delete
//!   still appears at once. Writers are serialised by a mutex held for
//!   the whole operation, so no other writer's commit can publish half of
//!   it, and its plan stays valid between sections.
//!
//! With these, a packet waits at most one write section plus one poll
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

use ofproto::{FlowModCmd, FlowSpec, Ofproto};
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{LockResult, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard, TryLockResult};
use std::time::{Duration, Instant};

/// Longest a writer defers to parked packets (a poll thread that stopped
/// polling must not stop the control plane).
pub const YIELD_MAX: Duration = Duration::from_millis(20);

/// Rules freed per write section when a large delete is purged (as a
/// commit frees at most `ofproto::bridge::COMMIT_PURGE`: 2,048 made
/// sections of 2-4 ms).
pub const PURGE_CHUNK: usize = 512;

/// After freeing this many rules, the freed heap goes back to the kernel.
pub const RELEASE_AFTER: usize = 10_000;

/// Rules a large delete stages per write section.
pub const DELETE_CHUNK: usize = 2048;

pub struct OfprotoLock {
    lock: RwLock<Ofproto>,
    /// Held by every writer for its whole change (see the module notes).
    writer: Mutex<()>,
    /// Packets each poll thread holds parked (written by that thread).
    parked: Vec<AtomicU32>,
}

/// The write lock, with the writers' mutex held until it is released.
pub struct OfWrite<'a> {
    // Released before `_writer` (fields drop in order).
    guard: RwLockWriteGuard<'a, Ofproto>,
    _writer: MutexGuard<'a, ()>,
}

impl Deref for OfWrite<'_> {
    type Target = Ofproto;
    fn deref(&self) -> &Ofproto {
        &self.guard
    }
}

impl DerefMut for OfWrite<'_> {
    fn deref_mut(&mut self) -> &mut Ofproto {
        &mut self.guard
    }
}

impl OfprotoLock {
    pub fn new(of: Ofproto, n_pmd: usize) -> OfprotoLock {
        OfprotoLock {
            lock: RwLock::new(of),
            writer: Mutex::new(()),
            parked: (0..n_pmd).map(|_| AtomicU32::new(0)).collect(),
        }
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
    pub fn write(&self) -> LockResult<OfWrite<'_>> {
        let writer = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        self.yield_to_parked();
        match self.lock.write() {
            Ok(guard) => Ok(OfWrite { guard, _writer: writer }),
            Err(e) => Err(std::sync::PoisonError::new(OfWrite { guard: e.into_inner(), _writer: writer })),
        }
    }

    /// A `Delete` or `DeleteStrict` flow mod done in short write sections
    /// (see the module notes); the same outcome as
    /// `write().flow_mod(cmd, spec)`. Returns the rules deleted and the
    /// flow-removed records it left.
    pub fn delete_in_chunks(
        &self,
        cmd: FlowModCmd,
        spec: &FlowSpec,
        now_ms: u64,
    ) -> (usize, Vec<ofproto::bridge::RemovedRule>) {
        let _writer = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let plan = self.lock.read().unwrap_or_else(|e| e.into_inner()).plan_delete(cmd, spec);
        for chunk in plan.chunks(DELETE_CHUNK) {
            self.yield_to_parked();
            let mut of = self.lock.write().unwrap_or_else(|e| e.into_inner());
            of.set_now(now_ms);
            of.stage_delete(chunk);
        }
        self.yield_to_parked();
        let mut of = self.lock.write().unwrap_or_else(|e| e.into_inner());
        if !plan.is_empty() {
            of.commit_staged();
        }
        (plan.len(), of.take_removed())
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
