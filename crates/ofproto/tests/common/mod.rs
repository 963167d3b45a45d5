//! Random rule sets and packets shared by the property tests.
#![allow(dead_code)] // reason: each test binary uses a different part

use flow::key::{ethertype, ipproto, FlowKey, WORDS};
use ofproto::{parse_flow, FlowModCmd, Need, Ofproto, PortConfig, VlanMode};
use proptest::prelude::*;

pub const MACS: [u64; 4] = [0x0200_0000_0001, 0x0200_0000_0002, 0x0200_0000_0003, 0xffff_ffff_ffff];

pub fn ip(a: u32) -> String {
    std::net::Ipv4Addr::from(a).to_string()
}

/// A random match clause, as ovs-ofctl text.
pub fn arb_match() -> impl Strategy<Value = String> {
    let l2 = prop_oneof![
        Just(String::new()),
        (1u32..5).prop_map(|p| format!("in_port={p},")),
        (0usize..3).prop_map(|i| format!("dl_dst={},", flow::key::fmt_mac(MACS[i]))),
        (0usize..3).prop_map(|i| format!("dl_src={},", flow::key::fmt_mac(MACS[i]))),
        (1u16..4).prop_map(|v| format!("dl_vlan={v},")),
        Just("metadata=0x1/0x1,".to_string()),
        (0u32..4).prop_map(|v| format!("reg0={v}/0x3,")),
        (0u32..8).prop_map(|v| format!("reg1={v:#x}/0x1c,")),
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

pub fn arb_actions(table: u8) -> impl Strategy<Value = String> {
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
        // Groups 1 (all), 2 (select), 3 (fast_failover), made by `bridge`.
        (1u32..4).prop_map(|g| format!("group:{g}")),
        // Registers: constants, bits copied from the packet, an output
        // through a register (ports 0-7: some exist, some do not).
        (0u8..4).prop_map(|v| format!("load:{v}->reg0[0..1]")),
        Just("move:eth_src[0..2]->reg1[2..4]".to_string()),
        Just("move:reg0[0..1]->reg1[2..3]".to_string()),
        Just("output:reg1[2..4]".to_string()),
        Just("move:reg1[2..4]->eth_dst[0..2]".to_string()),
        Just("push:eth_src[0..2]".to_string()),
        Just("pop:reg1[2..4]".to_string()),
        Just("clone(load:1->reg0[0..1],mod_vlan_vid:9,output:2)".to_string()),
        Just("clone(move:eth_src[0..1]->reg1[2..3],output:reg1[2..4])".to_string()),
        Just("set_field:0x3->pkt_mark".to_string()),
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

pub fn arb_rule() -> impl Strategy<Value = String> {
    (0u8..3)
        .prop_flat_map(|t| (Just(t), 0u32..4, arb_match(), arb_actions(t)))
        .prop_map(|(t, prio, m, a)| format!("table={t},priority={},{m}actions={a}", prio * 10))
}

/// A random packet key with fields drawn near the rule values.
pub fn arb_packet() -> impl Strategy<Value = FlowKey> {
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

pub fn bridge(rules: &[String], vlan_ports: bool) -> Option<Ofproto> {
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
    for g in [
        "group_id=1,type=all,bucket=output:1,bucket=mod_vlan_vid:5,output:2,bucket=dec_ttl,output:4",
        "group_id=2,type=select,bucket=weight:1,output:3,bucket=weight:3,actions=set_field:10.9.9.9->nw_dst,output:4",
        "group_id=3,type=ff,bucket=watch_port:1,output:1,bucket=watch_port:2,output:2",
    ] {
        of.group_mod(ofproto::group::ModCmd::Add, ofproto::group::parse_group(g, 0).unwrap()).unwrap();
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
pub fn perturb(k: &FlowKey, mask: &FlowKey, noise: &[u64; WORDS]) -> FlowKey {
    let mut out = *k;
    for i in 0..WORDS {
        out.w[i] = (k.w[i] & mask.w[i]) | (noise[i] & !mask.w[i]);
    }
    out
}

/// Noise that keeps perturbed keys realistic: only fields packets carry.
pub fn arb_noise() -> impl Strategy<Value = [u64; WORDS]> {
    prop::collection::vec(any::<u64>(), WORDS).prop_map(|v| {
        let mut n = [0u64; WORDS];
        n.copy_from_slice(&v);
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
