//! The OpenFlow connection manager: the per-bridge management socket that
//! `ovs-ofctl` talks to (`<run-dir>/<bridge>.mgmt`), the snoop socket
//! (`<bridge>.snoop`), and controller connections (active `tcp:IP:PORT`
//! or `unix:PATH` with reconnect backoff and echo keepalive, passive
//! `ptcp:PORT[:IP]` or `punix:PATH`).
//!
//! Threads: one per listener, two per connection (blocking reads of
//! framed messages; a writer draining the connection's bounded outgoing
//! queue, [`crate::ofout`], so that no peer that stops reading can block
//! another connection or housekeeping), and one housekeeping thread that delivers asynchronous messages
//! (packet-in from the poll threads' queue, flow-removed, port-status),
//! expires rules and follows link state and the fail mode.
//!
//! Every message goes through the sans-IO codec ([`openflow::msg`]); a
//! malformed one is answered with the spec's error carrying its first
//! bytes, and the connection stays up unless the framing itself is lost.

use crate::ofout::{OutQueue, Pushed};
use crate::switch::{PacketInEvent, Shared};
use anyhow::{bail, Context, Result};
use ofproto::actions::ofpp;
use ofproto::{FlowModCmd, FlowModError, TableMiss};
use openflow::msg::{self, t, Ctx, FlowStats, Msg, PortDesc, StatsReq};
use openflow::{error_reply, ErrorKind, Framer, Message, Version};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the bridge does while no controller is connected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailMode {
    /// Act as a learning switch (NORMAL).
    Standalone,
    /// Drop what no flow handles.
    Secure,
}

impl FailMode {
    pub fn parse(s: &str) -> Result<FailMode> {
        match s {
            "standalone" => Ok(FailMode::Standalone),
            "secure" => Ok(FailMode::Secure),
            _ => bail!("--fail-mode: '{s}' is not standalone or secure"),
        }
    }
}

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

const VERSIONS: [Version; 4] = [Version::Of10, Version::Of13, Version::Of14, Version::Of15];

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

enum Stream {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Stream {
    fn try_clone(&self) -> std::io::Result<Stream> {
        Ok(match self {
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
        })
    }
    fn set_nonblocking(&self, on: bool) -> std::io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_nonblocking(on),
            Stream::Tcp(s) => s.set_nonblocking(on),
        }
    }
    fn set_read_timeout(&self, d: Option<Duration>) -> std::io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_read_timeout(d),
            Stream::Tcp(s) => s.set_read_timeout(d),
        }
    }
    fn shutdown(&self) {
        let _ = match self {
            Stream::Unix(s) => s.shutdown(std::net::Shutdown::Both),
            Stream::Tcp(s) => s.shutdown(std::net::Shutdown::Both),
        };
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

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    /// ovs-ofctl on the management socket.
    Service,
    Controller,
    Snoop,
}

/// Role values (OpenFlow 1.2+ numbering).
const ROLE_EQUAL: u32 = 1;
const ROLE_MASTER: u32 = 2;
const ROLE_SLAVE: u32 = 3;

struct Bundle {
    flags: u16,
    msgs: Vec<Message>,
}

struct ConnState {
    ctx: Option<Ctx>,
    role: u32,
    miss_send_len: u16,
    /// Whether this (service) connection asked for asynchronous messages.
    async_on: bool,
    /// NXM flow-removed format (set_flow_format nxm).
    nxm: bool,
    /// NXT_SET_PACKET_IN_FORMAT: 0 standard, 1 NXT_PACKET_IN, 2 NXT_PACKET_IN2.
    pin_format: u32,
    /// NXT_SET_CONTROLLER_ID: `controller(id=N)` packet-ins go to this id.
    controller_id: u16,
    bundles: BTreeMap<u32, Bundle>,
}

struct Conn {
    kind: Kind,
    name: String,
    /// Bounded outgoing queue, drained by the connection's writer thread
    /// (see [`crate::ofout`]): no sender ever blocks on this peer.
    out: OutQueue,
    /// A handle on the socket, only to shut it down.
    ctl: Stream,
    st: Mutex<ConnState>,
    alive: AtomicBool,
}

impl Conn {
    /// Queues a reply to this peer's own request; a peer that asks
    /// without reading past [`crate::ofout::REPLY_CAP`] is disconnected.
    fn send(&self, b: &[u8]) {
        if !self.alive.load(Ordering::Acquire) {
            return;
        }
        if let Pushed::Overflow | Pushed::Closed = self.out.push_reply(b) {
            eprintln!("xvs: OpenFlow peer {}: closing, it does not read its replies", self.name);
            self.close();
        }
    }

    /// Queues an asynchronous message (snoop copy, packet-in,
    /// flow-removed, port-status); dropped if the peer is behind.
    fn send_async(&self, b: &[u8]) {
        if !self.alive.load(Ordering::Acquire) {
            return;
        }
        match self.out.push_async(b) {
            Pushed::Dropped { log: true, total } => eprintln!(
                "xvs: OpenFlow peer {} is not reading: dropped {total} asynchronous messages so far",
                self.name
            ),
            Pushed::Closed => self.close(),
            _ => {}
        }
    }

    fn close(&self) {
        self.alive.store(false, Ordering::Release);
        self.out.close();
        self.ctl.shutdown();
    }

    fn version(&self) -> Option<Version> {
        self.st.lock().expect("conn state").ctx.map(|c| c.version)
    }

    /// Whether asynchronous messages (packet-in, flow-removed, port-status) go here.
    fn wants_async(&self) -> bool {
        let st = self.st.lock().expect("conn state");
        st.ctx.is_some()
            && match self.kind {
                Kind::Controller => true,
                Kind::Service => st.async_on,
                Kind::Snoop => false,
            }
    }
}

/// The connection manager of one bridge.
pub struct OfManager {
    sh: Arc<Shared>,
    cfg: OfConfig,
    conns: Mutex<Vec<Arc<Conn>>>,
    stop: Arc<AtomicBool>,
    /// Largest generation_id a master has claimed (role requests).
    master_gen: Mutex<Option<u64>>,
    xid: AtomicU64,
    /// Packet-ins not delivered (no connection wanted them).
    pub packet_in_dropped: AtomicU64,
    /// Ports a controller set administratively down (port_mod PORT_DOWN).
    admin_down: Mutex<std::collections::BTreeSet<u32>>,
    /// Set by [`OfManager::shutdown`] (this bridge only; `stop` is the process's).
    own_stop: AtomicBool,
    /// Passive controller listeners, to wake their accept on shutdown.
    passive: Mutex<Vec<Target>>,
}

