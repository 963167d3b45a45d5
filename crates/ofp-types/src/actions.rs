//! OpenFlow actions and instructions, and their ovs-ofctl text syntax.

use crate::subfield::SubField;
use flow::fields::{by_name, FieldDef};
use flow::matching::{parse_int, parse_value, split_top_level};
use std::fmt;

/// Reserved OpenFlow 1.0 port numbers as ovs-ofctl names them (16-bit
/// space; OpenFlow 1.1+ numbers are mapped to these by the codec).
pub mod ofpp {
    pub const MAX: u32 = 0xff00;
    pub const IN_PORT: u32 = 0xfff8;
    pub const TABLE: u32 = 0xfff9;
    pub const NORMAL: u32 = 0xfffa;
    pub const FLOOD: u32 = 0xfffb;
    pub const ALL: u32 = 0xfffc;
    pub const CONTROLLER: u32 = 0xfffd;
    pub const LOCAL: u32 = 0xfffe;
    pub const NONE: u32 = 0xffff;
}

/// An OpenFlow port reference in an action.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OfPort {
    Port(u32),
    InPort,
    Normal,
    Flood,
    All,
    Local,
    Controller,
}

impl OfPort {
    pub fn parse(s: &str) -> Option<OfPort> {
        Some(match s.to_ascii_uppercase().as_str() {
            "IN_PORT" => OfPort::InPort,
            "NORMAL" => OfPort::Normal,
            "FLOOD" => OfPort::Flood,
            "ALL" => OfPort::All,
            "LOCAL" => OfPort::Local,
            "CONTROLLER" => OfPort::Controller,
            _ => {
                let n = parse_int(s)?;
                if n == 0 || n >= ofpp::MAX as u128 {
                    return None;
                }
                OfPort::Port(n as u32)
            }
        })
    }
}

/// The port number an output names (reserved ports by their 1.0 number).
pub fn ofport_number(p: OfPort) -> u32 {
    match p {
        OfPort::Port(n) => n,
        OfPort::InPort => ofpp::IN_PORT,
        OfPort::Normal => ofpp::NORMAL,
        OfPort::Flood => ofpp::FLOOD,
        OfPort::All => ofpp::ALL,
        OfPort::Local => ofpp::LOCAL,
        OfPort::Controller => ofpp::CONTROLLER,
    }
}

impl fmt::Display for OfPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OfPort::Port(n) => write!(f, "{n}"),
            OfPort::InPort => write!(f, "IN_PORT"),
            OfPort::Normal => write!(f, "NORMAL"),
            OfPort::Flood => write!(f, "FLOOD"),
            OfPort::All => write!(f, "ALL"),
            OfPort::Local => write!(f, "LOCAL"),
            OfPort::Controller => write!(f, "CONTROLLER"),
        }
    }
}

/// The arguments of `controller(...)`, as `ovs-actions(7)` lists them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControllerSpec {
    pub max_len: u16,
    pub controller_id: u16,
    /// OFPR_* (0 no_match, 1 action, 2 invalid_ttl, 3 action_set, 4 group,
    /// 5 packet_out); `action` by default.
    pub reason: u8,
    pub userdata: Vec<u8>,
    pub pause: bool,
    pub meter_id: Option<u32>,
}

impl Default for ControllerSpec {
    /// `controller()`: the whole packet, controller 0, reason `action`.
    fn default() -> ControllerSpec {
        ControllerSpec {
            max_len: 65535,
            controller_id: 0,
            reason: 1,
            userdata: Vec::new(),
            pause: false,
            meter_id: None,
        }
    }
}

impl ControllerSpec {
    /// Needs `NXAST_CONTROLLER2` (not the shorter `NXAST_CONTROLLER`).
    pub fn needs_v2(&self) -> bool {
        !self.userdata.is_empty() || self.pause || self.meter_id.is_some()
    }
}

/// `bundle(FIELDS,BASIS,ALGORITHM,ofport,members:P,...)` and
/// `bundle_load(FIELDS,BASIS,ALGORITHM,ofport,DST,members:P,...)`, as
/// `ovs-actions(7)` defines them. OVN sends traffic for a gateway port to
/// the first live tunnel of its HA chassis this way.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BundleSpec {
    /// One of [`HASH_FIELDS`] (what `hrw` hashes).
    pub fields: u16,
    pub basis: u16,
    /// [`BUNDLE_ACTIVE_BACKUP`] or [`BUNDLE_HRW`].
    pub algorithm: u16,
    /// Member OpenFlow port numbers, in order.
    pub members: Vec<u16>,
    /// `bundle_load`: where the chosen port number goes (0xffff if none).
    pub dst: Option<SubField>,
}

