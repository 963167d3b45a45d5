//! The running switch: one bridge, its ports, its poll threads.
//!
//! Threads and what they own:
//! * poll (PMD) threads: each owns a [`dpif::Pmd`] (its EMC and megaflow
//!   cache) and polls the receive queues of the ports assigned to it. On a
//!   cache miss it translates through the bridge under a *read* lock.
//! * the control thread (the caller of [`Switch::serve`]): accepts CLI
//!   requests, adds and removes ports and rules under the *write* lock, and
//!   runs housekeeping (MAC aging, rule timeouts).
//!
//! Shared state lives in [`Shared`]; every field says who writes it.

use crate::config::{PollMode, PortSpec, PortType};
use crate::oflock::OfprotoLock;
use crate::ports;
use anyhow::{bail, Context, Result};
use dpif::{DpAction, Pmd, PmdConfig, Sink, Translation, Upcall};
use flow::FlowKey;
use netdev::{Netdev, Packet, PortInfo, PortStats, BATCH};
use ofproto::{Ofproto, PortConfig};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A port of the running switch.
pub struct Port {
    pub ofport: u32,
    pub spec: PortSpec,
    pub info: PortInfo,
    /// Which poll thread receives from this port.
    pub pmd: usize,
    /// The device. Locked by the owning PMD for rx, by any PMD for tx
    /// (once per batch), by the control thread for stats.
    pub dev: Mutex<Box<dyn Netdev>>,
    /// Packets the datapath dropped because this port could not be reached
    /// (removed while in flight).
    pub tx_no_port: AtomicU64,
    /// The kernel device's interface index when the port was opened;
    /// `None` for ports that are not a kernel device ([`Netdev::own_link`]).
    pub ifindex: Option<u32>,
    /// The device was seen gone (deleted or moved to another namespace).
    pub gone: AtomicBool,
    /// The device fills checksums left to offload ([`Netdev::tx_csum_offload`]).
    pub csum_offload: bool,
    /// Batches sent to this port by threads other than its poll thread
    /// (another poll thread of the bridge, a peer bridge's thread running
    /// tunnel traffic to completion, the control thread). Its poll thread
    /// does not sleep on a port that gets them (see `wait_for_packets`).
    pub foreign_tx: AtomicU64,
}

/// A port's link as OpenFlow port status, `xvs show` and the database
/// report it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortLink {
    /// The device the port was opened on is still there.
    pub present: bool,
    /// `None` when the kernel did not say (a failed read is not "down").
    pub carrier: Option<bool>,
    pub mac: Option<[u8; 6]>,
    pub speed_mbps: u64,
    /// BFD says the port is not live ([`netdev::Link::bfd_down`]).
    pub bfd_down: bool,
}

impl Port {
    /// A port on `dev`, remembering the kernel device's ifindex (see
    /// [`Port::link`]).
    fn new(ofport: u32, spec: PortSpec, pmd: usize, dev: Box<dyn Netdev>) -> Port {
        let ifindex = if dev.own_link().is_some() { None } else { crate::sysfs::read_ifindex(&spec.name) };
        Port {
            ofport,
            spec,
            info: dev.info(),
            pmd,
            csum_offload: dev.tx_csum_offload(),
            dev: Mutex::new(dev),
            tx_no_port: AtomicU64::new(0),
            ifindex,
            gone: AtomicBool::new(false),
            foreign_tx: AtomicU64::new(0),
        }
    }

    /// The port's link: from the port itself for patch, dummy, tunnel
    /// and vhost-user ports, from the kernel (by name, checked against the
    /// interface index the port was opened on) for the others.
    pub fn link(&self) -> PortLink {
        let Some(ifx) = self.ifindex else {
            let l = self.dev.lock().expect("port lock").own_link().unwrap_or_default();
            return PortLink {
                present: true,
                carrier: Some(l.carrier),
                mac: Some(l.mac),
                speed_mbps: l.speed_mbps,
                bfd_down: l.bfd_down,
            };
        };
        let name = &self.spec.name;
        if crate::sysfs::read_ifindex(name) != Some(ifx) {
            return PortLink { present: false, carrier: Some(false), mac: None, speed_mbps: 0, bfd_down: false };
        }
        PortLink {
            present: true,
            carrier: crate::sysfs::read_carrier(name),
            mac: crate::sysfs::read_mac(name),
            speed_mbps: crate::sysfs::read_speed(name),
            bfd_down: false,
        }
    }
}

/// Counters a PMD publishes for the CLI (written by its PMD only).
#[derive(Clone, Debug, Default)]
pub struct PmdReport {
    pub id: usize,
    pub stats: dpif::PmdStats,
    /// Time spent in iterations that moved packets, and in idle ones.
    pub busy_ns: u64,
    pub idle_ns: u64,
    pub iterations: u64,
    /// Iterations that moved packets (packets / busy_iterations is the
    /// average receive batch).
    pub busy_iterations: u64,
    pub rxqs: Vec<(String, usize)>,
    pub megaflows: Vec<dpif::MegaflowInfo>,
    pub n_megaflows: usize,
    /// Keys of recent packets (a sample: see `dpif::Pmd::recent_keys`),
    /// when each was taken, and when the report was published (ms, the
    /// bridge's clock, `Shared::now_ms`).
    pub samples: Vec<flow::FlowKey>,
    pub sample_ms: Vec<u64>,
    pub published_ms: u64,
    /// Packets sent to a controller that is not there (dropped).
    pub userspace_dropped: u64,
    /// The slow-path datapath, not a poll thread (OVS's "main thread").
    pub main_thread: bool,
    /// Megaflow subtables (masks) in this thread's classifier.
    pub n_masks: usize,
    /// Idle iterations that slept waiting for packets (adaptive polling),
    /// and the time slept.
    pub sleep_iterations: u64,
    pub sleep_ns: u64,
    /// Packets this thread handed to ports, and in how many batches.
    pub tx_packets: u64,
    pub tx_batches: u64,
}

pub struct Shared {
    /// The kernel fast path's manager, when offload is on
    /// ([`Switch::enable_offload`]).
    pub offload: Mutex<Option<Arc<crate::offload::Offloader>>>,
    /// AF_XDP ports get their receive work (NAPI) in kernel threads of
    /// their own ([`Switch::set_napi_threads`]), and the ports this switch
    /// turned that on for (turned off again when they go).
    napi_threads: AtomicBool,
    napi_set: Mutex<Vec<String>>,
    pub bridge: String,
    /// The OpenFlow bridge. Written by the control thread; read by PMDs on
    /// cache misses, never waiting for a writer (see [`OfprotoLock`]).
    pub ofproto: OfprotoLock,
    /// Copy of the bridge's generation counter, readable without the lock.
    pub generation: Arc<AtomicU64>,
    /// Ports by OpenFlow number. Written by the control thread.
    pub ports: RwLock<BTreeMap<u32, Arc<Port>>>,
    /// Bumped (Release) after `ports` changes; PMDs reload (Acquire).
    pub ports_gen: AtomicU64,
    pub reports: Vec<Mutex<PmdReport>>,
    /// Set by the control thread when a CLI wants megaflow dumps.
    pub want_dump: AtomicBool,
    pub stop: AtomicBool,
    pub start: Instant,
    pub poll_mode: PollMode,
    /// One UMEM slot per PMD, shared by that PMD's AF_XDP ports and by the
    /// same PMD of the process's other bridges.
    pub umems: Vec<ports::UmemSlot>,
    /// Where copies of sent frames go, if configured (any PMD sends).
    pub mirror: Option<Mutex<Box<dyn Netdev>>>,
    /// Packets for the controller (packet-in), from any PMD; never blocks
    /// a PMD: when full, the packet is counted as dropped.
    pub packet_in_tx: std::sync::mpsc::SyncSender<PacketInEvent>,
    /// The receiving end, taken by the OpenFlow connection manager.
    pub packet_in_rx: Mutex<Option<std::sync::mpsc::Receiver<PacketInEvent>>>,
    /// Bumped by the control plane to ask every PMD to push its megaflow
    /// counters to the rules now; each PMD echoes the value it served.
    pub stats_req: AtomicU64,
    pub stats_ack: Vec<AtomicU64>,
    /// Executes packet-outs (owned by whichever control thread holds it).
    pub slow_pmd: Mutex<Pmd>,
    pub patches: Arc<ports::PatchRegistry>,
}

