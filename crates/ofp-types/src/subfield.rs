//! Sub-fields: a run of bits of one field, as `load`, `move` and
//! `output:reg` name them (`NXM_NX_REG0[0..15]`, `reg1[]`, `eth_src[]`,
//! `xxreg3[100]`), and the NXM/OXM names ovs-ofctl prints for fields.
//!
//! A field may be written by its ovs-ofctl name or by the name of its
//! NXM/OXM header. It is printed by the header name Open vSwitch prefers
//! for OpenFlow 1.0 (the Nicira one where both exist, `NXM_OF_ETH_SRC`,
//! else the OXM one, `OXM_OF_PKT_REG3`), or by its own name if it has no
//! header. The names are the ones listed in ovs-fields(7).

use crate::actions::{perr, ParseError};
use flow::fields::{by_name, FieldDef};
use std::fmt;

/// (flow field name, NXM/OXM name printed for it). Every field with a
/// header of its own; both names parse.
static NAMES: &[(&str, &str)] = &[
    ("in_port", "NXM_OF_IN_PORT"),
    ("metadata", "OXM_OF_METADATA"),
    ("pkt_mark", "NXM_NX_PKT_MARK"),
    ("dp_hash", "NXM_NX_DP_HASH"),
    ("recirc_id", "NXM_NX_RECIRC_ID"),
    ("tun_id", "NXM_NX_TUN_ID"),
    ("tunnel_id", "NXM_NX_TUN_ID"),
    ("tun_src", "NXM_NX_TUN_IPV4_SRC"),
    ("tun_dst", "NXM_NX_TUN_IPV4_DST"),
    ("tun_ipv6_src", "NXM_NX_TUN_IPV6_SRC"),
    ("tun_ipv6_dst", "NXM_NX_TUN_IPV6_DST"),
    ("ct_state", "NXM_NX_CT_STATE"),
    ("ct_zone", "NXM_NX_CT_ZONE"),
    ("ct_mark", "NXM_NX_CT_MARK"),
    ("ct_label", "NXM_NX_CT_LABEL"),
    ("ct_nw_src", "NXM_NX_CT_NW_SRC"),
    ("ct_nw_dst", "NXM_NX_CT_NW_DST"),
    ("ct_nw_proto", "NXM_NX_CT_NW_PROTO"),
    ("ct_tp_src", "NXM_NX_CT_TP_SRC"),
    ("ct_tp_dst", "NXM_NX_CT_TP_DST"),
    ("reg0", "NXM_NX_REG0"),
    ("reg1", "NXM_NX_REG1"),
    ("reg2", "NXM_NX_REG2"),
    ("reg3", "NXM_NX_REG3"),
    ("reg4", "NXM_NX_REG4"),
    ("reg5", "NXM_NX_REG5"),
    ("reg6", "NXM_NX_REG6"),
    ("reg7", "NXM_NX_REG7"),
    ("reg8", "NXM_NX_REG8"),
    ("reg9", "NXM_NX_REG9"),
    ("reg10", "NXM_NX_REG10"),
    ("reg11", "NXM_NX_REG11"),
    ("reg12", "NXM_NX_REG12"),
    ("reg13", "NXM_NX_REG13"),
    ("reg14", "NXM_NX_REG14"),
    ("reg15", "NXM_NX_REG15"),
    ("xreg0", "OXM_OF_PKT_REG0"),
    ("xreg1", "OXM_OF_PKT_REG1"),
    ("xreg2", "OXM_OF_PKT_REG2"),
    ("xreg3", "OXM_OF_PKT_REG3"),
    ("xreg4", "OXM_OF_PKT_REG4"),
    ("xreg5", "OXM_OF_PKT_REG5"),
    ("xreg6", "OXM_OF_PKT_REG6"),
    ("xreg7", "OXM_OF_PKT_REG7"),
    ("xxreg0", "NXM_NX_XXREG0"),
    ("xxreg1", "NXM_NX_XXREG1"),
    ("xxreg2", "NXM_NX_XXREG2"),
    ("xxreg3", "NXM_NX_XXREG3"),
    ("dl_src", "NXM_OF_ETH_SRC"),
    ("eth_src", "NXM_OF_ETH_SRC"),
    ("dl_dst", "NXM_OF_ETH_DST"),
    ("eth_dst", "NXM_OF_ETH_DST"),
    ("dl_type", "NXM_OF_ETH_TYPE"),
    ("eth_type", "NXM_OF_ETH_TYPE"),
    ("vlan_tci", "NXM_OF_VLAN_TCI"),
    ("vlan_vid", "OXM_OF_VLAN_VID"),
    ("mpls_label", "OXM_OF_MPLS_LABEL"),
    ("mpls_tc", "OXM_OF_MPLS_TC"),
    ("mpls_bos", "OXM_OF_MPLS_BOS"),
    ("mpls_ttl", "NXM_NX_MPLS_TTL"),
    ("nw_src", "NXM_OF_IP_SRC"),
    ("ip_src", "NXM_OF_IP_SRC"),
    ("nw_dst", "NXM_OF_IP_DST"),
    ("ip_dst", "NXM_OF_IP_DST"),
    ("ipv6_src", "NXM_NX_IPV6_SRC"),
    ("ipv6_dst", "NXM_NX_IPV6_DST"),
    ("ipv6_label", "NXM_NX_IPV6_LABEL"),
    ("nw_proto", "NXM_OF_IP_PROTO"),
    ("ip_proto", "NXM_OF_IP_PROTO"),
    ("nw_ttl", "NXM_NX_IP_TTL"),
    ("nw_frag", "NXM_NX_IP_FRAG"),
    ("nw_tos", "NXM_OF_IP_TOS"),
    ("ip_dscp", "OXM_OF_IP_DSCP"),
    ("nw_ecn", "NXM_NX_IP_ECN"),
    ("ip_ecn", "NXM_NX_IP_ECN"),
    ("arp_op", "NXM_OF_ARP_OP"),
    ("arp_spa", "NXM_OF_ARP_SPA"),
    ("arp_tpa", "NXM_OF_ARP_TPA"),
    ("arp_sha", "NXM_NX_ARP_SHA"),
    ("arp_tha", "NXM_NX_ARP_THA"),
    ("tcp_src", "NXM_OF_TCP_SRC"),
    ("tcp_dst", "NXM_OF_TCP_DST"),
    ("tcp_flags", "NXM_NX_TCP_FLAGS"),
    ("udp_src", "NXM_OF_UDP_SRC"),
    ("udp_dst", "NXM_OF_UDP_DST"),
    ("sctp_src", "OXM_OF_SCTP_SRC"),
    ("sctp_dst", "OXM_OF_SCTP_DST"),
    ("icmp_type", "NXM_OF_ICMP_TYPE"),
    ("icmp_code", "NXM_OF_ICMP_CODE"),
    ("icmpv6_type", "NXM_NX_ICMPV6_TYPE"),
    ("icmpv6_code", "NXM_NX_ICMPV6_CODE"),
    ("nd_target", "NXM_NX_ND_TARGET"),
    ("nd_sll", "NXM_NX_ND_SLL"),
    ("nd_tll", "NXM_NX_ND_TLL"),
];

