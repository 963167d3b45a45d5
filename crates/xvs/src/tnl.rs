//! Native tunneling, as Open vSwitch's userspace datapath does it: Geneve,
//! VXLAN and GRE headers are pushed and popped by the switch itself, and
//! the encapsulated frames travel through an ordinary bridge (typically
//! `br-phy`, whose local port holds the tunnel endpoint's address), routed
//! with the switch's copy of the kernel's routes and its own ARP/ND cache.
//!
//! The pieces, all shared by the bridges of one process ([`TnlEnv`]):
//! * a **tunnel port** ([`TunnelPort`], `type=geneve|vxlan|gre`) on a
//!   bridge such as `br-int`. What the pipeline outputs to it is
//!   encapsulated with the packet's tunnel fields (`tun_id`, `tun_dst`,
//!   `tun_metadata`, as `set_field` left them; the datapath carries them
//!   with the packet) and the port's options, then handed to the bridge
//!   that owns the route to the remote as if its local port had sent it.
//! * every bridge's **local port** ([`LocalPort`]): frames the pipeline
//!   sends to it that are tunnel frames for one of the tunnel ports are
//!   popped there and received, with their tunnel metadata, on that
//!   tunnel port; ARP and ND seen there fill the neighbour cache; anything
//!   else goes to the kernel as before. It also sends what tunnel ports
//!   hand to its bridge (and the ARP requests for missing neighbours).
//! * a **route thread** keeping the route table current: dumped over
//!   rtnetlink at start and again whenever a route, address or link
//!   notification arrives (at least every 2 s), plus `ovs/route/add`
//!   routes.
//!
//! Differences from OVS, by design: the encapsulation happens in the port
//! rather than in a datapath action, so `dpctl/dump-flows` shows an
//! output to the tunnel port where OVS shows `tnl_push(...)`;
//! `tnl/ports/show` shows what each port pushes.
//!
//! Like OVS, which translates the underlay bridge's part of the path into
//! the tunnel's megaflow, a tunnel port asks the underlay bridge's rules
//! once per set of outer headers ([`Underlay`]): while their answer is a
//! single output port, and reads no field that varies from frame to frame
//! (the outer UDP source port, TOS, TTL), the encapsulated frames go
//! straight to that port from the poll thread that encapsulated them, and
//! are credited to those rules; `tnl/ports/show` says so
//! (`underlay: direct to br-phy port eth1`). Otherwise they take the
//! underlay bridge's datapath frame by frame (its queue, cache and
//! pipeline). The answer is asked again when that bridge's rules, MAC
//! table or ports change. With it, the frames do not appear in the
//! underlay bridge's `dpctl/dump-flows` or poll-thread statistics, as in
//! OVS, where they belong to the tunnel's megaflow. Received tunnel frames
//! get the mirror image ([`DirectRx`]): while the underlay bridge's rules
//! send frames with given outer headers to its local port alone, they are
//! popped as they are received and run through the tunnel port's bridge
//! in the same thread, without a pass through the underlay bridge's
//! datapath and local port. A frame that no longer
//! fits the route device's MTU after encapsulation is sent anyway, as OVS
//! sends it (the underlay port may well carry it: OVS's documentation has
//! users raise the underlay's MTU, not br-phy's); the egress device drops
//! it if it cannot carry it, and `tnl/ports/show` counts such frames
//! (`over_mtu`) so the cause of those drops is visible.

use crate::routes;
use netdev::{Netdev, Packet, PortInfo, PortStats};
use ofproto::tlv::TlvMapping;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, Instant};
use tunnel::config::{FromFlow, Inherit, PortCfg};
use tunnel::encap::{self, flags, EncapSpec, Kind, Listen, TunnelMeta};
use tunnel::route::{fmt_addr, mapped, RouteTable};
use tunnel::NeighCache;

use flow::key::{loc, FlowKey, TNL_WORDS};

/// Frames a tunnel port's receive queue, or a bridge's injection queue,
/// holds before dropping.
const QUEUE: usize = 4096;

/// Drop reasons, as `tnl/ports/show` prints them.
pub const DROPS: &[&str] = &[
    "tnl_truncated",
    "tnl_bad_version",
    "tnl_bad_options",
    "tnl_bad_protocol",
    "tnl_no_vni",
    "tnl_bad_checksum",
    "tnl_fragment",
    "tnl_no_port",
    "tnl_no_remote",
    "tnl_no_route",
    "tnl_no_bridge",
    "tnl_no_neigh",
    "tnl_queue_full",
];

/// A bridge's local port, as tunnels see it.
pub struct BridgeTnl {
    pub name: String,
    inject: Mutex<VecDeque<Packet>>,
    /// The local device's MAC and MTU (read from sysfs by the route thread).
    mac: Mutex<[u8; 6]>,
    mtu: AtomicU64,
}

/// A tunnel port's shared half: its configuration and receive queue.
pub struct TnlPortState {
    pub name: String,
    pub bridge: String,
    pub cfg: PortCfg,
    rx: Mutex<VecDeque<Packet>>,
    rx_dropped: AtomicU64,
    tx_packets: AtomicU64,
    rx_packets: AtomicU64,
    rx_bytes: AtomicU64,
    /// Of `rx_packets`, the frames taken straight off the underlay
    /// bridge's port (see [`DirectRx`]).
    direct_rx: AtomicU64,
    /// The port's OpenFlow number (set once the bridge attached it).
    ofport: std::sync::atomic::AtomicU32,
    /// Its BFD session (Interface `bfd:enable=true`).
    bfd: Option<Mutex<tunnel::bfd::Session>>,
    /// BFD control packets received (consumed before the pipeline).
    bfd_rx: AtomicU64,
    /// Where encapsulated frames go without a pass through the underlay
    /// bridge's datapath ("br-phy port eth1"), if they do (see
    /// [`Underlay`]), and how many did.
    direct_via: Mutex<Option<String>>,
    direct_tx: AtomicU64,
    /// Frames (and their inner bytes) the XDP fast path encapsulated for
    /// this port without userspace (see [`TnlEnv::offload_encap`]).
    xdp_tx: AtomicU64,
    xdp_tx_bytes: AtomicU64,
}

/// What a bridge's local port does with one frame the pipeline sent it.
/// The frame is read, not changed, until it has been moved where the
/// verdict sends it: a packet moved right after it was changed stalled
/// the copy on the narrower stores just made.
enum Verdict {
    /// Not a tunnel frame for this host: on to the local device.
    Pass,
    /// Consumed: a BFD packet, or dropped and counted.
    Taken,
    /// A tunnel frame for this tunnel port (an index into
    /// [`RxView::ports`]), to decapsulate.
    Received(usize, Inner),
}

/// Where a tunnel frame's inner frame is, and its tunnel fields.
struct Inner {
    start: usize,
    /// End of the outer datagram (Ethernet padding after it is cut).
    end: usize,
    tnl: flow::key::TnlWords,
}

impl Inner {
    /// Turns `pkt`, the tunnel frame this was found in, into its inner
    /// frame where it lies (padding after the outer datagram cut, the outer
    /// headers given back as headroom), with its tunnel fields.
    fn pop(self, pkt: &mut Packet) {
        pkt.truncate(self.end);
        pkt.remove_bytes(0, self.start);
        pkt.rx_hash = None;
        pkt.csum_partial = None;
        pkt.set_tnl(self.tnl);
    }
}

/// What decapsulation reads, borrowed once per batch.
struct RxView<'a> {
    ports: &'a [Arc<TnlPortState>],
    listen: &'a Listen,
    tlv: &'a HashMap<String, Vec<TlvMapping>>,
}

/// What the bridges of one process share for native tunneling.
pub struct TnlEnv {
    /// Some tunnel port exists (local ports look at their frames only then).
    active: AtomicBool,
    routes: RwLock<RouteTable>,
    neigh: Mutex<NeighCache>,
    bridges: RwLock<HashMap<String, Arc<BridgeTnl>>>,
    ports: RwLock<Vec<Arc<TnlPortState>>>,
    listen: RwLock<Listen>,
    /// TLV maps (`add-tlv-map`) by bridge name.
    tlv: RwLock<HashMap<String, Vec<TlvMapping>>>,
    drops: Vec<AtomicU64>,
    /// Frames sent larger than the route device's MTU.
    over_mtu: AtomicU64,
    /// Bumped when routes, neighbours or bridges change (ports cache their
    /// resolved next hop until then).
    generation: AtomicU64,
    route_thread: AtomicBool,
    bfd_thread: AtomicBool,
    start: Instant,
    /// The process's bridges, for run-to-completion ([`TnlEnv::peers`]).
    switches: Mutex<Vec<Weak<crate::switch::Shared>>>,
    /// The bridges' kernel fast paths, told of every change an offloaded
    /// encapsulation or decapsulation depends on (see
    /// [`TnlEnv::offload_encap`], [`TnlEnv::offload_decap`]).
    offloaders: Mutex<Vec<Weak<crate::offload::Offloader>>>,
}

impl Default for TnlEnv {
    fn default() -> TnlEnv {
        TnlEnv {
            active: AtomicBool::new(false),
            routes: RwLock::new(RouteTable::new()),
            neigh: Mutex::new(NeighCache::new()),
            bridges: Default::default(),
            ports: Default::default(),
            listen: Default::default(),
            tlv: Default::default(),
            drops: DROPS.iter().map(|_| AtomicU64::new(0)).collect(),
            over_mtu: AtomicU64::new(0),
            generation: AtomicU64::new(1),
            route_thread: AtomicBool::new(false),
            bfd_thread: AtomicBool::new(false),
            start: Instant::now(),
            switches: Mutex::new(Vec::new()),
            offloaders: Mutex::new(Vec::new()),
        }
    }
}

fn drop_index(name: &str) -> usize {
    DROPS.iter().position(|d| *d == name).expect("a known drop reason")
}

impl TnlEnv {
    fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// Whether any tunnel port exists.
    pub fn is_active(&self) -> bool {
        self.active.load(Ordering::Acquire)
    }

    /// A bridge of this process (its poll threads may run the others'
    /// pipelines for tunnel traffic; see `switch::run_peers`).
    pub fn add_switch(&self, sh: &Arc<crate::switch::Shared>) {
        let mut v = self.switches.lock().expect("tnl switches");
        v.retain(|w| w.strong_count() > 0);
        v.push(Arc::downgrade(sh));
    }

    /// The other bridges of this process.
    pub fn peers(&self, me: &crate::switch::Shared) -> Vec<Arc<crate::switch::Shared>> {
        let v = self.switches.lock().expect("tnl switches");
        v.iter().filter_map(Weak::upgrade).filter(|s| !std::ptr::eq(&**s, me)).collect()
    }

    /// The bridge of this process named `name`.
    fn switch_of(&self, name: &str) -> Option<Arc<crate::switch::Shared>> {
        let v = self.switches.lock().expect("tnl switches");
        v.iter().filter_map(Weak::upgrade).find(|s| s.bridge == name)
    }

    /// Records the OpenFlow number a tunnel port got.
    pub fn set_ofport(&self, bridge: &str, name: &str, ofport: u32) {
        for p in self.ports.read().expect("tnl ports").iter() {
            if p.bridge == bridge && p.name == name {
                p.ofport.store(ofport, Ordering::Release);
            }
        }
    }

