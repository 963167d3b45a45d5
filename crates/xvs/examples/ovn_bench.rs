//! Forwarding through OVN's pipeline, xvs against Open vSwitch 3.1, in one
//! run (issue 15's forwarding benchmark).
//!
//! One OVN deployment (`xvs::ovnmulti`) with two hypervisors: hv1 runs
//! xvs, hv2 Open vSwitch 3.1, each in its own namespace with its own
//! ovsdb-server and Debian's ovn-controller 23.03, both programmed by the
//! same ovn-northd from one logical network: switches ls1 and ls2, router
//! lr1 between them, and on each hypervisor three VMs (namespaces whose
//! veth peers are `type=afxdp` ports on br-int): x1, x2 on ls1 and x3 on
//! ls2 on hv1; o1, o2, o3 likewise on hv2. Both switches have
//! `other_config:pmd-cpu-mask=0x2` (the poll thread on CPU 1, as OVS users
//! pin it). Cases, 64-byte UDP frames, `--flows` source ports:
//! * `switch`: VM 1 -> VM 2 on ls1 (port security, the logical switch's L2
//!   lookup);
//! * `router`: VM 1 -> VM 3 through lr1 (ls1, the router: TTL and MAC
//!   rewrite, ls2);
//! * `acl`: VM 1 -> VM 2 again after `allow-related` ACLs on ls1 in both
//!   directions, so every packet goes through conntrack (`ct(commit)`, zones
//!   from registers) twice;
//! * flow setup (before the ACLs): 400,000 frames from VM 1, each to a new
//!   unknown MAC on ls1, sent for one second; every one is a new megaflow
//!   (OVN's L2 lookup matches the destination MAC exactly), so the switch
//!   translates through OVN's tables once per frame. Reported: upcalls per
//!   second, the "upcall rate on the same flows".
//!
//! The switches take turns: for each rep of each case, one switch runs and
//! the other is stopped (SIGSTOP, so it takes no CPU), xvs first in even
//! reps and OVS first in odd ones. A rep of xvs and the rep of OVS next to
//! it run seconds apart, on the same machine in the same state; this
//! machine's speed drifts by 1.5-3x over minutes, which made the ratio of
//! two sequential runs (each switch set up in turn) move between 0.7 and
//! 1.4 for the same binaries. The ratio printed is the median of the
//! per-rep pairs' ratios, and each pair is listed.
//!
//! The generator (`xvs util pktgen --frames-file`, pinned to CPU 0; with
//! `--gen-xdp` it sends from inside the kernel, `pktgen --xdp`, several
//! times faster, so that the switch is the bottleneck) sends
//! from VM 1's namespace; the destination VM's eth0 runs the XDP
//! count-and-drop sink (`xvs util xdp-sink`). Printed: a table of delivered
//! packets/s (median of `--reps` runs), the xvs/OVS ratio, and each
//! switch's processing time per delivered packet (see `busy_ns`); `--json
//! FILE` writes the figures. xvs runs with `other_config:pmd-maxsleep=0`
//! (spin, never sleep), which is Open vSwitch's default, so both poll the
//! same way; `--xvs-adaptive` leaves xvs's own default (adaptive polling).
//! xvs's kernel fast path is off (the AF_XDP datapaths are compared);
//! `--xvs-offload` turns it on, as it is by default.
//! (hv1's br-phy has a poll thread of its own on the same core; idle, it
//! sleeps, see `CoreClaim` in switch.rs.) Everything is removed afterwards
//! (the set-up's Drop), also on failure.
//!
//! Run through `./bench.sh --only ovn`, or as root after a release build:
//! `XVS_BIN=target/release/xvs target/release/examples/ovn_bench [--seconds 3] [--flows 100] [--reps 3] [--no-ovs] [--xvs-adaptive] [--xvs-offload] [--gen-xdp] [--against-xvs OTHER_XVS]`.

use std::process::Command;
use xvs::netns::{number_after, wait_file, xvs_exe, Host};
use xvs::ovnmulti::{Hypervisor, Multi, Switch};
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
    /// `--against-xvs BIN`: hv2 runs xvs from BIN instead of OVS (an A/B of
    /// two xvs builds; the table's "ovs" columns are then BIN's).
    against: Option<String>,
    /// `--xvs-offload`: xvs's kernel fast path on (its default; off
    /// otherwise, so that the AF_XDP datapaths are compared).
    offload: bool,
    /// `--gen-xdp`: the generator sends from inside the kernel (`pktgen
    /// --xdp`), several times what its AF_PACKET socket offers, so that the
    /// switch, not the generator, is the bottleneck.
    gen_xdp: bool,
}

