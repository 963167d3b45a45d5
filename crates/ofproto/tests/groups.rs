//! Groups and meters through translation and the cached fast path.
//!
//! Plan: a bridge with four ports, groups and meters added through the
//! same API the OpenFlow layer uses, packets as flow keys (and as bytes for
//! meters). Verified: select spreads distinct flows over buckets by
//! weight and keeps a flow on one bucket; fast_failover follows port
//! liveness even for cached megaflows; all-group buckets do not leak field
//! writes; meters drop over-rate packets in the datapath; deleting a group
//! or meter deletes its rules; references to missing ones are refused.

use dpif::{DpAction, Pmd, PmdConfig, Upcall};
use flow::key::{ethertype, ipproto, FlowKey};
use ofproto::group::{parse_group, parse_meter, ModCmd};
use ofproto::{parse_flow, FlowModCmd, FlowModError, Need, Ofproto, PortConfig};

fn bridge() -> Ofproto {
    let mut of = Ofproto::new("g");
    for p in 1..=4 {
        of.add_port(PortConfig::new(p, &format!("p{p}")));
    }
    of
}

fn add(of: &mut Ofproto, r: &str) -> Result<usize, FlowModError> {
    of.flow_mod(FlowModCmd::Add, &parse_flow(r, Need::Actions).unwrap())
}

fn udp(i: u32) -> FlowKey {
    let mut k = FlowKey::ZERO;
    k.set_in_port(1);
    k.set_dl_src(0x0200_0000_0001);
    k.set_dl_dst(0x0200_0000_0002);
    k.set_dl_type(ethertype::IPV4);
    k.set_nw_proto(ipproto::UDP);
    k.set_nw_src(0x0a00_0001);
    k.set_nw_dst(0x0a00_0002);
    k.set_nw_ttl(64);
    k.set_tp_src(1000 + (i % 60000) as u16);
    k.set_tp_dst(53);
    k
}

fn outputs(a: &[DpAction]) -> Vec<u32> {
    a.iter().filter_map(|x| if let DpAction::Output(p) = x { Some(*p) } else { None }).collect()
}

#[test]
fn select_spreads_flows_by_weight_and_keeps_each_flow_on_one_bucket() {
    let mut of = bridge();
    of.group_mod(
        ModCmd::Add,
        parse_group("group_id=1,type=select,bucket=weight:1,output:2,bucket=weight:3,output:3", 0).unwrap(),
    )
    .unwrap();
    add(&mut of, "in_port=1,actions=group:1").unwrap();
    let (mut to2, mut to3) = (0, 0);
    for i in 0..4000 {
        let t = of.translate_key(&udp(i), 0);
        match outputs(&t.actions).as_slice() {
            [2] => to2 += 1,
            [3] => to3 += 1,
            o => panic!("one bucket per packet, got {o:?}"),
        }
        // The megaflow pins the hashed L4 ports: another flow with the
        // same 5-tuple gets the same bucket.
        assert_eq!(t.mask.tp_src(), 0xffff);
        assert_eq!(of.translate_key(&udp(i), 0).actions, t.actions);
    }
    let share = to3 as f64 / 4000.0;
    assert!((0.70..0.80).contains(&share), "weight 3 of 4 gets ~75%: {to2} / {to3}");
}

/// ARP requests from many senders for many targets (same MACs, as behind
/// a router) must spread over a select group's buckets, and both
/// directions of one exchange must pick the same bucket.
#[test]
fn select_spreads_arp_by_protocol_addresses() {
    let mut of = bridge();
    of.group_mod(ModCmd::Add, parse_group("group_id=2,type=select,bucket=output:2,bucket=output:3", 0).unwrap())
        .unwrap();
    add(&mut of, "in_port=1,actions=group:2").unwrap();
    let arp = |spa: u32, tpa: u32| {
        let mut k = FlowKey::ZERO;
        k.set_in_port(1);
        k.set_dl_src(0x0200_0000_0001);
        k.set_dl_dst(0xffff_ffff_ffff);
        k.set_dl_type(ethertype::ARP);
        k.set_nw_proto(1);
        k.set_nw_src(spa);
        k.set_nw_dst(tpa);
        k
    };
    let (mut to2, mut to3) = (0, 0);
    for i in 0..1000u32 {
        let t = of.translate_key(&arp(0x0a00_0000 + i, 0x0a01_0000 + 7 * i), 0);
        match outputs(&t.actions).as_slice() {
            [2] => to2 += 1,
            [3] => to3 += 1,
            o => panic!("one bucket per packet, got {o:?}"),
        }
        assert_eq!(
            (t.mask.nw_src(), t.mask.nw_dst()),
            (u32::MAX, u32::MAX),
            "the hashed addresses are in the megaflow"
        );
        let back = of.translate_key(&arp(0x0a01_0000 + 7 * i, 0x0a00_0000 + i), 0);
        assert_eq!(outputs(&back.actions), outputs(&t.actions), "symmetric");
    }
    assert!(to2 > 350 && to3 > 350, "ARP spreads over both buckets: {to2} / {to3}");
}

