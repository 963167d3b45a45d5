//! What the defaults matrices' cells share: traffic scripts run with
//! python3 inside a host's namespace, each printing "ready" once it
//! listens (receivers) and one result line at the end.
#![allow(dead_code)]

use std::process::{Child, Command, Stdio};

/// Receives one TCP connection on ADDR PORT; prints "BYTES SHA256".
pub const TCP_RX: &str = r#"
import socket, sys, hashlib
addr, port = sys.argv[1], int(sys.argv[2])
fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
l = socket.socket(fam)
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind((addr, port)); l.listen(1); l.settimeout(30)
print("ready", flush=True)
c, _ = l.accept(); c.settimeout(30)
h = hashlib.sha256(); n = 0
while True:
    d = c.recv(1 << 20)
    if not d:
        break
    h.update(d); n += len(d)
print(n, h.hexdigest(), flush=True)
"#;

/// Sends a seeded pseudo-random stream to ADDR PORT for SECS seconds or
/// until TOTAL bytes (0: no limit); prints "BYTES SHA256".
pub const TCP_TX: &str = r#"
import socket, sys, hashlib, random, time
addr, port, secs, total = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
s = socket.socket(fam); s.settimeout(30)
s.connect((addr, port))
r = random.Random(port); h = hashlib.sha256(); n = 0; t = time.time()
while time.time() - t < secs and (total == 0 or n < total):
    b = r.randbytes(65536 if total == 0 else min(65536, total - n)); s.sendall(b); h.update(b); n += len(b)
s.shutdown(socket.SHUT_WR)
s.recv(1)
print(n, h.hexdigest(), flush=True)
"#;

/// Receives COUNT datagrams on ADDR PORT, each checked for its number,
/// size and pattern; prints "INTACT DAMAGED".
pub const UDP_RX: &str = r#"
import socket, sys, struct
addr, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
s = socket.socket(fam, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
s.bind((addr, port)); s.settimeout(10)
print("ready", flush=True)
ok = bad = 0; seen = set()
try:
    while len(seen) < count:
        d = s.recv(65536)
        s.settimeout(2)
        if len(d) < 8:
            bad += 1; continue
        seq, size = struct.unpack("!II", d[:8])
        want = bytes((seq * 7 + i) & 255 for i in range(size - 8))
        if size != len(d) or d[8:] != want or seq in seen:
            bad += 1
        else:
            ok += 1; seen.add(seq)
except socket.timeout:
    pass
print(ok, bad, flush=True)
"#;

/// Sends COUNT datagrams to ADDR PORT, sizes cycling through SIZES (comma
/// separated), each carrying its number, size and pattern.
pub const UDP_TX: &str = r#"
import socket, sys, struct, time
addr, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
sizes = [int(x) for x in sys.argv[4].split(",")]
fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
s = socket.socket(fam, socket.SOCK_DGRAM)
for seq in range(count):
    size = sizes[seq % len(sizes)]
    s.sendto(struct.pack("!II", seq, size) + bytes((seq * 7 + i) & 255 for i in range(size - 8)), (addr, port))
    if seq % 20 == 19:
        time.sleep(0.003)
print("sent", count, flush=True)
"#;

/// "on" or "off", as ethtool takes them.
pub fn on(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}

/// A matrix row's settings, one fixed-width line: the sender's transmit
/// checksum offload and TSO/GSO, the receiver's GRO, IP version, tagging,
/// MTU.
pub fn settings_label(tx: bool, tso: bool, gro: bool, v6: bool, vlan: bool, jumbo: bool) -> String {
    format!(
        "tx {:<3} tso {:<3} gro {:<3} {} {:<6} mtu {}",
        on(tx),
        on(tso),
        on(gro),
        if v6 { "IPv6" } else { "IPv4" },
        if vlan { "vlan10" } else { "untag" },
        if jumbo { 9000 } else { 1500 }
    )
}

/// Runs python `code` with `args` in namespace `ns`.
pub fn py(ns: &str, code: &str, args: &[&str]) -> Child {
    Command::new("ip")
        .args(["netns", "exec", ns, "python3", "-c", code])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 starts")
}

/// Waits for a receiver's "ready".
pub fn wait_ready(c: &mut Child) {
    use std::io::BufRead;
    let out = c.stdout.as_mut().expect("stdout");
    let mut line = String::new();
    let _ = std::io::BufReader::new(out).read_line(&mut line);
    assert_eq!(line.trim(), "ready", "receiver did not start");
}

/// A script's last line of output; asserts that it succeeded.
pub fn finish(c: Child) -> String {
    let o = c.wait_with_output().expect("python3 runs");
    let out = String::from_utf8_lossy(&o.stdout).trim().to_string();
    assert!(o.status.success(), "{out} {}", String::from_utf8_lossy(&o.stderr));
    out.lines().last().unwrap_or("").to_string()
}

/// The checksum errors a namespace's stack counted (nstat's absolute
/// counters: TcpInCsumErrors, UdpInCsumErrors, Udp6InCsumErrors).
pub fn csum_errors(ns: &str) -> u64 {
    let out = xvs::netns::sh(&["ip", "netns", "exec", ns, "nstat", "-asz"]).unwrap_or_default();
    out.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let (k, v) = (w.next()?, w.next()?);
            matches!(k, "TcpInCsumErrors" | "UdpInCsumErrors" | "Udp6InCsumErrors").then(|| v.parse::<u64>().ok())?
        })
        .sum()
}
