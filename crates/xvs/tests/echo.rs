//! OpenFlow state echoed faithfully: what a controller installs comes back
//! in `dump-flows` as it was sent (issue 11's largest group of conformance
//! failures).
//!
//! Plan: one switch with two ports (namespaced hosts), flows installed with
//! the real `ovs-ofctl` in OpenFlow 1.0 and 1.3, then `dump-flows` in the
//! same version; each action must come back in the form Open vSwitch's
//! ovs-ofctl prints for the same input. `XVS_SWITCH=ovs` runs the same test
//! against Open vSwitch 3.1 (`-- --test-threads=1`). Needs root.

use std::time::{Duration, Instant};
use xvs::netns::Host;
use xvs::ovsref::Sut;

/// Two hosts (`NS_PREFIX..h1/h2` at `NET.1` and `NET.2`) on a switch with
/// bridge `bridge` (xvs, or OVS 3.1 with `XVS_SWITCH=ovs`).
fn two_hosts(ns: &str, port: &str, net: &str, tag: &str, bridge: &str) -> (Host, Host, Sut) {
    std::env::set_var("XVS_BIN", env!("CARGO_BIN_EXE_xvs"));
    let id = std::process::id() % 1000;
    let mk = |i: u32| {
        Host::create(&format!("{ns}{id}h{i}"), &format!("{port}{id}h{i}"), &format!("{net}.{i}/24"), 1).unwrap()
    };
    let (h1, h2) = (mk(1), mk(2));
    let sw = Sut::start(env!("CARGO_BIN_EXE_xvs"), tag, bridge, &[&h1.port, &h2.port], &[]);
    (h1, h2, sw)
}

/// Installs `flow` in `proto` and returns the actions dump-flows prints.
fn echo(sw: &Sut, proto: &str, flow: &str) -> String {
    sw.ofctl(&[proto, "del-flows"]);
    let (ok, err) = sw.ofctl(&[proto, "add-flow", flow]);
    assert!(ok, "{proto} add-flow {flow}: {err}");
    let (ok, dump) = sw.ofctl(&[proto, "dump-flows"]);
    assert!(ok, "{dump}");
    let line = dump.lines().find(|l| l.contains("actions=")).unwrap_or_else(|| panic!("no flow in {dump}"));
    line.split("actions=").nth(1).unwrap().trim().to_string()
}

#[test]
fn actions_come_back_as_they_were_sent() {
    let (_h1, _h2, sw) = two_hosts("xvsec", "xe", "10.83.0", "echo", "brecho");
    let cases: &[(&str, &str, &str)] = &[
        // OpenFlow 1.0: its own mod_* actions, and Nicira actions for what
        // 1.0 lacks (mod_nw_ttl: OVS sends and echoes a Nicira load).
        (
            "-OOpenFlow10",
            "tcp,actions=mod_dl_src:00:11:22:33:44:55,mod_nw_dst:10.0.0.9,mod_tp_dst:8080,output:2",
            "mod_dl_src:00:11:22:33:44:55,mod_nw_dst:10.0.0.9,mod_tp_dst:8080,output:2",
        ),
        ("-OOpenFlow10", "ip,actions=mod_nw_ttl:9,output:2", "load:0x9->NXM_NX_IP_TTL[],output:2"),
        // OpenFlow 1.3: set_field keeps the field the controller named.
        ("-OOpenFlow13", "udp,actions=set_field:1234->udp_src,output:2", "set_field:1234->udp_src,output:2"),
        ("-OOpenFlow13", "sctp,actions=set_field:99->sctp_dst,output:2", "set_field:99->sctp_dst,output:2"),
        ("-OOpenFlow13", "tcp,actions=set_field:80->tcp_dst,output:2", "set_field:80->tcp_dst,output:2"),
        // Prerequisites of the field named, not of the field it aliases.
        (
            "-OOpenFlow13",
            "arp,actions=set_field:10.0.0.9->arp_spa,set_field:2->arp_op,output:2",
            "set_field:10.0.0.9->arp_spa,set_field:2->arp_op,output:2",
        ),
        (
            "-OOpenFlow13",
            "icmp,actions=set_field:3->icmp_type,set_field:1->icmp_code,output:2",
            "set_field:3->icmp_type,set_field:1->icmp_code,output:2",
        ),
        ("-OOpenFlow13", "icmp6,actions=set_field:1->icmpv6_code,output:2", "set_field:1->icmpv6_code,output:2"),
    ];
    let mut failures = Vec::new();
    for (proto, flow, want) in cases {
        let got = echo(&sw, proto, flow);
        if got != *want {
            failures.push(format!("{proto} {flow}\n   want {want}\n   got  {got}"));
        }
    }
    assert!(failures.is_empty(), "not echoed faithfully:\n{}", failures.join("\n"));
}

