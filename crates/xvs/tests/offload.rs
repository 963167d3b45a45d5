//! The kernel fast path against userspace, differentially.
//!
//! Plan: a bridge (ofproto) with four ports whose kernel devices are veth
//! ends this test creates; random OpenFlow rules from a pool (outputs, MAC
//! rewrites, dec_ttl, VLAN push/pop, and actions that must stay in
//! userspace); random frames (UDP/TCP/ICMP over IPv4 and IPv6, tagged,
//! ARP). Every frame is run through the XDP program with
//! BPF_PROG_TEST_RUN and through userspace translation + execution.
//! Whenever the program redirects a frame, the entry that served it (found
//! by its counter) must output to the device of the one port userspace
//! outputs to, with the same bytes. Each frame's own entry is then
//! offloaded if `offload::entry` allows it. Rules change every few frames;
//! the generation is bumped as the switch does before acknowledging a
//! change, and no entry of an older generation may serve a frame after
//! it. (NORMAL is left out of the rule pool: its MAC learning changes
//! translations as a side effect of translating, which is the switch's
//! revalidation loop's business, not this comparison's.) Needs root (BPF,
//! veth).

use bpf::{FastAction, FastKey, TestProgram};
use dpif::execute::{execute, OutQueues, Sink};
use dpif::DpAction;
use netdev::Packet;
use ofproto::{parse_flow, FlowModCmd, Need, Ofproto, PortConfig};
use proptest::prelude::*;
use std::process::Command;
use wire::build::Frame;
use xvs::offload;

const XDP_REDIRECT: u32 = 4;

struct Veths(Vec<String>);
impl Drop for Veths {
    fn drop(&mut self) {
        for v in &self.0 {
            let _ = Command::new("ip").args(["link", "del", v]).status();
        }
    }
}

fn ifindex(name: &str) -> u32 {
    std::fs::read_to_string(format!("/sys/class/net/{name}/ifindex")).unwrap().trim().parse().unwrap()
}

#[derive(Default)]
struct Rec(Vec<(u32, Vec<u8>)>);
impl Sink for Rec {
    fn output(&mut self, port: u32, pkts: &mut Vec<Packet>) {
        for p in pkts.drain(..) {
            self.0.push((port, p.data().to_vec()));
        }
    }
    fn userspace(&mut self, _: Packet, _full_len: usize, _: &DpAction) {}
}

const RULES: &[&str] = &[
    "priority=10,in_port=1,udp,nw_dst=10.0.0.0/24,actions=output:2",
    "priority=20,in_port=1,udp,nw_dst=10.0.0.2,actions=mod_dl_src:02:aa:00:00:00:01,mod_dl_dst:02:bb:00:00:00:02,output:3",
    "priority=15,in_port=1,ip,actions=dec_ttl,output:2",
    "priority=12,in_port=2,ip,actions=mod_vlan_vid:10,output:4",
    "priority=30,in_port=1,dl_vlan=5,actions=strip_vlan,output:2",
    "priority=25,in_port=2,tcp,tp_dst=80,actions=output:1",
    "priority=26,in_port=2,tcp,tcp_flags=+syn,actions=output:3",
    "priority=18,in_port=1,ipv6,actions=output:4",
    "priority=40,in_port=1,udp,tp_src=7,actions=mod_nw_dst:10.9.9.9,output:2",
    "priority=35,in_port=2,icmp,actions=output:1,output:3",
    "priority=5,in_port=2,actions=drop",
    // OVN-style: registers and metadata matched as 0, ct_clear first.
    "priority=22,in_port=2,udp,reg0=0,reg14=0,metadata=0,actions=ct_clear,mod_dl_dst:02:cc:00:00:00:03,output:4",
    "priority=1,in_port=1,actions=output:4",
];

