//! Connection tracking end to end: flows written as OVS users write them,
//! installed with the real `ovs-ofctl`, real traffic between namespaces.
//!
//! Plan (each test): two hosts (namespace + veth), `xvs switch` on the
//! root-side ends, rules installed with `ovs-ofctl add-flow` (so the
//! `ct(...)` actions travel as Nicira NXAST_CT/NXAST_NAT and come back in
//! `dump-flows`), then pings, TCP streams and tcpdump in the hosts.
//! Verified: a stateful firewall (h1 may open connections to h2, h2 may
//! not open any to h1, replies pass); source NAT (h2 sees the translated
//! address, h1 gets its replies). The daemon and hosts are removed by Drop
//! guards, also on failure. Needs root.
//!
//! `XVS_SWITCH=ovs cargo test -p xvs --test conntrack -- --test-threads=1`
//! runs the same scenarios against Open vSwitch 3.1 (userspace datapath,
//! AF_XDP ports), the reference these tests are held to.

use xvs::netns::Host;
use xvs::ovsref::Sut;

fn start(t: &str, hs: &[&Host]) -> Sut {
    let ports: Vec<&str> = hs.iter().map(|h| h.port.as_str()).collect();
    Sut::start(env!("CARGO_BIN_EXE_xvs"), &format!("ct{t}"), &format!("brct{t}"), &ports, &[])
}

fn hosts(t: &str) -> (Host, Host) {
    std::env::set_var("XVS_BIN", env!("CARGO_BIN_EXE_xvs"));
    let id = std::process::id() % 1000;
    let mk = |i: u32| {
        Host::create(&format!("xvsct{t}{id}h{i}"), &format!("xc{t}{id}h{i}"), &format!("10.81.0.{i}/24"), 1).unwrap()
    };
    (mk(1), mk(2))
}

/// Flows that let `a` open connections to `b` and nothing the other way.
fn firewall(d: &Sut, a: u32, b: u32, proto: &str) {
    d.ofctl_ok(&["del-flows"]);
    for f in [
        "table=0,priority=100,ip,ct_state=-trk,actions=ct(table=1,zone=5)".to_string(),
        "table=0,priority=10,arp,actions=NORMAL".to_string(),
        format!("table=1,priority=100,ip,in_port={a},ct_state=+trk+new,actions=ct(commit,zone=5,exec(set_field:0x2a->ct_mark)),output:{b}"),
        format!("table=1,priority=100,ip,in_port={a},ct_state=+trk+est,actions=output:{b}"),
        format!("table=1,priority=100,ip,in_port={b},ct_state=+trk+est,ct_mark=0x2a,actions=output:{a}"),
        "table=1,priority=1,actions=drop".to_string(),
    ] {
        d.ofctl_ok(&[proto, "add-flow", &f]);
    }
}

