//! The defaults matrix (issue 46), overlay and VM paths: Geneve and VXLAN
//! encapsulation and decapsulation with the kernel fast path on and off,
//! and a vhost-user VM port to and from a namespace host, crossed with the
//! offload settings real hosts have. The namespace paths (userspace,
//! kernel fast path, conntrack and NAT) are in `defaults_matrix.rs`.
//!
//! Paths (columns):
//! * `geneve kernel`, `vxlan kernel`: two xvs hypervisors joined by an
//!   IPv4 underlay ([`xvs::tnlref`]), the kernel fast path on at one
//!   packet per second, so that hot flows are encapsulated (br-int) and
//!   decapsulated (br-phy) by the XDP program;
//! * `geneve userspace`, `vxlan userspace`: the same with
//!   `other_config:xdp-offload=false` on both hypervisors: every frame
//!   through AF_XDP and the userspace tunnel ports;
//! * `vhost-user`: a namespace host on an AF_XDP port and DPDK's testpmd
//!   as the VM on a `dpdkvhostuserclient` port, NORMAL switching.
//!
//! In every tunnel column the middle bridge's ends of both underlay veths
//! and the sending VM's eth0 have GRO on (a veth takes redirected frames
//! only with GRO on, or XDP, at its peer), and br-phy's MTU leaves room
//! for the outer headers: the two columns of a kind differ only in the
//! fast path.
//!
//! Settings (rows), tunnels: the sending VM's transmit checksum offload
//! and its TSO/GSO (TSO needs checksum offload: with `tx off` the kernel
//! keeps TSO off; and a veth whose peer carries an XDP program, as the
//! switches' native AF_XDP ports do, drops TSO and keeps GSO, so "tso on"
//! is GSO in the stack; the effective settings are printed), the receiving VM's
//! GRO, IPv4 or IPv6 between the VMs (the harness gives them IPv4; IPv6
//! addresses fd46:N::1 and ::2 are added here). Rows 1-5 are a covering
//! array of strength 2 for these four (every pair of settings meets in all
//! four combinations), row 1 being Linux's defaults with the receiver's
//! GRO on; row 6 is the defaults over IPv6 (the fast path's IPv6 case with
//! everything on). Row 7 is inner MTU 9000 with the defaults, on an
//! overlay of its own: the VMs' links at 9000 and the underlay (veths,
//! middle bridge, br-phy) at 9100, set as the links are made
//! ([`Overlay::start_mtu`]: a veth whose peer already has a single-buffer
//! XDP program refuses an MTU above a page). Rows 8 and 9 are VLAN-tagged
//! inside the tunnel, with the defaults over IPv4 and every offload off
//! over IPv6: this kernel has no 802.1Q module, so the VMs cannot tag;
//! each hypervisor's br-int tags what its VM sends into the tunnel
//! (`push_vlan`) and untags what comes out (`pop_vlan`), so the tunnel
//! carries tagged inner frames, and hvB's pop rule must count them.
//!
//! Each tunnel cell, vmA to vmB: pings of 56, 1000 and 1400 bytes (and
//! 8000 at MTU 9000); an 8 MB TCP stream of seeded pseudo-random bytes
//! whose SHA-256 both ends compute; 300 UDP datagrams of sizes from 18
//! bytes to above the MTU (fragmented), each carrying its number and a
//! pattern the receiver checks. It asserts the pings come back, the stream
//! arrives whole, no datagram is damaged and at most 2% are lost, and
//! neither VM's `nstat` counts a checksum error (TcpInCsumErrors,
//! UdpInCsumErrors, Udp6InCsumErrors) during the cell. Kernel-column cells
//! at MTU 1500 must show hvA's kernel encapsulating (its br-int entries
//! forwarded frames during the cell), or the cell would not test what it
//! claims; the decapsulations at hvB are printed (zero where vmB's GRO is
//! off: its veth takes no redirected frames then). Userspace-column cells
//! must show no kernel forwarding at all on either hypervisor. At MTU 9000
//! the TCP frames are multi-buffer, which the fast path leaves to
//! userspace; tagged rows are left to userspace too (the program
//! encapsulates only a megaflow that is a single output to the tunnel,
//! not `push_vlan` then the output, and does not parse the inner
//! `vlan_tci2` match of the decapsulated tagged frames): their hits are
//! printed, not required.
//!
//! vhost-user cells: testpmd in `5tswap` mode reflects each frame with
//! MACs, IP addresses and L4 ports swapped, so the host sends and gets
//! back its own datagrams: 300 UDP datagrams of sizes up to the largest
//! that fits the MTU (a reflector swaps the ports of first fragments only,
//! so fragments are left out), and with TSO/GSO on some sent as UDP GSO
//! batches (UDP_SEGMENT); each checked on return. Pings of 56, 1000 and
//! 1400 bytes: the echo request comes back as a request from the VM's
//! address, the host's kernel answers it, and that reply comes back as the
//! reply ping waits for, so every ping crosses the VM port four times. The
//! host's `nstat` must count no checksum error. TCP cannot run against a
//! reflector (the host would talk to itself with both ends' sequence
//! numbers crossed). Rows 1-6, 8 and 9 as above, tagged on the VM port (the host's port is an access port of VLAN 10, the VM port
//! a trunk: xvs pushes the tag toward the VM and pops it on the way back,
//! and 5tswap reflects over the tag), with the defaults over IPv4 and
//! every offload off over IPv6. MTU 1500 only: testpmd's mbufs (2 KB, no
//! scatter configured) would drop 9000-byte frames.
//!
//! Cells of one column share one set-up and run in turn (a row changes
//! only settings; MTU 9000 gets a set-up of its own); the five columns run in parallel, each in its own
//! namespaces. `XVS_SWITCH=ovs` runs the userspace tunnel columns with
//! Open vSwitch 3.1 on both hypervisors; cells whose sender keeps
//! transmit checksum offload on are skipped there (OVS 3.1 forwards
//! partial checksums unfinished and documents `tx off`; the harness turns
//! it off for OVS), and the vhost-user column is skipped (it needs OVS's
//! DPDK build). `XVS_MATRIX_COLUMNS=kernel XVS_MATRIX_ROWS=1,8` (names'
//! substrings, row numbers) runs part of the matrix, to look into a cell.
//! Needs root, python3, ethtool, openvswitch-switch,
//! dpdk-testpmd; everything is removed afterwards, also on failure.

