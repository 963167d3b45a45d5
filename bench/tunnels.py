"""Native tunneling: Geneve encapsulation and decapsulation, xvs against
Open vSwitch 3.1 (userspace datapath), same topology, same run.

    VM ns --veth--> [ br-int: vm port, tun0 (geneve) ]          hypervisor ns
                    [ br-phy: underlay port, local port 172.31.9.1 ] --veth--> sink ns (172.31.9.2)

Both switches are configured with ovs-vsctl exactly as OVS's userspace
tunneling documents it: br-int holds the VM port and the tunnel port
(remote_ip=172.31.9.2, key=5001), br-phy the underlay port, and the
tunnel endpoint address sits on br-phy's local port. br-int has two rules
(vm -> tun0, tun0 -> vm, installed with ovs-ofctl into both); br-phy is
NORMAL. The switch runs inside the hypervisor namespace with
other_config:pmd-cpu-mask=0x2 (poll threads on CPU 1); ports are afxdp
for both if OVS lists it in iface_types, else system. Before measuring,
the sink pings 172.31.9.1 (ARP both ways, MAC learning on br-phy) and the
remote's neighbour entry is set with `ovs-appctl tnl/neigh/set`.

Cases, 64-byte inner frames, 1 and 1000 inner flows. The generator is
`xvs util pktgen --xdp` on CPU 0: an XDP program run in live-frames mode
that redirects its frames into its veth, so the peer's XDP (the switch's
AF_XDP port) takes them without an skb, several times faster than a packet
socket; the switch is the bottleneck (`--gen afpacket`: the AF_PACKET
sender, which a switch keeps up with).
* encap: the generator in the VM namespace sends
  UDP frames (1000 flows: 1000 source and destination addresses); the
  sink namespace receives the Geneve frames.
* decap: the same generator in the sink namespace sends pre-built Geneve
  frames (built here with struct: outer destination = br-phy's MAC, UDP
  6081, VNI 5001; 1000 flows: inner and outer UDP source ports vary) to
  br-phy; the VM namespace receives the inner frames.
The receiving end runs the XDP count-and-drop sink (so the kernel stack
costs nothing); what is counted is its veth's rx_packets over SECS
seconds after a 1 s warm-up. Printed: a table of delivered packets/s and
the xvs/OVS ratio; written: --out/results-tunnel.json.

Each switch has its own copy of the topology (namespaces xbt-*-x for xvs,
xbt-*-o for OVS), both set up once, and the switches take turns: for each
case and rep one runs while the other is stopped (SIGSTOP, no CPU), xvs
first in even reps, OVS first in odd ones. A pair of runs is seconds
apart; this machine's speed drifts by 1.5-3x over minutes, so the ratio
of each pair is the comparison, and the printed ratio is their median. Everything created
is removed at the end, also on failure and Ctrl-C.

Run through run.py (`./bench.sh --only tunnel`) or alone as root:
python3 bench/tunnels.py [--xvs target/release/xvs] [--secs 5] [--reps 1].
"""
import argparse, json, os, re, shutil, signal, statistics, struct, subprocess, sys, tempfile, time


class Topo:
    """One copy of the topology; `k` ("x" or "o") tells the copies apart."""

    def __init__(self, k):
        self.hv, self.vm, self.sink = f"xbt-hv-{k}", f"xbt-vm-{k}", f"xbt-sink-{k}"
        # The hypervisor-side veth ends: the switch's ports.
        self.vmp, self.ulp = f"xbtvm{k}", f"xbtul{k}"


TOPOS = {"xvs": Topo("x"), "ovs": Topo("o"), "xvsoff": Topo("f")}
LOCAL_IP, REMOTE_IP = "172.31.9.1", "172.31.9.2"
VNI = 5001
REMOTE_VM_MAC = "02:00:00:00:09:02"  # the inner source: a VM behind the remote endpoint
WARM = 1.0


def sh(*a, check=True, **kw):
    r = subprocess.run(a, capture_output=True, text=True, **kw)
    if check and r.returncode:
        raise RuntimeError(f"{' '.join(a)}: exit {r.returncode}: {r.stderr.strip()}")
    return r.stdout


def ns(n, *a, **kw):
    return sh("ip", "netns", "exec", n, *a, **kw)


