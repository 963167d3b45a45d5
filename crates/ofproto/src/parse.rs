//! ovs-ofctl flow syntax: `table=0,priority=100,ip,nw_dst=10.0.0.0/8,actions=output:2`.

use crate::actions::{parse_actions, perr, Instruction, ParseError};
use flow::matching::parse_int;
use flow::Match;

/// Default OpenFlow priority, as ovs-ofctl uses.
pub const DEFAULT_PRIORITY: u32 = 32768;

/// One flow as written in an add-flows file or on the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowSpec {
    pub table: u8,
    pub priority: u32,
    pub cookie: u64,
    /// For modify/delete: which cookie bits must match (`cookie=V/M`).
    pub cookie_mask: u64,
    pub idle_timeout: u16,
    pub hard_timeout: u16,
    pub matched: Match,
    pub instructions: Vec<Instruction>,
    /// Whether the text had an `actions=` part.
    pub has_actions: bool,
    /// Whether `table=` was given (modify/delete default to all tables).
    pub table_given: bool,
}

/// What the flow text must contain.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Need {
    /// add-flow: actions required.
    Actions,
    /// del-flows and dump-flows: no actions allowed.
    NoActions,
    /// mod-flows: actions required.
    Either,
}

/// Parses one flow. Errors name the offending token.
pub fn parse_flow(s: &str, need: Need) -> Result<FlowSpec, ParseError> {
    let s = s.trim();
    let (head, actions) = match find_actions(s) {
        Some(i) => (&s[..i], Some(&s[i + "actions=".len()..])),
        None => (s, None),
    };
    let mut spec = FlowSpec {
        table: 0,
        priority: DEFAULT_PRIORITY,
        cookie: 0,
        cookie_mask: 0,
        idle_timeout: 0,
        hard_timeout: 0,
        matched: Match::CATCHALL,
        instructions: Vec::new(),
        has_actions: actions.is_some(),
        table_given: false,
    };
    let head = head.replace(|c: char| c.is_whitespace(), ",");
    for tok in head.split(',') {
        let tok = tok.trim();
        if tok.is_empty() {
            continue;
        }
        let (k, v) = tok.split_once('=').unwrap_or((tok, ""));
        let num = |max: u128| -> Result<u128, ParseError> {
            parse_int(v).filter(|&n| n <= max).ok_or_else(|| perr(tok, format!("bad value for {k} (0-{max})")))
        };
        match k {
            "table" => {
                if v == "all" || v == "255" {
                    spec.table_given = false;
                } else {
                    spec.table = num(254)? as u8;
                    spec.table_given = true;
                }
            }
            "priority" => spec.priority = num(65535)? as u32,
            "idle_timeout" => spec.idle_timeout = num(65535)? as u16,
            "hard_timeout" => spec.hard_timeout = num(65535)? as u16,
            "cookie" => {
                let (c, m) = match v.split_once('/') {
                    Some((c, m)) => (parse_int(c), parse_int(m)),
                    None => (parse_int(v), Some(u64::MAX as u128)),
                };
                let (Some(c), Some(m)) = (c, m) else { return Err(perr(tok, "bad cookie")) };
                if c > u64::MAX as u128 || m > u64::MAX as u128 {
                    return Err(perr(tok, "cookie is 64 bits"));
                }
                spec.cookie = c as u64;
                spec.cookie_mask = m as u64;
            }
            "out_port" | "out_group" | "send_flow_rem" | "check_overlap" | "reset_counts" | "no_packet_counts"
            | "no_byte_counts" | "importance" => {}
            _ => spec.matched.parse_token(tok)?,
        }
    }
    spec.matched.check_prereqs()?;
    match (need, actions) {
        (Need::Actions, None) => return Err(perr(s, "must specify an action (actions=...)")),
        (Need::NoActions, Some(_)) => return Err(perr(s, "actions are not allowed here")),
        _ => {}
    }
    if let Some(a) = actions {
        spec.instructions = parse_actions(a)?;
    }
    Ok(spec)
}

/// Byte offset of the `actions=` keyword at top level, if any.
fn find_actions(s: &str) -> Option<usize> {
    let mut depth = 0;
    let b = s.as_bytes();
    for i in 0..b.len() {
        match b[i] {
            b'(' => depth += 1,
            b')' => depth -= 1,
            _ => {}
        }
        if depth == 0 && s[i..].starts_with("actions=") && (i == 0 || matches!(b[i - 1], b',' | b' ' | b'\t')) {
            return Some(i);
        }
    }
    None
}

/// Parses an add-flows file: one flow per line; blank lines and `#`
/// comments skipped. Errors carry the line number.
pub fn parse_flow_file(text: &str) -> Result<Vec<FlowSpec>, (usize, ParseError)> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        out.push(parse_flow(line, Need::Actions).map_err(|e| (i + 1, e))?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn parse_a_flow() {
        let f = parse_flow("table=1,priority=100,ip,nw_dst=10.0.0.0/8,actions=output:2", Need::Actions).unwrap();
        assert_eq!(f.table, 1);
        assert_eq!(f.priority, 100);
        assert_eq!(f.matched.to_string(), "ip,nw_dst=10.0.0.0/8");
        assert_eq!(crate::actions::format_instructions(&f.instructions), "output:2");
        let f = parse_flow("priority=5 tcp tp_dst=80 actions=drop", Need::Actions).unwrap();
        assert_eq!(f.matched.key.tp_dst(), 80);
    }
    #[test]
    fn errors() {
        assert_eq!(parse_flow("priority=70000,actions=drop", Need::Actions).unwrap_err().token, "priority=70000");
        assert!(parse_flow("ip", Need::Actions).unwrap_err().reason.contains("action"));
        assert_eq!(parse_flow("tcp_dst=80,actions=drop", Need::Actions).unwrap_err().token, "tp_dst");
        let e = parse_flow_file("ip,actions=drop\n\n# c\nip,nw_dst=1.2.3,actions=drop\n").unwrap_err();
        assert_eq!(e.0, 4);
    }
}
