//! # classifier: the OpenFlow rule classifier
//!
//! **Purpose.** An OpenFlow table is a set of wildcarded rules, each with a
//! priority. [`Classifier::lookup`] finds the highest-priority rule that
//! matches a flow key. The datapath then caches that answer as a
//! *megaflow*: a key plus a mask, applied to every later packet that
//! agrees with this one on the masked bits. So a lookup must also report
//! which key bits it depended on (`wc`), and it should depend on as few as
//! possible, because every extra bit splits one megaflow into many.
//!
//! **Correctness property.** Let `lookup(k, v, wc)` return `r` (a rule or
//! none). Then (1) `r` is what a linear scan of the rules visible at `v`
//! returns: the matching rule of highest priority, ties going to the
//! lowest [`RuleId`] — ids are handed out in increasing order and never
//! reused, so among equal priorities the rule inserted first wins; and
//! (2) every key `k2` with `k2 & wc == k & wc` gets `r` as well. The bits
//! added to `wc` are all bits of some rule mask or `dl_type`: never a bit
//! no rule looks at.
//!
//! **Algorithm.** *Tuple space search*: rules with the same mask share a
//! subtable, a hash table from masked key to the rules with that masked
//! key (sorted by priority, then id). Subtables are visited in decreasing
//! order of the highest priority they hold, and the search stops as soon
//! as no remaining subtable can beat the match in hand. Within a subtable
//! the lookup is *staged*: the key's words are hashed in stage order
//! (metadata, L2, L3, L4), and after each stage but the last the running
//! hash is checked against the set of the rules' hashes for that stage
//! prefix; a miss ends the subtable, and the mask bits of later stages are
//! never added to `wc`. At the L3 stage, *prefix tries* on nw_src,
//! nw_dst, ipv6_src and ipv6_dst give a second, often narrower, proof of a
//! miss for subtables whose mask is a /p prefix on one of them: if no rule
//! prefix of length exactly p agrees with the packet's address, the
//! subtable is skipped and `wc` gets only the leading address bits the trie
//! needed to prove it (at most p) instead of the whole L3 stage. So with
//! rules on 10.0.0.0/8 and 192.168.0.0/24, a packet to 10.1.2.3 yields a
//! /8 megaflow, not a /24 one. The trie (path-compressed, one node per
//! branch point) is walked at most once per field per lookup, and only when
//! the stage hash has missed and the stage's bits are not all in `wc` yet
//! (otherwise it could not narrow anything).
//!
//! The tries follow protocol prerequisites: the IPv4 tries hold the
//! prefixes of rules with `dl_type=0x0800` (the IPv6 tries,
//! `dl_type=0x86dd`) in subtables whose mask matches all of `dl_type`, and
//! are only consulted for keys of that Ethertype, adding `dl_type` to `wc`.
//! (ARP rules reuse the nw_src/nw_dst bits; they are not in the tries, and
//! an ARP packet never skips a subtable by trie.)
//!
//! **Versions.** Each rule is visible in versions `[added, removed)`. A
//! reader looks up at one version, so a batch of changes made at version
//! `v + 1` becomes visible all at once when readers move to `v + 1`, while
//! readers still at `v` keep seeing the old set. Rules that are invisible
//! at the lookup version never decide the result; they may still cause
//! extra bits in `wc` (which is always allowed). [`Classifier::purge`]
//! frees rules that no version still in use can see.
//!
//! **Threads.** All mutation takes `&mut self` and lookups take `&self`,
//! so the borrow checker enforces one writer or many readers. Owners that
//! share a classifier between threads wrap it in a lock (or in an
//! `Arc`-swapped copy); versions make a batch atomic for readers even when
//! the lock is released between individual changes. `Classifier<T>` is
//! `Send`/`Sync` exactly when `T` is. No interior mutability, no unsafe
//! code.
#![deny(unsafe_code)]

pub mod memo;
pub mod trie;

use flow::key::{ethertype, finish, hash_word, loc, FlowKey, Loc, STAGES, WORDS};
use flow::matching::prefix_len;
use flow::Match;
use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};
use trie::{Trie, Walk};

pub use memo::Memo;

/// A stored rule's match: its masked key and its subtable's mask.
#[derive(Clone, Copy, Debug)]
pub struct RuleMatch<'a> {
    pub key: &'a FlowKey,
    pub mask: &'a FlowKey,
}

impl RuleMatch<'_> {
    pub fn to_match(&self) -> Match {
        Match { key: *self.key, mask: *self.mask }
    }
}

impl std::fmt::Display for RuleMatch<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.to_match().fmt(f)
    }
}

/// Handle of a rule. Increasing in insertion order and never reused, so a
/// stale handle never names another rule.
pub type RuleId = u64;

/// `removed` of a rule not yet removed.
const LIVE: u64 = u64::MAX;

/// Basis of the staged hashes.
const BASIS: u64 = 0x2545_f491_4f6c_dd1d;

/// Fields with prefix tries, and the Ethertype each requires (0: IPv4 or
/// IPv6). The two L4 port tries (as Open vSwitch's ports trie) let a
/// lookup rule out a subtable of exact-port rules by the port's leading
/// bits, so megaflows cover port ranges instead of single ports.
const N_TRIES: usize = 6;
const TRIE_FIELDS: [Loc; N_TRIES] = [loc::NW_SRC, loc::NW_DST, loc::IPV6_SRC, loc::IPV6_DST, loc::TP_SRC, loc::TP_DST];
const TRIE_ETH: [u16; N_TRIES] = [ethertype::IPV4, ethertype::IPV4, ethertype::IPV6, ethertype::IPV6, 0, 0];
/// Which trie fields belong to the L4 stage (the others to L3).
const TRIE_L4: [bool; N_TRIES] = [false, false, false, false, true, true];