/// Chooses the first live member.
pub const BUNDLE_ACTIVE_BACKUP: u16 = 0;
/// Highest random weight over the live members.
pub const BUNDLE_HRW: u16 = 1;

/// Nicira hash field sets (`enum nx_hash_fields`), as they are spelt.
pub const HASH_FIELDS: [(u16, &str); 7] = [
    (0, "eth_src"),
    (1, "symmetric_l4"),
    (2, "symmetric_l3l4"),
    (3, "symmetric_l3l4+udp"),
    (4, "nw_src"),
    (5, "nw_dst"),
    (6, "symmetric_l3"),
];

impl BundleSpec {
    fn parse(tok: &str, load: bool, arg: &str) -> Result<BundleSpec, ParseError> {
        let parts: Vec<&str> = arg.split(',').map(str::trim).collect();
        let fixed = if load { 5 } else { 4 };
        let usage = || {
            perr(
                tok,
                if load {
                    "bundle_load needs FIELDS,BASIS,ALGORITHM,ofport,DST,members:PORT[,PORT...]"
                } else {
                    "bundle needs FIELDS,BASIS,ALGORITHM,ofport,members:PORT[,PORT...]"
                },
            )
        };
        if parts.len() <= fixed {
            return Err(usage());
        }
        let fields = HASH_FIELDS
            .iter()
            .find(|(_, n)| *n == parts[0])
            .map(|(v, _)| *v)
            .ok_or_else(|| perr(tok, format!("bundle: unknown fields '{}'", parts[0])))?;
        let basis = parse_int(parts[1])
            .filter(|&b| b <= u16::MAX as u128)
            .ok_or_else(|| perr(tok, format!("bundle: bad basis '{}'", parts[1])))? as u16;
        let algorithm = match parts[2] {
            "active_backup" => BUNDLE_ACTIVE_BACKUP,
            "hrw" => BUNDLE_HRW,
            a => return Err(perr(tok, format!("bundle: unknown algorithm '{a}' (active_backup, hrw)"))),
        };
        if parts[3] != "ofport" {
            return Err(perr(tok, format!("bundle: unknown member type '{}' (ofport)", parts[3])));
        }
        let dst = if load {
            let d = SubField::parse(parts[4], false)?;
            if !writable(d.field) || d.n_bits < 16 {
                return Err(perr(tok, format!("bundle_load: {} cannot hold a port number", parts[4])));
            }
            Some(d)
        } else {
            None
        };
        let first =
            parts[fixed].strip_prefix("members:").or_else(|| parts[fixed].strip_prefix("slaves:")).ok_or_else(usage)?;
        let mut members = Vec::new();
        for p in std::iter::once(first).chain(parts[fixed + 1..].iter().copied()) {
            let n = parse_int(p)
                .filter(|n| (1..0xff00).contains(n))
                .ok_or_else(|| perr(tok, format!("bundle: bad member port '{p}'")))?;
            members.push(n as u16);
        }
        Ok(BundleSpec { fields, basis, algorithm, members, dst })
    }
}

impl fmt::Display for BundleSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let fields = HASH_FIELDS.iter().find(|(v, _)| *v == self.fields).map_or("eth_src", |(_, n)| n);
        let alg = if self.algorithm == BUNDLE_HRW { "hrw" } else { "active_backup" };
        match &self.dst {
            Some(d) => write!(f, "bundle_load({fields},{},{alg},ofport,{d},members:", self.basis)?,
            None => write!(f, "bundle({fields},{},{alg},ofport,members:", self.basis)?,
        }
        let m: Vec<String> = self.members.iter().map(|p| p.to_string()).collect();
        write!(f, "{})", m.join(","))
    }
}

const REASONS: [&str; 6] = ["no_match", "action", "invalid_ttl", "action_set", "group", "packet_out"];

