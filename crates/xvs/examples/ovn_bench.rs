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
//!   from registers) twice;
//! * flow setup (before the ACLs): 400,000 frames from vm1, each to a new
//!   unknown MAC on ls1, sent for one second; every one is a new megaflow
//!   (OVN's L2 lookup matches the destination MAC exactly), so the switch
//!   translates through OVN's tables once per frame. Reported: upcalls per
//!   second, the "upcall rate on the same flows".
//!
//! The generator (`xvs util pktgen --frames-file`, pinned to CPU 0) sends
//! from vm1's namespace; the destination VM's eth0 runs the XDP
//! count-and-drop sink (`xvs util xdp-sink`). Printed: a table of delivered
//! packets/s (median of `--reps` runs), the xvs/OVS ratio, and each
//! switch's processing time per delivered packet (see `busy_ns`); `--json
//! FILE` writes the figures. xvs runs with `other_config:pmd-maxsleep=0`
//! (spin, never sleep), which is Open vSwitch's default, so both poll the
//! same way; `--xvs-adaptive` leaves xvs's own default (adaptive polling). Everything is removed afterwards (the set-up's Drop),
//! also on failure.
//!
//! Run through `./bench.sh --only ovn`, or as root after a release build:
//! `XVS_BIN=target/release/xvs target/release/examples/ovn_bench [--seconds 3] [--flows 100] [--reps 3] [--no-ovs] [--xvs-adaptive]`.

use std::process::Command;
use xvs::netns::{number_after, wait_file, xvs_exe, Host};
use xvs::ovnref::{eventually, Ovn};

struct Args {
    seconds: f64,
    flows: u16,
    reps: usize,
    json: Option<String>,
    with_ovs: bool,
    /// xvs spins as OVS does (`other_config:pmd-maxsleep=0`); false with
    /// `--xvs-adaptive`.
    xvs_busy: bool,
    /// `--capture DIR`: only write the fixture of the translation benchmark
    /// (see [`capture`]) and exit.
    capture: Option<String>,
}

