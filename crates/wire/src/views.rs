//! Zero-copy header views.
//!
//! Each protocol module has a `Packet<T: AsRef<[u8]>>` wrapping a buffer
//! that starts at that protocol's header. `Packet::new_checked` validates
//! the length (and, where a header describes its own size, that size), so
//! every accessor reads inside the buffer. Accessors never panic even so:
//! they go through bounds-checked helpers that read zeros (or an empty
//! slice) and skip writes outside the buffer, which can only happen if a
//! custom `AsRef` impl returns a shorter slice than it did when checked.
//!
//! With `T: AsMut<[u8]>` there are setters, and `rewrite_*` methods that
//! change a field *and* patch the covering checksum incrementally (RFC
//! 1624), returning the old value so the caller can patch a checksum
//! further out (an IPv4 address change also changes the TCP/UDP
//! pseudo-header: call `tcp::Packet::patch_for_addr32` or
//! `udp::Packet::patch_for_addr32` with the returned old address).
//!
//! ```
//! use wire::build::Frame;
//! use wire::{ethernet, ipv4, udp};
//!
//! let mut f = Frame::new([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
//!     .ipv4(0x0a00_0001, 0x0a00_0002)
//!     .udp(1000, 53)
//!     .pad_to(64)
//!     .build();
//! let eth = ethernet::Packet::new_checked(&mut f[..]).unwrap();
//! assert_eq!(eth.ethertype(), wire::ethertype::IPV4);
//! let mut ip = ipv4::Packet::new_checked(&mut f[14..]).unwrap();
//! let old = ip.rewrite_dst_addr(0xc0a8_0001); // IPv4 header checksum patched
//! let (src, dst) = (ip.src_addr(), ip.dst_addr());
//! let hl = ip.header_len();
//! let mut u = udp::Packet::new_checked(&mut f[14 + hl..]).unwrap();
//! u.patch_for_addr32(old, dst); // UDP pseudo-header patched
//! assert!(u.verify_checksum_v4(src, dst));
//! ```

use crate::checksum as cs;

/// Why a view could not be made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Error {
    /// The buffer ends before the header (or the length it declares) does.
    Truncated,
    /// A field makes no sense: wrong version, a length below the minimum,
    /// an unsupported hardware/protocol type.
    Malformed,
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Error::Truncated => "truncated header",
            Error::Malformed => "malformed header",
        })
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

/// Ethertypes.
pub mod ethertype {
    pub const IPV4: u16 = 0x0800;
    pub const ARP: u16 = 0x0806;
    /// 802.1Q customer VLAN tag.
    pub const VLAN: u16 = 0x8100;
    pub const IPV6: u16 = 0x86dd;
    /// 802.1ad service VLAN tag (QinQ outer tag).
    pub const QINQ: u16 = 0x88a8;
    /// Type fields below this are 802.3 length fields.
    pub const MIN: u16 = 0x0600;
}

/// IP protocol numbers and IPv6 extension header types.
pub mod ipproto {
    pub const HOPOPT: u8 = 0;
    pub const ICMP: u8 = 1;
    pub const TCP: u8 = 6;
    pub const UDP: u8 = 17;
    pub const ROUTING: u8 = 43;
    pub const FRAGMENT: u8 = 44;
    pub const AH: u8 = 51;
    pub const ICMPV6: u8 = 58;
    pub const NONE: u8 = 59;
    pub const DSTOPTS: u8 = 60;
    pub const SCTP: u8 = 132;
}

// ---- bounds-checked byte access -------------------------------------------

#[inline(always)]
fn rd<const N: usize>(b: &[u8], o: usize) -> [u8; N] {
    match b.get(o..).and_then(|s| s.first_chunk::<N>()) {
        Some(x) => *x,
        None => [0; N],
    }
}
#[inline(always)]
fn wr<const N: usize>(b: &mut [u8], o: usize, v: [u8; N]) {
    if let Some(x) = b.get_mut(o..).and_then(|s| s.first_chunk_mut::<N>()) {
        *x = v;
    }
}
#[inline(always)]
fn be16(b: &[u8], o: usize) -> u16 {
    u16::from_be_bytes(rd(b, o))
}
#[inline(always)]
fn be32(b: &[u8], o: usize) -> u32 {
    u32::from_be_bytes(rd(b, o))
}
#[inline(always)]
fn be128(b: &[u8], o: usize) -> u128 {
    u128::from_be_bytes(rd(b, o))
}
#[inline(always)]
fn byte(b: &[u8], o: usize) -> u8 {
    b.get(o).copied().unwrap_or(0)
}
#[inline(always)]
fn set_byte(b: &mut [u8], o: usize, v: u8) {
    if let Some(x) = b.get_mut(o) {
        *x = v;
    }
}
/// `b[start..end]`, clipped to the buffer; empty if `start` is past it.
#[inline(always)]
fn sub(b: &[u8], start: usize, end: usize) -> &[u8] {
    b.get(start..end.min(b.len())).unwrap_or(&[])
}
#[inline(always)]
fn sub_mut(b: &mut [u8], start: usize, end: usize) -> &mut [u8] {
    let end = end.min(b.len());
    b.get_mut(start..end).unwrap_or(&mut [])
}
/// A computed UDP checksum of 0 is sent as 0xffff (0 means "none").
#[inline(always)]
fn nonzero(c: u16) -> u16 {
    if c == 0 {
        0xffff
    } else {
        c
    }
}

macro_rules! view {
    ($(#[$m:meta])*) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub struct Packet<T: AsRef<[u8]>> {
            buf: T,
        }

        impl<T: AsRef<[u8]>> Packet<T> {
            /// The wrapped buffer.
            pub fn into_inner(self) -> T {
                self.buf
            }
            /// The whole buffer, from this header on.
            pub fn as_bytes(&self) -> &[u8] {
                self.buf.as_ref()
            }
            #[inline(always)]
            fn b(&self) -> &[u8] {
                self.buf.as_ref()
            }
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
            #[inline(always)]
            #[allow(dead_code)]
            fn bm(&mut self) -> &mut [u8] {
                self.buf.as_mut()
            }
        }
    };
}

macro_rules! ports {
    () => {
        impl<T: AsRef<[u8]>> Packet<T> {
            #[inline]
            pub fn src_port(&self) -> u16 {
                super::be16(self.b(), 0)
            }
            #[inline]
            pub fn dst_port(&self) -> u16 {
                super::be16(self.b(), 2)
            }
        }
        impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
            /// Sets the source port (checksum untouched).
            pub fn set_src_port(&mut self, v: u16) {
                super::wr(self.bm(), 0, v.to_be_bytes())
            }
            /// Sets the destination port (checksum untouched).
            pub fn set_dst_port(&mut self, v: u16) {
                super::wr(self.bm(), 2, v.to_be_bytes())
            }
        }
    };
}

// ---- Ethernet ----------------------------------------------------------------

/// Ethernet II header: destination, source, Ethertype.
pub mod ethernet {
    use super::*;

    pub const HEADER_LEN: usize = 14;

    view!(
        /// An Ethernet frame (from the destination MAC on).
    );

    impl<T: AsRef<[u8]>> Packet<T> {
        /// Fails with [`Error::Truncated`] below 14 bytes.
        pub fn new_checked(buf: T) -> Result<Self> {
            if buf.as_ref().len() < HEADER_LEN {
                return Err(Error::Truncated);
            }
            Ok(Packet { buf })
        }
        pub fn dst_addr(&self) -> [u8; 6] {
            rd(self.b(), 0)
        }
        pub fn src_addr(&self) -> [u8; 6] {
            rd(self.b(), 6)
        }
        /// The type field: an Ethertype, a VLAN TPID, or (below 0x0600) an
        /// 802.3 length.
        pub fn ethertype(&self) -> u16 {
            be16(self.b(), 12)
        }
        /// Everything after the 14-byte header (a VLAN tag, or L3).
        pub fn payload(&self) -> &[u8] {
            sub(self.b(), HEADER_LEN, usize::MAX)
        }
    }

    impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
        pub fn set_dst_addr(&mut self, a: [u8; 6]) {
            wr(self.bm(), 0, a)
        }
        pub fn set_src_addr(&mut self, a: [u8; 6]) {
            wr(self.bm(), 6, a)
        }
        pub fn set_ethertype(&mut self, t: u16) {
            wr(self.bm(), 12, t.to_be_bytes())
        }
        pub fn payload_mut(&mut self) -> &mut [u8] {
            sub_mut(self.bm(), HEADER_LEN, usize::MAX)
        }
    }
}

// ---- VLAN --------------------------------------------------------------------

/// An 802.1Q/802.1ad tag as it follows its TPID: TCI, then the next
/// Ethertype. The view starts *after* the TPID (at frame offset 14 for
/// the outer tag), as the TPID is the previous header's type field.
pub mod vlan {
    use super::*;

    pub const HEADER_LEN: usize = 4;

    view!(
        /// A VLAN tag's TCI and inner type field.
    );

    impl<T: AsRef<[u8]>> Packet<T> {
        /// Fails with [`Error::Truncated`] below 4 bytes.
        pub fn new_checked(buf: T) -> Result<Self> {
            if buf.as_ref().len() < HEADER_LEN {
                return Err(Error::Truncated);
            }
            Ok(Packet { buf })
        }
        /// The whole tag control information word.
        pub fn tci(&self) -> u16 {
            be16(self.b(), 0)
        }
        /// Priority code point (3 bits).
        pub fn pcp(&self) -> u8 {
            (self.tci() >> 13) as u8
        }
        /// Drop eligible indicator (formerly CFI).
        pub fn dei(&self) -> bool {
            self.tci() & 0x1000 != 0
        }
        /// VLAN identifier (12 bits).
        pub fn vid(&self) -> u16 {
            self.tci() & 0x0fff
        }
        /// The type field after the tag.
        pub fn ethertype(&self) -> u16 {
            be16(self.b(), 2)
        }
        pub fn payload(&self) -> &[u8] {
            sub(self.b(), HEADER_LEN, usize::MAX)
        }
    }

    impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
        pub fn set_tci(&mut self, tci: u16) {
            wr(self.bm(), 0, tci.to_be_bytes())
        }
        /// Replaces the VID, keeping PCP and DEI.
        pub fn set_vid(&mut self, vid: u16) {
            let t = (self.tci() & 0xf000) | (vid & 0x0fff);
            self.set_tci(t)
        }
        /// Replaces the PCP, keeping DEI and VID.
        pub fn set_pcp(&mut self, pcp: u8) {
            let t = (self.tci() & 0x1fff) | ((pcp as u16 & 7) << 13);
            self.set_tci(t)
        }
        pub fn set_ethertype(&mut self, t: u16) {
            wr(self.bm(), 2, t.to_be_bytes())
        }
    }
}

// ---- ARP ---------------------------------------------------------------------

/// ARP for Ethernet/IPv4 (the only kind the switch matches on).
pub mod arp {
    use super::*;

    /// Length of an Ethernet/IPv4 ARP packet.
    pub const HEADER_LEN: usize = 28;
    pub const OP_REQUEST: u16 = 1;
    pub const OP_REPLY: u16 = 2;

    view!(
        /// An Ethernet/IPv4 ARP packet.
    );

    impl<T: AsRef<[u8]>> Packet<T> {
        /// Fails with [`Error::Truncated`] below 8 bytes (the fixed part) or,
        /// for Ethernet/IPv4, below 28; with [`Error::Malformed`] for other
        /// hardware/protocol types or address lengths.
        pub fn new_checked(buf: T) -> Result<Self> {
            let b = buf.as_ref();
            if b.len() < 8 {
                return Err(Error::Truncated);
            }
            if be16(b, 0) != 1 || be16(b, 2) != ethertype::IPV4 || b[4] != 6 || b[5] != 4 {
                return Err(Error::Malformed);
            }
            if b.len() < HEADER_LEN {
                return Err(Error::Truncated);
            }
            Ok(Packet { buf })
        }
        pub fn operation(&self) -> u16 {
            be16(self.b(), 6)
        }
        /// Sender hardware address.
        pub fn sha(&self) -> [u8; 6] {
            rd(self.b(), 8)
        }
        /// Sender protocol (IPv4) address.
        pub fn spa(&self) -> u32 {
            be32(self.b(), 14)
        }
        /// Target hardware address.
        pub fn tha(&self) -> [u8; 6] {
            rd(self.b(), 18)
        }
        /// Target protocol (IPv4) address.
        pub fn tpa(&self) -> u32 {
            be32(self.b(), 24)
        }
    }

    impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
        pub fn set_operation(&mut self, op: u16) {
            wr(self.bm(), 6, op.to_be_bytes())
        }
        pub fn set_sha(&mut self, a: [u8; 6]) {
            wr(self.bm(), 8, a)
        }
        pub fn set_spa(&mut self, a: u32) {
            wr(self.bm(), 14, a.to_be_bytes())
        }
        pub fn set_tha(&mut self, a: [u8; 6]) {
            wr(self.bm(), 18, a)
        }
        pub fn set_tpa(&mut self, a: u32) {
            wr(self.bm(), 24, a.to_be_bytes())
        }
    }
}

// ---- IPv4 --------------------------------------------------------------------

/// IPv4 header (with options) and the datagram it bounds.
pub mod ipv4 {
    use super::*;

    pub const MIN_HEADER_LEN: usize = 20;

    view!(
        /// An IPv4 datagram. The buffer may run past the total length
        /// (Ethernet padding); [`Packet::payload`] stops at it.
    );

    impl<T: AsRef<[u8]>> Packet<T> {
        /// Checks: at least 20 bytes ([`Error::Truncated`]), version 4 and
        /// IHL >= 5 ([`Error::Malformed`]), the header and the total length
        /// within the buffer ([`Error::Truncated`]), total length >= header
        /// length ([`Error::Malformed`]).
        pub fn new_checked(buf: T) -> Result<Self> {
            let b = buf.as_ref();
            if b.len() < MIN_HEADER_LEN {
                return Err(Error::Truncated);
            }
            let ihl = (b[0] & 0xf) as usize * 4;
            if b[0] >> 4 != 4 || ihl < MIN_HEADER_LEN {
                return Err(Error::Malformed);
            }
            let total = be16(b, 2) as usize;
            if total < ihl {
                return Err(Error::Malformed);
            }
            if b.len() < ihl || b.len() < total {
                return Err(Error::Truncated);
            }
            Ok(Packet { buf })
        }
        pub fn version(&self) -> u8 {
            byte(self.b(), 0) >> 4
        }
        /// Header length in bytes (IHL * 4).
        pub fn header_len(&self) -> usize {
            (byte(self.b(), 0) & 0xf) as usize * 4
        }
        /// The whole TOS byte (DSCP << 2 | ECN).
        pub fn tos(&self) -> u8 {
            byte(self.b(), 1)
        }
        pub fn dscp(&self) -> u8 {
            self.tos() >> 2
        }
        pub fn ecn(&self) -> u8 {
            self.tos() & 3
        }
        pub fn total_len(&self) -> u16 {
            be16(self.b(), 2)
        }
        pub fn ident(&self) -> u16 {
            be16(self.b(), 4)
        }
        pub fn dont_frag(&self) -> bool {
            be16(self.b(), 6) & 0x4000 != 0
        }
        pub fn more_frags(&self) -> bool {
            be16(self.b(), 6) & 0x2000 != 0
        }
        /// Fragment offset in 8-byte units.
        pub fn frag_offset(&self) -> u16 {
            be16(self.b(), 6) & 0x1fff
        }
        /// MF set or a non-zero offset.
        pub fn is_fragment(&self) -> bool {
            be16(self.b(), 6) & 0x3fff != 0
        }
        pub fn ttl(&self) -> u8 {
            byte(self.b(), 8)
        }
        pub fn protocol(&self) -> u8 {
            byte(self.b(), 9)
        }
        pub fn checksum(&self) -> u16 {
            be16(self.b(), 10)
        }
        pub fn src_addr(&self) -> u32 {
            be32(self.b(), 12)
        }
        pub fn dst_addr(&self) -> u32 {
            be32(self.b(), 16)
        }
        /// The options (between byte 20 and the IHL).
        pub fn options(&self) -> &[u8] {
            sub(self.b(), MIN_HEADER_LEN, self.header_len())
        }
        /// The header, options included.
        pub fn header(&self) -> &[u8] {
            sub(self.b(), 0, self.header_len())
        }
        /// From the end of the header to the total length.
        pub fn payload(&self) -> &[u8] {
            sub(self.b(), self.header_len(), self.total_len() as usize)
        }
        /// True if the header checksum is right.
        pub fn verify_checksum(&self) -> bool {
            cs::checksum(self.header()) == 0
        }
    }

    impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
        pub fn set_tos(&mut self, v: u8) {
            set_byte(self.bm(), 1, v)
        }
        pub fn set_total_len(&mut self, v: u16) {
            wr(self.bm(), 2, v.to_be_bytes())
        }
        pub fn set_ttl(&mut self, v: u8) {
            set_byte(self.bm(), 8, v)
        }
        pub fn set_protocol(&mut self, v: u8) {
            set_byte(self.bm(), 9, v)
        }
        pub fn set_checksum(&mut self, v: u16) {
            wr(self.bm(), 10, v.to_be_bytes())
        }
        pub fn set_src_addr(&mut self, a: u32) {
            wr(self.bm(), 12, a.to_be_bytes())
        }
        pub fn set_dst_addr(&mut self, a: u32) {
            wr(self.bm(), 16, a.to_be_bytes())
        }
        /// Recomputes the header checksum from scratch.
        pub fn fill_checksum(&mut self) {
            self.set_checksum(0);
            let c = cs::checksum(self.header());
            self.set_checksum(c);
        }
        pub fn payload_mut(&mut self) -> &mut [u8] {
            let (s, e) = (self.header_len(), self.total_len() as usize);
            sub_mut(self.bm(), s, e)
        }
        /// Sets the source address, patches the header checksum, returns
        /// the old address (for the L4 pseudo-header patch).
        pub fn rewrite_src_addr(&mut self, a: u32) -> u32 {
            let old = self.src_addr();
            self.set_src_addr(a);
            let c = cs::update32(self.checksum(), old, a);
            self.set_checksum(c);
            old
        }
        /// Sets the destination address, patches the header checksum,
        /// returns the old address.
        pub fn rewrite_dst_addr(&mut self, a: u32) -> u32 {
            let old = self.dst_addr();
            self.set_dst_addr(a);
            let c = cs::update32(self.checksum(), old, a);
            self.set_checksum(c);
            old
        }
        /// Sets the TTL and patches the header checksum (the TTL shares a
        /// 16-bit word with the protocol). Returns the old TTL.
        pub fn rewrite_ttl(&mut self, ttl: u8) -> u8 {
            let old = be16(self.b(), 8);
            self.set_ttl(ttl);
            let c = cs::update16(self.checksum(), old, be16(self.b(), 8));
            self.set_checksum(c);
            (old >> 8) as u8
        }
        /// Sets the TOS byte and patches the header checksum. Returns the
        /// old TOS.
        pub fn rewrite_tos(&mut self, tos: u8) -> u8 {
            let old = be16(self.b(), 0);
            self.set_tos(tos);
            let c = cs::update16(self.checksum(), old, be16(self.b(), 0));
            self.set_checksum(c);
            old as u8
        }
    }
}

// ---- IPv6 --------------------------------------------------------------------

/// IPv6 fixed header, and a walk over the extension header chain.
pub mod ipv6 {
    use super::*;

    pub const HEADER_LEN: usize = 40;

    view!(
        /// An IPv6 packet. The buffer may run past the payload length
        /// (Ethernet padding); [`Packet::payload`] stops at it.
    );

    /// A fragment header's fields.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct Fragment {
        /// Offset in 8-byte units.
        pub offset: u16,
        pub more: bool,
        pub ident: u32,
    }

    /// Where the extension header chain ends.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct UpperLayer {
        /// The upper-layer protocol (or 59, "no next header"). For a later
        /// fragment, the fragment header's next header.
        pub protocol: u8,
        /// Offset of the upper-layer header from the start of the IPv6
        /// header (for a later fragment: of the fragment data).
        pub offset: usize,
        /// The fragment header, if there was one.
        pub fragment: Option<Fragment>,
    }

    /// True for the extension headers [`Packet::upper_layer`] walks:
    /// hop-by-hop, routing, fragment, destination options, AH.
    pub fn is_extension(next_header: u8) -> bool {
        matches!(next_header, 0 | 43 | 44 | 51 | 60)
    }

    impl<T: AsRef<[u8]>> Packet<T> {
        /// Checks: at least 40 bytes and the payload length within the
        /// buffer ([`Error::Truncated`]), version 6 ([`Error::Malformed`]).
        /// A payload length of 0 (a jumbogram) makes the payload the rest
        /// of the buffer.
        pub fn new_checked(buf: T) -> Result<Self> {
            let b = buf.as_ref();
            if b.len() < HEADER_LEN {
                return Err(Error::Truncated);
            }
            if b[0] >> 4 != 6 {
                return Err(Error::Malformed);
            }
            if b.len() - HEADER_LEN < be16(b, 4) as usize {
                return Err(Error::Truncated);
            }
            Ok(Packet { buf })
        }
        pub fn version(&self) -> u8 {
            byte(self.b(), 0) >> 4
        }
        pub fn traffic_class(&self) -> u8 {
            (be32(self.b(), 0) >> 20) as u8
        }
        pub fn flow_label(&self) -> u32 {
            be32(self.b(), 0) & 0xfffff
        }
        pub fn payload_len(&self) -> u16 {
            be16(self.b(), 4)
        }
        pub fn next_header(&self) -> u8 {
            byte(self.b(), 6)
        }
        pub fn hop_limit(&self) -> u8 {
            byte(self.b(), 7)
        }
        pub fn src_addr(&self) -> u128 {
            be128(self.b(), 8)
        }
        pub fn dst_addr(&self) -> u128 {
            be128(self.b(), 24)
        }
        fn end(&self) -> usize {
            match self.payload_len() {
                0 => self.b().len(),
                n => HEADER_LEN + n as usize,
            }
        }
        /// After the fixed header, up to the payload length.
        pub fn payload(&self) -> &[u8] {
            sub(self.b(), HEADER_LEN, self.end())
        }
        /// Walks hop-by-hop, routing, destination options, AH and fragment
        /// headers to the upper layer; stops at a later fragment. Fails
        /// with [`Error::Truncated`] if a header runs past the payload.
        pub fn upper_layer(&self) -> Result<UpperLayer> {
            let p = sub(self.b(), 0, self.end());
            let mut next = self.next_header();
            let mut o = HEADER_LEN;
            let mut fragment = None;
            while is_extension(next) {
                if p.len() < o + 8 {
                    return Err(Error::Truncated);
                }
                let len = match next {
                    ipproto::FRAGMENT => 8,
                    ipproto::AH => (p[o + 1] as usize + 2) * 4,
                    _ => (p[o + 1] as usize + 1) * 8,
                };
                if p.len() - o < len {
                    return Err(Error::Truncated);
                }
                let hdr_next = p[o];
                if next == ipproto::FRAGMENT {
                    let fo = be16(p, o + 2);
                    let f = Fragment { offset: fo >> 3, more: fo & 1 != 0, ident: be32(p, o + 4) };
                    fragment = Some(f);
                    if f.offset != 0 {
                        return Ok(UpperLayer { protocol: hdr_next, offset: o + 8, fragment });
                    }
                }
                next = hdr_next;
                o += len;
            }
            Ok(UpperLayer { protocol: next, offset: o, fragment })
        }
    }

    impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
        pub fn set_traffic_class(&mut self, tc: u8) {
            let w = (be32(self.b(), 0) & 0xf00f_ffff) | (tc as u32) << 20;
            wr(self.bm(), 0, w.to_be_bytes())
        }
        pub fn set_flow_label(&mut self, label: u32) {
            let w = (be32(self.b(), 0) & 0xfff0_0000) | (label & 0xfffff);
            wr(self.bm(), 0, w.to_be_bytes())
        }
        pub fn set_payload_len(&mut self, v: u16) {
            wr(self.bm(), 4, v.to_be_bytes())
        }
        pub fn set_next_header(&mut self, v: u8) {
            set_byte(self.bm(), 6, v)
        }
        pub fn set_hop_limit(&mut self, v: u8) {
            set_byte(self.bm(), 7, v)
        }
        /// Sets the source address (IPv6 has no header checksum; patch the
        /// L4 checksum with the old value this returns).
        pub fn set_src_addr(&mut self, a: u128) -> u128 {
            let old = self.src_addr();
            wr(self.bm(), 8, a.to_be_bytes());
            old
        }
        /// Sets the destination address, returning the old one.
        pub fn set_dst_addr(&mut self, a: u128) -> u128 {
            let old = self.dst_addr();
            wr(self.bm(), 24, a.to_be_bytes());
            old
        }
        pub fn payload_mut(&mut self) -> &mut [u8] {
            let e = self.end();
            sub_mut(self.bm(), HEADER_LEN, e)
        }
    }
}

