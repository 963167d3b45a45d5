//! What ovs-vswitchd writes back to the database, as `transact`
//! operations.
//!
//! [`transaction`] compares what the switch knows ([`Actual`]) and the
//! configuration it applied ([`Desired`]) with the [`Replica`], and emits
//! an `update` only for columns whose value differs. That matters: every
//! write comes back as a monitor update, so a writer that always wrote
//! would loop forever. Once nothing differs the result is empty and the
//! daemon sends nothing.
//!
//! Columns written:
//! * Interface: ofport (-1 when the interface failed), admin_state,
//!   link_state, link_speed, mtu, mac_in_use, error, statistics;
//! * Bridge: datapath_id (16 hex digits);
//! * Open_vSwitch: cur_cfg (= next_cfg of the applied [`Desired`], which
//!   is what `ovs-vsctl` waits for), datapath_types, iface_types,
//!   ovs_version, and `datapaths:netdev`, a Datapath row with
//!   datapath_version and capabilities (inserted once, then updated).

use crate::model::{Desired, IFACE_TYPES};
use crate::replica::{Datum, Replica, Row};
use serde_json::{json, Value};
use std::collections::HashMap;

/// What the switch observed about one interface.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct IfaceFacts {
    /// OpenFlow port number; None: not assigned yet.
    pub ofport: Option<u16>,
    pub admin_up: Option<bool>,
    pub link_up: Option<bool>,
    /// bits per second.
    pub link_speed: Option<u64>,
    pub mtu: Option<u32>,
    pub mac_in_use: Option<[u8; 6]>,
    /// An error the switch hit while creating the interface (in addition to
    /// configuration errors found by the model).
    pub error: Option<String>,
    /// e.g. ("rx_packets", 10); written only when non-empty.
    pub statistics: Vec<(String, u64)>,
    /// The BFD session's state (`bfd_status`); `None` clears the column.
    pub bfd_status: Option<std::collections::BTreeMap<String, String>>,
    /// The device's `status` map; `None` leaves the column alone.
    pub status: Option<std::collections::BTreeMap<String, String>>,
}

/// The switch's side of the write-back.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Actual {
    /// Interface name -> facts. Interfaces without facts and without a
    /// configuration error are left alone (not created yet).
    pub interfaces: HashMap<String, IfaceFacts>,
    /// Bridge name -> datapath id in use.
    pub datapath_ids: HashMap<String, u64>,
    /// Datapath capabilities of "netdev"; [`default_capabilities`] if empty.
    pub capabilities: Vec<(String, String)>,
}

/// `ovs_version` value.
pub fn ovs_version() -> String {
    format!("xvs {}", env!("CARGO_PKG_VERSION"))
}

