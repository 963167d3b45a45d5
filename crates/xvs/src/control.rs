//! The control sockets: `<run-dir>/xvs.ctl` (the `xvs` CLI: one JSON
//! request per line, `{"cmd": "show", "args": []}`, one JSON reply per
//! line, `{"ok": true, "text": "...", "json": {...}}` or `{"ok": false,
//! "error": "..."}`) and the ovs-appctl socket ([`crate::appctl`]), both
//! answering the one command table [`crate::commands::COMMANDS`].
//!
//! [`Server`] serves both from the daemon's main loop, event-driven: every
//! socket is non-blocking, each connection has its own input and output
//! buffer, and [`Server::poll`] waits (at most [`TICK`]) for any of them to
//! be readable, reads what is there, answers each complete request and
//! writes what the peer takes. So any number of clients are served side by
//! side; a client that sends one byte every few seconds, or never reads its
//! reply, holds only its own connection, and the loop sees SIGTERM within a
//! tick. Why not a thread per client or an async runtime: commands take the
//! switch's locks for short, bounded times and the owner (one bridge, or
//! the database loop's changing set of bridges) lends them by reference
//! for the duration of one poll, which a plain loop does simply.
//!
//! Bounds: each request must arrive whole within [`REQUEST_DEADLINE`] of
//! its first byte (or of the connection), and its reply must be taken
//! within [`REPLY_DEADLINE`]: a total deadline per request, not a
//! per-read timeout that each byte restarts. At most [`MAX_CONNS`]
//! connections at once (a new one then replaces the one idle longest,
//! logged once), at most [`MAX_REQUEST`] bytes per request.

use crate::commands::Ctx;
use crate::switch::Switch;
use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const REQUEST_DEADLINE: Duration = Duration::from_secs(5);
pub const REPLY_DEADLINE: Duration = Duration::from_secs(10);
pub const MAX_CONNS: usize = 64;
pub const MAX_REQUEST: usize = 4 << 20;
/// Longest [`Server::poll`] waits for something to do.
pub const TICK: Duration = Duration::from_millis(20);