#[inline]
fn trie_eth_ok(i: usize, dl_type: u16) -> bool {
    match TRIE_ETH[i] {
        0 => dl_type == ethertype::IPV4 || dl_type == ethertype::IPV6,
        t => dl_type == t,
    }
}

/// Hasher for keys that already are well-mixed 64-bit hashes (a `u64`
/// key is used as it is; also for `ofproto`'s interned counter lists).
#[derive(Default)]
pub struct PassThrough(u64);
impl Hasher for PassThrough {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = hash_word(self.0, b as u64);
        }
        self.0 = finish(self.0);
    }
    #[inline]
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}
type HashKeyed<V> = Sharded<V, PassThrough>;

/// Hasher for rule ids (sequential, so they need mixing).
#[derive(Default)]
struct Mix(u64);
impl Hasher for Mix {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = hash_word(self.0, b as u64);
        }
        self.0 = finish(self.0);
    }
    #[inline]
    fn write_u64(&mut self, v: u64) {
        self.0 = finish(v);
    }
}

/// How a [`Sharded`] map picks a key's shard.
trait ShardOf {
    fn shard(k: u64) -> usize;
}
impl ShardOf for PassThrough {
    /// The key is a hash; the maps place by its low bits and filter by its
    /// top seven, so bits 52-55 pick the shard.
    #[inline]
    fn shard(k: u64) -> usize {
        (k >> 52) as usize & (SHARDS - 1)
    }
}
impl ShardOf for Mix {
    /// Rule ids are sequential: the low bits deal them out evenly.
    #[inline]
    fn shard(k: u64) -> usize {
        k as usize & (SHARDS - 1)
    }
}

const SHARDS: usize = 16;

/// A map from `u64` that splits into 16 maps by the key's bits once it is
/// large. A hash map grows by rehashing every entry at once, and the
/// classifier grows while a writer holds the lock that lookups wait for: at
/// 114,688 rules one growth of the rule map and a subtable's maps stalled
/// forwarding for up to 13.5 ms. Split, each growth moves a sixteenth of
/// the entries, and the shards fill up at slightly different times, so one
/// change meets at most a few. Small maps (most of a pipeline's subtables)
/// stay one map: a lookup then reads the one header that sits in its
/// subtable's first lines, not one of sixteen spread over half a kilobyte.
struct Sharded<V, H> {
    one: HashMap<u64, V, BuildHasherDefault<H>>,
    /// Once split, the shards (and `one` stays empty).
    split: Option<Box<[HashMap<u64, V, BuildHasherDefault<H>>; SHARDS]>>,
}

/// Entries at which a [`Sharded`] map splits.
const SPLIT_AT: usize = 4096;

impl<V, H: Hasher + Default + ShardOf> Default for Sharded<V, H> {
    fn default() -> Self {
        Sharded { one: HashMap::default(), split: None }
    }
}

impl<V, H: Hasher + Default + ShardOf> Sharded<V, H> {
    #[inline]
    fn map(&self, k: u64) -> &HashMap<u64, V, BuildHasherDefault<H>> {
        match &self.split {
            None => &self.one,
            Some(s) => &s[H::shard(k)],
        }
    }
    #[inline]
    fn map_mut(&mut self, k: u64) -> &mut HashMap<u64, V, BuildHasherDefault<H>> {
        match &mut self.split {
            None => &mut self.one,
            Some(s) => &mut s[H::shard(k)],
        }
    }
    /// Before an insert: a full single map splits.
    fn grow(&mut self) {
        if self.split.is_none() && self.one.len() >= SPLIT_AT {
            let mut s: Box<[HashMap<u64, V, BuildHasherDefault<H>>; SHARDS]> =
                Box::new(std::array::from_fn(|_| HashMap::default()));
            for (k, v) in self.one.drain() {
                s[H::shard(k)].insert(k, v);
            }
            self.one = HashMap::default();
            self.split = Some(s);
        }
    }
    fn maps(&self) -> impl Iterator<Item = &HashMap<u64, V, BuildHasherDefault<H>>> {
        std::iter::once(&self.one).chain(self.split.iter().flat_map(|s| s.iter()))
    }
    #[inline]
    fn get(&self, k: &u64) -> Option<&V> {
        self.map(*k).get(k)
    }
    #[inline]
    fn get_mut(&mut self, k: &u64) -> Option<&mut V> {
        self.map_mut(*k).get_mut(k)
    }
    #[inline]
    fn contains_key(&self, k: &u64) -> bool {
        self.map(*k).contains_key(k)
    }
    fn insert(&mut self, k: u64, v: V) -> Option<V> {
        self.grow();
        self.map_mut(k).insert(k, v)
    }
    fn remove(&mut self, k: &u64) -> Option<V> {
        self.map_mut(*k).remove(k)
    }
    fn entry(&mut self, k: u64) -> std::collections::hash_map::Entry<'_, u64, V> {
        self.grow();
        self.map_mut(k).entry(k)
    }
    fn len(&self) -> usize {
        self.maps().map(HashMap::len).sum()
    }
    fn values(&self) -> impl Iterator<Item = &V> {
        self.maps().flat_map(|m| m.values())
    }
    /// Gives memory back from maps that are mostly empty (hash maps never
    /// shrink by themselves: after deleting 200,000 rules they would keep
    /// their size forever).
    fn shrink_sparse(&mut self) {
        let shrink = |m: &mut HashMap<u64, V, BuildHasherDefault<H>>| {
            if sparse(m.len(), m.capacity()) {
                m.shrink_to_fit();
            }
        };
        shrink(&mut self.one);
        for m in self.split.iter_mut().flat_map(|s| s.iter_mut()) {
            shrink(m);
        }
    }
}

