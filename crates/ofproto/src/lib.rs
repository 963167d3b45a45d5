//! # ofproto: the OpenFlow slow path
//!
//! An [`Ofproto`] is one bridge as OpenFlow sees it: up to 255 tables of
//! prioritized rules (each a tuple-space-search [`classifier::Classifier`]),
//! its ports with their VLAN modes, and a MAC learning table for the
//! `NORMAL` action.
//!
//! Its one job on the packet path is **translation** ([`xlate`]): given the
//! flow key of a packet that missed the datapath caches, walk the pipeline
//! (goto_table, resubmit, apply/write/clear actions, write_metadata, table
//! miss), and return the datapath actions plus the megaflow mask — every key
//! bit that was consulted and no more. The datapath caches that pair; the
//! soundness of the cache rests entirely on the mask being complete.
//!
//! Flow-table changes are versioned: a batch is staged at `version + 1`
//! and published at once, so a translation never sees half a change. Every
//! change that could alter a translation (rules, ports, MAC table) bumps
//! [`Ofproto::generation`], which tells datapath caches to revalidate.
//!
//! [`parse`] reads ovs-ofctl's flow syntax; [`actions`] holds the OpenFlow
//! action and instruction types. Both live in the `ofp-types` crate (shared
//! with the wire codec) and are re-exported here under their old paths.
#![deny(unsafe_code)]

pub use ofp_types::actions;
pub mod bridge;
mod counters;
pub mod ct;
pub mod group;
pub mod normal;
pub mod tlv;
pub use ofp_types::parse;
pub mod xlate;

pub use actions::{Action, Instruction, OfPort};
pub use bridge::{FlowModError, Mirror, Ofproto, PortConfig, Rule, TableMiss};
pub use normal::{MacTable, VlanMode};
pub use ofp_types::FlowModCmd;
pub use ofp_types::{Continuation, Frozen};
pub use parse::{parse_flow, parse_flow_file, FlowSpec, Need};
pub use xlate::Trace;
