//! The flow key: a fixed array of 64-bit words.
//!
//! Every header field the switch can match on lives at a fixed bit range
//! inside [`FlowKey`]. Masks (wildcards) have exactly the same shape, so a
//! megaflow mask, a rule's mask and the set of bits a lookup consulted are
//! all `FlowKey`s, and masking is a word-wise AND.
//!
//! Words are grouped by lookup stage, in this order, so that staged lookup
//! can hash a prefix of the key: metadata (`0..STAGE_L2`), L2
//! (`STAGE_L2..STAGE_L3`), L3 (`STAGE_L3..STAGE_L4`), L4 (`STAGE_L4..WORDS`).
//!
//! Field values are stored as host-order integers (an IPv4 address
//! `10.0.0.1` is `0x0a000001`, a MAC is its 48-bit big-endian number), so
//! prefixes are high bits and printing is direct.

/// Number of 64-bit words in a flow key.
pub const WORDS: usize = 39;
/// First word of the L2 stage.
pub const STAGE_L2: usize = 25;
/// First word of the L3 stage.
pub const STAGE_L3: usize = 28;
/// First word of the L4 stage.
pub const STAGE_L4: usize = 38;
/// Stage boundaries: `[0, L2, L3, L4, WORDS]`.
pub const STAGES: [usize; 5] = [0, STAGE_L2, STAGE_L3, STAGE_L4, WORDS];

/// The words that hold tunnel metadata (tun_id; tun_src/dst; tun_flags,
/// tos, ttl, gbp; tun_metadata; tun_ipv6_src/dst), which a packet carries beside its bytes
/// (`netdev::Packet::tnl`) into and out of tunnel ports.
pub const TNL_WORDS: [usize; N_TNL] = [
    loc::TUN_ID.word,
    loc::TUN_SRC.word,
    loc::TUN_FLAGS.word,
    loc::TUN_METADATA[0].word,
    loc::TUN_IPV6_SRC.word,
    loc::TUN_IPV6_SRC.word + 1,
    loc::TUN_IPV6_DST.word,
    loc::TUN_IPV6_DST.word + 1,
];
/// How many words [`TNL_WORDS`] names.
pub const N_TNL: usize = 8;
/// A packet's tunnel metadata: the key's [`TNL_WORDS`], in that order.
pub type TnlWords = [u64; N_TNL];

/// A flow key, or a mask over one (same shape).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
#[repr(C, align(64))]
pub struct FlowKey {
    pub w: [u64; WORDS],
}

impl Default for FlowKey {
    fn default() -> FlowKey {
        FlowKey::ZERO
    }
}

/// A mask has the same layout as a key: a 1 bit means "this bit matters".
pub type FlowMask = FlowKey;

impl std::fmt::Debug for FlowKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FlowKey{{")?;
        let mut first = true;
        for fd in crate::fields::FIELDS {
            let v = fd.get(self);
            if v != 0 {
                if !first {
                    write!(f, ",")?;
                }
                first = false;
                write!(f, "{}={:#x}", fd.name, v)?;
            }
        }
        write!(f, "}}")
    }
}

impl FlowKey {
    pub const ZERO: FlowKey = FlowKey { w: [0; WORDS] };
    pub const ALL_ONES: FlowKey = FlowKey { w: [u64::MAX; WORDS] };

    #[inline]
    pub fn and(&self, mask: &FlowKey) -> FlowKey {
        let mut out = FlowKey::ZERO;
        for i in 0..WORDS {
            out.w[i] = self.w[i] & mask.w[i];
        }
        out
    }

    #[inline]
    pub fn or_assign(&mut self, other: &FlowKey) {
        for i in 0..WORDS {
            self.w[i] |= other.w[i];
        }
    }

    /// ORs in only the words `range` of `other` (used by staged lookup).
    #[inline]
    pub fn or_assign_range(&mut self, other: &FlowKey, range: std::ops::Range<usize>) {
        for i in range {
            self.w[i] |= other.w[i];
        }
    }

    /// True if every 1 bit of `self` is also set in `other`.
    #[inline]
    pub fn is_subset_of(&self, other: &FlowKey) -> bool {
        (0..WORDS).all(|i| self.w[i] & !other.w[i] == 0)
    }