/// One stored rule. Its mask is its subtable's (every rule of a subtable
/// has the same one), so it is not stored again: a mask is 320 bytes, a
/// third of what a rule costs.
///
/// Laid out in declaration order: what a hit reads (id, priority, and the
/// start of `data`) comes first, in the rule's first cache line; the key,
/// which only a search's compare reads, comes last. (Reordered freely,
/// the 64-byte-aligned key went first, and every hit read a line five
/// lines in.)
#[repr(C)]
struct Rule<T> {
    id: RuleId,
    priority: u32,
    data: T,
    added: u64,
    removed: u64,
    subtable: usize,
    /// Full hash of the masked key in its subtable (locates its group).
    hash: u64,
    /// The masked key.
    key: FlowKey,
}

/// What lookup needs of a rule, stored inline in its group.
#[derive(Clone, Copy, Debug)]
struct Ref {
    priority: u32,
    /// Where the rule is in [`RuleStore::slab`].
    slot: u32,
    id: RuleId,
    added: u64,
    removed: u64,
}

impl Ref {
    #[inline]
    fn visible(&self, v: u64) -> bool {
        self.added <= v && v < self.removed
    }
}

/// `Ref::id` of the head of an emptied [`Rules`] (ids never get there).
const NO_RULE: RuleId = u64::MAX;

/// Rules sharing one masked key, ordered by priority (high first) then id.
/// The first is stored inline: most keys have one rule, and a lookup that
/// found the group then decides without touching another cache line.
struct Rules {
    head: Ref,
    more: Vec<Ref>,
}

impl Rules {
    fn new(r: Ref) -> Rules {
        Rules { head: r, more: Vec::new() }
    }

    fn is_empty(&self) -> bool {
        self.head.id == NO_RULE
    }

    #[inline]
    fn iter(&self) -> impl Iterator<Item = &Ref> {
        std::iter::once(&self.head).filter(|r| r.id != NO_RULE).chain(&self.more)
    }

    fn iter_mut(&mut self) -> impl Iterator<Item = &mut Ref> {
        std::iter::once(&mut self.head).filter(|r| r.id != NO_RULE).chain(&mut self.more)
    }

    /// Inserts after the rules of higher or equal priority (ids only grow,
    /// so a new rule goes after its equals).
    fn insert(&mut self, r: Ref) {
        if self.is_empty() {
            self.head = r;
        } else if self.head.priority < r.priority {
            self.more.insert(0, std::mem::replace(&mut self.head, r));
        } else {
            let at = self.more.partition_point(|x| x.priority >= r.priority);
            self.more.insert(at, r);
        }
    }

    fn remove(&mut self, id: RuleId) {
        if self.head.id == id {
            if self.more.is_empty() {
                self.head.id = NO_RULE;
            } else {
                self.head = self.more.remove(0);
            }
        } else {
            self.more.retain(|x| x.id != id);
        }
    }
}

/// Groups whose different keys share a 64-bit hash are chained. A group
/// does not hold its masked key: every rule in it has that key, so the
/// head rule's stored match is compared (a group is never left empty).
/// Keeping the key once per rule instead of twice saves a third of a
/// rule's memory; it costs a lookup only on a full-hash hit.
struct Group {
    rules: Rules,
    next: Option<Box<Group>>,
}

/// The key of a stored rule (by its slot), for group comparisons.
type KeyOf<'a> = &'a dyn Fn(u32) -> &'a FlowKey;

/// What a lookup reads of a subtable comes first, in one cache line (a
/// subtable is 2.5 KB, most of it its maps' headers and its mask; through
/// OVN's pipeline a translation visits about a hundred subtables, and
/// reading their fields from all over each one was a good part of its time).
#[repr(C)]
struct Subtable {
    /// `(index, mask)` of the non-zero mask words, in key order.
    wm: Box<[(u8, u64)]>,
    /// The stages that have mask words: `wm[..ends[i]]` are the words up
    /// to and including the `i`-th of them. `n_stages` of them are used.
    ends: [u8; 4],
    n_stages: u8,
    /// Index in `ends` of the stage holding L3 (where the address tries
    /// apply) and L4 (the port tries), if any.
    l3: u8,
    l4: u8,
    has_trie: bool,
    mask: FlowKey,
    /// For each used stage but the last: rule count per hash of the stage
    /// prefix of the rule keys.
    stage_sets: [HashKeyed<u32>; 3],
    /// Full hash -> group.
    groups: HashKeyed<Group>,
    /// Priority -> rule count.
    prios: BTreeMap<u32, u32>,
    /// Prefix length of the mask on each trie field, 0 if not usable (not
    /// a CIDR prefix, absent, or `dl_type` not exactly matched).
    plen: [u8; N_TRIES],
    /// Port masks that are not prefixes (`tp_src=0x7/0xff`) get a trie of
    /// their own, over the masked port, as Open vSwitch's ports trie does.
    masked_ports: [Option<Box<MaskedTrie>>; 2],
    /// The mask matches all of `metadata`: the subtable takes part in
    /// metadata partitioning (see [`Classifier::lookup`]).
    partitioned: bool,
    n_rules: usize,
}

/// A trie private to one subtable over one port field whose mask `mask` is
/// not a prefix. It holds `key & mask` of each rule, as a prefix of length
/// `p` (up to and including the mask's last set bit), so it is a prefix trie
/// over masked values. A walk of the packet's masked port that proves no
/// rule agrees on `p` bits read only `mask & top(bits)` of the packet.
#[derive(Debug)]
struct MaskedTrie {
    mask: u16,
    p: u32,
    trie: Trie,
}

