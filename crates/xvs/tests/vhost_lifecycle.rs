//! VM-port lifecycle (issue 46): guests on `dpdkvhostuserclient` ports keep
//! exchanging intact frames with the network through every restart a VM
//! port meets in practice.
//!
//! Set-up, as users configure it: a private `ovsdb-server`, the switch
//! (`xvs switch --db`, or OVS-DPDK's `ovs-vswitchd-dpdk` with
//! `XVS_SWITCH=ovs-dpdk`), and per guest a netdev bridge (`ovs-vsctl`) with
//! the guest's `dpdkvhostuserclient` port and a namespace host on an AF_XDP
//! port. One bridge per guest, so NORMAL switching's flooding never shows
//! one guest another's frames. Each guest is DPDK's testpmd: its
//! `net_virtio_user` owns the socket (server mode, as QEMU does), it runs
//! `5tswap` (each frame goes back with MAC, IP and port swapped) and prints
//! every frame it receives (`set verbose 1`). The hosts keep Linux's
//! transmit checksum offload on under xvs (so their datagrams carry partial
//! checksums the switch must finish for the guest); under OVS-DPDK it is
//! off, as OVS's documentation requires for AF_XDP ports.
//!
//! The check after every step ([`probe`]): the host sends 100 UDP datagrams
//! to its guest, sizes 18 to 1400 bytes of payload, each carrying the
//! step, a counter, a pattern made from the counter, and a CRC-32 of it all.
//! - host -> guest: testpmd's own record of what it received: every
//!   datagram arrives with the host's source MAC, the guest's destination
//!   MAC, IPv4/UDP, and the length sent, and no frame with zeroed addresses
//!   arrives (issue 46's symptom);
//! - guest -> host: the echoes, captured by the host's socket, must equal
//!   what was sent byte for byte (the kernel also checks their IPv4 and UDP
//!   checksums: none may fail, by `/proc/net/snmp`), and nothing else may
//!   arrive: a datagram of an earlier step is a frame the guest's transmit
//!   ring replayed.
//!
//! Steps: the switch restarts (SIGTERM, started again on the same
//! database); guest 1 restarts (testpmd quits and starts again); the switch
//! is killed (-9) and started again; guest 1 is killed (-9) and started
//! again; guests 1 and 2 restart in turn; a guest on hugepages in DPDK's
//! dynamic memory mode is connected, then made to map more memory while
//! running (a `dpdk-pdump` secondary process allocates its capture pool in
//! the guest's DPDK), so the switch gets a new memory table, and frames are
//! checked again. The hugepage step reserves 2 MiB pages itself
//! (`vm.nr_hugepages`, a hugetlbfs mount of its own) and restores both; if
//! the machine cannot give them it says so and that step is reported as
//! skipped.
//!
//! Printed: a table of step, switch, result and frames checked.
//! `XVS_SWITCH=ovs-dpdk cargo test -p xvs --test vhost_lifecycle -- --nocapture`
//! runs the same sequence on OVS-DPDK (Debian's openvswitch-switch-dpdk).
//! Needs root and dpdk-testpmd; skipped with a message (and passes) only
//! when testpmd is absent.

use netdev_vhost::testpmd::{usable, Testpmd};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use xvs::netns::Host;

const OVS_DPDK: &str = "/usr/lib/openvswitch-switch-dpdk/ovs-vswitchd-dpdk";
/// Datagrams per check.
const N: usize = 100;
/// 2 MiB pages the hugepage step reserves.
const HUGEPAGES: u64 = 256;

#[derive(Clone, Copy, PartialEq, Debug)]
enum Kind {
    Xvs,
    OvsDpdk,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Xvs => "xvs",
            Kind::OvsDpdk => "ovs-dpdk",
        }
    }
}

/// ovsdb-server, the switch, and what they leave behind.
struct Env {
    kind: Kind,
    dir: String,
    tag: String,
    server: Child,
    switch: Option<Child>,
    bridges: Vec<String>,
    /// OVS's netdev datapath has one `ovs-netdev` device per host: OVS
    /// instances take turns (the lock `ovsref` uses).
    _turn: Option<std::fs::File>,
}

