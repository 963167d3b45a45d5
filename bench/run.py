#!/usr/bin/env python3
"""Side-by-side forwarding benchmark: xvs, OVS 3.1 AF_XDP, the Linux bridge,
and two ceilings (generator straight into the sink; a 2-port AF_XDP wire
with no lookup), on the same veth topology, in one run.

    generator ns (pktgen, AF_PACKET; --gen xdp: pktgen --xdp) --veth--> switch --veth--> sink ns (XDP count+drop)

Every case runs --reps times for --seconds; the table shows medians. Output:
a table on the terminal (with a progress line), results.json and, if
matplotlib is importable, chart.png in --out. Run as root through
../bench.sh, which builds what it needs. Everything created is removed at
the end, also on failure and Ctrl-C.
"""
import argparse, json, os, re, shutil, signal, statistics, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
XVS = os.environ.get("XVS_BIN") or os.path.join(ROOT, "target/release/xvs")
TX_FLUSH_US = 0
# "afpacket": the AF_PACKET sender; "xdp": `pktgen --xdp`, which transmits
# from inside the kernel (several times faster; needs XDP on the receiving
# veth, so cases without it, the Linux bridge, are skipped).
GEN = "afpacket"
WIRE = os.path.join(ROOT, "target/release/examples/wire")
OVN_BENCH = os.environ.get("XVS_OVN_BENCH") or os.path.join(os.path.dirname(XVS), "examples/ovn_bench")
G, S, GP, SP = "xbgen", "xbsink", "xbg0", "xbs0"
HZ = os.sysconf("SC_CLK_TCK")


def sh(*a, check=True, **kw):
    return subprocess.run(a, check=check, capture_output=True, text=True, **kw).stdout


def ns(n, *a, **kw):
    return sh("ip", "netns", "exec", n, *a, **kw)


def quiet(*a):
    subprocess.run(a, capture_output=True)


def names(k=""):
    """The topology's names (gen ns, sink ns, gen port, sink port); `k`
    tells apart the copies that run side by side (see measure_pair)."""
    return f"{G}{k}", f"{S}{k}", f"{GP}{k}", f"{SP}{k}"


