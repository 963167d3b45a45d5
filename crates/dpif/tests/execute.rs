//! Datapath action execution on real packet bytes: every rewrite leaves
//! valid checksums (recomputed in full here and compared), VLAN push/pop
//! reshape the frame, outputs are grouped per port, and malformed
//! packets are counted by reason.

use dpif::{DpAction, Pmd, PmdConfig, Sink, Translation, Upcall};
use flow::FlowKey;
use netdev::Packet;
use wire::build::{Frame, L3, L4};
use wire::checksum::{checksum, l4_checksum_v4, l4_checksum_v6};

#[derive(Default)]
struct Rec {
    out: Vec<(u32, Vec<u8>)>,
    batches: usize,
    to_user: usize,
    user_len: Vec<usize>,
}
impl Sink for Rec {
    fn output(&mut self, port: u32, pkts: &mut Vec<Packet>) {
        self.batches += 1;
        for p in pkts.drain(..) {
            self.out.push((port, p.data().to_vec()));
        }
    }
    fn userspace(&mut self, pkt: Packet, _full_len: usize, _a: &DpAction) {
        self.to_user += 1;
        self.user_len.push(pkt.len());
    }
}

/// An upcall answering every miss with fixed actions on an exact mask.
struct Fixed(Vec<DpAction>);
impl Upcall for Fixed {
    fn translate(&self, _key: &FlowKey) -> Translation {
        let mut mask = FlowKey::ZERO;
        mask.set_in_port(u32::MAX);
        Translation { actions: self.0.clone(), mask, ..Default::default() }
    }
}

fn run(frame: Vec<u8>, actions: Vec<DpAction>) -> Rec {
    let mut pmd = Pmd::new(PmdConfig::default());
    let mut rec = Rec::default();
    let mut p = Packet::from_slice(&frame);
    p.in_port = 1;
    pmd.process_batch(&mut vec![p], &Fixed(actions), 0, &mut rec);
    rec
}

fn set(f: impl Fn(&mut FlowKey, &mut FlowKey)) -> DpAction {
    let (mut key, mut mask) = (FlowKey::ZERO, FlowKey::ZERO);
    f(&mut key, &mut mask);
    DpAction::SetMasked(dpif::SetFields::new(&key, &mask))
}

const A: [u8; 6] = [2, 0, 0, 0, 0, 1];
const B: [u8; 6] = [2, 0, 0, 0, 0, 2];

#[test]
fn ipv4_and_port_rewrites_keep_checksums_valid() {
    for l4 in [L4::Udp { src: 1000, dst: 53 }, L4::Tcp { src: 1000, dst: 80, flags: 0x18 }] {
        let f = Frame::new(A, B).l3(L3::ipv4(0x0a00_0001, 0x0a00_0002)).l4(l4).payload(b"data").build();
        let a = set(|k, m| {
            k.set_nw_src(0xc0a8_0101);
            m.set_nw_src(u32::MAX);
            k.set_nw_ttl(7);
            m.set_nw_ttl(0xff);
            k.set_nw_tos(0x20);
            m.set_nw_tos(0xfc);
            k.set_tp_dst(8080);
            m.set_tp_dst(0xffff);
            k.set_dl_dst(0x0200_0000_0009);
            m.set_dl_dst(u64::MAX >> 16);
        });
        let rec = run(f, vec![a, DpAction::Output(2)]);
        let (port, p) = &rec.out[0];
        assert_eq!(*port, 2);
        assert_eq!(&p[0..6], &[2, 0, 0, 0, 0, 9]);
        assert_eq!(&p[26..30], &[192, 168, 1, 1]);
        assert_eq!((p[22], p[15]), (7, 0x20));
        assert_eq!(checksum(&p[14..34]), 0, "IPv4 header checksum");
        assert_eq!(u16::from_be_bytes([p[36], p[37]]), 8080);
        let proto = p[23];
        assert_eq!(l4_checksum_v4(0xc0a8_0101, 0x0a00_0002, proto, &p[34..]), 0, "L4 checksum, proto {proto}");
    }
}

#[test]
fn ipv6_rewrite_keeps_l4_checksum() {
    let (s, d, n) = (1u128 << 120 | 1, 1u128 << 120 | 2, 0xfe80u128 << 112 | 7);
    let f = Frame::new(A, B).l3(L3::ipv6(s, d)).l4(L4::Udp { src: 1, dst: 2 }).payload(b"x").build();
    let a = set(|k, m| {
        k.set_ipv6_src(n);
        m.set_ipv6_src(u128::MAX);
        k.set_nw_ttl(3);
        m.set_nw_ttl(0xff);
    });
    let rec = run(f, vec![a, DpAction::Output(2)]);
    let p = &rec.out[0].1;
    assert_eq!(p[21], 3);
    assert_eq!(l4_checksum_v6(n, d, 17, &p[54..]), 0);
}

#[test]
fn vlan_push_pop_and_grouped_output() {
    let f = Frame::new(A, B).l3(L3::ipv4(1, 2)).l4(L4::Udp { src: 1, dst: 2 }).build();
    let len = f.len();
    let rec = run(
        f,
        vec![
            DpAction::Output(2),
            DpAction::PushVlan { tpid: 0x8100, tci: 0x1000 | 10 },
            DpAction::Output(3),
            DpAction::PopVlan,
            DpAction::Output(4),
        ],
    );
    assert_eq!(rec.out.len(), 3);
    assert_eq!(rec.out[0].1.len(), len);
    let tagged = &rec.out[1].1;
    assert_eq!(tagged.len(), len + 4);
    assert_eq!(&tagged[12..16], &[0x81, 0x00, 0x00, 10]);
    assert_eq!(&tagged[16..18], &[0x08, 0x00]);
    assert_eq!(rec.out[2].1.len(), len);
    assert_eq!(rec.out[2].1, rec.out[0].1);
}

