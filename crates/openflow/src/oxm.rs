//! Matches as type-length-value lists: Nicira NXM (OpenFlow 1.0 with the
//! Nicira extensions) and OXM (OpenFlow 1.2+). Both use the same 32-bit
//! header (class:16, field:7, hasmask:1, length:8), followed by the value
//! and, when hasmask is set, a mask of the same size. Class 0x0000/0x0001
//! are Nicira's, 0x8000 is OpenFlow basic, 0xffff is an experimenter
//! class whose header is followed by a 32-bit experimenter id.
//!
//! Decoding accepts any header we know in either flavour (as Open vSwitch
//! does), rejects duplicates, masks on unmaskable fields, wrong lengths and
//! unknown fields with the spec's BAD_MATCH codes, and checks
//! prerequisites after the whole list is read (BAD_PREREQ). Encoding picks,
//! per flavour, one header for every field the match constrains.

use crate::bytes::{be_uint, Rd, Wr};
use crate::error::ErrorKind;
use flow::fields::{by_name, FieldDef, Prereq};
use flow::key::ipproto;
use flow::Match;

/// Which flavour an encoding is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    Nxm,
    Oxm,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sp {
    /// The wire value is the field's value.
    Plain,
    /// OXM in_port: 32-bit OpenFlow 1.1+ numbering.
    InPort32,
    /// OXM VLAN_PCP: the priority bits; implies a present tag.
    VlanPcp,
    /// NXM_OF_IP_TOS: the TOS byte with the ECN bits zero (the DSCP field
    /// shifted left by 2).
    IpTos,
    /// NXM_NX_COOKIE: the flow cookie (in NXT flow mods and stats requests).
    Cookie,
    /// A variable-length field (`tun_metadataN`): Open vSwitch sends only
    /// the bytes the value and mask need (1 to `len`), right-aligned.
    VarLen,
}

/// Which encodings emit an entry (decoding accepts every entry).
const N: u8 = 1;
const O: u8 = 2;
const B: u8 = N | O;
const DEC: u8 = 0;
/// Never emitted in a match (other entries cover the same bits), but the
/// header of writes that name this field (set_field, load, move).
const W: u8 = 4;

struct Entry {
    class: u16,
    field: u8,
    /// Experimenter id for class 0xffff.
    exp: u32,
    /// Value length in bytes on the wire.
    len: u8,
    maskable: bool,
    /// The flow field it sets (ovs-ofctl name).
    name: &'static str,
    sp: Sp,
    /// An exact IP protocol the field needs, beyond the field's own prerequisite.
    proto: Option<u8>,
    enc: u8,
}

const fn e(class: u16, field: u8, len: u8, maskable: bool, name: &'static str, enc: u8) -> Entry {
    Entry { class, field, exp: 0, len, maskable, name, sp: Sp::Plain, proto: None, enc }
}

const NXM0: u16 = 0x0000;
const NXM1: u16 = 0x0001;
const OXM: u16 = 0x8000;
const EXP: u16 = 0xffff;
/// OFPXMC_PACKET_REGS: OpenFlow 1.5's 64-bit packet registers (xreg0-7).
const PKT_REGS: u16 = 0x8001;
const ONF: u32 = 0x4f4e4600;