    /// Moves up to `max` packets waiting for `bridge` in memory (what
    /// tunnel ports handed its local port, and what was decapsulated for
    /// its tunnel ports) into `out`, with their input ports set.
    pub fn drain_bridge(&self, bridge: &str, out: &mut Vec<Packet>, max: usize) {
        let b = self.bridges.read().expect("tnl bridges").get(bridge).cloned();
        if let Some(b) = b {
            let mut q = b.inject.lock().expect("inject queue");
            let n = q.len().min(max.saturating_sub(out.len()));
            // Moved, then given their input port where they lie (see
            // `Verdict`); one at a time: `extend` from a VecDeque's drain
            // is not inlined and cost more than it saved.
            out.reserve(n);
            for p in q.drain(..n) {
                out.push(p);
                out.last_mut().expect("pushed above").in_port = ofproto::actions::ofpp::LOCAL;
            }
        }
        for p in self.ports.read().expect("tnl ports").iter().filter(|p| p.bridge == bridge) {
            let ofport = p.ofport.load(Ordering::Acquire);
            if ofport == 0 {
                continue;
            }
            let mut q = p.rx.lock().expect("tnl rx");
            let n = q.len().min(max.saturating_sub(out.len()));
            out.reserve(n);
            for pkt in q.drain(..n) {
                out.push(pkt);
                out.last_mut().expect("pushed above").in_port = ofport;
            }
        }
    }

    fn count_drop(&self, name: &'static str, n: u64) {
        self.drops[drop_index(name)].fetch_add(n, Ordering::Relaxed);
    }

    pub fn drops(&self) -> Vec<(&'static str, u64)> {
        DROPS.iter().zip(&self.drops).map(|(n, c)| (*n, c.load(Ordering::Relaxed))).collect()
    }

    fn bump(&self) {
        self.generation.fetch_add(1, Ordering::Release);
        self.underlay_changed(None);
    }

    /// Whether port `ofport` of `bridge` is a tunnel port.
    pub fn is_tunnel_port(&self, bridge: &str, ofport: u32) -> bool {
        self.ports
            .read()
            .expect("tnl ports")
            .iter()
            .any(|p| p.bridge == bridge && p.ofport.load(Ordering::Acquire) == ofport)
    }

    /// A bridge's kernel fast path, to be told of changes to routes,
    /// neighbours, tunnel ports and the other bridges.
    pub fn add_offloader(&self, o: &Arc<crate::offload::Offloader>) {
        let mut v = self.offloaders.lock().expect("tnl offloaders");
        v.retain(|w| w.strong_count() > 0);
        v.push(Arc::downgrade(o));
    }

    /// Something an offloaded encapsulation or decapsulation may depend on
    /// changed (a route, a neighbour, a tunnel port, or the rules, MAC table
    /// or ports of bridge `except`, whose own fast path already knows):
    /// every other fast path stops serving such entries before this
    /// returns.
    pub fn underlay_changed(&self, except: Option<&crate::offload::Offloader>) {
        let v: Vec<Arc<crate::offload::Offloader>> =
            self.offloaders.lock().expect("tnl offloaders").iter().filter_map(Weak::upgrade).collect();
        for o in v {
            if !except.is_some_and(|e| std::ptr::eq(e, &*o)) {
                o.external_change();
            }
        }
    }

    fn register_bridge(&self, name: &str) -> Arc<BridgeTnl> {
        let b = Arc::new(BridgeTnl {
            name: name.to_string(),
            inject: Mutex::new(VecDeque::new()),
            mac: Mutex::new(crate::sysfs::read_mac(name).unwrap_or([0; 6])),
            mtu: AtomicU64::new(read_mtu(name)),
        });
        self.bridges.write().expect("tnl bridges").insert(name.to_string(), Arc::clone(&b));
        self.bump();
        b
    }

    fn unregister_bridge(&self, b: &Arc<BridgeTnl>) {
        let mut m = self.bridges.write().expect("tnl bridges");
        if m.get(&b.name).is_some_and(|x| Arc::ptr_eq(x, b)) {
            m.remove(&b.name);
        }
        drop(m);
        self.bump();
    }

    fn register_port(self: &Arc<Self>, p: Arc<TnlPortState>) {
        let bfd = p.bfd.is_some();
        self.ports.write().expect("tnl ports").push(p);
        if bfd && !self.bfd_thread.swap(true, Ordering::AcqRel) {
            let weak = Arc::downgrade(self);
            let _ = std::thread::Builder::new().name("tnl-bfd".into()).spawn(move || bfd_thread(weak));
        }
        self.ports_changed();
        if !self.route_thread.swap(true, Ordering::AcqRel) {
            let weak = Arc::downgrade(self);
            // Fill the table once before the first packet needs it.
            self.refresh();
            let _ = std::thread::Builder::new().name("tnl-routes".into()).spawn(move || route_thread(weak));
        }
    }

    fn unregister_port(&self, p: &Arc<TnlPortState>) {
        self.ports.write().expect("tnl ports").retain(|x| !Arc::ptr_eq(x, p));
        self.ports_changed();
    }

    fn ports_changed(&self) {
        let ports = self.ports.read().expect("tnl ports");
        let mut l = Listen::default();
        for p in ports.iter() {
            match p.cfg.kind {
                Kind::Gre => l.gre = true,
                k => {
                    if !l.udp.iter().any(|(port, _)| *port == p.cfg.dst_port) {
                        l.udp.push((p.cfg.dst_port, k));
                    }
                }
            }
        }
        self.active.store(!ports.is_empty(), Ordering::Release);
        *self.listen.write().expect("tnl listen") = l;
    }

    /// The bridge's TLV map changed (`add-tlv-map`): used for the Geneve
    /// options of its tunnel ports.
    pub fn set_tlv(&self, bridge: &str, maps: &[TlvMapping]) {
        let cur = self.tlv.read().expect("tnl tlv").get(bridge).cloned().unwrap_or_default();
        if cur != maps {
            self.tlv.write().expect("tnl tlv").insert(bridge.to_string(), maps.to_vec());
            // Prebuilt headers carry Geneve options mapped through it.
            self.bump();
        }
    }

    /// Re-reads the routes (kernel and `ovs/route/add`) and the local
    /// devices' MAC and MTU; bumps the generation if anything changed.
    fn refresh(&self) {
        match routes::table() {
            Ok(t) => {
                let changed = *self.routes.read().expect("tnl routes") != t;
                if changed {
                    *self.routes.write().expect("tnl routes") = t;
                    self.bump();
                }
            }
            Err(e) => eprintln!("xvs: tunnels: reading the routing table: {e:#}"),
        }
        let bridges: Vec<Arc<BridgeTnl>> = self.bridges.read().expect("tnl bridges").values().cloned().collect();
        for b in bridges {
            let mac = crate::sysfs::read_mac(&b.name).unwrap_or([0; 6]);
            let mtu = read_mtu(&b.name);
            let mut m = b.mac.lock().expect("bridge mac");
            if *m != mac || b.mtu.load(Ordering::Relaxed) != mtu {
                *m = mac;
                b.mtu.store(mtu, Ordering::Relaxed);
                self.bump();
            }
        }
        self.neigh.lock().expect("neigh").expire(self.now_ms());
    }

    /// Learns from ARP / ND seen at a local port: only from frames that
    /// ask for or answer one of this host's addresses (not every VM's
    /// ARP that a bridge floods to its local port).
    fn learn(&self, frame: &[u8], bridge: &str) {
        let now = self.now_ms();
        if frame.get(12..14) == Some(&[8, 6]) {
            let Some(tpa) = frame.get(38..42) else { return };
            if !self.is_local(mapped(u32::from_be_bytes([tpa[0], tpa[1], tpa[2], tpa[3]]))) {
                return;
            }
        }
        let mut n = self.neigh.lock().expect("neigh");
        if let Some((ip, mac)) = neigh_of(frame) {
            if n.lookup(ip, now).map(|e| e.mac) != Some(mac) {
                n.learn(ip, mac, bridge, now);
                drop(n);
                self.bump();
            }
        }
    }

    /// Looks at the frames the pipeline sends to `bridge`'s local port:
    /// tunnel frames for one of the tunnel ports are decapsulated in place
    /// (the inner frame stays where it was received, an AF_XDP port's UMEM
    /// frame included) and queued on that port, a run of frames for one
    /// port under one lock; malformed ones for this host are dropped and
    /// counted; everything else goes into `keep`, in order.
    fn intercept_batch(&self, pkts: &mut Vec<Packet>, bridge: &str, keep: &mut Vec<Packet>, run: &mut Vec<Packet>) {
        // Read once for the batch, in the order the writers take them
        // (`ports_changed` holds `ports` while it takes `listen`).
        let ports = self.ports.read().expect("tnl ports");
        let listen = self.listen.read().expect("tnl listen");
        let tlv = self.tlv.read().expect("tnl tlv");
        let view = RxView { ports: &ports, listen: &listen, tlv: &tlv };
        let mut run_port: Option<usize> = None;
        for p in pkts.drain(..) {
            match self.intercept(&p, bridge, &view) {
                Verdict::Pass => keep.push(p),
                Verdict::Taken => {}
                Verdict::Received(port, inner) => {
                    if run_port != Some(port) {
                        if let Some(r) = run_port.take() {
                            self.receive(&ports[r], run);
                        }
                        run_port = Some(port);
                    }
                    run.push(p);
                    inner.pop(run.last_mut().expect("pushed above"));
                }
            }
        }
        if let Some(r) = run_port {
            self.receive(&ports[r], run);
        }
    }

    /// Queues decapsulated frames on their tunnel port (drains `pkts`).
    fn receive(&self, port: &TnlPortState, pkts: &mut Vec<Packet>) {
        let mut q = port.rx.lock().expect("tnl rx");
        let room = QUEUE.saturating_sub(q.len()).min(pkts.len());
        let lost = pkts.len() - room;
        let bytes: u64 = pkts[..room].iter().map(|p| p.len() as u64).sum();
        q.extend(pkts.drain(..room));
        drop(q);
        pkts.clear();
        port.rx_packets.fetch_add(room as u64, Ordering::Relaxed);
        port.rx_bytes.fetch_add(bytes, Ordering::Relaxed);
        if lost > 0 {
            port.rx_dropped.fetch_add(lost as u64, Ordering::Relaxed);
            self.count_drop("tnl_queue_full", lost as u64);
        }
    }

    /// One frame of [`TnlEnv::intercept_batch`] (and of
    /// [`TnlEnv::take_direct`]).
    fn intercept(&self, pkt: &Packet, bridge: &str, view: &RxView) -> Verdict {
        let frame = pkt.data();
        let et = frame.get(12..14).map(|b| u16::from_be_bytes([b[0], b[1]]));
        // The IP protocol (IPv6: the first next header; tunnels over IPv6
        // carry no extension headers) and where the destination address is.
        let (proto, dst_at) = match et {
            Some(0x0806) => {
                // ARP: the neighbour cache learns.
                self.learn(frame, bridge);
                return Verdict::Pass;
            }
            Some(0x0800) => (frame.get(23).copied(), 30..34),
            Some(0x86dd) => {
                if frame.get(20) == Some(&58) {
                    // ICMPv6, with neighbour discovery: the cache learns.
                    self.learn(frame, bridge);
                    return Verdict::Pass;
                }
                (frame.get(20).copied(), 38..54)
            }
            _ => return Verdict::Pass,
        };
        let Some(proto) = proto else { return Verdict::Pass };
        if proto != 17 && proto != 47 {
            return Verdict::Pass;
        }
        let d = {
            let listen = view.listen;
            if proto == 47 && !listen.gre {
                return Verdict::Pass;
            }
            match encap::pop(frame, listen) {
                Ok(d) => d,
                Err(encap::DecapError::NotTunnel) => return Verdict::Pass,
                Err(e) => {
                    // Only frames addressed to this host are ours to judge.
                    let dst = frame.get(dst_at.clone()).map(|b| match b.len() {
                        4 => mapped(u32::from_be_bytes([b[0], b[1], b[2], b[3]])),
                        _ => u128::from_be_bytes(b.try_into().expect("16 bytes")),
                    });
                    if dst.is_some_and(|a| self.is_local(a)) {
                        self.count_drop(e.name(), 1);
                        return Verdict::Taken;
                    }
                    return Verdict::Pass;
                }
            }
        };
        let Some(i) = match_port(view.ports, &d) else {
            if self.is_local(endpoint(d.meta.dst, d.meta.v6)) {
                self.count_drop("tnl_no_port", 1);
                return Verdict::Taken;
            }
            return Verdict::Pass;
        };
        let port = &view.ports[i];
        if let Some(s) = &port.bfd {
            let inner = &frame[d.inner..d.end];
            let mut s = s.lock().expect("bfd session");
            if s.is_bfd(inner, d.meta.tun_id) {
                s.receive(inner, self.now_ms());
                port.bfd_rx.fetch_add(1, Ordering::Relaxed);
                return Verdict::Taken;
            }
        }
        let maps = view.tlv.get(&port.bridge).map_or(&[][..], |v| &v[..]);
        Verdict::Received(i, Inner { start: d.inner, end: d.end, tnl: meta_to_words(&d.meta, maps) })
    }

