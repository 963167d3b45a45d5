//! Control commands: one table ([`COMMANDS`]) serves both control sockets,
//! `xvs.ctl` (the `xvs` CLI) and the ovs-appctl socket. Each command
//! returns human-readable text and the same facts as JSON (for `--json`);
//! commands that mirror an Open vSwitch one (`fdb/show`, `ofproto/trace`,
//! `dpctl/dump-flows`...) answer in its layout under both names.

use crate::config::PortSpec;
use crate::switch::Switch;
use anyhow::{anyhow, bail, Result};
use flow::Match;
use ofproto::{FlowModCmd, Need};
use serde_json::{json, Value};
use std::fmt::Write;
use std::sync::atomic::Ordering;

/// What a command runs against: the bridges of the process.
pub struct Ctx<'a> {
    pub bridges: &'a [&'a Switch],
    /// Configured from a database: ports and bridges come from there.
    pub db: bool,
}

impl<'a> Ctx<'a> {
    /// The bridge named `name`, or the first one.
    pub fn bridge_named(&self, name: Option<&String>) -> Result<&'a Switch> {
        match name {
            Some(n) => self
                .bridges
                .iter()
                .find(|b| &b.shared.bridge == n)
                .copied()
                .ok_or_else(|| anyhow!("no such bridge ({n})")),
            None => self.bridges.first().copied().ok_or_else(|| anyhow!("no bridges")),
        }
    }

    /// Commands that change ports or rules from the CLI act on one bridge:
    /// the only one, or the one named by a leading `--bridge=NAME`.
    fn target(&self, args: &[String]) -> Result<(&'a Switch, Vec<String>)> {
        match args.first().and_then(|a| a.strip_prefix("--bridge=")) {
            Some(n) => Ok((self.bridge_named(Some(&n.to_string()))?, args[1..].to_vec())),
            None if self.bridges.len() > 1 => bail!("several bridges: name one with --bridge=NAME"),
            None => Ok((self.bridge_named(None)?, args.to_vec())),
        }
    }
}

type Handler = fn(&Ctx, &[String]) -> Result<(String, Value)>;

/// One command: its names (the first is the `xvs` CLI's; OVS's name, if
/// it has one, is among them), a usage string and its handler.
pub struct Command {
    pub names: &'static [&'static str],
    pub usage: &'static str,
    pub run: Handler,
}

