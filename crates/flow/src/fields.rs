//! The field table: every matchable field, its names in ovs-ofctl syntax,
//! where it lives in the key, how its value is written, and its
//! prerequisites.

use crate::key::{ethertype as et, ipproto, loc, FlowKey, Loc};

/// How a field's value is written and read in ovs-ofctl syntax.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Decimal or 0x-hex integer; mask written in hex.
    Int,
    /// Printed in hex (dl_type, vlan_tci, metadata...).
    Hex,
    Mac,
    Ipv4,
    Ipv6,
    /// `nw_frag`: no, yes, first, later, not_later.
    Frag,
    /// `tcp_flags`: hex or +syn-ack... (hex only for now, flags on print).
    TcpFlags,
    /// `ct_state`: hex or +trk+new... flags.
    CtState,
}

/// What must hold in a match before this field may be matched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prereq {
    None,
    Ipv4,
    Arp,
    Ipv6,
    /// IPv4 or IPv6.
    IpAny,
    /// IPv4 or IPv6 with nw_proto TCP, UDP or SCTP.
    Transport,
    Tcp,
    Icmp4,
    Icmp6,
    /// ICMPv6 neighbour solicitation or advertisement.
    Nd,
    /// Neighbour solicitation (source link-layer address).
    NdNs,
    /// Neighbour advertisement (target link-layer address).
    NdNa,
    /// An MPLS frame: dl_type 0x8847 (unicast) or 0x8848 (multicast).
    Mpls,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldDef {
    pub name: &'static str,
    pub loc: Loc,
    pub kind: Kind,
    pub maskable: bool,
    pub prereq: Prereq,
    /// Shares its bits with an earlier field (another name or a sub-range).
    pub alias: bool,
}

impl FieldDef {
    #[inline]
    pub fn get(&self, k: &FlowKey) -> u128 {
        self.loc.get(k)
    }
    #[inline]
    pub fn set(&self, k: &mut FlowKey, v: u128) {
        self.loc.set(k, v)
    }
    /// The full mask of this field as a key-shaped mask.
    pub fn mask(&self) -> FlowKey {
        let mut m = FlowKey::ZERO;
        self.loc.set(&mut m, self.loc.max());
        m
    }
}

const fn f(name: &'static str, loc: Loc, kind: Kind, prereq: Prereq) -> FieldDef {
    FieldDef { name, loc, kind, maskable: true, prereq, alias: false }
}
const fn a(name: &'static str, loc: Loc, kind: Kind, prereq: Prereq) -> FieldDef {
    FieldDef { name, loc, kind, maskable: true, prereq, alias: true }
}

use Kind::*;
use Prereq as P;

