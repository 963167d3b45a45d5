//! Classifier at production scale: 100,000 rules in 40 subtables whose
//! masks use 30 distinct fields, in three families like a real pipeline's:
//! L2 tables (ports, MACs, VLANs, tunnel and conntrack metadata), IPv4 and
//! IPv6 prefix tables (routing-like, priority by prefix length, plus ARP),
//! and 5-tuple / L4 tables (ACL-like, highest priority).
//!
//! Reported: ns per lookup over 4096 varied packets that hit (derived from
//! random rules, other fields random) and 4096 that miss; rules inserted
//! per second into an empty classifier; and, printed once, the average
//! number of wc bits per lookup.

use classifier::Classifier;
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use flow::key::{ethertype as et, ipproto, loc, FlowKey, Loc, FRAG_ANY, VLAN_PRESENT};
use flow::Match;

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

fn pfx(bits: u32, len: u32) -> u128 {
    if len == 0 {
        0
    } else {
        (u128::MAX >> (128 - bits) >> (bits - len)) << (bits - len)
    }
}

/// A rule under construction: fields set with their masks.
struct B(FlowKey, FlowKey);
impl B {
    fn f(self, f: Loc, v: u128) -> B {
        self.masked(f, v, f.max())
    }
    fn masked(mut self, f: Loc, v: u128, m: u128) -> B {
        f.set(&mut self.0, v & m);
        let old = f.get(&self.1);
        f.set(&mut self.1, old | m);
        self
    }
    fn eth(self, t: u16) -> B {
        self.f(loc::DL_TYPE, t as u128)
    }
    fn proto(self, t: u16, p: u8) -> B {
        self.eth(t).f(loc::NW_PROTO, p as u128)
    }
}

fn mac(r: &mut Rng) -> u128 {
    (0x0200_0000_0000 | r.below(1 << 24)) as u128
}
/// Rule addresses live in 10/8, 172.16/12 and 192.168/16.
fn v4(r: &mut Rng) -> u128 {
    [0x0a00_0000 | r.below(1 << 24), 0xac10_0000 | r.below(1 << 20), 0xc0a8_0000 | r.below(1 << 16)]
        [r.below(3) as usize] as u128
}
fn v6(r: &mut Rng) -> u128 {
    (0x2001_0db8u128 << 96) | ((r.below(256) as u128) << 64) | r.next() as u128
}
fn port(r: &mut Rng) -> u128 {
    [22, 53, 80, 443, 8080][r.below(5) as usize] as u128 + r.below(2000) as u128
}