/// An OpenFlow action (what goes inside apply/write actions).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    Output(OfPort),
    /// Send to the controller, at most `max_len` bytes of the packet.
    Controller {
        max_len: u16,
    },
    /// `conjunction(id, k/n)`: this flow is clause `k` of `n` of
    /// conjunctive match `id` (a flow with only these actions matches no
    /// packet by itself; see ofproto's translation).
    Conjunction {
        id: u32,
        clause: u8,
        n_clauses: u8,
    },
    /// `learn(...)`: add a flow built from this packet (see [`crate::learn`]).
    Learn(Box<crate::learn::LearnSpec>),
    /// `controller(...)` with more than a length: a controller id or a
    /// reason (Nicira `NXAST_CONTROLLER`), or userdata, `pause` or a meter
    /// (`NXAST_CONTROLLER2`, what OVN's pinctrl flows use).
    ControllerNx(Box<ControllerSpec>),
    /// Write `value` under `mask` into a field (set_field / load / mod_*).
    SetField {
        field: &'static FieldDef,
        value: u128,
        mask: u128,
    },
    PushVlan(u16),
    PopVlan,
    DecTtl,
    /// `dec_ttl(id,...)` (Nicira `NXAST_DEC_TTL_CNT_IDS`): the same, with
    /// the controller ids that hear of an expired TTL (OVN writes
    /// `dec_ttl()`, an empty list).
    DecTtlIds(Vec<u16>),
    SetNwTtl(u8),
    /// Push an MPLS label stack entry with this Ethertype (0x8847 or 0x8848).
    PushMpls(u16),
    /// Pop the outermost MPLS label; the frame's Ethertype becomes this.
    PopMpls(u16),
    SetMplsTtl(u8),
    DecMplsTtl,
    /// Nicira resubmit: look up again in `table` (or the current table)
    /// with in_port temporarily replaced by `port` (if given).
    Resubmit {
        port: Option<u32>,
        table: Option<u8>,
    },
    Group(u32),
    SetQueue(u32),
    /// An output that carried a `max_len` on the wire (OpenFlow 1.1+ and
    /// 1.0 both have the field; it only matters for the controller port,
    /// but a controller reads back what it installed): forwards exactly as
    /// [`Action::Output`].
    OutputMaxLen(OfPort, u16),
    /// Connection tracking (see [`crate::ct`]).
    Ct(crate::ct::CtSpec),
    /// Clears the packet's connection-tracking state.
    CtClear,
    /// Nicira `load:VALUE->DST[a..b]` (NXAST_REG_LOAD): writes `value`
    /// into the sub-field. Behaves as a masked [`Action::SetField`]; kept
    /// apart so it is echoed in the encoding the controller used.
    Load {
        dst: SubField,
        value: u128,
    },
    /// `move:SRC[a..b]->DST[c..d]` (NXAST_REG_MOVE, OpenFlow 1.5
    /// copy_field): copies bits of one field into another of the same width.
    Move {
        src: SubField,
        dst: SubField,
    },
    /// `output:SRC[a..b]` (NXAST_OUTPUT_REG): output to the port number
    /// held in the sub-field.
    OutputReg {
        src: SubField,
        max_len: u16,
    },
    /// `bundle(...)` / `bundle_load(...)` (NXAST_BUNDLE, NXAST_BUNDLE_LOAD):
    /// one live member port, output to or loaded into a sub-field.
    Bundle(Box<BundleSpec>),
    /// `push:SRC[a..b]` (NXAST_STACK_PUSH): pushes the sub-field's value
    /// on the translation's stack.
    StackPush(SubField),
    /// `pop:DST[a..b]` (NXAST_STACK_POP): pops the top of the stack into
    /// the sub-field.
    StackPop(SubField),
    /// `clone(actions)` (NXAST_CLONE): runs the actions on a copy of the
    /// packet and its pipeline state; the original continues unchanged.
    Clone(Vec<Action>),
}

/// An OpenFlow instruction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Instruction {
    Apply(Vec<Action>),
    Write(Vec<Action>),
    Clear,
    WriteMetadata { value: u64, mask: u64 },
    GotoTable(u8),
    Meter(u32),
}

/// A parse error naming the offending token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    pub token: String,
    pub reason: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "'{}': {}", self.token, self.reason)
    }
}
impl std::error::Error for ParseError {}

pub fn perr(token: &str, reason: impl Into<String>) -> ParseError {
    ParseError { token: token.to_string(), reason: reason.into() }
}

impl From<flow::MatchError> for ParseError {
    fn from(e: flow::MatchError) -> Self {
        ParseError { token: e.token, reason: e.reason }
    }
}

/// Splits `name(args)` / `name:arg` / `name=arg` into (name, arg).
fn split_action(tok: &str) -> (&str, Option<&str>) {
    if let Some(i) = tok.find('(') {
        if tok.ends_with(')') && tok[..i].chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return (&tok[..i], Some(&tok[i + 1..tok.len() - 1]));
        }
    }
    if let Some(i) = tok.find([':', '=']) {
        return (&tok[..i], Some(&tok[i + 1..]));
    }
    (tok, None)
}

