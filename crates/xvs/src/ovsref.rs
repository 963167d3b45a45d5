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
}

impl Ovs {
    /// Starts OVS with bridge `bridge` and an AF_XDP port per name in
    /// `ports` (ofports 1, 2, ... in order). Waits until the ports are up.
    pub fn start(tag: &str, bridge: &str, ports: &[&str]) -> Result<Ovs> {
        let d = format!("/tmp/xvs-ovsref-{tag}-{}", std::process::id());
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d)?;
        let o = Ovs { run_dir: d.clone(), bridge: bridge.to_string() };
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
        // The netdev datapath's own devices (its `ovs-netdev` tap is one per
        // process with a fixed name: run OVS-backed tests one at a time).
        for dev in [self.bridge.as_str(), "ovs-netdev"] {
            let _ = Command::new("ip").args(["link", "del", dev]).stderr(std::process::Stdio::null()).status();
        }
        let _ = std::fs::remove_dir_all(&self.run_dir);
    }
}
