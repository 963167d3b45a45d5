//! The OVSDB client: a sans-IO protocol [`Session`] and a blocking
//! [`Client`] that drives it over `unix:PATH` or `tcp:IP:PORT` with
//! reconnection.
//!
//! [`Session`] is the whole protocol and makes no syscalls: the caller
//! tells it the connection came up ([`Session::handle_connected`]), feeds
//! it bytes ([`Session::handle_bytes`]), and takes bytes to send
//! ([`Session::poll_transmit`]) and events ([`Session::poll_event`]).
//! On each connection it asks for the schema, then monitors every column
//! of the wanted tables that the schema has (tables it lacks are logged and
//! left out), re-requests the lock if one was wanted, answers the server's
//! `echo`, and applies `update`s to its [`Replica`].
//!
//! Malformed JSON from the server makes the session ask for a reset
//! ([`Event::Reset`]): the [`Client`] drops the connection and reconnects
//! with backoff. Well-formed JSON that is not what RFC 7047 promises (an
//! unknown response id, an update of the wrong shape, a schema without
//! tables) is logged and the connection is kept.

use crate::jsonrpc::{Codec, Message};
use crate::replica::Replica;
use serde_json::{json, Value};
use std::collections::{HashMap, VecDeque};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};
use tracing::{debug, info, warn};

/// The database ovs-vswitchd uses.
pub const DB: &str = "Open_vSwitch";

/// Tables monitored, all columns.
pub const TABLES: &[&str] = &[
    "Open_vSwitch",
    "Bridge",
    "Port",
    "Interface",
    "Controller",
    "Mirror",
    "Datapath",
    "CT_Zone",
    "CT_Timeout_Policy",
];

/// What happened, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// The connection is up (the monitor follows).
    Connected,
    /// The replica changed: the initial monitor contents or an update.
    /// Rebuild [`crate::Desired`] from [`Session::replica`].
    ReplicaChanged,
    /// The reply to [`Session::transact`]: per-operation results, or the
    /// error the server sent (e.g. `{"error":"...","details":"..."}`).
    TransactReply { id: u64, result: Result<Value, Value> },
    /// The lock is ours (from the `lock` reply or a `locked` notification).
    LockAcquired,
    /// The lock was stolen, or we are waiting for it.
    LockLost,
    /// The session wants the connection reset (malformed stream).
    Reset(String),
    /// The connection went down; replies to outstanding transactions will
    /// never come. The client reconnects.
    Disconnected(String),
}

#[derive(Debug, Clone, PartialEq)]
enum Pending {
    Schema,
    Monitor,
    Transact,
    Lock,
    Echo,
}

/// The protocol state of one logical session (survives reconnections).
#[derive(Debug)]
pub struct Session {
    codec: Codec,
    next_id: u64,
    pending: HashMap<u64, Pending>,
    out: VecDeque<u8>,
    events: VecDeque<Event>,
    replica: Replica,
    lock: Option<String>,
    have_lock: bool,
    schema_version: Option<String>,
    monitored: Vec<String>,
}

impl Default for Session {
    fn default() -> Self {
        Session::new()
    }
}

impl Session {
    pub fn new() -> Session {
        Session {
            codec: Codec::new(),
            next_id: 1,
            pending: HashMap::new(),
            out: VecDeque::new(),
            events: VecDeque::new(),
            replica: Replica::new(),
            lock: None,
            have_lock: false,
            schema_version: None,
            monitored: Vec::new(),
        }
    }

    pub fn replica(&self) -> &Replica {
        &self.replica
    }

    /// The schema version the server reported (e.g. "8.3.1").
    pub fn schema_version(&self) -> Option<&str> {
        self.schema_version.as_deref()
    }

    /// Tables the current monitor covers.
    pub fn monitored(&self) -> &[String] {
        &self.monitored
    }

    pub fn has_lock(&self) -> bool {
        self.have_lock
    }

