//! IP fragment reassembly before tracking.
//!
//! A fragment carries no transport ports (only the first one does), so the
//! tracker cannot place it in a connection. As Open vSwitch's userspace
//! datapath does, `ct()` on a fragment hands it to [`Defrag`], which keeps
//! a copy until every fragment of the datagram has arrived. The datagram
//! rebuilt from them is tracked as one packet; the original fragments then
//! continue through the pipeline, each carrying the datagram's verdict, and
//! a NAT translation of the datagram is copied onto them (addresses on
//! every fragment, the transport ports and checksum on the first). The
//! fragments themselves are what leaves the switch: nothing is refragmented.
//!
//! ## Limits
//! * At most `max_frags` fragments are held over all datagrams (OVS's
//!   default, 1000); a fragment beyond that is dropped and counted.
//! * A non-final fragment smaller than the minimum size (L3 header and
//!   data; 1200 bytes for IPv4, 1280 for IPv6 by default, as OVS) is
//!   dropped: tiny fragments are a classic way to exhaust reassembly memory.
//! * A fragment that overlaps one already held is dropped (RFC 5722 forbids
//!   overlaps for IPv6; for IPv4 they are an evasion technique).
//! * A datagram that is not complete 15 s after its first fragment is
//!   forgotten ([`Defrag::sweep`]) and its fragments count as expired.
//! * At most 64 fragments per datagram, and no datagram over 65,535 bytes.
//!
//! The module is sans-IO like the rest of the tracker: frames are byte
//! slices, time is the caller's.

use crate::packet::l3_offset;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;

/// How long an incomplete datagram's fragments are kept.
pub const TIMEOUT_MS: u64 = 15_000;
/// The most fragments one datagram may have.
pub const MAX_PER_DATAGRAM: usize = 64;