/// Other header names that parse (the OXM spelling of fields printed by
/// their Nicira name), as (header name, flow field name).
static MORE: &[(&str, &str)] = &[
    ("OXM_OF_IN_PORT", "in_port"),
    ("OXM_OF_TUNNEL_ID", "tun_id"),
    ("OXM_OF_ETH_SRC", "eth_src"),
    ("OXM_OF_ETH_DST", "eth_dst"),
    ("OXM_OF_ETH_TYPE", "eth_type"),
    ("OXM_OF_IPV4_SRC", "ip_src"),
    ("OXM_OF_IPV4_DST", "ip_dst"),
    ("OXM_OF_IPV6_SRC", "ipv6_src"),
    ("OXM_OF_IPV6_DST", "ipv6_dst"),
    ("OXM_OF_IPV6_FLABEL", "ipv6_label"),
    ("OXM_OF_IP_PROTO", "ip_proto"),
    ("OXM_OF_IP_ECN", "ip_ecn"),
    ("OXM_OF_ARP_OP", "arp_op"),
    ("OXM_OF_ARP_SPA", "arp_spa"),
    ("OXM_OF_ARP_TPA", "arp_tpa"),
    ("OXM_OF_ARP_SHA", "arp_sha"),
    ("OXM_OF_ARP_THA", "arp_tha"),
    ("OXM_OF_TCP_SRC", "tcp_src"),
    ("OXM_OF_TCP_DST", "tcp_dst"),
    ("OXM_OF_UDP_SRC", "udp_src"),
    ("OXM_OF_UDP_DST", "udp_dst"),
    ("OXM_OF_ICMPV4_TYPE", "icmp_type"),
    ("OXM_OF_ICMPV4_CODE", "icmp_code"),
    ("OXM_OF_ICMPV6_TYPE", "icmpv6_type"),
    ("OXM_OF_ICMPV6_CODE", "icmpv6_code"),
    ("OXM_OF_IPV6_ND_TARGET", "nd_target"),
    ("OXM_OF_IPV6_ND_SLL", "nd_sll"),
    ("OXM_OF_IPV6_ND_TLL", "nd_tll"),
];

/// The flow field a name denotes: its ovs-ofctl name or a header name.
pub fn field_by_any_name(name: &str) -> Option<&'static FieldDef> {
    by_name(name)
        .or_else(|| NAMES.iter().find(|(_, h)| h.eq_ignore_ascii_case(name)).and_then(|(f, _)| by_name(f)))
        .or_else(|| MORE.iter().find(|(h, _)| h.eq_ignore_ascii_case(name)).and_then(|(_, f)| by_name(f)))
}

/// The name ovs-ofctl prints for `f` in a sub-field.
pub fn print_name(f: &FieldDef) -> &'static str {
    NAMES.iter().find(|(n, _)| *n == f.name).map(|(_, h)| *h).unwrap_or(f.name)
}

