//! The defaults matrix (issue 46): the namespace paths through the switch
//! crossed with the offload settings real hosts have, so that a switch
//! that damages frames under some combination of them cannot pass.
//!
//! Paths (columns):
//! * `userspace`: every frame through the AF_XDP sockets and the
//!   userspace datapath (`--xdp-offload off`);
//! * `kernel`: the defaults, with the kernel fast path on: hot flows are
//!   forwarded by the XDP program itself;
//! * `ct+nat userspace` / `ct+nat kernel`: a stateful firewall with source
//!   NAT over IPv4 (conntrack only, over IPv6), fast path off / on.
//!
//! Every path forwards with `in_port=1,actions=output:2` and back (the
//! issue's reproduction), or the firewall's rules.
//!
//! Settings (rows): the sender's transmit checksum offload, its TSO and GSO
//! (TSO needs checksum offload, so with `tx off` the kernel keeps TSO off
//! whatever is asked; and while a native XDP program runs at a veth's far
//! end the kernel turns its TSO off, leaving GSO: the settings in force
//! are printed), the receiver's
//! GRO (what lets the kernel fast path redirect into its veth), IPv4 or
//! IPv6, untagged or VLAN-tagged, MTU 1500 or 9000. VLAN-tagged: this
//! kernel has no 802.1Q module, so the hosts cannot tag; the switch does,
//! as with access ports and a trunk: the hosts' ports are access ports of
//! VLAN 10, and a veth pair whose both ends are switch ports is the trunk
//! (host a -> push VLAN 10 -> trunk end x ... trunk end y -> pop -> host
//! b, and back), so every frame crosses the switch twice, once untagged
//! and once tagged, through the XDP program and AF_XDP on both. Six two-valued
//! settings make 64 combinations per path; the eight rows are an
//! orthogonal array of strength 2 (every pair of settings meets in all
//! four of its combinations, each equally often), and row 1 is Linux's
//! defaults (offloads on, IPv4, untagged, 1500). Rows 9 and 10 add what a
//! pairwise array cannot promise: tagged frames with the receiver's GRO on
//! at MTU 1500, the three settings under which the kernel fast path serves
//! them. 4 paths x 10 rows = 40 cells, run four at a time, each in its own
//! namespaces.
//!
//! Each cell, host a to host b: pings of several sizes (8000 bytes at MTU
//! 9000); a TCP stream for 1.5 s whose SHA-256 both ends compute; 300 UDP
//! datagrams of sizes from 18 bytes to above the MTU (fragmented), each
//! carrying its number and a pattern that the receiver checks. It asserts
//! that the pings come back, the stream arrives whole, no datagram
//! arrives damaged and at most 2% are lost (the corruption this matrix is
//! for shows as damage or as checksum errors, not as loss, and four cells
//! share two cores), and that neither host's `nstat` counts a checksum
//! error (TcpInCsumErrors, UdpInCsumErrors, Udp6InCsumErrors). Cells with
//! the fast path on, the receiver's GRO on and MTU 1500 must also show
//! kernel hits (at MTU 9000 frames are multi-buffer, which the fast path
//! leaves to userspace; with GRO off the receiver takes no redirected
//! frames), or the cell would not test what it claims. The outcome with
//! the fast path on and off is then the same by construction: every cell
//! of both columns passes the same checks.
//!
//! `XVS_SWITCH=ovs` runs the userspace and ct columns against Open
//! vSwitch 3.1 (AF_XDP ports; its cells take turns); cells whose sender
//! keeps transmit checksum offload on are skipped there with the reason
//! (OVS 3.1 forwards partial checksums unfinished, and its documentation
//! tells AF_XDP users to turn the offload off; its receiving host turns
//! it off too, for the answers), and so are MTU 9000 cells (its AF_XDP
//! ports have no multi-buffer frames). Needs root, python3,
//! ethtool; everything is removed afterwards, also on failure.

mod common;

use common::{csum_errors, finish, on, py, settings_label, wait_ready, TCP_RX, TCP_TX, UDP_RX, UDP_TX};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use xvs::netns::sh;
use xvs::ovsref::Sut;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Path {
    Userspace,
    Kernel,
    CtUserspace,
    CtKernel,
}

