//! The `ct` and `ct_clear` actions: their ovs-ofctl syntax (as
//! `ovs-actions(7)` defines it) and the recirculation they need.
//!
//! `ct(table=N)` sends the packet through the tracker and continues the
//! OpenFlow pipeline in table N *after* the datapath has recirculated it,
//! with `ct_state`, `ct_zone` and `ct_mark` set. Translation freezes where
//! to continue as a recirculation id (`ofproto::ct::RecircTable`); the upcall of the
//! recirculated packet carries that id in `recirc_id`, and translation
//! resumes in the frozen table. Ids are reused for the same frozen state,
//! so megaflows stay few and stable.
//!
//! Supported: `commit`, `force`, `zone=N` or a zone taken from 16 bits of
//! a field (`zone=NXM_NX_REG13[0..15]`, read at translation, as OVN
//! writes it), `table=N`,
//! `exec(set_field:V[/M]->ct_mark, set_field:V[/M]->ct_label)`, `nat`,
//! `nat(src=A[-B][:P[-Q]][,random|hash|persistent])`, `nat(dst=...)`, `nat(src)`
//! (keep the address, change the port only on a collision),
//! `alg=ftp|tftp`. Refused with a message: other `exec` actions. As in Open vSwitch, the packet's
//! own instance continues after `ct(table=N)` untracked; xvs ends that
//! instance's translation there (actions after `ct(table=N)` are not run),
//! which is what pipelines written as `..., ct(table=N)` expect.

use crate::actions::{perr, Action, ParseError};
use crate::subfield::SubField;
use conntrack::{Nat, NatFlags, NatRange};
use flow::matching::{parse_int, split_top_level};
use std::fmt;

/// The arguments of a `ct` action.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CtSpec {
    pub commit: bool,
    pub force: bool,
    pub zone: u16,
    /// `zone=FIELD[a..b]`: the zone is those 16 bits of the packet's
    /// field when the flow is translated (then `zone` is unused).
    pub zone_src: Option<crate::subfield::SubField>,
    pub table: Option<u8>,
    pub mark: Option<(u32, u32)>,
    pub label: Option<(u128, u128)>,
    pub nat: Option<Nat>,
    /// `nat` came after the `exec(...)` writes (Open vSwitch keeps the
    /// order, encodes it, and prints such a `nat` inside `exec(...)`).
    pub nat_last: bool,
    /// `alg=ftp` or `alg=tftp`: the helper's well-known port (21 or 69).
    pub alg: Option<u16>,
    /// `exec(move:SRC->ct_label[..])` (or ct_mark): bits of a field (a
    /// register, typically) copied into the connection's label or mark on
    /// commit, read at translation. OVN keeps a load balancer's backend in
    /// the label this way.
    pub moves: Vec<(crate::subfield::SubField, crate::subfield::SubField)>,
}

impl CtSpec {
    /// The tracker's parameters for a packet whose translation-time key is
    /// `key`: the zone, and the `exec(move:...)` bits folded into the
    /// mark and label writes.
    pub fn params_for(&self, key: &flow::FlowKey) -> conntrack::CtAction {
        let mut p = self.params();
        p.zone = self.zone_for(key);
        for (src, dst) in &self.moves {
            let v = (src.field.loc.get(key) >> src.ofs) & src.ones();
            if dst.field.name == "ct_mark" {
                let (ov, om) = p.mark.unwrap_or((0, 0));
                let m = dst.mask() as u32;
                p.mark = Some(((ov & !m) | ((v << dst.ofs) as u32 & m), om | m));
            } else {
                let (ov, om) = p.label.unwrap_or((0, 0));
                let m = dst.mask();
                p.label = Some(((ov & !m) | ((v << dst.ofs) & m), om | m));
            }
        }
        p
    }

    /// The zone for a packet whose (translation-time) key is `key`.
    pub fn zone_for(&self, key: &flow::FlowKey) -> u16 {
        match &self.zone_src {
            Some(sf) => ((sf.field.loc.get(key) >> sf.ofs) & sf.ones()) as u16,
            None => self.zone,
        }
    }

    pub fn params(&self) -> conntrack::CtAction {
        conntrack::CtAction {
            zone: self.zone,
            commit: self.commit,
            force: self.force,
            mark: self.mark,
            label: self.label,
            nat: self.nat,
            alg: self.alg,
        }
    }
}

fn value_mask(tok: &str, s: &str, bits: u32) -> Result<(u128, u128), ParseError> {
    let full = if bits == 128 { u128::MAX } else { (1u128 << bits) - 1 };
    let (v, m) = match s.split_once('/') {
        Some((v, m)) => (parse_int(v.trim()), parse_int(m.trim())),
        None => (parse_int(s.trim()), Some(full)),
    };
    match (v, m) {
        (Some(v), Some(m)) if v <= full && m <= full => Ok((v & m, m)),
        _ => Err(perr(tok, format!("bad {bits}-bit value '{s}'"))),
    }
}

