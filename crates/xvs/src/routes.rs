//! The switch's copy of the kernel's routing table (for native tunneling:
//! which device and source address reach a tunnel's remote), with the
//! operator's own routes on top, served as Open vSwitch serves them:
//! `ovs/route/show`, `ovs/route/add IP/PLEN DEV [GW] [src=IP]`,
//! `ovs/route/del IP/PLEN`, `ovs/route/lookup IP`.
//!
//! The table is read from rtnetlink when a command needs it (a dump of
//! addresses and routes of the switch's network namespace), so it is never
//! stale; user routes live in the process.

use crate::commands::Ctx;
use anyhow::{anyhow, Result};
use serde_json::{json, Value};
use std::sync::Mutex;
use tunnel::netlink;
use tunnel::route::{fmt_addr, parse_addr, parse_prefix, parse_user_route, Route, RouteTable};

static USER: Mutex<Vec<Route>> = Mutex::new(Vec::new());

fn ifname(i: u32) -> Option<String> {
    bpf::ifname(i).ok()
}

/// The kernel's routes and addresses, plus the user's routes.
pub fn table() -> Result<RouteTable> {
    let mut sock = netdev_linux::rtnl::RouteSocket::open(None, 0)?;
    let mut t = RouteTable::new();
    for kind in [netlink::RTM_GETADDR, netlink::RTM_GETROUTE] {
        let bytes = sock.dump(&netlink::dump_request(kind, 0), 2000)?;
        netlink::apply(&mut t, &netlink::parse(&bytes, &ifname), &ifname);
    }
    for r in USER.lock().expect("user routes").iter() {
        t.insert(r.clone());
    }
    Ok(t)
}

fn route_json(r: &Route) -> Value {
    json!({"prefix": fmt_addr(r.prefix), "plen": if r.is_v4() { r.plen - 96 } else { r.plen }, "dev": r.dev,
           "gateway": r.gateway.map(fmt_addr), "src": r.src.map(fmt_addr), "user": r.user, "local": r.local})
}

pub fn show(_: &Ctx, _: &[String]) -> Result<(String, Value)> {
    let t = table()?;
    Ok((t.show(), json!({"routes": t.routes().iter().map(route_json).collect::<Vec<_>>()})))
}

pub fn add(_: &Ctx, args: &[String]) -> Result<(String, Value)> {
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let r = parse_user_route(&a).map_err(|e| anyhow!(e))?;
    let mut u = USER.lock().expect("user routes");
    u.retain(|x| !(x.prefix == r.prefix && x.plen == r.plen));
    u.push(r);
    Ok(("OK\n".into(), json!({})))
}

pub fn del(_: &Ctx, args: &[String]) -> Result<(String, Value)> {
    let p = args.first().ok_or_else(|| anyhow!("usage: ovs/route/del IP/PLEN"))?;
    let (prefix, plen) = parse_prefix(p).map_err(|e| anyhow!(e))?;
    let mut u = USER.lock().expect("user routes");
    let n = u.len();
    u.retain(|x| !(x.prefix & prefix == prefix && x.plen == plen && x.prefix == prefix));
    if u.len() == n {
        return Err(anyhow!("Not found"));
    }
    Ok(("OK\n".into(), json!({})))
}

pub fn lookup(_: &Ctx, args: &[String]) -> Result<(String, Value)> {
    let a = args.first().ok_or_else(|| anyhow!("usage: ovs/route/lookup IP"))?;
    let ip = parse_addr(a).ok_or_else(|| anyhow!("'{a}' is not an IP address"))?;
    let t = table()?;
    match t.lookup(ip) {
        Some(r) => {
            let mut s = format!("src {}\n", r.src.map(fmt_addr).unwrap_or_else(|| "-".into()));
            if let Some(g) = r.gateway {
                s.push_str(&format!("gateway {}\n", fmt_addr(g)));
            }
            s.push_str(&format!("dev {}\n", r.dev));
            Ok((s, route_json(&r)))
        }
        None => Err(anyhow!("not found")),
    }
}
