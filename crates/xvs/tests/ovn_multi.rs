//! OVN over two hypervisors: Debian's ovn-northd and one ovn-controller
//! 23.03 per hypervisor, unchanged, each hypervisor a namespace with its
//! own ovsdb-server and switch, joined by Geneve tunnels over an underlay
//! bridge (see `xvs::ovnmulti`).
//!
//! The same scenario runs with OVS 3.1 on both hypervisors (the anchor: if
//! it fails, the scenario is wrong), xvs on both, and xvs facing OVS both ways (the
//! two must agree on the wire). `XVS_SWITCH=ovs` puts OVS on both sides of
//! every test. The logical network: switch ls1 with vm1 (hv1) and vm2
//! (hv2), switch ls2 with vm3 (hv2), router lr1 between them. Checked with
//! real traffic: ping and a TCP stream vm1 -> vm2 through the tunnel (the
//! underlay shows Geneve with OVN's option, class 0x102), ping vm1 -> vm3
//! through the distributed router, a load balancer VIP on ls1 whose
//! backend (vm3) is on the other hypervisor, then stateful ACLs on ls1
//! (allow-related TCP to vm2, drop the rest to vm2). Needs root,
//! ovn-central/ovn-host and tcpdump; skipped otherwise.

use std::sync::Mutex;
use std::time::Instant;
use xvs::ovnmulti::{eventually, Multi, Switch};

/// The set-ups are heavy for a small machine (six daemons per
/// hypervisor pair and AF_XDP ports): the tests of this file take turns.
static TURN: Mutex<()> = Mutex::new(());

/// OVN with `switches` (each may be overridden by `XVS_SWITCH=ovs`), this
/// test's turn held; `None` (and a message) when the tools are missing.
fn start(tag: &str, switches: &[Switch]) -> Option<(Multi, std::sync::MutexGuard<'static, ()>, Instant)> {
    if let Some(why) = Multi::unavailable() {
        eprintln!("skipped: {why}");
        return None;
    }
    let turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let t0 = Instant::now();
    std::env::set_var("XVS_BIN", env!("CARGO_BIN_EXE_xvs"));
    let switches: Vec<Switch> = switches.iter().map(|s| Switch::or_env(*s)).collect();
    eprintln!("switches: {switches:?}");
    Some((Multi::start(env!("CARGO_BIN_EXE_xvs"), tag, &switches), turn, t0))
}

