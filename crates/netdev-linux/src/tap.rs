//! Tap device port: frames written to the fd appear as received by the
//! kernel's tap interface, and frames the kernel sends on the interface
//! are read from the fd. Also the bridge's "internal" (local) port.

use crate::sys;
use netdev::{Netdev, Packet, PortInfo, PortStats};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

/// Largest frame read from the tap (MTU 9000 + Ethernet + VLAN headers).
const MAX_FRAME: usize = 9022;

pub struct TapPort {
    fd: OwnedFd,
    name: String,
    kind: &'static str,
    buf: Box<[u8]>,
    stats: PortStats,
}

impl TapPort {
    /// Opens (creating if needed) tap device `name`, non-blocking, without
    /// packet-info header, and sets it up.
    pub fn open(name: &str) -> io::Result<TapPort> {
        Self::open_kind(name, "tap")
    }

    /// The internal port of bridge `bridge`: a tap named after the bridge.
    pub fn internal(bridge: &str) -> io::Result<TapPort> {
        Self::open_kind(bridge, "internal")
    }

    /// Keeps the kernel device (and the addresses and routes configured on
    /// it) when the port is closed, as Open vSwitch does for the internal
    /// ports of its userspace datapath, so a restarted switch finds the host
    /// side as it was; `false` lets the device go with the port.
    pub fn set_persistent(&mut self, on: bool) -> io::Result<()> {
        sys::set_tap_persist(self.fd.as_raw_fd(), on)
    }

    fn open_kind(name: &str, kind: &'static str) -> io::Result<TapPort> {
        let (fd, actual) = sys::open_tap(name)?;
        sys::set_link_up(&actual)?;
        Ok(TapPort {
            fd,
            name: actual,
            kind,
            buf: vec![0u8; MAX_FRAME].into_boxed_slice(),
            stats: PortStats::default(),
        })
    }
}

impl Netdev for TapPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn info(&self) -> PortInfo {
        PortInfo { kind: self.kind.into(), xdp_mode: String::new(), n_rxq: 1, detail: String::new() }
    }

    fn rx_batch(&mut self, _rxq: usize, out: &mut Vec<Packet>, max: usize) -> io::Result<usize> {
        let mut n = 0;
        while n < max {
            match sys::read(self.fd.as_raw_fd(), &mut self.buf) {
                Ok(0) => break,
                Ok(len) => {
                    let p = Packet::from_slice(&self.buf[..len]);
                    self.stats.rx_packets += 1;
                    self.stats.rx_bytes += len as u64;
                    out.push(p);
                    n += 1;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return if n > 0 { Ok(n) } else { Err(e) },
            }
        }
        Ok(n)
    }

    fn tx_batch(&mut self, pkts: &mut Vec<Packet>) -> io::Result<()> {
        let fd = self.fd.as_raw_fd();
        crate::send_each(pkts, &mut self.stats, |d| sys::write(fd, d));
        Ok(())
    }

    fn stats(&self) -> PortStats {
        self.stats
    }

    fn rx_fd(&self, _rxq: usize) -> Option<i32> {
        Some(self.fd.as_raw_fd())
    }

    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        Some(self)
    }
}
