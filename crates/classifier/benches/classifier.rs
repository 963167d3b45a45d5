//! Classifier lookups at production scale: 100,000 rules in 40 subtables
//! (40 distinct masks over about 30 fields), hits and misses, and the
//! insertion rate.
use classifier::Classifier;
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use flow::key::FlowKey;
use flow::Match;

fn ip(a: u32) -> String {
    std::net::Ipv4Addr::from(a).to_string()
}

/// Rule `i` of subtable `t`: 40 mask shapes built from 10 field families,
/// each at 4 prefix lengths / field combinations.
fn rule(t: u32, i: u32) -> String {
    let v = t / 10; // variant 0..4 of the family
                    // Variants of a family also differ in one pkt_mark mask bit, so the 40
                    // tables have 40 distinct masks whatever the family's own fields.
    let mark = format!("pkt_mark=0/{:#x},", 1u32 << v);
    mark + &match t % 10 {
        0 => format!("in_port={},dl_src=02:00:00:00:{:02x}:{:02x}", v + 1, i >> 8 & 0xff, i & 0xff),
        1 => format!("ip,nw_dst={}/{}", ip(0x0a00_0000 | i << 8), 16 + 4 * v),
        2 => format!("ip,nw_src={}/{}", ip(0xac10_0000 | i << 4), 20 + 3 * v),
        3 => format!("tcp,nw_dst={},tp_dst={}", ip(0x0a00_0000 | i), 1 + (i + v) % 1024),
        4 => format!("udp,nw_src={}/{},tp_src={}", ip(0xc0a8_0000 | i << 2), 24 + 2 * v, 1 + i % 512),
        5 => format!("dl_vlan={},dl_dst=02:00:00:{:02x}:{:02x}:{:02x}", i % 4000 + 1, v, i >> 8 & 0xff, i & 0xff),
        6 => format!("metadata={:#x}/{:#x},ip,nw_tos={}", i, 0xffffu32 << v, (i % 64) * 4),
        7 => format!("ipv6,ipv6_dst=2001:db8::{:x}:{:x}/{}", v, i, 112 + 4 * v),
        8 => format!("tcp,tp_src={},tcp_flags=+syn,nw_ttl={}", i + 1, v + 1),
        _ => format!("arp,arp_tpa={},arp_op={}", ip(0x0a01_0000 | i), v + 1),
    }
}

fn bench(c: &mut Criterion) {
    let rules: Vec<(Match, u32)> =
        (0..40u32).flat_map(|t| (0..2500u32).map(move |i| (Match::parse(&rule(t, i)).unwrap(), 100 + t))).collect();
    let mut g = c.benchmark_group("classifier");
    g.throughput(Throughput::Elements(rules.len() as u64));
    g.sample_size(10);
    g.bench_function("insert_100k", |b| {
        b.iter(|| {
            let mut cls: Classifier<()> = Classifier::new();
            for (m, p) in &rules {
                cls.insert(*m, *p, (), 1);
            }
            black_box(cls.n_subtables())
        })
    });
    g.finish();

    let mut cls: Classifier<()> = Classifier::new();
    for (m, p) in &rules {
        cls.insert(*m, *p, (), 1);
    }
    eprintln!("{} rules in {} subtables", rules.len(), cls.n_subtables());
    let hit = Match::parse("tcp,nw_src=172.16.0.5,nw_dst=10.0.0.7,tp_src=9,tp_dst=8").unwrap().key;
    let miss = Match::parse("udp,nw_src=1.2.3.4,nw_dst=99.0.0.7,tp_src=9,tp_dst=8").unwrap().key;
    let mut g = c.benchmark_group("classifier_lookup_100k_rules_40_subtables");
    g.throughput(Throughput::Elements(1));
    for (name, k) in [("hit", hit), ("miss", miss)] {
        g.bench_function(name, |b| {
            b.iter(|| {
                let mut wc = FlowKey::ZERO;
                black_box(cls.lookup(black_box(&k), 1, &mut wc))
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
