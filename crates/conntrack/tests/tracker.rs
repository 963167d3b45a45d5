//! The tracker on crafted frames: the states a firewall pipeline sees,
//! NAT in both directions with valid checksums, related ICMP errors,
//! zones, limits, expiry, and packets it must refuse.
//!
//! Plan: frames come from `wire::build` (valid checksums), TCP segments are
//! patched with real sequence numbers; each test drives one `Conntrack`
//! with an explicit clock and checks `ct_state` bits, the rewritten bytes
//! and the dump.

use conntrack::packet::{self, Tuple};
use conntrack::{cs, format, Config, Conntrack, CtAction, Nat, NatFlags, NatRange};
use wire::build::Frame;
use wire::checksum::{checksum, l4_checksum_v4, l4_checksum_v6};

const A: u32 = 0x0a00_0001; // 10.0.0.1
const B: u32 = 0x0a00_0002; // 10.0.0.2
const X: u32 = 0xc0a8_0064; // 192.168.0.100
const MA: [u8; 6] = [2, 0, 0, 0, 0, 1];
const MB: [u8; 6] = [2, 0, 0, 0, 0, 2];

fn udp(src: u32, dst: u32, sp: u16, dp: u16) -> Vec<u8> {
    Frame::new(MA, MB).ipv4(src, dst).udp(sp, dp).payload(b"hello").build()
}

fn icmp_echo(src: u32, dst: u32, id: u16, reply: bool) -> Vec<u8> {
    let mut f = Frame::new(MA, MB).ipv4(src, dst).icmp_echo(id, 1).payload(b"ping").build();
    if reply {
        f[34] = 0;
        f[36..38].copy_from_slice(&[0, 0]);
        let c = checksum(&f[34..]);
        f[36..38].copy_from_slice(&c.to_be_bytes());
    }
    f
}

/// A TCP segment with real sequence numbers and window.
fn tcp(src: u32, dst: u32, sp: u16, dp: u16, flags: u16, seq: u32, ack: u32, data: usize) -> Vec<u8> {
    let mut f = Frame::new(MA, MB).ipv4(src, dst).tcp(sp, dp, flags).payload(&vec![7u8; data]).build();
    f[38..42].copy_from_slice(&seq.to_be_bytes());
    f[42..46].copy_from_slice(&ack.to_be_bytes());
    f[48..50].copy_from_slice(&64000u16.to_be_bytes());
    fix_l4(&mut f);
    f
}

/// Recomputes the IPv4 TCP/UDP checksum of a frame.
fn fix_l4(f: &mut [u8]) {
    let off = if f[23] == 6 { 34 + 16 } else { 34 + 6 };
    f[off..off + 2].copy_from_slice(&[0, 0]);
    let (s, d) = (u32::from_be_bytes(f[26..30].try_into().unwrap()), u32::from_be_bytes(f[30..34].try_into().unwrap()));
    let c = l4_checksum_v4(s, d, f[23], &f[34..]);
    f[off..off + 2].copy_from_slice(&c.to_be_bytes());
}

/// Checks every checksum of an IPv4 frame.
fn valid(f: &[u8]) -> bool {
    let ihl = (f[14] & 0xf) as usize * 4;
    let (s, d) = (u32::from_be_bytes(f[26..30].try_into().unwrap()), u32::from_be_bytes(f[30..34].try_into().unwrap()));
    let l4 = &f[14 + ihl..];
    let l4_ok = match f[23] {
        1 => checksum(l4) == 0,
        _ => l4_checksum_v4(s, d, f[23], l4) == 0,
    };
    checksum(&f[14..14 + ihl]) == 0 && l4_ok
}

fn ip_src(f: &[u8]) -> u32 {
    u32::from_be_bytes(f[26..30].try_into().unwrap())
}
fn ip_dst(f: &[u8]) -> u32 {
    u32::from_be_bytes(f[30..34].try_into().unwrap())
}
fn sport(f: &[u8]) -> u16 {
    u16::from_be_bytes([f[34], f[35]])
}
fn dport(f: &[u8]) -> u16 {
    u16::from_be_bytes([f[36], f[37]])
}

fn ct(zone: u16) -> CtAction {
    CtAction { zone, ..CtAction::default() }
}
fn commit(zone: u16) -> CtAction {
    CtAction { zone, commit: true, ..CtAction::default() }
}

fn snat(lo: u32, hi: u32, plo: u16, phi: u16) -> Nat {
    Nat::Src(NatRange {
        addr_min: lo as u128,
        addr_max: hi as u128,
        port_min: plo,
        port_max: phi,
        v6: false,
        flags: NatFlags::default(),
    })
}

