//! # conntrack: the connection tracker
//!
//! What `ct()` does in a flow: it finds the connection a packet belongs to
//! and reports its state as `ct_state` bits (`new est rel rpl inv trk snat
//! dnat`, the values of [`cs`]), with the connection's zone, mark, label and
//! original tuple; `ct(commit)` creates the connection; `ct(nat)` translates
//! the packet's addresses and ports as the connection's NAT binding says.
//!
//! ## Correctness property
//! A packet is `+est` only if it belongs to a committed connection that has
//! seen traffic in both directions and, for TCP, lies inside the sequence
//! windows both sides have shown ([`tcp`]; not checked for a connection
//! the kernel fast path serves, see [`Conntrack::mark_offloaded`]); `+rel` only if it is an ICMP
//! error quoting a packet of a committed connection; `+rpl` only if it
//! travels in the reply direction. Everything the tracker cannot parse or
//! that fails a check is `+inv` and changes no state. A NATed connection is
//! stored under both its original and its reply tuple, and a translation is
//! chosen only if its reply tuple is free in the zone, so two live
//! connections never share a tuple (NAT ports never collide).
//!
//! ## Structure and threads
//! The table is split into 1,024 shards, each a `Mutex` around a
//! [`table`] whose buckets are one cache line of five tags and five
//! `Arc<Conn>` (a probe reads one line before it touches a connection),
//! chosen by a keyed hash of the zone and tuple, the same for a tuple and
//! its reverse (so a connection without NAT has one slot; a flood of crafted
//! tuples cannot pile into one shard). The key is hashed once per
//! operation, and a shard grows without dereferencing a connection, so
//! growing one (a 1/1024th of the table) is short. A lookup locks one
//! shard for one probe and clones an `Arc`; the per-connection state (TCP windows,
//! mark, label, counters) sits behind the connection's own mutex. Poll
//! threads therefore only contend when they touch the same shard at the
//! same instant or the same connection — never on one global lock, which
//! is what serialised Open vSwitch's userspace tracker for years. Creating
//! a connection locks the (at most two) shards of its tuples in index
//! order, checks both keys and inserts both under those locks (an expired
//! connection found on either key is removed first), so concurrent commits
//! of the same tuple cannot both win. Zone
//! counters for limits are atomics per zone, in groups allocated on first
//! use and found without a lock.
//!
//! A large table misses the cache on every probe of a new tuple. The
//! datapath therefore starts loading a batch's buckets before it tracks
//! the batch ([`Conntrack::prefetch`]), without a lock: each shard
//! publishes where its buckets are in an atomic word, which a locked
//! shard's guard updates as it is released (a stale word only wastes a
//! prefetch).
//!
//! Expiry never stops the world: [`Conntrack::sweep`] visits a bounded
//! number of shards per call (the caller's housekeeping tick), one shard
//! lock at a time, and a lookup that meets an expired connection removes it
//! itself. Expiry times are atomics, refreshed without the shard lock.
//!
//! The tracker is sans-IO: packets are byte slices, time is the caller's
//! `now_ms`, and nothing here makes a system call.
#![deny(unsafe_code)]

pub mod alg;
pub mod format;
pub mod frag;
pub mod nat;
pub mod packet;
mod prefetch;
mod table;
pub mod tcp;

pub use nat::{NatFlags, NatRange};
pub use packet::{Parsed, Tuple, Untrackable};

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock};

/// `ct_state` bits, as Open vSwitch numbers them.
pub mod cs {
    pub const NEW: u8 = 0x01;
    pub const EST: u8 = 0x02;
    pub const REL: u8 = 0x04;
    pub const RPL: u8 = 0x08;
    pub const INV: u8 = 0x10;
    pub const TRK: u8 = 0x20;
    pub const SNAT: u8 = 0x40;
    pub const DNAT: u8 = 0x80;
}

/// A connection's identity in the table: zone and tuple.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    pub zone: u16,
    pub tuple: Tuple,
}

/// Timeouts in milliseconds (Open vSwitch's defaults).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    pub tcp_opening: u64,
    pub tcp_established: u64,
    pub tcp_closing: u64,
    pub tcp_fin_wait: u64,
    pub tcp_closed: u64,
    pub udp_first: u64,
    pub udp_bidir: u64,
    pub icmp_first: u64,
    pub icmp_reply: u64,
    pub other_first: u64,
    pub other_bidir: u64,
}

impl Default for Timeouts {
    fn default() -> Timeouts {
        const S: u64 = 1000;
        Timeouts {
            tcp_opening: 30 * S,
            tcp_established: 24 * 3600 * S,
            tcp_closing: 15 * 60 * S,
            tcp_fin_wait: 45 * S,
            tcp_closed: 30 * S,
            udp_first: 60 * S,
            udp_bidir: 30 * S,
            icmp_first: 60 * S,
            icmp_reply: 30 * S,
            other_first: 60 * S,
            other_bidir: 30 * S,
        }
    }
}

impl Timeouts {
    /// These timeouts with a zone's timeout policy applied: keys and
    /// seconds as in the database's `CT_Timeout_Policy:timeouts` column.
    /// The tracker's states are coarser than that column's keys, so some
    /// keys set the same timeout (`tcp_syn_sent` and `tcp_syn_recv` both
    /// set the opening timeout). Unknown keys are returned as errors.
    pub fn with_policy<'a>(mut self, policy: impl IntoIterator<Item = (&'a str, u64)>) -> Result<Timeouts, String> {
        for (k, secs) in policy {
            let ms = secs.saturating_mul(1000);
            match k {
                "tcp_syn_sent" | "tcp_syn_recv" => self.tcp_opening = ms,
                "tcp_established" => self.tcp_established = ms,
                "tcp_fin_wait" => self.tcp_fin_wait = ms,
                "tcp_close_wait" | "tcp_last_ack" => self.tcp_closing = ms,
                "tcp_time_wait" | "tcp_close" => self.tcp_closed = ms,
                "udp_first" | "udp_single" => self.udp_first = ms,
                "udp_multiple" => self.udp_bidir = ms,
                "icmp_first" => self.icmp_first = ms,
                "icmp_reply" => self.icmp_reply = ms,
                // Accepted by the schema; the tracker has no such state.
                "tcp_syn_sent2" | "tcp_retransmit" | "tcp_unack" => {}
                other => return Err(format!("timeout policy: unknown key {other:?}")),
            }
        }
        Ok(self)
    }
}

#[derive(Clone, Debug)]
pub struct Config {
    /// Connections in all zones together (Open vSwitch's default: 3,000,000).
    pub max_conns: usize,
    /// Check IPv4 header and TCP/UDP/ICMP checksums (as Open vSwitch's
    /// tracker does); a packet that fails is `+inv`.
    pub validate_checksums: bool,
    pub timeouts: Timeouts,
    /// Shards of the table (rounded up to a power of two).
    pub shards: usize,
}

