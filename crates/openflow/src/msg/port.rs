//! Ports: PORT_MOD, the port description (in features replies, port
//! descriptions and PORT_STATUS) and its config/state bits.

use super::*;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortMod {
    pub port_no: u32,
    pub hw_addr: [u8; 6],
    pub config: u32,
    pub mask: u32,
}

pub(crate) fn decode_port_mod(v: Version, rd: &mut Rd) -> Result<PortMod, ErrorKind> {
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
    Ok(PortMod { port_no, hw_addr, config: rd.u32()?, mask: rd.u32()? })
}

/// PORT_MOD (for controllers and tests); `advertise` is sent as 0 (1.0,
/// 1.3), and 1.4+ carries no properties.
pub fn encode_port_mod(v: Version, xid: u32, pm: &PortMod) -> Vec<u8> {
    let mut out = begin(v, t::PORT_MOD, xid);
    if v == Version::Of10 {
        out.u16(pm.port_no as u16);
    } else {
        out.u32(port_to_of11(pm.port_no));
        out.zeros(4);
    }
    out.extend_from_slice(&pm.hw_addr);
    if v != Version::Of10 {
        out.zeros(2);
    }
    out.u32(pm.config);
    out.u32(pm.mask);
    if v <= Version::Of13 {
        out.zeros(8); // advertise, pad
    }
    end(out)
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

/// PORT_STATUS (reason: 0 add, 1 delete, 2 modify).
pub fn encode_port_status(v: Version, reason: u8, p: &PortDesc) -> Vec<u8> {
    let mut out = begin(v, t::PORT_STATUS, 0);
    out.u8(reason);
    out.zeros(7);
    encode_port(v, p, &mut out);
    end(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_mod_round_trips() {
        for v in Version::ALL {
            let pm = PortMod { port_no: 3, hw_addr: [2, 0, 0, 0, 0, 3], config: pc::PORT_DOWN, mask: pc::PORT_DOWN };
            let b = encode_port_mod(v, 5, &pm);
            // ofp_port_mod: 1.0 32 bytes, 1.3 40, 1.4+ 32 (no properties).
            assert_eq!(b.len(), if v == Version::Of13 { 40 } else { 32 }, "{v:?}");
            assert_eq!(decode(&Ctx::new(v), &frame(&b)).unwrap(), Msg::PortMod(pm), "{v:?}");
        }
    }

    #[test]
    fn port_description_layout() {
        let p = PortDesc {
            port_no: 7,
            hw_addr: [2, 0, 0, 0, 0, 7],
            name: "veth7".into(),
            config: 0,
            state: PS_LIVE,
            curr: 0,
            advertised: 0,
            supported: 0,
            peer: 0,
            curr_speed: 10_000_000,
            max_speed: 10_000_000,
        };
        for v in Version::ALL {
            let mut out = Vec::new();
            encode_port(v, &p, &mut out);
            let (len, name_at) = match v {
                Version::Of10 => (48, 8),
                Version::Of13 => (64, 16),
                _ => (u16::from_be_bytes([out[4], out[5]]) as usize, 16),
            };
            assert_eq!(out.len(), len, "{v:?}");
            assert_eq!(crate::bytes::str_fixed(&out[name_at..name_at + 16]), "veth7", "{v:?}");
            let st = encode_port_status(v, 2, &p);
            let m = frame(&st);
            assert_eq!(m.header.msg_type, ty(v, t::PORT_STATUS));
            assert_eq!(st[8], 2, "reason");
        }
    }
}
