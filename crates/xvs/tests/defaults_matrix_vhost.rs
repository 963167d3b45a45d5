//! The defaults matrix (issue 46), vhost-user path: a namespace host to a
//! VM port and back, with the host's offload settings as users have them.
//!
//! The VM is DPDK's testpmd (`net_virtio_user` in server mode, as QEMU
//! owns the socket for `dpdkvhostuserclient`) in `5tswap` forwarding: it
//! sends every frame back with MAC and IP addresses and L4 ports swapped,
//! which leaves a correct L4 checksum correct. The host sends UDP
//! datagrams of 16 sizes up to the MTU, each with content derived from its
//! sequence number, to an address at the VM (a static neighbour entry),
//! and its socket checks every reflected datagram byte for byte; `nstat`
//! in the host must count no checksum errors. So every datagram crosses
//! the switch twice: host to VM (AF_XDP in, vhost-user out: a partial
//! checksum from the host's transmit offload must be completed or handed
//! to the guest as such) and VM to host.
//!
//! Covered: the host's transmit checksum offload, its GRO, IPv4/IPv6 (all
//! pairs: 4 rows), each with the switch's kernel fast path on and off (a
//! VM port has no XDP fast path; the outcome must be the same). UDP only:
//! a reflector cannot answer TCP or ICMP echo as a stack would (TCP and
//! ICMP between namespace hosts are in `defaults_matrix.rs`); TSO/GSO do
//! not apply to UDP sockets without UDP_SEGMENT; MTU 1500 and untagged.
//! Cells run one after the other (each starts a testpmd).
//!
//! Open vSwitch 3.1 (`XVS_SWITCH=ovs`) has no vhost-user ports in its
//! AF_XDP build: skipped there with that reason. Needs root, python3,
//! dpdk-testpmd. `cargo test -p xvs --test defaults_matrix_vhost -- --nocapture`.

use netdev_vhost::testpmd::{sock_path, usable, Testpmd};
use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use xvs::netns::Host;

const TRAFFIC: &str = include_str!("dm_traffic.py");
const UDP_COUNT: u64 = 1500;
const VM_MAC: &str = "02:00:00:00:4d:01";

struct Xvs(Child, String);

impl Drop for Xvs {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        let _ = std::fs::remove_dir_all(&self.1);
    }
}

const CSUM_COUNTERS: [&str; 5] =
    ["TcpInCsumErrors", "UdpInCsumErrors", "Udp6InCsumErrors", "IcmpInCsumErrors", "Icmp6InCsumErrors"];

fn nstat(h: &Host) -> BTreeMap<String, u64> {
    h.exec(&["nstat", "-asz"])
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let (k, v) = (w.next()?, w.next()?.parse().ok()?);
            CSUM_COUNTERS.contains(&k).then(|| (k.to_string(), v))
        })
        .collect()
}