impl Path {
    const ALL: [Path; 4] = [Path::Userspace, Path::Kernel, Path::CtUserspace, Path::CtKernel];
    fn name(self) -> &'static str {
        match self {
            Path::Userspace => "userspace",
            Path::Kernel => "kernel",
            Path::CtUserspace => "ct+nat userspace",
            Path::CtKernel => "ct+nat kernel",
        }
    }
    fn fast_path(self) -> bool {
        matches!(self, Path::Kernel | Path::CtKernel)
    }
    fn ct(self) -> bool {
        matches!(self, Path::CtUserspace | Path::CtKernel)
    }
}

#[derive(Clone, Copy, Debug)]
struct Row {
    tx: bool,
    tso: bool,
    gro: bool,
    v6: bool,
    vlan: bool,
    jumbo: bool,
}

/// The L8 orthogonal array's first six columns; 0 is "on" for the three
/// offloads (so row 1 is Linux's defaults) and "IPv4, untagged, 1500" for
/// the others.
const L8: [[u8; 6]; 8] = [
    [0, 0, 0, 0, 0, 0],
    [0, 0, 0, 1, 1, 1],
    [0, 1, 1, 0, 0, 1],
    [0, 1, 1, 1, 1, 0],
    [1, 0, 1, 0, 1, 0],
    [1, 0, 1, 1, 0, 1],
    [1, 1, 0, 0, 1, 1],
    [1, 1, 0, 1, 0, 0],
];

fn rows() -> Vec<Row> {
    let mut rows: Vec<Row> = L8
        .iter()
        .map(|r| Row {
            tx: r[0] == 0,
            tso: r[1] == 0,
            gro: r[2] == 0,
            v6: r[3] == 1,
            vlan: r[4] == 1,
            jumbo: r[5] == 1,
        })
        .collect();
    // The kernel fast path serves a flow only with three settings at once
    // (the receiver's GRO on, MTU 1500, and then what is tagged), a
    // triple no row of a strength-2 array is sure to hold: two more rows
    // put tagged frames through it, over IPv4 and IPv6, with Linux's
    // default offloads.
    for v6 in [false, true] {
        rows.push(Row { tx: true, tso: true, gro: true, v6, vlan: true, jumbo: false });
    }
    rows
}

impl Row {
    fn label(&self) -> String {
        settings_label(self.tx, self.tso, self.gro, self.v6, self.vlan, self.jumbo)
    }
    fn mtu(&self) -> u32 {
        if self.jumbo {
            9000
        } else {
            1500
        }
    }
}

/// Two namespaces with a veth each into the root namespace, and for
/// VLAN-tagged rows the trunk (a veth pair in the root namespace); removed
/// on drop.
struct Pair {
    ns: [String; 2],
    /// The switch's ports: host a's, host b's, then the trunk's ends.
    ports: Vec<String>,
}

impl Drop for Pair {
    fn drop(&mut self) {
        for n in &self.ns {
            let _ = Command::new("ip").args(["netns", "del", n]).stderr(Stdio::null()).status();
        }
        for p in &self.ports {
            let _ = Command::new("ip").args(["link", "del", p]).stderr(Stdio::null()).status();
        }
    }
}

const V4: [&str; 2] = ["10.47.0.1", "10.47.0.2"];
const V6: [&str; 2] = ["fd47::1", "fd47::2"];
/// The address the ct paths translate host a's IPv4 source to.
const SNAT: &str = "10.47.0.100";

impl Pair {
    fn exec(&self, i: usize, args: &[&str]) -> String {
        let mut v = vec!["ip", "netns", "exec", &self.ns[i]];
        v.extend_from_slice(args);
        sh(&v).unwrap_or_else(|e| panic!("{}: {e}", self.ns[i]))
    }

