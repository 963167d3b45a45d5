//! ovs/route/* through the real ovs-appctl: the switch's view of the
//! routing table (what native tunneling resolves remotes with) is the
//! kernel's of the switch's namespace, plus routes the operator adds.
//!
//! Plan: a namespace with a veth pair, addresses and a route via a
//! gateway; `xvs switch` runs inside it on one end; ovs-appctl reads
//! ovs/route/show and ovs/route/lookup, adds and deletes a user route.
//! Removed also on failure. Needs root.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Guard(String, Option<Child>, String);
impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(c) = &mut self.1 {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
        let _ = std::fs::remove_dir_all(&self.2);
    }
}

fn ip(ns: &str, args: &str) {
    let mut v = vec!["-n", ns];
    v.extend(args.split_whitespace());
    assert!(Command::new("ip").args(&v).status().unwrap().success(), "ip {args}");
}

#[test]
fn route_commands_show_the_namespaces_routes_and_user_routes() {
    let id = std::process::id() % 100_000;
    let ns = format!("xvsrt{id}");
    let run = format!("/tmp/xvs-rt-{id}");
    let mut g = Guard(ns.clone(), None, run.clone());
    assert!(Command::new("ip").args(["netns", "add", &ns]).status().unwrap().success());
    ip(&ns, "link add rt0 type veth peer name rt1");
    ip(&ns, "addr add 172.30.9.1/24 dev rt0");
    ip(&ns, "link set rt0 up");
    ip(&ns, "link set rt1 up");
    ip(&ns, "route add 10.66.0.0/16 via 172.30.9.254");
    g.1 = Some(
        Command::new("ip")
            .args(["netns", "exec", &ns, env!("CARGO_BIN_EXE_xvs"), "switch", "--run-dir", &run, "--bridge", "brrt"])
            .args(["--no-local-port", "--port", "rt1"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let t0 = Instant::now();
    while !std::path::Path::new(&format!("{run}/xvs.ctl")).exists() && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(25));
    }
    let appctl = |args: &[&str]| {
        let o = Command::new("ovs-appctl").env("OVS_RUNDIR", &run).args(args).output().unwrap();
        (o.status.success(), String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr))
    };
    let (ok, show) = appctl(&["ovs/route/show"]);
    assert!(ok, "{show}");
    assert!(show.starts_with("Route Table:\n"), "{show}");
    assert!(show.contains("Cached: 10.66.0.0/16 dev rt0 GW 172.30.9.254"), "{show}");
    assert!(show.contains("Cached: 172.30.9.0/24 dev rt0"), "{show}");
    let (ok, l) = appctl(&["ovs/route/lookup", "10.66.3.4"]);
    assert!(ok && l.contains("src 172.30.9.1") && l.contains("gateway 172.30.9.254") && l.contains("dev rt0"), "{l}");
    // A user route wins for its prefix, and can be deleted again.
    let (ok, out) = appctl(&["ovs/route/add", "10.66.3.0/24", "rt0", "172.30.9.253"]);
    assert!(ok, "{out}");
    let (_, l) = appctl(&["ovs/route/lookup", "10.66.3.4"]);
    assert!(l.contains("gateway 172.30.9.253"), "{l}");
    let (_, show) = appctl(&["ovs/route/show"]);
    assert!(show.contains("User: 10.66.3.0/24 dev rt0 GW 172.30.9.253"), "{show}");
    let (ok, _) = appctl(&["ovs/route/del", "10.66.3.0/24"]);
    assert!(ok);
    let (_, l) = appctl(&["ovs/route/lookup", "10.66.3.4"]);
    assert!(l.contains("gateway 172.30.9.254"), "{l}");
    // Bad input is refused with a reason, and the switch keeps answering.
    let (ok, err) = appctl(&["ovs/route/add", "10.66.0.0/40", "rt0"]);
    assert!(!ok && err.contains("prefix length"), "{err}");
    let (ok, err) = appctl(&["ovs/route/del", "10.99.0.0/16"]);
    assert!(!ok && err.contains("Not found"), "{err}");
    assert!(appctl(&["ovs/route/show"]).0);
}
