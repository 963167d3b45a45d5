//! Differential test: the tuple-space-search classifier against a linear
//! scan, plus a check that every reported `wc` is sufficient.
//!
//! Rule sets are drawn from a pool of mask shapes: IPv4 and IPv6 prefixes
//! of every length on source and destination (alone and together),
//! arbitrary bit masks on an address, ARP target prefixes (which share
//! nw_dst's bits), address prefixes without a `dl_type` match, exact L4
//! ports and 5-tuples, MACs, in_port, metadata bits, all of metadata
//! (partitioned subtables) alone or with in_port, a prefix or a MAC, the
//! catch-all.
//! Addresses come from a few overlapping bases so prefixes nest and
//! collide; priorities come from a tiny range so ties are common. Each
//! rule is inserted at a random version and some are removed at a later
//! one. Packets are mostly rule keys with perturbations (unmasked bits
//! filled at random, single bit flips anywhere or in an address, fields
//! swapped with another rule's, Ethertype changed).
//!
//! Checked for every packet and every version 0..=5:
//! 1. `lookup` returns what a linear scan returns (highest priority, ties
//!    to the lowest id);
//! 2. keys that agree with the packet on `wc` — random elsewhere, or the
//!    packet with one bit outside `wc` flipped — get the same answer from
//!    the linear scan;
//! 3. `wc` has no bit outside the union of rule masks and `dl_type`.
//!
//! After `purge`, the same checks hold for the versions still in use.

use classifier::{Classifier, RuleId};
use flow::key::{ethertype, ipproto, loc, FlowKey, Loc, WORDS};
use flow::Match;
use proptest::prelude::*;

fn prefix(bits: u32, len: u32) -> u128 {
    let len = len.min(bits);
    if len == 0 {
        0
    } else {
        let all = if bits == 128 { u128::MAX } else { (1u128 << bits) - 1 };
        (all >> (bits - len)) << (bits - len)
    }
}

const V4_BASES: [u32; 5] = [0x0a00_0000, 0x0a01_0000, 0xc0a8_0000, 0xac10_0000, 0x0000_0000];
const V6_BASES: [u128; 3] = [0x2001_0db8 << 96, (0x2001_0db8 << 96) | (1 << 64), 0xfe80 << 112];

fn v4(r: u64) -> u32 {
    let low = [0xff, 0xffff, 0xff_ffff, 0xffff_ffff][(r >> 8) as usize % 4];
    V4_BASES[r as usize % V4_BASES.len()] ^ ((r >> 16) as u32 & low)
}

fn v6(r: u64) -> u128 {
    V6_BASES[r as usize % V6_BASES.len()] ^ ((r >> 8) as u128 & 0xffff_ffff) ^ (((r >> 40) as u128) << 70)
}

fn set(k: &mut FlowKey, m: &mut FlowKey, f: Loc, v: u128, mask: u128) {
    f.set(k, v & mask);
    f.set(m, f.get(m) | mask);
}

fn exact(k: &mut FlowKey, m: &mut FlowKey, f: Loc, v: u128) {
    set(k, m, f, v, f.max());
}

