//! Scenario tests: the wc each technique should produce, priority order,
//! strict and non-strict find, versions and purge.

use classifier::Classifier;
use flow::key::{loc, FlowKey};
use flow::Match;

fn m(s: &str) -> Match {
    Match::parse(s).unwrap()
}

fn key(s: &str) -> FlowKey {
    m(s).key
}

fn only(fields: &[(flow::key::Loc, u128)]) -> FlowKey {
    let mut k = FlowKey::ZERO;
    for &(f, v) in fields {
        f.set(&mut k, v);
    }
    k
}

#[test]
fn trie_keeps_megaflow_at_slash_8() {
    let mut c: Classifier<&str> = Classifier::new();
    c.insert(m("ip,nw_dst=10.0.0.0/8"), 10, "a", 1);
    c.insert(m("ip,nw_dst=192.168.0.0/24"), 10, "b", 1);
    assert_eq!(c.n_subtables(), 2);
    let k = key("udp,nw_src=1.1.1.1,nw_dst=10.1.2.3,tp_src=5,tp_dst=6");
    let mut wc = FlowKey::ZERO;
    let id = c.lookup(&k, 1, &mut wc).unwrap();
    assert_eq!(*c.get(id).unwrap().2, "a");
    // Exactly dl_type and the /8: no nw_src, nw_proto or L4 bits.
    assert_eq!(wc, only(&[(loc::DL_TYPE, 0xffff), (loc::NW_DST, 0xff00_0000)]));

    // The /24 rule itself still gets a /24 megaflow.
    let mut wc = FlowKey::ZERO;
    let id = c.lookup(&key("ip,nw_dst=192.168.0.9"), 1, &mut wc).unwrap();
    assert_eq!(*c.get(id).unwrap().2, "b");
    assert_eq!(wc, only(&[(loc::DL_TYPE, 0xffff), (loc::NW_DST, 0xffff_ff00)]));
}

#[test]
fn trie_miss_reads_only_the_diverging_bits() {
    let mut c: Classifier<()> = Classifier::new();
    c.insert(m("ip,nw_dst=10.0.0.0/8"), 10, (), 1);
    c.insert(m("ip,nw_dst=192.168.0.0/24"), 10, (), 1);
    let mut wc = FlowKey::ZERO;
    // 0x01.. shares 0000 with 0x0a.. and differs at bit 4; the first bit
    // already rules out 192.168/24.
    assert_eq!(c.lookup(&key("ip,nw_dst=1.2.3.4"), 1, &mut wc), None);
    assert_eq!(wc, only(&[(loc::DL_TYPE, 0xffff), (loc::NW_DST, 0xf800_0000)]));
}

#[test]
fn trie_on_ipv6_and_on_source() {
    let mut c: Classifier<()> = Classifier::new();
    let a = c.insert(m("ipv6,ipv6_dst=2001:db8::/32"), 10, (), 1);
    c.insert(m("ipv6,ipv6_dst=2001:db8:1:2::/64"), 20, (), 1);
    c.insert(m("ip,nw_src=172.16.0.0/12"), 5, (), 1);
    let mut wc = FlowKey::ZERO;
    assert_eq!(c.lookup(&key("ipv6,ipv6_dst=2001:db8:7::1"), 1, &mut wc), Some(a));
    // The /64 subtable (visited first) was skipped with at most 64 bits,
    // in fact fewer: 2001:db8:7:: leaves 2001:db8:1:2:: within 48 bits.
    assert!(wc.ipv6_dst().leading_ones() <= 48, "{:?}", wc);
    assert_eq!(wc.ipv6_dst().leading_ones() + wc.ipv6_dst().trailing_zeros(), 128, "a prefix");
    assert_eq!(wc.nw_src(), 0, "the IPv4 subtable fails at dl_type");
}