#[test]
fn udp_firewall_states() {
    let t = Conntrack::new(Config::default());
    // Not committed: +new every time, nothing stored.
    let r = t.execute(&mut udp(B, A, 53, 4000), &ct(0), 0, None);
    assert_eq!(r.state, cs::TRK | cs::NEW);
    assert_eq!(t.n_conns(), 0);
    // Committed from A: the reply is +est+rpl, A's next packet +est.
    assert_eq!(t.execute(&mut udp(A, B, 4000, 53), &commit(0), 0, None).state, cs::TRK | cs::NEW);
    assert_eq!(t.execute(&mut udp(A, B, 4000, 53), &ct(0), 1, None).state, cs::TRK | cs::NEW, "no reply yet");
    assert_eq!(t.execute(&mut udp(B, A, 53, 4000), &ct(0), 2, None).state, cs::TRK | cs::EST | cs::RPL);
    assert_eq!(t.execute(&mut udp(A, B, 4000, 53), &ct(0), 3, None).state, cs::TRK | cs::EST);
    let d = t.connections(None);
    assert_eq!(d.len(), 1);
    assert_eq!(
        format::entry(&d[0], false, 0),
        "udp,orig=(src=10.0.0.1,dst=10.0.0.2,sport=4000,dport=53),reply=(src=10.0.0.2,dst=10.0.0.1,sport=53,dport=4000)"
    );
}

#[test]
fn icmp_echo_and_unsolicited_reply() {
    let t = Conntrack::new(Config::default());
    assert_eq!(
        t.execute(&mut icmp_echo(B, A, 9, true), &commit(0), 0, None).state,
        cs::TRK | cs::INV,
        "a reply cannot start"
    );
    assert_eq!(t.execute(&mut icmp_echo(A, B, 9, false), &commit(0), 0, None).state, cs::TRK | cs::NEW);
    assert_eq!(t.execute(&mut icmp_echo(B, A, 9, true), &ct(0), 1, None).state, cs::TRK | cs::EST | cs::RPL);
    // A request from B with the same id is another connection.
    assert_eq!(t.execute(&mut icmp_echo(B, A, 9, false), &ct(0), 1, None).state, cs::TRK | cs::NEW);
    let line = format::entry(&t.connections(None)[0], false, 0);
    assert_eq!(
        line,
        "icmp,orig=(src=10.0.0.1,dst=10.0.0.2,id=9,type=8,code=0),reply=(src=10.0.0.2,dst=10.0.0.1,id=9,type=0,code=0)"
    );
}

#[test]
fn tcp_handshake_data_close_and_window_violation() {
    use packet::tcp_flags::*;
    let t = Conntrack::new(Config::default());
    let z = ct(3);
    assert_eq!(t.execute(&mut tcp(A, B, 40000, 80, SYN | ACK, 1, 1, 0), &commit(3), 0, None).state, cs::TRK | cs::INV);
    assert_eq!(t.execute(&mut tcp(A, B, 40000, 80, SYN, 1000, 0, 0), &commit(3), 0, None).state, cs::TRK | cs::NEW);
    assert_eq!(
        t.execute(&mut tcp(B, A, 80, 40000, SYN | ACK, 9000, 1001, 0), &z, 1, None).state,
        cs::TRK | cs::EST | cs::RPL
    );
    assert_eq!(t.execute(&mut tcp(A, B, 40000, 80, ACK, 1001, 9001, 0), &z, 2, None).state, cs::TRK | cs::EST);
    assert_eq!(t.execute(&mut tcp(A, B, 40000, 80, ACK, 1001, 9001, 100), &z, 3, None).state, cs::TRK | cs::EST);
    let line = format::entry(&t.connections(Some(3))[0], false, 0);
    assert!(line.ends_with(",zone=3,protoinfo=(state=ESTABLISHED)"), "{line}");
    // Out of window (far ahead) and bad flags: +inv, counted, state kept.
    assert_eq!(
        t.execute(&mut tcp(A, B, 40000, 80, ACK, 1001 + 5_000_000, 9001, 10), &z, 4, None).state,
        cs::TRK | cs::INV
    );
    assert_eq!(t.execute(&mut tcp(A, B, 40000, 80, SYN | FIN, 1101, 9001, 0), &z, 4, None).state, cs::TRK | cs::INV);
    assert_eq!(t.counters.tcp_invalid.load(std::sync::atomic::Ordering::Relaxed), 2);
    assert_eq!(
        t.execute(&mut tcp(B, A, 80, 40000, ACK, 9001, 1101, 50), &z, 5, None).state,
        cs::TRK | cs::EST | cs::RPL
    );
    // Close.
    assert_eq!(t.execute(&mut tcp(A, B, 40000, 80, FIN | ACK, 1101, 9051, 0), &z, 6, None).state, cs::TRK | cs::EST);
    assert_eq!(
        t.execute(&mut tcp(B, A, 80, 40000, FIN | ACK, 9051, 1102, 0), &z, 7, None).state,
        cs::TRK | cs::EST | cs::RPL
    );
    assert_eq!(t.execute(&mut tcp(A, B, 40000, 80, ACK, 1102, 9052, 0), &z, 8, None).state, cs::TRK | cs::EST);
    let line = format::entry(&t.connections(None)[0], true, 8);
    assert!(line.contains("protoinfo=(state=TIME_WAIT)") && line.contains("timeout=30"), "{line}");
    // After the close timeout it is gone; a new SYN starts again.
    assert_eq!(t.sweep(8 + 30_001, usize::MAX), 1);
    assert_eq!(t.n_conns(), 0);
}