/// A random rule match built from one of several shapes.
fn arb_match() -> impl Strategy<Value = Match> {
    (0u8..21, any::<u64>(), any::<u64>(), 0u32..=33, 0u32..=129).prop_map(|(shape, a, b, p4, p6)| {
        let (mut key, mut mask) = (FlowKey::ZERO, FlowKey::ZERO);
        let (k_, m_) = (&mut key, &mut mask);
        let ipv4 = |k: &mut FlowKey, m: &mut FlowKey| exact(k, m, loc::DL_TYPE, ethertype::IPV4 as u128);
        match shape {
            0 => {
                ipv4(k_, m_);
                set(k_, m_, loc::NW_DST, v4(a) as u128, prefix(32, p4));
            }
            1 => {
                ipv4(k_, m_);
                set(k_, m_, loc::NW_SRC, v4(a) as u128, prefix(32, p4));
            }
            2 => {
                ipv4(k_, m_);
                set(k_, m_, loc::NW_SRC, v4(a) as u128, prefix(32, p4));
                set(k_, m_, loc::NW_DST, v4(b) as u128, prefix(32, (b >> 58) as u32));
            }
            3 => {
                ipv4(k_, m_);
                set(k_, m_, loc::NW_DST, v4(a) as u128, b as u32 as u128); // Not CIDR: no trie.
            }
            4 => {
                exact(k_, m_, loc::DL_TYPE, ethertype::IPV6 as u128);
                set(k_, m_, loc::IPV6_DST, v6(a), prefix(128, p6));
            }
            5 => {
                exact(k_, m_, loc::DL_TYPE, ethertype::IPV6 as u128);
                set(k_, m_, loc::IPV6_SRC, v6(a), prefix(128, p6));
                if b & 1 == 0 {
                    set(k_, m_, loc::IPV6_DST, v6(b), prefix(128, (b >> 57) as u32));
                }
            }
            6 | 7 => {
                ipv4(k_, m_);
                exact(k_, m_, loc::NW_PROTO, if shape == 6 { ipproto::TCP } else { ipproto::UDP } as u128);
                exact(k_, m_, loc::TP_DST, (a % 4) as u128);
                if b & 1 == 0 {
                    set(k_, m_, loc::NW_DST, v4(b >> 1) as u128, prefix(32, p4.max(8)));
                }
            }
            8 => {
                ipv4(k_, m_);
                exact(k_, m_, loc::NW_PROTO, ipproto::TCP as u128);
                exact(k_, m_, loc::NW_SRC, v4(a) as u128);
                exact(k_, m_, loc::NW_DST, v4(b) as u128);
                exact(k_, m_, loc::TP_SRC, (a >> 40) as u128 % 3);
                exact(k_, m_, loc::TP_DST, (b >> 40) as u128 % 3);
            }
            9 => exact(k_, m_, loc::DL_DST, (a % 3) as u128),
            10 => {
                exact(k_, m_, loc::IN_PORT, (a % 3) as u128 + 1);
                if b & 1 == 0 {
                    ipv4(k_, m_);
                    set(k_, m_, loc::NW_DST, v4(b >> 1) as u128, prefix(32, p4));
                }
            }
            11 => set(k_, m_, loc::METADATA, a as u128 & 0xf, b as u128 & 0xf),
            12 => {
                // ARP target prefix: same bits as nw_dst, not in the tries.
                exact(k_, m_, loc::DL_TYPE, ethertype::ARP as u128);
                set(k_, m_, loc::NW_DST, v4(a) as u128, prefix(32, p4));
            }
            13 => set(k_, m_, loc::NW_DST, v4(a) as u128, prefix(32, p4)), // No dl_type: no trie.
            14 => {
                set(k_, m_, loc::VLAN_TCI, a as u128, 0x1fff & (b as u128 | 0x1000));
                exact(k_, m_, loc::TP_SRC, (a >> 32) as u128 % 3);
            }
            15 => {
                // dl_type partly wildcarded plus a prefix: no trie.
                set(k_, m_, loc::DL_TYPE, ethertype::IPV4 as u128, 0xff00);
                set(k_, m_, loc::NW_SRC, v4(a) as u128, prefix(32, p4));
            }
            16 => {
                exact(k_, m_, loc::DL_SRC, (a % 3) as u128);
                if b & 1 == 0 {
                    // Group bit of dl_dst only: an arbitrary-bit L2 mask.
                    set(k_, m_, loc::DL_DST, (b >> 1) as u128, 0x0100_0000_0000);
                }
            }
            17 => {
                // Arbitrary (mostly non-prefix) port masks: per-subtable tries.
                ipv4(k_, m_);
                exact(k_, m_, loc::NW_PROTO, ipproto::UDP as u128);
                let f = if b & 1 == 0 { loc::TP_SRC } else { loc::TP_DST };
                let masks = [0x00ff, 0x0f0f, 0x00f0, 0x8001, 0x7ffe];
                set(k_, m_, f, (a % 5) as u128, masks[(b >> 1) as usize % masks.len()]);
            }
            18 | 19 => {
                // All of metadata (partitioned subtables, as OVN's logical
                // datapaths), with another field or not.
                exact(k_, m_, loc::METADATA, (a % 3) as u128);
                match (shape, b % 3) {
                    (18, 0) => exact(k_, m_, loc::IN_PORT, (b >> 8) as u128 % 3 + 1),
                    (18, 1) => {
                        ipv4(k_, m_);
                        set(k_, m_, loc::NW_DST, v4(b >> 2) as u128, prefix(32, p4));
                    }
                    (19, 0) => exact(k_, m_, loc::DL_DST, (b >> 8) as u128 % 3),
                    _ => {}
                }
            }
            _ => {} // Catch-all.
        }
        Match::new(key, mask)
    })
}

