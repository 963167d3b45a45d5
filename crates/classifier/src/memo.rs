//! A memo of one classifier's lookups, kept by one thread.
//!
//! A lookup reports the key bits its answer depended on (`wc`): every key
//! that agrees with the looked-up one on those bits gets the same answer
//! (the crate's correctness property). So the answer can be remembered
//! under those bits and given again, without searching the subtables, to
//! any later key that agrees on them, for as long as the classifier and the
//! lookup version are unchanged.
//!
//! This is what makes translation through a long pipeline cheap when many
//! new flows share most of their path. Through OVN's pipeline a miss makes
//! some 30 lookups that visit about a hundred subtables. A flood of flows to
//! new destinations (each a new megaflow, since OVN's L2 lookup matches the
//! destination MAC exactly) differs in only 3 of them; the other 27 depend
//! on 1-2 words of the key (`metadata`, a register, the port) that every
//! such flow shares. Measured on the stored OVN pipeline
//! (`cargo bench -p ofproto --bench ovn`): an answer depends on 1.4 key
//! words on average.
//!
//! **Validity.** A memo belongs to one classifier state: the classifier's
//! `stamp`, which is taken from a process-wide counter when it is created
//! and at every change, so no two states (not even of two copies of one
//! classifier) share one. A memo that meets another stamp, or another
//! version, empties itself first. An entry stores the rule's slot, and a
//! slot cannot be reused without a change (and so a new stamp).
//!
//! **Groups.** Entries are grouped by the bits they depend on (one hash
//! table per distinct set of bits, usually a handful per table). A lookup
//! probes each group with the key's bits under the group's mask: a hash of
//! one or two words and one probe, where a search hashes and probes a
//! stage per subtable visited.
//!
//! **When it does not pay.** Answers that depend on fields every flow
//! varies (an exact destination MAC in a flood of new ones) are never
//! asked again. Each memo counts what it stored and what it answered; one
//! that answers less than a quarter of what it stores stops storing for a
//! while and searches directly. Its size is bounded: past [`MAX_ENTRIES`]
//! the largest group is emptied.

use crate::{Classifier, RuleId, BASIS};
use flow::key::{finish, hash_word, FlowKey};
use std::sync::atomic::{AtomicU64, Ordering};

/// Entries a memo holds at most (over all its groups): 64 KB with the
/// tables' room, per table a thread has translated through. The answers
/// worth remembering are shared by many flows, so they are few (one per
/// logical port or datapath in OVN's tables).
pub const MAX_ENTRIES: usize = 1024;
/// Groups (distinct dependency masks) a memo holds at most. A key is
/// probed against every group, so many groups would cost more than the
/// search they replace.
const MAX_GROUPS: usize = 8;
/// Stores between two looks at the memo's hit rate.
const WINDOW: u32 = 512;
/// Lookups a memo that did not pay sits out before it tries again.
const SIT_OUT: u32 = 8192;
/// `slot` of an entry whose answer is "no rule".
const NONE: u32 = u32::MAX;

static STAMPS: AtomicU64 = AtomicU64::new(1);

/// A fresh stamp for a classifier state.
pub(crate) fn next_stamp() -> u64 {
    STAMPS.fetch_add(1, Ordering::Relaxed)
}

/// Key words an answer may depend on to be remembered. Answers through
/// OVN's pipeline depend on 1.4 words on average; one that depends on more
/// is searched for every time.
const MAX_WORDS: usize = 3;

/// One remembered answer: the masked words it was stored under, 32 bits
/// of their hash, and the rule's slot. 32 bytes and aligned, so a probe
/// reads one cache line (two entries share it).
#[derive(Clone, Copy)]
#[repr(C, align(32))]
struct Entry {
    tag: u32,
    slot: u32,
    vals: [u64; MAX_WORDS],
}

/// `Entry::slot` of a free place.
const FREE: u32 = u32::MAX - 1;

