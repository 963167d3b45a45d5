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
//! * the packet is one the program parses identically (no ARP or RARP, no IPv6
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
    /// An output to a tunnel port the program cannot encapsulate for.
    Tunnel(String),
}

impl std::fmt::Display for NotOffloadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotOffloadable::Field(x) => write!(f, "matches {x}, which the XDP program does not parse"),
            NotOffloadable::Packet(x) => write!(f, "{x} frames are not parsed by the XDP program"),
            NotOffloadable::Action(x) => write!(f, "action {x} must run in userspace"),
            NotOffloadable::NoDevice(p) => write!(f, "output port {p} has no kernel device"),
            NotOffloadable::Tunnel(x) => write!(f, "{x}"),
        }
    }
}

/// Fields the pipeline keeps beside the packet's headers, which are 0 for
/// every packet that enters the datapath from a device, before any
/// recirculation: OpenFlow metadata and registers, conntrack state (the
/// packet is untracked), tunnel metadata (it came from no tunnel), the
/// packet mark, the datapath hash and the conjunction id. A megaflow may
/// match them (OVN's megaflows match several registers and `metadata`);
/// at recirculation id 0 such a match is "0", which every frame the
/// program sees satisfies.
pub const ZERO_AT_INGRESS: &[&str] = &[
    "pkt_mark",
    "dp_hash",
    "metadata",
    "tun_id",
    "tun_src",
    "tun_dst",
    "tun_ipv6_src",
    "tun_ipv6_dst",
    "tun_flags",
    "tun_tos",
    "tun_ttl",
    "tun_gbp_id",
    "tun_gbp_flags",
    "tun_metadata0",
    "tun_metadata1",
    "ct_state",
    "ct_zone",
    "ct_mark",
    "ct_label",
    "ct_nw_src",
    "ct_nw_dst",
    "ct_nw_proto",
    "ct_tp_src",
    "ct_tp_dst",
    "reg0",
    "reg1",
    "reg2",
    "reg3",
    "reg4",
    "reg5",
    "reg6",
    "reg7",
    "reg8",
    "reg9",
    "reg10",
    "reg11",
    "reg12",
    "reg13",
    "reg14",
    "reg15",
    "conj_id",
];

/// Whether `key` is a packet as it entered the datapath from a device:
/// recirculation id 0 and every [`ZERO_AT_INGRESS`] field 0.
pub fn at_ingress(key: &FlowKey) -> bool {
    key.recirc_id() == 0
        && ZERO_AT_INGRESS.iter().all(|n| by_name(n).expect("field table has every ingress field").get(key) == 0)
}