/// Fields worth perturbing individually.
const FIELDS: [Loc; 13] = [
    loc::NW_SRC,
    loc::NW_DST,
    loc::IPV6_SRC,
    loc::IPV6_DST,
    loc::DL_TYPE,
    loc::TP_SRC,
    loc::TP_DST,
    loc::NW_PROTO,
    loc::IN_PORT,
    loc::DL_DST,
    loc::METADATA,
    loc::VLAN_TCI,
    loc::DL_SRC,
];

/// A packet near rule key `base` (or `other`), perturbed according to `r`.
fn make_packet(base: &Match, other: &Match, r: &[u64; 4], noise: &[u64; WORDS]) -> FlowKey {
    let mut k = base.key;
    match r[0] % 8 {
        0 => {}
        1 | 2 => {
            // Unmasked bits random.
            for ((w, n), m) in k.w.iter_mut().zip(noise).zip(&base.mask.w) {
                *w |= n & !m;
            }
        }
        3 => {
            // One bit flipped anywhere.
            let bit = r[1] % (64 * WORDS as u64);
            k.w[bit as usize / 64] ^= 1 << (bit % 64);
        }
        4 | 5 => {
            // One bit of a field flipped (addresses near prefix boundaries).
            let f = FIELDS[r[1] as usize % FIELDS.len()];
            let bit = (r[2] % f.bits as u64) as u32;
            let v = f.get(&k) ^ (1u128 << bit);
            f.set(&mut k, v);
        }
        6 => {
            // A field taken from another rule.
            let f = FIELDS[r[1] as usize % FIELDS.len()];
            f.set(&mut k, f.get(&other.key));
        }
        _ => {
            // Entirely random, protocol from a small set.
            k = FlowKey { w: *noise };
            let t = [ethertype::IPV4, ethertype::IPV6, ethertype::ARP, 0x1234][r[1] as usize % 4];
            k.set_dl_type(t);
        }
    }
    if r[3].is_multiple_of(5) {
        let t = [ethertype::IPV4, ethertype::IPV6, ethertype::ARP][r[2] as usize % 3];
        k.set_dl_type(t);
    }
    k
}

#[derive(Clone, Copy, Debug)]
struct ModelRule {
    id: RuleId,
    m: Match,
    prio: u32,
    added: u64,
    removed: u64,
}

/// Linear scan: the visible matching rule of highest priority, ties to the
/// lowest id.
fn reference(rules: &[ModelRule], k: &FlowKey, v: u64) -> Option<RuleId> {
    rules
        .iter()
        .filter(|r| r.added <= v && v < r.removed && r.m.matches(k))
        .max_by(|a, b| a.prio.cmp(&b.prio).then(b.id.cmp(&a.id)))
        .map(|r| r.id)
}

