//! The XDP fast path under BPF_PROG_TEST_RUN: the program loads (passes
//! the verifier), a frame matching an entry of the current generation is
//! rewritten and redirected, and everything else goes to the AF_XDP path
//! (redirect to the XSKMAP, which with no socket falls back to XDP_PASS).
//!
//! Plan: load the program without attaching it, write entries into its
//! maps, run crafted frames "received" on `lo` and compare the verdict and
//! the bytes with what the actions mean; then bump the generation and check
//! the entry no longer applies. Needs root (BPF).

use bpf::fastpath::act;
use bpf::{FastAction, FastKey, TestProgram};
use wire::build::Frame;

const XDP_DROP: u32 = 1;
const XDP_PASS: u32 = 2;
const XDP_REDIRECT: u32 = 4;
const LO: u32 = 1;
const OUT: u32 = 1; // any real device works as a devmap target for test runs

const MA: [u8; 6] = [2, 0, 0, 0, 0, 1];
const MB: [u8; 6] = [2, 0, 0, 0, 0, 2];

fn udp() -> Vec<u8> {
    Frame::new(MA, MB).ipv4(0x0a00_0001, 0x0a00_0002).udp(1000, 53).payload(b"fast").build()
}

/// The key the program builds for `udp()` received on `lo`.
fn key_of_udp() -> FastKey {
    let mut k = FastKey {
        ifindex: LO,
        dl_type: 0x0800,
        dl_dst: MB,
        dl_src: MA,
        nw_proto: 17,
        nw_ttl: 64,
        tp_src: 1000,
        tp_dst: 53,
        ..FastKey::default()
    };
    k.nw_src[..4].copy_from_slice(&[10, 0, 0, 1]);
    k.nw_dst[..4].copy_from_slice(&[10, 0, 0, 2]);
    k
}

fn program() -> TestProgram {
    let mut p = TestProgram::load().expect("the fast-path program loads and passes the verifier");
    p.fast.add_output(OUT).unwrap();
    p.fast.set_generation(1).unwrap();
    p
}

#[test]
fn hit_redirects_miss_and_stale_go_to_userspace() {
    let mut p = program();
    let f = udp();
    let (v, out) = p.run(&f, LO).unwrap();
    assert_eq!((v, &out), (XDP_PASS, &f), "no entry: the socket path (no socket: the stack)");
    let a = FastAction { out_ifindex: OUT, slot: 3, gen: 1, ..FastAction::default() };
    p.fast.insert(&key_of_udp(), &a).unwrap();
    let (v, out) = p.run(&f, LO).unwrap();
    assert_eq!((v, &out), (XDP_REDIRECT, &f), "hit: redirected unchanged");
    assert_eq!(p.fast.counts(3).unwrap(), (1, f.len() as u64));
    // Any parsed field that differs misses: the key is exact.
    let other = Frame::new(MA, MB).ipv4(0x0a00_0001, 0x0a00_0002).udp(1001, 53).payload(b"fast").build();
    assert_eq!(p.run(&other, LO).unwrap().0, XDP_PASS);
    let ttl = Frame::new(MA, MB).ipv4(0x0a00_0001, 0x0a00_0002).ip_ttl(63).udp(1000, 53).payload(b"fast").build();
    assert_eq!(p.run(&ttl, LO).unwrap().0, XDP_PASS);
    // A new generation makes the entry stale at once.
    p.fast.set_generation(2).unwrap();
    assert_eq!(p.run(&f, LO).unwrap().0, XDP_PASS);
    let s = p.fast.stats().unwrap();
    assert_eq!((s.hit, s.miss, s.stale), (1, 3, 1), "{s:?}");
    // Rewritten with the new generation, it applies again.
    p.fast.insert(&key_of_udp(), &FastAction { gen: 2, ..a }).unwrap();
    assert_eq!(p.run(&f, LO).unwrap().0, XDP_REDIRECT);
    assert_eq!(p.fast.clear().unwrap(), 1);
    assert_eq!(p.run(&f, LO).unwrap().0, XDP_PASS);
}

#[test]
fn rewrites_match_what_the_actions_mean() {
    let mut p = program();
    let f = udp();
    // Push VLAN 10, new MACs, TTL 63.
    let a = FastAction {
        out_ifindex: OUT,
        slot: 1,
        gen: 1,
        flags: act::PUSH_VLAN | act::SET_DL_SRC | act::SET_DL_DST | act::SET_TTL,
        vlan_tci: 10,
        dl_src: [2, 9, 9, 9, 9, 1],
        dl_dst: [2, 9, 9, 9, 9, 2],
        ttl: 63,
        ..FastAction::default()
    };
    p.fast.insert(&key_of_udp(), &a).unwrap();
    let (v, out) = p.run(&f, LO).unwrap();
    assert_eq!(v, XDP_REDIRECT);
    let want = Frame::new([2, 9, 9, 9, 9, 1], [2, 9, 9, 9, 9, 2])
        .vlan(0x8100, 10)
        .ipv4(0x0a00_0001, 0x0a00_0002)
        .ip_ttl(63)
        .udp(1000, 53)
        .payload(b"fast")
        .build();
    assert_eq!(out, want, "same bytes as a frame built that way (IPv4 checksum updated)");
    // Pop VLAN from a tagged frame.
    let tagged =
        Frame::new(MA, MB).vlan(0x8100, 0x2005).ipv4(0x0a00_0001, 0x0a00_0002).udp(1000, 53).payload(b"fast").build();
    let mut k = key_of_udp();
    k.vlan_tci = 0x2005 | 0x1000;
    p.fast
        .insert(&k, &FastAction { out_ifindex: OUT, slot: 2, gen: 1, flags: act::POP_VLAN, ..FastAction::default() })
        .unwrap();
    let (v, out) = p.run(&tagged, LO).unwrap();
    assert_eq!((v, out), (XDP_REDIRECT, udp()));
}

#[test]
fn frames_the_fast_path_does_not_parse_go_to_userspace() {
    let mut p = program();
    let arp = Frame::new(MA, [0xff; 6]).arp(1, MA, 0x0a00_0001, [0; 6], 0x0a00_0002).build();
    let frag = Frame::new(MA, MB).ipv4(0x0a00_0001, 0x0a00_0002).ip_frag(true, 0).udp(1, 2).build();
    let ns = Frame::new(MA, MB).ipv6(1, 2).nd_ns(2, Some(MA)).build();
    let qinq = Frame::new(MA, MB).vlan(0x88a8, 1).vlan(0x8100, 2).ipv4(1, 2).udp(1, 2).build();
    for f in [&arp, &frag, &ns, &qinq] {
        assert_eq!(p.run(f, LO).unwrap().0, XDP_PASS);
    }
    assert_eq!(p.fast.stats().unwrap().unparsed, 4);
    // Truncated frames never crash the program or reach the fast path.
    let f = udp();
    for n in 0..f.len() {
        let (v, _) = p.run(&f[..n], LO).unwrap_or((XDP_PASS, vec![]));
        assert_ne!(v, XDP_REDIRECT);
        assert_ne!(v, XDP_DROP);
    }
}