/// Every command both sockets answer (`exit` is the servers' own).
pub const COMMANDS: &[Command] = &[
    Command { names: &["list-commands"], usage: "", run: list_commands },
    Command { names: &["version"], usage: "", run: version },
    Command { names: &["show"], usage: "", run: show },
    Command { names: &["dpctl/show"], usage: "[DP]", run: dpctl_show },
    Command { names: &["dump-flows", "dpctl/dump-flows"], usage: "[DP] [--more]", run: dump_megaflows },
    Command { names: &["pmd-stats"], usage: "", run: pmd_stats },
    Command { names: &["dpif-netdev/pmd-stats-show"], usage: "", run: crate::appctl::pmd_stats_show },
    Command { names: &["dpif-netdev/pmd-rxq-show"], usage: "", run: crate::appctl::pmd_rxq_show },
    Command { names: &["dpif-netdev/pmd-perf-show"], usage: "", run: crate::appctl::pmd_perf_show },
    Command { names: &["memory/show"], usage: "", run: crate::appctl::memory_show },
    Command { names: &["coverage/show"], usage: "", run: crate::appctl::coverage_show },
    Command { names: &["dump-of-flows"], usage: "", run: dump_of_flows },
    Command { names: &["bridge/dump-flows"], usage: "BRIDGE", run: crate::appctl::bridge_dump_flows },
    Command { names: &["fdb-show", "fdb/show"], usage: "[BRIDGE]", run: fdb_show },
    Command { names: &["trace", "ofproto/trace"], usage: "[BRIDGE] FLOW", run: trace },
    Command { names: &["add-port"], usage: "[--bridge=NAME] SPEC", run: add_port },
    Command { names: &["del-port"], usage: "[--bridge=NAME] PORT", run: del_port },
    Command { names: &["add-flow", "add-flows"], usage: "[--bridge=NAME] FLOW...", run: add_flows },
    Command { names: &["del-flows"], usage: "[--bridge=NAME] [FLOW]", run: del_flows },
    Command {
        names: &["dump-conntrack", "dpctl/dump-conntrack"],
        usage: "[DP] [-m] [-s] [zone=N]",
        run: crate::ctcmd::dump,
    },
    Command {
        names: &["flush-conntrack", "dpctl/flush-conntrack"],
        usage: "[DP] [zone=N] [ct-orig-tuple]",
        run: crate::ctcmd::flush,
    },
    Command { names: &["ct-stats-show", "dpctl/ct-stats-show"], usage: "[DP] [zone=N]", run: crate::ctcmd::stats },
    Command { names: &["ct-get-maxconns", "dpctl/ct-get-maxconns"], usage: "[DP]", run: crate::ctcmd::get_maxconns },
    Command { names: &["ct-set-maxconns", "dpctl/ct-set-maxconns"], usage: "[DP] N", run: crate::ctcmd::set_maxconns },
    Command { names: &["ct-get-nconns", "dpctl/ct-get-nconns"], usage: "[DP]", run: crate::ctcmd::get_nconns },
    Command {
        names: &["ct-get-limits", "dpctl/ct-get-limits"],
        usage: "[DP] [zone=N[,N]...]",
        run: crate::ctcmd::get_limits,
    },
    Command {
        names: &["ct-set-limits", "dpctl/ct-set-limits"],
        usage: "[DP] [default=N] [zone=N,limit=M]...",
        run: crate::ctcmd::set_limits,
    },
    Command {
        names: &["ct-del-limits", "dpctl/ct-del-limits"],
        usage: "[DP] zone=N[,N]...",
        run: crate::ctcmd::del_limits,
    },
    Command { names: &["ipf-get-status", "dpctl/ipf-get-status"], usage: "[DP]", run: crate::ctcmd::ipf_status },
    Command {
        names: &["ipf-set-enabled", "dpctl/ipf-set-enabled"],
        usage: "[DP] v4|v6",
        run: crate::ctcmd::ipf_set_enabled,
    },
    Command {
        names: &["ipf-set-disabled", "dpctl/ipf-set-disabled"],
        usage: "[DP] v4|v6",
        run: crate::ctcmd::ipf_set_disabled,
    },
    Command {
        names: &["ipf-set-min-frag", "dpctl/ipf-set-min-frag"],
        usage: "[DP] v4|v6 MINFRAG",
        run: crate::ctcmd::ipf_set_min_frag,
    },
    Command {
        names: &["ipf-set-max-nfrags", "dpctl/ipf-set-max-nfrags"],
        usage: "[DP] MAXFRAGS",
        run: crate::ctcmd::ipf_set_max_nfrags,
    },
    Command { names: &["offload-show", "dpif-netdev/offload-show"], usage: "", run: crate::offload::show_cmd },
    Command { names: &["route-show", "ovs/route/show"], usage: "", run: crate::routes::show },
    Command { names: &["route-add", "ovs/route/add"], usage: "IP/PLEN DEV [GW] [src=IP]", run: crate::routes::add },
    Command { names: &["route-del", "ovs/route/del"], usage: "IP/PLEN", run: crate::routes::del },
    Command { names: &["route-lookup", "ovs/route/lookup"], usage: "IP", run: crate::routes::lookup },
    Command { names: &["tnl-ports", "tnl/ports/show"], usage: "", run: tnl_ports },
    Command { names: &["tnl-neigh", "tnl/neigh/show", "tnl/arp/show"], usage: "", run: tnl_neigh },
    Command { names: &["tnl-neigh-flush", "tnl/neigh/flush", "tnl/arp/flush"], usage: "", run: tnl_neigh_flush },
    Command { names: &["tnl-neigh-set", "tnl/neigh/set", "tnl/arp/set"], usage: "BRIDGE IP MAC", run: tnl_neigh_set },
    Command { names: &["vlog/set"], usage: "[SPEC]", run: crate::appctl::vlog },
    Command { names: &["vlog/list"], usage: "", run: crate::appctl::vlog },
];