#[test]
fn batch_outputs_grouped_per_port_and_malformed_counted() {
    let mut pmd = Pmd::new(PmdConfig { emc_insert_inv_prob: 1, ..PmdConfig::default() });
    let mut rec = Rec::default();
    let good = Frame::new(A, B).l3(L3::ipv4(1, 2)).l4(L4::Udp { src: 1, dst: 2 }).build();
    let mut bad_ihl = good.clone();
    bad_ihl[14] = 0x43;
    let mut pkts: Vec<Packet> = (0..30).map(|_| Packet::from_slice(&good)).collect();
    pkts.push(Packet::from_slice(&bad_ihl));
    pkts.push(Packet::from_slice(&good[..20]));
    for p in &mut pkts {
        p.in_port = 1;
    }
    pmd.process_batch(&mut pkts, &Fixed(vec![DpAction::Output(2)]), 0, &mut rec);
    assert_eq!(rec.out.len(), 30);
    assert_eq!(rec.batches, 1, "one hand-off per port per batch");
    let st = pmd.stats();
    assert_eq!((st.upcalls, st.simple_hits + st.emc_hits + st.megaflow_hits), (1, 29));
    let drops = st.drops_by_reason();
    let get = |n: &str| drops.iter().find(|(k, _)| *k == n).map(|x| x.1).unwrap();
    assert_eq!(get("drop_rx_bad_ipv4_header_len"), 1);
    assert_eq!(get("drop_rx_truncated_ipv4"), 1);
}

#[test]
fn idle_megaflows_expire_and_limit_holds() {
    let mut pmd = Pmd::new(PmdConfig { megaflow_limit: 2, max_idle_ms: 100, ..PmdConfig::default() });
    let mut rec = Rec::default();
    let up = Fixed(vec![DpAction::Output(2)]);
    for port in 1..=3 {
        let mut p = Packet::from_slice(&Frame::new(A, B).l3(L3::ipv4(1, 2)).l4(L4::Udp { src: 1, dst: 2 }).build());
        p.in_port = port;
        pmd.process_batch(&mut vec![p], &up, 0, &mut rec);
    }
    assert_eq!(pmd.n_megaflows(), 2);
    assert_eq!(pmd.stats().upcall_lost_limit, 1);
    assert_eq!(rec.out.len(), 3, "a packet over the limit is still forwarded");
    pmd.sweep(50);
    assert_eq!(pmd.n_megaflows(), 2);
    pmd.sweep(500);
    assert_eq!(pmd.n_megaflows(), 0);
    assert_eq!(pmd.stats().expired, 2);
}

// ---- Every rewrite on real bytes -----------------------------------------

use wire::checksum::crc32c;

const E: usize = 14;

fn ipv4_ok(p: &[u8], l3: usize) {
    let ihl = (p[l3] & 0xf) as usize * 4;
    assert_eq!(checksum(&p[l3..l3 + ihl]), 0, "IPv4 header checksum");
}

fn l4_v4_ok(p: &[u8], l3: usize) {
    let ihl = (p[l3] & 0xf) as usize * 4;
    let total = u16::from_be_bytes([p[l3 + 2], p[l3 + 3]]) as usize;
    let src = u32::from_be_bytes(p[l3 + 12..l3 + 16].try_into().unwrap());
    let dst = u32::from_be_bytes(p[l3 + 16..l3 + 20].try_into().unwrap());
    assert_eq!(l4_checksum_v4(src, dst, p[l3 + 9], &p[l3 + ihl..l3 + total]), 0, "L4 checksum over IPv4");
}

/// `ext`: bytes of extension headers before the upper layer `proto`.
fn l4_v6_ok(p: &[u8], l3: usize, ext: usize, proto: u8) {
    let plen = u16::from_be_bytes([p[l3 + 4], p[l3 + 5]]) as usize;
    let src = u128::from_be_bytes(p[l3 + 8..l3 + 24].try_into().unwrap());
    let dst = u128::from_be_bytes(p[l3 + 24..l3 + 40].try_into().unwrap());
    let l4 = &p[l3 + 40 + ext..l3 + 40 + plen];
    assert_eq!(l4_checksum_v6(src, dst, proto, l4), 0, "L4 checksum over IPv6");
}

fn only(rec: &Rec) -> &[u8] {
    assert_eq!(rec.out.len(), 1);
    &rec.out[0].1
}

