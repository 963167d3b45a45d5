//! Overlay tunnels end to end, for tests: two hypervisors joined by an
//! underlay, each running its own switch (xvs, or Open vSwitch 3.1 as the
//! reference) with userspace (native) tunneling as OVS documents it, and a
//! VM on each whose traffic crosses a Geneve, VXLAN or GRE tunnel.
//!
//! The set-up, all in network namespaces named after a per-test tag so that
//! tests run in parallel (nothing is created in the root namespace: veths
//! are created straight into their namespaces):
//!
//! ```text
//!   vmA (eth0 10.N.0.1)                                 vmB (eth0 10.N.0.2)
//!    |                                                   |
//!   hvA: br-int [vm, tun0]                              hvB: br-int [vm, tun0]
//!        br-phy [ul] + 172.31.N.1 on br-phy                  br-phy [ul] + 172.31.N.2
//!          |                                                   |
//!          +-------- mid: Linux bridge br0 (172.31.N.254) -----+
//! ```
//!
//! Each hypervisor has its own ovsdb-server and its switch runs inside its
//! namespace: `xvs switch --db` (ports `type=afxdp`) or `ovs-vswitchd`
//! (netdev datapath, ports of the default type, which OVS opens with
//! AF_PACKET). Both are driven the same way: `ovs-vsctl` on the
//! database, `ovs-appctl` through `OVS_RUNDIR=<dir>/run`, `ovs-ofctl` on
//! `<dir>/run/<bridge>.mgmt`. tcpdump on the middle bridge shows the real
//! encapsulation. Everything is removed on drop, also after a failed
//! assertion; a failing test first prints each switch's log tail and its
//! tunnel, neighbour, route and datapath state.

use crate::netns::{sh, Host};
use crate::ovnref::eventually;
use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The switch a hypervisor runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Switch {
    Xvs,
    Ovs,
}

impl Switch {
    pub fn name(self) -> &'static str {
        match self {
            Switch::Xvs => "xvs",
            Switch::Ovs => "OVS 3.1",
        }
    }
}

/// The encapsulation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Geneve,
    Vxlan,
    Gre,
}

impl Kind {
    /// The Interface `type`.
    pub fn ovs_type(self) -> &'static str {
        match self {
            Kind::Geneve => "geneve",
            Kind::Vxlan => "vxlan",
            Kind::Gre => "gre",
        }
    }

    /// The UDP destination port (None for GRE).
    pub fn udp_port(self) -> Option<u16> {
        match self {
            Kind::Geneve => Some(6081),
            Kind::Vxlan => Some(4789),
            Kind::Gre => None,
        }
    }

    /// What tcpdump prints for a frame of this encapsulation with virtual
    /// network id `vni`: the protocol and the id, as two words to find in
    /// one line.
    pub fn tcpdump_words(self, vni: u32) -> [String; 2] {
        match self {
            Kind::Geneve => ["Geneve".into(), format!("vni {vni:#x}")],
            Kind::Vxlan => ["VXLAN".into(), format!("vni {vni}")],
            Kind::Gre => ["GREv0".into(), format!("key={vni:#x}")],
        }
    }
}

/// The underlay's address family: the tunnel endpoints' addresses (on
/// br-phy) are `172.31.N.{1,2}/24` or `fd31:N::{1,2}/64`. The VMs' overlay
/// stays IPv4 either way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Underlay {
    V4,
    V6,
}

/// The tunnel key (VNI): fixed in the port's options, or `options:key=flow`
/// with br-int flows that set `tun_id` on output and match it on input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key {
    Fixed(u32),
    Flow(u32),
}

impl Key {
    pub fn vni(self) -> u32 {
        match self {
            Key::Fixed(v) | Key::Flow(v) => v,
        }
    }
}

/// Root and ovsdb-server are needed (and ovs-vswitchd when a side runs
/// OVS); `Some(reason)` when the suite must be skipped.
pub fn unavailable(switches: [Switch; 2]) -> Option<String> {
    let uid = Command::new("id").arg("-u").output().ok().map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    if uid.as_deref() != Some("0") {
        return Some("needs root (network namespaces)".into());
    }
    let has =
        |bin: &str| Command::new(bin).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok();
    for bin in ["ovsdb-server", "ovsdb-tool", "ovs-vsctl", "ovs-appctl", "ovs-ofctl", "tcpdump", "python3"] {
        if !has(bin) {
            return Some(format!("needs {bin} (openvswitch-switch, tcpdump, python3)"));
        }
    }
    if switches.contains(&Switch::Ovs) && !has("ovs-vswitchd") {
        return Some("needs ovs-vswitchd (openvswitch-switch)".into());
    }
    None
}

