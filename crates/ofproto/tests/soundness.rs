//! Megaflow soundness of translation.
//!
//! Plan: build random multi-table rule sets (prefixes, masks, equal
//! priorities, goto_table, resubmit, set_field, VLAN push/pop, dec_ttl,
//! NORMAL) and random packets derived from the rules. Translate a packet,
//! then translate random packets that agree with it on the megaflow mask.
//! Verified: every one of them gets exactly the same datapath actions, so
//! caching the (mask, actions) pair can never change forwarding. A second
//! property checks that known-narrow cases stay narrow.

use flow::key::{ethertype, ipproto, FlowKey, WORDS};
use ofproto::{parse_flow, FlowModCmd, Need, Ofproto, PortConfig, VlanMode};
use proptest::prelude::*;

const MACS: [u64; 4] = [0x0200_0000_0001, 0x0200_0000_0002, 0x0200_0000_0003, 0xffff_ffff_ffff];

fn ip(a: u32) -> String {
    std::net::Ipv4Addr::from(a).to_string()
}

/// A random match clause, as ovs-ofctl text.
fn arb_match() -> impl Strategy<Value = String> {
    let l2 = prop_oneof![
        Just(String::new()),
        (1u32..5).prop_map(|p| format!("in_port={p},")),
        (0usize..3).prop_map(|i| format!("dl_dst={},", flow::key::fmt_mac(MACS[i]))),
        (0usize..3).prop_map(|i| format!("dl_src={},", flow::key::fmt_mac(MACS[i]))),
        (1u16..4).prop_map(|v| format!("dl_vlan={v},")),
        Just("metadata=0x1/0x1,".to_string()),
    ];
    let l3 = prop_oneof![
        Just(String::new()),
        Just("arp,".to_string()),
        (0u32..4, 0u32..=32).prop_map(|(n, p)| format!("ip,nw_dst={}/{p},", ip(0x0a00_0000 | (n << 16)))),
        (0u32..4, 8u32..=32).prop_map(|(n, p)| format!("ip,nw_src={}/{p},", ip(0xc0a8_0000 | (n << 8)))),
        (0u32..4, any::<u32>()).prop_map(|(n, m)| format!(
            "ip,nw_dst={}/{},",
            ip(0x0a00_0000 | n),
            ip(m | 0xff00_0000)
        ))
    ];
    let l4 = prop_oneof![
        Just(String::new()),
        (1u16..4).prop_map(|p| format!("tcp,tp_dst={p},")),
        (1u16..4).prop_map(|p| format!("udp,tp_src={p},")),
        (0u16..4, any::<u16>()).prop_map(|(p, m)| format!("tcp,tp_src={p}/{m:#x},")),
        Just("icmp,".to_string()),
    ];
    (l2, l3, l4).prop_map(|(a, b, c)| {
        // An L4 clause brings its own IP shorthand; drop a conflicting arp.
        let b = if !c.is_empty() && b.starts_with("arp") { String::new() } else { b };
        let b = if !c.is_empty() { b.replacen("ip,", "", 1) } else { b };
        format!("{a}{c}{b}")
    })
}

fn arb_actions(table: u8) -> impl Strategy<Value = String> {
    let one = prop_oneof![
        (1u32..5).prop_map(|p| format!("output:{p}")),
        Just("NORMAL".to_string()),
        Just("FLOOD".to_string()),
        Just("IN_PORT".to_string()),
        Just("controller(max_len=64)".to_string()),
        Just("mod_vlan_vid:7".to_string()),
        Just("push_vlan:0x8100".to_string()),
        Just("strip_vlan".to_string()),
        Just("dec_ttl".to_string()),
        (0u8..3).prop_map(|t| format!("resubmit(,{})", t + 1)),
        Just("set_field:0x2->metadata".to_string()),
    ];
    let tail = prop_oneof![
        Just(String::new()),
        Just(format!(",goto_table:{}", table + 1)),
        Just(",write_actions(output:3)".to_string()),
        Just(",write_metadata:0x1/0x1".to_string()),
    ];
    (prop::collection::vec(one, 0..3), tail).prop_map(|(v, t)| {
        let s = v.join(",");
        if s.is_empty() && t.is_empty() {
            "drop".into()
        } else if s.is_empty() {
            t.trim_start_matches(',').to_string()
        } else {
            format!("{s}{t}")
        }
    })
}

fn arb_rule() -> impl Strategy<Value = String> {
    (0u8..3)
        .prop_flat_map(|t| (Just(t), 0u32..4, arb_match(), arb_actions(t)))
        .prop_map(|(t, prio, m, a)| format!("table={t},priority={},{m}actions={a}", prio * 10))
}

