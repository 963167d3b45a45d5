//! The caches in front of the slow path: EMC insertion and hits, megaflow
//! subtable ranking, the megaflow limit, idle expiry, revalidation after
//! rule changes (including a property test: every packet's executed
//! actions equal a fresh translation), recirculation and a busy slow path.

mod common;
use common::*;
use dpif::{format_actions, DpAction, Pmd, PmdConfig};
use flow::FlowKey;
use netdev::dummy::DummyPort;
use netdev::{Netdev, Packet};
use wire::build::Frame;

const A: [u8; 6] = [2, 0, 0, 0, 0, 1];
const B: [u8; 6] = [2, 0, 0, 0, 0, 2];

/// A poll thread with the EMC at `emc` (1 in N insertions) and no port
/// hint, so that every lookup exercises the EMC and the classifier.
fn pmd(emc: u32) -> Pmd {
    Pmd::new(PmdConfig { emc_insert_inv_prob: emc, port_hint: false, ..PmdConfig::default() })
}

fn udp_frame(src: u32, dst: u32, dport: u16) -> Vec<u8> {
    Frame::new(A, B).ipv4(src, dst).udp(1000, dport).pad_to(64).build()
}

#[test]
fn emc_hit_after_insertion() {
    let mut m = Model::new();
    m.add(10, "in_port=1,udp,nw_dst=10.0.0.2", out(2));
    let mut p = pmd(1);
    p.set_generation(m.generation);
    let k = udp_key(1, 0x0a00_0001, 0x0a00_0002, 53);
    assert_eq!(&*p.actions_for_key(&k, &m, 0), &out(2)[..]);
    assert_eq!(&*p.actions_for_key(&k, &m, 0), &out(2)[..]);
    // A different key under the same megaflow: megaflow hit, then EMC.
    let k2 = udp_key(1, 0x0a00_0009, 0x0a00_0002, 53);
    assert_eq!(&*p.actions_for_key(&k2, &m, 0), &out(2)[..]);
    assert_eq!(&*p.actions_for_key(&k2, &m, 0), &out(2)[..]);
    let st = p.stats();
    assert_eq!((st.upcalls, st.megaflow_hits, st.emc_hits), (1, 1, 2));
    assert_eq!(p.n_megaflows(), 1);
    assert_eq!(m.calls.get(), 1);
}

#[test]
fn port_hint_serves_a_ports_megaflow_and_follows_changes() {
    let mut m = Model::new();
    m.add(10, "in_port=1", out(2));
    m.add(10, "in_port=3,udp,nw_dst=10.0.0.2", out(4));
    m.add(5, "in_port=3", out(5));
    let mut p = Pmd::new(PmdConfig::default());
    p.set_generation(m.generation);
    // Port 1: one megaflow for every key; after the first packet's upcall
    // each other key is served by the hint, never reaching the EMC.
    for i in 0..50 {
        let k = udp_key(1, 0x0a00_0000 + i, 0x0b00_0000 + i, 53);
        assert_eq!(&*p.actions_for_key(&k, &m, 0), &out(2)[..]);
    }
    let st = p.stats();
    assert_eq!((st.upcalls, st.simple_hits, st.emc_hits, st.megaflow_hits), (1, 49, 0, 0));
    // Port 3: two megaflows; alternating keys miss the hint and are found
    // by the caches, each with its own actions.
    for i in 0..20u32 {
        let dst = if i % 2 == 0 { 0x0a00_0002 } else { 0x0a00_0003 };
        let k = udp_key(3, 0x0a00_0001, dst, 53);
        let want = if i % 2 == 0 { out(4) } else { out(5) };
        assert_eq!(&*p.actions_for_key(&k, &m, 0), &want[..], "packet {i}");
    }
    assert_eq!(p.stats().simple_hits, 49, "the hint never matched an alternating key");
    // A rule change: the hinted megaflow is revalidated and, its actions
    // changed, removed; the next packet gets the new actions.
    m.set_actions(0, out(7));
    p.set_generation(m.generation);
    let k = udp_key(1, 0x0a00_0001, 0x0b00_0001, 53);
    assert_eq!(&*p.actions_for_key(&k, &m, 0), &out(7)[..]);
    assert_eq!(&*p.actions_for_key(&udp_key(1, 9, 9, 9), &m, 0), &out(7)[..]);
    assert_eq!(p.stats().simple_hits, 50);
    // Recirculated keys never use the hint of their port: they have
    // hints of their own, by recirculation id and port.
    let mut r = udp_key(1, 0x0a00_0001, 0x0b00_0001, 53);
    r.set_recirc_id(5);
    let before = p.stats().simple_hits;
    p.actions_for_key(&r, &m, 0);
    assert_eq!(p.stats().simple_hits, before);
    let mut r2 = udp_key(1, 0x0a00_0002, 0x0b00_0002, 53);
    r2.set_recirc_id(5);
    p.actions_for_key(&r2, &m, 0);
    assert_eq!(p.stats().simple_hits, before + 1, "the second pass of another connection: the recirculation hint");
    let mut r3 = r2;
    r3.set_recirc_id(6);
    p.actions_for_key(&r3, &m, 0);
    assert_eq!(p.stats().simple_hits, before + 1, "another recirculation id: no hint yet");
    // The fresh packets' hint was left alone.
    p.actions_for_key(&udp_key(1, 7, 7, 7), &m, 0);
    assert_eq!(p.stats().simple_hits, before + 2);
}

