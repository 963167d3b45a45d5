//! Forwarding through OVN's pipeline, xvs against Open vSwitch 3.1, in one
//! run (issue 15's forwarding benchmark).
//!
//! The logical network of the OVN tests (`xvs::ovnref`: switches ls1 and
//! ls2, router lr1 between them, VMs as namespaces whose veth peers are
//! `type=afxdp` ports on br-int), programmed by Debian's ovn-northd and
//! ovn-controller 23.03 into each switch in turn, with
//! `other_config:pmd-cpu-mask=0x2` (the poll thread on CPU 1, as OVS users
//! pin it). Cases, 64-byte UDP frames, `--flows` source ports:
//! * `switch`: vm1 -> vm2 on ls1 (port security, the logical switch's L2
//!   lookup);
//! * `router`: vm1 -> vm3 through lr1 (ls1, the router: TTL and MAC
//!   rewrite, ls2);
//! * `acl`: vm1 -> vm2 again after `allow-related` ACLs on ls1 in both
//!   directions, so every packet goes through conntrack (`ct(commit)`, zones
//!   from registers) twice.
//!
//! The generator (`xvs util pktgen --frames-file`, pinned to CPU 0) sends
//! from vm1's namespace; the destination VM's eth0 runs the XDP
//! count-and-drop sink (`xvs util xdp-sink`). Printed: a table of delivered
//! packets/s (median of `--reps` runs), the xvs/OVS ratio, and the poll
//! threads' user CPU time per delivered packet (from /proc: the switch's own
//! work, without the kernel's veth and AF_XDP work in its system time),
//! which says what each switch spends while the generator, not the switch,
//! limits the rate (a busy-polling thread is busy either way); `--json
//! FILE` writes the figures. Everything is removed afterwards (the set-up's Drop),
//! also on failure.
//!
//! Run through `./bench.sh --only ovn`, or as root after a release build:
//! `XVS_BIN=target/release/xvs target/release/examples/ovn_bench [--seconds 3] [--flows 100] [--reps 3] [--no-ovs]`.

use std::process::Command;
use xvs::netns::{number_after, wait_file, xvs_exe, Host};
use xvs::ovnref::{eventually, Ovn};

struct Args {
    seconds: f64,
    flows: u16,
    reps: usize,
    json: Option<String>,
    with_ovs: bool,
}

fn args() -> Args {
    let mut a = Args { seconds: 3.0, flows: 100, reps: 3, json: None, with_ovs: true };
    let v: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < v.len() {
        let next = |i: usize| v.get(i + 1).unwrap_or_else(|| panic!("{} needs a value", v[i])).clone();
        match v[i].as_str() {
            "--seconds" => a.seconds = next(i).parse().expect("--seconds: a number"),
            "--flows" => a.flows = next(i).parse().expect("--flows: 1-65535"),
            "--reps" => a.reps = next(i).parse().expect("--reps: a count"),
            "--json" => a.json = Some(next(i)),
            "--no-ovs" => {
                a.with_ovs = false;
                i += 1;
                continue;
            }
            other => panic!("unknown argument {other:?} (see the file's header)"),
        }
        i += 2;
    }
    a
}

fn mac(s: &str) -> [u8; 6] {
    let mut m = [0u8; 6];
    for (b, p) in m.iter_mut().zip(s.split(':')) {
        *b = u8::from_str_radix(p, 16).expect("a MAC");
    }
    m
}

fn ip(s: &str) -> u32 {
    u32::from(s.parse::<std::net::Ipv4Addr>().expect("an IPv4 address"))
}

/// A frames file for pktgen: UDP from vm1 to `dst_ip` through `dst_mac`,
/// one frame per source port.
fn frames(dst_mac: &str, dst_ip: &str, flows: u16) -> String {
    let path = format!("/tmp/xvs-ovnbench-{}-{dst_ip}.hex", std::process::id());
    let mut text = String::new();
    for f in 0..flows {
        let b = wire::build::Frame::new(mac("00:00:00:00:01:01"), mac(dst_mac))
            .ipv4(ip("10.0.1.1"), ip(dst_ip))
            .udp(10_000 + f, 5001)
            .payload(&[0u8; 18])
            .build();
        text.extend(b.iter().map(|x| format!("{x:02x}")));
        text.push('\n');
    }
    std::fs::write(&path, text).expect("writing the frames file");
    path
}

/// User CPU time so far of the switch's poll threads (their names start
/// with "pmd" in both switches), in ns: the switch's own work per packet,
/// without the kernel's transmit and receive work that runs in its
/// system time.
fn pmd_user_ns(o: &Ovn) -> f64 {
    let pid = o.switch_pid().expect("the switch's pid");
    let hz = 100.0; // USER_HZ
    let mut ticks = 0u64;
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).expect("/proc/PID/task").flatten() {
        let p = t.path();
        let comm = std::fs::read_to_string(p.join("comm")).unwrap_or_default();
        if !comm.starts_with("pmd") {
            continue;
        }
        let stat = std::fs::read_to_string(p.join("stat")).unwrap_or_default();
        // Fields after the command's closing parenthesis: utime is the 12th.
        if let Some(u) = stat.rsplit(')').next().and_then(|r| r.split_whitespace().nth(11)) {
            ticks += u.parse::<u64>().unwrap_or(0);
        }
    }
    ticks as f64 * 1e9 / hz
}