def quiet(*a):
    subprocess.run(a, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def cleanup(t=None):
    for t in [t] if t else TOPOS.values():
        for n in (t.hv, t.vm, t.sink):
            quiet("ip", "netns", "del", n)


def topo(t):
    HV, VM, SINK, VMP, ULP = t.hv, t.vm, t.sink, t.vmp, t.ulp
    cleanup(t)
    for n in (HV, VM, SINK):
        sh("ip", "netns", "add", n)
        # No IPv6 chatter (router solicitations, MLD) through the switch or
        # into a count; `default` also covers br-phy and br-int, made later.
        for k in ("all", "default"):
            quiet("ip", "netns", "exec", n, "sysctl", "-qw", f"net.ipv6.conf.{k}.disable_ipv6=1")
        ns(n, "ip", "link", "set", "lo", "up")
    sh("ip", "link", "add", VMP, "netns", HV, "type", "veth", "peer", "name", "eth0", "netns", VM)
    sh("ip", "link", "add", ULP, "netns", HV, "type", "veth", "peer", "name", "eth0", "netns", SINK)
    for n, dev in ((HV, VMP), (HV, ULP), (VM, "eth0"), (SINK, "eth0")):
        if dev == ULP or n == SINK:
            ns(n, "ip", "link", "set", dev, "mtu", "1600")
        ns(n, "ip", "link", "set", dev, "up")
    ns(SINK, "ip", "addr", "add", f"{REMOTE_IP}/24", "dev", "eth0")


def mac_of(n, dev):
    return ns(n, "cat", f"/sys/class/net/{dev}/address").strip()


def rx_packets(n):
    return int(ns(n, "cat", "/sys/class/net/eth0/statistics/rx_packets").strip())


def csum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack(f"!{len(b) // 2}H", b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def ipv4(src, dst, proto, payload, ttl=64):
    h = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), 0, 0x4000, ttl, proto, 0,
                    bytes(map(int, src.split("."))), bytes(map(int, dst.split("."))))
    return h[:10] + struct.pack("!H", csum(h)) + h[12:] + payload


def udp(sport, dport, payload):
    # Checksum 0: "none", allowed for UDP over IPv4 (and what Geneve
    # senders usually put in the outer header).
    return struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload


def eth(dst, src, ethertype, payload):
    m = lambda s: bytes(int(x, 16) for x in s.split(":"))
    return m(dst) + m(src) + struct.pack("!H", ethertype) + payload


def geneve_frames(flows, outer_dst, outer_src, inner_dst, size=60):
    """Geneve frames from the remote endpoint to br-phy, one per inner flow:
    the inner frame is `size` bytes (without FCS) of UDP 10.9.0.2 -> 10.9.0.1
    to port 5001, from source port 1024+i; the outer UDP source port is
    49152+i (as a sender derives it from the inner flow's hash)."""
    out = []
    for i in range(flows):
        inner_pl = bytes(size - 14 - 20 - 8)
        inner = eth(inner_dst, REMOTE_VM_MAC, 0x0800, ipv4("10.9.0.2", "10.9.0.1", 17, udp(1024 + i, 5001, inner_pl)))
        # Geneve: version 0, no options, not OAM, protocol Ethernet
        # (0x6558), 24-bit VNI then a reserved byte.
        gnv = struct.pack("!BBHI", 0, 0, 0x6558, VNI << 8) + inner
        out.append(eth(outer_dst, outer_src, 0x0800, ipv4(REMOTE_IP, LOCAL_IP, 17, udp(49152 + i, 6081, gnv))))
    return out