impl Default for Config {
    fn default() -> Config {
        Config { max_conns: 3_000_000, validate_checksums: true, timeouts: Timeouts::default(), shards: 1024 }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Proto {
    Tcp(tcp::TcpState),
    /// UDP, ICMP queries and other protocols: whether a reply was seen.
    Simple,
}

/// Packed to 8-byte alignment (as `Tuple`): a `u128` label would align
/// the whole connection to 16 and pad it.
#[derive(Debug)]
#[repr(Rust, packed(8))]
struct ConnState {
    proto: Proto,
    mark: u32,
    label: u128,
    seen_reply: bool,
    packets: [u64; 2],
    bytes: [u64; 2],
}

/// One tracked connection.
///
/// Laid out in declaration order (`repr(C)`), what a lookup reads first:
/// the zone, flags and expiry, then both tuples, contiguous (a probe
/// compares the zone and a tuple before anything else; Rust's own layout
/// put the zone 200 bytes after the tuples, on a line of its own).
#[derive(Debug)]
#[repr(C)]
pub struct Conn {
    pub zone: u16,
    /// The helper (`alg=`) port of a control connection, 0 if none.
    pub alg: u16,
    /// [`cs::SNAT`] and/or [`cs::DNAT`] if the connection is translated.
    pub nat: u8,
    /// Set once the connection left the table (expired, flushed, replaced),
    /// so a [`Tracked`] hint that still holds it is not used.
    removed: AtomicBool,
    /// The kernel fast path serves some of its packets: changes call the
    /// tracker's offload hooks.
    offloaded: AtomicBool,
    expires: AtomicU64,
    /// The tuple of the first packet.
    pub orig: Tuple,
    /// The tuple replies carry (translated addresses if NATed).
    pub reply: Tuple,
    /// The zone's timeout policy when the connection was created.
    tp: Option<Arc<Timeouts>>,
    /// Moves on whenever what [`Conntrack::offload_view`] reports for the
    /// connection changes (TCP state, mark, label, removal).
    version: AtomicU64,
    st: Mutex<ConnState>,
}

impl Conn {
    /// Whether `t` is one of this connection's two tuples in `zone`.
    #[inline]
    fn holds(&self, zone: u16, t: &Tuple) -> bool {
        self.zone == zone && (self.orig == *t || self.reply == *t)
    }

    fn live(&self, now_ms: u64) -> bool {
        self.expires.load(Relaxed) > now_ms && !self.removed.load(Relaxed)
    }
}

/// What an attempt to insert a new connection's keys met.
enum Insert {
    Done,
    /// A live connection holds one of the keys.
    Taken,
    /// An expired connection holds one of them; it is removed and the
    /// insert tried again.
    Stale(Arc<Conn>),
}

/// The connection an earlier `ct()` matched a packet to. The datapath
/// hands it to the next `ct()` (after a recirculation, typically), which
/// then skips the table: [`Conntrack::execute_tracked`] uses it only if it
/// comes from the same tracker and zone, is still in the table, and the
/// packet's tuple is one of the connection's (as sent, or as translated by
/// it), so it finds what a lookup would find.
#[derive(Clone, Debug)]
pub struct Tracked {
    pub conn: Arc<Conn>,
    tracker: u64,
}

/// Distinguishes trackers (one per datapath), so a hint is never taken
/// to another tracker's table.
static TRACKER_IDS: AtomicU64 = AtomicU64::new(1);

/// What `nat` in a `ct()` action asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Nat {
    /// `nat` alone: apply the connection's existing translation.
    Existing,
    Src(NatRange),
    Dst(NatRange),
}

/// The parameters of one `ct()` action.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CtAction {
    pub zone: u16,
    pub commit: bool,
    /// `force`: a committed connection met in the reply direction is ended
    /// and this packet starts a new one.
    pub force: bool,
    /// `exec(set_field:V/M->ct_mark)` (value, mask), applied on commit.
    pub mark: Option<(u32, u32)>,
    pub label: Option<(u128, u128)>,
    pub nat: Option<Nat>,
    /// A helper for the connection's related connections (`alg=`): the
    /// helper's port, 21 (FTP) or 69 (TFTP).
    pub alg: Option<u16>,
}

/// What the tracker says about a packet.
#[derive(Clone, Debug, Default)]
pub struct CtResult {
    pub state: u8,
    pub zone: u16,
    pub mark: u32,
    pub label: u128,
    /// The connection's original tuple (`ct_nw_src`, `ct_tp_dst`, ...).
    pub orig: Option<Tuple>,
    pub tracked: Option<Tracked>,
    /// The packet belongs to the connection of the hint it was given
    /// (`tracked` is then `None`: the caller keeps its hint, and neither
    /// side pays an atomic reference count for a clone and a drop).
    pub hint_matched: bool,
}

/// A verdict for a packet of connection `c`, without the handle on `c`
/// ([`CtResult::tracked`]) that [`Conntrack::verdict`] adds.
fn untracked_verdict(c: &Conn, state: u8, zone: u16, (mark, label): (u32, u128)) -> CtResult {
    CtResult { state, zone, mark, label, orig: Some(c.orig), ..CtResult::default() }
}

impl CtResult {
    fn invalid(zone: u16) -> CtResult {
        CtResult { state: cs::TRK | cs::INV, zone, ..CtResult::default() }
    }
}

/// Counters, all since start.
#[derive(Debug, Default)]
pub struct Counters {
    pub created: AtomicU64,
    pub expired: AtomicU64,
    /// Packets that could not be tracked, by [`Untrackable`] reason.
    pub untrackable: [AtomicU64; 6],
    /// TCP segments outside the windows or with bad flags.
    pub tcp_invalid: AtomicU64,
    /// Packets that cannot start a connection (ICMP replies, SYN-ACKs...).
    pub invalid_new: AtomicU64,
    pub full: AtomicU64,
    pub zone_full: AtomicU64,
    pub nat_exhausted: AtomicU64,
    pub collisions: AtomicU64,
}

fn untrackable_index(u: Untrackable) -> usize {
    match u {
        Untrackable::NotIp => 0,
        Untrackable::Truncated => 1,
        Untrackable::Fragment => 2,
        Untrackable::BadIcmpError => 3,
        Untrackable::BadIcmpType => 4,
        Untrackable::BadChecksum => 5,
    }
}

const UNTRACKABLE: [Untrackable; 6] = [
    Untrackable::NotIp,
    Untrackable::Truncated,
    Untrackable::Fragment,
    Untrackable::BadIcmpError,
    Untrackable::BadIcmpType,
    Untrackable::BadChecksum,
];

/// A zone's connection count and limit.
#[derive(Debug, Default)]
struct ZoneCount {
    count: AtomicUsize,
    /// 0 = the default limit applies.
    limit: AtomicUsize,
}

/// One zone's figures, for `ct-get-limits`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZoneLimit {
    pub zone: u16,
    pub limit: usize,
    pub count: usize,
}

/// Shards [`Conntrack::sweep`] visits per call from the switch's
/// housekeeping (an eighth of the default 1024). A shard's lock is held
/// while its slots are scanned: at 3,000,000 connections that is about
/// 6,000 slots.
pub const SWEEP_SHARDS: usize = 128;

type Shard = table::Table<Arc<Conn>>;

/// From how many connections on [`Conntrack::prefetch`] pays: 65,536
/// connections are 14 MB of connections and 0.9 MB or more of buckets,
/// past a poll thread's share of the caches.
pub const PREFETCH_MIN_CONNS: usize = 1 << 16;

/// One shard: its table behind its lock, and where the table's buckets
/// are, for [`Conntrack::prefetch`] to read without the lock.
struct ShardCell {
    table: Mutex<Shard>,
    /// The table's [`table::Table::base`] when its lock was last released
    /// ([`ShardGuard`] keeps it current). Read only to compute a prefetch
    /// address: a stale value costs one useless prefetch, never an answer.
    base: AtomicUsize,
}

/// A locked shard; unlocking publishes where its buckets are now (an
/// insert or remove may have rebuilt the table).
struct ShardGuard<'a> {
    table: std::sync::MutexGuard<'a, Shard>,
    base: &'a AtomicUsize,
}

impl std::ops::Deref for ShardGuard<'_> {
    type Target = Shard;
    fn deref(&self) -> &Shard {
        &self.table
    }
}

impl std::ops::DerefMut for ShardGuard<'_> {
    fn deref_mut(&mut self) -> &mut Shard {
        &mut self.table
    }
}