class Topo:
    """gen and sink namespaces; the root-side veth ends are the switch ports.
    direct=True wires gen to sink with one veth pair (the bare ceiling)."""

    def __init__(self, direct=False, k=""):
        self.direct = direct
        self.k = k
        G, S, GP, SP = names(k)
        self.g, self.s, self.gp, self.sp = G, S, GP, SP
        self.cleanup(k)
        for n in (G, S):
            sh("ip", "netns", "add", n)
        if direct:
            sh("ip", "link", "add", "eth0", "netns", G, "type", "veth", "peer", "name", "eth0", "netns", S)
        else:
            sh("ip", "link", "add", GP, "type", "veth", "peer", "name", "eth0", "netns", G)
            sh("ip", "link", "add", SP, "type", "veth", "peer", "name", "eth0", "netns", S)
            for p in (GP, SP):
                quiet("sysctl", "-qw", f"net.ipv6.conf.{p}.disable_ipv6=1")
                sh("ip", "link", "set", p, "up")
        for n in (G, S):
            # no IPv6 chatter through the switch or into the sink's count
            quiet("ip", "netns", "exec", n, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")
            ns(n, "ip", "link", "set", "eth0", "up")
            ns(n, "ip", "link", "set", "lo", "up")
            # Offloads stay as Linux has them: the measured frames are the
            # generator's own (complete checksums, or partial ones where a
            # case asks), not the stack's.
        self.gmac = ns(G, "cat", "/sys/class/net/eth0/address").strip()
        self.smac = ns(S, "cat", "/sys/class/net/eth0/address").strip()

    @staticmethod
    def cleanup(k=None):
        for kk in [k] if k is not None else ["", "x", "o"]:
            G, S, GP, SP = names(kk)
            for n in (G, S):
                quiet("ip", "netns", "del", n)
            for d in (GP, SP):
                quiet("ip", "link", "del", d)
        quiet("ip", "link", "del", "xbbr")


def cpu_of(pid):
    """user+system seconds of a process (all threads)."""
    try:
        f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / HZ
    except (OSError, IndexError):
        return 0.0


def thread_times(pid, tid):
    """(user s, system s) of one thread."""
    try:
        f = open(f"/proc/{pid}/task/{tid}/stat").read().rsplit(")", 1)[1].split()
        return int(f[11]) / HZ, int(f[12]) / HZ
    except (OSError, IndexError, TypeError):
        return 0.0, 0.0


def find_thread(pid, prefix):
    """Id of the first thread of `pid` whose name starts with `prefix`."""
    for _ in range(50):
        try:
            for tid in sorted(os.listdir(f"/proc/{pid}/task"), key=int):
                if open(f"/proc/{pid}/task/{tid}/comm").read().startswith(prefix):
                    return int(tid)
        except OSError:
            pass
        time.sleep(0.1)
    return None


def cpu_times(cpu):
    """(user, system, softirq, idle) seconds of one CPU (cpu="" for all of
    them together), from /proc/stat."""
    for line in open("/proc/stat"):
        if line.startswith(f"cpu{cpu} "):
            f = [int(x) / HZ for x in line.split()[1:]]
            return f[0] + f[1], f[2], f[6], f[3] + f[4]
    return 0.0, 0.0, 0.0, 0.0


def softirq():
    for line in open("/proc/stat"):
        if line.startswith("cpu "):
            return int(line.split()[7]) / HZ
    return 0.0


SETUP_FLOWS = 1_000_000


def run_once(topo, size, flows, secs, pid, first=0, tid=None, partial=False):
    """One measurement: (offered pps, forwarded pps, switch cpu s, softirq s,
    poll thread (user s, system s), CPU 1 (user, system, softirq, idle) s)."""
    ready = tempfile.mktemp(prefix="xb-ready-")
    sink = subprocess.Popen(["ip", "netns", "exec", topo.s, XVS, "util", "xdp-sink", "--dev", "eth0",
                             "--seconds", str(secs + 1.0), "--ready-file", ready],
                            stdout=subprocess.PIPE, text=True)
    t0 = time.time()
    while not os.path.exists(ready) and time.time() - t0 < 5:
        time.sleep(0.02)
    c0, s0 = cpu_of(pid) if pid else 0.0, softirq()
    t0, k0, a0 = thread_times(pid, tid), cpu_times(1), cpu_times("")
    gen = sh("ip", "netns", "exec", topo.g, "taskset", "-c", "0", XVS, "util", "pktgen", "--dev", "eth0",
             "--src-mac", topo.gmac, "--dst-mac", topo.smac, "--size", str(size - 4),
             "--flows", str(flows), "--first-flow", str(first), "--seconds", str(secs),
             *(["--partial-csum"] if partial else []), *(["--xdp"] if GEN == "xdp" else []))
    c1, s1 = cpu_of(pid) if pid else 0.0, softirq()
    t1, k1, a1 = thread_times(pid, tid), cpu_times(1), cpu_times("")
    out = sink.communicate(timeout=secs + 10)[0]
    os.path.exists(ready) and os.unlink(ready)
    sent = int(re.search(r"sent (\d+)", gen).group(1))
    got = int(re.search(r"received (\d+)", out).group(1))
    return (sent / secs, got / secs, c1 - c0, s1 - s0, [b - a for a, b in zip(t0, t1)],
            [b - a for a, b in zip(k0, k1)], got, [b - a for a, b in zip(a0, a1)])


def rule_file(flows, reps=3):
    """1000 rules that force L3/L4 megaflows: one per destination address
    of the generator's pool, matching UDP to port 5001; ARP and the rest
    go NORMAL.

    For the flow-setup case ("setup") those rules continue in table 1,
    which has one rule per UDP source port the generator uses (1,000 per
    run): every megaflow then holds the exact destination and the exact
    source port, in both switches (prefix tries cannot widen an exact hit),
    so every new (destination, source port) pair of the generator's stream
    is a new megaflow, set up by an upcall."""
    lines = ["priority=0,actions=NORMAL"]
    then = "resubmit(,1)" if flows == "setup" else "output:2"
    for b in range(1000):
        dst = f"10.2.{b // 250}.{b % 250 + 1}"
        lines.append(f"priority=10,udp,nw_dst={dst},tp_dst=5001,actions={then}")
    if flows == "setup":
        lines.append("table=1,priority=0,actions=output:2")
        for sport in range(1024, 1024 + 1000 * reps):
            lines.append(f"table=1,priority=10,udp,tp_src={sport},actions=output:2")
    path = tempfile.mktemp(prefix="xb-rules-", suffix=".txt")
    open(path, "w").write("\n".join(lines) + "\n")
    return path


def ct_rule_file(snat=False):
    """A stateful firewall as OVS users write one (ovs-actions(7)): IP goes
    through the tracker (zone 1) and continues in table 1; new connections
    from the generator's port are committed (with source NAT to a pool of
    254 addresses when `snat`), established ones forwarded. Installed with
    ovs-ofctl into xvs and OVS alike."""
    nat = ",nat" if snat else ""
    commit = "ct(commit,zone=1,nat(src=10.3.0.1-10.3.0.254))" if snat else "ct(commit,zone=1)"
    lines = [
        "priority=0,actions=NORMAL",
        f"table=0,priority=10,ip,ct_state=-trk,actions=ct(table=1,zone=1{nat})",
        f"table=1,priority=10,ip,in_port=1,ct_state=+trk+new,actions={commit},output:2",
        "table=1,priority=10,ip,in_port=1,ct_state=+trk+est,actions=output:2",
        "table=1,priority=0,actions=drop",
    ]
    path = tempfile.mktemp(prefix="xb-ct-", suffix=".txt")
    open(path, "w").write("\n".join(lines) + "\n")
    return path


def nconns(appctl, env):
    """Connections in the tracker (ovs-appctl dpctl/ct-get-nconns)."""
    out = subprocess.run(appctl + ["dpctl/ct-get-nconns"], capture_output=True, text=True, env=env).stdout.strip()
    return int(out) if out.isdigit() else None


class Xvs:
    name = "xvs"
    extra = []
    # The kernel fast path (issue 16; on by default): off in the plain rows,
    # which compare the AF_XDP datapaths (the sink's XDP program would take
    # redirected frames); the "offload" rows turn it on.
    offload = ["--xdp-offload", "off"]
    poll = "busy"
    # The whole process on the poll thread's core (throughput cases: the
    # generator owns the other core). False: only the poll thread is pinned
    # (--pmd-cpus) and the control threads run anywhere, as OVS's do.
    pin_process = True

    def __init__(self, rules=None, topo=None):
        GP, SP = (topo.gp, topo.sp) if topo else (names()[2], names()[3])
        self.run = tempfile.mkdtemp(prefix="xb-xvs-")
        args = (["taskset", "-c", "1"] if self.pin_process else []) + [XVS, "switch", "--run-dir", self.run, "--no-local-port", "--poll", self.poll,
                "--pmd-cpus", "1", "--port", GP, "--port", SP, "--tx-flush-us", str(TX_FLUSH_US)] + self.offload + self.extra
        ofctl = shutil.which("ovs-ofctl")
        if rules and not ofctl:
            args += ["--flows", rules]
        self.p = subprocess.Popen(args, stderr=subprocess.DEVNULL)
        for _ in range(100):
            if os.path.exists(os.path.join(self.run, "xvs.ctl")):
                break
            time.sleep(0.05)
        self.pid = self.p.pid
        self.tid = find_thread(self.pid, "pmd")
        # The XDP mode the ports ended up in (as `xvs show` reports it).
        shown = subprocess.run([XVS, "show", "--run-dir", self.run], capture_output=True, text=True).stdout
        self.mode = ",".join(sorted(set(re.findall(r"xdp-mode (\S+?),", shown)))) or "unknown"
        if rules and ofctl:
            # The same tool and file as for OVS, over xvs's management socket.
            mgmt = f"unix:{self.run}/br0.mgmt"
            sh("ovs-ofctl", "del-flows", mgmt)
            sh("ovs-ofctl", "add-flows", mgmt, rules)

    def stats(self):
        j = json.loads(sh(XVS, "pmd-stats", "--run-dir", self.run, "--json"))["pmds"][0]
        st = {"packets": j["packets"], "cycles_per_packet": j["cycles_per_packet"], "upcalls": j["upcalls"],
              "megaflows": j["megaflows"],
              "conns": nconns(["ovs-appctl"], dict(os.environ, OVS_RUNDIR=self.run))}
        # What the kernel fast path did (its hits, the flows in it, and why
        # the latest hot flow stayed out), when it is on.
        off = json.loads(sh(XVS, "offload-show", "--run-dir", self.run, "--json")).get("offload", [])
        on = [b for b in off if b.get("enabled")]
        if on:
            st["kernel_fast_path"] = {"hit": sum(b["kernel"]["hit"] for b in on), "flows": sum(b["flows"] for b in on),
                                      "last_refusal": on[0].get("last_refusal", "")}
        return st

    def pause(self, stop):
        """SIGSTOP / SIGCONT the switch (see measure_pair)."""
        os.kill(self.pid, signal.SIGSTOP if stop else signal.SIGCONT)

    def stop(self):
        self.pause(False)
        self.p.send_signal(signal.SIGTERM)
        self.p.wait(timeout=10)
        shutil.rmtree(self.run, ignore_errors=True)


class XvsCsumSoftware(Xvs):
    """xvs completing partial checksums in software on arrival
    (`--tx-csum-offload off`), against the default, which leaves them to the
    output AF_XDP port's TX metadata (the paper's O5)."""
    extra = ["--tx-csum-offload", "off"]


class XvsOffload(Xvs):
    """xvs with the kernel fast path (issue 16): hot flows are forwarded by
    the XDP program with bpf_redirect_map. The sink's veth end runs an XDP
    program (the count-and-drop sink), so redirected frames are delivered."""
    offload = ["--xdp-offload", "on", "--xdp-offload-pps", "1000"]


class XvsOffloadCt(XvsOffload):
    """The kernel fast path for the conntrack cases: 10,000 connections
    share the offered rate (some 100-300 packets/s each), below the
    default 1000 packets/s threshold, so it is set to 50 (an operator's
    `other_config:xdp-offload-pps`)."""
    offload = ["--xdp-offload", "on", "--xdp-offload-pps", "50"]


class XvsOffloadAdaptive(XvsOffload):
    """The same with adaptive polling (xvs's default): once the flow is in
    the kernel the poll thread has nothing to do and sleeps, so the
    all-core CPU per packet is what forwarding costs, not a spinning core."""
    poll = "adaptive"


class XvsOffloadNapi(XvsOffloadAdaptive):
    """The same with `--napi-threads on`: the ports' receive work (the XDP
    program and its redirects) runs in kernel threads, which the scheduler
    puts on the core the sleeping poll thread leaves idle, instead of in
    the softirq of the generator's core."""
    extra = ["--napi-threads", "on"]


class Ovs:
    name = "ovs"

    def __init__(self, rules=None, topo=None):
        GP, SP = (topo.gp, topo.sp) if topo else (names()[2], names()[3])
        self.dir = tempfile.mkdtemp(prefix="xb-ovs-")
        d = self.dir
        env = dict(os.environ, OVS_RUNDIR=d, OVS_DBDIR=d, OVS_LOGDIR=d)
        self.env = env
        db = f"unix:{d}/db.sock"
        self.vsctl = ["ovs-vsctl", f"--db={db}"]
        sh("ovsdb-tool", "create", f"{d}/conf.db", "/usr/share/openvswitch/vswitch.ovsschema")
        sh("ovsdb-server", f"{d}/conf.db", f"--remote=punix:{d}/db.sock", f"--pidfile={d}/ovsdb-server.pid",
           "--detach", f"--log-file={d}/ovsdb.log", env=env)
        sh(*self.vsctl, "--no-wait", "init", env=env)
        sh(*self.vsctl, "--no-wait", "set", "Open_vSwitch", ".", "other_config:pmd-cpu-mask=0x2",
           f"other_config:tx-flush-interval={TX_FLUSH_US}", env=env)
        sh("ovs-vswitchd", db, f"--pidfile={d}/ovs-vswitchd.pid", "--detach", f"--log-file={d}/vswitchd.log", env=env)
        self.pid = int(open(f"{d}/ovs-vswitchd.pid").read())
        self.tid = None
        self.appctl = ["ovs-appctl", "-t", f"{d}/ovs-vswitchd.{self.pid}.ctl"]
        sh(*self.vsctl, "add-br", "br0", "--", "set", "bridge", "br0", "datapath_type=netdev", env=env)
        self.mode = "native"
        for p in (GP, SP):
            sh(*self.vsctl, "add-port", "br0", p, "--", "set", "interface", p, "type=afxdp",
               f"options:xdp-mode={self.mode}", check=False, env=env)
        time.sleep(2)
        if '"' in sh(*self.vsctl, "get", "interface", GP, "error", env=env):
            self.mode = "generic"
            for p in (GP, SP):
                sh(*self.vsctl, "set", "interface", p, "options:xdp-mode=generic-skb", env=env)
            time.sleep(2)
        if rules:
            sh("ovs-ofctl", "del-flows", "br0", env=env)
            sh("ovs-ofctl", "add-flows", "br0", rules, env=env)
        sh(*self.appctl, "dpif-netdev/pmd-stats-clear", env=env)
        self.tid = find_thread(self.pid, "pmd")

    def stats(self):
        out = sh(*self.appctl, "dpif-netdev/pmd-stats-show", env=self.env)
        def num(pat):
            m = re.search(pat, out)
            return float(m.group(1)) if m else 0.0
        return {"packets": int(num(r"packets received: (\d+)")),
                "cycles_per_packet": num(r"avg processing cycles per packet: ([\d.]+)"),
                # Both count: a failed upcall is, in dpif-netdev, almost
                # always one whose flow was not installed because the
                # datapath held the flow limit (ENOSPC); the packet was
                # still translated and forwarded by the slow path. xvs
                # counts those in its upcalls too (upcall_lost_limit).
                "upcalls": int(num(r"miss with success upcall: (\d+)")) + int(num(r"miss with failed upcall: (\d+)")),
                "megaflows": self.megaflows(), "conns": nconns(self.appctl, self.env)}

    def megaflows(self):
        m = re.search(r"flows: (\d+)", sh(*self.appctl, "dpctl/show", env=self.env, check=False))
        return int(m.group(1)) if m else None

    def pause(self, stop):
        """SIGSTOP / SIGCONT ovs-vswitchd (see measure_pair)."""
        os.kill(self.pid, signal.SIGSTOP if stop else signal.SIGCONT)

    def stop(self):
        try:
            self.pause(False)
        except OSError:
            pass
        for f in ("ovs-vswitchd", "ovsdb-server"):
            try:
                os.kill(int(open(f"{self.dir}/{f}.pid").read()), signal.SIGKILL)
            except (OSError, ValueError):
                pass
        time.sleep(0.3)
        quiet("ip", "link", "del", "br0")
        quiet("ip", "link", "del", "ovs-netdev")
        shutil.rmtree(self.dir, ignore_errors=True)


class Bridge:
    name = "linux-bridge"

    def __init__(self, rules=None, topo=None):
        sh("ip", "link", "add", "xbbr", "type", "bridge")
        for p in (GP, SP):
            sh("ip", "link", "set", p, "master", "xbbr")
        sh("ip", "link", "set", "xbbr", "up")
        self.pid = None
        self.tid = None

    def stats(self):
        return {}

    def stop(self):
        quiet("ip", "link", "del", "xbbr")


class Wire:
    name = "afxdp-wire"

    def __init__(self, rules=None, topo=None):
        self.p = subprocess.Popen(["taskset", "-c", "1", WIRE, GP, SP], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        time.sleep(1)
        self.pid = self.p.pid
        self.tid = self.pid

    def stats(self):
        return {}

    def stop(self):
        self.p.send_signal(signal.SIGINT)
        try:
            self.p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.p.kill()


def chart(plt, results, order, sizes, flowset, path):
    """Four panels: forwarded packets/s by frame size (1 flow) and by flow
    count (64 B); the switch-bound cases; where the switch core's time went
    per packet."""
    def get(lab, size, flows, key="forwarded_pps"):
        return next((r.get(key) or 0 for r in results if r["switch"] == lab and r["size"] == size
                     and r["flows"] == flows), 0)

    fig, axs = plt.subplots(2, 2, figsize=(14, 9))
    labels = [lab for lab in order if any(r["switch"] == lab and r["flows"] in flowset for r in results)]
    for ax, xs, key in ((axs[0][0], sizes, "size"), (axs[0][1], flowset, "flows")):
        w = 0.8 / max(1, len(labels))
        for i, lab in enumerate(labels):
            ys = [get(lab, x, 1) / 1e3 if key == "size" else get(lab, 64, x) / 1e3 for x in xs]
            ax.bar([j + i * w for j in range(len(xs))], ys, w, label=lab)
        ax.set_xticks([j + 0.4 - w / 2 for j in range(len(xs))],
                      [f"{x} B" if key == "size" else f"{x} flows" for x in xs])
        ax.set_ylabel("forwarded kpps (median)")
        ax.set_title("by frame size, 1 flow" if key == "size" else "by flow count, 64 B")
    if axs[0][0].get_legend_handles_labels()[0]:
        axs[0][0].legend(fontsize=7)
    ax = axs[1][0]
    bound = [r for r in results if r["flows"] not in flowset]  # as report.py: outside the matrix
    if bound:
        names = [r["switch"] for r in bound]
        ax.barh(names, [r["forwarded_pps"] / 1e3 for r in bound], color="tab:blue", label="forwarded kpps")
        ax.barh(names, [(r.get("upcalls_per_s") or 0) / 1e3 for r in bound], color="tab:orange", height=0.4,
                label="new flows (upcalls) k/s")
        ax.legend(fontsize=7)
        ax.set_title("switch-bound: 20,000 flows (1000 rules; per-flow megaflows); flow setup")
    ax = axs[1][1]
    split = [r for r in results if r.get("ns_per_packet_split") and r["size"] == 64 and r["flows"] == 1]
    if split:
        names = [r["switch"] for r in split]
        u = [r["ns_per_packet_split"]["pmd_user"] for r in split]
        si = [r["ns_per_packet_split"]["cpu1_softirq"] for r in split]
        sy = [max(0.0, r["ns_per_packet_split"]["pmd_system"] - x) for r, x in zip(split, si)]
        ax.barh(names, u, label="poll thread, user")
        ax.barh(names, sy, left=u, label="poll thread, kernel (syscalls)")
        ax.barh(names, si, left=[a + b for a, b in zip(u, sy)], label="softirq on the switch core")
        ax.set_xlabel("ns of the switch core per forwarded packet (64 B, 1 flow)")
        ax.legend(fontsize=7)
        ax.set_title("where the switch core's time goes")
    fig.suptitle("xvs vs OVS 3.1 AF_XDP vs Linux bridge on veth, one run (medians)")
    fig.tight_layout()
    fig.savefig(path, dpi=90, bbox_inches="tight")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench-out"))
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="64 and 1514 bytes, 1 and 1000 flows, NORMAL only")
    ap.add_argument("--no-ovs", action="store_true")
    ap.add_argument("--tx-flush-us", type=int, default=0,
                    help="transmit flush interval for xvs and OVS (OVS: other_config:tx-flush-interval)")
    ap.add_argument("--only", action="append", default=[],
                    help="run only cases whose switch label contains this (repeatable), e.g. --only 'flow setup'; --only churn: loss of a ping while 200k rules are added and deleted; --only vm: a VM's frames over vhost-user and over tap (needs dpdk-testpmd); --only vmct: conntrack between two VMs over vhost-user, xvs against OVS-DPDK; --only tunnel: Geneve encap and decap through br-int and br-phy, xvs against OVS; --only ovn: forwarding through OVN's pipeline (ovn-northd and ovn-controller program each switch), xvs against OVS; --only csum: partial UDP checksums (a local stack's tx offload) left to AF_XDP TX metadata (O5) or completed in software; --only defaults: the hosts' own TCP and UDP with Linux's default offloads (tx checksum, TSO, GRO on) through the Linux bridge, OVS 3.1 and xvs as they come")
    ap.add_argument("--gen", choices=["afpacket", "xdp"], default="afpacket",
                    help="the generator: afpacket (a packet socket, the default) or xdp (pktgen --xdp: an XDP "
                         "program in live-frames mode redirects into the veth, several times faster, so the "
                         "switch is the bottleneck; the Linux bridge case, which runs no XDP, is skipped)")
    a = ap.parse_args()
    global TX_FLUSH_US, GEN
    TX_FLUSH_US = a.tx_flush_us
    GEN = a.gen
    sizes = [64, 1514] if a.quick else [64, 256, 512, 1514]
    flowset = [1, 1000] if a.quick else [1, 100, 1000]
    have_ovs = shutil.which("ovs-vswitchd") is not None and not a.no_ovs
    rules = rule_file(1000)
    setup_rules = rule_file("setup", a.reps)
    switches = [("bare", None, None), ("afxdp-wire", Wire, None), ("linux-bridge", Bridge, None),
                ("xvs NORMAL", Xvs, None), ("xvs offload NORMAL", XvsOffload, None),
                ("xvs offload adaptive NORMAL", XvsOffloadAdaptive, None),
                ("xvs offload napi-threads NORMAL", XvsOffloadNapi, None)]
    if have_ovs:
        switches.append(("ovs NORMAL", Ovs, None))
    if not a.quick:
        switches.append(("xvs 1000 rules", Xvs, rules))
        if have_ovs:
            switches.append(("ovs 1000 rules", Ovs, rules))
    cases = [(s, f) for s in sizes for f in flowset]
    # Switch-bound cases: many flows through the L3/L4 rule table.
    extra = [] if a.quick else [("xvs 1000 rules", Xvs, rules, 64, 20000)] + (
        [("ovs 1000 rules", Ovs, rules, 64, 20000)] if have_ovs else [])
    # ... and through the flow-setup table, where each of the 20,000 flows
    # (1000 destinations x 20 source ports) is its own megaflow: after the
    # first run's setup, every packet misses the exact-match cache and
    # searches 20,000 megaflows (or is refused at a flow limit and upcalls).
    extra += [] if a.quick else [("xvs per-flow megaflows", Xvs, setup_rules, 64, 20000)] + (
        [("ovs per-flow megaflows", Ovs, setup_rules, 64, 20000)] if have_ovs else [])
    # Flow setup: a new (destination, source port) per packet, each an
    # upcall; run r sends flows r*1,000,000.. so no run meets the previous
    # run's megaflows.
    extra += [("xvs flow setup", Xvs, setup_rules, 64, SETUP_FLOWS)] + (
        [("ovs flow setup", Ovs, setup_rules, 64, SETUP_FLOWS)] if have_ovs else [])
    # Connection tracking (issue 13): (a) a firewall pipeline with 10,000
    # connections, (b) a new connection per packet (fresh 5-tuples every
    # run, as in flow setup), (c) (a) with source NAT.
    ct_rules, snat_rules = ct_rule_file(), ct_rule_file(snat=True)
    # With OVS, xvs and OVS run in turns (measure_pair).
    pairs = []
    for label, rf, flows in [("conntrack", ct_rules, 10000), ("conntrack setup", ct_rules, SETUP_FLOWS),
                             ("conntrack snat", snat_rules, 10000)]:
        if have_ovs:
            pairs.append(((f"xvs {label}", Xvs), (f"ovs {label}", Ovs), rf, 64, flows))
        else:
            extra.append((f"xvs {label}", Xvs, rf, 64, flows))
        # The kernel fast path (xvs's default) serves the tracked flows'
        # packets with the tracker's verdicts (`ct()` read, not run, in
        # XDP); a new connection per packet stays in userspace.
        if "setup" not in label:
            if have_ovs:
                pairs.append(((f"xvs offload {label}", XvsOffloadCt), (f"ovs {label} (offload pair)", Ovs), rf, 64, flows))
            else:
                extra.append((f"xvs offload {label}", XvsOffloadCt, rf, 64, flows))
    # Checksum offload on transmit (O5, issue 18): the generator's UDP
    # checksums are partial, as a local stack with tx offload on sends
    # them; xvs leaves them to the output port's TX metadata (default) or
    # completes them in software. OVS forwards them unfinished.
    for size in (64, 1514):
        extra += [("xvs O5 partial csum", Xvs, None, size, 1), ("xvs software partial csum", XvsCsumSoftware, None, size, 1)]
        extra += [("ovs partial csum", Ovs, None, size, 1)] if have_ovs else []
    results = []
    total = len(switches) * len(cases) + len(extra) + len(pairs)
    done = 0

    def progress(msg):
        sys.stderr.write(f"\r[{done}/{total}] {msg:<70}")
        sys.stderr.flush()

    def row_of(label, size, flows, reps, sw, st, per_run):
        off = statistics.median(x[0] for x in reps)
        fwd = statistics.median(x[1] for x in reps)
        cpu = statistics.median(x[2] for x in reps) / a.seconds
        sirq = statistics.median(x[3] for x in reps) / a.seconds
        med = lambda f: statistics.median(f(x) for x in reps)
        # Where CPU 1 (the switch core) went, per forwarded packet: the poll
        # thread's user and system time (the kernel's user/system split, as
        # in Table 4 of the paper) and the CPU's softirq time (transmit work
        # on veth runs the receiver's NAPI poll on the sending core).
        row = {"switch": label, "size": size, "flows": flows, "offered_pps": off, "forwarded_pps": fwd,
               "loss": max(0.0, 1 - fwd / off) if off else 0.0, "switch_cpu": cpu, "softirq_cpu": sirq,
               "cpu1": {k: med(lambda x, i=i: x[5][i]) / a.seconds for i, k in enumerate(("user", "system", "softirq", "idle"))},
               "runs": [list(x[:4]) for x in reps]}
        if sw and sw.tid:
            row["pmd_thread"] = {"user": med(lambda x: x[4][0]) / a.seconds, "system": med(lambda x: x[4][1]) / a.seconds}
            row["ns_per_packet_split"] = {
                "pmd_user": med(lambda x: 1e9 * x[4][0] / max(1, x[6])),
                "pmd_system": med(lambda x: 1e9 * x[4][1] / max(1, x[6])),
                "cpu1_softirq": med(lambda x: 1e9 * x[5][2] / max(1, x[6])),
            }
        # Every core's busy time per forwarded packet (generator and sink
        # included: with the kernel fast path the forwarding work moves to
        # the sending core's XDP, so the switch core alone would flatter it).
        row["all_cpus_ns_per_packet"] = {k: med(lambda x, i=i: 1e9 * x[7][i] / max(1, x[6]))
                                         for i, k in enumerate(("user", "system", "softirq"))}
        row.update(st)
        if per_run:
            row["per_run"] = per_run
            # Median over runs of the upcalls each run caused.
            row["upcalls_per_s"] = statistics.median(x["upcalls"] for x in per_run) / a.seconds
            if "conntrack" in label:
                row["new_conns_per_s"] = statistics.median(x["new_conns"] for x in per_run) / a.seconds
        if sw is not None and hasattr(sw, "mode"):
            row["xdp_mode"] = sw.mode
        return row

    class Side:
        """One switch's runs: measurements, upcall and connection counts."""

        def __init__(self, label, sw, topo):
            self.label, self.sw, self.topo = label, sw, topo
            self.reps, self.per_run, self.up0, self.c0 = [], [], 0, 0

        def once(self, r, size, flows):
            sw = self.sw
            first = r * SETUP_FLOWS if "setup" in self.label else 0
            self.reps.append(run_once(self.topo, size, flows, a.seconds, sw.pid if sw else None, first,
                                      sw.tid if sw else None, partial="partial csum" in self.label))
            if sw:
                st = sw.stats()
                if st.get("upcalls") is not None:
                    self.per_run.append({"upcalls": st["upcalls"] - self.up0, "megaflows_after": st.get("megaflows"),
                                         "new_conns": (st.get("conns") or 0) - self.c0})
                    self.up0 = st["upcalls"]
                    self.c0 = st.get("conns") or 0

    def measure(label, cls, rf, size, flows):
        if a.only and not any(o in label for o in a.only):
            return
        if GEN == "xdp" and cls is Bridge:
            # The generator's redirect needs XDP on the receiving veth end,
            # which the Linux bridge's port does not run: nothing would arrive.
            return
        topo = Topo(direct=cls is None)
        sw = cls(rf) if cls else None
        try:
            side = Side(label, sw, topo)
            for r in range(a.reps):
                progress(f"{label}: {size} B, {flows} flows, run {r + 1}/{a.reps}")
                side.once(r, size, flows)
            st = sw.stats() if sw else {}
        finally:
            if sw:
                sw.stop()
            Topo.cleanup()
        results.append(row_of(label, size, flows, side.reps, sw, st, side.per_run))

    def measure_pair(pair, rf, size, flows):
        """xvs and OVS side by side, each on its own copy of the topology
        (names with "x" and "o"), in turns: for each run one switch works
        while the other is stopped (SIGSTOP, no CPU; both poll threads are
        pinned to CPU 1), xvs first in even runs and OVS first in odd ones.
        Two runs of a pair are seconds apart; this machine's speed drifts
        1.5-3x over minutes, so each pair's ratio (`ratio_runs`, in both
        rows) is the comparison."""
        if a.only and not any(o in label for label, _ in pair for o in a.only):
            return
        sides = []
        try:
            for (label, cls), k in zip(pair, "xo"):
                topo = Topo(k=k)
                sides.append(Side(label, cls(rf, topo), topo))
            for r in range(a.reps):
                for side in (sides if r % 2 == 0 else sides[::-1]):
                    side.sw.pause(False)
                    for other in sides:
                        if other is not side:
                            other.sw.pause(True)
                    time.sleep(0.3)
                    progress(f"{side.label}: {size} B, {flows} flows, run {r + 1}/{a.reps} (in turns)")
                    side.once(r, size, flows)
            for side in sides:
                side.sw.pause(False)
            sts = [side.sw.stats() for side in sides]
        finally:
            for side in sides:
                side.sw.stop()
            Topo.cleanup()
        rows = [row_of(side.label, size, flows, side.reps, side.sw, st, side.per_run) for side, st in zip(sides, sts)]
        if len(rows) == 2:
            pairs = [x[1] / o[1] for x, o in zip(sides[0].reps, sides[1].reps) if o[1] > 0]
            for row in rows:
                row["in_turns_with"] = rows[1 - rows.index(row)]["switch"]
                row["ratio_runs"] = pairs
        results.extend(rows)

    try:
        for label, cls, rf in switches:
            for size, flows in cases:
                measure(label, cls, rf, size, flows)
                done += 1
        for label, cls, rf, size, flows in extra:
            as_is = "setup" in label or "csum" in label
            measure(label if as_is else label + " (many flows)", cls, rf, size, flows)
            done += 1
        for x, o, rf, size, flows in pairs:
            named = [(lab if "setup" in lab else lab + " (many flows)", cls) for lab, cls in (x, o)]
            measure_pair(named, rf, size, flows)
            done += 1
    finally:
        Topo.cleanup()
        os.path.exists(rules) and os.unlink(rules)
        os.path.exists(setup_rules) and os.unlink(setup_rules)
        for f in (ct_rules, snat_rules):
            os.path.exists(f) and os.unlink(f)
    sys.stderr.write("\n")
    # Rule churn: an unrelated ping while 200k rules come and go (churn.py).
    churn_results = []
    if (not a.only and not a.quick) or any("churn" in o for o in a.only):
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import churn
        # The control plane does the work here: it runs where OVS's does
        # (not on the busy poll thread's core).
        class XvsChurn(Xvs):
            pin_process = False

        for label, cls in [("xvs rule churn", XvsChurn)] + ([("ovs rule churn", Ovs)] if have_ovs else []):
            progress(f"{label}: {churn.N_RULES} rules added and deleted under a {churn.PPS} pps ping")
            Topo.cleanup()
            Topo()
            sw = cls(None)
            try:
                target, env = (f"unix:{sw.run}/br0.mgmt", None) if issubclass(cls, Xvs) else ("br0", sw.env)
                res = churn.run((G, S), sw, target, env, sh, ns)
            finally:
                sw.stop()
                Topo.cleanup()
            res["switch"] = label
            churn_results.append(res)
        sys.stderr.write("\n")
    # VM ports: vhost-user against tap (vmports.py), if testpmd is here.
    vm_results = []
    if any("vm" == o for o in a.only) and shutil.which("dpdk-testpmd"):
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import vmports
        vm_results = vmports.run(XVS, secs=a.seconds, log=progress)
        sys.stderr.write("\n")
    if any("vmct" == o for o in a.only) and shutil.which("dpdk-testpmd"):
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import vmports
        vm_results += vmports.vm_conntrack(XVS, secs=max(a.seconds, 3), log=progress)
        sys.stderr.write("\n")
    # The defaults users have (issue 46): hosts' own TCP and UDP with
    # transmit checksum offload, TSO and GRO on, through each switch as it
    # comes (defaults.py).
    defaults_results = None
    if (not a.only and not a.quick) or any("defaults" == o for o in a.only):
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import defaults
        defaults_results = defaults.run(XVS, secs=a.seconds, reps=a.reps, log=progress, with_ovs=have_ovs)
        sys.stderr.write("\n")
    # Native tunneling: Geneve encap and decap, xvs against OVS (tunnels.py).
    tunnel_results = None
    if (not a.only and not a.quick) or any("tunnel" == o for o in a.only):
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import tunnels
        tunnel_results = tunnels.run(XVS, secs=5.0, reps=a.reps, log=progress, with_ovs=have_ovs)
        sys.stderr.write("\n")
    # OVN: forwarding through the pipeline ovn-controller installs
    # (crates/xvs/examples/ovn_bench.rs), xvs against OVS, 100 and 1000 flows.
    ovn_results, ovn_tables = None, []
    if (not a.only and not a.quick) or any("ovn" == o for o in a.only):
        ovn_results = []
        # The AF_XDP datapaths (xvs's kernel fast path off) at 100 and 1000
        # flows; then xvs as it comes (fast path on) with the kernel-side
        # generator, which offers enough to make the switches the limit.
        for flows, extra in ((100, []), (1000, []), (100, ["--xvs-offload", "--gen-xdp"])):
            progress(f"OVN pipeline, {flows} flows{' ' + ' '.join(extra) if extra else ''}: xvs and OVS in turns")
            out_json = tempfile.mktemp(prefix="xb-ovn-", suffix=".json")
            cmd = [OVN_BENCH, "--seconds", str(a.seconds), "--reps", str(a.reps), "--flows", str(flows),
                   "--json", out_json] + extra + ([] if have_ovs else ["--no-ovs"])
            p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, XVS_BIN=XVS))
            if p.returncode != 0:
                sys.stderr.write(f"\novn_bench failed:\n{p.stderr[-3000:]}\n")
                continue
            ovn_tables.append(p.stdout.strip())
            ovn_results += json.load(open(out_json))
            os.unlink(out_json)
        sys.stderr.write("\n")
    os.makedirs(a.out, exist_ok=True)
    meta = {"cpu": open("/proc/cpuinfo").read().split("model name")[1].split("\n")[0].split(":", 1)[1].strip(),
            "ncpu": os.cpu_count(), "kernel": os.uname().release, "seconds": a.seconds, "reps": a.reps,
            "generator": "xvs util pktgen (AF_PACKET) on CPU 0", "sink": "XDP count+drop (native) in the sink ns",
            "switch_cpu": "CPU 1 (xvs and the AF_XDP wire pinned; OVS pmd-cpu-mask=0x2)"}
    json.dump({"meta": meta, "results": results, "churn": churn_results, "vm": vm_results,
               "tunnel": tunnel_results, "ovn": ovn_results, "defaults": defaults_results}, open(os.path.join(a.out, "results.json"), "w"),
              indent=1)
    if results:
        hdr = f"{'switch':<26}{'size':>6}{'flows':>7}{'offered':>11}{'forwarded':>11}{'loss':>7}{'cpu':>7}{'sirq':>7}{'cyc/pkt':>9}{'upc/s':>9}{'mflows':>9}  ns/pkt usr/sys/sirq  all-cpu ns/pkt"
        print(hdr)

        def split(r):
            sp = r.get("ns_per_packet_split")
            if not sp:
                return "-"
            return f"{sp['pmd_user']:.0f}/{sp['pmd_system']:.0f}/{sp['cpu1_softirq']:.0f}"

        for r in results:
            cyc = r.get("cycles_per_packet")
            ups = r.get("upcalls_per_s")
            print(f"{r['switch']:<26}{r['size']:>6}{r['flows']:>7}{r['offered_pps']:>11.0f}{r['forwarded_pps']:>11.0f}"
                  f"{100 * r['loss']:>6.1f}%{100 * r['switch_cpu']:>6.0f}%{100 * r['softirq_cpu']:>6.0f}%"
                  f"{(f'{cyc:.0f}' if cyc else '-'):>9}{(f'{ups:.0f}' if ups else '-'):>9}"
                  f"{(str(r['megaflows']) if r.get('megaflows') is not None else '-'):>9}  {split(r):<19}"
                  f"{sum(r['all_cpus_ns_per_packet'].values()):.0f}")
    turns = [r for r in results if r.get("ratio_runs") and r["switch"].startswith("xvs")]
    if turns:
        print("\nin turns (one switch stopped while the other runs; the ratio is the median of the run pairs):")
        for r in turns:
            rr = r["ratio_runs"]
            print(f"  {r['switch']:<34} xvs/OVS {statistics.median(rr):.2f}   pairs: {' '.join(f'{x:.2f}' for x in rr)}")
    if churn_results:
        print(f"\n{'rule churn':<18}{'rules':>8}{'ping sent':>11}{'lost':>6}{'rtt max':>9}{'in add':>9}{'in del':>9}"
              f"{'add-flows':>11}{'del-flows':>11}"
              f"{'RSS before':>12}{'after add':>11}{'after del':>11}{'B/rule':>8}")
        for r in churn_results:
            print(f"{r['switch']:<18}{r['rules']:>8}{r['sent']:>11}{r['lost']:>6}{(r['rtt_max_ms'] or 0):>7.1f}ms"
                  f"{(r.get('rtt_max_add_ms') or 0):>7.1f}ms{(r.get('rtt_max_del_ms') or 0):>7.1f}ms"
                  f"{r['add_flows_s']:>10.2f}s{r['del_flows_s']:>10.2f}s{r['rss_mb_before']:>10.0f}MB"
                  f"{r['rss_mb_after_add']:>9.0f}MB{r['rss_mb_after_del']:>9.0f}MB{r['bytes_per_rule']:>8}")
    if vm_results:
        vmports.report(vm_results)
    if defaults_results:
        defaults.report(defaults_results)
    if tunnel_results:
        tunnels.report(tunnel_results)
    for t in ovn_tables:
        print(t)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        if results:
            chart(plt, results, [s[0] for s in switches], sizes, flowset, os.path.join(a.out, "chart.png"))
            print(f"chart: {os.path.join(a.out, 'chart.png')}")
    except ImportError:
        print("chart skipped: python3-matplotlib not installed (bench.sh installs it)")
    print(f"results: {os.path.join(a.out, 'results.json')}")


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    try:
        main()
    except KeyboardInterrupt:
        Topo.cleanup()
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import tunnels
        tunnels.cleanup()
        sys.exit(130)
