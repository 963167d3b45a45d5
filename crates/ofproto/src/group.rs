//! OpenFlow groups and meters in the bridge: their tables, modification
//! semantics, and ovs-ofctl text syntax.
//!
//! Groups: `all` (every bucket), `select` (one bucket chosen by a hash of
//! the flow, by weight), `indirect` (its one bucket), `fast_failover` (the
//! first bucket whose watched port is live). Buckets run on a copy of the
//! translation state, so a bucket's field writes reach neither the next
//! bucket nor the actions after the group (as in Open vSwitch).
//! Deleting a group deletes the rules that use it (OpenFlow 1.3+).
//!
//! Meters live in the datapath ([`dpif::meter`]); this module keeps them
//! by id, validates modifications, and deletes the rules of a deleted meter.

use crate::actions::{parse_action, perr, Action, ParseError};
use dpif::meter::{BandConfig, BandType, Meter, MeterConfig};
use dpif::FlowCounters;
use flow::matching::{parse_int, split_top_level};
use std::fmt::Write;
use std::sync::Arc;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupType {
    All,
    Select,
    Indirect,
    FastFailover,
}

impl GroupType {
    pub fn name(self) -> &'static str {
        match self {
            GroupType::All => "all",
            GroupType::Select => "select",
            GroupType::Indirect => "indirect",
            GroupType::FastFailover => "ff",
        }
    }
    /// OpenFlow wire value.
    pub fn wire(self) -> u8 {
        match self {
            GroupType::All => 0,
            GroupType::Select => 1,
            GroupType::Indirect => 2,
            GroupType::FastFailover => 3,
        }
    }
    pub fn from_wire(v: u8) -> Option<GroupType> {
        Some(match v {
            0 => GroupType::All,
            1 => GroupType::Select,
            2 => GroupType::Indirect,
            3 => GroupType::FastFailover,
            _ => return None,
        })
    }
}

#[derive(Clone, Debug)]
pub struct Bucket {
    pub weight: u16,
    pub watch_port: Option<u32>,
    pub watch_group: Option<u32>,
    pub actions: Vec<Action>,
    /// Packets and bytes that went through this bucket (credited by the datapath).
    pub counters: Arc<FlowCounters>,
}

impl PartialEq for Bucket {
    fn eq(&self, o: &Bucket) -> bool {
        self.weight == o.weight
            && self.watch_port == o.watch_port
            && self.watch_group == o.watch_group
            && self.actions == o.actions
    }
}

#[derive(Clone, Debug)]
pub struct Group {
    pub id: u32,
    pub kind: GroupType,
    pub buckets: Vec<Bucket>,
    pub created_ms: u64,
    pub counters: Arc<FlowCounters>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModCmd {
    Add,
    Modify,
    Delete,
}

/// Why a group or meter modification was refused (each maps to an
/// OpenFlow GROUP_MOD_FAILED / METER_MOD_FAILED code).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GroupError {
    GroupExists(u32),
    UnknownGroup(u32),
    InvalidGroup(u32),
    BadBucket(String),
    BadWatch(String),
    Loop(u32),
    MeterExists(u32),
    UnknownMeter(u32),
    InvalidMeter(u32),
    BadRate,
    BadBand(String),
    BadMeterFlags,
}

impl std::fmt::Display for GroupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GroupError::GroupExists(g) => write!(f, "group {g} already exists"),
            GroupError::UnknownGroup(g) => write!(f, "group {g} does not exist"),
            GroupError::InvalidGroup(g) => write!(f, "group id {g} is reserved"),
            GroupError::BadBucket(s) | GroupError::BadWatch(s) | GroupError::BadBand(s) => write!(f, "{s}"),
            GroupError::Loop(g) => write!(f, "group {g} would loop"),
            GroupError::MeterExists(m) => write!(f, "meter {m} already exists"),
            GroupError::UnknownMeter(m) => write!(f, "meter {m} does not exist"),
            GroupError::InvalidMeter(m) => write!(f, "meter id {m} is reserved"),
            GroupError::BadRate => write!(f, "a band's rate must be positive"),
            GroupError::BadMeterFlags => write!(f, "a meter is kbps or pktps, not both"),
        }
    }
}
impl std::error::Error for GroupError {}