#[test]
fn bad_checksum_and_garbage_are_invalid() {
    let t = Conntrack::new(Config::default());
    let mut f = udp(A, B, 1, 2);
    let n = f.len();
    f[n - 1] ^= 0xff;
    assert_eq!(t.execute(&mut f, &commit(0), 0, None).state, cs::TRK | cs::INV);
    assert_eq!(t.untrackable_counts().iter().find(|x| x.0 == "bad_checksum").unwrap().1, 1);
    let mut arp = Frame::new(MA, MB).arp(1, MA, A, [0; 6], B).build();
    assert_eq!(t.execute(&mut arp, &commit(0), 0, None).state, cs::TRK | cs::INV);
    for cut in [10, 20, 30, 40] {
        let mut f = udp(A, B, 1, 2);
        f.truncate(cut);
        assert_eq!(t.execute(&mut f, &commit(0), 0, None).state, cs::TRK | cs::INV);
    }
    assert_eq!(t.n_conns(), 0);
    // With validation off (frames from a stack that leaves checksums to
    // offload), the same corrupted frame is tracked.
    let t = Conntrack::new(Config { validate_checksums: false, ..Config::default() });
    let mut f = udp(A, B, 1, 2);
    f[n - 1] ^= 0xff;
    assert_eq!(t.execute(&mut f, &commit(0), 0, None).state, cs::TRK | cs::NEW);
    // A bad IPv4 header checksum: invalid when checking, tracked when not.
    let mut f = udp(A, B, 3, 4);
    f[14 + 10] ^= 0xff;
    assert_eq!(t.execute(&mut f.clone(), &commit(0), 0, None).state, cs::TRK | cs::NEW);
    let checking = Conntrack::new(Config::default());
    assert_eq!(checking.execute(&mut f, &commit(0), 0, None).state, cs::TRK | cs::INV);
}

#[test]
fn zones_are_separate_and_limits_refuse_only_new_connections() {
    let t = Conntrack::new(Config { max_conns: 3, ..Config::default() });
    assert_eq!(t.execute(&mut udp(A, B, 1, 2), &commit(1), 0, None).state, cs::TRK | cs::NEW);
    assert_eq!(t.execute(&mut udp(A, B, 1, 2), &commit(2), 0, None).state, cs::TRK | cs::NEW, "zone 2 has its own");
    assert_eq!(t.execute(&mut udp(B, A, 2, 1), &ct(1), 0, None).state, cs::TRK | cs::EST | cs::RPL);
    assert_eq!(t.n_conns(), 2);
    t.set_zone_limit(Some(1), 1);
    assert_eq!(t.execute(&mut udp(A, B, 5, 6), &commit(1), 0, None).state, cs::TRK | cs::NEW);
    assert_eq!(t.n_conns(), 2, "zone 1 is at its limit");
    assert_eq!(t.execute(&mut udp(A, B, 5, 6), &commit(3), 0, None).state, cs::TRK | cs::NEW);
    assert_eq!(t.execute(&mut udp(A, B, 7, 8), &commit(3), 0, None).state, cs::TRK | cs::NEW);
    assert_eq!(t.n_conns(), 3, "global limit");
    use std::sync::atomic::Ordering::Relaxed;
    assert_eq!((t.counters.zone_full.load(Relaxed), t.counters.full.load(Relaxed)), (1, 1));
    // Existing connections keep working.
    assert_eq!(t.execute(&mut udp(B, A, 2, 1), &ct(2), 1, None).state, cs::TRK | cs::EST | cs::RPL);
    let (_, zones) = t.zone_limits();
    assert!(zones.iter().any(|z| z.zone == 1 && z.limit == 1 && z.count == 1), "{zones:?}");
    assert_eq!(t.flush(|c| c.zone == 3), 1);
    assert_eq!(t.n_conns(), 2);
}

