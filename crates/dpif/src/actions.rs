//! Datapath actions: what the fast path does to a packet.
//!
//! Translation (in `ofproto`) turns an OpenFlow pipeline walk into a list
//! of these; the datapath executes them in order on each packet of a
//! megaflow. Field rewrites are expressed as a masked set over the flow
//! key layout, so one action can rewrite any group of header fields.

use flow::{FlowKey, FlowMask};
use std::fmt;

/// What a `controller(...)` action with more than a length adds to its
/// packet-in: the controller id, the reason it names, its userdata, whether
/// it pauses the pipeline, and the pipeline metadata at the action
/// (registers, `metadata`, tunnel fields: words `0..STAGE_L2` of the
/// translation's key), which only translation knows.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct UserspaceExtra {
    pub controller_id: u16,
    /// OFPR_* as the action names it.
    pub reason: u8,
    pub userdata: Vec<u8>,
    pub pause: bool,
    pub meta: flow::FlowKey,
    /// With `pause`: the rest of the pipeline, for NXT_RESUME.
    pub continuation: Option<Arc<ofp_types::Continuation>>,
}

/// Why a packet is sent to userspace (the OpenFlow layer).
use std::sync::Arc;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UserspaceReason {
    /// An OpenFlow `controller` action.
    Action,
    /// An OpenFlow table miss that sends to the controller.
    NoMatch,
    /// Time to live ran out in dec_ttl.
    InvalidTtl,
}

/// How many key words a rewrite keeps inline; one that touches more (a
/// tunnel's many fields) keeps whole keys behind a box.
pub const SET_INLINE_WORDS: usize = 6;

/// The value and mask of a masked rewrite, kept as the few key words it
/// touches. Written out as two whole keys, every `SetMasked` took 640
/// bytes; with one megaflow per connection (an address swap in front of
/// `ct`) the action lists no longer fit in the caches, and reading them
/// cost more than running them.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum SetFields {
    /// Words `idx[..n]` of key and mask; unused places stay zero.
    Inline {
        n: u8,
        idx: [u8; SET_INLINE_WORDS],
        key: [u64; SET_INLINE_WORDS],
        mask: [u64; SET_INLINE_WORDS],
    },
    Wide(Box<(FlowKey, FlowMask)>),
}

impl SetFields {
    /// The rewrite of the bits of `mask` to `key`'s; `key` may also carry
    /// words outside the mask (the protocol, for printing), which are kept.
    pub fn new(key: &FlowKey, mask: &FlowMask) -> SetFields {
        let used = (0..flow::key::WORDS).filter(|&i| key.w[i] != 0 || mask.w[i] != 0);
        if used.clone().count() > SET_INLINE_WORDS {
            return SetFields::Wide(Box::new((*key, *mask)));
        }
        let (mut n, mut idx, mut k, mut m) =
            (0, [0u8; SET_INLINE_WORDS], [0u64; SET_INLINE_WORDS], [0u64; SET_INLINE_WORDS]);
        for i in used {
            (idx[n], k[n], m[n]) = (i as u8, key.w[i], mask.w[i]);
            n += 1;
        }
        SetFields::Inline { n: n as u8, idx, key: k, mask: m }
    }

    /// Calls `f(word, key, mask)` for each word the rewrite keeps.
    #[inline]
    pub fn for_each_word(&self, mut f: impl FnMut(usize, u64, u64)) {
        match self {
            SetFields::Inline { n, idx, key, mask } => {
                for j in 0..*n as usize {
                    f(idx[j] as usize, key[j], mask[j]);
                }
            }
            SetFields::Wide(b) => {
                for i in 0..flow::key::WORDS {
                    if b.0.w[i] != 0 || b.1.w[i] != 0 {
                        f(i, b.0.w[i], b.1.w[i]);
                    }
                }
            }
        }
    }

    /// The value as a whole key.
    pub fn key(&self) -> FlowKey {
        let mut k = FlowKey::ZERO;
        self.for_each_word(|i, v, _| k.w[i] = v);
        k
    }

