//! The per-poll-thread datapath: extract, EMC, megaflow cache, upcall,
//! execute; revalidation and expiry.

use crate::actions::CounterSet;
use crate::actions::{DpAction, Translation, Upcall};
use crate::dpcls::Dpcls;
use crate::emc::Emc;
use crate::execute::{execute, Exec, OutQueues, Sink};
use flow::{FlowKey, Match};
use netdev::Packet;

/// Tunables of one poll thread's caches.
#[derive(Clone, Debug)]
pub struct PmdConfig {
    /// Insert into the EMC on one in N megaflow hits (1 = always), as OVS's
    /// `emc-insert-inv-prob`; 0 disables the EMC.
    pub emc_insert_inv_prob: u32,
    /// Most megaflows this thread caches; misses beyond it are translated
    /// and executed but not cached.
    pub megaflow_limit: usize,
    /// Megaflows unused this long are removed by [`Pmd::sweep`].
    pub max_idle_ms: u64,
    /// Most packets parked while the slow path is busy (see
    /// [`Pmd::poll_deferred`]); beyond it a packet that needs the slow
    /// path is dropped and counted in `upcall_busy`.
    pub deferred_limit: usize,
    /// A TCP/UDP checksum that arrives partial (left to offload by a local
    /// sender) stays so while the packet is only forwarded, for the output
    /// port to fill (AF_XDP TX metadata: the paper's O5); it is completed
    /// in software before any other action, and for ports that cannot
    /// ([`crate::Sink::csum_offload`]). Off: completed on arrival.
    pub csum_offload: bool,
    /// Check a fresh packet first against the megaflow its input port's
    /// last packet used (see `Pmd::port_hint`). Off: every packet goes
    /// through the EMC and the megaflow classifier (tests of those turn
    /// it off).
    pub port_hint: bool,
    /// Turn the EMC's lookups off while they do not pay (see `EmcGate`).
    /// Off: every lookup tries the EMC, as in Open vSwitch.
    pub emc_gate: bool,
}

impl Default for PmdConfig {
    fn default() -> Self {
        PmdConfig {
            emc_insert_inv_prob: 100,
            megaflow_limit: 200_000,
            max_idle_ms: 10_000,
            deferred_limit: 2048,
            csum_offload: true,
            port_hint: true,
            emc_gate: true,
        }
    }
}

/// Puts `key` in the recent-key ring (`samples`, `sample_ms`, next slot
/// `next`) the kernel fast path learns from. (A function of those fields
/// alone, so a caller may hold a megaflow meanwhile.)
fn sample_into(samples: &mut Vec<FlowKey>, sample_ms: &mut Vec<u64>, next: &mut usize, key: &FlowKey, now_ms: u64) {
    if samples.len() < SAMPLES {
        samples.push(*key);
        sample_ms.push(now_ms);
    } else {
        samples[*next] = *key;
        sample_ms[*next] = now_ms;
    }
    *next = (*next + 1) % SAMPLES;
}

/// A port's packets forwarded without a key (see `Pmd::quick_output`).
#[derive(Clone, Copy)]
struct Quick {
    in_port: u32,
    /// The megaflow, valid for the batch until a packet takes the full path.
    slot: u32,
    out: u32,
}

