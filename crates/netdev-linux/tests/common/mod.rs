//! Test topology helpers (need root). Every test builds its own uniquely
//! named namespaces and veth pairs and a guard removes them, on success and
//! on panic.
#![allow(dead_code)]

use netdev::{Netdev, Packet};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub fn sh(args: &[&str]) -> bool {
    Command::new(args[0])
        .args(&args[1..])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

pub fn must(args: &[&str]) {
    let out = Command::new(args[0]).args(&args[1..]).output().expect("spawn");
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// Two namespaces, each with one end of a veth pair whose other end is in
/// the test's (root) namespace: `ns[i]` holds `eth0` with 10.9.0.(i+1)/24,
/// and `dev[i]` is the switch-side end.
pub struct Topo {
    pub ns: Vec<String>,
    pub dev: Vec<String>,
}

pub fn name(tag: &str, suffix: &str) -> String {
    let n = format!("xnl{tag}{}{suffix}", std::process::id() % 1000);
    assert!(n.len() <= 15, "{n} too long");
    n
}

impl Topo {
    pub fn new(tag: &str, n: usize) -> Topo {
        Self::with_queues(tag, n, 1)
    }

    /// As `new`, with `queues` RX/TX queues on every veth.
    pub fn with_queues(tag: &str, n: usize, queues: u32) -> Topo {
        assert!(
            Command::new("ping").arg("-V").output().is_ok(),
            "these tests need `ping` (Debian: apt-get install iputils-ping)"
        );
        let q = queues.to_string();
        let mut t = Topo { ns: Vec::new(), dev: Vec::new() };
        for i in 0..n {
            let ns = name(tag, &format!("n{i}"));
            let dev = name(tag, &format!("d{i}"));
            sh(&["ip", "netns", "del", &ns]);
            sh(&["ip", "link", "del", &dev]);
            t.ns.push(ns.clone());
            t.dev.push(dev.clone());
            must(&["ip", "netns", "add", &ns]);
            must(&[
                "ip",
                "link",
                "add",
                &dev,
                "numrxqueues",
                &q,
                "numtxqueues",
                &q,
                "type",
                "veth",
                "peer",
                "name",
                "eth0",
                "numrxqueues",
                &q,
                "numtxqueues",
                &q,
                "netns",
                &ns,
            ]);
            // The switch-side end stays quiet too: its own IPv6 chatter
            // would land in the namespace's counters.
            must(&["sysctl", "-qw", &format!("net.ipv6.conf.{dev}.disable_ipv6=1")]);
            must(&["ip", "link", "set", &dev, "up"]);
            let addr = format!("10.9.0.{}/24", i + 1);
            t.exec(i, &["ip", "addr", "add", &addr, "dev", "eth0"]);
            t.exec(i, &["ip", "link", "set", "eth0", "up"]);
            t.exec(i, &["ip", "link", "set", "lo", "up"]);
            // Quiet: no IPv6 autoconfiguration chatter on the wire.
            sh(&["ip", "netns", "exec", &ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"]);
        }
        t
    }

    pub fn exec(&self, i: usize, args: &[&str]) {
        let mut v = vec!["ip", "netns", "exec", &self.ns[i]];
        v.extend_from_slice(args);
        must(&v);
    }

    /// `ping` from namespace `from` to 10.9.0.(to+1); true if all replies came.
    pub fn ping(&self, from: usize, to: usize, count: u32) -> bool {
        self.ping_sized(from, to, count, 56)
    }

    /// [`Topo::ping`] with `size` bytes of ICMP payload.
    pub fn ping_sized(&self, from: usize, to: usize, count: u32, size: u32) -> bool {
        let dst = format!("10.9.0.{}", to + 1);
        let c = count.to_string();
        let s = size.to_string();
        let out = Command::new("ip")
            .args(["netns", "exec", &self.ns[from], "ping", "-c", &c, "-s", &s, "-i", "0.2", "-W", "2", &dst])
            .output()
            .unwrap();
        let ok = out.status.success();
        if !ok {
            eprintln!("ping failed: {}", String::from_utf8_lossy(&out.stdout));
        }
        ok
    }
}

impl Drop for Topo {
    fn drop(&mut self) {
        for ns in &self.ns {
            sh(&["ip", "netns", "del", ns]);
        }
        for d in &self.dev {
            sh(&["ip", "link", "del", d]);
        }
    }
}

pub fn ip_shows_xdp(dev: &str) -> bool {
    let out = Command::new("ip").args(["-d", "link", "show", "dev", dev]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).contains("xdp")
}

/// Whether the device is free of XDP within 2 s: the kernel releases an
/// XDP link asynchronously after its last file descriptor closes (on a
/// loaded machine this takes a moment).
pub fn xdp_gone(dev: &str) -> bool {
    let t = std::time::Instant::now();
    while t.elapsed() < std::time::Duration::from_secs(2) {
        if !ip_shows_xdp(dev) {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    !ip_shows_xdp(dev)
}

/// A forwarder thread: everything received on port 0 goes to port 1 and
/// back, until stopped. Returns the ports when joined.
pub struct Forwarder {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<Vec<Box<dyn Netdev>>>>,
}

impl Forwarder {
    pub fn start(mut ports: Vec<Box<dyn Netdev>>) -> Forwarder {
        assert_eq!(ports.len(), 2);
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut batch: Vec<Packet> = Vec::with_capacity(netdev::BATCH);
            while !s.load(Ordering::Relaxed) {
                let mut idle = true;
                for (from, to) in [(0, 1), (1, 0)] {
                    for q in 0..ports[from].n_rxq() {
                        let n = ports[from].rx_batch(q, &mut batch, netdev::BATCH).unwrap();
                        if n > 0 {
                            idle = false;
                            ports[to].tx_batch(&mut batch).unwrap();
                        }
                    }
                }
                for p in ports.iter_mut() {
                    p.poll_housekeeping();
                }
                if idle {
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
            ports
        });
        Forwarder { stop, handle: Some(handle) }
    }

    pub fn finish(mut self) -> Vec<Box<dyn Netdev>> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.take().unwrap().join().expect("forwarder panicked")
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Polls `port` until a frame satisfying `pred` arrives or `timeout` ends.
pub fn wait_rx(port: &mut dyn Netdev, timeout: Duration, pred: impl Fn(&Packet) -> bool) -> Option<Packet> {
    let end = Instant::now() + timeout;
    let mut batch = Vec::new();
    while Instant::now() < end {
        for q in 0..port.n_rxq() {
            port.rx_batch(q, &mut batch, netdev::BATCH).unwrap();
        }
        port.poll_housekeeping();
        if let Some(i) = batch.iter().position(&pred) {
            return Some(batch.swap_remove(i));
        }
        batch.clear();
        std::thread::sleep(Duration::from_millis(5));
    }
    None
}

pub fn is_arp(p: &Packet) -> bool {
    p.len() >= 14 && p.data()[12..14] == [0x08, 0x06]
}
