//! Typed OpenFlow messages: requests a switch receives ([`decode`] into
//! [`Msg`]) and the replies and asynchronous messages it sends (the
//! `encode_*` functions). Versions 1.0 (with the Nicira extensions
//! ovs-ofctl uses: NXM flow mods and stats, flow-format and table-id
//! negotiation, packet-in format), 1.3, 1.4 and 1.5.
//!
//! Decoding is sans-IO and total: every input gives a message or the
//! [`ErrorKind`] the spec names for it.

use crate::action::{self, NX_VENDOR};
use crate::bytes::{str_fixed, Rd, Wr};
use crate::error::{ErrorKind, ONF_EXPERIMENTER};
use crate::header::{Header, Message, Version, HEADER_LEN};
use crate::of10;
use crate::oxm::{self, port_from_of11, port_to_of11, Flavor};
use flow::Match;
use ofp_types::actions::ofpp;
use ofp_types::{Action, FlowModCmd, FlowSpec, Instruction};

/// Message type numbers (1.3+ numbering; 1.0's are mapped by [`ty`]).
pub mod t {
    pub const HELLO: u8 = 0;
    pub const ERROR: u8 = 1;
    pub const ECHO_REQUEST: u8 = 2;
    pub const ECHO_REPLY: u8 = 3;
    pub const EXPERIMENTER: u8 = 4;
    pub const FEATURES_REQUEST: u8 = 5;
    pub const FEATURES_REPLY: u8 = 6;
    pub const GET_CONFIG_REQUEST: u8 = 7;
    pub const GET_CONFIG_REPLY: u8 = 8;
    pub const SET_CONFIG: u8 = 9;
    pub const PACKET_IN: u8 = 10;
    pub const FLOW_REMOVED: u8 = 11;
    pub const PORT_STATUS: u8 = 12;
    pub const PACKET_OUT: u8 = 13;
    pub const FLOW_MOD: u8 = 14;
    pub const GROUP_MOD: u8 = 15;
    pub const PORT_MOD: u8 = 16;
    pub const TABLE_MOD: u8 = 17;
    pub const MULTIPART_REQUEST: u8 = 18;
    pub const MULTIPART_REPLY: u8 = 19;
    pub const BARRIER_REQUEST: u8 = 20;
    pub const BARRIER_REPLY: u8 = 21;
    pub const QUEUE_GET_CONFIG_REQUEST: u8 = 22;
    pub const ROLE_REQUEST: u8 = 24;
    pub const ROLE_REPLY: u8 = 25;
    pub const GET_ASYNC_REQUEST: u8 = 26;
    pub const GET_ASYNC_REPLY: u8 = 27;
    pub const SET_ASYNC: u8 = 28;
    pub const METER_MOD: u8 = 29;
    pub const BUNDLE_CONTROL: u8 = 33;
    pub const BUNDLE_ADD_MESSAGE: u8 = 34;
}

/// The wire type of a (1.3-numbered) message type in version `v`.
pub fn ty(v: Version, t13: u8) -> u8 {
    if v != Version::Of10 {
        return t13;
    }
    match t13 {
        t::PORT_MOD => 15,
        t::MULTIPART_REQUEST => 16,
        t::MULTIPART_REPLY => 17,
        t::BARRIER_REQUEST => 18,
        t::BARRIER_REPLY => 19,
        x => x,
    }
}

/// 1.0 wire type -> 1.3 numbering (`None` for types 1.0 lacks).
fn from10(x: u8) -> Option<u8> {
    Some(match x {
        0..=14 => x,
        15 => t::PORT_MOD,
        16 => t::MULTIPART_REQUEST,
        17 => t::MULTIPART_REPLY,
        18 => t::BARRIER_REQUEST,
        19 => t::BARRIER_REPLY,
        20 => t::QUEUE_GET_CONFIG_REQUEST,
        _ => return None,
    })
}

/// Nicira message subtypes.
pub mod nxt {
    pub const ROLE_REQUEST: u32 = 10;
    pub const ROLE_REPLY: u32 = 11;
    pub const SET_FLOW_FORMAT: u32 = 12;
    pub const FLOW_MOD: u32 = 13;
    pub const FLOW_REMOVED: u32 = 14;
    pub const FLOW_MOD_TABLE_ID: u32 = 15;
    pub const SET_PACKET_IN_FORMAT: u32 = 16;
    pub const PACKET_IN: u32 = 17;
    pub const FLOW_AGE: u32 = 18;
    pub const SET_ASYNC_CONFIG: u32 = 19;
    pub const SET_CONTROLLER_ID: u32 = 20;
}

/// Multipart (stats) types.
pub mod mp {
    pub const DESC: u16 = 0;
    pub const FLOW: u16 = 1;
    pub const AGGREGATE: u16 = 2;
    pub const TABLE: u16 = 3;
    pub const PORT_STATS: u16 = 4;
    pub const QUEUE: u16 = 5;
    pub const GROUP: u16 = 6;
    pub const GROUP_DESC: u16 = 7;
    pub const GROUP_FEATURES: u16 = 8;
    pub const METER: u16 = 9;
    pub const METER_CONFIG: u16 = 10;
    pub const METER_FEATURES: u16 = 11;
    pub const TABLE_FEATURES: u16 = 12;
    pub const PORT_DESC: u16 = 13;
    pub const TABLE_DESC: u16 = 14;
    pub const EXPERIMENTER: u16 = 0xffff;
}

/// Flow-mod flags (1.3 values; 1.0 shares the first two).
pub mod ff {
    pub const SEND_FLOW_REM: u16 = 1;
    pub const CHECK_OVERLAP: u16 = 2;
    pub const RESET_COUNTS: u16 = 4;
    pub const NO_PKT_COUNTS: u16 = 8;
    pub const NO_BYT_COUNTS: u16 = 16;
}

/// "Any port" for out_port filters (our numbering).
pub const OFPP_ANY: u32 = ofpp::NONE;
pub const OFPG_ANY: u32 = 0xffff_ffff;
pub const OFPG_ALL: u32 = 0xffff_fffc;
pub const NO_BUFFER: u32 = 0xffff_ffff;

/// Per-connection state that changes how messages are read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ctx {
    pub version: Version,
    /// NXT_FLOW_MOD_TABLE_ID enabled: 1.0 flow_mod command's high byte is a table id.
    pub flow_mod_table_id: bool,
}

