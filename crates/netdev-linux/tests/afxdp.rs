//! AF_XDP ports on veth pairs (root needed).

mod common;

use common::*;
use netdev::Netdev;
use netdev_linux::{ActiveMode, AfxdpConfig, AfxdpPort, UmemConfig, UmemHandle, XdpMode};
use std::time::Duration;

fn cfg(mode: XdpMode) -> AfxdpConfig {
    AfxdpConfig { xdp_mode: mode, ..Default::default() }
}

fn rx_from_namespace(tag: &str, mode: XdpMode, want: ActiveMode) {
    let t = Topo::new(tag, 1);
    let mut port = AfxdpPort::open(&t.dev[0], cfg(mode)).unwrap();
    assert_eq!(port.xdp_mode(), want);
    assert_eq!(port.info().xdp_mode, want.as_str());
    assert_eq!(port.info().kind, "afxdp");
    assert!(ip_shows_xdp(&t.dev[0]));
    // Ping a neighbour that does not exist: the namespace sends ARP requests.
    let ns = t.ns[0].clone();
    let pinger = std::thread::spawn(move || {
        sh(&["ip", "netns", "exec", &ns, "ping", "-c", "3", "-i", "0.3", "-W", "1", "10.9.0.99"]);
    });
    let p = wait_rx(&mut port, Duration::from_secs(5), is_arp).expect("no ARP frame received");
    assert_eq!(&p.data()[38..42], &[10, 9, 0, 99], "ARP target");
    assert!(p.frame_owner().is_some(), "received packets reference UMEM frames");
    // No NIC hash on veth, and the datapath hashes the extracted key itself.
    assert!(p.rx_hash.is_none());
    drop(p);
    pinger.join().unwrap();
    assert!(port.stats().rx_packets >= 1);
    drop(port);
    assert!(xdp_gone(&t.dev[0]), "XDP program left after drop");
}

#[test]
fn native_rx_from_namespace() {
    rx_from_namespace("rn", XdpMode::Native, ActiveMode::Native);
}

#[test]
fn generic_rx_from_namespace() {
    rx_from_namespace("rg", XdpMode::Generic, ActiveMode::Generic);
}

#[test]
fn best_effort_picks_native_on_veth() {
    let t = Topo::new("be", 1);
    let port = AfxdpPort::open(&t.dev[0], cfg(XdpMode::BestEffort)).unwrap();
    assert_eq!(port.xdp_mode(), ActiveMode::Native);
}

fn ping_through(tag: &str, mode: XdpMode, shared: bool) {
    let t = Topo::new(tag, 2);
    let ucfg = UmemConfig { nframes: 8192, ..Default::default() };
    let umem = UmemHandle::new(ucfg).unwrap();
    let c = AfxdpConfig { shared_umem: shared.then(|| umem.clone()), ..cfg(mode) };
    let a = AfxdpPort::open(&t.dev[0], c.clone()).unwrap();
    let b = AfxdpPort::open(&t.dev[1], c).unwrap();
    if shared {
        assert!(a.info().detail.contains("shared-umem"), "{}", a.info().detail);
        assert_eq!(a.umem().id(), b.umem().id());
    } else {
        assert_ne!(a.umem().id(), b.umem().id());
    }
    let fw = Forwarder::start(vec![Box::new(a), Box::new(b)]);
    // Echoes of 442 bytes, and the ARP frames before them (60 bytes): on
    // veth the kernel copies every frame sent, and frames up to 256 bytes
    // are copied into a recently used frame first (see the afxdp module).
    let ok = t.ping_sized(0, 1, 5, 400);
    let ports = fw.finish();
    for p in &ports {
        eprintln!("{}: {:?} {:?}", p.name(), p.info(), p.stats());
    }
    assert!(ok, "ping through the {} forwarder failed", if shared { "shared-UMEM" } else { "copy-mode" });
    for p in &ports {
        let d = p.info().detail;
        let zc: u64 = field(&d, "zero_copy_tx=");
        let cp: u64 = field(&d, "copied_tx=");
        assert!(p.stats().tx_packets >= 6, "{d}");
        if shared {
            // The echoes leave from the frames they arrived in; only the
            // small ARP frames are copied.
            assert!(zc >= 5 && cp <= 4, "{}: {d}", p.name());
        } else {
            assert!(cp >= 6 && zc == 0, "{}: {d}", p.name());
        }
    }
    drop(ports);
    for d in &t.dev {
        assert!(xdp_gone(d), "XDP left on {d}");
    }
    // Every frame is back in the pool once the ports are gone.
    assert_eq!(umem.free_frames(), ucfg.nframes as usize);
}

fn field(detail: &str, key: &str) -> u64 {
    let i = detail.find(key).unwrap_or_else(|| panic!("{key} in {detail}")) + key.len();
    detail[i..].split(' ').next().unwrap().parse().unwrap()
}

#[test]
fn shared_umem_ping_native() {
    ping_through("sn", XdpMode::Native, true);
}

#[test]
fn shared_umem_ping_generic() {
    ping_through("sg", XdpMode::Generic, true);
}

#[test]
fn copy_mode_ping_native() {
    ping_through("cn", XdpMode::Native, false);
}

