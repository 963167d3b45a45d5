//! The OpenFlow service of one bridge, without sockets, threads or clocks.
//!
//! [`Service`] holds every OpenFlow connection's session state (version
//! negotiation, role, asynchronous configuration, bundles,
//! `miss_send_len`, keepalive) and the state they share (master
//! election, the fail mode, the port-status view). The daemon gives it
//! framed messages ([`Service::receive`]), datapath events
//! ([`Service::packet_in`], [`Service::flow_removed`]) and the time
//! ([`Service::tick`]); the service acts on the switch through the
//! [`Bridge`] trait and leaves what is to be sent in an outbox
//! ([`Service::take_output`]) that the transport drains. This is the
//! shape of `ovsdb`'s client `Session`, and of OVS's connmgr/ofconn
//! split: the protocol can be tested message by message with a fake
//! bridge, and the transport (streams, listeners, backoff, bounded
//! queues) knows nothing of OpenFlow beyond framing.

use flow::{FlowKey, Match};
use ofp_types::actions::ofpp;
use ofp_types::{Action, FlowModCmd, FlowSpec, Instruction};
use openflow::msg::{self, t, Ctx, FlowStats, Msg, PortDesc, StatsReq};
use openflow::{error_reply, ErrorKind, Message, Version};
use std::collections::BTreeMap;

#[cfg(test)]
mod tests;

/// A connection's handle, given by [`Service::connect`].
pub type ConnId = u64;

/// What a connection is.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    /// A local tool (ovs-ofctl) on the management socket: equal role,
    /// asynchronous messages only once it asks for them.
    Service,
    /// A controller (active or passive target).
    Controller,
    /// A snoop connection: gets a copy of every controller-connection
    /// message, in both directions.
    Snoop,
}

/// What a bridge with controllers does while none is connected.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum FailMode {
    /// Act as a learning switch (NORMAL) until a controller connects.
    Standalone,
    /// Drop table misses until a controller connects.
    Secure,
}

impl FailMode {
    pub fn parse(s: &str) -> Result<FailMode, String> {
        match s {
            "standalone" => Ok(FailMode::Standalone),
            "secure" => Ok(FailMode::Secure),
            _ => Err(format!("--fail-mode: '{s}' is not standalone or secure")),
        }
    }
}

/// What a table miss does, as the fail mode decides it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Miss {
    Controller,
    Normal,
    Drop,
}

/// Role values (OpenFlow 1.2+ numbering; Nicira's are mapped to these by the codec).
pub const ROLE_EQUAL: u32 = 1;
pub const ROLE_MASTER: u32 = 2;
pub const ROLE_SLAVE: u32 = 3;

/// A controller that sent nothing for this long gets an echo request.
pub const ECHO_IDLE_MS: u64 = 5_000;
/// A controller that sent nothing for this long is disconnected.
pub const DEAD_IDLE_MS: u64 = 15_000;

/// What the transport is to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    /// A reply to the peer's own request: never dropped silently.
    Reply(ConnId, Vec<u8>),
    /// An asynchronous message (packet-in, flow-removed, port-status,
    /// snoop copy, keepalive echo): may be dropped if the peer is behind.
    Async(ConnId, Vec<u8>),
    /// Close the connection once what is queued for it has been sent.
    Close(ConnId),
    /// A line for the log.
    Log(String),
}

/// A rule that left the tables, as flow-removed reports it.
#[derive(Clone, Debug)]
pub struct Removed {
    /// OFPRR_*.
    pub reason: u8,
    pub stats: FlowStats,
}

/// A group's counters.
#[derive(Clone, Debug, Default)]
pub struct GroupStats {
    pub id: u32,
    pub ref_count: u32,
    pub packets: u64,
    pub bytes: u64,
    pub duration_ms: u64,
    pub buckets: Vec<(u64, u64)>,
}

/// A meter's counters.
#[derive(Clone, Debug, Default)]
pub struct MeterStats {
    pub id: u32,
    pub ref_count: u32,
    pub packets: u64,
    pub bytes: u64,
    pub duration_ms: u64,
    pub bands: Vec<(u64, u64)>,
}

/// Selects rules by (table, match, cookie, instructions).
/// Which rules a flow stats request selects: (table, the rule's masked key,
/// its mask, cookie, instructions).
pub type RuleFilter<'a> = dyn FnMut(u8, &FlowKey, &FlowKey, u64, &[Instruction]) -> bool + 'a;

/// One table's counters: active rules, lookups, matches.
pub type TableCounts = (u32, u64, u64);

