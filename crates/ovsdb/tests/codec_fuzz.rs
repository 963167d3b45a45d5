//! Property tests of the JSON-RPC stream codec and the parsers above it.
//!
//! Plan: feed arbitrary bytes, split at arbitrary points, to the codec, to
//! message classification, to a Session and to the replica. Verified:
//! nothing panics; a stream of valid messages decodes to the same values
//! however it is split.

use ovsdb::jsonrpc::{encode, Codec, Message};
use ovsdb::{Desired, Replica, Session};
use proptest::prelude::*;
use serde_json::{json, Value};

fn chunks(bytes: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    cuts.sort();
    let mut out = Vec::new();
    let mut prev = 0;
    for c in cuts {
        out.push(bytes[prev..c].to_vec());
        prev = c;
    }
    out.push(bytes[prev..].to_vec());
    out
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        "[a-z\"\\\\{}\\[\\] ]{0,8}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
            prop::collection::btree_map("[a-z\"{]{0,4}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512),
                                   cuts in prop::collection::vec(any::<usize>(), 0..6)) {
        let mut c = Codec::new();
        let mut s = Session::new();
        s.handle_connected();
        for chunk in chunks(&bytes, &cuts) {
            c.feed(&chunk);
            while let Some(v) = c.next_value() {
                if let Ok(v) = v {
                    let _ = Message::from_value(v);
                }
            }
            s.handle_bytes(&chunk);
            while s.poll_event().is_some() {}
            let _ = s.poll_transmit();
        }
    }

    #[test]
    fn valid_streams_split_anywhere(values in prop::collection::vec(json_value(), 1..5),
                                    cuts in prop::collection::vec(any::<usize>(), 0..8)) {
        // The codec carries objects and arrays at top level.
        let values: Vec<Value> = values.into_iter().map(|v| json!({"v": v})).collect();
        let bytes: Vec<u8> = values.iter().flat_map(|v| { let mut b = encode(v); b.push(b' '); b }).collect();
        let mut c = Codec::new();
        let mut got = Vec::new();
        for chunk in chunks(&bytes, &cuts) {
            c.feed(&chunk);
            while let Some(v) = c.next_value() {
                got.push(v.unwrap());
            }
        }
        prop_assert_eq!(got, values);
    }

    #[test]
    fn arbitrary_updates_never_panic(update in json_value(), update2 in json_value()) {
        let mut r = Replica::new();
        let _ = r.apply_update(&update);
        let _ = r.apply_update2(&update2);
        let _ = r.apply_update(&json!({"Open_vSwitch": {"o": {"new": {"bridges": update.clone()}}},
                                       "Bridge": {"b": {"new": {"name": "b", "ports": update2.clone(), "other_config": update}}}}));
        let _ = Desired::from_replica(&r);
    }
}