/// The per-test directory, removed last.
struct TempDir(String);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One hypervisor: its namespace (`ul` is its underlay veth), its
/// ovsdb-server and its switch.
pub struct Hv {
    pub switch: Switch,
    /// "A" or "B".
    pub name: &'static str,
    /// Databases, logs; `<dir>/run` holds the switch's sockets.
    pub dir: String,
    /// The tunnel endpoint address (on br-phy).
    pub endpoint: String,
    xvs: Option<Child>,
    /// The namespace; dropped (deleted) after the processes are stopped.
    pub ns: Host,
}

impl Hv {
    /// Where ovs-appctl and ovs-ofctl find the switch.
    pub fn run_dir(&self) -> String {
        format!("{}/run", self.dir)
    }

    /// ovs-vsctl on this hypervisor's database (waits for the switch to
    /// apply the change).
    pub fn vsctl(&self, args: &[&str]) -> Result<String> {
        let db = format!("--db=unix:{}/db.sock", self.dir);
        let mut a = vec!["ovs-vsctl", db.as_str(), "--timeout=20"];
        a.extend_from_slice(args);
        sh(&a)
    }

    /// ovs-appctl against the switch: success, stdout then stderr.
    pub fn appctl(&self, args: &[&str]) -> (bool, String) {
        match Command::new("ovs-appctl").env("OVS_RUNDIR", self.run_dir()).arg("--timeout=10").args(args).output() {
            Ok(o) => (
                o.status.success(),
                String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr),
            ),
            Err(e) => (false, e.to_string()),
        }
    }

    /// ovs-appctl that must succeed.
    /// Packets this hypervisor's kernel fast path forwarded for `bridge`'s
    /// entries (xvs), after waiting for the offload manager to credit them
    /// (every 250 ms).
    pub fn kernel_forwarded(&self, bridge: &str) -> u64 {
        std::thread::sleep(Duration::from_millis(600));
        crate::offload::forwarded_in_show(&self.appctl_ok(&["dpif-netdev/offload-show"]), Some(bridge))
    }

    pub fn appctl_ok(&self, args: &[&str]) -> String {
        let (ok, out) = self.appctl(args);
        assert!(ok, "hv{} ({}): ovs-appctl {args:?}: {out}", self.name, self.switch.name());
        out
    }

    /// ovs-ofctl on `bridge` (options first, then the command, then its
    /// arguments): success, stdout then stderr.
    pub fn ofctl(&self, bridge: &str, args: &[&str]) -> (bool, String) {
        let target = format!("unix:{}/{bridge}.mgmt", self.run_dir());
        let (opts, rest): (Vec<&str>, Vec<&str>) = args.iter().partition(|a| a.starts_with('-'));
        match Command::new("ovs-ofctl")
            .arg("--timeout=10")
            .args(&opts)
            .arg(rest[0])
            .arg(&target)
            .args(&rest[1..])
            .output()
        {
            Ok(o) => (
                o.status.success(),
                String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr),
            ),
            Err(e) => (false, e.to_string()),
        }
    }

    /// ovs-ofctl that must succeed; its output.
    pub fn ofctl_ok(&self, bridge: &str, args: &[&str]) -> String {
        let (ok, out) = self.ofctl(bridge, args);
        assert!(ok, "hv{} ({}): ovs-ofctl {args:?} {bridge}: {out}", self.name, self.switch.name());
        out
    }

    /// Empties the switch's tunnel neighbour cache (`tnl/neigh/flush`).
    /// OVS 3.1 learns tunnel neighbours only from packets it translates
    /// (upcalls), and the datapath flow that carried the peer's last ARP
    /// reply outlives the flush (until it idles out, 10 s), so the cache
    /// would stay empty: for OVS the datapath flows are purged too
    /// (`revalidator/purge`).
    pub fn flush_neighbours(&self) {
        self.appctl_ok(&["tnl/neigh/flush"]);
        if self.switch == Switch::Ovs {
            self.appctl_ok(&["revalidator/purge"]);
        }
    }

    /// The MAC of br-phy's device in the namespace (the endpoint's MAC).
    pub fn endpoint_mac(&self) -> String {
        self.ns.exec(&["cat", "/sys/class/net/br-phy/address"]).map(|s| s.trim().to_string()).unwrap_or_default()
    }

    /// The drop counters of the tunnel receive path, by reason. xvs: the
    /// `drops:` section of `ovs-appctl tnl/ports/show` (`  tnl_<reason>:
    /// <count>` lines). OVS: its coverage counter
    /// `datapath_drop_tunnel_pop_error` (every packet its tunnel pop
    /// rejects), under that name.
    pub fn tunnel_drops(&self) -> BTreeMap<String, u64> {
        match self.switch {
            Switch::Xvs => parse_drops(&self.appctl(&["tnl/ports/show"]).1),
            Switch::Ovs => {
                let cov = self.appctl(&["coverage/show"]).1;
                let mut m = BTreeMap::new();
                if let Some(l) = cov.lines().find(|l| l.trim_start().starts_with("datapath_drop_tunnel_pop_error")) {
                    if let Some(n) = l.rsplit("total:").next().and_then(|n| n.trim().parse().ok()) {
                        m.insert("datapath_drop_tunnel_pop_error".to_string(), n);
                    }
                }
                m
            }
        }
    }

    /// Everything worth reading when a test fails.
    pub fn diagnostics(&self) -> String {
        let mut s = format!("===== hv{} ({}) in {} =====\n", self.name, self.switch.name(), self.ns.ns);
        let log = match self.switch {
            Switch::Xvs => "xvs.log",
            Switch::Ovs => "vswitchd.log",
        };
        let text = std::fs::read_to_string(format!("{}/{log}", self.dir)).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        s += &format!("--- {log} (last 40 lines)\n{}\n", lines[lines.len().saturating_sub(40)..].join("\n"));
        for c in [&["tnl/ports/show"][..], &["tnl/neigh/show"], &["ovs/route/show"], &["dpctl/dump-flows"]] {
            s += &format!("--- ovs-appctl {}\n{}\n", c.join(" "), self.appctl(c).1.trim_end());
        }
        let cov = self.appctl(&["coverage/show"]).1;
        let cov: Vec<&str> =
            cov.lines().filter(|l| l.contains("drop") || l.contains("tnl") || l.contains("tunnel")).collect();
        s += &format!("--- ovs-appctl coverage/show (drops, tunnels)\n{}\n", cov.join("\n"));
        for br in ["br-int", "br-phy"] {
            s += &format!("--- ovs-ofctl dump-flows {br}\n{}\n", self.ofctl(br, &["dump-flows"]).1.trim_end());
        }
        s += &format!("--- ip addr\n{}\n", self.ns.exec(&["ip", "-br", "addr"]).unwrap_or_default().trim_end());
        s += &format!("--- ip route\n{}\n", self.ns.exec(&["ip", "route"]).unwrap_or_default().trim_end());
        s += &format!("--- ip -6 route\n{}\n", self.ns.exec(&["ip", "-6", "route"]).unwrap_or_default().trim_end());
        s
    }

    fn pid(&self, file: &str) -> Option<String> {
        std::fs::read_to_string(format!("{}/{file}", self.dir)).ok().map(|p| p.trim().to_string())
    }
}

