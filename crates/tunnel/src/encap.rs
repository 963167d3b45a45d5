//! Tunnel headers: building the outer header a frame is sent in, and
//! taking a received frame's outer header apart.
//!
//! Formats (all network byte order):
//! * **Geneve** (RFC 8926) over UDP (default port 6081): version 0, option
//!   length in 4-byte words, O (OAM) and C (critical options) flags,
//!   protocol 0x6558 (Ethernet), a 24-bit VNI, then TLV options: class (16
//!   bits), type (8), length in 4-byte words (5 bits), data.
//! * **VXLAN** (RFC 7348) over UDP (4789): flags with I set, a 24-bit VNI;
//!   with the group-based policy extension the G flag, the policy flags and
//!   a 16-bit group policy id.
//! * **GRE** (RFC 2890) as Ethernet over GRE (protocol 0x6558), with the
//!   optional checksum and key fields.
//!
//! The outer IP header carries the tunnel's TOS and TTL and DF as
//! configured; the outer UDP source port comes from a hash of the inner
//! flow so that ECMP and RSS in the underlay spread the tunnel's flows.

use wire::checksum::{checksum, l4_checksum_v4, l4_checksum_v6, partial_v4, partial_v6};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    Geneve,
    Vxlan,
    Gre,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Geneve => "geneve",
            Kind::Vxlan => "vxlan",
            Kind::Gre => "gre",
        }
    }
    pub fn default_port(self) -> u16 {
        match self {
            Kind::Geneve => 6081,
            Kind::Vxlan => 4789,
            Kind::Gre => 0,
        }
    }
}

/// `tun_flags` bits, as OpenFlow's `tun_flags` field exposes them.
pub mod flags {
    /// Don't fragment.
    pub const DF: u16 = 0x0002;
    /// Carry (or carried) an outer checksum.
    pub const CSUM: u16 = 0x0004;
    /// A key (VNI / GRE key) is present.
    pub const KEY: u16 = 0x0008;
    /// Geneve OAM.
    pub const OAM: u16 = 0x0001;
}

/// Tunnel metadata: what the pipeline matches (`tun_id`, `tun_src`, ...)
/// on receive and sets before output.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TunnelMeta {
    pub tun_id: u64,
    pub src: u128,
    pub dst: u128,
    pub v6: bool,
    pub tos: u8,
    pub ttl: u8,
    pub flags: u16,
    pub tp_src: u16,
    pub tp_dst: u16,
    /// VXLAN group-based policy.
    pub gbp_id: u16,
    pub gbp_flags: u8,
    /// Geneve options, raw TLVs (at most 252 bytes, a multiple of 4).
    pub geneve_opts: Vec<u8>,
}

/// How one tunnel port encapsulates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EncapSpec {
    pub kind: Kind,
    /// Outer Ethernet addresses (the next hop's and the route's device's).
    pub eth_src: [u8; 6],
    pub eth_dst: [u8; 6],
    pub dst_port: u16,
    /// Compute the outer UDP checksum (over IPv6 it is computed regardless,
    /// as OVS does) / GRE checksum.
    pub csum: bool,
}

/// Why a received frame is not a (valid) tunnel frame. Each is a drop
/// counter for frames that were addressed to a tunnel endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DecapError {
    Truncated,
    /// Not to a tunnel port (wrong UDP port or IP protocol).
    NotTunnel,
    BadVersion,
    /// Geneve options that overrun the header or have a zero-length walk
    /// error, or a critical option we cannot honour.
    BadOptions,
    /// Protocol other than Ethernet (0x6558) inside.
    BadProtocol,
    /// VXLAN without the I flag.
    NoVni,
    BadChecksum,
    /// An IP fragment: tunnels are not reassembled.
    Fragment,
}

impl DecapError {
    pub fn name(self) -> &'static str {
        match self {
            DecapError::Truncated => "tnl_truncated",
            DecapError::NotTunnel => "tnl_not_tunnel",
            DecapError::BadVersion => "tnl_bad_version",
            DecapError::BadOptions => "tnl_bad_options",
            DecapError::BadProtocol => "tnl_bad_protocol",
            DecapError::NoVni => "tnl_no_vni",
            DecapError::BadChecksum => "tnl_bad_checksum",
            DecapError::Fragment => "tnl_fragment",
        }
    }
}

