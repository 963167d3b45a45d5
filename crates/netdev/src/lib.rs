//! # netdev: ports
//!
//! A port is anything that can receive and send batches of Ethernet
//! frames: an AF_XDP socket on a kernel device, a tap device, an AF_PACKET
//! socket, or an in-memory [`dummy::DummyPort`] for tests and benchmarks.
//! Every provider implements [`Netdev`]; the datapath never knows which it
//! is talking to.
//!
//! Threading: a port is owned by one poll thread at a time (`Send`, not
//! `Sync`); the datapath serialises access when several threads send to it.
#![deny(unsafe_code)]

pub mod dummy;
pub mod packet;
pub mod patch;

pub use packet::{CsumPartial, Packet};

/// Moves up to `max` queued frames into `out` as packets, counting them
/// as received (the receive path of the in-memory ports).
pub(crate) fn drain_frames(
    q: &mut std::collections::VecDeque<Vec<u8>>,
    out: &mut Vec<Packet>,
    max: usize,
    stats: &mut PortStats,
) -> usize {
    let mut n = 0;
    while n < max {
        let Some(f) = q.pop_front() else { break };
        stats.rx_packets += 1;
        stats.rx_bytes += f.len() as u64;
        out.push(Packet::from_slice(&f));
        n += 1;
    }
    n
}
use std::io;

/// Maximum packets moved per rx/tx call.
pub const BATCH: usize = 32;

/// Per-port counters. Drops are named for their reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortStats {
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    /// Sent packets the port could not queue (ring full, socket error).
    pub tx_dropped: u64,
    /// Received packets lost before the datapath saw them (ring overflow,
    /// no free frame), as the kernel or provider reports them.
    pub rx_dropped: u64,
}

/// One AF_XDP socket's kernel counters (`XDP_STATISTICS`), per queue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueStats {
    pub queue: usize,
    /// Dropped by the kernel for reasons other than a full or empty ring.
    pub rx_dropped: u64,
    pub rx_invalid_descs: u64,
    pub tx_invalid_descs: u64,
    /// Dropped because the RX ring was full (the switch fell behind).
    pub rx_ring_full: u64,
    /// Times the fill ring was empty (no frame to receive into).
    pub rx_fill_ring_empty_descs: u64,
}

impl QueueStats {
    /// As Open vSwitch names them in the Interface `statistics` column
    /// (`xsk_queue_N_rx_dropped`...), its three first, then two more.
    pub fn named(&self) -> [(String, u64); 5] {
        let q = self.queue;
        [
            (format!("xsk_queue_{q}_rx_dropped"), self.rx_dropped),
            (format!("xsk_queue_{q}_rx_invalid_descs"), self.rx_invalid_descs),
            (format!("xsk_queue_{q}_tx_invalid_descs"), self.tx_invalid_descs),
            (format!("xsk_queue_{q}_rx_ring_full"), self.rx_ring_full),
            (format!("xsk_queue_{q}_rx_fill_ring_empty_descs"), self.rx_fill_ring_empty_descs),
        ]
    }
}

/// Static facts about a port, for `xvs show`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PortInfo {
    /// Provider: "afxdp", "tap", "internal", "system", "dummy".
    pub kind: String,
    /// For AF_XDP: "native", "generic"; empty otherwise.
    pub xdp_mode: String,
    pub n_rxq: usize,
    /// Free-form details ("shared-umem", "need_wakeup", "copy"...).
    pub detail: String,
}

/// A port's link as the port itself knows it: for ports that are not a
/// kernel device (patch, dummy, tunnel, vhost-user). Kernel devices are
/// asked through the kernel by the control plane, outside any lock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Link {
    pub carrier: bool,
    pub mac: [u8; 6],
    /// 0 when the port has no speed to speak of.
    pub speed_mbps: u64,
    /// The port runs BFD and its session is not up: the link is there,
    /// but the port is not live (OpenFlow's LIVE bit, fast failover), as
    /// in Open vSwitch.
    pub bfd_down: bool,
}

/// A stable, locally administered MAC for a port without a device of its
/// own, derived from its name (the same across restarts).
pub fn synthetic_mac(name: &str) -> [u8; 6] {
    // FNV-1a over the name.
    let h = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3));
    let b = h.to_be_bytes();
    [0x02 | (b[0] & 0xfc), b[1], b[2], b[3], b[4], b[5]]
}

/// The port interface every provider implements.
pub trait Netdev: Send {
    /// The link of a port that is not a kernel device; `None` (the
    /// default) for ports backed by a kernel device of the port's name,
    /// whose carrier, address and speed the kernel reports.
    fn own_link(&self) -> Option<Link> {
        None
    }

    /// The port fills a TCP/UDP checksum left to offload
    /// ([`Packet::csum_partial`]) itself on transmit. Packets for ports
    /// that do not are completed in software before `tx_batch`.
    fn tx_csum_offload(&self) -> bool {
        false
    }

    /// Per-queue kernel counters (AF_XDP ports); empty for others.
    fn queue_stats(&self) -> Vec<QueueStats> {
        Vec::new()
    }

    /// Kernel (or dummy) device name.
    fn name(&self) -> &str;

    fn info(&self) -> PortInfo;

    /// Number of receive queues this port polls.
    fn n_rxq(&self) -> usize {
        1
    }

    /// Receives up to `max` packets from queue `rxq`, appending them to
    /// `out`. Returns how many were appended; `Ok(0)` when none are ready.
    /// Never blocks.
    fn rx_batch(&mut self, rxq: usize, out: &mut Vec<Packet>, max: usize) -> io::Result<usize>;

    /// Sends every packet in `pkts`, draining it. The port owns the packets
    /// from here on; those it cannot queue are dropped and counted in
    /// `tx_dropped`. Never blocks.
    fn tx_batch(&mut self, pkts: &mut Vec<Packet>) -> io::Result<()>;

    fn stats(&self) -> PortStats;

    /// A file descriptor that becomes readable when queue `rxq` has
    /// packets, for poll threads that sleep when idle. `None` if the port
    /// can only be polled.
    fn rx_fd(&self, _rxq: usize) -> Option<i32> {
        None
    }

    /// Hands transmit descriptors a port deferred (see its flush interval)
    /// to the kernel if they waited long enough, or now with `force`.
    /// Returns whether some are still waiting.
    fn flush_tx(&mut self, _force: bool) -> bool {
        false
    }

    /// Housekeeping the owner calls regularly (refill rings, reap
    /// completions, kick the kernel).
    fn poll_housekeeping(&mut self) {}

    /// For a port running a BFD session: its Interface `bfd_status`
    /// column (`state`, `forwarding`, `diagnostic`, ...).
    fn bfd_status(&self) -> Option<std::collections::BTreeMap<String, String>> {
        None
    }

    /// The port's Interface `status` column (key-value facts about its
    /// device, as Open vSwitch reports them per port type); `None` leaves
    /// the column alone.
    fn status(&self) -> Option<std::collections::BTreeMap<String, String>> {
        None
    }

    /// The concrete port, for callers that need a provider's own features
    /// (e.g. the AF_XDP port's kernel fast-path maps). `None` by default.
    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        None
    }
}