/// A packet for the controller, from the datapath.
#[derive(Clone, Debug)]
pub struct PacketIn<'a> {
    /// OFPR_*: 0 no match, 1 action, 2 invalid TTL, or what a
    /// `controller(reason=...)` action named.
    pub reason: u8,
    pub table_id: u8,
    pub cookie: u64,
    pub in_port: u32,
    /// The controller action's `max_len` (a table miss uses the
    /// connection's `miss_send_len`).
    pub max_len: u16,
    pub data: &'a [u8],
    /// The packet's length before any truncation.
    pub full_len: usize,
    /// `controller(id=N)`: only connections with this controller id get it.
    pub controller_id: Option<u16>,
    /// The pipeline metadata at the controller action, for NXT_PACKET_IN2.
    pub metadata: Option<&'a Match>,
    pub userdata: &'a [u8],
    /// A paused pipeline's rest (`controller(pause)`).
    pub continuation: Option<&'a ofp_types::Continuation>,
}

/// The switch, as the OpenFlow service sees it. The daemon implements it
/// over the pipeline; tests implement it with a few maps.
pub trait Bridge {
    /// The bridge's name (in the description reply).
    fn name(&self) -> String;
    fn now_ms(&self) -> u64;
    /// Ports as OpenFlow describes them.
    fn port_descs(&self) -> Vec<PortDesc>;
    /// Applies flow mods atomically (all or none). On error, the index
    /// of the failing mod. Returns the rules removed either way.
    fn apply_flow_mods(&self, mods: &[(FlowModCmd, FlowSpec)]) -> (Result<(), (usize, ErrorKind)>, Vec<Removed>);
    /// Applies a group or meter mod (`Msg::GroupMod` or `Msg::MeterMod`).
    fn group_meter_mod(&self, m: &Msg) -> (Result<(), ErrorKind>, Vec<Removed>);
    /// Runs a packet-out through the pipeline.
    fn packet_out(&self, po: &msg::PacketOut) -> Result<(), ErrorKind>;
    /// Applies a port mod.
    fn port_mod(&self, v: Version, pm: &msg::PortMod) -> Result<(), ErrorKind>;
    fn tlv_mod(&self, tm: &msg::tlv::TlvTableMod) -> Result<(), ErrorKind>;
    /// The TLV table: (space in bytes, max fields, mappings).
    fn tlv_table(&self) -> (u32, u16, Vec<msg::tlv::TlvMap>);
    /// Resumes a paused pipeline (NXT_RESUME).
    fn resume(&self, r: &msg::Resume) -> Result<(), ErrorKind>;
    /// Forgets tracked connections; returns how many.
    fn ct_flush(&self, f: &msg::ct_flush::CtFlush) -> usize;
    fn ct_flush_zone(&self, zone: u16) -> usize;
    /// Flow statistics of the rules `keep` selects, given (table, match,
    /// cookie, instructions).
    fn flow_stats(&self, keep: &mut RuleFilter<'_>) -> Vec<FlowStats>;
    /// Counters of tables 0..254.
    fn table_stats(&self) -> Vec<TableCounts>;
    fn port_stats(&self) -> Vec<msg::PortStats>;
    /// Groups (`OFPG_ALL` for all).
    fn group_stats(&self, group: u32) -> Vec<GroupStats>;
    fn group_descs(&self) -> Vec<msg::GroupMod>;
    /// Meters (`OFPM_ALL` for all).
    fn meter_stats(&self, meter: u32) -> Vec<MeterStats>;
    fn meter_configs(&self, meter: u32) -> Vec<msg::MeterMod>;
    /// What a table miss does (the fail mode's decision).
    fn set_table_miss(&self, miss: Miss);
}

/// OFPM_ALL.
pub const OFPM_ALL: u32 = 0xffff_ffff;

/// The service's configuration.
#[derive(Clone, Debug)]
pub struct Config {
    /// Versions this bridge negotiates (highest common wins).
    pub versions: Vec<Version>,
    pub dpid: u64,
    /// Set when the bridge has controllers: what a miss does while none
    /// is connected.
    pub fail_mode: Option<FailMode>,
}

struct Bundle {
    flags: u16,
    msgs: Vec<Message>,
}

/// One connection's OpenFlow state.
struct Session {
    kind: Kind,
    name: String,
    /// Set once HELLO negotiated a version.
    ctx: Option<Ctx>,
    role: u32,
    miss_send_len: u16,
    /// Whether this (service) connection asked for asynchronous messages.
    async_on: bool,
    /// NXM flow-removed format (set_flow_format nxm).
    nxm: bool,
    /// NXT_SET_PACKET_IN_FORMAT: 0 standard, 1 NXT_PACKET_IN, 2 NXT_PACKET_IN2.
    pin_format: u32,
    /// NXT_SET_CONTROLLER_ID.
    controller_id: u16,
    bundles: BTreeMap<u32, Bundle>,
    last_rx_ms: u64,
    echo_sent: bool,
    closing: bool,
}

impl Session {
    fn version(&self) -> Option<Version> {
        self.ctx.map(|c| c.version)
    }

