//! `xvs switch --db unix:PATH`: the switch configured from `ovsdb-server`
//! (the Open_vSwitch schema), in place of ovs-vswitchd.
//!
//! One thread (the caller of [`run`]) owns the OVSDB [`ovsdb::Client`] and
//! the running bridges. On every change of the database it rebuilds the
//! typed desired state ([`ovsdb::Desired`]) and reconciles: bridges are
//! started or stopped, ports added, removed or re-created when their
//! configuration changed, OpenFlow controllers and fail modes re-applied.
//! Then it writes back what ovs-vswitchd writes (ofport, link state, MAC,
//! error, statistics, datapath id, cur_cfg = next_cfg so a waiting
//! ovs-vsctl returns). A bad interface option is refused for that
//! interface alone (its `error` column explains it); the rest of the
//! switch is unaffected. While the database is unreachable the switch keeps
//! forwarding with the configuration it has.
//!
//! Crash recovery: everything the switch needs is in the database, so a
//! restarted xvs (after kill -9 too) rebuilds the same bridges and ports;
//! the kernel detached the old XDP programs with the dead process (bpf_link).
//! `other_config:flow-restore-wait=true` starts bridges with an empty flow
//! table and no controller connections, until it is set back to false
//! (as ovs-vswitchd does for ovs-save / flow restoration).

use crate::config::{PollMode, PortSpec, PortType, XdpModeCfg};
use crate::ofconn::{FailMode, OfConfig, OfManager};
use crate::ports::PatchRegistry;
use crate::switch::{Switch, SwitchOptions};
use crate::sysfs::{read_mac, read_sys};
use anyhow::Result;
use ovsdb::{BridgeCfg, Desired, Event, IfaceCfg, IfaceFacts, IfaceKind, PortCfg};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// An interface as applied to a running bridge.
struct AppliedIface {
    spec: PortSpec,
    ofport: Option<u32>,
    error: Option<String>,
}

struct BridgeRt {
    sw: Switch,
    of: Arc<OfManager>,
    /// (controllers, fail mode, datapath id) the OpenFlow manager runs with.
    of_key: OfKey,
    ifaces: BTreeMap<String, AppliedIface>,
    /// The fast path's state as last applied (on, packets/s threshold).
    offload: Option<(bool, u64)>,
}

pub struct DbOptions {
    pub remote: String,
    pub run_dir: PathBuf,
    /// Group of the run directory and sockets (`--group`).
    pub group: Option<u32>,
    /// `--metrics ADDR`; `Open_vSwitch other_config:metrics-addr`
    /// overrides it while set.
    pub metrics: Option<String>,
}

