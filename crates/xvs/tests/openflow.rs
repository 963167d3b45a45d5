//! OpenFlow end to end: the real `ovs-ofctl` (Debian's openvswitch-common)
//! and a small controller drive the xvs daemon, and namespaced hosts show
//! what the flows do to real traffic.
//!
//! Plan (each test): create its own hosts (namespace + veth; names unique
//! to the test and process), start `xvs switch` on the root-side veth ends
//! with its own run directory, program it with `ovs-ofctl` over
//! `<run-dir>/<bridge>.mgmt` (or a controller over TCP), send traffic,
//! then check both what ovs-ofctl prints and what the hosts received.
//! The daemon is killed and the hosts removed by Drop guards, also on
//! assertion failure. Needs root.

use openflow::msg::{self, Ctx, Msg};
use openflow::{Framer, Version};
use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use xvs::netns::{number_after, Host};

struct Daemon {
    child: Child,
    run_dir: String,
    bridge: String,
}

impl Daemon {
    fn start(t: &str, hs: &[&Host], extra: &[&str]) -> Daemon {
        let run_dir = format!("/tmp/xvs-oft-{t}-{}", std::process::id());
        let _ = std::fs::remove_dir_all(&run_dir);
        let bridge = format!("br{t}");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_xvs"));
        cmd.args(["switch", "--run-dir", &run_dir, "--bridge", &bridge, "--no-local-port"]);
        for h in hs {
            cmd.args(["--port", &h.port]);
        }
        cmd.args(extra);
        let child = cmd.stderr(Stdio::null()).stdout(Stdio::null()).spawn().unwrap();
        let d = Daemon { child, run_dir, bridge };
        let sock = d.mgmt();
        let t0 = Instant::now();
        while !std::path::Path::new(&sock).exists() && t0.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(25));
        }
        // The control socket appears last: every port is attached by then.
        let ctl = format!("{}/xvs.ctl", d.run_dir);
        while !std::path::Path::new(&ctl).exists() && t0.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(25));
        }
        d
    }

    fn mgmt(&self) -> String {
        format!("{}/{}.mgmt", self.run_dir, self.bridge)
    }

    /// Runs ovs-ofctl against this bridge; returns stdout, panics on failure.
    fn ofctl(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.ofctl_status(args);
        assert!(ok, "ovs-ofctl {args:?} failed: {err}");
        out
    }

    fn ofctl_status(&self, args: &[&str]) -> (bool, String, String) {
        let target = format!("unix:{}", self.mgmt());
        // Options go before the command, the target right after it.
        let (opts, rest): (Vec<&str>, Vec<&str>) = args.iter().partition(|a| a.starts_with('-'));
        let mut cmd = Command::new("ovs-ofctl");
        cmd.env("OVS_RUNDIR", &self.run_dir);
        cmd.args(&opts);
        cmd.arg(rest[0]).arg(&target).args(&rest[1..]);
        let o = cmd.output().expect("ovs-ofctl runs");
        (o.status.success(), String::from_utf8_lossy(&o.stdout).into(), String::from_utf8_lossy(&o.stderr).into())
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
    std::env::set_var("XVS_BIN", env!("CARGO_BIN_EXE_xvs"));
    let id = std::process::id() % 1000;
    (1..=n)
        .map(|i| {
            Host::create(&format!("xvso{t}{id}h{i}"), &format!("xo{t}{id}h{i}"), &format!("10.78.0.{i}/24"), 1).unwrap()
        })
        .collect()
}

/// n_packets of the first dump-flows line containing `needle`.
fn n_packets(dump: &str, needle: &str) -> u64 {
    let line = dump.lines().find(|l| l.contains(needle)).unwrap_or_else(|| panic!("no flow '{needle}' in\n{dump}"));
    let v = line.split("n_packets=").nth(1).expect("n_packets field");
    v.split(',').next().unwrap().trim().parse().unwrap()
}

