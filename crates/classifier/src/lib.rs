//! # classifier: the OpenFlow rule classifier
//!
//! **What it is for.** An OpenFlow table holds prioritized wildcarded rules;
//! [`Classifier::lookup`] finds the highest-priority rule matching a flow
//! key. Because the datapath caches the *answer* as a megaflow, every
//! lookup also reports the exact set of key bits it consulted (`wc`).
//!
//! **Correctness property.** If `lookup(k, v, wc)` returns `r`, then for
//! every key `k2` with `k2 & wc == k & wc`, `lookup(k2, v, _)` returns `r`
//! too. And it returns the same rule as a linear scan in priority order
//! (ties between equal-priority rules go to the lowest [`RuleId`], i.e.
//! the rule inserted first).
//!
//! **Algorithm.** Tuple space search: rules with the same mask share a
//! *subtable*, a hash table from masked key to rules. Subtables are visited
//! in order of the highest priority they hold, and the search stops once no
//! remaining subtable can beat the best match. Within a subtable the lookup
//! is *staged*: the hash of the metadata words is checked first, then
//! metadata+L2, then +L3, then the full key; a stage with no rule stops the
//! subtable early, and only the stages visited add their mask bits to `wc`.
//! *Prefix tries* on the IPv4 and IPv6 source and destination addresses let
//! a subtable with a /p prefix be skipped when no rule prefix of length p
//! can match the address, un-wildcarding only the bits the trie walk read
//! (so a /24 rule elsewhere in the table does not force /24 megaflows on
//! packets that a /8 rule serves).
//!
//! **Versions.** Each rule is visible from the version it was inserted at
//! until the version it was removed at. Readers look up at one version, so
//! a batch of changes staged at `v + 1` appears all at once when readers
//! move to `v + 1`. [`Classifier::purge`] frees rules no version can see.
//!
//! **Threads.** Mutation takes `&mut self`, lookup `&self`; the owner
//! provides the lock (readers never see a torn update).
#![deny(unsafe_code)]

pub mod trie;

use flow::key::{finish, hash_word, loc, FlowKey, Loc, STAGES, WORDS};
use flow::Match;
use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};
use trie::Trie;

/// Handle of a rule in a classifier.
pub type RuleId = u64;

const LIVE: u64 = u64::MAX;

/// The address fields that get prefix tries.
const TRIE_FIELDS: [Loc; 4] = [loc::NW_SRC, loc::NW_DST, loc::IPV6_SRC, loc::IPV6_DST];

/// A hasher for keys that already are good 64-bit hashes.
#[derive(Default)]
struct IdHasher(u64);
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
type IdMap<V> = HashMap<u64, V, BuildHasherDefault<IdHasher>>;

struct Entry<T> {
    m: Match,
    priority: u32,
    data: T,
    added: u64,
    removed: u64,
    subtable: usize,
}

impl<T> Entry<T> {
    #[inline]
    fn visible(&self, v: u64) -> bool {
        self.added <= v && v < self.removed
    }
}

struct Subtable {
    mask: FlowKey,
    /// Non-zero mask words, in key order.
    words: Vec<u8>,
    /// `words[..stage_end[s]]` are the words of stages 0..=s.
    stage_end: [usize; 4],
    /// Counts of rules per prefix hash after stages 0, 1, 2.
    stage_hashes: [IdMap<u32>; 3],
    /// Full masked-key hash -> rules (priority desc, then id asc).
    rules: IdMap<Vec<RuleId>>,
    /// Priorities held, with counts (for max_priority upkeep).
    prios: BTreeMap<u32, u32>,
    /// Prefix length of the mask on each trie field: `Some(p)` for a CIDR
    /// prefix (p > 0), `None` if the field is unmasked or not CIDR-shaped.
    plen: [Option<u32>; 4],
    n: usize,
}

