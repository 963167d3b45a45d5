//! Fragment reassembly in front of the tracker: datagrams rebuilt byte for
//! byte from fragments in any order (IPv4 and IPv6), the limits that keep
//! it from being a memory sink (overlaps, tiny fragments, the global cap,
//! the 15 s timeout), and a NAT translation of the datagram carried back
//! onto its fragments with valid checksums.
//!
//! Plan: whole datagrams come from `wire::build`; a small fragmenter here
//! cuts them the way a host's IP stack does (8-byte multiples, MF on all
//! but the last); `Defrag` and `Conntrack` run with an explicit clock.

use conntrack::frag::{apply_translation, fragment_offset, Defrag, Defragged};
use conntrack::{cs, Config, Conntrack, CtAction, Nat, NatFlags, NatRange};
use std::sync::atomic::Ordering::Relaxed;
use wire::build::Frame;
use wire::checksum::{checksum, l4_checksum_v4, l4_checksum_v6};

const MA: [u8; 6] = [2, 0, 0, 0, 0, 1];
const MB: [u8; 6] = [2, 0, 0, 0, 0, 2];
const A: u32 = 0x0a00_0001;
const B: u32 = 0x0a00_0002;
const X: u32 = 0xc0a8_0064;
const A6: u128 = 0x2001_0db8_0000_0000_0000_0000_0000_0001;
const B6: u128 = 0x2001_0db8_0000_0000_0000_0000_0000_0002;

fn payload(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + 3) as u8).collect()
}

fn udp4(src: u32, n: usize) -> Vec<u8> {
    Frame::new(MA, MB).ipv4(src, B).udp(4000, 53).payload(&payload(n)).build()
}

fn udp6(n: usize) -> Vec<u8> {
    Frame::new(MA, MB).ipv6(A6, B6).udp(4000, 53).payload(&payload(n)).build()
}

/// Cuts an IPv4 frame (Ethernet + 20-byte header) into fragments of at
/// most `chunk` data bytes.
fn frag4(whole: &[u8], chunk: usize, id: u16) -> Vec<Vec<u8>> {
    let data = &whole[34..];
    let mut out = Vec::new();
    for (i, piece) in data.chunks(chunk).enumerate() {
        let off = i * chunk;
        let more = off + piece.len() < data.len();
        let mut f = whole[..34].to_vec();
        f.extend_from_slice(piece);
        f[16..18].copy_from_slice(&((20 + piece.len()) as u16).to_be_bytes());
        f[18..20].copy_from_slice(&id.to_be_bytes());
        let fl = ((more as u16) << 13) | (off / 8) as u16;
        f[20..22].copy_from_slice(&fl.to_be_bytes());
        f[24..26].copy_from_slice(&[0, 0]);
        let c = checksum(&f[14..34]);
        f[24..26].copy_from_slice(&c.to_be_bytes());
        out.push(f);
    }
    out
}

/// Cuts an IPv6 frame (Ethernet + 40-byte header, no extension headers)
/// into fragments with a fragment header.
fn frag6(whole: &[u8], chunk: usize, id: u32) -> Vec<Vec<u8>> {
    let nh = whole[20];
    let data = &whole[54..];
    let mut out = Vec::new();
    for (i, piece) in data.chunks(chunk).enumerate() {
        let off = i * chunk;
        let more = off + piece.len() < data.len();
        let mut f = whole[..54].to_vec();
        f[20] = 44;
        f[18..20].copy_from_slice(&((8 + piece.len()) as u16).to_be_bytes());
        f.extend_from_slice(&[nh, 0]);
        f.extend_from_slice(&((off as u16) | more as u16).to_be_bytes());
        f.extend_from_slice(&id.to_be_bytes());
        f.extend_from_slice(piece);
        out.push(f);
    }
    out
}

fn complete(r: Defragged) -> (Vec<u8>, Vec<Vec<u8>>) {
    match r {
        Defragged::Complete { whole, frags } => (whole, frags),
        other => panic!("expected a complete datagram, got {other:?}"),
    }
}