/// Counters of one poll thread. Written by its thread only.
#[derive(Clone, Debug, Default)]
pub struct PmdStats {
    /// Packets that parsed and entered the caches.
    pub packets: u64,
    /// Packets served by their input port's last megaflow
    /// ([`Pmd`]'s port hint), OVS's "simple match hits".
    pub simple_hits: u64,
    /// Of those, packets forwarded without a lookup (`Pmd::quick_output`:
    /// the port's megaflow matches the input port alone and only outputs).
    /// Each frame is still checked as extraction checks it.
    pub quick_outputs: u64,
    pub emc_hits: u64,
    /// Times the EMC was gated off (see `EmcGate`): the classifier found
    /// its megaflows in under 1.5 probes on average.
    pub emc_gated: u64,
    pub megaflow_hits: u64,
    /// Cache misses translated by the slow path.
    pub upcalls: u64,
    /// Misses not cached because the megaflow limit was reached.
    pub upcall_lost_limit: u64,
    /// Packets that needed the slow path while it was busy (a rule change
    /// held it) and were parked, to be looked up again on a later
    /// iteration: the poll thread never waits for the slow path.
    pub upcall_deferred: u64,
    /// Packets dropped because the slow path was busy and the parking
    /// queue was full ([`PmdConfig::deferred_limit`]).
    pub upcall_busy: u64,
    /// Stale megaflows checked against the current rules and kept.
    pub revalidated: u64,
    /// Stale megaflows whose translation changed, removed.
    pub removed_stale: u64,
    /// Megaflows removed after going idle.
    pub expired: u64,
    /// Packets dropped by recirculating too deep.
    pub drop_recirc_depth: u64,
    /// Packets whose translation hit the resubmit/goto depth limit (a
    /// rule loop): the actions up to the limit ran, the rest did not.
    pub drop_resubmit_depth: u64,
    /// Malformed packets dropped, by reason (counter name, count).
    pub drops: Vec<(&'static str, u64)>,
    /// Megaflow subtables searched, over every lookup that reached the
    /// classifier (the kernel datapath's "masks hit").
    pub mask_probes: u64,
    /// Subtables searched by the lookups that found a megaflow.
    pub megaflow_probes: u64,
    /// Time spent in upcalls (translation and megaflow install), and how
    /// that time is distributed ([`UPCALL_BUCKETS_US`]).
    pub upcall_ns: u64,
    pub upcall_hist: [u64; UPCALL_BUCKETS_US.len() + 1],
    /// TCP/UDP checksums that arrived partial (left to offload by a local
    /// sender): completed in software, or by the output port (see
    /// [`PmdConfig::csum_offload`]).
    pub csum_partial: u64,
}

/// Upper bounds (microseconds) of the upcall latency histogram's buckets;
/// the last bucket of [`PmdStats::upcall_hist`] counts the slower ones.
pub const UPCALL_BUCKETS_US: [u64; 12] = [5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 50_000];

impl PmdStats {
    /// Every drop reason with its count (zero for reasons not seen).
    pub fn drops_by_reason(&self) -> Vec<(&'static str, u64)> {
        let mut v: Vec<(&'static str, u64)> = flow::ParseError::ALL
            .iter()
            .map(|e| (e.name(), self.drops.iter().find(|(n, _)| *n == e.name()).map(|x| x.1).unwrap_or(0)))
            .collect();
        v.push(("drop_recirc_depth", self.drop_recirc_depth));
        v.push(("drop_resubmit_depth", self.drop_resubmit_depth));
        v
    }

    fn count_drop(&mut self, name: &'static str) {
        match self.drops.iter_mut().find(|(n, _)| *n == name) {
            Some((_, c)) => *c += 1,
            None => self.drops.push((name, 1)),
        }
    }
}

/// A cached megaflow as `dump_megaflows` reports it.
#[derive(Clone, Debug)]
pub struct MegaflowInfo {
    pub matched: Match,
    /// The key whose translation created the megaflow.
    pub orig: FlowKey,
    pub actions: Vec<DpAction>,
    pub packets: u64,
    pub bytes: u64,
    pub used_ms: u64,
}

/// Laid out in declaration order so that what a hit reads and writes
/// (actions, generation, counts, last use) shares the first cache line and
/// the next: with one megaflow per connection, most hits find the megaflow
/// out of cache, and every line it spans is another miss.
#[repr(C)]
struct Megaflow {
    actions: Vec<DpAction>,
    /// Rule generation this megaflow was last known valid at.
    generation: u64,
    packets: u64,
    bytes: u64,
    used_ms: u64,
    pushed_packets: u64,
    /// The masked key's words for the classifier's compare (see
    /// [`crate::dpcls::MATCH_INLINE`]), in the second line.
    mwords: [u64; crate::dpcls::MATCH_INLINE],
    /// Its translation hit the resubmit depth limit.
    too_deep: bool,
    subtable: usize,
    /// Slow-path counters this megaflow's packets are credited to (shared
    /// with other megaflows that went through the same rules), and how
    /// much of `packets`/`bytes` they have already received.
    counters: CounterSet,
    pushed_bytes: u64,
    /// The masked key. (The mask is the subtable's, `dpcls.mask(subtable)`:
    /// a copy per megaflow was 320 of its 1,150 bytes, and setting up a
    /// flood of megaflows spent a tenth of the poll thread faulting in and
    /// zeroing their fresh pages.)
    key: FlowKey,
    /// The key whose translation created this megaflow (for revalidation).
    orig: FlowKey,
}

impl Megaflow {
    /// Credits the packets not yet pushed to the slow-path counters.
    /// They are added to `pending` (see [`Pending`]).
    fn push(&mut self, pending: &mut Pending) {
        let (dp, db) = (self.packets - self.pushed_packets, self.bytes - self.pushed_bytes);
        if dp > 0 {
            pending.add(&self.counters, dp, db, self.used_ms);
            self.pushed_packets = self.packets;
            self.pushed_bytes = self.bytes;
        }
    }
}

/// Packets and bytes owed to counter lists, summed over the megaflows that
/// share each list, until [`Pending::flush`] credits every counter once.
/// Through OVN's pipeline a list holds some 100 counters and a new megaflow
/// costs a push: crediting each megaflow on its own was a tenth of a poll
/// thread's time in a flow-setup run.
#[derive(Default)]
struct Pending {
    /// List address -> (list, packets, bytes, latest use).
    by_list: std::collections::HashMap<
        usize,
        (CounterSet, u64, u64, u64),
        std::hash::BuildHasherDefault<flow::key::WordHasher>,
    >,
}

impl Pending {
    fn add(&mut self, list: &CounterSet, packets: u64, bytes: u64, used_ms: u64) {
        if list.is_empty() {
            return;
        }
        let e = self.by_list.entry(list.as_ptr() as usize).or_insert_with(|| (CounterSet::clone(list), 0, 0, 0));
        e.1 += packets;
        e.2 += bytes;
        e.3 = e.3.max(used_ms);
    }