/// Checks that `mask` only covers parsed fields (and, for a packet at
/// ingress, fields that are 0 there: [`ZERO_AT_INGRESS`]).
pub fn mask_ok(key: &FlowKey, mask: &FlowMask) -> Result<(), NotOffloadable> {
    let mut rest = *mask;
    for name in PARSED {
        let fd = by_name(name).expect("field table has every parsed field");
        if *name == "recirc_id" && fd.get(mask) != 0 && fd.get(key) != 0 {
            return Err(NotOffloadable::Field("recirc_id (after recirculation)".into()));
        }
        fd.set(&mut rest, 0);
    }
    if at_ingress(key) {
        for name in ZERO_AT_INGRESS {
            by_name(name).expect("field table has every ingress field").set(&mut rest, 0);
        }
    }
    // The program parses one 802.1Q tag at most and leaves a frame with a
    // second one (or an 802.1ad tag) to userspace, so no frame it serves
    // has an inner tag: a megaflow may require none (as one that pops a
    // tag does, `vlan_tci2=0x0/0x1000`).
    let inner_tag = by_name("vlan_tci2").expect("field table has vlan_tci2");
    if inner_tag.get(key) == 0 {
        inner_tag.set(&mut rest, 0);
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

/// [`mask_ok`] for the inner frame of a tunnel frame the program
/// decapsulates (`key`: its key on the tunnel bridge, tunnel fields
/// included). Every tunnel field comes from outer fields the decapsulating
/// entry holds exactly (addresses, TOS, TTL, DF, the tunnel header and its
/// options, so `tun_metadata` too), so a megaflow may match them; the other
/// [`ZERO_AT_INGRESS`] fields must be 0, as they are for a frame just
/// decapsulated.
pub fn decap_mask_ok(key: &FlowKey, mask: &FlowMask) -> Result<(), NotOffloadable> {
    let mut k = *key;
    for name in ZERO_AT_INGRESS.iter().filter(|n| n.starts_with("tun_")) {
        by_name(name).expect("field table has every tunnel field").set(&mut k, 0);
    }
    if !at_ingress(&k) {
        return Err(NotOffloadable::Packet("recirculated or pipeline-marked"));
    }
    mask_ok(&k, mask)
}

/// Checks that the packet is one the program parses as extraction did.
pub fn packet_ok(key: &FlowKey) -> Result<(), NotOffloadable> {
    if key.vlan_tci2() != 0 {
        return Err(NotOffloadable::Packet("double-tagged"));
    }
    match key.dl_type() {
        ethertype::ARP => return Err(NotOffloadable::Packet("ARP")),
        // The same header: its key holds addresses the program's does not.
        ethertype::RARP => return Err(NotOffloadable::Packet("RARP")),
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
            DpAction::SetMasked(set) => {
                let (key, mut mask) = (set.key(), set.mask());
                // A tag just pushed, then given its VID or PCP (OpenFlow
                // 1.1+'s `push_vlan,set_field:..->vlan_vid`): the program
                // pushes the final TCI at once. Rewriting a tag the frame
                // came with is not one of its actions.
                let tci = by_name("vlan_tci").expect("field table has vlan_tci");
                let m = tci.get(&mask);
                if m != 0 {
                    let now = a.vlan_tci as u128 | VLAN_PRESENT as u128;
                    let new = (now & !m) | (tci.get(&key) & m);
                    if stage != 2 || new & VLAN_PRESENT as u128 == 0 {
                        return Err(NotOffloadable::Action("set_field:vlan_tci".into()));
                    }
                    a.vlan_tci = new as u16 & !VLAN_PRESENT;
                    tci.set(&mut mask, 0);
                }
                set_plan(&key, &mask, &mut a)?
            }
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
    // `ct_clear` on a packet that entered from a device (OVN's router
    // pipeline has one) clears nothing: it is untracked.
    let a = if at_ingress(k) && actions.contains(&DpAction::CtClear) {
        let rest: Vec<DpAction> = actions.iter().filter(|a| **a != DpAction::CtClear).cloned().collect();
        plan(&rest, ifindex)?
    } else {
        plan(actions, ifindex)?
    };
    let inport = ifindex(k.in_port()).ok_or(NotOffloadable::NoDevice(k.in_port()))?;
    Ok((fast_key(k, inport), a))
}

/// Credits what the kernel forwarded for an entry (packets, bytes,
/// now in ms) to objects outside the megaflow's rules: for an
/// encapsulation, the tunnel port and the underlay bridge's rules.
pub type Credit = Arc<dyn Fn(u64, u64, u64) + Send + Sync>;

/// Resolves an output to datapath port N for packet key K with tunnel
/// fields W (what the pipeline set; 0 for a frame from a device): None if
/// N is not a tunnel port, else the encapsulating action (its
/// `out_ifindex` the underlay device) and what to credit, or why the
/// kernel cannot do it.
pub type EncapFn<'a> =
    &'a dyn Fn(u32, &FlowKey, &flow::key::TnlWords) -> Option<Result<(FastAction, Credit), NotOffloadable>>;

/// The program's action for a tunnel's outer header `hdr` (see
/// [`tunnel::encap::FixedHeader`]), sent to `out_ifindex`, for inner frames
/// of at most `max_inner` bytes.
pub fn encap_action(
    hdr: &tunnel::encap::FixedHeader,
    max_inner: usize,
    out_ifindex: u32,
) -> Result<FastAction, NotOffloadable> {
    let n = hdr.bytes.len();
    if !(38..=bpf::fastpath::ENCAP_MAX).contains(&n) || n % 2 != 0 {
        return Err(NotOffloadable::Tunnel(format!(
            "a {n}-byte outer header (the XDP program takes at most {})",
            bpf::fastpath::ENCAP_MAX
        )));
    }
    let mut a = FastAction {
        out_ifindex,
        flags: act::ENCAP,
        encap_udp: hdr.udp.unwrap_or(0) as u8,
        encap_len: n as u16,
        encap_max: max_inner.min(u16::MAX as usize) as u16,
        encap_sum: hdr.ip_sum,
        ..FastAction::default()
    };
    a.hdr[..n].copy_from_slice(&hdr.bytes);
    Ok(a)
}

/// The tunnel fields a `set(tunnel(...))` gives a frame that had none,
/// if it sets nothing else.
fn tunnel_set(set: &dpif::SetFields) -> Option<flow::key::TnlWords> {
    let (key, mut mask) = (set.key(), set.mask());
    let words = flow::key::TNL_WORDS.map(|w| key.w[w] & mask.w[w]);
    for w in flow::key::TNL_WORDS {
        mask.w[w] = 0;
    }
    (mask == FlowKey::ZERO).then_some(words)
}

/// Actions that are one output after an optional `set(tunnel(...))` that
/// sets nothing else: the port and the tunnel fields set.
fn single_output(actions: &[DpAction]) -> Option<(u32, flow::key::TnlWords)> {
    match actions {
        [DpAction::Output(p)] => Some((*p, [0; flow::key::N_TNL])),
        [DpAction::SetMasked(s), DpAction::Output(p)] => tunnel_set(s).map(|w| (*p, w)),
        _ => None,
    }
}

/// [`entry`], with outputs to tunnel ports resolved by `encap`: a megaflow
/// whose only actions are an output to a tunnel port, after an optional
/// `set(tunnel(...))` (OVN's senders set `tun_id`, the remote and Geneve
/// options so), is served by an entry that encapsulates (the frame
/// unchanged inside) and redirects to the underlay device.
pub fn entry_encap(
    k: &FlowKey,
    mask: &FlowMask,
    actions: &[DpAction],
    ifindex: &dyn Fn(u32) -> Option<u32>,
    encap: EncapFn,
) -> Result<(FastKey, FastAction, Option<Credit>), NotOffloadable> {
    let tunnel_out = single_output(actions);
    // The frame enters with no tunnel fields: the set's are all it has.
    if let Some((p, words)) = tunnel_out.filter(|_| at_ingress(k)) {
        if ifindex(p).is_none() {
            if let Some(r) = encap(p, k, &words) {
                mask_ok(k, mask)?;
                packet_ok(k)?;
                let (a, credit) = r?;
                let inport = ifindex(k.in_port()).ok_or(NotOffloadable::NoDevice(k.in_port()))?;
                return Ok((fast_key(k, inport), a, Some(credit)));
            }
        }
    }
    let (fk, a) = entry(k, mask, actions, ifindex)?;
    Ok((fk, a, None))
}

// ---------------------------------------------------------------------
// The offload manager: which flows go into the kernel, kept sound.
// ---------------------------------------------------------------------

/// A tracked connection an entry's verdict was read from (see
/// [`entry_ct`]).
#[derive(Clone)]
pub struct CtDep {
    pub ct: Arc<conntrack::Conntrack>,
    pub conn: Arc<conntrack::Conn>,
    pub reply: bool,
    pub version: u64,
}

impl std::fmt::Debug for CtDep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CtDep({:?} reply={} v{})", self.conn.orig, self.reply, self.version)
    }
}

/// Passes through the tracker an entry may fold together (OVN's pipeline
/// tracks a packet in its switch's zone on the way in and out).
pub const CT_PASSES: usize = 4;

/// The entry for a packet (extracted key `k`, received on a port) whose
/// megaflow (`first`) sends it through the connection tracker and
/// recirculates: `ct(...)`, then `recirc(N)`, as a firewall's
/// `ct(table=N)` does. The kernel serves it if every pass is one the
/// program can stand in for:
///
/// * each pass before the last is, apart from register and metadata
///   writes (which only the key sees), exactly `ct(...)` then
///   `recirc(N)`, and the tracker says the packet belongs to an
///   established TCP or UDP connection (or a committed UDP one not yet
///   answered, whose sender's packets stay `+new`) whose verdict no
///   further packet that changes no state would change
///   ([`conntrack::Conntrack::offload_view`]);
/// * the next pass's megaflow, looked up with that verdict (and NAT) in the
///   key as the datapath records it, matches only fields that are the
///   packet's parsed fields (the exact key fixes them), the verdict's, or
///   the pipeline's own (registers, metadata), which earlier passes set
///   from those;
/// * the last pass's actions are ones [`plan`] accepts, and any NAT is of
///   IPv4 addresses and TCP/UDP ports (the program rewrites them with
///   incremental checksum updates); or the last pass outputs to a tunnel
///   port the program can encapsulate for (see [`entry_encap`]), after
///   the rewrites.
///
/// The verdict stays true while the connections do not change; the
/// caller withdraws the entry when one does (see [`Offloader`]). TCP
/// segments with SYN, FIN or RST, or without ACK, always go to the
/// tracker.
/// `translate(k)` gives the megaflow a key would get (without side
/// effects).
pub fn entry_ct(
    k: &FlowKey,
    first: &dpif::Translation,
    translate: &dyn Fn(&FlowKey) -> Option<dpif::Translation>,
    ifindex: &dyn Fn(u32) -> Option<u32>,
    encap: EncapFn,
    now_ms: u64,
) -> Result<CtEntry, NotOffloadable> {
    mask_ok(k, &first.mask)?;
    packet_ok(k)?;
    let mut key = *k;
    let mut deps: Vec<CtDep> = Vec::new();
    let mut counters: Vec<dpif::CounterRef> = first.counters.iter().cloned().collect();
    let mut actions = first.actions.clone();
    for _ in 0..CT_PASSES {
        // The pass's actions in order: the tracker's and the key-only ones
        // are done here; the rest (the last pass's rewrites and output)
        // are for the program.
        let mut rest: Vec<DpAction> = Vec::new();
        let mut recirc = None;
        for (i, a) in actions.iter().enumerate() {
            match a {
                DpAction::CtClear => flow::key::clear_ct(&mut key),
                DpAction::SetMasked(set)
                    if PARSED.iter().all(|n| by_name(n).expect("parsed field").get(&set.mask()) == 0) =>
                {
                    set.for_each_word(|i, v, m| key.w[i] = (key.w[i] & !m) | (v & m));
                }
                DpAction::Ct(ct, params) => {
                    if let Some(x) = rest.iter().find(|a| !matches!(a, DpAction::SetMasked(_))) {
                        return Err(NotOffloadable::Action(format!("ct() after {x}")));
                    }
                    let (ct, params) = (Arc::clone(&ct.0), **params);
                    if !key.is_ip_any() || !matches!(key.nw_proto(), 6 | 17) || key.nw_frag() != 0 {
                        return Err(NotOffloadable::Action("ct() of a packet other than TCP or UDP".into()));
                    }
                    let t = conntrack::Tuple {
                        src: if key.is_ipv6() { key.ipv6_src() } else { key.nw_src() as u128 },
                        dst: if key.is_ipv6() { key.ipv6_dst() } else { key.nw_dst() as u128 },
                        sport: key.tp_src(),
                        dport: key.tp_dst(),
                        proto: key.nw_proto(),
                        v6: key.is_ipv6(),
                    };
                    let prev = if key.ct_zone() == params.zone { key.ct_state() } else { 0 };
                    let view = ct
                        .offload_view(&t, &params, prev, now_ms)
                        .map_err(|why| NotOffloadable::Action(format!("ct(): {why}")))?;
                    dpif::execute::apply_ct_verdict(&mut key, &view.result);
                    if let Some(to) = &view.to {
                        dpif::execute::apply_ct_translation(&mut key, to);
                    }
                    if !deps.iter().any(|d: &CtDep| Arc::ptr_eq(&d.conn, &view.conn) && d.reply == view.reply) {
                        deps.push(CtDep { ct, conn: Arc::clone(&view.conn), reply: view.reply, version: view.version });
                    }
                }
                DpAction::Recirc(id) if i + 1 == actions.len() => recirc = Some(*id),
                other => rest.push(other.clone()),
            }
        }
        if deps.is_empty() {
            return Err(NotOffloadable::Action("no ct()".into()));
        }
        let Some(id) = recirc else {
            let inport = ifindex(k.in_port()).ok_or(NotOffloadable::NoDevice(k.in_port()))?;
            // An output to a tunnel port, after an optional
            // set(tunnel(...)), of a frame that came from a device (no
            // tunnel fields): encapsulated as `entry_encap` does, the
            // outer header built for the frame as the pipeline leaves it
            // (translated addresses and ports included).
            let tunnel_out = single_output(&rest);
            let untunnelled = flow::key::TNL_WORDS.iter().all(|w| key.w[*w] == 0);
            if let Some((p, words)) = tunnel_out.filter(|(p, _)| untunnelled && ifindex(*p).is_none()) {
                if let Some(r) = encap(p, &key, &words) {
                    let (a, credit) = r?;
                    return finish(k, &key, a, inport, deps, counters).map(|e| (e.0, e.1, e.2, e.3, Some(credit)));
                }
            }
            let a = plan(&rest, ifindex)?;
            return finish(k, &key, a, inport, deps, counters).map(|e| (e.0, e.1, e.2, e.3, None));
        };
        if let Some(x) = rest.first() {
            return Err(NotOffloadable::Action(format!("{x} before a recirculation")));
        }
        key.set_recirc_id(id);
        let next = translate(&key).ok_or_else(|| NotOffloadable::Action("recirculated pass not translated".into()))?;
        pipeline_only(&next.mask)?;
        counters.extend(next.counters.iter().cloned());
        actions = next.actions;
    }
    Err(NotOffloadable::Action(format!("more than {CT_PASSES} passes through the tracker")))
}

/// What [`entry_ct`] gives: the key and action, the connections, every
/// pass's counters, and for an encapsulation what else to credit.
pub type CtEntry = (FastKey, FastAction, Vec<CtDep>, dpif::CounterSet, Option<Credit>);

/// Checks that a recirculated pass's mask covers only fields the exact key
/// fixes or the pipeline derives from it: the parsed fields, recirc_id,
/// and [`ZERO_AT_INGRESS`] (connection tracking, registers, metadata).
fn pipeline_only(mask: &FlowMask) -> Result<(), NotOffloadable> {
    let mut rest = *mask;
    for name in PARSED.iter().chain(ZERO_AT_INGRESS) {
        by_name(name).expect("field table has every parsed and ingress field").set(&mut rest, 0);
    }
    if rest != FlowKey::ZERO {
        let name = flow::FIELDS.iter().find(|f| f.get(&rest) != 0).map_or("?".to_string(), |f| f.name.to_string());
        return Err(NotOffloadable::Field(name));
    }
    Ok(())
}

/// The entry of [`entry_ct`]: the last pass's action `a`, plus the NAT
/// that turns ingress key `k` into the final key `last`, plus the TCP
/// guard.
fn finish(
    k: &FlowKey,
    last: &FlowKey,
    mut a: FastAction,
    inport: u32,
    deps: Vec<CtDep>,
    counters: Vec<dpif::CounterRef>,
) -> Result<(FastKey, FastAction, Vec<CtDep>, dpif::CounterSet), NotOffloadable> {
    if k.is_ipv6() {
        if (k.ipv6_src(), k.ipv6_dst(), k.tp_src(), k.tp_dst())
            != (last.ipv6_src(), last.ipv6_dst(), last.tp_src(), last.tp_dst())
        {
            return Err(NotOffloadable::Action("NAT of IPv6".into()));
        }
    } else {
        if k.nw_src() != last.nw_src() {
            a.flags |= act::SET_NW_SRC;
            a.nat_src = last.nw_src().to_be_bytes();
        }
        if k.nw_dst() != last.nw_dst() {
            a.flags |= act::SET_NW_DST;
            a.nat_dst = last.nw_dst().to_be_bytes();
        }
    }
    if k.tp_src() != last.tp_src() {
        a.flags |= act::SET_TP_SRC;
        a.nat_sport = last.tp_src();
    }
    if k.tp_dst() != last.tp_dst() {
        a.flags |= act::SET_TP_DST;
        a.nat_dport = last.tp_dst();
    }
    if deps.iter().any(|d| d.conn.orig.proto == 6) {
        a.flags |= act::CT;
    }
    Ok((fast_key(k, inport), a, deps, counters.into()))
}

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

/// One AF_XDP port's fast-path maps.
struct PortFp {
    ifindex: u32,
    fp: Arc<Mutex<bpf::FastPath>>,
}

/// An offloaded flow.
struct Entry {
    ingress: u32,
    out_ifindex: u32,
    slot: u32,
    /// The generation its translation was valid at (the kernel serves it
    /// only while that is the current one).
    gen: u64,
    orig: FlowKey,
    /// The megaflow it serves and its actions, for `dpctl/dump-flows`.
    matched: flow::Match,
    actions: Vec<DpAction>,
    counters: dpif::CounterSet,
    /// Kernel counts already credited to `counters`.
    credited: (u64, u64),
    /// When the kernel last forwarded a packet for it.
    used_ms: u64,
    /// Packets served in the last tick (for eviction).
    recent: u64,
    /// An encapsulation: what else to credit (see [`Credit`]).
    credit: Option<Credit>,
    /// The tracked connections its verdict was read from ([`entry_ct`]).
    ct: Vec<CtDep>,
}

/// A hot flow of another bridge (`bridge`) that entered it through one
/// of its tunnel ports: its key there, tunnel fields included.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ForeignKey {
    pub bridge: String,
    pub key: FlowKey,
}

