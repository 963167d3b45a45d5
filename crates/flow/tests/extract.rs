//! Extraction of every supported protocol from frames built by `wire`
//! (whole keys compared, so no stray field can be set), every drop reason,
//! and robustness: no input makes `extract` panic.

use flow::extract::{extract_into, Layout};
use flow::key::{ethertype, ipproto, FlowKey, FRAG_ANY, FRAG_LATER, VLAN_PRESENT};
use flow::{extract, ParseError};
use proptest::prelude::*;
use wire::build::{Frame, PacketBuilder};

const A: [u8; 6] = [0x02, 0x11, 0x22, 0x33, 0x44, 0x01];
const B: [u8; 6] = [0x02, 0x11, 0x22, 0x33, 0x44, 0x02];
const A_NUM: u64 = 0x0211_2233_4401;
const B_NUM: u64 = 0x0211_2233_4402;
const IP_A: u32 = 0x0a00_0001;
const IP_B: u32 = 0xc0a8_0102;
const V6A: u128 = 0x2001_0db8_0000_0000_0000_0000_0000_0001;
const V6B: u128 = 0xfe80_0000_0000_0000_0211_22ff_fe33_4402;
const PORT: u32 = 7;

fn eth() -> Frame {
    PacketBuilder::default().eth(A, B)
}

/// The key every frame from `eth()` starts with, then `f` fills the rest.
fn key(dl_type: u16, f: impl FnOnce(&mut FlowKey)) -> FlowKey {
    let mut k = FlowKey::ZERO;
    k.set_in_port(PORT);
    k.set_dl_src(A_NUM);
    k.set_dl_dst(B_NUM);
    k.set_dl_type(dl_type);
    f(&mut k);
    k
}

fn v4(k: &mut FlowKey, proto: u8) {
    k.set_nw_src(IP_A);
    k.set_nw_dst(IP_B);
    k.set_nw_proto(proto);
    k.set_nw_ttl(64);
}

fn v6(k: &mut FlowKey, proto: u8) {
    k.set_ipv6_src(V6A);
    k.set_ipv6_dst(V6B);
    k.set_nw_proto(proto);
    k.set_nw_ttl(64);
}

fn layout(l3: u16, l4: u16, payload: u16) -> Layout {
    Layout { l3, l4, payload }
}

/// Extracts `f` and checks the whole key and layout, and that it parsed
/// cleanly; also that reusing a dirty key gives the same result.
#[track_caller]
fn check(f: &[u8], want: FlowKey, want_l: Layout) {
    let (k, l, e) = extract(f, PORT);
    assert_eq!(e, None, "unexpected error");
    assert_eq!(k, want);
    assert_eq!(l, want_l);
    let mut dirty = FlowKey::ALL_ONES;
    assert_eq!(extract_into(f, PORT, &mut dirty), (l, None));
    assert_eq!(dirty, k);
}

/// Extracts `f`, expecting error `e` and the key so far.
#[track_caller]
fn check_err(f: &[u8], e: ParseError, want: FlowKey) {
    let (k, _, got) = extract(f, PORT);
    assert_eq!(got, Some(e), "error");
    assert_eq!(k, want, "key so far");
}

#[track_caller]
fn err_of(f: &[u8]) -> Option<ParseError> {
    extract(f, PORT).2
}

// ---- L2 --------------------------------------------------------------------

#[test]
fn runt_and_minimal_ethernet() {
    let f = eth().ethertype(0x88b5).build();
    assert_eq!(f.len(), 14);
    check(&f, key(0x88b5, |_| {}), layout(14, 0, 0));
    let mut port_only = FlowKey::ZERO;
    port_only.set_in_port(PORT);
    for n in 0..14 {
        check_err(&f[..n], ParseError::Runt, port_only);
    }
}

#[test]
fn ieee_802_3_length_field() {
    let f = eth().ethertype(0x002e).payload(&[0xaa, 0xaa, 3, 0, 0, 0, 0x08, 0x00]).build();
    check(&f, key(ethertype::NONE, |_| {}), layout(0, 0, 0));
    // 0x05ff is still a length, 0x0600 the first Ethertype.
    check(&eth().ethertype(0x05ff).build(), key(ethertype::NONE, |_| {}), layout(0, 0, 0));
    check(&eth().ethertype(0x0600).build(), key(0x0600, |_| {}), layout(14, 0, 0));
}

