//! The slow path at production scale (SIGCOMM'21 Table 3: ~100k rules,
//! ~40 tables, ~30 distinct fields): classifier lookups, and translation
//! of a miss through a 3-table goto chain.
//!
//! Two rulesets:
//! - `ruleset`: 100k rules spread over 40 tables (2,500 each, one or two
//!   masks per table), walked through all 40 or stopped after 3;
//! - `pipeline3`: 100k rules in just 3 tables — classification (L2,
//!   tunnel, conntrack metadata), ACL (5-tuples, ports, flags) and routing
//!   (IPv4/IPv6 prefixes, ARP) — over ~40 distinct masks and ~30 fields,
//!   chained by goto_table. Every translation walks all 3 tables. Reported
//!   for one key, and as the upcall rate over 4,096 varied keys (each
//!   translation is a miss: `translate_key` caches nothing).
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use flow::key::FlowKey;
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

/// xorshift64*: deterministic, dependency-free.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn mac(r: &mut Rng) -> String {
    flow::key::fmt_mac(0x0200_0000_0000 | r.below(1 << 24))
}
/// Rule addresses live in 10/8, 172.16/12 and 192.168/16.
fn v4(r: &mut Rng) -> u32 {
    [
        0x0a00_0000 | r.below(1 << 24) as u32,
        0xac10_0000 | r.below(1 << 20) as u32,
        0xc0a8_0000 | r.below(1 << 16) as u32,
    ][r.below(3) as usize]
}
fn v4p(r: &mut Rng, p: u32) -> String {
    format!("{}/{p}", ip(v4(r) & (u32::MAX << (32 - p))))
}
fn v6(r: &mut Rng, p: u32) -> String {
    let a = (0x2001_0db8u128 << 96)
        | ((r.below(1 << 12) as u128) << 80)
        | ((r.below(256) as u128) << 64)
        | r.next() as u128;
    let a = if p == 128 { a } else { a & !(u128::MAX >> p) };
    format!("{}/{p}", std::net::Ipv6Addr::from(a))
}
fn port(r: &mut Rng) -> u64 {
    [22, 53, 80, 443, 8080][r.below(5) as usize] + r.below(2000)
}

