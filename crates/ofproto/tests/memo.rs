//! Lookup memos (`classifier::memo`) change no translation: through the
//! OVN pipeline of the translation benchmark (`benches/ovn/`), every key
//! translates to the same datapath actions and the same megaflow mask with
//! the memos on (warm, after other keys filled them) as with them off; and
//! a flow mod is seen by the next translation.
//!
//! One test in its own binary: the memo switch is process-wide.
use dpif::format_actions;
use flow::key::FlowKey;
use ofproto::{parse_flow, FlowModCmd, Need, Ofproto};

#[path = "../benches/ovn/fixture.rs"]
mod fixture;
use fixture::bridge;

/// A UDP (or ARP, with `arp`) frame from vm1's port, as the datapath
/// extracts it.
fn key(dst_mac: [u8; 6], dst_ip: [u8; 4], sport: u16, arp: bool) -> FlowKey {
    let b = wire::build::Frame::new([0, 0, 0, 0, 1, 1], dst_mac);
    let f = if arp {
        b.arp(1, [0, 0, 0, 0, 1, 1], u32::from_be_bytes([10, 0, 1, 1]), [0; 6], u32::from_be_bytes(dst_ip)).build()
    } else {
        b.ipv4(u32::from_be_bytes([10, 0, 1, 1]), u32::from_be_bytes(dst_ip)).udp(sport, 5001).payload(&[0; 18]).build()
    };
    let (k, _, err) = flow::extract(&f, 1);
    assert!(err.is_none(), "{err:?}");
    k
}

fn keys() -> Vec<FlowKey> {
    let mut v = Vec::new();
    for i in 0..64u16 {
        let unknown = [2, 0, 1, 0, 0, i as u8];
        v.push(key(unknown, [10, 0, 1, 2], 10_000, false));
        v.push(key([0, 0, 0, 0, 1, 2], [10, 0, 1, 2], 10_000 + i, false));
        v.push(key([0, 0, 0, 0, 0xff, 1], [10, 0, 2, 1], 10_000 + i, false));
        v.push(key([0, 0, 0, 0, 0xff, 1], [10, 0, 2, (i % 4) as u8 + 1], 20_000, false));
        v.push(key([0xff; 6], [10, 0, 1, (i % 8) as u8], 0, true));
    }
    v
}

fn translate_all(of: &Ofproto, keys: &[FlowKey]) -> Vec<(String, FlowKey)> {
    keys.iter()
        .map(|k| {
            let t = of.translate_key(k, 64);
            (format_actions(&t.actions), t.mask)
        })
        .collect()
}

#[test]
fn memos_change_no_translation_and_follow_flow_mods() {
    let keys = keys();
    for file in ["flows.txt", "acl-flows.txt"] {
        let of = bridge(file);
        ofproto::xlate::set_lookup_memo(false);
        let plain = translate_all(&of, &keys);
        ofproto::xlate::set_lookup_memo(true);
        // Twice: the first pass fills the memos, the second is answered
        // from them.
        let _ = translate_all(&of, &keys);
        let memo = translate_all(&of, &keys);
        for (i, (a, b)) in plain.iter().zip(&memo).enumerate() {
            assert_eq!(a.0, b.0, "{file}: actions of key {i} ({:?})", keys[i]);
            assert_eq!(a.1, b.1, "{file}: megaflow mask of key {i}");
        }
        // The keys take the pipeline's different paths.
        let want = if file == "flows.txt" { "2" } else { "ct(zone=1),recirc(0x1)" };
        assert!(plain.iter().any(|x| x.0 == want), "{file}: no key translates to {want}");
        let kinds: std::collections::HashSet<&str> = plain.iter().map(|x| x.0.as_str()).collect();
        assert!(kinds.len() >= 3, "{file}: the keys take {} paths only", kinds.len());
    }
    // A flow mod between two translations: the memos of the old tables
    // are not used.
    let mut of = bridge("flows.txt");
    let k = key([0, 0, 0, 0, 1, 2], [10, 0, 1, 2], 10_000, false);
    assert_eq!(format_actions(&of.translate_key(&k, 64).actions), "2");
    assert_eq!(format_actions(&of.translate_key(&k, 64).actions), "2");
    let drop = parse_flow("table=0,priority=65000,in_port=1,actions=drop", Need::Actions).unwrap();
    of.flow_mod_batch(&[(FlowModCmd::Add, drop)]).unwrap();
    assert_eq!(format_actions(&of.translate_key(&k, 64).actions), "drop");
}
