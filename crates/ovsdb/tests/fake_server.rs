//! The client against a misbehaving server.
//!
//! Plan. Setup: a unix listener in the test plays ovsdb-server. First
//! connection: a schema without most tables, a monitor reply with garbage
//! columns and a malformed table, then unknown response ids, a bad update,
//! an unknown request, an echo, and finally malformed JSON. Second
//! connection: a sane schema and one bridge. Verified: the client answers
//! echo and the unknown request, monitors only tables the schema has,
//! survives every bad message (the model parses what it can), resets on
//! the malformed JSON, reconnects and ends up with the second server's
//! contents.

mod common;

use common::{wait_for, TempDir};
use ovsdb::jsonrpc::{encode, Codec};
use ovsdb::Client;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::mpsc;
use std::time::Duration;

fn recv(s: &mut UnixStream, c: &mut Codec) -> Value {
    let mut buf = [0u8; 4096];
    loop {
        if let Some(v) = c.next_value() {
            return v.expect("client sent valid JSON");
        }
        let n = s.read(&mut buf).expect("read from client");
        assert!(n > 0, "client closed");
        c.feed(&buf[..n]);
    }
}

fn send(s: &mut UnixStream, v: Value) {
    s.write_all(&encode(&v)).unwrap();
}

#[test]
fn survives_malformed_rpc_and_unexpected_schema() {
    let dir = TempDir::new("fake");
    let path = dir.path("fake.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let (tx, rx) = mpsc::channel::<String>();
    let server = std::thread::spawn(move || {
        // Connection 1: unexpected content everywhere.
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut c = Codec::new();
        let req = recv(&mut s, &mut c);
        assert_eq!(req["method"], "get_schema");
        send(
            &mut s,
            json!({"result": {"name": "Open_vSwitch", "version": "0.0.1",
            "tables": {"Open_vSwitch": {}, "Bridge": {}, "Weird": 7}}, "error": null, "id": req["id"]}),
        );
        let req = recv(&mut s, &mut c);
        assert_eq!(req["method"], "monitor");
        let mut tables: Vec<&String> = req["params"][2].as_object().unwrap().keys().collect();
        tables.sort();
        tx.send(format!("monitored {tables:?}")).unwrap();
        send(
            &mut s,
            json!({"result": {
            "Open_vSwitch": {"o": {"new": {"bridges": ["set", [["uuid", "b"], ["uuid", "dangling"]]], "next_cfg": "x"}}},
            "Bridge": {"b": {"new": {"name": "br0", "fail_mode": ["bogus", 1], "ports": 17,
                "other_config": ["map", [["datapath-id", "zz"]]]}}},
            "Port": 5}, "error": null, "id": req["id"]}),
        );
        send(&mut s, json!({"result": "stray", "error": null, "id": 999}));
        send(&mut s, json!({"result": "no id", "error": null}));
        send(&mut s, json!({"method": "update", "params": [null, [1, 2]], "id": null}));
        send(
            &mut s,
            json!({"method": "update", "params": [null, {"Bridge": {"b": {"new": "not a row"}}}], "id": null}),
        );
        send(&mut s, json!({"method": "update"}));
        send(&mut s, json!({"method": 42, "params": [], "id": 1}));
        send(&mut s, json!({"hello": "world"}));
        send(&mut s, json!([1, 2, 3]));
        send(&mut s, json!({"method": "surprise", "params": [], "id": "s1"}));
        let r = recv(&mut s, &mut c);
        tx.send(format!("surprise answered: id={} error={}", r["id"], !r["error"].is_null())).unwrap();
        send(&mut s, json!({"method": "echo", "params": ["ping"], "id": "echo"}));
        let r = recv(&mut s, &mut c);
        tx.send(format!("echo answered: {}", r)).unwrap();
        s.write_all(b"{\"result\": tru, \"id\": 3}").unwrap();
        // The client must hang up and come back.
        let mut buf = [0u8; 64];
        while s.read(&mut buf).map(|n| n > 0).unwrap_or(false) {}
        drop(s);

        // Connection 2: a sane server.
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut c = Codec::new();
        let req = recv(&mut s, &mut c);
        assert_eq!(req["method"], "get_schema");
        let tables: serde_json::Map<String, Value> =
            ovsdb::client::TABLES.iter().map(|t| (t.to_string(), json!({}))).collect();
        send(
            &mut s,
            json!({"result": {"name": "Open_vSwitch", "version": "8.3.1", "tables": tables}, "error": null, "id": req["id"]}),
        );
        let req = recv(&mut s, &mut c);
        send(
            &mut s,
            json!({"result": {
            "Open_vSwitch": {"o": {"new": {"bridges": ["uuid", "b1"], "next_cfg": 4}}},
            "Bridge": {"b1": {"new": {"name": "br1", "datapath_type": "netdev"}}}}, "error": null, "id": req["id"]}),
        );
        // Keep the connection open until the client is done.
        let mut buf = [0u8; 64];
        while s.read(&mut buf).map(|n| n > 0).unwrap_or(false) {}
    });

    let mut client = Client::connect(&format!("unix:{}", path.display())).unwrap();
    // The garbage monitor reply still yields br0 with defaults.
    let d = wait_for(&mut client, "br0 from the bad server", |d| d.bridge("br0").is_some());
    let br0 = d.bridge("br0").unwrap();
    assert_eq!(br0.fail_mode, ovsdb::FailMode::Standalone);
    assert_eq!(br0.datapath_id, None);
    assert!(br0.ports.is_empty());
    assert_eq!(d.next_cfg, 0);
    assert_eq!(rx.recv_timeout(Duration::from_secs(10)).unwrap(), r#"monitored ["Bridge", "Open_vSwitch"]"#);
    let d = wait_for(&mut client, "br1 after reconnecting", |d| d.bridge("br1").is_some());
    assert_eq!(d.next_cfg, 4);
    assert!(d.bridge("br0").is_none(), "replica replaced by the new monitor reply");
    assert_eq!(rx.recv_timeout(Duration::from_secs(1)).unwrap(), "surprise answered: id=\"s1\" error=true");
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(1)).unwrap(),
        r#"echo answered: {"error":null,"id":"echo","result":["ping"]}"#
    );
    drop(client);
    server.join().unwrap();
}

