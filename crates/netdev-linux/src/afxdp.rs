//! AF_XDP port: one socket per receive queue, the XDP redirect program on
//! the device, and a UMEM either private to the port or shared with other
//! ports.
//!
//! Receive: RX descriptors become [`Packet`]s that reference their UMEM
//! frame (no copy); dropping such a packet returns the frame to the pool.
//! Transmit (on queue 0's socket): a packet whose frame belongs to this
//! port's UMEM goes onto the TX ring as it is (`zero_copy_tx`); any other
//! packet is copied into a free frame (`copied_tx`). Completed TX frames
//! return to the pool when the completion ring is reaped, at every
//! `tx_batch` and `poll_housekeeping`.
//!
//! Except small packets on a socket the kernel copies for (`XDP_COPY`:
//! veth, drivers without AF_XDP zero-copy): the kernel reads each one
//! through its own mapping of the UMEM, one 4 KiB page per frame, and a
//! received frame comes back round only after the whole fill ring, so
//! that read missed the TLB and the cache (kernel memcpy 42-58 ns a frame
//! against OVS's 10-20, where OVS copies in user space into a frame of
//! its own). Copied here into a frame just reaped from the completion
//! ring, it is read from a handful of hot pages. Up to
//! [`SMALL_COPY`] bytes; beyond that the copy costs more than the miss.
//!
//! Multi-buffer (jumbo frames): every UMEM's first socket asks for
//! `XDP_USE_SG`, so a packet larger than a frame arrives as a chain of
//! descriptors (`XDP_PKT_CONTD` on all but the last) and may be sent as
//! one. A chain is received into one heap buffer (a copy: the datapath
//! parses and rewrites contiguous bytes; 9000 bytes cost about as much as
//! the veth hop itself) and sent as a chain of copied frames. A device
//! whose MTU needs more than a frame gets the `xdp.frags` program, which
//! has no kernel fast path.
//!
//! Batching: each call moves up to the ring space available (the datapath
//! uses [`netdev::BATCH`] = 32); the pool lock is taken once per fill-ring
//! refill, completion reap and copy allocation, not per packet.

use crate::sys::XdpDesc;
use crate::umem::{Umem, UmemConfig, UmemHandle, USER};
use crate::xsk::{BindMode, Xsk, XskConfig};
use bpf::{ActiveMode, Attached, XdpMode, XdpProgram};
use netdev::{Netdev, Packet, PortInfo, PortStats};
use std::io;
use std::sync::Arc;

/// Options of an AF_XDP port.
#[derive(Clone, Debug)]
pub struct AfxdpConfig {
    pub xdp_mode: XdpMode,
    /// Use the need_wakeup protocol (kick the kernel only when it asks).
    /// Ports sharing a UMEM inherit the setting of the UMEM's first socket.
    pub need_wakeup: bool,
    /// Receive queues 0..n_rxq get a socket each (the device must have
    /// that many; `ethtool -L DEV rx N tx N` changes it on veth). 0 (the
    /// default) means every receive queue the device has: frames arriving
    /// on a queue without a socket go to the kernel stack instead, and
    /// veth spreads traffic over its queues by the sender's TX queue.
    pub n_rxq: usize,
    /// Share this UMEM with the other ports given the same handle, so that
    /// forwarding between them moves descriptors, not bytes. `None`: the
    /// port gets a private UMEM and copies every packet it transmits
    /// ("copy mode").
    pub shared_umem: Option<UmemHandle>,
    /// Size of a private UMEM; `None` sizes it from the rings.
    pub private_umem: Option<UmemConfig>,
    /// Entries in each of the four rings of each socket (power of two).
    pub ring_size: u32,
    /// Copy or zero-copy socket binding. `Auto` binds generic-mode ports
    /// with `XDP_COPY`.
    pub bind_mode: BindMode,
    /// Detach whatever XDP program is on the device before attaching ours
    /// (e.g. one left by a process killed before it could clean up).
    pub clear_leftover_xdp: bool,
    /// Transmit flush interval in microseconds (OVS's
    /// `tx-flush-interval`): 0 kicks the kernel after every batch; N lets
    /// descriptors wait up to N µs (or until 32 are queued) so that one
    /// `sendto` carries many packets, for the poll thread to flush with
    /// [`Netdev::flush_tx`].
    pub tx_flush_us: u32,
}

