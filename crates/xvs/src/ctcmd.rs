//! Connection-tracking commands, named and shaped as Open vSwitch's
//! `ovs-appctl dpctl/*-conntrack` and `dpctl/ct-*` commands, so operators'
//! habits and scripts work unchanged (each also answers `--json`).
//!
//! A bridge's `ct()` actions run the tracker its OpenFlow layer holds; the
//! commands take the datapath (bridge) as an optional first argument, as
//! `dpctl` commands take a datapath name.

use crate::commands::Ctx;
use anyhow::{anyhow, bail, Result};
use conntrack::{format, tcp, ConnInfo, Conntrack};
use serde_json::{json, Value};
use std::fmt::Write;
use std::sync::Arc;

/// The tracker of the bridge named by a leading non-option argument that
/// names a bridge (or of the first bridge), and the remaining arguments.
fn tracker<'a>(ctx: &Ctx, args: &'a [String]) -> Result<(Arc<Conntrack>, &'a [String])> {
    let named = args
        .first()
        .filter(|a| ctx.bridges.iter().any(|b| &b.shared.bridge == *a || format!("netdev@{}", b.shared.bridge) == **a));
    let (name, rest) = match named {
        Some(n) => (Some(n.trim_start_matches("netdev@").to_string()), &args[1..]),
        None => (None, args),
    };
    let b = ctx.bridge_named(name.as_ref())?;
    let ct = Arc::clone(b.shared.ofproto.read().expect("ofproto lock").conntrack());
    Ok((ct, rest))
}

fn now_ms(ctx: &Ctx) -> u64 {
    ctx.bridges.first().map_or(0, |b| b.shared.ofproto.read().expect("ofproto lock").now())
}

fn zone_arg(a: &str) -> Result<Option<u16>> {
    match a.strip_prefix("zone=") {
        Some(z) => Ok(Some(z.parse().map_err(|_| anyhow!("zone: '{z}' is not a number 0-65535"))?)),
        None => Ok(None),
    }
}

fn info_json(c: &ConnInfo) -> Value {
    let t = |t: &conntrack::Tuple| json!({"src": format::addr(t.src, t.v6), "dst": format::addr(t.dst, t.v6), "sport": t.sport, "dport": t.dport, "proto": t.proto});
    json!({
        "zone": c.zone, "orig": t(&c.orig), "reply": t(&c.reply), "mark": c.mark, "labels": format!("{:#x}", c.label),
        "tcp_state": c.tcp.map(|(a, b)| [tcp::st::name(a), tcp::st::name(b)]),
        "packets": c.packets, "bytes": c.bytes,
    })
}

/// `dpctl/dump-conntrack [DP] [-m] [-s] [zone=N]`
pub fn dump(ctx: &Ctx, args: &[String]) -> Result<(String, Value)> {
    let (ct, rest) = tracker(ctx, args)?;
    let mut zone = None;
    let mut stats = false;
    for a in rest {
        match a.as_str() {
            "-m" | "--more" => {}
            "-s" | "--statistics" => stats = true,
            other => zone = Some(zone_arg(other)?.ok_or_else(|| anyhow!("unknown argument '{other}'"))?),
        }
    }
    let now = now_ms(ctx);
    let conns = ct.connections(zone);
    let mut out = String::new();
    for c in &conns {
        writeln!(out, "{}", format::entry(c, stats, now))?;
    }
    Ok((out, json!({"connections": conns.iter().map(info_json).collect::<Vec<_>>()})))
}