fn scenario(tag: &str, hv1: Switch, hv2: Switch) {
    let Some((mut m, _turn, t0)) = start(tag, &[hv1, hv2]) else { return };
    m.two_switches_and_a_router();
    let (vm1, vm2, vm3) = (m.host(0), m.host(1), m.host(2));
    // First without a tunnel: vm2 and vm3 are both on hv2.
    assert!(
        eventually(15, || vm2.ping(&vm3.ip, 1).unwrap() == 1),
        "vm2 -> vm3 through lr1, both on hv2 (no tunnel)\n{}",
        m.hvs[1].diagnostics()
    );
    assert!(
        m.wait_tunnels(20),
        "no working Geneve port (one with an ofport) to the other hypervisor\n{}",
        m.diagnostics()
    );
    eprintln!("set up in {:.1} s", t0.elapsed().as_secs_f64());
    eprintln!("ovn-sbctl show:\n{}", m.sbctl(&["show"]));

    // Logical switch, across the tunnel: ping, with the underlay watched.
    assert!(
        eventually(15, || vm1.ping(&vm2.ip, 1).unwrap() == 1),
        "vm1 (hv1) -> vm2 (hv2) on ls1\n{}",
        m.diagnostics()
    );
    let mut replies = 0;
    let wire = m.capture_geneve(|| replies = vm1.ping(&vm2.ip, 3).unwrap());
    assert_eq!(replies, 3, "ls1 across the tunnel\n{}", m.diagnostics());
    // Counted by their UDP port: tcpdump names a frame by its ports, and
    // one whose source port (a flow hash, 32768-60999) is 49152 prints as
    // "BCM-LI-SHIM" instead of "Geneve".
    let geneve = wire.lines().filter(|l| l.contains(".6081: ")).count();
    assert!(geneve >= 6, "the underlay shows the pings in Geneve ({geneve} lines):\n{wire}");
    assert!(
        wire.contains("0x102"),
        "the Geneve frames carry OVN's option (class 0x102):\n{}",
        wire.lines().take(12).collect::<Vec<_>>().join("\n")
    );
    eprintln!("underlay (first lines):\n{}", wire.lines().take(4).collect::<Vec<_>>().join("\n"));
    let got = vm1.tcp_stream(vm2, 5201, 1_000_000);
    assert_eq!(got.as_ref().ok(), Some(&1_000_000), "TCP vm1 -> vm2 across the tunnel: {got:?}\n{}", m.diagnostics());

    // The distributed router: routed on hv1, delivered on hv2.
    assert!(eventually(10, || vm1.ping(&vm3.ip, 1).unwrap() == 1), "vm1 -> vm3 through lr1\n{}", m.diagnostics());
    assert_eq!(vm1.ping(&vm3.ip, 3).unwrap(), 3, "lr1 across the tunnel");
    for hv in &m.hvs {
        eprintln!(
            "{} ({:?}): br-int has {} OpenFlow flows; br-phy's MTU is {} (mtu_request=1600)",
            hv.name,
            hv.switch,
            hv.flows().lines().count(),
            hv.mtu("br-phy")
        );
    }

    // A load balancer on ls1 (in vm1's hypervisor: conntrack, DNAT) whose
    // backend is vm3 on the other one. The VIP is in ls1's subnet, where
    // OVN answers no ARP for it: vm1 sends it to the router's MAC.
    m.nbctl(&["lb-add", "lb1", "10.0.1.100:80", "10.0.2.1:8080", "tcp"]);
    m.nbctl(&["ls-lb-add", "ls1", "lb1"]);
    m.sync();
    vm1.exec(&["ip", "neigh", "replace", "10.0.1.100", "lladdr", "00:00:00:00:ff:01", "dev", "eth0"]).unwrap();
    let got = vm1.tcp_stream_via("10.0.1.100:80", vm3, 8080, 200_000);
    assert!(got.as_ref().is_ok_and(|&n| n == 200_000), "the VIP's stream: {got:?}\n{}", m.diagnostics());

    // Stateful ACLs on ls1: vm2 accepts TCP to port 5202 from vm1 (and
    // its replies), nothing else it did not ask for.
    m.nbctl(&[
        "acl-add",
        "ls1",
        "to-lport",
        "1002",
        "outport == \"vm2\" && ip4.src == 10.0.1.1 && tcp.dst == 5202",
        "allow-related",
    ]);
    m.nbctl(&["acl-add", "ls1", "to-lport", "1001", "outport == \"vm2\" && ip4", "drop"]);
    m.sync();
    assert!(eventually(10, || vm1.ping(&vm2.ip, 1).unwrap() == 0), "the drop ACL stops ICMP to vm2");
    let got = vm1.tcp_stream(vm2, 5202, 200_000);
    assert_eq!(
        got.as_ref().ok(),
        Some(&200_000),
        "allow-related lets TCP to vm2:5202 through: {got:?}\n{}",
        m.diagnostics()
    );
    assert_eq!(vm2.ping(&vm1.ip, 2).unwrap(), 2, "replies to what vm2 started pass the drop ACL (conntrack)");
    assert_eq!(vm1.ping(&vm3.ip, 2).unwrap(), 2, "vm3 is not behind the ACL");
    for hv in &m.hvs {
        eprintln!(
            "{} ({:?}): br-int has {} OpenFlow flows (with LB and ACLs)",
            hv.name,
            hv.switch,
            hv.flows().lines().count()
        );
    }
    // OVN's ARP responders answer with replies, on the asking VM's
    // hypervisor: the router's for the gateway (vm1 on hv1, vm2 on hv2),
    // the logical switch's for vm1's address (vm2 on hv2). A responder
    // that lost `arp_op = 2` sends the request back; the VM still learns
    // the address from it, so pings pass anyway.
    let checks = [
        (vm1, 0, &[&vm3.ip][..], &["Reply 10.0.1.254 is-at 00:00:00:00:ff:01"][..]),
        (
            vm2,
            1,
            &[&vm1.ip, &vm3.ip],
            &["Reply 10.0.1.1 is-at 00:00:00:00:01:01", "Reply 10.0.1.254 is-at 00:00:00:00:ff:01"],
        ),
    ];
    for (vm, hv, dsts, replies) in checks {
        vm.exec(&["ip", "neigh", "flush", "dev", "eth0"]).unwrap();
        let arp = vm
            .capture(&["arp"], || {
                for d in dsts {
                    let _ = vm.ping(d, 1);
                }
            })
            .unwrap();
        for reply in replies {
            assert!(
                arp.contains(reply),
                "{} got no ARP \"{reply}\" from {}; it saw:\n{arp}\n{}",
                vm.ns,
                m.hvs[hv].name,
                m.hvs[hv].diagnostics()
            );
        }
    }
    // The routers' learned neighbours (each is two flows on every br-int).
    let macs = m.sbctl(&["--bare", "--columns=logical_port,ip", "list", "mac_binding"]);
    eprintln!("MAC_Binding: {}", macs.split_whitespace().collect::<Vec<_>>().join(" "));
    if std::env::var_os("XVS_KEEP").is_some() {
        for hv in &m.hvs {
            let _ = std::fs::write(format!("{}/br-int-flows.txt", hv.dir), hv.flows());
        }
    }
    eprintln!("passed in {:.1} s", t0.elapsed().as_secs_f64());
}

