//! Tap and AF_PACKET ports (root needed).

mod common;

use common::*;
use netdev::{Netdev, Packet};
use netdev_linux::{AfPacketPort, TapPort};
use std::time::Duration;

fn frame(ethertype: u16, fill: u8) -> Vec<u8> {
    let mut f = vec![fill; 60];
    f[0..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x02]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x01]);
    f[12..14].copy_from_slice(&ethertype.to_be_bytes());
    f
}

/// An internal port and an AF_PACKET socket on the same tap exchange
/// frames both ways; a VLAN tag the kernel moved into metadata comes back.
#[test]
fn internal_tap_and_af_packet_exchange_frames() {
    let br = name("br", "");
    let mut tap = TapPort::internal(&br).unwrap();
    assert_eq!(tap.name(), br);
    assert_eq!(tap.info().kind, "internal");
    assert!(tap.rx_fd(0).is_some());
    let mut raw = AfPacketPort::open(&br).unwrap();
    assert_eq!(raw.info().kind, "system");

    // tap -> kernel -> AF_PACKET (incoming on the tap interface).
    let f = frame(0x88b5, 0xab);
    tap.tx_batch(&mut vec![Packet::from_slice(&f)]).unwrap();
    let got = wait_rx(&mut raw, Duration::from_secs(3), |p| p.len() >= 14 && p.data()[12..14] == [0x88, 0xb5])
        .expect("AF_PACKET did not see the tap's frame");
    assert_eq!(got.data(), &f[..]);

    // VLAN-tagged: the stack untags it into skb metadata; the port restores it.
    let mut v = frame(0x8100, 0xcd);
    v[14..16].copy_from_slice(&0x2064u16.to_be_bytes()); // PCP 1, VID 100
    v[16..18].copy_from_slice(&0x88b5u16.to_be_bytes());
    tap.tx_batch(&mut vec![Packet::from_slice(&v)]).unwrap();
    let got = wait_rx(&mut raw, Duration::from_secs(3), |p| p.len() >= 18 && p.data()[12..14] == [0x81, 0x00])
        .expect("VLAN frame lost");
    assert_eq!(got.data(), &v[..]);

    // AF_PACKET -> kernel transmits on the tap -> the tap fd reads it; the
    // AF_PACKET socket must not read back its own transmission.
    let f2 = frame(0x88b6, 0xef);
    raw.tx_batch(&mut vec![Packet::from_slice(&f2)]).unwrap();
    let got = wait_rx(&mut tap, Duration::from_secs(3), |p| p.len() >= 14 && p.data()[12..14] == [0x88, 0xb6])
        .expect("tap did not read the AF_PACKET frame");
    assert_eq!(got.data(), &f2[..]);
    assert!(wait_rx(&mut raw, Duration::from_millis(300), |p| p.data()[12..14] == [0x88, 0xb6]).is_none());
    assert_eq!(raw.stats().tx_packets, 1);
    assert!(tap.stats().tx_packets == 2 && tap.stats().rx_packets >= 1);
}

/// ping from a namespace behind an AF_PACKET port to a namespace behind a
/// tap port, through a forwarder.
#[test]
fn ping_through_af_packet_and_tap() {
    let mut t = Topo::new("tp", 1);
    let tap_name = name("tp", "t");
    let tap = TapPort::open(&tap_name).unwrap();
    // Move the tap into a second namespace (the fd keeps working) as 10.9.0.2.
    let ns1 = name("tp", "n1");
    sh(&["ip", "netns", "del", &ns1]);
    must(&["ip", "netns", "add", &ns1]);
    t.ns.push(ns1.clone());
    must(&["ip", "link", "set", &tap_name, "netns", &ns1]);
    t.exec(1, &["ip", "addr", "add", "10.9.0.2/24", "dev", &tap_name]);
    t.exec(1, &["ip", "link", "set", &tap_name, "up"]);
    let raw = AfPacketPort::open(&t.dev[0]).unwrap();
    let fw = Forwarder::start(vec![Box::new(raw), Box::new(tap)]);
    let ok = t.ping(0, 1, 3);
    let ports = fw.finish();
    assert!(ok, "ping through AF_PACKET <-> tap failed");
    for p in &ports {
        assert!(p.stats().rx_packets >= 3 && p.stats().tx_packets >= 3, "{}: {:?}", p.name(), p.stats());
    }
}
