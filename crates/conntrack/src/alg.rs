//! Connection-tracking helpers (`ct(commit,alg=ftp|tftp)`): protocols that
//! open a second connection the first one announces.
//!
//! A committed connection with a helper teaches the tracker to *expect* a
//! related connection: TFTP's server answers from a new port to the
//! client's port; FTP's control channel names the data connection's
//! address and port (`PORT`/`EPRT` from the client for active mode, the
//! `227`/`229` replies from the server for passive mode). The first packet
//! that matches an expectation is `+new+rel` (and its source port may be
//! anything); committing it creates the connection and uses the
//! expectation up. Unclaimed expectations expire after [`EXPECT_MS`].
//!
//! Left out, as said in the README: rewriting FTP payloads for NAT (the
//! announced address is used as it is, so FTP works through a firewall but
//! not through NAT).

use crate::packet::{proto, Tuple};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;

/// Helper ports, as `NXAST_CT` encodes them.
pub const FTP: u16 = 21;
pub const TFTP: u16 = 69;
/// How long an announced connection is waited for.
pub const EXPECT_MS: u64 = 30_000;
/// The most expectations held at once (a flood of announcements cannot
/// grow the table without bound).
pub const MAX_EXPECT: usize = 4096;

/// The connection an expectation waits for: everything but the source
/// port, which the opener chooses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ExpKey {
    pub zone: u16,
    pub proto: u8,
    pub v6: bool,
    pub src: u128,
    pub dst: u128,
    pub dport: u16,
}

impl ExpKey {
    fn of(zone: u16, t: &Tuple) -> ExpKey {
        ExpKey { zone, proto: t.proto, v6: t.v6, src: t.src, dst: t.dst, dport: t.dport }
    }
}

#[derive(Default)]
pub struct Expectations {
    map: Mutex<HashMap<ExpKey, u64>>,
    n: AtomicUsize,
}

impl Expectations {
    pub fn len(&self) -> usize {
        self.n.load(Relaxed)
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn add(&self, k: ExpKey, now_ms: u64) -> bool {
        let mut m = self.map.lock().expect("ct expectations");
        if m.len() >= MAX_EXPECT && !m.contains_key(&k) {
            return false;
        }
        m.insert(k, now_ms + EXPECT_MS);
        self.n.store(m.len(), Relaxed);
        true
    }

    /// Whether `t` (in `zone`) is an expected connection; `take` uses the
    /// expectation up.
    pub fn matches(&self, zone: u16, t: &Tuple, now_ms: u64, take: bool) -> bool {
        let k = ExpKey::of(zone, t);
        let mut m = self.map.lock().expect("ct expectations");
        let live = match m.get(&k) {
            Some(&exp) if exp > now_ms => true,
            Some(_) => {
                m.remove(&k);
                false
            }
            None => false,
        };
        if live && take {
            m.remove(&k);
        }
        self.n.store(m.len(), Relaxed);
        live
    }

    pub fn sweep(&self, now_ms: u64) {
        let mut m = self.map.lock().expect("ct expectations");
        m.retain(|_, exp| *exp > now_ms);
        self.n.store(m.len(), Relaxed);
    }
}

/// What a newly committed TFTP connection (`orig`, client to server port
/// 69) expects: the server's answer from any port to the client's port.
pub fn tftp_expectation(zone: u16, orig: &Tuple) -> Option<ExpKey> {
    (orig.proto == proto::UDP).then_some(ExpKey {
        zone,
        proto: proto::UDP,
        v6: orig.v6,
        src: orig.dst,
        dst: orig.src,
        dport: orig.sport,
    })
}

/// What one FTP control segment's payload announces. `reply` says the
/// segment travels server to client; `orig` is the control connection's
/// original tuple (client to server).
pub fn ftp_expectation(zone: u16, orig: &Tuple, reply: bool, payload: &[u8]) -> Option<ExpKey> {
    let line = std::str::from_utf8(payload.get(..payload.len().min(256))?).ok()?;
    let (addr, port, from, to_server) = if !reply {
        // Active mode: the client names where the server connects to.
        if let Some(arg) = strip_cmd(line, "PORT ") {
            let (a, p) = parse_h_p(arg)?;
            (Some(a), p, orig.dst, false)
        } else if let Some(arg) = strip_cmd(line, "EPRT ") {
            let (a, p) = parse_eprt(arg, orig.v6)?;
            (Some(a), p, orig.dst, false)
        } else {
            return None;
        }
    } else if let Some(rest) = line.strip_prefix("227 ") {
        // Passive mode: the server names where the client connects to.
        let inner = rest.split_once('(').map_or(rest, |(_, r)| r);
        let (a, p) = parse_h_p(inner.split(')').next()?)?;
        (Some(a), p, orig.src, true)
    } else if let Some(rest) = line.strip_prefix("229 ") {
        let inner = rest.split_once('(')?.1.split(')').next()?;
        let p: u16 = inner.trim_matches('|').parse().ok()?;
        (None, p, orig.src, true)
    } else {
        return None;
    };
    if port == 0 {
        return None;
    }
    // The data connection's destination: the announced address (the
    // control peer's own address when none is given, as in EPSV).
    let dst = match (addr, to_server) {
        (Some(a), _) => a,
        (None, true) => orig.dst,
        (None, false) => orig.src,
    };
    Some(ExpKey { zone, proto: proto::TCP, v6: orig.v6, src: from, dst, dport: port })
}

fn strip_cmd<'a>(line: &'a str, cmd: &str) -> Option<&'a str> {
    (line.len() >= cmd.len() && line[..cmd.len()].eq_ignore_ascii_case(cmd)).then(|| line[cmd.len()..].trim())
}

