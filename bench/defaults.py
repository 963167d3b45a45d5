"""Forwarding with the defaults users have (issue 46): two namespace hosts
whose stacks keep Linux's defaults (transmit checksum offload, TSO and GSO
on) with GRO on at both ends, one switch between them, traffic from the
hosts' own sockets. Same topology, same run, for:

* linux-bridge: the kernel's bridge;
* ovs: Open vSwitch 3.1, AF_XDP ports (native mode), NORMAL;
* xvs: `xvs switch` as it comes (kernel fast path on, adaptive polling);
* xvs no fast path: the same with `--xdp-offload off` (every frame through
  the AF_XDP sockets and the userspace datapath).

    gen ns (10.46.9.1) --veth--> [ switch ] <--veth-- sink ns (10.46.9.2)

Measured, `reps` times each, medians printed:
* TCP: one stream of `xvs util tcp-send` for about `secs` seconds, bytes the
  receiver got per second (Gbit/s);
* UDP: `xvs util udp-send` of 1400-byte datagrams as fast as one socket
  sends them; datagrams the receiving socket got per second, and the share
  of those sent;
* the receiver's checksum errors over both (`nstat`: TcpInCsumErrors,
  UdpInCsumErrors): any non-zero figure means the switch corrupted frames;
* for xvs, the fast path's kernel hits and the partial checksums it
  finished (`xvs offload-show --json`).

OVS 3.1's AF_XDP ports forward partial checksums unfinished, and OVS's
documentation tells its users to turn transmit offload off in the senders;
its row shows what users with the defaults get, and a second row, "ovs
(tx off)", what OVS's documented set-up gets.
"""

import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import tempfile
import time

G, S, GP, SP = "xbd-gen", "xbd-sink", "xbdg", "xbds"
GIP, SIP = "10.46.9.1", "10.46.9.2"
CSUM_KEYS = ("TcpInCsumErrors", "UdpInCsumErrors")


def sh(*a, check=True, env=None):
    return subprocess.run(a, check=check, capture_output=True, text=True, env=env).stdout