/// A field's width in OpenFlow: its width in the key, except `in_port`,
/// which the key holds in 32 bits and NXM_OF_IN_PORT names in 16.
pub fn of_bits(f: &FieldDef) -> u32 {
    if f.loc == flow::key::loc::IN_PORT {
        16
    } else {
        f.loc.bits
    }
}

/// Bits `ofs .. ofs + n_bits` of `field` (bit 0 is the least significant).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubField {
    pub field: &'static FieldDef,
    pub ofs: u32,
    pub n_bits: u32,
}

impl SubField {
    /// The whole of `field`.
    pub fn whole(field: &'static FieldDef) -> SubField {
        SubField { field, ofs: 0, n_bits: of_bits(field) }
    }

    /// A checked sub-field: at least one bit, within the field.
    pub fn new(field: &'static FieldDef, ofs: u32, n_bits: u32) -> Option<SubField> {
        (n_bits >= 1 && ofs.checked_add(n_bits)? <= of_bits(field)).then_some(SubField { field, ofs, n_bits })
    }

    /// All ones in the sub-field's width.
    pub fn ones(&self) -> u128 {
        if self.n_bits >= 128 {
            u128::MAX
        } else {
            (1u128 << self.n_bits) - 1
        }
    }

    /// The sub-field's bits as a mask in the field's own coordinates.
    pub fn mask(&self) -> u128 {
        self.ones() << self.ofs
    }

    /// Whether it is the whole field (`FIELD[]`).
    pub fn is_whole(&self) -> bool {
        self.ofs == 0 && self.n_bits == of_bits(self.field)
    }

    /// Parses `NAME[]`, `NAME[i]`, `NAME[a..b]`, or a bare `NAME` (the
    /// whole field) where `bare_ok`.
    pub fn parse(s: &str, bare_ok: bool) -> Result<SubField, ParseError> {
        let s = s.trim();
        let (name, range) = match s.find('[') {
            Some(i) if s.ends_with(']') => (&s[..i], Some(&s[i + 1..s.len() - 1])),
            Some(_) => return Err(perr(s, "unbalanced '[' in sub-field")),
            None if bare_ok => (s, None),
            None => return Err(perr(s, "sub-field needs [] or [start..end]")),
        };
        let field = field_by_any_name(name).ok_or_else(|| perr(s, format!("unknown field '{name}'")))?;
        let num = |t: &str| t.trim().parse::<u32>().map_err(|_| perr(s, format!("bad bit index '{t}'")));
        let (ofs, n_bits) = match range.map(str::trim) {
            None | Some("") => (0, of_bits(field)),
            Some(r) => match r.split_once("..") {
                Some((a, b)) => {
                    let (a, b) = (num(a)?, num(b)?);
                    if b < a {
                        return Err(perr(s, "sub-field end before start"));
                    }
                    (a, b - a + 1)
                }
                None => (num(r)?, 1),
            },
        };
        SubField::new(field, ofs, n_bits).ok_or_else(|| {
            perr(s, format!("bits {ofs}..{} outside {}'s {} bits", ofs + n_bits - 1, field.name, field.loc.bits))
        })
    }
}

impl fmt::Display for SubField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", print_name(self.field))?;
        if self.ofs == 0 && self.n_bits == of_bits(self.field) {
            write!(f, "[]")
        } else if self.n_bits == 1 {
            write!(f, "[{}]", self.ofs)
        } else {
            write!(f, "[{}..{}]", self.ofs, self.ofs + self.n_bits - 1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_as_ovs_ofctl() {
        for (text, printed) in [
            ("NXM_NX_REG0[0..15]", "NXM_NX_REG0[0..15]"),
            ("reg0[0..15]", "NXM_NX_REG0[0..15]"),
            ("reg1[]", "NXM_NX_REG1[]"),
            ("reg3[4]", "NXM_NX_REG3[4]"),
            ("eth_src[]", "NXM_OF_ETH_SRC[]"),
            ("xreg3[0..15]", "OXM_OF_PKT_REG3[0..15]"),
            ("xxreg3[100]", "NXM_NX_XXREG3[100]"),
            ("OXM_OF_PKT_REG1[]", "OXM_OF_PKT_REG1[]"),
            ("ip_dst[0..7]", "NXM_OF_IP_DST[0..7]"),
            ("NXM_OF_IN_PORT[]", "NXM_OF_IN_PORT[]"),
            ("in_port[0..15]", "NXM_OF_IN_PORT[]"),
        ] {
            assert_eq!(SubField::parse(text, false).unwrap().to_string(), printed, "{text}");
        }
        let s = SubField::parse("reg1[16..31]", false).unwrap();
        assert_eq!((s.ofs, s.n_bits, s.mask()), (16, 16, 0xffff_0000));
        assert!(SubField::parse("reg0[0..32]", false).is_err());
        assert!(SubField::parse("reg0[5..4]", false).is_err());
        assert!(SubField::parse("reg16[]", false).is_err());
        assert!(SubField::parse("reg0", false).is_err());
        assert_eq!(SubField::parse("reg0", true).unwrap().n_bits, 32);
    }
}
