//! An in-memory port: tests push frames into its receive queue and read
//! what the switch sent from its transmit log.

use crate::{Netdev, Packet, PortInfo, PortStats};
use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Mutex};

/// The test's side of a dummy port.
#[derive(Clone, Default)]
pub struct DummyHandle {
    inner: Arc<Mutex<DummyQueues>>,
}

#[derive(Default)]
struct DummyQueues {
    rx: VecDeque<Vec<u8>>,
    tx: Vec<Vec<u8>>,
    /// Set by [`DummyHandle::set_link`]: the port reports no carrier.
    link_down: bool,
}

impl DummyHandle {
    /// Queues a frame for the switch to receive.
    pub fn inject(&self, frame: &[u8]) {
        self.inner.lock().unwrap().rx.push_back(frame.to_vec());
    }
    /// Takes every frame the switch sent out of this port.
    pub fn take_sent(&self) -> Vec<Vec<u8>> {
        std::mem::take(&mut self.inner.lock().unwrap().tx)
    }
    /// Sets the port's carrier (up by default), as a cable would.
    pub fn set_link(&self, up: bool) {
        self.inner.lock().unwrap().link_down = !up;
    }
    pub fn pending_rx(&self) -> usize {
        self.inner.lock().unwrap().rx.len()
    }
}

pub struct DummyPort {
    name: String,
    handle: DummyHandle,
    stats: PortStats,
    /// Keep sent frames (tests) or just count them (benchmarks).
    record_tx: bool,
}

impl DummyPort {
    pub fn new(name: &str) -> (DummyPort, DummyHandle) {
        let handle = DummyHandle::default();
        (DummyPort { name: name.into(), handle: handle.clone(), stats: PortStats::default(), record_tx: true }, handle)
    }

    /// A port that counts what it sends but keeps nothing (benchmarks).
    pub fn counting(name: &str) -> (DummyPort, DummyHandle) {
        let (mut p, h) = DummyPort::new(name);
        p.record_tx = false;
        (p, h)
    }
}

impl Netdev for DummyPort {
    fn name(&self) -> &str {
        &self.name
    }
    /// Up unless the test pulled the cable; 10 Gb/s, as OVS's dummy ports.
    fn own_link(&self) -> Option<crate::Link> {
        let up = !self.handle.inner.lock().unwrap().link_down;
        Some(crate::Link { carrier: up, mac: crate::synthetic_mac(&self.name), speed_mbps: 10_000, bfd_down: false })
    }
    fn info(&self) -> PortInfo {
        PortInfo { kind: "dummy".into(), n_rxq: 1, ..Default::default() }
    }
    fn rx_batch(&mut self, _rxq: usize, out: &mut Vec<Packet>, max: usize) -> io::Result<usize> {
        let mut q = self.handle.inner.lock().unwrap();
        Ok(crate::drain_frames(&mut q.rx, out, max, &mut self.stats))
    }
    fn tx_batch(&mut self, pkts: &mut Vec<Packet>) -> io::Result<()> {
        let mut q = self.handle.inner.lock().unwrap();
        for p in pkts.drain(..) {
            self.stats.tx_packets += 1;
            self.stats.tx_bytes += p.len() as u64;
            if self.record_tx {
                q.tx.push(p.data().to_vec());
            }
        }
        Ok(())
    }
    fn stats(&self) -> PortStats {
        self.stats
    }
}