#[test]
fn arp_packets_do_not_use_the_ipv4_tries() {
    let mut c: Classifier<()> = Classifier::new();
    let arp = c.insert(m("arp,arp_tpa=10.0.0.0/8"), 10, (), 1);
    c.insert(m("ip,nw_dst=192.168.0.0/24"), 20, (), 1);
    let mut wc = FlowKey::ZERO;
    assert_eq!(c.lookup(&key("arp,arp_tpa=10.9.9.9"), 1, &mut wc), Some(arp));
    let mut wc = FlowKey::ZERO;
    // arp_tpa 192.168.0.1: ARP, so the ip rule cannot match; the ARP rule's
    // subtable is not pruned by the trie (its prefix is not in it).
    assert_eq!(c.lookup(&key("arp,arp_tpa=192.168.0.1"), 1, &mut wc), None);
    assert_eq!(wc.dl_type(), 0xffff);
}

#[test]
fn staged_lookup_stops_before_l4() {
    let mut c: Classifier<()> = Classifier::new();
    c.insert(m("tcp,nw_dst=10.0.0.1,tp_dst=80"), 10, (), 1);
    // L3 mismatch on nw_proto: the L3 stage hash misses, L4 is never read.
    let mut wc = FlowKey::ZERO;
    assert_eq!(c.lookup(&key("udp,nw_dst=10.0.0.1,tp_dst=80"), 1, &mut wc), None);
    assert_eq!(wc, only(&[(loc::DL_TYPE, 0xffff), (loc::NW_DST, 0xffff_ffff), (loc::NW_PROTO, 0xff)]));
    // L3 mismatch on the address: the trie rules the subtable out even
    // before the L3 stage, reading nw_dst only up to the differing bit.
    let mut wc = FlowKey::ZERO;
    assert_eq!(c.lookup(&key("tcp,nw_dst=10.0.0.2,tp_dst=80"), 1, &mut wc), None);
    assert_eq!(wc, only(&[(loc::DL_TYPE, 0xffff), (loc::NW_DST, 0xffff_fffe)]));
    // A hit reads everything.
    let mut wc = FlowKey::ZERO;
    assert!(c.lookup(&key("tcp,nw_dst=10.0.0.1,tp_dst=80"), 1, &mut wc).is_some());
    assert_eq!(wc.tp_dst(), 0xffff);
}

#[test]
fn port_tries_keep_megaflows_wide_on_l4_ports() {
    let mut c: Classifier<()> = Classifier::new();
    c.insert(m("udp,tp_src=7"), 20, (), 1);
    c.insert(m("udp"), 10, (), 1);
    // Source port 1000 (0x03e8) first differs from 7 in its 7th leading
    // bit: the ports trie rules the exact-port subtable out after reading
    // 7 bits, so the megaflow covers source ports 512-1023, not just 1000.
    let mut wc = FlowKey::ZERO;
    assert!(c.lookup(&key("udp,tp_src=1000"), 1, &mut wc).is_some());
    assert_eq!(wc.tp_src(), 0xfe00, "only the leading bits that rule out port 7");
    // Port 7 itself matches the exact rule, reading the whole port.
    let mut wc = FlowKey::ZERO;
    assert!(c.lookup(&key("udp,tp_src=7"), 1, &mut wc).is_some());
    assert_eq!(wc.tp_src(), 0xffff);
}

#[test]
fn masked_port_rules_get_a_subtable_trie() {
    let mut c: Classifier<()> = Classifier::new();
    let low = c.insert(m("udp,tp_src=0x7/0xff"), 20, (), 1);
    c.insert(m("udp"), 10, (), 1);
    // Low byte 0x34 (0011 0100) first differs from 0x07 (0000 0111) in the
    // low byte's third bit: the subtable's trie over masked ports rules it
    // out reading only the mask bits up to there (0x00e0), so the megaflow
    // covers every high byte and 32 low-byte values, as Open vSwitch does.
    let mut wc = FlowKey::ZERO;
    assert_ne!(c.lookup(&key("udp,tp_src=0x1234"), 1, &mut wc), Some(low));
    assert_eq!(wc.tp_src(), 0x00e0);
    // A port whose low byte is 7 matches, reading the whole low byte only.
    let mut wc = FlowKey::ZERO;
    assert_eq!(c.lookup(&key("udp,tp_src=0xab07"), 1, &mut wc), Some(low));
    assert_eq!(wc.tp_src(), 0x00ff);
    // After the rule goes, its trie entry goes too.
    c.remove(low, 2);
    let mut wc = FlowKey::ZERO;
    assert_ne!(c.lookup(&key("udp,tp_src=0xab07"), 2, &mut wc), Some(low));
}

