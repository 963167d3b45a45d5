//! OVN over two hypervisors, for tests: NB and SB ovsdb-servers and
//! ovn-northd in the root namespace; two hypervisors, each a network
//! namespace running its own ovsdb-server, its own switch (xvs with
//! `--db`, or Open vSwitch 3.1 as the reference) and its own
//! ovn-controller; an underlay between them (a Linux bridge in a third
//! namespace, one veth per hypervisor, MTU 1600) over which ovn-controller's
//! Geneve tunnels run. VMs are namespaces whose veth peer is in their
//! hypervisor's namespace, bound by `external_ids:iface-id`.
//!
//! Each hypervisor is set up as OVS documents userspace tunneling:
//! `br-phy` (netdev) holds the underlay port and the tunnel endpoint
//! address sits on br-phy's local port; `br-int` (netdev, fail-mode
//! secure) belongs to ovn-controller, which adds the tunnel ports itself.
//! Debian's ovn-central/ovn-host (23.03) run unchanged. Every name carries
//! the process id and a tag, so set-ups can run side by side; everything
//! is removed on drop, also after a failed assertion (`XVS_KEEP=1` keeps
//! the directory with the logs). OVS runs inside the
//! hypervisor namespaces, so its `ovs-netdev` device does not collide with
//! the root namespace's (no need for the OVS reference lock).

use crate::netns::Host;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The switch a hypervisor runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Switch {
    Xvs,
    Ovs,
}

impl Switch {
    /// `s`, unless the environment says `XVS_SWITCH=ovs` (then OVS on
    /// every hypervisor: the anchor for any scenario).
    pub fn or_env(s: Switch) -> Switch {
        if std::env::var("XVS_SWITCH").as_deref() == Ok("ovs") {
            Switch::Ovs
        } else {
            s
        }
    }
}

/// Underlay network: 172.31.77.0/24; hypervisor N has 172.31.77.N, the
/// middle bridge .254.
const UNDERLAY: &str = "172.31.77";

/// One hypervisor: a namespace with ovsdb-server, a switch and
/// ovn-controller.
pub struct Hypervisor {
    /// "hv1", "hv2": also the chassis name (system-id).
    pub name: String,
    /// Its network namespace.
    pub ns: String,
    /// Its directory (database, logs, pid files).
    pub dir: String,
    pub switch: Switch,
    /// The tunnel endpoint address on br-phy.
    pub encap_ip: String,
    xvs: Option<Child>,
}