    /// The mask as a whole key.
    pub fn mask(&self) -> FlowMask {
        let mut m = FlowKey::ZERO;
        self.for_each_word(|i, _, mk| m.w[i] = mk);
        m
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum DpAction {
    /// Send a copy of the packet, as it is now, to datapath port N.
    Output(u32),
    /// Rewrite header fields: for every bit set in `mask`, the packet's
    /// field takes the bit of `key`. Only fields whose headers the packet
    /// has are touched; checksums are updated.
    SetMasked(SetFields),
    /// Push an 802.1Q (tpid 0x8100) or 802.1ad (0x88a8) tag with this TCI
    /// (the "present" bit 0x1000 is not written to the wire).
    PushVlan { tpid: u16, tci: u16 },
    /// Remove the outermost VLAN tag.
    PopVlan,
    /// Hand the packet to the OpenFlow layer (packet-in), truncated to
    /// `max_len` bytes, with the OpenFlow table/cookie it came from.
    Userspace { reason: UserspaceReason, max_len: u16, table_id: u8, cookie: u64, extra: Option<Arc<UserspaceExtra>> },
    /// Continue in the datapath with a new recirc_id.
    Recirc(u32),
    /// Run the packet through an OpenFlow meter: it may be dropped (the
    /// remaining actions do not run) or have its DSCP remarked.
    Meter(crate::meter::MeterRef),
    /// Connection tracking: look the packet up in (and with `commit`, add
    /// it to) the datapath's tracker, translate it if `nat` says so, and
    /// set `ct_state`, `ct_zone` and `ct_mark` in its key. Like a meter,
    /// the action carries the tracker itself. Its parameters (144 bytes,
    /// with NAT ranges and labels) are boxed so that every action stays
    /// small.
    Ct(crate::CtRef, Box<conntrack::CtAction>),
    /// Forget the packet's tracking state (`ct_clear`).
    CtClear,
    /// Insert an MPLS label stack entry (`lse`: label 20 | tc 3 | bos 1 |
    /// ttl 8) in front of the L3 header; the Ethertype becomes `ethertype`.
    PushMpls { ethertype: u16, lse: u32 },
    /// Remove the outermost label stack entry; the Ethertype becomes
    /// `ethertype`, and what was under the label is parsed again.
    PopMpls { ethertype: u16 },
}

/// Printable field groups for `set(...)`, as OVS names them.
const SET_GROUPS: &[(&str, &[(&str, &str)])] = &[
    ("eth", &[("src", "dl_src"), ("dst", "dl_dst")]),
    ("vlan", &[("tci", "vlan_tci")]),
    ("ipv4", &[("src", "nw_src"), ("dst", "nw_dst"), ("tos", "nw_tos"), ("ttl", "nw_ttl")]),
    (
        "ipv6",
        &[
            ("src", "ipv6_src"),
            ("dst", "ipv6_dst"),
            ("label", "ipv6_label"),
            ("tclass", "nw_tos"),
            ("hlimit", "nw_ttl"),
        ],
    ),
    ("tp", &[("src", "tp_src"), ("dst", "tp_dst")]),
    ("arp", &[("sip", "nw_src"), ("tip", "nw_dst"), ("op", "nw_proto"), ("sha", "arp_sha"), ("tha", "arp_tha")]),
    ("skb_mark", &[("", "pkt_mark")]),
    (
        "tunnel",
        &[
            ("tun_id", "tun_id"),
            ("src", "tun_src"),
            ("dst", "tun_dst"),
            ("ipv6_src", "tun_ipv6_src"),
            ("ipv6_dst", "tun_ipv6_dst"),
            ("tos", "tun_tos"),
            ("ttl", "tun_ttl"),
            ("flags", "tun_flags"),
            ("gbp_id", "tun_gbp_id"),
            ("gbp_flags", "tun_gbp_flags"),
            ("tun_metadata0", "tun_metadata0"),
            ("tun_metadata1", "tun_metadata1"),
        ],
    ),
];

impl fmt::Display for DpAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DpAction::Output(p) => write!(f, "{p}"),
            DpAction::PushVlan { tpid, tci } => {
                if *tpid == 0x8100 {
                    write!(f, "push_vlan(vid={},pcp={})", tci & 0xfff, tci >> 13)
                } else {
                    write!(f, "push_vlan(tpid={tpid:#x},vid={},pcp={})", tci & 0xfff, tci >> 13)
                }
            }
            DpAction::PopVlan => write!(f, "pop_vlan"),
            DpAction::Userspace { reason, max_len, .. } => {
                let r = match reason {
                    UserspaceReason::Action => "action",
                    UserspaceReason::NoMatch => "no_match",
                    UserspaceReason::InvalidTtl => "invalid_ttl",
                };
                write!(f, "userspace(controller(reason={r},max_len={max_len}))")
            }
            DpAction::Recirc(id) => write!(f, "recirc({id:#x})"),
            DpAction::Meter(m) => write!(f, "meter({})", m.0.id),
            DpAction::Ct(_, a) => write!(f, "{}", conntrack::format::action(a)),
            DpAction::CtClear => write!(f, "ct_clear"),
            DpAction::PushMpls { ethertype, lse } => write!(
                f,
                "push_mpls(label={},tc={},ttl={},bos={},eth_type={ethertype:#x})",
                lse >> 12,
                (lse >> 9) & 7,
                lse & 0xff,
                (lse >> 8) & 1
            ),
            DpAction::PopMpls { ethertype } => write!(f, "pop_mpls(eth_type={ethertype:#x})"),
            DpAction::SetMasked(set) => {
                let (key, mask) = (&set.key(), &set.mask());
                let is_v6 = key.is_ipv6();
                let is_arp = key.dl_type() == flow::key::ethertype::ARP;
                let tp = match key.nw_proto() {
                    flow::key::ipproto::TCP => "tcp",
                    flow::key::ipproto::UDP => "udp",
                    flow::key::ipproto::SCTP => "sctp",
                    _ => "tp",
                };
                let mut groups = Vec::new();
                for (g, members) in SET_GROUPS {
                    if (*g == "ipv4" && (is_v6 || is_arp)) || (*g == "ipv6" && !is_v6) || (*g == "arp" && !is_arp) {
                        continue;
                    }
                    let mut parts = Vec::new();
                    for (label, field) in members.iter() {
                        let fd = flow::fields::by_name(field).expect("field table has it");
                        let m = fd.get(mask);
                        if m == 0 {
                            continue;
                        }
                        let v = fd.get(key);
                        let s = flow::matching::format_value(fd, v, m);
                        parts.push(if label.is_empty() { s } else { format!("{label}={s}") });
                    }
                    if !parts.is_empty() {
                        let name = if *g == "tp" { tp } else { g };
                        groups.push(format!("set({name}({}))", parts.join(",")));
                    }
                }
                write!(f, "{}", groups.join(","))
            }
        }
    }
}

