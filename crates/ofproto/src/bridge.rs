//! The OpenFlow bridge: tables of rules, ports, the MAC table, and
//! flow-table modifications.
//!
//! Threading: an [`Ofproto`] is shared between the control plane (which
//! takes `&mut` for flow mods and port changes, under the owner's write
//! lock) and poll threads (which translate with `&self`, under a read
//! lock). Rule counters and the MAC table use interior mutability so that
//! translation needs only `&self`. Every change that can alter a
//! translation bumps [`Ofproto::generation`], which is how datapath caches
//! learn that their megaflows must be revalidated.

use crate::actions::{Action, Instruction, OfPort};
use crate::normal::{MacTable, VlanMode};
use crate::parse::FlowSpec;
use classifier::{Classifier, RuleId};
use dpif::FlowCounters;
use flow::Match;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Number of OpenFlow tables.
pub const N_TABLES: usize = 255;

/// Deleted rules a commit frees at once; more wait for
/// [`Ofproto::purge_some`]. Freeing a rule costs 1-2 us (its group, trie
/// and map entries are cold), so 512 keep the commit's write section near
/// 1 ms.
pub const COMMIT_PURGE: usize = 512;

/// One OpenFlow rule's payload in the classifier. Laid out in declaration
/// order: what a translation reads on every hit comes first, so that with
/// the classifier's id and priority it fills one cache line.
#[derive(Debug)]
#[repr(C)]
pub struct Rule {
    pub instructions: Vec<Instruction>,
    /// Packets, bytes and last use, credited by the datapath for every
    /// packet a megaflow built through this rule forwards (and touched by
    /// each translation). Shared with the megaflows, so a modify that
    /// keeps counters keeps this very object.
    pub counters: Arc<FlowCounters>,
    pub cookie: u64,
    /// The rule's only actions are `conjunction`s (set where the rule is
    /// made: a lookup asks on every hit, and reading the instructions
    /// there cost two cache misses per table visited).
    pub(crate) conjunctive: bool,
    pub idle_timeout: u16,
    pub hard_timeout: u16,
    /// OpenFlow flow-mod flags ([`crate::parse::flags`]).
    pub flags: u16,
    pub importance: u16,
    pub created_ms: u64,
}

impl Rule {
    pub fn packets(&self) -> u64 {
        self.counters.packets.load(Ordering::Relaxed)
    }
    pub fn bytes(&self) -> u64 {
        self.counters.bytes.load(Ordering::Relaxed)
    }
    pub fn used_ms(&self) -> u64 {
        self.counters.used_ms.load(Ordering::Relaxed)
    }
}

/// A port mirror (OVS's Mirror table): copies of the traffic entering
/// `src` ports (or all traffic) and leaving `dst` ports go to `output`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mirror {
    pub name: String,
    pub select_all: bool,
    pub src: Vec<u32>,
    pub dst: Vec<u32>,
    pub output: u32,
}

/// A rule taken out of the tables by a delete or a timeout, for
/// flow_removed messages.
#[derive(Clone, Debug)]
pub struct RemovedRule {
    pub table: u8,
    pub matched: Match,
    pub priority: u32,
    pub cookie: u64,
    pub flags: u16,
    pub idle_timeout: u16,
    pub hard_timeout: u16,
    pub created_ms: u64,
    pub packets: u64,
    pub bytes: u64,
    /// 0 idle timeout, 1 hard timeout, 2 delete, 3 group delete, 5 meter delete.
    pub reason: u8,
}

/// A port as the OpenFlow layer sees it. Datapath port numbers equal
/// OpenFlow port numbers (the local port is `LOCAL`, 0xfffe).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortConfig {
    pub ofport: u32,
    pub name: String,
    pub vlan: VlanMode,
    /// Excluded from FLOOD (and NORMAL flooding) when false.
    pub flood: bool,
    /// Administratively and operationally up.
    pub up: bool,
}

impl PortConfig {
    pub fn new(ofport: u32, name: &str) -> PortConfig {
        PortConfig { ofport, name: name.into(), vlan: VlanMode::TrunkAll, flood: true, up: true }
    }
}

/// What a table does with a packet no rule matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum TableMiss {
    #[default]
    Drop,
    Controller,
    /// Fail-open (fail-mode standalone with no controller connected):
    /// switch the packet with NORMAL.
    Normal,
}

/// Errors a flow modification can be refused with (each maps to an
/// OpenFlow error later).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FlowModError {
    BadTable(u8),
    /// goto_table must move forward.
    BadGoto {
        from: u8,
        to: u8,
    },
    Unsupported(String),
    /// A set_field whose prerequisites the match does not guarantee.
    BadSetField(String),
    /// An action names a field whose prerequisites the match lacks.
    MatchInconsistent(String),
    /// check_overlap: an existing rule of the same priority overlaps.
    Overlap,
    /// An action names a group that does not exist.
    UnknownGroup(u32),
    /// An instruction names a meter that does not exist.
    UnknownMeter(u32),
    /// A `tun_metadataN` field that no TLV map binds (`add-tlv-map` first).
    UnmappedTlvField(u16),
}