/// Runs until `stop` is set (SIGTERM) or `ovs-appctl exit`.
pub fn run(opts: &DbOptions, stop: &Arc<AtomicBool>) -> Result<()> {
    crate::runfiles::set_group(opts.group);
    crate::ports::PERSIST_INTERNAL.store(true, Ordering::Relaxed);
    crate::runfiles::prepare_dir(&opts.run_dir, opts.group)?;
    let _instance = crate::runfiles::InstanceLock::acquire(&opts.run_dir)?;
    let mut db = ovsdb::Client::connect(&opts.remote).map_err(|e| anyhow::anyhow!("--db {}: {e}", opts.remote))?;
    db.lock("ovs_vswitchd");
    let mut server = crate::control::Server::bind(&opts.run_dir)?;
    let patches: Arc<PatchRegistry> = Default::default();
    let mut bridges: BTreeMap<String, BridgeRt> = BTreeMap::new();
    let mut desired: Option<Desired> = None;
    let mut last_wb = Instant::now();
    let mut last_hk = Instant::now();
    let mut dirty = true;
    // --umem-frames, or the default: what other_config:xvs-umem-frames overrides.
    let umem_frames_default = crate::ports::umem_frames();
    let metrics_bridges: crate::metrics::Bridges = Default::default();
    let mut metrics: Option<crate::metrics::Metrics> = None;
    eprintln!(
        "xvs: configured from {}; control socket {}; ovs-appctl socket {}",
        opts.remote,
        crate::control::socket_path(&opts.run_dir).display(),
        server.appctl_path().map(|p| p.display().to_string()).unwrap_or_else(|| "(none)".into())
    );
    while !stop.load(Ordering::Acquire) {
        match db.next_event(Duration::from_millis(100)) {
            Some(Event::ReplicaChanged) | Some(Event::LockAcquired) => dirty = true,
            Some(Event::Disconnected(why)) => {
                eprintln!("xvs: database connection lost ({why}); keeping the running configuration")
            }
            Some(Event::Reset(why)) => eprintln!("xvs: database stream reset ({why})"),
            Some(Event::TransactReply { result: Err(e), .. }) => eprintln!("xvs: database write refused: {e}"),
            _ => {}
        }
        if dirty && db.session().has_lock() {
            dirty = false;
            let d = db.desired();
            crate::ports::set_umem_frames(d.umem_frames.unwrap_or(umem_frames_default));
            reconcile(&mut bridges, &d, &opts.run_dir, &patches, stop);
            *metrics_bridges.write().expect("metrics bridges") =
                bridges.values().map(|b| Arc::clone(&b.sw.shared)).collect();
            let want = d.metrics_addr.clone().or_else(|| opts.metrics.clone());
            if metrics.as_ref().map(|m| &m.addr) != want.as_ref() {
                metrics = None;
                if let Some(addr) = want {
                    match crate::metrics::serve(&addr, Arc::clone(&metrics_bridges)) {
                        Ok(m) => {
                            eprintln!("xvs: metrics at http://{addr}/metrics");
                            metrics = Some(m);
                        }
                        Err(e) => eprintln!("xvs: other_config:metrics-addr / --metrics: {e:#}"),
                    }
                }
            }
            desired = Some(d);
            last_wb = Instant::now() - Duration::from_secs(10);
        }
        // Write back after every change, and every second for counters and link state.
        if let Some(d) = &desired {
            if last_wb.elapsed() >= Duration::from_secs(1) {
                last_wb = Instant::now();
                let ops = ovsdb::writeback::transaction(d, db.replica(), &actual(&bridges));
                if !ops.is_empty() {
                    if let Err(e) = db.transact(ops) {
                        eprintln!("xvs: database write failed: {e}");
                    }
                }
            }
        }
        let sws: Vec<&Switch> = bridges.values().map(|b| &b.sw).collect();
        if server.poll(&crate::commands::Ctx { bridges: &sws, db: true }) {
            stop.store(true, Ordering::Release);
        }
        if last_hk.elapsed() >= Duration::from_millis(500) {
            last_hk = Instant::now();
            for b in bridges.values() {
                b.sw.housekeeping();
            }
        }
    }
    for (_, b) in std::mem::take(&mut bridges) {
        b.of.shutdown();
        b.sw.stop();
    }
    Ok(())
}

fn pmd_cpus(mask: Option<u64>) -> Vec<usize> {
    match mask {
        Some(m) if m != 0 => (0..64).filter(|i| m & (1 << i) != 0).take(1).collect(),
        _ => Vec::new(),
    }
}

fn fail_mode(f: &ovsdb::FailMode) -> FailMode {
    match f {
        ovsdb::FailMode::Standalone => FailMode::Standalone,
        ovsdb::FailMode::Secure => FailMode::Secure,
    }
}

