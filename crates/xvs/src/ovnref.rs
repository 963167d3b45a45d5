//! OVN as the control plane of a switch, for tests and the demo: NB and
//! SB ovsdb-servers and ovn-northd, one hypervisor with its own
//! ovsdb-server, the switch (xvs with `--db`, or Open vSwitch 3.1 as the
//! reference) and ovn-controller, which finds br-int's management socket
//! through OVS_RUNDIR; VMs are network namespaces on br-int bound by
//! `external_ids:iface-id`. Debian's ovn-central/ovn-host (23.03), run
//! unchanged. Everything is removed on drop, also after a failure.

use crate::netns::Host;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Ovn {
    /// The run directory of the whole set-up (databases, logs, sockets).
    pub dir: String,
    xvs: Option<Child>,
    ovs: bool,
    _turn: Option<std::fs::File>,
    hosts: Vec<Host>,
}

impl Ovn {
    /// Runs a command with the set-up's OVS/OVN run directories in its
    /// environment; panics if it fails (test tooling).
    pub fn run(&self, args: &[&str]) -> String {
        let o = Command::new(args[0])
            .args(&args[1..])
            .env("OVS_RUNDIR", self.run_dir())
            .env("OVN_RUNDIR", &self.dir)
            .env("OVS_DBDIR", &self.dir)
            .env("OVS_LOGDIR", &self.dir)
            .output()
            .unwrap_or_else(|e| panic!("{args:?}: {e}"));
        assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// Where the switch's sockets are (`br-int.mgmt`, the appctl socket).
    pub fn run_dir(&self) -> String {
        if self.ovs {
            self.dir.clone()
        } else {
            format!("{}/run", self.dir)
        }
    }

    pub fn nbctl(&self, args: &[&str]) -> String {
        let db = format!("--db=unix:{}/nb.sock", self.dir);
        let mut a = vec!["ovn-nbctl", db.as_str()];
        a.extend_from_slice(args);
        self.run(&a)
    }

    pub fn vsctl(&self, args: &[&str]) -> String {
        let db = format!("--db=unix:{}/db.sock", self.dir);
        let mut a = vec!["ovs-vsctl", db.as_str(), "--timeout=30"];
        a.extend_from_slice(args);
        self.run(&a)
    }

    /// Starts NB/SB, northd, the hypervisor's ovsdb-server, the switch
    /// (`xvs_bin switch --db`, or ovs-vswitchd when `ovs`) with br-int, and
    /// ovn-controller.
    pub fn start(xvs_bin: &str, ovs: bool) -> Ovn {
        Ovn::start_with(xvs_bin, ovs, &[])
    }

    /// As [`Ovn::start`], with `Open_vSwitch` `other_config` entries
    /// (`key=value`) set before the switch starts (benchmarks pin the poll
    /// threads with `pmd-cpu-mask`, as OVS users do).
    pub fn start_with(xvs_bin: &str, ovs: bool, other_config: &[&str]) -> Ovn {
        let dir = format!("/tmp/xvs-ovn-{}", std::process::id());
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(format!("{dir}/run")).unwrap();
        // OVS's netdev datapath device has one fixed name: take turns with
        // the other OVS-backed tests.
        let turn = ovs.then(|| {
            let f = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open("/tmp/xvs-ovsref.lock")
                .unwrap();
            use std::os::fd::AsRawFd;
            netdev_linux::sys::lock_file_wait(f.as_raw_fd()).unwrap();
            f
        });
        let mut o = Ovn { dir: dir.clone(), xvs: None, ovs, _turn: turn, hosts: Vec::new() };
        for s in ["ovs-netdev", "br-int"] {
            let _ = Command::new("ip").args(["link", "del", s]).stderr(Stdio::null()).status();
        }
        let d = dir.as_str();
        for (db, schema) in [("nb", "/usr/share/ovn/ovn-nb.ovsschema"), ("sb", "/usr/share/ovn/ovn-sb.ovsschema")] {
            o.run(&["ovsdb-tool", "create", &format!("{d}/{db}.db"), schema]);
            let args = crate::netns::ovsdb_server_args(d, &format!("{db}.db"), &format!("{db}.sock"), db);
            o.run(&args.iter().map(String::as_str).collect::<Vec<_>>());
        }
        o.run(&crate::netns::northd_args(d).iter().map(String::as_str).collect::<Vec<_>>());
        // The hypervisor.
        o.run(&["ovsdb-tool", "create", &format!("{d}/conf.db"), "/usr/share/openvswitch/vswitch.ovsschema"]);
        let args = crate::netns::ovsdb_server_args(d, "conf.db", "db.sock", "ovsdb");
        o.run(&args.iter().map(String::as_str).collect::<Vec<_>>());
        let db = format!("--db=unix:{d}/db.sock");
        o.run(&["ovs-vsctl", &db, "--no-wait", "init"]);
        for kv in other_config {
            o.run(&["ovs-vsctl", &db, "--no-wait", "set", "Open_vSwitch", ".", &format!("other_config:{kv}")]);
        }
        if ovs {
            o.run(&[
                "ovs-vswitchd",
                &format!("unix:{d}/db.sock"),
                &format!("--pidfile={d}/vswitchd.pid"),
                &format!("--log-file={d}/vswitchd.log"),
                "--detach",
            ]);
        } else {
            let log = std::fs::File::create(format!("{d}/xvs.log")).unwrap();
            let child = Command::new(xvs_bin)
                .args(["switch", "--db", &format!("unix:{d}/db.sock"), "--run-dir", &format!("{d}/run")])
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .unwrap();
            o.xvs = Some(child);
        }
        o.vsctl(&["add-br", "br-int", "--", "set", "bridge", "br-int", "datapath_type=netdev", "fail-mode=secure"]);
        o.vsctl(&[
            "set",
            "open",
            ".",
            "external_ids:system-id=hv1",
            &format!("external_ids:ovn-remote=unix:{d}/sb.sock"),
            "external_ids:ovn-encap-type=geneve",
            "external_ids:ovn-encap-ip=192.168.77.1",
            "external_ids:ovn-bridge-datapath-type=netdev",
        ]);
        o.run(&[
            "ovn-controller",
            &format!("unix:{d}/db.sock"),
            &format!("--pidfile={d}/ovnc.pid"),
            &format!("--log-file={d}/ovnc.log"),
            "--detach",
        ]);
        o
    }

    /// A VM: a namespace whose eth0 (MAC, IP, gateway) is bound to the
    /// logical port of the same name.
    pub fn vm(&mut self, name: &str, mac: &str, ip: &str, gw: &str) {
        let id = std::process::id() % 1000;
        let h = Host::create(&format!("xvsovn{id}{name}"), &format!("xn{id}{name}"), &format!("{ip}/24"), 1).unwrap();
        h.exec(&["ip", "link", "set", "eth0", "address", mac]).unwrap();
        h.exec(&["ip", "route", "add", "default", "via", gw]).unwrap();
        self.vsctl(&[
            "add-port",
            "br-int",
            &h.port,
            "--",
            "set",
            "interface",
            &h.port,
            "type=afxdp",
            &format!("external_ids:iface-id={name}"),
        ]);
        self.hosts.push(h);
    }

    /// Waits until every hypervisor has applied the northbound state.
    pub fn sync(&self) {
        let d = &self.dir;
        let o = Command::new("timeout")
            .args(["30", "ovn-nbctl", &format!("--db=unix:{d}/nb.sock"), "--wait=hv", "sync"])
            .output()
            .unwrap();
        assert!(o.status.success(), "ovn-nbctl --wait=hv sync: {}", String::from_utf8_lossy(&o.stderr));
    }

    /// The switch's process id (xvs, or ovs-vswitchd).
    pub fn switch_pid(&self) -> Option<u32> {
        match &self.xvs {
            Some(c) => Some(c.id()),
            None => std::fs::read_to_string(format!("{}/vswitchd.pid", self.dir)).ok()?.trim().parse().ok(),
        }
    }

    pub fn host(&self, i: usize) -> &Host {
        &self.hosts[i]
    }
}

impl Drop for Ovn {
    fn drop(&mut self) {
        for p in ["ovnc", "northd", "vswitchd", "ovsdb", "nb", "sb"] {
            if let Ok(pid) = std::fs::read_to_string(format!("{}/{p}.pid", self.dir)) {
                let _ = Command::new("kill").arg(pid.trim()).status();
            }
        }
        if let Some(mut x) = self.xvs.take() {
            let _ = x.kill();
            let _ = x.wait();
        }
        std::thread::sleep(Duration::from_millis(300));
        self.hosts.clear();
        for s in ["ovs-netdev", "br-int"] {
            let _ = Command::new("ip").args(["link", "del", s]).stderr(Stdio::null()).status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Polls `f` for up to `secs` seconds.
pub fn eventually(secs: u64, mut f: impl FnMut() -> bool) -> bool {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(secs) {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    false
}

/// The northbound part of the logical network the OVN tests and the demo
/// use: switches ls1 (10.0.1.0/24) and ls2 (10.0.2.0/24), router lr1 with a
/// port on each (.254), written with `nbctl`. The VMs are the caller's.
pub fn logical_router_between_two_switches(mut nbctl: impl FnMut(&[&str])) {
    nbctl(&["ls-add", "ls1"]);
    nbctl(&["ls-add", "ls2"]);
    nbctl(&["lr-add", "lr1"]);
    for (ls, mac, net) in [("ls1", "00:00:00:00:ff:01", "10.0.1.254/24"), ("ls2", "00:00:00:00:ff:02", "10.0.2.254/24")]
    {
        let lrp = format!("lr1-{ls}");
        let lsp = format!("{ls}-lr1");
        nbctl(&["lrp-add", "lr1", &lrp, mac, net]);
        nbctl(&["lsp-add", ls, &lsp]);
        nbctl(&["lsp-set-type", &lsp, "router"]);
        nbctl(&["lsp-set-addresses", &lsp, "router"]);
        nbctl(&["lsp-set-options", &lsp, &format!("router-port={lrp}")]);
    }
}

impl Ovn {
    /// The logical network the test and the demo use: switch ls1 (vm1
    /// 10.0.1.1, vm2 10.0.1.2), switch ls2 (vm3 10.0.2.1), router lr1 between
    /// them; each VM a namespace bound to its logical port.
    pub fn two_switches_and_a_router(&mut self) {
        logical_router_between_two_switches(|a| {
            self.nbctl(a);
        });
        for (ls, vm, mac, ip) in [
            ("ls1", "vm1", "00:00:00:00:01:01", "10.0.1.1"),
            ("ls1", "vm2", "00:00:00:00:01:02", "10.0.1.2"),
            ("ls2", "vm3", "00:00:00:00:02:01", "10.0.2.1"),
        ] {
            self.nbctl(&["lsp-add", ls, vm]);
            self.nbctl(&["lsp-set-addresses", vm, &format!("{mac} {ip}")]);
            let gw = if ls == "ls1" { "10.0.1.254" } else { "10.0.2.254" };
            self.vm(vm, mac, ip, gw);
        }
        self.sync();
    }

    /// OVN's tools installed here?
    pub fn available() -> bool {
        Command::new("ovn-controller").arg("--version").stdout(Stdio::null()).status().is_ok()
            && Command::new("ovn-northd").arg("--version").stdout(Stdio::null()).status().is_ok()
    }
}
