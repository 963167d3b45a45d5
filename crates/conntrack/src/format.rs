//! Connections in Open vSwitch's `dpctl/dump-conntrack` text form, so
//! operators' scripts and eyes read xvs's dumps as they read OVS's:
//!
//! `tcp,orig=(src=10.0.0.1,dst=10.0.0.2,sport=41000,dport=80),reply=(src=10.0.0.2,dst=10.0.0.1,sport=80,dport=41000),zone=5,mark=0x1,protoinfo=(state=ESTABLISHED)`

use crate::packet::{proto, Tuple};
use crate::{tcp, ConnInfo};
use std::fmt::Write;

pub fn proto_name(p: u8) -> String {
    match p {
        proto::TCP => "tcp".into(),
        proto::UDP => "udp".into(),
        proto::ICMP => "icmp".into(),
        proto::ICMPV6 => "icmpv6".into(),
        proto::SCTP => "sctp".into(),
        proto::UDPLITE => "udplite".into(),
        n => n.to_string(),
    }
}

pub fn addr(a: u128, v6: bool) -> String {
    if v6 {
        std::net::Ipv6Addr::from(a).to_string()
    } else {
        std::net::Ipv4Addr::from(a as u32).to_string()
    }
}

pub fn tuple(t: &Tuple) -> String {
    let mut s = format!("src={},dst={}", addr(t.src, t.v6), addr(t.dst, t.v6));
    if t.is_icmp() {
        let _ = write!(s, ",id={},type={},code={}", t.sport, t.dport >> 8, t.dport & 0xff);
    } else if t.has_ports() {
        let _ = write!(s, ",sport={},dport={}", t.sport, t.dport);
    }
    s
}

/// One line of `dpctl/dump-conntrack`; `stats` adds the timeout left (in
/// seconds, from `now_ms`) and the packet/byte counters, like `-s`.
pub fn entry(c: &ConnInfo, stats: bool, now_ms: u64) -> String {
    let mut s = format!("{},orig=({}", proto_name(c.orig.proto), tuple(&c.orig));
    if stats {
        let _ = write!(s, ",packets={},bytes={}", c.packets[0], c.bytes[0]);
    }
    let _ = write!(s, "),reply=({}", tuple(&c.reply));
    if stats {
        let _ = write!(s, ",packets={},bytes={}", c.packets[1], c.bytes[1]);
    }
    s.push(')');
    if c.zone != 0 {
        let _ = write!(s, ",zone={}", c.zone);
    }
    if stats {
        let _ = write!(s, ",timeout={}", c.expires_ms.saturating_sub(now_ms) / 1000);
    }
    if c.mark != 0 {
        let _ = write!(s, ",mark={}", c.mark);
    }
    if c.label != 0 {
        let _ = write!(s, ",labels=0x{:x}", c.label);
    }
    if let Some((a, b)) = c.tcp {
        if a == b {
            let _ = write!(s, ",protoinfo=(state={})", tcp::st::name(a));
        } else {
            let _ = write!(s, ",protoinfo=(state_orig={},state_reply={})", tcp::st::name(a), tcp::st::name(b));
        }
    }
    if let Some(h) = helper_name(c.alg) {
        let _ = write!(s, ",helper={h}");
    }
    s
}

/// The name Open vSwitch gives a helper port.
pub fn helper_name(alg: u16) -> Option<&'static str> {
    match alg {
        crate::alg::FTP => Some("ftp"),
        crate::alg::TFTP => Some("tftp"),
        _ => None,
    }
}

/// A `ct()` datapath action as Open vSwitch prints it in `dpctl/dump-flows`
/// (`ct(commit,zone=5,mark=0x1/0xff,nat(src=10.0.0.1-10.0.0.2:1024-2048))`).
pub fn action(a: &crate::CtAction) -> String {
    let mut parts: Vec<String> = Vec::new();
    if a.commit {
        parts.push("commit".into());
    }
    if a.force {
        parts.push("force".into());
    }
    if a.zone != 0 {
        parts.push(format!("zone={}", a.zone));
    }
    if let Some((v, m)) = a.mark {
        parts.push(format!("mark={v:#x}/{m:#x}"));
    }
    if let Some((v, m)) = a.label {
        parts.push(format!("label={v:#x}/{m:#x}"));
    }
    if let Some(h) = a.alg.and_then(helper_name) {
        parts.push(format!("helper={h}"));
    }
    match a.nat {
        None => {}
        Some(crate::Nat::Existing) => parts.push("nat".into()),
        Some(crate::Nat::Src(r)) => parts.push(nat_kind("src", &r)),
        Some(crate::Nat::Dst(r)) => parts.push(nat_kind("dst", &r)),
    }
    if parts.is_empty() {
        "ct".into()
    } else {
        format!("ct({})", parts.join(","))
    }
}

/// `nat(src=RANGE)`, or `nat(src)` when no address is given.
pub fn nat_kind(kind: &str, r: &crate::NatRange) -> String {
    // Without an address Open vSwitch prints no flags either.
    if r.addr_min == 0 && r.addr_max == 0 {
        format!("nat({kind})")
    } else {
        format!("nat({kind}={})", nat_range(r))
    }
}

/// `A[-B][:P[-Q]]` plus flags, as `nat(...)` prints its range.
pub fn nat_range(r: &crate::NatRange) -> String {
    let a = |x: u128| {
        if r.v6 {
            format!("[{}]", addr(x, true))
        } else {
            addr(x, false)
        }
    };
    // No address (`nat(src)`): nothing printed for it.
    let none = r.addr_min == 0 && r.addr_max == 0;
    let mut s = if none { String::new() } else { a(r.addr_min) };
    if r.addr_max != r.addr_min {
        let _ = write!(s, "-{}", a(r.addr_max));
    }
    if r.port_min != 0 || r.port_max != 0 {
        let _ = write!(s, ":{}", r.port_min);
        if r.port_max != r.port_min {
            let _ = write!(s, "-{}", r.port_max);
        }
    }
    for (on, name) in [(r.flags.random, "random"), (r.flags.hash, "hash"), (r.flags.persistent, "persistent")] {
        if on {
            let _ = write!(s, ",{name}");
        }
    }
    s
}