/// Outer header bytes for `meta` (IP + UDP/GRE + tunnel header), without
/// Ethernet. The IP total length, UDP length and checksums are filled in by
/// [`push`].
fn tunnel_header(spec: &EncapSpec, meta: &TunnelMeta, h: &mut Vec<u8>) {
    match spec.kind {
        Kind::Geneve => {
            let opts = &meta.geneve_opts[..meta.geneve_opts.len().min(252) / 4 * 4];
            let b0 = (opts.len() / 4) as u8 & 0x3f;
            let oam = if meta.flags & flags::OAM != 0 { 0x80 } else { 0 };
            let crit = if geneve_has_critical(opts) { 0x40 } else { 0 };
            h.extend_from_slice(&[b0, oam | crit, 0x65, 0x58]);
            let vni = (meta.tun_id as u32 & 0x00ff_ffff) << 8;
            h.extend_from_slice(&vni.to_be_bytes());
            h.extend_from_slice(opts);
        }
        Kind::Vxlan => {
            let mut f0 = 0x08u8;
            let mut f1 = 0u8;
            let mut gbp = 0u16;
            if meta.gbp_id != 0 || meta.gbp_flags != 0 {
                f0 |= 0x80;
                f1 = meta.gbp_flags;
                gbp = meta.gbp_id;
            }
            h.extend_from_slice(&[f0, f1]);
            h.extend_from_slice(&gbp.to_be_bytes());
            let vni = (meta.tun_id as u32 & 0x00ff_ffff) << 8;
            h.extend_from_slice(&vni.to_be_bytes());
        }
        Kind::Gre => {
            let key = meta.flags & flags::KEY != 0;
            let mut f = 0u16;
            if spec.csum {
                f |= 0x8000;
            }
            if key {
                f |= 0x2000;
            }
            h.extend_from_slice(&f.to_be_bytes());
            h.extend_from_slice(&0x6558u16.to_be_bytes());
            if spec.csum {
                h.extend_from_slice(&[0; 4]);
            }
            if key {
                h.extend_from_slice(&(meta.tun_id as u32).to_be_bytes());
            }
        }
    }
}

/// The length of what [`tunnel_header`] writes.
fn tunnel_header_len(spec: &EncapSpec, meta: &TunnelMeta) -> usize {
    match spec.kind {
        Kind::Geneve => 8 + meta.geneve_opts.len().min(252) / 4 * 4,
        Kind::Vxlan => 8,
        Kind::Gre => 4 + if spec.csum { 4 } else { 0 } + if meta.flags & flags::KEY != 0 { 4 } else { 0 },
    }
}

fn geneve_has_critical(opts: &[u8]) -> bool {
    let mut i = 0;
    while i + 4 <= opts.len() {
        if opts[i + 2] & 0x80 != 0 {
            return true;
        }
        i += 4 + (opts[i + 3] & 0x1f) as usize * 4;
    }
    false
}

/// The outer UDP source port for an inner flow hash: in 32768..61000 (the
/// Linux ephemeral range, as Linux tunnels and OVS use).
pub fn udp_src_port(hash: u32) -> u16 {
    let (lo, hi) = (32768u32, 61000u32);
    (lo + ((hash as u64 * (hi - lo) as u64) >> 32) as u32) as u16
}

/// Bytes [`push`] adds in front of a frame of this spec and metadata.
pub fn overhead(spec: &EncapSpec, meta: &TunnelMeta) -> usize {
    14 + if meta.v6 { 40 } else { 20 } + if spec.kind == Kind::Gre { 0 } else { 8 } + tunnel_header_len(spec, meta)
}

/// Encapsulates `inner` (an Ethernet frame) into `out`: outer Ethernet,
/// IPv4/IPv6, UDP (Geneve, VXLAN) or GRE, the tunnel header, then `inner`.
/// `ip_id` is the outer IPv4 identification.
pub fn push(spec: &EncapSpec, meta: &TunnelMeta, inner: &[u8], ip_id: u16, out: &mut Vec<u8>) {
    header(spec, meta, inner.len(), ip_id, out);
    out.extend_from_slice(inner);
    finish(spec, meta, out);
}