    /// Whether `addr` is an address of this host (a `local` route).
    fn is_local(&self, addr: u128) -> bool {
        self.routes.read().expect("tnl routes").routes().iter().any(|r| r.local && r.prefix == addr)
    }

    /// How to reach `dst`: the bridge, the source address and the next
    /// hop's MAC. On a missing neighbour an ARP request / neighbour
    /// solicitation goes out (at most once a second) and the error names
    /// the drop.
    fn resolve(&self, dst: u128, local: Option<u128>) -> Result<NextHop, &'static str> {
        let route = self.routes.read().expect("tnl routes").lookup(dst).ok_or("tnl_no_route")?;
        let bridge = self.bridges.read().expect("tnl bridges").get(&route.dev).cloned().ok_or("tnl_no_bridge")?;
        let src = local.or(route.src).ok_or("tnl_no_route")?;
        let hop = route.gateway.unwrap_or(dst);
        let now = self.now_ms();
        let mac = *bridge.mac.lock().expect("bridge mac");
        let mut n = self.neigh.lock().expect("neigh");
        match n.lookup(hop, now) {
            Some(e) => Ok(NextHop { bridge, src, eth_src: mac, eth_dst: e.mac }),
            None => {
                if n.should_ask(hop, now) {
                    drop(n);
                    let mut req = Packet::from_slice(&tunnel::neigh::request(hop, mac, src));
                    req.in_port = 0;
                    bridge.push(req, self);
                }
                Err("tnl_no_neigh")
            }
        }
    }
}

/// What the XDP fast path needs to encapsulate the frames of one inner
/// flow that the pipeline sends, unchanged, to a tunnel port: the outer
/// headers with this flow's UDP source port, TOS and TTL; the underlay
/// port they leave by; the longest inner frame the underlay takes; and
/// how to credit what the kernel sent.
pub struct OffloadEncap {
    pub hdr: encap::FixedHeader,
    /// The underlay bridge's port (its kernel device's name).
    pub out_dev: String,
    pub max_inner: usize,
    /// Credits (packets, inner bytes) to the tunnel port's counters and to
    /// the underlay bridge's rules that chose the port.
    pub credit: Arc<dyn Fn(u64, u64, u64) + Send + Sync>,
}

impl TnlEnv {
    /// [`OffloadEncap`] for frames with flow key `k` (as received, no
    /// action before the output) sent to port `ofport` of `bridge`; why
    /// not, if the kernel cannot give the bytes userspace gives. What it
    /// reads (routes, neighbours, the tunnel port, the underlay bridge's
    /// decision) may change: every change calls
    /// [`TnlEnv::underlay_changed`], which makes the kernel stop serving
    /// entries built before it.
    ///
    /// None if the port is not a tunnel port.
    pub fn offload_encap(
        &self,
        bridge: &str,
        ofport: u32,
        k: &FlowKey,
        words: &flow::key::TnlWords,
    ) -> Option<Result<OffloadEncap, String>> {
        let port = self
            .ports
            .read()
            .expect("tnl ports")
            .iter()
            .find(|p| p.bridge == bridge && p.ofport.load(Ordering::Acquire) == ofport)
            .cloned()?;
        Some(self.offload_encap_of(port, bridge, k, words))
    }

    fn offload_encap_of(
        &self,
        port: Arc<TnlPortState>,
        bridge: &str,
        k: &FlowKey,
        words: &flow::key::TnlWords,
    ) -> Result<OffloadEncap, String> {
        let cfg = &port.cfg;
        let name = &port.name;
        if !cfg.df_default {
            return Err(format!("tunnel {name}: df_default=false (each frame needs its own IPv4 identification)"));
        }
        if cfg.bfd.is_some() {
            return Err(format!("tunnel {name}: BFD (its state decides what goes out)"));
        }
        // The tunnel fields the frames carry (what the pipeline set), as
        // `TunnelPort::prebuild` reads them.
        let mut kw = FlowKey::ZERO;
        for (i, w) in TNL_WORDS.iter().enumerate() {
            kw.w[*w] = words[i];
        }
        let dst = match cfg.remote {
            FromFlow::Fixed(r) => r,
            FromFlow::Flow => flow_remote(&kw).ok_or_else(|| format!("tunnel {name}: remote_ip=flow, none set"))?,
        };
        let hop = self.resolve(dst, cfg.local).map_err(|e| format!("tunnel {name}: {e}"))?;
        let tlv_map = self.tlv.read().expect("tnl tlv");
        let tlv = tlv_map.get(bridge).map_or(&[][..], |v| &v[..]);
        let tmpl = template(cfg, &hop, dst, &kw, tlv);
        drop(tlv_map);
        let (sport, tos, ttl) = key_encap_fields(cfg, k);
        let hdr = tmpl.fixed_header(sport, tos, ttl).map_err(|e| format!("tunnel {name}: {e}"))?;
        let n = tmpl.len();
        let max_inner = (hop.bridge.mtu.load(Ordering::Relaxed) as usize + 14).saturating_sub(n);
        // The underlay bridge's decision, as encapsulation in userspace
        // asks it (see `Prebuilt::underlay_port`), for a frame with these
        // headers.
        let mut sample = vec![0u8; n + 64];
        tmpl.write(&mut sample, 0, sport, tos, ttl);
        let mut pre = Prebuilt { words: *words, generation: 0, tmpl, bridge: hop.bridge, underlay: None };
        let (peer, out, counters) = pre
            .underlay_port(self, &port, &sample)
            .ok_or_else(|| format!("tunnel {name}: the underlay bridge does not send its frames to one port"))?;
        if peer.offload.lock().expect("offload").is_none() {
            return Err(format!("tunnel {name}: bridge {} has no kernel fast path", peer.bridge));
        }
        let out_dev = out.spec.name.clone();
        let credit = Arc::new(move |packets: u64, bytes: u64, now_ms: u64| {
            port.xdp_tx.fetch_add(packets, Ordering::Relaxed);
            port.xdp_tx_bytes.fetch_add(bytes, Ordering::Relaxed);
            let outer = bytes + packets * n as u64 - packets * 14;
            for c in counters.iter() {
                c.0.credit(packets, outer, now_ms);
            }
        });
        Ok(OffloadEncap { hdr, out_dev, max_inner, credit })
    }
}

impl TnlEnv {
    /// The entries that let bridge `sh`'s kernel fast path decapsulate the
    /// frames of flow `fk` (hot on a tunnel bridge, entered through one of
    /// its tunnel ports) and send the inner frames where that bridge's
    /// megaflow sends them: one per port of `sh` with the fast path whose
    /// rules send such frames to `sh`'s local port and nowhere else, as
    /// userspace decides it (`decide`). Only Geneve without options and
    /// VXLAN without GBP over IPv4, without an outer UDP checksum, to a
    /// local endpoint on `sh`; the megaflow must read nothing the entry
    /// does not fix, and its actions must be ones the program can do.
    /// Every input is covered by the generation rules of
    /// [`TnlEnv::offload_encap`].
    pub fn offload_decap(
        &self,
        sh: &crate::switch::Shared,
        fk: &crate::offload::ForeignKey,
        takes_redirects: &dyn Fn(u32) -> Option<bool>,
    ) -> Result<Vec<crate::offload::DecapPlan>, crate::offload::NotOffloadable> {
        use crate::offload::{self as off, NotOffloadable as No};
        let no = |s: String| No::Tunnel(s);
        let k = &fk.key;
        let peer = self.switch_of(&fk.bridge).ok_or_else(|| no(format!("no bridge {}", fk.bridge)))?;
        let ports = self.ports.read().expect("tnl ports").clone();
        let port = ports
            .iter()
            .find(|p| p.bridge == fk.bridge && p.ofport.load(Ordering::Acquire) == k.in_port())
            .cloned()
            .ok_or_else(|| no(format!("port {} of {} is not a tunnel port", k.in_port(), fk.bridge)))?;
        let cfg = &port.cfg;
        let name = port.name.clone();
        if !matches!(cfg.kind, Kind::Geneve | Kind::Vxlan) || cfg.bfd.is_some() {
            return Err(no(format!("tunnel {name}: only Geneve and VXLAN without BFD are decapsulated in the kernel")));
        }
        let (src, dst) = (loc::TUN_SRC.get(k) as u32, loc::TUN_DST.get(k) as u32);
        let fl = loc::TUN_FLAGS.get(k) as u16;
        if src == 0
            || fl & flags::CSUM != 0
            || fl & flags::KEY == 0
            || (cfg.kind == Kind::Vxlan && fl & flags::OAM != 0)
        {
            return Err(no(format!("tunnel {name}: IPv6, checksummed or OAM frames stay in userspace")));
        }
        let tlv_map = self.tlv.read().expect("tnl tlv");
        let tlv = tlv_map.get(&fk.bridge).map_or(&[][..], |v| &v[..]);
        // Geneve options as the encoder writes them for the key's
        // `tun_metadata` (OVN's senders put one 8-byte option there); the
        // program takes none or 8 bytes of them, which its key holds byte
        // for byte (a frame whose options differ in any bit misses).
        let geneve_opts = if cfg.kind == Kind::Geneve { words_to_options(k, tlv) } else { Vec::new() };
        if !matches!(geneve_opts.len(), 0 | 8) {
            return Err(no(format!("tunnel {name}: Geneve options other than one of 8 bytes stay in userspace")));
        }
        let meta = TunnelMeta {
            tun_id: loc::TUN_ID.get(k) as u64,
            src: src as u128,
            dst: dst as u128,
            tos: loc::TUN_TOS.get(k) as u8,
            ttl: loc::TUN_TTL.get(k) as u8,
            flags: fl,
            tp_dst: cfg.dst_port,
            geneve_opts,
            ..TunnelMeta::default()
        };
        // The key's tunnel fields are exactly what such a frame gives (its
        // options, no GBP).
        if meta_to_words(&meta, tlv) != TNL_WORDS.map(|w| k.w[w]) {
            return Err(no(format!("tunnel {name}: GBP or these Geneve options stay in userspace")));
        }
        drop(tlv_map);
        let outer = 50 + meta.geneve_opts.len();
        let d = encap::Decap { kind: cfg.kind, meta: meta.clone(), inner: outer, end: outer };
        if match_port(&ports, &d).map(|i| Arc::ptr_eq(&ports[i], &port)) != Some(true) {
            return Err(no(format!("tunnel {name}: such frames would go to another port")));
        }
        if !self.is_local(mapped(dst)) {
            return Err(no(format!("tunnel {name}: not to a local endpoint")));
        }
        let route = self.routes.read().expect("tnl routes").lookup(mapped(src)).ok_or_else(|| no("no route".into()))?;
        if route.dev != sh.bridge {
            return Err(no(format!("tunnel {name}: its frames arrive at {}", route.dev)));
        }
        let bridge =
            self.bridges.read().expect("tnl bridges").get(&route.dev).cloned().ok_or_else(|| no("no bridge".into()))?;
        let dmac = *bridge.mac.lock().expect("bridge mac");
        let hop = route.gateway.unwrap_or(mapped(src));
        let smac = self
            .neigh
            .lock()
            .expect("neigh")
            .lookup(hop, self.now_ms())
            .map(|e| e.mac)
            .ok_or_else(|| no(format!("tunnel {name}: the remote's MAC is not known")))?;
        // Such a frame's outer headers, as the encoder writes them (the
        // same bytes as OVS's: reserved bits 0); the UDP source port is
        // any (neither the key nor the decision reads it). The tunnel
        // header and options go into the key as they are.
        let spec = EncapSpec { kind: cfg.kind, eth_src: smac, eth_dst: dmac, dst_port: cfg.dst_port, csum: false };
        let mut sample = Vec::with_capacity(encap::overhead(&spec, &meta) + 64);
        encap::push(&spec, &TunnelMeta { tp_src: 0xc000, ..meta.clone() }, &[0; 64], 0, &mut sample);
        let mut th = [0u8; 16];
        th[..outer - 42].copy_from_slice(&sample[42..outer]);
        // The tunnel bridge's megaflow for the inner frame.
        let t = {
            let of = peer.ofproto.read().expect("ofproto lock");
            dpif::Upcall::revalidate(&*of, k).ok_or_else(|| no("no translation".into()))?
        };
        off::decap_mask_ok(k, &t.mask)?;
        off::packet_ok(k)?;
        let peer_off = peer.offload.lock().expect("offload").clone().ok_or_else(|| no("no fast path".into()))?;
        let peer_dev = |p: u32| peer_off.port_ifindex(p);
        // The frame is untracked: `ct_clear` does nothing.
        let acts: Vec<dpif::DpAction> = t.actions.iter().filter(|a| **a != dpif::DpAction::CtClear).cloned().collect();
        let action = off::plan(&acts, &peer_dev)?;
        if takes_redirects(action.out_ifindex) == Some(false) {
            return Err(no(format!("port device {} takes no redirected frames now", action.out_ifindex)));
        }
        // The underlay bridge's decision for such a frame, per port.
        let own = sh.offload.lock().expect("offload").clone().ok_or_else(|| no("no fast path".into()))?;
        let mut plans = Vec::new();
        let mut why = None;
        for (ofport, ifindex) in own.port_list() {
            let rules = match decide(sh, &sample, ofport) {
                Some(Some(r)) => r,
                Some(None) => {
                    why = Some(format!(
                        "{}'s rules do not send tunnel {name}'s frames only to its local port",
                        sh.bridge
                    ));
                    continue;
                }
                None => {
                    why = Some(format!("{}'s rules were being changed", sh.bridge));
                    continue;
                }
            };
            let key = bpf::DecapKey {
                inner: off::fast_key(k, ifindex),
                dmac,
                smac,
                saddr: src.to_be_bytes(),
                daddr: dst.to_be_bytes(),
                tos: meta.tos,
                ttl: meta.ttl,
                df: (fl & flags::DF != 0) as u8,
                dport: cfg.dst_port,
                th,
                ..bpf::DecapKey::default()
            };
            let port = Arc::clone(&port);
            let credit: off::Credit = Arc::new(move |packets: u64, bytes: u64, now_ms: u64| {
                port.rx_packets.fetch_add(packets, Ordering::Relaxed);
                port.rx_bytes.fetch_add(bytes, Ordering::Relaxed);
                for c in rules.iter() {
                    c.0.credit(packets, bytes + packets * outer as u64, now_ms);
                }
            });
            plans.push(off::DecapPlan {
                ingress: ofport,
                key,
                action,
                credit,
                matched: flow::Match::new(*k, t.mask),
                actions: t.actions.clone(),
                counters: t.counters.clone(),
            });
        }
        if plans.is_empty() {
            return Err(no(why.unwrap_or_else(|| format!("{} has no port with the fast path", sh.bridge))));
        }
        Ok(plans)
    }
}