#[test]
fn a_port_only_megaflow_forwards_without_a_key_and_still_refuses_bad_frames() {
    let mut m = Model::new();
    m.add(10, "in_port=1", out(2));
    m.add(10, "in_port=3,udp", out(4));
    let mut p = Pmd::new(PmdConfig::default());
    p.set_generation(m.generation);
    let mut rec = Rec::default();
    // As a vhost-user port delivers them: every checksum complete.
    let vpkt = |f: &[u8], port: u32| {
        let mut q = pkt(f, port);
        q.csum_complete = true;
        q
    };
    let runt = vec![2u8; 10];
    let mut short_ip = udp_frame(1, 2, 3);
    short_ip.truncate(14 + 12);
    for b in 0..4u32 {
        let mut batch: Vec<Packet> = (0..16).map(|i| vpkt(&udp_frame(b * 16 + i, 9, 53), 1)).collect();
        if b == 2 {
            batch.insert(3, vpkt(&runt, 1));
            batch.insert(9, vpkt(&short_ip, 1));
        }
        // The other port's megaflow looks at headers: never without a key.
        // (A batch holds one port's packets; mixed, each still goes right.)
        let at = if b == 1 { 8 } else { batch.len() };
        batch.insert(at, vpkt(&udp_frame(b, 9, 53), 3));
        p.process_batch(&mut batch, &m, b as u64, &mut rec);
    }
    // Every good frame went out, in order; the bad ones were dropped and
    // counted as extraction would, the hint kept serving after them.
    let to2: Vec<_> = rec.out.iter().filter(|o| o.0 == 2).map(|o| o.1.clone()).collect();
    assert_eq!(to2, (0..64).map(|i| udp_frame(i, 9, 53)).collect::<Vec<_>>());
    assert_eq!(rec.out.iter().filter(|o| o.0 == 4).count(), 4);
    let drops = p.stats().drops_by_reason();
    assert!(drops.contains(&("drop_rx_runt", 1)) && drops.contains(&("drop_rx_truncated_ipv4", 1)), "{drops:?}");
    let st = p.stats();
    assert_eq!((st.packets, st.upcalls), (68, 2));
    // Port 1's packets after the first.
    assert_eq!(st.simple_hits, 63 + 3);
    assert_eq!(st.quick_outputs, 63, "{st:?}");
    // One hit in 16 (of both ports' 66) was sampled for the kernel fast
    // path, with its whole key, also without a lookup.
    let sampled: Vec<_> = p.recent_keys().iter().map(|k| (k.in_port(), k.nw_src(), k.tp_dst())).collect();
    assert_eq!(sampled.len(), 4, "{sampled:?}");
    assert!(sampled.iter().all(|&(port, src, dport)| port == 1 && src < 64 && dport == 53), "{sampled:?}");
    // The megaflow's counters saw every packet it forwarded.
    let mf = p.dump_megaflows();
    let f = mf.iter().find(|f| f.actions == out(2)).expect("port 1's megaflow");
    assert_eq!((f.packets, f.bytes), (64, 64 * udp_frame(0, 9, 53).len() as u64));
    // Frames that may owe a checksum (from a namespace's stack) are
    // looked at as before.
    p.process_batch(&mut vec![pkt(&udp_frame(1, 9, 53), 1)], &m, 5, &mut rec);
    assert_eq!(p.stats().quick_outputs, 63);
    assert_eq!(rec.out.last().map(|o| o.0), Some(2));
    // Batches of port 1 alone are handed to the output queue whole, bad
    // frames taken out in place, the rest in order.
    rec.out.clear();
    for b in 0..3u32 {
        let mut batch: Vec<Packet> = (0..32).map(|i| vpkt(&udp_frame(1000 + b * 32 + i, 9, 53), 1)).collect();
        if b == 1 {
            batch.insert(0, vpkt(&runt, 1));
            batch.insert(20, vpkt(&short_ip, 1));
            batch.push(vpkt(&runt, 1));
        }
        p.process_batch(&mut batch, &m, 6 + b as u64, &mut rec);
        assert!(batch.is_empty());
    }
    assert_eq!(rec.out, (0..96).map(|i| (2, udp_frame(1000 + i, 9, 53))).collect::<Vec<_>>());
    let st = p.stats();
    assert_eq!((st.quick_outputs, st.packets), (63 + 96, 69 + 96));
    let drops = st.drops_by_reason();
    assert!(drops.contains(&("drop_rx_runt", 3)) && drops.contains(&("drop_rx_truncated_ipv4", 2)), "{drops:?}");
    let mf = p.dump_megaflows();
    let f = mf.iter().find(|f| f.actions == out(2)).expect("port 1's megaflow");
    assert_eq!(f.packets, 64 + 1 + 96);
}

#[test]
fn a_hint_that_keeps_missing_is_tried_now_and_then_and_comes_back() {
    let mut m = Model::new();
    // One megaflow per destination: the rules match nw_dst exactly.
    for i in 0..200 {
        m.add(10, &format!("in_port=1,udp,nw_dst=10.0.0.{i}"), out(2));
    }
    let mut p = Pmd::new(PmdConfig::default());
    p.set_generation(m.generation);
    for i in 0..200u32 {
        let k = udp_key(1, 0x0a00_0001, 0x0a00_0000 + i % 200, 53);
        assert_eq!(&*p.actions_for_key(&k, &m, 0), &out(2)[..], "packet {i}");
    }
    assert_eq!(p.stats().simple_hits, 0);
    // The port's packets share one megaflow again. The hint, given up
    // after its misses, is not tried on the first of them (they go to the
    // caches) but within 32 packets, and from its first hit on it serves
    // them all. (A hint tried on every packet would serve 99.)
    let k = udp_key(1, 0x0a00_0001, 0x0a00_0063, 53);
    for _ in 0..100 {
        assert_eq!(&*p.actions_for_key(&k, &m, 0), &out(2)[..]);
    }
    let hits = p.stats().simple_hits;
    assert!((100 - 32..99).contains(&hits), "hint hits after the change: {hits}");
}