fn check_lookup(
    c: &Classifier<usize>,
    model: &[ModelRule],
    k: &FlowKey,
    v: u64,
    checks: &[[u64; WORDS]],
    flips: &[u64],
) -> Result<(), TestCaseError> {
    let mut wc = FlowKey::ZERO;
    let got = c.lookup(k, v, &mut wc);
    prop_assert_eq!(got, reference(model, k, v), "version {} key {:?}", v, k);
    // Never a bit that no rule (stored at any version) looks at.
    let mut allowed = FlowKey::ZERO;
    loc::DL_TYPE.set(&mut allowed, 0xffff);
    for r in model {
        allowed.or_assign(&r.m.mask);
    }
    prop_assert!(wc.is_subset_of(&allowed), "wc {:?} outside rule masks {:?}", wc, allowed);
    // Keys agreeing on wc, random elsewhere.
    for r in checks {
        let mut k2 = *k;
        for (i, x) in r.iter().enumerate() {
            k2.w[i] = (k.w[i] & wc.w[i]) | (x & !wc.w[i]);
        }
        prop_assert_eq!(reference(model, &k2, v), got, "wc {:?} too narrow for {:?} vs {:?}", wc, k, k2);
    }
    // The packet with one bit outside wc flipped: the nearest neighbours.
    for &f in flips {
        let bit = f % (64 * WORDS as u64);
        let (w, b) = (bit as usize / 64, 1u64 << (bit % 64));
        if wc.w[w] & b == 0 {
            let mut k2 = *k;
            k2.w[w] ^= b;
            prop_assert_eq!(reference(model, &k2, v), got, "wc {:?} misses bit {} of {:?}", wc, bit, k);
            prop_assert_eq!(c.lookup(&k2, v, &mut FlowKey::default()), got);
        }
    }
    Ok(())
}