/// The outer headers alone (everything [`push`] puts in front of an
/// `inner_len`-byte frame) into `out`, so a caller can write them into the
/// headroom of the packet itself; then [`finish`] over the whole frame.
pub fn header(spec: &EncapSpec, meta: &TunnelMeta, inner_len: usize, ip_id: u16, out: &mut Vec<u8>) {
    out.clear();
    let th_len = tunnel_header_len(spec, meta);
    out.extend_from_slice(&spec.eth_dst);
    out.extend_from_slice(&spec.eth_src);
    out.extend_from_slice(&(if meta.v6 { 0x86ddu16 } else { 0x0800 }).to_be_bytes());
    let l3 = out.len();
    let udp = spec.kind != Kind::Gre;
    let l4_len = if udp { 8 } else { 0 } + th_len + inner_len;
    let proto = if udp { 17 } else { 47 };
    if meta.v6 {
        let vtf = 0x6000_0000u32 | (meta.tos as u32) << 20;
        out.extend_from_slice(&vtf.to_be_bytes());
        out.extend_from_slice(&(l4_len as u16).to_be_bytes());
        out.extend_from_slice(&[proto, meta.ttl]);
        out.extend_from_slice(&meta.src.to_be_bytes());
        out.extend_from_slice(&meta.dst.to_be_bytes());
    } else {
        out.extend_from_slice(&[0x45, meta.tos]);
        out.extend_from_slice(&((20 + l4_len) as u16).to_be_bytes());
        out.extend_from_slice(&ip_id.to_be_bytes());
        let df = if meta.flags & flags::DF != 0 { 0x4000u16 } else { 0 };
        out.extend_from_slice(&df.to_be_bytes());
        out.extend_from_slice(&[meta.ttl, proto, 0, 0]);
        out.extend_from_slice(&(meta.src as u32).to_be_bytes());
        out.extend_from_slice(&(meta.dst as u32).to_be_bytes());
        let c = checksum(&out[l3..l3 + 20]);
        out[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
    }
    if udp {
        out.extend_from_slice(&meta.tp_src.to_be_bytes());
        out.extend_from_slice(&spec.dst_port.to_be_bytes());
        out.extend_from_slice(&(l4_len as u16).to_be_bytes());
        out.extend_from_slice(&[0, 0]);
    }
    tunnel_header(spec, meta, out);
    debug_assert_eq!(out.len(), overhead(spec, meta), "tunnel_header_len agrees with tunnel_header");
}

/// The outer headers for one tunnel destination and set of tunnel fields,
/// built once and written in front of each frame with only what changes
/// per frame patched in (lengths, IPv4 identification and checksum, UDP
/// source port, TOS and TTL): what OVS's `tnl_push` does with the header
/// it prepared at translation time.
#[derive(Clone, Debug)]
pub struct Template {
    spec: EncapSpec,
    meta: TunnelMeta,
    bytes: Vec<u8>,
    /// IPv4: the one's-complement sum of the header's words without the
    /// per-frame fields (TOS, total length, id, TTL, checksum), so that
    /// [`Template::write`] finishes the checksum from its arguments instead
    /// of reading back what it just wrote (the read waited for the stores:
    /// three quarters of `write`'s time).
    ip_base: u32,
}

impl Template {
    /// The headers for `spec` and `meta` (whose `tp_src`, `tos` and `ttl`
    /// are given per frame to [`Template::write`]).
    pub fn new(spec: EncapSpec, meta: TunnelMeta) -> Template {
        let mut bytes = Vec::new();
        header(&spec, &meta, 0, 0, &mut bytes);
        let mut ip_base = 0u32;
        if !meta.v6 && bytes.len() >= 34 {
            let mut h = [0u8; 20];
            h.copy_from_slice(&bytes[14..34]);
            h[1] = 0; // TOS
            h[2..6].fill(0); // total length, id
            h[8] = 0; // TTL
            h[10..12].fill(0); // checksum
            ip_base = h.chunks_exact(2).map(|w| u16::from_be_bytes([w[0], w[1]]) as u32).sum();
        }
        Template { spec, meta, bytes, ip_base }
    }

    /// Bytes the headers take in front of the inner frame.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Writes the headers into the first [`Template::len`] bytes of
    /// `frame` (the inner frame follows them) and fills the checksums: the
    /// same bytes as [`push`] with these per-frame fields.
    pub fn write(&self, frame: &mut [u8], ip_id: u16, tp_src: u16, tos: u8, ttl: u8) {
        let n = self.bytes.len();
        frame[..n].copy_from_slice(&self.bytes);
        let l3 = 14;
        let l4 = l3 + if self.meta.v6 { 40 } else { 20 };
        let l4_len = (frame.len() - l4) as u16;
        if self.meta.v6 {
            let vtf = 0x6000_0000u32 | (tos as u32) << 20;
            frame[l3..l3 + 4].copy_from_slice(&vtf.to_be_bytes());
            frame[l3 + 4..l3 + 6].copy_from_slice(&l4_len.to_be_bytes());
            frame[l3 + 7] = ttl;
        } else {
            frame[l3 + 1] = tos;
            frame[l3 + 2..l3 + 4].copy_from_slice(&(20 + l4_len).to_be_bytes());
            frame[l3 + 4..l3 + 6].copy_from_slice(&ip_id.to_be_bytes());
            frame[l3 + 8] = ttl;
            let mut sum = self.ip_base + tos as u32 + (20 + l4_len) as u32 + ip_id as u32 + ((ttl as u32) << 8);
            while sum >> 16 != 0 {
                sum = (sum & 0xffff) + (sum >> 16);
            }
            frame[l3 + 10..l3 + 12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
        }
        if self.spec.kind != Kind::Gre {
            frame[l4..l4 + 2].copy_from_slice(&tp_src.to_be_bytes());
            frame[l4 + 4..l4 + 6].copy_from_slice(&l4_len.to_be_bytes());
        }
        finish(&self.spec, &self.meta, frame);
    }
}

/// The headers of one inner flow for a writer that patches only the
/// lengths, the identification and the IPv4 checksum per frame (the XDP
/// fast path): the bytes [`Template::write`] puts in front of a frame,
/// with this flow's UDP source port, TOS and TTL, and with the IPv4 total
/// length, identification and checksum and the UDP length zero.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FixedHeader {
    pub bytes: Vec<u8>,
    /// Offset of the outer UDP header (None for GRE).
    pub udp: Option<usize>,
    /// The folded ones-complement sum of the IPv4 header as in `bytes`:
    /// the checksum of a frame is the complement of this plus its total
    /// length and identification, folded.
    pub ip_sum: u16,
}

impl Template {
    /// [`FixedHeader`] for this template, or why a per-frame patch of
    /// lengths, identification and IPv4 checksum cannot give what
    /// [`Template::write`] gives: over IPv6 and with outer checksums, the
    /// checksums cover the payload.
    pub fn fixed_header(&self, tp_src: u16, tos: u8, ttl: u8) -> Result<FixedHeader, &'static str> {
        if self.meta.v6 {
            return Err("an IPv6 underlay (its UDP checksum covers the payload)");
        }
        if self.spec.csum || self.meta.flags & flags::CSUM != 0 {
            return Err("outer checksums (they cover the payload)");
        }
        let mut bytes = self.bytes.clone();
        let udp = (self.spec.kind != Kind::Gre).then_some(34);
        bytes[15] = tos;
        bytes[22] = ttl;
        bytes[16..20].fill(0);
        bytes[24..26].fill(0);
        if let Some(u) = udp {
            bytes[u..u + 2].copy_from_slice(&tp_src.to_be_bytes());
            bytes[u + 4..u + 6].fill(0);
        }
        let mut sum = self.ip_base + tos as u32 + ((ttl as u32) << 8);
        while sum >> 16 != 0 {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        Ok(FixedHeader { bytes, udp, ip_sum: sum as u16 })
    }
}

/// Fills the outer checksums that cover the payload (UDP when asked for,
/// and always over IPv6; GRE when asked for) in `frame`: what [`header`]
/// made, followed by the inner frame.
pub fn finish(spec: &EncapSpec, meta: &TunnelMeta, frame: &mut [u8]) {
    let l4 = 14 + if meta.v6 { 40 } else { 20 };
    let udp = spec.kind != Kind::Gre;
    // IPv6 UDP always: a zero UDP checksum over IPv6 is only accepted by
    // receivers that opt in (RFC 6935), and OVS computes it there too.
    if udp && (spec.csum || meta.flags & flags::CSUM != 0 || meta.v6) {
        let c = if meta.v6 {
            l4_checksum_v6(meta.src, meta.dst, 17, &frame[l4..])
        } else {
            l4_checksum_v4(meta.src as u32, meta.dst as u32, 17, &frame[l4..])
        };
        let c = if c == 0 { 0xffff } else { c };
        frame[l4 + 6..l4 + 8].copy_from_slice(&c.to_be_bytes());
    } else if !udp && spec.csum {
        // GRE checksum: over the GRE header and payload.
        let c = checksum(&frame[l4..]);
        frame[l4 + 4..l4 + 6].copy_from_slice(&c.to_be_bytes());
    }
}

/// The tunnel endpoints a receiver listens on: UDP destination ports with
/// their kind, and whether GRE is accepted.
#[derive(Clone, Debug, Default)]
pub struct Listen {
    pub udp: Vec<(u16, Kind)>,
    pub gre: bool,
}

/// A decapsulated frame: metadata, and where the inner Ethernet frame
/// starts in the received bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decap {
    pub kind: Kind,
    pub meta: TunnelMeta,
    pub inner: usize,
    /// End of the outer IP datagram (padding excluded).
    pub end: usize,
}

