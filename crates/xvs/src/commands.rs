//! Control commands: each returns human-readable text and the same facts
//! as JSON (for `--json`).

use crate::config::PortSpec;
use crate::switch::Switch;
use anyhow::{bail, Result};
use flow::Match;
use ofproto::{FlowModCmd, Need};
use serde_json::{json, Value};
use std::fmt::Write;
use std::sync::atomic::Ordering;

pub fn run(sw: &Switch, cmd: &str, args: &[String]) -> Result<(String, Value)> {
    match cmd {
        "show" => show(sw),
        "dump-flows" => dump_megaflows(sw),
        "pmd-stats" => pmd_stats(sw),
        "add-port" => {
            let spec = PortSpec::parse(args.first().map(String::as_str).unwrap_or(""))?;
            let n = sw.add_port(spec.clone())?;
            Ok((format!("added {} as port {n}\n", spec.name), json!({"name": spec.name, "ofport": n})))
        }
        "del-port" => {
            let name = args.first().ok_or_else(|| anyhow::anyhow!("del-port needs a port name"))?;
            sw.del_port(name)?;
            Ok((format!("removed {name}\n"), json!({"name": name})))
        }
        "add-flow" | "add-flows" => {
            let mut mods = Vec::new();
            for a in args {
                for line in a.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
                    let spec = ofproto::parse_flow(line, Need::Actions)
                        .map_err(|e| anyhow::anyhow!("syntax error at {e}"))?;
                    mods.push((FlowModCmd::Add, spec));
                }
            }
            // Like ovs-ofctl add-flows without --bundle, flows are committed
            // in chunks, so the write lock is held for a few milliseconds
            // at a time and poll threads keep translating in between.
            let mut n = 0;
            for (c, chunk) in mods.chunks(1000).enumerate() {
                n += sw
                    .shared
                    .ofproto
                    .write()
                    .expect("ofproto lock")
                    .flow_mod_batch(chunk)
                    .map_err(|(i, e)| anyhow::anyhow!("flow {}: {e}", c * 1000 + i + 1))?;
            }
            Ok((format!("{n} flows added\n"), json!({"added": n})))
        }
        "del-flows" => {
            let s = args.first().map(String::as_str).unwrap_or("");
            let spec = ofproto::parse_flow(s, Need::NoActions).map_err(|e| anyhow::anyhow!("syntax error at {e}"))?;
            let n = sw.shared.ofproto.write().expect("ofproto lock").flow_mod(FlowModCmd::Delete, &spec)?;
            Ok((format!("{n} flows deleted\n"), json!({"deleted": n})))
        }
        "dump-of-flows" => dump_of_flows(sw),
        "fdb-show" => fdb_show(sw),
        "trace" => {
            let s = args.first().map(String::as_str).unwrap_or("");
            let m = Match::parse(s).map_err(|e| anyhow::anyhow!("syntax error at '{}': {}", e.token, e.reason))?;
            let of = sw.shared.ofproto.read().expect("ofproto lock");
            let t = of.trace(&m.key);
            let mut out = String::new();
            for l in &t.lines {
                writeln!(out, " {l}")?;
            }
            writeln!(out, "Megaflow: {}", Match::new(m.key, t.translation.mask))?;
            writeln!(out, "Datapath actions: {}", dpif::format_actions(&t.translation.actions))?;
            Ok((out, json!({})))
        }
        _ => bail!("unknown command '{cmd}' (show, dump-flows, pmd-stats, add-port, del-port, add-flow, del-flows, dump-of-flows, fdb-show, trace, exit)"),
    }
}

