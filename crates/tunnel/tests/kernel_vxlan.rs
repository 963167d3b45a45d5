//! Interoperability with a foreign VXLAN implementation: the Linux kernel.
//!
//! Plan: a namespace holds a kernel VXLAN device (VNI 4242, remote
//! 172.30.77.1) over a veth whose other end stays in the root namespace
//! with no address. The test plays the remote tunnel endpoint: it
//! encapsulates an ICMP echo request with `tunnel::encap::push`, sends it
//! into the veth over AF_PACKET, and decapsulates what comes back with
//! `tunnel::encap::pop`. Verified: the kernel accepts our encapsulation
//! (it answers the ping) and we accept the kernel's (the reply pops with
//! the right VNI, endpoints and an inner echo reply). Once over IPv4 and
//! once over IPv6 (fd30:77::/64). The namespace and
//! veth are removed also on failure. Needs root and ethtool. (This kernel has no
//! geneve or gretap module; those are checked against Open vSwitch in the
//! switch's own tunnel tests.)

use netdev::{Netdev, Packet};
use netdev_linux::afpacket::AfPacketPort;
use std::process::Command;
use std::time::{Duration, Instant};
use tunnel::encap::{pop, push, udp_src_port};
use tunnel::{EncapSpec, Kind, Listen, TunnelMeta};

fn sh(args: &[&str]) -> String {
    let o = Command::new(args[0]).args(&args[1..]).output().expect("run");
    assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

struct Cleanup(String, String);
impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
        let _ = Command::new("ip").args(["link", "del", &self.1]).status();
    }
}

fn mac(s: &str) -> [u8; 6] {
    let v: Vec<u8> = s.trim().split(':').map(|x| u8::from_str_radix(x, 16).unwrap()).collect();
    v.try_into().unwrap()
}

#[test]
fn linux_vxlan_answers_our_encapsulation_and_we_decapsulate_its_reply() {
    kernel_vxlan(false);
}

/// The same over IPv6. The kernel's VXLAN device drops UDP over IPv6 with
/// a zero checksum unless told otherwise (`udp6zerocsumrx`, off here), so
/// this also shows the checksum we compute over IPv6 without `csum`.
#[test]
fn linux_vxlan_over_ipv6_answers_our_encapsulation_without_csum_option() {
    kernel_vxlan(true);
}

