//! # wire: checksums and a packet builder
//!
//! * [`checksum`]: the internet checksum, RFC 1624 incremental updates
//!   (used by the datapath when it rewrites headers), and CRC32c for SCTP.
//! * [`build`]: a builder of complete, valid frames (Ethernet, VLAN tags,
//!   ARP, IPv4, IPv6, UDP, TCP, SCTP, ICMP, ICMPv6 echo and neighbour
//!   discovery) for tests, benchmarks and traffic generators.
//!
//! Header parsing for the switch lives in `flow::extract`, which reads
//! fields straight into the flow key through fixed-size header views (one
//! bounds check per header), and header rewriting in `dpif::execute`, which
//! patches checksums incrementally with [`checksum`]. An earlier generic
//! view layer (smoltcp-style `Packet<T>` per header) was used by neither
//! and was removed rather than kept in step with them: two parsers of the
//! same bytes that can disagree are worse than one.
#![deny(unsafe_code)]

pub mod build;
pub mod checksum;