impl Drop for Hv {
    fn drop(&mut self) {
        let mut pids = Vec::new();
        if let Some(mut c) = self.xvs.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        if self.switch == Switch::Ovs {
            pids.extend(self.pid("run/ovs-vswitchd.pid"));
        }
        pids.extend(self.pid("ovsdb.pid"));
        for p in &pids {
            let _ = Command::new("kill").arg(p).stderr(Stdio::null()).status();
        }
        // Wait for them to go (a SIGKILL after 2 s) so the namespace is
        // deleted under no one.
        let t = Instant::now();
        while pids.iter().any(|p| std::path::Path::new(&format!("/proc/{p}")).exists()) {
            if t.elapsed() > Duration::from_secs(2) {
                for p in &pids {
                    let _ = Command::new("kill").args(["-9", p]).stderr(Stdio::null()).status();
                }
                break;
            }
            // A zombie (its parent, if it is us, never reaps a --detach
            // daemon) counts as gone.
            if pids.iter().all(|p| {
                std::fs::read_to_string(format!("/proc/{p}/stat"))
                    .map(|s| s.rsplit(')').next().is_some_and(|r| r.trim_start().starts_with('Z')))
                    .unwrap_or(true)
            }) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The `drops:` section of xvs's `tnl/ports/show`: reason -> count.
pub fn parse_drops(text: &str) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    let mut on = false;
    for l in text.lines() {
        if l.trim() == "drops:" {
            on = true;
            continue;
        }
        if on {
            let Some((k, v)) = l.trim().split_once(':') else { continue };
            if let Ok(n) = v.trim().parse() {
                m.insert(k.trim().to_string(), n);
            }
        }
    }
    m
}

/// A malformed tunnel packet, sent from the middle namespace to an
/// endpoint with the peer endpoint's source address (so only the header,
/// not the sender, is wrong). Five of each are sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Malformed {
    /// Shorter than the fixed header (Geneve 8, VXLAN 8, GRE 4 bytes).
    Truncated,
    /// Geneve version 1; GRE version 1.
    BadVersion,
    /// Geneve: an option whose length runs past the options area.
    BadOptions,
    /// VXLAN without the I (VNI present) flag.
    NoVni,
    /// Geneve/GRE: protocol type 0x1234 (neither Ethernet nor IP).
    BadProtocol,
}

impl Malformed {
    /// The reason xvs counts it under in `tnl/ports/show`.
    pub fn reason(self) -> &'static str {
        match self {
            Malformed::Truncated => "tnl_truncated",
            Malformed::BadVersion => "tnl_bad_version",
            Malformed::BadOptions => "tnl_bad_options",
            Malformed::NoVni => "tnl_no_vni",
            Malformed::BadProtocol => "tnl_bad_protocol",
        }
    }

