//! The packet as the tracker sees it: where its IP and transport headers
//! are, and the connection tuple they carry.
//!
//! [`parse`] reads an Ethernet frame (up to two VLAN tags) and returns a
//! [`Parsed`] view, or the reason it cannot be tracked. It never panics and
//! never allocates. ICMP errors also carry the tuple of the packet they
//! quote (`inner`), which is how they are related to a connection.

/// IP protocol numbers the tracker knows.
pub mod proto {
    pub const ICMP: u8 = 1;
    pub const TCP: u8 = 6;
    pub const UDP: u8 = 17;
    pub const ICMPV6: u8 = 58;
    pub const SCTP: u8 = 132;
    pub const UDPLITE: u8 = 136;
}

/// A connection tuple in one direction. Addresses are 128 bits; IPv4
/// addresses sit in the low 32 bits with `v6 == false`.
///
/// For ICMP echo-style messages `sport` is the identifier and `dport` holds
/// `type << 8 | code`; [`Tuple::reverse`] maps a request type to its reply
/// type, so the reply of a request finds the request's connection. For
/// protocols without ports both are 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(Rust, packed(8))]
pub struct Tuple {
    pub src: u128,
    pub dst: u128,
    pub sport: u16,
    pub dport: u16,
    pub proto: u8,
    pub v6: bool,
}

/// The reply type of an ICMP/ICMPv6 query type, if it has one.
pub fn icmp_reply_type(v6: bool, ty: u8) -> Option<u8> {
    match (v6, ty) {
        (false, 8) => Some(0),
        (false, 13) => Some(14),
        (false, 15) => Some(16),
        (false, 17) => Some(18),
        (true, 128) => Some(129),
        _ => None,
    }
}

/// The request type a reply type answers.
fn icmp_request_type(v6: bool, ty: u8) -> Option<u8> {
    match (v6, ty) {
        (false, 0) => Some(8),
        (false, 14) => Some(13),
        (false, 16) => Some(15),
        (false, 18) => Some(17),
        (true, 129) => Some(128),
        _ => None,
    }
}

/// Whether an ICMP type is a query or the answer to one.
fn is_query(v6: bool, ty: u8) -> bool {
    icmp_reply_type(v6, ty).is_some() || icmp_request_type(v6, ty).is_some()
}

impl Tuple {
    pub fn is_icmp(&self) -> bool {
        matches!(self.proto, proto::ICMP | proto::ICMPV6)
    }

    /// The tuple the other direction's packets carry (before any NAT).
    pub fn reverse(&self) -> Tuple {
        let mut r = Tuple { src: self.dst, dst: self.src, sport: self.dport, dport: self.sport, ..*self };
        if self.is_icmp() {
            // Query/answer: same identifier, the type maps request <-> reply.
            let ty = (self.dport >> 8) as u8;
            let code = self.dport & 0xff;
            let other = icmp_reply_type(self.v6, ty).or_else(|| icmp_request_type(self.v6, ty)).unwrap_or(ty);
            r.sport = self.sport;
            r.dport = (other as u16) << 8 | code;
        }
        r
    }

    /// Whether a connection may start with this tuple's packet (ICMP: only
    /// query types).
    pub fn can_start(&self) -> bool {
        !self.is_icmp() || icmp_reply_type(self.v6, (self.dport >> 8) as u8).is_some()
    }

    pub fn has_ports(&self) -> bool {
        matches!(self.proto, proto::TCP | proto::UDP | proto::SCTP | proto::UDPLITE)
    }
}

/// TCP header fields the window tracker needs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpSeg {
    pub seq: u32,
    pub ack: u32,
    pub flags: u16,
    pub win: u16,
    /// Payload bytes (not counting SYN/FIN).
    pub len: u32,
    /// The window scale option, if the segment carries one (SYNs).
    pub wscale: Option<u8>,
}

