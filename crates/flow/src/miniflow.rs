//! Miniflow: a compact form of a key that stores only its non-zero words.
//!
//! Keys are 34 words but a typical packet sets fewer than half of them
//! (no IPv6 words for IPv4, no ND words, no tunnel). A miniflow keeps a
//! bitmap of the words present and the values in order, which is what the
//! datapath stores per megaflow and what hashing walks.

use crate::key::{FlowKey, WORDS};

#[derive(Clone, PartialEq, Eq, Hash, Debug, Default)]
pub struct Miniflow {
    /// Bit i set: word i is present (non-zero) in `values`.
    pub map: u64,
    pub values: Vec<u64>,
}

impl Miniflow {
    pub fn from_key(k: &FlowKey) -> Miniflow {
        let mut mf = Miniflow::default();
        for i in 0..WORDS {
            if k.w[i] != 0 {
                mf.map |= 1u64 << i;
                mf.values.push(k.w[i]);
            }
        }
        mf
    }

    pub fn to_key(&self) -> FlowKey {
        let mut k = FlowKey::ZERO;
        let mut it = self.values.iter();
        for i in 0..WORDS {
            if self.map & (1u64 << i) != 0 {
                k.w[i] = *it.next().expect("map and values agree");
            }
        }
        k
    }

    /// Indices of the present words.
    pub fn words(&self) -> impl Iterator<Item = usize> + '_ {
        (0..WORDS).filter(move |i| self.map & (1u64 << i) != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn roundtrip() {
        let mut k = FlowKey::ZERO;
        k.set_nw_dst(1);
        k.set_tp_src(7);
        let m = Miniflow::from_key(&k);
        assert_eq!(m.values.len(), 2);
        assert_eq!(m.to_key(), k);
    }
}
