//! Building complete, valid frames for tests, benchmarks and traffic
//! generators.
//!
//! A [`Frame`] (alias [`PacketBuilder`]) describes a frame layer by layer;
//! [`Frame::build`] lays it out and fills in every length and checksum (IPv4
//! header, TCP/UDP/ICMP/ICMPv6 with their pseudo-headers, SCTP CRC32c).
//!
//! Two equivalent styles:
//!
//! ```
//! use wire::build::{Frame, PacketBuilder, L3, L4};
//! // Fluent: Ethernet, tags (outermost first), one L3 call, its modifiers,
//! // one L4 call, then payload/padding.
//! let a = PacketBuilder::default()
//!     .eth([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]) // source, destination
//!     .vlan(0x8100, 10)
//!     .ipv4(0x0a00_0001, 0x0a00_0002)
//!     .ip_ttl(32)
//!     .udp(1000, 53)
//!     .pad_to(64)
//!     .build();
//! // Declarative: the same frame from the layer enums.
//! let b = Frame::new([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
//!     .vlan(0x8100, 10)
//!     .l3(L3::Ipv4 { src: 0x0a00_0001, dst: 0x0a00_0002, ttl: 32, tos: 0, options: vec![], frag: (false, 0) })
//!     .l4(L4::Udp { src: 1000, dst: 53 })
//!     .pad_to(64)
//!     .build();
//! assert_eq!(a, b);
//! assert_eq!(a.len(), 64);
//! ```
//!
//! L3 calls: [`Frame::ipv4`] (modifiers [`Frame::ip_ttl`], [`Frame::ip_tos`],
//! [`Frame::ip_options`], [`Frame::ip_frag`]),
//! [`Frame::ipv6`] ([`Frame::ip_ttl`] = hop limit, [`Frame::ip_tos`] =
//! traffic class, [`Frame::ipv6_label`], [`Frame::ipv6_ext`],
//! [`Frame::ipv6_frag`]), [`Frame::arp`], [`Frame::ethertype`].
//! L4 calls: [`Frame::udp`], [`Frame::tcp`], [`Frame::sctp`],
//! [`Frame::icmp_echo`], [`Frame::icmpv6_echo`], [`Frame::nd_ns`],
//! [`Frame::nd_na`], [`Frame::l4_raw`]. Then [`Frame::payload`],
//! [`Frame::pad_to`] (grows the innermost payload, so IP lengths include
//! it) and [`Frame::eth_pad_to`] (Ethernet trailer after the datagram, not
//! counted in any IP length). A modifier called before its L3 call panics:
//! this is a test tool, and a silent no-op would hide a mistake.

use crate::checksum::{checksum, crc32c, l4_checksum_v4, l4_checksum_v6};

/// A UDP checksum that computes to 0 is sent as 0xffff (RFC 768): 0 in the
/// field means "no checksum".
fn udp_zero(proto: u8, c: u16) -> u16 {
    if proto == 17 && c == 0 {
        0xffff
    } else {
        c
    }
}

/// The network layer of a frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum L3 {
    Ipv4 {
        src: u32,
        dst: u32,
        ttl: u8,
        tos: u8,
        options: Vec<u8>,
        /// (more fragments, offset in 8-byte units)
        frag: (bool, u16),
    },
    Ipv6 {
        src: u128,
        dst: u128,
        hlimit: u8,
        tclass: u8,
        label: u32,
        /// Extension headers before the upper layer, in order: 0
        /// (hop-by-hop), 43 (routing), 60 (destination options), 8 bytes
        /// each (a PadN option, or a routing header with no segments left),
        /// or 51 (authentication header, 24 bytes with a 12-byte ICV).
        ext: Vec<u8>,
        /// A fragment header: (more fragments, offset in 8-byte units).
        frag: Option<(bool, u16)>,
    },
    /// ARP over Ethernet/IPv4.
    Arp { op: u16, sha: [u8; 6], spa: u32, tha: [u8; 6], tpa: u32 },
    /// Any other Ethertype with a raw payload.
    Other(u16),
}

