//! Fault injection against the daemon (issue 12): rule churn under
//! traffic, slow control clients and signals, file permissions under a
//! careless umask, hostile names, unsuitable devices, a second instance,
//! broken pipes, resubmit loops.
//!
//! Each test starts its own `xvs switch` with its own run directory and
//! its own namespaced hosts (names unique to the test and process), and
//! removes them through Drop guards, also when an assertion fails. Needs
//! root.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use xvs::netns::Host;

const XVS: &str = env!("CARGO_BIN_EXE_xvs");

struct Daemon {
    child: Child,
    run_dir: String,
    bridge: String,
}

fn run_dir(t: &str) -> String {
    format!("/tmp/xvs-safe-{t}-{}", std::process::id())
}

impl Daemon {
    /// Starts `xvs switch` and waits for its control socket.
    fn start(t: &str, ports: &[&str], extra: &[&str]) -> Daemon {
        let run_dir = run_dir(t);
        let _ = std::fs::remove_dir_all(&run_dir);
        Self::start_in(&run_dir, &format!("br{t}"), ports, extra, None)
    }

    fn start_in(run_dir: &str, bridge: &str, ports: &[&str], extra: &[&str], umask: Option<u32>) -> Daemon {
        let mut cmd = Command::new(XVS);
        cmd.args(["switch", "--run-dir", run_dir, "--bridge", bridge, "--no-local-port"]);
        for p in ports {
            cmd.args(["--port", p]);
        }
        cmd.args(extra);
        if let Some(m) = umask {
            // The daemon inherits the umask of whoever starts it.
            cmd = Command::new("sh");
            let mut line =
                format!("umask {m:03o}; exec {XVS} switch --run-dir {run_dir} --bridge {bridge} --no-local-port");
            for p in ports {
                line += &format!(" --port {p}");
            }
            for e in extra {
                line += &format!(" {e}");
            }
            cmd.args(["-c", &line]);
        }
        let child = cmd.stderr(Stdio::null()).stdout(Stdio::null()).spawn().unwrap();
        let d = Daemon { child, run_dir: run_dir.into(), bridge: bridge.into() };
        let ctl = format!("{}/xvs.ctl", d.run_dir);
        let t0 = Instant::now();
        while !std::path::Path::new(&ctl).exists() && t0.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(25));
        }
        d
    }

    fn mgmt(&self) -> String {
        format!("unix:{}/{}.mgmt", self.run_dir, self.bridge)
    }

    fn ofctl(&self, args: &[&str]) -> String {
        let o = Command::new("ovs-ofctl").arg(args[0]).arg(self.mgmt()).args(&args[1..]).output().unwrap();
        assert!(o.status.success(), "ovs-ofctl {args:?}: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into()
    }

    fn cli(&self, args: &[&str]) -> std::process::Output {
        Command::new(XVS).args(args).args(["--run-dir", &self.run_dir]).output().unwrap()
    }

    fn pmd_stats(&self) -> serde_json::Value {
        let o = self.cli(&["pmd-stats", "--json"]);
        assert!(o.status.success(), "pmd-stats: {}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).unwrap()
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
    std::env::set_var("XVS_BIN", XVS);
    let id = std::process::id() % 1000;
    (1..=n)
        .map(|i| {
            Host::create(
                &format!("xvss{t}{id}h{i}"),
                &format!("xs{t}{id}h{i}"),
                &format!("10.79.{}.{i}/24", t.len()),
                1,
            )
            .unwrap()
        })
        .collect()
}

/// An unrelated ping at 200 pps loses nothing while 30,000 rules are added
/// one flow_mod each (no bundle) and then deleted, twice.
#[test]
fn rule_churn_loses_no_packet() {
    let hs = hosts("churn", 2);
    let d = Daemon::start("churn", &[&hs[0].port, &hs[1].port], &[]);
    assert_eq!(hs[0].ping(&hs[1].ip, 2).unwrap(), 2, "NORMAL forwards");
    let rules = format!("{}/rules.txt", d.run_dir);
    let mut text = String::new();
    for i in 0..30_000u32 {
        text += &format!(
            "cookie=0x77,priority=5,tcp,nw_dst=10.{}.{}.{},tp_dst=80,actions=drop\n",
            200 + i / 65536,
            i / 256 % 256,
            i % 256
        );
    }
    std::fs::write(&rules, text).unwrap();
    let ping = Command::new("ip")
        .args(["netns", "exec", &hs[0].ns, "ping", "-n", "-q", "-i", "0.005", "-W", "2", &hs[1].ip])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    struct Ping(Option<Child>);
    impl Drop for Ping {
        fn drop(&mut self) {
            if let Some(c) = &mut self.0 {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
    let mut ping = Ping(Some(ping));
    std::thread::sleep(Duration::from_millis(500));
    for _ in 0..2 {
        d.ofctl(&["add-flows", &rules]);
        assert!(d.ofctl(&["dump-aggregate", "cookie=0x77/-1"]).contains("flow_count=30000"));
        d.ofctl(&["del-flows", "cookie=0x77/-1"]);
    }
    std::thread::sleep(Duration::from_millis(500));
    let mut child = ping.0.take().unwrap();
    // SIGINT: ping prints its summary.
    Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    let mut out = String::new();
    child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    child.wait().unwrap();
    let line = out.lines().find(|l| l.contains("packets transmitted")).unwrap_or_else(|| panic!("ping said: {out}"));
    let nums: Vec<u64> = line.split(|c: char| !c.is_ascii_digit()).filter_map(|x| x.parse().ok()).collect();
    let (tx, rx) = (nums[0], nums[1]);
    assert!(tx > 200, "the ping ran through the churn: {line}");
    assert_eq!(tx, rx, "no packet lost while rules changed: {line}");
    let st = &d.pmd_stats()["pmds"][0];
    assert_eq!(st["upcall_busy"], 0, "{st}");
    // The poll thread met the writer at least sometimes, and parked rather than dropped.
    eprintln!("parked packets during churn: {}", st["upcall_deferred"]);
}
