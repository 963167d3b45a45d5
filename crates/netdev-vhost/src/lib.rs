//! # netdev-vhost: vhost-user ports (`dpdkvhostuserclient`)
//!
//! A virtual machine's virtio-net device talks to the switch through a
//! vhost-user socket that the frontend (QEMU, or DPDK's `net_virtio_user`)
//! owns. [`VhostUserClientPort`] connects to that socket as the vhost-user
//! *backend in client mode*, built on the rust-vmm crates: `vhost` speaks
//! the protocol (memory table, vring addresses, kick/call eventfds),
//! `vhost-user-backend` runs the message loop, `virtio-queue` walks split
//! virtqueues in the guest memory that `vm-memory` maps.
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
use vm_memory::{Address, Bytes, GuestAddress, GuestAddressSpace, GuestMemory, GuestMemoryAtomic, GuestMemoryMmap};

use backend::{NetBackend, Shared};

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
    /// Which pairs' transmit queues were enabled when last looked at, and
    /// the receive calls until the next look: idle queues of pairs the
    /// frontend did not enable cost a counter, not a lock.
    rx_enabled: [bool; MAX_QUEUE_PAIRS],
    rx_recheck: u32,
    offload_refused: u64,
    /// Call eventfd signals sent to the guest.
    calls: u64,
    stop: Arc<AtomicBool>,
    supervisor: Option<thread::JoinHandle<()>>,
    /// Server mode: the socket the port created.
    server_path: Option<std::path::PathBuf>,
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
        Self::start(name, None, move |n, m, st, sh| supervise(n, m, &p, st, sh))
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
        Self::start(name, Some(path.to_path_buf()), move |n, m, st, sh| serve(n, m, listener, st, sh))
    }

    /// The port, with `run` (the connection loop of its mode) on a thread
    /// of its own.
    fn start(
        name: &str,
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
            rx_enabled: [false; MAX_QUEUE_PAIRS],
            rx_recheck: 0,
            offload_refused: 0,
            calls: 0,
            stop,
            supervisor: Some(supervisor),
            server_path,
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

    /// Frames dropped because their header asked for GSO/checksum offload.
    pub fn offload_refused(&self) -> u64 {
        self.offload_refused
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
        if let Err(e) = daemon.start_client(&p) {
            *shared.last_error.lock().unwrap() = format!("connect: {e}");
            thread::sleep(Duration::from_millis(100));
            continue;
        }
        run_connection(&mut daemon, shared);
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

/// Serves a connected frontend until it goes: the link is up meanwhile.
fn run_connection(daemon: &mut VhostUserDaemon<NetBackend>, shared: &Arc<Shared>) {
    shared.connects.fetch_add(1, Ordering::Relaxed);
    shared.connected.store(true, Ordering::Release);
    *shared.shutdown.lock().unwrap() = daemon.shutdown_handle();
    let r = daemon.wait();
    *shared.last_error.lock().unwrap() = format!("{r:?}");
    shared.connected.store(false, Ordering::Release);
    shared.vrings.lock().unwrap().clear();
}

/// Server mode: accepts a frontend on `listener`, serves it until it goes,
/// and accepts the next. A connection made after `stop` is set (the port's
/// own, to wake the accept) ends the loop.
fn serve(
    name: &str,
    mem: GuestMemoryAtomic<GuestMemoryMmap>,
    mut listener: vhost::vhost_user::Listener,
    stop: &AtomicBool,
    shared: &Arc<Shared>,
) {
    while !stop.load(Ordering::Acquire) {
        let Some(mut daemon) = new_daemon(name, &mem, shared) else { continue };
        if let Err(e) = daemon.start(&mut listener) {
            *shared.last_error.lock().unwrap() = format!("accept: {e}");
            thread::sleep(Duration::from_millis(100));
            continue;
        }
        if stop.load(Ordering::Acquire) {
            daemon.request_shutdown();
            let _ = daemon.wait();
            break;
        }
        run_connection(&mut daemon, shared);
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
                format!("connected queue_pairs={pairs} rxq_packets={} tx_retries={}", rxq.join(","), self.tx_retries)
            } else {
                "link down".into()
            },
        }
    }

    fn n_rxq(&self) -> usize {
        MAX_QUEUE_PAIRS
    }

    fn rx_batch(&mut self, rxq: usize, out: &mut Vec<Packet>, max: usize) -> io::Result<usize> {
        if rxq >= MAX_QUEUE_PAIRS || !self.shared.connected.load(Ordering::Acquire) {
            return Ok(0);
        }
        if self.rx_recheck == 0 {
            self.rx_recheck = 1024;
            for i in 0..MAX_QUEUE_PAIRS {
                let txq = self.vring(2 * i + 1);
                self.rx_enabled[i] = txq.is_some();
                // The port polls both queues of a pair: the guest need not
                // kick (an eventfd write, and a wakeup of the vring thread,
                // per burst). Set again on every look, so a queue the
                // frontend set up afresh is covered too.
                for v in txq.into_iter().chain(self.vring(2 * i)) {
                    let _ = v.disable_notification();
                }
            }
        }
        self.rx_recheck -= 1;
        if !self.rx_enabled[rxq] {
            return Ok(0);
        }
        let Some(vring) = self.vring(2 * rxq + 1) else {
            self.rx_recheck = 0;
            return Ok(0);
        };
        let mem = self.mem.memory();
        let mut n = 0;
        let mut used = false;
        let mut st = vring.get_mut();
        let q = st.get_queue_mut();
        let mut buf = Vec::new();
        while n < max {
            let Some(chain) = q.pop_descriptor_chain(&*mem) else { break };
            let head = chain.head_index();
            buf.clear();
            let mut ok = true;
            for d in chain.readable() {
                let len = d.len() as usize;
                if buf.len() + len > MAX_FRAME + HDR_LEN {
                    ok = false;
                    break;
                }
                let at = buf.len();
                buf.resize(at + len, 0);
                if mem.read_slice(&mut buf[at..], d.addr()).is_err() {
                    ok = false;
                    break;
                }
            }
            q.add_used(&*mem, head, 0).map_err(io::Error::other)?;
            used = true;
            if !ok || buf.len() < HDR_LEN {
                self.stats.rx_dropped += 1;
                continue;
            }
            // flags (byte 0): NEEDS_CSUM; gso_type (byte 1): non-zero = GSO.
            if buf[0] & 1 != 0 || buf[1] != 0 {
                self.offload_refused += 1;
                self.stats.rx_dropped += 1;
                continue;
            }
            let frame = &buf[HDR_LEN..];
            self.stats.rx_packets += 1;
            self.rxq_packets[rxq] += 1;
            self.stats.rx_bytes += frame.len() as u64;
            out.push(Packet::from_slice(frame));
            n += 1;
        }
        if used && guest_wants_call(q, &*mem) {
            drop(st);
            self.calls += 1;
            let _ = vring.signal_used_queue();
        }
        Ok(n)
    }

    fn tx_batch(&mut self, pkts: &mut Vec<Packet>) -> io::Result<()> {
        // The guest receive queues of the enabled pairs.
        let vrings: Vec<VringRwLock> = (0..MAX_QUEUE_PAIRS).filter_map(|i| self.vring(2 * i)).collect();
        if vrings.is_empty() {
            self.stats.tx_dropped += pkts.len() as u64;
            pkts.clear();
            return Ok(());
        }
        if vrings.len() == 1 {
            return self.tx_retrying(&vrings[0], pkts);
        }
        let mut by_queue: Vec<Vec<Packet>> = vec![Vec::new(); vrings.len()];
        for p in pkts.drain(..) {
            let h = p.rx_hash.unwrap_or_else(|| netdev::packet::frame_flow_hash(p.data()));
            by_queue[h as usize % vrings.len()].push(p);
        }
        for (v, mut batch) in vrings.iter().zip(by_queue) {
            if !batch.is_empty() {
                self.tx_retrying(v, &mut batch)?;
            }
        }
        Ok(())
    }

    fn stats(&self) -> PortStats {
        self.stats
    }

    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        Some(self)
    }
}

