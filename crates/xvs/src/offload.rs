//! Which megaflows the kernel fast path may serve, and the exact-match
//! entry that serves one flow of such a megaflow.
//!
//! The XDP program (`bpf` crate, `fast_path`) parses a fixed set of fields
//! and looks the frame up by all of them exactly. An entry built here from
//! a packet's extracted key is therefore sound for a megaflow if
//!
//! * the megaflow's mask lies within those fields ([`PARSED`]): then every
//!   frame the entry matches agrees with the packet on every masked bit,
//!   so it matches the megaflow too;
//! * the packet is one the program parses identically (no ARP, no IPv6
//!   neighbour discovery or extension headers, no fragment, at most one
//!   VLAN tag): otherwise the program never looks the frame up;
//! * the actions are ones the program performs with the same result
//!   ([`plan`]): optional VLAN pop, Ethernet address and TTL rewrites,
//!   optional 802.1Q push, then exactly one output to a port the kernel can
//!   redirect to.
//!
//! Everything else stays in userspace. Nothing here touches the kernel:
//! the caller writes the entry into the ingress port's map.

use bpf::fastpath::act;
use bpf::{FastAction, FastKey};
use dpif::DpAction;
use flow::fields::by_name;
use flow::key::{ethertype, VLAN_PRESENT};
use flow::{FlowKey, FlowMask};

/// Key fields the XDP program parses (ovs-ofctl names). `recirc_id` is
/// allowed only as "exactly 0": the program sees frames before any
/// recirculation.
pub const PARSED: &[&str] = &[
    "in_port",
    "recirc_id",
    "dl_src",
    "dl_dst",
    "dl_type",
    "vlan_tci",
    "nw_src",
    "nw_dst",
    "ipv6_src",
    "ipv6_dst",
    "ipv6_label",
    "nw_proto",
    "nw_tos",
    "nw_ttl",
    "nw_frag",
    "tp_src",
    "tp_dst",
];

/// Why a megaflow (or a packet of it) is not offloaded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotOffloadable {
    /// The megaflow matches a field the program does not parse.
    Field(String),
    /// A packet the program does not parse (so it would never hit).
    Packet(&'static str),
    /// An action the program cannot do.
    Action(String),
    /// The output port has no kernel device to redirect to.
    NoDevice(u32),
}

impl std::fmt::Display for NotOffloadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotOffloadable::Field(x) => write!(f, "matches {x}, which the XDP program does not parse"),
            NotOffloadable::Packet(x) => write!(f, "{x} frames are not parsed by the XDP program"),
            NotOffloadable::Action(x) => write!(f, "action {x} must run in userspace"),
            NotOffloadable::NoDevice(p) => write!(f, "output port {p} has no kernel device"),
        }
    }
}

/// Checks that `mask` only covers parsed fields.
pub fn mask_ok(key: &FlowKey, mask: &FlowMask) -> Result<(), NotOffloadable> {
    let mut rest = *mask;
    for name in PARSED {
        let fd = by_name(name).expect("field table has every parsed field");
        if *name == "recirc_id" && fd.get(mask) != 0 && fd.get(key) != 0 {
            return Err(NotOffloadable::Field("recirc_id (after recirculation)".into()));
        }
        fd.set(&mut rest, 0);
    }
    if rest != FlowKey::ZERO {
        let name = flow::FIELDS
            .iter()
            .find(|f| f.get(&rest) != 0)
            .map_or("a metadata field".to_string(), |f| f.name.to_string());
        return Err(NotOffloadable::Field(name));
    }
    Ok(())
}

/// Checks that the packet is one the program parses as extraction did.
pub fn packet_ok(key: &FlowKey) -> Result<(), NotOffloadable> {
    if key.vlan_tci2() != 0 {
        return Err(NotOffloadable::Packet("double-tagged"));
    }
    match key.dl_type() {
        ethertype::ARP => return Err(NotOffloadable::Packet("ARP")),
        t if t < 0x0600 => return Err(NotOffloadable::Packet("802.3")),
        _ => {}
    }
    if key.is_ip_any() && key.nw_frag() != 0 {
        return Err(NotOffloadable::Packet("fragmented"));
    }
    if key.is_ipv6() {
        match key.nw_proto() {
            58 if (133..=137).contains(&key.tp_src()) => return Err(NotOffloadable::Packet("neighbour discovery")),
            0 | 43 | 44 | 50 | 51 | 60 | 135 | 139 | 140 => {
                return Err(NotOffloadable::Packet("IPv6 extension header"));
            }
            _ => {}
        }
    }
    Ok(())
}