fn addr(tok: &str, s: &str) -> Result<(u128, bool), ParseError> {
    let s = s.trim().trim_start_matches('[').trim_end_matches(']');
    if let Ok(a) = s.parse::<std::net::Ipv4Addr>() {
        return Ok((u32::from(a) as u128, false));
    }
    s.parse::<std::net::Ipv6Addr>()
        .map(|a| (u128::from(a), true))
        .map_err(|_| perr(tok, format!("nat: bad address '{s}'")))
}

/// `A[-B][:P[-Q]]` (IPv6 addresses bracketed when ports follow).
fn nat_range(tok: &str, s: &str, flags: NatFlags) -> Result<NatRange, ParseError> {
    if s.is_empty() {
        return Ok(NatRange { addr_min: 0, addr_max: 0, port_min: 0, port_max: 0, v6: false, flags });
    }
    let (addrs, ports) = if let Some(rest) = s.strip_prefix('[') {
        // [v6]-[v6]:ports or [v6]:ports
        match rest.rfind("]:") {
            Some(i) => (&s[..i + 2], Some(&rest[i + 2..])),
            None => (s, None),
        }
    } else if s.matches(':').count() == 1 {
        let (a, p) = s.split_once(':').expect("one colon");
        (a, Some(p))
    } else {
        (s, None)
    };
    let (lo, hi) = match addrs.split_once("]-[").map(|(a, b)| (format!("{a}]"), format!("[{b}"))) {
        Some((a, b)) => (addr(tok, &a)?, addr(tok, &b)?),
        None => match addrs.split_once('-') {
            Some((a, b)) if !addrs.contains(':') || addrs.starts_with('[') => (addr(tok, a)?, addr(tok, b)?),
            _ => {
                let a = addr(tok, addrs)?;
                (a, a)
            }
        },
    };
    if lo.1 != hi.1 || hi.0 < lo.0 {
        return Err(perr(tok, "nat: the address range must be ascending and of one family"));
    }
    let (pmin, pmax) = match ports {
        None => (0, 0),
        Some(p) => {
            let (a, b) = p.split_once('-').unwrap_or((p, p));
            match (parse_int(a), parse_int(b)) {
                (Some(a), Some(b)) if a <= b && b <= 65535 && a > 0 => (a as u16, b as u16),
                _ => return Err(perr(tok, format!("nat: bad port range '{p}'"))),
            }
        }
    };
    Ok(NatRange { addr_min: lo.0, addr_max: hi.0, port_min: pmin, port_max: pmax, v6: lo.1, flags })
}

fn parse_nat(tok: &str, arg: Option<&str>) -> Result<Nat, ParseError> {
    let Some(arg) = arg else { return Ok(Nat::Existing) };
    let mut flags = NatFlags::default();
    let mut what = None;
    for part in split_top_level(arg) {
        let part = part.trim();
        match part {
            "random" => flags.random = true,
            "hash" => flags.hash = true,
            "persistent" => flags.persistent = true,
            "" => {}
            // No address: keep it, and change the port only to avoid a
            // collision (OVN's `nat(src)`).
            "src" => what = Some((true, String::new())),
            "dst" => what = Some((false, String::new())),
            _ => match part.split_once('=') {
                Some(("src", r)) => what = Some((true, r.to_string())),
                Some(("dst", r)) => what = Some((false, r.to_string())),
                _ => return Err(perr(tok, format!("nat: unknown argument '{part}'"))),
            },
        }
    }
    if flags.random && flags.hash {
        return Err(perr(tok, "nat: random and hash exclude each other"));
    }
    match what {
        None => Ok(Nat::Existing),
        Some((src, r)) => {
            let range = nat_range(tok, &r, flags)?;
            Ok(if src { Nat::Src(range) } else { Nat::Dst(range) })
        }
    }
}

