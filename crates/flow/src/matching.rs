//! Matches (a key plus a mask) and their ovs-ofctl text form.

use crate::fields::{by_name, FieldDef, Kind, Prereq, FIELDS};
use crate::key::{ethertype as et, fmt_mac, ipproto, loc, FlowKey, VLAN_PRESENT};
use std::fmt;

/// A wildcarded match: packets whose key agrees with `key` on every bit set
/// in `mask`. Invariant: `key & !mask == 0`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, Debug)]
pub struct Match {
    pub key: FlowKey,
    pub mask: FlowKey,
}

/// A parse or validation error naming the offending token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MatchError {
    pub token: String,
    pub reason: String,
}

impl fmt::Display for MatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.token, self.reason)
    }
}
impl std::error::Error for MatchError {}

fn err(token: &str, reason: impl Into<String>) -> MatchError {
    MatchError { token: token.to_string(), reason: reason.into() }
}

/// Protocol shorthands of ovs-ofctl: (name, dl_type, nw_proto).
pub const SHORTHANDS: &[(&str, u16, Option<u8>)] = &[
    ("ip", et::IPV4, None),
    ("ipv4", et::IPV4, None),
    ("ipv6", et::IPV6, None),
    ("arp", et::ARP, None),
    ("rarp", et::RARP, None),
    ("tcp", et::IPV4, Some(ipproto::TCP)),
    ("udp", et::IPV4, Some(ipproto::UDP)),
    ("sctp", et::IPV4, Some(ipproto::SCTP)),
    ("icmp", et::IPV4, Some(ipproto::ICMP)),
    ("tcp6", et::IPV6, Some(ipproto::TCP)),
    ("udp6", et::IPV6, Some(ipproto::UDP)),
    ("sctp6", et::IPV6, Some(ipproto::SCTP)),
    ("icmp6", et::IPV6, Some(ipproto::ICMPV6)),
    ("mpls", et::MPLS, None),
    ("mplsm", et::MPLS_MCAST, None),
];

impl Match {
    pub const CATCHALL: Match = Match { key: FlowKey::ZERO, mask: FlowKey::ZERO };

    pub fn new(key: FlowKey, mask: FlowKey) -> Match {
        Match { key: key.and(&mask), mask }
    }

    /// An exact match on every bit of `key`.
    pub fn exact(key: FlowKey) -> Match {
        Match { key, mask: FlowKey::ALL_ONES }
    }

    #[inline]
    pub fn matches(&self, k: &FlowKey) -> bool {
        k.eq_masked(&self.key, &self.mask)
    }

    /// A match that prints a packet's key: every non-zero field exactly,
    /// plus the protocol fields that give the others their names.
    /// Whether some key matches both (they agree wherever both care).
    pub fn overlaps(&self, o: &Match) -> bool {
        let both = self.mask.and(&o.mask);
        self.key.and(&both) == o.key.and(&both)
    }

    pub fn exact_fields(k: &FlowKey) -> Match {
        let mut mask = FlowKey::ZERO;
        for f in FIELDS.iter().filter(|f| !f.alias) {
            if f.get(k) != 0 {
                f.set(&mut mask, f.loc.max());
            }
        }
        if k.dl_type() != 0 {
            mask.set_dl_type(0xffff);
        }
        if k.is_ip_any() {
            mask.set_nw_proto(0xff);
        }
        Match::new(*k, mask)
    }

    /// Sets `field` to `value` under `mask` (both in the field's width).
    pub fn set_field_masked(&mut self, f: &FieldDef, value: u128, mask: u128) {
        let mask = mask & f.loc.max();
        f.loc.set(&mut self.mask, mask);
        f.loc.set(&mut self.key, value & mask);
    }

    pub fn set_field(&mut self, f: &FieldDef, value: u128) {
        self.set_field_masked(f, value, f.loc.max());
    }

    fn set_dl_type(&mut self, t: u16) {
        self.key.set_dl_type(t);
        self.mask.set_dl_type(0xffff);
    }

    fn set_nw_proto(&mut self, p: u8) {
        self.key.set_nw_proto(p);
        self.mask.set_nw_proto(0xff);
    }