/// A random packet key with fields drawn near the rule values.
fn arb_packet() -> impl Strategy<Value = FlowKey> {
    (1u32..5, 0usize..4, 0usize..4, 0u16..4, 0u8..4, any::<u32>(), 0u32..4, 0u32..8, 0u16..5, 0u16..5, 0u8..3).prop_map(
        |(in_port, s, d, vlan, proto, rnd, net, host, sp, dp, ttl)| {
            let mut k = FlowKey::ZERO;
            k.set_in_port(in_port);
            k.set_dl_src(MACS[s]);
            k.set_dl_dst(MACS[d]);
            if vlan != 0 {
                k.set_vlan_tci(0x1000 | vlan);
            }
            match proto {
                0 => {
                    k.set_dl_type(ethertype::ARP);
                    k.set_nw_proto(1);
                    k.set_nw_src(0x0a00_0001 + host);
                    k.set_nw_dst(0x0a00_0002);
                }
                _ => {
                    k.set_dl_type(ethertype::IPV4);
                    k.set_nw_proto([ipproto::TCP, ipproto::UDP, ipproto::ICMP][(proto - 1) as usize]);
                    k.set_nw_dst(if rnd & 1 == 0 { 0x0a00_0000 | (net << 16) | host } else { rnd });
                    k.set_nw_src(0xc0a8_0000 | (net << 8) | host);
                    k.set_nw_ttl(ttl);
                    k.set_tp_src(sp);
                    k.set_tp_dst(dp);
                }
            }
            k
        },
    )
}

fn bridge(rules: &[String], vlan_ports: bool) -> Option<Ofproto> {
    let mut of = Ofproto::new("br0");
    for p in 1..=4 {
        let mut pc = PortConfig::new(p, &format!("p{p}"));
        if vlan_ports && p == 2 {
            pc.vlan = VlanMode::Access(7);
        }
        if vlan_ports && p == 3 {
            pc.vlan = VlanMode::Trunk(vec![0, 1, 7]);
        }
        of.add_port(pc);
    }
    for r in rules {
        let spec = parse_flow(r, Need::Actions).unwrap_or_else(|e| panic!("generated rule {r}: {e}"));
        // Rules the bridge refuses (e.g. set_field without prerequisites)
        // are simply not part of this rule set.
        let _ = of.flow_mod(FlowModCmd::Add, &spec);
    }
    Some(of)
}

/// A key agreeing with `k` on `mask`, random elsewhere.
fn perturb(k: &FlowKey, mask: &FlowKey, noise: &[u64; WORDS]) -> FlowKey {
    let mut out = *k;
    for i in 0..WORDS {
        out.w[i] = (k.w[i] & mask.w[i]) | (noise[i] & !mask.w[i]);
    }
    out
}

