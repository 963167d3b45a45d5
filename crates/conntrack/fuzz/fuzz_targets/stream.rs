//! A stream of packets through one small tracker: the input is split into
//! records `[flags, zone, time step, len, bytes...]`; each record's bytes
//! are sent behind an IPv4 or IPv6 Ethernet header (or raw), with or
//! without commit and NAT. The tracker must never panic and never hold
//! more connections than its limits.
#![no_main]
use conntrack::{Config, Conntrack, CtAction, Nat, NatFlags, NatRange};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let t = Conntrack::new(Config { max_conns: 64, ..Config::default() });
    t.set_zone_limit(Some(1), 8);
    let mut now = 0u64;
    let mut rest = data;
    while rest.len() >= 4 {
        let (flags, zone, step, len) = (rest[0], rest[1] & 3, rest[2] as u64, rest[3] as usize);
        rest = &rest[4..];
        let body = &rest[..len.min(rest.len())];
        rest = &rest[body.len()..];
        now += step * 100;
        let mut f = match flags & 3 {
            0 => body.to_vec(),
            1 => [&[0u8; 12][..], &[0x08, 0x00], body].concat(),
            _ => [&[0u8; 12][..], &[0x86, 0xdd], body].concat(),
        };
        let range = NatRange { addr_min: 0x0a00_0064, addr_max: 0x0a00_0065, port_min: 1000, port_max: 1003, v6: false, flags: NatFlags::default() };
        let nat = match (flags >> 2) & 3 {
            0 => None,
            1 => Some(Nat::Existing),
            2 => Some(Nat::Src(range)),
            _ => Some(Nat::Dst(range)),
        };
        let act = CtAction { zone: zone as u16, commit: flags & 0x10 != 0, force: flags & 0x20 != 0, nat, ..CtAction::default() };
        let _ = t.execute(&mut f, &act, now, None);
        assert!(t.n_conns() <= 64);
        if flags & 0x40 != 0 {
            t.sweep(now, conntrack::SWEEP_SHARDS);
        }
    }
});