impl Default for AfxdpConfig {
    fn default() -> Self {
        AfxdpConfig {
            xdp_mode: XdpMode::BestEffort,
            need_wakeup: true,
            n_rxq: 0,
            shared_umem: None,
            private_umem: None,
            ring_size: 1024,
            bind_mode: BindMode::Auto,
            clear_leftover_xdp: true,
            tx_flush_us: 0,
        }
    }
}

/// How a port's transmitted packets reached the TX ring.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TxPathCounters {
    /// Frames of this port's UMEM queued without copying.
    pub zero_copy: u64,
    /// Packets copied into a frame of this port's UMEM.
    pub copied: u64,
}

#[derive(Default)]
struct Counters {
    rx_packets: u64,
    rx_bytes: u64,
    tx_packets: u64,
    tx_bytes: u64,
    tx_dropped: u64,
    /// Packets too large to send (no multi-buffer, or over the chain
    /// limit), within `tx_dropped`.
    tx_oversize: u64,
    /// Received chains that were malformed (a bad frame in the middle).
    rx_bad_chain: u64,
    /// Packets sent with their TCP/UDP checksum left to the kernel (TX
    /// metadata).
    tx_csum_offloaded: u64,
    path: TxPathCounters,
}

/// Most descriptors one packet may take (the kernel's MAX_SKB_FRAGS + 1
/// with 4 KiB pages).
const MAX_CHAIN: usize = 18;

/// An AF_XDP port.
pub struct AfxdpPort {
    name: String,
    umem: Arc<Umem>,
    shared: bool,
    // Declared before `xsks`: dropped after them by the explicit Drop.
    xdp: Option<Attached>,
    xsks: Vec<Xsk>,
    mode: ActiveMode,
    c: Counters,
    /// Frame addresses, reused across calls (no per-batch allocation).
    scratch: Vec<u64>,
    /// Frames of this UMEM whose packets were copied for sending, freed
    /// together at the end of the batch.
    released: Vec<u64>,
    tx_flush: std::time::Duration,
    /// When the oldest descriptor not yet kicked was queued.
    tx_deferred: Option<std::time::Instant>,
    /// Per receive queue: the part of a multi-buffer packet received so
    /// far (its last descriptor not yet seen), and whether it is damaged.
    partial: Vec<(Vec<u8>, bool)>,
    /// The device's MTU (re-read about once a second by
    /// `poll_housekeeping`): longer frames are dropped and counted.
    mtu: u32,
    mtu_read: std::time::Instant,
}

/// The tail room kept free after copied packets is irrelevant; copies
/// start this far into their frame so later header pushes have room.
const TX_COPY_OFFSET: usize = 256;

/// Packets up to this size are copied into a recently used frame on a
/// socket the kernel copies for anyway (see the module notes).
const SMALL_COPY: usize = 256;