impl Hypervisor {
    /// Kills the switch (xvs or ovs-vswitchd) with SIGKILL, as a crash or
    /// a failed host would stop it; ovn-controller stays up.
    pub fn kill_switch(&mut self) {
        if let Some(mut c) = self.xvs.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        if let Some(pid) = self.switch_pid() {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
    }

    /// The switch's process id (xvs, or ovs-vswitchd).
    pub fn switch_pid(&self) -> Option<u32> {
        match &self.xvs {
            Some(c) => Some(c.id()),
            None => std::fs::read_to_string(format!("{}/ovs-vswitchd.pid", self.dir)).ok()?.trim().parse().ok(),
        }
    }

    /// Stops (SIGSTOP) or continues (SIGCONT) the switch process, so that
    /// a benchmark can run two switches pinned to one core in turns: the
    /// stopped one takes no CPU and its packets wait in its rings.
    pub fn pause(&self, stop: bool) {
        if let Some(pid) = self.switch_pid() {
            let sig = if stop { "-STOP" } else { "-CONT" };
            let _ = Command::new("kill").args([sig, &pid.to_string()]).status();
        }
    }

    /// Where the switch's sockets are (`br-int.mgmt`, the appctl socket).
    pub fn run_dir(&self) -> String {
        match self.switch {
            Switch::Ovs => self.dir.clone(),
            Switch::Xvs => format!("{}/run", self.dir),
        }
    }

    /// Runs a command in the root namespace with this hypervisor's run
    /// directories in its environment (ovs-vsctl, ovs-appctl, ovs-ofctl
    /// reach the switch through unix sockets); panics if it fails.
    pub fn run(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.try_run(args);
        assert!(ok, "{}: {args:?}: {err}", self.name);
        out
    }

    /// Like [`Hypervisor::run`], returning (success, stdout, stderr).
    pub fn try_run(&self, args: &[&str]) -> (bool, String, String) {
        output(self.command(false, args))
    }

    /// Runs a command inside the hypervisor's namespace; panics if it fails.
    pub fn exec(&self, args: &[&str]) -> String {
        let (ok, out, err) = output(self.command(true, args));
        assert!(ok, "{}: ip netns exec {args:?}: {err}", self.name);
        out
    }

    fn command(&self, in_ns: bool, args: &[&str]) -> Command {
        let mut c = if in_ns {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", &self.ns]).args(args);
            c
        } else {
            let mut c = Command::new(args[0]);
            c.args(&args[1..]);
            c
        };
        c.env("OVS_RUNDIR", self.run_dir())
            .env("OVN_RUNDIR", &self.dir)
            .env("OVS_DBDIR", &self.dir)
            .env("OVS_LOGDIR", &self.dir)
            .stdin(Stdio::null());
        c
    }

    pub fn vsctl(&self, args: &[&str]) -> String {
        let db = format!("--db=unix:{}/db.sock", self.dir);
        let mut a = vec!["ovs-vsctl", db.as_str(), "--timeout=30"];
        a.extend_from_slice(args);
        self.run(&a)
    }

    /// `ovs-appctl` on the switch (xvs answers the same commands).
    pub fn appctl(&self, args: &[&str]) -> String {
        let mut a = vec!["ovs-appctl"];
        a.extend_from_slice(args);
        let (_, out, err) = self.try_run(&a);
        format!("{out}{err}")
    }

    /// br-int's OpenFlow flows as ovn-controller installed them.
    pub fn flows(&self) -> String {
        let (_, out, err) =
            self.try_run(&["ovs-ofctl", "-OOpenFlow15", "dump-flows", &format!("unix:{}/br-int.mgmt", self.run_dir())]);
        format!("{out}{err}")
    }

    /// The MTU of device `dev` in the hypervisor's namespace (0 if none).
    pub fn mtu(&self, dev: &str) -> u32 {
        let (_, out, _) = output(self.command(true, &["cat", &format!("/sys/class/net/{dev}/mtu")]));
        out.trim().parse().unwrap_or(0)
    }

    /// The switch's log.
    pub fn switch_log(&self) -> String {
        let f = match self.switch {
            Switch::Ovs => "vswitchd.log",
            Switch::Xvs => "xvs.log",
        };
        std::fs::read_to_string(format!("{}/{f}", self.dir)).unwrap_or_default()
    }

    /// ovn-controller's log.
    pub fn controller_log(&self) -> String {
        std::fs::read_to_string(format!("{}/ovnc.log", self.dir)).unwrap_or_default()
    }

    /// What to look at when traffic between hypervisors fails: the
    /// switch's tunnel ports, neighbours and routes, its datapath flows,
    /// br-int's OpenFlow flows, the ports in the database and the tail of
    /// the switch's log.
    pub fn diagnostics(&self) -> String {
        let mut s = format!("===== {} ({:?}) =====\n", self.name, self.switch);
        let cmds =
            ["tnl/ports/show", "tnl/neigh/show", "ovs/route/show", "dpctl/dump-flows", "dpctl/show", "dpif/show"];
        for cmd in cmds {
            s += &format!("--- ovs-appctl {cmd}\n{}\n", self.appctl(&[cmd]));
        }
        let (_, show, err) = self.try_run(&["ovs-vsctl", &format!("--db=unix:{}/db.sock", self.dir), "show"]);
        s += &format!("--- ovs-vsctl show\n{show}{err}\n");
        s += &format!("--- ip addr (in {})\n{}\n", self.ns, output(self.command(true, &["ip", "addr"])).1);
        let flows = self.flows();
        s += &format!("--- ovs-ofctl dump-flows br-int ({} lines; tables 0, 37-40, 65 shown)\n", flows.lines().count());
        for l in flows.lines() {
            if ["table=0,", "table=37,", "table=38,", "table=39,", "table=40,", "table=65,"]
                .iter()
                .any(|t| l.contains(t))
            {
                s += l;
                s.push('\n');
            }
        }
        let log = self.switch_log();
        let tail: Vec<&str> = log.lines().rev().take(40).collect();
        s += &format!("--- switch log (last {} lines)\n", tail.len());
        for l in tail.into_iter().rev() {
            s += l;
            s.push('\n');
        }
        s
    }
}

/// Runs a command; (success, stdout, stderr).
fn output(mut c: Command) -> (bool, String, String) {
    match c.output() {
        Ok(o) => (
            o.status.success(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        ),
        Err(e) => (false, String::new(), e.to_string()),
    }
}

/// Runs a command, panicking with its stderr if it fails.
fn must(args: &[&str]) -> String {
    let mut c = Command::new(args[0]);
    c.args(&args[1..]).stdin(Stdio::null());
    let (ok, out, err) = output(c);
    assert!(ok, "{args:?}: {err}");
    out
}

/// NB/SB and northd, an underlay, and the hypervisors.
pub struct Multi {
    /// The run directory of the whole set-up.
    pub dir: String,
    /// The underlay's middle namespace; its `ifname` is the Linux bridge.
    pub underlay: Host,
    pub hvs: Vec<Hypervisor>,
    /// The VMs, with the index of their hypervisor.
    vms: Vec<(Host, usize)>,
    /// Short prefix of every name (namespaces, interfaces).
    tag: String,
    /// Namespaces to delete on drop (the hypervisors').
    namespaces: Vec<String>,
}

impl Multi {
    /// OVN's tools, ovsdb-server, ovs-vswitchd and tcpdump installed, and
    /// running as root? Otherwise why not.
    pub fn unavailable() -> Option<String> {
        let root = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).map(|l| l.split_whitespace().nth(1) == Some("0")))
            .unwrap_or(false);
        if !root {
            return Some("needs root".into());
        }
        for tool in ["ovn-controller", "ovn-northd", "ovn-nbctl", "ovsdb-server", "ovs-vswitchd", "tcpdump"] {
            if Command::new(tool).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_err() {
                return Some(format!("needs {tool} (scripts/setup.sh installs ovn-central, ovn-host, tcpdump)"));
            }
        }
        None
    }