pub mod tcp_flags {
    pub const FIN: u16 = 0x01;
    pub const SYN: u16 = 0x02;
    pub const RST: u16 = 0x04;
    pub const PSH: u16 = 0x08;
    pub const ACK: u16 = 0x10;
    pub const URG: u16 = 0x20;
}

/// Where the headers of a trackable packet are, and what they say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Parsed {
    pub tuple: Tuple,
    /// Offset of the IP header in the frame.
    pub l3: usize,
    /// Offset of the transport header (after IPv6 extension headers).
    pub l4: usize,
    /// End of the IP datagram (Ethernet padding excluded).
    pub end: usize,
    pub tcp: Option<TcpSeg>,
    /// For an ICMP error: the tuple of the quoted packet as that packet
    /// carried it, and the offset of its IP header in the frame. Boxed:
    /// every tracked packet's `Parsed` is moved through a few returns, and
    /// this rare part would double its size.
    pub inner: Option<Box<(Tuple, usize)>>,
}

/// Why a packet cannot be tracked. All of them make the packet `+inv`
/// (non-IP frames are `+inv` too, as in Open vSwitch).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Untrackable {
    NotIp,
    Truncated,
    /// A fragment: reassembly is not done yet, so it cannot be tracked.
    Fragment,
    /// An ICMP error that does not quote a trackable packet.
    BadIcmpError,
    /// An ICMP type that neither starts a query nor reports an error.
    BadIcmpType,
    BadChecksum,
}

impl Untrackable {
    pub fn name(self) -> &'static str {
        match self {
            Untrackable::NotIp => "not_ip",
            Untrackable::Truncated => "truncated",
            Untrackable::Fragment => "fragment",
            Untrackable::BadIcmpError => "bad_icmp_error",
            Untrackable::BadIcmpType => "bad_icmp_type",
            Untrackable::BadChecksum => "bad_checksum",
        }
    }
}

pub(crate) fn be16(b: &[u8], o: usize) -> Option<u16> {
    Some(u16::from_be_bytes(b.get(o..o + 2)?.try_into().ok()?))
}
pub(crate) fn be32(b: &[u8], o: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(o..o + 4)?.try_into().ok()?))
}
pub(crate) fn be128(b: &[u8], o: usize) -> Option<u128> {
    Some(u128::from_be_bytes(b.get(o..o + 16)?.try_into().ok()?))
}

/// The offset of the IP header and the Ethertype, after up to two tags.
pub fn l3_offset(frame: &[u8]) -> Option<(usize, u16)> {
    let mut off = 12;
    let mut ty = be16(frame, off)?;
    let mut tags = 0;
    while (ty == 0x8100 || ty == 0x88a8) && tags < 2 {
        off += 4;
        ty = be16(frame, off)?;
        tags += 1;
    }
    Some((off + 2, ty))
}

/// Parses `frame` for tracking. `validate` checks the IPv4 header's and
/// the TCP/UDP/ICMP checksums, as Open vSwitch's tracker does when it
/// validates (a later pass over a packet already checked skips them).
pub fn parse(frame: &[u8], validate: bool) -> Result<Parsed, Untrackable> {
    let (l3, ty) = l3_offset(frame).ok_or(Untrackable::Truncated)?;
    // Filled in place by the functions below: moving a `Parsed` through
    // each of their returns cost more than the parse itself.
    let mut p = Parsed::empty();
    match ty {
        0x0800 => parse_ip4(frame, l3, validate, 0, &mut p)?,
        0x86dd => parse_ip6(frame, l3, validate, 0, &mut p)?,
        _ => return Err(Untrackable::NotIp),
    }
    Ok(p)
}

impl Parsed {
    fn empty() -> Parsed {
        let tuple = Tuple { src: 0, dst: 0, sport: 0, dport: 0, proto: 0, v6: false };
        Parsed { tuple, l3: 0, l4: 0, end: 0, tcp: None, inner: None }
    }
}

