//! The control socket: `<run-dir>/xvs.ctl`, one JSON request per line,
//! one JSON reply per line. The `xvs` CLI subcommands are its client.
//!
//! Request: `{"cmd": "show", "args": []}`.
//! Reply: `{"ok": true, "text": "...", "json": {...}}` or
//! `{"ok": false, "error": "..."}`.

use crate::switch::Switch;
use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub fn socket_path(run_dir: &Path) -> PathBuf {
    run_dir.join("xvs.ctl")
}

/// Serves requests until `stop` is set or an `exit` request arrives.
/// Runs housekeeping between requests.
pub fn serve(sw: &Switch, run_dir: &Path, stop: &Arc<AtomicBool>) -> Result<()> {
    std::fs::create_dir_all(run_dir).with_context(|| format!("creating run directory {}", run_dir.display()))?;
    let path = socket_path(run_dir);
    if path.exists() {
        if UnixStream::connect(&path).is_ok() {
            bail!("another xvs is already serving {}", path.display());
        }
        std::fs::remove_file(&path).ok();
    }
    // The ovs-appctl socket first: the CLI socket appearing means ready.
    let appctl = match crate::appctl::AppctlSocket::bind(run_dir) {
        Ok(a) => Some(a),
        Err(e) => {
            tracing_warn(&format!("ovs-appctl socket: {e:#}"));
            None
        }
    };
    let listener = UnixListener::bind(&path).with_context(|| format!("binding {}", path.display()))?;
    listener.set_nonblocking(true)?;
    let mut last_hk = Instant::now();
    while !stop.load(Ordering::Acquire) {
        if appctl.as_ref().is_some_and(|a| a.poll(&[sw])) {
            stop.store(true, Ordering::Release);
        }
        match listener.accept() {
            Ok((stream, _)) => {
                if handle_conn(sw, stream) {
                    stop.store(true, Ordering::Release);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => tracing_warn(&format!("control socket accept: {e}")),
        }
        if last_hk.elapsed() >= Duration::from_millis(500) {
            sw.housekeeping();
            last_hk = Instant::now();
        }
    }
    std::fs::remove_file(&path).ok();
    Ok(())
}

fn tracing_warn(msg: &str) {
    eprintln!("xvs: warning: {msg}");
}

/// Handles one connection; returns true if the switch should exit.
fn handle_conn(sw: &Switch, stream: UnixStream) -> bool {
    stream.set_nonblocking(false).ok();
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok();
    let mut exit = false;
    let mut reader = BufReader::new(match stream.try_clone() {
        Ok(s) => s,
        Err(_) => return false,
    });
    let mut writer = stream;
    let mut line = String::new();
    while reader.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
        let reply = match serde_json::from_str::<Value>(&line) {
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
                    match crate::commands::run(sw, &cmd, &args) {
                        Ok((text, j)) => json!({"ok": true, "text": text, "json": j}),
                        Err(e) => json!({"ok": false, "error": format!("{e:#}")}),
                    }
                }
            }
            Err(e) => json!({"ok": false, "error": format!("malformed request: {e}")}),
        };
        let mut s = reply.to_string();
        s.push('\n');
        if writer.write_all(s.as_bytes()).is_err() {
            break;
        }
        line.clear();
        if exit {
            break;
        }
    }
    exit
}

/// Client side: sends one request and returns (text, json).
pub fn request(run_dir: &Path, cmd: &str, args: &[String]) -> Result<(String, Value)> {
    let path = socket_path(run_dir);
    let mut s = UnixStream::connect(&path)
        .with_context(|| format!("connecting to {} (is `xvs switch` running with this --run-dir?)", path.display()))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut req = json!({"cmd": cmd, "args": args}).to_string();
    req.push('\n');
    s.write_all(req.as_bytes())?;
    let mut line = String::new();
    BufReader::new(&s).read_line(&mut line)?;
    let v: Value = serde_json::from_str(&line).context("malformed reply from switch")?;
    if v["ok"].as_bool() != Some(true) {
        bail!("{}", v["error"].as_str().unwrap_or("request failed"));
    }
    Ok((v["text"].as_str().unwrap_or("").to_string(), v["json"].clone()))
}