    fn send(&mut self, method: &str, params: Vec<Value>, kind: Pending) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.pending.insert(id, kind);
        let msg = Message::Request { method: method.to_string(), params, id: json!(id) };
        self.out.extend(msg.encode());
        id
    }

    /// A fresh connection is up: start the handshake.
    pub fn handle_connected(&mut self) {
        self.codec = Codec::new();
        self.pending.clear();
        self.out.clear();
        self.have_lock = false;
        self.events.push_back(Event::Connected);
        self.send("get_schema", vec![json!(DB)], Pending::Schema);
        if let Some(name) = self.lock.clone() {
            self.send("lock", vec![json!(name)], Pending::Lock);
        }
    }

    /// The connection went down.
    pub fn handle_disconnected(&mut self, why: &str) {
        self.pending.clear();
        self.out.clear();
        if self.have_lock {
            self.have_lock = false;
            self.events.push_back(Event::LockLost);
        }
        self.events.push_back(Event::Disconnected(why.to_string()));
    }

    /// Queues a `transact` on the Open_vSwitch database; the reply comes as
    /// [`Event::TransactReply`] with the returned id.
    pub fn transact(&mut self, ops: Vec<Value>) -> u64 {
        let mut params = vec![json!(DB)];
        params.extend(ops);
        self.send("transact", params, Pending::Transact)
    }

    /// Asks for a named lock (ovs-vswitchd takes "ovs_vswitchd" so that two
    /// switches never manage one database); kept across reconnections.
    pub fn lock(&mut self, name: &str) {
        self.lock = Some(name.to_string());
        self.send("lock", vec![json!(name)], Pending::Lock);
    }

    /// Sends an `echo` to the server (a liveness probe).
    pub fn echo(&mut self) {
        self.send("echo", vec![], Pending::Echo);
    }

    /// Bytes waiting to be written.
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        if self.out.is_empty() {
            None
        } else {
            Some(self.out.drain(..).collect())
        }
    }

    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Bytes arrived from the server.
    pub fn handle_bytes(&mut self, bytes: &[u8]) {
        self.codec.feed(bytes);
        while let Some(v) = self.codec.next_value() {
            match v {
                Ok(v) => self.handle_value(v),
                Err(e) => {
                    warn!("ovsdb: {e}; resetting the connection");
                    self.events.push_back(Event::Reset(e.to_string()));
                    return;
                }
            }
        }
    }

    fn handle_value(&mut self, v: Value) {
        let msg = match Message::from_value(v) {
            Ok(m) => m,
            Err(e) => {
                warn!("ovsdb: {e}; ignored");
                return;
            }
        };
        match msg {
            Message::Request { method, params, id } if method == "echo" => {
                self.out.extend(Message::Response { result: Value::Array(params), error: Value::Null, id }.encode());
            }
            Message::Request { method, id, .. } => {
                warn!("ovsdb: unexpected request {method:?} from the server");
                let error = json!({"error": "unknown method", "details": method});
                self.out.extend(Message::Response { result: Value::Null, error, id }.encode());
            }
            Message::Notification { method, params } => self.handle_notification(&method, &params),
            Message::Response { result, error, id } => {
                let Some(kind) = id.as_u64().and_then(|n| self.pending.remove(&n).map(|k| (n, k))) else {
                    warn!("ovsdb: response to unknown id {id}; ignored");
                    return;
                };
                self.handle_response(kind.0, kind.1, result, error);
            }
        }
    }

    fn handle_notification(&mut self, method: &str, params: &[Value]) {
        match method {
            "update" | "update2" => {
                let Some(updates) = params.get(1) else {
                    warn!("ovsdb: {method} without table updates; ignored");
                    return;
                };
                let r = if method == "update" {
                    self.replica.apply_update(updates)
                } else {
                    self.replica.apply_update2(updates)
                };
                if let Err(e) = r {
                    warn!("ovsdb: {method}: {e}");
                }
                self.events.push_back(Event::ReplicaChanged);
            }
            "locked" => {
                self.have_lock = true;
                self.events.push_back(Event::LockAcquired);
            }
            "stolen" => {
                self.have_lock = false;
                self.events.push_back(Event::LockLost);
            }
            other => debug!("ovsdb: notification {other:?} ignored"),
        }
    }

    fn handle_response(&mut self, id: u64, kind: Pending, result: Value, error: Value) {
        match kind {
            Pending::Schema => {
                if !error.is_null() {
                    warn!("ovsdb: get_schema failed: {error}; monitoring the usual tables anyway");
                }
                self.schema_version = result.get("version").and_then(Value::as_str).map(str::to_string);
                let tables = result.get("tables").and_then(Value::as_object);
                let mut want = Vec::new();
                for t in TABLES {
                    match tables {
                        Some(ts) if !ts.contains_key(*t) => warn!("ovsdb: schema has no table {t}; not monitored"),
                        _ => want.push(t.to_string()),
                    }
                }
                if tables.is_none() && error.is_null() {
                    warn!("ovsdb: schema without \"tables\"; monitoring the usual tables anyway");
                }
                info!(version = self.schema_version.as_deref().unwrap_or("?"), "ovsdb: monitoring {}", want.join(","));
                let requests: serde_json::Map<String, Value> = want.iter().map(|t| (t.clone(), json!({}))).collect();
                self.monitored = want;
                self.send("monitor", vec![json!(DB), Value::Null, Value::Object(requests)], Pending::Monitor);
            }
            Pending::Monitor => {
                if !error.is_null() {
                    warn!("ovsdb: monitor failed: {error}");
                    self.events.push_back(Event::Reset(format!("monitor failed: {error}")));
                    return;
                }
                // The reply is the complete initial contents.
                self.replica = Replica::new();
                if let Err(e) = self.replica.apply_update(&result) {
                    warn!("ovsdb: monitor reply: {e}");
                }
                self.events.push_back(Event::ReplicaChanged);
            }
            Pending::Transact => {
                let result = if error.is_null() { Ok(result) } else { Err(error) };
                self.events.push_back(Event::TransactReply { id, result });
            }
            Pending::Lock => {
                if result.get("locked") == Some(&Value::Bool(true)) {
                    self.have_lock = true;
                    self.events.push_back(Event::LockAcquired);
                } else {
                    if !error.is_null() {
                        warn!("ovsdb: lock failed: {error}");
                    }
                    self.events.push_back(Event::LockLost);
                }
            }
            Pending::Echo => {}
        }
    }
}

