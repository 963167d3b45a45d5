//! rtnetlink messages, as bytes: the dump requests the switch sends and the
//! route, address and neighbour messages it reads back (from the dump and
//! from the RTNLGRP_* notifications it subscribes to), turned into
//! [`Event`]s that [`apply`] folds into the route table.
//!
//! Sans-IO: the netlink socket itself lives with the other system calls
//! (netdev-linux); this module only encodes and decodes. Every decoder is
//! total: a short or malformed message is skipped, never a panic.
//! Netlink headers are in host byte order, addresses in network order.

use crate::route::{mapped, Route, RouteTable};

pub const RTM_NEWLINK: u16 = 16;
pub const RTM_NEWADDR: u16 = 20;
pub const RTM_DELADDR: u16 = 21;
pub const RTM_GETADDR: u16 = 22;
pub const RTM_NEWROUTE: u16 = 24;
pub const RTM_DELROUTE: u16 = 25;
pub const RTM_GETROUTE: u16 = 26;
pub const NLMSG_DONE: u16 = 3;
pub const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_DUMP: u16 = 0x300;

/// Multicast groups to subscribe to (bit masks for `nl_groups`).
pub const RTMGRP_IPV4_IFADDR: u32 = 0x10;
pub const RTMGRP_IPV4_ROUTE: u32 = 0x40;
pub const RTMGRP_IPV6_IFADDR: u32 = 0x100;
pub const RTMGRP_IPV6_ROUTE: u32 = 0x400;

const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;
const RT_TABLE_MAIN: u8 = 254;
const RT_TABLE_LOCAL: u8 = 255;
const RTN_UNICAST: u8 = 1;
const RTN_LOCAL: u8 = 2;

/// A dump request (`RTM_GETROUTE` or `RTM_GETADDR`) for every family.
pub fn dump_request(kind: u16, seq: u32) -> Vec<u8> {
    let mut m = Vec::with_capacity(32);
    let len: u32 = 16 + if kind == RTM_GETROUTE { 12 } else { 8 };
    m.extend_from_slice(&len.to_ne_bytes());
    m.extend_from_slice(&kind.to_ne_bytes());
    m.extend_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    m.extend_from_slice(&seq.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.resize(len as usize, 0); // rtmsg / ifaddrmsg, family 0 = all
    m
}

/// What one netlink message says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    Route { add: bool, route: Route, ifindex: u32 },
    Addr { add: bool, ifindex: u32, addr: u128, plen: u8 },
    Done,
    Error(i32),
    Other,
}

fn u16_at(b: &[u8], o: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(o..o + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], o: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(o..o + 4)?.try_into().ok()?))
}

/// Attributes after a fixed header: (type, payload).
fn attrs(b: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    let mut i = 0;
    std::iter::from_fn(move || {
        let len = u16_at(b, i)? as usize;
        let ty = u16_at(b, i + 2)? & 0x3fff;
        if len < 4 || i + len > b.len() {
            return None;
        }
        let v = &b[i + 4..i + len];
        i += (len + 3) & !3;
        Some((ty, v))
    })
}

fn addr_of(v: &[u8], family: u8) -> Option<u128> {
    match family {
        AF_INET => Some(mapped(u32::from_be_bytes(v.get(..4)?.try_into().ok()?))),
        AF_INET6 => Some(u128::from_be_bytes(v.get(..16)?.try_into().ok()?)),
        _ => None,
    }
}

/// Splits a buffer of netlink messages into events. `ifname` maps an
/// interface index to its name (routes name devices by index).
pub fn parse(buf: &[u8], ifname: &dyn Fn(u32) -> Option<String>) -> Vec<Event> {
    let mut out = Vec::new();
    let mut i = 0;
    while let (Some(len), Some(ty)) = (u32_at(buf, i), u16_at(buf, i + 4)) {
        let len = len as usize;
        if len < 16 || i + len > buf.len() {
            break;
        }
        let body = &buf[i + 16..i + len];
        out.push(match ty {
            NLMSG_DONE => Event::Done,
            NLMSG_ERROR => Event::Error(body.get(..4).map_or(0, |b| i32::from_ne_bytes(b.try_into().expect("4")))),
            RTM_NEWROUTE | RTM_DELROUTE => route(body, ty == RTM_NEWROUTE, ifname).unwrap_or(Event::Other),
            RTM_NEWADDR | RTM_DELADDR => addr(body, ty == RTM_NEWADDR).unwrap_or(Event::Other),
            _ => Event::Other,
        });
        i += (len + 3) & !3;
    }
    out
}

fn route(b: &[u8], add: bool, ifname: &dyn Fn(u32) -> Option<String>) -> Option<Event> {
    let (family, dst_len, table, ty) = (*b.first()?, *b.get(1)?, *b.get(4)?, *b.get(7)?);
    if family != AF_INET && family != AF_INET6 {
        return None;
    }
    let mut table = table as u32;
    let (mut dst, mut gw, mut src, mut oif, mut metric) = (None, None, None, 0u32, 0u32);
    for (t, v) in attrs(b.get(12..)?) {
        match t {
            1 => dst = addr_of(v, family),
            4 => oif = u32_at(v, 0)?,
            5 => gw = addr_of(v, family),
            6 => metric = u32_at(v, 0)?,
            7 => src = addr_of(v, family),
            15 => table = u32_at(v, 0)?,
            _ => {}
        }
    }
    if table != RT_TABLE_MAIN as u32 && table != RT_TABLE_LOCAL as u32 || (ty != RTN_UNICAST && ty != RTN_LOCAL) {
        return Some(Event::Other);
    }
    let v4 = family == AF_INET;
    let prefix = dst.unwrap_or(if v4 { mapped(0) } else { 0 });
    let plen = if v4 { dst_len + 96 } else { dst_len };
    let dev = ifname(oif).unwrap_or_else(|| format!("if{oif}"));
    let route = Route { prefix, plen, dev, gateway: gw, src, metric, user: false, local: ty == RTN_LOCAL };
    Some(Event::Route { add, route, ifindex: oif })
}

fn addr(b: &[u8], add: bool) -> Option<Event> {
    let (family, plen) = (*b.first()?, *b.get(1)?);
    let ifindex = u32_at(b, 4)?;
    let mut a = None;
    for (t, v) in attrs(b.get(8..)?) {
        // IFA_LOCAL is the address on point-to-point links; IFA_ADDRESS
        // otherwise.
        if t == 2 || (t == 1 && a.is_none()) {
            a = addr_of(v, family);
        }
    }
    let addr = a?;
    let plen = if family == AF_INET { plen + 96 } else { plen };
    Some(Event::Addr { add, ifindex, addr, plen })
}

/// Folds events into the table. `ifname` maps indexes for addresses.
pub fn apply(t: &mut RouteTable, events: &[Event], ifname: &dyn Fn(u32) -> Option<String>) {
    for e in events {
        match e {
            Event::Route { add: true, route, .. } => t.insert(route.clone()),
            Event::Route { add: false, route, .. } => {
                t.remove(route.prefix, route.plen, false, Some(&route.dev));
            }
            Event::Addr { add, ifindex, addr, plen } => {
                let dev = ifname(*ifindex).unwrap_or_else(|| format!("if{ifindex}"));
                if *add {
                    t.add_addr(&dev, *addr, *plen);
                } else {
                    t.del_addr(&dev, *addr);
                }
            }
            _ => {}
        }
    }
}