/// Parses the text after `actions=` into instructions, as ovs-ofctl does:
/// bare actions form one apply-actions instruction; `write_actions(...)`,
/// `clear_actions`, `write_metadata:V/M`, `goto_table:N`, `meter:N` are
/// instructions of their own.
pub fn parse_actions(s: &str) -> Result<Vec<Instruction>, ParseError> {
    let mut apply = Vec::new();
    let mut others = Vec::new();
    let s = s.trim();
    if s.is_empty() || s.eq_ignore_ascii_case("drop") {
        return Ok(Vec::new());
    }
    for tok in split_top_level(s) {
        let tok = tok.trim();
        if tok.is_empty() {
            continue;
        }
        let (name, arg) = split_action(tok);
        match name.to_ascii_lowercase().as_str() {
            "drop" => {}
            "write_actions" => {
                let inner = arg.ok_or_else(|| perr(tok, "write_actions needs (actions)"))?;
                let mut v = Vec::new();
                for t in split_top_level(inner) {
                    if !t.trim().is_empty() {
                        v.push(parse_action(t.trim())?);
                    }
                }
                others.push(Instruction::Write(v));
            }
            "clear_actions" => others.push(Instruction::Clear),
            "write_metadata" => {
                let a = arg.ok_or_else(|| perr(tok, "write_metadata needs a value"))?;
                let (v, m) = match a.split_once('/') {
                    Some((v, m)) => (parse_int(v), parse_int(m)),
                    None => (parse_int(a), Some(u64::MAX as u128)),
                };
                let (Some(v), Some(m)) = (v, m) else { return Err(perr(tok, "bad metadata value")) };
                if v > u64::MAX as u128 || m > u64::MAX as u128 {
                    return Err(perr(tok, "metadata is 64 bits"));
                }
                others.push(Instruction::WriteMetadata { value: v as u64, mask: m as u64 });
            }
            "goto_table" => {
                let n = arg.and_then(parse_int).filter(|&n| n < 255).ok_or_else(|| perr(tok, "bad table (0-254)"))?;
                others.push(Instruction::GotoTable(n as u8));
            }
            "meter" => {
                let n = arg.and_then(parse_int).ok_or_else(|| perr(tok, "bad meter id"))?;
                others.push(Instruction::Meter(n as u32));
            }
            _ => apply.push(parse_action(tok)?),
        }
    }
    let mut out = Vec::new();
    // Instruction order is fixed by OpenFlow: meter, apply, clear, write,
    // write_metadata, goto_table.
    if let Some(m) = others.iter().find(|i| matches!(i, Instruction::Meter(_))) {
        out.push(m.clone());
    }
    if !apply.is_empty() {
        out.push(Instruction::Apply(apply));
    }
    for kind in 0..4 {
        for i in &others {
            let k = match i {
                Instruction::Clear => 0,
                Instruction::Write(_) => 1,
                Instruction::WriteMetadata { .. } => 2,
                Instruction::GotoTable(_) => 3,
                _ => continue,
            };
            if k == kind {
                out.push(i.clone());
            }
        }
    }
    let gotos = out.iter().filter(|i| matches!(i, Instruction::GotoTable(_))).count();
    if gotos > 1 {
        return Err(perr(s, "more than one goto_table"));
    }
    Ok(out)
}

fn field_named(tok: &str, name: &str) -> Result<&'static FieldDef, ParseError> {
    by_name(name).ok_or_else(|| perr(tok, format!("unknown field '{name}'")))
}

/// Whether `f` may be written by set_field, load or move (mpls_bos is
/// read-only, as in Open vSwitch, ovs-fields(7)).
pub fn writable(f: &FieldDef) -> bool {
    !matches!(
        f.name,
        "recirc_id" | "dl_type" | "eth_type" | "nw_proto" | "ip_proto" | "nw_frag" | "dp_hash" | "mpls_bos"
    )
}

fn set_field(tok: &str, name: &str, value: &str) -> Result<Action, ParseError> {
    let f = field_named(tok, name)?;
    if !writable(f) {
        return Err(perr(tok, format!("field {} cannot be set", f.name)));
    }
    let (v, m) = parse_value(f, value).map_err(|r| perr(tok, r))?;
    Ok(Action::SetField { field: f, value: v, mask: m })
}