/// Where the server is: `unix:PATH` or `tcp:IP:PORT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Remote {
    Unix(String),
    Tcp(String),
}

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("remote {0:?}: expected unix:PATH or tcp:IP:PORT")]
    BadRemote(String),
    #[error("not connected")]
    NotConnected,
    #[error("timed out")]
    Timeout,
    #[error("connection lost: {0}")]
    Disconnected(String),
    #[error("transaction failed: {0}")]
    Transaction(Value),
}

impl Remote {
    pub fn parse(s: &str) -> Result<Remote, ClientError> {
        if let Some(p) = s.strip_prefix("unix:") {
            Ok(Remote::Unix(p.to_string()))
        } else if let Some(a) = s.strip_prefix("tcp:") {
            Ok(Remote::Tcp(a.to_string()))
        } else {
            Err(ClientError::BadRemote(s.to_string()))
        }
    }
}

enum Stream {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Stream {
    fn open(r: &Remote) -> std::io::Result<Stream> {
        Ok(match r {
            Remote::Unix(p) => Stream::Unix(UnixStream::connect(p)?),
            Remote::Tcp(a) => {
                let s = TcpStream::connect(a)?;
                s.set_nodelay(true)?;
                Stream::Tcp(s)
            }
        })
    }
    fn set_read_timeout(&self, t: Duration) -> std::io::Result<()> {
        let t = Some(t.max(Duration::from_millis(1)));
        match self {
            Stream::Unix(s) => s.set_read_timeout(t),
            Stream::Tcp(s) => s.set_read_timeout(t),
        }
    }
    fn set_write_timeout(&self, t: Duration) -> std::io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_write_timeout(Some(t)),
            Stream::Tcp(s) => s.set_write_timeout(Some(t)),
        }
    }
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Unix(s) => s.read(buf),
            Stream::Tcp(s) => s.read(buf),
        }
    }
    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        match self {
            Stream::Unix(s) => s.write_all(buf),
            Stream::Tcp(s) => s.write_all(buf),
        }
    }
}

