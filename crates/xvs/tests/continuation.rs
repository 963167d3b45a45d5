//! Paused pipelines: `controller(pause)` sends an NXT_PACKET_IN2 with a
//! continuation, and NXT_RESUME runs the rest, table by table, with the
//! registers the pipeline had (what ovn-controller's DHCP, DNS and ICMP
//! error answers rely on). The controller is the real
//! `ovs-ofctl monitor ... resume`, which hands every continuation straight
//! back, and prints it as Open vSwitch decodes it. `XVS_SWITCH=ovs` runs the
//! same test against Open vSwitch 3.1. Needs root.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use xvs::netns::Host;
use xvs::ovsref::Sut;

#[test]
fn paused_pipeline_resumes_with_its_registers() {
    let (h1, h2, sw) = two_hosts_on_a_switch("ct", 0);
    let flows = [
        "table=0,priority=10,arp,in_port=1,actions=output:2",
        "table=0,priority=10,in_port=2,actions=output:1",
        // reg0 is set before the pause; the rest of this rule (output:2)
        // and of table 1's (load, resubmit) must run on resume, in order.
        "table=0,priority=10,ip,in_port=1,actions=load:1->NXM_NX_REG0[],resubmit(,1),output:2",
        "table=1,priority=10,reg0=1,ip,actions=controller(userdata=01.02,pause),load:5->NXM_NX_REG1[],resubmit(,2)",
        // Matches only if reg0 survived the round trip and reg1 was set after it.
        "table=2,priority=10,reg0=1,reg1=5,ip,actions=drop",
    ];
    for f in flows {
        let (ok, out) = sw.ofctl(&["--protocols=OpenFlow15", "add-flow", f]);
        assert!(ok, "{} add-flow {f}: {out}", sw.name());
    }
    // Without a controller to resume it, the pipeline stays paused.
    assert_eq!(h1.ping(&h2.ip, 2).unwrap(), 0, "{}: nothing forwards before a resume", sw.name());

    let (got, all) = ping_with_resuming_controller(&sw, &h1, &h2);
    assert!(got >= 3, "{}: pings answered through resumed pipelines: {got}", sw.name());
    assert!(all.contains("NXT_PACKET_IN2") && all.contains("userdata=01.02"), "{all}");
    // The rest of table 1's rule, then the rest of table 0's, as Open
    // vSwitch's own decoder reads them.
    let cont =
        all.lines().find(|l| l.contains("continuation.actions=")).unwrap_or_else(|| panic!("no continuation:\n{all}"));
    let (inner, outer) = (cont.find("set_field:0x5->reg1,resubmit(,2)"), cont.rfind("output:2"));
    assert!(inner.is_some() && outer.is_some() && inner < outer && cont.contains("unroll_xlate("), "{cont}");
    assert!(all.contains("send: NXT_RESUME"), "the monitor resumed:\n{all}");
    let (_, dump) = sw.ofctl(&["--protocols=OpenFlow15", "dump-flows", "table=2"]);
    let n: u64 =
        dump.split("n_packets=").nth(1).and_then(|s| s.split(',').next()).and_then(|s| s.parse().ok()).unwrap_or(0);
    assert!(n >= 3, "{}: table 2 saw the resumed packets with reg0 and reg1 set: {dump}", sw.name());
}

/// Two hosts (10.87.NET.1 and .2) on ports 1 and 2 of a switch under
/// test (xvs, or OVS 3.1 with `XVS_SWITCH=ovs`); `tag` keeps each test's
/// namespaces, links and bridge apart.
fn two_hosts_on_a_switch(tag: &str, net: u8) -> (Host, Host, Sut) {
    std::env::set_var("XVS_BIN", env!("CARGO_BIN_EXE_xvs"));
    let id = std::process::id() % 1000;
    let mk = |i: u32| {
        Host::create(&format!("xvs{tag}{id}h{i}"), &format!("x{tag}{id}h{i}"), &format!("10.87.{net}.{i}/24"), 1)
            .unwrap()
    };
    let (h1, h2) = (mk(1), mk(2));
    let sw = Sut::start(
        env!("CARGO_BIN_EXE_xvs"),
        &format!("cont{tag}"),
        &format!("brcont{tag}"),
        &[&h1.port, &h2.port],
        &[],
    );
    (h1, h2, sw)
}