/// Every header we know. Order is encoding order.
static ENTRIES: &[Entry] = &[
    Entry { sp: Sp::Plain, ..e(NXM0, 0, 2, false, "in_port", N) },
    Entry { sp: Sp::InPort32, ..e(OXM, 0, 4, false, "in_port", O) },
    e(OXM, 2, 8, true, "metadata", B),
    e(NXM0, 1, 6, true, "dl_dst", N),
    e(OXM, 3, 6, true, "dl_dst", O),
    e(NXM0, 2, 6, true, "dl_src", N),
    e(OXM, 4, 6, true, "dl_src", O),
    e(NXM0, 3, 2, false, "dl_type", N),
    e(OXM, 5, 2, false, "dl_type", O),
    e(NXM0, 4, 2, true, "vlan_tci", N),
    e(OXM, 6, 2, true, "vlan_vid", O),
    Entry { sp: Sp::VlanPcp, ..e(OXM, 7, 1, false, "dl_vlan_pcp", O) },
    Entry { sp: Sp::IpTos, ..e(NXM0, 5, 1, false, "ip_dscp", N) },
    e(OXM, 8, 1, false, "ip_dscp", O),
    e(NXM1, 28, 1, false, "ip_ecn", N),
    e(OXM, 9, 1, false, "ip_ecn", O),
    e(NXM0, 6, 1, false, "nw_proto", N),
    e(OXM, 10, 1, false, "nw_proto", O),
    e(NXM0, 15, 2, false, "arp_op", N),
    e(OXM, 21, 2, false, "arp_op", O),
    e(NXM0, 7, 4, true, "nw_src", N),
    e(OXM, 11, 4, true, "nw_src", O),
    e(NXM0, 8, 4, true, "nw_dst", N),
    e(OXM, 12, 4, true, "nw_dst", O),
    e(NXM0, 16, 4, true, "arp_spa", N),
    e(OXM, 22, 4, true, "arp_spa", O),
    e(NXM0, 17, 4, true, "arp_tpa", N),
    e(OXM, 23, 4, true, "arp_tpa", O),
    e(NXM1, 17, 6, true, "arp_sha", N),
    e(OXM, 24, 6, true, "arp_sha", O),
    e(NXM1, 18, 6, true, "arp_tha", N),
    e(OXM, 25, 6, true, "arp_tha", O),
    e(NXM1, 19, 16, true, "ipv6_src", N),
    e(OXM, 26, 16, true, "ipv6_src", O),
    e(NXM1, 20, 16, true, "ipv6_dst", N),
    e(OXM, 27, 16, true, "ipv6_dst", O),
    e(NXM1, 27, 4, true, "ipv6_label", N),
    e(OXM, 28, 4, true, "ipv6_label", O),
    e(NXM0, 9, 2, true, "tcp_src", N),
    e(OXM, 13, 2, true, "tcp_src", O),
    e(NXM0, 10, 2, true, "tcp_dst", N),
    e(OXM, 14, 2, true, "tcp_dst", O),
    Entry { proto: Some(ipproto::UDP), ..e(NXM0, 11, 2, true, "udp_src", N) },
    Entry { proto: Some(ipproto::UDP), ..e(OXM, 15, 2, true, "udp_src", O) },
    Entry { proto: Some(ipproto::UDP), ..e(NXM0, 12, 2, true, "udp_dst", N) },
    Entry { proto: Some(ipproto::UDP), ..e(OXM, 16, 2, true, "udp_dst", O) },
    Entry { proto: Some(ipproto::SCTP), ..e(OXM, 17, 2, true, "sctp_src", B) },
    Entry { proto: Some(ipproto::SCTP), ..e(OXM, 18, 2, true, "sctp_dst", B) },
    e(NXM0, 13, 1, false, "icmp_type", N),
    e(OXM, 19, 1, false, "icmp_type", O),
    e(NXM0, 14, 1, false, "icmp_code", N),
    e(OXM, 20, 1, false, "icmp_code", O),
    e(NXM1, 21, 1, false, "icmpv6_type", N),
    e(OXM, 29, 1, false, "icmpv6_type", O),
    e(NXM1, 22, 1, false, "icmpv6_code", N),
    e(OXM, 30, 1, false, "icmpv6_code", O),
    e(NXM1, 23, 16, true, "nd_target", N),
    e(OXM, 31, 16, true, "nd_target", O),
    e(NXM1, 24, 6, true, "nd_sll", N),
    e(OXM, 32, 6, true, "nd_sll", O),
    e(NXM1, 25, 6, true, "nd_tll", N),
    e(OXM, 33, 6, true, "nd_tll", O),
    // MPLS top label stack entry; OVS uses the OXM form under NXM too.
    e(OXM, 34, 4, false, "mpls_label", B),
    e(OXM, 35, 1, false, "mpls_tc", B),
    e(OXM, 36, 1, false, "mpls_bos", B),
    e(NXM1, 26, 1, true, "nw_frag", B),
    e(NXM1, 29, 1, false, "nw_ttl", B),
    e(NXM1, 34, 2, true, "tcp_flags", B),
    Entry { exp: ONF, ..e(EXP, 42, 2, true, "tcp_flags", DEC) },
    e(OXM, 42, 2, true, "tcp_flags", DEC),
    e(NXM1, 16, 8, true, "tun_id", N),
    e(OXM, 38, 8, true, "tun_id", O),
    e(NXM1, 31, 4, true, "tun_src", B),
    e(NXM1, 32, 4, true, "tun_dst", B),
    e(NXM1, 109, 16, true, "tun_ipv6_src", B),
    e(NXM1, 110, 16, true, "tun_ipv6_dst", B),
    e(NXM1, 33, 4, true, "pkt_mark", B),
    e(NXM1, 35, 4, true, "dp_hash", B),
    e(NXM1, 36, 4, false, "recirc_id", B),
    e(NXM1, 105, 4, true, "ct_state", B),
    e(NXM1, 106, 2, false, "ct_zone", B),
    e(NXM1, 107, 4, true, "ct_mark", B),
    e(NXM1, 108, 16, true, "ct_label", B),
    e(NXM1, 119, 1, false, "ct_nw_proto", B),
    e(NXM1, 120, 4, true, "ct_nw_src", B),
    e(NXM1, 121, 4, true, "ct_nw_dst", B),
    e(NXM1, 124, 2, true, "ct_tp_src", B),
    e(NXM1, 125, 2, true, "ct_tp_dst", B),
    // Registers (ovs-fields(7)): NXM_NX_REG0-15 are what a match carries,
    // as Open vSwitch encodes it; xreg (OXM_OF_PKT_REG0-7) and xxreg
    // (NXM_NX_XXREG0-3) overlay them and are decoded into the same bits.
    e(NXM1, 0, 4, true, "reg0", B),
    e(NXM1, 1, 4, true, "reg1", B),
    e(NXM1, 2, 4, true, "reg2", B),
    e(NXM1, 3, 4, true, "reg3", B),
    e(NXM1, 4, 4, true, "reg4", B),
    e(NXM1, 5, 4, true, "reg5", B),
    e(NXM1, 6, 4, true, "reg6", B),
    e(NXM1, 7, 4, true, "reg7", B),
    e(NXM1, 8, 4, true, "reg8", B),
    e(NXM1, 9, 4, true, "reg9", B),
    e(NXM1, 10, 4, true, "reg10", B),
    e(NXM1, 11, 4, true, "reg11", B),
    e(NXM1, 12, 4, true, "reg12", B),
    e(NXM1, 13, 4, true, "reg13", B),
    e(NXM1, 14, 4, true, "reg14", B),
    e(NXM1, 15, 4, true, "reg15", B),
    e(PKT_REGS, 0, 8, true, "xreg0", W),
    e(PKT_REGS, 1, 8, true, "xreg1", W),
    e(PKT_REGS, 2, 8, true, "xreg2", W),
    e(PKT_REGS, 3, 8, true, "xreg3", W),
    e(PKT_REGS, 4, 8, true, "xreg4", W),
    e(PKT_REGS, 5, 8, true, "xreg5", W),
    e(PKT_REGS, 6, 8, true, "xreg6", W),
    e(PKT_REGS, 7, 8, true, "xreg7", W),
    e(NXM1, 111, 16, true, "xxreg0", W),
    e(NXM1, 112, 16, true, "xxreg1", W),
    e(NXM1, 113, 16, true, "xxreg2", W),
    e(NXM1, 114, 16, true, "xxreg3", W),
    // Geneve options bound by the TLV map (4-byte fields here).
    Entry { sp: Sp::VarLen, ..e(NXM1, 40, 4, true, "tun_metadata0", B) },
    Entry { sp: Sp::VarLen, ..e(NXM1, 41, 4, true, "tun_metadata1", B) },
    e(NXM1, 37, 4, false, "conj_id", B),
    Entry { sp: Sp::Cookie, ..e(NXM1, 30, 8, true, "cookie", DEC) },
];