fn show(sw: &Switch) -> Result<(String, Value)> {
    let mut out = String::new();
    let mut ports = Vec::new();
    writeln!(out, "bridge {}:", sw.shared.bridge)?;
    for (p, s, info) in sw.port_stats() {
        let info = &info;
        let mode = if info.xdp_mode.is_empty() { String::new() } else { format!(", xdp-mode {}", info.xdp_mode) };
        let detail = if info.detail.is_empty() { String::new() } else { format!(", {}", info.detail) };
        writeln!(
            out,
            "  port {} {}: type {}{mode}, rxq {}, pmd {}{detail}",
            p.ofport, p.spec.name, info.kind, info.n_rxq, p.pmd
        )?;
        writeln!(
            out,
            "    rx {} pkts {} bytes, drop {} | tx {} pkts {} bytes, drop {}",
            s.rx_packets, s.rx_bytes, s.rx_dropped, s.tx_packets, s.tx_bytes, s.tx_dropped
        )?;
        ports.push(json!({
            "ofport": p.ofport, "name": p.spec.name, "type": info.kind, "xdp_mode": info.xdp_mode,
            "n_rxq": info.n_rxq, "pmd": p.pmd, "detail": info.detail,
            "rx_packets": s.rx_packets, "rx_bytes": s.rx_bytes, "rx_dropped": s.rx_dropped,
            "tx_packets": s.tx_packets, "tx_bytes": s.tx_bytes, "tx_dropped": s.tx_dropped,
        }));
    }
    Ok((out, json!({"bridge": sw.shared.bridge, "ports": ports})))
}

fn dump_megaflows(sw: &Switch) -> Result<(String, Value)> {
    let mut out = String::new();
    let mut flows = Vec::new();
    let now = sw.shared.now_ms();
    for r in sw.collect_reports(true) {
        for f in &r.megaflows {
            writeln!(out, "{}", format_megaflow(f, now))?;
            let acts = dpif::format_actions(&f.actions);
            flows.push(json!({"pmd": r.id, "match": f.matched.to_string(), "packets": f.packets, "bytes": f.bytes, "actions": acts}));
        }
    }
    Ok((out, json!({"megaflows": flows})))
}

/// One megaflow as `dpctl/dump-flows` prints it.
pub fn format_megaflow(f: &dpif::MegaflowInfo, now_ms: u64) -> String {
    let used = if f.packets == 0 {
        "never".into()
    } else {
        format!("{:.3}s", now_ms.saturating_sub(f.used_ms) as f64 / 1000.0)
    };
    let acts = dpif::format_actions(&f.actions);
    let acts = if acts.is_empty() { "drop".to_string() } else { acts };
    format!("{}, packets:{}, bytes:{}, used:{used}, actions:{acts}", f.matched, f.packets, f.bytes)
}