#[test]
fn fast_failover_follows_liveness_through_the_cache() {
    let mut of = bridge();
    of.group_mod(
        ModCmd::Add,
        parse_group("group_id=7,type=ff,bucket=watch_port:2,output:2,bucket=watch_port:3,output:3", 0).unwrap(),
    )
    .unwrap();
    add(&mut of, "in_port=1,actions=group:7").unwrap();
    let mut pmd = Pmd::new(PmdConfig { emc_insert_inv_prob: 1, ..PmdConfig::default() });
    let k = udp(1);
    pmd.set_generation(of.generation());
    assert_eq!(outputs(&pmd.actions_for_key(&k, &of, 0)), vec![2]);
    assert_eq!(outputs(&pmd.actions_for_key(&k, &of, 1)), vec![2], "cached");
    of.set_port_up(2, false);
    pmd.set_generation(of.generation());
    assert_eq!(outputs(&pmd.actions_for_key(&k, &of, 2)), vec![3], "failed over, cached megaflow revalidated");
    of.set_port_up(3, false);
    pmd.set_generation(of.generation());
    assert!(outputs(&pmd.actions_for_key(&k, &of, 3)).is_empty(), "no live bucket: drop");
    of.set_port_up(2, true);
    pmd.set_generation(of.generation());
    assert_eq!(outputs(&pmd.actions_for_key(&k, &of, 4)), vec![2], "back");
}

#[test]
fn all_group_buckets_do_not_leak_writes() {
    let mut of = bridge();
    of.group_mod(
        ModCmd::Add,
        parse_group("group_id=2,type=all,bucket=set_field:10.9.9.9->nw_dst,output:2,bucket=output:3", 0).unwrap(),
    )
    .unwrap();
    add(&mut of, "in_port=1,ip,actions=group:2,output:4").unwrap();
    let t = of.translate_key(&udp(1), 0);
    assert_eq!(outputs(&t.actions), vec![2, 3, 4]);
    // set nw_dst, output 2, restore nw_dst, output 3, output 4.
    let sets: Vec<u32> = t
        .actions
        .iter()
        .filter_map(|a| if let DpAction::SetMasked(set) = a { Some(set.key().nw_dst()) } else { None })
        .collect();
    assert_eq!(sets, vec![0x0a09_0909, 0x0a00_0002]);
    assert_eq!(t.mask.nw_dst(), u32::MAX, "the restored value is consulted");
}

#[test]
fn missing_groups_and_meters_are_refused_and_deletes_cascade() {
    let mut of = bridge();
    assert_eq!(add(&mut of, "actions=group:9"), Err(FlowModError::UnknownGroup(9)));
    assert_eq!(add(&mut of, "actions=meter:9,output:1"), Err(FlowModError::UnknownMeter(9)));
    of.group_mod(ModCmd::Add, parse_group("group_id=9,type=indirect,bucket=output:1", 0).unwrap()).unwrap();
    assert!(of.group_mod(ModCmd::Add, parse_group("group_id=9,type=indirect,bucket=output:2", 0).unwrap()).is_err());
    // A group may not reach itself through another.
    of.group_mod(ModCmd::Add, parse_group("group_id=10,type=all,bucket=group:9", 0).unwrap()).unwrap();
    assert!(of.group_mod(ModCmd::Modify, parse_group("group_id=9,type=indirect,bucket=group:10", 0).unwrap()).is_err());
    let (id, cfg) = parse_meter("meter=9,pktps,burst,band=type=drop,rate=10,burst_size=1").unwrap();
    of.meter_mod(ModCmd::Add, id, cfg).unwrap();
    add(&mut of, "priority=5,send_flow_rem,actions=group:9").unwrap();
    add(&mut of, "priority=6,udp,send_flow_rem,actions=meter:9,output:1").unwrap();
    assert_eq!(of.n_rules(), 2);
    assert_eq!(of.group_ref_count(9), 1);
    of.take_removed();
    of.group_mod(ModCmd::Delete, parse_group("group_id=9", 0).unwrap()).unwrap();
    assert_eq!(of.n_rules(), 1);
    of.meter_mod(ModCmd::Delete, 9, Default::default()).unwrap();
    assert_eq!(of.n_rules(), 0);
    let reasons: Vec<u8> = of.take_removed().iter().map(|r| r.reason).collect();
    assert_eq!(reasons, vec![3, 5], "group delete, meter delete");
}