/// The flow field of each entry of [`ENTRIES`], looked up once (encoding
/// runs for every flow of a dump).
fn defs() -> &'static [&'static FieldDef] {
    static CACHE: std::sync::OnceLock<Vec<&'static FieldDef>> = std::sync::OnceLock::new();
    CACHE.get_or_init(|| {
        // Every name in ENTRIES is in the flow field table (a unit test checks it).
        let fallback = by_name("in_port").expect("in_port");
        ENTRIES.iter().map(|e| by_name(e.name).unwrap_or(fallback)).collect()
    })
}

/// The flow field an entry sets.
fn def_of(ent: &'static Entry) -> &'static FieldDef {
    let i = (ent as *const Entry as usize - ENTRIES.as_ptr() as usize) / std::mem::size_of::<Entry>();
    defs()[i]
}

fn def(name: &str) -> &'static FieldDef {
    by_name(name).unwrap_or_else(|| by_name("in_port").expect("in_port"))
}

/// OpenFlow 1.0 port number (our numbering) -> OpenFlow 1.1+ 32-bit number.
pub fn port_to_of11(p: u32) -> u32 {
    if (0xff00..=0xffff).contains(&p) {
        p | 0xffff_0000
    } else {
        p
    }
}

/// OpenFlow 1.1+ 32-bit port number -> ours; `None` for numbers in the
/// gap that 16 bits cannot hold.
pub fn port_from_of11(p: u32) -> Option<u32> {
    if p < 0xff00 {
        Some(p)
    } else if p >= 0xffff_ff00 {
        Some(p & 0xffff)
    } else {
        None
    }
}