    /// Parses one `name[=value[/mask]]` token of ovs-ofctl match syntax.
    pub fn parse_token(&mut self, tok: &str) -> Result<(), MatchError> {
        let tok = tok.trim();
        if let Some(&(_, dl, proto)) = SHORTHANDS.iter().find(|s| s.0 == tok) {
            self.set_dl_type(dl);
            if let Some(p) = proto {
                self.set_nw_proto(p);
            }
            return Ok(());
        }
        if tok == "eth" {
            return Ok(());
        }
        let (name, value) = tok
            .split_once('=')
            .or_else(|| tok.split_once(':'))
            .ok_or_else(|| err(tok, "expected field=value or a protocol keyword"))?;
        let f = by_name(name.trim()).ok_or_else(|| err(tok, format!("unknown field '{}'", name.trim())))?;
        let value = value.trim();
        match f.name {
            "dl_vlan" => {
                let vid = parse_int(value).ok_or_else(|| err(tok, "bad VLAN id"))?;
                if vid == 0xffff {
                    // dl_vlan=0xffff: no tag.
                    self.key.set_vlan_tci(0);
                    self.mask.set_vlan_tci(0xffff);
                    return Ok(());
                }
                if vid > 4095 {
                    return Err(err(tok, "VLAN id out of range 0-4095"));
                }
                self.key.set_vlan_tci((self.key.vlan_tci() & 0xe000) | VLAN_PRESENT | vid as u16);
                self.mask.set_vlan_tci(self.mask.vlan_tci() | 0x1fff);
                return Ok(());
            }
            "dl_vlan_pcp" => {
                let pcp = parse_int(value).filter(|&p| p < 8).ok_or_else(|| err(tok, "bad VLAN PCP (0-7)"))?;
                self.key.set_vlan_tci((self.key.vlan_tci() & 0x1fff) | VLAN_PRESENT | ((pcp as u16) << 13));
                self.mask.set_vlan_tci(self.mask.vlan_tci() | 0xf000);
                return Ok(());
            }
            "dl_type" | "eth_type" => {
                let v = parse_int(value).filter(|&v| v <= 0xffff).ok_or_else(|| err(tok, "bad Ethertype"))?;
                self.set_dl_type(v as u16);
                return Ok(());
            }
            _ => {}
        }
        let (v, m) = parse_value(f, value).map_err(|r| err(tok, r))?;
        if m != f.loc.max() && !f.maskable {
            return Err(err(tok, format!("field {} is not maskable", f.name)));
        }
        self.set_field_masked(f, v, m);
        Ok(())
    }

    /// Parses a comma-separated match (no priority, no actions).
    pub fn parse(s: &str) -> Result<Match, MatchError> {
        let mut m = Match::CATCHALL;
        for tok in split_top_level(s) {
            if tok.trim().is_empty() {
                continue;
            }
            m.parse_token(tok)?;
        }
        m.check_prereqs()?;
        Ok(m)
    }

    /// Refuses a match on a field whose prerequisites are not matched, as
    /// OpenFlow's OFPBMC_BAD_PREREQ does. The error names the field.
    pub fn check_prereqs(&self) -> Result<(), MatchError> {
        for f in FIELDS.iter().filter(|f| !f.alias) {
            if f.prereq == Prereq::None {
                continue;
            }
            let fm = f.mask();
            if self.mask.and(&fm).is_zero() {
                continue;
            }
            // The field is shared by several protocols: any alias whose
            // prerequisite holds makes it valid.
            let ok = FIELDS
                .iter()
                .filter(|g| g.loc.word == f.loc.word && g.loc.shift == f.loc.shift && g.loc.bits == f.loc.bits)
                .any(|g| g.prereq.holds(&self.key, &self.mask));
            if !ok {
                return Err(err(f.name, "prerequisites not met (match the protocol first, e.g. 'ip' or 'tcp')"));
            }
        }
        Ok(())
    }