#[test]
fn eth_addresses_and_vlan_tci() {
    let f = Frame::new(A, B).vlan(0x8100, 0x2005).ipv4(1, 2).udp(1, 2).build();
    let a = set(|k, m| {
        k.set_dl_src(0x0a0b_0c0d_0e0f);
        m.set_dl_src(u64::MAX >> 16);
        k.set_dl_dst(0x0000_0000_00ff);
        m.set_dl_dst(0x0000_0000_00ff); // low byte only
        k.set_vlan_tci(0x1000 | 0x6007); // pcp 3, vid 7
        m.set_vlan_tci(0xffff);
    });
    let rec = run(f.clone(), vec![a, DpAction::Output(2)]);
    let p = only(&rec);
    assert_eq!(&p[6..12], &[0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f]);
    assert_eq!(&p[0..6], &[2, 0, 0, 0, 0, 0xff]);
    assert_eq!(&p[12..16], &[0x81, 0x00, 0x60, 0x07], "TCI written, CFI/present bit not");
    assert_eq!(&p[16..], &f[16..]);
    // On an untagged frame the TCI rewrite does nothing.
    let f = Frame::new(A, B).ipv4(1, 2).udp(1, 2).build();
    let a = set(|k, m| {
        k.set_vlan_tci(0x1007);
        m.set_vlan_tci(0xffff);
    });
    assert_eq!(only(&run(f.clone(), vec![a, DpAction::Output(2)])), &f[..]);
}

#[test]
fn ipv4_udp_zero_checksum_stays_zero() {
    let mut f = Frame::new(A, B).ipv4(0x0a00_0001, 0x0a00_0002).udp(1000, 53).payload(b"abc").build();
    f[40] = 0;
    f[41] = 0;
    let a = set(|k, m| {
        k.set_nw_dst(0x0a00_00fe);
        m.set_nw_dst(u32::MAX);
        k.set_tp_src(7);
        m.set_tp_src(0xffff);
    });
    let rec = run(f, vec![a, DpAction::Output(2)]);
    let p = only(&rec);
    assert_eq!(&p[30..34], &[10, 0, 0, 0xfe]);
    assert_eq!(&p[34..36], &[0, 7]);
    assert_eq!(&p[40..42], &[0, 0], "no UDP checksum stays none");
    ipv4_ok(p, E);
}

#[test]
fn ipv4_tos_ttl_keep_ecn_and_options() {
    let f = Frame::new(A, B).ipv4(1, 2).ip_tos(0x03).ip_ttl(9).ip_options(&[1, 1, 1, 1]).tcp(1, 2, 0x02).build();
    let a = set(|k, m| {
        k.set_nw_tos(0xb8);
        m.set_nw_tos(0xfc); // DSCP only
        k.set_nw_ttl(1);
        m.set_nw_ttl(0xff);
        k.set_nw_src(0xc633_6401);
        m.set_nw_src(u32::MAX);
        k.set_tp_src(4242);
        m.set_tp_src(0xffff);
    });
    let rec = run(f, vec![a, DpAction::Output(2)]);
    let p = only(&rec);
    assert_eq!((p[15], p[22]), (0xbb, 1), "ECN bits kept");
    assert_eq!(&p[34..38], &[1, 1, 1, 1], "options untouched");
    assert_eq!(&p[38..40], &4242u16.to_be_bytes());
    ipv4_ok(p, E);
    l4_v4_ok(p, E);
}

#[test]
fn ipv4_later_fragment_has_no_l4_to_touch() {
    let f = Frame::new(A, B).ipv4(1, 2).ip_frag(false, 10).l4_raw(17).payload(&[0xaa; 16]).build();
    let a = set(|k, m| {
        k.set_nw_src(0x0a0a_0a0a);
        m.set_nw_src(u32::MAX);
        k.set_tp_dst(99);
        m.set_tp_dst(0xffff);
    });
    let rec = run(f, vec![a, DpAction::Output(2)]);
    let p = only(&rec);
    assert_eq!(&p[26..30], &[10, 10, 10, 10]);
    assert_eq!(&p[34..], &[0xaa; 16], "fragment payload untouched");
    ipv4_ok(p, E);
}

#[test]
fn ipv6_all_fields_with_tcp_and_icmpv6() {
    let (s, d) = (0x2001_0db8u128 << 96 | 1, 0x2001_0db8u128 << 96 | 2);
    let (ns, nd) = (0xfd00u128 << 112 | 0x11, 0xfd00u128 << 112 | 0x22);
    let a = set(|k, m| {
        k.set_ipv6_src(ns);
        m.set_ipv6_src(u128::MAX);
        k.set_ipv6_dst(nd);
        m.set_ipv6_dst(u128::MAX);
        k.set_nw_tos(0x2e << 2);
        m.set_nw_tos(0xff);
        k.set_ipv6_label(0xabcde);
        m.set_ipv6_label(0xfffff);
        k.set_nw_ttl(2);
        m.set_nw_ttl(0xff);
        k.set_tp_dst(8443);
        m.set_tp_dst(0xffff);
    });
    let tcp = Frame::new(A, B).ipv6(s, d).ipv6_label(5).tcp(1, 443, 0x12).payload(b"hello").build();
    let icmp = Frame::new(A, B).ipv6(s, d).icmpv6_echo(7, 8).build();
    let ext = Frame::new(A, B).ipv6(s, d).ipv6_ext(0).udp(5, 6).payload(b"z").build();
    for (name, f, ext, proto) in [("tcp", tcp, 0, 6), ("icmpv6", icmp, 0, 58), ("udp after hop-by-hop", ext, 8, 17)] {
        let rec = run(f.clone(), vec![a.clone(), DpAction::Output(2)]);
        let p = only(&rec);
        assert_eq!(u32::from_be_bytes(p[14..18].try_into().unwrap()), 6 << 28 | 0xb8 << 20 | 0xabcde, "{name}");
        assert_eq!(p[21], 2);
        assert_eq!(&p[22..38], &ns.to_be_bytes());
        assert_eq!(&p[38..54], &nd.to_be_bytes());
        l4_v6_ok(p, E, ext, proto);
        let l4 = 54 + ext;
        if name == "icmpv6" {
            // The "port" fields of ICMPv6 are its type and code: the
            // code takes tp_dst's low byte (the type is untouched), and
            // the checksum follows (l4_v6_ok above).
            assert_eq!((p[l4], p[l4 + 1]), (f[l4], (8443 & 0xff) as u8));
            assert_eq!(p[l4 + 4..], f[l4 + 4..]);
        } else {
            assert_eq!(&p[l4 + 2..l4 + 4], &8443u16.to_be_bytes(), "{name}");
        }
    }
}