impl Subtable {
    fn new(mask: FlowKey) -> Subtable {
        let words: Vec<u8> = (0..WORDS).filter(|&i| mask.w[i] != 0).map(|i| i as u8).collect();
        let mut ends = [0u8; 4];
        let mut n_stages = 0;
        let mut l3 = u8::MAX;
        let mut l4 = u8::MAX;
        for s in 0..4 {
            let end = words.iter().filter(|&&w| (w as usize) < STAGES[s + 1]).count() as u8;
            let start = if n_stages == 0 { 0 } else { ends[n_stages - 1] };
            if end > start {
                if s == 2 {
                    l3 = n_stages as u8;
                }
                if s == 3 {
                    l4 = n_stages as u8;
                }
                ends[n_stages] = end;
                n_stages += 1;
            }
        }
        let mut plen = [0u8; N_TRIES];
        if mask.dl_type() == 0xffff {
            for (i, f) in TRIE_FIELDS.iter().enumerate() {
                plen[i] = prefix_len(f.get(&mask), f.bits).unwrap_or(0) as u8;
            }
        }
        let mut masked_ports: [Option<Box<MaskedTrie>>; 2] = [None, None];
        for (j, f) in [loc::TP_SRC, loc::TP_DST].iter().enumerate() {
            let m = f.get(&mask) as u16;
            if m != 0 && prefix_len(m as u128, 16).is_none() {
                let p = 16 - m.trailing_zeros();
                masked_ports[j] = Some(Box::new(MaskedTrie { mask: m, p, trie: Trie::new(16) }));
            }
        }
        let has_trie = plen.iter().any(|&p| p > 0) || masked_ports.iter().any(Option::is_some);
        debug_assert!(!has_trie || l3 != u8::MAX || l4 != u8::MAX);
        Subtable {
            wm: words.iter().map(|&w| (w, mask.w[w as usize])).collect(),
            mask,
            ends,
            n_stages: n_stages as u8,
            l3,
            l4,
            stage_sets: Default::default(),
            groups: HashKeyed::default(),
            prios: BTreeMap::new(),
            plen,
            masked_ports,
            has_trie,
            partitioned: mask.metadata() == u64::MAX,
            n_rules: 0,
        }
    }

    fn max_priority(&self) -> u32 {
        self.prios.keys().next_back().copied().unwrap_or(0)
    }

    /// Hash after each used stage (the last is the full hash).
    fn stage_hashes(&self, key: &FlowKey) -> [u64; 4] {
        // A catch-all subtable has no stages; its only key hashes to this.
        let mut out = [finish(BASIS); 4];
        let mut h = BASIS;
        let mut from = 0;
        for (o, &end) in out.iter_mut().zip(&self.ends[..self.n_stages as usize]) {
            for &(w, m) in &self.wm[from..end as usize] {
                h = hash_word(h, key.w[w as usize] & m);
            }
            *o = finish(h);
            from = end as usize;
        }
        out
    }

    fn full_hash(&self, key: &FlowKey) -> u64 {
        self.stage_hashes(key)[self.n_stages.max(1) as usize - 1]
    }

    #[inline]
    fn key_eq(&self, key: &FlowKey, masked: &FlowKey) -> bool {
        self.wm.iter().all(|&(w, m)| key.w[w as usize] & m == masked.w[w as usize])
    }

    fn group(&self, h: u64, key: &FlowKey, keyof: KeyOf) -> Option<&Group> {
        let mut g = self.groups.get(&h)?;
        loop {
            if self.key_eq(key, keyof(g.rules.head.slot)) {
                return Some(g);
            }
            g = g.next.as_deref()?;
        }
    }

    /// The group of a rule known to be stored here with full hash `h`:
    /// when no other key shares the hash (almost always), no key needs
    /// comparing.
    fn group_of_stored(&mut self, h: u64, key: &FlowKey, keyof: KeyOf) -> Option<&mut Group> {
        if self.groups.get(&h).is_some_and(|g| g.next.is_none()) {
            return self.groups.get_mut(&h);
        }
        self.group_mut(h, key, keyof)
    }

    fn group_mut(&mut self, h: u64, key: &FlowKey, keyof: KeyOf) -> Option<&mut Group> {
        let wm = &self.wm;
        let eq = |g: &Group| {
            let gk = keyof(g.rules.head.slot);
            wm.iter().all(|&(w, m)| key.w[w as usize] & m == gk.w[w as usize])
        };
        let mut g = self.groups.get_mut(&h)?;
        loop {
            if eq(g) {
                return Some(g);
            }
            g = g.next.as_deref_mut()?;
        }
    }
}

/// Whether a map of `len` entries in `cap` slots should give memory back.
#[inline]
fn sparse(len: usize, cap: usize) -> bool {
    cap > 64 && len < cap / 4
}

/// Shrinks a subtable's maps once they are mostly empty.
fn st_shrink(st: &mut Subtable) {
    st.groups.shrink_sparse();
    for s in &mut st.stage_sets {
        s.shrink_sparse();
    }
}

/// The stored rules. A lookup reaches a rule through its slot in `slab`,
/// one index, where a map by id took a hash probe (and a translation
/// through OVN's pipeline took three per table: the group's key, the
/// conjunction check and the rule's actions). Callers hold ids; `by_id`
/// finds their slots.
struct RuleStore<T> {
    slab: Vec<Option<Box<Rule<T>>>>,
    /// Empty slots of `slab`, reused first.
    free: Vec<u32>,
    by_id: Sharded<u32, Mix>,
}

impl<T> Default for RuleStore<T> {
    fn default() -> Self {
        RuleStore { slab: Vec::new(), free: Vec::new(), by_id: Sharded::default() }
    }
}

impl<T> RuleStore<T> {
    /// The rule in `slot`, which must hold one.
    #[inline]
    fn at(&self, slot: u32) -> &Rule<T> {
        self.slab[slot as usize].as_deref().expect("a referenced slot holds a rule")
    }

    fn get(&self, id: RuleId) -> Option<&Rule<T>> {
        self.by_id.get(&id).map(|&s| self.at(s))
    }

    fn get_mut(&mut self, id: RuleId) -> Option<&mut Rule<T>> {
        let s = *self.by_id.get(&id)?;
        self.slab[s as usize].as_deref_mut()
    }