    /// Sets the hosts up for `row`: addresses, MTUs, the trunk for a
    /// VLAN-tagged row, and the sender's (a) and receiver's (b) offloads.
    fn create(tag: &str, row: &Row) -> Pair {
        let mut ports = vec![format!("xdm{tag}a"), format!("xdm{tag}b")];
        if row.vlan {
            ports.extend([format!("xdm{tag}x"), format!("xdm{tag}y")]);
        }
        let pair = Pair { ns: [format!("xdm{tag}a"), format!("xdm{tag}b")], ports };
        for n in &pair.ns {
            let _ = Command::new("ip").args(["netns", "del", n]).stderr(Stdio::null()).status();
        }
        for p in &pair.ports {
            let _ = Command::new("ip").args(["link", "del", p]).stderr(Stdio::null()).status();
        }
        let mtu = row.mtu().to_string();
        if row.vlan {
            let (x, y) = (&pair.ports[2], &pair.ports[3]);
            sh(&["ip", "link", "add", x, "mtu", &mtu, "type", "veth", "peer", "name", y, "mtu", &mtu]).unwrap();
            for d in [x, y] {
                sh(&["sysctl", "-qw", &format!("net.ipv6.conf.{d}.disable_ipv6=1")]).unwrap();
                sh(&["ip", "link", "set", d, "up"]).unwrap();
            }
        }
        for i in 0..2 {
            let (ns, port) = (&pair.ns[i], &pair.ports[i]);
            sh(&["ip", "netns", "add", ns]).unwrap();
            sh(&[
                "ip", "link", "add", port, "mtu", &mtu, "type", "veth", "peer", "name", "eth0", "netns", ns, "mtu",
                &mtu,
            ])
            .unwrap();
            sh(&["sysctl", "-qw", &format!("net.ipv6.conf.{port}.disable_ipv6=1")]).unwrap();
            sh(&["ip", "link", "set", port, "up"]).unwrap();
            pair.exec(i, &["ip", "link", "set", "lo", "up"]);
            pair.exec(i, &["ip", "link", "set", "eth0", "up"]);
            let dev = "eth0";
            if row.v6 {
                pair.exec(i, &["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=0"]);
                pair.exec(i, &["ip", "-6", "addr", "add", &format!("{}/64", V6[i]), "dev", dev, "nodad"]);
            } else {
                pair.exec(i, &["ip", "addr", "add", &format!("{}/24", V4[i]), "dev", dev]);
            }
        }
        // The sender's transmit offloads; the receiver's GRO. Everything
        // else stays as Linux sets it.
        pair.exec(0, &["ethtool", "-K", "eth0", "tx", on(row.tx)]);
        let _ =
            sh(&["ip", "netns", "exec", &pair.ns[0], "ethtool", "-K", "eth0", "tso", on(row.tso), "gso", on(row.tso)]);
        pair.exec(1, &["ethtool", "-K", "eth0", "gro", on(row.gro)]);
        if xvs::netns::ovs_stands_in() {
            // The reverse direction too (host b's answers): OVS 3.1 forwards
            // partial checksums unfinished (its documented set-up turns the
            // offload off); xvs runs with b's default, on.
            pair.exec(1, &["ethtool", "-K", "eth0", "tx", "off"]);
        }
        pair
    }

    /// The sender's offloads in force (ethtool -k), read while the switch
    /// runs: a native XDP program on a veth's far end turns its TSO off.
    fn sender_offloads(&self) -> String {
        let k = self.exec(0, &["ethtool", "-k", "eth0"]);
        let eff = |name: &str| {
            k.lines()
                .find(|l| l.trim_start().starts_with(name))
                .and_then(|l| l.split(':').nth(1))
                .map(|v| v.split_whitespace().next().unwrap_or("?").to_string())
                .unwrap_or_else(|| "?".into())
        };
        format!(
            "tx-checksumming {} tcp-segmentation-offload {} generic-segmentation-offload {}",
            eff("tx-checksumming:"),
            eff("tcp-segmentation-offload:"),
            eff("generic-segmentation-offload:")
        )
    }

    fn mac(&self, i: usize) -> String {
        self.exec(i, &["cat", "/sys/class/net/eth0/address"]).trim().to_string()
    }
}