#[test]
fn sctp_ports_recompute_crc_without_padding() {
    for v6 in [false, true] {
        let b = Frame::new(A, B);
        let b = if v6 { b.ipv6(1, 2) } else { b.ipv4(1, 2) };
        let f = b.sctp(5000, 6000).payload(&[1, 2, 3, 4, 5, 6, 7, 8]).eth_pad_to(120).build();
        let a = set(|k, m| {
            k.set_tp_src(5001);
            m.set_tp_src(0xffff);
        });
        let rec = run(f.clone(), vec![a, DpAction::Output(2)]);
        let p = only(&rec);
        let l4 = if v6 { E + 40 } else { E + 20 };
        let end = l4 + 12 + 8;
        assert_eq!(&p[l4..l4 + 4], &[0x13, 0x89, 0x17, 0x70]);
        let mut sctp = p[l4..end].to_vec();
        let got = u32::from_le_bytes(sctp[8..12].try_into().unwrap());
        sctp[8..12].fill(0);
        assert_eq!(got, crc32c(&sctp), "v6={v6}");
        assert_eq!(&p[end..], &f[end..], "padding untouched");
    }
}

#[test]
fn arp_fields() {
    let f = Frame::new(A, B).arp(1, A, 0x0a00_0001, [0; 6], 0x0a00_0002).build();
    let a = set(|k, m| {
        k.set_dl_type(0x0806);
        k.set_arp_sha(0x0200_0000_00aa);
        m.set_arp_sha(u64::MAX >> 16);
        k.set_nw_src(0xc0a8_0001);
        m.set_nw_src(u32::MAX);
        k.set_arp_tha(0x0200_0000_00bb);
        m.set_arp_tha(u64::MAX >> 16);
        k.set_nw_dst(0xc0a8_0002);
        m.set_nw_dst(u32::MAX);
    });
    let rec = run(f.clone(), vec![a, DpAction::Output(2)]);
    let p = only(&rec);
    assert_eq!(&p[22..28], &[2, 0, 0, 0, 0, 0xaa]);
    assert_eq!(&p[28..32], &[192, 168, 0, 1]);
    assert_eq!(&p[32..38], &[2, 0, 0, 0, 0, 0xbb]);
    assert_eq!(&p[38..42], &[192, 168, 0, 2]);
    assert_eq!(&p[..22], &f[..22]);
}

#[test]
fn push_802_1ad_over_a_tag_then_rewrite_and_pop_both() {
    let f = Frame::new(A, B).vlan(0x8100, 10).ipv4(1, 2).udp(1, 2).build();
    let tci = set(|k, m| {
        k.set_vlan_tci(0x1000 | 0x0123);
        m.set_vlan_tci(0x0fff);
    });
    let rec = run(
        f.clone(),
        vec![
            DpAction::PushVlan { tpid: 0x88a8, tci: 0x1000 | 0x0064 },
            tci,
            DpAction::Output(2),
            DpAction::PopVlan,
            DpAction::Output(3),
            DpAction::PopVlan,
            DpAction::Output(4),
        ],
    );
    let by = |port: u32| &rec.out.iter().find(|o| o.0 == port).unwrap().1;
    assert_eq!(&by(2)[12..22], &[0x88, 0xa8, 0x01, 0x23, 0x81, 0x00, 0x00, 10, 0x08, 0x00]);
    assert_eq!(by(3), &f);
    assert_eq!(&by(4)[12..14], &[0x08, 0x00]);
    assert_eq!(by(4)[14..], f[18..]);
}

#[test]
fn rewrites_after_push_use_shifted_offsets() {
    let f = Frame::new(A, B).ipv4(1, 2).udp(1, 2).build();
    let a = set(|k, m| {
        k.set_nw_ttl(5);
        m.set_nw_ttl(0xff);
    });
    let rec = run(f, vec![DpAction::PushVlan { tpid: 0x8100, tci: 0x1000 | 9 }, a, DpAction::Output(2)]);
    let p = only(&rec);
    assert_eq!(p[18 + 8], 5);
    ipv4_ok(p, 18);
    l4_v4_ok(p, 18);
}

#[test]
fn outputs_copy_until_the_last_use_and_userspace_after_it_still_runs() {
    let f = Frame::new(A, B).ipv4(1, 2).udp(1, 2).payload(&[7; 40]).build();
    let ttl = set(|k, m| {
        k.set_nw_ttl(1);
        m.set_nw_ttl(0xff);
    });
    let us =
        DpAction::Userspace { reason: dpif::UserspaceReason::Action, max_len: 30, table_id: 0, cookie: 0, extra: None };
    let rec = run(f.clone(), vec![DpAction::Output(2), ttl, DpAction::Output(3), us.clone()]);
    assert_eq!(rec.out.len(), 2);
    assert_eq!(rec.out[0].1, f, "the first copy is as it was then");
    assert_eq!(rec.out[1].1[22], 1);
    assert_eq!(rec.to_user, 1, "a packet-in after the last output is not lost");
    assert_eq!(rec.user_len, vec![30], "truncated to max_len");
}