class Switch:
    """xvs or ovs-vswitchd in the hypervisor namespace, configured over
    its own ovsdb-server (in the root namespace, a Unix socket)."""

    def __init__(self, name, xvs, port_type=None, kind=None):
        # `name`: the copy of the topology ("xvs" or "ovs"); `kind`: the
        # switch run there (the same, but "xvs" in both with --against-xvs).
        self.name, self.xvs, self.t = name, xvs, TOPOS[name]
        # "xvsoff": xvs with its kernel fast path on (its default).
        self.offload = name == "xvsoff"
        self.kind = kind or ("xvs" if self.offload else name)
        self.d = tempfile.mkdtemp(prefix=f"xbt-{name}-")
        d = self.d
        self.procs, self.pidfiles = [], [f"{d}/ovsdb-server.pid"]
        self.rundir = f"{d}/run" if self.kind == "xvs" else d
        os.makedirs(self.rundir, exist_ok=True)
        self.env = dict(os.environ, OVS_RUNDIR=self.rundir, OVS_DBDIR=d, OVS_LOGDIR=d)
        self.db = f"unix:{d}/db.sock"
        self.vsctl = ["ovs-vsctl", f"--db={self.db}", "--timeout=20"]
        try:
            self.start(port_type)
        except BaseException:
            self.stop()  # what was started so far
            raise

    def start(self, port_type):
        name, xvs, d = self.name, self.xvs, self.d
        HV, SINK, VMP, ULP = self.t.hv, self.t.sink, self.t.vmp, self.t.ulp
        sh("ovsdb-tool", "create", f"{d}/conf.db", "/usr/share/openvswitch/vswitch.ovsschema")
        sh("ovsdb-server", f"{d}/conf.db", f"--remote=punix:{d}/db.sock", f"--pidfile={d}/ovsdb-server.pid",
           f"--unixctl={d}/ovsdb.ctl", "--detach", f"--log-file={d}/ovsdb.log", env=self.env)
        self.v("--no-wait", "init")
        # xvs's kernel fast path off: the AF_XDP datapaths are compared; on
        # (xvs's default) in the third copy.
        self.v("--no-wait", "set", "Open_vSwitch", ".", "other_config:pmd-cpu-mask=0x2",
               f"other_config:xdp-offload={'true' if self.offload else 'false'}")
        if self.kind == "xvs":
            log = open(f"{d}/xvs.log", "w")
            self.procs.append(subprocess.Popen(["ip", "netns", "exec", HV, xvs, "switch", "--db", self.db,
                                                "--run-dir", self.rundir], stdout=log, stderr=log))
        else:
            self.pidfiles.append(f"{d}/ovs-vswitchd.pid")
            sh("ip", "netns", "exec", HV, "ovs-vswitchd", self.db, f"--pidfile={d}/ovs-vswitchd.pid", "--detach",
               f"--log-file={d}/vswitchd.log", env=self.env)
        self.v("add-br", "br-phy", "--", "set", "bridge", "br-phy", "datapath_type=netdev")
        self.iface_types = self.v("get", "Open_vSwitch", ".", "iface_types").strip()
        self.ptype = port_type or ("afxdp" if "afxdp" in self.iface_types else "system")
        self.v("add-port", "br-phy", ULP, "--", "set", "interface", ULP, f"type={self.ptype}")
        self.v("add-br", "br-int", "--", "set", "bridge", "br-int", "datapath_type=netdev")
        self.v("add-port", "br-int", VMP, "--", "set", "interface", VMP, f"type={self.ptype}")
        self.v("add-port", "br-int", "tun0", "--", "set", "interface", "tun0", "type=geneve",
               f"options:remote_ip={REMOTE_IP}", f"options:key={VNI}")
        self.xdp_mode = "-"
        if self.ptype == "afxdp" and self.kind == "ovs":
            # As run.py: native XDP, generic if the kernel refuses it here.
            self.xdp_mode = "native"
            time.sleep(2)
            if '"' in self.v("get", "interface", ULP, "error") + self.v("get", "interface", VMP, "error"):
                self.xdp_mode = "generic-skb"
                for p in (ULP, VMP):
                    self.v("set", "interface", p, "options:xdp-mode=generic-skb")
        for _ in range(100):
            if quiet_ok("ip", "netns", "exec", HV, "ip", "link", "show", "br-phy"):
                break
            time.sleep(0.1)
        ns(HV, "ip", "addr", "add", f"{LOCAL_IP}/24", "dev", "br-phy")
        ns(HV, "ip", "link", "set", "br-phy", "up")
        ns(HV, "ip", "link", "set", "br-int", "up", check=False)
        time.sleep(1)
        for p in (ULP, VMP, "tun0"):
            err = self.v("get", "interface", p, "error").strip()
            if err not in ("[]", ""):
                raise RuntimeError(f"{name}: interface {p}: {err}")
        mgmt = f"unix:{self.rundir}/br-int.mgmt"
        for _ in range(50):
            if os.path.exists(f"{self.rundir}/br-int.mgmt"):
                break
            time.sleep(0.1)
        sh("ovs-ofctl", "del-flows", mgmt)
        sh("ovs-ofctl", "add-flow", mgmt, f"in_port={VMP},actions=output:tun0")
        sh("ovs-ofctl", "add-flow", mgmt, f"in_port=tun0,actions=output:{VMP}")
        if self.ptype == "afxdp":
            # The XDP mode the ports ended up in: xvs says it in dpctl/show,
            # OVS in the interface's status column.
            if self.kind == "xvs":
                shown = self.appctl("dpctl/show", check=False)
            else:
                shown = self.v("get", "interface", ULP, "status") + self.v("get", "interface", VMP, "status")
            self.xdp_mode = ",".join(sorted(set(re.findall(r'xdp-mode="?=?([\w-]+)', shown)))) or self.xdp_mode
        # Resolve the remote endpoint: ARP both ways (and br-phy learns the
        # sink's MAC on the underlay port), then the neighbour entry itself.
        self.sink_mac = mac_of(SINK, "eth0")
        ns(SINK, "ping", "-c", "3", "-i", "0.3", "-W", "1", LOCAL_IP, check=False)
        self.appctl("tnl/neigh/set", "br-phy", REMOTE_IP, self.sink_mac)
        self.brphy_mac = mac_of(HV, "br-phy")
        self.pid = self.procs[0].pid if self.procs else int(open(f"{d}/ovs-vswitchd.pid").read())

    def v(self, *a):
        return sh(*self.vsctl, *a, env=self.env)

    def appctl(self, *a, check=True):
        return sh("ovs-appctl", *a, env=self.env, check=check)

    def pause(self, stop):
        """Stops (SIGSTOP) or continues the switch process: the one not
        measured takes no CPU, and its rings wait."""
        try:
            os.kill(self.pid, signal.SIGSTOP if stop else signal.SIGCONT)
        except OSError:
            pass

    def kernel_forwarded(self):
        """Packets xvs's kernel fast path forwarded so far (credited every
        250 ms), 0 without it."""
        if not self.offload:
            return 0
        r = subprocess.run(["ovs-appctl", "dpif-netdev/offload-show"], capture_output=True, text=True, env=self.env)
        return sum(int(x) for x in re.findall(r"forwarded by the kernel: (\d+) packets", r.stdout))

    def diagnose(self):
        """What the switch thinks, for a case where nothing arrived."""
        out = []
        for c in (["tnl/ports/show"], ["tnl/neigh/show"], ["dpctl/dump-flows"], ["ovs/route/show"]):
            r = subprocess.run(["ovs-appctl", *c], capture_output=True, text=True, env=self.env)
            out.append(f"--- {self.name}: ovs-appctl {' '.join(c)}\n{r.stdout}{r.stderr}")
        return "\n".join(out)

    def stop(self):
        if getattr(self, "pid", None):
            self.pause(False)
        for p in self.procs:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for f in self.pidfiles:
            try:
                os.kill(int(open(f).read()), signal.SIGKILL)
            except (OSError, ValueError):
                pass
        time.sleep(0.3)
        shutil.rmtree(self.d, ignore_errors=True)


