//! The route table, rtnetlink decoding and the neighbour cache.
//!
//! Plan: routes go in as the kernel reports them (crafted RTM_NEWROUTE /
//! RTM_NEWADDR messages) and as an operator adds them; lookups must follow
//! longest-prefix match, metrics and user-over-cached; `show` prints OVS's
//! layout. The neighbour cache learns from ARP and NA frames, rate-limits
//! its own requests and builds valid ARP/NS frames.

use tunnel::neigh::{request, NeighCache};
use tunnel::netlink::{self, Event};
use tunnel::route::{mapped, parse_prefix, parse_user_route, Route, RouteTable};

fn ifname(i: u32) -> Option<String> {
    match i {
        2 => Some("br-phy".into()),
        3 => Some("eth1".into()),
        _ => None,
    }
}

/// An RTM_NEWROUTE message for an IPv4 route.
fn newroute(dst: [u8; 4], plen: u8, oif: u32, gw: Option<[u8; 4]>, metric: u32) -> Vec<u8> {
    let mut attrs = Vec::new();
    let mut attr = |t: u16, v: &[u8]| {
        attrs.extend_from_slice(&((4 + v.len()) as u16).to_ne_bytes());
        attrs.extend_from_slice(&t.to_ne_bytes());
        attrs.extend_from_slice(v);
        while attrs.len() % 4 != 0 {
            attrs.push(0);
        }
    };
    attr(15, &254u32.to_ne_bytes());
    if plen > 0 {
        attr(1, &dst);
    }
    attr(4, &oif.to_ne_bytes());
    if let Some(g) = gw {
        attr(5, &g);
    }
    attr(6, &metric.to_ne_bytes());
    let body_len = 12 + attrs.len();
    let mut m = Vec::new();
    m.extend_from_slice(&((16 + body_len) as u32).to_ne_bytes());
    m.extend_from_slice(&netlink::RTM_NEWROUTE.to_ne_bytes());
    m.extend_from_slice(&[0; 10]);
    m.extend_from_slice(&[2, plen, 0, 0, 254, 4, 0, 1, 0, 0, 0, 0]);
    m.extend_from_slice(&attrs);
    m
}

fn newaddr(a: [u8; 4], plen: u8, ifindex: u32) -> Vec<u8> {
    let mut m = Vec::new();
    m.extend_from_slice(&(16u32 + 8 + 8).to_ne_bytes());
    m.extend_from_slice(&netlink::RTM_NEWADDR.to_ne_bytes());
    m.extend_from_slice(&[0; 10]);
    m.extend_from_slice(&[2, plen, 0, 0]);
    m.extend_from_slice(&ifindex.to_ne_bytes());
    m.extend_from_slice(&8u16.to_ne_bytes());
    m.extend_from_slice(&1u16.to_ne_bytes());
    m.extend_from_slice(&a);
    m
}

fn v4(a: [u8; 4]) -> u128 {
    mapped(u32::from_be_bytes(a))
}

#[test]
fn kernel_routes_and_longest_prefix_match() {
    let mut buf = newroute([0, 0, 0, 0], 0, 3, Some([10, 0, 0, 254]), 100);
    buf.extend(newroute([172, 31, 0, 0], 16, 2, None, 0));
    buf.extend(newroute([172, 31, 9, 0], 24, 3, None, 0));
    buf.extend(newaddr([172, 31, 0, 1], 16, 2));
    buf.extend(newaddr([10, 0, 0, 1], 24, 3));
    buf.extend_from_slice(&[20, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]); // NLMSG_DONE
    let ev = netlink::parse(&buf, &ifname);
    assert_eq!(ev.len(), 6);
    assert_eq!(ev[5], Event::Done);
    let mut t = RouteTable::new();
    netlink::apply(&mut t, &ev, &ifname);
    let r = t.lookup(v4([172, 31, 0, 7])).unwrap();
    assert_eq!((r.dev.as_str(), r.gateway, r.src), ("br-phy", None, Some(v4([172, 31, 0, 1]))));
    let r = t.lookup(v4([172, 31, 9, 7])).unwrap();
    assert_eq!(r.dev, "eth1", "the /24 beats the /16");
    let r = t.lookup(v4([8, 8, 8, 8])).unwrap();
    assert_eq!((r.dev.as_str(), r.gateway), ("eth1", Some(v4([10, 0, 0, 254]))));
    assert!(t.lookup(0xfd00 << 112).is_none(), "no IPv6 route: an IPv4 default does not match IPv6");
    // A user route wins over the cached one for the same prefix.
    t.insert(parse_user_route(&["172.31.0.0/16", "eth1", "172.31.0.254"]).unwrap());
    assert_eq!(t.lookup(v4([172, 31, 0, 7])).unwrap().dev, "eth1");
    let show = t.show();
    assert!(show.starts_with("Route Table:\n"), "{show}");
    assert!(show.contains("User: 172.31.0.0/16 dev eth1 GW 172.31.0.254\n"), "{show}");
    assert!(show.contains("Cached: 0.0.0.0/0 dev eth1 GW 10.0.0.254"), "{show}");
    // Route deletion follows the kernel.
    let mut del = newroute([172, 31, 9, 0], 24, 3, None, 0);
    del[4..6].copy_from_slice(&netlink::RTM_DELROUTE.to_ne_bytes());
    netlink::apply(&mut t, &netlink::parse(&del, &ifname), &ifname);
    assert_eq!(t.lookup(v4([172, 31, 9, 7])).unwrap().dev, "eth1", "falls back to the user /16");
    assert_eq!(t.remove(v4([172, 31, 0, 0]), 112, true, None), 1);
    assert_eq!(t.lookup(v4([172, 31, 9, 7])).unwrap().dev, "br-phy");
}

