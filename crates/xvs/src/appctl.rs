//! The ovs-appctl control socket: the JSON-RPC that `ovs-appctl` speaks
//! (a request `{"id", "method", "params": [strings]}`, a reply `{"id",
//! "result": text, "error": null}` or `{"id", "result": null, "error":
//! text}`), served at `<run-dir>/ovs-vswitchd.<pid>.ctl` with the pid in
//! `<run-dir>/ovs-vswitchd.pid`, where ovs-appctl looks for the switch
//! daemon. So `OVS_RUNDIR=<run-dir> ovs-appctl dpctl/show` works, and
//! `ovs-appctl -t <run-dir>/ovs-vswitchd.<pid>.ctl ...` too.
//!
//! Commands answer with text laid out like Open vSwitch's, so scripts
//! and eyes trained on OVS read them unchanged.

use crate::switch::Switch;
use anyhow::{Context, Result};
use flow::Match;
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::io::Write;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The commands `list-commands` prints (name, usage).
const COMMANDS: &[(&str, &str)] = &[
    ("list-commands", ""),
    ("version", ""),
    ("exit", ""),
    ("vlog/set", "[SPEC]"),
    ("vlog/list", ""),
    ("dpctl/show", "[DP]"),
    ("dpctl/dump-flows", "[DP] [--more]"),
    ("ofproto/trace", "BRIDGE FLOW"),
    ("fdb/show", "BRIDGE"),
    ("dpif-netdev/pmd-stats-show", ""),
    ("dpif-netdev/pmd-rxq-show", ""),
    ("coverage/show", ""),
    ("bridge/dump-flows", "BRIDGE"),
];

pub struct AppctlSocket {
    pub listener: UnixListener,
    pub path: PathBuf,
    pub pidfile: PathBuf,
    _pidfile_lock: std::fs::File,
}

impl AppctlSocket {
    /// Binds the socket and writes the pidfile.
    pub fn bind(run_dir: &Path) -> Result<AppctlSocket> {
        std::fs::create_dir_all(run_dir)?;
        let pid = std::process::id();
        let path = run_dir.join(format!("ovs-vswitchd.{pid}.ctl"));
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path).with_context(|| format!("binding {}", path.display()))?;
        listener.set_nonblocking(true)?;
        let pidfile = run_dir.join("ovs-vswitchd.pid");
        let mut f = std::fs::File::create(&pidfile).with_context(|| format!("writing {}", pidfile.display()))?;
        f.write_all(format!("{pid}\n").as_bytes())?;
        // ovs-appctl trusts a pidfile only while its owner holds a lock on it.
        use std::os::fd::AsRawFd;
        netdev_linux::sys::lock_file(f.as_raw_fd()).with_context(|| format!("locking {}", pidfile.display()))?;
        Ok(AppctlSocket { listener, path, pidfile, _pidfile_lock: f })
    }

    /// Serves the connections waiting now; returns true if `exit` was asked.
    pub fn poll(&self, bridges: &[&Switch]) -> bool {
        let mut exit = false;
        while let Ok((s, _)) = self.listener.accept() {
            exit |= serve_conn(bridges, s);
        }
        exit
    }
}

impl Drop for AppctlSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        let _ = std::fs::remove_file(&self.pidfile);
    }
}

/// Answers requests on one connection until it closes. Malformed JSON
/// gets an error reply (when an id can be found) and closes the connection.
fn serve_conn(bridges: &[&Switch], s: UnixStream) -> bool {
    let _ = s.set_nonblocking(false);
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let Ok(mut w) = s.try_clone() else { return false };
    let mut exit = false;
    for v in serde_json::Deserializer::from_reader(s).into_iter::<Value>() {
        let Ok(v) = v else { break };
        let id = v.get("id").cloned().unwrap_or(Value::Null);
        let method = v.get("method").and_then(Value::as_str).unwrap_or("");
        let params: Vec<String> = match v.get("params").and_then(Value::as_array) {
            Some(a) => a.iter().map(|x| x.as_str().map(str::to_string).unwrap_or_else(|| x.to_string())).collect(),
            None => Vec::new(),
        };
        if method == "echo" {
            let _ = w.write_all(json!({"id": id, "result": params, "error": null}).to_string().as_bytes());
            continue;
        }
        let reply = match run(bridges, method, &params) {
            Ok(text) => json!({"id": id, "result": text, "error": null}),
            Err(e) => json!({"id": id, "result": null, "error": e}),
        };
        let _ = w.write_all(reply.to_string().as_bytes());
        if method == "exit" {
            exit = true;
        }
    }
    exit
}

fn bridge<'a>(bridges: &[&'a Switch], name: Option<&String>) -> Result<&'a Switch, String> {
    match name {
        Some(n) => {
            bridges.iter().find(|b| &b.shared.bridge == n).copied().ok_or_else(|| format!("no such bridge ({n})"))
        }
        None => bridges.first().copied().ok_or_else(|| "no bridges".to_string()),
    }
}