/// Formats an action list as the datapath prints it (`drop` when empty).
pub fn format_actions(actions: &[DpAction]) -> String {
    if actions.is_empty() {
        "drop".into()
    } else {
        actions.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(",")
    }
}

/// The answer to a cache miss: what to do with every packet whose key
/// agrees with the missed one on the bits of `mask`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Translation {
    pub actions: Vec<DpAction>,
    /// Every key bit translation consulted (the megaflow mask).
    pub mask: FlowMask,
    /// The slow-path objects (OpenFlow rules, group buckets) this
    /// translation went through: every packet the resulting megaflow
    /// forwards is credited to each of them (see [`FlowCounters`]).
    pub counters: CounterSet,
    /// The walk through the tables was cut short by the resubmit/goto
    /// depth limit (a loop): the datapath counts the packets this
    /// translation serves (`drop_resubmit_depth` in pmd-stats).
    pub too_deep: bool,
}

/// Packet and byte counters of a slow-path object (an OpenFlow rule, a
/// group bucket), credited by the datapath. Written by poll threads
/// (Relaxed adds, batched: each megaflow pushes its deltas about once a
/// second and when asked), read by the control plane.
///
/// A megaflow of OVN's pipeline credits some 100 of these per push (its
/// rules, and each table it looked up and matched in), so a push does as
/// few atomic read-modify-writes as it can: `used_ms` is only written when
/// it moves, and packet-only counters (table statistics) skip the rest.
#[derive(Debug, Default)]
pub struct FlowCounters {
    pub packets: std::sync::atomic::AtomicU64,
    pub bytes: std::sync::atomic::AtomicU64,
    /// Last time (ms, the switch's clock) a packet was credited.
    pub used_ms: std::sync::atomic::AtomicU64,
    /// Counts packets only: `bytes` and `used_ms` stay 0.
    packets_only: bool,
}