    #[inline]
    pub fn is_zero(&self) -> bool {
        self.w.iter().all(|&x| x == 0)
    }

    /// True if `self` and `other` agree on every bit set in `mask`.
    #[inline]
    pub fn eq_masked(&self, other: &FlowKey, mask: &FlowKey) -> bool {
        // An OR over all the words, without an early exit: the compiler
        // makes it a few vector operations, where the per-word branch
        // cost more than it saved (the keys compared usually match).
        let mut diff = 0;
        for i in 0..WORDS {
            diff |= (self.w[i] ^ other.w[i]) & mask.w[i];
        }
        diff == 0
    }

    /// Hash of the words in `range` after masking, for subtable lookups.
    #[inline]
    pub fn hash_masked_range(&self, mask: &FlowKey, range: std::ops::Range<usize>, basis: u64) -> u64 {
        let mut h = basis;
        for i in range {
            h = hash_word(h, self.w[i] & mask.w[i]);
        }
        finish(h)
    }

    /// Hash of the whole key (for the exact-match cache). Four independent
    /// lanes (word `i` feeds lane `i % 4`), so the multiplies overlap
    /// instead of forming one 39-long dependency chain. The lanes are four
    /// locals: kept in an array indexed by `i & 3` they lived on the stack,
    /// and every word waited for the previous store to the same lane (this
    /// hash was a third of an exact-match hit).
    #[inline]
    pub fn hash(&self) -> u64 {
        const K: [u64; 4] =
            [0x9e37_79b9_7f4a_7c15, 0xc2b2_ae3d_27d4_eb4f, 0x1656_67b1_9e37_79f9, 0xd6e8_feb8_6659_fd93];
        let mix = |l: u64, w: u64, k: u64| (l ^ w).wrapping_mul(k).rotate_left(31);
        let (mut a, mut b, mut c, mut d) = (0u64, 0u64, 0u64, 0u64);
        let mut words = self.w.chunks_exact(4);
        for q in &mut words {
            a = mix(a, q[0], K[0]);
            b = mix(b, q[1], K[1]);
            c = mix(c, q[2], K[2]);
            d = mix(d, q[3], K[3]);
        }
        let rest = words.remainder();
        if let Some(&w) = rest.first() {
            a = mix(a, w, K[0]);
        }
        if let Some(&w) = rest.get(1) {
            b = mix(b, w, K[1]);
        }
        if let Some(&w) = rest.get(2) {
            c = mix(c, w, K[2]);
        }
        finish(a ^ b.rotate_left(17) ^ c.rotate_left(29) ^ d.rotate_left(43))
    }
}

/// One mixing step (a multiply-xorshift in the style of wyhash/fxhash).
#[inline(always)]
pub fn hash_word(h: u64, w: u64) -> u64 {
    (h ^ w).wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(29)
}

#[inline(always)]
pub fn finish(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h
}

/// A [`std::hash::Hasher`] for the switch's own maps whose keys are not
/// chosen by packets: whole flow keys and masks (a megaflow subtable's
/// mask, 39 words, which SipHash took about 100 ns to hash) and addresses.
/// Eight bytes per [`hash_word`] step.
#[derive(Default, Clone, Copy)]
pub struct WordHasher(u64);

impl std::hash::Hasher for WordHasher {
    #[inline]
    fn finish(&self) -> u64 {
        finish(self.0)
    }

    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.0 = hash_word(self.0, u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut b = [0u8; 8];
            b[..rest.len()].copy_from_slice(rest);
            self.0 = hash_word(self.0, u64::from_le_bytes(b) ^ (rest.len() as u64) << 59);
        }
    }

    #[inline]
    fn write_u64(&mut self, v: u64) {
        self.0 = hash_word(self.0, v);
    }

    #[inline]
    fn write_usize(&mut self, v: usize) {
        self.0 = hash_word(self.0, v as u64);
    }
}

/// Where a field lives in the key: `bits` bits starting at bit `shift` of
/// word `word`, or (for 128-bit fields) the whole of words `word` and
/// `word + 1`, high half first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Loc {
    pub word: usize,
    pub shift: u32,
    pub bits: u32,
}

impl Loc {
    pub const fn new(word: usize, shift: u32, bits: u32) -> Loc {
        Loc { word, shift, bits }
    }

