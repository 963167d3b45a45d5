"""VM ports: a VM's frames to a host namespace, over vhost-user and over tap.

    testpmd (the VM) --vhost-user | tap--> switch (NORMAL) --veth--> sink ns

DPDK's testpmd (--no-huge) plays the VM. For the vhost-user path its
net_virtio_user vdev owns the socket in server mode, as QEMU does, and xvs
connects with a `dpdkvhostuserclient` port. For the tap path its net_tap
vdev makes a kernel tap device, as QEMU's tap backend does, and the switch
reads it through the kernel: xvs with an AF_PACKET port, Open vSwitch 3.1
(userspace datapath) with a `system` port, which is what OVS's AF_XDP
datapath offers VMs (it has no vhost-user without DPDK). The sink's veth
end is an AF_XDP port in every case. testpmd `txonly` sends 64-byte frames
for SECS seconds; the sink's rx_packets counter says what arrived.

Printed: per path, what the VM sent per second and what was delivered, and
the vhost-user / tap ratio (the issue's goal: at least 5x the tap path).
Run through run.py (`./bench.sh --only vm`) or alone as root:
python3 bench/vmports.py [--xvs target/release/xvs] [--secs 3].
"""
import argparse, os, re, shutil, signal, subprocess, tempfile, time

NS, SP = "xbvm-sink", "xbvm-s"
TAP = "xbvmtap0"


def sh(*a, check=True, **kw):
    return subprocess.run(a, check=check, capture_output=True, text=True, **kw).stdout


def quiet(*a):
    subprocess.run(a, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def cleanup():
    quiet("ip", "netns", "del", NS)
    quiet("ip", "link", "del", SP)
    quiet("ip", "link", "del", TAP)


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
    def __init__(self, vdev, prefix):
        self.out = tempfile.NamedTemporaryFile(prefix="xb-testpmd-", delete=False)
        self.prefix = prefix
        self.p = subprocess.Popen(
            ["stdbuf", "-o0", "dpdk-testpmd", "-l", "0,1", "--no-huge", "-m", "256", "--no-pci",
             "--file-prefix", prefix, "--vdev", vdev, "--", "-i", "--total-num-mbufs=8192"],
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

    def stop(self):
        try:
            self.cmd("quit")
            self.p.wait(timeout=5)
        except Exception:
            self.p.kill()
            self.p.wait()
        os.unlink(self.out.name)
        shutil.rmtree(f"/var/run/dpdk/{self.prefix}", ignore_errors=True)


def xvs_switch(xvs, vm_port):
    run = tempfile.mkdtemp(prefix="xb-vm-xvs-")
    p = subprocess.Popen([xvs, "switch", "--run-dir", run, "--bridge", "xbvmbr", "--no-local-port",
                          "--port", vm_port, "--port", f"{SP},type=afxdp"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop():
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=10)
        shutil.rmtree(run, ignore_errors=True)
    return stop


def ovs_switch(vm_port):
    d = tempfile.mkdtemp(prefix="xb-vm-ovs-")
    env = dict(os.environ, OVS_RUNDIR=d, OVS_DBDIR=d, OVS_LOGDIR=d)
    vsctl = ["ovs-vsctl", f"--db=unix:{d}/db.sock"]
    sh("ovsdb-tool", "create", f"{d}/conf.db", "/usr/share/openvswitch/vswitch.ovsschema")
    sh("ovsdb-server", f"{d}/conf.db", f"--remote=punix:{d}/db.sock", f"--pidfile={d}/ovsdb-server.pid",
       "--detach", f"--log-file={d}/ovsdb.log", env=env)
    sh(*vsctl, "--no-wait", "init", env=env)
    sh("ovs-vswitchd", f"unix:{d}/db.sock", f"--pidfile={d}/ovs-vswitchd.pid", "--detach",
       f"--log-file={d}/vswitchd.log", env=env)
    sh(*vsctl, "add-br", "xbvmbr", "--", "set", "bridge", "xbvmbr", "datapath_type=netdev", env=env)
    sh(*vsctl, "add-port", "xbvmbr", vm_port, env=env)
    sh(*vsctl, "add-port", "xbvmbr", SP, "--", "set", "interface", SP, "type=afxdp", env=env)

    def stop():
        for f in ("ovs-vswitchd", "ovsdb-server"):
            try:
                os.kill(int(open(f"{d}/{f}.pid").read()), signal.SIGKILL)
            except (OSError, ValueError):
                pass
        time.sleep(0.3)
        quiet("ip", "link", "del", "xbvmbr")
        quiet("ip", "link", "del", "ovs-netdev")
        shutil.rmtree(d, ignore_errors=True)
    return stop


def case(label, secs, vdev, start_switch, switch_first):
    """One path: returns (sent pps, delivered pps)."""
    topo()
    pmd, stop = None, None
    try:
        if switch_first:
            stop = start_switch()
            pmd = Testpmd(vdev, "xbvm")
        else:
            pmd = Testpmd(vdev, "xbvm")
            if not pmd.wait_prompt():
                raise RuntimeError(f"{label}: testpmd did not start:\n{pmd.text()[-2000:]}")
            stop = start_switch()
        if not pmd.wait_prompt():
            raise RuntimeError(f"{label}: testpmd did not start:\n{pmd.text()[-2000:]}")
        time.sleep(2)
        r0, t0 = sink_rx(), pmd.tx_packets()
        pmd.cmd("set fwd txonly")
        pmd.cmd("start")
        time.sleep(secs)
        pmd.cmd("stop")
        time.sleep(0.5)
        sent, got = pmd.tx_packets() - t0, sink_rx() - r0
        return sent / secs, got / secs
    finally:
        if pmd:
            pmd.stop()
        if stop:
            stop()
        cleanup()


def run(xvs, secs=3, log=print):
    vhost_sock = "/tmp/xb-vm-vhost.sock"
    quiet("rm", "-f", vhost_sock)
    tap_vdev = f"net_tap0,iface={TAP}"
    cases = [
        ("xvs vhost-user", f"net_virtio_user0,path={vhost_sock},server=1,queues=1",
         lambda: xvs_switch(xvs, f"vhu0,type=dpdkvhostuserclient,vhost-server-path={vhost_sock}"), True),
        ("xvs tap (AF_PACKET)", tap_vdev, lambda: xvs_switch(xvs, f"{TAP},type=afpacket"), False),
    ]
    if shutil.which("ovs-vswitchd"):
        cases.append(("ovs tap (system port)", tap_vdev, lambda: ovs_switch(TAP), False))
    out = []
    for label, vdev, start, first in cases:
        log(f"{label}: testpmd txonly for {secs} s")
        sent, got = case(label, secs, vdev, start, first)
        out.append({"path": label, "sent_pps": sent, "delivered_pps": got})
    return out


def report(rows):
    print(f"\n{'VM -> host (64 B)':<24}{'VM sent/s':>12}{'delivered/s':>13}")
    for r in rows:
        print(f"{r['path']:<24}{r['sent_pps']:>12.0f}{r['delivered_pps']:>13.0f}")
    by = {r["path"]: r["delivered_pps"] for r in rows}
    v = by.get("xvs vhost-user", 0)
    for tap in ("xvs tap (AF_PACKET)", "ovs tap (system port)"):
        if by.get(tap):
            print(f"vhost-user / {tap}: {v / by[tap]:.1f}x (goal >= 5x)")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--xvs", default=os.environ.get("XVS", "target/release/xvs"))
    ap.add_argument("--secs", type=float, default=3)
    a = ap.parse_args()
    report(run(a.xvs, a.secs))
