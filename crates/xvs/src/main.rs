//! The `xvs` command: the switch daemon and its tools.

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use xvs::config::{PollMode, PortSpec};
use xvs::switch::{Switch, SwitchOptions};

/// The allocator of the daemon and its tools: mimalloc, for the poll
/// threads. glibc gives each thread an arena that it grows one `mprotect`
/// call per page of new memory (no top pad off the main arena): a poll
/// thread committing a new tracked connection per frame (232 bytes each,
/// a million a second between two VMs) spent 12% of its time in those
/// calls, plus the page faults that follow. mimalloc takes memory from the
/// kernel in large segments and keeps a heap per thread. Measured in turns
/// against glibc (`bench/vmports.py`'s conntrack cases): new connections
/// 1.10x, established 1.02x, SNAT 1.12x, forwarding unchanged. Not with
/// transparent huge pages (see Cargo.toml): on this machine's VMs a huge
/// page's first touch costs more than the 512 small faults it saves.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

const DEFAULT_RUN_DIR: &str = "/run/xvs";

#[derive(Parser)]
#[command(name = "xvs", version, about = "A userspace virtual switch fed by AF_XDP")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a bridge (no database, no config file): NORMAL forwarding over the given ports.
    Switch {
        /// Directory for the control sockets and the instance lock (created
        /// 0750 if missing; sockets are 0770 whatever the umask).
        #[arg(long, default_value = DEFAULT_RUN_DIR)]
        run_dir: PathBuf,
        /// Group (name or number) given the run directory xvs creates and
        /// its sockets, so its members may use ovs-ofctl, ovs-appctl and
        /// the xvs CLI without root (default: root's group).
        #[arg(long)]
        group: Option<String>,
        #[arg(long, default_value = "br0")]
        bridge: String,
        /// IFACE[,type=afxdp|system|af_packet|tap|internal][,xdp-mode=native|generic|best-effort]
        /// [,need-wakeup=true|false][,n-rxq=N][,umem=shared|copy][,ofport=N][,tag=VLAN][,trunks=V1:V2]
        #[arg(long = "port")]
        ports: Vec<String>,
        /// Poll threads.
        #[arg(long, default_value_t = 1)]
        pmd_threads: usize,
        /// Pin poll threads to these CPUs, one per thread (e.g. '1' or '2,3').
        #[arg(long, value_delimiter = ',')]
        pmd_cpus: Vec<usize>,
        /// busy: spin on the queues; adaptive: spin while busy, sleep when idle.
        #[arg(long, default_value = "adaptive")]
        poll: String,
        /// Do not create the bridge's local (internal) port.
        #[arg(long)]
        no_local_port: bool,
        /// Copy every frame the switch sends to this tap device (for tcpdump).
        #[arg(long)]
        mirror: Option<String>,
        /// OpenFlow rules to install at start (ovs-ofctl add-flows syntax);
        /// without it the bridge has one rule: priority=0,actions=NORMAL.
        #[arg(long)]
        flows: Option<PathBuf>,
        /// OpenFlow controller: tcp:IP[:PORT] or unix:PATH (connect,
        /// reconnect with backoff), ptcp:[PORT][:IP] or punix:PATH (listen);
        /// IPv6 in brackets (tcp:[::1]:6653). Repeatable. With a controller
        /// the bridge starts with an empty flow table.
        #[arg(long = "controller")]
        controllers: Vec<String>,
        /// While no controller is connected: standalone (act as a learning
        /// switch) or secure (drop what no flow handles).
        #[arg(long, default_value = "standalone")]
        fail_mode: String,
        /// OpenFlow datapath id (16 hex digits; default: from the bridge name).
        #[arg(long)]
        datapath_id: Option<String>,
        /// OpenFlow versions to speak, as the Bridge table's `protocols`:
        /// e.g. OpenFlow10,OpenFlow13 (default: all of 1.0, 1.3, 1.4, 1.5).
        #[arg(long, default_value = "")]
        protocols: String,
        /// AF_XDP transmit flush interval in µs for every port (as OVS's
        /// other_config:tx-flush-interval): 0 (default) kicks the kernel
        /// after every batch; more lets one kick carry many packets.
        #[arg(long, default_value_t = 0)]
        tx_flush_us: u32,
        /// Take bridges, ports, controllers from ovsdb-server (unix:PATH or
        /// tcp:IP:PORT) instead of the command line, as ovs-vswitchd does.
        #[arg(long)]
        db: Option<String>,
        /// Kernel fast path: forward hot flows in the XDP program itself
        /// (on|off). Flows are never offloaded towards a port that takes no
        /// redirected frames (a veth whose far end has GRO off and no XDP
        /// program); README, "XDP fast path".
        #[arg(long, default_value = "on")]
        xdp_offload: String,
        /// Packets per second a flow needs before it is offloaded.
        #[arg(long, default_value_t = xvs::db::DEFAULT_OFFLOAD_PPS)]
        xdp_offload_pps: u64,
        /// AF_XDP ports' kernel receive work (the XDP program, the fast
        /// path's redirects) in kernel threads of their own (on|off), so an
        /// idle core can take it from the sender's. For the fast path with
        /// adaptive polling; with busy polling it competes with the poll
        /// threads. README, "XDP fast path".
        #[arg(long, default_value = "off")]
        napi_threads: String,
        /// TCP/UDP checksums that local senders left to offload stay so
        /// through plain forwarding, for AF_XDP ports to have the kernel
        /// fill (TX metadata) (on|off). Off: completed in software on
        /// arrival (README, "Checksums").
        #[arg(long, default_value = "on")]
        tx_csum_offload: String,
        /// Serve Prometheus metrics at http://ADDR/metrics (e.g.
        /// 127.0.0.1:9477); off by default. With --db,
        /// Open_vSwitch other_config:metrics-addr overrides it.
        #[arg(long)]
        metrics: Option<String>,
        /// Frames (4 KiB) per shared UMEM of AF_XDP ports; a port whose
        /// queues do not fit starts another UMEM. Default 17408 (68 MiB,
        /// four queues' rings). With --db, Open_vSwitch
        /// other_config:xvs-umem-frames overrides it.
        #[arg(long)]
        umem_frames: Option<u32>,
    },
    /// Bridge, ports, XDP modes, counters.
    Show(ClientArgs),
    /// The datapath's megaflows with their counters.
    DumpFlows(ClientArgs),
    /// Poll-thread statistics: cache hits, upcalls, drops by reason, cycles per packet.
    PmdStats(ClientArgs),
    /// The OpenFlow rules with their counters.
    DumpOfFlows(ClientArgs),
    /// The MAC learning table.
    FdbShow(ClientArgs),
    /// The kernel fast path: offloaded flows, kernel hits, misses.
    OffloadShow(ClientArgs),
    /// Connections in the tracker (OVS's dpctl/dump-conntrack form).
    DumpConntrack(ClientArgs),
    /// Any command of the control socket (`xvs ctl list-commands`), with
    /// its arguments, e.g. `xvs ctl ct-set-maxconns 100000`.
    Ctl {
        cmd: String,
        args: Vec<String>,
        #[command(flatten)]
        c: ClientArgs,
    },
    /// Add a port to a running switch (same syntax as --port).
    AddPort {
        spec: String,
        #[command(flatten)]
        c: ClientArgs,
    },
    /// Remove a port from a running switch.
    DelPort {
        name: String,
        #[command(flatten)]
        c: ClientArgs,
    },
    /// Add OpenFlow rules to a running switch (ovs-ofctl syntax).
    AddFlow {
        flow: String,
        #[command(flatten)]
        c: ClientArgs,
    },
    /// Delete OpenFlow rules matching (ovs-ofctl syntax; empty = all).
    DelFlows {
        #[arg(default_value = "")]
        flow: String,
        #[command(flatten)]
        c: ClientArgs,
    },
    /// Stop a running switch.
    Exit(ClientArgs),
    /// Translate one packet through OpenFlow rules offline, like ofproto/trace.
    Trace {
        /// File of OpenFlow rules in ovs-ofctl add-flows syntax, one per line.
        #[arg(long)]
        flows: String,
        /// The packet as an ovs-ofctl flow, e.g. 'in_port=1,tcp,nw_dst=10.0.0.2,tcp_dst=80'.
        packet: String,
        /// The bridge's OpenFlow ports (default 1-4, plus any the flows name), e.g. '1-3,7'.
        #[arg(long)]
        ports: Option<String>,
    },
    /// The demo: hosts in namespaces ping and stream through xvs over AF_XDP.
    Demo {
        #[arg(long, default_value_t = 3)]
        hosts: usize,
        /// UDP datagrams in the burst.
        #[arg(long, default_value_t = 20000)]
        burst: u64,
        /// native, generic or best-effort.
        #[arg(long, default_value = "best-effort")]
        xdp_mode: String,
    },
    /// Traffic helpers used by the demo and tests inside namespaces.
    #[command(hide = true)]
    Util {
        #[command(subcommand)]
        cmd: UtilCmd,
    },
}