pub fn socket_path(run_dir: &Path) -> PathBuf {
    run_dir.join("xvs.ctl")
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Proto {
    /// xvs.ctl: JSON lines.
    Xvs,
    /// ovs-appctl: JSON-RPC values, back to back.
    Appctl,
}

struct Conn {
    s: UnixStream,
    proto: Proto,
    inbuf: Vec<u8>,
    outbuf: Vec<u8>,
    /// Written so far of `outbuf`.
    sent: usize,
    deadline: Instant,
    /// Close once the output is written.
    closing: bool,
}

/// Both control sockets of a process.
pub struct Server {
    ctl: UnixListener,
    ctl_path: PathBuf,
    appctl: Option<crate::appctl::AppctlSocket>,
    conns: Vec<Conn>,
    full_logged: bool,
}

impl Server {
    /// Binds `xvs.ctl` and the appctl socket in `run_dir` (which
    /// [`crate::runfiles::prepare_dir`] has made ready).
    pub fn bind(run_dir: &Path) -> Result<Server> {
        // The ovs-appctl socket first: the CLI socket appearing means ready.
        let appctl = match crate::appctl::AppctlSocket::bind(run_dir) {
            Ok(a) => Some(a),
            Err(e) => {
                warn(&format!("ovs-appctl socket: {e:#}"));
                None
            }
        };
        let ctl_path = socket_path(run_dir);
        let ctl = crate::runfiles::bind_socket(&ctl_path)?;
        ctl.set_nonblocking(true)?;
        Ok(Server { ctl, ctl_path, appctl, conns: Vec::new(), full_logged: false })
    }

    pub fn appctl_path(&self) -> Option<&Path> {
        self.appctl.as_ref().map(|a| a.path.as_path())
    }

    /// Waits up to [`TICK`] for activity, then serves what is ready.
    /// Returns true if a client asked the switch to exit.
    pub fn poll(&mut self, ctx: &Ctx) -> bool {
        let mut fds = vec![self.ctl.as_raw_fd()];
        fds.extend(self.appctl.as_ref().map(|a| a.listener.as_raw_fd()));
        // Connections with output pending are retried each tick; the
        // others wake the wait when readable.
        let writing = self.conns.iter().any(|c| c.sent < c.outbuf.len());
        fds.extend(self.conns.iter().map(|c| c.s.as_raw_fd()));
        crate::ports::poll_readable(&fds, if writing { 1 } else { TICK.as_millis() as i32 });
        self.accept(Proto::Xvs);
        self.accept(Proto::Appctl);
        let mut exit = false;
        let now = Instant::now();
        let mut i = 0;
        while i < self.conns.len() {
            let keep = handle_conn(&mut self.conns[i], ctx, now, &mut exit);
            if keep {
                i += 1;
            } else {
                self.conns.swap_remove(i);
            }
        }
        exit
    }

    fn accept(&mut self, proto: Proto) {
        let l = match proto {
            Proto::Xvs => &self.ctl,
            Proto::Appctl => match &self.appctl {
                Some(a) => &a.listener,
                None => return,
            },
        };
        loop {
            match l.accept() {
                Ok((s, _)) => {
                    if self.conns.len() >= MAX_CONNS {
                        // Make room by closing the client that has waited
                        // longest without completing a request (so idle
                        // clients cannot lock everyone else out).
                        let idle = self
                            .conns
                            .iter()
                            .enumerate()
                            .filter(|(_, c)| c.outbuf.is_empty())
                            .min_by_key(|(_, c)| c.deadline)
                            .map(|(i, _)| i);
                        if !self.full_logged {
                            warn(&format!(
                                "control sockets: {MAX_CONNS} clients connected; closing the longest idle for new ones"
                            ));
                            self.full_logged = true;
                        }
                        match idle {
                            Some(i) => {
                                self.conns.swap_remove(i);
                            }
                            None => continue,
                        }
                    } else {
                        self.full_logged = false;
                    }
                    if s.set_nonblocking(true).is_err() {
                        continue;
                    }
                    self.conns.push(Conn {
                        s,
                        proto,
                        inbuf: Vec::new(),
                        outbuf: Vec::new(),
                        sent: 0,
                        deadline: Instant::now() + REQUEST_DEADLINE,
                        closing: false,
                    });
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) => {
                    // EMFILE and the like: a warning, and the next tick retries.
                    warn(&format!("control socket accept: {e}"));
                    return;
                }
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.ctl_path);
    }
}

/// Serves one connection; false when it is done with.
fn handle_conn(c: &mut Conn, ctx: &Ctx, now: Instant, exit: &mut bool) -> bool {
    // Output first: a reply not taken by its deadline closes the connection.
    if c.sent < c.outbuf.len() {
        match c.s.write(&c.outbuf[c.sent..]) {
            Ok(n) => c.sent += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(_) => return false,
        }
        if c.sent < c.outbuf.len() {
            return now < c.deadline;
        }
        c.outbuf.clear();
        c.sent = 0;
        if c.closing {
            return false;
        }
        c.deadline = now + REQUEST_DEADLINE;
    }
    let mut buf = [0u8; 8192];
    loop {
        match c.s.read(&mut buf) {
            Ok(0) => return false,
            Ok(n) => {
                if c.inbuf.is_empty() {
                    // The request's clock starts at its first byte.
                    c.deadline = now + REQUEST_DEADLINE;
                }
                c.inbuf.extend_from_slice(&buf[..n]);
                if c.inbuf.len() > MAX_REQUEST {
                    return false;
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return false,
        }
    }
    // Answer every complete request.
    loop {
        let (reply, used, stop) = match c.proto {
            Proto::Xvs => match c.inbuf.iter().position(|&b| b == b'\n') {
                None => break,
                Some(i) => {
                    let (r, x) = xvs_request(ctx, &c.inbuf[..i]);
                    (r, i + 1, x)
                }
            },
            Proto::Appctl => {
                let mut it = serde_json::Deserializer::from_slice(&c.inbuf).into_iter::<Value>();
                match it.next() {
                    None => {
                        c.inbuf.clear();
                        break;
                    }
                    Some(Ok(v)) => {
                        let used = it.byte_offset();
                        let (r, x) = crate::appctl::handle_request(ctx, &v);
                        (r.to_string().into_bytes(), used, x)
                    }
                    Some(Err(e)) if e.is_eof() => break,
                    // Malformed: nothing more can be framed on this stream.
                    Some(Err(_)) => return false,
                }
            }
        };
        c.inbuf.drain(..used);
        c.outbuf.extend_from_slice(&reply);
        c.deadline = now + REPLY_DEADLINE;
        if stop {
            *exit = true;
            c.closing = true;
            c.inbuf.clear();
            break;
        }
    }
    if !c.outbuf.is_empty() {
        // Try to write at once; what remains waits for the next tick.
        return serve_output(c, now);
    }
    // A request begun but not finished by its deadline ends the connection;
    // an idle connection too (it has no reason to stay).
    now < c.deadline
}

fn serve_output(c: &mut Conn, now: Instant) -> bool {
    match c.s.write(&c.outbuf[c.sent..]) {
        Ok(n) => c.sent += n,
        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
        Err(_) => return false,
    }
    if c.sent == c.outbuf.len() {
        c.outbuf.clear();
        c.sent = 0;
        if c.closing {
            return false;
        }
        c.deadline = now + REQUEST_DEADLINE;
    }
    true
}

/// One xvs.ctl request line: the reply line, and whether it was `exit`.
fn xvs_request(ctx: &Ctx, line: &[u8]) -> (Vec<u8>, bool) {
    let mut exit = false;
    let reply = match serde_json::from_slice::<Value>(line) {
        Ok(req) => {
            let cmd = req["cmd"].as_str().unwrap_or("").to_string();
            let args: Vec<String> = req["args"]
                .as_array()
                .map(|a| a.iter().filter_map(|v| v.as_str().map(String::from)).collect())
                .unwrap_or_default();
            if cmd == "exit" {
                exit = true;
                json!({"ok": true, "text": "exiting\n"})
            } else {
                match crate::commands::run_in(ctx, &cmd, &args) {
                    Ok((text, j)) => json!({"ok": true, "text": text, "json": j}),
                    Err(e) => json!({"ok": false, "error": format!("{e:#}")}),
                }
            }
        }
        Err(e) => json!({"ok": false, "error": format!("malformed request: {e}")}),
    };
    let mut s = reply.to_string().into_bytes();
    s.push(b'\n');
    (s, exit)
}

fn warn(msg: &str) {
    eprintln!("xvs: warning: {msg}");
}

/// Serves one bridge's control sockets until `stop` is set or an `exit`
/// request arrives; runs housekeeping every 500 ms.
pub fn serve(sw: &Switch, server: &mut Server, stop: &Arc<AtomicBool>) -> Result<()> {
    let mut last_hk = Instant::now();
    let bridges = [sw];
    let ctx = Ctx { bridges: &bridges, db: false };
    while !stop.load(Ordering::Acquire) {
        if server.poll(&ctx) {
            stop.store(true, Ordering::Release);
        }
        if last_hk.elapsed() >= Duration::from_millis(500) {
            sw.housekeeping();
            last_hk = Instant::now();
        }
    }
    Ok(())
}

/// Client side: sends one request and returns (text, json).
pub fn request(run_dir: &Path, cmd: &str, args: &[String]) -> Result<(String, Value)> {
    let path = socket_path(run_dir);
    let mut s = UnixStream::connect(&path)
        .with_context(|| format!("connecting to {} (is `xvs switch` running with this --run-dir?)", path.display()))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut req = json!({"cmd": cmd, "args": args}).to_string();
    req.push('\n');
    s.write_all(req.as_bytes())?;
    let mut line = String::new();
    BufReader::new(&s).read_line(&mut line)?;
    if line.is_empty() {
        bail!("the switch closed the connection without a reply");
    }
    let v: Value = serde_json::from_str(&line).context("malformed reply from switch")?;
    if v["ok"].as_bool() != Some(true) {
        bail!("{}", v["error"].as_str().unwrap_or("request failed"));
    }
    Ok((v["text"].as_str().unwrap_or("").to_string(), v["json"].clone()))
}
