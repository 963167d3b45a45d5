//! Exact-match cache: full flow key -> megaflow, 2-way set associative.
//!
//! The EMC answers the common case (a few thousand active flows) with one
//! hash and one key compare. Entries point at megaflows by slot index plus
//! the slot's version, so an entry whose megaflow was removed (or whose
//! slot was reused) is recognized as stale and ignored.
//!
//! An entry is six cache lines (the key is 312 bytes). Each entry's hash is
//! also kept in a compact array (64 KB, which stays in the L2 cache), and a
//! way is read only if its hash matches: with many short flows (a new
//! connection per packet) almost every lookup misses, and a miss then costs
//! two L2 reads instead of two reads from memory.

use flow::FlowKey;

pub const EMC_ENTRIES: usize = 8192;
const MASK: usize = EMC_ENTRIES - 1;

#[derive(Clone, Copy)]
struct Entry {
    key: FlowKey,
    hash: u64,
    flow: u32,
    version: u32,
}

pub struct Emc {
    entries: Box<[Option<Entry>]>,
    /// `hash | 1` of each occupied entry, 0 where empty.
    tags: Box<[u64]>,
}

impl Default for Emc {
    fn default() -> Self {
        Emc { entries: vec![None; EMC_ENTRIES].into_boxed_slice(), tags: vec![0; EMC_ENTRIES].into_boxed_slice() }
    }
}

impl Emc {
    #[inline]
    fn ways(hash: u64) -> [usize; 2] {
        [(hash as usize) & MASK, ((hash >> 32) as usize) & MASK]
    }

    /// (slot, version) of the megaflow cached for `key`, if any.
    #[inline]
    pub fn lookup(&self, key: &FlowKey, hash: u64) -> Option<(u32, u32)> {
        for i in Self::ways(hash) {
            if self.tags[i] != hash | 1 {
                continue;
            }
            if let Some(e) = &self.entries[i] {
                if e.hash == hash && e.key == *key {
                    return Some((e.flow, e.version));
                }
            }
        }
        None
    }

    /// Caches `key` -> megaflow, replacing an empty or the second way.
    pub fn insert(&mut self, key: &FlowKey, hash: u64, flow: u32, version: u32) {
        let [a, b] = Self::ways(hash);
        let slot = match (&self.entries[a], &self.entries[b]) {
            (Some(e), _) if e.hash == hash && e.key == *key => a,
            (_, Some(e)) if e.hash == hash && e.key == *key => b,
            (None, _) => a,
            (_, None) => b,
            _ => {
                if hash & (1 << 20) == 0 {
                    a
                } else {
                    b
                }
            }
        };
        self.entries[slot] = Some(Entry { key: *key, hash, flow, version });
        self.tags[slot] = hash | 1;
    }

    pub fn clear(&mut self) {
        self.entries.iter_mut().for_each(|e| *e = None);
        self.tags.iter_mut().for_each(|t| *t = 0);
    }

    pub fn len(&self) -> usize {
        self.entries.iter().filter(|e| e.is_some()).count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(words: &[(usize, u64)]) -> FlowKey {
        let mut k = FlowKey::ZERO;
        for &(i, v) in words {
            k.w[i] = v;
        }
        k
    }

    #[test]
    fn finds_exactly_the_key_it_holds() {
        let mut emc = Emc::default();
        let k = key(&[(0, 1), (5, 0xdead), (17, 7), (flow::key::WORDS - 1, u64::MAX)]);
        emc.insert(&k, k.hash(), 3, 9);
        assert_eq!(emc.lookup(&k, k.hash()), Some((3, 9)));
        // Each word changed alone, even under the same hash (and a hash
        // that differs only in bit 0, which the tag cannot tell apart).
        for i in 0..flow::key::WORDS {
            let mut o = k;
            o.w[i] ^= 1 << (i % 64);
            assert_eq!(emc.lookup(&o, k.hash()), None, "word {i}");
            assert_eq!(emc.lookup(&o, k.hash() ^ 1), None, "word {i}");
        }
        assert_eq!(emc.len(), 1);
    }

    #[test]
    fn reinsert_updates_collisions_replace_and_clear_empties() {
        let mut emc = Emc::default();
        let k = key(&[(2, 42)]);
        emc.insert(&k, k.hash(), 1, 1);
        emc.insert(&k, k.hash(), 1, 2);
        assert_eq!(emc.lookup(&k, k.hash()), Some((1, 2)));
        assert_eq!(emc.len(), 1);
        // Three keys on the same two ways (forced hash): the newest two
        // stay, each found with its own megaflow.
        let h = k.hash();
        let (k2, k3) = (key(&[(2, 43)]), key(&[(2, 44)]));
        emc.insert(&k2, h, 2, 1);
        emc.insert(&k3, h, 3, 1);
        assert_eq!(emc.len(), 2);
        assert_eq!(emc.lookup(&k3, h), Some((3, 1)));
        let left = [emc.lookup(&k, h), emc.lookup(&k2, h)];
        assert_eq!(left.iter().filter(|x| x.is_some()).count(), 1, "{left:?}");
        emc.clear();
        assert!(emc.is_empty());
        assert_eq!(emc.lookup(&k3, h), None);
    }
}