/// How this bridge's kernel fast path serves one such flow: frames with
/// `key` (outer headers and inner frame) received on port `ingress` are
/// decapsulated and get `action` (output to the tunnel bridge's port
/// device, after its rewrites); `matched`, `actions` and `counters` are
/// the tunnel bridge's megaflow, `credit` the tunnel port and this
/// bridge's rules.
pub struct DecapPlan {
    pub ingress: u32,
    pub key: bpf::DecapKey,
    pub action: FastAction,
    pub credit: Credit,
    pub matched: flow::Match,
    pub actions: Vec<DpAction>,
    pub counters: dpif::CounterSet,
}

/// Resolves a [`ForeignKey`] (translated there, at that bridge's current
/// rules) into the entries that serve it on this bridge's ports, or why
/// the kernel cannot.
pub type DecapFn<'a> = &'a dyn Fn(&ForeignKey) -> Result<Vec<DecapPlan>, NotOffloadable>;

/// The offloaded flows: by the key the program looks them up by, the free
/// counter slots, and the decapsulating ones.
type Entries = (HashMap<FastKey, Entry>, Vec<u32>, HashMap<bpf::DecapKey, DEntry>);

/// A decapsulating entry and the flow it serves.
struct DEntry {
    e: Entry,
    fkey: ForeignKey,
}

