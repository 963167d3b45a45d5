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
//! * [`appctl`]: an ovs-appctl-compatible unix control socket.
//!
//! ## Threads
//!
//! Nothing is shared: a [`Client`] belongs to the one thread that calls it.
//! The [`AppctlServer`] runs its own accept thread and one thread per
//! connection; the handler it calls must be `Send + Sync`.
//!
//! ## Intended integration in the daemon (`xvs switch --db unix:PATH`)
//!
//! One "db" thread owns the [`Client`]:
//!
//! ```text
//! let mut db = Client::connect(remote)?;         // retries until the server is up
//! db.lock("ovs_vswitchd");                        // one switch per database
//! loop {
//!     match db.next_event(Duration::from_millis(500)) {
//!         Some(Event::ReplicaChanged) => {
//!             let desired = db.desired();          // typed, never fails
//!             reconciler.apply(&desired);          // diff bridges/ports/options
//!             let ops = writeback::transaction(&desired, db.replica(), &reconciler.actual());
//!             if !ops.is_empty() { db.transact(ops)?; }   // sets cur_cfg = next_cfg
//!         }
//!         Some(Event::Disconnected(_)) => {}     // keep forwarding with the last config
//!         _ => {}                                  // also: every ~5 s, write statistics
//!     }
//! }
//! ```
//!
//! The reconciler should act only while [`client::Session::has_lock`] is
//! true, and honour `flow_restore_wait` (keep datapath flows until false).
//! The existing `xvs` control socket commands are served on
//! `/var/run/openvswitch/ovs-vswitchd.<pid>.ctl` through [`AppctlServer`]
//! so `ovs-appctl` reaches them unchanged.
#![deny(unsafe_code)]

pub mod appctl;
pub mod client;
pub mod jsonrpc;
pub mod model;
pub mod replica;
pub mod writeback;

pub use appctl::AppctlServer;
pub use client::{Client, ClientError, Event, Session};
pub use model::{BridgeCfg, Desired, FailMode, IfaceCfg, IfaceKind, MirrorCfg, PortCfg, VlanMode, XdpMode};
pub use replica::Replica;
pub use writeback::{Actual, IfaceFacts};
