//! One AF_XDP socket: its four rings and its binding to a device queue.
//!
//! The first socket of a UMEM registers it (`XDP_UMEM_REG`); later sockets
//! bind with `XDP_SHARED_UMEM` naming any bound socket of the same UMEM.
//! Every socket has its own fill and completion rings, which the kernel
//! (5.10+) requires for sharing across devices or queues. Sharing sockets
//! inherit the copy/zero-copy and need_wakeup settings of the socket they
//! share with (the kernel refuses those flags together with
//! `XDP_SHARED_UMEM`).

use crate::ring::{ConsRing, ProdRing};
use crate::sys::{self, MmapOffsets, SockaddrXdp, XdpDesc, XdpStatistics};
use crate::umem::Umem;
use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;

/// Copy or zero-copy binding of a socket to its device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BindMode {
    /// Zero-copy if the driver supports it, copy otherwise.
    #[default]
    Auto,
    /// `XDP_COPY`: the kernel copies between its buffers and the UMEM.
    Copy,
    /// `XDP_ZEROCOPY`: fail if the driver cannot.
    ZeroCopy,
}

#[derive(Clone, Copy, Debug)]
pub struct XskConfig {
    pub rx_size: u32,
    pub tx_size: u32,
    pub fill_size: u32,
    pub comp_size: u32,
    pub need_wakeup: bool,
    pub bind_mode: BindMode,
    /// Ask for multi-buffer packets (`XDP_USE_SG`) when this socket is the
    /// UMEM's first; refused by kernels without it, then bound without.
    pub sg: bool,
}

impl Default for XskConfig {
    fn default() -> Self {
        XskConfig {
            rx_size: 1024,
            tx_size: 1024,
            fill_size: 1024,
            comp_size: 1024,
            need_wakeup: true,
            bind_mode: BindMode::Auto,
            sg: true,
        }
    }
}

pub struct Xsk {
    fd: Option<OwnedFd>,
    raw_fd: RawFd,
    pub(crate) tag: u32,
    pub(crate) umem: Arc<Umem>,
    pub(crate) fill: ProdRing<u64>,
    pub(crate) comp: ConsRing<u64>,
    pub(crate) rx: ConsRing<XdpDesc>,
    pub(crate) tx: ProdRing<XdpDesc>,
    /// Whether the kernel uses the need_wakeup protocol on these rings.
    pub(crate) need_wakeup: bool,
    pub(crate) zerocopy: bool,
    /// Packets may span several descriptors (`XDP_PKT_CONTD`).
    pub(crate) sg: bool,
}

fn ring_sizes_ok(c: &XskConfig) -> bool {
    [c.rx_size, c.tx_size, c.fill_size, c.comp_size].iter().all(|s| s.is_power_of_two())
}