fn eventually(secs: u64, cond: impl Fn() -> bool) -> bool {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(secs) {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    cond()
}

#[test]
fn ofctl_add_mod_del_priorities_and_counters() {
    let hs = hosts("a", 3);
    let d = Daemon::start("a", &[&hs[0], &hs[1], &hs[2]], &[]);
    let show = d.ofctl(&["show"]);
    for h in &hs {
        assert!(show.contains(&h.port), "show lists {}: {show}", h.port);
    }
    // The default table of a bridge without a controller: NORMAL.
    assert!(d.ofctl(&["dump-flows"]).contains("priority=0 actions=NORMAL"));
    assert_eq!(hs[0].ping(&hs[1].ip, 2).unwrap(), 2, "NORMAL forwards");

    // Replace it with explicit L3 rules: ARP floods, IP by destination.
    d.ofctl(&["del-flows"]);
    assert_eq!(d.ofctl(&["dump-flows"]).lines().filter(|l| l.contains("actions=")).count(), 0);
    assert_eq!(hs[0].ping(&hs[1].ip, 1).unwrap(), 0, "an empty table drops");
    d.ofctl(&["add-flow", "priority=10,arp,actions=FLOOD"]);
    d.ofctl(&["add-flow", "priority=10,ip,nw_dst=10.78.0.1,actions=output:1"]);
    d.ofctl(&["add-flow", "priority=10,ip,nw_dst=10.78.0.2,actions=output:2"]);
    d.ofctl(&["add-flow", "priority=10,ip,nw_dst=10.78.0.3,actions=output:3"]);
    assert_eq!(hs[0].ping(&hs[1].ip, 5).unwrap(), 5);
    // Counters include packets served from the datapath's caches.
    let dump = d.ofctl(&["dump-flows"]);
    assert_eq!(n_packets(&dump, "nw_dst=10.78.0.2"), 5, "{dump}");
    assert_eq!(n_packets(&dump, "nw_dst=10.78.0.1"), 5, "{dump}");
    // Table counters too: every packet is a lookup (and here a match) in table 0.
    let tables = d.ofctl(&["dump-tables"]);
    let field = |name: &str| -> u64 {
        let v = tables.split(&format!("{name}=")).nth(1).unwrap_or_else(|| panic!("{name} in {tables}"));
        v.split(|c: char| !c.is_ascii_digit()).next().unwrap().parse().unwrap()
    };
    assert!(field("lookup") >= 10 && field("matched") >= 10, "{tables}");
    let agg = d.ofctl(&["dump-aggregate", "ip"]);
    assert!(agg.contains("packet_count=10") && agg.contains("flow_count=3"), "{agg}");

    // mod-flows redirects h2's traffic to h3: h1's pings go unanswered,
    // and h3 receives them.
    let before = hs[2].counter("rx_packets");
    d.ofctl(&["mod-flows", "ip,nw_dst=10.78.0.2,actions=output:3"]);
    assert_eq!(hs[0].ping(&hs[1].ip, 3).unwrap(), 0);
    assert!(hs[2].counter("rx_packets") >= before + 3);
    // The modified flow kept its counters (OpenFlow: modify keeps them).
    assert!(n_packets(&d.ofctl(&["dump-flows"]), "nw_dst=10.78.0.2") >= 8);

    // A higher priority wins; --strict deletes only the exact rule.
    d.ofctl(&["mod-flows", "ip,nw_dst=10.78.0.2,actions=output:2"]);
    d.ofctl(&["add-flow", "priority=20,icmp,nw_dst=10.78.0.2,actions=drop"]);
    assert_eq!(hs[0].ping(&hs[1].ip, 2).unwrap(), 0, "priority 20 drop wins");
    d.ofctl(&["--strict", "del-flows", "priority=10,icmp,nw_dst=10.78.0.2"]);
    assert!(d.ofctl(&["dump-flows"]).contains("priority=20,icmp"), "strict delete matched nothing");
    d.ofctl(&["--strict", "del-flows", "priority=20,icmp,nw_dst=10.78.0.2"]);
    assert_eq!(hs[0].ping(&hs[1].ip, 2).unwrap(), 2);

    // Non-strict delete by a wider match; mod-flows --strict.
    d.ofctl(&["del-flows", "ip,nw_dst=10.78.0.0/24"]);
    assert_eq!(d.ofctl(&["dump-flows", "ip"]).lines().filter(|l| l.contains("actions=")).count(), 0);
    assert!(d.ofctl(&["dump-flows"]).contains("arp actions=FLOOD"));

    // replace-flows and diff-flows with a file; --bundle commits atomically.
    let file = format!("{}/flows.txt", d.run_dir);
    std::fs::write(&file, "priority=5,in_port=1,actions=output:2\npriority=5,in_port=2,actions=output:1\n").unwrap();
    d.ofctl(&["replace-flows", &file]);
    assert_eq!(d.ofctl(&["diff-flows", &file]).trim(), "", "replace-flows left differences");
    assert_eq!(hs[0].ping(&hs[1].ip, 2).unwrap(), 2);
    d.ofctl(&["--bundle", "del-flows"]);
    std::fs::write(&file, "priority=7,actions=NORMAL\n").unwrap();
    d.ofctl(&["--bundle", "add-flows", &file]);
    assert_eq!(hs[0].ping(&hs[2].ip, 2).unwrap(), 2);
    // Ports and tables report counters too.
    let ports = d.ofctl(&["dump-ports"]);
    assert!(ports.contains("rx pkts=") && !ports.contains("rx pkts=0,"), "{ports}");
    assert!(d.ofctl(&["dump-ports-desc"]).contains(&hs[1].port));
    assert!(d.ofctl(&["dump-tables"]).contains("active=1"));
}

#[test]
fn of13_goto_set_field_and_vlan_push_pop() {
    let hs = hosts("b", 3);
    let d = Daemon::start("b", &[&hs[0], &hs[1], &hs[2]], &[]);
    let of13 = |args: &[&str]| {
        let mut a = vec!["--protocols=OpenFlow13"];
        a.extend_from_slice(args);
        d.ofctl(&a)
    };
    of13(&["del-flows"]);
    // Table 0 classifies, table 1 forwards.
    of13(&["add-flow", "table=0,priority=10,arp,actions=FLOOD"]);
    of13(&["add-flow", "table=0,priority=10,ip,actions=goto_table:1"]);
    of13(&["add-flow", "table=1,priority=10,ip,nw_dst=10.78.0.1,actions=output:1"]);
    of13(&["add-flow", "table=1,priority=10,ip,nw_dst=10.78.0.2,actions=output:2"]);
    assert_eq!(hs[0].ping(&hs[1].ip, 3).unwrap(), 3, "goto_table pipeline forwards");
    let dump = of13(&["dump-flows", "table=1"]);
    assert_eq!(n_packets(&dump, "nw_dst=10.78.0.2"), 3, "{dump}");

    // set_field rewrites the UDP destination port: h2 listens on 7777
    // only, h1 sends to 5555.
    of13(&[
        "add-flow",
        "table=1,priority=20,udp,nw_dst=10.78.0.2,tp_dst=5555,actions=set_field:7777->udp_dst,output:2",
    ]);
    let got = hs[0].udp_burst_to_port(&hs[1], 5555, 7777, 20).unwrap();
    assert_eq!(got, 20, "rewritten datagrams arrive on the new port");

    // VLAN push: frames from h1 leave towards h3 tagged with VLAN 10
    // (captured by tcpdump in h3's namespace: this kernel has no 802.1Q
    // module, so h3 cannot terminate the VLAN itself).
    of13(&["del-flows"]);
    of13(&["add-flow", "priority=10,in_port=1,actions=push_vlan:0x8100,set_field:4106->vlan_vid,output:3"]);
    of13(&["add-flow", "priority=10,in_port=3,dl_vlan=10,actions=pop_vlan,output:1"]);
    hs[0].exec(&["ip", "neigh", "replace", "10.78.0.3", "lladdr", &hs[2].mac, "dev", "eth0"]).unwrap();
    let text = hs[2]
        .capture(&["vlan", "10", "and", "udp", "port", "4444"], || {
            let tx = hs[0].util(&["udp-send", "--dst", "10.78.0.3:4444", "--count", "5", "--pps", "50"]).unwrap();
            xvs::netns::finish(tx).unwrap();
        })
        .unwrap();
    assert_eq!(text.lines().filter(|l| l.contains("vlan 10")).count(), 5, "tagged frames at h3: {text}");

    // VLAN pop: tagged frames from h3 reach h1 untagged (h1's UDP socket
    // only sees them if the tag is gone).
    let ready = format!("/tmp/{}-vl.ready", hs[0].ns);
    let rx = hs[0]
        .util(&["udp-recv", "--port", "4445", "--idle-ms", "1500", "--max-ms", "8000", "--ready-file", &ready])
        .unwrap();
    xvs::netns::wait_file(&ready, 5000);
    let _ = std::fs::remove_file(&ready);
    let frame = wire::build::Frame::new(mac(&hs[2].mac), mac(&hs[0].mac))
        .vlan(0x8100, 10)
        .l3(wire::build::L3::ipv4(0x0a4e_0003, 0x0a4e_0001))
        .l4(wire::build::L4::Udp { src: 999, dst: 4445 })
        .payload(b"tagged")
        .build();
    let hex: String = frame.iter().map(|b| format!("{b:02x}")).collect();
    let tx = hs[2].util(&["send-raw", "--dev", "eth0", &hex, &hex, &hex]).unwrap();
    xvs::netns::finish(tx).unwrap();
    let got = xvs::netns::finish(rx).unwrap();
    assert_eq!(number_after(&got, "received"), Some(3), "{got}");
    let dump = of13(&["dump-flows"]);
    assert!(dump.contains("push_vlan:0x8100"), "{dump}");
    assert_eq!(n_packets(&dump, "dl_vlan=10"), 3, "{dump}");
}

#[test]
fn idle_timeout_sends_flow_removed_and_packet_out_reaches_a_host() {
    let hs = hosts("c", 2);
    let d = Daemon::start("c", &[&hs[0], &hs[1]], &[]);
    // ovs-ofctl monitor prints asynchronous messages as they arrive.
    let mon = Command::new("ovs-ofctl")
        .env("OVS_RUNDIR", &d.run_dir)
        .args(["monitor", &format!("unix:{}", d.mgmt()), "65534"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    struct Kill(Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
        }
    }
    let mut mon = Kill(mon);
    std::thread::sleep(Duration::from_millis(1000));
    d.ofctl(&["add-flow", "priority=50,icmp,idle_timeout=1,send_flow_rem,actions=NORMAL"]);
    assert_eq!(hs[0].ping(&hs[1].ip, 2).unwrap(), 2);
    assert!(d.ofctl(&["dump-flows"]).contains("idle_timeout=1"));
    assert!(eventually(5, || !d.ofctl(&["dump-flows"]).contains("idle_timeout=1")), "the idle flow expired");
    std::thread::sleep(Duration::from_millis(300));
    // SIGTERM lets ovs-ofctl flush what it printed.
    let _ = Command::new("kill").args(["-TERM", &mon.0.id().to_string()]).status();
    let _ = mon.0.wait();
    let mut text = String::new();
    mon.0.stdout.take().unwrap().read_to_string(&mut text).unwrap();
    mon.0.stderr.take().unwrap().read_to_string(&mut text).unwrap();
    assert!(text.contains("FLOW_REMOVED") && text.contains("reason=idle"), "monitor saw: {text}");
    assert!(text.contains("n_packets:") || text.contains("packet_count") || text.contains("pkts"), "{text}");

    // packet-out: a UDP frame built here, sent out port 2, arrives at h2.
    let ready = format!("/tmp/{}-po.ready", hs[1].ns);
    let rx = hs[1]
        .util(&["udp-recv", "--port", "6000", "--idle-ms", "1500", "--max-ms", "8000", "--ready-file", &ready])
        .unwrap();
    xvs::netns::wait_file(&ready, 5000);
    let _ = std::fs::remove_file(&ready);
    let frame = wire::build::Frame::new(mac(&hs[0].mac), mac(&hs[1].mac))
        .l3(wire::build::L3::ipv4(0x0a4e_0001, 0x0a4e_0002))
        .l4(wire::build::L4::Udp { src: 1234, dst: 6000 })
        .payload(b"packet-out!")
        .build();
    let hex: String = frame.iter().map(|b| format!("{b:02x}")).collect();
    for _ in 0..3 {
        d.ofctl(&["packet-out", &format!("in_port=controller packet={hex} actions=output:2")]);
    }
    let got = xvs::netns::finish(rx).unwrap();
    assert_eq!(number_after(&got, "received"), Some(3), "{got}");
}

fn mac(s: &str) -> [u8; 6] {
    let mut m = [0u8; 6];
    for (i, p) in s.split(':').enumerate() {
        m[i] = u8::from_str_radix(p, 16).unwrap();
    }
    m
}

/// A minimal OpenFlow 1.3 controller: answers hellos and echoes,
/// installs a table-miss flow to itself, and answers each packet-in with
/// a packet-out that floods it. Counts packet-ins.
struct Controller {
    listener: std::net::TcpListener,
}

impl Controller {
    fn serve(
        self,
        stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
        seen: std::sync::Arc<std::sync::atomic::AtomicU64>,
    ) {
        use std::sync::atomic::Ordering;
        self.listener.set_nonblocking(true).unwrap();
        while !stop.load(Ordering::Acquire) {
            let Ok((mut s, _)) = self.listener.accept() else {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            };
            s.set_nonblocking(false).unwrap();
            s.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
            s.write_all(&openflow::header::hello(&[Version::Of13], 1)).unwrap();
            let v = Version::Of13;
            let table_miss =
                ofproto::parse_flow("priority=0,actions=CONTROLLER:65535", ofproto::Need::Actions).unwrap();
            let fm = msg::FlowMod {
                cmd: ofproto::FlowModCmd::Add,
                spec: table_miss,
                buffer_id: msg::NO_BUFFER,
                out_port: msg::OFPP_ANY,
                out_group: msg::OFPG_ANY,
                flags: 0,
                importance: 0,
            };
            let mut framer = Framer::default();
            let mut buf = [0u8; 65536];
            let mut sent_flow = false;
            while !stop.load(Ordering::Acquire) {
                match s.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => framer.handle_bytes(&buf[..n]),
                    Err(_) => continue,
                }
                while let Ok(Some(m)) = framer.poll_message() {
                    match m.header.msg_type {
                        0 if !sent_flow => {
                            s.write_all(&msg::encode_flow_mod(v, 2, &fm)).unwrap();
                            sent_flow = true;
                        }
                        2 => {
                            let mut r = m.bytes.clone();
                            r[1] = 3;
                            s.write_all(&r).unwrap();
                        }
                        10 => {
                            let pi = msg::decode_packet_in(v, &m).unwrap();
                            seen.fetch_add(1, Ordering::Relaxed);
                            let po = msg::PacketOut {
                                buffer_id: msg::NO_BUFFER,
                                in_port: pi.in_port,
                                actions: vec![ofproto::Action::Output(ofproto::OfPort::Flood)],
                                data: pi.data,
                            };
                            s.write_all(&msg::encode_packet_out(v, 3, &po)).unwrap();
                        }
                        _ => {}
                    }
                }
            }
        }
    }
}

#[test]
fn controller_packet_in_out_and_fail_modes() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    let hs = hosts("d", 2);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(AtomicU64::new(0));
    let (st, se) = (Arc::clone(&stop), Arc::clone(&seen));
    let ctl = std::thread::spawn(move || Controller { listener }.serve(st, se));
    let target = format!("tcp:127.0.0.1:{port}");
    let d = Daemon::start("d", &[&hs[0], &hs[1]], &["--controller", &target, "--fail-mode", "standalone"]);
    // The controller installs its table-miss flow; every packet then goes
    // through it (packet-in, packet-out FLOOD).
    assert!(
        eventually(5, || d.ofctl(&["--protocols=OpenFlow13", "dump-flows"]).contains("CONTROLLER")),
        "table-miss flow"
    );
    assert_eq!(hs[0].ping(&hs[1].ip, 3).unwrap(), 3, "ping through the controller");
    let n = seen.load(Ordering::Relaxed);
    assert!(n >= 6, "every frame went to the controller ({n} packet-ins)");
    let show = d.ofctl(&["--protocols=OpenFlow13", "dump-flows"]);
    assert!(n_packets(&show, "CONTROLLER") >= 6, "{show}");

    // The controller goes away: standalone keeps forwarding (NORMAL),
    // because the table-miss flow's packet-ins have nobody to go to... the
    // controller's own flow still sends to it, so remove it first.
    stop.store(true, Ordering::Release);
    ctl.join().unwrap();
    d.ofctl(&["del-flows"]);
    assert!(eventually(5, || hs[0].ping(&hs[1].ip, 1).unwrap() == 1), "fail-open (standalone) forwards");
    drop(d);

    // Secure: with the controller gone, nothing is forwarded.
    let d = Daemon::start("d", &[&hs[0], &hs[1]], &["--controller", &target, "--fail-mode", "secure"]);
    assert_eq!(hs[0].ping(&hs[1].ip, 2).unwrap(), 0, "fail-secure drops");
    drop(d);
}

