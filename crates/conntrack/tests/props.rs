//! Properties of NAT and of the tracker on arbitrary input.
//!
//! * Translating a packet and translating it back gives the original bytes,
//!   and every intermediate packet has valid checksums (TCP, UDP, ICMP;
//!   IPv4 and IPv6).
//! * Through the tracker: a SNAT or DNAT connection's reply, built as the
//!   receiver would build it, comes back addressed exactly to the original
//!   sender with valid checksums.
//! * Arbitrary bytes and arbitrary packet streams never panic, and the table
//!   never holds more connections than its limit.
//! * The connection hint the datapath passes from one `ct()` to the next
//!   never changes a verdict.

use conntrack::packet;
use conntrack::{cs, nat, Config, Conntrack, CtAction, Nat, NatFlags, NatRange};
use proptest::prelude::*;
use wire::build::Frame;
use wire::checksum::{checksum, l4_checksum_v4, l4_checksum_v6};

const MA: [u8; 6] = [2, 0, 0, 0, 0, 1];
const MB: [u8; 6] = [2, 0, 0, 0, 0, 2];

#[derive(Clone, Copy, Debug)]
enum Kind {
    Udp,
    Tcp,
    Icmp,
}

fn frame(v6: bool, kind: Kind, src: u128, dst: u128, sp: u16, dp: u16, payload: &[u8]) -> Vec<u8> {
    let f = Frame::new(MA, MB);
    let f = if v6 { f.ipv6(src, dst) } else { f.ipv4(src as u32, dst as u32) };
    let f = match (kind, v6) {
        (Kind::Udp, _) => f.udp(sp, dp),
        (Kind::Tcp, _) => f.tcp(sp, dp, packet::tcp_flags::SYN),
        (Kind::Icmp, false) => f.icmp_echo(sp, 1),
        (Kind::Icmp, true) => f.icmpv6_echo(sp, 1),
    };
    f.payload(payload).build()
}

