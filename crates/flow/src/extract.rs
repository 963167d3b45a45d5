//! Packet bytes to flow key.
//!
//! [`extract`] parses Ethernet (with up to two 802.1Q/802.1ad tags), ARP,
//! IPv4 (options, fragments), IPv6 (extension headers, fragments), TCP,
//! UDP, SCTP, ICMPv4 and ICMPv6 (with neighbour discovery) into a
//! [`FlowKey`]. It never panics: a truncated or malformed packet yields the
//! key as far as it parsed and a [`ParseError`] naming why it stopped.

use crate::key::{ethertype as et, ipproto, FlowKey, FRAG_ANY, FRAG_LATER, VLAN_PRESENT};

/// Why parsing stopped early. Each reason is a drop counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ParseError {
    /// Shorter than an Ethernet header.
    Runt,
    TruncatedVlan,
    TruncatedArp,
    TruncatedIpv4,
    BadIpv4Version,
    /// IHL below 5, or the header runs past the packet.
    BadIpv4HeaderLen,
    /// Total length below the header length or past the packet.
    BadIpv4TotalLen,
    TruncatedIpv6,
    TruncatedIpv6ExtHeader,
    TruncatedTcp,
    BadTcpDataOffset,
    TruncatedUdp,
    TruncatedSctp,
    TruncatedIcmp,
    BadNdOption,
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
        }
    }
}

/// Offsets of the parsed headers in the packet, for action execution.
/// Zero means "not present".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Layout {
    pub l3: u16,
    pub l4: u16,
    pub payload: u16,
}

#[inline(always)]
fn be16(p: &[u8], o: usize) -> u16 {
    u16::from_be_bytes([p[o], p[o + 1]])
}
#[inline(always)]
fn be32(p: &[u8], o: usize) -> u32 {
    u32::from_be_bytes([p[o], p[o + 1], p[o + 2], p[o + 3]])
}
#[inline(always)]
fn be48(p: &[u8], o: usize) -> u64 {
    ((be16(p, o) as u64) << 32) | be32(p, o + 2) as u64
}
#[inline(always)]
fn be128(p: &[u8], o: usize) -> u128 {
    let mut b = [0u8; 16];
    b.copy_from_slice(&p[o..o + 16]);
    u128::from_be_bytes(b)
}

/// Parses `pkt` (an Ethernet frame received on `in_port`).
#[inline]
pub fn extract(pkt: &[u8], in_port: u32) -> (FlowKey, Layout, Option<ParseError>) {
    let mut k = FlowKey::ZERO;
    let (l, e) = extract_into(pkt, in_port, &mut k);
    (k, l, e)
}

/// Like [`extract`], writing into `k` (which is reset first), so a caller
/// on the packet path can reuse one key and skip copying it around.
#[inline]
pub fn extract_into(pkt: &[u8], in_port: u32, k: &mut FlowKey) -> (Layout, Option<ParseError>) {
    *k = FlowKey::ZERO;
    k.w[0] = in_port as u64;
    let mut l = Layout::default();
    let e = parse(pkt, k, &mut l).err();
    (l, e)
}

fn parse(p: &[u8], k: &mut FlowKey, l: &mut Layout) -> Result<(), ParseError> {
    if p.len() < 14 {
        return Err(ParseError::Runt);
    }
    // Words are written whole (see key.rs for the layout): this is the
    // per-packet path.
    let dst = be48(p, 0);
    let src = be48(p, 6);
    let mut off = 12;
    let mut ty = be16(p, off);
    let mut tags = 0;
    let mut vlan = 0u16;
    while (ty == et::VLAN || ty == et::QINQ) && tags < 2 {
        if p.len() < off + 6 {
            return Err(ParseError::TruncatedVlan);
        }
        let tci = be16(p, off + 2) | VLAN_PRESENT;
        if tags == 0 {
            vlan = tci;
        } else {
            k.set_vlan_tci2(tci);
        }
        tags += 1;
        off += 4;
        ty = be16(p, off);
    }
    off += 2;
    let ty = if ty < 0x0600 { et::NONE } else { ty };
    k.w[6] = dst | (ty as u64) << 48;
    k.w[7] = src | (vlan as u64) << 48;
    if ty == et::NONE {
        return Ok(());
    }
    l.l3 = off as u16;
    match ty {
        et::IPV4 => parse_ipv4(p, off, k, l),
        et::IPV6 => parse_ipv6(p, off, k, l),
        et::ARP => parse_arp(p, off, k),
        _ => Ok(()),
    }
}

