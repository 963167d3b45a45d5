//! The in-memory copy of the monitored tables, and OVSDB datum decoding
//! (RFC 7047 section 5.1).
//!
//! Rows keep the server's JSON for each column, untouched; [`Datum`]
//! decodes one on demand (`["set",[...]]`, `["map",[[k,v],...]]`,
//! `["uuid","..."]`, `["named-uuid","..."]`, bare atoms). The replica
//! applies `update` notifications (monitor, RFC 7047 4.1.6: `new` replaces
//! the whole row, absent `new` deletes it) and `update2` notifications
//! (monitor_cond: `initial`/`insert` give a row, `modify` a diff, `delete`).
//! A malformed update is reported as an error and leaves rows that were
//! already applied in place; nothing panics.

use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// One row: column name -> the column's JSON value as the server sent it.
pub type Row = Map<String, Value>;

/// table -> row uuid -> row.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Replica {
    pub tables: BTreeMap<String, BTreeMap<String, Row>>,
}

/// Why an update notification could not be applied.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("bad table update: {0}")]
pub struct UpdateError(pub String);

impl Replica {
    pub fn new() -> Replica {
        Replica::default()
    }

    /// Rows of one table (empty if the table is unknown).
    pub fn table(&self, name: &str) -> impl Iterator<Item = (&String, &Row)> {
        self.tables.get(name).into_iter().flat_map(|t| t.iter())
    }

    /// One row by uuid.
    pub fn row(&self, table: &str, uuid: &str) -> Option<&Row> {
        self.tables.get(table)?.get(uuid)
    }

    /// Applies a `<table-updates>` object (the monitor reply and `update`).
    pub fn apply_update(&mut self, updates: &Value) -> Result<(), UpdateError> {
        let tables = updates.as_object().ok_or_else(|| UpdateError("table-updates is not an object".into()))?;
        for (tname, rows) in tables {
            let rows = rows.as_object().ok_or_else(|| UpdateError(format!("{tname}: not an object")))?;
            let table = self.tables.entry(tname.clone()).or_default();
            for (uuid, ru) in rows {
                let ru = ru.as_object().ok_or_else(|| UpdateError(format!("{tname} {uuid}: not an object")))?;
                match ru.get("new") {
                    Some(Value::Object(new)) => {
                        table.insert(uuid.clone(), new.clone());
                    }
                    None | Some(Value::Null) => {
                        table.remove(uuid);
                    }
                    Some(_) => return Err(UpdateError(format!("{tname} {uuid}: \"new\" is not an object"))),
                }
            }
        }
        Ok(())
    }

    /// Applies a `<table-updates2>` object (`update2`, monitor_cond reply).
    pub fn apply_update2(&mut self, updates: &Value) -> Result<(), UpdateError> {
        let tables = updates.as_object().ok_or_else(|| UpdateError("table-updates2 is not an object".into()))?;
        for (tname, rows) in tables {
            let rows = rows.as_object().ok_or_else(|| UpdateError(format!("{tname}: not an object")))?;
            let table = self.tables.entry(tname.clone()).or_default();
            for (uuid, ru) in rows {
                let ru = ru.as_object().ok_or_else(|| UpdateError(format!("{tname} {uuid}: not an object")))?;
                let bad = || UpdateError(format!("{tname} {uuid}: bad row-update2"));
                if let Some(row) = ru.get("initial").or_else(|| ru.get("insert")) {
                    table.insert(uuid.clone(), row.as_object().ok_or_else(bad)?.clone());
                } else if let Some(diff) = ru.get("modify") {
                    let diff = diff.as_object().ok_or_else(bad)?;
                    let row = table.entry(uuid.clone()).or_default();
                    for (col, d) in diff {
                        let merged = match row.get(col) {
                            Some(old) => {
                                apply_diff(old, d).map_err(|e| UpdateError(format!("{tname} {uuid} {col}: {e}")))?
                            }
                            None => d.clone(),
                        };
                        row.insert(col.clone(), merged);
                    }
                } else if ru.contains_key("delete") {
                    table.remove(uuid);
                } else {
                    return Err(bad());
                }
            }
        }
        Ok(())
    }
}

