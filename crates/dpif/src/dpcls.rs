//! The megaflow classifier: one subtable per megaflow mask, each a hash
//! table from masked key to megaflow slot. Megaflows never overlap in a
//! sound cache, so the first match found is the answer; subtables are
//! therefore ordered by how often they hit, most first.

use flow::key::{finish, hash_word, WORDS};
use flow::FlowKey;
use std::collections::HashMap;

/// How many of a megaflow's masked key words it keeps beside its hot
/// fields, in its subtable's word order: a subtable with no more non-zero
/// mask words than this is matched on those copies alone, without reading
/// the megaflow's whole key (five cache lines, cold for one megaflow per
/// connection).
pub const MATCH_INLINE: usize = 6;

/// What the final compare of a lookup reads of a stored megaflow: its
/// inline words (valid when its subtable has at most [`MATCH_INLINE`]
/// words) and its whole masked key.
pub struct Stored<'a> {
    pub words: &'a [u64; MATCH_INLINE],
    pub key: &'a FlowKey,
}

/// A subtable's index: megaflow slots by masked-key hash, in buckets of
/// one cache line (eight 32-bit tags, then their eight slots), open
/// addressing with linear probing over buckets. A lookup reads one
/// bucket, where a general-purpose map reads its control bytes and then
/// its entries (two lines, both cold for a subtable of one megaflow per
/// connection). Several slots may carry one tag (equal hashes, or a
/// duplicate megaflow): the caller compares keys. The bucket index comes
/// from the tag, so growing never needs the keys.
#[derive(Default)]
struct SlotTable {
    buckets: Vec<SlotBucket>,
    /// Live entries and tombstones.
    used: usize,
    live: usize,
}

const SLOT_WAYS: usize = 8;
const TAG_EMPTY: u32 = 0;
const TAG_TOMB: u32 = 2;

#[derive(Clone, Copy, Default)]
#[repr(C, align(64))]
struct SlotBucket {
    tags: [u32; SLOT_WAYS],
    slots: [u32; SLOT_WAYS],
}

impl SlotTable {
    /// The tag of hash `h`: odd, so never empty or a tombstone.
    #[inline]
    fn tag(h: u64) -> u32 {
        (h as u32) | 1
    }

    #[inline]
    fn start(&self, tag: u32) -> usize {
        (tag >> 1) as usize & (self.buckets.len() - 1)
    }

    /// The place (bucket, way) of the first entry under `h`'s tag whose
    /// slot `f` accepts, probing until a bucket with a never-used way.
    #[inline]
    fn locate(&self, h: u64, mut f: impl FnMut(u32) -> bool) -> Option<(usize, usize)> {
        if self.buckets.is_empty() {
            return None;
        }
        let t = Self::tag(h);
        let n = self.buckets.len();
        let mut b = self.start(t);
        for _ in 0..n {
            let bk = &self.buckets[b];
            for i in 0..SLOT_WAYS {
                if bk.tags[i] == t && f(bk.slots[i]) {
                    return Some((b, i));
                }
            }
            if bk.tags.contains(&TAG_EMPTY) {
                return None;
            }
            b = (b + 1) & (n - 1);
        }
        None
    }

    /// The first slot under `h`'s tag that `f` accepts.
    #[inline]
    fn find(&self, h: u64, f: impl FnMut(u32) -> bool) -> Option<u32> {
        self.locate(h, f).map(|(b, i)| self.buckets[b].slots[i])
    }

    fn insert(&mut self, h: u64, slot: u32) {
        if (self.used + 1) * 4 > self.buckets.len() * SLOT_WAYS * 3 {
            // Over three quarters used: grow if live entries need it, else
            // rebuild at the same size to drop the tombstones.
            let want = if (self.live + 1) * 2 > self.buckets.len() * SLOT_WAYS {
                self.buckets.len() * 2
            } else {
                self.buckets.len()
            };
            self.rebuild(want.max(1));
        }
        self.place(Self::tag(h), slot);
        self.live += 1;
    }

    fn place(&mut self, t: u32, slot: u32) {
        let n = self.buckets.len();
        let mut b = self.start(t);
        loop {
            let bk = &mut self.buckets[b];
            if let Some(i) = bk.tags.iter().position(|&x| x == TAG_EMPTY || x == TAG_TOMB) {
                if bk.tags[i] == TAG_EMPTY {
                    self.used += 1;
                }
                bk.tags[i] = t;
                bk.slots[i] = slot;
                return;
            }
            b = (b + 1) & (n - 1);
        }
    }

    /// Removes the entry of `slot` under `h`; false if there is none.
    fn remove(&mut self, h: u64, slot: u32) -> bool {
        let Some((b, i)) = self.locate(h, |s| s == slot) else { return false };
        self.buckets[b].tags[i] = TAG_TOMB;
        self.live -= 1;
        if self.live == 0 {
            // Nothing left: start clean (no tombstones).
            self.buckets.iter_mut().for_each(|b| *b = SlotBucket::default());
            self.used = 0;
        }
        true
    }