/// EMC hits on a second pass over many distinct keys, all under one
/// megaflow: the first pass inserts each key with probability 1/N.
fn second_pass_emc_hits(n: u32, keys: u32) -> u64 {
    let mut m = Model::new();
    m.add(10, "in_port=1", out(2));
    // Every lookup tries the EMC (with one megaflow the gate would close
    // it, see `emc_gates_off_while_the_classifier_is_cheap`).
    let mut p =
        Pmd::new(PmdConfig { emc_insert_inv_prob: n, port_hint: false, emc_gate: false, ..PmdConfig::default() });
    p.set_generation(m.generation);
    let key = |i: u32| udp_key(1, 0x0a00_0000 + i, 0x0b00_0000 + i * 7, 53);
    for i in 0..keys {
        p.actions_for_key(&key(i), &m, 0);
    }
    let before = p.stats().emc_hits;
    for i in 0..keys {
        p.actions_for_key(&key(i), &m, 0);
    }
    p.stats().emc_hits - before
}

#[test]
fn emc_insertion_is_probabilistic() {
    // N = 1: every key inserted (a few lost to 2-way collisions).
    let all = second_pass_emc_hits(1, 2000);
    assert!(all >= 1800, "N=1: {all} of 2000");
    // N = 10: about 1 in 10 of 5000 (mean 500, sd ~21).
    let tenth = second_pass_emc_hits(10, 5000);
    assert!((400..=600).contains(&tenth), "N=10: {tenth} of 5000");
    // N = 100 (the default): about 50 of 5000.
    let hundredth = second_pass_emc_hits(100, 5000);
    assert!((20..=90).contains(&hundredth), "N=100: {hundredth} of 5000");
    assert_eq!(PmdConfig::default().emc_insert_inv_prob, 100);
    // N = 0: no EMC at all.
    assert_eq!(second_pass_emc_hits(0, 500), 0);
}

/// The EMC gate: with one megaflow (the classifier finds it in one
/// probe) the EMC goes off after a window, and the classifier serves the
/// keys; with keys spread over six subtables (about three probes per key)
/// it stays on; with the gate off (Open vSwitch's behaviour) it never
/// closes.
#[test]
fn emc_gates_off_while_the_classifier_is_cheap() {
    let mut m = Model::new();
    m.add(10, "in_port=1", out(2));
    let mut p = pmd(100);
    p.set_generation(m.generation);
    assert!(p.emc_active());
    let key = |i: u32| udp_key(1, 0x0a00_0000 + i, 0x0b00_0000 + i * 7, 53);
    for i in 0..5000 {
        assert_eq!(&*p.actions_for_key(&key(i), &m, 0), &out(2)[..]);
    }
    assert!(!p.emc_active(), "one probe per megaflow hit");
    assert_eq!(p.stats().emc_gated, 1);
    // Keys seen before (some in the EMC) are served by the classifier now.
    let (emc0, mf0) = (p.stats().emc_hits, p.stats().megaflow_hits);
    for i in 0..1000 {
        assert_eq!(&*p.actions_for_key(&key(i), &m, 0), &out(2)[..]);
    }
    assert_eq!((p.stats().emc_hits - emc0, p.stats().megaflow_hits - mf0), (0, 1000));

    // Six subtables (a rule per input port, each with its own source
    // prefix length), keys spread over them: the classifier probes about
    // three subtables per key, so the EMC stays on.
    let mut m = Model::new();
    for port in 1..=6u32 {
        m.add(10, &format!("in_port={port},ip,nw_src=10.0.0.0/{}", 8 + 3 * port), out(2));
    }
    m.add(1, "ip", out(3));
    let mut p = pmd(100);
    p.set_generation(m.generation);
    for i in 0..6000u32 {
        p.actions_for_key(&udp_key(1 + i % 6, 0x0a00_0000 + i, 0x0b00_0000 + i, 53), &m, 0);
    }
    let st = p.stats();
    assert!(st.megaflow_hits > 5000, "{} megaflow hits", st.megaflow_hits);
    assert!(st.megaflow_probes >= 3 * st.megaflow_hits, "{} probes for {} hits", st.megaflow_probes, st.megaflow_hits);
    assert!(p.emc_active());
    assert_eq!(st.emc_gated, 0);

    // With the gate off (Open vSwitch's behaviour) the EMC never closes.
    let mut m = Model::new();
    m.add(10, "in_port=1", out(2));
    let mut p =
        Pmd::new(PmdConfig { emc_insert_inv_prob: 100, port_hint: false, emc_gate: false, ..PmdConfig::default() });
    p.set_generation(m.generation);
    for i in 0..5000 {
        p.actions_for_key(&key(i), &m, 0);
    }
    assert!(p.emc_active());
}