/// Fields a `SetMasked` may write for the program to do it.
fn set_plan(key: &FlowKey, mask: &FlowMask, a: &mut FastAction) -> Result<(), NotOffloadable> {
    let mut rest = *mask;
    for (name, flag) in [("dl_src", act::SET_DL_SRC), ("dl_dst", act::SET_DL_DST), ("nw_ttl", act::SET_TTL)] {
        let fd = by_name(name).expect("field");
        let m = fd.get(mask);
        if m == 0 {
            continue;
        }
        if m != fd.loc.max() {
            return Err(NotOffloadable::Action(format!("set of part of {name}")));
        }
        let v = fd.get(key);
        match flag {
            act::SET_DL_SRC => a.dl_src = flow::key::mac_to_bytes(v as u64),
            act::SET_DL_DST => a.dl_dst = flow::key::mac_to_bytes(v as u64),
            _ => a.ttl = v as u8,
        }
        a.flags |= flag;
        fd.set(&mut rest, 0);
    }
    if rest != FlowKey::ZERO {
        let name = flow::FIELDS.iter().find(|f| f.get(&rest) != 0).map_or("?".to_string(), |f| f.name.to_string());
        return Err(NotOffloadable::Action(format!("set_field:{name}")));
    }
    Ok(())
}

/// The program's action for a megaflow's datapath actions; `ifindex`
/// maps a datapath port to its device.
pub fn plan(actions: &[DpAction], ifindex: &dyn Fn(u32) -> Option<u32>) -> Result<FastAction, NotOffloadable> {
    let mut a = FastAction::default();
    // Stages in the program's order: pop, push; rewrites may sit anywhere
    // before the output (they touch other bytes than the tag).
    let mut stage = 0;
    let mut out = None;
    for x in actions {
        if out.is_some() {
            return Err(NotOffloadable::Action(format!("{x} after the output")));
        }
        match x {
            DpAction::PopVlan if stage == 0 => {
                a.flags |= act::POP_VLAN;
                stage = 1;
            }
            DpAction::PushVlan { tpid: 0x8100, tci } if stage <= 1 => {
                a.flags |= act::PUSH_VLAN;
                a.vlan_tci = tci & !VLAN_PRESENT;
                stage = 2;
            }
            DpAction::SetMasked { key, mask } => set_plan(key, mask, &mut a)?,
            DpAction::Output(p) => out = Some(*p),
            other => return Err(NotOffloadable::Action(other.to_string())),
        }
    }
    let p = out.ok_or_else(|| NotOffloadable::Action("drop".into()))?;
    a.out_ifindex = ifindex(p).ok_or(NotOffloadable::NoDevice(p))?;
    Ok(a)
}

/// The exact key the program builds for the packet whose extracted flow
/// key is `k`, received on device `ifindex`.
pub fn fast_key(k: &FlowKey, ifindex: u32) -> FastKey {
    let mut f = FastKey {
        ifindex,
        vlan_tci: if k.vlan_tci() & VLAN_PRESENT != 0 { k.vlan_tci() } else { 0 },
        dl_type: k.dl_type(),
        dl_dst: flow::key::mac_to_bytes(k.dl_dst()),
        dl_src: flow::key::mac_to_bytes(k.dl_src()),
        ..FastKey::default()
    };
    if k.is_ip() {
        f.nw_proto = k.nw_proto();
        f.nw_tos = k.nw_tos();
        f.nw_ttl = k.nw_ttl();
        f.nw_src[..4].copy_from_slice(&k.nw_src().to_be_bytes());
        f.nw_dst[..4].copy_from_slice(&k.nw_dst().to_be_bytes());
    } else if k.is_ipv6() {
        f.nw_proto = k.nw_proto();
        f.nw_tos = k.nw_tos();
        f.nw_ttl = k.nw_ttl();
        f.nw_src = k.ipv6_src().to_be_bytes();
        f.nw_dst = k.ipv6_dst().to_be_bytes();
        f.ipv6_label = k.ipv6_label();
    }
    if k.is_ip_any() && matches!(k.nw_proto(), 1 | 6 | 17 | 58 | 132) {
        f.tp_src = k.tp_src();
        f.tp_dst = k.tp_dst();
    }
    f
}

/// The entry for one packet (extracted key `k`) of a megaflow (`mask`,
/// `actions`), if the program can serve it.
pub fn entry(
    k: &FlowKey,
    mask: &FlowMask,
    actions: &[DpAction],
    ifindex: &dyn Fn(u32) -> Option<u32>,
) -> Result<(FastKey, FastAction), NotOffloadable> {
    mask_ok(k, mask)?;
    packet_ok(k)?;
    let a = plan(actions, ifindex)?;
    let inport = ifindex(k.in_port()).ok_or(NotOffloadable::NoDevice(k.in_port()))?;
    Ok((fast_key(k, inport), a))
}
