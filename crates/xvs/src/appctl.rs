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
            let _ = writeln!(out, "  simple match hits: {}", s.simple_hits);
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

/// `dpif-netdev/pmd-perf-show`, in Open vSwitch's layout (counts since
/// the switch started: xvs does not clear them).
pub fn pmd_perf_show(ctx: &Ctx, args: &[String]) -> Reply {
    let _ = args;
    let mut out = String::new();
    let mhz = crate::cpu_mhz();
    let cyc = |ns: u64| (ns as f64 * mhz / 1000.0) as u64;
    let pct = |a: u64, b: u64| if b == 0 { 0.0 } else { 100.0 * a as f64 / b as f64 };
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let (h, m, sec) = ((now.as_secs() / 3600) % 24, (now.as_secs() / 60) % 60, now.as_secs() % 60);
    let _ = writeln!(out, "\nTime: {h:02}:{m:02}:{sec:02}.{:03}", now.subsec_millis());
    let mut per_thread = Vec::new();
    for b in ctx.bridges {
        let dur = b.shared.start.elapsed();
        if per_thread.is_empty() {
            let _ = writeln!(out, "Measurement duration: {:.3} s", dur.as_secs_f64());
        }
        for r in b.collect_reports(false).into_iter().filter(|r| !r.main_thread) {
            let s = &r.stats;
            let used = r.busy_ns + r.idle_ns;
            let total = cyc(dur.as_nanos() as u64).max(cyc(used));
            let idle_iters = r.iterations - r.busy_iterations;
            let secs = dur.as_secs_f64().max(1e-9);
            let _ = writeln!(out, "\npmd thread numa_id 0 core_id {} ({}):\n", r.id, b.shared.bridge);
            let us_it = if r.iterations == 0 { 0.0 } else { used as f64 / 1000.0 / r.iterations as f64 };
            let _ = writeln!(out, "  Iterations:         {:>12}  ({us_it:.2} us/it)", r.iterations);
            let _ = writeln!(
                out,
                "  - Used TSC cycles: {:>12}  ({:5.1} % of total cycles)",
                cyc(used),
                pct(cyc(used), total)
            );
            let _ = writeln!(
                out,
                "  - idle iterations: {:>12}  ({:5.1} % of used cycles)",
                idle_iters,
                pct(r.idle_ns, used)
            );
            let _ = writeln!(
                out,
                "  - busy iterations: {:>12}  ({:5.1} % of used cycles)",
                r.busy_iterations,
                pct(r.busy_ns, used)
            );
            let _ = writeln!(
                out,
                "  - sleep iterations:{:>12}  ({:5.1} % of iterations)",
                r.sleep_iterations,
                pct(r.sleep_iterations, r.iterations)
            );
            let avg_sleep = (r.sleep_ns / 1000).checked_div(r.sleep_iterations).unwrap_or(0);
            let _ = writeln!(out, "  Sleep time (us):    {:>12}  ({avg_sleep} us/iteration avg.)", r.sleep_ns / 1000);
            let cpp = cyc(r.busy_ns).checked_div(s.packets).unwrap_or(0);
            let _ = writeln!(
                out,
                "  Rx packets:         {:>12}  ({:.0} Kpps, {cpp} cycles/pkt)",
                s.packets,
                s.packets as f64 / secs / 1000.0
            );
            let _ = writeln!(out, "  Datapath passes:    {:>12}  (1.00 passes/pkt)", s.packets);
            let _ = writeln!(out, "  - PHWOL hits:       {:>12}  (  0.0 %)", 0);
            let _ = writeln!(out, "  - MFEX Opt hits:    {:>12}  (  0.0 %)", 0);
            let _ =
                writeln!(out, "  - Simple Match hits:{:>12}  ({:5.1} %)", s.simple_hits, pct(s.simple_hits, s.packets));
            let _ = writeln!(out, "  - EMC hits:         {:>12}  ({:5.1} %)", s.emc_hits, pct(s.emc_hits, s.packets));
            let _ = writeln!(out, "  - SMC hits:         {:>12}  (  0.0 %)", 0);
            let per_hit = if s.megaflow_hits == 0 { 0.0 } else { s.megaflow_probes as f64 / s.megaflow_hits as f64 };
            let _ = writeln!(
                out,
                "  - Megaflow hits:    {:>12}  ({:5.1} %, {per_hit:.2} subtbl lookups/hit)",
                s.megaflow_hits,
                pct(s.megaflow_hits, s.packets)
            );
            let us_up = if s.upcalls == 0 { 0.0 } else { s.upcall_ns as f64 / 1000.0 / s.upcalls as f64 };
            let _ = writeln!(
                out,
                "  - Upcalls:          {:>12}  ({:5.1} %, {us_up:.1} us/upcall)",
                s.upcalls,
                pct(s.upcalls, s.packets)
            );
            let lost = s.upcall_busy + s.upcall_lost_limit;
            let _ = writeln!(out, "  - Lost upcalls:     {:>12}  ({:5.1} %)", lost, pct(lost, s.packets));
            let _ = writeln!(
                out,
                "  Tx packets:         {:>12}  ({:.0} Kpps)",
                r.tx_packets,
                r.tx_packets as f64 / secs / 1000.0
            );
            let ppb = if r.tx_batches == 0 { 0.0 } else { r.tx_packets as f64 / r.tx_batches as f64 };
            let _ = writeln!(out, "  Tx batches:         {:>12}  ({ppb:.2} pkts/batch)", r.tx_batches);
            per_thread.push(json!({
                "bridge": b.shared.bridge, "id": r.id, "iterations": r.iterations,
                "busy_iterations": r.busy_iterations, "sleep_iterations": r.sleep_iterations,
                "packets": s.packets, "simple_hits": s.simple_hits, "emc_hits": s.emc_hits, "emc_gated_windows": s.emc_gated,
                "megaflow_hits": s.megaflow_hits, "megaflow_probes": s.megaflow_probes, "upcalls": s.upcalls, "upcall_ns": s.upcall_ns,
                "lost_upcalls": lost, "tx_packets": r.tx_packets, "tx_batches": r.tx_batches,
            }));
        }
    }
    Ok((out, json!({ "pmds": per_thread })))
}

