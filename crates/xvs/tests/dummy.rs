//! The whole switch (poll thread, caches, upcalls, NORMAL, VLANs, rule
//! changes) over in-memory dummy ports: no kernel, no root.
//!
//! Plan: a switch with four dummy ports (two access ports in VLAN 10, one
//! in VLAN 20, one trunk); inject frames, read what each port sent.
//! Verified: flooding stays inside the VLAN, learning turns floods into
//! unicast, tags are pushed toward the trunk and popped toward access
//! ports, and an OpenFlow rule added at run time takes effect on a flow
//! that was already cached (revalidation).

use netdev::dummy::{DummyHandle, DummyPort};
use ofproto::VlanMode;
use std::time::{Duration, Instant};
use wire::build::{Frame, L3, L4};
use xvs::config::{PollMode, PortSpec};
use xvs::switch::{Switch, SwitchOptions};

fn mac(i: u8) -> [u8; 6] {
    [2, 0, 0, 0, 0, i]
}

fn frame(src: u8, dst: u8, vlan: Option<u16>) -> Vec<u8> {
    let mut f = Frame::new(mac(src), mac(dst));
    if let Some(v) = vlan {
        f = f.vlan(0x8100, v);
    }
    f.l3(L3::ipv4(0x0a00_0000 | src as u32, 0x0a00_0000 | dst as u32)).l4(L4::Udp { src: 1, dst: 2 }).build()
}

