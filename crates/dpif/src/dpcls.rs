//! The megaflow classifier: one subtable per megaflow mask, each a hash
//! table from masked key to megaflow slot. Megaflows never overlap in a
//! sound cache, so the first match found is the answer; subtables are
//! therefore ordered by how often they hit, most first.

use flow::key::{finish, hash_word, WORDS};
use flow::FlowKey;
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

#[derive(Default)]
pub(crate) struct IdHasher(u64);
impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, _: &[u8]) {
        unreachable!("only u64 keys")
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}
pub(crate) type IdMap<V> = HashMap<u64, V, BuildHasherDefault<IdHasher>>;

pub(crate) struct Subtable {
    pub mask: FlowKey,
    words: Vec<u8>,
    /// Masked-key hash -> megaflow slot, inline: no pointer to chase on
    /// the hot path.
    map: IdMap<u32>,
    /// Further slots under a hash already in `map` (a duplicate megaflow
    /// or a 64-bit hash collision; normally empty).
    more: IdMap<Vec<u32>>,
    pub hits: u64,
    pub n: usize,
}

impl Subtable {
    fn new(mask: FlowKey) -> Subtable {
        let words = (0..WORDS).filter(|&i| mask.w[i] != 0).map(|i| i as u8).collect();
        Subtable { mask, words, map: IdMap::default(), more: IdMap::default(), hits: 0, n: 0 }
    }

    #[inline]
    pub fn hash(&self, key: &FlowKey) -> u64 {
        let mut h = 0x51_7cc1_b727_220a;
        for &w in &self.words {
            let w = w as usize;
            h = hash_word(h, key.w[w] & self.mask.w[w]);
        }
        finish(h)
    }
}

#[derive(Default)]
pub(crate) struct Dpcls {
    subtables: Vec<Subtable>,
    by_mask: HashMap<FlowKey, usize>,
    /// Subtable indices, most hits first.
    order: Vec<usize>,
    /// Subtables searched, over all lookups.
    pub probes: u64,
}