#[derive(clap::Args)]
struct ClientArgs {
    #[arg(long, default_value = DEFAULT_RUN_DIR)]
    run_dir: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Subcommand)]
enum UtilCmd {
    UdpSend {
        #[arg(long)]
        dst: String,
        #[arg(long)]
        count: u64,
        #[arg(long, default_value_t = 18)]
        size: usize,
        #[arg(long)]
        pps: Option<u64>,
        /// Number of source ports to spread over (flows).
        #[arg(long, default_value_t = 1)]
        flows: u16,
    },
    UdpRecv {
        #[arg(long)]
        port: u16,
        #[arg(long, default_value_t = 500)]
        idle_ms: u64,
        #[arg(long, default_value_t = 10000)]
        max_ms: u64,
        #[arg(long)]
        ready_file: Option<String>,
    },
    TcpRecv {
        #[arg(long)]
        port: u16,
        #[arg(long, default_value_t = 10000)]
        max_ms: u64,
        #[arg(long)]
        ready_file: Option<String>,
    },
    TcpSend {
        #[arg(long)]
        dst: String,
        #[arg(long)]
        bytes: u64,
        #[arg(long, default_value_t = 10000)]
        timeout_ms: u64,
    },
    SendRaw {
        #[arg(long)]
        dev: String,
        frames: Vec<String>,
    },
    Pktgen {
        #[arg(long)]
        dev: String,
        #[arg(long, required_unless_present = "frames_file")]
        src_mac: Option<String>,
        #[arg(long, required_unless_present = "frames_file")]
        dst_mac: Option<String>,
        /// Send these frames instead (hex, one frame per line, round robin),
        /// e.g. pre-encapsulated tunnel frames; --size, --flows and the
        /// MACs are then not used.
        #[arg(long)]
        frames_file: Option<PathBuf>,
        #[arg(long, default_value_t = 60)]
        size: usize,
        #[arg(long, default_value_t = 1)]
        flows: u32,
        /// Index of the first flow (flows first..first+flows are sent), so
        /// successive runs can offer flows the switch has not seen.
        #[arg(long, default_value_t = 0)]
        first_flow: u32,
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
        /// UDP checksums as a local stack with transmit checksum offload
        /// leaves them: the pseudo-header sum only.
        #[arg(long)]
        partial_csum: bool,
        /// Send from inside the kernel (an XDP program run in live-frames
        /// mode, kernel >= 5.18) instead of an AF_PACKET socket: several
        /// times the rate, into a veth whose peer runs XDP (an AF_XDP
        /// port). All frames must have one length.
        #[arg(long)]
        xdp: bool,
    },
    XdpSink {
        #[arg(long)]
        dev: String,
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
        #[arg(long)]
        ready_file: Option<String>,
    },
}

