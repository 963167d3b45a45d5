//! # tunnel: native tunneling, sans-IO
//!
//! Open vSwitch's userspace datapath does "native tunneling": it adds and
//! removes Geneve, VXLAN and GRE headers itself and sends the result out
//! of an ordinary bridge port (typically `br-phy`, whose local port holds
//! the tunnel endpoint address), using its own copy of the kernel's routes
//! and its own ARP/ND cache. This crate holds the parts of that which need
//! no system call:
//!
//! * [`encap`]: building outer headers ([`encap::push`]) and taking them
//!   apart ([`encap::pop`]) with the tunnel metadata the OpenFlow pipeline
//!   matches (`tun_id`, `tun_src`, `tun_dst`, `tun_tos`, `tun_ttl`,
//!   `tun_flags`, VXLAN GBP, Geneve options). A malformed encapsulation is
//!   refused with a named reason ([`encap::DecapError`]) for the drop
//!   counters.
//! * [`route`]: the route table (longest prefix match; user routes from
//!   `ovs/route/add`), printed as `ovs/route/show` prints it.
//! * [`netlink`]: the rtnetlink messages that fill and update the table.
//! * [`neigh`]: the neighbour cache (`tnl/neigh/show`), learning from ARP
//!   and ND seen on bridges, and the requests sent for missing entries.
//!
//! Correctness property of the decoder: [`encap::pop`] accepts a frame only
//! if its outer header is complete, addressed to a configured tunnel port,
//! carries Ethernet, has consistent lengths (IP, UDP, Geneve options that
//! tile their area) and correct checksums where present; the returned inner
//! offset then always leaves at least an Ethernet header inside the outer
//! datagram. Everything here is single-threaded plain data: the datapath
//! keeps a snapshot per poll thread and the control plane updates it.
#![deny(unsafe_code)]

pub mod bfd;
pub mod config;
pub mod encap;
pub mod neigh;
pub mod netlink;
pub mod route;

pub use encap::{Decap, DecapError, EncapSpec, Kind, Listen, TunnelMeta};
pub use neigh::NeighCache;
pub use route::{Route, RouteTable};