#[test]
fn udp_expires_and_lookup_removes_it() {
    let t = Conntrack::new(Config::default());
    t.execute(&mut udp(A, B, 1, 2), &commit(0), 0, None);
    t.execute(&mut udp(B, A, 2, 1), &ct(0), 1000, None);
    // Bidirectional UDP times out 30 s after the last packet.
    assert_eq!(t.execute(&mut udp(B, A, 2, 1), &ct(0), 30_999, None).state, cs::TRK | cs::EST | cs::RPL);
    assert_eq!(t.execute(&mut udp(B, A, 2, 1), &ct(0), 61_000, None).state, cs::TRK | cs::NEW);
    assert_eq!(t.n_conns(), 0);
}

#[test]
fn snat_translates_both_ways_and_never_reuses_a_live_port() {
    let t = Conntrack::new(Config::default());
    let act = CtAction { zone: 0, commit: true, nat: Some(snat(X, X, 5000, 5001)), ..CtAction::default() };
    let mut f = udp(A, B, 4000, 53);
    let r = t.execute(&mut f, &act, 0, None);
    assert_eq!(r.state, cs::TRK | cs::NEW | cs::SNAT);
    let p1 = sport(&f);
    assert_eq!(ip_src(&f), X);
    assert!(p1 == 5000 || p1 == 5001, "{p1}");
    assert!(valid(&f), "checksums after SNAT");
    // The reply comes to X:p1 and goes back to A:4000.
    let mut back = udp(B, X, 53, p1);
    let nat = CtAction { nat: Some(Nat::Existing), ..ct(0) };
    let r = t.execute(&mut back, &nat, 1, None);
    assert_eq!(r.state, cs::TRK | cs::EST | cs::RPL | cs::SNAT);
    assert_eq!((ip_dst(&back), dport(&back)), (A, 4000));
    assert!(valid(&back));
    assert_eq!({ r.orig.unwrap().src }, A as u128, "ct_nw_src is the original source");
    // Another client with the same source port gets the other port.
    let c2 = 0x0a00_0003;
    let mut f2 = udp(c2, B, 4000, 53);
    assert_eq!(t.execute(&mut f2, &act, 2, None).state, cs::TRK | cs::NEW | cs::SNAT);
    assert_eq!((ip_src(&f2), sport(&f2)), (X, 10001 - p1), "the other port");
    // A third finds the range exhausted: refused, counted.
    let mut f3 = udp(0x0a00_0004, B, 4000, 53);
    assert_eq!(t.execute(&mut f3, &act, 3, None).state, cs::TRK | cs::INV);
    assert_eq!(t.counters.nat_exhausted.load(std::sync::atomic::Ordering::Relaxed), 1);
    let lines: Vec<String> = t.connections(None).iter().map(|c| format::entry(c, false, 0)).collect();
    let want = format!("udp,orig=(src=10.0.0.1,dst=10.0.0.2,sport=4000,dport=53),reply=(src=10.0.0.2,dst=192.168.0.100,sport=53,dport={p1})");
    assert!(lines.contains(&want), "{lines:?}");
}

#[test]
fn dnat_to_a_backend_and_related_icmp_error_translated() {
    let vip = 0x0a00_00fe;
    let backend = 0x0a00_0002;
    let t = Conntrack::new(Config::default());
    let range = NatRange {
        addr_min: backend as u128,
        addr_max: backend as u128,
        port_min: 8080,
        port_max: 8080,
        v6: false,
        flags: NatFlags::default(),
    };
    let act = CtAction { zone: 7, commit: true, nat: Some(Nat::Dst(range)), ..CtAction::default() };
    let mut f = udp(A, vip, 4000, 80);
    assert_eq!(t.execute(&mut f, &act, 0, None).state, cs::TRK | cs::NEW | cs::DNAT);
    assert_eq!((ip_dst(&f), dport(&f)), (backend, 8080));
    assert!(valid(&f));
    // The backend's port is closed: it answers with ICMP port unreachable
    // quoting the translated datagram. It must reach A as coming from the
    // VIP and quoting A's original datagram.
    let quoted = &f[14..14 + 28];
    let mut body = vec![3, 3, 0, 0, 0, 0, 0, 0];
    body.extend_from_slice(quoted);
    let mut err = Frame::new(MB, MA).ipv4(backend, A).l4_raw(1).payload(&body).build();
    let c = checksum(&err[34..]);
    err[36..38].copy_from_slice(&c.to_be_bytes());
    let r = t.execute(&mut err, &CtAction { nat: Some(Nat::Existing), ..ct(7) }, 1, None);
    assert_eq!(r.state, cs::TRK | cs::REL | cs::RPL | cs::DNAT);
    assert_eq!(ip_src(&err), vip, "outer source is the VIP");
    let inner = &err[42..];
    assert_eq!(u32::from_be_bytes(inner[16..20].try_into().unwrap()), vip, "quoted destination is the VIP");
    assert_eq!(u16::from_be_bytes([inner[22], inner[23]]), 80, "quoted port is the original");
    assert!(valid(&err), "ICMP and IP checksums after translation");
    assert_eq!(checksum(&inner[..20]), 0, "quoted IP header checksum");
    // Without a connection the same error is invalid.
    let t2 = Conntrack::new(Config::default());
    assert_eq!(t2.execute(&mut err.clone(), &ct(7), 1, None).state, cs::TRK | cs::INV);
}

