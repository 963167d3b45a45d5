//! The fast path per packet: extraction + EMC hit, megaflow lookup with
//! 1/10/50 subtables, and a whole 32-packet batch, also with one
//! recirculation per packet (a firewall's two passes).
use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use dpif::{DpAction, Pmd, PmdConfig, Sink, Translation, Upcall};
use flow::FlowKey;
use netdev::Packet;
use std::cell::Cell;
use wire::build::{Frame, L3, L4};

struct Count(u64);
impl Sink for Count {
    fn output(&mut self, _port: u32, pkts: &mut Vec<Packet>) {
        self.0 += pkts.len() as u64;
        pkts.clear();
    }
    fn userspace(&mut self, _: Packet, _full_len: usize, _: &DpAction) {}
}

/// Answers misses with a mask chosen per call: mask variant `i` (0..66)
/// matches an nw_src prefix of length `i % 33`, plus tp_dst from 33 on,
/// so each variant is its own subtable.
struct Masks(Cell<u32>);
impl Upcall for Masks {
    fn translate(&self, _key: &FlowKey) -> Translation {
        let i = self.0.get();
        let mut mask = FlowKey::ZERO;
        mask.set_in_port(u32::MAX);
        mask.set_dl_type(0xffff);
        mask.set_nw_dst(u32::MAX);
        let p = i % 33;
        mask.set_nw_src(if p == 0 { 0 } else { u32::MAX << (32 - p) });
        mask.set_tp_dst(if i >= 33 { 0xffff } else { 0 });
        Translation { actions: vec![DpAction::Output(2)], mask, ..Default::default() }
    }
}

/// Two passes per packet, as `ct(table=1)` then `+est -> output` makes
/// them (without the tracker): `recirc_id=0` -> recirculate,
/// `recirc_id=1` -> output.
struct TwoPasses;
impl Upcall for TwoPasses {
    fn translate(&self, key: &FlowKey) -> Translation {
        let mut mask = FlowKey::ZERO;
        mask.set_in_port(u32::MAX);
        mask.set_recirc_id(u32::MAX);
        let actions = if key.recirc_id() == 0 { vec![DpAction::Recirc(1)] } else { vec![DpAction::Output(2)] };
        Translation { actions, mask, ..Default::default() }
    }
}