#[test]
fn two_hypervisors_ovs_ovs() {
    scenario("oo", Switch::Ovs, Switch::Ovs);
}

#[test]
fn two_hypervisors_xvs_xvs() {
    scenario("xx", Switch::Xvs, Switch::Xvs);
}

#[test]
fn two_hypervisors_xvs_ovs() {
    scenario("xo", Switch::Xvs, Switch::Ovs);
}

/// The other way round: OVS on the VIP's client side, xvs on the side of
/// the backend and of the ACLs' target.
#[test]
fn two_hypervisors_ovs_xvs() {
    scenario("ox", Switch::Ovs, Switch::Xvs);
}

/// OVN's HA gateway on three hypervisors: a distributed gateway port with
/// two gateway chassis (hv2 priority 20, hv3 priority 10) onto a provider
/// network (a localnet port; a Linux bridge joined to hv2's and hv3's
/// br-ex, with an external host on it). ovn-controller turns on BFD
/// between the chassis and sends the gateway's traffic from hv1 with
/// `bundle(...,active_backup,...)`. A VM on hv1 reaches the external host
/// through hv2; when hv2's switch is killed, BFD notices, hv3 claims the
/// gateway port and the traffic flows through it.
fn ha_gateway(tag: &str, sw: Switch) {
    let Some((mut m, _turn, t0)) = start(tag, &[sw, sw, sw]) else { return };
    for a in [
        &["ls-add", "inside"][..],
        &["ls-add", "outside"],
        &["lr-add", "r"],
        &["lrp-add", "r", "r-in", "00:00:00:00:0a:01", "10.0.10.1/24"],
        &["lrp-add", "r", "r-out", "00:00:00:00:0b:01", "172.16.10.1/24"],
        &["lrp-set-gateway-chassis", "r-out", "hv2", "20"],
        &["lrp-set-gateway-chassis", "r-out", "hv3", "10"],
        &["lsp-add", "inside", "in-r"],
        &["lsp-set-type", "in-r", "router"],
        &["lsp-set-addresses", "in-r", "router"],
        &["lsp-set-options", "in-r", "router-port=r-in"],
        &["lsp-add", "outside", "out-r"],
        &["lsp-set-type", "out-r", "router"],
        &["lsp-set-addresses", "out-r", "router"],
        &["lsp-set-options", "out-r", "router-port=r-out"],
        &["lsp-add", "outside", "ln-out"],
        &["lsp-set-type", "ln-out", "localnet"],
        &["lsp-set-addresses", "ln-out", "unknown"],
        &["lsp-set-options", "ln-out", "network_name=physnet1"],
        &["lsp-add", "inside", "in1"],
        &["lsp-set-addresses", "in1", "00:00:00:00:0a:0a 10.0.10.10"],
    ] {
        m.nbctl(a);
    }
    m.vm(0, "in1", "00:00:00:00:0a:0a", "10.0.10.10", "10.0.10.1");
    let ext = m.provider_network(&[1, 2], "physnet1", "172.16.10.10", "172.16.10.1");
    m.sync();
    assert!(m.wait_tunnels(30), "a Geneve port to each other chassis\n{}", m.diagnostics());
    let gateway = |m: &Multi| {
        let show = m.sbctl(&["show"]);
        let mut chassis = String::new();
        for l in show.lines() {
            if let Some(c) = l.trim().strip_prefix("Chassis ") {
                chassis = c.trim_matches('"').to_string();
            }
            if l.contains("cr-r-out") {
                return chassis;
            }
        }
        String::new()
    };
    let ping = |m: &Multi, n: u32| m.host(0).ping(&ext.ip, n).unwrap();
    assert!(
        eventually(30, || ping(&m, 1) == 1),
        "in1 -> the external host through the gateway\n{}\n{}",
        m.sbctl(&["show"]),
        m.diagnostics()
    );
    // Until BFD is up, each gateway chassis may take the port for a moment.
    assert!(
        eventually(20, || gateway(&m) == "hv2"),
        "the gateway port settles on hv2 (priority 20)\n{}",
        m.sbctl(&["show"])
    );
    // BFD up on hv1's tunnels, and the bundle that picks the gateway.
    let bfd_up = |hv: &xvs::ovnmulti::Hypervisor| {
        let db = format!("--db=unix:{}/db.sock", hv.dir);
        let (_, out, _) =
            hv.try_run(&["ovs-vsctl", &db, "--bare", "--columns=bfd_status", "find", "interface", "type=geneve"]);
        out.replace('"', "").matches("forwarding=true").count()
    };
    let bfd_cols = |hv: &xvs::ovnmulti::Hypervisor| {
        let db = format!("--db=unix:{}/db.sock", hv.dir);
        hv.try_run(&["ovs-vsctl", &db, "--columns=name,bfd,bfd_status", "find", "interface", "type=geneve"]).1
    };
    assert!(
        eventually(20, || bfd_up(&m.hvs[0]) == 2),
        "BFD up from hv1 to hv2 and hv3:\n{}\n{}",
        bfd_cols(&m.hvs[0]),
        m.diagnostics()
    );
    let flows = m.hvs[0].flows();
    let bundle = flows.lines().find(|l| l.contains("bundle(")).unwrap_or_default().to_string();
    assert!(bundle.contains("active_backup"), "hv1 sends to the gateway with bundle(...,active_backup,...):\n{flows}");
    eprintln!("hv1: {}", bundle.split("actions=").nth(1).unwrap_or(&bundle));
    eprintln!("gateway on hv2, BFD up, in {:.1} s", t0.elapsed().as_secs_f64());
    assert_eq!(ping(&m, 3), 3);

    // hv2's switch dies.
    m.hvs[1].kill_switch();
    let t1 = Instant::now();
    assert!(
        eventually(40, || ping(&m, 1) == 1),
        "in1 -> the external host again, through hv3\n{}\n{}",
        m.sbctl(&["show"]),
        m.diagnostics()
    );
    eprintln!("traffic back {:.1} s after hv2's switch was killed", t1.elapsed().as_secs_f64());
    assert!(eventually(20, || gateway(&m) == "hv3"), "hv3 claims the gateway port\n{}", m.sbctl(&["show"]));
    assert_eq!(ping(&m, 3), 3, "through hv3");
    eprintln!("passed in {:.1} s", t0.elapsed().as_secs_f64());
}

#[test]
fn ha_gateway_xvs() {
    ha_gateway("hx", Switch::Xvs);
}

#[test]
fn ha_gateway_ovs() {
    ha_gateway("ho", Switch::Ovs);
}
