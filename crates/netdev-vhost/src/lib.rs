//! # netdev-vhost: vhost-user ports (`dpdkvhostuserclient`)
//!
//! A virtual machine's virtio-net device talks to the switch through a
//! vhost-user socket that the frontend (QEMU, or DPDK's `net_virtio_user`)
//! owns. [`VhostUserClientPort`] connects to that socket as the vhost-user
//! *backend in client mode*, built on the rust-vmm crates: `vhost` speaks
//! the protocol (memory table, vring addresses, kick/call eventfds),
//! `vhost-user-backend` runs the message loop, `virtio-queue` keeps each
//! queue's configuration and position, `vm-memory` maps the guest memory.
//! The per-packet work on the split virtqueues is this crate's own
//! (`ring`): the generic accessors of `virtio-queue` and `vm-memory` cost
//! about two thirds of the poll thread's time per packet between two
//! vhost-user ports.
//!
//! Data path: the port is polled like an AF_XDP queue. `rx_batch` pops
//! descriptor chains from the guest's transmit queue (virtqueue 1) and
//! copies each frame once into a [`Packet`]; `tx_batch` writes packets into
//! the guest's receive queue (virtqueue 0), spreading a frame over several
//! chains when the guest negotiated mergeable receive buffers. The port
//! tells the guest not to kick the queues it polls (`VRING_USED_F_NO_NOTIFY`),
//! and signals the call eventfd once per batch, only when the guest did not
//! set `VRING_AVAIL_F_NO_INTERRUPT`: a polling guest (DPDK) and the port
//! exchange frames without a syscall.
//!
//! Offloads: the port offers no checksum/GSO features, so a conforming
//! frontend sends plain frames with a zero virtio-net header. A frame whose
//! header still asks for GSO or a partial checksum is dropped and counted
//! in `rx_dropped` (and [`VhostUserClientPort::offload_refused`]).
//!
//! Reconnect: a supervisor thread connects, waits for the connection to
//! end, and connects again, so the port outlives frontend restarts and
//! reports link down ([`VhostUserClientPort::is_connected`]) meanwhile.
//! A frontend whose device kept running across the switch's restart (or
//! kill) sets the queues up again from scratch, with `SET_VRING_BASE` 0
//! while its rings stand elsewhere: each queue resumes from its ring's used
//! index ([`VhostUserClientPort::ring_takeovers`] counts it), and the guest
//! memory of an ended connection is unmapped.
//!
//! Multiqueue: the port offers [`MAX_QUEUE_PAIRS`] queue pairs
//! (`VIRTIO_NET_F_MQ`, `VHOST_USER_PROTOCOL_F_MQ`) and the frontend
//! enables as many as it wants. Receive queue `i` of the port is the
//! guest's transmit virtqueue `2i+1`, so the poll threads share them out
//! like AF_XDP queues; a frame to the guest goes to the receive virtqueue
//! `2j` of an enabled pair picked by a hash of its addresses and ports, so
//! one flow stays on one queue (and in order).
#![deny(unsafe_code)]

mod backend;
mod proxy;
mod ring;
pub mod testpmd;

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use netdev::{Netdev, Packet, PortInfo, PortStats};
use vhost_user_backend::{VhostUserDaemon, VringRwLock, VringT};
use virtio_queue::QueueT;
use vm_memory::{GuestAddressSpace, GuestMemoryAtomic, GuestMemoryMmap};

use backend::{NetBackend, Shared};
use ring::{GuestMap, Ring, Seg};

/// Size of the virtio-net header with `num_buffers` (VERSION_1 / MRG_RXBUF).
const HDR_LEN: usize = 12;
/// Queue pairs a port offers the frontend.
pub const MAX_QUEUE_PAIRS: usize = 4;
/// Largest frame accepted from the guest.
const MAX_FRAME: usize = 65_536;

