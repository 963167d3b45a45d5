//! `NXT_CT_FLUSH` (Open vSwitch 3.1's `ovs-ofctl ct-flush`; ovn-controller
//! flushes load-balancer backends' connections with it).
//!
//! Layout, as OVS 3.1 sends it: after the Nicira header, the IP protocol
//! (1 byte) and 7 zero bytes, then properties (type, length, value, padded
//! to 8): 0 = original tuple, 1 = reply tuple (each a nest of 4 pad bytes
//! and properties: 0 source and 1 destination address as 16 bytes, IPv4
//! mapped into IPv6; 2 source and 3 destination port; 4 ICMP id; 5 ICMP
//! type; 6 ICMP code), 2 = zone. Every field is optional: the connections
//! that match all given fields are flushed.

use crate::bytes::Rd;
use crate::error::ErrorKind;

/// Part of a connection tuple to match; `None` matches anything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TupleMatch {
    /// Addresses as 128-bit numbers; IPv4 in the low 32 bits with `v4`.
    pub src: Option<(u128, bool)>,
    pub dst: Option<(u128, bool)>,
    pub sport: Option<u16>,
    pub dport: Option<u16>,
    pub icmp_id: Option<u16>,
    pub icmp_type: Option<u8>,
    pub icmp_code: Option<u8>,
}

impl TupleMatch {
    pub fn is_empty(&self) -> bool {
        *self == TupleMatch::default()
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CtFlush {
    /// 0: any protocol.
    pub ip_proto: u8,
    pub zone: Option<u16>,
    pub orig: TupleMatch,
    pub reply: TupleMatch,
}

fn tuple(mut rd: Rd) -> Result<TupleMatch, ErrorKind> {
    rd.skip(4)?;
    let mut t = TupleMatch::default();
    super::for_each_prop(&mut rd, |ty, mut v| {
        let addr = |v: &mut Rd| -> Result<(u128, bool), ErrorKind> {
            let a = u128::from_be_bytes(v.bytes(16)?.try_into().map_err(|_| ErrorKind::BadLen)?);
            let v4 = a >> 32 == 0xffff;
            Ok((if v4 { a & 0xffff_ffff } else { a }, v4))
        };
        match ty {
            0 => t.src = Some(addr(&mut v)?),
            1 => t.dst = Some(addr(&mut v)?),
            2 => t.sport = Some(v.u16()?),
            3 => t.dport = Some(v.u16()?),
            4 => t.icmp_id = Some(v.u16()?),
            5 => t.icmp_type = Some(v.u8()?),
            6 => t.icmp_code = Some(v.u8()?),
            _ => return Err(ErrorKind::BadArgument),
        }
        Ok(())
    })?;
    Ok(t)
}

/// Decodes the body after the Nicira subtype.
pub fn decode(rd: &mut Rd) -> Result<CtFlush, ErrorKind> {
    let mut f = CtFlush { ip_proto: rd.u8()?, ..CtFlush::default() };
    if rd.bytes(7)?.iter().any(|&b| b != 0) {
        return Err(ErrorKind::BadArgument);
    }
    super::for_each_prop(rd, |ty, mut v| {
        match ty {
            0 => f.orig = tuple(v)?,
            1 => f.reply = tuple(v)?,
            2 => f.zone = Some(v.u16()?),
            _ => return Err(ErrorKind::BadArgument),
        }
        Ok(())
    })?;
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(hex: &str) -> Vec<u8> {
        (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect()
    }

    #[test]
    fn decodes_what_ovs_ofctl_sends() {
        // `ovs-ofctl ct-flush BR zone=5`, after the Nicira header.
        let b = body("00000000000000000002000800050000");
        let f = decode(&mut Rd::new(&b, ErrorKind::BadLen)).unwrap();
        assert_eq!(f, CtFlush { zone: Some(5), ..CtFlush::default() });
        // `ct-flush BR zone=7 'ct_nw_src=10.0.0.1,ct_nw_dst=10.0.0.2,
        //  ct_nw_proto=6,ct_tp_src=1000,ct_tp_dst=80'`.
        let b = body(concat!(
            "0600000000000000",
            "00000048000000000000001400000000000000000000ffff0a00000100000000",
            "0001001400000000000000000000ffff0a0000020000000000020008",
            "03e8000000030008005000000002000800070000"
        ));
        let f = decode(&mut Rd::new(&b, ErrorKind::BadLen)).unwrap();
        assert_eq!(f.ip_proto, 6);
        assert_eq!(f.zone, Some(7));
        assert_eq!(f.orig.src, Some((0x0a00_0001, true)));
        assert_eq!(f.orig.dst, Some((0x0a00_0002, true)));
        assert_eq!((f.orig.sport, f.orig.dport), (Some(1000), Some(80)));
        assert!(f.reply.is_empty());
        // Truncated and unknown properties are refused.
        let b = body("00000000000000000002000800");
        assert!(decode(&mut Rd::new(&b, ErrorKind::BadLen)).is_err());
        let b = body("00000000000000000009000800050000");
        assert_eq!(decode(&mut Rd::new(&b, ErrorKind::BadLen)), Err(ErrorKind::BadArgument));
    }
}
