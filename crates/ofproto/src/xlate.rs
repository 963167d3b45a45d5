//! Translation: a flow key through the OpenFlow pipeline, producing
//! datapath actions and the megaflow mask.
//!
//! Correctness property (megaflow soundness): let `t = translate(k)`. For
//! every key `k2` with `k2 & t.mask == k & t.mask`, `translate(k2)` yields
//! the same actions (given the same rules and MAC table). Every place that
//! reads a packet field therefore ORs that field's bits into `wc`:
//! classifier lookups report their own consulted bits; prerequisites,
//! NORMAL, dec_ttl and VLAN handling add theirs here. Field writes are
//! emitted unconditionally (no "only if different" comparison), so they
//! never widen the mask.

use crate::actions::ofpp;
use crate::actions::{Action, Instruction, OfPort};
use crate::bridge::{Ofproto, TableMiss};
use crate::normal::{is_multicast, Learned, VlanMode};
use dpif::{DpAction, SetFields, Translation, UserspaceReason};
use flow::key::{ethertype, loc, FlowKey, STAGE_L3, STAGE_L4, VLAN_PRESENT, WORDS};
use std::sync::Arc;

/// Resubmit/goto depth limit (OVS uses 64 for resubmits).
const MAX_DEPTH: u32 = 64;
/// Resubmits in one translation, all told (Open vSwitch's 64 × 64): the
/// bound that ends a loop of tail resubmits, which do not deepen the walk.
const MAX_RESUBMITS: u32 = MAX_DEPTH * MAX_DEPTH;
/// Tables nested in one walk however they were reached (tail resubmits
/// included): the bound on the translation's own stack use.
const MAX_NEST: u32 = 256;

/// Entries the push/pop stack holds at most.
const MAX_STACK: usize = 1024;

/// Whether a field is pipeline state only: the OpenFlow registers,
/// metadata and in_port (which a pipeline rewrites, e.g. to 0 so that a
/// packet may go back out of the port it came in on). The datapath never carries them (a packet enters with them
/// zero, and recirculation restores them from the frozen state, see
/// `ct.rs`), so writing them emits no datapath action.
fn key_only(l: flow::key::Loc) -> bool {
    l == loc::IN_PORT || l.word == loc::METADATA.word || (loc::REGS[0].word..=loc::REGS[15].word).contains(&l.word)
}

/// The result of a translation with its human-readable walk.
pub struct Trace {
    pub translation: Translation,
    pub lines: Vec<String>,
    pub final_key: FlowKey,
}

struct Ctx<'a> {
    of: &'a Ofproto,
    version: u64,
    /// The flow as modified by actions so far.
    key: FlowKey,
    /// Bits consulted: the megaflow mask.
    wc: FlowKey,
    /// Bits written by set actions not yet emitted as a datapath action.
    pending: FlowKey,
    actions: Vec<DpAction>,
    action_set: Vec<Action>,
    trace: Option<Vec<String>>,
    indent: usize,
    depth: u32,
    table: u8,
    cookie: u64,
    /// Set once the pipeline must stop (e.g. TTL exceeded).
    stop: bool,
    /// Set when the resubmit/goto depth limit stopped the walk.
    too_deep: bool,
    /// Counters of every rule the walk matched (interned into the
    /// translation's [`dpif::CounterSet`] at the end).
    counters: Vec<&'a Arc<dpif::FlowCounters>>,
    /// A filter over `counters` (4,096 bits, one per pointer hash): a counter whose
    /// bit is clear is not listed yet, so most credits skip the scan.
    /// OVN's walks credit 100-400 counters, and a scan per credit made the
    /// dedup quadratic: half of a translation's time.
    counted: [u64; 64],
    /// Tables whose lookup (`[0]`) and match (`[1]`) counters are listed.
    table_counted: [[u64; 4]; 2],
    /// Every key bit a committed set action wrote (group buckets undo theirs).
    written: FlowKey,
    /// The push/pop stack: values of the pushed sub-fields, with their
    /// widths in bytes (a continuation carries both, as Open vSwitch's
    /// does).
    stack: Vec<(u128, u8)>,
    /// The action about to run is the last of its list: a resubmit there
    /// returns to nothing, so (as in Open vSwitch) it does not count
    /// toward the depth limit. OVN's pipelines chain some 100 tables this
    /// way.
    tail: bool,
    resubmits: u32,
    /// The rule whose actions are running (a `learn` remembers its learner).
    rule: Option<(u8, classifier::RuleId)>,
    /// Tables nested right now (see [`MAX_NEST`]).
    nest: u32,
    /// Set by `controller(pause)`: each table the walk unwinds through
    /// adds the rest of its rule (innermost first), and the paused
    /// packet-in (action `pause_at`) carries them as its continuation.
    freeze: Option<Vec<ofp_types::Frozen>>,
    pause_at: usize,
    /// The freeze is not a pause but a recirculation (after `pop_mpls`,
    /// for a lookup in the middle of a rule): the frozen rest runs when
    /// the parsed packet comes back.
    freeze_recirc: bool,
    /// A pop_mpls just ran: the key's L3/L4 fields are unknown until the
    /// datapath parses the popped frame (see the apply loop).
    mpls_popped: bool,
    /// A pop_mpls ran in this pass and no recirculation followed: a
    /// lookup now would not see the popped frame's L3/L4 fields.
    l3_unparsed: bool,
    /// The action being run is the last of its rule (no instruction
    /// follows its apply list), so a recirculation loses nothing after it.
    rule_tail: bool,
    /// This thread's lookup memos for the bridge's tables (empty: none,
    /// as for a translation nested in another on the same thread).
    memo: Box<[classifier::Memo]>,
}

