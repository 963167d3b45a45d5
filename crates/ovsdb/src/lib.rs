//! # ovsdb: xvs as an OVSDB client
#![deny(unsafe_code)]

pub mod jsonrpc;
pub mod model;
pub mod replica;