    /// The most specific printable name for `f` under this match.
    fn display_name(&self, f: &'static FieldDef) -> &'static str {
        let candidates = FIELDS.iter().filter(|g| g.loc == f.loc && g.prereq.holds(&self.key, &self.mask));
        // Prefer the protocol-specific alias (tcp_dst over tp_dst, arp_spa over nw_src).
        let mut best = f.name;
        let mut best_specific = false;
        for g in candidates {
            let specific = g.prereq != f.prereq && g.alias && !matches!(g.name, "ip_src" | "ip_dst" | "ip_proto");
            if specific && !best_specific {
                best = g.name;
                best_specific = true;
            }
        }
        // udp/sctp ports: pick by protocol.
        if matches!(best, "tp_src" | "tp_dst" | "udp_src" | "udp_dst" | "sctp_src" | "sctp_dst" | "tcp_src" | "tcp_dst")
        {
            let src = f.loc == loc::TP_SRC;
            let p = self.key.nw_proto();
            let pre = match p {
                ipproto::TCP => "tcp",
                ipproto::UDP => "udp",
                ipproto::SCTP => "sctp",
                _ => "tp",
            };
            if self.mask.nw_proto() == 0xff {
                return leak_name(pre, src);
            }
        }
        best
    }
}

fn leak_name(pre: &str, src: bool) -> &'static str {
    match (pre, src) {
        ("tcp", true) => "tcp_src",
        ("tcp", false) => "tcp_dst",
        ("udp", true) => "udp_src",
        ("udp", false) => "udp_dst",
        ("sctp", true) => "sctp_src",
        ("sctp", false) => "sctp_dst",
        (_, true) => "tp_src",
        (_, false) => "tp_dst",
    }
}

/// Splits on commas that are not inside parentheses or brackets.
pub fn split_top_level(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

pub fn parse_int(s: &str) -> Option<u128> {
    let s = s.trim();
    if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        u128::from_str_radix(h, 16).ok()
    } else {
        s.parse::<u128>().ok()
    }
}

pub fn parse_mac(s: &str) -> Option<u64> {
    let parts: Vec<&str> = s.split(':').collect();
    if parts.len() != 6 {
        return None;
    }
    let mut v = 0u64;
    for p in parts {
        if p.is_empty() || p.len() > 2 {
            return None;
        }
        v = (v << 8) | u64::from_str_radix(p, 16).ok()?;
    }
    Some(v)
}

pub fn parse_ipv4(s: &str) -> Option<u32> {
    s.parse::<std::net::Ipv4Addr>().ok().map(u32::from)
}

pub fn parse_ipv6(s: &str) -> Option<u128> {
    s.parse::<std::net::Ipv6Addr>().ok().map(u128::from)
}

/// The reserved OpenFlow ports by the names ovs-ofctl gives them in
/// `in_port` values (`in_port=LOCAL`, `set_field:ANY->in_port`), in the
/// OpenFlow 1.0 numbering the flow key holds. `ANY` is OFPP_NONE.
const PORT_NAMES: &[(&str, u32)] = &[
    ("IN_PORT", 0xfff8),
    ("TABLE", 0xfff9),
    ("NORMAL", 0xfffa),
    ("FLOOD", 0xfffb),
    ("ALL", 0xfffc),
    ("CONTROLLER", 0xfffd),
    ("LOCAL", 0xfffe),
    ("ANY", 0xffff),
    ("NONE", 0xffff),
];