/// Backoff between connection attempts: doubles from `MIN_BACKOFF` to
/// `MAX_BACKOFF`, back to the minimum once a monitor reply has arrived.
pub const MIN_BACKOFF: Duration = Duration::from_millis(100);
pub const MAX_BACKOFF: Duration = Duration::from_secs(4);

/// Liveness: after this long without a byte from the server the client
/// sends an `echo`; after twice this long it drops the connection (a peer
/// that vanished without closing, e.g. over tcp).
pub const PROBE_INTERVAL: Duration = Duration::from_secs(5);

/// A blocking client: one thread calls [`Client::next_event`] in a loop
/// (and [`Client::transact_blocking`] between events).
pub struct Client {
    remote: Remote,
    stream: Option<Stream>,
    session: Session,
    backoff: Duration,
    next_attempt: Instant,
    /// Events taken from the session while waiting for a transaction.
    queued: VecDeque<Event>,
    last_rx: Instant,
    probe_sent: bool,
    probe_interval: Duration,
}

impl Client {
    /// Starts connecting to `remote` ("unix:PATH" or "tcp:IP:PORT"). Fails
    /// only on a malformed remote; an unreachable server is retried.
    pub fn connect(remote: &str) -> Result<Client, ClientError> {
        let remote = Remote::parse(remote)?;
        let mut c = Client {
            remote,
            stream: None,
            session: Session::new(),
            backoff: MIN_BACKOFF,
            next_attempt: Instant::now(),
            queued: VecDeque::new(),
            last_rx: Instant::now(),
            probe_sent: false,
            probe_interval: PROBE_INTERVAL,
        };
        c.try_connect();
        Ok(c)
    }

    pub fn session(&self) -> &Session {
        &self.session
    }

    pub fn replica(&self) -> &Replica {
        self.session.replica()
    }

    pub fn is_connected(&self) -> bool {
        self.stream.is_some()
    }

    /// Builds the typed desired state from the current replica.
    pub fn desired(&self) -> crate::Desired {
        crate::Desired::from_replica(self.session.replica())
    }

    /// Changes the liveness probe interval ([`PROBE_INTERVAL`] by default).
    pub fn set_probe_interval(&mut self, interval: Duration) {
        self.probe_interval = interval.max(Duration::from_millis(10));
    }

    /// Requests the named lock (see [`Session::lock`]).
    pub fn lock(&mut self, name: &str) {
        self.session.lock(name);
        self.flush();
    }

    fn try_connect(&mut self) {
        match Stream::open(&self.remote) {
            Ok(s) => {
                let _ = s.set_write_timeout(Duration::from_secs(5));
                info!(remote = ?self.remote, "ovsdb: connected");
                self.stream = Some(s);
                self.last_rx = Instant::now();
                self.probe_sent = false;
                self.session.handle_connected();
                self.flush();
            }
            Err(e) => {
                debug!(remote = ?self.remote, "ovsdb: connect failed: {e}; retry in {:?}", self.backoff);
                self.next_attempt = Instant::now() + self.backoff;
                self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
            }
        }
    }

    fn drop_connection(&mut self, why: &str) {
        if self.stream.take().is_some() {
            warn!(remote = ?self.remote, "ovsdb: connection lost: {why}");
            self.session.handle_disconnected(why);
            self.next_attempt = Instant::now() + self.backoff;
            self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
        }
    }