fn valid4(f: &[u8]) -> bool {
    let (s, d) = (u32::from_be_bytes(f[26..30].try_into().unwrap()), u32::from_be_bytes(f[30..34].try_into().unwrap()));
    checksum(&f[14..34]) == 0 && l4_checksum_v4(s, d, f[23], &f[34..]) == 0
}

#[test]
fn ipv4_datagram_rebuilt_from_fragments_in_any_order() {
    let d = Defrag::default();
    let whole = udp4(A, 4000);
    let frags = frag4(&whole, 1480, 0x1234);
    assert_eq!(frags.len(), 3);
    assert_eq!(fragment_offset(&frags[1]), Some((1480, true)));
    // Last first, then first, then middle.
    assert!(matches!(d.handle(&frags[2], 0, 0), Defragged::Held));
    assert!(matches!(d.handle(&frags[0], 0, 1), Defragged::Held));
    assert_eq!(d.n_frags(), 2);
    let (rebuilt, got) = complete(d.handle(&frags[1], 0, 2));
    // The original as its sender numbered it (the fragments carry its id).
    let mut expect = whole.clone();
    expect[18..20].copy_from_slice(&0x1234u16.to_be_bytes());
    expect[24..26].copy_from_slice(&[0, 0]);
    let c = checksum(&expect[14..34]);
    expect[24..26].copy_from_slice(&c.to_be_bytes());
    assert!(rebuilt == expect, "the rebuilt datagram is the original, byte for byte");
    assert!(got == frags, "the fragments come back in offset order, unchanged");
    assert_eq!(d.n_frags(), 0);
    assert_eq!(d.v4.counters.accepted.load(Relaxed), 3);
    assert_eq!(d.v4.counters.completed.load(Relaxed), 3);
    // Same id in another zone, or from another source, is another datagram.
    let other = frag4(&udp4(X, 4000), 1480, 0x1234);
    assert!(matches!(d.handle(&frags[0], 0, 3), Defragged::Held));
    assert!(matches!(d.handle(&other[1], 0, 3), Defragged::Held));
    assert!(matches!(d.handle(&frags[1], 7, 3), Defragged::Held));
    assert_eq!(d.n_frags(), 3);
    // Not a fragment: passed through untouched.
    assert!(matches!(d.handle(&whole, 0, 4), Defragged::NotFragment));
}

#[test]
fn ipv6_datagram_rebuilt_from_fragments() {
    let d = Defrag::default();
    let whole = udp6(3000);
    let frags = frag6(&whole, 1448, 0xdead_beef);
    assert_eq!(frags.len(), 3);
    assert!(matches!(d.handle(&frags[1], 0, 0), Defragged::Held));
    assert!(matches!(d.handle(&frags[2], 0, 0), Defragged::Held));
    let (rebuilt, got) = complete(d.handle(&frags[0], 0, 0));
    assert!(rebuilt == whole, "the rebuilt datagram is the original, byte for byte");
    assert!(got == frags, "the fragments come back in offset order, unchanged");
    assert_eq!(d.v6.counters.completed.load(Relaxed), 3);
    let ok = l4_checksum_v6(A6, B6, 17, &rebuilt[54..]) == 0;
    assert!(ok, "the rebuilt datagram's UDP checksum holds");
}