    fn flush(&mut self) {
        for (_, (list, packets, bytes, used_ms)) in self.by_list.drain() {
            for c in list.iter() {
                c.0.credit(packets, bytes, used_ms);
            }
        }
    }
}

const MAX_RECIRC: u32 = 6;

/// Lookups (past the port hint) per window of [`EmcGate`]'s check.
const EMC_WINDOW: u32 = 4096;

/// Whether the EMC is worth a lookup, decided per window of
/// [`EMC_WINDOW`] lookups. An EMC hit costs a hash of the whole key and a
/// read of a six-line entry, cold when the active keys do not fit in the
/// cache; a megaflow found in the classifier's first subtable costs one
/// masked hash and a rule compare, no more. So the EMC only pays when it
/// saves probes: it is off while the classifier finds its megaflows in
/// under 1.5 subtable probes on average, and on otherwise (the
/// classifier's probes are counted whether the EMC is on or off; a window
/// in which the EMC answered everything keeps it as it is). Between two
/// VMs with 10,000 established connections per direction (40,000 keys
/// with the recirculation, 69% of them EMC hits, one probe per megaflow
/// hit), the EMC off was 1.14x faster; new connections 1.04x; plain
/// forwarding unchanged.
struct EmcGate {
    on: bool,
    lookups: u32,
    /// `stats.megaflow_hits` and `stats.megaflow_probes` at the window's start.
    mf0: (u64, u64),
}

impl Default for EmcGate {
    fn default() -> Self {
        EmcGate { on: true, lookups: 0, mf0: (0, 0) }
    }
}

/// One poll thread's fast path. Owned by that thread; nothing is shared.
pub struct Pmd {
    cfg: PmdConfig,
    emc: Emc,
    emc_gate: EmcGate,
    dpcls: Dpcls,
    flows: Vec<Option<Megaflow>>,
    /// Per slot: bumped whenever the slot is freed, so EMC entries naming
    /// an old occupant are recognized.
    slot_version: Vec<u32>,
    /// Per input port (index), the (slot, version) of the megaflow its
    /// last fresh packet (recirc_id 0) used. A packet from the port is
    /// checked against that megaflow's match first: one masked compare,
    /// no hash and no cache line of the EMC. A port whose frames all hit
    /// one megaflow (`in_port=1,actions=output:2`, a VM talking to one
    /// peer) never reaches the EMC. Any megaflow a key matches is valid
    /// for it, so the hint can only be right or miss; a miss costs the
    /// compare and updates the hint. OVS's "simple match" serves the
    /// in_port-only case of this with a table of its own.
    ///
    /// The local port's hint follows the ports' ones. Recirculated packets
    /// (after `ct(table=N)`, `pop_mpls`) have hints of their own after it:
    /// one per hash of (recirculation id, input port), [`RECIRC_HINTS`] of
    /// them. A firewall's second pass
    /// (`recirc_id=N,ct_state=+trk+est,in_port=1`) is one megaflow for all
    /// of a port's connections, which the EMC holds once per connection.
    ///
    /// Each hint also counts its misses in a row. A port whose packets each
    /// have a megaflow of their own (an address swap makes one per
    /// connection) would miss every time, and the miss is not free: it
    /// reads the last megaflow's own copy of its mask, which the megaflow
    /// classifier never touches. After [`HINT_GIVE_UP`] misses in a row the
    /// hint is tried on one packet in [`HINT_RETRY`] only, until it hits.
    port_hint: Vec<(u32, u32, u32)>,
    free: Vec<u32>,
    n_flows: usize,
    generation: u64,
    stats: PmdStats,
    out: OutQueues,
    rng: u64,
    last_rank_ms: u64,
    /// Packets that needed the slow path while it was busy, oldest first,
    /// with the key they were being looked up with and their recirculation
    /// depth. See [`Pmd::poll_deferred`].
    deferred: std::collections::VecDeque<(Packet, FlowKey, u32)>,
    /// Set while [`Pmd::poll_deferred`] replays the queue: only then may
    /// a packet use the slow path while others are parked.
    draining: bool,
    /// Keys of recent cache-hit packets (every 16th), a ring: which exact
    /// flows are hot, for the kernel fast path.
    samples: Vec<FlowKey>,
    /// When each sample was taken (the caller's clock, ms).
    sample_ms: Vec<u64>,
    sample_next: usize,
    sample_tick: u32,
    /// Where [`Pmd::sweep_some`] goes on.
    sweep_cursor: usize,
    /// Slots of megaflows with packets not yet pushed to the rules'
    /// counters (a slot freed and reused meanwhile costs a no-op push).
    dirty: Vec<u32>,
    /// Pushed packets not yet credited (flushed by [`Pmd::push_stats`]).
    pending: Pending,
}

/// Idle time after which a megaflow gives way to a new one at the limit.
const EVICT_IDLE_MS: u64 = 100;

/// Capacity of the recent-key ring, and how often a packet is sampled.
/// The offload manager reads the ring every 250 ms, so it learns of at
/// most this many new flows per read: 1024 lets 10,000 hot connections
/// reach the kernel in about 3 s (256 took 10 s). The ring is 312 KB,
/// written one key in 16 packets.
pub const SAMPLES: usize = 1024;
pub const SAMPLE_EVERY: u32 = 16;
/// Ports numbered from this on get no port hint, the local port excepted
/// (the hints are a vector indexed by port number; OpenFlow port numbers
/// are small in practice).
const MAX_HINT_PORTS: usize = 4096;

/// Hints for recirculated packets, by hash of (recirculation id, port).
const RECIRC_HINTS: usize = 1024;

/// Misses in a row after which a hint is tried only now and then.
const HINT_GIVE_UP: u32 = 8;
/// How often a hint that gave up is tried again: one packet in this many.
const HINT_RETRY: u32 = 32;

/// The outcome of [`Pmd::validate`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Validity {
    /// Valid at the current generation: use it.
    Valid,
    /// Stale and removed.
    Removed,
    /// Stale, and the slow path was too busy to say: not used, kept.
    Unknown,
}

/// How a packet's actions were found.
#[allow(clippy::large_enum_variant)] // reason: returned by value once per lookup, never stored
enum Found {
    Flow(u32),
    /// Translated but not cached (megaflow limit).
    Uncached(Translation),
    /// The slow path was busy (or packets are parked before this one):
    /// park the packet.
    Busy,
}

impl Drop for Pmd {
    /// Packets already forwarded are credited to their rules even when the
    /// poll thread goes away (a bridge or its ports reconfigured).
    fn drop(&mut self) {
        self.push_stats();
    }
}

impl Pmd {
    pub fn new(cfg: PmdConfig) -> Pmd {
        let cap = cfg.megaflow_limit.min(1 << 20);
        Pmd {
            cfg,
            emc: Emc::default(),
            emc_gate: EmcGate::default(),
            dpcls: Dpcls::default(),
            // Reserved (address space only; pages are touched as slots are
            // first used), so a burst of new flows never pays for moving
            // the whole table to a bigger allocation.
            flows: Vec::with_capacity(cap),
            slot_version: Vec::with_capacity(cap),
            port_hint: Vec::new(),
            free: Vec::new(),
            n_flows: 0,
            generation: 0,
            stats: PmdStats::default(),
            out: OutQueues::default(),
            rng: 0x2545_f491_4f6c_dd1d,
            last_rank_ms: 0,
            deferred: std::collections::VecDeque::new(),
            draining: false,
            samples: Vec::with_capacity(SAMPLES),
            sample_ms: Vec::with_capacity(SAMPLES),
            sample_next: 0,
            sample_tick: 0,
            sweep_cursor: 0,
            dirty: Vec::new(),
            pending: Pending::default(),
        }
    }

    /// Tells the cache the slow path's current rule generation. Megaflows
    /// validated at an older generation are revalidated before their next
    /// use.
    pub fn set_generation(&mut self, g: u64) {
        self.generation = g;
    }

    pub fn stats(&self) -> &PmdStats {
        &self.stats
    }

    pub fn n_megaflows(&self) -> usize {
        self.n_flows
    }

    /// Packets parked, waiting for the slow path.
    pub fn n_deferred(&self) -> usize {
        self.deferred.len()
    }