    /// The Python expression of the tunnel header and payload (what follows
    /// the UDP header, or the IP header for GRE) for VNI 5001-like `vni`.
    fn python(self, kind: Kind, vni: u32) -> Result<String> {
        let v = format!("({vni}).to_bytes(3,'big')");
        // An inner Ethernet frame: broadcast, IPv4 ethertype, 46 bytes.
        let inner = "b'\\xff'*6 + b'\\x02\\x00\\x00\\x00\\x00\\x99' + b'\\x08\\x00' + b'\\x00'*46";
        Ok(match (kind, self) {
            (Kind::Geneve, Malformed::Truncated) => "b'\\x00\\x00\\x65'".into(),
            (Kind::Geneve, Malformed::BadVersion) => format!("bytes([0x40,0,0x65,0x58]) + {v} + b'\\x00' + {inner}"),
            // Two words of options; the option says 5 words of data.
            (Kind::Geneve, Malformed::BadOptions) => {
                format!("bytes([0x02,0,0x65,0x58]) + {v} + b'\\x00' + bytes([0xff,0xff,0x00,0x05,1,2,3,4]) + {inner}")
            }
            (Kind::Geneve, Malformed::BadProtocol) => format!("bytes([0,0,0x12,0x34]) + {v} + b'\\x00' + {inner}"),
            (Kind::Vxlan, Malformed::Truncated) => "b'\\x08\\x00'".into(),
            (Kind::Vxlan, Malformed::NoVni) => format!("bytes([0,0,0,0]) + {v} + b'\\x00' + {inner}"),
            (Kind::Gre, Malformed::Truncated) => "b'\\x20'".into(),
            (Kind::Gre, Malformed::BadVersion) => format!("bytes([0x20,0x01,0x65,0x58,0]) + {v} + {inner}"),
            (Kind::Gre, Malformed::BadProtocol) => format!("bytes([0x20,0x00,0x12,0x34,0]) + {v} + {inner}"),
            (k, m) => bail!("no malformed {m:?} for {k:?}"),
        })
    }
}

/// The middle bridge's MAC (the next hop of a route through the middle).
pub const MID_MAC: &str = "02:00:00:00:ff:fe";

/// tcpdump's output as one string per frame: a frame starts at a line
/// with a timestamp ("16:36:22.490118 ..."); the lines after it until the
/// next (VXLAN's inner frame, `-v` decodes) are joined to it with a space.
pub fn frames(text: &str) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    for l in text.lines() {
        let b = l.as_bytes();
        let stamp = b.len() > 15 && b[2] == b':' && b[5] == b':' && b[8] == b'.';
        match v.last_mut() {
            Some(last) if !stamp => {
                last.push(' ');
                last.push_str(l.trim());
            }
            _ => v.push(l.to_string()),
        }
    }
    v
}

/// The whole set-up: the two hypervisors, their VMs and the underlay.
pub struct Overlay {
    pub kind: Kind,
    pub key: Key,
    pub underlay: Underlay,
    /// N in 172.31.N.0/24 (fd31:N::/64) and 10.N.0.0/24.
    pub net: u8,
    // Dropped in this order: switches stop before any namespace goes, the
    // directory goes last.
    pub hv: [Hv; 2],
    pub vm: [Host; 2],
    /// The middle namespace; its Host's interface is the bridge `br0`.
    pub mid: Host,
    _dir: TempDir,
}

fn netns_add(name: &str) -> Result<Host> {
    let _ = Command::new("ip").args(["netns", "del", name]).stderr(Stdio::null()).status();
    sh(&["ip", "netns", "add", name])?;
    let h = Host::bare(name, "", "");
    h.exec(&["ip", "link", "set", "lo", "up"])?;
    // No IPv6 autoconfiguration chatter in captures; new devices (the
    // switches' taps) inherit `default`.
    h.exec(&["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"])?;
    Ok(h)
}

impl Overlay {
    /// Builds the set-up for test `tag` (a few letters, unique per test):
    /// hypervisor A runs `switches[0]`, B `switches[1]`; a `kind` tunnel
    /// with `key` between them. Returns once both bridges and the tunnel
    /// ports exist and the endpoints have their addresses (traffic may
    /// need a moment more: see [`Overlay::wait_connected`]), over an IPv4
    /// or IPv6 `underlay`.
    pub fn start(
        xvs_bin: &str,
        tag: &str,
        kind: Kind,
        switches: [Switch; 2],
        key: Key,
        underlay: Underlay,
    ) -> Result<Overlay> {
        Overlay::start_mtu(xvs_bin, tag, kind, switches, key, underlay, 1500)
    }