/// The first bytes of a frame with flow key `k`, enough for
/// [`netdev::packet::frame_flow_hash`] to hash it as the frame itself.
fn key_frame(k: &FlowKey) -> Vec<u8> {
    let mut f = Vec::with_capacity(38);
    f.extend_from_slice(&flow::key::mac_to_bytes(k.dl_dst()));
    f.extend_from_slice(&flow::key::mac_to_bytes(k.dl_src()));
    let tagged = k.vlan_tci() & flow::key::VLAN_PRESENT != 0;
    f.extend_from_slice(&(if tagged { 0x8100 } else { k.dl_type() }).to_be_bytes());
    if !tagged && k.is_ip() {
        let mut ip = [0u8; 20];
        ip[0] = 0x45;
        ip[9] = k.nw_proto();
        ip[12..16].copy_from_slice(&k.nw_src().to_be_bytes());
        ip[16..20].copy_from_slice(&k.nw_dst().to_be_bytes());
        f.extend_from_slice(&ip);
        f.extend_from_slice(&k.tp_src().to_be_bytes());
        f.extend_from_slice(&k.tp_dst().to_be_bytes());
    }
    f
}

/// Slots of a poll thread's [`DirectRx`] table (distinct sets of outer
/// headers: about one per remote hypervisor).
const DIRECT_SLOTS: usize = 256;

/// A poll thread's memory of its own bridge's decision for the tunnel
/// frames it receives: the mirror, for decapsulation, of what
/// [`Underlay`] does for encapsulation. OVS's datapath makes the underlay
/// bridge's part of a received tunnel frame one megaflow (`tnl_pop`) and
/// recirculates the inner frame in the same thread. Here the bridge's
/// rules are asked once per set of outer headers (MACs, addresses, IP
/// protocol, UDP destination port, input port) whether they send such a
/// frame to the bridge's local port, and nowhere else, without reading a
/// field that varies between those frames (the UDP source port, TOS,
/// TTL). While the answer holds (until the bridge's rules, MAC table or
/// ports change), frames with those headers are popped as they are
/// received and run through their tunnel port's bridge at once: no pass
/// through this bridge's datapath, its output queue and local port, nor
/// the tunnel port's receive queue. They are credited to the rules that
/// made the decision, as a megaflow hit would be, and `tnl/ports/show`
/// counts them. Anything else (other headers, IPv6 or fragmented outer
/// packets, frames the decision does not cover, and every frame of a
/// bridge whose local port holds no address of this host) takes the datapath as
/// before.
pub struct DirectRx {
    gens: [u64; 3],
    /// Whether this bridge has a local port that pops tunnel frames.
    underlay: bool,
    slots: Vec<Option<DirectSlot>>,
    keep: Vec<Packet>,
    run: Vec<Packet>,
    /// The bridges runs were handed to, by name.
    peers: Vec<(String, Weak<crate::switch::Shared>)>,
}

struct DirectSlot {
    key: [u64; 4],
    /// The rules to credit, when the decision is "to the local port".
    local: Option<dpif::CounterSet>,
    packets: u64,
    bytes: u64,
}

impl Default for DirectRx {
    fn default() -> DirectRx {
        DirectRx {
            gens: [u64::MAX; 3],
            underlay: false,
            slots: (0..DIRECT_SLOTS).map(|_| None).collect(),
            keep: Vec::new(),
            run: Vec::new(),
            peers: Vec::new(),
        }
    }
}

/// The outer headers that [`DirectRx`] keys its decisions on, if `f` is
/// an untagged IPv4 frame without options or fragmentation carrying UDP to
/// one of `listen`'s ports (or GRE, when a GRE port listens).
fn direct_key(f: &[u8], in_port: u32, listen: &Listen) -> Option<[u64; 4]> {
    if f.len() < 42 || f[12..15] != [8, 0, 0x45] || f[20] & 0x3f != 0 || f[21] != 0 {
        return None;
    }
    let ok = match f[23] {
        17 => {
            let dport = u16::from_be_bytes([f[36], f[37]]);
            listen.udp.iter().any(|(p, _)| *p == dport)
        }
        47 => listen.gre,
        _ => false,
    };
    if !ok {
        return None;
    }
    let w = |a: usize| u64::from_le_bytes(f[a..a + 8].try_into().expect("8 bytes"));
    // Bytes 0..14 (MACs, EtherType) as two overlapping words, 26..34 (the
    // addresses), then the input port, protocol and bytes 36..38 (UDP
    // destination port; GRE's protocol type).
    let tail = in_port as u64 | (f[23] as u64) << 32 | (f[36] as u64) << 40 | (f[37] as u64) << 48;
    Some([w(0), w(6), w(26), tail])
}

fn direct_slot(k: &[u64; 4]) -> usize {
    let h = (k[0] ^ k[1].rotate_left(17) ^ k[2].rotate_left(31) ^ k[3]).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (h >> 56) as usize % DIRECT_SLOTS
}

impl TnlEnv {
    /// Takes the tunnel frames for this host out of `pkts` (received on
    /// bridge `sh`'s ports, their input ports set) when `sh`'s rules send
    /// them to its local port (see [`DirectRx`]): pops them in place and
    /// runs them through their tunnel ports' bridge, with those ports as
    /// input ports. What is left in `pkts` takes `sh`'s datapath.
    pub fn take_direct(&self, sh: &crate::switch::Shared, pkts: &mut Vec<Packet>, d: &mut DirectRx) {
        let gens = [
            sh.generation.load(Ordering::Acquire),
            sh.ports_gen.load(Ordering::Acquire),
            self.generation.load(Ordering::Acquire),
        ];
        if gens != d.gens {
            d.gens = gens;
            d.slots.iter_mut().for_each(|s| *s = None);
            // Only a bridge whose local port holds an address of this host
            // (br-phy, with the tunnel endpoint) is looked at: br-int's
            // batches, a VM's traffic, skip even the look at their headers.
            d.underlay = sh.mirror.is_none()
                && self.bridges.read().expect("tnl bridges").contains_key(&sh.bridge)
                && self.routes.read().expect("tnl routes").routes().iter().any(|r| r.local && r.dev == sh.bridge);
        }
        if !d.underlay {
            return;
        }
        // Most batches hold no tunnel frame (a VM's traffic on br-int):
        // they are left where they are, without taking the other locks or
        // moving a packet (that was 20 ns a frame in OVN's ACL case).
        let listen = self.listen.read().expect("tnl listen");
        if !pkts.iter().any(|p| direct_key(p.data(), p.in_port, &listen).is_some()) {
            return;
        }
        drop(listen);
        // In the order the writers take them (`ports_changed` holds
        // `ports` while it takes `listen`).
        let ports = self.ports.read().expect("tnl ports");
        let listen = self.listen.read().expect("tnl listen");
        let tlv = self.tlv.read().expect("tnl tlv");
        let view = RxView { ports: &ports, listen: &listen, tlv: &tlv };
        let mut keep = std::mem::take(&mut d.keep);
        let mut run = std::mem::take(&mut d.run);
        // The bridge of this batch's run (frames for another bridge, rare,
        // take the datapath): delivered after the locks above are let go,
        // because its pipeline may send through tunnel ports.
        let mut run_port: Option<Arc<TnlPortState>> = None;
        // Receive counts of the current tunnel port, added once per run of it.
        let mut counting: Option<(usize, u64, u64)> = None;
        let mut used = [0usize; 8];
        let mut n_used = 0;
        for p in pkts.drain(..) {
            let Some(k) = direct_key(p.data(), p.in_port, &listen) else {
                keep.push(p);
                continue;
            };
            let i = direct_slot(&k);
            if d.slots[i].as_ref().is_none_or(|s| s.key != k) {
                match decide(sh, p.data(), p.in_port) {
                    Some(local) => d.slots[i] = Some(DirectSlot { key: k, local, packets: 0, bytes: 0 }),
                    None => {
                        keep.push(p);
                        continue;
                    }
                }
            }
            let slot = d.slots[i].as_mut().expect("filled above");
            if slot.local.is_none() {
                keep.push(p);
                continue;
            }
            let outer_len = p.len() as u64;
            let received = match self.intercept(&p, &sh.bridge, &view) {
                Verdict::Pass => {
                    keep.push(p);
                    continue;
                }
                // A BFD packet, or dropped and counted.
                Verdict::Taken => None,
                Verdict::Received(port_i, inner) => {
                    let port = &ports[port_i];
                    let ofport = port.ofport.load(Ordering::Acquire);
                    // Not attached yet (the local port queues it for later),
                    // or another bridge than this batch's run.
                    if ofport == 0 || run_port.as_ref().is_some_and(|r| r.bridge != port.bridge) {
                        keep.push(p);
                        continue;
                    }
                    Some((port_i, inner, ofport))
                }
            };
            slot.packets += 1;
            slot.bytes += outer_len;
            if !used[..n_used].contains(&i) {
                if n_used == used.len() {
                    // More decisions in one batch than kept here: credit
                    // what is pending now.
                    self.credit(sh, d, &used);
                    n_used = 0;
                }
                used[n_used] = i;
                n_used += 1;
            }
            let Some((port_i, inner, ofport)) = received else { continue };
            if run_port.is_none() {
                run_port = Some(Arc::clone(&ports[port_i]));
            }
            run.push(p);
            let pkt = run.last_mut().expect("pushed above");
            inner.pop(pkt);
            pkt.in_port = ofport;
            let len = pkt.len() as u64;
            match &mut counting {
                Some((c, n, b)) if *c == port_i => {
                    *n += 1;
                    *b += len;
                }
                _ => {
                    if let Some((c, n, b)) = counting.replace((port_i, 1, len)) {
                        count_rx(&ports[c], n, b);
                    }
                }
            }
        }
        if let Some((c, n, b)) = counting {
            count_rx(&ports[c], n, b);
        }
        drop((tlv, listen, ports));
        self.credit(sh, d, &used[..n_used]);
        if let Some(port) = run_port {
            self.deliver_run(&port.bridge, &mut run, d);
        }
        std::mem::swap(pkts, &mut keep);
        d.keep = keep;
        d.run = run;
    }