    /// The field's all-ones value.
    #[inline]
    pub const fn max(&self) -> u128 {
        if self.bits >= 128 {
            u128::MAX
        } else {
            (1u128 << self.bits) - 1
        }
    }

    #[inline]
    pub fn get(&self, k: &FlowKey) -> u128 {
        if self.bits == 128 {
            ((k.w[self.word] as u128) << 64) | k.w[self.word + 1] as u128
        } else {
            ((k.w[self.word] >> self.shift) as u128) & self.max()
        }
    }

    #[inline]
    pub fn set(&self, k: &mut FlowKey, v: u128) {
        if self.bits == 128 {
            k.w[self.word] = (v >> 64) as u64;
            k.w[self.word + 1] = v as u64;
        } else {
            let m = (self.max() as u64) << self.shift;
            k.w[self.word] = (k.w[self.word] & !m) | (((v as u64) << self.shift) & m);
        }
    }
}

// Word layout. Changing it is cheap: everything goes through these `Loc`s.
pub mod loc {
    use super::Loc;
    // Metadata stage (words 0..21).
    pub const IN_PORT: Loc = Loc::new(0, 0, 32);
    pub const RECIRC_ID: Loc = Loc::new(0, 32, 32);
    pub const PKT_MARK: Loc = Loc::new(1, 0, 32);
    pub const DP_HASH: Loc = Loc::new(1, 32, 32);
    pub const METADATA: Loc = Loc::new(2, 0, 64);
    pub const TUN_ID: Loc = Loc::new(3, 0, 64);
    pub const TUN_SRC: Loc = Loc::new(4, 0, 32);
    pub const TUN_DST: Loc = Loc::new(4, 32, 32);
    pub const CT_STATE: Loc = Loc::new(5, 0, 8);
    pub const CT_ZONE: Loc = Loc::new(5, 16, 16);
    pub const CT_MARK: Loc = Loc::new(5, 32, 32);
    /// The connection's 128-bit label (words 6-7).
    pub const CT_LABEL: Loc = Loc::new(6, 0, 128);
    /// The connection's original-direction tuple (IPv4), as `ct()` found it.
    pub const CT_NW_SRC: Loc = Loc::new(8, 0, 32);
    pub const CT_NW_DST: Loc = Loc::new(8, 32, 32);
    pub const CT_NW_PROTO: Loc = Loc::new(9, 0, 8);
    pub const CT_TP_SRC: Loc = Loc::new(9, 16, 16);
    pub const CT_TP_DST: Loc = Loc::new(9, 32, 16);
    /// OpenFlow registers reg0..reg15, two per word (words 10-17). As in
    /// OVS, the even register is the high half, so `xregN` (reg2N:reg2N+1)
    /// is one whole word and `xxregN` (reg4N..reg4N+3) two words, high first.
    /// Registers are pipeline scratch: a packet enters the datapath with
    /// all of them zero.
    pub const REGS: [Loc; 16] = {
        let mut r = [Loc::new(0, 0, 0); 16];
        let mut i = 0;
        while i < 16 {
            r[i] = Loc::new(10 + i / 2, if i % 2 == 0 { 32 } else { 0 }, 32);
            i += 1;
        }
        r
    };
    /// `xreg0..xreg7`.
    pub const fn xreg(i: usize) -> Loc {
        Loc::new(10 + i, 0, 64)
    }
    /// `xxreg0..xxreg3`.
    pub const fn xxreg(i: usize) -> Loc {
        Loc::new(10 + 2 * i, 0, 128)
    }
    /// Tunnel metadata beyond id and IPv4 endpoints (word 18).
    pub const TUN_FLAGS: Loc = Loc::new(18, 0, 16);
    pub const TUN_TOS: Loc = Loc::new(18, 16, 8);
    pub const TUN_TTL: Loc = Loc::new(18, 24, 8);
    pub const TUN_GBP_ID: Loc = Loc::new(18, 32, 16);
    pub const TUN_GBP_FLAGS: Loc = Loc::new(18, 48, 8);
    /// Geneve options bound by the TLV map: `tun_metadata0` and
    /// `tun_metadata1`, up to 4 bytes each (word 19). OVN uses one 4-byte
    /// option (tun_metadata0).
    pub const TUN_METADATA: [Loc; 2] = [Loc::new(19, 32, 32), Loc::new(19, 0, 32)];
    /// `conj_id`: the conjunctive match that translation found (set only
    /// while looking up the flow that matches on it; word 20).
    pub const CONJ_ID: Loc = Loc::new(20, 0, 32);
    /// IPv6 tunnel endpoints (words 21-24); `tun_src`/`tun_dst` hold IPv4
    /// ones. A packet received over IPv6 has these set and those zero.
    pub const TUN_IPV6_SRC: Loc = Loc::new(21, 0, 128);
    pub const TUN_IPV6_DST: Loc = Loc::new(23, 0, 128);
    // L2 stage (words 25..28).
    pub const DL_DST: Loc = Loc::new(25, 0, 48);
    pub const DL_TYPE: Loc = Loc::new(25, 48, 16);
    pub const DL_SRC: Loc = Loc::new(26, 0, 48);
    /// Outer 802.1Q/802.1ad TCI; bit 12 (0x1000) set means "a tag is present".
    pub const VLAN_TCI: Loc = Loc::new(26, 48, 16);
    /// Inner TCI of a double-tagged frame.
    pub const VLAN_TCI2: Loc = Loc::new(27, 0, 16);
    /// The top MPLS label stack entry of an MPLS frame (dl_type 0x8847 or
    /// 0x8848), split as on the wire (label 20 | tc 3 | bos 1 | ttl 8), so
    /// bits 16..48 of this word hold the entry as one host-order number.
    pub const MPLS_TTL: Loc = Loc::new(27, 16, 8);
    pub const MPLS_BOS: Loc = Loc::new(27, 24, 1);
    pub const MPLS_TC: Loc = Loc::new(27, 25, 3);
    pub const MPLS_LABEL: Loc = Loc::new(27, 28, 20);
    /// The whole label stack entry (the four fields above).
    pub const MPLS_LSE: Loc = Loc::new(27, 16, 32);
    // L3 stage (words 28..38).
    pub const NW_SRC: Loc = Loc::new(28, 0, 32);
    pub const NW_DST: Loc = Loc::new(28, 32, 32);
    pub const IPV6_SRC: Loc = Loc::new(29, 0, 128);
    pub const IPV6_DST: Loc = Loc::new(31, 0, 128);
    pub const IPV6_LABEL: Loc = Loc::new(33, 0, 20);
    /// IP protocol; for ARP the low 8 bits of the opcode.
    pub const NW_PROTO: Loc = Loc::new(33, 32, 8);
    /// The whole TOS/traffic-class byte: DSCP in the high 6 bits, ECN low 2.
    pub const NW_TOS: Loc = Loc::new(33, 40, 8);
    pub const NW_TTL: Loc = Loc::new(33, 48, 8);
    /// Bit 0: a fragment; bit 1: a later (non-first) fragment.
    pub const NW_FRAG: Loc = Loc::new(33, 56, 8);
    /// ARP sender hardware address, or IPv6 ND source link-layer address.
    pub const ARP_SHA: Loc = Loc::new(34, 0, 48);
    /// ARP target hardware address, or IPv6 ND target link-layer address.
    pub const ARP_THA: Loc = Loc::new(35, 0, 48);
    pub const ND_TARGET: Loc = Loc::new(36, 0, 128);
    // L4 stage (word 38).
    /// TCP/UDP/SCTP source port; ICMP type.
    pub const TP_SRC: Loc = Loc::new(38, 0, 16);
    /// TCP/UDP/SCTP destination port; ICMP code.
    pub const TP_DST: Loc = Loc::new(38, 16, 16);
    pub const TCP_FLAGS: Loc = Loc::new(38, 32, 12);
}