    /// Whether asynchronous messages (packet-in, flow-removed, port-status) go here.
    fn wants_async(&self) -> bool {
        self.ctx.is_some()
            && !self.closing
            && match self.kind {
                Kind::Controller => true,
                Kind::Service => self.async_on,
                Kind::Snoop => false,
            }
    }
}

/// The OpenFlow service of one bridge.
pub struct Service {
    cfg: Config,
    sessions: BTreeMap<ConnId, Session>,
    next_id: ConnId,
    /// Largest generation_id a master or slave request has claimed.
    master_gen: Option<u64>,
    xid: u32,
    out: Vec<Output>,
    /// Ports as last reported in port-status.
    known_ports: BTreeMap<u32, PortDesc>,
    /// The table-miss behaviour last given to the bridge.
    miss: Option<Miss>,
    /// Packet-ins no connection took.
    pub packet_in_dropped: u64,
}

impl Service {
    pub fn new(mut cfg: Config) -> Service {
        if cfg.versions.is_empty() {
            cfg.versions = Version::ALL.to_vec();
        }
        Service {
            cfg,
            sessions: BTreeMap::new(),
            next_id: 1,
            master_gen: None,
            xid: 1,
            out: Vec::new(),
            known_ports: BTreeMap::new(),
            miss: None,
            packet_in_dropped: 0,
        }
    }

    /// What the transport is to do, in order.
    pub fn take_output(&mut self) -> Vec<Output> {
        std::mem::take(&mut self.out)
    }

    fn next_xid(&mut self) -> u32 {
        let x = self.xid;
        self.xid = self.xid.wrapping_add(1);
        x
    }

    /// The negotiated version of a connection.
    pub fn version(&self, id: ConnId) -> Option<Version> {
        self.sessions.get(&id).and_then(|s| s.version())
    }

    /// A new connection: queues our HELLO.
    pub fn connect(&mut self, kind: Kind, name: &str, now_ms: u64) -> ConnId {
        let id = self.next_id;
        self.next_id += 1;
        self.sessions.insert(
            id,
            Session {
                kind,
                name: name.to_string(),
                ctx: None,
                role: ROLE_EQUAL,
                miss_send_len: if kind == Kind::Controller { 128 } else { 0 },
                async_on: false,
                nxm: false,
                pin_format: 0,
                controller_id: 0,
                bundles: BTreeMap::new(),
                last_rx_ms: now_ms,
                echo_sent: false,
                closing: false,
            },
        );
        let xid = self.next_xid();
        self.out.push(Output::Reply(id, openflow::header::hello(&self.cfg.versions, xid)));
        id
    }

    /// The connection is gone (closed by the peer or by us).
    pub fn disconnect(&mut self, id: ConnId, br: &dyn Bridge) {
        if let Some(s) = self.sessions.remove(&id) {
            if s.kind == Kind::Controller {
                self.update_fail_mode(br);
            }
        }
    }

    /// The stream lost its framing: the spec's only recourse is an error and closing.
    pub fn framing_lost(&mut self, id: ConnId) {
        let v = self.version(id).unwrap_or(Version::Of10);
        self.reply(id, error_reply(v, ErrorKind::BadLen, &[]));
        self.close(id);
    }

    fn close(&mut self, id: ConnId) {
        if let Some(s) = self.sessions.get_mut(&id) {
            if !s.closing {
                s.closing = true;
                self.out.push(Output::Close(id));
            }
        }
    }

    /// Queues a reply, and its copy for snoopers.
    fn reply(&mut self, id: ConnId, b: Vec<u8>) {
        if self.sessions.get(&id).is_some_and(|s| s.kind != Kind::Snoop && s.ctx.is_some()) {
            self.snoop(&b);
        }
        self.out.push(Output::Reply(id, b));
    }

    /// Copies a controller-connection message to every snoop connection.
    fn snoop(&mut self, bytes: &[u8]) {
        for (&id, s) in &self.sessions {
            if s.kind == Kind::Snoop && s.ctx.is_some() && !s.closing {
                self.out.push(Output::Async(id, bytes.to_vec()));
            }
        }
    }

    /// One framed message from a connection.
    pub fn receive(&mut self, id: ConnId, m: Message, now_ms: u64, br: &dyn Bridge) {
        let Some(s) = self.sessions.get_mut(&id) else { return };
        if s.closing {
            return;
        }
        s.last_rx_ms = now_ms;
        s.echo_sent = false;
        let Some(ctx) = s.ctx else {
            // Before negotiation only HELLO is acceptable.
            let v = Version::from_wire(m.header.version).unwrap_or(Version::Of10);
            if m.header.msg_type != t::HELLO {
                self.reply(id, error_reply(v, ErrorKind::BadType, &m.bytes));
                return;
            }
            match openflow::negotiate(&self.cfg.versions, &m) {
                Ok(nv) => {
                    s.ctx = Some(Ctx::new(nv));
                    if s.kind == Kind::Controller {
                        self.update_fail_mode(br);
                    }
                }
                Err(e) => {
                    self.reply(id, error_reply(v, e, &m.bytes));
                    self.close(id);
                }
            }
            return;
        };
        if s.kind == Kind::Snoop {
            return;
        }
        self.snoop(&m.bytes);
        match msg::decode(&ctx, &m) {
            Ok(decoded) => {
                for r in self.handle(id, &ctx, &m, decoded, br) {
                    self.reply(id, r);
                }
            }
            Err(e) => self.reply(id, error_reply(ctx.version, e, &m.bytes)),
        }
    }

