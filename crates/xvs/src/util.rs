//! Small traffic tools the demo and tests run inside namespaces
//! (`xvs util ...`), so they need nothing beyond the xvs binary.

use anyhow::{bail, Context, Result};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

/// Sends `count` UDP datagrams of `payload` bytes to `dst` as fast as the
/// socket allows, or paced to `pps` packets per second if given.
pub fn udp_send(dst: &str, count: u64, payload: usize, pps: Option<u64>, sport_spread: u16) -> Result<String> {
    let buf = vec![0x5au8; payload];
    let mut socks = Vec::new();
    for _ in 0..sport_spread.max(1) {
        let s = UdpSocket::bind("0.0.0.0:0").context("binding UDP socket")?;
        s.connect(dst).with_context(|| format!("connecting to {dst}"))?;
        socks.push(s);
    }
    let start = Instant::now();
    let mut sent = 0u64;
    let mut errors = 0u64;
    for i in 0..count {
        if let Some(rate) = pps {
            let due = Duration::from_secs_f64(i as f64 / rate as f64);
            let el = start.elapsed();
            if due > el {
                std::thread::sleep(due - el);
            }
        }
        match socks[(i % socks.len() as u64) as usize].send(&buf) {
            Ok(_) => sent += 1,
            Err(_) => errors += 1,
        }
    }
    let secs = start.elapsed().as_secs_f64();
    Ok(format!("sent {sent} errors {errors} seconds {secs:.3}"))
}

/// Counts UDP datagrams arriving on `port` until `idle_ms` passes without
/// one (after the first) or `max_ms` in total.
pub fn udp_recv(port: u16, idle_ms: u64, max_ms: u64, ready_file: Option<&str>) -> Result<String> {
    let s = UdpSocket::bind(("0.0.0.0", port)).with_context(|| format!("binding UDP port {port}"))?;
    s.set_read_timeout(Some(Duration::from_millis(50)))?;
    if let Some(f) = ready_file {
        std::fs::write(f, "ready")?;
    }
    let start = Instant::now();
    let mut last = None::<Instant>;
    let mut n = 0u64;
    let mut bytes = 0u64;
    let mut buf = [0u8; 65536];
    loop {
        match s.recv(&mut buf) {
            Ok(len) => {
                n += 1;
                bytes += len as u64;
                last = Some(Instant::now());
            }
            Err(_) => {
                if last.is_some_and(|l| l.elapsed() >= Duration::from_millis(idle_ms)) {
                    break;
                }
            }
        }
        if start.elapsed() >= Duration::from_millis(max_ms) {
            break;
        }
    }
    Ok(format!("received {n} bytes {bytes}"))
}

/// Accepts one TCP connection on `port` and counts the bytes until EOF.
pub fn tcp_recv(port: u16, max_ms: u64, ready_file: Option<&str>) -> Result<String> {
    // IPv6 and IPv4 (v4-mapped) on one socket, or IPv4 alone where the
    // namespace has no IPv6.
    let l = TcpListener::bind(("::", port))
        .or_else(|_| TcpListener::bind(("0.0.0.0", port)))
        .with_context(|| format!("binding TCP port {port}"))?;
    if let Some(f) = ready_file {
        std::fs::write(f, "ready")?;
    }
    l.set_nonblocking(true)?;
    let start = Instant::now();
    let mut conn = loop {
        match l.accept() {
            Ok((c, _)) => break c,
            Err(_) if start.elapsed() < Duration::from_millis(max_ms) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => bail!("no connection within {max_ms} ms: {e}"),
        }
    };
    conn.set_nonblocking(false)?;
    let mut buf = vec![0u8; 65536];
    let mut total = 0u64;
    let t0 = Instant::now();
    loop {
        // `max_ms` bounds the whole receive, not each read: a stream that
        // trickles (a path losing most segments) must not hold a test.
        let left = Duration::from_millis(max_ms).saturating_sub(start.elapsed());
        if left.is_zero() {
            bail!("receive incomplete after {max_ms} ms: {total} bytes");
        }
        conn.set_read_timeout(Some(left))?;
        match conn.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => total += n as u64,
            Err(e) => bail!("receive failed after {total} bytes: {e}"),
        }
    }
    Ok(format!("received {total} bytes in {:.3} s", t0.elapsed().as_secs_f64()))
}