/// `h1,h2,h3,h4,p1,p2` (RFC 959).
fn parse_h_p(s: &str) -> Option<(u128, u16)> {
    let n: Vec<u8> = s.trim().split(',').map(|x| x.trim().parse().ok()).collect::<Option<Vec<u8>>>()?;
    if n.len() != 6 {
        return None;
    }
    let a = u32::from_be_bytes([n[0], n[1], n[2], n[3]]) as u128;
    Some((a, (n[4] as u16) << 8 | n[5] as u16))
}

/// `|1|192.0.2.1|6446|` or `|2|2001:db8::1|6446|` (RFC 2428).
fn parse_eprt(s: &str, v6: bool) -> Option<(u128, u16)> {
    let d = s.trim().chars().next()?;
    let parts: Vec<&str> = s.trim().trim_matches(d).split(d).collect();
    if parts.len() != 3 {
        return None;
    }
    let a = match (parts[0], v6) {
        ("1", false) => u32::from(parts[1].parse::<std::net::Ipv4Addr>().ok()?) as u128,
        ("2", true) => u128::from(parts[1].parse::<std::net::Ipv6Addr>().ok()?),
        _ => return None,
    };
    Some((a, parts[2].parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(src: u32, dst: u32, sport: u16, dport: u16, p: u8) -> Tuple {
        Tuple { src: src as u128, dst: dst as u128, sport, dport, proto: p, v6: false }
    }

    #[test]
    fn ftp_announcements() {
        let ctl = t(0x0a00_0001, 0x0a00_0002, 40000, 21, proto::TCP);
        let port = ftp_expectation(0, &ctl, false, b"PORT 10,0,0,1,195,80\r\n").unwrap();
        assert_eq!((port.src, port.dst, port.dport), (0x0a00_0002, 0x0a00_0001, 50000));
        let pasv = ftp_expectation(0, &ctl, true, b"227 Entering Passive Mode (10,0,0,2,39,16).\r\n").unwrap();
        assert_eq!((pasv.src, pasv.dst, pasv.dport), (0x0a00_0001, 0x0a00_0002, 10000));
        let epsv = ftp_expectation(0, &ctl, true, b"229 Entering Extended Passive Mode (|||6446|)\r\n").unwrap();
        assert_eq!((epsv.src, epsv.dst, epsv.dport), (0x0a00_0001, 0x0a00_0002, 6446));
        let eprt = ftp_expectation(0, &ctl, false, b"EPRT |1|10.0.0.1|6275|\r\n").unwrap();
        assert_eq!((eprt.src, eprt.dst, eprt.dport), (0x0a00_0002, 0x0a00_0001, 6275));
        for junk in [&b"PORT 10,0,0,1,195\r\n"[..], b"PORT 300,0,0,1,1,1", b"RETR x", b"\xff\xfe", b"227 (1,2,3)"] {
            assert!(ftp_expectation(0, &ctl, false, junk).is_none() && ftp_expectation(0, &ctl, true, junk).is_none());
        }
    }

    #[test]
    fn expectations_are_used_once_and_expire() {
        let e = Expectations::default();
        let k = tftp_expectation(3, &t(1, 2, 5000, 69, proto::UDP)).unwrap();
        assert!(e.add(k, 0));
        let answer = t(2, 1, 41234, 5000, proto::UDP);
        assert!(!e.matches(4, &answer, 1, false), "other zone");
        assert!(e.matches(3, &answer, 1, false));
        assert!(e.matches(3, &answer, 1, true));
        assert!(!e.matches(3, &answer, 1, false), "used up");
        assert!(e.add(k, 0));
        assert!(!e.matches(3, &answer, EXPECT_MS, false), "expired");
        assert!(e.is_empty());
    }
}
