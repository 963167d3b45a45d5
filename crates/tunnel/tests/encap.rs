//! Encapsulation and decapsulation on crafted frames.
//!
//! Plan: an inner Ethernet/IPv4/UDP frame is pushed through each tunnel
//! kind (IPv4 and IPv6 underlay, with and without outer checksums, with
//! Geneve options and VXLAN GBP), popped back, and the metadata and inner
//! bytes compared; then every way an outer header can be wrong is fed to
//! `pop` and must be refused with its reason, never a panic.

use proptest::prelude::*;
use tunnel::encap::{flags, overhead, pop, push, udp_src_port, Template};
use tunnel::{DecapError, EncapSpec, Kind, Listen, TunnelMeta};
use wire::build::Frame;
use wire::checksum::{checksum, l4_checksum_v4};

fn inner() -> Vec<u8> {
    Frame::new([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4(0x0a00_0001, 0x0a00_0002)
        .udp(1000, 2000)
        .payload(b"inner")
        .build()
}

fn spec(kind: Kind, csum: bool) -> EncapSpec {
    EncapSpec {
        kind,
        eth_src: [0xaa, 0, 0, 0, 0, 1],
        eth_dst: [0xaa, 0, 0, 0, 0, 2],
        dst_port: kind.default_port(),
        csum,
    }
}

fn meta(v6: bool) -> TunnelMeta {
    let (src, dst) = if v6 { (0xfd00 << 112 | 1, 0xfd00 << 112 | 2) } else { (0xc0a8_0001, 0xc0a8_0002) };
    TunnelMeta {
        tun_id: 0x1234,
        src,
        dst,
        v6,
        tos: 0,
        ttl: 64,
        flags: flags::DF | flags::KEY,
        tp_src: udp_src_port(0xdead_beef),
        ..TunnelMeta::default()
    }
}

fn listen() -> Listen {
    Listen { udp: vec![(6081, Kind::Geneve), (4789, Kind::Vxlan)], gre: true }
}

/// Every kind over IPv4 and IPv6, with and without checksums, with the
/// metadata each carries: a Geneve option, VXLAN group policy.
fn every_case() -> Vec<(Kind, bool, bool, TunnelMeta)> {
    let mut v = Vec::new();
    for kind in [Kind::Geneve, Kind::Vxlan, Kind::Gre] {
        for v6 in [false, true] {
            for csum in [false, true] {
                let mut m = meta(v6);
                if kind == Kind::Geneve {
                    // OVN's option: class 0x0102, type 0x80, 4 bytes.
                    m.geneve_opts = vec![0x01, 0x02, 0x80, 0x01, 0, 0, 0x12, 0x34];
                }
                if kind == Kind::Vxlan {
                    m.gbp_id = 0x77;
                    m.gbp_flags = 0x08;
                }
                v.push((kind, v6, csum, m));
            }
        }
    }
    v
}

#[test]
fn roundtrip_every_kind() {
    for (kind, v6, csum, m) in every_case() {
        let mut out = Vec::new();
        push(&spec(kind, csum), &m, &inner(), 7, &mut out);
        assert_eq!(out.len(), overhead(&spec(kind, csum), &m) + inner().len(), "{kind:?} v6={v6}");
        if !v6 {
            assert_eq!(checksum(&out[14..34]), 0, "outer IPv4 header checksum");
            assert_eq!(out[20] & 0x40, 0x40, "DF");
        }
        let d = pop(&out, &listen()).unwrap_or_else(|e| panic!("{kind:?} v6={v6} csum={csum}: {e:?}"));
        assert_eq!(d.kind, kind);
        assert_eq!(&out[d.inner..d.end], &inner()[..]);
        assert_eq!(d.meta.tun_id, if kind == Kind::Gre { 0x1234 } else { 0x1234 & 0xff_ffff });
        assert_eq!((d.meta.src, d.meta.dst, d.meta.ttl), (m.src, m.dst, 64));
        // Over IPv6 a UDP tunnel always carries its checksum (a zero
        // one is refused by receivers that do not opt in; OVS
        // computes it too); GRE follows the option.
        let want = csum || (v6 && kind != Kind::Gre);
        assert_eq!(d.meta.flags & flags::CSUM != 0, want, "{kind:?} v6={v6} csum flag");
        if kind == Kind::Geneve {
            assert_eq!(d.meta.geneve_opts, m.geneve_opts);
            assert_eq!(d.meta.tp_dst, 6081);
        }
        if kind == Kind::Vxlan {
            assert_eq!((d.meta.gbp_id, d.meta.gbp_flags), (0x77, 0x08));
        }
    }
}

/// A prebuilt header written per frame gives the very bytes `push` builds
/// from scratch, whatever the per-frame fields and the inner length.
#[test]
fn template_writes_what_push_builds() {
    for (kind, v6, csum, m) in every_case() {
        // Built with other per-frame fields than it is written with.
        let t = Template::new(spec(kind, csum), TunnelMeta { tp_src: 1, tos: 0xfc, ttl: 1, ..m.clone() });
        for (i, payload) in [&b"x"[..], &[7u8; 1400][..]].iter().enumerate() {
            let inner = Frame::new([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
                .ipv4(0x0a00_0001, 0x0a00_0002)
                .udp(1000, 2000)
                .payload(payload)
                .build();
            let m = TunnelMeta { tp_src: 40000 + i as u16, tos: 0x10 * i as u8, ttl: 9 + i as u8, ..m.clone() };
            let mut want = Vec::new();
            push(&spec(kind, csum), &m, &inner, 300 + i as u16, &mut want);
            let mut got = vec![0xee; t.len()];
            got.extend_from_slice(&inner);
            t.write(&mut got, 300 + i as u16, m.tp_src, m.tos, m.ttl);
            assert_eq!(got, want, "{kind:?} v6={v6} csum={csum} inner={}", inner.len());
        }
    }
}

/// The IPv4 checksum a template finishes from its per-frame fields (not
/// by reading the header back) holds at the edges of every field, where
/// the one's-complement carries fold.
#[test]
fn template_checksum_holds_for_every_edge_of_the_per_frame_fields() {
    for (kind, v6, csum, m) in every_case() {
        let t = Template::new(spec(kind, csum), m.clone());
        for (id, tos, ttl, len) in [0u16, 1, 0x7fff, 0xfffe, 0xffff]
            .into_iter()
            .flat_map(|id| [0u8, 0x10, 0xfc, 0xff].map(move |tos| (id, tos)))
            .flat_map(|(id, tos)| [0u8, 1, 64, 255].map(move |ttl| (id, tos, ttl)))
            .flat_map(|(id, tos, ttl)| [1usize, 1400, 8000].map(move |len| (id, tos, ttl, len)))
        {
            let inner = Frame::new([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
                .ipv4(0x0a00_0001, 0x0a00_0002)
                .udp(1000, 2000)
                .payload(&vec![3u8; len])
                .build();
            let m = TunnelMeta { tp_src: 50000, tos, ttl, ..m.clone() };
            let mut want = Vec::new();
            push(&spec(kind, csum), &m, &inner, id, &mut want);
            let mut got = vec![0; t.len()];
            got.extend_from_slice(&inner);
            t.write(&mut got, id, m.tp_src, tos, ttl);
            assert_eq!(got[..t.len()], want[..t.len()], "{kind:?} v6={v6} id={id} tos={tos} ttl={ttl} len={len}");
            if !v6 {
                assert_eq!(wire::checksum::checksum(&got[14..34]), 0, "a valid header sums to zero");
            }
        }
    }
}

#[test]
fn udp_source_port_spreads_over_the_ephemeral_range() {
    let ports: std::collections::BTreeSet<u16> =
        (0..1000u32).map(|i| udp_src_port(i.wrapping_mul(0x9e37_79b9))).collect();
    assert!(ports.iter().all(|p| (32768..61000).contains(p)));
    assert!(ports.len() > 900, "distinct flows get distinct ports: {}", ports.len());
}

#[test]
fn vxlan_frame_bytes_match_the_rfc_layout() {
    let mut out = Vec::new();
    let m = TunnelMeta { tun_id: 100, ..meta(false) };
    push(&spec(Kind::Vxlan, false), &m, &inner(), 1, &mut out);
    // Outer UDP to 4789, checksum 0 (none), VXLAN flags 0x08, VNI 100.
    assert_eq!(&out[36..38], &4789u16.to_be_bytes());
    assert_eq!(&out[40..42], &[0, 0]);
    assert_eq!(&out[42..50], &[0x08, 0, 0, 0, 0, 0, 100, 0]);
    // The UDP length covers VXLAN + inner.
    assert_eq!(u16::from_be_bytes([out[38], out[39]]) as usize, 8 + 8 + inner().len());
}

fn geneve_frame() -> Vec<u8> {
    let mut m = meta(false);
    m.geneve_opts = vec![0x01, 0x02, 0x80, 0x01, 0, 0, 0, 5];
    let mut out = Vec::new();
    push(&spec(Kind::Geneve, true), &m, &inner(), 1, &mut out);
    out
}

/// Recomputes the outer UDP checksum after a test edits the frame.
fn refix(f: &mut [u8]) {
    f[40..42].copy_from_slice(&[0, 0]);
    let c = l4_checksum_v4(0xc0a8_0001, 0xc0a8_0002, 17, &f[34..]);
    f[40..42].copy_from_slice(&c.to_be_bytes());
}

#[test]
fn malformed_encapsulations_are_refused_by_reason() {
    let good = geneve_frame();
    assert!(pop(&good, &listen()).is_ok());
    // Truncated anywhere: never accepted, never a panic.
    for cut in 0..good.len() - 1 {
        assert!(pop(&good[..cut], &listen()).is_err(), "cut at {cut}");
    }
    // Wrong UDP port.
    let mut f = good.clone();
    f[36..38].copy_from_slice(&9999u16.to_be_bytes());
    refix(&mut f);
    assert_eq!(pop(&f, &listen()), Err(DecapError::NotTunnel));
    // Option length that overruns the header (opt_len 63 words).
    let mut f = good.clone();
    f[42] = 0x3f;
    refix(&mut f);
    assert_eq!(pop(&f, &listen()), Err(DecapError::BadOptions));
    // An option whose own length does not tile the area.
    let mut f = good.clone();
    f[53] = 0x02;
    refix(&mut f);
    assert_eq!(pop(&f, &listen()), Err(DecapError::BadOptions));
    // Version 1.
    let mut f = good.clone();
    f[42] |= 0x40;
    refix(&mut f);
    assert_eq!(pop(&f, &listen()), Err(DecapError::BadVersion));
    // Not Ethernet inside.
    let mut f = good.clone();
    f[44..46].copy_from_slice(&0x0800u16.to_be_bytes());
    refix(&mut f);
    assert_eq!(pop(&f, &listen()), Err(DecapError::BadProtocol));
    // A corrupted payload byte fails the outer checksum.
    let mut f = good.clone();
    let n = f.len();
    f[n - 1] ^= 1;
    assert_eq!(pop(&f, &listen()), Err(DecapError::BadChecksum));
    // An outer checksum a local sender left to offload (the pseudo-header
    // sum alone) is accepted, with the inner frame intact; one bit off it
    // is a bad checksum.
    let mut f = good.clone();
    let partial = wire::checksum::partial_v4(0xc0a8_0001, 0xc0a8_0002, 17, f.len() - 34);
    f[40..42].copy_from_slice(&partial.to_be_bytes());
    let d = pop(&f, &listen()).expect("a partial outer checksum is accepted");
    let g = pop(&good, &listen()).unwrap();
    assert_eq!((d.inner, d.end, d.meta.tun_id), (g.inner, g.end, g.meta.tun_id));
    assert_eq!(&f[d.inner..d.end], &good[g.inner..g.end]);
    f[40..42].copy_from_slice(&(partial ^ 1).to_be_bytes());
    assert_eq!(pop(&f, &listen()), Err(DecapError::BadChecksum));
    // VXLAN without the I flag.
    let mut v = Vec::new();
    push(&spec(Kind::Vxlan, false), &meta(false), &inner(), 1, &mut v);
    v[42] = 0;
    assert_eq!(pop(&v, &listen()), Err(DecapError::NoVni));
    // A fragment of the outer datagram.
    let mut f = good.clone();
    f[20] |= 0x20;
    let c = {
        f[24..26].copy_from_slice(&[0, 0]);
        checksum(&f[14..34])
    };
    f[24..26].copy_from_slice(&c.to_be_bytes());
    assert_eq!(pop(&f, &listen()), Err(DecapError::Fragment));
    // GRE with a reserved version.
    let mut g = Vec::new();
    push(&spec(Kind::Gre, false), &meta(false), &inner(), 1, &mut g);
    assert!(pop(&g, &listen()).is_ok());
    g[35] |= 1;
    assert_eq!(pop(&g, &listen()), Err(DecapError::BadVersion));
    // GRE when no GRE port is configured.
    let mut g = Vec::new();
    push(&spec(Kind::Gre, false), &meta(false), &inner(), 1, &mut g);
    assert_eq!(pop(&g, &Listen { udp: vec![], gre: false }), Err(DecapError::NotTunnel));
}

proptest! {
    #[test]
    fn pop_never_panics_and_accepted_inner_fits(bytes in proptest::collection::vec(any::<u8>(), 0..200), at in 0usize..120, val in any::<u8>()) {
        let _ = pop(&bytes, &listen());
        let mut f = geneve_frame();
        let i = at % f.len();
        f[i] = val;
        if let Ok(d) = pop(&f, &listen()) {
            prop_assert!(d.inner + 14 <= d.end && d.end <= f.len());
        }
    }
}
