//! The `learn(...)` action (`ovs-actions(7)`): a flow that adds a flow.
//!
//! Each item of the learned flow's match or actions takes its value either
//! from the packet being translated (a sub-field) or from the action
//! itself (an immediate):
//! * `FIELD[a..b]` - match FIELD on the packet's own value;
//! * `DST[a..b]=SRC[c..d]` - match DST on the packet's SRC;
//! * `field=value` - match a field on a constant;
//! * `load:SRC[..]->DST[..]` / `load:VALUE->DST[..]` - a load in the
//!   learned flow's actions;
//! * `output:SRC[..]` - an output to the port the sub-field holds.
//!
//! OVN installs one for its load balancers' hairpin traffic.

use crate::actions::{perr, ParseError};
use crate::subfield::{field_by_any_name, SubField};
use flow::matching::{parse_int, parse_value, split_top_level};
use std::fmt;

/// Where an item's value comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LearnSrc {
    Field(SubField),
    Value(u128),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LearnItem {
    /// The learned flow matches `dst` on the value.
    Match { dst: SubField, src: LearnSrc },
    /// The learned flow loads the value into `dst`.
    Load { dst: SubField, src: LearnSrc },
    /// The learned flow outputs to the port the sub-field holds.
    Output { src: SubField },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LearnSpec {
    pub table: u8,
    pub priority: u16,
    pub idle_timeout: u16,
    pub hard_timeout: u16,
    pub fin_idle_timeout: u16,
    pub fin_hard_timeout: u16,
    pub cookie: u64,
    /// NX_LEARN_F_*: 1 send_flow_rem, 2 delete_learned.
    pub flags: u16,
    pub items: Vec<LearnItem>,
}

pub const F_SEND_FLOW_REM: u16 = 1;
pub const F_DELETE_LEARNED: u16 = 2;

impl Default for LearnSpec {
    fn default() -> LearnSpec {
        LearnSpec {
            table: 1,
            priority: 32768,
            idle_timeout: 0,
            hard_timeout: 0,
            fin_idle_timeout: 0,
            fin_hard_timeout: 0,
            cookie: 0,
            flags: 0,
            items: Vec::new(),
        }
    }
}

fn num(tok: &str, v: &str, max: u128, what: &str) -> Result<u128, ParseError> {
    parse_int(v).filter(|&n| n <= max).ok_or_else(|| perr(tok, format!("learn: bad {what} '{v}'")))
}

/// Parses what is inside `learn(...)`.
pub fn parse(tok: &str, arg: &str) -> Result<LearnSpec, ParseError> {
    let mut s = LearnSpec::default();
    for part in split_top_level(arg) {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        let u16v = |v: &str, what: &str| num(tok, v, 0xffff, what).map(|n| n as u16);
        if let Some(rest) = part.strip_prefix("load:") {
            let (src, dst) = rest.split_once("->").ok_or_else(|| perr(tok, "learn: load needs SRC->DST"))?;
            let dst = SubField::parse(dst, true)?;
            let src = if src.contains('[') {
                let f = SubField::parse(src, false)?;
                if f.n_bits != dst.n_bits {
                    return Err(perr(tok, "learn: load source and destination differ in width"));
                }
                LearnSrc::Field(f)
            } else {
                LearnSrc::Value(num(tok, src, dst.ones(), "load value")?)
            };
            s.items.push(LearnItem::Load { dst, src });
            continue;
        }
        if let Some(rest) = part.strip_prefix("output:") {
            s.items.push(LearnItem::Output { src: SubField::parse(rest, false)? });
            continue;
        }
        match part.split_once('=') {
            Some(("table", v)) => s.table = num(tok, v, 254, "table")? as u8,
            Some(("priority", v)) => s.priority = u16v(v, "priority")?,
            Some(("idle_timeout", v)) => s.idle_timeout = u16v(v, "idle_timeout")?,
            Some(("hard_timeout", v)) => s.hard_timeout = u16v(v, "hard_timeout")?,
            Some(("fin_idle_timeout", v)) => s.fin_idle_timeout = u16v(v, "fin_idle_timeout")?,
            Some(("fin_hard_timeout", v)) => s.fin_hard_timeout = u16v(v, "fin_hard_timeout")?,
            Some(("cookie", v)) => s.cookie = num(tok, v, u64::MAX as u128, "cookie")? as u64,
            Some((dst, src)) => {
                if dst.contains('[') {
                    let dst = SubField::parse(dst, false)?;
                    let src = if src.contains('[') {
                        let f = SubField::parse(src, false)?;
                        if f.n_bits != dst.n_bits {
                            return Err(perr(tok, "learn: match source and destination differ in width"));
                        }
                        LearnSrc::Field(f)
                    } else {
                        LearnSrc::Value(num(tok, src, dst.ones(), "match value")?)
                    };
                    s.items.push(LearnItem::Match { dst, src });
                } else {
                    let f = field_by_any_name(dst).ok_or_else(|| perr(tok, format!("learn: unknown field '{dst}'")))?;
                    let (v, m) = parse_value(f, src).map_err(|e| perr(tok, format!("learn: {e}")))?;
                    if m != f.loc.max() {
                        return Err(perr(tok, format!("learn: {dst} needs a whole value, not a mask")));
                    }
                    s.items.push(LearnItem::Match { dst: SubField::whole(f), src: LearnSrc::Value(v) });
                }
            }
            None => match part {
                "send_flow_rem" => s.flags |= F_SEND_FLOW_REM,
                "delete_learned" => s.flags |= F_DELETE_LEARNED,
                f if f.contains('[') => {
                    let sf = SubField::parse(f, false)?;
                    s.items.push(LearnItem::Match { dst: sf, src: LearnSrc::Field(sf) });
                }
                other => return Err(perr(tok, format!("learn: unknown argument '{other}'"))),
            },
        }
    }
    Ok(s)
}

/// The name Open vSwitch gives a field in `learn`'s `field=value` items
/// (its meta-flow name: Ethernet and IPv4 fields go by their OXM names).
fn mf_name(f: &flow::fields::FieldDef) -> &'static str {
    match f.name {
        "dl_type" => "eth_type",
        "dl_src" => "eth_src",
        "dl_dst" => "eth_dst",
        "nw_src" => "ip_src",
        "nw_dst" => "ip_dst",
        other => other,
    }
}