    fn insert(&mut self, r: Box<Rule<T>>) -> u32 {
        let id = r.id;
        let slot = match self.free.pop() {
            Some(s) => {
                self.slab[s as usize] = Some(r);
                s
            }
            None => {
                self.slab.push(Some(r));
                u32::try_from(self.slab.len() - 1).expect("fewer than 2^32 rules")
            }
        };
        self.by_id.insert(id, slot);
        slot
    }

    fn remove(&mut self, id: RuleId) -> Option<Box<Rule<T>>> {
        let s = self.by_id.remove(&id)?;
        self.free.push(s);
        self.slab[s as usize].take()
    }

    fn len(&self) -> usize {
        self.by_id.len()
    }

    fn values(&self) -> impl Iterator<Item = &Rule<T>> {
        self.slab.iter().filter_map(|r| r.as_deref())
    }

    /// Gives memory back once mostly empty: the empty slots at the end of
    /// the slab go, and the maps shrink.
    fn shrink_sparse(&mut self) {
        self.by_id.shrink_sparse();
        if !sparse(self.len(), self.slab.len()) {
            return;
        }
        let before = self.slab.len();
        while self.slab.last().is_some_and(Option::is_none) {
            self.slab.pop();
        }
        if self.slab.len() < before {
            let n = self.slab.len() as u32;
            self.free.retain(|&s| s < n);
            self.slab.shrink_to_fit();
            self.free.shrink_to_fit();
        }
    }
}

/// The stored (masked) key of the rule in `slot`, which must hold one.
#[inline]
fn key_of<T>(rules: &RuleStore<T>, slot: u32) -> &FlowKey {
    &rules.at(slot).key
}

/// An OpenFlow flow table: prioritized wildcarded rules carrying a `T`.
pub struct Classifier<T> {
    /// Boxed: a rule is about 500 bytes (its match is two cache-line
    /// aligned keys), and a hash map keeps up to twice its entries' room
    /// as empty slots; boxed, an empty slot costs 16 bytes. Lookups never
    /// touch this map (groups hold what they need inline).
    rules: RuleStore<T>,
    next_id: RuleId,
    /// Subtable slots; `None` slots are free (listed in `free_subtables`).
    subtables: Vec<Option<Subtable>>,
    free_subtables: Vec<usize>,
    by_mask: HashMap<FlowKey, usize, BuildHasherDefault<flow::key::WordHasher>>,
    /// (max priority, subtable index) of non-empty subtables, highest first.
    /// (It also says whether the subtable is partitioned, so a lookup
    /// skips other datapaths' subtables without reading them.)
    order: Vec<(u32, usize, bool)>,
    tries: [Trie; N_TRIES],
    /// Ids of removed rules not purged yet.
    removed: Vec<RuleId>,
    /// Metadata partitioning, as in Open vSwitch's classifier: for each
    /// `metadata` value, a bitmap of the subtables (by index) that match
    /// all of `metadata` and hold a rule with that value. Pipelines that
    /// keep one logical datapath per metadata value (OVN, NSX) have many
    /// such subtables per table, most of them for other datapaths; a
    /// lookup skips those on one bit test instead of hashing their first
    /// stage.
    partitions: HashMap<u64, Vec<u64>, BuildHasherDefault<Mix>>,
    /// Rules per (metadata value, partitioned subtable).
    partition_rules: HashMap<(u64, usize), u32>,
    /// This state's stamp, new at every change (see [`memo`]).
    stamp: u64,
}

impl<T> Default for Classifier<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Classifier<T> {
    pub fn new() -> Self {
        Classifier {
            rules: RuleStore::default(),
            next_id: 0,
            subtables: Vec::new(),
            free_subtables: Vec::new(),
            by_mask: HashMap::default(),
            order: Vec::new(),
            tries: [Trie::new(32), Trie::new(32), Trie::new(128), Trie::new(128), Trie::new(16), Trie::new(16)],
            removed: Vec::new(),
            partitions: HashMap::default(),
            partition_rules: HashMap::new(),
            stamp: memo::next_stamp(),
        }
    }

    fn st(&self, i: usize) -> &Subtable {
        self.subtables[i].as_ref().expect("live subtable")
    }

    /// Re-sorts `order` after subtable `si`'s maximum priority changed.
    fn update_order(&mut self, si: usize) {
        let st = self.st(si);
        let entry = (st.n_rules > 0).then(|| (st.max_priority(), si, st.partitioned));
        let pos = self.order.iter().position(|&(_, i, _)| i == si);
        match (pos, entry) {
            (Some(p), Some(e)) if self.order[p] == e => return,
            (Some(p), _) => {
                self.order.remove(p);
            }
            (None, _) => {}
        }
        if let Some(e) = entry {
            // Stable among equal priorities: older subtables first.
            let at = self.order.partition_point(|&(p, _, _)| p >= e.0);
            self.order.insert(at, e);
        }
    }

