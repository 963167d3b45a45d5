//! The client against a real ovsdb-server, configured with ovs-vsctl.
//!
//! Plan. Setup: a fresh database from Debian's vswitch.ovsschema served by
//! ovsdb-server on a unix socket in a temp dir (one per test, so tests run
//! in parallel). Actions: ovs-vsctl adds bridges, afxdp/tagged/trunk/patch
//! ports, a bad xdp-mode, controllers; a loop in the test mirrors next_cfg
//! into cur_cfg through the client; the server is restarted. Verified: the
//! typed model (including the error text naming the field), that a waiting
//! ovs-vsctl returns promptly, that ofport/error/ovs_version written back
//! read the same through ovs-vsctl, and that the client reconnects.

mod common;

use common::{wait_for, OvsdbServer};
use ovsdb::writeback::{self, Actual, IfaceFacts};
use ovsdb::{Client, Event, FailMode, IfaceKind, VlanMode, XdpMode};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[test]
fn typed_model_from_ovs_vsctl() {
    let s = OvsdbServer::start();
    s.vsctl(&["--no-wait", "add-br", "br0", "--", "set", "bridge", "br0", "datapath_type=netdev"]);
    s.vsctl(&[
        "--no-wait",
        "add-port",
        "br0",
        "p0",
        "--",
        "set",
        "interface",
        "p0",
        "type=afxdp",
        "options:xdp-mode=native",
        "options:n_rxq=2",
        "ofport_request=7",
    ]);
    s.vsctl(&["--no-wait", "set", "port", "p0", "tag=10"]);
    s.vsctl(&[
        "--no-wait",
        "add-port",
        "br0",
        "t0",
        "--",
        "set",
        "port",
        "t0",
        "trunks=10,20",
        "vlan_mode=trunk",
        "--",
        "set",
        "interface",
        "t0",
        "type=system",
    ]);
    s.vsctl(&["--no-wait", "add-br", "br1", "--", "set", "bridge", "br1", "datapath_type=netdev"]);
    s.vsctl(&["--no-wait", "add-port", "br0", "pa", "--", "set", "interface", "pa", "type=patch", "options:peer=pb"]);
    s.vsctl(&["--no-wait", "add-port", "br1", "pb", "--", "set", "interface", "pb", "type=patch", "options:peer=pa"]);
    s.vsctl(&[
        "--no-wait",
        "add-port",
        "br0",
        "p1",
        "--",
        "set",
        "interface",
        "p1",
        "type=afxdp",
        "options:xdp-mode=bogus",
    ]);
    s.vsctl(&["--no-wait", "add-port", "br0", "v0", "--", "set", "interface", "v0", "type=vxlan"]);
    s.vsctl(&["--no-wait", "set-controller", "br0", "tcp:127.0.0.1:6653"]);
    s.vsctl(&["--no-wait", "set-fail-mode", "br0", "secure"]);
    s.vsctl(&[
        "--no-wait",
        "set",
        "bridge",
        "br0",
        "protocols=OpenFlow10,OpenFlow13",
        "other_config:datapath-id=00000000000000ab",
        "other_config:hwaddr=02:00:00:00:00:01",
    ]);
    s.vsctl(&[
        "--no-wait",
        "set",
        "open_vswitch",
        ".",
        "other_config:pmd-cpu-mask=0x6",
        "other_config:flow-restore-wait=true",
    ]);
    s.vsctl(&[
        "--no-wait",
        "--",
        "--id=@m",
        "create",
        "mirror",
        "name=m0",
        "select_all=true",
        "--",
        "add",
        "bridge",
        "br0",
        "mirrors",
        "@m",
    ]);

    let mut c = Client::connect(&s.remote()).unwrap();
    let d = wait_for(&mut c, "the whole configuration", |d| d.pmd_cpu_mask.is_some() && d.bridges.len() == 2);
    assert!(d.flow_restore_wait);
    assert_eq!(d.pmd_cpu_mask, Some(6));
    let br0 = d.bridge("br0").unwrap();
    assert_eq!(br0.datapath_type, "netdev");
    assert_eq!(br0.fail_mode, FailMode::Secure);
    assert_eq!(br0.protocols, vec!["OpenFlow10", "OpenFlow13"]);
    assert_eq!(br0.datapath_id, Some(0xab));
    assert_eq!(br0.hwaddr, Some([2, 0, 0, 0, 0, 1]));
    assert_eq!(br0.controllers, vec!["tcp:127.0.0.1:6653"]);
    assert_eq!(br0.mirrors.len(), 1);
    assert!(br0.mirrors[0].select_all);
    let names: Vec<&str> = br0.ports.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, vec!["br0", "p0", "p1", "pa", "t0", "v0"]);
    let port = |n: &str| br0.ports.iter().find(|p| p.name == n).unwrap();
    assert_eq!(port("p0").tag, Some(10));
    assert_eq!(port("t0").trunks, vec![10, 20]);
    assert_eq!(port("t0").vlan_mode, Some(VlanMode::Trunk));
    assert_eq!(d.interface("br0").unwrap().kind, IfaceKind::Internal);
    assert_eq!(d.interface("t0").unwrap().kind, IfaceKind::System);
    let p0 = d.interface("p0").unwrap();
    assert_eq!(p0.kind, IfaceKind::Afxdp { xdp_mode: XdpMode::Native, need_wakeup: true, n_rxq: 2 });
    assert_eq!(p0.ofport_request, Some(7));
    assert_eq!(p0.error, None);
    assert_eq!(d.interface("pa").unwrap().kind, IfaceKind::Patch { peer: "pb".into() });
    assert_eq!(d.interface("pb").unwrap().kind, IfaceKind::Patch { peer: "pa".into() });
    assert_eq!(
        d.interface("p1").unwrap().error.as_deref(),
        Some("options:xdp-mode: \"bogus\" is not one of native, generic, best-effort, native-with-zerocopy")
    );
    // A tunnel without its remote: the error names the missing option.
    assert!(d.interface("v0").unwrap().error.as_deref().unwrap().starts_with("options:remote_ip: missing"));

    // Fixing the option clears the error; the rest is untouched.
    s.vsctl(&["--no-wait", "set", "interface", "p1", "options:xdp-mode=generic"]);
    let d = wait_for(&mut c, "p1 fixed", |d| d.interface("p1").is_some_and(|i| i.error.is_none()));
    assert_eq!(
        d.interface("p1").unwrap().kind,
        IfaceKind::Afxdp { xdp_mode: XdpMode::Generic, need_wakeup: true, n_rxq: 1 }
    );
    assert_eq!(d.bridges.len(), 2);
}