/// update2 `modify` semantics (RFC 7047 extension, ovsdb-server(7)): a set
/// diff toggles membership, a map diff adds new keys, removes a key given
/// with its current value and replaces a key given with another value;
/// anything else replaces the old value.
fn apply_diff(old: &Value, diff: &Value) -> Result<Value, DatumError> {
    match (Datum::parse(old)?, Datum::parse(diff)?) {
        (Datum::Set(mut o), Datum::Set(d)) => {
            for a in d {
                toggle(&mut o, a);
            }
            Ok(Datum::Set(o).to_json())
        }
        (Datum::Set(mut o), Datum::Atom(a)) => {
            toggle(&mut o, a);
            Ok(Datum::Set(o).to_json())
        }
        (Datum::Atom(a), Datum::Set(d)) if !d.is_empty() => {
            // An optional column (set of 0..1) sent as a bare atom.
            let mut o = vec![a];
            for x in d {
                toggle(&mut o, x);
            }
            Ok(Datum::Set(o).to_json())
        }
        (Datum::Map(mut o), Datum::Map(d)) => {
            for (k, v) in d {
                match o.iter().position(|(ok, _)| *ok == k) {
                    Some(i) if o[i].1 == v => {
                        o.remove(i);
                    }
                    Some(i) => o[i].1 = v,
                    None => o.push((k, v)),
                }
            }
            Ok(Datum::Map(o).to_json())
        }
        _ => Ok(diff.clone()),
    }
}

fn toggle(set: &mut Vec<Atom>, a: Atom) {
    match set.iter().position(|x| *x == a) {
        Some(i) => {
            set.remove(i);
        }
        None => set.push(a),
    }
}

/// One OVSDB atom.
#[derive(Debug, Clone, PartialEq)]
pub enum Atom {
    Integer(i64),
    Real(f64),
    Boolean(bool),
    String(String),
    Uuid(String),
    NamedUuid(String),
}

/// A decoded column value.
#[derive(Debug, Clone, PartialEq)]
pub enum Datum {
    Atom(Atom),
    Set(Vec<Atom>),
    Map(Vec<(Atom, Atom)>),
}

/// Why JSON is not an OVSDB datum.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("not an OVSDB value: {0}")]
pub struct DatumError(pub String);

impl Atom {
    pub fn parse(v: &Value) -> Result<Atom, DatumError> {
        match v {
            Value::Bool(b) => Ok(Atom::Boolean(*b)),
            Value::String(s) => Ok(Atom::String(s.clone())),
            Value::Number(n) => match n.as_i64() {
                Some(i) => Ok(Atom::Integer(i)),
                None => n.as_f64().map(Atom::Real).ok_or_else(|| DatumError(n.to_string())),
            },
            Value::Array(a) => match (a.first().and_then(Value::as_str), a.get(1).and_then(Value::as_str), a.len()) {
                (Some("uuid"), Some(u), 2) => Ok(Atom::Uuid(u.to_string())),
                (Some("named-uuid"), Some(u), 2) => Ok(Atom::NamedUuid(u.to_string())),
                _ => Err(DatumError(truncated(v))),
            },
            _ => Err(DatumError(truncated(v))),
        }
    }

    pub fn to_json(&self) -> Value {
        match self {
            Atom::Integer(i) => Value::from(*i),
            Atom::Real(r) => Value::from(*r),
            Atom::Boolean(b) => Value::from(*b),
            Atom::String(s) => Value::from(s.as_str()),
            Atom::Uuid(u) => serde_json::json!(["uuid", u]),
            Atom::NamedUuid(u) => serde_json::json!(["named-uuid", u]),
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Atom::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Atom::Integer(i) => Some(*i),
            _ => None,
        }
    }

    pub fn as_uuid(&self) -> Option<&str> {
        match self {
            Atom::Uuid(u) | Atom::NamedUuid(u) => Some(u),
            _ => None,
        }
    }
}