#[test]
fn ipv6_tcp_and_icmpv6() {
    use packet::tcp_flags::*;
    let a6: u128 = 0xfd00_0000_0000_0000_0000_0000_0000_0001;
    let b6: u128 = 0xfd00_0000_0000_0000_0000_0000_0000_0002;
    let t = Conntrack::new(Config::default());
    let mut syn = Frame::new(MA, MB).ipv6(a6, b6).tcp(1234, 22, SYN).build();
    assert_eq!(t.execute(&mut syn, &commit(0), 0, None).state, cs::TRK | cs::NEW);
    let mut ping = Frame::new(MA, MB).ipv6(a6, b6).icmpv6_echo(5, 1).build();
    assert_eq!(t.execute(&mut ping, &commit(0), 0, None).state, cs::TRK | cs::NEW);
    let mut pong = Frame::new(MB, MA).ipv6(b6, a6).icmpv6_echo(5, 1).build();
    pong[54] = 129;
    pong[56..58].copy_from_slice(&[0, 0]);
    let c = l4_checksum_v6(b6, a6, 58, &pong[54..]);
    pong[56..58].copy_from_slice(&c.to_be_bytes());
    assert_eq!(t.execute(&mut pong, &ct(0), 1, None).state, cs::TRK | cs::EST | cs::RPL);
    assert_eq!(t.n_conns(), 2);
    let lines: Vec<String> = t.connections(None).iter().map(|c| format::entry(c, false, 0)).collect();
    assert!(lines.iter().any(|l| l.starts_with("tcp,orig=(src=fd00::1,dst=fd00::2,sport=1234,dport=22)")), "{lines:?}");
}

#[test]
fn force_commit_restarts_a_reply_direction_connection() {
    let t = Conntrack::new(Config::default());
    t.execute(&mut udp(A, B, 1, 2), &commit(0), 0, None);
    let force = CtAction { force: true, ..commit(0) };
    assert_eq!(t.execute(&mut udp(B, A, 2, 1), &force, 1, None).state, cs::TRK | cs::NEW);
    let c = &t.connections(None)[0];
    assert_eq!(c.orig, Tuple { src: B as u128, dst: A as u128, sport: 2, dport: 1, proto: 17, v6: false });
}

#[test]
fn mark_and_label_on_commit() {
    let t = Conntrack::new(Config::default());
    let act = CtAction { mark: Some((0x12, 0xff)), label: Some((1 << 100, 1 << 100)), ..commit(0) };
    let r = t.execute(&mut udp(A, B, 1, 2), &act, 0, None);
    assert_eq!((r.mark, r.label), (0x12, 1 << 100));
    let r = t.execute(&mut udp(B, A, 2, 1), &ct(0), 1, None);
    assert_eq!((r.mark, r.label), (0x12, 1 << 100), "the reply sees them");
    let line = format::entry(&t.connections(None)[0], false, 0);
    assert!(line.ends_with(",mark=18,labels=0x10000000000000000000000000"), "{line}");
}