/// The generation the kernel compares entries with (see [`Offloader`]).
#[derive(Default)]
struct Gen {
    /// Written to every port's map; 0 turns the fast path off.
    kernel: u64,
    /// Changes outside this bridge that tunnel entries depend on.
    external: u64,
    /// Some entry encapsulates or decapsulates: external changes must
    /// move `kernel`.
    encap: bool,
}

/// Counters of the offload manager (`xvs offload-show`).
#[derive(Debug, Default)]
pub struct OffloadStats {
    pub installed: AtomicU64,
    pub removed: AtomicU64,
    pub evicted: AtomicU64,
    /// Packets and bytes the kernel forwarded for offloaded flows.
    pub packets: AtomicU64,
    pub bytes: AtomicU64,
    /// Hot flows the kernel cannot serve, and the latest reason.
    pub refused: AtomicU64,
    pub last_refusal: Mutex<String>,
    /// Ports (ofport) that took no redirected frames at the latest tick
    /// (see [`Offloader::tick`]).
    pub closed_targets: Mutex<BTreeSet<u32>>,
}

/// Offers hot flows to the kernel fast path and keeps them sound:
///
/// * **What**: exact flows whose packet rate reached `threshold_pps`,
///   estimated from the poll threads' rings of sampled packet keys (one
///   packet in 16), if [`entry`] accepts them.
/// * **Generation**: the bridge calls [`Offloader::set_generation`] from
///   its generation hook, i.e. after a rule, port, group, meter or MAC
///   change is made and before it returns to whoever made it (and so
///   before any OpenFlow barrier reply or database acknowledgement). That
///   moves the offloader's own counter on, and the new value goes into
///   every port's map at once; entries carry the value read before their
///   translation, so from then on none of the old ones matches. Values
///   written to the kernel only grow.
/// * **Tunnel entries** (encapsulating, and decapsulating ones, which
///   serve another bridge's flows) depend on more than this bridge:
///   routes, neighbours, tunnel ports, and the other bridge's rules, MAC
///   table and ports. Each such change calls [`Offloader::external_change`]
///   (through `TnlEnv::underlay_changed`), which moves the kernel's value
///   on too while any such entry exists; one goes in only if no such
///   change happened since it was resolved.
/// * **Revalidation**: each tick re-translates stale entries (without
///   side effects, as the poll threads revalidate megaflows) at the current
///   generation, read under the same lock as the translation, and rewrites
///   or removes them. An entry written with a generation that a concurrent
///   change has already passed is never served: its generation is old.
/// * **Counters**: the kernel's per-entry counts are credited to the
///   translation's OpenFlow rules (and groups) every tick, so `dump-flows`
///   stays true.
/// * **Locks**: the bridge holds its rule lock when it calls
///   `set_generation`, which takes `gen` then `ports`; the tick never
///   holds `ports` or `entries` while it waits for the rule lock.
pub struct Offloader {
    ports: Mutex<BTreeMap<u32, PortFp>>,
    gen: Mutex<Gen>,
    entries: Mutex<Entries>,
    /// Hot flows refused lately: (kernel generation, when). They are not
    /// translated again for a second unless the generation moves (a
    /// refused flow stays in the sample ring, which is read every 50 ms).
    refused: Mutex<HashMap<FlowKey, (u64, u64)>>,
    /// Packets per second a flow needs before it is offloaded.
    threshold_pps: AtomicU64,
    /// Turned off ([`Offloader::configure`]): no entries, ticks do nothing.
    enabled: AtomicBool,
    pub stats: OffloadStats,
    /// Entries that serve tracked connections, by connection (see
    /// [`Offloader::ct_hook`]).
    ct_index: Arc<CtIndex>,
    /// This offloader's hook id in the trackers.
    id: u64,
}

/// The kernel entries each offloaded connection's verdict went into, by
/// the connection's address: a tracker's offload hook withdraws them from
/// the maps at once when the connection changes, on the thread that
/// changed it (one map deletion per entry, rare: the connection closes or
/// is re-marked), so the kernel serves no packet with a verdict the
/// tracker no longer gives. The tick then drops the entry itself (its
/// connection's version moved on).
type CtIndex = Mutex<HashMap<usize, Vec<(Arc<Mutex<bpf::FastPath>>, FastKey)>>>;

static OFFLOADER_IDS: AtomicU64 = AtomicU64::new(1);

fn conn_addr(c: &Arc<conntrack::Conn>) -> usize {
    Arc::as_ptr(c) as usize
}

impl Offloader {
    pub fn new(threshold_pps: u64) -> Offloader {
        Offloader {
            ports: Mutex::new(BTreeMap::new()),
            gen: Mutex::new(Gen::default()),
            entries: Mutex::new((HashMap::new(), Vec::new(), HashMap::new())),
            refused: Mutex::new(HashMap::new()),
            threshold_pps: AtomicU64::new(threshold_pps),
            enabled: AtomicBool::new(true),
            stats: OffloadStats::default(),
            ct_index: Arc::new(Mutex::new(HashMap::new())),
            id: OFFLOADER_IDS.fetch_add(1, Relaxed),
        }
    }

