//! Packet bytes to flow key.
//!
//! [`extract`] parses Ethernet (with up to two 802.1Q/802.1ad tags), ARP,
//! IPv4 (options, fragments), IPv6 (extension headers, fragments), TCP,
//! UDP, SCTP, ICMPv4 and ICMPv6 (with neighbour discovery) into a
//! [`FlowKey`]. It never panics: a truncated or malformed packet yields the
//! key as far as it parsed and a [`ParseError`] naming why it stopped.
//!
//! What goes into the key (all values host-order integers, see `key.rs`):
//!
//! * L2: `dl_dst`, `dl_src`; `dl_type` is the innermost Ethertype, or
//!   [`et::NONE`] for an 802.3 frame (type field below 0x0600). The outer
//!   0x8100/0x88a8 tag's TCI goes to `vlan_tci` and a second tag's to
//!   `vlan_tci2`, each with [`VLAN_PRESENT`] set. A third tag stops parsing
//!   with its TPID as `dl_type`.
//! * MPLS (dl_type 0x8847/0x8848): the top label stack entry goes to
//!   `mpls_label`, `mpls_tc`, `mpls_bos`, `mpls_ttl`; nothing below it is
//!   parsed (what an MPLS payload is, only the label says), so L3/L4 stay
//!   zero, as in OVS. A frame cut inside the entry counts as
//!   [`ParseError::TruncatedMpls`].
//! * ARP (Ethernet/IPv4 only; other hardware or protocol types leave just
//!   L2): `nw_proto` = low 8 bits of the opcode, `nw_src`/`nw_dst` = SPA/TPA,
//!   `arp_sha`/`arp_tha`.
//! * IPv4: addresses, `nw_proto`, `nw_tos` (the whole byte), `nw_ttl`,
//!   `nw_frag` ([`FRAG_ANY`] if MF or offset != 0, plus [`FRAG_LATER`] if
//!   offset != 0). Options are skipped via IHL; L4 is bounded by the total
//!   length, so Ethernet padding after the datagram is ignored.
//! * IPv6: addresses, `ipv6_label`, `nw_tos` = traffic class, `nw_ttl` =
//!   hop limit; hop-by-hop (0), routing (43), destination options (60),
//!   fragment (44) and AH (51) headers are walked to the upper-layer
//!   protocol (`nw_proto`); fragments as IPv4 (an atomic fragment, offset 0
//!   without MF, is not one). The packet is bounded by the payload length.
//! * L4 (not for later fragments): TCP/UDP/SCTP ports, TCP's 12 flag bits;
//!   ICMPv4/ICMPv6 type in `tp_src`, code in `tp_dst`; ND solicitations
//!   (135) and advertisements (136) with code 0 add `nd_target` and the
//!   source (NS, option 1) or target (NA, option 2) link-layer address in
//!   `arp_sha` / `arp_tha`.
//!
//! On an error the key holds every field parsed before it: e.g. a frame
//! cut inside the TCP header still has its IP fields; `nw_proto` of an IPv6
//! packet stays 0 until the upper layer is reached; a truncated VLAN tag
//! leaves its TPID as `dl_type`. The fast path drops such packets and
//! counts them under [`ParseError::name`].
//!
//! The code reads each header through one bounds-checked fixed-size view
//! (`&[u8; N]`) and writes key words whole; there is no allocation.

use crate::key::{ethertype as et, ipproto, loc, FlowKey, FRAG_ANY, FRAG_LATER, VLAN_PRESENT};