fn parse_arp(p: &[u8], off: usize, k: &mut FlowKey) -> Result<(), ParseError> {
    if p.len() < off + 8 {
        return Err(ParseError::TruncatedArp);
    }
    // Only Ethernet/IPv4 ARP carries the fields we match.
    if be16(p, off) != 1 || be16(p, off + 2) != et::IPV4 || p[off + 4] != 6 || p[off + 5] != 4 {
        return Ok(());
    }
    if p.len() < off + 28 {
        return Err(ParseError::TruncatedArp);
    }
    let op = be16(p, off + 6);
    if op <= 0xff {
        k.set_nw_proto(op as u8);
    }
    k.set_arp_sha(be48(p, off + 8));
    k.set_nw_src(be32(p, off + 14));
    k.set_arp_tha(be48(p, off + 18));
    k.set_nw_dst(be32(p, off + 24));
    Ok(())
}

fn parse_ipv4(p: &[u8], off: usize, k: &mut FlowKey, l: &mut Layout) -> Result<(), ParseError> {
    if p.len() < off + 20 {
        return Err(ParseError::TruncatedIpv4);
    }
    let vihl = p[off];
    if vihl >> 4 != 4 {
        return Err(ParseError::BadIpv4Version);
    }
    let ihl = ((vihl & 0xf) as usize) * 4;
    if ihl < 20 || p.len() < off + ihl {
        return Err(ParseError::BadIpv4HeaderLen);
    }
    let total = be16(p, off + 2) as usize;
    if total < ihl || p.len() < off + total {
        return Err(ParseError::BadIpv4TotalLen);
    }
    let proto = p[off + 9];
    k.w[9] = be32(p, off + 12) as u64 | (be32(p, off + 16) as u64) << 32;
    let frag = be16(p, off + 6);
    let offset = frag & 0x1fff;
    let mf = frag & 0x2000 != 0;
    let fbits = if offset != 0 {
        FRAG_ANY | FRAG_LATER
    } else if mf {
        FRAG_ANY
    } else {
        0
    };
    k.w[14] = (proto as u64) << 32 | (p[off + 1] as u64) << 40 | (p[off + 8] as u64) << 48 | (fbits as u64) << 56;
    if offset != 0 {
        return Ok(());
    }
    // L4 ends where the IP datagram does (padding after it is ignored).
    let end = off + total;
    parse_l4(&p[..end], off + ihl, proto, false, k, l)
}