/// Largest group / meter id a controller may use.
pub const OFPG_MAX: u32 = 0xffff_ff00;
pub const OFPM_MAX: u32 = 0xffff_0000;
/// Delete-all ids.
pub const OFPG_ALL: u32 = 0xffff_fffc;
pub const OFPM_ALL: u32 = 0xffff_ffff;

impl Group {
    pub fn new(id: u32, kind: GroupType, buckets: Vec<Bucket>, now_ms: u64) -> Group {
        Group { id, kind, buckets, created_ms: now_ms, counters: Arc::new(FlowCounters::default()) }
    }

    /// Checks the group on its own (type-specific bucket rules).
    pub fn validate(&self) -> Result<(), GroupError> {
        if self.id > OFPG_MAX {
            return Err(GroupError::InvalidGroup(self.id));
        }
        match self.kind {
            GroupType::Indirect if self.buckets.len() != 1 => {
                return Err(GroupError::BadBucket("an indirect group has exactly one bucket".into()))
            }
            GroupType::FastFailover => {
                if self.buckets.iter().any(|b| b.watch_port.is_none() && b.watch_group.is_none()) {
                    return Err(GroupError::BadWatch(
                        "every fast_failover bucket needs watch_port or watch_group".into(),
                    ));
                }
            }
            _ => {}
        }
        for b in &self.buckets {
            if b.actions.iter().any(|a| matches!(a, Action::Group(g) if *g == self.id)) {
                return Err(GroupError::Loop(self.id));
            }
        }
        Ok(())
    }
}

/// Parses ovs-ofctl group syntax:
/// `group_id=1,type=select,bucket=weight:10,actions=output:1,bucket=output:2`.
pub fn parse_group(s: &str, now_ms: u64) -> Result<Group, ParseError> {
    let mut id = None;
    let mut kind = None;
    let mut buckets = Vec::new();
    // Split at top level, then gather bucket=... parts with what follows
    // until the next bucket.
    let toks = split_top_level(s);
    let mut cur: Option<Vec<&str>> = None;
    let mut groups_of: Vec<Vec<&str>> = Vec::new();
    for t in toks {
        let t = t.trim();
        if t.is_empty() {
            continue;
        }
        if let Some(rest) = t.strip_prefix("bucket=") {
            if let Some(c) = cur.take() {
                groups_of.push(c);
            }
            cur = Some(vec![rest]);
            continue;
        }
        if let Some(c) = cur.as_mut() {
            c.push(t);
            continue;
        }
        let (k, v) = t.split_once('=').unwrap_or((t, ""));
        match k {
            "group_id" => {
                id =
                    Some(parse_int(v).filter(|&n| n <= u32::MAX as u128).ok_or_else(|| perr(t, "bad group_id"))? as u32)
            }
            "type" => {
                kind = Some(match v {
                    "all" => GroupType::All,
                    "select" => GroupType::Select,
                    "indirect" => GroupType::Indirect,
                    "ff" | "fast_failover" => GroupType::FastFailover,
                    _ => return Err(perr(t, "type must be all, select, indirect or ff")),
                })
            }
            "selection_method" | "selection_method_param" | "fields" => {}
            _ => return Err(perr(t, format!("unknown group field '{k}'"))),
        }
    }
    if let Some(c) = cur.take() {
        groups_of.push(c);
    }
    for parts in groups_of {
        let mut b = Bucket {
            weight: 1,
            watch_port: None,
            watch_group: None,
            actions: Vec::new(),
            counters: Arc::new(FlowCounters::default()),
        };
        let mut in_actions = false;
        for p in parts {
            let p = p.trim();
            let (k, v) = if let Some(r) = p.strip_prefix("actions=") {
                in_actions = true;
                ("", r)
            } else if in_actions {
                ("", p)
            } else {
                match p.split_once(':').or_else(|| p.split_once('=')) {
                    Some((k, v)) if matches!(k, "weight" | "watch_port" | "watch_group" | "bucket_id") => (k, v),
                    _ => ("", p),
                }
            };
            let num = |v: &str| parse_int(v).filter(|&n| n <= u32::MAX as u128).ok_or_else(|| perr(p, "bad number"));
            match k {
                "weight" => b.weight = num(v)?.min(65535) as u16,
                "watch_port" => {
                    let port = crate::actions::OfPort::parse(v).ok_or_else(|| perr(p, "bad watch_port"))?;
                    b.watch_port = Some(crate::actions::ofport_number(port));
                }
                "watch_group" => b.watch_group = Some(num(v)? as u32),
                "bucket_id" => {}
                _ => {
                    if !v.is_empty() {
                        b.actions.push(parse_action(v)?);
                    }
                }
            }
        }
        buckets.push(b);
    }
    let id = id.ok_or_else(|| perr(s, "group_id is required"))?;
    let kind = kind.unwrap_or(GroupType::All);
    Ok(Group::new(id, kind, buckets, now_ms))
}

