//! Fault injection: OpenFlow peers that stop reading must not stop the
//! switch's management for anyone else (issue 12).
//!
//! Each test holds raw OpenFlow clients that say HELLO (and ask for
//! asynchronous messages) and then never read, so the switch's socket
//! buffers towards them fill, and checks that `ovs-ofctl` on another
//! connection, rule expiry and port-status still work within bounded time.
//! Times are printed (`--nocapture`) as the before/after figures; the
//! bounds asserted are generous (tens of seconds) so a loaded CI machine
//! does not flake, while the unfixed switch hangs forever.
//! Needs root (namespaces) and ovs-ofctl.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use xvs::netns::Host;

struct Daemon {
    child: Child,
    run_dir: String,
    bridge: String,
}

impl Daemon {
    fn start(t: &str, hs: &[&Host]) -> Daemon {
        let run_dir = format!("/tmp/xvs-stall-{t}-{}", std::process::id());
        let _ = std::fs::remove_dir_all(&run_dir);
        let bridge = format!("brs{t}");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_xvs"));
        cmd.args(["switch", "--run-dir", &run_dir, "--bridge", &bridge, "--no-local-port"]);
        for h in hs {
            cmd.args(["--port", &h.port]);
        }
        let child = cmd.stderr(Stdio::null()).stdout(Stdio::null()).spawn().unwrap();
        let d = Daemon { child, run_dir, bridge };
        let t0 = Instant::now();
        let ctl = format!("{}/xvs.ctl", d.run_dir);
        while !std::path::Path::new(&ctl).exists() && t0.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(25));
        }
        d
    }

    fn sock(&self, kind: &str) -> String {
        format!("{}/{}.{kind}", self.run_dir, self.bridge)
    }

    /// Runs ovs-ofctl, killed after `limit`; returns (success, stdout, elapsed).
    fn ofctl_within(&self, limit: Duration, args: &[&str]) -> (bool, String, Duration) {
        let target = format!("unix:{}", self.sock("mgmt"));
        let mut c = Command::new("ovs-ofctl")
            .env("OVS_RUNDIR", &self.run_dir)
            .arg(args[0])
            .arg(&target)
            .args(&args[1..])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut out = c.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = out.read_to_string(&mut s);
            s
        });
        let t0 = Instant::now();
        loop {
            if let Some(st) = c.try_wait().unwrap() {
                return (st.success(), reader.join().unwrap(), t0.elapsed());
            }
            if t0.elapsed() > limit {
                let _ = c.kill();
                let _ = c.wait();
                return (false, reader.join().unwrap(), t0.elapsed());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.run_dir);
    }
}

fn hosts(t: &str, n: usize) -> Vec<Host> {
    std::env::set_var("XVS_BIN", env!("CARGO_BIN_EXE_xvs"));
    let id = std::process::id() % 1000;
    (1..=n)
        .map(|i| {
            Host::create(
                &format!("xvss{t}{id}h{i}"),
                &format!("xs{t}{id}h{i}"),
                &format!("10.83.{}.{i}/24", t.len()),
                1,
            )
            .unwrap()
        })
        .collect()
}

/// An OpenFlow 1.0 client that says HELLO (and, with `async_on`, a
/// SET_CONFIG, which asks a management connection for asynchronous
/// messages as `ovs-ofctl monitor` does) and then never reads.
fn stalled_client(path: &str, async_on: bool) -> UnixStream {
    let mut s = UnixStream::connect(path).unwrap();
    s.write_all(&[1, 0, 0, 8, 0, 0, 0, 1]).unwrap();
    if async_on {
        // SET_CONFIG: flags 0, miss_send_len 0xffff.
        s.write_all(&[1, 9, 0, 12, 0, 0, 0, 2, 0, 0, 0xff, 0xff]).unwrap();
    }
    s
}

fn flows_file(name: &str, n: usize, extra: &str) -> String {
    let path = format!("/tmp/xvs-stall-{name}-{}.flows", std::process::id());
    let mut text = String::new();
    for i in 0..n {
        text += &format!("priority=100,ip,nw_dst=10.{}.{}.{},{extra}actions=drop\n", i >> 16, (i >> 8) & 255, i & 255);
    }
    std::fs::write(&path, text).unwrap();
    path
}