/// Connects to `dst` and sends `bytes` bytes.
pub fn tcp_send(dst: &str, bytes: u64, timeout_ms: u64) -> Result<String> {
    let addr = dst.parse().with_context(|| format!("bad address {dst}"))?;
    let mut c = TcpStream::connect_timeout(&addr, Duration::from_millis(timeout_ms))
        .with_context(|| format!("connecting to {dst}"))?;
    c.set_write_timeout(Some(Duration::from_millis(timeout_ms)))?;
    let chunk = vec![0xa5u8; 64 * 1024];
    let mut left = bytes;
    let t0 = Instant::now();
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        c.write_all(&chunk[..n]).context("sending")?;
        left -= n as u64;
    }
    c.shutdown(std::net::Shutdown::Write).ok();
    // Wait for the peer to close so every byte is known delivered.
    let mut b = [0u8; 16];
    let _ = c.set_read_timeout(Some(Duration::from_millis(timeout_ms)));
    let _ = c.read(&mut b);
    Ok(format!("sent {bytes} bytes in {:.3} s", t0.elapsed().as_secs_f64()))
}

/// Writes raw Ethernet frames given as hex strings out of `ifname` with a
/// packet socket (for malformed-frame tests).
pub fn send_raw(ifname: &str, frames_hex: &[String]) -> Result<String> {
    let frames: Vec<Vec<u8>> = frames_hex
        .iter()
        .map(|h| (0..h.len() / 2).map(|i| u8::from_str_radix(&h[2 * i..2 * i + 2], 16)).collect::<Result<Vec<u8>, _>>())
        .collect::<Result<_, _>>()
        .context("frames must be hex")?;
    use netdev::Netdev;
    let mut port = netdev_linux::AfPacketPort::open(ifname).with_context(|| format!("opening {ifname}"))?;
    let mut pkts: Vec<netdev::Packet> = frames.iter().map(|f| netdev::Packet::from_slice(f)).collect();
    port.tx_batch(&mut pkts)?;
    let s = port.stats();
    if s.tx_packets != frames.len() as u64 {
        bail!("sent {} of {} frames", s.tx_packets, frames.len());
    }
    Ok(format!("sent {} frames", s.tx_packets))
}

/// The `i`th of `n` flows: source and destination IPv4 addresses drawn
/// from two pools of 1,000 (as the OVS AF_XDP paper's tests do), chosen by
/// `i mod 1000`, and a UDP source port chosen by `i / 1000`, so rule tables
/// on L3 or L4 see `n` distinct 5-tuples (up to 50 million) and every
/// combination of destination and source port occurs.
pub fn flow_tuple(i: u32) -> (u32, u32, u16) {
    let a = (i % 1000).wrapping_mul(7919) % 1000;
    let b = (i % 1000).wrapping_mul(104_729) % 1000;
    (
        0x0a01_0000 | (a / 250) << 8 | (a % 250 + 1),
        0x0a02_0000 | (b / 250) << 8 | (b % 250 + 1),
        1024 + ((i / 1000) % 50_000) as u16,
    )
}

/// Sends UDP frames of `size` bytes round-robin over flows `first ..
/// first + flows` (see [`flow_tuple`]) out of `dev` through an AF_PACKET
/// socket for `seconds`. Prints what it sent. With `partial_csum` the UDP
/// checksum field holds only the pseudo-header sum, as a local stack with
/// transmit checksum offload leaves it (Linux CHECKSUM_PARTIAL).
#[allow(clippy::too_many_arguments)] // reason: one per command-line option of `xvs util pktgen`
pub fn pktgen(
    dev: &str,
    src_mac: &str,
    dst_mac: &str,
    size: usize,
    first: u32,
    flows: u32,
    seconds: f64,
    partial_csum: bool,
    xdp: bool,
) -> Result<String> {
    let mac = |m: &str| -> Result<[u8; 6]> {
        let v = flow::matching::parse_mac(m).with_context(|| format!("bad MAC {m}"))?;
        Ok(flow::key::mac_to_bytes(v))
    };
    let (src, dst) = (mac(src_mac)?, mac(dst_mac)?);
    if !(60..=1514).contains(&size) {
        bail!("--size must be 60-1514 (frame without FCS)");
    }
    let frames: Vec<Vec<u8>> = (first..first.saturating_add(flows.max(1)))
        .map(|i| {
            let (s, d, sp) = flow_tuple(i);
            let mut f = wire::build::Frame::new(src, dst)
                .l3(wire::build::L3::ipv4(s, d))
                .l4(wire::build::L4::Udp { src: sp, dst: 5001 })
                .pad_to(size)
                .build();
            if partial_csum {
                let udp_len = f.len() - 34;
                f[40..42].copy_from_slice(&wire::checksum::partial_v4(s, d, 17, udp_len).to_be_bytes());
            }
            f
        })
        .collect();
    send_for(dev, &frames, seconds, xdp)
}