impl Drop for ShardGuard<'_> {
    fn drop(&mut self) {
        let b = self.table.base();
        if self.base.load(Relaxed) != b {
            self.base.store(b, Relaxed);
        }
    }
}

/// The connection tracker of one datapath, shared by all poll threads.
pub struct Conntrack {
    id: u64,
    shards: Box<[ShardCell]>,
    hasher: ahash::RandomState,
    max_conns: AtomicUsize,
    n_conns: AtomicUsize,
    /// Default per-zone limit (0 = none).
    default_zone_limit: AtomicUsize,
    /// Every zone's count and limit, in 256 groups of 256 zones, a group
    /// allocated when one of its zones is first used: a new connection
    /// finds its zone with one load and no lock or reference count (a map
    /// behind a lock cost a read lock and an `Arc` per connection created
    /// or removed).
    zones: Box<[std::sync::OnceLock<Box<[ZoneCount]>>]>,
    validate: bool,
    timeouts: Timeouts,
    sweep_cursor: AtomicUsize,
    salt: AtomicU64,
    pub counters: Counters,
    /// Fragment reassembly in front of the tracker.
    pub defrag: frag::Defrag,
    /// Related connections that helpers (`alg=`) announced.
    pub expect: alg::Expectations,
    /// Timeout policies by zone (`CT_Zone:timeout_policy`); a connection
    /// keeps the policy its zone had when it was created.
    zone_timeouts: RwLock<HashMap<u16, Arc<Timeouts>>>,
    /// Whether `zone_timeouts` has any policy: a new connection reads the
    /// map (a lock) only then.
    any_zone_timeouts: AtomicBool,
    /// Called (outside every tracker lock) when a connection the kernel
    /// fast path serves changes or goes: see [`Conntrack::offload_view`].
    offload_hooks: RwLock<Vec<(u64, OffloadHook)>>,
}

/// See [`Conntrack::add_offload_hook`].
pub type OffloadHook = Arc<dyn Fn(&Arc<Conn>) + Send + Sync>;

/// What `ct()` does to every further packet of one direction of an
/// established connection that changes no state (for TCP: no SYN, FIN or
/// RST), read without changing anything: what the kernel fast path needs
/// to serve such packets without the tracker (see
/// [`Conntrack::offload_view`]).
#[derive(Clone, Debug)]
pub struct OffloadView {
    pub conn: Arc<Conn>,
    /// The packet travels in the reply direction.
    pub reply: bool,
    /// The verdict: state, zone, mark, label, original tuple.
    pub result: CtResult,
    /// The tuple `ct(nat)` rewrites the packet to, if it translates.
    pub to: Option<Tuple>,
    /// TCP: the fast path must leave SYN, FIN and RST to the tracker.
    pub tcp: bool,
    /// The connection's change count this was read at.
    pub version: u64,
}

impl Conntrack {
    pub fn new(cfg: Config) -> Conntrack {
        let n = cfg.shards.max(1).next_power_of_two();
        Conntrack {
            id: TRACKER_IDS.fetch_add(1, Relaxed),
            shards: (0..n)
                .map(|_| ShardCell { table: Mutex::new(Shard::default()), base: AtomicUsize::new(0) })
                .collect(),
            hasher: ahash::RandomState::new(),
            max_conns: AtomicUsize::new(cfg.max_conns),
            n_conns: AtomicUsize::new(0),
            default_zone_limit: AtomicUsize::new(0),
            zones: (0..256).map(|_| std::sync::OnceLock::new()).collect(),
            validate: cfg.validate_checksums,
            timeouts: cfg.timeouts,
            sweep_cursor: AtomicUsize::new(0),
            salt: AtomicU64::new(0x5eed),
            counters: Counters::default(),
            defrag: frag::Defrag::default(),
            expect: alg::Expectations::default(),
            zone_timeouts: RwLock::new(HashMap::new()),
            any_zone_timeouts: AtomicBool::new(false),
            offload_hooks: RwLock::new(Vec::new()),
        }
    }

    /// Registers `f` (once per `id`) to be called when a connection that
    /// [`Conntrack::mark_offloaded`] marked changes what
    /// [`Conntrack::offload_view`] would report (its TCP state, mark or
    /// label) or leaves the table (expired, flushed, closed, replaced). It
    /// runs on the thread that made the change, after the connection's
    /// version moved on and outside the tracker's locks, so the kernel's
    /// entries for it can be withdrawn before that thread's next packet.
    pub fn add_offload_hook(&self, id: u64, f: OffloadHook) {
        let mut h = self.offload_hooks.write().expect("ct hooks");
        if !h.iter().any(|(i, _)| *i == id) {
            h.push((id, f));
        }
    }

    /// A change to connection `c`: its version moves on, and the hooks run
    /// if the fast path serves it.
    fn changed(&self, c: &Arc<Conn>) {
        c.version.fetch_add(1, Relaxed);
        if c.offloaded.load(Relaxed) {
            for (_, f) in self.offload_hooks.read().expect("ct hooks").iter() {
                f(c);
            }
        }
    }