impl L3 {
    pub fn ipv4(src: u32, dst: u32) -> L3 {
        L3::Ipv4 { src, dst, ttl: 64, tos: 0, options: Vec::new(), frag: (false, 0) }
    }
    pub fn ipv6(src: u128, dst: u128) -> L3 {
        L3::Ipv6 { src, dst, hlimit: 64, tclass: 0, label: 0, ext: Vec::new(), frag: None }
    }
}

/// The transport layer of an IP frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum L4 {
    Udp {
        src: u16,
        dst: u16,
    },
    Tcp {
        src: u16,
        dst: u16,
        flags: u16,
    },
    Sctp {
        src: u16,
        dst: u16,
    },
    IcmpEcho {
        id: u16,
        seq: u16,
    },
    Icmp6Echo {
        id: u16,
        seq: u16,
    },
    /// Neighbour solicitation with an optional source link-layer address.
    NdNs {
        target: u128,
        sll: Option<[u8; 6]>,
    },
    /// Neighbour advertisement with an optional target link-layer address.
    NdNa {
        target: u128,
        tll: Option<[u8; 6]>,
    },
    /// A protocol number with the payload as its body, verbatim (no
    /// checksum is filled in).
    Raw(u8),
}

/// A frame under construction; see the [module documentation](self).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Frame {
    src: [u8; 6],
    dst: [u8; 6],
    tags: Vec<(u16, u16)>,
    l3: Option<L3>,
    l4: Option<L4>,
    payload: Vec<u8>,
    pad_to: usize,
    eth_pad_to: usize,
}

/// The fluent name for [`Frame`]: `PacketBuilder::default().eth(src, dst)...`.
pub type PacketBuilder = Frame;

impl Frame {
    pub fn new(src: [u8; 6], dst: [u8; 6]) -> Frame {
        Frame { src, dst, ..Frame::default() }
    }
    /// Sets the Ethernet source and destination addresses.
    pub fn eth(mut self, src: [u8; 6], dst: [u8; 6]) -> Frame {
        self.src = src;
        self.dst = dst;
        self
    }
    /// Adds a VLAN tag (outermost first): TPID 0x8100 or 0x88a8, TCI.
    pub fn vlan(mut self, tpid: u16, tci: u16) -> Frame {
        self.tags.push((tpid, tci));
        self
    }
    pub fn l3(mut self, l3: L3) -> Frame {
        self.l3 = Some(l3);
        self
    }
    pub fn l4(mut self, l4: L4) -> Frame {
        self.l4 = Some(l4);
        self
    }
    pub fn payload(mut self, p: &[u8]) -> Frame {
        self.payload = p.to_vec();
        self
    }
    /// Pads the innermost payload (with zeros, before checksumming) so the
    /// frame is at least `len` bytes; IP and UDP lengths include it.
    pub fn pad_to(mut self, len: usize) -> Frame {
        self.pad_to = len;
        self
    }
    /// Appends zero bytes after the finished frame until it is at least
    /// `len` bytes long: an Ethernet trailer that no IP length covers (as a
    /// NIC pads a short frame to 60 bytes).
    pub fn eth_pad_to(mut self, len: usize) -> Frame {
        self.eth_pad_to = len;
        self
    }

    // ---- Fluent L3 -------------------------------------------------------