/// The port spec an interface asks for; `Err` for what xvs cannot do.
fn spec_for(br: &BridgeCfg, port: &PortCfg, iface: &IfaceCfg, run_dir: &Path) -> Result<PortSpec, String> {
    let mut spec = PortSpec::new(&iface.name);
    match &iface.kind {
        IfaceKind::Afxdp { xdp_mode, need_wakeup, n_rxq } => {
            spec.kind = PortType::Afxdp;
            spec.xdp_mode = match xdp_mode {
                ovsdb::XdpMode::Native | ovsdb::XdpMode::NativeWithZerocopy => XdpModeCfg::Native,
                ovsdb::XdpMode::Generic => XdpModeCfg::Generic,
                ovsdb::XdpMode::BestEffort => XdpModeCfg::BestEffort,
            };
            spec.need_wakeup = *need_wakeup;
            spec.n_rxq = (*n_rxq).max(1) as usize;
        }
        IfaceKind::System => spec.kind = PortType::System,
        IfaceKind::Tap => spec.kind = PortType::Tap,
        IfaceKind::Internal => {
            spec.kind = PortType::Internal;
            if iface.name == br.name {
                spec.ofport = Some(ofproto::actions::ofpp::LOCAL);
            }
        }
        IfaceKind::Patch { peer } => {
            spec.kind = PortType::Patch;
            spec.peer = Some(peer.clone());
        }
        IfaceKind::VhostUserClient { path } => {
            spec.kind = PortType::VhostUserClient;
            spec.vhost_server_path = Some(path.clone());
            spec.tx_retries_max = iface.tx_retries_max.unwrap_or(8);
        }
        IfaceKind::VhostUser => {
            // As OVS puts it in its vhost socket directory: the run
            // directory, named after the interface.
            spec.kind = PortType::VhostUser;
            spec.vhost_server_path = Some(run_dir.join(&iface.name).to_string_lossy().into_owned());
            spec.tx_retries_max = iface.tx_retries_max.unwrap_or(8);
        }
        IfaceKind::Tunnel(cfg) => {
            spec.kind = PortType::Tunnel;
            spec.tunnel = Some(cfg.clone());
        }
        IfaceKind::Unsupported(t) => return Err(format!("type: \"{t}\" is not supported by xvs")),
    }
    if let Some(r) = iface.ofport_request {
        if spec.ofport.is_none() {
            spec.ofport = Some(r as u32);
        }
    }
    spec.vlan = match (&port.vlan_mode, port.tag) {
        (Some(ovsdb::VlanMode::Access), Some(t)) | (None, Some(t)) => ofproto::VlanMode::Access(t),
        _ if !port.trunks.is_empty() => ofproto::VlanMode::Trunk(port.trunks.clone()),
        _ => ofproto::VlanMode::TrunkAll,
    };
    // Ports that are no kernel devices may have longer names (OVN's
    // localnet patch ports do).
    crate::runfiles::check_port_name("name: interface", &iface.name, spec.kind.is_kernel_device())
        .map_err(|e| format!("{e:#}"))?;
    Ok(spec)
}

fn start_bridge(
    br: &BridgeCfg,
    d: &Desired,
    run_dir: &Path,
    patches: &Arc<PatchRegistry>,
    stop: &Arc<AtomicBool>,
) -> Result<BridgeRt> {
    let sw = Switch::start(SwitchOptions {
        bridge: br.name.clone(),
        n_pmd: 1,
        pmd_cpus: pmd_cpus(d.pmd_cpu_mask),
        // The local port comes from the database (ovs-vsctl add-br creates it).
        local_port: false,
        mirror: None,
        // other_config:pmd-maxsleep=0 asks for Open vSwitch's polling: spin,
        // never sleep. Read when the bridge starts.
        poll_mode: if d.pmd_maxsleep_us == Some(0) { PollMode::Busy } else { PollMode::Adaptive },
        pmd: pmd_config(d),
        patches: Arc::clone(patches),
    })?;
    // Read when the bridge starts, like pmd-maxsleep: its ports get it.
    sw.set_napi_threads(d.xdp_napi_threads);
    if d.flow_restore_wait {
        let all = ofproto::parse_flow("", ofproto::Need::NoActions).expect("catch-all");
        let _ = sw.shared.ofproto.write().expect("ofproto lock").flow_mod(ofproto::FlowModCmd::Delete, &all);
    }
    let key = of_key(br, d);
    let of = start_of(&sw, &key, run_dir, stop)?;
    Ok(BridgeRt { sw, of, of_key: key, ifaces: BTreeMap::new(), offload: None })
}

/// The poll threads' settings from `Open_vSwitch other_config`, read
/// when a bridge starts (as pmd-maxsleep): `emc-insert-inv-prob`.
fn pmd_config(d: &Desired) -> dpif::PmdConfig {
    let dflt = dpif::PmdConfig::default();
    dpif::PmdConfig { emc_insert_inv_prob: d.emc_insert_inv_prob.unwrap_or(dflt.emc_insert_inv_prob), ..dflt }
}

type OfKey = (Vec<String>, FailMode, u64, Vec<openflow::Version>);