/// (rule count, match, priority) of table `t`'s shape `s`; `None` past
/// the last shape.
fn pipeline_rule(t: u8, s: usize, r: &mut Rng) -> Option<(usize, String, u32)> {
    let inp = r.below(48) + 1;
    Some(match (t, s) {
        // Table 0: classification.
        (0, 0) => (3000, format!("in_port={inp},dl_src={}", mac(r)), 100),
        (0, 1) => (2000, format!("in_port={inp},dl_vlan={}", r.below(4000) + 1), 110),
        (0, 2) => (3000, format!("dl_dst={}", mac(r)), 90),
        (0, 3) => (2000, format!("tun_id={},dl_dst={}", r.below(5000), mac(r)), 130),
        (0, 4) => (120, format!("in_port={inp},{}", ["ip", "ipv6", "arp"][r.below(3) as usize]), 80),
        (0, 5) => (1500, format!("recirc_id={},in_port={inp}", r.below(4000) + 1), 140),
        (0, 6) => (1500, format!("ct_zone={},ct_mark={:#x}", r.below(1000) + 1, r.below(4000) + 1), 150),
        (0, 7) => (2000, format!("dl_src={},dl_dst={}", mac(r), mac(r)), 95),
        (0, 8) => (1500, format!("pkt_mark={}", r.below(100_000) + 1), 120),
        (0, 9) => (1380, format!("in_port={inp},vlan_tci=0x1000/0x1000,dl_src={}", mac(r)), 105),
        (0, 10) => (1000, format!("arp,arp_sha={}", mac(r)), 85),
        (0, 11) => (500, format!("tun_src={},tun_dst={}", ip(v4(r)), ip(v4(r))), 135),
        (0, 12) => (500, format!("ct_state=+trk+est,ct_zone={}", r.below(1000) + 1), 155),
        // Table 1: ACL.
        (1, 0) => {
            let m = format!("tcp,nw_src={},nw_dst={},tp_src={},tp_dst={}", ip(v4(r)), ip(v4(r)), port(r), port(r));
            (15000, m, 1000)
        }
        (1, 1) => (10000, format!("udp,nw_src={},nw_dst={},tp_dst={}", ip(v4(r)), ip(v4(r)), port(r)), 1000),
        (1, 2) => (4000, format!("tcp,nw_dst={},tp_dst={}", ip(v4(r)), port(r)), 900),
        (1, 3) => (2000, format!("udp,nw_dst={},tp_dst={}", v4p(r, 24), port(r)), 900),
        (1, 4) => (1500, format!("tcp,tp_dst={}", port(r)), 800),
        (1, 5) => (1500, format!("udp,tp_src={}", port(r)), 800),
        (1, 6) => (2000, format!("tcp,nw_src={},tp_dst={}", v4p(r, 24), port(r)), 850),
        (1, 7) => (1500, format!("tcp6,ipv6_dst={},tp_dst={}", v6(r, 128), port(r)), 900),
        (1, 8) => (300, format!("icmp,icmp_type={},icmp_code={}", r.below(40), r.below(16)), 700),
        (1, 9) => (1000, format!("tcp,tcp_flags=+syn,tp_dst={}", port(r)), 950),
        (1, 10) => (60, format!("ip,nw_tos={}", (r.below(63) + 1) * 4), 600),
        (1, 11) => (4, format!("ip,nw_ttl={}", r.below(4) + 1), 610),
        (1, 12) => (1, "ip,nw_frag=yes".to_string(), 620),
        (1, 13) => (500, format!("ipv6,ipv6_label={}", r.below(1 << 20) + 1), 650),
        (1, 14) => (500, format!("icmp6,icmpv6_type=135,nd_target={}", v6(r, 128)), 660),
        // Table 2: routing; priority grows with the prefix length.
        (2, 0) => (200, format!("ip,nw_dst={}.0.0.0/8", r.below(223) + 1), 208),
        (2, 1) => {
            (3000, format!("ip,nw_dst={}.{}.0.0/16", [10, 100, 172, 192][r.below(4) as usize], r.below(256)), 216)
        }
        (2, 2) => (10812, format!("ip,nw_dst={}", v4p(r, 24)), 224),
        (2, 3) => (8000, format!("ip,nw_dst={}", ip(v4(r))), 232),
        (2, 4) => (2000, format!("ip,nw_src={}", v4p(r, 16)), 216),
        (2, 5) => (2000, format!("ip,nw_src={}", v4p(r, 24)), 224),
        (2, 6) => (2000, format!("metadata={},ip,nw_dst={}", r.below(64), v4p(r, 20)), 220),
        (2, 7) => (2000, format!("in_port={inp},ip,nw_src={}", ip(v4(r))), 232),
        (2, 8) => (2000, format!("ipv6,ipv6_dst={}", v6(r, 48)), 248),
        (2, 9) => (4000, format!("ipv6,ipv6_dst={}", v6(r, 64)), 264),
        (2, 10) => (2000, format!("ipv6,ipv6_src={}", v6(r, 64)), 264),
        (2, 11) => (1800, format!("arp,arp_tpa={}", ip(v4(r))), 232),
        (2, 12) => (300, format!("arp,arp_op=2,arp_tha={}", mac(r)), 240),
        (2, 13) => (20, format!("ip,nw_ecn={}", r.below(3) + 1), 100),
        _ => return None,
    })
}