    /// What `ct(act)` gives every further packet with tuple `t` (as the
    /// packet carries it; `prev_state` its `ct_state` from an earlier
    /// `ct()` in the same zone) that changes no state, if the kernel fast
    /// path may serve such packets on its own: the packet belongs to an
    /// established TCP or UDP connection without a helper (or is sent by
    /// the originator of a committed UDP one that has no reply yet:
    /// `+new`, until the reply, which changes the connection); `act` commits
    /// nothing that would change it (a mark or label it already has is
    /// fine), does not force, and asks for no helper; and the connection's
    /// timeout is at least 10 s. Nothing changes; the error says why not.
    ///
    /// The caller serves TCP segments with SYN, FIN or RST in the tracker,
    /// calls [`Conntrack::mark_offloaded`] before its entry goes live,
    /// withdraws the entry when a hook reports the connection (or its
    /// version is no longer `version`), and credits what it forwarded with
    /// [`Conntrack::credit_offloaded`].
    pub fn offload_view(
        &self,
        t: &Tuple,
        act: &CtAction,
        prev_state: u8,
        now_ms: u64,
    ) -> Result<OffloadView, &'static str> {
        if act.alg.is_some() {
            return Err("ct() with a helper");
        }
        if !matches!(t.proto, 6 | 17) {
            return Err("not TCP or UDP");
        }
        let translated = prev_state & (cs::SNAT | cs::DNAT) != 0;
        let by_translation = || {
            let (c, _) = self.lookup(act.zone, &t.reverse(), now_ms)?;
            if c.nat == 0 {
                None
            } else if c.reply == t.reverse() {
                Some((c, false))
            } else if c.orig == t.reverse() {
                Some((c, true))
            } else {
                None
            }
        };
        let found = if translated {
            by_translation().or_else(|| self.lookup(act.zone, t, now_ms))
        } else {
            self.lookup(act.zone, t, now_ms)
        };
        let Some((c, reply)) = found else { return Err("no connection") };
        if act.force && reply && act.commit {
            return Err("ct(commit,force) in the reply direction");
        }
        if c.alg != 0 {
            return Err("a helper's control connection");
        }
        let version = c.version.load(Relaxed);
        let st = c.st.lock().expect("ct conn");
        // Not answered yet: every further packet the originator sends is
        // `+new` (a firewall's `ct(commit)` of it changes nothing) until
        // the first reply, which the tracker sees (its entry, if any, is
        // built only from a packet of that direction, below) and which
        // changes the connection.
        if !st.seen_reply && (reply || matches!(st.proto, Proto::Tcp(_))) {
            return Err("connection not established");
        }
        let seen_reply = st.seen_reply;
        let tcp = match st.proto {
            Proto::Tcp(tc) if tc.phase() == tcp::Phase::Established => true,
            Proto::Tcp(_) => return Err("TCP connection opening or closing"),
            Proto::Simple => false,
        };
        if self.timeout(&c, &st) < 10_000 {
            return Err("connection timeout under 10 s");
        }
        let (mut mark, mut label) = (st.mark, st.label);
        drop(st);
        if act.commit {
            if let Some((v, m)) = act.mark {
                mark = (mark & !m) | (v & m);
            }
            if let Some((v, m)) = act.label {
                label = (label & !m) | (v & m);
            }
            let st = c.st.lock().expect("ct conn");
            if (mark, label) != (st.mark, st.label) {
                return Err("ct(commit) changes the connection's mark or label");
            }
        }
        let mut state = cs::TRK | if seen_reply { cs::EST } else { cs::NEW };
        if reply {
            state |= cs::RPL;
        }
        let mut to = None;
        if act.nat.is_some() && c.nat != 0 {
            to = Some(if reply { c.orig.reverse() } else { c.reply.reverse() });
            state |= c.nat;
        }
        if !c.live(now_ms) {
            return Err("no connection");
        }
        let result = untracked_verdict(&c, state, act.zone, (mark, label));
        Ok(OffloadView { conn: c, reply, result, to, tcp, version })
    }

    /// Marks connection `c` as served by the kernel fast path: its TCP
    /// windows are no longer checked (the tracker does not see the
    /// segments the kernel forwards; Linux does the same for connections
    /// it offloads to a flowtable), and its changes call the offload hooks.
    pub fn mark_offloaded(&self, c: &Arc<Conn>) {
        let mut st = c.st.lock().expect("ct conn");
        if let Proto::Tcp(t) = &mut st.proto {
            t.liberal = true;
        }
        drop(st);
        c.offloaded.store(true, Relaxed);
    }

    /// Whether `c` is still what an [`OffloadView`] read at `version` saw.
    pub fn offload_current(&self, c: &Conn, version: u64, now_ms: u64) -> bool {
        c.version.load(Relaxed) == version && c.live(now_ms)
    }

    /// Credits `packets` (`bytes` of IP datagrams) that the kernel fast
    /// path forwarded for connection `c` in the `reply` direction: counted
    /// as the tracker counts, and the connection's expiry moved on as a
    /// packet of it moves it.
    pub fn credit_offloaded(&self, c: &Arc<Conn>, reply: bool, packets: u64, bytes: u64, now_ms: u64) {
        if !c.live(now_ms) || packets == 0 {
            return;
        }
        let mut st = c.st.lock().expect("ct conn");
        let d = reply as usize;
        st.packets[d] += packets;
        st.bytes[d] += bytes;
        c.expires.store(now_ms + self.timeout(c, &st), Relaxed);
    }

    /// The hash a tuple is stored and found under (even: bit 0 carries a
    /// slot's role, see [`table`]). It does not depend on the direction: a
    /// tuple and its reverse hash alike (ICMP: the type is left out, as a
    /// request and its reply differ there), so a connection without NAT,
    /// whose reply tuple is its original reversed, needs one slot, and a
    /// new one costs one probe of one cold bucket for both of its keys
    /// (the lookup that missed brought that bucket in). Slots are found by
    /// exact comparison with both of a connection's tuples, so what the
    /// hash leaves out only costs collisions.
    fn hash(&self, zone: u16, t: &Tuple) -> u64 {
        let (a, b) = if t.is_icmp() {
            ((t.src.min(t.dst), t.sport), (t.src.max(t.dst), 0))
        } else if (t.src, t.sport) <= (t.dst, t.dport) {
            ((t.src, t.sport), (t.dst, t.dport))
        } else {
            ((t.dst, t.dport), (t.src, t.sport))
        };
        // The small fields in one word: each value written costs the
        // hasher a multiplication (seven before, three now).
        let small = u64::from(zone)
            | u64::from(t.proto) << 16
            | u64::from(t.v6) << 24
            | u64::from(a.1) << 32
            | u64::from(b.1) << 48;
        self.hasher.hash_one((small, a.0, b.0)) & !1
    }

    /// The (one or two) hashes a connection is stored under, with each
    /// slot's role bit: the original tuple's (false), and the reply
    /// tuple's (true) if it differs. Dumps list connections by their
    /// `false` slot, so each once.
    fn keys(&self, c: &Conn) -> ([(u64, bool); 2], usize) {
        self.keys_hashed(c, self.hash(c.zone, &c.orig))
    }

    /// [`Conntrack::keys`] with the original tuple's hash `ho` known. An
    /// untranslated connection's reply tuple is its original reversed,
    /// which hashes alike.
    fn keys_hashed(&self, c: &Conn, ho: u64) -> ([(u64, bool); 2], usize) {
        let hr = if c.nat == 0 { ho } else { self.hash(c.zone, &c.reply) };
        debug_assert_eq!(hr, self.hash(c.zone, &c.reply));
        ([(ho, false), (hr, true)], if ho == hr { 1 } else { 2 })
    }

    /// Whether [`Conntrack::prefetch`] is likely to pay: the table holds
    /// at least [`PREFETCH_MIN_CONNS`] connections.
    pub fn prefetch_pays(&self) -> bool {
        self.n_conns.load(Relaxed) >= PREFETCH_MIN_CONNS
    }

    /// Locks shard `i`.
    fn shard(&self, i: usize) -> ShardGuard<'_> {
        let c = &self.shards[i];
        ShardGuard { table: c.table.lock().expect("ct shard"), base: &c.base }
    }

    /// Starts loading the bucket that a `ct()` in `zone` will probe first
    /// for `frame`, without taking a lock. The datapath calls it for each
    /// packet of a batch before it processes the batch, so that the
    /// packets' misses on a large table overlap: each lookup takes its
    /// shard's lock, an atomic operation that waits for the loads before
    /// it, so misses taken one packet at a time queue behind each other
    /// (between two VMs, one new connection per frame, that one load was
    /// 21% of a poll thread). Only a hint: a frame the tracker cannot
    /// parse is skipped, and the lookup does all the work again.
    ///
    /// Worth it only when the table is larger than the caches
    /// ([`Conntrack::prefetch_pays`]): with 10,000 connections the buckets
    /// are in cache, and the extra parse and hash per packet cost more
    /// than the prefetch saved (one-way firewall between VMs: 0.96x).
    pub fn prefetch(&self, frame: &[u8], zone: u16) {
        let Ok(p) = packet::parse(frame, false) else { return };
        let h = self.hash(zone, &p.tuple);
        if let Some(a) = Shard::bucket_addr(self.shards[self.shard_of(h)].base.load(Relaxed), h) {
            prefetch::line(a);
        }
    }

    /// The shard a hash belongs to: its top bits pick it (the shard's table
    /// uses bits 0-30, see [`table`]).
    fn shard_of(&self, h: u64) -> usize {
        (h >> 54) as usize & (self.shards.len() - 1)
    }

    /// Finds the live connection a tuple belongs to, and whether the tuple
    /// is its reply direction. An expired connection met here is removed.
    fn lookup(&self, zone: u16, t: &Tuple, now_ms: u64) -> Option<(Arc<Conn>, bool)> {
        self.lookup_hashed(zone, t, self.hash(zone, t), now_ms)
    }

    /// [`Conntrack::lookup`] with the tuple's hash already known.
    fn lookup_hashed(&self, zone: u16, t: &Tuple, h: u64, now_ms: u64) -> Option<(Arc<Conn>, bool)> {
        let (c, reply) = {
            let sh = self.shard(self.shard_of(h));
            let (c, _) = sh.find(h, |c, _| c.holds(zone, t))?;
            (Arc::clone(c), c.orig != *t)
        };
        if c.expires.load(Relaxed) <= now_ms {
            self.remove(&c, true);
            return None;
        }
        Some((c, reply))
    }

    fn zone(&self, zone: u16) -> &ZoneCount {
        let group = self.zones[zone as usize >> 8].get_or_init(|| (0..256).map(|_| ZoneCount::default()).collect());
        &group[zone as usize & 255]
    }

    /// Removes a connection's entries (only if they are still this
    /// connection's). `expired` says why, for the counters.
    fn remove(&self, c: &Arc<Conn>, expired: bool) {
        let mut removed = false;
        let (keys, n) = self.keys(c);
        for &(h, role) in &keys[..n] {
            let mut sh = self.shard(self.shard_of(h));
            if sh.remove(h, |x, r| r == role && Arc::ptr_eq(x, c)).is_some() {
                removed = true;
            }
        }
        if removed {
            c.removed.store(true, Relaxed);
            self.n_conns.fetch_sub(1, Relaxed);
            self.zone(c.zone).count.fetch_sub(1, Relaxed);
            if expired {
                self.counters.expired.fetch_add(1, Relaxed);
            }
            self.changed(c);
        }
    }

    /// Replaces the zones' timeout policies (zones left out get the
    /// defaults). New connections use them.
    pub fn set_zone_timeouts(&self, policies: HashMap<u16, Timeouts>) {
        let m: HashMap<u16, Arc<Timeouts>> = policies.into_iter().map(|(z, t)| (z, Arc::new(t))).collect();
        let mut w = self.zone_timeouts.write().expect("ct zone timeouts");
        self.any_zone_timeouts.store(!m.is_empty(), std::sync::atomic::Ordering::Release);
        *w = m;
    }

    /// The timeouts connections in `zone` get.
    pub fn zone_timeouts(&self, zone: u16) -> Timeouts {
        self.zone_timeouts.read().expect("ct zone timeouts").get(&zone).map_or(self.timeouts, |t| **t)
    }

    fn timeout(&self, c: &Conn, st: &ConnState) -> u64 {
        self.timeout_for(c.tp.as_deref(), c.orig.proto, st)
    }

    /// The timeout of a connection of IP protocol `proto` in state `st`
    /// under the zone policy `tp` (the defaults if none).
    fn timeout_for(&self, tp: Option<&Timeouts>, proto: u8, st: &ConnState) -> u64 {
        let t = tp.unwrap_or(&self.timeouts);
        match st.proto {
            Proto::Tcp(s) => match s.phase() {
                tcp::Phase::Opening => t.tcp_opening,
                tcp::Phase::Established => t.tcp_established,
                tcp::Phase::Closing => t.tcp_closing,
                tcp::Phase::FinWait => t.tcp_fin_wait,
                tcp::Phase::Closed => t.tcp_closed,
            },
            Proto::Simple => match (proto, st.seen_reply) {
                (packet::proto::UDP, false) => t.udp_first,
                (packet::proto::UDP, true) => t.udp_bidir,
                (packet::proto::ICMP | packet::proto::ICMPV6, false) => t.icmp_first,
                (packet::proto::ICMP | packet::proto::ICMPV6, true) => t.icmp_reply,
                (_, false) => t.other_first,
                (_, true) => t.other_bidir,
            },
        }
    }

    /// Runs `ct()` on one Ethernet frame, in place (NAT rewrites it).
    /// `hint` is the connection an earlier `ct()` of this packet found.
    pub fn execute(&self, frame: &mut [u8], act: &CtAction, now_ms: u64, hint: Option<&Tracked>) -> CtResult {
        self.execute_tracked(frame, act, now_ms, hint, 0)
    }

    /// As [`Conntrack::execute`], for a packet that an earlier `ct()` in
    /// the same zone already marked `prev_state` (its `ct_state` after that
    /// pass, e.g. across a recirculation). If that pass translated it
    /// (`snat`/`dnat`), the packet now carries its connection's translated
    /// tuple, so it is found by the reverse of its tuple, and it is not
    /// translated or committed a second time. This is how
    /// `ct(table=1,nat)` followed by `ct(commit,nat(...))` in the next
    /// table works on an established connection, as in Open vSwitch.
    pub fn execute_tracked(
        &self,
        frame: &mut [u8],
        act: &CtAction,
        now_ms: u64,
        hint: Option<&Tracked>,
        prev_state: u8,
    ) -> CtResult {
        // A packet the tracker already saw in this pipeline (after a
        // recirculation) had its checksums checked then; NAT since has kept
        // them valid, so they are not summed again.
        let validate = self.validate && (prev_state & cs::TRK == 0 || prev_state & cs::INV != 0);
        let p = match packet::parse(frame, validate) {
            Ok(p) => p,
            Err(e) => {
                self.counters.untrackable[untrackable_index(e)].fetch_add(1, Relaxed);
                return CtResult::invalid(act.zone);
            }
        };
        // A packet an earlier pass translated belongs to the connection that
        // translated it: an original-direction packet now reads as that
        // connection's reply tuple reversed, a reply as its original tuple
        // reversed. That connection is looked for first: the translated
        // tuple may also be another connection's key (one whose own
        // translation made its keys asymmetric).
        let translated = prev_state & (cs::SNAT | cs::DNAT) != 0;
        let by_translation = || {
            let (c, _) = self.lookup(act.zone, &p.tuple.reverse(), now_ms)?;
            if c.nat == 0 {
                None
            } else if c.reply == p.tuple.reverse() {
                Some((c, false))
            } else if c.orig == p.tuple.reverse() {
                Some((c, true))
            } else {
                None
            }
        };
        if let Some((c, reply)) = hint.and_then(|h| self.hinted(h, act.zone, &p.tuple, translated, now_ms)) {
            if !(act.force && reply && act.commit) {
                return match self.existing(frame, &p, act, c, reply, now_ms) {
                    Ok(r) => CtResult { hint_matched: true, ..r },
                    Err(r) => r,
                };
            }
        }
        // Hashed once: a new connection is stored under the same hash.
        let h = self.hash(act.zone, &p.tuple);
        let mut found = if translated {
            by_translation().or_else(|| self.lookup_hashed(act.zone, &p.tuple, h, now_ms))
        } else {
            self.lookup_hashed(act.zone, &p.tuple, h, now_ms)
        };
        if let Some((c, reply)) = &found {
            if act.force && *reply && act.commit {
                self.remove(c, false);
                found = None;
            }
        }
        if let Some((c, reply)) = found {
            return match self.existing(frame, &p, act, &c, reply, now_ms) {
                Ok(r) => CtResult { tracked: Some(Tracked { conn: c, tracker: self.id }), ..r },
                Err(r) => r,
            };
        }
        if let Some((inner, at)) = p.inner.as_deref().copied() {
            return self.related(frame, &p, act, &inner, at, now_ms);
        }
        if !p.tuple.can_start() || p.tcp.is_some_and(|s| !tcp::valid_new(s.flags)) {
            self.counters.invalid_new.fetch_add(1, Relaxed);
            return CtResult::invalid(act.zone);
        }
        // A connection a helper announced: new, and related to its parent.
        if !self.expect.is_empty() && self.expect.matches(act.zone, &p.tuple, now_ms, false) {
            if !act.commit {
                return CtResult { state: cs::TRK | cs::NEW | cs::REL, zone: act.zone, ..CtResult::default() };
            }
            let mut r = self.create(frame, &p, act, now_ms);
            if r.state & cs::INV == 0 && r.tracked.is_some() {
                self.expect.matches(act.zone, &p.tuple, now_ms, true);
                r.state |= cs::REL;
            }
            return r;
        }
        if !act.commit {
            return CtResult { state: cs::TRK | cs::NEW, zone: act.zone, ..CtResult::default() };
        }
        self.create_hashed(frame, &p, act, now_ms, h)
    }

    /// The connection of a [`Tracked`] hint and the packet's direction, if
    /// the hint may stand in for the lookup that [`Conntrack::execute_tracked`]
    /// would do first: the connection is live in this tracker and zone, and
    /// holds the key `t` or, for a packet an earlier pass `translated`, the
    /// key `t` reversed. Keys are unique, so the lookup would find the same
    /// connection.
    fn hinted<'h>(
        &self,
        h: &'h Tracked,
        zone: u16,
        t: &Tuple,
        translated: bool,
        now_ms: u64,
    ) -> Option<(&'h Arc<Conn>, bool)> {
        let c = &h.conn;
        if h.tracker != self.id || c.zone != zone || !c.live(now_ms) {
            return None;
        }
        let reply = if translated {
            if c.nat == 0 {
                return None;
            } else if *t == c.reply.reverse() {
                false
            } else if *t == c.orig.reverse() {
                true
            } else {
                return None;
            }
        } else if *t == c.orig {
            false
        } else if *t == c.reply {
            true
        } else {
            return None;
        };
        Some((c, reply))
    }

    /// An FTP control segment may announce a data connection.
    fn ftp_announce(&self, frame: &[u8], p: &Parsed, c: &Conn, reply: bool, now: u64) {
        let Some(&off) = frame.get(p.l4 + 12) else { return };
        let data = p.l4 + (off >> 4) as usize * 4;
        if let Some(k) = frame.get(data..p.end).and_then(|pl| alg::ftp_expectation(c.zone, &c.orig, reply, pl)) {
            self.expect.add(k, now);
        }
    }

    /// A packet of connection `c`: `Ok` with the verdict (without
    /// `tracked`, which the caller fills or not), or `Err` with another
    /// outcome (invalid; a reopened TCP connection, new).
    fn existing(
        &self,
        frame: &mut [u8],
        p: &Parsed,
        act: &CtAction,
        c: &Arc<Conn>,
        reply: bool,
        now: u64,
    ) -> Result<CtResult, CtResult> {
        let mut st = c.st.lock().expect("ct conn");
        let before = (st.proto, st.mark, st.label, st.seen_reply);
        if let (Proto::Tcp(t), Some(seg)) = (&mut st.proto, p.tcp) {
            match t.update(reply as usize, &seg) {
                tcp::Update::Valid => {}
                tcp::Update::Invalid => {
                    self.counters.tcp_invalid.fetch_add(1, Relaxed);
                    return Err(CtResult::invalid(act.zone));
                }
                tcp::Update::Reopen => {
                    drop(st);
                    self.remove(c, false);
                    if !act.commit {
                        return Err(CtResult { state: cs::TRK | cs::NEW, zone: act.zone, ..CtResult::default() });
                    }
                    return Err(self.create(frame, p, act, now));
                }
            }
        }
        if c.alg == alg::FTP && p.tcp.is_some() {
            self.ftp_announce(frame, p, c, reply, now);
        }
        st.seen_reply |= reply;
        let d = reply as usize;
        st.packets[d] += 1;
        st.bytes[d] += (p.end - p.l3) as u64;
        if act.commit {
            if let Some((v, m)) = act.mark {
                st.mark = (st.mark & !m) | (v & m);
            }
            if let Some((v, m)) = act.label {
                st.label = (st.label & !m) | (v & m);
            }
        }
        let mut state = cs::TRK | if st.seen_reply { cs::EST } else { cs::NEW };
        if reply {
            state |= cs::RPL;
        }
        c.expires.store(now + self.timeout(c, &st), Relaxed);
        let (mark, label) = (st.mark, st.label);
        // What an offloaded entry was built from: its TCP states (not the
        // windows, which move with every segment), mark and label.
        let states = |p: &Proto| match p {
            Proto::Tcp(t) => Some(t.states()),
            Proto::Simple => None,
        };
        let moved =
            states(&before.0) != states(&st.proto) || (before.1, before.2, before.3) != (mark, label, st.seen_reply);
        drop(st);
        if moved {
            self.changed(c);
        }
        if act.nat.is_some() && c.nat != 0 {
            let to = if reply { c.orig.reverse() } else { c.reply.reverse() };
            nat::rewrite(frame, p.l3, p.l4, p.end, &p.tuple, &to, false);
            state |= c.nat;
        }
        Ok(untracked_verdict(c, state, act.zone, (mark, label)))
    }

    /// The verdict for a packet matched to connection `c`, which also
    /// becomes the hint for the next `ct()`.
    fn verdict(&self, c: Arc<Conn>, state: u8, zone: u16, ml: (u32, u128)) -> CtResult {
        let r = untracked_verdict(&c, state, zone, ml);
        CtResult { tracked: Some(Tracked { conn: c, tracker: self.id }), ..r }
    }

    /// An ICMP error: related to the connection of the packet it quotes.
    fn related(&self, frame: &mut [u8], p: &Parsed, act: &CtAction, inner: &Tuple, at: usize, now: u64) -> CtResult {
        // The quoted packet went the other way; it may be quoted as it left
        // its sender (untranslated) or as translated.
        let mut hit = None;
        if let Some((c, quoted_reply)) = self.lookup(act.zone, inner, now) {
            // Quoted as sent: the key it was found under gives its direction.
            hit = Some((c, quoted_reply));
        } else if let Some((c, _)) = self.lookup(act.zone, &inner.reverse(), now) {
            // Quoted as translated: `inner` is the reverse of the other
            // direction's tuple.
            let quoted_reply = c.orig == inner.reverse();
            hit = Some((c, quoted_reply));
        }
        let Some((c, quoted_reply)) = hit else {
            self.counters.invalid_new.fetch_add(1, Relaxed);
            return CtResult::invalid(act.zone);
        };
        // The error travels opposite to the quoted packet.
        let reply = !quoted_reply;
        let mut state = cs::TRK | cs::REL;
        if reply {
            state |= cs::RPL;
        }
        if act.nat.is_some() && c.nat != 0 {
            let to = if quoted_reply { c.reply } else { c.orig };
            nat::rewrite_icmp_error(frame, p, at, inner, &to);
            state |= c.nat;
        }
        let st = c.st.lock().expect("ct conn");
        let (mark, label) = (st.mark, st.label);
        drop(st);
        self.verdict(c, state, act.zone, (mark, label))
    }

    fn create(&self, frame: &mut [u8], p: &Parsed, act: &CtAction, now: u64) -> CtResult {
        self.create_hashed(frame, p, act, now, self.hash(act.zone, &p.tuple))
    }

    /// [`Conntrack::create`] with the hash of the packet's tuple known.
    fn create_hashed(&self, frame: &mut [u8], p: &Parsed, act: &CtAction, now: u64, ho: u64) -> CtResult {
        let zone = self.zone(act.zone);
        let zlimit = match zone.limit.load(Relaxed) {
            0 => self.default_zone_limit.load(Relaxed),
            l => l,
        };
        if self.n_conns.load(Relaxed) >= self.max_conns.load(Relaxed) {
            self.counters.full.fetch_add(1, Relaxed);
            return CtResult { state: cs::TRK | cs::NEW, zone: act.zone, ..CtResult::default() };
        }
        if zlimit > 0 && zone.count.load(Relaxed) >= zlimit {
            self.counters.zone_full.fetch_add(1, Relaxed);
            return CtResult { state: cs::TRK | cs::NEW, zone: act.zone, ..CtResult::default() };
        }
        let orig = p.tuple;
        // The translations to try, in order (the untranslated tuple alone
        // without NAT); built one at a time, as the first usually fits.
        let (mut natc, nat_bits) = match act.nat {
            Some(Nat::Src(r)) if r.v6 == orig.v6 => {
                let salt = self.salt.fetch_add(0x9e37_79b9, Relaxed);
                (Some(nat::candidates(&orig, &r, true, salt, 4096)), cs::SNAT)
            }
            Some(Nat::Dst(r)) if r.v6 == orig.v6 => {
                let salt = self.salt.fetch_add(0x9e37_79b9, Relaxed);
                (Some(nat::candidates(&orig, &r, false, salt, 4096)), cs::DNAT)
            }
            _ => (None, 0),
        };
        let mut plain = natc.is_none().then_some(orig);
        let cands = std::iter::from_fn(|| match natc.as_mut() {
            Some(it) => it.next(),
            None => plain.take(),
        });
        let mut st = ConnState {
            proto: match p.tcp {
                Some(seg) => Proto::Tcp(tcp::TcpState::new(&seg)),
                None => Proto::Simple,
            },
            mark: 0,
            label: 0,
            seen_reply: false,
            packets: [1, 0],
            bytes: [(p.end - p.l3) as u64, 0],
        };
        if let Some((v, m)) = act.mark {
            st.mark = v & m;
        }
        if let Some((v, m)) = act.label {
            st.label = v & m;
        }
        // Known before the connection exists: no lock of its state below.
        let (mark, label) = (st.mark, st.label);
        let tp = if self.any_zone_timeouts.load(std::sync::atomic::Ordering::Acquire) {
            self.zone_timeouts.read().expect("ct zone timeouts").get(&act.zone).cloned()
        } else {
            None
        };
        let expires = now + self.timeout_for(tp.as_deref(), orig.proto, &st);
        let mut state_tpl = Some(st);
        for translated in cands {
            let reply = translated.reverse();
            let nat = if translated == orig { 0 } else { nat_bits };
            let st = state_tpl.take().expect("state");
            let conn = Arc::new(Conn {
                zone: act.zone,
                orig,
                reply,
                nat,
                alg: act.alg.unwrap_or(0),
                tp: tp.clone(),
                expires: AtomicU64::new(expires),
                removed: AtomicBool::new(false),
                st: Mutex::new(st),
                version: AtomicU64::new(0),
                offloaded: AtomicBool::new(false),
            });
            if self.insert(&conn, now, ho) {
                self.n_conns.fetch_add(1, Relaxed);
                zone.count.fetch_add(1, Relaxed);
                self.counters.created.fetch_add(1, Relaxed);
                if act.alg == Some(alg::TFTP) {
                    if let Some(k) = alg::tftp_expectation(act.zone, &orig) {
                        self.expect.add(k, now);
                    }
                }
                let mut state = cs::TRK | cs::NEW;
                if nat != 0 {
                    nat::rewrite(frame, p.l3, p.l4, p.end, &orig, &translated, false);
                    state |= nat;
                }
                return self.verdict(conn, state, act.zone, (mark, label));
            }
            // Taken: keep the state for the next candidate.
            let c = Arc::try_unwrap(conn).expect("a connection that was not inserted is not shared");
            state_tpl = Some(c.st.into_inner().expect("ct conn"));
        }
        if nat_bits != 0 {
            self.counters.nat_exhausted.fetch_add(1, Relaxed);
        } else {
            self.counters.collisions.fetch_add(1, Relaxed);
        }
        CtResult::invalid(act.zone)
    }

    /// Inserts both keys of a new connection, or neither if a live
    /// connection holds one; an expired one holding a key is removed first.
    fn insert(&self, c: &Arc<Conn>, now: u64, ho: u64) -> bool {
        // Each round removes one stale connection; four keys at most can
        // be in the way (two per key, if orig and reply were both taken).
        for _ in 0..4 {
            match self.try_insert(c, now, ho) {
                Insert::Done => return true,
                Insert::Taken => return false,
                Insert::Stale(old) => self.remove(&old, true),
            }
        }
        false
    }

    /// One attempt: the (at most two) shards are locked in index order, both
    /// keys checked, and both inserted under those locks.
    fn try_insert(&self, c: &Arc<Conn>, now: u64, ho: u64) -> Insert {
        let (to, tr) = (&c.orig, &c.reply);
        let ([_, (hr, _)], n) = self.keys_hashed(c, ho);
        let (so, sr) = (self.shard_of(ho), self.shard_of(hr));
        let holder = |sh: &Shard, h: u64, t: &Tuple| {
            let (x, _) = sh.find(h, |x, _| x.holds(c.zone, t))?;
            Some(if x.expires.load(Relaxed) <= now { Insert::Stale(Arc::clone(x)) } else { Insert::Taken })
        };
        if so == sr {
            let mut m = self.shard(so);
            if let Some(r) = holder(&m, ho, to).or_else(|| if to != tr { holder(&m, hr, tr) } else { None }) {
                return r;
            }
            m.insert(ho, false, Arc::clone(c));
            if n == 2 {
                m.insert(hr, true, Arc::clone(c));
            }
            return Insert::Done;
        }
        let mut lo = self.shard(so.min(sr));
        let mut hi = self.shard(so.max(sr));
        let (mo, mr) = if so < sr { (&mut *lo, &mut *hi) } else { (&mut *hi, &mut *lo) };
        if let Some(r) = holder(mo, ho, to).or_else(|| holder(mr, hr, tr)) {
            return r;
        }
        mo.insert(ho, false, Arc::clone(c));
        mr.insert(hr, true, Arc::clone(c));
        Insert::Done
    }

    /// Removes expired connections from up to `shards` shards, starting
    /// where the previous call stopped. Returns how many were removed.
    pub fn sweep(&self, now_ms: u64, shards: usize) -> usize {
        if self.defrag.n_frags() > 0 {
            self.defrag.sweep(now_ms);
        }
        if !self.expect.is_empty() {
            self.expect.sweep(now_ms);
        }
        let mut dead = Vec::new();
        for _ in 0..shards.min(self.shards.len()) {
            let i = self.sweep_cursor.fetch_add(1, Relaxed) & (self.shards.len() - 1);
            let sh = self.shard(i);
            dead.extend(sh.iter().filter(|(c, _)| c.expires.load(Relaxed) <= now_ms).map(|(c, _)| Arc::clone(c)));
        }
        dead.sort_by_key(|c| Arc::as_ptr(c) as usize);
        dead.dedup_by(|a, b| Arc::ptr_eq(a, b));
        let n = dead.len();
        for c in &dead {
            self.remove(c, true);
        }
        n
    }

    /// Every live connection (each once), for dumps.
    pub fn connections(&self, zone: Option<u16>) -> Vec<ConnInfo> {
        let mut out = Vec::new();
        for i in 0..self.shards.len() {
            let sh = self.shard(i);
            for (c, reply) in sh.iter() {
                if !reply && zone.is_none_or(|z| z == c.zone) {
                    out.push(c.info());
                }
            }
        }
        out.sort_by_key(|a| (a.zone, a.orig));
        out
    }

    /// Removes the connections `pred` selects; returns how many.
    pub fn flush(&self, pred: impl Fn(&ConnInfo) -> bool) -> usize {
        let mut victims = Vec::new();
        for i in 0..self.shards.len() {
            let sh = self.shard(i);
            for (c, reply) in sh.iter() {
                if !reply && pred(&c.info()) {
                    victims.push(Arc::clone(c));
                }
            }
        }
        for c in &victims {
            self.remove(c, false);
        }
        victims.len()
    }

    pub fn n_conns(&self) -> usize {
        self.n_conns.load(Relaxed)
    }
    pub fn max_conns(&self) -> usize {
        self.max_conns.load(Relaxed)
    }
    pub fn set_max_conns(&self, n: usize) {
        self.max_conns.store(n, Relaxed);
    }

    /// Sets a zone's limit (`None` = the default zone limit, 0 = unlimited).
    pub fn set_zone_limit(&self, zone: Option<u16>, limit: usize) {
        match zone {
            None => self.default_zone_limit.store(limit, Relaxed),
            Some(z) => self.zone(z).limit.store(limit, Relaxed),
        }
    }

    /// The default limit and every zone with a limit or connections.
    pub fn zone_limits(&self) -> (usize, Vec<ZoneLimit>) {
        let def = self.default_zone_limit.load(Relaxed);
        let v: Vec<ZoneLimit> = self
            .zones
            .iter()
            .enumerate()
            .filter_map(|(g, group)| Some((g, group.get()?)))
            .flat_map(|(g, group)| {
                group.iter().enumerate().map(move |(i, z)| {
                    let l = z.limit.load(Relaxed);
                    ZoneLimit {
                        zone: (g << 8 | i) as u16,
                        limit: if l == 0 { def } else { l },
                        count: z.count.load(Relaxed),
                    }
                })
            })
            .filter(|z| z.limit != 0 || z.count != 0)
            .collect();
        (def, v)
    }

    /// Packets that could not be tracked, by reason name.
    pub fn untrackable_counts(&self) -> Vec<(&'static str, u64)> {
        UNTRACKABLE.iter().map(|u| (u.name(), self.counters.untrackable[untrackable_index(*u)].load(Relaxed))).collect()
    }
}