    /// Starts NB/SB and northd, the underlay, and one hypervisor per entry
    /// of `switches` (hv1 at 172.31.77.1, hv2 at .2, ...). `tag` (at most
    /// 2 characters) tells set-ups of one process apart.
    pub fn start(xvs_bin: &str, tag: &str, switches: &[Switch]) -> Multi {
        Multi::start_with(xvs_bin, tag, switches, &[])
    }

    /// As [`Multi::start`], with `Open_vSwitch` `other_config` entries
    /// (`key=value`) set in every hypervisor's database before its switch
    /// starts (the benchmark pins poll threads with `pmd-cpu-mask`).
    pub fn start_with(xvs_bin: &str, tag: &str, switches: &[Switch], other_config: &[&str]) -> Multi {
        let each: Vec<(Switch, &str)> = switches.iter().map(|&s| (s, xvs_bin)).collect();
        Multi::start_each(tag, &each, other_config)
    }

    /// As [`Multi::start_with`], with each hypervisor's switch and the xvs
    /// binary it runs (two xvs builds side by side, for a benchmark's A/B).
    pub fn start_each(tag: &str, switches: &[(Switch, &str)], other_config: &[&str]) -> Multi {
        let pid = std::process::id();
        let tag = format!("m{}{tag}", pid % 100_000);
        let dir = format!("/tmp/xvs-ovnm-{pid}-{tag}");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mid = format!("xvs{tag}u");
        let _ = Command::new("ip").args(["netns", "del", &mid]).stderr(Stdio::null()).status();
        must(&["ip", "netns", "add", &mid]);
        let underlay = Host {
            ns: mid.clone(),
            ifname: "br0".into(),
            port: String::new(),
            ip: format!("{UNDERLAY}.254"),
            mac: String::new(),
        };
        let mut m = Multi { dir: dir.clone(), underlay, hvs: Vec::new(), vms: Vec::new(), tag, namespaces: Vec::new() };
        let d = dir.as_str();
        let ul = &m.underlay;
        ul.exec(&["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"]).unwrap();
        ul.exec(&["sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1"]).unwrap();
        ul.exec(&["ip", "link", "add", "br0", "mtu", "1600", "type", "bridge"]).unwrap();
        ul.exec(&["ip", "addr", "add", &format!("{UNDERLAY}.254/24"), "dev", "br0"]).unwrap();
        ul.exec(&["ip", "link", "set", "br0", "up"]).unwrap();
        ul.exec(&["ip", "link", "set", "lo", "up"]).unwrap();
        // Northbound, southbound, northd.
        for (db, schema) in [("nb", "/usr/share/ovn/ovn-nb.ovsschema"), ("sb", "/usr/share/ovn/ovn-sb.ovsschema")] {
            must(&["ovsdb-tool", "create", &format!("{d}/{db}.db"), schema]);
            let args = crate::netns::ovsdb_server_args(d, &format!("{db}.db"), &format!("{db}.sock"), db);
            must(&args.iter().map(String::as_str).collect::<Vec<_>>());
        }
        must(&crate::netns::northd_args(d).iter().map(String::as_str).collect::<Vec<_>>());
        for (i, (s, xvs_bin)) in switches.iter().enumerate() {
            let hv = m.hypervisor(xvs_bin, i + 1, *s, other_config);
            m.hvs.push(hv);
        }
        m
    }