/// The value length of an entry whose TLV body is `len` bytes: the
/// entry's own length, or for a variable-length field 1 up to it.
fn wire_len(ent: &Entry, len: usize, hasmask: bool) -> Option<usize> {
    let n = if hasmask { len / 2 } else { len };
    let ok = if ent.sp == Sp::VarLen {
        n >= 1 && n <= ent.len as usize && (!hasmask || len % 2 == 0)
    } else {
        n == ent.len as usize && (!hasmask || len % 2 == 0)
    };
    ok.then_some(n)
}

/// A decoded TLV list: the match, and the NXM cookie if one was present.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decoded {
    pub matched: Match,
    pub cookie: Option<(u64, u64)>,
}

/// Decodes a list of NXM/OXM entries (the whole of `b`).
pub fn decode(b: &[u8]) -> Result<Decoded, ErrorKind> {
    let mut rd = Rd::new(b, ErrorKind::BadMatchLen);
    let mut m = Match::CATCHALL;
    let mut cookie = None;
    let mut seen: Vec<(u16, u8, u32)> = Vec::new();
    let mut seen_names: Vec<&'static str> = Vec::new();
    let mut need_proto: Vec<u8> = Vec::new();
    let mut need: Vec<Prereq> = Vec::new();
    while !rd.is_empty() {
        let h = rd.u32()?;
        let class = (h >> 16) as u16;
        let field = ((h >> 9) & 0x7f) as u8;
        let hasmask = h & 0x100 != 0;
        let mut len = (h & 0xff) as usize;
        let mut exp = 0;
        if class == EXP {
            exp = rd.u32()?;
            len = len.checked_sub(4).ok_or(ErrorKind::BadMatchLen)?;
        }
        let body = rd.bytes(len)?;
        let ent =
            ENTRIES.iter().find(|x| x.class == class && x.field == field && x.exp == exp).ok_or(ErrorKind::BadField)?;
        let n = wire_len(ent, len, hasmask).ok_or(ErrorKind::BadMatchLen)?;
        if hasmask && !ent.maskable {
            return Err(ErrorKind::BadMask);
        }
        // Two headers for the same field (e.g. NXM and OXM tcp_src) are a
        // duplicate too.
        if seen.contains(&(class, field, exp)) || seen_names.contains(&ent.name) {
            return Err(ErrorKind::DupField);
        }
        seen.push((class, field, exp));
        seen_names.push(ent.name);
        let value = be_uint(&body[..n]);
        let mask = if hasmask { be_uint(&body[n..]) } else { u128::MAX >> (128 - 8 * ent.len as usize) };
        if ent.sp == Sp::Cookie {
            cookie = Some(((value & mask) as u64, mask as u64));
            continue;
        }
        let f = def_of(ent);
        let mask = if hasmask { mask } else { f.loc.max() };
        let (value, mask) = match ent.sp {
            Sp::Plain | Sp::Cookie | Sp::VarLen => (value, mask),
            Sp::InPort32 => (port_from_of11(value as u32).ok_or(ErrorKind::BadValue)? as u128, mask),
            Sp::IpTos => {
                if value & 3 != 0 {
                    return Err(ErrorKind::BadValue);
                }
                (value >> 2, 0x3f)
            }
            Sp::VlanPcp => (value, mask),
        };
        if value > f.loc.max() {
            return Err(ErrorKind::BadValue);
        }
        m.set_field_masked(f, value, mask);
        if ent.sp == Sp::VlanPcp {
            // A priority implies a tag: set the present bit.
            let tci = def("vlan_tci");
            let (k, mk) = (tci.get(&m.key), tci.get(&m.mask));
            tci.set(&mut m.key, k | 0x1000);
            tci.set(&mut m.mask, mk | 0x1000);
            need.push(Prereq::None);
        }
        need.push(f.prereq);
        if let Some(p) = ent.proto {
            need_proto.push(p);
        }
    }
    for p in need {
        if !p.holds(&m.key, &m.mask) {
            return Err(ErrorKind::BadPrereq);
        }
    }
    for p in need_proto {
        if m.mask.nw_proto() != 0xff || m.key.nw_proto() != p {
            return Err(ErrorKind::BadPrereq);
        }
    }
    if m.check_prereqs().is_err() {
        return Err(ErrorKind::BadPrereq);
    }
    Ok(Decoded { matched: m, cookie })
}