    /// IPv4 with TTL 64, TOS 0, no options, not a fragment.
    pub fn ipv4(self, src: u32, dst: u32) -> Frame {
        self.l3(L3::ipv4(src, dst))
    }
    /// IPv6 with hop limit 64, traffic class and flow label 0.
    pub fn ipv6(self, src: u128, dst: u128) -> Frame {
        self.l3(L3::ipv6(src, dst))
    }
    /// ARP over Ethernet/IPv4 (hardware type 1, protocol 0x0800).
    pub fn arp(self, op: u16, sha: [u8; 6], spa: u32, tha: [u8; 6], tpa: u32) -> Frame {
        self.l3(L3::Arp { op, sha, spa, tha, tpa })
    }
    /// Any other Ethertype; the payload follows the type field. A value
    /// below 0x0600 makes an 802.3 frame (a length field).
    pub fn ethertype(self, ty: u16) -> Frame {
        self.l3(L3::Other(ty))
    }
    /// IPv4 TTL or IPv6 hop limit.
    pub fn ip_ttl(mut self, ttl: u8) -> Frame {
        match &mut self.l3 {
            Some(L3::Ipv4 { ttl: t, .. }) | Some(L3::Ipv6 { hlimit: t, .. }) => *t = ttl,
            _ => panic!("ip_ttl: call ipv4() or ipv6() first"),
        }
        self
    }
    /// IPv4 TOS byte or IPv6 traffic class (DSCP << 2 | ECN).
    pub fn ip_tos(mut self, tos: u8) -> Frame {
        match &mut self.l3 {
            Some(L3::Ipv4 { tos: t, .. }) | Some(L3::Ipv6 { tclass: t, .. }) => *t = tos,
            _ => panic!("ip_tos: call ipv4() or ipv6() first"),
        }
        self
    }
    /// IPv4 options, zero-padded to a multiple of 4 bytes.
    pub fn ip_options(mut self, opts: &[u8]) -> Frame {
        match &mut self.l3 {
            Some(L3::Ipv4 { options, .. }) => *options = opts.to_vec(),
            _ => panic!("ip_options: call ipv4() first"),
        }
        self
    }
    /// Fragment fields: more-fragments flag and offset in 8-byte units. For
    /// IPv6 this adds a fragment header (as [`Frame::ipv6_frag`]).
    pub fn ip_frag(mut self, more: bool, offset_units: u16) -> Frame {
        match &mut self.l3 {
            Some(L3::Ipv4 { frag, .. }) => *frag = (more, offset_units),
            Some(L3::Ipv6 { frag, .. }) => *frag = Some((more, offset_units)),
            _ => panic!("ip_frag: call ipv4() or ipv6() first"),
        }
        self
    }
    /// The 20-bit IPv6 flow label.
    pub fn ipv6_label(mut self, label: u32) -> Frame {
        match &mut self.l3 {
            Some(L3::Ipv6 { label: l, .. }) => *l = label & 0xfffff,
            _ => panic!("ipv6_label: call ipv6() first"),
        }
        self
    }
    /// Appends an extension header: 0 (hop-by-hop), 43 (routing), 60
    /// (destination options) or 51 (AH). Headers appear in call order,
    /// before any fragment header.
    pub fn ipv6_ext(mut self, kind: u8) -> Frame {
        assert!(matches!(kind, 0 | 43 | 60 | 51), "ipv6_ext: unsupported header {kind}");
        match &mut self.l3 {
            Some(L3::Ipv6 { ext, .. }) => ext.push(kind),
            _ => panic!("ipv6_ext: call ipv6() first"),
        }
        self
    }
    /// Adds a fragment header (after the other extension headers).
    pub fn ipv6_frag(mut self, more: bool, offset_units: u16) -> Frame {
        match &mut self.l3 {
            Some(L3::Ipv6 { frag, .. }) => *frag = Some((more, offset_units)),
            _ => panic!("ipv6_frag: call ipv6() first"),
        }
        self
    }

    // ---- Fluent L4 -------------------------------------------------------

    pub fn udp(self, src: u16, dst: u16) -> Frame {
        self.l4(L4::Udp { src, dst })
    }
    /// TCP with data offset 5; `flags` are the low 12 bits of the
    /// offset/flags word (FIN 0x01, SYN 0x02, RST 0x04, PSH 0x08, ACK
    /// 0x10, URG 0x20, ECE 0x40, CWR 0x80, NS 0x100).
    pub fn tcp(self, src: u16, dst: u16, flags: u16) -> Frame {
        self.l4(L4::Tcp { src, dst, flags })
    }
    /// SCTP common header (verification tag 1, CRC32c filled in); the
    /// payload is the chunks.
    pub fn sctp(self, src: u16, dst: u16) -> Frame {
        self.l4(L4::Sctp { src, dst })
    }
    /// ICMPv4 echo request (type 8, code 0).
    pub fn icmp_echo(self, id: u16, seq: u16) -> Frame {
        self.l4(L4::IcmpEcho { id, seq })
    }
    /// ICMPv6 echo request (type 128, code 0).
    pub fn icmpv6_echo(self, id: u16, seq: u16) -> Frame {
        self.l4(L4::Icmp6Echo { id, seq })
    }
    /// Neighbour solicitation (type 135) for `target`, with a source
    /// link-layer address option if `sll` is given.
    pub fn nd_ns(self, target: u128, sll: Option<[u8; 6]>) -> Frame {
        self.l4(L4::NdNs { target, sll })
    }
    /// Neighbour advertisement (type 136) for `target`, with a target
    /// link-layer address option if `tll` is given.
    pub fn nd_na(self, target: u128, tll: Option<[u8; 6]>) -> Frame {
        self.l4(L4::NdNa { target, tll })
    }
    /// An arbitrary IP protocol number whose body is the payload.
    pub fn l4_raw(self, proto: u8) -> Frame {
        self.l4(L4::Raw(proto))
    }

