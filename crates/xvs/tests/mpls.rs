//! MPLS actions on real frames (issue 11): push_mpls, set_field on the
//! label, set_mpls_ttl, dec_mpls_ttl and pop_mpls, installed with the real
//! ovs-ofctl (OpenFlow 1.3 and 1.0) and checked on the wire with tcpdump.
//! `XVS_SWITCH=ovs` runs the same test against Open vSwitch 3.1. Needs root.

use xvs::netns::Host;
use xvs::ovsref::Sut;

#[test]
fn push_set_and_pop_mpls_on_the_wire() {
    std::env::set_var("XVS_BIN", env!("CARGO_BIN_EXE_xvs"));
    let id = std::process::id() % 1000;
    let mk = |i: u32| Host::create(&format!("xvsmp{id}h{i}"), &format!("xmp{id}h{i}"), &format!("10.88.0.{i}/24"), 1);
    let (h1, h2) = (mk(1).unwrap(), mk(2).unwrap());
    let sw = Sut::start(env!("CARGO_BIN_EXE_xvs"), "mpls", "brmpls", &[&h1.port, &h2.port], &[]);
    let name = sw.name();
    let flows = |proto: &str, first: &str| {
        let (ok, out) = sw.ofctl(&[proto, "del-flows"]);
        assert!(ok, "{out}");
        for f in [first, "priority=10,arp,actions=NORMAL", "priority=10,in_port=2,actions=output:1"] {
            let (ok, out) = sw.ofctl(&[proto, "add-flow", f]);
            assert!(ok, "{name}: add-flow {f}: {out}");
        }
    };
    // Push a label and set it: h2 sees the MPLS frame.
    flows("-OOpenFlow13", "priority=20,ip,in_port=1,actions=push_mpls:0x8847,set_field:100->mpls_label,output:2");
    let (_, dump) = sw.ofctl(&["-OOpenFlow13", "dump-flows"]);
    assert!(dump.contains("actions=push_mpls:0x8847,set_field:100->mpls_label,output:2"), "{name}: {dump}");
    h1.ping(&h2.ip, 1).unwrap();
    let seen = h2.capture(&["mpls"], || {
        h1.ping(&h2.ip, 2).unwrap();
    });
    let seen = seen.unwrap();
    eprintln!("{name}: h2 saw:\n{seen}");
    assert!(seen.contains("MPLS (label 100") && seen.contains("[S], ttl 64)"), "{name}: {seen}");
    assert!(seen.contains("10.88.0.1 > 10.88.0.2: ICMP echo request"), "{name}: {seen}");

    // Push, change the TTL twice, pop: the frame leaves as it came in, so
    // the ping is answered (OpenFlow 1.0, Nicira encodings).
    flows(
        "-OOpenFlow10",
        "priority=20,ip,in_port=1,actions=push_mpls:0x8847,set_mpls_ttl(10),dec_mpls_ttl,pop_mpls:0x0800,output:2",
    );
    let (_, dump) = sw.ofctl(&["-OOpenFlow10", "dump-flows"]);
    assert!(
        dump.contains("actions=push_mpls:0x8847,set_mpls_ttl(10),dec_mpls_ttl,pop_mpls:0x0800,output:2"),
        "{name}: {dump}"
    );
    assert_eq!(h1.ping(&h2.ip, 3).unwrap(), 3, "{name}: pushed and popped frames arrive intact");

    // pop_mpls, then goto_table: the next table matches the popped frame's
    // IP fields, which only a second pass over the parsed frame can see
    // (a recirculation, as OVS does).
    let (ok, out) = sw.ofctl(&["-OOpenFlow13", "del-flows"]);
    assert!(ok, "{out}");
    for f in [
        "table=0,priority=20,ip,in_port=1,actions=push_mpls:0x8847,set_field:100->mpls_label,goto_table:1",
        "table=0,priority=10,arp,actions=NORMAL",
        "table=0,priority=10,in_port=2,actions=output:1",
        "table=1,priority=10,mpls,mpls_label=100,actions=pop_mpls:0x0800,goto_table:2",
        "table=2,priority=10,ip,nw_dst=10.88.0.2,actions=output:2",
    ] {
        let (ok, out) = sw.ofctl(&["-OOpenFlow13", "add-flow", f]);
        assert!(ok, "{name}: add-flow {f}: {out}");
    }
    assert_eq!(h1.ping(&h2.ip, 3).unwrap(), 3, "{name}: table 2 matched the popped frame's nw_dst");
    // The same with resubmit(,2) ending the rule instead of goto_table.
    let (ok, out) = sw.ofctl(&["-OOpenFlow13", "mod-flows", "table=1,mpls,actions=pop_mpls:0x0800,resubmit(,2)"]);
    assert!(ok, "{out}");
    assert_eq!(h1.ping(&h2.ip, 3).unwrap(), 3, "{name}: resubmit(,2) after pop_mpls matched the popped frame's nw_dst");
    // A resubmit in the middle of the rule: table 2 must see the popped
    // frame, and the rest of the rule (resubmit(,3), which needs the reg0
    // table 2 set) must run after it.
    for f in [
        "table=1,mpls,actions=pop_mpls:0x0800,resubmit(,2),resubmit(,3)",
        "table=2,ip,nw_dst=10.88.0.2,actions=load:1->NXM_NX_REG0[]",
    ] {
        let (ok, out) = sw.ofctl(&["-OOpenFlow13", "mod-flows", f]);
        assert!(ok, "{name}: mod-flows {f}: {out}");
    }
    let (ok, out) = sw.ofctl(&["-OOpenFlow13", "add-flow", "table=3,priority=10,reg0=1,actions=output:2"]);
    assert!(ok, "{name}: {out}");
    assert_eq!(
        h1.ping(&h2.ip, 3).unwrap(),
        3,
        "{name}: after pop_mpls, resubmit(,2) then resubmit(,3) in one rule reached table 3 with table 2's reg0"
    );

    // dec_mpls_ttl at TTL 1 drops.
    flows("-OOpenFlow13", "priority=20,ip,in_port=1,actions=push_mpls:0x8847,set_mpls_ttl(1),dec_mpls_ttl,output:2");
    let seen = h2.capture(&["mpls"], || {
        h1.ping(&h2.ip, 2).unwrap();
    });
    assert!(!seen.unwrap().contains("MPLS"), "{name}: an expired MPLS TTL is not forwarded");
}
