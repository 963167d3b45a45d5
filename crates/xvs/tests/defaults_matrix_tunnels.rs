//! The defaults matrix (issue 46), tunnel paths: Geneve and VXLAN
//! encapsulation and decapsulation between two hypervisors, with the
//! kernel fast path on (the XDP program encapsulates and decapsulates hot
//! flows) and off (userspace tunneling through AF_XDP), crossed with the
//! VMs' offload settings. The namespace paths (userspace, kernel fast
//! path, conntrack and NAT) are in `defaults_matrix.rs`.
//!
//! Set-up: [`xvs::tnlref::Overlay`]: vmA - hvA [br-int: vm, tun0; br-phy:
//! ul] - underlay bridge - hvB - vmB, each hypervisor its own switch and
//! database, VNI 5001. Each cell sets explicitly, in both VMs (ethtool
//! -K): the sender's transmit checksum offload, TSO/GSO, the receiver's
//! GRO (both VMs receive: data one way, ACKs and echo replies the other);
//! and the inner IP version. The underlay bridge's ends get GRO on (the
//! README's advice for the fast path: the encapsulating side redirects into
//! that veth), br-phy an MTU of 1600 (room for the outer headers).
//!
//! Which cells: 4 two-valued settings make 16 combinations per path; the
//! rows are an all-pairs cover (greedy, checked), Linux's defaults first
//! (tx, TSO/GSO and GRO on, IPv4). Not crossed here, and why: VLAN tags
//! (this kernel has no 802.1Q driver, and the namespace matrix covers
//! tagged frames through the switch) and MTU 9000 (the Overlay's underlay
//! is 1600; jumbo ports have no fast path, and the namespace matrix covers
//! MTU 9000 in userspace).
//!
//! Every cell, vmA to vmB: a TCP stream of 16 MB of random bytes (SHA-256
//! compared at both ends); 1500 UDP datagrams of 16 sizes up to the MTU,
//! each checked byte for byte; pings of three sizes up to the MTU, with no
//! corrupted reply; no checksum errors in either VM's `nstat`
//! (TcpInCsumErrors, UdpInCsumErrors, Udp6InCsumErrors, IcmpInCsumErrors,
//! Icmp6InCsumErrors). Kernel cells whose receivers have GRO on must show
//! kernel-forwarded packets on the hypervisors (offload-show); each row's
//! outcome with the fast path on must equal its outcome with it off.
//!
//! `XVS_SWITCH=ovs`: Open vSwitch 3.1 on both hypervisors (userspace
//! tunneling). OVS has no kernel fast path, so only the "-u" columns run.
//! Cells whose sender has transmit checksum offload on are skipped with
//! the reason (OVS documents `tx off`; measured: every datagram arrives
//! with a bad checksum, the TCP stream stalls); `XVS_DM_OVS_TX=1` runs
//! them, reported as "xfail", not counted as failures.
//! `XVS_DM_ONLY` (substring of "geneve-k3"), `XVS_DM_JOBS` (default 3).
//! `cargo test -p xvs --test defaults_matrix_tunnels -- --nocapture`.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use xvs::netns::wait_file;
use xvs::tnlref::{unavailable, Key, Kind, Overlay, Switch, Underlay};

const TRAFFIC: &str = include_str!("dm_traffic.py");
const TCP_BYTES: u64 = 16_000_000;
const UDP_COUNT: u64 = 1500;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Row {
    tx: bool,
    tso: bool,
    gro: bool,
    v6: bool,
}

impl Row {
    fn from_bits(b: u32) -> Row {
        Row { tx: b & 1 != 0, tso: b & 2 != 0, gro: b & 4 != 0, v6: b & 8 != 0 }
    }
    fn bits(self) -> [bool; 4] {
        [self.tx, self.tso, self.gro, self.v6]
    }
    fn label(self) -> String {
        let oo = |b: bool| if b { "on " } else { "off" };
        format!("tx {} tso {} gro {} {}", oo(self.tx), oo(self.tso), oo(self.gro), if self.v6 { "v6" } else { "v4" })
    }
}