impl AfxdpPort {
    /// Opens an AF_XDP port on device `ifname`.
    pub fn open(ifname: &str, mut cfg: AfxdpConfig) -> io::Result<AfxdpPort> {
        let ifindex = crate::sys::if_nametoindex(ifname)?;
        if cfg.n_rxq == 0 {
            cfg.n_rxq = device_rx_queues(ifname)?;
        }
        if cfg.n_rxq == 0 || cfg.n_rxq > bpf::MAX_QUEUES as usize {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "n_rxq must be 1..=64"));
        }
        if cfg.clear_leftover_xdp && !bpf::xdp_hooks(ifname)?.is_empty() {
            bpf::detach_any_xdp(ifname)?;
        }
        // A frame larger than about a page needs the multi-buffer program
        // (veth refuses a single-buffer one above MTU ~3500).
        let mtu = device_mtu(ifname);
        let jumbo = mtu > SINGLE_BUFFER_MTU;
        let mut xdp = if jumbo {
            XdpProgram::attach_frags(ifindex, cfg.xdp_mode).map_err(|e| {
                io::Error::other(format!(
                    "{ifname}: MTU {mtu} needs a multi-buffer (xdp.frags) XDP program, which the device refused: {e}; \
                     lower the MTU to {SINGLE_BUFFER_MTU} or use type=afpacket"
                ))
            })?
        } else {
            XdpProgram::attach(ifindex, cfg.xdp_mode)?
        };
        let mode = xdp.mode();
        let bind_mode = match (cfg.bind_mode, mode) {
            (BindMode::Auto, ActiveMode::Generic) => BindMode::Copy,
            (m, _) => m,
        };
        let r = cfg.ring_size;
        let xcfg = XskConfig {
            rx_size: r,
            tx_size: r,
            fill_size: r,
            comp_size: r,
            need_wakeup: cfg.need_wakeup,
            bind_mode,
            sg: true,
        };
        let (umem, shared) = match &cfg.shared_umem {
            Some(h) => (h.0.clone(), true),
            None => {
                let ucfg = cfg
                    .private_umem
                    .unwrap_or(UmemConfig { nframes: (cfg.n_rxq as u32 * 2 + 2) * r + 1024, ..UmemConfig::default() });
                (Umem::new(ucfg)?, false)
            }
        };
        let mut port = AfxdpPort {
            name: ifname.to_string(),
            umem,
            shared,
            xdp: None,
            xsks: Vec::with_capacity(cfg.n_rxq),
            mode,
            c: Counters::default(),
            scratch: Vec::with_capacity(r as usize),
            released: Vec::with_capacity(r as usize),
            tx_flush: std::time::Duration::from_micros(cfg.tx_flush_us as u64),
            tx_deferred: None,
            partial: vec![(Vec::new(), false); cfg.n_rxq],
            mtu,
            mtu_read: std::time::Instant::now(),
        };
        for q in 0..cfg.n_rxq {
            let xsk = Xsk::new(&port.umem, ifindex, q as u32, &xcfg)?;
            if jumbo && !xsk.sg {
                return Err(io::Error::other(format!(
                    "{ifname}: MTU {mtu} needs multi-buffer AF_XDP (XDP_USE_SG), which {}; lower the MTU to \
                     {SINGLE_BUFFER_MTU} or use type=afpacket",
                    if port.shared {
                        "the shared UMEM's first socket was bound without"
                    } else {
                        "this kernel refused"
                    }
                )));
            }
            port.xsks.push(xsk);
            port.refill(q);
            xdp.insert_socket(q as u32, port.xsks[q].fd())?;
        }
        port.xdp = Some(xdp);
        Ok(port)
    }

    /// The UMEM of this port, to share with ports opened later.
    pub fn umem(&self) -> UmemHandle {
        UmemHandle(self.umem.clone())
    }

    pub fn xdp_mode(&self) -> ActiveMode {
        self.mode
    }

    pub fn tx_path_counters(&self) -> TxPathCounters {
        self.c.path
    }

    /// Whether the sockets run in zero-copy driver mode.
    pub fn driver_zero_copy(&self) -> bool {
        self.xsks.first().map(|x| x.zerocopy).unwrap_or(false)
    }

    /// Tops up the fill ring of queue `q` from the pool.
    fn refill(&mut self, q: usize) {
        let xsk = &mut self.xsks[q];
        let free = xsk.fill.free(netdev::BATCH as u32) as usize;
        if free < netdev::BATCH && free < xsk.fill.size() as usize {
            return;
        }
        self.scratch.clear();
        let n = self.umem.alloc(free, &mut self.scratch);
        for (i, &f) in self.scratch.iter().enumerate() {
            self.umem.set_tag(f, xsk.tag);
            xsk.fill.set(i as u32, f);
        }
        xsk.fill.submit(n as u32);
        self.scratch.clear();
    }

    /// Returns completed TX frames of the TX socket to the pool.
    fn reap_completions(&mut self) {
        let xsk = &mut self.xsks[0];
        let n = xsk.comp.peek(xsk.comp.size_hint());
        if n == 0 {
            return;
        }
        self.scratch.clear();
        for i in 0..n {
            let f = self.umem.frame_of(xsk.comp.get(i));
            if self.umem.valid_frame(f) {
                self.umem.set_tag(f, USER);
                self.scratch.push(f);
            }
        }
        xsk.comp.release(n);
        self.umem.free_batch(&self.scratch);
        self.scratch.clear();
    }

    /// Kicks the TX path until the ring is drained or the kernel pushes
    /// back. In copy mode each `sendto` sends a small batch (32), so a
    /// larger backlog takes several.
    fn kick_tx(&mut self) -> io::Result<()> {
        let xsk = &mut self.xsks[0];
        let mut pending = xsk.tx.outstanding();
        if pending == 0 || (xsk.need_wakeup && !xsk.tx.needs_wakeup()) {
            return Ok(());
        }
        let mut rounds = pending / 32 + 1;
        while pending > 0 && rounds > 0 {
            if !xsk.kick_tx()? {
                break;
            }
            rounds -= 1;
            pending = xsk.tx.outstanding();
        }
        Ok(())
    }
}