impl fmt::Display for LearnSpec {
    /// In ovs-ofctl's order: table, timeouts, priority, flags, cookie,
    /// then the items as given.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut p = vec![format!("table={}", self.table)];
        for (v, n) in [
            (self.idle_timeout, "idle_timeout"),
            (self.hard_timeout, "hard_timeout"),
            (self.fin_idle_timeout, "fin_idle_timeout"),
            (self.fin_hard_timeout, "fin_hard_timeout"),
        ] {
            if v != 0 {
                p.push(format!("{n}={v}"));
            }
        }
        if self.priority != 32768 {
            p.push(format!("priority={}", self.priority));
        }
        if self.flags & F_SEND_FLOW_REM != 0 {
            p.push("send_flow_rem".into());
        }
        if self.flags & F_DELETE_LEARNED != 0 {
            p.push("delete_learned".into());
        }
        if self.cookie != 0 {
            p.push(format!("cookie={:#x}", self.cookie));
        }
        let whole = |sf: &SubField| sf.ofs == 0 && sf.n_bits == sf.field.loc.bits;
        for it in &self.items {
            p.push(match it {
                LearnItem::Match { dst, src: LearnSrc::Field(s) } if s == dst => format!("{dst}"),
                LearnItem::Match { dst, src: LearnSrc::Field(s) } => format!("{dst}={s}"),
                LearnItem::Match { dst, src: LearnSrc::Value(v) } if whole(dst) => {
                    format!(
                        "{}={}",
                        mf_name(dst.field),
                        flow::matching::format_value(dst.field, *v, dst.field.loc.max())
                    )
                }
                LearnItem::Match { dst, src: LearnSrc::Value(v) } => format!("{dst}={v:#x}"),
                LearnItem::Load { dst, src: LearnSrc::Field(s) } => format!("load:{s}->{dst}"),
                LearnItem::Load { dst, src: LearnSrc::Value(v) } => format!("load:{v:#x}->{dst}"),
                LearnItem::Output { src } => format!("output:{src}"),
            });
        }
        write!(f, "learn({})", p.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_ovns_learn_as_ovs_ofctl() {
        let text = "table=69,delete_learned,cookie=0x24c9b797,OXM_OF_METADATA[],eth_type=0x800,NXM_OF_IP_SRC[],ip_dst=10.0.1.100,nw_proto=6,NXM_OF_TCP_SRC[]=NXM_OF_TCP_DST[],load:0x1->NXM_NX_REG10[7]";
        let s = parse("learn", text).unwrap();
        assert_eq!(s.items.len(), 7);
        assert_eq!(s.to_string(), format!("learn({text})"));
        let s = parse("learn", "table=2,idle_timeout=10,priority=5,NXM_OF_VLAN_TCI[0..11],output:NXM_OF_IN_PORT[]")
            .unwrap();
        assert_eq!(
            s.to_string(),
            "learn(table=2,idle_timeout=10,priority=5,NXM_OF_VLAN_TCI[0..11],output:NXM_OF_IN_PORT[])"
        );
        assert!(parse("learn", "NXM_OF_TCP_SRC[]=NXM_OF_IP_SRC[]").is_err(), "widths differ");
        assert!(parse("learn", "bogus").is_err());
    }
}