/// `depth` is 1 while parsing the packet an ICMP error quotes: it may be
/// cut short after 8 bytes of transport header, and its checksums are not
/// checked.
fn parse_ip4(b: &[u8], l3: usize, validate: bool, depth: u8, p: &mut Parsed) -> Result<(), Untrackable> {
    let h = b.get(l3..l3 + 20).ok_or(Untrackable::Truncated)?;
    if h[0] >> 4 != 4 {
        return Err(Untrackable::Truncated);
    }
    let ihl = (h[0] & 0xf) as usize * 4;
    let total = u16::from_be_bytes([h[2], h[3]]) as usize;
    if ihl < 20 || b.len() < l3 + ihl {
        return Err(Untrackable::Truncated);
    }
    let end = if depth == 0 {
        if total < ihl || l3 + total > b.len() {
            return Err(Untrackable::Truncated);
        }
        if validate && wire::checksum::checksum(&b[l3..l3 + ihl]) != 0 {
            return Err(Untrackable::BadChecksum);
        }
        l3 + total
    } else {
        b.len().min(l3 + total.max(ihl))
    };
    let frag = u16::from_be_bytes([h[6], h[7]]);
    if frag & 0x3fff != 0 {
        return Err(Untrackable::Fragment);
    }
    let src = u32::from_be_bytes([h[12], h[13], h[14], h[15]]) as u128;
    let dst = u32::from_be_bytes([h[16], h[17], h[18], h[19]]) as u128;
    let t = Tuple { src, dst, sport: 0, dport: 0, proto: h[9], v6: false };
    l4(b, l3, l3 + ihl, end, t, validate, depth, p)
}

fn parse_ip6(b: &[u8], l3: usize, validate: bool, depth: u8, p: &mut Parsed) -> Result<(), Untrackable> {
    let h = b.get(l3..l3 + 40).ok_or(Untrackable::Truncated)?;
    if h[0] >> 4 != 6 {
        return Err(Untrackable::Truncated);
    }
    let plen = u16::from_be_bytes([h[4], h[5]]) as usize;
    let end = if depth == 0 {
        if l3 + 40 + plen > b.len() {
            return Err(Untrackable::Truncated);
        }
        l3 + 40 + plen
    } else {
        b.len().min(l3 + 40 + plen)
    };
    let mut next = h[6];
    let mut off = l3 + 40;
    // Walk hop-by-hop, routing, destination options and AH headers.
    for _ in 0..8 {
        match next {
            0 | 43 | 60 => {
                let nh = *b.get(off).ok_or(Untrackable::Truncated)?;
                let len = (*b.get(off + 1).ok_or(Untrackable::Truncated)? as usize + 1) * 8;
                next = nh;
                off += len;
            }
            51 => {
                let nh = *b.get(off).ok_or(Untrackable::Truncated)?;
                let len = (*b.get(off + 1).ok_or(Untrackable::Truncated)? as usize + 2) * 4;
                next = nh;
                off += len;
            }
            44 => return Err(Untrackable::Fragment),
            _ => break,
        }
        if off > end {
            return Err(Untrackable::Truncated);
        }
    }
    let t = Tuple {
        src: be128(h, 8).unwrap_or(0),
        dst: be128(h, 24).unwrap_or(0),
        sport: 0,
        dport: 0,
        proto: next,
        v6: true,
    };
    l4(b, l3, off, end, t, validate, depth, p)
}