/// 100,000 rules in 3 chained tables (see the module comment). Duplicates
/// (same table, match and priority) are redrawn.
fn pipeline3() -> Vec<FlowSpec> {
    let mut r = Rng(0x1234_5678_9abc_def1);
    let mut v = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for t in 0..3u8 {
        let next = if t < 2 { format!("goto_table:{}", t + 1) } else { "output:4".to_string() };
        let mut s = 0;
        while let Some((n, _, _)) = pipeline_rule(t, s, &mut r) {
            let mut added = 0;
            while added < n {
                let (_, m, prio) = pipeline_rule(t, s, &mut r).expect("shape exists");
                let prio = prio + r.below(8) as u32;
                if !seen.insert((t, m.clone(), prio)) {
                    continue;
                }
                let acts = match t {
                    0 => format!("write_metadata:{:#x}/0xff,{next}", r.below(64)),
                    1 => next.clone(),
                    _ => format!("output:{}", r.below(3) + 1),
                };
                v.push(parse_flow(&format!("table={t},priority={prio},{m},actions={acts}"), Need::Actions).unwrap());
                added += 1;
            }
            s += 1;
        }
        v.push(parse_flow(&format!("table={t},priority=0,actions={next}"), Need::Actions).unwrap());
    }
    v
}

/// A packet whose fields mostly miss rule values.
fn background(r: &mut Rng) -> FlowKey {
    let mut k = FlowKey::ZERO;
    k.set_in_port(r.below(48) as u32 + 1);
    k.set_dl_src(0x0400_0000_0000 | r.below(1 << 40));
    k.set_dl_dst(0x0400_0000_0000 | r.below(1 << 40));
    k.set_nw_ttl(64);
    k.set_dl_type(flow::key::ethertype::IPV4);
    k.set_nw_src(v4(r));
    k.set_nw_dst(v4(r));
    k.set_nw_proto([flow::key::ipproto::TCP, flow::key::ipproto::UDP][r.below(2) as usize]);
    k.set_tcp_flags(0x010);
    k.set_tp_src(30000 + r.below(30000) as u16);
    k.set_tp_dst(30000 + r.below(30000) as u16);
    k
}

fn bench_pipeline3(c: &mut Criterion) {
    let specs = pipeline3();
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
    let masks: std::collections::HashSet<_> = specs.iter().map(|s| (s.table, s.matched.mask)).collect();
    let mut fields = FlowKey::ZERO;
    specs.iter().for_each(|s| fields.or_assign(&s.matched.mask));
    // The canonical fields come first in the table, aliases and sub-fields after.
    let canonical = flow::fields::FIELDS.iter().take_while(|f| f.name != "eth_dst");
    let n_fields = canonical.filter(|f| f.loc.get(&fields) != 0).count();
    eprintln!(
        "pipeline3: {} rules, {} masks, {n_fields} fields, inserted in {el:.2?} ({:.0} rules/s)",
        of.n_rules(),
        masks.len(),
        of.n_rules() as f64 / el.as_secs_f64()
    );

    // Varied keys: a random rule's bits over a random background packet.
    let mut r = Rng(42);
    let keys: Vec<FlowKey> = (0..4096)
        .map(|_| {
            let mut k = background(&mut r);
            let m = &specs[r.below(specs.len() as u64) as usize].matched;
            for i in 0..flow::WORDS {
                k.w[i] = (k.w[i] & !m.mask.w[i]) | m.key.w[i];
            }
            k
        })
        .collect();
    let bits: u32 =
        keys.iter().map(|k| of.translate_key(k, 0).mask.w.iter().map(|w| w.count_ones()).sum::<u32>()).sum();
    eprintln!("pipeline3: average {:.1} megaflow mask bits", bits as f64 / keys.len() as f64);

    let mut g = c.benchmark_group("slowpath");
    g.throughput(Throughput::Elements(1));
    let k = keys[0];
    g.bench_function("xlate_3_tables_pipeline_100k_rules", |b| {
        b.iter(|| black_box(of.translate_key(black_box(&k), 0)))
    });
    let mut i = 0;
    g.bench_function("upcall_rate_3_tables_pipeline_100k_rules", |b| {
        b.iter(|| {
            i = (i + 1) & 4095;
            black_box(of.translate_key(black_box(&keys[i]), 0))
        })
    });
    g.finish();
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

criterion_group!(benches, bench, bench_pipeline3);
criterion_main!(benches);
