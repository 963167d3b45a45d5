//! Differential test: the tuple-space-search classifier against a linear
//! scan.
//!
//! Plan: random rule sets over a pool of mask shapes (IPv4/IPv6 prefixes
//! of every length, arbitrary bit masks, exact ports, MACs, in_port,
//! metadata bits) with equal priorities and overlaps; packets derived from
//! rule keys with random perturbations; random versioned removals.
//! Verified: (1) lookup returns what a linear scan in priority order
//! returns (ties: lowest RuleId); (2) the consulted bits are sufficient:
//! random keys that agree with the packet on `wc` get the same answer.

use classifier::{Classifier, RuleId};
use flow::key::{ethertype, ipproto, FlowKey, WORDS};
use flow::Match;
use proptest::prelude::*;

fn prefix(bits: u32, len: u32) -> u128 {
    if len == 0 {
        0
    } else {
        let all = if bits == 128 { u128::MAX } else { (1u128 << bits) - 1 };
        (all >> (bits - len)) << (bits - len)
    }
}

/// A random rule match built from one of several shapes.
fn arb_match() -> impl Strategy<Value = Match> {
    (0u8..10, any::<u64>(), any::<u64>(), 0u32..=32, 0u32..=128).prop_map(|(shape, a, b, p4, p6)| {
        let mut key = FlowKey::ZERO;
        let mut mask = FlowKey::ZERO;
        let ip = |k: &mut FlowKey, m: &mut FlowKey| {
            k.set_dl_type(ethertype::IPV4);
            m.set_dl_type(0xffff);
        };
        match shape {
            0 => {
                ip(&mut key, &mut mask);
                key.set_nw_dst(0x0a00_0000 | (a as u32 & 0x00ff_ffff));
                mask.set_nw_dst(prefix(32, p4) as u32);
            }
            1 => {
                ip(&mut key, &mut mask);
                key.set_nw_src(0xc0a8_0000 | (a as u32 & 0xffff));
                mask.set_nw_src(prefix(32, p4) as u32);
            }
            2 => {
                ip(&mut key, &mut mask);
                key.set_nw_dst(a as u32);
                mask.set_nw_dst(b as u32); // Arbitrary bits: no trie.
            }
            3 => {
                key.set_dl_type(ethertype::IPV6);
                mask.set_dl_type(0xffff);
                key.set_ipv6_dst(((0x2001_0db8u128) << 96) | a as u128);
                mask.set_ipv6_dst(prefix(128, p6));
            }
            4 | 5 => {
                ip(&mut key, &mut mask);
                key.set_nw_proto(if shape == 4 { ipproto::TCP } else { ipproto::UDP });
                mask.set_nw_proto(0xff);
                key.set_tp_dst((a % 4) as u16);
                mask.set_tp_dst(0xffff);
                if b & 1 == 0 {
                    key.set_nw_dst(0x0a00_0000 | (b as u32 & 0xff00));
                    mask.set_nw_dst(prefix(32, p4.max(8)) as u32);
                }
            }
            6 => {
                key.set_dl_dst(a % 3);
                mask.set_dl_dst(0xffff_ffff_ffff);
            }
            7 => {
                key.set_in_port((a % 3) as u32 + 1);
                mask.set_in_port(u32::MAX);
            }
            8 => {
                key.set_metadata(a & 0xf);
                mask.set_metadata(b & 0xf);
            }
            _ => {} // Catch-all.
        }
        Match::new(key, mask)
    })
}

/// A packet near `base`: some words kept, others randomized in small ranges.
fn make_packet(base: &FlowKey, noise: &[u64; WORDS], keep: u32) -> FlowKey {
    let mut k = *base;
    for i in 0..WORDS {
        if keep & (1 << i) == 0 {
            k.w[i] ^= noise[i] & 0x0000_0000_0300_0003;
        }
    }
    if noise[0] & 0x10 != 0 {
        k.set_dl_type(ethertype::IPV4);
        k.set_nw_proto([ipproto::TCP, ipproto::UDP][(noise[1] & 1) as usize]);
    }
    k
}