def quiet(*a):
    subprocess.run(a, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def ns(n, *a, check=True):
    return sh("ip", "netns", "exec", n, *a, check=check)


def cleanup():
    for n in (G, S):
        quiet("ip", "netns", "del", n)
    for d in (GP, SP, "xbdbr"):
        quiet("ip", "link", "del", d)


def topo(tx_off=False):
    cleanup()
    for n, p, ip in ((G, GP, GIP), (S, SP, SIP)):
        sh("ip", "netns", "add", n)
        sh("ip", "link", "add", p, "type", "veth", "peer", "name", "eth0", "netns", n)
        quiet("sysctl", "-qw", f"net.ipv6.conf.{p}.disable_ipv6=1")
        sh("ip", "link", "set", p, "up")
        ns(n, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")
        ns(n, "ip", "addr", "add", f"{ip}/24", "dev", "eth0")
        ns(n, "ip", "link", "set", "eth0", "up")
        ns(n, "ip", "link", "set", "lo", "up")
        # GRO on at the hosts: what lets redirected frames into a veth.
        ns(n, "ethtool", "-K", "eth0", "gro", "on")
        if tx_off:
            # Only for the "ovs (tx off)" row: OVS's documented set-up.
            ns(n, "ethtool", "-K", "eth0", "tx", "off")


def nstat(n):
    out = ns(n, "nstat", "-az", check=False)
    return {k: int(v) for k, v in re.findall(r"^(\w+)\s+(\d+)", out, re.M)}


class Xvs:
    def __init__(self, xvs, extra):
        self.xvs = xvs
        self.run = tempfile.mkdtemp(prefix="xbd-xvs-")
        self.p = subprocess.Popen([xvs, "switch", "--run-dir", self.run, "--bridge", "xbdbr", "--no-local-port",
                                   "--port", GP, "--port", SP, *extra],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(200):
            if os.path.exists(os.path.join(self.run, "xvs.ctl")):
                break
            time.sleep(0.05)
        time.sleep(0.5)

    def stats(self):
        off = json.loads(sh(self.xvs, "offload-show", "--run-dir", self.run, "--json")).get("offload", [])
        on = [b for b in off if b.get("enabled")]
        if not on:
            return {"kernel_hits": 0, "csum_finished": 0}
        return {"kernel_hits": sum(b["kernel"]["hit"] for b in on),
                "csum_finished": sum(b["kernel"].get("csum_finished", 0) for b in on)}

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        try:
            self.p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.p.kill()
        shutil.rmtree(self.run, ignore_errors=True)


class Ovs:
    def __init__(self):
        self.dir = d = tempfile.mkdtemp(prefix="xbd-ovs-")
        self.env = dict(os.environ, OVS_RUNDIR=d, OVS_DBDIR=d, OVS_LOGDIR=d)
        vsctl = ["ovs-vsctl", f"--db=unix:{d}/db.sock"]
        sh("ovsdb-tool", "create", f"{d}/conf.db", "/usr/share/openvswitch/vswitch.ovsschema")
        sh("ovsdb-server", f"{d}/conf.db", f"--remote=punix:{d}/db.sock", f"--pidfile={d}/ovsdb-server.pid",
           "--detach", f"--log-file={d}/ovsdb.log", env=self.env)
        sh(*vsctl, "--no-wait", "init", env=self.env)
        sh("ovs-vswitchd", f"unix:{d}/db.sock", f"--pidfile={d}/ovs-vswitchd.pid", "--detach",
           f"--log-file={d}/vswitchd.log", env=self.env)
        sh(*vsctl, "add-br", "xbdbr", "--", "set", "bridge", "xbdbr", "datapath_type=netdev", env=self.env)
        for p in (GP, SP):
            sh(*vsctl, "add-port", "xbdbr", p, "--", "set", "interface", p, "type=afxdp",
               "options:xdp-mode=native", env=self.env)
        time.sleep(2)

    def stats(self):
        return {}

    def stop(self):
        for f in ("ovs-vswitchd", "ovsdb-server"):
            try:
                os.kill(int(open(f"{self.dir}/{f}.pid").read()), signal.SIGKILL)
            except (OSError, ValueError):
                pass
        time.sleep(0.3)
        quiet("ip", "link", "del", "xbdbr")
        quiet("ip", "link", "del", "ovs-netdev")
        shutil.rmtree(self.dir, ignore_errors=True)


class Bridge:
    def __init__(self):
        sh("ip", "link", "add", "xbdbr", "type", "bridge")
        for p in (GP, SP):
            sh("ip", "link", "set", p, "master", "xbdbr")
        sh("ip", "link", "set", "xbdbr", "up")

    def stats(self):
        return {}

    def stop(self):
        quiet("ip", "link", "del", "xbdbr")


def tcp_once(xvs, secs):
    """Gbit/s of one TCP stream gen -> sink, sent for about `secs` s."""
    port = "5046"
    rx = subprocess.Popen(["ip", "netns", "exec", S, xvs, "util", "tcp-recv", "--port", port],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.3)
    nbytes = int(secs * 1.5e9 / 8)
    t0 = time.time()
    tx = subprocess.run(["ip", "netns", "exec", G, xvs, "util", "tcp-send", "--dst", f"{SIP}:{port}",
                         "--bytes", str(nbytes), "--timeout-ms", str(int(secs * 4000))],
                        capture_output=True, text=True)
    dt = time.time() - t0
    try:
        out = rx.communicate(timeout=secs * 4 + 5)[0]
    except subprocess.TimeoutExpired:
        rx.kill()
        out = rx.communicate()[0]
    m = re.search(r"received (\d+)", out)
    got = int(m.group(1)) if m else 0
    return 8 * got / dt / 1e9 if tx.returncode == 0 else 8 * got / (secs * 4) / 1e9


def udp_once(xvs, secs):
    """(datagrams/s received, share of those sent) of one socket's 1400-byte
    datagrams, sent as fast as it can for about `secs` s."""
    port = "5047"
    ready = tempfile.mktemp(prefix="xbd-ready-")
    rx = subprocess.Popen(["ip", "netns", "exec", S, xvs, "util", "udp-recv", "--port", port, "--idle-ms", "1000",
                           "--max-ms", str(int(secs * 3000)), "--ready-file", ready],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    t0 = time.time()
    while not os.path.exists(ready) and time.time() - t0 < 5:
        time.sleep(0.02)
    count = int(secs * 150_000)
    t0 = time.time()
    out = sh("ip", "netns", "exec", G, xvs, "util", "udp-send", "--dst", f"{SIP}:{port}", "--count", str(count),
             "--size", "1400")
    dt = time.time() - t0
    m = re.search(r"sent (\d+)", out)
    sent = int(m.group(1)) if m else count
    got_out = rx.communicate(timeout=secs * 3 + 10)[0]
    os.path.exists(ready) and os.unlink(ready)
    m = re.search(r"received (\d+)", got_out)
    got = int(m.group(1)) if m else 0
    return got / dt, got / max(1, sent)


def run(xvs, secs=4.0, reps=3, log=lambda m: None, with_ovs=True):
    cases = [("linux-bridge", Bridge, False), ("xvs", lambda: Xvs(xvs, []), False),
             ("xvs no fast path", lambda: Xvs(xvs, ["--xdp-offload", "off"]), False)]
    if with_ovs:
        cases += [("ovs", Ovs, False), ("ovs (tx off)", Ovs, True)]
    results = []
    try:
        for label, make, tx_off in cases:
            topo(tx_off)
            sw = make()
            try:
                # Neighbours and MAC learning before measuring (a switch
                # may take a few seconds to bring its ports up).
                t0 = time.time()
                while subprocess.run(["ip", "netns", "exec", G, "ping", "-c", "1", "-W", "1", SIP],
                                     capture_output=True).returncode != 0 and time.time() - t0 < 15:
                    time.sleep(0.2)
                c0 = nstat(S)
                tcp, udp, share = [], [], []
                for r in range(reps):
                    log(f"defaults: {label}, run {r + 1}/{reps}")
                    tcp.append(tcp_once(xvs, secs))
                    u, s = udp_once(xvs, secs)
                    udp.append(u)
                    share.append(s)
                c1 = nstat(S)
                row = {"switch": label, "sender_tx_csum": "off" if tx_off else "on", "tcp_gbps": statistics.median(tcp),
                       "tcp_runs": tcp, "udp_pps": statistics.median(udp), "udp_runs": udp,
                       "udp_delivered": statistics.median(share),
                       "csum_errors": sum(c1.get(k, 0) - c0.get(k, 0) for k in CSUM_KEYS)}
                row.update(sw.stats())
                results.append(row)
            finally:
                sw.stop()
                cleanup()
    finally:
        cleanup()
    return results


def report(results):
    print("\nWith the defaults users have (hosts: tx checksum offload, TSO, GSO on; GRO on), "
          "traffic from the hosts' sockets:")
    print(f"{'switch':<20} {'sender tx-csum':>14} {'TCP Gbit/s':>11} {'UDP 1400 B/s':>13} {'UDP delivered':>14} "
          f"{'csum errors':>12} {'kernel hits':>12} {'csums finished':>15}")
    for r in results:
        print(f"{r['switch']:<20} {r['sender_tx_csum']:>14} {r['tcp_gbps']:>11.2f} {r['udp_pps']:>13,.0f} "
              f"{100 * r['udp_delivered']:>13.1f}% {r['csum_errors']:>12,} {r.get('kernel_hits', '-'):>12} "
              f"{r.get('csum_finished', '-'):>15}")


if __name__ == "__main__":
    import argparse
    import sys
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--xvs", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "target",
                                                  "release", "xvs"))
    ap.add_argument("--secs", type=float, default=4.0)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out")
    a = ap.parse_args()
    res = run(a.xvs, a.secs, a.reps, log=lambda m: sys.stderr.write(f"\r{m:<60}"),
              with_ovs=shutil.which("ovs-vswitchd") is not None)
    sys.stderr.write("\n")
    report(res)
    if a.out:
        json.dump(res, open(a.out, "w"), indent=1)
