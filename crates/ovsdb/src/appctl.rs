//! An ovs-appctl-compatible control socket ("unixctl").
//!
//! ovs-appctl connects to a unix socket and sends one JSON-RPC request per
//! command: `{"method": "list-commands", "params": ["arg", ...], "id": N}`,
//! all params strings. The reply is `{"result": "text", "error": null,
//! "id": N}` (ovs-appctl prints the text and exits 0) or `{"result": null,
//! "error": "text", "id": N}` (it prints the text to stderr and exits 2).
//!
//! [`AppctlServer::bind`] listens on a path and serves each connection on
//! its own thread, calling the handler for every request. A JSON-RPC
//! `echo` request is answered at the protocol level (result = params), as
//! OVS's unixctl server does for keepalives. A malformed stream is logged
//! and that connection closed; other connections and the listener carry
//! on. Dropping the server stops the listener and removes the socket file.

use crate::jsonrpc::{Codec, Message};
use serde_json::Value;
use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use tracing::{debug, warn};

/// `handler(method, args)`: Ok(text) or Err(message).
pub type Handler = dyn Fn(&str, &[String]) -> Result<String, String> + Send + Sync;

/// A listening control socket.
pub struct AppctlServer {
    path: PathBuf,
    /// Written by `drop`, read by the accept thread (Relaxed is enough: the
    /// wake-up connection made after the store orders it).
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl AppctlServer {
    /// Binds `path` (a stale socket file there is removed first) and starts
    /// serving.
    pub fn bind<F>(path: impl AsRef<Path>, handler: F) -> std::io::Result<AppctlServer>
    where
        F: Fn(&str, &[String]) -> Result<String, String> + Send + Sync + 'static,
    {
        let path = path.as_ref().to_path_buf();
        if UnixStream::connect(&path).is_err() {
            let _ = std::fs::remove_file(&path);
        }
        let listener = UnixListener::bind(&path)?;
        let stop = Arc::new(AtomicBool::new(false));
        let handler: Arc<Handler> = Arc::new(handler);
        let stop2 = stop.clone();
        let thread = std::thread::Builder::new().name("appctl".into()).spawn(move || {
            for conn in listener.incoming() {
                if stop2.load(Ordering::Relaxed) {
                    break;
                }
                match conn {
                    Ok(s) => {
                        let h = handler.clone();
                        let _ = std::thread::Builder::new().name("appctl-conn".into()).spawn(move || serve(s, &*h));
                    }
                    Err(e) => warn!("appctl: accept: {e}"),
                }
            }
        })?;
        Ok(AppctlServer { path, stop, thread: Some(thread) })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for AppctlServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = UnixStream::connect(&self.path); // wake the accept loop
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The reply to one decoded message, or None when nothing is to be sent.
pub fn reply(msg: Message, handler: &Handler) -> Option<Message> {
    match msg {
        Message::Request { method, params, id } => {
            if method == "echo" {
                return Some(Message::Response { result: Value::Array(params), error: Value::Null, id });
            }
            let args: Vec<String> = params
                .into_iter()
                .map(|p| match p {
                    Value::String(s) => s,
                    other => other.to_string(),
                })
                .collect();
            debug!("appctl: {method} {args:?}");
            Some(match handler(&method, &args) {
                Ok(text) => Message::Response { result: Value::String(text), error: Value::Null, id },
                Err(e) => Message::Response { result: Value::Null, error: Value::String(e), id },
            })
        }
        Message::Notification { method, .. } => {
            debug!("appctl: notification {method:?} ignored");
            None
        }
        Message::Response { .. } => None,
    }
}

fn serve(mut s: UnixStream, handler: &Handler) {
    let mut codec = Codec::new();
    let mut buf = [0u8; 16384];
    loop {
        let n = match s.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                debug!("appctl: read: {e}");
                return;
            }
        };
        codec.feed(&buf[..n]);
        while let Some(v) = codec.next_value() {
            let v = match v {
                Ok(v) => v,
                Err(e) => {
                    warn!("appctl: {e}; closing the connection");
                    return;
                }
            };
            let msg = match Message::from_value(v) {
                Ok(m) => m,
                Err(e) => {
                    warn!("appctl: {e}; ignored");
                    continue;
                }
            };
            if let Some(r) = reply(msg, handler) {
                if let Err(e) = s.write_all(&r.encode()) {
                    debug!("appctl: write: {e}");
                    return;
                }
            }
        }
    }
}
