//! One shard's hash table: buckets of one cache line each, holding five
//! slots' 32-bit tags next to their five connection pointers.
//!
//! A probe reads one bucket (one cache line) and compares tags there; only
//! a tag that matches costs a look at the connection. A general-purpose
//! map keeps its control bytes and its entries in two arrays, so a probe
//! that finds something touches two cache lines before the connection: on
//! a table of a million connections each is a cache miss, and the tracker
//! probes once or twice per packet.
//!
//! Open addressing with linear probing over buckets. A removed slot
//! becomes a tombstone, so a probe runs until it meets a bucket with a
//! never-used slot; tombstones are reused by inserts and dropped when the
//! table is rebuilt. The table is rebuilt (in place, or at twice or half
//! its size) when used slots pass three quarters, or live ones fall below
//! a sixteenth; the index is recomputed from the tag, so a rebuild never
//! looks at a connection.
//!
//! The caller's hash `h` must be even: bit 0 of a slot's tag is a role the
//! caller gives it (the tracker: whether the slot is a connection's second
//! key), which `find` and `remove` hand back to it.
//! Bits 1-30 give the bucket index and the tag; the caller picks shards
//! with bits above 31.

/// Slots per bucket: five tags (20 bytes) and five pointers (40 bytes) fill
/// a 64-byte line.
const WAYS: usize = 5;

const EMPTY: u32 = 0;
const TOMB: u32 = 1;
/// Set in every live tag, so no live tag is `EMPTY` or `TOMB`.
const LIVE: u32 = 0x8000_0000;

#[repr(align(64))]
struct Bucket<T> {
    tags: [u32; WAYS],
    vals: [Option<T>; WAYS],
}

impl<T> Default for Bucket<T> {
    fn default() -> Self {
        Bucket { tags: [EMPTY; WAYS], vals: Default::default() }
    }
}

pub(crate) struct Table<T> {
    buckets: Vec<Bucket<T>>,
    live: usize,
    /// Live slots and tombstones.
    used: usize,
}

/// The bucket a probe for `tag` starts at, in a table of `mask + 1`
/// buckets.
#[inline]
fn start_of(tag: u32, mask: usize) -> usize {
    (tag as usize >> 1) & mask
}

/// The tag of hash `h` with role bit `reply`.
#[inline]
fn tag(h: u64, reply: bool) -> u32 {
    (h as u32 & 0x7fff_fffe) | LIVE | reply as u32
}

impl<T> Default for Table<T> {
    fn default() -> Self {
        Table { buckets: Vec::new(), live: 0, used: 0 }
    }
}

impl<T> Table<T> {
    #[inline]
    fn start(&self, tag: u32) -> usize {
        start_of(tag, self.buckets.len() - 1)
    }

    /// Where the buckets are and how many, in one word (0 while there are
    /// none): the address of the first (64-byte aligned) with the log2 of
    /// their number in the low 6 bits. The tracker publishes it for
    /// [`Table::bucket_addr`], which reads it without the shard's lock.
    pub(crate) fn base(&self) -> usize {
        if self.buckets.is_empty() {
            0
        } else {
            self.buckets.as_ptr() as usize | self.buckets.len().trailing_zeros() as usize
        }
    }

    /// The address of the bucket a probe for `h` starts at, in a table
    /// whose [`Table::base`] was `base`. Only a hint for a prefetch: the
    /// table may have been rebuilt since, and the address is never
    /// dereferenced.
    #[inline]
    pub(crate) fn bucket_addr(base: usize, h: u64) -> Option<usize> {
        if base == 0 {
            return None;
        }
        let mask = (1usize << (base & 63)) - 1;
        let index = start_of(tag(h, false), mask);
        Some((base & !63) + index * std::mem::size_of::<Bucket<T>>())
    }

    /// The value stored under `h` for which `eq(value, reply)` holds.
    #[inline]
    pub(crate) fn find(&self, h: u64, eq: impl Fn(&T, bool) -> bool) -> Option<(&T, bool)> {
        if self.buckets.is_empty() {
            return None;
        }
        let want = tag(h, false);
        let mut b = self.start(want);
        loop {
            let bk = &self.buckets[b];
            let mut open = false;
            for i in 0..WAYS {
                let t = bk.tags[i];
                if t & !1 == want {
                    if let Some(v) = &bk.vals[i] {
                        if eq(v, t & 1 != 0) {
                            return Some((v, t & 1 != 0));
                        }
                    }
                }
                open |= t == EMPTY;
            }
            if open {
                return None;
            }
            b = (b + 1) & (self.buckets.len() - 1);
        }
    }

    /// Stores `v` under `h` (the caller has checked that no value equal to
    /// it is stored).
    pub(crate) fn insert(&mut self, h: u64, reply: bool, v: T) {
        if (self.used + 1) * 4 > self.buckets.len() * WAYS * 3 {
            let n = if (self.live + 1) * 2 > self.buckets.len() * WAYS {
                self.buckets.len() * 2
            } else {
                self.buckets.len()
            };
            self.rebuild(n.max(2));
        }
        self.place(tag(h, reply), v);
    }