/// `nw_frag` bits.
pub const FRAG_ANY: u8 = 1;
pub const FRAG_LATER: u8 = 2;
/// VLAN TCI "tag present" bit (the CFI position, as OVS uses it).
pub const VLAN_PRESENT: u16 = 0x1000;

pub mod ethertype {
    pub const IPV4: u16 = 0x0800;
    pub const ARP: u16 = 0x0806;
    pub const RARP: u16 = 0x8035;
    pub const IPV6: u16 = 0x86dd;
    pub const VLAN: u16 = 0x8100;
    pub const QINQ: u16 = 0x88a8;
    pub const MPLS: u16 = 0x8847;
    pub const MPLS_MCAST: u16 = 0x8848;
    /// dl_type of a frame with no Ethertype (802.3 length field), as OVS.
    pub const NONE: u16 = 0x05ff;
}

pub mod ipproto {
    pub const ICMP: u8 = 1;
    pub const TCP: u8 = 6;
    pub const UDP: u8 = 17;
    pub const ICMPV6: u8 = 58;
    pub const SCTP: u8 = 132;
}

/// Typed accessors for the common fields.
macro_rules! accessors {
    ($($get:ident $set:ident $loc:ident $t:ty;)*) => {
        impl FlowKey {
            $(
                #[inline] pub fn $get(&self) -> $t { loc::$loc.get(self) as $t }
                #[inline] pub fn $set(&mut self, v: $t) { loc::$loc.set(self, v as u128) }
            )*
        }
    };
}

