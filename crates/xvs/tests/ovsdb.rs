//! xvs in place of ovs-vswitchd: the real ovsdb-server, ovs-vsctl and
//! ovs-appctl configure and inspect it.
//!
//! Plan (each test): its own ovsdb-server (a fresh database from the
//! installed Open_vSwitch schema, in a private directory), its own hosts
//! (namespaces + veth), and `xvs switch --db unix:...`. Configure with
//! ovs-vsctl exactly as for Open vSwitch, send traffic between the hosts,
//! and check what the hosts receive and what the database says. Servers,
//! daemons and hosts are removed by Drop guards, also on failure. Root.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use xvs::netns::Host;

struct Env {
    dir: String,
    server: Child,
    xvs: Option<Child>,
}

impl Env {
    fn new(t: &str) -> Env {
        let dir = format!("/tmp/xvs-db-{t}-{}", std::process::id());
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
        let e = Env { dir, server, xvs: None };
        let t0 = Instant::now();
        while !std::path::Path::new(&format!("{}/db.sock", e.dir)).exists() && t0.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(20));
        }
        e.vsctl_nowait(&["init"]);
        e
    }

    fn remote(&self) -> String {
        format!("unix:{}/db.sock", self.dir)
    }

    fn start_xvs(&mut self) {
        let child = Command::new(env!("CARGO_BIN_EXE_xvs"))
            .args(["switch", "--db", &self.remote(), "--run-dir", &format!("{}/run", self.dir)])
            .stdout(Stdio::null())
            .stderr(if std::env::var_os("XVS_TEST_LOG").is_some() { Stdio::inherit() } else { Stdio::null() })
            .spawn()
            .unwrap();
        self.xvs = Some(child);
        let pid = format!("{}/run/ovs-vswitchd.pid", self.dir);
        let t0 = Instant::now();
        while !std::path::Path::new(&pid).exists() && t0.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// ovs-vsctl that waits for the switch to apply the change (cur_cfg).
    fn vsctl(&self, args: &[&str]) -> String {
        let o = Command::new("ovs-vsctl")
            .arg(format!("--db={}", self.remote()))
            .arg("--timeout=20")
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "ovs-vsctl {args:?}: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    }

    fn vsctl_nowait(&self, args: &[&str]) -> String {
        let mut a = vec!["--no-wait"];
        a.extend_from_slice(args);
        self.vsctl(&a)
    }

    fn appctl(&self, args: &[&str]) -> String {
        let o = Command::new("ovs-appctl").env("OVS_RUNDIR", format!("{}/run", self.dir)).args(args).output().unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        // Bridges' local ports outlive the switch (as with ovs-vswitchd):
        // remove the ones this test made.
        let o =
            Command::new("ovs-vsctl").arg(format!("--db={}", self.remote())).args(["--timeout=5", "list-br"]).output();
        if let Ok(o) = o {
            for b in String::from_utf8_lossy(&o.stdout).split_whitespace() {
                let _ = Command::new("ip").args(["link", "del", b]).stderr(Stdio::null()).status();
            }
        }
        if let Some(mut x) = self.xvs.take() {
            let _ = x.kill();
            let _ = x.wait();
        }
        let _ = self.server.kill();
        let _ = self.server.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn hosts(t: &str, n: usize) -> Vec<Host> {
    std::env::set_var("XVS_BIN", env!("CARGO_BIN_EXE_xvs"));
    let id = std::process::id() % 1000;
    (1..=n)
        .map(|i| {
            Host::create(&format!("xvsd{t}{id}h{i}"), &format!("xd{t}{id}h{i}"), &format!("10.79.0.{i}/24"), 1).unwrap()
        })
        .collect()
}

fn eventually(secs: u64, cond: impl Fn() -> bool) -> bool {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(secs) {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    cond()
}

#[test]
fn vsctl_configures_bridges_ports_errors_and_restart() {
    let hs = hosts("a", 3);
    let mut env = Env::new("a");
    env.start_xvs();
    let br = format!("brdb{}", std::process::id() % 1000);
    // ovs-vsctl waits until the switch has applied each change.
    let t0 = Instant::now();
    env.vsctl(&["add-br", &br, "--", "set", "bridge", &br, "datapath_type=netdev"]);
    for h in &hs {
        env.vsctl(&["add-port", &br, &h.port, "--", "set", "interface", &h.port, "type=afxdp"]);
    }
    assert!(t0.elapsed() < Duration::from_secs(15), "ovs-vsctl returned promptly");
    assert_eq!(hs[0].ping(&hs[1].ip, 3).unwrap(), 3, "NORMAL forwarding between database-configured ports");
    let ofport: i64 = env.vsctl(&["get", "interface", &hs[0].port, "ofport"]).parse().unwrap();
    assert!(ofport >= 1, "ofport written back");
    let mac = env.vsctl(&["get", "interface", &hs[0].port, "mac_in_use"]);
    assert!(mac.contains(':'), "mac_in_use: {mac}");
    assert!(eventually(5, || env
        .vsctl(&["get", "interface", &hs[0].port, "statistics:rx_packets"])
        .trim_matches('"')
        .parse::<u64>()
        .unwrap_or(0)
        > 0));
    assert_eq!(env.vsctl(&["get", "interface", &hs[0].port, "link_state"]), "up");
    // The AF_XDP sockets' counters, per queue, with OVS's names.
    for k in ["xsk_queue_0_rx_dropped", "xsk_queue_0_rx_invalid_descs", "xsk_queue_0_tx_invalid_descs"] {
        let v = env.vsctl(&["get", "interface", &hs[0].port, &format!("statistics:{k}")]);
        assert!(v.trim_matches('"').parse::<u64>().is_ok(), "{k}: {v}");
    }
    let dpid = env.vsctl(&["get", "bridge", &br, "datapath_id"]);
    assert_eq!(dpid.trim_matches('"').len(), 16, "datapath_id: {dpid}");

    // A bogus option: explained in the interface's error column, the other ports keep forwarding.
    env.vsctl(&["set", "interface", &hs[2].port, "options:xdp-mode=bogus"]);
    let err = env.vsctl(&["get", "interface", &hs[2].port, "error"]);
    assert!(err.contains("xdp-mode") && err.contains("bogus"), "error column: {err}");
    assert_eq!(hs[0].ping(&hs[1].ip, 2).unwrap(), 2, "other ports unaffected");
    env.vsctl(&["remove", "interface", &hs[2].port, "options", "xdp-mode"]);
    assert!(eventually(5, || env.vsctl(&["get", "interface", &hs[2].port, "error"]) == "[]"), "error cleared");
    assert_eq!(hs[0].ping(&hs[2].ip, 2).unwrap(), 2, "fixed port forwards");

    // Bridge protocols: only the listed OpenFlow versions are spoken.
    env.vsctl(&["set", "bridge", &br, "protocols=OpenFlow13"]);
    let mgmt = format!("unix:{}/run/{br}.mgmt", env.dir);
    let show = |v: &str| Command::new("ovs-ofctl").args([v, "show", &mgmt]).output().unwrap().status.success();
    assert!(eventually(5, || !show("-OOpenFlow10") && show("-OOpenFlow13")), "protocols=OpenFlow13 applied");
    env.vsctl(&["clear", "bridge", &br, "protocols"]);
    assert!(eventually(5, || show("-OOpenFlow10")), "all versions again");

    // ovs-appctl sees the datapath.
    let flows = env.appctl(&["dpctl/dump-flows"]);
    assert!(flows.contains("actions:"), "{flows}");
    assert!(env.appctl(&["dpctl/show"]).contains(&hs[0].port));

    // del-port stops forwarding on that port.
    env.vsctl(&["del-port", &br, &hs[1].port]);
    assert_eq!(hs[0].ping(&hs[1].ip, 2).unwrap(), 0, "removed port no longer forwards");
    env.vsctl(&["add-port", &br, &hs[1].port, "--", "set", "interface", &hs[1].port, "type=afxdp"]);

    // kill -9 while traffic flows, restart: the database brings everything back.
    // The bridge's local port keeps what the host configured on it (an
    // address here), as ovs-vswitchd's internal ports do.
    assert!(Command::new("ip").args(["addr", "add", "169.254.77.1/32", "dev", &br]).status().unwrap().success());
    assert_eq!(hs[0].ping(&hs[1].ip, 2).unwrap(), 2);
    let mut x = env.xvs.take().unwrap();
    x.kill().unwrap();
    x.wait().unwrap();
    assert_eq!(hs[0].ping(&hs[1].ip, 1).unwrap(), 0, "nothing forwards while xvs is down");
    let t0 = Instant::now();
    env.start_xvs();
    let back = eventually(10, || hs[0].ping(&hs[1].ip, 1).unwrap() == 1);
    assert!(back, "forwarding resumed after restart");
    eprintln!("forwarding resumed {:?} after restart", t0.elapsed());
    assert!(t0.elapsed() < Duration::from_secs(5), "resumed quickly: {:?}", t0.elapsed());
    let addr = || {
        let o = Command::new("ip").args(["-br", "addr", "show", "dev", &br]).output().unwrap();
        (o.status.success(), String::from_utf8_lossy(&o.stdout).into_owned())
    };
    let (_, a) = addr();
    assert!(a.contains("169.254.77.1/32") && a.contains("UP"), "local port after the restart: {a}");
    // mtu_request is applied to the device, as OVS applies it.
    env.vsctl(&["set", "interface", &br, "mtu_request=1600"]);
    let mtu = || std::fs::read_to_string(format!("/sys/class/net/{br}/mtu")).unwrap_or_default().trim().to_string();
    assert!(eventually(5, || mtu() == "1600"), "mtu_request applied: {}", mtu());
    // Removing the bridge removes its device.
    env.vsctl(&["del-br", &br]);
    assert!(eventually(5, || !addr().0), "the bridge's device is gone with the bridge: {}", addr().1);
}

#[test]
fn two_bridges_joined_by_patch_ports() {
    let hs = hosts("b", 2);
    let mut env = Env::new("b");
    env.start_xvs();
    let id = std::process::id() % 1000;
    let (b1, b2) = (format!("brp{id}a"), format!("brp{id}b"));
    let (p1, p2) = (format!("pt{id}a"), format!("pt{id}b"));
    env.vsctl(&["add-br", &b1, "--", "set", "bridge", &b1, "datapath_type=netdev"]);
    env.vsctl(&["add-br", &b2, "--", "set", "bridge", &b2, "datapath_type=netdev"]);
    env.vsctl(&["add-port", &b1, &hs[0].port, "--", "set", "interface", &hs[0].port, "type=afxdp"]);
    env.vsctl(&["add-port", &b2, &hs[1].port, "--", "set", "interface", &hs[1].port, "type=afxdp"]);
    env.vsctl(&["add-port", &b1, &p1, "--", "set", "interface", &p1, "type=patch", &format!("options:peer={p2}")]);
    env.vsctl(&["add-port", &b2, &p2, "--", "set", "interface", &p2, "type=patch", &format!("options:peer={p1}")]);
    assert_eq!(hs[0].ping(&hs[1].ip, 3).unwrap(), 3, "ping crosses both bridges through the patch pair");
    let fdb = env.appctl(&["fdb/show", &b2]);
    assert!(fdb.contains(&hs[0].mac), "bridge 2 learned host 1 behind the patch port: {fdb}");
}

#[test]
fn mirror_copies_traffic_to_an_output_port() {
    let hs = hosts("m", 3);
    let mut env = Env::new("m");
    env.start_xvs();
    let br = format!("brm{}", std::process::id() % 1000);
    env.vsctl(&["add-br", &br, "--", "set", "bridge", &br, "datapath_type=netdev"]);
    for h in &hs {
        env.vsctl(&["add-port", &br, &h.port, "--", "set", "interface", &h.port, "type=afxdp"]);
    }
    assert_eq!(hs[0].ping(&hs[1].ip, 2).unwrap(), 2, "learned");
    // Port 3 (h3) mirrors everything h1 sends.
    env.vsctl(&[
        "--",
        "--id=@p",
        "get",
        "port",
        &hs[2].port,
        "--",
        "--id=@s",
        "get",
        "port",
        &hs[0].port,
        "--",
        "--id=@m",
        "create",
        "mirror",
        "name=m0",
        "select-src-port=@s",
        "output-port=@p",
        "--",
        "add",
        "bridge",
        &br,
        "mirrors",
        "@m",
    ]);
    std::thread::sleep(Duration::from_millis(300));
    let seen = hs[2].capture(&["icmp"], || assert_eq!(hs[0].ping(&hs[1].ip, 5).unwrap(), 5)).unwrap();
    let copies = seen.lines().filter(|l| l.contains("ICMP echo request")).count();
    assert!(copies >= 5, "h3 got copies of h1's 5 echo requests: {copies}\n{seen}");
    // Without the mirror h3 sees nothing of that unicast exchange. (Only
    // ICMP counts: a broadcast, an ARP request say, reaches h3 by flooding,
    // mirror or not.)
    env.vsctl(&["clear", "bridge", &br, "mirrors"]);
    std::thread::sleep(Duration::from_millis(300));
    let seen = hs[2].capture(&["icmp"], || assert_eq!(hs[0].ping(&hs[1].ip, 3).unwrap(), 3)).unwrap();
    assert!(
        !seen.contains("ICMP"),
        "mirror removed, yet h3 saw ICMP:\n{seen}\ndatapath flows:\n{}",
        env.appctl(&["dpctl/dump-flows"])
    );
}

/// The remaining lifetime `dpctl/dump-conntrack -s` gives the ICMP
/// connection from h1 to h2.
fn icmp_timeout(env: &Env) -> u64 {
    let d = env.appctl(&["dpctl/dump-conntrack", "-s"]);
    d.lines()
        .find(|l| l.starts_with("icmp,orig=(src=10.79.0.1,dst=10.79.0.2,"))
        .and_then(|l| l.split("timeout=").nth(1))
        .and_then(|v| v.split(',').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no ICMP connection in:\n{d}"))
}

#[test]
fn zone_timeout_policies_come_from_the_database() {
    let hs = hosts("t", 2);
    let mut env = Env::new("t");
    env.start_xvs();
    let br = format!("brt{}", std::process::id() % 1000);
    env.vsctl(&["add-br", &br, "--", "set", "bridge", &br, "datapath_type=netdev"]);
    for h in &hs {
        env.vsctl(&["add-port", &br, &h.port, "--", "set", "interface", &h.port, "type=afxdp"]);
    }
    for f in [
        "table=0,priority=100,ip,ct_state=-trk,actions=ct(table=1,zone=5)",
        "table=0,priority=10,arp,actions=NORMAL",
        "table=1,priority=100,ip,ct_state=+trk+new,actions=ct(commit,zone=5),NORMAL",
        "table=1,priority=100,ip,ct_state=+trk+est,actions=NORMAL",
    ] {
        let o = Command::new("ovs-ofctl")
            .args(["add-flow", &format!("unix:{}/run/{br}.mgmt", env.dir), f])
            .output()
            .unwrap();
        assert!(o.status.success(), "{f}: {}", String::from_utf8_lossy(&o.stderr));
    }
    assert_eq!(hs[0].ping(&hs[1].ip, 1).unwrap(), 1);
    let default = icmp_timeout(&env);
    assert!(default > 20, "the default ICMP reply timeout is 30 s: {default}");
    // ovs-vsctl's own command writes Datapath:ct_zones, CT_Zone and
    // CT_Timeout_Policy; new connections in zone 5 then live 4 s.
    env.vsctl(&["add-zone-tp", "netdev", "zone=5", "icmp_first=3", "icmp_reply=4"]);
    assert!(env.vsctl(&["list-zone-tp", "netdev"]).contains("icmp_reply=4"));
    // (A fresh connection each try: a policy applies to new connections.)
    let fresh_timeout = || {
        env.appctl(&["dpctl/flush-conntrack"]);
        assert_eq!(hs[0].ping(&hs[1].ip, 1).unwrap(), 1);
        icmp_timeout(&env)
    };
    assert!(eventually(5, || fresh_timeout() <= 4), "zone 5's policy applies");
    // Without traffic the connection expires and housekeeping removes it
    // (within 4 s of expiring: an eighth of the table every 500 ms).
    assert!(
        eventually(12, || !env.appctl(&["dpctl/dump-conntrack"]).contains("icmp,")),
        "expired connections are swept: {}",
        env.appctl(&["dpctl/dump-conntrack", "-s"])
    );
    // Gone again: back to the defaults for new connections.
    env.vsctl(&["del-zone-tp", "netdev", "zone=5"]);
    assert!(eventually(5, || fresh_timeout() > 20), "the defaults are back");
}

/// `Open_vSwitch other_config:metrics-addr` starts the Prometheus endpoint
/// of a `--db` switch, which reports the bridges the database names;
/// removing the key stops it.
#[test]
fn metrics_endpoint_follows_other_config() {
    use std::io::{Read, Write};
    let hs = hosts("p", 1);
    let mut env = Env::new("p");
    env.start_xvs();
    let id = std::process::id() % 1000;
    let br = format!("brq{id}");
    env.vsctl(&["add-br", &br, "--", "set", "bridge", &br, "datapath_type=netdev"]);
    env.vsctl(&["add-port", &br, &hs[0].port, "--", "set", "interface", &hs[0].port, "type=afxdp"]);
    let addr = format!("127.0.0.1:{}", 20000 + id);
    let get = || -> Option<String> {
        let mut s = std::net::TcpStream::connect(&addr).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").ok()?;
        let mut body = String::new();
        s.read_to_string(&mut body).ok()?;
        Some(body)
    };
    env.vsctl(&["set", "open_vswitch", ".", &format!("other_config:metrics-addr={addr}")]);
    let want = format!("xvs_port_rx_packets_total{{bridge=\"{br}\",port=\"{}\"", hs[0].port);
    assert!(eventually(10, || get().is_some_and(|b| b.contains(&want))), "{want} in {:?}", get());
    env.vsctl(&["remove", "open_vswitch", ".", "other_config", "metrics-addr"]);
    assert!(eventually(10, || get().is_none()), "the endpoint stops when the key goes");
}

/// A port whose device is deleted shows in the Interface table as OVS
/// shows a missing device (link_state down, the error column), and comes
/// back by itself when a device of that name returns.
#[test]
fn a_deleted_device_shows_in_the_interface_table_and_returns() {
    let mut hs = hosts("g", 2);
    let mut env = Env::new("g");
    env.start_xvs();
    let id = std::process::id() % 1000;
    let br = format!("brg{id}");
    env.vsctl(&["add-br", &br, "--", "set", "bridge", &br, "datapath_type=netdev"]);
    for h in &hs {
        env.vsctl(&["add-port", &br, &h.port, "--", "set", "interface", &h.port, "type=afxdp"]);
    }
    assert_eq!(hs[0].ping(&hs[1].ip, 2).unwrap(), 2);
    let (port2, ns2, ip2) = (hs[1].port.clone(), hs[1].ns.clone(), format!("{}/24", hs[1].ip));
    let get = |col: &str| env.vsctl_nowait(&["get", "interface", &port2, col]);
    assert_eq!(get("link_state"), "up");
    drop(hs.pop());
    assert!(eventually(10, || get("link_state") == "down"), "{} {}", get("link_state"), env.appctl(&["show"]));
    assert!(eventually(5, || get("error").contains("No such device")), "{}", get("error"));
    println!("link_state {} error {}", get("link_state"), get("error"));
    let h2 = Host::create(&ns2, &port2, &ip2, 1).unwrap();
    assert!(eventually(10, || get("link_state") == "up"), "{}", get("link_state"));
    assert!(eventually(5, || get("error") == "[]"), "{}", get("error"));
    hs[0].exec(&["ip", "neigh", "flush", "all"]).unwrap();
    assert_eq!(hs[0].ping(&h2.ip, 3).unwrap(), 3);
}

/// `mtu_request=9000` on AF_XDP ports: the switch reopens them with the
/// multi-buffer XDP program, the kernel devices take the MTU, and an
/// 8900-byte ping with DF crosses the bridge. (OVS 3.1's AF_XDP ports
/// cannot: their frames must fit one page, about 3.5k.)
#[test]
fn mtu_request_9000_on_afxdp_ports_carries_jumbo_frames() {
    let hs = hosts("j", 2);
    let mut env = Env::new("j");
    env.start_xvs();
    let id = std::process::id() % 1000;
    let br = format!("brj{id}");
    env.vsctl(&["add-br", &br, "--", "set", "bridge", &br, "datapath_type=netdev"]);
    for h in &hs {
        env.vsctl(&["add-port", &br, &h.port, "--", "set", "interface", &h.port, "type=afxdp", "mtu_request=9000"]);
    }
    let mtu = |dev: &str| std::fs::read_to_string(format!("/sys/class/net/{dev}/mtu")).unwrap_or_default();
    for h in &hs {
        assert!(eventually(10, || mtu(&h.port).trim() == "9000"), "{}: mtu_request applied: {}", h.port, mtu(&h.port));
        h.exec(&["ip", "link", "set", "eth0", "mtu", "9000"]).unwrap();
    }
    let ping = |size: &str| {
        let o = hs[0].run(&["ping", "-n", "-q", "-M", "do", "-s", size, "-c", "3", "-i", "0.2", "-W", "1", &hs[1].ip]);
        o.map(|o| xvs::netns::parse_ping_received(&String::from_utf8_lossy(&o.stdout))).unwrap_or(0)
    };
    assert!(eventually(10, || ping("8900") == 3), "ping -s 8900 -M do across the bridge at MTU 9000");
    assert_eq!(env.vsctl(&["get", "interface", &hs[0].port, "mtu"]), "9000", "the Interface mtu column");
    assert_eq!(env.vsctl(&["get", "interface", &hs[0].port, "error"]), "[]");
}

/// `other_config:pmd-maxsleep=0` (Open vSwitch's default, 3.1's name) makes
/// a bridge's poll thread spin: it never sleeps, while xvs's adaptive
/// polling (the key absent) sleeps as soon as the ports are idle. The key
/// is read when a bridge starts.
#[test]
fn pmd_maxsleep_zero_makes_the_poll_thread_spin() {
    let hs = hosts("s", 2);
    let mut env = Env::new("s");
    env.start_xvs();
    let id = std::process::id() % 1000;
    let (spin, nap) = (format!("brs{id}"), format!("brn{id}"));
    env.vsctl(&["set", "open_vswitch", ".", "other_config:pmd-maxsleep=0"]);
    env.vsctl(&["add-br", &spin, "--", "set", "bridge", &spin, "datapath_type=netdev"]);
    env.vsctl(&["add-port", &spin, &hs[0].port, "--", "set", "interface", &hs[0].port, "type=afxdp"]);
    env.vsctl(&["remove", "open_vswitch", ".", "other_config", "pmd-maxsleep"]);
    env.vsctl(&["add-br", &nap, "--", "set", "bridge", &nap, "datapath_type=netdev"]);
    env.vsctl(&["add-port", &nap, &hs[1].port, "--", "set", "interface", &hs[1].port, "type=afxdp"]);
    std::thread::sleep(Duration::from_secs(2));
    let show = env.appctl(&["dpif-netdev/pmd-perf-show"]);
    // Each thread's section starts "pmd thread numa_id 0 core_id N (BRIDGE):".
    let sleeps = |br: &str| -> Option<u64> {
        let section = show.split("pmd thread numa_id").find(|s| s.contains(&format!("({br}):")))?;
        let line = section.lines().find(|l| l.contains("sleep iterations:"))?;
        line.split(':').nth(1)?.split_whitespace().next()?.parse().ok()
    };
    assert_eq!(sleeps(&spin), Some(0), "the spinning bridge's thread slept:\n{show}");
    assert!(sleeps(&nap).is_some_and(|n| n > 0), "the adaptive bridge's thread never slept:\n{show}");
}

/// The kernel fast path under `--db`: on by default; `other_config:
/// xdp-offload=false` turns it off at once and `true` on again, with
/// `xdp-offload-pps` as the rate a flow needs. A UDP stream between two
/// hosts behind NORMAL switching then moves into the XDP program
/// (offload-show through ovs-appctl counts kernel hits). A value that is
/// not a boolean changes nothing (the model's unit test checks the message
/// naming it). The far ends have GRO on, which veth needs to take
/// XDP-redirected frames (README, "XDP fast path").
#[test]
fn xdp_offload_from_other_config() {
    let hs = hosts("x", 2);
    for h in &hs {
        h.exec(&["ethtool", "-K", "eth0", "gro", "on"]).unwrap();
    }
    let mut env = Env::new("x");
    env.start_xvs();
    let br = format!("brx{}", std::process::id() % 1000);
    env.vsctl(&["add-br", &br, "--", "set", "bridge", &br, "datapath_type=netdev"]);
    for h in &hs {
        env.vsctl(&[
            "add-port",
            &br,
            &h.port,
            "--",
            "set",
            "interface",
            &h.port,
            "type=afxdp",
            "options:xdp-mode=native",
        ]);
    }
    let show = || env.appctl(&["dpif-netdev/offload-show"]);
    assert!(show().contains(&format!("{br}: XDP offload on (flows above 1000 pkt/s)")), "on by default:\n{}", show());
    env.vsctl(&["set", "open_vswitch", ".", "other_config:xdp-offload=false"]);
    assert!(show().contains(&format!("{br}: XDP offload off")), "{}", show());
    env.vsctl(&["set", "open_vswitch", ".", "other_config:xdp-offload=yes"]);
    assert!(
        show().contains("XDP offload on (flows above 1000 pkt/s)"),
        "'yes' is not a boolean: the default holds:\n{}",
        show()
    );
    env.vsctl(&["set", "open_vswitch", ".", "other_config:xdp-offload=true", "other_config:xdp-offload-pps=200"]);
    assert!(show().contains("XDP offload on (flows above 200 pkt/s)"), "{}", show());
    assert_eq!(hs[0].ping(&hs[1].ip, 2).unwrap(), 2);
    let got = hs[0].udp_burst(&hs[1], 7010, 30_000, Some(15_000)).unwrap();
    assert!(got >= 29_000, "the stream arrives: {got} of 30000");
    let hits = |s: &str| -> u64 {
        s.lines()
            .find_map(|l| l.trim().strip_prefix("kernel: hit:")?.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    let h = hits(&show());
    assert!(h > 20_000, "most of the stream was forwarded by the XDP program ({h} hits):\n{}", show());
    // Off again: the next stream stays in userspace, and all of it arrives.
    env.vsctl(&["set", "open_vswitch", ".", "other_config:xdp-offload=false"]);
    let got = hs[0].udp_burst(&hs[1], 7012, 3_000, Some(15_000)).unwrap();
    assert!(got >= 2_950, "{got} of 3000 after turning the fast path off");
    // The rule's counters hold both streams: what the kernel forwarded was
    // credited, also its last counts when the fast path was turned off.
    let o =
        Command::new("ovs-ofctl").args(["dump-flows", &format!("unix:{}/run/{br}.mgmt", env.dir)]).output().unwrap();
    let dump = String::from_utf8_lossy(&o.stdout).into_owned();
    let n: u64 = dump
        .split("n_packets=")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{dump}"));
    assert!(n >= 32_950, "the NORMAL rule counted the streams, kernel-forwarded packets included: {dump}");
    env.vsctl(&["set", "open_vswitch", ".", "other_config:xdp-offload=true"]);
    let s = show();
    assert!(
        s.contains("offloaded flows: 0") && hits(&s) == h,
        "turning it off removed every entry and nothing hit since:\n{s}"
    );
}