/// A vhost-user port connected to a frontend-owned socket.
pub struct VhostUserClientPort {
    name: String,
    shared: Arc<Shared>,
    mem: GuestMemoryAtomic<GuestMemoryMmap>,
    stats: PortStats,
    /// Frames received per queue pair.
    rxq_packets: [u64; MAX_QUEUE_PAIRS],
    /// Tries again for frames that found the guest's receive queue full
    /// (OVS's `tx-retries-max`), and how many tries were made.
    tx_retries_max: u32,
    tx_retries: u64,
    /// The queues as last looked up: the guest's transmit queue of each
    /// pair (`None` if not enabled), its enabled receive queues, and the
    /// connection and calls left until the next look. Between looks, a
    /// queue of a pair the frontend did not enable costs nothing, and one
    /// in use no lock but its own.
    guest_txq: [Option<VringRwLock>; MAX_QUEUE_PAIRS],
    guest_rxqs: Vec<VringRwLock>,
    queues_conn: u64,
    queues_left: u32,
    offload_refused: u64,
    /// Batches that found the queue's positions out of step with the ring
    /// and resumed from the ring's used index (once per queue after a
    /// reconnect to a running guest).
    ring_takeovers: u64,
    /// Call eventfd signals sent to the guest.
    calls: u64,
    /// Frames to the guest dropped because they fit none of its receive
    /// buffers (it did not accept mergeable buffers).
    too_big: u64,
    /// The guest memory, mapped (refreshed with each memory table), and
    /// the memory generation it was mapped at.
    map: Option<Arc<GuestMap>>,
    map_gen: u64,
    /// Scratch for one batch: the buffers of a chain, of the chains a
    /// frame to the guest takes, and those chains (head, bytes, first
    /// buffer in `chain_segs`).
    segs: Vec<Seg>,
    chain_segs: Vec<Seg>,
    chains: Vec<(u16, usize, usize)>,
    /// Per frame of a batch to the guest: its chains in `chains`, or
    /// `None` if a malformed chain made it a drop.
    plans: Vec<Option<(usize, usize)>>,
    stop: Arc<AtomicBool>,
    supervisor: Option<thread::JoinHandle<()>>,
    /// Server mode: the socket the port created.
    server_path: Option<std::path::PathBuf>,
    /// The vhost-user socket (either mode), for `status`.
    socket: std::path::PathBuf,
}

impl VhostUserClientPort {
    /// Creates the port for the frontend socket `path`. The socket must be
    /// an existing Unix socket path or a path in an existing directory the
    /// frontend will create it in; anything else is refused with an error
    /// naming `vhost-server-path`. The connection itself is made (and
    /// remade) in the background.
    pub fn new(name: &str, path: &Path) -> io::Result<Self> {
        check_path(path)?;
        let p = path.to_path_buf();
        Self::start(name, path, None, move |n, m, st, sh| supervise(n, m, &p, st, sh))
    }