/// Every checksum of the frame is right.
fn valid(f: &[u8]) -> bool {
    let p = match packet::parse(f, true) {
        Ok(p) => p,
        Err(_) => return false,
    };
    let l4 = &f[p.l4..p.end];
    let t = p.tuple;
    let l4_ok = match (t.proto, t.v6) {
        (1, false) => checksum(l4) == 0,
        (_, false) => l4_checksum_v4(t.src as u32, t.dst as u32, t.proto, l4) == 0,
        (_, true) => l4_checksum_v6(t.src, t.dst, t.proto, l4) == 0,
    };
    l4_ok && (t.v6 || checksum(&f[p.l3..p.l4]) == 0)
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![Just(Kind::Udp), Just(Kind::Tcp), Just(Kind::Icmp)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn translate_and_back_is_the_identity(
        v6 in any::<bool>(), k in kind(),
        s in any::<u128>(), d in any::<u128>(), s2 in any::<u128>(), d2 in any::<u128>(),
        sp in 1u16.., dp in 1u16.., sp2 in 1u16.., dp2 in 1u16..,
        payload in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let fix = |a: u128| if v6 { a | 1 } else { (a as u32 | 1) as u128 };
        let f = frame(v6, k, fix(s), fix(d), sp, dp, &payload);
        let p = packet::parse(&f, true).unwrap();
        let mut to = p.tuple;
        to.src = fix(s2);
        to.dst = fix(d2);
        if to.has_ports() { to.sport = sp2; to.dport = dp2; } else { to.sport = sp2; }
        let mut g = f.clone();
        nat::rewrite(&mut g, p.l3, p.l4, p.end, &p.tuple, &to, false);
        prop_assert!(valid(&g), "translated frame has valid checksums");
        let q = packet::parse(&g, true).unwrap();
        prop_assert_eq!(q.tuple, to);
        nat::rewrite(&mut g, q.l3, q.l4, q.end, &to, &p.tuple, false);
        prop_assert_eq!(g, f, "back to the original bytes");
    }

    #[test]
    fn nat_reply_reaches_the_original_sender(
        v6 in any::<bool>(), k in kind(), snat in any::<bool>(),
        a in any::<u128>(), b in any::<u128>(), x in any::<u128>(),
        sp in 1u16.., dp in 1u16.., plo in 1u16..60000, width in 0u16..100,
        ports in any::<bool>(),
    ) {
        let fix = |a: u128| if v6 { a | 1 } else { (a as u32 | 1) as u128 };
        let (a, b, x) = (fix(a), fix(b), fix(x));
        let t = Conntrack::new(Config::default());
        let range = NatRange {
            addr_min: x, addr_max: x,
            port_min: if ports { plo } else { 0 }, port_max: if ports { plo + width } else { 0 },
            v6, flags: NatFlags::default(),
        };
        let nat = if snat { Nat::Src(range) } else { Nat::Dst(range) };
        let mut f = frame(v6, k, a, b, sp, dp, b"payload");
        let orig = packet::parse(&f, true).unwrap().tuple;
        let r = t.execute(&mut f, &CtAction { commit: true, nat: Some(nat), ..CtAction::default() }, 0, None);
        prop_assert!(r.state & cs::NEW != 0 && r.state & cs::INV == 0, "state {:#x}", r.state);
        prop_assert!(valid(&f));
        let sent = packet::parse(&f, true).unwrap().tuple;
        if snat { prop_assert_eq!(sent.src, x) } else { prop_assert_eq!(sent.dst, x) }
        // The receiver answers the packet it got.
        let mut reply = match k {
            Kind::Udp => frame(v6, k, sent.dst, sent.src, sent.dport, sent.sport, b"answer"),
            Kind::Tcp => {
                let mut g = frame(v6, k, sent.dst, sent.src, sent.dport, sent.sport, b"");
                let l4 = packet::parse(&g, false).unwrap().l4;
                g[l4 + 13] = 0x12; // SYN|ACK
                g[l4 + 8..l4 + 12].copy_from_slice(&2u32.to_be_bytes()); // acks seq 1 + SYN
                g[l4 + 16..l4 + 18].copy_from_slice(&[0, 0]);
                let c = if v6 { l4_checksum_v6(sent.dst, sent.src, 6, &g[l4..]) }
                        else { l4_checksum_v4(sent.dst as u32, sent.src as u32, 6, &g[l4..]) };
                g[l4 + 16..l4 + 18].copy_from_slice(&c.to_be_bytes());
                g
            }
            Kind::Icmp => {
                let mut g = frame(v6, k, sent.dst, sent.src, sent.sport, 0, b"");
                let p = packet::parse(&g, false).unwrap();
                g[p.l4] = if v6 { 129 } else { 0 };
                g[p.l4 + 2..p.l4 + 4].copy_from_slice(&[0, 0]);
                let c = if v6 { l4_checksum_v6(sent.dst, sent.src, 58, &g[p.l4..]) } else { checksum(&g[p.l4..]) };
                g[p.l4 + 2..p.l4 + 4].copy_from_slice(&c.to_be_bytes());
                g
            }
        };
        let r = t.execute(&mut reply, &CtAction { nat: Some(Nat::Existing), ..CtAction::default() }, 1, None);
        prop_assert_eq!(r.state & (cs::EST | cs::RPL | cs::INV), cs::EST | cs::RPL, "state {:#x}", r.state);
        prop_assert!(valid(&reply));
        let got = packet::parse(&reply, true).unwrap().tuple;
        prop_assert_eq!(got, orig.reverse(), "the reply is the original reversed");
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200), commit in any::<bool>()) {
        let t = Conntrack::new(Config { max_conns: 4, ..Config::default() });
        let mut b = bytes.clone();
        let act = CtAction { commit, nat: Some(Nat::Existing), ..CtAction::default() };
        let _ = t.execute(&mut b, &act, 0, None);
        // Also as IPv4 and IPv6 behind a valid Ethernet header.
        for et in [[0x08u8, 0x00], [0x86, 0xdd]] {
            let mut f = vec![0u8; 12];
            f.extend_from_slice(&et);
            f.extend_from_slice(&bytes);
            let _ = t.execute(&mut f, &act, 0, None);
        }
        prop_assert!(t.n_conns() <= 4);
    }

    #[test]
    fn random_streams_stay_within_limits(
        pkts in proptest::collection::vec((0u8..3, 0u32..8, 0u32..8, 0u16..6, 0u16..6, 0u16..4, any::<bool>()), 1..300),
    ) {
        let t = Conntrack::new(Config { max_conns: 20, ..Config::default() });
        t.set_zone_limit(Some(1), 5);
        for (i, (k, s, d, sp, dp, zone, commit)) in pkts.into_iter().enumerate() {
            let k = [Kind::Udp, Kind::Tcp, Kind::Icmp][k as usize];
            let mut f = frame(false, k, 0x0a00_0000 + s as u128, 0x0a00_0000 + d as u128, sp + 1, dp + 1, b"x");
            let act = CtAction { zone, commit, ..CtAction::default() };
            let r = t.execute(&mut f, &act, i as u64 * 100, None);
            prop_assert!(r.state & cs::TRK != 0);
            prop_assert!(t.n_conns() <= 20);
            let (_, zones) = t.zone_limits();
            prop_assert!(zones.iter().all(|z| z.zone != 1 || z.count <= 5));
            prop_assert_eq!(t.connections(None).len(), t.n_conns());
        }
    }
}