    /// Inserts a rule, visible from `version` on. The key bits outside the
    /// mask are ignored. Returns its handle.
    pub fn insert(&mut self, m: Match, priority: u32, data: T, version: u64) -> RuleId {
        self.stamp = memo::next_stamp();
        let m = Match::new(m.key, m.mask);
        let si = match self.by_mask.get(&m.mask) {
            Some(&i) => i,
            None => {
                let st = Subtable::new(m.mask);
                let i = match self.free_subtables.pop() {
                    Some(i) => {
                        self.subtables[i] = Some(st);
                        i
                    }
                    None => {
                        self.subtables.push(Some(st));
                        self.subtables.len() - 1
                    }
                };
                self.by_mask.insert(m.mask, i);
                i
            }
        };
        let id = self.next_id;
        self.next_id += 1;
        let st = self.subtables[si].as_mut().expect("live subtable");
        let hs = st.stage_hashes(&m.key);
        let last = st.n_stages.max(1) as usize - 1;
        for (s, &h) in hs.iter().enumerate().take(last) {
            *st.stage_sets[s].entry(h).or_insert(0) += 1;
        }
        let slot = self.rules.insert(Box::new(Rule {
            id,
            key: m.key,
            priority,
            data,
            added: version,
            removed: LIVE,
            subtable: si,
            hash: hs[last],
        }));
        let r = Ref { priority, slot, id, added: version, removed: LIVE };
        let rules = &self.rules;
        match st.group_mut(hs[last], &m.key, &|x| key_of(rules, x)) {
            Some(g) => {
                g.rules.insert(r);
            }
            None => {
                let g = Group { rules: Rules::new(r), next: None };
                match st.groups.get_mut(&hs[last]) {
                    // A different key with the same 64-bit hash.
                    Some(head) => head.next = Some(Box::new(Group { next: head.next.take(), ..g })),
                    None => {
                        st.groups.insert(hs[last], g);
                    }
                }
            }
        }
        let old_max = (st.n_rules > 0).then(|| st.max_priority());
        *st.prios.entry(priority).or_insert(0) += 1;
        st.n_rules += 1;
        if st.has_trie && m.key.dl_type() != 0 {
            for (i, f) in TRIE_FIELDS.iter().enumerate() {
                if st.plen[i] > 0 && trie_eth_ok(i, m.key.dl_type()) {
                    self.tries[i].insert(f.get(&m.key), st.plen[i] as u32);
                }
            }
        }
        for (t, f) in st.masked_ports.iter_mut().zip([loc::TP_SRC, loc::TP_DST]) {
            if let Some(t) = t {
                t.trie.insert(f.get(&m.key) & t.mask as u128, t.p);
            }
        }
        if st.partitioned {
            let md = m.key.metadata();
            let n = self.partition_rules.entry((md, si)).or_insert(0);
            *n += 1;
            if *n == 1 {
                let bits = self.partitions.entry(md).or_default();
                if bits.len() <= si / 64 {
                    bits.resize(si / 64 + 1, 0);
                }
                bits[si / 64] |= 1 << (si % 64);
            }
        }
        if old_max.is_none_or(|p| priority > p) {
            self.update_order(si);
        }
        id
    }

    /// Makes a rule invisible from `version` on (readers at earlier
    /// versions still see it). Removing twice keeps the first version.
    pub fn remove(&mut self, id: RuleId, version: u64) {
        let Some(r) = self.rules.get_mut(id) else { return };
        if r.removed != LIVE {
            return;
        }
        self.stamp = memo::next_stamp();
        r.removed = version.max(r.added);
        let (removed, si, h) = (r.removed, r.subtable, r.hash);
        let rules = &self.rules;
        let key = &rules.get(id).expect("just found").key;
        let st = self.subtables[si].as_mut().expect("live subtable");
        let g = st.group_of_stored(h, key, &|x| key_of(rules, x)).expect("rule is in its group");
        g.rules.iter_mut().find(|x| x.id == id).expect("rule is in its group").removed = removed;
        self.removed.push(id);
    }

    /// Frees the removed rules that are invisible at every version from
    /// `oldest_live_version` on, i.e. that no reader can still see.
    pub fn purge(&mut self, oldest_live_version: u64) {
        self.purge_some(oldest_live_version, usize::MAX);
    }

    /// Like [`Classifier::purge`], but frees at most `max` rules (so an
    /// owner can free a large delete in short steps); returns how many it
    /// freed. Maps that emptied out give their memory back.
    pub fn purge_some(&mut self, oldest_live_version: u64, max: usize) -> usize {
        let mut keep = Vec::new();
        let mut freed = 0;
        let mut pending = std::mem::take(&mut self.removed).into_iter();
        for id in pending.by_ref() {
            match self.rules.get(id) {
                Some(r) if r.removed <= oldest_live_version => {}
                Some(_) => {
                    keep.push(id);
                    continue;
                }
                None => continue,
            }
            freed += 1;
            // Out of its group first: the group's key is its head rule's.
            {
                let rules = &self.rules;
                let r = rules.get(id).expect("checked above");
                let st = self.subtables[r.subtable].as_mut().expect("live subtable");
                Self::unlink(st, r.hash, &r.key, id, &|x| key_of(rules, x));
            }
            let r = self.rules.remove(id).expect("checked above");
            let si = r.subtable;
            let st = self.subtables[si].as_mut().expect("live subtable");
            let hs = st.stage_hashes(&r.key);
            let last = st.n_stages.max(1) as usize - 1;
            for (s, &h) in hs.iter().enumerate().take(last) {
                let c = st.stage_sets[s].get_mut(&h).expect("stage hash counted");
                *c -= 1;
                if *c == 0 {
                    st.stage_sets[s].remove(&h);
                }
            }
            let c = st.prios.get_mut(&r.priority).expect("priority counted");
            *c -= 1;
            let max_changed = if *c == 0 {
                st.prios.remove(&r.priority);
                st.prios.keys().next_back().is_none_or(|&p| p < r.priority)
            } else {
                false
            };
            st.n_rules -= 1;
            if st.has_trie {
                for (i, f) in TRIE_FIELDS.iter().enumerate() {
                    if st.plen[i] > 0 && trie_eth_ok(i, r.key.dl_type()) {
                        self.tries[i].remove(f.get(&r.key), st.plen[i] as u32);
                    }
                }
            }
            for (t, f) in st.masked_ports.iter_mut().zip([loc::TP_SRC, loc::TP_DST]) {
                if let Some(t) = t {
                    t.trie.remove(f.get(&r.key) & t.mask as u128, t.p);
                }
            }
            if st.partitioned {
                let md = r.key.metadata();
                let n = self.partition_rules.get_mut(&(md, si)).expect("partition counted");
                *n -= 1;
                if *n == 0 {
                    self.partition_rules.remove(&(md, si));
                    let bits = self.partitions.get_mut(&md).expect("partition exists");
                    bits[si / 64] &= !(1 << (si % 64));
                    if bits.iter().all(|&w| w == 0) {
                        self.partitions.remove(&md);
                    }
                }
            }
            let empty = st.n_rules == 0;
            if max_changed {
                self.update_order(si);
            }
            if empty {
                let st = self.subtables[si].take().expect("live subtable");
                self.by_mask.remove(&st.mask);
                self.free_subtables.push(si);
            } else {
                st_shrink(self.subtables[si].as_mut().expect("live subtable"));
            }
            if freed == max {
                break;
            }
        }
        keep.extend(pending);
        self.removed = keep;
        if self.removed.is_empty() {
            self.removed = Vec::new();
        }
        if freed > 0 {
            self.rules.shrink_sparse();
            // The tries and partitions changed (and freed slots may be
            // reused once a rule is inserted, which takes a stamp too).
            self.stamp = memo::next_stamp();
        }
        freed
    }