    /// A port in server mode (`dpdkvhostuser`): the switch creates the
    /// socket at `path` (replacing a stale one) and serves one frontend at
    /// a time, again after each disconnect. The socket is removed with the
    /// port.
    pub fn new_server(name: &str, path: &Path) -> io::Result<Self> {
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        if !dir.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("vhost socket {}: directory {} does not exist", path.display(), dir.display()),
            ));
        }
        let listener = vhost::vhost_user::Listener::new(path, true)
            .map_err(|e| io::Error::other(format!("vhost socket {}: {e}", path.display())))?;
        Self::start(name, path, Some(path.to_path_buf()), move |n, m, st, sh| serve(n, m, listener, st, sh))
    }

    /// The port, with `run` (the connection loop of its mode) on a thread
    /// of its own.
    fn start(
        name: &str,
        socket: &Path,
        server_path: Option<std::path::PathBuf>,
        run: impl FnOnce(&str, GuestMemoryAtomic<GuestMemoryMmap>, &AtomicBool, &Arc<Shared>) + Send + 'static,
    ) -> io::Result<Self> {
        let mem = GuestMemoryAtomic::new(GuestMemoryMmap::new());
        let shared = Arc::new(Shared::default());
        let stop = Arc::new(AtomicBool::new(false));
        let (st, sh, m, n) = (stop.clone(), shared.clone(), mem.clone(), name.to_string());
        let supervisor = thread::Builder::new().name(format!("vhost-{name}")).spawn(move || run(&n, m, &st, &sh))?;
        Ok(VhostUserClientPort {
            name: name.to_string(),
            shared,
            mem,
            stats: PortStats::default(),
            rxq_packets: [0; MAX_QUEUE_PAIRS],
            tx_retries_max: 8,
            tx_retries: 0,
            guest_txq: Default::default(),
            guest_rxqs: Vec::new(),
            queues_conn: 0,
            queues_left: 0,
            offload_refused: 0,
            ring_takeovers: 0,
            calls: 0,
            too_big: 0,
            map: None,
            map_gen: 0,
            segs: Vec::new(),
            chain_segs: Vec::new(),
            chains: Vec::new(),
            plans: Vec::new(),
            stop,
            supervisor: Some(supervisor),
            server_path,
            socket: socket.to_path_buf(),
        })
    }

    /// How often a frame that finds the guest's receive queue full is tried
    /// again (0-32; OVS's `tx-retries-max`, default 8).
    pub fn set_tx_retries_max(&mut self, n: u32) {
        self.tx_retries_max = n.min(32);
    }

    /// Whether a frontend is connected and its queues are running (link up).
    pub fn is_connected(&self) -> bool {
        self.shared.connected.load(Ordering::Acquire) && self.vring(1).is_some()
    }

    /// How many times the port connected to a frontend.
    pub fn connects(&self) -> u64 {
        self.shared.connects.load(Ordering::Relaxed)
    }

    /// How the last connection ended (for `xvs show` and tests).
    pub fn last_error(&self) -> String {
        self.shared.last_error.lock().unwrap().clone()
    }

    /// Ring-enable messages the frontend sent before it had accepted the
    /// protocol-features bit, answered by the port's relay (QEMU sends
    /// them when it attaches the device; see the `proxy` module).
    pub fn early_ring_enables(&self) -> u64 {
        self.shared.relay_answered.load(Ordering::Relaxed)
    }

    /// The virtio feature bits the frontend accepted (0 before it did).
    pub fn acked_features(&self) -> u64 {
        self.shared.acked.load(Ordering::Acquire)
    }

    /// Kicks (guest notifications) received: the port asks the guest not
    /// to kick queues it polls, so these stay few.
    pub fn kicks(&self) -> u64 {
        self.shared.kicks.load(Ordering::Relaxed)
    }

    /// Call eventfd signals sent to the guest: none for a guest that polls
    /// (`VRING_AVAIL_F_NO_INTERRUPT`).
    pub fn calls(&self) -> u64 {
        self.calls
    }

    /// Frames to the guest dropped because none of its receive buffers
    /// could hold them whole (a guest without mergeable buffers).
    pub fn too_big(&self) -> u64 {
        self.too_big
    }

    /// Times a queue resumed from the ring's own used index because the
    /// frontend's positions disagreed with it (see `take_over_positions`).
    pub fn ring_takeovers(&self) -> u64 {
        self.ring_takeovers
    }

    /// Frames dropped because their header asked for GSO/checksum offload.
    pub fn offload_refused(&self) -> u64 {
        self.offload_refused
    }

    /// Whether a frontend is connected; looks the queues up again when
    /// they are due (every 1024 calls, and on a new connection).
    fn queues_current(&mut self) -> bool {
        if !self.shared.connected.load(Ordering::Acquire) {
            self.guest_txq = Default::default();
            self.guest_rxqs.clear();
            self.map = None;
            return false;
        }
        let conn = self.shared.connects.load(Ordering::Acquire);
        if self.queues_left == 0 || conn != self.queues_conn {
            self.queues_conn = conn;
            for i in 0..MAX_QUEUE_PAIRS {
                self.guest_txq[i] = self.vring(2 * i + 1);
            }
            self.guest_rxqs = (0..MAX_QUEUE_PAIRS).filter_map(|i| self.vring(2 * i)).collect();
            // Until the frontend has started its queues, look often.
            self.queues_left = if self.guest_rxqs.is_empty() { 8 } else { 1024 };
        }
        self.queues_left -= 1;
        true
    }

    fn vring(&self, idx: usize) -> Option<VringRwLock> {
        if !self.shared.connected.load(Ordering::Acquire) {
            return None;
        }
        let v = self.shared.vrings.lock().unwrap().get(idx).cloned()?;
        let ok = {
            let s = v.get_ref();
            s.is_enabled() && s.get_queue().ready()
        };
        ok.then_some(v)
    }
}