    /// As [`Overlay::start`], with the VMs' links (both ends) at
    /// `inner_mtu` and the underlay (veths, middle bridge) 100 bytes above
    /// it, set when the links are made: a veth whose peer already has a
    /// single-buffer XDP program (the switches' AF_XDP ports) refuses an
    /// MTU above a page, and xvs picks its multi-buffer program only for
    /// a device that has such an MTU when it attaches.
    pub fn start_mtu(
        xvs_bin: &str,
        tag: &str,
        kind: Kind,
        switches: [Switch; 2],
        key: Key,
        underlay: Underlay,
        inner_mtu: u32,
    ) -> Result<Overlay> {
        let (inner, outer) = (inner_mtu.to_string(), (inner_mtu + 100).to_string());
        let pid = std::process::id();
        let net = 16 + (tag.bytes().fold(7u32, |h, b| h.wrapping_mul(31).wrapping_add(b as u32)) % 200) as u8;
        let dir = format!("/tmp/xvs-tnl-{tag}-{pid}");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let tmp = TempDir(dir.clone());
        let nsname = |role: &str| format!("xvstnl-{pid}-{tag}-{role}");

        // The underlay.
        let mut mid = netns_add(&nsname("mid"))?;
        mid.ifname = "br0".into();
        mid.ip = format!("172.31.{net}.254");
        // A fixed MAC: a Linux bridge otherwise takes its lowest port's.
        mid.exec(&["ip", "link", "add", "br0", "mtu", &outer, "address", MID_MAC, "type", "bridge"])?;
        mid.exec(&["ip", "addr", "add", &format!("172.31.{net}.254/24"), "dev", "br0"])?;
        mid.exec(&["ip", "link", "set", "br0", "up"])?;
        // The middle also routes (the route-change scenario sends one
        // hypervisor's tunnel through it), without redirecting.
        mid.exec(&[
            "sysctl",
            "-qw",
            "net.ipv4.ip_forward=1",
            "net.ipv4.conf.all.send_redirects=0",
            "net.ipv4.conf.br0.send_redirects=0",
        ])?;
        mid.mac = mid.exec(&["cat", "/sys/class/net/br0/address"])?.trim().to_string();
        if underlay == Underlay::V6 {
            mid.exec(&["sysctl", "-qw", "net.ipv6.conf.br0.disable_ipv6=0"])?;
            mid.exec(&["ip", "-6", "addr", "add", &format!("fd31:{net}::fe/64"), "dev", "br0", "nodad"])?;
        }

        let mut vms = Vec::new();
        let mut hvs = Vec::new();
        for (i, name) in ["A", "B"].into_iter().enumerate() {
            let n = i + 1;
            let mut vm = netns_add(&nsname(&format!("vm{name}")))?;
            vm.ifname = "eth0".into();
            vm.ip = format!("10.{net}.0.{n}");
            let mut hvns = netns_add(&nsname(&format!("hv{name}")))?;
            hvns.ifname = "ul".into();
            hvns.ip = match underlay {
                Underlay::V4 => format!("172.31.{net}.{n}"),
                Underlay::V6 => format!("fd31:{net}::{n}"),
            };
            // The underlay veth: `ul` in the hypervisor, `ul<name>` on the
            // middle bridge.
            let mid_end = format!("ul{name}");
            sh(&[
                "ip", "link", "add", "ul", "netns", &hvns.ns, "mtu", &outer, "type", "veth", "peer", "name", &mid_end,
                "netns", &mid.ns, "mtu", &outer,
            ])?;
            mid.exec(&["ip", "link", "set", &mid_end, "master", "br0", "up"])?;
            // The VM's veth: `eth0` in the VM, `vm` in the hypervisor.
            sh(&[
                "ip", "link", "add", "vm", "netns", &hvns.ns, "mtu", &inner, "type", "veth", "peer", "name", "eth0",
                "netns", &vm.ns, "mtu", &inner,
            ])?;
            vm.exec(&["ip", "addr", "add", &format!("{}/24", vm.ip), "dev", "eth0"])?;
            vm.exec(&["ip", "link", "set", "eth0", "mtu", &inner, "up"])?;
            // OVS 3.1 does not finish partial checksums (its documentation
            // says to turn transmit offload off); xvs's side keeps Linux's
            // defaults on the same links.
            let for_ovs = switches[i] == Switch::Ovs;
            if for_ovs {
                vm.exec(&["ethtool", "-K", "eth0", "tx", "off"])?; // why: OVS only, see above
            }
            vm.mac = vm.exec(&["cat", "/sys/class/net/eth0/address"])?.trim().to_string();
            for dev in ["ul", "vm"] {
                hvns.exec(&["ip", "link", "set", dev, "up"])?;
                if for_ovs {
                    hvns.exec(&["ethtool", "-K", dev, "tx", "off"])?; // why: OVS only, see above
                }
            }
            // The hypervisor's own stack must not answer for the endpoint
            // on `ul` (OVS's AF_PACKET ports leave frames to the kernel
            // too): the endpoint lives on br-phy.
            hvns.exec(&["sysctl", "-qw", "net.ipv4.conf.all.arp_ignore=1", "net.ipv4.conf.ul.arp_ignore=8"])?;
            vms.push(vm);

            let d = format!("{dir}/{name}");
            std::fs::create_dir_all(format!("{d}/run"))?;
            let mut hv =
                Hv { switch: switches[i], name, dir: d.clone(), endpoint: hvns.ip.clone(), xvs: None, ns: hvns };
            sh(&["ovsdb-tool", "create", &format!("{d}/conf.db"), "/usr/share/openvswitch/vswitch.ovsschema"])?;
            let args = crate::netns::ovsdb_server_args(&d, "conf.db", "db.sock", "ovsdb");
            hv.ns.exec(&args.iter().map(String::as_str).collect::<Vec<_>>())?;
            sh(&["ovs-vsctl", &format!("--db=unix:{d}/db.sock"), "--no-wait", "init"])?;
            match hv.switch {
                Switch::Xvs => {
                    let log = std::fs::File::create(format!("{d}/xvs.log"))?;
                    let child = Command::new("ip")
                        .args(["netns", "exec", &hv.ns.ns, xvs_bin, "switch", "--db"])
                        .arg(format!("unix:{d}/db.sock"))
                        .arg("--run-dir")
                        .arg(format!("{d}/run"))
                        .stdin(Stdio::null())
                        .stdout(log.try_clone()?)
                        .stderr(log)
                        .spawn()
                        .context("starting xvs switch")?;
                    hv.xvs = Some(child);
                }
                Switch::Ovs => {
                    let out = Command::new("ip")
                        .args(["netns", "exec", &hv.ns.ns, "ovs-vswitchd"])
                        .arg(format!("unix:{d}/db.sock"))
                        .arg(format!("--pidfile={d}/run/ovs-vswitchd.pid"))
                        .arg(format!("--log-file={d}/vswitchd.log"))
                        .arg("--detach")
                        .env("OVS_RUNDIR", format!("{d}/run"))
                        .env("OVS_DBDIR", &d)
                        .env("OVS_LOGDIR", &d)
                        .stdin(Stdio::null())
                        .output()
                        .context("starting ovs-vswitchd")?;
                    if !out.status.success() {
                        bail!("ovs-vswitchd: {}", String::from_utf8_lossy(&out.stderr));
                    }
                }
            }
            hvs.push(hv);
        }
        let [vma, vmb]: [Host; 2] = vms.try_into().map_err(|_| anyhow::anyhow!("two VMs"))?;
        let hvs: [Hv; 2] = hvs.try_into().map_err(|_| anyhow::anyhow!("two hypervisors"))?;
        let o = Overlay { kind, key, underlay, net, hv: hvs, vm: [vma, vmb], mid, _dir: tmp };
        for i in 0..2 {
            o.configure(i)?;
        }
        Ok(o)
    }