fn client(c: &ClientArgs, cmd: &str, args: &[String]) -> Result<()> {
    let (text, json) = xvs::control::request(&c.run_dir, cmd, args)?;
    if c.json {
        out(&format!("{}\n", serde_json::to_string_pretty(&json)?))
    } else {
        out(&text)
    }
}

/// Writes to stdout. A reader that went away (`xvs fdb-show | head`) ends
/// the output quietly, as for any Unix tool, instead of a panic.
fn out(text: &str) -> Result<()> {
    use std::io::Write;
    let mut o = std::io::stdout().lock();
    match o.write_all(text.as_bytes()).and_then(|_| o.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => Ok(r?),
    }
}

fn signal_flag() -> Result<Arc<AtomicBool>> {
    let flag = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT, signal_hook::consts::SIGHUP] {
        signal_hook::flag::register(sig, Arc::clone(&flag)).context("installing signal handler")?;
    }
    Ok(flag)
}

struct OfArgs {
    controllers: Vec<String>,
    fail_mode: String,
    datapath_id: Option<String>,
    protocols: String,
    tx_flush_us: u32,
    /// Kernel fast path: packets per second a flow needs, or `None` (off).
    offload_pps: Option<u64>,
    metrics: Option<String>,
    /// `--tx-csum-offload` ([`dpif::PmdConfig::csum_offload`]).
    csum_offload: bool,
    /// `--napi-threads` ([`xvs::switch::Switch::set_napi_threads`]).
    napi_threads: bool,
}