/// `dpctl/flush-conntrack [DP] [zone=N] [ORIG-TUPLE]`, the tuple as OVS
/// writes it: `ct_nw_src=A,ct_nw_dst=B,ct_nw_proto=P,ct_tp_src=S,ct_tp_dst=D`
/// (or `ct_ipv6_src`/`ct_ipv6_dst`; ICMP: `icmp_id`, `icmp_type`, `icmp_code`).
pub fn flush(ctx: &Ctx, args: &[String]) -> Result<(String, Value)> {
    let (ct, rest) = tracker(ctx, args)?;
    let mut zone = None;
    let mut filt: Vec<(String, u128)> = Vec::new();
    for a in rest {
        if let Some(z) = zone_arg(a)? {
            zone = Some(z);
            continue;
        }
        for kv in a.split(',').filter(|s| !s.is_empty()) {
            let (k, v) = kv.split_once('=').ok_or_else(|| anyhow!("'{kv}': expected FIELD=VALUE"))?;
            let val = match k {
                "ct_nw_src" | "ct_nw_dst" => {
                    u32::from(v.parse::<std::net::Ipv4Addr>().map_err(|_| anyhow!("{k}: bad address '{v}'"))?) as u128
                }
                "ct_ipv6_src" | "ct_ipv6_dst" => {
                    u128::from(v.parse::<std::net::Ipv6Addr>().map_err(|_| anyhow!("{k}: bad address '{v}'"))?)
                }
                "ct_nw_proto" | "ct_tp_src" | "ct_tp_dst" | "icmp_id" | "icmp_type" | "icmp_code" => {
                    v.parse::<u16>().map_err(|_| anyhow!("{k}: bad number '{v}'"))? as u128
                }
                _ => bail!("{k}: not a field of a connection's original tuple"),
            };
            filt.push((k.to_string(), val));
        }
    }
    let n = ct.flush(|c| {
        zone.is_none_or(|z| z == c.zone)
            && filt.iter().all(|(k, v)| {
                let t = &c.orig;
                match k.as_str() {
                    "ct_nw_src" | "ct_ipv6_src" => t.src == *v,
                    "ct_nw_dst" | "ct_ipv6_dst" => t.dst == *v,
                    "ct_nw_proto" => t.proto as u128 == *v,
                    "ct_tp_src" | "icmp_id" => t.sport as u128 == *v,
                    "ct_tp_dst" => t.dport as u128 == *v,
                    "icmp_type" => (t.dport >> 8) as u128 == *v,
                    "icmp_code" => (t.dport & 0xff) as u128 == *v,
                    _ => false,
                }
            })
    });
    Ok((String::new(), json!({"flushed": n})))
}

/// `dpctl/ct-stats-show [DP] [zone=N]`
pub fn stats(ctx: &Ctx, args: &[String]) -> Result<(String, Value)> {
    let (ct, rest) = tracker(ctx, args)?;
    let zone = rest.first().map(|a| zone_arg(a)).transpose()?.flatten();
    let conns = ct.connections(zone);
    let mut by_proto: std::collections::BTreeMap<String, usize> = Default::default();
    let mut tcp_states: std::collections::BTreeMap<&'static str, usize> = Default::default();
    for c in &conns {
        *by_proto.entry(format::proto_name(c.orig.proto).to_uppercase()).or_default() += 1;
        if let Some((a, b)) = c.tcp {
            *tcp_states.entry(tcp::st::name(a.min(b))).or_default() += 1;
        }
    }
    let mut out = format!("Connections Stats:\n    Total: {}\n", conns.len());
    for (p, n) in &by_proto {
        writeln!(out, "    {p}: {n}")?;
        if p == "TCP" {
            for (s, n) in &tcp_states {
                writeln!(out, "      {s}: {n}")?;
            }
        }
    }
    let c = &ct.counters;
    use std::sync::atomic::Ordering::Relaxed;
    let counters = json!({
        "created": c.created.load(Relaxed), "expired": c.expired.load(Relaxed),
        "tcp_invalid": c.tcp_invalid.load(Relaxed), "invalid_new": c.invalid_new.load(Relaxed),
        "full": c.full.load(Relaxed), "zone_full": c.zone_full.load(Relaxed),
        "nat_exhausted": c.nat_exhausted.load(Relaxed), "collisions": c.collisions.load(Relaxed),
        "untrackable": ct.untrackable_counts().into_iter().collect::<std::collections::BTreeMap<_, _>>(),
    });
    writeln!(out, "Counters: {counters}")?;
    Ok((out, json!({"total": conns.len(), "by_proto": by_proto, "tcp_states": tcp_states, "counters": counters})))
}

/// `dpctl/ct-get-maxconns [DP]`
pub fn get_maxconns(ctx: &Ctx, args: &[String]) -> Result<(String, Value)> {
    let (ct, _) = tracker(ctx, args)?;
    Ok((format!("{}\n", ct.max_conns()), json!({"maxconns": ct.max_conns()})))
}

/// `dpctl/ct-set-maxconns [DP] N`
pub fn set_maxconns(ctx: &Ctx, args: &[String]) -> Result<(String, Value)> {
    let (ct, rest) = tracker(ctx, args)?;
    let n: usize = rest
        .first()
        .ok_or_else(|| anyhow!("usage: dpctl/ct-set-maxconns [DP] N"))?
        .parse()
        .map_err(|_| anyhow!("maxconns: not a number"))?;
    ct.set_max_conns(n);
    Ok(("setting maxconns successful\n".into(), json!({"maxconns": n})))
}