#[test]
fn single_vlan_tag() {
    let f = eth().vlan(0x8100, 0x2005).ipv4(IP_A, IP_B).udp(1, 2).build();
    let want = key(ethertype::IPV4, |k| {
        k.set_vlan_tci(0x2005 | VLAN_PRESENT);
        v4(k, ipproto::UDP);
        k.set_tp_src(1);
        k.set_tp_dst(2);
    });
    check(&f, want, layout(18, 38, 46));
    // 802.1ad TPID alone is a tag too.
    let f = eth().vlan(0x88a8, 0xe00a).ethertype(0x88cc).build();
    check(&f, key(0x88cc, |k| k.set_vlan_tci(0xe00a | VLAN_PRESENT)), layout(18, 0, 0));
    // A tag over an 802.3 frame.
    let f = eth().vlan(0x8100, 3).ethertype(0x0040).payload(&[0; 8]).build();
    check(&f, key(ethertype::NONE, |k| k.set_vlan_tci(3 | VLAN_PRESENT)), layout(0, 0, 0));
}

#[test]
fn double_vlan_tag() {
    let f = eth().vlan(0x88a8, 100).vlan(0x8100, 0xa0c8).ipv6(V6A, V6B).tcp(3, 4, 0x12).build();
    let want = key(ethertype::IPV6, |k| {
        k.set_vlan_tci(100 | VLAN_PRESENT);
        k.set_vlan_tci2(0xa0c8 | VLAN_PRESENT);
        v6(k, ipproto::TCP);
        k.set_tp_src(3);
        k.set_tp_dst(4);
        k.set_tcp_flags(0x12);
    });
    check(&f, want, layout(22, 62, 82));
}

#[test]
fn third_vlan_tag_stops_parsing() {
    let f = eth().vlan(0x88a8, 1).vlan(0x8100, 2).vlan(0x8100, 3).ipv4(IP_A, IP_B).udp(1, 2).build();
    let want = key(ethertype::VLAN, |k| {
        k.set_vlan_tci(1 | VLAN_PRESENT);
        k.set_vlan_tci2(2 | VLAN_PRESENT);
    });
    check(&f, want, layout(22, 0, 0));
}

#[test]
fn truncated_vlan() {
    let f = eth().vlan(0x8100, 5).vlan(0x8100, 6).ethertype(0x0800).build();
    for n in 14..18 {
        check_err(&f[..n], ParseError::TruncatedVlan, key(ethertype::VLAN, |_| {}));
    }
    for n in 18..22 {
        check_err(&f[..n], ParseError::TruncatedVlan, key(ethertype::VLAN, |k| k.set_vlan_tci(5 | VLAN_PRESENT)));
    }
    assert_eq!(err_of(&f[..22]), Some(ParseError::TruncatedIpv4));
}

// ---- ARP -------------------------------------------------------------------

#[test]
fn arp() {
    for op in [1u16, 2, 0x0103] {
        let f = eth().arp(op, A, IP_A, [0; 6], IP_B).eth_pad_to(60).build();
        let want = key(ethertype::ARP, |k| {
            k.set_nw_proto(op as u8);
            k.set_nw_src(IP_A);
            k.set_nw_dst(IP_B);
            k.set_arp_sha(A_NUM);
        });
        check(&f, want, layout(14, 0, 0));
    }
    let f = eth().arp(2, A, IP_A, B, IP_B).build();
    assert_eq!(f.len(), 42);
    let (k, _, _) = extract(&f, PORT);
    assert_eq!((k.arp_sha(), k.arp_tha()), (A_NUM, B_NUM));
    // Not Ethernet/IPv4: no ARP fields, not an error.
    for (i, v) in [(15usize, 6u8), (17, 0xdd), (18, 8), (19, 16)] {
        let mut g = f.clone();
        g[i] = v;
        check(&g, key(ethertype::ARP, |_| {}), layout(14, 0, 0));
    }
    for n in 14..42 {
        check_err(&f[..n], ParseError::TruncatedArp, key(ethertype::ARP, |_| {}));
    }
}

// ---- IPv4 ------------------------------------------------------------------

#[test]
fn ipv4_udp_fields() {
    let f = eth().ipv4(IP_A, IP_B).ip_ttl(33).ip_tos(0xb9).udp(1000, 53).payload(b"query").build();
    let want = key(ethertype::IPV4, |k| {
        v4(k, ipproto::UDP);
        k.set_nw_ttl(33);
        k.set_nw_tos(0xb9);
        k.set_tp_src(1000);
        k.set_tp_dst(53);
    });
    check(&f, want, layout(14, 34, 42));
    // Ethernet padding after the datagram is ignored.
    let g = eth().ipv4(IP_A, IP_B).ip_ttl(33).ip_tos(0xb9).udp(1000, 53).payload(b"query").eth_pad_to(80).build();
    assert_eq!(g.len(), 80);
    check(&g, want, layout(14, 34, 42));
}