// ---- TCP ---------------------------------------------------------------------

/// TCP header.
pub mod tcp {
    use super::*;

    pub const MIN_HEADER_LEN: usize = 20;

    /// The 12 flag bits as [`Packet::flags`] returns them.
    pub mod flags {
        pub const FIN: u16 = 0x001;
        pub const SYN: u16 = 0x002;
        pub const RST: u16 = 0x004;
        pub const PSH: u16 = 0x008;
        pub const ACK: u16 = 0x010;
        pub const URG: u16 = 0x020;
        pub const ECE: u16 = 0x040;
        pub const CWR: u16 = 0x080;
        pub const NS: u16 = 0x100;
    }

    view!(
        /// A TCP segment: the buffer runs to the end of the IP payload.
    );

    ports!();

    impl<T: AsRef<[u8]>> Packet<T> {
        /// Checks: at least 20 bytes ([`Error::Truncated`]), a data offset
        /// of at least 5 words ([`Error::Malformed`]) that fits the buffer
        /// ([`Error::Truncated`]).
        pub fn new_checked(buf: T) -> Result<Self> {
            let b = buf.as_ref();
            if b.len() < MIN_HEADER_LEN {
                return Err(Error::Truncated);
            }
            let doff = (b[12] >> 4) as usize * 4;
            if doff < MIN_HEADER_LEN {
                return Err(Error::Malformed);
            }
            if b.len() < doff {
                return Err(Error::Truncated);
            }
            Ok(Packet { buf })
        }
        pub fn seq_number(&self) -> u32 {
            be32(self.b(), 4)
        }
        pub fn ack_number(&self) -> u32 {
            be32(self.b(), 8)
        }
        /// Data offset in bytes.
        pub fn header_len(&self) -> usize {
            (byte(self.b(), 12) >> 4) as usize * 4
        }
        /// The 12 bits after the data offset (see [`flags`]).
        pub fn flags(&self) -> u16 {
            be16(self.b(), 12) & 0x0fff
        }
        pub fn window(&self) -> u16 {
            be16(self.b(), 14)
        }
        pub fn checksum(&self) -> u16 {
            be16(self.b(), 16)
        }
        pub fn urgent(&self) -> u16 {
            be16(self.b(), 18)
        }
        pub fn options(&self) -> &[u8] {
            sub(self.b(), MIN_HEADER_LEN, self.header_len())
        }
        pub fn payload(&self) -> &[u8] {
            sub(self.b(), self.header_len(), usize::MAX)
        }
        /// True if the checksum (with the IPv4 pseudo-header) is right.
        pub fn verify_checksum_v4(&self, src: u32, dst: u32) -> bool {
            cs::l4_checksum_v4(src, dst, ipproto::TCP, self.b()) == 0
        }
        /// True if the checksum (with the IPv6 pseudo-header) is right.
        pub fn verify_checksum_v6(&self, src: u128, dst: u128) -> bool {
            cs::l4_checksum_v6(src, dst, ipproto::TCP, self.b()) == 0
        }
    }

    impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
        /// Sets the 12 flag bits, keeping the data offset.
        pub fn set_flags(&mut self, f: u16) {
            let w = (be16(self.b(), 12) & 0xf000) | (f & 0x0fff);
            wr(self.bm(), 12, w.to_be_bytes())
        }
        pub fn set_checksum(&mut self, c: u16) {
            wr(self.bm(), 16, c.to_be_bytes())
        }
        pub fn fill_checksum_v4(&mut self, src: u32, dst: u32) {
            self.set_checksum(0);
            let c = cs::l4_checksum_v4(src, dst, ipproto::TCP, self.b());
            self.set_checksum(c)
        }
        pub fn fill_checksum_v6(&mut self, src: u128, dst: u128) {
            self.set_checksum(0);
            let c = cs::l4_checksum_v6(src, dst, ipproto::TCP, self.b());
            self.set_checksum(c)
        }
        /// Sets the source port and patches the checksum; returns the old port.
        pub fn rewrite_src_port(&mut self, p: u16) -> u16 {
            let old = self.src_port();
            self.set_src_port(p);
            let c = cs::update16(self.checksum(), old, p);
            self.set_checksum(c);
            old
        }
        /// Sets the destination port and patches the checksum; returns the old port.
        pub fn rewrite_dst_port(&mut self, p: u16) -> u16 {
            let old = self.dst_port();
            self.set_dst_port(p);
            let c = cs::update16(self.checksum(), old, p);
            self.set_checksum(c);
            old
        }
        /// Patches the checksum for an IPv4 pseudo-header address change.
        pub fn patch_for_addr32(&mut self, old: u32, new: u32) {
            let c = cs::update32(self.checksum(), old, new);
            self.set_checksum(c)
        }
        /// Patches the checksum for an IPv6 pseudo-header address change.
        pub fn patch_for_addr128(&mut self, old: u128, new: u128) {
            let c = cs::update128(self.checksum(), old, new);
            self.set_checksum(c)
        }
    }
}

// ---- UDP ---------------------------------------------------------------------

/// UDP header. Over IPv4 a zero checksum means "not computed": the patch
/// helpers leave it zero, and a computed zero is written as 0xffff.
pub mod udp {
    use super::*;

    pub const HEADER_LEN: usize = 8;

    /// [`crate::checksum::update16`] with UDP's zero rule.
    #[inline]
    pub fn update16(c: u16, old: u16, new: u16) -> u16 {
        if c == 0 {
            0
        } else {
            nonzero(cs::update16(c, old, new))
        }
    }
    /// [`crate::checksum::update32`] with UDP's zero rule.
    #[inline]
    pub fn update32(c: u16, old: u32, new: u32) -> u16 {
        if c == 0 {
            0
        } else {
            nonzero(cs::update32(c, old, new))
        }
    }
    /// [`crate::checksum::update128`] with UDP's zero rule (over IPv6 a
    /// zero checksum is invalid anyway, so keeping it zero changes nothing).
    #[inline]
    pub fn update128(c: u16, old: u128, new: u128) -> u16 {
        if c == 0 {
            0
        } else {
            nonzero(cs::update128(c, old, new))
        }
    }

    view!(
        /// A UDP datagram; [`Packet::payload`] stops at the length field.
    );

    ports!();

