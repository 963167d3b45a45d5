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

#[derive(Clone, Debug)]
struct Node {
    child: [u32; 2],
    /// Rule prefixes ending exactly at this node.
    here: u32,
    /// Rule prefixes ending at this node or anywhere below it.
    below: u32,
}

impl Node {
    const EMPTY: Node = Node { child: [NONE, NONE], here: 0, below: 0 };
}

/// A prefix trie over a `bits`-wide field (32 or 128). Nodes whose subtree
/// holds no prefix are unlinked and recycled, so the trie never holds more
/// nodes than the prefixes in it need.
#[derive(Clone, Debug)]
pub struct Trie {
    bits: u32,
    nodes: Vec<Node>,
    free: Vec<u32>,
}

impl Trie {
    pub fn new(bits: u32) -> Trie {
        Trie { bits, nodes: vec![Node::EMPTY], free: Vec::new() }
    }

    #[inline]
    fn bit(&self, v: u128, i: u32) -> usize {
        ((v >> (self.bits - 1 - i)) & 1) as usize
    }

    /// Number of prefixes held (with multiplicity).
    pub fn len(&self) -> u32 {
        self.nodes[0].below
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds the prefix of `value` of length `plen`.
    pub fn insert(&mut self, value: u128, plen: u32) {
        debug_assert!(plen <= self.bits);
        let mut n = 0usize;
        self.nodes[0].below += 1;
        for i in 0..plen {
            let b = self.bit(value, i);
            let mut c = self.nodes[n].child[b];
            if c == NONE {
                c = match self.free.pop() {
                    Some(c) => {
                        self.nodes[c as usize] = Node::EMPTY;
                        c
                    }
                    None => {
                        self.nodes.push(Node::EMPTY);
                        (self.nodes.len() - 1) as u32
                    }
                };
                self.nodes[n].child[b] = c;
            }
            n = c as usize;
            self.nodes[n].below += 1;
        }
        self.nodes[n].here += 1;
    }

    /// Removes one copy of a prefix previously inserted.
    pub fn remove(&mut self, value: u128, plen: u32) {
        let mut n = 0usize;
        self.nodes[0].below -= 1;
        for i in 0..plen {
            let b = self.bit(value, i);
            let c = self.nodes[n].child[b];
            debug_assert!(c != NONE, "removing a prefix that is not in the trie");
            self.nodes[c as usize].below -= 1;
            if self.nodes[c as usize].below == 0 {
                // The rest of the path held only this prefix: recycle it.
                self.nodes[n].child[b] = NONE;
                let mut d = c;
                while d != NONE {
                    self.free.push(d);
                    let node = &self.nodes[d as usize];
                    d = if node.child[0] != NONE { node.child[0] } else { node.child[1] };
                }
                return;
            }
            n = c as usize;
        }
        self.nodes[n].here -= 1;
    }

    /// Walks `value` down the trie.
    #[inline]
    pub fn lookup(&self, value: u128) -> Walk {
        let mut plens = Plens::default();
        let mut n = 0usize;
        let mut depth = 0;
        loop {
            let node = &self.nodes[n];
            if node.here > 0 {
                plens.insert(depth);
            }
            if depth == self.bits || node.below == node.here {
                // No longer prefix below: bit `depth` need not be read.
                return Walk { plens, bits: depth };
            }
            let c = node.child[self.bit(value, depth)];
            if c == NONE {
                // The address leaves the trie at bit `depth`.
                return Walk { plens, bits: depth + 1 };
            }
            n = c as usize;
            depth += 1;
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
        assert_eq!(t.n_nodes(), 101);
        assert!(full >= 101);
        assert_eq!(t.lookup(0).bits, 1);
    }
}