impl VhostUserClientPort {
    /// Writes `pkts` into one guest receive virtqueue; what finds it full
    /// is tried again, up to `tx_retries_max` times (letting the guest run
    /// in between), then dropped and counted.
    fn tx_retrying(&mut self, vring: &VringRwLock, pkts: &mut Vec<Packet>) -> io::Result<()> {
        let mut left = self.tx_queue(vring, pkts)?;
        let mut tries = 0;
        while !left.is_empty() && tries < self.tx_retries_max {
            tries += 1;
            self.tx_retries += 1;
            std::thread::yield_now();
            left = self.tx_queue(vring, &mut left)?;
        }
        self.stats.tx_dropped += left.len() as u64;
        Ok(())
    }

    /// Writes `pkts` into one guest receive virtqueue; returns those that
    /// found no room (in order).
    fn tx_queue(&mut self, vring: &VringRwLock, pkts: &mut Vec<Packet>) -> io::Result<Vec<Packet>> {
        let mem = self.mem.memory();
        let mut st = vring.get_mut();
        let q = st.get_queue_mut();
        let mut sent_any = false;
        let mut chains: Vec<(u16, u32, GuestAddress)> = Vec::new();
        let mut left = Vec::new();
        for pkt in pkts.drain(..) {
            if !left.is_empty() {
                // The queue is full: the rest waits too, in order.
                left.push(pkt);
                continue;
            }
            let data = pkt.data();
            let need = HDR_LEN + data.len();
            let start_avail = q.next_avail();
            chains.clear();
            // Gather writable buffers (one or more chains) until the frame fits.
            let mut written = 0usize;
            let mut failed = false;
            let mut full = false;
            while written < need {
                let Some(chain) = q.pop_descriptor_chain(&*mem) else {
                    failed = true;
                    full = true;
                    break;
                };
                let head = chain.head_index();
                let mut this = 0u32;
                let mut first_addr = None;
                for d in chain.writable() {
                    if written >= need {
                        break;
                    }
                    first_addr.get_or_insert(d.addr());
                    let take = (d.len() as usize).min(need - written);
                    // Bytes [written, written+take) of header ++ frame.
                    let mut off = 0;
                    while off < take {
                        let pos = written + off;
                        let (src, n) = if pos < HDR_LEN {
                            (&HDR_ZERO[pos..], (HDR_LEN - pos).min(take - off))
                        } else {
                            let s = &data[pos - HDR_LEN..];
                            (s, s.len().min(take - off))
                        };
                        let addr = d.addr().unchecked_add(off as u64);
                        if mem.write_slice(&src[..n], addr).is_err() {
                            failed = true;
                        }
                        off += n;
                    }
                    written += take;
                    this += take as u32;
                }
                match first_addr {
                    Some(a) if !failed => chains.push((head, this, a)),
                    _ => {
                        failed = true;
                        chains.push((head, 0, GuestAddress(0)));
                        break;
                    }
                }
            }
            if failed {
                // Give the buffers back: the guest has not seen them used.
                q.set_next_avail(start_avail);
                if full {
                    left.push(pkt);
                } else {
                    self.stats.tx_dropped += 1;
                }
                continue;
            }
            // num_buffers (bytes 10..12 of the header, little endian).
            let nb = (chains.len() as u16).to_le_bytes();
            let _ = mem.write_slice(&nb, chains[0].2.unchecked_add(10));
            for &(head, len, _) in &chains {
                q.add_used(&*mem, head, len).map_err(io::Error::other)?;
            }
            sent_any = true;
            self.stats.tx_packets += 1;
            self.stats.tx_bytes += data.len() as u64;
        }
        if sent_any && guest_wants_call(q, &*mem) {
            drop(st);
            self.calls += 1;
            let _ = vring.signal_used_queue();
        }
        Ok(left)
    }
}

const HDR_ZERO: [u8; HDR_LEN] = [0; HDR_LEN];

/// Whether the guest wants its call eventfd signalled for buffers the port
/// used on `q`. Without `VIRTIO_F_EVENT_IDX` (not offered) a guest that
/// polls says so with `VRING_AVAIL_F_NO_INTERRUPT` in the available ring's
/// flags, which `virtio-queue` does not read; a polling guest then costs
/// no syscall per batch.
fn guest_wants_call<M: GuestMemory>(q: &impl QueueT, mem: &M) -> bool {
    // Read the flags after the used ring's index was published.
    std::sync::atomic::fence(Ordering::SeqCst);
    match mem.read_obj::<u16>(GuestAddress(q.avail_ring())) {
        Ok(flags) => u16::from_le(flags) & VRING_AVAIL_F_NO_INTERRUPT == 0,
        Err(_) => true,
    }
}

/// `avail->flags` bit: the driver does not want interrupts.
const VRING_AVAIL_F_NO_INTERRUPT: u16 = 1;