    impl<T: AsRef<[u8]>> Packet<T> {
        /// Checks: at least 8 bytes and the length field within the buffer
        /// ([`Error::Truncated`]), length field >= 8 ([`Error::Malformed`]).
        pub fn new_checked(buf: T) -> Result<Self> {
            let b = buf.as_ref();
            if b.len() < HEADER_LEN {
                return Err(Error::Truncated);
            }
            let len = be16(b, 4) as usize;
            if len < HEADER_LEN {
                return Err(Error::Malformed);
            }
            if b.len() < len {
                return Err(Error::Truncated);
            }
            Ok(Packet { buf })
        }
        pub fn len(&self) -> u16 {
            be16(self.b(), 4)
        }
        /// True if the length field says there is no payload.
        pub fn is_empty(&self) -> bool {
            self.len() as usize <= HEADER_LEN
        }
        pub fn checksum(&self) -> u16 {
            be16(self.b(), 6)
        }
        fn datagram(&self) -> &[u8] {
            sub(self.b(), 0, self.len() as usize)
        }
        pub fn payload(&self) -> &[u8] {
            sub(self.b(), HEADER_LEN, self.len() as usize)
        }
        /// True if the checksum is right or zero ("none", IPv4 only).
        pub fn verify_checksum_v4(&self, src: u32, dst: u32) -> bool {
            self.checksum() == 0 || cs::l4_checksum_v4(src, dst, ipproto::UDP, self.datagram()) == 0
        }
        /// True if the checksum is right (zero is invalid over IPv6).
        pub fn verify_checksum_v6(&self, src: u128, dst: u128) -> bool {
            self.checksum() != 0 && cs::l4_checksum_v6(src, dst, ipproto::UDP, self.datagram()) == 0
        }
    }

    impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
        pub fn set_len(&mut self, v: u16) {
            wr(self.bm(), 4, v.to_be_bytes())
        }
        pub fn set_checksum(&mut self, c: u16) {
            wr(self.bm(), 6, c.to_be_bytes())
        }
        pub fn payload_mut(&mut self) -> &mut [u8] {
            let e = self.len() as usize;
            sub_mut(self.bm(), HEADER_LEN, e)
        }
        pub fn fill_checksum_v4(&mut self, src: u32, dst: u32) {
            self.set_checksum(0);
            let c = cs::l4_checksum_v4(src, dst, ipproto::UDP, self.datagram());
            self.set_checksum(nonzero(c))
        }
        pub fn fill_checksum_v6(&mut self, src: u128, dst: u128) {
            self.set_checksum(0);
            let c = cs::l4_checksum_v6(src, dst, ipproto::UDP, self.datagram());
            self.set_checksum(nonzero(c))
        }
        /// Sets the source port and patches a present checksum; returns the old port.
        pub fn rewrite_src_port(&mut self, p: u16) -> u16 {
            let old = self.src_port();
            self.set_src_port(p);
            let c = update16(self.checksum(), old, p);
            self.set_checksum(c);
            old
        }
        /// Sets the destination port and patches a present checksum; returns the old port.
        pub fn rewrite_dst_port(&mut self, p: u16) -> u16 {
            let old = self.dst_port();
            self.set_dst_port(p);
            let c = update16(self.checksum(), old, p);
            self.set_checksum(c);
            old
        }
        /// Patches a present checksum for an IPv4 pseudo-header address change.
        pub fn patch_for_addr32(&mut self, old: u32, new: u32) {
            let c = update32(self.checksum(), old, new);
            self.set_checksum(c)
        }
        /// Patches the checksum for an IPv6 pseudo-header address change.
        pub fn patch_for_addr128(&mut self, old: u128, new: u128) {
            let c = update128(self.checksum(), old, new);
            self.set_checksum(c)
        }
    }
}

// ---- SCTP --------------------------------------------------------------------

/// SCTP common header. Its CRC32c covers the whole packet, so a rewrite
/// recomputes it (`Packet::fill_checksum`); there is no incremental form.
pub mod sctp {
    use super::*;

    pub const HEADER_LEN: usize = 12;

    view!(
        /// An SCTP packet: common header, then chunks to the end of the buffer.
    );

    ports!();

    /// Reflected CRC32c, continued from `crc` (bitwise: only for
    /// [`Packet::verify_checksum`], which cannot zero the field in place).
    fn crc32c_continue(mut crc: u32, data: &[u8]) -> u32 {
        for &b in data {
            crc ^= b as u32;
            for _ in 0..8 {
                crc = if crc & 1 != 0 { (crc >> 1) ^ 0x82f6_3b78 } else { crc >> 1 };
            }
        }
        crc
    }

    impl<T: AsRef<[u8]>> Packet<T> {
        /// Fails with [`Error::Truncated`] below 12 bytes.
        pub fn new_checked(buf: T) -> Result<Self> {
            if buf.as_ref().len() < HEADER_LEN {
                return Err(Error::Truncated);
            }
            Ok(Packet { buf })
        }
        pub fn verification_tag(&self) -> u32 {
            be32(self.b(), 4)
        }
        /// The CRC32c as a number (the field holds it little-endian).
        pub fn checksum(&self) -> u32 {
            u32::from_le_bytes(rd(self.b(), 8))
        }
        /// The chunks.
        pub fn payload(&self) -> &[u8] {
            sub(self.b(), HEADER_LEN, usize::MAX)
        }
        /// True if the CRC32c over the packet (checksum field as zero) matches.
        pub fn verify_checksum(&self) -> bool {
            let b = self.b();
            let mut crc = crc32c_continue(!0, sub(b, 0, 8));
            crc = crc32c_continue(crc, &[0; 4]);
            crc = crc32c_continue(crc, sub(b, 12, usize::MAX));
            !crc == self.checksum()
        }
    }

    impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
        pub fn set_verification_tag(&mut self, v: u32) {
            wr(self.bm(), 4, v.to_be_bytes())
        }
        pub fn set_checksum(&mut self, c: u32) {
            wr(self.bm(), 8, c.to_le_bytes())
        }
        /// Recomputes the CRC32c over the whole buffer.
        pub fn fill_checksum(&mut self) {
            self.set_checksum(0);
            let c = cs::crc32c(self.b());
            self.set_checksum(c)
        }
    }
}

// ---- ICMPv4 ------------------------------------------------------------------

/// ICMPv4 header; the checksum covers the whole message (no pseudo-header).
pub mod icmpv4 {
    use super::*;

    pub const HEADER_LEN: usize = 4;
    pub const ECHO_REPLY: u8 = 0;
    pub const DEST_UNREACHABLE: u8 = 3;
    pub const ECHO_REQUEST: u8 = 8;
    pub const TIME_EXCEEDED: u8 = 11;

    view!(
        /// An ICMPv4 message: the buffer should end with the IP payload, as
        /// the checksum covers it all.
    );

    impl<T: AsRef<[u8]>> Packet<T> {
        /// Fails with [`Error::Truncated`] below 4 bytes.
        pub fn new_checked(buf: T) -> Result<Self> {
            if buf.as_ref().len() < HEADER_LEN {
                return Err(Error::Truncated);
            }
            Ok(Packet { buf })
        }
        pub fn msg_type(&self) -> u8 {
            byte(self.b(), 0)
        }
        pub fn code(&self) -> u8 {
            byte(self.b(), 1)
        }
        pub fn checksum(&self) -> u16 {
            be16(self.b(), 2)
        }
        /// Echo identifier (echo request/reply of at least 8 bytes).
        pub fn echo_ident(&self) -> Option<u16> {
            self.echo().then(|| be16(self.b(), 4))
        }
        /// Echo sequence number.
        pub fn echo_seq(&self) -> Option<u16> {
            self.echo().then(|| be16(self.b(), 6))
        }
        fn echo(&self) -> bool {
            matches!(self.msg_type(), ECHO_REQUEST | ECHO_REPLY) && self.b().len() >= 8
        }
        /// The bytes after type, code and checksum.
        pub fn rest(&self) -> &[u8] {
            sub(self.b(), HEADER_LEN, usize::MAX)
        }
        pub fn verify_checksum(&self) -> bool {
            cs::checksum(self.b()) == 0
        }
    }

    impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
        pub fn set_msg_type(&mut self, v: u8) {
            set_byte(self.bm(), 0, v)
        }
        pub fn set_code(&mut self, v: u8) {
            set_byte(self.bm(), 1, v)
        }
        pub fn set_checksum(&mut self, c: u16) {
            wr(self.bm(), 2, c.to_be_bytes())
        }
        pub fn fill_checksum(&mut self) {
            self.set_checksum(0);
            let c = cs::checksum(self.b());
            self.set_checksum(c)
        }
        /// Sets type and code and patches the checksum (they form one word).
        pub fn rewrite_type_code(&mut self, ty: u8, code: u8) {
            let old = be16(self.b(), 0);
            let new = u16::from_be_bytes([ty, code]);
            wr(self.bm(), 0, [ty, code]);
            let c = cs::update16(self.checksum(), old, new);
            self.set_checksum(c)
        }
    }
}

// ---- ICMPv6 ------------------------------------------------------------------

/// ICMPv6 header, echo, and neighbour discovery (NS/NA target and options).
pub mod icmpv6 {
    use super::*;

    pub const HEADER_LEN: usize = 4;
    /// Fixed part of a neighbour solicitation/advertisement (header,
    /// reserved/flags word, target).
    pub const ND_LEN: usize = 24;
    pub const ECHO_REQUEST: u8 = 128;
    pub const ECHO_REPLY: u8 = 129;
    pub const ROUTER_SOLICIT: u8 = 133;
    pub const ROUTER_ADVERT: u8 = 134;
    pub const NEIGHBOR_SOLICIT: u8 = 135;
    pub const NEIGHBOR_ADVERT: u8 = 136;
    /// ND option: source link-layer address.
    pub const OPT_SLL: u8 = 1;
    /// ND option: target link-layer address.
    pub const OPT_TLL: u8 = 2;

    view!(
        /// An ICMPv6 message: the buffer should end with the IPv6 payload.
    );

