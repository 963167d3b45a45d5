//! The stored OVN pipeline of this directory, loaded into a bridge: shared
//! by the translation benchmark (`benches/ovn.rs`) and the lookup memo test
//! (`tests/memo.rs`), which include this file as a module.
use ofproto::{parse_flow, FlowModCmd, Need, Ofproto, PortConfig};

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/ovn");

/// br-int as OVS had it: the ports of `ports.txt` (`N(name): ...`) and the
/// flows of `file`, in their tables.
pub fn bridge(file: &str) -> Ofproto {
    let mut of = Ofproto::new("br-int");
    let ports = std::fs::read_to_string(format!("{DIR}/ports.txt")).expect("ports.txt");
    for l in ports.lines() {
        let l = l.trim();
        if let Some((n, rest)) = l.split_once('(') {
            if let (Ok(n), Some((name, _))) = (n.parse::<u32>(), rest.split_once(')')) {
                of.add_port(PortConfig::new(n, name));
            }
        }
    }
    let text = std::fs::read_to_string(format!("{DIR}/{file}")).expect("the flows");
    let mods: Vec<_> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| (FlowModCmd::Add, parse_flow(l, Need::Actions).unwrap_or_else(|e| panic!("{l}: {e}"))))
        .collect();
    of.flow_mod_batch(&mods).unwrap_or_else(|(i, e)| panic!("{:?}: {e:?}", mods[i].1));
    of
}
