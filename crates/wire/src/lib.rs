//! # wire: checksums and a packet builder
//!
//! * [`checksum`]: the internet checksum, RFC 1624 incremental updates
//!   (used by the datapath when it rewrites headers), and CRC32c for SCTP.
//! * [`build`]: a builder of complete, valid frames (Ethernet, VLAN tags,
//!   ARP, IPv4, IPv6, UDP, TCP, SCTP, ICMP, ICMPv6 echo and neighbour
//!   discovery) for tests, benchmarks and traffic generators.
//!
//! Header parsing for the switch lives in `flow::extract`, which reads
//! fields straight into the flow key.
#![deny(unsafe_code)]

pub mod build;
pub mod checksum;