fn frame(kind: u8, a: u8, b: u8, port: u16) -> Vec<u8> {
    let (s, d) = ([2, 0, 0, 0, 0, a], [2, 0, 0, 0, 0, b]);
    let f = Frame::new(s, d);
    match kind % 7 {
        0 => f.ipv4(0x0a00_0000 | a as u32, 0x0a00_0000 | b as u32).udp(port, 53).payload(b"x").build(),
        1 => f.ipv4(0x0a00_0000 | a as u32, 0x0a00_0100 | b as u32).tcp(port, 80, 0x10).build(),
        2 => f.ipv4(0x0a00_0000 | a as u32, 0x0a00_0000 | b as u32).icmp_echo(port, 1).build(),
        3 => f.ipv6(0xfd00 << 112 | a as u128, 0xfd00 << 112 | b as u128).udp(port, 53).build(),
        4 => f.vlan(0x8100, 5).ipv4(0x0a00_0000 | a as u32, 0x0a00_0000 | b as u32).udp(port, 9).build(),
        5 => f.arp(1, s, 0x0a00_0000 | a as u32, [0; 6], 0x0a00_0000 | b as u32).build(),
        _ => f.ipv4(0x0a00_0000 | a as u32, 0x0a00_0002).ip_ttl(9).tcp(port, 22, 0x02).build(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, ..ProptestConfig::default() })]

    #[test]
    fn xdp_fast_path_agrees_with_userspace(
        steps in proptest::collection::vec((0u8..7, 1u8..3, 1u8..3, prop_oneof![Just(7u16), Just(1000u16)], 1u32..3, 0u8..12, any::<bool>()), 60..120),
    ) {
        let id = std::process::id() % 10_000;
        let names: Vec<String> = (0..4).map(|i| format!("xof{id}{i}")).collect();
        let _g = Veths(vec![names[0].clone(), names[2].clone()]);
        for i in [0, 2] {
            let _ = Command::new("ip").args(["link", "del", &names[i]]).stderr(std::process::Stdio::null()).status();
            assert!(Command::new("ip").args(["link", "add", &names[i], "type", "veth", "peer", "name", &names[i + 1]]).status().unwrap().success());
        }
        let ifx: Vec<u32> = names.iter().map(|n| ifindex(n)).collect();
        let dev = |p: u32| -> Option<u32> { (1..=4).contains(&p).then(|| ifx[p as usize - 1]) };
        let mut prog = TestProgram::load().unwrap();
        for &i in &ifx {
            prog.fast.add_output(i).unwrap();
        }
        let mut of = Ofproto::new("xof");
        for p in 1..=4 {
            of.add_port(PortConfig::new(p, &format!("p{p}")));
        }
        let mut installed: Vec<(FastKey, FastAction)> = Vec::new();
        // The frame and in_port each entry was made from (for revalidation).
        let mut origin: Vec<(Vec<u8>, u32)> = Vec::new();
        let mut gen = of.generation();
        prog.fast.set_generation(gen).unwrap();
        let mut redirected = 0;
        let mut offloaded = 0;
        for (kind, a, b, port, in_port, rule, add) in steps {
            // Change a rule now and then; bump the generation as the
            // switch does before acknowledging the change.
            if rule < 2 || installed.is_empty() {
                let spec = parse_flow(RULES[(rule as usize + kind as usize) % RULES.len()], Need::Actions).unwrap();
                let cmd = if add { FlowModCmd::Add } else { FlowModCmd::DeleteStrict };
                let _ = of.flow_mod(cmd, &spec);
            }
            // Any change of the bridge's generation is pushed to the
            // program before anything else happens, as the switch does
            // before it acknowledges a change or serves the next packet.
            if of.generation() != gen {
                gen = of.generation();
                prog.fast.set_generation(gen).unwrap();
                // Every entry so far is stale now: none may serve its frame.
                for (i, (f, p)) in origin.iter().enumerate() {
                    let (v, _) = prog.run(f, dev(*p).unwrap()).unwrap();
                    prop_assert_ne!(v, XDP_REDIRECT, "entry {} served a frame after the generation bump", i);
                }
                // Revalidate as the switch does: re-translate each
                // entry's flow; rewrite it for the new generation if it
                // is still offloadable, remove it otherwise.
                for (i, (f, p)) in origin.iter().enumerate() {
                    let (mut k, _, _) = flow::extract(f, *p);
                    let t = of.translate_key(&k, 0);
                    k.set_in_port(*p);
                    match offload::entry(&k, &t.mask, &t.actions, &dev) {
                        Ok((fk, mut fa)) => {
                            prop_assert_eq!(fk, installed[i].0);
                            fa.gen = gen;
                            fa.slot = i as u32;
                            prog.fast.insert(&fk, &fa).unwrap();
                            installed[i].1 = fa;
                        }
                        Err(_) => {
                            prog.fast.remove(&installed[i].0).unwrap();
                            installed[i].1.gen = 0;
                        }
                    }
                }
            }
            let f = frame(kind, a, b, port);
            let (mut key, layout, err) = flow::extract(&f, in_port);
            prop_assume!(err.is_none());
            let t = of.translate_key(&key, f.len() as u64);
            let mut user = Rec::default();
            let mut q = OutQueues::default();
            let mut pkt = Packet::from_slice(&f);
            pkt.in_port = in_port;
            let mut k2 = key;
            execute(&t.actions, pkt, &mut k2, layout, &mut q, &mut user, 0);
            q.flush(&mut user);
            // The XDP program first.
            let before: Vec<(u64, u64)> = (0..installed.len() as u32).map(|s| prog.fast.counts(s).unwrap()).collect();
            let (v, out) = prog.run(&f, dev(in_port).unwrap()).unwrap();
            let hit: Vec<usize> = (0..installed.len()).filter(|&s| prog.fast.counts(s as u32).unwrap() != before[s]).collect();
            if v == XDP_REDIRECT {
                redirected += 1;
                prop_assert_eq!(hit.len(), 1, "exactly one entry served the frame");
                let e = &installed[hit[0]].1;
                prop_assert_eq!(e.gen, gen, "only current-generation entries serve frames");
                prop_assert_eq!(user.0.len(), 1, "userspace also outputs it once: {:?}", t.actions);
                prop_assert_eq!(dev(user.0[0].0), Some(e.out_ifindex), "same output port");
                prop_assert_eq!(&out, &user.0[0].1, "same bytes");
            } else {
                prop_assert!(hit.is_empty(), "a frame not redirected credited no entry");
            }
            // Offload this frame's flow if the fast path can serve it.
            key.set_in_port(in_port);
            if let Ok((fk, mut fa)) = offload::entry(&key, &t.mask, &t.actions, &dev) {
                prop_assert_eq!(user.0.len(), 1);
                fa.gen = gen;
                fa.slot = installed.iter().position(|(k, _)| *k == fk).unwrap_or(installed.len()) as u32;
                prog.fast.insert(&fk, &fa).unwrap();
                if fa.slot as usize == installed.len() {
                    installed.push((fk, fa));
                    origin.push((f.clone(), in_port));
                } else {
                    installed[fa.slot as usize] = (fk, fa);
                }
                offloaded += 1;
                let (v, out) = prog.run(&f, dev(in_port).unwrap()).unwrap();
                prop_assert_eq!(v, XDP_REDIRECT, "the entry just made serves its own frame");
                prop_assert_eq!(&out, &user.0[0].1);
            }
        }
        // Frames repeat (a small pool), so earlier entries serve later
        // frames, across generations; each run offloads something.
        eprintln!("offloaded {offloaded}, redirected from earlier entries {redirected}");
        prop_assert!(offloaded > 0, "the run exercised the fast path ({offloaded} offloaded, {redirected} redirected)");
    }
}