fn tnl_env<'a>(ctx: &Ctx<'a>) -> Result<&'a crate::tnl::TnlEnv> {
    Ok(&ctx.bridge_named(None)?.shared.patches.tnl)
}

fn tnl_ports(ctx: &Ctx, _: &[String]) -> Result<(String, Value)> {
    let env = tnl_env(ctx)?;
    let drops: serde_json::Map<String, Value> =
        env.drops().into_iter().map(|(n, c)| (n.to_string(), c.into())).collect();
    Ok((crate::tnl::ports_show(env), serde_json::json!({ "drops": drops })))
}

fn tnl_neigh(ctx: &Ctx, _: &[String]) -> Result<(String, Value)> {
    Ok((crate::tnl::neigh_show(tnl_env(ctx)?), Value::Null))
}

fn tnl_neigh_flush(ctx: &Ctx, _: &[String]) -> Result<(String, Value)> {
    crate::tnl::neigh_flush(tnl_env(ctx)?);
    Ok(("OK\n".into(), Value::Null))
}

fn tnl_neigh_set(ctx: &Ctx, args: &[String]) -> Result<(String, Value)> {
    let [b, ip, mac] = args else { bail!("usage: tnl/neigh/set BRIDGE IP MAC") };
    crate::tnl::neigh_set(tnl_env(ctx)?, b, ip, mac).map_err(|e| anyhow!(e))?;
    Ok(("OK\n".into(), Value::Null))
}

/// Runs command `cmd` (any of its names) on a single bridge.
pub fn run(sw: &Switch, cmd: &str, args: &[String]) -> Result<(String, Value)> {
    run_in(&Ctx { bridges: &[sw], db: false }, cmd, args)
}

/// Runs command `cmd` (any of its names).
pub fn run_in(ctx: &Ctx, cmd: &str, args: &[String]) -> Result<(String, Value)> {
    match COMMANDS.iter().find(|c| c.names.contains(&cmd)) {
        Some(c) => (c.run)(ctx, args),
        None => bail!("\"{cmd}\" is not a valid command (use list-commands to see a list)"),
    }
}

fn list_commands(_: &Ctx, _: &[String]) -> Result<(String, Value)> {
    let mut out = String::from("The available commands are:\n");
    let mut names = Vec::new();
    for c in COMMANDS {
        for n in c.names {
            writeln!(out, "  {n:<28}{}", c.usage)?;
            names.push(*n);
        }
    }
    writeln!(out, "  {:<28}", "exit")?;
    names.push("exit");
    Ok((out, json!({"commands": names})))
}

fn version(_: &Ctx, _: &[String]) -> Result<(String, Value)> {
    let v = env!("CARGO_PKG_VERSION");
    Ok((format!("ovs-vswitchd (xvs) {v}\n"), json!({"version": v})))
}

fn add_port(ctx: &Ctx, args: &[String]) -> Result<(String, Value)> {
    if ctx.db {
        bail!("ports come from the database here: use ovs-vsctl add-port");
    }
    let (sw, args) = ctx.target(args)?;
    let spec = PortSpec::parse(args.first().map(String::as_str).unwrap_or(""))?;
    let n = sw.add_port(spec.clone())?;
    Ok((format!("added {} as port {n}\n", spec.name), json!({"name": spec.name, "ofport": n})))
}

