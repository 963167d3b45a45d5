//! The ovs-appctl control socket: the JSON-RPC that `ovs-appctl` speaks
//! (a request `{"id", "method", "params": [strings]}`, a reply `{"id",
//! "result": text, "error": null}` or `{"id", "result": null, "error":
//! text}`), served at `<run-dir>/ovs-vswitchd.<pid>.ctl` with the pid in
//! `<run-dir>/ovs-vswitchd.pid`, where ovs-appctl looks for the switch
//! daemon. So `OVS_RUNDIR=<run-dir> ovs-appctl dpctl/show` works, and
//! `ovs-appctl -t <run-dir>/ovs-vswitchd.<pid>.ctl ...` too.
//!
//! The commands are [`crate::commands::COMMANDS`], the same table the
//! `xvs` CLI's socket serves; [`crate::control::Server`] serves both
//! sockets. Commands named like Open vSwitch's answer with text laid out
//! like its, so scripts and eyes trained on OVS read them unchanged. This
//! module holds the request format and the OVS-only layouts.

use crate::commands::Ctx;
use anyhow::{Context, Result};
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::io::Write;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

pub struct AppctlSocket {
    pub listener: UnixListener,
    pub path: PathBuf,
    pub pidfile: PathBuf,
    _pidfile_lock: std::fs::File,
}

impl AppctlSocket {
    /// Binds the socket and writes the pidfile.
    pub fn bind(run_dir: &Path) -> Result<AppctlSocket> {
        let pid = std::process::id();
        let path = run_dir.join(format!("ovs-vswitchd.{pid}.ctl"));
        let _ = std::fs::remove_file(&path);
        let listener = crate::runfiles::bind_socket(&path)?;
        listener.set_nonblocking(true)?;
        let pidfile = run_dir.join("ovs-vswitchd.pid");
        let mut f = std::fs::File::create(&pidfile).with_context(|| format!("writing {}", pidfile.display()))?;
        f.write_all(format!("{pid}\n").as_bytes())?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&pidfile, std::fs::Permissions::from_mode(0o644))?;
        // ovs-appctl trusts a pidfile only while its owner holds a lock on it.
        use std::os::fd::AsRawFd;
        netdev_linux::sys::lock_file(f.as_raw_fd()).with_context(|| format!("locking {}", pidfile.display()))?;
        Ok(AppctlSocket { listener, path, pidfile, _pidfile_lock: f })
    }
}

impl Drop for AppctlSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        let _ = std::fs::remove_file(&self.pidfile);
    }
}

/// Answers one JSON-RPC request (`{"id", "method", "params"}`): the reply,
/// and whether it asked the switch to exit.
pub fn handle_request(ctx: &Ctx, v: &Value) -> (Value, bool) {
    let id = v.get("id").cloned().unwrap_or(Value::Null);
    let method = v.get("method").and_then(Value::as_str).unwrap_or("");
    let params: Vec<String> = match v.get("params").and_then(Value::as_array) {
        Some(a) => a.iter().map(|x| x.as_str().map(str::to_string).unwrap_or_else(|| x.to_string())).collect(),
        None => Vec::new(),
    };
    match method {
        "echo" => (json!({"id": id, "result": params, "error": null}), false),
        "exit" => (json!({"id": id, "result": "", "error": null}), true),
        _ => match crate::commands::run_in(ctx, method, &params) {
            Ok((text, _)) => (json!({"id": id, "result": text, "error": null}), false),
            Err(e) => (json!({"id": id, "result": null, "error": format!("{e:#}")}), false),
        },
    }
}

type Reply = Result<(String, Value)>;

/// xvs logs to stderr only; accept the requests so scripts keep working.
pub fn vlog(_: &Ctx, args: &[String]) -> Reply {
    let _ = args;
    let out = "                 console    syslog    file\n                 -------    ------    ------\nxvs                 INFO       OFF       OFF\n";
    Ok((out.into(), json!({})))
}

pub fn bridge_dump_flows(ctx: &Ctx, args: &[String]) -> Reply {
    let _ = args;
    let mut out = String::new();
    let b = ctx.bridge_named(args.first())?;
    b.shared.sync_stats();
    let of = b.shared.ofproto.read().expect("ofproto lock");
    let now = of.now();
    for (t, m, prio, r) in of.rules() {
        let ms = m.to_string();
        let sep = if ms.is_empty() { "" } else { "," };
        let _ = writeln!(
            out,
            "duration={}s, n_packets={}, n_bytes={}, table_id={t}, priority={prio}{sep}{ms},actions={}",
            now.saturating_sub(r.created_ms) / 1000,
            r.packets(),
            r.bytes(),
            ofproto::actions::format_instructions(&r.instructions)
        );
    }
    Ok((out, json!({})))
}