    /// Looks the parked packets up again, oldest first, until one finds
    /// the slow path still busy (it and those after it stay parked, in
    /// order). The owner calls this once per iteration, before receiving;
    /// a thread with parked packets must not sleep. Returns how many
    /// packets left the queue.
    ///
    /// Why parking keeps every guarantee and the order of each flow:
    /// * Nothing stale is served. A parked packet is looked up from
    ///   scratch when replayed, at the generation current then, through
    ///   the same [`Pmd::lookup`] (a megaflow is used only once valid at
    ///   the current generation).
    /// * No packet overtakes an earlier one of its flow. While the queue
    ///   is not empty, a newly received packet may use only megaflows that
    ///   are valid already; any that needs the slow path (a miss, or a
    ///   stale megaflow) is parked behind the others without asking it
    ///   (`slow_path_open`). A megaflow becomes valid only through the slow
    ///   path, so the megaflows a new packet can use were valid when every
    ///   parked packet was looked up, and none covered them (else they
    ///   would not be parked): a new packet that is forwarded at once is of
    ///   another flow than every parked one.
    /// * Nothing waits: the thread goes on with its other queues; a parked
    ///   packet costs a slot in a bounded queue (`deferred_limit`), and
    ///   only a full queue drops (counted in `upcall_busy`).
    pub fn poll_deferred(&mut self, upcall: &dyn Upcall, now_ms: u64, sink: &mut dyn Sink) -> usize {
        let before = self.deferred.len();
        if before == 0 {
            return 0;
        }
        self.draining = true;
        let mut queue = std::mem::take(&mut self.deferred);
        while let Some((pkt, mut key, depth)) = queue.pop_front() {
            let (_, layout, _) = flow::extract(pkt.data(), pkt.in_port);
            self.handle(pkt, &mut key, layout, upcall, now_ms, sink, depth);
            if !self.deferred.is_empty() {
                // Still busy: what was just parked again goes first.
                self.deferred.append(&mut queue);
                break;
            }
        }
        self.draining = false;
        self.out.flush(sink);
        before.saturating_sub(self.deferred.len())
    }

    /// Whether a lookup may ask the slow path now: not while packets are
    /// parked, except when replaying them (see [`Pmd::poll_deferred`]).
    #[inline]
    fn slow_path_open(&self) -> bool {
        self.deferred.is_empty() || self.draining
    }

    /// Processes a batch received on one port (each packet's `in_port`
    /// set): every packet is extracted, looked up (EMC, megaflows, upcall),
    /// and executed; outputs are grouped per port and handed to `sink` at
    /// the end. Drains `pkts`. Packets parked earlier are replayed first;
    /// packets that find the slow path busy are parked
    /// ([`Pmd::poll_deferred`]).
    pub fn process_batch(&mut self, pkts: &mut Vec<Packet>, upcall: &dyn Upcall, now_ms: u64, sink: &mut dyn Sink) {
        // Parked packets go first (they arrived earlier).
        self.poll_deferred(upcall, now_ms, sink);
        // One key buffer for the batch: extraction writes into it and
        // execution rewrites it in place, so it is never copied around.
        let mut key = FlowKey::ZERO;
        // When this port's packets lately took the tracker to its table (a
        // new connection each, or more connections than the hints hold),
        // and the table is larger than the caches, start loading each
        // packet's bucket now, so that the batch's misses overlap (see
        // `Conntrack::prefetch`).
        if let Some((ct, zone)) = pkts.first().and_then(|p| self.out.ct_hints.prefetch_for(p.in_port)) {
            if ct.prefetch_pays() {
                for p in pkts.iter() {
                    ct.prefetch(p.data(), zone);
                }
            }
        }
        // A batch comes from one port. When that port's hint lets its
        // packets go without a lookup (see `quick_output`), this is found
        // once for the batch; then the whole batch, checked in place, is
        // handed to the output queue as it is. Otherwise packet by packet:
        // found again after any packet that takes the full path (which may
        // change the megaflows), and the megaflow credited in one go, before
        // that and at the end. Only packets that owe no checksum (the
        // search for a partial one reads the headers) and carry no tunnel
        // metadata can go so.
        let eligible = |p: &Packet| p.csum_complete && p.tnl.is_none();
        let whole = pkts.first().filter(|f| pkts.iter().all(|p| p.in_port == f.in_port && eligible(p)));
        if let Some(q) = whole.map(|f| f.in_port).and_then(|port| self.quick_output(port, upcall)) {
            let mut bytes = 0;
            pkts.retain(|p| {
                let ok = self.quick_admit(p, &mut key, now_ms);
                bytes += if ok { p.len() as u64 } else { 0 };
                ok
            });
            self.credit_quick(q, &mut (pkts.len() as u64, bytes), now_ms);
            self.out.append(q.out, pkts);
        }
        let (mut quick, mut look) = (None, true);
        let mut credit = (0u64, 0u64);
        for pkt in pkts.drain(..) {
            if look && eligible(&pkt) {
                quick = self.quick_output(pkt.in_port, upcall);
                look = false;
            }
            if let Some(q) = quick {
                if pkt.in_port == q.in_port && eligible(&pkt) {
                    if self.quick_admit(&pkt, &mut key, now_ms) {
                        credit = (credit.0 + 1, credit.1 + pkt.len() as u64);
                        self.out.push(q.out, pkt);
                    }
                    continue;
                }
                self.credit_quick(q, &mut credit, now_ms);
            }
            self.full_path(pkt, &mut key, upcall, now_ms, sink);
            // What `quick` held may have changed: it is found again for the
            // next packet that could use it.
            (quick, look) = (None, true);
        }
        if let Some(q) = quick {
            self.credit_quick(q, &mut credit, now_ms);
        }
        self.out.flush(sink);
        if now_ms >= self.last_rank_ms + 1000 {
            self.dpcls.rank();
            self.last_rank_ms = now_ms;
        }
    }

