//! Binary prefix tries over one address field.
//!
//! A trie records the prefixes `(value, length)` that rules match on one
//! field (nw_src, nw_dst, ipv6_src or ipv6_dst), with a count per prefix so
//! duplicates and removals work. Walking an address down the trie yields
//! [`Walk`]: the set of prefix lengths at which some rule prefix agrees
//! with the address, and how many leading address bits the walk read.
//!
//! The classifier uses it to skip a subtable whose mask is a /p prefix on
//! the field when no rule prefix of length p agrees with the address.
//! [`Walk::bits_to_exclude`] says how many leading bits prove that; keys
//! agreeing with the address on those bits are excluded in the same way.

/// Set of prefix lengths 0..=128.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct Plens([u64; 3]);

impl Plens {
    #[inline]
    pub fn insert(&mut self, p: u32) {
        self.0[(p / 64) as usize] |= 1 << (p % 64);
    }
    #[inline]
    pub fn contains(&self, p: u32) -> bool {
        self.0[(p / 64) as usize] & (1 << (p % 64)) != 0
    }
}

/// The outcome of walking one address down a trie.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct Walk {
    /// Lengths `p` such that some rule prefix of length `p` equals the
    /// address's first `p` bits.
    pub plens: Plens,
    /// Leading bits of the address the walk read before it could stop.
    pub bits: u32,
}

impl Walk {
    /// If no rule prefix of length `p` agrees with the address, the number
    /// of leading address bits that prove it; `None` if one does agree.
    ///
    /// Why `min(bits, p)` suffices: if the walk stopped within the first
    /// `p` bits, every key sharing those bits takes the same walk. If it
    /// went deeper, it passed the node for the address's first `p` bits,
    /// which ends no rule prefix; every key sharing `p` bits reaches that
    /// same node.
    #[inline]
    pub fn bits_to_exclude(&self, p: u32) -> Option<u32> {
        (!self.plens.contains(p)).then_some(self.bits.min(p))
    }
}

const NONE: u32 = u32::MAX;

/// [`Node::flags`]: some rule prefix ends at the end of this node's segment.
const HERE: u32 = 1;
/// [`Node::flags`]: no rule prefix ends strictly below this node.
const LEAF: u32 = 2;

/// A node covers a run of address bits (its segment) below its parent;
/// runs with no branch and no prefix end are merged into one node.
///
/// Only what a walk reads is here, in 32 aligned bytes (two nodes per
/// cache line, none straddling two): a walk is a chain of dependent loads,
/// so its cost is the number of lines it touches. The prefix counts that
/// insertion and removal maintain live apart, in [`Count`].
#[derive(Clone, Copy, Debug)]
#[repr(C, align(32))]
struct Node {
    /// Segment bits, left-aligned (first bit at bit 127).
    seg: u128,
    child: [u32; 2],
    /// Segment length in bits; 0 only for the root.
    len: u32,
    /// [`HERE`] and [`LEAF`], derived from the node's [`Count`].
    flags: u32,
}

/// Prefix counts of one node.
#[derive(Clone, Copy, Debug, Default)]
struct Count {
    /// Rule prefixes ending exactly at the end of this node's segment.
    here: u32,
    /// Rule prefixes ending at this node or anywhere below it.
    below: u32,
}

impl Node {
    const ROOT: Node = Node { seg: 0, len: 0, child: [NONE, NONE], flags: LEAF };
}

/// The first `n` bits (left-aligned) of a left-aligned value.
#[inline]
fn top(v: u128, n: u32) -> u128 {
    if n == 0 {
        0
    } else {
        v & !(u128::MAX.checked_shr(n).unwrap_or(0))
    }
}

#[inline]
fn bit_at(v: u128, i: u32) -> usize {
    (v >> (127 - i)) as usize & 1
}

/// Storage that grows a chunk at a time. A `Vec` grows by copying all it
/// holds, and a trie grows inside a rule change, while lookups wait: at
/// 131,072 rules that copy (8 MB of nodes) took 5 ms.
#[derive(Clone, Debug)]
struct Chunked<T> {
    chunks: Vec<Vec<T>>,
    len: usize,
}

const CHUNK: usize = 4096;