#[test]
fn stateful_firewall_lets_replies_in_and_keeps_new_connections_out() {
    let (h1, h2) = hosts("f");
    let d = start("f", &[&h1, &h2]);
    let (p1, p2) = (d.ofport(&h1.port), d.ofport(&h2.port));
    for proto in ["-OOpenFlow10", "-OOpenFlow13"] {
        firewall(&d, p1, p2, proto);
        let dump = d.ofctl_ok(&[proto, "dump-flows"]);
        assert!(dump.contains("actions=ct(table=1,zone=5)"), "{proto}: {dump}");
        // Echoed in each version's encoding, as Open vSwitch's ovs-ofctl
        // itself prints these flows (`ovs-ofctl parse-flow`).
        let exec =
            if proto == "-OOpenFlow10" { "exec(load:0x2a->NXM_NX_CT_MARK[])" } else { "exec(set_field:0x2a->ct_mark)" };
        assert!(dump.contains(&format!("actions=ct(commit,zone=5,{exec}),output:")), "{proto}: {dump}");
        assert!(dump.contains("ct_state=+est+trk") || dump.contains("ct_state=+trk+est"), "{proto}: {dump}");
        assert_eq!(h1.ping(&h2.ip, 3).unwrap(), 3, "{proto}: h1 opens, replies come back");
        assert_eq!(h2.ping(&h1.ip, 3).unwrap(), 0, "{proto}: h2 cannot open a connection to h1");
        assert_eq!(h1.tcp_stream(&h2, 5201, 2_000_000).unwrap(), 2_000_000, "{proto}: TCP h1 -> h2");
        // h2's SYNs are +new from the outside: dropped, so its connect times
        // out (h1 would answer a SYN that reached it, with SYN-ACK or RST).
        let c = h2.run(&["timeout", "2", "bash", "-c", &format!("echo > /dev/tcp/{}/5202", h1.ip)]).unwrap();
        assert!(!c.status.success(), "{proto}: TCP h2 -> h1 is blocked");
    }
    let dump = d.ofctl_ok(&["dump-flows"]);
    let drops: u64 = dump
        .lines()
        .find(|l| l.contains("priority=1 ") || l.contains("priority=1,"))
        .and_then(|l| l.split("n_packets=").nth(1))
        .and_then(|v| v.split(',').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    assert!(drops > 0, "the blocked traffic hit the drop rule: {dump}");

    // The operator's view, with the real ovs-appctl.
    let conns = d.appctl_ok(&["dpctl/dump-conntrack"]);
    eprintln!("{} dump-flows:\n{dump}\n{} dpctl/dump-conntrack:\n{conns}", d.name(), d.name());
    assert!(
        conns
            .lines()
            .any(|l| l.starts_with("icmp,orig=(src=10.81.0.1,dst=10.81.0.2,id=") && l.ends_with(",zone=5,mark=42")),
        "{conns}"
    );
    assert!(
        conns.lines().any(|l| l.starts_with("tcp,orig=(src=10.81.0.1,dst=10.81.0.2,")
            && l.contains("dport=5201),reply=(src=10.81.0.2,dst=10.81.0.1,sport=5201,")),
        "{conns}"
    );

    let zone5 = d.appctl_ok(&["dpctl/dump-conntrack", "zone=5"]);
    assert_eq!(zone5, conns);
    assert!(d.appctl_ok(&["dpctl/dump-conntrack", "zone=6"]).is_empty());
    let stats = d.appctl_ok(&["dpctl/ct-stats-show"]);
    assert!(stats.starts_with("Connections Stats:\n    Total: "), "{stats}");
    d.appctl_ok(&["dpctl/ct-set-maxconns", "1000"]);
    assert_eq!(d.appctl_ok(&["dpctl/ct-get-maxconns"]).trim(), "1000");
    d.appctl_ok(&["dpctl/ct-set-limits", "zone=5,limit=10"]);
    assert!(d.appctl_ok(&["dpctl/ct-get-limits"]).contains("zone=5,limit=10,count="));
    // Over OpenFlow (NXT_CT_FLUSH, as ovn-controller sends it): the TCP
    // connections to port 5201 only.
    d.ofctl_ok(&["ct-flush", "zone=5", "ct_nw_src=10.81.0.1,ct_nw_dst=10.81.0.2,ct_nw_proto=6,ct_tp_dst=5201"]);
    let conns = d.appctl_ok(&["dpctl/dump-conntrack"]);
    assert!(!conns.contains("dport=5201"), "the TCP connection is flushed: {conns}");
    assert!(conns.lines().any(|l| l.starts_with("icmp,")), "the ICMP ones are not: {conns}");
    // Flush one connection by its original tuple (the form OVS 3.1 takes).
    let icmp = conns.lines().find(|l| l.starts_with("icmp,")).unwrap();
    let id: &str = icmp.split("id=").nth(1).unwrap().split(',').next().unwrap();
    let tuple = format!("ct_nw_src=10.81.0.1,ct_nw_dst=10.81.0.2,ct_nw_proto=1,icmp_id={id},icmp_type=8,icmp_code=0");
    d.appctl_ok(&["dpctl/flush-conntrack", "zone=5", &tuple]);
    let after = d.appctl_ok(&["dpctl/dump-conntrack"]);
    assert_eq!(after.lines().count(), conns.lines().count() - 1, "one connection flushed: {after}");
    assert!(!after.contains(&format!("id={id},")), "{after}");
    // A zone flushed over OpenFlow, as ovn-controller does
    // (NXT_CT_FLUSH_ZONE); zone 6 is not touched.
    d.ofctl_ok(&["ct-flush-zone", "6"]);
    assert_eq!(d.appctl_ok(&["dpctl/dump-conntrack"]).lines().count(), after.lines().count());
    d.ofctl_ok(&["ct-flush-zone", "5"]);
    let after = d.appctl_ok(&["dpctl/dump-conntrack"]);
    assert!(after.is_empty(), "zone 5 flushed: {after}");
    assert_eq!(d.appctl_ok(&["dpctl/ct-get-nconns"]).trim(), "0");
}

#[test]
fn source_nat_translates_and_replies_come_back() {
    let (h1, h2) = hosts("n");
    let d = start("n", &[&h1, &h2]);
    let (p1, p2) = (d.ofport(&h1.port), d.ofport(&h2.port));
    // h2 answers the translated address at h1's MAC (no router here).
    h2.exec(&["ip", "neigh", "replace", "10.81.0.100", "lladdr", &h1.mac, "dev", "eth0"]).unwrap();
    for f in [
        "table=0,priority=100,ip,ct_state=-trk,actions=ct(table=1,zone=7,nat)".to_string(),
        "table=0,priority=10,arp,actions=NORMAL".to_string(),
        format!("table=1,priority=100,ip,in_port={p1},ct_state=+trk+new,actions=ct(commit,zone=7,nat(src=10.81.0.100),exec(set_field:0x1/0x1->ct_label)),output:{p2}"),
        format!("table=1,priority=100,ip,in_port={p1},ct_state=+trk+est,ct_label=0x1/0x1,actions=output:{p2}"),
        // Replies are let in by the connection's original tuple.
        format!("table=1,priority=100,ip,in_port={p2},ct_state=+trk+est,ct_nw_src=10.81.0.1,ct_nw_proto=1,actions=output:{p1}"),
        format!("table=1,priority=100,ip,in_port={p2},ct_state=+trk+est,ct_nw_src=10.81.0.1,ct_nw_proto=6,ct_tp_dst=5203,actions=output:{p1}"),
    ] {
        d.ofctl_ok(&["add-flow", &f]);
    }
    let dump = d.ofctl_ok(&["dump-flows"]);
    // dump-flows speaks OpenFlow 1.0 here: the label write is a Nicira load.
    assert!(
        dump.contains("actions=ct(commit,zone=7,nat(src=10.81.0.100),exec(load:0x1->NXM_NX_CT_LABEL[0])),output:"),
        "{dump}"
    );
    assert!(
        dump.contains("ct_nw_src=10.81.0.1") && dump.contains("ct_tp_dst=5203") && dump.contains("ct_label=0x1/0x1"),
        "{dump}"
    );
    assert!(dump.contains("actions=ct(table=1,zone=7,nat)"), "{dump}");
    let mut replies = 0;
    let seen = h2.capture(&["icmp"], || replies = h1.ping(&h2.ip, 3).unwrap()).unwrap();
    assert_eq!(replies, 3, "h1's pings are answered through the NAT");
    assert!(seen.contains("10.81.0.100 > 10.81.0.2: ICMP echo request"), "h2 sees the translated source:\n{seen}");
    assert!(!seen.contains("10.81.0.1 > 10.81.0.2"), "and never h1's own address:\n{seen}");
    // TCP through the NAT, too.
    assert_eq!(h1.tcp_stream(&h2, 5203, 1_000_000).unwrap(), 1_000_000);
}

/// Pings `dst` with 3000-byte payloads: at MTU 1500 both the requests and
/// the replies travel as three fragments each.
fn big_ping(h: &Host, dst: &str, n: u32) -> u32 {
    let c = n.to_string();
    let w = (n + 3).to_string();
    let out = h.run(&["ping", "-n", "-q", "-s", "3000", "-c", &c, "-i", "0.2", "-W", "1", "-w", &w, dst]).unwrap();
    xvs::netns::parse_ping_received(&String::from_utf8_lossy(&out.stdout))
}

fn counter(status: &str, name: &str) -> u64 {
    status
        .lines()
        .find_map(|l| l.trim().strip_prefix(name).and_then(|v| v.trim_start_matches(':').trim().parse().ok()))
        .unwrap_or_else(|| panic!("no '{name}' in:\n{status}"))
}

#[test]
fn fragmented_datagrams_are_reassembled_for_tracking() {
    let (h1, h2) = hosts("g");
    let d = start("g", &[&h1, &h2]);
    let (p1, p2) = (d.ofport(&h1.port), d.ofport(&h2.port));
    firewall(&d, p1, p2, "-OOpenFlow13");
    assert_eq!(big_ping(&h1, &h2.ip, 3), 3, "fragmented pings h1 -> h2 and their fragmented replies pass");
    assert_eq!(big_ping(&h2, &h1.ip, 2), 0, "fragmented pings h2 -> h1 are +new from outside: dropped");
    let st = d.appctl_ok(&["dpctl/ipf-get-status"]);
    eprintln!("{} dpctl/ipf-get-status:\n{st}", d.name());
    // 3 requests and 3 replies of 3 fragments, the blocked side's too.
    assert!(counter(&st, "v4 frags completed") >= 18, "{st}");
    assert_eq!(counter(&st, "num frag"), 0, "nothing left half-assembled: {st}");
    let conns = d.appctl_ok(&["dpctl/dump-conntrack"]);
    assert!(conns.lines().any(|l| l.starts_with("icmp,orig=(src=10.81.0.1,dst=10.81.0.2,id=")), "{conns}");
    // Small non-final fragments are refused below the minimum size.
    d.appctl_ok(&["dpctl/ipf-set-min-frag", "v4", "1400"]);
    let before = counter(&d.appctl_ok(&["dpctl/ipf-get-status"]), "v4 frags too small");
    h1.exec(&["ip", "link", "set", "eth0", "mtu", "1300"]).unwrap();
    assert_eq!(big_ping(&h1, &h2.ip, 1), 0, "1300-byte fragments are below the 1400-byte minimum");
    let st = d.appctl_ok(&["dpctl/ipf-get-status"]);
    assert!(counter(&st, "v4 frags too small") > before, "{st}");
}

#[test]
fn fragmented_replies_are_translated_back_through_the_nat() {
    let (h1, h2) = hosts("q");
    let d = start("q", &[&h1, &h2]);
    let (p1, p2) = (d.ofport(&h1.port), d.ofport(&h2.port));
    h2.exec(&["ip", "neigh", "replace", "10.81.0.100", "lladdr", &h1.mac, "dev", "eth0"]).unwrap();
    for f in [
        "table=0,priority=100,ip,ct_state=-trk,actions=ct(table=1,zone=9,nat)".to_string(),
        "table=0,priority=10,arp,actions=NORMAL".to_string(),
        format!("table=1,priority=100,ip,in_port={p1},ct_state=+trk+new,actions=ct(commit,zone=9,nat(src=10.81.0.100)),output:{p2}"),
        format!("table=1,priority=100,ip,in_port={p1},ct_state=+trk+est,actions=output:{p2}"),
        format!("table=1,priority=100,ip,in_port={p2},ct_state=+trk+est,actions=output:{p1}"),
    ] {
        d.ofctl_ok(&["add-flow", &f]);
    }
    let mut replies = 0;
    let seen = h2.capture(&["icmp"], || replies = big_ping(&h1, &h2.ip, 3)).unwrap();
    assert_eq!(replies, 3, "h1's fragmented pings are answered through the NAT");
    assert!(seen.contains("10.81.0.100 > 10.81.0.2: ICMP echo request"), "h2 sees the translated source:\n{seen}");
    assert!(!seen.contains("10.81.0.1 > 10.81.0.2"), "on every fragment, never h1's own address:\n{seen}");
}

/// The helper scripts' path (TFTP and FTP peers in Python).
fn peers() -> String {
    format!("{}/tests/alg_peers.py", env!("CARGO_MANIFEST_DIR"))
}

/// Runs one transfer: a server in `srv`, a client in `cli`; returns the
/// bytes the client received.
fn transfer(srv: &Host, cli: &Host, kind: &str, client_args: &[&str], size: usize) -> u64 {
    let ready = format!("/tmp/{}-{kind}.ready", srv.ns);
    let _ = std::fs::remove_file(&ready);
    let server = std::process::Command::new("ip")
        .args(["netns", "exec", &srv.ns, "timeout", "20", "python3", &peers(), &format!("{kind}-server"), &srv.ip])
        .args([&size.to_string(), &ready])
        .spawn()
        .unwrap();
    xvs::netns::wait_file(&ready, 5000);
    let _ = std::fs::remove_file(&ready);
    let mut args = vec!["timeout", "20", "python3"];
    let p = peers();
    let client = format!("{kind}-client");
    args.extend([p.as_str(), client.as_str(), srv.ip.as_str()]);
    args.extend(client_args);
    let out = cli.run(&args).unwrap();
    let _ = xvs::netns::finish(server);
    let _ = std::fs::remove_file(&ready);
    let text = String::from_utf8_lossy(&out.stdout);
    xvs::netns::number_after(&text, "received").unwrap_or(0)
}

/// A firewall where only h1 opens connections, to FTP and TFTP servers on
/// h2, with the helpers (`alg=`) or without; announced connections pass
/// as `+rel`.
fn helper_firewall(d: &Sut, a: u32, b: u32, helpers: bool) {
    d.ofctl_ok(&["del-flows"]);
    let (ftp, tftp) = if helpers { (",alg=ftp", ",alg=tftp") } else { ("", "") };
    for f in [
        "table=0,priority=100,ip,ct_state=-trk,actions=ct(table=1,zone=4)".to_string(),
        "table=0,priority=10,arp,actions=NORMAL".to_string(),
        format!("table=1,priority=100,tcp,in_port={a},tp_dst=21,ct_state=+trk+new,actions=ct(commit,zone=4{ftp}),output:{b}"),
        format!("table=1,priority=100,udp,in_port={a},tp_dst=69,ct_state=+trk+new,actions=ct(commit,zone=4{tftp}),output:{b}"),
        format!("table=1,priority=90,ip,in_port={a},ct_state=+trk+new+rel,actions=ct(commit,zone=4),output:{b}"),
        format!("table=1,priority=90,ip,in_port={b},ct_state=+trk+new+rel,actions=ct(commit,zone=4),output:{a}"),
        format!("table=1,priority=80,ip,in_port={a},ct_state=+trk+est,actions=output:{b}"),
        format!("table=1,priority=80,ip,in_port={b},ct_state=+trk+est,actions=output:{a}"),
        "table=1,priority=1,actions=drop".to_string(),
    ] {
        d.ofctl_ok(&["add-flow", &f]);
    }
}

#[test]
fn ftp_and_tftp_helpers_let_the_announced_connections_in() {
    let (h1, h2) = hosts("a");
    let d = start("a", &[&h1, &h2]);
    let (p1, p2) = (d.ofport(&h1.port), d.ofport(&h2.port));
    helper_firewall(&d, p1, p2, true);
    let dump = d.ofctl_ok(&["dump-flows"]);
    assert!(dump.contains("actions=ct(commit,zone=4,alg=ftp),output:"), "{dump}");
    assert!(dump.contains("actions=ct(commit,zone=4,alg=tftp),output:"), "{dump}");
    assert_eq!(transfer(&h2, &h1, "tftp", &[], 3000), 3000, "TFTP: the server's answer from a new port is +rel");
    assert_eq!(transfer(&h2, &h1, "ftp", &["passive"], 200_000), 200_000, "passive FTP: the data connection is +rel");
    assert_eq!(
        transfer(&h2, &h1, "ftp", &["active"], 200_000),
        200_000,
        "active FTP: the server's connection back is +rel"
    );
    let conns = d.appctl_ok(&["dpctl/dump-conntrack"]);
    eprintln!("{} dpctl/dump-conntrack:\n{conns}", d.name());
    assert!(
        conns.lines().any(|l| l.starts_with("udp,orig=(src=10.81.0.1,dst=10.81.0.2,")
            && l.contains("dport=69)")
            && l.ends_with(",zone=4,helper=tftp")),
        "{conns}"
    );
    assert_eq!(conns.lines().filter(|l| l.ends_with("helper=ftp")).count(), 2, "two FTP control connections: {conns}");
    assert!(conns.lines().filter(|l| l.starts_with("tcp,")).count() >= 3, "control and two data connections: {conns}");
    // Without the helpers the same firewall keeps the announced connections out.
    helper_firewall(&d, p1, p2, false);
    d.appctl_ok(&["dpctl/flush-conntrack"]);
    assert_eq!(transfer(&h2, &h1, "tftp", &[], 3000), 0, "TFTP without the helper: the answer is +new from outside");
}

#[test]
fn destination_nat_sends_a_vip_to_its_backend() {
    let (h1, h2) = hosts("v");
    let d = start("v", &[&h1, &h2]);
    let (p1, p2) = (d.ofport(&h1.port), d.ofport(&h2.port));
    // The VIP lives on no host: h1 reaches it at h2's MAC.
    h1.exec(&["ip", "neigh", "replace", "10.81.0.200", "lladdr", &h2.mac, "dev", "eth0"]).unwrap();
    for f in [
        "table=0,priority=100,ip,ct_state=-trk,actions=ct(table=1,zone=8,nat)".to_string(),
        "table=0,priority=10,arp,actions=NORMAL".to_string(),
        format!("table=1,priority=100,tcp,in_port={p1},nw_dst=10.81.0.200,tp_dst=80,ct_state=+trk+new,actions=ct(commit,zone=8,nat(dst=10.81.0.2:5204)),output:{p2}"),
        format!("table=1,priority=100,ip,in_port={p1},ct_state=+trk+est,actions=output:{p2}"),
        format!("table=1,priority=100,ip,in_port={p2},ct_state=+trk+est,actions=output:{p1}"),
        "table=1,priority=1,actions=drop".to_string(),
    ] {
        d.ofctl_ok(&["add-flow", &f]);
    }
    let ready = format!("/tmp/{}-5204.tready", h2.ns);
    let _ = std::fs::remove_file(&ready);
    let rx = h2.util(&["tcp-recv", "--port", "5204", "--max-ms", "20000", "--ready-file", &ready]).unwrap();
    xvs::netns::wait_file(&ready, 5000);
    let tx = h1.util(&["tcp-send", "--dst", "10.81.0.200:80", "--bytes", "1000000", "--timeout-ms", "15000"]).unwrap();
    let sent = xvs::netns::finish(tx);
    let got = xvs::netns::finish(rx).unwrap();
    sent.unwrap();
    assert_eq!(xvs::netns::number_after(&got, "received"), Some(1_000_000), "the VIP's backend got the stream: {got}");
    let conns = d.appctl_ok(&["dpctl/dump-conntrack"]);
    eprintln!("{} dpctl/dump-conntrack:\n{conns}", d.name());
    assert!(
        conns.lines().any(|l| l.starts_with("tcp,orig=(src=10.81.0.1,dst=10.81.0.200,")
            && l.contains("dport=80),reply=(src=10.81.0.2,dst=10.81.0.1,sport=5204,")),
        "the connection is stored with its translated reply tuple: {conns}"
    );
    let _ = std::fs::remove_file(&ready);
}

/// The zone taken from a register, as OVN writes it: reg13 is loaded in
/// table 0, survives the recirculation, and names the zone both times.
#[test]
fn zone_from_a_register_survives_recirculation() {
    let (h1, h2) = hosts("z");
    let d = start("z", &[&h1, &h2]);
    let (a, b) = (d.ofport(&h1.port), d.ofport(&h2.port));
    let z = "NXM_NX_REG13[0..15]";
    for f in [
        format!("table=0,priority=100,ip,ct_state=-trk,actions=load:0x2a->{z},ct(table=1,zone={z})"),
        "table=0,priority=10,arp,actions=NORMAL".to_string(),
        format!(
            "table=1,priority=100,ip,in_port={a},reg13=0x2a,ct_state=+trk+new,actions=ct(commit,zone={z}),output:{b}"
        ),
        format!("table=1,priority=100,ip,in_port={a},reg13=0x2a,ct_state=+trk+est,actions=output:{b}"),
        format!("table=1,priority=100,ip,in_port={b},reg13=0x2a,ct_state=+trk+est,actions=output:{a}"),
        "table=1,priority=1,actions=drop".to_string(),
    ] {
        d.ofctl_ok(&["-OOpenFlow15", "add-flow", &f]);
    }
    let dump = d.ofctl_ok(&["-OOpenFlow15", "dump-flows"]);
    // OpenFlow 1.5 echoes the load as a set_field (OVS does the same).
    assert!(dump.contains(&format!("actions=set_field:0x2a/0xffff->reg13,ct(table=1,zone={z})")), "{dump}");
    assert!(dump.contains(&format!("actions=ct(commit,zone={z}),output:")), "{dump}");
    assert_eq!(h1.ping(&h2.ip, 3).unwrap(), 3, "h1 opens, replies come back");
    assert_eq!(h2.ping(&h1.ip, 2).unwrap(), 0, "h2 cannot open");
    let conns = d.appctl_ok(&["dpctl/dump-conntrack"]);
    eprintln!("{} dpctl/dump-conntrack:\n{conns}", d.name());
    assert!(
        conns.lines().any(|l| l.starts_with("icmp,orig=(src=10.81.0.1,dst=10.81.0.2,") && l.ends_with(",zone=42")),
        "the connection lives in zone 42 (0x2a): {conns}"
    );
}

/// Two hosts and the switch between them with the kernel fast path at 1
/// packet/s, the hosts' eth0 with GRO on (a veth takes redirected frames
/// only then).
fn with_fast_path(t: &str) -> (Host, Host, Sut) {
    let (h1, h2) = hosts(t);
    let ports: Vec<&str> = vec![h1.port.as_str(), h2.port.as_str()];
    let d = Sut::start(
        env!("CARGO_BIN_EXE_xvs"),
        &format!("ct{t}"),
        &format!("brct{t}"),
        &ports,
        &["--xdp-offload-pps", "1"],
    );
    for h in [&h1, &h2] {
        h.exec(&["ethtool", "-K", "eth0", "gro", "on"]).unwrap();
    }
    (h1, h2, d)
}

/// Packets and bytes the kernel fast path forwarded, from `offload-show`
/// (xvs only; 0 for Open vSwitch).
fn kernel_forwarded(d: &Sut) -> u64 {
    if d.is_ovs() {
        return 0;
    }
    std::thread::sleep(std::time::Duration::from_millis(600));
    xvs::offload::forwarded_in_show(&d.appctl_ok(&["dpif-netdev/offload-show"]), None)
}

/// The firewall of the first test with the kernel fast path at a
/// threshold of 1 packet/s, so established connections' packets are
/// forwarded by the XDP program (`ct()` verdicts read from the tracker,
/// connection counts and expiry credited back). A 200 MB TCP stream from
/// h1 to h2 must arrive whole, with most segments served by the kernel
/// (xvs); then a UDP exchange h1 <-> h2 hot in both directions, after
/// which the connections are flushed and h2 sends on the same 5-tuple
/// unasked: those datagrams are `+new` from h2 and must not reach h1 — a
/// kernel entry still serving the old connection would let them through.
/// Open vSwitch passes the same (it has no
/// kernel fast path for these; `XVS_SWITCH=ovs`).
#[test]
fn established_connections_in_the_kernel_stay_true_to_the_tracker() {
    let (h1, h2, d) = with_fast_path("k");
    let (p1, p2) = (d.ofport(&h1.port), d.ofport(&h2.port));
    firewall(&d, p1, p2, "-OOpenFlow13");
    assert_eq!(h1.ping(&h2.ip, 2).unwrap(), 2);
    let k0 = kernel_forwarded(&d);
    let bytes = 200_000_000;
    assert_eq!(h1.tcp_stream(&h2, 5211, bytes).unwrap(), bytes, "TCP h1 -> h2 through the firewall");
    let k1 = kernel_forwarded(&d);
    if !d.is_ovs() {
        let show = d.appctl_ok(&["dpif-netdev/offload-show"]);
        eprintln!("{} offload-show:\n{show}", d.name());
        assert!(k1 > k0 + 5_000, "the kernel served the stream's segments ({k0} -> {k1}):\n{show}");
        assert!(show.contains("tracker-must-see:"), "{show}");
    }
    // UDP, hot both ways, then flushed: h2's datagrams on the old tuple
    // are new connections from the outside.
    let dir = format!("/tmp/xvs-ctk-{}", std::process::id());
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let server = format!(
        "import socket,time,os\n\
         s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); s.bind(('{ip2}',7000)); s.settimeout(0.1)\n\
         open('{dir}/ready','w').close(); n=0; peer=None; t=time.time()\n\
         while not os.path.exists('{dir}/go') and time.time()-t<30:\n\
         \x20   try:\n\
         \x20       b,a=s.recvfrom(2000); s.sendto(b,a); n+=1; peer=a\n\
         \x20   except socket.timeout: pass\n\
         for i in range(50):\n\
         \x20   s.sendto(b'unasked',peer); time.sleep(0.01)\n\
         print('echoed',n)\n",
        ip2 = h2.ip
    );
    let client = format!(
        "import socket,time\n\
         s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); s.bind(('{ip1}',7001)); s.setblocking(False)\n\
         echoes=0; t=time.time()\n\
         while time.time()-t<3:\n\
         \x20   s.sendto(b'x'*64,('{ip2}',7000)); time.sleep(0.001)\n\
         \x20   try:\n\
         \x20       while True: s.recv(2000); echoes+=1\n\
         \x20   except BlockingIOError: pass\n\
         time.sleep(0.3)\n\
         try:\n\
         \x20   while True: s.recv(2000); echoes+=1\n\
         except BlockingIOError: pass\n\
         open('{dir}/sent','w').close(); late=0; t=time.time(); s.settimeout(0.2)\n\
         while time.time()-t<3:\n\
         \x20   try: s.recv(2000); late+=1\n\
         \x20   except socket.timeout: pass\n\
         print('echoes',echoes,'late',late)\n",
        ip1 = h1.ip,
        ip2 = h2.ip
    );
    let spawn = |h: &Host, code: &str| {
        std::process::Command::new("ip")
            .args(["netns", "exec", &h.ns, "python3", "-c", code])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let srv = spawn(&h2, &server);
    xvs::netns::wait_file(&format!("{dir}/ready"), 5000);
    let k2 = kernel_forwarded(&d);
    let cli = spawn(&h1, &client);
    xvs::netns::wait_file(&format!("{dir}/sent"), 10_000);
    let k3 = kernel_forwarded(&d);
    let conns = d.appctl_ok(&["dpctl/dump-conntrack"]);
    assert!(
        conns.lines().any(|l| l.starts_with("udp,orig=(src=10.81.0.1,dst=10.81.0.2,sport=7001,dport=7000)")),
        "{conns}"
    );
    d.appctl_ok(&["dpctl/flush-conntrack"]);
    std::fs::write(format!("{dir}/go"), "").unwrap();
    let out = String::from_utf8(cli.wait_with_output().unwrap().stdout).unwrap();
    let sout = String::from_utf8(srv.wait_with_output().unwrap().stdout).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!("{}: client: {out} server: {sout} kernel {k2} -> {k3}", d.name());
    let num = |s: &str, w: &str| xvs::netns::number_after(s, w).unwrap_or_else(|| panic!("{w} in {s}"));
    assert!(num(&out, "echoes") > 1000, "the exchange went through: {out}");
    assert_eq!(num(&out, "late"), 0, "h2's datagrams after the flush are new from outside: dropped ({out})");
    if !d.is_ovs() {
        assert!(k3 > k2 + 500, "the kernel served the exchange ({k2} -> {k3})");
    }
}

/// Source NAT with the kernel fast path at 1 packet/s: h1's TCP segments
/// to h2 get h1's address and port rewritten to the pool's in XDP (with
/// incremental IPv4 and TCP checksum updates), and h2's ACKs are
/// translated back there too. h2 answers only the translated address
/// (its neighbour entry for it is h1's MAC, and the rules let in only
/// replies of the connection), and its stack drops a segment with a bad
/// checksum, so a 200 MB stream arrives whole only if the kernel's NAT is
/// right both ways; most of it must be the kernel's. Open vSwitch passes
/// the same in userspace (`XVS_SWITCH=ovs`).
#[test]
fn source_nat_in_the_kernel_translates_both_ways() {
    let (h1, h2, d) = with_fast_path("s");
    let (p1, p2) = (d.ofport(&h1.port), d.ofport(&h2.port));
    h2.exec(&["ip", "neigh", "replace", "10.81.0.100", "lladdr", &h1.mac, "dev", "eth0"]).unwrap();
    for f in [
        "table=0,priority=100,ip,ct_state=-trk,actions=ct(table=1,zone=8,nat)".to_string(),
        "table=0,priority=10,arp,actions=NORMAL".to_string(),
        format!("table=1,priority=100,tcp,in_port={p1},ct_state=+trk+new,actions=ct(commit,zone=8,nat(src=10.81.0.100:20000-20999)),output:{p2}"),
        format!("table=1,priority=100,tcp,in_port={p1},ct_state=+trk+est,actions=output:{p2}"),
        format!("table=1,priority=100,tcp,in_port={p2},ct_state=+trk+est,ct_nw_src=10.81.0.1,actions=output:{p1}"),
        "table=1,priority=1,actions=drop".to_string(),
    ] {
        d.ofctl_ok(&["add-flow", &f]);
    }
    let k0 = kernel_forwarded(&d);
    let bytes = 200_000_000;
    assert_eq!(h1.tcp_stream(&h2, 5221, bytes).unwrap(), bytes, "TCP h1 -> h2 through the NAT");
    let k1 = kernel_forwarded(&d);
    let conns = d.appctl_ok(&["dpctl/dump-conntrack"]);
    eprintln!("{}: kernel {k0} -> {k1}\n{conns}", d.name());
    assert!(
        conns.lines().any(|l| l.starts_with("tcp,orig=(src=10.81.0.1,dst=10.81.0.2,")
            && l.contains("reply=(src=10.81.0.2,dst=10.81.0.100,sport=5221,dport=20")),
        "the connection was translated to the pool: {conns}"
    );
    if !d.is_ovs() {
        assert!(k1 > k0 + 5_000, "the kernel translated the stream's segments ({k0} -> {k1})");
    }
}