fn of_key(br: &BridgeCfg, d: &Desired) -> OfKey {
    // While flow-restore-wait is set, controllers wait too.
    let ctrls = if d.flow_restore_wait { Vec::new() } else { br.controllers.clone() };
    // A bad `protocols` value is reported and the bridge speaks every version.
    let protocols = crate::ofconn::parse_protocols(&br.protocols).unwrap_or_else(|e| {
        eprintln!("xvs: Bridge table, bridge {}: {e:#}; speaking every version", br.name);
        Vec::new()
    });
    (ctrls, fail_mode(&br.fail_mode), br.datapath_id.unwrap_or_else(|| crate::default_dpid(&br.name)), protocols)
}

fn start_of(sw: &Switch, key: &OfKey, run_dir: &Path, stop: &Arc<AtomicBool>) -> Result<Arc<OfManager>> {
    // Only syntactically valid controller targets are used; others are skipped with a message.
    let controllers: Vec<String> = key
        .0
        .iter()
        .filter(|c| match crate::ofconn::parse_target(c) {
            Ok(_) => true,
            Err(e) => {
                eprintln!("xvs: bridge {}: {e:#}", sw.shared.bridge);
                false
            }
        })
        .cloned()
        .collect();
    let of = OfManager::start(
        Arc::clone(&sw.shared),
        OfConfig {
            dpid: key.2,
            protocols: key.3.clone(),
            controllers,
            fail_mode: key.1,
            run_dir: run_dir.to_path_buf(),
        },
        Arc::clone(stop),
    )?;
    Ok(of)
}

/// other_config:xdp-offload (default true) and xdp-offload-pps, applied
/// whenever they change: off removes every entry at once; ports added
/// later join the fast path as they come.
fn apply_offload(rt: &mut BridgeRt, br: &BridgeCfg, d: &Desired) {
    let want = (d.xdp_offload, d.xdp_offload_pps.unwrap_or(DEFAULT_OFFLOAD_PPS));
    if rt.offload == Some(want) {
        return;
    }
    match rt.sw.set_offload(want.0, want.1) {
        Ok(()) if want.0 => eprintln!("xvs: bridge {}: XDP fast path on (flows above {} packets/s)", br.name, want.1),
        Ok(()) => eprintln!("xvs: bridge {}: XDP fast path off (other_config:xdp-offload=false)", br.name),
        Err(e) => eprintln!("xvs: bridge {}: other_config:xdp-offload: {e:#}", br.name),
    }
    rt.offload = Some(want);
}

/// Packets per second a flow needs before it is offloaded, unless
/// other_config:xdp-offload-pps or --xdp-offload-pps says otherwise.
pub const DEFAULT_OFFLOAD_PPS: u64 = 1000;

