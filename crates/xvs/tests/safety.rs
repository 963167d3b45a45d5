//! Fault injection against the daemon (issue 12): rule churn under
//! traffic, slow control clients and signals, file permissions under a
//! careless umask, hostile names, unsuitable devices, a second instance,
//! broken pipes, resubmit loops.
//!
//! Each test starts its own `xvs switch` with its own run directory and
//! its own namespaced hosts (names unique to the test and process), and
//! removes them through Drop guards, also when an assertion fails. Needs
//! root.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use xvs::netns::Host;

const XVS: &str = env!("CARGO_BIN_EXE_xvs");

struct Daemon {
    child: Child,
    run_dir: String,
    bridge: String,
}

fn run_dir(t: &str) -> String {
    format!("/tmp/xvs-safe-{t}-{}", std::process::id())
}

impl Daemon {
    /// Starts `xvs switch` and waits for its control socket.
    fn start(t: &str, ports: &[&str], extra: &[&str]) -> Daemon {
        let run_dir = run_dir(t);
        let _ = std::fs::remove_dir_all(&run_dir);
        Self::start_in(&run_dir, &format!("br{t}"), ports, extra, None)
    }

    fn start_in(run_dir: &str, bridge: &str, ports: &[&str], extra: &[&str], umask: Option<u32>) -> Daemon {
        let mut cmd = Command::new(XVS);
        cmd.args(["switch", "--run-dir", run_dir, "--bridge", bridge, "--no-local-port"]);
        for p in ports {
            cmd.args(["--port", p]);
        }
        cmd.args(extra);
        if let Some(m) = umask {
            // The daemon inherits the umask of whoever starts it.
            cmd = Command::new("sh");
            let mut line =
                format!("umask {m:03o}; exec {XVS} switch --run-dir {run_dir} --bridge {bridge} --no-local-port");
            for p in ports {
                line += &format!(" --port {p}");
            }
            for e in extra {
                line += &format!(" {e}");
            }
            cmd.args(["-c", &line]);
        }
        let child = cmd.stderr(Stdio::null()).stdout(Stdio::null()).spawn().unwrap();
        let d = Daemon { child, run_dir: run_dir.into(), bridge: bridge.into() };
        let ctl = format!("{}/xvs.ctl", d.run_dir);
        let t0 = Instant::now();
        while !std::path::Path::new(&ctl).exists() && t0.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(25));
        }
        d
    }

    fn mgmt(&self) -> String {
        format!("unix:{}/{}.mgmt", self.run_dir, self.bridge)
    }

    fn ofctl(&self, args: &[&str]) -> String {
        let o = Command::new("ovs-ofctl").arg(args[0]).arg(self.mgmt()).args(&args[1..]).output().unwrap();
        assert!(o.status.success(), "ovs-ofctl {args:?}: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into()
    }

    fn cli(&self, args: &[&str]) -> std::process::Output {
        Command::new(XVS).args(args).args(["--run-dir", &self.run_dir]).output().unwrap()
    }

    fn pmd_stats(&self) -> serde_json::Value {
        let o = self.cli(&["pmd-stats", "--json"]);
        assert!(o.status.success(), "pmd-stats: {}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).unwrap()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.run_dir);
    }
}

fn hosts(t: &str, n: usize) -> Vec<Host> {
    std::env::set_var("XVS_BIN", XVS);
    let id = std::process::id() % 1000;
    (1..=n)
        .map(|i| {
            Host::create(
                &format!("xvss{t}{id}h{i}"),
                &format!("xs{t}{id}h{i}"),
                &format!("10.79.{}.{i}/24", t.len()),
                1,
            )
            .unwrap()
        })
        .collect()
}

/// An unrelated ping at 200 pps loses nothing while 30,000 rules are added
/// one flow_mod each (no bundle) and then deleted, twice.
#[test]
fn rule_churn_loses_no_packet() {
    let hs = hosts("churn", 2);
    let d = Daemon::start("churn", &[&hs[0].port, &hs[1].port], &[]);
    assert_eq!(hs[0].ping(&hs[1].ip, 2).unwrap(), 2, "NORMAL forwards");
    let rules = format!("{}/rules.txt", d.run_dir);
    let mut text = String::new();
    for i in 0..30_000u32 {
        text += &format!(
            "cookie=0x77,priority=5,tcp,nw_dst=10.{}.{}.{},tp_dst=80,actions=drop\n",
            200 + i / 65536,
            i / 256 % 256,
            i % 256
        );
    }
    std::fs::write(&rules, text).unwrap();
    // Echo requests at 200 pps from before the churn until 1 s after it.
    let ping = Command::new("ip")
        .args(["netns", "exec", &hs[0].ns, "ping", "-n", "-i", "0.005", "-W", "2", &hs[1].ip])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    struct Ping(Option<Child>);
    impl Drop for Ping {
        fn drop(&mut self) {
            if let Some(c) = &mut self.0 {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
    let mut ping = Ping(Some(ping));
    // Drained as it comes: a full pipe would stall ping.
    let mut stdout = ping.0.as_mut().unwrap().stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut out = String::new();
        let _ = stdout.read_to_string(&mut out);
        out
    });
    std::thread::sleep(Duration::from_millis(500));
    for _ in 0..2 {
        d.ofctl(&["add-flows", &rules]);
        assert!(d.ofctl(&["dump-aggregate", "cookie=0x77/-1"]).contains("flow_count=30000"));
        d.ofctl(&["del-flows", "cookie=0x77/-1"]);
    }
    std::thread::sleep(Duration::from_secs(1));
    let mut child = ping.0.take().unwrap();
    // SIGINT: ping prints its summary.
    Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    child.wait().unwrap();
    let out = reader.join().unwrap();
    let line = out.lines().find(|l| l.contains("packets transmitted")).unwrap_or_else(|| panic!("ping said: {out}"));
    let tx: u64 = line.split_whitespace().next().unwrap().parse().unwrap();
    // Every request sent up to the end of the churn must have its reply;
    // only those of the last second (replies perhaps still on the way
    // when ping was stopped) are not judged.
    let got: std::collections::HashSet<u64> =
        out.split("icmp_seq=").skip(1).filter_map(|x| x.split_whitespace().next()?.parse().ok()).collect();
    let judged = tx.saturating_sub(200);
    let lost: Vec<u64> = (1..=judged).filter(|q| !got.contains(q)).collect();
    assert!(judged > 200, "the ping ran through the churn: {line}");
    assert!(lost.is_empty(), "no packet lost while rules changed; lost icmp_seq {lost:?} of {judged}");
    let st = &d.pmd_stats()["pmds"][0];
    assert_eq!(st["upcall_busy"], 0, "{st}");
    // The poll thread met the writer at least sometimes, and parked rather than dropped.
    eprintln!("parked packets during churn: {}", st["upcall_deferred"]);
}

fn mode(path: &str) -> u32 {
    std::fs::metadata(path).unwrap_or_else(|e| panic!("{path}: {e}")).permissions().mode() & 0o7777
}

fn appctl_socket(run_dir: &str) -> String {
    let pid = std::fs::read_to_string(format!("{run_dir}/ovs-vswitchd.pid")).unwrap();
    format!("{run_dir}/ovs-vswitchd.{}.ctl", pid.trim())
}

fn wait_exit(child: &mut Child, secs: u64) -> Option<std::process::ExitStatus> {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(secs) {
        if let Some(s) = child.try_wait().unwrap() {
            return Some(s);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// Clients that send one byte every 3 s to either control socket hold up
/// no one: `xvs show` and `ovs-appctl` answer meanwhile, SIGTERM stops the
/// switch at once, and the sockets go with it.
#[test]
fn dribbling_control_clients_block_nothing_and_sigterm_works() {
    let mut d = Daemon::start("drib", &[], &[]);
    let ctl = format!("{}/xvs.ctl", d.run_dir);
    let app = appctl_socket(&d.run_dir);
    let mut slow: Vec<UnixStream> = [&ctl, &app].iter().map(|p| UnixStream::connect(p).unwrap()).collect();
    for s in &mut slow {
        s.write_all(b"{").unwrap();
    }
    let t = Instant::now();
    let o = d.cli(&["show"]);
    assert!(o.status.success(), "show: {}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains(&format!("bridge {}", d.bridge)));
    let o = Command::new("ovs-appctl").args(["-t", &app, "version"]).output().unwrap();
    assert!(o.status.success() && String::from_utf8_lossy(&o.stdout).contains("xvs"), "{o:?}");
    assert!(t.elapsed() < Duration::from_secs(2), "answered beside the slow clients: {:?}", t.elapsed());
    // Keep dribbling past a per-byte timeout's worth, then ask again.
    std::thread::sleep(Duration::from_secs(3));
    for s in &mut slow {
        let _ = s.write_all(b" ");
    }
    assert!(d.cli(&["pmd-stats"]).status.success());
    // The slow requests never completed within their deadline: closed.
    std::thread::sleep(Duration::from_secs(3));
    for s in &mut slow {
        s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        let mut b = [0u8; 16];
        assert!(matches!(s.read(&mut b), Ok(0)), "a request not finished in 5 s is dropped");
    }
    // More idle clients than the limit do not lock the CLI out.
    let idle: Vec<UnixStream> = (0..80).map(|_| UnixStream::connect(&ctl).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(100));
    let o = d.cli(&["show"]);
    assert!(o.status.success(), "show beside 80 idle clients: {}", String::from_utf8_lossy(&o.stderr));
    drop(idle);
    // A fresh dribbler while SIGTERM arrives.
    let mut s = UnixStream::connect(&ctl).unwrap();
    s.write_all(b"{\"cmd\"").unwrap();
    let t = Instant::now();
    Command::new("kill").args(["-TERM", &d.child.id().to_string()]).status().unwrap();
    let st = wait_exit(&mut d.child, 5).expect("SIGTERM stops the switch");
    assert!(st.success(), "{st:?}");
    assert!(t.elapsed() < Duration::from_secs(3), "stopped in {:?}", t.elapsed());
    let left: Vec<String> =
        std::fs::read_dir(&d.run_dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into()).collect();
    assert!(left.is_empty(), "sockets and pid files removed at exit: {left:?}");
}

/// Under umask 000 the run directory is 0750 and the sockets 0770, and
/// --group gives them to a group.
#[test]
fn run_dir_and_sockets_keep_their_modes_under_umask_000() {
    let dir = run_dir("umask");
    let _ = std::fs::remove_dir_all(&dir);
    let d = Daemon::start_in(&dir, "brumask", &[], &["--group", "daemon"], Some(0));
    assert_eq!(mode(&dir), 0o750, "run directory");
    assert_eq!(mode(&format!("{dir}/xvs.ctl")), 0o770);
    assert_eq!(mode(&appctl_socket(&dir)), 0o770);
    assert_eq!(mode(&format!("{dir}/xvs.pid")), 0o640);
    assert_eq!(mode(&format!("{dir}/brumask.mgmt")), 0o770);
    assert_eq!(mode(&format!("{dir}/brumask.snoop")), 0o770);
    use std::os::unix::fs::MetadataExt;
    let daemon_gid = xvs::runfiles::group_id("daemon").unwrap();
    assert_eq!(std::fs::metadata(&dir).unwrap().gid(), daemon_gid);
    assert_eq!(std::fs::metadata(format!("{dir}/xvs.ctl")).unwrap().gid(), daemon_gid);
    // An existing directory keeps its own mode (think --run-dir /tmp).
    drop(d);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let _d = Daemon::start_in(&dir, "brumask", &[], &[], Some(0));
    assert_eq!(mode(&dir), 0o755);
    assert_eq!(mode(&format!("{dir}/xvs.ctl")), 0o770);
}

/// CPUs in a `Cpus_allowed_list` line of /proc/.../status ("0-2,5").
fn cpu_list(status: &str) -> Vec<usize> {
    let line = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).expect("Cpus_allowed_list");
    let mut cpus = Vec::new();
    for part in line.trim().split(',') {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        cpus.extend(a.parse::<usize>().unwrap()..=b.parse::<usize>().unwrap());
    }
    cpus
}

/// `--pmd-cpus` (`other_config:pmd-cpu-mask` under OVSDB) dedicates the
/// poll thread's core: the poll thread runs there alone, and every other
/// thread of the switch (control, OpenFlow, offload manager), whether it
/// started before the poll thread or not, runs on the remaining CPUs. A
/// control thread that woke on the poll thread's core took it for a
/// scheduler slice while the AF_XDP queues overflowed.
#[test]
fn pinned_poll_threads_keep_their_cores_to_themselves() {
    let mine = cpu_list(&std::fs::read_to_string("/proc/self/status").unwrap());
    if mine.len() < 2 {
        eprintln!("one CPU only ({mine:?}): nothing to keep apart");
        return;
    }
    let pmd_cpu = *mine.last().unwrap();
    let d = Daemon::start("aff", &[], &["--pmd-cpus", &pmd_cpu.to_string()]);
    // Some control traffic, so the OpenFlow threads have run.
    d.ofctl(&["dump-flows"]);
    let mut seen = Vec::new();
    for t in std::fs::read_dir(format!("/proc/{}/task", d.child.id())).unwrap().flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default().trim().to_string();
        let Ok(status) = std::fs::read_to_string(t.path().join("status")) else { continue };
        let cpus = cpu_list(&status);
        if comm.starts_with("pmd") {
            assert_eq!(cpus, vec![pmd_cpu], "{comm} is pinned to its CPU");
        } else {
            let want: Vec<usize> = mine.iter().copied().filter(|&c| c != pmd_cpu).collect();
            assert_eq!(cpus, want, "thread {comm} stays off the poll thread's CPU {pmd_cpu}");
        }
        seen.push(comm);
    }
    assert!(seen.iter().any(|c| c == "pmd0"), "a poll thread among {seen:?}");
    assert!(seen.len() >= 3, "the switch's other threads among {seen:?}");
}

fn start_fails(args: &[&str]) -> String {
    let mut c =
        Command::new(XVS).arg("switch").args(args).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let st = wait_exit(&mut c, 10).unwrap_or_else(|| {
        let _ = c.kill();
        panic!("xvs switch {args:?} kept running")
    });
    let mut err = String::new();
    c.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(!st.success(), "xvs switch {args:?} must fail");
    err
}

/// Names that would reach outside the run directory, or are not device
/// names, are refused before anything is created.
#[test]
fn traversal_and_bad_names_are_refused() {
    let dir = run_dir("names");
    let _ = std::fs::remove_dir_all(&dir);
    let victim = format!("/tmp/xvs-safe-victim-{}", std::process::id());
    std::fs::write(format!("{victim}.mgmt"), "keep me").unwrap();
    let bridge = format!("../../{}", victim.trim_start_matches('/'));
    for (args, says) in [
        (vec!["--bridge", bridge.as_str()], "bridge name"),
        (vec!["--bridge", ".."], "bridge name"),
        (vec!["--bridge", "br0/x"], "bridge name"),
        (vec!["--bridge", "averyveryverylongbridge"], "longer than 15"),
        (vec!["--bridge", "brok", "--port", "../etc"], "port name"),
        (vec!["--bridge", "brok", "--port", "a:b"], "port name"),
    ] {
        let mut a = vec!["--run-dir", dir.as_str(), "--no-local-port"];
        a.extend(args.iter());
        let err = start_fails(&a);
        assert!(err.contains(says), "{a:?}: {err}");
    }
    assert_eq!(std::fs::read_to_string(format!("{victim}.mgmt")).unwrap(), "keep me");
    let _ = std::fs::remove_file(format!("{victim}.mgmt"));
    assert!(!std::path::Path::new(&format!("{victim}.snoop")).exists());
    // Nothing was started, so nothing may be left (the directory itself
    // is prepared only after the names passed).
    assert!(std::fs::read_dir(&dir).map(|r| r.count() == 0).unwrap_or(true));
    // And through a running switch's CLI.
    let d = Daemon::start("names2", &[], &[]);
    let o = d.cli(&["add-port", "../../x,type=tap"]);
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("port name"), "{o:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The loopback device and devices that do not exist are refused with a
/// reason, and loopback gets no XDP program.
#[test]
fn loopback_and_missing_devices_are_refused() {
    let dir = run_dir("lo");
    let err = start_fails(&["--run-dir", &dir, "--no-local-port", "--port", "lo"]);
    assert!(err.contains("loopback"), "{err}");
    let link = Command::new("ip").args(["-d", "link", "show", "lo"]).output().unwrap();
    assert!(!String::from_utf8_lossy(&link.stdout).contains("xdp"), "no XDP on lo");
    let err = start_fails(&["--run-dir", &dir, "--no-local-port", "--port", "xnosuchdev0"]);
    assert!(err.contains("no such network device"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A second instance on the same run directory is refused before it
/// touches a device or a socket, and the first keeps working; one on
/// another run directory but the same device says the device is taken;
/// adding a port twice says it is already there.
#[test]
fn second_instance_is_refused_and_the_first_is_unharmed() {
    let hs = hosts("two", 2);
    let d = Daemon::start("two", &[&hs[0].port, &hs[1].port], &[]);
    assert_eq!(hs[0].ping(&hs[1].ip, 2).unwrap(), 2);
    let err = start_fails(&["--run-dir", &d.run_dir, "--bridge", &d.bridge, "--no-local-port", "--port", &hs[0].port]);
    assert!(err.contains("another xvs (pid") && err.contains(&d.child.id().to_string()), "{err}");
    for f in ["xvs.ctl", &format!("{}.mgmt", d.bridge), "xvs.pid"] {
        assert!(std::path::Path::new(&format!("{}/{f}", d.run_dir)).exists(), "{f} is still there");
    }
    let other = run_dir("two-b");
    let err = start_fails(&["--run-dir", &other, "--no-local-port", "--port", &hs[0].port]);
    assert!(err.contains("already has an XDP program"), "{err}");
    assert!(!std::path::Path::new(&format!("{other}/xvs.ctl")).exists(), "a failed start leaves no socket");
    let o = d.cli(&["add-port", &hs[0].port]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("already a port of bridge"), "{o:?}");
    assert!(d.cli(&["show"]).status.success());
    assert_eq!(hs[0].ping(&hs[1].ip, 2).unwrap(), 2, "the first instance still forwards");
    let _ = std::fs::remove_dir_all(&other);
}

/// --run-dir naming a file is refused before any XDP program is attached.
#[test]
fn run_dir_that_is_a_file_is_refused_before_xdp() {
    let hs = hosts("file", 1);
    let f = format!("/tmp/xvs-safe-file-{}", std::process::id());
    std::fs::write(&f, "x").unwrap();
    let err = start_fails(&["--run-dir", &f, "--no-local-port", "--port", &hs[0].port]);
    assert!(err.contains("not a directory"), "{err}");
    let link = Command::new("ip").args(["-d", "link", "show", &hs[0].port]).output().unwrap();
    assert!(!String::from_utf8_lossy(&link.stdout).contains("prog/xdp"), "no XDP was attached");
    let _ = std::fs::remove_file(&f);
}

/// CLI output into a pipe closed early ends quietly, without a panic.
#[test]
fn broken_pipe_ends_cli_output_quietly() {
    let d = Daemon::start("pipe", &[], &[]);
    let rules = format!("{}/rules.txt", d.run_dir);
    let text: String = (0..5000).map(|i| format!("priority=5,tcp,tp_dst={},actions=drop\n", i + 1)).collect();
    std::fs::write(&rules, text).unwrap();
    d.ofctl(&["add-flows", &rules]);
    for cmd in ["dump-of-flows", "fdb-show", "show"] {
        let line = format!("{XVS} {cmd} --run-dir {} | head -c 1 >/dev/null; echo ${{PIPESTATUS[0]}}", d.run_dir);
        let o = Command::new("bash").args(["-c", &line]).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!err.contains("panicked"), "{cmd}: {err}");
        assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "0", "{cmd} exits 0: {err}");
    }
}

/// Packets caught in a resubmit loop are counted in pmd-stats.
#[test]
fn resubmit_loop_drops_are_counted() {
    let hs = hosts("loop", 2);
    let d = Daemon::start("loop", &[&hs[0].port, &hs[1].port], &[]);
    d.ofctl(&["del-flows"]);
    d.ofctl(&["add-flow", "priority=10,ip,actions=resubmit(,1)"]);
    d.ofctl(&["add-flow", "table=1,priority=10,ip,actions=resubmit(,0)"]);
    d.ofctl(&["add-flow", "priority=5,arp,actions=FLOOD"]);
    assert_eq!(hs[0].ping(&hs[1].ip, 3).unwrap(), 0, "the loop forwards nothing");
    let st = &d.pmd_stats()["pmds"][0];
    assert!(st["drops"]["drop_resubmit_depth"].as_u64().unwrap() >= 3, "{st}");
    let text = String::from_utf8_lossy(&d.cli(&["pmd-stats"]).stdout).to_string();
    assert!(text.contains("drop_resubmit_depth="), "{text}");
}

/// With `--db`, the xvs CLI works too (xvs.ctl over every bridge), and
/// names from the database are checked like the command line's: a bad
/// interface name lands in its Interface:error, a bad bridge name in a
/// log line naming the table and column.
#[test]
fn db_mode_serves_the_cli_and_refuses_bad_names() {
    let dir = run_dir("db");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    struct Kill(Vec<Child>, String);
    impl Drop for Kill {
        fn drop(&mut self) {
            for c in &mut self.0 {
                let _ = c.kill();
                let _ = c.wait();
            }
            // The bridge's local port outlives the switch, as with ovs-vswitchd.
            let _ = Command::new("ip").args(["link", "del", "brdbok"]).stderr(Stdio::null()).status();
            let _ = std::fs::remove_dir_all(&self.1);
        }
    }
    let db = format!("{dir}/conf.db");
    assert!(Command::new("ovsdb-tool")
        .args(["create", &db, "/usr/share/openvswitch/vswitch.ovsschema"])
        .status()
        .unwrap()
        .success());
    let server = Command::new("ovsdb-server")
        .arg(&db)
        .arg(format!("--remote=punix:{dir}/db.sock"))
        .arg(format!("--unixctl={dir}/ovsdb.ctl"))
        .arg("--no-chdir")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut guard = Kill(vec![server], dir.clone());
    let t0 = Instant::now();
    while !std::path::Path::new(&format!("{dir}/db.sock")).exists() && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let remote = format!("unix:{dir}/db.sock");
    let vsctl = |args: &[&str]| {
        let o =
            Command::new("ovs-vsctl").arg(format!("--db={remote}")).arg("--timeout=20").args(args).output().unwrap();
        assert!(o.status.success(), "ovs-vsctl {args:?}: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    vsctl(&["--no-wait", "init"]);
    let run = format!("{dir}/run");
    let log = format!("{dir}/xvs.log");
    let xvs = Command::new(XVS)
        .args(["switch", "--db", &remote, "--run-dir", &run])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    guard.0.push(xvs);
    let t0 = Instant::now();
    while !std::path::Path::new(&format!("{run}/xvs.ctl")).exists() && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    vsctl(&["add-br", "brdbok", "--", "set", "bridge", "brdbok", "datapath_type=netdev"]);
    assert_eq!(mode(&run), 0o750);
    assert_eq!(mode(&format!("{run}/brdbok.mgmt")), 0o770);
    assert_eq!(mode(&format!("{run}/xvs.ctl")), 0o770);
    vsctl(&["add-port", "brdbok", "../x", "--", "set", "interface", "../x", "type=tap"]);
    let err = vsctl(&["get", "interface", "../x", "error"]);
    assert!(err.contains("interface name") && err.contains('/'), "Interface:error says why: {err}");
    vsctl(&["add-br", "../../y"]);
    let o = Command::new(XVS).args(["show", "--run-dir", &run]).output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success() && text.contains("bridge brdbok"), "{o:?}");
    assert!(!text.contains("../"), "{text}");
    let o = Command::new(XVS).args(["add-port", "xdbtap0,type=tap", "--run-dir", &run]).output().unwrap();
    assert!(String::from_utf8_lossy(&o.stderr).contains("database"), "{o:?}");
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("Bridge table, bridge \"../../y\": bridge name"), "{logged}");
    assert!(!std::path::Path::new("/tmp/y.mgmt").exists() && !std::path::Path::new(&format!("{dir}/y.mgmt")).exists());
}

/// The reference: Open vSwitch 3.1 under umask 000 makes its sockets 0770
/// (ovsdb-server's and ovs-vswitchd's control sockets), and a second
/// ovs-vswitchd on the same pidfile refuses to start, as xvs does above.
#[test]
fn ovs_reference_sockets_0770_under_umask_000_and_one_instance() {
    let dir = run_dir("ovsref");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    struct Stop(String);
    impl Drop for Stop {
        fn drop(&mut self) {
            for p in ["ovs-vswitchd", "ovsdb-server"] {
                if let Ok(pid) = std::fs::read_to_string(format!("{}/{p}.pid", self.0)) {
                    let _ = Command::new("kill").arg(pid.trim()).status();
                }
            }
            std::thread::sleep(Duration::from_millis(300));
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let _stop = Stop(dir.clone());
    let script = format!(
        "umask 000; export OVS_RUNDIR={dir} OVS_DBDIR={dir} OVS_LOGDIR={dir}; \
         ovsdb-tool create {dir}/conf.db /usr/share/openvswitch/vswitch.ovsschema && \
         ovsdb-server {dir}/conf.db --remote=punix:{dir}/db.sock --pidfile={dir}/ovsdb-server.pid --detach \
           --log-file={dir}/ovsdb.log && \
         ovs-vsctl --db=unix:{dir}/db.sock --no-wait init && \
         ovs-vswitchd unix:{dir}/db.sock --pidfile={dir}/ovs-vswitchd.pid --detach --log-file={dir}/vswitchd.log"
    );
    let o = Command::new("sh").args(["-c", &script]).output().unwrap();
    assert!(o.status.success(), "OVS started: {}", String::from_utf8_lossy(&o.stderr));
    let pid = std::fs::read_to_string(format!("{dir}/ovs-vswitchd.pid")).unwrap();
    assert_eq!(mode(&format!("{dir}/db.sock")), 0o770);
    assert_eq!(mode(&format!("{dir}/ovs-vswitchd.{}.ctl", pid.trim())), 0o770);
    let o = Command::new("sh")
        .args([
            "-c",
            &format!(
                "OVS_RUNDIR={dir} ovs-vswitchd unix:{dir}/db.sock --pidfile={dir}/ovs-vswitchd.pid \
                 --log-file={dir}/vswitchd2.log"
            ),
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("already running"), "{err}");
    assert!(std::path::Path::new(&format!("{dir}/ovs-vswitchd.{}.ctl", pid.trim())).exists());
}

/// A start that fails late (here: something that is not a socket sits
/// where xvs.ctl goes) removes the sockets it had made and leaves the
/// foreign file alone.
#[test]
fn a_failed_start_leaves_no_socket_and_keeps_foreign_files() {
    let dir = run_dir("late");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(format!("{dir}/xvs.ctl")).unwrap();
    let err = start_fails(&["--run-dir", &dir, "--bridge", "brlate", "--no-local-port"]);
    assert!(err.contains("not a socket"), "{err}");
    let mut left: Vec<String> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into()).collect();
    left.sort();
    assert_eq!(left, vec!["xvs.ctl".to_string()], "only the foreign directory is left");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A port whose device is deleted is reported gone (`xvs show`, OpenFlow
/// port status LINK_DOWN) and is opened again, with the same OpenFlow
/// number, when a device of that name comes back; traffic flows again.
#[test]
fn a_deleted_device_is_reported_gone_and_reattached_when_it_returns() {
    let mut hs = hosts("gone", 2);
    let d = Daemon::start("gone", &[&hs[0].port, &hs[1].port], &[]);
    assert_eq!(hs[0].ping(&hs[1].ip, 2).unwrap(), 2);
    let (port2, ns2, ip2) = (hs[1].port.clone(), hs[1].ns.clone(), format!("{}/24", hs[1].ip));
    let show = || String::from_utf8_lossy(&d.cli(&["show"]).stdout).into_owned();
    let port2_state = || {
        let desc = d.ofctl(&["dump-ports-desc", "-O", "OpenFlow13"]);
        let block = desc.split(&format!(" 2({port2})")).nth(1).unwrap_or_else(|| panic!("{desc}")).to_string();
        let line = block.lines().find(|l| l.trim_start().starts_with("state:")).unwrap_or("").to_string();
        line.split_whitespace().collect::<Vec<_>>().join(" ")
    };
    let eventually = |secs: u64, cond: &dyn Fn() -> bool| {
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(secs) && !cond() {
            std::thread::sleep(Duration::from_millis(100));
        }
        cond()
    };
    assert_eq!(port2_state(), "state: LIVE");
    // Deleting the namespace deletes both ends of its veth.
    drop(hs.pop());
    assert!(eventually(5, &|| show().contains("DEVICE GONE")), "{}", show());
    println!("{}", show());
    assert!(eventually(3, &|| port2_state() == "state: LINK_DOWN"), "{}", port2_state());
    // The device comes back (a new veth of the same name): reattached.
    let h2 = Host::create(&ns2, &port2, &ip2, 1).unwrap();
    assert!(eventually(5, &|| !show().contains("DEVICE GONE")), "{}", show());
    assert!(eventually(3, &|| port2_state() == "state: LIVE"), "{}", port2_state());
    hs[0].exec(&["ip", "neigh", "flush", "all"]).unwrap();
    assert_eq!(hs[0].ping(&h2.ip, 3).unwrap(), 3, "traffic flows through the reattached port");
}