mod common;

use common::{csum_errors, finish, on, py, settings_label, wait_ready, TCP_RX, TCP_TX, UDP_RX, UDP_TX};
use netdev_vhost::testpmd::{sock_path, Testpmd};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use xvs::netns::Host;
use xvs::tnlref::{unavailable, Hv, Key, Kind, Overlay, Switch, Underlay};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Path {
    Tunnel(Kind, bool),
    Vhost,
}

impl Path {
    fn name(self) -> String {
        match self {
            Path::Tunnel(k, fast) => {
                format!(
                    "{} {}",
                    if k == Kind::Geneve { "geneve" } else { "vxlan" },
                    if fast { "kernel" } else { "userspace" }
                )
            }
            Path::Vhost => "vhost-user".into(),
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Row {
    /// The row's number in the table.
    n: usize,
    tx: bool,
    tso: bool,
    gro: bool,
    v6: bool,
    jumbo: bool,
    vlan: bool,
}

/// Rows 1-5: a covering array of strength 2 over (tx, tso, gro, v6), 0
/// being "on" for the offloads and IPv4; then the defaults over IPv6, and
/// the defaults at MTU 9000 (last: it changes the links' MTUs).
const CA: [[u8; 4]; 5] = [[0, 0, 0, 0], [0, 1, 1, 1], [1, 0, 1, 1], [1, 1, 0, 1], [1, 1, 1, 0]];

fn rows() -> Vec<Row> {
    let mut r: Vec<Row> =
        CA.iter().map(|c| Row { tx: c[0] == 0, tso: c[1] == 0, gro: c[2] == 0, v6: c[3] == 1, ..DEFAULTS }).collect();
    r.push(Row { v6: true, ..DEFAULTS });
    r.push(Row { jumbo: true, ..DEFAULTS });
    r.push(Row { vlan: true, ..DEFAULTS });
    r.push(Row { tx: false, tso: false, gro: false, v6: true, vlan: true, ..DEFAULTS });
    for (i, row) in r.iter_mut().enumerate() {
        row.n = i + 1;
    }
    r
}

/// Linux's defaults (the receiver's GRO on), IPv4, untagged, MTU 1500.
const DEFAULTS: Row = Row { n: 0, tx: true, tso: true, gro: true, v6: false, jumbo: false, vlan: false };

/// The vhost-user column's rows: the tunnels' but MTU 9000.
fn vhost_rows() -> Vec<Row> {
    rows().into_iter().filter(|r| !r.jumbo).collect()
}

impl Row {
    fn label(&self) -> String {
        settings_label(self.tx, self.tso, self.gro, self.v6, self.vlan, self.jumbo)
    }
}

/// Sets the sender's transmit offloads (tx, TSO and GSO) and the
/// receiver's GRO; the sender's effective settings as ethtool -k says.
fn apply(sender: &Host, receiver: &Host, row: &Row) -> String {
    sender.exec(&["ethtool", "-K", "eth0", "tx", on(row.tx)]).expect("ethtool tx");
    // With tx off the kernel refuses TSO on: the effective value is printed.
    let _ = sender.exec(&["ethtool", "-K", "eth0", "tso", on(row.tso), "gso", on(row.tso)]);
    receiver.exec(&["ethtool", "-K", "eth0", "gro", on(row.gro)]).expect("ethtool gro");
    let k = sender.exec(&["ethtool", "-k", "eth0"]).unwrap_or_default();
    let eff = |name: &str| {
        k.lines()
            .find(|l| l.trim_start().starts_with(name))
            .and_then(|l| l.split(':').nth(1))
            .map(|v| v.split_whitespace().next().unwrap_or("?").to_string())
            .unwrap_or_else(|| "?".into())
    };
    format!(
        "tx-checksumming {} tso {} gso {}",
        eff("tx-checksumming:"),
        eff("tcp-segmentation-offload:"),
        eff("generic-segmentation-offload:")
    )
}

/// The host's side of the reflected UDP (vhost-user): sends `count`
/// datagrams to addr:port from one connected socket, with `gso` some of
/// them as UDP GSO batches of four 1000-byte segments, then reads what
/// the reflector sent back (ports and addresses swapped, so the same
/// socket receives it) and checks each. Prints intact, damaged and the
/// number of GSO sends.
const UDP_ECHO: &str = r#"
import socket, sys, struct, time
addr, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
sizes = [int(x) for x in sys.argv[4].split(",")]
gso = sys.argv[5] == "1"
fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
s = socket.socket(fam, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
s.connect((addr, port))
def dgram(seq, size):
    return struct.pack("!II", seq, size) + bytes((seq * 7 + i) & 255 for i in range(size - 8))
seq = 0; batches = 0; since = 0
while seq < count:
    if gso and seq % 10 == 0 and seq + 4 <= count:
        s.setsockopt(17, 103, 1000)  # SOL_UDP, UDP_SEGMENT
        s.send(b"".join(dgram(seq + k, 1000) for k in range(4)))
        s.setsockopt(17, 103, 0)
        seq += 4; since += 4; batches += 1
    else:
        s.send(dgram(seq, sizes[seq % len(sizes)])); seq += 1; since += 1
    if since >= 16:
        time.sleep(0.003); since = 0
ok = bad = 0; seen = set(); s.settimeout(5)
try:
    while len(seen) < count:
        d = s.recv(65536)
        s.settimeout(2)
        if len(d) < 8:
            bad += 1; continue
        n, size = struct.unpack("!II", d[:8])
        if size != len(d) or d != dgram(n, size) or n in seen:
            bad += 1
        else:
            ok += 1; seen.add(n)
except socket.timeout:
    pass
print(ok, bad, batches, flush=True)
"#;

/// Pings `dst` from `from` 3 times for each size; asserts all come back.
fn pings(from: &Host, dst: &str, sizes: &[u32], ctx: &str) -> String {
    let t0 = Instant::now();
    // The first may wait for neighbour resolution.
    while from.run(&["ping", "-c", "1", "-W", "1", dst]).map(|o| !o.status.success()).unwrap_or(true)
        && t0.elapsed() < Duration::from_secs(15)
    {
        std::thread::sleep(Duration::from_millis(200));
    }
    let mut got = Vec::new();
    for s in sizes {
        // -w, not -W: once a reply has come, ping waits only twice the
        // slowest round trip for the last one (-W then no longer counts),
        // which on a loaded machine drops slow replies; with a deadline it
        // waits for all three.
        let out = from.run(&["ping", "-c", "3", "-i", "0.2", "-w", "10", "-s", &s.to_string(), dst]).unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let n = xvs::netns::parse_ping_received(&text);
        got.push(format!("{s}B {n}/3"));
        assert_eq!(n, 3, "{ctx}: pings of {s} bytes to {dst}: {text}");
    }
    got.join(" ")
}

#[derive(Default)]
struct Outcome {
    pings: String,
    tcp: String,
    udp: String,
    csum_errors: u64,
    /// Kernel fast path: (hvA encapsulated, hvB decapsulated) during the
    /// cell.
    kernel: Option<(u64, u64)>,
    effective: String,
}

type CellResult = Result<Outcome, String>;

fn catch(f: impl FnOnce() -> Outcome) -> CellResult {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|e| {
        e.downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "panicked".into())
    })
}

/// What `hv`'s kernel forwarded for `bridge`'s entries so far (read
/// without waiting: the caller waits once for the offload manager's
/// 250 ms credit).
fn forwarded(hv: &Hv, bridge: &str) -> u64 {
    xvs::offload::forwarded_in_show(&hv.appctl_ok(&["dpif-netdev/offload-show"]), Some(bridge))
}

const VNI: u32 = 4646;

/// One tunnel column: one overlay, its rows in turn.
fn tunnel_column(kind: Kind, fast: bool, tag: &str, rows: &[Row], ovs: bool) -> Vec<CellResult> {
    let sw = if ovs { [Switch::Ovs; 2] } else { [Switch::Xvs; 2] };
    // MTU 9000 needs its own overlay: the links' MTUs are set as they are
    // made (see [`Overlay::start_mtu`]).
    let setup = |tag: &str, mtu: u32| -> Result<Overlay, String> {
        let o = Overlay::start_mtu(env!("CARGO_BIN_EXE_xvs"), tag, kind, sw, Key::Fixed(VNI), Underlay::V4, mtu)
            .map_err(|e| format!("set-up: {e:#}"))?;
        let r = |x: anyhow::Result<String>| x.map(drop).map_err(|e| format!("set-up: {e:#}"));
        for hv in &o.hv {
            if !ovs {
                let cfg = if fast { "other_config:xdp-offload-pps=1" } else { "other_config:xdp-offload=false" };
                r(hv.vsctl(&["set", "open_vswitch", ".", cfg]))?;
            }
            // Room for a full-size inner frame's outer headers.
            r(hv.ns.exec(&["ip", "link", "set", "br-phy", "mtu", &(mtu + 100).to_string()]))?;
        }
        // A veth takes redirected frames only with GRO (or XDP) at its
        // peer: the middle bridge's ends, and the sending VM (the ACKs
        // and echo replies come back to it). Both columns alike.
        for d in ["ulA", "ulB"] {
            r(o.mid.exec(&["ethtool", "-K", d, "gro", "on"]))?;
        }
        r(o.vm[0].exec(&["ethtool", "-K", "eth0", "gro", "on"]))?;
        // IPv6 inside the tunnel: the harness's VMs have IPv4 only.
        for (i, vm) in o.vm.iter().enumerate() {
            r(vm.exec(&["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=0", "net.ipv6.conf.eth0.disable_ipv6=0"]))?;
            r(vm.exec(&["ip", "-6", "addr", "add", &format!("fd46:{}::{}/64", o.net, i + 1), "dev", "eth0", "nodad"]))?;
        }
        if !o.wait_connected(15) {
            return Err(format!("set-up: vmA never reached vmB\n{}", o.diagnostics()));
        }
        Ok(o)
    };
    let name = Path::Tunnel(kind, fast).name();
    let mut out: Vec<Option<CellResult>> = rows.iter().map(|_| None).collect();
    for jumbo in [false, true] {
        // Rows OVS would skip need no set-up.
        let mine: Vec<usize> = (0..rows.len()).filter(|&i| rows[i].jumbo == jumbo && !(ovs && rows[i].tx)).collect();
        for i in (0..rows.len()).filter(|&i| rows[i].jumbo == jumbo && ovs && rows[i].tx) {
            out[i] =
                Some(Err("skipped: OVS 3.1 forwards partial checksums unfinished (the harness sets tx off)".into()));
        }
        if mine.is_empty() {
            continue;
        }
        let o = match setup(&format!("{tag}{}", if jumbo { "j" } else { "" }), if jumbo { 9000 } else { 1500 }) {
            Ok(o) => Some(o),
            Err(e) => {
                for &i in &mine {
                    out[i] = Some(Err(e.clone()));
                }
                None
            }
        };
        let Some(o) = o else { continue };
        for i in mine {
            let row = &rows[i];
            out[i] = Some(catch(|| tunnel_cell(&o, &name, !ovs, fast && !ovs, row)));
        }
    }
    out.into_iter().map(|r| r.unwrap_or_else(|| Err("not run".into()))).collect()
}

/// `xvs`: the hypervisors run xvs (their kernel counters are read);
/// `fast`: with the kernel fast path on.
fn tunnel_cell(o: &Overlay, name: &str, xvs: bool, fast: bool, row: &Row) -> Outcome {
    let (a, b) = (&o.vm[0], &o.vm[1]);
    let effective = apply(a, b, row);
    let ctx = format!("{name} | row {} ({}) | {effective}", row.n, row.label());
    let popped_b = || -> u64 {
        o.hv[1]
            .ofctl_ok("br-int", &["-OOpenFlow13", "dump-flows"])
            .lines()
            .filter(|l| l.contains("pop_vlan"))
            .filter_map(|l| xvs::netns::number_after(&l.replace([',', '='], " "), "n_packets"))
            .sum()
    };
    if row.vlan {
        // Tagged inside the tunnel: each hypervisor's br-int tags what its
        // VM sends into the tunnel and untags what comes out of it (the VMs
        // cannot tag: no 802.1Q module). Rules stay for later tagged rows.
        for hv in &o.hv {
            hv.ofctl_ok(
                "br-int",
                &[
                    "-OOpenFlow13",
                    "add-flow",
                    "priority=40,in_port=vm,actions=push_vlan:0x8100,set_field:4106->vlan_vid,output:tun0",
                ],
            );
            hv.ofctl_ok(
                "br-int",
                &["-OOpenFlow13", "add-flow", "priority=40,in_port=tun0,dl_vlan=10,actions=pop_vlan,output:vm"],
            );
        }
    }
    let pop0 = if row.vlan { popped_b() } else { 0 };
    let dst = if row.v6 { format!("fd46:{}::2", o.net) } else { b.ip.clone() };
    let errs0 = csum_errors(&a.ns) + csum_errors(&b.ns);
    // hvA's encapsulations, hvB's decapsulations, and everything either
    // kernel forwarded.
    let hits = || {
        let [ai, ap, bi, bp] =
            [(0, "br-int"), (0, "br-phy"), (1, "br-int"), (1, "br-phy")].map(|(i, br)| forwarded(&o.hv[i], br));
        (ai, bp, ai + ap + bi + bp)
    };
    let h0 = if xvs { Some(hits()) } else { None };
    let mut out = Outcome { effective, ..Outcome::default() };
    let sizes: &[u32] = if row.jumbo { &[56, 1000, 1400, 8000] } else { &[56, 1000, 1400] };
    out.pings = pings(a, &dst, sizes, &ctx);

    let port = 5400 + 2 * row.n as u16;
    let bytes = 8_000_000u64;
    let mut rx = py(&b.ns, TCP_RX, &[&dst, &port.to_string()]);
    wait_ready(&mut rx);
    let tx = py(&a.ns, TCP_TX, &[&dst, &port.to_string(), "120", &bytes.to_string()]);
    let (sent, got) = (finish(tx), finish(rx));
    assert_eq!(sent, got, "{ctx}: TCP stream (bytes, sha256) sent vs received\n{}", o.diagnostics());
    assert!(sent.starts_with(&format!("{bytes} ")), "{ctx}: TCP sent {sent}");
    out.tcp = format!("{} MB ok", bytes / 1_000_000);

    let count = 300u64;
    let udp_sizes = if row.jumbo { "18,200,1000,1400,4000,8000,9500" } else { "18,200,1000,1400,3000" };
    let uport = (port + 1).to_string();
    let mut rx = py(&b.ns, UDP_RX, &[&dst, &uport, &count.to_string()]);
    wait_ready(&mut rx);
    finish(py(&a.ns, UDP_TX, &[&dst, &uport, &count.to_string(), udp_sizes]));
    let res = finish(rx);
    let mut it = res.split_whitespace().map(|x| x.parse::<u64>().unwrap_or(0));
    let (ok, bad) = (it.next().unwrap_or(0), it.next().unwrap_or(0));
    assert_eq!(bad, 0, "{ctx}: damaged UDP datagrams ({ok} intact)");
    assert!(ok * 100 >= count * 98, "{ctx}: UDP: {ok} of {count} arrived");
    out.udp = format!("{ok}/{count}");

    out.csum_errors = csum_errors(&a.ns) + csum_errors(&b.ns) - errs0;
    assert_eq!(out.csum_errors, 0, "{ctx}: checksum errors at the VMs (nstat)");
    if row.vlan {
        // Frames came out of the tunnel tagged (the kernel's share is
        // not credited to the rule: those taken in userspace suffice).
        let n = popped_b() - pop0;
        assert!(n > 0, "{ctx}: hvB's pop_vlan rule matched nothing");
        out.udp += &format!(" [{n} tagged]");
    }
    if let Some((e0, d0, t0)) = h0 {
        // The offload manager credits the kernel's counts every 250 ms.
        std::thread::sleep(Duration::from_millis(600));
        let (e1, d1, t1) = hits();
        out.kernel = Some((e1 - e0, d1 - d0));
        // The fast path off: nothing went through the kernel.
        assert!(fast || t1 == t0, "{ctx}: the fast path is off, yet the kernels forwarded {} frames", t1 - t0);
        if fast && !row.jumbo && !row.vlan {
            assert!(
                e1 > e0,
                "{ctx}: hvA's kernel fast path encapsulated nothing during the cell:\n{}\n{}",
                o.hv[0].appctl_ok(&["dpif-netdev/offload-show"]),
                o.diagnostics()
            );
        }
    }
    out
}

/// xvs with a vhost-user client port and a host's veth; stopped and its
/// run directory removed on drop.
struct Xvs(Child, String);

impl Drop for Xvs {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        let _ = std::fs::remove_dir_all(&self.1);
    }
}

const VM_MAC: &str = "02:46:00:00:00:09";

/// The host's port as an access port of VLAN 10 and the VM port as a
/// trunk: frames to the VM are tagged, tagged frames from it untagged
/// (above the bridge's default NORMAL rule). testpmd's 5tswap steps over
/// the tag and reflects the frame with it.
fn vlan_flows(run_dir: &str, bridge: &str, host_port: &str, vm_port: &str) {
    let target = format!("unix:{run_dir}/{bridge}.mgmt");
    for f in [
        format!("priority=40,in_port={host_port},actions=push_vlan:0x8100,set_field:4106->vlan_vid,output:{vm_port}"),
        format!("priority=40,in_port={vm_port},dl_vlan=10,actions=pop_vlan,output:{host_port}"),
    ] {
        let o = Command::new("ovs-ofctl").args(["-OOpenFlow13", "add-flow", &target, &f]).output().expect("ovs-ofctl");
        assert!(o.status.success(), "ovs-ofctl add-flow {f}: {}", String::from_utf8_lossy(&o.stderr));
    }
}

/// What the bridge's `pop_vlan` rule counted, and the dump.
fn popped(run_dir: &str, bridge: &str) -> (u64, String) {
    let dump = Command::new("ovs-ofctl")
        .args(["-OOpenFlow13", "dump-flows", &format!("unix:{run_dir}/{bridge}.mgmt")])
        .output()
        .expect("ovs-ofctl");
    let dump = String::from_utf8_lossy(&dump.stdout).into_owned();
    let n = dump
        .lines()
        .filter(|l| l.contains("pop_vlan"))
        .filter_map(|l| xvs::netns::number_after(&l.replace([',', '='], " "), "n_packets"))
        .sum();
    (n, dump)
}

/// The vhost-user column: one host, one testpmd, its rows in turn.
fn vhost_column(id: u32, rows: &[Row]) -> Vec<CellResult> {
    let bridge = format!("xdobr{id}");
    let net = 46;
    let h = match Host::create(&format!("xdmov{id}"), &format!("xdov{id}"), &format!("10.{net}.9.1/24"), 1) {
        Ok(h) => h,
        Err(e) => return rows.iter().map(|_| Err(format!("set-up: {e:#}"))).collect(),
    };
    let (vm4, vm6) = (format!("10.{net}.9.9"), "fd46:9::9".to_string());
    let setup = || -> anyhow::Result<()> {
        h.exec(&["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=0", "net.ipv6.conf.eth0.disable_ipv6=0"])?;
        h.exec(&["ip", "-6", "addr", "add", "fd46:9::1/64", "dev", "eth0", "nodad"])?;
        // testpmd answers no ARP or neighbour solicitation.
        h.exec(&["ip", "neigh", "replace", &vm4, "lladdr", VM_MAC, "dev", "eth0", "nud", "permanent"])?;
        h.exec(&["ip", "-6", "neigh", "replace", &vm6, "lladdr", VM_MAC, "dev", "eth0", "nud", "permanent"])?;
        Ok(())
    };
    if let Err(e) = setup() {
        return rows.iter().map(|_| Err(format!("set-up: {e:#}"))).collect();
    }
    let sock = sock_path(&format!("dmo{id}"));
    let mut pmd = Testpmd::start_with(&sock, &format!("xdmov{id}"), 1, true, &format!("mac={VM_MAC}"));
    let run_dir = format!("/tmp/xvs-dmo-{id}");
    let vport = format!("xdov{id}v,type=dpdkvhostuserclient,vhost-server-path={}", sock.display());
    let child = Command::new(env!("CARGO_BIN_EXE_xvs"))
        .args(["switch", "--run-dir", &run_dir, "--bridge", &bridge, "--no-local-port"])
        .args(["--port", &vport, "--port", &format!("{},type=afxdp", h.port)])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("xvs starts");
    let _xvs = Xvs(child, run_dir.clone());
    if !pmd.wait_for("testpmd>", 0, 30) {
        let e = format!("set-up: testpmd did not start:\n{}", pmd.diagnostics());
        return rows.iter().map(|_| Err(e.clone())).collect();
    }
    std::thread::sleep(Duration::from_millis(500));
    pmd.cmd("set fwd 5tswap");
    pmd.cmd("start");
    // Tagged rows come last: their rules stay.
    let mut tagged = false;
    let res = rows
        .iter()
        .map(|row| {
            catch(|| {
                if row.vlan && !tagged {
                    tagged = true;
                    vlan_flows(&run_dir, &bridge, &h.port, &format!("xdov{id}v"));
                }
                let effective = apply(&h, &h, row);
                let ctx = format!("vhost-user | row {} ({}) | {effective}", row.n, row.label());
                let dst = if row.v6 { &vm6 } else { &vm4 };
                let errs0 = csum_errors(&h.ns);
                let p0 = if row.vlan { popped(&run_dir, &bridge).0 } else { 0 };
                let mut out = Outcome { effective, ..Outcome::default() };
                out.pings = pings(&h, dst, &[56, 1000, 1400], &ctx);
                let count = 300u64;
                // The largest datagram that fits one frame.
                let max = if row.v6 { 1452 } else { 1472 };
                let sizes = format!("18,200,1000,1400,{max}");
                let port = (5500 + row.n).to_string();
                let gso = if row.tso { "1" } else { "0" };
                let res = finish(py(&h.ns, UDP_ECHO, &[dst, &port, &count.to_string(), &sizes, gso]));
                let mut it = res.split_whitespace().map(|x| x.parse::<u64>().unwrap_or(0));
                let (ok, bad, batches) = (it.next().unwrap_or(0), it.next().unwrap_or(0), it.next().unwrap_or(0));
                assert_eq!(bad, 0, "{ctx}: damaged UDP datagrams back from the VM ({ok} intact)");
                assert!(ok * 100 >= count * 98, "{ctx}: UDP: {ok} of {count} came back\n{}", pmd.diagnostics());
                out.udp = format!("{ok}/{count}");
                if batches > 0 {
                    out.udp += &format!(" ({batches} GSO)");
                }
                out.tcp = "n/a".into();
                if row.vlan {
                    // The frames really crossed the VM port tagged: the pop
                    // rule counted at least the datagrams and pings.
                    let (p1, dump) = popped(&run_dir, &bridge);
                    assert!(p1 - p0 >= ok + 9, "{ctx}: tagged frames from the VM: {}\n{dump}", p1 - p0);
                    out.udp += &format!(" [{} tagged]", p1 - p0);
                }
                out.csum_errors = csum_errors(&h.ns) - errs0;
                assert_eq!(out.csum_errors, 0, "{ctx}: checksum errors at the host (nstat)");
                out
            })
        })
        .collect();
    pmd.cmd("stop");
    res
}

#[test]
fn defaults_matrix_overlay_and_vm_paths() {
    let ovs = xvs::netns::ovs_stands_in();
    let sw = if ovs { [Switch::Ovs; 2] } else { [Switch::Xvs; 2] };
    if let Some(why) = unavailable(sw) {
        eprintln!("skipped: {why}");
        return;
    }
    std::env::set_var("XVS_BIN", env!("CARGO_BIN_EXE_xvs"));
    // XVS_MATRIX_COLUMNS (substrings of column names, comma-separated) and
    // XVS_MATRIX_ROWS (row numbers) narrow the run, to look into a cell.
    let pick = |var: &str| -> Vec<String> {
        std::env::var(var).map(|v| v.split(',').map(|x| x.trim().to_string()).collect()).unwrap_or_default()
    };
    let (want_cols, want_rows) = (pick("XVS_MATRIX_COLUMNS"), pick("XVS_MATRIX_ROWS"));
    let keep = |r: &Row| want_rows.is_empty() || want_rows.contains(&r.n.to_string());
    let (rows, vrows): (Vec<Row>, Vec<Row>) =
        (rows().into_iter().filter(keep).collect(), vhost_rows().into_iter().filter(keep).collect());
    let id = std::process::id() % 1000;
    let mut columns: Vec<Path> = Vec::new();
    for kind in [Kind::Geneve, Kind::Vxlan] {
        for fast in [true, false] {
            if ovs && fast {
                continue; // OVS 3.1 has no kernel fast path
            }
            columns.push(Path::Tunnel(kind, fast));
        }
    }
    columns.retain(|c| want_cols.is_empty() || want_cols.iter().any(|w| c.name().contains(w.as_str())));
    let vhost = !ovs
        && (want_cols.is_empty() || want_cols.iter().any(|w| "vhost-user".contains(w.as_str())))
        && netdev_vhost::testpmd::usable();
    if vhost {
        columns.push(Path::Vhost);
    }
    type Column<'a> = (Path, (&'a Vec<Row>, Vec<CellResult>));
    let results: Mutex<Vec<Column>> = Mutex::new(Vec::new());
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for (ci, &p) in columns.iter().enumerate() {
            let (rows, vrows, results) = (&rows, &vrows, &results);
            s.spawn(move || {
                let r = match p {
                    Path::Tunnel(kind, fast) => (rows, tunnel_column(kind, fast, &format!("dmo{id}{ci}"), rows, ovs)),
                    Path::Vhost => (vrows, vhost_column(id, vrows)),
                };
                results.lock().unwrap().push((p, r));
            });
        }
    });
    let mut results = results.into_inner().unwrap();
    results.sort_by_key(|(p, _)| columns.iter().position(|c| c == p));
    println!(
        "\ndefaults matrix, overlay and VM paths ({}): {} cells in {:.0} s",
        if ovs { "Open vSwitch 3.1" } else { "xvs" },
        results.iter().map(|(_, (_, c))| c.len()).sum::<usize>(),
        t0.elapsed().as_secs_f64()
    );
    println!(
        "{:<17} {:<2} {:<44} {:<6} {:<34} {:>9} {:>16} {:>4} {:>13}",
        "path",
        "#",
        "settings (sender tx/tso, receiver gro)",
        "result",
        "pings",
        "TCP",
        "UDP",
        "csum",
        "kernel enc/dec"
    );
    let mut failed = Vec::new();
    for (p, (prows, cells)) in &results {
        for (ri, res) in cells.iter().enumerate() {
            let label = prows[ri].label();
            match res {
                Ok(o) => println!(
                    "{:<17} {:<2} {:<44} {:<6} {:<34} {:>9} {:>16} {:>4} {:>13}",
                    p.name(),
                    prows[ri].n,
                    label,
                    "PASS",
                    o.pings,
                    o.tcp,
                    o.udp,
                    o.csum_errors,
                    o.kernel.map_or("-".into(), |(e, d)| format!("{e}/{d}"))
                ),
                Err(e) if e.starts_with("skipped") || e.starts_with("left out") => {
                    println!("{:<17} {:<2} {:<44} {e}", p.name(), prows[ri].n, label)
                }
                Err(e) => {
                    let first = e.lines().next().unwrap_or("");
                    println!("{:<17} {:<2} {:<44} FAIL   {first}", p.name(), prows[ri].n, label);
                    failed.push(format!("{} row {}: {e}", p.name(), prows[ri].n));
                }
            }
        }
    }
    if vhost {
        println!(
            "vhost-user at MTU 9000: left out (testpmd's 2 KB mbufs, no scatter); TCP: cannot run against a reflector"
        );
    } else if ovs {
        println!("vhost-user: not run with XVS_SWITCH=ovs (needs Open vSwitch's DPDK build)");
    } else {
        println!("vhost-user: skipped (needs root and dpdk-testpmd)");
    }
    if let Some((_, (_, cells))) = results.first() {
        if let Some(Ok(o)) = cells.first() {
            println!("(row 1 sender, as ethtool -k reports it: {})", o.effective);
        }
    }
    assert!(failed.is_empty(), "{} cells failed:\n{}", failed.len(), failed.join("\n\n"));
}