fn kernel_vxlan(v6: bool) {
    let id = std::process::id() % 100_000;
    let f = if v6 { "6" } else { "" };
    let (ns, root, peer, vx) =
        (format!("tvx{f}{id}"), format!("tvr{f}{id}"), format!("tvn{f}{id}"), format!("vx{f}{id}"));
    let _c = Cleanup(ns.clone(), root.clone());
    sh(&["ip", "netns", "add", &ns]);
    sh(&["ip", "link", "add", &root, "type", "veth", "peer", "name", &peer]);
    sh(&["ip", "link", "set", &peer, "netns", &ns]);
    let _ = Command::new("sysctl").args(["-qw", &format!("net.ipv6.conf.{root}.disable_ipv6=1")]).status();
    sh(&["ip", "link", "set", &root, "up"]);
    let nsx = |a: &[&str]| {
        let mut v = vec!["ip", "netns", "exec", ns.as_str()];
        v.extend_from_slice(a);
        sh(&v)
    };
    let (ours, theirs, their_addr) = if v6 {
        (0xfd30_0077u128 << 96 | 1, 0xfd30_0077u128 << 96 | 2, "fd30:77::2/64")
    } else {
        (0xac1e_4d01, 0xac1e_4d02, "172.30.77.2/24")
    };
    let ip = |a: u128| {
        if v6 {
            std::net::Ipv6Addr::from(a).to_string()
        } else {
            std::net::Ipv4Addr::from(a as u32).to_string()
        }
    };
    if v6 {
        nsx(&["ip", "-6", "addr", "add", their_addr, "dev", &peer, "nodad"]);
    } else {
        nsx(&["ip", "addr", "add", their_addr, "dev", &peer]);
    }
    nsx(&["ip", "link", "set", &peer, "up"]);
    // The veth keeps Linux's defaults: the kernel leaves the outer UDP
    // checksum (always computed over IPv6) to transmit offload, so what
    // arrives holds only the pseudo-header sum, which `pop` accepts as
    // the promise of a local sender (Open vSwitch 3.1 rejects it).
    nsx(&[
        "ip",
        "link",
        "add",
        &vx,
        "type",
        "vxlan",
        "id",
        "4242",
        "remote",
        &ip(ours),
        "dstport",
        "4789",
        "dev",
        &peer,
    ]);
    nsx(&["ip", "addr", "add", "192.168.177.2/24", "dev", &vx]);
    nsx(&["ip", "link", "set", &vx, "up"]);
    let ours_outer = [0x02, 0x30, 0x77, 0, 0, 1];
    let ours_inner = [0x02, 0x30, 0x77, 0, 0, 0x11];
    nsx(&["ip", "neigh", "replace", &ip(ours), "lladdr", "02:30:77:00:00:01", "dev", &peer]);
    nsx(&["ip", "neigh", "replace", "192.168.177.1", "lladdr", "02:30:77:00:00:11", "dev", &vx]);
    let peer_mac = mac(&nsx(&["cat", &format!("/sys/class/net/{peer}/address")]));
    let vx_mac = mac(&nsx(&["cat", &format!("/sys/class/net/{vx}/address")]));

    let mut port = AfPacketPort::open(&root).expect("AF_PACKET on the veth");
    let inner = wire::build::Frame::new(ours_inner, vx_mac)
        .ipv4(0xc0a8_b101, 0xc0a8_b102)
        .icmp_echo(77, 1)
        .payload(b"across the tunnel")
        .build();
    // Over IPv4 the checksum is asked for; over IPv6 it is computed anyway.
    let spec = EncapSpec { kind: Kind::Vxlan, eth_src: ours_outer, eth_dst: peer_mac, dst_port: 4789, csum: !v6 };
    let meta = TunnelMeta {
        tun_id: 4242,
        src: ours,
        dst: theirs,
        v6,
        ttl: 64,
        tp_src: udp_src_port(12345),
        ..TunnelMeta::default()
    };
    let mut out = Vec::new();
    push(&spec, &meta, &inner, 1, &mut out);
    let listen = Listen { udp: vec![(4789, Kind::Vxlan)], gre: false };
    let t0 = Instant::now();
    let mut sent = 0;
    let mut got = None;
    while got.is_none() && t0.elapsed() < Duration::from_secs(5) {
        if sent < 5 && t0.elapsed() >= Duration::from_millis(500 * sent) {
            port.tx_batch(&mut vec![Packet::from_slice(&out)]).unwrap();
            sent += 1;
        }
        let mut rx = Vec::new();
        let _ = port.rx_batch(0, &mut rx, 32);
        for p in rx {
            if let Ok(d) = pop(p.data(), &listen) {
                let i = &p.data()[d.inner..d.end];
                // Inner IPv4 ICMP echo reply, id 77, from .2 to .1.
                if i.len() >= 42 && i[12..14] == [8, 0] && i[23] == 1 && i[34] == 0 && i[38..40] == 77u16.to_be_bytes()
                {
                    got = Some((d, i.to_vec()));
                }
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let (d, reply) = got.expect("the kernel's VXLAN device answered our encapsulated ping");
    assert_eq!(d.meta.tun_id, 4242);
    assert_eq!((d.meta.src, d.meta.dst, d.meta.v6), (theirs, ours, v6));
    assert_eq!(&reply[26..30], &[192, 168, 177, 2]);
    assert_eq!(&reply[0..6], &ours_inner, "the inner reply is addressed to our inner MAC");
    assert!(reply.ends_with(b"across the tunnel"));
}