impl Ctx {
    pub fn new(version: Version) -> Ctx {
        Ctx { version, flow_mod_table_id: false }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowMod {
    pub cmd: FlowModCmd,
    pub spec: FlowSpec,
    pub buffer_id: u32,
    /// Our numbering; [`OFPP_ANY`] when absent.
    pub out_port: u32,
    pub out_group: u32,
    pub flags: u16,
    pub importance: u16,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StatsReq {
    Desc,
    /// Flow or aggregate stats; `table` 0xff means all.
    Flow {
        aggregate: bool,
        nx: bool,
        table: u8,
        out_port: u32,
        out_group: u32,
        cookie: u64,
        cookie_mask: u64,
        matched: Match,
    },
    Table,
    Port {
        port: u32,
    },
    PortDesc,
    Queue,
    Group {
        group: u32,
    },
    GroupDesc,
    GroupFeatures,
    Meter {
        meter: u32,
    },
    MeterConfig {
        meter: u32,
    },
    MeterFeatures,
    TableFeatures,
    TableDesc,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bucket {
    pub weight: u16,
    pub watch_port: u32,
    pub watch_group: u32,
    pub actions: Vec<Action>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupMod {
    /// 0 add, 1 modify, 2 delete.
    pub cmd: u16,
    /// 0 all, 1 select, 2 indirect, 3 fast_failover.
    pub group_type: u8,
    pub group_id: u32,
    pub buckets: Vec<Bucket>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Band {
    /// 1 drop, 2 dscp_remark.
    pub band_type: u16,
    pub rate: u32,
    pub burst_size: u32,
    pub prec_level: u8,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MeterMod {
    /// 0 add, 1 modify, 2 delete.
    pub cmd: u16,
    /// KBPS 1, PKTPS 2, BURST 4, STATS 8.
    pub flags: u16,
    pub meter_id: u32,
    pub bands: Vec<Band>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PacketOut {
    pub buffer_id: u32,
    /// Our numbering.
    pub in_port: u32,
    pub actions: Vec<Action>,
    pub data: Vec<u8>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortMod {
    pub port_no: u32,
    pub hw_addr: [u8; 6],
    pub config: u32,
    pub mask: u32,
}

/// Port config bits.
pub mod pc {
    pub const PORT_DOWN: u32 = 1;
    pub const NO_RECV: u32 = 4;
    pub const NO_FWD: u32 = 32;
    pub const NO_PACKET_IN: u32 = 64;
    /// 1.0 only.
    pub const NO_FLOOD: u32 = 16;
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Msg {
    Hello,
    Error {
        ty: u16,
        code: u16,
    },
    EchoRequest(Vec<u8>),
    EchoReply,
    FeaturesRequest,
    GetConfigRequest,
    SetConfig {
        flags: u16,
        miss_send_len: u16,
    },
    FlowMod(FlowMod),
    GroupMod(GroupMod),
    MeterMod(MeterMod),
    PacketOut(PacketOut),
    PortMod(PortMod),
    Stats(StatsReq),
    BarrierRequest,
    /// 1.2+ role request (or Nicira's in 1.0): role 0 nochange/other, 1 equal, 2 master, 3 slave.
    RoleRequest {
        role: u32,
        generation_id: u64,
        nx: bool,
    },
    GetAsyncRequest,
    SetAsync,
    SetFlowFormat(u32),
    FlowModTableId(bool),
    SetPacketInFormat(u32),
    SetControllerId(u16),
    FlowAge,
    QueueGetConfig,
    TableMod,
    BundleControl {
        bundle_id: u32,
        ctrl: u16,
        flags: u16,
    },
    BundleAdd {
        bundle_id: u32,
        flags: u16,
        inner: Message,
    },
    /// Replies and async messages a switch may receive from a peer switch-side tool.
    Reply(u8),
}

fn nx_role(r: u32) -> Result<u32, ErrorKind> {
    // Nicira roles: 0 other(equal), 1 master, 2 slave.
    match r {
        0 => Ok(1),
        1 => Ok(2),
        2 => Ok(3),
        _ => Err(ErrorKind::BadRole),
    }
}

fn flow_cmd(c: u8) -> Result<FlowModCmd, ErrorKind> {
    Ok(match c {
        0 => FlowModCmd::Add,
        1 => FlowModCmd::Modify,
        2 => FlowModCmd::ModifyStrict,
        3 => FlowModCmd::Delete,
        4 => FlowModCmd::DeleteStrict,
        _ => return Err(ErrorKind::BadCommand),
    })
}

fn spec(table: u8, priority: u16, cookie: u64, cookie_mask: u64, idle: u16, hard: u16, m: Match) -> FlowSpec {
    FlowSpec {
        table: if table == 0xff { 0 } else { table },
        priority: priority as u32,
        cookie,
        cookie_mask,
        idle_timeout: idle,
        hard_timeout: hard,
        matched: m,
        instructions: Vec::new(),
        has_actions: true,
        table_given: table != 0xff,
        flags: 0,
        importance: 0,
        out_port: None,
        out_group: None,
    }
}

fn port10(p: u16) -> u32 {
    p as u32
}

fn port11(p: u32) -> Result<u32, ErrorKind> {
    port_from_of11(p).ok_or(ErrorKind::BadRequestPort)
}

/// Decodes one framed message received on a connection in state `ctx`.
pub fn decode(ctx: &Ctx, m: &Message) -> Result<Msg, ErrorKind> {
    let v = ctx.version;
    let h = m.header;
    if h.msg_type != t::HELLO && h.msg_type != t::ERROR && h.version != v as u8 {
        return Err(ErrorKind::BadVersion);
    }
    let body = m.bytes.get(HEADER_LEN..).unwrap_or(&[]);
    let mut rd = Rd::new(body, ErrorKind::BadLen);
    let ty13 = if v == Version::Of10 { from10(h.msg_type).ok_or(ErrorKind::BadType)? } else { h.msg_type };
    Ok(match ty13 {
        t::HELLO => Msg::Hello,
        t::ERROR => Msg::Error { ty: rd.u16()?, code: rd.u16()? },
        t::ECHO_REQUEST => Msg::EchoRequest(body.to_vec()),
        t::ECHO_REPLY => Msg::EchoReply,
        t::FEATURES_REQUEST => Msg::FeaturesRequest,
        t::GET_CONFIG_REQUEST => Msg::GetConfigRequest,
        t::SET_CONFIG => Msg::SetConfig { flags: rd.u16()?, miss_send_len: rd.u16()? },
        t::BARRIER_REQUEST => Msg::BarrierRequest,
        t::FLOW_MOD => Msg::FlowMod(finish_flow_mod(decode_flow_mod(ctx, &mut rd)?)),
        t::PACKET_OUT => Msg::PacketOut(decode_packet_out(v, &mut rd)?),
        t::PORT_MOD => {
            let port_no = if v == Version::Of10 {
                port10(rd.u16()?)
            } else {
                let p = port11(rd.u32()?)?;
                rd.skip(4)?;
                p
            };
            let mut hw_addr = [0u8; 6];
            hw_addr.copy_from_slice(rd.bytes(6)?);
            if v != Version::Of10 {
                rd.skip(2)?;
            }
            Msg::PortMod(PortMod { port_no, hw_addr, config: rd.u32()?, mask: rd.u32()? })
        }
        t::MULTIPART_REQUEST => Msg::Stats(decode_stats(ctx, &mut rd)?),
        t::EXPERIMENTER => decode_vendor(ctx, &mut rd)?,
        t::QUEUE_GET_CONFIG_REQUEST => Msg::QueueGetConfig,
        t::GROUP_MOD if v != Version::Of10 => Msg::GroupMod(decode_group_mod(v, &mut rd)?),
        t::METER_MOD if v != Version::Of10 => Msg::MeterMod(decode_meter_mod(&mut rd)?),
        t::ROLE_REQUEST if v != Version::Of10 => {
            let role = rd.u32()?;
            rd.skip(4)?;
            let generation_id = rd.u64()?;
            if role > 3 {
                return Err(ErrorKind::BadRole);
            }
            Msg::RoleRequest { role, generation_id, nx: false }
        }
        t::GET_ASYNC_REQUEST if v != Version::Of10 => Msg::GetAsyncRequest,
        t::SET_ASYNC if v != Version::Of10 => Msg::SetAsync,
        t::TABLE_MOD if v != Version::Of10 => Msg::TableMod,
        t::BUNDLE_CONTROL if v >= Version::Of14 => {
            Msg::BundleControl { bundle_id: rd.u32()?, ctrl: rd.u16()?, flags: rd.u16()? }
        }
        t::BUNDLE_ADD_MESSAGE if v >= Version::Of14 => {
            let bundle_id = rd.u32()?;
            rd.skip(2)?;
            let flags = rd.u16()?;
            let inner = inner_message(&mut rd)?;
            Msg::BundleAdd { bundle_id, flags, inner }
        }
        t::FEATURES_REPLY
        | t::GET_CONFIG_REPLY
        | t::PACKET_IN
        | t::FLOW_REMOVED
        | t::PORT_STATUS
        | t::MULTIPART_REPLY
        | t::BARRIER_REPLY
        | t::ROLE_REPLY
        | t::GET_ASYNC_REPLY => Msg::Reply(ty13),
        _ => return Err(ErrorKind::BadType),
    })
}

fn inner_message(rd: &mut Rd) -> Result<Message, ErrorKind> {
    let hb = rd.bytes(HEADER_LEN).map_err(|_| ErrorKind::BundleBadType)?;
    let ih = Header::parse(hb).ok_or(ErrorKind::BadLen)?;
    let len = ih.length as usize;
    if len < HEADER_LEN {
        return Err(ErrorKind::BadLen);
    }
    let rest = rd.bytes(len - HEADER_LEN).map_err(|_| ErrorKind::BadLen)?;
    let mut bytes = hb.to_vec();
    bytes.extend_from_slice(rest);
    Ok(Message { header: ih, bytes })
}

fn decode_vendor(ctx: &Ctx, rd: &mut Rd) -> Result<Msg, ErrorKind> {
    let vendor = rd.u32()?;
    if vendor == ONF_EXPERIMENTER {
        return Err(ErrorKind::BadExpType);
    }
    if vendor != NX_VENDOR {
        return Err(ErrorKind::BadExperimenter);
    }
    let sub = rd.u32()?;
    Ok(match sub {
        nxt::SET_FLOW_FORMAT => {
            let f = rd.u32()?;
            if f != 0 && f != 2 {
                return Err(ErrorKind::BadRequestEperm);
            }
            Msg::SetFlowFormat(f)
        }
        nxt::FLOW_MOD_TABLE_ID => Msg::FlowModTableId(rd.u8()? != 0),
        nxt::SET_PACKET_IN_FORMAT => {
            let f = rd.u32()?;
            if f > 2 {
                return Err(ErrorKind::BadRequestEperm);
            }
            Msg::SetPacketInFormat(f)
        }
        nxt::FLOW_MOD => Msg::FlowMod(finish_flow_mod(decode_nx_flow_mod(ctx, rd)?)),
        nxt::ROLE_REQUEST => Msg::RoleRequest { role: nx_role(rd.u32()?)?, generation_id: u64::MAX, nx: true },
        nxt::SET_CONTROLLER_ID => {
            rd.skip(6)?;
            Msg::SetControllerId(rd.u16()?)
        }
        nxt::FLOW_AGE => Msg::FlowAge,
        nxt::SET_ASYNC_CONFIG => Msg::SetAsync,
        _ => return Err(ErrorKind::BadExpType),
    })
}

/// Copies the wire-level filters and flags into the flow spec.
fn finish_flow_mod(mut fm: FlowMod) -> FlowMod {
    fm.spec.flags = fm.flags;
    fm.spec.importance = fm.importance;
    fm.spec.out_port = (fm.out_port != OFPP_ANY && fm.cmd != FlowModCmd::Add).then_some(fm.out_port);
    fm.spec.out_group = (fm.out_group != OFPG_ANY && fm.cmd != FlowModCmd::Add).then_some(fm.out_group);
    fm
}

fn decode_flow_mod(ctx: &Ctx, rd: &mut Rd) -> Result<FlowMod, ErrorKind> {
    let v = ctx.version;
    if v == Version::Of10 {
        let m = of10::decode(rd)?;
        let cookie = rd.u64()?;
        let command = rd.u16()?;
        let (table, cmd) =
            if ctx.flow_mod_table_id { ((command >> 8) as u8, command as u8) } else { (0xff, command as u8) };
        if !ctx.flow_mod_table_id && command > 0xff {
            return Err(ErrorKind::BadCommand);
        }
        let cmd = flow_cmd(cmd)?;
        let idle = rd.u16()?;
        let hard = rd.u16()?;
        let priority = rd.u16()?;
        let buffer_id = rd.u32()?;
        let out_port = port10(rd.u16()?);
        let flags = rd.u16()?;
        let mut s = spec(table, priority, cookie, if cmd == FlowModCmd::Add { 0 } else { u64::MAX }, idle, hard, m);
        if matches!(cmd, FlowModCmd::Modify | FlowModCmd::Delete) {
            // 1.0 modify/delete without a cookie mask match any cookie.
            s.cookie_mask = 0;
        }
        s.instructions = action::decode_instructions(v, rd.rest())?;
        return Ok(FlowMod { cmd, spec: s, buffer_id, out_port, out_group: OFPG_ANY, flags: flags & 3, importance: 0 });
    }
    let cookie = rd.u64()?;
    let cookie_mask = rd.u64()?;
    let table = rd.u8()?;
    let cmd = flow_cmd(rd.u8()?)?;
    let idle = rd.u16()?;
    let hard = rd.u16()?;
    let priority = rd.u16()?;
    let buffer_id = rd.u32()?;
    let out_port_raw = rd.u32()?;
    let out_port = if out_port_raw == 0xffff_ffff { OFPP_ANY } else { port11(out_port_raw)? };
    let out_group = rd.u32()?;
    let flags = rd.u16()?;
    let importance = rd.u16()?;
    let m = oxm::decode_ofp_match(rd)?;
    if table == 0xff && cmd == FlowModCmd::Add {
        return Err(ErrorKind::BadTableId);
    }
    if table > 254 && table != 0xff {
        return Err(ErrorKind::BadTableId);
    }
    let mut s = spec(table, priority, cookie, cookie_mask, idle, hard, m);
    if cmd == FlowModCmd::Add {
        s.cookie_mask = 0;
    }
    s.instructions = action::decode_instructions(v, rd.rest())?;
    Ok(FlowMod {
        cmd,
        spec: s,
        buffer_id,
        out_port,
        out_group,
        flags,
        importance: if v >= Version::Of14 { importance } else { 0 },
    })
}

fn decode_nx_flow_mod(ctx: &Ctx, rd: &mut Rd) -> Result<FlowMod, ErrorKind> {
    let cookie = rd.u64()?;
    let command = rd.u16()?;
    let (table, cmd) =
        if ctx.flow_mod_table_id { ((command >> 8) as u8, command as u8) } else { (0xff, command as u8) };
    let cmd = flow_cmd(cmd)?;
    let idle = rd.u16()?;
    let hard = rd.u16()?;
    let priority = rd.u16()?;
    let buffer_id = rd.u32()?;
    let out_port = port10(rd.u16()?);
    let flags = rd.u16()?;
    let match_len = rd.u16()? as usize;
    rd.skip(6)?;
    let mb = rd.bytes(match_len).map_err(|_| ErrorKind::BadMatchLen)?;
    rd.skip((match_len.div_ceil(8) * 8 - match_len).min(rd.len()))?;
    let d = oxm::decode(mb)?;
    let (ck, cm) = match (cmd, d.cookie) {
        (FlowModCmd::Add, _) => (cookie, 0),
        (_, Some((c, m))) => (c, m),
        (FlowModCmd::ModifyStrict | FlowModCmd::DeleteStrict, None) => (cookie, 0),
        (_, None) => (cookie, 0),
    };
    let mut s = spec(table, priority, ck, cm, idle, hard, d.matched);
    if cmd == FlowModCmd::Add {
        s.cookie = cookie;
    }
    s.instructions = action::decode_instructions(Version::Of10, rd.rest())?;
    Ok(FlowMod { cmd, spec: s, buffer_id, out_port, out_group: OFPG_ANY, flags: flags & 7, importance: 0 })
}

fn decode_packet_out(v: Version, rd: &mut Rd) -> Result<PacketOut, ErrorKind> {
    let buffer_id = rd.u32()?;
    let (in_port, alen) = match v {
        Version::Of10 => {
            let p = port10(rd.u16()?);
            (p, rd.u16()? as usize)
        }
        Version::Of13 | Version::Of14 => {
            let p = port11(rd.u32()?)?;
            let l = rd.u16()? as usize;
            rd.skip(6)?;
            (p, l)
        }
        Version::Of15 => {
            let l = rd.u16()? as usize;
            rd.skip(2)?;
            let m = oxm::decode_ofp_match(rd)?;
            let f = flow::fields::by_name("in_port").expect("in_port");
            let p = if f.get(&m.mask) != 0 { f.get(&m.key) as u32 } else { ofpp::CONTROLLER };
            (p, l)
        }
    };
    let ab = rd.bytes(alen).map_err(|_| ErrorKind::BadLen)?;
    let (actions, _) = action::decode_actions(v, ab)?;
    let in_port = if in_port == 0 { return Err(ErrorKind::BadRequestPort) } else { in_port };
    Ok(PacketOut { buffer_id, in_port, actions, data: rd.rest().to_vec() })
}

fn decode_group_mod(v: Version, rd: &mut Rd) -> Result<GroupMod, ErrorKind> {
    let cmd = rd.u16()?;
    let group_type = rd.u8()?;
    rd.skip(1)?;
    let group_id = rd.u32()?;
    if cmd > 2 {
        return Err(ErrorKind::BadGroupCommand);
    }
    if group_type > 3 {
        return Err(ErrorKind::BadGroupType);
    }
    let mut buckets = Vec::new();
    if v >= Version::Of15 {
        let blen = rd.u16()? as usize;
        rd.skip(6)?; // pad, command_bucket_id
        let mut br = rd.sub(blen.min(rd.len()), ErrorKind::BadBucket)?;
        while !br.is_empty() {
            let len = br.u16()? as usize;
            let alen = br.u16()? as usize;
            let _id = br.u32()?;
            if len < 8 + alen {
                return Err(ErrorKind::BadBucket);
            }
            let ab = br.bytes(alen)?;
            let (actions, _) = action::decode_actions(v, ab)?;
            let mut props = br.sub(len - 8 - alen, ErrorKind::BadBucket)?;
            let (mut weight, mut watch_port, mut watch_group) = (0, OFPP_ANY, OFPG_ANY);
            while !props.is_empty() {
                let pt = props.u16()?;
                let pl = props.u16()? as usize;
                if pl < 4 {
                    return Err(ErrorKind::BadBucket);
                }
                let mut p = props.sub(pl - 4, ErrorKind::BadBucket)?;
                match pt {
                    0 => {
                        weight = p.u16()?;
                    }
                    1 => watch_port = port11(p.u32()?)?,
                    2 => watch_group = p.u32()?,
                    _ => {}
                }
            }
            buckets.push(Bucket { weight, watch_port, watch_group, actions });
        }
        return Ok(GroupMod { cmd, group_type, group_id, buckets });
    }
    while !rd.is_empty() {
        let len = rd.u16()? as usize;
        if len < 16 || len - 2 > rd.len() {
            return Err(ErrorKind::BadBucket);
        }
        let mut b = rd.sub(len - 2, ErrorKind::BadBucket)?;
        let weight = b.u16()?;
        let wp = b.u32()?;
        let watch_port = if wp == 0xffff_ffff { OFPP_ANY } else { port11(wp).map_err(|_| ErrorKind::BadWatch)? };
        let watch_group = b.u32()?;
        b.skip(4)?;
        let (actions, _) = action::decode_actions(v, b.rest())?;
        buckets.push(Bucket { weight, watch_port, watch_group, actions });
    }
    Ok(GroupMod { cmd, group_type, group_id, buckets })
}

fn decode_meter_mod(rd: &mut Rd) -> Result<MeterMod, ErrorKind> {
    let cmd = rd.u16()?;
    let flags = rd.u16()?;
    let meter_id = rd.u32()?;
    if cmd > 2 {
        return Err(ErrorKind::BadMeterCommand);
    }
    let mut bands = Vec::new();
    while !rd.is_empty() {
        let band_type = rd.u16()?;
        let len = rd.u16()? as usize;
        if len < 16 || len - 4 > rd.len() {
            return Err(ErrorKind::BadBand);
        }
        let mut b = rd.sub(len - 4, ErrorKind::BadBand)?;
        let rate = b.u32()?;
        let burst_size = b.u32()?;
        let prec_level = if band_type == 2 { b.u8()? } else { 0 };
        if band_type != 1 && band_type != 2 {
            return Err(ErrorKind::BadBand);
        }
        bands.push(Band { band_type, rate, burst_size, prec_level });
    }
    Ok(MeterMod { cmd, flags, meter_id, bands })
}

fn decode_flow_stats_req(v: Version, rd: &mut Rd, aggregate: bool) -> Result<StatsReq, ErrorKind> {
    if v == Version::Of10 {
        let m = of10::decode(rd)?;
        let table = rd.u8()?;
        rd.skip(1)?;
        let out_port = port10(rd.u16()?);
        return Ok(StatsReq::Flow {
            aggregate,
            nx: false,
            table,
            out_port,
            out_group: OFPG_ANY,
            cookie: 0,
            cookie_mask: 0,
            matched: m,
        });
    }
    let table = rd.u8()?;
    rd.skip(3)?;
    let op = rd.u32()?;
    let out_port = if op == 0xffff_ffff { OFPP_ANY } else { port11(op)? };
    let out_group = rd.u32()?;
    rd.skip(4)?;
    let cookie = rd.u64()?;
    let cookie_mask = rd.u64()?;
    let m = oxm::decode_ofp_match(rd)?;
    Ok(StatsReq::Flow { aggregate, nx: false, table, out_port, out_group, cookie, cookie_mask, matched: m })
}

fn decode_stats(ctx: &Ctx, rd: &mut Rd) -> Result<StatsReq, ErrorKind> {
    let v = ctx.version;
    let st = rd.u16()?;
    let _flags = rd.u16()?;
    if v != Version::Of10 {
        rd.skip(4)?;
    }
    let port_any = |p: u32| if p == 0xffff_ffff { Ok(OFPP_ANY) } else { port11(p) };
    Ok(match st {
        mp::DESC => StatsReq::Desc,
        mp::FLOW => decode_flow_stats_req(v, rd, false)?,
        mp::AGGREGATE => decode_flow_stats_req(v, rd, true)?,
        mp::TABLE => StatsReq::Table,
        mp::PORT_STATS => {
            let port = if v == Version::Of10 { port10(rd.u16()?) } else { port_any(rd.u32()?)? };
            StatsReq::Port { port }
        }
        mp::QUEUE => StatsReq::Queue,
        mp::PORT_DESC => StatsReq::PortDesc,
        mp::GROUP if v != Version::Of10 => StatsReq::Group { group: rd.u32()? },
        mp::GROUP_DESC if v != Version::Of10 => StatsReq::GroupDesc,
        mp::GROUP_FEATURES if v != Version::Of10 => StatsReq::GroupFeatures,
        mp::METER if v != Version::Of10 => StatsReq::Meter { meter: rd.u32()? },
        mp::METER_CONFIG if v != Version::Of10 => StatsReq::MeterConfig { meter: rd.u32()? },
        mp::METER_FEATURES if v != Version::Of10 => StatsReq::MeterFeatures,
        mp::TABLE_FEATURES if v != Version::Of10 => StatsReq::TableFeatures,
        mp::TABLE_DESC if v >= Version::Of14 => StatsReq::TableDesc,
        mp::EXPERIMENTER => {
            let vendor = rd.u32()?;
            if vendor != NX_VENDOR {
                return Err(ErrorKind::BadExperimenter);
            }
            let sub = rd.u32()?;
            if v == Version::Of10 {
                rd.skip(4)?;
            }
            if sub > 1 {
                return Err(ErrorKind::BadExpType);
            }
            // NXST_FLOW / NXST_AGGREGATE request.
            let out_port = port10(rd.u16()?);
            let match_len = rd.u16()? as usize;
            let table = rd.u8()?;
            rd.skip(3)?;
            let mb = rd.bytes(match_len).map_err(|_| ErrorKind::BadMatchLen)?;
            let d = oxm::decode(mb)?;
            let (cookie, cookie_mask) = d.cookie.unwrap_or((0, 0));
            StatsReq::Flow {
                aggregate: sub == 1,
                nx: true,
                table,
                out_port,
                out_group: OFPG_ANY,
                cookie,
                cookie_mask,
                matched: d.matched,
            }
        }
        _ => return Err(ErrorKind::BadMultipart),
    })
}

// ---------------------------------------------------------------------
// Encoding.

/// Starts a message: header with a length to patch by [`end`].
pub fn begin(v: Version, t13: u8, xid: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    Header { version: v as u8, msg_type: ty(v, t13), length: 0, xid }.emit(&mut out);
    out
}

pub fn end(mut out: Vec<u8>) -> Vec<u8> {
    out.patch_len(2, 0);
    out
}

pub fn encode_simple(v: Version, t13: u8, xid: u32, body: &[u8]) -> Vec<u8> {
    let mut out = begin(v, t13, xid);
    out.extend_from_slice(body);
    end(out)
}

/// A Nicira vendor message with `body` after the subtype.
pub fn encode_nx(v: Version, xid: u32, sub: u32, body: &[u8]) -> Vec<u8> {
    let mut out = begin(v, t::EXPERIMENTER, xid);
    out.u32(NX_VENDOR);
    out.u32(sub);
    out.extend_from_slice(body);
    end(out)
}

/// One port as the switch describes it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PortDesc {
    pub port_no: u32,
    pub hw_addr: [u8; 6],
    pub name: String,
    pub config: u32,
    pub state: u32,
    pub curr: u32,
    pub advertised: u32,
    pub supported: u32,
    pub peer: u32,
    pub curr_speed: u32,
    pub max_speed: u32,
}

/// Port state bits.
pub const PS_LINK_DOWN: u32 = 1;
pub const PS_LIVE: u32 = 4;

pub fn encode_port(v: Version, p: &PortDesc, out: &mut Vec<u8>) {
    match v {
        Version::Of10 => {
            // Feature bits are given in 1.3 numbering; 1.0 has COPPER at
            // bit 7 (1.3: bit 11) and nothing above 10 Gb/s.
            let f10 = |f: u32| (f & 0x7f) | if f & (1 << 11) != 0 { 1 << 7 } else { 0 };
            out.u16(p.port_no as u16);
            out.extend_from_slice(&p.hw_addr);
            out.str_fixed(&p.name, 16);
            out.u32(p.config);
            out.u32(p.state & 1);
            out.u32(f10(p.curr));
            out.u32(p.advertised);
            out.u32(p.supported);
            out.u32(p.peer);
        }
        Version::Of13 => {
            out.u32(port_to_of11(p.port_no));
            out.zeros(4);
            out.extend_from_slice(&p.hw_addr);
            out.zeros(2);
            out.str_fixed(&p.name, 16);
            out.u32(p.config);
            out.u32(p.state);
            out.u32(p.curr);
            out.u32(p.advertised);
            out.u32(p.supported);
            out.u32(p.peer);
            out.u32(p.curr_speed);
            out.u32(p.max_speed);
        }
        Version::Of14 | Version::Of15 => {
            let start = out.len();
            out.u32(port_to_of11(p.port_no));
            out.u16(0);
            out.zeros(2);
            out.extend_from_slice(&p.hw_addr);
            out.zeros(2);
            out.str_fixed(&p.name, 16);
            out.u32(p.config);
            out.u32(p.state);
            // Ethernet property.
            out.u16(0);
            out.u16(32);
            out.zeros(4);
            out.u32(p.curr);
            out.u32(p.advertised);
            out.u32(p.supported);
            out.u32(p.peer);
            out.u32(p.curr_speed);
            out.u32(p.max_speed);
            out.patch_len(start + 4, start);
        }
    }
}

/// FEATURES_REPLY (1.0 includes the ports).
pub fn encode_features_reply(v: Version, xid: u32, dpid: u64, n_tables: u8, ports: &[PortDesc]) -> Vec<u8> {
    let mut out = begin(v, t::FEATURES_REPLY, xid);
    out.u64(dpid);
    out.u32(0); // n_buffers: no buffering
    out.u8(n_tables);
    if v == Version::Of10 {
        out.zeros(3);
        // capabilities: FLOW_STATS, TABLE_STATS, PORT_STATS, ARP_MATCH_IP
        out.u32(1 | 2 | 4 | 0x80);
        // actions: every 1.0 action but ENQUEUE... all of 0-11
        out.u32(0xfff);
        for p in ports {
            encode_port(v, p, &mut out);
        }
    } else {
        out.u8(0); // auxiliary_id
        out.zeros(2);
        // FLOW_STATS, TABLE_STATS, PORT_STATS, GROUP_STATS
        out.u32(1 | 2 | 4 | 8);
        out.u32(0);
    }
    end(out)
}

pub fn encode_get_config_reply(v: Version, xid: u32, flags: u16, miss_send_len: u16) -> Vec<u8> {
    let mut out = begin(v, t::GET_CONFIG_REPLY, xid);
    out.u16(flags);
    out.u16(miss_send_len);
    end(out)
}

/// A multipart (stats) reply carrying `items`, split into messages of at
/// most 64 kB with the MORE flag on all but the last. `nx` is the Nicira
/// stats subtype for NXST replies.
pub fn encode_multipart(v: Version, xid: u32, st: u16, nx: Option<u32>, items: &[Vec<u8>]) -> Vec<Vec<u8>> {
    const LIMIT: usize = 65000;
    let mut msgs = Vec::new();
    let head = |more: bool| {
        let mut out = begin(v, t::MULTIPART_REPLY, xid);
        out.u16(st);
        out.u16(more as u16);
        if v != Version::Of10 {
            out.zeros(4);
        }
        if let Some(sub) = nx {
            out.u32(NX_VENDOR);
            out.u32(sub);
            if v == Version::Of10 {
                out.zeros(4);
            }
        }
        out
    };
    let mut cur = head(false);
    let base = cur.len();
    for it in items {
        if cur.len() > base && cur.len() + it.len() > LIMIT {
            cur[10..12].copy_from_slice(&1u16.to_be_bytes());
            msgs.push(end(std::mem::replace(&mut cur, head(false))));
        }
        cur.extend_from_slice(it);
    }
    msgs.push(end(cur));
    msgs
}

pub fn encode_desc(mfr: &str, hw: &str, sw: &str, serial: &str, dp: &str) -> Vec<u8> {
    let mut out = Vec::new();
    out.str_fixed(mfr, 256);
    out.str_fixed(hw, 256);
    out.str_fixed(sw, 256);
    out.str_fixed(serial, 32);
    out.str_fixed(dp, 256);
    out
}

/// One flow's statistics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowStats {
    pub table: u8,
    pub priority: u16,
    pub idle_timeout: u16,
    pub hard_timeout: u16,
    pub flags: u16,
    pub importance: u16,
    pub cookie: u64,
    pub packets: u64,
    pub bytes: u64,
    pub duration_ms: u64,
    pub idle_age_s: u16,
    pub hard_age_s: u16,
    pub matched: Match,
    pub instructions: Vec<Instruction>,
}

/// One flow stats entry: 1.0 plain, NXST (Nicira, NXM match), 1.3/1.4, or
/// 1.5 (OXS statistics).
pub fn encode_flow_stats(v: Version, nx: bool, f: &FlowStats) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    let (sec, nsec) = ((f.duration_ms / 1000) as u32, ((f.duration_ms % 1000) * 1_000_000) as u32);
    if nx {
        out.u16(0);
        out.u8(f.table);
        out.u8(0);
        out.u32(sec);
        out.u32(nsec);
        out.u16(f.priority);
        out.u16(f.idle_timeout);
        out.u16(f.hard_timeout);
        let ml_at = out.len();
        out.u16(0);
        out.u16(f.idle_age_s.saturating_add(1));
        out.u16(f.hard_age_s.saturating_add(1));
        out.u64(f.cookie);
        out.u64(f.packets);
        out.u64(f.bytes);
        let ms = out.len();
        oxm::encode(&f.matched, Flavor::Nxm, &mut out);
        let ml = out.len() - ms;
        out[ml_at..ml_at + 2].copy_from_slice(&(ml as u16).to_be_bytes());
        out.pad8();
        action::encode_instructions(Version::Of10, &f.instructions, &mut out);
        out.patch_len(0, 0);
        return out;
    }
    match v {
        Version::Of10 => {
            out.u16(0);
            out.u8(f.table);
            out.u8(0);
            of10::encode(&f.matched, &mut out);
            out.u32(sec);
            out.u32(nsec);
            out.u16(f.priority);
            out.u16(f.idle_timeout);
            out.u16(f.hard_timeout);
            out.zeros(6);
            out.u64(f.cookie);
            out.u64(f.packets);
            out.u64(f.bytes);
            action::encode_instructions(v, &f.instructions, &mut out);
        }
        Version::Of13 | Version::Of14 => {
            out.u16(0);
            out.u8(f.table);
            out.u8(0);
            out.u32(sec);
            out.u32(nsec);
            out.u16(f.priority);
            out.u16(f.idle_timeout);
            out.u16(f.hard_timeout);
            out.u16(f.flags);
            if v == Version::Of14 {
                out.u16(f.importance);
                out.zeros(2);
            } else {
                out.zeros(4);
            }
            out.u64(f.cookie);
            out.u64(f.packets);
            out.u64(f.bytes);
            oxm::encode_ofp_match(&f.matched, &mut out);
            action::encode_instructions(v, &f.instructions, &mut out);
        }
        Version::Of15 => {
            out.u16(0);
            out.zeros(2);
            out.u8(f.table);
            out.u8(0); // reason: stats request
            out.u16(f.priority);
            out.u16(f.idle_timeout);
            out.u16(f.hard_timeout);
            out.u16(f.flags);
            out.u16(f.importance);
            out.u64(f.cookie);
            oxm::encode_ofp_match(&f.matched, &mut out);
            encode_oxs(&mut out, sec, nsec, Some(f.idle_age_s as u32), f.packets, f.bytes, None);
            action::encode_instructions(v, &f.instructions, &mut out);
        }
    }
    out.patch_len(0, 0);
    out
}

/// OpenFlow 1.5 `ofp_stats` with OXS entries (duration, idle time,
/// packet/byte counts, flow count).
fn encode_oxs(out: &mut Vec<u8>, sec: u32, nsec: u32, idle_s: Option<u32>, pk: u64, by: u64, flows: Option<u32>) {
    let start = out.len();
    out.u16(0); // reserved
    out.u16(0); // length
    let oxs = |out: &mut Vec<u8>, field: u8, len: u8| out.u32((0x8002u32 << 16) | ((field as u32) << 9) | len as u32);
    if flows.is_none() {
        oxs(out, 0, 8);
        out.u32(sec);
        out.u32(nsec);
        if let Some(i) = idle_s {
            oxs(out, 1, 8);
            out.u32(i);
            out.u32(0);
        }
    }
    if let Some(n) = flows {
        oxs(out, 3, 4);
        out.u32(n);
    }
    oxs(out, 4, 8);
    out.u64(pk);
    oxs(out, 5, 8);
    out.u64(by);
    out.patch_len(start + 2, start);
    out.pad8();
}

pub fn encode_aggregate(v: Version, packets: u64, bytes: u64, flows: u32) -> Vec<u8> {
    let mut out = Vec::new();
    if v == Version::Of15 {
        encode_oxs(&mut out, 0, 0, None, packets, bytes, Some(flows));
        return out;
    }
    out.u64(packets);
    out.u64(bytes);
    out.u32(flows);
    out.zeros(4);
    out
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PortStats {
    pub port_no: u32,
    pub rx_packets: u64,
    pub tx_packets: u64,
    pub rx_bytes: u64,
    pub tx_bytes: u64,
    pub rx_dropped: u64,
    pub tx_dropped: u64,
    pub rx_errors: u64,
    pub tx_errors: u64,
    pub duration_ms: u64,
}

pub fn encode_port_stats(v: Version, s: &PortStats) -> Vec<u8> {
    let mut out = Vec::with_capacity(112);
    let (sec, nsec) = ((s.duration_ms / 1000) as u32, ((s.duration_ms % 1000) * 1_000_000) as u32);
    let counters = |out: &mut Vec<u8>, ext: bool| {
        for c in
            [s.rx_packets, s.tx_packets, s.rx_bytes, s.tx_bytes, s.rx_dropped, s.tx_dropped, s.rx_errors, s.tx_errors]
        {
            out.u64(c);
        }
        if ext {
            for _ in 0..4 {
                out.u64(0); // frame, overrun, crc, collisions
            }
        }
    };
    match v {
        Version::Of10 => {
            out.u16(s.port_no as u16);
            out.zeros(6);
            counters(&mut out, true);
        }
        Version::Of13 => {
            out.u32(port_to_of11(s.port_no));
            out.zeros(4);
            counters(&mut out, true);
            out.u32(sec);
            out.u32(nsec);
        }
        Version::Of14 | Version::Of15 => {
            out.u16(0);
            out.zeros(2);
            out.u32(port_to_of11(s.port_no));
            out.u32(sec);
            out.u32(nsec);
            counters(&mut out, false);
            // Ethernet property: frame_err, over_err, crc_err, collisions.
            out.u16(0);
            out.u16(40);
            out.zeros(4);
            for _ in 0..4 {
                out.u64(0);
            }
            out.patch_len(0, 0);
        }
    }
    out
}

/// One table's statistics.
pub fn encode_table_stats(v: Version, table: u8, active: u32, lookups: u64, matched: u64) -> Vec<u8> {
    let mut out = Vec::new();
    out.u8(table);
    out.zeros(3);
    if v == Version::Of10 {
        out.str_fixed(&format!("table{table}"), 32);
        out.u32(0x3fffff); // wildcards: all
        out.u32(1_000_000);
    }
    out.u32(active);
    out.u64(lookups);
    out.u64(matched);
    out
}

/// PACKET_IN. `format` is the Nicira packet-in format (0 standard, 1
/// NXT_PACKET_IN); 1.0 standard packet-ins carry only the in_port.
#[allow(clippy::too_many_arguments, reason = "one field per wire field")]
pub fn encode_packet_in(
    v: Version,
    xid: u32,
    reason: u8,
    table: u8,
    cookie: u64,
    in_port: u32,
    total_len: u16,
    data: &[u8],
) -> Vec<u8> {
    if v == Version::Of10 {
        let mut out = begin(v, t::PACKET_IN, xid);
        out.u32(NO_BUFFER);
        out.u16(total_len);
        out.u16(in_port as u16);
        out.u8(reason);
        out.u8(0);
        out.extend_from_slice(data);
        return end(out);
    }
    let mut out = begin(v, t::PACKET_IN, xid);
    out.u32(NO_BUFFER);
    out.u16(total_len);
    out.u8(reason);
    out.u8(table);
    out.u64(cookie);
    let mut m = Match::CATCHALL;
    if let Some(f) = flow::fields::by_name("in_port") {
        m.set_field(f, in_port as u128);
    }
    oxm::encode_ofp_match(&m, &mut out);
    out.zeros(2);
    out.extend_from_slice(data);
    end(out)
}

/// FLOW_REMOVED (reason: 0 idle timeout, 1 hard timeout, 2 delete, 3 group delete, 5 meter delete).
pub fn encode_flow_removed(v: Version, xid: u32, reason: u8, f: &FlowStats, nx: bool) -> Vec<u8> {
    let (sec, nsec) = ((f.duration_ms / 1000) as u32, ((f.duration_ms % 1000) * 1_000_000) as u32);
    if v == Version::Of10 && nx {
        let mut out = begin(v, t::EXPERIMENTER, xid);
        out.u32(NX_VENDOR);
        out.u32(nxt::FLOW_REMOVED);
        out.u64(f.cookie);
        out.u16(f.priority);
        out.u8(reason);
        out.u8(f.table);
        out.u32(sec);
        out.u32(nsec);
        out.u16(f.idle_timeout);
        let ml_at = out.len();
        out.u16(0);
        out.u64(f.packets);
        out.u64(f.bytes);
        let ms = out.len();
        oxm::encode(&f.matched, Flavor::Nxm, &mut out);
        let ml = out.len() - ms;
        out[ml_at..ml_at + 2].copy_from_slice(&(ml as u16).to_be_bytes());
        out.pad8();
        return end(out);
    }
    let mut out = begin(v, t::FLOW_REMOVED, xid);
    if v == Version::Of10 {
        of10::encode(&f.matched, &mut out);
        out.u64(f.cookie);
        out.u16(f.priority);
        out.u8(reason);
        out.u8(0);
        out.u32(sec);
        out.u32(nsec);
        out.u16(f.idle_timeout);
        out.zeros(2);
        out.u64(f.packets);
        out.u64(f.bytes);
        return end(out);
    }
    if v == Version::Of15 {
        out.u8(f.table);
        out.u8(reason);
        out.u16(f.priority);
        out.u16(f.idle_timeout);
        out.u16(f.hard_timeout);
        out.u64(f.cookie);
        oxm::encode_ofp_match(&f.matched, &mut out);
        encode_oxs(&mut out, sec, nsec, None, f.packets, f.bytes, None);
        return end(out);
    }
    out.u64(f.cookie);
    out.u16(f.priority);
    out.u8(reason);
    out.u8(f.table);
    out.u32(sec);
    out.u32(nsec);
    out.u16(f.idle_timeout);
    out.u16(f.hard_timeout);
    out.u64(f.packets);
    out.u64(f.bytes);
    oxm::encode_ofp_match(&f.matched, &mut out);
    end(out)
}

/// PORT_STATUS (reason: 0 add, 1 delete, 2 modify).
pub fn encode_port_status(v: Version, reason: u8, p: &PortDesc) -> Vec<u8> {
    let mut out = begin(v, t::PORT_STATUS, 0);
    out.u8(reason);
    out.zeros(7);
    encode_port(v, p, &mut out);
    end(out)
}

/// ROLE_REPLY (1.2+) or the Nicira role reply (1.0).
pub fn encode_role_reply(v: Version, xid: u32, role: u32, generation_id: u64, nx: bool) -> Vec<u8> {
    if nx {
        let nxr: u32 = match role {
            2 => 1,
            3 => 2,
            _ => 0,
        };
        return encode_nx(v, xid, nxt::ROLE_REPLY, &nxr.to_be_bytes());
    }
    let mut out = begin(v, t::ROLE_REPLY, xid);
    out.u32(role);
    out.zeros(4);
    out.u64(generation_id);
    end(out)
}

/// BUNDLE_CONTROL reply.
pub fn encode_bundle_reply(v: Version, xid: u32, bundle_id: u32, ctrl: u16, flags: u16) -> Vec<u8> {
    let mut out = begin(v, t::BUNDLE_CONTROL, xid);
    out.u32(bundle_id);
    out.u16(ctrl);
    out.u16(flags);
    end(out)
}

/// Group stats entry.
pub fn encode_group_stats(
    v: Version,
    group_id: u32,
    ref_count: u32,
    packets: u64,
    bytes: u64,
    duration_ms: u64,
    buckets: &[(u64, u64)],
) -> Vec<u8> {
    let mut out = Vec::new();
    out.u16(0);
    out.zeros(2);
    out.u32(group_id);
    out.u32(ref_count);
    out.zeros(4);
    out.u64(packets);
    out.u64(bytes);
    let _ = v;
    out.u32((duration_ms / 1000) as u32);
    out.u32(((duration_ms % 1000) * 1_000_000) as u32);
    for (p, b) in buckets {
        out.u64(*p);
        out.u64(*b);
    }
    out.patch_len(0, 0);
    out
}

/// Group description entry.
pub fn encode_group_desc(v: Version, gm: &GroupMod) -> Vec<u8> {
    let mut out = Vec::new();
    out.u16(0);
    out.u8(gm.group_type);
    out.u8(0);
    out.u32(gm.group_id);
    if v >= Version::Of15 {
        let bl_at = out.len();
        out.u16(0);
        out.zeros(6);
        let bs = out.len();
        for (i, b) in gm.buckets.iter().enumerate() {
            let s = out.len();
            out.u16(0);
            let al_at = out.len();
            out.u16(0);
            out.u32(i as u32);
            let a0 = out.len();
            action::encode_actions(v, &b.actions, &mut out);
            let al = out.len() - a0;
            out[al_at..al_at + 2].copy_from_slice(&(al as u16).to_be_bytes());
            if gm.group_type == 1 {
                out.u16(0);
                out.u16(8);
                out.u16(b.weight);
                out.zeros(2);
            }
            if b.watch_port != OFPP_ANY {
                out.u16(1);
                out.u16(8);
                out.u32(port_to_of11(b.watch_port));
            }
            if b.watch_group != OFPG_ANY {
                out.u16(2);
                out.u16(8);
                out.u32(b.watch_group);
            }
            out.patch_len(s, s);
        }
        let bl = out.len() - bs;
        out[bl_at..bl_at + 2].copy_from_slice(&(bl as u16).to_be_bytes());
        out.patch_len(0, 0);
        return out;
    }
    for b in &gm.buckets {
        let s = out.len();
        out.u16(0);
        out.u16(b.weight);
        out.u32(if b.watch_port == OFPP_ANY { 0xffff_ffff } else { port_to_of11(b.watch_port) });
        out.u32(b.watch_group);
        out.zeros(4);
        action::encode_actions(v, &b.actions, &mut out);
        out.patch_len(s, s);
    }
    out.patch_len(0, 0);
    out
}

/// Meter stats entry.
pub fn encode_meter_stats(
    meter_id: u32,
    flows: u32,
    packets: u64,
    bytes: u64,
    duration_ms: u64,
    bands: &[(u64, u64)],
) -> Vec<u8> {
    let mut out = Vec::new();
    out.u32(meter_id);
    out.u16(0);
    out.zeros(6);
    out.u32(flows);
    out.u64(packets);
    out.u64(bytes);
    out.u32((duration_ms / 1000) as u32);
    out.u32(((duration_ms % 1000) * 1_000_000) as u32);
    for (p, b) in bands {
        out.u64(*p);
        out.u64(*b);
    }
    let len = out.len() as u16;
    out[4..6].copy_from_slice(&len.to_be_bytes());
    out
}

/// Meter config entry.
pub fn encode_meter_config(mm: &MeterMod) -> Vec<u8> {
    let mut out = Vec::new();
    out.u16(0);
    out.u16(mm.flags);
    out.u32(mm.meter_id);
    for b in &mm.bands {
        out.u16(b.band_type);
        out.u16(16);
        out.u32(b.rate);
        out.u32(b.burst_size);
        if b.band_type == 2 {
            out.u8(b.prec_level);
            out.zeros(3);
        } else {
            out.zeros(4);
        }
    }
    out.patch_len(0, 0);
    out
}

/// Meter features: max meters, band types (drop, dscp_remark), capabilities, max bands, max color.
pub fn encode_meter_features(max_meter: u32) -> Vec<u8> {
    let mut out = Vec::new();
    out.u32(max_meter);
    out.u32((1 << 1) | (1 << 2));
    out.u32(1 | 2 | 4 | 8);
    out.u8(8);
    out.u8(0);
    out.zeros(2);
    out
}

/// One table's features (OpenFlow 1.3+): name, metadata bits, max
/// entries, and the next-tables property (every later table).
pub fn encode_table_features(table: u8, n_tables: u8) -> Vec<u8> {
    let mut out = Vec::new();
    out.u16(0);
    out.u8(table);
    out.zeros(5);
    out.str_fixed(&format!("table{table}"), 32);
    out.u64(u64::MAX);
    out.u64(u64::MAX);
    out.u32(0);
    out.u32(1_000_000);
    let prop = |out: &mut Vec<u8>, ty: u16, body: &dyn Fn(&mut Vec<u8>)| {
        let s = out.len();
        out.u16(ty);
        out.u16(0);
        body(out);
        let len = (out.len() - s) as u16;
        out[s + 2..s + 4].copy_from_slice(&len.to_be_bytes());
        out.pad8();
    };
    let headers = |out: &mut Vec<u8>, types: &[u16]| {
        for t in types {
            out.u16(*t);
            out.u16(4);
        }
    };
    // OXM basic fields we match and set (see `oxm`).
    let fields: &[(u8, u8)] = &[
        (0, 4),
        (2, 8),
        (3, 6),
        (4, 6),
        (5, 2),
        (6, 2),
        (7, 1),
        (8, 1),
        (9, 1),
        (10, 1),
        (11, 4),
        (12, 4),
        (13, 2),
        (14, 2),
        (15, 2),
        (16, 2),
        (17, 2),
        (18, 2),
        (19, 1),
        (20, 1),
        (21, 2),
        (22, 4),
        (23, 4),
        (24, 6),
        (25, 6),
        (26, 16),
        (27, 16),
        (28, 4),
        (29, 1),
        (30, 1),
        (31, 16),
        (32, 6),
        (33, 6),
        (38, 8),
    ];
    let oxms = |out: &mut Vec<u8>| {
        for (f, len) in fields {
            out.u32((0x8000u32 << 16) | ((*f as u32) << 9) | *len as u32);
        }
    };
    let actions: &[u16] = &[0, 17, 18, 21, 22, 23, 24, 25];
    prop(&mut out, 0, &|o| headers(o, &[1, 2, 3, 4, 5, 6]));
    // OFPTFPT_NEXT_TABLES: the tables goto_table may name.
    prop(&mut out, 2, &|o| {
        for t in table.saturating_add(1)..n_tables {
            o.u8(t);
        }
    });
    prop(&mut out, 4, &|o| headers(o, actions));
    prop(&mut out, 6, &|o| headers(o, actions));
    prop(&mut out, 8, &oxms);
    prop(&mut out, 10, &oxms);
    prop(&mut out, 12, &oxms);
    prop(&mut out, 14, &oxms);
    out.patch_len(0, 0);
    out
}

/// Group features: types all/select/indirect/ff, capabilities select-weight + liveness.
pub fn encode_group_features() -> Vec<u8> {
    let mut out = Vec::new();
    out.u32(0xf);
    out.u32(1 | 4);
    for _ in 0..4 {
        out.u32(65535);
    }
    for _ in 0..4 {
        // output, group, set_field, push/pop vlan, dec ttl...
        out.u32((1 << 0) | (1 << 17) | (1 << 18) | (1 << 21) | (1 << 22) | (1 << 23) | (1 << 24) | (1 << 25));
    }
    out
}

/// Encodes a flow mod (for tests and the tools side): 1.0 uses NXT_FLOW_MOD
/// (NXM), 1.1+ the standard message.
pub fn encode_flow_mod(v: Version, xid: u32, fm: &FlowMod) -> Vec<u8> {
    let cmd = match fm.cmd {
        FlowModCmd::Add => 0u8,
        FlowModCmd::Modify => 1,
        FlowModCmd::ModifyStrict => 2,
        FlowModCmd::Delete => 3,
        FlowModCmd::DeleteStrict => 4,
    };
    let s = &fm.spec;
    let table = if s.table_given || fm.cmd == FlowModCmd::Add { s.table } else { 0xff };
    if v == Version::Of10 {
        let mut out = begin(v, t::EXPERIMENTER, xid);
        out.u32(NX_VENDOR);
        out.u32(nxt::FLOW_MOD);
        out.u64(s.cookie);
        out.u16(((table as u16) << 8) | cmd as u16);
        out.u16(s.idle_timeout);
        out.u16(s.hard_timeout);
        out.u16(s.priority as u16);
        out.u32(fm.buffer_id);
        out.u16(fm.out_port as u16);
        out.u16(fm.flags);
        let ml_at = out.len();
        out.u16(0);
        out.zeros(6);
        let ms = out.len();
        oxm::encode(&s.matched, Flavor::Nxm, &mut out);
        if fm.cmd != FlowModCmd::Add {
            oxm::encode_cookie(s.cookie, s.cookie_mask, &mut out);
        }
        let ml = out.len() - ms;
        out[ml_at..ml_at + 2].copy_from_slice(&(ml as u16).to_be_bytes());
        out.pad8();
        action::encode_instructions(v, &s.instructions, &mut out);
        return end(out);
    }
    let mut out = begin(v, t::FLOW_MOD, xid);
    out.u64(s.cookie);
    out.u64(s.cookie_mask);
    out.u8(table);
    out.u8(cmd);
    out.u16(s.idle_timeout);
    out.u16(s.hard_timeout);
    out.u16(s.priority as u16);
    out.u32(fm.buffer_id);
    out.u32(if fm.out_port == OFPP_ANY { 0xffff_ffff } else { port_to_of11(fm.out_port) });
    out.u32(fm.out_group);
    out.u16(fm.flags);
    out.u16(fm.importance);
    oxm::encode_ofp_match(&s.matched, &mut out);
    action::encode_instructions(v, &s.instructions, &mut out);
    end(out)
}

/// Encodes a packet-out (for tests and controllers).
pub fn encode_packet_out(v: Version, xid: u32, po: &PacketOut) -> Vec<u8> {
    let mut out = begin(v, t::PACKET_OUT, xid);
    out.u32(po.buffer_id);
    let mut acts = Vec::new();
    action::encode_actions(v, &po.actions, &mut acts);
    match v {
        Version::Of10 => {
            out.u16(po.in_port as u16);
            out.u16(acts.len() as u16);
        }
        Version::Of13 | Version::Of14 => {
            out.u32(port_to_of11(po.in_port));
            out.u16(acts.len() as u16);
            out.zeros(6);
        }
        Version::Of15 => {
            out.u16(acts.len() as u16);
            out.zeros(2);
            let mut m = Match::CATCHALL;
            if let Some(f) = flow::fields::by_name("in_port") {
                m.set_field(f, po.in_port as u128);
            }
            oxm::encode_ofp_match(&m, &mut out);
        }
    }
    out.extend_from_slice(&acts);
    out.extend_from_slice(&po.data);
    end(out)
}

/// Decoded PACKET_IN (for controllers and tests).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PacketIn {
    pub reason: u8,
    pub table: u8,
    pub cookie: u64,
    pub in_port: u32,
    pub total_len: u16,
    pub data: Vec<u8>,
}

pub fn decode_packet_in(v: Version, m: &Message) -> Result<PacketIn, ErrorKind> {
    let mut rd = Rd::new(m.bytes.get(HEADER_LEN..).unwrap_or(&[]), ErrorKind::BadLen);
    let _buffer = rd.u32()?;
    let total_len = rd.u16()?;
    if v == Version::Of10 {
        let in_port = rd.u16()? as u32;
        let reason = rd.u8()?;
        rd.skip(1)?;
        return Ok(PacketIn { reason, table: 0, cookie: 0, in_port, total_len, data: rd.rest().to_vec() });
    }
    let reason = rd.u8()?;
    let table = rd.u8()?;
    let cookie = rd.u64()?;
    let mm = oxm::decode_ofp_match(&mut rd)?;
    rd.skip(2)?;
    let f = flow::fields::by_name("in_port").expect("in_port");
    Ok(PacketIn { reason, table, cookie, in_port: f.get(&mm.key) as u32, total_len, data: rd.rest().to_vec() })
}

/// Reads a fixed-size string (for tests of descriptions).
pub fn read_str(b: &[u8]) -> String {
    str_fixed(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header::Framer;
    use proptest::prelude::*;

    fn frame(b: &[u8]) -> Message {
        let mut f = Framer::default();
        f.handle_bytes(b);
        f.poll_message().unwrap().unwrap()
    }

    #[test]
    fn flow_mod_round_trips() {
        for v in Version::ALL {
            for text in [
                "priority=100,tcp,nw_dst=10.0.0.0/8,tp_dst=80,actions=output:2",
                "table=3,cookie=0x5,idle_timeout=10,in_port=1,actions=drop",
                "udp6,ipv6_src=::1,actions=dec_ttl,resubmit(,4)",
            ] {
                let spec = ofp_types::parse_flow(text, ofp_types::Need::Actions).unwrap();
                let fm = FlowMod {
                    cmd: FlowModCmd::Add,
                    spec,
                    buffer_id: NO_BUFFER,
                    out_port: OFPP_ANY,
                    out_group: OFPG_ANY,
                    flags: ff::SEND_FLOW_REM,
                    importance: 0,
                };
                let b = encode_flow_mod(v, 7, &fm);
                let ctx = Ctx { version: v, flow_mod_table_id: true };
                let got = decode(&ctx, &frame(&b)).unwrap_or_else(|e| panic!("{text} {v:?}: {e:?}"));
                let Msg::FlowMod(g) = got else { panic!("not a flow mod") };
                assert_eq!(g.spec.matched, fm.spec.matched, "{text} {v:?}");
                assert_eq!(g.spec.priority, fm.spec.priority);
                assert_eq!(g.spec.table, fm.spec.table);
                assert_eq!(g.spec.cookie, fm.spec.cookie);
                assert_eq!(g.spec.idle_timeout, fm.spec.idle_timeout);
                assert_eq!(g.flags, ff::SEND_FLOW_REM);
            }
        }
    }

    #[test]
    fn packet_out_and_in_round_trip() {
        for v in Version::ALL {
            let po = PacketOut {
                buffer_id: NO_BUFFER,
                in_port: ofpp::CONTROLLER,
                actions: vec![Action::Output(ofp_types::OfPort::Port(2))],
                data: vec![1, 2, 3],
            };
            let b = encode_packet_out(v, 1, &po);
            assert_eq!(decode(&Ctx::new(v), &frame(&b)).unwrap(), Msg::PacketOut(po));
            let pi = encode_packet_in(v, 0, 1, 0, 9, 3, 60, &[9, 9]);
            let d = decode_packet_in(v, &frame(&pi)).unwrap();
            assert_eq!((d.in_port, d.reason, d.data), (3, 1, vec![9, 9]));
        }
    }

    #[test]
    fn wrong_version_and_type() {
        let ctx = Ctx::new(Version::Of13);
        let m = frame(&[0x01, 5, 0, 8, 0, 0, 0, 1]);
        assert_eq!(decode(&ctx, &m), Err(ErrorKind::BadVersion));
        let m = frame(&[0x04, 99, 0, 8, 0, 0, 0, 1]);
        assert_eq!(decode(&ctx, &m), Err(ErrorKind::BadType));
        let m = frame(&[0x04, 14, 0, 12, 0, 0, 0, 1, 0, 0, 0, 0]);
        assert_eq!(decode(&ctx, &m), Err(ErrorKind::BadLen));
    }

    proptest! {
        #[test]
        fn decode_never_panics(t in 0u8..40, body in prop::collection::vec(any::<u8>(), 0..200)) {
            for v in Version::ALL {
                let mut b = vec![v as u8, t, 0, 0, 0, 0, 0, 1];
                b.extend_from_slice(&body);
                let len = b.len() as u16;
                b[2..4].copy_from_slice(&len.to_be_bytes());
                let m = frame(&b);
                for tid in [false, true] {
                    let _ = decode(&Ctx { version: v, flow_mod_table_id: tid }, &m);
                }
            }
        }
    }
}
