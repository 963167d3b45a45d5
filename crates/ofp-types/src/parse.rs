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
    /// Flow-mod flags ([`flags`]).
    pub flags: u16,
    pub importance: u16,
    /// Modify/delete: only rules that output to this port / group.
    pub out_port: Option<u32>,
    pub out_group: Option<u32>,
}

/// OpenFlow flow-mod flags (1.3 values).
pub mod flags {
    pub const SEND_FLOW_REM: u16 = 1;
    pub const CHECK_OVERLAP: u16 = 2;
    pub const RESET_COUNTS: u16 = 4;
    pub const NO_PKT_COUNTS: u16 = 8;
    pub const NO_BYT_COUNTS: u16 = 16;
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
        flags: 0,
        importance: 0,
        out_port: None,
        out_group: None,
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
                    // ovs-ofctl writes an all-ones mask as -1.
                    Some((c, "-1")) => (parse_int(c), Some(u64::MAX as u128)),
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
            "send_flow_rem" => spec.flags |= flags::SEND_FLOW_REM,
            "check_overlap" => spec.flags |= flags::CHECK_OVERLAP,
            "reset_counts" => spec.flags |= flags::RESET_COUNTS,
            "no_packet_counts" => spec.flags |= flags::NO_PKT_COUNTS,
            "no_byte_counts" => spec.flags |= flags::NO_BYT_COUNTS,
            "importance" => spec.importance = num(65535)? as u16,
            "out_port" => {
                let p = crate::actions::OfPort::parse(v).ok_or_else(|| perr(tok, "bad out_port"))?;
                spec.out_port = Some(crate::actions::ofport_number(p));
            }
            "out_group" => spec.out_group = Some(num(0xffff_ff00)? as u32),
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
    fn cookie_mask_minus_one_is_all_ones() {
        let f = parse_flow("cookie=0x77/-1", Need::NoActions).unwrap();
        assert_eq!((f.cookie, f.cookie_mask), (0x77, u64::MAX));
        assert!(parse_flow("cookie=0x77/-2", Need::NoActions).is_err());
    }

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