    fn session(&mut self, id: ConnId) -> &mut Session {
        self.sessions.get_mut(&id).expect("session of a message being handled")
    }

    fn can_modify(&self, id: ConnId) -> bool {
        self.sessions.get(&id).is_some_and(|s| s.role != ROLE_SLAVE)
    }

    fn handle(&mut self, id: ConnId, ctx: &Ctx, m: &Message, decoded: Msg, br: &dyn Bridge) -> Vec<Vec<u8>> {
        let v = ctx.version;
        let xid = m.header.xid;
        let err = |k: ErrorKind| vec![error_reply(v, k, &m.bytes)];
        let modifies = matches!(
            decoded,
            Msg::FlowMod(_)
                | Msg::GroupMod(_)
                | Msg::MeterMod(_)
                | Msg::PacketOut(_)
                | Msg::PortMod(_)
                | Msg::TlvTableMod(_)
                | Msg::Resume(_)
        );
        if modifies && !self.can_modify(id) {
            return err(ErrorKind::IsSlave);
        }
        match decoded {
            Msg::Hello | Msg::EchoReply | Msg::Reply(_) => Vec::new(),
            Msg::Error { ty, code } => {
                let name = self.session(id).name.clone();
                self.out.push(Output::Log(format!("OpenFlow peer {name} reported error type {ty} code {code}")));
                Vec::new()
            }
            Msg::EchoRequest(body) => vec![msg::encode_simple(v, t::ECHO_REPLY, xid, &body)],
            Msg::FeaturesRequest => vec![msg::encode_features_reply(v, xid, self.cfg.dpid, 254, &br.port_descs())],
            Msg::GetConfigRequest => vec![msg::encode_get_config_reply(v, xid, 0, self.session(id).miss_send_len)],
            Msg::SetConfig { miss_send_len, .. } => {
                let s = self.session(id);
                s.miss_send_len = miss_send_len;
                s.async_on = true;
                Vec::new()
            }
            Msg::BarrierRequest => vec![msg::encode_simple(v, t::BARRIER_REPLY, xid, &[])],
            Msg::SetFlowFormat(f) => {
                self.session(id).nxm = f == 2;
                Vec::new()
            }
            Msg::FlowModTableId(on) => {
                if let Some(c) = self.session(id).ctx.as_mut() {
                    c.flow_mod_table_id = on;
                }
                Vec::new()
            }
            Msg::SetPacketInFormat(f) => {
                let s = self.session(id);
                s.pin_format = f;
                s.async_on = true;
                Vec::new()
            }
            Msg::SetControllerId(cid) => {
                let s = self.session(id);
                s.controller_id = cid;
                s.async_on = true;
                Vec::new()
            }
            Msg::FlowAge | Msg::TableMod | Msg::SetAsync => {
                self.session(id).async_on = true;
                Vec::new()
            }
            Msg::CtFlush(f) => {
                let n = br.ct_flush(&f);
                let name = self.session(id).name.clone();
                self.out.push(Output::Log(format!("OpenFlow peer {name}: ct-flush: {n} connections flushed")));
                Vec::new()
            }
            Msg::CtFlushZone(zone) => {
                let n = br.ct_flush_zone(zone);
                let name = self.session(id).name.clone();
                self.out
                    .push(Output::Log(format!("OpenFlow peer {name}: ct-flush-zone {zone}: {n} connections flushed")));
                Vec::new()
            }
            Msg::TlvTableMod(tm) => match br.tlv_mod(&tm) {
                Ok(()) => Vec::new(),
                Err(k) => err(k),
            },
            Msg::TlvTableRequest => {
                let (space, max, maps) = br.tlv_table();
                let body = msg::tlv::encode_reply(space, max, &maps);
                vec![msg::encode_nx(v, xid, msg::nxt::TLV_TABLE_REPLY, &body)]
            }
            Msg::Resume(r) => match br.resume(&r) {
                Ok(()) => Vec::new(),
                Err(k) => err(k),
            },
            Msg::GetAsyncRequest => {
                // Everything enabled for masters/equals, port status for slaves.
                let mut body = Vec::new();
                for mask in [0x7u32, 0x7, 0x7, 0x7, 0xf, 0x0] {
                    body.extend_from_slice(&mask.to_be_bytes());
                }
                vec![msg::encode_simple(v, t::GET_ASYNC_REPLY, xid, &body)]
            }
            Msg::QueueGetConfig => err(ErrorKind::BadRequestPort),
            Msg::RoleRequest { role, generation_id, nx } => self.role_request(id, v, xid, role, generation_id, nx, m),
            Msg::FlowMod(fm) => {
                let mut out = match self.apply_flow_mods(&[(fm.cmd, fm.spec)], br) {
                    Ok(()) => Vec::new(),
                    Err((_, k)) => return err(k),
                };
                if fm.buffer_id != msg::NO_BUFFER {
                    out.push(error_reply(v, ErrorKind::BufferUnknown, &m.bytes));
                }
                out
            }
            Msg::PacketOut(po) => {
                if po.buffer_id != msg::NO_BUFFER {
                    return err(ErrorKind::BufferUnknown);
                }
                if po.data.len() < 14 {
                    return err(ErrorKind::BadPacket);
                }
                match br.packet_out(&po) {
                    Ok(()) => Vec::new(),
                    Err(k) => err(k),
                }
            }
            Msg::PortMod(pm) => {
                if let Err(k) = br.port_mod(v, &pm) {
                    return err(k);
                }
                if let Some(p) = br.port_descs().into_iter().find(|p| p.port_no == pm.port_no) {
                    self.broadcast_async(|v| msg::encode_port_status(v, 2, &p));
                    self.known_ports.insert(p.port_no, p);
                }
                Vec::new()
            }
            Msg::Stats(req) => self.stats(v, xid, req, m, br),
            d @ (Msg::GroupMod(_) | Msg::MeterMod(_)) => {
                let (res, removed) = br.group_meter_mod(&d);
                self.flow_removed(&removed);
                match res {
                    Ok(()) => Vec::new(),
                    Err(k) => err(k),
                }
            }
            Msg::BundleControl { bundle_id, ctrl, flags } => {
                self.bundle_control(id, v, xid, bundle_id, ctrl, flags, m, br)
            }
            Msg::BundleAdd { bundle_id, flags, inner } => {
                let s = self.session(id);
                // A message for a bundle not yet opened opens it (OpenFlow
                // 1.4's implicit open, as OVS does; ovn-controller relies on
                // it: it never sends OPEN_REQUEST).
                let b = s.bundles.entry(bundle_id).or_insert_with(|| Bundle { flags, msgs: Vec::new() });
                if b.flags != flags {
                    return err(ErrorKind::BundleBadId);
                }
                // Only flow mods (and group/meter mods, port mods) may be bundled.
                let it = if v == Version::Of10 { 255 } else { inner.header.msg_type };
                if !matches!(it, t::FLOW_MOD | t::GROUP_MOD | t::PORT_MOD | t::METER_MOD) {
                    return err(ErrorKind::BundleBadType);
                }
                b.msgs.push(inner);
                Vec::new()
            }
        }
    }