/// Subtables that match all of `metadata` and hold no rule for the
/// packet's value are skipped on the partition bitmap: `wc` gets metadata
/// and nothing of theirs (their first stage would have added in_port and
/// reg14). Rules removed and purged leave the partition.
#[test]
fn metadata_partitions_skip_other_datapaths() {
    let mut c: Classifier<&str> = Classifier::new();
    c.insert(m("metadata=1,in_port=1,reg14=3"), 100, "dp1 port", 1);
    let l2 = c.insert(m("metadata=1,dl_dst=00:00:00:00:00:02"), 50, "dp1 l2", 1);
    c.insert(m("metadata=2,ip,nw_dst=10.0.0.0/8"), 90, "dp2 route", 1);
    c.insert(m("metadata=2"), 0, "dp2 next", 1);
    c.insert(m(""), 0, "anything", 1);
    let pkt = "metadata=2,in_port=1,reg14=3,dl_dst=00:00:00:00:00:02,ip,nw_dst=10.1.1.1";
    let mut wc = FlowKey::ZERO;
    assert_eq!(*c.get(c.lookup(&key(pkt), 1, &mut wc).unwrap()).unwrap().2, "dp2 route");
    assert_eq!(wc.metadata(), u64::MAX);
    let regs = loc::REGS[14].get(&wc);
    assert_eq!((wc.in_port(), wc.dl_dst(), regs), (0, 0, 0), "dp1's subtables were not looked into");
    // A datapath with no rules at all still matches the catch-all.
    let mut wc = FlowKey::ZERO;
    let id = c.lookup(&key("metadata=7,in_port=1,reg14=3"), 1, &mut wc).unwrap();
    assert_eq!(*c.get(id).unwrap().2, "anything");
    assert_eq!((wc.metadata(), wc.in_port()), (u64::MAX, 0));
    // dp1's L2 rule goes: its subtable leaves dp1's partition.
    c.remove(l2, 2);
    c.purge(2);
    let mut wc = FlowKey::ZERO;
    let id = c.lookup(&key("metadata=1,dl_dst=00:00:00:00:00:02"), 2, &mut wc).unwrap();
    assert_eq!(*c.get(id).unwrap().2, "anything");
    assert_eq!(wc.dl_dst(), 0);
}

#[test]
fn staged_lookup_stops_at_metadata() {
    let mut c: Classifier<()> = Classifier::new();
    c.insert(m("in_port=1,tcp,nw_dst=10.0.0.0/8,tp_dst=80"), 10, (), 1);
    let mut wc = FlowKey::ZERO;
    assert_eq!(c.lookup(&key("in_port=2,tcp,nw_dst=10.0.0.2,tp_dst=80"), 1, &mut wc), None);
    assert_eq!(wc, only(&[(loc::IN_PORT, u32::MAX as u128)]), "only the metadata stage was read");
}

#[test]
fn priority_order_and_early_exit() {
    let mut c: Classifier<u32> = Classifier::new();
    let hi = c.insert(m("ip"), 100, 1, 1);
    let lo = c.insert(m("tcp,tp_dst=80"), 5, 2, 1);
    let k = key("tcp,tp_dst=80");
    let mut wc = FlowKey::ZERO;
    assert_eq!(c.lookup(&k, 1, &mut wc), Some(hi));
    assert_eq!(wc, only(&[(loc::DL_TYPE, 0xffff)]), "the lower-priority subtable is never visited");
    c.remove(hi, 2);
    let mut wc = FlowKey::ZERO;
    assert_eq!(c.lookup(&k, 2, &mut wc), Some(lo));
    assert_eq!(wc.tp_dst(), 0xffff);
}