#[test]
fn meters_drop_over_rate_packets_in_the_datapath() {
    use wire::build::{Frame, L3, L4};
    let mut of = bridge();
    let (id, cfg) = parse_meter("meter=1,pktps,burst,stats,band=type=drop,rate=100,burst_size=10").unwrap();
    of.meter_mod(ModCmd::Add, id, cfg).unwrap();
    add(&mut of, "in_port=1,actions=meter:1,output:2").unwrap();
    #[derive(Default)]
    struct Count(usize);
    impl dpif::Sink for Count {
        fn output(&mut self, _p: u32, pkts: &mut Vec<netdev::Packet>) {
            self.0 += pkts.len();
            pkts.clear();
        }
        fn userspace(&mut self, _p: netdev::Packet, _full_len: usize, _a: &DpAction) {}
    }
    let f =
        Frame::new([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]).l3(L3::ipv4(1, 2)).l4(L4::Udp { src: 1, dst: 2 }).build();
    let mut pmd = Pmd::new(PmdConfig::default());
    let mut sink = Count::default();
    pmd.set_generation(of.generation());
    // 1000 packets over one second, one per millisecond.
    for t in 0..1000u64 {
        let mut p = netdev::Packet::from_slice(&f);
        p.in_port = 1;
        pmd.process_batch(&mut vec![p], &of, t, &mut sink);
    }
    assert!((105..=112).contains(&sink.0), "burst 10 + 100/s passed: {}", sink.0);
    let m = of.meters().next().unwrap();
    assert_eq!(m.packets_in.load(std::sync::atomic::Ordering::Relaxed), 1000);
    assert_eq!(m.band_packets[0].load(std::sync::atomic::Ordering::Relaxed) as usize, 1000 - sink.0);
}

#[test]
fn mirrors_copy_selected_traffic() {
    let mut of = bridge();
    add(&mut of, "in_port=1,ip,actions=set_field:10.9.9.9->nw_dst,output:2").unwrap();
    add(&mut of, "in_port=3,actions=output:2").unwrap();
    of.set_mirrors(vec![ofproto::Mirror { name: "m".into(), select_all: false, src: vec![1], dst: vec![], output: 4 }]);
    let t = of.translate_key(&udp(1), 0);
    // The mirror gets the packet as it arrived: its output comes first.
    assert_eq!(t.actions.first(), Some(&DpAction::Output(4)));
    assert_eq!(outputs(&t.actions), vec![4, 2]);
    let mut k = udp(1);
    k.set_in_port(3);
    assert_eq!(outputs(&of.translate_key(&k, 0).actions), vec![2], "port 3 is not selected");
    // Selecting by output port: a copy after the pipeline.
    of.set_mirrors(vec![ofproto::Mirror { name: "m".into(), select_all: false, src: vec![], dst: vec![2], output: 4 }]);
    assert_eq!(outputs(&of.translate_key(&k, 0).actions), vec![2, 4]);
}

