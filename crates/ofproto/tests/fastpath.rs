//! Megaflow soundness of the cached fast path, across rule changes.
//!
//! Plan: a random rule set, a poll thread's caches (`dpif::Pmd`, with the
//! EMC inserting on every hit so it is exercised), and a random sequence
//! of steps: look up a packet, or add / modify / delete a random rule.
//! Verified: every packet gets from the caches exactly the actions a fresh
//! translation through the full pipeline gives it at that moment, so no
//! stale or too-wide megaflow is ever used.

use dpif::{Pmd, PmdConfig};
use flow::key::FlowKey;
use ofproto::{parse_flow, FlowModCmd, Need};
use proptest::prelude::*;

mod common;
use common::*;

#[derive(Debug, Clone)]
enum Step {
    Packet(FlowKey),
    Add(String),
    Modify(String),
    Delete(String),
    /// A port's liveness changes (fast-failover groups follow it).
    Port(u32, bool),
}

fn arb_step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => arb_packet().prop_map(Step::Packet),
        1 => arb_rule().prop_map(Step::Add),
        1 => arb_rule().prop_map(Step::Modify),
        1 => arb_match().prop_map(|m| Step::Delete(m.trim_end_matches(',').to_string())),
        1 => (1u32..3, any::<bool>()).prop_map(|(p, up)| Step::Port(p, up)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn cached_actions_equal_full_pipeline(
        rules in prop::collection::vec(arb_rule(), 1..20),
        steps in prop::collection::vec(arb_step(), 1..80),
        emc in prop_oneof![Just(1u32), Just(0u32), Just(3u32)],
    ) {
        let mut of = bridge(&rules, false).unwrap();
        let mut pmd = Pmd::new(PmdConfig { emc_insert_inv_prob: emc, ..PmdConfig::default() });
        for (i, step) in steps.iter().enumerate() {
            match step {
                Step::Packet(k) => {
                    pmd.set_generation(of.generation());
                    let cached = pmd.actions_for_key(k, &of, i as u64).into_owned();
                    // The reference: a fresh walk of the pipeline. It runs
                    // after the cached lookup, so MAC learning done by an
                    // upcall is already in the table for both.
                    let fresh = of.translate_key(k, 0).actions;
                    prop_assert_eq!(&cached, &fresh, "step {} packet {:?}\nrules {:#?}\nsteps {:#?}", i, k, rules, steps);
                }
                Step::Add(r) => {
                    let _ = of.flow_mod(FlowModCmd::Add, &parse_flow(r, Need::Actions).unwrap());
                }
                Step::Modify(r) => {
                    let _ = of.flow_mod(FlowModCmd::Modify, &parse_flow(r, Need::Actions).unwrap());
                }
                Step::Delete(m) => {
                    let _ = of.flow_mod(FlowModCmd::Delete, &parse_flow(m, Need::NoActions).unwrap());
                }
                Step::Port(p, up) => of.set_port_up(*p, *up),
            }
        }
        let st = pmd.stats();
        prop_assert_eq!(st.packets, st.simple_hits + st.emc_hits + st.megaflow_hits + st.upcalls);
    }
}