/// An upcall that credits every translation to one shared counter.
struct Counted(std::sync::Arc<dpif::FlowCounters>);
impl Upcall for Counted {
    fn translate(&self, _key: &FlowKey) -> Translation {
        let mut mask = FlowKey::ZERO;
        mask.set_in_port(u32::MAX);
        Translation {
            actions: vec![DpAction::Output(2)],
            mask,
            counters: vec![dpif::CounterRef(std::sync::Arc::clone(&self.0))].into(),
            too_deep: false,
        }
    }
}

#[test]
fn megaflow_hits_are_credited_to_the_slow_path_counters() {
    use std::sync::atomic::Ordering::Relaxed;
    let c = std::sync::Arc::new(dpif::FlowCounters::default());
    let up = Counted(std::sync::Arc::clone(&c));
    for emc in [0, 1] {
        let before = c.packets.load(Relaxed);
        let mut pmd = Pmd::new(PmdConfig { emc_insert_inv_prob: emc, ..PmdConfig::default() });
        let mut rec = Rec::default();
        let f = Frame::new(A, B).l3(L3::ipv4(1, 2)).l4(L4::Udp { src: 1, dst: 2 }).build();
        for round in 0..5u64 {
            let mut pkts: Vec<Packet> = (0..10).map(|_| Packet::from_slice(&f)).collect();
            pkts.iter_mut().for_each(|p| p.in_port = 1);
            pmd.process_batch(&mut pkts, &up, round, &mut rec);
        }
        // Nothing is credited until the poll thread pushes (about once a second).
        assert_eq!(c.packets.load(Relaxed), before);
        pmd.push_stats();
        assert_eq!(c.packets.load(Relaxed) - before, 50, "one upcall, 49 cache hits, all credited");
        assert!(c.used_ms.load(Relaxed) >= 4);
        // Pushing again adds nothing; removal pushes the rest.
        pmd.push_stats();
        assert_eq!(c.packets.load(Relaxed) - before, 50);
        let mut pkts = vec![Packet::from_slice(&f)];
        pkts[0].in_port = 1;
        pmd.process_batch(&mut pkts, &up, 5, &mut rec);
        pmd.flush();
        assert_eq!(c.packets.load(Relaxed) - before, 51);
        assert_eq!(c.bytes.load(Relaxed) % f.len() as u64, 0);
    }
}

/// Megaflows whose translations went through the same objects share one
/// counter list; a push sums their packets and credits each counter once,
/// and the last packets of megaflows that expire are credited too.
#[test]
fn megaflows_sharing_a_counter_list_are_credited_together() {
    use std::sync::atomic::Ordering::Relaxed;
    struct Shared(dpif::CounterSet);
    impl Upcall for Shared {
        fn translate(&self, _key: &FlowKey) -> Translation {
            let mut mask = FlowKey::ZERO;
            mask.set_in_port(u32::MAX);
            Translation { actions: vec![DpAction::Output(9)], mask, counters: self.0.clone(), too_deep: false }
        }
    }
    let cs: Vec<_> = (0..3).map(|_| std::sync::Arc::new(dpif::FlowCounters::default())).collect();
    let list: dpif::CounterSet = cs.iter().map(|c| dpif::CounterRef(std::sync::Arc::clone(c))).collect();
    let up = Shared(list);
    let mut pmd = Pmd::new(PmdConfig::default());
    let mut rec = Rec::default();
    let f = Frame::new(A, B).l3(L3::ipv4(1, 2)).l4(L4::Udp { src: 1, dst: 2 }).build();
    // Four megaflows (one per input port), 3 packets each.
    for round in 0..3u64 {
        let mut pkts: Vec<Packet> = (1..=4).map(|_| Packet::from_slice(&f)).collect();
        pkts.iter_mut().enumerate().for_each(|(i, p)| p.in_port = i as u32 + 1);
        pmd.process_batch(&mut pkts, &up, round, &mut rec);
    }
    assert_eq!(pmd.n_megaflows(), 4);
    pmd.push_stats();
    for c in &cs {
        assert_eq!(c.packets.load(Relaxed), 12);
        assert_eq!(c.bytes.load(Relaxed), 12 * f.len() as u64);
        assert_eq!(c.used_ms.load(Relaxed), 2);
    }
    // One more packet, then the megaflows expire.
    let mut pkts = vec![Packet::from_slice(&f)];
    pkts[0].in_port = 3;
    pmd.process_batch(&mut pkts, &up, 7, &mut rec);
    pmd.sweep(20_000);
    assert_eq!(pmd.n_megaflows(), 0, "idle megaflows expired");
    pmd.push_stats();
    for c in &cs {
        assert_eq!((c.packets.load(Relaxed), c.used_ms.load(Relaxed)), (13, 7));
    }
}