/// Formats a group as `ovs-ofctl dump-groups` prints it.
pub fn format_group(g: &Group) -> String {
    let mut out = format!("group_id={},type={}", g.id, g.kind.name());
    for (i, b) in g.buckets.iter().enumerate() {
        let _ = write!(out, ",bucket=bucket_id:{i}");
        if g.kind == GroupType::Select {
            let _ = write!(out, ",weight:{}", b.weight);
        }
        if let Some(p) = b.watch_port {
            let _ = write!(out, ",watch_port:{p}");
        }
        if let Some(w) = b.watch_group {
            let _ = write!(out, ",watch_group:{w}");
        }
        let acts: Vec<String> = b.actions.iter().map(|a| a.to_string()).collect();
        let _ = write!(out, ",actions={}", acts.join(","));
    }
    out
}

/// Parses ovs-ofctl meter syntax:
/// `meter=1,kbps,burst,stats,band=type=drop,rate=1000,burst_size=100`.
pub fn parse_meter(s: &str) -> Result<(u32, MeterConfig), ParseError> {
    let mut id = None;
    let mut flags = 0u16;
    let mut bands: Vec<BandConfig> = Vec::new();
    for raw in s.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let mut t = raw;
        if let Some(r) = raw.strip_prefix("band=") {
            bands.push(BandConfig { kind: BandType::Drop, rate: 0, burst_size: 0 });
            t = r;
        }
        let (k, v) = t.split_once('=').unwrap_or((t, ""));
        let num =
            || parse_int(v).filter(|&n| n <= u32::MAX as u128).map(|n| n as u32).ok_or_else(|| perr(raw, "bad number"));
        match (bands.last_mut(), k) {
            (None, "meter") => {
                id = Some(if v == "all" { OFPM_ALL } else { num()? });
            }
            (None, "kbps") => flags |= dpif::meter::mf::KBPS,
            (None, "pktps") => flags |= dpif::meter::mf::PKTPS,
            (None, "burst") => flags |= dpif::meter::mf::BURST,
            (None, "stats") => flags |= dpif::meter::mf::STATS,
            (Some(b), "type") => {
                b.kind = match v {
                    "drop" => BandType::Drop,
                    "dscp_remark" => BandType::DscpRemark(0),
                    _ => return Err(perr(raw, "band type must be drop or dscp_remark")),
                }
            }
            (Some(b), "rate") => b.rate = num()?,
            (Some(b), "burst_size") => b.burst_size = num()?,
            (Some(b), "prec_level") => {
                let p = num()?.min(255) as u8;
                b.kind = BandType::DscpRemark(p);
            }
            _ => return Err(perr(raw, format!("unknown meter field '{k}'"))),
        }
    }
    let id = id.ok_or_else(|| perr(s, "meter=ID is required"))?;
    if flags & (dpif::meter::mf::KBPS | dpif::meter::mf::PKTPS) == 0 {
        flags |= dpif::meter::mf::KBPS;
    }
    Ok((id, MeterConfig { flags, bands }))
}

