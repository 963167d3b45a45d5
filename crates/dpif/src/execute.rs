//! Executing datapath actions on packet bytes.
//!
//! Header rewrites go through the packet's current flow key: the new
//! value of every written field is computed on the key, then written to
//! the bytes at the offsets extraction found, with checksums updated
//! incrementally (RFC 1624). The key is kept in step with the bytes, so a
//! later action sees earlier rewrites.

use crate::actions::{DpAction, SetFields};
use flow::key::{ethertype, ipproto, loc, mac_to_bytes, FlowKey, FRAG_ANY, FRAG_LATER, STAGE_L2, VLAN_PRESENT};
use flow::Layout;
use netdev::Packet;

/// Where executed packets go.
pub trait Sink {
    /// Transmit `pkts` on datapath port `port`. The sink takes the packets
    /// (it must leave `pkts` empty).
    fn output(&mut self, port: u32, pkts: &mut Vec<Packet>);
    /// A packet for the OpenFlow layer (packet-in), already truncated to
    /// the action's `max_len`; `full_len` is its length before (a
    /// packet-in's total_len).
    fn userspace(&mut self, pkt: Packet, full_len: usize, action: &DpAction);
    /// Port `port` fills a checksum left to offload
    /// ([`Packet::csum_partial`]) itself; packets for ports that do not are
    /// completed before [`Sink::output`].
    fn csum_offload(&self, _port: u32) -> bool {
        false
    }
}

/// Per-port output queues of one batch, flushed to the sink at its end.
#[derive(Default)]
pub struct OutQueues {
    queues: Vec<(u32, Vec<Packet>)>,
    /// Connections this poll thread's `ct()`s matched lately. The next
    /// `ct()` of a packet that maps to the same slot (the same packet
    /// after a recirculation, or the next packet of that connection) hands
    /// the slot's connection to the tracker, which uses it instead of a
    /// table lookup only when it is what the lookup would find
    /// (`conntrack::Tracked`).
    pub(crate) ct_hints: CtHints,
}

/// How many connections [`CtHints`] keeps (a power of two).
const CT_HINTS: usize = 256;

/// A direct-mapped cache of matched connections, by zone, protocol,
/// addresses and ports, with both directions of a connection in one slot.
/// A hit saves the tracker's table lookup and the lock of its shard (with
/// a few hundred connections interleaved, the single last-connection hint
/// this replaces missed on almost every packet, and the shard lock's two
/// atomic operations were half of the lookup's time). A wrong or stale
/// slot costs nothing but the lookup: the tracker checks every hint.
#[derive(Default)]
pub(crate) struct CtHints {
    slots: Vec<Option<conntrack::Tracked>>,
    /// Per input port, the tracker and zone of the first `ct()` its
    /// packets met lately, for [`crate::pmd::Pmd::process_batch`] to
    /// prefetch the table's buckets for a batch from that port.
    first: Vec<FirstCt>,
}

/// See [`CtHints::note_first`].
struct FirstCt {
    port: u32,
    ct: std::sync::Arc<conntrack::Conntrack>,
    zone: u16,
    /// Grows by 2 (to 64) when such a `ct()` had to look in the table,
    /// shrinks by 1 when a hint spared it: positive while at least a third
    /// of them look.
    score: u8,
}

impl CtHints {
    /// Records a packet's first `ct()` (tracker `ct`, `zone`) from `port`,
    /// and whether a hint spared it the table lookup (`hit`).
    #[inline]
    fn note_first(&mut self, port: u32, ct: &std::sync::Arc<conntrack::Conntrack>, zone: u16, hit: bool) {
        let e = match self.first.iter_mut().position(|e| e.port == port) {
            Some(i) => &mut self.first[i],
            None => {
                self.first.push(FirstCt { port, ct: ct.clone(), zone, score: 0 });
                self.first.last_mut().expect("just pushed")
            }
        };
        if !std::sync::Arc::ptr_eq(&e.ct, ct) || e.zone != zone {
            (e.ct, e.zone, e.score) = (ct.clone(), zone, 0);
        }
        e.score = if hit { e.score.saturating_sub(1) } else { (e.score + 2).min(64) };
    }

    /// The tracker and zone to prefetch for, for a batch from `port`: the
    /// first `ct()` its packets meet, if those lately went to the table.
    #[inline]
    pub(crate) fn prefetch_for(&self, port: u32) -> Option<(&conntrack::Conntrack, u16)> {
        self.first.iter().find(|e| e.port == port && e.score > 0).map(|e| (&*e.ct, e.zone))
    }

    #[inline]
    fn slot(key: &FlowKey, zone: u16) -> usize {
        let (a, b) = if key.is_ipv6() {
            let (s, d) = (key.ipv6_src(), key.ipv6_dst());
            ((s ^ (s >> 64)) as u64, (d ^ (d >> 64)) as u64)
        } else {
            (key.nw_src() as u64, key.nw_dst() as u64)
        };
        // Symmetric in the two ends: a reply maps where its original did.
        let ends = (a ^ b) ^ ((key.tp_src() ^ key.tp_dst()) as u64) << 32;
        let h = (ends ^ (zone as u64) << 48 ^ (key.nw_proto() as u64) << 40).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        (h >> 56) as usize & (CT_HINTS - 1)
    }