fn be16(b: &[u8], o: usize) -> Result<u16, DecapError> {
    Ok(u16::from_be_bytes(b.get(o..o + 2).ok_or(DecapError::Truncated)?.try_into().expect("2 bytes")))
}
fn be32(b: &[u8], o: usize) -> Result<u32, DecapError> {
    Ok(u32::from_be_bytes(b.get(o..o + 4).ok_or(DecapError::Truncated)?.try_into().expect("4 bytes")))
}

/// Takes a received Ethernet frame's outer header apart. Checksums that
/// are present (outer UDP, GRE) are verified.
pub fn pop(frame: &[u8], listen: &Listen) -> Result<Decap, DecapError> {
    let et = be16(frame, 12)?;
    let l3 = 14;
    let mut meta = TunnelMeta::default();
    let (l4, end, proto) = match et {
        0x0800 => {
            let b0 = *frame.get(l3).ok_or(DecapError::Truncated)?;
            let ihl = (b0 & 0xf) as usize * 4;
            if b0 >> 4 != 4 || ihl < 20 || frame.len() < l3 + ihl {
                return Err(DecapError::Truncated);
            }
            let total = be16(frame, l3 + 2)? as usize;
            if total < ihl || l3 + total > frame.len() {
                return Err(DecapError::Truncated);
            }
            if be16(frame, l3 + 6)? & 0x3fff != 0 {
                return Err(DecapError::Fragment);
            }
            meta.tos = frame[l3 + 1];
            meta.ttl = frame[l3 + 8];
            if frame[l3 + 6] & 0x40 != 0 {
                meta.flags |= flags::DF;
            }
            meta.src = be32(frame, l3 + 12)? as u128;
            meta.dst = be32(frame, l3 + 16)? as u128;
            (l3 + ihl, l3 + total, frame[l3 + 9])
        }
        0x86dd => {
            let h = frame.get(l3..l3 + 40).ok_or(DecapError::Truncated)?;
            let plen = be16(h, 4)? as usize;
            if l3 + 40 + plen > frame.len() {
                return Err(DecapError::Truncated);
            }
            meta.v6 = true;
            meta.tos = ((be32(h, 0)? >> 20) & 0xff) as u8;
            meta.ttl = h[7];
            meta.src = u128::from_be_bytes(h[8..24].try_into().expect("16 bytes"));
            meta.dst = u128::from_be_bytes(h[24..40].try_into().expect("16 bytes"));
            (l3 + 40, l3 + 40 + plen, h[6])
        }
        _ => return Err(DecapError::NotTunnel),
    };
    let seg = &frame[l4..end];
    match proto {
        17 => {
            if seg.len() < 8 {
                return Err(DecapError::Truncated);
            }
            let dport = be16(seg, 2)?;
            let Some(&(_, kind)) = listen.udp.iter().find(|(p, _)| *p == dport) else {
                return Err(DecapError::NotTunnel);
            };
            meta.tp_src = be16(seg, 0)?;
            meta.tp_dst = dport;
            let ulen = be16(seg, 4)? as usize;
            if ulen < 8 || ulen > seg.len() {
                return Err(DecapError::Truncated);
            }
            let field = be16(seg, 6)?;
            if field != 0 {
                // A local sender's stack (a kernel VXLAN or Geneve device in
                // a namespace on a veth, Linux's defaults) leaves the outer
                // checksum to offload: the field holds only the
                // pseudo-header sum, a promise that the bytes are as sent.
                // Such a frame is accepted as the kernel accepts its own.
                let ok = if meta.v6 {
                    field == partial_v6(meta.src, meta.dst, 17, ulen)
                        || l4_checksum_v6(meta.src, meta.dst, 17, &seg[..ulen]) == 0
                } else {
                    field == partial_v4(meta.src as u32, meta.dst as u32, 17, ulen)
                        || l4_checksum_v4(meta.src as u32, meta.dst as u32, 17, &seg[..ulen]) == 0
                };
                if !ok {
                    return Err(DecapError::BadChecksum);
                }
                meta.flags |= flags::CSUM;
            }
            let t = l4 + 8;
            let inner = match kind {
                Kind::Geneve => {
                    let h = frame.get(t..t + 8).ok_or(DecapError::Truncated)?;
                    if h[0] >> 6 != 0 {
                        return Err(DecapError::BadVersion);
                    }
                    let olen = (h[0] & 0x3f) as usize * 4;
                    if be16(h, 2)? != 0x6558 {
                        return Err(DecapError::BadProtocol);
                    }
                    if h[1] & 0x80 != 0 {
                        meta.flags |= flags::OAM;
                    }
                    let opts = frame.get(t + 8..t + 8 + olen).ok_or(DecapError::BadOptions)?;
                    if t + 8 + olen > l4 + ulen {
                        return Err(DecapError::BadOptions);
                    }
                    // Each option must tile the option area exactly.
                    let mut i = 0;
                    while i < opts.len() {
                        if i + 4 > opts.len() {
                            return Err(DecapError::BadOptions);
                        }
                        i += 4 + (opts[i + 3] & 0x1f) as usize * 4;
                    }
                    if i != opts.len() {
                        return Err(DecapError::BadOptions);
                    }
                    meta.geneve_opts = opts.to_vec();
                    meta.tun_id = (be32(h, 4)? >> 8) as u64;
                    meta.flags |= flags::KEY;
                    t + 8 + olen
                }
                Kind::Vxlan => {
                    let h = frame.get(t..t + 8).ok_or(DecapError::Truncated)?;
                    if h[0] & 0x08 == 0 {
                        return Err(DecapError::NoVni);
                    }
                    if h[0] & 0x80 != 0 {
                        meta.gbp_flags = h[1];
                        meta.gbp_id = be16(h, 2)?;
                    }
                    meta.tun_id = (be32(h, 4)? >> 8) as u64;
                    meta.flags |= flags::KEY;
                    t + 8
                }
                Kind::Gre => return Err(DecapError::NotTunnel),
            };
            if inner + 14 > l4 + ulen {
                return Err(DecapError::Truncated);
            }
            Ok(Decap { kind, meta, inner, end: l4 + ulen })
        }
        47 if listen.gre => {
            let f = be16(seg, 0)?;
            if f & 0x0007 != 0 || f & 0x4000 != 0 {
                return Err(DecapError::BadVersion);
            }
            if be16(seg, 2)? != 0x6558 {
                return Err(DecapError::BadProtocol);
            }
            let mut o = 4;
            if f & 0x8000 != 0 {
                if seg.len() < 8 || checksum(seg) != 0 {
                    return Err(if seg.len() < 8 { DecapError::Truncated } else { DecapError::BadChecksum });
                }
                meta.flags |= flags::CSUM;
                o += 4;
            }
            if f & 0x2000 != 0 {
                meta.tun_id = be32(seg, o)? as u64;
                meta.flags |= flags::KEY;
                o += 4;
            }
            if f & 0x1000 != 0 {
                o += 4;
            }
            if o + 14 > seg.len() {
                return Err(DecapError::Truncated);
            }
            Ok(Decap { kind: Kind::Gre, meta, inner: l4 + o, end })
        }
        _ => Err(DecapError::NotTunnel),
    }
}