/// Parses a field value with an optional `/mask` (or `/prefixlen` for
/// addresses). Returns (value, mask) in the field's width.
pub fn parse_value(f: &FieldDef, s: &str) -> Result<(u128, u128), String> {
    let max = f.loc.max();
    let (vs, ms) = match s.split_once('/') {
        Some((v, m)) => (v, Some(m)),
        None => (s, None),
    };
    if f.name == "in_port" && ms.is_none() {
        if let Some(&(_, n)) = PORT_NAMES.iter().find(|p| p.0.eq_ignore_ascii_case(vs)) {
            return Ok((n as u128, max));
        }
    }
    let prefix_mask = |bits: u32, plen: &str| -> Result<u128, String> {
        let n: u32 = plen.parse().map_err(|_| format!("bad prefix length '{plen}'"))?;
        if n > bits {
            return Err(format!("prefix length {n} longer than {bits} bits"));
        }
        Ok(if n == 0 { 0 } else { (max >> (bits - n)) << (bits - n) & max })
    };
    let (v, m) = match f.kind {
        Kind::Mac => {
            let v = parse_mac(vs).ok_or_else(|| format!("bad Ethernet address '{vs}'"))? as u128;
            let m = match ms {
                Some(m) => parse_mac(m).ok_or_else(|| format!("bad Ethernet mask '{m}'"))? as u128,
                None => max,
            };
            (v, m)
        }
        Kind::Ipv4 => {
            let v = parse_ipv4(vs).ok_or_else(|| format!("bad IPv4 address '{vs}'"))? as u128;
            let m = match ms {
                Some(m) if m.contains('.') => parse_ipv4(m).ok_or_else(|| format!("bad IPv4 mask '{m}'"))? as u128,
                Some(m) => prefix_mask(32, m)?,
                None => max,
            };
            (v, m)
        }
        Kind::Ipv6 => {
            let v = parse_ipv6(vs).ok_or_else(|| format!("bad IPv6 address '{vs}'"))?;
            let m = match ms {
                Some(m) if m.contains(':') => parse_ipv6(m).ok_or_else(|| format!("bad IPv6 mask '{m}'"))?,
                Some(m) => prefix_mask(128, m)?,
                None => max,
            };
            (v, m)
        }
        Kind::Frag => {
            if ms.is_some() {
                return Err("nw_frag takes a keyword, not a mask".into());
            }
            match vs {
                "no" => (0, 3),
                "yes" => (1, 1),
                "first" => (1, 3),
                "later" => (3, 3),
                "not_later" => (0, 2),
                _ => return Err(format!("bad nw_frag '{vs}' (no, yes, first, later, not_later)")),
            }
        }
        Kind::CtState if vs.starts_with('+') || vs.starts_with('-') => parse_ct_flags(vs)?,
        Kind::TcpFlags if vs.starts_with('+') || vs.starts_with('-') => parse_tcp_flags(vs)?,
        _ => {
            let v = parse_int(vs).ok_or_else(|| format!("bad number '{vs}'"))?;
            let m = match ms {
                Some(m) => parse_int(m).ok_or_else(|| format!("bad mask '{m}'"))?,
                None => max,
            };
            (v, m)
        }
    };
    if v > max || m > max {
        return Err(format!("value out of range for {}-bit field {}", f.loc.bits, f.name));
    }
    Ok((v & m, m))
}

pub const CT_FLAGS: &[(&str, u8)] = &[
    ("new", 0x01),
    ("est", 0x02),
    ("rel", 0x04),
    ("rpl", 0x08),
    ("inv", 0x10),
    ("trk", 0x20),
    ("snat", 0x40),
    ("dnat", 0x80),
];
pub const TCP_FLAGS: &[(&str, u16)] = &[
    ("fin", 0x001),
    ("syn", 0x002),
    ("rst", 0x004),
    ("psh", 0x008),
    ("ack", 0x010),
    ("urg", 0x020),
    ("ece", 0x040),
    ("cwr", 0x080),
    ("ns", 0x100),
];

fn parse_flag_list<T: Copy + Into<u128>>(s: &str, table: &[(&str, T)]) -> Result<(u128, u128), String> {
    let (mut v, mut m) = (0u128, 0u128);
    let mut rest = s;
    while !rest.is_empty() {
        let sign = rest.as_bytes()[0];
        rest = &rest[1..];
        let end = rest.find(['+', '-']).unwrap_or(rest.len());
        let name = &rest[..end];
        rest = &rest[end..];
        let bit = table.iter().find(|(n, _)| *n == name).ok_or_else(|| format!("unknown flag '{name}'"))?.1.into();
        m |= bit;
        if sign == b'+' {
            v |= bit;
        } else if sign != b'-' {
            return Err(format!("flags must start with + or -: '{s}'"));
        }
    }
    Ok((v, m))
}

fn parse_ct_flags(s: &str) -> Result<(u128, u128), String> {
    parse_flag_list(s, CT_FLAGS)
}
fn parse_tcp_flags(s: &str) -> Result<(u128, u128), String> {
    parse_flag_list(s, TCP_FLAGS)
}