    /// Extraction, then the caches, for one packet as received.
    #[inline]
    fn full_path(&mut self, mut pkt: Packet, key: &mut FlowKey, upcall: &dyn Upcall, now_ms: u64, sink: &mut dyn Sink) {
        let (layout, err) = flow::extract::extract_into(pkt.data(), pkt.in_port, key);
        if let Some(t) = &pkt.tnl {
            for (i, w) in flow::key::TNL_WORDS.iter().enumerate() {
                key.w[*w] = t[i];
            }
        }
        if let Some(e) = err {
            self.stats.count_drop(e.name());
            return;
        }
        self.stats.packets += 1;
        let partial = if pkt.csum_complete { None } else { crate::execute::partial_checksum(&pkt, key, &layout) };
        if let Some(c) = partial {
            self.stats.csum_partial += 1;
            pkt.csum_partial = Some(c);
            if !self.cfg.csum_offload {
                pkt.complete_checksum();
            }
        }
        self.handle(pkt, key, layout, upcall, now_ms, sink, 0);
    }

    /// Whether a packet going without a lookup may go: not if extraction
    /// would refuse it (dropped and counted the same way). One packet in
    /// [`SAMPLE_EVERY`] is extracted all the same, and its key sampled for
    /// the kernel fast path, as the full path samples its hits.
    #[inline]
    fn quick_admit(&mut self, pkt: &Packet, key: &mut FlowKey, now_ms: u64) -> bool {
        self.sample_tick = self.sample_tick.wrapping_add(1);
        let err = if self.sample_tick.is_multiple_of(SAMPLE_EVERY) {
            let (_, err) = flow::extract::extract_into(pkt.data(), pkt.in_port, key);
            if err.is_none() {
                sample_into(&mut self.samples, &mut self.sample_ms, &mut self.sample_next, key, now_ms);
            }
            err
        } else {
            flow::extract::check(pkt.data())
        };
        if let Some(e) = err {
            self.stats.count_drop(e.name());
            return false;
        }
        true
    }

    /// Credits `q`'s megaflow (and the poll thread's counters) with the
    /// packets and bytes in `credit` that went without a key, and zeroes it.
    fn credit_quick(&mut self, q: Quick, credit: &mut (u64, u64), now_ms: u64) {
        let (n, bytes) = std::mem::take(credit);
        if n == 0 {
            return;
        }
        self.stats.packets += n;
        self.stats.simple_hits += n;
        self.stats.quick_outputs += n;
        let f = self.flows[q.slot as usize].as_mut().expect("megaflows change only on the full path");
        if f.packets == f.pushed_packets {
            self.dirty.push(q.slot);
        }
        f.packets += n;
        f.bytes += bytes;
        f.used_ms = now_ms;
        self.stats.drop_resubmit_depth += f.too_deep as u64 * n;
    }

    /// Executes `actions` on one packet outside any cache (packet-out).
    pub fn execute(
        &mut self,
        pkt: Packet,
        actions: &[DpAction],
        upcall: &dyn Upcall,
        now_ms: u64,
        sink: &mut dyn Sink,
    ) {
        let (key, _, _) = flow::extract(pkt.data(), pkt.in_port);
        self.execute_with_key(pkt, key, actions, upcall, now_ms, sink);
    }

    /// Like [`Pmd::execute`], for a packet whose pipeline metadata
    /// (registers, conntrack and tunnel fields) is not in its bytes: `key`
    /// is its full key (a resumed continuation).
    pub fn execute_with_key(
        &mut self,
        pkt: Packet,
        mut key: FlowKey,
        actions: &[DpAction],
        upcall: &dyn Upcall,
        now_ms: u64,
        sink: &mut dyn Sink,
    ) {
        let (_, layout, _) = flow::extract(pkt.data(), pkt.in_port);
        let res = execute(actions, pkt, &mut key, layout, &mut self.out, sink, now_ms);
        self.recirculate(res, &mut key, upcall, now_ms, sink, 1);
        self.out.flush(sink);
    }

    #[allow(clippy::too_many_arguments)] // reason: the per-packet context, passed down without a struct on the hot path
    fn handle(
        &mut self,
        mut pkt: Packet,
        key: &mut FlowKey,
        layout: flow::Layout,
        upcall: &dyn Upcall,
        now_ms: u64,
        sink: &mut dyn Sink,
        depth: u32,
    ) {
        if depth > MAX_RECIRC {
            self.stats.drop_recirc_depth += 1;
            return;
        }
        let len = pkt.len() as u64;
        let found = self.lookup(key, upcall, now_ms);
        let res = match &found {
            Found::Flow(slot) => {
                let f = self.flows[*slot as usize].as_mut().expect("found flows exist");
                if f.packets == f.pushed_packets {
                    self.dirty.push(*slot);
                }
                f.packets += 1;
                f.bytes += len;
                f.used_ms = now_ms;
                self.stats.drop_resubmit_depth += f.too_deep as u64;
                // Sample one packet in 16 into the recent-key ring (the
                // kernel fast path serves exact flows; this is how it
                // learns which ones are hot without a per-packet cost).
                // Only as received: the kernel sees packets before any
                // recirculation (and counting every pass would sample
                // only one pass of a two-pass pipeline, 16 being even).
                self.sample_tick = self.sample_tick.wrapping_add((depth == 0) as u32);
                if depth == 0 && self.sample_tick.is_multiple_of(SAMPLE_EVERY) {
                    sample_into(&mut self.samples, &mut self.sample_ms, &mut self.sample_next, key, now_ms);
                }
                // A megaflow that only outputs: straight to the port's
                // queue, which is all `execute` would do (an output owes no
                // checksum completion). For a packet as received the key's
                // tunnel words are the packet's own, so there is nothing to
                // attach either; after a recirculation the pipeline may have
                // set some.
                if let [DpAction::Output(port)] = f.actions[..] {
                    if depth > 0 {
                        crate::execute::attach_tunnel(&mut pkt, key);
                    }
                    self.out.push(port, pkt);
                    return;
                }
                execute(&f.actions, pkt, key, layout, &mut self.out, sink, now_ms)
            }
            Found::Uncached(t) => {
                self.stats.drop_resubmit_depth += t.too_deep as u64;
                for c in t.counters.iter() {
                    c.0.credit(1, len, now_ms);
                }
                execute(&t.actions, pkt, key, layout, &mut self.out, sink, now_ms)
            }
            Found::Busy => {
                if self.deferred.len() < self.cfg.deferred_limit {
                    if !self.draining {
                        self.stats.upcall_deferred += 1;
                    }
                    self.deferred.push_back((pkt, *key, depth));
                } else {
                    self.stats.upcall_busy += 1;
                }
                return;
            }
        };
        self.recirculate(res, key, upcall, now_ms, sink, depth + 1);
    }