    /// Removed rules not freed yet.
    pub fn n_unpurged(&self) -> usize {
        self.removed.len()
    }

    /// Takes rule `id` out of its group, dropping the group if it empties.
    fn unlink(st: &mut Subtable, h: u64, key: &FlowKey, id: RuleId, keyof: KeyOf) {
        let g = st.group_of_stored(h, key, keyof).expect("rule is in its group");
        g.rules.remove(id);
        if !g.rules.is_empty() {
            return;
        }
        // Rebuild the (almost always one-long) chain without the empty group.
        let mut head = st.groups.remove(&h).expect("group exists");
        let mut rest = Vec::new();
        loop {
            let next = head.next.take();
            if !head.rules.is_empty() {
                rest.push(head);
            }
            match next {
                Some(n) => head = *n,
                None => break,
            }
        }
        let mut chain: Option<Box<Group>> = None;
        while let Some(mut g) = rest.pop() {
            g.next = chain;
            chain = Some(Box::new(g));
        }
        if let Some(c) = chain {
            st.groups.insert(h, *c);
        }
    }

    /// The rule's match, priority and data (while not purged).
    pub fn get(&self, id: RuleId) -> Option<(RuleMatch<'_>, u32, &T)> {
        let r = self.rules.get(id)?;
        let mask = &self.subtables[r.subtable].as_ref().expect("a stored rule's subtable is live").mask;
        Some((RuleMatch { key: &r.key, mask }, r.priority, &r.data))
    }

    pub fn get_mut(&mut self, id: RuleId) -> Option<(RuleMatch<'_>, u32, &mut T)> {
        let r = self.rules.get_mut(id)?;
        let mask = &self.subtables[r.subtable].as_ref().expect("a stored rule's subtable is live").mask;
        let Rule { key, priority, data, .. } = r;
        Some((RuleMatch { key, mask }, *priority, data))
    }

    /// The versions `[added, removed)` in which the rule is visible
    /// (`removed == u64::MAX` while not removed).
    pub fn versions(&self, id: RuleId) -> Option<(u64, u64)> {
        self.rules.get(id).map(|r| (r.added, r.removed))
    }

    /// The highest-priority rule matching `key` among those visible at
    /// `version` (ties: lowest id). ORs into `wc` the key bits the answer
    /// depended on: any key agreeing with `key` on `wc` gets the same one.
    pub fn lookup(&self, key: &FlowKey, version: u64, wc: &mut FlowKey) -> Option<RuleId> {
        self.lookup_ref(key, version, wc).map(|r| r.id)
    }

    /// [`Classifier::lookup`], returning the rule's id, match, priority
    /// and data at once (no second look-up by id).
    pub fn lookup_rule(
        &self,
        key: &FlowKey,
        version: u64,
        wc: &mut FlowKey,
    ) -> Option<(RuleId, RuleMatch<'_>, u32, &T)> {
        let r = self.lookup_ref(key, version, wc)?;
        Some(self.rule_at(r.slot))
    }

    /// The id, priority and data of the rule in `slot`.
    #[inline]
    fn rule_data(&self, slot: u32) -> (RuleId, u32, &T) {
        let rule = self.rules.at(slot);
        (rule.id, rule.priority, &rule.data)
    }

    /// The rule in `slot` as [`Classifier::lookup_rule`] returns it.
    #[inline]
    fn rule_at(&self, slot: u32) -> (RuleId, RuleMatch<'_>, u32, &T) {
        let rule = self.rules.at(slot);
        let mask = &self.st(rule.subtable).mask;
        (rule.id, RuleMatch { key: &rule.key, mask }, rule.priority, &rule.data)
    }