/// `dpctl/ct-get-nconns [DP]`
pub fn get_nconns(ctx: &Ctx, args: &[String]) -> Result<(String, Value)> {
    let (ct, _) = tracker(ctx, args)?;
    Ok((format!("{}\n", ct.n_conns()), json!({"nconns": ct.n_conns()})))
}

/// `dpctl/ct-set-limits [DP] [default=N] [zone=N,limit=M]...`
pub fn set_limits(ctx: &Ctx, args: &[String]) -> Result<(String, Value)> {
    let (ct, rest) = tracker(ctx, args)?;
    for a in rest {
        if let Some(d) = a.strip_prefix("default=") {
            ct.set_zone_limit(None, d.parse().map_err(|_| anyhow!("default: '{d}' is not a number"))?);
            continue;
        }
        let (mut zone, mut limit) = (None, None);
        for kv in a.split(',') {
            match kv.split_once('=') {
                Some(("zone", z)) => zone = Some(z.parse::<u16>().map_err(|_| anyhow!("zone: '{z}' is not 0-65535"))?),
                Some(("limit", l)) => {
                    limit = Some(l.parse::<usize>().map_err(|_| anyhow!("limit: '{l}' is not a number"))?)
                }
                _ => bail!("'{kv}': expected zone=N,limit=M or default=M"),
            }
        }
        match (zone, limit) {
            (Some(z), Some(l)) => ct.set_zone_limit(Some(z), l),
            _ => bail!("'{a}': expected zone=N,limit=M"),
        }
    }
    get_limits(ctx, args)
}

/// `dpctl/ct-del-limits [DP] zone=N[,N]...`: the zones go back to the default.
pub fn del_limits(ctx: &Ctx, args: &[String]) -> Result<(String, Value)> {
    let (ct, rest) = tracker(ctx, args)?;
    for a in rest {
        let zs = a.strip_prefix("zone=").ok_or_else(|| anyhow!("'{a}': expected zone=N[,N...]"))?;
        for z in zs.split(',') {
            ct.set_zone_limit(Some(z.parse().map_err(|_| anyhow!("zone: '{z}' is not 0-65535"))?), 0);
        }
    }
    Ok((String::new(), json!({})))
}

/// `dpctl/ct-get-limits [DP] [zone=N[,N]...]`
pub fn get_limits(ctx: &Ctx, args: &[String]) -> Result<(String, Value)> {
    let (ct, rest) = tracker(ctx, args)?;
    let want: Option<Vec<u16>> = rest
        .iter()
        .find_map(|a| a.strip_prefix("zone="))
        .map(|zs| zs.split(',').filter_map(|z| z.parse().ok()).collect());
    let (def, zones) = ct.zone_limits();
    let mut out = format!("default limit={def}\n");
    let mut v = Vec::new();
    for z in zones.iter().filter(|z| want.as_ref().is_none_or(|w| w.contains(&z.zone))) {
        writeln!(out, "zone={},limit={},count={}", z.zone, z.limit, z.count)?;
        v.push(json!({"zone": z.zone, "limit": z.limit, "count": z.count}));
    }
    Ok((out, json!({"default": def, "zones": v})))
}

/// `dpctl/ipf-get-status [DP]`: the fragment reassembler's settings and
/// counters, in Open vSwitch's layout.
pub fn ipf_status(ctx: &Ctx, args: &[String]) -> Result<(String, Value)> {
    let (ct, _) = tracker(ctx, args)?;
    let d = &ct.defrag;
    let ver = |v: &conntrack::frag::VersionCfg| {
        let c = &v.counters;
        let n = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
        json!({"enabled": v.enabled.load(std::sync::atomic::Ordering::Relaxed),
               "min_frag": v.min_frag.load(std::sync::atomic::Ordering::Relaxed),
               "accepted": n(&c.accepted), "completed": n(&c.completed), "expired": n(&c.expired),
               "too_small": n(&c.too_small), "overlapped": n(&c.overlapped), "purged": n(&c.purged)})
    };
    let j = json!({"v4": ver(&d.v4), "v6": ver(&d.v6), "max_frags": d.max_frags.load(std::sync::atomic::Ordering::Relaxed), "n_frags": d.n_frags()});
    Ok((d.status(), j))
}