/// All fields, canonical names first. Printing uses the first name whose
/// prerequisites the match satisfies.
pub static FIELDS: &[FieldDef] = &[
    FieldDef { maskable: false, ..f("in_port", loc::IN_PORT, Int, P::None) },
    FieldDef { maskable: false, ..f("recirc_id", loc::RECIRC_ID, Int, P::None) },
    f("pkt_mark", loc::PKT_MARK, Hex, P::None),
    f("dp_hash", loc::DP_HASH, Hex, P::None),
    f("metadata", loc::METADATA, Hex, P::None),
    f("tun_id", loc::TUN_ID, Hex, P::None),
    f("tun_src", loc::TUN_SRC, Ipv4, P::None),
    f("tun_dst", loc::TUN_DST, Ipv4, P::None),
    f("tun_ipv6_src", loc::TUN_IPV6_SRC, Ipv6, P::None),
    f("tun_ipv6_dst", loc::TUN_IPV6_DST, Ipv6, P::None),
    f("ct_state", loc::CT_STATE, CtState, P::None),
    f("ct_zone", loc::CT_ZONE, Int, P::None),
    f("ct_mark", loc::CT_MARK, Hex, P::None),
    f("ct_label", loc::CT_LABEL, Hex, P::None),
    f("ct_nw_src", loc::CT_NW_SRC, Ipv4, P::None),
    f("ct_nw_dst", loc::CT_NW_DST, Ipv4, P::None),
    FieldDef { maskable: false, ..f("ct_nw_proto", loc::CT_NW_PROTO, Int, P::None) },
    f("ct_tp_src", loc::CT_TP_SRC, Int, P::None),
    f("ct_tp_dst", loc::CT_TP_DST, Int, P::None),
    f("reg0", loc::REGS[0], Hex, P::None),
    f("reg1", loc::REGS[1], Hex, P::None),
    f("reg2", loc::REGS[2], Hex, P::None),
    f("reg3", loc::REGS[3], Hex, P::None),
    f("reg4", loc::REGS[4], Hex, P::None),
    f("reg5", loc::REGS[5], Hex, P::None),
    f("reg6", loc::REGS[6], Hex, P::None),
    f("reg7", loc::REGS[7], Hex, P::None),
    f("reg8", loc::REGS[8], Hex, P::None),
    f("reg9", loc::REGS[9], Hex, P::None),
    f("reg10", loc::REGS[10], Hex, P::None),
    f("reg11", loc::REGS[11], Hex, P::None),
    f("reg12", loc::REGS[12], Hex, P::None),
    f("reg13", loc::REGS[13], Hex, P::None),
    f("reg14", loc::REGS[14], Hex, P::None),
    f("reg15", loc::REGS[15], Hex, P::None),
    f("tun_flags", loc::TUN_FLAGS, Int, P::None),
    f("tun_tos", loc::TUN_TOS, Int, P::None),
    f("tun_ttl", loc::TUN_TTL, Int, P::None),
    f("tun_gbp_id", loc::TUN_GBP_ID, Hex, P::None),
    f("tun_gbp_flags", loc::TUN_GBP_FLAGS, Hex, P::None),
    f("tun_metadata0", loc::TUN_METADATA[0], Hex, P::None),
    f("tun_metadata1", loc::TUN_METADATA[1], Hex, P::None),
    FieldDef { maskable: false, ..f("conj_id", loc::CONJ_ID, Int, P::None) },
    f("dl_dst", loc::DL_DST, Mac, P::None),
    FieldDef { maskable: false, ..f("dl_type", loc::DL_TYPE, Hex, P::None) },
    f("dl_src", loc::DL_SRC, Mac, P::None),
    f("vlan_tci", loc::VLAN_TCI, Hex, P::None),
    f("vlan_tci2", loc::VLAN_TCI2, Hex, P::None),
    // MPLS fields are not maskable in OpenFlow (OXM MPLS_LABEL/TC/BOS).
    FieldDef { maskable: false, ..f("mpls_label", loc::MPLS_LABEL, Int, P::Mpls) },
    FieldDef { maskable: false, ..f("mpls_tc", loc::MPLS_TC, Int, P::Mpls) },
    FieldDef { maskable: false, ..f("mpls_bos", loc::MPLS_BOS, Int, P::Mpls) },
    FieldDef { maskable: false, ..f("mpls_ttl", loc::MPLS_TTL, Int, P::Mpls) },
    f("nw_src", loc::NW_SRC, Ipv4, P::Ipv4),
    f("nw_dst", loc::NW_DST, Ipv4, P::Ipv4),
    f("ipv6_src", loc::IPV6_SRC, Ipv6, P::Ipv6),
    f("ipv6_dst", loc::IPV6_DST, Ipv6, P::Ipv6),
    f("ipv6_label", loc::IPV6_LABEL, Hex, P::Ipv6),
    FieldDef { maskable: false, ..f("nw_proto", loc::NW_PROTO, Int, P::IpAny) },
    f("nw_tos", loc::NW_TOS, Int, P::IpAny),
    f("nw_ttl", loc::NW_TTL, Int, P::IpAny),
    f("nw_frag", loc::NW_FRAG, Frag, P::IpAny),
    f("arp_sha", loc::ARP_SHA, Mac, P::Arp),
    f("arp_tha", loc::ARP_THA, Mac, P::Arp),
    f("nd_target", loc::ND_TARGET, Ipv6, P::Nd),
    f("tp_src", loc::TP_SRC, Int, P::Transport),
    f("tp_dst", loc::TP_DST, Int, P::Transport),
    f("tcp_flags", loc::TCP_FLAGS, TcpFlags, P::Tcp),
    // Other names for the same bits, by protocol.
    a("eth_dst", loc::DL_DST, Mac, P::None),
    a("eth_src", loc::DL_SRC, Mac, P::None),
    a("eth_type", loc::DL_TYPE, Hex, P::None),
    a("tunnel_id", loc::TUN_ID, Hex, P::None),
    a("xreg0", loc::xreg(0), Hex, P::None),
    a("xreg1", loc::xreg(1), Hex, P::None),
    a("xreg2", loc::xreg(2), Hex, P::None),
    a("xreg3", loc::xreg(3), Hex, P::None),
    a("xreg4", loc::xreg(4), Hex, P::None),
    a("xreg5", loc::xreg(5), Hex, P::None),
    a("xreg6", loc::xreg(6), Hex, P::None),
    a("xreg7", loc::xreg(7), Hex, P::None),
    a("xxreg0", loc::xxreg(0), Hex, P::None),
    a("xxreg1", loc::xxreg(1), Hex, P::None),
    a("xxreg2", loc::xxreg(2), Hex, P::None),
    a("xxreg3", loc::xxreg(3), Hex, P::None),
    // vlan_vid as OpenFlow 1.3 writes it: VID plus the 0x1000 "present" bit.
    a("vlan_vid", Loc::new(loc::VLAN_TCI.word, loc::VLAN_TCI.shift, 13), Hex, P::None),
    // dl_vlan / dl_vlan_pcp: parsed specially (they imply a present tag).
    FieldDef { maskable: false, ..a("dl_vlan", Loc::new(loc::VLAN_TCI.word, loc::VLAN_TCI.shift, 12), Int, P::None) },
    FieldDef {
        maskable: false,
        ..a("dl_vlan_pcp", Loc::new(loc::VLAN_TCI.word, loc::VLAN_TCI.shift + 13, 3), Int, P::None)
    },
    a("ip_src", loc::NW_SRC, Ipv4, P::Ipv4),
    a("ip_dst", loc::NW_DST, Ipv4, P::Ipv4),
    a("arp_spa", loc::NW_SRC, Ipv4, P::Arp),
    a("arp_tpa", loc::NW_DST, Ipv4, P::Arp),
    FieldDef { maskable: false, ..a("arp_op", loc::NW_PROTO, Int, P::Arp) },
    FieldDef { maskable: false, ..a("ip_proto", loc::NW_PROTO, Int, P::IpAny) },
    FieldDef { maskable: false, ..a("ip_dscp", Loc::new(loc::NW_TOS.word, loc::NW_TOS.shift + 2, 6), Int, P::IpAny) },
    FieldDef { maskable: false, ..a("nw_ecn", Loc::new(loc::NW_TOS.word, loc::NW_TOS.shift, 2), Int, P::IpAny) },
    FieldDef { maskable: false, ..a("ip_ecn", Loc::new(loc::NW_TOS.word, loc::NW_TOS.shift, 2), Int, P::IpAny) },
    a("nd_sll", loc::ARP_SHA, Mac, P::NdNs),
    a("nd_tll", loc::ARP_THA, Mac, P::NdNa),
    a("tcp_src", loc::TP_SRC, Int, P::Tcp),
    a("tcp_dst", loc::TP_DST, Int, P::Tcp),
    a("udp_src", loc::TP_SRC, Int, P::Transport),
    a("udp_dst", loc::TP_DST, Int, P::Transport),
    a("sctp_src", loc::TP_SRC, Int, P::Transport),
    a("sctp_dst", loc::TP_DST, Int, P::Transport),
    FieldDef { maskable: false, ..a("icmp_type", loc::TP_SRC, Int, P::Icmp4) },
    FieldDef { maskable: false, ..a("icmp_code", loc::TP_DST, Int, P::Icmp4) },
    FieldDef { maskable: false, ..a("icmpv6_type", loc::TP_SRC, Int, P::Icmp6) },
    FieldDef { maskable: false, ..a("icmpv6_code", loc::TP_DST, Int, P::Icmp6) },
];