/// The tunnel TLV map as ovn-controller sets it up first: a Geneve option
/// bound to `tun_metadata0`, read back, then matched and written in flows;
/// and the refusals for what cannot be mapped.
#[test]
fn tlv_map_binds_a_geneve_option_to_tun_metadata() {
    let (_h1, _h2, sw) = two_hosts("xvstl", "xt", "10.83.1", "tlv", "brtlv");
    let ovn = "{class=0x102,type=0x80,len=4}->tun_metadata0";
    sw.ofctl_ok(&["-OOpenFlow15", "add-tlv-map", ovn]);
    let map = sw.ofctl_ok(&["-OOpenFlow15", "dump-tlv-map"]);
    eprintln!("{} dump-tlv-map:\n{map}", sw.name());
    assert!(
        map.lines().any(|l| l.split_whitespace().collect::<Vec<_>>() == ["0x102", "0x80", "4", "tun_metadata0"]),
        "{map}"
    );
    // The same field again, or the same option on another field: refused.
    let (ok, e) = sw.ofctl(&["-OOpenFlow15", "add-tlv-map", "{class=0x102,type=0x81,len=4}->tun_metadata0"]);
    assert!(!ok && e.contains("NXTTMFC_ALREADY_MAPPED"), "{e}");
    let (ok, e) = sw.ofctl(&["-OOpenFlow15", "add-tlv-map", "{class=0x102,type=0x80,len=4}->tun_metadata1"]);
    assert!(!ok && e.contains("NXTTMFC_DUP_ENTRY"), "{e}");
    for (flow, want) in [
        ("tun_metadata0=0x1234/0xffff,actions=output:2", "tun_metadata0=0x1234"),
        ("priority=5,tun_metadata0=7,actions=set_field:0x55->tun_metadata0,output:2", "set_field:0x55->tun_metadata0"),
    ] {
        sw.ofctl_ok(&["-OOpenFlow15", "add-flow", flow]);
        let dump = sw.ofctl_ok(&["-OOpenFlow15", "dump-flows"]);
        assert!(dump.contains(want), "{flow}: {dump}");
    }
    // A field no map binds cannot be used; a mapping in use cannot go.
    let (ok, e) = sw.ofctl(&["-OOpenFlow15", "add-flow", "tun_metadata1=1,actions=output:2"]);
    assert!(!ok && e.contains("NXFMFC_INVALID_TLV_FIELD"), "{e}");
    let (ok, e) = sw.ofctl(&["-OOpenFlow15", "del-tlv-map"]);
    assert!(!ok && e.contains("NXTTMFC_INVALID_TLV_DEL"), "{e}");
    sw.ofctl_ok(&["-OOpenFlow15", "del-flows"]);
    sw.ofctl_ok(&["-OOpenFlow15", "del-tlv-map"]);
    let map = sw.ofctl_ok(&["-OOpenFlow15", "dump-tlv-map"]);
    assert!(!map.contains("tun_metadata0"), "{map}");
}