fn count_flows(dump: &str, needle: &str) -> usize {
    dump.lines().filter(|l| l.contains(needle)).count()
}

/// A snoop client that never reads does not stop add-flows of 2,000 rules
/// (whose every message is copied to it) nor dump-flows.
#[test]
fn stalled_snoop_does_not_block_flow_programming() {
    let hs = hosts("s", 2);
    let d = Daemon::start("s", &[&hs[0], &hs[1]]);
    let _snoops: Vec<UnixStream> = (0..2).map(|_| stalled_client(&d.sock("snoop"), false)).collect();
    std::thread::sleep(Duration::from_millis(200));
    let limit = Duration::from_secs(60);
    for (round, extra) in [(1, ""), (2, "tcp,")] {
        let f = flows_file(&format!("s{round}"), 2000, extra);
        let (ok, _, took) = d.ofctl_within(limit, &["add-flows", &f]);
        let _ = std::fs::remove_file(&f);
        println!("add-flows round {round} (2,000 rules) with 2 stalled snoops: {took:?} ok={ok}");
        assert!(ok, "add-flows round {round} finished within {limit:?} (took {took:?})");
    }
    let (ok, dump, took) = d.ofctl_within(limit, &["dump-flows"]);
    println!("dump-flows with 2 stalled snoops: {took:?}");
    assert!(ok, "dump-flows answered");
    assert_eq!(count_flows(&dump, "nw_dst=10."), 4000, "both rounds installed");
    // Forwarding goes on.
    let (ok, _, _) = d.ofctl_within(limit, &["add-flow", "priority=200,actions=NORMAL"]);
    assert!(ok);
    assert_eq!(hs[0].ping(&hs[1].ip, 2).unwrap(), 2);
}