    /// The bridges, ports and endpoint address of hypervisor `i`.
    fn configure(&self, i: usize) -> Result<()> {
        let hv = &self.hv[i];
        let peer = &self.hv[1 - i].endpoint;
        let afxdp = hv.switch == Switch::Xvs;
        let mut a: Vec<String> = Vec::new();
        let mut add = |s: &[&str]| a.extend(s.iter().map(|x| x.to_string()));
        add(&["add-br", "br-phy", "--", "set", "bridge", "br-phy", "datapath_type=netdev"]);
        add(&["--", "add-port", "br-phy", "ul"]);
        if afxdp {
            add(&["--", "set", "interface", "ul", "type=afxdp"]);
        }
        add(&["--", "add-br", "br-int", "--", "set", "bridge", "br-int", "datapath_type=netdev"]);
        add(&["--", "add-port", "br-int", "vm"]);
        if afxdp {
            add(&["--", "set", "interface", "vm", "type=afxdp"]);
        }
        let key = match self.key {
            Key::Fixed(v) => v.to_string(),
            Key::Flow(_) => "flow".into(),
        };
        add(&[
            "--",
            "add-port",
            "br-int",
            "tun0",
            "--",
            "set",
            "interface",
            "tun0",
            // GRE over IPv6 is its own type in OVS.
            &format!(
                "type={}",
                if self.kind == Kind::Gre && self.underlay == Underlay::V6 { "ip6gre" } else { self.kind.ovs_type() }
            ),
            &format!("options:remote_ip={peer}"),
            &format!("options:key={key}"),
        ]);
        let args: Vec<&str> = a.iter().map(String::as_str).collect();
        hv.vsctl(&args).with_context(|| format!("configuring hv{} ({})", hv.name, hv.switch.name()))?;
        // br-phy's device appears in the namespace once the switch has
        // made the bridge.
        if !eventually(10, || hv.ns.exec(&["ip", "link", "show", "br-phy"]).is_ok()) {
            bail!("hv{} ({}): no br-phy device in the namespace\n{}", hv.name, hv.switch.name(), hv.diagnostics());
        }
        match self.underlay {
            Underlay::V4 => hv.ns.exec(&["ip", "addr", "add", &format!("{}/24", hv.endpoint), "dev", "br-phy"])?,
            Underlay::V6 => {
                // New devices start with IPv6 off (see `netns_add`): on
                // for the endpoint's device only; no duplicate address
                // detection delay.
                hv.ns.exec(&["sysctl", "-qw", "net.ipv6.conf.br-phy.disable_ipv6=0"])?;
                hv.ns.exec(&["ip", "-6", "addr", "add", &format!("{}/64", hv.endpoint), "dev", "br-phy", "nodad"])?
            }
        };
        hv.ns.exec(&["ip", "link", "set", "br-phy", "up"])?;
        for port in ["ul", "vm", "tun0"] {
            let ok = eventually(10, || {
                hv.vsctl(&["get", "interface", port, "ofport"])
                    .is_ok_and(|s| s.trim().parse::<i64>().is_ok_and(|n| n > 0))
            });
            if !ok {
                bail!("hv{} ({}): port {port} has no ofport\n{}", hv.name, hv.switch.name(), hv.diagnostics());
            }
        }
        if let Key::Flow(v) = self.key {
            hv.ofctl_ok("br-int", &["del-flows"]);
            hv.ofctl_ok("br-int", &["add-flow", &format!("in_port=vm,actions=set_field:{v}->tun_id,output:tun0")]);
            hv.ofctl_ok("br-int", &["add-flow", &format!("in_port=tun0,tun_id={v},actions=output:vm")]);
        }
        Ok(())
    }