#[test]
fn subtables_ranked_by_hits() {
    let mut m = Model::new();
    // Three masks: in_port only; + nw_dst; + nw_dst + tp_dst.
    // (The model's mask is the union over the rules it examined, so the
    // least specific rule goes first.)
    m.add(30, "in_port=1", out(1));
    m.add(20, "in_port=2,ip,nw_dst=10.0.0.2", out(2));
    m.add(10, "in_port=3,udp,nw_dst=10.0.0.3,tp_dst=3", out(3));
    let mut p = pmd(0);
    p.set_generation(m.generation);
    let mut rec = Rec::default();
    let mut now = 0;
    let mut batch = |p: &mut Pmd, port: u32, n: usize, now: u64| {
        let f = udp_frame(0x0a00_0001, 0x0a00_0000 + port, port as u16);
        let mut pkts: Vec<Packet> = (0..n).map(|_| pkt(&f, port)).collect();
        p.process_batch(&mut pkts, &m, now, &mut rec);
    };
    // Install in order 1, 2, 3; then mostly port-3 traffic.
    for port in 1..=3 {
        batch(&mut p, port, 1, now);
    }
    assert_eq!(p.subtables().len(), 3);
    batch(&mut p, 3, 30, now);
    batch(&mut p, 2, 10, now);
    batch(&mut p, 1, 2, now);
    now += 1000;
    batch(&mut p, 1, 1, now); // The re-sort runs at the end of this batch.
    let order: Vec<u64> = p.subtables().iter().map(|(_, _, h)| *h).collect();
    assert!(order.windows(2).all(|w| w[0] >= w[1]), "ranked: {order:?}");
    let first = p.subtables()[0].0;
    assert_ne!(first.tp_dst(), 0, "the port-3 (tp_dst) subtable leads: {order:?}");
    // Traffic shifts: port 1 dominates in the next interval.
    batch(&mut p, 1, 32, now);
    batch(&mut p, 1, 32, now + 500);
    batch(&mut p, 1, 1, now + 1000);
    let first = p.subtables()[0].0;
    assert_eq!((first.tp_dst(), first.nw_dst()), (0, 0), "the in_port-only subtable now leads");
    assert_eq!(rec.out.len(), 3 + 30 + 10 + 2 + 1 + 65);
}

#[test]
fn megaflow_limit_still_executes() {
    let mut m = Model::new();
    m.add(1, "ip", out(9));
    let mut p = Pmd::new(PmdConfig { megaflow_limit: 3, ..PmdConfig::default() });
    p.set_generation(m.generation);
    let mut rec = Rec::default();
    for port in 1..=6 {
        p.process_batch(&mut vec![pkt(&udp_frame(1, 2, 3), port)], &m, 0, &mut rec);
    }
    assert_eq!(p.n_megaflows(), 3);
    let st = p.stats();
    assert_eq!((st.upcalls, st.upcall_lost_limit), (6, 3));
    assert_eq!(rec.out.len(), 6);
    assert_eq!(PmdConfig::default().megaflow_limit, 200_000);
}

/// At the limit, a new flow takes the slot of a megaflow idle for over
/// 100 ms (as OVS's revalidators expire flows idle for 100 ms once over
/// the limit), never that of one in use; before that it is executed
/// uncached.
#[test]
fn at_the_megaflow_limit_a_new_flow_takes_an_idle_ones_place() {
    let mut m = Model::new();
    m.add(1, "ip", out(9));
    let mut p = Pmd::new(PmdConfig { megaflow_limit: 3, ..PmdConfig::default() });
    p.set_generation(m.generation);
    let mut rec = Rec::default();
    let mut send = |p: &mut Pmd, port: u32, now: u64| {
        p.process_batch(&mut vec![pkt(&udp_frame(1, 2, 3), port)], &m, now, &mut rec);
    };
    for port in 1..=3 {
        send(&mut p, port, 0);
    }
    send(&mut p, 4, 50);
    assert_eq!((p.n_megaflows(), p.stats().upcall_lost_limit), (3, 1), "none idle for 100 ms yet");
    send(&mut p, 1, 150); // port 1's flow stays in use
    send(&mut p, 5, 200);
    let st = p.stats();
    assert_eq!((p.n_megaflows(), st.upcall_lost_limit, st.expired), (3, 1, 1), "an idle one gave way");
    let upcalls = st.upcalls;
    send(&mut p, 1, 210);
    send(&mut p, 5, 210);
    assert_eq!(p.stats().upcalls, upcalls, "the flow in use and the new one are both cached");
}

#[test]
fn idle_megaflows_expire_and_their_emc_entries_die_with_them() {
    let mut m = Model::new();
    m.add(1, "in_port=1", out(2));
    let mut p = Pmd::new(PmdConfig { emc_insert_inv_prob: 1, max_idle_ms: 1000, ..PmdConfig::default() });
    p.set_generation(m.generation);
    let a = udp_key(1, 1, 2, 3);
    let mut b = a;
    b.set_in_port(2);
    p.actions_for_key(&a, &m, 0);
    p.actions_for_key(&b, &m, 0);
    p.actions_for_key(&a, &m, 900); // a used at 900, b last at 0
    p.sweep(1500);
    assert_eq!(p.n_megaflows(), 1);
    assert_eq!(p.stats().expired, 1);
    let calls = m.calls.get();
    p.actions_for_key(&b, &m, 1600); // EMC still names b's old slot
    assert_eq!(m.calls.get(), calls + 1, "an expired megaflow is not used through the EMC");
    p.sweep(1600 + 1001);
    assert_eq!(p.n_megaflows(), 0);
    assert_eq!(PmdConfig::default().max_idle_ms, 10_000);
}