impl Env {
    fn new(kind: Kind, tag: &str) -> Env {
        let turn = (kind == Kind::OvsDpdk).then(|| {
            let f = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open("/tmp/xvs-ovsref.lock")
                .unwrap();
            use std::os::fd::AsRawFd;
            netdev_linux::sys::lock_file_wait(f.as_raw_fd()).unwrap();
            let _ = Command::new("ip").args(["link", "del", "ovs-netdev"]).stderr(Stdio::null()).status();
            f
        });
        let dir = format!("/tmp/xvs-vl-{tag}");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(format!("{dir}/run")).unwrap();
        let db = format!("{dir}/conf.db");
        let ok = Command::new("ovsdb-tool")
            .args(["create", &db, "/usr/share/openvswitch/vswitch.ovsschema"])
            .status()
            .unwrap()
            .success();
        assert!(ok, "ovsdb-tool create");
        let server = Command::new("ovsdb-server")
            .arg(&db)
            .arg(format!("--remote=punix:{dir}/db.sock"))
            .arg(format!("--unixctl={dir}/ovsdb.ctl"))
            .arg("--no-chdir")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let e = Env { kind, dir, tag: tag.into(), server, switch: None, bridges: Vec::new(), _turn: turn };
        let t0 = Instant::now();
        while !std::path::Path::new(&format!("{}/db.sock", e.dir)).exists() && t0.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(20));
        }
        e.vsctl(&["--no-wait", "init"]);
        if kind == Kind::OvsDpdk {
            // As INTEROP-FACTS.md: no hugepages and no PCI for the switch.
            // OVS gives each VM port a pool of 262,144 mbufs (about 650 MB)
            // unless ports share one: 3 GB holds the suite's three guests.
            let extra =
                format!("other_config:dpdk-extra=--no-pci --no-huge --legacy-mem -m 3072 --file-prefix {}", e.eal());
            e.vsctl(&[
                "--no-wait",
                "set",
                "Open_vSwitch",
                ".",
                "other_config:dpdk-init=true",
                "other_config:dpdk-lcore-mask=0x1",
                "other_config:pmd-cpu-mask=0x2",
                &extra,
            ]);
        }
        e
    }

    fn eal(&self) -> String {
        format!("xvsvl{}", self.tag)
    }

    fn vsctl(&self, args: &[&str]) -> String {
        let o = Command::new("ovs-vsctl")
            .arg(format!("--db=unix:{}/db.sock", self.dir))
            .arg("--timeout=30")
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "ovs-vsctl {args:?}: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    }

    fn start_switch(&mut self) {
        assert!(self.switch.is_none());
        let log =
            std::fs::OpenOptions::new().create(true).append(true).open(format!("{}/switch.log", self.dir)).unwrap();
        let child = match self.kind {
            Kind::Xvs => Command::new(env!("CARGO_BIN_EXE_xvs"))
                .args([
                    "switch",
                    "--db",
                    &format!("unix:{}/db.sock", self.dir),
                    "--run-dir",
                    &format!("{}/run", self.dir),
                ])
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .unwrap(),
            Kind::OvsDpdk => {
                let d = format!("{}/run", self.dir);
                Command::new(OVS_DPDK)
                    .arg(format!("unix:{}/db.sock", self.dir))
                    .arg(format!("--pidfile={d}/ovs-vswitchd.pid"))
                    .arg(format!("--log-file={}/vswitchd.log", self.dir))
                    .envs([("OVS_RUNDIR", &d), ("OVS_DBDIR", &d), ("OVS_LOGDIR", &d)])
                    .stdout(Stdio::null())
                    .stderr(log)
                    .spawn()
                    .unwrap()
            }
        };
        self.switch = Some(child);
    }

    /// Signals the switch (`TERM` or `KILL`) and waits for it to go.
    fn stop_switch(&mut self, sig: &str) {
        if let Some(mut c) = self.switch.take() {
            let _ = Command::new("kill").args([&format!("-{sig}"), &c.id().to_string()]).status();
            let end = Instant::now() + Duration::from_secs(20);
            while Instant::now() < end {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
            panic!("the switch did not exit on SIG{sig} within 20 s");
        }
    }

    /// A bridge with the guest's port and the host's (ofports 1 and 2).
    fn add_bridge(&mut self, br: &str, vm_port: &str, sock: &str, host_port: &str) {
        self.vsctl(&["--no-wait", "add-br", br, "--", "set", "bridge", br, "datapath_type=netdev"]);
        self.bridges.push(br.into());
        self.vsctl(&[
            "--no-wait",
            "add-port",
            br,
            vm_port,
            "--",
            "set",
            "interface",
            vm_port,
            "type=dpdkvhostuserclient",
            &format!("options:vhost-server-path={sock}"),
            "ofport_request=1",
        ]);
        self.vsctl(&[
            "--no-wait",
            "add-port",
            br,
            host_port,
            "--",
            "set",
            "interface",
            host_port,
            "type=afxdp",
            "ofport_request=2",
        ]);
    }

    fn get(&self, iface: &str, col: &str) -> String {
        let o = Command::new("ovs-vsctl")
            .arg(format!("--db=unix:{}/db.sock", self.dir))
            .args(["--timeout=5", "get", "interface", iface, col])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    }

    /// Waits until the database says the port's guest is connected and its
    /// link up, and the host port has its ofport.
    fn wait_up(&self, vm_port: &str, host_port: &str, secs: u64) -> Result<(), String> {
        let end = Instant::now() + Duration::from_secs(secs);
        loop {
            let st = self.get(vm_port, "status");
            let link = self.get(vm_port, "link_state");
            let of = self.get(host_port, "ofport");
            if st.contains("status=connected") && link == "up" && of.parse::<i64>().is_ok_and(|n| n > 0) {
                return Ok(());
            }
            if Instant::now() > end {
                return Err(format!("{vm_port}: status {st}, link_state {link}; {host_port}: ofport {of}"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Memory tables the switch has received for `vm_port` so far.
    fn mem_tables(&self, vm_port: &str, sock: &str) -> u64 {
        match self.kind {
            Kind::Xvs => self
                .show()
                .lines()
                .filter(|l| l.contains(vm_port))
                .find_map(|l| l.split("memory_tables=").nth(1))
                .and_then(|v| v.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok())
                .unwrap_or(0),
            Kind::OvsDpdk => std::fs::read_to_string(format!("{}/vswitchd.log", self.dir))
                .unwrap_or_default()
                .lines()
                .filter(|l| l.contains(&format!("({sock})")) && l.contains("read message VHOST_USER_SET_MEM_TABLE"))
                .count() as u64,
        }
    }

    /// `xvs show` (the port's detail), or OVS's `ovs-vsctl show`.
    fn show(&self) -> String {
        let o = match self.kind {
            Kind::Xvs => Command::new(env!("CARGO_BIN_EXE_xvs"))
                .args(["show", "--run-dir", &format!("{}/run", self.dir)])
                .output()
                .unwrap(),
            Kind::OvsDpdk => {
                Command::new("ovs-vsctl").arg(format!("--db=unix:{}/db.sock", self.dir)).arg("show").output().unwrap()
            }
        };
        String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
    }

    fn log_tail(&self) -> String {
        let f = if self.kind == Kind::Xvs { "switch.log" } else { "vswitchd.log" };
        let s = std::fs::read_to_string(format!("{}/{f}", self.dir)).unwrap_or_default();
        let lines: Vec<&str> = s.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        self.stop_switch("KILL");
        let _ = self.server.kill();
        let _ = self.server.wait();
        for b in &self.bridges {
            let _ = Command::new("ip").args(["link", "del", b]).stderr(Stdio::null()).status();
        }
        if self.kind == Kind::OvsDpdk {
            let _ = Command::new("ip").args(["link", "del", "ovs-netdev"]).stderr(Stdio::null()).status();
            let _ = std::fs::remove_dir_all(format!("/var/run/dpdk/{}", self.eal()));
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Hugepages reserved for the test and a hugetlbfs mount of its own; both
/// restored when dropped.
struct Huge {
    before: u64,
    mount: String,
}

impl Huge {
    fn reserve(dir: &str) -> Result<Huge, String> {
        let path = "/proc/sys/vm/nr_hugepages";
        let read = || std::fs::read_to_string(path).ok().and_then(|s| s.trim().parse::<u64>().ok());
        let before = read().ok_or("cannot read vm.nr_hugepages")?;
        std::fs::write(path, (before + HUGEPAGES).to_string()).map_err(|e| format!("vm.nr_hugepages: {e}"))?;
        let mount = format!("{dir}/huge");
        // Restores the count from here on, also if the rest fails.
        let mut h = Huge { before, mount: String::new() };
        let now = read().unwrap_or(0);
        if now < before + HUGEPAGES {
            return Err(format!("asked the kernel for {HUGEPAGES} more 2 MiB pages, got {}", now - before));
        }
        std::fs::create_dir_all(&mount).map_err(|e| e.to_string())?;
        let ok = Command::new("mount")
            .args(["-t", "hugetlbfs", "-o", "pagesize=2M", "none", &mount])
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            return Err(format!("cannot mount hugetlbfs at {mount}"));
        }
        h.mount = mount;
        Ok(h)
    }
}

impl Drop for Huge {
    fn drop(&mut self) {
        if !self.mount.is_empty() {
            let _ = Command::new("umount").arg(&self.mount).status();
            let _ = std::fs::remove_dir(&self.mount);
        }
        let _ = std::fs::write("/proc/sys/vm/nr_hugepages", self.before.to_string());
    }
}

/// One guest: its port, socket, addresses, host, and testpmd (when running).
struct Guest {
    port: String,
    sock: String,
    mac: String,
    ip: String,
    host: Host,
    prefix: String,
    /// EAL memory options (`--no-huge -m 256`, or hugepages).
    mem: Vec<String>,
    pmd: Option<Testpmd>,
    starts: u32,
    /// testpmd of this start has been set to forward.
    forwarding: bool,
}

impl Guest {
    fn new(kind: Kind, tag: &str, i: usize, mem: Vec<String>) -> Guest {
        let net = format!("10.97.{}", i + 10 * (std::process::id() as usize % 20));
        let host = Host::create(&format!("xvl{tag}h{i}"), &format!("xvl{tag}p{i}"), &format!("{net}.2/24"), 1).unwrap();
        // xvs: Linux's defaults, whatever the shared helper chose: the
        // host's UDP datagrams leave with partial checksums (transmit
        // offload on), which the switch must finish before a guest that did
        // not accept checksum offload gets them. OVS-DPDK: transmit offload
        // off, as OVS's documentation tells AF_XDP users (with it on, none
        // of the host's datagrams reached a guest); xvs covers this path
        // with it on.
        let tx = if kind == Kind::Xvs { "on" } else { "off" };
        host.exec(&["ethtool", "-K", "eth0", "tx", tx]).unwrap();
        let _ = Command::new("ethtool").args(["-K", &host.port, "tx", tx]).output();
        let mac = format!("02:97:00:00:{:02x}:{i:02x}", std::process::id() % 256);
        let ip = format!("{net}.11");
        host.exec(&["ip", "neigh", "replace", &ip, "lladdr", &mac, "dev", "eth0", "nud", "permanent"]).unwrap();
        Guest {
            port: format!("xvl{tag}v{i}"),
            sock: format!("/tmp/xvs-vl-{tag}-vm{i}.sock"),
            mac,
            ip,
            host,
            prefix: format!("xvsvl{tag}g{i}"),
            mem,
            pmd: None,
            starts: 0,
            forwarding: false,
        }
    }

    /// Starts testpmd (its socket's server; it waits for the switch to
    /// connect before it prompts, so this does not wait).
    fn start(&mut self) {
        assert!(self.pmd.is_none());
        let _ = std::fs::remove_file(&self.sock);
        self.starts += 1;
        self.forwarding = false;
        let mem: Vec<&str> = self.mem.iter().map(String::as_str).collect();
        let prefix = format!("{}s{}", self.prefix, self.starts);
        let devargs = format!("mac={}", self.mac);
        self.pmd = Some(Testpmd::start_mem(std::path::Path::new(&self.sock), &prefix, 1, true, &devargs, &mem));
    }

    /// Waits for the prompt, then forwards with `5tswap` and prints what it
    /// receives.
    fn ready(&mut self) -> Result<(), String> {
        let pmd = self.pmd.as_mut().unwrap();
        if !pmd.wait_for("testpmd>", 0, 40) {
            return Err(format!("testpmd did not start:\n{}", pmd.diagnostics()));
        }
        pmd.cmd("set verbose 1");
        pmd.cmd("set fwd 5tswap");
        pmd.cmd("start");
        self.forwarding = true;
        Ok(())
    }

    fn quit(&mut self) {
        if let Some(mut p) = self.pmd.take() {
            let _ = p.quit(10);
        }
    }

    fn kill9(&mut self) {
        if let Some(mut p) = self.pmd.take() {
            p.kill();
        }
    }
}

impl Drop for Guest {
    fn drop(&mut self) {
        self.kill9();
        let _ = std::fs::remove_file(&self.sock);
    }
}

/// The host's side of a check: sends `N` datagrams to the guest, takes the
/// echoes, and prints `sent= exact= corrupt= foreign= dup= csum_errors=`.
const PROBE: &str = r#"
import socket, struct, sys, time, zlib
host_ip, vm_ip, step, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
def csum_errors():
    lines = [l.split() for l in open('/proc/net/snmp') if l.startswith('Udp:')]
    return int(dict(zip(lines[0][1:], lines[1][1:])).get('InCsumErrors', 0))
def payload(seq):
    body = struct.pack('!4sHI', b'XVSL', step, seq) + bytes((seq * 7 + i) & 0xff for i in range(8 + (seq * 37) % 1380))
    return body + struct.pack('!I', zlib.crc32(body))
# Warm-up: one datagram every 100 ms from another port until one comes
# back (a switch that just started may take a moment before its ports
# pass frames); late echoes of it find no socket and count nowhere.
w = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
w.bind((host_ip, 40001))
w.settimeout(0.1)
t0 = time.time()
warm = None
while warm is None and time.time() < t0 + 30:
    w.sendto(b'warm-up', (vm_ip, 7))
    try:
        if w.recvfrom(100)[0] == b'warm-up':
            warm = time.time() - t0
    except socket.timeout:
        pass
w.close()
if warm is None:
    print('warm=none')
    sys.exit(0)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
s.bind((host_ip, 40000))
e0 = csum_errors()
sent = {}
lens = []
for seq in range(n):
    p = payload(seq)
    sent[seq] = p
    lens.append(len(p))
    s.sendto(p, (vm_ip, 7))
    time.sleep(0.002)
got, corrupt, foreign, dup = set(), 0, 0, 0
s.settimeout(0.1)
end = time.time() + 4
while time.time() < end:
    try:
        d, a = s.recvfrom(65535)
    except socket.timeout:
        if len(got) == n and time.time() > end - 3.5:
            break
        continue
    if len(d) >= 10 and d[:4] == b'XVSL':
        st, seq = struct.unpack('!HI', d[4:10])
        if st != step:
            foreign += 1
        elif seq in got:
            dup += 1
        elif sent.get(seq) == d and a == (vm_ip, 7):
            got.add(seq)
        else:
            corrupt += 1
    else:
        foreign += 1
print('warm=%.1f sent=%d exact=%d corrupt=%d foreign=%d dup=%d csum_errors=%d lens=%s' % (
    warm, n, len(got), corrupt, foreign, dup, csum_errors() - e0, ','.join(map(str, lens))))
"#;

/// What one check found.
struct Check {
    /// Datagrams testpmd received with the right addresses, type and length.
    at_guest: usize,
    /// Echoes equal to what was sent, byte for byte.
    exact: usize,
    /// Seconds until the first warm-up datagram came back.
    warm: String,
    problems: Vec<String>,
}

/// Host -> guest -> host with `N` datagrams of step `step`.
fn probe(g: &mut Guest, step: u16) -> Check {
    let pmd = g.pmd.as_mut().expect("guest running");
    let from = pmd.output().len();
    let out = g
        .host
        .run(&["python3", "-c", PROBE, g.host.ip.split('/').next().unwrap(), &g.ip, &step.to_string(), &N.to_string()])
        .unwrap();
    let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let kv: BTreeMap<&str, &str> = line.split_whitespace().filter_map(|w| w.split_once('=')).collect();
    let num = |k: &str| kv.get(k).and_then(|v| v.parse::<usize>().ok()).unwrap_or(usize::MAX);
    // testpmd's record of what it received, for this guest's MAC.
    std::thread::sleep(Duration::from_millis(200));
    let o = pmd.output()[from..].to_string();
    let (smac, dmac) = (g.host.mac.to_uppercase(), g.mac.to_uppercase());
    let mut want: Vec<usize> = kv
        .get("lens")
        .map(|l| l.split(',').filter_map(|x| x.parse::<usize>().ok()).map(|p| p + 42).collect())
        .unwrap_or_default();
    let zeroed = o.matches("src=00:00:00:00:00:00 - dst=00:00:00:00:00:00").count();
    let mut at_guest = 0;
    for l in o.lines().filter(|l| l.contains(&format!("src={smac} - dst={dmac}"))) {
        let len = l.split("length=").nth(1).and_then(|v| v.split_whitespace().next()?.parse::<usize>().ok());
        if l.contains("type=0x0800") && l.contains("L4_UDP") {
            if let Some(i) = len.and_then(|n| want.iter().position(|&w| w == n)) {
                want.swap_remove(i);
                at_guest += 1;
            }
        }
    }
    let mut problems = Vec::new();
    if kv.get("warm") == Some(&"none") {
        problems.push("no echo of a warm-up datagram within 30 s".into());
    } else if num("exact") != N {
        problems.push(format!("host: {line}"));
    }
    for k in ["corrupt", "foreign", "dup", "csum_errors"] {
        if num(k) != 0 && !problems.iter().any(|p| p.starts_with("host:")) {
            problems.push(format!("host: {line}"));
        }
    }
    if at_guest != N || zeroed != 0 {
        problems.push(format!("guest: {at_guest} of {N} datagrams with the right headers, {zeroed} zeroed frames"));
    }
    if !out.stderr.is_empty() {
        problems.push(format!("probe: {}", String::from_utf8_lossy(&out.stderr)));
    }
    let warm = kv.get("warm").unwrap_or(&"?").to_string();
    Check { at_guest, exact: num("exact").min(N), warm, problems }
}

/// The suite's results, one row per check.
#[derive(Default)]
struct Table {
    rows: Vec<(String, String, String, String)>,
    failures: Vec<String>,
}

impl Table {
    fn check(&mut self, step: &str, guests: &mut [&mut Guest], n: &mut u16) {
        let mut res = Vec::new();
        let mut frames = 0;
        let mut warm = Vec::new();
        for g in guests.iter_mut() {
            *n += 1;
            let c = probe(g, *n);
            frames += c.at_guest + c.exact;
            warm.push(c.warm.clone());
            if c.problems.is_empty() {
                res.push(format!("{}: ok", g.port));
            } else {
                res.push(format!("{}: FAIL", g.port));
                self.failures.push(format!("{step}, {}: {}", g.port, c.problems.join("; ")));
            }
        }
        self.rows.push((step.into(), res.join(", "), frames.to_string(), warm.join(", ")));
    }

    fn fail(&mut self, step: &str, why: String) {
        self.rows.push((step.into(), "FAIL".into(), "0".into(), String::new()));
        self.failures.push(format!("{step}: {why}"));
    }

    fn skip(&mut self, step: &str, why: String) {
        self.rows.push((step.into(), format!("skipped: {why}"), "0".into(), String::new()));
    }

    fn print(&self, kind: Kind) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "\nVM-port lifecycle on {}", kind.name());
        let _ = writeln!(s, "{:<44} {:<30} {:>14}  first echo after (s)", "step", kind.name(), "frames checked");
        for (a, b, c, d) in &self.rows {
            let _ = writeln!(s, "{a:<44} {b:<30} {c:>14}  {d}");
        }
        s
    }
}

/// Waits for every guest of `gs` to be connected and ready (testpmd
/// prompting), with `what` in the failure.
fn all_up(env: &Env, gs: &mut [&mut Guest]) -> Result<(), String> {
    for g in gs.iter_mut() {
        if !g.forwarding {
            g.ready()?;
        }
        env.wait_up(&g.port, &g.host.port, 40)?;
    }
    // The port's queues run a moment after the link is reported.
    std::thread::sleep(Duration::from_millis(300));
    Ok(())
}

#[test]
fn vm_ports_survive_switch_and_guest_restarts_with_intact_frames() {
    if !usable() {
        return;
    }
    let kind = match std::env::var("XVS_SWITCH").as_deref() {
        Ok("ovs-dpdk") => Kind::OvsDpdk,
        _ => Kind::Xvs,
    };
    if kind == Kind::OvsDpdk && !std::path::Path::new(OVS_DPDK).exists() {
        panic!("XVS_SWITCH=ovs-dpdk needs {OVS_DPDK} (apt-get install openvswitch-switch-dpdk)");
    }
    std::env::set_var("XVS_BIN", env!("CARGO_BIN_EXE_xvs"));
    let t0 = Instant::now();
    let tag = format!("{}", std::process::id() % 1000);
    let mut env = Env::new(kind, &tag);
    let no_huge = || vec!["--no-huge".to_string(), "-m".into(), "256".into()];
    let mut g1 = Guest::new(kind, &tag, 1, no_huge());
    let mut g2 = Guest::new(kind, &tag, 2, no_huge());
    for g in [&g1, &g2] {
        let br = format!("xvl{tag}b{}", &g.port[g.port.len() - 1..]);
        env.add_bridge(&br, &g.port, &g.sock, &g.host.port);
    }
    g1.start();
    g2.start();
    env.start_switch();
    let mut t = Table::default();
    let mut n = 0u16;
    let up = |env: &Env, gs: &mut [&mut Guest], t: &mut Table, step: &str| -> bool {
        match all_up(env, gs) {
            Ok(()) => true,
            Err(e) => {
                t.fail(step, format!("{e}\n--- switch log\n{}", env.log_tail()));
                false
            }
        }
    };

    // Interface:status as OVS-DPDK reports it.
    let step = "start: guests 1, 2 connected";
    if up(&env, &mut [&mut g1, &mut g2], &mut t, step) {
        let st = env.get(&g1.port, "status");
        eprintln!("{}: status {st}", g1.port);
        let want = ["mode=client", "status=connected", &format!("socket=\"{}\"", g1.sock), "num_of_vrings=\"2\""];
        if let Some(w) = want.iter().find(|w| !st.contains(*w)) {
            t.fail("Interface:status", format!("{w} missing in {st}"));
        }
        t.check(step, &mut [&mut g1, &mut g2], &mut n);
    }

    let step = "switch restart (SIGTERM, start)";
    env.stop_switch("TERM");
    let st = env.get(&g1.port, "status");
    eprintln!("switch stopped: {} status {st}", g1.port);
    env.start_switch();
    if up(&env, &mut [&mut g1, &mut g2], &mut t, step) {
        t.check(step, &mut [&mut g1, &mut g2], &mut n);
    }

    let step = "guest 1 restart (quit, start)";
    g1.quit();
    if kind == Kind::Xvs || kind == Kind::OvsDpdk {
        // The database follows the guest going away.
        let end = Instant::now() + Duration::from_secs(10);
        while !env.get(&g1.port, "status").contains("status=disconnected") && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(100));
        }
        let st = env.get(&g1.port, "status");
        if !st.contains("status=disconnected") || !st.contains("mode=client") {
            t.fail("Interface:status without a guest", format!("{}: {st}", g1.port));
        }
    }
    g1.start();
    if up(&env, &mut [&mut g1], &mut t, step) {
        t.check(step, &mut [&mut g1, &mut g2], &mut n);
    }

    let step = "switch kill -9, start";
    env.stop_switch("KILL");
    env.start_switch();
    if up(&env, &mut [&mut g1, &mut g2], &mut t, step) {
        t.check(step, &mut [&mut g1, &mut g2], &mut n);
    }

    let step = "guest 1 kill -9, start";
    g1.kill9();
    g1.start();
    if up(&env, &mut [&mut g1], &mut t, step) {
        t.check(step, &mut [&mut g1, &mut g2], &mut n);
    }

    let step = "guests 1, 2 restart in turn: 1";
    g1.quit();
    g1.start();
    if up(&env, &mut [&mut g1], &mut t, step) {
        t.check(step, &mut [&mut g1, &mut g2], &mut n);
    }
    let step = "guests 1, 2 restart in turn: 2";
    g2.quit();
    g2.start();
    if up(&env, &mut [&mut g2], &mut t, step) {
        t.check(step, &mut [&mut g1, &mut g2], &mut n);
    }

    // A guest on hugepages, in DPDK's dynamic memory mode.
    let step = "hugepage guest: connected";
    match Huge::reserve(&env.dir) {
        Err(why) => {
            eprintln!("hugepage step skipped: {why}");
            t.skip(step, why.clone());
            t.skip("hugepage guest: memory grows", why);
        }
        Ok(huge) => {
            let mem = vec!["--huge-dir".to_string(), huge.mount.clone(), "--single-file-segments".into()];
            let mut g3 = Guest::new(kind, &tag, 3, mem);
            let br = format!("xvl{tag}b3");
            env.add_bridge(&br, &g3.port, &g3.sock, &g3.host.port);
            g3.start();
            if up(&env, &mut [&mut g3], &mut t, step) {
                t.check(step, &mut [&mut g3], &mut n);
                let tables = env.mem_tables(&g3.port, &g3.sock);
                // dpdk-pdump, a secondary process, creates its capture pool
                // in the guest's DPDK: the guest maps more hugepages and
                // sends the switch a new memory table while running.
                let prefix = format!("{}s{}", g3.prefix, g3.starts);
                let pdump_file = format!("{}/pdump.pcap", env.dir);
                let mut pdump = Command::new("dpdk-pdump")
                    .args(["-l", "0", "--no-pci", "--file-prefix", &prefix, "--"])
                    .arg("--pdump")
                    .arg(format!("port=0,queue=*,rx-dev={pdump_file},total-num-mbufs=16383"))
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap();
                let end = Instant::now() + Duration::from_secs(20);
                while env.mem_tables(&g3.port, &g3.sock) <= tables && Instant::now() < end {
                    std::thread::sleep(Duration::from_millis(100));
                }
                let after = env.mem_tables(&g3.port, &g3.sock);
                let step = "hugepage guest: memory grows";
                eprintln!("hugepage guest: memory tables {tables} -> {after}");
                if after <= tables {
                    let _ = Command::new("kill").args(["-INT", &pdump.id().to_string()]).status();
                    let o = pdump.wait_with_output().unwrap();
                    t.fail(
                        step,
                        format!(
                            "no new memory table ({tables}); pdump: {}\n{}",
                            String::from_utf8_lossy(&o.stderr),
                            env.show()
                        ),
                    );
                } else if up(&env, &mut [&mut g3], &mut t, step) {
                    t.check(&format!("{step} ({tables} -> {after} tables)"), &mut [&mut g3, &mut g1], &mut n);
                    let _ = Command::new("kill").args(["-INT", &pdump.id().to_string()]).status();
                    let _ = pdump.wait();
                }
            }
            g3.kill9();
            drop(g3);
            drop(huge);
        }
    }

    let report = t.print(kind);
    eprintln!("{report}wall time {:.0} s", t0.elapsed().as_secs_f64());
    let _ = std::fs::write(format!("/tmp/xvs-vhost-lifecycle-{}.txt", kind.name()), &report);
    assert!(t.failures.is_empty(), "{}:\n{}", kind.name(), t.failures.join("\n\n"));
}
