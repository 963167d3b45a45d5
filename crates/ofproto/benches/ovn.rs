//! Translation through OVN's pipeline (issue 15's translation benchmark).
//!
//! The rules are what ovn-controller 23.03 installed on br-int for the OVN
//! benchmark's logical network (switches ls1 and ls2, router lr1, vm1 and
//! vm2 on ls1, vm3 on ls2), dumped by `ovs-ofctl` from Open vSwitch 3.1 and
//! stored in `benches/ovn/` (`ovn_bench --capture`, see the README there).
//! The packets are the OVN benchmark's (`crates/xvs/examples/ovn_bench.rs`),
//! built as frames and extracted as the datapath extracts them:
//! * `setup`: vm1 to a different unknown MAC on ls1 each time; OVN's L2
//!   lookup misses and drops. This is the flow-setup case whose upcall rate
//!   the OVN benchmark measures in both switches end to end;
//! * `switch`: vm1 -> vm2 UDP, a different source port each time;
//! * `router`: vm1 -> vm3 through lr1, a different source port each time;
//! * `acl`: `switch` over the flows with the `acl` case's `allow-related`
//!   ACLs: the first pass, up to the `ct()` that recirculates.
//!
//! Each translation is a miss (`translate_key` caches nothing); 4,096
//! different keys are cycled, and the last 4,096 translations are kept
//! alive, as the megaflows made from them would be. Before measuring, every case's translation is
//! checked: the right output port, or a drop, and a megaflow mask that
//! includes what the case varies.
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use dpif::DpAction;
use flow::key::FlowKey;

#[path = "ovn/fixture.rs"]
mod fixture;
use fixture::bridge;
use ofproto::Ofproto;

fn mac(s: &str) -> [u8; 6] {
    let mut m = [0u8; 6];
    for (b, p) in m.iter_mut().zip(s.split(':')) {
        *b = u8::from_str_radix(p, 16).expect("a MAC");
    }
    m
}

fn ip(s: &str) -> u32 {
    u32::from(s.parse::<std::net::Ipv4Addr>().expect("an IPv4 address"))
}

/// vm1's UDP frame to `dst_mac`/`dst_ip`, as the datapath extracts it.
fn key(dst_mac: [u8; 6], dst_ip: &str, sport: u16) -> FlowKey {
    let f = wire::build::Frame::new(mac("00:00:00:00:01:01"), dst_mac)
        .ipv4(ip("10.0.1.1"), ip(dst_ip))
        .udp(sport, 5001)
        .payload(&[0u8; 18])
        .build();
    let (k, _, err) = flow::extract(&f, 1);
    assert!(err.is_none(), "{err:?}");
    k
}

fn outputs(a: &[DpAction]) -> Vec<u32> {
    a.iter().filter_map(|a| if let DpAction::Output(p) = a { Some(*p) } else { None }).collect()
}