/// Why parsing stopped early. Each reason is a drop counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ParseError {
    /// Shorter than an Ethernet header (14 bytes).
    Runt,
    /// A VLAN tag (TCI and the following type field) cut short.
    TruncatedVlan,
    /// An ARP packet shorter than its fixed part (8 bytes), or an
    /// Ethernet/IPv4 ARP shorter than 28 bytes.
    TruncatedArp,
    /// Less than 20 bytes of IPv4 header.
    TruncatedIpv4,
    /// Ethertype 0x0800 but the version nibble is not 4.
    BadIpv4Version,
    /// IHL below 5, or the header runs past the packet.
    BadIpv4HeaderLen,
    /// Total length below the header length or past the packet.
    BadIpv4TotalLen,
    /// Less than 40 bytes of IPv6 header, or the payload length runs past
    /// the packet.
    TruncatedIpv6,
    /// An extension header runs past the IPv6 payload.
    TruncatedIpv6ExtHeader,
    /// Less than 20 bytes of TCP header.
    TruncatedTcp,
    /// TCP data offset below 5 words or past the end of the datagram.
    BadTcpDataOffset,
    /// Less than 8 bytes of UDP header.
    TruncatedUdp,
    /// Less than 12 bytes of SCTP common header.
    TruncatedSctp,
    /// Less than 4 bytes of ICMP/ICMPv6 header, or an NS/NA shorter than
    /// its 24-byte fixed part.
    TruncatedIcmp,
    /// ND options that do not tile the message (zero length, running past
    /// the end, a trailing fragment) or a duplicate link-layer address
    /// option.
    BadNdOption,
    /// An MPLS Ethertype with less than 4 bytes of label stack entry.
    TruncatedMpls,
}

impl ParseError {
    pub const ALL: &'static [ParseError] = &[
        ParseError::Runt,
        ParseError::TruncatedVlan,
        ParseError::TruncatedArp,
        ParseError::TruncatedIpv4,
        ParseError::BadIpv4Version,
        ParseError::BadIpv4HeaderLen,
        ParseError::BadIpv4TotalLen,
        ParseError::TruncatedIpv6,
        ParseError::TruncatedIpv6ExtHeader,
        ParseError::TruncatedTcp,
        ParseError::BadTcpDataOffset,
        ParseError::TruncatedUdp,
        ParseError::TruncatedSctp,
        ParseError::TruncatedIcmp,
        ParseError::BadNdOption,
        ParseError::TruncatedMpls,
    ];

    /// The drop counter's name.
    pub fn name(self) -> &'static str {
        match self {
            ParseError::Runt => "drop_rx_runt",
            ParseError::TruncatedVlan => "drop_rx_truncated_vlan",
            ParseError::TruncatedArp => "drop_rx_truncated_arp",
            ParseError::TruncatedIpv4 => "drop_rx_truncated_ipv4",
            ParseError::BadIpv4Version => "drop_rx_bad_ipv4_version",
            ParseError::BadIpv4HeaderLen => "drop_rx_bad_ipv4_header_len",
            ParseError::BadIpv4TotalLen => "drop_rx_bad_ipv4_total_len",
            ParseError::TruncatedIpv6 => "drop_rx_truncated_ipv6",
            ParseError::TruncatedIpv6ExtHeader => "drop_rx_truncated_ipv6_ext_header",
            ParseError::TruncatedTcp => "drop_rx_truncated_tcp",
            ParseError::BadTcpDataOffset => "drop_rx_bad_tcp_data_offset",
            ParseError::TruncatedUdp => "drop_rx_truncated_udp",
            ParseError::TruncatedSctp => "drop_rx_truncated_sctp",
            ParseError::TruncatedIcmp => "drop_rx_truncated_icmp",
            ParseError::BadNdOption => "drop_rx_bad_nd_option",
            ParseError::TruncatedMpls => "drop_rx_truncated_mpls",
        }
    }
}

/// Offsets of the parsed headers from the start of the frame, for action
/// execution. Zero means "not reached".
///
/// * `l3`: the byte after the (innermost) Ethertype field, for any
///   Ethertype >= 0x0600 (so also for ARP and unknown types).
/// * `l4`: the upper-layer header of an IPv4 datagram or IPv6 packet (after
///   options and extension headers), whatever its protocol; 0 for a later
///   fragment, which carries no L4 header.
/// * `payload`: after the L4 header (TCP data offset, 8 for UDP, 12 for
///   SCTP, 4 for ICMP/ICMPv6), once that header was parsed in full.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Layout {
    pub l3: u16,
    pub l4: u16,
    pub payload: u16,
}