impl OfManager {
    /// Binds the management and snoop sockets, starts the controller
    /// connections and the housekeeping thread.
    /// The versions this bridge speaks.
    fn versions(&self) -> &[Version] {
        if self.cfg.protocols.is_empty() {
            &VERSIONS
        } else {
            &self.cfg.protocols
        }
    }

    pub fn start(sh: Arc<Shared>, cfg: OfConfig, stop: Arc<AtomicBool>) -> Result<Arc<OfManager>> {
        let targets = cfg.controllers.iter().map(|c| parse_target(c)).collect::<Result<Vec<_>>>()?;
        std::fs::create_dir_all(&cfg.run_dir)
            .with_context(|| format!("creating run directory {}", cfg.run_dir.display()))?;
        let mgmt = crate::runfiles::bind_socket(&cfg.run_dir.join(format!("{}.mgmt", sh.bridge)))?;
        let snoop = crate::runfiles::bind_socket(&cfg.run_dir.join(format!("{}.snoop", sh.bridge)))?;
        let m = Arc::new(OfManager {
            sh,
            cfg,
            conns: Mutex::new(Vec::new()),
            stop,
            master_gen: Mutex::new(None),
            xid: AtomicU64::new(1),
            packet_in_dropped: AtomicU64::new(0),
            admin_down: Mutex::new(Default::default()),
            own_stop: AtomicBool::new(false),
            passive: Mutex::new(Vec::new()),
        });
        if !m.cfg.controllers.is_empty() {
            // A bridge with controllers starts with an empty table; what a
            // miss does follows the fail mode until one connects.
            let mut of = m.sh.ofproto.write().expect("ofproto lock");
            let all = ofproto::parse_flow("", ofproto::Need::NoActions).expect("catch-all");
            let _ = of.flow_mod(FlowModCmd::Delete, &all);
            of.take_removed();
            drop(of);
            m.update_fail_mode();
        }
        for (listener, kind) in [(mgmt, Kind::Service), (snoop, Kind::Snoop)] {
            let mm = Arc::clone(&m);
            let what = format!("{}.{}", mm.sh.bridge, if kind == Kind::Snoop { "snoop" } else { "mgmt" });
            std::thread::Builder::new().name(format!("of-{kind:?}")).spawn(move || {
                let l = Limit::new(what);
                let mut accept = || listener.accept().map(|(s, _)| s);
                while let Some(s) = mm.accept_next(&mut accept, &l) {
                    mm.spawn_conn(Stream::Unix(s), kind, "unix".into(), l.slot());
                }
            })?;
        }
        for target in targets {
            let mm = Arc::clone(&m);
            if let Target::Tcp(_) | Target::Unix(_) = target {
                std::thread::Builder::new().name("of-active".into()).spawn(move || mm.run_active(&target))?;
            } else if let Target::Punix(path) = target {
                let l = crate::runfiles::bind_socket(&path)
                    .with_context(|| format!("controller punix:{}", path.display()))?;
                m.passive.lock().expect("passive").push(Target::Punix(path.clone()));
                std::thread::Builder::new().name("of-passive".into()).spawn(move || {
                    let lim = Limit::new(format!("punix:{}", path.display()));
                    let mut accept = || l.accept().map(|(s, _)| s);
                    while let Some(s) = mm.accept_next(&mut accept, &lim) {
                        let name = format!("punix:{}", path.display());
                        mm.spawn_conn(Stream::Unix(s), Kind::Controller, name, lim.slot());
                    }
                })?;
            } else if let Target::Ptcp(addr) = target {
                let l = TcpListener::bind(&addr).with_context(|| format!("controller: listening on {addr}"))?;
                m.passive.lock().expect("passive").push(Target::Ptcp(addr.clone()));
                std::thread::Builder::new().name("of-passive".into()).spawn(move || {
                    let lim = Limit::new(format!("ptcp:{addr}"));
                    let mut accept = || l.accept().map(|(s, _)| s);
                    while let Some(s) = mm.accept_next(&mut accept, &lim) {
                        let name = s.peer_addr().map(|a| a.to_string()).unwrap_or_default();
                        let _ = s.set_nodelay(true);
                        mm.spawn_conn(Stream::Tcp(s), Kind::Controller, name, lim.slot());
                    }
                })?;
            }
        }
        let mm = Arc::clone(&m);
        std::thread::Builder::new().name("of-async".into()).spawn(move || mm.run_async())?;
        Ok(m)
    }

    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire) || self.own_stop.load(Ordering::Acquire)
    }

    /// Stops this bridge's OpenFlow service: listeners, controller
    /// connections, the async thread; removes its sockets.
    pub fn shutdown(&self) {
        self.own_stop.store(true, Ordering::Release);
        for c in self.conns.lock().expect("conns").iter() {
            c.close();
        }
        // Wake the accept loops, then remove the sockets.
        for kind in ["mgmt", "snoop"] {
            let p = self.cfg.run_dir.join(format!("{}.{kind}", self.sh.bridge));
            let _ = UnixStream::connect(&p);
            let _ = std::fs::remove_file(&p);
        }
        for t in self.passive.lock().expect("passive").iter() {
            match t {
                Target::Ptcp(a) => {
                    let a = a.replace("0.0.0.0", "127.0.0.1");
                    let _ = TcpStream::connect_timeout(&a.parse().expect("checked"), Duration::from_millis(200));
                }
                Target::Punix(p) => {
                    let _ = UnixStream::connect(p);
                    let _ = std::fs::remove_file(p);
                }
                _ => {}
            }
        }
    }

    pub fn mgmt_path(&self) -> PathBuf {
        self.cfg.run_dir.join(format!("{}.mgmt", self.sh.bridge))
    }

    /// Active controller: connect, serve, reconnect with backoff (1 s
    /// doubling to 8 s).
    fn run_active(self: Arc<Self>, target: &Target) {
        let mut backoff = Duration::from_secs(1);
        while !self.stopping() {
            let conn = match target {
                Target::Tcp(addr) => {
                    TcpStream::connect_timeout(&addr.parse().expect("checked"), Duration::from_secs(2)).map(|s| {
                        let _ = s.set_nodelay(true);
                        (Stream::Tcp(s), format!("tcp:{addr}"))
                    })
                }
                Target::Unix(p) => UnixStream::connect(p).map(|s| (Stream::Unix(s), format!("unix:{}", p.display()))),
                Target::Ptcp(_) | Target::Punix(_) => return,
            };
            if let Ok((s, name)) = conn {
                backoff = Duration::from_secs(1);
                self.serve_conn(s, Kind::Controller, name);
            }
            let until = Instant::now() + backoff;
            while Instant::now() < until && !self.stopping() {
                std::thread::sleep(Duration::from_millis(50));
            }
            backoff = (backoff * 2).min(Duration::from_secs(8));
        }
    }

    /// Accepts the listener's next connection that fits under its
    /// [`Limit`]: connections past the limit are closed at once (one log
    /// line each time the limit is reached), and a failing accept (EMFILE,
    /// ENFILE, ENOMEM: local resource exhaustion) backs off 100 ms instead
    /// of spinning. `None` when the bridge stops.
    fn accept_next<S>(&self, accept: &mut impl FnMut() -> std::io::Result<S>, lim: &Limit) -> Option<S> {
        loop {
            let r = accept();
            if self.stopping() {
                return None;
            }
            match r {
                Ok(s) => {
                    if lim.try_take() {
                        return Some(s);
                    }
                    drop(s);
                }
                Err(e) => {
                    lim.log_error(&e);
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
    }

    fn spawn_conn(self: &Arc<Self>, s: Stream, kind: Kind, name: String, slot: Slot) {
        let me = Arc::clone(self);
        // Packet-outs translate (resubmits recurse): a roomy stack.
        let _ = std::thread::Builder::new().name("of-conn".into()).stack_size(16 << 20).spawn(move || {
            me.serve_conn(s, kind, name);
            drop(slot);
        });
    }

    fn serve_conn(&self, s: Stream, kind: Kind, name: String) {
        let (Ok(mut out), Ok(ctl)) = (s.try_clone(), s.try_clone()) else { return };
        let conn = Arc::new(Conn {
            kind,
            name,
            out: OutQueue::default(),
            ctl,
            st: Mutex::new(ConnState {
                ctx: None,
                role: ROLE_EQUAL,
                miss_send_len: if kind == Kind::Controller { 128 } else { 0 },
                async_on: false,
                nxm: false,
                pin_format: 0,
                controller_id: 0,
                bundles: BTreeMap::new(),
            }),
            alive: AtomicBool::new(true),
        });
        let wc = Arc::clone(&conn);
        let writer = std::thread::Builder::new().name("of-write".into()).spawn(move || {
            wc.out.run_writer(&mut out);
            wc.close();
        });
        if writer.is_err() {
            return;
        }
        self.conns.lock().expect("conns").push(Arc::clone(&conn));
        conn.send(&openflow::header::hello(self.versions(), self.next_xid()));
        self.read_loop(&conn, s);
        // Let the writer flush what is queued (e.g. a final error), then stop it.
        conn.alive.store(false, Ordering::Release);
        conn.out.close();
        self.conns.lock().expect("conns").retain(|c| !Arc::ptr_eq(c, &conn));
        if kind == Kind::Controller {
            self.update_fail_mode();
        }
    }

    fn next_xid(&self) -> u32 {
        self.xid.fetch_add(1, Ordering::Relaxed) as u32
    }

    fn read_loop(&self, conn: &Arc<Conn>, mut s: Stream) {
        let mut framer = Framer::default();
        let mut buf = vec![0u8; 65536];
        let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
        let mut last_rx = Instant::now();
        let mut echo_sent = false;
        let mut spin_until: Option<Instant> = None;
        while conn.alive.load(Ordering::Acquire) && !self.stopping() {
            // Flow control: a peer that does not read its replies gets no
            // more of its requests read (this waits only on this peer).
            if conn.out.queued_bytes() > crate::ofout::READ_PAUSE {
                conn.out.wait_below_pause(Duration::from_secs(1));
                continue;
            }
            // Request/reply tools (ovs-ofctl sends each flow mod with a
            // barrier and waits) answer within microseconds: poll briefly
            // before sleeping, which saves a cross-CPU wakeup per message.
            let spinning = spin_until.is_some_and(|t| Instant::now() < t);
            if spinning {
                let _ = s.set_nonblocking(true);
            }
            let r = s.read(&mut buf);
            if spinning {
                let _ = s.set_nonblocking(false);
                if matches!(&r, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock) {
                    std::hint::spin_loop();
                    continue;
                }
            }
            spin_until = None;
            match r {
                Ok(0) => return,
                Ok(n) => {
                    framer.handle_bytes(&buf[..n]);
                    last_rx = Instant::now();
                    echo_sent = false;
                    spin_until = Some(last_rx + Duration::from_micros(100));
                }
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                    // Keepalive for controllers: echo after 5 s of silence,
                    // give up after 15 s.
                    if conn.kind == Kind::Controller {
                        let idle = last_rx.elapsed();
                        if idle > Duration::from_secs(15) {
                            return;
                        }
                        if idle > Duration::from_secs(5) && !echo_sent {
                            if let Some(v) = conn.version() {
                                conn.send(&msg::encode_simple(v, t::ECHO_REQUEST, self.next_xid(), &[]));
                                echo_sent = true;
                            }
                        }
                    }
                    continue;
                }
                Err(_) => return,
            }
            loop {
                match framer.poll_message() {
                    Ok(Some(m)) => {
                        if !self.handle_message(conn, m) {
                            return;
                        }
                    }
                    Ok(None) => break,
                    Err(_) => {
                        // The stream lost its framing: the spec's only recourse is to close.
                        let v = conn.version().unwrap_or(Version::Of10);
                        conn.send(&error_reply(v, ErrorKind::BadLen, &[]));
                        return;
                    }
                }
            }
        }
    }

    /// Handles one message; false closes the connection.
    fn handle_message(&self, conn: &Arc<Conn>, m: Message) -> bool {
        let ctx = conn.st.lock().expect("conn state").ctx;
        let Some(ctx) = ctx else {
            // Before negotiation only HELLO is acceptable.
            if m.header.msg_type != t::HELLO {
                let v = Version::from_wire(m.header.version).unwrap_or(Version::Of10);
                conn.send(&error_reply(v, ErrorKind::BadType, &m.bytes));
                return true;
            }
            match openflow::negotiate(self.versions(), &m) {
                Ok(v) => {
                    conn.st.lock().expect("conn state").ctx = Some(Ctx::new(v));
                    if conn.kind == Kind::Controller {
                        self.update_fail_mode();
                    }
                }
                Err(e) => {
                    let v = Version::from_wire(m.header.version).unwrap_or(Version::Of10);
                    conn.send(&error_reply(v, e, &m.bytes));
                    return false;
                }
            }
            return true;
        };
        let v = ctx.version;
        if conn.kind == Kind::Snoop {
            return true;
        }
        self.snoop(&m.bytes);
        match msg::decode(&ctx, &m) {
            Ok(decoded) => {
                for reply in self.handle(conn, &ctx, &m, decoded) {
                    self.snoop(&reply);
                    conn.send(&reply);
                }
            }
            Err(e) => conn.send(&error_reply(v, e, &m.bytes)),
        }
        true
    }

    /// Copies a controller-connection message to every snoop connection.
    fn snoop(&self, bytes: &[u8]) {
        let conns = self.conns.lock().expect("conns").clone();
        for c in conns.iter().filter(|c| c.kind == Kind::Snoop && c.version().is_some()) {
            c.send_async(bytes);
        }
    }

    fn can_modify(&self, conn: &Conn) -> bool {
        conn.st.lock().expect("conn state").role != ROLE_SLAVE
    }

    fn handle(&self, conn: &Arc<Conn>, ctx: &Ctx, m: &Message, decoded: Msg) -> Vec<Vec<u8>> {
        let v = ctx.version;
        let xid = m.header.xid;
        let err = |k: ErrorKind| vec![error_reply(v, k, &m.bytes)];
        match decoded {
            Msg::Hello | Msg::EchoReply | Msg::Reply(_) => Vec::new(),
            Msg::Error { ty, code } => {
                eprintln!("xvs: OpenFlow peer {} reported error type {ty} code {code}", conn.name);
                Vec::new()
            }
            Msg::EchoRequest(body) => vec![msg::encode_simple(v, t::ECHO_REPLY, xid, &body)],
            Msg::FeaturesRequest => {
                let ports = self.port_descs();
                vec![msg::encode_features_reply(v, xid, self.cfg.dpid, 254, &ports)]
            }
            Msg::GetConfigRequest => {
                let msl = conn.st.lock().expect("conn state").miss_send_len;
                vec![msg::encode_get_config_reply(v, xid, 0, msl)]
            }
            Msg::SetConfig { miss_send_len, .. } => {
                let mut st = conn.st.lock().expect("conn state");
                st.miss_send_len = miss_send_len;
                st.async_on = true;
                Vec::new()
            }
            Msg::BarrierRequest => vec![msg::encode_simple(v, t::BARRIER_REPLY, xid, &[])],
            Msg::SetFlowFormat(f) => {
                conn.st.lock().expect("conn state").nxm = f == 2;
                Vec::new()
            }
            Msg::FlowModTableId(on) => {
                if let Some(c) = conn.st.lock().expect("conn state").ctx.as_mut() {
                    c.flow_mod_table_id = on;
                }
                Vec::new()
            }
            Msg::SetPacketInFormat(f) => {
                let mut st = conn.st.lock().expect("conn state");
                st.pin_format = f;
                st.async_on = true;
                Vec::new()
            }
            Msg::SetControllerId(id) => {
                let mut st = conn.st.lock().expect("conn state");
                st.controller_id = id;
                st.async_on = true;
                Vec::new()
            }
            Msg::FlowAge | Msg::TableMod => {
                conn.st.lock().expect("conn state").async_on = true;
                Vec::new()
            }
            Msg::SetAsync => {
                conn.st.lock().expect("conn state").async_on = true;
                Vec::new()
            }
            Msg::CtFlush(f) => {
                let ct = Arc::clone(self.sh.ofproto.read().expect("ofproto lock").conntrack());
                let n = ct.flush(|c| crate::ctcmd::flush_matches(&f, c));
                eprintln!("xvs: OpenFlow peer {}: ct-flush: {n} connections flushed", conn.name);
                Vec::new()
            }
            Msg::TlvTableMod(tm) => {
                if !self.can_modify(conn) {
                    return err(ErrorKind::IsSlave);
                }
                use ofproto::tlv::{TlvError, TlvMapping};
                let maps: Vec<TlvMapping> = tm
                    .maps
                    .iter()
                    .map(|m| TlvMapping { class: m.class, ty: m.ty, len: m.len, index: m.index })
                    .collect();
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
                match r {
                    Ok(()) => Vec::new(),
                    Err(e) => err(match e {
                        TlvError::BadOptLen => ErrorKind::TlvBadOptLen,
                        TlvError::BadFieldIdx => ErrorKind::TlvBadFieldIdx,
                        TlvError::TableFull => ErrorKind::TlvTableFull,
                        TlvError::AlreadyMapped => ErrorKind::TlvAlreadyMapped,
                        TlvError::DupEntry => ErrorKind::TlvDupEntry,
                        TlvError::InUse => ErrorKind::TlvInvalidDel,
                    }),
                }
            }
            Msg::TlvTableRequest => {
                let of = self.sh.ofproto.read().expect("ofproto lock");
                let maps: Vec<msg::tlv::TlvMap> = of
                    .tlv
                    .mappings()
                    .iter()
                    .map(|m| msg::tlv::TlvMap { class: m.class, ty: m.ty, len: m.len, index: m.index })
                    .collect();
                let space = ofproto::tlv::MAX_FIELDS as u32 * ofproto::tlv::MAX_OPTION_LEN as u32;
                let body = msg::tlv::encode_reply(space, ofproto::tlv::MAX_FIELDS, &maps);
                vec![msg::encode_nx(v, xid, msg::nxt::TLV_TABLE_REPLY, &body)]
            }
            Msg::Resume(r) => {
                if !self.can_modify(conn) {
                    return err(ErrorKind::IsSlave);
                }
                let me = self.sh.ofproto.read().expect("ofproto lock").continuation_bridge();
                if r.continuation.bridge != me {
                    // Paused on another bridge (or made up): nothing to resume here.
                    return err(ErrorKind::BadArgument);
                }
                self.sh.resume(&r.metadata, &r.continuation, &r.data);
                Vec::new()
            }
            Msg::CtFlushZone(zone) => {
                let ct = Arc::clone(self.sh.ofproto.read().expect("ofproto lock").conntrack());
                let n = ct.flush(|c| c.zone == zone);
                eprintln!("xvs: OpenFlow peer {}: ct-flush-zone {zone}: {n} connections flushed", conn.name);
                Vec::new()
            }
            Msg::GetAsyncRequest => {
                // Everything enabled for masters/equals, port status for slaves.
                let mut body = Vec::new();
                for mask in [0x7u32, 0x7, 0x7, 0x7, 0xf, 0x0] {
                    body.extend_from_slice(&mask.to_be_bytes());
                }
                vec![msg::encode_simple(v, t::GET_ASYNC_REPLY, xid, &body)]
            }
            Msg::QueueGetConfig => err(ErrorKind::BadRequestPort),
            Msg::RoleRequest { role, generation_id, nx } => self.role_request(conn, v, xid, role, generation_id, nx, m),
            Msg::FlowMod(fm) => {
                if !self.can_modify(conn) {
                    return err(ErrorKind::IsSlave);
                }
                let mut out = match self.apply_flow_mods(&[(fm.cmd, fm.spec.clone())]) {
                    Ok(()) => Vec::new(),
                    Err((_, k)) => return err(k),
                };
                if fm.buffer_id != msg::NO_BUFFER {
                    out.push(error_reply(v, ErrorKind::BufferUnknown, &m.bytes));
                }
                out
            }
            Msg::PacketOut(po) => {
                if !self.can_modify(conn) {
                    return err(ErrorKind::IsSlave);
                }
                if po.buffer_id != msg::NO_BUFFER {
                    return err(ErrorKind::BufferUnknown);
                }
                if po.data.len() < 14 {
                    return err(ErrorKind::BadPacket);
                }
                let in_port = if po.in_port == ofpp::NONE { ofpp::CONTROLLER } else { po.in_port };
                for a in &po.actions {
                    if let ofproto::Action::Output(ofproto::OfPort::Port(p)) = a {
                        if !self.sh.ports.read().expect("ports lock").contains_key(p) {
                            return err(ErrorKind::BadOutPort);
                        }
                    }
                }
                self.sh.packet_out(in_port, &po.actions, &po.data);
                Vec::new()
            }
            Msg::PortMod(pm) => {
                if !self.can_modify(conn) {
                    return err(ErrorKind::IsSlave);
                }
                let exists = self.sh.ports.read().expect("ports lock").contains_key(&pm.port_no);
                if !exists {
                    return err(ErrorKind::BadPort);
                }
                let mut of = self.sh.ofproto.write().expect("ofproto lock");
                if pm.mask & msg::pc::PORT_DOWN != 0 {
                    of.set_port_up(pm.port_no, pm.config & msg::pc::PORT_DOWN == 0);
                    self.port_config_down(pm.port_no, pm.config & msg::pc::PORT_DOWN != 0);
                }
                if v == Version::Of10 && pm.mask & msg::pc::NO_FLOOD != 0 {
                    of.set_port_flood(pm.port_no, pm.config & msg::pc::NO_FLOOD == 0);
                }
                drop(of);
                if let Some(p) = self.port_descs().into_iter().find(|p| p.port_no == pm.port_no) {
                    self.broadcast_async(|v| msg::encode_port_status(v, 2, &p));
                }
                Vec::new()
            }
            Msg::Stats(req) => self.stats(conn, v, xid, req, m),
            d @ (Msg::GroupMod(_) | Msg::MeterMod(_)) => {
                if !self.can_modify(conn) {
                    return err(ErrorKind::IsSlave);
                }
                match self.group_meter_mod(&d) {
                    Ok(()) => Vec::new(),
                    Err(k) => err(k),
                }
            }
            Msg::BundleControl { bundle_id, ctrl, flags } => {
                self.bundle_control(conn, v, xid, bundle_id, ctrl, flags, m)
            }
            Msg::BundleAdd { bundle_id, flags, inner } => {
                let mut st = conn.st.lock().expect("conn state");
                // A message for a bundle not yet opened opens it (OpenFlow
                // 1.4's implicit open, as OVS does; ovn-controller relies on
                // it: it never sends OPEN_REQUEST).
                let b = st.bundles.entry(bundle_id).or_insert_with(|| Bundle { flags, msgs: Vec::new() });
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

    /// Applies flow mods atomically; on error returns the index and the
    /// OpenFlow error. Sends flow-removed for deleted rules that asked.
    fn apply_flow_mods(&self, mods: &[(FlowModCmd, ofproto::FlowSpec)]) -> Result<(), (usize, ErrorKind)> {
        let mut of = self.sh.ofproto.write().expect("ofproto lock");
        of.set_now(self.sh.now_ms());
        for (i, (cmd, spec)) in mods.iter().enumerate() {
            if *cmd == FlowModCmd::Add && !spec.table_given && spec.table == 0xff {
                return Err((i, ErrorKind::BadTableId));
            }
            if let Some(k) = check_ports(spec) {
                return Err((i, k));
            }
        }
        let res = if mods.len() == 1 {
            of.flow_mod(mods[0].0, &mods[0].1).map(|_| ()).map_err(|e| (0, e))
        } else {
            of.flow_mod_batch(mods).map(|_| ())
        };
        let removed = of.take_removed();
        drop(of);
        self.send_flow_removed(removed);
        res.map_err(|(i, e)| (i, flow_mod_error(&e)))
    }

    fn send_flow_removed(&self, removed: Vec<ofproto::bridge::RemovedRule>) {
        let now = self.sh.now_ms();
        for r in removed.into_iter().filter(|r| r.flags & msg::ff::SEND_FLOW_REM != 0) {
            let fs = FlowStats {
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
            };
            let conns = self.conns.lock().expect("conns").clone();
            for c in conns.iter().filter(|c| c.wants_async()) {
                let (Some(v), nxm) = (c.version(), c.st.lock().expect("conn state").nxm) else { continue };
                c.send_async(&msg::encode_flow_removed(v, self.next_xid(), r.reason, &fs, nxm));
            }
        }
    }

    #[allow(clippy::too_many_arguments, reason = "the request's fields")]
    fn role_request(
        &self,
        conn: &Arc<Conn>,
        v: Version,
        xid: u32,
        role: u32,
        gen: u64,
        nx: bool,
        m: &Message,
    ) -> Vec<Vec<u8>> {
        if conn.kind != Kind::Controller && role != 0 {
            // Roles are for controllers; a service connection stays equal.
        }
        if role == ROLE_MASTER || role == ROLE_SLAVE {
            let mut mg = self.master_gen.lock().expect("master gen");
            if !nx {
                if let Some(g) = *mg {
                    if (gen.wrapping_sub(g) as i64) < 0 {
                        return vec![error_reply(v, ErrorKind::RoleStale, &m.bytes)];
                    }
                }
                *mg = Some(gen);
            }
        }
        if role == ROLE_MASTER {
            // The previous master becomes a slave.
            for c in self.conns.lock().expect("conns").iter() {
                if !Arc::ptr_eq(c, conn) {
                    let mut st = c.st.lock().expect("conn state");
                    if st.role == ROLE_MASTER {
                        st.role = ROLE_SLAVE;
                    }
                }
            }
        }
        let mut st = conn.st.lock().expect("conn state");
        if role != 0 {
            st.role = role;
        }
        let cur = st.role;
        drop(st);
        let g = self.master_gen.lock().expect("master gen").unwrap_or(0);
        vec![msg::encode_role_reply(v, xid, cur, g, nx)]
    }

    #[allow(clippy::too_many_arguments, reason = "the request's fields")]
    fn bundle_control(
        &self,
        conn: &Arc<Conn>,
        v: Version,
        xid: u32,
        id: u32,
        ctrl: u16,
        flags: u16,
        m: &Message,
    ) -> Vec<Vec<u8>> {
        let err = |k: ErrorKind| vec![error_reply(v, k, &m.bytes)];
        let mut st = conn.st.lock().expect("conn state");
        match ctrl {
            0 => {
                if st.bundles.contains_key(&id) {
                    return err(ErrorKind::BundleBadId);
                }
                st.bundles.insert(id, Bundle { flags, msgs: Vec::new() });
                vec![msg::encode_bundle_reply(v, xid, id, 1, flags)]
            }
            2 => {
                if !st.bundles.contains_key(&id) {
                    return err(ErrorKind::BundleBadId);
                }
                vec![msg::encode_bundle_reply(v, xid, id, 3, flags)]
            }
            4 => {
                let Some(b) = st.bundles.remove(&id) else { return err(ErrorKind::BundleBadId) };
                let ctx = st.ctx.unwrap_or(Ctx::new(v));
                drop(st);
                if !self.can_modify(conn) {
                    return err(ErrorKind::IsSlave);
                }
                // Decode everything first: one bad message fails the whole
                // bundle before anything is applied.
                let mut decoded = Vec::new();
                for inner in &b.msgs {
                    match msg::decode(&ctx, inner) {
                        Ok(d @ (Msg::FlowMod(_) | Msg::GroupMod(_) | Msg::MeterMod(_))) => decoded.push(d),
                        Ok(_) => {
                            return vec![
                                error_reply(v, ErrorKind::BundleBadType, &inner.bytes),
                                err(ErrorKind::BundleMsgFailed).remove(0),
                            ]
                        }
                        Err(k) => {
                            return vec![error_reply(v, k, &inner.bytes), err(ErrorKind::BundleMsgFailed).remove(0)]
                        }
                    }
                }
                // In order (ovn-controller deletes all groups, then adds flows
                // that name groups added later in the same bundle): runs of
                // flow mods apply atomically; a group or meter mod applies
                // between them.
                let mut run: Vec<(usize, FlowModCmd, ofproto::FlowSpec)> = Vec::new();
                for (i, d) in decoded.into_iter().enumerate() {
                    let fail = |k: ErrorKind| {
                        vec![error_reply(v, k, &b.msgs[i].bytes), err(ErrorKind::BundleMsgFailed).remove(0)]
                    };
                    match d {
                        Msg::FlowMod(fm) => run.push((i, fm.cmd, fm.spec)),
                        other => {
                            if !run.is_empty() {
                                let mods: Vec<_> = run.iter().map(|(_, c, s)| (*c, s.clone())).collect();
                                if let Err((j, k)) = self.apply_flow_mods(&mods) {
                                    let at = run[j].0;
                                    return vec![
                                        error_reply(v, k, &b.msgs[at].bytes),
                                        err(ErrorKind::BundleMsgFailed).remove(0),
                                    ];
                                }
                                run.clear();
                            }
                            if let Err(k) = self.group_meter_mod(&other) {
                                return fail(k);
                            }
                        }
                    }
                }
                let mods: Vec<_> = run.iter().map(|(_, c, s)| (*c, s.clone())).collect();
                match self.apply_flow_mods(&mods) {
                    Ok(()) => vec![msg::encode_bundle_reply(v, xid, id, 5, flags)],
                    Err((j, k)) => {
                        vec![error_reply(v, k, &b.msgs[run[j].0].bytes), err(ErrorKind::BundleMsgFailed).remove(0)]
                    }
                }
            }
            6 => {
                if st.bundles.remove(&id).is_none() {
                    return err(ErrorKind::BundleBadId);
                }
                vec![msg::encode_bundle_reply(v, xid, id, 7, flags)]
            }
            _ => err(ErrorKind::BadRequestEperm),
        }
    }

    fn stats(&self, conn: &Arc<Conn>, v: Version, xid: u32, req: StatsReq, m: &Message) -> Vec<Vec<u8>> {
        let _ = conn;
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
                    &format!("bridge {}", self.sh.bridge),
                ),
            ),
            StatsReq::Flow { aggregate, nx, table, out_port, out_group, cookie, cookie_mask, matched } => {
                self.sh.sync_stats();
                let of = self.sh.ofproto.read().expect("ofproto lock");
                let now = self.sh.now_ms();
                let mut items = Vec::new();
                let (mut pk, mut by, mut n) = (0u64, 0u64, 0u32);
                for (ti, rm, prio, r) in of.rules() {
                    if table != 0xff && ti != table {
                        continue;
                    }
                    // Loose match: the rule is at least as specific as the request.
                    if !matched.mask.is_subset_of(&rm.mask) || rm.key.and(&matched.mask) != matched.key {
                        continue;
                    }
                    if (r.cookie ^ cookie) & cookie_mask != 0 {
                        continue;
                    }
                    if !outputs_to(&r.instructions, out_port, out_group) {
                        continue;
                    }
                    let fs = FlowStats {
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
                        matched: *rm,
                        instructions: r.instructions.clone(),
                    };
                    pk += fs.packets;
                    by += fs.bytes;
                    n += 1;
                    if !aggregate {
                        items.push(msg::encode_flow_stats(v, nx, &fs));
                    }
                }
                let (st, sub) = if nx {
                    (msg::mp::EXPERIMENTER, Some(if aggregate { 1 } else { 0 }))
                } else {
                    (if aggregate { msg::mp::AGGREGATE } else { msg::mp::FLOW }, None)
                };
                if aggregate {
                    items.push(msg::encode_aggregate(if nx { Version::Of10 } else { v }, pk, by, n));
                }
                msg::encode_multipart(v, xid, st, sub, &items)
            }
            StatsReq::Table => {
                let of = self.sh.ofproto.read().expect("ofproto lock");
                let counts = of.table_counts();
                let items = (0..254u8)
                    .map(|t| {
                        let (active, lookups, matched) = counts[t as usize];
                        msg::encode_table_stats(v, t, active, lookups, matched)
                    })
                    .collect();
                many(msg::mp::TABLE, items)
            }
            StatsReq::Port { port } => {
                let now = self.sh.now_ms();
                let items = self
                    .sh
                    .port_stats()
                    .into_iter()
                    .filter(|(p, _)| port == msg::OFPP_ANY || p.ofport == port)
                    .map(|(p, s)| {
                        msg::encode_port_stats(
                            v,
                            &msg::PortStats {
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
                            },
                        )
                    })
                    .collect::<Vec<_>>();
                if items.is_empty() && port != msg::OFPP_ANY {
                    return vec![error_reply(v, ErrorKind::BadRequestPort, &m.bytes)];
                }
                many(msg::mp::PORT_STATS, items)
            }
            StatsReq::PortDesc => {
                let items = self
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
            StatsReq::Group { group } => many(msg::mp::GROUP, self.group_stats(v, group)),
            StatsReq::GroupDesc => many(msg::mp::GROUP_DESC, self.group_descs(v)),
            StatsReq::Meter { meter } => many(msg::mp::METER, self.meter_stats(meter)),
            StatsReq::MeterConfig { meter } => many(msg::mp::METER_CONFIG, self.meter_configs(meter)),
        }
    }

    /// Ports as OpenFlow describes them (config, link state, speed).
    fn port_descs(&self) -> Vec<PortDesc> {
        let of = self.sh.ofproto.read().expect("ofproto lock");
        let ports: Vec<_> = self.sh.ports.read().expect("ports lock").values().cloned().collect();
        ports
            .iter()
            .map(|p| {
                let pc = of.port(p.ofport);
                let up = pc.is_some_and(|c| c.up);
                let admin_down = self.admin_down.lock().expect("admin").contains(&p.ofport);
                let mac = read_mac(&p.spec.name).unwrap_or([0; 6]);
                let mut config = 0;
                if admin_down {
                    config |= msg::pc::PORT_DOWN;
                }
                if pc.is_some_and(|c| !c.flood) {
                    config |= msg::pc::NO_FLOOD;
                }
                let speed_mbps = read_speed(&p.spec.name);
                // 10GB_FD (1.0 bit 6, 1.3 bit 6) + COPPER (1.0 bit 7 / 1.3 bit 11).
                let curr = if speed_mbps >= 10_000 { (1 << 6) | (1 << 11) } else { 1 << 5 };
                PortDesc {
                    port_no: p.ofport,
                    hw_addr: mac,
                    name: p.spec.name.clone(),
                    config,
                    state: if up { msg::PS_LIVE } else { msg::PS_LINK_DOWN },
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

    fn port_config_down(&self, port: u32, down: bool) {
        let mut a = self.admin_down.lock().expect("admin");
        if down {
            a.insert(port);
        } else {
            a.remove(&port);
        }
    }

    /// Sends an asynchronous message built per version to every
    /// connection that wants them.
    fn broadcast_async(&self, build: impl Fn(Version) -> Vec<u8>) {
        let conns = self.conns.lock().expect("conns").clone();
        for c in conns.iter().filter(|c| c.wants_async()) {
            if let Some(v) = c.version() {
                let b = build(v);
                self.snoop(&b);
                c.send_async(&b);
            }
        }
    }

    /// Sets what a table miss does from the fail mode and whether a
    /// controller is connected.
    fn update_fail_mode(&self) {
        if self.cfg.controllers.is_empty() {
            return;
        }
        let connected = self
            .conns
            .lock()
            .expect("conns")
            .iter()
            .any(|c| c.kind == Kind::Controller && c.alive.load(Ordering::Acquire) && c.version().is_some());
        let miss = match (connected, self.cfg.fail_mode) {
            (true, _) => TableMiss::Controller,
            (false, FailMode::Standalone) => TableMiss::Normal,
            (false, FailMode::Secure) => TableMiss::Drop,
        };
        self.sh.ofproto.write().expect("ofproto lock").set_table_miss(miss);
    }

    /// Delivers packet-ins, expires rules (flow-removed), follows port
    /// additions, removals and link state (port-status).
    fn run_async(self: Arc<Self>) {
        let rx = self.sh.packet_in_rx.lock().expect("packet-in rx").take();
        let mut known: BTreeMap<u32, PortDesc> = BTreeMap::new();
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
            // Link state: a port whose kernel device lost carrier is down
            // (fast-failover groups and flooding follow it).
            for p in self.sh.ports.read().expect("ports lock").values().cloned().collect::<Vec<_>>() {
                let carrier = read_carrier(&p.spec.name);
                let admin_down = self.admin_down.lock().expect("admin").contains(&p.ofport);
                if let Some(c) = carrier {
                    self.sh.ofproto.write().expect("ofproto lock").set_port_up(p.ofport, c && !admin_down);
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
            let has_timeouts = timeouts_checked.1;
            if has_timeouts {
                self.sh.sync_stats();
                let mut of = self.sh.ofproto.write().expect("ofproto lock");
                of.set_now(now);
                of.expire_rules(now);
                let removed = of.take_removed();
                drop(of);
                self.send_flow_removed(removed);
            }
            // Port status.
            let cur: BTreeMap<u32, PortDesc> = self.port_descs().into_iter().map(|p| (p.port_no, p)).collect();
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
            known = cur;
            self.update_fail_mode();
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
        let conns = self.conns.lock().expect("conns").clone();
        let mut sent = false;
        for c in conns.iter().filter(|c| c.wants_async()) {
            let (Some(v), role, msl, pin_format, cid) = ({
                let st = c.st.lock().expect("conn state");
                (st.ctx.map(|x| x.version), st.role, st.miss_send_len, st.pin_format, st.controller_id)
            }) else {
                continue;
            };
            if ev.extra.as_ref().is_some_and(|x| x.controller_id != cid) {
                continue;
            }
            if role == ROLE_SLAVE {
                continue;
            }
            // OpenFlow 1.3+ controllers get table misses only through an
            // explicit table-miss flow (reason action), as the spec says.
            if reason == 0 && v != Version::Of10 {
                continue;
            }
            if reason == 2 {
                // invalid_ttl packet-ins only when asked for (OFPC_INVALID_TTL_TO_CONTROLLER).
                continue;
            }
            let max = if reason == 0 { msl as usize } else { ev.max_len as usize };
            if max == 0 && reason == 0 {
                continue;
            }
            let data = &ev.data[..ev.data.len().min(max)];
            if pin_format == 2 {
                // A paused pipeline's rest, in this connection's version.
                let cont =
                    ev.extra.as_ref().and_then(|x| x.continuation.as_ref()).map(|c| msg::encode_continuation(v, c));
                let catchall = flow::Match::CATCHALL;
                let mut m0 = catchall.clone();
                if metadata.is_none() {
                    if let Some(f) = flow::fields::by_name("in_port") {
                        m0.set_field(f, ev.in_port as u128);
                    }
                }
                let p = msg::PacketIn2 {
                    reason,
                    table: ev.table_id,
                    cookie: ev.cookie,
                    total_len: ev.full_len as u32,
                    data,
                    metadata: metadata.as_ref().unwrap_or(&m0),
                    userdata: ev.extra.as_ref().map_or(&[][..], |x| &x.userdata[..]),
                    continuation: cont.as_deref(),
                };
                let b = msg::encode_packet_in2(v, 0, &p);
                self.snoop(&b);
                c.send_async(&b);
                sent = true;
                continue;
            }
            let b = msg::encode_packet_in(
                v,
                0,
                if reason == 1 && v == Version::Of10 { 1 } else { reason },
                ev.table_id,
                ev.cookie,
                ev.in_port,
                ev.full_len.min(u16::MAX as usize) as u16,
                data,
            );
            self.snoop(&b);
            c.send_async(&b);
            sent = true;
        }
        if !sent {
            self.packet_in_dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Applies a group or meter modification.
    fn group_meter_mod(&self, m: &Msg) -> Result<(), ErrorKind> {
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
            Msg::GroupMod(gm) => {
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
            }
            Msg::MeterMod(mm) => {
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
            }
            _ => Ok(()),
        };
        let removed = of.take_removed();
        drop(of);
        self.send_flow_removed(removed);
        res
    }

    fn group_stats(&self, v: Version, g: u32) -> Vec<Vec<u8>> {
        use std::sync::atomic::Ordering::Relaxed;
        self.sh.sync_stats();
        let of = self.sh.ofproto.read().expect("ofproto lock");
        let now = self.sh.now_ms();
        of.groups()
            .filter(|gr| g == msg::OFPG_ALL || gr.id == g)
            .map(|gr| {
                let buckets: Vec<(u64, u64)> = gr
                    .buckets
                    .iter()
                    .map(|b| (b.counters.packets.load(Relaxed), b.counters.bytes.load(Relaxed)))
                    .collect();
                msg::encode_group_stats(
                    v,
                    gr.id,
                    of.group_ref_count(gr.id),
                    gr.counters.packets.load(Relaxed),
                    gr.counters.bytes.load(Relaxed),
                    now.saturating_sub(gr.created_ms),
                    &buckets,
                )
            })
            .collect()
    }

    fn group_descs(&self, v: Version) -> Vec<Vec<u8>> {
        let of = self.sh.ofproto.read().expect("ofproto lock");
        of.groups()
            .map(|gr| {
                let gm = msg::GroupMod {
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
                };
                msg::encode_group_desc(v, &gm)
            })
            .collect()
    }

    fn meter_stats(&self, id: u32) -> Vec<Vec<u8>> {
        use std::sync::atomic::Ordering::Relaxed;
        let of = self.sh.ofproto.read().expect("ofproto lock");
        let now = self.sh.now_ms();
        of.meters()
            .filter(|m| id == ofproto::group::OFPM_ALL || m.id == id)
            .map(|m| {
                let n = m.config().bands.len();
                let bands: Vec<(u64, u64)> =
                    (0..n).map(|i| (m.band_packets[i].load(Relaxed), m.band_bytes[i].load(Relaxed))).collect();
                msg::encode_meter_stats(
                    m.id,
                    of.meter_ref_count(m.id),
                    m.packets_in.load(Relaxed),
                    m.bytes_in.load(Relaxed),
                    now.saturating_sub(m.created_ms),
                    &bands,
                )
            })
            .collect()
    }

    fn meter_configs(&self, id: u32) -> Vec<Vec<u8>> {
        let of = self.sh.ofproto.read().expect("ofproto lock");
        of.meters()
            .filter(|m| id == ofproto::group::OFPM_ALL || m.id == id)
            .map(|m| {
                let cfg = m.config();
                msg::encode_meter_config(&msg::MeterMod {
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
                })
            })
            .collect()
    }
}

/// Whether instructions output to a port / group (filters of stats and deletes).
fn outputs_to(ins: &[ofproto::Instruction], out_port: u32, out_group: u32) -> bool {
    let acts = || {
        ins.iter().flat_map(|i| match i {
            ofproto::Instruction::Apply(a) | ofproto::Instruction::Write(a) => a.as_slice(),
            _ => &[],
        })
    };
    let port_ok = out_port == msg::OFPP_ANY
        || acts().any(|a| match a {
            ofproto::Action::Output(p) => ofproto::actions::ofport_number(*p) == out_port,
            ofproto::Action::Controller { .. } | ofproto::Action::ControllerNx(_) => out_port == ofpp::CONTROLLER,
            _ => false,
        });
    let group_ok =
        out_group == msg::OFPG_ANY || acts().any(|a| matches!(a, ofproto::Action::Group(g) if *g == out_group));
    port_ok && group_ok
}

/// Output ports must be valid port numbers.
fn check_ports(spec: &ofproto::FlowSpec) -> Option<ErrorKind> {
    for i in &spec.instructions {
        if let ofproto::Instruction::GotoTable(t) = i {
            if *t <= spec.table || *t > 254 {
                return Some(ErrorKind::BadInstTableId);
            }
        }
    }
    None
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

pub(crate) fn read_sys(dev: &str, what: &str) -> Option<String> {
    std::fs::read_to_string(format!("/sys/class/net/{dev}/{what}")).ok().map(|s| s.trim().to_string())
}

/// A device's carrier: `None` when it is not known, which callers treat
/// as "no change". The kernel answers EINVAL for a device that is
/// administratively down (no carrier); any other failure (EMFILE when
/// many peers hold descriptors, ENOMEM) says nothing about the link and
/// must not turn into "link down".
pub(crate) fn read_carrier(dev: &str) -> Option<bool> {
    match std::fs::read_to_string(format!("/sys/class/net/{dev}/carrier")) {
        Ok(s) => Some(s.trim() == "1"),
        Err(e) if e.raw_os_error() == Some(22) => Some(false),
        Err(_) => None,
    }
}

pub(crate) fn read_mac(dev: &str) -> Option<[u8; 6]> {
    let s = read_sys(dev, "address")?;
    let mut mac = [0u8; 6];
    for (i, p) in s.split(':').enumerate().take(6) {
        mac[i] = u8::from_str_radix(p, 16).ok()?;
    }
    Some(mac)
}

pub(crate) fn read_speed(dev: &str) -> u64 {
    read_sys(dev, "speed").and_then(|s| s.parse::<i64>().ok()).filter(|&s| s > 0).unwrap_or(10_000) as u64
}

/// Connections one listener serves at once. Each connection costs two
/// threads (reader, writer) and two descriptors; 1,000 per listener keeps
/// a bridge's worst case (mgmt + snoop + a ptcp listener) near 6,000
/// threads, well inside default kernel limits, while being far more than
/// any real deployment opens (a handful of controllers and tools).
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
