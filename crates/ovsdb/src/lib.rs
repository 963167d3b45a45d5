//! # ovsdb: xvs as an OVSDB client, in place of ovs-vswitchd
//!
//! With this crate, xvs takes its configuration from the real
//! `ovsdb-server` and the Open_vSwitch schema, so `ovs-vsctl` and
//! `ovs-appctl` drive it as they drive ovs-vswitchd (issue #6).
//!
//! Layers, from bytes up:
//!
//! * [`jsonrpc`]: the sans-IO stream codec (RFC 7047 peers send JSON
//!   values back to back, undelimited) and the request / response /
//!   notification messages. Never panics on any input; a malformed value
//!   resets the codec, and the connection owning it is dropped.
//! * [`replica`]: the monitored tables as uuid -> row of server JSON, kept
//!   current by `update` / `update2`; [`replica::Datum`] decodes sets, maps
//!   and uuid references.
//! * [`client`]: [`client::Session`], the sans-IO protocol (get_schema,
//!   monitor of every column of Open_vSwitch, Bridge, Port, Interface,
//!   Controller, Mirror and Datapath, transact, lock, echo replies), and
//!   [`Client`], which runs it over `unix:PATH` / `tcp:IP:PORT` with
//!   blocking sockets and reconnects with backoff (100 ms doubling to 4 s).
//! * [`model`]: [`Desired`], the typed configuration. Correctness
//!   property: one bad value never poisons the rest; a bad interface
//!   option becomes that interface's `error` text, naming the field.
//! * [`writeback`]: the columns ovs-vswitchd owns (Interface ofport, states,
//!   mtu, mac_in_use, error, statistics; Bridge datapath_id; Open_vSwitch
//!   cur_cfg, datapath_types, iface_types, ovs_version, the Datapath row),
//!   emitted only where the database differs so writes do not echo forever.
//!
//! ## Threads
//!
//! Nothing is shared: a [`Client`] belongs to the one thread that calls it.
//!
//! ## Integration in the daemon (`xvs switch --db unix:PATH`)
//!
//! `crates/xvs/src/db.rs` does this: one thread owns the [`Client`] and
//! every bridge of the process (patch ports join them), reconciles on
//! each [`Event::ReplicaChanged`] while it holds the `ovs_vswitchd` lock,
//! and writes back after each change and every second (statistics, link
//! state). The ovs-appctl socket is the daemon's (`xvs::appctl`), next to
//! a pidfile, so a bare `ovs-appctl` finds it through `OVS_RUNDIR`.
//!
//! ```text
//! let mut db = Client::connect(remote)?;         // retries until the server is up
//! db.lock("ovs_vswitchd");                        // one switch per database
//! loop {
//!     match db.next_event(Duration::from_millis(100)) {
//!         Some(Event::ReplicaChanged) => {
//!             let desired = db.desired();          // typed, never fails
//!             reconcile(&desired);                 // bridges, ports, options, controllers
//!             let ops = writeback::transaction(&desired, db.replica(), &actual());
//!             if !ops.is_empty() { db.transact(ops)?; }   // sets cur_cfg = next_cfg
//!         }
//!         Some(Event::Disconnected(_)) => {}     // keep forwarding with the last config
//!         _ => {}
//!     }
//! }
//! ```
#![deny(unsafe_code)]

pub mod client;
pub mod jsonrpc;
pub mod model;
pub mod replica;
pub mod writeback;

pub use client::{Client, ClientError, Event, Session};
pub use model::{BridgeCfg, Desired, FailMode, IfaceCfg, IfaceKind, MirrorCfg, PortCfg, VlanMode, XdpMode};
pub use replica::Replica;
pub use writeback::{Actual, IfaceFacts};