#[test]
fn ipv4_options_skipped() {
    let f = eth().ipv4(IP_A, IP_B).ip_options(&[0x94, 4, 0, 0, 1]).tcp(80, 40000, 0xfff).build();
    let want = key(ethertype::IPV4, |k| {
        v4(k, ipproto::TCP);
        k.set_tp_src(80);
        k.set_tp_dst(40000);
        k.set_tcp_flags(0xfff);
    });
    check(&f, want, layout(14, 42, 62));
    // Maximum IHL (15 words).
    let f = eth().ipv4(IP_A, IP_B).ip_options(&[1; 40]).udp(5, 6).build();
    let (k, l, e) = extract(&f, PORT);
    assert_eq!((e, l, k.tp_src()), (None, layout(14, 74, 82), 5));
}

#[test]
fn ipv4_tcp_with_options_and_flags() {
    let mut f = eth().ipv4(IP_A, IP_B).tcp(1, 2, 0x018).payload(&[0; 12]).build();
    // Data offset 8: 12 bytes of TCP options.
    f[34 + 12] = 0x80;
    let want = key(ethertype::IPV4, |k| {
        v4(k, ipproto::TCP);
        k.set_tp_src(1);
        k.set_tp_dst(2);
        k.set_tcp_flags(0x018);
    });
    check(&f, want, layout(14, 34, 66));
    // The NS bit and the reserved bits are part of the 12 flag bits.
    f[34 + 12] = 0x5f;
    f[34 + 13] = 0xff;
    assert_eq!(extract(&f, PORT).0.tcp_flags(), 0xfff);
}

#[test]
fn ipv4_fragments() {
    // First fragment: flagged, L4 parsed.
    let f = eth().ipv4(IP_A, IP_B).ip_frag(true, 0).udp(11, 12).payload(&[0; 16]).build();
    let want = key(ethertype::IPV4, |k| {
        v4(k, ipproto::UDP);
        k.set_nw_frag(FRAG_ANY);
        k.set_tp_src(11);
        k.set_tp_dst(12);
    });
    check(&f, want, layout(14, 34, 42));
    // Middle and last fragments: no L4 fields, even if the bytes look like
    // a header.
    for more in [true, false] {
        let f = eth().ipv4(IP_A, IP_B).ip_frag(more, 185).udp(11, 12).build();
        let want = key(ethertype::IPV4, |k| {
            v4(k, ipproto::UDP);
            k.set_nw_frag(FRAG_ANY | FRAG_LATER);
        });
        check(&f, want, layout(14, 0, 0));
    }
    // The DF bit is not a fragment.
    let mut f = eth().ipv4(IP_A, IP_B).udp(1, 2).build();
    f[20] = 0x40;
    assert_eq!(extract(&f, PORT).0.nw_frag(), 0);
}

#[test]
fn ipv4_icmp_and_sctp() {
    let f = eth().ipv4(IP_A, IP_B).icmp_echo(0x1234, 1).payload(b"ping").build();
    let want = key(ethertype::IPV4, |k| {
        v4(k, ipproto::ICMP);
        k.set_tp_src(8);
        k.set_tp_dst(0);
    });
    check(&f, want, layout(14, 34, 38));
    // Destination unreachable, port unreachable.
    let mut g = f.clone();
    g[34] = 3;
    g[35] = 3;
    let (k, _, _) = extract(&g, PORT);
    assert_eq!((k.tp_src(), k.tp_dst()), (3, 3));

    let f = eth().ipv4(IP_A, IP_B).sctp(5000, 36412).payload(&[1, 0, 0, 4]).build();
    let want = key(ethertype::IPV4, |k| {
        v4(k, ipproto::SCTP);
        k.set_tp_src(5000);
        k.set_tp_dst(36412);
    });
    check(&f, want, layout(14, 34, 46));
    // Other protocols: L3 only, L4 offset still known.
    let f = eth().ipv4(IP_A, IP_B).l4_raw(47).payload(&[0; 8]).build();
    check(&f, key(ethertype::IPV4, |k| v4(k, 47)), layout(14, 34, 0));
    // ICMPv6 over IPv4 is not ICMP.
    let f = eth().ipv4(IP_A, IP_B).l4_raw(58).payload(&[135, 0, 0, 0]).build();
    check(&f, key(ethertype::IPV4, |k| v4(k, 58)), layout(14, 34, 0));
}