/// Datapath capabilities (keys as documented for the Datapath table in
/// vswitch.xml), honest for the dpif fast path today: masked set,
/// recirculation and conntrack (states, zones, mark, label, NAT, the
/// original IPv4 tuple, NXT_CT_FLUSH, and all-zero SNAT: `nat(src)` keeps
/// address and port unless the reply tuple is taken) exist, and MPLS
/// matches see the top label (depth 1); clone, truncation and the IPv6
/// original tuple do not.
pub fn default_capabilities() -> Vec<(String, String)> {
    [
        ("ufid", "false"),
        ("recirc", "true"),
        ("ct_state", "true"),
        ("ct_zone", "true"),
        ("ct_mark", "true"),
        ("ct_label", "true"),
        ("ct_state_nat", "true"),
        ("ct_orig_tuple", "true"),
        ("ct_orig_tuple6", "false"),
        ("ct_zero_snat", "true"),
        ("ct_flush", "true"),
        ("masked_set_action", "true"),
        ("max_mpls_depth", "1"),
        ("max_hash_alg", "0"),
        ("trunc", "false"),
        ("clone", "false"),
        ("check_pkt_len", "false"),
        ("explicit_drop_action", "false"),
        ("tnl_push_pop", "false"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

fn uuid_where(uuid: &str) -> Value {
    json!([["_uuid", "==", ["uuid", uuid]]])
}

fn none() -> Value {
    json!(["set", []])
}

fn opt<T: Into<Value>>(v: Option<T>) -> Value {
    v.map(Into::into).unwrap_or_else(none)
}

fn str_set(items: &[&str]) -> Value {
    json!(["set", items])
}

fn str_map(pairs: &[(String, String)]) -> Value {
    json!(["map", pairs.iter().map(|(k, v)| json!([k, v])).collect::<Vec<_>>()])
}

/// A canonical form for comparing values: sets and maps sorted, a bare
/// atom equal to a set of one.
fn canon(v: &Value) -> Option<Vec<String>> {
    let d = Datum::parse(v).ok()?;
    let mut items: Vec<String> = match &d {
        Datum::Map(m) => m.iter().map(|(k, v)| format!("{}={}", k.to_json(), v.to_json())).collect(),
        _ => d.atoms().iter().map(|a| a.to_json().to_string()).collect(),
    };
    items.sort();
    Some(items)
}

fn differs(row: Option<&Row>, col: &str, new: &Value) -> bool {
    match row.and_then(|r| r.get(col)) {
        Some(old) => canon(old) != canon(new) || canon(new).is_none(),
        None => true,
    }
}

/// Collects the changed columns of one row into an `update` operation.
fn update_op(table: &str, where_: Value, row: Option<&Row>, cols: Vec<(&str, Value)>) -> Option<Value> {
    let changed: serde_json::Map<String, Value> =
        cols.into_iter().filter(|(c, v)| differs(row, c, v)).map(|(c, v)| (c.to_string(), v)).collect();
    if changed.is_empty() {
        None
    } else {
        Some(json!({"op": "update", "table": table, "where": where_, "row": changed}))
    }
}

fn mac_string(m: &[u8; 6]) -> String {
    format!("{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", m[0], m[1], m[2], m[3], m[4], m[5])
}

/// The operations that bring the database in line with the switch; empty
/// when nothing differs. Call it after applying `desired` (cur_cfg is set
/// to `desired.next_cfg`), and periodically for statistics.
pub fn transaction(desired: &Desired, replica: &Replica, actual: &Actual) -> Vec<Value> {
    let mut ops = Vec::new();
    for (_, _, iface) in desired.interfaces() {
        let row = replica.row("Interface", &iface.uuid);
        let facts = actual.interfaces.get(&iface.name);
        let error = iface.error.clone().or_else(|| facts.and_then(|f| f.error.clone()));
        // A port that is open but whose device went away keeps its ofport
        // and link columns, with the error saying why it is down.
        let open = facts.is_some_and(|f| f.ofport.is_some() && f.link_up.is_some());
        let cols = match (error, facts) {
            (Some(e), None) => vec![("error", json!(e)), ("ofport", json!(-1))],
            (Some(e), Some(_)) if !open || iface.error.is_some() => vec![("error", json!(e)), ("ofport", json!(-1))],
            (error, Some(f)) => {
                let mut cols = vec![
                    ("error", error.map_or_else(none, |e| json!(e))),
                    ("ofport", opt(f.ofport)),
                    ("admin_state", opt(f.admin_up.map(|u| if u { "up" } else { "down" }))),
                    ("link_state", opt(f.link_up.map(|u| if u { "up" } else { "down" }))),
                    ("link_speed", opt(f.link_speed)),
                    ("mtu", opt(f.mtu)),
                    ("mac_in_use", opt(f.mac_in_use.as_ref().map(mac_string))),
                ];
                if !f.statistics.is_empty() {
                    let pairs: Vec<Value> = f.statistics.iter().map(|(k, v)| json!([k, v])).collect();
                    cols.push(("statistics", json!(["map", pairs])));
                }
                let bfd: Vec<Value> = f.bfd_status.iter().flat_map(|m| m.iter().map(|(k, v)| json!([k, v]))).collect();
                cols.push(("bfd_status", json!(["map", bfd])));
                if let Some(st) = &f.status {
                    let pairs: Vec<Value> = st.iter().map(|(k, v)| json!([k, v])).collect();
                    cols.push(("status", json!(["map", pairs])));
                }
                cols
            }
            (None, None) => continue,
        };
        ops.extend(update_op("Interface", uuid_where(&iface.uuid), row, cols));
    }
    for b in &desired.bridges {
        if let Some(id) = actual.datapath_ids.get(&b.name) {
            let row = replica.row("Bridge", &b.uuid);
            ops.extend(update_op(
                "Bridge",
                uuid_where(&b.uuid),
                row,
                vec![("datapath_id", json!(format!("{id:016x}")))],
            ));
        }
    }
    let ovs = replica.table("Open_vSwitch").next().map(|(_, r)| r);
    if ovs.is_some() {
        let mut types = IFACE_TYPES.to_vec();
        types.sort();
        ops.extend(update_op(
            "Open_vSwitch",
            json!([]),
            ovs,
            vec![
                ("cur_cfg", json!(desired.next_cfg)),
                ("datapath_types", str_set(&["netdev"])),
                ("iface_types", str_set(&types)),
                ("ovs_version", json!(ovs_version())),
            ],
        ));
        let caps = if actual.capabilities.is_empty() { default_capabilities() } else { actual.capabilities.clone() };
        let dp_cols = vec![("datapath_version", json!(ovs_version())), ("capabilities", str_map(&caps))];
        let existing = ovs.and_then(|r| r.get("datapaths")).and_then(|v| Datum::parse(v).ok()).and_then(|d| {
            d.pairs()
                .into_iter()
                .find(|(k, _)| k.as_str() == Some("netdev"))
                .and_then(|(_, v)| v.as_uuid().map(str::to_string))
        });
        match existing {
            Some(u) => ops.extend(update_op("Datapath", uuid_where(&u), replica.row("Datapath", &u), dp_cols)),
            None => {
                let row: serde_json::Map<String, Value> =
                    dp_cols.into_iter().map(|(c, v)| (c.to_string(), v)).collect();
                ops.push(json!({"op": "insert", "table": "Datapath", "uuid-name": "dp_netdev", "row": row}));
                ops.push(json!({"op": "mutate", "table": "Open_vSwitch", "where": [],
                    "mutations": [["datapaths", "insert", ["map", [["netdev", ["named-uuid", "dp_netdev"]]]]]]}));
            }
        }
    }
    ops
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replica() -> Replica {
        let mut r = Replica::new();
        r.apply_update(&json!({
            "Open_vSwitch": {"o": {"new": {"bridges": ["uuid", "b"], "next_cfg": 3, "cur_cfg": 0,
                "datapaths": ["map", []]}}},
            "Bridge": {"b": {"new": {"name": "br0", "ports": ["uuid", "p"]}}},
            "Port": {"p": {"new": {"name": "p0", "interfaces": ["set", [["uuid", "i0"], ["uuid", "i1"]]]}}},
            "Interface": {"i0": {"new": {"name": "p0", "type": "afxdp", "ofport": ["set", []], "error": ["set", []]}},
                          "i1": {"new": {"name": "p1", "type": "afxdp", "options": ["map", [["xdp-mode", "x"]]]}}}
        }))
        .unwrap();
        r
    }

    /// A device's `status` map is written as a map; a device without one
    /// leaves the column alone.
    #[test]
    fn status_map_written_when_the_device_has_one() {
        let r = replica();
        let d = Desired::from_replica(&r);
        let mut a = Actual::default();
        let st: std::collections::BTreeMap<String, String> =
            [("mode", "client"), ("status", "connected")].iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        a.interfaces.insert("p0".into(), IfaceFacts { ofport: Some(1), status: Some(st), ..Default::default() });
        let ops = transaction(&d, &r, &a);
        let i0 = ops.iter().find(|o| o["table"] == "Interface" && o["where"][0][2][1] == "i0").unwrap();
        assert_eq!(i0["row"]["status"], json!(["map", [["mode", "client"], ["status", "connected"]]]));
        a.interfaces.get_mut("p0").unwrap().status = None;
        let ops = transaction(&d, &r, &a);
        let i0 = ops.iter().find(|o| o["table"] == "Interface" && o["where"][0][2][1] == "i0").unwrap();
        assert!(i0["row"].get("status").is_none());
    }

    #[test]
    fn writes_only_what_differs() {
        let mut r = replica();
        let d = Desired::from_replica(&r);
        let mut a = Actual::default();
        a.interfaces.insert("p0".into(), IfaceFacts { ofport: Some(1), mtu: Some(1500), ..Default::default() });
        a.datapath_ids.insert("br0".into(), 0xab);
        let ops = transaction(&d, &r, &a);
        let find = |t: &str| ops.iter().filter(|o| o["table"] == t).cloned().collect::<Vec<_>>();
        let ifs = find("Interface");
        assert_eq!(ifs.len(), 2);
        let i0 = ifs.iter().find(|o| o["where"][0][2][1] == "i0").unwrap();
        assert_eq!(i0["row"]["ofport"], 1);
        assert!(i0["row"].get("error").is_none(), "already empty");
        let i1 = ifs.iter().find(|o| o["where"][0][2][1] == "i1").unwrap();
        assert_eq!(i1["row"]["ofport"], -1);
        assert!(i1["row"]["error"].as_str().unwrap().starts_with("options:xdp-mode"));
        assert_eq!(find("Bridge")[0]["row"]["datapath_id"], "00000000000000ab");
        let ovs = find("Open_vSwitch");
        assert_eq!(ovs[0]["row"]["cur_cfg"], 3);
        assert_eq!(ovs[1]["op"], "mutate");
        assert_eq!(find("Datapath")[0]["op"], "insert");

        // Pretend the server applied it all: nothing left to write.
        for op in ops.iter().filter(|o| o["op"] == "update") {
            let table = op["table"].as_str().unwrap();
            let uuids: Vec<String> = match op["where"][0][2][1].as_str() {
                Some(u) => vec![u.to_string()],
                None => r.table(table).map(|(u, _)| u.clone()).collect(),
            };
            for u in uuids {
                let mut row = r.row(table, &u).unwrap().clone();
                for (k, v) in op["row"].as_object().unwrap() {
                    row.insert(k.clone(), v.clone());
                }
                r.apply_update(&json!({table: {u: {"new": row}}})).unwrap();
            }
        }
        let mut ovs = r.row("Open_vSwitch", "o").unwrap().clone();
        ovs.insert("datapaths".into(), json!(["map", [["netdev", ["uuid", "dp"]]]]));
        let caps = str_map(&default_capabilities());
        r.apply_update(&json!({"Open_vSwitch": {"o": {"new": ovs}},
            "Datapath": {"dp": {"new": {"datapath_version": ovs_version(), "capabilities": caps}}}}))
            .unwrap();
        assert_eq!(transaction(&d, &r, &a), Vec::<Value>::new());
    }
}