/// The rules of `path`, with ports named A and B (the hosts') and X and
/// Y (the trunk's ends; VLAN-tagged rows): plain forwarding both ways, or
/// a firewall with source NAT over IPv4 (ARP and neighbour discovery
/// pass), on the frames as host a's and host b's sides deliver them (A
/// and B, or the trunk ends Y and X, where they arrive tagged), with the
/// actions that take a frame the rest of the way.
fn rules(path: Path, vlan: bool) -> Vec<String> {
    let mut r: Vec<String> = Vec::new();
    let (in_a, in_b, to_b, to_a) = if vlan {
        // Host ports are access ports of VLAN 10: tag on the way into the
        // trunk, untag on the way out of it.
        r.push("table=0,priority=40,in_port=A,actions=push_vlan:0x8100,set_field:4106->vlan_vid,output:X".into());
        r.push("table=0,priority=40,in_port=B,actions=push_vlan:0x8100,set_field:4106->vlan_vid,output:Y".into());
        ("in_port=Y,dl_vlan=10", "in_port=X,dl_vlan=10", "pop_vlan,output:B", "pop_vlan,output:A")
    } else {
        ("in_port=A", "in_port=B", "output:B", "output:A")
    };
    if !path.ct() {
        r.push(format!("table=0,priority=30,{in_a},actions={to_b}"));
        r.push(format!("table=0,priority=30,{in_b},actions={to_a}"));
        return r;
    }
    for (m, to) in [(in_a, to_b), (in_b, to_a)] {
        r.push(format!("table=0,priority=30,{m},arp,actions={to}"));
        r.push(format!("table=0,priority=30,{m},icmp6,icmp_type=135,actions={to}"));
        r.push(format!("table=0,priority=30,{m},icmp6,icmp_type=136,actions={to}"));
        r.push(format!("table=0,priority=20,{m},ip,actions=ct(table=1,zone=7,nat)"));
        r.push(format!("table=0,priority=20,{m},ipv6,actions=ct(table=1,zone=7,nat)"));
    }
    r.push("table=0,priority=0,actions=drop".into());
    r.push(format!("table=1,priority=20,ip,{in_a},ct_state=+trk+new,actions=ct(commit,zone=7,nat(src={SNAT})),{to_b}"));
    r.push(format!("table=1,priority=20,ipv6,{in_a},ct_state=+trk+new,actions=ct(commit,zone=7),{to_b}"));
    r.push(format!("table=1,priority=20,{in_a},ct_state=+trk+est,actions={to_b}"));
    r.push(format!("table=1,priority=20,{in_b},ct_state=+trk+est,actions={to_a}"));
    r.push(format!("table=1,priority=20,{in_b},ct_state=+trk+rel,actions={to_a}"));
    r.push("table=1,priority=0,actions=drop".into());
    r
}

#[derive(Default)]
struct Outcome {
    pings: String,
    tcp: String,
    udp: String,
    csum_errors: u64,
    kernel_hits: Option<u64>,
    effective: String,
}

fn kernel_hits(sut: &Sut) -> Option<u64> {
    if sut.is_ovs() {
        return None;
    }
    let out = Command::new(env!("CARGO_BIN_EXE_xvs"))
        .args(["offload-show", "--run-dir", &sut.run_dir, "--json"])
        .output()
        .ok()?;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    Some(v["offload"].as_array()?.iter().filter_map(|b| b["kernel"]["hit"].as_u64()).sum())
}