fn header(out: &mut Vec<u8>, ent: &Entry, hasmask: bool) {
    let n = ent.len as u32 * if hasmask { 2 } else { 1 };
    let h = ((ent.class as u32) << 16) | ((ent.field as u32) << 9) | if hasmask { 0x100 } else { 0 } | n;
    out.u32(h);
}

/// Encodes `m` as a TLV list in `flavor`. Fields the flavour cannot carry
/// exactly are written as closely as it allows.
pub fn encode(m: &Match, flavor: Flavor, out: &mut Vec<u8>) {
    let bit = if flavor == Flavor::Nxm { N } else { O };
    for ent in ENTRIES.iter().filter(|x| x.enc & bit != 0) {
        let f = def_of(ent);
        let mut mask = f.get(&m.mask);
        let mut value = f.get(&m.key);
        if mask == 0 || !f.prereq.holds(&m.key, &m.mask) {
            continue;
        }
        if let Some(p) = ent.proto {
            if m.mask.nw_proto() != 0xff || m.key.nw_proto() != p {
                continue;
            }
        }
        if ent.name == "dl_vlan_pcp" {
            // OXM VLAN_PCP only for a present tag with the whole PCP matched.
            if mask != 7 {
                continue;
            }
        }
        let full = f.loc.max();
        match ent.sp {
            Sp::InPort32 => value = port_to_of11(value as u32) as u128,
            Sp::IpTos => {
                value <<= 2;
                mask = full;
            }
            _ => {}
        }
        if ent.name == "vlan_vid" && mask & 0x1fff == 0 {
            continue;
        }
        let hasmask = ent.maskable && mask != full;
        header(out, ent, hasmask);
        let n = ent.len as usize;
        out.uint(value, n);
        if hasmask {
            out.uint(mask, n);
        }
    }
}

/// Appends an NXM cookie entry (for NXT flow mods with a cookie mask).
pub fn encode_cookie(cookie: u64, mask: u64, out: &mut Vec<u8>) {
    if mask == 0 {
        return;
    }
    let ent = ENTRIES.iter().find(|x| x.sp == Sp::Cookie).expect("cookie entry");
    let hasmask = mask != u64::MAX;
    header(out, ent, hasmask);
    out.u64(cookie);
    if hasmask {
        out.u64(mask);
    }
}

/// One field write decoded from a TLV (set_field, NXAST_REG_LOAD2): the
/// flow field and the value and mask in that field's own bits.
pub fn decode_field_tlv(rd: &mut Rd) -> Result<(&'static FieldDef, u128, u128), ErrorKind> {
    let h = rd.u32().map_err(|_| ErrorKind::BadActionLen)?;
    let (class, field, hasmask) = ((h >> 16) as u16, ((h >> 9) & 0x7f) as u8, h & 0x100 != 0);
    let mut len = (h & 0xff) as usize;
    let mut exp = 0;
    if class == EXP {
        exp = rd.u32().map_err(|_| ErrorKind::BadActionLen)?;
        len = len.checked_sub(4).ok_or(ErrorKind::BadActionLen)?;
    }
    let body = rd.bytes(len).map_err(|_| ErrorKind::BadActionLen)?;
    let ent = ENTRIES
        .iter()
        .find(|x| x.class == class && x.field == field && x.exp == exp && x.sp != Sp::Cookie)
        .ok_or(ErrorKind::BadSetType)?;
    let n = wire_len(ent, len, hasmask).ok_or(ErrorKind::BadActionLen)?;
    let f = def_of(ent);
    // Read-only in Open vSwitch, which answers BAD_SET_ARGUMENT.
    if f.name == "mpls_bos" {
        return Err(ErrorKind::BadSetArgument);
    }
    let value = be_uint(&body[..n]);
    let mask = if hasmask { be_uint(&body[n..]) } else { f.loc.max() };
    let (value, mask) = match ent.sp {
        Sp::InPort32 => (port_from_of11(value as u32).ok_or(ErrorKind::BadSetArgument)? as u128, f.loc.max()),
        Sp::IpTos => (value >> 2, (mask >> 2) & 0x3f),
        _ => (value, mask & f.loc.max()),
    };
    if value > f.loc.max() {
        return Err(ErrorKind::BadSetArgument);
    }
    // A field that is another name for the same bits (udp_dst, sctp_dst
    // and tcp_dst for tp_dst; arp_spa for nw_src; icmp_type for tp_src)
    // keeps its own name: it is echoed back in the encoding the controller
    // used, and its own prerequisites apply. A field that is part of a
    // wider one (vlan_vid of vlan_tci, ip_dscp of nw_tos) is written as
    // that part of the wider field.
    if flow::fields::FIELDS.iter().any(|c| !c.alias && c.loc == f.loc) {
        return Ok((f, value & mask, mask));
    }
    Ok(canonical_write(f, value & mask, mask))
}

