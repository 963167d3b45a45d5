//! The Prometheus endpoint, read by a real Prometheus client parser.
//!
//! Plan: two hosts, `xvs switch --metrics 127.0.0.1:PORT`, a few pings;
//! Debian's python3-prometheus-client parses /metrics; the port counters
//! are counters (`_total`, monotonic between two scrapes) and agree with
//! the traffic sent. Removed also on failure. Needs root.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use xvs::netns::Host;

const PARSE: &str = r#"
import sys, json, urllib.request
from prometheus_client.parser import text_string_to_metric_families
text = urllib.request.urlopen(sys.argv[1], timeout=5).read().decode()
out = {}
for fam in text_string_to_metric_families(text):
    for s in fam.samples:
        key = s.name + "|" + ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
        out[key] = [fam.type, s.value]
print(json.dumps(out))
"#;

fn scrape(url: &str) -> serde_json::Value {
    let o = Command::new("/usr/bin/python3").args(["-c", PARSE, url]).output().unwrap();
    assert!(o.status.success(), "parser: {}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

fn get(m: &serde_json::Value, prefix: &str) -> (String, f64) {
    let (_, v) =
        m.as_object().unwrap().iter().find(|(k, _)| k.starts_with(prefix)).unwrap_or_else(|| panic!("{prefix} in {m}"));
    (v[0].as_str().unwrap().to_string(), v[1].as_f64().unwrap())
}

#[test]
fn metrics_parse_with_the_prometheus_client_and_count_traffic() {
    std::env::set_var("XVS_BIN", env!("CARGO_BIN_EXE_xvs"));
    let id = std::process::id() % 1000;
    let h1 = Host::create(&format!("xvsmt{id}h1"), &format!("xm{id}h1"), "10.84.0.1/24", 1).unwrap();
    let h2 = Host::create(&format!("xvsmt{id}h2"), &format!("xm{id}h2"), "10.84.0.2/24", 1).unwrap();
    let run = format!("/tmp/xvs-mt-{id}");
    let port = 19000 + (std::process::id() % 1000) as u16;
    let addr = format!("127.0.0.1:{port}");
    let mut child = Command::new(env!("CARGO_BIN_EXE_xvs"))
        .args([
            "switch",
            "--run-dir",
            &run,
            "--bridge",
            "brmt",
            "--no-local-port",
            "--port",
            &h1.port,
            "--port",
            &h2.port,
        ])
        .args(["--metrics", &addr])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    struct Kill<'a>(&'a mut std::process::Child, String);
    impl Drop for Kill<'_> {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
            let _ = std::fs::remove_dir_all(&self.1);
        }
    }
    let _k = Kill(&mut child, run.clone());
    let t0 = Instant::now();
    while std::net::TcpStream::connect(&addr).is_err() && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let url = format!("http://{addr}/metrics");
    let before = scrape(&url);
    assert_eq!(h1.ping(&h2.ip, 5).unwrap(), 5);
    let after = scrape(&url);
    let rx = format!("xvs_port_rx_packets_total|bridge=brmt,ofport=1,port={}", h1.port);
    let (kind, rx1) = get(&after, &rx);
    assert_eq!(kind, "counter");
    let rx0 = before.get(&rx).and_then(|v| v[1].as_f64()).unwrap_or(0.0);
    assert!(rx1 - rx0 >= 5.0, "five echo requests (and an ARP) entered on port 1: {rx0} -> {rx1}");
    assert_eq!(get(&after, "xvs_pmd_emc_hits_total").0, "counter");
    assert_eq!(get(&after, "xvs_megaflows").0, "gauge");
    assert_eq!(get(&after, "xvs_conntrack_connections").0, "gauge");
    // The upcall latency histogram: the pings' first packets (ARP, ICMP)
    // went through the slow path; +Inf holds them all.
    let sum_of = |prefix: &str| -> f64 {
        after
            .as_object()
            .unwrap()
            .iter()
            .filter(|(k, _)| k.starts_with(prefix))
            .map(|(_, v)| v[1].as_f64().unwrap())
            .sum()
    };
    assert_eq!(get(&after, "xvs_pmd_upcall_duration_seconds_count").0, "histogram");
    let count = sum_of("xvs_pmd_upcall_duration_seconds_count|");
    assert!(count >= 2.0, "upcalls counted: {count}");
    assert!(sum_of("xvs_pmd_upcall_duration_seconds_bucket|") >= count, "buckets are cumulative");
    let inf: f64 = after
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| k.starts_with("xvs_pmd_upcall_duration_seconds_bucket|") && k.contains("le=+Inf"))
        .map(|(_, v)| v[1].as_f64().unwrap())
        .sum();
    assert_eq!(inf, count, "the +Inf bucket holds every upcall");
    assert!(sum_of("xvs_pmd_upcall_duration_seconds_sum|") > 0.0);
    assert_eq!(get(&after, "xvs_pmd_mask_probes_total").0, "counter");
    let q = format!("xvs_xsk_rx_ring_full_total|bridge=brmt,ofport=1,port={},queue=0", h1.port);
    assert_eq!(get(&after, &q).0, "counter", "per-queue AF_XDP counters");
    // Anything but GET /metrics is a 404, and the endpoint keeps serving.
    let o = Command::new("/usr/bin/python3")
        .args(["-c", "import sys,urllib.request,urllib.error\ntry:\n urllib.request.urlopen(sys.argv[1], timeout=5)\nexcept urllib.error.HTTPError as e:\n print(e.code)", &format!("http://{addr}/other")])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "404");
    scrape(&url);
}