/// Checks a meter configuration.
pub fn validate_meter(id: u32, cfg: &MeterConfig) -> Result<(), GroupError> {
    use dpif::meter::mf;
    if id == 0 || id > OFPM_MAX {
        return Err(GroupError::InvalidMeter(id));
    }
    if cfg.flags & mf::KBPS != 0 && cfg.flags & mf::PKTPS != 0 {
        return Err(GroupError::BadMeterFlags);
    }
    if cfg.bands.is_empty() {
        return Err(GroupError::BadBand("a meter needs at least one band".into()));
    }
    if cfg.bands.iter().any(|b| b.rate == 0) {
        return Err(GroupError::BadRate);
    }
    Ok(())
}

/// Formats a meter as `ovs-ofctl dump-meters` prints it.
pub fn format_meter(m: &Meter) -> String {
    use dpif::meter::mf;
    let cfg = m.config();
    let mut out = format!("meter={}", m.id);
    for (f, n) in [(mf::KBPS, "kbps"), (mf::PKTPS, "pktps"), (mf::BURST, "burst"), (mf::STATS, "stats")] {
        if cfg.flags & f != 0 {
            let _ = write!(out, " {n}");
        }
    }
    out.push_str(" bands=");
    for b in &cfg.bands {
        match b.kind {
            BandType::Drop => out.push_str("\ntype=drop"),
            BandType::DscpRemark(p) => {
                let _ = write!(out, "\ntype=dscp_remark prec_level={p}");
            }
        }
        let _ = write!(out, " rate={}", b.rate);
        if b.burst_size > 0 {
            let _ = write!(out, " burst_size={}", b.burst_size);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_syntax_round_trip() {
        let g = parse_group("group_id=5,type=select,bucket=weight:10,actions=output:1,bucket=weight:20,output:2", 0)
            .unwrap();
        assert_eq!((g.id, g.kind, g.buckets.len()), (5, GroupType::Select, 2));
        assert_eq!((g.buckets[0].weight, g.buckets[1].weight), (10, 20));
        assert_eq!(g.buckets[1].actions, vec![Action::Output(crate::actions::OfPort::Port(2))]);
        assert_eq!(
            format_group(&g),
            "group_id=5,type=select,bucket=bucket_id:0,weight:10,actions=output:1,bucket=bucket_id:1,weight:20,actions=output:2"
        );
        let ff =
            parse_group("group_id=6,type=ff,bucket=watch_port:1,output:1,bucket=watch_port:2,output:2", 0).unwrap();
        assert_eq!(ff.buckets[1].watch_port, Some(2));
        ff.validate().unwrap();
        let bad = parse_group("group_id=7,type=ff,bucket=output:1", 0).unwrap();
        assert!(matches!(bad.validate(), Err(GroupError::BadWatch(_))));
        let ind = parse_group("group_id=8,type=indirect,bucket=output:1,bucket=output:2", 0).unwrap();
        assert!(matches!(ind.validate(), Err(GroupError::BadBucket(_))));
        assert!(parse_group("type=all,bucket=output:1", 0).is_err());
    }

    #[test]
    fn meter_syntax() {
        let (id, cfg) = parse_meter("meter=3,pktps,burst,stats,band=type=drop,rate=100,burst_size=10").unwrap();
        assert_eq!(id, 3);
        assert_eq!(cfg.bands, vec![BandConfig { kind: BandType::Drop, rate: 100, burst_size: 10 }]);
        validate_meter(id, &cfg).unwrap();
        let (_, c2) = parse_meter("meter=4,band=type=dscp_remark,rate=5,prec_level=1").unwrap();
        assert_eq!(c2.bands[0].kind, BandType::DscpRemark(1));
        assert_eq!(c2.flags & dpif::meter::mf::KBPS, dpif::meter::mf::KBPS);
        assert!(parse_meter("meter=4,band=type=weird,rate=1").is_err());
        assert_eq!(
            validate_meter(5, &MeterConfig { flags: 1, bands: vec![] }),
            Err(GroupError::BadBand("a meter needs at least one band".into()))
        );
        let m = Meter::new(3, cfg, 0);
        assert_eq!(format_meter(&m), "meter=3 pktps burst stats bands=\ntype=drop rate=100 burst_size=10");
    }
}