/// Formats a field value (and mask, when not exact) in ovs-ofctl syntax.
pub fn format_value(f: &FieldDef, v: u128, m: u128) -> String {
    let max = f.loc.max();
    let exact = m == max;
    if f.name == "in_port" && exact {
        if let Some(&(name, _)) = PORT_NAMES.iter().find(|p| p.1 as u128 == v) {
            return name.to_string();
        }
    }
    match f.kind {
        Kind::Mac => {
            if exact {
                fmt_mac(v as u64)
            } else {
                format!("{}/{}", fmt_mac(v as u64), fmt_mac(m as u64))
            }
        }
        Kind::Ipv4 => {
            let a = std::net::Ipv4Addr::from(v as u32);
            if exact {
                a.to_string()
            } else if let Some(p) = prefix_len(m, 32) {
                format!("{a}/{p}")
            } else {
                format!("{a}/{}", std::net::Ipv4Addr::from(m as u32))
            }
        }
        Kind::Ipv6 => {
            let a = std::net::Ipv6Addr::from(v);
            if exact {
                a.to_string()
            } else if let Some(p) = prefix_len(m, 128) {
                format!("{a}/{p}")
            } else {
                format!("{a}/{}", std::net::Ipv6Addr::from(m))
            }
        }
        Kind::Frag => match (v, m) {
            (0, 3) => "no".into(),
            (1, 1) => "yes".into(),
            (1, 3) => "first".into(),
            (3, 3) => "later".into(),
            (0, 2) => "not_later".into(),
            _ => format!("{v:#x}/{m:#x}"),
        },
        Kind::CtState => format_flags(v, m, CT_FLAGS.iter().map(|&(n, b)| (n, b as u128))),
        Kind::TcpFlags => format_flags(v, m, TCP_FLAGS.iter().map(|&(n, b)| (n, b as u128))),
        Kind::Hex => {
            if exact {
                format!("{v:#x}")
            } else {
                format!("{v:#x}/{m:#x}")
            }
        }
        Kind::Int => {
            if exact {
                v.to_string()
            } else {
                format!("{v:#x}/{m:#x}")
            }
        }
    }
}

