//! Network namespaces as hosts, for the demo, tests and benchmarks.
//!
//! Everything created here is removed when its guard drops, also when the
//! caller fails: deleting a namespace deletes the veth ends inside it, and
//! with them their peers.

use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The xvs binary to run `xvs util` with inside namespaces: `$XVS_BIN`
/// (tests set it), else the running executable.
pub fn xvs_exe() -> PathBuf {
    std::env::var_os("XVS_BIN")
        .map(PathBuf::from)
        .or_else(|| std::env::current_exe().ok())
        .unwrap_or_else(|| "xvs".into())
}

/// Waits for a child and returns its stdout, or its stderr as the error.
pub fn finish(c: Child) -> Result<String> {
    let out = c.wait_with_output()?;
    if !out.status.success() {
        bail!("{}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Waits up to `ms` for `path` to exist.
pub fn wait_file(path: &str, ms: u64) {
    let t = Instant::now();
    while !std::path::Path::new(path).exists() && t.elapsed() < Duration::from_millis(ms) {
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The first number after `word` in `text` ("received 10 bytes" -> 10).
pub fn number_after(text: &str, word: &str) -> Option<u64> {
    let mut it = text.split_whitespace();
    while let Some(w) = it.next() {
        if w == word {
            return it.next().and_then(|n| n.parse().ok());
        }
    }
    None
}

/// Runs a command, failing with its stderr if it exits non-zero.
pub fn sh(args: &[&str]) -> Result<String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {}", args[0]))?;
    check(args, out)
}

fn check(args: &[&str], out: Output) -> Result<String> {
    if !out.status.success() {
        bail!("`{}` failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Whether Open vSwitch stands in for xvs in this run (`XVS_SWITCH=ovs`).
pub fn ovs_stands_in() -> bool {
    std::env::var("XVS_SWITCH").as_deref() == Ok("ovs")
}

/// A host: a namespace with one veth whose peer stays in the root
/// namespace for the switch to use.
pub struct Host {
    pub ns: String,
    /// Interface inside the namespace.
    pub ifname: String,
    /// Its peer in the root namespace (the switch port).
    pub port: String,
    pub ip: String,
    pub mac: String,
}

impl Host {
    /// Creates namespace `ns` with `eth0` at `ip` (CIDR) and a peer named
    /// `port` in the root namespace. `queues` sets the veth queue count.
    pub fn create(ns: &str, port: &str, ip_cidr: &str, queues: usize) -> Result<Host> {
        if port.len() > 15 {
            bail!("interface name {port} is longer than 15 characters");
        }
        // Remove leftovers of an earlier run with the same names.
        let _ = Command::new("ip").args(["netns", "del", ns]).stderr(Stdio::null()).status();
        let _ = Command::new("ip").args(["link", "del", port]).stderr(Stdio::null()).status();
        sh(&["ip", "netns", "add", ns])?;
        let mut host = Host {
            ns: ns.into(),
            ifname: "eth0".into(),
            port: port.into(),
            ip: ip_cidr.split('/').next().unwrap_or(ip_cidr).into(),
            mac: String::new(),
        };
        let q = queues.to_string();
        sh(&[
            "ip",
            "link",
            "add",
            port,
            "numtxqueues",
            &q,
            "numrxqueues",
            &q,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            ns,
            "numtxqueues",
            &q,
            "numrxqueues",
            &q,
        ])?;
        host.exec(&["ip", "addr", "add", ip_cidr, "dev", "eth0"])?;
        host.exec(&["ip", "link", "set", "eth0", "up"])?;
        host.exec(&["ip", "link", "set", "lo", "up"])?;
        // Hosts keep Linux's defaults (transmit checksum offload, TSO and
        // GSO on), as containers have them: the switch must cope with the
        // partial checksums they send. Only when Open vSwitch stands in
        // for xvs (`XVS_SWITCH=ovs`) is offload turned off, because OVS
        // 3.1's AF_XDP ports do not finish those checksums and its
        // documentation says to turn it off; xvs runs every such test
        // with it on.
        if ovs_stands_in() {
            host.tx_csum_off_for_ovs()?;
        }
        // Keep IPv6 autoconfiguration chatter out of counters.
        host.exec(&["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"])?;
        // The same for the switch-side end: what its own kernel stack sends
        // (IPv6 router solicitations, MLD reports, seconds after it comes
        // up) goes straight into the host's eth0 and would count there.
        sh(&["sysctl", "-qw", &format!("net.ipv6.conf.{port}.disable_ipv6=1")])?;
        sh(&["ip", "link", "set", port, "up"])?;
        host.mac = host.exec(&["cat", "/sys/class/net/eth0/address"])?.trim().to_string();
        Ok(host)
    }

    /// A host over an existing namespace `ns` whose interface `ifname`
    /// the caller set up (e.g. a veth created straight into two
    /// namespaces): no peer in the root namespace. Dropping it deletes the
    /// namespace. `ip` is the address without prefix length (may be empty).
    pub fn bare(ns: &str, ifname: &str, ip: &str) -> Host {
        Host { ns: ns.into(), ifname: ifname.into(), port: String::new(), ip: ip.into(), mac: String::new() }
    }

    /// Turns transmit checksum offload off on the host's interface, for
    /// a test that runs Open vSwitch 3.1 as the switch: its AF_XDP ports
    /// forward partial checksums unfinished (OVS documents `ethtool -K
    /// eth0 tx off` for them). Only for OVS: xvs's tests keep it on.
    pub fn tx_csum_off_for_ovs(&self) -> Result<()> {
        self.exec(&["ethtool", "-K", &self.ifname, "tx", "off"]).map(drop) // why: above
    }

    /// Runs a command inside the namespace.
    pub fn exec(&self, args: &[&str]) -> Result<String> {
        let mut v = vec!["ip", "netns", "exec", &self.ns];
        v.extend_from_slice(args);
        sh(&v)
    }

    /// Runs a command inside the namespace, returning its full output.
    pub fn run(&self, args: &[&str]) -> Result<Output> {
        Command::new("ip")
            .args(["netns", "exec", &self.ns])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .context("running ip netns exec")
    }

    /// Starts `xvs util ARGS` inside the namespace.
    pub fn util(&self, args: &[&str]) -> Result<Child> {
        Command::new("ip")
            .args(["netns", "exec", &self.ns])
            .arg(xvs_exe())
            .arg("util")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting xvs util")
    }

    /// What tcpdump on this host's eth0 sees while `during` runs: one line
    /// per frame matching `filter` (a tcpdump expression, e.g. `["icmp"]`),
    /// link-level headers included (`-e -nn`). Capture starts before
    /// `during` (tcpdump has said it is listening) and stops 300 ms after
    /// it; tcpdump is stopped also when `during` panics.
    pub fn capture(&self, filter: &[&str], during: impl FnOnce()) -> Result<String> {
        use std::io::{BufRead, BufReader, Read};
        struct Capture(Child);
        impl Drop for Capture {
            fn drop(&mut self) {
                let _ = self.0.kill();
                let _ = self.0.wait();
            }
        }
        let mut td = Capture(
            Command::new("ip")
                .args(["netns", "exec", &self.ns, "tcpdump", "-l", "-nn", "-e", "-i", &self.ifname])
                .args(filter)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .context("starting tcpdump (scripts/setup.sh installs it)")?,
        );
        let mut err = BufReader::new(td.0.stderr.take().context("tcpdump stderr")?);
        let mut line = String::new();
        while err.read_line(&mut line).unwrap_or(0) > 0 && !line.contains("listening on") {
            line.clear();
        }
        if !line.contains("listening on") {
            bail!("tcpdump in {} did not start: {line}", self.ns);
        }
        during();
        std::thread::sleep(Duration::from_millis(300));
        // SIGINT: tcpdump exits cleanly and closes its output.
        sh(&["kill", "-INT", &td.0.id().to_string()])?;
        let mut out = String::new();
        td.0.stdout.take().context("tcpdump stdout")?.read_to_string(&mut out)?;
        Ok(out)
    }

    /// A counter of the namespace's eth0 (e.g. "rx_packets").
    pub fn counter(&self, name: &str) -> u64 {
        self.exec(&["cat", &format!("/sys/class/net/eth0/statistics/{name}")])
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Sends `count` UDP datagrams (18-byte payload: 64-byte frames) from
    /// this host to `to` and returns how many `to` received.
    pub fn udp_burst(&self, to: &Host, port: u16, count: u64, pps: Option<u64>) -> Result<u64> {
        self.udp_burst_ports(to, port, port, count, pps)
    }

    /// Like [`Host::udp_burst`], sending to `send_port` while `to` listens
    /// on `recv_port` (for flows that rewrite the port).
    pub fn udp_burst_to_port(&self, to: &Host, send_port: u16, recv_port: u16, count: u64) -> Result<u64> {
        self.udp_burst_ports(to, send_port, recv_port, count, Some(2000))
    }

    fn udp_burst_ports(&self, to: &Host, send_port: u16, port: u16, count: u64, pps: Option<u64>) -> Result<u64> {
        let ready = format!("/tmp/{}-{port}.ready", to.ns);
        let _ = std::fs::remove_file(&ready);
        let p = port.to_string();
        let rx =
            to.util(&["udp-recv", "--port", &p, "--idle-ms", "700", "--max-ms", "30000", "--ready-file", &ready])?;
        wait_file(&ready, 5000);
        let mut args = vec![
            "udp-send".to_string(),
            "--dst".into(),
            format!("{}:{send_port}", to.ip),
            "--count".into(),
            count.to_string(),
        ];
        if let Some(r) = pps {
            args.push("--pps".into());
            args.push(r.to_string());
        }
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        let tx = self.util(&a)?;
        finish(tx)?;
        let got = finish(rx)?;
        let _ = std::fs::remove_file(&ready);
        number_after(&got, "received").context("udp-recv output")
    }

    /// Streams `bytes` over TCP from this host to `to`; returns the bytes
    /// `to` received.
    pub fn tcp_stream(&self, to: &Host, port: u16, bytes: u64) -> Result<u64> {
        self.tcp_stream_via(&format!("{}:{port}", to.ip), to, port, bytes)
    }

    /// Streams `bytes` over TCP to `dst` (IP:PORT, e.g. a load balancer's
    /// VIP) while `to` listens on `port`; returns the bytes `to` received.
    pub fn tcp_stream_via(&self, dst: &str, to: &Host, port: u16, bytes: u64) -> Result<u64> {
        let ready = format!("/tmp/{}-{port}.tready", to.ns);
        let _ = std::fs::remove_file(&ready);
        let p = port.to_string();
        let rx = to.util(&["tcp-recv", "--port", &p, "--max-ms", "30000", "--ready-file", &ready])?;
        wait_file(&ready, 5000);
        let tx = self.util(&["tcp-send", "--dst", dst, "--bytes", &bytes.to_string(), "--timeout-ms", "20000"])?;
        let sent = finish(tx);
        let got = finish(rx)?;
        let _ = std::fs::remove_file(&ready);
        sent?;
        number_after(&got, "received").context("tcp-recv output")
    }

    /// Pings `dst` `count` times (0.2 s apart, 1 s deadline per reply);
    /// returns how many of the `count` replies arrived.
    pub fn ping(&self, dst: &str, count: u32) -> Result<u32> {
        let c = count.to_string();
        let w = (count + 2).to_string();
        let out = self.run(&["ping", "-n", "-q", "-c", &c, "-i", "0.2", "-W", "1", "-w", &w, dst])?;
        let text = String::from_utf8_lossy(&out.stdout);
        // With a deadline (-w), ping sends until `count` replies came back,
        // so a slow first reply (ARP, a port coming up) can mean a few more
        // requests, and their replies too ("5 packets transmitted, 5
        // received" for -c 3 under load). `count` answered is the answer.
        Ok(parse_ping_received(&text).min(count))
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).stderr(Stdio::null()).status();
        if !self.port.is_empty() {
            let _ = Command::new("ip").args(["link", "del", &self.port]).stderr(Stdio::null()).status();
        }
    }
}

/// "3 packets transmitted, 3 received" -> 3.
pub fn parse_ping_received(text: &str) -> u32 {
    text.lines()
        .find(|l| l.contains("packets transmitted"))
        .and_then(|l| l.split(',').nth(1))
        .and_then(|s| s.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// The XDP programs attached to `ifname`, as `ip link` reports them.
pub fn xdp_attached(ifname: &str) -> bool {
    sh(&["ip", "-d", "link", "show", "dev", ifname])
        .map(|s| s.contains("prog/xdp") || s.contains(" xdp"))
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    #[test]
    fn ping_summary() {
        assert_eq!(super::parse_ping_received("3 packets transmitted, 2 received, 33% packet loss, time 402ms"), 2);
        assert_eq!(super::parse_ping_received("garbage"), 0);
    }
}

/// The `ovsdb-server` command the OVS/OVN harnesses start: database file
/// `dir/file`, served on `dir/sock`, with its pidfile, unixctl socket and
/// log named `dir/tag.*`, detached.
/// `ovn-northd` between the NB and SB databases served in `dir`
/// (`nb.sock`, `sb.sock`), detached, with its pid, control socket and log
/// there.
pub fn northd_args(dir: &str) -> Vec<String> {
    vec![
        "ovn-northd".into(),
        format!("--ovnnb-db=unix:{dir}/nb.sock"),
        format!("--ovnsb-db=unix:{dir}/sb.sock"),
        format!("--pidfile={dir}/northd.pid"),
        format!("--unixctl={dir}/northd.ctl"),
        format!("--log-file={dir}/northd.log"),
        "--detach".into(),
    ]
}

pub fn ovsdb_server_args(dir: &str, file: &str, sock: &str, tag: &str) -> Vec<String> {
    vec![
        "ovsdb-server".into(),
        format!("{dir}/{file}"),
        format!("--remote=punix:{dir}/{sock}"),
        format!("--pidfile={dir}/{tag}.pid"),
        format!("--unixctl={dir}/{tag}.ctl"),
        format!("--log-file={dir}/{tag}.log"),
        "--detach".into(),
    ]
}