/// What [`Defrag::handle`] made of a frame.
#[derive(Debug)]
pub enum Defragged {
    /// Not an IP fragment (or reassembly is off for its IP version): track
    /// the frame itself.
    NotFragment,
    /// Kept until the rest of its datagram arrives: the caller drops its
    /// own copy.
    Held,
    /// Refused; the reason is also counted.
    Dropped(&'static str),
    /// The datagram is complete: `whole` is the rebuilt datagram (to be
    /// tracked), `frags` the original fragments in offset order, the
    /// caller's frame among them.
    Complete { whole: Vec<u8>, frags: Vec<Vec<u8>> },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct DatagramKey {
    zone: u16,
    v6: bool,
    src: u128,
    dst: u128,
    proto: u8,
    id: u32,
}

/// One fragment as parsed: where its pieces are in its frame.
#[derive(Clone, Copy, Debug)]
struct FragInfo {
    key: DatagramKey,
    /// Offset of the IP header.
    l3: usize,
    /// Length of the headers kept in the rebuilt datagram (IPv4 header, or
    /// IPv6 header plus the extension headers before the fragment header).
    hdr_len: usize,
    /// For IPv6: the offset of the next-header byte that names the
    /// fragment header.
    nh_at: usize,
    /// Where this fragment's data starts and ends in its frame.
    data: (usize, usize),
    /// Its offset in the datagram's data.
    offset: usize,
    more: bool,
}

struct Held {
    info: FragInfo,
    frame: Vec<u8>,
}

struct Datagram {
    first_ms: u64,
    frags: Vec<Held>,
    /// The data length, once the last fragment is known.
    total: Option<usize>,
}

/// Counters for one IP version, named as `dpctl/ipf-get-status` prints them.
#[derive(Default)]
pub struct FragCounters {
    pub accepted: AtomicU64,
    pub completed: AtomicU64,
    pub expired: AtomicU64,
    pub too_small: AtomicU64,
    pub overlapped: AtomicU64,
    pub purged: AtomicU64,
}

/// Per-version settings.
pub struct VersionCfg {
    pub enabled: AtomicBool,
    pub min_frag: AtomicUsize,
    pub counters: FragCounters,
}

/// The reassembler shared by all poll threads of a datapath.
pub struct Defrag {
    pub v4: VersionCfg,
    pub v6: VersionCfg,
    pub max_frags: AtomicUsize,
    n_frags: AtomicUsize,
    lists: Mutex<HashMap<DatagramKey, Datagram>>,
}

impl Default for Defrag {
    fn default() -> Defrag {
        let v = |min| VersionCfg {
            enabled: AtomicBool::new(true),
            min_frag: AtomicUsize::new(min),
            counters: FragCounters::default(),
        };
        Defrag {
            v4: v(1200),
            v6: v(1280),
            max_frags: AtomicUsize::new(1000),
            n_frags: AtomicUsize::new(0),
            lists: Mutex::new(HashMap::new()),
        }
    }
}

/// Parses a fragment. `Ok(None)`: not a fragment.
fn parse(b: &[u8], zone: u16) -> Result<Option<FragInfo>, &'static str> {
    let Some((l3, ty)) = l3_offset(b) else { return Ok(None) };
    match ty {
        0x0800 => {
            let h = b.get(l3..l3 + 20).ok_or("truncated")?;
            let ihl = (h[0] & 0xf) as usize * 4;
            let frag = u16::from_be_bytes([h[6], h[7]]);
            if frag & 0x3fff == 0 {
                return Ok(None);
            }
            let total = u16::from_be_bytes([h[2], h[3]]) as usize;
            if h[0] >> 4 != 4 || ihl < 20 || total < ihl || l3 + total > b.len() {
                return Err("truncated");
            }
            if wire::checksum::checksum(&b[l3..l3 + ihl]) != 0 {
                return Err("bad checksum");
            }
            let key = DatagramKey {
                zone,
                v6: false,
                src: u32::from_be_bytes([h[12], h[13], h[14], h[15]]) as u128,
                dst: u32::from_be_bytes([h[16], h[17], h[18], h[19]]) as u128,
                proto: h[9],
                id: u16::from_be_bytes([h[4], h[5]]) as u32,
            };
            let info = FragInfo {
                key,
                l3,
                hdr_len: ihl,
                nh_at: 0,
                data: (l3 + ihl, l3 + total),
                offset: (frag & 0x1fff) as usize * 8,
                more: frag & 0x2000 != 0,
            };
            Ok(Some(info))
        }
        0x86dd => {
            let h = b.get(l3..l3 + 40).ok_or("truncated")?;
            let plen = u16::from_be_bytes([h[4], h[5]]) as usize;
            let end = l3 + 40 + plen;
            if h[0] >> 4 != 6 || end > b.len() {
                return Err("truncated");
            }
            let mut nh_at = l3 + 6;
            let mut off = l3 + 40;
            for _ in 0..8 {
                match b[nh_at] {
                    0 | 43 | 60 => {
                        let len = (*b.get(off + 1).ok_or("truncated")? as usize + 1) * 8;
                        nh_at = off;
                        off += len;
                    }
                    44 => {
                        let f = b.get(off..off + 8).ok_or("truncated")?;
                        let x = u16::from_be_bytes([f[2], f[3]]);
                        if off + 8 > end {
                            return Err("truncated");
                        }
                        let key = DatagramKey {
                            zone,
                            v6: true,
                            src: u128::from_be_bytes(h[8..24].try_into().expect("16 bytes")),
                            dst: u128::from_be_bytes(h[24..40].try_into().expect("16 bytes")),
                            proto: f[0],
                            id: u32::from_be_bytes([f[4], f[5], f[6], f[7]]),
                        };
                        let offset = (x >> 3) as usize * 8;
                        let more = x & 1 != 0;
                        if offset == 0 && !more {
                            // An atomic fragment (RFC 6946): a whole datagram.
                            return Ok(None);
                        }
                        let info = FragInfo { key, l3, hdr_len: off - l3, nh_at, data: (off + 8, end), offset, more };
                        return Ok(Some(info));
                    }
                    _ => return Ok(None),
                }
            }
            Ok(None)
        }
        _ => Ok(None),
    }
}

impl Defrag {
    fn version(&self, v6: bool) -> &VersionCfg {
        if v6 {
            &self.v6
        } else {
            &self.v4
        }
    }

    /// Fragments held now.
    pub fn n_frags(&self) -> usize {
        self.n_frags.load(Relaxed)
    }