#[test]
fn equal_priority_ties_go_to_the_oldest_rule() {
    let mut c: Classifier<()> = Classifier::new();
    let first = c.insert(m("tcp,tp_dst=80"), 7, (), 1);
    let second = c.insert(m("ip,nw_dst=10.0.0.0/8"), 7, (), 1);
    let third = c.insert(m("ip"), 7, (), 1);
    assert!(first < second && second < third);
    let k = key("tcp,nw_dst=10.1.1.1,tp_dst=80");
    assert_eq!(c.lookup(&k, 1, &mut FlowKey::default()), Some(first));
    c.remove(first, 2);
    assert_eq!(c.lookup(&k, 2, &mut FlowKey::default()), Some(second));
    // Same match, same priority: the older is found first too.
    let dup = c.insert(m("ip"), 7, (), 1);
    assert_eq!(c.find_exact(&m("ip"), 7, 1), Some(third));
    c.remove(third, 3);
    assert_eq!(c.find_exact(&m("ip"), 7, 3), Some(dup));
}

#[test]
fn strict_and_loose_find() {
    let mut c: Classifier<()> = Classifier::new();
    let a = c.insert(m("ip,nw_dst=10.0.0.0/8"), 10, (), 1);
    let b = c.insert(m("ip,nw_dst=10.1.0.0/16"), 20, (), 1);
    let x = c.insert(m("arp"), 10, (), 1);
    let d = c.insert(m("tcp,nw_dst=10.1.2.3,tp_dst=22"), 30, (), 1);
    let _e = c.insert(m("tcp,nw_dst=11.1.2.3,tp_dst=22"), 30, (), 1);
    assert_eq!(c.find_exact(&m("ip,nw_dst=10.0.0.0/8"), 10, 1), Some(a));
    assert_eq!(c.find_exact(&m("ip,nw_dst=10.0.0.0/8"), 11, 1), None);
    assert_eq!(c.find_exact(&m("ip,nw_dst=10.0.0.0/16"), 10, 1), None);
    assert_eq!(c.find_exact(&m("ip,nw_dst=10.0.0.0/8"), 10, 0), None, "not visible yet");
    assert_eq!(c.find_loose(&m("ip,nw_dst=10.0.0.0/8"), 1), vec![a, b, d]);
    assert_eq!(c.find_loose(&m("ip,nw_dst=10.1.0.0/16"), 1), vec![b, d]);
    assert_eq!(c.find_loose(&m("ip"), 1).len(), 4);
    assert_eq!(c.find_loose(&m("arp"), 1), vec![x]);
    assert_eq!(c.find_loose(&Match::CATCHALL, 1).len(), 5);
    c.remove(b, 2);
    assert_eq!(c.find_loose(&m("ip,nw_dst=10.1.0.0/16"), 2), vec![d]);
    assert_eq!(c.find_loose(&m("ip,nw_dst=10.1.0.0/16"), 1), vec![b, d], "old version");
}

#[test]
fn versions_hide_changes_until_published() {
    let mut c: Classifier<()> = Classifier::new();
    let a = c.insert(m("ip"), 10, (), 1);
    let k = key("ip");
    let mut wc = FlowKey::ZERO;
    // A batch at version 2: replace a, add c.
    c.remove(a, 2);
    let b = c.insert(m("ip"), 20, (), 2);
    let cc = c.insert(m("arp"), 20, (), 2);
    assert_eq!(c.lookup(&k, 1, &mut wc), Some(a), "old readers see the old rule");
    assert_eq!(c.lookup(&key("arp"), 1, &mut wc), None);
    assert_eq!(c.lookup(&k, 2, &mut wc), Some(b));
    assert_eq!(c.lookup(&key("arp"), 2, &mut wc), Some(cc));
    assert_eq!(c.lookup(&k, 0, &mut wc), None);
    assert_eq!((c.len(1), c.len(2)), (1, 2));
    assert_eq!(c.iter(2).collect::<Vec<_>>(), vec![b, cc]);
    c.purge(1);
    assert!(c.get(a).is_some(), "version 1 may still be read");
    c.purge(2);
    assert!(c.get(a).is_none());
    assert_eq!(c.n_stored(), 2);
    assert_eq!(c.len(2), 2);
}