/// Refuses socket paths no frontend can ever serve.
fn check_path(path: &Path) -> io::Result<()> {
    let bad =
        |why: &str| io::Error::new(io::ErrorKind::InvalidInput, format!("vhost-server-path {}: {why}", path.display()));
    if path.as_os_str().is_empty() {
        return Err(bad("empty"));
    }
    if !path.is_absolute() {
        return Err(bad("must be an absolute path"));
    }
    match std::fs::metadata(path) {
        Ok(m) => {
            use std::os::unix::fs::FileTypeExt;
            if !m.file_type().is_socket() {
                return Err(bad("exists and is not a Unix socket"));
            }
        }
        Err(_) => {
            let dir = path.parent().unwrap_or(Path::new("/"));
            if !dir.is_dir() {
                return Err(bad("directory does not exist"));
            }
        }
    }
    Ok(())
}

/// Connects, serves the connection until it ends, and connects again. Each
/// connection gets a fresh device (the frontend sets it up from scratch).
fn supervise(
    name: &str,
    mem: GuestMemoryAtomic<GuestMemoryMmap>,
    path: &Path,
    stop: &AtomicBool,
    shared: &Arc<Shared>,
) {
    let p = path.to_string_lossy().into_owned();
    while !stop.load(Ordering::Acquire) {
        // Wait for the frontend's socket before building a device for it.
        let is_sock = std::fs::metadata(path).map(|m| {
            use std::os::unix::fs::FileTypeExt;
            m.file_type().is_socket()
        });
        if !matches!(is_sock, Ok(true)) {
            thread::sleep(Duration::from_millis(100));
            continue;
        }
        let Some(mut daemon) = new_daemon(name, &mem, shared) else { continue };
        let started = std::os::unix::net::UnixStream::connect(&p).and_then(|f| start_relayed(&mut daemon, f, shared));
        if let Err(e) = started {
            *shared.last_error.lock().unwrap() = format!("connect: {e}");
            thread::sleep(Duration::from_millis(100));
            continue;
        }
        run_connection(&mut daemon, &mem, shared);
    }
}

/// A device for one connection (a second's pause on failure, noted).
fn new_daemon(
    name: &str,
    mem: &GuestMemoryAtomic<GuestMemoryMmap>,
    shared: &Arc<Shared>,
) -> Option<VhostUserDaemon<NetBackend>> {
    match VhostUserDaemon::new(format!("vhost-{name}"), NetBackend::new(shared.clone()), mem.clone()) {
        Ok(d) => Some(d),
        Err(e) => {
            *shared.last_error.lock().unwrap() = format!("vhost-user daemon: {e}");
            thread::sleep(Duration::from_secs(1));
            None
        }
    }
}