impl Dpcls {
    /// Finds the megaflow slot matching `key`; `masked_key_of(slot)` gives
    /// each live slot's masked key for the final compare. Only the mask's
    /// non-zero words are hashed and compared (a masked key is zero
    /// elsewhere); nothing is allocated.
    #[inline]
    pub fn lookup<'a>(&mut self, key: &FlowKey, masked_key_of: impl Fn(u32) -> Option<&'a FlowKey>) -> Option<u32> {
        for &si in &self.order {
            self.probes += 1;
            let st = &mut self.subtables[si];
            let h = st.hash(key);
            if let Some(&first) = st.map.get(&h) {
                let more = if st.more.is_empty() { &[][..] } else { st.more.get(&h).map_or(&[][..], |v| &v[..]) };
                for s in std::iter::once(first).chain(more.iter().copied()) {
                    let Some(mk) = masked_key_of(s) else { continue };
                    if st.words.iter().all(|&w| key.w[w as usize] & st.mask.w[w as usize] == mk.w[w as usize]) {
                        st.hits += 1;
                        return Some(s);
                    }
                }
            }
        }
        None
    }

    pub fn insert(&mut self, masked_key: &FlowKey, mask: &FlowKey, slot: u32) -> usize {
        let si = match self.by_mask.get(mask) {
            Some(&i) => i,
            None => {
                self.subtables.push(Subtable::new(*mask));
                let i = self.subtables.len() - 1;
                self.by_mask.insert(*mask, i);
                self.order.push(i);
                i
            }
        };
        // A subtable that ranking dropped from the search order while it
        // was empty must rejoin it at once, or its new megaflow would go
        // unseen until the next ranking.
        if self.subtables[si].n == 0 && !self.order.contains(&si) {
            self.order.push(si);
        }
        let st = &mut self.subtables[si];
        let h = st.hash(masked_key);
        match st.map.entry(h) {
            Entry::Vacant(e) => {
                e.insert(slot);
            }
            Entry::Occupied(_) => st.more.entry(h).or_default().push(slot),
        }
        st.n += 1;
        si
    }

    pub fn remove(&mut self, masked_key: &FlowKey, si: usize, slot: u32) {
        let st = &mut self.subtables[si];
        let h = st.hash(masked_key);
        if st.map.get(&h) == Some(&slot) {
            // Promote a further slot under this hash, if any.
            match st.more.get_mut(&h).and_then(|v| v.pop()) {
                Some(next) => {
                    st.map.insert(h, next);
                }
                None => {
                    st.map.remove(&h);
                }
            }
        } else if let Some(v) = st.more.get_mut(&h) {
            v.retain(|&s| s != slot);
        }
        if st.more.get(&h).is_some_and(|v| v.is_empty()) {
            st.more.remove(&h);
        }
        st.n -= 1;
    }

    /// Re-sorts subtables by hits since the last call and drops empty ones
    /// from the search order.
    pub fn rank(&mut self) {
        let st = &self.subtables;
        let mut order: Vec<usize> = (0..st.len()).filter(|&i| st[i].n > 0).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(st[i].hits));
        self.order = order;
        for s in &mut self.subtables {
            s.hits /= 2;
        }
    }

    /// Subtables in search order: (mask, flows, recent hits).
    pub fn subtables(&self) -> impl Iterator<Item = (&FlowKey, usize, u64)> {
        self.order.iter().map(|&i| (&self.subtables[i].mask, self.subtables[i].n, self.subtables[i].hits))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mask(words: &[usize]) -> FlowKey {
        let mut m = FlowKey::ZERO;
        for &w in words {
            m.w[w] = u64::MAX;
        }
        m
    }

    #[test]
    fn finds_by_masked_key_and_ranks_by_hits() {
        let masks = [mask(&[0]), mask(&[0, 9]), mask(&[0, 9, 19])];
        let mut key = FlowKey::ZERO;
        key.w[0] = 1;
        key.w[9] = 2;
        key.w[19] = 3;
        // Slot i: key under mask i; slot 3: a different value in mask 2.
        let mut stored: Vec<FlowKey> = masks.iter().map(|m| key.and(m)).collect();
        let mut other = key;
        other.w[19] = 4;
        stored.push(other.and(&masks[2]));
        let mut c = Dpcls::default();
        let si: Vec<usize> = (0..4).map(|s| c.insert(&stored[s], &masks[s.min(2)], s as u32)).collect();
        assert_eq!(si, vec![0, 1, 2, 2]);
        let lookup =
            |c: &mut Dpcls, k: &FlowKey, live: &[bool]| c.lookup(k, |s| live[s as usize].then(|| &stored[s as usize]));
        // Insertion order first: mask 0 answers.
        assert_eq!(lookup(&mut c, &key, &[true; 4]), Some(0));
        assert_eq!(lookup(&mut c, &other, &[true; 4]), Some(0));
        // Remove slot 0: the next subtables answer, each with its own key.
        c.remove(&stored[0], si[0], 0);
        let live = [false, true, true, true];
        assert_eq!(lookup(&mut c, &key, &live), Some(1));
        assert_eq!(lookup(&mut c, &other, &live), Some(1));
        c.remove(&stored[1], si[1], 1);
        let live = [false, false, true, true];
        for _ in 0..5 {
            assert_eq!(lookup(&mut c, &key, &live), Some(2));
            assert_eq!(lookup(&mut c, &other, &live), Some(3));
        }
        let mut miss = key;
        miss.w[19] = 5;
        assert_eq!(lookup(&mut c, &miss, &live), None);
        // Ranking drops the empty subtables from the search order and puts
        // the busiest first.
        c.rank();
        let order: Vec<(FlowKey, usize)> = c.subtables().map(|(m, n, _)| (*m, n)).collect();
        assert_eq!(order, vec![(masks[2], 2)]);
        c.insert(&stored[0], &masks[0], 0);
        let k2 = {
            let mut k = key;
            k.w[9] = 77;
            k
        };
        let live = [true, false, true, true];
        for _ in 0..6 {
            assert_eq!(lookup(&mut c, &k2, &live), Some(0)); // misses mask 2, hits mask 0
        }
        c.rank();
        let first = c.subtables().next().map(|(m, _, _)| *m);
        assert_eq!(first, Some(masks[0]), "6 recent hits beat 10 older ones, halved");
    }

    #[test]
    fn duplicates_under_one_hash_survive_removal_of_either() {
        let m = mask(&[0, 9]);
        let mut k = FlowKey::ZERO;
        k.w[0] = 5;
        k.w[9] = 6;
        let stored = [k, k, k];
        for first_out in [0u32, 1] {
            let mut c = Dpcls::default();
            let si = c.insert(&k, &m, 0);
            c.insert(&k, &m, 1);
            c.insert(&k, &m, 2);
            let mut live = [true; 3];
            c.remove(&k, si, first_out);
            live[first_out as usize] = false;
            let found = c.lookup(&k, |s| live[s as usize].then(|| &stored[s as usize])).unwrap();
            assert!(live[found as usize]);
            c.remove(&k, si, found);
            live[found as usize] = false;
            let last = c.lookup(&k, |s| live[s as usize].then(|| &stored[s as usize])).unwrap();
            assert!(live[last as usize]);
            c.remove(&k, si, last);
            assert_eq!(c.lookup(&k, |s| Some(&stored[s as usize])), None);
            assert!(c.subtables[si].map.is_empty() && c.subtables[si].more.is_empty());
        }
    }
}