/// Linux's defaults, then greedily the row covering the most uncovered
/// pairs of values, until every pair of every two settings is covered.
fn pairwise_rows() -> Vec<Row> {
    let pairs = |r: Row| {
        let b = r.bits();
        let mut v = Vec::new();
        for i in 0..4 {
            for j in i + 1..4 {
                v.push((i, j, b[i], b[j]));
            }
        }
        v
    };
    let all: Vec<Row> = (0..16).map(Row::from_bits).collect();
    let mut uncovered: std::collections::BTreeSet<_> = all.iter().flat_map(|r| pairs(*r)).collect();
    let defaults = Row { tx: true, tso: true, gro: true, v6: false };
    let mut rows = vec![defaults];
    for p in pairs(defaults) {
        uncovered.remove(&p);
    }
    while !uncovered.is_empty() {
        let best = *all
            .iter()
            .max_by_key(|r| (pairs(**r).iter().filter(|p| uncovered.contains(p)).count(), std::cmp::Reverse(r.bits())))
            .unwrap();
        for p in pairs(best) {
            uncovered.remove(&p);
        }
        rows.push(best);
    }
    for i in 0..4 {
        for j in i + 1..4 {
            for (a, b) in [(false, false), (false, true), (true, false), (true, true)] {
                assert!(rows.iter().any(|r| r.bits()[i] == a && r.bits()[j] == b), "pair {i},{j} {a},{b}");
            }
        }
    }
    rows
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Path {
    GeneveKernel,
    GeneveUser,
    VxlanKernel,
    VxlanUser,
}

impl Path {
    const ALL: [Path; 4] = [Path::GeneveKernel, Path::GeneveUser, Path::VxlanKernel, Path::VxlanUser];
    fn name(self) -> &'static str {
        match self {
            Path::GeneveKernel => "geneve-k",
            Path::GeneveUser => "geneve-u",
            Path::VxlanKernel => "vxlan-k",
            Path::VxlanUser => "vxlan-u",
        }
    }
    fn short(self) -> &'static str {
        match self {
            Path::GeneveKernel => "dgk",
            Path::GeneveUser => "dgu",
            Path::VxlanKernel => "dvk",
            Path::VxlanUser => "dvu",
        }
    }
    fn kind(self) -> Kind {
        match self {
            Path::GeneveKernel | Path::GeneveUser => Kind::Geneve,
            Path::VxlanKernel | Path::VxlanUser => Kind::Vxlan,
        }
    }
    fn fast_path(self) -> bool {
        matches!(self, Path::GeneveKernel | Path::VxlanKernel)
    }
    fn twin(self) -> Path {
        match self {
            Path::GeneveKernel => Path::GeneveUser,
            Path::GeneveUser => Path::GeneveKernel,
            Path::VxlanKernel => Path::VxlanUser,
            Path::VxlanUser => Path::VxlanKernel,
        }
    }
}

#[derive(Clone, Debug, Default)]
struct Outcome {
    tcp: String,
    udp: String,
    icmp: String,
    csum: Vec<(String, u64)>,
    kernel: Option<u64>,
    note: String,
    setup: Option<String>,
    secs: f64,
}

impl Outcome {
    fn signature(&self) -> String {
        format!("tcp {} udp {} icmp {} csum {:?} setup {:?}", self.tcp, self.udp, self.icmp, self.csum, self.setup)
    }
}

fn ns_run(ns: &str, args: &[&str]) -> Result<String, String> {
    let o = Command::new("ip")
        .args(["netns", "exec", ns])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| e.to_string())?;
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    if o.status.success() {
        Ok(out)
    } else {
        Err(format!("{args:?}: {out}{}", String::from_utf8_lossy(&o.stderr)))
    }
}

const CSUM_COUNTERS: [&str; 5] =
    ["TcpInCsumErrors", "UdpInCsumErrors", "Udp6InCsumErrors", "IcmpInCsumErrors", "Icmp6InCsumErrors"];

/// The namespace's checksum error counters (`nstat -asz`: absolute, zeros
/// too, history untouched).
fn nstat(ns: &str) -> BTreeMap<String, u64> {
    ns_run(ns, &["nstat", "-asz"])
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let (k, v) = (w.next()?, w.next()?.parse().ok()?);
            CSUM_COUNTERS.contains(&k).then(|| (k.to_string(), v))
        })
        .collect()
}

fn feature(ns: &str, name: &str) -> String {
    ns_run(ns, &["ethtool", "-k", "eth0"])
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.trim().strip_prefix(&format!("{name}: ")).map(|v| v.split_whitespace().next().unwrap_or("").to_string())
        })
        .unwrap_or_default()
}

