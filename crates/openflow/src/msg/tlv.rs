//! The tunnel TLV map (`ovs-ofctl add-tlv-map`, `dump-tlv-map`): which
//! Geneve option (class, type, length) a `tun_metadataN` field holds.
//! ovn-controller's first request binds OVN's option (class 0x0102, type
//! 0x80, 4 bytes) to a field this way.
//!
//! `NXT_TLV_TABLE_MOD`: command (2 bytes: 0 add, 1 delete, 2 clear), 6 zero
//! bytes, then 8-byte maps (class 2, type 1, length 1, field index 2, 2
//! zero). `NXT_TLV_TABLE_REQUEST` has no body; the reply carries the option
//! space (4 bytes), the number of fields (2), 10 zero bytes, then the maps.

use crate::bytes::{Rd, Wr};
use crate::error::ErrorKind;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TlvMap {
    pub class: u16,
    pub ty: u8,
    pub len: u8,
    pub index: u16,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlvCommand {
    Add,
    Delete,
    Clear,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlvTableMod {
    pub command: TlvCommand,
    pub maps: Vec<TlvMap>,
}

fn maps(rd: &mut Rd) -> Result<Vec<TlvMap>, ErrorKind> {
    let mut out = Vec::new();
    while !rd.is_empty() {
        let m = TlvMap { class: rd.u16()?, ty: rd.u8()?, len: rd.u8()?, index: rd.u16()? };
        rd.skip(2)?;
        out.push(m);
    }
    Ok(out)
}

pub fn decode_mod(rd: &mut Rd) -> Result<TlvTableMod, ErrorKind> {
    let command = match rd.u16()? {
        0 => TlvCommand::Add,
        1 => TlvCommand::Delete,
        2 => TlvCommand::Clear,
        _ => return Err(ErrorKind::TlvBadCommand),
    };
    rd.skip(6)?;
    if rd.len() % 8 != 0 {
        return Err(ErrorKind::BadLen);
    }
    Ok(TlvTableMod { command, maps: maps(rd)? })
}

/// The body of `NXT_TLV_TABLE_REPLY` (after the subtype).
pub fn encode_reply(max_option_space: u32, max_fields: u16, maps: &[TlvMap]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + 8 * maps.len());
    out.u32(max_option_space);
    out.u16(max_fields);
    out.zeros(10);
    for m in maps {
        out.u16(m.class);
        out.u8(m.ty);
        out.u8(m.len);
        out.u16(m.index);
        out.zeros(2);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_mod_and_reply() {
        // add {class=0x102,type=0x80,len=4}->tun_metadata0
        let b = [0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0x02, 0x80, 4, 0, 0, 0, 0];
        let m = decode_mod(&mut Rd::new(&b, ErrorKind::BadLen)).unwrap();
        assert_eq!(m.command, TlvCommand::Add);
        assert_eq!(m.maps, vec![TlvMap { class: 0x102, ty: 0x80, len: 4, index: 0 }]);
        let r = encode_reply(8, 2, &m.maps);
        assert_eq!(r.len(), 24);
        assert_eq!(&r[16..], &b[8..]);
        assert_eq!(
            decode_mod(&mut Rd::new(&[0, 9, 0, 0, 0, 0, 0, 0], ErrorKind::BadLen)),
            Err(ErrorKind::TlvBadCommand)
        );
        assert_eq!(decode_mod(&mut Rd::new(&b[..12], ErrorKind::BadLen)), Err(ErrorKind::BadLen));
    }
}