#[test]
fn purge_drops_empty_subtables_and_keeps_ids_unique() {
    let mut c: Classifier<u8> = Classifier::new();
    let a = c.insert(m("ip,nw_dst=10.0.0.0/8"), 1, 0, 1);
    let b = c.insert(m("tcp,tp_dst=80"), 1, 1, 1);
    assert_eq!(c.n_subtables(), 2);
    c.remove(a, 2);
    c.purge(2);
    assert_eq!(c.n_subtables(), 1);
    let a2 = c.insert(m("ip,nw_dst=10.0.0.0/8"), 1, 2, 3);
    assert!(a2 > b, "ids are never reused");
    assert!(c.get(a).is_none());
    let mut wc = FlowKey::ZERO;
    assert_eq!(c.lookup(&key("ip,nw_dst=10.2.3.4"), 3, &mut wc), Some(a2));
    assert_eq!(wc.nw_dst(), 0xff00_0000);
    *c.get_mut(a2).unwrap().2 = 9;
    assert_eq!(c.get(a2).unwrap().2, &9);
}

#[test]
fn l3_miss_everywhere_reads_no_l4_bits() {
    let mut c: Classifier<()> = Classifier::new();
    c.insert(m("tcp,nw_dst=10.0.0.0/8,tp_dst=80"), 30, (), 1);
    c.insert(m("udp,nw_src=192.168.1.0/24,tp_src=53"), 20, (), 1);
    c.insert(m("tcp,nw_tos=8,tp_dst=22"), 10, (), 1); // L3 not a prefix: no trie.
    c.insert(m("in_port=3,tcp,tp_dst=443"), 40, (), 1);
    let k = key("in_port=1,tcp,nw_src=1.2.3.4,nw_dst=11.0.0.1,nw_tos=4,tp_src=53,tp_dst=80");
    let mut wc = FlowKey::ZERO;
    assert_eq!(c.lookup(&k, 1, &mut wc), None);
    assert_eq!((wc.tp_src(), wc.tp_dst()), (0, 0), "no L4 bits: {wc:?}");
    assert_eq!(wc.in_port(), u32::MAX, "the in_port subtable failed at its metadata stage");
    assert_eq!(wc.nw_dst().leading_ones() + wc.nw_dst().trailing_zeros(), 32, "nw_dst read as a prefix");
    assert!(wc.nw_dst().leading_ones() <= 8);
}

#[test]
fn old_readers_see_removed_rules_until_purged() {
    let mut c: Classifier<()> = Classifier::new();
    let a = c.insert(m("ip,nw_dst=10.0.0.0/8"), 10, (), 1);
    let b = c.insert(m("ip,nw_dst=10.1.0.0/16"), 20, (), 1);
    let k = key("ip,nw_dst=10.1.2.3");
    c.remove(b, 2);
    c.remove(b, 3); // The first removal version is kept.
    assert_eq!(c.versions(b), Some((1, 2)));
    for oldest in [0, 1] {
        c.purge(oldest);
        assert_eq!(c.lookup(&k, 1, &mut FlowKey::default()), Some(b), "reader at 1 after purge({oldest})");
        assert_eq!(c.lookup(&k, 2, &mut FlowKey::default()), Some(a));
        assert_eq!(c.find_exact(&m("ip,nw_dst=10.1.0.0/16"), 20, 1), Some(b));
        assert_eq!(c.find_exact(&m("ip,nw_dst=10.1.0.0/16"), 20, 2), None);
        assert_eq!(c.find_loose(&m("ip"), 1), vec![a, b]);
        assert_eq!(c.find_loose(&m("ip"), 2), vec![a]);
    }
    c.purge(2);
    assert!(c.get(b).is_none());
    assert_eq!(c.lookup(&k, 2, &mut FlowKey::default()), Some(a));
    assert_eq!(c.n_subtables(), 1);
}

#[test]
fn purge_some_frees_in_steps_and_lookups_never_see_the_removed() {
    let mut c: Classifier<u32> = Classifier::new();
    let ids: Vec<_> = (0..1000u32)
        .map(|i| c.insert(m(&format!("tcp,nw_dst=10.0.{}.{},tp_dst=80", i / 256, i % 256)), 5, i, 1))
        .collect();
    let keep = c.insert(m("ip"), 1, 9999, 1);
    for &id in &ids {
        c.remove(id, 2);
    }
    let k = key("tcp,nw_dst=10.0.1.7,tp_dst=80");
    let mut wc = FlowKey::ZERO;
    assert_eq!(c.lookup(&k, 1, &mut wc), Some(ids[263]), "readers at 1 still see it");
    let mut freed = 0;
    let mut steps = 0;
    while c.n_unpurged() > 0 {
        let n = c.purge_some(2, 300);
        assert!(n <= 300);
        freed += n;
        steps += 1;
        // Between steps, readers at 2 see the delete whole.
        assert_eq!(c.lookup(&k, 2, &mut FlowKey::default()), Some(keep));
    }
    assert_eq!((freed, steps, c.n_stored()), (1000, 4, 1));
    assert_eq!(c.lookup(&k, 2, &mut FlowKey::default()), Some(keep));
    // The tables work as before after shrinking.
    let again = c.insert(m("tcp,nw_dst=10.0.1.7,tp_dst=80"), 5, 7, 3);
    assert_eq!(c.lookup(&k, 3, &mut FlowKey::default()), Some(again));
}