/// A monitor that never reads (its socket full of flow-removed messages)
/// does not stop a hard_timeout=2 rule from expiring on time, nor a
/// reading monitor from getting port-status when a link goes down.
#[test]
fn stalled_monitor_does_not_block_expiry_or_port_status() {
    let hs = hosts("mon", 2);
    let d = Daemon::start("mon", &[&hs[0], &hs[1]]);
    let _mons: Vec<UnixStream> = (0..2).map(|_| stalled_client(&d.sock("mgmt"), true)).collect();
    std::thread::sleep(Duration::from_millis(200));
    let limit = Duration::from_secs(60);
    // 2,000 rules that expire at once: 2,000 flow-removed per monitor,
    // far more than its socket buffer holds.
    let f = flows_file("m", 2000, "hard_timeout=1,send_flow_rem,");
    let (ok, _, took) = d.ofctl_within(limit, &["add-flows", &f]);
    let _ = std::fs::remove_file(&f);
    println!("add-flows (2,000 expiring rules) with 2 stalled monitors: {took:?}");
    assert!(ok);
    std::thread::sleep(Duration::from_secs(2));

    // A reading monitor, started now, must see port-status.
    let mut good = Command::new("ovs-ofctl")
        .env("OVS_RUNDIR", &d.run_dir)
        .args(["monitor", &format!("unix:{}", d.sock("mgmt")), "65534"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));

    let (ok, _, _) = d.ofctl_within(limit, &["add-flow", "priority=7,hard_timeout=2,actions=drop"]);
    assert!(ok);
    let t0 = Instant::now();
    let mut expired = None;
    while t0.elapsed() < Duration::from_secs(30) {
        let (ok, dump, _) = d.ofctl_within(limit, &["dump-flows"]);
        assert!(ok, "dump-flows answered after {:?}", t0.elapsed());
        if !dump.contains("priority=7") {
            expired = Some(t0.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    println!("hard_timeout=2 rule gone after {expired:?} with 2 stalled monitors");
    assert!(expired.is_some(), "the hard_timeout=2 rule expired within 30 s");

    // Link down on the root-side veth: the reading monitor gets PORT_STATUS.
    xvs::netns::sh(&["ip", "link", "set", &hs[1].port, "down"]).unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let _ = Command::new("kill").args(["-TERM", &good.id().to_string()]).status();
    let _ = good.wait();
    let mut text = String::new();
    good.stdout.take().unwrap().read_to_string(&mut text).unwrap();
    good.stderr.take().unwrap().read_to_string(&mut text).unwrap();
    assert!(text.contains("PORT_STATUS") && text.contains(&hs[1].port), "the reading monitor saw: {text}");
}

/// Raises this process's descriptor limit (root may), so it and the
/// switch it starts can hold a few thousand connections.
fn raise_nofile(n: u64) {
    let pid = std::process::id().to_string();
    let _ = Command::new("prlimit").args(["--pid", &pid, &format!("--nofile={n}:{n}")]).status();
}

/// Whether the switch closed this connection (it was over the limit):
/// reads EOF (after the switch's HELLO, if any) within a second.
fn closed_by_switch(s: &mut UnixStream) -> bool {
    s.set_read_timeout(Some(Duration::from_millis(1000))).unwrap();
    let mut buf = [0u8; 64];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

/// About 2,000 idle connections held open (1,000 on snoop, the mgmt
/// listener filled to its limit and beyond): connections past the limit
/// are closed at once, forwarding goes on, and once a few idle ones close
/// `ovs-ofctl add-flow` / `dump-flows` answer.
#[test]
fn idle_connection_flood_is_limited_and_the_switch_keeps_working() {
    raise_nofile(20000);
    let hs = hosts("fl", 2);
    let d = Daemon::start("fl", &[&hs[0], &hs[1]]);
    let limit = xvs::ofconn::MAX_CONNS_PER_LISTENER;
    let t0 = Instant::now();
    let snoops: Vec<UnixStream> = (0..limit).map(|_| stalled_client(&d.sock("snoop"), false)).collect();
    let mut mgmt: Vec<UnixStream> = (0..limit).map(|_| stalled_client(&d.sock("mgmt"), false)).collect();
    println!("opened {} idle connections in {:?}", snoops.len() + mgmt.len(), t0.elapsed());
    // Past the limit: closed by the switch.
    let mut extra: Vec<UnixStream> = (0..20).map(|_| UnixStream::connect(d.sock("mgmt")).unwrap()).collect();
    let refused = extra.iter_mut().map(closed_by_switch).filter(|&c| c).count();
    println!("{refused} of 20 connections past the limit closed by the switch");
    assert_eq!(refused, 20, "connections past the limit are closed");
    // Connections cost no threads: one event loop serves them all.
    let threads = std::fs::read_to_string(format!("/proc/{}/status", d.child.id()))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Threads:").map(|n| n.trim().parse::<usize>().unwrap()))
        .unwrap();
    println!("switch threads with {} connections open: {threads}", snoops.len() + mgmt.len());
    assert!(threads < 64, "{threads} threads for {} connections", snoops.len() + mgmt.len());
    // Forwarding goes on meanwhile (the default table is NORMAL).
    assert_eq!(hs[0].ping(&hs[1].ip, 2).unwrap(), 2);
    // Free a few mgmt slots: ovs-ofctl works again, within bounded time.
    mgmt.truncate(limit - 5);
    std::thread::sleep(Duration::from_millis(300));
    let lim = Duration::from_secs(30);
    let (ok, _, took) = d.ofctl_within(lim, &["add-flow", "priority=9,ip,nw_dst=10.9.9.9,actions=drop"]);
    println!("add-flow with {} idle connections: {took:?}", snoops.len() + mgmt.len());
    assert!(ok);
    let (ok, dump, took) = d.ofctl_within(lim, &["dump-flows"]);
    println!("dump-flows with {} idle connections: {took:?}", snoops.len() + mgmt.len());
    assert!(ok && dump.contains("nw_dst=10.9.9.9"), "{dump}");
    assert_eq!(hs[0].ping(&hs[1].ip, 2).unwrap(), 2);
}