/// Waits until every port's queue is drained and at least `expect` frames
/// were sent in all (up to 5 s: a loaded machine may hold the poll thread
/// back between receiving and sending), then a little longer for any
/// unexpected extra frame, and returns what each port sent.
fn settle(hs: &[DummyHandle], expect: usize) -> Vec<Vec<Vec<u8>>> {
    let t = Instant::now();
    let mut sent: Vec<Vec<Vec<u8>>> = vec![Vec::new(); hs.len()];
    loop {
        for (i, h) in hs.iter().enumerate() {
            sent[i].extend(h.take_sent());
        }
        let n: usize = sent.iter().map(Vec::len).sum();
        let drained = hs.iter().all(|h| h.pending_rx() == 0);
        if (drained && n >= expect) || t.elapsed() > Duration::from_secs(5) {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    std::thread::sleep(Duration::from_millis(30));
    for (i, h) in hs.iter().enumerate() {
        sent[i].extend(h.take_sent());
    }
    sent
}

#[test]
fn normal_vlans_learning_and_rule_changes_over_dummy_ports() {
    let sw = Switch::start(SwitchOptions {
        bridge: "dummybr".into(),
        n_pmd: 1,
        pmd_cpus: vec![],
        local_port: false,
        mirror: None,
        poll_mode: PollMode::Busy,
        pmd: dpif::PmdConfig::default(),
        patches: Default::default(),
    })
    .unwrap();
    let modes = [VlanMode::Access(10), VlanMode::Access(10), VlanMode::Access(20), VlanMode::TrunkAll];
    let mut hs = Vec::new();
    for (i, m) in modes.iter().enumerate() {
        let (port, h) = DummyPort::new(&format!("d{i}"));
        let mut spec = PortSpec::new(&format!("d{i}"));
        spec.vlan = m.clone();
        assert_eq!(sw.add_netdev(spec, Box::new(port)).unwrap(), i as u32 + 1);
        hs.push(h);
    }
    // Unknown destination from port 1 (VLAN 10): port 2 untagged, trunk tagged 10, never port 3.
    hs[0].inject(&frame(1, 9, None));
    let sent = settle(&hs, 2);
    assert_eq!(sent[1], vec![frame(1, 9, None)]);
    assert!(sent[2].is_empty(), "VLAN 20 port must not see VLAN 10 traffic");
    assert_eq!(sent[3], vec![frame(1, 9, Some(10))]);
    // A reply from the trunk in VLAN 10: MAC 1 is known, so only port 1 gets it, untagged.
    hs[3].inject(&frame(9, 1, Some(10)));
    let sent = settle(&hs, 1);
    assert_eq!(sent[0], vec![frame(9, 1, None)]);
    assert!(sent[1].is_empty() && sent[2].is_empty() && sent[3].is_empty());
    // Now 1 -> 9 is unicast to the trunk, from the cache after the first.
    for _ in 0..50 {
        hs[0].inject(&frame(1, 9, None));
    }
    let sent = settle(&hs, 50);
    assert_eq!(sent[3].len(), 50);
    assert!(sent[1].is_empty(), "no more flooding after learning");
    // A rule added at run time overrides NORMAL for the cached flow.
    xvs::commands::run(&sw, "add-flow", &["priority=100,in_port=1,actions=output:3".into()]).unwrap();
    for _ in 0..5 {
        hs[0].inject(&frame(1, 9, None));
    }
    let sent = settle(&hs, 5);
    assert_eq!(sent[2].len(), 5, "the stale megaflow was revalidated");
    assert!(sent[3].is_empty());
    let (_, j) = xvs::commands::run(&sw, "pmd-stats", &[]).unwrap();
    let p = &j["pmds"][0];
    let hits = ["simple_hits", "emc_hits", "megaflow_hits"].map(|k| p[k].as_u64().unwrap());
    assert!(hits.iter().sum::<u64>() >= 45, "{p}");
    assert!(p["removed_stale"].as_u64().unwrap() >= 1, "{p}");
    let flows = xvs::commands::run(&sw, "dump-flows", &[]).unwrap().0;
    assert!(flows.contains("actions:3"), "{flows}");
}

/// Two bridges of one process joined by a patch port pair (as OVS's
/// integration and underlay bridges are): a frame entering bridge A on a
/// dummy port leaves bridge B on its dummy port, and back.
#[test]
fn two_bridges_joined_by_patch_ports() {
    let patches: std::sync::Arc<xvs::ports::PatchRegistry> = Default::default();
    let mk = |name: &str| {
        Switch::start(SwitchOptions {
            bridge: name.into(),
            n_pmd: 1,
            pmd_cpus: vec![],
            local_port: false,
            mirror: None,
            poll_mode: PollMode::Adaptive,
            pmd: dpif::PmdConfig::default(),
            patches: std::sync::Arc::clone(&patches),
        })
        .unwrap()
    };
    let (a, b) = (mk("pbra"), mk("pbrb"));
    let (pa, ha) = DummyPort::new("da");
    let (pb, hb) = DummyPort::new("db");
    a.add_netdev(PortSpec::new("da"), Box::new(pa)).unwrap();
    b.add_netdev(PortSpec::new("db"), Box::new(pb)).unwrap();
    // Mismatched peers are refused; the matching pair connects.
    a.add_port(PortSpec::parse("pa-to-b,type=patch,peer=pb-to-a").unwrap()).unwrap();
    assert!(b.add_port(PortSpec::parse("pb-to-a,type=patch,peer=wrong").unwrap()).is_err());
    b.add_port(PortSpec::parse("pb-to-a,type=patch,peer=pa-to-b").unwrap()).unwrap();
    ha.inject(&frame(1, 2, None));
    assert_eq!(wait_sent(&hb), vec![frame(1, 2, None)], "the frame crossed the patch");
    // The reply crosses back, to the learned port only.
    hb.inject(&frame(2, 1, None));
    assert_eq!(wait_sent(&ha), vec![frame(2, 1, None)], "the reply crossed back");
    let show = xvs::commands::run(&a, "show", &[]).unwrap().0;
    assert!(show.contains("pa-to-b") && show.contains("patch"), "{show}");
}

/// What a dummy port sent, waiting up to 2 s for the first frame.
fn wait_sent(h: &DummyHandle) -> Vec<Vec<u8>> {
    let t = Instant::now();
    loop {
        let sent = h.take_sent();
        if !sent.is_empty() || t.elapsed() > Duration::from_secs(2) {
            return sent;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