#[test]
fn threads_commit_and_look_up_concurrently() {
    let t = std::sync::Arc::new(Conntrack::new(Config::default()));
    let hs: Vec<_> = (0..4u32)
        .map(|th| {
            let t = std::sync::Arc::clone(&t);
            std::thread::spawn(move || {
                for i in 0..2000u16 {
                    let mut f = udp(A + th, B, 1000 + i, 53);
                    assert_eq!(t.execute(&mut f, &commit(0), 0, None).state, cs::TRK | cs::NEW);
                    let mut r = udp(B, A + th, 53, 1000 + i);
                    assert_eq!(t.execute(&mut r, &ct(0), 1, None).state, cs::TRK | cs::EST | cs::RPL);
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    assert_eq!(t.n_conns(), 8000);
    assert_eq!(t.connections(None).len(), 8000);
    assert_eq!(t.sweep(1_000_000, usize::MAX), 8000);
    assert_eq!(t.n_conns(), 0);
}

#[test]
fn a_second_pass_does_not_launder_an_invalid_packet() {
    let t = Conntrack::new(Config::default());
    let mut f = udp(A, B, 1, 2);
    let n = f.len();
    f[n - 1] ^= 0xff;
    let first = t.execute(&mut f, &ct(0), 0, None);
    assert_eq!(first.state, cs::TRK | cs::INV);
    // After a recirculation the packet still carries +inv: it is checked
    // again, and still refused.
    let second = t.execute_tracked(&mut f, &commit(0), 0, None, first.state);
    assert_eq!(second.state, cs::TRK | cs::INV);
    assert_eq!(t.n_conns(), 0);
}

#[test]
fn zone_timeout_policies_apply_to_new_connections() {
    let t = Conntrack::new(Config::default());
    let policy = conntrack::Timeouts::default().with_policy([("udp_first", 5), ("udp_multiple", 7)]).unwrap();
    assert!(conntrack::Timeouts::default().with_policy([("udp_sideways", 5)]).is_err());
    let old = udp(A, B, 1000, 53);
    t.execute(&mut old.clone(), &commit(3), 0, None);
    t.set_zone_timeouts([(3, policy)].into_iter().collect());
    assert_eq!(t.zone_timeouts(3).udp_first, 5000);
    assert_eq!(t.zone_timeouts(4).udp_first, conntrack::Timeouts::default().udp_first);
    let new = udp(A, B, 1001, 53);
    t.execute(&mut new.clone(), &commit(3), 0, None);
    let other_zone = udp(A, B, 1002, 53);
    t.execute(&mut other_zone.clone(), &commit(4), 0, None);
    let exp =
        |sport: u16| t.connections(None).into_iter().find(|c| c.orig.sport == sport).map(|c| c.expires_ms).unwrap();
    assert_eq!(exp(1001), 5000, "the policy's udp_first");
    assert_eq!(exp(1000), conntrack::Timeouts::default().udp_first, "created before the policy: unchanged");
    assert_eq!(exp(1002), conntrack::Timeouts::default().udp_first, "another zone: defaults");
    // A reply moves it to udp_multiple; 5 s later without one it is gone.
    t.execute(&mut udp(B, A, 53, 1001), &ct(3), 1000, None);
    assert_eq!(exp(1001), 1000 + 7000);
    assert_eq!(t.sweep(8001, 1 << 20), 1);
}

/// `nat(src)` with no address (OVS writes `nat(src=0.0.0.0)` so, its
/// "all-zero SNAT", datapath capability `ct_zero_snat`): the packet keeps
/// its address and port unless its reply tuple is already taken, and then
/// only the port changes.
#[test]
fn zero_snat_changes_nothing_unless_the_reply_tuple_is_taken() {
    let t = Conntrack::new(Config::default());
    let zero = CtAction { zone: 0, commit: true, nat: Some(snat(0, 0, 0, 0)), ..CtAction::default() };
    let mut f = udp(A, B, 4000, 53);
    let before = f.clone();
    let r = t.execute(&mut f, &zero, 0, None);
    assert_eq!(r.state & (cs::NEW | cs::INV), cs::NEW);
    assert_eq!(f, before, "no translation without a collision");
    // A client behind SNAT to X:4000...
    let c = 0x0a00_0003;
    let act = CtAction { zone: 0, commit: true, nat: Some(snat(X, X, 4000, 4000)), ..CtAction::default() };
    let mut f1 = udp(c, B, 4000, 53);
    t.execute(&mut f1, &act, 1, None);
    assert_eq!((ip_src(&f1), sport(&f1)), (X, 4000));
    // ...then X itself talks to B from port 4000: its reply would be that
    // client's, so zero SNAT moves its source port, and only that.
    let mut f2 = udp(X, B, 4000, 53);
    let r2 = t.execute(&mut f2, &zero, 2, None);
    assert_eq!(r2.state & (cs::NEW | cs::INV), cs::NEW, "{:#x}", r2.state);
    assert_eq!(ip_src(&f2), X);
    assert_ne!(sport(&f2), 4000);
    assert!(valid(&f2));
    // Both replies find their way back.
    let nat = CtAction { nat: Some(Nat::Existing), ..ct(0) };
    let mut back = udp(B, X, 53, sport(&f2));
    t.execute(&mut back, &nat, 3, None);
    assert_eq!((ip_dst(&back), dport(&back)), (X, 4000));
    let mut back1 = udp(B, X, 53, 4000);
    t.execute(&mut back1, &nat, 4, None);
    assert_eq!((ip_dst(&back1), dport(&back1)), (c, 4000));
}

/// A packet that SNAT translated onto a tuple which is also another
/// connection's key (that one's DNAT made its keys asymmetric) still
/// belongs, in the next `ct()` after a recirculation, to the connection
/// that translated it; with or without the datapath's hint.
#[test]
fn a_translated_packet_belongs_to_the_connection_that_translated_it() {
    let (h9, h4, h8, h0) = (0x0a00_0009, 0x0a00_0004, 0x0a00_0008, 0x0a00_0000);
    for with_hint in [false, true] {
        let t = Conntrack::new(Config::default());
        // 10.0.0.9 -> 10.0.0.4 (echo id 2), DNAT to 10.0.0.8: its keys are
        // 9->4 and 8->9.
        let dnat = Nat::Dst(NatRange { addr_min: h8 as u128, addr_max: h8 as u128, ..range0() });
        let r = t.execute(&mut icmp_echo(h9, h4, 2, false), &CtAction { nat: Some(dnat), ..commit(1) }, 0, None);
        assert_eq!(r.state, cs::TRK | cs::NEW | cs::DNAT);
        // 10.0.0.0 -> 10.0.0.4 (id 2), SNAT to 10.0.0.9 keeping id 2: the
        // packet now reads 9->4, the first connection's original key.
        let mut f = icmp_echo(h0, h4, 2, false);
        let snat =
            Nat::Src(NatRange { addr_min: h9 as u128, addr_max: h9 as u128, port_min: 1, port_max: 3, ..range0() });
        let first = t.execute(&mut f, &CtAction { nat: Some(snat), ..commit(1) }, 1, None);
        assert_eq!(first.state, cs::TRK | cs::NEW | cs::SNAT);
        assert_eq!((ip_src(&f), ip_dst(&f)), (h9, h4));
        let hint = if with_hint { first.tracked.as_ref() } else { None };
        let second = t.execute_tracked(&mut f, &ct(1), 2, hint, first.state);
        assert_eq!({ second.orig.unwrap().src }, h0 as u128, "hint {with_hint}: ct_nw_src is the SNAT client's");
        assert_eq!(second.state, cs::TRK | cs::NEW);
        // Found through the hint: the caller keeps its hint, no new handle
        // on the connection is made; found by lookup: it gets one.
        assert_eq!(second.hint_matched, with_hint);
        assert_eq!(second.tracked.is_some(), !with_hint);
        if let Some(tr) = &second.tracked {
            assert!(std::sync::Arc::ptr_eq(&tr.conn, &first.tracked.as_ref().unwrap().conn));
        }
    }
}

fn range0() -> NatRange {
    NatRange { addr_min: 0, addr_max: 0, port_min: 0, port_max: 0, v6: false, flags: NatFlags::default() }
}

/// What the kernel fast path reads from the tracker (`offload_view`):
/// nothing for a connection that is not established (TCP opening, a UDP
/// reply before the connection exists), `+new` for the originator of an
/// unanswered UDP connection and `+est` once answered, the NAT target in
/// each direction, the mark; a ct(commit) that would change the mark is
/// refused. The version moves (and the hook runs, once the connection is
/// marked offloaded) on the first reply, a mark change, a FIN and the
/// removal; an offloaded connection's windows are no longer checked (the
/// tracker did not see what the kernel forwarded), its flags still are;
/// credits count and refresh the expiry.
#[test]
fn offload_view_reads_verdicts_and_reports_changes() {
    use packet::tcp_flags::*;
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    use std::sync::Arc;
    let t = Conntrack::new(Config::default());
    let heard = Arc::new(AtomicU64::new(0));
    let h2 = Arc::clone(&heard);
    t.add_offload_hook(
        7,
        Arc::new(move |_| {
            h2.fetch_add(1, Relaxed);
        }),
    );
    let tup = |f: &[u8]| packet::parse(f, false).unwrap().tuple;
    // UDP: unanswered, then answered.
    let out = udp(A, B, 1000, 53);
    assert_eq!(t.offload_view(&tup(&out), &ct(1), 0, 0).unwrap_err(), "no connection");
    t.execute(&mut out.clone(), &commit(1), 0, None);
    let v = t.offload_view(&tup(&out), &commit(1), 0, 1).unwrap();
    assert_eq!((v.result.state, v.reply, v.tcp, v.to), (cs::TRK | cs::NEW, false, false, None));
    assert!(t.offload_view(&tup(&udp(B, A, 53, 1000)), &ct(1), 0, 1).is_err(), "a reply before any was seen");
    t.mark_offloaded(&v.conn);
    assert_eq!(t.execute(&mut udp(B, A, 53, 1000), &ct(1), 2, None).state, cs::TRK | cs::EST | cs::RPL);
    assert!(!t.offload_current(&v.conn, v.version, 2), "the first reply changed it");
    assert_eq!(heard.load(Relaxed), 1);
    let v = t.offload_view(&tup(&out), &ct(1), 0, 3).unwrap();
    assert_eq!(v.result.state, cs::TRK | cs::EST);
    let r = t.offload_view(&tup(&udp(B, A, 53, 1000)), &ct(1), 0, 3).unwrap();
    assert_eq!((r.result.state, r.reply), (cs::TRK | cs::EST | cs::RPL, true));
    // A commit that sets the mark it has changes nothing; another would.
    let mark = |m| CtAction { mark: Some((m, 0xffff_ffff)), ..commit(1) };
    assert!(t.offload_view(&tup(&out), &mark(5), 0, 3).is_err());
    t.execute(&mut out.clone(), &mark(5), 4, None);
    assert!(!t.offload_current(&v.conn, v.version, 4), "the mark changed");
    let v = t.offload_view(&tup(&out), &mark(5), 0, 5).unwrap();
    assert_eq!(v.result.mark, 5);
    // Credits: counted, expiry refreshed.
    t.credit_offloaded(&v.conn, false, 10, 330, 20_000);
    let c = &t.connections(Some(1))[0];
    assert_eq!(c.packets[0], 10 + 2);
    assert!(c.expires_ms >= 20_000 + 30_000, "{}", c.expires_ms);
    // Flushed: changed, heard.
    let before = heard.load(Relaxed);
    t.mark_offloaded(&v.conn);
    assert_eq!(t.flush(|_| true), 1);
    assert!(!t.offload_current(&v.conn, v.version, 5));
    assert_eq!(heard.load(Relaxed), before + 1);

    // TCP with SNAT: the translation each way; opening is not offered.
    let nat = CtAction { nat: Some(snat(X, X, 5000, 5000)), ..commit(2) };
    t.execute(&mut tcp(A, B, 40000, 80, SYN, 1000, 0, 0), &nat, 10, None);
    let syn_ack = tcp(B, X, 80, 5000, SYN | ACK, 9000, 1001, 0);
    let nat_ct = CtAction { nat: Some(Nat::Existing), ..ct(2) };
    assert_eq!(t.offload_view(&tup(&syn_ack), &nat_ct, 0, 10).unwrap_err(), "connection not established");
    t.execute(&mut syn_ack.clone(), &nat_ct, 11, None);
    let opening = tcp(A, B, 40000, 80, ACK, 1001, 9001, 0);
    assert_eq!(t.offload_view(&tup(&opening), &nat_ct, 0, 11).unwrap_err(), "TCP connection opening or closing");
    t.execute(&mut tcp(A, B, 40000, 80, ACK, 1001, 9001, 0), &nat_ct, 12, None);
    let data = tcp(A, B, 40000, 80, ACK, 1001, 9001, 100);
    let v = t.offload_view(&tup(&data), &nat_ct, 0, 13).unwrap();
    assert_eq!(v.result.state, cs::TRK | cs::EST | cs::SNAT);
    let to = v.to.unwrap();
    assert_eq!((to.src as u32, to.sport, to.dst as u32, to.dport), (X, 5000, B, 80));
    assert!(v.tcp);
    let back = t.offload_view(&tup(&tcp(B, X, 80, 5000, ACK, 9001, 1101, 10)), &nat_ct, 0, 13).unwrap();
    let to = back.to.unwrap();
    assert_eq!((to.src as u32, to.dst as u32, to.dport), (B, A, 40000));
    // Offloaded: a segment far ahead of what the tracker saw is fine (the
    // kernel forwarded the ones between), bad flags still are not.
    t.mark_offloaded(&v.conn);
    let far = tcp(A, B, 40000, 80, ACK, 1001 + 5_000_000, 9001, 10);
    assert_eq!(t.execute(&mut far.clone(), &nat_ct, 14, None).state, cs::TRK | cs::EST | cs::SNAT);
    assert!(t.offload_current(&v.conn, v.version, 14), "data changes no state");
    let bad = tcp(A, B, 40000, 80, SYN | FIN, 1001 + 5_000_010, 9001, 0);
    assert_eq!(t.execute(&mut bad.clone(), &nat_ct, 15, None).state, cs::TRK | cs::INV);
    let before = heard.load(Relaxed);
    t.execute(&mut tcp(A, B, 40000, 80, FIN | ACK, 1001 + 5_000_010, 9001, 0), &nat_ct, 16, None);
    assert!(!t.offload_current(&v.conn, v.version, 16), "the FIN changed it");
    assert_eq!(heard.load(Relaxed), before + 1);
    assert!(t.offload_view(&tup(&data), &nat_ct, 0, 17).is_err(), "closing");
}