    /// Takes one frame seen by `ct()` in `zone`.
    pub fn handle(&self, frame: &[u8], zone: u16, now_ms: u64) -> Defragged {
        let info = match parse(frame, zone) {
            Ok(Some(i)) => i,
            Ok(None) => return Defragged::NotFragment,
            Err(e) => return Defragged::Dropped(e),
        };
        let ver = self.version(info.key.v6);
        if !ver.enabled.load(Relaxed) {
            return Defragged::NotFragment;
        }
        let c = &ver.counters;
        let len = info.data.1 - info.data.0;
        if info.more && (len % 8 != 0 || info.hdr_len + len < ver.min_frag.load(Relaxed) || len == 0) {
            c.too_small.fetch_add(1, Relaxed);
            return Defragged::Dropped("fragment too small");
        }
        if info.offset + len + info.hdr_len > 65_535 {
            c.purged.fetch_add(1, Relaxed);
            return Defragged::Dropped("datagram too long");
        }
        if self.n_frags.load(Relaxed) >= self.max_frags.load(Relaxed) {
            c.purged.fetch_add(1, Relaxed);
            return Defragged::Dropped("too many fragments held");
        }
        let mut lists = self.lists.lock().expect("ipf lists");
        let d = lists.entry(info.key).or_insert_with(|| Datagram { first_ms: now_ms, frags: Vec::new(), total: None });
        let (start, end) = (info.offset, info.offset + len);
        let overlaps = d.frags.iter().any(|h| {
            let (s, e) = (h.info.offset, h.info.offset + (h.info.data.1 - h.info.data.0));
            start < e && s < end
        });
        let beyond = d.total.is_some_and(|t| end > t) || (!info.more && d.frags.iter().any(|h| h.info.offset >= end));
        if overlaps || beyond || (!info.more && d.total.is_some()) {
            c.overlapped.fetch_add(1, Relaxed);
            if d.frags.is_empty() {
                lists.remove(&info.key);
            }
            return Defragged::Dropped("overlapping fragment");
        }
        if d.frags.len() >= MAX_PER_DATAGRAM {
            let n = d.frags.len();
            lists.remove(&info.key);
            self.n_frags.fetch_sub(n, Relaxed);
            c.purged.fetch_add(n as u64 + 1, Relaxed);
            return Defragged::Dropped("too many fragments in one datagram");
        }
        c.accepted.fetch_add(1, Relaxed);
        if !info.more {
            d.total = Some(end);
        }
        d.frags.push(Held { info, frame: frame.to_vec() });
        self.n_frags.fetch_add(1, Relaxed);
        let have: usize = d.frags.iter().map(|h| h.info.data.1 - h.info.data.0).sum();
        if d.total != Some(have) {
            return Defragged::Held;
        }
        // Complete: no overlaps and the lengths add up, so the pieces tile
        // the datagram exactly.
        let mut d = lists.remove(&info.key).expect("the list just used");
        drop(lists);
        self.n_frags.fetch_sub(d.frags.len(), Relaxed);
        d.frags.sort_by_key(|h| h.info.offset);
        c.completed.fetch_add(d.frags.len() as u64, Relaxed);
        let whole = rebuild(&d.frags, have);
        Defragged::Complete { whole, frags: d.frags.into_iter().map(|h| h.frame).collect() }
    }

    /// Forgets datagrams whose first fragment is older than the timeout.
    pub fn sweep(&self, now_ms: u64) -> usize {
        let mut lists = self.lists.lock().expect("ipf lists");
        let mut gone = 0;
        lists.retain(|k, d| {
            if now_ms.saturating_sub(d.first_ms) < TIMEOUT_MS {
                return true;
            }
            gone += d.frags.len();
            self.version(k.v6).counters.expired.fetch_add(d.frags.len() as u64, Relaxed);
            false
        });
        self.n_frags.fetch_sub(gone, Relaxed);
        gone
    }