    #[inline]
    fn get(&mut self, i: usize) -> &mut Option<conntrack::Tracked> {
        if self.slots.is_empty() {
            self.slots.resize_with(CT_HINTS, || None);
        }
        &mut self.slots[i]
    }
}

impl OutQueues {
    #[inline]
    pub fn push(&mut self, port: u32, pkt: Packet) {
        if let Some((_, q)) = self.queues.iter_mut().find(|(p, _)| *p == port) {
            q.push(pkt);
        } else {
            self.queues.push((port, vec![pkt]));
        }
    }

    /// Queues all of `pkts` for `port`, in order, leaving it empty: when
    /// the port's queue is empty the two vectors change places, so no
    /// packet is moved.
    pub fn append(&mut self, port: u32, pkts: &mut Vec<Packet>) {
        match self.queues.iter_mut().find(|(p, _)| *p == port) {
            Some((_, q)) if q.is_empty() => std::mem::swap(q, pkts),
            Some((_, q)) => q.append(pkts),
            None => self.queues.push((port, std::mem::take(pkts))),
        }
    }

    pub fn flush(&mut self, sink: &mut dyn Sink) {
        for (port, q) in &mut self.queues {
            if !q.is_empty() {
                // Asked only when a packet owes one (the sink looks the port up).
                if q.iter().any(|p| p.csum_partial.is_some()) && !sink.csum_offload(*port) {
                    q.iter_mut().for_each(|p| {
                        p.complete_checksum();
                    });
                }
                sink.output(*port, q);
                q.clear();
            }
        }
    }
}

/// Outcome of executing one packet's actions.
pub enum Exec {
    Done,
    /// A `Recirc(id)` action: look the (rewritten) packet up again; its
    /// key (updated in place, `recirc_id` set to `id`, which is how the
    /// next pass learns it) is the caller's. The layout is
    /// the packet's as the actions left it (they keep it current, as they
    /// keep the key), so the packet need not be parsed again.
    Recirc(Packet, Layout),
    /// A `ct()` completed a fragmented datagram: its fragments ran the rest
    /// of the actions, and these recirculate, each with its own key and
    /// layout.
    RecircMany(Vec<(Packet, FlowKey, Layout)>),
}

/// Carries the key's tunnel fields with the packet to its output port (a
/// tunnel port encapsulates with them; other ports ignore them).
#[inline]
pub(crate) fn attach_tunnel(pkt: &mut Packet, key: &FlowKey) {
    let t = flow::key::TNL_WORDS.map(|w| key.w[w]);
    // An OR over the words, not `!= [0; N]`: that calls memcmp.
    if pkt.tnl.is_some() || t.iter().fold(0, |a, &w| a | w) != 0 {
        pkt.set_tnl(t);
    }
}