#[test]
fn mpls_top_entry_rewrites_leave_the_rest() {
    // Tagged MPLS frame: label 100, tc 3, bos 1, ttl 64, then 8 payload bytes.
    let mut f = Frame::new(A, B).vlan(0x8100, 5).ethertype(0x8847).build();
    f.truncate(18);
    f.extend_from_slice(&[0x00, 0x06, 0x47, 0x40, 1, 2, 3, 4, 5, 6, 7, 8]);
    let a = set(|k, m| {
        k.set_mpls_label(203);
        m.set_mpls_label(0xfffff);
        k.set_mpls_ttl(0x20);
        m.set_mpls_ttl(0xff);
    });
    let p = only(&run(f.clone(), vec![a, DpAction::Output(2)])).to_vec();
    assert_eq!(&p[18..22], &[0x00, 0x0c, 0xb7, 0x20], "label 203, tc 3 and bos kept, ttl 0x20");
    assert_eq!((&p[..18], &p[22..]), (&f[..18], &f[22..]));
    // A frame cut inside the entry is left alone.
    let mut g = f.clone();
    g.truncate(20);
    let a = set(|k, m| {
        k.set_mpls_label(203);
        m.set_mpls_label(0xfffff);
    });
    assert!(run(g, vec![a, DpAction::Output(2)]).out.iter().all(|(_, p)| p[18..20] == [0x00, 0x06]));
}

/// An ARP responder's rewrite (as OVN's: load:2->arp_op, swap the
/// addresses) turns a request into a reply on the wire.
#[test]
fn arp_responder_rewrites_op_and_addresses() {
    let mut f = Vec::new();
    f.extend_from_slice(&[0xff; 6]);
    f.extend_from_slice(&A);
    f.extend_from_slice(&[0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1]);
    f.extend_from_slice(&A);
    f.extend_from_slice(&[10, 0, 0, 1]);
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&[10, 0, 0, 254]);
    let rec = run(
        f,
        vec![
            set(|k, m| {
                k.set_nw_proto(2);
                m.set_nw_proto(u8::MAX);
                k.set_arp_sha(0x0200_0000_0002);
                m.set_arp_sha(u64::MAX >> 16);
                k.set_arp_tha(0x0200_0000_0001);
                m.set_arp_tha(u64::MAX >> 16);
                k.set_nw_src(0x0a00_00fe);
                m.set_nw_src(u32::MAX);
                k.set_nw_dst(0x0a00_0001);
                m.set_nw_dst(u32::MAX);
            }),
            DpAction::Output(2),
        ],
    );
    let p = only(&rec);
    assert_eq!(&p[20..22], &[0, 2], "arp_op is now a reply");
    assert_eq!(&p[22..28], &B);
    assert_eq!(&p[28..32], &[10, 0, 0, 254]);
    assert_eq!(&p[32..38], &A);
    assert_eq!(&p[38..42], &[10, 0, 0, 1]);
}

/// set_field on icmp_type/icmp_code (ICMP and ICMPv6) rewrites the header
/// and keeps the ICMP checksum valid.
#[test]
fn icmp_type_and_code_rewrites_keep_the_checksum() {
    for v6 in [false, true] {
        let (l3, l4) = if v6 {
            (L3::ipv6(1, 2), L4::Icmp6Echo { id: 7, seq: 1 })
        } else {
            (L3::ipv4(0x0a00_0001, 0x0a00_0002), L4::IcmpEcho { id: 7, seq: 1 })
        };
        let f = Frame::new(A, B).l3(l3).l4(l4).payload(b"ping").build();
        let a = set(|k, m| {
            k.set_tp_src(if v6 { 129 } else { 0 });
            m.set_tp_src(0xffff);
            k.set_tp_dst(3);
            m.set_tp_dst(0xffff);
        });
        let rec = run(f, vec![a, DpAction::Output(2)]);
        let p = only(&rec);
        let l4 = if v6 { 54 } else { 34 };
        assert_eq!((p[l4], p[l4 + 1]), (if v6 { 129 } else { 0 }, 3), "v6={v6}");
        if v6 {
            assert_eq!(l4_checksum_v6(1, 2, 58, &p[l4..]), 0, "ICMPv6 checksum");
        } else {
            assert_eq!(checksum(&p[l4..]), 0, "ICMP checksum");
        }
    }
}

/// A port rewrite keeps an SCTP packet's checksum as right (or as wrong)
/// as it arrived, as Open vSwitch does.
#[test]
fn sctp_rewrite_keeps_a_bad_checksum_bad() {
    let mut f =
        Frame::new(A, B).l3(L3::ipv4(0x0a00_0001, 0x0a00_0002)).l4(L4::Sctp { src: 1, dst: 2 }).payload(b"x").build();
    f[34 + 8] ^= 0xff; // corrupt the CRC
    let a = set(|k, m| {
        k.set_tp_src(12345);
        m.set_tp_src(0xffff);
    });
    let rec = run(f, vec![a, DpAction::Output(2)]);
    let p = only(&rec).to_vec();
    let mut z = p[34..].to_vec();
    let got = u32::from_le_bytes(z[8..12].try_into().unwrap());
    z[8..12].fill(0);
    let good = crc32c(&z);
    assert_eq!(got ^ good, 0xff, "the corruption survives the rewrite, nothing else changes");
}

