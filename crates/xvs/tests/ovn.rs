//! OVN drives the switch: Debian's ovn-northd and ovn-controller 23.03,
//! unchanged, with xvs as the hypervisor's switch (or Open vSwitch 3.1 with
//! `XVS_SWITCH=ovs`, the reference the same scenario must also pass on).
//!
//! Plan: NB and SB ovsdb-servers and ovn-northd; one hypervisor with its
//! own ovsdb-server, the switch (`xvs switch --db`, or ovs-vswitchd) and
//! ovn-controller, which finds br-int's management socket through
//! OVS_RUNDIR; VM namespaces on br-int bound by `external_ids:iface-id`.
//! The logical network: switch ls1 (vm1, vm2), switch ls2 (vm3), router
//! lr1 between them, a load balancer on ls1. Checked with real traffic:
//! ping on ls1, ping across the router, a TCP stream to the load
//! balancer's VIP reaching its backend on ls2, then an ACL that drops
//! ICMP to vm2 (ping to vm3 still passes); last, DHCP answered by
//! ovn-controller through a paused and resumed pipeline. Everything is
//! removed afterwards, also on failure. Needs root and ovn-central/ovn-host
//! (scripts/setup.sh installs them). Several hypervisors: tests/ovn_multi.rs.

use xvs::ovnref::{eventually, Ovn};

#[test]
fn ovn_logical_switch_router_load_balancer_and_acl_on_one_hypervisor() {
    if !Ovn::available() {
        eprintln!("skipped: needs ovn-central and ovn-host (scripts/setup.sh installs them)");
        return;
    }
    std::env::set_var("XVS_BIN", env!("CARGO_BIN_EXE_xvs"));
    let ovs = std::env::var("XVS_SWITCH").as_deref() == Ok("ovs");
    let mut o = Ovn::start(env!("CARGO_BIN_EXE_xvs"), ovs);
    o.two_switches_and_a_router();
    let show = o.nbctl(&["show"]);
    let sb = o.run(&["ovn-sbctl", &format!("--db=unix:{}/sb.sock", o.dir), "show"]);
    eprintln!("ovn-nbctl show:\n{show}\novn-sbctl show:\n{sb}");
    let of =
        |o: &Ovn| o.run(&["ovs-ofctl", "-OOpenFlow15", "dump-flows", &format!("unix:{}/br-int.mgmt", o.run_dir())]);
    let (vm1, vm2, vm3) = (o.host(0), o.host(1), o.host(2));
    assert!(
        eventually(20, || vm1.ping(&vm2.ip, 1).unwrap() == 1),
        "vm1 -> vm2 on the logical switch; ovn-controller log:\n{}",
        std::fs::read_to_string(format!("{}/ovnc.log", o.dir)).unwrap_or_default()
    );
    assert_eq!(vm1.ping(&vm2.ip, 3).unwrap(), 3, "logical switch");
    assert!(eventually(10, || vm1.ping(&vm3.ip, 1).unwrap() == 1), "vm1 -> vm3 through the logical router");
    assert_eq!(vm1.ping(&vm3.ip, 3).unwrap(), 3, "logical router");
    let flows = of(&o).lines().count();
    eprintln!("br-int: {flows} flows installed by ovn-controller");
    // A load balancer on ls1: VIP 10.0.1.100:80 -> vm3:8080, across the
    // router (conntrack with a zone from a register, DNAT, a dp_hash
    // group, learn). The VIP is in ls1's subnet, where OVN answers no ARP
    // for it: vm1 sends it to the router's MAC.
    o.nbctl(&["lb-add", "lb1", "10.0.1.100:80", "10.0.2.1:8080", "tcp"]);
    o.nbctl(&["ls-lb-add", "ls1", "lb1"]);
    o.sync();
    vm1.exec(&["ip", "neigh", "replace", "10.0.1.100", "lladdr", "00:00:00:00:ff:01", "dev", "eth0"]).unwrap();
    let got = vm1.tcp_stream_via("10.0.1.100:80", vm3, 8080, 200_000).unwrap();
    assert_eq!(got, 200_000, "the VIP's backend got the stream");
    let dump = of(&o);
    let nat: Vec<&str> = dump.lines().filter(|l| l.contains("nat(")).collect();
    let zero = nat.iter().filter(|l| l.contains("nat(src)")).count();
    eprintln!("br-int: {} flows with ct(nat), {zero} of them all-zero SNAT (nat(src) with no address)", nat.len());
    // An ACL: ICMP to vm2 is dropped; vm3 stays reachable.
    o.nbctl(&["acl-add", "ls1", "to-lport", "1001", "outport == \"vm2\" && icmp4", "drop"]);
    o.sync();
    assert!(eventually(10, || vm1.ping(&vm2.ip, 1).unwrap() == 0), "the ACL drops ICMP to vm2");
    assert_eq!(vm1.ping(&vm3.ip, 2).unwrap(), 2, "vm3 is not behind the ACL");

    // DHCP answered by ovn-controller: the DISCOVER meets put_dhcp_opts,
    // a controller(pause); pinctrl writes the offer into the packet, sets
    // the result bit in a register and resumes (NXT_RESUME), and the rest
    // of the pipeline sends the OFFER back to vm1.
    let uuid = o
        .nbctl(&[
            "create",
            "DHCP_Options",
            "cidr=10.0.1.0/24",
            "options=\"lease_time\"=\"3600\" \"router\"=\"10.0.1.254\" \"server_id\"=\"10.0.1.254\" \"server_mac\"=\"00:00:00:00:ff:01\"",
        ])
        .trim()
        .to_string();
    o.nbctl(&["lsp-set-dhcpv4-options", "vm1", &uuid]);
    o.sync();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/dhcp_client.py");
    // vm1 is 00:00:00:00:01:01 (the logical port's address; see two_switches_and_a_router).
    let out = vm1.run(&["python3", script, "eth0", "00:00:00:00:01:01", "8"]).unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    eprintln!("DHCP from vm1: {text}");
    assert!(
        text.contains("OFFER yiaddr=10.0.1.1 router=10.0.1.254 lease=3600"),
        "ovn-controller's DHCP offer through a paused and resumed pipeline: {text}\novn-controller log:\n{}",
        std::fs::read_to_string(format!("{}/ovnc.log", o.dir)).unwrap_or_default()
    );
}