/// Executes `actions` on `pkt` whose extracted key and layout are `key`
/// and `layout`; `key` follows the rewrites. Outputs go to `out`;
/// userspace actions to `sink`.
#[allow(clippy::too_many_arguments)] // reason: the per-packet context, passed down on the hot path
pub fn execute(
    actions: &[DpAction],
    mut pkt: Packet,
    key: &mut FlowKey,
    mut layout: Layout,
    out: &mut OutQueues,
    sink: &mut dyn Sink,
    now_ms: u64,
) -> Exec {
    // A checksum left to offload stays so only through plain outputs:
    // anything else may read or rewrite the segment (NAT, conntrack,
    // tunnels, the controller) or move its offset (VLAN, MPLS).
    if pkt.csum_partial.is_some() && actions.iter().any(|a| !matches!(a, DpAction::Output(_))) {
        pkt.complete_checksum();
    }
    // The last action that consumes the packet gets it by move; earlier
    // consumers get a copy. Actions after the last consumer could only
    // change a packet nobody sees, so execution stops there.
    let last_use = actions
        .iter()
        .rposition(|a| matches!(a, DpAction::Output(_) | DpAction::Recirc(_) | DpAction::Userspace { .. }));
    for (i, a) in actions.iter().enumerate() {
        match a {
            DpAction::Output(port) => {
                attach_tunnel(&mut pkt, key);
                if Some(i) == last_use {
                    out.push(*port, pkt);
                    return Exec::Done;
                }
                out.push(*port, pkt.clone());
            }
            DpAction::SetMasked(set) => set_masked(&mut pkt, key, &layout, set),
            DpAction::PushVlan { tpid, tci } => {
                pkt.insert_bytes(12, 4);
                let d = pkt.data_mut();
                d[12..14].copy_from_slice(&tpid.to_be_bytes());
                d[14..16].copy_from_slice(&(tci & !VLAN_PRESENT).to_be_bytes());
                key.set_vlan_tci2(key.vlan_tci());
                key.set_vlan_tci(tci | VLAN_PRESENT);
                layout = shift(layout, 4);
            }
            DpAction::PopVlan => {
                if key.vlan_tci() & VLAN_PRESENT != 0 && pkt.len() >= 18 {
                    pkt.remove_bytes(12, 4);
                    key.set_vlan_tci(key.vlan_tci2());
                    key.set_vlan_tci2(0);
                    layout = shift(layout, -4);
                }
            }
            DpAction::Userspace { max_len, .. } => {
                let full_len = pkt.len();
                if Some(i) == last_use {
                    pkt.truncate(*max_len as usize);
                    sink.userspace(pkt, full_len, a);
                    return Exec::Done;
                }
                let mut p = pkt.clone();
                p.truncate(*max_len as usize);
                sink.userspace(p, full_len, a);
            }
            DpAction::Recirc(id) => {
                key.set_recirc_id(*id);
                return Exec::Recirc(pkt, layout);
            }
            DpAction::Ct(ct, params) if key.nw_frag() & FRAG_ANY != 0 => {
                let rest = &actions[i + 1..];
                return run_ct_fragment(&ct.0, params, pkt, key, layout, rest, out, sink, now_ms);
            }
            DpAction::Ct(ct, params) => {
                let first = key.ct_state() == 0;
                let hit = run_ct(&ct.0, params, &mut pkt, key, &mut out.ct_hints, now_ms);
                if first {
                    out.ct_hints.note_first(pkt.in_port, &ct.0, params.zone, hit);
                }
            }
            DpAction::CtClear => flow::key::clear_ct(key),
            DpAction::PushMpls { ethertype, lse } => {
                let l3 = layout.l3 as usize;
                if (14..=pkt.len()).contains(&l3) {
                    pkt.insert_bytes(l3, 4);
                    let d = pkt.data_mut();
                    wr16(d, l3 - 2, *ethertype);
                    d[l3..l3 + 4].copy_from_slice(&lse.to_be_bytes());
                    // An MPLS frame: its payload is opaque to the key.
                    key.set_dl_type(*ethertype);
                    for w in &mut key.w[flow::key::STAGE_L3..] {
                        *w = 0;
                    }
                    loc::MPLS_LSE.set(key, *lse as u128);
                    layout = Layout { l3: l3 as u16, l4: 0, payload: 0 };
                }
            }
            DpAction::PopMpls { ethertype } => {
                let l3 = layout.l3 as usize;
                let mpls = matches!(key.dl_type(), ethertype::MPLS | ethertype::MPLS_MCAST);
                if mpls && l3 >= 14 && l3 + 4 <= pkt.len() {
                    pkt.remove_bytes(l3, 4);
                    wr16(pkt.data_mut(), l3 - 2, *ethertype);
                    // Parse what was under the label, keeping the metadata.
                    let meta: [u64; STAGE_L2] = key.w[..STAGE_L2].try_into().expect("metadata words");
                    let (k, l, _) = flow::extract(pkt.data(), pkt.in_port);
                    *key = k;
                    key.w[..STAGE_L2].copy_from_slice(&meta);
                    layout = l;
                }
            }
            DpAction::Meter(m) => match m.0.admit(pkt.len(), now_ms) {
                crate::meter::Verdict::Pass => {}
                crate::meter::Verdict::Drop => return Exec::Done,
                crate::meter::Verdict::Remark(levels) => {
                    if key.is_ip_any() {
                        let dscp = key.nw_tos() >> 2;
                        let new = crate::meter::remark_dscp(dscp, levels);
                        if new != dscp {
                            let (mut v, mut mk) = (FlowKey::ZERO, FlowKey::ZERO);
                            v.set_nw_tos(new << 2);
                            mk.set_nw_tos(0xfc);
                            set_masked(&mut pkt, key, &layout, &SetFields::new(&v, &mk));
                        }
                    }
                }
            },
        }
    }
    Exec::Done
}

/// Runs the tracker on the packet and records its verdict in the key. If
/// the tracker translated the packet (NAT), the key's addresses and ports
/// follow the bytes, so later actions and a recirculated lookup see the
/// translated packet. Returns whether a hint spared the tracker its table
/// lookup.
fn run_ct(
    ct: &conntrack::Conntrack,
    params: &conntrack::CtAction,
    pkt: &mut Packet,
    key: &mut FlowKey,
    hints: &mut CtHints,
    now_ms: u64,
) -> bool {
    let (r, matched) = track(ct, params, pkt.data_mut(), key, hints, now_ms);
    use conntrack::cs::{DNAT, REL, RPL, SNAT};
    if r.state & (SNAT | DNAT) != 0 {
        // The packet now carries its connection's translated tuple: the
        // reply tuple reversed, or for a reply the original reversed. Only
        // a related ICMP error, whose outer header is translated on its
        // own, is read back from its bytes (a third parse per packet).
        let from_conn = matched.filter(|_| r.state & REL == 0).and_then(|i| hints.get(i).as_ref()).map(|h| {
            if r.state & RPL != 0 {
                h.conn.orig.reverse()
            } else {
                h.conn.reply.reverse()
            }
        });
        let reparse = || conntrack::packet::parse(pkt.data(), false).ok().map(|p| p.tuple);
        debug_assert!(from_conn.is_none() || from_conn == reparse(), "translated tuple");
        if let Some(t) = from_conn.or_else(reparse) {
            apply_ct_translation(key, &t);
        }
        // The translated packet's next ct() (after a recirculation, as in
        // `ct(nat)` then `ct(commit,nat)`) looks in the slot of its new
        // tuple: the connection goes there too.
        if let Some(i) = matched {
            let j = CtHints::slot(key, params.zone);
            if j != i {
                let t = hints.get(i).clone();
                *hints.get(j) = t;
            }
        }
    }
    r.hint_matched
}

