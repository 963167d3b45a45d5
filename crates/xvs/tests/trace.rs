//! `xvs trace`, offline: the megaflow and datapath actions it prints for
//! the examples in the issue, and a clear error for bad syntax.

use std::process::Command;

fn trace(flows: &str, packet: &str) -> (bool, String, String) {
    let dir = std::env::temp_dir().join(format!("xvs-trace-{}-{}", std::process::id(), flows.len()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("flows.txt");
    std::fs::write(&f, flows).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_xvs"))
        .args(["trace", "--flows", f.to_str().unwrap(), packet])
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

fn line<'a>(out: &'a str, prefix: &str) -> &'a str {
    out.lines().find(|l| l.starts_with(prefix)).unwrap_or_else(|| panic!("no {prefix} line in:\n{out}"))
}

#[test]
fn prefix_example() {
    let (ok, out, _) = trace(
        "priority=10,ip,nw_dst=10.0.0.0/8,actions=output:1\npriority=10,ip,nw_dst=192.168.0.0/24,actions=output:2\n",
        "in_port=3,udp,nw_src=10.9.9.9,nw_dst=10.1.2.3,tp_src=1000,tp_dst=53",
    );
    assert!(ok);
    let mf = line(&out, "Megaflow:");
    assert!(mf.contains("nw_dst=10.0.0.0/8"), "{mf}");
    for f in ["nw_src", "tp_src", "tp_dst", "udp_", "udp,"] {
        assert!(!mf.contains(f), "{f} in {mf}");
    }
    assert_eq!(line(&out, "Datapath actions:"), "Datapath actions: 1");
    assert!(out.contains(" 0. ip,nw_dst=10.0.0.0/8, priority 10"), "{out}");
}

#[test]
fn normal_example() {
    let (ok, out, _) = trace(
        "priority=0,actions=NORMAL\n",
        "in_port=1,dl_src=00:00:00:00:00:01,dl_dst=00:00:00:00:00:02,tcp,nw_src=10.0.0.1,nw_dst=10.0.0.2,tcp_src=1000,tcp_dst=80",
    );
    assert!(ok);
    let mf = line(&out, "Megaflow:");
    for f in ["nw_", "tp_", "tcp", "ip,"] {
        assert!(!mf.contains(f), "{f} in {mf}");
    }
    assert_eq!(line(&out, "Datapath actions:"), "Datapath actions: 2,3,4");
}

#[test]
fn set_field_prints_masked_set() {
    let (ok, out, _) =
        trace("priority=1,ip,actions=mod_nw_tos:32,output:4\n", "in_port=1,udp,nw_src=1.1.1.1,nw_dst=2.2.2.2");
    assert!(ok);
    assert_eq!(line(&out, "Datapath actions:"), "Datapath actions: set(ipv4(tos=0x20/0xfc)),4");
}

#[test]
fn syntax_errors_name_the_token() {
    let (ok, _, err) = trace("priority=10,ip,nw_dst=10.0.0.300,actions=output:1\n", "in_port=1");
    assert!(!ok);
    assert!(err.contains("nw_dst=10.0.0.300") && err.contains(":1:"), "{err}");
    let (ok, _, err) = trace("ip,actions=frobnicate\n", "in_port=1");
    assert!(!ok && err.contains("frobnicate"), "{err}");
    let (ok, _, err) = trace("ip,actions=drop\n", "in_port=1,tcp,tcp_dst=eighty");
    assert!(!ok && err.contains("tcp_dst=eighty"), "{err}");
}