fn parse_ipv6(p: &[u8], off: usize, k: &mut FlowKey, l: &mut Layout) -> Result<(), ParseError> {
    if p.len() < off + 40 {
        return Err(ParseError::TruncatedIpv6);
    }
    let w = be32(p, off);
    k.set_nw_tos(((w >> 20) & 0xff) as u8);
    k.set_ipv6_label(w & 0xfffff);
    k.set_nw_ttl(p[off + 7]);
    k.set_ipv6_src(be128(p, off + 8));
    k.set_ipv6_dst(be128(p, off + 24));
    let plen = be16(p, off + 4) as usize;
    let end = (off + 40 + plen).min(p.len());
    let p = &p[..end];
    let mut next = p[off + 6];
    let mut o = off + 40;
    loop {
        match next {
            0 | 43 | 60 => {
                if p.len() < o + 8 {
                    k.set_nw_proto(next);
                    return Err(ParseError::TruncatedIpv6ExtHeader);
                }
                next = p[o];
                o += (p[o + 1] as usize + 1) * 8;
            }
            51 => {
                if p.len() < o + 8 {
                    k.set_nw_proto(next);
                    return Err(ParseError::TruncatedIpv6ExtHeader);
                }
                next = p[o];
                o += (p[o + 1] as usize + 2) * 4;
            }
            44 => {
                if p.len() < o + 8 {
                    k.set_nw_proto(next);
                    return Err(ParseError::TruncatedIpv6ExtHeader);
                }
                let fo = be16(p, o + 2);
                let offset = fo >> 3;
                let mf = fo & 1 != 0;
                next = p[o];
                o += 8;
                if offset != 0 {
                    k.set_nw_proto(next);
                    k.set_nw_frag(FRAG_ANY | FRAG_LATER);
                    return Ok(());
                }
                if mf {
                    k.set_nw_frag(FRAG_ANY);
                }
            }
            _ => break,
        }
        if o > p.len() {
            return Err(ParseError::TruncatedIpv6ExtHeader);
        }
    }
    k.set_nw_proto(next);
    parse_l4(p, o, next, true, k, l)
}

fn parse_l4(p: &[u8], o: usize, proto: u8, v6: bool, k: &mut FlowKey, l: &mut Layout) -> Result<(), ParseError> {
    l.l4 = o as u16;
    match proto {
        ipproto::TCP => {
            if p.len() < o + 20 {
                return Err(ParseError::TruncatedTcp);
            }
            let doff = (p[o + 12] >> 4) as usize * 4;
            if doff < 20 || p.len() < o + doff {
                return Err(ParseError::BadTcpDataOffset);
            }
            k.w[19] = be16(p, o) as u64 | (be16(p, o + 2) as u64) << 16 | ((be16(p, o + 12) & 0x0fff) as u64) << 32;
            l.payload = (o + doff) as u16;
        }
        ipproto::UDP => {
            if p.len() < o + 8 {
                return Err(ParseError::TruncatedUdp);
            }
            k.w[19] = be16(p, o) as u64 | (be16(p, o + 2) as u64) << 16;
            l.payload = (o + 8) as u16;
        }
        ipproto::SCTP => {
            if p.len() < o + 12 {
                return Err(ParseError::TruncatedSctp);
            }
            k.set_tp_src(be16(p, o));
            k.set_tp_dst(be16(p, o + 2));
            l.payload = (o + 12) as u16;
        }
        ipproto::ICMP if !v6 => {
            if p.len() < o + 4 {
                return Err(ParseError::TruncatedIcmp);
            }
            k.set_tp_src(p[o] as u16);
            k.set_tp_dst(p[o + 1] as u16);
            l.payload = (o + 4) as u16;
        }
        ipproto::ICMPV6 if v6 => {
            if p.len() < o + 4 {
                return Err(ParseError::TruncatedIcmp);
            }
            let ty = p[o];
            k.set_tp_src(ty as u16);
            k.set_tp_dst(p[o + 1] as u16);
            l.payload = (o + 4) as u16;
            if (ty == 135 || ty == 136) && p[o + 1] == 0 {
                if p.len() < o + 24 {
                    return Err(ParseError::TruncatedIcmp);
                }
                k.set_nd_target(be128(p, o + 8));
                let mut opt = o + 24;
                while opt + 2 <= p.len() {
                    let (t, len) = (p[opt], p[opt + 1] as usize * 8);
                    if len == 0 || opt + len > p.len() {
                        return Err(ParseError::BadNdOption);
                    }
                    if len == 8 {
                        if t == 1 && ty == 135 {
                            k.set_arp_sha(be48(p, opt + 2));
                        } else if t == 2 && ty == 136 {
                            k.set_arp_tha(be48(p, opt + 2));
                        }
                    }
                    opt += len;
                }
            }
        }
        _ => {}
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
