//! The control socket against the real ovs-appctl.
//!
//! Plan. Setup: an AppctlServer on a socket in a temp dir, with a handler
//! that knows `list-commands` and `echo-args`, and fails everything else.
//! Actions: ovs-appctl -t SOCK with no arguments, with arguments, with an
//! unknown command; a raw client sends malformed JSON, then another
//! connection a JSON-RPC echo. Verified: stdout and exit 0 for results,
//! stderr and exit 2 for errors, and that a bad connection does not stop
//! the server.

mod common;

use common::TempDir;
use ovsdb::jsonrpc::Codec;
use ovsdb::AppctlServer;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::process::Command;

fn handler(method: &str, args: &[String]) -> Result<String, String> {
    match method {
        "list-commands" => Ok("The available commands are:\n  echo-args [ARG...]\n  list-commands\n".into()),
        "echo-args" => Ok(format!("{}\n", args.join("|"))),
        other => Err(format!("\"{other}\" is not a valid command\n")),
    }
}

fn appctl(sock: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new("ovs-appctl").arg("--timeout=10").arg("-t").arg(sock).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn real_ovs_appctl() {
    let dir = TempDir::new("appctl");
    let sock = dir.path("xvs.ctl");
    let server = AppctlServer::bind(&sock, handler).unwrap();

    let (code, out, _) = appctl(&sock, &["list-commands"]);
    assert_eq!(code, 0);
    assert!(out.contains("echo-args"), "{out}");

    let (code, out, _) = appctl(&sock, &["echo-args", "a b", "c"]);
    assert_eq!((code, out.as_str()), (0, "a b|c\n"));

    let (code, out, err) = appctl(&sock, &["no-such-command", "x"]);
    assert_eq!(code, 2, "stdout {out:?} stderr {err:?}");
    assert!(err.contains("\"no-such-command\" is not a valid command"), "{err}");

    // Malformed JSON closes that connection only.
    let mut bad = UnixStream::connect(&sock).unwrap();
    bad.write_all(b"{\"method\": nope}").unwrap();
    let mut buf = [0u8; 16];
    assert_eq!(bad.read(&mut buf).unwrap(), 0, "server hung up");

    // A JSON-RPC echo (keepalive) is answered with its params.
    let mut s = UnixStream::connect(&sock).unwrap();
    s.write_all(br#"{"method":"echo","params":["k"],"id":7}{"method":"echo-args","params":["z"],"id":8}"#).unwrap();
    let mut c = Codec::new();
    let mut got = Vec::new();
    while got.len() < 2 {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0);
        c.feed(&buf[..n]);
        got.extend(std::iter::from_fn(|| c.next_value()).map(|v| v.unwrap()));
    }
    assert_eq!(got[0], serde_json::json!({"result": ["k"], "error": null, "id": 7}));
    assert_eq!(got[1], serde_json::json!({"result": "z\n", "error": null, "id": 8}));

    let (code, _, _) = appctl(&sock, &["list-commands"]);
    assert_eq!(code, 0, "still serving");
    drop(server);
    assert!(!sock.exists(), "socket removed on drop");
}