/// `ct()` on an IP fragment: the reassembler keeps it until its datagram
/// is complete; then the datagram is tracked and every fragment runs the
/// rest of the actions (`rest`) with the datagram's verdict, carrying its
/// NAT translation (see `conntrack::frag`).
#[allow(clippy::too_many_arguments)] // reason: the per-packet execution context
fn run_ct_fragment(
    ct: &conntrack::Conntrack,
    params: &conntrack::CtAction,
    mut pkt: Packet,
    key: &mut FlowKey,
    layout: Layout,
    rest: &[DpAction],
    out: &mut OutQueues,
    sink: &mut dyn Sink,
    now_ms: u64,
) -> Exec {
    use conntrack::frag::Defragged;
    let (whole, frags) = match ct.defrag.handle(pkt.data(), params.zone, now_ms) {
        // Reassembly is off for this IP version: track the fragment as it
        // is (the tracker calls it invalid).
        Defragged::NotFragment => {
            let _ = run_ct(ct, params, &mut pkt, key, &mut out.ct_hints, now_ms);
            return execute(rest, pkt, key, layout, out, sink, now_ms);
        }
        Defragged::Held | Defragged::Dropped(_) => return Exec::Done,
        Defragged::Complete { whole, frags } => (whole, frags),
    };
    let mut whole = whole;
    let (r, _) = track(ct, params, &mut whole, key, &mut out.ct_hints, now_ms);
    let nat = r.state & (conntrack::cs::SNAT | conntrack::cs::DNAT) != 0;
    let mut recirc = Vec::new();
    for mut f in frags {
        if nat {
            conntrack::frag::apply_translation(&whole, &mut f);
        }
        let mut p = Packet::from_slice(&f);
        p.in_port = pkt.in_port;
        // The datagram's metadata (ct verdict included), this fragment's
        // own headers.
        let (fk, flayout, _) = flow::extract(p.data(), p.in_port);
        let mut k = *key;
        k.w[STAGE_L2..].copy_from_slice(&fk.w[STAGE_L2..]);
        match execute(rest, p, &mut k, flayout, out, sink, now_ms) {
            Exec::Done => {}
            Exec::Recirc(p, l) => recirc.push((p, k, l)),
            Exec::RecircMany(v) => recirc.extend(v),
        }
    }
    if recirc.is_empty() {
        Exec::Done
    } else {
        Exec::RecircMany(recirc)
    }
}

/// Runs the tracker on `frame` and records its verdict (state, zone, mark,
/// label, original tuple) in `key`; `hint` is the connection the thread's
/// last `ct()` matched, and becomes this one's.
fn track(
    ct: &conntrack::Conntrack,
    params: &conntrack::CtAction,
    frame: &mut [u8],
    key: &mut FlowKey,
    hints: &mut CtHints,
    now_ms: u64,
) -> (conntrack::CtResult, Option<usize>) {
    // What an earlier ct() in this zone made of the packet (across a
    // recirculation its key keeps it).
    let prev = if key.ct_zone() == params.zone { key.ct_state() } else { 0 };
    let i = CtHints::slot(key, params.zone);
    let hint = hints.get(i);
    let mut r = ct.execute_tracked(frame, params, now_ms, hint.as_ref(), prev);
    // The matched connection moves into its slot, unless it is the one
    // there already (the callers read only the verdict's other fields, and
    // where the connection is).
    let matched = (r.tracked.is_some() || r.hint_matched).then_some(i);
    if r.tracked.is_some() {
        *hint = r.tracked.take();
    }
    apply_ct_verdict(key, &r);
    (r, matched)
}

/// Records a `ct()` verdict in a packet's key: state, zone, mark, label
/// and the connection's original tuple (`ct_nw_src`...; IPv4 only).
pub fn apply_ct_verdict(key: &mut FlowKey, r: &conntrack::CtResult) {
    key.set_ct_state(r.state);
    key.set_ct_zone(r.zone);
    key.set_ct_mark(r.mark);
    key.set_ct_label(r.label);
    let o = r.orig.filter(|o| !o.v6);
    key.set_ct_nw_src(o.map_or(0, |o| o.src as u32));
    key.set_ct_nw_dst(o.map_or(0, |o| o.dst as u32));
    key.set_ct_nw_proto(o.map_or(0, |o| o.proto));
    let ports = o.filter(|o| o.has_ports());
    key.set_ct_tp_src(ports.map_or(0, |o| o.sport));
    key.set_ct_tp_dst(ports.map_or(0, |o| o.dport));
}

