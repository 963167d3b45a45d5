//! Needs root. Each test makes its own veth pair (unique names) and
//! removes it through a drop guard.

use bpf::{detach_any_xdp, xdp_hooks, ActiveMode, XdpMode, XdpProgram};
use std::process::Command;

fn ip(args: &[&str]) -> bool {
    Command::new("ip").args(args).status().map(|s| s.success()).unwrap_or(false)
}

struct Veth {
    a: String,
    b: String,
}

impl Veth {
    fn new(tag: &str) -> Veth {
        let pid = std::process::id() % 1000;
        let a = format!("xbp{tag}{pid}a");
        let b = format!("xbp{tag}{pid}b");
        assert!(a.len() <= 15);
        let _ = Command::new("ip").args(["link", "del", &a]).stderr(std::process::Stdio::null()).status();
        assert!(ip(&["link", "add", &a, "type", "veth", "peer", "name", &b]));
        assert!(ip(&["link", "set", &a, "up"]));
        assert!(ip(&["link", "set", &b, "up"]));
        Veth { a, b }
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        ip(&["link", "del", &self.a]);
        let _ = &self.b;
    }
}

fn ip_shows_xdp(dev: &str) -> bool {
    let out = Command::new("ip").args(["-d", "link", "show", "dev", dev]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).contains("xdp")
}

#[test]
fn native_generic_best_effort_and_detach_on_drop() {
    let v = Veth::new("m");
    for (req, want) in [
        (XdpMode::Native, ActiveMode::Native),
        (XdpMode::Generic, ActiveMode::Generic),
        (XdpMode::BestEffort, ActiveMode::Native),
    ] {
        let mut att = XdpProgram::attach(v.a.as_str(), req).unwrap();
        assert_eq!(att.mode(), want);
        let h = xdp_hooks(&v.a).unwrap();
        match want {
            ActiveMode::Native => assert!(h.native_prog_id.is_some(), "{h:?}"),
            ActiveMode::Generic => assert!(h.generic_prog_id.is_some(), "{h:?}"),
        }
        assert!(ip_shows_xdp(&v.a));
        // Removing an absent entry is not an error.
        att.remove_socket(3).unwrap();
        assert!(att.insert_socket(bpf::MAX_QUEUES, 0).is_err());
        drop(att);
        // The kernel releases a bpf_link asynchronously after its last fd
        // closes: allow it a moment on a loaded machine.
        let t = std::time::Instant::now();
        while !xdp_hooks(&v.a).unwrap().is_empty() && t.elapsed() < std::time::Duration::from_secs(2) {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(xdp_hooks(&v.a).unwrap().is_empty());
        assert!(!ip_shows_xdp(&v.a));
    }
}

#[test]
fn frags_variant_attaches_at_jumbo_mtu() {
    let v = Veth::new("f");
    assert!(ip(&["link", "set", &v.a, "mtu", "9000"]));
    assert!(ip(&["link", "set", &v.b, "mtu", "9000"]));
    let att = XdpProgram::attach_frags(v.a.as_str(), XdpMode::Native).unwrap();
    assert!(att.frags());
    assert_eq!(att.mode(), ActiveMode::Native);
}

#[test]
fn detach_any_removes_a_netlink_attachment() {
    let v = Veth::new("d");
    let obj = concat!(env!("OUT_DIR"), "/xdp_redirect.o");
    // A netlink attachment, as an older tool would leave it.
    assert!(ip(&["link", "set", "dev", &v.a, "xdpgeneric", "obj", obj, "sec", "xdp"]));
    assert!(xdp_hooks(&v.a).unwrap().generic_prog_id.is_some());
    let before = detach_any_xdp(&v.a).unwrap();
    assert!(before.generic_prog_id.is_some());
    assert!(xdp_hooks(&v.a).unwrap().is_empty());
    assert!(!ip_shows_xdp(&v.a));
    // Idempotent.
    assert!(detach_any_xdp(&v.a).unwrap().is_empty());
}

/// Helper run in a child process by `kill_9_leaves_nothing_attached`.
#[test]
fn helper_attach_and_wait() {
    let Ok(dev) = std::env::var("XVS_BPF_HELPER_DEV") else { return };
    let _att = XdpProgram::attach(dev.as_str(), XdpMode::Native).unwrap();
    println!("ATTACHED");
    std::thread::sleep(std::time::Duration::from_secs(60));
}

#[test]
fn kill_9_leaves_nothing_attached() {
    use std::io::{BufRead, BufReader};
    let v = Veth::new("k");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "helper_attach_and_wait", "--nocapture", "--test-threads=1"])
        .env("XVS_BPF_HELPER_DEV", &v.a)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert!(lines.any(|l| l.map(|l| l.contains("ATTACHED")).unwrap_or(false)));
    assert!(xdp_hooks(&v.a).unwrap().native_prog_id.is_some());
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    // The bpf_link dies with its process; allow the deferred release.
    let mut gone = false;
    for _ in 0..50 {
        if xdp_hooks(&v.a).unwrap().is_empty() {
            gone = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(gone, "XDP program survived kill -9");
    // And a new attach in either mode works straight away.
    drop(XdpProgram::attach(v.a.as_str(), XdpMode::Generic).unwrap());
}

/// The in-kernel generator delivers every frame it is asked to send into a
/// veth whose peer runs XDP (here the counting sink); templates it cannot
/// serve are refused with the reason.
#[test]
fn xdp_generator_delivers_into_a_veth_and_refuses_bad_templates() {
    let v = Veth::new("g");
    let sink = bpf::XdpSink::attach(v.b.as_str(), XdpMode::Native).unwrap();
    // Three frames differing in one header byte, of ethertype 0x88b5 (IEEE
    // local experimental), which the kernel stack ignores.
    let frame = |i: u8| {
        let mut f = vec![0u8; 64];
        f[..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        f[12..14].copy_from_slice(&[0x88, 0xb5]);
        f[20] = i;
        f
    };
    let frames: Vec<Vec<u8>> = (0..3).map(frame).collect();
    let ifindex = bpf::ifindex(&v.a).unwrap();
    let mut g = bpf::XdpGen::load(ifindex, &frames).unwrap();
    let (p0, b0) = sink.counts().unwrap();
    g.send(3000, 0).unwrap();
    let (p1, b1) = sink.counts().unwrap();
    // Anything else the kernel sends on a fresh link (IPv6 neighbour
    // discovery) is small; the generator's frames are exactly counted in.
    assert!((3000..3010).contains(&(p1 - p0)), "sink counted {} frames", p1 - p0);
    assert!(b1 - b0 >= 3000 * 64, "sink counted {} bytes", b1 - b0);

    let mut short = frames.clone();
    short[1].truncate(60);
    let e = bpf::XdpGen::load(ifindex, &short).err().expect("frames of two lengths are refused").to_string();
    assert!(e.contains("one length"), "{e}");
    let mut tail = frames.clone();
    tail[2].resize(1000, 0);
    tail[0].resize(1000, 0);
    tail[1].resize(1000, 0);
    tail[2][900] = 1;
    let e =
        bpf::XdpGen::load(ifindex, &tail).err().expect("templates differing beyond the header are refused").to_string();
    assert!(e.contains("differs from frame 0 at byte 900"), "{e}");
    assert!(bpf::XdpGen::load(ifindex, &[]).is_err());
}
