//! The OpenFlow transport of one bridge: the management socket that
//! `ovs-ofctl` talks to (`<run-dir>/<bridge>.mgmt`), the snoop socket
//! (`<bridge>.snoop`), and controller connections (active `tcp:IP:PORT`
//! or `unix:PATH` with reconnect backoff, passive `ptcp:PORT[:IP]` or
//! `punix:PATH`).
//!
//! The protocol itself (negotiation, roles, bundles, asynchronous
//! configuration, keepalive, the fail mode) is the sans-IO
//! [`ofservice::Service`]; this module only moves bytes to and from it
//! and implements its [`ofservice::Bridge`] over the pipeline.
//!
//! Threads: one event loop (mio: epoll) per bridge serves every
//! listener and connection with non-blocking sockets, each with a bounded
//! outgoing buffer ([`crate::ofout`]), so no peer that stops reading can
//! block another connection or housekeeping, and a connection costs a
//! descriptor and a few buffers, not threads. A second thread delivers
//! packet-ins from the poll threads' queue, expires rules, follows link
//! state and ticks the service (keepalive, port-status, the fail mode);
//! both take the service's lock for the time of one message or event.
//!
//! Every message goes through the sans-IO codec ([`openflow::msg`]); a
//! malformed one is answered with the spec's error carrying its first
//! bytes, and the connection stays up unless the framing itself is lost.

use crate::ofout::{OutBuf, Pushed};
use crate::switch::{PacketInEvent, Shared};
use anyhow::{bail, Context, Result};
use mio::{Events, Interest, Poll, Token};
use ofproto::actions::ofpp;
use ofproto::{FlowModCmd, FlowModError, TableMiss};
use ofservice::{Bridge, ConnId, Kind, Miss, Output, Removed, Service};
use openflow::msg::{self, FlowStats, Msg, PortDesc};
use openflow::{ErrorKind, Framer, Version};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use ofservice::FailMode;

#[derive(Clone, Debug)]
pub struct OfConfig {
    pub dpid: u64,
    /// OpenFlow versions to speak (Bridge `protocols`); empty: all xvs has.
    pub protocols: Vec<Version>,
    /// Targets as [`parse_target`] reads them.
    pub controllers: Vec<String>,
    pub fail_mode: FailMode,
    pub run_dir: PathBuf,
}

/// Checks a controller target's syntax.
/// An address as OVS writes it in a target: IPv4, or IPv6 in brackets.
fn target_ip(s: &str, what: &str) -> Result<std::net::IpAddr> {
    let bare = s.strip_prefix('[').and_then(|r| r.strip_suffix(']'));
    match bare {
        Some(v6) => v6
            .parse::<std::net::Ipv6Addr>()
            .map(Into::into)
            .map_err(|_| anyhow::anyhow!("{what}: bad IPv6 address '{s}'")),
        None if s.contains(':') => bail!("{what}: an IPv6 address goes in brackets ('[{s}]')"),
        None => {
            s.parse::<std::net::Ipv4Addr>().map(Into::into).map_err(|_| anyhow::anyhow!("{what}: bad IP address '{s}'"))
        }
    }
}

fn target_port(s: &str, what: &str) -> Result<u16> {
    s.parse::<u16>().ok().filter(|&p| p > 0).ok_or_else(|| anyhow::anyhow!("{what}: bad port '{s}'"))
}

/// A controller target: where to connect (active) or listen (passive).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// `tcp:`: a socket address (`IP:PORT`, IPv6 bracketed).
    Tcp(String),
    /// `ptcp:`: the address to listen on.
    Ptcp(String),
    /// `unix:PATH`: connect to a Unix socket.
    Unix(PathBuf),
    /// `punix:PATH`: listen on a Unix socket.
    Punix(PathBuf),
}

/// Parses a controller target in Open vSwitch's syntax: `tcp:IP[:PORT]`
/// (connect) or `ptcp:[PORT][:IP]` (listen), IPv6 addresses in brackets
/// (`tcp:[::1]:6653`, `ptcp:6653:[::1]`), port 6653 by default, and
/// `unix:PATH` / `punix:PATH`. Anything else is refused with a message
/// naming the target.
pub fn parse_target(s: &str) -> Result<Target> {
    let what = format!("controller '{s}'");
    for (prefix, active) in [("unix:", true), ("punix:", false)] {
        if let Some(path) = s.strip_prefix(prefix) {
            if path.is_empty() {
                bail!("{what}: expected {prefix}PATH");
            }
            let path = PathBuf::from(path);
            return Ok(if active { Target::Unix(path) } else { Target::Punix(path) });
        }
    }
    if let Some(rest) = s.strip_prefix("tcp:") {
        // IP, or IP:PORT; a bracketed IPv6 address may carry colons.
        let (ip, port) = match rest.rfind(']') {
            Some(e) => (&rest[..=e], rest[e + 1..].strip_prefix(':')),
            None => match rest.split_once(':') {
                Some((ip, port)) if !port.contains(':') => (ip, Some(port)),
                Some(_) => bail!("{what}: an IPv6 address goes in brackets (tcp:[::1]:6653)"),
                None => (rest, None),
            },
        };
        if rest.contains(']') && !rest[rest.rfind(']').unwrap_or(0) + 1..].is_empty() && port.is_none() {
            bail!("{what}: expected tcp:[IPv6]:PORT");
        }
        let ip = target_ip(ip, &what)?;
        let port = port.map(|p| target_port(p, &what)).transpose()?.unwrap_or(6653);
        Ok(Target::Tcp(std::net::SocketAddr::new(ip, port).to_string()))
    } else if let Some(rest) = s.strip_prefix("ptcp:") {
        let (port, ip) = match rest.split_once(':') {
            Some((p, ip)) => (p, Some(ip)),
            None => (rest, None),
        };
        let port = if port.is_empty() { 6653 } else { target_port(port, &what)? };
        let ip = match ip {
            Some(ip) => target_ip(ip, &what)?,
            None => std::net::Ipv4Addr::UNSPECIFIED.into(),
        };
        Ok(Target::Ptcp(std::net::SocketAddr::new(ip, port).to_string()))
    } else if s.starts_with("ssl:") || s.starts_with("pssl:") {
        bail!("{what}: ssl: and pssl: controllers are not supported (use tcp:, ptcp:, unix: or punix:)")
    } else {
        bail!("{what}: not tcp:IP[:PORT], ptcp:[PORT][:IP], unix:PATH or punix:PATH")
    }
}

#[cfg(test)]
mod target_tests {
    use super::{parse_target, Target};
    use std::path::PathBuf;

    fn tcp(a: &str) -> Target {
        Target::Tcp(a.into())
    }
    fn ptcp(a: &str) -> Target {
        Target::Ptcp(a.into())
    }