#[test]
fn overlaps_tiny_fragments_the_cap_and_the_timeout() {
    let d = Defrag::default();
    let whole = udp4(A, 4000);
    let frags = frag4(&whole, 1480, 1);
    assert!(matches!(d.handle(&frags[0], 0, 0), Defragged::Held));
    // The same fragment again overlaps itself.
    assert!(matches!(d.handle(&frags[0], 0, 0), Defragged::Dropped("overlapping fragment")));
    // A fragment cut at another boundary overlaps the first.
    let shifted = frag4(&whole, 1200, 1);
    assert!(matches!(d.handle(&shifted[1], 0, 0), Defragged::Dropped("overlapping fragment")));
    assert_eq!(d.v4.counters.overlapped.load(Relaxed), 2);
    // Non-final fragments below the minimum size (1200 with the header).
    let small = frag4(&udp4(A, 600), 400, 2);
    assert!(matches!(d.handle(&small[0], 0, 0), Defragged::Dropped("fragment too small")));
    assert_eq!(d.v4.counters.too_small.load(Relaxed), 1);
    d.v4.min_frag.store(400, Relaxed);
    assert!(matches!(d.handle(&small[0], 0, 0), Defragged::Held));
    // The global cap.
    d.max_frags.store(3, Relaxed);
    assert!(matches!(d.handle(&frags[1], 0, 0), Defragged::Held));
    assert_eq!(d.n_frags(), 3);
    assert!(matches!(d.handle(&small[1], 0, 0), Defragged::Dropped("too many fragments held")));
    assert_eq!(d.v4.counters.purged.load(Relaxed), 1);
    // 15 s after their first fragment, incomplete datagrams are forgotten.
    assert_eq!(d.sweep(14_999), 0);
    assert_eq!(d.sweep(15_000), 3);
    assert_eq!(d.n_frags(), 0);
    assert_eq!(d.v4.counters.expired.load(Relaxed), 3);
    let status = d.status();
    assert!(status.contains("v4 frags expired: 3"), "{status}");
    assert!(status.contains("num frag: 0"), "{status}");
}

#[test]
fn malformed_fragments_are_dropped() {
    let d = Defrag::default();
    let mut bad = frag4(&udp4(A, 4000), 1480, 3)[0].clone();
    bad[24] ^= 0xff;
    assert!(matches!(d.handle(&bad, 0, 0), Defragged::Dropped("bad checksum")));
    let mut short = frag4(&udp4(A, 4000), 1480, 3)[0].clone();
    short.truncate(100);
    assert!(matches!(d.handle(&short, 0, 0), Defragged::Dropped("truncated")));
    // A non-final fragment whose length is not a multiple of 8.
    let odd = frag4(&udp4(A, 4000), 1481, 4);
    assert!(matches!(d.handle(&odd[0], 0, 0), Defragged::Dropped("fragment too small")));
    assert_eq!(d.n_frags(), 0);
}

#[test]
fn snat_of_the_datagram_is_carried_onto_its_fragments() {
    let ct = Conntrack::new(Config::default());
    let whole = udp4(A, 4000);
    let frags = frag4(&whole, 1480, 77);
    let mut rebuilt = None;
    for f in &frags {
        if let Defragged::Complete { whole, frags } = ct.defrag.handle(f, 0, 0) {
            rebuilt = Some((whole, frags));
        }
    }
    let (mut w, mut fr) = rebuilt.expect("complete");
    let nat = Nat::Src(NatRange {
        addr_min: X as u128,
        addr_max: X as u128,
        port_min: 0,
        port_max: 0,
        v6: false,
        flags: NatFlags::default(),
    });
    let act = CtAction { commit: true, nat: Some(nat), ..CtAction::default() };
    let r = ct.execute(&mut w, &act, 0, None);
    assert_eq!(r.state & (cs::NEW | cs::SNAT | cs::TRK), cs::NEW | cs::SNAT | cs::TRK, "{:#x}", r.state);
    assert!(valid4(&w), "the translated datagram is valid");
    for f in fr.iter_mut() {
        apply_translation(&w, f);
        assert_eq!(u32::from_be_bytes(f[26..30].try_into().unwrap()), X, "every fragment carries the new source");
        assert_eq!(checksum(&f[14..34]), 0, "and a valid IP header checksum");
    }
    // What a receiver reassembles from the translated fragments is the
    // translated datagram, with a valid UDP checksum.
    let d = Defrag::default();
    let mut out = None;
    for f in &fr {
        if let Defragged::Complete { whole, .. } = d.handle(f, 0, 0) {
            out = Some(whole);
        }
    }
    let out = out.expect("complete");
    assert!(out == w, "the receiver gets the translated datagram");
    assert!(valid4(&out));
}