/// Lookup answers sharing one dependency mask: an open-addressing table
/// with linear probing (a general map reads its control bytes and its
/// entry in two cache lines, then the values in a third). What a probe
/// reads of the group itself fits one cache line.
#[repr(C, align(64))]
struct Group {
    /// The mask's non-zero words: the first `n` of `idx` (word indices)
    /// and `masks` (held here, not boxed: one pointer fewer per probe).
    idx: [u8; MAX_WORDS],
    n: u8,
    len: u32,
    masks: [u64; MAX_WORDS],
    /// A power of two long, at most half full.
    table: Box<[Entry]>,
    hits: u64,
}

impl Group {
    fn new(words: &[(u8, u64)]) -> Group {
        let mut idx = [0; MAX_WORDS];
        let mut masks = [0; MAX_WORDS];
        for (i, &(w, m)) in words.iter().enumerate() {
            (idx[i], masks[i]) = (w, m);
        }
        Group { idx, n: words.len() as u8, len: 0, masks, table: Group::empty(16), hits: 0 }
    }

    fn empty(n: usize) -> Box<[Entry]> {
        vec![Entry { tag: 0, vals: [0; MAX_WORDS], slot: FREE }; n].into_boxed_slice()
    }

    /// `(word, mask)` of the mask's non-zero words.
    #[inline]
    fn words(&self) -> impl Iterator<Item = (u8, u64)> + '_ {
        self.idx[..self.n as usize].iter().copied().zip(self.masks)
    }

    fn same_words(&self, words: &[(u8, u64)]) -> bool {
        words.len() == self.n as usize && self.words().zip(words).all(|(a, &b)| a == b)
    }

    /// The key's masked words and their hash.
    #[inline]
    fn masked(&self, key: &FlowKey) -> ([u64; MAX_WORDS], u64) {
        let mut vals = [0; MAX_WORDS];
        for (v, (w, m)) in vals.iter_mut().zip(self.words()) {
            *v = key.w[w as usize] & m;
        }
        (vals, self.hash_of(&vals))
    }

    #[inline]
    fn find(&self, key: &FlowKey) -> Option<u32> {
        let (vals, h) = self.masked(key);
        let mask = self.table.len() - 1;
        let mut i = h as usize & mask;
        loop {
            let e = &self.table[i];
            if e.slot == FREE {
                return None;
            }
            if e.tag == (h >> 32) as u32 && e.vals == vals {
                return Some(e.slot);
            }
            i = (i + 1) & mask;
        }
    }

    /// Stores `slot` for `key` (not stored yet).
    fn insert(&mut self, key: &FlowKey, slot: u32) {
        if (self.len as usize + 1) * 2 > self.table.len() {
            let bigger = Group::empty(self.table.len() * 2);
            let old = std::mem::replace(&mut self.table, bigger);
            for e in old.iter().copied().filter(|e| e.slot != FREE) {
                let h = self.hash_of(&e.vals);
                self.place(e, h);
            }
        }
        let (vals, hash) = self.masked(key);
        self.place(Entry { tag: (hash >> 32) as u32, vals, slot }, hash);
        self.len += 1;
    }

    /// The hash of masked words (the first `n`).
    #[inline]
    fn hash_of(&self, vals: &[u64; MAX_WORDS]) -> u64 {
        let mut h = BASIS;
        for v in &vals[..self.n as usize] {
            h = hash_word(h, *v);
        }
        finish(h)
    }

    fn place(&mut self, e: Entry, hash: u64) {
        let mask = self.table.len() - 1;
        let mut i = hash as usize & mask;
        while self.table[i].slot != FREE {
            i = (i + 1) & mask;
        }
        self.table[i] = e;
    }

    fn len(&self) -> usize {
        self.len as usize
    }

    fn clear(&mut self) {
        self.table = Group::empty(16);
        self.len = 0;
    }
}

/// What one thread remembers of one classifier's lookups. Empty until
/// used; see the module's text. One cache line.
#[derive(Default)]
#[repr(C, align(64))]
pub struct Memo {
    stamp: u64,
    version: u64,
    groups: Vec<Group>,
    entries: u32,
    /// Since the last look at the hit rate: answers stored, and answers
    /// given from the memo.
    stored: u32,
    answered: u32,
    /// Lookups left to sit out (the memo did not pay).
    idle: u32,
    /// Over the memo's life, wrapping (for tests and statistics).
    pub hits: u32,
    pub misses: u32,
}

