//! A large delete planned, staged in parts and committed once: readers
//! (translation, dumps) see every rule until the commit and none of the
//! deleted ones after it, and the outcome equals a one-shot delete.

use dpif::Upcall;
use flow::key::{ethertype, ipproto, FlowKey};
use ofproto::{parse_flow, FlowModCmd, Need, Ofproto, PortConfig};

fn bridge(n: u32) -> Ofproto {
    let mut of = Ofproto::new("d");
    of.add_port(PortConfig::new(1, "p1"));
    of.add_port(PortConfig::new(2, "p2"));
    of.add_port(PortConfig::new(3, "p3"));
    for i in 0..n {
        let r = format!("cookie=0x77,priority=5,tcp,nw_dst=10.200.{}.{},tp_dst=80,actions=output:2", i / 256, i % 256);
        of.flow_mod(FlowModCmd::Add, &parse_flow(&r, Need::Actions).unwrap()).unwrap();
    }
    of.flow_mod(FlowModCmd::Add, &parse_flow("priority=0,actions=output:3", Need::Actions).unwrap()).unwrap();
    of
}

fn to(i: u32) -> FlowKey {
    let mut k = FlowKey::ZERO;
    k.set_in_port(1);
    k.set_dl_type(ethertype::IPV4);
    k.set_nw_proto(ipproto::TCP);
    k.set_nw_dst(0x0ac8_0000 | i);
    k.set_tp_dst(80);
    k
}

#[test]
fn staged_delete_is_invisible_until_committed_and_equals_a_one_shot_delete() {
    let n = 1000;
    let spec = parse_flow("cookie=0x77/-1", Need::NoActions).unwrap();
    let mut of = bridge(n);
    let plan = of.plan_delete(FlowModCmd::Delete, &spec);
    assert_eq!(plan.len(), n as usize, "every cookie-0x77 rule, not the default one");
    for chunk in plan.chunks(300) {
        of.stage_delete(chunk);
        // Still visible to readers: rules, dumps and translation.
        assert_eq!(of.rules().len(), n as usize + 1);
        let t = of.translate(&to(999));
        assert_eq!(format!("{:?}", t.actions), format!("{:?}", vec![dpif::DpAction::Output(2)]));
    }
    of.commit_staged();
    assert_eq!(of.rules().len(), 1, "only the default rule is left");
    assert_eq!(format!("{:?}", of.translate(&to(999)).actions), format!("{:?}", vec![dpif::DpAction::Output(3)]));

    let mut one = bridge(n);
    assert_eq!(one.flow_mod(FlowModCmd::Delete, &spec).unwrap(), n as usize);
    let dump = |o: &Ofproto| o.rules().iter().map(|(t, m, p, _)| format!("{t} {m} {p}")).collect::<Vec<_>>();
    assert_eq!(dump(&of), dump(&one));
}

/// `has_timeouts` (what housekeeping asks before scanning for expired
/// rules) answers without a pass over the rules when none with a timeout
/// was made since it last found none, and follows adds and deletes.
#[test]
fn has_timeouts_follows_the_rules() {
    let mut of = bridge(1000);
    assert!(!of.has_timeouts(), "no rule has a timeout");
    let timed = parse_flow("priority=9,udp,tp_dst=53,idle_timeout=5,actions=output:2", Need::Actions).unwrap();
    of.flow_mod(FlowModCmd::Add, &timed).unwrap();
    assert!(of.has_timeouts());
    assert!(of.has_timeouts(), "still there");
    of.flow_mod(FlowModCmd::DeleteStrict, &timed).unwrap();
    assert!(!of.has_timeouts(), "gone with its rule");
    let hard = parse_flow("priority=9,udp,tp_dst=54,hard_timeout=7,actions=output:2", Need::Actions).unwrap();
    of.flow_mod(FlowModCmd::Add, &hard).unwrap();
    assert!(of.has_timeouts(), "a hard timeout counts too");
}