#[test]
fn ipv4_errors() {
    let f = eth().ipv4(IP_A, IP_B).udp(1, 2).build();
    let l2 = key(ethertype::IPV4, |_| {});
    for n in 14..34 {
        check_err(&f[..n], ParseError::TruncatedIpv4, l2);
    }
    for v in [0x00u8, 0x45 ^ 0x10, 0x65, 0xf5] {
        let mut g = f.clone();
        g[14] = v;
        check_err(&g, ParseError::BadIpv4Version, l2);
    }
    for ihl in 0..5u8 {
        let mut g = f.clone();
        g[14] = 0x40 | ihl;
        check_err(&g, ParseError::BadIpv4HeaderLen, l2);
    }
    // IHL past the end of the frame (the frame is 42 bytes: 28 of IP).
    let mut g = f.clone();
    g[14] = 0x48;
    check_err(&g, ParseError::BadIpv4HeaderLen, l2);
    // Total length below the header length, or past the frame.
    for total in [0u16, 19, 43 - 14, 1500] {
        let mut g = f.clone();
        g[16..18].copy_from_slice(&total.to_be_bytes());
        check_err(&g, ParseError::BadIpv4TotalLen, l2);
    }
    for n in 34..42 {
        check_err(&f[..n], ParseError::BadIpv4TotalLen, l2);
    }
}

#[test]
fn l4_errors_over_ipv4() {
    let l3 = |proto| key(ethertype::IPV4, |k| v4(k, proto));
    let raw = |proto: u8, n: usize| eth().ipv4(IP_A, IP_B).l4_raw(proto).payload(&vec![0x50; n]).build();
    check_err(&raw(6, 19), ParseError::TruncatedTcp, l3(6));
    check_err(&raw(17, 7), ParseError::TruncatedUdp, l3(17));
    check_err(&raw(132, 11), ParseError::TruncatedSctp, l3(132));
    check_err(&raw(1, 3), ParseError::TruncatedIcmp, l3(1));
    check_err(&raw(1, 0), ParseError::TruncatedIcmp, l3(1));
    // Truncation is judged against the IPv4 total length, not the frame:
    // padding after a short datagram does not make a header.
    let f = eth().ipv4(IP_A, IP_B).l4_raw(17).payload(&[0; 4]).eth_pad_to(60).build();
    check_err(&f, ParseError::TruncatedUdp, l3(17));
    // Bad TCP data offsets: below 5 words, or past the datagram.
    let f = eth().ipv4(IP_A, IP_B).tcp(1, 2, 2).payload(&[0; 3]).build();
    for doff in [0u8, 1, 4, 6, 15] {
        let mut g = f.clone();
        g[34 + 12] = doff << 4;
        check_err(&g, ParseError::BadTcpDataOffset, l3(6));
    }
}

// ---- IPv6 ------------------------------------------------------------------

#[test]
fn ipv6_udp_fields() {
    let f = eth().ipv6(V6A, V6B).ip_tos(0xa5).ipv6_label(0xabcde).ip_ttl(7).udp(546, 547).payload(&[1; 9]).build();
    let want = key(ethertype::IPV6, |k| {
        v6(k, ipproto::UDP);
        k.set_nw_tos(0xa5);
        k.set_ipv6_label(0xabcde);
        k.set_nw_ttl(7);
        k.set_tp_src(546);
        k.set_tp_dst(547);
    });
    check(&f, want, layout(14, 54, 62));
    // Padding after the payload length is ignored.
    let mut g = f.clone();
    g.extend_from_slice(&[0xff; 7]);
    check(&g, want, layout(14, 54, 62));
}