#[test]
fn revalidation_keeps_unaffected_and_drops_changed_megaflows() {
    let mut m = Model::new();
    m.add(10, "in_port=1,ip,nw_dst=10.0.0.2", out(2));
    m.add(5, "in_port=2", out(3));
    let mut p = pmd(1);
    p.set_generation(m.generation);
    let k1 = udp_key(1, 0x0a00_0001, 0x0a00_0002, 53);
    let k2 = udp_key(2, 0x0a00_0001, 0x0a00_0002, 53);
    p.actions_for_key(&k1, &m, 0);
    p.actions_for_key(&k2, &m, 0);
    assert_eq!(p.n_megaflows(), 2);

    // Change the in_port=2 rule's actions: k1's megaflow stays valid.
    m.set_actions(1, out(4));
    p.set_generation(m.generation);
    assert_eq!(&*p.actions_for_key(&k1, &m, 1), &out(2)[..]);
    assert_eq!(&*p.actions_for_key(&k2, &m, 1), &out(4)[..]);
    let st = p.stats().clone();
    assert_eq!((st.revalidated, st.removed_stale), (1, 1));

    // A higher rule that splits k1's megaflow (same actions for k1 itself,
    // but it now needs nw_src): the megaflow must go, or nw_src=10.0.0.9
    // would be served out(2).
    m.add(20, "ip,nw_src=10.0.0.9", out(7));
    p.set_generation(m.generation);
    let k9 = udp_key(1, 0x0a00_0009, 0x0a00_0002, 53);
    assert_eq!(&*p.actions_for_key(&k9, &m, 2), &out(7)[..]);
    assert_eq!(&*p.actions_for_key(&k1, &m, 2), &out(2)[..]);
    assert_eq!(p.stats().removed_stale, 2);

    // Eager sweep after a generation bump: the two in_port=1 megaflows are
    // still exact; the in_port=2 one (not looked up since the nw_src rule
    // arrived) now needs nw_src too, so it goes.
    m.generation += 1;
    p.set_generation(m.generation);
    assert_eq!(p.n_megaflows(), 3);
    p.revalidate_all(&m);
    assert_eq!(p.n_megaflows(), 2);
    let st = p.stats().clone();
    assert_eq!((st.revalidated, st.removed_stale), (3, 3));
    // Every megaflow is now current: no translation on the next hits.
    let calls = m.calls.get();
    p.actions_for_key(&k1, &m, 3);
    p.actions_for_key(&k9, &m, 3);
    assert_eq!(m.calls.get(), calls);

    // Deleting everything: revalidate_all removes every megaflow.
    m.remove(0);
    m.remove(0);
    m.remove(0);
    p.set_generation(m.generation);
    p.revalidate_all(&m);
    assert_eq!(p.n_megaflows(), 0);
    assert_eq!(&*p.actions_for_key(&k1, &m, 4), &[][..]);
}

#[test]
fn busy_slow_path_parks_packets_in_order_and_never_serves_unconfirmed_megaflows() {
    let mut m = Model::new();
    m.add(1, "in_port=1", out(2));
    let mut p = pmd(1);
    p.set_generation(m.generation);
    let mut rec = Rec::default();
    let f = udp_frame(1, 2, 3);
    p.process_batch(&mut vec![pkt(&f, 1)], &m, 0, &mut rec);
    m.set_actions(0, out(5));
    p.set_generation(m.generation);
    m.busy.set(true);
    p.process_batch(&mut vec![pkt(&f, 1), pkt(&f, 1)], &m, 1, &mut rec);
    assert_eq!(rec.out.len(), 1, "the stale megaflow was not used");
    assert_eq!((p.stats().upcall_deferred, p.stats().upcall_busy, p.n_deferred()), (2, 0, 2));
    // Still busy: replaying changes nothing, and a packet of another flow
    // that needs the slow path queues behind them without asking it.
    assert_eq!(p.poll_deferred(&m, 2, &mut rec), 0);
    let g = udp_frame(7, 8, 9);
    p.process_batch(&mut vec![pkt(&g, 1)], &m, 2, &mut rec);
    assert_eq!(p.n_deferred(), 3);
    m.busy.set(false);
    // The parked packets leave first, in arrival order, with the new rules.
    p.process_batch(&mut vec![pkt(&f, 1)], &m, 3, &mut rec);
    assert_eq!(rec.out.iter().map(|o| o.0).collect::<Vec<_>>(), vec![2, 5, 5, 5, 5]);
    assert_eq!(rec.out[3].1, g, "the other flow's packet kept its place");
    assert_eq!((p.n_deferred(), p.stats().upcall_busy), (0, 0));
}

#[test]
fn a_full_parking_queue_drops_and_counts() {
    let mut m = Model::new();
    m.add(1, "in_port=1", out(2));
    let mut p = Pmd::new(PmdConfig { deferred_limit: 3, ..PmdConfig::default() });
    p.set_generation(m.generation);
    let mut rec = Rec::default();
    let f = udp_frame(1, 2, 3);
    m.busy.set(true);
    p.process_batch(&mut (0..5).map(|_| pkt(&f, 1)).collect(), &m, 0, &mut rec);
    assert_eq!((p.stats().upcall_deferred, p.stats().upcall_busy, p.n_deferred()), (3, 2, 3));
    m.busy.set(false);
    assert_eq!(p.poll_deferred(&m, 1, &mut rec), 3);
    assert_eq!(rec.out.len(), 3);
}

#[test]
fn recirculation_looks_the_rewritten_packet_up_again() {
    let mut m = Model::new();
    let mut set = FlowKey::ZERO;
    let mut mask = FlowKey::ZERO;
    set.set_dl_type(0x0800);
    set.set_nw_dst(0x0a00_0063);
    mask.set_nw_dst(u32::MAX);
    m.add(
        10,
        "recirc_id=0,in_port=1,ip",
        vec![DpAction::SetMasked(dpif::SetFields::new(&set, &mask)), DpAction::Recirc(1)],
    );
    m.add(10, "recirc_id=1,ip,nw_dst=10.0.0.99", out(3));
    m.add(10, "recirc_id=7", vec![DpAction::Recirc(7)]); // a loop
    m.add(10, "in_port=2", vec![DpAction::Recirc(7)]);
    let mut p = pmd(1);
    p.set_generation(m.generation);
    let mut rec = Rec::default();
    let f = udp_frame(0x0a00_0001, 0x0a00_0002, 53);
    p.process_batch(&mut vec![pkt(&f, 1), pkt(&f, 1)], &m, 0, &mut rec);
    assert_eq!(rec.out.len(), 2);
    assert!(rec.out.iter().all(|(port, b)| *port == 3 && b[30..34] == [10, 0, 0, 99]));
    assert_eq!(p.n_megaflows(), 2);
    assert_eq!(p.stats().upcalls, 2);
    p.process_batch(&mut vec![pkt(&f, 2)], &m, 0, &mut rec);
    assert_eq!(p.stats().drop_recirc_depth, 1);
    assert_eq!(rec.out.len(), 2);
}