impl<T> Chunked<T> {
    fn one(v: T) -> Chunked<T> {
        let mut c = Chunked { chunks: Vec::new(), len: 0 };
        c.push(v);
        c
    }
    /// The first chunk grows as a `Vec` does (most tries stay small); once
    /// it is full, each next one is allocated at its full size.
    #[allow(clippy::manual_is_multiple_of)] // reason: is_multiple_of needs Rust 1.87; the workspace supports 1.85
    fn push(&mut self, v: T) {
        if self.len == 0 {
            self.chunks.push(Vec::new());
        } else if self.len % CHUNK == 0 {
            self.chunks.push(Vec::with_capacity(CHUNK));
        }
        self.chunks.last_mut().expect("a chunk with room").push(v);
        self.len += 1;
    }
    fn len(&self) -> usize {
        self.len
    }
}

impl<T> std::ops::Index<usize> for Chunked<T> {
    type Output = T;
    #[inline]
    fn index(&self, i: usize) -> &T {
        &self.chunks[i / CHUNK][i % CHUNK]
    }
}

impl<T> std::ops::IndexMut<usize> for Chunked<T> {
    #[inline]
    fn index_mut(&mut self, i: usize) -> &mut T {
        &mut self.chunks[i / CHUNK][i % CHUNK]
    }
}

/// A path-compressed binary trie over a `bits`-wide field (32 or 128).
/// Nodes whose subtree holds no prefix are unlinked and recycled, and
/// single-child nodes with no prefix ending at them are merged away, so a
/// walk visits one node per branch point, not one per bit.
#[derive(Clone, Debug)]
pub struct Trie {
    bits: u32,
    nodes: Chunked<Node>,
    /// `counts[i]` belongs to `nodes[i]`.
    counts: Chunked<Count>,
    free: Vec<u32>,
}

impl Trie {
    pub fn new(bits: u32) -> Trie {
        assert!(bits > 0 && bits <= 128);
        Trie { bits, nodes: Chunked::one(Node::ROOT), counts: Chunked::one(Count::default()), free: Vec::new() }
    }

    /// The value left-aligned in 128 bits.
    #[inline]
    fn align(&self, v: u128) -> u128 {
        v << (128 - self.bits)
    }

    fn alloc(&mut self, node: Node, count: Count) -> u32 {
        let i = match self.free.pop() {
            Some(i) => {
                self.nodes[i as usize] = node;
                self.counts[i as usize] = count;
                i
            }
            None => {
                self.nodes.push(node);
                self.counts.push(count);
                (self.nodes.len() - 1) as u32
            }
        };
        self.sync(i as usize);
        i
    }

    /// Recomputes node `n`'s flags from its counts.
    #[inline]
    fn sync(&mut self, n: usize) {
        let c = self.counts[n];
        self.nodes[n].flags = (if c.here > 0 { HERE } else { 0 }) | (if c.below == c.here { LEAF } else { 0 });
    }

    /// A childless node (flags are set by [`Trie::alloc`]).
    fn leaf(seg: u128, len: u32) -> Node {
        Node { seg, len, flags: 0, ..Node::ROOT }
    }

