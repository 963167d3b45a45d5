//! The vhost-user port against a frontend no one here wrote: DPDK's
//! `dpdk-testpmd` with a `net_virtio_user` vdev in server mode (it owns the
//! socket, as QEMU does for `dpdkvhostuserclient`). Needs root and
//! `dpdk-testpmd` (Debian's dpdk-dev); DPDK runs with `--no-huge`, its
//! memory shared with the port through memfd file descriptors, so no
//! hugepages are reserved.

use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use netdev::{Netdev, Packet};
use netdev_vhost::testpmd::{sock_path, usable, Testpmd};
use netdev_vhost::VhostUserClientPort;

fn wait_connected(port: &VhostUserClientPort, pmd: &Testpmd, secs: u64) {
    let end = Instant::now() + Duration::from_secs(secs);
    while !port.is_connected() {
        assert!(
            Instant::now() < end,
            "port never came up ({}); testpmd said:\n{}",
            port.last_error(),
            pmd.diagnostics()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// testpmd (`devargs` added to its vdev) owning `sock`, and a port
/// connected to it.
fn connected(sock: &Path, prefix: &str, name: &str, devargs: &str) -> (Testpmd, VhostUserClientPort) {
    let pmd = Testpmd::start_with(sock, prefix, 1, true, devargs);
    let port = VhostUserClientPort::new(name, sock).unwrap();
    assert!(pmd.wait_for("testpmd>", 0, 20), "testpmd did not start ({}):\n{}", port.last_error(), pmd.diagnostics());
    wait_connected(&port, &pmd, 10);
    (pmd, port)
}

/// Polls the port for `dur`, counting what it receives.
fn receive_for(port: &mut VhostUserClientPort, dur: Duration) -> u64 {
    let end = Instant::now() + dur;
    let mut got = 0;
    let mut v = Vec::new();
    while Instant::now() < end {
        v.clear();
        got += port.rx_batch(0, &mut v, 32).unwrap() as u64;
        if v.is_empty() {
            std::thread::yield_now();
        }
    }
    got
}

fn sized(len: usize) -> Packet {
    let mut f = vec![0u8; len];
    f[..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 1]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 2]);
    f[12..14].copy_from_slice(&[0x88, 0xb5]);
    Packet::from_slice(&f)
}

fn frame(i: u32) -> Packet {
    let mut p = sized(64);
    p.data_mut()[14..18].copy_from_slice(&i.to_be_bytes());
    p
}

/// Sends `n` frames; a frame the guest had no free receive buffer for is
/// dropped and counted by the port, then sent again (a bounded number of
/// times: testpmd shares two cores with everything else here).
fn send(port: &mut VhostUserClientPort, n: u32) {
    for i in 0..n {
        for _ in 0..1000 {
            let d = port.stats().tx_dropped;
            port.tx_batch(&mut vec![frame(i)]).unwrap();
            if port.stats().tx_dropped == d {
                break;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

/// testpmd -> port (txonly) and port -> testpmd (rxonly), counted at both ends.
fn exchange(port: &mut VhostUserClientPort, pmd: &mut Testpmd, label: &str) {
    pmd.cmd("set fwd txonly");
    pmd.cmd("start");
    let mut got = receive_for(port, Duration::from_millis(700));
    let end = Instant::now() + Duration::from_secs(10);
    while got == 0 && Instant::now() < end {
        got += receive_for(port, Duration::from_millis(200));
    }
    pmd.cmd("stop");
    std::thread::sleep(Duration::from_millis(200));
    got_more(port, &mut Vec::new());
    let (_, pmd_tx) = pmd.port_stats();
    let st = port.stats();
    eprintln!("{label}: testpmd TX-packets {pmd_tx}, port rx_packets {} (this round {got})", st.rx_packets);
    assert!(got > 0, "{label}: port received nothing; testpmd:\n{}", pmd.diagnostics());

    pmd.cmd("clear port stats 0");
    pmd.cmd("set fwd rxonly");
    pmd.cmd("start");
    std::thread::sleep(Duration::from_millis(200));
    let before = port.stats().tx_packets;
    let dropped_before = port.stats().tx_dropped;
    send(port, 1000);
    // testpmd busy-polls, but on a loaded two-core machine it can lag:
    // wait (bounded) until it has counted everything the port sent.
    let sent = port.stats().tx_packets - before;
    let end = Instant::now() + Duration::from_secs(10);
    let mut pmd_rx = pmd.port_stats().0;
    while pmd_rx < sent && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(100));
        pmd_rx = pmd.port_stats().0;
    }
    pmd.cmd("stop");
    let st = port.stats();
    eprintln!(
        "{label}: port tx_packets +{sent} (tx_dropped +{}), testpmd RX-packets {pmd_rx}",
        st.tx_dropped - dropped_before
    );
    assert!(sent > 0, "{label}: port sent nothing");
    assert_eq!(pmd_rx, sent, "{label}: testpmd counted what the port sent");
}

fn got_more(port: &mut VhostUserClientPort, v: &mut Vec<Packet>) {
    while port.rx_batch(0, v, 32).unwrap() > 0 {
        v.clear();
    }
}

/// Each testpmd busy-polls both cores (`-l 0,1`): two at once starve each
/// other and the port, so the tests that start one take turns.
static TESTPMD: Mutex<()> = Mutex::new(());

#[test]
fn vhost_testpmd_both_directions() {
    if !usable() {
        return;
    }
    let _turn = TESTPMD.lock().unwrap_or_else(|e| e.into_inner());
    // The port offers VIRTIO_F_IN_ORDER (it uses buffers in the order they
    // were made available); testpmd accepts it unless told not to. Both
    // ways, frames flow and are counted at both ends.
    const IN_ORDER: u64 = 1 << 35;
    for (devargs, in_order) in [("", true), ("in_order=0", false)] {
        let label = if in_order { "in order" } else { "out of order" };
        let sock = sock_path(if in_order { "both" } else { "both-ooo" });
        let prefix = if in_order { "xvsvh-both" } else { "xvsvh-both-ooo" };
        let (mut pmd, mut port) = connected(&sock, prefix, "vh-both", devargs);
        assert_eq!(port.acked_features() & IN_ORDER != 0, in_order, "{label}: {:#x}", port.acked_features());
        exchange(&mut port, &mut pmd, label);
        assert_eq!(port.offload_refused(), 0);
    }
}

#[test]
fn vhost_testpmd_reconnect() {
    if !usable() {
        return;
    }
    let _turn = TESTPMD.lock().unwrap_or_else(|e| e.into_inner());
    let sock = sock_path("reconn");
    let (mut pmd, mut port) = connected(&sock, "xvsvh-reconn", "vh-reconn", "");
    exchange(&mut port, &mut pmd, "first");

    pmd.kill();
    let end = Instant::now() + Duration::from_secs(5);
    while port.is_connected() {
        assert!(Instant::now() < end, "port still up after the frontend died");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Link down: sends are dropped and counted, nothing blocks.
    let d = port.stats().tx_dropped;
    port.tx_batch(&mut (0..5).map(frame).collect()).unwrap();
    assert_eq!(port.stats().tx_dropped, d + 5);

    let _ = std::fs::remove_file(&sock);
    let mut pmd = Testpmd::start(&sock, "xvsvh-reconn");
    assert!(pmd.wait_for("testpmd>", 0, 20), "testpmd did not restart:\n{}", pmd.diagnostics());
    wait_connected(&port, &pmd, 10);
    assert!(port.connects() >= 2);
    exchange(&mut port, &mut pmd, "after restart");
}

#[test]
fn vhost_bad_socket_path() {
    for bad in ["", "relative.sock", "/nonexistent-xvs-dir/x.sock", "/etc/passwd"] {
        let e = VhostUserClientPort::new("vh-bad", Path::new(bad)).err().expect("refused");
        let msg = e.to_string();
        assert!(msg.contains("vhost-server-path"), "{bad}: {msg}");
        eprintln!("{bad:?}: {msg}");
    }
}

/// A polling guest (testpmd) is told not to kick the queues the port
/// polls, and asks for no calls: thousands of bursts each way cost no
/// eventfd write on either side once the port has seen the queues.
#[test]
fn polling_guest_neither_kicks_nor_is_called() {
    if !usable() {
        return;
    }
    let _turn = TESTPMD.lock().unwrap_or_else(|e| e.into_inner());
    let sock = sock_path("nokick");
    let (mut pmd, mut port) = connected(&sock, "xvsvh-nokick", "vh-nokick", "");
    // The first exchange lets the port see (and quieten) the queues.
    exchange(&mut port, &mut pmd, "warm-up");

    let (kicks, calls, rx, tx) = (port.kicks(), port.calls(), port.stats().rx_packets, port.stats().tx_packets);
    exchange(&mut port, &mut pmd, "measured");
    let (rx, tx) = (port.stats().rx_packets - rx, port.stats().tx_packets - tx);
    let (kicks, calls) = (port.kicks() - kicks, port.calls() - calls);
    eprintln!("measured: {rx} frames received, {tx} sent; {kicks} kicks, {calls} calls");
    assert!(rx > 1000 && tx >= 1000, "too little traffic to tell: {rx} received, {tx} sent");
    assert!(kicks < 10, "the guest kicked {kicks} times for {rx} frames");
    assert_eq!(calls, 0, "the port signalled a guest that polls");
}

/// Waits (bounded) until testpmd has counted `n` more received frames
/// than `from`; returns its (packets, bytes) then.
fn received(pmd: &mut Testpmd, from: (u64, u64), n: u64) -> (u64, u64) {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let (p, b, _) = pmd.port_stats_bytes();
        if p >= from.0 + n || Instant::now() > end {
            return (p - from.0, b - from.1);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A frame larger than one receive buffer (testpmd's are 2 KiB): a guest
/// that accepted mergeable buffers gets it whole, spread over several (one
/// packet of the full length); one that did not (`mrg_rxbuf=0`) cannot
/// take it, so it is dropped and counted, and the frames after it arrive.
#[test]
fn frames_larger_than_a_buffer_follow_the_mergeable_feature() {
    if !usable() {
        return;
    }
    let _turn = TESTPMD.lock().unwrap_or_else(|e| e.into_inner());
    for (mrg, devargs) in [(true, ""), (false, "mrg_rxbuf=0")] {
        let sock = sock_path(if mrg { "mrg1" } else { "mrg0" });
        let (mut pmd, mut port) = connected(&sock, &format!("xvsvh-mrg{}", mrg as u8), "vh-mrg", devargs);
        // The port learns the queues from the guest's first kick.
        exchange(&mut port, &mut pmd, devargs);
        pmd.cmd("set fwd rxonly");
        pmd.cmd("start");
        std::thread::sleep(Duration::from_millis(200));
        let (p0, b0, _) = pmd.port_stats_bytes();
        let dropped = port.stats().tx_dropped;
        port.tx_batch(&mut vec![sized(3000), sized(100)]).unwrap();
        if mrg {
            let (p, b) = received(&mut pmd, (p0, b0), 2);
            eprintln!("mergeable: testpmd received {p} frames, {b} bytes");
            assert_eq!((p, b), (2, 3100), "both frames arrive whole");
            assert_eq!(port.too_big(), 0);
        } else {
            let (p, b) = received(&mut pmd, (p0, b0), 1);
            eprintln!("not mergeable: testpmd received {p} frames, {b} bytes; port too_big {}", port.too_big());
            assert_eq!((p, b), (1, 100), "only the frame that fits one buffer arrives");
            assert_eq!(port.too_big(), 1);
            assert_eq!(port.stats().tx_dropped, dropped + 1);
        }
        pmd.cmd("stop");
    }
}