    /// Credits the frames taken under decisions `slots` to their rules.
    fn credit(&self, sh: &crate::switch::Shared, d: &mut DirectRx, slots: &[usize]) {
        if slots.is_empty() {
            return;
        }
        let now = sh.now_ms();
        for &i in slots {
            if let Some(s) = d.slots[i].as_mut() {
                if let Some(c) = &s.local {
                    for r in c.iter() {
                        r.0.credit(s.packets, s.bytes, now);
                    }
                }
                s.packets = 0;
                s.bytes = 0;
            }
        }
    }

    /// Runs `run` through bridge `bridge`'s pipeline (drains it).
    fn deliver_run(&self, bridge: &str, run: &mut Vec<Packet>, d: &mut DirectRx) {
        let known = d.peers.iter().find(|(n, _)| n == bridge).and_then(|(_, w)| w.upgrade());
        let peer = match known {
            Some(p) => p,
            None => match self.switch_of(bridge) {
                Some(p) => {
                    d.peers.retain(|(n, _)| n != bridge);
                    d.peers.push((bridge.to_string(), Arc::downgrade(&p)));
                    p
                }
                None => {
                    self.count_drop("tnl_no_bridge", run.len() as u64);
                    run.clear();
                    return;
                }
            },
        };
        crate::switch::run_batch(&peer, run);
        run.clear();
    }
}

fn count_rx(port: &TnlPortState, n: u64, bytes: u64) {
    port.rx_packets.fetch_add(n, Ordering::Relaxed);
    port.rx_bytes.fetch_add(bytes, Ordering::Relaxed);
    port.direct_rx.fetch_add(n, Ordering::Relaxed);
}

/// Bridge `sh`'s decision for tunnel frames like `sample` received on
/// `in_port`: `Some(Some(rules))` when its pipeline sends them to its
/// local port and nowhere else without reading a field that varies from
/// frame to frame, `Some(None)` when it does something else, `None` when
/// a writer holds the rules (asked again with a later frame).
fn decide(sh: &crate::switch::Shared, sample: &[u8], in_port: u32) -> Option<Option<dpif::CounterSet>> {
    let of = sh.ofproto.try_read().ok()?;
    let mut key = FlowKey::ZERO;
    let _ = flow::extract::extract_into(sample, in_port, &mut key);
    let t = of.translate_key(&key, 0);
    drop(of);
    Some(match t.actions.as_slice() {
        [dpif::DpAction::Output(o)] if *o == ofproto::actions::ofpp::LOCAL && !t.too_deep && !varies(&t.mask) => {
            Some(t.counters)
        }
        _ => None,
    })
}

fn read_mtu(dev: &str) -> u64 {
    crate::sysfs::read_sys(dev, "mtu").and_then(|s| s.parse().ok()).unwrap_or(1500)
}

impl BridgeTnl {
    fn push(&self, pkt: Packet, env: &TnlEnv) {
        let mut q = self.inject.lock().expect("inject queue");
        if q.len() >= QUEUE {
            env.count_drop("tnl_queue_full", 1);
        } else {
            q.push_back(pkt);
        }
    }

    /// [`BridgeTnl::push`] for several packets under one lock; drains `pkts`.
    fn push_all(&self, pkts: &mut Vec<Packet>, env: &TnlEnv) {
        let mut q = self.inject.lock().expect("inject queue");
        let room = QUEUE.saturating_sub(q.len()).min(pkts.len());
        let lost = pkts.len() - room;
        q.extend(pkts.drain(..room));
        pkts.clear();
        drop(q);
        if lost > 0 {
            env.count_drop("tnl_queue_full", lost as u64);
        }
    }
}

/// The (IP, MAC) an ARP or ND frame tells about its sender.
fn neigh_of(frame: &[u8]) -> Option<(u128, [u8; 6])> {
    tunnel::neigh::learnable(frame)
}

/// The port a decapsulated frame belongs to: same kind and UDP port, the
/// remote (or `flow`), the local address if the port names one, and the
/// key (or `flow`). A port with a fixed remote wins over `remote_ip=flow`.
fn match_port(ports: &[Arc<TnlPortState>], d: &encap::Decap) -> Option<usize> {
    let (src, dst) = (endpoint(d.meta.src, d.meta.v6), endpoint(d.meta.dst, d.meta.v6));
    let has_key = d.kind != Kind::Gre || d.meta.flags & flags::KEY != 0;
    let ok = |p: &Arc<TnlPortState>| {
        let c = &p.cfg;
        c.kind == d.kind
            && (c.kind == Kind::Gre || c.dst_port == d.meta.tp_dst)
            && c.local.is_none_or(|l| l == dst)
            && match c.in_key {
                None => !has_key,
                Some(FromFlow::Flow) => true,
                Some(FromFlow::Fixed(k)) => has_key && k == d.meta.tun_id,
            }
            && match c.remote {
                FromFlow::Fixed(r) => r == src,
                FromFlow::Flow => true,
            }
    };
    ports
        .iter()
        .enumerate()
        .filter(|(_, p)| ok(p))
        .max_by_key(|(_, p)| matches!(p.cfg.remote, FromFlow::Fixed(_)))
        .map(|(i, _)| i)
}

/// A received endpoint address as the route table and the port options
/// hold it: IPv4 mapped into IPv6.
fn endpoint(a: u128, v6: bool) -> u128 {
    if v6 {
        a
    } else {
        mapped(a as u32)
    }
}

/// The remote a `remote_ip=flow` port sends to: `tun_dst`, or else
/// `tun_ipv6_dst`; `None` if the pipeline set neither.
fn flow_remote(k: &FlowKey) -> Option<u128> {
    match (loc::TUN_DST.get(k) as u32, loc::TUN_IPV6_DST.get(k)) {
        (0, 0) => None,
        (0, a) => Some(a),
        (a, _) => Some(mapped(a)),
    }
}

/// The source a `local_ip=flow` port sends from: `tun_src` for an IPv4
/// remote, `tun_ipv6_src` for an IPv6 one; `None` if the flow set none.
fn flow_local(k: &FlowKey, v6: bool) -> Option<u128> {
    match v6 {
        false => Some(loc::TUN_SRC.get(k) as u32).filter(|a| *a != 0).map(mapped),
        true => Some(loc::TUN_IPV6_SRC.get(k)).filter(|a| *a != 0),
    }
}

/// The packet's tunnel words from received metadata; Geneve options that
/// the bridge's TLV map binds become `tun_metadataN`.
fn meta_to_words(m: &TunnelMeta, tlv: &[TlvMapping]) -> flow::key::TnlWords {
    let mut k = FlowKey::ZERO;
    loc::TUN_ID.set(&mut k, m.tun_id as u128);
    if m.v6 {
        loc::TUN_IPV6_SRC.set(&mut k, m.src);
        loc::TUN_IPV6_DST.set(&mut k, m.dst);
    } else {
        loc::TUN_SRC.set(&mut k, m.src & 0xffff_ffff);
        loc::TUN_DST.set(&mut k, m.dst & 0xffff_ffff);
    }
    loc::TUN_FLAGS.set(&mut k, m.flags as u128);
    loc::TUN_TOS.set(&mut k, m.tos as u128);
    loc::TUN_TTL.set(&mut k, m.ttl as u128);
    loc::TUN_GBP_ID.set(&mut k, m.gbp_id as u128);
    loc::TUN_GBP_FLAGS.set(&mut k, m.gbp_flags as u128);
    let o = &m.geneve_opts;
    let mut i = 0;
    while i + 4 <= o.len() {
        let class = u16::from_be_bytes([o[i], o[i + 1]]);
        let ty = o[i + 2];
        let len = (o[i + 3] & 0x1f) as usize * 4;
        if let Some(map) = tlv.iter().find(|t| t.class == class && t.ty == ty) {
            if let (Some(f), Some(data)) = (loc::TUN_METADATA.get(map.index as usize), o.get(i + 4..i + 4 + len)) {
                let mut v = 0u128;
                for b in data.iter().take(4) {
                    v = v << 8 | *b as u128;
                }
                f.set(&mut k, v);
            }
        }
        i += 4 + len;
    }
    TNL_WORDS.map(|w| k.w[w])
}

/// Geneve options for the `tun_metadataN` fields the pipeline set (those
/// the TLV map binds; a zero field is taken as not set).
fn words_to_options(k: &FlowKey, tlv: &[TlvMapping]) -> Vec<u8> {
    let mut o = Vec::new();
    for map in tlv {
        let Some(f) = loc::TUN_METADATA.get(map.index as usize) else { continue };
        let v = f.get(k) as u32;
        if v == 0 || map.len == 0 {
            continue;
        }
        o.extend_from_slice(&map.class.to_be_bytes());
        o.push(map.ty);
        o.push(map.len / 4);
        let mut data = vec![0u8; map.len as usize];
        let n = data.len();
        data[n.saturating_sub(4)..].copy_from_slice(&v.to_be_bytes()[4usize.saturating_sub(n)..]);
        o.extend_from_slice(&data);
    }
    o
}

/// A resolved way out for one remote.
struct NextHop {
    bridge: Arc<BridgeTnl>,
    src: u128,
    eth_src: [u8; 6],
    eth_dst: [u8; 6],
}

/// A tunnel port's outer headers, prebuilt for one set of tunnel fields
/// and valid until the environment (routes, neighbours, bridges, TLV maps)
/// changes.
struct Prebuilt {
    words: flow::key::TnlWords,
    generation: u64,
    tmpl: encap::Template,
    bridge: Arc<BridgeTnl>,
    /// What the underlay bridge's pipeline does with these headers, once
    /// asked (see [`Underlay`]).
    underlay: Option<Underlay>,
}

/// The underlay bridge's decision for one tunnel's frames, as OVS makes it
/// when it translates the underlay bridge's part of the path into the
/// tunnel's megaflow: looked up once, with the outer headers of the first
/// frame, and kept while that bridge's rules, MAC table and ports stay as
/// they were. When the decision is a single output that does not depend
/// on a field that varies from frame to frame (the outer UDP source port,
/// TOS, TTL, flow label), the frames go straight to that port from the
/// poll thread that encapsulated them; otherwise they take the underlay
/// bridge's whole datapath (its queue, cache and pipeline) one by one.
struct Underlay {
    peer: Weak<crate::switch::Shared>,
    of_gen: u64,
    ports_gen: u64,
    /// The port, and the OpenFlow objects (rules, tables) to credit.
    out: Option<(Weak<crate::switch::Port>, dpif::CounterSet)>,
}

