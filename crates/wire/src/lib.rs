//! # wire: checksums and a packet builder
//!
//! * [`checksum`]: the internet checksum, RFC 1624 incremental updates
//!   (used by the datapath when it rewrites headers), and CRC32c for SCTP.
//! * [`build`]: a builder of complete, valid frames (Ethernet, VLAN tags,
//!   ARP, IPv4, IPv6, UDP, TCP, SCTP, ICMP, ICMPv6 echo and neighbour
//!   discovery) for tests, benchmarks and traffic generators.
//! * [`views`]: zero-copy, length-checked header views in the smoltcp
//!   style (`wire::ipv4::Packet::new_checked(&buf[14..])`) for Ethernet,
//!   VLAN, ARP, IPv4, IPv6 (extension header walk), TCP, UDP, SCTP, ICMPv4
//!   and ICMPv6/ND, with `rewrite_*` setters that patch checksums.
//!
//! Header parsing for the switch lives in `flow::extract`, which reads
//! fields straight into the flow key.
#![deny(unsafe_code)]

pub mod build;
pub mod checksum;
pub mod views;

pub use views::{arp, ethernet, ethertype, icmpv4, icmpv6, ipproto, ipv4, ipv6, sctp, tcp, udp, vlan};