#[test]
fn reasons_for_staying_in_userspace_are_named() {
    let mut of = Ofproto::new("r");
    for p in 1..=2 {
        of.add_port(PortConfig::new(p, &format!("p{p}")));
    }
    let dev = |p: u32| Some(100 + p);
    let add = |of: &mut Ofproto, r: &str| of.flow_mod(FlowModCmd::Add, &parse_flow(r, Need::Actions).unwrap()).unwrap();
    add(&mut of, "priority=5,in_port=1,tcp,tcp_flags=+syn,actions=output:2");
    add(&mut of, "priority=4,in_port=1,udp,actions=mod_nw_dst:10.1.1.1,output:2");
    add(&mut of, "priority=3,in_port=1,icmp,actions=output:2,output:2");
    let key = |f: &[u8]| flow::extract(f, 1).0;
    let t = |k| of.translate_key(&k, 0);
    let syn = key(&Frame::new([2; 6], [4; 6]).ipv4(1, 2).tcp(1, 2, 0x02).build());
    let e = offload::entry(&syn, &t(syn).mask, &t(syn).actions, &dev).unwrap_err();
    assert_eq!(e.to_string(), "matches tcp_flags, which the XDP program does not parse");
    let udp = key(&Frame::new([2; 6], [4; 6]).ipv4(1, 2).udp(1, 2).build());
    let e = offload::entry(&udp, &t(udp).mask, &t(udp).actions, &dev).unwrap_err();
    assert_eq!(e.to_string(), "action set_field:nw_dst must run in userspace");
    let arp = key(&Frame::new([2; 6], [4; 6]).arp(1, [2; 6], 1, [0; 6], 2).build());
    assert_eq!(offload::packet_ok(&arp).unwrap_err().to_string(), "ARP frames are not parsed by the XDP program");
}

/// OVN's megaflows match registers and `metadata` (as 0, at ingress) and
/// its router pipeline starts with `ct_clear`: a packet that entered from
/// a device has all of them 0 and is untracked, so such a megaflow is
/// served. The same match after recirculation, or on a register that is
/// not 0, stays in userspace.
#[test]
fn pipeline_fields_that_are_zero_at_ingress_are_served() {
    let mut of = Ofproto::new("z");
    for p in 1..=2 {
        of.add_port(PortConfig::new(p, &format!("p{p}")));
    }
    let dev = |p: u32| Some(100 + p);
    let add = |of: &mut Ofproto, r: &str| of.flow_mod(FlowModCmd::Add, &parse_flow(r, Need::Actions).unwrap()).unwrap();
    add(&mut of, "priority=5,in_port=1,ip,reg0=0,reg14=0,metadata=0,actions=ct_clear,mod_dl_src:02:aa:00:00:00:01,dec_ttl,output:2");
    add(&mut of, "priority=6,in_port=1,udp,reg3=7,actions=output:2");
    let k = flow::extract(&Frame::new([2; 6], [4; 6]).ipv4(1, 2).tcp(1, 2, 0x10).build(), 1).0;
    let t = of.translate_key(&k, 0);
    for f in ["reg0", "reg14", "metadata"] {
        assert_ne!(flow::fields::by_name(f).unwrap().get(&t.mask), 0, "the megaflow matches {f}");
    }
    assert!(t.actions.contains(&DpAction::CtClear));
    let (_, a) = offload::entry(&k, &t.mask, &t.actions, &dev).expect("served at ingress");
    assert_eq!(a.flags, bpf::fastpath::act::SET_DL_SRC | bpf::fastpath::act::SET_TTL);
    assert_eq!((a.out_ifindex, a.ttl, a.dl_src), (102, 63, [2, 0xaa, 0, 0, 0, 1]));
    // After recirculation the registers may hold anything.
    let mut r = k;
    r.set_recirc_id(5);
    let t = of.translate_key(&r, 0);
    assert!(offload::entry(&r, &t.mask, &t.actions, &dev).is_err());
    // A register that is not 0 is not a packet from a device.
    let mut u = flow::extract(&Frame::new([2; 6], [4; 6]).ipv4(1, 2).udp(1, 2).build(), 1).0;
    flow::key::loc::REGS[3].set(&mut u, 7);
    let t = of.translate_key(&u, 0);
    assert_eq!(
        offload::entry(&u, &t.mask, &t.actions, &dev).unwrap_err().to_string(),
        "matches reg3, which the XDP program does not parse"
    );
}