proptest! {
    // 512 cases unless PROPTEST_CASES asks for more (or fewer).
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(512),
        ..ProptestConfig::default()
    })]

    #[test]
    fn tss_matches_linear_scan(
        rules in prop::collection::vec((arb_match(), 0u32..4, 0u64..3), 1..48),
        removals in prop::collection::vec((any::<prop::sample::Index>(), 0u64..4), 0..16),
        packets in prop::collection::vec(
            (any::<prop::sample::Index>(), any::<prop::sample::Index>(), any::<[u64; 4]>(), any::<[u64; WORDS]>()),
            1..40,
        ),
        checks in prop::collection::vec(any::<[u64; WORDS]>(), 6),
        oldest in 0u64..=5,
        flips in prop::collection::vec(any::<u64>(), 24),
    ) {
        let mut c: Classifier<usize> = Classifier::new();
        let mut model = Vec::new();
        for (i, (m, p, added)) in rules.iter().enumerate() {
            let id = c.insert(*m, *p, i, *added);
            model.push(ModelRule { id, m: Match::new(m.key, m.mask), prio: *p, added: *added, removed: u64::MAX });
        }
        for (r, dv) in &removals {
            let i = r.index(model.len());
            if model[i].removed == u64::MAX {
                let v = model[i].added + dv;
                c.remove(model[i].id, v);
                model[i].removed = v;
            }
        }
        for v in 0..=5 {
            prop_assert_eq!(c.len(v), model.iter().filter(|r| r.added <= v && v < r.removed).count());
        }
        let pkts: Vec<FlowKey> = packets
            .iter()
            .map(|(a, b, r, noise)| make_packet(&model[a.index(model.len())].m, &model[b.index(model.len())].m, r, noise))
            .collect();
        for k in &pkts {
            for v in 0..=5 {
                check_lookup(&c, &model, k, v, &checks, &flips)?;
            }
        }
        // Readers at version >= `oldest` only: rules removed by then are freed.
        c.purge(oldest);
        model.retain(|r| r.removed > oldest);
        prop_assert_eq!(c.n_stored(), model.len());
        for k in &pkts {
            for v in oldest..=5 {
                check_lookup(&c, &model, k, v, &checks, &flips)?;
            }
        }
        // Strict find agrees with the model for every live rule.
        for r in &model {
            let v = r.added;
            if v < r.removed {
                let want = model
                    .iter()
                    .filter(|x| x.m == r.m && x.prio == r.prio && x.added <= v && v < x.removed)
                    .map(|x| x.id)
                    .min();
                prop_assert_eq!(c.find_exact(&r.m, r.prio, v), want);
            }
        }
    }

    /// A lookup memo answers as the search does: the same rule, and a `wc`
    /// that is sufficient and inside the rule masks. Each packet is looked
    /// up twice per version (the second time from the memo, when its answer
    /// depended on few enough words to be remembered), with
    /// neighbours that agree on `wc`; then a rule is added and one removed,
    /// and the memo follows.
    #[test]
    fn memo_answers_as_the_search(
        rules in prop::collection::vec((arb_match(), 0u32..4, 0u64..3), 1..48),
        packets in prop::collection::vec(
            (any::<prop::sample::Index>(), any::<prop::sample::Index>(), any::<[u64; 4]>(), any::<[u64; WORDS]>()),
            1..40,
        ),
        checks in prop::collection::vec(any::<[u64; WORDS]>(), 4),
        victim in any::<prop::sample::Index>(),
    ) {
        let mut c: Classifier<usize> = Classifier::new();
        let mut model = Vec::new();
        for (i, (m, p, added)) in rules.iter().enumerate() {
            let id = c.insert(*m, *p, i, *added);
            model.push(ModelRule { id, m: Match::new(m.key, m.mask), prio: *p, added: *added, removed: u64::MAX });
        }
        let pkts: Vec<FlowKey> = packets
            .iter()
            .map(|(a, b, r, noise)| make_packet(&model[a.index(model.len())].m, &model[b.index(model.len())].m, r, noise))
            .collect();
        let mut memo = classifier::Memo::default();
        let check = |c: &Classifier<usize>, memo: &mut classifier::Memo, model: &[ModelRule], v: u64|
            -> Result<(), TestCaseError> {
            let mut allowed = FlowKey::ZERO;
            loc::DL_TYPE.set(&mut allowed, 0xffff);
            for r in model {
                allowed.or_assign(&r.m.mask);
            }
            for _pass in 0..2 {
                for k in &pkts {
                    let mut wc = FlowKey::ZERO;
                    let got = c.lookup_memo(memo, k, v, &mut wc).map(|x| x.0);
                    prop_assert_eq!(got, reference(model, k, v), "version {} key {:?}", v, k);
                    prop_assert!(wc.is_subset_of(&allowed), "wc {:?} outside rule masks", wc);
                    for r in &checks {
                        let mut k2 = *k;
                        for (i, x) in r.iter().enumerate() {
                            k2.w[i] = (k.w[i] & wc.w[i]) | (x & !wc.w[i]);
                        }
                        prop_assert_eq!(reference(model, &k2, v), got, "wc {:?} too narrow", wc);
                        let got2 = c.lookup_memo(memo, &k2, v, &mut FlowKey::default()).map(|x| x.0);
                        prop_assert_eq!(got2, got, "the memo's answer for a neighbour on wc");
                    }
                }
            }
            Ok(())
        };
        for v in 0..=3 {
            check(&c, &mut memo, &model, v)?;
        }
        // A change: a new rule over the first packet at the top priority,
        // and another rule removed, both at version 3.
        let k0 = pkts[0];
        let top = Match::new(k0, FlowKey::ALL_ONES);
        let id = c.insert(top, 9, usize::MAX, 3);
        model.push(ModelRule { id, m: top, prio: 9, added: 3, removed: u64::MAX });
        let i = victim.index(model.len() - 1);
        if model[i].removed == u64::MAX {
            c.remove(model[i].id, 3);
            model[i].removed = 3.max(model[i].added);
        }
        let mut wc = FlowKey::ZERO;
        prop_assert_eq!(c.lookup_memo(&mut memo, &k0, 3, &mut wc).map(|x| x.0), Some(id));
        for v in 2..=3 {
            check(&c, &mut memo, &model, v)?;
        }
    }

    /// Non-strict find against a filter over the model.
    #[test]
    fn find_loose_matches_model(
        rules in prop::collection::vec((arb_match(), 0u32..4), 1..40),
        queries in prop::collection::vec(arb_match(), 1..10),
    ) {
        let mut c: Classifier<()> = Classifier::new();
        let mut model = Vec::new();
        for (m, p) in &rules {
            model.push((c.insert(*m, *p, (), 1), Match::new(m.key, m.mask)));
        }
        let mut queries = queries;
        queries.extend(model.iter().take(5).map(|x| x.1));
        for q in &queries {
            let want: Vec<RuleId> = model
                .iter()
                .filter(|(_, m)| q.mask.is_subset_of(&m.mask) && m.key.eq_masked(&q.key, &q.mask))
                .map(|x| x.0)
                .collect();
            prop_assert_eq!(c.find_loose(q, 1), want);
            prop_assert!(c.find_loose(q, 0).is_empty());
        }
    }
}