impl fmt::Display for FlowModError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FlowModError::Overlap => write!(f, "the new flow overlaps an existing flow of the same priority"),
            FlowModError::UnknownGroup(g) => write!(f, "group {g} does not exist"),
            FlowModError::UnknownMeter(m) => write!(f, "meter {m} does not exist"),
            FlowModError::BadTable(t) => write!(f, "table {t} does not exist"),
            FlowModError::BadGoto { from, to } => {
                write!(f, "goto_table:{to} in table {from} must go to a later table, at most 254")
            }
            FlowModError::Unsupported(s) => write!(f, "{s}"),
            FlowModError::BadSetField(s) | FlowModError::MatchInconsistent(s) => write!(f, "{s}"),
            FlowModError::UnmappedTlvField(i) => {
                write!(f, "tun_metadata{i} is not mapped to a tunnel option (add-tlv-map)")
            }
        }
    }
}
impl std::error::Error for FlowModError {}

pub use ofp_types::FlowModCmd;

pub struct Ofproto {
    pub name: String,
    pub(crate) tables: Vec<Classifier<Rule>>,
    /// The version readers look up at; a batch of changes is made at
    /// `version + 1` and published by incrementing it.
    pub(crate) version: u64,
    generation: Arc<AtomicU64>,
    pub(crate) ports: BTreeMap<u32, PortConfig>,
    pub(crate) mac: Mutex<MacTable>,
    now_ms: AtomicU64,
    /// Some rule with an idle or hard timeout may exist: set when one is
    /// made, cleared when [`Ofproto::has_timeouts`] looked and found none.
    /// Without it, every look is a pass over all rules under the read lock
    /// (tens of ms with 200,000 rules, during which a waiting writer holds
    /// off the poll threads).
    maybe_timed: std::sync::atomic::AtomicBool,
    pub table_miss: TableMiss,
    /// Per-table lookup/match counters.
    /// Per-table (lookups, matches), credited by the datapath like rule
    /// counters (each translation lists the tables it visited).
    pub(crate) table_stats: Vec<(Arc<FlowCounters>, Arc<FlowCounters>)>,
    /// Rules removed (deleted or expired) since the last
    /// [`Ofproto::take_removed`], for flow_removed messages.
    removed: Vec<RemovedRule>,
    pub(crate) groups: BTreeMap<u32, crate::group::Group>,
    pub(crate) mirrors: Vec<Mirror>,
    pub(crate) meters: BTreeMap<u32, Arc<dpif::Meter>>,
    /// The datapath's connection tracker, which `ct` actions run (one per
    /// datapath; [`Ofproto::set_conntrack`] shares the switch's).
    pub(crate) conntrack: dpif::CtRef,
    /// Where recirculated packets resume (`ct(table=N)`).
    pub(crate) recirc: crate::ct::RecircTable,
    generation_hook: Option<Arc<dyn Fn(u64) + Send + Sync>>,
    /// Geneve options bound to `tun_metadataN` (`add-tlv-map`).
    pub tlv: crate::tlv::TlvTable,
    /// Flows `learn` actions built during translation (which only reads
    /// the tables); housekeeping adds them ([`Ofproto::take_learned`]).
    pub(crate) learned: Mutex<Vec<(FlowSpec, Option<(u8, RuleId)>)>>,
    /// What `learn(...,delete_learned)` rules learned, by learner (table,
    /// rule): when a learner goes, so do these (table, match, priority).
    learned_by: Mutex<std::collections::HashMap<(u8, RuleId), Vec<(u8, Match, u32)>>>,
    /// Learned flows whose learner went, for housekeeping to delete.
    unlearn: Mutex<Vec<(u8, Match, u32)>>,
    /// Translations' counter lists, shared between equal ones.
    pub(crate) counter_sets: crate::counters::CounterSets,
}

impl Ofproto {
    /// The id a continuation names this bridge by (NXCPT_BRIDGE): a hash
    /// of its name, so a resume reaches the same bridge after a restart.
    pub fn continuation_bridge(&self) -> [u8; 16] {
        let mut out = [0u8; 16];
        for (i, seed) in [0xcbf2_9ce4_8422_2325u64, 0x9e37_79b9_7f4a_7c15].iter().enumerate() {
            let mut h = *seed;
            for b in self.name.bytes() {
                h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
            }
            out[i * 8..i * 8 + 8].copy_from_slice(&h.to_be_bytes());
        }
        out
    }

    pub fn new(name: &str) -> Ofproto {
        Ofproto {
            name: name.into(),
            tables: (0..N_TABLES).map(|_| Classifier::new()).collect(),
            version: 1,
            generation: Arc::new(AtomicU64::new(1)),
            ports: BTreeMap::new(),
            mac: Mutex::new(MacTable::default()),
            now_ms: AtomicU64::new(0),
            maybe_timed: std::sync::atomic::AtomicBool::new(false),
            table_miss: TableMiss::Drop,
            table_stats: (0..N_TABLES)
                .map(|_| (Arc::new(FlowCounters::packets_only()), Arc::new(FlowCounters::packets_only())))
                .collect(),
            removed: Vec::new(),
            groups: BTreeMap::new(),
            meters: BTreeMap::new(),
            mirrors: Vec::new(),
            conntrack: dpif::CtRef(Arc::new(conntrack::Conntrack::new(conntrack::Config::default()))),
            recirc: Default::default(),
            generation_hook: None,
            tlv: Default::default(),
            learned: Mutex::new(Vec::new()),
            learned_by: Mutex::new(std::collections::HashMap::new()),
            unlearn: Mutex::new(Vec::new()),
            counter_sets: Default::default(),
        }
    }

