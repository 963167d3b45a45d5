//! Tracker cost per packet: an established connection's packet among
//! 10,000 live connections (the firewall fast case), a new connection per
//! packet (commit), and SNAT of an established connection. Frames are
//! prebuilt; checksum validation is on, as in the datapath.
//!
//! `cargo bench -p conntrack`

use conntrack::{Config, Conntrack, CtAction, Nat, NatFlags, NatRange};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use wire::build::Frame;

fn udp(src: u32, dst: u32, sp: u16, dp: u16) -> Vec<u8> {
    Frame::new([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]).ipv4(src, dst).udp(sp, dp).payload(&[0; 18]).build()
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("conntrack");
    g.throughput(Throughput::Elements(1));
    let t = Conntrack::new(Config::default());
    let commit = CtAction { commit: true, ..CtAction::default() };
    let frames: Vec<Vec<u8>> =
        (0..10_000u32).map(|i| udp(0x0a00_0000 + i, 0x0a01_0001, 1000 + (i % 5000) as u16, 80)).collect();
    for f in &frames {
        t.execute(&mut f.clone(), &commit, 0, None);
    }
    let lookup = CtAction::default();
    let mut i = 0;
    g.bench_function("established among 10k", |b| {
        b.iter(|| {
            i = (i + 7919) % frames.len();
            let mut f = frames[i].clone();
            t.execute(&mut f, &lookup, 1, None).state
        })
    });
    let mut n = 0u32;
    let fresh = Conntrack::new(Config::default());
    g.bench_function("new connection (commit)", |b| {
        b.iter_batched(
            || {
                n = n.wrapping_add(1);
                udp(0x0b00_0000 + (n >> 16), 0x0a01_0001, n as u16, 53)
            },
            |mut f| fresh.execute(&mut f, &commit, 0, None).state,
            BatchSize::SmallInput,
        )
    });
    // Case (b) of the benchmarks as the datapath runs it: `ct(table=1)`
    // finds nothing (+new), then `ct(commit)` after the recirculation,
    // told that the first pass saw the packet.
    let mut m = 0u32;
    let two = Conntrack::new(Config::default());
    let look = CtAction { zone: 1, ..CtAction::default() };
    let commit1 = CtAction { zone: 1, commit: true, ..CtAction::default() };
    g.bench_function("new connection (ct(table) then ct(commit))", |b| {
        b.iter_batched(
            || {
                m = m.wrapping_add(1);
                udp(0x0c00_0000 + (m >> 16), 0x0a01_0001, m as u16, 53)
            },
            |mut f| {
                let r = two.execute_tracked(&mut f, &look, 0, None, 0);
                two.execute_tracked(&mut f, &commit1, 0, r.tracked.as_ref(), r.state).state
            },
            BatchSize::SmallInput,
        )
    });
    let nat = Conntrack::new(Config::default());
    let range = NatRange {
        addr_min: 0xc0a8_0001,
        addr_max: 0xc0a8_0001,
        port_min: 0,
        port_max: 0,
        v6: false,
        flags: NatFlags::default(),
    };
    let act = CtAction { commit: true, nat: Some(Nat::Src(range)), ..CtAction::default() };
    for f in &frames {
        nat.execute(&mut f.clone(), &act, 0, None);
    }
    let again = CtAction { nat: Some(Nat::Existing), ..CtAction::default() };
    g.bench_function("SNAT established among 10k", |b| {
        b.iter(|| {
            i = (i + 7919) % frames.len();
            let mut f = frames[i].clone();
            nat.execute(&mut f, &again, 1, None).state
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