    /// Looks up again what an execution sent back (`Recirc` actions).
    fn recirculate(
        &mut self,
        res: Exec,
        key: &mut FlowKey,
        upcall: &dyn Upcall,
        now_ms: u64,
        sink: &mut dyn Sink,
        depth: u32,
    ) {
        match res {
            Exec::Done => {}
            Exec::Recirc(p, layout) => self.handle(p, key, layout, upcall, now_ms, sink, depth),
            Exec::RecircMany(v) => {
                for (p, mut k, layout) in v {
                    self.handle(p, &mut k, layout, upcall, now_ms, sink, depth);
                }
            }
        }
    }

    /// The actions the fast path would apply to a packet with `key`, found
    /// through the caches exactly as [`Pmd::process_batch`] finds them
    /// (filling the caches on a miss). For tests and tools that work on
    /// keys rather than packet bytes.
    pub fn actions_for_key(
        &mut self,
        key: &FlowKey,
        upcall: &dyn Upcall,
        now_ms: u64,
    ) -> std::borrow::Cow<'_, [DpAction]> {
        self.stats.packets += 1;
        match self.lookup(key, upcall, now_ms) {
            Found::Flow(slot) => {
                let f = self.flows[slot as usize].as_mut().expect("found flows exist");
                f.used_ms = now_ms;
                std::borrow::Cow::Borrowed(&f.actions)
            }
            Found::Uncached(t) => std::borrow::Cow::Owned(t.actions),
            Found::Busy => std::borrow::Cow::Owned(Vec::new()),
        }
    }

    #[inline]
    fn next_rand(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }

    /// How packets as received on `in_port` go without a key, if they can:
    /// the port's hint (the megaflow its last packet used, see
    /// [`Pmd::lookup`]) matches on metadata alone and has one output for
    /// its actions. This is OVS's "simple match", where the hint and the
    /// megaflow are the whole lookup and the headers are never extracted
    /// (but see [`Pmd::quick_admit`]).
    fn quick_output(&mut self, in_port: u32, upcall: &dyn Upcall) -> Option<Quick> {
        if !self.cfg.port_hint || in_port as usize >= MAX_HINT_PORTS {
            return None;
        }
        let &(slot, ver, misses) = self.port_hint.get(in_port as usize)?;
        if misses != 0 || self.slot_version.get(slot as usize) != Some(&ver) {
            return None;
        }
        let f = self.flows[slot as usize].as_ref()?;
        let [DpAction::Output(out)] = f.actions[..] else { return None };
        let m = crate::dpcls::Stored { words: &f.mwords, key: &f.key };
        if self.dpcls.matches_received(f.subtable, in_port, &m) != Some(true) {
            return None;
        }
        (self.validate(slot, upcall) == Validity::Valid).then_some(Quick { in_port, slot, out })
    }

    fn lookup(&mut self, key: &FlowKey, upcall: &dyn Upcall, now_ms: u64) -> Found {
        let hint = self.hint_index(key);
        if let Some(h) = hint {
            if let Some(&(slot, ver, misses)) = self.port_hint.get(h) {
                if misses < HINT_GIVE_UP || misses % HINT_RETRY == 0 {
                    if self.slot_version.get(slot as usize) == Some(&ver)
                        && self.flows[slot as usize].as_ref().is_some_and(|f| {
                            let m = crate::dpcls::Stored { words: &f.mwords, key: &f.key };
                            self.dpcls.matches(f.subtable, key, &m)
                        })
                        && self.validate(slot, upcall) == Validity::Valid
                    {
                        self.port_hint[h].2 = 0;
                        self.stats.simple_hits += 1;
                        return Found::Flow(slot);
                    }
                }
                // (Wrapping after 4 billion misses only retries sooner.)
                self.port_hint[h].2 = misses.wrapping_add(1);
            }
        }
        // With the EMC off (0), or gated off, the full-key hash is needed
        // only for an insertion.
        let use_emc = self.cfg.emc_insert_inv_prob > 0 && self.emc_worth_it();
        let hash = if use_emc { Some(key.hash()) } else { None };
        if let Some(hash) = hash {
            if let Some((slot, ver)) = self.emc.lookup(key, hash) {
                if self.slot_version.get(slot as usize) == Some(&ver) && self.validate(slot, upcall) == Validity::Valid
                {
                    self.stats.emc_hits += 1;
                    self.set_hint(hint, slot);
                    return Found::Flow(slot);
                }
            }
        }
        // A stale megaflow that fails revalidation is removed; search on,
        // since another (valid) megaflow may cover the key.
        let probes0 = self.dpcls.probes;
        loop {
            let flows = &self.flows;
            let Some(slot) = self.dpcls.lookup(key, |s| {
                flows[s as usize].as_ref().map(|f| crate::dpcls::Stored { words: &f.mwords, key: &f.key })
            }) else {
                break;
            };
            match self.validate(slot, upcall) {
                Validity::Valid => {
                    let probes = self.dpcls.probes - probes0;
                    self.stats.mask_probes += probes;
                    self.stats.megaflow_probes += probes;
                    self.stats.megaflow_hits += 1;
                    self.emc_maybe_insert(key, hash, slot);
                    self.set_hint(hint, slot);
                    return Found::Flow(slot);
                }
                Validity::Removed => continue,
                Validity::Unknown => break,
            }
        }
        self.stats.mask_probes += self.dpcls.probes - probes0;
        // Miss: ask the slow path (if no packet is parked before this one).
        if !self.slow_path_open() {
            return Found::Busy;
        }
        let t0 = std::time::Instant::now();
        let Some(t) = upcall.try_translate(key) else {
            return Found::Busy;
        };
        self.stats.upcalls += 1;
        if self.n_flows >= self.cfg.megaflow_limit && !self.evict_idle_one(now_ms) {
            self.stats.upcall_lost_limit += 1;
            self.count_upcall(t0);
            return Found::Uncached(t);
        }
        let slot = self.install(key, t, now_ms);
        self.emc_maybe_insert(key, hash, slot);
        self.set_hint(hint, slot);
        self.count_upcall(t0);
        Found::Flow(slot)
    }

