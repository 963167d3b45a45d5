//! # dpif: the fast path (to be filled in)
#![deny(unsafe_code)]
pub mod actions;
pub use actions::{format_actions, DpAction, Translation, Upcall, UserspaceReason};