#[test]
fn output_only_megaflows_carry_the_tunnel_metadata_the_pipeline_set() {
    // A megaflow whose only action is an output skips the executor; the
    // packet must still leave with the tunnel fields the key holds: set by
    // an earlier pass (port 1, then recirculation), or received with it
    // (port 2), or none (port 2, a plain packet).
    use flow::key::loc::TUN_ID;
    let mut m = Model::new();
    let (mut set, mut mask) = (FlowKey::ZERO, FlowKey::ZERO);
    TUN_ID.set(&mut set, 77);
    TUN_ID.set(&mut mask, u64::MAX as u128);
    m.add(
        10,
        "recirc_id=0,in_port=1",
        vec![DpAction::SetMasked(dpif::SetFields::new(&set, &mask)), DpAction::Recirc(1)],
    );
    m.add(10, "recirc_id=1", out(3));
    m.add(10, "in_port=2", out(4));
    let mut p = pmd(1);
    p.set_generation(m.generation);
    let mut rec = Rec::default();
    let f = udp_frame(0x0a00_0001, 0x0a00_0002, 53);
    let mut received = pkt(&f, 2);
    received.set_tnl([5, 0x0a00_0009, 0, 0, 0, 0, 0, 0]);
    // Twice: the first batch's packets go through upcalls, the second's
    // through the installed megaflows.
    for _ in 0..2 {
        p.process_batch(&mut vec![pkt(&f, 1), received.clone(), pkt(&f, 2)], &m, 0, &mut rec);
    }
    assert_eq!(rec.out.len(), 6);
    let tnl_word = flow::key::TNL_WORDS.iter().position(|&w| w == TUN_ID.word).unwrap();
    for round in rec.out.chunks(3).zip(rec.tnl.chunks(3)) {
        let ports: Vec<u32> = round.0.iter().map(|o| o.0).collect();
        assert_eq!(ports, [3, 4, 4]);
        assert_eq!(round.1[0].map(|t| t[tnl_word]), Some(77));
        assert_eq!(round.1[1], Some([5, 0x0a00_0009, 0, 0, 0, 0, 0, 0]));
        assert_eq!(round.1[2], None);
    }
    assert_eq!(p.stats().upcalls, 3);
}

#[test]
fn dump_flush_and_display() {
    let mut m = Model::new();
    m.add(10, "in_port=1,udp,nw_dst=10.0.0.2", vec![DpAction::Output(2), DpAction::Output(3)]);
    let mut p = pmd(1);
    p.set_generation(m.generation);
    let mut rec = Rec::default();
    let f = udp_frame(0x0a00_0001, 0x0a00_0002, 53);
    p.process_batch(&mut vec![pkt(&f, 1), pkt(&f, 1), pkt(&f, 1)], &m, 42, &mut rec);
    let d = p.dump_megaflows();
    assert_eq!(d.len(), 1);
    let s = format!("{}, actions:{}", d[0].matched, format_actions(&d[0].actions));
    assert!(s.contains("in_port=1") && s.contains("nw_dst=10.0.0.2"), "{s}");
    assert!(s.ends_with("actions:2,3"), "{s}");
    assert_eq!((d[0].packets, d[0].bytes, d[0].used_ms), (3, 3 * 64, 42));
    p.flush();
    assert_eq!(p.n_megaflows(), 0);
    p.process_batch(&mut vec![pkt(&f, 1)], &m, 43, &mut rec);
    assert_eq!(p.stats().upcalls, 2, "flush empties the EMC too");
}

#[test]
fn dummy_ports_end_to_end() {
    let (mut rx, h_rx) = DummyPort::new("p1");
    let (tx, h_tx) = DummyPort::new("p2");
    struct PortSink(DummyPort);
    impl dpif::Sink for PortSink {
        fn output(&mut self, _port: u32, pkts: &mut Vec<Packet>) {
            self.0.tx_batch(pkts).unwrap();
            pkts.clear();
        }
        fn userspace(&mut self, _: Packet, _full_len: usize, _: &DpAction) {}
    }
    let mut m = Model::new();
    m.add(1, "in_port=1", out(2));
    let mut p = pmd(100);
    p.set_generation(m.generation);
    let mut sink = PortSink(tx);
    for i in 0..40u32 {
        h_rx.inject(&udp_frame(0x0a00_0001 + i % 4, 0x0a00_0002, 53));
    }
    h_rx.inject(&[0u8; 10]);
    let mut pkts = Vec::new();
    while rx.rx_batch(0, &mut pkts, 32).unwrap() > 0 {
        pkts.iter_mut().for_each(|p| p.in_port = 1);
        p.process_batch(&mut pkts, &m, 0, &mut sink);
    }
    assert_eq!(h_tx.take_sent().len(), 40);
    let st = p.stats();
    assert_eq!(st.packets, 40);
    assert_eq!(st.upcalls + st.megaflow_hits + st.emc_hits + st.simple_hits, 40);
    assert_eq!(st.drops_by_reason().iter().find(|d| d.0 == "drop_rx_runt").unwrap().1, 1);
}

mod property {
    use super::*;
    use dpif::execute::{execute, Exec, OutQueues};
    use flow::key::FlowKey;
    use flow::Match;
    use proptest::prelude::*;

    /// A rule over a small field space so that rules overlap and keys
    /// repeat: in_port 1..=3, nw_src 10.0.0.0..3 (exact, /31 or any),
    /// nw_dst 10.0.1.0..3, tp_dst {53, 80}, recirc_id 0/1.
    #[derive(Clone, Debug)]
    struct RuleSpec {
        prio: u32,
        recirc: Option<u32>,
        in_port: Option<u32>,
        src: Option<(u32, u32)>,
        dst: Option<u32>,
        dport: Option<u16>,
        acts: Vec<u8>,
    }