    /// The hint `key` may use: its port's for fresh packets (recirc_id 0)
    /// of ports numbered below [`MAX_HINT_PORTS`], else one of the
    /// recirculation hints.
    #[inline]
    fn hint_index(&self, key: &FlowKey) -> Option<usize> {
        use flow::key::loc::{IN_PORT, RECIRC_ID};
        if !self.cfg.port_hint {
            return None;
        }
        let (port, recirc) = (IN_PORT.get(key) as u64, RECIRC_ID.get(key) as u64);
        if recirc == 0 {
            if port < MAX_HINT_PORTS as u64 {
                return Some(port as usize);
            }
            // The bridge's local port (what its own stack sends, and what
            // tunnel ports hand the underlay bridge) has a hint of its own.
            return (port == ofp_types::actions::ofpp::LOCAL as u64).then_some(MAX_HINT_PORTS);
        }
        let h = (recirc.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ port).wrapping_mul(0xff51_afd7_ed55_8ccd) >> 54;
        Some(MAX_HINT_PORTS + 1 + h as usize % RECIRC_HINTS)
    }

    #[inline]
    fn set_hint(&mut self, hint: Option<usize>, slot: u32) {
        let Some(h) = hint else { return };
        if h >= self.port_hint.len() {
            self.port_hint.resize(h + 1, (u32::MAX, 0, 0));
        }
        let e = &mut self.port_hint[h];
        (e.0, e.1) = (slot, self.slot_version[slot as usize]);
    }

    /// Adds an upcall that started at `t0` to the latency counters.
    fn count_upcall(&mut self, t0: std::time::Instant) {
        let ns = t0.elapsed().as_nanos() as u64;
        self.stats.upcall_ns += ns;
        let b = UPCALL_BUCKETS_US.iter().position(|&us| ns <= us * 1000).unwrap_or(UPCALL_BUCKETS_US.len());
        self.stats.upcall_hist[b] += 1;
    }

    /// Probabilistic EMC insertion (one in `emc_insert_inv_prob`), so that
    /// a flood of short flows cannot evict the long-lived ones. `hash` is
    /// the key's, if the lookup computed it. Insertions go on while the
    /// EMC is gated off, so that it is warm when it reopens.
    #[inline]
    #[allow(clippy::manual_is_multiple_of)] // reason: is_multiple_of needs Rust 1.87; the workspace supports 1.85
    fn emc_maybe_insert(&mut self, key: &FlowKey, hash: Option<u64>, slot: u32) {
        let p = self.cfg.emc_insert_inv_prob;
        if p == 1 || (p > 1 && self.next_rand() % p as u64 == 0) {
            let hash = hash.unwrap_or_else(|| key.hash());
            self.emc.insert(key, hash, slot, self.slot_version[slot as usize]);
        }
    }

    /// Whether this lookup uses the EMC (see [`EmcGate`]), closing a
    /// window when it is full.
    #[inline]
    fn emc_worth_it(&mut self) -> bool {
        if !self.cfg.emc_gate {
            return true;
        }
        let g = &mut self.emc_gate;
        g.lookups += 1;
        if g.lookups >= EMC_WINDOW {
            let (hits, probes) = (self.stats.megaflow_hits - g.mf0.0, self.stats.megaflow_probes - g.mf0.1);
            if hits > 0 {
                let on = 2 * probes >= 3 * hits;
                if g.on && !on {
                    self.stats.emc_gated += 1;
                }
                g.on = on;
            }
            (g.lookups, g.mf0) = (0, (self.stats.megaflow_hits, self.stats.megaflow_probes));
        }
        g.on
    }

    /// Whether the EMC is in use (not gated off, see [`EmcGate`]).
    pub fn emc_active(&self) -> bool {
        self.cfg.emc_insert_inv_prob > 0 && (self.emc_gate.on || !self.cfg.emc_gate)
    }