    fn hypervisor(&mut self, xvs_bin: &str, n: usize, switch: Switch, other_config: &[&str]) -> Hypervisor {
        let name = format!("hv{n}");
        let ns = format!("xvs{}h{n}", self.tag);
        let dir = format!("{}/{name}", self.dir);
        std::fs::create_dir_all(format!("{dir}/run")).unwrap();
        let _ = Command::new("ip").args(["netns", "del", &ns]).stderr(Stdio::null()).status();
        must(&["ip", "netns", "add", &ns]);
        self.namespaces.push(ns.clone());
        let mut hv = Hypervisor {
            name: name.clone(),
            ns: ns.clone(),
            dir: dir.clone(),
            switch,
            encap_ip: format!("{UNDERLAY}.{n}"),
            xvs: None,
        };
        let d = dir.as_str();
        hv.exec(&["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"]);
        hv.exec(&["sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1"]);
        hv.exec(&["ip", "link", "set", "lo", "up"]);
        // The underlay: "ul0" in the hypervisor, "hvN" on the bridge.
        let mid = &self.underlay.ns;
        must(&[
            "ip", "-n", mid, "link", "add", &name, "mtu", "1600", "type", "veth", "peer", "name", "ul0", "netns", &ns,
            "mtu", "1600",
        ]);
        must(&["ip", "-n", mid, "link", "set", &name, "master", "br0", "up"]);
        if switch == Switch::Ovs {
            // OVS 3.1 does not finish partial checksums (its documentation
            // says to turn transmit offload off); xvs's hypervisors keep
            // Linux's defaults on the same links.
            self.underlay.exec(&["ethtool", "-K", &name, "tx", "off"]).unwrap(); // why: OVS only, see above
            hv.exec(&["ethtool", "-K", "ul0", "tx", "off"]); // why: OVS only, see above
        }
        hv.exec(&["ip", "link", "set", "ul0", "up"]);
        // The hypervisor's database, switch and bridges.
        must(&["ovsdb-tool", "create", &format!("{d}/conf.db"), "/usr/share/openvswitch/vswitch.ovsschema"]);
        let args = crate::netns::ovsdb_server_args(d, "conf.db", "db.sock", "ovsdb");
        hv.exec(&args.iter().map(String::as_str).collect::<Vec<_>>());
        hv.run(&["ovs-vsctl", &format!("--db=unix:{d}/db.sock"), "--no-wait", "init"]);
        for kv in other_config {
            hv.run(&[
                "ovs-vsctl",
                &format!("--db=unix:{d}/db.sock"),
                "--no-wait",
                "set",
                "Open_vSwitch",
                ".",
                &format!("other_config:{kv}"),
            ]);
        }
        match switch {
            Switch::Ovs => {
                hv.exec(&[
                    "ovs-vswitchd",
                    &format!("unix:{d}/db.sock"),
                    &format!("--pidfile={d}/ovs-vswitchd.pid"),
                    &format!("--log-file={d}/vswitchd.log"),
                    "--detach",
                ]);
            }
            Switch::Xvs => {
                let log = std::fs::File::create(format!("{d}/xvs.log")).unwrap();
                let child = Command::new("ip")
                    .args(["netns", "exec", &ns, xvs_bin, "switch", "--db", &format!("unix:{d}/db.sock")])
                    .args(["--run-dir", &format!("{d}/run")])
                    .stdin(Stdio::null())
                    .stdout(log.try_clone().unwrap())
                    .stderr(log)
                    .spawn()
                    .unwrap();
                hv.xvs = Some(child);
            }
        }
        let ul_type = match switch {
            Switch::Xvs => "type=afxdp",
            // OVS's netdev datapath reads the veth through an AF_PACKET
            // socket (the plain "system" type).
            Switch::Ovs => "type=system",
        };
        hv.vsctl(&[
            "add-br",
            "br-phy",
            "--",
            "set",
            "bridge",
            "br-phy",
            "datapath_type=netdev",
            "--",
            "add-port",
            "br-phy",
            "ul0",
            "--",
            "set",
            "interface",
            "ul0",
            ul_type,
            // The tunnel's route device is br-phy: give it the underlay's
            // MTU, so 1500-byte frames fit once encapsulated.
            "--",
            "set",
            "interface",
            "br-phy",
            "mtu_request=1600",
        ]);
        let up = eventually(10, || hv.try_run(&["ip", "-n", &ns, "link", "show", "br-phy"]).0);
        assert!(up, "{name}: br-phy's local port never appeared:\n{}", hv.switch_log());
        hv.exec(&["ip", "addr", "add", &format!("{}/24", hv.encap_ip), "dev", "br-phy"]);
        hv.exec(&["ip", "link", "set", "br-phy", "up"]);
        hv.vsctl(&["add-br", "br-int", "--", "set", "bridge", "br-int", "datapath_type=netdev", "fail-mode=secure"]);
        hv.vsctl(&[
            "set",
            "open",
            ".",
            &format!("external_ids:system-id={name}"),
            &format!("external_ids:ovn-remote=unix:{}/sb.sock", self.dir),
            "external_ids:ovn-encap-type=geneve",
            &format!("external_ids:ovn-encap-ip={}", hv.encap_ip),
            "external_ids:ovn-bridge-datapath-type=netdev",
        ]);
        hv.exec(&[
            "ovn-controller",
            &format!("unix:{d}/db.sock"),
            &format!("--pidfile={d}/ovnc.pid"),
            &format!("--log-file={d}/ovnc.log"),
            "--detach",
        ]);
        hv
    }