fn spawn_py(ns: &str, script: &str, args: &[&str]) -> std::process::Child {
    Command::new("ip")
        .args(["netns", "exec", ns, "python3", script])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 runs")
}

fn out_of(c: std::process::Child) -> String {
    let o = c.wait_with_output().expect("wait");
    String::from_utf8_lossy(&o.stdout).trim().to_string() + String::from_utf8_lossy(&o.stderr).trim()
}

struct Cell {
    path: Path,
    row_no: usize,
    row: Row,
}

fn run_cell(cell: &Cell, sw: Switch, dir: &str, script: &str) -> Outcome {
    let t0 = Instant::now();
    let mut o = Outcome::default();
    if let Err(e) = run_cell_inner(cell, sw, dir, script, &mut o) {
        o.setup = Some(e);
    }
    o.secs = t0.elapsed().as_secs_f64();
    o
}

fn run_cell_inner(cell: &Cell, sw: Switch, dir: &str, script: &str, o: &mut Outcome) -> Result<(), String> {
    let tag = format!("{}{}", cell.path.short(), cell.row_no);
    let row = cell.row;
    let ov =
        Overlay::start(env!("CARGO_BIN_EXE_xvs"), &tag, cell.path.kind(), [sw, sw], Key::Fixed(5001), Underlay::V4)
            .map_err(|e| format!("set-up: {e:#}"))?;
    for hv in &ov.hv {
        if sw == Switch::Xvs {
            let on = if cell.path.fast_path() { "true" } else { "false" };
            hv.vsctl(&[
                "set",
                "open_vswitch",
                ".",
                &format!("other_config:xdp-offload={on}"),
                "other_config:xdp-offload-pps=1",
            ])
            .map_err(|e| format!("{e:#}"))?;
        }
        ns_run(&hv.ns.ns, &["ip", "link", "set", "br-phy", "mtu", "1600"])?;
    }
    for end in ["ulA", "ulB"] {
        ns_run(&ov.mid.ns, &["ethtool", "-K", end, "gro", "on"])?;
    }
    let on = |b: bool| if b { "on" } else { "off" };
    let mut ips = Vec::new();
    for (n, vm) in ov.vm.iter().enumerate() {
        // The row's offloads (the Overlay turns tx off; set everything).
        let _ = ns_run(
            &vm.ns,
            &["ethtool", "-K", "eth0", "tx", on(row.tx), "tso", on(row.tso), "gso", on(row.tso), "gro", on(row.gro)],
        );
        if row.v6 {
            ns_run(
                &vm.ns,
                &["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=0", "net.ipv6.conf.eth0.disable_ipv6=0"],
            )?;
            ns_run(&vm.ns, &["ip", "-6", "addr", "add", &format!("fd78::{}/64", n + 1), "dev", "eth0", "nodad"])?;
            ips.push(format!("fd78::{}", n + 1));
        } else {
            ips.push(vm.ip.clone());
        }
    }
    let mut notes = Vec::new();
    for (name, want) in
        [("tx-checksumming", row.tx), ("tcp-segmentation-offload", row.tso), ("generic-receive-offload", row.gro)]
    {
        let got = feature(&ov.vm[0].ns, name);
        if got != on(want) {
            notes.push(format!("{name} {got}"));
        }
    }
    o.note = notes.join(", ");
    let (a, b) = (&ov.vm[0], &ov.vm[1]);
    let fam = if row.v6 { "-6" } else { "-4" };
    let dst = ips[1].clone();
    if !xvs::ovnref::eventually(20, || ns_run(&a.ns, &["ping", fam, "-c", "1", "-W", "1", &dst]).is_ok()) {
        return Err(format!("vmA never reached {dst}\n{}", ov.diagnostics()));
    }
    let kernel = || -> u64 {
        ov.hv.iter().map(|h| xvs::offload::forwarded_in_show(&h.appctl(&["dpif-netdev/offload-show"]).1, None)).sum()
    };
    let before = [nstat(&a.ns), nstat(&b.ns)];
    let k0 = if sw == Switch::Xvs { kernel() } else { 0 };

    let ready = format!("{dir}/{tag}.tready");
    let rx = spawn_py(&b.ns, script, &["tcprecv", &dst, "5301", &ready]);
    wait_file(&ready, 5000);
    let tx =
        spawn_py(&a.ns, script, &["tcpsend", &dst, "5301", &TCP_BYTES.to_string(), &(cell.row_no + 11).to_string()]);
    let (sent, got) = (out_of(tx), out_of(rx));
    o.tcp = if sent == got && !got.contains("error") && got.starts_with("tcp ") {
        "ok".into()
    } else {
        format!("sent [{sent}] received [{got}]")
    };

    let maxlen = 1500 - if row.v6 { 48 } else { 28 };
    let ready = format!("{dir}/{tag}.uready");
    let rx = spawn_py(&b.ns, script, &["udprecv", &dst, "5302", &UDP_COUNT.to_string(), &ready]);
    wait_file(&ready, 5000);
    let tx = spawn_py(&a.ns, script, &["udpsend", &dst, "5302", &UDP_COUNT.to_string(), &maxlen.to_string()]);
    let sent = out_of(tx);
    let got = out_of(rx);
    o.udp = if got == format!("udp good {UDP_COUNT} bad 0 dup 0") { "ok".into() } else { format!("{got} ({sent})") };

    // Five replies of each size within 5 s (a deadline: a request lost
    // under load is sent again; a corrupted one never answers), none with
    // wrong data.
    let mut bad = Vec::new();
    for s in [56, 1000, maxlen] {
        let s = s.to_string();
        let r = ns_run(&a.ns, &["ping", fam, "-n", "-c", "5", "-w", "5", "-i", "0.05", "-W", "1", "-s", &s, &dst]);
        let text = match &r {
            Ok(t) | Err(t) => t.clone(),
        };
        let n = xvs::netns::parse_ping_received(&text).min(5);
        if n != 5 || text.contains("wrong data") {
            bad.push(format!("-s {s}: {n}/5 replies{}", if text.contains("wrong data") { ", wrong data" } else { "" }));
        }
    }
    o.icmp = if bad.is_empty() { "ok".into() } else { bad.join("; ") };

    std::thread::sleep(Duration::from_millis(600));
    if sw == Switch::Xvs {
        o.kernel = Some(kernel().saturating_sub(k0));
    }
    let after = [nstat(&a.ns), nstat(&b.ns)];
    for (i, (bf, af)) in before.iter().zip(after.iter()).enumerate() {
        for (k, v) in af {
            let d = v - bf.get(k).copied().unwrap_or(0);
            if d > 0 {
                o.csum.push((format!("vm{}:{k}", ["A", "B"][i]), d));
            }
        }
    }
    Ok(())
}