fn del_port(ctx: &Ctx, args: &[String]) -> Result<(String, Value)> {
    if ctx.db {
        bail!("ports come from the database here: use ovs-vsctl del-port");
    }
    let (sw, args) = ctx.target(args)?;
    let name = args.first().ok_or_else(|| anyhow!("del-port needs a port name"))?;
    sw.del_port(name)?;
    Ok((format!("removed {name}\n"), json!({"name": name})))
}

fn add_flows(ctx: &Ctx, args: &[String]) -> Result<(String, Value)> {
    let (sw, args) = ctx.target(args)?;
    let mut mods = Vec::new();
    for a in &args {
        for line in a.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
            let spec = ofproto::parse_flow(line, Need::Actions).map_err(|e| anyhow!("syntax error at {e}"))?;
            mods.push((FlowModCmd::Add, spec));
        }
    }
    // Like ovs-ofctl add-flows without --bundle, flows are committed in
    // chunks, so the write lock is held for a few milliseconds at a time
    // and poll threads keep translating in between.
    let mut n = 0;
    for (c, chunk) in mods.chunks(1000).enumerate() {
        n += sw
            .shared
            .ofproto
            .write()
            .expect("ofproto lock")
            .flow_mod_batch(chunk)
            .map_err(|(i, e)| anyhow!("flow {}: {e}", c * 1000 + i + 1))?;
    }
    Ok((format!("{n} flows added\n"), json!({"added": n})))
}

fn del_flows(ctx: &Ctx, args: &[String]) -> Result<(String, Value)> {
    let (sw, args) = ctx.target(args)?;
    let s = args.first().map(String::as_str).unwrap_or("");
    let spec = ofproto::parse_flow(s, Need::NoActions).map_err(|e| anyhow!("syntax error at {e}"))?;
    let (n, _) = sw.shared.ofproto.delete_in_chunks(FlowModCmd::Delete, &spec, sw.shared.now_ms());
    sw.shared.ofproto.purge_in_chunks();
    Ok((format!("{n} flows deleted\n"), json!({"deleted": n})))
}

