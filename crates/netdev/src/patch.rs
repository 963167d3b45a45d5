//! Patch ports: two in-memory ends that join two bridges of one process
//! (Open vSwitch's `type=patch` with `options:peer`). What one bridge sends
//! out of its end, the other bridge receives on the peer end.
//!
//! Each direction is a bounded queue of frame copies (a frame may live in
//! one poll thread's UMEM, which the other bridge's thread cannot use);
//! when the receiver falls behind, frames are dropped and counted as
//! `tx_dropped` on the sending end.

use crate::{Netdev, Packet, PortInfo, PortStats};
use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Mutex};

/// Frames a direction holds before dropping.
pub const PATCH_QUEUE: usize = 4096;

type Queue = Arc<Mutex<VecDeque<Vec<u8>>>>;

pub struct PatchPort {
    name: String,
    peer: String,
    rx: Queue,
    tx: Queue,
    stats: PortStats,
}

impl PatchPort {
    /// Creates both ends: `a` named `name_a` (peer `name_b`) and `b`.
    pub fn pair(name_a: &str, name_b: &str) -> (PatchPort, PatchPort) {
        let (q1, q2): (Queue, Queue) = (Default::default(), Default::default());
        let a = PatchPort {
            name: name_a.into(),
            peer: name_b.into(),
            rx: Arc::clone(&q1),
            tx: Arc::clone(&q2),
            stats: PortStats::default(),
        };
        let b = PatchPort { name: name_b.into(), peer: name_a.into(), rx: q2, tx: q1, stats: PortStats::default() };
        (a, b)
    }

    pub fn peer(&self) -> &str {
        &self.peer
    }
}

impl Netdev for PatchPort {
    fn name(&self) -> &str {
        &self.name
    }
    /// Always up, no speed (as OVS reports patch ports).
    fn own_link(&self) -> Option<crate::Link> {
        Some(crate::Link { carrier: true, mac: crate::synthetic_mac(&self.name), speed_mbps: 0, bfd_down: false })
    }
    fn info(&self) -> PortInfo {
        PortInfo { kind: "patch".into(), n_rxq: 1, detail: format!("peer={}", self.peer), ..Default::default() }
    }
    fn rx_batch(&mut self, _rxq: usize, out: &mut Vec<Packet>, max: usize) -> io::Result<usize> {
        let mut q = self.rx.lock().expect("patch queue");
        Ok(crate::drain_frames(&mut q, out, max, &mut self.stats))
    }
    fn tx_batch(&mut self, pkts: &mut Vec<Packet>) -> io::Result<()> {
        let mut q = self.tx.lock().expect("patch queue");
        for p in pkts.drain(..) {
            if q.len() >= PATCH_QUEUE {
                self.stats.tx_dropped += 1;
                continue;
            }
            self.stats.tx_packets += 1;
            self.stats.tx_bytes += p.len() as u64;
            q.push_back(p.data().to_vec());
        }
        Ok(())
    }
    fn stats(&self) -> PortStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_one_end_sends_the_other_receives() {
        let (mut a, mut b) = PatchPort::pair("pa", "pb");
        assert_eq!(b.peer(), "pa");
        a.tx_batch(&mut vec![Packet::from_slice(&[1, 2, 3]), Packet::from_slice(&[4])]).unwrap();
        let mut out = Vec::new();
        assert_eq!(b.rx_batch(0, &mut out, 32).unwrap(), 2);
        assert_eq!(out[0].data(), &[1, 2, 3]);
        assert_eq!(a.rx_batch(0, &mut out, 32).unwrap(), 0, "nothing comes back");
        // A full queue drops and counts.
        let mut many: Vec<Packet> = (0..PATCH_QUEUE + 5).map(|_| Packet::from_slice(&[0; 60])).collect();
        b.tx_batch(&mut many).unwrap();
        assert_eq!(b.stats().tx_dropped, 5);
        assert_eq!(a.rx_batch(0, &mut out, PATCH_QUEUE + 10).unwrap(), PATCH_QUEUE);
    }
}
