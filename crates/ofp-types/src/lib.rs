//! # ofp-types: the OpenFlow vocabulary both sides speak
//!
//! The wire codec (`openflow`) and the slow path (`ofproto`) talk about the
//! same things: an [`Action`] list, [`Instruction`]s, OpenFlow port numbers
//! ([`OfPort`], [`actions::ofpp`]), a flow mod ([`FlowModCmd`] plus a
//! [`FlowSpec`]), and the ovs-ofctl text syntax for all of them ([`parse`],
//! [`actions::parse_actions`], [`ct`]). This crate holds exactly that and
//! nothing with behaviour: no tables, no translation, no bytes on a wire.
//!
//! Why a crate of its own: the codec used to import `ofproto` only for
//! these types, which put the codec *above* the pipeline (and rebuilt it
//! whenever translation changed). `flow` is the obvious lower home, but the
//! `ct` action carries `conntrack`'s NAT types and `conntrack` already sits
//! on `flow`; a small crate beside both keeps the graph a tree:
//! `flow, conntrack -> ofp-types -> {openflow, ofproto}`.
//! `ofproto` re-exports every module here under its old path
//! (`ofproto::actions`, `ofproto::parse`, `ofproto::ct`), so callers did
//! not change.
#![deny(unsafe_code)]

pub mod actions;
pub mod continuation;
pub mod ct;
pub mod learn;
pub mod parse;
pub mod subfield;

pub use actions::{Action, ControllerSpec, Instruction, OfPort};
pub use continuation::{Continuation, Frozen};
pub use parse::{parse_flow, parse_flow_file, FlowSpec, Need};
pub use subfield::SubField;

/// A flow modification command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlowModCmd {
    Add,
    Modify,
    ModifyStrict,
    Delete,
    DeleteStrict,
}