    fn arb_rule() -> impl Strategy<Value = RuleSpec> {
        (
            0u32..8,
            prop::option::of(0u32..2),
            prop::option::of(1u32..4),
            prop::option::of((0u32..4, prop_oneof![Just(u32::MAX), Just(u32::MAX << 1)])),
            prop::option::of(0u32..4),
            prop::option::of(prop_oneof![Just(53u16), Just(80)]),
            prop::collection::vec(0u8..8, 0..3),
        )
            .prop_map(|(prio, recirc, in_port, src, dst, dport, acts)| RuleSpec {
                prio,
                recirc,
                in_port,
                src,
                dst,
                dport,
                acts,
            })
    }

    /// Action codes: 0..=4 output to 10+code, 5 set nw_tos, 6 set
    /// tp_dst=80, 7 recirc(1) (only allowed at recirc_id 0).
    fn to_rule(r: &RuleSpec) -> (u32, Match, Vec<DpAction>) {
        let (mut k, mut m) = (FlowKey::ZERO, FlowKey::ZERO);
        if let Some(v) = r.recirc {
            k.set_recirc_id(v);
            m.set_recirc_id(u32::MAX);
        }
        if let Some(v) = r.in_port {
            k.set_in_port(v);
            m.set_in_port(u32::MAX);
        }
        if r.src.is_some() || r.dst.is_some() || r.dport.is_some() {
            k.set_dl_type(0x0800);
            m.set_dl_type(0xffff);
        }
        if let Some((v, pm)) = r.src {
            k.set_nw_src(0x0a00_0000 + v);
            m.set_nw_src(pm);
        }
        if let Some(v) = r.dst {
            k.set_nw_dst(0x0a00_0100 + v);
            m.set_nw_dst(u32::MAX);
        }
        if let Some(v) = r.dport {
            k.set_nw_proto(17);
            m.set_nw_proto(0xff);
            k.set_tp_dst(v);
            m.set_tp_dst(0xffff);
        }
        let mut acts = Vec::new();
        for &a in &r.acts {
            acts.push(match a {
                0..=4 => DpAction::Output(10 + a as u32),
                5 => {
                    let (mut v, mut mk) = (FlowKey::ZERO, FlowKey::ZERO);
                    v.set_nw_tos(0x28);
                    mk.set_nw_tos(0xfc);
                    DpAction::SetMasked(dpif::SetFields::new(&v, &mk))
                }
                6 => {
                    let (mut v, mut mk) = (FlowKey::ZERO, FlowKey::ZERO);
                    v.set_tp_dst(80);
                    mk.set_tp_dst(0xffff);
                    DpAction::SetMasked(dpif::SetFields::new(&v, &mk))
                }
                _ if r.recirc == Some(0) => DpAction::Recirc(1),
                _ => DpAction::Output(15),
            });
        }
        (r.prio, Match::new(k, m), acts)
    }

    #[derive(Clone, Debug)]
    enum Change {
        Add(RuleSpec),
        Remove(usize),
        SetActions(usize, Vec<u8>),
        /// Bump the generation without changing the rules.
        Touch,
    }

    fn arb_change() -> impl Strategy<Value = Change> {
        prop_oneof![
            2 => arb_rule().prop_map(Change::Add),
            1 => any::<usize>().prop_map(Change::Remove),
            2 => (any::<usize>(), prop::collection::vec(0u8..8, 0..3)).prop_map(|(i, a)| Change::SetActions(i, a)),
            1 => Just(Change::Touch),
        ]
    }

    /// (in_port, src, dst, dport, udp?)
    type PktSpec = (u32, u32, u32, bool, bool);

    fn frame(s: &PktSpec, idx: u32) -> Vec<u8> {
        let f = Frame::new(A, B).ipv4(0x0a00_0000 + s.1, 0x0a00_0100 + s.2);
        let dport = if s.3 { 80 } else { 53 };
        let f = if s.4 { f.udp(1000, dport) } else { f.tcp(1000, dport, 0x10) };
        f.payload(&idx.to_be_bytes()).build()
    }