    /// A VM on hypervisor `hv` (0-based): a namespace whose eth0 (MAC, IP
    /// in a /24, gateway) is bound to the logical port of the same name.
    pub fn vm(&mut self, hv: usize, name: &str, mac: &str, ip: &str, gw: &str) {
        let port = format!("{}{name}", self.tag);
        let h = Host::create(&format!("xvs{}{name}", self.tag), &port, &format!("{ip}/24"), 1).unwrap();
        h.exec(&["ip", "link", "set", "eth0", "address", mac]).unwrap();
        h.exec(&["ip", "route", "add", "default", "via", gw]).unwrap();
        let hyp = &self.hvs[hv];
        if hyp.switch == Switch::Ovs {
            // As for the underlay (see `hypervisor`): for OVS only.
            h.tx_csum_off_for_ovs().unwrap();
        }
        // The switch-side end moves into the hypervisor.
        must(&["ip", "link", "set", &port, "netns", &hyp.ns]);
        hyp.exec(&["ip", "link", "set", &port, "up"]);
        let ty = match hyp.switch {
            Switch::Xvs | Switch::Ovs => "type=afxdp",
        };
        hyp.vsctl(&[
            "add-port",
            "br-int",
            &port,
            "--",
            "set",
            "interface",
            &port,
            ty,
            &format!("external_ids:iface-id={name}"),
        ]);
        self.vms.push((h, hv));
    }

