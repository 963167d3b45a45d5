//! Megaflow soundness of translation.
//!
//! Plan: build random multi-table rule sets (prefixes, masks, equal
//! priorities, goto_table, resubmit, set_field, VLAN push/pop, dec_ttl,
//! NORMAL) and random packets derived from the rules. Translate a packet,
//! then translate random packets that agree with it on the megaflow mask.
//! Verified: every one of them gets exactly the same datapath actions, so
//! caching the (mask, actions) pair can never change forwarding. A second
//! property checks that known-narrow cases stay narrow.

use ofproto::{parse_flow, FlowModCmd, Need, Ofproto, PortConfig, VlanMode};
use proptest::prelude::*;

mod common;
use common::*;

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

/// A bridge with `rules` (ports 1-4, no VLAN ports).
fn bridge_of(rules: &[&str]) -> ofproto::Ofproto {
    let rules: Vec<String> = rules.iter().map(|s| s.to_string()).collect();
    bridge(&rules, false).unwrap()
}

/// The recirculation a translation ends in, if any.
fn recirc_id(t: &dpif::Translation) -> Option<u32> {
    t.actions.iter().find_map(|a| if let dpif::DpAction::Recirc(id) = a { Some(*id) } else { None })
}

fn trace_one(rules: &[&str], pkt: &str) -> (String, String) {
    let of = bridge_of(rules);
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

/// Header changes after the last output, and a `ct_clear` with no `ct`
/// since the one before, are left out of the megaflow's actions (OVN's
/// clones restore their fields after the clone's output); a change before
/// an output, and a `ct_clear` after a `ct`, stay.
#[test]
fn dead_actions_are_left_out() {
    let (_, acts) = trace_one(
        &["priority=5,ip,actions=ct_clear,ct_clear,mod_dl_src:00:00:00:00:00:09,ct_clear,output:2,mod_nw_tos:32,ct_clear"],
        "in_port=1,udp,nw_src=1.1.1.1,nw_dst=2.2.2.2,nw_ttl=64",
    );
    assert_eq!(acts, "ct_clear,set(eth(src=00:00:00:00:00:09)),2");
    let (_, acts) = trace_one(
        &["priority=5,ip,actions=clone(mod_dl_dst:00:00:00:00:00:07,output:3),output:2"],
        "in_port=1,udp,nw_src=1.1.1.1,nw_dst=2.2.2.2,nw_ttl=64",
    );
    assert!(acts.ends_with(",2"), "the clone's restore runs before output:2: {acts}");
    let (_, acts) = trace_one(&["priority=5,ip,actions=mod_nw_tos:32"], "in_port=1,ip,nw_src=1.1.1.1,nw_dst=2.2.2.2");
    assert_eq!(acts, "drop");
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

/// Registers are translation state: a load and a later match on it send
/// the packet on without any datapath action for the register, a move
/// from a packet field makes exactly the bits read exact in the megaflow,
/// and output:reg outputs to the port the register holds.
#[test]
fn registers_move_and_output_reg() {
    let (mask, acts) = trace_one(
        &[
            "table=0,priority=5,actions=load:2->reg1[0..15],set_field:0x5->metadata,resubmit(,1)",
            "table=1,priority=5,reg1=2,metadata=5,actions=output:reg1[0..15]",
        ],
        "in_port=1,udp,nw_src=1.1.1.1,nw_dst=2.2.2.2,nw_ttl=64",
    );
    assert_eq!(acts, "2");
    // Registers are zero in every packet the datapath sees; the megaflow
    // may name them, but no packet field.
    assert!(!mask.contains("nw_") && !mask.contains("dl_"), "{mask}");

    let (mask, acts) = trace_one(
        &["table=0,priority=5,actions=move:eth_src[0..7]->reg0[8..15],move:reg0[8..15]->eth_dst[40..47],output:2"],
        "in_port=1,dl_src=00:00:00:00:00:77,dl_dst=00:00:00:00:00:01,udp,nw_src=1.1.1.1",
    );
    // The low byte of dl_src was read (exact), and dl_dst is written from it.
    assert!(mask.contains("dl_src=00:00:00:00:00:77/00:00:00:00:00:ff"), "{mask}");
    assert!(!mask.contains("dl_dst"), "{mask}");
    assert_eq!(acts, "set(eth(dst=77:00:00:00:00:00/ff:00:00:00:00:00)),2");

    // A move into ip_dst needs ip in the match: refused as OVS refuses it.
    let mut of = Ofproto::new("br0");
    let spec = parse_flow("actions=move:reg0[]->ip_dst[]", Need::Actions).unwrap();
    assert!(matches!(of.flow_mod(FlowModCmd::Add, &spec), Err(ofproto::FlowModError::MatchInconsistent(_))));
}

/// ct(table=N) freezes registers and metadata with the recirculation id:
/// the recirculated packet (which carries only the id) sees them again, and
/// a different frozen state gets a different id.
#[test]
fn registers_survive_recirculation() {
    let of = bridge_of(&[
        "table=0,priority=5,in_port=1,ip,actions=load:7->reg0[],set_field:0x5->metadata,ct(table=1)",
        "table=0,priority=5,in_port=3,ip,actions=load:8->reg0[],set_field:0x5->metadata,ct(table=1)",
        "table=1,priority=5,reg0=7,metadata=5,actions=output:2",
        "table=1,priority=4,actions=drop",
    ]);
    let recirc = |port: u32| {
        let k = flow::Match::parse(&format!("in_port={port},udp,nw_src=1.1.1.1,nw_dst=2.2.2.2")).unwrap().key;
        let t = of.translate_key(&k, 0);
        let id = recirc_id(&t);
        (k, id.expect("ct(table=1) recirculates"))
    };
    let (mut k, id) = recirc(1);
    let (mut k3, id3) = recirc(3);
    assert_ne!(id, id3, "different registers, different frozen state");
    // The datapath's key after the tracker: registers zero, the id set.
    k.set_recirc_id(id);
    let t = of.translate_key(&k, 0);
    assert_eq!(dpif::format_actions(&t.actions), "2");
    k3.set_recirc_id(id3);
    let t3 = of.translate_key(&k3, 0);
    assert_eq!(dpif::format_actions(&t3.actions), "drop");
}

/// pop_mpls, then a resubmit in the middle of the rule: the lookup must see
/// the popped frame's IP fields, which only the datapath parses. The walk
/// freezes the resubmit and the rest of the rule into the recirculation (as
/// Open vSwitch does); the second pass, on the parsed frame, runs them:
/// table 2 matches nw_dst and sets reg0, and the rest of the rule, after the
/// resubmit, sees reg0 and outputs.
#[test]
fn mid_rule_resubmit_after_pop_mpls_runs_the_rest_on_the_popped_frame() {
    use dpif::DpAction;
    let of = bridge_of(&[
        "table=0,priority=5,mpls,actions=pop_mpls:0x0800,resubmit(,2),resubmit(,3),load:1->reg1[]",
        "table=2,priority=5,ip,nw_dst=10.0.0.2,actions=load:7->reg0[]",
        "table=3,priority=5,reg0=7,actions=output:2",
        "table=3,priority=4,actions=output:3",
    ]);
    let k = flow::Match::parse("in_port=1,mpls,mpls_label=100,mpls_ttl=64").unwrap().key;
    let t = of.translate_key(&k, 0);
    let acts = dpif::format_actions(&t.actions);
    let id = recirc_id(&t);
    let id = id.unwrap_or_else(|| panic!("the popped frame recirculates: {acts}"));
    assert!(acts.starts_with("pop_mpls(eth_type=0x800)"), "{acts}");
    assert!(!acts.contains(",2") && !acts.contains(",3"), "nothing is output before the second pass: {acts}");

    // The second pass: the datapath parsed the popped frame.
    let mut k2 = flow::Match::parse("in_port=1,udp,nw_src=10.0.0.1,nw_dst=10.0.0.2").unwrap().key;
    k2.set_recirc_id(id);
    let t2 = of.translate_key(&k2, 0);
    assert_eq!(dpif::format_actions(&t2.actions), "2", "table 2 saw nw_dst; the rest of the rule ran after it");
    let mut k3 = flow::Match::parse("in_port=1,udp,nw_src=10.0.0.1,nw_dst=10.0.0.9").unwrap().key;
    k3.set_recirc_id(id);
    assert_eq!(dpif::format_actions(&of.translate_key(&k3, 0).actions), "3");

    // The same frozen actions, the same id (megaflows stay shared).
    let t4 = of.translate_key(&k, 0);
    assert!(t4.actions.contains(&DpAction::Recirc(id)), "{}", dpif::format_actions(&t4.actions));
}

/// The push/pop stack travels with a frozen walk: a value pushed before a
/// mid-rule lookup after pop_mpls is popped on the second pass. A lookup
/// after pop_mpls inside a clone freezes the clone's rest only, and
/// (as in Open vSwitch 3.1) nothing after the clone runs in either pass.
#[test]
fn stack_and_clone_rest_survive_a_frozen_walk() {
    let of = bridge_of(&[
        "table=0,priority=5,mpls,actions=load:9->reg4[],push:reg4[0..7],load:0->reg4[],pop_mpls:0x0800,resubmit(,2),pop:reg5[],resubmit(,3)",
        "table=2,priority=5,ip,actions=load:1->reg0[]",
        "table=3,priority=5,reg0=1,reg5=9,actions=output:2",
        "table=3,priority=4,actions=output:3",
        "table=1,priority=5,mpls,actions=clone(pop_mpls:0x0800,resubmit(,2),resubmit(,3)),output:4",
    ]);
    let k = flow::Match::parse("in_port=1,mpls,mpls_label=100,mpls_ttl=64").unwrap().key;
    let t = of.translate_key(&k, 0);
    let id = recirc_id(&t).unwrap_or_else(|| panic!("recirculates: {}", dpif::format_actions(&t.actions)));
    let mut k2 = flow::Match::parse("in_port=1,udp,nw_src=10.0.0.1,nw_dst=10.0.0.2").unwrap().key;
    k2.set_recirc_id(id);
    assert_eq!(dpif::format_actions(&of.translate_key(&k2, 0).actions), "2", "reg5 came back from the stack");

    // The clone: the first pass recirculates from inside it, and output:4
    // after the clone runs in neither pass.
    let of1 = bridge_of(&[
        "table=0,priority=5,mpls,actions=clone(pop_mpls:0x0800,resubmit(,2),resubmit(,3)),output:4",
        "table=2,priority=5,ip,actions=load:1->reg0[]",
        "table=3,priority=5,reg0=1,actions=output:2",
        "table=3,priority=4,actions=output:3",
    ]);
    let t = of1.translate_key(&k, 0);
    let acts = dpif::format_actions(&t.actions);
    let id = recirc_id(&t).unwrap_or_else(|| panic!("the clone recirculates: {acts}"));
    assert!(!acts.split(',').any(|a| a == "4"), "nothing after the clone: {acts}");
    let mut k3 = flow::Match::parse("in_port=1,udp,nw_src=10.0.0.1,nw_dst=10.0.0.2").unwrap().key;
    k3.set_recirc_id(id);
    assert_eq!(
        dpif::format_actions(&of1.translate_key(&k3, 0).actions),
        "2",
        "the clone's rest ran on the popped frame"
    );
}

/// clone runs its actions on a copy: its writes (packet fields and
/// registers alike) do not reach what follows it. push/pop move values
/// through the stack; the bits pushed are exact in the megaflow.
#[test]
fn clone_and_stack() {
    let (_, acts) = trace_one(
        &[
            "table=0,priority=5,actions=load:3->reg0[],clone(load:2->reg0[],mod_dl_dst:00:00:00:00:00:09,resubmit(,1)),resubmit(,1)",
            "table=1,priority=5,reg0=2,actions=output:2",
            "table=1,priority=5,reg0=3,actions=output:3",
        ],
        "in_port=1,dl_dst=00:00:00:00:00:01,udp,nw_src=1.1.1.1",
    );
    assert_eq!(acts, "set(eth(dst=00:00:00:00:00:09)),2,set(eth(dst=00:00:00:00:00:01)),3");

    let (mask, acts) = trace_one(
        &["table=0,priority=5,actions=push:eth_src[0..7],pop:reg2[8..15],push:reg2[8..15],pop:eth_dst[0..7],output:2"],
        "in_port=1,dl_src=00:00:00:00:00:42,dl_dst=00:00:00:00:00:01,udp,nw_src=1.1.1.1",
    );
    assert!(mask.contains("dl_src=00:00:00:00:00:42/00:00:00:00:00:ff"), "{mask}");
    assert_eq!(acts, "set(eth(dst=00:00:00:00:00:42/00:00:00:00:00:ff)),2");
}

/// in_port is writable, as in OVS: OVN clears it so that a packet may
/// leave by the port it came in on. The write changes only the
/// translation (no datapath action), and output to the original port
/// then happens.
#[test]
fn in_port_write_allows_hairpin() {
    let (_, acts) = trace_one(
        &["table=0,priority=5,in_port=1,actions=output:1,load:0->NXM_OF_IN_PORT[],output:1"],
        "in_port=1,udp,nw_src=1.1.1.1",
    );
    assert_eq!(acts, "1");
}
