//! The OpenFlow 1.0 fixed match (`ofp_match`, 40 bytes): a wildcard
//! bitmap and one slot per field. 1.0 leaves prerequisites loose; like
//! Open vSwitch, decoding drops fields whose prerequisites the rest of the
//! match does not establish (nw_src without dl_type=ip, ...), so the
//! resulting match is always well formed.

use crate::bytes::{Rd, Wr};
use crate::error::ErrorKind;
use flow::fields::by_name;
use flow::key::{ethertype as et, ipproto};
use flow::Match;

pub const LEN: usize = 40;

mod fw {
    pub const IN_PORT: u32 = 1 << 0;
    pub const DL_VLAN: u32 = 1 << 1;
    pub const DL_SRC: u32 = 1 << 2;
    pub const DL_DST: u32 = 1 << 3;
    pub const DL_TYPE: u32 = 1 << 4;
    pub const NW_PROTO: u32 = 1 << 5;
    pub const TP_SRC: u32 = 1 << 6;
    pub const TP_DST: u32 = 1 << 7;
    pub const NW_SRC_SHIFT: u32 = 8;
    pub const NW_DST_SHIFT: u32 = 14;
    pub const DL_VLAN_PCP: u32 = 1 << 20;
    pub const NW_TOS: u32 = 1 << 21;
    pub const ALL: u32 = (1 << 22) - 1;
}

const VLAN_NONE: u16 = 0xffff;

fn set(m: &mut Match, name: &str, v: u128, mask: u128) {
    if let Some(f) = by_name(name) {
        m.set_field_masked(f, v, mask);
    }
}

fn prefix_mask(wild_bits: u32) -> u128 {
    let n = wild_bits.min(32);
    if n == 32 {
        0
    } else {
        (u32::MAX << n) as u128
    }
}

/// Decodes the 40-byte match.
pub fn decode(rd: &mut Rd) -> Result<Match, ErrorKind> {
    let mut r = rd.sub(LEN, ErrorKind::BadLen)?;
    let w = r.u32()?;
    let in_port = r.u16()?;
    let dl_src = r.uint(6)?;
    let dl_dst = r.uint(6)?;
    let dl_vlan = r.u16()?;
    let pcp = r.u8()?;
    r.skip(1)?;
    let dl_type = r.u16()?;
    let tos = r.u8()?;
    let proto = r.u8()?;
    r.skip(2)?;
    let nw_src = r.u32()? as u128;
    let nw_dst = r.u32()? as u128;
    let tp_src = r.u16()? as u128;
    let tp_dst = r.u16()? as u128;

    let mut m = Match::CATCHALL;
    if w & fw::IN_PORT == 0 {
        set(&mut m, "in_port", in_port as u128, u128::MAX);
    }
    if w & fw::DL_SRC == 0 {
        set(&mut m, "dl_src", dl_src, u128::MAX);
    }
    if w & fw::DL_DST == 0 {
        set(&mut m, "dl_dst", dl_dst, u128::MAX);
    }
    if w & fw::DL_VLAN == 0 {
        if dl_vlan == VLAN_NONE {
            set(&mut m, "vlan_tci", 0, 0xffff);
        } else {
            let (mut v, mut mk) = (0x1000 | (dl_vlan as u128 & 0xfff), 0x1fffu128);
            if w & fw::DL_VLAN_PCP == 0 {
                v |= ((pcp & 7) as u128) << 13;
                mk |= 0xe000;
            }
            set(&mut m, "vlan_tci", v, mk);
        }
    } else if w & fw::DL_VLAN_PCP == 0 {
        set(&mut m, "vlan_tci", 0x1000 | (((pcp & 7) as u128) << 13), 0xf000);
    }
    if w & fw::DL_TYPE == 0 {
        set(&mut m, "dl_type", dl_type as u128, u128::MAX);
        let ip = dl_type == et::IPV4;
        let arp = dl_type == et::ARP;
        // As Open vSwitch reads a 1.0 match: with dl_type IPv6, nw_tos,
        // nw_proto and the ports are IPv6's traffic class, next header and
        // L4 ports (nw_src/nw_dst, 32-bit, stay IPv4's and ARP's).
        let ip6 = dl_type == et::IPV6;
        if ip || arp {
            let sm = prefix_mask((w >> fw::NW_SRC_SHIFT) & 0x3f);
            let dm = prefix_mask((w >> fw::NW_DST_SHIFT) & 0x3f);
            if sm != 0 {
                set(&mut m, "nw_src", nw_src, sm);
            }
            if dm != 0 {
                set(&mut m, "nw_dst", nw_dst, dm);
            }
        }
        if (ip || arp || ip6) && w & fw::NW_PROTO == 0 {
            set(&mut m, "nw_proto", proto as u128, u128::MAX);
        }
        if ip || ip6 {
            if w & fw::NW_TOS == 0 {
                set(&mut m, "nw_tos", (tos & 0xfc) as u128, 0xfc);
            }
            let l4 = if ip { ipproto::ICMP } else { ipproto::ICMPV6 };
            if w & fw::NW_PROTO == 0 && (matches!(proto, ipproto::TCP | ipproto::UDP | ipproto::SCTP) || proto == l4) {
                if w & fw::TP_SRC == 0 {
                    set(&mut m, "tp_src", tp_src, u128::MAX);
                }
                if w & fw::TP_DST == 0 {
                    set(&mut m, "tp_dst", tp_dst, u128::MAX);
                }
            }
        }
    }
    Ok(m)
}

fn full(m: &Match, name: &str) -> Option<u128> {
    let f = by_name(name)?;
    (f.get(&m.mask) == f.loc.max()).then(|| f.get(&m.key))
}