/// One cell: settings `(tx, gro, v6)`, fast path `fast`. The outcome
/// ("ok" or what went wrong) and the checksum errors counted.
fn cell(i: usize, tx: bool, gro: bool, v6: bool, fast: bool, script: &str) -> (String, Vec<(String, u64)>) {
    let id = std::process::id() % 1000;
    let tag = format!("{}{}", if fast { "k" } else { "u" }, i);
    let h = Host::create(&format!("xvsdmv{id}{tag}"), &format!("dmv{id}{tag}"), "10.79.7.1/24", 1).unwrap();
    let on = |b: bool| if b { "on" } else { "off" };
    // The row's offloads (the host helper turns tx off: set them all).
    let _ = h.exec(&["ethtool", "-K", "eth0", "tx", on(tx), "gro", on(gro)]);
    let _ = xvs::netns::sh(&["ethtool", "-K", &h.port, "tx", "on"]);
    let dst = if v6 {
        h.exec(&["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=0", "net.ipv6.conf.eth0.disable_ipv6=0"]).unwrap();
        h.exec(&["ip", "-6", "addr", "add", "fd79::1/64", "dev", "eth0", "nodad"]).unwrap();
        h.exec(&["ip", "-6", "neigh", "replace", "fd79::2", "lladdr", VM_MAC, "dev", "eth0"]).unwrap();
        "fd79::2"
    } else {
        h.exec(&["ip", "neigh", "replace", "10.79.7.2", "lladdr", VM_MAC, "dev", "eth0"]).unwrap();
        "10.79.7.2"
    };
    let sock = sock_path(&format!("dm{tag}"));
    let mut pmd = Testpmd::start(&sock, &format!("xvsdmv{id}{tag}"));
    let run_dir = format!("/tmp/xvs-dmv-{id}{tag}");
    let _ = std::fs::remove_dir_all(&run_dir);
    let bridge = format!("brdmv{id}{tag}");
    let child = Command::new(env!("CARGO_BIN_EXE_xvs"))
        .args(["switch", "--run-dir", &run_dir, "--bridge", &bridge, "--no-local-port"])
        .args(["--xdp-offload", on(fast), "--xdp-offload-pps", "1"])
        .args(["--port", &format!("{},type=afxdp", h.port)])
        .args(["--port", &format!("vdm{id}{tag},type=dpdkvhostuserclient,vhost-server-path={}", sock.display())])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _xvs = Xvs(child, run_dir.clone());
    if !pmd.wait_for("testpmd>", 0, 20) {
        return (format!("testpmd did not start: {}", pmd.diagnostics()), vec![]);
    }
    let t0 = Instant::now();
    while !std::path::Path::new(&format!("{run_dir}/{bridge}.mgmt")).exists() && t0.elapsed() < Duration::from_secs(10)
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    for f in ["priority=100,in_port=1,actions=output:2", "priority=100,in_port=2,actions=output:1"] {
        let o =
            Command::new("ovs-ofctl").args(["add-flow", &format!("unix:{run_dir}/{bridge}.mgmt"), f]).output().unwrap();
        assert!(o.status.success(), "add-flow {f}: {}", String::from_utf8_lossy(&o.stderr));
    }
    pmd.cmd("set fwd 5tswap");
    // In its default `io` mode testpmd would send frames back unchanged,
    // to its own MAC, which the host drops: what comes back was swapped.
    assert!(pmd.wait_for("Set 5tswap packet forwarding mode", 0, 5), "{}", pmd.diagnostics());
    pmd.cmd("start");
    std::thread::sleep(Duration::from_millis(500));
    let before = nstat(&h);
    let out = Command::new("ip")
        .args(["netns", "exec", &h.ns, "python3", script, "udpreflect", dst, "5303", &UDP_COUNT.to_string()])
        .arg(if v6 { "1452" } else { "1472" })
        .output()
        .unwrap();
    let got = String::from_utf8_lossy(&out.stdout).trim().to_string() + String::from_utf8_lossy(&out.stderr).trim();
    pmd.cmd("stop");
    let after = nstat(&h);
    let csum: Vec<(String, u64)> = after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0)))
        .filter(|(_, d)| *d > 0)
        .collect();
    let outcome = if got == format!("udp good {UDP_COUNT} bad 0 dup 0") { "ok".to_string() } else { got };
    (outcome, csum)
}

#[test]
fn defaults_matrix_vhost() {
    if std::env::var("XVS_SWITCH").as_deref() == Ok("ovs") {
        eprintln!("skipped: Open vSwitch 3.1's AF_XDP build has no vhost-user ports");
        return;
    }
    if !usable() {
        return;
    }
    std::env::set_var("XVS_BIN", env!("CARGO_BIN_EXE_xvs"));
    let t0 = Instant::now();
    let dir = format!("/tmp/xvs-dmv-{}", std::process::id());
    std::fs::create_dir_all(&dir).unwrap();
    let script = format!("{dir}/traffic.py");
    std::fs::write(&script, TRAFFIC).unwrap();
    // All pairs of (tx, GRO, IPv6): Linux's defaults first.
    let rows = [(true, true, false), (true, false, true), (false, true, true), (false, false, false)];
    let mut table = String::new();
    let mut failures = Vec::new();
    for (i, &(tx, gro, v6)) in rows.iter().enumerate() {
        let oo = |b: bool| if b { "on " } else { "off" };
        let label = format!("tx {} gro {} {}", oo(tx), oo(gro), if v6 { "v6" } else { "v4" });
        let mut marks = Vec::new();
        let mut outs = Vec::new();
        for fast in [true, false] {
            let (o, csum) = cell(i, tx, gro, v6, fast, &script);
            eprintln!("[vhost row {i} fast path {}] {o} csum {csum:?}", if fast { "on" } else { "off" });
            let pass = o == "ok" && csum.is_empty();
            if !pass {
                failures.push(format!(
                    "row {i} ({label}), fast path {}: {o}, checksum errors {csum:?}",
                    if fast { "on" } else { "off" }
                ));
            }
            marks.push(if pass { "PASS" } else { "FAIL" });
            outs.push(format!("{o} {csum:?}"));
        }
        if outs[0] != outs[1] {
            failures.push(format!("row {i} ({label}): fast path on and off differ: [{}] vs [{}]", outs[0], outs[1]));
        }
        table += &format!("{i:<3} {label:<20} {:<13} {:<13}\n", marks[0], marks[1]);
    }
    eprintln!(
        "\ndefaults matrix, vhost-user (xvs), {} cells, {:.0} s wall\n{:<3} {:<20} {:<13} {:<13}\n{table}",
        rows.len() * 2,
        t0.elapsed().as_secs_f64(),
        "row",
        "host settings",
        "vhost (fp on)",
        "vhost (fp off)"
    );
    for f in &failures {
        eprintln!("FAIL {f}");
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(failures.is_empty(), "{} failing cells", failures.len());
}