    fn lookup_ref(&self, key: &FlowKey, version: u64, wc: &mut FlowKey) -> Option<Ref> {
        let mut best: Option<Ref> = None;
        // Trie walks, done at most once per field and only when needed.
        let mut walks: [Option<Walk>; N_TRIES] = [None; N_TRIES];
        // The partitioned subtables with a rule for this metadata value.
        // Skipping the others depends on all of the key's metadata, so a
        // skip adds it to `wc` (their first stage would have added it, and
        // more).
        let partition = if self.partition_rules.is_empty() {
            &[][..]
        } else {
            self.partitions.get(&key.metadata()).map_or(&[][..], Vec::as_slice)
        };
        'subtables: for &(maxp, si, partitioned) in &self.order {
            if let Some(b) = &best {
                // Equal priority could still win with a lower id.
                if maxp < b.priority {
                    break;
                }
            }
            if partitioned && partition.get(si / 64).is_none_or(|w| w & (1 << (si % 64)) == 0) {
                wc.set_metadata(u64::MAX);
                continue;
            }
            let st = self.st(si);
            let n = st.n_stages as usize;
            let keyof: KeyOf = &|x| key_of(&self.rules, x);
            let mut h = BASIS;
            let mut from = 0;
            // A catch-all subtable has no stages, only its one group.
            let mut group = if n == 0 { st.group(finish(BASIS), key, keyof) } else { None };
            for s in 0..n {
                let to = st.ends[s] as usize;
                let mut h2 = h;
                for &(w, m) in &st.wm[from..to] {
                    h2 = hash_word(h2, key.w[w as usize] & m);
                }
                let fh = finish(h2);
                let hit = if s + 1 < n {
                    st.stage_sets[s].contains_key(&fh)
                } else {
                    group = st.group(fh, key, keyof);
                    group.is_some()
                };
                // A miss at the L3 stage can also be proved by a prefix
                // trie, often with fewer bits. Ask it only if the stage's
                // bits are not all in `wc` already.
                if !hit
                    && (s == st.l3 as usize || s == st.l4 as usize)
                    && st.has_trie
                    && !st.wm[from..to].iter().all(|&(w, m)| wc.w[w as usize] & m == m)
                    && self.trie_skips(st, s == st.l4 as usize, key, &mut walks, wc)
                {
                    continue 'subtables;
                }
                for &(w, m) in &st.wm[from..to] {
                    wc.w[w as usize] |= m;
                }
                if !hit {
                    continue 'subtables;
                }
                h = h2;
                from = to;
            }
            let Some(g) = group else { continue };
            for r in g.rules.iter() {
                if let Some(b) = &best {
                    if r.priority < b.priority || (r.priority == b.priority && r.id > b.id) {
                        break;
                    }
                }
                if r.visible(version) {
                    best = Some(*r);
                    break;
                }
            }
        }
        best
    }

    /// True if a prefix trie proves no rule of `st` matches `key`, having
    /// added to `wc` the bits that proof read.
    #[inline]
    fn trie_skips(
        &self,
        st: &Subtable,
        l4: bool,
        key: &FlowKey,
        walks: &mut [Option<Walk>; N_TRIES],
        wc: &mut FlowKey,
    ) -> bool {
        let dl_type = key.dl_type();
        for i in 0..N_TRIES {
            let p = st.plen[i] as u32;
            if p == 0 || TRIE_L4[i] != l4 || !trie_eth_ok(i, dl_type) {
                continue;
            }
            let f = TRIE_FIELDS[i];
            let walk = *walks[i].get_or_insert_with(|| self.tries[i].lookup(f.get(key)));
            if let Some(bits) = walk.bits_to_exclude(p) {
                if bits > 0 {
                    let m = (f.max() >> (f.bits - bits)) << (f.bits - bits);
                    f.set(wc, f.get(wc) | m);
                }
                // The proof holds only for this Ethertype. (The L2 stage has
                // already added dl_type, since this subtable matches it
                // exactly; this keeps the proof self-contained.)
                loc::DL_TYPE.set(wc, 0xffff);
                return true;
            }
        }
        if l4 {
            // The subtable's own tries over masked ports. All its rules share
            // the mask, so the proof holds for any Ethertype.
            for (t, f) in st.masked_ports.iter().zip([loc::TP_SRC, loc::TP_DST]) {
                let Some(t) = t else { continue };
                let walk = t.trie.lookup(f.get(key) & t.mask as u128);
                if let Some(bits) = walk.bits_to_exclude(t.p) {
                    let top = if bits == 0 { 0 } else { (0xffffu32 << (16 - bits)) as u16 };
                    f.set(wc, f.get(wc) | (t.mask & top) as u128);
                    return true;
                }
            }
        }
        false
    }

    /// Strict find: the visible rule with exactly this match and priority.
    pub fn find_exact(&self, m: &Match, priority: u32, version: u64) -> Option<RuleId> {
        let m = Match::new(m.key, m.mask);
        let st = self.st(*self.by_mask.get(&m.mask)?);
        let g = st.group(st.full_hash(&m.key), &m.key, &|x| key_of(&self.rules, x))?;
        g.rules.iter().find(|r| r.priority == priority && r.visible(version)).map(|r| r.id)
    }

    /// Non-strict find (OpenFlow's non-strict modify and delete): the
    /// visible rules, of any priority, whose match is `m` or more specific
    /// (every packet they match, `m` matches). In increasing id order.
    pub fn find_loose(&self, m: &Match, version: u64) -> Vec<RuleId> {
        let m = Match::new(m.key, m.mask);
        let mut out = Vec::new();
        for st in self.subtables.iter().flatten() {
            if !m.mask.is_subset_of(&st.mask) {
                continue;
            }
            if m.mask == st.mask {
                if let Some(g) = st.group(st.full_hash(&m.key), &m.key, &|x| key_of(&self.rules, x)) {
                    out.extend(g.rules.iter().filter(|r| r.visible(version)).map(|r| r.id));
                }
                continue;
            }
            for head in st.groups.values() {
                let mut g = Some(head);
                while let Some(x) = g {
                    // A catch-all selects every group without looking.
                    if m.mask == FlowKey::ZERO || key_of(&self.rules, x.rules.head.slot).eq_masked(&m.key, &m.mask) {
                        out.extend(x.rules.iter().filter(|r| r.visible(version)).map(|r| r.id));
                    }
                    g = x.next.as_deref();
                }
            }
        }
        out.sort_unstable();
        out
    }

    /// The rules visible at `version`, in increasing id order.
    pub fn iter(&self, version: u64) -> impl Iterator<Item = RuleId> + '_ {
        let mut ids: Vec<RuleId> =
            self.rules.values().filter(|r| r.added <= version && version < r.removed).map(|r| r.id).collect();
        ids.sort_unstable();
        ids.into_iter()
    }

    /// Number of rules visible at `version`.
    pub fn len(&self, version: u64) -> usize {
        self.rules.values().filter(|r| r.added <= version && version < r.removed).count()
    }

    pub fn is_empty(&self, version: u64) -> bool {
        self.rules.values().all(|r| !(r.added <= version && version < r.removed))
    }

    /// Rules stored, including removed ones not yet purged.
    pub fn n_stored(&self) -> usize {
        self.rules.len()
    }

    /// Number of subtables (distinct masks among stored rules).
    pub fn n_subtables(&self) -> usize {
        self.order.len()
    }
}
