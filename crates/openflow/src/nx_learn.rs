//! `NXAST_LEARN` (Nicira action subtype 16) on the wire, as Open vSwitch
//! lays it out: idle and hard timeouts, priority, cookie, flags, table,
//! a pad byte, fin idle/hard timeouts; then one spec per learned item: a
//! 16-bit header (bit 13 source is immediate, bits 11-12 destination:
//! 0 match, 1 load, 2 output; low 10 bits width), the source (field header
//! and offset, or the value in 16-bit units), the destination (field
//! header and offset; none for output). A zero header ends the list.

use crate::action::{finish, nx_header, subfield};
use crate::bytes::{Rd, Wr};
use crate::error::ErrorKind;
use ofp_types::learn::{LearnItem, LearnSpec, LearnSrc};
use ofp_types::SubField;

pub const LEARN: u16 = 16;
const SRC_IMMEDIATE: u16 = 1 << 13;
const DST_LOAD: u16 = 1 << 11;
const DST_OUTPUT: u16 = 2 << 11;

/// Decodes the body after the Nicira subtype.
pub fn decode(rd: &mut Rd) -> Result<LearnSpec, ErrorKind> {
    let mut s = LearnSpec {
        idle_timeout: rd.u16()?,
        hard_timeout: rd.u16()?,
        priority: rd.u16()?,
        cookie: rd.u64()?,
        flags: rd.u16()?,
        ..LearnSpec::default()
    };
    s.table = rd.u8()?;
    rd.skip(1)?;
    s.fin_idle_timeout = rd.u16()?;
    s.fin_hard_timeout = rd.u16()?;
    if s.flags & !3 != 0 || s.table == 255 {
        return Err(ErrorKind::BadArgument);
    }
    while rd.len() >= 2 {
        let h = rd.u16()?;
        if h == 0 {
            break;
        }
        let n_bits = (h & 0x3ff) as u32;
        if n_bits == 0 {
            return Err(ErrorKind::BadArgument);
        }
        let src = if h & SRC_IMMEDIATE != 0 {
            let bytes = rd.bytes(2 * n_bits.div_ceil(16) as usize)?;
            LearnSrc::Value(bytes.iter().fold(0u128, |a, &b| (a << 8) | b as u128))
        } else {
            let fh = rd.u32()?;
            let ofs = rd.u16()? as u32;
            LearnSrc::Field(subfield(fh, ofs, n_bits)?)
        };
        let dst = |rd: &mut Rd| -> Result<SubField, ErrorKind> {
            let fh = rd.u32()?;
            let ofs = rd.u16()? as u32;
            subfield(fh, ofs, n_bits)
        };
        s.items.push(match h & (3 << 11) {
            0 => LearnItem::Match { dst: dst(rd)?, src },
            DST_LOAD => LearnItem::Load { dst: dst(rd)?, src },
            DST_OUTPUT => match src {
                LearnSrc::Field(src) => LearnItem::Output { src },
                LearnSrc::Value(_) => return Err(ErrorKind::BadArgument),
            },
            _ => return Err(ErrorKind::BadArgument),
        });
    }
    if rd.rest().iter().any(|&b| b != 0) {
        return Err(ErrorKind::BadArgument);
    }
    Ok(s)
}

fn field_part(sf: &SubField, out: &mut Vec<u8>) {
    out.u32(crate::oxm::field_header(sf.field).unwrap_or(0));
    out.u16(sf.ofs as u16);
}

pub fn encode(s: &LearnSpec, out: &mut Vec<u8>) {
    let st = nx_header(out, LEARN);
    out.u16(s.idle_timeout);
    out.u16(s.hard_timeout);
    out.u16(s.priority);
    out.u64(s.cookie);
    out.u16(s.flags);
    out.u8(s.table);
    out.u8(0);
    out.u16(s.fin_idle_timeout);
    out.u16(s.fin_hard_timeout);
    for it in &s.items {
        let (kind, dst, src, n_bits) = match it {
            LearnItem::Match { dst, src } => (0, Some(dst), src.clone(), dst.n_bits),
            LearnItem::Load { dst, src } => (DST_LOAD, Some(dst), src.clone(), dst.n_bits),
            LearnItem::Output { src } => (DST_OUTPUT, None, LearnSrc::Field(*src), src.n_bits),
        };
        let imm = matches!(src, LearnSrc::Value(_));
        out.u16(kind | if imm { SRC_IMMEDIATE } else { 0 } | n_bits as u16);
        match src {
            LearnSrc::Field(f) => field_part(&f, out),
            LearnSrc::Value(v) => {
                let n = 2 * n_bits.div_ceil(16) as usize;
                out.extend_from_slice(&v.to_be_bytes()[16 - n..]);
            }
        }
        if let Some(d) = dst {
            field_part(d, out);
        }
    }
    finish(out, st);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let text = "table=69,delete_learned,cookie=0x24c9b797,OXM_OF_METADATA[],eth_type=0x800,NXM_OF_IP_SRC[],ip_dst=10.0.1.100,nw_proto=6,NXM_OF_TCP_SRC[]=NXM_OF_TCP_DST[],load:0x1->NXM_NX_REG10[7],output:NXM_NX_REG1[0..15]";
        let s = ofp_types::learn::parse("learn", text).unwrap();
        let mut out = Vec::new();
        encode(&s, &mut out);
        assert_eq!(out.len() % 8, 0);
        let mut rd = Rd::new(&out[10..], ErrorKind::BadActionLen);
        let back = decode(&mut rd).unwrap();
        assert_eq!(back.to_string(), s.to_string());
    }
}