pub fn pmd_stats_show(ctx: &Ctx, args: &[String]) -> Reply {
    let _ = args;
    let bridges = ctx.bridges;
    let mut out = String::new();
    let mhz = crate::cpu_mhz();
    for b in bridges {
        for r in b.collect_reports(false) {
            let s = &r.stats;
            let total = (r.busy_ns + r.idle_ns).max(1);
            let cyc = |ns: u64| (ns as f64 * mhz / 1000.0) as u64;
            let pk = s.packets.max(1) as f64;
            if r.main_thread {
                let _ = writeln!(out, "main thread ({}):", b.shared.bridge);
            } else {
                let _ = writeln!(out, "pmd thread numa_id 0 core_id {} ({}):", r.id, b.shared.bridge);
            }
            let _ = writeln!(out, "  packets received: {}", s.packets);
            let _ = writeln!(out, "  packet recirculations: 0");
            let _ = writeln!(out, "  avg. datapath passes per packet: 1.00");
            let _ = writeln!(out, "  emc hits: {}", s.emc_hits);
            let _ = writeln!(out, "  smc hits: 0");
            let _ = writeln!(out, "  megaflow hits: {}", s.megaflow_hits);
            let _ = writeln!(out, "  miss with success upcall: {}", s.upcalls);
            let _ = writeln!(out, "  miss with failed upcall: {}", s.upcall_busy);
            let _ =
                writeln!(out, "  idle cycles: {} ({:.2}%)", cyc(r.idle_ns), 100.0 * r.idle_ns as f64 / total as f64);
            let _ = writeln!(
                out,
                "  processing cycles: {} ({:.2}%)",
                cyc(r.busy_ns),
                100.0 * r.busy_ns as f64 / total as f64
            );
            if s.packets > 0 {
                let _ = writeln!(
                    out,
                    "  avg cycles per packet: {:.2} ({}/{})",
                    cyc(total) as f64 / pk,
                    cyc(total),
                    s.packets
                );
                let _ = writeln!(
                    out,
                    "  avg processing cycles per packet: {:.2} ({}/{})",
                    cyc(r.busy_ns) as f64 / pk,
                    cyc(r.busy_ns),
                    s.packets
                );
            }
        }
    }
    Ok((out, json!({})))
}

pub fn pmd_rxq_show(ctx: &Ctx, args: &[String]) -> Reply {
    let _ = args;
    let bridges = ctx.bridges;
    let mut out = String::new();
    for b in bridges {
        for r in b.collect_reports(false) {
            let _ = writeln!(out, "pmd thread numa_id 0 core_id {} ({}):", r.id, b.shared.bridge);
            let _ = writeln!(out, "  isolated : false");
            for (port, q) in &r.rxqs {
                let _ = writeln!(out, "  port: {port:<16}  queue-id: {q:2} (enabled)   pmd usage: NOT AVAIL");
            }
        }
    }
    Ok((out, json!({})))
}

pub fn coverage_show(ctx: &Ctx, args: &[String]) -> Reply {
    let _ = args;
    let bridges = ctx.bridges;
    let mut out = String::new();
    out.push_str("Event coverage (totals since start):\n");
    for b in bridges {
        for r in b.collect_reports(false) {
            let s = &r.stats;
            for (k, v) in [
                ("datapath_packets", s.packets),
                ("datapath_emc_hit", s.emc_hits),
                ("datapath_megaflow_hit", s.megaflow_hits),
                ("datapath_upcall", s.upcalls),
                ("datapath_upcall_busy", s.upcall_busy),
                ("datapath_revalidated", s.revalidated),
                ("datapath_removed_stale", s.removed_stale),
                ("datapath_expired", s.expired),
                ("datapath_userspace_dropped", r.userspace_dropped),
            ] {
                let _ = writeln!(out, "{k:<32} total: {v}");
            }
            for (k, v) in s.drops_by_reason().into_iter().filter(|(_, n)| *n > 0) {
                let _ = writeln!(out, "{k:<32} total: {v}");
            }
        }
    }
    Ok((out, json!({})))
}