impl FlowCounters {
    /// Counters that count packets and nothing else (an OpenFlow table's
    /// lookups or matches).
    pub fn packets_only() -> FlowCounters {
        FlowCounters { packets_only: true, ..FlowCounters::default() }
    }

    pub fn credit(&self, packets: u64, bytes: u64, used_ms: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        if packets > 0 {
            self.packets.fetch_add(packets, Relaxed);
            if !self.packets_only {
                self.bytes.fetch_add(bytes, Relaxed);
                self.touch(used_ms);
            }
        }
    }

    /// Moves `used_ms` forward to `now_ms` (never back).
    #[inline]
    pub fn touch(&self, now_ms: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        if self.used_ms.load(Relaxed) < now_ms {
            self.used_ms.fetch_max(now_ms, Relaxed);
        }
    }
}

/// The counters a translation's packets are credited to, shared by every
/// megaflow whose translation went through the same objects (`ofproto`
/// interns them), so that a push can credit each counter once for all of
/// them.
pub type CounterSet = std::sync::Arc<[CounterRef]>;

/// A shared handle on [`FlowCounters`]; equal when it is the same object.
#[derive(Clone, Debug, Default)]
pub struct CounterRef(pub std::sync::Arc<FlowCounters>);

impl PartialEq for CounterRef {
    fn eq(&self, o: &CounterRef) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &o.0)
    }
}
impl Eq for CounterRef {}

/// The slow path as the datapath sees it. `ofproto` implements it; tests
/// may supply simple models.
pub trait Upcall {
    /// Translates the flow `key` (as extracted from a packet) into
    /// datapath actions and the megaflow mask. May have side effects such
    /// as MAC learning.
    fn translate(&self, key: &FlowKey) -> Translation;

    /// Like [`Upcall::translate`], but answers `None` instead of waiting
    /// when the slow path is busy (e.g. a large rule change holds it). The
    /// fast path uses this, so it never stalls its other packets and ports;
    /// the packet that needed it is dropped and counted.
    fn try_translate(&self, key: &FlowKey) -> Option<Translation> {
        Some(self.translate(key))
    }

    /// Re-translates the key that created a cached megaflow, to check it
    /// against changed rules. No packet is behind this call, so an
    /// implementation should have no side effects (no MAC learning: the
    /// key may be old news). `None` when the slow path is busy, like
    /// [`Upcall::try_translate`], which is the default.
    fn revalidate(&self, key: &FlowKey) -> Option<Translation> {
        self.try_translate(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn format_set_tos() {
        let mut key = FlowKey::ZERO;
        let mut mask = FlowKey::ZERO;
        key.set_dl_type(0x0800);
        key.set_nw_tos(0x20);
        mask.set_nw_tos(0xfc);
        let a = [DpAction::SetMasked(SetFields::new(&key, &mask)), DpAction::Output(4)];
        assert_eq!(format_actions(&a), "set(ipv4(tos=0x20/0xfc)),4");
        assert_eq!(format_actions(&[]), "drop");
    }

    /// Megaflows keep their actions inline; a rewrite that grew back to
    /// two whole keys would make every action 700 bytes again.
    #[test]
    fn actions_stay_small() {
        assert!(std::mem::size_of::<DpAction>() <= 112, "{}", std::mem::size_of::<DpAction>());
    }

    #[test]
    fn set_fields_keep_key_and_mask() {
        let (mut key, mut mask) = (FlowKey::ZERO, FlowKey::ZERO);
        key.set_dl_type(0x0800);
        key.set_nw_src(0x0a00_0001);
        mask.set_nw_src(u32::MAX);
        key.set_tp_dst(53);
        mask.set_tp_dst(u16::MAX);
        let s = SetFields::new(&key, &mask);
        assert!(matches!(s, SetFields::Inline { .. }));
        assert_eq!((s.key(), s.mask()), (key, mask));
        // More words than fit inline: kept whole.
        let (mut k2, mut m2) = (FlowKey::ZERO, FlowKey::ZERO);
        for i in 0..=SET_INLINE_WORDS {
            k2.w[i] = i as u64 + 1;
            m2.w[i] = u64::MAX;
        }
        let w = SetFields::new(&k2, &m2);
        assert!(matches!(w, SetFields::Wide(_)));
        assert_eq!((w.key(), w.mask()), (k2, m2));
        assert_eq!(SetFields::new(&k2, &m2), w);
    }
}