#[test]
fn ipv6_extension_headers() {
    let f = eth().ipv6(V6A, V6B).ipv6_ext(0).ipv6_ext(43).ipv6_ext(60).ipv6_ext(51).tcp(7, 8, 2).build();
    let want = key(ethertype::IPV6, |k| {
        v6(k, ipproto::TCP);
        k.set_tp_src(7);
        k.set_tp_dst(8);
        k.set_tcp_flags(2);
    });
    check(&f, want, layout(14, 54 + 48, 54 + 48 + 20));
    // A hop-by-hop header of two 8-byte units (Hdr Ext Len 1).
    let mut g = eth().ipv6(V6A, V6B).ipv6_ext(0).udp(1, 2).build();
    g.splice(62..62, [0u8; 8]);
    g[55] = 1;
    let plen = u16::from_be_bytes([g[18], g[19]]) + 8;
    g[18..20].copy_from_slice(&plen.to_be_bytes());
    let want = key(ethertype::IPV6, |k| {
        v6(k, ipproto::UDP);
        k.set_tp_src(1);
        k.set_tp_dst(2);
    });
    check(&g, want, layout(14, 54 + 16, 54 + 24));
    // No next header (59) and ESP (50): the upper-layer protocol, no ports.
    for proto in [59u8, 50] {
        let f = eth().ipv6(V6A, V6B).ipv6_ext(60).l4_raw(proto).payload(&[0; 8]).build();
        check(&f, key(ethertype::IPV6, |k| v6(k, proto)), layout(14, 62, 0));
    }
}

#[test]
fn ipv6_fragments() {
    let f = eth().ipv6(V6A, V6B).ipv6_ext(0).ipv6_frag(true, 0).udp(5, 6).build();
    let want = key(ethertype::IPV6, |k| {
        v6(k, ipproto::UDP);
        k.set_nw_frag(FRAG_ANY);
        k.set_tp_src(5);
        k.set_tp_dst(6);
    });
    check(&f, want, layout(14, 70, 78));
    for more in [true, false] {
        let f = eth().ipv6(V6A, V6B).ip_frag(more, 10).udp(5, 6).build();
        let want = key(ethertype::IPV6, |k| {
            v6(k, ipproto::UDP);
            k.set_nw_frag(FRAG_ANY | FRAG_LATER);
        });
        check(&f, want, layout(14, 0, 0));
    }
    // An atomic fragment (offset 0, no more fragments) is not a fragment.
    let f = eth().ipv6(V6A, V6B).ipv6_frag(false, 0).udp(5, 6).build();
    let want = key(ethertype::IPV6, |k| {
        v6(k, ipproto::UDP);
        k.set_tp_src(5);
        k.set_tp_dst(6);
    });
    check(&f, want, layout(14, 62, 70));
}

#[test]
fn ipv6_tcp_sctp_icmpv6() {
    let f = eth().ipv6(V6A, V6B).tcp(443, 50000, 0x011).build();
    let want = key(ethertype::IPV6, |k| {
        v6(k, ipproto::TCP);
        k.set_tp_src(443);
        k.set_tp_dst(50000);
        k.set_tcp_flags(0x011);
    });
    check(&f, want, layout(14, 54, 74));
    let f = eth().ipv6(V6A, V6B).sctp(9, 10).build();
    let want = key(ethertype::IPV6, |k| {
        v6(k, ipproto::SCTP);
        k.set_tp_src(9);
        k.set_tp_dst(10);
    });
    check(&f, want, layout(14, 54, 66));
    let f = eth().ipv6(V6A, V6B).icmpv6_echo(1, 2).build();
    let want = key(ethertype::IPV6, |k| {
        v6(k, ipproto::ICMPV6);
        k.set_tp_src(128);
    });
    check(&f, want, layout(14, 54, 58));
    // ICMPv4's protocol number over IPv6 is not parsed.
    let f = eth().ipv6(V6A, V6B).l4_raw(1).payload(&[8, 0, 0, 0]).build();
    check(&f, key(ethertype::IPV6, |k| v6(k, 1)), layout(14, 54, 0));
}