/// Frames longer than this are parsed as if cut here, so that every offset
/// fits [`Layout`]'s `u16`s (no Ethernet frame comes close).
pub const MAX_PARSE_LEN: usize = u16::MAX as usize;

// Fixed-size views: one bounds check per header, then constant-offset
// reads that compile to plain loads.

/// `N` bytes of `p` at `o`, or `None` if the packet ends first.
#[inline(always)]
fn at<const N: usize>(p: &[u8], o: usize) -> Option<&[u8; N]> {
    p.get(o..)?.first_chunk::<N>()
}
#[inline(always)]
fn be16<const N: usize>(h: &[u8; N], o: usize) -> u16 {
    u16::from_be_bytes([h[o], h[o + 1]])
}
#[inline(always)]
fn be32<const N: usize>(h: &[u8; N], o: usize) -> u32 {
    u32::from_be_bytes([h[o], h[o + 1], h[o + 2], h[o + 3]])
}
#[inline(always)]
fn be48<const N: usize>(h: &[u8; N], o: usize) -> u64 {
    ((be16(h, o) as u64) << 32) | be32(h, o + 2) as u64
}
#[inline(always)]
fn be128<const N: usize>(h: &[u8; N], o: usize) -> u128 {
    ((be32(h, o) as u128) << 96)
        | ((be32(h, o + 4) as u128) << 64)
        | ((be32(h, o + 8) as u128) << 32)
        | be32(h, o + 12) as u128
}

/// Parses `pkt` (an Ethernet frame received on `in_port`) into a new key.
///
/// Returning the 256-byte tuple by value costs a copy (rustc does not build
/// it in the caller's slot); per-packet code should reuse a key with
/// [`extract_into`].
#[inline]
pub fn extract(pkt: &[u8], in_port: u32) -> (FlowKey, Layout, Option<ParseError>) {
    let mut k = FlowKey::ZERO;
    let (l, e) = extract_into(pkt, in_port, &mut k);
    (k, l, e)
}

#[inline(always)]
fn clip(pkt: &[u8]) -> &[u8] {
    if pkt.len() > MAX_PARSE_LEN {
        &pkt[..MAX_PARSE_LEN]
    } else {
        pkt
    }
}

/// Like [`extract`], writing into `k` (which is reset first), so a caller
/// on the packet path can reuse one key and skip copying it around.
#[inline]
pub fn extract_into(pkt: &[u8], in_port: u32, k: &mut FlowKey) -> (Layout, Option<ParseError>) {
    *k = FlowKey::ZERO;
    k.w[0] = in_port as u64;
    let mut l = Layout::default();
    let e = parse(clip(pkt), k, &mut l).err();
    (l, e)
}

/// The error [`extract`] would report for `pkt`, without building a key:
/// for a caller that forwards the packet on its metadata alone (a megaflow
/// that matches only the input port) and must still drop and count what
/// extraction refuses. The same parser runs, into a key that never leaves
/// this function, so the compiler drops the key's stores and the two
/// cannot disagree.
#[inline]
pub fn check(pkt: &[u8]) -> Option<ParseError> {
    let mut k = FlowKey::ZERO;
    let mut l = Layout::default();
    parse(clip(pkt), &mut k, &mut l).err()
}

// Words of the key written whole on this path (see key.rs for the layout):
// dl_dst | dl_type, dl_src | vlan_tci, vlan_tci2, nw_src | nw_dst,
// ipv6_label | nw_proto | nw_tos | nw_ttl | nw_frag, tp_src | tp_dst |
// tcp_flags. Taken from the field locations, so the layout can change.
const W_DL: usize = loc::DL_DST.word;
const W_DL2: usize = loc::DL_SRC.word;
const W_VLAN2: usize = loc::VLAN_TCI2.word;
const W_NW: usize = loc::NW_SRC.word;
const W_IPV6_SRC: usize = loc::IPV6_SRC.word;
const W_IPV6_DST: usize = loc::IPV6_DST.word;
const W_NW_MISC: usize = loc::NW_PROTO.word;
const W_ARP_SHA: usize = loc::ARP_SHA.word;
const W_ARP_THA: usize = loc::ARP_THA.word;
const W_ND_TARGET: usize = loc::ND_TARGET.word;
const W_TP: usize = loc::TP_SRC.word;