    /// Uses `ct` as this bridge's connection tracker (the datapath's,
    /// shared by its bridges).
    pub fn set_conntrack(&mut self, ct: Arc<conntrack::Conntrack>) {
        self.conntrack = dpif::CtRef(ct);
    }

    pub fn conntrack(&self) -> &Arc<conntrack::Conntrack> {
        &self.conntrack.0
    }

    /// Changes whenever a translation could change. Datapath caches
    /// compare it with the generation their megaflows were validated at.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// A handle on the generation counter that can be read without any
    /// lock on the bridge (poll threads check it every iteration).
    pub fn generation_handle(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.generation)
    }

    pub(crate) fn bump_generation(&self) {
        let g = self.generation.fetch_add(1, Ordering::AcqRel) + 1;
        if let Some(h) = &self.generation_hook {
            h(g);
        }
    }

    /// Calls `hook` with the new generation every time it changes, before
    /// the change returns to its caller (so before any OpenFlow barrier or
    /// database acknowledgement): caches outside the poll threads, such as
    /// the kernel fast path, invalidate themselves there.
    pub fn set_generation_hook(&mut self, hook: Arc<dyn Fn(u64) + Send + Sync>) {
        self.generation_hook = Some(hook);
    }

    /// The clock translation uses (MAC aging, rule idle time). The owner
    /// advances it; the core never reads a clock itself.
    pub fn set_now(&self, now_ms: u64) {
        self.now_ms.store(now_ms, Ordering::Relaxed);
    }

    pub fn now(&self) -> u64 {
        self.now_ms.load(Ordering::Relaxed)
    }

    pub fn version(&self) -> u64 {
        self.version
    }

    // ---- ports ----

    pub fn add_port(&mut self, p: PortConfig) {
        self.ports.insert(p.ofport, p);
        self.bump_generation();
    }

    pub fn remove_port(&mut self, ofport: u32) -> Option<PortConfig> {
        let p = self.ports.remove(&ofport);
        self.mac.lock().expect("mac table lock").flush_port(ofport);
        self.bump_generation();
        p
    }

    pub fn port(&self, ofport: u32) -> Option<&PortConfig> {
        self.ports.get(&ofport)
    }

    pub fn ports(&self) -> impl Iterator<Item = &PortConfig> {
        self.ports.values()
    }

    pub fn set_port_up(&mut self, ofport: u32, up: bool) {
        if let Some(p) = self.ports.get_mut(&ofport) {
            if p.up != up {
                p.up = up;
                if !up {
                    self.mac.lock().expect("mac table lock").flush_port(ofport);
                }
                self.bump_generation();
            }
        }
    }

    /// Replaces the port mirrors.
    pub fn set_mirrors(&mut self, mirrors: Vec<Mirror>) {
        if self.mirrors != mirrors {
            self.mirrors = mirrors;
            self.bump_generation();
        }
    }

    /// Excludes a port from (or readmits it to) FLOOD and NORMAL flooding
    /// (OpenFlow 1.0's OFPPC_NO_FLOOD).
    pub fn set_port_flood(&mut self, ofport: u32, flood: bool) {
        if let Some(p) = self.ports.get_mut(&ofport) {
            if p.flood != flood {
                p.flood = flood;
                self.bump_generation();
            }
        }
    }

    /// Changes what a table miss does (fail-open, controller, drop).
    pub fn set_table_miss(&mut self, m: TableMiss) {
        if self.table_miss != m {
            self.table_miss = m;
            self.bump_generation();
        }
    }

    pub fn mac_table(&self) -> std::sync::MutexGuard<'_, MacTable> {
        self.mac.lock().expect("mac table lock")
    }

    // ---- flow table ----

    fn validate(&self, spec: &FlowSpec) -> Result<(), FlowModError> {
        if spec.table as usize >= N_TABLES {
            return Err(FlowModError::BadTable(spec.table));
        }
        for i in 0..crate::tlv::MAX_FIELDS {
            if uses_tun_metadata(&spec.matched.mask, &spec.instructions, i) && !self.tlv.is_mapped(i) {
                return Err(FlowModError::UnmappedTlvField(i));
            }
        }
        for ins in &spec.instructions {
            let actions: &[Action] = match ins {
                // Forward only, and to a table that exists (0-254).
                Instruction::GotoTable(t) if *t <= spec.table || *t > 254 => {
                    return Err(FlowModError::BadGoto { from: spec.table, to: *t })
                }
                Instruction::Meter(m) => {
                    if !self.meters.contains_key(m) {
                        return Err(FlowModError::UnknownMeter(*m));
                    }
                    continue;
                }
                Instruction::Apply(a) | Instruction::Write(a) => a,
                _ => continue,
            };
            self.validate_actions(spec, actions)?;
        }
        Ok(())
    }

    /// Checks one action list of `spec` (and the lists nested in clone).
    fn validate_actions(&self, spec: &FlowSpec, actions: &[Action]) -> Result<(), FlowModError> {
        let mut m = spec.matched;
        self.validate_in(&mut m, actions)
    }

    /// Checks `actions` against what the packet is known to be when they
    /// run: the match, as push_mpls/pop_mpls before them changed it (as
    /// Open vSwitch's action check does).
    fn validate_in(&self, m: &mut flow::Match, actions: &[Action]) -> Result<(), FlowModError> {
        for a in actions {
            match a {
                Action::Clone(inner) => self.validate_in(&mut m.clone(), inner)?,
                Action::StackPush(sf) | Action::StackPop(sf) => check_subfield(m, sf)?,
                Action::Group(g) => {
                    if !self.groups.contains_key(g) {
                        return Err(FlowModError::UnknownGroup(*g));
                    }
                }
                Action::SetField { field, .. } => {
                    if !field.prereq.holds(&m.key, &m.mask) && field.name != "vlan_tci" {
                        return Err(FlowModError::BadSetField(format!(
                            "set_field of {} needs a match that guarantees its protocol",
                            field.name
                        )));
                    }
                }
                // As Open vSwitch: the fields a load, move or
                // output:reg names must have their prerequisites in
                // the match (OFPBAC_MATCH_INCONSISTENT otherwise).
                Action::Load { dst: sf, .. } | Action::OutputReg { src: sf, .. } => check_subfield(m, sf)?,
                Action::Move { src, dst } => {
                    check_subfield(m, src)?;
                    check_subfield(m, dst)?;
                }
                // From here on the frame is MPLS (its payload opaque), or
                // what the pop names.
                Action::PushMpls(et) | Action::PopMpls(et) => {
                    if matches!(a, Action::PushMpls(_)) {
                        for w in flow::key::STAGE_L3..flow::key::WORDS {
                            m.key.w[w] = 0;
                            m.mask.w[w] = 0;
                        }
                    }
                    m.key.set_dl_type(*et);
                    m.mask.set_dl_type(0xffff);
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The flows `learn` actions built since the last call (the caller
    /// adds them with [`Ofproto::flow_mod`], holding the write lock).
    pub fn take_learned(&self) -> Vec<FlowSpec> {
        let mut by = self.learned_by.lock().expect("learned flows");
        let taken = std::mem::take(&mut *self.learned.lock().expect("learned flows"));
        taken
            .into_iter()
            .map(|(spec, learner)| {
                if let Some(l) = learner {
                    let v = by.entry(l).or_default();
                    let k = (spec.table, spec.matched, spec.priority);
                    if !v.contains(&k) {
                        v.push(k);
                    }
                }
                spec
            })
            .collect()
    }

    /// Learned flows whose `delete_learned` learner was removed since the
    /// last call: the caller deletes them (strictly).
    pub fn take_unlearned(&self) -> Vec<FlowSpec> {
        std::mem::take(&mut *self.unlearn.lock().expect("learned flows"))
            .into_iter()
            .map(|(table, matched, priority)| {
                let mut s = crate::parse::parse_flow("", crate::parse::Need::NoActions).expect("a valid flow");
                s.table = table;
                s.table_given = true;
                s.matched = matched;
                s.priority = priority;
                s
            })
            .collect()
    }

    /// Whether any rule matches or writes `tun_metadata{index}` (its TLV
    /// mapping cannot go while one does, as in Open vSwitch).
    pub fn tlv_field_in_use(&self, index: u16) -> bool {
        self.rules().iter().any(|(_, m, _, r)| uses_tun_metadata(m.mask, &r.instructions, index))
    }

    /// Applies one flow modification as its own committed version.
    /// Returns the number of rules added, modified or deleted.
    pub fn flow_mod(&mut self, cmd: FlowModCmd, spec: &FlowSpec) -> Result<usize, FlowModError> {
        let n = self.flow_mod_staged(cmd, spec)?;
        self.commit();
        Ok(n)
    }

    /// The rules a `Delete` / `DeleteStrict` of `spec` would remove, as
    /// (table, rule) pairs: the first half of [`Ofproto::flow_mod`] for a
    /// delete, split out so that a large delete can be planned under a
    /// read lock and staged in several short write sections
    /// ([`Ofproto::stage_delete`], then [`Ofproto::commit_staged`]). The
    /// plan stays valid while no other change is staged or committed.
    pub fn plan_delete(&self, cmd: FlowModCmd, spec: &FlowSpec) -> Vec<(usize, RuleId)> {
        let next = self.version + 1;
        let cookie_ok = |r: &Rule| {
            (r.cookie ^ spec.cookie) & spec.cookie_mask == 0 && Self::outputs_to(r, spec.out_port, spec.out_group)
        };
        let mut out = Vec::new();
        for ti in self.tables_for(spec) {
            let ids: Vec<RuleId> = if cmd == FlowModCmd::DeleteStrict {
                self.tables[ti].find_exact(&spec.matched, spec.priority, next).into_iter().collect()
            } else {
                self.tables[ti].find_loose(&spec.matched, next)
            };
            out.extend(
                ids.into_iter()
                    .filter(|id| self.tables[ti].get(*id).is_some_and(|(_, _, r)| cookie_ok(r)))
                    .map(|id| (ti, id)),
            );
        }
        out
    }

    /// Stages the removal of planned rules at the next version: readers
    /// keep seeing them until [`Ofproto::commit_staged`].
    pub fn stage_delete(&mut self, rules: &[(usize, RuleId)]) {
        let next = self.version + 1;
        for &(ti, id) in rules {
            self.note_removed(ti, id, 2);
            self.tables[ti].remove(id, next);
        }
    }

    /// Publishes what [`Ofproto::stage_delete`] staged, as one version.
    pub fn commit_staged(&mut self) {
        self.commit();
    }

    /// Applies a batch atomically: every modification is staged at the next
    /// version; readers see none of them until all succeeded. On error
    /// nothing is changed.
    pub fn flow_mod_batch(&mut self, mods: &[(FlowModCmd, FlowSpec)]) -> Result<usize, (usize, FlowModError)> {
        for (i, (_, spec)) in mods.iter().enumerate() {
            self.validate(spec).map_err(|e| (i, e))?;
        }
        let mut n = 0;
        for (cmd, spec) in mods {
            n += self.flow_mod_staged(*cmd, spec).expect("validated");
        }
        self.commit();
        Ok(n)
    }

    /// Publishes the staged changes (readers move to the new version),
    /// then frees up to [`COMMIT_PURGE`] of the rules it made invisible.
    /// Freeing the rest of a large delete is left to
    /// [`Ofproto::purge_some`], so that the owner can do it in short
    /// steps instead of one long write section.
    fn commit(&mut self) {
        self.version += 1;
        self.bump_generation();
        self.purge_some(COMMIT_PURGE);
    }

    /// Frees up to `max` deleted rules that no reader can see any more
    /// (every reader looks up at [`Ofproto::version`]); returns how many.
    pub fn purge_some(&mut self, max: usize) -> usize {
        let v = self.version;
        let mut freed = 0;
        for t in &mut self.tables {
            if freed >= max {
                break;
            }
            if t.n_unpurged() > 0 {
                freed += t.purge_some(v, max - freed);
            }
        }
        freed
    }

    /// Deleted rules not freed yet (see [`Ofproto::purge_some`]).
    pub fn n_unpurged(&self) -> usize {
        self.tables.iter().map(|t| t.n_unpurged()).sum()
    }

    fn new_rule(&self, spec: &FlowSpec) -> Rule {
        if spec.idle_timeout != 0 || spec.hard_timeout != 0 {
            self.maybe_timed.store(true, Ordering::Release);
        }
        let now = self.now();
        let counters = FlowCounters::default();
        counters.used_ms.store(now, Ordering::Relaxed);
        Rule {
            cookie: spec.cookie,
            instructions: spec.instructions.clone(),
            idle_timeout: spec.idle_timeout,
            hard_timeout: spec.hard_timeout,
            flags: spec.flags,
            importance: spec.importance,
            created_ms: now,
            counters: Arc::new(counters),
            conjunctive: crate::xlate::conjunctive(&spec.instructions),
        }
    }

    /// Rules with `send_flow_rem` removed (by delete or timeout) since the
    /// last call.
    pub fn take_removed(&mut self) -> Vec<RemovedRule> {
        std::mem::take(&mut self.removed)
    }

    fn note_removed(&mut self, table: usize, id: RuleId, reason: u8) {
        if let Some(gone) = self.learned_by.get_mut().expect("learned flows").remove(&(table as u8, id)) {
            self.unlearn.get_mut().expect("learned flows").extend(gone);
        }
        let Some((m, p, r)) = self.tables[table].get(id) else { return };
        // Only rules installed with send_flow_rem are ever reported: a
        // 200k-rule delete of rules without it records nothing.
        if r.flags & ofp_types::parse::flags::SEND_FLOW_REM == 0 || self.removed.len() >= 100_000 {
            return;
        }
        let rr = RemovedRule {
            table: table as u8,
            matched: m.to_match(),
            priority: p,
            cookie: r.cookie,
            flags: r.flags,
            idle_timeout: r.idle_timeout,
            hard_timeout: r.hard_timeout,
            created_ms: r.created_ms,
            packets: r.packets(),
            bytes: r.bytes(),
            reason,
        };
        self.removed.push(rr);
    }

    /// Whether a rule's actions output to `out_port` (any port when `None`).
    fn outputs_to(r: &Rule, out_port: Option<u32>, out_group: Option<u32>) -> bool {
        let acts = || {
            r.instructions.iter().flat_map(|i| match i {
                Instruction::Apply(a) | Instruction::Write(a) => a.as_slice(),
                _ => &[],
            })
        };
        let port_ok = match out_port {
            None => true,
            Some(p) => acts().any(|a| match a {
                Action::Output(o) | Action::OutputMaxLen(o, _) => crate::actions::ofport_number(*o) == p,
                Action::Controller { .. } | Action::ControllerNx(_) => p == crate::actions::ofpp::CONTROLLER,
                _ => false,
            }),
        };
        let group_ok = match out_group {
            None => true,
            Some(g) => acts().any(|a| matches!(a, Action::Group(x) if *x == g)),
        };
        port_ok && group_ok
    }

    fn tables_for(&self, spec: &FlowSpec) -> std::ops::Range<usize> {
        if spec.table_given {
            spec.table as usize..spec.table as usize + 1
        } else {
            0..N_TABLES
        }
    }

    fn flow_mod_staged(&mut self, cmd: FlowModCmd, spec: &FlowSpec) -> Result<usize, FlowModError> {
        if matches!(cmd, FlowModCmd::Add | FlowModCmd::Modify | FlowModCmd::ModifyStrict) {
            self.validate(spec)?;
        }
        let next = self.version + 1;
        let cookie_ok = |r: &Rule| {
            (r.cookie ^ spec.cookie) & spec.cookie_mask == 0 && Self::outputs_to(r, spec.out_port, spec.out_group)
        };
        match cmd {
            FlowModCmd::Add => {
                if spec.flags & crate::parse::flags::CHECK_OVERLAP != 0 {
                    let t = &self.tables[spec.table as usize];
                    let overlaps = t.iter(next).filter_map(|id| t.get(id)).any(|(m, p, _)| {
                        let m = m.to_match();
                        p == spec.priority && m != spec.matched && m.overlaps(&spec.matched)
                    });
                    if overlaps {
                        return Err(FlowModError::Overlap);
                    }
                }
                let t = &mut self.tables[spec.table as usize];
                if let Some(old) = t.find_exact(&spec.matched, spec.priority, next) {
                    // Replacing an identical rule keeps its counters unless
                    // reset_counts is given (OpenFlow 1.3 semantics).
                    let keep = spec.flags & crate::parse::flags::RESET_COUNTS == 0;
                    let old_counters = t.get(old).map(|(_, _, r)| Arc::clone(&r.counters));
                    t.remove(old, next);
                    let mut rule = self.new_rule(spec);
                    if let (true, Some(c)) = (keep, old_counters) {
                        rule.counters = c;
                    }
                    self.tables[spec.table as usize].insert(spec.matched, spec.priority, rule, next);
                    return Ok(1);
                }
                let rule = self.new_rule(spec);
                self.tables[spec.table as usize].insert(spec.matched, spec.priority, rule, next);
                Ok(1)
            }
            FlowModCmd::Modify | FlowModCmd::ModifyStrict => {
                let mut n = 0;
                for ti in self.tables_for(spec) {
                    let ids: Vec<RuleId> = if cmd == FlowModCmd::ModifyStrict {
                        self.tables[ti].find_exact(&spec.matched, spec.priority, next).into_iter().collect()
                    } else {
                        self.tables[ti].find_loose(&spec.matched, next)
                    };
                    for id in ids {
                        let Some((m, prio, r)) = self.tables[ti].get(id) else { continue };
                        if !cookie_ok(r) {
                            continue;
                        }
                        // Replace with a new rule carrying the counters over,
                        // so the change is versioned like any other.
                        let (m, prio) = (m.to_match(), prio);
                        let reset = spec.flags & crate::parse::flags::RESET_COUNTS != 0;
                        let nr = Rule {
                            cookie: r.cookie,
                            instructions: spec.instructions.clone(),
                            idle_timeout: r.idle_timeout,
                            hard_timeout: r.hard_timeout,
                            flags: r.flags,
                            importance: r.importance,
                            created_ms: r.created_ms,
                            counters: if reset { Arc::new(FlowCounters::default()) } else { Arc::clone(&r.counters) },
                            conjunctive: crate::xlate::conjunctive(&spec.instructions),
                        };
                        self.tables[ti].remove(id, next);
                        self.tables[ti].insert(m, prio, nr, next);
                        n += 1;
                    }
                }
                Ok(n)
            }
            FlowModCmd::Delete | FlowModCmd::DeleteStrict => {
                let doomed = self.plan_delete(cmd, spec);
                self.stage_delete(&doomed);
                Ok(doomed.len())
            }
        }
    }

    /// Adds, modifies or deletes a group. Deleting a group (or all, with
    /// [`crate::group::OFPG_ALL`]) deletes the rules that use it.
    pub fn group_mod(
        &mut self,
        cmd: crate::group::ModCmd,
        g: crate::group::Group,
    ) -> Result<(), crate::group::GroupError> {
        use crate::group::{GroupError, ModCmd, OFPG_ALL};
        match cmd {
            ModCmd::Add | ModCmd::Modify => {
                g.validate()?;
                let exists = self.groups.contains_key(&g.id);
                if cmd == ModCmd::Add && exists {
                    return Err(GroupError::GroupExists(g.id));
                }
                if cmd == ModCmd::Modify && !exists {
                    return Err(GroupError::UnknownGroup(g.id));
                }
                for b in &g.buckets {
                    for a in &b.actions {
                        if let Action::Group(x) = a {
                            if !self.groups.contains_key(x) {
                                return Err(GroupError::UnknownGroup(*x));
                            }
                            if self.group_reaches(*x, g.id) {
                                return Err(GroupError::Loop(g.id));
                            }
                        }
                    }
                }
                let mut g = g;
                if let Some(old) = self.groups.get(&g.id) {
                    g.counters = Arc::clone(&old.counters);
                    g.created_ms = old.created_ms;
                } else {
                    g.created_ms = self.now();
                }
                self.groups.insert(g.id, g);
            }
            ModCmd::Delete => {
                let ids: Vec<u32> = if g.id == OFPG_ALL {
                    self.groups.keys().copied().collect()
                } else {
                    self.groups.contains_key(&g.id).then_some(g.id).into_iter().collect()
                };
                for id in &ids {
                    self.groups.remove(id);
                }
                if !ids.is_empty() {
                    self.delete_rules_where(3, |r| {
                        r.instructions.iter().any(|i| match i {
                            Instruction::Apply(a) | Instruction::Write(a) => {
                                a.iter().any(|x| matches!(x, Action::Group(y) if ids.contains(y)))
                            }
                            _ => false,
                        })
                    });
                }
            }
        }
        self.bump_generation();
        Ok(())
    }

    /// Whether group `from` (through its buckets' group actions) reaches `to`.
    fn group_reaches(&self, from: u32, to: u32) -> bool {
        let mut stack = vec![from];
        let mut seen = Vec::new();
        while let Some(g) = stack.pop() {
            if g == to {
                return true;
            }
            if seen.contains(&g) {
                continue;
            }
            seen.push(g);
            if let Some(gr) = self.groups.get(&g) {
                for b in &gr.buckets {
                    for a in &b.actions {
                        if let Action::Group(x) = a {
                            stack.push(*x);
                        }
                    }
                }
            }
        }
        false
    }

    pub fn groups(&self) -> impl Iterator<Item = &crate::group::Group> {
        self.groups.values()
    }

    /// How many rules use group `id`.
    pub fn group_ref_count(&self, id: u32) -> u32 {
        self.rules()
            .iter()
            .filter(|(_, _, _, r)| {
                r.instructions.iter().any(|i| match i {
                    Instruction::Apply(a) | Instruction::Write(a) => {
                        a.iter().any(|x| matches!(x, Action::Group(y) if *y == id))
                    }
                    _ => false,
                })
            })
            .count() as u32
    }

    /// Adds, modifies (in place: cached megaflows stay valid) or deletes a
    /// meter. Deleting a meter (or all, with [`crate::group::OFPM_ALL`])
    /// deletes the rules that use it.
    pub fn meter_mod(
        &mut self,
        cmd: crate::group::ModCmd,
        id: u32,
        cfg: dpif::meter::MeterConfig,
    ) -> Result<(), crate::group::GroupError> {
        use crate::group::{validate_meter, GroupError, ModCmd, OFPM_ALL};
        match cmd {
            ModCmd::Add => {
                validate_meter(id, &cfg)?;
                if self.meters.contains_key(&id) {
                    return Err(GroupError::MeterExists(id));
                }
                self.meters.insert(id, Arc::new(dpif::Meter::new(id, cfg, self.now())));
            }
            ModCmd::Modify => {
                validate_meter(id, &cfg)?;
                let m = self.meters.get(&id).ok_or(GroupError::UnknownMeter(id))?;
                m.reconfigure(cfg);
            }
            ModCmd::Delete => {
                let ids: Vec<u32> = if id == OFPM_ALL {
                    self.meters.keys().copied().collect()
                } else {
                    self.meters.contains_key(&id).then_some(id).into_iter().collect()
                };
                for i in &ids {
                    self.meters.remove(i);
                }
                if !ids.is_empty() {
                    self.delete_rules_where(5, |r| {
                        r.instructions.iter().any(|i| matches!(i, Instruction::Meter(m) if ids.contains(m)))
                    });
                }
            }
        }
        self.bump_generation();
        Ok(())
    }

    pub fn meters(&self) -> impl Iterator<Item = &Arc<dpif::Meter>> {
        self.meters.values()
    }

    /// How many rules use meter `id`.
    pub fn meter_ref_count(&self, id: u32) -> u32 {
        self.rules()
            .iter()
            .filter(|(_, _, _, r)| r.instructions.iter().any(|i| matches!(i, Instruction::Meter(m) if *m == id)))
            .count() as u32
    }

    /// Deletes every rule `pred` selects, noting them removed with `reason`.
    fn delete_rules_where(&mut self, reason: u8, pred: impl Fn(&Rule) -> bool) {
        let next = self.version + 1;
        let mut doomed = Vec::new();
        for (ti, t) in self.tables.iter().enumerate() {
            for id in t.iter(self.version) {
                if t.get(id).is_some_and(|(_, _, r)| pred(r)) {
                    doomed.push((ti, id));
                }
            }
        }
        if doomed.is_empty() {
            return;
        }
        for (ti, id) in doomed {
            self.note_removed(ti, id, reason);
            self.tables[ti].remove(id, next);
        }
        self.commit();
    }

    /// Every visible rule: (table, match, priority, rule), ordered by
    /// table, then priority (highest first).
    pub fn rules(&self) -> Vec<(u8, classifier::RuleMatch<'_>, u32, &Rule)> {
        let mut out = Vec::new();
        for (ti, t) in self.tables.iter().enumerate() {
            let mut v: Vec<_> =
                t.iter(self.version).filter_map(|id| t.get(id).map(|(m, p, r)| (id, (ti as u8, m, p, r)))).collect();
            // Highest priority first; equal priorities in insertion order.
            v.sort_unstable_by_key(|(id, (_, _, p, _))| (std::cmp::Reverse(*p), *id));
            out.extend(v.into_iter().map(|(_, x)| x));
        }
        out
    }

    /// Per table: (active rules, lookups, matches).
    pub fn table_counts(&self) -> Vec<(u32, u64, u64)> {
        self.tables
            .iter()
            .zip(&self.table_stats)
            .map(|(t, (l, m))| {
                (
                    t.iter(self.version).count() as u32,
                    l.packets.load(Ordering::Relaxed),
                    m.packets.load(Ordering::Relaxed),
                )
            })
            .collect()
    }

    /// Whether any rule has an idle or hard timeout (housekeeping can skip
    /// the expiry scan otherwise).
    pub fn has_timeouts(&self) -> bool {
        if !self.maybe_timed.load(Ordering::Acquire) {
            return false;
        }
        let any = self.tables.iter().any(|t| {
            t.iter(self.version).filter_map(|id| t.get(id)).any(|(_, _, r)| r.idle_timeout != 0 || r.hard_timeout != 0)
        });
        if !any {
            // A rule made meanwhile sets the flag again under the write
            // lock, which cannot be held while this read is.
            self.maybe_timed.store(false, Ordering::Release);
        }
        any
    }

    pub fn n_rules(&self) -> usize {
        self.tables.iter().map(|t| t.iter(self.version).count()).sum()
    }

    /// Removes rules whose idle or hard timeout has passed; returns them
    /// as (table, match, priority, cookie) for flow_removed messages.
    pub fn expire_rules(&mut self, now_ms: u64) -> Vec<(u8, Match, u32, u64)> {
        let mut expired = Vec::new();
        let cur = self.version;
        for (ti, t) in self.tables.iter().enumerate() {
            for id in t.iter(cur) {
                let Some((m, p, r)) = t.get(id) else { continue };
                let idle = r.idle_timeout != 0 && now_ms.saturating_sub(r.used_ms()) >= r.idle_timeout as u64 * 1000;
                let hard = r.hard_timeout != 0 && now_ms.saturating_sub(r.created_ms) >= r.hard_timeout as u64 * 1000;
                if idle || hard {
                    expired.push((ti as u8, id, m.to_match(), p, r.cookie, if hard { 1 } else { 0 }));
                }
            }
        }
        if expired.is_empty() {
            return Vec::new();
        }
        let next = cur + 1;
        for &(ti, id, _, _, _, reason) in &expired {
            self.note_removed(ti as usize, id, reason);
            self.tables[ti as usize].remove(id, next);
        }
        self.commit();
        expired.into_iter().map(|(t, _, m, p, c, _)| (t, m, p, c)).collect()
    }

    /// Housekeeping: MAC aging. Bumps the generation when entries expire.
    pub fn run(&self, now_ms: u64) {
        self.set_now(now_ms);
        if self.mac.lock().expect("mac table lock").expire(now_ms) > 0 {
            self.bump_generation();
        }
        // Expired connections, fragments and helper expectations: an
        // eighth of the tracker per call (the caller runs this every
        // 500 ms, so every connection is looked at within 4 s of expiring).
        self.conntrack.0.sweep(now_ms, conntrack::SWEEP_SHARDS);
    }

    /// Output ports in OpenFlow port order (for FLOOD/ALL).
    pub(crate) fn flood_ports(&self, all: bool) -> impl Iterator<Item = &PortConfig> {
        self.ports.values().filter(move |p| p.up && (all || p.flood))
    }

    pub(crate) fn port_exists(&self, ofport: u32) -> bool {
        self.ports.contains_key(&ofport)
    }

    /// Maps an OpenFlow output to a concrete port number.
    pub fn is_reserved(p: OfPort) -> bool {
        !matches!(p, OfPort::Port(_))
    }
}

/// Whether a rule's match (`mask`) or actions use `tun_metadata{index}`.
fn uses_tun_metadata(mask: &flow::FlowKey, instructions: &[Instruction], index: u16) -> bool {
    let Some(loc) = flow::key::loc::TUN_METADATA.get(index as usize) else { return false };
    if loc.get(mask) != 0 {
        return true;
    }
    instructions.iter().any(|ins| match ins {
        Instruction::Apply(a) | Instruction::Write(a) => names_loc(a, *loc),
        _ => false,
    })
}

/// Whether an action list (clones included) reads or writes the field at `loc`.
fn names_loc(acts: &[Action], loc: flow::key::Loc) -> bool {
    let on = |f: &flow::fields::FieldDef| f.loc.word == loc.word && f.loc.shift == loc.shift;
    acts.iter().any(|a| match a {
        Action::SetField { field, .. } => on(field),
        Action::Load { dst, .. } => on(dst.field),
        Action::Move { src, dst } => on(src.field) || on(dst.field),
        Action::OutputReg { src, .. } => on(src.field),
        Action::StackPush(sf) | Action::StackPop(sf) => on(sf.field),
        Action::Clone(inner) => names_loc(inner, loc),
        _ => false,
    })
}

fn check_subfield(m: &flow::Match, sf: &ofp_types::SubField) -> Result<(), FlowModError> {
    if sf.field.name == "vlan_tci" || sf.field.prereq.holds(&m.key, &m.mask) {
        Ok(())
    } else {
        Err(FlowModError::MatchInconsistent(format!("field {} lacks its prerequisites in the match", sf.field.name)))
    }
}