/// One run: packets/s sent from `src` and delivered to `dst`.
fn once(src: &Host, dst: &Host, frames: &str, secs: f64) -> (f64, f64) {
    let ready = format!("/tmp/xvs-ovnbench-ready-{}", std::process::id());
    let _ = std::fs::remove_file(&ready);
    let sink = dst
        .util(&["xdp-sink", "--dev", "eth0", "--seconds", &format!("{}", secs + 1.0), "--ready-file", &ready])
        .expect("starting the sink");
    wait_file(&ready, 5000);
    let exe = xvs_exe();
    let gen = Command::new("ip")
        .args(["netns", "exec", &src.ns, "taskset", "-c", "0"])
        .arg(&exe)
        .args(["util", "pktgen", "--dev", "eth0", "--frames-file", frames, "--seconds", &format!("{secs}")])
        .output()
        .expect("running pktgen");
    let sink = sink.wait_with_output().expect("the sink");
    let _ = std::fs::remove_file(&ready);
    let sent = number_after(&String::from_utf8_lossy(&gen.stdout), "sent").expect("pktgen says what it sent");
    let got = number_after(&String::from_utf8_lossy(&sink.stdout), "received").expect("the sink's count");
    (sent as f64 / secs, got as f64 / secs)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// The three cases on one switch: (case, offered pps, delivered pps, poll
/// threads' user ns per delivered packet).
fn cases(ovs: bool, a: &Args) -> Vec<(&'static str, f64, f64, f64)> {
    let mut o = Ovn::start_with(&xvs_exe().to_string_lossy(), ovs, Some("0x2"));
    o.two_switches_and_a_router();
    let (vm1, vm2, vm3) = (o.host(0), o.host(1), o.host(2));
    assert!(eventually(20, || vm1.ping(&vm2.ip, 1).unwrap_or(0) == 1), "vm1 reaches vm2");
    assert!(eventually(20, || vm1.ping(&vm3.ip, 1).unwrap_or(0) == 1), "vm1 reaches vm3 through the router");
    let flows_of = |o: &Ovn| {
        o.run(&["ovs-ofctl", "-OOpenFlow15", "dump-flows", &format!("unix:{}/br-int.mgmt", o.run_dir())])
            .lines()
            .count()
    };
    eprintln!("{}: br-int has {} flows from ovn-controller", if ovs { "ovs" } else { "xvs" }, flows_of(&o));
    let to_vm2 = frames("00:00:00:00:01:02", "10.0.1.2", a.flows);
    let to_vm3 = frames("00:00:00:00:ff:01", "10.0.2.1", a.flows);
    let mut out = Vec::new();
    let mut run = |o: &Ovn, name: &'static str, dst: &Host, f: &str| {
        let b0 = pmd_user_ns(o);
        let r: Vec<(f64, f64)> = (0..a.reps).map(|_| once(vm1, dst, f, a.seconds)).collect();
        let busy = pmd_user_ns(o) - b0;
        let delivered: f64 = r.iter().map(|x| x.1 * a.seconds).sum();
        let (off, got) = (median(r.iter().map(|x| x.0).collect()), median(r.iter().map(|x| x.1).collect()));
        let per = busy / delivered.max(1.0);
        eprintln!(
            "  {name}: offered {off:.0} pps, delivered {got:.0} pps, poll threads' user time {per:.0} ns per packet"
        );
        out.push((name, off, got, per));
    };
    run(&o, "switch", vm2, &to_vm2);
    run(&o, "router", vm3, &to_vm3);
    for dir in ["from-lport", "to-lport"] {
        o.nbctl(&["acl-add", "ls1", dir, "1000", "ip4", "allow-related"]);
    }
    o.sync();
    assert!(eventually(20, || vm1.ping(&vm2.ip, 1).unwrap_or(0) == 1), "vm1 reaches vm2 through the ACLs");
    let ct = o.run(&["ovs-ofctl", "-OOpenFlow15", "dump-flows", &format!("unix:{}/br-int.mgmt", o.run_dir())]);
    eprintln!("  with the ACLs: {} flows, {} with ct(", ct.lines().count(), ct.matches("ct(").count());
    run(&o, "acl", vm2, &to_vm2);
    for f in [to_vm2, to_vm3] {
        let _ = std::fs::remove_file(f);
    }
    out
}

fn main() {
    let a = args();
    if !Ovn::available() {
        eprintln!("ovn_bench: needs ovn-central and ovn-host (scripts/setup.sh installs them)");
        std::process::exit(2);
    }
    let xvs = cases(false, &a);
    let ovs = if a.with_ovs { cases(true, &a) } else { Vec::new() };
    println!("\nOVN pipeline, 64-byte UDP, {} flows, {} s x {} runs (median)", a.flows, a.seconds, a.reps);
    println!(
        "{:<8}{:>13}{:>11}{:>13}{:>11}{:>9}{:>14}{:>14}",
        "case", "xvs offered", "xvs pps", "ovs offered", "ovs pps", "xvs/ovs", "xvs usr ns", "ovs usr ns"
    );
    let mut json = Vec::new();
    for (i, (name, off, got, per)) in xvs.iter().enumerate() {
        let (o_off, o_got, o_per) = ovs.get(i).map_or((0.0, 0.0, 0.0), |x| (x.1, x.2, x.3));
        let ratio = if o_got > 0.0 { format!("{:.2}", got / o_got) } else { "-".into() };
        println!("{name:<8}{off:>13.0}{got:>11.0}{o_off:>13.0}{o_got:>11.0}{ratio:>9}{per:>14.0}{o_per:>14.0}");
        json.push(serde_json::json!({"case": name, "flows": a.flows, "seconds": a.seconds, "reps": a.reps,
            "xvs_offered_pps": off.round(), "xvs_pps": got.round(), "xvs_pmd_user_ns_per_packet": per.round(),
            "ovs_offered_pps": o_off.round(), "ovs_pps": o_got.round(), "ovs_pmd_user_ns_per_packet": o_per.round()}));
    }
    if let Some(p) = a.json {
        std::fs::write(&p, serde_json::to_string_pretty(&json).expect("json")).expect("writing --json");
    }
}