fn verdict(cell: &Cell, o: &Outcome, ovs: bool) -> (Option<String>, bool) {
    let mut why = Vec::new();
    if let Some(s) = &o.setup {
        why.push(s.clone());
    } else {
        for (p, r) in [("tcp", &o.tcp), ("udp", &o.udp), ("icmp", &o.icmp)] {
            if r != "ok" {
                why.push(format!("{p}: {r}"));
            }
        }
    }
    if !o.csum.is_empty() {
        why.push(format!("checksum errors {:?}", o.csum));
    }
    // With GRO on at the VMs both directions can be redirected (the
    // underlay's bridge ends have GRO on in every cell).
    if cell.path.fast_path() && cell.row.gro && o.setup.is_none() && o.kernel == Some(0) {
        why.push("the kernel fast path forwarded nothing: the cell did not test it".into());
    }
    ((!why.is_empty()).then(|| why.join("; ")), ovs && cell.row.tx)
}

#[test]
fn defaults_matrix_tunnels() {
    let ovs = std::env::var("XVS_SWITCH").as_deref() == Ok("ovs");
    let sw = if ovs { Switch::Ovs } else { Switch::Xvs };
    if let Some(why) = unavailable([sw, sw]) {
        eprintln!("skipped: {why}");
        return;
    }
    std::env::set_var("XVS_BIN", env!("CARGO_BIN_EXE_xvs"));
    let t0 = Instant::now();
    let rows = pairwise_rows();
    let dir = format!("/tmp/xvs-dmt-{}", std::process::id());
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let script = format!("{dir}/traffic.py");
    std::fs::write(&script, TRAFFIC).unwrap();
    let only = std::env::var("XVS_DM_ONLY").unwrap_or_default();
    let mut cells = Vec::new();
    for path in Path::ALL {
        for (i, row) in rows.iter().enumerate() {
            if !only.is_empty() && !format!("{}{}", path.name(), i).contains(&only) {
                continue;
            }
            // OVS has no kernel fast path: its "-k" cells would repeat the
            // "-u" ones.
            if ovs && path.fast_path() {
                continue;
            }
            // Measured (XVS_DM_OVS_TX=1, 2026-11-29): OVS 3.1 forwards the
            // VMs' partial checksums through the tunnel unfinished; vmB
            // counts every datagram in UdpInCsumErrors/Udp6InCsumErrors and
            // the TCP stream stalls (TcpInCsumErrors), Geneve and VXLAN
            // alike. OVS documents `tx off` for such ports.
            if ovs && row.tx && std::env::var("XVS_DM_OVS_TX").is_err() {
                eprintln!(
                    "skipped {} row {i} ({}): OVS 3.1 forwards partial checksums unfinished \
                     (its documentation: ethtool -K eth0 tx off); XVS_DM_OVS_TX=1 runs it",
                    path.name(),
                    row.label()
                );
                continue;
            }
            cells.push(Cell { path, row_no: i, row: *row });
        }
    }
    let jobs: usize = std::env::var("XVS_DM_JOBS").ok().and_then(|s| s.parse().ok()).unwrap_or(3);
    let cells = Arc::new(cells);
    let next = Arc::new(Mutex::new(0usize));
    let results: Arc<Mutex<BTreeMap<(Path, usize), Outcome>>> = Arc::default();
    let mut threads = Vec::new();
    for _ in 0..jobs {
        let (cells, next, results, dir, script) =
            (cells.clone(), next.clone(), results.clone(), dir.clone(), script.clone());
        threads.push(std::thread::spawn(move || loop {
            let i = {
                let mut n = next.lock().unwrap();
                *n += 1;
                *n - 1
            };
            let Some(cell) = cells.get(i) else { break };
            let o = run_cell(cell, sw, &dir, &script);
            eprintln!("[{} {}] {:.1} s k={:?}: {}", cell.path.name(), cell.row_no, o.secs, o.kernel, o.signature());
            results.lock().unwrap().insert((cell.path, cell.row_no), o);
        }));
    }
    for t in threads {
        t.join().unwrap();
    }
    let results = results.lock().unwrap();
    let mut failures = Vec::new();
    let mut table = format!(
        "\ndefaults matrix, tunnels ({}), {} cells, {:.0} s wall\n{:<3} {:<26}",
        sw.name(),
        cells.len(),
        t0.elapsed().as_secs_f64(),
        "row",
        "settings (tx, TSO/GSO, GRO, IP)"
    );
    for p in Path::ALL {
        table += &format!(" {:<13}", p.name());
    }
    table += "\n";
    for (i, row) in rows.iter().enumerate() {
        table += &format!("{:<3} {:<26}", i, row.label());
        for p in Path::ALL {
            let Some(o) = results.get(&(p, i)) else {
                table += &format!(" {:<13}", "-");
                continue;
            };
            let cell = Cell { path: p, row_no: i, row: *row };
            let (why, xfail) = verdict(&cell, o, ovs);
            let k = o.kernel.filter(|_| p.fast_path()).map(|k| format!(" k={k}")).unwrap_or_default();
            let mark = match (&why, xfail) {
                (None, _) => format!("PASS{k}"),
                (Some(_), true) => "xfail".into(),
                (Some(_), false) => format!("FAIL{k}"),
            };
            table += &format!(" {mark:<13}");
            if let Some(w) = why {
                let line = format!("{} row {i} ({}): {w}", p.name(), row.label());
                if xfail {
                    eprintln!("xfail (OVS: sender's tx checksum offload on) {line}");
                } else {
                    failures.push(line);
                }
            }
            if p.fast_path() && !xfail {
                if let Some(t) = results.get(&(p.twin(), i)) {
                    if t.signature() != o.signature() {
                        failures.push(format!(
                            "row {i} ({}): {} and {} differ: [{}] vs [{}]",
                            row.label(),
                            p.name(),
                            p.twin().name(),
                            o.signature(),
                            t.signature()
                        ));
                    }
                }
            }
        }
        if let Some(n) =
            Path::ALL.iter().filter_map(|p| results.get(&(*p, i))).map(|o| o.note.clone()).find(|n| !n.is_empty())
        {
            table += &format!("  (in force: {n})");
        }
        table += "\n";
    }
    eprintln!("{table}");
    for f in &failures {
        eprintln!("FAIL {f}");
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(failures.is_empty(), "{} failing cells (see the matrix above)", failures.len());
}
