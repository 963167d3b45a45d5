//! The switch's copy of the kernel's routing table, for native tunneling:
//! which device (bridge) and source address reach a tunnel's remote, and
//! through which gateway.
//!
//! Filled from rtnetlink (a dump at start, then route and address
//! notifications, see [`crate::netlink`]) and from the operator
//! (`ovs/route/add`). Lookup is longest-prefix match; among equal prefixes
//! the lowest metric wins, and user routes beat cached ones. The table is
//! small (a host's routes), so entries live in a vector sorted by prefix
//! length, longest first: a lookup is a short scan with no allocation.
//! Addresses are 128-bit; IPv4 routes are held as IPv4-mapped IPv6
//! (`::ffff:a.b.c.d`, prefix length + 96), as Open vSwitch holds them.

use std::fmt::Write;

/// IPv4 address as IPv4-mapped IPv6.
pub fn mapped(v4: u32) -> u128 {
    0xffff_0000_0000 | v4 as u128
}

/// The IPv4 address inside an IPv4-mapped IPv6 address.
pub fn unmapped(a: u128) -> Option<u32> {
    (a >> 32 == 0xffff).then_some(a as u32)
}

pub fn fmt_addr(a: u128) -> String {
    match unmapped(a) {
        Some(v4) => std::net::Ipv4Addr::from(v4).to_string(),
        None => std::net::Ipv6Addr::from(a).to_string(),
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// Destination prefix (mapped for IPv4) and its length in bits (0-128).
    pub prefix: u128,
    pub plen: u8,
    /// Output device name (a bridge's local port for tunnels).
    pub dev: String,
    /// Next hop; `None` when the destination is on the link.
    pub gateway: Option<u128>,
    /// Preferred source address (from the route or the device).
    pub src: Option<u128>,
    pub metric: u32,
    /// Added by the operator (`ovs/route/add`), not learned from the kernel.
    pub user: bool,
    /// A local address of this host (`local` routes).
    pub local: bool,
}

fn mask(plen: u8) -> u128 {
    if plen == 0 {
        0
    } else {
        u128::MAX << (128 - plen as u32)
    }
}

impl Route {
    /// An IPv4 route (an IPv4-mapped prefix of at least 96 bits).
    pub fn is_v4(&self) -> bool {
        self.plen >= 96 && unmapped(self.prefix).is_some()
    }
    pub fn matches(&self, dst: u128) -> bool {
        (dst ^ self.prefix) & mask(self.plen) == 0
    }
}

/// The routing table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RouteTable {
    routes: Vec<Route>,
    /// Device addresses (device, address, prefix length), for a preferred
    /// source when a route gives none.
    addrs: Vec<(String, u128, u8)>,
}

impl RouteTable {
    pub fn new() -> RouteTable {
        RouteTable::default()
    }

    /// Adds or replaces the route with the same prefix, device, gateway and
    /// origin (user or cached).
    pub fn insert(&mut self, mut r: Route) {
        r.prefix &= mask(r.plen);
        self.routes.retain(|x| {
            !(x.prefix == r.prefix && x.plen == r.plen && x.user == r.user && x.dev == r.dev && x.gateway == r.gateway)
        });
        let at = self
            .routes
            .iter()
            .position(|x| {
                (x.plen, x.user as u8, std::cmp::Reverse(x.metric))
                    < (r.plen, r.user as u8, std::cmp::Reverse(r.metric))
            })
            .unwrap_or(self.routes.len());
        self.routes.insert(at, r);
    }

    /// Removes routes for `prefix/plen` (of the given origin); returns how
    /// many.
    pub fn remove(&mut self, prefix: u128, plen: u8, user: bool, dev: Option<&str>) -> usize {
        let p = prefix & mask(plen);
        let n = self.routes.len();
        self.routes.retain(|x| !(x.prefix == p && x.plen == plen && x.user == user && dev.is_none_or(|d| d == x.dev)));
        n - self.routes.len()
    }

    /// Forgets every cached (kernel) route and address, keeping user
    /// routes; before a fresh dump.
    pub fn clear_cached(&mut self) {
        self.routes.retain(|r| r.user);
        self.addrs.clear();
    }

