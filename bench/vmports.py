"""VM ports: VM to VM, and a VM's frames to a host namespace, over
vhost-user and over tap.

    testpmd (2 vNICs) <--vhost-user | tap--> switch <--vhost-user | tap--> (same testpmd)
    testpmd (the VM) --vhost-user | tap--> switch (NORMAL) --veth--> sink ns

VM to VM: one testpmd with two vNICs (two VMs' worth of ports) runs
`flowgen` on CPU 0: it sends on each vNIC and counts and drops what
arrives on it; the switch forwards vNIC 1 -> vNIC 2 and back (two rules),
its poll thread alone on CPU 1. Counted is what testpmd received, both
directions summed. Compared: xvs's `dpdkvhostuserclient` ports, OVS-DPDK's
(Debian's openvswitch-switch-dpdk, its vhost-user ports, when installed),
and the tap paths of xvs (AF_PACKET) and OVS (`system` ports), with
testpmd's net_tap vdevs as the VM's tap backend.

DPDK's testpmd (--no-huge) plays the VM. For the vhost-user path its
net_virtio_user vdev owns the socket in server mode, as QEMU does, and xvs
connects with a `dpdkvhostuserclient` port. For the tap path its net_tap
vdev makes a kernel tap device, as QEMU's tap backend does, and the switch
reads it through the kernel: xvs with an AF_PACKET port, Open vSwitch 3.1
(userspace datapath) with a `system` port, which is what OVS's AF_XDP
datapath offers VMs (it has no vhost-user without DPDK). The sink's veth
end is an AF_XDP port in every case. testpmd `txonly` sends 64-byte frames
for SECS seconds; the sink's rx_packets counter says what arrived.

The two vhost-user paths of the VM to VM table (xvs, OVS-DPDK) run
--reps times each (default 3) in turns, xvs first in even reps: each pair
of runs is seconds apart, and the xvs / OVS-DPDK ratio printed is the
median of the pairs' ratios, with the pairs (this machine's speed drifts
by 1.5-3x over minutes).

Printed: per path, what the VMs received per second (VM to VM) and what
the VM sent and the host got (VM to host), and the vhost-user / tap and
xvs / OVS-DPDK ratios (the issue's goals: at least 5x the tap path, and at
least OVS-DPDK's vhost pps).
Run through run.py (`./bench.sh --only vm`) or alone as root:
python3 bench/vmports.py [--xvs target/release/xvs] [--secs 3].

Conntrack between VMs (`--only-ct`, `./bench.sh --only vmct`; issue 13's
cases where the switch is the bottleneck: no kernel in the path, so the
switch's own work decides). The VM to VM set-up above, testpmd `flowgen`
with 10,000 flows per vNIC (UDP 10.254.0.0:1000 -> 10.253.x.y:1001),
the same ovs-ofctl rules in xvs and OVS-DPDK:
  forward    in_port=1 -> 2 and 2 -> 1: the baseline
  one-way    ct(table=1,zone=N); +new -> ct(commit), +est -> output, each
             vNIC in its own zone: connections that never see a reply
  snat       one-way, committing with nat(src=10.3.N.1-10.3.N.254)
  est        vNIC 2's frames are turned into replies of vNIC 1's (addresses
             and ports swapped by `move`s, which makes its megaflows one
             per flow) before ct(table=1): 10,000 established connections,
             the issue's case (a)
  new        one-way with 2^31-1 flows per vNIC: flowgen steps the
             destination address on every frame and does not come back to
             a tuple within the run, so every frame is a new connection
             that commits: the issue's case (b), new connections per
             second. Both switches get a limit of 12,000,000 connections
             (ct-set-maxconns), above what a run makes.
With `--reps N` (default 3 when run alone) each case runs N times per
switch in turns, as VM to VM does, and its ratio is the median of the
pairs' (printed with them); through run.py it runs once.
Unanswered UDP is +new on every frame in xvs (as in Linux and in OVS's
kernel datapath), so one-way runs ct twice per frame in xvs (the check,
then the commit); OVS's userspace tracker calls such a connection
established from its third frame on and runs ct once.
"""
import argparse, contextlib, os, re, shutil, signal, statistics, subprocess, tempfile, time