/// Subtable `t`'s rule number `i`: (match, priority).
fn rule(t: usize, r: &mut Rng) -> (Match, u32) {
    let b = B(FlowKey::ZERO, FlowKey::ZERO);
    let inp = |r: &mut Rng| r.below(48) as u128 + 1;
    let (b, prio) = match t {
        // L2 family.
        0 => (b.f(loc::IN_PORT, inp(r)).f(loc::DL_DST, mac(r)), 100),
        1 => (b.f(loc::IN_PORT, inp(r)).f(loc::DL_SRC, mac(r)), 100),
        2 => {
            (b.f(loc::DL_DST, mac(r)).masked(loc::VLAN_TCI, (VLAN_PRESENT as u64 | r.below(4000)) as u128, 0x1fff), 110)
        }
        3 => (b.f(loc::METADATA, r.below(64) as u128).f(loc::DL_DST, mac(r)), 120),
        4 => (b.f(loc::TUN_ID, r.below(5000) as u128).f(loc::DL_DST, mac(r)), 130),
        5 => (
            b.f(loc::IN_PORT, inp(r))
                .masked(loc::VLAN_TCI, 0x1000 | r.below(4000) as u128, 0x1fff)
                .f(loc::DL_SRC, mac(r)),
            105,
        ),
        6 => (b.f(loc::DL_SRC, mac(r)).f(loc::DL_DST, mac(r)), 90),
        7 => (b.f(loc::IN_PORT, inp(r)).eth([et::IPV4, et::IPV6, et::ARP][r.below(3) as usize]), 80),
        8 => (b.f(loc::RECIRC_ID, r.below(4000) as u128 + 1).f(loc::IN_PORT, inp(r)), 140),
        9 => (
            b.masked(loc::CT_STATE, 0x21 + r.below(4) as u128 * 2, 0x2f).f(loc::CT_ZONE, r.below(1000) as u128 + 1),
            150,
        ),
        // Prefix family: priority grows with prefix length.
        10 => (b.eth(et::IPV4).masked(loc::NW_DST, v4(r), pfx(32, 8)), 208),
        11 => (b.eth(et::IPV4).masked(loc::NW_DST, v4(r), pfx(32, 16)), 216),
        12 => (b.eth(et::IPV4).masked(loc::NW_DST, v4(r), pfx(32, 24)), 224),
        13 => (b.eth(et::IPV4).f(loc::NW_DST, v4(r)), 232),
        14 => (b.eth(et::IPV4).masked(loc::NW_SRC, v4(r), pfx(32, 16)), 216),
        15 => (b.eth(et::IPV4).masked(loc::NW_SRC, v4(r), pfx(32, 24)), 224),
        16 => (b.f(loc::METADATA, r.below(64) as u128).eth(et::IPV4).masked(loc::NW_DST, v4(r), pfx(32, 20)), 220),
        17 => (b.f(loc::IN_PORT, inp(r)).eth(et::IPV4).f(loc::NW_SRC, v4(r)), 232),
        18 => (b.eth(et::IPV6).masked(loc::IPV6_DST, v6(r), pfx(128, 48)), 248),
        19 => (b.eth(et::IPV6).masked(loc::IPV6_DST, v6(r), pfx(128, 64)), 264),
        20 => (b.eth(et::IPV6).masked(loc::IPV6_SRC, v6(r), pfx(128, 64)), 264),
        21 => (b.proto(et::ARP, 1).f(loc::NW_DST, v4(r)), 232),
        // 5-tuple and L4 family.
        22 => {
            let b = b.proto(et::IPV4, ipproto::TCP).f(loc::NW_SRC, v4(r)).f(loc::NW_DST, v4(r));
            (b.f(loc::TP_SRC, port(r)).f(loc::TP_DST, port(r)), 1000)
        }
        23 => {
            (b.proto(et::IPV4, ipproto::UDP).f(loc::NW_SRC, v4(r)).f(loc::NW_DST, v4(r)).f(loc::TP_DST, port(r)), 1000)
        }
        24 => (b.proto(et::IPV4, ipproto::TCP).f(loc::NW_DST, v4(r)).f(loc::TP_DST, port(r)), 900),
        25 => (b.proto(et::IPV4, ipproto::UDP).masked(loc::NW_DST, v4(r), pfx(32, 24)).f(loc::TP_DST, port(r)), 900),
        26 => (b.proto(et::IPV4, ipproto::TCP).f(loc::TP_DST, port(r)), 800),
        27 => (b.proto(et::IPV4, ipproto::UDP).f(loc::TP_SRC, port(r)), 800),
        28 => (b.proto(et::IPV4, ipproto::TCP).masked(loc::NW_SRC, v4(r), pfx(32, 24)).f(loc::TP_DST, port(r)), 850),
        29 => (b.proto(et::IPV6, ipproto::TCP).f(loc::IPV6_DST, v6(r)).f(loc::TP_DST, port(r)), 900),
        30 => (
            b.proto(et::IPV4, ipproto::ICMP).f(loc::TP_SRC, r.below(40) as u128).f(loc::TP_DST, r.below(16) as u128),
            700,
        ),
        31 => (b.proto(et::IPV4, ipproto::TCP).masked(loc::TCP_FLAGS, 0x002, 0x012).f(loc::TP_DST, port(r)), 950),
        32 => (b.eth(et::IPV4).masked(loc::NW_TOS, (r.below(63) as u128 + 1) << 2, 0xfc), 600),
        33 => (b.eth(et::IPV4).f(loc::NW_TTL, r.below(4) as u128 + 1), 610),
        34 => (b.eth(et::IPV4).masked(loc::NW_FRAG, FRAG_ANY as u128, FRAG_ANY as u128), 620),
        35 => (
            b.masked(loc::CT_MARK, r.below(4000) as u128 + 1, 0xffff)
                .proto(et::IPV4, ipproto::TCP)
                .f(loc::TP_DST, port(r)),
            960,
        ),
        36 => (b.f(loc::PKT_MARK, r.below(100_000) as u128 + 1), 500),
        37 => (b.eth(et::IPV6).f(loc::IPV6_LABEL, r.below(1 << 20) as u128 + 1), 510),
        38 => (b.proto(et::ARP, 2).f(loc::ARP_SHA, mac(r)), 520),
        _ => {
            let b = b.f(loc::METADATA, r.below(64) as u128).masked(loc::CT_STATE, 0x21, 0x21);
            (b.proto(et::IPV4, ipproto::TCP).masked(loc::NW_DST, v4(r), pfx(32, 24)).f(loc::TP_DST, port(r)), 970)
        }
    };
    (Match::new(b.0, b.1), prio + r.below(8) as u32)
}

/// Rules per subtable: small-domain tables get few, 5-tuples many.
fn counts() -> [usize; 40] {
    let mut c = [2000usize; 40];
    for (t, n) in
        [(7, 120), (9, 1500), (10, 200), (30, 400), (31, 1000), (32, 60), (33, 4), (34, 1), (26, 1500), (27, 1500)]
    {
        c[t] = n;
    }
    let rest: usize = c.iter().sum::<usize>() - c[22] - c[23];
    c[22] = (100_000 - rest) / 2;
    c[23] = 100_000 - rest - c[22];
    c
}

