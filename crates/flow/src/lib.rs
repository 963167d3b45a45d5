//! # flow: what a packet looks like to the switch
//!
//! A [`FlowKey`] is a fixed array of 64-bit words holding every field the
//! switch can match on: metadata (in_port, recirc_id, mark, conntrack and
//! tunnel fields), L2, L3 and L4 headers, grouped in that order so that the
//! classifier can look a packet up stage by stage. A mask has the same
//! shape, so masking, subset tests and the megaflow "bits consulted"
//! accumulator are all word-wise operations.
//!
//! * [`key`]: the layout, typed accessors, hashing.
//! * [`fields`]: the table of named fields (ovs-ofctl names), their
//!   locations and prerequisites.
//! * [`matching`]: [`Match`] (key + mask) and its ovs-ofctl text syntax.
//! * [`extract`]: packet bytes to key, never panicking; a malformed packet
//!   yields the key as far as it parsed plus a [`extract::ParseError`]
//!   naming the reason.
//! * [`miniflow`]: a compact form (bitmap of non-zero words + values).
//!
//! Correctness property: for any packet `p`, the key from `extract(p)` is a
//! pure function of the bytes and `in_port`; no field outside what was
//! parsed is non-zero.
#![deny(unsafe_code)]

pub mod extract;
pub mod fields;
pub mod key;
pub mod matching;
pub mod miniflow;

pub use extract::{extract, Layout, ParseError};
pub use fields::{FieldDef, FIELDS};
pub use key::{FlowKey, FlowMask, WORDS};
pub use matching::{Match, MatchError};
