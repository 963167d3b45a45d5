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
//! for the rules of the moment; when rules change, the slow path bumps its
//! generation and every megaflow is *revalidated before its next use*
//! (see [`Pmd`]), so a stale megaflow is never used — without a pause to
//! sweep the whole cache on every change.
//!
//! **Threads**: a `Pmd` is owned by one thread and shares nothing; it
//! takes `now` as an argument and makes no system calls.
#![deny(unsafe_code)]

pub mod actions;
pub mod dpcls;
pub mod emc;
pub mod execute;
pub mod pmd;

pub use actions::{format_actions, DpAction, Translation, Upcall, UserspaceReason};
pub use execute::{OutQueues, Sink};
pub use pmd::{MegaflowInfo, Pmd, PmdConfig, PmdStats};