/// A packet a datapath `userspace` action hands to the controller.
#[derive(Clone, Debug)]
pub struct PacketInEvent {
    pub in_port: u32,
    pub reason: dpif::UserspaceReason,
    pub max_len: u16,
    pub table_id: u8,
    pub cookie: u64,
    pub data: Vec<u8>,
    /// The packet's length before truncation to `max_len`.
    pub full_len: usize,
    /// From `controller(...)` with userdata, id or reason (NXAST_CONTROLLER/2).
    pub extra: Option<std::sync::Arc<dpif::UserspaceExtra>>,
}

impl Shared {
    /// Where this bridge's datapath output goes: `ports` (the caller's
    /// snapshot of the port map), with the live map for ports added since.
    /// `pmd`: the poll thread of this bridge that sends, if one does.
    fn sink<'a>(&'a self, ports: &'a BTreeMap<u32, Arc<Port>>, pmd: Option<usize>) -> PortSink<'a> {
        PortSink {
            pmd,
            ports,
            live: &self.ports,
            sent: Vec::new(),
            mirror: self.mirror.as_ref(),
            userspace_dropped: 0,
            packet_in: &self.packet_in_tx,
            tx_packets: 0,
            tx_batches: 0,
        }
    }

    pub fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// Asks every PMD to credit its megaflows' packets to the OpenFlow
    /// rules, and waits (at most 200 ms) until they have, so rule counters
    /// include everything forwarded so far.
    pub fn sync_stats(&self) {
        // The slow-path datapath too: it runs packet-outs, and this
        // bridge's tunnel traffic when another bridge's thread drained it.
        self.slow_pmd.lock().expect("slow pmd").push_stats();
        let want = self.stats_req.fetch_add(1, Ordering::AcqRel) + 1;
        let deadline = Instant::now() + Duration::from_millis(200);
        while Instant::now() < deadline {
            if self.stats_ack.iter().all(|a| a.load(Ordering::Acquire) >= want) {
                return;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Sends `data` through `actions` as if it had arrived on `in_port`
    /// (an OpenFlow packet-out). Port numbers are OpenFlow's.
    pub fn packet_out(&self, in_port: u32, actions: &[ofproto::Action], data: &[u8]) {
        let (key, _, _) = flow::extract(data, in_port);
        self.run_actions(key, actions, data);
    }

    /// Continues a pipeline paused by `controller(pause)` (NXT_RESUME):
    /// the packet as the controller returned it, with the pipeline metadata
    /// it returned (registers, `metadata`, in_port, tunnel and conntrack
    /// fields), runs the actions the pause froze, table by table.
    pub fn resume(&self, metadata: &flow::Match, cont: &ofproto::Continuation, data: &[u8]) {
        let (mut key, _, _) = flow::extract(data, metadata.key.in_port());
        // Only the metadata stage comes from the controller; the headers
        // are the packet's own.
        for w in 0..flow::key::STAGE_L2 {
            key.w[w] = (key.w[w] & !metadata.mask.w[w]) | (metadata.key.w[w] & metadata.mask.w[w]);
        }
        let t = self.ofproto.read().expect("ofproto lock").translate_continuation(&key, cont);
        self.run_translation(key, t, data);
    }

    /// Runs OpenFlow `actions` on `data`, whose full key (with its pipeline
    /// metadata) is `key`, in the slow-path datapath: packet-outs and
    /// resumes. The rules the actions resubmit through count the packet.
    fn run_actions(&self, key: FlowKey, actions: &[ofproto::Action], data: &[u8]) {
        let t = self.ofproto.read().expect("ofproto lock").translate_actions(&key, actions);
        self.run_translation(key, t, data);
    }

    /// Runs a slow-path translation on `data` (see `run_actions`).
    fn run_translation(&self, key: FlowKey, t: dpif::Translation, data: &[u8]) {
        let ports = self.ports.read().expect("ports lock").clone();
        let mut sink = self.sink(&ports, None);
        let mut pkt = Packet::from_slice(data);
        pkt.in_port = key.in_port();
        for c in t.counters.iter() {
            c.0.credit(1, data.len() as u64, self.now_ms());
        }
        let tnl = flow::key::TNL_WORDS.map(|w| key.w[w]);
        if tnl != [0; flow::key::N_TNL] {
            pkt.set_tnl(tnl);
        }
        // No poll loop replays this one's parked packets: it waits instead.
        let upcall = BlockingUpcall(&self.ofproto);
        let now = self.now_ms();
        self.slow_pmd.lock().expect("slow pmd").execute_with_key(pkt, key, &t.actions, &upcall, now, &mut sink);
    }

    /// Live counters of every port.
    pub fn port_stats(&self) -> Vec<(Arc<Port>, PortStats)> {
        let ports: Vec<Arc<Port>> = self.ports.read().expect("ports lock").values().cloned().collect();
        ports
            .into_iter()
            .map(|p| {
                let s = p.dev.lock().expect("port lock").stats();
                (p, s)
            })
            .collect()
    }
}

pub struct SwitchOptions {
    pub bridge: String,
    pub n_pmd: usize,
    /// CPU for each poll thread (empty: let the scheduler place them).
    pub pmd_cpus: Vec<usize>,
    /// Create the bridge's local port: a tap device named after the bridge,
    /// OpenFlow port LOCAL, so the host can address the bridge.
    pub local_port: bool,
    /// A tap device that receives a copy of every frame the switch sends,
    /// for tcpdump (AF_XDP ports hide redirected frames from it).
    pub mirror: Option<String>,
    pub poll_mode: PollMode,
    pub pmd: PmdConfig,
    /// Where patch ports find their peers (shared by the process's bridges).
    pub patches: Arc<ports::PatchRegistry>,
}

pub struct Switch {
    pub shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

/// Poll threads are named this and their number (`top -H`, `perf`, and
/// how [`keep_others_off`] tells them from the others).
const PMD_THREAD: &str = "pmd";

/// The CPUs the process could run on before [`keep_others_off`] first
/// narrowed any of its threads.
static ALL_CPUS: std::sync::OnceLock<Vec<usize>> = std::sync::OnceLock::new();

/// Poll threads of this process pinned to each CPU (CPUs 0-1023; the
/// bridges' `pmd-cpu-mask`s may name the same core).
static CORE_POLLERS: [AtomicU32; 1024] = [const { AtomicU32::new(0) }; 1024];

/// A poll thread's claim on its pinned CPU, released when the thread ends.
struct CoreClaim(Option<usize>);

impl CoreClaim {
    fn pin(cpu: Option<usize>) -> CoreClaim {
        let c = cpu.filter(|&c| c < CORE_POLLERS.len());
        if let Some(c) = c {
            CORE_POLLERS[c].fetch_add(1, Ordering::Relaxed);
        }
        CoreClaim(c)
    }

    /// Another poll thread of the process is pinned to this core too.
    /// Each bridge has poll threads of its own (OVS polls every bridge's
    /// ports from one thread per core), so two bridges pinned to one core
    /// and both spinning (`pmd-maxsleep=0`) would take half of it each,
    /// whichever has the traffic. Such a thread sleeps when idle, as
    /// adaptive polling does, and spins while its queues bring packets.
    fn shared(&self) -> bool {
        self.0.is_some_and(|c| CORE_POLLERS[c].load(Ordering::Relaxed) > 1)
    }
}

impl Drop for CoreClaim {
    fn drop(&mut self) {
        if let Some(c) = self.0 {
            CORE_POLLERS[c].fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Keeps every thread of the process except the poll threads off the
/// CPUs the poll threads are pinned to, so `pmd-cpu-mask` dedicates those
/// cores as OVS users expect. Without this the scheduler puts the control
/// thread (OVSDB updates, statistics, OpenFlow) on a poll thread's core
/// whenever it wakes there, and the poll thread loses the core for the
/// control thread's time slice, up to a few milliseconds, while its
/// AF_XDP queues fill and overflow. Threads started later inherit their
/// creator's CPUs. If the poll threads hold every CPU, or none is pinned
/// any more, the other threads get back every CPU the process started with.
fn keep_others_off(pmd_cpus: &[usize]) {
    if pmd_cpus.is_empty() && ALL_CPUS.get().is_none() {
        return; // never narrowed: nothing to do, nor to undo
    }
    let all =
        ALL_CPUS.get_or_init(|| netdev_linux::sys::thread_affinity(std::process::id() as i32).unwrap_or_default());
    if all.is_empty() {
        return;
    }
    let mut rest: Vec<usize> = all.iter().copied().filter(|c| !pmd_cpus.contains(c)).collect();
    if rest.is_empty() {
        rest = all.clone();
    }
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return };
    for t in tasks.flatten() {
        let Some(tid) = t.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if comm.starts_with(PMD_THREAD) {
            continue;
        }
        if let Err(e) = netdev_linux::sys::set_thread_affinity(tid, &rest) {
            eprintln!("xvs: thread {tid} ({}): cannot keep it off the poll threads' CPUs: {e}", comm.trim());
        }
    }
}

impl Switch {
    pub fn start(opts: SwitchOptions) -> Result<Switch> {
        crate::runfiles::check_name("bridge", &opts.bridge)?;
        if opts.n_pmd == 0 || opts.n_pmd > 64 {
            bail!("pmd threads: {} is not in 1-64", opts.n_pmd);
        }
        if !opts.pmd_cpus.is_empty() && opts.pmd_cpus.len() != opts.n_pmd {
            bail!("pmd-cpus: {} CPUs given for {} poll threads", opts.pmd_cpus.len(), opts.n_pmd);
        }
        let of = Ofproto::new(&opts.bridge);
        // No controller: the bridge forwards with NORMAL (fail-mode standalone).
        let mut of = of;
        let normal = ofproto::parse_flow("priority=0,actions=NORMAL", ofproto::Need::Actions).expect("static flow");
        of.flow_mod(ofproto::FlowModCmd::Add, &normal).expect("static flow");
        let generation = of.generation_handle();
        let (packet_in_tx, packet_in_rx) = std::sync::mpsc::sync_channel(1024);
        let shared = Arc::new(Shared {
            offload: Mutex::new(None),
            napi_threads: AtomicBool::new(false),
            napi_set: Mutex::new(Vec::new()),
            packet_in_tx,
            packet_in_rx: Mutex::new(Some(packet_in_rx)),
            stats_req: AtomicU64::new(0),
            stats_ack: (0..opts.n_pmd).map(|_| AtomicU64::new(0)).collect(),
            slow_pmd: Mutex::new(Pmd::new(opts.pmd.clone())),
            patches: Arc::clone(&opts.patches),
            bridge: opts.bridge.clone(),
            ofproto: OfprotoLock::new(of, opts.n_pmd),
            generation,
            ports: RwLock::new(BTreeMap::new()),
            ports_gen: AtomicU64::new(1),
            reports: (0..opts.n_pmd).map(|i| Mutex::new(PmdReport { id: i, ..Default::default() })).collect(),
            want_dump: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            start: Instant::now(),
            poll_mode: opts.poll_mode,
            umems: (0..opts.n_pmd).map(|i| opts.patches.umem_slot(i)).collect(),
            mirror: match &opts.mirror {
                Some(name) => Some(Mutex::new(Box::new(
                    netdev_linux::TapPort::open(name).map_err(|e| anyhow::anyhow!("mirror tap {name}: {e}"))?,
                ) as Box<dyn Netdev>)),
                None => None,
            },
        });
        let mut threads = Vec::new();
        for id in 0..opts.n_pmd {
            let sh = Arc::clone(&shared);
            let cfg = opts.pmd.clone();
            let cpu = opts.pmd_cpus.get(id).copied();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("{PMD_THREAD}{id}"))
                    // Translation recurses through resubmits (up to
                    // ofproto's nesting bound): room for it, reserved only.
                    .stack_size(16 << 20)
                    .spawn(move || {
                        let mut pinned = None;
                        if let Some(c) = cpu {
                            match netdev_linux::sys::pin_current_thread(c) {
                                Ok(()) => pinned = Some(c),
                                Err(e) => eprintln!("xvs: pmd{id}: cannot pin to CPU {c}: {e}"),
                            }
                        }
                        pmd_main(sh, id, cfg, CoreClaim::pin(pinned))
                    })
                    .expect("spawn pmd thread"),
            );
        }
        keep_others_off(&opts.pmd_cpus);
        opts.patches.tnl.add_switch(&shared);
        let sw = Switch { shared, threads };
        if opts.local_port {
            let mut spec = PortSpec::new(&opts.bridge);
            spec.kind = crate::config::PortType::Internal;
            spec.ofport = Some(ofproto::actions::ofpp::LOCAL);
            sw.add_port(spec)?;
        }
        Ok(sw)
    }

    /// Adds a port: opens the device, gives it an OpenFlow number, and
    /// hands it to the least loaded poll thread.
    pub fn add_port(&self, spec: PortSpec) -> Result<u32> {
        // Refused before the device is touched (opening it again would
        // only say "Device or resource busy").
        if self.shared.ports.read().expect("ports lock").values().any(|p| p.spec.name == spec.name) {
            bail!("port {}: already a port of bridge {}", spec.name, self.shared.bridge);
        }
        let pmd = self.pick_pmd();
        let mut dev = ports::open(&spec, &self.shared.bridge, &self.shared.umems[pmd], &self.shared.patches)?;
        let off = self.shared.offload.lock().expect("offload").clone();
        let fast = off.as_ref().and_then(|_| take_fast_path(&mut *dev));
        let name = spec.name.clone();
        let afxdp = spec.kind == PortType::Afxdp;
        let n = self.attach(spec, dev, pmd)?;
        if afxdp && self.shared.napi_threads.load(Ordering::Acquire) {
            self.napi_thread(&name, true);
        }
        if let (Some(o), Some(fp)) = (off, fast) {
            if let Ok(ifx) = bpf::ifindex(&name) {
                o.add_port(n, ifx, fp);
            }
        }
        Ok(n)
    }

    /// Gives the AF_XDP ports added from now on kernel threads of their
    /// own for their receive work (`/sys/class/net/DEV/threaded`), instead
    /// of the softirq of whichever core sent the frame. With the XDP fast
    /// path forwarding hot flows and the poll threads asleep (adaptive
    /// polling), that work (the XDP program and the redirect) then runs on
    /// an idle core rather than the sender's. With poll threads that spin
    /// on the same cores, it competes with them: off by default.
    pub fn set_napi_threads(&self, on: bool) {
        self.shared.napi_threads.store(on, Ordering::Release);
    }

    /// Gives every port this switch turned NAPI threads on for back to
    /// softirq. Before the devices are released: once the XDP program is
    /// gone a veth may have no NAPI left, and the kernel then refuses the
    /// change (EOPNOTSUPP).
    fn napi_threads_off(&self) {
        let set = std::mem::take(&mut *self.shared.napi_set.lock().expect("napi set"));
        for dev in set {
            if let Err(e) = std::fs::write(format!("/sys/class/net/{dev}/threaded"), "0") {
                eprintln!("xvs: port {dev}: cannot turn its NAPI thread off: {e}");
            }
        }
    }

    /// Writes `dev`'s `threaded` setting (its NAPI exists once the XDP
    /// program is attached), and remembers the ports it turned on.
    fn napi_thread(&self, dev: &str, on: bool) {
        let path = format!("/sys/class/net/{dev}/threaded");
        match std::fs::write(&path, if on { "1" } else { "0" }) {
            Ok(()) if on => self.shared.napi_set.lock().expect("napi set").push(dev.to_string()),
            Ok(()) => {}
            Err(e) => eprintln!("xvs: port {dev}: cannot set {path} to {}: {e}", on as u8),
        }
    }

    /// Turns the kernel fast path on or off at run time (off removes every
    /// entry; on again resumes with the same ports).
    pub fn set_offload(&self, on: bool, threshold_pps: u64) -> Result<()> {
        let off = self.shared.offload.lock().expect("offload").clone();
        match off {
            Some(o) => o.configure(on, threshold_pps, self.shared.now_ms()),
            None if on => self.enable_offload(threshold_pps)?,
            None => {}
        }
        Ok(())
    }

    /// Turns the kernel fast path on: flows above `threshold_pps` whose
    /// actions the XDP program can do are offloaded (see
    /// [`crate::offload::Offloader`] for how they stay sound).
    pub fn enable_offload(&self, threshold_pps: u64) -> Result<()> {
        let sh = &self.shared;
        if sh.offload.lock().expect("offload").is_some() {
            return Ok(());
        }
        let off = Arc::new(crate::offload::Offloader::new(threshold_pps));
        {
            let mut of = sh.ofproto.write().expect("ofproto lock");
            let o = Arc::clone(&off);
            // Other bridges' encapsulations may go through this one.
            let tnl = Arc::clone(&sh.patches.tnl);
            of.set_generation_hook(Arc::new(move |g| {
                o.set_generation(g);
                tnl.underlay_changed(Some(&o));
            }));
            off.set_generation(of.generation());
        }
        sh.patches.tnl.add_offloader(&off);
        for p in self.ports() {
            let mut dev = p.dev.lock().expect("port lock");
            if let (Some(fp), Ok(ifx)) = (take_fast_path(&mut **dev), bpf::ifindex(&p.spec.name)) {
                off.add_port(p.ofport, ifx, fp);
            }
        }
        *sh.offload.lock().expect("offload") = Some(Arc::clone(&off));
        let sh = Arc::clone(&self.shared);
        std::thread::Builder::new().name("offload".into()).spawn(move || {
            let mut last_full = Instant::now();
            while !sh.stop.load(Ordering::Acquire) {
                // New hot flows are looked for every 50 ms (each look
                // learns at most a sample ring's worth of them); counters,
                // revalidation and the decapsulating entries every 250 ms.
                std::thread::sleep(Duration::from_millis(50));
                let full = last_full.elapsed() >= Duration::from_millis(250);
                if full {
                    last_full = Instant::now();
                }
                // Every poll thread publishes a sample of recent packets'
                // keys with its counters (no megaflow dump needed).
                let reports = collect_reports_of(&sh, false);
                let at = sh.now_ms();
                let samples: Vec<(flow::FlowKey, f64)> = reports.iter().flat_map(|r| sample_rates(r, at)).collect();
                let now = sh.ofproto.read().expect("ofproto lock").now();
                let translate = |k: &flow::FlowKey| {
                    let of = sh.ofproto.read().expect("ofproto lock");
                    dpif::Upcall::revalidate(&*of, k)
                };
                let takes_redirects = |ifindex: u32| {
                    let f = netdev_linux::genl::xdp_features(ifindex).ok()??;
                    Some(f & netdev_linux::genl::XDP_ACT_NDO_XMIT != 0)
                };
                let encap = |port: u32, k: &flow::FlowKey, words: &flow::key::TnlWords| {
                    use crate::offload::NotOffloadable;
                    let e = match sh.patches.tnl.offload_encap(&sh.bridge, port, k, words)? {
                        Ok(e) => e,
                        Err(why) => return Some(Err(NotOffloadable::Tunnel(why))),
                    };
                    let Ok(ifx) = bpf::ifindex(&e.out_dev) else {
                        return Some(Err(NotOffloadable::Tunnel(format!("underlay port {} has no kernel device", e.out_dev))));
                    };
                    if takes_redirects(ifx) == Some(false) {
                        return Some(Err(NotOffloadable::Tunnel(format!(
                            "underlay port {} takes no redirected frames now (a veth: GRO off and no XDP program at its far end)",
                            e.out_dev
                        ))));
                    }
                    Some(crate::offload::encap_action(&e.hdr, e.max_inner, ifx).map(|a| (a, e.credit)))
                };
                // Hot flows of the other bridges that entered them through
                // a tunnel port: their frames may arrive at this bridge's
                // ports, to be decapsulated here.
                let mut foreign_hot = Vec::new();
                let tnl = &sh.patches.tnl;
                if full && tnl.is_active() {
                    for peer in tnl.peers(&sh) {
                        let reports = collect_reports_of(&peer, false);
                        let at = peer.now_ms();
                        let mut rate: HashMap<flow::FlowKey, f64> = HashMap::new();
                        for r in &reports {
                            for (k, pps) in sample_rates(r, at) {
                                if tnl.is_tunnel_port(&peer.bridge, k.in_port()) {
                                    *rate.entry(k).or_default() += pps;
                                }
                            }
                        }
                        let threshold = off.threshold_pps() as f64;
                        foreign_hot.extend(
                            rate.into_iter()
                                .filter(|(_, r)| *r >= threshold)
                                .map(|(key, _)| crate::offload::ForeignKey { bridge: peer.bridge.clone(), key }),
                        );
                    }
                }
                let decap = |fk: &crate::offload::ForeignKey| tnl.offload_decap(&sh, fk, &takes_redirects);
                off.tick(&samples, now, full, &translate, &encap, &takes_redirects, &foreign_hot, &decap);
            }
            off.clear();
        })?;
        Ok(())
    }

    /// Adds an already open device (e.g. an in-memory dummy port in tests
    /// and benchmarks) as a port described by `spec`.
    pub fn add_netdev(&self, spec: PortSpec, dev: Box<dyn Netdev>) -> Result<u32> {
        let pmd = self.pick_pmd();
        self.attach(spec, dev, pmd)
    }

    fn pick_pmd(&self) -> usize {
        let ports = self.shared.ports.read().expect("ports lock");
        let n_pmd = self.shared.reports.len();
        (0..n_pmd).min_by_key(|i| ports.values().filter(|p| p.pmd == *i).count()).unwrap_or(0)
    }

    fn attach(&self, spec: PortSpec, dev: Box<dyn Netdev>, pmd: usize) -> Result<u32> {
        let sh = &self.shared;
        let mut ports = sh.ports.write().expect("ports lock");
        if ports.values().any(|p| p.spec.name == spec.name) {
            bail!("port {}: already on bridge {}", spec.name, sh.bridge);
        }
        let ofport = match spec.ofport {
            Some(n) if ports.contains_key(&n) => bail!("port {}: ofport {n} is already in use", spec.name),
            Some(n) => n,
            None => (1..ofproto::actions::ofpp::MAX).find(|n| !ports.contains_key(n)).expect("a free port number"),
        };
        let port = Arc::new(Port::new(ofport, spec.clone(), pmd, dev));
        ports.insert(ofport, port);
        drop(ports);
        if spec.kind == crate::config::PortType::Tunnel {
            sh.patches.tnl.set_ofport(&sh.bridge, &spec.name, ofport);
        }
        let mut pc = PortConfig::new(ofport, &spec.name);
        pc.vlan = spec.vlan.clone();
        sh.ofproto.write().expect("ofproto lock").add_port(pc);
        sh.ports_gen.fetch_add(1, Ordering::Release);
        Ok(ofport)
    }

    /// Removes a port by name. Its device is closed (and its XDP program
    /// detached) once the poll thread lets go of it.
    pub fn del_port(&self, name: &str) -> Result<()> {
        let sh = &self.shared;
        // Before the device is released (see `shutdown`).
        let was_set = {
            let mut set = sh.napi_set.lock().expect("napi set");
            let before = set.len();
            set.retain(|d| d != name);
            set.len() != before
        };
        if was_set {
            self.napi_thread(name, false);
        }
        let ofport = {
            let mut ports = sh.ports.write().expect("ports lock");
            let Some((&n, _)) = ports.iter().find(|(_, p)| p.spec.name == name) else {
                bail!("no port named {name} on bridge {}", sh.bridge);
            };
            if let Some(p) = ports.remove(&n) {
                // Removed from the configuration: its device goes too.
                ports::release_device(&mut **p.dev.lock().expect("port lock"));
            }
            n
        };
        if let Some(o) = sh.offload.lock().expect("offload").as_ref() {
            o.remove_port(ofport);
        }
        sh.ofproto.write().expect("ofproto lock").remove_port(ofport);
        sh.ports_gen.fetch_add(1, Ordering::Release);
        Ok(())
    }

    /// Sets the MTU of port `name`'s kernel device (`mtu_request`). An
    /// AF_XDP port whose MTU crosses the single-buffer limit is reopened
    /// around the change, with the same OpenFlow number: above the limit
    /// its device needs the multi-buffer XDP program, and veth refuses the
    /// change while the other one is attached.
    pub fn set_port_mtu(&self, name: &str, mtu: u32) -> Result<()> {
        let sh = &self.shared;
        let Some(p) = self.ports().into_iter().find(|p| p.spec.name == name) else {
            bail!("no port named {name} on bridge {}", sh.bridge);
        };
        let old = crate::sysfs::read_sys(name, "mtu").and_then(|m| m.parse::<u32>().ok()).unwrap_or(1500);
        let limit = netdev_linux::afxdp::SINGLE_BUFFER_MTU;
        let xdp = matches!(p.spec.kind, PortType::Afxdp | PortType::System);
        if !xdp || (old > limit) == (mtu > limit) {
            return netdev_linux::sys::set_mtu(name, mtu).with_context(|| format!("setting MTU {mtu} on {name}"));
        }
        // Close the port (its XDP program and sockets) first.
        let (placeholder, _) = netdev::dummy::DummyPort::new(name);
        drop(std::mem::replace(&mut *p.dev.lock().expect("port lock"), Box::new(placeholder)));
        let set = netdev_linux::sys::set_mtu(name, mtu).with_context(|| format!("setting MTU {mtu} on {name}"));
        if set.is_err() {
            let _ = netdev_linux::sys::set_mtu(name, old);
        }
        // The old program is detached when its last file descriptor goes;
        // a process forked at that moment (and not yet exec'd) can hold a
        // copy for a while: the device is busy until then.
        let deadline = Instant::now() + Duration::from_secs(2);
        let dev = loop {
            match ports::open(&p.spec, &sh.bridge, &sh.umems[p.pmd], &sh.patches) {
                Ok(d) => break d,
                Err(e) if Instant::now() < deadline && e.to_string().contains("os error 16") => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Err(e) => return Err(e.context(format!("reopening port {name} after its MTU change"))),
            }
        };
        let port = Arc::new(Port::new(p.ofport, p.spec.clone(), p.pmd, dev));
        sh.ports.write().expect("ports lock").insert(p.ofport, port);
        sh.ports_gen.fetch_add(1, Ordering::Release);
        eprintln!("xvs: port {name} ({}): MTU {old} -> {mtu}; reopened", p.ofport);
        set
    }

    /// The bridge is being removed, not merely stopped: its kernel devices
    /// (internal ports kept across restarts) go with it.
    pub fn release_devices(&self) {
        self.napi_threads_off();
        for p in self.ports() {
            ports::release_device(&mut **p.dev.lock().expect("port lock"));
        }
    }

    pub fn ports(&self) -> Vec<Arc<Port>> {
        self.shared.ports.read().expect("ports lock").values().cloned().collect()
    }

    /// Ports whose kernel device went away are reported gone (once, in
    /// the log; `xvs show`, port status and the database follow
    /// [`Port::link`]); when a device of that name is back, the port is
    /// opened on it again with the same OpenFlow number, so rules and
    /// counters carry on.
    fn follow_devices(&self) {
        let sh = &self.shared;
        for p in self.ports() {
            let Some(old) = p.ifindex else { continue };
            let now = crate::sysfs::read_ifindex(&p.spec.name);
            if now == Some(old) {
                continue;
            }
            if !p.gone.swap(true, Ordering::AcqRel) {
                eprintln!("xvs: port {} ({}): device gone; its traffic stops until it returns", p.spec.name, p.ofport);
            }
            let Some(new) = now else { continue };
            let dev = match ports::open(&p.spec, &sh.bridge, &sh.umems[p.pmd], &sh.patches) {
                Ok(d) => d,
                Err(e) => {
                    eprintln!("xvs: port {}: device is back (ifindex {new}) but reopening failed: {e:#}", p.spec.name);
                    continue;
                }
            };
            let port = Arc::new(Port::new(p.ofport, p.spec.clone(), p.pmd, dev));
            sh.ports.write().expect("ports lock").insert(p.ofport, port);
            sh.ports_gen.fetch_add(1, Ordering::Release);
            eprintln!("xvs: port {} ({}): device is back (ifindex {old} -> {new}); reattached", p.spec.name, p.ofport);
        }
    }

    /// Runs control-plane housekeeping once (MAC aging, rule timeouts,
    /// devices that went or came back).
    pub fn housekeeping(&self) {
        self.follow_devices();
        let now = self.shared.now_ms();
        // The slow-path datapath has no poll loop of its own: its
        // megaflows credit their rules and idle out here, as the poll
        // threads' do in theirs.
        self.shared.slow_pmd.lock().expect("slow pmd").sweep(now);
        {
            let of = self.shared.ofproto.read().expect("ofproto lock");
            of.run(now);
            // Tunnel ports of this bridge encode tun_metadata with its TLV map.
            self.shared.patches.tnl.set_tlv(&self.shared.bridge, of.tlv.mappings());
        }
        // Flows `learn` actions built since the last round.
        // and what delete_learned learners that went had learned.
        let (learned, unlearned) = {
            let of = self.shared.ofproto.read().expect("ofproto lock");
            (of.take_learned(), of.take_unlearned())
        };
        if !learned.is_empty() || !unlearned.is_empty() {
            let mut of = self.shared.ofproto.write().expect("ofproto lock");
            for spec in &learned {
                if let Err(e) = of.flow_mod(ofproto::FlowModCmd::Add, spec) {
                    eprintln!("xvs: bridge {}: a learned flow was refused: {e}", self.shared.bridge);
                }
            }
            for spec in &unlearned {
                let _ = of.flow_mod(ofproto::FlowModCmd::DeleteStrict, spec);
            }
        }
        // What large deletes left to free, in short write sections.
        if self.shared.ofproto.read().expect("ofproto lock").n_unpurged() > 0 {
            self.shared.ofproto.purge_in_chunks();
        }
    }

    /// Asks the PMDs for fresh megaflow dumps and waits (up to 1 s).
    pub fn collect_reports(&self, with_flows: bool) -> Vec<PmdReport> {
        collect_reports_of(&self.shared, with_flows)
    }

    /// Live counters and facts of every port.
    pub fn port_stats(&self) -> Vec<(Arc<Port>, PortStats, PortInfo)> {
        self.ports()
            .into_iter()
            .map(|p| {
                let dev = p.dev.lock().expect("port lock");
                let (s, i) = (dev.stats(), dev.info());
                drop(dev);
                (p, s, i)
            })
            .collect()
    }

    /// Stops the poll threads and closes every port (detaching XDP).
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        self.napi_threads_off();
        self.shared.ports.write().expect("ports lock").clear();
        // The UMEMs go with the last bridge that used them (another bridge
        // of the process may still share them).
        for u in &self.shared.umems {
            if std::sync::Arc::strong_count(u) == 1 {
                *u.lock().expect("umem") = None;
            }
        }
    }
}

impl Drop for Switch {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The bridge as a PMD's upcall target: a read lock per miss, tried
/// (the PMD parks the packet when a writer holds it).
struct BridgeUpcall<'a>(&'a OfprotoLock);

/// The same for a caller without a poll loop (packet-out): waits.
struct BlockingUpcall<'a>(&'a OfprotoLock);

impl Upcall for BlockingUpcall<'_> {
    fn translate(&self, key: &FlowKey) -> Translation {
        self.0.read().unwrap_or_else(|e| e.into_inner()).translate_key(key, 0)
    }
}

impl Upcall for BridgeUpcall<'_> {
    fn translate(&self, key: &FlowKey) -> Translation {
        self.0.read().expect("ofproto lock").translate_key(key, 0)
    }