/// The IP version argument of the `ipf-set-*` commands.
fn ipf_version<'a>(ct: &'a Conntrack, a: Option<&String>, usage: &str) -> Result<&'a conntrack::frag::VersionCfg> {
    match a.map(String::as_str) {
        Some("v4") => Ok(&ct.defrag.v4),
        Some("v6") => Ok(&ct.defrag.v6),
        _ => bail!("usage: {usage} (v4 or v6 must be given)"),
    }
}

/// `dpctl/ipf-set-enabled [DP] v4|v6` and `dpctl/ipf-set-disabled`.
pub fn ipf_set_enabled(ctx: &Ctx, args: &[String]) -> Result<(String, Value)> {
    ipf_enable(ctx, args, true)
}
pub fn ipf_set_disabled(ctx: &Ctx, args: &[String]) -> Result<(String, Value)> {
    ipf_enable(ctx, args, false)
}
fn ipf_enable(ctx: &Ctx, args: &[String], on: bool) -> Result<(String, Value)> {
    let (ct, rest) = tracker(ctx, args)?;
    let v = ipf_version(&ct, rest.first(), "dpctl/ipf-set-enabled|disabled [DP] v4|v6")?;
    v.enabled.store(on, std::sync::atomic::Ordering::Relaxed);
    let what = if on { "enabling" } else { "disabling" };
    Ok((format!("{what} fragmentation handling successful\n"), json!({"enabled": on})))
}

/// `dpctl/ipf-set-min-frag [DP] v4|v6 N`: clamped below at 400 bytes, as
/// in Open vSwitch.
pub fn ipf_set_min_frag(ctx: &Ctx, args: &[String]) -> Result<(String, Value)> {
    let (ct, rest) = tracker(ctx, args)?;
    let usage = "dpctl/ipf-set-min-frag [DP] v4|v6 MINFRAG";
    let v = ipf_version(&ct, rest.first(), usage)?;
    let n: usize =
        rest.get(1).ok_or_else(|| anyhow!("usage: {usage}"))?.parse().map_err(|_| anyhow!("minfrag: not a number"))?;
    if n < 400 {
        bail!("minfrag: {n} is below the minimum of 400 bytes");
    }
    v.min_frag.store(n, std::sync::atomic::Ordering::Relaxed);
    Ok(("setting minimum fragment size successful\n".into(), json!({"min_frag": n})))
}

/// `dpctl/ipf-set-max-nfrags [DP] N`: at most 5000, as in Open vSwitch.
pub fn ipf_set_max_nfrags(ctx: &Ctx, args: &[String]) -> Result<(String, Value)> {
    let (ct, rest) = tracker(ctx, args)?;
    let usage = "dpctl/ipf-set-max-nfrags [DP] MAXFRAGS";
    let n: usize = rest
        .first()
        .ok_or_else(|| anyhow!("usage: {usage}"))?
        .parse()
        .map_err(|_| anyhow!("maxfrags: not a number"))?;
    if n > 5000 {
        bail!("maxfrags: {n} is above the maximum of 5000");
    }
    ct.defrag.max_frags.store(n, std::sync::atomic::Ordering::Relaxed);
    Ok(("setting maximum fragments successful\n".into(), json!({"max_frags": n})))
}

/// Whether a connection is one an `NXT_CT_FLUSH` names: its zone (0 when
/// a tuple is given without one, as OVS), protocol, and every given part
/// of its original and reply tuples.
pub fn flush_matches(f: &openflow::msg::ct_flush::CtFlush, c: &ConnInfo) -> bool {
    let tuples = !f.orig.is_empty() || !f.reply.is_empty();
    let zone_ok = match f.zone {
        Some(z) => c.zone == z,
        None => !tuples || c.zone == 0,
    };
    let part = |m: &openflow::msg::ct_flush::TupleMatch, t: &conntrack::Tuple| {
        let addr = |a: Option<(u128, bool)>, x: u128| a.is_none_or(|(v, v4)| v4 != t.v6 && v == x);
        let icmp = t.is_icmp();
        addr(m.src, t.src)
            && addr(m.dst, t.dst)
            && m.sport.is_none_or(|p| !icmp && p == t.sport)
            && m.dport.is_none_or(|p| !icmp && p == t.dport)
            && m.icmp_id.is_none_or(|id| icmp && id == t.sport)
            && m.icmp_type.is_none_or(|ty| icmp && ty as u16 == t.dport >> 8)
            && m.icmp_code.is_none_or(|code| icmp && code as u16 == t.dport & 0xff)
    };
    zone_ok && (f.ip_proto == 0 || f.ip_proto == c.orig.proto) && part(&f.orig, &c.orig) && part(&f.reply, &c.reply)
}
