//! Open vSwitch 3.1 as the reference switch in tests: a private
//! `ovsdb-server` and `ovs-vswitchd` (userspace datapath, AF_XDP ports)
//! with their own run directory, so any end-to-end scenario can run against
//! OVS as well as xvs and a failure points at xvs, not at the scenario.
//!
//! Both switches are driven the same way: `ovs-ofctl` on the bridge's
//! management socket, `ovs-appctl` through `OVS_RUNDIR`.

use crate::netns::sh;
use anyhow::{bail, Context, Result};
use std::process::Command;
use std::time::{Duration, Instant};

/// A running OVS with one netdev bridge.
pub struct Ovs {
    pub run_dir: String,
    pub bridge: String,
    /// Held while this OVS runs: the userspace datapath's `ovs-netdev`
    /// device has one fixed name per host, so two OVS instances cannot run
    /// at once; tests in parallel (in one binary or several) take turns.
    _turn: std::fs::File,
}

impl Ovs {
    /// Starts OVS with bridge `bridge` and an AF_XDP port per name in
    /// `ports` (ofports 1, 2, ... in order). Waits until the ports are up.
    pub fn start(tag: &str, bridge: &str, ports: &[&str]) -> Result<Ovs> {
        let turn = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open("/tmp/xvs-ovsref.lock")?;
        {
            use std::os::fd::AsRawFd;
            netdev_linux::sys::lock_file_wait(turn.as_raw_fd()).context("waiting for the OVS reference lock")?;
        }
        // A leftover from an instance that died without cleaning up.
        let _ = Command::new("ip").args(["link", "del", "ovs-netdev"]).stderr(std::process::Stdio::null()).status();
        let d = format!("/tmp/xvs-ovsref-{tag}-{}", std::process::id());
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d)?;
        let o = Ovs { run_dir: d.clone(), bridge: bridge.to_string(), _turn: turn };
        let env = [("OVS_RUNDIR", d.as_str()), ("OVS_DBDIR", d.as_str()), ("OVS_LOGDIR", d.as_str())];
        let run = |args: &[&str]| -> Result<String> {
            let out = Command::new(args[0])
                .args(&args[1..])
                .envs(env)
                .output()
                .with_context(|| format!("running {}", args[0]))?;
            if !out.status.success() {
                bail!("{args:?}: {}", String::from_utf8_lossy(&out.stderr).trim());
            }
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        };
        run(&["ovsdb-tool", "create", &format!("{d}/conf.db"), "/usr/share/openvswitch/vswitch.ovsschema"])?;
        run(&[
            "ovsdb-server",
            &format!("{d}/conf.db"),
            &format!("--remote=punix:{d}/db.sock"),
            &format!("--pidfile={d}/ovsdb-server.pid"),
            "--detach",
            &format!("--log-file={d}/ovsdb.log"),
        ])?;
        let db = format!("--db=unix:{d}/db.sock");
        run(&["ovs-vsctl", &db, "--no-wait", "init"])?;
        run(&[
            "ovs-vswitchd",
            &format!("unix:{d}/db.sock"),
            &format!("--pidfile={d}/ovs-vswitchd.pid"),
            "--detach",
            &format!("--log-file={d}/vswitchd.log"),
        ])?;
        run(&["ovs-vsctl", &db, "add-br", bridge, "--", "set", "bridge", bridge, "datapath_type=netdev"])?;
        for (i, p) in ports.iter().enumerate() {
            run(&[
                "ovs-vsctl",
                &db,
                "add-port",
                bridge,
                p,
                "--",
                "set",
                "interface",
                p,
                "type=afxdp",
                &format!("ofport_request={}", i + 1),
            ])?;
        }
        let t0 = Instant::now();
        loop {
            let ok = ports.iter().all(|p| {
                run(&["ovs-vsctl", &db, "get", "interface", p, "ofport"])
                    .is_ok_and(|s| s.trim().parse::<i64>().is_ok_and(|n| n > 0))
            });
            if ok {
                break;
            }
            if t0.elapsed() > Duration::from_secs(15) {
                bail!(
                    "OVS ports did not come up: {}",
                    std::fs::read_to_string(format!("{d}/vswitchd.log")).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(o)
    }

    /// The `ovs-ofctl` target of the bridge.
    pub fn target(&self) -> String {
        format!("unix:{}/{}.mgmt", self.run_dir, self.bridge)
    }
}

impl Drop for Ovs {
    fn drop(&mut self) {
        for f in ["ovs-vswitchd", "ovsdb-server"] {
            if let Ok(pid) = std::fs::read_to_string(format!("{}/{f}.pid", self.run_dir)) {
                let _ = sh(&["kill", "-9", pid.trim()]);
            }
        }
        std::thread::sleep(Duration::from_millis(200));
        // The netdev datapath's own devices (its `ovs-netdev` tap has a
        // fixed name: instances take turns through the lock above).
        for dev in [self.bridge.as_str(), "ovs-netdev"] {
            let _ = Command::new("ip").args(["link", "del", dev]).stderr(std::process::Stdio::null()).status();
        }
        let _ = std::fs::remove_dir_all(&self.run_dir);
    }
}

/// The switch an end-to-end test drives: xvs, or Open vSwitch 3.1 when the
/// environment says `XVS_SWITCH=ovs` (OVS instances take turns, see
/// [`Ovs`]). Both are driven the same way, so a scenario
/// that passes on OVS and fails on xvs points at xvs.
pub struct Sut {
    child: Option<std::process::Child>,
    pub run_dir: String,
    pub bridge: String,
    ovs: Option<Ovs>,
}

impl Sut {
    /// Starts the switch with bridge `bridge` and `ports` (ofports 1, 2,
    /// ... in order); `xvs_bin` and `extra` are for xvs (its binary and
    /// switch options).
    pub fn start(xvs_bin: &str, tag: &str, bridge: &str, ports: &[&str], extra: &[&str]) -> Sut {
        if std::env::var("XVS_SWITCH").as_deref() == Ok("ovs") {
            let o = Ovs::start(tag, bridge, ports).expect("Open vSwitch starts");
            return Sut { child: None, run_dir: o.run_dir.clone(), bridge: bridge.into(), ovs: Some(o) };
        }
        let run_dir = format!("/tmp/xvs-sut-{tag}-{}", std::process::id());
        let _ = std::fs::remove_dir_all(&run_dir);
        let mut cmd = Command::new(xvs_bin);
        cmd.args(["switch", "--run-dir", &run_dir, "--bridge", bridge, "--no-local-port"]);
        for p in ports {
            cmd.args(["--port", p]);
        }
        cmd.args(extra);
        let child =
            cmd.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).spawn().expect("xvs starts");
        // Ready when the bridge's OpenFlow socket exists (what callers use
        // first). Starting takes about 1.5 s with four AF_XDP ports alone,
        // 6-7 s with four such switches starting at once on two cores, and
        // more under the traffic of parallel tests: 10 s was too short
        // there (the defaults matrix saw `ovs-ofctl: connecting to
        // .../<bridge>.mgmt (No such file or directory)`).
        let t0 = Instant::now();
        let ready = |f: &str| std::path::Path::new(&format!("{run_dir}/{f}")).exists();
        while !(ready("xvs.ctl") && ready(&format!("{bridge}.mgmt"))) && t0.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(25));
        }
        Sut { child: Some(child), run_dir, bridge: bridge.into(), ovs: None }
    }

    /// Open vSwitch 3.1 whatever `XVS_SWITCH` says: the reference beside
    /// an xvs [`Sut`] in tests that compare the two dumps for one input
    /// (OVS's netdev datapath device has a fixed name: one such test at a
    /// time per machine).
    pub fn start_ovs(tag: &str, bridge: &str, ports: &[&str]) -> Sut {
        let o = Ovs::start(tag, bridge, ports).expect("Open vSwitch starts");
        Sut { child: None, run_dir: o.run_dir.clone(), bridge: bridge.into(), ovs: Some(o) }
    }

    pub fn is_ovs(&self) -> bool {
        self.ovs.is_some()
    }

    /// "xvs" or "OVS 3.1", for test output.
    pub fn name(&self) -> &'static str {
        if self.is_ovs() {
            "OVS 3.1"
        } else {
            "xvs"
        }
    }

    /// ovs-ofctl on the bridge (options first): success, and stdout with
    /// stderr after it.
    pub fn ofctl(&self, args: &[&str]) -> (bool, String) {
        let target = format!("unix:{}/{}.mgmt", self.run_dir, self.bridge);
        let (opts, rest): (Vec<&str>, Vec<&str>) = args.iter().partition(|a| a.starts_with('-'));
        let o = Command::new("ovs-ofctl")
            .args(&opts)
            .arg(rest[0])
            .arg(&target)
            .args(&rest[1..])
            .output()
            .expect("ovs-ofctl runs");
        (o.status.success(), String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr))
    }

    /// ovs-ofctl that must succeed; its stdout.
    pub fn ofctl_ok(&self, args: &[&str]) -> String {
        let (ok, out) = self.ofctl(args);
        assert!(ok, "ovs-ofctl {args:?}: {out}");
        out
    }

    /// ovs-appctl against the switch (found through OVS_RUNDIR).
    pub fn appctl(&self, args: &[&str]) -> (bool, String) {
        let o =
            Command::new("ovs-appctl").env("OVS_RUNDIR", &self.run_dir).args(args).output().expect("ovs-appctl runs");
        (o.status.success(), String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr))
    }

    /// ovs-appctl that must succeed; its output.
    pub fn appctl_ok(&self, args: &[&str]) -> String {
        let (ok, out) = self.appctl(args);
        assert!(ok, "ovs-appctl {args:?}: {out}");
        out
    }

    /// The OpenFlow number of port `name` (from ovs-ofctl show).
    pub fn ofport(&self, name: &str) -> u32 {
        let show = self.ofctl_ok(&["show"]);
        let line =
            show.lines().find(|l| l.contains(&format!("({name})"))).unwrap_or_else(|| panic!("{name} in {show}"));
        line.trim().split('(').next().and_then(|n| n.trim().parse().ok()).expect("a port number")
    }
}

impl Drop for Sut {
    fn drop(&mut self) {
        if let Some(c) = &mut self.child {
            let _ = c.kill();
            let _ = c.wait();
            let _ = std::fs::remove_dir_all(&self.run_dir);
        }
    }
}

/// An `ovs-ofctl dump-flows/dump-groups/dump-meters` output with what
/// differs between two switches holding the same state removed: durations,
/// ages and packet/byte counters; the reply header line; blank lines.
/// Sorted: OVS dumps flows in its classifier's order, not by priority.
pub fn normalise_dump(dump: &str) -> Vec<String> {
    let mut v: Vec<String> = dump
        .lines()
        .filter(|l| {
            !l.trim().is_empty() && !l.contains("_REPLY") && !l.starts_with("OFPST_") && !l.starts_with("NXST_")
        })
        .map(|l| {
            l.trim()
                .split(", ")
                .filter(|w| {
                    !["duration=", "n_packets=", "n_bytes=", "idle_age=", "hard_age=", "packet_count=", "byte_count="]
                        .iter()
                        .any(|p| w.starts_with(p))
                })
                .collect::<Vec<_>>()
                .join(", ")
        })
        .collect();
    v.sort();
    v
}