    /// The reference: each packet on its own, every lookup a fresh
    /// translation, executed by the same executor.
    fn reference(m: &Model, p: Packet, sink: &mut Rec) {
        let mut q = OutQueues::default();
        let (mut key, mut layout, _) = flow::extract(p.data(), p.in_port);
        let mut p = p;
        for _ in 0..8 {
            let t = m.fresh(&key);
            match execute(&t.actions, p, &mut key, layout, &mut q, sink, 0) {
                Exec::Done => break,
                Exec::Recirc(np, _) => {
                    // Parsed afresh: the fast path takes the layout the
                    // actions kept, and must agree with this.
                    layout = flow::extract(np.data(), np.in_port).1;
                    p = np;
                }
                Exec::RecircMany(_) => unreachable!("the model has no ct() on fragments"),
            }
        }
        q.flush(sink);
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        #[test]
        fn cached_execution_equals_fresh_translation(
            rules in prop::collection::vec(arb_rule(), 0..10),
            rounds in prop::collection::vec(
                (prop::collection::vec(arb_change(), 0..3),
                 prop::collection::vec((1u32..4, 0u32..4, 0u32..4, any::<bool>(), any::<bool>()), 1..24),
                 0u8..8),
                1..12),
            emc in prop_oneof![Just(1u32), Just(0u32), Just(3u32), Just(100u32)],
            hint in any::<bool>(),
        ) {
            let mut m = Model::new();
            for r in &rules {
                let (prio, mt, acts) = to_rule(r);
                m.add_match(prio, mt, acts);
            }
            let mut pmd = Pmd::new(PmdConfig {
                emc_insert_inv_prob: emc, max_idle_ms: 3, port_hint: hint, ..PmdConfig::default()
            });
            let mut idx = 0u32;
            for (now, (changes, pkts, extra)) in rounds.iter().enumerate() {
                let now = now as u64;
                for c in changes {
                    match c {
                        Change::Add(r) => {
                            let (prio, mt, acts) = to_rule(r);
                            m.add_match(prio, mt, acts);
                        }
                        Change::Remove(i) if !m.rules().is_empty() => m.remove(i % m.rules().len()),
                        Change::SetActions(i, a) if !m.rules().is_empty() => {
                            let i = i % m.rules().len();
                            let mut spec = rules.first().cloned().unwrap_or(RuleSpec {
                                prio: 0, recirc: None, in_port: None, src: None, dst: None, dport: None, acts: vec![],
                            });
                            spec.acts = a.clone();
                            spec.recirc = (m.rules()[i].m.mask.recirc_id() != 0).then(|| m.rules()[i].m.key.recirc_id());
                            m.set_actions(i, to_rule(&spec).2);
                        }
                        Change::Touch => m.generation += 1,
                        _ => {}
                    }
                }
                pmd.set_generation(m.generation);
                match extra {
                    0 => pmd.revalidate_all(&m),
                    1 => pmd.sweep(now),
                    _ => {}
                }
                let batch: Vec<Packet> = pkts.iter().map(|s| { idx += 1; pkt(&frame(s, idx), s.0) }).collect();
                let mut want = Rec::default();
                for p in &batch {
                    reference(&m, p.clone(), &mut want);
                }
                let mut got = Rec::default();
                pmd.process_batch(&mut batch.clone(), &m, now, &mut got);
                let (mut w, mut g) = (want.out, got.out);
                w.sort();
                g.sort();
                prop_assert_eq!(w, g, "round {}", now);
            }
            let st = pmd.stats();
            // Recirculated packets are looked up more than once.
            prop_assert!(st.simple_hits + st.emc_hits + st.megaflow_hits + st.upcalls >= st.packets);
        }

        /// The same with the slow path busy in some rounds (a writer holds
        /// it): packets that need it are parked, none is lost, none is
        /// served a stale megaflow, and once it is free again every packet
        /// has had exactly what a fresh translation gives. Rules change
        /// only while nothing is parked or in busy rounds that no parked
        /// packet outlives (as with a real writer: a packet parked during
        /// a change is replayed after that change).
        #[test]
        fn parked_packets_get_fresh_translations_and_none_is_lost(
            rules in prop::collection::vec(arb_rule(), 0..10),
            rounds in prop::collection::vec(
                (prop::collection::vec(arb_change(), 0..3),
                 prop::collection::vec((1u32..4, 0u32..4, 0u32..4, any::<bool>(), any::<bool>()), 1..16),
                 any::<bool>()),
                1..12),
            emc in prop_oneof![Just(1u32), Just(0u32), Just(100u32)],
            hint in any::<bool>(),
        ) {
            let mut m = Model::new();
            for r in &rules {
                let (prio, mt, acts) = to_rule(r);
                m.add_match(prio, mt, acts);
            }
            let mut pmd = Pmd::new(PmdConfig { emc_insert_inv_prob: emc, port_hint: hint, ..PmdConfig::default() });
            let (mut want, mut got) = (Rec::default(), Rec::default());
            let mut idx = 0u32;
            for (now, (changes, pkts, busy)) in rounds.iter().enumerate() {
                // A change while packets are parked would reach them when
                // replayed; the reference here is arrival time, so change
                // only when none are.
                if pmd.n_deferred() == 0 {
                    for c in changes {
                        match c {
                            Change::Add(r) => {
                                let (prio, mt, acts) = to_rule(r);
                                m.add_match(prio, mt, acts);
                            }
                            Change::Remove(i) if !m.rules().is_empty() => m.remove(i % m.rules().len()),
                            Change::Touch => m.generation += 1,
                            _ => {}
                        }
                    }
                }
                pmd.set_generation(m.generation);
                m.busy.set(*busy);
                let batch: Vec<Packet> = pkts.iter().map(|s| { idx += 1; pkt(&frame(s, idx), s.0) }).collect();
                for p in &batch {
                    reference(&m, p.clone(), &mut want);
                }
                pmd.process_batch(&mut batch.clone(), &m, now as u64, &mut got);
            }
            m.busy.set(false);
            pmd.poll_deferred(&m, 99, &mut got);
            prop_assert_eq!(pmd.n_deferred(), 0);
            prop_assert_eq!(pmd.stats().upcall_busy, 0);
            let (mut w, mut g) = (want.out, got.out);
            w.sort();
            g.sort();
            prop_assert_eq!(w, g);
        }
    }
}

#[test]
fn a_subtable_emptied_and_ranked_away_is_searched_again_when_refilled() {
    let mut m = Model::new();
    m.add(1, "in_port=1", out(2));
    let mut p = Pmd::new(PmdConfig { emc_insert_inv_prob: 0, max_idle_ms: 10, ..PmdConfig::default() });
    p.set_generation(m.generation);
    let mut rec = Rec::default();
    let f = udp_frame(1, 2, 3);
    p.process_batch(&mut vec![pkt(&f, 1)], &m, 0, &mut rec);
    p.sweep(100);
    p.process_batch(&mut vec![], &m, 1000, &mut rec); // re-rank: the subtable is empty
    for now in 1001..1011 {
        p.process_batch(&mut vec![pkt(&f, 1)], &m, now, &mut rec);
    }
    assert_eq!(p.stats().upcalls, 2, "the refilled subtable answers at once");
    assert_eq!(p.n_megaflows(), 1);
}