#[test]
fn neighbour_discovery() {
    let f = eth().ipv6(V6A, V6B).ip_ttl(255).nd_ns(V6B, Some(A)).build();
    let want = key(ethertype::IPV6, |k| {
        v6(k, ipproto::ICMPV6);
        k.set_nw_ttl(255);
        k.set_tp_src(135);
        k.set_nd_target(V6B);
        k.set_arp_sha(A_NUM);
    });
    check(&f, want, layout(14, 54, 58));
    let f = eth().ipv6(V6A, V6B).nd_ns(V6B, None).build();
    let want_ns = key(ethertype::IPV6, |k| {
        v6(k, ipproto::ICMPV6);
        k.set_tp_src(135);
        k.set_nd_target(V6B);
    });
    check(&f, want_ns, layout(14, 54, 58));
    let f = eth().ipv6(V6A, V6B).nd_na(V6A, Some(B)).build();
    let want_na = key(ethertype::IPV6, |k| {
        v6(k, ipproto::ICMPV6);
        k.set_tp_src(136);
        k.set_nd_target(V6A);
        k.set_arp_tha(B_NUM);
    });
    check(&f, want_na, layout(14, 54, 58));
    // A TLL option in an NS (and an SLL in an NA) is ignored; unknown
    // options are skipped.
    let mut g = eth().ipv6(V6A, V6B).nd_ns(V6B, Some(A)).build();
    g[54 + 24] = 2;
    check(&g, want_ns, layout(14, 54, 58));
    let mut g = eth().ipv6(V6A, V6B).nd_na(V6A, Some(B)).payload(&[14, 1, 0, 0, 0, 0, 0, 0]).build();
    g[54 + 24] = 1;
    let want = key(ethertype::IPV6, |k| {
        v6(k, ipproto::ICMPV6);
        k.set_tp_src(136);
        k.set_nd_target(V6A);
    });
    check(&g, want, layout(14, 54, 58));
    // A non-zero code: plain ICMPv6, no ND fields.
    let mut g = eth().ipv6(V6A, V6B).nd_ns(V6B, Some(A)).build();
    g[55] = 1;
    let want = key(ethertype::IPV6, |k| {
        v6(k, ipproto::ICMPV6);
        k.set_tp_src(135);
        k.set_tp_dst(1);
    });
    check(&g, want, layout(14, 54, 58));
}

#[test]
fn ipv6_errors() {
    let f = eth().ipv6(V6A, V6B).udp(1, 2).build();
    for n in 14..54 {
        check_err(&f[..n], ParseError::TruncatedIpv6, key(ethertype::IPV6, |_| {}));
    }
    // The payload length says more than the frame holds: the header is
    // known, the packet is short.
    // nw_proto stays 0 until the upper layer is reached.
    for n in 54..62 {
        check_err(&f[..n], ParseError::TruncatedIpv6, key(ethertype::IPV6, |k| v6(k, 0)));
    }
    // An extension header that runs past the payload.
    let f = eth().ipv6(V6A, V6B).ipv6_ext(0).udp(1, 2).build();
    let mut g = f.clone();
    g[55] = 2; // 24 bytes, but only 16 follow
    check_err(&g, ParseError::TruncatedIpv6ExtHeader, key(ethertype::IPV6, |k| v6(k, 0)));
    let f = eth().ipv6(V6A, V6B).ipv6_ext(51).l4_raw(59).build();
    let mut g = f.clone();
    g[55] = 5; // AH of 28 bytes, 24 present
    check_err(&g, ParseError::TruncatedIpv6ExtHeader, key(ethertype::IPV6, |k| v6(k, 0)));
    // Extension headers with too few bytes for even their first 8.
    for (kind, body) in [(0u8, 7usize), (43, 1), (60, 0), (44, 7), (51, 4)] {
        let mut g = eth().ipv6(V6A, V6B).l4_raw(kind).payload(&vec![0; body]).build();
        g[20] = kind;
        check_err(&g, ParseError::TruncatedIpv6ExtHeader, key(ethertype::IPV6, |k| v6(k, 0)));
    }
    // A fragment header cut short after a complete hop-by-hop header.
    let mut g = eth().ipv6(V6A, V6B).ipv6_ext(0).l4_raw(44).payload(&[17, 0, 0]).build();
    g[54] = 44;
    check_err(&g, ParseError::TruncatedIpv6ExtHeader, key(ethertype::IPV6, |k| v6(k, 0)));
}

#[test]
fn l4_errors_over_ipv6() {
    let l3 = |proto| key(ethertype::IPV6, |k| v6(k, proto));
    let raw = |proto: u8, n: usize| eth().ipv6(V6A, V6B).l4_raw(proto).payload(&vec![0x50; n]).build();
    check_err(&raw(6, 19), ParseError::TruncatedTcp, l3(6));
    check_err(&raw(17, 7), ParseError::TruncatedUdp, l3(17));
    check_err(&raw(132, 11), ParseError::TruncatedSctp, l3(132));
    check_err(&raw(58, 3), ParseError::TruncatedIcmp, l3(58));
    let mut f = raw(6, 20);
    f[54 + 12] = 0x40;
    check_err(&f, ParseError::BadTcpDataOffset, l3(6));
    // NS/NA too short for the target address.
    for ty in [135u8, 136] {
        let mut p = vec![0u8; 23];
        p[0] = ty;
        let f = eth().ipv6(V6A, V6B).l4_raw(58).payload(&p).build();
        check_err(
            &f,
            ParseError::TruncatedIcmp,
            key(ethertype::IPV6, |k| {
                v6(k, 58);
                k.set_tp_src(ty as u16);
            }),
        );
    }
}

