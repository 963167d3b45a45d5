//! A DPDK `dpdk-testpmd` driven through its interactive prompt, as the
//! virtio-net frontend of a VM in tests and benchmarks: a `net_virtio_user`
//! vdev in server mode owns the vhost-user socket, as QEMU does for
//! `dpdkvhostuserclient` ports. DPDK runs with `--no-huge` (its memory is
//! shared through memfd file descriptors), so no hugepages are reserved or
//! left behind. Test tooling, not used by the switch.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A running testpmd, driven through its interactive prompt.
pub struct Testpmd {
    child: Child,
    stdin: ChildStdin,
    /// testpmd's stdout (prompts and replies) and stderr, kept apart: a
    /// line on stderr can land in the middle of the prompt.
    out: Arc<Mutex<String>>,
    err: Arc<Mutex<String>>,
    prefix: String,
    sock: PathBuf,
    server: bool,
}

impl Testpmd {
    pub fn start(sock: &Path, prefix: &str) -> Testpmd {
        Testpmd::start_queues(sock, prefix, 1)
    }

    /// As [`Testpmd::start`], with `queues` queue pairs (virtio_user's
    /// `queues=N`, and as many receive and transmit queues in testpmd).
    pub fn start_queues(sock: &Path, prefix: &str, queues: usize) -> Testpmd {
        Testpmd::start_mode(sock, prefix, queues, true)
    }

    /// As [`Testpmd::start_queues`]; `server: false` makes testpmd the
    /// vhost-user client of a socket the switch owns (`dpdkvhostuser`).
    pub fn start_mode(sock: &Path, prefix: &str, queues: usize, server: bool) -> Testpmd {
        Testpmd::start_with(sock, prefix, queues, server, "")
    }

    /// As [`Testpmd::start_mode`], with more `net_virtio_user` device
    /// arguments (`devargs`, e.g. `mrg_rxbuf=0`).
    pub fn start_with(sock: &Path, prefix: &str, queues: usize, server: bool, devargs: &str) -> Testpmd {
        Testpmd::start_mem(sock, prefix, queues, server, devargs, &["--no-huge", "-m", "256"])
    }

    /// As [`Testpmd::start_with`], with the EAL's memory options `mem`
    /// (e.g. `--huge-dir DIR --single-file-segments` for a guest on
    /// hugepages in DPDK's dynamic memory mode) in place of `--no-huge -m 256`.
    pub fn start_mem(sock: &Path, prefix: &str, queues: usize, server: bool, devargs: &str, mem: &[&str]) -> Testpmd {
        let mut vdev = format!("net_virtio_user0,path={},server={},queues={queues}", sock.display(), server as u8);
        if !devargs.is_empty() {
            vdev = format!("{vdev},{devargs}");
        }
        let (rxq, txq) = (format!("--rxq={queues}"), format!("--txq={queues}"));
        let mut args = vec!["-l", "0,1"];
        args.extend_from_slice(mem);
        args.extend([
            "--no-pci",
            "--file-prefix",
            prefix,
            "--vdev",
            &vdev,
            "--",
            "-i",
            "--total-num-mbufs=4096",
            "--txd=256",
            "--rxd=256",
            &rxq,
            &txq,
        ]);
        eprintln!("dpdk-testpmd {}", args.join(" "));
        // testpmd's stdout is a pipe here: unbuffer it to see replies.
        let mut child = Command::new("stdbuf")
            .args(["-o0", "dpdk-testpmd"])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn dpdk-testpmd");
        let out = Arc::new(Mutex::new(String::new()));
        let err = Arc::new(Mutex::new(String::new()));
        for (r, o) in [
            (Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>, out.clone()),
            (Box::new(child.stderr.take().unwrap()), err.clone()),
        ] {
            std::thread::spawn(move || {
                let mut r = r;
                let mut buf = [0u8; 4096];
                while let Ok(n) = r.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    o.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
                }
            });
        }
        let stdin = child.stdin.take().unwrap();
        Testpmd { child, stdin, out, err, prefix: prefix.to_string(), sock: sock.to_path_buf(), server }
    }

    /// Types `c` at the prompt (ignored once testpmd has gone).
    pub fn cmd(&mut self, c: &str) {
        let _ = writeln!(self.stdin, "{c}");
        let _ = self.stdin.flush();
    }

    /// What testpmd printed on stdout.
    pub fn output(&self) -> String {
        self.out.lock().unwrap().clone()
    }

    /// Both streams, for a failure message.
    pub fn diagnostics(&self) -> String {
        format!("--- testpmd stdout\n{}\n--- testpmd stderr\n{}", self.output(), self.err.lock().unwrap())
    }

    /// Waits until stdout contains `needle` after byte `from`.
    pub fn wait_for(&self, needle: &str, from: usize, secs: u64) -> bool {
        let end = Instant::now() + Duration::from_secs(secs);
        while Instant::now() < end {
            let out = self.output();
            if out[from.min(out.len())..].contains(needle) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    /// `show port stats 0` -> (RX-packets, TX-packets).
    pub fn port_stats(&mut self) -> (u64, u64) {
        let (rx, _, tx) = self.port_stats_bytes();
        (rx, tx)
    }

    /// `show port stats 0` -> (RX-packets, RX-bytes, TX-packets).
    pub fn port_stats_bytes(&mut self) -> (u64, u64, u64) {
        let from = self.output().len();
        self.cmd("show port stats 0");
        assert!(self.wait_for("Throughput (since last show)", from, 10), "no stats:\n{}", self.diagnostics());
        let o = self.output()[from..].to_string();
        let num = |key: &str| -> u64 {
            let i = o.find(key).unwrap_or_else(|| panic!("{key} missing in {o}")) + key.len();
            o[i..].split_whitespace().next().unwrap().parse().unwrap()
        };
        (num("RX-packets:"), num("RX-bytes:"), num("TX-packets:"))
    }

    /// Ends testpmd as a user would (`quit` at its prompt), waiting up to
    /// `secs` for it to exit; killed if it does not.
    pub fn quit(&mut self, secs: u64) -> bool {
        self.cmd("stop");
        self.cmd("quit");
        let end = Instant::now() + Duration::from_secs(secs);
        while Instant::now() < end {
            if let Ok(Some(_)) = self.child.try_wait() {
                self.kill();
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.kill();
        false
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills testpmd (SIGKILL: no goodbye to the switch) and removes what
    /// it leaves behind.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(format!("/var/run/dpdk/{}", self.prefix));
        // Only the socket it owns (server mode).
        if self.server {
            let _ = std::fs::remove_file(&self.sock);
        }
    }
}

impl Drop for Testpmd {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Whether testpmd can run here (root and `dpdk-testpmd` installed);
/// says why not on stderr.
pub fn usable() -> bool {
    let root = std::fs::read_to_string("/proc/self/status")
        .map(|s| s.lines().any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0")))
        .unwrap_or(false);
    let have =
        Command::new("dpdk-testpmd").arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok();
    if !root || !have {
        eprintln!("skipped: needs root and dpdk-testpmd (apt-get install dpdk-dev)");
    }
    root && have
}

/// A fresh socket path for test `name`.
pub fn sock_path(name: &str) -> PathBuf {
    let p = PathBuf::from(format!("/tmp/xvs-vhost-{name}-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p
}
