//! `xvs trace`: offline translation of one packet through a flow file,
//! printed like OVS's ofproto/trace.

use anyhow::{bail, Context, Result};
use flow::Match;
use ofproto::{Action, FlowModCmd, Instruction, OfPort, Ofproto, PortConfig};
use std::collections::BTreeSet;

pub struct TraceArgs {
    pub flows: String,
    pub packet: String,
    pub ports: Option<String>,
}

/// Ports named by output actions, so offline traces know the bridge's ports.
fn referenced_ports(ins: &[Instruction], out: &mut BTreeSet<u32>) {
    for i in ins {
        if let Instruction::Apply(a) | Instruction::Write(a) = i {
            for act in a {
                match act {
                    Action::Output(OfPort::Port(p)) | Action::OutputMaxLen(OfPort::Port(p), _) => {
                        out.insert(*p);
                    }
                    Action::Resubmit { port: Some(p), .. } => {
                        out.insert(*p);
                    }
                    _ => {}
                }
            }
        }
    }
}

pub fn parse_port_list(s: &str) -> Result<BTreeSet<u32>> {
    let mut out = BTreeSet::new();
    for part in s.split(',').filter(|p| !p.trim().is_empty()) {
        let part = part.trim();
        if let Some((a, b)) = part.split_once('-') {
            let (a, b): (u32, u32) = (
                a.parse().context(format!("--ports: bad '{part}'"))?,
                b.parse().context(format!("--ports: bad '{part}'"))?,
            );
            if a == 0 || b < a || b - a > 4096 {
                bail!("--ports: bad range '{part}'");
            }
            out.extend(a..=b);
        } else {
            out.insert(part.parse().context(format!("--ports: bad port '{part}'"))?);
        }
    }
    Ok(out)
}

/// Runs the trace and returns the text to print.
pub fn run(args: &TraceArgs) -> Result<String> {
    let text = std::fs::read_to_string(&args.flows).with_context(|| format!("reading {}", args.flows))?;
    let specs = ofproto::parse_flow_file(&text)
        .map_err(|(line, e)| anyhow::anyhow!("{}:{}: syntax error at {}", args.flows, line, e))?;
    let pkt = Match::parse(&args.packet)
        .map_err(|e| anyhow::anyhow!("packet: syntax error at '{}': {}", e.token, e.reason))?;
    let key = pkt.key;

    let mut of = Ofproto::new("br0");
    let mut ports = match &args.ports {
        Some(p) => parse_port_list(p)?,
        None => (1..=4).collect(),
    };
    for s in &specs {
        referenced_ports(&s.instructions, &mut ports);
    }
    if key.in_port() != 0 {
        ports.insert(key.in_port());
    }
    for p in ports {
        of.add_port(PortConfig::new(p, &format!("p{p}")));
    }
    let mods: Vec<_> = specs.into_iter().map(|s| (FlowModCmd::Add, s)).collect();
    of.flow_mod_batch(&mods).map_err(|(i, e)| anyhow::anyhow!("{}: flow {}: {}", args.flows, i + 1, e))?;

    let t = of.trace(&key);
    let mut out = String::new();
    out.push_str(&format!("Flow: {}\n\nbridge(\"{}\")\n-------------\n", Match::exact_fields(&key), of.name));
    for l in &t.lines {
        out.push_str(&format!(" {l}\n"));
    }
    let final_flow =
        if t.final_key == key { "unchanged".to_string() } else { Match::exact_fields(&t.final_key).to_string() };
    out.push_str(&format!("\nFinal flow: {final_flow}\n"));
    let mega = Match::new(key, t.translation.mask);
    out.push_str(&format!("Megaflow: {mega}\n"));
    out.push_str(&format!("Datapath actions: {}\n", dpif::format_actions(&t.translation.actions)));
    Ok(out)
}