/// Noise that keeps perturbed keys realistic: only fields packets carry.
fn arb_noise() -> impl Strategy<Value = [u64; WORDS]> {
    prop::array::uniform20(any::<u64>()).prop_map(|mut n| {
        let mut keep = FlowKey::ZERO;
        for f in ["in_port", "dl_src", "dl_dst", "vlan_tci", "nw_src", "nw_dst", "nw_ttl", "tp_src", "tp_dst", "nw_tos"]
        {
            let fd = flow::fields::by_name(f).unwrap();
            fd.set(&mut keep, fd.loc.max());
        }
        for i in 0..WORDS {
            n[i] &= keep.w[i];
        }
        // Small port numbers so perturbed packets hit real ports too.
        let mut k = FlowKey { w: n };
        k.set_in_port(1 + k.in_port() % 4);
        k.set_vlan_tci(if k.vlan_tci() & 1 == 0 { 0 } else { 0x1000 | (k.vlan_tci() % 4) });
        k.w
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn translation_is_sound_for_its_megaflow(
        rules in prop::collection::vec(arb_rule(), 1..25),
        pkts in prop::collection::vec(arb_packet(), 1..8),
        noises in prop::collection::vec(arb_noise(), 8),
        vlan_ports in any::<bool>(),
    ) {
        let Some(of) = bridge(&rules, vlan_ports) else { return Ok(()) };
        for k in &pkts {
            // Learning settles after one translation; use the settled one.
            let _ = of.translate_key(k, 0);
            let t = of.translate_key(k, 0);
            for n in &noises {
                let k2 = perturb(k, &t.mask, n);
                // Settle k2's own learning the same way (it agrees with k on
                // everything NORMAL consulted, so it learns nothing new).
                let t2 = of.translate_key(&k2, 0);
                prop_assert_eq!(&t2.actions, &t.actions,
                    "rules {:#?}\npacket {:?}\nmask {:?}\nother {:?}", rules, k, t.mask, k2);
            }
        }
    }
}

fn trace_one(rules: &[&str], pkt: &str) -> (String, String) {
    let rules: Vec<String> = rules.iter().map(|s| s.to_string()).collect();
    let of = bridge(&rules, false).unwrap();
    let k = flow::Match::parse(pkt).unwrap().key;
    let t = of.translate_key(&k, 0);
    (flow::Match::new(k, t.mask).to_string(), dpif::format_actions(&t.actions))
}

#[test]
fn prefix_rules_give_a_slash_8_megaflow() {
    let (mf, acts) = trace_one(
        &["priority=10,ip,nw_dst=10.0.0.0/8,actions=output:1", "priority=10,ip,nw_dst=192.168.0.0/24,actions=output:2"],
        "in_port=3,udp,nw_src=1.1.1.1,nw_dst=10.1.2.3,tp_src=5,tp_dst=6",
    );
    assert!(mf.contains("nw_dst=10.0.0.0/8"), "{mf}");
    assert!(!mf.contains("nw_src") && !mf.contains("tp_") && !mf.contains("udp"), "{mf}");
    assert_eq!(acts, "1");
}

#[test]
fn normal_megaflow_has_no_l3_l4() {
    let (mf, acts) = trace_one(
        &["priority=0,actions=NORMAL"],
        "in_port=1,dl_src=02:00:00:00:00:01,dl_dst=02:00:00:00:00:02,tcp,nw_src=10.0.0.1,nw_dst=10.0.0.2,tp_src=1,tp_dst=80",
    );
    assert!(mf.contains("dl_src=02:00:00:00:00:01") && mf.contains("dl_dst=02:00:00:00:00:02"), "{mf}");
    assert!(!mf.contains("nw_") && !mf.contains("tp_") && !mf.contains("tcp") && !mf.contains("ip"), "{mf}");
    // Unknown destination: flood to the other ports.
    assert_eq!(acts, "2,3,4");
}

#[test]
fn normal_learns_then_forwards_and_vlans_translate() {
    let mut of = Ofproto::new("br0");
    let mut p1 = PortConfig::new(1, "p1");
    p1.vlan = VlanMode::Access(10);
    let p2 = PortConfig::new(2, "p2"); // trunk
    let mut p3 = PortConfig::new(3, "p3");
    p3.vlan = VlanMode::Access(20);
    of.add_port(p1);
    of.add_port(p2);
    of.add_port(p3);
    of.flow_mod(FlowModCmd::Add, &parse_flow("priority=0,actions=NORMAL", Need::Actions).unwrap()).unwrap();
    let a = "dl_src=02:00:00:00:00:0a";
    let b = "dl_src=02:00:00:00:00:0b";
    // B on the trunk in VLAN 10 talks to A (unknown): flooded only to VLAN 10 members, untagged on p1.
    let k = flow::Match::parse(&format!("in_port=2,{b},dl_dst=02:00:00:00:00:0a,dl_vlan=10")).unwrap().key;
    assert_eq!(dpif::format_actions(&of.translate_key(&k, 0).actions), "pop_vlan,1");
    // A answers from the access port: B is known on p2, so the frame is tagged 10 toward the trunk.
    let k = flow::Match::parse(&format!("in_port=1,{a},dl_dst=02:00:00:00:00:0b")).unwrap().key;
    assert_eq!(dpif::format_actions(&of.translate_key(&k, 0).actions), "push_vlan(vid=10,pcp=0),2");
    // A tagged frame on an access port is dropped.
    let k = flow::Match::parse(&format!("in_port=3,{a},dl_dst=02:00:00:00:00:0b,dl_vlan=20")).unwrap().key;
    assert_eq!(dpif::format_actions(&of.translate_key(&k, 0).actions), "drop");
    assert_eq!(of.mac_table().len(), 2);
}

#[test]
fn goto_set_field_and_write_actions() {
    let (_, acts) = trace_one(
        &[
            "table=0,priority=5,ip,actions=mod_nw_tos:32,goto_table:1",
            "table=1,priority=5,ip,nw_tos=32,actions=write_actions(output:4),dec_ttl",
        ],
        "in_port=1,udp,nw_src=1.1.1.1,nw_dst=2.2.2.2,nw_ttl=64",
    );
    assert_eq!(acts, "set(ipv4(tos=0x20/0xfc,ttl=63)),4");
}

#[test]
fn rule_changes_bump_generation_and_are_versioned() {
    let mut of = Ofproto::new("br0");
    let g0 = of.generation();
    let v0 = of.version();
    of.flow_mod(FlowModCmd::Add, &parse_flow("ip,actions=output:1", Need::Actions).unwrap()).unwrap();
    assert!(of.generation() > g0 && of.version() > v0);
    let n = of.flow_mod(FlowModCmd::Delete, &parse_flow("ip", Need::NoActions).unwrap()).unwrap();
    assert_eq!(n, 1);
    assert_eq!(of.n_rules(), 0);
}