fn truncated(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 80 {
        format!("{}...", s.chars().take(80).collect::<String>())
    } else {
        s
    }
}

impl Datum {
    pub fn parse(v: &Value) -> Result<Datum, DatumError> {
        if let Value::Array(a) = v {
            match (a.first().and_then(Value::as_str), a.get(1), a.len()) {
                (Some("set"), Some(Value::Array(items)), 2) => {
                    return items.iter().map(Atom::parse).collect::<Result<_, _>>().map(Datum::Set);
                }
                (Some("map"), Some(Value::Array(pairs)), 2) => {
                    return pairs
                        .iter()
                        .map(|p| match p.as_array().map(Vec::as_slice) {
                            Some([k, v]) => Ok((Atom::parse(k)?, Atom::parse(v)?)),
                            _ => Err(DatumError(truncated(p))),
                        })
                        .collect::<Result<_, _>>()
                        .map(Datum::Map);
                }
                _ => {}
            }
        }
        Atom::parse(v).map(Datum::Atom)
    }

    pub fn to_json(&self) -> Value {
        match self {
            Datum::Atom(a) => a.to_json(),
            Datum::Set(s) => serde_json::json!(["set", s.iter().map(Atom::to_json).collect::<Vec<_>>()]),
            Datum::Map(m) => serde_json::json!([
                "map",
                m.iter().map(|(k, v)| serde_json::json!([k.to_json(), v.to_json()])).collect::<Vec<_>>()
            ]),
        }
    }

    /// The atoms of a set (a bare atom is a set of one; a map has none).
    pub fn atoms(&self) -> Vec<&Atom> {
        match self {
            Datum::Atom(a) => vec![a],
            Datum::Set(s) => s.iter().collect(),
            Datum::Map(_) => Vec::new(),
        }
    }

    /// The pairs of a map (an empty set is an empty map).
    pub fn pairs(&self) -> Vec<(&Atom, &Atom)> {
        match self {
            Datum::Map(m) => m.iter().map(|(k, v)| (k, v)).collect(),
            _ => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn datum_round_trip() {
        for v in [
            json!(1),
            json!("x"),
            json!(["uuid", "abc"]),
            json!(["named-uuid", "n"]),
            json!(["set", [1, 2]]),
            json!(["map", [["a", "b"]]]),
        ] {
            assert_eq!(Datum::parse(&v).unwrap().to_json(), v);
        }
        assert!(Datum::parse(&json!(["bogus", 1])).is_err());
        assert!(Datum::parse(&json!({"a":1})).is_err());
        assert!(Datum::parse(&json!(["map", [["a"]]])).is_err());
    }

    #[test]
    fn update_and_update2() {
        let mut r = Replica::new();
        r.apply_update(&json!({"Port": {"u1": {"new": {"name": "p0", "trunks": ["set", [1, 2]]}}}})).unwrap();
        assert_eq!(r.row("Port", "u1").unwrap()["name"], "p0");
        r.apply_update2(&json!({"Port": {"u1": {"modify": {"trunks": ["set", [2, 3]]}}}})).unwrap();
        assert_eq!(r.row("Port", "u1").unwrap()["trunks"], json!(["set", [1, 3]]));
        r.apply_update2(&json!({"Port": {"u2": {"insert": {"other_config": ["map", [["a", "1"], ["b", "2"]]]}}}}))
            .unwrap();
        r.apply_update2(
            &json!({"Port": {"u2": {"modify": {"other_config": ["map", [["a", "1"], ["b", "3"], ["c", "4"]]]}}}}),
        )
        .unwrap();
        assert_eq!(r.row("Port", "u2").unwrap()["other_config"], json!(["map", [["b", "3"], ["c", "4"]]]));
        r.apply_update2(&json!({"Port": {"u2": {"delete": null}}})).unwrap();
        r.apply_update(&json!({"Port": {"u1": {"old": {}}}})).unwrap();
        assert_eq!(r.table("Port").count(), 0);
        assert!(r.apply_update(&json!([1])).is_err());
        assert!(r.apply_update2(&json!({"T": {"u": {"what": 1}}})).is_err());
    }
}