    /// A provider network `physnet` reaching hypervisors `hvs` (0-based):
    /// a second Linux bridge (`br1`) in the underlay namespace, a veth from
    /// each of those hypervisors' `br-ex` (mapped with
    /// `ovn-bridge-mappings=PHYSNET:br-ex`) to it, and an external host on
    /// it at `ip` (a /24) with `gw` as its default route.
    pub fn provider_network(&mut self, hvs: &[usize], physnet: &str, ip: &str, gw: &str) -> Host {
        let mid = self.underlay.ns.clone();
        if self.underlay.exec(&["ip", "link", "show", "br1"]).is_err() {
            self.underlay.exec(&["ip", "link", "add", "br1", "type", "bridge"]).unwrap();
            self.underlay.exec(&["ip", "link", "set", "br1", "up"]).unwrap();
        }
        for &i in hvs {
            let hyp = &self.hvs[i];
            let peer = format!("x{}", hyp.name);
            must(&["ip", "-n", &mid, "link", "add", &peer, "type", "veth", "peer", "name", "ext0", "netns", &hyp.ns]);
            must(&["ip", "-n", &mid, "link", "set", &peer, "master", "br1", "up"]);
            if hyp.switch == Switch::Ovs {
                // As for the underlay (see `hypervisor`): for OVS only.
                self.underlay.exec(&["ethtool", "-K", &peer, "tx", "off"]).unwrap(); // why: OVS only, see above
                hyp.exec(&["ethtool", "-K", "ext0", "tx", "off"]); // why: OVS only, see above
            }
            hyp.exec(&["ip", "link", "set", "ext0", "up"]);
            let ty = match hyp.switch {
                Switch::Xvs => "type=afxdp",
                Switch::Ovs => "type=system",
            };
            hyp.vsctl(&[
                "add-br",
                "br-ex",
                "--",
                "set",
                "bridge",
                "br-ex",
                "datapath_type=netdev",
                "--",
                "add-port",
                "br-ex",
                "ext0",
                "--",
                "set",
                "interface",
                "ext0",
                ty,
            ]);
            hyp.vsctl(&["set", "open", ".", &format!("external_ids:ovn-bridge-mappings={physnet}:br-ex")]);
        }
        let port = format!("{}xh", self.tag);
        let h = Host::create(&format!("xvs{}xh", self.tag), &port, &format!("{ip}/24"), 1).unwrap();
        h.exec(&["ip", "route", "add", "default", "via", gw]).unwrap();
        if hvs.iter().any(|&i| self.hvs[i].switch == Switch::Ovs) {
            // As for the underlay (see `hypervisor`): for OVS only.
            h.tx_csum_off_for_ovs().unwrap();
        }
        must(&["ip", "link", "set", &port, "netns", &mid]);
        must(&["ip", "-n", &mid, "link", "set", &port, "master", "br1", "up"]);
        h
    }

    /// The `i`th VM (in the order [`Multi::vm`] created them).
    pub fn host(&self, i: usize) -> &Host {
        &self.vms[i].0
    }

    pub fn nbctl(&self, args: &[&str]) -> String {
        let db = format!("--db=unix:{}/nb.sock", self.dir);
        let mut a = vec!["ovn-nbctl", db.as_str()];
        a.extend_from_slice(args);
        must(&a)
    }

    pub fn sbctl(&self, args: &[&str]) -> String {
        let db = format!("--db=unix:{}/sb.sock", self.dir);
        let mut a = vec!["ovn-sbctl", db.as_str()];
        a.extend_from_slice(args);
        must(&a)
    }