    /// The underlay's prefix, for messages.
    pub fn underlay_net(&self) -> String {
        match self.underlay {
            Underlay::V4 => format!("172.31.{}.0/24", self.net),
            Underlay::V6 => format!("fd31:{}::/64", self.net),
        }
    }

    /// Waits up to `secs` until vmA pings vmB once.
    pub fn wait_connected(&self, secs: u64) -> bool {
        eventually(secs, || self.vm[0].ping(&self.vm[1].ip, 1).unwrap_or(0) == 1)
    }

    /// Panics (with both switches' state) unless vmA reaches vmB within
    /// `secs`.
    pub fn assert_connected(&self, secs: u64) {
        assert!(self.wait_connected(secs), "vmA never reached vmB over the {:?} tunnel", self.kind);
    }

    /// Pings vmB from vmA `count` times; the replies.
    pub fn ping(&self, count: u32) -> u32 {
        self.vm[0].ping(&self.vm[1].ip, count).unwrap_or(0)
    }

    /// Pings vmB from vmA `count` times, 0.2 s apart, waiting 1 s for the
    /// last reply (no deadline: quick when nothing gets through); the
    /// replies.
    pub fn ping_quick(&self, count: u32) -> u32 {
        let c = count.to_string();
        let out = self.vm[0].run(&["ping", "-n", "-q", "-c", &c, "-i", "0.2", "-W", "1", &self.vm[1].ip]);
        out.map(|o| crate::netns::parse_ping_received(&String::from_utf8_lossy(&o.stdout))).unwrap_or(0)
    }

    /// Streams `bytes` over TCP from vmA to vmB; what vmB received.
    pub fn tcp(&self, port: u16, bytes: u64) -> Result<u64> {
        self.vm[0].tcp_stream(&self.vm[1], port, bytes)
    }

    /// tcpdump on the underlay bridge while `during` runs (`filter` may
    /// start with tcpdump options such as `-v`).
    pub fn capture(&self, filter: &[&str], during: impl FnOnce()) -> String {
        self.mid.capture(filter, during).expect("tcpdump on the underlay")
    }

    /// The captured lines carrying this overlay's encapsulation (the
    /// protocol and VNI words of [`Kind::tcpdump_words`]) from endpoint
    /// `from` to endpoint `to`; GRE lines carry no ports, UDP lines do.
    pub fn encapsulated(&self, text: &str, from: usize, to: usize) -> Vec<String> {
        let [proto, vni] = self.kind.tcpdump_words(self.key.vni());
        let (src, dst) = (&self.hv[from].endpoint, &self.hv[to].endpoint);
        let (src, dir) = match self.kind.udp_port() {
            Some(p) => (format!("{src}."), format!("> {dst}.{p}:")),
            None => (format!("{src} "), format!("{src} > {dst}:")),
        };
        frames(text)
            .into_iter()
            .filter(|l| l.contains(&proto) && l.contains(&vni) && l.contains(&dir) && l.contains(&src))
            .collect()
    }