#[test]
fn bad_nd_options() {
    let ns = |opts: &[u8]| eth().ipv6(V6A, V6B).nd_ns(V6B, None).payload(opts).build();
    let so_far = key(ethertype::IPV6, |k| {
        v6(k, ipproto::ICMPV6);
        k.set_tp_src(135);
        k.set_nd_target(V6B);
    });
    // Zero length; longer than what is left; a lone trailing byte.
    for opts in [&[1u8, 0, 0, 0, 0, 0, 0, 0][..], &[1, 2, 0, 0, 0, 0, 0, 0], &[14], &[14, 1, 0, 0]] {
        check_err(&ns(opts), ParseError::BadNdOption, so_far);
    }
    // Two source link-layer address options.
    let f = eth().ipv6(V6A, V6B).nd_ns(V6B, Some(A)).payload(&[1, 1, 1, 2, 3, 4, 5, 6]).build();
    let mut want = so_far;
    want.set_arp_sha(A_NUM);
    check_err(&f, ParseError::BadNdOption, want);
    // A longer option of a known type is skipped whole.
    let f = ns(&[1, 2, 1, 2, 3, 4, 5, 6, 0, 0, 0, 0, 0, 0, 0, 0]);
    check(&f, so_far, layout(14, 54, 58));
}

// ---- Drop reasons ------------------------------------------------------------

#[test]
fn every_parse_error_has_a_distinct_counter_name() {
    let names: Vec<&str> = ParseError::ALL.iter().map(|e| e.name()).collect();
    assert_eq!(names.len(), 16);
    for (i, n) in names.iter().enumerate() {
        assert!(n.starts_with("drop_rx_"), "{n}");
        assert!(!names[..i].contains(n), "duplicate {n}");
    }
    assert_eq!(ParseError::Runt.name(), "drop_rx_runt");
    assert_eq!(ParseError::BadIpv4HeaderLen.name(), "drop_rx_bad_ipv4_header_len");
    assert_eq!(ParseError::TruncatedTcp.name(), "drop_rx_truncated_tcp");
}

// ---- Robustness --------------------------------------------------------------

/// One frame of each kind the builder makes, none with Ethernet padding,
/// and whether every strict prefix of it must be an error (true for IP and
/// ARP: their own lengths cover the whole frame).
fn corpus() -> Vec<(Vec<u8>, bool)> {
    let v4 = || eth().ipv4(IP_A, IP_B);
    let v6 = || eth().ipv6(V6A, V6B);
    vec![
        (v4().udp(1, 2).payload(b"abc").build(), true),
        (eth().vlan(0x88a8, 5).vlan(0x8100, 7).ipv4(IP_A, IP_B).tcp(3, 4, 0x12).build(), true),
        (v4().sctp(5, 6).build(), true),
        (v4().icmp_echo(1, 2).build(), true),
        (v4().ip_options(&[7, 7, 4, 0]).ip_frag(true, 0).udp(9, 10).build(), true),
        (v4().ip_frag(false, 3).udp(9, 10).build(), true),
        (eth().arp(1, A, IP_A, [0; 6], IP_B).build(), true),
        (v6().ipv6_ext(0).ipv6_ext(43).ipv6_ext(60).ipv6_ext(51).tcp(7, 8, 2).build(), true),
        (v6().ipv6_frag(true, 0).udp(1, 2).build(), true),
        (v6().ipv6_frag(false, 9).udp(1, 2).build(), true),
        (v6().sctp(1, 2).build(), true),
        (v6().icmpv6_echo(1, 2).build(), true),
        (v6().nd_ns(V6B, Some(A)).build(), true),
        (v6().nd_na(V6A, Some(B)).build(), true),
        (eth().vlan(0x8100, 1).ethertype(0x88cc).payload(&[1, 2, 3]).build(), false),
        (eth().ethertype(0x0010).payload(&[0; 16]).build(), false),
    ]
}

#[test]
fn corpus_parses_cleanly() {
    for (i, (f, _)) in corpus().iter().enumerate() {
        assert_eq!(err_of(f), None, "frame {i}");
    }
}