/// `flow` with `in_port=NAME` replaced by the port's number, for the
/// names in `ports`; numbers and reserved names (`LOCAL`) stay.
fn name_ports(flow: &str, ports: &[(String, u32)]) -> String {
    flow.split(',')
        .map(|tok| {
            let t = tok.trim();
            match t.strip_prefix("in_port=").and_then(|n| ports.iter().find(|(name, _)| name == n)) {
                Some((_, n)) => format!("in_port={n}"),
                None => t.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// `trace FLOW` or `ofproto/trace BRIDGE FLOW`, in ofproto/trace's layout.
fn trace(ctx: &Ctx, args: &[String]) -> Result<(String, Value)> {
    let (b, flow) = match args.len() {
        0 => bail!("ofproto/trace needs [BRIDGE] FLOW"),
        1 => (ctx.bridge_named(None)?, &args[0]),
        _ => (ctx.bridge_named(args.first())?, &args[1]),
    };
    // Ports may be named, as OVS's ofproto/trace allows (`in_port=vm1`).
    let names: Vec<(String, u32)> = b.ports().iter().map(|p| (p.spec.name.clone(), p.ofport)).collect();
    let flow = name_ports(flow, &names);
    let m = Match::parse(&flow).map_err(|e| anyhow!("syntax error at '{}': {}", e.token, e.reason))?;
    let of = b.shared.ofproto.read().expect("ofproto lock");
    let t = of.trace(&m.key);
    let mut out = String::new();
    writeln!(out, "Flow: {m}\n\nbridge(\"{}\")\n-------------", b.shared.bridge)?;
    for l in &t.lines {
        writeln!(out, " {l}")?;
    }
    writeln!(out, "\nFinal flow: {}", Match::exact_fields(&t.final_key))?;
    let megaflow = Match::new(m.key, t.translation.mask).to_string();
    writeln!(out, "Megaflow: {megaflow}")?;
    let acts = dpif::format_actions(&t.translation.actions);
    let acts = if acts.is_empty() { "drop".to_string() } else { acts };
    writeln!(out, "Datapath actions: {acts}")?;
    // Native tunneling happens in the ports: say what they will do.
    let ports = b.shared.ports.read().expect("ports lock").clone();
    let mut tnl = Vec::new();
    for a in &t.translation.actions {
        let dpif::DpAction::Output(n) = a else { continue };
        let Some(p) = ports.get(n) else { continue };
        let local = *n == ofproto::actions::ofpp::LOCAL;
        if p.spec.kind != crate::config::PortType::Tunnel && !local {
            continue;
        }
        let key = if local { &m.key } else { &t.final_key };
        if let Some(note) = crate::tnl::trace_note(&b.shared.patches.tnl, &b.shared.bridge, &p.spec.name, local, key) {
            writeln!(out, "  output {}: {note}", p.spec.name)?;
            tnl.push(note);
        }
    }
    Ok((out, json!({"bridge": b.shared.bridge, "megaflow": megaflow, "actions": acts, "tunnel": tnl})))
}

fn dpctl_show(ctx: &Ctx, _: &[String]) -> Result<(String, Value)> {
    let mut out = String::new();
    let mut v = Vec::new();
    for b in ctx.bridges {
        let reports = b.collect_reports(false);
        let (mut hit, mut missed, mut lost, mut flows, mut probes, mut masks) = (0, 0, 0, 0, 0, 0);
        for r in &reports {
            hit += r.stats.simple_hits + r.stats.emc_hits + r.stats.megaflow_hits;
            missed += r.stats.upcalls;
            lost += r.stats.upcall_busy;
            flows += r.n_megaflows;
            probes += r.stats.mask_probes;
            masks += r.n_masks;
        }
        writeln!(out, "netdev@{}:", b.shared.bridge)?;
        writeln!(out, "  lookups: hit:{hit} missed:{missed} lost:{lost}")?;
        writeln!(out, "  flows: {flows}")?;
        // The kernel datapath's line (OVS's netdev datapath leaves it out;
        // exporters read it): subtables searched, subtables now, and
        // searched per packet.
        let per_pkt = if hit + missed == 0 { 0.0 } else { probes as f64 / (hit + missed) as f64 };
        writeln!(out, "  masks: hit:{probes} total:{masks} hit/pkt:{per_pkt:.2}")?;
        for (p, s, info) in b.port_stats() {
            let mode = if info.xdp_mode.is_empty() { String::new() } else { format!(": xdp-mode={}", info.xdp_mode) };
            let n = if p.ofport == ofproto::actions::ofpp::LOCAL { 0 } else { p.ofport };
            writeln!(out, "  port {n}: {} ({}{mode})", p.spec.name, info.kind)?;
            writeln!(
                out,
                "    RX packets:{} errors:0 dropped:{}\n    TX packets:{} errors:0 dropped:{}\n    RX bytes:{}  TX bytes:{}",
                s.rx_packets, s.rx_dropped, s.tx_packets, s.tx_dropped, s.rx_bytes, s.tx_bytes
            )?;
        }
        v.push(json!({"bridge": b.shared.bridge, "hit": hit, "missed": missed, "lost": lost, "flows": flows,
                      "masks_hit": probes, "masks_total": masks}));
    }
    Ok((out, json!({"datapaths": v})))
}

fn show(ctx: &Ctx, _: &[String]) -> Result<(String, Value)> {
    let mut out = String::new();
    let mut v = Vec::new();
    for sw in ctx.bridges {
        let (text, j) = show_bridge(sw)?;
        out += &text;
        v.push(j);
    }
    // One bridge: the object itself (what scripts of the CLI read).
    let j = if v.len() == 1 { v.pop().expect("one") } else { json!({"bridges": v}) };
    Ok((out, j))
}

fn show_bridge(sw: &Switch) -> Result<(String, Value)> {
    let mut out = String::new();
    let mut ports = Vec::new();
    writeln!(out, "bridge {}:", sw.shared.bridge)?;
    let offload = sw.shared.offload.lock().expect("offload").clone().filter(|o| o.enabled());
    for (p, s, info) in sw.port_stats() {
        let info = &info;
        let mode = if info.xdp_mode.is_empty() { String::new() } else { format!(", xdp-mode {}", info.xdp_mode) };
        let detail = if info.detail.is_empty() { String::new() } else { format!(", {}", info.detail) };
        let link = p.link();
        let state = match (link.present, link.carrier) {
            (false, _) => ", DEVICE GONE (reattached when it returns)",
            (true, Some(false)) => ", link down",
            _ => "",
        };
        let fast = offload.as_ref().map(|o| o.port_state(p.ofport));
        let fast_text = fast.map(|f| format!(", fast-path {f}")).unwrap_or_default();
        writeln!(
            out,
            "  port {} {}: type {}{mode}, rxq {}, pmd {}{detail}{state}{fast_text}",
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
            "present": link.present, "carrier": link.carrier, "fast_path": fast,
            "rx_packets": s.rx_packets, "rx_bytes": s.rx_bytes, "rx_dropped": s.rx_dropped,
            "tx_packets": s.tx_packets, "tx_bytes": s.tx_bytes, "tx_dropped": s.tx_dropped,
        }));
    }
    Ok((out, json!({"bridge": sw.shared.bridge, "ports": ports})))
}

fn dump_megaflows(ctx: &Ctx, _: &[String]) -> Result<(String, Value)> {
    let mut out = String::new();
    let mut flows = Vec::new();
    for sw in ctx.bridges {
        let now = sw.shared.now_ms();
        for r in sw.collect_reports(true) {
            for f in &r.megaflows {
                writeln!(out, "{}", format_megaflow(f, now))?;
                let acts = dpif::format_actions(&f.actions);
                flows.push(json!({"bridge": sw.shared.bridge, "pmd": r.id, "match": f.matched.to_string(), "packets": f.packets, "bytes": f.bytes, "actions": acts}));
            }
        }
        // What the XDP program forwards itself, marked as OVS marks flows
        // a kernel or NIC serves (its counts were credited to the rules).
        let off = sw.shared.offload.lock().expect("offload").clone().filter(|o| o.enabled());
        for (m, actions, packets, bytes, used_ms) in off.map(|o| o.flows()).unwrap_or_default() {
            let used = used_text(packets, used_ms, now);
            let acts = dpif::format_actions(&actions);
            writeln!(out, "{m}, packets:{packets}, bytes:{bytes}, used:{used}, offloaded:yes, dp:xdp, actions:{acts}")?;
            flows.push(json!({"bridge": sw.shared.bridge, "offloaded": true, "match": m.to_string(), "packets": packets, "bytes": bytes, "actions": acts}));
        }
    }
    Ok((out, json!({"megaflows": flows})))
}

/// A flow's `used:` field: how long ago it last forwarded, or "never".
fn used_text(packets: u64, used_ms: u64, now_ms: u64) -> String {
    if packets == 0 {
        "never".into()
    } else {
        format!("{:.3}s", now_ms.saturating_sub(used_ms) as f64 / 1000.0)
    }
}

/// One megaflow as `dpctl/dump-flows` prints it.
pub fn format_megaflow(f: &dpif::MegaflowInfo, now_ms: u64) -> String {
    let used = used_text(f.packets, f.used_ms, now_ms);
    let acts = dpif::format_actions(&f.actions);
    let acts = if acts.is_empty() { "drop".to_string() } else { acts };
    format!("{}, packets:{}, bytes:{}, used:{used}, actions:{acts}", f.matched, f.packets, f.bytes)
}

fn pmd_stats(ctx: &Ctx, _: &[String]) -> Result<(String, Value)> {
    let mut out = String::new();
    let mut pmds = Vec::new();
    let mhz = crate::cpu_mhz();
    let mut no_port = 0;
    for sw in ctx.bridges {
        no_port += sw.ports().iter().map(|p| p.tx_no_port.load(Ordering::Relaxed)).sum::<u64>();
        for r in sw.collect_reports(false) {
            let s = &r.stats;
            let pkts = s.packets.max(1);
            let ns_per_pkt = r.busy_ns as f64 / pkts as f64;
            let total = (r.busy_ns + r.idle_ns).max(1);
            writeln!(out, "pmd thread {}:", r.id)?;
            writeln!(
                out,
                "  rx queues: {}",
                r.rxqs.iter().map(|(n, q)| format!("{n}:{q}")).collect::<Vec<_>>().join(" ")
            )?;
            writeln!(out, "  packets received: {}", s.packets)?;
            writeln!(out, "  port hint hits: {} (forwarded without a lookup: {})", s.simple_hits, s.quick_outputs)?;
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
            writeln!(out, "  partial TCP/UDP checksums received: {}", s.csum_partial)?;
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
            "id": r.id, "packets": s.packets, "simple_hits": s.simple_hits, "quick_outputs": s.quick_outputs, "emc_hits": s.emc_hits,
            "megaflow_hits": s.megaflow_hits, "upcalls": s.upcalls, "upcall_lost_limit": s.upcall_lost_limit, "upcall_busy": s.upcall_busy,
            "upcall_deferred": s.upcall_deferred,
            "revalidated": s.revalidated, "removed_stale": s.removed_stale, "expired": s.expired, "megaflows": r.n_megaflows,
            "busy_ns": r.busy_ns, "idle_ns": r.idle_ns, "ns_per_packet": ns_per_pkt,
            "iterations": r.iterations, "busy_iterations": r.busy_iterations,
            "cycles_per_packet": ns_per_pkt * mhz / 1000.0,
            "drops": s.drops_by_reason().into_iter().map(|(k, n)| (k.to_string(), json!(n))).collect::<serde_json::Map<_, _>>(),
            "userspace_dropped": r.userspace_dropped,
            "rxqs": r.rxqs.iter().map(|(n, q)| format!("{n}:{q}")).collect::<Vec<_>>(),
            "bridge": sw.shared.bridge,
        }));
        }
    }
    if no_port > 0 {
        writeln!(out, "dropped at removed ports: {no_port}")?;
    }
    Ok((out, json!({"pmds": pmds})))
}