/// One subtable growing to 20 keys and shrinking to 2 (its rules stored,
/// freed and their slots reused): every lookup on the way finds the right
/// rule, and the staged megaflows stay as narrow as the stage that decided.
#[test]
fn a_subtable_answers_alike_as_it_grows_and_shrinks() {
    let mut c: Classifier<u32> = Classifier::new();
    let rule = |i: u32| m(&format!("udp,nw_dst=10.0.0.{i},tp_dst=80"));
    let full =
        only(&[(loc::DL_TYPE, 0xffff), (loc::NW_PROTO, 0xff), (loc::NW_DST, 0xffff_ffff), (loc::TP_DST, 0xffff)]);
    let check = |c: &Classifier<u32>, live: &[(u32, u64)]| {
        for i in 1..=24u32 {
            let want = live.iter().find(|&&(j, _)| j == i).map(|&(j, _)| j);
            let mut wc = FlowKey::ZERO;
            let got = c.lookup(&key(&format!("udp,nw_dst=10.0.0.{i},tp_dst=80")), 1000, &mut wc);
            assert_eq!(got.map(|id| *c.get(id).unwrap().2), want, "10.0.0.{i} with {} keys", live.len());
            if want.is_some() {
                assert_eq!(wc, full, "a hit reads the whole mask");
            }
            // The right address, another port: missed at L4, whole mask read.
            let mut wc = FlowKey::ZERO;
            assert_eq!(c.lookup(&key(&format!("udp,nw_dst=10.0.0.{i},tp_dst=81")), 1000, &mut wc), None);
            if want.is_some() {
                assert_eq!(wc, full, "an L4 miss after an L3 hit reads the ports");
            }
        }
        // An address no rule has: missed at L3, so no port bits.
        let mut wc = FlowKey::ZERO;
        assert_eq!(c.lookup(&key("udp,nw_dst=10.0.1.1,tp_dst=80"), 1000, &mut wc), None);
        assert_eq!(wc.w.iter().zip(&only(&[(loc::TP_DST, 0xffff)]).w).map(|(a, b)| a & b).sum::<u64>(), 0);
    };
    let mut live: Vec<(u32, u64)> = Vec::new();
    for i in 1..=20u32 {
        let id = c.insert(rule(i), 10, i, 1);
        live.push((i, id));
        check(&c, &live);
    }
    assert_eq!(c.n_subtables(), 1);
    // Down to two keys, then up again (into freed slots).
    let mut v = 2;
    while live.len() > 2 {
        let (_, id) = live.remove(0);
        c.remove(id, v);
        c.purge(v);
        v += 1;
        check(&c, &live);
    }
    for i in 21..=24u32 {
        let id = c.insert(rule(i), 10, i, 1);
        live.push((i, id));
        check(&c, &live);
    }
}

/// A subtable past the size at which its maps split into shards (and the
/// rule store's id map with it), then mostly emptied: every key is found
/// before and after, and a removed one is not.
#[test]
fn large_subtables_split_their_maps_and_keep_every_rule() {
    let mut c: Classifier<u32> = Classifier::new();
    let addr = |i: u32| format!("10.{}.{}.{}", i >> 16, (i >> 8) & 0xff, i & 0xff);
    let ids: Vec<_> = (0..10_000u32).map(|i| c.insert(m(&format!("ip,nw_dst={}", addr(i))), 10, i, 1)).collect();
    let find = |c: &Classifier<u32>, i: u32| {
        let mut wc = FlowKey::ZERO;
        c.lookup(&key(&format!("ip,nw_dst={}", addr(i))), 10, &mut wc).map(|id| *c.get(id).unwrap().2)
    };
    for i in (0..10_000).step_by(7) {
        assert_eq!(find(&c, i), Some(i));
    }
    for (i, &id) in ids.iter().enumerate() {
        if i % 10 != 0 {
            c.remove(id, 2);
        }
    }
    c.purge(2);
    assert_eq!(c.n_stored(), 1000);
    for i in 0..10_000 {
        assert_eq!(find(&c, i), (i % 10 == 0).then_some(i), "{}", addr(i));
    }
}

