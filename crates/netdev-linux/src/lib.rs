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
//! Unsafe code lives in [`sys`] (every system call), [`ring`] (the shared
//! ring memory) and [`umem`] (frame memory); each block says why it is
//! sound.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

pub mod afpacket;
pub mod afxdp;
pub mod hash;
pub mod ring;
pub mod sys;
pub mod tap;
pub mod umem;
pub mod xsk;

pub use afpacket::AfPacketPort;
pub use afxdp::{AfxdpConfig, AfxdpPort, TxPathCounters};
pub use bpf::{detach_any_xdp, ActiveMode, XdpMode};
pub use tap::TapPort;
pub use umem::{UmemConfig, UmemHandle};
pub use xsk::BindMode;
