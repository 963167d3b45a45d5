//! OpenFlow registers end to end: flows written as OVN writes them
//! (registers as scratch between tables, `load`, `move`, `output:reg`,
//! registers and metadata carried across `ct(table=N)`), installed with
//! the real `ovs-ofctl` in OpenFlow 1.0 (NXM) and 1.3, and real frames
//! between namespaces.
//!
//! Plan (each test): two hosts (namespace + veth) on `xvs switch`, flows
//! whose forwarding decision lives only in registers, then pings.
//! Verified: the pipeline forwards by the register contents (and a wrong
//! register value stops the traffic, so the pass is not an accident);
//! after a recirculation through the tracker, rules that match the
//! registers and metadata set before `ct()` still match. Drop guards
//! remove hosts and daemon, also on failure. Needs root.
//!
//! `XVS_SWITCH=ovs cargo test -p xvs --test registers -- --test-threads=1`
//! runs the same scenarios against Open vSwitch 3.1.

use xvs::netns::Host;
use xvs::ovsref::Sut;

fn hosts(t: &str) -> (Host, Host) {
    std::env::set_var("XVS_BIN", env!("CARGO_BIN_EXE_xvs"));
    let id = std::process::id() % 1000;
    let mk = |i: u32| {
        Host::create(&format!("xvsrg{t}{id}h{i}"), &format!("xr{t}{id}h{i}"), &format!("10.93.{}.{i}/24", t.len()), 1)
            .unwrap()
    };
    (mk(1), mk(2))
}

fn start(t: &str, hs: &[&Host]) -> Sut {
    let ports: Vec<&str> = hs.iter().map(|h| h.port.as_str()).collect();
    Sut::start(env!("CARGO_BIN_EXE_xvs"), &format!("rg{t}"), &format!("brrg{t}"), &ports, &[])
}

fn install(d: &Sut, proto: &str, flows: &[String]) {
    d.ofctl_ok(&[proto, "del-flows"]);
    for f in flows {
        d.ofctl_ok(&[proto, "add-flow", f]);
    }
}

/// Table 0 says where a frame goes by loading the output port into a
/// register; table 1 moves it into another register's high half; table 2
/// matches that register and outputs to the port it holds.
fn pipeline(p1: u32, p2: u32, to_p2: u32) -> Vec<String> {
    vec![
        format!("table=0,priority=10,in_port={p1},actions=load:{to_p2}->reg1[0..15],resubmit(,1)"),
        format!("table=0,priority=10,in_port={p2},actions=load:{p1}->NXM_NX_REG1[0..15],resubmit(,1)"),
        "table=1,priority=10,actions=move:NXM_NX_REG1[0..15]->NXM_NX_REG5[16..31],resubmit(,2)".to_string(),
        format!("table=2,priority=10,reg5={:#x}/0xffff0000,actions=output:reg5[16..31]", to_p2 << 16),
        format!("table=2,priority=10,reg5={:#x}/0xffff0000,actions=output:NXM_NX_REG5[16..31]", p1 << 16),
        "table=2,priority=0,actions=drop".to_string(),
    ]
}

#[test]
fn registers_carry_the_forwarding_decision() {
    let (h1, h2) = hosts("p");
    let d = start("p", &[&h1, &h2]);
    let (p1, p2) = (d.ofport(&h1.port), d.ofport(&h2.port));
    for proto in ["-OOpenFlow13", "-OOpenFlow10"] {
        install(&d, proto, &pipeline(p1, p2, p2));
        let dump = d.ofctl_ok(&[proto, "dump-flows"]);
        eprintln!("{} {proto} dump-flows:\n{dump}", d.name());
        assert!(dump.contains("actions=move:NXM_NX_REG1[0..15]->NXM_NX_REG5[16..31],resubmit(,2)"), "{dump}");
        assert!(dump.contains("actions=output:NXM_NX_REG5[16..31]"), "{dump}");
        assert_eq!(h1.ping(&h2.ip, 3).unwrap(), 3, "{proto}: h1 -> h2 through the registers");
        // The same flows with a port that does not exist in the register:
        // nothing reaches h2 (the decision really is the register's).
        install(&d, proto, &pipeline(p1, p2, 77));
        assert_eq!(h1.ping(&h2.ip, 2).unwrap(), 0, "{proto}: register names port 77: no way through");
    }
}

#[test]
fn registers_and_metadata_survive_conntrack_recirculation() {
    let (h1, h2) = hosts("ct");
    let d = start("ct", &[&h1, &h2]);
    let (p1, p2) = (d.ofport(&h1.port), d.ofport(&h2.port));
    for proto in ["-OOpenFlow13", "-OOpenFlow10"] {
        let flows = |reg: u32| {
            vec![
                format!(
                    "table=0,priority=100,ip,ct_state=-trk,actions=load:{reg:#x}->reg0[],set_field:0x7->metadata,load:0x1->xreg4[63],ct(table=1,zone=9)"
                ),
                "table=0,priority=10,arp,actions=NORMAL".to_string(),
                format!("table=1,priority=100,ip,reg0=0x2a,reg8=0x80000000,metadata=0x7,in_port={p1},actions=output:{p2}"),
                format!("table=1,priority=100,ip,reg0=0x2a,reg8=0x80000000,metadata=0x7,in_port={p2},actions=output:{p1}"),
                "table=1,priority=1,actions=drop".to_string(),
            ]
        };
        install(&d, proto, &flows(0x2a));
        eprintln!("{} {proto} dump-flows:\n{}", d.name(), d.ofctl_ok(&[proto, "dump-flows"]));
        assert_eq!(h1.ping(&h2.ip, 3).unwrap(), 3, "{proto}: reg0, reg8 and metadata seen again after ct()");
        // Control: a different register value before ct() is seen as that.
        install(&d, proto, &flows(0x2b));
        assert_eq!(h1.ping(&h2.ip, 2).unwrap(), 0, "{proto}: reg0=0x2b does not match reg0=0x2a after ct()");
    }
}

/// push/pop carry a port number through the stack, and a clone's register
/// write does not leak into the actions after it: frames pass only if
/// both hold (the clone writes a port that does not exist).
#[test]
fn stack_and_clone_keep_the_pipeline_state_straight() {
    let (h1, h2) = hosts("stk");
    let d = start("stk", &[&h1, &h2]);
    let (p1, p2) = (d.ofport(&h1.port), d.ofport(&h2.port));
    let flow = |from: u32, to: u32| {
        format!(
            "table=0,priority=10,in_port={from},actions=load:{to}->reg3[],push:reg3[0..15],load:0->reg3[],pop:NXM_NX_REG4[0..15],clone(load:77->reg4[0..15]),output:reg4[0..15]"
        )
    };
    install(&d, "-OOpenFlow13", &[flow(p1, p2), flow(p2, p1)]);
    let dump = d.ofctl_ok(&["-OOpenFlow13", "dump-flows"]);
    eprintln!("{} dump-flows:\n{dump}", d.name());
    assert!(dump.contains("push:NXM_NX_REG3[0..15],load:0->NXM_NX_REG3[],pop:NXM_NX_REG4[0..15],clone(load:0x4d->NXM_NX_REG4[0..15]),output:NXM_NX_REG4[0..15]"), "{dump}");
    assert_eq!(h1.ping(&h2.ip, 3).unwrap(), 3, "the popped port, not the clone's, is output to");
}