    /// `dpctl/ipf-get-status`, in Open vSwitch's layout.
    pub fn status(&self) -> String {
        let mut s = String::from("        Fragmentation Module Status\n        ---------------------------\n");
        s += &format!("        v4 enabled: {}\n", self.v4.enabled.load(Relaxed) as u8);
        s += &format!("        v6 enabled: {}\n", self.v6.enabled.load(Relaxed) as u8);
        s += &format!("        max num frags (v4/v6): {}\n", self.max_frags.load(Relaxed));
        s += &format!("        num frag: {}\n", self.n_frags());
        for (name, v) in [("v4", &self.v4), ("v6", &self.v6)] {
            let c = &v.counters;
            s += &format!("        min {name} frag size: {}\n", v.min_frag.load(Relaxed));
            for (what, n) in [
                ("accepted", &c.accepted),
                ("completed", &c.completed),
                ("expired", &c.expired),
                ("too small", &c.too_small),
                ("overlapped", &c.overlapped),
                ("purged", &c.purged),
            ] {
                s += &format!("        {name} frags {what}: {}\n", n.load(Relaxed));
            }
        }
        s
    }
}

/// The datagram rebuilt from its fragments (sorted, complete): the first
/// fragment's link and IP headers, then every fragment's data.
fn rebuild(frags: &[Held], data_len: usize) -> Vec<u8> {
    let first = &frags[0];
    let i = first.info;
    let mut out = Vec::with_capacity(i.l3 + i.hdr_len + data_len);
    out.extend_from_slice(&first.frame[..i.l3 + i.hdr_len]);
    for h in frags {
        out.extend_from_slice(&h.frame[h.info.data.0..h.info.data.1]);
    }
    let l3 = i.l3;
    if i.key.v6 {
        // The fragment header is gone: whatever named it now names what it
        // carried, and the payload length covers the whole datagram.
        out[i.nh_at] = i.key.proto;
        let plen = (i.hdr_len - 40 + data_len) as u16;
        out[l3 + 4..l3 + 6].copy_from_slice(&plen.to_be_bytes());
    } else {
        let total = (i.hdr_len + data_len) as u16;
        out[l3 + 2..l3 + 4].copy_from_slice(&total.to_be_bytes());
        // Keep DF, clear MF and the offset.
        out[l3 + 6] &= 0x40;
        out[l3 + 7] = 0;
        out[l3 + 10..l3 + 12].copy_from_slice(&[0, 0]);
        let ck = wire::checksum::checksum(&out[l3..l3 + i.hdr_len]);
        out[l3 + 10..l3 + 12].copy_from_slice(&ck.to_be_bytes());
    }
    out
}

/// Copies what NAT changed in the tracked datagram `whole` onto one of its
/// original fragments: the addresses on every fragment (IPv4 header
/// checksum recomputed), and on the first fragment the transport header's
/// ports and checksum (the datagram's checksum covers all of its data, so
/// the translated datagram's checksum is the right one for the first
/// fragment to carry).
pub fn apply_translation(whole: &[u8], frag: &mut [u8]) {
    let (Ok(Some(info)), Some((l3w, _))) = (parse(frag, 0), l3_offset(whole)) else { return };
    let l3 = info.l3;
    if info.key.v6 {
        if let (Some(src), Some(dst)) = (whole.get(l3w + 8..l3w + 40), frag.get_mut(l3 + 8..l3 + 40)) {
            dst.copy_from_slice(src);
        }
    } else if let Some(a) = whole.get(l3w + 12..l3w + 20) {
        frag[l3 + 12..l3 + 20].copy_from_slice(a);
        frag[l3 + 10..l3 + 12].copy_from_slice(&[0, 0]);
        let ck = wire::checksum::checksum(&frag[l3..l3 + info.hdr_len]);
        frag[l3 + 10..l3 + 12].copy_from_slice(&ck.to_be_bytes());
    }
    if info.offset != 0 {
        return;
    }
    // The transport header in the rebuilt datagram starts right after its
    // IP header (IPv4) or the kept extension headers (IPv6, same length
    // less the 8-byte fragment header, which `hdr_len` never counted).
    let l4w = l3w + info.hdr_len;
    let l4f = info.data.0;
    let ranges: &[(usize, usize)] = match info.key.proto {
        crate::packet::proto::TCP => &[(0, 4), (16, 18)],
        crate::packet::proto::UDP | crate::packet::proto::UDPLITE => &[(0, 4), (6, 8)],
        crate::packet::proto::ICMP | crate::packet::proto::ICMPV6 => &[(2, 6)],
        crate::packet::proto::SCTP => &[(0, 4)],
        _ => &[],
    };
    for &(a, b) in ranges {
        if let (Some(src), true) = (whole.get(l4w + a..l4w + b), l4f + b <= info.data.1) {
            frag[l4f + a..l4f + b].copy_from_slice(src);
        }
    }
}

/// A fragment's offset in its datagram and its "more fragments" flag;
/// `None` if the frame is not a fragment.
pub fn fragment_offset(frame: &[u8]) -> Option<(usize, bool)> {
    parse(frame, 0).ok().flatten().map(|i| (i.offset, i.more))
}