    /// Checks and applies flow mods atomically; sends flow-removed for
    /// the rules that left and asked for it.
    fn apply_flow_mods(&mut self, mods: &[(FlowModCmd, FlowSpec)], br: &dyn Bridge) -> Result<(), (usize, ErrorKind)> {
        for (i, (cmd, spec)) in mods.iter().enumerate() {
            if *cmd == FlowModCmd::Add && !spec.table_given && spec.table == 0xff {
                return Err((i, ErrorKind::BadTableId));
            }
        }
        let (res, removed) = br.apply_flow_mods(mods);
        self.flow_removed(&removed);
        res
    }

    /// Rules that left the tables: flow-removed to every connection that
    /// wants it, for the rules installed with SEND_FLOW_REM.
    pub fn flow_removed(&mut self, removed: &[Removed]) {
        for r in removed.iter().filter(|r| r.stats.flags & msg::ff::SEND_FLOW_REM != 0) {
            let targets: Vec<(ConnId, Version, bool)> = self
                .sessions
                .iter()
                .filter(|(_, s)| s.wants_async())
                .filter_map(|(&id, s)| Some((id, s.version()?, s.nxm)))
                .collect();
            for (id, v, nxm) in targets {
                let xid = self.next_xid();
                let b = msg::encode_flow_removed(v, xid, r.reason, &r.stats, nxm);
                self.out.push(Output::Async(id, b));
            }
        }
    }

    /// Sends an asynchronous message, built per version, to every
    /// connection that wants them (and its copy to snoopers).
    fn broadcast_async(&mut self, build: impl Fn(Version) -> Vec<u8>) {
        let targets: Vec<(ConnId, Version)> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.wants_async())
            .filter_map(|(&id, s)| Some((id, s.version()?)))
            .collect();
        for (id, v) in targets {
            let b = build(v);
            self.snoop(&b);
            self.out.push(Output::Async(id, b));
        }
    }

    #[allow(clippy::too_many_arguments, reason = "the request's fields")]
    fn role_request(
        &mut self,
        id: ConnId,
        v: Version,
        xid: u32,
        role: u32,
        gen: u64,
        nx: bool,
        m: &Message,
    ) -> Vec<Vec<u8>> {
        if (role == ROLE_MASTER || role == ROLE_SLAVE) && !nx {
            if let Some(g) = self.master_gen {
                // Generation ids compare as a wrapping distance (OpenFlow 1.3, 6.3.6).
                if (gen.wrapping_sub(g) as i64) < 0 {
                    return vec![error_reply(v, ErrorKind::RoleStale, &m.bytes)];
                }
            }
            self.master_gen = Some(gen);
        }
        if role == ROLE_MASTER {
            // The previous master becomes a slave.
            for (&other, s) in self.sessions.iter_mut() {
                if other != id && s.role == ROLE_MASTER {
                    s.role = ROLE_SLAVE;
                }
            }
        }
        let s = self.session(id);
        if role != 0 {
            s.role = role;
        }
        let cur = s.role;
        vec![msg::encode_role_reply(v, xid, cur, self.master_gen.unwrap_or(0), nx)]
    }