    fn flush(&mut self) {
        let Some(bytes) = self.session.poll_transmit() else { return };
        let Some(s) = self.stream.as_mut() else { return };
        if let Err(e) = s.write_all(&bytes) {
            self.drop_connection(&format!("write: {e}"));
        }
    }

    /// Takes one event from the session, handling resets.
    fn take_event(&mut self) -> Option<Event> {
        let ev = self.session.poll_event()?;
        match &ev {
            Event::Reset(why) => {
                let why = why.clone();
                self.drop_connection(&why);
            }
            Event::ReplicaChanged => self.backoff = MIN_BACKOFF,
            _ => {}
        }
        Some(ev)
    }

    /// Reads once (up to `deadline`) and feeds the session.
    fn pump(&mut self, deadline: Instant) {
        let now = Instant::now();
        if self.stream.is_none() {
            if now >= self.next_attempt {
                self.try_connect();
            } else {
                std::thread::sleep(self.next_attempt.min(deadline).saturating_duration_since(now));
            }
            return;
        }
        let idle = now.saturating_duration_since(self.last_rx);
        if idle >= 2 * self.probe_interval {
            self.drop_connection(&format!("no reply to echo for {idle:?}"));
            return;
        }
        if idle >= self.probe_interval && !self.probe_sent {
            self.probe_sent = true;
            self.session.echo();
            self.flush();
        }
        let wake =
            if self.probe_sent { self.last_rx + 2 * self.probe_interval } else { self.last_rx + self.probe_interval };
        let Some(s) = self.stream.as_mut() else { return };
        let _ = s.set_read_timeout(deadline.min(wake).saturating_duration_since(now));
        let mut buf = [0u8; 65536];
        match s.read(&mut buf) {
            Ok(0) => self.drop_connection("closed by the server"),
            Ok(n) => {
                self.last_rx = Instant::now();
                self.probe_sent = false;
                self.session.handle_bytes(&buf[..n]);
                self.flush();
            }
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => self.drop_connection(&format!("read: {e}")),
        }
    }