impl Memo {
    fn reset(&mut self, stamp: u64, version: u64) {
        if self.entries > 0 {
            self.groups.clear();
            self.entries = 0;
        }
        self.stamp = stamp;
        self.version = version;
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.entries as usize
    }

    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }

    /// The answer remembered for `key`, with its dependency mask words.
    #[inline]
    fn find(&mut self, key: &FlowKey) -> Option<(u32, usize)> {
        for gi in 0..self.groups.len() {
            if let Some(slot) = self.groups[gi].find(key) {
                self.groups[gi].hits += 1;
                // The groups that answer most are probed first.
                if gi > 0 && self.groups[gi].hits > self.groups[gi - 1].hits {
                    self.groups.swap(gi, gi - 1);
                    return Some((slot, gi - 1));
                }
                return Some((slot, gi));
            }
        }
        None
    }

    /// Remembers `slot` for `key`, which depended on `dep`.
    fn store(&mut self, dep: &FlowKey, key: &FlowKey, slot: u32) {
        let mut wm = [(0u8, 0u64); MAX_WORDS];
        let mut n = 0;
        for (i, &w) in dep.w.iter().enumerate().filter(|(_, &w)| w != 0) {
            if n == MAX_WORDS {
                return;
            }
            wm[n] = (i as u8, w);
            n += 1;
        }
        let wm = &wm[..n];
        let gi = match self.groups.iter().position(|g| g.same_words(wm)) {
            Some(gi) => gi,
            None if self.groups.len() < MAX_GROUPS => {
                self.groups.push(Group::new(wm));
                self.groups.len() - 1
            }
            None => return,
        };
        if self.entries as usize >= MAX_ENTRIES {
            let big = (0..self.groups.len()).max_by_key(|&i| self.groups[i].len()).expect("a group");
            self.entries -= self.groups[big].len() as u32;
            self.groups[big].clear();
        }
        self.groups[gi].insert(key, slot);
        self.entries += 1;
        self.stored += 1;
        if self.stored >= WINDOW {
            if self.answered < self.stored / 4 {
                self.idle = SIT_OUT;
                self.groups.clear();
                self.entries = 0;
            }
            self.stored = 0;
            self.answered = 0;
        }
    }
}

impl<T> Classifier<T> {
    /// [`Classifier::lookup_rule`] (without the match: reading the mask
    /// would cost a cache miss), answered from `memo` when it can be,
    /// and remembered there when it is not. The answer and the bits added
    /// to `wc` are the search's (those the search reported when the answer
    /// was remembered), so megaflows are as narrow as without the memo.
    pub fn lookup_memo(
        &self,
        memo: &mut Memo,
        key: &FlowKey,
        version: u64,
        wc: &mut FlowKey,
    ) -> Option<(RuleId, u32, &T)> {
        if memo.stamp != self.stamp || memo.version != version {
            memo.reset(self.stamp, version);
        }
        if memo.idle > 0 {
            memo.idle -= 1;
            return self.lookup_ref(key, version, wc).map(|r| self.rule_data(r.slot));
        }
        if let Some((slot, gi)) = memo.find(key) {
            memo.hits = memo.hits.wrapping_add(1);
            memo.answered = memo.answered.saturating_add(1);
            for (w, m) in memo.groups[gi].words() {
                wc.w[w as usize] |= m;
            }
            return (slot != NONE).then(|| self.rule_data(slot));
        }
        memo.misses = memo.misses.wrapping_add(1);
        let mut dep = FlowKey::ZERO;
        let found = self.lookup_ref(key, version, &mut dep);
        wc.or_assign(&dep);
        memo.store(&dep, key, found.map_or(NONE, |r| r.slot));
        found.map(|r| self.rule_data(r.slot))
    }
}
