//! Packets to and from the controller: PACKET_OUT and PACKET_IN (standard
//! and Nicira NXT_PACKET_IN).

use super::*;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PacketOut {
    pub buffer_id: u32,
    /// Our numbering.
    pub in_port: u32,
    pub actions: Vec<Action>,
    pub data: Vec<u8>,
}

pub(crate) fn decode_packet_out(v: Version, rd: &mut Rd) -> Result<PacketOut, ErrorKind> {
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

#[cfg(test)]
mod tests {
    use super::*;

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

    /// The stack goes out top first, each entry in its own width (Open
    /// vSwitch's layout), and comes back bottom first with its widths.
    #[test]
    fn continuation_stack_round_trips() {
        let c = ofp_types::Continuation {
            bridge: [7; 16],
            frames: vec![ofp_types::Frozen {
                table_id: 3,
                cookie: 0,
                actions: vec![Action::Output(ofp_types::OfPort::Port(2))],
            }],
            stack: vec![(9, 1), (0x0102_0304, 4), (u128::MAX, 16)],
            ..Default::default()
        };
        let b = encode_continuation(Version::Of15, &c);
        // The first stack property (after the 20-byte bridge property
        // padded to 24) is the top: 16 bytes of 0xff.
        assert_eq!(&b[24..28], &[0x80, 0x01, 0, 20]);
        assert_eq!(decode_continuation(Version::Of15, &b).unwrap(), c);
        // Wider than xvs can hold: refused, not truncated.
        let mut bad = b.clone();
        bad[26..28].copy_from_slice(&21u16.to_be_bytes());
        assert!(decode_continuation(Version::Of15, &bad).is_err());
    }
}

/// What an `NXT_PACKET_IN2` carries beyond a standard packet-in.
pub struct PacketIn2<'a> {
    pub reason: u8,
    pub table: u8,
    pub cookie: u64,
    pub total_len: u32,
    pub data: &'a [u8],
    /// The pipeline metadata at the controller action (in_port,
    /// registers, `metadata`, tunnel fields), as match fields.
    pub metadata: &'a Match,
    pub userdata: &'a [u8],
    /// A paused pipeline ([`encode_continuation`]'s bytes).
    pub continuation: Option<&'a [u8]>,
}

/// `NXT_PACKET_IN2` (what ovn-controller asks for with
/// `NXT_SET_PACKET_IN_FORMAT` 2): properties (type, length, value, padded
/// to 8) 0 packet, 1 full length (when truncated), 3 table, 4 cookie, 5
/// reason, 6 metadata (NXM/OXM fields), 7 userdata. No continuation: xvs
/// does not resume paused pipelines.
pub fn encode_packet_in2(v: Version, xid: u32, p: &PacketIn2) -> Vec<u8> {
    let mut out = begin(v, t::EXPERIMENTER, xid);
    out.u32(NX_VENDOR);
    out.u32(nxt::PACKET_IN2);
    let prop = |out: &mut Vec<u8>, ty: u16, f: &dyn Fn(&mut Vec<u8>)| {
        let start = out.len();
        out.u16(ty);
        out.u16(0);
        f(out);
        let len = (out.len() - start) as u16;
        out[start + 2..start + 4].copy_from_slice(&len.to_be_bytes());
        out.zeros((8 - len as usize % 8) % 8);
    };
    prop(&mut out, 0, &|o| o.extend_from_slice(p.data));
    if (p.data.len() as u32) < p.total_len {
        prop(&mut out, 1, &|o| o.u32(p.total_len));
    }
    prop(&mut out, 3, &|o| o.u8(p.table));
    prop(&mut out, 4, &|o| {
        o.zeros(4);
        o.u64(p.cookie)
    });
    prop(&mut out, 5, &|o| o.u8(p.reason));
    let flavor = if v == Version::Of10 { oxm::Flavor::Nxm } else { oxm::Flavor::Oxm };
    prop(&mut out, 6, &|o| oxm::encode(p.metadata, flavor, o));
    if !p.userdata.is_empty() {
        prop(&mut out, 7, &|o| o.extend_from_slice(p.userdata));
    }
    if let Some(c) = p.continuation {
        // Nested properties: four bytes of padding after the header.
        prop(&mut out, 8, &|o| {
            o.zeros(4);
            o.extend_from_slice(c)
        });
    }
    end(out)
}

/// Continuation property types (nested in NXT_PACKET_IN2 property 8).
mod nxcpt {
    pub const BRIDGE: u16 = 0x8000;
    pub const STACK: u16 = 0x8001;
    pub const MIRRORS: u16 = 0x8002;
    pub const CONNTRACKED: u16 = 0x8003;
    pub const TABLE_ID: u16 = 0x8004;
    pub const COOKIE: u16 = 0x8005;
    pub const ACTIONS: u16 = 0x8006;
    pub const ACTION_SET: u16 = 0x8007;
    pub const ODP_PORT: u16 = 0x8008;
}

/// Appends one property (type, length, value, padded to 8 bytes).
fn put_prop(out: &mut Vec<u8>, ty: u16, nested: bool, f: impl FnOnce(&mut Vec<u8>)) {
    let start = out.len();
    out.u16(ty);
    out.u16(0);
    if nested {
        out.zeros(4);
    }
    f(out);
    let len = (out.len() - start) as u16;
    out[start + 2..start + 4].copy_from_slice(&len.to_be_bytes());
    out.zeros((8 - len as usize % 8) % 8);
}