    fn rebuild(&mut self, n: usize) {
        let old = std::mem::replace(&mut self.buckets, vec![SlotBucket::default(); n]);
        self.used = 0;
        for bk in &old {
            for i in 0..SLOT_WAYS {
                if bk.tags[i] & 1 == 1 {
                    self.place(bk.tags[i], bk.slots[i]);
                }
            }
        }
    }
}

pub(crate) struct Subtable {
    pub mask: FlowKey,
    words: Vec<u8>,
    /// The mask covers only metadata words (`0..STAGE_L2`), which
    /// extraction never writes: a packet as received matches on its input
    /// port alone (see [`Dpcls::matches_received`]).
    metadata_only: bool,
    /// Masked-key hash -> megaflow slots.
    map: SlotTable,
    pub hits: u64,
    pub n: usize,
}

impl Subtable {
    fn new(mask: FlowKey) -> Subtable {
        let words: Vec<u8> = (0..WORDS).filter(|&i| mask.w[i] != 0).map(|i| i as u8).collect();
        let metadata_only = words.iter().all(|&w| (w as usize) < flow::key::STAGE_L2);
        Subtable { mask, words, metadata_only, map: SlotTable::default(), hits: 0, n: 0 }
    }

    /// Whether `key` matches the megaflow `m` of this subtable: only the
    /// mask's non-zero words are compared, on the inline copies when there
    /// are few enough.
    #[inline]
    fn matches(&self, key: &FlowKey, m: &Stored) -> bool {
        self.matches_words(|w| key.w[w], m)
    }

    /// [`Subtable::matches`] for a key given word by word.
    #[inline]
    fn matches_words(&self, word: impl Fn(usize) -> u64, m: &Stored) -> bool {
        let (words, mask) = (&self.words, &self.mask);
        if words.len() <= MATCH_INLINE {
            words.iter().zip(m.words).all(|(&w, &v)| word(w as usize) & mask.w[w as usize] == v)
        } else {
            words.iter().all(|&w| word(w as usize) & mask.w[w as usize] == m.key.w[w as usize])
        }
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
    by_mask: HashMap<FlowKey, usize, std::hash::BuildHasherDefault<flow::key::WordHasher>>,
    /// Subtable indices, most hits first.
    order: Vec<usize>,
    /// Subtables searched, over all lookups.
    pub probes: u64,
    /// The subtable of the last insert (subtables are never removed, so
    /// the index stays valid).
    last_insert: usize,
}

impl Dpcls {
    /// Finds the megaflow slot matching `key`; `stored(slot)` gives each
    /// live slot's masked key (and its inline words) for the final
    /// compare. Only the mask's non-zero words are hashed and compared (a
    /// masked key is zero elsewhere); nothing is allocated.
    #[inline]
    pub fn lookup<'a>(&mut self, key: &FlowKey, stored: impl Fn(u32) -> Option<Stored<'a>>) -> Option<u32> {
        for &si in &self.order {
            self.probes += 1;
            let st = &mut self.subtables[si];
            let h = st.hash(key);
            let found = st.map.find(h, |s| stored(s).is_some_and(|m| st.matches(key, &m)));
            if let Some(s) = found {
                st.hits += 1;
                return Some(s);
            }
        }
        None
    }

    /// Whether `key` matches megaflow `m` of subtable `si` (as a lookup
    /// would compare it: the mask's words only, where a whole-key compare
    /// reads all 39 words of the key, the mask and the megaflow's key).
    #[inline]
    pub fn matches(&self, si: usize, key: &FlowKey, m: &Stored) -> bool {
        self.subtables[si].matches(key, m)
    }

    /// Whether a packet as received on `in_port` (no recirculation, no
    /// tunnel metadata) matches the megaflow `m` of subtable `si` whatever
    /// its bytes: `None` if the subtable's mask looks at any header field.
    /// Such a packet's key is zero in every metadata word but the input
    /// port (`flow::extract::extract_into` starts it so, and its parser
    /// writes only later words), so no key is built to find out.
    #[inline]
    pub fn matches_received(&self, si: usize, in_port: u32, m: &Stored) -> Option<bool> {
        let st = &self.subtables[si];
        if !st.metadata_only {
            return None;
        }
        use flow::key::loc::IN_PORT;
        Some(st.matches_words(|w| if w == IN_PORT.word { (in_port as u64) << IN_PORT.shift } else { 0 }, m))
    }

    /// The inline words a megaflow with `masked_key` in subtable `si`
    /// keeps (zero past the subtable's words, or all zero when it has more
    /// than [`MATCH_INLINE`]).
    pub fn inline_words(&self, si: usize, masked_key: &FlowKey) -> [u64; MATCH_INLINE] {
        let mut out = [0; MATCH_INLINE];
        let words = &self.subtables[si].words;
        if words.len() <= MATCH_INLINE {
            for (o, &w) in out.iter_mut().zip(words) {
                *o = masked_key.w[w as usize];
            }
        }
        out
    }