thread_local! {
    /// Each thread's lookup memos (see [`classifier::memo`]), per bridge,
    /// found by the bridge's address. A memo checks its table's stamp on
    /// every use, so a bridge freed and another made at the same address
    /// finds memos that empty themselves, never stale answers.
    static MEMOS: std::cell::RefCell<Vec<(usize, Box<[classifier::Memo]>)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Bridges a thread keeps memos for (the oldest go first).
const MEMO_BRIDGES: usize = 16;

/// Whether translations use lookup memos (0: not decided yet, 1: yes, 2: no).
static MEMO_ON: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Whether translations use lookup memos: yes unless the environment
/// says `XVS_LOOKUP_MEMO=0` or [`set_lookup_memo`] turned them off (to
/// compare, in benchmarks and when in doubt).
fn memo_on() -> bool {
    use std::sync::atomic::Ordering::Relaxed;
    match MEMO_ON.load(Relaxed) {
        1 => true,
        2 => false,
        _ => {
            let on = std::env::var("XVS_LOOKUP_MEMO").map_or(true, |v| v != "0");
            MEMO_ON.store(if on { 1 } else { 2 }, Relaxed);
            on
        }
    }
}

/// Turns lookup memos on or off for every translation from now on.
pub fn set_lookup_memo(on: bool) {
    MEMO_ON.store(if on { 1 } else { 2 }, std::sync::atomic::Ordering::Relaxed);
}

impl Ofproto {
    /// Takes this thread's memos for this bridge's tables (empty if memos
    /// are off, or already taken by a translation further up the stack).
    fn take_memos(&self) -> Box<[classifier::Memo]> {
        if !memo_on() {
            return Box::default();
        }
        let me = self as *const Ofproto as usize;
        MEMOS.with(|m| {
            let mut m = m.borrow_mut();
            match m.iter_mut().find(|(a, _)| *a == me) {
                Some((_, b)) => std::mem::take(b),
                None => (0..self.tables.len()).map(|_| classifier::Memo::default()).collect(),
            }
        })
    }

    /// Gives back what [`Ofproto::take_memos`] took.
    fn give_memos(&self, memos: Box<[classifier::Memo]>) {
        if memos.is_empty() {
            return;
        }
        let me = self as *const Ofproto as usize;
        MEMOS.with(|m| {
            let mut m = m.borrow_mut();
            match m.iter_mut().find(|(a, _)| *a == me) {
                Some((_, b)) => *b = memos,
                None => {
                    if m.len() >= MEMO_BRIDGES {
                        m.remove(0);
                    }
                    m.push((me, memos));
                }
            }
        });
    }
}

impl Ofproto {
    /// Translates `key` at the current version. Side effects: MAC learning,
    /// rule usage counters.
    pub fn translate_key(&self, key: &FlowKey, bytes: u64) -> Translation {
        self.run_xlate(key, bytes, false).translation
    }

    /// Translates an action list applied to a packet with `key` outside
    /// the tables (packet-out). Resubmits and NORMAL work as in a rule.
    pub fn translate_actions(&self, key: &FlowKey, actions: &[Action]) -> Translation {
        let mut cx = Ctx::new(self, key, FlowKey::ALL_ONES, false);
        for (i, a) in actions.iter().enumerate() {
            if cx.stop {
                break;
            }
            cx.do_action(a);
            cx.freeze_rest(cx.table, 0, &actions[i + 1..], &[]);
        }
        self.slow_path_translation(cx)
    }

    /// The end of a translation outside the tables (packet-out, resume):
    /// pending writes and a freeze are emitted, and the rules the actions
    /// resubmitted through count the packet, as in OVS (the caller credits
    /// them: no megaflow will).
    fn slow_path_translation(&self, mut cx: Ctx<'_>) -> Translation {
        cx.commit();
        cx.finish_freeze(false);
        let counters = self.counter_sets.get(&cx.counters);
        Translation { actions: cx.actions, mask: FlowKey::ALL_ONES, counters, too_deep: cx.too_deep }
    }

    /// Translates the rest of a paused pipeline (NXT_RESUME) for a packet
    /// with `key`: each frozen rule's remaining actions in its own table
    /// (innermost first), with the stack it had, then the action set.
    pub fn translate_continuation(&self, key: &FlowKey, cont: &ofp_types::Continuation) -> Translation {
        let mut cx = Ctx::new(self, key, FlowKey::ALL_ONES, false);
        cx.resume_frozen(&cont.frames, &cont.action_set, &cont.stack);
        self.slow_path_translation(cx)
    }

    /// Like [`Ofproto::translate_key`], with the walk through the tables.
    pub fn trace(&self, key: &FlowKey) -> Trace {
        self.run_xlate(key, 0, true)
    }

    fn run_xlate(&self, key: &FlowKey, _bytes: u64, trace: bool) -> Trace {
        let mut wc = FlowKey::ZERO;
        wc.set_in_port(u32::MAX);
        wc.set_recirc_id(u32::MAX);
        let mut cx = Ctx::new(self, key, wc, trace);
        if !trace {
            cx.memo = self.take_memos();
        }
        match key.recirc_id() {
            0 => {
                cx.do_table(0, true);
                cx.mirror(key.in_port());
            }
            id => match self.recirc.frozen(id) {
                // A packet back from the tracker resumes where ct(table=N)
                // froze its translation, with the registers and metadata
                // it had then (the id determines them, and the id is
                // exact in every megaflow).
                Some(f) => {
                    f.restore(&mut cx.key);
                    let t = f.table;
                    if let Some(frozen) = self.recirc.actions_of(&f) {
                        cx.say(|| format!("resume after recirculation {id:#x}: the frozen actions"));
                        cx.resume_frozen(&frozen.0, &frozen.1, &frozen.2);
                    } else {
                        cx.say(|| format!("resume after recirculation {id:#x} in table {t}"));
                        cx.do_table(t, true);
                    }
                }
                None => cx.say(|| format!("unknown recirculation id {id:#x}: drop")),
            },
        }
        // IP packets' megaflows always pin the fragment bits: the datapath
        // must never apply an L4 decision to a later fragment.
        if key.is_ip_any() && cx.wc.dl_type() == 0xffff {
            cx.wc.set_nw_frag(flow::key::FRAG_ANY | flow::key::FRAG_LATER);
        }
        self.give_memos(std::mem::take(&mut cx.memo));
        cx.finish_freeze(false);
        drop_dead_actions(&mut cx.actions);
        let final_key = cx.key;
        let mask = cx.wc;
        Trace {
            translation: Translation {
                actions: cx.actions,
                mask,
                counters: self.counter_sets.get(&cx.counters),
                too_deep: cx.too_deep,
            },
            lines: cx.trace.unwrap_or_default(),
            final_key,
        }
    }
}

/// What an action set (the pipeline's `write_actions`, or a group bucket)
/// runs, in order, as Open vSwitch 3.1 runs one: the last of each of
/// pop_vlan, pop_mpls, push_mpls, push_vlan, dec_ttl and dec_mpls_ttl (in
/// that order), then every field write in the order written, then one
/// final action: the last group, else the last output, else the last
/// resubmit, else ct_clear, else ct. Without a final action nothing runs.
/// Anything else (controller with options, learn, clone, stack, bundle,
/// output_reg, conjunction) is left out.
fn action_set_list(set: &[Action]) -> Vec<Action> {
    /// An action's place in an action set.
    enum Class {
        /// One of a kind, kept last-written, run in slot order.
        Slot(usize),
        /// A field write: all run, in order.
        Write,
        /// A final action of this rank: the highest (then the last) runs.
        Final(u8),
        /// Not an action-set action.
        Left,
    }
    let class = |a: &Action| match a {
        Action::PopVlan => Class::Slot(0),
        Action::PopMpls(_) => Class::Slot(1),
        Action::PushMpls(_) => Class::Slot(2),
        Action::PushVlan(_) => Class::Slot(3),
        Action::DecTtl | Action::DecTtlIds(_) => Class::Slot(4),
        Action::DecMplsTtl => Class::Slot(5),
        Action::SetField { .. }
        | Action::Load { .. }
        | Action::Move { .. }
        | Action::SetNwTtl(_)
        | Action::SetMplsTtl(_)
        | Action::SetQueue(_) => Class::Write,
        Action::Ct(_) => Class::Final(0),
        Action::CtClear => Class::Final(1),
        Action::Resubmit { .. } => Class::Final(2),
        // `controller` without options is an output to the controller
        // port on the wire.
        Action::Output(_) | Action::OutputMaxLen(..) | Action::Controller { .. } => Class::Final(3),
        Action::Group(_) => Class::Final(4),
        Action::Conjunction { .. }
        | Action::Learn(_)
        | Action::ControllerNx(_)
        | Action::OutputReg { .. }
        | Action::Bundle(_)
        | Action::StackPush(_)
        | Action::StackPop(_)
        | Action::Clone(_) => Class::Left,
    };
    let mut slots: [Option<&Action>; 6] = [None; 6];
    let mut writes = Vec::new();
    let mut last: Option<(u8, &Action)> = None;
    for a in set {
        match class(a) {
            Class::Slot(i) => slots[i] = Some(a),
            Class::Write => writes.push(a.clone()),
            Class::Final(rank) if last.is_none_or(|(r, _)| rank >= r) => last = Some((rank, a)),
            Class::Final(_) | Class::Left => {}
        }
    }
    let Some((_, last)) = last else { return Vec::new() };
    let mut out: Vec<Action> = slots.iter().flatten().map(|a| (*a).clone()).collect();
    out.extend(writes);
    out.push(last.clone());
    out
}

fn join_actions(acts: &[Action]) -> String {
    acts.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(",")
}

/// Removes datapath actions that cannot change what the packet does:
/// header changes after the last action that looks at the packet (OVN's
/// `clone`s restore the fields they changed, after the clone's output),
/// and a `ct_clear` when no `ct` ran since the last one. A megaflow runs
/// its actions on every packet it serves, so each one left is paid per
/// packet.
fn drop_dead_actions(actions: &mut Vec<DpAction>) {
    while matches!(
        actions.last(),
        Some(
            DpAction::SetMasked(_)
                | DpAction::PushVlan { .. }
                | DpAction::PopVlan
                | DpAction::CtClear
                | DpAction::PushMpls { .. }
                | DpAction::PopMpls { .. }
        )
    ) {
        actions.pop();
    }
    // Tracking state is set only by `ct`; a recirculation carries it on.
    let mut cleared = false;
    actions.retain(|a| match a {
        DpAction::CtClear if cleared => false,
        DpAction::CtClear => {
            cleared = true;
            true
        }
        DpAction::Ct(..) | DpAction::Recirc(_) => {
            cleared = false;
            true
        }
        _ => true,
    });
}

impl dpif::Upcall for Ofproto {
    fn translate(&self, key: &FlowKey) -> Translation {
        self.translate_key(key, 0)
    }
}

/// Whether a rule with these instructions has only `conjunction`s (one
/// or more) for actions ([`crate::Rule::conjunctive`]).
pub(crate) fn conjunctive(instructions: &[Instruction]) -> bool {
    let mut any = false;
    let only = instructions.iter().all(|i| match i {
        Instruction::Apply(a) => a.iter().all(|a| {
            any |= matches!(a, Action::Conjunction { .. });
            matches!(a, Action::Conjunction { .. })
        }),
        _ => false,
    });
    only && any
}

impl<'a> Ctx<'a> {
    fn new(of: &'a Ofproto, key: &FlowKey, wc: FlowKey, trace: bool) -> Ctx<'a> {
        Ctx {
            of,
            version: of.version,
            key: *key,
            wc,
            pending: FlowKey::ZERO,
            actions: Vec::new(),
            action_set: Vec::new(),
            trace: trace.then(Vec::new),
            indent: 0,
            depth: 0,
            table: 0,
            cookie: 0,
            stop: false,
            too_deep: false,
            // Room for OVN's walks (100-400 credits) in one allocation,
            // where growing from empty reallocated six times or more.
            counters: Vec::with_capacity(256),
            counted: [0; 64],
            table_counted: [[0; 4]; 2],
            written: FlowKey::ZERO,
            stack: Vec::new(),
            tail: false,
            resubmits: 0,
            rule: None,
            nest: 0,
            freeze: None,
            pause_at: 0,
            freeze_recirc: false,
            mpls_popped: false,
            l3_unparsed: false,
            rule_tail: false,
            memo: Box::default(),
        }
    }
}

impl<'a> Ctx<'a> {
    /// Adds a trace line. The text is built only when tracing, so
    /// translation on the packet path formats nothing.
    #[inline(always)]
    fn say<S: Into<String>>(&mut self, s: impl FnOnce() -> S) {
        if self.trace.is_some() {
            self.say_now(s);
        }
    }

    /// The text of a trace line is built out of line: its temporaries
    /// (a rule's match is 624 bytes) would otherwise sit in the frame of
    /// every function that can trace, the table walk's included.
    #[inline(never)]
    #[cold]
    fn say_now<S: Into<String>>(&mut self, s: impl FnOnce() -> S) {
        let line = format!("{}{}", " ".repeat(self.indent), s().into());
        if let Some(t) = &mut self.trace {
            t.push(line);
        }
    }

    /// Lists `c` among the counters every packet of this translation's
    /// megaflow is credited to (once, however often the walk meets it).
    fn credit(&mut self, c: &'a Arc<dpif::FlowCounters>) {
        let h = ((Arc::as_ptr(c) as usize as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 52) as usize;
        let (w, bit) = (h >> 6, 1u64 << (h & 63));
        if self.counted[w] & bit != 0 && self.counters.iter().any(|x| Arc::ptr_eq(x, c)) {
            return;
        }
        self.counted[w] |= bit;
        self.counters.push(c);
    }

    /// Lists table `table`'s lookup (`matched` false) or match counter.
    fn credit_table(&mut self, table: u8, matched: bool) {
        let (w, bit) = (table as usize >> 6, 1u64 << (table & 63));
        let seen = &mut self.table_counted[matched as usize][w];
        if *seen & bit == 0 {
            *seen |= bit;
            let of = self.of;
            let stats = &of.table_stats[table as usize];
            self.counters.push(if matched { &stats.1 } else { &stats.0 });
        }
    }

    /// Marks bits of the key as consulted.
    fn consult(&mut self, m: &FlowKey) {
        self.wc.or_assign(m);
    }

    fn consult_dl_type(&mut self) {
        self.wc.set_dl_type(0xffff);
    }

    fn do_table(&mut self, table: u8, top: bool) {
        if self.depth >= MAX_DEPTH || self.nest >= MAX_NEST {
            self.say(|| "resubmit/goto depth exceeded; dropping");
            self.stop = true;
            self.too_deep = true;
            return;
        }
        self.nest += 1;
        self.do_table_inner(table, top);
        self.nest -= 1;
    }

    fn do_table_inner(&mut self, table: u8, top: bool) {
        self.depth += 1;
        let saved_table = self.table;
        self.table = table;
        let cls = &self.of.tables[table as usize];
        self.credit_table(table, false);
        // (The rule's match is read only for a trace line: fetching its
        // mask would cost a cache miss per lookup.)
        let found = match self.memo.get_mut(table as usize) {
            Some(memo) => cls.lookup_memo(memo, &self.key, self.version, &mut self.wc),
            None => cls.lookup_rule(&self.key, self.version, &mut self.wc).map(|(id, _, p, r)| (id, p, r)),
        };
        let hit = match found {
            Some((_, _, r)) if r.conjunctive => {
                self.resolve_conjunction(table).and_then(|id| cls.get(id).map(|(_, p, r)| (id, p, r)))
            }
            h => h,
        };
        match hit {
            None => {
                self.say(|| format!("{table:2}. No match."));
                match self.of.table_miss {
                    TableMiss::Drop => self.say(|| "    drop"),
                    TableMiss::Normal => {
                        self.say(|| "    NORMAL (fail-open: no controller)");
                        self.normal();
                    }
                    TableMiss::Controller => {
                        self.commit();
                        self.actions.push(DpAction::Userspace {
                            reason: UserspaceReason::NoMatch,
                            max_len: 128,
                            table_id: table,
                            cookie: 0,
                            extra: None,
                        });
                        self.say(|| "    CONTROLLER (table miss)");
                    }
                }
            }
            Some((hit_id, prio, rule)) => {
                self.credit_table(table, true);
                // The datapath credits packets through `counters`; the
                // translation itself only marks the rule used.
                rule.counters.touch(self.of.now());
                self.credit(&rule.counters);
                let cookie = rule.cookie;
                self.say(|| {
                    let ms = cls.get(hit_id).map(|(m, _, _)| m.to_match().to_string()).unwrap_or_default();
                    let desc =
                        if ms.is_empty() { format!("priority {prio}") } else { format!("{ms}, priority {prio}") };
                    let cookie_s = if cookie != 0 { format!(", cookie {cookie:#x}") } else { String::new() };
                    format!("{table:2}. {desc}{cookie_s}")
                });
                self.cookie = rule.cookie;
                let outer_rule = self.rule.replace((table, hit_id));
                self.indent += 4;
                let instructions = &rule.instructions;
                if instructions.is_empty() {
                    self.say(|| "drop");
                }
                let mut goto = None;
                // The meter instruction runs first (OpenFlow's instruction order).
                for ins in instructions.iter() {
                    if let Instruction::Meter(m) = ins {
                        match self.of.meters.get(m) {
                            Some(meter) => {
                                self.commit();
                                self.actions.push(DpAction::Meter(dpif::MeterRef(Arc::clone(meter))));
                                self.say(|| format!("meter:{m}"));
                            }
                            None => self.say(|| format!("meter:{m} does not exist; ignored")),
                        }
                    }
                }
                for (k, ins) in instructions.iter().enumerate() {
                    if self.stop {
                        break;
                    }
                    match ins {
                        Instruction::Apply(acts) => {
                            let last_instruction = instructions[k + 1..].is_empty();
                            for (i, a) in acts.iter().enumerate() {
                                if self.stop {
                                    break;
                                }
                                self.tail = i + 1 == acts.len();
                                self.rule_tail = self.tail && last_instruction;
                                self.do_action(a);
                                // A pause: the rest of this rule (and its
                                // goto_table) runs on resume.
                                self.freeze_rest(table, cookie, &acts[i + 1..], instructions);
                                if std::mem::take(&mut self.mpls_popped) && !self.stop && i + 1 == acts.len() {
                                    self.recirc_after_pop(instructions);
                                }
                            }
                        }
                        Instruction::Write(acts) => {
                            self.say(|| format!("write_actions({})", join_actions(acts)));
                            // Kept in the order written; which of them run, and
                            // in what order, is decided when the set runs
                            // (`action_set_list`), as in Open vSwitch.
                            self.action_set.extend(acts.iter().cloned());
                        }
                        Instruction::Clear => {
                            self.say(|| "clear_actions");
                            self.action_set.clear();
                        }
                        Instruction::WriteMetadata { value, mask } => {
                            let md = (self.key.metadata() & !mask) | (value & mask);
                            self.key.set_metadata(md);
                            self.say(|| format!("write_metadata:{value:#x}/{mask:#x}"));
                        }
                        Instruction::GotoTable(t) => goto = Some(*t),
                        Instruction::Meter(_) => {}
                    }
                }
                self.rule = outer_rule;
                if let Some(t) = goto {
                    if !self.stop {
                        self.say(|| format!("goto_table:{t}"));
                        self.indent -= 4;
                        self.do_table(t, top);
                        self.table = saved_table;
                        self.depth -= 1;
                        return;
                    }
                }
                self.indent -= 4;
            }
        }
        if top && !self.stop && !self.action_set.is_empty() {
            self.execute_action_set();
        }
        self.table = saved_table;
        self.depth -= 1;
    }

    /// After an action that paused the pipeline (and only then: `freeze`
    /// is set and this level has not frozen yet), records the actions left
    /// at this level, with a goto_table as a resubmit to that table.
    fn freeze_rest(&mut self, table: u8, cookie: u64, rest: &[Action], instructions: &[Instruction]) {
        if !self.stop {
            return;
        }
        let Some(f) = self.freeze.as_mut() else { return };
        let mut actions = rest.to_vec();
        // The instructions after the apply list, as actions (what Open
        // vSwitch freezes too): write_metadata as a set_field, goto_table
        // as a resubmit. write_actions and clear_actions, which no action
        // can express, are not carried (Open vSwitch's continuation cannot
        // carry them either: it writes them where its own reader refuses
        // them).
        for ins in instructions {
            match ins {
                Instruction::WriteMetadata { value, mask } => {
                    if let Some(field) = flow::fields::by_name("metadata") {
                        actions.push(Action::SetField { field, value: *value as u128, mask: *mask as u128 });
                    }
                }
                Instruction::GotoTable(t) => actions.push(Action::Resubmit { port: None, table: Some(*t) }),
                _ => {}
            }
        }
        // Outer levels see `stop` too and add theirs as the walk unwinds.
        f.push(ofp_types::Frozen { table_id: table, cookie, actions });
    }

    /// `set_*_ttl` (`set`) or `dec_*_ttl` (`None`) on the TTL at `field`:
    /// a decrement reads the TTL (so the megaflow pins it) and stops the
    /// pipeline at 1 or 0; the new value is written with the next commit.
    fn write_ttl(&mut self, field: flow::key::Loc, set: Option<u8>, what: &str) {
        let mut m = FlowKey::ZERO;
        field.set(&mut m, 0xff);
        let ttl = match set {
            Some(t) => t,
            None => {
                self.consult(&m);
                let t = field.get(&self.key) as u8;
                if t <= 1 {
                    self.say(|| format!("  {what} exceeded; dropping"));
                    self.stop = true;
                    return;
                }
                t - 1
            }
        };
        field.set(&mut self.key, ttl as u128);
        self.pending.or_assign(&m);
    }

    /// After a pop_mpls that ends its rule's actions, with a goto_table
    /// next: the lookup there needs the popped frame's L3/L4 fields, which
    /// only the datapath can parse. So the packet recirculates (as Open
    /// vSwitch does) and the next pass starts in that table with the
    /// registers and metadata it has now. Without a goto nothing looks the
    /// packet up again, and the walk goes on.
    #[inline(never)]
    fn recirc_after_pop(&mut self, instructions: &[Instruction]) {
        let Some(t) = instructions.iter().find_map(|i| match i {
            Instruction::GotoTable(t) => Some(*t),
            _ => None,
        }) else {
            return;
        };
        self.recirc_to_parse(t);
    }

    /// Recirculates so that the lookup in table `t` sees the popped
    /// frame's L3/L4 fields (registers and metadata carry over); this pass
    /// ends here.
    #[inline(never)]
    fn recirc_to_parse(&mut self, t: u8) {
        self.commit();
        let id = self.of.recirc.id_for(&crate::ct::Frozen::capture(t, &self.key));
        self.say(|| format!("  recirculate as {id:#x} to parse the popped frame, resuming in table {t}"));
        self.actions.push(DpAction::Recirc(id));
        self.l3_unparsed = false;
        self.stop = true;
    }

    /// Stops the walk before `a` (a lookup that must see the popped
    /// frame): `a` and, as the walk unwinds, the rest of each rule it is in
    /// are frozen, and the packet recirculates to run them on its parsed
    /// frame (see `finish_freeze`).
    #[inline(never)]
    fn freeze_to_parse(&mut self, a: Action) {
        self.commit();
        self.say(|| format!("  freeze {a} and the rest of the walk, to run on the popped frame"));
        self.freeze = Some(vec![ofp_types::Frozen { table_id: self.table, cookie: 0, actions: vec![a] }]);
        self.freeze_recirc = true;
        self.l3_unparsed = false;
        self.stop = true;
    }

    /// Runs frozen rules' rests (a recirculation resuming them), innermost
    /// first, then the action set if the walk was not stopped.
    fn resume_frozen(&mut self, frames: &[ofp_types::Frozen], action_set: &[Action], stack: &[(u128, u8)]) {
        self.action_set = action_set.to_vec();
        self.stack = stack.to_vec();
        for (k, fr) in frames.iter().enumerate() {
            self.table = fr.table_id;
            self.cookie = fr.cookie;
            for (i, a) in fr.actions.iter().enumerate() {
                self.tail = false;
                self.rule_tail = k + 1 == frames.len() && i + 1 == fr.actions.len();
                self.do_action(a);
                if self.stop {
                    // Frozen again (a pause, another pop): what is left
                    // here and in the outer frames goes with it.
                    self.freeze_rest(fr.table_id, fr.cookie, &fr.actions[i + 1..], &[]);
                    if let Some(f) = self.freeze.as_mut() {
                        f.extend(frames[k + 1..].iter().cloned());
                    }
                    return;
                }
                if std::mem::take(&mut self.mpls_popped) && self.rule_tail {
                    self.say(|| "  (the popped frame is not looked up again)");
                }
            }
        }
        if !self.action_set.is_empty() {
            self.execute_action_set();
        }
    }

    /// Hands the frozen pipeline, with the action set and the stack, to
    /// the paused packet-in, or to the recirculation that resumes it.
    /// `keep_set`: the walk goes on after this freeze (one inside a group
    /// bucket), so its action set stays too.
    fn finish_freeze(&mut self, keep_set: bool) {
        let Some(frames) = self.freeze.take() else { return };
        let set = if keep_set { self.action_set.clone() } else { std::mem::take(&mut self.action_set) };
        if std::mem::take(&mut self.freeze_recirc) {
            let table = frames.first().map_or(0, |f| f.table_id);
            let state = crate::ct::Frozen::capture(table, &self.key);
            let id = self.of.recirc.id_with_actions(state, (frames, set, self.stack.clone()));
            self.say(|| format!("  recirculate as {id:#x} to parse the popped frame, resuming the frozen actions"));
            self.actions.push(DpAction::Recirc(id));
            return;
        }
        let cont = ofp_types::Continuation {
            bridge: self.of.continuation_bridge(),
            conntracked: self.key.ct_state() != 0,
            frames,
            action_set: set,
            stack: self.stack.clone(),
        };
        if let Some(DpAction::Userspace { extra: Some(x), .. }) = self.actions.get_mut(self.pause_at) {
            let mut e = (**x).clone();
            e.continuation = Some(Arc::new(cont));
            *x = Arc::new(e);
        }
    }

    #[inline(never)]
    fn execute_action_set(&mut self) {
        let set = action_set_list(&std::mem::take(&mut self.action_set));
        self.say(|| "action set:");
        for a in &set {
            if self.stop {
                break;
            }
            self.do_action(a);
        }
    }

    /// Emits pending field writes as one masked set (inline when there are
    /// none, which is most calls; the work is out of line).
    #[inline]
    fn commit(&mut self) {
        if !self.pending.is_zero() {
            self.commit_pending();
        }
    }

    #[inline(never)]
    fn commit_pending(&mut self) {
        self.written.or_assign(&self.pending);
        let mut key = self.key.and(&self.pending);
        // The set action's key also carries the protocol (dl_type for
        // L3 writes, nw_proto for L4 writes) so it prints by protocol.
        // Those fields are never written (the mask excludes them), and
        // writing a field of that layer required its prerequisite, so
        // every key of the megaflow agrees on them.
        let l3 = (STAGE_L3..WORDS).any(|i| self.pending.w[i] != 0);
        let l4 = (STAGE_L4..WORDS).any(|i| self.pending.w[i] != 0);
        let dl = if l3 { self.key.dl_type() } else { 0 };
        let proto = if l4 { self.key.nw_proto() } else { 0 };
        // (arp_op lives in nw_proto's place and is written: kept.)
        if self.pending.dl_type() == 0 {
            key.set_dl_type(dl);
        }
        if self.pending.nw_proto() == 0 {
            key.set_nw_proto(proto);
        }
        self.actions.push(DpAction::SetMasked(SetFields::new(&key, &self.pending)));
        self.pending = FlowKey::ZERO;
    }

    /// Writes `value` under `mask` into `field` (set_field, load, move's
    /// destination). Registers and metadata live only in the translation's
    /// key: the datapath never sees them, so writing them emits nothing.
    fn set_field(&mut self, field: &'static flow::fields::FieldDef, value: u128, mask: u128) {
        if field.name == "vlan_tci" {
            // Rewriting a tag needs one.
            let mut m = FlowKey::ZERO;
            m.set_vlan_tci(VLAN_PRESENT);
            self.consult(&m);
            if self.key.vlan_tci() & VLAN_PRESENT == 0 {
                self.say(|| "  packet has no VLAN tag; ignored");
                return;
            }
        } else {
            self.consult(&field.prereq.mask());
            if !field.prereq.holds_for_packet(&self.key) {
                self.say(|| "  prerequisites not met; ignored");
                return;
            }
        }
        let old = field.get(&self.key);
        field.set(&mut self.key, (old & !mask) | (value & mask));
        if !key_only(field.loc) {
            let mut pm = FlowKey::ZERO;
            field.set(&mut pm, mask);
            self.pending.or_assign(&pm);
        }
    }

    /// Reads a sub-field of the flow as translated so far, marking its bits
    /// (and its prerequisites' bits) consulted. `None` if the field's
    /// prerequisites do not hold for this packet (then only those were
    /// consulted). A register holds a constant or bits copied from the
    /// packet by an earlier move, which consulted them then.
    fn read_subfield(&mut self, sf: &ofp_types::SubField) -> Option<u128> {
        self.consult(&sf.field.prereq.mask());
        if !sf.field.prereq.holds_for_packet(&self.key) {
            self.say(|| format!("  {sf}: prerequisites not met; ignored"));
            return None;
        }
        let mut m = FlowKey::ZERO;
        sf.field.set(&mut m, sf.mask());
        self.consult(&m);
        Some((sf.field.get(&self.key) >> sf.ofs) & sf.ones())
    }

    fn output(&mut self, port: u32) {
        self.commit();
        self.actions.push(DpAction::Output(port));
    }

    /// Conjunctive matches (`conjunction(id,k/n)` flows and the flow that
    /// matches `conj_id=id`), as `ovs-fields(7)` defines them. Called when
    /// the highest-priority match is a conjunctive flow: every flow of
    /// the table is weighed (each one's match bits consulted, so the
    /// megaflow stays exact): at each priority, from the highest, a
    /// conjunction whose every clause has a matching flow leads to the
    /// `conj_id` flow found with `conj_id` set; an ordinary flow of higher
    /// priority than the remaining conjunctions wins otherwise. A linear
    /// walk, taken only in tables whose best match is conjunctive.
    #[inline(never)]
    fn resolve_conjunction(&mut self, table: u8) -> Option<classifier::RuleId> {
        let cls = &self.of.tables[table as usize];
        let mut clauses: Vec<(u32, u32, u8, u8)> = Vec::new();
        let mut plain: Option<(u32, classifier::RuleId)> = None;
        let better = |p: u32, id: classifier::RuleId, cur: Option<(u32, classifier::RuleId)>| {
            cur.is_none_or(|(cp, cid)| p > cp || (p == cp && id < cid))
        };
        for rid in cls.iter(self.version) {
            let Some((m, prio, r)) = cls.get(rid) else { continue };
            self.wc.or_assign(&m.mask);
            if !self.key.eq_masked(&m.key, &m.mask) || m.mask.conj_id() != 0 {
                continue;
            }
            if r.conjunctive {
                for i in &r.instructions {
                    if let Instruction::Apply(acts) = i {
                        for a in acts {
                            if let Action::Conjunction { id, clause, n_clauses } = a {
                                clauses.push((prio, *id, *clause, *n_clauses));
                            }
                        }
                    }
                }
            } else if better(prio, rid, plain) {
                plain = Some((prio, rid));
            }
        }
        let mut prios: Vec<u32> = clauses.iter().map(|c| c.0).collect();
        prios.sort_unstable_by(|a, b| b.cmp(a));
        prios.dedup();
        for p in prios {
            if plain.is_some_and(|(pp, _)| pp > p) {
                break;
            }
            let mut done: Option<u32> = None;
            for &(_, cid, _, n) in clauses.iter().filter(|c| c.0 == p) {
                let have = (1..=n).all(|k| clauses.iter().any(|c| c.0 == p && c.1 == cid && c.2 == k && c.3 == n));
                if have && done.is_none_or(|d| cid < d) {
                    done = Some(cid);
                }
            }
            let Some(cid) = done else { continue };
            self.say(|| format!("{table:2}. conjunction({cid}) matched at priority {p}"));
            self.key.set_conj_id(cid);
            let mut found: Option<(u32, classifier::RuleId)> = None;
            for rid in cls.iter(self.version) {
                let Some((m, prio, _)) = cls.get(rid) else { continue };
                if m.mask.conj_id() != 0 && self.key.eq_masked(&m.key, &m.mask) && better(prio, rid, found) {
                    found = Some((prio, rid));
                }
            }
            // conj_id is derived, never a packet field: out of the key and
            // the megaflow again.
            self.key.set_conj_id(0);
            self.wc.set_conj_id(0);
            if let Some((_, rid)) = found {
                return Some(rid);
            }
        }
        self.wc.set_conj_id(0);
        plain.map(|(_, rid)| rid)
    }

    /// `learn(...)`: builds the flow from this packet's values (the source
    /// bits become exact in the megaflow, so a packet that would learn
    /// something else comes up again) and leaves it for housekeeping to
    /// add. A megaflow does not re-run the learn for later packets, so a
    /// learned flow's idle timeout is not refreshed by them.
    fn learn(&mut self, l: &ofp_types::learn::LearnSpec) {
        use ofp_types::learn::{LearnItem, LearnSrc};
        let mut m = flow::Match::CATCHALL;
        let mut acts = Vec::new();
        for it in &l.items {
            let value = |cx: &mut Self, src: &LearnSrc| match src {
                LearnSrc::Field(f) => cx.read_subfield(f),
                LearnSrc::Value(v) => Some(*v),
            };
            match it {
                LearnItem::Match { dst, src } => {
                    let Some(v) = value(self, src) else { return };
                    let (old_v, old_m) = (dst.field.get(&m.key), dst.field.get(&m.mask));
                    dst.field.set(&mut m.key, (old_v & !dst.mask()) | ((v << dst.ofs) & dst.mask()));
                    dst.field.set(&mut m.mask, old_m | dst.mask());
                }
                LearnItem::Load { dst, src } => {
                    let Some(v) = value(self, src) else { return };
                    acts.push(Action::Load { dst: *dst, value: v & dst.ones() });
                }
                LearnItem::Output { src } => {
                    let Some(p) = self.read_subfield(src) else { return };
                    acts.push(Action::Output(crate::actions::OfPort::Port(p as u32)));
                }
            }
        }
        let mut spec = crate::FlowSpec {
            table: l.table,
            priority: l.priority as u32,
            cookie: l.cookie,
            idle_timeout: l.idle_timeout,
            hard_timeout: l.hard_timeout,
            matched: m,
            instructions: vec![Instruction::Apply(acts)],
            has_actions: true,
            table_given: true,
            cookie_mask: 0,
            flags: 0,
            importance: 0,
            out_port: None,
            out_group: None,
        };
        if l.flags & ofp_types::learn::F_SEND_FLOW_REM != 0 {
            spec.flags |= ofp_types::parse::flags::SEND_FLOW_REM;
        }
        self.say(|| format!("  learned: table={} priority={} {:?}", spec.table, spec.priority, spec.matched));
        let learner = (l.flags & ofp_types::learn::F_DELETE_LEARNED != 0).then_some(self.rule).flatten();
        self.of.learned.lock().expect("learned flows").push((spec, learner));
    }

    /// Runs one action. A resubmit is handled here and everything else in
    /// [`Ctx::do_other_action`], kept out of line: OVN's pipelines chain
    /// 30-100 tables through resubmits, each a level of recursion, and the
    /// other actions' locals (several flow keys) made every level's frame
    /// 1.4 KB. The walk's stack then outgrew the L1 cache and pushed out
    /// the tables' own data (cachegrind, OVN's stored pipeline).
    fn do_action(&mut self, a: &Action) {
        if let Action::Resubmit { port, table } = a {
            let tail = std::mem::take(&mut self.tail);
            let rule_tail = std::mem::take(&mut self.rule_tail);
            self.say(|| a.to_string());
            self.resubmit(a, *port, *table, tail, rule_tail);
        } else {
            self.do_other_action(a);
        }
    }

    /// `resubmit([port],[table])`.
    #[inline]
    fn resubmit(&mut self, a: &Action, port: Option<u32>, table: Option<u8>, tail: bool, rule_tail: bool) {
        self.resubmits += 1;
        if self.resubmits > MAX_RESUBMITS {
            self.say(|| "too many resubmits; dropping");
            self.stop = true;
            self.too_deep = true;
            return;
        }
        let t = table.unwrap_or(self.table);
        // After a pop_mpls, the lookup needs the popped frame's L3/L4
        // fields, which only the datapath parses: a resubmit that
        // ends its rule looks it up in a second pass, as a
        // goto_table does; any other freezes itself and the rest of
        // the walk into the recirculation, as Open vSwitch does.
        if self.l3_unparsed {
            if rule_tail && port.is_none() {
                self.recirc_to_parse(t);
            } else {
                self.freeze_to_parse(a.clone());
            }
            return;
        }
        let saved = self.key.in_port();
        if let Some(p) = port {
            self.key.set_in_port(p);
        }
        self.indent += 4;
        // A tail resubmit does not deepen the walk.
        let flat = tail && self.depth > 0;
        self.depth -= flat as u32;
        self.do_table(t, false);
        self.depth += flat as u32;
        self.indent -= 4;
        self.key.set_in_port(saved);
    }

    #[inline(never)]
    fn do_other_action(&mut self, a: &Action) {
        let tail = std::mem::take(&mut self.tail);
        let rule_tail = std::mem::take(&mut self.rule_tail);
        self.say(|| a.to_string());
        let in_port = self.key.in_port();
        match a {
            Action::Ct(spec) => {
                // Field writes so far reach the tracker.
                self.commit();
                let params = spec.params_for(&self.key);
                self.actions.push(DpAction::Ct(self.of.conntrack.clone(), Box::new(params)));
                if let Some(t) = spec.table {
                    let id = self.of.recirc.id_for(&crate::ct::Frozen::capture(t, &self.key));
                    self.say(|| format!("  recirculate as {id:#x}, resuming in table {t}"));
                    self.actions.push(DpAction::Recirc(id));
                    // This instance of the packet ends here (see ct.rs).
                    self.stop = true;
                }
            }
            Action::CtClear => {
                self.commit();
                self.actions.push(DpAction::CtClear);
                flow::key::clear_ct(&mut self.key);
            }
            Action::OutputMaxLen(p, _) => self.do_action(&Action::Output(*p)),
            Action::Output(OfPort::Port(p)) => {
                if *p == in_port {
                    self.say(|| "  skipping output to input port");
                } else if !self.of.ports.is_empty() && !self.of.port_exists(*p) {
                    self.say(|| format!("  no such port {p}"));
                } else {
                    self.output(*p);
                }
            }
            Action::Output(OfPort::InPort) => self.output(in_port),
            Action::Output(OfPort::Local) => {
                let local = crate::actions::ofpp::LOCAL;
                if local != in_port && (self.of.ports.is_empty() || self.of.port_exists(local)) {
                    self.output(local);
                }
            }
            Action::Output(OfPort::Flood) | Action::Output(OfPort::All) => {
                let all = matches!(a, Action::Output(OfPort::All));
                let ports: Vec<u32> = self.of.flood_ports(all).map(|p| p.ofport).filter(|&p| p != in_port).collect();
                for p in ports {
                    self.output(p);
                }
            }
            Action::Output(OfPort::Normal) => self.normal(),
            Action::Output(OfPort::Controller) => self.controller(65535),
            Action::Controller { max_len } => self.controller(*max_len),
            Action::ControllerNx(c) => {
                self.commit();
                let (table_id, cookie) = (self.table, self.cookie);
                let mut meta = FlowKey::ZERO;
                meta.w[..flow::key::STAGE_L2].copy_from_slice(&self.key.w[..flow::key::STAGE_L2]);
                let extra = dpif::UserspaceExtra {
                    controller_id: c.controller_id,
                    reason: c.reason,
                    userdata: c.userdata.clone(),
                    pause: c.pause,
                    meta,
                    continuation: None,
                };
                let reason = match c.reason {
                    0 => UserspaceReason::NoMatch,
                    2 => UserspaceReason::InvalidTtl,
                    _ => UserspaceReason::Action,
                };
                // Open vSwitch sends the whole packet here whatever
                // max_len says (it buffers nothing), and so does xvs.
                self.actions.push(DpAction::Userspace {
                    reason,
                    max_len: u16::MAX,
                    table_id,
                    cookie,
                    extra: Some(std::sync::Arc::new(extra)),
                });
                // A paused pipeline stops here and continues on NXT_RESUME:
                // each level the walk unwinds through freezes the rest of
                // its rule (`freeze_rest`) into the packet-in.
                if c.pause {
                    self.stop = true;
                    self.freeze = Some(Vec::new());
                    self.pause_at = self.actions.len() - 1;
                }
            }
            Action::SetField { field, value, mask } => self.set_field(field, *value, *mask),
            Action::StackPush(sf) => {
                let Some(v) = self.read_subfield(sf) else { return };
                if self.stack.len() >= MAX_STACK {
                    self.say(|| "  stack overflow; push ignored");
                    return;
                }
                self.stack.push((v, sf.n_bits.div_ceil(8) as u8));
            }
            Action::StackPop(sf) => match self.stack.pop() {
                Some((v, _)) => self.set_field(sf.field, (v & sf.ones()) << sf.ofs, sf.mask()),
                None => self.say(|| "  stack underflow; pop ignored"),
            },
            Action::Clone(acts) => {
                // A copy of the packet and its pipeline state runs the
                // actions; field writes and VLAN changes are undone after
                // (as for a group bucket), registers and the stack restored.
                let stack = self.stack.clone();
                self.run_bucket(acts, false);
                self.stack = stack;
            }
            Action::Learn(l) => self.learn(l),
            // Conjunctive flows are resolved at lookup (resolve_conjunction).
            Action::Conjunction { .. } => {}
            Action::Load { dst, value } => self.set_field(dst.field, value << dst.ofs, dst.mask()),
            Action::Move { src, dst } => {
                // The bits read decide what is written: they become exact
                // in the megaflow (see `read_subfield`).
                let Some(v) = self.read_subfield(src) else { return };
                self.set_field(dst.field, v << dst.ofs, dst.mask());
            }
            Action::Bundle(b) => {
                let live = |p: &u16| self.of.ports.get(&(*p as u32)).is_some_and(|c| c.up);
                let chosen = if b.algorithm == crate::actions::BUNDLE_ACTIVE_BACKUP {
                    b.members.iter().copied().find(live)
                } else {
                    let alive: Vec<u16> = b.members.iter().copied().filter(live).collect();
                    let h = self.nx_hash(b.fields, b.basis);
                    let weight = |p: &u16| (h ^ *p as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(31);
                    alive.into_iter().max_by_key(weight)
                };
                match (&b.dst, chosen) {
                    (Some(d), p) => self.set_field(d.field, (p.unwrap_or(0xffff) as u128) << d.ofs, d.mask()),
                    (None, Some(p)) => self.do_action(&Action::Output(OfPort::Port(p as u32))),
                    (None, None) => self.say(|| "  bundle: no live member, dropped".to_string()),
                }
            }
            Action::OutputReg { src, .. } => {
                let Some(p) = self.read_subfield(src) else { return };
                let p = p as u32;
                let port = match p {
                    p if p != 0 && p < ofpp::MAX => Some(OfPort::Port(p)),
                    ofpp::IN_PORT => Some(OfPort::InPort),
                    ofpp::NORMAL => Some(OfPort::Normal),
                    ofpp::FLOOD => Some(OfPort::Flood),
                    ofpp::ALL => Some(OfPort::All),
                    ofpp::LOCAL => Some(OfPort::Local),
                    ofpp::CONTROLLER => Some(OfPort::Controller),
                    _ => None,
                };
                match port {
                    Some(p) => self.do_action(&Action::Output(p)),
                    None => self.say(|| format!("  port {p:#x} read from {src}: no output")),
                }
            }
            Action::PushVlan(tpid) => {
                let mut m = FlowKey::ZERO;
                m.set_vlan_tci(0xffff);
                self.consult(&m);
                self.commit();
                let cur = self.key.vlan_tci();
                let tci = if cur & VLAN_PRESENT != 0 { cur } else { VLAN_PRESENT };
                self.key.set_vlan_tci2(cur);
                self.key.set_vlan_tci(tci);
                self.actions.push(DpAction::PushVlan { tpid: *tpid, tci });
            }
            Action::PopVlan => {
                let mut m = FlowKey::ZERO;
                m.set_vlan_tci(VLAN_PRESENT);
                self.consult(&m);
                if self.key.vlan_tci() & VLAN_PRESENT != 0 {
                    self.commit();
                    let inner = self.key.vlan_tci2();
                    m.set_vlan_tci2(VLAN_PRESENT);
                    self.consult(&m);
                    self.key.set_vlan_tci(inner);
                    self.key.set_vlan_tci2(0);
                    self.actions.push(DpAction::PopVlan);
                }
            }
            Action::PushMpls(et) => {
                self.consult_dl_type();
                self.commit();
                let mut m = FlowKey::ZERO;
                let lse = if matches!(self.key.dl_type(), ethertype::MPLS | ethertype::MPLS_MCAST) {
                    // Another entry on top of the stack: a copy of the
                    // current top, not at the bottom of the stack.
                    m.set_mpls_lse(u32::MAX);
                    self.consult(&m);
                    self.key.mpls_lse() & !0x100
                } else {
                    // A new stack, as Open vSwitch builds it: label 0 (2
                    // for IPv6, the explicit nulls), TC from the DSCP,
                    // the IP TTL (64 if none), bottom of stack.
                    let (mut tc, mut ttl) = (0u32, 64u32);
                    let label = if self.key.is_ipv6() { 2u32 } else { 0 };
                    if self.key.is_ip_any() {
                        m.set_nw_tos(0xfc);
                        m.set_nw_ttl(0xff);
                        self.consult(&m);
                        tc = ((self.key.nw_tos() >> 2) & 7) as u32;
                        if self.key.nw_ttl() != 0 {
                            ttl = self.key.nw_ttl() as u32;
                        }
                    }
                    label << 12 | tc << 9 | 1 << 8 | ttl
                };
                self.actions.push(DpAction::PushMpls { ethertype: *et, lse });
                self.key.set_dl_type(*et);
                for w in &mut self.key.w[STAGE_L3..WORDS] {
                    *w = 0;
                }
                self.key.set_mpls_lse(lse);
            }
            Action::PopMpls(et) => {
                self.consult_dl_type();
                if !matches!(self.key.dl_type(), ethertype::MPLS | ethertype::MPLS_MCAST) {
                    self.say(|| "  not MPLS; ignored");
                    return;
                }
                self.commit();
                self.actions.push(DpAction::PopMpls { ethertype: *et });
                // The datapath parses what was under the label; this walk
                // does not see it (no recirculation here, unlike OVS).
                self.key.set_dl_type(*et);
                self.key.set_mpls_lse(0);
                self.mpls_popped = true;
                self.l3_unparsed = true;
            }
            Action::SetMplsTtl(_) | Action::DecMplsTtl => {
                self.consult_dl_type();
                if !matches!(self.key.dl_type(), ethertype::MPLS | ethertype::MPLS_MCAST) {
                    self.say(|| "  not MPLS; ignored");
                    return;
                }
                let set = if let Action::SetMplsTtl(t) = a { Some(*t) } else { None };
                self.write_ttl(loc::MPLS_TTL, set, "MPLS TTL");
            }
            Action::DecTtl | Action::DecTtlIds(_) | Action::SetNwTtl(_) => {
                self.consult_dl_type();
                if !self.key.is_ip_any() {
                    self.say(|| "  not IP; ignored");
                    return;
                }
                let set = if let Action::SetNwTtl(t) = a { Some(*t) } else { None };
                self.write_ttl(loc::NW_TTL, set, "TTL");
            }
            Action::Resubmit { port, table } => self.resubmit(a, *port, *table, tail, rule_tail),
            Action::Group(g) => self.group(*g),
            Action::SetQueue(_) => {}
        }
    }

    /// Port mirroring: a mirror selecting the input port (or everything)
    /// gets the packet as it arrived (its output goes first, before any
    /// rewrite); one selecting an output port gets a copy after the
    /// pipeline. Depends only on in_port (always in the megaflow) and on
    /// the outputs the translation chose.
    fn mirror(&mut self, in_port: u32) {
        if self.of.mirrors.is_empty() {
            return;
        }
        let outs: Vec<u32> =
            self.actions.iter().filter_map(|a| if let DpAction::Output(p) = a { Some(*p) } else { None }).collect();
        let mut first = Vec::new();
        let mut last = Vec::new();
        for m in &self.of.mirrors {
            if m.output == in_port || outs.contains(&m.output) || first.contains(&m.output) || last.contains(&m.output)
            {
                continue;
            }
            if m.select_all || m.src.contains(&in_port) {
                first.push(m.output);
            } else if !outs.is_empty() && m.dst.iter().any(|d| outs.contains(d)) {
                last.push(m.output);
            }
        }
        if first.is_empty() && last.is_empty() {
            return;
        }
        self.say(|| format!("mirror to {:?}", first.iter().chain(&last).collect::<Vec<_>>()));
        let mut acts: Vec<DpAction> = first.into_iter().map(DpAction::Output).collect();
        acts.append(&mut self.actions);
        self.actions = acts;
        if !last.is_empty() {
            self.commit();
            self.actions.extend(last.into_iter().map(DpAction::Output));
        }
    }

    /// Whether a port (or a group, through any live bucket) is live.
    fn live(&self, port: Option<u32>, group: Option<u32>, depth: u32) -> bool {
        let port_ok = port.is_none_or(|p| self.of.ports.get(&p).is_some_and(|c| c.up));
        let group_ok = group.is_none_or(|g| {
            depth < 8
                && self
                    .of
                    .groups
                    .get(&g)
                    .is_some_and(|gr| gr.buckets.iter().any(|b| self.live(b.watch_port, b.watch_group, depth + 1)))
        });
        port_ok && group_ok
    }

    /// A hash of the flow for select groups: L2 addresses and type, VLAN,
    /// for IP the addresses and protocol, for TCP/UDP/SCTP the ports, and
    /// for ARP/RARP the sender and target protocol addresses (which the key
    /// holds in nw_src/nw_dst), so ARP between many hosts spreads over the
    /// buckets instead of all landing in one.
    /// Symmetric in source and destination (both directions of a
    /// connection pick the same bucket). Every field it reads is marked
    /// consulted, so the megaflow keeps flows of different buckets apart.
    fn select_hash(&mut self) -> u64 {
        let k = self.key;
        let mut m = FlowKey::ZERO;
        m.set_dl_src(u64::MAX >> 16);
        m.set_dl_dst(u64::MAX >> 16);
        m.set_dl_type(0xffff);
        m.set_vlan_tci(0x1fff);
        let mix = |h: u64, v: u64| (h ^ v).wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(29);
        let mut h = mix(0, k.dl_src() ^ k.dl_dst());
        h = mix(h, k.dl_type() as u64);
        h = mix(h, (k.vlan_tci() & 0x1fff) as u64);
        if k.is_ip_any() {
            m.set_nw_proto(0xff);
            if k.is_ipv6() {
                m.set_ipv6_src(u128::MAX);
                m.set_ipv6_dst(u128::MAX);
                let x = k.ipv6_src() ^ k.ipv6_dst();
                h = mix(h, x as u64);
                h = mix(h, (x >> 64) as u64);
            } else {
                m.set_nw_src(u32::MAX);
                m.set_nw_dst(u32::MAX);
                h = mix(h, (k.nw_src() ^ k.nw_dst()) as u64);
            }
            h = mix(h, k.nw_proto() as u64);
            if matches!(k.nw_proto(), 6 | 17 | 132) {
                m.set_tp_src(0xffff);
                m.set_tp_dst(0xffff);
                h = mix(h, (k.tp_src() ^ k.tp_dst()) as u64);
            }
        } else if matches!(k.dl_type(), ethertype::ARP | ethertype::RARP) {
            m.set_nw_src(u32::MAX);
            m.set_nw_dst(u32::MAX);
            h = mix(h, (k.nw_src() ^ k.nw_dst()) as u64);
        }
        self.consult(&m);
        h ^ (h >> 31)
    }

    /// The hash of a Nicira field set (`enum nx_hash_fields`) with `basis`,
    /// for `bundle`'s `hrw`: source MAC; source or destination IP address;
    /// the symmetric sets hash as select groups do. The fields it reads
    /// become exact in the megaflow.
    fn nx_hash(&mut self, fields: u16, basis: u16) -> u64 {
        let k = self.key;
        let mut m = FlowKey::ZERO;
        let v = match fields {
            0 => {
                m.set_dl_src(u64::MAX >> 16);
                k.dl_src()
            }
            4 | 5 if k.is_ipv6() => {
                m.set_dl_type(0xffff);
                let a = if fields == 4 {
                    m.set_ipv6_src(u128::MAX);
                    k.ipv6_src()
                } else {
                    m.set_ipv6_dst(u128::MAX);
                    k.ipv6_dst()
                };
                (a ^ (a >> 64)) as u64
            }
            4 | 5 => {
                m.set_dl_type(0xffff);
                if fields == 4 {
                    m.set_nw_src(u32::MAX);
                    k.nw_src() as u64
                } else {
                    m.set_nw_dst(u32::MAX);
                    k.nw_dst() as u64
                }
            }
            _ => self.select_hash(),
        };
        self.consult(&m);
        (v ^ (basis as u64) << 48).wrapping_mul(0xc2b2_ae3d_27d4_eb4f).rotate_left(27)
    }

    /// Executes group `id`.
    fn group(&mut self, id: u32) {
        let Some(g) = self.of.groups.get(&id) else {
            self.say(|| format!("  group {id} does not exist"));
            return;
        };
        if self.depth >= MAX_DEPTH {
            self.stop = true;
            self.too_deep = true;
            return;
        }
        let of = self.of;
        let g = of.groups.get(&id).unwrap_or(g);
        self.credit(&g.counters);
        use crate::group::GroupType;
        let chosen: Vec<usize> = match g.kind {
            GroupType::All => (0..g.buckets.len()).collect(),
            GroupType::Indirect => (0..g.buckets.len().min(1)).collect(),
            GroupType::FastFailover => {
                g.buckets.iter().position(|b| self.live(b.watch_port, b.watch_group, 0)).into_iter().collect()
            }
            GroupType::Select => {
                let live: Vec<usize> = (0..g.buckets.len())
                    .filter(|&i| {
                        let b = &g.buckets[i];
                        b.weight > 0 && self.live(b.watch_port, b.watch_group, 0)
                    })
                    .collect();
                let total: u64 = live.iter().map(|&i| g.buckets[i].weight as u64).sum();
                if total == 0 {
                    Vec::new()
                } else {
                    let mut x = self.select_hash() % total;
                    let mut pick = live[0];
                    for &i in &live {
                        let w = g.buckets[i].weight as u64;
                        if x < w {
                            pick = i;
                            break;
                        }
                        x -= w;
                    }
                    vec![pick]
                }
            }
        };
        self.say(|| format!("  group {id} ({}): buckets {chosen:?}", g.kind.name()));
        for i in chosen {
            let b = &g.buckets[i];
            self.credit(&b.counters);
            // A bucket is an action set (OpenFlow 1.3 5.6.1), run as Open
            // vSwitch runs one.
            let acts = action_set_list(&b.actions);
            if acts.len() != b.actions.len() {
                self.say(|| format!("  bucket as an action set: {}", join_actions(&acts)));
            }
            self.run_bucket(&acts, true);
            if self.stop {
                break;
            }
        }
    }

    /// Runs a bucket's actions on a copy of the flow: field writes and
    /// VLAN changes it makes are undone afterwards (in the datapath too),
    /// so they reach neither the next bucket nor later actions.
    ///
    /// A pause (or a lookup after `pop_mpls`) inside freezes the rest of
    /// the bucket, and the freeze ends at the bucket's end, as in Open
    /// vSwitch: the continuation (or recirculation) runs the bucket's
    /// rest, not what follows the bucket.
    ///
    /// Whether the walk goes on after it (`stop` when this returns):
    /// - never after a recirculation (a `ct(table=N)` inside): the
    ///   datapath cannot fork a packet and go on after one; nor after the
    ///   walk went too deep;
    /// - after a group bucket (`group`) that froze, it does: the other
    ///   buckets and the actions after the group run with the packet as it
    ///   was (so the action set stays with the walk too); another stop in
    ///   a bucket (TTL exceeded) ends the walk;
    /// - after a clone that froze, it does not: Open vSwitch 3.1 runs and
    ///   freezes nothing after such a clone; another stop in a clone ends
    ///   only the clone.
    fn run_bucket(&mut self, actions: &[Action], group: bool) {
        let n = self.actions.len();
        self.commit();
        let saved = self.key;
        let outer_written = std::mem::replace(&mut self.written, FlowKey::ZERO);
        self.depth += 1;
        let (table, cookie) = (self.table, self.cookie);
        for (i, a) in actions.iter().enumerate() {
            if self.stop {
                break;
            }
            self.indent += 2;
            self.tail = i + 1 == actions.len();
            self.do_action(a);
            self.freeze_rest(table, cookie, &actions[i + 1..], &[]);
            self.indent -= 2;
        }
        self.depth -= 1;
        let froze = self.freeze.is_some();
        if froze {
            self.say(|| "  the freeze ends with this clone or bucket");
            self.finish_freeze(group);
        }
        let recirculated = self.actions[n..].iter().any(|a| matches!(a, DpAction::Recirc(_)));
        let goes_on = if group { froze } else { !froze };
        if goes_on && !recirculated && !self.too_deep {
            self.stop = false;
        }
        self.commit();
        // Undo VLAN pushes/pops, then field writes.
        // The undo depends only on what the bucket wrote (the same for
        // every packet of the megaflow) and on the original values of
        // those bits, which are therefore consulted.
        let mut undo = std::mem::replace(&mut self.written, outer_written);
        let (was, now) = (saved.vlan_tci() & VLAN_PRESENT != 0, self.key.vlan_tci() & VLAN_PRESENT != 0);
        if now != was {
            if now {
                self.actions.push(DpAction::PopVlan);
            } else {
                self.actions.push(DpAction::PushVlan { tpid: 0x8100, tci: saved.vlan_tci() });
            }
            // The tag itself is restored; its fields need no rewrite.
            undo.set_vlan_tci(0);
            undo.set_vlan_tci2(0);
        }
        // Metadata (no packet bytes) needs no datapath undo.
        undo.set_metadata(0);
        self.key = saved;
        if !undo.is_zero() {
            self.consult(&undo);
            self.pending = undo;
            self.commit();
        }
    }

    fn controller(&mut self, max_len: u16) {
        self.commit();
        let (table_id, cookie) = (self.table, self.cookie);
        self.actions.push(DpAction::Userspace {
            reason: UserspaceReason::Action,
            max_len,
            table_id,
            cookie,
            extra: None,
        });
    }

    /// Emits VLAN changes so that the packet leaves in `vlan`, tagged or not.
    fn output_in_vlan(&mut self, port: u32, vlan: u16, tagged: bool) {
        let cur = self.key.vlan_tci();
        let cur_tagged = cur & VLAN_PRESENT != 0;
        if tagged {
            if !cur_tagged {
                self.commit();
                let tci = VLAN_PRESENT | vlan;
                self.key.set_vlan_tci(tci);
                self.actions.push(DpAction::PushVlan { tpid: ethertype::VLAN, tci });
            } else if cur & 0xfff != vlan {
                let mut m = FlowKey::ZERO;
                m.set_vlan_tci(0x0fff);
                self.key.set_vlan_tci((cur & !0x0fff) | vlan);
                self.pending.or_assign(&m);
            }
        } else if cur_tagged {
            self.commit();
            self.key.set_vlan_tci(self.key.vlan_tci2());
            self.key.set_vlan_tci2(0);
            self.actions.push(DpAction::PopVlan);
        }
        self.output(port);
    }

    #[inline(never)]
    fn normal(&mut self) {
        let of = self.of;
        let in_port = self.key.in_port();
        let default_mode = VlanMode::TrunkAll;
        let in_mode = of.port(in_port).map(|p| &p.vlan).unwrap_or(&default_mode);
        let mut m = FlowKey::ZERO;
        m.set_vlan_tci(0x1fff);
        m.set_dl_src(u64::MAX);
        m.set_dl_dst(u64::MAX);
        self.consult(&m);
        let Some(vlan) = in_mode.input_vlan(self.key.vlan_tci()) else {
            self.say(|| "  NORMAL: frame's VLAN not allowed on the input port; dropping");
            return;
        };
        let src = self.key.dl_src();
        let dst = self.key.dl_dst();
        let now = of.now();
        // Tracing (ofproto/trace) has no side effects: it does not learn.
        if !is_multicast(src) && self.trace.is_none() {
            let learned = of.mac.lock().expect("mac table lock").learn(src, vlan, in_port, now);
            if learned == Learned::Changed {
                of.bump_generation();
                self.say(|| format!("  learned {} on port {in_port} in VLAN {vlan}", flow::key::fmt_mac(src)));
            }
        }
        let known =
            if is_multicast(dst) { None } else { of.mac.lock().expect("mac table lock").lookup(dst, vlan, now) };
        match known {
            Some(p) if p == in_port => self.say(|| "  NORMAL: destination is on the input port; dropping"),
            Some(p) => {
                let mode = of.port(p).map(|c| c.vlan.clone()).unwrap_or_default();
                self.say(|| format!("  NORMAL: forwarding to learned port {p}"));
                self.output_in_vlan(p, vlan, mode.output_tagged(vlan));
            }
            None => {
                self.say(|| format!("  NORMAL: flooding in VLAN {vlan}"));
                let outs: Vec<(u32, bool)> = of
                    .flood_ports(false)
                    .filter(|p| p.ofport != in_port && p.vlan.carries(vlan))
                    .map(|p| (p.ofport, p.vlan.output_tagged(vlan)))
                    .collect();
                // Untagged copies first, then tagged ones: one VLAN change.
                let in_tagged = self.key.vlan_tci() & VLAN_PRESENT != 0;
                let (first, second): (Vec<_>, Vec<_>) = outs.into_iter().partition(|&(_, t)| t == in_tagged);
                for (p, t) in first.into_iter().chain(second) {
                    self.output_in_vlan(p, vlan, t);
                }
            }
        }
    }
}
