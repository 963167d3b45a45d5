//! A Prometheus endpoint: `xvs switch --metrics 127.0.0.1:9477` serves
//! `GET /metrics` in the text exposition format, with counters as counters
//! (`_total`, monotonic) and only current quantities as gauges, so rates
//! and alerts work as Prometheus intends (the common OVS exporters scrape
//! CLI output and export counters as gauges).
//!
//! One small thread serves one request at a time with a 2-second deadline
//! for reading and writing: a slow or stuck scraper delays only the next
//! scrape, never forwarding or the control sockets.

use crate::switch::{collect_reports_of, Shared};
use anyhow::{Context, Result};
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

fn esc(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// The metrics of `bridges`, in the text exposition format.
pub fn render(bridges: &[Arc<Shared>]) -> String {
    // (name, type, help, samples as (name suffix, labels, value)). A
    // histogram's samples are given by their full names (`..._bucket`,
    // `..._sum`, `..._count`) and grouped under the family's.
    type Family = (&'static str, &'static str, &'static str, Vec<(&'static str, String, f64)>);
    let mut families: Vec<Family> = Vec::new();
    let mut fam = |name: &'static str, kind: &'static str, help: &'static str, labels: String, v: f64| {
        let (name, suffix) = match kind {
            "histogram" => ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|sfx| name.strip_suffix(sfx).map(|n| (n, *sfx)))
                .unwrap_or((name, "")),
            _ => (name, ""),
        };
        match families.iter_mut().find(|f| f.0 == name) {
            Some(f) => f.3.push((suffix, labels, v)),
            None => families.push((name, kind, help, vec![(suffix, labels, v)])),
        }
    };
    for sh in bridges {
        let b = esc(&sh.bridge);
        for p in sh.ports.read().expect("ports lock").values() {
            let s = p.dev.lock().expect("port lock").stats();
            let l = format!("bridge=\"{b}\",port=\"{}\",ofport=\"{}\"", esc(&p.spec.name), p.ofport);
            fam(
                "xvs_port_rx_packets_total",
                "counter",
                "Packets received on the port.",
                l.clone(),
                s.rx_packets as f64,
            );
            fam("xvs_port_rx_bytes_total", "counter", "Bytes received on the port.", l.clone(), s.rx_bytes as f64);
            fam("xvs_port_tx_packets_total", "counter", "Packets sent on the port.", l.clone(), s.tx_packets as f64);
            fam("xvs_port_tx_bytes_total", "counter", "Bytes sent on the port.", l.clone(), s.tx_bytes as f64);
            fam(
                "xvs_port_rx_dropped_total",
                "counter",
                "Received packets lost before the datapath.",
                l.clone(),
                s.rx_dropped as f64,
            );
            fam(
                "xvs_port_tx_dropped_total",
                "counter",
                "Packets the port could not send.",
                l.clone(),
                s.tx_dropped as f64,
            );
            for q in p.dev.lock().expect("port lock").queue_stats() {
                let ql = format!("{l},queue=\"{}\"", q.queue);
                for (name, help, v) in [
                    ("xvs_xsk_rx_dropped_total", "AF_XDP receive drops (other than ring full).", q.rx_dropped),
                    ("xvs_xsk_rx_invalid_descs_total", "AF_XDP invalid receive descriptors.", q.rx_invalid_descs),
                    ("xvs_xsk_tx_invalid_descs_total", "AF_XDP invalid transmit descriptors.", q.tx_invalid_descs),
                    ("xvs_xsk_rx_ring_full_total", "AF_XDP receive drops: the ring was full.", q.rx_ring_full),
                    (
                        "xvs_xsk_rx_fill_ring_empty_total",
                        "Times the AF_XDP fill ring was empty.",
                        q.rx_fill_ring_empty_descs,
                    ),
                ] {
                    fam(name, "counter", help, ql.clone(), v as f64);
                }
            }
        }
        let mut megaflows = 0usize;
        for r in collect_reports_of(sh, false) {
            let l = format!("bridge=\"{b}\",pmd=\"{}\"", r.id);
            let st = &r.stats;
            fam("xvs_pmd_packets_total", "counter", "Packets a poll thread looked up.", l.clone(), st.packets as f64);
            fam(
                "xvs_pmd_simple_hits_total",
                "counter",
                "Packets served by the last megaflow of their input port (the port hint, OVS's simple match), or of their recirculation id and port.",
                l.clone(),
                st.simple_hits as f64,
            );
            fam("xvs_pmd_emc_hits_total", "counter", "Exact-match cache hits.", l.clone(), st.emc_hits as f64);
            fam("xvs_pmd_megaflow_hits_total", "counter", "Megaflow cache hits.", l.clone(), st.megaflow_hits as f64);
            fam(
                "xvs_pmd_csum_partial_total",
                "counter",
                "TCP/UDP checksums that arrived partial (left to offload by a local sender), completed in software or by the output port.",
                l.clone(),
                st.csum_partial as f64,
            );
            fam(
                "xvs_pmd_upcalls_total",
                "counter",
                "Cache misses translated by the OpenFlow layer.",
                l.clone(),
                st.upcalls as f64,
            );
            fam(
                "xvs_pmd_busy_seconds_total",
                "counter",
                "Time in iterations that moved packets.",
                l.clone(),
                r.busy_ns as f64 / 1e9,
            );
            fam(
                "xvs_pmd_idle_seconds_total",
                "counter",
                "Time in iterations that moved none.",
                l.clone(),
                r.idle_ns as f64 / 1e9,
            );
            fam(
                "xvs_pmd_mask_probes_total",
                "counter",
                "Megaflow subtables searched (the kernel datapath's masks hit).",
                l.clone(),
                st.mask_probes as f64,
            );
            fam("xvs_pmd_megaflow_masks", "gauge", "Megaflow subtables (masks).", l.clone(), r.n_masks as f64);
            const UPCALL_HELP: &str = "Time to translate a cache miss and install its megaflow.";
            let mut cum = 0;
            for (i, n) in st.upcall_hist.iter().enumerate() {
                cum += n;
                let le =
                    dpif::UPCALL_BUCKETS_US.get(i).map_or("+Inf".to_string(), |us| format!("{}", *us as f64 / 1e6));
                let bl = format!("{l},le=\"{le}\"");
                fam("xvs_pmd_upcall_duration_seconds_bucket", "histogram", UPCALL_HELP, bl, cum as f64);
            }
            let secs = st.upcall_ns as f64 / 1e9;
            fam("xvs_pmd_upcall_duration_seconds_sum", "histogram", UPCALL_HELP, l.clone(), secs);
            fam("xvs_pmd_upcall_duration_seconds_count", "histogram", UPCALL_HELP, l.clone(), cum as f64);
            for (reason, n) in &st.drops {
                fam(
                    "xvs_pmd_drops_total",
                    "counter",
                    "Packets dropped, by reason.",
                    format!("{l},reason=\"{reason}\""),
                    *n as f64,
                );
            }
            megaflows += r.n_megaflows;
        }
        let bl = format!("bridge=\"{b}\"");
        fam("xvs_megaflows", "gauge", "Megaflows in the datapath caches.", bl.clone(), megaflows as f64);
        let ct = Arc::clone(sh.ofproto.read().expect("ofproto lock").conntrack());
        fam("xvs_conntrack_connections", "gauge", "Connections in the tracker.", bl.clone(), ct.n_conns() as f64);
        fam(
            "xvs_conntrack_created_total",
            "counter",
            "Connections committed.",
            bl.clone(),
            ct.counters.created.load(Ordering::Relaxed) as f64,
        );
        if let Some(o) = sh.offload.lock().expect("offload").as_ref() {
            let k = o.kernel_stats();
            fam(
                "xvs_offload_kernel_hits_total",
                "counter",
                "Packets the XDP fast path forwarded.",
                bl.clone(),
                k.hit as f64,
            );
            fam("xvs_offload_flows", "gauge", "Flows in the XDP fast path.", bl, o.n_entries() as f64);
        }
    }
    let mut out = String::new();
    for (name, kind, help, samples) in families {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (suffix, labels, v) in samples {
            let _ = writeln!(out, "{name}{suffix}{{{labels}}} {v}");
        }
    }
    out
}