impl Subtable {
    fn new(mask: FlowKey) -> Subtable {
        let words: Vec<u8> = (0..WORDS).filter(|&i| mask.w[i] != 0).map(|i| i as u8).collect();
        let mut stage_end = [0; 4];
        for (s, end) in stage_end.iter_mut().enumerate() {
            *end = words.iter().filter(|&&w| (w as usize) < STAGES[s + 1]).count();
        }
        let mut plen = [None; 4];
        for (i, f) in TRIE_FIELDS.iter().enumerate() {
            let m = f.get(&mask);
            if m != 0 {
                plen[i] = flow::matching::prefix_len(m, f.bits).filter(|&p| p > 0);
            }
        }
        Subtable {
            mask,
            words,
            stage_end,
            stage_hashes: Default::default(),
            rules: IdMap::default(),
            prios: BTreeMap::new(),
            plen,
            n: 0,
        }
    }

    fn max_priority(&self) -> Option<u32> {
        self.prios.keys().next_back().copied()
    }

    /// Hashes of the masked key after each stage (index 3 = full key).
    #[inline]
    fn stage_hash(&self, key: &FlowKey, from: usize, to: usize, h: u64) -> u64 {
        let mut h = h;
        for &w in &self.words[from..to] {
            let w = w as usize;
            h = hash_word(h, key.w[w] & self.mask.w[w]);
        }
        h
    }

    fn hashes(&self, key: &FlowKey) -> [u64; 4] {
        let mut out = [0; 4];
        let mut h = 0x2545_f491_4f6c_dd1d;
        let mut from = 0;
        for s in 0..4 {
            h = self.stage_hash(key, from, self.stage_end[s], h);
            from = self.stage_end[s];
            out[s] = finish(h);
        }
        out
    }
}

pub struct Classifier<T> {
    entries: Vec<Option<Entry<T>>>,
    free: Vec<usize>,
    subtables: Vec<Subtable>,
    by_mask: HashMap<FlowKey, usize>,
    /// Subtable indices by max priority, highest first.
    order: Vec<usize>,
    tries: [Trie; 4],
    /// Rules whose removal version has been set (for purge).
    removed: Vec<RuleId>,
}

impl<T> Default for Classifier<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Classifier<T> {
    pub fn new() -> Self {
        Classifier {
            entries: Vec::new(),
            free: Vec::new(),
            subtables: Vec::new(),
            by_mask: HashMap::new(),
            order: Vec::new(),
            tries: [Trie::new(32), Trie::new(32), Trie::new(128), Trie::new(128)],
            removed: Vec::new(),
        }
    }

    fn reorder(&mut self) {
        let st = &self.subtables;
        self.order = (0..st.len()).filter(|&i| st[i].n > 0).collect();
        self.order.sort_by_key(|&i| std::cmp::Reverse(st[i].max_priority().unwrap_or(0)));
    }

    /// Inserts a rule visible from `version` on.
    pub fn insert(&mut self, m: Match, priority: u32, data: T, version: u64) -> RuleId {
        let m = Match::new(m.key, m.mask);
        let si = match self.by_mask.get(&m.mask) {
            Some(&i) => i,
            None => {
                self.subtables.push(Subtable::new(m.mask));
                let i = self.subtables.len() - 1;
                self.by_mask.insert(m.mask, i);
                i
            }
        };
        let id = match self.free.pop() {
            Some(i) => i,
            None => {
                self.entries.push(None);
                self.entries.len() - 1
            }
        } as RuleId;
        let st = &mut self.subtables[si];
        let hs = st.hashes(&m.key);
        for s in 0..3 {
            *st.stage_hashes[s].entry(hs[s]).or_insert(0) += 1;
        }
        *st.prios.entry(priority).or_insert(0) += 1;
        st.n += 1;
        for (i, f) in TRIE_FIELDS.iter().enumerate() {
            if let Some(p) = st.plen[i] {
                self.tries[i].insert(f.get(&m.key), p);
            }
        }
        self.entries[id as usize] = Some(Entry { m, priority, data, added: version, removed: LIVE, subtable: si });
        let entries = &self.entries;
        let bucket = st.rules.entry(hs[3]).or_default();
        bucket.push(id);
        bucket.sort_by(|&a, &b| {
            let (ea, eb) = (entries[a as usize].as_ref().unwrap(), entries[b as usize].as_ref().unwrap());
            eb.priority.cmp(&ea.priority).then(a.cmp(&b))
        });
        self.reorder();
        id
    }