proptest! {
    /// Any sequence of segments, any window scales: the TCP tracker never
    /// panics (an overflow here would take a poll thread down).
    #[test]
    fn tcp_tracker_never_panics(
        segs in proptest::collection::vec((any::<bool>(), any::<u32>(), any::<u32>(),
            prop_oneof![Just(0x02u16), Just(0x12), Just(0x10), Just(0x11), Just(0x04), Just(0x14), any::<u16>()],
            any::<u16>(), 0u32..100_000, proptest::option::of(0u8..20)), 1..50),
    ) {
        use conntrack::packet::TcpSeg;
        use conntrack::tcp::{valid_new, TcpState};
        let first = TcpSeg { seq: segs[0].1, ack: segs[0].2, flags: 0x02, win: segs[0].3, len: 0, wscale: segs[0].6 };
        let mut t = TcpState::new(&first);
        for (dir, seq, ack, flags, win, len, wscale) in segs {
            let s = TcpSeg { seq, ack, flags: flags & 0xfff, win, len, wscale };
            let _ = valid_new(s.flags);
            let _ = t.update(dir as usize, &s);
            let _ = t.phase();
        }
    }
}

proptest! {
    /// The connection the previous `ct()` matched, which the datapath hands
    /// to the next one (`Tracked`), never changes a verdict. Two trackers
    /// see the same stream; one gets the hint, as the datapath gives it,
    /// the other looks every packet up. Each packet runs a first `ct()` and,
    /// as after a recirculation, a second one on what the first made of it.
    /// States, marks, original tuples and rewritten bytes must agree, with
    /// NAT to addresses and ports that the stream itself also uses, expiry
    /// (the clock jumps) and flushes.
    #[test]
    fn a_hint_never_changes_a_verdict(
        pkts in proptest::collection::vec(
            (kind(), 0u32..10, 0u32..10, 1u16..4, 1u16..4, 0u16..2, 0u8..7, 0u8..7, 0u64..40_000), 1..150),
    ) {
        let (plain, hinted) = (Conntrack::new(Config::default()), Conntrack::new(Config::default()));
        let range = |a: u32, p: (u16, u16)| NatRange {
            addr_min: 0x0a00_0000 + a as u128, addr_max: 0x0a00_0000 + a as u128,
            port_min: p.0, port_max: p.1, v6: false, flags: NatFlags::default(),
        };
        let action = |a: u8, zone: u16| {
            let c = CtAction { zone, ..CtAction::default() };
            match a {
                0 => c,
                1 => CtAction { commit: true, ..c },
                2 => CtAction { commit: true, nat: Some(Nat::Src(range(9, (1, 3)))), ..c },
                3 => CtAction { commit: true, nat: Some(Nat::Dst(range(8, (0, 0)))), ..c },
                4 => CtAction { nat: Some(Nat::Existing), ..c },
                5 => CtAction { commit: true, mark: Some((a as u32, 0xff)), nat: Some(Nat::Existing), ..c },
                _ => CtAction { commit: true, force: true, ..c },
            }
        };
        let (mut now, mut hint) = (0u64, None);
        for (k, s, d, sp, dp, zone, a1, a2, dt) in pkts {
            now += dt;
            if dt > 39_000 {
                prop_assert_eq!(plain.flush(|_| true), hinted.flush(|_| true));
                continue;
            }
            let f = frame(false, k, 0x0a00_0000 + s as u128, 0x0a00_0000 + d as u128, sp, dp, b"x");
            let (mut fa, mut fb) = (f.clone(), f);
            let mut prev = 0;
            for act in [action(a1, zone), action(a2, zone)] {
                let ra = plain.execute_tracked(&mut fa, &act, now, None, prev);
                let rb = hinted.execute_tracked(&mut fb, &act, now, hint.as_ref(), prev);
                prop_assert_eq!((ra.state, ra.zone, ra.mark, ra.label, ra.orig), (rb.state, rb.zone, rb.mark, rb.label, rb.orig));
                prop_assert_eq!(&fa, &fb);
                if rb.tracked.is_some() {
                    hint = rb.tracked;
                }
                prev = ra.state;
            }
            prop_assert_eq!(plain.n_conns(), hinted.n_conns());
        }
    }
}