/// Names a field write by the canonical field holding those bits
/// (tcp_dst and udp_dst are tp_dst; vlan_vid is part of vlan_tci; ip_dscp
/// of nw_tos), as the text syntax does, shifting value and mask to match.
pub fn canonical_write(f: &'static FieldDef, value: u128, mask: u128) -> (&'static FieldDef, u128, u128) {
    let canon = flow::fields::FIELDS.iter().find(|c| !c.alias && c.loc == f.loc).or_else(|| {
        flow::fields::FIELDS.iter().find(|c| {
            !c.alias
                && c.loc.word == f.loc.word
                && c.loc.bits <= 64
                && c.loc.shift <= f.loc.shift
                && f.loc.shift + f.loc.bits <= c.loc.shift + c.loc.bits
        })
    });
    match canon {
        Some(c) => {
            let sh = f.loc.shift - c.loc.shift;
            (c, value << sh, mask << sh)
        }
        None => (f, value, mask),
    }
}

/// Encodes a write of `value` under `mask` into `field` as one TLV, in
/// the header of `flavor` that covers the written bits most tightly (the
/// other flavour's headers if this one has none). Returns whether the TLV
/// carries a mask (OpenFlow 1.2-1.4 set_field cannot; callers then use
/// NXAST_REG_LOAD2). `None` if no header covers the field.
pub fn encode_field_tlv(field: &FieldDef, value: u128, mask: u128, flavor: Flavor, out: &mut Vec<u8>) -> Option<bool> {
    let bit = if flavor == Flavor::Nxm { N } else { O };
    // A write of exactly the TCI's priority bits is OXM VLAN_PCP (as Open
    // vSwitch writes `set_field:N->vlan_pcp`), not a masked TCI load.
    let tci = def("vlan_tci").loc;
    if flavor == Flavor::Oxm
        && ((field.loc == tci && mask == 0xe000) || (field.name == "dl_vlan_pcp" && mask == field.loc.max()))
    {
        let ent = ENTRIES.iter().find(|x| x.sp == Sp::VlanPcp)?;
        header(out, ent, false);
        out.uint(if field.loc == tci { value >> 13 } else { value } & 7, 1);
        return Some(false);
    }
    let (fw, fs, fb) = (field.loc.word, field.loc.shift, field.loc.bits);
    // The written bits, in the key word's coordinates.
    let lo = fs + (mask.trailing_zeros().min(fb));
    let hi = fs + (128 - mask.leading_zeros()).min(fb);
    let covers = |x: &'static Entry| {
        let l = def_of(x).loc;
        matches!(x.sp, Sp::Plain | Sp::VarLen)
            && l.word == fw
            && if fb > 64 || l.bits > 64 { l == field.loc } else { l.shift <= lo && hi <= l.shift + l.bits }
    };
    // The field's own header first (udp_src as UDP_SRC, not TCP_SRC),
    // then the tightest header covering the written bits.
    let own = |b: u8| {
        ENTRIES.iter().find(|x| {
            x.enc & (b | W) != 0
                && matches!(x.sp, Sp::Plain | Sp::VarLen)
                && x.name == field.name
                && def_of(x).loc == field.loc
        })
    };
    let ent = [bit, N | O].iter().find_map(|&b| {
        own(b).or_else(|| ENTRIES.iter().filter(|x| x.enc & b != 0 && covers(x)).min_by_key(|x| def_of(x).loc.bits))
    })?;
    let l = def_of(ent).loc;
    let (v, m) = if fb > 64 {
        (value, mask)
    } else if l.shift >= fs {
        (value >> (l.shift - fs), mask >> (l.shift - fs))
    } else {
        (value << (fs - l.shift), mask << (fs - l.shift))
    };
    let hasmask = m != l.max();
    header(out, ent, hasmask);
    out.uint(v, ent.len as usize);
    if hasmask {
        out.uint(m, ent.len as usize);
    }
    Some(hasmask)
}