    fn install(&mut self, key: &FlowKey, t: Translation, now_ms: u64) -> u32 {
        let m = Match::new(*key, t.mask);
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.flows.push(None);
                self.slot_version.push(0);
                (self.flows.len() - 1) as u32
            }
        };
        let subtable = self.dpcls.insert(&m.key, &m.mask, slot);
        let mwords = self.dpcls.inline_words(subtable, &m.key);
        self.flows[slot as usize] = Some(Megaflow {
            mwords,
            key: m.key,
            actions: t.actions,
            counters: t.counters,
            too_deep: t.too_deep,
            pushed_packets: 0,
            pushed_bytes: 0,
            orig: *key,
            generation: self.generation,
            subtable,
            packets: 0,
            bytes: 0,
            used_ms: now_ms,
        });
        self.n_flows += 1;
        slot
    }

    fn remove(&mut self, slot: u32) {
        if let Some(mut f) = self.flows[slot as usize].take() {
            f.push(&mut self.pending);
            self.dpcls.remove(&f.key, f.subtable, slot);
            self.slot_version[slot as usize] = self.slot_version[slot as usize].wrapping_add(1);
            self.free.push(slot);
            self.n_flows -= 1;
        }
    }

    /// Makes sure a megaflow is valid for the current generation before
    /// it is used. A megaflow validated at an older generation is
    /// re-translated (through [`Upcall::revalidate`], which must not
    /// learn) from `orig`, the key whose upcall created it. It is kept, at
    /// the current generation, iff the actions are equal and the new mask
    /// is a subset of its mask; otherwise it is removed.
    ///
    /// Why keeping it is sound. Let `M` be the megaflow's mask and `A` its
    /// actions; the new translation of `orig` is `(A', M')` with `A' == A`
    /// and `M' ⊆ M`. Translation is sound for the current rules: every key
    /// `k` with `k & M' == orig & M'` gets `A'` from a fresh translate.
    /// The megaflow matches exactly the keys with `k & M == orig & M`; as
    /// `M' ⊆ M`, each of them also has `k & M' == orig & M'`, so its fresh
    /// actions are `A' == A`: serving it `A` from the cache is exact.
    /// (If `M'` is wider than `M`, some covered keys were never looked at
    /// by the new translation and may differ; if `A' != A`, `orig` itself
    /// differs. Either way the megaflow goes.)
    ///
    /// Removal needs no EMC sweep: EMC entries carry the slot's version,
    /// which removal bumps, so entries naming the old megaflow never match
    /// again (and are overwritten in time).
    ///
    /// Overlap: after rule changes, a new megaflow may overlap an old one
    /// that has not been looked at yet. That is harmless, because no
    /// megaflow is ever *used* before it is valid at the current
    /// generation, and valid megaflows agree on every key they share.
    fn validate(&mut self, slot: u32, upcall: &dyn Upcall) -> Validity {
        let f = self.flows[slot as usize].as_ref().expect("validated flows exist");
        if f.generation == self.generation {
            return Validity::Valid;
        }
        // If the slow path is busy (or closed while packets are parked) the
        // megaflow cannot be confirmed: it is not used (the lookup falls
        // through to an upcall, which parks the packet).
        if !self.slow_path_open() {
            return Validity::Unknown;
        }
        let Some(t) = upcall.revalidate(&f.orig) else { return Validity::Unknown };
        if t.actions == f.actions && t.mask.is_subset_of(self.dpcls.mask(f.subtable)) {
            let f = self.flows[slot as usize].as_mut().expect("exists");
            f.generation = self.generation;
            f.too_deep = t.too_deep;
            // The rules behind it may have been replaced (same actions):
            // credit the old ones up to now, the new ones from now on.
            if f.counters != t.counters {
                f.push(&mut self.pending);
                f.counters = t.counters;
            }
            self.stats.revalidated += 1;
            Validity::Valid
        } else {
            self.remove(slot);
            self.stats.removed_stale += 1;
            Validity::Removed
        }
    }

    /// Revalidates every megaflow now (rather than on its next use).
    pub fn revalidate_all(&mut self, upcall: &dyn Upcall) {
        for slot in 0..self.flows.len() as u32 {
            if self.flows[slot as usize].is_some() {
                self.validate(slot, upcall);
            }
        }
    }

    /// Credits every megaflow's new packets to the slow-path counters of
    /// the rules behind it (done by [`Pmd::sweep`] too).
    pub fn push_stats(&mut self) {
        // Only the megaflows that had packets since the last push: a pass
        // over 200,000 cold megaflows every second stalled forwarding.
        for slot in self.dirty.drain(..) {
            if let Some(f) = self.flows[slot as usize].as_mut() {
                f.push(&mut self.pending);
            }
        }
        self.pending.flush();
    }

    /// Removes megaflows idle for longer than `max_idle_ms`, and pushes
    /// the others' counters.
    pub fn sweep(&mut self, now_ms: u64) {
        self.push_stats();
        self.sweep_cursor = 0;
        self.sweep_some(now_ms, usize::MAX);
    }

    /// At the megaflow limit, a new megaflow may take the place of one idle
    /// for over 100 ms among the next 16 slots of the sweep (as Open
    /// vSwitch's revalidators expire flows idle for 100 ms once over the
    /// limit): otherwise a burst of short flows would fill the table for the
    /// 10 s idle timeout, and every packet of a new flow would be translated
    /// in the meantime. Counted in `expired`. Returns whether it made room.
    fn evict_idle_one(&mut self, now_ms: u64) -> bool {
        self.expire_from_cursor(now_ms, 16, EVICT_IDLE_MS, 1) > 0
    }

    /// Expires idle megaflows among the next `max` slots, going on where
    /// the previous call stopped and wrapping around; returns how many it
    /// removed. A poll thread calls this often with a small `max`: a pass
    /// over 200,000 megaflows at once reads 200,000 cold entries and stalls
    /// forwarding for tens of milliseconds.
    pub fn sweep_some(&mut self, now_ms: u64, max: usize) -> usize {
        self.expire_from_cursor(now_ms, max, self.cfg.max_idle_ms, usize::MAX)
    }

    /// Looks at up to `max` slots from the sweep cursor on (wrapping) and
    /// removes megaflows idle for longer than `idle_ms`, stopping after
    /// `enough` removals; returns how many it removed.
    fn expire_from_cursor(&mut self, now_ms: u64, max: usize, idle_ms: u64, enough: usize) -> usize {
        let n = self.flows.len();
        let mut removed = 0;
        for _ in 0..max.min(n) {
            if self.sweep_cursor >= n {
                self.sweep_cursor = 0;
            }
            let slot = self.sweep_cursor as u32;
            self.sweep_cursor += 1;
            if self.flows[slot as usize].as_ref().is_some_and(|f| now_ms.saturating_sub(f.used_ms) > idle_ms) {
                self.remove(slot);
                self.stats.expired += 1;
                removed += 1;
                if removed >= enough {
                    break;
                }
            }
        }
        removed
    }

    /// Removes every megaflow and EMC entry.
    pub fn flush(&mut self) {
        for slot in 0..self.flows.len() as u32 {
            self.remove(slot);
        }
        self.emc.clear();
        self.pending.flush();
    }

    /// Keys of recent cache-hit packets as received (one in
    /// [`SAMPLE_EVERY`], the last [`SAMPLES`] of them).
    pub fn recent_keys(&self) -> &[FlowKey] {
        &self.samples
    }

    /// When each of [`Pmd::recent_keys`] was taken (ms, the clock the
    /// caller passes in).
    pub fn recent_times(&self) -> &[u64] {
        &self.sample_ms
    }

    pub fn dump_megaflows(&self) -> Vec<MegaflowInfo> {
        self.flows
            .iter()
            .flatten()
            .map(|f| MegaflowInfo {
                matched: Match::new(f.key, *self.dpcls.mask(f.subtable)),
                orig: f.orig,
                actions: f.actions.clone(),
                packets: f.packets,
                bytes: f.bytes,
                used_ms: f.used_ms,
            })
            .collect()
    }

    /// Megaflow subtables (masks) in the classifier.
    pub fn n_subtables(&self) -> usize {
        self.dpcls.subtables().count()
    }

    /// (mask, megaflows, recent hits) per megaflow subtable, search order.
    pub fn subtables(&self) -> Vec<(FlowKey, usize, u64)> {
        self.dpcls.subtables().map(|(m, n, h)| (*m, n, h)).collect()
    }
}