/// Encapsulation in the kernel (an entry built as the offload manager
/// builds it: outer UDP source port, TOS and TTL from the flow key) gives
/// the bytes userspace encapsulation gives the same frame (those fields
/// from the frame itself), for Geneve with and without an option, VXLAN
/// and keyed GRE, inherited and fixed TOS/TTL, and inner IPv4 UDP, TCP,
/// ICMP, IPv6 and tagged frames. The outer IPv4 identification is the
/// kernel's own (the tunnels set DF), so the expected bytes are built with
/// the one it chose; the checksum must then agree. A frame longer than the
/// entry allows goes to userspace untouched.
#[test]
fn xdp_encapsulation_gives_the_bytes_userspace_gives() {
    use std::collections::BTreeMap;
    use tunnel::config::PortCfg;
    use tunnel::encap::{flags, udp_src_port, EncapSpec, Kind, Template, TunnelMeta};
    const LO: u32 = 1;
    let mut prog = TestProgram::load().unwrap();
    prog.fast.add_output(LO).unwrap();
    prog.fast.set_generation(1).unwrap();
    let (ma, mb) = ([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
    let inners = [
        Frame::new(ma, mb).ipv4(0x0a00_0001, 0x0a00_0002).udp(1000, 53).payload(b"fast path").build(),
        Frame::new(ma, mb).ipv4(0x0a00_0003, 0x0a00_0002).ip_tos(0x2e).ip_ttl(17).tcp(40000, 80, 0x10).build(),
        Frame::new(ma, mb).ipv4(0x0a00_0001, 0x0a00_0009).icmp_echo(7, 1).payload(&[0x5a; 100]).build(),
        Frame::new(ma, mb).ipv6(0xfd00 << 112 | 1, 0xfd00 << 112 | 2).udp(5, 6).payload(b"six").build(),
        Frame::new(ma, mb).vlan(0x8100, 0x2005).ipv4(0x0a00_0001, 0x0a00_0002).udp(1, 2).build(),
    ];
    let opt =
        |pairs: &[(&str, &str)]| pairs.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect::<BTreeMap<_, _>>();
    let ports = [
        (
            "geneve",
            opt(&[("remote_ip", "192.168.7.2"), ("key", "5001"), ("tos", "inherit"), ("ttl", "inherit")]),
            vec![],
        ),
        ("geneve", opt(&[("remote_ip", "192.168.7.2"), ("key", "9")]), vec![0x01, 0x02, 0x80, 0x01, 0, 0, 0, 7]),
        ("vxlan", opt(&[("remote_ip", "192.168.7.2"), ("key", "77"), ("tos", "inherit")]), vec![]),
        ("gre", opt(&[("remote_ip", "192.168.7.2"), ("key", "3"), ("ttl", "inherit")]), vec![]),
    ];
    let mut slot = 0;
    for (ty, options, geneve_opts) in &ports {
        let cfg = PortCfg::parse(ty, options).unwrap().0;
        let key = match cfg.out_key {
            Some(tunnel::config::FromFlow::Fixed(k)) => k,
            _ => unreachable!(),
        };
        let spec = EncapSpec {
            kind: cfg.kind,
            eth_src: [2, 0xee, 0, 0, 0, 1],
            eth_dst: [2, 0xee, 0, 0, 0, 2],
            dst_port: cfg.dst_port,
            csum: false,
        };
        let meta = TunnelMeta {
            tun_id: key,
            src: 0xc0a8_0701,
            dst: 0xc0a8_0702,
            flags: flags::DF | flags::KEY,
            tp_dst: cfg.dst_port,
            geneve_opts: if cfg.kind == Kind::Geneve { geneve_opts.clone() } else { vec![] },
            ..TunnelMeta::default()
        };
        let tmpl = Template::new(spec, meta);
        for inner in &inners {
            let (k, _, _) = flow::extract(inner, 1);
            let (sport, tos, ttl) = xvs::tnl::key_encap_fields(&cfg, &k);
            let hdr = tmpl.fixed_header(sport, tos, ttl).unwrap();
            let mut a = offload::encap_action(&hdr, 1500, LO).unwrap();
            a.gen = 1;
            a.slot = slot;
            slot += 1;
            let fk = offload::fast_key(&k, LO);
            prog.fast.insert(&fk, &a).unwrap();
            // Userspace: the fields from the frame.
            let (utos, uttl) = xvs::tnl::inner_tos_ttl(&cfg, inner);
            let usport = udp_src_port(netdev::packet::frame_flow_hash(inner));
            for round in 0..3 {
                let (v, out) = prog.run(inner, LO).unwrap();
                assert_eq!(v, XDP_REDIRECT, "{ty} {round}");
                let id = u16::from_be_bytes([out[18], out[19]]);
                let mut want = vec![0u8; tmpl.len()];
                want.extend_from_slice(inner);
                tmpl.write(&mut want, id, usport, utos, uttl);
                assert_eq!(out, want, "{ty}: inner {inner:02x?}, round {round}");
            }
            // Too long for the underlay: userspace's, untouched.
            prog.fast.insert(&fk, &FastAction { encap_max: inner.len() as u16 - 1, ..a }).unwrap();
            let (v, out) = prog.run(inner, LO).unwrap();
            assert_ne!(v, XDP_REDIRECT);
            assert_eq!(&out, inner);
            prog.fast.remove(&fk).unwrap();
        }
    }
    let s = prog.fast.stats().unwrap();
    assert_eq!((s.hit, s.too_long, s.error), (3 * 20, 20, 0), "{s:?}");
}

/// Decapsulation in the kernel gives the inner frame userspace
/// decapsulation gives (`tunnel::encap::pop`), rewritten as the entry says,
/// for Geneve (without options, and with OVN's one 8-byte option) and
/// VXLAN; and every frame the entry does not describe exactly (another
/// VNI, another inner flow, an outer UDP checksum, a Geneve option or
/// another option value, Ethernet padding) goes to userspace as it came.
#[test]
fn xdp_decapsulation_gives_the_inner_frame_userspace_gives() {
    use bpf::fastpath::act;
    use bpf::DecapKey;
    use tunnel::encap::{flags, pop, push, EncapSpec, Kind, Listen, TunnelMeta};
    const LO: u32 = 1;
    let mut prog = TestProgram::load().unwrap();
    prog.fast.add_output(LO).unwrap();
    prog.fast.set_generation(1).unwrap();
    let (ma, mb) = ([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
    let inner = Frame::new(ma, mb).ipv4(0x0a00_0001, 0x0a00_0002).udp(1000, 53).payload(b"inner frame").build();
    let listen = Listen { udp: vec![(6081, Kind::Geneve), (4789, Kind::Vxlan)], gre: false };
    let (hv, peer) = ([2, 0xee, 0, 0, 0, 1], [2, 0xee, 0, 0, 0, 2]);
    for (slot, (kind, port)) in [(Kind::Geneve, 6081), (Kind::Vxlan, 4789)].into_iter().enumerate() {
        let slot = slot as u32;
        let spec = EncapSpec { kind, eth_src: peer, eth_dst: hv, dst_port: port, csum: false };
        let meta = TunnelMeta {
            tun_id: 5001,
            src: 0xc0a8_0702,
            dst: 0xc0a8_0701,
            tos: 0,
            ttl: 64,
            flags: flags::DF | flags::KEY,
            tp_src: 49152,
            tp_dst: port,
            ..TunnelMeta::default()
        };
        let wrap = |spec: &EncapSpec, meta: &TunnelMeta, inner: &[u8]| {
            let mut f = Vec::new();
            push(spec, meta, inner, 77, &mut f);
            f
        };
        let frame = wrap(&spec, &meta, &inner);
        let d = pop(&frame, &listen).unwrap();
        let mut th = [0u8; 16];
        th[..8].copy_from_slice(&frame[42..50]);
        let (k, _, _) = flow::extract(&inner, 1);
        let dk = DecapKey {
            inner: offload::fast_key(&k, LO),
            dmac: hv,
            smac: peer,
            saddr: [192, 168, 7, 2],
            daddr: [192, 168, 7, 1],
            tos: 0,
            ttl: 64,
            df: 1,
            dport: port,
            th,
            ..DecapKey::default()
        };
        let a = FastAction { out_ifindex: LO, gen: 1, slot, ..FastAction::default() };
        prog.fast.insert_decap(&dk, &a).unwrap();
        let (v, out) = prog.run(&frame, LO).unwrap();
        assert_eq!(v, XDP_REDIRECT, "{kind:?}");
        assert_eq!(out, &frame[d.inner..d.end], "{kind:?}: the inner frame as userspace pops it");
        assert_eq!(prog.fast.counts(a.slot).unwrap(), (1, inner.len() as u64));
        // With a rewrite of the inner frame.
        prog.fast.insert_decap(&dk, &FastAction { flags: act::SET_DL_DST, dl_dst: [2, 9, 9, 9, 9, 9], ..a }).unwrap();
        let (v, out) = prog.run(&frame, LO).unwrap();
        assert_eq!(v, XDP_REDIRECT);
        assert_eq!(&out[..6], &[2, 9, 9, 9, 9, 9]);
        assert_eq!(&out[6..], &inner[6..]);
        // Not described by the entry: to userspace, unchanged.
        let other_vni = wrap(&spec, &TunnelMeta { tun_id: 5002, ..meta.clone() }, &inner);
        let other_inner =
            wrap(&spec, &meta, &Frame::new(ma, mb).ipv4(0x0a00_0001, 0x0a00_0002).udp(1001, 53).payload(b"x").build());
        let csum = wrap(&EncapSpec { csum: true, ..spec.clone() }, &meta, &inner);
        let mut padded = frame.clone();
        padded.extend_from_slice(&[0; 4]);
        let mut cases = vec![("vni", other_vni), ("inner", other_inner), ("udp checksum", csum), ("padding", padded)];
        if kind == Kind::Geneve {
            let opt = TunnelMeta { geneve_opts: vec![0x01, 0x02, 0x80, 0x01, 0, 0, 0, 7], ..meta.clone() };
            cases.push(("geneve option", wrap(&spec, &opt, &inner)));
        }
        for (what, f) in cases {
            let (v, out) = prog.run(&f, LO).unwrap();
            assert_ne!(v, XDP_REDIRECT, "{kind:?} {what}");
            assert_eq!(out, f, "{kind:?} {what}: left as it came");
        }
        prog.fast.remove_decap(&dk).unwrap();
        assert_ne!(prog.run(&frame, LO).unwrap().0, XDP_REDIRECT);
        if kind != Kind::Geneve {
            continue;
        }
        // OVN's one 8-byte option (class 0x0102, type 0x80, 4 bytes of
        // data: the logical ports): an entry holding the option's bytes
        // pops all 58 outer bytes; another option value, or none, misses.
        let with = |data: u32| {
            let mut o = vec![0x01, 0x02, 0x80, 0x01];
            o.extend_from_slice(&data.to_be_bytes());
            wrap(&spec, &TunnelMeta { geneve_opts: o, ..meta.clone() }, &inner)
        };
        let frame = with(0x0001_0002);
        let d = pop(&frame, &listen).unwrap();
        assert_eq!(d.inner, 58);
        let mut th = [0u8; 16];
        th.copy_from_slice(&frame[42..58]);
        let dk = DecapKey { th, ..dk };
        let a = FastAction { slot: slot + 10, ..a };
        prog.fast.insert_decap(&dk, &a).unwrap();
        let (v, out) = prog.run(&frame, LO).unwrap();
        assert_eq!(v, XDP_REDIRECT, "Geneve with OVN's option");
        assert_eq!(out, &frame[d.inner..d.end], "the inner frame as userspace pops it");
        for (what, f) in [("another option value", with(0x0001_0003)), ("no option", wrap(&spec, &meta, &inner))] {
            let (v, out) = prog.run(&f, LO).unwrap();
            assert_ne!(v, XDP_REDIRECT, "{what}");
            assert_eq!(out, f, "{what}: left as it came");
        }
        prog.fast.remove_decap(&dk).unwrap();
    }
}

/// A TCP segment over IPv4 with the given numbers and a valid checksum.
#[allow(clippy::too_many_arguments)]
fn seg(
    src: (u32, u16),
    dst: (u32, u16),
    seq: u32,
    ack: u32,
    flags: u16,
    data: &[u8],
    macs: ([u8; 6], [u8; 6]),
) -> Vec<u8> {
    let mut f = Frame::new(macs.0, macs.1).ipv4(src.0, dst.0).tcp(src.1, dst.1, flags).payload(data).build();
    f[38..42].copy_from_slice(&seq.to_be_bytes());
    f[42..46].copy_from_slice(&ack.to_be_bytes());
    f[50..52].copy_from_slice(&[0, 0]);
    let c = wire::checksum::l4_checksum_v4(src.0, dst.0, 6, &f[34..]);
    f[50..52].copy_from_slice(&c.to_be_bytes());
    f
}

/// Runs a frame through userspace as the datapath does, recirculations
/// included: the (port, bytes) it is output with.
fn run_user(of: &Ofproto, f: &[u8], in_port: u32) -> Vec<(u32, Vec<u8>)> {
    use dpif::execute::Exec;
    let (mut key, mut layout, _) = flow::extract(f, in_port);
    let mut pkt = Packet::from_slice(f);
    pkt.in_port = in_port;
    let mut user = Rec::default();
    let mut q = OutQueues::default();
    for _ in 0..8 {
        let t = of.translate_key(&key, 0);
        match execute(&t.actions, pkt, &mut key, layout, &mut q, &mut user, 1000) {
            Exec::Recirc(p, l) => {
                pkt = p;
                layout = l;
            }
            _ => break,
        }
    }
    q.flush(&mut user);
    user.0
}

/// The kernel serves packets of tracked connections as userspace does:
/// through a firewall (`ct(table=1)`, `+est` -> output) and through SNAT,
/// after a real handshake in userspace, a data segment in each direction
/// gets an entry whose XDP run redirects it to the port userspace outputs
/// it to with the same bytes (translated addresses, ports and checksums
/// included). A segment whose checksum a local sender left partial
/// (veth's default offload) is finished by the program and then gives
/// exactly the bytes of the complete segment, with and without NAT; a
/// program for a generic-mode port (whose skb keeps the sender's offload)
/// forwards it as it is, but leaves it to userspace before NAT. SYN, FIN
/// and RST segments go to userspace (the tracker must see them); the FIN
/// moves the connection on, the tracker reports it to its offload hook,
/// and no entry is offered for it any more.
#[test]
fn xdp_conntrack_verdicts_give_the_bytes_userspace_gives() {
    let id = std::process::id() % 10_000;
    let (va, vb) = (format!("xct{id}a"), format!("xct{id}b"));
    let _ = Command::new("ip").args(["link", "del", &va]).stderr(std::process::Stdio::null()).status();
    assert!(Command::new("ip")
        .args(["link", "add", &va, "type", "veth", "peer", "name", &vb])
        .status()
        .unwrap()
        .success());
    let _g = Veths(vec![va.clone()]);
    let ifx = [ifindex(&va), ifindex(&vb)];
    let dev = |p: u32| -> Option<u32> { (1..=2).contains(&p).then(|| ifx[p as usize - 1]) };
    let mut prog = TestProgram::load().unwrap();
    let mut generic = TestProgram::load_with(false).unwrap();
    for p in [&mut prog, &mut generic] {
        for &i in &ifx {
            p.fast.add_output(i).unwrap();
        }
        p.fast.set_generation(1).unwrap();
    }
    let (c, s) = ((0x0a00_0001u32, 40000u16), (0x0a00_0002u32, 80u16));
    let (mc, ms) = ([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
    let mut slot = 0;
    for snat in [false, true] {
        let mut of = Ofproto::new("ct");
        for p in 1..=2 {
            of.add_port(PortConfig::new(p, &format!("p{p}")));
        }
        let commit = if snat { "ct(commit,zone=5,nat(src=192.168.9.9))" } else { "ct(commit,zone=5)" };
        for r in [
            "table=0,priority=10,ip,actions=ct(table=1,zone=5,nat)".to_string(),
            format!("table=1,priority=10,in_port=1,tcp,ct_state=+trk+new,actions={commit},output:2"),
            "table=1,priority=10,in_port=1,ip,ct_state=+trk+est,actions=output:2".into(),
            "table=1,priority=10,in_port=2,ip,ct_state=+trk+est,actions=output:1".into(),
            "table=1,priority=0,actions=drop".into(),
        ] {
            of.flow_mod(FlowModCmd::Add, &parse_flow(&r, Need::Actions).unwrap()).unwrap();
        }
        let ct = std::sync::Arc::clone(of.conntrack());
        let reported = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let r2 = std::sync::Arc::clone(&reported);
        ct.add_offload_hook(
            1,
            std::sync::Arc::new(move |_| {
                r2.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }),
        );
        // The server sees the client as the translated address (and port).
        let syn = seg(c, s, 100, 0, 0x02, b"", (mc, ms));
        let out = run_user(&of, &syn, 1);
        assert_eq!(out.len(), 1, "the SYN goes through");
        let seen = flow::extract(&out[0].1, 2).0;
        let cs = if snat { (seen.nw_src(), seen.tp_src()) } else { c };
        assert_eq!(cs.0, if snat { 0xc0a8_0909 } else { c.0 });
        assert_eq!(run_user(&of, &seg(s, cs, 500, 101, 0x12, b"", (ms, mc)), 2).len(), 1, "SYN-ACK");
        assert_eq!(run_user(&of, &seg(c, s, 101, 501, 0x10, b"", (mc, ms)), 1).len(), 1, "ACK");
        let translate = |k: &flow::FlowKey| dpif::Upcall::revalidate(&of, k);
        let mut conns = Vec::new();
        for (f, inp, outp) in [
            (seg(c, s, 101, 501, 0x18, &[7; 100], (mc, ms)), 1, 2),
            (seg(s, cs, 501, 201, 0x18, &[9; 50], (ms, mc)), 2, 1),
        ] {
            let mut k = flow::extract(&f, inp).0;
            k.set_in_port(inp);
            let t0 = translate(&k).unwrap();
            let (fk, mut fa, deps, _, _) =
                offload::entry_ct(&k, &t0, &translate, &dev, &|_, _, _| None, 1000).expect("offloadable");
            use bpf::fastpath::act;
            assert_eq!(deps.len(), 1);
            assert_eq!(fa.flags & act::CT, act::CT);
            assert_eq!(fa.flags & act::NAT != 0, snat, "NAT flags {:#x}", fa.flags);
            assert_eq!(fa.out_ifindex, dev(outp).unwrap());
            ct.mark_offloaded(&deps[0].conn);
            conns.push(deps[0].clone());
            fa.gen = 1;
            fa.slot = slot;
            slot += 1;
            prog.fast.insert(&fk, &fa).unwrap();
            generic.fast.insert(&fk, &fa).unwrap();
            let (v, kernel) = prog.run(&f, dev(inp).unwrap()).unwrap();
            let user = run_user(&of, &f, inp);
            assert_eq!(v, XDP_REDIRECT, "the kernel serves the segment");
            assert_eq!(user.len(), 1);
            assert_eq!(user[0].0, outp);
            assert_eq!(kernel, user[0].1, "same bytes (snat {snat}, from port {inp})");
            // The same segment with a partial checksum (a sender's offload):
            // finished in the program, then the same bytes as the complete
            // segment gives.
            let mut p = f.clone();
            let (src, dst) = (k.nw_src(), k.nw_dst());
            let partial = wire::checksum::partial_v4(src, dst, 6, p.len() - 34);
            p[50..52].copy_from_slice(&partial.to_be_bytes());
            let done = prog.fast.stats().unwrap().csum_finished;
            let (v, kernel) = prog.run(&p, dev(inp).unwrap()).unwrap();
            assert_eq!(v, XDP_REDIRECT, "partial checksum, snat {snat}");
            assert_eq!(kernel, user[0].1, "partial checksum finished, then the same bytes (snat {snat})");
            assert_eq!(prog.fast.stats().unwrap().csum_finished - done, 1);
            // Generic mode: the skb keeps the offload, so without NAT the
            // frame goes as it is; NAT would need the checksum finished
            // first, which userspace does.
            let slow = generic.fast.stats().unwrap().ct_slow;
            let (v, kernel) = generic.run(&p, dev(inp).unwrap()).unwrap();
            assert_eq!(v == XDP_REDIRECT, !snat, "generic mode, partial checksum, snat {snat}");
            if !snat {
                assert_eq!(kernel, p, "generic mode leaves the partial checksum to the skb's offload");
            }
            assert_eq!(generic.fast.stats().unwrap().ct_slow - slow, snat as u64);
            // SYN, RST and FIN: to the tracker; and segments without ACK
            // (none, PSH or URG alone, a bare FIN), which it calls invalid
            // (found by tests/xdp_fuzz.rs: the kernel forwarded them, the
            // firewall drops them).
            for flags in [0x02, 0x14, 0x11, 0x00, 0x08, 0x20, 0x01] {
                let mut x = f.clone();
                x[46..48].copy_from_slice(&((5u16 << 12) | flags).to_be_bytes());
                x[50..52].copy_from_slice(&[0, 0]);
                let c = wire::checksum::l4_checksum_v4(src, dst, 6, &x[34..]);
                x[50..52].copy_from_slice(&c.to_be_bytes());
                let (v, out) = prog.run(&x, dev(inp).unwrap()).unwrap();
                assert_ne!(v, XDP_REDIRECT, "flags {flags:#x} go to userspace");
                assert_eq!(out, x, "flags {flags:#x}: untouched");
            }
        }
        // The client's FIN, in userspace: the connection closes down.
        let d = &conns[0];
        assert!(ct.offload_current(&d.conn, d.version, 1000));
        let before = reported.load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!(run_user(&of, &seg(c, s, 201, 551, 0x11, b"", (mc, ms)), 1).len(), 1, "FIN");
        assert!(!ct.offload_current(&d.conn, d.version, 1000), "the FIN changed the connection");
        assert!(reported.load(std::sync::atomic::Ordering::Relaxed) > before, "the hook heard of it");
        let f = seg(c, s, 201, 551, 0x10, &[1; 10], (mc, ms));
        let mut k = flow::extract(&f, 1).0;
        k.set_in_port(1);
        let t0 = translate(&k).unwrap();
        let Err(why) = offload::entry_ct(&k, &t0, &translate, &dev, &|_, _, _| None, 1000) else {
            panic!("a closing connection is offered")
        };
        let why = why.to_string();
        assert!(why.contains("closing"), "{why}");
    }
}

/// Frames userspace's parser refuses (and drops) are not the fast path's
/// to forward, even where the fields the program reads equal an entry's
/// key: an IP datagram longer than the frame, a UDP header cut short by
/// the frame or by the datagram's own length (the rest is Ethernet
/// padding), a TCP data offset below 20 bytes or beyond the segment, an
/// IPv6 payload longer than the frame. The program leaves each to
/// userspace untouched. (Found by tests/xdp_fuzz.rs: before, the program
/// read only the ports and redirected them.)
#[test]
fn xdp_leaves_frames_userspace_drops_as_malformed() {
    const LO: u32 = 1;
    let mut prog = TestProgram::load().unwrap();
    prog.fast.add_output(LO).unwrap();
    prog.fast.set_generation(1).unwrap();
    let (ma, mb) = ([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
    let udp = Frame::new(ma, mb).ipv4(0x0a00_0001, 0x0a00_0002).udp(1000, 53).payload(b"x").build();
    let tcp = Frame::new(ma, mb).ipv4(0x0a00_0001, 0x0a00_0002).tcp(1000, 80, 0x10).payload(b"xy").build();
    let udp6 = Frame::new(ma, mb).ipv6(0xfd00 << 112 | 1, 0xfd00 << 112 | 2).udp(1000, 53).payload(b"x").build();
    let set16 = |f: &[u8], at: usize, v: u16| {
        let mut g = f.to_vec();
        g[at..at + 2].copy_from_slice(&v.to_be_bytes());
        g
    };
    let with_doff = |doff: u8| {
        let mut g = tcp.clone();
        g[46] = doff << 4;
        g
    };
    let cases: Vec<(&str, &[u8], Vec<u8>)> = vec![
        ("UDP header cut by the frame's end", &udp, udp[..38].to_vec()),
        ("UDP header cut by the IPv4 total length", &udp, set16(&udp, 16, 24)),
        ("TCP data offset 16", &tcp, with_doff(4)),
        ("TCP data offset past the segment", &tcp, with_doff(15)),
        ("IPv6 payload longer than the frame", &udp6, set16(&udp6, 18, 100)),
    ];
    for (slot, (what, good, bad)) in cases.into_iter().enumerate() {
        let (k, _, err) = flow::extract(good, 1);
        assert!(err.is_none());
        let fa = FastAction { out_ifindex: LO, gen: 1, slot: slot as u32, ..FastAction::default() };
        prog.fast.insert(&offload::fast_key(&k, LO), &fa).unwrap();
        assert_eq!(prog.run(good, LO).unwrap().0, XDP_REDIRECT, "{what}: the well-formed frame is served");
        assert!(flow::extract(&bad, 1).2.is_some(), "{what}: userspace drops it");
        let (v, out) = prog.run(&bad, LO).unwrap();
        assert_ne!(v, XDP_REDIRECT, "{what}: not forwarded by the kernel");
        assert_eq!(out, bad, "{what}: left to userspace untouched");
        prog.fast.remove(&offload::fast_key(&k, LO)).unwrap();
    }
}

/// A tunnel frame whose decapsulating entry matched, but which must go to
/// userspace after all (here: a TCP segment with FIN, SYN or RST under an
/// entry with the conntrack guard), goes there as it came, outer headers
/// included: userspace must see the tunnel frame, not its inner frame as
/// if it had arrived bare on the underlay port. (Found by
/// tests/xdp_fuzz.rs; the program's decapsulating entries are built
/// without the guard today, and the other such exit, a partial checksum
/// too long to finish, needs frames longer than single-buffer XDP takes,
/// so no frame met it yet: the program now restores the outer headers
/// on every exit to userspace after a decapsulation.)
#[test]
fn xdp_decapsulated_frame_left_to_userspace_keeps_its_outer_headers() {
    use bpf::fastpath::act;
    use bpf::DecapKey;
    use tunnel::encap::{flags, pop, push, EncapSpec, Kind, Listen, TunnelMeta};
    const LO: u32 = 1;
    let mut prog = TestProgram::load().unwrap();
    prog.fast.add_output(LO).unwrap();
    prog.fast.set_generation(1).unwrap();
    let (ma, mb) = ([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
    let (hv, peer) = ([2, 0xee, 0, 0, 0, 1], [2, 0xee, 0, 0, 0, 2]);
    let listen = Listen { udp: vec![(6081, Kind::Geneve)], gre: false };
    let spec = EncapSpec { kind: Kind::Geneve, eth_src: peer, eth_dst: hv, dst_port: 6081, csum: false };
    let meta = TunnelMeta {
        tun_id: 5001,
        src: 0xc0a8_0702,
        dst: 0xc0a8_0701,
        ttl: 64,
        flags: flags::DF | flags::KEY,
        tp_src: 49152,
        tp_dst: 6081,
        ..TunnelMeta::default()
    };
    let wrap = |tcp_flags: u16| {
        let inner = Frame::new(ma, mb).ipv4(0x0a00_0001, 0x0a00_0002).tcp(40000, 80, tcp_flags).payload(b"d").build();
        let mut f = Vec::new();
        push(&spec, &meta, &inner, 77, &mut f);
        f
    };
    let data = wrap(0x18);
    let d = pop(&data, &listen).unwrap();
    let mut th = [0u8; 16];
    th[..8].copy_from_slice(&data[42..50]);
    let dk = DecapKey {
        inner: offload::fast_key(&flow::extract(&data[d.inner..d.end], 1).0, LO),
        dmac: hv,
        smac: peer,
        saddr: [192, 168, 7, 2],
        daddr: [192, 168, 7, 1],
        ttl: 64,
        df: 1,
        dport: 6081,
        th,
        ..DecapKey::default()
    };
    prog.fast
        .insert_decap(&dk, &FastAction { out_ifindex: LO, gen: 1, flags: act::CT, ..FastAction::default() })
        .unwrap();
    let (v, out) = prog.run(&data, LO).unwrap();
    assert_eq!(v, XDP_REDIRECT);
    assert_eq!(out, &data[d.inner..d.end]);
    for fl in [0x11, 0x02, 0x14] {
        let f = wrap(fl);
        let (v, out) = prog.run(&f, LO).unwrap();
        assert_ne!(v, XDP_REDIRECT, "flags {fl:#x}");
        assert_eq!(out, f, "flags {fl:#x}: the tunnel frame, as it came");
    }
}

/// RARP frames carry ARP's header, whose addresses and opcode are in
/// userspace's key (a megaflow may match `arp_spa`) but not in the
/// program's: no entry is offered for one, and the program does not look
/// one up. An MPLS frame cut inside its label stack entry, which
/// userspace drops, goes to userspace untouched. (Found by
/// tests/xdp_fuzz.rs: an entry made from one RARP frame served RARP
/// frames with any sender address, and cut RARP or MPLS frames were
/// forwarded.)
#[test]
fn xdp_rarp_and_cut_mpls_frames_stay_in_userspace() {
    const LO: u32 = 1;
    let mut of = Ofproto::new("rarp");
    for p in 1..=2 {
        of.add_port(PortConfig::new(p, &format!("p{p}")));
    }
    for r in ["priority=10,in_port=1,rarp,arp_spa=10.0.0.1,actions=output:2", "priority=5,in_port=1,actions=drop"] {
        of.flow_mod(FlowModCmd::Add, &parse_flow(r, Need::Actions).unwrap()).unwrap();
    }
    let rarp = |spa: u32| {
        let mut f =
            Frame::new([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]).arp(3, [2, 0, 0, 0, 0, 1], spa, [0; 6], 2).build();
        f[12..14].copy_from_slice(&0x8035u16.to_be_bytes());
        f
    };
    let (f, g) = (rarp(0x0a00_0001), rarp(0x0a00_0009));
    let mut k = flow::extract(&f, 1).0;
    k.set_in_port(1);
    let t = of.translate_key(&k, 0);
    assert_eq!(t.actions, vec![DpAction::Output(2)]);
    assert!(of.translate_key(&flow::extract(&g, 1).0, 0).actions.is_empty(), "another sender: dropped");
    let dev = |p: u32| Some(LO + p - 1);
    assert_eq!(
        offload::entry(&k, &t.mask, &t.actions, &dev).unwrap_err().to_string(),
        "RARP frames are not parsed by the XDP program"
    );
    let mut prog = TestProgram::load().unwrap();
    prog.fast.add_output(LO).unwrap();
    prog.fast.set_generation(1).unwrap();
    let fa = FastAction { out_ifindex: LO, gen: 1, ..FastAction::default() };
    prog.fast.insert(&offload::fast_key(&k, LO), &fa).unwrap();
    for x in [&f, &g, &f[..16].to_vec()] {
        let (v, out) = prog.run(x, LO).unwrap();
        assert_ne!(v, XDP_REDIRECT, "RARP is not looked up");
        assert_eq!(&out, x);
    }
    let mpls =
        Frame::new([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]).ethertype(0x8847).payload(&[0, 1, 0x41, 64, 9, 9]).build();
    let (mk, _, err) = flow::extract(&mpls, 1);
    assert!(err.is_none());
    prog.fast.insert(&offload::fast_key(&mk, LO), &FastAction { slot: 1, ..fa }).unwrap();
    assert_eq!(prog.run(&mpls, LO).unwrap().0, XDP_REDIRECT, "a whole MPLS frame is served");
    let cut = mpls[..16].to_vec();
    assert!(flow::extract(&cut, 1).2.is_some(), "userspace drops the cut one");
    let (v, out) = prog.run(&cut, LO).unwrap();
    assert_ne!(v, XDP_REDIRECT);
    assert_eq!(out, cut);
}