    fn try_translate(&self, key: &FlowKey) -> Option<Translation> {
        match self.0.try_read() {
            Ok(of) => Some(of.translate_key(key, 0)),
            Err(std::sync::TryLockError::WouldBlock) => None,
            Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner().translate_key(key, 0)),
        }
    }
}

/// Where a PMD's output goes: straight to the ports' transmit queues.
struct PortSink<'a> {
    /// The bridge's poll thread that sends through this sink (`None`: a
    /// thread that owns none of its ports).
    pmd: Option<usize>,
    ports: &'a BTreeMap<u32, Arc<Port>>,
    /// The switch's live port map, consulted when `ports` (this poll
    /// thread's snapshot) lacks a port: one added after the snapshot may
    /// already be in the rules that translation used.
    live: &'a std::sync::RwLock<BTreeMap<u32, Arc<Port>>>,
    /// Ports sent to since the sink was made (for deferred TX flushes).
    sent: Vec<u32>,
    mirror: Option<&'a Mutex<Box<dyn Netdev>>>,
    userspace_dropped: u64,
    packet_in: &'a std::sync::mpsc::SyncSender<PacketInEvent>,
    tx_packets: u64,
    tx_batches: u64,
}

impl Sink for PortSink<'_> {
    fn output(&mut self, port: u32, pkts: &mut Vec<Packet>) {
        if let Some(m) = self.mirror {
            let mut copies: Vec<Packet> = pkts
                .iter()
                .map(|p| {
                    let mut c = p.clone();
                    c.complete_checksum();
                    c
                })
                .collect();
            let _ = m.lock().expect("mirror lock").tx_batch(&mut copies);
        }
        let late;
        let found = match self.ports.get(&port) {
            Some(p) => Some(p),
            None => {
                late = self.live.read().expect("ports lock").get(&port).cloned();
                late.as_ref()
            }
        };
        match found {
            Some(p) => {
                self.tx_packets += pkts.len() as u64;
                self.tx_batches += 1;
                if self.pmd != Some(p.pmd) {
                    p.foreign_tx.fetch_add(1, Ordering::Relaxed);
                }
                let mut dev = p.dev.lock().expect("port lock");
                let _ = dev.tx_batch(pkts);
                // Only ports that defer their transmit kicks need a later flush.
                if p.spec.tx_flush_us > 0 && !self.sent.contains(&port) {
                    self.sent.push(port);
                }
            }
            None => {
                self.ports.values().next().map(|p| p.tx_no_port.fetch_add(pkts.len() as u64, Ordering::Relaxed));
                pkts.clear();
            }
        }
    }

    fn csum_offload(&self, port: u32) -> bool {
        match self.ports.get(&port) {
            Some(p) => p.csum_offload,
            None => self.live.read().expect("ports lock").get(&port).is_some_and(|p| p.csum_offload),
        }
    }

    fn userspace(&mut self, pkt: Packet, full_len: usize, action: &DpAction) {
        let DpAction::Userspace { reason, max_len, table_id, cookie, extra } = action else { return };
        let ev = PacketInEvent {
            in_port: pkt.in_port,
            reason: *reason,
            max_len: *max_len,
            table_id: *table_id,
            cookie: *cookie,
            data: pkt.data().to_vec(),
            full_len,
            extra: extra.clone(),
        };
        // Never block a poll thread: a full queue drops (and counts).
        if self.packet_in.try_send(ev).is_err() {
            self.userspace_dropped += 1;
        }
    }
}