/// The tunnel port as the datapath sees it.
pub struct TunnelPort {
    env: Arc<TnlEnv>,
    state: Arc<TnlPortState>,
    stats: PortStats,
    ip_id: u16,
    /// The headers of the last tunnel fields seen: a run of frames to one
    /// remote with one key builds them once.
    pre: Option<Prebuilt>,
    /// Scratch: a run of encapsulated frames for one bridge.
    run: Vec<Packet>,
}

impl TunnelPort {
    pub fn new(name: &str, bridge: &str, cfg: PortCfg, env: &Arc<TnlEnv>) -> TunnelPort {
        let cfg_bfd = cfg.bfd.clone();
        let state = Arc::new(TnlPortState {
            name: name.to_string(),
            bridge: bridge.to_string(),
            cfg,
            rx: Mutex::new(VecDeque::new()),
            rx_dropped: AtomicU64::new(0),
            tx_packets: AtomicU64::new(0),
            rx_packets: AtomicU64::new(0),
            rx_bytes: AtomicU64::new(0),
            direct_rx: AtomicU64::new(0),
            ofport: std::sync::atomic::AtomicU32::new(0),
            bfd: cfg_bfd.map(|c| Mutex::new(tunnel::bfd::Session::new(c, discriminator(name), env.now_ms()))),
            bfd_rx: AtomicU64::new(0),
            direct_via: Mutex::new(None),
            direct_tx: AtomicU64::new(0),
            xdp_tx: AtomicU64::new(0),
            xdp_tx_bytes: AtomicU64::new(0),
        });
        env.register_port(Arc::clone(&state));
        TunnelPort { env: Arc::clone(env), state, stats: PortStats::default(), ip_id: 0, pre: None, run: Vec::new() }
    }

    /// Resolves the remote for tunnel fields `words` and builds the headers.
    fn prebuild(
        &self,
        words: flow::key::TnlWords,
        generation: u64,
        tlv: &[TlvMapping],
    ) -> Result<Prebuilt, &'static str> {
        let cfg = &self.state.cfg;
        let mut k = FlowKey::ZERO;
        for (i, w) in TNL_WORDS.iter().enumerate() {
            k.w[*w] = words[i];
        }
        let dst = match cfg.remote {
            FromFlow::Fixed(r) => r,
            FromFlow::Flow => flow_remote(&k).ok_or("tnl_no_remote")?,
        };
        let hop = self.env.resolve(dst, cfg.local)?;
        Ok(Prebuilt { words, generation, tmpl: template(cfg, &hop, dst, &k, tlv), bridge: hop.bridge, underlay: None })
    }

    /// Makes sure `self.pre` holds the headers for tunnel fields `words`
    /// (sending `run`, the frames encapsulated with the previous ones,
    /// first); the drop reason if the remote cannot be reached.
    fn headers_for(
        &mut self,
        words: flow::key::TnlWords,
        tlv: &[TlvMapping],
        run: &mut Vec<Packet>,
    ) -> Result<(), &'static str> {
        let g = self.env.generation.load(Ordering::Acquire);
        // The words compared by an OR of XORs: `==` on the arrays calls
        // memcmp, which was 1.5% of the core here.
        let same = |p: &Prebuilt| p.words.iter().zip(&words).fold(0, |a, (x, y)| a | (x ^ y)) == 0;
        if !self.pre.as_ref().is_some_and(|p| p.generation == g && same(p)) {
            self.send_run(run);
            self.pre = Some(self.prebuild(words, g, tlv)?);
        }
        Ok(())
    }

    /// Encapsulates one packet in place with `self.pre`'s headers (the
    /// outer headers go into its headroom, so a frame received on an
    /// AF_XDP port stays in its UMEM frame and leaves through a port of
    /// the same UMEM without a copy).
    fn encap(&mut self, pkt: &mut Packet) {
        let pre = self.pre.as_ref().expect("headers_for built them");
        // Back to the pool: the words are in `pre`.
        let _ = pkt.take_tnl();
        let hash = pkt.rx_hash.unwrap_or_else(|| netdev::packet::frame_flow_hash(pkt.data()));
        self.ip_id = self.ip_id.wrapping_add(1);
        // A checksum the inner frame still owes is finished before the outer
        // headers hide it from every later offload.
        if pkt.csum_partial.is_some() {
            pkt.complete_checksum();
        }
        write_frame(&self.env, &self.state.cfg, &pre.tmpl, &pre.bridge, pkt, hash, self.ip_id);
        pkt.rx_hash = None;
        pkt.in_port = 0;
    }
}

impl TunnelPort {
    /// Sends `run`, frames encapsulated with `self.pre`'s headers: straight
    /// to the underlay bridge's output port when its pipeline's decision
    /// for these headers is that port ([`Underlay`]), else into that
    /// bridge's queue, as if its local port had sent them.
    fn send_run(&mut self, run: &mut Vec<Packet>) {
        let Some(first) = run.first() else { return };
        let pre = self.pre.as_mut().expect("a run has its headers");
        let direct = pre.underlay_port(&self.env, &self.state, first.data());
        let Some((peer, port, counters)) = direct else {
            pre.bridge.push_all(run, &self.env);
            return;
        };
        let n = run.len() as u64;
        let bytes: u64 = run.iter().map(|p| p.len() as u64).sum();
        port.foreign_tx.fetch_add(1, Ordering::Relaxed);
        {
            let mut dev = port.dev.lock().expect("port lock");
            let _ = dev.tx_batch(run);
            // A port that defers its transmit kick is kicked now: this
            // thread does not flush the underlay bridge's ports later.
            if port.spec.tx_flush_us > 0 {
                dev.flush_tx(true);
            }
        }
        run.clear();
        let now = peer.now_ms();
        for c in counters.iter() {
            c.0.credit(n, bytes, now);
        }
        self.state.direct_tx.fetch_add(n, Ordering::Relaxed);
    }
}

impl Prebuilt {
    /// The underlay bridge's output port for frames with these headers
    /// (`sample` is one of them), if its pipeline sends them all to one
    /// port; decided again when its rules, MAC table or ports change.
    #[allow(clippy::type_complexity)]
    fn underlay_port(
        &mut self,
        env: &TnlEnv,
        state: &TnlPortState,
        sample: &[u8],
    ) -> Option<(Arc<crate::switch::Shared>, Arc<crate::switch::Port>, dpif::CounterSet)> {
        let peer = match self.underlay.as_ref().and_then(|u| u.peer.upgrade()) {
            Some(p) => p,
            None => env.switch_of(&self.bridge.name)?,
        };
        let of_gen = peer.generation.load(Ordering::Acquire);
        let ports_gen = peer.ports_gen.load(Ordering::Acquire);
        let fresh = self.underlay.as_ref().is_some_and(|u| {
            u.of_gen == of_gen && u.ports_gen == ports_gen && std::ptr::eq(u.peer.as_ptr(), Arc::as_ptr(&peer))
        });
        if !fresh {
            // A writer holds the rules: this run takes the queue, and the
            // decision is made on a later one.
            let of = peer.ofproto.try_read().ok()?;
            let mut key = FlowKey::ZERO;
            let _ = flow::extract::extract_into(sample, ofproto::actions::ofpp::LOCAL, &mut key);
            let t = of.translate_key(&key, 0);
            drop(of);
            let out = match t.actions.as_slice() {
                [dpif::DpAction::Output(o)]
                    if *o != ofproto::actions::ofpp::LOCAL
                        && !t.too_deep
                        && peer.mirror.is_none()
                        && !varies(&t.mask) =>
                {
                    // Not another bridge's way in, which has a path of its own.
                    peer.ports
                        .read()
                        .expect("ports lock")
                        .get(o)
                        .filter(|p| p.spec.kind.leaves_the_switch())
                        .map(|p| (Arc::downgrade(p), t.counters.clone()))
                }
                _ => None,
            };
            let via = match &out {
                Some((p, _)) => p.upgrade().map(|p| format!("{} port {}", peer.bridge, p.spec.name)),
                None => None,
            };
            *state.direct_via.lock().expect("direct via") = via;
            self.underlay = Some(Underlay { peer: Arc::downgrade(&peer), of_gen, ports_gen, out });
        }
        let (port, counters) = self.underlay.as_ref()?.out.as_ref()?;
        Some((peer, port.upgrade()?, counters.clone()))
    }
}

/// Whether megaflow mask `m` reads a field that frames with one set of
/// prebuilt outer headers do not share: the UDP source port (a hash of
/// the inner flow), TOS and TTL (inherited from the inner packet), the
/// IPv6 flow label.
fn varies(m: &FlowKey) -> bool {
    [loc::TP_SRC, loc::NW_TOS, loc::NW_TTL, loc::IPV6_LABEL].iter().any(|f| f.get(m) != 0)
}

/// The outer headers for port configuration `cfg` towards `dst` via `hop`,
/// with the tunnel fields of `k` (TOS, TTL and the UDP source port are
/// per frame: see [`write_frame`]).
fn template(cfg: &PortCfg, hop: &NextHop, dst: u128, k: &FlowKey, tlv: &[TlvMapping]) -> encap::Template {
    let v6 = tunnel::route::unmapped(dst).is_none();
    let src = if cfg.local_flow { flow_local(k, v6).unwrap_or(hop.src) } else { hop.src };
    let (tun_id, keyed) = match cfg.out_key {
        Some(FromFlow::Fixed(n)) => (n, true),
        Some(FromFlow::Flow) => (loc::TUN_ID.get(k) as u64, true),
        None => (0, false),
    };
    let mut fl = 0;
    if cfg.df_default {
        fl |= flags::DF;
    }
    if cfg.csum {
        fl |= flags::CSUM;
    }
    if keyed {
        fl |= flags::KEY;
    }
    let meta = TunnelMeta {
        tun_id,
        src,
        dst: if v6 { dst } else { dst & 0xffff_ffff },
        v6,
        flags: fl,
        tp_dst: cfg.dst_port,
        gbp_id: if cfg.gbp { loc::TUN_GBP_ID.get(k) as u16 } else { 0 },
        gbp_flags: if cfg.gbp { loc::TUN_GBP_FLAGS.get(k) as u8 } else { 0 },
        geneve_opts: if cfg.kind == Kind::Geneve { words_to_options(k, tlv) } else { Vec::new() },
        ..TunnelMeta::default()
    };
    let spec = EncapSpec {
        kind: cfg.kind,
        eth_src: hop.eth_src,
        eth_dst: hop.eth_dst,
        dst_port: cfg.dst_port,
        csum: cfg.csum,
    };
    encap::Template::new(spec, meta)
}

/// The outer TOS and TTL for inner frame `inner`: fixed, or inherited
/// from its IP header (TOS 0 and TTL 64 when it has none).
pub fn inner_tos_ttl(cfg: &PortCfg, inner: &[u8]) -> (u8, u8) {
    let inner_ip = if inner.len() >= 34 && inner[12..14] == [8, 0] {
        Some((inner[15], inner[22]))
    } else if inner.len() >= 54 && inner[12..14] == [0x86, 0xdd] {
        Some(((u16::from_be_bytes([inner[14], inner[15]]) >> 4) as u8, inner[21]))
    } else {
        None
    };
    inherit(cfg, inner_ip)
}

fn inherit(cfg: &PortCfg, inner_ip: Option<(u8, u8)>) -> (u8, u8) {
    let tos = match cfg.tos {
        Inherit::Fixed(t) => t,
        Inherit::Inherit => inner_ip.map_or(0, |(t, _)| t),
    };
    let ttl = match cfg.ttl {
        Inherit::Fixed(t) => t,
        Inherit::Inherit => inner_ip.map_or(64, |(_, t)| t),
    };
    (tos, ttl)
}