/// A lookup memo answers a key that agrees with a remembered one on the
/// bits that answer depended on, and adds the same bits to `wc`; a change
/// to the classifier empties it; so does a lookup at another version.
#[test]
fn memo_answers_agreeing_keys_and_forgets_on_change() {
    let mut c: Classifier<u32> = Classifier::new();
    let a = c.insert(m("in_port=1,metadata=0x5"), 10, 1, 1);
    c.insert(m("in_port=2"), 5, 2, 1);
    c.insert(m("ip,nw_dst=10.0.0.0/8"), 1, 3, 1);
    let mut memo = classifier::Memo::default();
    let k1 = key("in_port=1,metadata=0x5,ip,nw_src=1.1.1.1,nw_dst=192.168.0.1,udp,tp_src=1000");
    let mut wc1 = FlowKey::ZERO;
    assert_eq!(c.lookup_memo(&mut memo, &k1, 1, &mut wc1).map(|x| x.0), Some(a));
    assert_eq!((memo.hits, memo.misses), (0, 1));
    // Other addresses and ports: the answer depended on in_port and
    // metadata only, so the memo gives it, with the same bits.
    let k2 = key("in_port=1,metadata=0x5,ip,nw_src=2.2.2.2,nw_dst=192.168.9.9,udp,tp_src=2000");
    let mut wc2 = FlowKey::ZERO;
    assert_eq!(c.lookup_memo(&mut memo, &k2, 1, &mut wc2).map(|x| x.0), Some(a));
    assert_eq!((memo.hits, memo.misses), (1, 1));
    assert_eq!(wc2, wc1);
    let mut wc_search = FlowKey::ZERO;
    assert_eq!(c.lookup(&k2, 1, &mut wc_search), Some(a));
    assert_eq!(wc2, wc_search, "the same bits as the search");
    // A rule added (at a later version) changes the classifier: the memo
    // is emptied and searches again.
    let b = c.insert(m("in_port=1,metadata=0x5,ip"), 20, 4, 2);
    assert_eq!(c.lookup_memo(&mut memo, &k2, 1, &mut FlowKey::default()).map(|x| x.0), Some(a));
    assert_eq!(memo.misses, 2);
    assert_eq!(c.lookup_memo(&mut memo, &k2, 2, &mut FlowKey::default()).map(|x| x.0), Some(b));
    assert_eq!(memo.misses, 3, "another version: searched, not remembered");
    assert_eq!(c.lookup_memo(&mut memo, &k1, 2, &mut FlowKey::default()).map(|x| x.0), Some(b));
    assert_eq!(memo.hits, 2);
    // No rule is an answer too.
    let k3 = key("in_port=7,arp");
    assert_eq!(c.lookup_memo(&mut memo, &k3, 2, &mut FlowKey::default()), None);
    assert_eq!(c.lookup_memo(&mut memo, &k3, 2, &mut FlowKey::default()), None);
    assert_eq!(memo.hits, 3);
    // A purge that frees nothing keeps the memo (an owner may purge
    // often); removing the answer's rule and freeing it makes the memo
    // search again.
    c.purge(2);
    assert_eq!(c.lookup_memo(&mut memo, &k1, 2, &mut FlowKey::default()).map(|x| x.0), Some(b));
    assert_eq!(memo.hits, 4);
    c.remove(a, 2);
    c.purge(2);
    assert_eq!(c.lookup_memo(&mut memo, &k1, 2, &mut FlowKey::default()).map(|x| x.0), Some(b));
    assert_eq!((memo.hits, memo.misses), (4, 5));
}