    pub fn add_addr(&mut self, dev: &str, addr: u128, plen: u8) {
        if !self.addrs.iter().any(|(d, a, _)| d == dev && *a == addr) {
            self.addrs.push((dev.to_string(), addr, plen));
        }
    }

    pub fn del_addr(&mut self, dev: &str, addr: u128) {
        self.addrs.retain(|(d, a, _)| !(d == dev && *a == addr));
    }

    /// The route to `dst`, with its source address filled in from the
    /// device's addresses when the route names none.
    pub fn lookup(&self, dst: u128) -> Option<Route> {
        let v4 = unmapped(dst).is_some();
        let r = self.routes.iter().find(|r| r.is_v4() == v4 && r.matches(dst))?;
        let mut r = r.clone();
        if r.src.is_none() {
            let hop = r.gateway.unwrap_or(dst);
            r.src = self
                .addrs
                .iter()
                .filter(|(d, a, _)| *d == r.dev && unmapped(*a).is_some() == v4)
                .find(|(_, a, l)| (hop ^ a) & mask(*l) == 0)
                .or_else(|| self.addrs.iter().find(|(d, a, _)| *d == r.dev && unmapped(*a).is_some() == v4))
                .map(|(_, a, _)| *a);
        }
        Some(r)
    }

    pub fn routes(&self) -> &[Route] {
        &self.routes
    }

    /// `ovs/route/show`, in Open vSwitch's layout.
    pub fn show(&self) -> String {
        let mut s = String::from("Route Table:\n");
        for r in &self.routes {
            let plen = if r.is_v4() { r.plen - 96 } else { r.plen };
            let _ =
                write!(s, "{}: {}/{} dev {}", if r.user { "User" } else { "Cached" }, fmt_addr(r.prefix), plen, r.dev);
            if let Some(g) = r.gateway {
                let _ = write!(s, " GW {}", fmt_addr(g));
            }
            if let Some(a) = r.src {
                let _ = write!(s, " SRC {}", fmt_addr(a));
            }
            if r.local {
                s.push_str(" local");
            }
            s.push('\n');
        }
        s
    }
}

/// Parses `ovs/route/add`'s arguments: `IP/PLEN DEV [GW] [pkt_mark=N] [src=IP]`.
pub fn parse_user_route(args: &[&str]) -> Result<Route, String> {
    let (net, dev) = match args {
        [net, dev, ..] => (*net, *dev),
        _ => return Err("usage: ovs/route/add IP/PLEN DEV [GW] [src=IP]".into()),
    };
    let (addr, plen) = parse_prefix(net)?;
    let mut r = Route {
        prefix: addr,
        plen,
        dev: dev.to_string(),
        gateway: None,
        src: None,
        metric: 0,
        user: true,
        local: false,
    };
    for a in &args[2..] {
        if let Some(v) = a.strip_prefix("src=") {
            r.src = Some(parse_addr(v).ok_or_else(|| format!("src: {v:?} is not an IP address"))?);
        } else if a.starts_with("pkt_mark=") {
            return Err("pkt_mark: policy routing by packet mark is not supported".into());
        } else {
            r.gateway = Some(parse_addr(a).ok_or_else(|| format!("gateway: {a:?} is not an IP address"))?);
        }
    }
    Ok(r)
}

/// `a.b.c.d` or an IPv6 address, as a (mapped) 128-bit value.
pub fn parse_addr(s: &str) -> Option<u128> {
    if let Ok(v4) = s.parse::<std::net::Ipv4Addr>() {
        return Some(mapped(u32::from(v4)));
    }
    s.parse::<std::net::Ipv6Addr>().ok().map(u128::from)
}

/// `ADDR/PLEN` (a bare address is a host route).
pub fn parse_prefix(s: &str) -> Result<(u128, u8), String> {
    let (a, l) = s.split_once('/').map_or((s, None), |(a, l)| (a, Some(l)));
    let addr = parse_addr(a).ok_or_else(|| format!("{a:?} is not an IP address"))?;
    let v4 = unmapped(addr).is_some();
    let max = if v4 { 32 } else { 128 };
    let plen = match l {
        None => max,
        Some(l) => {
            l.parse::<u8>().ok().filter(|&n| n <= max).ok_or_else(|| format!("prefix length {l:?} is not 0..={max}"))?
        }
    };
    Ok((addr, if v4 { plen + 96 } else { plen }))
}