/// Parses one action.
pub fn parse_action(tok: &str) -> Result<Action, ParseError> {
    let (name, arg) = split_action(tok);
    let lname = name.to_ascii_lowercase();
    let need = |what: &str| arg.ok_or_else(|| perr(tok, format!("{name} needs {what}")));
    let int = |what: &str| -> Result<u128, ParseError> {
        let a = arg.ok_or_else(|| perr(tok, format!("{name} needs {what}")))?;
        parse_int(a).ok_or_else(|| perr(tok, format!("bad {what} '{a}'")))
    };
    Ok(match lname.as_str() {
        "ct" => crate::ct::parse_ct(tok, arg)?,
        "conjunction" => {
            let a = need("ID,K/N")?;
            let bad = || perr(tok, format!("conjunction: '{a}' is not ID,K/N with 1 <= K <= N and 2 <= N <= 64"));
            let (id, kn) = a.split_once(',').ok_or_else(bad)?;
            let (k, n) = kn.split_once('/').ok_or_else(bad)?;
            let id = parse_int(id.trim()).filter(|&v| v <= u32::MAX as u128).ok_or_else(bad)? as u32;
            let (k, n) = (parse_int(k.trim()).ok_or_else(bad)?, parse_int(n.trim()).ok_or_else(bad)?);
            if !(2..=64).contains(&n) || k < 1 || k > n {
                return Err(bad());
            }
            Action::Conjunction { id, clause: k as u8, n_clauses: n as u8 }
        }
        "learn" => Action::Learn(Box::new(crate::learn::parse(tok, arg.unwrap_or(""))?)),
        "ct_clear" if arg.is_none() => Action::CtClear,
        "push" => Action::StackPush(SubField::parse(need("a sub-field")?, false)?),
        "bundle" | "bundle_load" => {
            Action::Bundle(Box::new(BundleSpec::parse(tok, lname == "bundle_load", need("its arguments")?)?))
        }
        "pop" => {
            let dst = SubField::parse(need("a sub-field")?, false)?;
            if !writable(dst.field) {
                return Err(perr(tok, format!("field {} cannot be set", dst.field.name)));
            }
            Action::StackPop(dst)
        }
        "clone" => {
            let inner = arg.ok_or_else(|| perr(tok, "clone needs (actions)"))?;
            let mut v = Vec::new();
            for t in split_top_level(inner) {
                if !t.trim().is_empty() {
                    v.push(parse_action(t.trim())?);
                }
            }
            Action::Clone(v)
        }
        "output" if arg.is_some_and(|a| a.contains('[')) => {
            let src = SubField::parse(need("a sub-field")?, false)?;
            Action::OutputReg { src, max_len: u16::MAX }
        }
        "output" => {
            let a = need("a port")?;
            OfPort::parse(a).map(Action::Output).ok_or_else(|| perr(tok, format!("bad port '{a}'")))?
        }
        "in_port" | "normal" | "flood" | "all" | "local" if arg.is_none() => {
            Action::Output(OfPort::parse(name).expect("reserved names parse"))
        }
        "controller" => {
            let mut c = ControllerSpec::default();
            if let Some(a) = arg {
                for kv in a.split(',') {
                    let kv = kv.trim();
                    let num = |v: &str, max: u128, what: &str| {
                        parse_int(v).filter(|&n| n <= max).ok_or_else(|| perr(tok, format!("bad {what} '{v}'")))
                    };
                    if let Some(v) = kv.strip_prefix("max_len=") {
                        c.max_len = num(v, 65535, "max_len")? as u16;
                    } else if let Some(v) = kv.strip_prefix("id=") {
                        c.controller_id = num(v, 65535, "controller id")? as u16;
                    } else if let Some(v) = kv.strip_prefix("reason=") {
                        c.reason = REASONS
                            .iter()
                            .position(|r| *r == v)
                            .ok_or_else(|| perr(tok, format!("unknown reason '{v}' ({})", REASONS.join(", "))))?
                            as u8;
                    } else if let Some(v) = kv.strip_prefix("userdata=") {
                        c.userdata = v
                            .split('.')
                            .map(|b| u8::from_str_radix(b, 16).ok().filter(|_| b.len() == 2))
                            .collect::<Option<Vec<u8>>>()
                            .ok_or_else(|| perr(tok, format!("userdata: '{v}' is not hex bytes separated by '.'")))?;
                    } else if kv == "pause" {
                        c.pause = true;
                    } else if let Some(v) = kv.strip_prefix("meter_id=") {
                        c.meter_id = Some(num(v, u32::MAX as u128, "meter_id")? as u32);
                    } else if let Some(n) = parse_int(kv) {
                        c.max_len = n.min(65535) as u16;
                    } else if !kv.is_empty() {
                        return Err(perr(tok, format!("unknown controller option '{kv}'")));
                    }
                }
            }
            if c.needs_v2() || c.controller_id != 0 || c.reason != 1 {
                Action::ControllerNx(Box::new(c))
            } else {
                Action::Controller { max_len: c.max_len }
            }
        }
        "set_field" => {
            // set_field:VALUE[/MASK]->FIELD
            let a = need("VALUE->FIELD")?;
            let (v, f) = a.split_once("->").ok_or_else(|| perr(tok, "set_field needs VALUE->FIELD"))?;
            set_field(tok, f.trim(), v.trim())?
        }
        "load" => {
            // load:VALUE->FIELD[a..b]
            let a = need("VALUE->FIELD[]")?;
            let (v, f) = a.split_once("->").ok_or_else(|| perr(tok, "load needs VALUE->FIELD[]"))?;
            let dst = SubField::parse(f, false)?;
            if !writable(dst.field) {
                return Err(perr(tok, format!("field {} cannot be set", dst.field.name)));
            }
            let v = parse_int(v).ok_or_else(|| perr(tok, "bad value"))?;
            if v > dst.ones() {
                return Err(perr(tok, format!("value does not fit in {} bits", dst.n_bits)));
            }
            Action::Load { dst, value: v }
        }
        "move" => {
            let a = need("SRC[]->DST[]")?;
            let (s, d) = a.split_once("->").ok_or_else(|| perr(tok, "move needs SRC[]->DST[]"))?;
            let (src, dst) = (SubField::parse(s, false)?, SubField::parse(d, false)?);
            if src.n_bits != dst.n_bits {
                return Err(perr(
                    tok,
                    format!("source is {} bits wide but destination is {} bits wide", src.n_bits, dst.n_bits),
                ));
            }
            if !writable(dst.field) {
                return Err(perr(tok, format!("field {} cannot be set", dst.field.name)));
            }
            Action::Move { src, dst }
        }
        "mod_dl_src" => set_field(tok, "dl_src", need("a MAC")?)?,
        "mod_dl_dst" => set_field(tok, "dl_dst", need("a MAC")?)?,
        "mod_nw_src" => set_field(tok, "nw_src", need("an address")?)?,
        "mod_nw_dst" => set_field(tok, "nw_dst", need("an address")?)?,
        "mod_tp_src" => set_field(tok, "tp_src", need("a port")?)?,
        "mod_tp_dst" => set_field(tok, "tp_dst", need("a port")?)?,
        "mod_nw_tos" => {
            let v = int("a TOS value")?;
            if v > 255 || v & 3 != 0 {
                return Err(perr(tok, "mod_nw_tos takes a DSCP value in the high 6 bits (multiple of 4)"));
            }
            Action::SetField { field: by_name("nw_tos").expect("nw_tos"), value: v, mask: 0xfc }
        }
        "mod_nw_ttl" | "set_nw_ttl" => {
            let v = int("a TTL")?;
            if v > 255 {
                return Err(perr(tok, "TTL is 0-255"));
            }
            Action::SetNwTtl(v as u8)
        }
        "mod_vlan_vid" | "set_vlan_vid" => {
            let v = int("a VLAN id")?;
            if v > 4095 {
                return Err(perr(tok, "VLAN id is 0-4095"));
            }
            Action::SetField { field: by_name("vlan_tci").expect("vlan_tci"), value: 0x1000 | v, mask: 0x1fff }
        }
        "mod_vlan_pcp" | "set_vlan_pcp" => {
            let v = int("a PCP")?;
            if v > 7 {
                return Err(perr(tok, "PCP is 0-7"));
            }
            Action::SetField { field: by_name("vlan_tci").expect("vlan_tci"), value: 0x1000 | (v << 13), mask: 0xf000 }
        }
        "strip_vlan" | "pop_vlan" => Action::PopVlan,
        "push_vlan" => {
            let v = int("an Ethertype")?;
            if v != 0x8100 && v != 0x88a8 {
                return Err(perr(tok, "push_vlan takes 0x8100 or 0x88a8"));
            }
            Action::PushVlan(v as u16)
        }
        "push_mpls" => {
            let v = int("an Ethertype")?;
            if v != 0x8847 && v != 0x8848 {
                return Err(perr(tok, "push_mpls takes 0x8847 or 0x8848"));
            }
            Action::PushMpls(v as u16)
        }
        "pop_mpls" => {
            let v = int("an Ethertype")?;
            if v > 0xffff {
                return Err(perr(tok, "an Ethertype is 16 bits"));
            }
            Action::PopMpls(v as u16)
        }
        "set_mpls_ttl" => {
            let v = int("a TTL")?;
            if v > 255 {
                return Err(perr(tok, "TTL is 0-255"));
            }
            Action::SetMplsTtl(v as u8)
        }
        "dec_mpls_ttl" => Action::DecMplsTtl,
        "set_mpls_label" => {
            let v = int("an MPLS label")?;
            if v > 0xf_ffff {
                return Err(perr(tok, "an MPLS label is 0-1048575"));
            }
            Action::SetField { field: by_name("mpls_label").expect("mpls_label"), value: v, mask: 0xf_ffff }
        }
        "set_mpls_tc" => {
            let v = int("an MPLS traffic class")?;
            if v > 7 {
                return Err(perr(tok, "MPLS TC is 0-7"));
            }
            Action::SetField { field: by_name("mpls_tc").expect("mpls_tc"), value: v, mask: 7 }
        }
        "dec_ttl" => match arg {
            None => Action::DecTtl,
            Some(a) => Action::DecTtlIds(
                a.split(',')
                    .map(str::trim)
                    .filter(|x| !x.is_empty())
                    .map(|x| parse_int(x).filter(|&n| n <= 0xffff).map(|n| n as u16))
                    .collect::<Option<Vec<u16>>>()
                    .ok_or_else(|| perr(tok, format!("dec_ttl: '{a}' is not a list of controller ids")))?,
            ),
        },
        "resubmit" => {
            let a = need("(port,table)")?;
            let (p, t) = match a.split_once(',') {
                Some((p, t)) => (p.trim(), Some(t.trim())),
                None => (a.trim(), None),
            };
            let port = if p.is_empty() {
                None
            } else {
                match OfPort::parse(p) {
                    Some(OfPort::Port(n)) => Some(n),
                    Some(OfPort::InPort) => None,
                    _ => return Err(perr(tok, format!("bad resubmit port '{p}'"))),
                }
            };
            let table = match t {
                None | Some("") => None,
                Some(t) => Some(parse_int(t).filter(|&n| n < 255).ok_or_else(|| perr(tok, "bad table"))? as u8),
            };
            Action::Resubmit { port, table }
        }
        "group" => Action::Group(int("a group id")? as u32),
        "set_queue" => Action::SetQueue(int("a queue id")? as u32),
        _ => {
            // A bare port number is an output.
            if arg.is_none() {
                if let Some(OfPort::Port(n)) = OfPort::parse(tok) {
                    return Ok(Action::Output(OfPort::Port(n)));
                }
            }
            return Err(perr(tok, format!("unknown action '{name}'")));
        }
    })
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Output(OfPort::Port(n)) => write!(f, "output:{n}"),
            Action::Output(OfPort::InPort) => write!(f, "IN_PORT"),
            Action::Output(p) => write!(f, "{p}"),
            Action::Controller { max_len } => {
                if *max_len == 65535 {
                    write!(f, "CONTROLLER:65535")
                } else {
                    write!(f, "CONTROLLER:{max_len}")
                }
            }
            Action::Learn(l) => write!(f, "{l}"),
            Action::Conjunction { id, clause, n_clauses } => write!(f, "conjunction({id},{clause}/{n_clauses})"),
            Action::ControllerNx(c) => {
                // ovs-ofctl's order; defaults left out.
                let mut p = Vec::new();
                if c.reason != 1 {
                    p.push(format!("reason={}", REASONS.get(c.reason as usize).copied().unwrap_or("action")));
                }
                if c.max_len != 65535 {
                    p.push(format!("max_len={}", c.max_len));
                }
                if c.controller_id != 0 {
                    p.push(format!("id={}", c.controller_id));
                }
                if !c.userdata.is_empty() {
                    let h: Vec<String> = c.userdata.iter().map(|b| format!("{b:02x}")).collect();
                    p.push(format!("userdata={}", h.join(".")));
                }
                if c.pause {
                    p.push("pause".into());
                }
                if let Some(m) = c.meter_id {
                    p.push(format!("meter_id={m}"));
                }
                write!(f, "controller({})", p.join(","))
            }
            Action::SetField { field, value, mask } => {
                let v = flow::matching::format_value(field, *value, *mask);
                write!(f, "set_field:{v}->{}", field.name)
            }
            Action::PushVlan(t) => write!(f, "push_vlan:{t:#x}"),
            Action::PopVlan => write!(f, "pop_vlan"),
            Action::DecTtl => write!(f, "dec_ttl"),
            Action::DecTtlIds(ids) => {
                let ids: Vec<String> = ids.iter().map(u16::to_string).collect();
                write!(f, "dec_ttl({})", ids.join(","))
            }
            Action::SetNwTtl(t) => write!(f, "mod_nw_ttl:{t}"),
            Action::PushMpls(t) => write!(f, "push_mpls:0x{t:04x}"),
            Action::PopMpls(t) => write!(f, "pop_mpls:0x{t:04x}"),
            Action::SetMplsTtl(t) => write!(f, "set_mpls_ttl({t})"),
            Action::DecMplsTtl => write!(f, "dec_mpls_ttl"),
            Action::Resubmit { port, table } => {
                let p = port.map(|p| p.to_string()).unwrap_or_default();
                let t = table.map(|t| t.to_string()).unwrap_or_default();
                write!(f, "resubmit({p},{t})")
            }
            Action::Group(g) => write!(f, "group:{g}"),
            Action::SetQueue(q) => write!(f, "set_queue:{q}"),
            Action::OutputMaxLen(p, _) => write!(f, "{}", Action::Output(*p)),
            Action::Ct(c) => write!(f, "{c}"),
            Action::CtClear => write!(f, "ct_clear"),
            Action::Load { dst, value } => {
                if *value == 0 {
                    write!(f, "load:0->{dst}")
                } else {
                    write!(f, "load:{value:#x}->{dst}")
                }
            }
            Action::Move { src, dst } => write!(f, "move:{src}->{dst}"),
            Action::OutputReg { src, .. } => write!(f, "output:{src}"),
            Action::StackPush(sf) => write!(f, "push:{sf}"),
            Action::Bundle(b) => write!(f, "{b}"),
            Action::StackPop(sf) => write!(f, "pop:{sf}"),
            Action::Clone(acts) => write!(f, "clone({})", join(acts)),
        }
    }
}