fn dump_of_flows(ctx: &Ctx, args: &[String]) -> Result<(String, Value)> {
    let (sw, _) = ctx.target(args)?;
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

/// The MAC table in fdb/show's layout (`LOCAL` for the bridge's port).
fn fdb_show(ctx: &Ctx, args: &[String]) -> Result<(String, Value)> {
    let b = ctx.bridge_named(args.first())?;
    let of = b.shared.ofproto.read().expect("ofproto lock");
    let mut out = String::from(" port  VLAN  MAC                Age\n");
    let mut v = Vec::new();
    for (mac, vlan, port, age) in of.mac_table().dump(of.now()) {
        let p = if port == ofproto::actions::ofpp::LOCAL { "LOCAL".to_string() } else { port.to_string() };
        writeln!(out, "{p:>5}  {vlan:4}  {}  {age:3}", flow::key::fmt_mac(mac))?;
        v.push(json!({"port": port, "vlan": vlan, "mac": flow::key::fmt_mac(mac), "age": age}));
    }
    Ok((out, json!({"fdb": v})))
}

#[cfg(test)]
mod tests {
    #[test]
    fn trace_flows_may_name_ports() {
        let ports = [("vm".to_string(), 2), ("tun0".to_string(), 7)];
        assert_eq!(super::name_ports("in_port=vm,icmp", &ports), "in_port=2,icmp");
        assert_eq!(super::name_ports("ip, in_port=tun0", &ports), "ip,in_port=7");
        assert_eq!(super::name_ports("in_port=3,tcp", &ports), "in_port=3,tcp");
        assert_eq!(super::name_ports("in_port=LOCAL", &ports), "in_port=LOCAL");
    }
}