    /// Waits until every hypervisor has applied the northbound state.
    pub fn sync(&self) {
        let o = Command::new("timeout")
            .args(["30", "ovn-nbctl", &format!("--db=unix:{}/nb.sock", self.dir), "--wait=hv", "sync"])
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "ovn-nbctl --wait=hv sync: {}\n{}",
            String::from_utf8_lossy(&o.stderr),
            self.diagnostics()
        );
    }

    /// Waits up to `secs` until every hypervisor has a working Geneve port
    /// (one with an OpenFlow port number) to each of the others.
    pub fn wait_tunnels(&self, secs: u64) -> bool {
        eventually(secs, || {
            self.hvs.iter().all(|hv| {
                // A port the switch accepted has an OpenFlow port number.
                let (_, out, _) = hv.try_run(&[
                    "ovs-vsctl",
                    &format!("--db=unix:{}/db.sock", hv.dir),
                    "--bare",
                    "--columns=ofport",
                    "find",
                    "interface",
                    "type=geneve",
                ]);
                let ofports: Vec<i64> = out.split_whitespace().filter_map(|p| p.parse().ok()).collect();
                ofports.len() == self.hvs.len() - 1 && ofports.iter().all(|&p| p > 0)
            })
        })
    }

    /// Diagnostics of every hypervisor.
    pub fn diagnostics(&self) -> String {
        self.hvs.iter().map(Hypervisor::diagnostics).collect()
    }

    /// What tcpdump on the underlay bridge sees of Geneve (UDP 6081),
    /// verbosely (options decoded), while `during` runs.
    pub fn capture_geneve(&self, during: impl FnOnce()) -> String {
        self.underlay.capture(&["-vv", "udp", "port", "6081"], during).unwrap()
    }

    /// The logical network: switch ls1 (vm1 10.0.1.1 on hv1, vm2 10.0.1.2
    /// on hv2), switch ls2 (vm3 10.0.2.1 on hv2), router lr1 between them.
    pub fn two_switches_and_a_router(&mut self) {
        crate::ovnref::logical_router_between_two_switches(|a| {
            self.nbctl(a);
        });
        let last = self.hvs.len() - 1;
        for (hv, ls, vm, mac, ip) in [
            (0, "ls1", "vm1", "00:00:00:00:01:01", "10.0.1.1"),
            (last, "ls1", "vm2", "00:00:00:00:01:02", "10.0.1.2"),
            (last, "ls2", "vm3", "00:00:00:00:02:01", "10.0.2.1"),
        ] {
            self.nbctl(&["lsp-add", ls, vm]);
            self.nbctl(&["lsp-set-addresses", vm, &format!("{mac} {ip}")]);
            let gw = if ls == "ls1" { "10.0.1.254" } else { "10.0.2.254" };
            self.vm(hv, vm, mac, ip, gw);
        }
        self.sync();
    }
}

impl Drop for Multi {
    fn drop(&mut self) {
        let mut pids = Vec::new();
        for hv in &self.hvs {
            for p in ["ovnc", "ovs-vswitchd", "ovsdb"] {
                pids.push(format!("{}/{p}.pid", hv.dir));
            }
        }
        for p in ["northd", "nb", "sb"] {
            pids.push(format!("{}/{p}.pid", self.dir));
        }
        for f in pids {
            if let Ok(pid) = std::fs::read_to_string(&f) {
                let _ = Command::new("kill").arg(pid.trim()).stderr(Stdio::null()).status();
            }
        }
        for hv in &mut self.hvs {
            if let Some(mut x) = hv.xvs.take() {
                let _ = x.kill();
                let _ = x.wait();
            }
        }
        std::thread::sleep(Duration::from_millis(300));
        // VM namespaces (their veths go with them), then the hypervisors',
        // then the underlay (the Host drop).
        self.vms.clear();
        for ns in &self.namespaces {
            let _ = Command::new("ip").args(["netns", "del", ns]).stderr(Stdio::null()).status();
        }
        if std::env::var_os("XVS_KEEP").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

pub use crate::ovnref::eventually;