fn join(actions: &[Action]) -> String {
    actions.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(",")
}

/// Formats instructions as ovs-ofctl prints them after `actions=`.
pub fn format_instructions(ins: &[Instruction]) -> String {
    let mut parts = Vec::new();
    for i in ins {
        parts.push(match i {
            Instruction::Apply(a) => join(a),
            Instruction::Write(a) => format!("write_actions({})", join(a)),
            Instruction::Clear => "clear_actions".into(),
            Instruction::WriteMetadata { value, mask } => {
                if *mask == u64::MAX {
                    format!("write_metadata:{value:#x}")
                } else {
                    format!("write_metadata:{value:#x}/{mask:#x}")
                }
            }
            Instruction::GotoTable(t) => format!("goto_table:{t}"),
            Instruction::Meter(m) => format!("meter:{m}"),
        });
    }
    let s = parts.into_iter().filter(|p| !p.is_empty()).collect::<Vec<_>>().join(",");
    if s.is_empty() {
        "drop".into()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_basic() {
        let i = parse_actions("output:2,mod_nw_tos:32,goto_table:3").unwrap();
        assert_eq!(i.len(), 2);
        assert_eq!(
            format_instructions(&i),
            "output:2,set_field:32/0xfc->nw_tos,goto_table:3".replace("32/0xfc", "0x20/0xfc")
        );
        assert_eq!(parse_actions("drop").unwrap(), vec![]);
        let i = parse_actions("NORMAL").unwrap();
        assert_eq!(i, vec![Instruction::Apply(vec![Action::Output(OfPort::Normal)])]);
        let i = parse_actions("write_actions(output:1),clear_actions,write_metadata:0x1/0xff").unwrap();
        assert_eq!(i.len(), 3);
        assert!(matches!(i[0], Instruction::Clear));
        let i = parse_actions("set_field:10.0.0.1->nw_dst,3,controller(max_len=128)").unwrap();
        assert_eq!(format_instructions(&i), "set_field:10.0.0.1->nw_dst,output:3,CONTROLLER:128");
    }

    #[test]
    fn errors_name_the_token() {
        let e = parse_actions("output:2,frobnicate:3").unwrap_err();
        assert_eq!(e.token, "frobnicate:3");
        let e = parse_actions("set_field:1->recirc_id").unwrap_err();
        assert!(e.reason.contains("cannot be set"));
        assert!(parse_actions("goto_table:1,goto_table:2").is_err());
        assert!(parse_actions("mod_vlan_vid:5000").is_err());
        assert!(parse_actions("load:0x100->reg0[0..7]").is_err());
        assert!(parse_actions("move:reg0[0..7]->reg1[0..15]").is_err());
        assert!(parse_actions("move:reg0[]->recirc_id[]").is_err());
    }

    /// Register actions print as ovs-ofctl prints them.
    #[test]
    fn register_actions() {
        for (text, printed) in [
            ("set_field:5->reg0", "set_field:0x5->reg0"),
            ("load:5->NXM_NX_REG0[0..7]", "load:0x5->NXM_NX_REG0[0..7]"),
            ("load:0x1->reg3[4]", "load:0x1->NXM_NX_REG3[4]"),
            ("load:0->xxreg2[64..127]", "load:0->NXM_NX_XXREG2[64..127]"),
            ("move:NXM_NX_REG0[0..15]->NXM_NX_REG1[16..31]", "move:NXM_NX_REG0[0..15]->NXM_NX_REG1[16..31]"),
            ("move:reg0[]->reg1[]", "move:NXM_NX_REG0[]->NXM_NX_REG1[]"),
            ("move:eth_src[]->eth_dst[]", "move:NXM_OF_ETH_SRC[]->NXM_OF_ETH_DST[]"),
            ("output:reg0[0..15]", "output:NXM_NX_REG0[0..15]"),
            ("output:NXM_NX_REG1[]", "output:NXM_NX_REG1[]"),
            ("push:reg0[],pop:NXM_NX_REG2[0..15]", "push:NXM_NX_REG0[],pop:NXM_NX_REG2[0..15]"),
            ("clone(set_field:1->reg0,output:2),output:1", "clone(set_field:0x1->reg0,output:2),output:1"),
        ] {
            assert_eq!(format_instructions(&parse_actions(text).unwrap()), printed, "{text}");
        }
    }
}