#[test]
fn copy_mode_ping_generic() {
    ping_through("cg", XdpMode::Generic, false);
}

/// A received packet sent unchanged on another port of the same UMEM
/// reaches B's peer namespace. veth's sockets are copy-mode (the kernel
/// copies what it sends), so this small frame (an ARP request) is copied
/// into a recently used frame first; larger ones leave from the frame
/// they arrived in (`shared_umem_ping_*`).
#[test]
fn shared_umem_rx_a_tx_b_arrives_unchanged() {
    let t = Topo::new("ab", 2);
    let umem = UmemHandle::new(UmemConfig::default()).unwrap();
    let c = AfxdpConfig { shared_umem: Some(umem.clone()), xdp_mode: XdpMode::Native, ..Default::default() };
    let mut a = AfxdpPort::open(&t.dev[0], c.clone()).unwrap();
    let mut b = AfxdpPort::open(&t.dev[1], c).unwrap();
    // Capture in B's namespace.
    let ns = t.ns[1].clone();
    let cap = std::thread::spawn(move || {
        std::process::Command::new("ip")
            .args([
                "netns",
                "exec",
                &ns,
                "timeout",
                "6",
                "tcpdump",
                "-c",
                "1",
                "-nn",
                "-i",
                "eth0",
                "arp",
                "and",
                "arp[24:4]=0x0a090063",
            ])
            .output()
            .unwrap()
    });
    std::thread::sleep(Duration::from_millis(800));
    let ns = t.ns[0].clone();
    let pinger = std::thread::spawn(move || {
        sh(&["ip", "netns", "exec", &ns, "ping", "-c", "2", "-i", "0.5", "-W", "1", "10.9.0.99"]);
    });
    let p = wait_rx(&mut a, Duration::from_secs(5), is_arp).expect("no ARP on A");
    let bytes = p.data().to_vec();
    let mut v = vec![p];
    b.tx_batch(&mut v).unwrap();
    assert!(v.is_empty());
    let out = cap.join().unwrap();
    pinger.join().unwrap();
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(s.contains("10.9.0.99"), "B's peer did not see the frame: {s} {}", String::from_utf8_lossy(&out.stderr));
    assert!(!b.driver_zero_copy(), "veth has no AF_XDP zero-copy driver mode");
    assert_eq!(b.tx_path_counters().zero_copy, 0);
    assert_eq!(b.tx_path_counters().copied, 1);
    assert_eq!(&bytes[38..42], &[10, 9, 0, 99]);
    // Dropping one port keeps the other working and frees its frames.
    drop(a);
    b.poll_housekeeping();
    drop(b);
    assert_eq!(umem.free_frames(), UmemConfig::default().nframes as usize);
}

/// A port opened on a device where a netlink-attached XDP program was left
/// behind clears it first.
#[test]
fn leftover_program_is_cleared_at_open() {
    let t = Topo::new("lo", 1);
    let obj = std::env::temp_dir().join(format!("{}.o", t.dev[0]));
    std::fs::write(&obj, bpf::object_bytes()).unwrap();
    let ok = sh(&["ip", "link", "set", "dev", &t.dev[0], "xdpgeneric", "obj", obj.to_str().unwrap(), "sec", "xdp"]);
    let _ = std::fs::remove_file(&obj);
    assert!(ok);
    assert!(ip_shows_xdp(&t.dev[0]));
    let port = AfxdpPort::open(&t.dev[0], cfg(XdpMode::Native)).unwrap();
    assert_eq!(port.xdp_mode(), ActiveMode::Native);
    drop(port);
    assert!(xdp_gone(&t.dev[0]));
}

/// Two receive queues per device: the port opens a socket on each (the
/// default n_rxq = all queues), and traffic gets through whichever queue
/// the sender's flow lands on.
#[test]
fn multi_queue_ping() {
    let t = Topo::with_queues("mq", 2, 2);
    let umem = UmemHandle::new(UmemConfig::default()).unwrap();
    let c = AfxdpConfig { shared_umem: Some(umem), xdp_mode: XdpMode::Native, ..Default::default() };
    let a = AfxdpPort::open(&t.dev[0], c.clone()).unwrap();
    let b = AfxdpPort::open(&t.dev[1], c).unwrap();
    assert_eq!(a.n_rxq(), 2);
    assert_eq!(b.info().n_rxq, 2);
    assert!(a.rx_fd(1).is_some() && a.rx_fd(2).is_none());
    let fw = Forwarder::start(vec![Box::new(a), Box::new(b)]);
    let ok = t.ping(0, 1, 3) && t.ping(1, 0, 3);
    drop(fw.finish());
    assert!(ok);
}

/// Explicit n_rxq beyond the device's queues is refused cleanly.
#[test]
fn too_many_queues_is_an_error() {
    let t = Topo::new("tq", 1);
    let c = AfxdpConfig { n_rxq: 4, xdp_mode: XdpMode::Native, ..Default::default() };
    assert!(AfxdpPort::open(&t.dev[0], c).is_err());
    // And nothing is left attached after the failed open.
    assert!(xdp_gone(&t.dev[0]));
}
