//! `xvs demo`: hosts in network namespaces talking through xvs over
//! AF_XDP, with a readable account of what the switch did.

use crate::config::{PollMode, PortSpec};
use crate::netns::{finish, wait_file, Host};
use crate::switch::{Switch, SwitchOptions};
use anyhow::{bail, Result};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

pub struct DemoOptions {
    pub hosts: usize,
    pub burst: u64,
    pub xdp_mode: String,
}

/// OVN over two hypervisors (network namespaces), each with its own
/// ovsdb-server, xvs (this binary, `--db`) and ovn-controller, joined by
/// Geneve over an underlay: vm1 (hv1) and vm2 (hv2) on logical switch ls1,
/// vm3 (hv2) on ls2 behind router lr1. The replies of 3 pings across the
/// tunnel on the switch and 3 across the router; `None` when OVN is not
/// installed.
fn ovn_step() -> Result<Option<(u32, u32)>> {
    use crate::ovnmulti::{eventually, Multi, Switch};
    if let Some(why) = Multi::unavailable() {
        println!("  skipped: {why} (scripts/setup.sh installs ovn-central and ovn-host)");
        return Ok(None);
    }
    let exe = std::env::current_exe()?;
    let mut m = Multi::start(&exe.to_string_lossy(), "demo", &[Switch::Xvs, Switch::Xvs]);
    m.two_switches_and_a_router();
    if !m.wait_tunnels(20) {
        bail!("ovn-controller's Geneve ports did not come up:\n{}", m.diagnostics());
    }
    println!("  OVN_Southbound (ovn-sbctl show): two chassis, each an xvs");
    for l in m.sbctl(&["show"]).lines() {
        println!("    {l}");
    }
    for (i, hv) in m.hvs.iter().enumerate() {
        println!(
            "  hv{}: ovn-controller programmed xvs's br-int with {} OpenFlow flows",
            i + 1,
            hv.flows().lines().count().saturating_sub(1)
        );
    }
    let (vm1, vm2, vm3) = (m.host(0), m.host(1), m.host(2));
    eventually(20, || vm1.ping(&vm2.ip, 1).unwrap_or(0) == 1);
    let mut l2 = 0;
    let wire = m.capture_geneve(|| l2 = vm1.ping(&vm2.ip, 3).unwrap_or(0));
    println!("  vm1 (hv1) -> vm2 (hv2) on logical switch ls1, through a Geneve tunnel: {l2}/3 replies");
    println!("  on the underlay (tcpdump), the first frames:");
    for l in wire.lines().filter(|l| l.contains("Geneve")).take(2) {
        println!("    {}", l.trim());
    }
    eventually(10, || vm1.ping(&vm3.ip, 1).unwrap_or(0) == 1);
    let l3 = vm1.ping(&vm3.ip, 3)?;
    println!("  vm1 (hv1) -> vm3 (hv2) across logical router lr1 (TTL decremented, MACs rewritten): {l3}/3 replies");
    println!("  hv1's tunnel port (ovs-appctl tnl/ports/show):");
    for l in m.hvs[0].appctl(&["tnl/ports/show"]).lines().take(3) {
        println!("    {l}");
    }
    Ok(Some((l2, l3)))
}

fn step(n: usize, total: usize, s: &str) {
    println!("\n[{n}/{total}] {s}");
}