    /// Number of prefixes held (with multiplicity).
    #[allow(clippy::misnamed_getters)] // The root's `below` counts them all.
    pub fn len(&self) -> u32 {
        self.counts[0].below
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds the prefix of `value` of length `plen`.
    pub fn insert(&mut self, value: u128, plen: u32) {
        assert!(plen <= self.bits);
        let v = top(self.align(value), plen);
        let (mut n, mut d) = (0usize, 0u32);
        self.counts[0].below += 1;
        self.sync(0);
        let one = Count { here: 1, below: 1 };
        loop {
            if d == plen {
                self.counts[n].here += 1;
                self.sync(n);
                return;
            }
            let b = bit_at(v, d);
            let c = self.nodes[n].child[b];
            let rest = v << d;
            if c == NONE {
                let leaf = self.alloc(Self::leaf(top(rest, plen - d), plen - d), one);
                self.nodes[n].child[b] = leaf;
                return;
            }
            let ci = c as usize;
            let clen = self.nodes[ci].len;
            let common = (self.nodes[ci].seg ^ rest).leading_zeros().min(clen).min(plen - d);
            if common == clen {
                self.counts[ci].below += 1;
                self.sync(ci);
                n = ci;
                d += clen;
                continue;
            }
            // Split the child after `common` bits (at least 1: the branch bit).
            let old = &mut self.nodes[ci];
            let seg = old.seg;
            old.seg <<= common;
            old.len -= common;
            let below = self.counts[ci].below;
            let mut mid = Self::leaf(top(seg, common), common);
            mid.child[bit_at(seg, common)] = c;
            let here = (d + common == plen) as u32;
            let m = self.alloc(mid, Count { here, below: below + 1 });
            self.nodes[n].child[b] = m;
            if here == 0 {
                let r2 = rest << common;
                let len = plen - d - common;
                let leaf = self.alloc(Self::leaf(top(r2, len), len), one);
                self.nodes[m as usize].child[bit_at(r2, 0)] = leaf;
            }
            return;
        }
    }

    /// Removes one copy of a prefix previously inserted.
    pub fn remove(&mut self, value: u128, plen: u32) {
        let v = top(self.align(value), plen);
        // (parent, branch bit) of each node on the path, root excluded.
        let mut path: Vec<(usize, usize)> = Vec::with_capacity(8);
        let (mut n, mut d) = (0usize, 0u32);
        while d < plen {
            let b = bit_at(v, d);
            let c = self.nodes[n].child[b];
            assert!(c != NONE, "removing a prefix that is not in the trie");
            path.push((n, b));
            n = c as usize;
            d += self.nodes[n].len;
        }
        assert!(d == plen && self.counts[n].here > 0, "removing a prefix that is not in the trie");
        self.counts[0].below -= 1;
        for &(p, b) in &path {
            let c = self.nodes[p].child[b] as usize;
            self.counts[c].below -= 1;
        }
        self.counts[n].here -= 1;
        self.sync(0);
        for &(p, b) in &path {
            self.sync(self.nodes[p].child[b] as usize);
        }
        // Unlink the topmost emptied node; below it lies only the path.
        if let Some(i) = path.iter().position(|&(p, b)| self.counts[self.nodes[p].child[b] as usize].below == 0) {
            let (p, b) = path[i];
            let mut d = self.nodes[p].child[b];
            self.nodes[p].child[b] = NONE;
            while d != NONE {
                self.free.push(d);
                let node = &self.nodes[d as usize];
                d = if node.child[0] != NONE { node.child[0] } else { node.child[1] };
            }
            self.merge(p);
        } else {
            self.merge(n);
        }
    }

    /// Merges node `n` with its only child if no prefix ends at `n`.
    fn merge(&mut self, n: usize) {
        let node = &self.nodes[n];
        if n == 0 || self.counts[n].here > 0 || (node.child[0] != NONE) == (node.child[1] != NONE) {
            return;
        }
        let c = if node.child[0] != NONE { node.child[0] } else { node.child[1] };
        let child = self.nodes[c as usize];
        let node = &mut self.nodes[n];
        node.seg |= child.seg >> node.len;
        node.len += child.len;
        node.child = child.child;
        debug_assert_eq!(self.counts[n].below, self.counts[c as usize].below);
        self.counts[n] = self.counts[c as usize];
        self.sync(n);
        self.free.push(c);
    }

    /// Walks `value` down the trie.
    #[inline]
    pub fn lookup(&self, value: u128) -> Walk {
        let v = self.align(value);
        let mut plens = Plens::default();
        let mut node = &self.nodes[0];
        let mut d = 0;
        loop {
            if node.len > 0 {
                let diff = top((v << d) ^ node.seg, node.len);
                if diff != 0 {
                    // The address leaves the trie inside this segment.
                    return Walk { plens, bits: d + diff.leading_zeros() + 1 };
                }
                d += node.len;
            }
            if node.flags & HERE != 0 {
                plens.insert(d);
            }
            if d == self.bits || node.flags & LEAF != 0 {
                // No longer prefix below: bit `d` need not be read.
                return Walk { plens, bits: d };
            }
            let c = node.child[bit_at(v, d)];
            if c == NONE {
                // The address leaves the trie at bit `d`.
                return Walk { plens, bits: d + 1 };
            }
            node = &self.nodes[c as usize];
        }
    }

    /// Nodes in use (for tests of recycling).
    pub fn n_nodes(&self) -> usize {
        self.nodes.len() - self.free.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slash8_vs_slash24() {
        let mut t = Trie::new(32);
        t.insert(0x0a00_0000, 8);
        t.insert(0xc0a8_0000, 24);
        let w = t.lookup(0x0a01_0203);
        assert!(w.plens.contains(8) && !w.plens.contains(24));
        assert_eq!(w.bits, 8);
        assert_eq!(w.bits_to_exclude(24), Some(8));
        assert_eq!(w.bits_to_exclude(8), None);
        let w = t.lookup(0xc0a8_0001);
        assert!(w.plens.contains(24) && !w.plens.contains(8));
        assert_eq!(w.bits_to_exclude(8), Some(8), "never more bits than the subtable's own prefix");
        // 0x01...: leaves both paths at the first bit that differs from both.
        let w = t.lookup(0x0100_0000);
        assert_eq!(w.bits_to_exclude(8), Some(5));
        t.remove(0xc0a8_0000, 24);
        assert!(!t.lookup(0xc0a8_0001).plens.contains(24));
    }

    #[test]
    fn nodes_fill_half_a_cache_line() {
        assert_eq!((std::mem::size_of::<Node>(), std::mem::align_of::<Node>()), (32, 32));
    }

    #[test]
    fn nodes_are_recycled() {
        let mut t = Trie::new(128);
        t.insert(1 << 127, 64);
        t.insert(1 << 127, 64);
        t.insert(3 << 126, 100);
        let full = t.n_nodes();
        t.remove(3 << 126, 100);
        t.remove(1 << 127, 64);
        assert!(t.lookup(1 << 127).plens.contains(64));
        t.remove(1 << 127, 64);
        assert_eq!((t.n_nodes(), t.len()), (1, 0));
        t.insert(3 << 126, 100);
        assert_eq!(t.n_nodes(), 2, "root and one compressed node");
        assert_eq!(full, 4, "root, shared first bit, two leaves");
        assert_eq!(t.lookup(0).bits, 1);
    }

    /// The walk of the uncompressed trie, computed from the prefix list:
    /// at depth d, stop if no longer prefix agrees with the address on d
    /// bits (d bits read), or if none agrees on d + 1 bits (d + 1 read).
    fn reference(bits: u32, prefixes: &[(u128, u32)], a: u128) -> Walk {
        // Prefix (v, p) agrees with the address on its first n <= p bits.
        let agrees = |&(v, p): &(u128, u32), n: u32| n <= p && (n == 0 || (v ^ a) >> (bits - n) == 0);
        let mut w = Walk::default();
        for d in 0..=bits {
            if prefixes.iter().any(|x| x.1 == d && agrees(x, d)) {
                w.plens.insert(d);
            }
            let longer = |n| prefixes.iter().any(|x| x.1 > d && agrees(x, n));
            if d == bits || !longer(d) {
                w.bits = d;
                return w;
            }
            if !longer(d + 1) {
                w.bits = d + 1;
                return w;
            }
        }
        unreachable!()
    }

    fn value(bits: u32, r: u64) -> u128 {
        // Clustered: a few shared high parts, varied low bits.
        let hi = [0u128, 0b1011, 0b1100][(r % 3) as usize] << (bits - 4);
        let v = hi ^ (((r >> 8) as u128 & 0xff) << (bits / 2)) ^ ((r >> 40) as u128 % 7);
        v & if bits == 128 { u128::MAX } else { (1 << bits) - 1 }
    }

    proptest::proptest! {
        #[test]
        fn compressed_walk_equals_bitwise_walk(
            wide in proptest::bool::ANY,
            ops in proptest::collection::vec((proptest::num::u64::ANY, 0u32..=128, proptest::bool::weighted(0.3)), 1..60),
            probes in proptest::collection::vec(proptest::num::u64::ANY, 1..20),
        ) {
            let bits = if wide { 128 } else { 32 };
            let mut t = Trie::new(bits);
            let mut held: Vec<(u128, u32)> = Vec::new();
            for (r, p, del) in ops {
                if del && !held.is_empty() {
                    let (v, p) = held.swap_remove((r % held.len() as u64) as usize);
                    t.remove(v, p);
                } else {
                    let p = p % (bits + 1);
                    let v = value(bits, r);
                    let v = if p == 0 { 0 } else { v >> (bits - p) << (bits - p) };
                    t.insert(v, p);
                    held.push((v, p));
                }
                for &a in &probes {
                    let a = value(bits, a);
                    proptest::prop_assert_eq!(t.lookup(a), reference(bits, &held, a), "{:x?} {:x}", held, a);
                    // Also probe the held values and their neighbours.
                    for &(v, p) in held.iter().take(4) {
                        for x in [v, v ^ 1, v ^ (1 << (bits - 1)), v ^ (1u128 << (bits - p.max(1)))] {
                            proptest::prop_assert_eq!(t.lookup(x), reference(bits, &held, x));
                        }
                    }
                }
                proptest::prop_assert_eq!(t.len() as usize, held.len());
                proptest::prop_assert!(t.n_nodes() <= 2 * held.len() + 1);
            }
        }
    }
}
