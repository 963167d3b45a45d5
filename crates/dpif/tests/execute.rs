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
}
impl Sink for Rec {
    fn output(&mut self, port: u32, pkts: &mut Vec<Packet>) {
        self.batches += 1;
        for p in pkts.drain(..) {
            self.out.push((port, p.data().to_vec()));
        }
    }
    fn userspace(&mut self, _pkt: Packet, _a: &DpAction) {
        self.to_user += 1;
    }
}

/// An upcall answering every miss with fixed actions on an exact mask.
struct Fixed(Vec<DpAction>);
impl Upcall for Fixed {
    fn translate(&self, _key: &FlowKey) -> Translation {
        let mut mask = FlowKey::ZERO;
        mask.set_in_port(u32::MAX);
        Translation { actions: self.0.clone(), mask }
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
    DpAction::SetMasked { key, mask }
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
    assert_eq!((st.upcalls, st.emc_hits + st.megaflow_hits), (1, 29));
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