/// `memory/show`: counts of what holds memory, as `key:value` pairs in
/// Open vSwitch's layout (`udpif keys` are datapath flows there too), and
/// the process's resident memory.
pub fn memory_show(ctx: &Ctx, args: &[String]) -> Reply {
    let _ = args;
    let (mut ports, mut rules, mut flows, mut masks, mut conns) = (0usize, 0usize, 0usize, 0usize, 0usize);
    let mut umem_frames = 0u64;
    // Bridges share their poll threads' UMEMs: each counted once.
    let mut seen: Vec<&crate::ports::UmemSlot> = Vec::new();
    for b in ctx.bridges {
        for u in &b.shared.umems {
            if seen.iter().any(|s| std::sync::Arc::ptr_eq(s, u)) {
                continue;
            }
            seen.push(u);
            umem_frames += u.lock().expect("umem").as_ref().map_or(0, |g| g.sizes().iter().map(|&n| n as u64).sum());
        }
        ports += b.shared.ports.read().expect("ports lock").len();
        let of = b.shared.ofproto.read().expect("ofproto lock");
        rules += of.n_rules();
        conns = conns.max(of.conntrack().n_conns());
        drop(of);
        for r in b.collect_reports(false) {
            flows += r.n_megaflows;
            masks += r.n_masks;
        }
    }
    let rss_kb = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:").map(|v| v.trim().trim_end_matches(" kB").trim().to_string()))
        })
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    let text = format!(
        "bridges:{} conntrack:{conns} megaflow-masks:{masks} ports:{ports} rss-kB:{rss_kb} rules:{rules} udpif keys:{flows} umem-kB:{}\n",
        ctx.bridges.len(),
        umem_frames * 4
    );
    Ok((
        text,
        json!({"bridges": ctx.bridges.len(), "conntrack": conns, "megaflow_masks": masks, "ports": ports,
               "rss_kb": rss_kb, "rules": rules, "megaflows": flows, "umem_kb": umem_frames * 4}),
    ))
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

/// `coverage/show`: one line per event, summed over every bridge and poll
/// thread, as OVS prints its (process-wide) coverage counters. Per-thread
/// figures are in `dpif-netdev/pmd-stats-show`.
pub fn coverage_show(ctx: &Ctx, args: &[String]) -> Reply {
    let _ = args;
    let mut totals: Vec<(&'static str, u64)> = Vec::new();
    let mut add = |k: &'static str, v: u64| match totals.iter_mut().find(|(n, _)| *n == k) {
        Some((_, t)) => *t += v,
        None => totals.push((k, v)),
    };
    for b in ctx.bridges {
        for r in b.collect_reports(false) {
            let s = &r.stats;
            for (k, v) in [
                ("datapath_packets", s.packets),
                ("datapath_simple_match_hit", s.simple_hits),
                ("datapath_emc_hit", s.emc_hits),
                ("datapath_megaflow_hit", s.megaflow_hits),
                ("datapath_upcall", s.upcalls),
                ("datapath_upcall_busy", s.upcall_busy),
                ("datapath_revalidated", s.revalidated),
                ("datapath_removed_stale", s.removed_stale),
                ("datapath_expired", s.expired),
                ("datapath_userspace_dropped", r.userspace_dropped),
                ("datapath_csum_partial", s.csum_partial),
            ] {
                add(k, v);
            }
            for (k, v) in s.drops_by_reason() {
                add(k, v);
            }
        }
    }
    let mut out = String::from("Event coverage (totals since start):\n");
    for (k, v) in totals {
        // Drop reasons that never happened stay out, as before.
        if v > 0 || !k.starts_with("drop") {
            let _ = writeln!(out, "{k:<32} total: {v}");
        }
    }
    Ok((out, json!({})))
}