/// The properties of `b` as (type, payload after the 4-byte header).
fn props(b: &[u8]) -> Result<Vec<(u16, &[u8])>, ErrorKind> {
    let mut out = Vec::new();
    for_each_prop(&mut Rd::new(b, ErrorKind::BadLen), |ty, body| {
        out.push((ty, body.rest()));
        Ok(())
    })?;
    Ok(out)
}

/// A nested property's contents (after its four bytes of padding).
fn nested(body: &[u8]) -> Result<&[u8], ErrorKind> {
    body.get(4..).ok_or(ErrorKind::BadLen)
}

/// The continuation of a paused pipeline, laid out as Open vSwitch lays
/// it out (so `ovs-ofctl monitor` prints it): the bridge, `conntracked`,
/// then per frozen table its id and cookie (when they change; both start
/// at 0) and its actions, then the action set.
pub fn encode_continuation(v: Version, c: &ofp_types::Continuation) -> Vec<u8> {
    let mut out = Vec::new();
    put_prop(&mut out, nxcpt::BRIDGE, false, |o| o.extend_from_slice(&c.bridge));
    // Top of the stack first, each value in its own width (big endian), as
    // Open vSwitch writes them; a reader pushes each at the bottom.
    for &(value, bytes) in c.stack.iter().rev() {
        let bytes = bytes.clamp(1, 16) as usize;
        put_prop(&mut out, nxcpt::STACK, false, |o| o.extend_from_slice(&value.to_be_bytes()[16 - bytes..]));
    }
    if c.conntracked {
        put_prop(&mut out, nxcpt::CONNTRACKED, false, |_| {});
    }
    let (mut table, mut cookie) = (0u8, 0u64);
    for f in c.frames.iter().filter(|f| !f.actions.is_empty()) {
        if f.table_id != table {
            put_prop(&mut out, nxcpt::TABLE_ID, false, |o| o.u8(f.table_id));
            table = f.table_id;
        }
        if f.cookie != cookie {
            put_prop(&mut out, nxcpt::COOKIE, false, |o| {
                o.zeros(4);
                o.u64(f.cookie)
            });
            cookie = f.cookie;
        }
        put_prop(&mut out, nxcpt::ACTIONS, true, |o| crate::action::encode_actions(v, &f.actions, o));
    }
    if !c.action_set.is_empty() {
        put_prop(&mut out, nxcpt::ACTION_SET, true, |o| crate::action::encode_actions(v, &c.action_set, o));
    }
    out
}

/// Reads a continuation back (from an NXT_RESUME). Malformed properties
/// are refused; the mirrors property Open vSwitch may write is accepted
/// only zero (xvs never writes it), and stack entries up to 16 bytes wide
/// (the widest sub-field xvs pushes).
pub fn decode_continuation(v: Version, b: &[u8]) -> Result<ofp_types::Continuation, ErrorKind> {
    let mut c = ofp_types::Continuation::default();
    let mut bridge = false;
    let (mut table, mut cookie) = (0u8, 0u64);
    for (ty, body) in props(b)? {
        match ty {
            nxcpt::BRIDGE => {
                c.bridge = body.try_into().map_err(|_| ErrorKind::BadLen)?;
                bridge = true;
            }
            nxcpt::CONNTRACKED => c.conntracked = true,
            nxcpt::TABLE_ID => table = *body.first().ok_or(ErrorKind::BadLen)?,
            nxcpt::COOKIE => {
                let b: [u8; 8] = body.get(4..12).and_then(|x| x.try_into().ok()).ok_or(ErrorKind::BadLen)?;
                cookie = u64::from_be_bytes(b);
            }
            nxcpt::ACTIONS => {
                let (actions, _) = crate::action::decode_actions(v, nested(body)?)?;
                c.frames.push(ofp_types::Frozen { table_id: table, cookie, actions });
            }
            nxcpt::ACTION_SET => c.action_set = crate::action::decode_actions(v, nested(body)?)?.0,
            nxcpt::STACK => {
                if body.is_empty() || body.len() > 16 {
                    return Err(ErrorKind::BadLen);
                }
                let value = body.iter().fold(0u128, |v, &b| v << 8 | b as u128);
                c.stack.insert(0, (value, body.len() as u8));
            }
            nxcpt::MIRRORS if body.iter().all(|&x| x == 0) => {}
            nxcpt::ODP_PORT => {}
            nxcpt::MIRRORS => return Err(ErrorKind::BadArgument),
            _ => return Err(ErrorKind::BadArgument),
        }
    }
    if !bridge {
        return Err(ErrorKind::BadArgument);
    }
    Ok(c)
}

/// `NXT_RESUME`: a paused packet (possibly rewritten by the controller),
/// its pipeline metadata (possibly changed) and the continuation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resume {
    pub data: Vec<u8>,
    pub metadata: Match,
    pub continuation: ofp_types::Continuation,
}

pub(super) fn decode_resume(v: Version, rd: &mut Rd) -> Result<Resume, ErrorKind> {
    let (mut data, mut metadata, mut cont) = (None, Match::CATCHALL, None);
    for (ty, body) in props(rd.rest())? {
        match ty {
            0 => data = Some(body.to_vec()),
            1..=5 | 7 => {}
            6 => metadata = oxm::decode(body)?.matched,
            8 => cont = Some(decode_continuation(v, nested(body)?)?),
            _ => return Err(ErrorKind::BadArgument),
        }
    }
    let data = data.filter(|d| d.len() >= 14).ok_or(ErrorKind::BadPacket)?;
    Ok(Resume { data, metadata, continuation: cont.ok_or(ErrorKind::BadArgument)? })
}