pub fn run(opts: &DemoOptions, interrupted: Arc<AtomicBool>) -> Result<()> {
    let n = opts.hosts.clamp(2, 8);
    let total = 8;
    let tag = std::process::id() % 10000;
    let check = || -> Result<()> {
        if interrupted.load(Ordering::Acquire) {
            bail!("interrupted");
        }
        Ok(())
    };
    println!("xvs demo: {n} hosts in network namespaces, one xvs bridge, AF_XDP ports");

    step(1, total, "creating hosts (a namespace and a veth pair each)");
    let mut hosts = Vec::new();
    for i in 1..=n {
        let h = Host::create(&format!("xvsdemo{tag}h{i}"), &format!("xd{tag}h{i}"), &format!("10.99.0.{i}/24"), 1)?;
        println!("  h{i}: namespace {}, eth0 {} ({}), switch port {}", h.ns, h.ip, h.mac, h.port);
        hosts.push(h);
    }
    check()?;

    step(2, total, "starting xvs (standalone: no controller, so the bridge forwards with NORMAL)");
    let sw = Switch::start(SwitchOptions {
        bridge: "xvsbr0".into(),
        n_pmd: 1,
        pmd_cpus: vec![],
        local_port: false,
        mirror: None,
        poll_mode: PollMode::Adaptive,
        pmd: dpif::PmdConfig::default(),
        patches: Default::default(),
    })?;
    for h in &hosts {
        let spec = PortSpec::parse(&format!("{},type=afxdp,xdp-mode={}", h.port, opts.xdp_mode))?;
        let of = sw.add_port(spec)?;
        let p = sw.ports().into_iter().find(|p| p.ofport == of).expect("just added");
        println!(
            "  port {of}: {} type {} xdp-mode {} rxq {} {}",
            p.spec.name, p.info.kind, p.info.xdp_mode, p.info.n_rxq, p.info.detail
        );
    }
    check()?;

    step(3, total, "ping between every pair of hosts (3 each)");
    let mut ok_pairs = 0;
    let mut pairs = 0;
    for a in 0..n {
        for b in 0..n {
            if a >= b {
                continue;
            }
            check()?;
            let got = hosts[a].ping(&hosts[b].ip, 3)?;
            pairs += 1;
            if got > 0 {
                ok_pairs += 1;
            }
            println!("  h{} -> h{} ({}): {got}/3 replies", a + 1, b + 1, hosts[b].ip);
        }
    }

    step(4, total, &format!("UDP burst: {} datagrams of 18 bytes (64-byte frames) h1 -> h2", opts.burst));
    let ready = format!("/tmp/xvsdemo{tag}.ready");
    let _ = std::fs::remove_file(&ready);
    let before = hosts[1].counter("rx_packets");
    let rx = hosts[1].util(&[
        "udp-recv",
        "--port",
        "9000",
        "--idle-ms",
        "500",
        "--max-ms",
        "20000",
        "--ready-file",
        &ready,
    ])?;
    wait_file(&ready, 3000);
    let tx = hosts[0].util(&[
        "udp-send",
        "--dst",
        &format!("{}:9000", hosts[1].ip),
        "--count",
        &opts.burst.to_string(),
        "--size",
        "18",
    ])?;
    let sent = finish(tx)?;
    let got = finish(rx)?;
    let _ = std::fs::remove_file(&ready);
    let delivered = hosts[1].counter("rx_packets") - before;
    println!("  h1 (sender):     {sent}");
    println!("  h2 eth0:         {delivered} frames arrived from the switch");
    println!("  h2 UDP socket:   {got} (the rest overflowed the socket's receive buffer, not the switch)");
    check()?;

    step(5, total, "TCP stream: 20 MB h2 -> h1");
    let _ = std::fs::remove_file(&ready);
    let rx = hosts[0].util(&["tcp-recv", "--port", "9001", "--max-ms", "20000", "--ready-file", &ready])?;
    wait_file(&ready, 3000);
    let tx = hosts[1].util(&["tcp-send", "--dst", &format!("{}:9001", hosts[0].ip), "--bytes", "20000000"])?;
    let sent = finish(tx);
    let got = finish(rx);
    let _ = std::fs::remove_file(&ready);
    println!("  h2: {}", sent.as_ref().map(String::as_str).unwrap_or("failed"));
    println!("  h1: {}", got.as_ref().map(String::as_str).unwrap_or("failed"));

    step(6, total, "a stateful firewall with connection tracking: h1 may open connections to h2, h2 none to h1");
    let rules = "table=0,priority=100,ip,ct_state=-trk,actions=ct(table=1,zone=1)\n\
                 table=0,priority=0,actions=NORMAL\n\
                 table=1,priority=100,ip,in_port=1,ct_state=+trk+new,actions=ct(commit,zone=1),NORMAL\n\
                 table=1,priority=100,ip,ct_state=+trk+est,actions=NORMAL\n\
                 table=1,priority=1,actions=drop\n";
    crate::commands::run(&sw, "del-flows", &[String::new()])?;
    crate::commands::run(&sw, "add-flows", &[rules.to_string()])?;
    for l in rules.lines() {
        println!("  ovs-ofctl add-flow xvsbr0 '{}'", l.trim());
    }
    let fw_out = hosts[0].ping(&hosts[1].ip, 3)?;
    let fw_in = hosts[1].ping(&hosts[0].ip, 3)?;
    println!("  h1 -> h2: {fw_out}/3 replies (h1 opens the connection, the replies are +est)");
    println!("  h2 -> h1: {fw_in}/3 replies (h2's echo requests are +new from the wrong side: dropped)");
    let (conns, _) = crate::commands::run(&sw, "dump-conntrack", &[])?;
    println!("== connections (ovs-appctl dpctl/dump-conntrack) ==\n{conns}");
    crate::commands::run(&sw, "del-flows", &[String::new()])?;
    crate::commands::run(&sw, "add-flows", &["priority=0,actions=NORMAL".to_string()])?;
    check()?;

    step(7, total, "OVN drives two more xvs, one per hypervisor: ovn-northd and ovn-controller 23.03, a logical network across a Geneve tunnel");
    let ovn = ovn_step()?;
    check()?;

    step(8, total, "what the switch saw");
    let (show, _) = crate::commands::run(&sw, "show", &[])?;
    println!("\n== ports (xvs show) ==\n{show}");
    let (fdb, _) = crate::commands::run(&sw, "fdb-show", &[])?;
    println!("== MAC table (xvs fdb-show) ==\n{fdb}");
    let (flows, _) = crate::commands::run(&sw, "dump-flows", &[])?;
    println!("== megaflows in the datapath cache (xvs dump-flows) ==\n{flows}");
    let (stats, _) = crate::commands::run(&sw, "pmd-stats", &[])?;
    println!("== poll thread (xvs pmd-stats) ==\n{stats}");
    let (mem, _) = crate::commands::run(&sw, "memory/show", &[])?;
    println!("== memory (ovs-appctl memory/show) ==\n{mem}");

    println!("cleaning up: stopping xvs (detaches XDP), deleting namespaces");
    sw.stop();
    let ports: Vec<String> = hosts.iter().map(|h| h.port.clone()).collect();
    drop(hosts);
    // The kernel releases an XDP link shortly after its last descriptor
    // closes: give it a moment before calling anything a leftover.
    let t = std::time::Instant::now();
    while ports.iter().any(|p| crate::netns::xdp_attached(p)) && t.elapsed() < std::time::Duration::from_secs(2) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let leftovers: Vec<&String> = ports.iter().filter(|p| crate::netns::xdp_attached(p)).collect();
    if !leftovers.is_empty() {
        bail!("XDP programs left on {leftovers:?}");
    }
    if ok_pairs != pairs {
        bail!("only {ok_pairs} of {pairs} host pairs could ping each other");
    }
    sent.and(got).map(|_| ())?;
    if fw_out != 3 || fw_in != 0 {
        bail!("the firewall let {fw_out}/3 pings out and {fw_in}/3 in (expected 3 and 0)");
    }
    if let Some((l2, l3)) = ovn {
        if l2 != 3 || l3 != 3 {
            bail!("through OVN's logical network: {l2}/3 pings on the switch, {l3}/3 across the router");
        }
    }
    println!("demo finished: every host reached every other through xvs, the stateful firewall held, and OVN's logical network carried traffic");
    Ok(())
}
