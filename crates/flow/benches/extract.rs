//! Flow extraction per packet.
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use wire::build::{Frame, L3, L4};

fn bench(c: &mut Criterion) {
    let udp = Frame::new([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .l3(L3::ipv4(0x0a00_0001, 0x0a00_0002))
        .l4(L4::Udp { src: 1000, dst: 53 })
        .pad_to(64)
        .build();
    let tcp6 = Frame::new([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .l3(L3::ipv6(1 << 120 | 1, 1 << 120 | 2))
        .l4(L4::Tcp { src: 1000, dst: 80, flags: 0x10 })
        .pad_to(78)
        .build();
    let mut g = c.benchmark_group("extract");
    g.throughput(Throughput::Elements(1));
    g.bench_function("udp4_64B", |b| b.iter(|| flow::extract(black_box(&udp), 1)));
    g.bench_function("tcp6_78B", |b| b.iter(|| flow::extract(black_box(&tcp6), 1)));
    let mut k = flow::FlowKey::ZERO;
    g.bench_function("udp4_64B_into", |b| {
        b.iter(|| black_box(flow::extract::extract_into(black_box(&udp), 1, &mut k)))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