    fn l4_bytes(&self, extra: usize) -> (u8, Vec<u8>) {
        let mut body = self.payload.clone();
        body.resize(body.len() + extra, 0);
        match &self.l4 {
            None => (59, body),
            Some(L4::Udp { src, dst }) => {
                let mut v = Vec::with_capacity(8 + body.len());
                v.extend_from_slice(&src.to_be_bytes());
                v.extend_from_slice(&dst.to_be_bytes());
                v.extend_from_slice(&((8 + body.len()) as u16).to_be_bytes());
                v.extend_from_slice(&[0, 0]);
                v.extend_from_slice(&body);
                (17, v)
            }
            Some(L4::Tcp { src, dst, flags }) => {
                let mut v = Vec::with_capacity(20 + body.len());
                v.extend_from_slice(&src.to_be_bytes());
                v.extend_from_slice(&dst.to_be_bytes());
                v.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0]);
                v.extend_from_slice(&((5u16 << 12) | (flags & 0x0fff)).to_be_bytes());
                v.extend_from_slice(&[0xff, 0xff, 0, 0, 0, 0]);
                v.extend_from_slice(&body);
                (6, v)
            }
            Some(L4::Sctp { src, dst }) => {
                let mut v = Vec::new();
                v.extend_from_slice(&src.to_be_bytes());
                v.extend_from_slice(&dst.to_be_bytes());
                v.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0]);
                v.extend_from_slice(&body);
                let crc = crc32c(&v);
                v[8..12].copy_from_slice(&crc.to_le_bytes());
                (132, v)
            }
            Some(L4::IcmpEcho { id, seq }) | Some(L4::Icmp6Echo { id, seq }) => {
                let v6 = matches!(self.l4, Some(L4::Icmp6Echo { .. }));
                let mut v = vec![if v6 { 128 } else { 8 }, 0, 0, 0];
                v.extend_from_slice(&id.to_be_bytes());
                v.extend_from_slice(&seq.to_be_bytes());
                v.extend_from_slice(&body);
                (if v6 { 58 } else { 1 }, v)
            }
            Some(L4::NdNs { target, sll }) | Some(L4::NdNa { target, tll: sll }) => {
                let ns = matches!(self.l4, Some(L4::NdNs { .. }));
                let mut v = vec![if ns { 135 } else { 136 }, 0, 0, 0, 0, 0, 0, 0];
                v.extend_from_slice(&target.to_be_bytes());
                if let Some(mac) = sll {
                    v.extend_from_slice(&[if ns { 1 } else { 2 }, 1]);
                    v.extend_from_slice(mac);
                }
                v.extend_from_slice(&body);
                (58, v)
            }
            Some(L4::Raw(p)) => (*p, body),
        }
    }

    /// The finished frame, checksums filled in.
    pub fn build(&self) -> Vec<u8> {
        let mut f = self.build_with_pad(0);
        if f.len() < self.pad_to {
            let extra = self.pad_to - f.len();
            f = self.build_with_pad(extra);
        }
        if f.len() < self.eth_pad_to {
            f.resize(self.eth_pad_to, 0);
        }
        f
    }

    fn build_with_pad(&self, extra: usize) -> Vec<u8> {
        let mut f = Vec::with_capacity(128);
        f.extend_from_slice(&self.dst);
        f.extend_from_slice(&self.src);
        for (tpid, tci) in &self.tags {
            f.extend_from_slice(&tpid.to_be_bytes());
            f.extend_from_slice(&tci.to_be_bytes());
        }
        match &self.l3 {
            None => {
                f.extend_from_slice(&0x88b5u16.to_be_bytes());
                f.extend_from_slice(&self.payload);
                f.resize(f.len() + extra, 0);
            }
            Some(L3::Other(t)) => {
                f.extend_from_slice(&t.to_be_bytes());
                f.extend_from_slice(&self.payload);
                f.resize(f.len() + extra, 0);
            }
            Some(L3::Arp { op, sha, spa, tha, tpa }) => {
                f.extend_from_slice(&0x0806u16.to_be_bytes());
                f.extend_from_slice(&[0, 1, 8, 0, 6, 4]);
                f.extend_from_slice(&op.to_be_bytes());
                f.extend_from_slice(sha);
                f.extend_from_slice(&spa.to_be_bytes());
                f.extend_from_slice(tha);
                f.extend_from_slice(&tpa.to_be_bytes());
                f.resize(f.len() + extra, 0);
            }
            Some(L3::Ipv4 { src, dst, ttl, tos, options, frag }) => {
                f.extend_from_slice(&0x0800u16.to_be_bytes());
                let (proto, mut l4) = self.l4_bytes(extra);
                let later = frag.1 != 0;
                if !later && matches!(self.l4, Some(L4::Udp { .. }) | Some(L4::Tcp { .. })) {
                    let off = if proto == 17 { 6 } else { 16 };
                    let c = udp_zero(proto, l4_checksum_v4(*src, *dst, proto, &l4));
                    l4[off..off + 2].copy_from_slice(&c.to_be_bytes());
                } else if !later && matches!(self.l4, Some(L4::IcmpEcho { .. })) {
                    let c = checksum(&l4);
                    l4[2..4].copy_from_slice(&c.to_be_bytes());
                }
                let mut opts = options.clone();
                opts.resize(opts.len().div_ceil(4) * 4, 0);
                assert!(opts.len() <= 40, "IPv4 options longer than 40 bytes");
                let ihl = 20 + opts.len();
                let total = (ihl + l4.len()) as u16;
                let ff = ((frag.0 as u16) << 13) | (frag.1 & 0x1fff);
                let mut h = vec![0x40 | (ihl / 4) as u8, *tos];
                h.extend_from_slice(&total.to_be_bytes());
                h.extend_from_slice(&[0, 1]);
                h.extend_from_slice(&ff.to_be_bytes());
                h.extend_from_slice(&[*ttl, proto, 0, 0]);
                h.extend_from_slice(&src.to_be_bytes());
                h.extend_from_slice(&dst.to_be_bytes());
                h.extend_from_slice(&opts);
                let c = checksum(&h);
                h[10..12].copy_from_slice(&c.to_be_bytes());
                f.extend_from_slice(&h);
                f.extend_from_slice(&l4);
            }
            Some(L3::Ipv6 { src, dst, hlimit, tclass, label, ext, frag }) => {
                f.extend_from_slice(&0x86ddu16.to_be_bytes());
                let (proto, mut l4) = self.l4_bytes(extra);
                let c_off = match self.l4 {
                    Some(L4::Udp { .. }) => Some(6),
                    Some(L4::Tcp { .. }) => Some(16),
                    Some(L4::Icmp6Echo { .. }) | Some(L4::NdNs { .. }) | Some(L4::NdNa { .. }) => Some(2),
                    _ => None,
                };
                if let (Some(o), false) = (c_off, matches!(frag, Some((_, off)) if *off != 0)) {
                    let c = udp_zero(proto, l4_checksum_v6(*src, *dst, proto, &l4));
                    l4[o..o + 2].copy_from_slice(&c.to_be_bytes());
                }
                // Chain: ext headers, then the fragment header, then L4.
                let mut chain: Vec<u8> = ext.clone();
                if frag.is_some() {
                    chain.push(44);
                }
                let mut hdrs = Vec::new();
                for (i, &kind) in chain.iter().enumerate() {
                    let next = chain.get(i + 1).copied().unwrap_or(proto);
                    match kind {
                        44 => {
                            let (mf, off) = frag.unwrap_or((false, 0));
                            hdrs.push(next);
                            hdrs.push(0);
                            hdrs.extend_from_slice(&((off << 3) | mf as u16).to_be_bytes());
                            hdrs.extend_from_slice(&[0, 0, 0, 1]);
                        }
                        // AH: length in 4-byte units minus 2; SPI, sequence
                        // number, 12-byte ICV.
                        51 => {
                            hdrs.extend_from_slice(&[next, 4, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1]);
                            hdrs.extend_from_slice(&[0; 12]);
                        }
                        // Routing: type 0, no segments left (ignored by a
                        // receiver).
                        43 => hdrs.extend_from_slice(&[next, 0, 0, 0, 0, 0, 0, 0]),
                        // Options: one PadN of 4 bytes.
                        _ => hdrs.extend_from_slice(&[next, 0, 1, 4, 0, 0, 0, 0]),
                    }
                }
                let first = chain.first().copied().unwrap_or(proto);
                let w = (6u32 << 28) | ((*tclass as u32) << 20) | (label & 0xfffff);
                f.extend_from_slice(&w.to_be_bytes());
                f.extend_from_slice(&((hdrs.len() + l4.len()) as u16).to_be_bytes());
                f.extend_from_slice(&[first, *hlimit]);
                f.extend_from_slice(&src.to_be_bytes());
                f.extend_from_slice(&dst.to_be_bytes());
                f.extend_from_slice(&hdrs);
                f.extend_from_slice(&l4);
            }
        }
        f
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: [u8; 6] = [2, 0, 0, 0, 0, 1];
    const B: [u8; 6] = [2, 0, 0, 0, 0, 2];

    #[test]
    fn udp_checksum_verifies() {
        let f = Frame::new(A, B)
            .l3(L3::ipv4(0x0a00_0001, 0x0a00_0002))
            .l4(L4::Udp { src: 1, dst: 2 })
            .payload(b"hello")
            .build();
        assert_eq!(checksum(&f[14..34]), 0, "IPv4 header checksum");
        assert_eq!(l4_checksum_v4(0x0a00_0001, 0x0a00_0002, 17, &f[34..]), 0, "UDP checksum");
        let f = Frame::new(A, B).l3(L3::ipv6(1, 2)).l4(L4::Tcp { src: 1, dst: 2, flags: 0x12 }).build();
        assert_eq!(l4_checksum_v6(1, 2, 6, &f[54..]), 0, "TCP over IPv6 checksum");
    }

    #[test]
    fn every_checksum_verifies() {
        let (s4, d4) = (0xc0a8_0001, 0x0808_0808);
        let (s6, d6) = (0x2001_0db8 << 96 | 1, 0xfe80 << 112 | 0x1234_5678);
        // IPv4 with options behind two tags: header at 22, L4 at 22 + 28.
        for (proto, f) in [
            (
                17u8,
                PacketBuilder::default()
                    .eth(A, B)
                    .vlan(0x88a8, 1)
                    .vlan(0x8100, 2)
                    .ipv4(s4, d4)
                    .ip_options(&[1, 1, 1, 0, 0, 0])
                    .udp(9, 9)
                    .payload(b"odd")
                    .build(),
            ),
            (
                6,
                PacketBuilder::default()
                    .eth(A, B)
                    .vlan(0x88a8, 1)
                    .vlan(0x8100, 2)
                    .ipv4(s4, d4)
                    .ip_options(&[1; 8])
                    .tcp(1, 2, 0x18)
                    .payload(b"data!")
                    .build(),
            ),
        ] {
            assert_eq!(f[22], 0x47);
            assert_eq!(checksum(&f[22..50]), 0);
            assert_eq!(l4_checksum_v4(s4, d4, proto, &f[50..]), 0, "proto {proto}");
        }
        let f = PacketBuilder::default().eth(A, B).ipv4(s4, d4).icmp_echo(7, 8).payload(b"ping!").build();
        assert_eq!((f[34], checksum(&f[14..34]), checksum(&f[34..])), (8, 0, 0));
        // IPv6 through every extension header kind.
        let ext = |b: Frame| b.ipv6_ext(0).ipv6_ext(43).ipv6_ext(60).ipv6_ext(51);
        let l4_at = 14 + 40 + 8 * 3 + 24;
        for (proto, f) in [
            (17u8, ext(PacketBuilder::default().eth(A, B).ipv6(s6, d6)).udp(1, 2).payload(b"x").build()),
            (6, ext(PacketBuilder::default().eth(A, B).ipv6(s6, d6)).tcp(1, 2, 2).build()),
            (58, ext(PacketBuilder::default().eth(A, B).ipv6(s6, d6)).icmpv6_echo(1, 2).build()),
            (58, ext(PacketBuilder::default().eth(A, B).ipv6(s6, d6)).nd_ns(d6, Some(A)).build()),
            (58, ext(PacketBuilder::default().eth(A, B).ipv6(s6, d6)).nd_na(s6, Some(B)).build()),
        ] {
            assert_eq!(u16::from_be_bytes([f[18], f[19]]) as usize, f.len() - 54, "payload length");
            assert_eq!(l4_checksum_v6(s6, d6, proto, &f[l4_at..]), 0, "proto {proto}");
        }
        // Header chain: 0 -> 43 -> 60 -> 51 -> 17.
        let f = ext(PacketBuilder::default().eth(A, B).ipv6(s6, d6)).udp(1, 2).build();
        assert_eq!((f[20], f[54], f[62], f[70], f[78], f[79]), (0, 43, 60, 51, 17, 4));
        // SCTP: CRC32c over the packet with the checksum field zeroed,
        // stored little-endian.
        let f = PacketBuilder::default().eth(A, B).ipv4(s4, d4).sctp(5, 6).payload(&[1, 0, 0, 4]).build();
        let mut z = f[34..].to_vec();
        let stored = u32::from_le_bytes([z[8], z[9], z[10], z[11]]);
        z[8..12].fill(0);
        assert_eq!(stored, crc32c(&z));
    }

    #[test]
    fn fragments() {
        let f = PacketBuilder::default().eth(A, B).ipv4(1, 2).ip_frag(true, 100).udp(1, 2).build();
        assert_eq!(u16::from_be_bytes([f[20], f[21]]), 0x2000 | 100);
        assert_eq!(checksum(&f[14..34]), 0);
        let f = PacketBuilder::default().eth(A, B).ipv6(1, 2).ipv6_ext(0).ipv6_frag(false, 3).udp(1, 2).build();
        assert_eq!((f[20], f[54], f[62]), (0, 44, 17));
        assert_eq!(u16::from_be_bytes([f[64], f[65]]), 3 << 3);
    }

    #[test]
    fn fluent_fields() {
        let f = PacketBuilder::default().eth(A, B).ipv6(1, 2).ip_tos(0xa5).ipv6_label(0x12345).ip_ttl(9).build();
        assert_eq!(&f[0..6], &B, "destination first on the wire");
        assert_eq!(&f[6..12], &A);
        assert_eq!(u32::from_be_bytes([f[14], f[15], f[16], f[17]]), 0x6a51_2345);
        assert_eq!((f[20], f[21]), (59, 9));
        let f = PacketBuilder::default().eth(A, B).arp(2, A, 0x0a00_0001, B, 0x0a00_0002).build();
        assert_eq!(f.len(), 42);
        assert_eq!(&f[12..22], &[0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 2]);
        assert_eq!(&f[32..38], &B);
    }

    #[test]
    fn padding() {
        let f = Frame::new([0; 6], [0; 6]).l3(L3::ipv4(1, 2)).l4(L4::Udp { src: 1, dst: 2 }).pad_to(1514).build();
        assert_eq!(f.len(), 1514);
        assert_eq!(u16::from_be_bytes([f[16], f[17]]), 1500);
        assert_eq!(u16::from_be_bytes([f[38], f[39]]), 1480);
        assert_eq!(l4_checksum_v4(1, 2, 17, &f[34..]), 0);
        // An Ethernet trailer is outside every IP length.
        let f = PacketBuilder::default().ipv4(1, 2).udp(1, 2).eth_pad_to(60).build();
        assert_eq!((f.len(), u16::from_be_bytes([f[16], f[17]])), (60, 28));
        assert_eq!(l4_checksum_v4(1, 2, 17, &f[34..42]), 0);
    }

    #[test]
    #[should_panic(expected = "call ipv4() first")]
    fn modifier_without_l3_panics() {
        let _ = PacketBuilder::default().ip_options(&[1]);
    }
}