    /// The next event, waiting at most `timeout`. Keeps the connection up:
    /// reconnects with backoff, answers echo, applies updates.
    pub fn next_event(&mut self, timeout: Duration) -> Option<Event> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(ev) = self.queued.pop_front() {
                return Some(ev);
            }
            if let Some(ev) = self.take_event() {
                return Some(ev);
            }
            if Instant::now() >= deadline {
                return None;
            }
            self.pump(deadline);
        }
    }

    /// Sends a transaction without waiting; the reply is an
    /// [`Event::TransactReply`] with this id.
    pub fn transact(&mut self, ops: Vec<Value>) -> Result<u64, ClientError> {
        if self.stream.is_none() {
            return Err(ClientError::NotConnected);
        }
        let id = self.session.transact(ops);
        self.flush();
        Ok(id)
    }

    /// Sends a transaction and waits for its reply; other events that
    /// arrive meanwhile are kept for [`Client::next_event`]. Returns the
    /// per-operation results; an operation that failed (an element with
    /// "error") makes it `Err(ClientError::Transaction)`.
    pub fn transact_blocking(&mut self, ops: Vec<Value>, timeout: Duration) -> Result<Vec<Value>, ClientError> {
        let id = self.transact(ops)?;
        let deadline = Instant::now() + timeout;
        loop {
            while let Some(ev) = self.take_event() {
                match ev {
                    Event::TransactReply { id: got, result } if got == id => {
                        let results = result.map_err(ClientError::Transaction)?;
                        let results = match results {
                            Value::Array(a) => a,
                            other => return Err(ClientError::Transaction(other)),
                        };
                        if let Some(e) = results.iter().find(|r| r.get("error").is_some()) {
                            return Err(ClientError::Transaction(e.clone()));
                        }
                        return Ok(results);
                    }
                    Event::Disconnected(why) => {
                        self.queued.push_back(Event::Disconnected(why.clone()));
                        return Err(ClientError::Disconnected(why));
                    }
                    other => self.queued.push_back(other),
                }
            }
            if Instant::now() >= deadline {
                return Err(ClientError::Timeout);
            }
            self.pump(deadline);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jsonrpc::encode;

    fn sent(s: &mut Session) -> Vec<Value> {
        let bytes = s.poll_transmit().unwrap_or_default();
        let mut c = Codec::new();
        c.feed(&bytes);
        std::iter::from_fn(|| c.next_value()).map(|v| v.unwrap()).collect()
    }

    #[test]
    fn handshake_monitor_update_echo() {
        let mut s = Session::new();
        s.handle_connected();
        assert_eq!(s.poll_event(), Some(Event::Connected));
        let out = sent(&mut s);
        assert_eq!(out[0]["method"], "get_schema");
        let schema = json!({"result": {"name": "Open_vSwitch", "version": "8.3.1",
            "tables": {"Open_vSwitch": {}, "Bridge": {}, "Port": {}, "Interface": {}, "Controller": {}, "Mirror": {}}},
            "error": null, "id": out[0]["id"]});
        s.handle_bytes(&encode(&schema));
        let out = sent(&mut s);
        assert_eq!(out[0]["method"], "monitor");
        assert!(out[0]["params"][2].get("Datapath").is_none(), "absent table not monitored");
        let reply = json!({"result": {"Bridge": {"b1": {"new": {"name": "br0"}}}}, "error": null, "id": out[0]["id"]});
        s.handle_bytes(&encode(&reply));
        assert_eq!(s.poll_event(), Some(Event::ReplicaChanged));
        assert_eq!(s.replica().row("Bridge", "b1").unwrap()["name"], "br0");
        s.handle_bytes(br#"{"method":"echo","params":["x"],"id":"echo"}"#);
        assert_eq!(sent(&mut s), vec![json!({"result":["x"],"error":null,"id":"echo"})]);
        s.handle_bytes(br#"{"method":"update","params":[null,{"Bridge":{"b1":{"old":{}}}}],"id":null}"#);
        assert_eq!(s.poll_event(), Some(Event::ReplicaChanged));
        assert_eq!(s.replica().table("Bridge").count(), 0);
        // Unknown id and junk shapes are ignored; malformed JSON asks for a reset.
        s.handle_bytes(br#"{"result":1,"error":null,"id":999}{"what":1}[1,2]"#);
        assert_eq!(s.poll_event(), None);
        s.handle_bytes(b"{\"a\":nope}");
        assert!(matches!(s.poll_event(), Some(Event::Reset(_))));
    }

    #[test]
    fn transact_and_lock() {
        let mut s = Session::new();
        s.handle_connected();
        assert_eq!(s.poll_event(), Some(Event::Connected));
        sent(&mut s);
        let id = s.transact(vec![json!({"op": "comment", "comment": "x"})]);
        let out = sent(&mut s);
        assert_eq!(out[0]["params"][0], DB);
        s.handle_bytes(&encode(&json!({"result": [{}], "error": null, "id": id})));
        assert_eq!(s.poll_event(), Some(Event::TransactReply { id, result: Ok(json!([{}])) }));
        s.lock("ovs_vswitchd");
        let out = sent(&mut s);
        s.handle_bytes(&encode(&json!({"result": {"locked": false}, "error": null, "id": out[0]["id"]})));
        assert_eq!(s.poll_event(), Some(Event::LockLost));
        s.handle_bytes(br#"{"method":"locked","params":["ovs_vswitchd"],"id":null}"#);
        assert_eq!(s.poll_event(), Some(Event::LockAcquired));
        assert!(s.has_lock());
        s.handle_connected();
        assert!(sent(&mut s).iter().any(|m| m["method"] == "lock"), "lock re-requested on reconnect");
    }
}