    #[test]
    fn ovs_target_syntax() {
        assert_eq!(parse_target("tcp:127.0.0.1:6653").unwrap(), tcp("127.0.0.1:6653"));
        assert_eq!(parse_target("tcp:127.0.0.1").unwrap(), tcp("127.0.0.1:6653"));
        assert_eq!(parse_target("tcp:[::1]:6654").unwrap(), tcp("[::1]:6654"));
        assert_eq!(parse_target("tcp:[::1]").unwrap(), tcp("[::1]:6653"));
        assert_eq!(parse_target("ptcp:6653").unwrap(), ptcp("0.0.0.0:6653"));
        assert_eq!(parse_target("ptcp:").unwrap(), ptcp("0.0.0.0:6653"));
        assert_eq!(parse_target("ptcp:6653:[::1]").unwrap(), ptcp("[::1]:6653"));
        assert_eq!(parse_target("ptcp:6653:127.0.0.1").unwrap(), ptcp("127.0.0.1:6653"));
        assert_eq!(parse_target("unix:/run/c.sock").unwrap(), Target::Unix(PathBuf::from("/run/c.sock")));
        assert_eq!(parse_target("punix:/run/l.sock").unwrap(), Target::Punix(PathBuf::from("/run/l.sock")));
        // Every parsed address is one the socket layer takes.
        for t in ["tcp:[::1]:6654", "ptcp:6653:[::1]", "tcp:10.0.0.1"] {
            let (Target::Tcp(a) | Target::Ptcp(a)) = parse_target(t).unwrap() else { panic!("{t}") };
            assert!(a.parse::<std::net::SocketAddr>().is_ok(), "{t} -> {a}");
        }
        for bad in [
            "tcp:::1:6653",
            "ptcp:6653:::1",
            "tcp:[::1",
            "tcp:1.2.3.4:0",
            "tcp:1.2.3.4:x",
            "udp:1.2.3.4",
            "tcp:",
            "ptcp:99999",
            "unix:",
            "punix:",
            "ssl:1.2.3.4:6653",
        ] {
            let e = parse_target(bad).unwrap_err().to_string();
            assert!(e.contains(bad), "{bad}: {e}");
        }
    }
}