    /// Asserts that `text` shows vmA's ICMP echo requests to vmB inside
    /// this overlay's encapsulation from A's endpoint to B's, and the
    /// replies the other way.
    pub fn assert_encapsulated(&self, text: &str) {
        let (a, b) = (&self.vm[0].ip, &self.vm[1].ip);
        let req: Vec<_> = self
            .encapsulated(text, 0, 1)
            .into_iter()
            .filter(|l| l.contains(&format!("{a} > {b}: ICMP echo request")))
            .collect();
        let rep: Vec<_> = self
            .encapsulated(text, 1, 0)
            .into_iter()
            .filter(|l| l.contains(&format!("{b} > {a}: ICMP echo reply")))
            .collect();
        assert!(
            !req.is_empty() && !rep.is_empty(),
            "expected {:?} encapsulated echo requests A->B and replies B->A on the underlay ({:?}); tcpdump saw:\n{text}",
            self.kind,
            self.kind.tcpdump_words(self.key.vni())
        );
        // Nothing of the overlay leaks onto the underlay unencapsulated.
        assert!(
            !frames(text).iter().any(|l| l.contains(&format!("ethertype IPv4 (0x0800), length 98: {a} > {b}: ICMP"))
                && !l.contains(&self.kind.tcpdump_words(self.key.vni())[0])),
            "overlay traffic on the underlay without encapsulation:\n{text}"
        );
        // The tunnel packets end in the switch: a hypervisor's own stack
        // answering them (port or protocol unreachable) means they leaked.
        assert!(
            !frames(text).iter().any(|l| l.contains("unreachable")),
            "ICMP unreachable on the underlay (tunnel packets reached a hypervisor's kernel):\n{text}"
        );
    }

    /// The (source, destination) MACs of the encapsulated frames from
    /// endpoint `from` to endpoint `to` in `text` (tcpdump -e without -v:
    /// "time src > dst, ethertype ...").
    pub fn outer_macs(&self, text: &str, from: usize, to: usize) -> Vec<(String, String)> {
        self.encapsulated(text, from, to)
            .iter()
            .filter_map(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                (w.len() > 3 && w[2] == ">").then(|| (w[1].to_string(), w[3].trim_end_matches(',').to_string()))
            })
            .collect()
    }

    /// Sends five of each `what` to hypervisor `to`'s endpoint from the
    /// middle namespace, with the other endpoint's address as source
    /// (raw IPv4 with the header included, UDP checksum 0).
    pub fn send_malformed(&self, to: usize, what: &[Malformed]) -> Result<()> {
        let (src, dst) = (&self.hv[1 - to].endpoint, &self.hv[to].endpoint);
        let mut py = String::from(
            "import socket, struct\n\
             s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)\n\
             def send(proto, payload):\n\
             \x20   ip = struct.pack('!BBHHHBBH4s4s', 0x45, 0, 20 + len(payload), 0, 0x4000, 64, proto, 0,\n\
             \x20                    socket.inet_aton(SRC), socket.inet_aton(DST))\n\
             \x20   for _ in range(5):\n\
             \x20       s.sendto(ip + payload, (DST, 0))\n",
        );
        py = py.replace("SRC", &format!("'{src}'")).replace("DST", &format!("'{dst}'"));
        for m in what {
            let body = m.python(self.kind, self.key.vni())?;
            match self.kind.udp_port() {
                Some(port) => {
                    py += &format!("b = {body}\nsend(17, struct.pack('!HHHH', 40000, {port}, 8 + len(b), 0) + b)\n")
                }
                None => py += &format!("send(47, {body})\n"),
            }
        }
        self.mid.exec(&["python3", "-c", &py])?;
        Ok(())
    }

    /// Both hypervisors' state, for failure messages.
    pub fn diagnostics(&self) -> String {
        let mut s = format!(
            "===== {:?} overlay, key {:?}, hvA {} / hvB {}, underlay {} =====\n",
            self.kind,
            self.key,
            self.hv[0].switch.name(),
            self.hv[1].switch.name(),
            self.underlay_net()
        );
        s += &format!("--- mid neighbours\n{}\n", self.mid.exec(&["ip", "neigh"]).unwrap_or_default().trim_end());
        s += &format!("--- mid bridge fdb\n{}\n", self.mid.exec(&["bridge", "fdb"]).unwrap_or_default().trim_end());
        for hv in &self.hv {
            s += &hv.diagnostics();
        }
        s
    }
}

impl Drop for Overlay {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.diagnostics());
        }
    }
}