NS, SP = "xbvm-sink", "xbvm-s"
TAP = "xbvmtap0"
TAPS = ("xbvmt1", "xbvmt2")
OVS_DPDK = "/usr/lib/openvswitch-switch-dpdk/ovs-vswitchd-dpdk"
VV_FLOWS = "in_port=1,actions=output:2\nin_port=2,actions=output:1\n"


def sh(*a, check=True, **kw):
    return subprocess.run(a, check=check, capture_output=True, text=True, **kw).stdout


def quiet(*a):
    subprocess.run(a, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def cleanup():
    quiet("ip", "netns", "del", NS)
    quiet("ip", "link", "del", SP)
    for t in (TAP, *TAPS):
        quiet("ip", "link", "del", t)


def topo():
    cleanup()
    sh("ip", "netns", "add", NS)
    sh("ip", "link", "add", SP, "type", "veth", "peer", "name", "eth0", "netns", NS)
    quiet("sysctl", "-qw", f"net.ipv6.conf.{SP}.disable_ipv6=1")
    sh("ip", "link", "set", SP, "up")
    quiet("ip", "netns", "exec", NS, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")
    sh("ip", "netns", "exec", NS, "ip", "link", "set", "eth0", "up")


def sink_rx():
    return int(sh("ip", "netns", "exec", NS, "cat", "/sys/class/net/eth0/statistics/rx_packets").strip())


class Testpmd:
    def __init__(self, vdev, prefix, lcores=("-l", "0,1"), mbufs=8192, extra=()):
        self.out = tempfile.NamedTemporaryFile(prefix="xb-testpmd-", delete=False)
        self.prefix = prefix
        vdevs = [vdev] if isinstance(vdev, str) else list(vdev)
        self.p = subprocess.Popen(
            ["stdbuf", "-o0", "dpdk-testpmd", *lcores, "--no-huge", "-m", "512", "--no-pci",
             "--file-prefix", prefix, *[x for v in vdevs for x in ("--vdev", v)],
             "--", "-i", f"--total-num-mbufs={mbufs}", *extra],
            stdin=subprocess.PIPE, stdout=self.out, stderr=subprocess.STDOUT, text=True)

    def text(self):
        return open(self.out.name, errors="replace").read()

    def wait_prompt(self, secs=20):
        t = time.time()
        while time.time() - t < secs:
            if "testpmd>" in self.text():
                return True
            time.sleep(0.1)
        return False

    def cmd(self, c):
        self.p.stdin.write(c + "\n")
        self.p.stdin.flush()

    def tx_packets(self):
        n = len(self.text())
        self.cmd("show port stats 0")
        time.sleep(0.5)
        m = re.findall(r"TX-packets:\s+(\d+)", self.text()[n:])
        return int(m[0]) if m else 0

    def rx_all(self):
        """RX-packets summed over every port (asked now, read 0.5 s later)."""
        n = len(self.text())
        self.cmd("show port stats all")
        time.sleep(0.5)
        return sum(int(x) for x in re.findall(r"RX-packets:\s+(\d+)", self.text()[n:]))

    def stop(self):
        try:
            self.cmd("quit")
            self.p.wait(timeout=5)
        except Exception:
            self.p.kill()
            self.p.wait()
        os.unlink(self.out.name)
        shutil.rmtree(f"/var/run/dpdk/{self.prefix}", ignore_errors=True)


def xvs_switch(xvs, vm_port, ports=None, flows=None, maxconns=None):
    """xvs with `vm_port` and the sink's veth, or with `ports` and `flows`
    (poll thread busy on CPU 1); `maxconns`: the tracker's limit."""
    run = tempfile.mkdtemp(prefix="xb-vm-xvs-")
    args = [xvs, "switch", "--run-dir", run, "--bridge", "xbvmbr", "--no-local-port"]
    if ports is None:
        args += ["--port", vm_port, "--port", f"{SP},type=afxdp"]
    else:
        with open(f"{run}/flows", "w") as f:
            f.write(flows)
        args += ["--pmd-cpus", "1", "--poll", "busy", "--flows", f"{run}/flows"]
        for port in ports:
            args += ["--port", port]
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop():
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=10)
        shutil.rmtree(run, ignore_errors=True)
    if maxconns:
        for _ in range(50):
            if subprocess.run([xvs, "ctl", "--run-dir", run, "ct-set-maxconns", str(maxconns)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0:
                break
            time.sleep(0.1)
        else:
            stop()
            raise RuntimeError("xvs: ct-set-maxconns failed")
    return stop


def ovs_switch(vm_port, ports=None, flows=None, dpdk=False, pmd_mask="0x2", maxconns=None):
    """OVS 3.1 (userspace datapath) with `vm_port` and the sink's veth, or
    with `ports` ((name, type, [column=value ...])) and `flows`, its poll
    thread on CPU 1; `dpdk`: the DPDK build, EAL on CPU 0 without
    hugepages."""
    d = tempfile.mkdtemp(prefix="xb-vm-ovs-")
    env = dict(os.environ, OVS_RUNDIR=d, OVS_DBDIR=d, OVS_LOGDIR=d)
    vsctl = ["ovs-vsctl", f"--db=unix:{d}/db.sock"]
    sh("ovsdb-tool", "create", f"{d}/conf.db", "/usr/share/openvswitch/vswitch.ovsschema")
    sh("ovsdb-server", f"{d}/conf.db", f"--remote=punix:{d}/db.sock", f"--pidfile={d}/ovsdb-server.pid",
       "--detach", f"--log-file={d}/ovsdb.log", env=env)
    sh(*vsctl, "--no-wait", "init", env=env)
    if ports is not None or dpdk:
        sh(*vsctl, "--no-wait", "set", "Open_vSwitch", ".", f"other_config:pmd-cpu-mask={pmd_mask}", env=env)
    if dpdk:
        # OVS adds --in-memory unless told --legacy-mem, which --no-huge needs.
        sh(*vsctl, "--no-wait", "set", "Open_vSwitch", ".", "other_config:dpdk-init=true",
           "other_config:dpdk-lcore-mask=0x1",
           "other_config:dpdk-extra=--no-huge --legacy-mem -m 2048 --no-pci --file-prefix xbvm-ovs", env=env)
    sh(OVS_DPDK if dpdk else "ovs-vswitchd", f"unix:{d}/db.sock", f"--pidfile={d}/ovs-vswitchd.pid", "--detach",
       f"--log-file={d}/vswitchd.log", env=env)
    sh(*vsctl, "add-br", "xbvmbr", "--", "set", "bridge", "xbvmbr", "datapath_type=netdev", env=env)
    if ports is None:
        if isinstance(vm_port, tuple):  # (name, type, [column=value ...])
            name, kind, cols = vm_port
            sh(*vsctl, "add-port", "xbvmbr", name, "--", "set", "interface", name, f"type={kind}", *cols, env=env)
        else:
            sh(*vsctl, "add-port", "xbvmbr", vm_port, env=env)
        sh(*vsctl, "add-port", "xbvmbr", SP, "--", "set", "interface", SP, "type=afxdp", env=env)
    else:
        for i, (name, kind, cols) in enumerate(ports):
            sh(*vsctl, "add-port", "xbvmbr", name, "--", "set", "interface", name, f"type={kind}",
               f"ofport_request={i + 1}", *cols, env=env)
        sh("ovs-ofctl", "del-flows", f"unix:{d}/xbvmbr.mgmt")
        with open(f"{d}/flows", "w") as f:
            f.write(flows)
        sh("ovs-ofctl", "add-flows", f"unix:{d}/xbvmbr.mgmt", f"{d}/flows")

    def stop():
        for f in ("ovs-vswitchd", "ovsdb-server"):
            try:
                os.kill(int(open(f"{d}/{f}.pid").read()), signal.SIGKILL)
            except (OSError, ValueError):
                pass
        time.sleep(0.3)
        if os.environ.get("XB_KEEP_LOG"):
            shutil.copy(f"{d}/vswitchd.log", "/tmp/xb-vm-vswitchd.log")
        quiet("ip", "link", "del", "xbvmbr")
        quiet("ip", "link", "del", "ovs-netdev")
        shutil.rmtree(d, ignore_errors=True)
        shutil.rmtree("/var/run/dpdk/xbvm-ovs", ignore_errors=True)
    if maxconns:
        try:
            # (The DPDK build names its control socket after its own binary.)
            pid = open(f"{d}/ovs-vswitchd.pid").read().strip()
            ctl = [f for f in os.listdir(d) if f.endswith(f".{pid}.ctl")][0]
            sh("ovs-appctl", "-t", f"{d}/{ctl}", "dpctl/ct-set-maxconns", str(maxconns), env=env)
        except Exception:
            stop()
            raise
    return stop


@contextlib.contextmanager
def running(label, vdev, start_switch, switch_first, prefix, **testpmd_args):
    """testpmd (the VM) and the switch, started in the order the path needs
    (testpmd as a vhost-user server waits for the switch to connect; a tap
    device exists only once testpmd made it), and stopped afterwards."""
    pmd, stop = None, None
    try:
        if switch_first:
            stop = start_switch()
            pmd = Testpmd(vdev, prefix, **testpmd_args)
        else:
            pmd = Testpmd(vdev, prefix, **testpmd_args)
            if not pmd.wait_prompt():
                raise RuntimeError(f"{label}: testpmd did not start:\n{pmd.text()[-2000:]}")
            stop = start_switch()
        if not pmd.wait_prompt():
            raise RuntimeError(f"{label}: testpmd did not start:\n{pmd.text()[-2000:]}")
        time.sleep(2)
        yield pmd
    finally:
        if pmd:
            pmd.stop()
        if stop:
            stop()
        cleanup()


def case(label, secs, vdev, start_switch, switch_first):
    """VM to host: returns (sent pps, delivered pps)."""
    topo()
    with running(label, vdev, start_switch, switch_first, "xbvm") as pmd:
        r0, t0 = sink_rx(), pmd.tx_packets()
        pmd.cmd("set fwd txonly")
        pmd.cmd("start")
        time.sleep(secs)
        pmd.cmd("stop")
        time.sleep(0.5)
        sent, got = pmd.tx_packets() - t0, sink_rx() - r0
        return sent / secs, got / secs


def vm2vm_case(label, secs, vdevs, start_switch, switch_first, extra=()):
    """VM to VM: returns frames testpmd received per second, both vNICs."""
    cleanup()
    # testpmd wholly on CPU 0.
    with running(label, vdevs, start_switch, switch_first, "xbvv", lcores=("--lcores", "(0,1)@0"),
                 mbufs=16384, extra=extra) as pmd:
        pmd.cmd("set fwd flowgen")
        pmd.cmd("start")
        time.sleep(1)
        t0 = time.time()
        r0 = pmd.rx_all()
        time.sleep(max(0.0, t0 + secs - time.time()))
        t1 = time.time()
        r1 = pmd.rx_all()
        pmd.cmd("stop")
        return (r1 - r0) / (t1 - t0)


def in_turns(labels, reps, run_one):
    """Runs each path of `labels` `reps` times, in turns: in the given
    order in even reps, reversed in odd ones, so each pair of runs is
    seconds apart (this machine's speed drifts more than that over
    minutes). `run_one(label, rep)` returns a rate. Returns the rates per
    label."""
    got = {label: [] for label in labels}
    for r in range(max(1, reps)):
        for label in (labels if r % 2 == 0 else labels[::-1]):
            got[label].append(run_one(label, r))
    return got


def median_of_pairs(pairs):
    """The ratio printed for runs in turns, and the pairs it comes from."""
    return f"{statistics.median(pairs):.2f}", " ".join(f"{p:.2f}" for p in pairs)


def vm2vm(xvs, secs=3, log=print, reps=3):
    """The VM to VM table. The two vhost-user paths (xvs, OVS-DPDK) run
    `reps` times each, in turns (xvs first in even reps, OVS-DPDK first in
    odd ones), so each pair of runs is seconds apart: this machine's speed
    drifts more than that over minutes. Their rows give the median, the
    runs, and xvs's row the ratio of each pair (`ratio_runs`); the tap
    paths run once."""
    a, b = "/tmp/xb-vv-a.sock", "/tmp/xb-vv-b.sock"
    for f in (a, b):
        quiet("rm", "-f", f)
    vhost = [f"net_virtio_user0,path={a},server=1,queues=1", f"net_virtio_user1,path={b},server=1,queues=1"]
    taps = [f"net_tap0,iface={TAPS[0]}", f"net_tap1,iface={TAPS[1]}"]
    cases = [
        ("xvs vhost-user", vhost, lambda: xvs_switch(xvs, None, [
            f"vhu1,type=dpdkvhostuserclient,vhost-server-path={a}",
            f"vhu2,type=dpdkvhostuserclient,vhost-server-path={b}"], VV_FLOWS), True),
    ]
    if os.path.exists(OVS_DPDK):
        cases.append(("ovs-dpdk vhost-user", vhost, lambda: ovs_switch(None, [
            ("vhu1", "dpdkvhostuserclient", [f"options:vhost-server-path={a}"]),
            ("vhu2", "dpdkvhostuserclient", [f"options:vhost-server-path={b}"])], VV_FLOWS, dpdk=True), True))
    else:
        log("VM to VM: OVS-DPDK not installed (openvswitch-switch-dpdk): its row is left out")
    cases.append(("xvs tap (AF_PACKET)", taps, lambda: xvs_switch(
        xvs, None, [f"{TAPS[0]},type=afpacket", f"{TAPS[1]},type=afpacket"], VV_FLOWS), False))
    if shutil.which("ovs-vswitchd"):
        cases.append(("ovs tap (system port)", taps, lambda: ovs_switch(
            None, [(TAPS[0], "system", []), (TAPS[1], "system", [])], VV_FLOWS), False))
    by_label = {c[0]: c for c in cases}

    def one(label, r):
        _, vdevs, start, first = by_label[label]
        log(f"VM to VM, {label}: testpmd flowgen for {secs} s (rep {r + 1}/{reps})")
        return vm2vm_case(label, secs, vdevs, start, first)

    runs = {c[0]: [] for c in cases}
    runs.update(in_turns([c[0] for c in cases if "vhost-user" in c[0]], reps, one))
    for label, vdevs, start, first in cases:
        if not runs[label]:
            log(f"VM to VM, {label}: testpmd flowgen for {secs} s")
            runs[label].append(vm2vm_case(label, secs, vdevs, start, first))
    out = []
    for label, *_ in cases:
        v = runs[label]
        out.append({"kind": "vm-vm", "path": label, "delivered_pps": statistics.median(v), "runs": v})
    x, o = runs.get("xvs vhost-user", []), runs.get("ovs-dpdk vhost-user", [])
    if x and o:
        out[0]["ratio_runs"] = [a / b for a, b in zip(x, o) if b > 0]
    return out


SWAP = ("move:NXM_OF_IP_SRC[]->NXM_NX_REG0[],move:NXM_OF_IP_DST[]->NXM_OF_IP_SRC[],"
        "move:NXM_NX_REG0[]->NXM_OF_IP_DST[],move:NXM_OF_UDP_SRC[]->NXM_NX_REG1[0..15],"
        "move:NXM_OF_UDP_DST[]->NXM_OF_UDP_SRC[],move:NXM_NX_REG1[0..15]->NXM_OF_UDP_DST[]")


def ct_flows(case):
    """The rules of a conntrack case (see the module text)."""
    if case == "forward":
        return VV_FLOWS
    lines = []
    if case == "est":
        lines = [
            "table=0,priority=10,udp,in_port=1,actions=ct(table=1,zone=1)",
            f"table=0,priority=10,udp,in_port=2,actions={SWAP},ct(table=1,zone=1)",
            "table=1,priority=10,ip,in_port=1,ct_state=+trk+new,actions=ct(commit,zone=1),output:2",
            "table=1,priority=10,ip,in_port=1,ct_state=+trk+est,actions=output:2",
            "table=1,priority=10,ip,in_port=2,ct_state=+trk+est,actions=output:1",
        ]
    else:
        nat = ",nat" if case == "snat" else ""
        for p, q in ((1, 2), (2, 1)):
            commit = f"ct(commit,zone={p},nat(src=10.3.{p}.1-10.3.{p}.254))" if nat else f"ct(commit,zone={p})"
            lines += [
                f"table=0,priority=10,ip,in_port={p},ct_state=-trk,actions=ct(table=1,zone={p}{nat})",
                f"table=1,priority=10,ip,in_port={p},ct_state=+trk+new,actions={commit},output:{q}",
                f"table=1,priority=10,ip,in_port={p},ct_state=+trk+est,actions=output:{q}",
            ]
    lines += ["table=0,priority=0,actions=drop", "table=1,priority=0,actions=drop"]
    return "\n".join(lines) + "\n"


NEW_FLOWS = 2**31 - 1
NEW_MAXCONNS = 12_000_000
CT_CASES = ("forward", "one-way", "snat", "est", "new")


def vm_conntrack(xvs, secs=3, flows=10000, log=print, cases=CT_CASES, reps=1):
    """Conntrack between two VMs, xvs against OVS-DPDK (see the module
    text): one row per case and switch, frames the VMs received per
    second. With `reps` above 1 the two switches run each case that many
    times in turns (xvs first in even reps): a row then holds the median
    rate, and xvs's row the pairs' ratios (`ratio_runs`)."""
    if not os.path.exists(OVS_DPDK):
        log("conntrack between VMs: OVS-DPDK not installed (openvswitch-switch-dpdk): skipped")
        return []
    a, b = "/tmp/xb-vv-a.sock", "/tmp/xb-vv-b.sock"
    vhost = [f"net_virtio_user0,path={a},server=1,queues=1", f"net_virtio_user1,path={b},server=1,queues=1"]
    out = []
    for case in cases:
        rules = ct_flows("one-way" if case == "new" else case)
        n = NEW_FLOWS if case == "new" else flows
        limit = NEW_MAXCONNS if case == "new" else None
        switches = [
            ("xvs", lambda: xvs_switch(xvs, None, [f"vhu1,type=dpdkvhostuserclient,vhost-server-path={a}",
                                                   f"vhu2,type=dpdkvhostuserclient,vhost-server-path={b}"], rules,
                                       maxconns=limit)),
            ("ovs-dpdk", lambda: ovs_switch(None, [("vhu1", "dpdkvhostuserclient", [f"options:vhost-server-path={a}"]),
                                                   ("vhu2", "dpdkvhostuserclient", [f"options:vhost-server-path={b}"])],
                                            rules, dpdk=True, maxconns=limit)),
        ]
        starts = dict(switches)

        def one(label, r):
            for f in (a, b):
                quiet("rm", "-f", f)
            rep = f" (rep {r + 1}/{reps})" if reps > 1 else ""
            log(f"conntrack between VMs, {case}, {label}: testpmd flowgen ({n} flows per vNIC) for {secs} s{rep}")
            return vm2vm_case(label, secs, vhost, starts[label], True, extra=(f"--flowgen-flows={n}",))

        got = in_turns([label for label, _ in switches], reps, one)
        pairs = [x / o for x, o in zip(got["xvs"], got["ovs-dpdk"]) if o]
        for label, _ in switches:
            row = {"kind": "vm-ct", "case": case, "path": label, "delivered_pps": statistics.median(got[label]),
                   "runs": got[label]}
            if label == "xvs" and reps > 1:
                row["ratio_runs"] = pairs
            out.append(row)
    return out


def run(xvs, secs=3, log=print):
    vhost_sock = "/tmp/xb-vm-vhost.sock"
    quiet("rm", "-f", vhost_sock)
    tap_vdev = f"net_tap0,iface={TAP}"
    cases = [
        ("xvs vhost-user", f"net_virtio_user0,path={vhost_sock},server=1,queues=1",
         lambda: xvs_switch(xvs, f"vhu0,type=dpdkvhostuserclient,vhost-server-path={vhost_sock}"), True),
        ("xvs tap (AF_PACKET)", tap_vdev, lambda: xvs_switch(xvs, f"{TAP},type=afpacket"), False),
    ]
    if os.path.exists(OVS_DPDK):
        cases.insert(1, ("ovs-dpdk vhost-user", f"net_virtio_user0,path={vhost_sock},server=1,queues=1",
                         # testpmd's forwarding lcore spins on CPU 1: the poll thread takes CPU 0
                         lambda: ovs_switch(("vhu0", "dpdkvhostuserclient",
                                             [f"options:vhost-server-path={vhost_sock}"]), dpdk=True,
                                            pmd_mask="0x1"), True))
    if shutil.which("ovs-vswitchd"):
        cases.append(("ovs tap (system port)", tap_vdev, lambda: ovs_switch(TAP), False))
    out = vm2vm(xvs, max(secs, 3), log)
    for label, vdev, start, first in cases:
        log(f"{label}: testpmd txonly for {secs} s")
        sent, got = case(label, secs, vdev, start, first)
        out.append({"kind": "vm-host", "path": label, "sent_pps": sent, "delivered_pps": got})
    return out


def ratios(rows, goals):
    """xvs vhost-user's delivered pps over each other path's, with the
    issue's goal where it sets one."""
    by = {r["path"]: r["delivered_pps"] for r in rows}
    v = by.get("xvs vhost-user", 0)
    pairs = next((r.get("ratio_runs") for r in rows if r["path"] == "xvs vhost-user"), None)
    for other, goal in goals:
        if not by.get(other):
            continue
        if other == "ovs-dpdk vhost-user" and pairs:
            ratio, shown = median_of_pairs(pairs)
            print(f"xvs vhost-user / {other}: {ratio}x in turns (pairs: {shown})"
                  + (f" ({goal})" if goal else ""))
        else:
            print(f"xvs vhost-user / {other}: {v / by[other]:.2f}x" + (f" ({goal})" if goal else ""))


def report(rows):
    ct = [r for r in rows if r.get("kind") == "vm-ct"]
    if ct:
        print(f"\n{'conntrack, VM <-> VM':<22}{'xvs /s':>12}{'OVS-DPDK /s':>13}{'xvs / OVS':>11}")
        goals = {"one-way": "", "snat": "goal (c) >= 1.5x", "est": "goal (a) >= 1.5x",
                 "new": "goal (b) >= 2x (new connections/s)"}
        for case in dict.fromkeys(r["case"] for r in ct):
            by = {r["path"]: r["delivered_pps"] for r in ct if r["case"] == case}
            x, o = by.get("xvs", 0), by.get("ovs-dpdk", 0)
            pairs = next((r.get("ratio_runs") for r in ct if r["case"] == case and r["path"] == "xvs"), None)
            if pairs:
                ratio, shown = median_of_pairs(pairs)
                shown = "  pairs " + shown
            else:
                ratio, shown = (f"{x / o:.2f}" if o else "-"), ""
            print(f"{case:<22}{x:>12.0f}{o:>13.0f}{ratio:>11}  {goals.get(case, '')}{shown}")
    vv = [r for r in rows if r.get("kind") == "vm-vm"]
    if vv:
        print(f"\n{'VM <-> VM (64 B)':<24}{'received/s':>13}")
        for r in vv:
            print(f"{r['path']:<24}{r['delivered_pps']:>13.0f}")
        ratios(vv, (("ovs-dpdk vhost-user", "goal >= 1x"), ("xvs tap (AF_PACKET)", "goal >= 5x"),
                    ("ovs tap (system port)", "goal >= 5x")))
    vh = [r for r in rows if r.get("kind", "vm-host") == "vm-host"]
    if vh:
        print(f"\n{'VM -> host (64 B)':<24}{'VM sent/s':>12}{'delivered/s':>13}")
        for r in vh:
            print(f"{r['path']:<24}{r['sent_pps']:>12.0f}{r['delivered_pps']:>13.0f}")
        ratios(vh, (("ovs-dpdk vhost-user", None), ("xvs tap (AF_PACKET)", None), ("ovs tap (system port)", None)))


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--xvs", default=os.environ.get("XVS", "target/release/xvs"))
    ap.add_argument("--secs", type=float, default=3)
    ap.add_argument("--only-vm2vm", action="store_true", help="only the VM to VM table")
    ap.add_argument("--reps", type=int, default=3,
                    help="runs of each vhost-user path (VM to VM, and each conntrack case), in turns")
    ap.add_argument("--only-ct", action="store_true", help="only conntrack between VMs")
    ap.add_argument("--ct-case", action="append", choices=CT_CASES, help="with --only-ct: only this case (repeatable)")
    a = ap.parse_args()
    if a.only_ct:
        report(vm_conntrack(a.xvs, a.secs, cases=tuple(a.ct_case or CT_CASES), reps=a.reps))
    else:
        report(vm2vm(a.xvs, a.secs, reps=a.reps) if a.only_vm2vm else run(a.xvs, a.secs))