pub fn by_name(name: &str) -> Option<&'static FieldDef> {
    FIELDS.iter().find(|f| f.name == name)
}

impl Prereq {
    /// Whether a (key, mask) pair pins down what this prerequisite needs.
    pub fn holds(&self, key: &FlowKey, mask: &FlowKey) -> bool {
        let dl = |t: u16| mask.dl_type() == 0xffff && key.dl_type() == t;
        let ip_any = dl(et::IPV4) || dl(et::IPV6);
        let proto = |p: u8| ip_any && mask.nw_proto() == 0xff && key.nw_proto() == p;
        let icmp6_type =
            |t: u16| proto(ipproto::ICMPV6) && dl(et::IPV6) && mask.tp_src() == 0xffff && key.tp_src() == t;
        match self {
            P::None => true,
            P::Ipv4 => dl(et::IPV4),
            P::Arp => dl(et::ARP) || dl(et::RARP),
            P::Ipv6 => dl(et::IPV6),
            P::IpAny => ip_any,
            P::Transport => proto(ipproto::TCP) || proto(ipproto::UDP) || proto(ipproto::SCTP),
            P::Tcp => proto(ipproto::TCP),
            P::Icmp4 => dl(et::IPV4) && proto(ipproto::ICMP),
            P::Icmp6 => dl(et::IPV6) && proto(ipproto::ICMPV6),
            P::Nd => icmp6_type(135) || icmp6_type(136),
            P::NdNs => icmp6_type(135),
            P::NdNa => icmp6_type(136),
            P::Mpls => dl(et::MPLS) || dl(et::MPLS_MCAST),
        }
    }

    /// Whether a concrete packet's key satisfies this prerequisite (what
    /// translation uses before it reads or writes the field).
    pub fn holds_for_packet(&self, key: &FlowKey) -> bool {
        self.holds(key, &FlowKey::ALL_ONES)
    }

    /// The bits of the key that deciding this prerequisite consults.
    pub fn mask(&self) -> FlowKey {
        let mut m = FlowKey::ZERO;
        let dl = |m: &mut FlowKey| m.set_dl_type(0xffff);
        match self {
            P::None => {}
            P::Ipv4 | P::Arp | P::Ipv6 | P::IpAny | P::Mpls => dl(&mut m),
            P::Transport | P::Tcp | P::Icmp4 | P::Icmp6 => {
                dl(&mut m);
                m.set_nw_proto(0xff);
            }
            P::Nd | P::NdNs | P::NdNa => {
                dl(&mut m);
                m.set_nw_proto(0xff);
                m.set_tp_src(0xffff);
            }
        }
        m
    }
}