/// Starts `daemon` on a connection to `frontend` through the relay
/// (`proxy`): the device's message loop gets one end of a private
/// (abstract, per-connection) socket, the relay the other.
fn start_relayed(
    daemon: &mut VhostUserDaemon<NetBackend>,
    frontend: std::os::unix::net::UnixStream,
    shared: &Arc<Shared>,
) -> io::Result<()> {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let name = format!("xvs-vhost-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed));
    let addr = SocketAddr::from_abstract_name(name.as_bytes())?;
    let listener = UnixListener::bind_addr(&addr)?;
    // Queued in the backlog; the daemon accepts it below.
    let device_side = UnixStream::connect_addr(&addr)?;
    let mut l = vhost::vhost_user::Listener::from(listener);
    daemon.start(&mut l).map_err(|e| io::Error::other(format!("vhost-user daemon: {e}")))?;
    proxy::spawn(frontend, device_side, shared.relay_answered.clone())
}

/// Serves a connected frontend until it goes: the link is up meanwhile.
/// Its memory is unmapped when it goes (the port drops its own map once
/// it sees the link down), so a guest that was killed does not stay
/// mapped here, and nothing of one connection's memory table can serve
/// the next.
fn run_connection(
    daemon: &mut VhostUserDaemon<NetBackend>,
    mem: &GuestMemoryAtomic<GuestMemoryMmap>,
    shared: &Arc<Shared>,
) {
    shared.connects.fetch_add(1, Ordering::Relaxed);
    shared.connected.store(true, Ordering::Release);
    *shared.shutdown.lock().unwrap() = daemon.shutdown_handle();
    let r = daemon.wait();
    *shared.last_error.lock().unwrap() = format!("{r:?}");
    shared.connected.store(false, Ordering::Release);
    shared.vrings.lock().unwrap().clear();
    mem.lock().unwrap().replace(GuestMemoryMmap::new());
    shared.mem_gen.fetch_add(1, Ordering::Release);
}

/// Server mode: accepts a frontend on `listener`, serves it until it goes,
/// and accepts the next. A connection made after `stop` is set (the port's
/// own, to wake the accept) ends the loop.
fn serve(
    name: &str,
    mem: GuestMemoryAtomic<GuestMemoryMmap>,
    listener: vhost::vhost_user::Listener,
    stop: &AtomicBool,
    shared: &Arc<Shared>,
) {
    while !stop.load(Ordering::Acquire) {
        let Some(mut daemon) = new_daemon(name, &mem, shared) else { continue };
        let frontend = match listener.accept() {
            Ok(Some(f)) => f,
            Ok(None) => continue,
            Err(e) => {
                *shared.last_error.lock().unwrap() = format!("accept: {e}");
                thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        if stop.load(Ordering::Acquire) {
            break;
        }
        if let Err(e) = start_relayed(&mut daemon, frontend, shared) {
            *shared.last_error.lock().unwrap() = format!("accept: {e}");
            continue;
        }
        run_connection(&mut daemon, &mem, shared);
    }
}

impl Drop for VhostUserClientPort {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self.shared.shutdown.lock().unwrap().take() {
            h.shutdown();
        }
        if let Some(p) = self.server_path.take() {
            // Wake a server blocked in accept, then remove its socket.
            let _ = std::os::unix::net::UnixStream::connect(&p);
            let _ = std::fs::remove_file(&p);
        }
        // The supervisor may sit in a connect retry or in wait(); it ends
        // at its next turn. Do not block the caller on it.
        drop(self.supervisor.take());
    }
}

impl Netdev for VhostUserClientPort {
    fn name(&self) -> &str {
        &self.name
    }

    /// Up while the guest's driver is connected, 10 Gb/s (as OVS's
    /// vhost-user ports report).
    fn own_link(&self) -> Option<netdev::Link> {
        Some(netdev::Link {
            carrier: self.is_connected(),
            mac: netdev::synthetic_mac(&self.name),
            speed_mbps: 10_000,
            bfd_down: false,
        })
    }

    fn info(&self) -> PortInfo {
        let pairs = (0..MAX_QUEUE_PAIRS).filter(|i| self.vring(2 * i + 1).is_some()).count();
        let rxq: Vec<String> = self.rxq_packets.iter().map(|n| n.to_string()).collect();
        PortInfo {
            kind: if self.server_path.is_some() { "dpdkvhostuser" } else { "dpdkvhostuserclient" }.into(),
            xdp_mode: String::new(),
            n_rxq: MAX_QUEUE_PAIRS,
            detail: if self.is_connected() {
                format!(
                    "connected queue_pairs={pairs} rxq_packets={} tx_retries={} too_big={} offload_refused={} early_ring_enables={} ring_takeovers={} memory_tables={}",
                    rxq.join(","),
                    self.tx_retries,
                    self.too_big,
                    self.offload_refused,
                    self.early_ring_enables(),
                    self.ring_takeovers,
                    self.shared.mem_tables.load(Ordering::Relaxed)
                )
            } else {
                // Why the last connection ended (or could not start).
                match self.last_error() {
                    e if e.is_empty() => "link down".into(),
                    e => format!("link down (last: {e})"),
                }
            },
        }
    }

    fn n_rxq(&self) -> usize {
        MAX_QUEUE_PAIRS
    }

    /// As OVS-DPDK reports a vhost-user port: `mode` (client, or server
    /// for `dpdkvhostuser`) and `status` (connected/disconnected); while
    /// connected also `socket`, the virtio `features` the frontend
    /// accepted, `num_of_vrings` (the frontend's queues, up to the last
    /// one it set up) and `vring_N_size` of each. (OVS's `numa` and `mtu`
    /// are left out: the port does not look up the guest memory's node,
    /// and offers no `VIRTIO_NET_F_MTU`.)
    fn status(&self) -> Option<std::collections::BTreeMap<String, String>> {
        let mut m = std::collections::BTreeMap::new();
        let mode = if self.server_path.is_some() { "server" } else { "client" };
        m.insert("mode".to_string(), mode.to_string());
        if !self.is_connected() {
            m.insert("status".into(), "disconnected".into());
            return Some(m);
        }
        m.insert("status".into(), "connected".into());
        m.insert("socket".into(), self.socket.display().to_string());
        m.insert("features".into(), format!("{:#018x}", self.acked_features()));
        let sizes: Vec<Option<u16>> = self
            .shared
            .vrings
            .lock()
            .unwrap()
            .iter()
            .map(|v| {
                let s = v.get_ref();
                s.get_queue().ready().then(|| s.get_queue().size())
            })
            .collect();
        let n = sizes.iter().rposition(Option::is_some).map_or(0, |i| i + 1);
        m.insert("num_of_vrings".into(), n.to_string());
        for (i, s) in sizes[..n].iter().enumerate() {
            m.insert(format!("vring_{i}_size"), s.unwrap_or(0).to_string());
        }
        Some(m)
    }

    fn rx_batch(&mut self, rxq: usize, out: &mut Vec<Packet>, max: usize) -> io::Result<usize> {
        if rxq >= MAX_QUEUE_PAIRS || !self.queues_current() {
            return Ok(0);
        }
        // The queue and the map are moved out for the batch and back, not
        // cloned: a clone's reference counting, and the memory handle's
        // load, were 10% of the poll thread in VM-to-VM forwarding.
        let Some(vring) = self.guest_txq[rxq].take() else { return Ok(0) };
        let r = self.with_map(|port, map| port.rx_from(map, &vring, rxq, out, max));
        self.guest_txq[rxq] = Some(vring);
        r
    }

    fn tx_batch(&mut self, pkts: &mut Vec<Packet>) -> io::Result<()> {
        // The guest receive queues of the enabled pairs.
        if !self.queues_current() || self.guest_rxqs.is_empty() {
            self.stats.tx_dropped += pkts.len() as u64;
            pkts.clear();
            return Ok(());
        }
        let vrings = std::mem::take(&mut self.guest_rxqs);
        let r = self.with_map(|port, map| port.tx_to(map, &vrings, pkts));
        self.guest_rxqs = vrings;
        r
    }

    fn stats(&self) -> PortStats {
        self.stats
    }

    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        Some(self)
    }
}

impl VhostUserClientPort {
    /// Frames from the guest's transmit queue `vring` of pair `rxq`.
    fn rx_from(
        &mut self,
        map: &GuestMap,
        vring: &VringRwLock,
        rxq: usize,
        out: &mut Vec<Packet>,
        max: usize,
    ) -> io::Result<usize> {
        let mut st = vring.get_mut();
        if !st.is_enabled() || !st.get_queue().ready() {
            // Reset or disabled since the last look: look again next time.
            self.queues_left = 0;
            return Ok(0);
        }
        let q = st.get_queue_mut();
        let Some(mut ring) = Ring::new(map, q) else { return Ok(0) };
        self.take_over_positions(&mut ring, "a transmit queue");
        ring.suppress_kicks();
        if ring.poll_avail() == 0 {
            // (Positions taken over from the ring are kept.)
            ring.store(q);
            return Ok(0);
        }
        // First take up to `max` chains (ring slots and descriptors), then
        // copy the frames out, so the copies' cache misses overlap.
        self.chains.clear();
        self.chain_segs.clear();
        while self.chains.len() < max {
            let Some(head) = ring.pop() else { break };
            let from = self.chain_segs.len();
            let total = ring.chain(head, false, &mut self.segs);
            ring.push_used(head, 0);
            match total {
                Some(t) if (HDR_LEN..=MAX_FRAME + HDR_LEN).contains(&t) => {
                    ring::prefetch_segs(&self.segs, t.min(ring::PREFETCH_BYTES), usize::MAX);
                    self.chain_segs.extend_from_slice(&self.segs);
                    self.chains.push((head, t, from));
                }
                _ => self.stats.rx_dropped += 1,
            }
        }
        let mut n = 0;
        for (k, &(_, total, from)) in self.chains.iter().enumerate() {
            let to = self.chains.get(k + 1).map_or(self.chain_segs.len(), |c| c.2);
            let segs = &self.chain_segs[from..to];
            // flags (byte 0): NEEDS_CSUM; gso_type (byte 1): non-zero = GSO.
            let hdr = ring::read_hdr2(segs);
            if hdr[0] & 1 != 0 || hdr[1] != 0 {
                self.offload_refused += 1;
                self.stats.rx_dropped += 1;
                continue;
            }
            let len = total - HDR_LEN;
            let mut p = Packet::filled(len, |d| ring::read_segs(segs, HDR_LEN, d));
            // Checksum offload is not offered, and frames asking for it were
            // refused above: every checksum in this one is complete.
            p.csum_complete = true;
            out.push(p);
            self.stats.rx_packets += 1;
            self.rxq_packets[rxq] += 1;
            self.stats.rx_bytes += len as u64;
            n += 1;
        }
        ring.publish_used();
        ring.store(q);
        if ring.wants_call() {
            drop(st);
            self.calls += 1;
            let _ = vring.signal_used_queue();
        }
        Ok(n)
    }

    /// Frames to the guest, over its receive queues `vrings`.
    fn tx_to(&mut self, map: &GuestMap, vrings: &[VringRwLock], pkts: &mut Vec<Packet>) -> io::Result<()> {
        if vrings.len() == 1 {
            return self.tx_retrying(map, &vrings[0], pkts);
        }
        let mut by_queue: Vec<Vec<Packet>> = vec![Vec::new(); vrings.len()];
        for p in pkts.drain(..) {
            let h = p.rx_hash.unwrap_or_else(|| netdev::packet::frame_flow_hash(p.data()));
            by_queue[h as usize % vrings.len()].push(p);
        }
        for (v, mut batch) in vrings.iter().zip(by_queue) {
            if !batch.is_empty() {
                self.tx_retrying(map, v, &mut batch)?;
            }
        }
        Ok(())
    }

    /// Writes `pkts` into one guest receive virtqueue; what finds it full
    /// is tried again, up to `tx_retries_max` times (letting the guest run
    /// in between), then dropped and counted.
    fn tx_retrying(&mut self, map: &GuestMap, vring: &VringRwLock, pkts: &mut Vec<Packet>) -> io::Result<()> {
        let mut left = self.tx_queue(map, vring, pkts)?;
        let mut tries = 0;
        while !left.is_empty() && tries < self.tx_retries_max {
            tries += 1;
            self.tx_retries += 1;
            std::thread::yield_now();
            left = self.tx_queue(map, vring, &mut left)?;
        }
        self.stats.tx_dropped += left.len() as u64;
        Ok(())
    }

    /// Writes `pkts` into one guest receive virtqueue; returns those that
    /// found no room (in order). A frame takes as many chains as it needs
    /// (mergeable receive buffers); the header's `num_buffers` says how
    /// many.
    fn tx_queue(&mut self, map: &GuestMap, vring: &VringRwLock, pkts: &mut Vec<Packet>) -> io::Result<Vec<Packet>> {
        let mut st = vring.get_mut();
        if !st.is_enabled() || !st.get_queue().ready() {
            // Reset or disabled since the last look: look again next time.
            self.queues_left = 0;
            return Ok(std::mem::take(pkts));
        }
        let q = st.get_queue_mut();
        let Some(mut ring) = Ring::new(map, q) else { return Ok(std::mem::take(pkts)) };
        self.take_over_positions(&mut ring, "a receive queue");
        ring.suppress_kicks();
        ring.poll_avail();
        // First take the guest's buffers for as many frames as fit (ring
        // slots and descriptors only), then copy: the copies' cache misses
        // on guest buffers overlap, where taking and copying frame by frame
        // serialised them.
        self.chains.clear();
        self.chain_segs.clear();
        self.plans.clear();
        let mrg = self.shared.mrg_rxbuf.load(Ordering::Acquire);
        let mut sent_any = false;
        let mut planned = 0;
        for pkt in pkts.iter() {
            let need = HDR_LEN + pkt.len();
            let (first, first_seg) = (self.chains.len(), self.chain_segs.len());
            let (mut got, mut popped) = (0usize, 0u16);
            let mut bad = false;
            while got < need {
                if popped == 1 && !mrg {
                    break;
                }
                let Some(head) = ring.pop() else { break };
                popped += 1;
                match ring.chain(head, true, &mut self.segs) {
                    Some(cap) if cap > 0 => {
                        let take = cap.min(need - got);
                        let from = self.chain_segs.len();
                        self.chain_segs.extend_from_slice(&self.segs);
                        self.chains.push((head, take, from));
                        got += take;
                    }
                    _ => {
                        self.chains.push((head, 0, self.chain_segs.len()));
                        bad = true;
                        break;
                    }
                }
            }
            if bad {
                // A malformed chain: the chains taken go back to the guest
                // empty, and the frame is dropped.
                for &(head, _, _) in &self.chains[first..] {
                    ring.push_used(head, 0);
                }
                self.chains.truncate(first);
                self.chain_segs.truncate(first_seg);
                self.stats.tx_dropped += 1;
                self.plans.push(None);
                sent_any = true;
            } else if got < need && popped == 1 && !mrg {
                // Without mergeable buffers a frame must fit one chain, and
                // this one is too big for the guest's: dropped and counted;
                // the chain goes back for the next frame.
                ring.unpop(popped);
                self.chains.truncate(first);
                self.chain_segs.truncate(first_seg);
                self.stats.tx_dropped += 1;
                self.too_big += 1;
                self.plans.push(None);
            } else if got < need {
                // No room: give these chains back untouched; this frame and
                // the rest wait, in order.
                ring.unpop(popped);
                self.chains.truncate(first);
                self.chain_segs.truncate(first_seg);
                break;
            } else {
                self.plans.push(Some((first, self.chains.len())));
            }
            planned += 1;
        }
        for (k, &(_, take, from)) in self.chains.iter().enumerate() {
            let to = self.chains.get(k + 1).map_or(self.chain_segs.len(), |c| c.2);
            ring::prefetch_segs(&self.chain_segs[from..to], take.min(ring::PREFETCH_BYTES), HDR_LEN);
        }
        for (pkt, plan) in pkts[..planned].iter().zip(&self.plans) {
            let Some((c0, c1)) = *plan else { continue };
            let data = pkt.data();
            let num_buffers = (c1 - c0) as u16;
            let mut pos = 0usize;
            for k in c0..c1 {
                let (head, take, from) = self.chains[k];
                let to = self.chains.get(k + 1).map_or(self.chain_segs.len(), |c| c.2);
                let segs = &self.chain_segs[from..to];
                // This chain holds bytes [pos, pos + take) of header ++ frame.
                let end = pos + take;
                if pos == 0 && end >= HDR_LEN {
                    ring::write_hdr(segs, num_buffers);
                } else if pos < HDR_LEN {
                    // A first chain shorter than the header (legal, odd).
                    ring::write_segs(segs, 0, &ring::net_hdr(num_buffers)[pos..end.min(HDR_LEN)]);
                }
                let d0 = pos.max(HDR_LEN);
                if end > d0 {
                    ring::write_segs(segs, d0 - pos, &data[d0 - HDR_LEN..end - HDR_LEN]);
                }
                ring.push_used(head, take as u32);
                pos = end;
            }
            sent_any = true;
            self.stats.tx_packets += 1;
            self.stats.tx_bytes += data.len() as u64;
        }
        let left = pkts.split_off(planned);
        pkts.clear();
        if sent_any {
            ring.publish_used();
        }
        ring.store(q);
        if sent_any && ring.wants_call() {
            drop(st);
            self.calls += 1;
            let _ = vring.signal_used_queue();
        }
        Ok(left)
    }

    /// Resumes `ring` from the ring's own used index when the queue's
    /// positions disagree with it (see [`Ring::take_over_positions`]):
    /// after a reconnect to a frontend whose device kept running. Counted,
    /// and said on stderr (the first few times).
    fn take_over_positions(&mut self, ring: &mut Ring, which: &str) {
        if let Some((avail, used)) = ring.take_over_positions() {
            self.ring_takeovers += 1;
            if self.ring_takeovers <= 16 {
                eprintln!(
                    "xvs: port {}: {which} of the guest resumes at the ring's used index {} (the frontend's \
                     positions were avail {avail}, used {used})",
                    self.name, ring.next_used
                );
            }
        }
    }

    /// Runs `batch` with the guest memory as mapped now, moved out of the
    /// port for the batch and back (no reference counting). It is mapped
    /// again only when the frontend has sent a new memory table since (the
    /// message loop moves `mem_gen` after installing it), so a batch reads
    /// one counter.
    fn with_map<R>(&mut self, batch: impl FnOnce(&mut Self, &GuestMap) -> R) -> R {
        let g = self.shared.mem_gen.load(Ordering::Acquire);
        let map = match self.map.take() {
            Some(m) if g == self.map_gen => m,
            _ => {
                self.map_gen = g;
                Arc::new(GuestMap::new(self.mem.memory().into_inner()))
            }
        };
        let r = batch(self, &map);
        self.map = Some(map);
        r
    }
}