    /// One ND option: its type and its whole bytes (type and length
    /// included), as [`NdOptions`] yields them.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct NdOption<'a> {
        pub kind: u8,
        /// Offset of the option from the start of the ICMPv6 message.
        pub offset: usize,
        pub bytes: &'a [u8],
    }

    impl NdOption<'_> {
        /// The link-layer address of an 8-byte SLL/TLL option.
        pub fn link_addr(&self) -> Option<[u8; 6]> {
            (matches!(self.kind, OPT_SLL | OPT_TLL) && self.bytes.len() == 8).then(|| rd(self.bytes, 2))
        }
    }

    /// Iterator over ND options. It stops at the end or at the first
    /// malformed option (zero length, running past the end, a trailing
    /// byte); [`NdOptions::malformed`] tells which.
    #[derive(Clone, Debug)]
    pub struct NdOptions<'a> {
        b: &'a [u8],
        o: usize,
        bad: bool,
    }

    impl NdOptions<'_> {
        /// True once iteration stopped at a malformed option.
        pub fn malformed(&self) -> bool {
            self.bad
        }
    }

    impl<'a> Iterator for NdOptions<'a> {
        type Item = NdOption<'a>;
        fn next(&mut self) -> Option<NdOption<'a>> {
            if self.bad || self.o >= self.b.len() {
                return None;
            }
            let rest = sub(self.b, self.o, usize::MAX);
            let len = byte(rest, 1) as usize * 8;
            if rest.len() < 2 || len == 0 || rest.len() < len {
                self.bad = true;
                return None;
            }
            let opt = NdOption { kind: rest[0], offset: self.o, bytes: sub(rest, 0, len) };
            self.o += len;
            Some(opt)
        }
    }

    impl<T: AsRef<[u8]>> Packet<T> {
        /// Fails with [`Error::Truncated`] below 4 bytes, or below 24 for a
        /// neighbour solicitation/advertisement with code 0.
        pub fn new_checked(buf: T) -> Result<Self> {
            let b = buf.as_ref();
            if b.len() < HEADER_LEN {
                return Err(Error::Truncated);
            }
            if matches!(b[0], NEIGHBOR_SOLICIT | NEIGHBOR_ADVERT) && b[1] == 0 && b.len() < ND_LEN {
                return Err(Error::Truncated);
            }
            Ok(Packet { buf })
        }
        pub fn msg_type(&self) -> u8 {
            byte(self.b(), 0)
        }
        pub fn code(&self) -> u8 {
            byte(self.b(), 1)
        }
        pub fn checksum(&self) -> u16 {
            be16(self.b(), 2)
        }
        fn echo(&self) -> bool {
            matches!(self.msg_type(), ECHO_REQUEST | ECHO_REPLY) && self.b().len() >= 8
        }
        /// Echo identifier (echo request/reply of at least 8 bytes).
        pub fn echo_ident(&self) -> Option<u16> {
            self.echo().then(|| be16(self.b(), 4))
        }
        /// Echo sequence number.
        pub fn echo_seq(&self) -> Option<u16> {
            self.echo().then(|| be16(self.b(), 6))
        }
        /// True for an NS or NA (code 0) with its 24-byte fixed part.
        pub fn is_nd(&self) -> bool {
            matches!(self.msg_type(), NEIGHBOR_SOLICIT | NEIGHBOR_ADVERT)
                && self.code() == 0
                && self.b().len() >= ND_LEN
        }
        /// The target address of an NS/NA.
        pub fn nd_target(&self) -> Option<u128> {
            self.is_nd().then(|| be128(self.b(), 8))
        }
        /// NA flags word's R, S, O bits (bits 31, 30, 29) as the top byte.
        pub fn nd_flags(&self) -> Option<u8> {
            (self.is_nd() && self.msg_type() == NEIGHBOR_ADVERT).then(|| byte(self.b(), 4))
        }
        /// The options of an NS/NA (empty for other messages).
        pub fn nd_options(&self) -> NdOptions<'_> {
            let b = if self.is_nd() { self.b() } else { &[] };
            NdOptions { b, o: ND_LEN, bad: false }
        }
        /// The first 8-byte link-layer address option of `kind`
        /// ([`OPT_SLL`] or [`OPT_TLL`]).
        pub fn nd_link_addr(&self, kind: u8) -> Option<[u8; 6]> {
            self.nd_options().find(|o| o.kind == kind).and_then(|o| o.link_addr())
        }
        pub fn verify_checksum(&self, src: u128, dst: u128) -> bool {
            cs::l4_checksum_v6(src, dst, ipproto::ICMPV6, self.b()) == 0
        }
    }

    impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
        pub fn set_checksum(&mut self, c: u16) {
            wr(self.bm(), 2, c.to_be_bytes())
        }
        pub fn fill_checksum(&mut self, src: u128, dst: u128) {
            self.set_checksum(0);
            let c = cs::l4_checksum_v6(src, dst, ipproto::ICMPV6, self.b());
            self.set_checksum(c)
        }
        /// Patches the checksum for an IPv6 pseudo-header address change.
        pub fn patch_for_addr128(&mut self, old: u128, new: u128) {
            let c = cs::update128(self.checksum(), old, new);
            self.set_checksum(c)
        }
        /// Rewrites an NS/NA target and patches the checksum; returns the
        /// old target, or `None` (nothing written) if this is not an NS/NA.
        pub fn rewrite_nd_target(&mut self, t: u128) -> Option<u128> {
            let old = self.nd_target()?;
            wr(self.bm(), 8, t.to_be_bytes());
            let c = cs::update128(self.checksum(), old, t);
            self.set_checksum(c);
            Some(old)
        }
        /// Rewrites the address in the first 8-byte link-layer address
        /// option of `kind` and patches the checksum; returns the old
        /// address, or `None` (nothing written) if there is no such option.
        pub fn rewrite_nd_link_addr(&mut self, kind: u8, mac: [u8; 6]) -> Option<[u8; 6]> {
            let opt = self.nd_options().find(|o| o.kind == kind)?;
            let old = opt.link_addr()?;
            // Options sit at 8-byte multiples, so the address starts at an
            // even offset: three 16-bit words.
            let at = opt.offset + 2;
            wr(self.bm(), at, mac);
            let mut c = self.checksum();
            for i in 0..3 {
                let w = |m: [u8; 6]| u16::from_be_bytes([m[2 * i], m[2 * i + 1]]);
                c = cs::update16(c, w(old), w(mac));
            }
            self.set_checksum(c);
            Some(old)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::Frame;
    use crate::checksum::checksum;

    const A: [u8; 6] = [2, 0, 0, 0, 0, 1];
    const B: [u8; 6] = [2, 0, 0, 0, 0, 2];
    const S6: u128 = 0x2001_0db8_0000_0000_0000_0000_0000_0001;
    const D6: u128 = 0x2001_0db8_0000_0000_0000_0000_0000_0002;

    #[test]
    fn ethernet_vlan_arp() {
        let f = Frame::new(A, B).vlan(0x88a8, 0x2005).vlan(0x8100, 7).arp(2, A, 0x0a00_0001, B, 0x0a00_0002).build();
        let e = ethernet::Packet::new_checked(&f[..]).unwrap();
        assert_eq!((e.dst_addr(), e.src_addr(), e.ethertype()), (B, A, ethertype::QINQ));
        let v = vlan::Packet::new_checked(e.payload()).unwrap();
        assert_eq!((v.tci(), v.pcp(), v.vid(), v.dei(), v.ethertype()), (0x2005, 1, 5, false, ethertype::VLAN));
        let v2 = vlan::Packet::new_checked(v.payload()).unwrap();
        assert_eq!((v2.vid(), v2.ethertype()), (7, ethertype::ARP));
        let a = arp::Packet::new_checked(v2.payload()).unwrap();
        assert_eq!((a.operation(), a.sha(), a.spa(), a.tha(), a.tpa()), (2, A, 0x0a00_0001, B, 0x0a00_0002));
        assert_eq!(ethernet::Packet::new_checked(&f[..13]).unwrap_err(), Error::Truncated);
        assert_eq!(vlan::Packet::new_checked(&f[14..17]).unwrap_err(), Error::Truncated);
        assert_eq!(arp::Packet::new_checked(&f[22..40]).unwrap_err(), Error::Truncated);
        let mut bad = f[22..].to_vec();
        bad[1] = 6; // hardware type 6
        assert_eq!(arp::Packet::new_checked(&bad[..]).unwrap_err(), Error::Malformed);

        let mut f = f;
        let mut v = vlan::Packet::new_checked(&mut f[14..]).unwrap();
        v.set_vid(100);
        v.set_pcp(6);
        assert_eq!(v.tci(), 0xc064);
    }

    #[test]
    fn ipv4_udp_views_and_rewrites() {
        let mut f =
            Frame::new(A, B).ipv4(0x0a00_0001, 0x0a00_0002).ip_options(&[1, 1, 1, 1]).udp(1000, 53).pad_to(80).build();
        f.extend_from_slice(&[0xee; 6]); // Ethernet trailer
        let mut ip = ipv4::Packet::new_checked(&mut f[14..]).unwrap();
        assert_eq!((ip.version(), ip.header_len(), ip.protocol(), ip.ttl()), (4, 24, 17, 64));
        assert_eq!(ip.options(), &[1, 1, 1, 1]);
        assert_eq!(ip.payload().len(), 80 - 14 - 24);
        assert!(ip.verify_checksum());
        let old = ip.rewrite_src_addr(0xc0a8_0101);
        assert_eq!(old, 0x0a00_0001);
        ip.rewrite_ttl(3);
        ip.rewrite_tos(0xb8);
        assert!(ip.verify_checksum());
        let (s, d) = (ip.src_addr(), ip.dst_addr());
        let mut u = udp::Packet::new_checked(&mut f[38..80]).unwrap();
        assert_eq!((u.src_port(), u.dst_port(), u.len()), (1000, 53, 42));
        assert!(!u.verify_checksum_v4(s, d), "pseudo-header changed");
        u.patch_for_addr32(old, s);
        assert!(u.verify_checksum_v4(s, d));
        u.rewrite_dst_port(5353);
        assert!(u.verify_checksum_v4(s, d));
        // Zero means "no checksum" over IPv4: it stays zero.
        u.set_checksum(0);
        u.rewrite_src_port(1);
        u.patch_for_addr32(1, 2);
        assert_eq!(u.checksum(), 0);
        assert!(u.verify_checksum_v4(s, d));
        u.fill_checksum_v4(s, d);
        assert!(u.checksum() != 0 && u.verify_checksum_v4(s, d));

        assert_eq!(ipv4::Packet::new_checked(&f[14..30]).unwrap_err(), Error::Truncated);
        assert_eq!(ipv4::Packet::new_checked(&f[14..60]).unwrap_err(), Error::Truncated, "total length");
        let mut g = f.clone();
        g[14] = 0x44;
        assert_eq!(ipv4::Packet::new_checked(&g[14..]).unwrap_err(), Error::Malformed);
        g[14] = 0x65;
        assert_eq!(ipv4::Packet::new_checked(&g[14..]).unwrap_err(), Error::Malformed);
        assert_eq!(udp::Packet::new_checked(&f[38..45]).unwrap_err(), Error::Truncated);
        assert_eq!(udp::Packet::new_checked(&f[38..60]).unwrap_err(), Error::Truncated, "length field");
    }

    #[test]
    fn udp_computed_zero_is_sent_as_ffff() {
        // Find a payload whose checksum folds to zero and check both the
        // fill and the patch paths write 0xffff.
        for x in 0..=0xffffu16 {
            let mut d = [0x12, 0x34, 0x56, 0x78, 0, 10, 0, 0, (x >> 8) as u8, x as u8];
            if crate::checksum::l4_checksum_v4(1, 2, 17, &d) == 0 {
                let mut u = udp::Packet::new_checked(&mut d[..]).unwrap();
                u.fill_checksum_v4(1, 2);
                assert_eq!(u.checksum(), 0xffff);
                assert!(u.verify_checksum_v4(1, 2));
                return;
            }
        }
        panic!("no zero-checksum payload found");
    }

    #[test]
    fn udp_patch_never_yields_zero() {
        // update16 from a checksum that would fold to zero gives 0xffff.
        for c in 1..=0xffffu16 {
            for (old, new) in [(0u16, 1u16), (0x1234, 0xedcb), (0xffff, 0)] {
                assert_ne!(udp::update16(c, old, new), 0);
            }
        }
    }

    #[test]
    fn tcp_ipv6_ext_chain_and_rewrites() {
        let mut f = Frame::new(A, B).ipv6(S6, D6).ipv6_ext(0).ipv6_ext(51).ipv6_ext(60).tcp(7, 8, 0x12).build();
        let ip = ipv6::Packet::new_checked(&f[14..]).unwrap();
        assert_eq!((ip.version(), ip.src_addr(), ip.dst_addr(), ip.hop_limit()), (6, S6, D6, 64));
        let ul = ip.upper_layer().unwrap();
        assert_eq!((ul.protocol, ul.fragment), (ipproto::TCP, None));
        let l4 = 14 + ul.offset;
        let mut ip = ipv6::Packet::new_checked(&mut f[14..]).unwrap();
        ip.set_traffic_class(0x2e);
        ip.set_flow_label(0xabcde);
        assert_eq!((ip.traffic_class(), ip.flow_label(), ip.version()), (0x2e, 0xabcde, 6));
        let old = ip.set_dst_addr(D6 + 0x1_0000_ffff);
        let mut t = tcp::Packet::new_checked(&mut f[l4..]).unwrap();
        assert_eq!((t.src_port(), t.dst_port(), t.flags(), t.header_len()), (7, 8, 0x12, 20));
        t.patch_for_addr128(old, D6 + 0x1_0000_ffff);
        t.rewrite_src_port(40000);
        assert!(t.verify_checksum_v6(S6, D6 + 0x1_0000_ffff));
        t.set_flags(tcp::flags::FIN | tcp::flags::ACK);
        assert_eq!(t.flags(), 0x11);
        assert!(!t.verify_checksum_v6(S6, D6 + 0x1_0000_ffff));
        t.fill_checksum_v6(S6, D6 + 0x1_0000_ffff);
        assert!(t.verify_checksum_v6(S6, D6 + 0x1_0000_ffff));

        // Truncated chain: cut the payload length inside the AH.
        let mut g = f.clone();
        g[18..20].copy_from_slice(&12u16.to_be_bytes());
        let ip = ipv6::Packet::new_checked(&g[14..]).unwrap();
        assert_eq!(ip.upper_layer().unwrap_err(), Error::Truncated);
        assert_eq!(ipv6::Packet::new_checked(&f[14..50]).unwrap_err(), Error::Truncated);
        assert_eq!(ipv6::Packet::new_checked(&f[14..80]).unwrap_err(), Error::Truncated, "payload length");
        assert_eq!(tcp::Packet::new_checked(&f[l4..l4 + 19]).unwrap_err(), Error::Truncated);
        let mut g = f.clone();
        g[l4 + 12] = 0x40;
        assert_eq!(tcp::Packet::new_checked(&g[l4..]).unwrap_err(), Error::Malformed);
        g[l4 + 12] = 0xf0;
        assert_eq!(tcp::Packet::new_checked(&g[l4..]).unwrap_err(), Error::Truncated);
    }

    #[test]
    fn ipv6_fragments() {
        let f = Frame::new(A, B).ipv6(S6, D6).ipv6_ext(43).ipv6_frag(true, 0).udp(1, 2).build();
        let ul = ipv6::Packet::new_checked(&f[14..]).unwrap().upper_layer().unwrap();
        assert_eq!((ul.protocol, ul.offset, ul.fragment.map(|x| (x.offset, x.more))), (17, 56, Some((0, true))));
        let f = Frame::new(A, B).ipv6(S6, D6).ipv6_frag(false, 100).udp(1, 2).build();
        let ul = ipv6::Packet::new_checked(&f[14..]).unwrap().upper_layer().unwrap();
        assert_eq!((ul.protocol, ul.offset, ul.fragment.map(|x| (x.offset, x.more))), (17, 48, Some((100, false))));
    }

    #[test]
    fn sctp_crc() {
        let mut f = Frame::new(A, B).ipv4(1, 2).sctp(5, 6).payload(&[0, 0, 0, 4]).build();
        let mut s = sctp::Packet::new_checked(&mut f[34..]).unwrap();
        assert_eq!((s.src_port(), s.dst_port(), s.verification_tag()), (5, 6, 1));
        assert!(s.verify_checksum());
        s.set_dst_port(7);
        assert!(!s.verify_checksum());
        s.fill_checksum();
        assert!(s.verify_checksum());
        assert_eq!(sctp::Packet::new_checked(&f[34..45]).unwrap_err(), Error::Truncated);
    }

    #[test]
    fn icmp_echo() {
        let mut f = Frame::new(A, B).ipv4(1, 2).icmp_echo(7, 9).payload(b"ping").build();
        let mut m = icmpv4::Packet::new_checked(&mut f[34..]).unwrap();
        assert_eq!((m.msg_type(), m.code(), m.echo_ident(), m.echo_seq()), (8, 0, Some(7), Some(9)));
        assert!(m.verify_checksum());
        m.rewrite_type_code(icmpv4::ECHO_REPLY, 0);
        assert!(m.verify_checksum());
        assert_eq!(m.rest(), &[0, 7, 0, 9, b'p', b'i', b'n', b'g']);

        let f = Frame::new(A, B).ipv6(S6, D6).icmpv6_echo(3, 4).build();
        let m = icmpv6::Packet::new_checked(&f[54..]).unwrap();
        assert_eq!((m.msg_type(), m.echo_ident(), m.echo_seq(), m.nd_target()), (128, Some(3), Some(4), None));
        assert!(m.verify_checksum(S6, D6));
        assert_eq!(icmpv4::Packet::new_checked(&f[54..57]).unwrap_err(), Error::Truncated);
    }

    #[test]
    fn neighbour_discovery() {
        let mut f = Frame::new(A, B).ipv6(S6, D6).nd_ns(D6, Some(A)).build();
        let mut m = icmpv6::Packet::new_checked(&mut f[54..]).unwrap();
        assert!(m.is_nd() && m.verify_checksum(S6, D6));
        assert_eq!(
            (m.nd_target(), m.nd_link_addr(icmpv6::OPT_SLL), m.nd_link_addr(icmpv6::OPT_TLL)),
            (Some(D6), Some(A), None)
        );
        assert_eq!(m.rewrite_nd_link_addr(icmpv6::OPT_SLL, [0xfe, 0xdc, 0xba, 0x98, 0x76, 0x54]), Some(A));
        assert_eq!(m.rewrite_nd_target(S6), Some(D6));
        assert!(m.verify_checksum(S6, D6));
        assert_eq!(m.nd_link_addr(icmpv6::OPT_SLL), Some([0xfe, 0xdc, 0xba, 0x98, 0x76, 0x54]));
        assert_eq!(m.rewrite_nd_link_addr(icmpv6::OPT_TLL, A), None);
        assert_eq!(icmpv6::Packet::new_checked(&f[54..70]).unwrap_err(), Error::Truncated);

        let f = Frame::new(A, B).ipv6(S6, D6).nd_na(S6, Some(B)).payload(&[1, 0, 9]).build();
        let m = icmpv6::Packet::new_checked(&f[54..]).unwrap();
        assert_eq!(m.nd_link_addr(icmpv6::OPT_TLL), Some(B));
        let mut it = m.nd_options();
        assert_eq!(it.next().map(|o| (o.kind, o.offset)), Some((2, 24)));
        assert_eq!(it.next(), None);
        assert!(it.malformed(), "trailing 3 bytes with a zero-length option");
    }

    #[test]
    fn accessors_never_panic_on_short_or_odd_buffers() {
        // Views can only be made on long-enough buffers, but every
        // accessor must also cope with any byte values.
        let f = Frame::new(A, B).ipv4(1, 2).udp(1, 2).build();
        for n in 0..=f.len() {
            let b = &f[..n];
            let _ = ethernet::Packet::new_checked(b).map(|p| (p.ethertype(), p.payload().len()));
            if n >= 14 {
                let s = &b[14..];
                let _ =
                    ipv4::Packet::new_checked(s).map(|p| (p.payload().len(), p.options().len(), p.verify_checksum()));
                let _ = ipv6::Packet::new_checked(s).map(|p| p.upper_layer());
                let _ = tcp::Packet::new_checked(s).map(|p| (p.payload().len(), p.options().len()));
                let _ = udp::Packet::new_checked(s).map(|p| p.payload().len());
                let _ = icmpv6::Packet::new_checked(s).map(|p| p.nd_options().count());
                let _ = sctp::Packet::new_checked(s).map(|p| p.verify_checksum());
            }
        }
        let mut x = 0x9e37_79b9u32;
        for _ in 0..20_000 {
            let mut v = [0u8; 64];
            for b in v.iter_mut() {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                *b = x as u8;
            }
            v[0] = 0x60 | (v[0] & 0xf);
            let _ = ipv6::Packet::new_checked(&v[..]).map(|p| p.upper_layer());
            v[0] = 0x40 | (v[0] & 0xf);
            let _ = ipv4::Packet::new_checked(&v[..]).map(|p| p.payload().len());
            v[0] = 135;
            v[1] = 0;
            let _ = icmpv6::Packet::new_checked(&v[..]).map(|p| (p.nd_options().count(), p.nd_link_addr(1)));
        }
        assert_eq!(checksum(&[]), 0xffff);
    }
}
