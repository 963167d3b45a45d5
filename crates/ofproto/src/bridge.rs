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
use flow::Match;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Number of OpenFlow tables.
pub const N_TABLES: usize = 255;

/// One OpenFlow rule's payload in the classifier.
#[derive(Debug)]
pub struct Rule {
    pub cookie: u64,
    pub instructions: Vec<Instruction>,
    pub idle_timeout: u16,
    pub hard_timeout: u16,
    pub created_ms: u64,
    /// Last time a translation used this rule (ms).
    pub used_ms: AtomicU64,
    pub packets: AtomicU64,
    pub bytes: AtomicU64,
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
}

impl fmt::Display for FlowModError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FlowModError::BadTable(t) => write!(f, "table {t} does not exist"),
            FlowModError::BadGoto { from, to } => write!(f, "goto_table:{to} in table {from} must go to a later table"),
            FlowModError::Unsupported(s) => write!(f, "{s}"),
            FlowModError::BadSetField(s) => write!(f, "{s}"),
        }
    }
}
impl std::error::Error for FlowModError {}

/// A flow modification command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlowModCmd {
    Add,
    Modify,
    ModifyStrict,
    Delete,
    DeleteStrict,
}

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
    pub table_miss: TableMiss,
    /// Per-table lookup/match counters.
    pub(crate) table_stats: Vec<(AtomicU64, AtomicU64)>,
}

impl Ofproto {
    pub fn new(name: &str) -> Ofproto {
        Ofproto {
            name: name.into(),
            tables: (0..N_TABLES).map(|_| Classifier::new()).collect(),
            version: 1,
            generation: Arc::new(AtomicU64::new(1)),
            ports: BTreeMap::new(),
            mac: Mutex::new(MacTable::default()),
            now_ms: AtomicU64::new(0),
            table_miss: TableMiss::Drop,
            table_stats: (0..N_TABLES).map(|_| (AtomicU64::new(0), AtomicU64::new(0))).collect(),
        }
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
        self.generation.fetch_add(1, Ordering::AcqRel);
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

    pub fn mac_table(&self) -> std::sync::MutexGuard<'_, MacTable> {
        self.mac.lock().expect("mac table lock")
    }

    // ---- flow table ----

    fn validate(&self, spec: &FlowSpec) -> Result<(), FlowModError> {
        if spec.table as usize >= N_TABLES {
            return Err(FlowModError::BadTable(spec.table));
        }
        for ins in &spec.instructions {
            let actions: &[Action] = match ins {
                Instruction::GotoTable(t) if *t <= spec.table => {
                    return Err(FlowModError::BadGoto { from: spec.table, to: *t })
                }
                Instruction::Meter(_) => return Err(FlowModError::Unsupported("meters are not supported yet".into())),
                Instruction::Apply(a) | Instruction::Write(a) => a,
                _ => continue,
            };
            for a in actions {
                match a {
                    Action::Group(_) => return Err(FlowModError::Unsupported("groups are not supported yet".into())),
                    Action::SetField { field, .. } => {
                        if !field.prereq.holds(&spec.matched.key, &spec.matched.mask) && field.name != "vlan_tci" {
                            return Err(FlowModError::BadSetField(format!(
                                "set_field of {} needs a match that guarantees its protocol",
                                field.name
                            )));
                        }
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }

    /// Applies one flow modification as its own committed version.
    /// Returns the number of rules added, modified or deleted.
    pub fn flow_mod(&mut self, cmd: FlowModCmd, spec: &FlowSpec) -> Result<usize, FlowModError> {
        let n = self.flow_mod_staged(cmd, spec)?;
        self.commit();
        Ok(n)
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

    fn commit(&mut self) {
        self.version += 1;
        let v = self.version;
        for t in &mut self.tables {
            t.purge(v);
        }
        self.bump_generation();
    }

    fn new_rule(&self, spec: &FlowSpec) -> Rule {
        let now = self.now();
        Rule {
            cookie: spec.cookie,
            instructions: spec.instructions.clone(),
            idle_timeout: spec.idle_timeout,
            hard_timeout: spec.hard_timeout,
            created_ms: now,
            used_ms: AtomicU64::new(now),
            packets: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
        }
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
        let cookie_ok = |r: &Rule| (r.cookie ^ spec.cookie) & spec.cookie_mask == 0;
        match cmd {
            FlowModCmd::Add => {
                let t = &mut self.tables[spec.table as usize];
                if let Some(old) = t.find_exact(&spec.matched, spec.priority, next) {
                    t.remove(old, next);
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
                        let (m, prio) = (*m, prio);
                        let nr = Rule {
                            cookie: r.cookie,
                            instructions: spec.instructions.clone(),
                            idle_timeout: r.idle_timeout,
                            hard_timeout: r.hard_timeout,
                            created_ms: r.created_ms,
                            used_ms: AtomicU64::new(r.used_ms.load(Ordering::Relaxed)),
                            packets: AtomicU64::new(r.packets.load(Ordering::Relaxed)),
                            bytes: AtomicU64::new(r.bytes.load(Ordering::Relaxed)),
                        };
                        self.tables[ti].remove(id, next);
                        self.tables[ti].insert(m, prio, nr, next);
                        n += 1;
                    }
                }
                Ok(n)
            }
            FlowModCmd::Delete | FlowModCmd::DeleteStrict => {
                let mut n = 0;
                for ti in self.tables_for(spec) {
                    let ids: Vec<RuleId> = if cmd == FlowModCmd::DeleteStrict {
                        self.tables[ti].find_exact(&spec.matched, spec.priority, next).into_iter().collect()
                    } else {
                        self.tables[ti].find_loose(&spec.matched, next)
                    };
                    for id in ids {
                        if self.tables[ti].get(id).is_some_and(|(_, _, r)| cookie_ok(r)) {
                            self.tables[ti].remove(id, next);
                            n += 1;
                        }
                    }
                }
                Ok(n)
            }
        }
    }

    /// Every visible rule: (table, match, priority, rule), ordered by
    /// table, then priority (highest first).
    pub fn rules(&self) -> Vec<(u8, &Match, u32, &Rule)> {
        let mut out = Vec::new();
        for (ti, t) in self.tables.iter().enumerate() {
            let mut v: Vec<_> =
                t.iter(self.version).filter_map(|id| t.get(id)).map(|(m, p, r)| (ti as u8, m, p, r)).collect();
            v.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| a.1.to_string().cmp(&b.1.to_string())));
            out.extend(v);
        }
        out
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
                let idle = r.idle_timeout != 0
                    && now_ms.saturating_sub(r.used_ms.load(Ordering::Relaxed)) >= r.idle_timeout as u64 * 1000;
                let hard = r.hard_timeout != 0 && now_ms.saturating_sub(r.created_ms) >= r.hard_timeout as u64 * 1000;
                if idle || hard {
                    expired.push((ti as u8, id, *m, p, r.cookie));
                }
            }
        }
        if expired.is_empty() {
            return Vec::new();
        }
        let next = cur + 1;
        for &(ti, id, ..) in &expired {
            self.tables[ti as usize].remove(id, next);
        }
        self.commit();
        expired.into_iter().map(|(t, _, m, p, c)| (t, m, p, c)).collect()
    }

    /// Housekeeping: MAC aging. Bumps the generation when entries expire.
    pub fn run(&self, now_ms: u64) {
        self.set_now(now_ms);
        if self.mac.lock().expect("mac table lock").expire(now_ms) > 0 {
            self.bump_generation();
        }
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