/// Sends the frames in `path` (hex, one frame per line) round robin out of
/// `dev` through an AF_PACKET socket for `seconds`, as [`pktgen`] does:
/// for frames pktgen cannot build, such as pre-encapsulated tunnel frames.
pub fn pktgen_frames(dev: &str, path: &std::path::Path, seconds: f64, xdp: bool) -> Result<String> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let frames = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|h| {
            // An odd digit count leaves a last pair that does not parse.
            (0..h.len().div_ceil(2))
                .map(|i| u8::from_str_radix(h.get(2 * i..2 * i + 2).unwrap_or("x"), 16))
                .collect::<Result<Vec<u8>, _>>()
        })
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("{}: frames must be hex, one a line", path.display()))?;
    if frames.is_empty() {
        bail!("{}: no frames", path.display());
    }
    send_for(dev, &frames, seconds, xdp)
}

/// Sends `frames` round robin out of `dev` for `seconds`: through an
/// AF_PACKET socket, or with `xdp` from inside the kernel ([`bpf::XdpGen`]:
/// several times the rate, into a veth whose peer runs XDP, such as a
/// switch's AF_XDP port; frames the peer cannot take are dropped uncounted
/// here, so count at the receiver).
fn send_for(dev: &str, frames: &[Vec<u8>], seconds: f64, xdp: bool) -> Result<String> {
    if xdp {
        return send_for_xdp(dev, frames, seconds);
    }
    use netdev::Netdev;
    let frames: Vec<netdev::Packet> = frames.iter().map(|f| netdev::Packet::from_slice(f)).collect();
    let mut port = netdev_linux::AfPacketPort::open(dev).with_context(|| format!("opening {dev}"))?;
    let start = Instant::now();
    let mut batch = Vec::with_capacity(64);
    let mut i = 0usize;
    while start.elapsed().as_secs_f64() < seconds {
        for _ in 0..64 {
            batch.push(frames[i % frames.len()].clone());
            i += 1;
        }
        port.tx_batch(&mut batch)?;
    }
    let st = port.stats();
    let secs = start.elapsed().as_secs_f64();
    Ok(format!(
        "sent {} dropped {} seconds {secs:.3} pps {:.0}",
        st.tx_packets,
        st.tx_dropped,
        st.tx_packets as f64 / secs
    ))
}

fn send_for_xdp(dev: &str, frames: &[Vec<u8>], seconds: f64) -> Result<String> {
    let ifindex = bpf::ifindex(dev).with_context(|| format!("--dev {dev}"))?;
    let mut g = bpf::XdpGen::load(ifindex, frames).context("loading the XDP generator")?;
    // Each call ends with a pause of several milliseconds (the kernel
    // tears down the run's page pool), during which nothing is sent: a first
    // short call measures the rate, then one call covers the rest of the
    // run, so the switch sees a steady stream rather than bursts with gaps.
    let start = Instant::now();
    let mut sent = 0u64;
    let mut count: u64 = 1 << 16;
    loop {
        let t = Instant::now();
        g.send(count as u32, 0).with_context(|| format!("sending to {dev}"))?;
        sent += count;
        let left = seconds - start.elapsed().as_secs_f64();
        if left <= 0.0 {
            break;
        }
        let rate = count as f64 / t.elapsed().as_secs_f64().max(1e-6);
        count = ((rate * left) as u64).clamp(1 << 12, u32::MAX as u64);
    }
    let secs = start.elapsed().as_secs_f64();
    // The kernel does not report frames the device refused (a veth whose
    // peer runs no XDP and no GRO takes none): say so, count at the sink.
    Ok(format!(
        "sent {sent} dropped 0 seconds {secs:.3} pps {:.0} (xdp: handed to {dev}; what it could not take is \
         dropped uncounted, count at the receiver)",
        sent as f64 / secs
    ))
}

/// Attaches the counting XDP sink to `dev`, waits `seconds`, prints the
/// packets and bytes it counted.
pub fn xdp_sink(dev: &str, seconds: f64, ready_file: Option<&str>) -> Result<String> {
    let sink =
        bpf::XdpSink::attach(dev, bpf::XdpMode::BestEffort).with_context(|| format!("attaching sink to {dev}"))?;
    if let Some(f) = ready_file {
        std::fs::write(f, "ready")?;
    }
    std::thread::sleep(Duration::from_secs_f64(seconds));
    let (p, b) = sink.counts()?;
    Ok(format!("received {p} bytes {b} mode {}", sink.mode().as_str()))
}