    /// Makes a rule invisible from `version` on.
    pub fn remove(&mut self, id: RuleId, version: u64) {
        if let Some(Some(e)) = self.entries.get_mut(id as usize) {
            if e.removed == LIVE {
                e.removed = version.max(e.added);
                self.removed.push(id);
            }
        }
    }

    /// Frees rules invisible at every version `>= oldest_live_version`.
    pub fn purge(&mut self, oldest_live_version: u64) {
        let mut keep = Vec::new();
        let mut changed = false;
        for id in std::mem::take(&mut self.removed) {
            let gone = self.entries[id as usize].as_ref().is_some_and(|e| e.removed <= oldest_live_version);
            if !gone {
                keep.push(id);
                continue;
            }
            let e = self.entries[id as usize].take().expect("listed entry exists");
            let st = &mut self.subtables[e.subtable];
            let hs = st.hashes(&e.m.key);
            for s in 0..3 {
                if let Some(c) = st.stage_hashes[s].get_mut(&hs[s]) {
                    *c -= 1;
                    if *c == 0 {
                        st.stage_hashes[s].remove(&hs[s]);
                    }
                }
            }
            if let Some(b) = st.rules.get_mut(&hs[3]) {
                b.retain(|&x| x != id);
                if b.is_empty() {
                    st.rules.remove(&hs[3]);
                }
            }
            if let Some(c) = st.prios.get_mut(&e.priority) {
                *c -= 1;
                if *c == 0 {
                    st.prios.remove(&e.priority);
                }
            }
            st.n -= 1;
            for (i, f) in TRIE_FIELDS.iter().enumerate() {
                if let Some(p) = st.plen[i] {
                    self.tries[i].remove(f.get(&e.m.key), p);
                }
            }
            self.free.push(id as usize);
            changed = true;
        }
        self.removed = keep;
        if changed {
            self.reorder();
        }
    }

    pub fn get(&self, id: RuleId) -> Option<(&Match, u32, &T)> {
        self.entries.get(id as usize)?.as_ref().map(|e| (&e.m, e.priority, &e.data))
    }

    pub fn get_mut(&mut self, id: RuleId) -> Option<(&Match, u32, &mut T)> {
        self.entries.get_mut(id as usize)?.as_mut().map(|e| (&e.m, e.priority, &mut e.data))
    }