/// set_field on nd_target and nd_sll / nd_tll rewrites a neighbour
/// solicitation or advertisement and keeps the ICMPv6 checksum valid; an
/// option the message does not carry is not added.
#[test]
fn nd_target_and_link_layer_options_rewrite_with_a_valid_checksum() {
    let new_mac = [0x00, 0x11, 0x22, 0x33, 0x44, 0x55];
    let a = |ns: bool| {
        set(move |k, m| {
            k.set_nd_target(0xfe80_0000_0000_0000_0000_0000_0000_0099);
            m.set_nd_target(u128::MAX);
            let mac = u64::from_be_bytes([0, 0, 0x00, 0x11, 0x22, 0x33, 0x44, 0x55]);
            if ns {
                k.set_arp_sha(mac);
                m.set_arp_sha(u64::MAX >> 16);
            } else {
                k.set_arp_tha(mac);
                m.set_arp_tha(u64::MAX >> 16);
            }
        })
    };
    let l4 = 54;
    for (ns, with_option) in [(true, true), (false, true), (true, false)] {
        let opt = with_option.then_some(A);
        let f = Frame::new(A, B).ipv6(1, 2);
        let f = if ns { f.nd_ns(0xfe80_0000_0000_0000_0000_0000_0000_0001, opt) } else { f.nd_na(7, opt) }.build();
        let rec = run(f.clone(), vec![a(ns), DpAction::Output(2)]);
        let p = only(&rec);
        assert_eq!(&p[l4 + 8..l4 + 24], &0xfe80_0000_0000_0000_0000_0000_0000_0099u128.to_be_bytes(), "ns={ns}");
        if with_option {
            assert_eq!(p[l4 + 24], if ns { 1 } else { 2 }, "the option's kind stays");
            assert_eq!(&p[l4 + 26..l4 + 32], &new_mac, "ns={ns}");
        } else {
            assert_eq!(p.len(), f.len(), "no option is added");
        }
        assert_eq!(l4_checksum_v6(1, 2, 58, &p[l4..]), 0, "ICMPv6 checksum, ns={ns}");
    }
}

/// A local stack with tx checksumming on (Linux CHECKSUM_PARTIAL) leaves
/// only the pseudo-header sum in the TCP/UDP checksum field. The datapath
/// completes it on receive, before any rewrite, so what leaves the switch
/// is valid (also after an address rewrite), and a frame whose checksum
/// was already complete leaves unchanged.
#[test]
fn partial_checksums_from_local_stacks_are_completed() {
    let (s6, d6) = (0xfd00u128 << 112 | 1, 0xfd00u128 << 112 | 2);
    for v6 in [false, true] {
        for l4 in [L4::Tcp { src: 40000, dst: 80, flags: 0x18 }, L4::Udp { src: 40000, dst: 53 }] {
            let l3 = if v6 { L3::ipv6(s6, d6) } else { L3::ipv4(0x0a00_0001, 0x0a00_0002) };
            let (l4_at, ip_len) = if v6 { (54, 40) } else { (34, 20) };
            let (proto, field) = match l4 {
                L4::Tcp { .. } => (6u8, l4_at + 16),
                _ => (17u8, l4_at + 6),
            };
            let good = Frame::new(A, B).l3(l3).l4(l4).payload(b"offloaded checksum, odd length").build();
            let len = good.len() - 14 - ip_len;
            // What Linux writes: the pseudo-header sum, not complemented
            // (the checksum of zeros of that length, complemented back).
            let zeros = vec![0u8; len];
            let partial = if v6 {
                !l4_checksum_v6(s6, d6, proto, &zeros)
            } else {
                !l4_checksum_v4(0x0a00_0001, 0x0a00_0002, proto, &zeros)
            };
            let mut f = good.clone();
            f[field..field + 2].copy_from_slice(&partial.to_be_bytes());
            assert_ne!(f, good);
            // Forwarded as it is: completed.
            let rec = run(f.clone(), vec![DpAction::Output(2)]);
            assert_eq!(only(&rec), &good[..], "v6={v6} proto={proto}: completed to the full checksum");
            // Rewritten after completion: still valid.
            let a = if v6 {
                set(|k, m| {
                    k.set_ipv6_dst(d6 + 5);
                    m.set_ipv6_dst(u128::MAX);
                })
            } else {
                set(|k, m| {
                    k.set_nw_dst(0x0a00_0009);
                    m.set_nw_dst(u32::MAX);
                })
            };
            let rec = run(f, vec![a, DpAction::Output(2)]);
            let p = only(&rec);
            if v6 {
                l4_v6_ok(p, 14, 0, proto);
            } else {
                l4_v4_ok(p, 14);
            }
            // A complete checksum is left alone.
            let rec = run(good.clone(), vec![DpAction::Output(2)]);
            assert_eq!(only(&rec), &good[..]);
        }
    }
    // Counted.
    let mut pmd = Pmd::new(PmdConfig::default());
    let mut rec = Rec::default();
    let mut f =
        Frame::new(A, B).l3(L3::ipv4(0x0a00_0001, 0x0a00_0002)).l4(L4::Udp { src: 1, dst: 2 }).payload(b"x").build();
    let partial = !l4_checksum_v4(0x0a00_0001, 0x0a00_0002, 17, &[0u8; 9]);
    f[40..42].copy_from_slice(&partial.to_be_bytes());
    let mut p = Packet::from_slice(&f);
    p.in_port = 1;
    pmd.process_batch(&mut vec![p], &Fixed(vec![DpAction::Output(2)]), 0, &mut rec);
    assert_eq!(pmd.stats().csum_partial, 1);
}

/// A sink whose port 2 fills offloaded checksums itself (as an AF_XDP port
/// with TX metadata does) and whose port 3 does not.
#[derive(Default)]
struct OffloadSink(Vec<(u32, Vec<u8>, Option<netdev::CsumPartial>)>);
impl Sink for OffloadSink {
    fn output(&mut self, port: u32, pkts: &mut Vec<Packet>) {
        for p in pkts.drain(..) {
            self.0.push((port, p.data().to_vec(), p.csum_partial));
        }
    }
    fn userspace(&mut self, _pkt: Packet, _full_len: usize, _a: &DpAction) {}
    fn csum_offload(&self, port: u32) -> bool {
        port == 2
    }
}