/// The bridges a metrics endpoint reports: fixed for a standalone
/// switch, replaced after each reconfiguration in `--db` mode.
pub type Bridges = Arc<RwLock<Vec<Arc<Shared>>>>;

/// A running endpoint; dropping it stops it and frees the address.
pub struct Metrics {
    pub addr: String,
    bound: std::net::SocketAddr,
    stop: Arc<AtomicBool>,
}

impl Drop for Metrics {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // Wake the accept.
        let _ = std::net::TcpStream::connect_timeout(&self.bound, Duration::from_millis(200));
    }
}

/// Serves `GET /metrics` on `addr` for `bridges` until the handle is dropped.
pub fn serve(addr: &str, bridges: Bridges) -> Result<Metrics> {
    let l = TcpListener::bind(addr).with_context(|| format!("--metrics: cannot listen on {addr}"))?;
    let bound = l.local_addr()?;
    let stop = Arc::new(AtomicBool::new(false));
    let st = Arc::clone(&stop);
    std::thread::Builder::new().name("metrics".into()).spawn(move || {
        for s in l.incoming() {
            if st.load(Ordering::Acquire) {
                return;
            }
            let Ok(mut s) = s else { continue };
            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
            let _ = s.set_write_timeout(Some(Duration::from_secs(2)));
            let mut req = [0u8; 1024];
            let n = s.read(&mut req).unwrap_or(0);
            let line = String::from_utf8_lossy(&req[..n]);
            let path = line.split_whitespace().nth(1).unwrap_or("");
            let (status, body) = if line.starts_with("GET ") && (path == "/metrics" || path.starts_with("/metrics?")) {
                let bs = bridges.read().expect("metrics bridges").clone();
                ("200 OK", render(&bs))
            } else {
                ("404 Not Found", "only GET /metrics is served\n".to_string())
            };
            let _ = write!(
                s,
                "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    })?;
    Ok(Metrics { addr: addr.to_string(), bound, stop })
}