    #[allow(clippy::too_many_arguments, reason = "the request's fields")]
    fn bundle_control(
        &mut self,
        id: ConnId,
        v: Version,
        xid: u32,
        bid: u32,
        ctrl: u16,
        flags: u16,
        m: &Message,
        br: &dyn Bridge,
    ) -> Vec<Vec<u8>> {
        let err = |k: ErrorKind| vec![error_reply(v, k, &m.bytes)];
        let failed = |k: ErrorKind, inner: &Message| {
            vec![error_reply(v, k, &inner.bytes), error_reply(v, ErrorKind::BundleMsgFailed, &m.bytes)]
        };
        let s = self.session(id);
        match ctrl {
            // OPEN_REQUEST
            0 => {
                if s.bundles.contains_key(&bid) {
                    return err(ErrorKind::BundleBadId);
                }
                s.bundles.insert(bid, Bundle { flags, msgs: Vec::new() });
                vec![msg::encode_bundle_reply(v, xid, bid, 1, flags)]
            }
            // CLOSE_REQUEST
            2 => {
                if !s.bundles.contains_key(&bid) {
                    return err(ErrorKind::BundleBadId);
                }
                vec![msg::encode_bundle_reply(v, xid, bid, 3, flags)]
            }
            // COMMIT_REQUEST
            4 => {
                let Some(b) = s.bundles.remove(&bid) else { return err(ErrorKind::BundleBadId) };
                let ctx = s.ctx.unwrap_or(Ctx::new(v));
                if !self.can_modify(id) {
                    return err(ErrorKind::IsSlave);
                }
                // Decode everything first: one bad message fails the whole
                // bundle before anything is applied.
                let mut decoded = Vec::new();
                for inner in &b.msgs {
                    match msg::decode(&ctx, inner) {
                        Ok(d @ (Msg::FlowMod(_) | Msg::GroupMod(_) | Msg::MeterMod(_))) => decoded.push(d),
                        Ok(_) => return failed(ErrorKind::BundleBadType, inner),
                        Err(k) => return failed(k, inner),
                    }
                }
                // In order (ovn-controller deletes all groups, then adds flows
                // that name groups added later in the same bundle): runs of
                // flow mods apply atomically; a group or meter mod applies
                // between them.
                let mut run: Vec<usize> = Vec::new();
                let mut mods: Vec<(FlowModCmd, FlowSpec)> = Vec::new();
                for (i, d) in decoded.into_iter().enumerate() {
                    match d {
                        Msg::FlowMod(fm) => {
                            run.push(i);
                            mods.push((fm.cmd, fm.spec));
                        }
                        other => {
                            if !mods.is_empty() {
                                if let Err((j, k)) = self.apply_flow_mods(&mods, br) {
                                    return failed(k, &b.msgs[run[j]]);
                                }
                                run.clear();
                                mods.clear();
                            }
                            let (res, removed) = br.group_meter_mod(&other);
                            self.flow_removed(&removed);
                            if let Err(k) = res {
                                return failed(k, &b.msgs[i]);
                            }
                        }
                    }
                }
                match self.apply_flow_mods(&mods, br) {
                    Ok(()) => vec![msg::encode_bundle_reply(v, xid, bid, 5, flags)],
                    Err((j, k)) => failed(k, &b.msgs[run[j]]),
                }
            }
            // DISCARD_REQUEST
            6 => {
                if s.bundles.remove(&bid).is_none() {
                    return err(ErrorKind::BundleBadId);
                }
                vec![msg::encode_bundle_reply(v, xid, bid, 7, flags)]
            }
            _ => err(ErrorKind::BadRequestEperm),
        }
    }

