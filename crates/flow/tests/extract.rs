//! Extraction of every supported protocol from frames built by `wire`,
//! and robustness: no input makes `extract` panic.

use flow::key::{ethertype, FRAG_ANY, FRAG_LATER, VLAN_PRESENT};
use flow::{extract, ParseError};
use proptest::prelude::*;
use wire::build::{Frame, L3, L4};

const A: [u8; 6] = [2, 0, 0, 0, 0, 1];
const B: [u8; 6] = [2, 0, 0, 0, 0, 2];
const V6A: u128 = 0x2001_0db8_0000_0000_0000_0000_0000_0001;
const V6B: u128 = 0x2001_0db8_0000_0000_0000_0000_0000_0002;

fn frames() -> Vec<Vec<u8>> {
    let v4 = || L3::ipv4(0x0a00_0001, 0x0a00_0002);
    vec![
        Frame::new(A, B).l3(v4()).l4(L4::Udp { src: 1, dst: 2 }).build(),
        Frame::new(A, B).vlan(0x88a8, 5).vlan(0x8100, 7).l3(v4()).l4(L4::Tcp { src: 3, dst: 4, flags: 0x12 }).build(),
        Frame::new(A, B).l3(v4()).l4(L4::Sctp { src: 5, dst: 6 }).build(),
        Frame::new(A, B).l3(v4()).l4(L4::IcmpEcho { id: 1, seq: 2 }).build(),
        Frame::new(A, B).l3(L3::Arp { op: 1, sha: A, spa: 0x0a00_0001, tha: [0; 6], tpa: 0x0a00_0002 }).build(),
        Frame::new(A, B)
            .l3(L3::Ipv6 { src: V6A, dst: V6B, hlimit: 64, tclass: 0, label: 0, ext: vec![0, 60], frag: None })
            .l4(L4::Tcp { src: 7, dst: 8, flags: 2 })
            .build(),
        Frame::new(A, B).l3(L3::ipv6(V6A, V6B)).l4(L4::NdNs { target: V6B, sll: Some(A) }).build(),
        Frame::new(A, B).l3(L3::ipv6(V6A, V6B)).l4(L4::NdNa { target: V6A, tll: Some(B) }).build(),
        Frame::new(A, B)
            .l3(L3::Ipv4 {
                src: 0x0a00_0001,
                dst: 0x0a00_0002,
                ttl: 64,
                tos: 0,
                options: vec![1, 1, 1, 1],
                frag: (false, 0),
            })
            .l4(L4::Udp { src: 9, dst: 10 })
            .build(),
        Frame::new(A, B)
            .l3(L3::Ipv4 { src: 0x0a00_0001, dst: 0x0a00_0002, ttl: 64, tos: 0, options: vec![], frag: (true, 0) })
            .l4(L4::Udp { src: 11, dst: 12 })
            .build(),
        Frame::new(A, B)
            .l3(L3::Ipv6 { src: V6A, dst: V6B, hlimit: 64, tclass: 0, label: 0, ext: vec![], frag: Some((false, 10)) })
            .l4(L4::Raw(17))
            .build(),
    ]
}

#[test]
fn every_protocol() {
    let f = frames();
    let (k, l, e) = extract(&f[0], 1);
    assert_eq!(e, None);
    assert_eq!((k.dl_src(), k.dl_dst(), k.dl_type()), (0x0200_0000_0001, 0x0200_0000_0002, ethertype::IPV4));
    assert_eq!((k.nw_proto(), k.tp_src(), k.tp_dst(), k.nw_ttl()), (17, 1, 2, 64));
    assert_eq!((l.l3, l.l4), (14, 34));

    let (k, l, e) = extract(&f[1], 1);
    assert_eq!(e, None);
    assert_eq!((k.vlan_tci(), k.vlan_tci2()), (VLAN_PRESENT | 5, VLAN_PRESENT | 7));
    assert_eq!((k.nw_proto(), k.tp_src(), k.tp_dst(), k.tcp_flags()), (6, 3, 4, 0x12));
    assert_eq!(l.l3, 22);

    let (k, _, _) = extract(&f[2], 1);
    assert_eq!((k.nw_proto(), k.tp_src(), k.tp_dst()), (132, 5, 6));
    let (k, _, _) = extract(&f[3], 1);
    assert_eq!((k.nw_proto(), k.tp_src(), k.tp_dst()), (1, 8, 0));

    let (k, _, _) = extract(&f[4], 1);
    assert_eq!((k.dl_type(), k.nw_proto(), k.nw_src(), k.nw_dst()), (ethertype::ARP, 1, 0x0a00_0001, 0x0a00_0002));
    assert_eq!(k.arp_sha(), 0x0200_0000_0001);

    let (k, l, e) = extract(&f[5], 1);
    assert_eq!(e, None);
    assert_eq!((k.ipv6_src(), k.ipv6_dst(), k.nw_proto(), k.tp_dst()), (V6A, V6B, 6, 8));
    assert_eq!(l.l4, 14 + 40 + 16);

    let (k, _, e) = extract(&f[6], 1);
    assert_eq!(e, None);
    assert_eq!((k.tp_src(), k.nd_target(), k.arp_sha(), k.arp_tha()), (135, V6B, 0x0200_0000_0001, 0));
    let (k, _, _) = extract(&f[7], 1);
    assert_eq!((k.tp_src(), k.nd_target(), k.arp_tha()), (136, V6A, 0x0200_0000_0002));

    let (k, l, _) = extract(&f[8], 1);
    assert_eq!((l.l4, k.tp_src()), (38, 9), "IPv4 options skipped");
    let (k, _, _) = extract(&f[9], 1);
    assert_eq!((k.nw_frag(), k.tp_src()), (FRAG_ANY, 11), "first fragment keeps L4");
    let (k, _, e) = extract(&f[10], 1);
    assert_eq!((k.nw_frag(), k.nw_proto(), k.tp_src(), e), (FRAG_ANY | FRAG_LATER, 17, 0, None));
}

#[test]
fn truncations_name_their_reason() {
    let f = frames();
    let cut = |i: usize, n: usize| extract(&f[i][..n], 1).2;
    assert_eq!(cut(0, 10), Some(ParseError::Runt));
    assert_eq!(cut(1, 16), Some(ParseError::TruncatedVlan));
    assert_eq!(cut(4, 30), Some(ParseError::TruncatedArp));
    assert_eq!(cut(0, 20), Some(ParseError::TruncatedIpv4));
    assert_eq!(cut(5, 40), Some(ParseError::TruncatedIpv6));
    assert_eq!(cut(3, 35), Some(ParseError::BadIpv4TotalLen));
}

proptest! {
    #[test]
    fn never_panics_on_any_bytes(bytes in prop::collection::vec(any::<u8>(), 0..200), port in any::<u32>()) {
        let (k, _, _) = extract(&bytes, port);
        prop_assert_eq!(k.in_port(), port);
    }

    #[test]
    fn never_panics_on_damaged_frames(i in 0usize..11, cut in 0usize..200, flips in prop::collection::vec((0usize..200, any::<u8>()), 0..6)) {
        let mut f = frames()[i].clone();
        for (pos, x) in flips {
            if pos < f.len() {
                f[pos] ^= x;
            }
        }
        f.truncate(cut.min(f.len()));
        let _ = extract(&f, 1);
    }
}