/// The 32-bit header (unmasked) that names `field` in a load, move or
/// output:reg: an entry for that name, else one for exactly its bits,
/// Nicira's before OXM (as Open vSwitch writes them for every version).
pub fn field_header(field: &FieldDef) -> Option<u32> {
    let plain =
        |x: &&'static Entry| matches!(x.sp, Sp::Plain | Sp::VarLen) && x.class != EXP && def_of(x).loc == field.loc;
    let ent = ENTRIES
        .iter()
        .filter(plain)
        .find(|x| x.name == field.name)
        .or_else(|| ENTRIES.iter().filter(plain).find(|x| x.enc & N != 0))
        .or_else(|| ENTRIES.iter().filter(plain).find(|x| x.enc != DEC))?;
    Some(((ent.class as u32) << 16) | ((ent.field as u32) << 9) | ent.len as u32)
}

/// The field a header in a load, move or output:reg names (its mask bit
/// and length are ignored, as Open vSwitch does). NXM_OF_IP_TOS is the
/// whole TOS byte there.
pub fn field_by_header(h: u32) -> Result<&'static FieldDef, ErrorKind> {
    let (class, field) = ((h >> 16) as u16, ((h >> 9) & 0x7f) as u8);
    let ent = ENTRIES
        .iter()
        .find(|x| x.class == class && x.field == field && x.class != EXP && x.sp != Sp::Cookie)
        .ok_or(ErrorKind::BadArgument)?;
    match ent.sp {
        Sp::Plain | Sp::VarLen => Ok(def_of(ent)),
        Sp::IpTos => Ok(def("nw_tos")),
        _ => Err(ErrorKind::BadArgument),
    }
}

/// OpenFlow 1.1+ `ofp_match` of type OXM: type, length, entries, padding
/// to 8 bytes. Reads the whole structure (padding included) from `rd`.
pub fn decode_ofp_match(rd: &mut Rd) -> Result<Match, ErrorKind> {
    let ty = rd.u16().map_err(|_| ErrorKind::BadMatchLen)?;
    let len = rd.u16().map_err(|_| ErrorKind::BadMatchLen)? as usize;
    if ty != 1 {
        return Err(ErrorKind::BadMatchType);
    }
    if len < 4 {
        return Err(ErrorKind::BadMatchLen);
    }
    let body = rd.bytes(len - 4).map_err(|_| ErrorKind::BadMatchLen)?;
    let pad = len.div_ceil(8) * 8 - len;
    rd.skip(pad.min(rd.len())).map_err(|_| ErrorKind::BadMatchLen)?;
    let d = decode(body)?;
    Ok(d.matched)
}

