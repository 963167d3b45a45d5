"""Rule churn: does adding and deleting many rules disturb unrelated traffic?

    gen ns --veth--> switch (NORMAL + N unrelated rules) --veth--> sink ns

A ping runs from the generator to the sink at PPS packets per second for the
whole case, while `ovs-ofctl add-flows` installs N rules (one flow_mod each,
no bundle) that match TCP to addresses nobody uses, and `ovs-ofctl del-flows`
then deletes them (by cookie, so the NORMAL rule stays). Printed: ping packets
lost, add-flows and del-flows wall time, and the switch's resident memory
before, after the add and after the delete. Run through run.py
(`./bench.sh --only churn`) or alone as root: python3 bench/churn.py.
"""
import os, re, subprocess, sys, tempfile, threading, time

N_RULES = 200_000
PPS = 200


def rss_mb(pid):
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def rules_file(n):
    path = tempfile.mktemp(prefix="xb-churn-", suffix=".txt")
    with open(path, "w") as f:
        for i in range(n):
            f.write(f"cookie=0x77,priority=5,tcp,nw_dst=10.{200 + i // 65536}.{i // 256 % 256}.{i % 256},"
                    f"tp_dst=80,actions=drop\n")
    return path


def run(topo, sw, target, env, sh, ns, n_rules=N_RULES, pps=PPS, log=print):
    """One churn case against a running switch `sw` (with .pid) whose
    OpenFlow target for ovs-ofctl is `target`. Returns a dict of figures."""
    G, S = topo
    ns(G, "ip", "addr", "add", "10.99.0.1/24", "dev", "eth0")
    ns(S, "ip", "addr", "add", "10.99.0.2/24", "dev", "eth0")
    # ARP and the first megaflows before counting.
    subprocess.run(["ip", "netns", "exec", G, "ping", "-c", "3", "-i", "0.2", "-W", "1", "10.99.0.2"],
                   capture_output=True)
    path = rules_file(n_rules)
    rss0 = rss_mb(sw.pid)
    # Into a file, not a pipe: a pipe nobody drains would stall ping.
    log = tempfile.TemporaryFile(mode="w+")
    # -D: each reply carries its arrival time, so the worst RTT can be
    # told apart for the add and the delete.
    ping = subprocess.Popen(["ip", "netns", "exec", G, "ping", "-D", "-n", "-i", f"{1 / pps:.4f}", "-W", "2",
                             "10.99.0.2"], stdout=log, stderr=subprocess.STDOUT, text=True)
    try:
        time.sleep(1)
        t = time.time()
        sh("ovs-ofctl", "add-flows", target, path, env=env)
        add_s = time.time() - t
        add_win = (t, t + add_s)
        rss_add = rss_mb(sw.pid)
        n_dump = sh("ovs-ofctl", "dump-aggregate", target, "cookie=0x77/-1", env=env)
        time.sleep(1)
        t = time.time()
        sh("ovs-ofctl", "del-flows", target, "cookie=0x77/-1", env=env)
        del_s = time.time() - t
        # Replies up to half a second after del-flows returns still count
        # for it (the switch may finish behind the reply to ovs-ofctl).
        del_win = (t, t + del_s + 0.5)
        time.sleep(1)
        rss_del = rss_mb(sw.pid)
    finally:
        ping.send_signal(2)
        ping.wait(timeout=10)
        log.seek(0)
        out = log.read()
        os.unlink(path)
    m = re.search(r"(\d+) packets transmitted, (\d+) received", out)
    sent = int(m.group(1)) if m else 0
    # Lost: requests without a reply, except those sent in the last 100 ms
    # before ping was stopped (their replies may still have been on the way).
    got = set(int(x) for x in re.findall(r"icmp_seq=(\d+)", out))
    judged = max(0, sent - (pps // 10 + 1))
    lost = sum(1 for q in range(1, judged + 1) if q not in got)
    rtt = re.search(r"= [\d.]+/[\d.]+/([\d.]+)/", out)
    replies = [(float(a), float(b)) for a, b in re.findall(r"\[(\d+\.\d+)\].*?time=([\d.]+) ms", out)]

    def worst(win):
        v = [r for at, r in replies if win[0] <= at <= win[1] + 2.0 and at - r / 1000 <= win[1]]
        return max(v) if v else None
    flows = re.search(r"flow_count=(\d+)", n_dump)
    return {"rules": n_rules, "pps": pps, "sent": sent, "lost": lost,
            "rtt_max_ms": float(rtt.group(1)) if rtt else None,
            "rtt_max_add_ms": worst(add_win), "rtt_max_del_ms": worst(del_win),
            "rules_seen": int(flows.group(1)) if flows else None,
            "add_flows_s": round(add_s, 2), "del_flows_s": round(del_s, 2),
            "rss_mb_before": round(rss0, 1), "rss_mb_after_add": round(rss_add, 1),
            "rss_mb_after_del": round(rss_del, 1),
            "bytes_per_rule": round((rss_add - rss0) * 1024 * 1024 / n_rules)}


def main():
    """Standalone: xvs (from $XVS_BIN or target/release) and OVS."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import run as r
    if os.environ.get("XVS_BIN"):
        r.XVS = os.environ["XVS_BIN"]
    which = sys.argv[1:] or ["xvs", "ovs"]
    for name in which:
        r.Topo.cleanup()
        r.Topo()
        cls = r.Xvs if name == "xvs" else r.Ovs
        sw = cls(None)
        try:
            target, env = (f"unix:{sw.run}/br0.mgmt", None) if name == "xvs" else ("br0", sw.env)
            res = run((r.G, r.S), sw, target, env, r.sh, r.ns)
        finally:
            sw.stop()
            r.Topo.cleanup()
        print(name, res, flush=True)


if __name__ == "__main__":
    main()