/// The outer UDP source port, TOS and TTL userspace gives a frame with
/// flow key `k` that reaches the tunnel port unchanged, from the key alone
/// (for the kernel fast path): what [`inner_tos_ttl`] and the flow hash
/// read from the frame, the key holds.
pub fn key_encap_fields(cfg: &PortCfg, k: &FlowKey) -> (u16, u8, u8) {
    let untagged = k.vlan_tci() & flow::key::VLAN_PRESENT == 0;
    let inner_ip = (untagged && (k.is_ip() || k.is_ipv6())).then(|| (k.nw_tos(), k.nw_ttl()));
    let (tos, ttl) = inherit(cfg, inner_ip);
    (encap::udp_src_port(netdev::packet::frame_flow_hash(&key_frame(k))), tos, ttl)
}

/// Puts `tmpl`'s headers in front of `pkt`, in place, with the per-frame
/// fields: TOS and TTL (fixed or inherited from the inner IP header), the
/// outer IPv4 identification, and the UDP source port from `hash`.
fn write_frame(
    env: &TnlEnv,
    cfg: &PortCfg,
    tmpl: &encap::Template,
    bridge: &BridgeTnl,
    pkt: &mut Packet,
    hash: u32,
    ip_id: u16,
) {
    let inner = pkt.data();
    let (tos, ttl) = inner_tos_ttl(cfg, inner);
    let n = tmpl.len();
    if n - 14 + inner.len() > bridge.mtu.load(Ordering::Relaxed) as usize {
        env.over_mtu.fetch_add(1, Ordering::Relaxed);
    }
    pkt.insert_bytes(0, n);
    tmpl.write(pkt.data_mut(), ip_id, encap::udp_src_port(hash), tos, ttl);
}

impl Drop for TunnelPort {
    fn drop(&mut self) {
        self.env.unregister_port(&self.state);
    }
}

impl Netdev for TunnelPort {
    fn name(&self) -> &str {
        &self.state.name
    }

    /// A virtual port: up, no speed (as OVS reports vports); with BFD, live
    /// only while the session is up (so fast-failover groups and the
    /// OpenFlow LIVE bit follow it, as in OVS).
    fn own_link(&self) -> Option<netdev::Link> {
        let bfd_down = self.state.bfd.as_ref().is_some_and(|s| !s.lock().expect("bfd session").forwarding());
        Some(netdev::Link { carrier: true, mac: netdev::synthetic_mac(&self.state.name), speed_mbps: 0, bfd_down })
    }

    fn bfd_status(&self) -> Option<BTreeMap<String, String>> {
        self.state.bfd.as_ref().map(|s| s.lock().expect("bfd session").status())
    }

    fn info(&self) -> PortInfo {
        let c = &self.state.cfg;
        PortInfo {
            kind: c.kind.name().into(),
            n_rxq: 1,
            detail: format!("remote_ip={} {}", c.remote_str(), key_str(c)),
            ..Default::default()
        }
    }

    fn rx_batch(&mut self, _rxq: usize, out: &mut Vec<Packet>, max: usize) -> io::Result<usize> {
        let mut q = self.state.rx.lock().expect("tnl rx");
        let n = q.len().min(max);
        out.extend(q.drain(..n));
        Ok(n)
    }

    fn tx_batch(&mut self, pkts: &mut Vec<Packet>) -> io::Result<()> {
        let env = Arc::clone(&self.env);
        let tlv_map = env.tlv.read().expect("tnl tlv");
        let tlv = tlv_map.get(&self.state.bridge).map_or(&[][..], |v| &v[..]);
        // Frames with one set of outer headers leave together (one lock
        // per run of them, not per frame; see `send_run`).
        let mut run = std::mem::take(&mut self.run);
        for p in pkts.drain(..) {
            let words = p.tnl.as_deref().copied().unwrap_or_default();
            if let Err(why) = self.headers_for(words, tlv, &mut run) {
                self.stats.tx_dropped += 1;
                env.count_drop(why, 1);
                continue;
            }
            self.stats.tx_packets += 1;
            self.stats.tx_bytes += p.len() as u64;
            // Moved into the run before it is changed: changing it first
            // and then moving it stalled the copy on the narrower stores
            // just made (half of this function's time).
            run.push(p);
            let pkt = run.last_mut().expect("pushed above");
            self.encap(pkt);
        }
        drop(tlv_map);
        self.send_run(&mut run);
        self.run = run;
        self.state.tx_packets.store(self.stats.tx_packets, Ordering::Relaxed);
        Ok(())
    }

    fn stats(&self) -> PortStats {
        // Received: what was decapsulated for this port, whichever thread
        // then ran it through the pipeline (this port's poll thread, the
        // underlay bridge's one with run-to-completion, or `DirectRx`).
        let mut s = self.stats;
        s.rx_packets = self.state.rx_packets.load(Ordering::Relaxed);
        s.rx_bytes = self.state.rx_bytes.load(Ordering::Relaxed);
        s.rx_dropped += self.state.rx_dropped.load(Ordering::Relaxed);
        s.tx_packets += self.state.xdp_tx.load(Ordering::Relaxed);
        s.tx_bytes += self.state.xdp_tx_bytes.load(Ordering::Relaxed);
        s
    }
}

fn key_str(c: &PortCfg) -> String {
    let k = |k: Option<FromFlow<u64>>| match k {
        None => "none".to_string(),
        Some(FromFlow::Flow) => "flow".to_string(),
        Some(FromFlow::Fixed(n)) => n.to_string(),
    };
    if c.in_key == c.out_key {
        format!("key={}", k(c.in_key))
    } else {
        format!("in_key={} out_key={}", k(c.in_key), k(c.out_key))
    }
}

/// A bridge's local port with native tunneling in front of it (see the
/// module documentation).
pub struct LocalPort {
    inner: Box<dyn Netdev>,
    env: Arc<TnlEnv>,
    bridge: Arc<BridgeTnl>,
    injected: u64,
    keep: Vec<Packet>,
    /// Scratch: a run of decapsulated frames for one tunnel port.
    run: Vec<Packet>,
}

impl LocalPort {
    pub fn new(inner: Box<dyn Netdev>, bridge: &str, env: &Arc<TnlEnv>) -> LocalPort {
        let b = env.register_bridge(bridge);
        LocalPort { inner, env: Arc::clone(env), bridge: b, injected: 0, keep: Vec::new(), run: Vec::new() }
    }
}

impl Drop for LocalPort {
    fn drop(&mut self) {
        self.env.unregister_bridge(&self.bridge);
    }
}

impl Netdev for LocalPort {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn info(&self) -> PortInfo {
        self.inner.info()
    }
    fn n_rxq(&self) -> usize {
        self.inner.n_rxq()
    }
    fn rx_batch(&mut self, rxq: usize, out: &mut Vec<Packet>, max: usize) -> io::Result<usize> {
        let mut n = 0;
        if rxq == 0 {
            let mut q = self.bridge.inject.lock().expect("inject queue");
            n = q.len().min(max);
            out.extend(q.drain(..n));
            self.injected += n as u64;
        }
        Ok(n + self.inner.rx_batch(rxq, out, max - n)?)
    }
    fn tx_batch(&mut self, pkts: &mut Vec<Packet>) -> io::Result<()> {
        if self.env.active.load(Ordering::Acquire) {
            self.keep.clear();
            self.env.intercept_batch(pkts, &self.bridge.name, &mut self.keep, &mut self.run);
            std::mem::swap(pkts, &mut self.keep);
        }
        self.inner.tx_batch(pkts)
    }
    fn stats(&self) -> PortStats {
        let mut s = self.inner.stats();
        s.rx_packets += self.injected;
        s
    }
    fn rx_fd(&self, rxq: usize) -> Option<i32> {
        self.inner.rx_fd(rxq)
    }
    fn flush_tx(&mut self, force: bool) -> bool {
        self.inner.flush_tx(force)
    }
    fn poll_housekeeping(&mut self) {
        self.inner.poll_housekeeping()
    }
    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        self.inner.as_any_mut()
    }
}

/// Keeps the route table current: re-reads it whenever rtnetlink reports
/// a route, address or link change, and every 2 s regardless.
fn route_thread(env: Weak<TnlEnv>) {
    // RTMGRP_LINK | IPV4_IFADDR | IPV4_ROUTE | IPV6_IFADDR | IPV6_ROUTE.
    let groups = 0x1 | 0x10 | 0x40 | 0x100 | 0x400;
    let mut sock = netdev_linux::rtnl::RouteSocket::open(None, groups).ok();
    let mut last = Instant::now();
    loop {
        let Some(e) = env.upgrade() else { return };
        let mut changed = last.elapsed() >= Duration::from_secs(2);
        if let Some(s) = sock.as_mut() {
            crate::ports::poll_readable(&[s.fd()], 200);
            match s.recv() {
                Ok(b) => changed |= !b.is_empty(),
                Err(_) => sock = None,
            }
        } else {
            std::thread::sleep(Duration::from_millis(200));
        }
        if changed {
            e.refresh();
            last = Instant::now();
        }
        if !e.active.load(Ordering::Acquire) && e.ports.read().expect("tnl ports").is_empty() {
            // Nothing to route for now; keep polling slowly.
            drop(e);
            std::thread::sleep(Duration::from_millis(300));
        }
    }
}

/// A BFD session's local discriminator: from the port's name and the
/// time, so that a restarted session gets a new one.
fn discriminator(name: &str) -> u32 {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ t;
    for b in name.bytes() {
        h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
    }
    ((h >> 32) as u32 ^ h as u32).max(1)
}

/// Runs the BFD sessions of the process's tunnel ports: every 10 ms, times
/// them out and sends what is due through their tunnels.
fn bfd_thread(env: Weak<TnlEnv>) {
    let mut ip_id = 0u16;
    loop {
        std::thread::sleep(Duration::from_millis(10));
        let Some(e) = env.upgrade() else { return };
        let ports: Vec<Arc<TnlPortState>> =
            e.ports.read().expect("tnl ports").iter().filter(|p| p.bfd.is_some()).cloned().collect();
        let now = e.now_ms();
        for p in ports {
            let Some(s) = &p.bfd else { continue };
            let frame = s.lock().expect("bfd session").poll_tx(now, netdev::synthetic_mac(&p.name));
            let (Some(inner), FromFlow::Fixed(dst)) = (frame, p.cfg.remote) else { continue };
            match e.resolve(dst, p.cfg.local) {
                Ok(hop) => {
                    ip_id = ip_id.wrapping_add(1);
                    let mut out = Packet::from_slice(&inner);
                    let tmpl = template(&p.cfg, &hop, dst, &FlowKey::ZERO, &[]);
                    write_frame(&e, &p.cfg, &tmpl, &hop.bridge, &mut out, 0, ip_id);
                    hop.bridge.push(out, &e);
                }
                Err(why) => e.count_drop(why, 1),
            }
        }
    }
}