/// Records in a packet's key the tuple `ct(nat)` translated it to.
pub fn apply_ct_translation(key: &mut FlowKey, t: &conntrack::Tuple) {
    if t.v6 {
        key.set_ipv6_src(t.src);
        key.set_ipv6_dst(t.dst);
    } else {
        key.set_nw_src(t.src as u32);
        key.set_nw_dst(t.dst as u32);
    }
    if t.has_ports() {
        key.set_tp_src(t.sport);
        key.set_tp_dst(t.dport);
    }
}

fn shift(l: Layout, by: i32) -> Layout {
    let f = |o: u16| if o == 0 { 0 } else { (o as i32 + by).max(0) as u16 };
    Layout { l3: f(l.l3), l4: f(l.l4), payload: f(l.payload) }
}

#[inline]
fn rd16(d: &[u8], o: usize) -> u16 {
    u16::from_be_bytes([d[o], d[o + 1]])
}
#[inline]
fn wr16(d: &mut [u8], o: usize, v: u16) {
    d[o..o + 2].copy_from_slice(&v.to_be_bytes());
}

use wire::checksum::{crc32c, update128 as csum_update128, update16 as csum_update16, update32 as csum_update32};

/// Offset of the L4 checksum, if the packet has an L4 header we can fix.
fn l4_csum_offset(key: &FlowKey, layout: &Layout, len: usize) -> Option<usize> {
    if layout.l4 == 0 || key.nw_frag() & FRAG_LATER != 0 {
        return None;
    }
    let l4 = layout.l4 as usize;
    let (off, need) = match key.nw_proto() {
        ipproto::TCP => (16, 18),
        ipproto::UDP => (6, 8),
        ipproto::ICMPV6 if key.is_ipv6() => (2, 4),
        _ => return None,
    };
    (l4 + need <= len).then_some(l4 + off)
}

/// Updates the L4 checksum for a change in a pseudo-header or L4 field.
fn fix_l4(d: &mut [u8], key: &FlowKey, layout: &Layout, f: impl Fn(u16) -> u16) {
    if let Some(o) = l4_csum_offset(key, layout, d.len()) {
        let c = rd16(d, o);
        if key.nw_proto() == ipproto::UDP && c == 0 && key.is_ip() {
            return; // No UDP checksum over IPv4.
        }
        let mut n = f(c);
        if key.nw_proto() == ipproto::UDP && n == 0 {
            n = 0xffff;
        }
        wr16(d, o, n);
    }
}

/// The key bits a `SetMasked` may change on this packet: metadata other
/// than in_port/recirc_id (key only), the Ethernet addresses, the outer
/// VLAN TCI (not its "present" bit) if the frame is tagged, and the L3/L4
/// fields of headers the packet really has in full. Bits outside it are
/// ignored, so the key never claims a rewrite the bytes did not get.
fn writable(key: &FlowKey, layout: &Layout, d: &[u8]) -> FlowKey {
    let mut w = FlowKey::ZERO;
    for word in &mut w.w[1..flow::key::STAGE_L2] {
        *word = u64::MAX;
    }
    w.set_dl_dst(u64::MAX);
    w.set_dl_src(u64::MAX);
    if key.vlan_tci() & VLAN_PRESENT != 0 && d.len() >= 16 {
        w.set_vlan_tci(!VLAN_PRESENT);
    }
    let (l3, len) = (layout.l3 as usize, d.len());
    if l3 == 0 {
        return w;
    }
    match key.dl_type() {
        ethertype::IPV4 if l3 + 20 <= len => {
            w.set_nw_src(u32::MAX);
            w.set_nw_dst(u32::MAX);
            w.set_nw_tos(u8::MAX);
            w.set_nw_ttl(u8::MAX);
        }
        ethertype::IPV6 if l3 + 40 <= len => {
            w.set_ipv6_src(u128::MAX);
            w.set_ipv6_dst(u128::MAX);
            w.set_ipv6_label(0xf_ffff);
            w.set_nw_tos(u8::MAX);
            w.set_nw_ttl(u8::MAX);
        }
        // Only Ethernet/IPv4 ARP has these fields (extraction leaves
        // other hardware/protocol types at L2).
        ethertype::ARP if l3 + 28 <= len && d[l3..l3 + 6] == [0, 1, 8, 0, 6, 4] => {
            w.set_nw_src(u32::MAX);
            w.set_nw_dst(u32::MAX);
            w.set_arp_sha(u64::MAX >> 16);
            w.set_arp_tha(u64::MAX >> 16);
            // arp_op (its low byte is the key's nw_proto, as OVS keeps it).
            w.set_nw_proto(u8::MAX);
            return w;
        }
        // The top label stack entry (set_field on mpls_label/tc/bos/ttl).
        ethertype::MPLS | ethertype::MPLS_MCAST if l3 + 4 <= len => {
            w.set_mpls_lse(u32::MAX);
            return w;
        }
        _ => return w,
    }
    // Ports, once the whole L4 header was parsed (`payload` set) and this
    // is not a later fragment.
    if layout.l4 != 0
        && layout.payload != 0
        && key.nw_frag() & FRAG_LATER == 0
        && matches!(key.nw_proto(), ipproto::TCP | ipproto::UDP | ipproto::SCTP)
    {
        w.set_tp_src(u16::MAX);
        w.set_tp_dst(u16::MAX);
    }
    // ICMP's type and code (in the ports' places), once its 4-byte header
    // is there.
    let icmp = (key.is_ip() && key.nw_proto() == ipproto::ICMP) || (key.is_ipv6() && key.nw_proto() == ipproto::ICMPV6);
    if icmp && layout.l4 != 0 && key.nw_frag() & FRAG_LATER == 0 && layout.l4 as usize + 4 <= len {
        w.set_tp_src(0xff);
        w.set_tp_dst(0xff);
    }
    // A neighbour solicitation's or advertisement's target, and the
    // link-layer address option it carries (nd_sll in a solicitation,
    // nd_tll in an advertisement); an option that is not there is not
    // added (as in Open vSwitch).
    if let Some(ns) = nd_kind(key) {
        let l4 = layout.l4 as usize;
        if l4 != 0 && l4 + 24 <= len {
            w.set_nd_target(u128::MAX);
            if nd_lla(d, l4, ns).is_some() {
                if ns {
                    w.set_arp_sha(u64::MAX >> 16);
                } else {
                    w.set_arp_tha(u64::MAX >> 16);
                }
            }
        }
    }
    w
}