/// Parses the arguments of `ct(...)` (`arg` is what is inside the
/// parentheses; `None` for a bare `ct`).
pub fn parse_ct(tok: &str, arg: Option<&str>) -> Result<Action, ParseError> {
    let mut s = CtSpec::default();
    for part in arg.map(split_top_level).unwrap_or_default() {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        let (name, val) = match part.find(['=', '(']) {
            Some(i) if part.as_bytes()[i] == b'(' && part.ends_with(')') => {
                (&part[..i], Some(&part[i + 1..part.len() - 1]))
            }
            Some(i) if part.as_bytes()[i] == b'=' => (&part[..i], Some(&part[i + 1..])),
            _ => (part, None),
        };
        match (name, val) {
            ("commit", None) => s.commit = true,
            ("force", None) => s.force = true,
            ("zone", Some(v)) if v.contains('[') => {
                let sf = crate::subfield::SubField::parse(v, false)?;
                if sf.n_bits != 16 {
                    return Err(perr(tok, format!("zone: {v} must be 16 bits wide")));
                }
                s.zone_src = Some(sf);
            }
            ("zone", Some(v)) => {
                s.zone = parse_int(v)
                    .filter(|&z| z <= 0xffff)
                    .ok_or_else(|| perr(tok, format!("zone: '{v}' is not a number 0-65535 or a field FIELD[a..b]")))?
                    as u16
            }
            ("table", Some(v)) => {
                s.table = Some(
                    parse_int(v).filter(|&t| t < 255).ok_or_else(|| perr(tok, format!("table: '{v}' is not 0-254")))?
                        as u8,
                )
            }
            ("nat", v) => {
                s.nat = Some(parse_nat(tok, v)?);
                s.nat_last = s.mark.is_some() || s.label.is_some();
            }
            ("exec", Some(v)) => {
                for a in split_top_level(v) {
                    let a = a.trim();
                    if let Some(m) = a.strip_prefix("move:") {
                        let (src, dst) =
                            m.split_once("->").ok_or_else(|| perr(tok, "exec: move needs SRC[..]->DST[..]"))?;
                        let (src, dst) = (SubField::parse(src, false)?, SubField::parse(dst, false)?);
                        if !matches!(dst.field.name, "ct_mark" | "ct_label") {
                            return Err(perr(
                                tok,
                                format!("exec: move can only write ct_mark or ct_label, not {}", dst.field.name),
                            ));
                        }
                        if src.n_bits != dst.n_bits {
                            return Err(perr(tok, "exec: move source and destination differ in width"));
                        }
                        s.moves.push((src, dst));
                        continue;
                    }
                    let Some(rest) = a.strip_prefix("set_field:").or_else(|| a.strip_prefix("load:")) else {
                        return Err(perr(
                            tok,
                            format!("exec: only set_field to ct_mark or ct_label is supported, not '{a}'"),
                        ));
                    };
                    let (v, f) =
                        rest.split_once("->").ok_or_else(|| perr(tok, "exec: set_field needs VALUE->FIELD"))?;
                    match f.trim().trim_end_matches("[]") {
                        "ct_mark" | "NXM_NX_CT_MARK" => {
                            let (v, m) = value_mask(tok, v, 32)?;
                            s.mark = Some((v as u32, m as u32));
                        }
                        "ct_label" | "NXM_NX_CT_LABEL" => s.label = Some(value_mask(tok, v, 128)?),
                        other => return Err(perr(tok, format!("exec: cannot set {other} (only ct_mark, ct_label)"))),
                    }
                }
            }
            ("alg", Some("ftp")) => s.alg = Some(21),
            ("alg", Some("tftp")) => s.alg = Some(69),
            ("alg", v) => {
                return Err(perr(
                    tok,
                    format!("alg: unknown connection tracking helper '{}' (ftp or tftp)", v.unwrap_or("")),
                ))
            }
            _ => return Err(perr(tok, format!("ct: unknown argument '{part}'"))),
        }
    }
    if (s.mark.is_some() || s.label.is_some() || !s.moves.is_empty()) && !s.commit {
        return Err(perr(tok, "ct: exec(...) requires commit"));
    }
    if s.force && !s.commit {
        return Err(perr(tok, "ct: force requires commit"));
    }
    Ok(Action::Ct(s))
}

impl fmt::Display for CtSpec {
    /// ovs-ofctl's order: commit, force, table, zone, nat, exec, alg.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut p: Vec<String> = Vec::new();
        if self.commit {
            p.push("commit".into());
        }
        if self.force {
            p.push("force".into());
        }
        if let Some(t) = self.table {
            p.push(format!("table={t}"));
        }
        if let Some(sf) = &self.zone_src {
            p.push(format!("zone={sf}"));
        } else if self.zone != 0 {
            p.push(format!("zone={}", self.zone));
        }
        let nat = self.nat.as_ref().map(|n| match n {
            Nat::Existing => "nat".to_string(),
            Nat::Src(r) => conntrack::format::nat_kind("src", r),
            Nat::Dst(r) => conntrack::format::nat_kind("dst", r),
        });
        let mut ex = Vec::new();
        if let Some((v, m)) = self.mark {
            ex.push(if m == u32::MAX {
                format!("set_field:{v:#x}->ct_mark")
            } else {
                format!("set_field:{v:#x}/{m:#x}->ct_mark")
            });
        }
        if let Some((v, m)) = self.label {
            ex.push(if m == u128::MAX {
                format!("set_field:{v:#x}->ct_label")
            } else {
                format!("set_field:{v:#x}/{m:#x}->ct_label")
            });
        }
        match nat {
            Some(n) if self.nat_last && !ex.is_empty() => ex.push(n),
            Some(n) => p.push(n),
            None => {}
        }
        for (src, dst) in &self.moves {
            ex.push(format!("move:{src}->{dst}"));
        }
        if !ex.is_empty() {
            p.push(format!("exec({})", ex.join(",")));
        }
        match self.alg {
            Some(21) => p.push("alg=ftp".into()),
            Some(69) => p.push("alg=tftp".into()),
            Some(n) => p.push(format!("alg={n}")),
            None => {}
        }
        if p.is_empty() {
            write!(f, "ct")
        } else {
            write!(f, "ct({})", p.join(","))
        }
    }
}