/// The switch side of the test: mirrors next_cfg into cur_cfg and writes
/// ofports, as the daemon will.
fn run_switch(remote: String, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u32> {
    std::thread::spawn(move || {
        let mut c = Client::connect(&remote).unwrap();
        c.lock("ovs_vswitchd");
        let mut writes = 0;
        while !stop.load(Ordering::Relaxed) {
            if let Some(Event::ReplicaChanged) = c.next_event(Duration::from_millis(50)) {
                let d = c.desired();
                let mut actual = Actual::default();
                for (i, (_, _, iface)) in d.interfaces().enumerate() {
                    let facts = IfaceFacts {
                        ofport: Some(iface.ofport_request.unwrap_or(i as u16 + 1)),
                        admin_up: Some(true),
                        link_up: Some(true),
                        mtu: Some(1500),
                        mac_in_use: Some([2, 0, 0, 0, 0, i as u8]),
                        ..Default::default()
                    };
                    actual.interfaces.insert(iface.name.clone(), facts);
                }
                for b in &d.bridges {
                    actual.datapath_ids.insert(b.name.clone(), b.datapath_id.unwrap_or(0x1234));
                }
                let ops = writeback::transaction(&d, c.replica(), &actual);
                if !ops.is_empty() {
                    c.transact_blocking(ops, Duration::from_secs(5)).expect("write-back transaction");
                    writes += 1;
                }
            }
        }
        writes
    })
}

#[test]
fn waiting_ovs_vsctl_returns_and_writeback_is_visible() {
    let s = OvsdbServer::start();
    let stop = Arc::new(AtomicBool::new(false));
    let switch = run_switch(s.remote(), stop.clone());

    // Without --no-wait, ovs-vsctl waits until cur_cfg reaches its next_cfg.
    let t0 = Instant::now();
    s.vsctl(&["add-br", "br0", "--", "set", "bridge", "br0", "datapath_type=netdev"]);
    s.vsctl(&["add-port", "br0", "p0", "--", "set", "interface", "p0", "type=afxdp", "options:xdp-mode=native"]);
    s.vsctl(&["add-port", "br0", "p1", "--", "set", "interface", "p1", "type=afxdp", "options:xdp-mode=bogus"]);
    let took = t0.elapsed();
    assert!(took < Duration::from_secs(6), "three waiting ovs-vsctl calls took {took:?}");

    let cur: i64 = s.vsctl(&["get", "open_vswitch", ".", "cur_cfg"]).parse().unwrap();
    let next: i64 = s.vsctl(&["get", "open_vswitch", ".", "next_cfg"]).parse().unwrap();
    assert_eq!(cur, next);
    let p0 = s.vsctl(&["get", "interface", "p0", "ofport"]);
    assert!(p0.parse::<i64>().unwrap() > 0, "ofport {p0}");
    assert_eq!(s.vsctl(&["get", "interface", "p0", "link_state"]), "up");
    assert_eq!(s.vsctl(&["get", "interface", "p0", "mtu"]), "1500");
    assert_eq!(s.vsctl(&["get", "interface", "p1", "ofport"]), "-1");
    assert_eq!(
        s.vsctl(&["get", "interface", "p1", "error"]),
        r#""options:xdp-mode: \"bogus\" is not one of native, generic, best-effort, native-with-zerocopy""#
    );
    assert_eq!(s.vsctl(&["get", "bridge", "br0", "datapath_id"]), "\"0000000000001234\"");
    assert_eq!(s.vsctl(&["get", "open_vswitch", ".", "datapath_types"]), "[netdev]");
    assert!(s.vsctl(&["get", "open_vswitch", ".", "ovs_version"]).starts_with("\"xvs "));
    assert!(s.vsctl(&["get", "open_vswitch", ".", "iface_types"]).contains("afxdp"));
    let caps = s.vsctl(&["list", "datapath"]);
    assert!(caps.contains("masked_set_action"), "{caps}");
    // The ofport request is honoured and read back.
    s.vsctl(&["set", "interface", "p0", "ofport_request=42"]);
    assert_eq!(s.vsctl(&["get", "interface", "p0", "ofport"]), "42");

    // Writes settle: nothing is written once the database agrees.
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    let writes = switch.join().unwrap();
    assert!(writes < 20, "write-back kept writing: {writes} transactions");
}

#[test]
fn reconnects_after_server_restart() {
    let mut s = OvsdbServer::start();
    s.vsctl(&["--no-wait", "add-br", "br0"]);
    let mut c = Client::connect(&s.remote()).unwrap();
    wait_for(&mut c, "br0", |d| d.bridge("br0").is_some());

    s.restart();
    s.vsctl(&["--no-wait", "add-br", "br1"]);
    let d = wait_for(&mut c, "br1 after restart", |d| d.bridge("br1").is_some());
    assert!(d.bridge("br0").is_some());
    assert!(c.is_connected());

    // A server that is down for a while: the client keeps retrying.
    s.stop();
    let t0 = Instant::now();
    let mut saw_disconnect = false;
    while t0.elapsed() < Duration::from_secs(1) {
        if let Some(Event::Disconnected(_)) = c.next_event(Duration::from_millis(100)) {
            saw_disconnect = true;
        }
    }
    assert!(saw_disconnect);
    assert!(c.transact(vec![]).is_err(), "no transactions while down");
    s.restart();
    s.vsctl(&["--no-wait", "del-br", "br0"]);
    wait_for(&mut c, "br0 gone after second restart", |d| d.bridge("br0").is_none() && d.bridge("br1").is_some());
}

#[test]
fn tcp_remote() {
    let s = OvsdbServer::start();
    // Ask the running server for an extra TCP remote on a free port.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let ctl = s.dir.path("db.ctl");
    let ok = std::process::Command::new("ovs-appctl")
        .arg("-t")
        .arg(&ctl)
        .args(["ovsdb-server/add-remote", &format!("ptcp:{port}:127.0.0.1")])
        .status()
        .unwrap();
    assert!(ok.success());
    s.vsctl(&["--no-wait", "add-br", "brt"]);
    let mut c = Client::connect(&format!("tcp:127.0.0.1:{port}")).unwrap();
    wait_for(&mut c, "brt over tcp", |d| d.bridge("brt").is_some());
    let r =
        c.transact_blocking(vec![serde_json::json!({"op": "comment", "comment": "xvs test"})], Duration::from_secs(5));
    assert!(r.is_ok(), "{r:?}");
}