/// `Some(true)` for a neighbour solicitation, `Some(false)` for an
/// advertisement (ICMPv6 135/136 with code 0, as extraction reads them).
fn nd_kind(key: &FlowKey) -> Option<bool> {
    if !key.is_ipv6() || key.nw_proto() != ipproto::ICMPV6 || key.tp_dst() != 0 {
        return None;
    }
    match key.tp_src() {
        135 => Some(true),
        136 => Some(false),
        _ => None,
    }
}

/// Where the address of an ND message's link-layer option is (source
/// option 1 in a solicitation, target option 2 in an advertisement),
/// walking the options after the 24-byte header at `l4`.
fn nd_lla(d: &[u8], l4: usize, ns: bool) -> Option<usize> {
    let want = if ns { 1 } else { 2 };
    let mut o = l4 + 24;
    while o + 2 <= d.len() {
        let len = d[o + 1] as usize * 8;
        if len == 0 || o + len > d.len() {
            return None;
        }
        if d[o] == want && len == 8 {
            return Some(o + 2);
        }
        o += len;
    }
    None
}

/// Finds a TCP or UDP checksum its sender left to offload (Linux
/// CHECKSUM_PARTIAL: a local stack behind a veth or tap with tx
/// checksumming on, which is the default). XDP and AF_XDP hand such frames
/// over as they are, with only the pseudo-header sum in the field, and
/// whatever receives them from the switch would drop them unless the
/// checksum is completed (in software, [`Packet::complete_checksum`], or by
/// the output port). The field is recognised by that value; completing is
/// harmless when a complete checksum happens to equal it.
#[inline]
pub fn partial_checksum(pkt: &Packet, key: &FlowKey, layout: &Layout) -> Option<netdev::CsumPartial> {
    let (proto, at) = match key.nw_proto() {
        6 => (6u8, 16usize),
        17 => (17u8, 6usize),
        _ => return None,
    };
    let v4 = key.dl_type() == 0x0800;
    if (!v4 && !key.is_ipv6()) || key.nw_frag() != 0 || layout.l4 == 0 {
        return None;
    }
    let d = pkt.data();
    let (l3, l4) = (layout.l3 as usize, layout.l4 as usize);
    let end = ip_end(key, l3, d);
    if end < l4 + at + 2 || end > u16::MAX as usize {
        return None;
    }
    let len = end - l4;
    let field = rd16(d, l4 + at);
    let partial = if v4 {
        wire::checksum::partial_v4(key.nw_src(), key.nw_dst(), proto, len)
    } else {
        wire::checksum::partial_v6(key.ipv6_src(), key.ipv6_dst(), proto, len)
    };
    (field == partial).then_some(netdev::CsumPartial { start: l4 as u16, offset: at as u16, len: len as u16 })
}

/// End of the IP datagram (Ethernet padding excluded), for SCTP's CRC.
fn ip_end(key: &FlowKey, l3: usize, d: &[u8]) -> usize {
    let end = if key.is_ipv6() { l3 + 40 + rd16(d, l3 + 4) as usize } else { l3 + rd16(d, l3 + 2) as usize };
    end.min(d.len())
}