fn format_flags(v: u128, m: u128, table: impl Iterator<Item = (&'static str, u128)>) -> String {
    let mut s = String::new();
    for (n, b) in table {
        if m & b != 0 {
            s.push(if v & b != 0 { '+' } else { '-' });
            s.push_str(n);
        }
    }
    s
}

/// `Some(n)` if `m` is a CIDR mask of `n` leading ones in `bits` bits.
pub fn prefix_len(m: u128, bits: u32) -> Option<u32> {
    let n = if bits == 128 { m.leading_ones() } else { (m << (128 - bits)).leading_ones() };
    let rebuilt = if n == 0 { 0 } else { (u128::MAX >> (128 - n)) << (bits - n) };
    let rebuilt = if bits == 128 { rebuilt } else { rebuilt & ((1u128 << bits) - 1) };
    (rebuilt == m).then_some(n)
}

impl fmt::Display for Match {
    /// ovs-ofctl style: protocol shorthand first, then fields in key order.
    fn fmt(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts: Vec<String> = Vec::new();
        let mut skip_dl_type = false;
        let mut skip_proto = false;
        if self.mask.recirc_id() != 0 {
            parts.push(format!("recirc_id={}", self.key.recirc_id()));
        }
        if self.mask.dl_type() == 0xffff {
            let dl = self.key.dl_type();
            let proto = (self.mask.nw_proto() == 0xff).then(|| self.key.nw_proto());
            if let Some(&(name, _, p)) = SHORTHANDS.iter().find(|s| s.1 == dl && s.2.is_some() && s.2 == proto) {
                parts.push(name.into());
                skip_dl_type = true;
                skip_proto = p.is_some();
            } else if let Some(&(name, _, _)) = SHORTHANDS.iter().find(|s| s.1 == dl && s.2.is_none()) {
                parts.push(name.into());
                skip_dl_type = true;
            }
        }
        for f in FIELDS.iter().filter(|f| !f.alias) {
            let m = f.loc.get(&self.mask);
            if m == 0 || f.name == "recirc_id" {
                continue;
            }
            if (f.name == "dl_type" && skip_dl_type) || (f.name == "nw_proto" && skip_proto) {
                continue;
            }
            let v = f.loc.get(&self.key);
            let name = self.display_name(f);
            let fd = by_name(name).unwrap_or(f);
            parts.push(format!("{}={}", name, format_value(fd, v, m)));
        }
        if parts.is_empty() {
            return Ok(());
        }
        write!(out, "{}", parts.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_print() {
        let m = Match::parse("in_port=1,tcp,nw_src=10.0.0.0/8,tcp_dst=80").unwrap();
        assert_eq!(m.key.nw_src(), 0x0a00_0000);
        assert_eq!(m.mask.nw_src(), 0xff00_0000);
        assert_eq!(m.key.tp_dst(), 80);
        assert_eq!(m.to_string(), "tcp,in_port=1,nw_src=10.0.0.0/8,tcp_dst=80");
    }

    /// What ovs-ofctl prints for OVN's flows parses back: `rarp` with ARP's
    /// fields, and reserved ports by name in `in_port` values.
    #[test]
    fn rarp_and_port_names_as_ovs_ofctl_prints_them() {
        let m = Match::parse("rarp,dl_src=00:00:00:00:ff:01,arp_op=3").unwrap();
        assert_eq!((m.key.dl_type(), m.key.nw_proto()), (0x8035, 3));
        assert_eq!(m.to_string(), "rarp,dl_src=00:00:00:00:ff:01,arp_op=3");
        let m = Match::parse("in_port=LOCAL").unwrap();
        assert_eq!(m.key.in_port(), 0xfffe);
        assert_eq!(m.to_string(), "in_port=LOCAL");
        let f = by_name("in_port").unwrap();
        assert_eq!(parse_value(f, "ANY"), Ok((0xffff, f.loc.max())));
        assert_eq!(format_value(f, 0xffff, f.loc.max()), "ANY");
        assert_eq!(format_value(f, 7, f.loc.max()), "7");
    }

    #[test]
    fn prereq_refused_names_field() {
        let e = Match::parse("tcp_dst=80").unwrap_err();
        assert_eq!(e.token, "tp_dst");
        let e = Match::parse("nw_dst=10.0.0.1").unwrap_err();
        assert_eq!(e.token, "nw_dst");
        assert!(Match::parse("arp,arp_tpa=10.0.0.1").is_ok());
        assert!(Match::parse("icmp6,icmpv6_type=135,nd_target=fe80::1").is_ok());
        assert!(Match::parse("icmp6,icmpv6_type=128,nd_target=fe80::1").is_err());
        let m = Match::parse("mpls,mpls_label=100,mpls_bos=1").unwrap();
        assert_eq!((m.key.dl_type(), m.key.mpls_label(), m.key.mpls_bos()), (0x8847, 100, 1));
        assert!(Match::parse("mplsm,mpls_tc=3").is_ok());
        assert_eq!(Match::parse("ip,mpls_label=100").unwrap_err().token, "mpls_label");
    }

    #[test]
    fn bad_tokens() {
        assert_eq!(Match::parse("ip,nw_dst=10.0.0.300").unwrap_err().token, "nw_dst=10.0.0.300");
        assert!(Match::parse("bogus=1").unwrap_err().reason.contains("unknown field"));
        assert!(Match::parse("in_port=1/1").unwrap_err().reason.contains("not maskable"));
    }

    #[test]
    fn vlan_and_flags() {
        let m = Match::parse("dl_vlan=10,dl_vlan_pcp=3").unwrap();
        assert_eq!(m.key.vlan_tci(), 0x1000 | 10 | (3 << 13));
        let m = Match::parse("tcp,tcp_flags=+syn-ack").unwrap();
        assert_eq!((m.key.tcp_flags(), m.mask.tcp_flags()), (0x2, 0x12));
        assert!(m.to_string().contains("tcp_flags=+syn+ack") || m.to_string().contains("tcp_flags=+syn-ack"));
    }

    #[test]
    fn prefix_lengths() {
        assert_eq!(prefix_len(0xff00_0000, 32), Some(8));
        assert_eq!(prefix_len(0, 32), Some(0));
        assert_eq!(prefix_len(0xffff_ffff, 32), Some(32));
        assert_eq!(prefix_len(0xff00_ff00, 32), None);
        assert_eq!(prefix_len(u128::MAX, 128), Some(128));
    }
}
