//! # netdev-linux: ports backed by the Linux kernel
//!
//! * [`AfxdpPort`]: AF_XDP sockets fed by the XDP program of the `bpf`
//!   crate, with this crate's own UMEM and ring code ([`umem`], [`ring`],
//!   [`xsk`]); packets reference UMEM frames, and ports sharing a
//!   [`UmemHandle`] forward without copying.
//! * [`TapPort`]: tap devices, including the bridge's internal port.
//! * [`AfPacketPort`]: raw AF_PACKET sockets, for devices without XDP.
//!
//! ## Sharing a UMEM between ports
//!
//! ```no_run
//! use netdev_linux::{AfxdpConfig, AfxdpPort, UmemConfig, UmemHandle};
//! use netdev::Netdev;
//! let umem = UmemHandle::new(UmemConfig::default())?;
//! let cfg = AfxdpConfig { shared_umem: Some(umem.clone()), ..Default::default() };
//! let mut a = AfxdpPort::open("veth0", cfg.clone())?;
//! let mut b = AfxdpPort::open("veth1", cfg)?;
//! // One poll thread owns both ports:
//! let mut batch = Vec::with_capacity(netdev::BATCH);
//! loop {
//!     a.rx_batch(0, &mut batch, netdev::BATCH)?;
//!     b.tx_batch(&mut batch)?; // descriptors move, bytes do not
//!     b.rx_batch(0, &mut batch, netdev::BATCH)?;
//!     a.tx_batch(&mut batch)?;
//!     a.poll_housekeeping();
//!     b.poll_housekeeping();
//! #   break;
//! }
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! ## Receive hash
//!
//! `Packet::rx_hash` carries a NIC-supplied hash only: the NIC's hash
//! through XDP metadata needs a device-bound program that aya 0.14 cannot
//! load, and veth has none, so ports leave it `None`. The datapath hashes
//! the flow key it extracts anyway (the EMC needs that hash), so a second
//! software hash per packet would be pure cost (it measured 3.5% of a poll
//! thread's cycles). [`hash::flow_hash`] remains for users that need a
//! symmetric hash of raw frames.
//!
//! ## Kernel behaviour worth knowing
//!
//! * A socket bound with `XDP_SHARED_UMEM` may not pass `XDP_COPY`,
//!   `XDP_ZEROCOPY` or `XDP_USE_NEED_WAKEUP` (EINVAL): it inherits them from
//!   the socket it shares with, so the first port of a UMEM decides.
//! * The socket named in `sxdp_shared_umem_fd` must be bound; the UMEM keeps
//!   a registry of its bound sockets and re-registers the memory if the
//!   last one closed.
//! * When a socket closes, frames it had handed to the kernel (fill ring,
//!   RX ring, TX/completion rings, the kernel's private caches) are simply
//!   forgotten; the per-frame owner tags in [`umem`] recover them.
//! * In copy mode each TX `sendto` transmits at most 32 descriptors, and on
//!   veth it runs the whole transmit (and the peer's receive) on the
//!   caller's core; batches in a forwarding loop stay near 1-2 packets.
//! * veth delivers a frame to the receive queue numbered like the sender's
//!   TX queue; frames on queues without a socket go to the stack, hence the
//!   default of one socket per device queue.
//! * veth has no zero-copy driver mode: sockets bind in copy mode, and
//!   "zero copy" here means no user-space copy between ports.
//!
//! ## Throughput (2-core VM, veth, 64-byte UDP from trafgen)
//!
//! `examples/wire.rs` forwarded about 0.35-0.44 Mpps in every mode (shared
//! UMEM or copy, native or generic), limited by the generator sharing the
//! machine; the forwarding core spent about 2.2-2.4 µs per packet, nearly
//! all of it in the TX kick.
//!
//! Unsafe code lives in [`sys`] (every system call), [`ring`] (the shared
//! ring memory) and [`umem`] (frame memory); each block says why it is
//! sound.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

pub mod afpacket;
pub mod afxdp;
pub mod genl;
pub mod hash;
pub mod ring;
pub mod rtnl;
pub mod sys;
pub mod tap;
pub mod umem;
pub mod xsk;

/// Sends each packet with `send_one` (one system call per frame, as tap
/// and AF_PACKET sockets take them), counting sent and dropped frames.
pub(crate) fn send_each(
    pkts: &mut Vec<netdev::Packet>,
    stats: &mut netdev::PortStats,
    mut send_one: impl FnMut(&[u8]) -> std::io::Result<usize>,
) {
    for p in pkts.drain(..) {
        match send_one(p.data()) {
            Ok(_) => {
                stats.tx_packets += 1;
                stats.tx_bytes += p.len() as u64;
            }
            // Interface down, queue full...: the frame is dropped.
            Err(_) => stats.tx_dropped += 1,
        }
    }
}

pub use afpacket::AfPacketPort;
pub use afxdp::{AfxdpConfig, AfxdpPort, TxPathCounters};
pub use bpf::{detach_any_xdp, ActiveMode, XdpMode};
pub use tap::TapPort;
pub use umem::{UmemConfig, UmemHandle};
pub use xsk::BindMode;