fn pmd_stats(sw: &Switch) -> Result<(String, Value)> {
    let mut out = String::new();
    let mut pmds = Vec::new();
    let mhz = crate::cpu_mhz();
    for r in sw.collect_reports(false) {
        let s = &r.stats;
        let pkts = s.packets.max(1);
        let ns_per_pkt = r.busy_ns as f64 / pkts as f64;
        let total = (r.busy_ns + r.idle_ns).max(1);
        writeln!(out, "pmd thread {}:", r.id)?;
        writeln!(out, "  rx queues: {}", r.rxqs.iter().map(|(n, q)| format!("{n}:{q}")).collect::<Vec<_>>().join(" "))?;
        writeln!(out, "  packets received: {}", s.packets)?;
        writeln!(out, "  emc hits: {}", s.emc_hits)?;
        writeln!(out, "  megaflow hits: {}", s.megaflow_hits)?;
        writeln!(
            out,
            "  upcalls: {} (not cached, megaflow limit: {}; parked while a rule change held the slow path: {}; dropped, parking queue full: {})",
            s.upcalls, s.upcall_lost_limit, s.upcall_deferred, s.upcall_busy
        )?;
        writeln!(
            out,
            "  megaflows revalidated: {} kept, {} removed; expired: {}",
            s.revalidated, s.removed_stale, s.expired
        )?;
        writeln!(out, "  megaflows: {}", r.n_megaflows)?;
        let drops: Vec<String> =
            s.drops_by_reason().into_iter().filter(|(_, n)| *n > 0).map(|(k, n)| format!("{k}={n}")).collect();
        writeln!(out, "  drops: {}", if drops.is_empty() { "none".into() } else { drops.join(" ") })?;
        writeln!(out, "  to controller (none connected, dropped): {}", r.userspace_dropped)?;
        writeln!(
            out,
            "  busy: {:.1}% of {:.2}s; {:.0} ns ({:.0} cycles at {:.0} MHz) per packet",
            100.0 * r.busy_ns as f64 / total as f64,
            total as f64 / 1e9,
            ns_per_pkt,
            ns_per_pkt * mhz / 1000.0,
            mhz
        )?;
        writeln!(
            out,
            "  iterations: {} ({} moved packets, {:.1} packets each)",
            r.iterations,
            r.busy_iterations,
            s.packets as f64 / r.busy_iterations.max(1) as f64
        )?;
        pmds.push(json!({
            "id": r.id, "packets": s.packets, "emc_hits": s.emc_hits, "megaflow_hits": s.megaflow_hits,
            "upcalls": s.upcalls, "upcall_lost_limit": s.upcall_lost_limit, "upcall_busy": s.upcall_busy,
            "upcall_deferred": s.upcall_deferred,
            "revalidated": s.revalidated, "removed_stale": s.removed_stale, "expired": s.expired, "megaflows": r.n_megaflows,
            "busy_ns": r.busy_ns, "idle_ns": r.idle_ns, "ns_per_packet": ns_per_pkt,
            "iterations": r.iterations, "busy_iterations": r.busy_iterations,
            "cycles_per_packet": ns_per_pkt * mhz / 1000.0,
            "drops": s.drops_by_reason().into_iter().map(|(k, n)| (k.to_string(), json!(n))).collect::<serde_json::Map<_, _>>(),
            "userspace_dropped": r.userspace_dropped,
            "rxqs": r.rxqs.iter().map(|(n, q)| format!("{n}:{q}")).collect::<Vec<_>>(),
        }));
    }
    let no_port: u64 = sw.ports().iter().map(|p| p.tx_no_port.load(Ordering::Relaxed)).sum();
    if no_port > 0 {
        writeln!(out, "dropped at removed ports: {no_port}")?;
    }
    Ok((out, json!({"pmds": pmds})))
}

fn dump_of_flows(sw: &Switch) -> Result<(String, Value)> {
    sw.shared.sync_stats();
    let of = sw.shared.ofproto.read().expect("ofproto lock");
    let now = of.now();
    let mut out = String::new();
    let mut flows = Vec::new();
    for (t, m, prio, r) in of.rules() {
        let ms = m.to_string();
        let sep = if ms.is_empty() { "" } else { "," };
        let pk = r.packets();
        let by = r.bytes();
        let dur = now.saturating_sub(r.created_ms) as f64 / 1000.0;
        let acts = ofproto::actions::format_instructions(&r.instructions);
        writeln!(out, " cookie={:#x}, duration={dur:.3}s, table={t}, n_packets={pk}, n_bytes={by}, priority={prio}{sep}{ms} actions={acts}", r.cookie)?;
        flows.push(json!({"table": t, "priority": prio, "match": ms, "actions": acts, "n_packets": pk}));
    }
    Ok((out, json!({"flows": flows})))
}

fn fdb_show(sw: &Switch) -> Result<(String, Value)> {
    let of = sw.shared.ofproto.read().expect("ofproto lock");
    let mut out = String::from(" port  VLAN  MAC                Age\n");
    let mut v = Vec::new();
    for (mac, vlan, port, age) in of.mac_table().dump(of.now()) {
        writeln!(out, "{port:5}  {vlan:4}  {}  {age:3}", flow::key::fmt_mac(mac))?;
        v.push(json!({"port": port, "vlan": vlan, "mac": flow::key::fmt_mac(mac), "age": age}));
    }
    Ok((out, json!({"fdb": v})))
}