    /// The hook this offloader registers with a tracker whose connections
    /// its entries serve (see [`CtIndex`]).
    fn ct_hook(&self) -> conntrack::OffloadHook {
        let index = Arc::downgrade(&self.ct_index);
        Arc::new(move |c: &Arc<conntrack::Conn>| {
            let Some(index) = index.upgrade() else { return };
            let uses = index.lock().expect("ct index").remove(&conn_addr(c));
            for (fp, k) in uses.into_iter().flatten() {
                let _ = fp.lock().expect("fp").remove(&k);
            }
        })
    }

    /// Registers a port's maps; every registered port may redirect to
    /// every other.
    pub fn add_port(&self, ofport: u32, ifindex: u32, mut fp: bpf::FastPath) {
        let g = self.gen.lock().expect("gen").kernel;
        let mut ports = self.ports.lock().expect("ports");
        for p in ports.values() {
            let _ = p.fp.lock().expect("fp").add_output(ifindex);
            let _ = fp.add_output(p.ifindex);
        }
        let _ = fp.add_output(ifindex);
        let _ = fp.set_generation(g);
        ports.insert(ofport, PortFp { ifindex, fp: Arc::new(Mutex::new(fp)) });
    }

    /// Forgets a port: its maps, and every entry that enters or leaves by it.
    pub fn remove_port(&self, ofport: u32) {
        let Some(gone) = self.ports.lock().expect("ports").remove(&ofport) else { return };
        let ports: Vec<(u32, Arc<Mutex<bpf::FastPath>>)> =
            self.ports.lock().expect("ports").iter().map(|(&o, p)| (o, Arc::clone(&p.fp))).collect();
        let mut e = self.entries.lock().expect("entries");
        let (map, free, dmap) = &mut *e;
        // Entries in the gone port's maps went with them.
        dmap.retain(|_, d| {
            if d.e.ingress != ofport {
                return true;
            }
            free.push(d.e.slot);
            false
        });
        map.retain(|k, v| {
            if v.ingress != ofport && v.out_ifindex != gone.ifindex {
                return true;
            }
            if let Some((_, fp)) = ports.iter().find(|(o, _)| *o == v.ingress) {
                let _ = fp.lock().expect("fp").remove(k);
            }
            free.push(v.slot);
            false
        });
        for (_, fp) in &ports {
            let _ = fp.lock().expect("fp").remove_output(gone.ifindex);
        }
    }

    /// Makes every entry made before now stale (see the type's
    /// documentation). Called from the bridge's generation hook with the
    /// bridge's new generation, which only says that something changed.
    pub fn set_generation(&self, _bridge_generation: u64) {
        let mut g = self.gen.lock().expect("gen");
        self.advance(&mut g);
    }

    /// A change outside this bridge that encapsulations depend on (see the
    /// type's documentation).
    pub fn external_change(&self) {
        let mut g = self.gen.lock().expect("gen");
        g.external += 1;
        if g.encap {
            self.advance(&mut g);
        }
    }

    fn advance(&self, g: &mut Gen) {
        g.kernel += 1;
        for p in self.ports.lock().expect("ports").values() {
            if let Err(e) = p.fp.lock().expect("fp").set_generation(g.kernel) {
                eprintln!("xvs: offload: cannot write the generation: {e}");
            }
        }
    }

    /// (kernel generation, external changes) now.
    fn snapshot(&self) -> (u64, u64) {
        let g = self.gen.lock().expect("gen");
        (g.kernel, g.external)
    }

    /// Turns the fast path on or off (off removes every entry at once, its
    /// last kernel counts credited) and sets the rate a flow needs to be
    /// offloaded.
    pub fn configure(&self, on: bool, threshold_pps: u64, now_ms: u64) {
        self.threshold_pps.store(threshold_pps, Relaxed);
        if !self.enabled.swap(on, Relaxed) || on {
            return;
        }
        // Entries stay out from here: the tick sees `enabled` false.
        let ports: BTreeMap<u32, Arc<Mutex<bpf::FastPath>>> =
            self.ports.lock().expect("ports").iter().map(|(&o, p)| (o, Arc::clone(&p.fp))).collect();
        let mut e = self.entries.lock().expect("entries");
        let (m, _, dm) = &mut *e;
        for v in m.values_mut().chain(dm.values_mut().map(|d| &mut d.e)) {
            if let Some(fp) = ports.get(&v.ingress) {
                self.settle(v, &fp.lock().expect("fp"), now_ms);
            }
        }
        for fp in ports.values() {
            let _ = fp.lock().expect("fp").clear();
        }
        e.0.clear();
        e.1.clear();
        e.2.clear();
    }

    /// Credits what the kernel forwarded for `v` since the last credit to
    /// its rules (and the totals), and remembers it as credited.
    fn settle(&self, v: &mut Entry, fp: &bpf::FastPath, now_ms: u64) {
        let Ok((p, b)) = fp.counts(v.slot) else { return };
        let (dp, db) = (p.saturating_sub(v.credited.0), b.saturating_sub(v.credited.1));
        if dp > 0 {
            for c in v.counters.iter() {
                c.0.credit(dp, db, now_ms);
            }
            if let Some(credit) = &v.credit {
                credit(dp, db, now_ms);
            }
            // The tracker counts IP datagrams; the kernel counted frames.
            let l2 = 14 * dp;
            for d in &v.ct {
                d.ct.credit_offloaded(&d.conn, d.reply, dp, db.saturating_sub(l2), now_ms);
            }
            self.stats.packets.fetch_add(dp, Relaxed);
            self.stats.bytes.fetch_add(db, Relaxed);
            v.used_ms = now_ms;
        }
        v.credited = (p, b);
        v.recent = dp;
    }

    /// The device of port `ofport`, if it has the fast path.
    pub fn port_ifindex(&self, ofport: u32) -> Option<u32> {
        self.ports.lock().expect("ports").get(&ofport).map(|p| p.ifindex)
    }

    /// Ports with the fast path: (OpenFlow number, device).
    pub fn port_list(&self) -> Vec<(u32, u32)> {
        self.ports.lock().expect("ports").iter().map(|(&o, p)| (o, p.ifindex)).collect()
    }