#[inline(always)]
fn nw_misc(label: u32, proto: u8, tos: u8, ttl: u8, frag: u8) -> u64 {
    (label & 0xfffff) as u64 | (proto as u64) << 32 | (tos as u64) << 40 | (ttl as u64) << 48 | (frag as u64) << 56
}

#[inline(always)]
fn is_vlan(ty: u16) -> bool {
    ty == et::VLAN || ty == et::QINQ
}

#[inline(always)]
fn parse(p: &[u8], k: &mut FlowKey, l: &mut Layout) -> Result<(), ParseError> {
    let Some(eh) = at::<14>(p, 0) else {
        return Err(ParseError::Runt);
    };
    let dst = be48(eh, 0);
    let src = be48(eh, 6);
    let mut ty = be16(eh, 12);
    // `off` is always just past the Ethertype field read last.
    let mut off = 14;
    let mut vlan = 0u16;
    if is_vlan(ty) {
        let Some(t) = at::<4>(p, off) else {
            k.w[W_DL] = dst | (ty as u64) << 48;
            k.w[W_DL2] = src;
            return Err(ParseError::TruncatedVlan);
        };
        vlan = be16(t, 0) | VLAN_PRESENT;
        ty = be16(t, 2);
        off += 4;
        if is_vlan(ty) {
            let Some(t) = at::<4>(p, off) else {
                k.w[W_DL] = dst | (ty as u64) << 48;
                k.w[W_DL2] = src | (vlan as u64) << 48;
                return Err(ParseError::TruncatedVlan);
            };
            k.w[W_VLAN2] = (be16(t, 0) | VLAN_PRESENT) as u64;
            ty = be16(t, 2);
            off += 4;
            // A third tag stops parsing: its TPID stays as dl_type.
        }
    }
    let ty = if ty < 0x0600 { et::NONE } else { ty };
    k.w[W_DL] = dst | (ty as u64) << 48;
    k.w[W_DL2] = src | (vlan as u64) << 48;
    if ty == et::NONE {
        return Ok(());
    }
    l.l3 = off as u16;
    match ty {
        et::IPV4 => parse_ipv4(p, off, k, l),
        et::IPV6 => parse_ipv6(p, off, k, l),
        et::ARP | et::RARP => parse_arp(p, off, k),
        et::MPLS | et::MPLS_MCAST => {
            let Some(h) = at::<4>(p, off) else {
                return Err(ParseError::TruncatedMpls);
            };
            loc::MPLS_LSE.set(k, be32(h, 0) as u128);
            Ok(())
        }
        _ => Ok(()),
    }
}

#[inline(always)]
fn parse_arp(p: &[u8], off: usize, k: &mut FlowKey) -> Result<(), ParseError> {
    let Some(h) = at::<8>(p, off) else {
        return Err(ParseError::TruncatedArp);
    };
    // Only Ethernet/IPv4 ARP carries the fields we match.
    if be16(h, 0) != 1 || be16(h, 2) != et::IPV4 || h[4] != 6 || h[5] != 4 {
        return Ok(());
    }
    let Some(h) = at::<28>(p, off) else {
        return Err(ParseError::TruncatedArp);
    };
    let op = be16(h, 6);
    k.w[W_NW] = be32(h, 14) as u64 | (be32(h, 24) as u64) << 32;
    k.w[W_NW_MISC] = nw_misc(0, op as u8, 0, 0, 0);
    k.w[W_ARP_SHA] = be48(h, 8);
    k.w[W_ARP_THA] = be48(h, 18);
    Ok(())
}