/// `bundle` (NXAST_BUNDLE), as OVN uses it for HA gateways: active_backup
/// sends to the first live member and follows liveness through the
/// datapath cache; hrw keeps a flow on one live member and spreads flows
/// over them; `bundle_load` writes the choice (0xffff when none is live).
#[test]
fn bundle_picks_a_live_member_and_follows_liveness() {
    let mut of = bridge();
    add(&mut of, "in_port=1,actions=bundle(eth_src,0,active_backup,ofport,members:2,3)").unwrap();
    let mut pmd = Pmd::new(PmdConfig { emc_insert_inv_prob: 1, ..PmdConfig::default() });
    let k = udp(1);
    pmd.set_generation(of.generation());
    assert_eq!(outputs(&pmd.actions_for_key(&k, &of, 0)), vec![2], "the first member");
    assert_eq!(outputs(&pmd.actions_for_key(&k, &of, 1)), vec![2], "cached");
    of.set_port_up(2, false);
    pmd.set_generation(of.generation());
    assert_eq!(outputs(&pmd.actions_for_key(&k, &of, 2)), vec![3], "the backup, cached megaflow revalidated");
    of.set_port_up(3, false);
    pmd.set_generation(of.generation());
    assert!(outputs(&pmd.actions_for_key(&k, &of, 3)).is_empty(), "no live member: drop");
    of.set_port_up(2, true);
    of.set_port_up(3, true);

    // hrw over source ports: stable per flow, spread over the members.
    let mut of = bridge();
    add(&mut of, "in_port=1,actions=bundle(symmetric_l4,5,hrw,ofport,members:2,3,4)").unwrap();
    let pick = |of: &Ofproto, i: u32| outputs(&of.translate(&udp(i)).actions);
    let mut seen = std::collections::BTreeSet::new();
    for i in 0..60 {
        let p = pick(&of, i);
        assert_eq!(p.len(), 1);
        assert_eq!(p, pick(&of, i), "one flow, one member");
        seen.insert(p[0]);
    }
    assert_eq!(seen.len(), 3, "60 flows spread over all three members: {seen:?}");
    let before: Vec<Vec<u32>> = (0..60).map(|i| pick(&of, i)).collect();
    of.set_port_up(3, false);
    for (i, b) in before.iter().enumerate() {
        let now = pick(&of, i as u32);
        assert_ne!(now, vec![3], "a dead member is never chosen");
        if b != &vec![3] {
            assert_eq!(&now, b, "flows on live members stay where they were");
        }
    }

    // bundle_load: the chosen port in reg0, then output from it.
    let mut of = bridge();
    add(
        &mut of,
        "in_port=1,actions=bundle_load(eth_src,0,active_backup,ofport,NXM_NX_REG0[],members:4,2),output:NXM_NX_REG0[]",
    )
    .unwrap();
    assert_eq!(outputs(&of.translate(&udp(1)).actions), vec![4]);
    of.set_port_up(4, false);
    assert_eq!(outputs(&of.translate(&udp(1)).actions), vec![2]);
    of.set_port_up(2, false);
    assert!(outputs(&of.translate(&udp(1)).actions).is_empty(), "0xffff: no output");
}

/// A bucket runs as an action set, as the specification says and Open
/// vSwitch does: one output (the last), field writes before it, and
/// actions an action set cannot hold (controller with options, learn,
/// stack) left out. Without an output, group or resubmit, nothing runs.
#[test]
fn buckets_run_as_action_sets() {
    let mut of = bridge();
    of.group_mod(ModCmd::Add, parse_group("group_id=4,type=all,bucket=output:4", 0).unwrap()).unwrap();
    of.group_mod(
        ModCmd::Add,
        parse_group(
            "group_id=3,type=all,bucket=output:2,set_field:10.9.9.9->nw_dst,controller(userdata=01,pause),push:reg0[],output:3,\
             bucket=set_field:10.8.8.8->nw_dst,bucket=group:4",
            0,
        )
        .unwrap(),
    )
    .unwrap();
    add(&mut of, "in_port=1,ip,actions=group:3").unwrap();
    let t = of.translate_key(&udp(1), 0);
    assert_eq!(outputs(&t.actions), vec![3, 4], "{}", dpif::format_actions(&t.actions));
    assert!(!t.actions.iter().any(|a| matches!(a, DpAction::Userspace { .. })), "no controller action");
    let sets: Vec<u32> = t
        .actions
        .iter()
        .filter_map(|a| if let DpAction::SetMasked(set) = a { Some(set.key().nw_dst()) } else { None })
        .collect();
    // The first bucket's write, then its undo; the second bucket runs nothing.
    assert_eq!(sets, vec![0x0a09_0909, 0x0a00_0002], "{}", dpif::format_actions(&t.actions));
}

/// write_actions keeps every field write (the set holds one per field, not
/// one set_field in all), and a group in the set wins over an output.
#[test]
fn the_action_set_keeps_writes_to_different_fields_and_prefers_a_group() {
    let mut of = bridge();
    of.group_mod(ModCmd::Add, parse_group("group_id=5,type=all,bucket=output:4", 0).unwrap()).unwrap();
    add(&mut of, "table=0,in_port=1,ip,actions=write_actions(set_field:10.9.9.9->nw_dst),goto_table:1").unwrap();
    add(&mut of, "table=1,udp,actions=write_actions(set_field:7->udp_src,output:2),goto_table:2").unwrap();
    add(&mut of, "table=2,udp,actions=write_actions(group:5)").unwrap();
    let t = of.translate_key(&udp(1), 0);
    assert_eq!(outputs(&t.actions), vec![4], "{}", dpif::format_actions(&t.actions));
    let acts = dpif::format_actions(&t.actions);
    assert!(acts.contains("10.9.9.9") && acts.contains("src=7"), "both writes: {acts}");
}