accessors! {
    in_port set_in_port IN_PORT u32;
    recirc_id set_recirc_id RECIRC_ID u32;
    pkt_mark set_pkt_mark PKT_MARK u32;
    metadata set_metadata METADATA u64;
    dl_dst set_dl_dst DL_DST u64;
    dl_src set_dl_src DL_SRC u64;
    dl_type set_dl_type DL_TYPE u16;
    vlan_tci set_vlan_tci VLAN_TCI u16;
    vlan_tci2 set_vlan_tci2 VLAN_TCI2 u16;
    mpls_lse set_mpls_lse MPLS_LSE u32;
    mpls_label set_mpls_label MPLS_LABEL u32;
    mpls_tc set_mpls_tc MPLS_TC u8;
    mpls_bos set_mpls_bos MPLS_BOS u8;
    mpls_ttl set_mpls_ttl MPLS_TTL u8;
    nw_src set_nw_src NW_SRC u32;
    nw_dst set_nw_dst NW_DST u32;
    ipv6_src set_ipv6_src IPV6_SRC u128;
    ipv6_dst set_ipv6_dst IPV6_DST u128;
    ipv6_label set_ipv6_label IPV6_LABEL u32;
    nw_proto set_nw_proto NW_PROTO u8;
    nw_tos set_nw_tos NW_TOS u8;
    nw_ttl set_nw_ttl NW_TTL u8;
    nw_frag set_nw_frag NW_FRAG u8;
    arp_sha set_arp_sha ARP_SHA u64;
    arp_tha set_arp_tha ARP_THA u64;
    nd_target set_nd_target ND_TARGET u128;
    tp_src set_tp_src TP_SRC u16;
    tp_dst set_tp_dst TP_DST u16;
    tcp_flags set_tcp_flags TCP_FLAGS u16;
    ct_state set_ct_state CT_STATE u8;
    ct_zone set_ct_zone CT_ZONE u16;
    ct_mark set_ct_mark CT_MARK u32;
    ct_label set_ct_label CT_LABEL u128;
    ct_nw_src set_ct_nw_src CT_NW_SRC u32;
    ct_nw_dst set_ct_nw_dst CT_NW_DST u32;
    ct_nw_proto set_ct_nw_proto CT_NW_PROTO u8;
    ct_tp_src set_ct_tp_src CT_TP_SRC u16;
    ct_tp_dst set_ct_tp_dst CT_TP_DST u16;
    conj_id set_conj_id CONJ_ID u32;
}

impl FlowKey {
    pub fn is_ip(&self) -> bool {
        self.dl_type() == ethertype::IPV4
    }
    pub fn is_ipv6(&self) -> bool {
        self.dl_type() == ethertype::IPV6
    }
    pub fn is_ip_any(&self) -> bool {
        self.is_ip() || self.is_ipv6()
    }
    pub fn is_mpls(&self) -> bool {
        matches!(self.dl_type(), ethertype::MPLS | ethertype::MPLS_MCAST)
    }
}

