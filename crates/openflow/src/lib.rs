//! # openflow: the OpenFlow wire codec (sans-IO)
//!
//! Bytes in, messages out, and back; no sockets. This first layer covers
//! what every connection needs before any flow table is touched:
//!
//! * [`Header`] framing: splitting a byte stream into messages
//!   ([`Framer`]), with the length checks the spec requires;
//! * version negotiation through HELLO, including the OpenFlow 1.3.1+
//!   version bitmap element ([`negotiate`]);
//! * ECHO, FEATURES, BARRIER, and ERROR replies that carry the offending
//!   bytes ([`error_reply`]), with the error types and codes of OpenFlow
//!   1.0 and 1.3+ ([`ErrorKind`]).
//!
//! Versions: 1.0 (0x01), 1.3 (0x04), 1.4 (0x05), 1.5 (0x06).
//! Correctness property: decoding never panics on any input; every
//! malformed message maps to the error the spec names.
#![deny(unsafe_code)]

pub mod action;
pub mod bytes;
pub mod error;
pub mod header;
pub mod msg;
pub mod of10;
pub mod oxm;

pub use error::{error_reply, ErrorKind};
pub use header::{negotiate, Framer, Header, Message, Version};