    fn place(&mut self, t: u32, v: T) {
        let mut b = self.start(t);
        loop {
            let bk = &mut self.buckets[b];
            if let Some(i) = bk.tags.iter().position(|&x| x == EMPTY || x == TOMB) {
                if bk.tags[i] == EMPTY {
                    self.used += 1;
                }
                bk.tags[i] = t;
                bk.vals[i] = Some(v);
                self.live += 1;
                return;
            }
            b = (b + 1) & (self.buckets.len() - 1);
        }
    }

    /// Removes the value under `h` for which `pred(value, reply)` holds.
    pub(crate) fn remove(&mut self, h: u64, pred: impl Fn(&T, bool) -> bool) -> Option<T> {
        if self.buckets.is_empty() {
            return None;
        }
        let want = tag(h, false);
        let mut b = self.start(want);
        loop {
            let bk = &mut self.buckets[b];
            let mut open = false;
            for i in 0..WAYS {
                let t = bk.tags[i];
                if t & !1 == want && bk.vals[i].as_ref().is_some_and(|v| pred(v, t & 1 != 0)) {
                    bk.tags[i] = TOMB;
                    let v = bk.vals[i].take();
                    self.live -= 1;
                    if self.buckets.len() > 2 && self.live * 16 < self.buckets.len() * WAYS {
                        self.rebuild(self.buckets.len() / 2);
                    }
                    return v;
                }
                open |= t == EMPTY;
            }
            if open {
                return None;
            }
            b = (b + 1) & (self.buckets.len() - 1);
        }
    }

    /// Moves every live value into a table of `n` buckets (a power of two).
    fn rebuild(&mut self, n: usize) {
        debug_assert!(n.is_power_of_two() && self.live < n * WAYS);
        let old = std::mem::replace(&mut self.buckets, (0..n).map(|_| Bucket::default()).collect());
        self.live = 0;
        self.used = 0;
        for mut bk in old {
            for i in 0..WAYS {
                if let Some(v) = bk.vals[i].take() {
                    self.place(bk.tags[i], v);
                }
            }
        }
    }

    /// Every stored value and its direction.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&T, bool)> {
        self.buckets
            .iter()
            .flat_map(|bk| bk.tags.iter().zip(&bk.vals).filter_map(|(&t, v)| v.as_ref().map(|v| (v, t & 1 != 0))))
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.live
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// An even hash whose index and tag bits are few, so buckets overflow
    /// into their neighbours and tags collide.
    fn h(k: u64, spread: u32) -> u64 {
        (k.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 20) & ((1 << spread) - 1) & !1
    }

    #[test]
    fn agrees_with_a_map_through_inserts_removes_and_rebuilds() {
        for spread in [3, 7, 31] {
            let mut t: Table<u64> = Table::default();
            let mut m: HashMap<(u64, bool), ()> = HashMap::new();
            let mut x = 1u64;
            for step in 0..20_000u64 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let k = (x >> 33) % 3000;
                let reply = x & (1 << 20) != 0;
                let hk = h(k, spread);
                let present = t.find(hk, |&v, r| v == k && r == reply).is_some();
                assert_eq!(present, m.contains_key(&(k, reply)), "step {step}");
                if x & (1 << 21) != 0 {
                    if !present {
                        t.insert(hk, reply, k);
                        m.insert((k, reply), ());
                    }
                } else if present {
                    assert_eq!(t.remove(hk, |&v, r| v == k && r == reply), Some(k));
                    m.remove(&(k, reply));
                }
                assert_eq!(t.len(), m.len());
            }
            let mut all: Vec<(u64, bool)> = t.iter().map(|(&v, r)| (v, r)).collect();
            all.sort();
            let mut want: Vec<(u64, bool)> = m.keys().copied().collect();
            want.sort();
            assert_eq!(all, want);
            // Emptied, it shrinks.
            for (k, reply) in want {
                t.remove(h(k, spread), |&v, r| v == k && r == reply);
            }
            assert_eq!(t.len(), 0);
            assert!(t.buckets.len() <= 2, "{}", t.buckets.len());
        }
    }

    #[test]
    fn a_bucket_is_one_cache_line() {
        assert_eq!(std::mem::size_of::<Bucket<std::sync::Arc<u64>>>(), 64);
    }

    /// The published base finds the bucket a probe starts at, through
    /// growth and shrinking.
    #[test]
    fn bucket_addr_is_where_a_probe_starts() {
        let mut t: Table<u64> = Table::default();
        assert_eq!(Table::<u64>::bucket_addr(t.base(), 2), None);
        for k in 0..5000u64 {
            t.insert(h(k, 31), false, k);
            let hk = h(k / 2, 31);
            let want = &t.buckets[t.start(tag(hk, false))] as *const Bucket<u64> as usize;
            assert_eq!(Table::<u64>::bucket_addr(t.base(), hk), Some(want), "after {k} inserts");
        }
        for k in 0..4990u64 {
            t.remove(h(k, 31), |&v, _| v == k);
        }
        let hk = h(4995, 31);
        let want = &t.buckets[t.start(tag(hk, false))] as *const Bucket<u64> as usize;
        assert_eq!(Table::<u64>::bucket_addr(t.base(), hk), Some(want));
    }
}
