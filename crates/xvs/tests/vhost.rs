//! A VM port through the whole switch: DPDK's testpmd as the VM's
//! virtio-net frontend (it owns the vhost-user socket, as QEMU does), an
//! xvs `dpdkvhostuserclient` port, NORMAL switching, and a namespace host
//! on an AF_XDP port. Frames go both ways and are counted at both ends.
//!
//! Plan: start testpmd in server mode, then xvs with the vhost port and the
//! host's veth; testpmd `txonly` floods frames that NORMAL switching sends
//! to the host (its RX counter grows by what testpmd sent, less what a
//! loaded two-core machine drops); broadcast pings from the host reach
//! testpmd in `rxonly` mode. Needs root and dpdk-testpmd (dpdk-dev);
//! skipped with a message otherwise. Removed afterwards, also on failure.

use netdev_vhost::testpmd::{sock_path, usable, Testpmd};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use xvs::netns::Host;

struct Xvs(Child, String);

impl Drop for Xvs {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        let _ = std::fs::remove_dir_all(&self.1);
    }
}

fn rx_packets(h: &Host) -> u64 {
    h.exec(&["cat", "/sys/class/net/eth0/statistics/rx_packets"]).unwrap().trim().parse().unwrap()
}

#[test]
fn vm_port_and_namespace_host_exchange_frames_through_xvs() {
    if !usable() {
        return;
    }
    std::env::set_var("XVS_BIN", env!("CARGO_BIN_EXE_xvs"));
    let id = std::process::id() % 1000;
    let h = Host::create(&format!("xvsvm{id}"), &format!("xvm{id}"), "10.78.0.2/24", 1).unwrap();
    let sock = sock_path("e2e");
    // testpmd's server waits for the switch to connect before it prompts.
    let mut pmd = Testpmd::start(&sock, &format!("xvsvm{id}"));
    let run_dir = format!("/tmp/xvs-vm-{id}");
    let child = Command::new(env!("CARGO_BIN_EXE_xvs"))
        .args(["switch", "--run-dir", &run_dir, "--bridge", &format!("brvm{id}"), "--no-local-port", "--port"])
        .arg(format!("vhu{id},type=dpdkvhostuserclient,vhost-server-path={}", sock.display()))
        .args(["--port", &format!("{},type=afxdp,xdp-mode=generic", h.port)])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _xvs = Xvs(child, run_dir.clone());
    assert!(pmd.wait_for("testpmd>", 0, 20), "testpmd did not start:\n{}", pmd.output());
    std::thread::sleep(Duration::from_millis(500));

    // VM -> host: testpmd floods frames (unknown destination), NORMAL
    // switching sends them to the host.
    let before = rx_packets(&h);
    pmd.cmd("set fwd txonly");
    pmd.cmd("start");
    std::thread::sleep(Duration::from_millis(1000));
    pmd.cmd("stop");
    std::thread::sleep(Duration::from_millis(500));
    let (_, tx) = pmd.port_stats();
    let got = rx_packets(&h) - before;
    eprintln!("VM -> host: testpmd TX-packets {tx}, host eth0 rx_packets +{got}");
    assert!(tx > 1000, "testpmd sent: {tx}");
    assert!(got > 1000 && got <= tx + 10, "the host received testpmd's frames: {got} of {tx}");

    // Host -> VM: broadcast pings, counted by testpmd.
    pmd.cmd("clear port stats 0");
    pmd.cmd("set fwd rxonly");
    pmd.cmd("start");
    std::thread::sleep(Duration::from_millis(300));
    let _ = h.run(&["ping", "-b", "-c", "50", "-i", "0.01", "-W", "1", "10.78.0.255"]);
    let end = Instant::now() + Duration::from_secs(10);
    let mut rx = pmd.port_stats().0;
    while rx < 50 && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(200));
        rx = pmd.port_stats().0;
    }
    pmd.cmd("stop");
    eprintln!("host -> VM: 50 broadcast pings, testpmd RX-packets {rx}");
    assert!(rx >= 50, "testpmd received the host's 50 broadcast pings: {rx}");

    // The switch's own counters for the VM port agree with both ends.
    let show = Command::new(env!("CARGO_BIN_EXE_xvs")).args(["show", "--run-dir", &run_dir]).output().unwrap();
    let show = String::from_utf8_lossy(&show.stdout).into_owned();
    eprintln!("xvs show:\n{show}");
    assert!(show.contains(&format!("vhu{id}")), "{show}");
}