    fn stats(&mut self, v: Version, xid: u32, req: StatsReq, m: &Message, br: &dyn Bridge) -> Vec<Vec<u8>> {
        let one = |st: u16, item: Vec<u8>| msg::encode_multipart(v, xid, st, None, &[item]);
        let many = |st: u16, items: Vec<Vec<u8>>| msg::encode_multipart(v, xid, st, None, &items);
        match req {
            StatsReq::Desc => one(
                msg::mp::DESC,
                msg::encode_desc(
                    "xvs",
                    "userspace switch (AF_XDP)",
                    env!("CARGO_PKG_VERSION"),
                    "None",
                    &format!("bridge {}", br.name()),
                ),
            ),
            StatsReq::Flow { aggregate, nx, table, out_port, out_group, cookie, cookie_mask, matched } => {
                let mut keep = |ti: u8, rkey: &FlowKey, rmask: &FlowKey, rc: u64, ins: &[Instruction]| {
                    (table == 0xff || ti == table)
                        // Loose match: the rule is at least as specific as the request.
                        && matched.mask.is_subset_of(rmask)
                        && rkey.and(&matched.mask) == matched.key
                        && (rc ^ cookie) & cookie_mask == 0
                        && outputs_to(ins, out_port, out_group)
                };
                let stats = br.flow_stats(&mut keep);
                let mut items = Vec::new();
                if aggregate {
                    let pk = stats.iter().map(|f| f.packets).sum();
                    let by = stats.iter().map(|f| f.bytes).sum();
                    items.push(msg::encode_aggregate(if nx { Version::Of10 } else { v }, pk, by, stats.len() as u32));
                } else {
                    items = stats.iter().map(|f| msg::encode_flow_stats(v, nx, f)).collect();
                }
                let (st, sub) = if nx {
                    (msg::mp::EXPERIMENTER, Some(if aggregate { 1 } else { 0 }))
                } else {
                    (if aggregate { msg::mp::AGGREGATE } else { msg::mp::FLOW }, None)
                };
                msg::encode_multipart(v, xid, st, sub, &items)
            }
            StatsReq::Table => {
                let items = br
                    .table_stats()
                    .into_iter()
                    .enumerate()
                    .map(|(t, (active, lookups, matched))| {
                        msg::encode_table_stats(v, t as u8, active, lookups, matched)
                    })
                    .collect();
                many(msg::mp::TABLE, items)
            }
            StatsReq::Port { port } => {
                let items: Vec<_> = br
                    .port_stats()
                    .iter()
                    .filter(|s| port == msg::OFPP_ANY || s.port_no == port)
                    .map(|s| msg::encode_port_stats(v, s))
                    .collect();
                if items.is_empty() && port != msg::OFPP_ANY {
                    return vec![error_reply(v, ErrorKind::BadRequestPort, &m.bytes)];
                }
                many(msg::mp::PORT_STATS, items)
            }
            StatsReq::PortDesc => {
                let items = br
                    .port_descs()
                    .iter()
                    .map(|p| {
                        let mut b = Vec::new();
                        msg::encode_port(v, p, &mut b);
                        b
                    })
                    .collect();
                many(msg::mp::PORT_DESC, items)
            }
            StatsReq::Queue => many(msg::mp::QUEUE, Vec::new()),
            StatsReq::TableFeatures => {
                many(msg::mp::TABLE_FEATURES, (0..254u8).map(|t| msg::encode_table_features(t, 254)).collect())
            }
            StatsReq::TableDesc => many(msg::mp::TABLE_DESC, Vec::new()),
            StatsReq::GroupFeatures => one(msg::mp::GROUP_FEATURES, msg::encode_group_features()),
            StatsReq::MeterFeatures => one(msg::mp::METER_FEATURES, msg::encode_meter_features(65535)),
            StatsReq::Group { group } => {
                let items = br
                    .group_stats(group)
                    .iter()
                    .map(|g| {
                        msg::encode_group_stats(v, g.id, g.ref_count, g.packets, g.bytes, g.duration_ms, &g.buckets)
                    })
                    .collect();
                many(msg::mp::GROUP, items)
            }
            StatsReq::GroupDesc => {
                many(msg::mp::GROUP_DESC, br.group_descs().iter().map(|g| msg::encode_group_desc(v, g)).collect())
            }
            StatsReq::Meter { meter } => {
                let items = br
                    .meter_stats(meter)
                    .iter()
                    .map(|s| msg::encode_meter_stats(s.id, s.ref_count, s.packets, s.bytes, s.duration_ms, &s.bands))
                    .collect();
                many(msg::mp::METER, items)
            }
            StatsReq::MeterConfig { meter } => {
                many(msg::mp::METER_CONFIG, br.meter_configs(meter).iter().map(msg::encode_meter_config).collect())
            }
        }
    }