/// Writes an OpenFlow 1.1+ `ofp_match` (OXM) with its padding.
pub fn encode_ofp_match(m: &Match, out: &mut Vec<u8>) {
    let start = out.len();
    out.u16(1);
    out.u16(0);
    encode(m, Flavor::Oxm, out);
    out.patch_len(start + 2, start);
    out.pad8();
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn mpls_bos_is_read_only_as_in_ovs() {
        // OXM MPLS_BOS (class 0x8000, field 36, 1 byte) in a set_field.
        let tlv = [0x80, 0x00, 0x48, 0x01, 1];
        assert_eq!(
            decode_field_tlv(&mut Rd::new(&tlv, ErrorKind::BadActionLen)).unwrap_err(),
            ErrorKind::BadSetArgument
        );
    }

    #[test]
    fn every_entry_names_a_field() {
        for ent in ENTRIES.iter().filter(|x| x.sp != Sp::Cookie) {
            assert!(by_name(ent.name).is_some(), "{}", ent.name);
        }
    }

    fn rt(s: &str) {
        let m = Match::parse(s).unwrap();
        for fl in [Flavor::Nxm, Flavor::Oxm] {
            let mut b = Vec::new();
            encode(&m, fl, &mut b);
            let d = decode(&b).unwrap_or_else(|e| panic!("{s} {fl:?}: {e:?}"));
            assert_eq!(d.matched, m, "{s} in {fl:?}");
        }
    }

    #[test]
    fn round_trips() {
        rt("");
        rt("in_port=3");
        rt("in_port=65534");
        rt("tcp,nw_src=10.0.0.0/8,tp_dst=80");
        rt("udp6,ipv6_dst=fe80::/64,udp_src=53");
        rt("arp,arp_spa=10.0.0.1,arp_op=1,arp_sha=00:11:22:33:44:55");
        rt("dl_vlan=10,dl_dst=01:00:00:00:00:00/01:00:00:00:00:00");
        rt("ip,nw_tos=32,nw_ecn=1,nw_ttl=5,nw_frag=later");
        rt("metadata=0x5/0xff,pkt_mark=3,tun_id=9");
        rt("icmp,icmp_type=8,icmp_code=0");
        rt("sctp,sctp_dst=9");
        rt("tcp,tcp_flags=0x2/0x12");
        rt("reg0=5,reg15=0x7");
        rt("reg3=0x5/0xff,reg4=0x10/0x10,metadata=1");
        rt("xreg1=0x100000002");
        rt("xxreg3=0x5/0xff");
    }

    /// Register headers as ovs-fields(7) gives them: NXM_NX_REG0 is
    /// class 1 field 0 (4 bytes), OXM_OF_PKT_REG1 class 0x8001 field 1 (8
    /// bytes), NXM_NX_XXREG2 class 1 field 113 (16 bytes). A match
    /// carries registers only as the 32-bit NXM_NX_REGn.
    #[test]
    fn register_headers() {
        let mut b = Vec::new();
        encode(&Match::parse("reg0=5,reg1=0x10/0xf0").unwrap(), Flavor::Oxm, &mut b);
        assert_eq!(b, [0, 1, 0, 4, 0, 0, 0, 5, 0, 1, 3, 8, 0, 0, 0, 0x10, 0, 0, 0, 0xf0]);
        // xreg1 = 0x1_0000_0002 is reg2 = 1, reg3 = 2.
        let d = decode(&[0x80, 1, 2, 8, 0, 0, 0, 1, 0, 0, 0, 2]).unwrap();
        assert_eq!(d.matched, Match::parse("reg2=1,reg3=2").unwrap());
        let xx = by_name("xxreg2").unwrap();
        assert_eq!(field_header(xx), Some(0x0001_e210));
        assert_eq!(field_header(by_name("xreg3").unwrap()), Some(0x8001_0608));
        assert_eq!(field_header(by_name("reg15").unwrap()), Some(0x0001_1e04));
        assert_eq!(field_header(by_name("eth_src").unwrap()), Some(0x0000_0406));
        assert_eq!(field_by_header(0x0001_e210).unwrap().name, "xxreg2");
        assert_eq!(field_by_header(0x0001_1f08).unwrap().name, "reg15");
        let mut out = Vec::new();
        assert_eq!(
            encode_field_tlv(by_name("xreg1").unwrap(), 6, u64::MAX as u128, Flavor::Oxm, &mut out),
            Some(false)
        );
        assert_eq!(out, [0x80, 1, 2, 8, 0, 0, 0, 0, 0, 0, 0, 6]);
    }

    #[test]
    fn errors() {
        // tcp_dst without ip+tcp: BAD_PREREQ.
        let mut b = Vec::new();
        b.u32(0x8000_1c02);
        b.u16(80);
        assert_eq!(decode(&b), Err(ErrorKind::BadPrereq));
        // Unknown field.
        assert_eq!(decode(&[0x80, 0, 0x7e, 1, 0]), Err(ErrorKind::BadField));
        // Truncated.
        assert_eq!(decode(&[0x80, 0, 0x0a, 2, 8]), Err(ErrorKind::BadMatchLen));
        // Mask on an unmaskable field (eth_type).
        assert_eq!(decode(&[0x80, 0, 0x0b, 4, 8, 0, 0xff, 0xff]), Err(ErrorKind::BadMask));
        // Duplicate.
        assert_eq!(decode(&[0x80, 0, 0x0a, 2, 8, 0, 0x80, 0, 0x0a, 2, 8, 0]), Err(ErrorKind::DupField));
    }

    proptest! {
        #[test]
        fn never_panics(b in prop::collection::vec(any::<u8>(), 0..64)) {
            let _ = decode(&b);
            let mut rd = Rd::new(&b, ErrorKind::BadLen);
            let _ = decode_ofp_match(&mut rd);
        }
    }
}