/// One cell: sets it up, runs the traffic, asserts, and says what it saw.
fn cell(path: Path, ri: usize, row: &Row, tag: &str) -> Outcome {
    let pair = Pair::create(tag, row);
    let mut extra: Vec<&str> = vec![];
    if !path.fast_path() {
        extra.extend(["--xdp-offload", "off"]);
    }
    let ports: Vec<&str> = pair.ports.iter().map(String::as_str).collect();
    let sut = Sut::start(env!("CARGO_BIN_EXE_xvs"), &format!("dm{tag}"), &format!("xdmbr{tag}"), &ports, &extra);
    let no: Vec<String> = pair.ports.iter().map(|p| sut.ofport(p).to_string()).collect();
    sut.ofctl_ok(&["-OOpenFlow13", "del-flows"]);
    for r in rules(path, row.vlan) {
        let mut r = r;
        for (name, n) in ["A", "B", "X", "Y"].iter().zip(&no) {
            r = r.replace(&format!("in_port={name}"), &format!("in_port={n}"));
            r = r.replace(&format!("output:{name}"), &format!("output:{n}"));
        }
        sut.ofctl_ok(&["-OOpenFlow13", "add-flow", &r]);
    }
    let effective = pair.sender_offloads();
    let addrs = if row.v6 { V6 } else { V4 };
    let dev = "eth0";
    if path.ct() && !row.v6 {
        // Host b answers the translated source: its neighbour is host a.
        let mac = pair.mac(0);
        pair.exec(1, &["ip", "neigh", "replace", SNAT, "lladdr", &mac, "dev", dev]);
    }
    let ctx = format!("{} | row {} ({}) | {}", path.name(), ri + 1, row.label(), effective);
    let errs0 = csum_errors(&pair.ns[0]) + csum_errors(&pair.ns[1]);
    let mut o = Outcome { effective, ..Outcome::default() };

    // Pings: the first may wait for neighbour resolution.
    let t0 = Instant::now();
    while Command::new("ip")
        .args(["netns", "exec", &pair.ns[0], "ping", "-c", "1", "-W", "1", addrs[1]])
        .stdout(Stdio::null())
        .status()
        .map(|s| !s.success())
        .unwrap_or(true)
        && t0.elapsed() < Duration::from_secs(15)
    {
        std::thread::sleep(Duration::from_millis(200));
    }
    let sizes: &[u32] = if row.jumbo { &[56, 1400, 8000] } else { &[56, 1400] };
    let mut got = Vec::new();
    for s in sizes {
        let out = Command::new("ip")
            .args(["netns", "exec", &pair.ns[0], "ping", "-c", "3", "-i", "0.2", "-w", "10", "-s", &s.to_string()])
            .arg(addrs[1])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let n = xvs::netns::number_after(&text.replace(',', ""), "transmitted").unwrap_or(0);
        got.push(format!("{s}B {n}/3"));
        assert_eq!(n, 3, "{ctx}: pings of {s} bytes: {text}");
    }
    o.pings = got.join(" ");

    // TCP: a 1.5 s stream, digests at both ends.
    let mut rx = py(&pair.ns[1], TCP_RX, &[addrs[1], "5301"]);
    wait_ready(&mut rx);
    let tx = py(&pair.ns[0], TCP_TX, &[addrs[1], "5301", "1.5", "0"]);
    let (sent, got) = (finish(tx), finish(rx));
    assert_eq!(sent, got, "{ctx}: TCP stream (bytes, sha256) sent vs received");
    let mb = sent.split_whitespace().next().and_then(|n| n.parse::<f64>().ok()).unwrap_or(0.0) / 1e6;
    assert!(mb > 0.0, "{ctx}: no TCP data");
    o.tcp = format!("{mb:.0} MB ok");

    // UDP: sizes up to above the MTU (fragmented).
    let count = 300;
    let udp_sizes = if row.jumbo { "18,200,1000,1400,4000,8000,9500" } else { "18,200,1000,1400,3000" };
    let mut rx = py(&pair.ns[1], UDP_RX, &[addrs[1], "5302", &count.to_string()]);
    wait_ready(&mut rx);
    let tx = py(&pair.ns[0], UDP_TX, &[addrs[1], "5302", &count.to_string(), udp_sizes]);
    finish(tx);
    let res = finish(rx);
    let mut it = res.split_whitespace().map(|x| x.parse::<u64>().unwrap_or(0));
    let (ok, bad) = (it.next().unwrap_or(0), it.next().unwrap_or(0));
    assert_eq!(bad, 0, "{ctx}: damaged UDP datagrams ({ok} intact)");
    assert!(ok * 100 >= count * 98, "{ctx}: UDP: {ok} of {count} arrived");
    o.udp = format!("{ok}/{count}");

    o.csum_errors = csum_errors(&pair.ns[0]) + csum_errors(&pair.ns[1]) - errs0;
    assert_eq!(o.csum_errors, 0, "{ctx}: checksum errors at the hosts");
    o.kernel_hits = kernel_hits(&sut);
    if path.fast_path() && row.gro && !row.jumbo && !sut.is_ovs() {
        if o.kernel_hits.unwrap_or(0) == 0 {
            let show = Command::new(env!("CARGO_BIN_EXE_xvs"))
                .args(["offload-show", "--run-dir", &sut.run_dir])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default();
            let flows = Command::new(env!("CARGO_BIN_EXE_xvs"))
                .args(["dump-flows", "--run-dir", &sut.run_dir])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default();
            panic!("{ctx}: the kernel fast path served nothing:\n{show}\n{flows}");
        }
    }
    drop(sut);
    drop(pair);
    o
}

