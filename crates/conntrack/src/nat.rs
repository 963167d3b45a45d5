//! Address and port translation of packets in place.
//!
//! A NATed connection has an original tuple `orig` (as its first packet
//! carried it) and a reply tuple `reply` (as the replies carry it, i.e.
//! with the translated addresses). A packet of one direction is rewritten
//! so that it looks, to its receiver, like a packet of the *other*
//! direction reversed: an original-direction packet becomes
//! `reply.reverse()`, a reply becomes `orig.reverse()`. That one rule
//! covers source NAT, destination NAT and both at once.
//!
//! Checksums are patched incrementally (RFC 1624): the IPv4 header
//! checksum, and the TCP/UDP/ICMPv6 checksums that cover the pseudo-header
//! and the ports. A UDP/IPv4 checksum of 0 means "none" and stays 0.
//! SCTP's CRC32c is recomputed. ICMP errors related to a NATed connection
//! get their quoted packet translated too, and their checksum recomputed.

use crate::packet::{be16, proto, Parsed, Tuple};
use wire::checksum::{self as ck, update128, update16, update32};

fn put16(b: &mut [u8], o: usize, v: u16) {
    if let Some(x) = b.get_mut(o..o + 2) {
        x.copy_from_slice(&v.to_be_bytes());
    }
}

/// Where a header's checksum is, relative to the transport header, and
/// whether it covers the pseudo-header.
fn l4_csum_at(t: &Tuple, seg: &[u8]) -> Option<(usize, bool)> {
    match t.proto {
        proto::TCP if seg.len() >= 18 => Some((16, true)),
        proto::UDP | proto::UDPLITE if seg.len() >= 8 => {
            // UDP over IPv4 without a checksum stays without one.
            (t.v6 || be16(seg, 6) != Some(0)).then_some((6, true))
        }
        proto::ICMP if seg.len() >= 4 => Some((2, false)),
        proto::ICMPV6 if seg.len() >= 4 => Some((2, true)),
        _ => None,
    }
}

/// Rewrites the addresses and ports of the IP packet at `l3` (transport
/// header at `l4`, ending at `end`) from `from` to `to`. `quoted` marks a
/// packet inside an ICMP error, whose transport checksum may lie beyond the
/// quoted bytes.
pub fn rewrite(b: &mut [u8], l3: usize, l4: usize, end: usize, from: &Tuple, to: &Tuple, quoted: bool) {
    let end = end.min(b.len());
    let csum = b.get(l4..end).and_then(|seg| l4_csum_at(from, seg));
    let mut l4c = csum.and_then(|(o, _)| be16(b, l4 + o));
    let pseudo = csum.is_some_and(|(_, p)| p);
    let (src_at, dst_at) = if from.v6 { (l3 + 8, l3 + 24) } else { (l3 + 12, l3 + 16) };
    for (at, old, new) in [(src_at, from.src, to.src), (dst_at, from.dst, to.dst)] {
        if old == new {
            continue;
        }
        if from.v6 {
            if let Some(x) = b.get_mut(at..at + 16) {
                x.copy_from_slice(&new.to_be_bytes());
            }
            if pseudo {
                l4c = l4c.map(|c| update128(c, old, new));
            }
        } else {
            if let Some(x) = b.get_mut(at..at + 4) {
                x.copy_from_slice(&(new as u32).to_be_bytes());
            }
            if let Some(c) = be16(b, l3 + 10) {
                put16(b, l3 + 10, update32(c, old as u32, new as u32));
            }
            if pseudo {
                l4c = l4c.map(|c| update32(c, old as u32, new as u32));
            }
        }
    }
    if from.has_ports() {
        for (at, old, new) in [(l4, from.sport, to.sport), (l4 + 2, from.dport, to.dport)] {
            if old != new {
                put16(b, at, new);
                l4c = l4c.map(|c| update16(c, old, new));
            }
        }
    } else if from.is_icmp() && from.sport != to.sport && (from.dport >> 8) as u8 != 0xff {
        // A query's identifier plays the port.
        put16(b, l4 + 4, to.sport);
        l4c = l4c.map(|c| update16(c, from.sport, to.sport));
    }
    if let (Some((o, _)), Some(c)) = (csum, l4c) {
        let c = if from.proto == proto::UDP && c == 0 { 0xffff } else { c };
        if !quoted || l4 + o + 2 <= end {
            put16(b, l4 + o, c);
        }
    }
    if from.proto == proto::SCTP && !quoted && end >= l4 + 12 && (from.sport != to.sport || from.dport != to.dport) {
        // CRC32c over the whole SCTP packet with its checksum field zeroed.
        if let Some(seg) = b.get_mut(l4..end) {
            seg[8..12].copy_from_slice(&[0; 4]);
            let crc = ck::crc32c(seg);
            seg[8..12].copy_from_slice(&crc.to_le_bytes());
        }
    }
}