/// `controller(userdata=...)` as OVN's pinctrl flows use it: the packet-in
/// comes as NXT_PACKET_IN2 with the userdata and the pipeline metadata
/// (registers, `metadata`) the action saw, and the full length.
#[test]
fn controller_userdata_arrives_in_packet_in2_with_the_pipeline_metadata() {
    let (h1, h2, sw) = two_hosts("xvspi", "xp", "10.83.2", "pin2", "brpin2");
    let flow = "priority=10,icmp,actions=set_field:0x5->reg14,set_field:0x3->metadata,controller(userdata=01.02.03,max_len=64)";
    sw.ofctl_ok(&["-OOpenFlow15", "add-flow", flow]);
    let dump = sw.ofctl_ok(&["-OOpenFlow15", "dump-flows"]);
    assert!(dump.contains("controller(max_len=64,userdata=01.02.03)"), "{dump}");
    let target = format!("unix:{}/{}.mgmt", sw.run_dir, sw.bridge);
    // The monitor's control socket goes into the switch's run directory
    // (the default, /var/run/openvswitch, need not exist).
    let mon = std::process::Command::new("timeout")
        .env("OVS_RUNDIR", &sw.run_dir)
        .args(["5", "stdbuf", "-o0", "ovs-ofctl", "-OOpenFlow15", "monitor", &target, "65534", "-P", "nxt_packet_in2"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(800));
    h1.exec(&["ip", "neigh", "replace", &h2.ip, "lladdr", &h2.mac, "dev", "eth0"]).unwrap();
    let _ = h1.ping(&h2.ip, 1);
    let out = mon.wait_with_output().unwrap();
    // ovs-ofctl monitor prints what it receives on stdout or stderr.
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    eprintln!("{} monitor:\n{text}", sw.name());
    let pin =
        text.lines().find(|l| l.starts_with("NXT_PACKET_IN2")).unwrap_or_else(|| panic!("no packet-in2:\n{text}"));
    // The whole packet, whatever max_len says (Open vSwitch buffers
    // nothing and sends it all).
    assert!(pin.contains("total_len=98 ") && pin.contains("data_len=98 "), "{pin}");
    assert!(pin.contains("reg14=0x5") && pin.contains("metadata=0x3") && pin.contains("in_port=1"), "{pin}");
    assert!(pin.contains("(via action)"), "{pin}");
    assert!(text.contains("userdata=01.02.03"), "{text}");
}

/// Flows in the shapes ovn-controller 23.03 installs (taken from its
/// br-int on Open vSwitch 3.1): each is accepted and comes back as Open
/// vSwitch prints it.
#[test]
fn ovn_flow_shapes_are_accepted_and_echoed() {
    let (_h1, _h2, sw) = two_hosts("xvsov", "xo", "10.83.3", "ovnsh", "brovnsh");
    sw.ofctl_ok(&["-OOpenFlow15", "add-tlv-map", "{class=0x102,type=0x80,len=4}->tun_metadata0"]);
    let p = "-OOpenFlow15";
    let cases: &[&str] = &[
        "ct(commit,zone=NXM_NX_REG13[0..15],nat(src),exec(set_field:0/0x1->ct_label,move:NXM_NX_XXREG0[0..31]->NXM_NX_CT_LABEL[96..127]))",
        "move:NXM_NX_TUN_ID[0..23]->OXM_OF_METADATA[0..23],move:NXM_NX_TUN_METADATA0[16..30]->NXM_NX_REG14[0..14],resubmit(,40)",
        "set_field:0x5->reg14,controller(userdata=00.00.00.0b.00.00.00.00)",
        "dec_ttl(1,2),set_field:0/0xffff00000000->xreg4,move:NXM_OF_IP_DST[]->NXM_NX_XXREG0[96..127]",
        "push:NXM_NX_REG0[],push:NXM_OF_ETH_SRC[],pop:NXM_NX_REG0[],pop:NXM_OF_ETH_SRC[],resubmit(,10)",
        "clone(ct_clear,set_field:0->reg11,resubmit(,8)),set_field:0x8004->reg15,resubmit(,37)",
    ];
    let mut bad = Vec::new();
    for acts in cases {
        let got = echo(&sw, p, &format!("ip,actions={acts}"));
        if got != *acts {
            bad.push(format!("sent {acts}\n got {got}"));
        }
    }
    // RARP's opcode, as OVN matches it.
    sw.ofctl_ok(&[p, "add-flow", "table=33,priority=75,rarp,dl_src=00:00:00:00:ff:02,arp_op=3,actions=resubmit(,37)"]);
    let dump = sw.ofctl_ok(&[p, "dump-flows", "table=33"]);
    assert!(dump.contains("rarp,dl_src=00:00:00:00:ff:02,arp_op=3"), "{dump}");
    assert!(bad.is_empty(), "{} echoed differently:\n{}", sw.name(), bad.join("\n"));
}

/// `learn(...)`: a packet adds a flow built from its own fields, as OVN's
/// load balancers use it; the learned flow is the same on xvs and OVS.
#[test]
fn learn_adds_a_flow_built_from_the_packet() {
    let (h1, h2, sw) = two_hosts("xvsle", "xl", "10.83.4", "learn", "brlearn");
    let learn = "learn(table=5,idle_timeout=60,priority=7,delete_learned,NXM_OF_ETH_SRC[]=NXM_OF_ETH_DST[],eth_type=0x800,load:0x3->NXM_NX_REG1[0..15],output:NXM_OF_IN_PORT[])";
    let flow = format!("priority=10,ip,in_port=1,actions={learn},NORMAL");
    sw.ofctl_ok(&["add-flow", &flow]);
    let dump = sw.ofctl_ok(&["dump-flows"]);
    assert!(dump.contains(&format!("actions={learn},NORMAL")), "{dump}");
    assert_eq!(h1.ping(&h2.ip, 2).unwrap(), 2);
    let t = Instant::now();
    let mut learned = String::new();
    while t.elapsed() < Duration::from_secs(5) {
        learned = sw.ofctl_ok(&["dump-flows", "table=5"]);
        if learned.contains("priority=7") {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    eprintln!("{} learned:\n{learned}", sw.name());
    let line =
        learned.lines().find(|l| l.contains("priority=7")).unwrap_or_else(|| panic!("nothing learned: {learned}"));
    assert!(line.contains("idle_timeout=60") && line.contains(&format!("ip,dl_src={}", h2.mac)), "{line}");
    assert!(line.ends_with("actions=load:0x3->NXM_NX_REG1[0..15],output:1"), "{line}");
    // delete_learned: the learned flow goes with its learner.
    sw.ofctl_ok(&["--strict", "del-flows", "priority=10,ip,in_port=1"]);
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(3) && sw.ofctl_ok(&["dump-flows", "table=5"]).contains("priority=7") {
        std::thread::sleep(Duration::from_millis(100));
    }
    let left = sw.ofctl_ok(&["dump-flows", "table=5"]);
    assert!(!left.contains("priority=7"), "the learned flow outlived its learner: {left}");
}

/// Conjunctive matches, as OVN writes ACLs over address sets: ICMP from
/// either host passes (two clauses: source in {h1, h2}, protocol ICMP),
/// TCP does not (its second clause never matches).
#[test]
fn conjunctive_match_allows_only_what_every_clause_allows() {
    let (h1, h2, sw) = two_hosts("xvscj", "xj", "10.83.5", "conj", "brconj");
    for f in [
        "priority=100,ip,nw_src=10.83.5.1,actions=conjunction(7,1/2)",
        "priority=100,ip,nw_src=10.83.5.2,actions=conjunction(7,1/2)",
        "priority=100,icmp,actions=conjunction(7,2/2)",
        "priority=100,conj_id=7,ip,actions=NORMAL",
        "priority=50,ip,actions=drop",
        "priority=10,arp,actions=NORMAL",
    ] {
        sw.ofctl_ok(&["add-flow", f]);
    }
    let dump = sw.ofctl_ok(&["dump-flows"]);
    assert!(dump.contains("priority=100,icmp actions=conjunction(7,2/2)"), "{dump}");
    assert!(dump.contains("priority=100,conj_id=7,ip actions=NORMAL"), "{dump}");
    assert_eq!(h1.ping(&h2.ip, 3).unwrap(), 3, "ICMP both ways: every clause matches");
    let c = h1.run(&["timeout", "2", "bash", "-c", &format!("echo > /dev/tcp/{}/5209", h2.ip)]).unwrap();
    assert!(!c.status.success(), "TCP matches only the first clause: dropped");
    let dump = sw.ofctl_ok(&["dump-flows"]);
    eprintln!("{} dump-flows:\n{dump}", sw.name());
    let count = |what: &str| -> u64 {
        let l = dump.lines().find(|l| l.contains(what)).unwrap();
        l.split("n_packets=").nth(1).unwrap().split(',').next().unwrap().parse().unwrap()
    };
    assert!(count("conj_id=7") >= 6, "the conj_id flow forwarded the pings: {dump}");
    assert!(count("priority=50") >= 1, "the SYN fell to the drop: {dump}");
}