/// With `csum_offload`, a partial checksum stays partial through plain
/// outputs to a port that fills it, and is completed for a port that does
/// not, before any other action, and on arrival when the option is off.
#[test]
fn partial_checksums_are_left_to_ports_that_fill_them() {
    let good = Frame::new(A, B)
        .l3(L3::ipv4(0x0a00_0001, 0x0a00_0002))
        .l4(L4::Tcp { src: 40000, dst: 80, flags: 0x18 })
        .payload(b"left to the port")
        .build();
    let partial = !l4_checksum_v4(0x0a00_0001, 0x0a00_0002, 6, &vec![0u8; good.len() - 34]);
    let mut f = good.clone();
    f[50..52].copy_from_slice(&partial.to_be_bytes());
    let go = |offload: bool, actions: Vec<DpAction>| {
        let mut pmd = Pmd::new(PmdConfig { csum_offload: offload, ..PmdConfig::default() });
        let mut sink = OffloadSink::default();
        let mut p = Packet::from_slice(&f);
        p.in_port = 1;
        pmd.process_batch(&mut vec![p], &Fixed(actions), 0, &mut sink);
        assert_eq!(pmd.stats().csum_partial, 1);
        sink.0
    };
    let owed = Some(netdev::CsumPartial { start: 34, offset: 16, len: (good.len() - 34) as u16 });
    // To port 2 as it came, with the checksum still owed; to port 3 completed.
    let out = go(true, vec![DpAction::Output(2), DpAction::Output(3)]);
    assert_eq!(out[0], (2, f.clone(), owed));
    assert_eq!(out[1], (3, good.clone(), None));
    // Completing what the port would have filled gives the full checksum.
    let mut p = Packet::from_slice(&out[0].1);
    p.csum_partial = out[0].2;
    assert!(p.complete_checksum());
    assert_eq!(p.data(), &good[..]);
    // Another action first: completed before it, even for port 2.
    let out = go(true, vec![set(|k, m| m.set_dl_src(k.dl_src() | 0xffff_ffff_ffff)), DpAction::Output(2)]);
    assert_eq!(out[0].2, None);
    assert_eq!(out[0].1[50..52], good[50..52]);
    // Option off: completed on arrival.
    assert_eq!(go(false, vec![DpAction::Output(2)])[0], (2, good.clone(), None));
}

/// A recirculated packet is looked up again with the layout the actions
/// kept (the fast path does not parse it a second time): for every action
/// that moves headers, that layout is the one a fresh parse of the bytes
/// gives, so rewrites in the next pass land where they should.
#[test]
fn recirculation_carries_the_layout_a_fresh_parse_gives() {
    use dpif::execute::{execute, Exec, OutQueues};
    let v4 = Frame::new(A, B).ipv4(1, 2).udp(1000, 53).build();
    let tagged = Frame::new(A, B).vlan(0x8100, 7).ipv4(1, 2).tcp(1000, 80, 0x02).build();
    let v6 = Frame::new(A, B).ipv6(1, 2).ipv6_ext(0).tcp(1000, 80, 0x10).build();
    let mut mpls = Frame::new(A, B).ethertype(0x8847).build();
    mpls.truncate(14);
    mpls.extend_from_slice(&[0x00, 0x06, 0x41, 0x40]);
    mpls.extend_from_slice(&v4[14..]);
    let nat = set(|k, m| {
        k.set_nw_src(0x0a03_0101);
        m.set_nw_src(u32::MAX);
        k.set_tp_src(4000);
        m.set_tp_src(0xffff);
    });
    let push = |tpid| DpAction::PushVlan { tpid, tci: 0x1000 | 9 };
    let cases: Vec<(&str, &[u8], Vec<DpAction>)> = vec![
        ("plain", &v4, vec![]),
        ("nat", &v4, vec![nat.clone()]),
        ("push", &v4, vec![push(0x8100)]),
        ("push twice", &v4, vec![push(0x8100), push(0x88a8)]),
        ("push over a tag", &tagged, vec![push(0x88a8), nat.clone()]),
        ("pop", &tagged, vec![DpAction::PopVlan]),
        ("pop untagged", &v4, vec![DpAction::PopVlan]),
        ("ipv6 behind an extension", &v6, vec![push(0x8100)]),
        ("push mpls", &v4, vec![DpAction::PushMpls { ethertype: 0x8847, lse: 0x0006_4140 }]),
        ("pop mpls", &mpls, vec![DpAction::PopMpls { ethertype: 0x0800 }, nat]),
    ];
    for (name, frame, mut actions) in cases {
        actions.push(DpAction::Recirc(5));
        let p = Packet::from_slice(frame);
        let (mut key, layout, _) = flow::extract(p.data(), p.in_port);
        let mut q = OutQueues::default();
        match execute(&actions, p, &mut key, layout, &mut q, &mut Rec::default(), 0) {
            Exec::Recirc(p, kept) if key.recirc_id() == 5 => {
                let (fresh_key, fresh, _) = flow::extract(p.data(), p.in_port);
                assert_eq!(kept, fresh, "{name}: layout");
                assert_eq!(fresh_key.w[flow::key::STAGE_L2..], key.w[flow::key::STAGE_L2..], "{name}: key");
            }
            _ => panic!("{name}: not recirculated"),
        }
    }
}