/// Malformed and truncated messages on the management socket: each gets
/// the spec's error (type, code, offending bytes), the connection stays up
/// and the switch keeps forwarding.
#[test]
fn malformed_messages_get_spec_errors() {
    let hs = hosts("e", 2);
    let d = Daemon::start("e", &[&hs[0], &hs[1]], &[]);
    let mut s = std::os::unix::net::UnixStream::connect(d.mgmt()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    s.write_all(&openflow::header::hello(&[Version::Of13], 1)).unwrap();
    let mut framer = Framer::default();
    let mut next = |s: &mut std::os::unix::net::UnixStream| -> openflow::Message {
        let mut buf = [0u8; 4096];
        loop {
            if let Ok(Some(m)) = framer.poll_message() {
                return m;
            }
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0, "connection closed");
            framer.handle_bytes(&buf[..n]);
        }
    };
    assert_eq!(next(&mut s).header.msg_type, 0, "hello");
    let hdr = |t: u8, xid: u32, body: &[u8]| {
        let mut b = vec![4, t, 0, 0];
        b.extend_from_slice(&xid.to_be_bytes());
        b.extend_from_slice(body);
        let l = b.len() as u16;
        b[2..4].copy_from_slice(&l.to_be_bytes());
        b
    };
    // tcp_dst without ip/tcp in an OXM match: BAD_MATCH/BAD_PREREQ (4, 9).
    let mut fm = vec![0u8; 40];
    fm[8 + 8] = 0; // table
    fm[16 + 3] = 0;
    let mut body = vec![0u8; 40];
    body[18..20].copy_from_slice(&0x8000u16.to_be_bytes()); // priority
    body[20..24].copy_from_slice(&0xffff_ffffu32.to_be_bytes()); // buffer
    body.extend_from_slice(&[0, 1, 0, 10, 0x80, 0, 0x1c, 2, 0, 80, 0, 0, 0, 0, 0, 0]);
    let _ = fm;
    let cases: Vec<(Vec<u8>, (u16, u16))> = vec![
        (hdr(14, 11, &body), (4, 9)),
        // Unknown message type: BAD_REQUEST/BAD_TYPE.
        (hdr(99, 12, &[]), (1, 1)),
        // Truncated flow mod: BAD_REQUEST/BAD_LEN.
        (hdr(14, 13, &[0; 10]), (1, 6)),
        // Unknown multipart type: BAD_REQUEST/BAD_MULTIPART.
        (hdr(18, 14, &[0, 77, 0, 0, 0, 0, 0, 0]), (1, 2)),
        // Unknown experimenter: BAD_REQUEST/BAD_EXPERIMENTER.
        (hdr(4, 15, &[0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 1]), (1, 3)),
        // Wrong version in the header: BAD_REQUEST/BAD_VERSION.
        (
            {
                let mut b = hdr(2, 16, &[]);
                b[0] = 1;
                b
            },
            (1, 0),
        ),
        // Flow mod with an unknown instruction: BAD_INSTRUCTION/UNKNOWN_INST.
        (
            {
                let mut b = body[..40].to_vec();
                b.extend_from_slice(&[0, 1, 0, 4, 0, 0, 0, 0]);
                b.extend_from_slice(&[0, 99, 0, 8, 0, 0, 0, 0]);
                hdr(14, 17, &b)
            },
            (3, 0),
        ),
        // Output to port 0: BAD_ACTION/BAD_OUT_PORT.
        (
            {
                let mut b = body[..40].to_vec();
                b.extend_from_slice(&[0, 1, 0, 4, 0, 0, 0, 0]);
                b.extend_from_slice(&[0, 4, 0, 24, 0, 0, 0, 0, 0, 0, 0, 16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
                hdr(14, 18, &b)
            },
            (2, 4),
        ),
    ];
    for (bytes, (ty, code)) in &cases {
        s.write_all(bytes).unwrap();
        let r = next(&mut s);
        assert_eq!(r.header.msg_type, 1, "an error for {bytes:02x?}");
        let got = (u16::from_be_bytes([r.bytes[8], r.bytes[9]]), u16::from_be_bytes([r.bytes[10], r.bytes[11]]));
        assert_eq!(got, (*ty, *code), "error for {bytes:02x?}");
        let xid = u32::from_be_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
        assert_eq!(r.header.xid, xid);
        let n = bytes.len().min(64);
        assert_eq!(&r.bytes[12..12 + n], &bytes[..n], "the error carries the offending bytes");
    }
    // Still connected: an echo is answered.
    s.write_all(&hdr(2, 99, b"ping")).unwrap();
    let r = next(&mut s);
    assert_eq!((r.header.msg_type, r.header.xid), (3, 99));
    // And the switch still forwards.
    assert_eq!(hs[0].ping(&hs[1].ip, 2).unwrap(), 2);
    let _ = Ctx::new(Version::Of13);
    let _ = Msg::Hello;
}

/// The real ovs-appctl finds the daemon through `<run-dir>/ovs-vswitchd.pid`
/// (OVS_RUNDIR) and gets OVS-shaped answers.
#[test]
fn ovs_appctl_commands() {
    let hs = hosts("f", 2);
    let mut d = Daemon::start("f", &[&hs[0], &hs[1]], &[]);
    assert_eq!(hs[0].ping(&hs[1].ip, 3).unwrap(), 3);
    let appctl = |args: &[&str]| {
        let o = Command::new("ovs-appctl").env("OVS_RUNDIR", &d.run_dir).args(args).output().unwrap();
        (o.status.code(), String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr))
    };
    let (rc, out) = appctl(&["list-commands"]);
    assert_eq!(rc, Some(0), "{out}");
    assert!(out.contains("dpctl/dump-flows") && out.contains("ofproto/trace"), "{out}");
    assert!(appctl(&["version"]).1.contains("xvs"));
    let (_, show) = appctl(&["dpctl/show"]);
    assert!(show.contains(&hs[0].port) && show.contains("lookups: hit:"), "{show}");
    let (_, flows) = appctl(&["dpctl/dump-flows"]);
    assert!(flows.lines().any(|l| l.contains("packets:") && l.contains("actions:")), "megaflows listed: {flows}");
    let (_, fdb) = appctl(&["fdb/show", &d.bridge]);
    assert!(fdb.contains(&hs[0].mac) && fdb.contains(&hs[1].mac), "{fdb}");
    let (_, tr) = appctl(&["ofproto/trace", &d.bridge, &format!("in_port=1,dl_dst={}", hs[1].mac)]);
    assert!(tr.contains("Datapath actions: 2"), "trace forwards to the learned port: {tr}");
    let (_, st) = appctl(&["dpif-netdev/pmd-stats-show"]);
    assert!(st.contains("packets received:") && st.contains("megaflow hits:"), "{st}");
    assert!(appctl(&["dpif-netdev/pmd-rxq-show"]).1.contains(&hs[1].port));
    // The lines exporters read, with numbers that follow the traffic.
    let num = |text: &str, label: &str| -> u64 {
        let rest = text.split(label).nth(1).unwrap_or_else(|| panic!("{label} in {text}"));
        rest.trim_start().split(|c: char| !c.is_ascii_digit()).next().unwrap().parse().unwrap()
    };
    let (_, perf) = appctl(&["dpif-netdev/pmd-perf-show"]);
    assert!(num(&perf, "Rx packets:") >= 6, "{perf}");
    assert!(num(&perf, "- Upcalls:") >= 1 && perf.contains("us/upcall"), "{perf}");
    assert!(perf.contains("- Megaflow hits:") && perf.contains("subtbl lookups/hit"), "{perf}");
    assert!(num(&perf, "Tx packets:") >= 6 && perf.contains("Tx batches:"), "{perf}");
    let masks = show.lines().find(|l| l.trim_start().starts_with("masks:")).unwrap_or_else(|| panic!("{show}"));
    assert!(num(masks, "total:") >= 1 && masks.contains("hit/pkt:"), "{masks}");
    let (_, mem) = appctl(&["memory/show"]);
    println!("--- dpctl/show\n{show}--- dpif-netdev/pmd-perf-show\n{perf}--- memory/show\n{mem}");
    assert!(num(&mem, "ports:") >= 2 && num(&mem, "udpif keys:") >= 1 && num(&mem, "rss-kB:") > 0, "{mem}");
    let (rc, err) = appctl(&["no/such-command"]);
    assert_eq!(rc, Some(2), "{err}");
    assert!(err.contains("is not a valid command"), "{err}");
    assert_eq!(appctl(&["exit"]).0, Some(0));
    let t = Instant::now();
    while d.child.try_wait().unwrap().is_none() && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(d.child.try_wait().unwrap().is_some(), "exit stops the daemon");
}

/// Groups and meters installed with ovs-ofctl, seen in real traffic:
/// select spreads flows over two hosts, fast_failover moves to the second
/// host when the first one's link goes down, all copies to both, a meter
/// drops what exceeds its rate; the stats commands count it all.
#[test]
fn groups_and_meters_with_traffic() {
    let hs = hosts("g", 3);
    let d = Daemon::start("g", &[&hs[0], &hs[1], &hs[2]], &[]);
    let of13 = |args: &[&str]| {
        let mut a = vec!["--protocols=OpenFlow13"];
        a.extend_from_slice(args);
        d.ofctl(&a)
    };
    let rx = |h: &Host| h.counter("rx_packets");
    let send = |flows: &str, count: &str| {
        let tx = hs[0]
            .util(&["udp-send", "--dst", "10.78.0.2:9000", "--count", count, "--pps", "2000", "--flows", flows])
            .unwrap();
        xvs::netns::finish(tx).unwrap();
        std::thread::sleep(Duration::from_millis(300));
    };
    hs[0].exec(&["ip", "neigh", "replace", "10.78.0.2", "lladdr", &hs[1].mac, "dev", "eth0"]).unwrap();
    of13(&["del-flows"]);

    // select: 400 datagrams over 200 source ports spread over h2 and h3.
    of13(&["add-group", "group_id=1,type=select,bucket=weight:1,output:2,bucket=weight:1,output:3"]);
    of13(&["add-flow", "priority=10,in_port=1,udp,actions=group:1"]);
    let (b2, b3) = (rx(&hs[1]), rx(&hs[2]));
    send("200", "400");
    let (g2, g3) = (rx(&hs[1]) - b2, rx(&hs[2]) - b3);
    assert!(g2 + g3 >= 390, "every datagram went to one bucket: {g2} + {g3}");
    assert!(g2 >= 80 && g3 >= 80, "select spread the flows: {g2} / {g3}");
    let stats = of13(&["dump-group-stats"]);
    assert!(stats.contains("group_id=1") && stats.contains("ref_count=1"), "{stats}");
    let gp: u64 = stats.split("packet_count=").nth(1).unwrap().split(',').next().unwrap().parse().unwrap();
    assert!(gp >= 390, "group counters include cached packets: {stats}");

    // fast_failover: h2 while its link is up, h3 when it goes down.
    of13(&["add-group", "group_id=2,type=ff,bucket=watch_port:2,output:2,bucket=watch_port:3,output:3"]);
    of13(&["mod-flows", "in_port=1,udp,actions=group:2"]);
    let (b2, b3) = (rx(&hs[1]), rx(&hs[2]));
    send("1", "50");
    assert!(rx(&hs[1]) - b2 >= 50 && rx(&hs[2]) - b3 < 5, "ff uses the first live bucket");
    hs[1].exec(&["ip", "link", "set", "eth0", "down"]).unwrap();
    assert!(eventually(5, || d.ofctl(&["show"]).contains("LINK_DOWN")), "port status follows the link");
    let b3 = rx(&hs[2]);
    send("1", "50");
    assert!(rx(&hs[2]) - b3 >= 50, "ff failed over to h3");
    hs[1].exec(&["ip", "link", "set", "eth0", "up"]).unwrap();

    // all: both get a copy.
    of13(&["add-group", "group_id=3,type=all,bucket=output:2,bucket=output:3"]);
    of13(&["mod-flows", "in_port=1,udp,actions=group:3"]);
    assert!(eventually(5, || !d.ofctl(&["show"]).contains("LINK_DOWN")));
    let (b2, b3) = (rx(&hs[1]), rx(&hs[2]));
    send("1", "50");
    assert!(rx(&hs[1]) - b2 >= 50 && rx(&hs[2]) - b3 >= 50, "all copies to both");

    // A meter of 100 packets/s (burst 10) lets about 60 of 1000 datagrams
    // sent over half a second through.
    of13(&["add-meter", "meter=1,pktps,burst,stats,band=type=drop,rate=100,burst_size=10"]);
    of13(&["mod-flows", "in_port=1,udp,actions=meter:1,output:2"]);
    let b2 = rx(&hs[1]);
    send("1", "1000");
    let got = rx(&hs[1]) - b2;
    assert!((20..=250).contains(&got), "the meter limits the rate: {got} of 1000");
    let ms = of13(&["meter-stats"]);
    assert!(ms.contains("meter:1") && ms.contains("flow_count:1"), "{ms}");
    let dropped: u64 = ms.split("0: packet_count:").nth(1).unwrap().split_whitespace().next().unwrap().parse().unwrap();
    assert!(dropped >= 700, "band counted the drops: {ms}");
    assert!(of13(&["dump-meters"]).contains("type=drop rate=100 burst_size=10"));
    // Deleting the meter deletes its flow.
    of13(&["del-meter", "meter=1"]);
    assert!(!of13(&["dump-flows"]).contains("meter:1"));
    of13(&["del-groups"]);
    assert!(!of13(&["dump-groups"]).contains("group_id"));
}

/// Controller roles (OpenFlow 1.3): a new master demotes the old one to
/// slave, a slave may not modify the switch (IS_SLAVE), a stale
/// generation id is refused (ROLE_REQUEST_FAILED/STALE).
#[test]
fn controller_roles() {
    let hs = hosts("r", 1);
    let d = Daemon::start("r", &[&hs[0]], &[]);
    let connect = || {
        let mut s = std::os::unix::net::UnixStream::connect(d.mgmt()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        s.write_all(&openflow::header::hello(&[Version::Of13], 1)).unwrap();
        (s, Framer::default())
    };
    fn next(s: &mut std::os::unix::net::UnixStream, f: &mut Framer) -> openflow::Message {
        let mut buf = [0u8; 4096];
        loop {
            if let Ok(Some(m)) = f.poll_message() {
                if m.header.msg_type != 0 {
                    return m;
                }
                continue;
            }
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0, "closed");
            f.handle_bytes(&buf[..n]);
        }
    }
    let role = |role: u32, gen: u64, xid: u32| {
        let mut b = vec![4, 24, 0, 24];
        b.extend_from_slice(&xid.to_be_bytes());
        b.extend_from_slice(&role.to_be_bytes());
        b.extend_from_slice(&[0; 4]);
        b.extend_from_slice(&gen.to_be_bytes());
        b
    };
    let reply_role = |m: &openflow::Message| u32::from_be_bytes([m.bytes[8], m.bytes[9], m.bytes[10], m.bytes[11]]);
    let (mut a, mut fa) = connect();
    let (mut b, mut fb) = connect();
    a.write_all(&role(2, 1, 10)).unwrap();
    let r = next(&mut a, &mut fa);
    assert_eq!((r.header.msg_type, reply_role(&r)), (25, 2), "A is master");
    b.write_all(&role(2, 2, 11)).unwrap();
    let r = next(&mut b, &mut fb);
    assert_eq!((r.header.msg_type, reply_role(&r)), (25, 2), "B is master");
    // A was demoted: asking for "no change" reports slave.
    a.write_all(&role(0, 0, 12)).unwrap();
    let r = next(&mut a, &mut fa);
    assert_eq!(reply_role(&r), 3, "A is now a slave");
    // A slave may not modify flows.
    let fm = msg::FlowMod {
        cmd: ofproto::FlowModCmd::Add,
        spec: ofproto::parse_flow("priority=5,actions=drop", ofproto::Need::Actions).unwrap(),
        buffer_id: msg::NO_BUFFER,
        out_port: msg::OFPP_ANY,
        out_group: msg::OFPG_ANY,
        flags: 0,
        importance: 0,
    };
    a.write_all(&msg::encode_flow_mod(Version::Of13, 13, &fm)).unwrap();
    let r = next(&mut a, &mut fa);
    assert_eq!((r.header.msg_type, &r.bytes[8..12]), (1, &[0u8, 1, 0, 10][..]), "BAD_REQUEST/IS_SLAVE");
    // A stale generation id is refused.
    a.write_all(&role(2, 1, 14)).unwrap();
    let r = next(&mut a, &mut fa);
    assert_eq!((r.header.msg_type, &r.bytes[8..12]), (1, &[0u8, 11, 0, 0][..]), "ROLE_REQUEST_FAILED/STALE");
    // The master still may.
    b.write_all(&msg::encode_flow_mod(Version::Of13, 15, &fm)).unwrap();
    b.write_all(&[4, 20, 0, 8, 0, 0, 0, 16]).unwrap();
    let r = next(&mut b, &mut fb);
    assert_eq!(r.header.msg_type, 21, "barrier reply, no error before it");
    assert!(d.ofctl(&["dump-flows"]).contains("priority=5 actions=drop"));
}

/// `--protocols` (the Bridge table's `protocols`): only the listed versions
/// are negotiated, as with ovs-vswitchd; a bad name is refused with it.
#[test]
fn protocols_limit_the_versions_negotiated() {
    let hs = hosts("pv", 1);
    let d = Daemon::start("pv", &[&hs[0]], &["--protocols", "OpenFlow13,OpenFlow15"]);
    assert!(d.ofctl_status(&["-OOpenFlow13", "show"]).0, "1.3 is allowed");
    assert!(d.ofctl_status(&["-OOpenFlow15", "show"]).0, "1.5 is allowed");
    let (ok, _, err) = d.ofctl_status(&["-OOpenFlow10", "show"]);
    assert!(!ok && err.contains("version negotiation failed"), "1.0 is not: {err}");
    let o = Command::new(env!("CARGO_BIN_EXE_xvs"))
        .args(["switch", "--run-dir", "/tmp/xvs-oft-pvbad", "--bridge", "brpvbad", "--protocols", "OpenFlow99"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("\"OpenFlow99\" is not an OpenFlow version"), "{err}");
}