fn set_masked(pkt: &mut Packet, key: &mut FlowKey, layout: &Layout, set: &SetFields) {
    let d = pkt.data_mut();
    let w = writable(key, layout, d);
    let old = *key;
    let mut m = FlowKey::ZERO;
    set.for_each_word(|i, v, mk| {
        let mk = mk & w.w[i];
        m.w[i] = mk;
        key.w[i] = (key.w[i] & !mk) | (v & mk);
    });
    let m = &m;
    // Ethernet.
    if m.dl_dst() != 0 {
        d[0..6].copy_from_slice(&mac_to_bytes(key.dl_dst()));
    }
    if m.dl_src() != 0 {
        d[6..12].copy_from_slice(&mac_to_bytes(key.dl_src()));
    }
    if m.vlan_tci() != 0 {
        wr16(d, 14, key.vlan_tci() & !VLAN_PRESENT);
    }
    let l3 = layout.l3 as usize;
    match key.dl_type() {
        // MPLS carries no checksum: the entry is rewritten as it stands.
        ethertype::MPLS | ethertype::MPLS_MCAST if m.mpls_lse() != 0 => {
            d[l3..l3 + 4].copy_from_slice(&key.mpls_lse().to_be_bytes());
        }
        ethertype::IPV4 if m.w[loc::NW_SRC.word] != 0 || m.w[loc::NW_TOS.word] != 0 => {
            let mut c = rd16(d, l3 + 10);
            if m.nw_tos() != 0 {
                let (o, n) = (rd16(d, l3), (rd16(d, l3) & 0xff00) | key.nw_tos() as u16);
                wr16(d, l3, n);
                c = csum_update16(c, o, n);
            }
            if m.nw_ttl() != 0 {
                let (o, n) = (rd16(d, l3 + 8), ((key.nw_ttl() as u16) << 8) | d[l3 + 9] as u16);
                wr16(d, l3 + 8, n);
                c = csum_update16(c, o, n);
            }
            for (mask, off, oldv, newv) in
                [(m.nw_src(), 12, old.nw_src(), key.nw_src()), (m.nw_dst(), 16, old.nw_dst(), key.nw_dst())]
            {
                if mask != 0 && oldv != newv {
                    d[l3 + off..l3 + off + 4].copy_from_slice(&newv.to_be_bytes());
                    c = csum_update32(c, oldv, newv);
                    fix_l4(d, key, layout, |lc| csum_update32(lc, oldv, newv));
                }
            }
            wr16(d, l3 + 10, c);
        }
        ethertype::IPV6 if (loc::IPV6_SRC.word..=loc::NW_TOS.word).any(|i| m.w[i] != 0) => {
            if m.nw_tos() != 0 || m.ipv6_label() != 0 {
                let w = (6u32 << 28) | ((key.nw_tos() as u32) << 20) | key.ipv6_label();
                d[l3..l3 + 4].copy_from_slice(&w.to_be_bytes());
            }
            if m.nw_ttl() != 0 {
                d[l3 + 7] = key.nw_ttl();
            }
            for (mask, off, oldv, newv) in
                [(m.ipv6_src(), 8, old.ipv6_src(), key.ipv6_src()), (m.ipv6_dst(), 24, old.ipv6_dst(), key.ipv6_dst())]
            {
                if mask != 0 && oldv != newv {
                    d[l3 + off..l3 + off + 16].copy_from_slice(&newv.to_be_bytes());
                    fix_l4(d, key, layout, |lc| csum_update128(lc, oldv, newv));
                }
            }
        }
        ethertype::ARP => {
            if m.arp_sha() != 0 {
                d[l3 + 8..l3 + 14].copy_from_slice(&mac_to_bytes(key.arp_sha()));
            }
            if m.nw_src() != 0 {
                d[l3 + 14..l3 + 18].copy_from_slice(&key.nw_src().to_be_bytes());
            }
            if m.arp_tha() != 0 {
                d[l3 + 18..l3 + 24].copy_from_slice(&mac_to_bytes(key.arp_tha()));
            }
            if m.nw_dst() != 0 {
                d[l3 + 24..l3 + 28].copy_from_slice(&key.nw_dst().to_be_bytes());
            }
            if m.nw_proto() != 0 {
                // An ARP responder's load:2->arp_op turns the request into a reply.
                wr16(d, l3 + 6, key.nw_proto() as u16);
            }
            return;
        }
        _ => {}
    }
    // Transport ports (`writable` vouched for a whole TCP/UDP/SCTP header).
    if m.tp_src() != 0 || m.tp_dst() != 0 {
        let l4 = layout.l4 as usize;
        match key.nw_proto() {
            ipproto::TCP | ipproto::UDP => {
                for (mask, off, oldv, newv) in
                    [(m.tp_src(), 0, old.tp_src(), key.tp_src()), (m.tp_dst(), 2, old.tp_dst(), key.tp_dst())]
                {
                    if mask != 0 && oldv != newv {
                        wr16(d, l4 + off, newv);
                        fix_l4(d, key, layout, |lc| csum_update16(lc, oldv, newv));
                    }
                }
            }
            ipproto::SCTP => {
                // CRC32c has no incremental update: compute it over the
                // SCTP packet (not any Ethernet padding after it) before
                // and after, and carry the difference into the checksum
                // the packet had, so a packet that arrived with a bad
                // checksum keeps it bad (as Open vSwitch does).
                let end = ip_end(key, l3, d).max(l4 + 12);
                let had = u32::from_le_bytes(d[l4 + 8..l4 + 12].try_into().expect("4 bytes"));
                d[l4 + 8..l4 + 12].fill(0);
                let before = crc32c(&d[l4..end]);
                wr16(d, l4, key.tp_src());
                wr16(d, l4 + 2, key.tp_dst());
                let after = crc32c(&d[l4..end]);
                d[l4 + 8..l4 + 12].copy_from_slice(&(had ^ before ^ after).to_le_bytes());
            }
            ipproto::ICMP | ipproto::ICMPV6 => {
                // Type and code: one 16-bit word of the ICMP checksum.
                let (o, n) = (rd16(d, l4), ((key.tp_src() & 0xff) << 8) | (key.tp_dst() & 0xff));
                if o != n {
                    wr16(d, l4, n);
                    let c = rd16(d, l4 + 2);
                    wr16(d, l4 + 2, csum_update16(c, o, n));
                }
            }
            _ => {}
        }
    }
    // Neighbour discovery (`writable` vouched for the header and the option).
    if m.nd_target() != 0 || m.arp_sha() != 0 || m.arp_tha() != 0 {
        let Some(ns) = nd_kind(&old) else { return };
        let l4 = layout.l4 as usize;
        let mut c = rd16(d, l4 + 2);
        let (o, n) = (old.nd_target(), key.nd_target());
        if m.nd_target() != 0 && o != n {
            d[l4 + 8..l4 + 24].copy_from_slice(&n.to_be_bytes());
            c = csum_update128(c, o, n);
        }
        let (mask, mac) = if ns { (m.arp_sha(), key.arp_sha()) } else { (m.arp_tha(), key.arp_tha()) };
        if let (true, Some(at)) = (mask != 0, nd_lla(d, l4, ns)) {
            let mac = mac_to_bytes(mac);
            for i in 0..3 {
                let (o, n) = (rd16(d, at + 2 * i), u16::from_be_bytes([mac[2 * i], mac[2 * i + 1]]));
                if o != n {
                    wr16(d, at + 2 * i, n);
                    c = csum_update16(c, o, n);
                }
            }
        }
        wr16(d, l4 + 2, c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(src: u32, dst: u32, sport: u16, dport: u16) -> FlowKey {
        let mut k = FlowKey::ZERO;
        k.set_dl_type(0x0800);
        k.set_nw_proto(17);
        k.set_nw_src(src);
        k.set_nw_dst(dst);
        k.set_tp_src(sport);
        k.set_tp_dst(dport);
        k
    }

    /// Both directions of a connection share a slot, and connections that
    /// differ only in a port or the zone spread over the cache.
    #[test]
    fn ct_hint_slots_are_symmetric_and_spread() {
        for i in 0..1000u32 {
            let (a, b) = (0x0a00_0001 + i, 0x0a00_0100 + 7 * i);
            let (p, q) = (10_000 + i as u16, 80);
            assert_eq!(CtHints::slot(&key(a, b, p, q), 5), CtHints::slot(&key(b, a, q, p), 5));
        }
        let by_port: std::collections::HashSet<usize> =
            (0..100u16).map(|p| CtHints::slot(&key(0x0a00_0001, 0x0a00_0002, 10_000 + p, 5001), 0)).collect();
        assert!(by_port.len() > 60, "100 source ports over {} slots", by_port.len());
        let by_zone: std::collections::HashSet<usize> =
            (0..100u16).map(|z| CtHints::slot(&key(0x0a00_0001, 0x0a00_0002, 10_000, 5001), z)).collect();
        assert!(by_zone.len() > 60, "100 zones over {} slots", by_zone.len());
    }

    /// The prefetch follows each port's first `ct()`: on while at least a
    /// third of those went to the table, off once hints serve them, and
    /// reset when the port's first `ct()` changes tracker or zone.
    #[test]
    fn prefetch_follows_each_ports_table_lookups() {
        use std::sync::Arc;
        let ct = Arc::new(conntrack::Conntrack::new(conntrack::Config::default()));
        let other = Arc::new(conntrack::Conntrack::new(conntrack::Config::default()));
        let mut h = CtHints::default();
        assert!(h.prefetch_for(1).is_none());
        h.note_first(1, &ct, 5, false);
        let (t, z) = h.prefetch_for(1).expect("a lookup: on");
        assert!(std::ptr::eq(t, &*ct) && z == 5);
        assert!(h.prefetch_for(2).is_none(), "per port");
        // Two hits for every lookup: still on; all hits: off.
        for _ in 0..20 {
            h.note_first(1, &ct, 5, false);
            h.note_first(1, &ct, 5, true);
            h.note_first(1, &ct, 5, true);
        }
        assert!(h.prefetch_for(1).is_some());
        for _ in 0..200 {
            h.note_first(1, &ct, 5, true);
        }
        assert!(h.prefetch_for(1).is_none());
        // A lookup in another zone, then in another tracker: they are what
        // the port's batches prefetch for from then on.
        h.note_first(1, &ct, 6, false);
        assert_eq!(h.prefetch_for(1).map(|(_, z)| z), Some(6));
        h.note_first(1, &other, 6, false);
        assert!(std::ptr::eq(h.prefetch_for(1).expect("on").0, &*other));
        // Another port keeps its own.
        h.note_first(2, &ct, 9, false);
        assert_eq!(h.prefetch_for(2).map(|(_, z)| z), Some(9));
        assert!(std::ptr::eq(h.prefetch_for(1).expect("on").0, &*other));
    }
}
