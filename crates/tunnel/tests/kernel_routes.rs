//! The route table follows the kernel's: a dump of a namespace's routes
//! and addresses over rtnetlink gives the same answers as `ip route get`,
//! and route notifications (add, delete) keep it current.
//!
//! Plan: a namespace with a veth pair inside it, addresses and a static
//! route via a gateway; an rtnetlink socket opened in that namespace
//! (subscribed to IPv4 route and address groups) dumps and decodes; the
//! test then adds and deletes routes with `ip` and applies the
//! notifications. The namespace is removed also on failure. Needs root.

use netdev_linux::rtnl::RouteSocket;
use std::process::Command;
use std::time::{Duration, Instant};
use tunnel::netlink::{self, RTMGRP_IPV4_IFADDR, RTMGRP_IPV4_ROUTE, RTM_GETADDR, RTM_GETROUTE};
use tunnel::route::{fmt_addr, mapped, RouteTable};

struct Ns(String);
impl Drop for Ns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn ip(ns: &str, args: &str) {
    let mut v = vec!["-n", ns];
    v.extend(args.split_whitespace());
    let o = Command::new("ip").args(&v).output().unwrap();
    assert!(o.status.success(), "ip {args}: {}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn dump_and_notifications_track_a_namespaces_routes() {
    let ns = Ns(format!("trt{}", std::process::id() % 100_000));
    let n = ns.0.as_str();
    assert!(Command::new("ip").args(["netns", "add", n]).status().unwrap().success());
    ip(n, "link add up0 type veth peer name up1");
    ip(n, "addr add 172.30.5.1/24 dev up0");
    ip(n, "link set up0 up");
    ip(n, "link set up1 up");
    ip(n, "route add 10.55.0.0/16 via 172.30.5.254");
    let names = |i: u32| -> Option<String> {
        let o = Command::new("ip").args(["-n", n, "-o", "link", "show"]).output().ok()?;
        String::from_utf8_lossy(&o.stdout).lines().find_map(|l| {
            let (idx, rest) = l.split_once(": ")?;
            (idx.trim().parse::<u32>().ok()? == i).then(|| rest.split(['@', ':']).next().unwrap_or("").to_string())
        })
    };
    let mut sock = RouteSocket::open(Some(&format!("/run/netns/{n}")), RTMGRP_IPV4_ROUTE | RTMGRP_IPV4_IFADDR).unwrap();
    let mut t = RouteTable::new();
    for kind in [RTM_GETADDR, RTM_GETROUTE] {
        let bytes = sock.dump(&netlink::dump_request(kind, 0), 2000).unwrap();
        netlink::apply(&mut t, &netlink::parse(&bytes, &names), &names);
    }
    let r = t.lookup(mapped(0x0a37_0101)).expect("route to 10.55.1.1");
    assert_eq!(r.dev, "up0");
    assert_eq!(r.gateway.map(fmt_addr).as_deref(), Some("172.30.5.254"));
    assert_eq!(r.src.map(fmt_addr).as_deref(), Some("172.30.5.1"));
    let r = t.lookup(mapped(0xac1e_0509)).expect("the connected /24");
    assert_eq!((r.dev.as_str(), r.gateway), ("up0", None));
    assert!(t.lookup(mapped(0x0808_0808)).is_none(), "no default route in the namespace");
    let show = t.show();
    assert!(show.contains("Cached: 10.55.0.0/16 dev up0 GW 172.30.5.254"), "{show}");
    // Changes arrive as notifications.
    ip(n, "route add default via 172.30.5.253");
    ip(n, "route del 10.55.0.0/16");
    let t0 = Instant::now();
    loop {
        let bytes = sock.recv().unwrap();
        netlink::apply(&mut t, &netlink::parse(&bytes, &names), &names);
        let gw = t.lookup(mapped(0x0a37_0101)).and_then(|r| r.gateway).map(fmt_addr);
        if gw.as_deref() == Some("172.30.5.253") {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(3), "route changes not followed: {}", t.show());
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(t.lookup(mapped(0x0808_0808)).unwrap().gateway.map(fmt_addr).as_deref(), Some("172.30.5.253"));
}