fn args() -> Args {
    let mut a = Args { seconds: 3.0, flows: 100, reps: 3, json: None, with_ovs: true, xvs_busy: true, capture: None };
    let v: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < v.len() {
        let next = |i: usize| v.get(i + 1).unwrap_or_else(|| panic!("{} needs a value", v[i])).clone();
        match v[i].as_str() {
            "--seconds" => a.seconds = next(i).parse().expect("--seconds: a number"),
            "--flows" => a.flows = next(i).parse().expect("--flows: 1-65535"),
            "--reps" => a.reps = next(i).parse().expect("--reps: a count"),
            "--json" => a.json = Some(next(i)),
            "--capture" => a.capture = Some(next(i)),
            "--no-ovs" => {
                a.with_ovs = false;
                i += 1;
                continue;
            }
            "--xvs-adaptive" => {
                a.xvs_busy = false;
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

/// Upcalls (datapath misses sent to the slow path) so far: xvs's
/// `pmd-stats`, OVS's "miss with success/failed upcall".
fn upcalls(o: &Ovn, ovs: bool) -> f64 {
    if ovs {
        let pid = o.switch_pid().expect("ovs-vswitchd's pid");
        let out =
            o.run(&["ovs-appctl", "-t", &format!("{}/ovs-vswitchd.{pid}.ctl", o.dir), "dpif-netdev/pmd-stats-show"]);
        out.lines()
            .filter_map(|l| {
                let l = l.trim();
                l.strip_prefix("miss with success upcall: ").or_else(|| l.strip_prefix("miss with failed upcall: "))
            })
            .filter_map(|v| v.trim().parse::<f64>().ok())
            .sum()
    } else {
        let out = o.run(&[&xvs_exe().to_string_lossy(), "pmd-stats", "--run-dir", &o.run_dir(), "--json"]);
        let v: serde_json::Value = serde_json::from_str(&out).expect("pmd-stats --json");
        v["pmds"].as_array().into_iter().flatten().filter_map(|p| p["upcalls"].as_f64()).sum()
    }
}

/// Flow setup through the pipeline: `n` frames from vm1, each to a
/// different unknown MAC (`base` + i) on ls1. ovn-controller's L2 lookup
/// matches the destination MAC exactly and the miss drops, so every frame
/// is a new megaflow in both switches: one upcall each. Returns upcalls per
/// second over one second of sending (more frames than either switch sets
/// up in a second).
fn setup_rate(o: &Ovn, ovs: bool, src: &Host, base: u64, n: u64) -> f64 {
    let path = format!("/tmp/xvs-ovnbench-{}-setup.hex", std::process::id());
    let mut text = String::with_capacity(n as usize * 121);
    for i in 0..n {
        let m = (0x0200_0000_0000 | (base + i)).to_be_bytes();
        let b = wire::build::Frame::new(mac("00:00:00:00:01:01"), [m[2], m[3], m[4], m[5], m[6], m[7]])
            .ipv4(ip("10.0.1.1"), ip("10.0.1.2"))
            .udp(10_000, 5001)
            .payload(&[0u8; 18])
            .build();
        text.extend(b.iter().map(|x| format!("{x:02x}")));
        text.push('\n');
    }
    std::fs::write(&path, text).expect("writing the frames file");
    let u0 = upcalls(o, ovs);
    let gen = Command::new("ip")
        .args(["netns", "exec", &src.ns, "taskset", "-c", "0"])
        .arg(xvs_exe())
        .args(["util", "pktgen", "--dev", "eth0", "--frames-file", &path, "--seconds", "1"])
        .output()
        .expect("running pktgen");
    let _ = std::fs::remove_file(&path);
    assert!(gen.status.success(), "pktgen: {}", String::from_utf8_lossy(&gen.stderr));
    // Upcalls still queued when the generator stops are counted too.
    std::thread::sleep(std::time::Duration::from_millis(500));
    upcalls(o, ovs) - u0
}

/// The poll threads' processing time so far, in ns: the time of the
/// iterations that moved packets (xvs: `busy_ns` of `xvs pmd-stats`; OVS:
/// the processing cycles of `dpif-netdev/pmd-stats-show`, at the CPU's
/// clock). Idle polling is left out, so with both switches spinning this is
/// what packets cost, the kernel's transmit work inside those iterations
/// included.
fn busy_ns(o: &Ovn, ovs: bool) -> f64 {
    if ovs {
        let pid = o.switch_pid().expect("ovs-vswitchd's pid");
        let ctl = format!("{}/ovs-vswitchd.{pid}.ctl", o.dir);
        let out = o.run(&["ovs-appctl", "-t", &ctl, "dpif-netdev/pmd-stats-show"]);
        let cycles: f64 = out
            .lines()
            .filter_map(|l| l.trim().strip_prefix("processing cycles: "))
            .filter_map(|l| l.split_whitespace().next()?.parse::<f64>().ok())
            .sum();
        cycles * 1000.0 / xvs::cpu_mhz()
    } else {
        let out = o.run(&[&xvs_exe().to_string_lossy(), "pmd-stats", "--run-dir", &o.run_dir(), "--json"]);
        let v: serde_json::Value = serde_json::from_str(&out).expect("pmd-stats --json");
        v["pmds"].as_array().into_iter().flatten().filter_map(|p| p["busy_ns"].as_f64()).sum()
    }
}

/// With `OVN_BENCH_DIAG=1`: xvs's `show` and `pmd-stats` after a case
/// (port counters with the AF_XDP queues' drops, drops by reason), on
/// stderr, to see where a case lost frames.
fn diag(o: &Ovn, ovs: bool, case: &str) {
    if ovs || std::env::var("OVN_BENCH_DIAG").as_deref() != Ok("1") {
        return;
    }
    for cmd in ["show", "pmd-stats"] {
        let out = o.run(&[&xvs_exe().to_string_lossy(), cmd, "--run-dir", &o.run_dir()]);
        eprintln!("--- {case}: xvs {cmd}\n{out}");
    }
    let stats = o.vsctl(&["--columns=name,statistics", "list", "interface"]);
    eprintln!("--- {case}: Interface statistics\n{stats}");
    let links = o.run(&["ip", "-s", "-s", "link"]);
    eprintln!("--- {case}: ip -s -s link\n{links}");
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

/// The three cases on one switch: (case, offered pps, delivered pps,
/// processing ns per delivered packet), and the flow setup rate.
fn cases(ovs: bool, a: &Args) -> (Vec<(&'static str, f64, f64, f64)>, f64) {
    let busy = !ovs && a.xvs_busy;
    // The AF_XDP datapaths compared: xvs's kernel fast path off (the
    // sink's XDP program would take redirected frames). OVS ignores the key.
    let conf: &[&str] = if busy {
        &["pmd-cpu-mask=0x2", "pmd-maxsleep=0", "xdp-offload=false"]
    } else {
        &["pmd-cpu-mask=0x2", "xdp-offload=false"]
    };
    let mut o = Ovn::start_with(&xvs_exe().to_string_lossy(), ovs, conf);
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
        let b0 = busy_ns(o, ovs);
        let r: Vec<(f64, f64)> = (0..a.reps).map(|_| once(vm1, dst, f, a.seconds)).collect();
        let busy = busy_ns(o, ovs) - b0;
        let delivered: f64 = r.iter().map(|x| x.1 * a.seconds).sum();
        let (off, got) = (median(r.iter().map(|x| x.0).collect()), median(r.iter().map(|x| x.1).collect()));
        let per = busy / delivered.max(1.0);
        eprintln!("  {name}: offered {off:.0} pps, delivered {got:.0} pps, {per:.0} ns of processing per packet");
        diag(o, ovs, name);
        out.push((name, off, got, per));
    };
    run(&o, "switch", vm2, &to_vm2);
    run(&o, "router", vm3, &to_vm3);
    let setups: Vec<f64> = (0..a.reps as u64).map(|r| setup_rate(&o, ovs, vm1, (r + 1) << 24, 400_000)).collect();
    let setup = median(setups);
    eprintln!("  flow setup: {setup:.0} upcalls/s");
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
    (out, setup)
}

/// Writes the fixture of the translation benchmark
/// (`crates/ofproto/benches/ovn.rs`) into `dir`: what ovn-controller
/// installed on br-int of Open vSwitch 3.1 for the benchmark's logical
/// network, as `ovs-ofctl` prints it (`flows.txt`, `groups.txt`,
/// `tlv.txt`, `ports.txt`), once as set up and once with the `acl` case's
/// ACLs (`acl-flows.txt`, `acl-groups.txt`), and the logical flows they came
/// from (`lflows.txt`, for reading). OVS is the source, so the benchmark
/// translates exactly the flows OVS's upcall rate was measured on.
fn capture(dir: &str) {
    std::fs::create_dir_all(dir).expect("creating the capture directory");
    let mut o = Ovn::start_with(&xvs_exe().to_string_lossy(), true, &["pmd-cpu-mask=0x2"]);
    o.two_switches_and_a_router();
    let (vm1, vm2) = (o.host(0), o.host(1));
    assert!(eventually(20, || vm1.ping(&vm2.ip, 1).unwrap_or(0) == 1), "vm1 reaches vm2");
    let mgmt = format!("unix:{}/br-int.mgmt", o.run_dir());
    let ofctl = |o: &Ovn, cmd: &str| o.run(&["ovs-ofctl", "-OOpenFlow15", cmd, &mgmt, "--no-stats"][..]);
    let write = |name: &str, text: String| {
        std::fs::write(format!("{dir}/{name}"), text).unwrap_or_else(|e| panic!("writing {name}: {e}"))
    };
    write("flows.txt", ofctl(&o, "dump-flows"));
    write("groups.txt", o.run(&["ovs-ofctl", "-OOpenFlow15", "dump-groups", &mgmt]));
    write("tlv.txt", o.run(&["ovs-ofctl", "-OOpenFlow15", "dump-tlv-map", &mgmt]));
    write("ports.txt", o.run(&["ovs-ofctl", "-OOpenFlow15", "show", &mgmt]));
    let sb = format!("--db=unix:{}/sb.sock", o.dir);
    write("lflows.txt", o.run(&["ovn-sbctl", &sb, "lflow-list"]));
    for d in ["from-lport", "to-lport"] {
        o.nbctl(&["acl-add", "ls1", d, "1000", "ip4", "allow-related"]);
    }
    o.sync();
    assert!(eventually(20, || vm1.ping(&vm2.ip, 1).unwrap_or(0) == 1), "vm1 reaches vm2 through the ACLs");
    write("acl-flows.txt", ofctl(&o, "dump-flows"));
    write("acl-groups.txt", o.run(&["ovs-ofctl", "-OOpenFlow15", "dump-groups", &mgmt]));
    eprintln!("ovn_bench: fixture written to {dir}");
}

fn main() {
    let a = args();
    if !Ovn::available() {
        eprintln!("ovn_bench: needs ovn-central and ovn-host (scripts/setup.sh installs them)");
        std::process::exit(2);
    }
    if let Some(dir) = &a.capture {
        capture(dir);
        return;
    }
    let (xvs, xvs_setup) = cases(false, &a);
    let (ovs, ovs_setup) = if a.with_ovs { cases(true, &a) } else { (Vec::new(), 0.0) };
    println!(
        "\nOVN pipeline, 64-byte UDP, {} flows, {} s x {} runs (median); xvs {}",
        a.flows,
        a.seconds,
        a.reps,
        if a.xvs_busy { "spinning (pmd-maxsleep=0, as OVS)" } else { "with adaptive polling (its default)" }
    );
    println!(
        "{:<8}{:>13}{:>11}{:>13}{:>11}{:>9}{:>14}{:>14}",
        "case", "xvs offered", "xvs pps", "ovs offered", "ovs pps", "xvs/ovs", "xvs busy ns", "ovs busy ns"
    );
    let mut json = Vec::new();
    for (i, (name, off, got, per)) in xvs.iter().enumerate() {
        let (o_off, o_got, o_per) = ovs.get(i).map_or((0.0, 0.0, 0.0), |x| (x.1, x.2, x.3));
        let ratio = if o_got > 0.0 { format!("{:.2}", got / o_got) } else { "-".into() };
        println!("{name:<8}{off:>13.0}{got:>11.0}{o_off:>13.0}{o_got:>11.0}{ratio:>9}{per:>14.0}{o_per:>14.0}");
        json.push(serde_json::json!({"case": name, "flows": a.flows, "seconds": a.seconds, "reps": a.reps,
            "xvs_offered_pps": off.round(), "xvs_pps": got.round(), "xvs_busy_ns_per_packet": per.round(),
            "ovs_offered_pps": o_off.round(), "ovs_pps": o_got.round(), "ovs_busy_ns_per_packet": o_per.round()}));
    }
    let ratio = if ovs_setup > 0.0 { format!("{:.2}", xvs_setup / ovs_setup) } else { "-".into() };
    println!(
        "flow setup (a new destination MAC per frame, one upcall each): xvs {xvs_setup:.0}/s, ovs {ovs_setup:.0}/s, xvs/ovs {ratio}"
    );
    json.push(serde_json::json!({"case": "flow setup", "xvs_upcalls_per_s": xvs_setup.round(),
        "ovs_upcalls_per_s": ovs_setup.round(), "reps": a.reps}));
    if let Some(p) = a.json {
        std::fs::write(&p, serde_json::to_string_pretty(&json).expect("json")).expect("writing --json");
    }
}