/// A server that answers the handshake and then goes silent: the client
/// probes with echo and, with no answer, reconnects.
#[test]
fn silent_server_is_probed_then_dropped() {
    let dir = TempDir::new("silent");
    let path = dir.path("silent.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let (tx, rx) = mpsc::channel::<String>();
    let server = std::thread::spawn(move || {
        for round in 0..2 {
            let (mut s, _) = listener.accept().unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut c = Codec::new();
            let req = recv(&mut s, &mut c);
            send(&mut s, json!({"result": {"tables": {"Bridge": {}}}, "error": null, "id": req["id"]}));
            let req = recv(&mut s, &mut c);
            send(
                &mut s,
                json!({"result": {"Bridge": {"b": {"new": {"name": format!("br{round}")}}}}, "error": null, "id": req["id"]}),
            );
            let probe = recv(&mut s, &mut c);
            tx.send(format!("{}", probe["method"])).unwrap();
            if round == 1 {
                send(&mut s, json!({"result": [], "error": null, "id": probe["id"]}));
                return;
            }
            // Say nothing; the client must hang up.
            let mut buf = [0u8; 64];
            while s.read(&mut buf).map(|n| n > 0).unwrap_or(false) {}
        }
    });
    let mut client = Client::connect(&format!("unix:{}", path.display())).unwrap();
    client.set_probe_interval(Duration::from_millis(200));
    let mut disconnected = false;
    let t0 = std::time::Instant::now();
    while t0.elapsed() < Duration::from_secs(10) && !disconnected {
        disconnected = matches!(client.next_event(Duration::from_millis(50)), Some(ovsdb::Event::Disconnected(_)));
    }
    assert!(disconnected, "silent server not dropped");
    assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), "\"echo\"", "first connection probed");
    // Second connection: the replica is replaced, and the answered probe
    // keeps the connection up.
    let t0 = std::time::Instant::now();
    while !client.replica().table("Bridge").any(|(_, r)| r["name"] == "br1") {
        assert!(t0.elapsed() < Duration::from_secs(10), "no second connection");
        client.next_event(Duration::from_millis(50));
    }
    // The client probes only while it is driven.
    let t0 = std::time::Instant::now();
    let probe = loop {
        client.next_event(Duration::from_millis(50));
        if let Ok(m) = rx.try_recv() {
            break m;
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "second connection not probed");
    };
    assert_eq!(probe, "\"echo\"");
    server.join().unwrap();
    // The answered probe kept the connection up until the server left.
    assert!(client.session().replica().table("Bridge").count() == 1);
}