def quiet_ok(*a):
    return subprocess.run(a, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0


def measure(xvs, sw, case, flows, secs, gen_kind="xdp"):
    """(offered pps, delivered pps) of one case: the sink's rx_packets over
    `secs` seconds after a WARM-second warm-up."""
    VM, SINK = sw.t.vm, sw.t.sink
    gen_ns, sink_ns = (VM, SINK) if case == "encap" else (SINK, VM)
    ready = tempfile.mktemp(prefix="xbt-ready-")
    tmpl, sink, g = None, None, None
    try:
        sink = subprocess.Popen(["ip", "netns", "exec", sink_ns, xvs, "util", "xdp-sink", "--dev", "eth0",
                                 "--seconds", str(WARM + secs + 3), "--ready-file", ready],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        t = time.time()
        while not os.path.exists(ready) and time.time() - t < 5:
            time.sleep(0.02)
        gen = ["ip", "netns", "exec", gen_ns, "taskset", "-c", "0", xvs, "util", "pktgen", "--dev", "eth0",
               "--seconds", str(WARM + secs + (2 if sw.offload else 0.5))] + (["--xdp"] if gen_kind == "xdp" else [])
        if case == "encap":
            gen += ["--src-mac", mac_of(VM, "eth0"), "--dst-mac", REMOTE_VM_MAC, "--size", "60",
                    "--flows", str(flows)]
        else:
            fd, tmpl = tempfile.mkstemp(prefix="xbt-geneve-", suffix=".hex")
            with os.fdopen(fd, "w") as f:
                for fr in geneve_frames(flows, sw.brphy_mac, sw.sink_mac, mac_of(VM, "eth0")):
                    f.write(fr.hex() + "\n")
            gen += ["--frames-file", tmpl]
        g = subprocess.Popen(gen, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        # The kernel fast path takes a flow once it has been hot for a tick
        # or two (250 ms each): a longer warm-up for that switch.
        time.sleep(WARM + (1.5 if sw.offload else 0))
        k0 = sw.kernel_forwarded()
        r0, t0 = rx_packets(sink_ns), time.time()
        time.sleep(secs)
        r1, t1 = rx_packets(sink_ns), time.time()
        k1 = sw.kernel_forwarded()
        gout = g.communicate(timeout=30)[0]
        sink.communicate(timeout=30)
        m = re.search(r"pps (\d+)", gout)
        if not m:
            raise RuntimeError(f"pktgen: {gout.strip()}")
        return float(m.group(1)), (r1 - r0) / (t1 - t0), (k1 - k0) / (t1 - t0)
    finally:
        for p in (g, sink):
            if p and p.poll() is None:
                p.kill()
                p.wait()
        for f in (ready, tmpl):
            if f and os.path.exists(f):
                os.unlink(f)


GENERATORS = {
    "xdp": "xvs util pktgen --xdp (an XDP program in live-frames mode redirecting into the veth) on CPU 0",
    "afpacket": "xvs util pktgen (AF_PACKET) on CPU 0",
}

CASES = [("encap", 1), ("encap", 1000), ("decap", 1), ("decap", 1000)]


def run(xvs, secs=5.0, reps=1, log=print, port_type=None, with_ovs=True, gen_kind="xdp", against_xvs=None,
        offload=True):
    """Sets up each switch on its own copy of the topology, then runs every
    case `reps` times on each, the switches in turns (see the header); the
    rows hold the median over reps and each rep pair's ratio. With
    `offload`, a third copy runs xvs with its kernel fast path on."""
    names = ["xvs"] + (["ovs"] if with_ovs and shutil.which("ovs-vswitchd") else [])
    if offload and not against_xvs:
        names.append("xvsoff")
    got = {(n, c, f): [] for n in names for c, f in CASES}
    info = {}
    sws = {}
    try:
        for n in names:
            topo(TOPOS[n])
            log(f"tunnel: {n} set-up")
            if n == "ovs" and against_xvs:
                sws[n] = Switch(n, against_xvs, port_type, kind="xvs")
            else:
                sws[n] = Switch(n, xvs, port_type)
            info[n] = {"port_type": sws[n].ptype, "xdp_mode": sws[n].xdp_mode, "iface_types": sws[n].iface_types}
        for r in range(reps):
            for c, f in CASES:
                for n in (names if r % 2 == 0 else names[::-1]):
                    sw = sws[n]
                    sw.pause(False)
                    for other in sws.values():
                        if other is not sw:
                            other.pause(True)
                    time.sleep(0.3)
                    log(f"tunnel: {n} {c}, {f} inner flows, {secs:g} s (rep {r + 1}/{reps})")
                    off, fwd, kern = measure(xvs, sw, c, f, secs, gen_kind)
                    got[(n, c, f)].append((off, fwd, kern))
                    if fwd < 1:
                        sys.stderr.write(f"\n{n} {c} {f} flows: nothing arrived\n{sw.diagnose()}\n")
    finally:
        for sw in sws.values():
            sw.stop()
        cleanup()
    rows = []
    for c, f in CASES:
        row = {"case": c, "inner_flows": f, "frame": 64}
        for n in names:
            v = got[(n, c, f)]
            row[f"{n}_offered_pps"] = statistics.median(x[0] for x in v)
            row[f"{n}_pps"] = statistics.median(x[1] for x in v)
            row[f"{n}_runs"] = [x[1] for x in v]
            if n == "xvsoff":
                row["xvsoff_kernel_share"] = statistics.median(x[2] / x[1] if x[1] else 0 for x in v)
        if "ovs_runs" in row:
            # Rep r of xvs and rep r of OVS ran back to back.
            row["ratio_runs"] = [x / o for x, o in zip(row["xvs_runs"], row["ovs_runs"]) if o > 0]
            row["ratio"] = statistics.median(row["ratio_runs"]) if row["ratio_runs"] else None
            if "xvsoff_runs" in row:
                row["offload_ratio_runs"] = [x / o for x, o in zip(row["xvsoff_runs"], row["ovs_runs"]) if o > 0]
                row["offload_ratio"] = (statistics.median(row["offload_ratio_runs"])
                                        if row["offload_ratio_runs"] else None)
        rows.append(row)
    return {"rows": rows, "switches": info, "seconds": secs, "warmup": WARM, "reps": reps, "in_turns": True,
            "generator": GENERATORS[gen_kind]}


def report(res):
    rows = res["rows"]
    ovs = any("ovs_pps" in r for r in rows)
    print(f"\n{'Geneve, 64 B inner':<20}{'inner flows':>12}{'xvs pps':>12}{'OVS pps':>12}{'xvs/OVS':>9}"
          f"{'offered (xvs/OVS)':>22}  xvs/OVS per rep pair (the median is the ratio)")
    for r in rows:
        o = r.get("ovs_pps")
        ratio = f"{r['ratio']:.2f}" if r.get("ratio") else "-"
        offered = f"{r['xvs_offered_pps']:.0f}/{r['ovs_offered_pps']:.0f}" if ovs else f"{r['xvs_offered_pps']:.0f}"
        per = " ".join(f"{x:.2f}" for x in r.get("ratio_runs", []))
        print(f"{r['case']:<20}{r['inner_flows']:>12}{r['xvs_pps']:>12.0f}{(f'{o:.0f}' if o is not None else '-'):>12}"
              f"{ratio:>9}{offered:>22}  {per}")
    if any("xvsoff_pps" in r for r in rows):
        print(f"\n{'xvs kernel fast path':<20}{'inner flows':>12}{'xvs pps':>12}{'OVS pps':>12}{'xvs/OVS':>9}"
              f"{'kernel-served':>22}  xvs/OVS per rep pair")
        for r in rows:
            o = r.get("ovs_pps")
            ratio = f"{r['offload_ratio']:.2f}" if r.get("offload_ratio") else "-"
            per = " ".join(f"{x:.2f}" for x in r.get("offload_ratio_runs", []))
            served = f"{r.get('xvsoff_kernel_share', 0) * 100:.0f}%"
            print(f"{r['case']:<20}{r['inner_flows']:>12}{r['xvsoff_pps']:>12.0f}"
                  f"{(f'{o:.0f}' if o is not None else '-'):>12}{ratio:>9}{served:>22}  {per}")
    for n, i in res["switches"].items():
        print(f"{n}: ports type={i['port_type']} xdp-mode={i['xdp_mode']}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--xvs", default=os.environ.get("XVS_BIN") or os.path.join(root, "target/release/xvs"))
    ap.add_argument("--secs", type=float, default=5.0)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--port-type", help="afxdp or system for both switches (default: afxdp if OVS offers it)")
    ap.add_argument("--no-ovs", action="store_true")
    ap.add_argument("--against-xvs", metavar="BIN", help="A/B: this xvs build runs where OVS would (its figures in the OVS columns)")
    ap.add_argument("--gen", choices=sorted(GENERATORS), default="xdp",
                    help="xdp (default): the generator transmits from inside the kernel, several times what "
                         "afpacket (a packet socket) offers, so the switch is the bottleneck")
    ap.add_argument("--no-offload", action="store_true", help="leave out xvs with its kernel fast path on")
    ap.add_argument("--out", default=os.path.join(root, "bench-out"))
    a = ap.parse_args()
    res = run(os.path.abspath(a.xvs), a.secs, a.reps, log=lambda m: sys.stderr.write(f"{m}\n"),
              port_type=a.port_type, with_ovs=not a.no_ovs, gen_kind=a.gen,
              against_xvs=a.against_xvs, offload=not a.no_offload)
    res["meta"] = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "kernel": os.uname().release,
                   "ncpu": os.cpu_count(), "loadavg_at_end": os.getloadavg()[0],
                   "generator": GENERATORS[a.gen],
                   "sink": "XDP count+drop; rx_packets of its veth", "switch_cpu": "pmd-cpu-mask=0x2"}
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "results-tunnel.json")
    json.dump(res, open(path, "w"), indent=1)
    report(res)
    print(f"results: {path}")


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    try:
        main()
    except KeyboardInterrupt:
        cleanup()
        sys.exit(130)