/// Translates an ICMP error: the packet it quotes goes from `inner_from`
/// to `inner_to`, and the outer addresses follow (an outer source equal to
/// the quoted destination, or an outer destination equal to the quoted
/// source, take the translated values). The ICMP checksum is recomputed.
pub fn rewrite_icmp_error(b: &mut [u8], p: &Parsed, inner_at: usize, inner_from: &Tuple, inner_to: &Tuple) {
    let inner_l4 = inner_l4_offset(b, inner_at, inner_from.v6);
    rewrite(b, inner_at, inner_l4, p.end, inner_from, inner_to, true);
    let mut outer_to = p.tuple;
    if p.tuple.src == inner_from.dst {
        outer_to.src = inner_to.dst;
    }
    if p.tuple.dst == inner_from.src {
        outer_to.dst = inner_to.src;
    }
    // Outer addresses (the ICMP checksum is recomputed below anyway).
    let mut outer_from = p.tuple;
    outer_from.sport = 0;
    outer_to.sport = 0;
    outer_to.dport = outer_from.dport;
    rewrite(b, p.l3, p.l4, p.end, &outer_from, &outer_to, false);
    let end = p.end.min(b.len());
    if end < p.l4 + 4 {
        return;
    }
    put16(b, p.l4 + 2, 0);
    let c = if p.tuple.v6 {
        ck::l4_checksum_v6(outer_to.src, outer_to.dst, proto::ICMPV6, &b[p.l4..end])
    } else {
        ck::checksum(&b[p.l4..end])
    };
    put16(b, p.l4 + 2, c);
}

fn inner_l4_offset(b: &[u8], l3: usize, v6: bool) -> usize {
    if v6 {
        // The tracker only relates quoted IPv6 packets it could parse; their
        // extension headers were walked then. Walk them again.
        let mut next = b.get(l3 + 6).copied().unwrap_or(59);
        let mut off = l3 + 40;
        for _ in 0..8 {
            match next {
                0 | 43 | 60 => {
                    next = b.get(off).copied().unwrap_or(59);
                    off += (b.get(off + 1).copied().unwrap_or(0) as usize + 1) * 8;
                }
                51 => {
                    next = b.get(off).copied().unwrap_or(59);
                    off += (b.get(off + 1).copied().unwrap_or(0) as usize + 2) * 4;
                }
                _ => break,
            }
        }
        off
    } else {
        l3 + (b.get(l3).map_or(5, |x| x & 0xf) as usize) * 4
    }
}

/// How a NAT range picks its address and port.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct NatFlags {
    pub random: bool,
    pub hash: bool,
    pub persistent: bool,
}

/// `nat(src=A[-B][:P[-Q]])` or `nat(dst=...)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NatRange {
    pub addr_min: u128,
    pub addr_max: u128,
    /// 0..0 keeps the original port when it is free.
    pub port_min: u16,
    pub port_max: u16,
    pub v6: bool,
    pub flags: NatFlags,
}

/// A tiny deterministic mixer for choosing starting points.
pub(crate) fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// Candidate translations of `tuple` under `range` (source NAT if `src`),
/// in the order they should be tried, at most `limit` of them. `salt`
/// randomises the start for `random`.
///
/// Addresses: from a start chosen by a hash of the tuple (`hash`, the
/// default), of the source or destination address alone (`persistent`, so
/// one client always gets one address), or at random (`random`).
/// Ports (source NAT of TCP/UDP/SCTP, and ICMP query identifiers): the
/// original port first when it lies in the range, then the rest of the
/// range in order; with no range given, the original port's class (below
/// 1024 or not). Destination NAT changes the port only when a range gives
/// one.
pub(crate) fn candidates(
    tuple: &Tuple,
    range: &NatRange,
    src: bool,
    salt: u64,
    limit: usize,
) -> impl Iterator<Item = Tuple> {
    // No address given (`nat(src)`): the packet's own, ports as needed.
    let tuple = *tuple;
    let range = if range.addr_min == 0 && range.addr_max == 0 {
        let a = if src { tuple.src } else { tuple.dst };
        NatRange { addr_min: a, addr_max: a, v6: tuple.v6, ..*range }
    } else {
        *range
    };
    let naddr = range.addr_max.saturating_sub(range.addr_min).saturating_add(1).min(1 << 32) as u64;
    let tsalt = (tuple.src as u64) ^ ((tuple.dst as u64) << 1) ^ ((tuple.sport as u64) << 17) ^ tuple.dport as u64;
    let start_addr = if range.flags.persistent {
        mix(if src { tuple.src as u64 } else { tuple.dst as u64 }) % naddr
    } else if range.flags.random {
        mix(salt ^ tsalt) % naddr
    } else {
        mix(tsalt) % naddr
    };
    let ports_given = range.port_min != 0 || range.port_max != 0;
    let orig_port = if src { tuple.sport } else { tuple.dport };
    let (pmin, pmax) = if ports_given {
        (range.port_min, range.port_max.max(range.port_min))
    } else if tuple.is_icmp() {
        (0, 65535)
    } else if orig_port < 1024 {
        (1, 1023)
    } else {
        (1024, 65535)
    };
    let vary_port = if src { tuple.has_ports() || tuple.is_icmp() } else { tuple.has_ports() && ports_given };
    let nport = if vary_port { (pmax - pmin) as u64 + 1 } else { 1 };
    let port_start =
        if (pmin..=pmax).contains(&orig_port) { (orig_port - pmin) as u64 } else { mix(tsalt ^ salt) % nport };
    // Lazily: a new connection usually takes the first candidate, so the
    // rest of the range is never built.
    (0..naddr)
        .flat_map(move |ai| {
            let addr = range.addr_min + ((start_addr + ai) % naddr) as u128;
            (0..nport).map(move |pi| {
                let port = if vary_port { pmin + ((port_start + pi) % nport) as u16 } else { orig_port };
                let mut t = tuple;
                if src {
                    t.src = addr;
                    t.sport = port;
                } else {
                    t.dst = addr;
                    t.dport = port;
                }
                t
            })
        })
        .take(limit)
}