fn bench(c: &mut Criterion) {
    let plain = bridge("flows.txt");
    let acl = bridge("acl-flows.txt");
    eprintln!("ovn: {} flows, {} with the ACLs", plain.n_rules(), acl.n_rules());
    let n = 4096u16;
    let setup: Vec<_> = (0..n)
        .map(|i| {
            let m = (0x02_00_0000_0000u64 | (1 << 24) | i as u64).to_be_bytes();
            key([m[2], m[3], m[4], m[5], m[6], m[7]], "10.0.1.2", 10_000)
        })
        .collect();
    let switch: Vec<_> = (0..n).map(|i| key(mac("00:00:00:00:01:02"), "10.0.1.2", 10_000 + i)).collect();
    let router: Vec<_> = (0..n).map(|i| key(mac("00:00:00:00:ff:01"), "10.0.2.1", 10_000 + i)).collect();
    let cases: [(&str, &Ofproto, &Vec<FlowKey>); 4] =
        [("setup", &plain, &setup), ("switch", &plain, &switch), ("router", &plain, &router), ("acl", &acl, &switch)];

    // What each case must do, checked on its first key.
    for (name, of, keys) in cases {
        let t = of.translate_key(&keys[0], 0);
        let acts = dpif::format_actions(&t.actions);
        eprintln!("ovn {name}: {} rules, megaflow {acts}", t.counters.len());
        match name {
            "setup" => assert!(outputs(&t.actions).is_empty(), "an unknown MAC is dropped: {acts}"),
            "switch" => assert_eq!(outputs(&t.actions), vec![2], "vm1 -> vm2: {acts}"),
            "router" => assert_eq!(outputs(&t.actions), vec![3], "vm1 -> vm3: {acts}"),
            _ => {
                assert!(acts.contains("ct(") && acts.contains("recirc("), "the ACLs send it through conntrack: {acts}")
            }
        }
        // The varied field is in the megaflow, so each key is a new one.
        if name == "setup" {
            assert_eq!(t.mask.dl_dst(), 0xffff_ffff_ffff, "dl_dst is matched exactly");
        }
    }

    // `OVN_BENCH_RUN=case:N`: only translate N keys of one case and stop
    // (a fixed amount of work for instruction and cache-miss counts under
    // `valgrind --tool=cachegrind`, which this machine's noisy timing
    // cannot replace).
    if let Ok(spec) = std::env::var("OVN_BENCH_RUN") {
        let (name, count) = spec.split_once(':').expect("OVN_BENCH_RUN=case:N");
        let count: usize = count.parse().expect("a count");
        let (_, of, keys) = cases.iter().find(|c| c.0 == name).expect("a case: setup, switch, router or acl");
        let mut held: Vec<Option<dpif::Translation>> = (0..n).map(|_| None).collect();
        for i in 0..count {
            let j = i & (n as usize - 1);
            held[j] = Some(of.translate_key(black_box(&keys[j]), 64));
        }
        eprintln!("ovn {name}: {count} translations");
        std::process::exit(0);
    }

    // The lookup memo's worth, in one process: memo off and on in turns
    // of 2,000 translations, so the machine's drift falls on both alike.
    if std::env::var("OVN_BENCH_MEMO_AB").is_ok() {
        for (name, of, keys) in cases {
            let mut t = [Vec::new(), Vec::new()];
            let mut held: Vec<Option<dpif::Translation>> = (0..n).map(|_| None).collect();
            let mut i = 0;
            for round in 0..40 {
                let on = round % 2 == 1;
                ofproto::xlate::set_lookup_memo(on);
                let t0 = std::time::Instant::now();
                for _ in 0..2000 {
                    i = (i + 1) & (n as usize - 1);
                    held[i] = Some(of.translate_key(black_box(&keys[i]), 64));
                }
                t[on as usize].push(t0.elapsed().as_nanos() as f64 / 2000.0);
            }
            let med = |v: &mut Vec<f64>| {
                v.sort_by(|a, b| a.partial_cmp(b).unwrap());
                v[v.len() / 2]
            };
            let (off, on) = (med(&mut t[0]), med(&mut t[1]));
            eprintln!("memo a/b {name}: off {off:.0} ns, on {on:.0} ns per translation, {:.2}x", off / on);
        }
        ofproto::xlate::set_lookup_memo(true);
    }

    let mut g = c.benchmark_group("ovn");
    g.throughput(Throughput::Elements(1));
    for (name, of, keys) in cases {
        // The translations are kept, as megaflows keep them (and share
        // their counter lists); each replaces the one made 4,096 misses ago.
        let mut held: Vec<Option<dpif::Translation>> = (0..n).map(|_| None).collect();
        let mut i = 0;
        g.bench_function(format!("upcall_{name}"), |b| {
            b.iter(|| {
                i = (i + 1) & (n as usize - 1);
                held[i] = Some(of.translate_key(black_box(&keys[i]), 64));
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