#[test]
fn defaults_matrix_namespace_paths() {
    let ovs = xvs::netns::ovs_stands_in();
    let rows = rows();
    let mut cells: Vec<(Path, usize)> = Vec::new();
    for p in Path::ALL {
        if ovs && p.fast_path() {
            continue; // OVS 3.1 has no kernel fast path
        }
        for r in 0..rows.len() {
            cells.push((p, r));
        }
    }
    let id = std::process::id() % 1000;
    let next = Mutex::new(0usize);
    let results: Mutex<Vec<(Path, usize, Result<Outcome, String>)>> = Mutex::new(Vec::new());
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| loop {
                let i = {
                    let mut n = next.lock().unwrap();
                    let i = *n;
                    *n += 1;
                    i
                };
                let Some(&(p, r)) = cells.get(i) else { break };
                let row = rows[r];
                let skip = if ovs && row.tx {
                    Some("skipped: OVS 3.1 forwards partial checksums unfinished (it documents tx off)")
                } else if ovs && row.jumbo {
                    Some("skipped: OVS 3.1's AF_XDP ports take one 4 KiB page a frame (no multi-buffer)")
                } else {
                    None
                };
                if let Some(why) = skip {
                    results.lock().unwrap().push((p, r, Err(why.into())));
                    continue;
                }
                let tag = format!("{id}{}{r}", Path::ALL.iter().position(|x| *x == p).unwrap());
                let res =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| cell(p, r, &row, &tag))).map_err(|e| {
                        e.downcast_ref::<String>()
                            .cloned()
                            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                            .unwrap_or_else(|| "panicked".into())
                    });
                results.lock().unwrap().push((p, r, res));
            });
        }
    });
    let mut results = results.into_inner().unwrap();
    results.sort_by_key(|(p, r, _)| (Path::ALL.iter().position(|x| x == p), *r));
    println!(
        "\ndefaults matrix ({}): {} cells in {:.0} s",
        if ovs { "Open vSwitch 3.1" } else { "xvs" },
        results.len(),
        t0.elapsed().as_secs_f64()
    );
    println!(
        "{:<17} {:<2} {:<45} {:<6} {:<24} {:>8} {:>8} {:>5} {:>10} {:>7}",
        "path",
        "#",
        "settings (sender tx/tso, receiver gro, ...)",
        "result",
        "pings",
        "TCP",
        "UDP",
        "csum",
        "kernel",
        "TSO now"
    );
    let mut failed = Vec::new();
    for (p, r, res) in &results {
        match res {
            Ok(o) => println!(
                "{:<17} {:<2} {:<45} {:<6} {:<24} {:>8} {:>8} {:>5} {:>10} {:>7}",
                p.name(),
                r + 1,
                rows[*r].label(),
                "PASS",
                o.pings,
                o.tcp,
                o.udp,
                o.csum_errors,
                o.kernel_hits.map_or("-".into(), |h| h.to_string()),
                o.effective.split_whitespace().nth(3).unwrap_or("?")
            ),
            Err(e) if e.starts_with("skipped") => {
                println!("{:<17} {:<2} {:<45} {}", p.name(), r + 1, rows[*r].label(), e)
            }
            Err(e) => {
                println!("{:<17} {:<2} {:<45} FAIL   {e}", p.name(), r + 1, rows[*r].label());
                failed.push(format!("{} row {}: {e}", p.name(), r + 1));
            }
        }
    }
    if let Some((_, _, Ok(o))) = results.first() {
        println!("(row 1 sender, as ethtool -k reports it while the switch runs: {})", o.effective);
    }
    assert!(failed.is_empty(), "{} cells failed:\n{}", failed.len(), failed.join("\n"));
}