#[test]
fn every_truncation_of_every_frame() {
    for (i, (f, strict)) in corpus().iter().enumerate() {
        let (full, _, _) = extract(f, PORT);
        for n in 0..f.len() {
            let (k, l, e) = extract(&f[..n], PORT);
            assert!(l.l3 as usize <= n && l.l4 as usize <= n && l.payload as usize <= n, "frame {i} cut {n}");
            assert_eq!(k.in_port(), PORT);
            if *strict {
                assert!(e.is_some(), "frame {i} cut at {n} parsed cleanly");
            }
            // What a cut frame yields is a subset of the full key's fields,
            // except dl_type (a truncated tag leaves its TPID).
            let mut m = FlowKey::ALL_ONES;
            m.set_dl_type(0);
            assert!(k.and(&m).is_subset_of(&full), "frame {i} cut {n}: {k:?}");
        }
    }
}

#[test]
fn huge_frames_do_not_overflow_offsets() {
    let f = eth().ipv4(IP_A, IP_B).udp(1, 2).build();
    let mut g = f.clone();
    g.resize(200_000, 0xee);
    let (k, l, e) = extract(&g, PORT);
    assert_eq!((e, l, k.tp_dst()), (None, layout(14, 34, 42), 2));
    let mut h = eth().ethertype(0x1234).build();
    h.resize(70_000, 0);
    assert_eq!(extract(&h, PORT).1, layout(14, 0, 0));
}

/// What the datapath's quick path relies on (`dpif`'s `quick_output`):
/// `check` refuses exactly what `extract` refuses, and extraction leaves
/// every metadata word (`0..STAGE_L2`) as it starts it, zero but for the
/// input port, whatever the bytes.
fn agrees_with_check(f: &[u8], k: &FlowKey, port: u32, e: Option<ParseError>) -> Result<(), TestCaseError> {
    prop_assert_eq!(flow::extract::check(f), e);
    let mut start = FlowKey::ZERO;
    start.w[0] = port as u64;
    prop_assert_eq!(&k.w[..flow::key::STAGE_L2], &start.w[..flow::key::STAGE_L2]);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn never_panics_on_any_bytes(bytes in prop::collection::vec(any::<u8>(), 0..300), port in any::<u32>()) {
        let (k, l, e) = extract(&bytes, port);
        prop_assert_eq!(k.in_port(), port);
        agrees_with_check(&bytes, &k, port, e)?;
        prop_assert!(l.l3 as usize <= bytes.len() && l.l4 as usize <= bytes.len());
        prop_assert!(l.payload as usize <= bytes.len());
    }

    /// Random bytes behind a plausible Ethernet/IP prefix reach the deeper
    /// parsers far more often than uniform noise does.
    #[test]
    fn never_panics_on_plausible_headers(
        ty in prop::sample::select(vec![0x0800u16, 0x86dd, 0x0806, 0x8100, 0x88a8]),
        first in prop::sample::select(vec![0x45u8, 0x46, 0x4f, 0x60, 0x00]),
        proto in prop::sample::select(vec![0u8, 1, 6, 17, 43, 44, 51, 58, 60, 132]),
        tail in prop::collection::vec(any::<u8>(), 0..120),
    ) {
        let mut f = eth().ethertype(ty).build();
        f.push(first);
        f.extend_from_slice(&tail);
        if f.len() > 23 && ty == 0x0800 {
            f[23] = proto;
        }
        if f.len() > 20 && ty == 0x86dd {
            f[20] = proto;
        }
        let (k, l, e) = extract(&f, PORT);
        prop_assert_eq!(k.in_port(), PORT);
        agrees_with_check(&f, &k, PORT, e)?;
        prop_assert!(l.l3 as usize <= f.len() && l.l4 as usize <= f.len() && l.payload as usize <= f.len());
    }

    #[test]
    fn never_panics_on_damaged_frames(
        i in 0usize..16,
        cut in 0usize..200,
        flips in prop::collection::vec((0usize..200, any::<u8>()), 0..6),
    ) {
        let mut f = corpus()[i].0.clone();
        for (pos, x) in flips {
            if pos < f.len() {
                f[pos] ^= x;
            }
        }
        f.truncate(cut.min(f.len()));
        let (k, l, e) = extract(&f, PORT);
        prop_assert_eq!(k.in_port(), PORT);
        agrees_with_check(&f, &k, PORT, e)?;
        prop_assert!(l.l3 as usize <= f.len() && l.l4 as usize <= f.len() && l.payload as usize <= f.len());
    }
}