    /// A packet for the controllers: to every connection whose version,
    /// role, format and controller id take it.
    pub fn packet_in(&mut self, p: &PacketIn) {
        let reason = p.reason;
        let mut sent = false;
        let targets: Vec<(ConnId, Version, u16, u32)> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.wants_async() && s.role != ROLE_SLAVE)
            .filter(|(_, s)| p.controller_id.is_none_or(|c| c == s.controller_id))
            .filter_map(|(&id, s)| Some((id, s.version()?, s.miss_send_len, s.pin_format)))
            .collect();
        for (id, v, msl, pin_format) in targets {
            // OpenFlow 1.3+ controllers get table misses only through an
            // explicit table-miss flow (reason action), as the spec says.
            if reason == 0 && v != Version::Of10 {
                continue;
            }
            if reason == 2 {
                // invalid_ttl packet-ins only when asked for (OFPC_INVALID_TTL_TO_CONTROLLER).
                continue;
            }
            let max = if reason == 0 { msl as usize } else { p.max_len as usize };
            if max == 0 && reason == 0 {
                continue;
            }
            let data = &p.data[..p.data.len().min(max)];
            let b = if pin_format == 2 {
                // A paused pipeline's rest, in this connection's version.
                let cont = p.continuation.map(|c| msg::encode_continuation(v, c));
                let mut m0 = Match::CATCHALL;
                if p.metadata.is_none() {
                    if let Some(f) = flow::fields::by_name("in_port") {
                        m0.set_field(f, p.in_port as u128);
                    }
                }
                let p2 = msg::PacketIn2 {
                    reason,
                    table: p.table_id,
                    cookie: p.cookie,
                    total_len: p.full_len as u32,
                    data,
                    metadata: p.metadata.unwrap_or(&m0),
                    userdata: p.userdata,
                    continuation: cont.as_deref(),
                };
                msg::encode_packet_in2(v, 0, &p2)
            } else {
                msg::encode_packet_in(
                    v,
                    0,
                    if reason == 1 && v == Version::Of10 { 1 } else { reason },
                    p.table_id,
                    p.cookie,
                    p.in_port,
                    p.full_len.min(u16::MAX as usize) as u16,
                    data,
                )
            };
            self.snoop(&b);
            self.out.push(Output::Async(id, b));
            sent = true;
        }
        if !sent {
            self.packet_in_dropped += 1;
        }
    }

    /// Housekeeping: controller keepalive (echo after [`ECHO_IDLE_MS`] of
    /// silence, close after [`DEAD_IDLE_MS`]), port-status for ports that
    /// came, went or changed, and the fail mode.
    pub fn tick(&mut self, now_ms: u64, br: &dyn Bridge) {
        let mut echo = Vec::new();
        let mut dead = Vec::new();
        for (&id, s) in self.sessions.iter_mut().filter(|(_, s)| s.kind == Kind::Controller && !s.closing) {
            let idle = now_ms.saturating_sub(s.last_rx_ms);
            if idle > DEAD_IDLE_MS {
                dead.push(id);
            } else if idle > ECHO_IDLE_MS && !s.echo_sent {
                if let Some(v) = s.version() {
                    s.echo_sent = true;
                    echo.push((id, v));
                }
            }
        }
        for (id, v) in echo {
            let xid = self.next_xid();
            self.out.push(Output::Async(id, msg::encode_simple(v, t::ECHO_REQUEST, xid, &[])));
        }
        for id in dead {
            let name = self.sessions[&id].name.clone();
            self.out.push(Output::Log(format!("OpenFlow peer {name}: no message for 15 s, disconnecting")));
            self.close(id);
        }
        let cur: BTreeMap<u32, PortDesc> = br.port_descs().into_iter().map(|p| (p.port_no, p)).collect();
        let known = std::mem::take(&mut self.known_ports);
        for (n, p) in &cur {
            match known.get(n) {
                None => self.broadcast_async(|v| msg::encode_port_status(v, 0, p)),
                Some(o) if o.state != p.state || o.config != p.config => {
                    self.broadcast_async(|v| msg::encode_port_status(v, 2, p))
                }
                _ => {}
            }
        }
        for (n, p) in &known {
            if !cur.contains_key(n) {
                self.broadcast_async(|v| msg::encode_port_status(v, 1, p));
            }
        }
        self.known_ports = cur;
        self.update_fail_mode(br);
    }

    /// Sets what a table miss does from the fail mode and whether a
    /// controller is connected.
    pub fn update_fail_mode(&mut self, br: &dyn Bridge) {
        let Some(mode) = self.cfg.fail_mode else { return };
        let connected = self.sessions.values().any(|s| s.kind == Kind::Controller && s.ctx.is_some() && !s.closing);
        let miss = match (connected, mode) {
            (true, _) => Miss::Controller,
            (false, FailMode::Standalone) => Miss::Normal,
            (false, FailMode::Secure) => Miss::Drop,
        };
        if self.miss != Some(miss) {
            self.miss = Some(miss);
            br.set_table_miss(miss);
        }
    }
}

/// Whether instructions output to a port / group (filters of stats).
pub fn outputs_to(ins: &[Instruction], out_port: u32, out_group: u32) -> bool {
    let acts = || {
        ins.iter().flat_map(|i| match i {
            Instruction::Apply(a) | Instruction::Write(a) => a.as_slice(),
            _ => &[],
        })
    };
    let port_ok = out_port == msg::OFPP_ANY
        || acts().any(|a| match a {
            Action::Output(p) => ofp_types::actions::ofport_number(*p) == out_port,
            Action::Controller { .. } | Action::ControllerNx(_) => out_port == ofpp::CONTROLLER,
            _ => false,
        });
    let group_ok = out_group == msg::OFPG_ANY || acts().any(|a| matches!(a, Action::Group(g) if *g == out_group));
    port_ok && group_ok
}