/// A snapshot of one connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnInfo {
    pub zone: u16,
    pub orig: Tuple,
    pub reply: Tuple,
    pub mark: u32,
    pub label: u128,
    pub nat: u8,
    /// TCP states of the originator and the replier.
    pub tcp: Option<(u8, u8)>,
    pub seen_reply: bool,
    pub packets: [u64; 2],
    pub bytes: [u64; 2],
    pub expires_ms: u64,
    /// The helper port of a control connection (`alg=`), 0 if none.
    pub alg: u16,
}

impl Conn {
    fn info(&self) -> ConnInfo {
        let st = self.st.lock().expect("ct conn");
        ConnInfo {
            zone: self.zone,
            orig: self.orig,
            reply: self.reply,
            mark: st.mark,
            label: st.label,
            nat: self.nat,
            tcp: match st.proto {
                Proto::Tcp(t) => Some(t.states()),
                Proto::Simple => None,
            },
            seen_reply: st.seen_reply,
            packets: st.packets,
            bytes: st.bytes,
            expires_ms: self.expires.load(Relaxed),
            alg: self.alg,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::build::Frame;

    fn slots(t: &Conntrack) -> usize {
        (0..t.shards.len()).map(|i| t.shard(i).iter().count()).sum()
    }

    fn udp(src: u32, dst: u32, sp: u16, dp: u16) -> Vec<u8> {
        Frame::new([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]).ipv4(src, dst).udp(sp, dp).payload(b"x").build()
    }

    /// Every connection costs this much memory (plus a table slot and the
    /// allocator's header): with the tuples and state packed to 8-byte
    /// alignment it is 216 bytes, 24 less than with their natural
    /// alignment, at a million connections a second of new memory.
    #[test]
    fn a_connection_is_216_bytes_aligned_to_8() {
        assert_eq!((std::mem::size_of::<Conn>(), std::mem::align_of::<Conn>()), (216, 8));
        assert_eq!(std::mem::size_of::<Tuple>(), 40);
    }

    /// What the direction-independent hash promises: one slot for a
    /// connection whose reply tuple is its original reversed (ICMP echo
    /// too, whose reply type differs), two for a translated one, each
    /// found from both directions, and nothing left after a flush.
    /// What the lock-free prefetch reads: every shard's published base is
    /// its table's as of its last unlock, through growth and through the
    /// shrinking that removals cause; and prefetching changes no verdict.
    #[test]
    fn shards_publish_where_their_buckets_are() {
        let t = Conntrack::new(Config { shards: 4, ..Config::default() });
        let commit = CtAction { commit: true, ..CtAction::default() };
        let published = |t: &Conntrack| {
            (0..t.shards.len()).all(|i| {
                let table = t.shards[i].table.lock().unwrap().base();
                t.shards[i].base.load(Relaxed) == table
            })
        };
        assert!(!t.prefetch_pays());
        for port in 0..3000u16 {
            let mut f = udp(0x0a00_0001, 0x0a00_0002, 1024 + port, 53);
            t.prefetch(&f, 0);
            assert_eq!(t.execute(&mut f, &commit, 0, None).state, cs::TRK | cs::NEW);
        }
        assert!(published(&t));
        assert!((0..t.shards.len()).all(|i| t.shards[i].base.load(Relaxed) != 0));
        assert_eq!(t.flush(|_| true), 3000);
        assert!(published(&t));
        // Garbage and non-IP frames are skipped.
        t.prefetch(&[0u8; 10], 0);
        t.prefetch(&[], 7);
    }

    #[test]
    fn a_connection_without_nat_takes_one_slot_and_a_translated_one_two() {
        let t = Conntrack::new(Config::default());
        let (a, b, x) = (0x0a00_0001u32, 0x0a00_0002u32, 0xc0a8_0064u32);
        let commit = CtAction { commit: true, ..CtAction::default() };
        let look = CtAction::default();
        assert_eq!(t.execute(&mut udp(a, b, 4000, 53), &commit, 0, None).state, cs::TRK | cs::NEW);
        assert_eq!(slots(&t), 1);
        assert_eq!(t.execute(&mut udp(b, a, 53, 4000), &look, 1, None).state, cs::TRK | cs::EST | cs::RPL);
        let echo = |src, dst, ty: u8| {
            let mut f = Frame::new([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]).ipv4(src, dst).icmp_echo(7, 1).build();
            f[34] = ty;
            f[36..38].fill(0);
            let c = wire::checksum::checksum(&f[34..]);
            f[36..38].copy_from_slice(&c.to_be_bytes());
            f
        };
        assert_eq!(t.execute(&mut echo(a, b, 8), &commit, 1, None).state, cs::TRK | cs::NEW);
        assert_eq!(slots(&t), 2);
        assert_eq!(t.execute(&mut echo(b, a, 0), &look, 2, None).state, cs::TRK | cs::EST | cs::RPL);
        let range = NatRange {
            addr_min: x as u128,
            addr_max: x as u128,
            port_min: 0,
            port_max: 0,
            v6: false,
            flags: NatFlags::default(),
        };
        let snat = CtAction { commit: true, nat: Some(Nat::Src(range)), ..CtAction::default() };
        let mut f = udp(a, b, 5000, 53);
        assert_eq!(t.execute(&mut f, &snat, 2, None).state, cs::TRK | cs::NEW | cs::SNAT);
        assert_eq!(slots(&t), 4, "a translated connection is stored under both tuples");
        let nat = CtAction { nat: Some(Nat::Existing), ..CtAction::default() };
        let sport = u16::from_be_bytes([f[34], f[35]]);
        let mut reply = udp(b, x, 53, sport);
        assert_eq!(t.execute(&mut reply, &nat, 3, None).state, cs::TRK | cs::EST | cs::RPL | cs::SNAT);
        assert_eq!(&reply[30..34], &a.to_be_bytes(), "the reply is translated back to the original source");
        assert_eq!(t.connections(None).len(), 3);
        assert_eq!(t.flush(|_| true), 3);
        assert_eq!((slots(&t), t.n_conns()), (0, 0));
    }
}
