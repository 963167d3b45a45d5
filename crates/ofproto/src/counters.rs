//! Interned counter lists.
//!
//! A translation lists the counters its megaflow's packets are credited to:
//! every rule it matched, each table it looked up and matched in, group
//! buckets. Through OVN's pipeline that is 100-400 of them, and most
//! megaflows share their list with many others: every flow from one VM to
//! another, or every unknown destination of one logical switch, goes
//! through the same rules. So the lists are interned: a translation that
//! went through the same objects as an earlier one, still alive, gets that
//! list back (one reference count) instead of a new list (one per counter,
//! each an atomic add, and as many atomic subtractions when the megaflow
//! goes). The datapath, in turn, sums the packets of all megaflows sharing
//! a list and credits each counter once per push (see `dpif::Pmd`).
//!
//! The table holds weak references, so a list lives exactly as long as a
//! megaflow (or a translation in flight) holds it; dead entries are dropped
//! whenever a shard has doubled since it was last cleaned. Sixteen shards,
//! each behind its own mutex, keep poll threads that translate at the same
//! time from waiting on each other.

use dpif::{CounterRef, CounterSet, FlowCounters};
use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::{Arc, Mutex, Weak};

const SHARDS: usize = 16;

#[derive(Default)]
struct Shard {
    /// Hash of the counters' addresses -> the lists with that hash.
    /// (The keys are already mixed: the map uses them as they are, where
    /// SipHash was 1.6% of a poll thread setting up OVN megaflows.)
    lists: HashMap<u64, Vec<Weak<[CounterRef]>>, BuildHasherDefault<classifier::PassThrough>>,
    /// Entries, and entries after the last clean-up.
    n: usize,
    n_after_clean: usize,
}

#[derive(Default)]
pub(crate) struct CounterSets {
    shards: [Mutex<Shard>; SHARDS],
}

/// The hash of a list of counters (their addresses, in order). Four lanes
/// mixed independently: one chain of multiplies over OVN's 100-400
/// counters waited on itself at every step (half of interning a list).
fn hash_list(counters: &[&Arc<FlowCounters>]) -> u64 {
    #[inline(always)]
    fn mix(h: u64, c: &Arc<FlowCounters>) -> u64 {
        (h ^ Arc::as_ptr(c) as usize as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(23)
    }
    let (mut a, mut b, mut c, mut d) =
        (0x243f_6a88_85a3_08d3u64, 0x1319_8a2e_0370_7344u64, 0xa409_3822_299f_31d0u64, 0x082e_fa98_ec4e_6c89u64);
    let mut chunks = counters.chunks_exact(4);
    for q in &mut chunks {
        a = mix(a, q[0]);
        b = mix(b, q[1]);
        c = mix(c, q[2]);
        d = mix(d, q[3]);
    }
    for x in chunks.remainder() {
        a = mix(a, x);
    }
    let h = a ^ b.rotate_left(16) ^ c.rotate_left(32) ^ d.rotate_left(48) ^ counters.len() as u64;
    h.wrapping_mul(0xff51_afd7_ed55_8ccd) ^ (h >> 29)
}

impl CounterSets {
    /// The shared list of exactly `counters`, in this order.
    pub(crate) fn get(&self, counters: &[&Arc<FlowCounters>]) -> CounterSet {
        if counters.is_empty() {
            return CounterSet::default();
        }
        let h = hash_list(counters);
        let mut shard = self.shards[(h >> 52) as usize % SHARDS].lock().unwrap_or_else(|e| e.into_inner());
        let same =
            |l: &[CounterRef]| l.len() == counters.len() && l.iter().zip(counters).all(|(x, y)| Arc::ptr_eq(&x.0, y));
        if let Some(found) = shard.lists.get(&h).and_then(|v| v.iter().filter_map(Weak::upgrade).find(|l| same(l))) {
            return found;
        }
        let list: CounterSet = counters.iter().map(|c| CounterRef(Arc::clone(c))).collect();
        shard.lists.entry(h).or_default().push(Arc::downgrade(&list));
        shard.n += 1;
        if shard.n >= 2 * shard.n_after_clean.max(64) {
            shard.lists.retain(|_, v| {
                v.retain(|w| w.strong_count() > 0);
                !v.is_empty()
            });
            shard.n = shard.lists.values().map(Vec::len).sum();
            shard.n_after_clean = shard.n;
        }
        list
    }

    /// Lists alive now (for tests).
    #[cfg(test)]
    fn live(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap().lists.values().flatten().filter(|w| w.strong_count() > 0).count())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_lists_are_shared_and_dead_ones_forgotten() {
        let sets = CounterSets::default();
        let cs: Vec<Arc<FlowCounters>> = (0..4).map(|_| Arc::new(FlowCounters::default())).collect();
        let a = sets.get(&[&cs[0], &cs[1], &cs[2]]);
        let b = sets.get(&[&cs[0], &cs[1], &cs[2]]);
        assert!(Arc::ptr_eq(&a, &b), "the same counters in the same order share one list");
        let c = sets.get(&[&cs[2], &cs[1], &cs[0]]);
        assert!(!Arc::ptr_eq(&a, &c), "another order is another list");
        let d = sets.get(&[&cs[0], &cs[1]]);
        assert_eq!((a.len(), d.len()), (3, 2));
        assert_eq!(Arc::strong_count(&cs[3]), 1, "counters not listed are not held");
        assert_eq!(sets.live(), 3);
        drop((a, b, c));
        assert_eq!(sets.live(), 1, "a list lives while someone holds it");
        // Dead entries are cleaned up as new lists come.
        let many: Vec<_> = (0..3000).map(|_| Arc::new(FlowCounters::default())).collect();
        for m in &many {
            drop(sets.get(&[m]));
        }
        let stored: usize = sets.shards.iter().map(|s| s.lock().unwrap().n).sum();
        assert!(stored < 1500, "dead lists are dropped ({stored} stored)");
        assert!(sets.get(&[]).is_empty());
    }
}