fn reconcile(
    bridges: &mut BTreeMap<String, BridgeRt>,
    d: &Desired,
    run_dir: &Path,
    patches: &Arc<PatchRegistry>,
    stop: &Arc<AtomicBool>,
) {
    // Bridges gone from the database.
    let gone: Vec<String> = bridges.keys().filter(|n| d.bridge(n).is_none()).cloned().collect();
    for n in gone {
        if let Some(b) = bridges.remove(&n) {
            b.sw.release_devices();
            b.of.shutdown();
            b.sw.stop();
            eprintln!("xvs: bridge {n} removed");
        }
    }
    for br in &d.bridges {
        if !bridges.contains_key(&br.name) {
            match start_bridge(br, d, run_dir, patches, stop) {
                Ok(rt) => {
                    eprintln!("xvs: bridge {} started", br.name);
                    bridges.insert(br.name.clone(), rt);
                }
                Err(e) => {
                    eprintln!("xvs: Bridge table, bridge {:?}: {e:#}", br.name);
                    continue;
                }
            }
        }
        let rt = bridges.get_mut(&br.name).expect("just ensured");
        let key = of_key(br, d);
        if key != rt.of_key {
            rt.of.shutdown();
            match start_of(&rt.sw, &key, run_dir, stop) {
                Ok(of) => {
                    rt.of = of;
                    rt.of_key = key;
                }
                Err(e) => eprintln!("xvs: bridge {}: OpenFlow: {e:#}", br.name),
            }
        }
        apply_mirrors(rt, br);
        apply_offload(rt, br, d);
        // Interfaces.
        let mut want: BTreeMap<String, Result<PortSpec, String>> = BTreeMap::new();
        for p in &br.ports {
            for i in &p.interfaces {
                let s = match &i.error {
                    Some(e) => Err(e.clone()),
                    None => spec_for(br, p, i, run_dir),
                };
                want.insert(i.name.clone(), s);
            }
        }
        let stale: Vec<String> = rt
            .ifaces
            .iter()
            .filter(|(n, a)| match want.get(*n) {
                None => true,
                Some(Ok(s)) => *s != a.spec || a.ofport.is_none(),
                Some(Err(_)) => true,
            })
            .map(|(n, _)| n.clone())
            .collect();
        for n in stale {
            if let Some(a) = rt.ifaces.remove(&n) {
                if a.ofport.is_some() {
                    let _ = rt.sw.del_port(&n);
                }
            }
        }
        for (name, s) in want {
            if rt.ifaces.contains_key(&name) {
                continue;
            }
            let applied = match s {
                Err(e) => AppliedIface { spec: PortSpec::new(&name), ofport: None, error: Some(e) },
                Ok(spec) => match rt.sw.add_port(spec.clone()) {
                    Ok(n) => AppliedIface { spec, ofport: Some(n), error: None },
                    Err(e) => {
                        eprintln!("xvs: bridge {}: port {name}: {e:#}", br.name);
                        AppliedIface { spec, ofport: None, error: Some(format!("{e:#}")) }
                    }
                },
            };
            rt.ifaces.insert(name, applied);
        }
        apply_mirrors(rt, br);
        apply_hwaddr(br);
        apply_mtu(rt, br);
        apply_zone_policies(rt, d);
    }
}

/// `Interface mtu_request`: the kernel device of each applied interface
/// takes that MTU (when it differs), as OVS applies it; a refusal lands in
/// the log and the interface keeps forwarding.
fn apply_mtu(rt: &BridgeRt, br: &BridgeCfg) {
    for p in &br.ports {
        for i in &p.interfaces {
            let Some(mtu) = i.mtu_request else { continue };
            let Some(ai) = rt.ifaces.get(&i.name).filter(|a| a.ofport.is_some()) else { continue };
            if !ai.spec.kind.is_kernel_device() {
                continue;
            }
            if read_sys(&i.name, "mtu").and_then(|m| m.parse::<u32>().ok()).is_some_and(|m| m != mtu) {
                if let Err(e) = rt.sw.set_port_mtu(&i.name, mtu) {
                    eprintln!("xvs: interface {}: mtu_request {mtu}: {e:#}", i.name);
                }
            }
        }
    }
}

/// `Bridge other_config:hwaddr`: the bridge's local port takes that MAC
/// (when it exists and differs), as in OVS.
fn apply_hwaddr(br: &BridgeCfg) {
    let Some(mac) = br.hwaddr else { return };
    if read_mac(&br.name).is_some_and(|m| m != mac) {
        if let Err(e) = netdev_linux::sys::set_mac(&br.name, mac) {
            eprintln!("xvs: bridge {}: other_config:hwaddr: {e}", br.name);
        }
    }
}

/// The datapath's conntrack timeout policies, on this bridge's tracker
/// (new connections in a zone take its policy; a zone whose policy went
/// away is back to the defaults). A policy with a key the tracker does not
/// know is reported and skipped.
fn apply_zone_policies(rt: &BridgeRt, d: &Desired) {
    let ct = std::sync::Arc::clone(rt.sw.shared.ofproto.read().expect("ofproto lock").conntrack());
    let mut m = std::collections::HashMap::new();
    for (zone, keys) in &d.ct_zone_policies {
        match conntrack::Timeouts::default().with_policy(keys.iter().map(|(k, v)| (k.as_str(), *v))) {
            Ok(t) => {
                m.insert(*zone, t);
            }
            Err(e) => eprintln!("xvs: CT_Timeout_Policy of zone {zone}: {e}; skipped"),
        }
    }
    ct.set_zone_timeouts(m);
}