#[inline(always)]
fn parse_ipv4(p: &[u8], off: usize, k: &mut FlowKey, l: &mut Layout) -> Result<(), ParseError> {
    let Some(h) = at::<20>(p, off) else {
        return Err(ParseError::TruncatedIpv4);
    };
    if h[0] >> 4 != 4 {
        return Err(ParseError::BadIpv4Version);
    }
    let ihl = ((h[0] & 0xf) as usize) * 4;
    let avail = p.len() - off;
    if ihl < 20 || avail < ihl {
        return Err(ParseError::BadIpv4HeaderLen);
    }
    let total = be16(h, 2) as usize;
    if total < ihl || avail < total {
        return Err(ParseError::BadIpv4TotalLen);
    }
    let proto = h[9];
    k.w[W_NW] = be32(h, 12) as u64 | (be32(h, 16) as u64) << 32;
    let frag = be16(h, 6);
    let later = frag & 0x1fff != 0;
    let fbits = if later {
        FRAG_ANY | FRAG_LATER
    } else if frag & 0x2000 != 0 {
        FRAG_ANY
    } else {
        0
    };
    k.w[W_NW_MISC] = nw_misc(0, proto, h[1], h[8], fbits);
    if later {
        return Ok(());
    }
    // L4 ends where the datagram does (Ethernet padding after it is not
    // part of it).
    match p.get(..off + total) {
        Some(dgram) => parse_l4(dgram, off + ihl, proto, false, k, l),
        None => Ok(()), // unreachable: `avail >= total` above
    }
}

#[inline(always)]
fn parse_ipv6(p: &[u8], off: usize, k: &mut FlowKey, l: &mut Layout) -> Result<(), ParseError> {
    let Some(h) = at::<40>(p, off) else {
        return Err(ParseError::TruncatedIpv6);
    };
    let vtf = be32(h, 0);
    let (label, tclass, hlimit) = (vtf & 0xfffff, (vtf >> 20) as u8, h[7]);
    let mut next = h[6];
    let src = be128(h, 8);
    let dst = be128(h, 24);
    k.w[W_IPV6_SRC] = (src >> 64) as u64;
    k.w[W_IPV6_SRC + 1] = src as u64;
    k.w[W_IPV6_DST] = (dst >> 64) as u64;
    k.w[W_IPV6_DST + 1] = dst as u64;
    let plen = be16(h, 4) as usize;
    let start = off + 40;
    // The packet ends where the payload length says (Ethernet padding
    // after it is not part of it); a payload length of 0 with a hop-by-hop
    // header is a jumbogram, bounded by the frame.
    let end = if plen == 0 && next == 0 { p.len() } else { start + plen };
    // Until the upper-layer protocol is reached, nw_proto stays 0.
    let Some(p) = p.get(..end) else {
        k.w[W_NW_MISC] = nw_misc(label, 0, tclass, hlimit, 0);
        return Err(ParseError::TruncatedIpv6);
    };
    let mut o = start;
    let mut frag = 0u8;
    // Each extension header is at least 8 bytes, so this terminates.
    loop {
        let len = match next {
            0 | 43 | 60 => match at::<2>(p, o) {
                Some(x) => (x[1] as usize + 1) * 8,
                None => 8,
            },
            51 => match at::<2>(p, o) {
                Some(x) => (x[1] as usize + 2) * 4,
                None => 8,
            },
            44 => 8,
            _ => break,
        };
        let ext_next = match at::<8>(p, o) {
            Some(x) if p.len() - o >= len => {
                if next == 44 {
                    let fo = be16(x, 2);
                    if fo & 0xfff9 != 0 {
                        frag = FRAG_ANY;
                        if fo >> 3 != 0 {
                            // A later fragment: nothing more to parse.
                            k.w[W_NW_MISC] = nw_misc(label, x[0], tclass, hlimit, FRAG_ANY | FRAG_LATER);
                            return Ok(());
                        }
                    }
                }
                x[0]
            }
            _ => {
                k.w[W_NW_MISC] = nw_misc(label, 0, tclass, hlimit, frag);
                return Err(ParseError::TruncatedIpv6ExtHeader);
            }
        };
        next = ext_next;
        o += len;
    }
    k.w[W_NW_MISC] = nw_misc(label, next, tclass, hlimit, frag);
    parse_l4(p, o, next, true, k, l)
}

