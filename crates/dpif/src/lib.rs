//! # dpif: the fast path
//!
//! One [`Pmd`] per poll thread caches the slow path's answers so that
//! almost no packet needs the OpenFlow pipeline:
//!
//! 1. **extract** the flow key (malformed packets are dropped and counted
//!    by reason);
//! 2. the **exact-match cache** ([`emc`]): full key -> megaflow, filled
//!    probabilistically so a flood of short flows cannot thrash it;
//! 3. the **megaflow cache** ([`dpcls`]): wildcarded entries, one subtable
//!    per mask, subtables ranked by hits;
//! 4. on a miss, an **upcall**: the slow path ([`Upcall`]) translates the
//!    key into datapath actions plus the megaflow mask, which is installed;
//! 5. **execute** the actions ([`execute`]), grouping outputs per port for
//!    the whole batch.
//!
//! **Correctness property**: a packet served from a cache gets exactly the
//! actions a fresh translation would give it. Translation guarantees it
//! for the rules of the moment (its mask covers every bit it consulted);
//! when rules change, the slow path bumps its generation and every
//! megaflow is *revalidated before its next use*: its creating key is
//! re-translated, and it is kept only if the actions are the same and the
//! new mask is within its own (the proof is at `Pmd::validate` in
//! [`pmd`]). So a stale megaflow is never used, and no rule change stalls
//! the poll thread with a sweep of the whole cache ([`Pmd::revalidate_all`]
//! exists for callers that want one anyway). The EMC needs no sweep: its
//! entries name a megaflow slot *and* that slot's version, which removal
//! bumps.
//!
//! **Algorithm per batch**: classify every packet (extract; EMC by full
//! key; megaflow subtables in hit order, each hashing only its mask's
//! words; upcall and install on a miss, within `megaflow_limit`), execute
//! its actions, queueing outputs per port, then hand each port's queue to
//! the [`Sink`] once. Subtables are re-ranked at most once a second and
//! idle megaflows expire in [`Pmd::sweep`]; both go by the caller's `now`.
//!
//! **Threads**: a `Pmd` is owned by one thread and shares nothing; it
//! takes `now` as an argument and makes no system calls.
#![deny(unsafe_code)]

pub mod actions;
pub mod dpcls;
pub mod emc;
pub mod execute;
pub mod pmd;

pub mod meter;
pub use actions::{
    format_actions, CounterRef, CounterSet, DpAction, FlowCounters, SetFields, Translation, Upcall, UserspaceExtra,
    UserspaceReason,
};
pub use execute::{OutQueues, Sink};
pub use meter::{Meter, MeterRef};

/// A shared handle on the datapath's connection tracker; equal when it is
/// the same tracker (so megaflow actions compare and hash cheaply).
#[derive(Clone)]
pub struct CtRef(pub std::sync::Arc<conntrack::Conntrack>);

impl PartialEq for CtRef {
    fn eq(&self, o: &CtRef) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &o.0)
    }
}
impl Eq for CtRef {}
impl std::hash::Hash for CtRef {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        (std::sync::Arc::as_ptr(&self.0) as usize).hash(h)
    }
}
impl std::fmt::Debug for CtRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "conntrack")
    }
}
pub use pmd::{MegaflowInfo, Pmd, PmdConfig, PmdStats, UPCALL_BUCKETS_US};
