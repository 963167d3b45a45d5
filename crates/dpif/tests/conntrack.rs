//! Connection tracking in the fast path: a stateful firewall and source
//! NAT, run as the datapath runs them (`ct` then recirculation), through
//! the caches.
//!
//! Plan: a model slow path holds the OpenFlow-like rules of a firewall
//! (`recirc_id=0` -> `ct(zone=1[,nat])`, recirculate; after it, traffic from
//! port 1 that is `+new` is committed and forwarded, `+est` goes both ways,
//! anything else is dropped). Frames go through `Pmd::process_batch`, twice
//! each so the second pass is served from the megaflow cache. Verified:
//! the other side cannot open a connection but can answer one; replies are
//! un-NATed; `ct_state` is part of the megaflow so cached flows do not mix
//! new and established packets; `dpctl`-style action text.

mod common;
use common::*;
use conntrack::{Config, Conntrack, CtAction, Nat, NatFlags, NatRange};
use dpif::{format_actions, CtRef, DpAction, Pmd, PmdConfig};
use std::sync::Arc;
use wire::build::Frame;

const MA: [u8; 6] = [2, 0, 0, 0, 0, 1];
const MB: [u8; 6] = [2, 0, 0, 0, 0, 2];
const A: u32 = 0x0a00_0001;
const B: u32 = 0x0a00_0002;
const X: u32 = 0xc0a8_0064;

fn udp(src: u32, dst: u32, sp: u16, dp: u16) -> Vec<u8> {
    Frame::new(MA, MB).ipv4(src, dst).udp(sp, dp).payload(b"data").build()
}

fn firewall(ct: &CtRef, nat: Option<Nat>) -> Model {
    let mut m = Model::new();
    let zone = |commit: bool, nat: Option<Nat>| CtAction { zone: 1, commit, nat, ..CtAction::default() };
    let lookup_nat = nat.map(|_| Nat::Existing);
    // Commit with a label bit; the reply is let in only with that label
    // and with A as the original tuple's source (ct_label, ct_nw_src and
    // ct_nw_proto are matched after the recirculation).
    let commit = CtAction { label: Some((1 << 64, 1 << 64)), ..zone(true, nat) };
    m.add(10, "recirc_id=0,ip", vec![DpAction::Ct(ct.clone(), Box::new(zone(false, lookup_nat))), DpAction::Recirc(1)]);
    m.add(
        10,
        "recirc_id=1,in_port=1,ct_state=+trk+new",
        vec![DpAction::Ct(ct.clone(), Box::new(commit)), DpAction::Output(2)],
    );
    m.add(10, "recirc_id=1,in_port=1,ct_state=+trk+est", vec![DpAction::Output(2)]);
    m.add(
        10,
        "recirc_id=1,in_port=2,ct_state=+trk+est,ct_label=0x10000000000000000/0x10000000000000000,ct_nw_src=10.0.0.1,ct_nw_proto=17",
        vec![DpAction::Output(1)],
    );
    m
}

fn run(p: &mut Pmd, m: &Model, frame: &[u8], port: u32, now: u64) -> Vec<(u32, Vec<u8>)> {
    let mut rec = Rec::default();
    p.process_batch(&mut vec![pkt(frame, port)], m, now, &mut rec);
    rec.out
}

#[test]
fn firewall_lets_replies_in_but_not_new_connections() {
    let ct = CtRef(Arc::new(Conntrack::new(Config::default())));
    let m = firewall(&ct, None);
    let mut p = Pmd::new(PmdConfig { emc_insert_inv_prob: 1, ..PmdConfig::default() });
    p.set_generation(m.generation);
    for pass in 0..2 {
        assert!(run(&mut p, &m, &udp(B, A, 53, 4000), 2, pass).is_empty(), "B cannot open a connection (pass {pass})");
    }
    assert_eq!(ct.0.n_conns(), 0);
    assert_eq!(run(&mut p, &m, &udp(A, B, 4000, 53), 1, 2).len(), 1, "A opens one");
    assert_eq!(ct.0.n_conns(), 1);
    for pass in 0..2 {
        let out = run(&mut p, &m, &udp(B, A, 53, 4000), 2, 3 + pass);
        assert_eq!(out.len(), 1, "the reply passes (pass {pass})");
        assert_eq!(out[0].0, 1);
        let out = run(&mut p, &m, &udp(A, B, 4000, 53), 1, 3 + pass);
        assert_eq!(out[0].0, 2, "A's next packets are +est");
    }
    // Another port of B is still not allowed in.
    assert!(run(&mut p, &m, &udp(B, A, 54, 4000), 2, 9).is_empty());
    // The megaflows keep ct_state exact, so cached new and established
    // packets never share one.
    let flows = p.dump_megaflows();
    assert!(
        flows.iter().any(|f| f.matched.to_string().contains("ct_state=")),
        "{:?}",
        flows.iter().map(|f| f.matched.to_string()).collect::<Vec<_>>()
    );
    let texts: Vec<String> = flows.iter().map(|f| format_actions(&f.actions)).collect();
    assert!(texts.iter().any(|t| t == "ct(zone=1),recirc(0x1)"), "{texts:?}");
    assert!(
        texts.iter().any(|t| t == "ct(commit,zone=1,label=0x10000000000000000/0x10000000000000000),2"),
        "{texts:?}"
    );
}

#[test]
fn snat_on_commit_and_un_nat_on_the_reply() {
    let ct = CtRef(Arc::new(Conntrack::new(Config::default())));
    let range = NatRange {
        addr_min: X as u128,
        addr_max: X as u128,
        port_min: 0,
        port_max: 0,
        v6: false,
        flags: NatFlags::default(),
    };
    let m = firewall(&ct, Some(Nat::Src(range)));
    let mut p = Pmd::new(PmdConfig::default());
    p.set_generation(m.generation);
    let out = run(&mut p, &m, &udp(A, B, 4000, 53), 1, 0);
    assert_eq!(out.len(), 1);
    // A second packet before any reply: still +new after the first ct
    // (which translated it), so it meets ct(commit,nat(...)) again. That
    // pass must find the same connection (by the translated tuple) and
    // neither commit a second connection nor translate twice.
    let again = run(&mut p, &m, &udp(A, B, 4000, 53), 1, 0);
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].1, out[0].1, "the same translation");
    assert_eq!(ct.0.n_conns(), 1, "one connection");
    let sent = &out[0].1;
    assert_eq!(&sent[26..30], &X.to_be_bytes(), "the server sees the translated source");
    let sport = u16::from_be_bytes([sent[34], sent[35]]);
    let out = run(&mut p, &m, &udp(B, X, 53, sport), 2, 1);
    assert_eq!(out.len(), 1, "the reply to the translated address is let in");
    assert_eq!(out[0].0, 1);
    assert_eq!(&out[0].1[30..34], &A.to_be_bytes(), "and un-NATed back to A");
    assert_eq!(u16::from_be_bytes([out[0].1[36], out[0].1[37]]), 4000);
    assert_eq!(wire::checksum::checksum(&out[0].1[14..34]), 0);
    let d = conntrack::format::entry(&ct.0.connections(None)[0], false, 0);
    assert!(
        d.starts_with("udp,orig=(src=10.0.0.1,dst=10.0.0.2,sport=4000,dport=53),reply=(src=10.0.0.2,dst=192.168.0.100"),
        "{d}"
    );
}
