//! Flow extraction per packet: `extract` (returns a fresh key) and
//! `extract_into` (reuses the caller's key, as the fast path does).
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
// criterion 0.5's own `black_box` reads a returned value byte by byte with
// volatile loads (~40 ns for a 256-byte key tuple), so closures return ()
// and results go through the real compiler barrier instead.
use std::hint::black_box;
use wire::build::PacketBuilder;

const A: [u8; 6] = [2, 0, 0, 0, 0, 1];
const B: [u8; 6] = [2, 0, 0, 0, 0, 2];

fn bench(c: &mut Criterion) {
    let frames = [
        (
            "udp4_64B",
            PacketBuilder::default().eth(A, B).ipv4(0x0a00_0001, 0x0a00_0002).udp(1000, 53).pad_to(64).build(),
        ),
        // The smallest TCP/IPv6 frame: 14 + 40 + 20 bytes.
        ("tcp6_74B", PacketBuilder::default().eth(A, B).ipv6(1 << 120 | 1, 1 << 120 | 2).tcp(1000, 80, 0x10).build()),
        (
            "vlan_tcp4_64B",
            PacketBuilder::default()
                .eth(A, B)
                .vlan(0x8100, 10)
                .ipv4(0x0a00_0001, 0x0a00_0002)
                .tcp(1000, 80, 0x10)
                .pad_to(64)
                .build(),
        ),
        (
            "nd_ns_86B",
            PacketBuilder::default().eth(A, B).ipv6(1 << 120 | 1, 1 << 120 | 2).nd_ns(1 << 120 | 2, Some(A)).build(),
        ),
    ];
    let mut g = c.benchmark_group("extract");
    g.throughput(Throughput::Elements(1));
    for (name, f) in &frames {
        assert_eq!(flow::extract(f, 1).2, None, "{name}");
        g.bench_function(*name, |b| {
            b.iter(|| {
                black_box(&flow::extract(black_box(f), 1));
            })
        });
    }
    let mut k = flow::FlowKey::ZERO;
    for (name, f) in &frames[..2] {
        g.bench_function(format!("{name}_into"), |b| {
            b.iter(|| {
                black_box(flow::extract::extract_into(black_box(f), 1, &mut k));
                black_box(&k);
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