fn args() -> Args {
    let mut a = Args {
        seconds: 3.0,
        flows: 100,
        reps: 3,
        json: None,
        with_ovs: true,
        xvs_busy: true,
        capture: None,
        against: None,
        offload: false,
        gen_xdp: false,
    };
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
            "--against-xvs" => a.against = Some(next(i)),
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
            "--xvs-offload" => {
                a.offload = true;
                i += 1;
                continue;
            }
            "--gen-xdp" => {
                a.gen_xdp = true;
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

/// One switch's VMs: (logical port and namespace name, MAC, IP) of VM 1
/// and VM 2 on ls1 and VM 3 on ls2.
type Vms = [(&'static str, &'static str, &'static str); 3];
const XVS_VMS: Vms = [
    ("x1", "00:00:00:00:01:01", "10.0.1.1"),
    ("x2", "00:00:00:00:01:02", "10.0.1.2"),
    ("x3", "00:00:00:00:02:01", "10.0.2.1"),
];
const OVS_VMS: Vms = [
    ("o1", "00:00:00:00:01:11", "10.0.1.11"),
    ("o2", "00:00:00:00:01:12", "10.0.1.12"),
    ("o3", "00:00:00:00:02:11", "10.0.2.11"),
];
/// lr1's MAC on ls1 (`ovnref::logical_router_between_two_switches`).
const ROUTER_MAC: &str = "00:00:00:00:ff:01";

/// A frames file for pktgen: UDP from `src` (MAC, IP) to `dst_ip` through
/// `dst_mac`, one frame per source port.
fn frames(src: (&str, &str), dst_mac: &str, dst_ip: &str, flows: u16) -> String {
    let path = format!("/tmp/xvs-ovnbench-{}-{}-{dst_ip}.hex", std::process::id(), src.1);
    let mut text = String::new();
    for f in 0..flows {
        let b = wire::build::Frame::new(mac(src.0), mac(dst_mac))
            .ipv4(ip(src.1), ip(dst_ip))
            .udp(10_000 + f, 5001)
            .payload(&[0u8; 18])
            .build();
        text.extend(b.iter().map(|x| format!("{x:02x}")));
        text.push('\n');
    }
    std::fs::write(&path, text).expect("writing the frames file");
    path
}

fn is_ovs(hv: &Hypervisor) -> bool {
    hv.switch == Switch::Ovs
}

/// xvs's `pmd-stats --json` of the hypervisor's switch.
fn xvs_pmd_stats(hv: &Hypervisor) -> serde_json::Value {
    let out = hv.run(&[&xvs_exe().to_string_lossy(), "pmd-stats", "--run-dir", &hv.run_dir(), "--json"]);
    serde_json::from_str(&out).expect("pmd-stats --json")
}

/// Sums OVS's `dpif-netdev/pmd-stats-show` lines that start with one of
/// `keys`.
fn ovs_pmd_stat(hv: &Hypervisor, keys: &[&str]) -> f64 {
    let out = hv.appctl(&["dpif-netdev/pmd-stats-show"]);
    out.lines()
        .filter_map(|l| keys.iter().find_map(|k| l.trim().strip_prefix(k)))
        .filter_map(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .sum()
}

/// Upcalls (datapath misses sent to the slow path) so far: xvs's
/// `pmd-stats`, OVS's "miss with success/failed upcall".
fn upcalls(hv: &Hypervisor) -> f64 {
    if is_ovs(hv) {
        ovs_pmd_stat(hv, &["miss with success upcall: ", "miss with failed upcall: "])
    } else {
        xvs_pmd_stats(hv)["pmds"].as_array().into_iter().flatten().filter_map(|p| p["upcalls"].as_f64()).sum()
    }
}

/// The poll threads' processing time so far, in ns: the time of the
/// iterations that moved packets (xvs: `busy_ns` of `xvs pmd-stats`; OVS:
/// the processing cycles of `dpif-netdev/pmd-stats-show`, at the CPU's
/// clock). Idle polling is left out, so with both switches spinning this is
/// what packets cost, the kernel's transmit work inside those iterations
/// included.
fn busy_ns(hv: &Hypervisor) -> f64 {
    if is_ovs(hv) {
        ovs_pmd_stat(hv, &["processing cycles: "]) * 1000.0 / xvs::cpu_mhz()
    } else {
        xvs_pmd_stats(hv)["pmds"].as_array().into_iter().flatten().filter_map(|p| p["busy_ns"].as_f64()).sum()
    }
}

/// Flow setup through the pipeline: `n` frames from `src`, each to a
/// different unknown MAC (`base` + i) on ls1. ovn-controller's L2 lookup
/// matches the destination MAC exactly and the miss drops, so every frame
/// is a new megaflow in both switches: one upcall each. Returns upcalls per
/// second over one second of sending (more frames than either switch sets
/// up in a second).
fn setup_rate(hv: &Hypervisor, src: &Host, vms: &Vms, base: u64, n: u64) -> f64 {
    let path = format!("/tmp/xvs-ovnbench-{}-setup.hex", std::process::id());
    let mut text = String::with_capacity(n as usize * 121);
    for i in 0..n {
        let m = (0x0200_0000_0000 | (base + i)).to_be_bytes();
        let b = wire::build::Frame::new(mac(vms[0].1), [m[2], m[3], m[4], m[5], m[6], m[7]])
            .ipv4(ip(vms[0].2), ip(vms[1].2))
            .udp(10_000, 5001)
            .payload(&[0u8; 18])
            .build();
        text.extend(b.iter().map(|x| format!("{x:02x}")));
        text.push('\n');
    }
    std::fs::write(&path, text).expect("writing the frames file");
    let u0 = upcalls(hv);
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
    upcalls(hv) - u0
}

/// With `OVN_BENCH_DIAG=1`: xvs's `show` and `pmd-stats` after a case
/// (port counters with the AF_XDP queues' drops, drops by reason), on
/// stderr, to see where a case lost frames.
fn diag(hv: &Hypervisor, case: &str) {
    if is_ovs(hv) || std::env::var("OVN_BENCH_DIAG").as_deref() != Ok("1") {
        return;
    }
    for cmd in ["show", "pmd-stats"] {
        let out = hv.run(&[&xvs_exe().to_string_lossy(), cmd, "--run-dir", &hv.run_dir()]);
        eprintln!("--- {case}: xvs {cmd}\n{out}");
    }
}

/// One run: packets/s sent from `src` and delivered to `dst`.
fn once(src: &Host, dst: &Host, frames: &str, secs: f64, gen_xdp: bool) -> (f64, f64) {
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
        .args(if gen_xdp { &["--xdp"][..] } else { &[][..] })
        .output()
        .expect("running pktgen");
    let sink = sink.wait_with_output().expect("the sink");
    let _ = std::fs::remove_file(&ready);
    let sent = number_after(&String::from_utf8_lossy(&gen.stdout), "sent").expect("pktgen says what it sent");
    let got = number_after(&String::from_utf8_lossy(&sink.stdout), "received").expect("the sink's count");
    (sent as f64 / secs, got as f64 / secs)
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Lets switch `who` run and stops the others (see the file's header).
fn turn(m: &Multi, who: usize) {
    m.hvs[who].pause(false);
    for (i, hv) in m.hvs.iter().enumerate() {
        if i != who {
            hv.pause(true);
        }
    }
    // The resumed poll thread catches up on what waited (timers, stats).
    std::thread::sleep(std::time::Duration::from_millis(300));
}

/// The switches' order in rep `r`: first to last in even reps, last to
/// first in odd ones, so neither always runs first.
fn order(r: usize, n: usize) -> Vec<usize> {
    if r % 2 == 0 {
        (0..n).collect()
    } else {
        (0..n).rev().collect()
    }
}

fn all_run(m: &Multi) {
    m.hvs.iter().for_each(|hv| hv.pause(false));
}

/// One case's reps on one switch: (offered pps, delivered pps) per rep and
/// the processing ns per delivered packet over them.
#[derive(Default)]
struct Runs {
    reps: Vec<(f64, f64)>,
    busy: f64,
    delivered: f64,
}

impl Runs {
    fn offered(&self) -> f64 {
        median(self.reps.iter().map(|x| x.0).collect())
    }
    fn pps(&self) -> f64 {
        median(self.reps.iter().map(|x| x.1).collect())
    }
    fn ns_per_packet(&self) -> f64 {
        self.busy / self.delivered.max(1.0)
    }
}

/// The cases on every switch of `m`, in turns: per case, per switch, its
/// runs; then the flow setup rates per switch (upcalls/s per rep).
/// Per case, its name and each switch's runs.
type CaseRuns = Vec<(&'static str, Vec<Runs>)>;

fn cases(m: &Multi, sides: &[&Vms], a: &Args) -> (CaseRuns, Vec<Vec<f64>>) {
    let host = |side: usize, k: usize| m.host(side * 3 + k);
    for (side, _) in sides.iter().enumerate() {
        let (v1, v2, v3) = (host(side, 0), host(side, 1), host(side, 2));
        assert!(eventually(20, || v1.ping(&v2.ip, 1).unwrap_or(0) == 1), "VM 1 reaches VM 2 ({})", m.hvs[side].name);
        assert!(
            eventually(20, || v1.ping(&v3.ip, 1).unwrap_or(0) == 1),
            "VM 1 reaches VM 3 through the router ({})",
            m.hvs[side].name
        );
    }
    for hv in &m.hvs {
        eprintln!("{}: br-int has {} flows from ovn-controller", hv.name, hv.flows().lines().count());
    }
    let to_vm2: Vec<String> = sides.iter().map(|v| frames((v[0].1, v[0].2), v[1].1, v[1].2, a.flows)).collect();
    let to_vm3: Vec<String> = sides.iter().map(|v| frames((v[0].1, v[0].2), ROUTER_MAC, v[2].2, a.flows)).collect();
    let run = |name: &'static str, dst: usize, f: &[String]| -> (&'static str, Vec<Runs>) {
        let mut runs: Vec<Runs> = sides.iter().map(|_| Runs::default()).collect();
        for r in 0..a.reps {
            for side in order(r, sides.len()) {
                let hv = &m.hvs[side];
                turn(m, side);
                let b0 = busy_ns(hv);
                let x = once(host(side, 0), host(side, dst), &f[side], a.seconds, a.gen_xdp);
                runs[side].busy += busy_ns(hv) - b0;
                runs[side].delivered += x.1 * a.seconds;
                runs[side].reps.push(x);
                eprintln!(
                    "  {name} on {} (rep {}/{}): offered {:.0} pps, delivered {:.0} pps",
                    hv.name,
                    r + 1,
                    a.reps,
                    x.0,
                    x.1
                );
            }
        }
        all_run(m);
        for (side, hv) in m.hvs.iter().enumerate() {
            diag(hv, name);
            let x = &runs[side];
            eprintln!("  {name} on {}: {:.0} ns of processing per packet", hv.name, x.ns_per_packet());
        }
        (name, runs)
    };
    let mut out = vec![run("switch", 1, &to_vm2), run("router", 2, &to_vm3)];
    let mut setups: Vec<Vec<f64>> = sides.iter().map(|_| Vec::new()).collect();
    for r in 0..a.reps {
        for side in order(r, sides.len()) {
            turn(m, side);
            let base = ((r * sides.len() + side + 1) as u64) << 24;
            let u = setup_rate(&m.hvs[side], host(side, 0), sides[side], base, 400_000);
            eprintln!("  flow setup on {} (rep {}/{}): {u:.0} upcalls/s", m.hvs[side].name, r + 1, a.reps);
            setups[side].push(u);
        }
    }
    all_run(m);
    for dir in ["from-lport", "to-lport"] {
        m.nbctl(&["acl-add", "ls1", dir, "1000", "ip4", "allow-related"]);
    }
    m.sync();
    for (side, _) in sides.iter().enumerate() {
        let (v1, v2) = (host(side, 0), host(side, 1));
        assert!(
            eventually(20, || v1.ping(&v2.ip, 1).unwrap_or(0) == 1),
            "VM 1 reaches VM 2 through the ACLs ({})",
            m.hvs[side].name
        );
    }
    for hv in &m.hvs {
        let ct = hv.flows();
        eprintln!("  {} with the ACLs: {} flows, {} with ct(", hv.name, ct.lines().count(), ct.matches("ct(").count());
    }
    out.push(run("acl", 1, &to_vm2));
    for f in to_vm2.iter().chain(&to_vm3) {
        let _ = std::fs::remove_file(f);
    }
    (out, setups)
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
    let mut conf = vec!["pmd-cpu-mask=0x2", if a.offload { "xdp-offload=true" } else { "xdp-offload=false" }];
    if a.xvs_busy {
        // Also OVS's default; OVS ignores xdp-offload (xvs's kernel fast
        // path would hand frames to the sink's XDP program directly).
        conf.push("pmd-maxsleep=0");
    }
    let exe = xvs_exe().to_string_lossy().into_owned();
    let mut switches = vec![(Switch::Xvs, exe.as_str())];
    match (&a.against, a.with_ovs) {
        (Some(b), _) => switches.push((Switch::Xvs, b.as_str())),
        (None, true) => switches.push((Switch::Ovs, exe.as_str())),
        (None, false) => {}
    }
    let sides: Vec<&Vms> = if switches.len() == 2 { vec![&XVS_VMS, &OVS_VMS] } else { vec![&XVS_VMS] };
    let mut m = Multi::start_each("b", &switches, &conf);
    xvs::ovnref::logical_router_between_two_switches(|x| {
        m.nbctl(x);
    });
    for (side, vms) in sides.iter().enumerate() {
        for (k, (name, mac, ip)) in vms.iter().enumerate() {
            let (ls, gw) = if k < 2 { ("ls1", "10.0.1.254") } else { ("ls2", "10.0.2.254") };
            m.nbctl(&["lsp-add", ls, name]);
            m.nbctl(&["lsp-set-addresses", name, &format!("{mac} {ip}")]);
            m.vm(side, name, mac, ip, gw);
        }
    }
    m.sync();
    let (res, setups) = cases(&m, &sides, &a);
    drop(m);
    let ratio_runs = |runs: &[Runs]| -> Vec<f64> {
        match runs {
            [x, o] => x.reps.iter().zip(&o.reps).filter(|p| p.1 .1 > 0.0).map(|(x, o)| x.1 / o.1).collect(),
            _ => Vec::new(),
        }
    };
    if let Some(b) = &a.against {
        println!("\nA/B: the \"ovs\" columns are xvs from {b}");
    }
    println!(
        "\nOVN pipeline, 64-byte UDP, {} flows, {} s x {} runs per switch, in turns (median); xvs {}; {}; {}",
        a.flows,
        a.seconds,
        a.reps,
        if a.xvs_busy { "spinning (pmd-maxsleep=0, as OVS)" } else { "with adaptive polling (its default)" },
        if a.offload { "xvs's kernel fast path ON (its default)" } else { "xvs's kernel fast path off" },
        if a.gen_xdp { "generator: pktgen --xdp" } else { "generator: pktgen (AF_PACKET)" }
    );
    println!(
        "{:<8}{:>13}{:>11}{:>13}{:>11}{:>9}{:>14}{:>14}  pairs",
        "case", "xvs offered", "xvs pps", "ovs offered", "ovs pps", "xvs/ovs", "xvs busy ns", "ovs busy ns"
    );
    let mut json = Vec::new();
    let none = Runs::default();
    for (name, runs) in &res {
        let (x, o) = (&runs[0], runs.get(1).unwrap_or(&none));
        let pairs = ratio_runs(runs);
        let ratio = if pairs.is_empty() { "-".into() } else { format!("{:.2}", median(pairs.clone())) };
        let list = pairs.iter().map(|r| format!("{r:.2}")).collect::<Vec<_>>().join(" ");
        println!(
            "{name:<8}{:>13.0}{:>11.0}{:>13.0}{:>11.0}{ratio:>9}{:>14.0}{:>14.0}  {list}",
            x.offered(),
            x.pps(),
            o.offered(),
            o.pps(),
            x.ns_per_packet(),
            o.ns_per_packet()
        );
        json.push(serde_json::json!({"case": name, "flows": a.flows, "seconds": a.seconds, "reps": a.reps,
            "xvs_offload": a.offload, "gen_xdp": a.gen_xdp,
            "xvs_offered_pps": x.offered().round(), "xvs_pps": x.pps().round(),
            "xvs_busy_ns_per_packet": x.ns_per_packet().round(),
            "ovs_offered_pps": o.offered().round(), "ovs_pps": o.pps().round(),
            "ovs_busy_ns_per_packet": o.ns_per_packet().round(),
            "xvs_runs": x.reps.iter().map(|r| r.1.round()).collect::<Vec<_>>(),
            "ovs_runs": o.reps.iter().map(|r| r.1.round()).collect::<Vec<_>>(),
            "ratio_runs": pairs, "in_turns": true}));
    }
    let (xs, os) = (median(setups[0].clone()), setups.get(1).map(|v| median(v.clone())).unwrap_or(0.0));
    let pairs: Vec<f64> = setups
        .get(1)
        .map(|o| setups[0].iter().zip(o).filter(|p| *p.1 > 0.0).map(|(x, o)| x / o).collect())
        .unwrap_or_default();
    let ratio = if pairs.is_empty() { "-".into() } else { format!("{:.2}", median(pairs.clone())) };
    let list = pairs.iter().map(|r| format!("{r:.2}")).collect::<Vec<_>>().join(" ");
    println!(
        "flow setup (a new destination MAC per frame, one upcall each): xvs {xs:.0}/s, ovs {os:.0}/s, xvs/ovs {ratio} (pairs: {list})"
    );
    json.push(serde_json::json!({"case": "flow setup", "xvs_upcalls_per_s": xs.round(),
        "ovs_upcalls_per_s": os.round(), "reps": a.reps, "ratio_runs": pairs, "in_turns": true}));
    if let Some(p) = a.json {
        std::fs::write(&p, serde_json::to_string_pretty(&json).expect("json")).expect("writing --json");
    }
}