fn frame(dst: u32) -> Vec<u8> {
    Frame::new([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .l3(L3::ipv4(0x0a00_0001, dst))
        .l4(L4::Udp { src: 1000, dst: 53 })
        .pad_to(64)
        .build()
}

/// 32 packets of frame `f` from port 1.
fn batch_of(f: &[u8]) -> Vec<Packet> {
    (0..32)
        .map(|_| {
            let mut p = Packet::from_slice(f);
            p.in_port = 1;
            p
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("fastpath");
    g.throughput(Throughput::Elements(1));

    // Extraction + EMC hit (the port hint off).
    let up = Masks(Cell::new(0));
    let mut pmd = Pmd::new(PmdConfig { emc_insert_inv_prob: 1, port_hint: false, ..PmdConfig::default() });
    let f = frame(0x0a00_0002);
    let (k, _, _) = flow::extract(&f, 1);
    assert_eq!((k.nw_dst(), k.tp_dst()), (0x0a00_0002, 53), "extraction parses the UDP frame");
    pmd.actions_for_key(&k, &up, 0);
    pmd.actions_for_key(&k, &up, 0);
    let mut key = FlowKey::ZERO;
    g.bench_function("extract+emc_hit", |b| {
        b.iter(|| {
            flow::extract::extract_into(black_box(&f), 1, &mut key);
            black_box(pmd.actions_for_key(&key, &up, 0).len())
        })
    });

    // EMC hits over 4,096 flows (one megaflow), the port hint off: the
    // entries do not all stay in the L1/L2 caches, as in a real run.
    let up = Masks(Cell::new(0));
    let mut pmd = Pmd::new(PmdConfig { emc_insert_inv_prob: 1, port_hint: false, ..PmdConfig::default() });
    let keys: Vec<FlowKey> = (0..4096u32)
        .map(|i| {
            let f = Frame::new([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
                .l3(L3::ipv4(0x0a00_0000 + i, 0x0a00_0002))
                .l4(L4::Udp { src: 1000 + i as u16, dst: 53 })
                .pad_to(64)
                .build();
            flow::extract(&f, 1).0
        })
        .collect();
    for k in &keys {
        pmd.actions_for_key(k, &up, 0);
        pmd.actions_for_key(k, &up, 0);
    }
    let emc0 = pmd.stats().emc_hits;
    pmd.actions_for_key(&keys[7], &up, 0);
    assert!(pmd.stats().emc_hits == emc0 + 1 && pmd.stats().upcalls == 1, "EMC hits after one upcall");
    let mut i = 0;
    g.bench_function("emc_hit_4096_flows", |b| {
        b.iter(|| {
            i = (i + 1) & 4095;
            black_box(pmd.actions_for_key(black_box(&keys[i]), &up, 0).len())
        })
    });

    // The same 4,096 flows with the port hint on: one masked compare.
    let mut pmd = Pmd::new(PmdConfig { emc_insert_inv_prob: 1, ..PmdConfig::default() });
    pmd.actions_for_key(&keys[0], &up, 0);
    pmd.actions_for_key(&keys[7], &up, 0);
    assert!(pmd.stats().simple_hits == 1 && pmd.stats().emc_hits == 0, "served by the port hint");
    g.bench_function("port_hint_hit_4096_flows", |b| {
        b.iter(|| {
            i = (i + 1) & 4095;
            black_box(pmd.actions_for_key(black_box(&keys[i]), &up, 0).len())
        })
    });

    // Megaflow lookups, EMC off, with N subtables; the hit is in the last one.
    for n in [1u32, 10, 50] {
        let up = Masks(Cell::new(0));
        let mut pmd = Pmd::new(PmdConfig { emc_insert_inv_prob: 0, ..PmdConfig::default() });
        for i in 0..n {
            up.0.set(i);
            let (k, _, _) = flow::extract(&frame(0x0b00_0000 + i), 1);
            pmd.actions_for_key(&k, &up, 0);
        }
        let (k, _, _) = flow::extract(&frame(0x0b00_0000 + n - 1), 1);
        assert_eq!(pmd.stats().upcalls, n as u64);
        assert_eq!(pmd.subtables().len(), n as usize, "one subtable per mask");
        g.bench_function(format!("megaflow_lookup_{n}_subtables"), |b| {
            b.iter(|| black_box(pmd.actions_for_key(black_box(&k), &up, 0).len()))
        });
        assert_eq!(pmd.stats().upcalls, n as u64, "all hits");
    }
    g.finish();

    // A whole batch: 32 packets of one flow in, outputs handed to a sink.
    let mut g = c.benchmark_group("batch");
    g.throughput(Throughput::Elements(32));
    let up = Masks(Cell::new(0));
    let mut pmd = Pmd::new(PmdConfig::default());
    let mut sink = Count(0);
    g.bench_function("process_batch_32x64B", |b| {
        b.iter_batched(
            || batch_of(&f),
            |mut pkts| pmd.process_batch(&mut pkts, &up, 0, &mut sink),
            BatchSize::SmallInput,
        )
    });
    let mut pmd = Pmd::new(PmdConfig::default());
    g.bench_function("process_batch_32x64B_recirculated", |b| {
        b.iter_batched(
            || batch_of(&f),
            |mut pkts| pmd.process_batch(&mut pkts, &TwoPasses, 0, &mut sink),
            BatchSize::SmallInput,
        )
    });
    assert_eq!(pmd.stats().upcalls, 2, "one megaflow per pass");
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
