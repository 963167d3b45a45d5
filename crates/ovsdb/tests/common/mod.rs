//! Test fixture: a real ovsdb-server (Debian's openvswitch-switch) with the
//! Open_vSwitch schema, in its own temporary directory, killed and removed
//! on drop (also when the test panics), plus an ovs-vsctl helper.
#![allow(dead_code, reason = "each test file uses a different subset")]

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

pub const SCHEMA: &str = "/usr/share/openvswitch/vswitch.ovsschema";

/// A fresh directory under /tmp, unique per process and call (short, so
/// socket paths stay under the 108-byte limit), removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let p = std::env::temp_dir().join(format!(
            "xvs-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("create temp dir");
        TempDir(p)
    }
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub struct OvsdbServer {
    child: Option<Child>,
    pub sock: PathBuf,
    pub db: PathBuf,
    ctl: PathBuf,
    pub dir: TempDir,
}

impl OvsdbServer {
    pub fn start() -> OvsdbServer {
        let dir = TempDir::new("ovsdb");
        let db = dir.path("conf.db");
        let ok = Command::new("ovsdb-tool").arg("create").arg(&db).arg(SCHEMA).status().expect("run ovsdb-tool");
        assert!(ok.success(), "ovsdb-tool create failed");
        let mut s = OvsdbServer { child: None, sock: dir.path("db.sock"), ctl: dir.path("db.ctl"), db, dir };
        s.spawn();
        s.vsctl(&["--no-wait", "init"]);
        s
    }

    fn spawn(&mut self) {
        let _ = std::fs::remove_file(&self.sock);
        let child = Command::new("ovsdb-server")
            .arg(&self.db)
            .arg(format!("--remote=punix:{}", self.sock.display()))
            .arg(format!("--unixctl={}", self.ctl.display()))
            .arg("--no-chdir")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn ovsdb-server");
        self.child = Some(child);
        let t0 = Instant::now();
        while !self.sock.exists() {
            assert!(t0.elapsed() < Duration::from_secs(10), "ovsdb-server did not create its socket");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Kill and start again on the same database and socket path.
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    pub fn remote(&self) -> String {
        format!("unix:{}", self.sock.display())
    }

    /// Runs ovs-vsctl against this server; panics if it fails.
    pub fn vsctl(&self, args: &[&str]) -> String {
        let out = self.vsctl_output(args);
        assert!(out.status.success(), "ovs-vsctl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    pub fn vsctl_output(&self, args: &[&str]) -> Output {
        Command::new("ovs-vsctl")
            .arg(format!("--db={}", self.remote()))
            .arg("--timeout=20")
            .args(args)
            .output()
            .expect("run ovs-vsctl")
    }
}

impl Drop for OvsdbServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Pumps the client until `pred` holds on the desired state, or panics.
pub fn wait_for(c: &mut ovsdb::Client, what: &str, pred: impl Fn(&ovsdb::Desired) -> bool) -> ovsdb::Desired {
    let t0 = Instant::now();
    loop {
        let d = c.desired();
        if pred(&d) {
            return d;
        }
        assert!(t0.elapsed() < Duration::from_secs(15), "timed out waiting for {what}; last: {d:#?}");
        c.next_event(Duration::from_millis(100));
    }
}
