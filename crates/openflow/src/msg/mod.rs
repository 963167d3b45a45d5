//! Typed OpenFlow messages: requests a switch receives ([`decode`] into
//! [`Msg`]) and the replies and asynchronous messages it sends (the
//! `encode_*` functions). Versions 1.0 (with the Nicira extensions
//! ovs-ofctl uses: NXM flow mods and stats, flow-format and table-id
//! negotiation, packet-in format), 1.3, 1.4 and 1.5.
//!
//! Decoding is sans-IO and total: every input gives a message or the
//! [`ErrorKind`] the spec names for it.
//!
//! One file per message family (flow_mod, flow_stats, stats, group, meter,
//! packet, port, control), each with its structs, decoding, encoding and
//! round-trip tests; this file holds the type numbers, the connection
//! context, [`Msg`] and the [`decode`] dispatcher.

use crate::action::{self, NX_VENDOR};
use crate::bytes::{str_fixed, Rd, Wr};
use crate::error::{ErrorKind, ONF_EXPERIMENTER};
use crate::header::{Header, Message, Version, HEADER_LEN};
use crate::of10;
use crate::oxm::{self, port_from_of11, port_to_of11, Flavor};
use flow::Match;
use ofp_types::actions::ofpp;
use ofp_types::{Action, FlowModCmd, FlowSpec, Instruction};

mod control;
pub mod ct_flush;
mod flow_mod;
mod flow_stats;
mod group;
mod meter;
mod packet;
mod port;
mod stats;
pub mod tlv;

pub use control::*;
pub use flow_mod::*;
pub use flow_stats::*;
pub use group::*;
pub use meter::*;
pub use packet::*;
pub use port::*;
pub use stats::*;

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
    pub const TLV_TABLE_MOD: u32 = 24;
    pub const PACKET_IN2: u32 = 30;
    pub const TLV_TABLE_REQUEST: u32 = 25;
    pub const TLV_TABLE_REPLY: u32 = 26;
    pub const CT_FLUSH_ZONE: u32 = 29;
    pub const RESUME: u32 = 28;
    pub const CT_FLUSH: u32 = 32;
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
    /// `NXT_CT_FLUSH_ZONE`: forget every connection in a zone
    /// (`ovs-ofctl ct-flush-zone`; ovn-controller sends it).
    CtFlushZone(u16),
    /// `NXT_CT_FLUSH`: forget the connections that match (zone, protocol,
    /// parts of the tuples).
    CtFlush(ct_flush::CtFlush),
    /// `NXT_TLV_TABLE_MOD` / `NXT_TLV_TABLE_REQUEST`.
    TlvTableMod(tlv::TlvTableMod),
    TlvTableRequest,
    /// `NXT_RESUME`: continue a pipeline paused by `controller(pause)`.
    Resume(packet::Resume),
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
        t::PORT_MOD => Msg::PortMod(decode_port_mod(v, &mut rd)?),
        t::MULTIPART_REQUEST => Msg::Stats(decode_stats(ctx, &mut rd)?),
        t::EXPERIMENTER => decode_vendor(ctx, &mut rd)?,
        t::QUEUE_GET_CONFIG_REQUEST => Msg::QueueGetConfig,
        t::GROUP_MOD if v != Version::Of10 => Msg::GroupMod(decode_group_mod(v, &mut rd)?),
        t::METER_MOD if v != Version::Of10 => Msg::MeterMod(decode_meter_mod(&mut rd)?),
        t::ROLE_REQUEST if v != Version::Of10 => decode_role_request(&mut rd)?,
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
        nxt::CT_FLUSH_ZONE => {
            // Six zero bytes, then the zone.
            if rd.bytes(6)?.iter().any(|&b| b != 0) {
                return Err(ErrorKind::BadArgument);
            }
            Msg::CtFlushZone(rd.u16()?)
        }
        nxt::CT_FLUSH => Msg::CtFlush(ct_flush::decode(rd)?),
        nxt::TLV_TABLE_MOD => Msg::TlvTableMod(tlv::decode_mod(rd)?),
        nxt::TLV_TABLE_REQUEST => Msg::TlvTableRequest,
        nxt::RESUME => Msg::Resume(packet::decode_resume(ctx.version, rd)?),
        nxt::SET_ASYNC_CONFIG => Msg::SetAsync,
        _ => return Err(ErrorKind::BadExpType),
    })
}

/// Walks a property list (type, length, value; each padded to 8 bytes,
/// the last one possibly not), handing `each` every type and value.
pub(crate) fn for_each_prop<'a>(
    rd: &mut Rd<'a>,
    mut each: impl FnMut(u16, Rd<'a>) -> Result<(), ErrorKind>,
) -> Result<(), ErrorKind> {
    while !rd.is_empty() {
        let ty = rd.u16()?;
        let len = rd.u16()? as usize;
        if len < 4 {
            return Err(ErrorKind::BadLen);
        }
        let body = rd.bytes(len - 4)?;
        each(ty, Rd::new(body, ErrorKind::BadLen))?;
        let pad = (8 - len % 8) % 8;
        rd.skip(pad.min(rd.len()))?;
    }
    Ok(())
}

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

/// Reads a fixed-size string (for tests of descriptions).
pub fn read_str(b: &[u8]) -> String {
    str_fixed(b)
}

/// Frames one encoded message (tests of every family).
#[cfg(test)]
pub(crate) fn frame(b: &[u8]) -> Message {
    let mut f = crate::header::Framer::default();
    f.handle_bytes(b);
    f.poll_message().unwrap().unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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
