//! The slow path at production scale (SIGCOMM'21 Table 3: ~100k rules,
//! ~40 tables, ~30 distinct fields): classifier lookups, and translation
//! of a miss through a 3-table goto chain.
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use flow::Match;
use ofproto::{parse_flow, FlowModCmd, FlowSpec, Need, Ofproto, PortConfig};

fn ip(a: u32) -> String {
    std::net::Ipv4Addr::from(a).to_string()
}

/// 100,000 rules over 40 tables. Tables cycle through shapes that use
/// different field sets; table t sends survivors to t+1 so a packet walks
/// several tables.
fn ruleset() -> Vec<FlowSpec> {
    let mut v = Vec::new();
    let shapes = 10;
    for t in 0..40u32 {
        let n = 2500;
        for i in 0..n {
            let shape = t % shapes;
            let m = match shape {
                0 => format!("in_port={},dl_src=02:00:00:{:02x}:{:02x}:{:02x}", i % 48 + 1, t, i >> 8, i & 0xff),
                1 => format!("ip,nw_dst={}/{}", ip(0x0a00_0000 | i << 8), 24),
                2 => format!("ip,nw_src={}/{}", ip(0xac10_0000 | i << 4), 28),
                3 => format!("tcp,nw_dst={},tp_dst={}", ip(0x0a00_0000 | i), 1 + i % 1024),
                4 => format!("udp,nw_src={},tp_src={}", ip(0xc0a8_0000 | i), 1 + i % 512),
                5 => format!("dl_vlan={},dl_dst=02:00:00:00:{:02x}:{:02x}", i % 4000 + 1, i >> 8, i & 0xff),
                6 => format!("metadata={:#x},ip,nw_tos={}", i, (i % 64) * 4),
                7 => format!("ipv6,ipv6_dst=2001:db8::{:x}/128", i),
                8 => format!("tcp,tp_src={},tcp_flags=+syn", i + 1),
                _ => format!("arp,arp_tpa={},arp_op=1", ip(0x0a01_0000 | i)),
            };
            let next = if t < 39 { format!(",goto_table:{}", t + 1) } else { String::new() };
            let text = format!("table={t},priority={},{m},actions=output:{}{next}", 100 + i % 7, i % 4 + 1);
            v.push(parse_flow(&text, Need::Actions).unwrap());
        }
        // Table miss: continue to the next table.
        if t < 39 {
            v.push(parse_flow(&format!("table={t},priority=0,actions=goto_table:{}", t + 1), Need::Actions).unwrap());
        }
    }
    v
}

fn bench(c: &mut Criterion) {
    let specs = ruleset();
    let mut of = Ofproto::new("br0");
    for p in 1..=4 {
        of.add_port(PortConfig::new(p, &format!("p{p}")));
    }
    let t0 = std::time::Instant::now();
    let mods: Vec<_> = specs.iter().cloned().map(|s| (FlowModCmd::Add, s)).collect();
    for chunk in mods.chunks(1000) {
        of.flow_mod_batch(chunk).unwrap();
    }
    let el = t0.elapsed();
    eprintln!("inserted {} rules in {:.2?} ({:.0} rules/s)", of.n_rules(), el, of.n_rules() as f64 / el.as_secs_f64());

    // A packet matching rules in tables 1 (nw_dst /24) and 3 (tcp port).
    let k = Match::parse("in_port=1,tcp,nw_src=172.16.0.5,nw_dst=10.0.0.7,tp_src=9,tp_dst=8").unwrap().key;
    let mut g = c.benchmark_group("slowpath");
    g.throughput(Throughput::Elements(1));

    g.bench_function("xlate_miss_40_tables_100k_rules", |b| b.iter(|| black_box(of.translate_key(black_box(&k), 0))));
    // The same packet stopped after 3 tables by a rule in table 2.
    of.flow_mod(
        FlowModCmd::Add,
        &parse_flow("table=2,priority=1000,tcp,tp_dst=8,actions=output:2", Need::Actions).unwrap(),
    )
    .unwrap();
    g.bench_function("xlate_miss_3_tables_of_100k_rules", |b| b.iter(|| black_box(of.translate_key(black_box(&k), 0))));
    let t = of.translate_key(&k, 0);
    eprintln!("3-table megaflow: {} -> {}", Match::new(k, t.mask), dpif::format_actions(&t.actions));
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
