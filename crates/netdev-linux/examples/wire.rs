//! A 2-port AF_XDP "wire": everything received on one device is sent on
//! the other, with no lookup. For benchmarks and debugging.
//!
//! ```text
//! cargo run --release -p netdev-linux --example wire -- IF_A IF_B [--copy] [--generic] [--seconds N]
//! ```
//! `--copy` gives each port a private UMEM (every packet copied); the
//! default shares one UMEM (descriptors move, bytes do not). `--generic`
//! forces generic XDP. Prints per-second packet rates and, at the end, the
//! average busy time per forwarded packet.

use netdev::{Netdev, Packet};
use netdev_linux::{AfxdpConfig, AfxdpPort, UmemConfig, UmemHandle, XdpMode};
use std::time::{Duration, Instant};

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let devs: Vec<&String> = args.iter().filter(|a| !a.starts_with("--")).collect();
    let mut seconds: Option<u64> = None;
    if let Some(i) = args.iter().position(|a| a == "--seconds") {
        seconds = args.get(i + 1).and_then(|s| s.parse().ok());
    }
    let devs: Vec<&String> =
        devs.into_iter().filter(|d| seconds.is_none() || d.parse::<u64>().ok() != seconds).collect();
    if devs.len() != 2 {
        eprintln!("usage: wire IF_A IF_B [--copy] [--generic] [--seconds N]");
        std::process::exit(2);
    }
    let copy = args.iter().any(|a| a == "--copy");
    let generic = args.iter().any(|a| a == "--generic");
    let mut cfg =
        AfxdpConfig { xdp_mode: if generic { XdpMode::Generic } else { XdpMode::BestEffort }, ..Default::default() };
    if !copy {
        cfg.shared_umem = Some(UmemHandle::new(UmemConfig { nframes: 16384, ..Default::default() })?);
    }
    let mut ports = [AfxdpPort::open(devs[0], cfg.clone())?, AfxdpPort::open(devs[1], cfg)?];
    for p in &ports {
        let i = p.info();
        eprintln!("{}: {} {} rxq={} {}", p.name(), i.kind, i.xdp_mode, i.n_rxq, i.detail);
    }
    let mut batch: Vec<Packet> = Vec::with_capacity(netdev::BATCH);
    let start = Instant::now();
    let mut last = start;
    let mut last_fwd = 0u64;
    let mut fwd = 0u64;
    let mut busy = Duration::ZERO;
    let mut batches = 0u64;
    loop {
        let t0 = Instant::now();
        let mut n_total = 0;
        for (from, to) in [(0usize, 1usize), (1, 0)] {
            for q in 0..ports[from].n_rxq() {
                let n = ports[from].rx_batch(q, &mut batch, netdev::BATCH)?;
                if n > 0 {
                    batches += 1;
                    n_total += n;
                    ports[to].tx_batch(&mut batch)?;
                }
            }
        }
        for p in ports.iter_mut() {
            p.poll_housekeeping();
        }
        if n_total > 0 {
            fwd += n_total as u64;
            busy += t0.elapsed();
        }
        let now = Instant::now();
        if now - last >= Duration::from_secs(1) {
            let rate = (fwd - last_fwd) as f64 / (now - last).as_secs_f64();
            let s: Vec<_> = ports.iter().map(|p| p.stats()).collect();
            eprintln!(
                "{:.0} pps  rx {}/{}  tx {}/{}  drops rx {}/{} tx {}/{}",
                rate,
                s[0].rx_packets,
                s[1].rx_packets,
                s[0].tx_packets,
                s[1].tx_packets,
                s[0].rx_dropped,
                s[1].rx_dropped,
                s[0].tx_dropped,
                s[1].tx_dropped
            );
            last = now;
            last_fwd = fwd;
            if seconds.is_some_and(|s| (now - start).as_secs() >= s) {
                break;
            }
        }
    }
    if fwd > 0 {
        eprintln!(
            "forwarded {fwd} packets, {:.0} ns busy per packet, {:.1} packets per batch, tx paths {:?} {:?}",
            busy.as_nanos() as f64 / fwd as f64,
            fwd as f64 / batches.max(1) as f64,
            ports[0].tx_path_counters(),
            ports[1].tx_path_counters()
        );
    }
    Ok(())
}