/// `tnl/ports/show`: the tunnel ports, the bridges they send through, and
/// the drop counters.
pub fn ports_show(env: &TnlEnv) -> String {
    let mut s = String::from("tunnel ports:\n");
    let tlv = env.tlv.read().expect("tnl tlv").clone();
    for p in env.ports.read().expect("tnl ports").iter() {
        let c = &p.cfg;
        s.push_str(&format!(
            "  {} ({}): {} remote_ip={}{} {} dst_port={}{}{} rx={} tx={} rx_dropped={}\n",
            p.name,
            p.bridge,
            c.kind.name(),
            c.remote_str(),
            match (c.local, c.local_flow) {
                (Some(l), _) => format!(" local_ip={}", fmt_addr(l)),
                (None, true) => " local_ip=flow".to_string(),
                (None, false) => String::new(),
            },
            key_str(c),
            c.dst_port,
            if c.csum { " csum" } else { "" },
            if c.df_default { " df" } else { "" },
            p.rx_packets.load(Ordering::Relaxed),
            p.tx_packets.load(Ordering::Relaxed),
            p.rx_dropped.load(Ordering::Relaxed),
        ));
        if let Some(via) = p.direct_via.lock().expect("direct via").as_ref() {
            s.push_str(&format!("    underlay: direct to {via} ({} frames)\n", p.direct_tx.load(Ordering::Relaxed)));
        }
        let xdp_tx = p.xdp_tx.load(Ordering::Relaxed);
        if xdp_tx > 0 {
            s.push_str(&format!("    kernel fast path (XDP): {xdp_tx} frames encapsulated and sent\n"));
        }
        let direct_rx = p.direct_rx.load(Ordering::Relaxed);
        if direct_rx > 0 {
            s.push_str(&format!("    underlay: {direct_rx} frames received straight from the underlay port\n"));
        }
        if let Some(b) = &p.bfd {
            let st = b.lock().expect("bfd session").status();
            s.push_str(&format!(
                "    bfd: state={} forwarding={} remote_state={} diagnostic=\"{}\" flap_count={} control_rx={}\n",
                st["state"],
                st["forwarding"],
                st["remote_state"],
                st["diagnostic"],
                st["flap_count"],
                p.bfd_rx.load(Ordering::Relaxed)
            ));
        }
        if let Some(maps) = tlv.get(&p.bridge).filter(|m| !m.is_empty() && c.kind == Kind::Geneve) {
            for m in maps {
                s.push_str(&format!(
                    "    geneve option class={:#x},type={:#x},len={} -> tun_metadata{}\n",
                    m.class, m.ty, m.len, m.index
                ));
            }
        }
    }
    s.push_str("bridges:\n");
    let bridges: BTreeMap<String, Arc<BridgeTnl>> =
        env.bridges.read().expect("tnl bridges").iter().map(|(k, v)| (k.clone(), Arc::clone(v))).collect();
    for (n, b) in bridges {
        let m = *b.mac.lock().expect("bridge mac");
        s.push_str(&format!(
            "  {n}: mac {:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x} mtu {}\n",
            m[0],
            m[1],
            m[2],
            m[3],
            m[4],
            m[5],
            b.mtu.load(Ordering::Relaxed)
        ));
    }
    s.push_str(&format!("sent larger than the route device's MTU: {}\n", env.over_mtu.load(Ordering::Relaxed)));
    s.push_str("drops:\n");
    for (n, c) in env.drops() {
        s.push_str(&format!("  {n}: {c}\n"));
    }
    s
}

/// What native tunneling does to a traced flow, in OVS's datapath-action
/// notation: `tnl_push(...)` for an output to tunnel port `out` (with the
/// tunnel fields of `key`), `tnl_pop(...)` for a tunnel frame output to the
/// local port of `bridge`. Read-only: no ARP is sent for a missing
/// neighbour.
pub fn trace_note(env: &TnlEnv, bridge: &str, out: &str, to_local: bool, key: &FlowKey) -> Option<String> {
    let ports = env.ports.read().expect("tnl ports").clone();
    if to_local {
        let ip = matches!(key.dl_type(), 0x0800 | 0x86dd);
        let udp = ip && key.nw_proto() == 17;
        let gre = ip && key.nw_proto() == 47;
        let p = ports.iter().find(|p| {
            (gre && p.cfg.kind == Kind::Gre) || (udp && p.cfg.kind != Kind::Gre && p.cfg.dst_port == key.tp_dst())
        })?;
        return Some(format!("tnl_pop({}) (on {bridge}: received on tunnel port {} of {})", p.name, p.name, p.bridge));
    }
    let p = ports.iter().find(|p| p.name == out && p.bridge == bridge)?;
    let c = &p.cfg;
    let dst = match c.remote {
        FromFlow::Fixed(r) => r,
        FromFlow::Flow => match flow_remote(key) {
            Some(a) => a,
            None => return Some("tnl_push: the flow set no tun_dst or tun_ipv6_dst".into()),
        },
    };
    let route = env.routes.read().expect("tnl routes").lookup(dst);
    let Some(route) = route else { return Some(format!("tnl_push: no route to {}", fmt_addr(dst))) };
    let hop = route.gateway.unwrap_or(dst);
    let from_flow = if c.local_flow { flow_local(key, tunnel::route::unmapped(dst).is_none()) } else { None };
    let src = c.local.or(from_flow).or(route.src).unwrap_or(0);
    let mac = |m: [u8; 6]| format!("{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", m[0], m[1], m[2], m[3], m[4], m[5]);
    let eth_src = env.bridges.read().expect("tnl bridges").get(&route.dev).map(|b| *b.mac.lock().expect("mac"));
    let eth_dst = env.neigh.lock().expect("neigh").lookup(hop, env.now_ms()).map(|n| n.mac);
    let (Some(es), Some(ed)) = (eth_src, eth_dst) else {
        return Some(format!(
            "tnl_push: {} via {} not resolved yet (no bridge local port or no neighbour entry for {})",
            fmt_addr(dst),
            route.dev,
            fmt_addr(hop)
        ));
    };
    let vni = match c.out_key {
        Some(FromFlow::Fixed(n)) => n,
        Some(FromFlow::Flow) => loc::TUN_ID.get(key) as u64,
        None => 0,
    };
    let tunnel = match c.kind {
        Kind::Geneve => format!("udp(src=0,dst={}),geneve(vni={vni:#x})", c.dst_port),
        Kind::Vxlan => format!("udp(src=0,dst={}),vxlan(flags=0x8000000,vni={vni:#x})", c.dst_port),
        Kind::Gre => {
            format!("gre((flags=0x{:x},proto=0x6558),key={vni:#x})", if c.out_key.is_some() { 0x2000 } else { 0 })
        }
    };
    let proto = if c.kind == Kind::Gre { 47 } else { 17 };
    let ip = if tunnel::route::unmapped(dst).is_some() {
        format!(
            "dl_type=0x0800),ipv4(src={},dst={},proto={proto},ttl=64,frag=0x{})",
            fmt_addr(src),
            fmt_addr(dst),
            if c.df_default { "4000" } else { "0" }
        )
    } else {
        format!(
            "dl_type=0x86dd),ipv6(src={},dst={},label=0,proto={proto},tclass=0x0,hlimit=64)",
            fmt_addr(src),
            fmt_addr(dst)
        )
    };
    Some(format!(
        "tnl_push(tnl_port({}),header(type={},eth(dst={},src={},{ip},{tunnel}),out_port({}))",
        p.name,
        c.kind.name(),
        mac(ed),
        mac(es),
        route.dev
    ))
}

pub fn neigh_show(env: &TnlEnv) -> String {
    env.neigh.lock().expect("neigh").show(env.now_ms())
}

pub fn neigh_flush(env: &TnlEnv) {
    env.neigh.lock().expect("neigh").flush();
    env.bump();
}

/// `tnl/neigh/set BRIDGE IP MAC`.
pub fn neigh_set(env: &TnlEnv, bridge: &str, ip: &str, mac: &str) -> Result<(), String> {
    let a = tunnel::route::parse_addr(ip).ok_or_else(|| format!("{ip:?} is not an IP address"))?;
    let mut m = [0u8; 6];
    let parts: Vec<&str> = mac.split(':').collect();
    if parts.len() != 6 {
        return Err(format!("{mac:?} is not a MAC address"));
    }
    for (i, p) in parts.iter().enumerate() {
        m[i] = u8::from_str_radix(p, 16).map_err(|_| format!("{mac:?} is not a MAC address"))?;
    }
    env.neigh.lock().expect("neigh").learn(a, m, bridge, env.now_ms());
    env.bump();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tun_metadata_round_trips_through_geneve_options() {
        let tlv = [TlvMapping { class: 0x102, ty: 0x80, len: 4, index: 0 }];
        let mut k = FlowKey::ZERO;
        loc::TUN_METADATA[0].set(&mut k, 0x0001_0002);
        let opts = words_to_options(&k, &tlv);
        assert_eq!(opts, vec![0x01, 0x02, 0x80, 1, 0, 1, 0, 2]);
        let m = TunnelMeta { tun_id: 5, src: 1, dst: 2, geneve_opts: opts, ..Default::default() };
        let w = meta_to_words(&m, &tlv);
        let mut k2 = FlowKey::ZERO;
        for (i, x) in TNL_WORDS.iter().enumerate() {
            k2.w[*x] = w[i];
        }
        assert_eq!(loc::TUN_METADATA[0].get(&k2), 0x0001_0002);
        assert_eq!(loc::TUN_ID.get(&k2), 5);
        assert_eq!((loc::TUN_SRC.get(&k2), loc::TUN_DST.get(&k2)), (1, 2));
        // Received over IPv6: the IPv6 fields, not tun_src/tun_dst.
        let m6 = TunnelMeta { src: 0xfd31 << 112 | 1, dst: 0xfd31 << 112 | 2, v6: true, ..Default::default() };
        let w6 = meta_to_words(&m6, &[]);
        let mut k6 = FlowKey::ZERO;
        for (i, x) in TNL_WORDS.iter().enumerate() {
            k6.w[*x] = w6[i];
        }
        assert_eq!((loc::TUN_SRC.get(&k6), loc::TUN_DST.get(&k6)), (0, 0));
        assert_eq!((loc::TUN_IPV6_SRC.get(&k6), loc::TUN_IPV6_DST.get(&k6)), (m6.src, m6.dst));
        assert_eq!(flow_remote(&k6), Some(m6.dst));
        assert_eq!(flow_remote(&k2), Some(mapped(2)));
        assert_eq!(flow_remote(&FlowKey::ZERO), None);
        // Not bound by the map: not a field.
        assert_eq!(meta_to_words(&m, &[])[3], 0);
    }

    #[test]
    fn decapsulated_frames_find_their_port() {
        let mk = |remote: FromFlow<u128>, key: Option<FromFlow<u64>>| {
            let mut cfg =
                PortCfg::parse("geneve", &[("remote_ip".to_string(), "flow".to_string())].into_iter().collect())
                    .unwrap()
                    .0;
            cfg.remote = remote;
            cfg.in_key = key;
            Arc::new(TnlPortState {
                name: "t".into(),
                bridge: "b".into(),
                cfg,
                rx: Default::default(),
                rx_dropped: AtomicU64::new(0),
                tx_packets: AtomicU64::new(0),
                rx_packets: AtomicU64::new(0),
                rx_bytes: AtomicU64::new(0),
                direct_rx: AtomicU64::new(0),
                ofport: std::sync::atomic::AtomicU32::new(0),
                bfd: None,
                bfd_rx: AtomicU64::new(0),
                direct_via: Mutex::new(None),
                direct_tx: AtomicU64::new(0),
                xdp_tx: AtomicU64::new(0),
                xdp_tx_bytes: AtomicU64::new(0),
            })
        };
        let flowport = mk(FromFlow::Flow, Some(FromFlow::Flow));
        let fixed = mk(FromFlow::Fixed(mapped(0x0a00_0002)), Some(FromFlow::Fixed(7)));
        let ports = vec![Arc::clone(&flowport), Arc::clone(&fixed)];
        let d = |src: u32, vni: u64| encap::Decap {
            kind: Kind::Geneve,
            meta: TunnelMeta { src: src as u128, dst: 1, tun_id: vni, tp_dst: 6081, ..Default::default() },
            inner: 0,
            end: 0,
        };
        let got = |d| match_port(&ports, &d).map(|i| Arc::clone(&ports[i]));
        assert!(Arc::ptr_eq(&got(d(0x0a00_0002, 7)).unwrap(), &fixed));
        assert!(Arc::ptr_eq(&got(d(0x0a00_0002, 8)).unwrap(), &flowport));
        assert!(Arc::ptr_eq(&got(d(0x0a00_0003, 7)).unwrap(), &flowport));
        assert!(match_port(&ports[1..], &d(0x0a00_0003, 7)).is_none());
    }
}