#[test]
fn garbage_netlink_is_skipped() {
    for n in 0..64 {
        let junk: Vec<u8> = (0..n).map(|i| (i * 37 + 11) as u8).collect();
        let _ = netlink::parse(&junk, &ifname);
    }
    let mut m = newroute([10, 0, 0, 0], 8, 2, None, 0);
    m.truncate(30);
    assert!(netlink::parse(&m, &ifname).is_empty(), "a message longer than the buffer is not read");
}

#[test]
fn user_route_syntax_errors_name_the_field() {
    assert!(parse_user_route(&["10.0.0.0/33", "br0"]).unwrap_err().contains("prefix length"));
    assert!(parse_user_route(&["10.0.0.0/8", "br0", "nothere"]).unwrap_err().contains("gateway"));
    assert!(parse_user_route(&["10.0.0.0/8"]).unwrap_err().contains("usage"));
    assert_eq!(parse_prefix("fd00::/64").unwrap(), (0xfd00 << 112, 64));
    let r: Route = parse_user_route(&["fd00::/64", "br-phy", "src=fd00::1"]).unwrap();
    assert_eq!(r.src, Some(0xfd00 << 112 | 1));
}

#[test]
fn neighbours_from_arp_and_nd() {
    let mut n = NeighCache::new();
    let mac = [0x02, 0xaa, 0, 0, 0, 9];
    // An ARP reply from 172.31.0.2.
    let arp = wire::build::Frame::new(mac, [2, 0, 0, 0, 0, 1])
        .arp(2, mac, 0xac1f_0002, [2, 0, 0, 0, 0, 1], 0xac1f_0001)
        .build();
    assert!(n.snoop(&arp, "br-phy", 0));
    assert_eq!(n.lookup(mapped(0xac1f_0002), 1).unwrap().mac, mac);
    // An NA for fd00::2 with its target link-layer address.
    let na = wire::build::Frame::new(mac, [2, 0, 0, 0, 0, 1])
        .ipv6(0xfd00 << 112 | 2, 0xfd00 << 112 | 1)
        .nd_na(0xfd00 << 112 | 2, Some(mac))
        .build();
    assert!(n.snoop(&na, "br-phy", 0));
    assert!(n.lookup(0xfd00 << 112 | 2, 1).is_some());
    let show = n.show(1);
    assert!(show.contains("172.31.0.2") && show.contains("02:aa:00:00:00:09") && show.contains("br-phy"), "{show}");
    // Entries expire; requests are rate limited.
    assert!(n.lookup(mapped(0xac1f_0002), 16 * 60 * 1000).is_none());
    assert!(n.should_ask(mapped(0xac1f_0003), 0));
    assert!(!n.should_ask(mapped(0xac1f_0003), 500));
    assert!(n.should_ask(mapped(0xac1f_0003), 1500));
    // The ARP request we send is one the cache itself would learn from.
    let req = request(mapped(0xac1f_0003), [2, 0, 0, 0, 0, 1], mapped(0xac1f_0001));
    assert_eq!(&req[..6], &[0xff; 6]);
    let mut m = NeighCache::new();
    assert!(m.snoop(&req, "br-phy", 0));
    assert_eq!(m.lookup(mapped(0xac1f_0001), 0).unwrap().mac, [2, 0, 0, 0, 0, 1]);
    // The NS has a valid ICMPv6 checksum.
    let ns = request(0xfd00 << 112 | 2, [2, 0, 0, 0, 0, 1], 0xfd00 << 112 | 1);
    let icmp = &ns[54..];
    let dst = u128::from_be_bytes(ns[38..54].try_into().unwrap());
    assert_eq!(wire::checksum::l4_checksum_v6(0xfd00 << 112 | 1, dst, 58, icmp), 0);
    assert_eq!(&ns[..2], &[0x33, 0x33]);
}