/// Versions named as the Bridge table's `protocols` column names them
/// (`OpenFlow10`, `OpenFlow13`...). OpenFlow 1.1 and 1.2, which xvs does
/// not speak, are skipped when other versions remain; a list of only
/// those, or an unknown name, is refused with the name.
pub fn parse_protocols(names: &[String]) -> Result<Vec<Version>> {
    let mut out = Vec::new();
    let mut skipped = Vec::new();
    for n in names.iter().flat_map(|n| n.split(',')).map(str::trim).filter(|n| !n.is_empty()) {
        match n {
            "OpenFlow10" => out.push(Version::Of10),
            "OpenFlow13" => out.push(Version::Of13),
            "OpenFlow14" => out.push(Version::Of14),
            "OpenFlow15" => out.push(Version::Of15),
            "OpenFlow11" | "OpenFlow12" => skipped.push(n.to_string()),
            _ => bail!("protocols: {n:?} is not an OpenFlow version (OpenFlow10, OpenFlow13, OpenFlow14, OpenFlow15)"),
        }
    }
    if out.is_empty() && !skipped.is_empty() {
        bail!(
            "protocols: xvs does not speak {} (it has OpenFlow10, OpenFlow13, OpenFlow14, OpenFlow15)",
            skipped.join(", ")
        );
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// A connection's socket (non-blocking, registered with the event loop).
enum Stream {
    Unix(mio::net::UnixStream),
    Tcp(mio::net::TcpStream),
}

impl Stream {
    fn source(&mut self) -> &mut dyn mio::event::Source {
        match self {
            Stream::Unix(s) => s,
            Stream::Tcp(s) => s,
        }
    }

    /// For a connect in progress: `Ok(true)` once established, `Ok(false)`
    /// while still connecting, `Err` when it failed.
    fn connected(&self) -> std::io::Result<bool> {
        let (err, peer) = match self {
            Stream::Unix(s) => (s.take_error(), s.peer_addr().map(|_| ())),
            Stream::Tcp(s) => (s.take_error(), s.peer_addr().map(|_| ())),
        };
        if let Some(e) = err? {
            return Err(e);
        }
        match peer {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotConnected => Ok(false),
            Err(e) => Err(e),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Unix(s) => s.read(b),
            Stream::Tcp(s) => s.read(b),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Unix(s) => s.write(b),
            Stream::Tcp(s) => s.write(b),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A listening socket: the management and snoop sockets, and passive
/// controller targets.
enum Listener {
    Unix(mio::net::UnixListener),
    Tcp(mio::net::TcpListener),
}

struct Listening {
    l: Listener,
    kind: Kind,
    /// `punix:PATH` for passive controllers (their connections' name).
    name: String,
    limit: Limit,
    /// After a failed accept (EMFILE...): when to try again.
    retry_at: Option<Instant>,
}

impl Listening {
    fn source(&mut self) -> &mut dyn mio::event::Source {
        match &mut self.l {
            Listener::Unix(l) => l,
            Listener::Tcp(l) => l,
        }
    }

    fn accept(&self) -> std::io::Result<(Stream, String)> {
        match &self.l {
            Listener::Unix(l) => l.accept().map(|(s, _)| (Stream::Unix(s), self.name.clone())),
            Listener::Tcp(l) => l.accept().map(|(s, a)| {
                let _ = s.set_nodelay(true);
                (Stream::Tcp(s), a.to_string())
            }),
        }
    }
}

/// An active controller target: connect, serve, reconnect with backoff
/// (1 s doubling to 8 s).
struct Active {
    target: Target,
    backoff: Duration,
    next_try: Instant,
    /// A connect in progress, and when to give up on it.
    pending: Option<(Stream, Instant)>,
    conn: Option<ConnId>,
}

/// One connection's transport: its socket, framing and bounded outgoing
/// buffer. What the connection means is in the service.
struct Conn {
    stream: Stream,
    name: String,
    framer: Framer,
    out: OutBuf,
    /// The service asked to close once the buffer is written.
    closing: bool,
    /// Reading stopped because too many replies wait ([`crate::ofout::READ_PAUSE`]).
    paused: bool,
    /// The active target this connection serves.
    active: Option<usize>,
    _slot: Option<Slot>,
}

/// The service and the connections it talks through, under one lock:
/// the service's output is written in the order it was made.
struct Core {
    svc: Service,
    conns: BTreeMap<ConnId, Conn>,
    /// Active targets whose connection closed (the event loop schedules
    /// the reconnect).
    lost_active: Vec<usize>,
}

const WAKER: Token = Token(usize::MAX);
const ACTIVE_BASE: usize = 1 << 40;
const LISTENER_BASE: usize = 1 << 41;
/// Bytes read from one connection before others get their turn.
const READ_CHUNKS: usize = 4;

/// The OpenFlow transport of one bridge.
pub struct OfManager {
    sh: Arc<Shared>,
    cfg: OfConfig,
    core: Mutex<Core>,
    stop: Arc<AtomicBool>,
    /// Ports a controller set administratively down (port_mod PORT_DOWN).
    admin_down: Mutex<std::collections::BTreeSet<u32>>,
    /// Set by [`OfManager::shutdown`] (this bridge only; `stop` is the process's).
    own_stop: AtomicBool,
    /// Socket files of passive `punix:` targets, removed at shutdown.
    punix: Vec<PathBuf>,
    waker: mio::Waker,
}

impl OfManager {
    /// Binds the management and snoop sockets and passive targets, starts
    /// the event loop (which also connects active targets) and the
    /// housekeeping thread.
    pub fn start(sh: Arc<Shared>, cfg: OfConfig, stop: Arc<AtomicBool>) -> Result<Arc<OfManager>> {
        let targets = cfg.controllers.iter().map(|c| parse_target(c)).collect::<Result<Vec<_>>>()?;
        std::fs::create_dir_all(&cfg.run_dir)
            .with_context(|| format!("creating run directory {}", cfg.run_dir.display()))?;
        let unix = |l: std::os::unix::net::UnixListener| -> Result<Listener> {
            l.set_nonblocking(true)?;
            Ok(Listener::Unix(mio::net::UnixListener::from_std(l)))
        };
        let mut listeners = Vec::new();
        for (kind, ext) in [(Kind::Service, "mgmt"), (Kind::Snoop, "snoop")] {
            let l = crate::runfiles::bind_socket(&cfg.run_dir.join(format!("{}.{ext}", sh.bridge)))?;
            let what = format!("{}.{ext}", sh.bridge);
            listeners.push(Listening {
                l: unix(l)?,
                kind,
                name: "unix".into(),
                limit: Limit::new(what),
                retry_at: None,
            });
        }
        let mut actives = Vec::new();
        let mut punix = Vec::new();
        for target in targets {
            match target {
                Target::Tcp(_) | Target::Unix(_) => actives.push(Active {
                    target,
                    backoff: Duration::from_secs(1),
                    next_try: Instant::now(),
                    pending: None,
                    conn: None,
                }),
                Target::Punix(path) => {
                    let l = crate::runfiles::bind_socket(&path)
                        .with_context(|| format!("controller punix:{}", path.display()))?;
                    let name = format!("punix:{}", path.display());
                    listeners.push(Listening {
                        l: unix(l)?,
                        kind: Kind::Controller,
                        name: name.clone(),
                        limit: Limit::new(name),
                        retry_at: None,
                    });
                    punix.push(path);
                }
                Target::Ptcp(addr) => {
                    let l = TcpListener::bind(&addr).with_context(|| format!("controller: listening on {addr}"))?;
                    l.set_nonblocking(true)?;
                    listeners.push(Listening {
                        l: Listener::Tcp(mio::net::TcpListener::from_std(l)),
                        kind: Kind::Controller,
                        name: String::new(),
                        limit: Limit::new(format!("ptcp:{addr}")),
                        retry_at: None,
                    });
                }
            }
        }
        let poll = Poll::new().context("OpenFlow event loop")?;
        for (i, l) in listeners.iter_mut().enumerate() {
            poll.registry().register(l.source(), Token(LISTENER_BASE + i), Interest::READABLE)?;
        }
        let waker = mio::Waker::new(poll.registry(), WAKER)?;
        let svc = Service::new(ofservice::Config {
            versions: cfg.protocols.clone(),
            dpid: cfg.dpid,
            fail_mode: (!cfg.controllers.is_empty()).then_some(cfg.fail_mode),
        });
        let m = Arc::new(OfManager {
            sh,
            cfg,
            core: Mutex::new(Core { svc, conns: BTreeMap::new(), lost_active: Vec::new() }),
            stop,
            admin_down: Mutex::new(Default::default()),
            own_stop: AtomicBool::new(false),
            punix,
            waker,
        });
        if !m.cfg.controllers.is_empty() {
            // A bridge with controllers starts with an empty table; what a
            // miss does follows the fail mode until one connects.
            let mut of = m.sh.ofproto.write().expect("ofproto lock");
            let all = ofproto::parse_flow("", ofproto::Need::NoActions).expect("catch-all");
            let _ = of.flow_mod(FlowModCmd::Delete, &all);
            of.take_removed();
            drop(of);
            m.with_service(|s| s.update_fail_mode(&*m));
        }
        let mm = Arc::clone(&m);
        // Packet-outs translate (resubmits recurse): a roomy stack.
        std::thread::Builder::new()
            .name("of-io".into())
            .stack_size(16 << 20)
            .spawn(move || mm.run_io(poll, listeners, actives))?;
        let mm = Arc::clone(&m);
        std::thread::Builder::new().name("of-async".into()).spawn(move || mm.run_async())?;
        Ok(m)
    }

    /// Runs `f` on the service, then writes what it produced.
    fn with_service<R>(&self, f: impl FnOnce(&mut Service) -> R) -> R {
        let mut core = self.core.lock().expect("OpenFlow service");
        let r = f(&mut core.svc);
        self.route(&mut core);
        r
    }

    /// Hands the service's output to the connections, writes what the
    /// sockets take, and closes the connections that are done.
    fn route(&self, core: &mut Core) {
        loop {
            let out = core.svc.take_output();
            if out.is_empty() {
                return;
            }
            let mut touched = std::collections::BTreeSet::new();
            let mut gone = Vec::new();
            for o in out {
                match o {
                    Output::Reply(id, b) => {
                        if let Some(c) = core.conns.get_mut(&id) {
                            if c.out.push_reply(&b) == Pushed::Overflow {
                                eprintln!("xvs: OpenFlow peer {}: closing, it does not read its replies", c.name);
                                gone.push(id);
                            }
                            touched.insert(id);
                        }
                    }
                    Output::Async(id, b) => {
                        if let Some(c) = core.conns.get_mut(&id) {
                            if let Pushed::Dropped { log: true, total } = c.out.push_async(&b) {
                                eprintln!(
                                    "xvs: OpenFlow peer {} is not reading: dropped {total} asynchronous messages so far",
                                    c.name
                                );
                            }
                            touched.insert(id);
                        }
                    }
                    Output::Close(id) => {
                        if let Some(c) = core.conns.get_mut(&id) {
                            c.closing = true;
                            touched.insert(id);
                        }
                    }
                    Output::Log(s) => eprintln!("xvs: {s}"),
                }
            }
            for id in touched {
                if gone.contains(&id) {
                    continue;
                }
                let Some(c) = core.conns.get_mut(&id) else { continue };
                // A connection the service closes gets what the socket
                // takes now (a final error fits), and no more: a peer that
                // was closed for not answering would never drain the rest.
                match c.out.flush_to(&mut c.stream) {
                    _ if c.closing => gone.push(id),
                    Ok(_) => {}
                    Err(_) => gone.push(id),
                }
            }
            for id in gone {
                self.drop_conn(core, id);
            }
        }
    }

    /// Closes a connection: the socket, the service's session, and for an
    /// active target, the reconnect.
    fn drop_conn(&self, core: &mut Core, id: ConnId) {
        if let Some(c) = core.conns.remove(&id) {
            if let Some(i) = c.active {
                core.lost_active.push(i);
            }
            core.svc.disconnect(id, self);
        }
    }

    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire) || self.own_stop.load(Ordering::Acquire)
    }

    /// Stops this bridge's OpenFlow service (the event loop closes every
    /// connection and listener) and removes its sockets.
    pub fn shutdown(&self) {
        self.own_stop.store(true, Ordering::Release);
        let _ = self.waker.wake();
        for kind in ["mgmt", "snoop"] {
            let _ = std::fs::remove_file(self.cfg.run_dir.join(format!("{}.{kind}", self.sh.bridge)));
        }
        for p in &self.punix {
            let _ = std::fs::remove_file(p);
        }
    }

    pub fn mgmt_path(&self) -> PathBuf {
        self.cfg.run_dir.join(format!("{}.mgmt", self.sh.bridge))
    }

    /// A new connection: registered with the loop, given to the service
    /// (which queues its HELLO).
    fn add_conn(
        &self,
        registry: &mio::Registry,
        mut stream: Stream,
        kind: Kind,
        name: String,
        slot: Option<Slot>,
        active: Option<usize>,
    ) -> Option<ConnId> {
        let mut core = self.core.lock().expect("OpenFlow service");
        let id = core.svc.connect(kind, &name, self.sh.now_ms());
        if registry.register(stream.source(), Token(id as usize), Interest::READABLE | Interest::WRITABLE).is_err() {
            core.svc.disconnect(id, self);
            core.svc.take_output();
            return None;
        }
        let conn = Conn {
            stream,
            name,
            framer: Framer::default(),
            out: OutBuf::default(),
            closing: false,
            paused: false,
            active,
            _slot: slot,
        };
        core.conns.insert(id, conn);
        self.route(&mut core);
        Some(id)
    }

    /// The event loop: every socket of this bridge's OpenFlow service,
    /// non-blocking, in one thread. Nothing here waits on a peer.
    fn run_io(&self, mut poll: Poll, mut listeners: Vec<Listening>, mut actives: Vec<Active>) {
        let mut events = Events::with_capacity(256);
        let mut buf = vec![0u8; 65536];
        let mut to_read: std::collections::BTreeSet<ConnId> = Default::default();
        while !self.stopping() {
            let now = Instant::now();
            // Sleep until the next deadline (listener retry, reconnect,
            // connect timeout), at most 100 ms (the stop flags).
            let mut wait = Duration::from_millis(100);
            let deadlines =
                listeners.iter().filter_map(|l| l.retry_at).chain(actives.iter().filter_map(|a| match &a.pending {
                    Some((_, deadline)) => Some(*deadline),
                    None => a.conn.is_none().then_some(a.next_try),
                }));
            for t in deadlines.collect::<Vec<_>>() {
                wait = wait.min(t.saturating_duration_since(now));
            }
            if !to_read.is_empty() {
                wait = Duration::ZERO;
            }
            if let Err(e) = poll.poll(&mut events, Some(wait)) {
                if e.kind() != std::io::ErrorKind::Interrupted {
                    eprintln!("xvs: OpenFlow event loop: {e}");
                    std::thread::sleep(Duration::from_millis(100));
                }
                continue;
            }
            for ev in events.iter() {
                let t = ev.token().0;
                if ev.token() == WAKER {
                } else if t >= LISTENER_BASE {
                    if let Some(l) = listeners.get_mut(t - LISTENER_BASE) {
                        self.accept_all(poll.registry(), l);
                    }
                } else if t >= ACTIVE_BASE {
                    if let Some(i) = (t - ACTIVE_BASE < actives.len()).then_some(t - ACTIVE_BASE) {
                        self.connect_progress(poll.registry(), &mut actives, i);
                    }
                } else {
                    let id = t as ConnId;
                    if ev.is_writable() {
                        let mut core = self.core.lock().expect("OpenFlow service");
                        if let Some(c) = core.conns.get_mut(&id) {
                            match c.out.flush_to(&mut c.stream) {
                                Ok(true) if c.closing => self.drop_conn(&mut core, id),
                                Ok(_) => {}
                                Err(_) => self.drop_conn(&mut core, id),
                            }
                        }
                    }
                    if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                        to_read.insert(id);
                    }
                }
            }
            // Peers whose replies drained below the pause get read again.
            {
                let core = self.core.lock().expect("OpenFlow service");
                for (&id, c) in core.conns.iter().filter(|(_, c)| c.paused) {
                    if c.out.queued_bytes() <= crate::ofout::READ_PAUSE {
                        to_read.insert(id);
                    }
                }
            }
            for id in std::mem::take(&mut to_read) {
                if self.read_some(id, &mut buf) {
                    to_read.insert(id);
                }
            }
            let now = Instant::now();
            for l in listeners.iter_mut().filter(|l| l.retry_at.is_some_and(|t| t <= now)) {
                l.retry_at = None;
                self.accept_all(poll.registry(), l);
            }
            let lost = std::mem::take(&mut self.core.lock().expect("OpenFlow service").lost_active);
            for i in lost {
                let a = &mut actives[i];
                a.conn = None;
                a.next_try = now + a.backoff;
                a.backoff = (a.backoff * 2).min(Duration::from_secs(8));
            }
            for (i, a) in actives.iter_mut().enumerate() {
                if a.conn.is_none() && a.pending.is_none() && a.next_try <= now {
                    self.connect_start(poll.registry(), a, i);
                } else if a.pending.as_ref().is_some_and(|(_, d)| *d <= now) {
                    // Connect timed out.
                    a.pending = None;
                    a.next_try = now + a.backoff;
                    a.backoff = (a.backoff * 2).min(Duration::from_secs(8));
                }
            }
        }
        // Stopping: every connection and listener closes with the loop.
        let mut core = self.core.lock().expect("OpenFlow service");
        let ids: Vec<ConnId> = core.conns.keys().copied().collect();
        for id in ids {
            let _ = core.conns.get_mut(&id).map(|c| c.out.flush_to(&mut c.stream));
            self.drop_conn(&mut core, id);
        }
        core.svc.take_output();
    }

    /// Accepts what the listener has, under its [`Limit`]: connections
    /// past the limit are closed at once (one log line each time the limit
    /// is reached); a failing accept (EMFILE, ENFILE, ENOMEM: local
    /// resource exhaustion) is retried after 100 ms instead of spinning.
    fn accept_all(&self, registry: &mio::Registry, l: &mut Listening) {
        loop {
            match l.accept() {
                Ok((s, name)) => {
                    if l.limit.try_take() {
                        self.add_conn(registry, s, l.kind, name, Some(l.limit.slot()), None);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    l.limit.log_error(&e);
                    l.retry_at = Some(Instant::now() + Duration::from_millis(100));
                    return;
                }
            }
        }
    }

    fn connect_start(&self, registry: &mio::Registry, a: &mut Active, i: usize) {
        let s = match &a.target {
            Target::Tcp(addr) => mio::net::TcpStream::connect(addr.parse().expect("checked")).map(|s| {
                let _ = s.set_nodelay(true);
                Stream::Tcp(s)
            }),
            Target::Unix(p) => mio::net::UnixStream::connect(p).map(Stream::Unix),
            Target::Ptcp(_) | Target::Punix(_) => return,
        };
        match s {
            Ok(mut s) => {
                if registry
                    .register(s.source(), Token(ACTIVE_BASE + i), Interest::READABLE | Interest::WRITABLE)
                    .is_ok()
                {
                    a.pending = Some((s, Instant::now() + Duration::from_secs(2)));
                    return;
                }
                a.next_try = Instant::now() + a.backoff;
            }
            Err(_) => {
                a.next_try = Instant::now() + a.backoff;
                a.backoff = (a.backoff * 2).min(Duration::from_secs(8));
            }
        }
    }

    fn connect_progress(&self, registry: &mio::Registry, actives: &mut [Active], i: usize) {
        let a = &mut actives[i];
        let Some((s, _)) = &a.pending else { return };
        match s.connected() {
            Ok(false) => {}
            Ok(true) => {
                let (mut s, _) = a.pending.take().expect("pending");
                let _ = registry.deregister(s.source());
                let name = match &a.target {
                    Target::Tcp(addr) => format!("tcp:{addr}"),
                    Target::Unix(p) => format!("unix:{}", p.display()),
                    _ => String::new(),
                };
                a.backoff = Duration::from_secs(1);
                a.conn = self.add_conn(registry, s, Kind::Controller, name, None, Some(i));
                if a.conn.is_none() {
                    a.next_try = Instant::now() + a.backoff;
                }
            }
            Err(_) => {
                a.pending = None;
                a.next_try = Instant::now() + a.backoff;
                a.backoff = (a.backoff * 2).min(Duration::from_secs(8));
            }
        }
    }

    /// Reads what a connection has (up to [`READ_CHUNKS`] buffers) and
    /// hands each message to the service. True when more may be waiting.
    fn read_some(&self, id: ConnId, buf: &mut [u8]) -> bool {
        for _ in 0..READ_CHUNKS {
            let mut core = self.core.lock().expect("OpenFlow service");
            let Some(c) = core.conns.get_mut(&id) else { return false };
            // Flow control: a peer that does not read its replies gets no
            // more of its requests read (this waits only on this peer).
            c.paused = c.out.queued_bytes() > crate::ofout::READ_PAUSE;
            if c.paused || c.closing {
                return false;
            }
            let n = match c.stream.read(buf) {
                Ok(0) => {
                    self.drop_conn(&mut core, id);
                    return false;
                }
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return false,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    self.drop_conn(&mut core, id);
                    return false;
                }
            };
            c.framer.handle_bytes(&buf[..n]);
            let now = self.sh.now_ms();
            loop {
                let Some(c) = core.conns.get_mut(&id) else { return false };
                match c.framer.poll_message() {
                    Ok(Some(m)) => {
                        core.svc.receive(id, m, now, self);
                        self.route(&mut core);
                    }
                    Ok(None) => break,
                    Err(_) => {
                        core.svc.framing_lost(id);
                        self.route(&mut core);
                        return false;
                    }
                }
            }
        }
        true
    }

    /// Delivers packet-ins; every 200 ms follows link state, expires
    /// rules (flow-removed) and ticks the service (keepalive,
    /// port-status, the fail mode).
    fn run_async(self: Arc<Self>) {
        let rx = self.sh.packet_in_rx.lock().expect("packet-in rx").take();
        let mut last_hk = Instant::now() - Duration::from_secs(1);
        let mut timeouts_checked = (0u64, false);
        while !self.stopping() {
            if let Some(rx) = &rx {
                match rx.recv_timeout(Duration::from_millis(50)) {
                    Ok(ev) => {
                        self.deliver_packet_in(ev);
                        while let Ok(ev) = rx.try_recv() {
                            self.deliver_packet_in(ev);
                        }
                    }
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                    Err(_) => std::thread::sleep(Duration::from_millis(50)),
                }
            } else {
                std::thread::sleep(Duration::from_millis(50));
            }
            if last_hk.elapsed() < Duration::from_millis(200) {
                continue;
            }
            last_hk = Instant::now();
            // Link state: a port whose device lost carrier, or is gone, is
            // down (fast-failover groups and flooding follow it).
            for p in self.sh.ports.read().expect("ports lock").values().cloned().collect::<Vec<_>>() {
                let link = p.link();
                let admin_down = self.admin_down.lock().expect("admin").contains(&p.ofport);
                if let Some(c) = link.carrier {
                    let up = c && link.present && !admin_down && !link.bfd_down;
                    let mut of = self.sh.ofproto.write().expect("ofproto lock");
                    if of.port(p.ofport).is_some_and(|pc| pc.up != up) {
                        of.set_port_up(p.ofport, up);
                    }
                }
            }
            // Rule timeouts.
            let now = self.sh.now_ms();
            // Scanning for timeouts costs a pass over every rule: redo it
            // only when the rules changed.
            let version = self.sh.ofproto.read().expect("ofproto lock").version();
            if version != timeouts_checked.0 {
                timeouts_checked = (version, self.sh.ofproto.read().expect("ofproto lock").has_timeouts());
            }
            if timeouts_checked.1 {
                self.sh.sync_stats();
                let mut of = self.sh.ofproto.write().expect("ofproto lock");
                of.set_now(now);
                of.expire_rules(now);
                let removed = of.take_removed();
                drop(of);
                let removed = self.removed(removed);
                self.with_service(|svc| svc.flow_removed(&removed));
            }
            self.with_service(|svc| svc.tick(now, &*self));
        }
    }

    fn deliver_packet_in(&self, ev: PacketInEvent) {
        let reason = match (&ev.extra, ev.reason) {
            (Some(x), _) => x.reason,
            (None, dpif::UserspaceReason::NoMatch) => 0u8,
            (None, dpif::UserspaceReason::Action) => 1,
            (None, dpif::UserspaceReason::InvalidTtl) => 2,
        };
        // The pipeline metadata the controller action saw, as match fields
        // (NXT_PACKET_IN2's metadata): in_port and every non-zero
        // metadata-stage field.
        let metadata = ev.extra.as_ref().map(|x| {
            let mut m = flow::Match::CATCHALL;
            for f in flow::fields::FIELDS.iter().filter(|f| !f.alias && f.loc.word < flow::key::STAGE_L2) {
                let v = f.get(&x.meta);
                if v != 0 || f.name == "in_port" {
                    m.set_field(f, if f.name == "in_port" { ev.in_port as u128 } else { v });
                }
            }
            m
        });
        let p = ofservice::PacketIn {
            reason,
            table_id: ev.table_id,
            cookie: ev.cookie,
            in_port: ev.in_port,
            max_len: ev.max_len,
            data: &ev.data,
            full_len: ev.full_len,
            controller_id: ev.extra.as_ref().map(|x| x.controller_id),
            metadata: metadata.as_ref(),
            userdata: ev.extra.as_ref().map_or(&[][..], |x| &x.userdata[..]),
            continuation: ev.extra.as_ref().and_then(|x| x.continuation.as_deref()),
        };
        self.with_service(|svc| svc.packet_in(&p));
    }

    /// Removed rules as flow-removed reports them (ofproto records only
    /// rules with send_flow_rem).
    fn removed(&self, removed: Vec<ofproto::bridge::RemovedRule>) -> Vec<Removed> {
        let now = self.sh.now_ms();
        removed
            .into_iter()
            .map(|r| Removed {
                reason: r.reason,
                stats: FlowStats {
                    table: r.table,
                    priority: r.priority as u16,
                    idle_timeout: r.idle_timeout,
                    hard_timeout: r.hard_timeout,
                    flags: r.flags,
                    importance: 0,
                    cookie: r.cookie,
                    packets: r.packets,
                    bytes: r.bytes,
                    duration_ms: now.saturating_sub(r.created_ms),
                    idle_age_s: 0,
                    hard_age_s: 0,
                    matched: r.matched,
                    instructions: Vec::new(),
                },
            })
            .collect()
    }
}

/// The pipeline, as the OpenFlow service sees it.
impl Bridge for OfManager {
    fn name(&self) -> String {
        self.sh.bridge.clone()
    }

    fn now_ms(&self) -> u64 {
        self.sh.now_ms()
    }

    /// Ports as OpenFlow describes them (config, link state, speed).
    fn port_descs(&self) -> Vec<PortDesc> {
        let ports: Vec<_> = self.sh.ports.read().expect("ports lock").values().cloned().collect();
        // The links first: reading the kernel's view takes no lock of ours.
        let links: Vec<_> = ports.iter().map(|p| p.link()).collect();
        let of = self.sh.ofproto.read().expect("ofproto lock");
        ports
            .iter()
            .zip(links)
            .map(|(p, link)| {
                let pc = of.port(p.ofport);
                let up = pc.is_some_and(|c| c.up) && link.present;
                let admin_down = self.admin_down.lock().expect("admin").contains(&p.ofport);
                let mac = link.mac.unwrap_or([0; 6]);
                let mut config = 0;
                if admin_down {
                    config |= msg::pc::PORT_DOWN;
                }
                if pc.is_some_and(|c| !c.flood) {
                    config |= msg::pc::NO_FLOOD;
                }
                let speed_mbps = link.speed_mbps;
                // 10GB_FD (1.0 bit 6, 1.3 bit 6) + COPPER (1.0 bit 7 / 1.3
                // bit 11), or 1GB_FD; nothing for ports without a speed.
                let curr = match speed_mbps {
                    0 => 0,
                    s if s >= 10_000 => (1 << 6) | (1 << 11),
                    _ => 1 << 5,
                };
                PortDesc {
                    port_no: p.ofport,
                    hw_addr: mac,
                    name: p.spec.name.clone(),
                    config,
                    // With BFD down the link is there but not live (OVS).
                    state: if up {
                        msg::PS_LIVE
                    } else if link.bfd_down && link.present && link.carrier != Some(false) && !admin_down {
                        0
                    } else {
                        msg::PS_LINK_DOWN
                    },
                    curr,
                    advertised: 0,
                    supported: 0,
                    peer: 0,
                    curr_speed: speed_mbps.saturating_mul(1000) as u32,
                    max_speed: 0,
                }
            })
            .collect()
    }

    fn apply_flow_mods(
        &self,
        mods: &[(FlowModCmd, ofproto::FlowSpec)],
    ) -> (Result<(), (usize, ErrorKind)>, Vec<Removed>) {
        if let [(cmd @ (FlowModCmd::Delete | FlowModCmd::DeleteStrict), spec)] = mods {
            // Deletes need no validation and can be long: short sections.
            let (_, removed) = self.sh.ofproto.delete_in_chunks(*cmd, spec, self.sh.now_ms());
            return (Ok(()), self.removed(removed));
        }
        let mut of = self.sh.ofproto.write().expect("ofproto lock");
        of.set_now(self.sh.now_ms());
        let res = if mods.len() == 1 {
            of.flow_mod(mods[0].0, &mods[0].1).map(|_| ()).map_err(|e| (0, e))
        } else {
            of.flow_mod_batch(mods).map(|_| ())
        };
        let removed = of.take_removed();
        drop(of);
        (res.map_err(|(i, e)| (i, flow_mod_error(&e))), self.removed(removed))
    }

    fn group_meter_mod(&self, m: &Msg) -> (Result<(), ErrorKind>, Vec<Removed>) {
        use ofproto::group::{Bucket, Group, GroupError, GroupType, ModCmd};
        let cmd = |c: u16| match c {
            0 => Some(ModCmd::Add),
            1 => Some(ModCmd::Modify),
            2 => Some(ModCmd::Delete),
            _ => None,
        };
        let map_err = |e: GroupError| match e {
            GroupError::GroupExists(_) => ErrorKind::GroupExists,
            GroupError::UnknownGroup(_) => ErrorKind::UnknownGroup,
            GroupError::InvalidGroup(_) => ErrorKind::InvalidGroup,
            GroupError::BadBucket(_) => ErrorKind::BadBucket,
            GroupError::BadWatch(_) => ErrorKind::BadWatch,
            GroupError::Loop(_) => ErrorKind::GroupLoop,
            GroupError::MeterExists(_) => ErrorKind::MeterExists,
            GroupError::UnknownMeter(_) => ErrorKind::UnknownMeter,
            GroupError::InvalidMeter(_) => ErrorKind::InvalidMeter,
            GroupError::BadRate => ErrorKind::BadRate,
            GroupError::BadBand(_) => ErrorKind::BadBand,
            GroupError::BadMeterFlags => ErrorKind::BadMeterFlags,
        };
        let mut of = self.sh.ofproto.write().expect("ofproto lock");
        of.set_now(self.sh.now_ms());
        let res = match m {
            Msg::GroupMod(gm) => (|| {
                let c = cmd(gm.cmd).ok_or(ErrorKind::BadGroupCommand)?;
                let kind = GroupType::from_wire(gm.group_type).ok_or(ErrorKind::BadGroupType)?;
                let buckets = gm
                    .buckets
                    .iter()
                    .map(|b| Bucket {
                        weight: if kind == GroupType::Select { b.weight } else { 1 },
                        watch_port: (b.watch_port != msg::OFPP_ANY).then_some(b.watch_port),
                        watch_group: (b.watch_group != msg::OFPG_ANY).then_some(b.watch_group),
                        actions: b.actions.clone(),
                        counters: Default::default(),
                    })
                    .collect();
                of.group_mod(c, Group::new(gm.group_id, kind, buckets, 0)).map_err(map_err)
            })(),
            Msg::MeterMod(mm) => (|| {
                let c = cmd(mm.cmd).ok_or(ErrorKind::BadMeterCommand)?;
                let bands = mm
                    .bands
                    .iter()
                    .map(|b| dpif::meter::BandConfig {
                        kind: if b.band_type == 2 {
                            dpif::meter::BandType::DscpRemark(b.prec_level)
                        } else {
                            dpif::meter::BandType::Drop
                        },
                        rate: b.rate,
                        burst_size: b.burst_size,
                    })
                    .collect();
                let cfg = dpif::meter::MeterConfig { flags: mm.flags, bands };
                of.meter_mod(c, mm.meter_id, cfg).map_err(map_err)
            })(),
            _ => Ok(()),
        };
        let removed = of.take_removed();
        drop(of);
        (res, self.removed(removed))
    }

    fn packet_out(&self, po: &msg::PacketOut) -> Result<(), ErrorKind> {
        let in_port = if po.in_port == ofpp::NONE { ofpp::CONTROLLER } else { po.in_port };
        for a in &po.actions {
            if let ofproto::Action::Output(ofproto::OfPort::Port(p)) = a {
                if !self.sh.ports.read().expect("ports lock").contains_key(p) {
                    return Err(ErrorKind::BadOutPort);
                }
            }
        }
        self.sh.packet_out(in_port, &po.actions, &po.data);
        Ok(())
    }

    fn port_mod(&self, v: Version, pm: &msg::PortMod) -> Result<(), ErrorKind> {
        if !self.sh.ports.read().expect("ports lock").contains_key(&pm.port_no) {
            return Err(ErrorKind::BadPort);
        }
        let mut of = self.sh.ofproto.write().expect("ofproto lock");
        if pm.mask & msg::pc::PORT_DOWN != 0 {
            let down = pm.config & msg::pc::PORT_DOWN != 0;
            of.set_port_up(pm.port_no, !down);
            let mut a = self.admin_down.lock().expect("admin");
            if down {
                a.insert(pm.port_no);
            } else {
                a.remove(&pm.port_no);
            }
        }
        if v == Version::Of10 && pm.mask & msg::pc::NO_FLOOD != 0 {
            of.set_port_flood(pm.port_no, pm.config & msg::pc::NO_FLOOD == 0);
        }
        Ok(())
    }

    fn tlv_mod(&self, tm: &msg::tlv::TlvTableMod) -> Result<(), ErrorKind> {
        use ofproto::tlv::{TlvError, TlvMapping};
        let maps: Vec<TlvMapping> =
            tm.maps.iter().map(|m| TlvMapping { class: m.class, ty: m.ty, len: m.len, index: m.index }).collect();
        let mut of = self.sh.ofproto.write().expect("ofproto lock");
        // Mappings that flows use stay (as in Open vSwitch).
        let gone: Vec<u16> = match tm.command {
            msg::tlv::TlvCommand::Add => Vec::new(),
            msg::tlv::TlvCommand::Delete => maps.iter().map(|m| m.index).collect(),
            msg::tlv::TlvCommand::Clear => of.tlv.mappings().iter().map(|m| m.index).collect(),
        };
        let r = if gone.iter().any(|&i| of.tlv_field_in_use(i)) {
            Err(TlvError::InUse)
        } else {
            match tm.command {
                msg::tlv::TlvCommand::Add => of.tlv.add(&maps),
                msg::tlv::TlvCommand::Delete => {
                    of.tlv.delete(&maps);
                    Ok(())
                }
                msg::tlv::TlvCommand::Clear => {
                    of.tlv.clear();
                    Ok(())
                }
            }
        };
        r.map_err(|e| match e {
            TlvError::BadOptLen => ErrorKind::TlvBadOptLen,
            TlvError::BadFieldIdx => ErrorKind::TlvBadFieldIdx,
            TlvError::TableFull => ErrorKind::TlvTableFull,
            TlvError::AlreadyMapped => ErrorKind::TlvAlreadyMapped,
            TlvError::DupEntry => ErrorKind::TlvDupEntry,
            TlvError::InUse => ErrorKind::TlvInvalidDel,
        })
    }

    fn tlv_table(&self) -> (u32, u16, Vec<msg::tlv::TlvMap>) {
        let of = self.sh.ofproto.read().expect("ofproto lock");
        let maps = of
            .tlv
            .mappings()
            .iter()
            .map(|m| msg::tlv::TlvMap { class: m.class, ty: m.ty, len: m.len, index: m.index })
            .collect();
        let space = ofproto::tlv::MAX_FIELDS as u32 * ofproto::tlv::MAX_OPTION_LEN as u32;
        (space, ofproto::tlv::MAX_FIELDS, maps)
    }

    fn resume(&self, r: &msg::Resume) -> Result<(), ErrorKind> {
        let me = self.sh.ofproto.read().expect("ofproto lock").continuation_bridge();
        if r.continuation.bridge != me {
            // Paused on another bridge (or made up): nothing to resume here.
            return Err(ErrorKind::BadArgument);
        }
        self.sh.resume(&r.metadata, &r.continuation, &r.data);
        Ok(())
    }

    fn ct_flush(&self, f: &msg::ct_flush::CtFlush) -> usize {
        let ct = Arc::clone(self.sh.ofproto.read().expect("ofproto lock").conntrack());
        ct.flush(|c| crate::ctcmd::flush_matches(f, c))
    }

    fn ct_flush_zone(&self, zone: u16) -> usize {
        let ct = Arc::clone(self.sh.ofproto.read().expect("ofproto lock").conntrack());
        ct.flush(|c| c.zone == zone)
    }

    fn flow_stats(&self, keep: &mut ofservice::RuleFilter<'_>) -> Vec<FlowStats> {
        self.sh.sync_stats();
        let of = self.sh.ofproto.read().expect("ofproto lock");
        let now = self.sh.now_ms();
        of.rules()
            .into_iter()
            .filter(|(ti, rm, _, r)| keep(*ti, rm.key, rm.mask, r.cookie, &r.instructions))
            .map(|(ti, rm, prio, r)| FlowStats {
                table: ti,
                priority: prio as u16,
                idle_timeout: r.idle_timeout,
                hard_timeout: r.hard_timeout,
                flags: r.flags,
                importance: r.importance,
                cookie: r.cookie,
                packets: r.packets(),
                bytes: r.bytes(),
                duration_ms: now.saturating_sub(r.created_ms),
                idle_age_s: (now.saturating_sub(r.used_ms()) / 1000).min(65534) as u16,
                hard_age_s: (now.saturating_sub(r.created_ms) / 1000).min(65534) as u16,
                matched: rm.to_match(),
                instructions: r.instructions.clone(),
            })
            .collect()
    }

    fn table_stats(&self) -> Vec<ofservice::TableCounts> {
        let counts = self.sh.ofproto.read().expect("ofproto lock").table_counts();
        counts.iter().take(254).copied().collect()
    }

    fn port_stats(&self) -> Vec<msg::PortStats> {
        let now = self.sh.now_ms();
        self.sh
            .port_stats()
            .into_iter()
            .map(|(p, s)| msg::PortStats {
                port_no: p.ofport,
                rx_packets: s.rx_packets,
                tx_packets: s.tx_packets,
                rx_bytes: s.rx_bytes,
                tx_bytes: s.tx_bytes,
                rx_dropped: s.rx_dropped,
                tx_dropped: s.tx_dropped,
                rx_errors: 0,
                tx_errors: 0,
                duration_ms: now,
            })
            .collect()
    }

    fn group_stats(&self, g: u32) -> Vec<ofservice::GroupStats> {
        use std::sync::atomic::Ordering::Relaxed;
        self.sh.sync_stats();
        let of = self.sh.ofproto.read().expect("ofproto lock");
        let now = self.sh.now_ms();
        of.groups()
            .filter(|gr| g == msg::OFPG_ALL || gr.id == g)
            .map(|gr| ofservice::GroupStats {
                id: gr.id,
                ref_count: of.group_ref_count(gr.id),
                packets: gr.counters.packets.load(Relaxed),
                bytes: gr.counters.bytes.load(Relaxed),
                duration_ms: now.saturating_sub(gr.created_ms),
                buckets: gr
                    .buckets
                    .iter()
                    .map(|b| (b.counters.packets.load(Relaxed), b.counters.bytes.load(Relaxed)))
                    .collect(),
            })
            .collect()
    }

    fn group_descs(&self) -> Vec<msg::GroupMod> {
        let of = self.sh.ofproto.read().expect("ofproto lock");
        of.groups()
            .map(|gr| msg::GroupMod {
                cmd: 0,
                group_type: gr.kind.wire(),
                group_id: gr.id,
                buckets: gr
                    .buckets
                    .iter()
                    .map(|b| msg::Bucket {
                        weight: if gr.kind == ofproto::group::GroupType::Select { b.weight } else { 0 },
                        watch_port: b.watch_port.unwrap_or(msg::OFPP_ANY),
                        watch_group: b.watch_group.unwrap_or(msg::OFPG_ANY),
                        actions: b.actions.clone(),
                    })
                    .collect(),
            })
            .collect()
    }

    fn meter_stats(&self, id: u32) -> Vec<ofservice::MeterStats> {
        use std::sync::atomic::Ordering::Relaxed;
        let of = self.sh.ofproto.read().expect("ofproto lock");
        let now = self.sh.now_ms();
        of.meters()
            .filter(|m| id == ofproto::group::OFPM_ALL || m.id == id)
            .map(|m| {
                let n = m.config().bands.len();
                ofservice::MeterStats {
                    id: m.id,
                    ref_count: of.meter_ref_count(m.id),
                    packets: m.packets_in.load(Relaxed),
                    bytes: m.bytes_in.load(Relaxed),
                    duration_ms: now.saturating_sub(m.created_ms),
                    bands: (0..n).map(|i| (m.band_packets[i].load(Relaxed), m.band_bytes[i].load(Relaxed))).collect(),
                }
            })
            .collect()
    }

    fn meter_configs(&self, id: u32) -> Vec<msg::MeterMod> {
        let of = self.sh.ofproto.read().expect("ofproto lock");
        of.meters()
            .filter(|m| id == ofproto::group::OFPM_ALL || m.id == id)
            .map(|m| {
                let cfg = m.config();
                msg::MeterMod {
                    cmd: 0,
                    flags: cfg.flags,
                    meter_id: m.id,
                    bands: cfg
                        .bands
                        .iter()
                        .map(|b| msg::Band {
                            band_type: if matches!(b.kind, dpif::meter::BandType::Drop) { 1 } else { 2 },
                            rate: b.rate,
                            burst_size: b.burst_size,
                            prec_level: if let dpif::meter::BandType::DscpRemark(p) = b.kind { p } else { 0 },
                        })
                        .collect(),
                }
            })
            .collect()
    }

    fn set_table_miss(&self, miss: Miss) {
        let miss = match miss {
            Miss::Controller => TableMiss::Controller,
            Miss::Normal => TableMiss::Normal,
            Miss::Drop => TableMiss::Drop,
        };
        self.sh.ofproto.write().expect("ofproto lock").set_table_miss(miss);
    }
}

fn flow_mod_error(e: &FlowModError) -> ErrorKind {
    match e {
        FlowModError::BadTable(_) => ErrorKind::BadTableId,
        FlowModError::BadGoto { .. } => ErrorKind::BadInstTableId,
        FlowModError::Unsupported(s) if s.contains("group") => ErrorKind::BadOutGroup,
        FlowModError::Unsupported(_) => ErrorKind::BadActionType,
        FlowModError::BadSetField(_) => ErrorKind::BadSetArgument,
        FlowModError::MatchInconsistent(_) => ErrorKind::MatchInconsistent,
        FlowModError::Overlap => ErrorKind::Overlap,
        FlowModError::UnknownGroup(_) => ErrorKind::BadOutGroup,
        FlowModError::UnknownMeter(_) => ErrorKind::UnknownMeter,
        FlowModError::UnmappedTlvField(_) => ErrorKind::InvalidTlvField,
    }
}

/// Connections one listener serves at once: a bound on descriptors and
/// buffers (a bridge's worst case, mgmt + snoop + a ptcp listener, stays
/// far inside default descriptor limits), far more than any real
/// deployment opens (a handful of controllers and tools).
pub const MAX_CONNS_PER_LISTENER: usize = 1000;

/// One listener's connection count and its log rate limits.
struct Limit {
    what: String,
    n: Arc<std::sync::atomic::AtomicUsize>,
    /// Whether "limit reached" was logged since the count last dropped below it.
    full_logged: AtomicBool,
    last_err_log: Mutex<Option<Instant>>,
}

/// A connection's place under its listener's [`Limit`], given back on drop.
struct Slot(Arc<std::sync::atomic::AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Limit {
    fn new(what: String) -> Limit {
        Limit { what, n: Arc::default(), full_logged: AtomicBool::new(false), last_err_log: Mutex::new(None) }
    }

    /// Counts one more connection if it fits; logs once when the limit is reached.
    fn try_take(&self) -> bool {
        let n = self.n.fetch_add(1, Ordering::AcqRel);
        if n < MAX_CONNS_PER_LISTENER {
            self.full_logged.store(false, Ordering::Relaxed);
            return true;
        }
        self.n.fetch_sub(1, Ordering::AcqRel);
        if !self.full_logged.swap(true, Ordering::Relaxed) {
            eprintln!("xvs: {}: {MAX_CONNS_PER_LISTENER} connections open, refusing more until some close", self.what);
        }
        false
    }

    /// The slot of the connection [`Limit::try_take`] just counted.
    fn slot(&self) -> Slot {
        Slot(Arc::clone(&self.n))
    }

    fn log_error(&self, e: &std::io::Error) {
        let mut last = self.last_err_log.lock().expect("limit log");
        if last.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
            *last = Some(Instant::now());
            eprintln!("xvs: {}: accept failed ({e}); retrying every 100 ms", self.what);
        }
    }
}

#[cfg(test)]
mod limit_tests {
    use super::*;

    #[test]
    fn limit_counts_and_slots_give_back() {
        let l = Limit::new("t".into());
        let mut slots: Vec<Slot> = (0..MAX_CONNS_PER_LISTENER)
            .map(|_| {
                assert!(l.try_take());
                l.slot()
            })
            .collect();
        assert!(!l.try_take());
        assert!(!l.try_take());
        slots.pop();
        assert!(l.try_take());
        assert!(!l.try_take());
    }
}