/// The largest MTU a single-buffer XDP program takes on veth (a frame,
/// its headroom and the skb's shared info within a 4 KiB page).
pub const SINGLE_BUFFER_MTU: u32 = 3498;

/// The device's MTU (1500 if unreadable).
fn device_mtu(ifname: &str) -> u32 {
    std::fs::read_to_string(format!("/sys/class/net/{ifname}/mtu"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(1500)
}

/// Number of receive queues device `ifname` has (in the current network
/// namespace), from `/sys/class/net/IFNAME/queues`.
pub fn device_rx_queues(ifname: &str) -> io::Result<usize> {
    let dir = std::fs::read_dir(format!("/sys/class/net/{ifname}/queues"))?;
    let n = dir.filter_map(|e| e.ok()).filter(|e| e.file_name().to_string_lossy().starts_with("rx-")).count();
    Ok(n.max(1))
}

impl AfxdpPort {
    /// The kernel fast-path maps of this port's XDP program, once.
    pub fn take_fast_path(&mut self) -> Option<bpf::FastPath> {
        self.xdp.as_mut()?.take_fast_path()
    }
}

impl Netdev for AfxdpPort {
    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        Some(self)
    }

    /// Offloaded checksums are filled by the kernel when the UMEM has TX
    /// metadata.
    fn tx_csum_offload(&self) -> bool {
        self.umem.tx_meta()
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn info(&self) -> PortInfo {
        let mut detail =
            vec![if self.shared { format!("shared-umem#{}", self.umem.id) } else { "private-umem (copy)".to_string() }];
        if self.xsks.first().map(|x| x.need_wakeup).unwrap_or(false) {
            detail.push("need_wakeup".into());
        }
        detail.push(if self.driver_zero_copy() { "xsk-zerocopy".into() } else { "xsk-copy".into() });
        detail.push(format!("zero_copy_tx={} copied_tx={}", self.c.path.zero_copy, self.c.path.copied));
        detail.push(format!("mtu={}", self.mtu));
        if self.xsks.first().is_some_and(|x| x.sg) {
            detail.push("multi-buffer".into());
        }
        detail.push(format!(
            "tx_oversize={} rx_bad_chain={} tx_csum_offloaded={}",
            self.c.tx_oversize, self.c.rx_bad_chain, self.c.tx_csum_offloaded
        ));
        PortInfo {
            kind: "afxdp".into(),
            xdp_mode: self.mode.as_str().into(),
            n_rxq: self.xsks.len(),
            detail: detail.join(" "),
        }
    }

    fn n_rxq(&self) -> usize {
        self.xsks.len()
    }

    fn rx_batch(&mut self, rxq: usize, out: &mut Vec<Packet>, max: usize) -> io::Result<usize> {
        if rxq >= self.xsks.len() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{}: no rx queue {rxq}", self.name)));
        }
        let xsk = &mut self.xsks[rxq];
        let n = xsk.rx.peek(max.min(u32::MAX as usize) as u32);
        let fsize = self.umem.config().frame_size as u64;
        out.reserve(n as usize);
        let mut got = 0;
        let (partial, bad) = &mut self.partial[rxq];
        // Ask for every frame's headers first: the misses overlap, and by
        // the time the datapath extracts frame i they are here.
        for i in 0..n {
            self.umem.prefetch(xsk.rx.get(i).addr);
        }
        for i in 0..n {
            let d: XdpDesc = xsk.rx.get(i);
            let frame = self.umem.frame_of(d.addr);
            let offset = (d.addr - frame) as usize;
            let valid = self.umem.valid_frame(frame) && offset as u64 + d.len as u64 <= fsize;
            let more = d.options & crate::sys::XDP_PKT_CONTD != 0;
            if !more && partial.is_empty() && !*bad {
                // The common case: a packet in one frame, received in place.
                if !valid {
                    continue; // Cannot happen with a sane kernel; lose the frame rather than panic.
                }
                self.umem.set_tag(frame, USER);
                let p = Packet::from_frame(self.umem.frame_buf(frame), offset, d.len as usize);
                self.c.rx_bytes += d.len as u64;
                out.push(p);
                got += 1;
                continue;
            }
            // A piece of a multi-buffer packet: copied out, the frame
            // goes back to the pool at once.
            if valid {
                self.umem.set_tag(frame, USER);
                self.umem.read_frame(frame, offset, d.len as usize, partial);
                self.umem.free_batch(&[frame]);
            } else {
                *bad = true;
            }
            if !more {
                if *bad {
                    self.c.rx_bad_chain += 1;
                } else {
                    self.c.rx_bytes += partial.len() as u64;
                    out.push(Packet::from_slice(partial));
                    got += 1;
                }
                partial.clear();
                *bad = false;
            }
        }
        xsk.rx.release(n);
        self.c.rx_packets += got;
        self.refill(rxq);
        let xsk = &self.xsks[rxq];
        if xsk.need_wakeup && xsk.fill.needs_wakeup() {
            xsk.kick_rx();
        }
        Ok(got as usize)
    }

    fn tx_batch(&mut self, pkts: &mut Vec<Packet>) -> io::Result<()> {
        if pkts.is_empty() {
            return Ok(());
        }
        self.reap_completions();
        let fsize = self.umem.config().frame_size as usize;
        let sg = self.xsks[0].sg;
        // With TX metadata the kernel reads `struct xsk_tx_metadata` right
        // in front of every descriptor's data, and refuses a descriptor
        // without that room in its frame: every packet starts at least
        // META bytes into its frame.
        let meta = if self.umem.tx_meta() { crate::sys::XSK_TX_METADATA_LEN as usize } else { 0 };
        let room_per_frame = fsize - meta;
        // Descriptors each packet takes: one, or a chain of copied frames
        // for a packet larger than a frame (multi-buffer).
        let descs = |p: &Packet| if p.len() <= room_per_frame { 1 } else { p.len().div_ceil(room_per_frame) };
        // Sent from its own frame: one of this UMEM's, with room in front.
        let ours = Arc::as_ptr(&self.umem);
        let in_our_umem = |p: &Packet| p.frame_owner().is_some_and(|o| std::ptr::addr_eq(Arc::as_ptr(o), ours));
        let kernel_copies = !self.driver_zero_copy();
        let zero_copy =
            |p: &Packet| !(kernel_copies && p.len() <= SMALL_COPY) && in_our_umem(p) && p.headroom() >= meta;
        // The device's MTU plus Ethernet and one VLAN tag, as the kernel
        // forwards them.
        let max_len = self.mtu as usize + 18;
        let size = self.xsks[0].tx.size();
        let mut room = self.xsks[0].tx.free(size) as usize;
        // Frames for the packets that need a copy and fit the ring, in one
        // allocation.
        let mut need_copy = 0;
        let mut slots = 0;
        for p in pkts.iter() {
            let n = descs(p);
            if slots + n > room {
                break;
            }
            slots += n;
            if !zero_copy(p) {
                need_copy += n;
            }
        }
        self.scratch.clear();
        self.umem.alloc(need_copy, &mut self.scratch);
        let tag = self.xsks[0].tag;
        let mut queued = 0u32;
        let mut sent = 0u64;
        for mut p in pkts.drain(..) {
            let len = p.len();
            if len > max_len {
                self.c.tx_dropped += 1;
                self.c.tx_oversize += 1;
                continue;
            }
            // A checksum left to offload: the kernel fills it from the
            // metadata (one-descriptor packets), or it is done here.
            let csum = match p.csum_partial {
                // The kernel sums from csum_start to the end of the frame:
                // only when nothing (Ethernet padding) follows the segment.
                Some(c) if meta > 0 && descs(&p) == 1 && c.start as usize + c.len as usize == len => {
                    p.csum_partial = None;
                    Some(c)
                }
                Some(_) => {
                    p.complete_checksum();
                    None
                }
                None => None,
            };
            let options = if csum.is_some() { crate::sys::XDP_TX_METADATA } else { 0 };
            if zero_copy(&p) {
                if room == 0 {
                    self.c.tx_dropped += 1;
                    continue;
                }
                let Ok((fb, parts)) = p.into_frame() else { unreachable!("checked frame-backed") };
                let (frame, _owner) = fb.into_raw();
                self.umem.set_tag(frame, tag);
                self.c.path.zero_copy += 1;
                if let Some(c) = csum {
                    self.umem.write_frame(frame, parts.offset - meta, &tx_metadata(c));
                }
                let desc = XdpDesc { addr: frame + parts.offset as u64, len: parts.len as u32, options };
                self.xsks[0].tx.set(queued, desc);
                queued += 1;
                room -= 1;
            } else {
                let n = descs(&p);
                if n > 1 && (!sg || n > MAX_CHAIN) {
                    self.c.tx_dropped += 1;
                    self.c.tx_oversize += 1;
                    continue;
                }
                if n > room || self.scratch.len() < n {
                    self.c.tx_dropped += 1;
                    continue;
                }
                // One frame (with headroom for later pushes) or a chain of
                // whole frames (each after the metadata room).
                let off = if n == 1 { TX_COPY_OFFSET.min(fsize - len) } else { meta };
                for (i, chunk) in p.data().chunks(room_per_frame).enumerate() {
                    let frame = self.scratch.pop().expect("counted above");
                    self.umem.write_frame(frame, off, chunk);
                    if let Some(c) = csum {
                        self.umem.write_frame(frame, off - meta, &tx_metadata(c));
                    }
                    self.umem.set_tag(frame, tag);
                    let options = if i + 1 < n { crate::sys::XDP_PKT_CONTD } else { options };
                    let desc = XdpDesc { addr: frame + off as u64, len: chunk.len() as u32, options };
                    self.xsks[0].tx.set(queued, desc);
                    queued += 1;
                }
                room -= n;
                self.c.path.copied += 1;
                // A frame of this UMEM goes back with the others after the
                // batch (one lock, not one per packet: 40 ns a frame).
                if in_our_umem(&p) {
                    if let Ok((fb, _)) = p.into_frame() {
                        let (frame, _owner) = fb.into_raw();
                        self.released.push(frame);
                    }
                } else {
                    // Its tunnel fields' box goes back to the pool, not to
                    // the allocator, when the packet is dropped here.
                    let _ = p.take_tnl();
                }
            }
            sent += 1;
            self.c.tx_csum_offloaded += csum.is_some() as u64;
            self.c.tx_bytes += len as u64;
        }
        self.xsks[0].tx.submit(queued);
        self.c.tx_packets += sent;
        // Frames allocated for packets that were dropped after all, and
        // those the copies were made from.
        self.umem.free_batch(&self.scratch);
        self.scratch.clear();
        self.umem.free_batch(&self.released);
        self.released.clear();
        if self.tx_flush.is_zero() || self.xsks[0].tx.outstanding() >= 32 {
            self.tx_deferred = None;
            return self.kick_tx();
        }
        self.tx_deferred.get_or_insert_with(std::time::Instant::now);
        Ok(())
    }

    fn flush_tx(&mut self, force: bool) -> bool {
        match self.tx_deferred {
            Some(t) if force || t.elapsed() >= self.tx_flush => {
                self.tx_deferred = None;
                let _ = self.kick_tx();
                false
            }
            Some(_) => true,
            None => false,
        }
    }

    fn stats(&self) -> PortStats {
        let mut rx_dropped = 0;
        let mut tx_invalid = 0;
        for x in &self.xsks {
            if let Ok(s) = x.statistics() {
                rx_dropped += s.rx_dropped + s.rx_ring_full + s.rx_invalid_descs;
                tx_invalid += s.tx_invalid_descs;
            }
        }
        PortStats {
            rx_packets: self.c.rx_packets,
            rx_bytes: self.c.rx_bytes,
            tx_packets: self.c.tx_packets,
            tx_bytes: self.c.tx_bytes,
            tx_dropped: self.c.tx_dropped + tx_invalid,
            rx_dropped,
        }
    }

    fn rx_fd(&self, rxq: usize) -> Option<i32> {
        self.xsks.get(rxq).map(|x| x.fd())
    }

    fn queue_stats(&self) -> Vec<netdev::QueueStats> {
        self.xsks
            .iter()
            .enumerate()
            .filter_map(|(q, x)| {
                let s = x.statistics().ok()?;
                Some(netdev::QueueStats {
                    queue: q,
                    rx_dropped: s.rx_dropped,
                    rx_invalid_descs: s.rx_invalid_descs,
                    tx_invalid_descs: s.tx_invalid_descs,
                    rx_ring_full: s.rx_ring_full,
                    rx_fill_ring_empty_descs: s.rx_fill_ring_empty_descs,
                })
            })
            .collect()
    }

    fn poll_housekeeping(&mut self) {
        if self.mtu_read.elapsed() >= std::time::Duration::from_secs(1) {
            self.mtu = device_mtu(&self.name);
            self.mtu_read = std::time::Instant::now();
        }
        self.reap_completions();
        let _ = self.kick_tx();
        for q in 0..self.xsks.len() {
            self.refill(q);
            let x = &self.xsks[q];
            if x.need_wakeup && x.fill.needs_wakeup() {
                x.kick_rx();
            }
        }
    }
}

impl Drop for AfxdpPort {
    fn drop(&mut self) {
        if let Some(xdp) = self.xdp.as_mut() {
            for q in 0..self.xsks.len() {
                let _ = xdp.remove_socket(q as u32);
            }
        }
        // Detach the program, then close the sockets (which frees their
        // frames back to the pool).
        self.xdp.take();
        self.xsks.clear();
    }
}

/// `struct xsk_tx_metadata` asking the kernel to fill the checksum `c`
/// describes (offsets from the descriptor's address), little-endian as
/// the kernel reads it on this host.
fn tx_metadata(c: netdev::CsumPartial) -> [u8; crate::sys::XSK_TX_METADATA_LEN as usize] {
    let mut m = [0u8; crate::sys::XSK_TX_METADATA_LEN as usize];
    m[0..8].copy_from_slice(&crate::sys::XDP_TXMD_FLAGS_CHECKSUM.to_ne_bytes());
    m[8..10].copy_from_slice(&c.start.to_ne_bytes());
    m[10..12].copy_from_slice(&c.offset.to_ne_bytes());
    m
}