/// Clears every connection-tracking field of a key (`ct_clear`).
pub fn clear_ct(k: &mut FlowKey) {
    for l in [
        loc::CT_STATE,
        loc::CT_ZONE,
        loc::CT_MARK,
        loc::CT_LABEL,
        loc::CT_NW_SRC,
        loc::CT_NW_DST,
        loc::CT_NW_PROTO,
        loc::CT_TP_SRC,
        loc::CT_TP_DST,
    ] {
        l.set(k, 0);
    }
}

/// Formats a 48-bit MAC held as an integer.
pub fn fmt_mac(v: u64) -> String {
    let b = v.to_be_bytes();
    format!("{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", b[2], b[3], b[4], b[5], b[6], b[7])
}

pub fn mac_from_bytes(b: &[u8]) -> u64 {
    let mut v = 0u64;
    for &x in &b[..6] {
        v = (v << 8) | x as u64;
    }
    v
}

pub fn mac_to_bytes(v: u64) -> [u8; 6] {
    let b = v.to_be_bytes();
    [b[2], b[3], b[4], b[5], b[6], b[7]]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_key_hash_is_four_lanes_over_every_word() {
        // The definition, lane by lane (word i feeds lane i % 4).
        fn reference(k: &FlowKey) -> u64 {
            const K: [u64; 4] =
                [0x9e37_79b9_7f4a_7c15, 0xc2b2_ae3d_27d4_eb4f, 0x1656_67b1_9e37_79f9, 0xd6e8_feb8_6659_fd93];
            let mut lanes = [0u64; 4];
            for (i, w) in k.w.iter().enumerate() {
                lanes[i % 4] = (lanes[i % 4] ^ w).wrapping_mul(K[i % 4]).rotate_left(31);
            }
            finish(lanes[0] ^ lanes[1].rotate_left(17) ^ lanes[2].rotate_left(29) ^ lanes[3].rotate_left(43))
        }
        let mut k = FlowKey::ZERO;
        assert_eq!(k.hash(), reference(&k));
        for i in 0..WORDS {
            k.w[i] = (i as u64 + 1).wrapping_mul(0x0123_4567_89ab_cdef);
            assert_eq!(k.hash(), reference(&k), "after word {i}");
        }
        // Every word counts, the last ones too.
        let mut j = k;
        j.w[WORDS - 1] ^= 1;
        assert_ne!(j.hash(), k.hash());
    }

    #[test]
    fn locs_do_not_overlap_and_respect_stages() {
        let mut seen = FlowKey::ZERO;
        for f in crate::fields::FIELDS.iter().filter(|f| !f.alias) {
            let mut m = FlowKey::ZERO;
            f.loc.set(&mut m, f.loc.max());
            for i in 0..WORDS {
                assert_eq!(seen.w[i] & m.w[i], 0, "field {} overlaps", f.name);
            }
            seen.or_assign(&m);
            // A field never straddles a stage boundary.
            let words: Vec<usize> = (0..WORDS).filter(|&i| m.w[i] != 0).collect();
            let stage = |w: usize| STAGES.iter().rposition(|&s| s <= w).unwrap();
            assert!(words.iter().all(|&w| stage(w) == stage(words[0])), "{}", f.name);
        }
    }

    #[test]
    fn get_set_roundtrip() {
        let mut k = FlowKey::ZERO;
        k.set_nw_dst(0x0a01_0203);
        k.set_tp_dst(80);
        k.set_ipv6_src(0x2001_0db8_0000_0000_0000_0000_0000_0001);
        assert_eq!(k.nw_dst(), 0x0a01_0203);
        assert_eq!(k.tp_dst(), 80);
        assert_eq!(k.ipv6_src(), 0x2001_0db8_0000_0000_0000_0000_0000_0001);
        assert_eq!(k.nw_src(), 0);
    }

    #[test]
    fn mpls_fields_tile_the_label_stack_entry() {
        let mut k = FlowKey::ZERO;
        k.set_mpls_lse(0x0001_2b40); // label 0x12, tc 5, bos 1, ttl 0x40
        assert_eq!((k.mpls_label(), k.mpls_tc(), k.mpls_bos(), k.mpls_ttl()), (0x12, 5, 1, 0x40));
        k.set_mpls_label(0xfffff);
        assert_eq!(k.mpls_lse(), 0xffff_fb40);
        assert_eq!(k.vlan_tci2(), 0);
    }
}