/// Removes a bridge's `.mgmt` and `.snoop` sockets when dropped.
struct OfSockets(PathBuf, String);

impl Drop for OfSockets {
    fn drop(&mut self) {
        for ext in ["mgmt", "snoop"] {
            let _ = std::fs::remove_file(self.0.join(format!("{}.{ext}", self.1)));
        }
    }
}

#[allow(clippy::too_many_arguments)] // reason: one parameter per command-line option
fn run_switch(
    run_dir: PathBuf,
    group: Option<u32>,
    bridge: String,
    ports: Vec<String>,
    pmd_threads: usize,
    pmd_cpus: Vec<usize>,
    poll: String,
    local_port: bool,
    mirror: Option<String>,
    flows: Option<PathBuf>,
    of: OfArgs,
) -> Result<()> {
    let poll_mode = match poll.as_str() {
        "busy" => PollMode::Busy,
        "adaptive" => PollMode::Adaptive,
        _ => anyhow::bail!("--poll: '{poll}' is not busy or adaptive"),
    };
    // Refuse bad configuration before touching any device.
    let mut specs = ports.iter().map(|p| PortSpec::parse(p)).collect::<Result<Vec<_>>>()?;
    if of.tx_flush_us > 1000 {
        anyhow::bail!("--tx-flush-us: {} is not in 0-1000", of.tx_flush_us);
    }
    for s in &mut specs {
        if s.tx_flush_us == 0 {
            s.tx_flush_us = of.tx_flush_us;
        }
    }
    let fail_mode = xvs::ofconn::FailMode::parse(&of.fail_mode).map_err(anyhow::Error::msg)?;
    for c in &of.controllers {
        xvs::ofconn::parse_target(c)?;
    }
    let dpid = match &of.datapath_id {
        Some(d) => u64::from_str_radix(d.trim_start_matches("0x"), 16)
            .ok()
            .filter(|_| d.trim_start_matches("0x").len() <= 16)
            .with_context(|| format!("--datapath-id: '{d}' is not up to 16 hex digits"))?,
        None => xvs::default_dpid(&bridge),
    };
    xvs::runfiles::check_name("bridge", &bridge)?;
    for (i, s) in specs.iter().enumerate() {
        if specs[..i].iter().any(|o| o.name == s.name) {
            anyhow::bail!("port {}: given twice", s.name);
        }
    }
    // The run directory and the instance lock come before any device is
    // touched: a second instance stops here, harming nothing of the first.
    xvs::runfiles::set_group(group);
    xvs::runfiles::prepare_dir(&run_dir, group)?;
    let _instance = xvs::runfiles::InstanceLock::acquire(&run_dir)?;
    // From here this instance owns the run directory: the bridge's
    // OpenFlow sockets there are its own and go with it, at exit and on
    // any failure below (declared after the lock, so dropped before it).
    let _of_sockets = OfSockets(run_dir.clone(), bridge.clone());
    let stop = signal_flag()?;
    let sw = Switch::start(SwitchOptions {
        bridge,
        n_pmd: pmd_threads,
        pmd_cpus,
        local_port,
        mirror,
        poll_mode,
        pmd: dpif::PmdConfig { csum_offload: of.csum_offload, ..dpif::PmdConfig::default() },
        patches: Default::default(),
    })?;
    if let Some(f) = flows {
        let text = std::fs::read_to_string(&f).with_context(|| format!("reading {}", f.display()))?;
        xvs::commands::run(&sw, "del-flows", &[String::new()])?;
        xvs::commands::run(&sw, "add-flows", &[text]).with_context(|| format!("{}", f.display()))?;
    }
    sw.set_napi_threads(of.napi_threads);
    for s in specs {
        let name = s.name.clone();
        let n = sw.add_port(s).with_context(|| format!("port {name}"))?;
        let p = sw.ports().into_iter().find(|p| p.ofport == n).expect("just added");
        eprintln!("xvs: port {n} {name}: {} {} rxq {} {}", p.info.kind, p.info.xdp_mode, p.info.n_rxq, p.info.detail);
    }
    if let Some(pps) = of.offload_pps {
        sw.enable_offload(pps)?;
    }
    let _metrics = match &of.metrics {
        Some(addr) => Some(xvs::metrics::serve(
            addr,
            std::sync::Arc::new(std::sync::RwLock::new(vec![std::sync::Arc::clone(&sw.shared)])),
        )?),
        None => None,
    };
    let ofm = xvs::ofconn::OfManager::start(
        std::sync::Arc::clone(&sw.shared),
        xvs::ofconn::OfConfig {
            dpid,
            protocols: xvs::ofconn::parse_protocols(&[of.protocols.clone()])?,
            controllers: of.controllers,
            fail_mode,
            run_dir: run_dir.clone(),
        },
        std::sync::Arc::clone(&stop),
    )?;
    let mut server = xvs::control::Server::bind(&run_dir)?;
    eprintln!(
        "xvs: bridge {} running; control socket {}; OpenFlow management socket {} (datapath id {dpid:016x})",
        sw.shared.bridge,
        xvs::control::socket_path(&run_dir).display(),
        ofm.mgmt_path().display()
    );
    let res = xvs::control::serve(&sw, &mut server, &stop);
    eprintln!("xvs: stopping");
    drop(server);
    sw.stop();
    res
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let res = match cli.cmd {
        Cmd::Switch {
            run_dir,
            group,
            bridge,
            ports,
            pmd_threads,
            pmd_cpus,
            poll,
            no_local_port,
            mirror,
            flows,
            controllers,
            fail_mode,
            datapath_id,
            protocols,
            tx_flush_us,
            db,
            xdp_offload,
            xdp_offload_pps,
            napi_threads,
            tx_csum_offload,
            metrics,
            umem_frames,
        } => match umem_frames
            .map(|n| {
                if n < xvs::ports::FRAMES_PER_QUEUE + xvs::ports::IN_FLIGHT_FRAMES {
                    anyhow::bail!(
                        "--umem-frames: {n} is less than one queue's rings ({})",
                        xvs::ports::FRAMES_PER_QUEUE + xvs::ports::IN_FLIGHT_FRAMES
                    )
                }
                xvs::ports::set_umem_frames(n);
                Ok(())
            })
            .transpose()
            .and(group.as_deref().map(xvs::runfiles::group_id).transpose())
        {
            Err(e) => Err(e),
            Ok(group) => match db {
                Some(_) if !ports.is_empty() || !controllers.is_empty() || flows.is_some() => Err(anyhow::anyhow!(
                "--db: bridges, ports, controllers and flows come from the database; drop --port/--controller/--flows"
            )),
                Some(remote) => signal_flag()
                    .and_then(|stop| xvs::db::run(&xvs::db::DbOptions { remote, run_dir, group, metrics }, &stop)),
                None if !matches!(xdp_offload.as_str(), "on" | "off") => {
                    Err(anyhow::anyhow!("--xdp-offload: '{xdp_offload}' is not on or off"))
                }
                None if !matches!(napi_threads.as_str(), "on" | "off") => {
                    Err(anyhow::anyhow!("--napi-threads: '{napi_threads}' is not on or off"))
                }
                None if !matches!(tx_csum_offload.as_str(), "on" | "off") => {
                    Err(anyhow::anyhow!("--tx-csum-offload: '{tx_csum_offload}' is not on or off"))
                }
                None => run_switch(
                    run_dir,
                    group,
                    bridge,
                    ports,
                    pmd_threads,
                    pmd_cpus,
                    poll,
                    !no_local_port,
                    mirror,
                    flows,
                    OfArgs {
                        controllers,
                        fail_mode,
                        datapath_id,
                        protocols,
                        tx_flush_us,
                        offload_pps: (xdp_offload == "on").then_some(xdp_offload_pps),
                        metrics,
                        csum_offload: tx_csum_offload == "on",
                        napi_threads: napi_threads == "on",
                    },
                ),
            },
        },
        Cmd::Show(c) => client(&c, "show", &[]),
        Cmd::DumpFlows(c) => client(&c, "dump-flows", &[]),
        Cmd::PmdStats(c) => client(&c, "pmd-stats", &[]),
        Cmd::DumpOfFlows(c) => client(&c, "dump-of-flows", &[]),
        Cmd::FdbShow(c) => client(&c, "fdb-show", &[]),
        Cmd::OffloadShow(c) => client(&c, "offload-show", &[]),
        Cmd::DumpConntrack(c) => client(&c, "dump-conntrack", &[]),
        Cmd::Ctl { cmd, args, c } => client(&c, &cmd, &args),
        Cmd::AddPort { spec, c } => client(&c, "add-port", &[spec]),
        Cmd::DelPort { name, c } => client(&c, "del-port", &[name]),
        Cmd::AddFlow { flow, c } => client(&c, "add-flow", &[flow]),
        Cmd::DelFlows { flow, c } => client(&c, "del-flows", &[flow]),
        Cmd::Exit(c) => client(&c, "exit", &[]),
        Cmd::Trace { flows, packet, ports } => {
            xvs::trace::run(&xvs::trace::TraceArgs { flows, packet, ports }).and_then(|s| out(&s))
        }
        Cmd::Demo { hosts, burst, xdp_mode } => {
            signal_flag().and_then(|f| xvs::demo::run(&xvs::demo::DemoOptions { hosts, burst, xdp_mode }, f))
        }
        Cmd::Util { cmd } => match cmd {
            UtilCmd::UdpSend { dst, count, size, pps, flows } => xvs::util::udp_send(&dst, count, size, pps, flows),
            UtilCmd::UdpRecv { port, idle_ms, max_ms, ready_file } => {
                xvs::util::udp_recv(port, idle_ms, max_ms, ready_file.as_deref())
            }
            UtilCmd::TcpRecv { port, max_ms, ready_file } => xvs::util::tcp_recv(port, max_ms, ready_file.as_deref()),
            UtilCmd::TcpSend { dst, bytes, timeout_ms } => xvs::util::tcp_send(&dst, bytes, timeout_ms),
            UtilCmd::SendRaw { dev, frames } => xvs::util::send_raw(&dev, &frames),
            UtilCmd::Pktgen {
                dev,
                src_mac,
                dst_mac,
                frames_file,
                size,
                flows,
                first_flow,
                seconds,
                partial_csum,
                xdp,
            } => match frames_file {
                Some(f) => xvs::util::pktgen_frames(&dev, &f, seconds, xdp),
                None => xvs::util::pktgen(
                    &dev,
                    src_mac.as_deref().unwrap_or_default(),
                    dst_mac.as_deref().unwrap_or_default(),
                    size,
                    first_flow,
                    flows,
                    seconds,
                    partial_csum,
                    xdp,
                ),
            },
            UtilCmd::XdpSink { dev, seconds, ready_file } => xvs::util::xdp_sink(&dev, seconds, ready_file.as_deref()),
        }
        .and_then(|s| out(&format!("{s}\n"))),
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xvs: {e:#}");
            ExitCode::FAILURE
        }
    }
}