    /// The highest-priority rule matching `key` at `version`; ORs every
    /// key bit consulted into `wc`.
    pub fn lookup(&self, key: &FlowKey, version: u64, wc: &mut FlowKey) -> Option<RuleId> {
        let mut best: Option<(u32, RuleId)> = None;
        // Trie results, computed on first use.
        let mut tries: [Option<(trie::Plens, u32)>; 4] = [None; 4];
        'subtables: for &si in &self.order {
            let st = &self.subtables[si];
            let maxp = st.max_priority().unwrap_or(0);
            if let Some((bp, _)) = best {
                if maxp < bp {
                    break;
                }
            }
            for (i, f) in TRIE_FIELDS.iter().enumerate() {
                let Some(p) = st.plen[i] else { continue };
                let (plens, bits) = *tries[i].get_or_insert_with(|| self.tries[i].lookup(f.get(key)));
                if !plens.contains(p) {
                    // No rule prefix of length p matches: skip, having
                    // read `bits` leading bits of the field.
                    if bits > 0 {
                        let m = if bits >= f.bits { f.max() } else { (f.max() >> (f.bits - bits)) << (f.bits - bits) };
                        let old = f.get(wc);
                        f.set(wc, old | m);
                    }
                    continue 'subtables;
                }
            }
            let mut h = 0x2545_f491_4f6c_dd1d;
            let mut from = 0;
            for s in 0..4 {
                let to = st.stage_end[s];
                if to == from && s < 3 {
                    continue;
                }
                for &w in &st.words[from..to] {
                    wc.w[w as usize] |= st.mask.w[w as usize];
                }
                h = st.stage_hash(key, from, to, h);
                from = to;
                let fh = finish(h);
                if s < 3 {
                    if to == st.words.len() {
                        // No later stage has words: this is the full key.
                        if self.check_bucket(st, key, fh, version, &mut best) {
                            continue 'subtables;
                        }
                        continue 'subtables;
                    }
                    if !st.stage_hashes[s].contains_key(&fh) {
                        continue 'subtables;
                    }
                } else {
                    self.check_bucket(st, key, fh, version, &mut best);
                }
            }
        }
        best.map(|(_, id)| id)
    }

    #[inline]
    fn check_bucket(
        &self,
        st: &Subtable,
        key: &FlowKey,
        h: u64,
        version: u64,
        best: &mut Option<(u32, RuleId)>,
    ) -> bool {
        let Some(bucket) = st.rules.get(&h) else { return false };
        for &id in bucket {
            let e = self.entries[id as usize].as_ref().expect("bucket entries exist");
            if !e.visible(version) || !key.eq_masked(&e.m.key, &st.mask) {
                continue;
            }
            let better = match *best {
                None => true,
                Some((bp, bid)) => e.priority > bp || (e.priority == bp && id < bid),
            };
            if better {
                *best = Some((e.priority, id));
            }
            return true;
        }
        false
    }

    /// The visible rule with exactly this match and priority.
    pub fn find_exact(&self, m: &Match, priority: u32, version: u64) -> Option<RuleId> {
        let m = Match::new(m.key, m.mask);
        let &si = self.by_mask.get(&m.mask)?;
        let st = &self.subtables[si];
        let h = st.hashes(&m.key)[3];
        st.rules.get(&h)?.iter().copied().find(|&id| {
            let e = self.entries[id as usize].as_ref().expect("bucket entries exist");
            e.visible(version) && e.priority == priority && e.m.key == m.key
        })
    }

    /// Visible rules whose match is `m` or more specific (OpenFlow's
    /// non-strict modify and delete), any priority, in id order.
    pub fn find_loose(&self, m: &Match, version: u64) -> Vec<RuleId> {
        let m = Match::new(m.key, m.mask);
        let mut out = Vec::new();
        for st in &self.subtables {
            if st.n == 0 || !m.mask.is_subset_of(&st.mask) {
                continue;
            }
            for bucket in st.rules.values() {
                for &id in bucket {
                    let e = self.entries[id as usize].as_ref().expect("bucket entries exist");
                    if e.visible(version) && e.m.key.eq_masked(&m.key, &m.mask) {
                        out.push(id);
                    }
                }
            }
        }
        out.sort_unstable();
        out
    }

    /// Every rule visible at `version`, in id order.
    pub fn iter(&self, version: u64) -> impl Iterator<Item = RuleId> + '_ {
        self.entries
            .iter()
            .enumerate()
            .filter(move |(_, e)| e.as_ref().is_some_and(|e| e.visible(version)))
            .map(|(i, _)| i as RuleId)
    }

    pub fn len(&self, version: u64) -> usize {
        self.iter(version).count()
    }

    pub fn is_empty(&self, version: u64) -> bool {
        self.iter(version).next().is_none()
    }

    /// Subtables that hold at least one rule.
    pub fn n_subtables(&self) -> usize {
        self.subtables.iter().filter(|s| s.n > 0).count()
    }
}
