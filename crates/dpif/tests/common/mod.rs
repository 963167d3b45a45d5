//! A model slow path for the fast-path tests: a linear-scan rule table.
//!
//! Rules are scanned by descending priority; the megaflow mask is the
//! union of the masks of every rule examined up to and including the one
//! that matched (plus in_port and recirc_id, always consulted). That is
//! sound: a key agreeing with the translated one on those bits fails every
//! higher rule for the same reason and matches the same rule.
#![allow(dead_code)] // reason: each test binary uses a different subset

use dpif::{DpAction, Sink, Translation, Upcall};
use flow::{FlowKey, Match};
use netdev::Packet;
use std::cell::Cell;

#[derive(Clone, Debug)]
pub struct Rule {
    pub prio: u32,
    pub m: Match,
    pub actions: Vec<DpAction>,
}

#[derive(Default)]
pub struct Model {
    /// Kept sorted by descending priority (stable for equal ones).
    rules: Vec<Rule>,
    pub generation: u64,
    /// Translations done (upcalls and revalidations).
    pub calls: Cell<u64>,
    /// When set, `try_translate`/`revalidate` answer `None` (busy).
    pub busy: Cell<bool>,
}

impl Model {
    pub fn new() -> Model {
        Model { generation: 1, ..Model::default() }
    }

    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Adds a rule from ovs-ofctl match syntax; bumps the generation.
    pub fn add(&mut self, prio: u32, m: &str, actions: Vec<DpAction>) {
        let m = Match::parse(m).unwrap_or_else(|e| panic!("{m}: {e}"));
        self.add_match(prio, m, actions);
    }

    pub fn add_match(&mut self, prio: u32, m: Match, actions: Vec<DpAction>) {
        let at = self.rules.iter().position(|r| r.prio < prio).unwrap_or(self.rules.len());
        self.rules.insert(at, Rule { prio, m, actions });
        self.generation += 1;
    }

    pub fn remove(&mut self, i: usize) {
        self.rules.remove(i);
        self.generation += 1;
    }

    pub fn set_actions(&mut self, i: usize, actions: Vec<DpAction>) {
        self.rules[i].actions = actions;
        self.generation += 1;
    }

    pub fn fresh(&self, key: &FlowKey) -> Translation {
        let mut mask = FlowKey::ZERO;
        mask.set_in_port(u32::MAX);
        mask.set_recirc_id(u32::MAX);
        for r in &self.rules {
            mask.or_assign(&r.m.mask);
            if r.m.matches(key) {
                return Translation { actions: r.actions.clone(), mask, ..Default::default() };
            }
        }
        Translation { actions: Vec::new(), mask, ..Default::default() }
    }
}

impl Upcall for Model {
    fn translate(&self, key: &FlowKey) -> Translation {
        self.calls.set(self.calls.get() + 1);
        self.fresh(key)
    }
    fn try_translate(&self, key: &FlowKey) -> Option<Translation> {
        (!self.busy.get()).then(|| self.translate(key))
    }
}

/// Records every output (port, bytes) and packet-in.
#[derive(Default)]
pub struct Rec {
    pub out: Vec<(u32, Vec<u8>)>,
    /// Calls of `Sink::output` (one per port per batch).
    pub batches: usize,
    pub to_user: Vec<(Vec<u8>, DpAction)>,
    /// The tunnel metadata each output packet carried, in `out`'s order.
    pub tnl: Vec<Option<[u64; 8]>>,
}

impl Sink for Rec {
    fn output(&mut self, port: u32, pkts: &mut Vec<Packet>) {
        self.batches += 1;
        for p in pkts.drain(..) {
            self.tnl.push(p.tnl.as_deref().copied());
            self.out.push((port, p.data().to_vec()));
        }
    }
    fn userspace(&mut self, pkt: Packet, _full_len: usize, a: &DpAction) {
        self.to_user.push((pkt.data().to_vec(), a.clone()));
    }
}

pub fn pkt(frame: &[u8], in_port: u32) -> Packet {
    let mut p = Packet::from_slice(frame);
    p.in_port = in_port;
    p
}

pub fn out(p: u32) -> Vec<DpAction> {
    vec![DpAction::Output(p)]
}

/// A key as extraction would give for an IPv4/UDP packet (constructed
/// directly, for tests that work on keys).
pub fn udp_key(in_port: u32, src: u32, dst: u32, dport: u16) -> FlowKey {
    let mut k = FlowKey::ZERO;
    k.set_in_port(in_port);
    k.set_dl_type(0x0800);
    k.set_dl_src(0x0200_0000_0001);
    k.set_dl_dst(0x0200_0000_0002);
    k.set_nw_src(src);
    k.set_nw_dst(dst);
    k.set_nw_proto(17);
    k.set_nw_ttl(64);
    k.set_tp_src(1000);
    k.set_tp_dst(dport);
    k
}
