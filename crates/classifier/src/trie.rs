//! Binary prefix tries over one address field.
//!
//! A trie holds the prefixes (value, length) that rules match on one field
//! (nw_src, nw_dst, ipv6_src, ipv6_dst). Looking up an address walks the
//! trie along the address's bits and reports
//! * which prefix lengths have at least one rule prefix that matches the
//!   address, and
//! * how many leading bits of the address the walk had to read to know
//!   that.
//!
//! A classifier subtable whose mask is a /p prefix on this field can only
//! match if `p` is among the reported lengths; when it is not, the subtable
//! is skipped and only the bits read are added to the megaflow mask. Keys
//! agreeing with the address on those bits take the same walk, so the skip
//! holds for all of them.

/// Bitset of prefix lengths 0..=128.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct Plens(pub [u64; 3]);

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

#[derive(Clone, Default, Debug)]
struct Node {
    child: [u32; 2],
    /// Rule prefixes ending exactly at this node.
    here: u32,
    /// Rule prefixes ending at this node or below.
    below: u32,
}

const NONE: u32 = u32::MAX;

#[derive(Clone, Debug)]
pub struct Trie {
    bits: u32,
    nodes: Vec<Node>,
}

impl Trie {
    pub fn new(bits: u32) -> Trie {
        Trie { bits, nodes: vec![Node { child: [NONE, NONE], here: 0, below: 0 }] }
    }

    #[inline]
    fn bit(&self, v: u128, i: u32) -> usize {
        ((v >> (self.bits - 1 - i)) & 1) as usize
    }

    pub fn insert(&mut self, value: u128, plen: u32) {
        let mut n = 0usize;
        self.nodes[0].below += 1;
        for i in 0..plen {
            let b = self.bit(value, i);
            let c = self.nodes[n].child[b];
            let c = if c == NONE {
                self.nodes.push(Node { child: [NONE, NONE], here: 0, below: 0 });
                let id = (self.nodes.len() - 1) as u32;
                self.nodes[n].child[b] = id;
                id
            } else {
                c
            };
            n = c as usize;
            self.nodes[n].below += 1;
        }
        self.nodes[n].here += 1;
    }

    pub fn remove(&mut self, value: u128, plen: u32) {
        let mut n = 0usize;
        self.nodes[0].below -= 1;
        for i in 0..plen {
            let b = self.bit(value, i);
            n = self.nodes[n].child[b] as usize;
            self.nodes[n].below -= 1;
        }
        self.nodes[n].here -= 1;
    }

    /// Walks `value`: (lengths of matching rule prefixes, bits read).
    #[inline]
    pub fn lookup(&self, value: u128) -> (Plens, u32) {
        let mut plens = Plens::default();
        let mut n = 0usize;
        let mut depth = 0;
        loop {
            let node = &self.nodes[n];
            if node.here > 0 {
                plens.insert(depth);
            }
            if depth == self.bits || node.below == node.here {
                // Nothing longer below: no need to read bit `depth`.
                return (plens, depth);
            }
            let c = node.child[self.bit(value, depth)];
            if c == NONE || self.nodes[c as usize].below == 0 {
                return (plens, depth + 1);
            }
            n = c as usize;
            depth += 1;
        }
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
        let (p, bits) = t.lookup(0x0a01_0203);
        assert!(p.contains(8) && !p.contains(24));
        assert_eq!(bits, 8);
        let (p, bits) = t.lookup(0xc0a8_0001);
        assert!(p.contains(24) && !p.contains(8));
        assert_eq!(bits, 24);
        let (p, bits) = t.lookup(0x0100_0000);
        assert!(!p.contains(8) && !p.contains(24));
        assert!(bits <= 8, "{bits}");
        t.remove(0xc0a8_0000, 24);
        let (p, _) = t.lookup(0xc0a8_0001);
        assert!(!p.contains(24));
    }
}