    /// The mask of subtable `si` (every megaflow in it has this mask).
    #[inline]
    pub fn mask(&self, si: usize) -> &FlowKey {
        &self.subtables[si].mask
    }

    pub fn insert(&mut self, masked_key: &FlowKey, mask: &FlowKey, slot: u32) -> usize {
        // Megaflows set up one after another mostly share their mask: the
        // last insert's subtable is compared first (a word compare, where
        // the map hashes all 39 words and then compares them).
        let last = self.last_insert;
        let si = if self.subtables.get(last).is_some_and(|st| st.mask == *mask) {
            last
        } else {
            match self.by_mask.get(mask) {
                Some(&i) => i,
                None => {
                    self.subtables.push(Subtable::new(*mask));
                    let i = self.subtables.len() - 1;
                    self.by_mask.insert(*mask, i);
                    self.order.push(i);
                    i
                }
            }
        };
        self.last_insert = si;
        // A subtable that ranking dropped from the search order while it
        // was empty must rejoin it at once, or its new megaflow would go
        // unseen until the next ranking.
        if self.subtables[si].n == 0 && !self.order.contains(&si) {
            self.order.push(si);
        }
        let st = &mut self.subtables[si];
        let h = st.hash(masked_key);
        st.map.insert(h, slot);
        st.n += 1;
        si
    }

    pub fn remove(&mut self, masked_key: &FlowKey, si: usize, slot: u32) {
        let st = &mut self.subtables[si];
        let h = st.hash(masked_key);
        if st.map.remove(h, slot) {
            st.n -= 1;
        }
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
        let ws: Vec<[u64; MATCH_INLINE]> = (0..4).map(|s| c.inline_words(si[s], &stored[s])).collect();
        let lookup = |c: &mut Dpcls, k: &FlowKey, live: &[bool]| {
            c.lookup(k, |s| live[s as usize].then(|| Stored { words: &ws[s as usize], key: &stored[s as usize] }))
        };
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
        let w = [5, 6, 0, 0, 0, 0];
        let at = |s: u32| Stored { words: &w, key: &stored[s as usize] };
        for first_out in [0u32, 1] {
            let mut c = Dpcls::default();
            let si = c.insert(&k, &m, 0);
            c.insert(&k, &m, 1);
            c.insert(&k, &m, 2);
            let mut live = [true; 3];
            c.remove(&k, si, first_out);
            live[first_out as usize] = false;
            assert_eq!(c.inline_words(si, &k), w);
            let found = c.lookup(&k, |s| live[s as usize].then(|| at(s))).unwrap();
            assert!(live[found as usize]);
            c.remove(&k, si, found);
            live[found as usize] = false;
            let last = c.lookup(&k, |s| live[s as usize].then(|| at(s))).unwrap();
            assert!(live[last as usize]);
            c.remove(&k, si, last);
            assert_eq!(c.lookup(&k, |s| Some(at(s))), None);
            assert_eq!((c.subtables[si].map.live, c.subtables[si].n), (0, 0));
        }
    }

    /// Many megaflows in one subtable, some with more words than fit
    /// inline, inserted and removed in turns: every live one is found by
    /// its own key, no removed one is, through the index's growth and its
    /// tombstones.
    #[test]
    fn the_index_keeps_every_live_megaflow_through_growth_and_removals() {
        for wide in [false, true] {
            let words: Vec<usize> = if wide { (0..MATCH_INLINE + 2).map(|i| i * 4).collect() } else { vec![0, 9, 28] };
            let m = mask(&words);
            let key_of = |i: u64| {
                let mut k = FlowKey::ZERO;
                for (j, &w) in words.iter().enumerate() {
                    k.w[w] = i.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(j as u32 * 7) | 1;
                }
                k
            };
            let n = 5_000u64;
            let keys: Vec<FlowKey> = (0..n).map(key_of).collect();
            let mut c = Dpcls::default();
            let mut si = 0;
            for (i, k) in keys.iter().enumerate() {
                si = c.insert(k, &m, i as u32);
            }
            let ws: Vec<[u64; MATCH_INLINE]> = keys.iter().map(|k| c.inline_words(si, k)).collect();
            let mut live = vec![true; n as usize];
            // Remove every third, then put half of those back.
            for i in (0..n as usize).step_by(3) {
                c.remove(&keys[i], si, i as u32);
                live[i] = false;
            }
            for i in (0..n as usize).step_by(6) {
                c.insert(&keys[i], &m, i as u32);
                live[i] = true;
            }
            for (i, k) in keys.iter().enumerate() {
                let got = c
                    .lookup(k, |s| live[s as usize].then(|| Stored { words: &ws[s as usize], key: &keys[s as usize] }));
                assert_eq!(got, live[i].then_some(i as u32), "key {i}, wide {wide}");
            }
            assert_eq!(c.subtables[si].n, live.iter().filter(|&&l| l).count());
        }
    }
}