/// A random packet whose fields mostly miss rule values.
fn background(r: &mut Rng) -> FlowKey {
    let mut k = FlowKey::ZERO;
    k.set_in_port(1000 + r.below(100) as u32);
    k.set_dl_src(0x0400_0000_0000 | r.below(1 << 40));
    k.set_dl_dst(0x0400_0000_0000 | r.below(1 << 40));
    k.set_nw_ttl(64);
    match r.below(10) {
        0 => {
            k.set_dl_type(et::IPV6);
            k.set_ipv6_src((0xfd00u128 << 112) | r.next() as u128);
            k.set_ipv6_dst((0xfd00u128 << 112) | r.next() as u128);
            k.set_nw_proto(ipproto::TCP);
        }
        1 => {
            k.set_dl_type(et::ARP);
            k.set_nw_proto(1);
            k.set_nw_src(0x6440_0000 | r.below(1 << 22) as u32);
            k.set_nw_dst(0x6440_0000 | r.below(1 << 22) as u32);
        }
        _ => {
            k.set_dl_type(et::IPV4);
            k.set_nw_src(0x6440_0000 | r.below(1 << 22) as u32);
            k.set_nw_dst(0x6440_0000 | r.below(1 << 22) as u32);
            k.set_nw_proto([ipproto::TCP, ipproto::UDP][r.below(2) as usize]);
            k.set_tcp_flags(0x010);
        }
    }
    k.set_tp_src(30000 + r.below(30000) as u16);
    k.set_tp_dst(30000 + r.below(30000) as u16);
    k
}

fn build(rules: &[(Match, u32)]) -> Classifier<u32> {
    let mut cls = Classifier::new();
    for (i, (m, p)) in rules.iter().enumerate() {
        cls.insert(*m, *p, i as u32, 1);
    }
    cls
}

fn bench(c: &mut Criterion) {
    let mut r = Rng(0x1234_5678_9abc_def1);
    let rules: Vec<(Match, u32)> =
        counts().iter().enumerate().flat_map(|(t, &n)| (0..n).map(|_| rule(t, &mut r)).collect::<Vec<_>>()).collect();
    let cls = build(&rules);
    let masks: Vec<_> = rules.iter().map(|r| r.0.mask).collect();
    for (t, n) in counts().iter().enumerate() {
        let start: usize = counts()[..t].iter().sum();
        if let Some(u) = masks[..start].iter().position(|m| *m == masks[start]) {
            eprintln!("subtable {t} ({n} rules) shares its mask with rule {u}");
        }
    }
    eprintln!("{} rules in {} subtables", cls.len(1), cls.n_subtables());

    // 4096 hits: a random rule's bits over a random background packet.
    let (mut hits, mut misses) = (Vec::new(), Vec::new());
    while hits.len() < 4096 {
        let (m, _) = &rules[r.below(rules.len() as u64) as usize];
        let mut k = background(&mut r);
        for i in 0..flow::WORDS {
            k.w[i] = (k.w[i] & !m.mask.w[i]) | m.key.w[i];
        }
        if cls.lookup(&k, 1, &mut FlowKey::default()).is_some() {
            hits.push(k);
        }
    }
    while misses.len() < 4096 {
        let k = background(&mut r);
        if cls.lookup(&k, 1, &mut FlowKey::default()).is_none() {
            misses.push(k);
        }
    }
    for (name, keys) in [("hit", &hits), ("miss", &misses)] {
        let bits: u32 = keys
            .iter()
            .map(|k| {
                let mut wc = FlowKey::ZERO;
                cls.lookup(k, 1, &mut wc);
                wc.w.iter().map(|w| w.count_ones()).sum::<u32>()
            })
            .sum();
        eprintln!("{name}: average {:.1} wc bits per lookup", bits as f64 / keys.len() as f64);
    }

    let mut g = c.benchmark_group("lookup_100k_rules_40_subtables");
    g.throughput(Throughput::Elements(1));
    for (name, keys) in [("hit", &hits), ("miss", &misses)] {
        let mut i = 0;
        g.bench_function(name, |b| {
            b.iter(|| {
                i = (i + 1) & 4095;
                let mut wc = FlowKey::ZERO;
                black_box(cls.lookup(black_box(&keys[i]), 1, &mut wc));
                wc
            })
        });
    }
    g.finish();

    let mut g = c.benchmark_group("insert");
    g.throughput(Throughput::Elements(rules.len() as u64));
    g.sample_size(10);
    g.bench_function("100k_rules", |b| b.iter(|| black_box(build(&rules).n_subtables())));
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