/// Runs one command; `Err` is the error text ovs-appctl prints (exit 2).
pub fn run(bridges: &[&Switch], method: &str, args: &[String]) -> Result<String, String> {
    let mut out = String::new();
    match method {
        "list-commands" => {
            out.push_str("The available commands are:\n");
            for (c, u) in COMMANDS {
                let _ = writeln!(out, "  {c:<28}{u}");
            }
        }
        "version" => {
            let _ = writeln!(out, "ovs-vswitchd (xvs) {}", env!("CARGO_PKG_VERSION"));
        }
        "exit" => {}
        "vlog/set" | "vlog/list" => {
            // xvs logs to stderr only; accept the request so scripts keep working.
            if method == "vlog/list" {
                out.push_str("                 console    syslog    file\n");
                out.push_str("                 -------    ------    ------\n");
                out.push_str("xvs                 INFO       OFF       OFF\n");
            }
        }
        "dpctl/show" => {
            for b in bridges {
                let reports = b.collect_reports(false);
                let (mut hit, mut missed, mut lost, mut flows) = (0, 0, 0, 0);
                for r in &reports {
                    hit += r.stats.emc_hits + r.stats.megaflow_hits;
                    missed += r.stats.upcalls;
                    lost += r.stats.upcall_busy;
                    flows += r.n_megaflows;
                }
                let _ = writeln!(out, "netdev@{}:", b.shared.bridge);
                let _ = writeln!(out, "  lookups: hit:{hit} missed:{missed} lost:{lost}");
                let _ = writeln!(out, "  flows: {flows}");
                for (p, s, info) in b.port_stats() {
                    let mode =
                        if info.xdp_mode.is_empty() { String::new() } else { format!(": xdp-mode={}", info.xdp_mode) };
                    let n = if p.ofport == ofproto::actions::ofpp::LOCAL { 0 } else { p.ofport };
                    let _ = writeln!(out, "  port {n}: {} ({}{mode})", p.spec.name, info.kind);
                    let _ = writeln!(
                        out,
                        "    RX packets:{} errors:0 dropped:{}\n    TX packets:{} errors:0 dropped:{}\n    RX bytes:{}  TX bytes:{}",
                        s.rx_packets, s.rx_dropped, s.tx_packets, s.tx_dropped, s.rx_bytes, s.tx_bytes
                    );
                }
            }
        }
        "dpctl/dump-flows" => {
            for b in bridges {
                let now = b.shared.now_ms();
                for r in b.collect_reports(true) {
                    for f in &r.megaflows {
                        let _ = writeln!(out, "{}", crate::commands::format_megaflow(f, now));
                    }
                }
            }
        }
        "ofproto/trace" => {
            let (b, flow) = match args.len() {
                0 => return Err("ofproto/trace needs BRIDGE FLOW".into()),
                1 => (bridge(bridges, None)?, &args[0]),
                _ => (bridge(bridges, args.first())?, &args[1]),
            };
            let m = Match::parse(flow).map_err(|e| format!("{}: {}", e.token, e.reason))?;
            let of = b.shared.ofproto.read().expect("ofproto lock");
            let t = of.trace(&m.key);
            let _ = writeln!(out, "Flow: {m}\n\nbridge(\"{}\")\n-------------", b.shared.bridge);
            for l in &t.lines {
                let _ = writeln!(out, " {l}");
            }
            let _ = writeln!(out, "\nFinal flow: {}", Match::exact_fields(&t.final_key));
            let _ = writeln!(out, "Megaflow: {}", Match::new(m.key, t.translation.mask));
            let acts = dpif::format_actions(&t.translation.actions);
            let _ = writeln!(out, "Datapath actions: {}", if acts.is_empty() { "drop" } else { &acts });
        }
        "fdb/show" => {
            let b = bridge(bridges, args.first())?;
            let of = b.shared.ofproto.read().expect("ofproto lock");
            out.push_str(" port  VLAN  MAC                Age\n");
            for (mac, vlan, port, age) in of.mac_table().dump(of.now()) {
                let p = if port == ofproto::actions::ofpp::LOCAL { "LOCAL".to_string() } else { port.to_string() };
                let _ = writeln!(out, "{p:>5}  {vlan:4}  {}  {age:3}", flow::key::fmt_mac(mac));
            }
        }
        "bridge/dump-flows" => {
            let b = bridge(bridges, args.first())?;
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
        }
        "dpif-netdev/pmd-stats-show" => {
            let mhz = crate::cpu_mhz();
            for b in bridges {
                for r in b.collect_reports(false) {
                    let s = &r.stats;
                    let total = (r.busy_ns + r.idle_ns).max(1);
                    let cyc = |ns: u64| (ns as f64 * mhz / 1000.0) as u64;
                    let pk = s.packets.max(1) as f64;
                    let _ = writeln!(out, "pmd thread numa_id 0 core_id {} ({}):", r.id, b.shared.bridge);
                    let _ = writeln!(out, "  packets received: {}", s.packets);
                    let _ = writeln!(out, "  packet recirculations: 0");
                    let _ = writeln!(out, "  avg. datapath passes per packet: 1.00");
                    let _ = writeln!(out, "  emc hits: {}", s.emc_hits);
                    let _ = writeln!(out, "  smc hits: 0");
                    let _ = writeln!(out, "  megaflow hits: {}", s.megaflow_hits);
                    let _ = writeln!(out, "  miss with success upcall: {}", s.upcalls);
                    let _ = writeln!(out, "  miss with failed upcall: {}", s.upcall_busy);
                    let _ = writeln!(
                        out,
                        "  idle cycles: {} ({:.2}%)",
                        cyc(r.idle_ns),
                        100.0 * r.idle_ns as f64 / total as f64
                    );
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
        }
        "dpif-netdev/pmd-rxq-show" => {
            for b in bridges {
                for r in b.collect_reports(false) {
                    let _ = writeln!(out, "pmd thread numa_id 0 core_id {} ({}):", r.id, b.shared.bridge);
                    let _ = writeln!(out, "  isolated : false");
                    for (port, q) in &r.rxqs {
                        let _ = writeln!(out, "  port: {port:<16}  queue-id: {q:2} (enabled)   pmd usage: NOT AVAIL");
                    }
                }
            }
        }
        "coverage/show" => {
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
        }
        _ => return Err(format!("\"{method}\" is not a valid command (use list-commands to see a list)")),
    }
    Ok(out)
}