impl Xsk {
    /// Creates a socket on `ifindex`/`queue` using `umem`.
    pub(crate) fn new(umem: &Arc<Umem>, ifindex: u32, queue: u32, cfg: &XskConfig) -> io::Result<Xsk> {
        if !ring_sizes_ok(cfg) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "AF_XDP ring sizes must be powers of two"));
        }
        let fd = sys::socket(sys::AF_XDP, libc::SOCK_RAW, 0)?;
        let raw = fd.as_raw_fd();
        // Held until bound, so the socket we share with stays open.
        let mut bound = umem.sockets();
        let share_with = bound.first().map(|&(_, fd)| fd);
        if share_with.is_none() {
            // With room for TX metadata (checksum offload) where the kernel
            // has it (6.8+); without, where it refuses the field.
            let with_meta = sys::setsockopt(raw, sys::SOL_XDP, sys::XDP_UMEM_REG, &umem.reg(true));
            match with_meta {
                Ok(()) => umem.set_tx_meta(true),
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    sys::setsockopt(raw, sys::SOL_XDP, sys::XDP_UMEM_REG, &umem.reg(false))?;
                    umem.set_tx_meta(false);
                }
                Err(e) => return Err(e),
            }
        }
        sys::setsockopt(raw, sys::SOL_XDP, sys::XDP_UMEM_FILL_RING, &cfg.fill_size)?;
        sys::setsockopt(raw, sys::SOL_XDP, sys::XDP_UMEM_COMPLETION_RING, &cfg.comp_size)?;
        sys::setsockopt(raw, sys::SOL_XDP, sys::XDP_RX_RING, &cfg.rx_size)?;
        sys::setsockopt(raw, sys::SOL_XDP, sys::XDP_TX_RING, &cfg.tx_size)?;
        let (off, _) = sys::getsockopt::<MmapOffsets>(raw, sys::SOL_XDP, sys::XDP_MMAP_OFFSETS)?;

        let map = |o: &sys::RingOffset, n: u32, elem: usize, pgoff: i64| {
            sys::Mmap::ring(raw, o.desc as usize + n as usize * elem, pgoff)
        };
        let d = size_of::<XdpDesc>();
        let fill =
            ProdRing::new(map(&off.fr, cfg.fill_size, 8, sys::XDP_UMEM_PGOFF_FILL_RING)?, &off.fr, cfg.fill_size)?;
        let comp = ConsRing::new(
            map(&off.cr, cfg.comp_size, 8, sys::XDP_UMEM_PGOFF_COMPLETION_RING)?,
            &off.cr,
            cfg.comp_size,
        )?;
        let rx = ConsRing::new(map(&off.rx, cfg.rx_size, d, sys::XDP_PGOFF_RX_RING)?, &off.rx, cfg.rx_size)?;
        let tx = ProdRing::new(map(&off.tx, cfg.tx_size, d, sys::XDP_PGOFF_TX_RING)?, &off.tx, cfg.tx_size)?;

        let mut sa = SockaddrXdp { family: sys::AF_XDP as u16, ifindex, queue_id: queue, ..Default::default() };
        match share_with {
            Some(other) => {
                sa.flags = sys::XDP_SHARED_UMEM;
                sa.shared_umem_fd = other as u32;
            }
            None => {
                if cfg.need_wakeup {
                    sa.flags |= sys::XDP_USE_NEED_WAKEUP;
                }
                sa.flags |= match cfg.bind_mode {
                    BindMode::Auto => 0,
                    BindMode::Copy => sys::XDP_COPY,
                    BindMode::ZeroCopy => sys::XDP_ZEROCOPY,
                };
            }
        }
        let mut sg = false;
        if share_with.is_none() && cfg.sg {
            let mut with_sg = sa;
            with_sg.flags |= sys::XDP_USE_SG;
            match bind_retrying(raw, &with_sg) {
                Ok(()) => sg = true,
                // A kernel without multi-buffer AF_XDP (EINVAL), or a
                // zero-copy driver without it (EOPNOTSUPP): bind without.
                Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::EOPNOTSUPP)) => {}
                Err(e) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("binding AF_XDP socket to ifindex {ifindex} queue {queue}: {e}"),
                    ))
                }
            }
        }
        if !sg {
            bind_retrying(raw, &sa).map_err(|e| {
                io::Error::new(e.kind(), format!("binding AF_XDP socket to ifindex {ifindex} queue {queue}: {e}"))
            })?;
        }
        let tag = umem.new_tag();
        bound.push((tag, raw));
        drop(bound);

        let (opts, _) = sys::getsockopt::<u32>(raw, sys::SOL_XDP, sys::XDP_OPTIONS)?;
        let zerocopy = opts & sys::XDP_OPTIONS_ZEROCOPY != 0;
        // A sharing socket inherits need_wakeup from the pool it shares;
        // all sockets of one UMEM are created with the same setting, so the
        // first socket's setting is recorded in the UMEM's config below.
        let (need_wakeup, sg) = match share_with {
            None => {
                umem.set_need_wakeup(cfg.need_wakeup);
                umem.set_sg(sg);
                (cfg.need_wakeup, sg)
            }
            Some(_) => (umem.need_wakeup(), umem.sg()),
        };
        Ok(Xsk { fd: Some(fd), raw_fd: raw, tag, umem: umem.clone(), fill, comp, rx, tx, need_wakeup, zerocopy, sg })
    }

    pub fn fd(&self) -> RawFd {
        self.raw_fd
    }

    /// Kernel counters of this socket.
    pub fn statistics(&self) -> io::Result<XdpStatistics> {
        Ok(sys::getsockopt::<XdpStatistics>(self.raw_fd, sys::SOL_XDP, sys::XDP_STATISTICS)?.0)
    }

    /// Asks the kernel to process the TX ring. Transient refusals (the
    /// kernel processes at most a small batch per call, or the device
    /// queue is full) are not errors: the caller retries on its next pass.
    pub(crate) fn kick_tx(&self) -> io::Result<bool> {
        match sys::sendto_kick(self.raw_fd) {
            Ok(()) => Ok(true),
            Err(e) => match e.raw_os_error() {
                Some(libc::EAGAIN | libc::EBUSY | libc::ENOBUFS | libc::ENETDOWN) => Ok(false),
                _ => Err(e),
            },
        }
    }

    /// Wakes the kernel's fill-ring processing (need_wakeup protocol).
    pub(crate) fn kick_rx(&self) {
        let _ = sys::recvfrom_kick(self.raw_fd);
    }
}

/// `bind`, retried for up to a second while the device queue is busy: a
/// socket just closed on the same queue (a port reopened) releases its
/// buffer pool in a kernel work item, after the close returns.
fn bind_retrying(fd: RawFd, sa: &SockaddrXdp) -> io::Result<()> {
    let t0 = std::time::Instant::now();
    loop {
        match sys::bind(fd, sa) {
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && t0.elapsed() < std::time::Duration::from_secs(1) => {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            r => return r,
        }
    }
}

impl Drop for Xsk {
    fn drop(&mut self) {
        // Close while holding the registry lock so no new socket binds
        // through this fd (or a reused fd number) meanwhile.
        let mut bound = self.umem.sockets();
        bound.retain(|&(t, _)| t != self.tag);
        drop(self.fd.take());
        drop(bound);
        // The kernel no longer holds any frame for this socket.
        self.umem.reclaim(self.tag);
    }
}