#[allow(clippy::too_many_arguments)] // reason: the parse's state, passed down without a struct
fn l4(
    b: &[u8],
    l3: usize,
    l4: usize,
    end: usize,
    mut t: Tuple,
    validate: bool,
    depth: u8,
    p: &mut Parsed,
) -> Result<(), Untrackable> {
    let seg = b.get(l4..end).ok_or(Untrackable::Truncated)?;
    (p.l3, p.l4, p.end, p.tcp, p.inner) = (l3, l4, end, None, None);
    // Copied out: `Tuple` is packed, so a closure cannot borrow fields of it.
    let (v6, src, dst, pr) = (t.v6, t.src, t.dst, t.proto);
    let csum_ok = |seg: &[u8]| -> bool {
        if !validate || depth > 0 {
            return true;
        }
        if v6 {
            wire::checksum::l4_checksum_v6(src, dst, pr, seg) == 0
        } else {
            wire::checksum::l4_checksum_v4(src as u32, dst as u32, pr, seg) == 0
        }
    };
    match t.proto {
        proto::TCP => {
            if seg.len() < 20 && depth == 0 || seg.len() < 8 {
                return Err(Untrackable::Truncated);
            }
            t.sport = be16(seg, 0).unwrap_or(0);
            t.dport = be16(seg, 2).unwrap_or(0);
            if depth == 0 {
                let doff = (seg[12] >> 4) as usize * 4;
                if doff < 20 || doff > seg.len() {
                    return Err(Untrackable::Truncated);
                }
                if !csum_ok(seg) {
                    return Err(Untrackable::BadChecksum);
                }
                p.tcp = Some(TcpSeg {
                    seq: be32(seg, 4).unwrap_or(0),
                    ack: be32(seg, 8).unwrap_or(0),
                    flags: be16(seg, 12).unwrap_or(0) & 0x0fff,
                    win: be16(seg, 14).unwrap_or(0),
                    len: (seg.len() - doff) as u32,
                    wscale: tcp_wscale(&seg[20..doff]),
                });
            }
        }
        proto::UDP | proto::UDPLITE | proto::SCTP => {
            if seg.len() < 8 {
                return Err(Untrackable::Truncated);
            }
            t.sport = be16(seg, 0).unwrap_or(0);
            t.dport = be16(seg, 2).unwrap_or(0);
            // UDP over IPv4 may omit its checksum (0); SCTP uses CRC32c.
            let check = t.proto == proto::UDP && (t.v6 || be16(seg, 6) != Some(0));
            if check && !csum_ok(seg) {
                return Err(Untrackable::BadChecksum);
            }
        }
        proto::ICMP | proto::ICMPV6 => {
            let v6 = t.proto == proto::ICMPV6;
            if seg.len() < 8 || v6 != t.v6 {
                return Err(Untrackable::Truncated);
            }
            let icmp_ok = if v6 { csum_ok(seg) } else { !validate || depth > 0 || wire::checksum::checksum(seg) == 0 };
            if !icmp_ok {
                return Err(Untrackable::BadChecksum);
            }
            let (ty, code) = (seg[0], seg[1]);
            let is_error = if v6 { ty < 128 } else { matches!(ty, 3 | 4 | 5 | 11 | 12) };
            if is_error {
                if depth > 0 {
                    return Err(Untrackable::BadIcmpError);
                }
                let q = l4 + 8;
                let mut inner = Parsed::empty();
                if v6 { parse_ip6(b, q, false, 1, &mut inner) } else { parse_ip4(b, q, false, 1, &mut inner) }
                    .map_err(|_| Untrackable::BadIcmpError)?;
                if inner.tuple.is_icmp() && !is_query(v6, (inner.tuple.dport >> 8) as u8) {
                    return Err(Untrackable::BadIcmpError);
                }
                t.sport = 0;
                t.dport = (ty as u16) << 8 | code as u16;
                p.inner = Some(Box::new((inner.tuple, q)));
            } else {
                if !is_query(v6, ty) {
                    return Err(Untrackable::BadIcmpType);
                }
                t.sport = be16(seg, 4).unwrap_or(0);
                t.dport = (ty as u16) << 8 | code as u16;
            }
        }
        _ => {}
    }
    p.tuple = t;
    Ok(())
}

/// The window scale option of a TCP header's options, if present.
fn tcp_wscale(opts: &[u8]) -> Option<u8> {
    let mut i = 0;
    while i < opts.len() {
        match opts[i] {
            0 => return None,
            1 => i += 1,
            kind => {
                let len = *opts.get(i + 1)? as usize;
                if len < 2 || i + len > opts.len() {
                    return None;
                }
                if kind == 3 && len == 3 {
                    return Some(opts[i + 2].min(14));
                }
                i += len;
            }
        }
    }
    None
}