    /// What the fast path does for port `ofport`, for `xvs show`.
    pub fn port_state(&self, ofport: u32) -> &'static str {
        if !self.ports.lock().expect("ports").contains_key(&ofport) {
            "no (not an AF_XDP port with the program)"
        } else if self.stats.closed_targets.lock().expect("closed targets").contains(&ofport) {
            "ingress only (takes no redirected frames now: a veth with GRO off and no XDP program at its far end)"
        } else {
            "yes"
        }
    }

    pub fn enabled(&self) -> bool {
        self.enabled.load(Relaxed)
    }

    pub fn threshold_pps(&self) -> u64 {
        self.threshold_pps.load(Relaxed)
    }

    /// The offloaded flows as `dpctl/dump-flows` lists them: (the megaflow
    /// each serves, its actions, packets and bytes the kernel forwarded,
    /// when it last did).
    pub fn flows(&self) -> Vec<(flow::Match, Vec<DpAction>, u64, u64, u64)> {
        let e = self.entries.lock().expect("entries");
        e.0.values()
            .chain(e.2.values().map(|d| &d.e))
            .map(|v| (v.matched, v.actions.clone(), v.credited.0, v.credited.1, v.used_ms))
            .collect()
    }

    pub fn n_entries(&self) -> usize {
        let e = self.entries.lock().expect("entries");
        e.0.len() + e.2.len()
    }

    /// The kernel's fast-path outcomes summed over ports.
    pub fn kernel_stats(&self) -> bpf::FastStats {
        let mut t = bpf::FastStats::default();
        for p in self.ports.lock().expect("ports").values() {
            if let Ok(s) = p.fp.lock().expect("fp").stats() {
                t.hit += s.hit;
                t.miss += s.miss;
                t.stale += s.stale;
                t.unparsed += s.unparsed;
                t.error += s.error;
                t.too_long += s.too_long;
                t.ct_slow += s.ct_slow;
                t.csum_too_long += s.csum_too_long;
                t.csum_finished += s.csum_finished;
            }
        }
        t
    }

    /// One round: credit kernel counts, revalidate stale entries, offload
    /// flows that became hot; a round that is not `full` only offloads
    /// (the switch runs one every 50 ms, a full one every 250 ms).
    /// `samples` are recent packets' keys, each with the packets per
    /// second it stands for (see `switch::sample_rates`); a key whose
    /// samples add up to the threshold is hot. `translate` re-translates a key
    /// without side effects. `encap` resolves outputs to tunnel ports (see
    /// [`entry_encap`]).
    ///
    /// `takes_redirects` says whether a device (by ifindex) accepts frames
    /// redirected to it right now (its `NETDEV_XDP_ACT_NDO_XMIT` feature;
    /// `None` when the kernel cannot say). A veth has it only while its far
    /// end takes XDP frames (GRO on, or an XDP program there); without it
    /// the kernel drops what is redirected. So no entry redirects to a port
    /// without it: existing ones go at the tick that sees it gone, and hot
    /// flows to it stay in userspace until it is back.
    #[allow(clippy::too_many_arguments)]
    pub fn tick(
        &self,
        samples: &[(FlowKey, f64)],
        now_ms: u64,
        full: bool,
        translate: &dyn Fn(&FlowKey) -> Option<dpif::Translation>,
        encap: EncapFn,
        takes_redirects: &dyn Fn(u32) -> Option<bool>,
        foreign_hot: &[ForeignKey],
        decap: DecapFn,
    ) {
        let ports: BTreeMap<u32, (u32, Arc<Mutex<bpf::FastPath>>)> =
            self.ports.lock().expect("ports").iter().map(|(&o, p)| (o, (p.ifindex, Arc::clone(&p.fp)))).collect();
        if ports.is_empty() || !self.enabled() {
            return;
        }
        let closed: BTreeMap<u32, u32> = ports
            .iter()
            .filter(|(_, (ifx, _))| takes_redirects(*ifx) == Some(false))
            .map(|(&o, (ifx, _))| (*ifx, o))
            .collect();
        *self.stats.closed_targets.lock().expect("closed targets") = closed.values().copied().collect();
        if !closed.is_empty() {
            let mut e = self.entries.lock().expect("entries");
            let (map, free, _) = &mut *e;
            map.retain(|k, v| {
                if !closed.contains_key(&v.out_ifindex) {
                    return true;
                }
                if let Some((_, fp)) = ports.get(&v.ingress) {
                    let mut fp = fp.lock().expect("fp");
                    self.settle(v, &fp, now_ms);
                    let _ = fp.remove(k);
                }
                free.push(v.slot);
                self.stats.removed.fetch_add(1, Relaxed);
                false
            });
        }
        let ifindex = |p: u32| ports.get(&p).map(|x| x.0);
        // 1. Credit what the kernel forwarded (full rounds only).
        let mut stale: Vec<(FastKey, FlowKey)> = Vec::new();
        let cur_gen = self.gen.lock().expect("gen").kernel;
        if full {
            let mut e = self.entries.lock().expect("entries");
            // No entry encapsulates: changes outside the bridge need not
            // move the kernel's generation (only this thread adds entries).
            if !e.0.values().any(|v| v.credit.is_some()) && e.2.is_empty() {
                self.gen.lock().expect("gen").encap = false;
            }
            let mut gone: Vec<FastKey> = Vec::new();
            for (k, v) in e.0.iter_mut() {
                let Some((_, fp)) = ports.get(&v.ingress) else { continue };
                self.settle(v, &fp.lock().expect("fp"), now_ms);
                // A connection it serves changed (the hook withdrew the
                // kernel's entry then) or expired unseen: the entry goes.
                if v.ct.iter().any(|d| !d.ct.offload_current(&d.conn, d.version, now_ms)) {
                    let _ = fp.lock().expect("fp").remove(k);
                    gone.push(*k);
                } else if v.gen < cur_gen {
                    stale.push((*k, v.orig));
                }
            }
            let (map, free, _) = &mut *e;
            for k in gone {
                if let Some(v) = map.remove(&k) {
                    free.push(v.slot);
                    self.stats.removed.fetch_add(1, Relaxed);
                }
            }
        }
        // 2. Hot flows not in the kernel yet.
        let mut hot: Vec<FlowKey> = Vec::new();
        {
            let mut rate: HashMap<FlowKey, f64> = HashMap::new();
            for (k, pps) in samples {
                *rate.entry(*k).or_default() += *pps;
            }
            for (k, r) in rate {
                if r >= self.threshold_pps() as f64 && ifindex(k.in_port()).is_some() {
                    hot.push(k);
                }
            }
        }
        // 3. Translate outside every offloader lock, then write.
        let mut todo: Vec<(FlowKey, Option<FastKey>)> = stale.into_iter().map(|(fk, k)| (k, Some(fk))).collect();
        {
            // Hot keys already served (sampled just before their entry went
            // in) or refused lately are not translated again.
            let e = self.entries.lock().expect("entries");
            let mut refused = self.refused.lock().expect("refused");
            if full {
                refused.retain(|_, (rg, when)| *rg == cur_gen && now_ms.saturating_sub(*when) < 1000);
            }
            hot.retain(|k| {
                let served = ifindex(k.in_port()).is_some_and(|ifx| e.0.contains_key(&fast_key(k, ifx)));
                let lately =
                    refused.get(k).is_some_and(|(rg, when)| *rg == cur_gen && now_ms.saturating_sub(*when) < 1000);
                !served && !lately
            });
        }
        todo.extend(hot.into_iter().map(|k| (k, None)));
        for (key, old) in todo {
            // Read before the translation: a change made after it moves
            // the kernel's generation past this.
            let (g, ext) = self.snapshot();
            let fresh = match translate(&key) {
                None => None,
                Some(t) => match entry_encap(&key, &t.mask, &t.actions, &ifindex, encap)
                    .map(|(fk, fa, credit)| (fk, fa, credit, Vec::new(), None))
                    .or_else(|why| {
                        if !t.actions.iter().any(|a| matches!(a, DpAction::Ct(..))) {
                            return Err(why);
                        }
                        entry_ct(&key, &t, translate, &ifindex, encap, now_ms)
                            .map(|(fk, fa, deps, counters, credit)| (fk, fa, credit, deps, Some(counters)))
                    }) {
                    Ok((_, fa, ..)) if closed.contains_key(&fa.out_ifindex) => {
                        self.stats.refused.fetch_add(1, Relaxed);
                        *self.stats.last_refusal.lock().expect("refusal") = format!(
                            "output port {} takes no redirected frames now (a veth: GRO off and no XDP program at its far end)",
                            closed[&fa.out_ifindex]
                        );
                        None
                    }
                    Ok((fk, fa, credit, deps, counters)) => {
                        let mut t = t;
                        if let Some(c) = counters {
                            t.counters = c;
                        }
                        Some(((fk, fa), t, credit, deps))
                    }
                    Err(why) => {
                        self.stats.refused.fetch_add(1, Relaxed);
                        *self.stats.last_refusal.lock().expect("refusal") = why.to_string();
                        // A connection still opening (or not there yet)
                        // may be served at the next look.
                        let passing = ["not established", "opening or closing", "no connection"]
                            .iter()
                            .any(|x| why.to_string().contains(x));
                        if old.is_none() && !passing {
                            self.refused.lock().expect("refused").insert(key, (g, now_ms));
                        }
                        None
                    }
                },
            };
            let mut e = self.entries.lock().expect("entries");
            // Turned off meanwhile: `configure` cleared the entries under
            // this lock after clearing `enabled`, so none may go in now.
            if !self.enabled() {
                return;
            }
            let (map, free, dmap) = &mut *e;
            match fresh {
                Some(((fk, mut fa), t, credit, deps)) => {
                    if credit.is_some() {
                        // Nothing it was resolved from may have changed
                        // since; from here on such changes move the
                        // kernel's generation.
                        let mut gen = self.gen.lock().expect("gen");
                        if gen.kernel != g || gen.external != ext {
                            continue;
                        }
                        gen.encap = true;
                    }
                    if old.is_none() && map.contains_key(&fk) {
                        continue;
                    }
                    let slot = match map.get(&fk) {
                        Some(v) => v.slot,
                        None => match free.pop() {
                            Some(s) => s,
                            None if map.len() + dmap.len() < bpf::fastpath::FLOWS as usize => {
                                (map.len() + dmap.len()) as u32
                            }
                            None => {
                                // Full: evict the coldest entry.
                                let Some((ck, cv)) =
                                    map.iter().min_by_key(|(_, v)| v.recent).map(|(k, v)| (*k, v.slot))
                                else {
                                    continue;
                                };
                                let ing = map.get(&ck).map(|v| v.ingress);
                                map.remove(&ck);
                                if let Some((_, fp)) = ing.and_then(|i| ports.get(&i)) {
                                    let _ = fp.lock().expect("fp").remove(&ck);
                                }
                                self.stats.evicted.fetch_add(1, Relaxed);
                                cv
                            }
                        },
                    };
                    fa.gen = g;
                    fa.slot = slot;
                    let Some((_, fp)) = ports.get(&key.in_port()) else { continue };
                    let mut fp = fp.lock().expect("fp");
                    // An underlay device of another bridge: allowed here.
                    if credit.is_some() && fp.add_output(fa.out_ifindex).is_err() {
                        free.push(slot);
                        continue;
                    }
                    // The tracker stops checking the connections' windows
                    // and reports their changes from here on.
                    for d in &deps {
                        d.ct.add_offload_hook(self.id, self.ct_hook());
                        d.ct.mark_offloaded(&d.conn);
                    }
                    if fp.insert(&fk, &fa).is_err() {
                        free.push(slot);
                        continue;
                    }
                    if !deps.is_empty() {
                        // Lock order: the index before a port's maps (as
                        // the hook takes them).
                        drop(fp);
                        let fpa = Arc::clone(ports.get(&key.in_port()).map(|p| &p.1).expect("port"));
                        let mut idx = self.ct_index.lock().expect("ct index");
                        for d in &deps {
                            idx.entry(conn_addr(&d.conn)).or_default().push((Arc::clone(&fpa), fk));
                        }
                        drop(idx);
                        // A change before the hook was in place (or the
                        // index entry): withdraw at once.
                        if deps.iter().any(|d| !d.ct.offload_current(&d.conn, d.version, now_ms)) {
                            let _ = fpa.lock().expect("fp").remove(&fk);
                        }
                    }
                    if old.is_none() {
                        self.stats.installed.fetch_add(1, Relaxed);
                    }
                    map.insert(
                        fk,
                        Entry {
                            ingress: key.in_port(),
                            out_ifindex: fa.out_ifindex,
                            slot,
                            gen: g,
                            orig: key,
                            matched: flow::Match::new(key, t.mask),
                            actions: t.actions,
                            counters: t.counters,
                            credited: (0, 0),
                            used_ms: 0,
                            recent: 0,
                            credit,
                            ct: deps,
                        },
                    );
                }
                None => {
                    if let Some(fk) = old {
                        if let Some(v) = map.remove(&fk) {
                            if let Some((_, fp)) = ports.get(&v.ingress) {
                                let _ = fp.lock().expect("fp").remove(&fk);
                            }
                            free.push(v.slot);
                            self.stats.removed.fetch_add(1, Relaxed);
                        }
                    }
                }
            }
        }
        if !full {
            return;
        }
        // Index records of entries that are gone or serve other
        // connections now.
        {
            let e = self.entries.lock().expect("entries");
            let mut idx = self.ct_index.lock().expect("ct index");
            idx.retain(|addr, uses| {
                uses.retain(|(_, k)| e.0.get(k).is_some_and(|v| v.ct.iter().any(|d| conn_addr(&d.conn) == *addr)));
                !uses.is_empty()
            });
        }
        self.tick_decap(&ports, foreign_hot, decap, now_ms);
    }

    /// The decapsulating entries' part of [`Offloader::tick`]: credit
    /// them, then re-resolve the stale ones and resolve the flows that
    /// became hot on the tunnel bridges. They live in this bridge's ports'
    /// maps and carry its generation, which every change of the tunnel
    /// bridge moves on while any exists (see [`Offloader::external_change`]).
    fn tick_decap(
        &self,
        ports: &BTreeMap<u32, (u32, Arc<Mutex<bpf::FastPath>>)>,
        foreign_hot: &[ForeignKey],
        decap: DecapFn,
        now_ms: u64,
    ) {
        let cur_gen = self.gen.lock().expect("gen").kernel;
        // The flows to resolve (stale ones, then new hot ones), and each
        // flow's entries now (one per ingress port, usually one).
        let mut todo: Vec<ForeignKey> = Vec::new();
        let mut by_flow: HashMap<ForeignKey, Vec<bpf::DecapKey>> = HashMap::new();
        {
            let mut e = self.entries.lock().expect("entries");
            for (k, d) in e.2.iter_mut() {
                let Some((_, fp)) = ports.get(&d.e.ingress) else { continue };
                self.settle(&mut d.e, &fp.lock().expect("fp"), now_ms);
                let keys = by_flow.entry(d.fkey.clone()).or_default();
                if d.e.gen < cur_gen && keys.is_empty() {
                    todo.push(d.fkey.clone());
                }
                keys.push(*k);
            }
            todo.extend(foreign_hot.iter().filter(|f| !by_flow.contains_key(*f)).cloned());
        }
        for fkey in todo {
            let (g, ext) = self.snapshot();
            let plans = match decap(&fkey) {
                Ok(p) => p,
                Err(why) => {
                    self.stats.refused.fetch_add(1, Relaxed);
                    *self.stats.last_refusal.lock().expect("refusal") = why.to_string();
                    Vec::new()
                }
            };
            let mut e = self.entries.lock().expect("entries");
            if !self.enabled() {
                return;
            }
            let (map, free, dmap) = &mut *e;
            // The flow's entries now: the plans; the others go.
            for k in by_flow.get(&fkey).into_iter().flatten() {
                if plans.iter().any(|p| p.key == *k) {
                    continue;
                }
                let Some(d) = dmap.remove(k) else { continue };
                if let Some((_, fp)) = ports.get(&d.e.ingress) {
                    let _ = fp.lock().expect("fp").remove_decap(k);
                }
                free.push(d.e.slot);
                self.stats.removed.fetch_add(1, Relaxed);
            }
            if plans.is_empty() {
                continue;
            }
            {
                // As for encapsulations: nothing they were resolved from
                // changed since, and from here on such changes move the
                // kernel's generation.
                let mut gen = self.gen.lock().expect("gen");
                if gen.kernel != g || gen.external != ext {
                    continue;
                }
                gen.encap = true;
            }
            for p in plans {
                let Some((_, fp)) = ports.get(&p.ingress) else { continue };
                let old = dmap.get(&p.key).map(|d| d.e.slot);
                let slot = match old.or_else(|| free.pop()) {
                    Some(s) => s,
                    None if map.len() + dmap.len() < bpf::fastpath::FLOWS as usize => (map.len() + dmap.len()) as u32,
                    None => continue,
                };
                let mut fa = p.action;
                fa.gen = g;
                fa.slot = slot;
                let mut fp = fp.lock().expect("fp");
                if fp.add_output(fa.out_ifindex).is_err() || fp.insert_decap(&p.key, &fa).is_err() {
                    if old.is_none() {
                        free.push(slot);
                    }
                    continue;
                }
                if old.is_none() {
                    self.stats.installed.fetch_add(1, Relaxed);
                }
                dmap.insert(
                    p.key,
                    DEntry {
                        e: Entry {
                            ingress: p.ingress,
                            out_ifindex: fa.out_ifindex,
                            slot,
                            gen: g,
                            orig: fkey.key,
                            matched: p.matched,
                            actions: p.actions,
                            counters: p.counters,
                            credited: (0, 0),
                            used_ms: 0,
                            recent: 0,
                            credit: Some(p.credit),
                            ct: Vec::new(),
                        },
                        fkey: fkey.clone(),
                    },
                );
            }
        }
    }

    /// Removes every entry (offload turned off, or at exit).
    pub fn clear(&self) {
        for p in self.ports.lock().expect("ports").values() {
            let mut fp = p.fp.lock().expect("fp");
            let _ = fp.clear();
            let _ = fp.set_generation(0);
        }
        let mut e = self.entries.lock().expect("entries");
        e.0.clear();
        e.1.clear();
        e.2.clear();
    }
}