/// The bridge's Mirror rows as port mirrors (ports named by their
/// interfaces' OpenFlow numbers; a mirror naming an unknown port is left out).
fn apply_mirrors(rt: &BridgeRt, br: &BridgeCfg) {
    let ofport = |port: &str| -> Option<u32> {
        let p = br.ports.iter().find(|p| p.name == port)?;
        p.interfaces.iter().find_map(|i| rt.ifaces.get(&i.name).and_then(|a| a.ofport))
    };
    let mut mirrors = Vec::new();
    for m in &br.mirrors {
        let Some(output) = m.output_port.as_deref().and_then(ofport) else { continue };
        mirrors.push(ofproto::Mirror {
            name: m.name.clone(),
            select_all: m.select_all,
            src: m.select_src_port.iter().filter_map(|p| ofport(p)).collect(),
            dst: m.select_dst_port.iter().filter_map(|p| ofport(p)).collect(),
            output,
        });
    }
    rt.sw.shared.ofproto.write().expect("ofproto lock").set_mirrors(mirrors);
}

/// What the switch knows about its interfaces, for the write-back.
fn actual(bridges: &BTreeMap<String, BridgeRt>) -> ovsdb::writeback::Actual {
    let mut a = ovsdb::writeback::Actual::default();
    for (name, b) in bridges {
        a.datapath_ids.insert(name.clone(), b.of_key.2);
        let stats: HashMap<u32, netdev::PortStats> =
            b.sw.shared.port_stats().into_iter().map(|(p, s)| (p.ofport, s)).collect();
        let ports = b.sw.shared.ports.read().expect("ports lock").clone();
        for (iname, ai) in &b.ifaces {
            let mut f = IfaceFacts { error: ai.error.clone(), ..Default::default() };
            if let Some(n) = ai.ofport {
                f.ofport = Some(if n == ofproto::actions::ofpp::LOCAL { 65534 } else { n as u16 });
                if let Some(p) = ports.get(&n) {
                    f.status = p.dev.lock().expect("port lock").status();
                    let link = p.link();
                    f.link_up = link.carrier.map(|c| c && link.present);
                    f.mac_in_use = link.mac;
                    f.link_speed = (link.speed_mbps > 0).then_some(link.speed_mbps * 1_000_000);
                    if p.ifindex.is_none() {
                        f.admin_up = Some(true);
                    } else if !link.present {
                        // As OVS words a device it cannot find.
                        f.admin_up = Some(false);
                        f.error
                            .get_or_insert_with(|| format!("could not open network device {iname} (No such device)"));
                    } else {
                        f.admin_up = read_sys(iname, "flags")
                            .and_then(|x| u32::from_str_radix(x.trim_start_matches("0x"), 16).ok())
                            .map(|x| x & 1 != 0);
                        f.mtu = read_sys(iname, "mtu").and_then(|m| m.parse().ok());
                    }
                }
                if let Some(s) = stats.get(&n) {
                    f.statistics = vec![
                        ("rx_packets".into(), s.rx_packets),
                        ("rx_bytes".into(), s.rx_bytes),
                        ("rx_dropped".into(), s.rx_dropped),
                        ("tx_packets".into(), s.tx_packets),
                        ("tx_bytes".into(), s.tx_bytes),
                        ("tx_dropped".into(), s.tx_dropped),
                    ];
                    // AF_XDP sockets' own counters, per queue, named as OVS names them.
                    if let Some(p) = ports.get(&n) {
                        let dev = p.dev.lock().expect("port lock");
                        f.statistics.extend(dev.queue_stats().iter().flat_map(|q| q.named()));
                        f.bfd_status = dev.bfd_status();
                    }
                }
            }
            a.interfaces.insert(iname.clone(), f);
        }
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `other_config:emc-insert-inv-prob` reaches the poll threads'
    /// settings; absent, Open vSwitch's default (100) applies.
    #[test]
    fn pmd_config_follows_emc_insert_inv_prob() {
        let mut d = Desired::default();
        assert_eq!(pmd_config(&d).emc_insert_inv_prob, 100);
        d.emc_insert_inv_prob = Some(0);
        assert_eq!(pmd_config(&d).emc_insert_inv_prob, 0);
        d.emc_insert_inv_prob = Some(7);
        let c = pmd_config(&d);
        assert_eq!(c.emc_insert_inv_prob, 7);
        assert!(c.emc_gate && c.port_hint, "the rest stays at the defaults");
    }
}