#[inline(always)]
fn parse_l4(p: &[u8], o: usize, proto: u8, v6: bool, k: &mut FlowKey, l: &mut Layout) -> Result<(), ParseError> {
    l.l4 = o as u16;
    match proto {
        ipproto::UDP => {
            let Some(h) = at::<8>(p, o) else {
                return Err(ParseError::TruncatedUdp);
            };
            k.w[W_TP] = be16(h, 0) as u64 | (be16(h, 2) as u64) << 16;
            l.payload = (o + 8) as u16;
        }
        ipproto::TCP => {
            let Some(h) = at::<20>(p, o) else {
                return Err(ParseError::TruncatedTcp);
            };
            let doff = (h[12] >> 4) as usize * 4;
            if doff < 20 || p.len() - o < doff {
                return Err(ParseError::BadTcpDataOffset);
            }
            k.w[W_TP] = be16(h, 0) as u64 | (be16(h, 2) as u64) << 16 | ((be16(h, 12) & 0x0fff) as u64) << 32;
            l.payload = (o + doff) as u16;
        }
        ipproto::SCTP => {
            let Some(h) = at::<12>(p, o) else {
                return Err(ParseError::TruncatedSctp);
            };
            k.w[W_TP] = be16(h, 0) as u64 | (be16(h, 2) as u64) << 16;
            l.payload = (o + 12) as u16;
        }
        ipproto::ICMP if !v6 => {
            let Some(h) = at::<4>(p, o) else {
                return Err(ParseError::TruncatedIcmp);
            };
            k.w[W_TP] = h[0] as u64 | (h[1] as u64) << 16;
            l.payload = (o + 4) as u16;
        }
        ipproto::ICMPV6 if v6 => {
            let Some(h) = at::<4>(p, o) else {
                return Err(ParseError::TruncatedIcmp);
            };
            let (ty, code) = (h[0], h[1]);
            k.w[W_TP] = ty as u64 | (code as u64) << 16;
            l.payload = (o + 4) as u16;
            if (ty == 135 || ty == 136) && code == 0 {
                return parse_nd(p, o, ty == 135, k);
            }
        }
        _ => {}
    }
    Ok(())
}