/// Pings h2 from h1 (up to 3 answers, 10 s) while `ovs-ofctl monitor ...
/// resume` hands every paused packet's continuation back. Returns the
/// answers and what the monitor printed (it prints what it receives and,
/// with resume, what it sends on stderr).
fn ping_with_resuming_controller(sw: &Sut, h1: &Host, h2: &Host) -> (u32, String) {
    let target = format!("unix:{}/{}.mgmt", sw.run_dir, sw.bridge);
    // Its control socket goes into the switch's run directory: the
    // default, /var/run/openvswitch, need not exist on a fresh machine.
    let mut mon = Command::new("ovs-ofctl")
        .env("OVS_RUNDIR", &sw.run_dir)
        .args(["-O", "OpenFlow15", "-P", "nxt_packet_in2", "monitor", &target, "resume"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ovs-ofctl monitor runs");
    std::thread::sleep(Duration::from_millis(500));
    let t0 = Instant::now();
    let mut got = 0;
    while t0.elapsed() < Duration::from_secs(10) && got < 3 {
        got += h1.ping(&h2.ip, 1).unwrap();
    }
    let _ = mon.kill();
    let (mut out, mut err) = (String::new(), String::new());
    mon.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    mon.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    let _ = mon.wait();
    eprintln!(
        "{}: monitor printed:\n{}\n{}",
        sw.name(),
        out.lines().take(8).collect::<Vec<_>>().join("\n"),
        err.lines().take(6).collect::<Vec<_>>().join("\n")
    );
    (got, out + &err)
}

/// Packets counted by the rules of `table` (summed).
fn table_packets(sw: &Sut, table: u8) -> u64 {
    let (_, dump) = sw.ofctl(&["--protocols=OpenFlow15", "dump-flows", &format!("table={table}")]);
    dump.split("n_packets=").skip(1).filter_map(|s| s.split(',').next()?.parse::<u64>().ok()).sum()
}

fn add_flows(sw: &Sut, flows: &[&str], groups: &[&str]) {
    for g in groups {
        let (ok, out) = sw.ofctl(&["--protocols=OpenFlow15", "add-group", g]);
        assert!(ok, "{} add-group {g}: {out}", sw.name());
    }
    for f in flows {
        let (ok, out) = sw.ofctl(&["--protocols=OpenFlow15", "add-flow", f]);
        assert!(ok, "{} add-flow {f}: {out}", sw.name());
    }
}

/// A pause inside `clone`: the continuation holds the clone's rest, with
/// the push/pop stack as it was, and nothing after the clone runs (Open
/// vSwitch 3.1's semantics: the walk ends with the clone's freeze).
#[test]
fn pause_inside_a_clone_resumes_the_clone_with_its_stack() {
    let (h1, h2, sw) = two_hosts_on_a_switch("cc", 1);
    add_flows(
        &sw,
        &[
            "table=0,priority=10,arp,in_port=1,actions=output:2",
            "table=0,priority=10,in_port=2,actions=output:1",
            // 9 goes on the stack and reg4 is cleared before the clone:
            // only the stack can bring the 9 back after the resume.
            "table=0,priority=10,ip,in_port=1,actions=load:9->NXM_NX_REG4[],push:NXM_NX_REG4[],load:0->NXM_NX_REG4[],\
             clone(load:7->NXM_NX_REG3[],controller(userdata=03,pause),pop:NXM_NX_REG5[],resubmit(,3)),resubmit(,4)",
            "table=3,priority=10,ip,reg3=7,reg5=9,actions=output:2",
            // After the clone: never reached.
            "table=4,priority=10,ip,actions=drop",
        ],
        &[],
    );
    assert_eq!(h1.ping(&h2.ip, 2).unwrap(), 0, "{}: nothing forwards before a resume", sw.name());
    let (got, all) = ping_with_resuming_controller(&sw, &h1, &h2);
    assert!(got >= 3, "{}: pings answered through the clone's resumed rest: {got}\n{all}", sw.name());
    let cont =
        all.lines().find(|l| l.contains("continuation.actions=")).unwrap_or_else(|| panic!("no continuation:\n{all}"));
    assert!(cont.contains("pop:NXM_NX_REG5[]") && cont.contains("resubmit(,3)"), "{}: {cont}", sw.name());
    assert!(!cont.contains("resubmit(,4)"), "{}: the actions after the clone are not frozen: {cont}", sw.name());
    assert!(all.contains("continuation.stack=(top) 0x9 (bottom)"), "{}: the stack travels with it:\n{all}", sw.name());
    assert!(table_packets(&sw, 3) >= 3, "{}: table 3 saw reg5=9 from the stack", sw.name());
    assert_eq!(table_packets(&sw, 4), 0, "{}: nothing after the clone ran", sw.name());
}

/// A pause in a table that a group bucket resubmitted to freezes that
/// bucket's walk only; the actions after the group go on at once with the
/// packet as it was. (A `controller` action written in the bucket itself
/// never runs in Open vSwitch, which executes a bucket as an action set,
/// so the pause is one table down.)
#[test]
fn pause_under_a_group_bucket_resumes_the_bucket_and_the_walk_goes_on() {
    let (h1, h2, sw) = two_hosts_on_a_switch("cg", 2);
    add_flows(
        &sw,
        &[
            "table=0,priority=10,arp,in_port=1,actions=output:2",
            "table=0,priority=10,in_port=2,actions=output:1",
            "table=0,priority=10,ip,in_port=1,actions=group:1,resubmit(,4)",
            "table=5,priority=10,ip,reg6=2,actions=controller(userdata=06,pause),resubmit(,6)",
            "table=6,priority=10,ip,reg6=2,actions=output:2",
            // After the group: runs for every packet, paused or not, with
            // the bucket's write undone.
            "table=4,priority=10,ip,reg6=0,actions=drop",
        ],
        &["group_id=1,type=all,bucket=actions=load:2->NXM_NX_REG6[],resubmit(,5)"],
    );
    assert_eq!(h1.ping(&h2.ip, 2).unwrap(), 0, "{}: nothing forwards before a resume", sw.name());
    assert!(table_packets(&sw, 4) >= 2, "{}: the walk went on after the paused bucket", sw.name());
    let (got, all) = ping_with_resuming_controller(&sw, &h1, &h2);
    assert!(got >= 3, "{}: pings answered through the bucket's resumed rest: {got}\n{all}", sw.name());
    let cont =
        all.lines().find(|l| l.contains("continuation.actions=")).unwrap_or_else(|| panic!("no continuation:\n{all}"));
    assert!(cont.contains("resubmit(,6)") && !cont.contains("resubmit(,4)"), "{}: {cont}", sw.name());
    assert!(table_packets(&sw, 6) >= 3, "{}: table 6 saw the resumed packets", sw.name());
}