/// Iterations a poll thread skips a system-call queue that was empty.
const RX_BACKOFF: u32 = 15;

/// Adaptive polling: how long a poll thread must have moved nothing before
/// it sleeps in poll(2) (and at least 2,000 empty iterations). 2,000 empty
/// iterations alone are about 200 us, a gap that a pause of the sender or a
/// preemption of the thread makes under load; a busy thread that slept in
/// it woke after its receive ring had overflowed. A millisecond still lets
/// an idle switch sleep almost at once.
const IDLE_BEFORE_SLEEP: Duration = Duration::from_millis(1);

/// The longest an idle poll thread sleeps before it looks at its queues
/// (and the rule generation, port changes and statistics requests) again.
const MAX_SLEEP_MS: i32 = 10;

/// Megaflow slots a poll thread checks for expiry per 50 ms slice.
const SWEEP_SLOTS: usize = 2048;

fn pmd_main(sh: Arc<Shared>, id: usize, cfg: PmdConfig, core: CoreClaim) {
    let mut pmd = Pmd::new(cfg);
    let mut ports_gen = 0;
    let mut all_ports: BTreeMap<u32, Arc<Port>> = BTreeMap::new();
    let mut rxqs: Vec<(Arc<Port>, usize)> = Vec::new();
    // Per receive queue, its port's `foreign_tx` when this thread last
    // went to sleep.
    let mut foreign_seen: Vec<u64> = Vec::new();
    let mut pkts: Vec<Packet> = Vec::with_capacity(BATCH);
    let mut report = PmdReport { id, ..Default::default() };
    let mut last_publish = 0u64;
    let mut last_sweep = 0u64;
    let mut last_push = 0u64;
    let mut idle_iters = 0u32;
    // When this thread last moved a packet (adaptive polling sleeps only
    // after IDLE_BEFORE_SLEEP without any).
    let mut last_moved = Instant::now();
    let mut sleep_ms = 1;
    // Whether the thread slept since it last moved a packet: an idle thread
    // that woke to find nothing sleeps again at once, instead of spinning
    // through another IDLE_BEFORE_SLEEP (a tenth of a core, at 10 ms
    // sleeps, taken from a busy thread pinned to the same core).
    let mut slept_since_moved = false;
    let mut userspace_dropped = 0u64;
    let mut stats_served = 0u64;
    let mut tx_pending: Vec<u32> = Vec::new();
    // Per receive queue: iterations to skip it. A queue read with a system
    // call (tap, internal and AF_PACKET ports) that was empty is skipped for
    // the next RX_BACKOFF iterations: read() on an empty tap on every
    // iteration of a spinning thread took 15% of it. AF_XDP and vhost-user
    // queues are memory rings and are always polled.
    let mut rx_skip: Vec<u32> = Vec::new();
    let upcall = BridgeUpcall(&sh.ofproto);
    let (mut prev_t0, mut prev_moved) = (Instant::now(), false);
    // Tunnel frames this bridge's rules send to its local port skip its
    // datapath (see `tnl::DirectRx`).
    let mut direct = crate::tnl::DirectRx::default();
    while !sh.stop.load(Ordering::Acquire) {
        let g = sh.ports_gen.load(Ordering::Acquire);
        if g != ports_gen {
            ports_gen = g;
            all_ports = sh.ports.read().expect("ports lock").clone();
            rxqs = all_ports
                .values()
                .filter(|p| p.pmd == id)
                .flat_map(|p| (0..p.info.n_rxq.max(1)).map(move |q| (Arc::clone(p), q)))
                .collect();
            report.rxqs = rxqs.iter().map(|(p, q)| (p.spec.name.clone(), *q)).collect();
            rx_skip = vec![0; rxqs.len()];
            foreign_seen.clear();
        }
        // One clock read per iteration: everything below derives from it,
        // and the previous iteration's time (busy if it moved packets,
        // idle otherwise) is this read minus the last. With a second read
        // at the end of every iteration the clock was 7.4% of a poll thread
        // forwarding between two VMs, with one 4.7% (a read waits for the
        // loads before it).
        let t0 = Instant::now();
        let spent = t0.saturating_duration_since(prev_t0).as_nanos() as u64;
        if prev_moved {
            report.busy_ns += spent;
        } else {
            report.idle_ns += spent;
        }
        prev_t0 = t0;
        let now_ms = t0.duration_since(sh.start).as_millis() as u64;
        let housekeeping = report.iterations % 64 == 0;
        pmd.set_generation(sh.generation.load(Ordering::Acquire));
        let mut moved = 0usize;
        let mut sink = sh.sink(&all_ports, Some(id));
        // Packets parked while a rule change held the bridge go first.
        if pmd.n_deferred() > 0 {
            moved += pmd.poll_deferred(&upcall, now_ms, &mut sink);
        }
        for (i, (port, q)) in rxqs.iter().enumerate() {
            let n = {
                // A port another thread is sending on (a bridge's tunnel
                // traffic runs to completion in its peer's poll thread, see
                // `run_peers`; the control thread reads statistics) is
                // polled next time rather than waited for: waiting made the
                // two threads of one core hand the lock back and forth
                // through the scheduler.
                let mut dev = match port.dev.try_lock() {
                    Ok(d) => d,
                    Err(std::sync::TryLockError::WouldBlock) => continue,
                    Err(std::sync::TryLockError::Poisoned(e)) => panic!("port lock: {e}"),
                };
                if housekeeping {
                    dev.poll_housekeeping();
                }
                if rx_skip[i] > 0 {
                    rx_skip[i] -= 1;
                    continue;
                }
                dev.rx_batch(*q, &mut pkts, BATCH).unwrap_or(0)
            };
            if n == 0 {
                if matches!(port.spec.kind, PortType::Tap | PortType::Internal | PortType::AfPacket) {
                    rx_skip[i] = RX_BACKOFF;
                }
                continue;
            }
            // Read the rule generation after receiving: a packet that
            // arrived after a rule change committed must be looked up with
            // that change (the iteration-start read may predate it).
            pmd.set_generation(sh.generation.load(Ordering::Acquire));
            moved += n;
            for p in pkts.iter_mut() {
                p.in_port = port.ofport;
            }
            if sh.patches.tnl.is_active() {
                sh.patches.tnl.take_direct(&sh, &mut pkts, &mut direct);
                if pkts.is_empty() {
                    continue;
                }
            }
            pmd.process_batch(&mut pkts, &upcall, now_ms, &mut sink);
            pkts.clear();
        }
        userspace_dropped += sink.userspace_dropped;
        report.tx_packets += sink.tx_packets;
        report.tx_batches += sink.tx_batches;
        // Tunnel traffic runs to completion: what this iteration handed
        // another bridge of the process (encapsulated frames for br-phy,
        // decapsulated ones for br-int) goes through that bridge's pipeline
        // here and now, not after a hop to its own poll thread.
        if moved > 0 && sh.patches.tnl.is_active() {
            run_peers(&sh, &mut pkts);
        }
        // Writers wait (briefly) for parked packets: say how many there are.
        let parked = pmd.n_deferred();
        sh.ofproto.set_parked(id, parked);
        // Ports that defer transmit kicks: flush what waited long enough,
        // everything when this iteration found nothing to do.
        for p in sink.sent.drain(..) {
            if !tx_pending.contains(&p) {
                tx_pending.push(p);
            }
        }
        if !tx_pending.is_empty() {
            tx_pending.retain(|p| {
                all_ports.get(p).is_some_and(|port| port.dev.lock().expect("port lock").flush_tx(moved == 0))
            });
        }
        report.iterations += 1;
        prev_moved = moved > 0;
        if moved > 0 {
            report.busy_iterations += 1;
            idle_iters = 0;
            last_moved = t0;
            sleep_ms = 1;
            slept_since_moved = false;
        } else {
            idle_iters = idle_iters.saturating_add(1);
            if parked > 0 {
                // Parked packets are retried at once, never slept on.
            } else if (sh.poll_mode == PollMode::Adaptive || core.shared())
                && (slept_since_moved || idle_iters > 2000 && t0.duration_since(last_moved) >= IDLE_BEFORE_SLEEP)
            {
                let ts = Instant::now();
                // Sleeps grow while nothing comes (1, 2, 4, 8, 10 ms) when
                // every queue can wake the thread: an idle thread that woke
                // every millisecond preempted a busy one on the same core
                // (two bridges' threads pinned together), which then lost
                // frames at its receive ring.
                let all_wake = wait_for_packets(&rxqs, &mut foreign_seen, sleep_ms);
                slept_since_moved = true;
                sleep_ms = if all_wake { (sleep_ms * 2).min(MAX_SLEEP_MS) } else { 1 };
                // Woken by a readable queue: poll every queue at once.
                rx_skip.iter_mut().for_each(|s| *s = 0);
                report.sleep_iterations += 1;
                report.sleep_ns += ts.elapsed().as_nanos() as u64;
            } else if rxqs.is_empty() {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        // Idle megaflows are expired a slice at a time (2,048 slots every
        // 50 ms: 200,000 megaflows in 5 s), so no pass stalls forwarding;
        // rule counters are pushed once a second.
        if now_ms >= last_sweep + 50 {
            pmd.sweep_some(now_ms, SWEEP_SLOTS);
            last_sweep = now_ms;
        }
        if now_ms >= last_push + 1000 {
            pmd.push_stats();
            last_push = now_ms;
        }
        let req = sh.stats_req.load(Ordering::Acquire);
        if req != stats_served {
            pmd.push_stats();
            stats_served = req;
            sh.stats_ack[id].store(req, Ordering::Release);
        }
        let want = sh.want_dump.load(Ordering::Acquire);
        if want || now_ms >= last_publish + 100 {
            report.stats = pmd.stats().clone();
            report.n_megaflows = pmd.n_megaflows();
            report.n_masks = pmd.n_subtables();
            report.userspace_dropped = userspace_dropped;
            if sh.offload.lock().expect("offload").is_some() {
                report.samples.clear();
                report.samples.extend_from_slice(pmd.recent_keys());
                report.sample_ms.clear();
                report.sample_ms.extend_from_slice(pmd.recent_times());
                report.published_ms = now_ms;
            }
            if want {
                report.megaflows = pmd.dump_megaflows();
            }
            *sh.reports[id].lock().expect("report") = report.clone();
            last_publish = now_ms;
        }
    }
}

/// Runs the other bridges' in-memory queues (see the call in
/// `pmd_main`) through their pipelines with their shared slow-path
/// datapath (`slow_pmd`, whose counters the CLI shows as the main thread's).
fn run_peers(sh: &Shared, pkts: &mut Vec<Packet>) {
    for peer in sh.patches.tnl.peers(sh) {
        for _ in 0..4 {
            pkts.clear();
            sh.patches.tnl.drain_bridge(&peer.bridge, pkts, BATCH);
            if pkts.is_empty() {
                break;
            }
            run_batch(&peer, pkts);
        }
    }
    pkts.clear();
}

/// Runs `pkts` (their input ports set) through bridge `peer`'s pipeline
/// with its shared datapath (`slow_pmd`), from whichever poll thread has
/// them; drains `pkts`.
pub(crate) fn run_batch(peer: &Shared, pkts: &mut Vec<Packet>) {
    // The peer's clock: its megaflows' idle times are in it.
    let now_ms = peer.now_ms();
    let ports = peer.ports.read().expect("ports lock");
    let mut sink = peer.sink(&ports, None);
    let upcall = BridgeUpcall(&peer.ofproto);
    {
        let mut spmd = peer.slow_pmd.lock().expect("slow pmd");
        spmd.set_generation(peer.generation.load(Ordering::Acquire));
        spmd.process_batch(pkts, &upcall, now_ms, &mut sink);
    }
    for p in sink.sent.drain(..) {
        if let Some(port) = ports.get(&p) {
            port.dev.lock().expect("port lock").flush_tx(true);
        }
    }
}

/// Sleeps until a queue is readable or `timeout_ms` passed. Returns whether
/// every queue has a descriptor to wake on: a queue without one (vhost-user,
/// whose guest does not kick) is only seen when the timeout ends.
///
/// Nor is a queue whose port other threads sent to since the last sleep
/// (`seen` holds each queue's `Port::foreign_tx` then). A thread asleep on
/// a socket makes every frame sent through it pay for a wake-up: the
/// kernel takes the socket's wait-queue lock, interrupts off, as it frees
/// each transmitted buffer, to tell sleepers there is room. That was 24-36
/// ns a frame (2-4% of the core) with Geneve frames sent straight to an
/// idle bridge's underlay port; the thread looks at such a queue every
/// millisecond instead.
fn wait_for_packets(rxqs: &[(Arc<Port>, usize)], seen: &mut Vec<u64>, timeout_ms: i32) -> bool {
    seen.resize(rxqs.len(), u64::MAX);
    let mut fds: Vec<i32> = Vec::with_capacity(rxqs.len());
    for ((p, q), seen) in rxqs.iter().zip(seen.iter_mut()) {
        let now = p.foreign_tx.load(Ordering::Relaxed);
        if std::mem::replace(seen, now) != now {
            continue;
        }
        if let Some(fd) = p.dev.lock().ok().and_then(|d| d.rx_fd(*q)) {
            fds.push(fd);
        }
    }
    if fds.is_empty() {
        std::thread::sleep(Duration::from_millis(timeout_ms as u64));
    } else {
        ports::poll_readable(&fds, timeout_ms);
    }
    fds.len() == rxqs.len()
}

/// The poll threads' latest reports; `with_flows` asks each to publish its
/// megaflows first (waits up to a second).
pub fn collect_reports_of(sh: &Shared, with_flows: bool) -> Vec<PmdReport> {
    if with_flows {
        let before: Vec<u64> = sh.reports.iter().map(|r| r.lock().expect("report").iterations).collect();
        sh.want_dump.store(true, Ordering::Release);
        let deadline = Instant::now() + Duration::from_secs(1);
        while Instant::now() < deadline {
            let fresh = sh.reports.iter().zip(&before).all(|(r, b)| r.lock().expect("report").iterations > *b + 1);
            if fresh {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        // Let PMDs publish one more report with the dump.
        std::thread::sleep(Duration::from_millis(20));
        sh.want_dump.store(false, Ordering::Release);
    }
    let mut v: Vec<PmdReport> = sh.reports.iter().map(|r| r.lock().expect("report").clone()).collect();
    // The slow-path datapath (packet-outs, resumes, and other bridges'
    // threads running this bridge's tunnel traffic), once it saw packets.
    if let Ok(p) = sh.slow_pmd.try_lock() {
        if p.stats().packets > 0 {
            v.push(PmdReport {
                id: v.len(),
                main_thread: true,
                stats: p.stats().clone(),
                n_megaflows: p.n_megaflows(),
                n_masks: p.n_subtables(),
                megaflows: if with_flows { p.dump_megaflows() } else { Vec::new() },
                // Tunnel traffic decapsulated by another bridge's thread
                // runs here: the kernel fast path finds its hot flows.
                samples: p.recent_keys().to_vec(),
                sample_ms: p.recent_times().to_vec(),
                published_ms: sh.now_ms(),
                ..Default::default()
            });
        }
    }
    v
}

/// How far back [`sample_rates`] looks: a flow is hot if it was in the
/// last quarter second (the poll threads publish every 100 ms).
pub const RATE_WINDOW_MS: u64 = 250;

/// The packets per second each of a report's samples stands for: the
/// samples of the last [`RATE_WINDOW_MS`] (`now_ms`, the bridge's clock),
/// each one packet in `SAMPLE_EVERY` of those that arrived while they were
/// taken. That is the whole window, unless the ring is full of samples
/// from within it. Then it is the time from its oldest sample to its
/// publication. Older samples (a ring that traffic stopped overwriting)
/// count for nothing.
pub fn sample_rates(r: &PmdReport, now_ms: u64) -> Vec<(flow::FlowKey, f64)> {
    let n = r.samples.len().min(r.sample_ms.len());
    let recent: Vec<usize> = (0..n).filter(|&i| now_ms.saturating_sub(r.sample_ms[i]) < RATE_WINDOW_MS).collect();
    let span_ms = match recent.iter().map(|&i| r.sample_ms[i]).min() {
        None => return Vec::new(),
        Some(oldest) if recent.len() >= dpif::pmd::SAMPLES => r.published_ms.saturating_sub(oldest).max(1),
        Some(_) => RATE_WINDOW_MS,
    };
    let each = dpif::pmd::SAMPLE_EVERY as f64 * 1000.0 / span_ms as f64;
    recent.into_iter().map(|i| (r.samples[i], each)).collect()
}

/// The kernel fast-path maps of an AF_XDP port (once).
fn take_fast_path(dev: &mut dyn Netdev) -> Option<bpf::FastPath> {
    dev.as_any_mut()?.downcast_mut::<netdev_linux::AfxdpPort>()?.take_fast_path()
}

#[cfg(test)]
mod tests {
    use super::CoreClaim;

    /// Hot-flow rates from a poll thread's samples: samples older than
    /// the window count for nothing (a ring that traffic stopped
    /// overwriting must not make a new, slow flow look cold, nor an old one
    /// hot); a ring not full of recent samples stands for the whole window;
    /// a ring full of them for the span from its oldest to its publication.
    #[test]
    fn sample_rates_count_recent_samples_over_the_time_they_span() {
        use super::{sample_rates, PmdReport};
        use dpif::pmd::{SAMPLES, SAMPLE_EVERY};
        let key = |p: u32| {
            let mut k = flow::FlowKey::ZERO;
            k.set_in_port(p);
            k
        };
        // 1000 stale samples of flow 1 (5 s old), 6 recent ones of flow 2.
        let mut r = PmdReport { published_ms: 10_000, ..Default::default() };
        for i in 0..1000 {
            r.samples.push(key(1));
            r.sample_ms.push(5_000 + i);
        }
        for i in 0..6 {
            r.samples.push(key(2));
            r.sample_ms.push(9_800 + i * 40);
        }
        let rates = sample_rates(&r, 10_000);
        assert!(rates.iter().all(|(k, _)| k.in_port() == 2), "stale samples ignored");
        let total: f64 = rates.iter().map(|(_, x)| x).sum();
        let expect = 6.0 * SAMPLE_EVERY as f64 * 1000.0 / super::RATE_WINDOW_MS as f64;
        assert_eq!(total, expect, "6 samples over the window: 384 packets/s");
        // A flow whose traffic stopped a window ago is not hot any more.
        assert!(sample_rates(&r, 10_300).is_empty());
        // A full ring of recent samples spanning 8 ms (a 2 Mpps stream).
        let mut r = PmdReport { published_ms: 20_008, ..Default::default() };
        for i in 0..SAMPLES {
            r.samples.push(key(3 + (i % 2) as u32));
            r.sample_ms.push(20_000 + (i * 8 / SAMPLES) as u64);
        }
        let rates = sample_rates(&r, 20_010);
        let of = |p: u32| rates.iter().filter(|(k, _)| k.in_port() == p).map(|(_, x)| x).sum::<f64>();
        let expect = (SAMPLES / 2) as f64 * SAMPLE_EVERY as f64 * 1000.0 / 8.0;
        assert!((of(3) - expect).abs() < 1.0 && (of(4) - expect).abs() < 1.0, "{} {} {expect}", of(3), of(4));
        // Nothing recent: no rates.
        assert!(sample_rates(&r, 25_000).is_empty());
    }

    #[test]
    fn a_core_is_shared_while_two_poll_threads_claim_it() {
        // CPU 1000: no poll thread of this test process is pinned there.
        let a = CoreClaim::pin(Some(1000));
        assert!(!a.shared(), "one thread alone spins as asked");
        let b = CoreClaim::pin(Some(1000));
        assert!(a.shared() && b.shared());
        drop(b);
        assert!(!a.shared(), "the other thread's end gives the core back");
        assert!(!CoreClaim::pin(None).shared(), "an unpinned thread shares no core");
        assert!(!CoreClaim::pin(Some(1 << 20)).shared(), "CPUs beyond the table are never counted");
    }
}