/// Neighbour solicitation/advertisement at `o`: the target, then options
/// that must tile the rest of the message exactly. At most one link-layer
/// address option of the kind that matters is allowed (as OVS).
#[cold]
fn parse_nd(p: &[u8], o: usize, ns: bool, k: &mut FlowKey) -> Result<(), ParseError> {
    let Some(h) = at::<24>(p, o) else {
        return Err(ParseError::TruncatedIcmp);
    };
    let target = be128(h, 8);
    k.w[W_ND_TARGET] = (target >> 64) as u64;
    k.w[W_ND_TARGET + 1] = target as u64;
    let (want, word) = if ns { (1, W_ARP_SHA) } else { (2, W_ARP_THA) };
    let mut seen = false;
    let mut opt = o + 24;
    while opt < p.len() {
        let Some(x) = at::<2>(p, opt) else {
            return Err(ParseError::BadNdOption);
        };
        let len = x[1] as usize * 8;
        if len == 0 || p.len() - opt < len {
            return Err(ParseError::BadNdOption);
        }
        if x[0] == want && len == 8 {
            if seen {
                return Err(ParseError::BadNdOption);
            }
            seen = true;
            if let Some(x) = at::<8>(p, opt) {
                k.w[word] = be48(x, 2);
            }
        }
        opt += len;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eth(ty: u16) -> Vec<u8> {
        let mut v = vec![0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1];
        v.extend_from_slice(&ty.to_be_bytes());
        v
    }

    fn ipv4_udp(ihl_words: u8, total_extra: i32) -> Vec<u8> {
        let mut v = eth(0x0800);
        let ihl = ihl_words as usize * 4;
        let total = (ihl.max(20) + 8) as i32 + total_extra;
        let mut ip = vec![0x40 | ihl_words, 0x20, 0, 0, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2];
        ip[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        ip.resize(ihl.max(20), 0);
        v.extend_from_slice(&ip);
        v.extend_from_slice(&[0x03, 0xe8, 0x00, 0x35, 0, 8, 0, 0]);
        v
    }

    #[test]
    fn udp_ipv4() {
        let p = ipv4_udp(5, 0);
        let (k, l, e) = extract(&p, 3);
        assert_eq!(e, None);
        assert_eq!((k.in_port(), k.dl_type(), k.nw_proto()), (3, 0x0800, 17));
        assert_eq!((k.nw_src(), k.nw_dst(), k.nw_tos(), k.nw_ttl()), (0x0a00_0001, 0x0a00_0002, 0x20, 64));
        assert_eq!((k.tp_src(), k.tp_dst()), (1000, 53));
        assert_eq!((k.dl_src(), k.dl_dst()), (0x0200_0000_0001, 0x0200_0000_0002));
        assert_eq!((l.l3, l.l4, l.payload), (14, 34, 42));
    }

    #[test]
    fn errors_by_reason() {
        assert_eq!(extract(&[1, 2, 3], 1).2, Some(ParseError::Runt));
        assert_eq!(extract(&ipv4_udp(3, 0), 1).2, Some(ParseError::BadIpv4HeaderLen));
        assert_eq!(extract(&ipv4_udp(5, 100), 1).2, Some(ParseError::BadIpv4TotalLen));
        let mut p = ipv4_udp(5, 0);
        p[14] = 0x65;
        assert_eq!(extract(&p, 1).2, Some(ParseError::BadIpv4Version));
        let mut p = ipv4_udp(5, -4);
        p.truncate(p.len() - 4);
        assert_eq!(extract(&p, 1).2, Some(ParseError::TruncatedUdp));
        let mut t = eth(0x8100);
        t.push(0);
        assert_eq!(extract(&t, 1).2, Some(ParseError::TruncatedVlan));
        // A valid frame with trailing Ethernet padding parses.
        let mut p = ipv4_udp(5, 0);
        p.extend_from_slice(&[0; 10]);
        assert_eq!(extract(&p, 1).2, None);
    }

    #[test]
    fn mpls_top_label_stack_entry() {
        // 802.1Q tag (vid 7), then two label stack entries over IPv4.
        let mut p = eth(0x8100);
        p.extend_from_slice(&[0x00, 0x07, 0x88, 0x47]);
        p.extend_from_slice(&[0x00, 0x06, 0x4a, 0x3f]); // label 100, tc 5, bos 0, ttl 63
        p.extend_from_slice(&[0x00, 0x0c, 0x81, 0x40]); // label 200, tc 0, bos 1, ttl 64
        p.extend_from_slice(&ipv4_udp(5, 0)[14..]);
        let (k, l, e) = extract(&p, 1);
        assert_eq!(e, None);
        assert_eq!((k.dl_type(), k.vlan_tci()), (0x8847, 0x1007));
        assert_eq!((k.mpls_label(), k.mpls_tc(), k.mpls_bos(), k.mpls_ttl()), (100, 5, 0, 63));
        // Below the stack nothing is parsed: the key cannot know it is IP.
        assert_eq!((k.nw_src(), k.nw_proto(), k.tp_dst()), (0, 0, 0));
        assert_eq!((l.l3, l.l4), (18, 0));
        let mut q = eth(0x8848);
        q.extend_from_slice(&[0x00, 0x0c, 0x81]);
        let (k, _, e) = extract(&q, 1);
        assert_eq!(e, Some(ParseError::TruncatedMpls));
        assert_eq!((k.dl_type(), k.mpls_lse()), (0x8848, 0));
    }

    #[test]
    fn never_panics_on_truncations() {
        let p = ipv4_udp(6, 0);
        for n in 0..=p.len() {
            let _ = extract(&p[..n], 1);
        }
        for b in 0..=255u8 {
            let mut q = p.clone();
            for i in 12..q.len() {
                q[i] ^= b;
                let _ = extract(&q, 1);
            }
        }
    }
}