/// Encodes `m` as the 40-byte match, as closely as 1.0 can say it (fields
/// 1.0 lacks are left out; callers choose NXM when that matters).
pub fn encode(m: &Match, out: &mut Vec<u8>) {
    let mut w = fw::ALL;
    let f = |n: &str| by_name(n).expect("field");
    let in_port = full(m, "in_port");
    if in_port.is_some() {
        w &= !fw::IN_PORT;
    }
    let dl_src = full(m, "dl_src");
    if dl_src.is_some() {
        w &= !fw::DL_SRC;
    }
    let dl_dst = full(m, "dl_dst");
    if dl_dst.is_some() {
        w &= !fw::DL_DST;
    }
    let tci = f("vlan_tci");
    let (tv, tm) = (tci.get(&m.key) as u16, tci.get(&m.mask) as u16);
    let mut dl_vlan = 0u16;
    let mut pcp = 0u8;
    if tm & 0x1000 != 0 && tv & 0x1000 == 0 {
        w &= !fw::DL_VLAN;
        dl_vlan = VLAN_NONE;
    } else {
        if tm & 0xfff == 0xfff {
            w &= !fw::DL_VLAN;
            dl_vlan = tv & 0xfff;
        }
        if tm & 0xe000 == 0xe000 {
            w &= !fw::DL_VLAN_PCP;
            pcp = (tv >> 13) as u8;
        }
    }
    let dl_type = full(m, "dl_type");
    if dl_type.is_some() {
        w &= !fw::DL_TYPE;
    }
    let nw = |name: &str| {
        let fd = f(name);
        let mk = fd.get(&m.mask) as u32;
        (fd.get(&m.key) as u32, 32 - mk.count_ones().min(32), mk)
    };
    let (nw_src, sw, _) = nw("nw_src");
    let (nw_dst, dw, _) = nw("nw_dst");
    w = (w & !(0x3f << fw::NW_SRC_SHIFT)) | (sw.min(32) << fw::NW_SRC_SHIFT);
    w = (w & !(0x3f << fw::NW_DST_SHIFT)) | (dw.min(32) << fw::NW_DST_SHIFT);
    let proto = full(m, "nw_proto");
    if proto.is_some() {
        w &= !fw::NW_PROTO;
    }
    let tosf = f("nw_tos");
    let tos = if tosf.get(&m.mask) & 0xfc == 0xfc {
        w &= !fw::NW_TOS;
        (tosf.get(&m.key) & 0xfc) as u8
    } else {
        0
    };
    let tp_src = full(m, "tp_src");
    if tp_src.is_some() {
        w &= !fw::TP_SRC;
    }
    let tp_dst = full(m, "tp_dst");
    if tp_dst.is_some() {
        w &= !fw::TP_DST;
    }
    out.u32(w);
    out.u16(in_port.unwrap_or(0) as u16);
    out.uint(dl_src.unwrap_or(0), 6);
    out.uint(dl_dst.unwrap_or(0), 6);
    out.u16(dl_vlan);
    out.u8(pcp);
    out.u8(0);
    out.u16(dl_type.unwrap_or(0) as u16);
    out.u8(tos);
    out.u8(proto.unwrap_or(0) as u8);
    out.zeros(2);
    out.u32(nw_src);
    out.u32(nw_dst);
    out.u16(tp_src.unwrap_or(0) as u16);
    out.u16(tp_dst.unwrap_or(0) as u16);
}

/// Whether the 1.0 match can say exactly what `m` says.
pub fn expressible(m: &Match) -> bool {
    let mut b = Vec::new();
    encode(m, &mut b);
    decode(&mut Rd::new(&b, ErrorKind::BadLen)).is_ok_and(|d| d == *m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        for s in [
            "",
            "in_port=1",
            "tcp,nw_src=10.0.0.0/8,tp_dst=80",
            "arp,arp_spa=10.0.0.1,arp_op=2",
            "dl_vlan=10,dl_vlan_pcp=3",
            "vlan_tci=0",
            "icmp,icmp_type=8",
            "ip,dl_src=00:11:22:33:44:55",
        ] {
            let m = Match::parse(s).unwrap();
            assert!(expressible(&m), "{s}");
        }
        // 1.0 cannot say these.
        for s in ["ipv6,ipv6_src=::1", "metadata=1", "tcp,tcp_flags=0x2"] {
            assert!(!expressible(&Match::parse(s).unwrap()), "{s}");
        }
    }

    /// A 1.0 match with dl_type IPv6 (what a 1.0 controller sends, and
    /// what OVS accepts): its traffic class, next header and ports are kept.
    #[test]
    fn ipv6_fields_of_a_1_0_match_are_kept() {
        for s in ["tcp6,ip_dscp=8,tp_dst=80", "ipv6,nw_proto=17", "icmp6,icmp_type=135"] {
            let m = Match::parse(s).unwrap();
            let mut b = Vec::new();
            encode(&m, &mut b);
            assert_eq!(decode(&mut Rd::new(&b, ErrorKind::BadLen)).unwrap(), m, "{s}");
        }
    }

    #[test]
    fn loose_prerequisites_are_dropped() {
        let mut b = Vec::new();
        encode(&Match::CATCHALL, &mut b);
        // Clear the nw_src wildcard bits without dl_type: nw_src is ignored.
        b[2] &= !0x3f;
        b[28..32].copy_from_slice(&[10, 0, 0, 1]);
        assert_eq!(decode(&mut Rd::new(&b, ErrorKind::BadLen)).unwrap(), Match::CATCHALL);
    }
}