/// `xvs offload-show` (also `dpif-netdev/offload-show`): what the kernel
/// fast path holds and did, per bridge.
/// Packets the kernel forwarded according to `offload-show`'s text: for
/// one bridge, or (None) for all.
pub fn forwarded_in_show(show: &str, bridge: Option<&str>) -> u64 {
    let mut cur = "";
    let mut n = 0;
    for l in show.lines() {
        if !l.starts_with(' ') {
            cur = l.split(':').next().unwrap_or("");
        } else if let Some(x) = l.trim().strip_prefix("forwarded by the kernel: ") {
            if bridge.is_none_or(|b| b == cur) {
                n += x.split_whitespace().next().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
            }
        }
    }
    n
}

pub fn show_cmd(ctx: &crate::commands::Ctx, _: &[String]) -> anyhow::Result<(String, serde_json::Value)> {
    use std::fmt::Write;
    let mut out = String::new();
    let mut v = Vec::new();
    for b in ctx.bridges {
        let off = b.shared.offload.lock().expect("offload").clone();
        let Some(o) = off.filter(|o| o.enabled()) else {
            writeln!(out, "{}: XDP offload off", b.shared.bridge)?;
            v.push(serde_json::json!({"bridge": b.shared.bridge, "enabled": false}));
            continue;
        };
        let k = o.kernel_stats();
        let s = &o.stats;
        writeln!(out, "{}: XDP offload on (flows above {} pkt/s)", b.shared.bridge, o.threshold_pps())?;
        writeln!(out, "  offloaded flows: {}", o.n_entries())?;
        writeln!(
            out,
            "  installed: {} removed: {} evicted: {}",
            s.installed.load(Relaxed),
            s.removed.load(Relaxed),
            s.evicted.load(Relaxed)
        )?;
        writeln!(
            out,
            "  kernel: hit:{} miss:{} stale:{} unparsed:{} error:{} too-long-to-encapsulate:{} tracker-must-see:{}",
            k.hit, k.miss, k.stale, k.unparsed, k.error, k.too_long, k.ct_slow
        )?;
        writeln!(
            out,
            "  partial TCP/UDP checksums (a local sender's offload): finished in the kernel:{} left to userspace (too long):{}",
            k.csum_finished, k.csum_too_long
        )?;
        let why = s.last_refusal.lock().expect("refusal").clone();
        let last = if why.is_empty() { String::new() } else { format!(" (last: {why})") };
        writeln!(out, "  hot flows left in userspace: {}{last}", s.refused.load(Relaxed))?;
        let closed: Vec<u32> = s.closed_targets.lock().expect("closed targets").iter().copied().collect();
        if !closed.is_empty() {
            let ports = b.ports();
            let names: Vec<String> = closed
                .iter()
                .map(|o| {
                    let name = ports.iter().find(|p| p.ofport == *o).map(|p| p.spec.name.as_str()).unwrap_or("?");
                    format!("{o} ({name})")
                })
                .collect();
            writeln!(
                out,
                "  ports that take no redirected frames now (a veth: turn GRO on at its far end): {}",
                names.join(", ")
            )?;
        }
        writeln!(
            out,
            "  forwarded by the kernel: {} packets, {} bytes",
            s.packets.load(Relaxed),
            s.bytes.load(Relaxed)
        )?;
        v.push(serde_json::json!({
            "bridge": b.shared.bridge, "enabled": true, "flows": o.n_entries(), "threshold_pps": o.threshold_pps(),
            "installed": s.installed.load(Relaxed), "removed": s.removed.load(Relaxed), "evicted": s.evicted.load(Relaxed),
            "kernel": {"hit": k.hit, "miss": k.miss, "stale": k.stale, "unparsed": k.unparsed, "error": k.error, "too_long": k.too_long, "ct_slow": k.ct_slow, "csum_finished": k.csum_finished, "csum_too_long": k.csum_too_long},
            "packets": s.packets.load(Relaxed), "bytes": s.bytes.load(Relaxed),
            "refused": s.refused.load(Relaxed), "last_refusal": *s.last_refusal.lock().expect("refusal"),
            "closed_targets": closed,
        }));
    }
    Ok((out, serde_json::json!({"offload": v})))
}