/// Linear scan reference: highest priority, ties to the lowest id.
fn reference(rules: &[(RuleId, Match, u32, bool)], k: &FlowKey) -> Option<RuleId> {
    rules.iter().filter(|r| r.3 && r.1.matches(k)).max_by(|a, b| a.2.cmp(&b.2).then(b.0.cmp(&a.0))).map(|r| r.0)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn tss_matches_linear_scan(
        rules in prop::collection::vec((arb_match(), 0u32..4), 1..40),
        removals in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
        noises in prop::collection::vec((any::<[u64; WORDS]>(), any::<u32>(), any::<prop::sample::Index>()), 1..30),
        checks in prop::collection::vec(any::<[u64; WORDS]>(), 5),
    ) {
        let mut c: Classifier<()> = Classifier::new();
        let mut model = Vec::new();
        for (m, p) in &rules {
            let id = c.insert(*m, *p, (), 1);
            model.push((id, *m, *p, true));
        }
        // Versioned removals at version 2; version 1 still sees them.
        let before = model.clone();
        for r in &removals {
            let i = r.index(model.len());
            if model[i].3 {
                c.remove(model[i].0, 2);
                model[i].3 = false;
            }
        }
        for (noise, keep, pick) in &noises {
            let base = rules[pick.index(rules.len())].0.key;
            let k = make_packet(&base, noise, *keep);
            for (version, m) in [(1u64, &before), (2u64, &model)] {
                let mut wc = FlowKey::ZERO;
                let got = c.lookup(&k, version, &mut wc);
                prop_assert_eq!(got, reference(m, &k), "version {} key {:?}", version, k);
                // Any key agreeing on the consulted bits gets the same answer.
                for r in &checks {
                    let mut k2 = k;
                    for i in 0..WORDS {
                        k2.w[i] = (k.w[i] & wc.w[i]) | (r[i] & !wc.w[i]);
                    }
                    prop_assert_eq!(reference(m, &k2), got, "wc {:?} too narrow: {:?}", wc, k2);
                }
            }
        }
        c.purge(2);
        for (noise, keep, pick) in noises.iter().take(5) {
            let k = make_packet(&rules[pick.index(rules.len())].0.key, noise, *keep);
            let mut wc = FlowKey::ZERO;
            prop_assert_eq!(c.lookup(&k, 2, &mut wc), reference(&model, &k));
        }
    }
}

fn m(s: &str) -> Match {
    Match::parse(s).unwrap()
}

#[test]
fn trie_keeps_megaflow_at_slash_8() {
    let mut c: Classifier<&str> = Classifier::new();
    c.insert(m("ip,nw_dst=10.0.0.0/8"), 10, "a", 1);
    c.insert(m("ip,nw_dst=192.168.0.0/24"), 10, "b", 1);
    let k = m("udp,nw_src=1.1.1.1,nw_dst=10.1.2.3,tp_src=5,tp_dst=6").key;
    let mut wc = FlowKey::ZERO;
    let id = c.lookup(&k, 1, &mut wc).unwrap();
    assert_eq!(*c.get(id).unwrap().2, "a");
    assert_eq!(wc.nw_dst(), 0xff00_0000);
    assert_eq!((wc.nw_src(), wc.tp_src(), wc.tp_dst(), wc.nw_proto()), (0, 0, 0, 0));
}

#[test]
fn staged_lookup_stops_before_l4() {
    let mut c: Classifier<()> = Classifier::new();
    c.insert(m("tcp,nw_dst=10.0.0.1,tp_dst=80"), 10, (), 1);
    let k = m("tcp,nw_dst=10.0.0.2,tp_dst=80").key;
    let mut wc = FlowKey::ZERO;
    assert_eq!(c.lookup(&k, 1, &mut wc), None);
    assert_eq!(wc.tp_dst(), 0, "L4 not consulted when L3 already rules the subtable out");
    assert_ne!(wc.nw_dst(), 0);
}

#[test]
fn priority_order_and_early_exit() {
    let mut c: Classifier<u32> = Classifier::new();
    let hi = c.insert(m("ip"), 100, 1, 1);
    let _lo = c.insert(m("tcp,tp_dst=80"), 5, 2, 1);
    let k = m("tcp,tp_dst=80").key;
    let mut wc = FlowKey::ZERO;
    assert_eq!(c.lookup(&k, 1, &mut wc), Some(hi));
    assert_eq!(wc.tp_dst(), 0, "the lower-priority subtable is never visited");
}

#[test]
fn strict_and_loose_find() {
    let mut c: Classifier<()> = Classifier::new();
    let a = c.insert(m("ip,nw_dst=10.0.0.0/8"), 10, (), 1);
    let b = c.insert(m("ip,nw_dst=10.1.0.0/16"), 20, (), 1);
    let _x = c.insert(m("arp"), 10, (), 1);
    assert_eq!(c.find_exact(&m("ip,nw_dst=10.0.0.0/8"), 10, 1), Some(a));
    assert_eq!(c.find_exact(&m("ip,nw_dst=10.0.0.0/8"), 11, 1), None);
    assert_eq!(c.find_loose(&m("ip,nw_dst=10.0.0.0/8"), 1), vec![a, b]);
    assert_eq!(c.find_loose(&m("ip"), 1).len(), 2);
    assert_eq!(c.find_loose(&Match::CATCHALL, 1).len(), 3);
}

#[test]
fn versions_hide_changes_until_published() {
    let mut c: Classifier<()> = Classifier::new();
    let a = c.insert(m("ip"), 10, (), 1);
    c.remove(a, 2);
    let b = c.insert(m("ip"), 20, (), 2);
    let k = m("ip").key;
    let mut wc = FlowKey::ZERO;
    assert_eq!(c.lookup(&k, 1, &mut wc), Some(a), "old readers see the old rule");
    assert_eq!(c.lookup(&k, 2, &mut wc), Some(b));
    c.purge(2);
    assert!(c.get(a).is_none());
    assert_eq!(c.len(2), 1);
}
