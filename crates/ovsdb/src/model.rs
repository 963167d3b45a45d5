//! The typed desired state, built from the [`Replica`] of the
//! Open_vSwitch database.
//!
//! [`Desired::from_replica`] walks Open_vSwitch -> Bridge -> Port ->
//! Interface (and Controller, Mirror), decoding each column it uses once.
//! Bad values never poison the rest: a bad interface option becomes that
//! interface's [`IfaceCfg::error`] (the text ovs-vswitchd would put in the
//! `error` column, naming the field); a bad bridge or port setting is
//! logged with `tracing::warn` and dropped to its default; dangling
//! references and columns of the wrong shape are logged and skipped.

use crate::replica::{Atom, Datum, Replica, Row};
use std::cell::RefCell;
use std::collections::BTreeMap;
use tracing::warn;

/// Everything the daemon should make true.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Desired {
    pub bridges: Vec<BridgeCfg>,
    /// Open_vSwitch other_config:pmd-cpu-mask (hex, "0x" optional).
    pub pmd_cpu_mask: Option<u64>,
    /// Open_vSwitch other_config:pmd-maxsleep (OVS 3.1's name) or
    /// pmd-sleep-max (later releases), in microseconds: 0 makes the poll
    /// threads spin without ever sleeping (Open vSwitch's default); absent,
    /// xvs's adaptive polling applies.
    pub pmd_maxsleep_us: Option<u64>,
    /// Open_vSwitch other_config:emc-insert-inv-prob: a megaflow hit is
    /// inserted into the exact-match cache with probability 1/N; 0 turns
    /// the EMC off. Absent, 100 (Open vSwitch's default).
    pub emc_insert_inv_prob: Option<u32>,
    /// Open_vSwitch other_config:flow-restore-wait: while true, keep the
    /// datapath flows and do not revalidate them away.
    pub flow_restore_wait: bool,
    /// Open_vSwitch next_cfg: once applied, write it to cur_cfg.
    pub next_cfg: i64,
    /// Conntrack timeout policies of the "netdev" datapath, by zone:
    /// `Datapath:ct_zones` -> `CT_Zone:timeout_policy` ->
    /// `CT_Timeout_Policy:timeouts` (key -> seconds), as `ovs-vsctl
    /// add-zone-tp netdev zone=N key=secs...` writes them.
    pub ct_zone_policies: BTreeMap<u16, BTreeMap<String, u64>>,
    /// Open_vSwitch other_config:metrics-addr (IP:PORT): where the
    /// Prometheus endpoint listens; absent, it is off.
    pub metrics_addr: Option<String>,
    /// Open_vSwitch other_config:xvs-umem-frames: frames per shared UMEM
    /// of AF_XDP ports (applies to UMEMs made from then on).
    pub umem_frames: Option<u32>,
    /// Open_vSwitch other_config:xdp-offload: the kernel fast path (hot
    /// exact-match flows forwarded by the XDP program itself). On unless
    /// "false"; applied whenever it changes.
    pub xdp_offload: bool,
    /// Open_vSwitch other_config:xdp-offload-pps: packets per second a flow
    /// needs before it is offloaded (default 1000).
    pub xdp_offload_pps: Option<u64>,
    /// Open_vSwitch other_config:xdp-napi-threads: AF_XDP ports' kernel
    /// receive work in threads of their own (`xvs switch --napi-threads`).
    /// Off unless "true"; read when a bridge starts.
    pub xdp_napi_threads: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FailMode {
    /// No controller reachable: act as a MAC-learning switch (the default).
    Standalone,
    /// No controller reachable: keep the flow table, add nothing.
    Secure,
}

#[derive(Debug, Clone, PartialEq)]
pub struct BridgeCfg {
    pub name: String,
    pub uuid: String,
    /// "netdev" for xvs; "" means the default ("system" in OVS).
    pub datapath_type: String,
    pub fail_mode: FailMode,
    /// e.g. ["OpenFlow10", "OpenFlow13"]; empty means the default set.
    pub protocols: Vec<String>,
    /// other_config:datapath-id (16 hex digits).
    pub datapath_id: Option<u64>,
    /// other_config:hwaddr (the local port's MAC).
    pub hwaddr: Option<[u8; 6]>,
    /// Controller targets (e.g. "tcp:127.0.0.1:6653").
    pub controllers: Vec<String>,
    pub ports: Vec<PortCfg>,
    pub mirrors: Vec<MirrorCfg>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VlanMode {
    Trunk,
    Access,
    NativeTagged,
    NativeUntagged,
    Dot1qTunnel,
}

#[derive(Debug, Clone, PartialEq)]
pub struct PortCfg {
    pub name: String,
    pub uuid: String,
    pub tag: Option<u16>,
    pub trunks: Vec<u16>,
    /// None: OVS's default (access if tag is set, else trunk).
    pub vlan_mode: Option<VlanMode>,
    pub interfaces: Vec<IfaceCfg>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum XdpMode {
    Native,
    Generic,
    BestEffort,
    NativeWithZerocopy,
}

#[derive(Debug, Clone, PartialEq)]
pub enum IfaceKind {
    Afxdp {
        xdp_mode: XdpMode,
        need_wakeup: bool,
        n_rxq: u16,
    },
    /// type "" or "system".
    System,
    Internal,
    Tap,
    Patch {
        peer: String,
    },
    /// `dpdkvhostuserclient`: a vhost-user port on the frontend's (QEMU's)
    /// socket at `options:vhost-server-path`.
    VhostUserClient {
        path: String,
    },
    /// `dpdkvhostuser`: a vhost-user port whose socket the switch creates
    /// (in its run directory, named after the interface) for the frontend
    /// to connect to.
    VhostUser,
    /// `geneve`, `vxlan`, `gre`: a native tunnel port.
    Tunnel(tunnel::config::PortCfg),
    /// A type xvs does not implement, or options it cannot apply (the
    /// type name is kept); `error` says why.
    Unsupported(String),
}

#[derive(Debug, Clone, PartialEq)]
pub struct IfaceCfg {
    pub name: String,
    pub uuid: String,
    pub kind: IfaceKind,
    pub ofport_request: Option<u16>,
    /// `mtu_request`: the MTU the device should have.
    pub mtu_request: Option<u32>,
    /// vhost-user: `options:tx-retries-max` (0-32).
    pub tx_retries_max: Option<u32>,
    /// Set when the configuration cannot be applied; the daemon should not
    /// create the interface and should write this to its `error` column.
    pub error: Option<String>,
}

/// Mirror: copies of selected traffic to an output port.
#[derive(Debug, Clone, PartialEq)]
pub struct MirrorCfg {
    pub name: String,
    pub select_all: bool,
    /// Port names.
    pub select_src_port: Vec<String>,
    pub select_dst_port: Vec<String>,
    pub select_vlan: Vec<u16>,
    pub output_port: Option<String>,
    pub output_vlan: Option<u16>,
}

/// The replica being read and the problems found so far.
struct Ctx<'a> {
    r: &'a Replica,
    notes: RefCell<Vec<String>>,
}

impl Ctx<'_> {
    fn note(&self, msg: String) {
        self.notes.borrow_mut().push(msg);
    }
}

/// A row's columns, each decoded on use; malformed values are noted.
struct Cols<'a> {
    ctx: &'a Ctx<'a>,
    table: &'a str,
    uuid: &'a str,
    row: &'a Row,
}

impl<'a> Cols<'a> {
    fn note(&self, msg: String) {
        self.ctx.note(msg);
    }
    fn datum(&self, col: &str) -> Option<Datum> {
        let v = self.row.get(col)?;
        match Datum::parse(v) {
            Ok(d) => Some(d),
            Err(e) => {
                self.note(format!("{} {} column {col}: {e}; skipped", self.table, self.uuid));
                None
            }
        }
    }
    fn string(&self, col: &str) -> Option<String> {
        let d = self.datum(col)?;
        let a = d.atoms();
        a.first().and_then(|a| a.as_str()).map(str::to_string)
    }
    fn int(&self, col: &str) -> Option<i64> {
        self.datum(col)?.atoms().first().and_then(|a| a.as_i64())
    }
    fn bool(&self, col: &str) -> Option<bool> {
        match self.datum(col)?.atoms().first() {
            Some(Atom::Boolean(b)) => Some(*b),
            _ => None,
        }
    }
    fn uuids(&self, col: &str) -> Vec<String> {
        self.datum(col)
            .map(|d| d.atoms().iter().filter_map(|a| a.as_uuid()).map(str::to_string).collect())
            .unwrap_or_default()
    }
    fn ints(&self, col: &str) -> Vec<i64> {
        self.datum(col).map(|d| d.atoms().iter().filter_map(|a| a.as_i64()).collect()).unwrap_or_default()
    }
    fn strings(&self, col: &str) -> Vec<String> {
        self.datum(col)
            .map(|d| d.atoms().iter().filter_map(|a| a.as_str()).map(str::to_string).collect())
            .unwrap_or_default()
    }
    fn map(&self, col: &str) -> BTreeMap<String, String> {
        self.datum(col)
            .map(|d| {
                d.pairs()
                    .into_iter()
                    .filter_map(|(k, v)| Some((k.as_str()?.to_string(), v.as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default()
    }
}

fn cols<'a>(ctx: &'a Ctx<'a>, table: &'a str, uuid: &'a str) -> Option<Cols<'a>> {
    match ctx.r.row(table, uuid) {
        Some(row) => Some(Cols { ctx, table, uuid, row }),
        None => {
            ctx.note(format!("{table} {uuid}: dangling reference, skipped"));
            None
        }
    }
}

fn one_of<T: Clone>(field: &str, value: &str, choices: &[(&str, T)]) -> Result<T, String> {
    choices.iter().find(|(n, _)| *n == value).map(|(_, t)| t.clone()).ok_or_else(|| {
        let names: Vec<&str> = choices.iter().map(|(n, _)| *n).collect();
        format!("{field}: {value:?} is not one of {}", names.join(", "))
    })
}

fn parse_bool(field: &str, value: &str) -> Result<bool, String> {
    match value {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(format!("{field}: {value:?} is not true or false")),
    }
}

/// "0x"-optional hex, as in pmd-cpu-mask and datapath-id.
fn parse_hex(field: &str, value: &str, max_digits: usize) -> Result<u64, String> {
    let digits = value.strip_prefix("0x").or_else(|| value.strip_prefix("0X")).unwrap_or(value);
    if digits.is_empty() || digits.len() > max_digits || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("{field}: {value:?} is not a hexadecimal number of at most {max_digits} digits"));
    }
    u64::from_str_radix(digits, 16).map_err(|e| format!("{field}: {value:?}: {e}"))
}

/// "aa:bb:cc:dd:ee:ff".
pub fn parse_mac(field: &str, value: &str) -> Result<[u8; 6], String> {
    let bad = || format!("{field}: {value:?} is not a MAC address (xx:xx:xx:xx:xx:xx)");
    let mut mac = [0u8; 6];
    let mut parts = value.split(':');
    for b in mac.iter_mut() {
        let p = parts.next().ok_or_else(bad)?;
        if p.is_empty() || p.len() > 2 {
            return Err(bad());
        }
        *b = u8::from_str_radix(p, 16).map_err(|_| bad())?;
    }
    if parts.next().is_some() {
        return Err(bad());
    }
    Ok(mac)
}

impl Desired {
    /// Builds the desired state. Never fails: what cannot be understood is
    /// logged (`tracing::warn`) and skipped, or reported in an interface's
    /// `error`.
    pub fn from_replica(r: &Replica) -> Desired {
        let (d, notes) = Desired::from_replica_with_notes(r);
        for n in notes {
            warn!("{n}");
        }
        d
    }

    /// As [`Desired::from_replica`], returning the problems instead of
    /// logging them (a caller that rebuilds on every update can log only
    /// the new ones).
    pub fn from_replica_with_notes(r: &Replica) -> (Desired, Vec<String>) {
        let ctx = Ctx { r, notes: RefCell::new(Vec::new()) };
        let d = Desired::build(&ctx);
        (d, ctx.notes.into_inner())
    }

    fn build(ctx: &Ctx) -> Desired {
        let mut d = Desired::default();
        let Some((ovs_uuid, _)) = ctx.r.table("Open_vSwitch").next() else {
            return d;
        };
        let Some(ovs) = cols(ctx, "Open_vSwitch", ovs_uuid) else { return d };
        d.next_cfg = ovs.int("next_cfg").unwrap_or(0);
        let oc = ovs.map("other_config");
        if let Some(v) = oc.get("pmd-cpu-mask") {
            match parse_hex("other_config:pmd-cpu-mask", v, 16) {
                Ok(m) => d.pmd_cpu_mask = Some(m),
                Err(e) => ovs.note(format!("Open_vSwitch {e}; ignored")),
            }
        }
        for key in ["pmd-maxsleep", "pmd-sleep-max"] {
            if let Some(v) = oc.get(key) {
                match v.parse::<u64>() {
                    Ok(us) if us <= 10_000 => d.pmd_maxsleep_us = Some(us),
                    _ => ovs.note(format!(
                        "Open_vSwitch other_config:{key}: {v:?} is not a number of microseconds from 0 to 10000; ignored"
                    )),
                }
            }
        }
        if let Some(v) = oc.get("emc-insert-inv-prob") {
            match v.parse::<u32>() {
                Ok(n) => d.emc_insert_inv_prob = Some(n),
                Err(_) => ovs.note(format!(
                    "Open_vSwitch other_config:emc-insert-inv-prob: {v:?} is not a number from 0 to 4294967295; ignored"
                )),
            }
        }
        if let Some(v) = oc.get("flow-restore-wait") {
            match parse_bool("other_config:flow-restore-wait", v) {
                Ok(b) => d.flow_restore_wait = b,
                Err(e) => ovs.note(format!("Open_vSwitch {e}; ignored")),
            }
        }
        if let Some(v) = oc.get("xvs-umem-frames") {
            match v.parse::<u32>() {
                Ok(n) if n >= 5120 => d.umem_frames = Some(n),
                _ => ovs.note(format!(
                    "Open_vSwitch other_config:xvs-umem-frames: {v:?} is not a frame count of at least 5120 (one queue's rings); ignored"
                )),
            }
        }
        d.xdp_offload = true;
        if let Some(v) = oc.get("xdp-offload") {
            match parse_bool("other_config:xdp-offload", v) {
                Ok(b) => d.xdp_offload = b,
                Err(e) => ovs.note(format!("Open_vSwitch {e}; ignored")),
            }
        }
        if let Some(v) = oc.get("xdp-napi-threads") {
            match parse_bool("other_config:xdp-napi-threads", v) {
                Ok(b) => d.xdp_napi_threads = b,
                Err(e) => ovs.note(format!("Open_vSwitch {e}; ignored")),
            }
        }
        if let Some(v) = oc.get("xdp-offload-pps") {
            match v.parse::<u64>() {
                Ok(n) if n >= 1 => d.xdp_offload_pps = Some(n),
                _ => ovs.note(format!(
                    "Open_vSwitch other_config:xdp-offload-pps: {v:?} is not a packet rate of at least 1; ignored"
                )),
            }
        }
        if let Some(v) = oc.get("metrics-addr") {
            match v.parse::<std::net::SocketAddr>() {
                Ok(_) => d.metrics_addr = Some(v.to_string()),
                Err(_) => ovs.note(format!(
                    "Open_vSwitch other_config:metrics-addr: {v:?} is not IP:PORT (e.g. 127.0.0.1:9477); ignored"
                )),
            }
        }
        for bu in ovs.uuids("bridges") {
            if let Some(b) = cols(ctx, "Bridge", &bu) {
                d.bridges.push(bridge(ctx, &b));
            }
        }
        d.ct_zone_policies = zone_policies(ctx, &ovs);
        d.bridges.sort_by(|a, b| a.name.cmp(&b.name));
        d
    }

    pub fn bridge(&self, name: &str) -> Option<&BridgeCfg> {
        self.bridges.iter().find(|b| b.name == name)
    }

    /// Every interface of every bridge, with its bridge and port.
    pub fn interfaces(&self) -> impl Iterator<Item = (&BridgeCfg, &PortCfg, &IfaceCfg)> {
        self.bridges.iter().flat_map(|b| b.ports.iter().flat_map(move |p| p.interfaces.iter().map(move |i| (b, p, i))))
    }

    pub fn interface(&self, name: &str) -> Option<&IfaceCfg> {
        self.interfaces().map(|(_, _, i)| i).find(|i| i.name == name)
    }
}

/// The netdev datapath's zone timeout policies (see
/// [`Desired::ct_zone_policies`]).
fn zone_policies(ctx: &Ctx, ovs: &Cols) -> BTreeMap<u16, BTreeMap<String, u64>> {
    let mut out = BTreeMap::new();
    let Some(dp) = ovs.datum("datapaths").and_then(|d| {
        d.pairs()
            .into_iter()
            .find(|(k, _)| k.as_str() == Some("netdev"))
            .and_then(|(_, v)| v.as_uuid().map(str::to_string))
    }) else {
        return out;
    };
    let Some(dp) = cols(ctx, "Datapath", &dp) else { return out };
    for (zone, zu) in dp
        .datum("ct_zones")
        .map(|d| d.pairs().into_iter().map(|(k, v)| (k.as_i64(), v.as_uuid().map(str::to_string))).collect::<Vec<_>>())
        .unwrap_or_default()
    {
        let (Some(zone), Some(zu)) = (zone, zu) else { continue };
        let Ok(zone) = u16::try_from(zone) else { continue };
        let Some(z) = cols(ctx, "CT_Zone", &zu) else { continue };
        let Some(tpu) = z.uuids("timeout_policy").into_iter().next() else { continue };
        let Some(tp) = cols(ctx, "CT_Timeout_Policy", &tpu) else { continue };
        let timeouts = tp
            .datum("timeouts")
            .map(|d| {
                d.pairs()
                    .into_iter()
                    .filter_map(|(k, v)| Some((k.as_str()?.to_string(), u64::try_from(v.as_i64()?).ok()?)))
                    .collect()
            })
            .unwrap_or_default();
        out.insert(zone, timeouts);
    }
    out
}

fn bridge(ctx: &Ctx, b: &Cols) -> BridgeCfg {
    let name = b.string("name").unwrap_or_default();
    let datapath_type = b.string("datapath_type").unwrap_or_default();
    if !matches!(datapath_type.as_str(), "" | "netdev" | "system") {
        b.note(format!("bridge {name}: datapath_type {datapath_type:?}: xvs provides \"netdev\""));
    }
    let fail_mode = match b.string("fail_mode").as_deref() {
        Some("secure") => FailMode::Secure,
        Some("standalone") | None => FailMode::Standalone,
        Some(other) => {
            b.note(format!("bridge {name}: fail_mode: {other:?} is not one of standalone, secure; using standalone"));
            FailMode::Standalone
        }
    };
    let oc = b.map("other_config");
    let datapath_id = oc.get("datapath-id").and_then(|v| match parse_hex("other_config:datapath-id", v, 16) {
        Ok(id) => Some(id),
        Err(e) => {
            b.note(format!("bridge {name}: {e}; ignored"));
            None
        }
    });
    let hwaddr = oc.get("hwaddr").and_then(|v| match parse_mac("other_config:hwaddr", v) {
        Ok(m) => Some(m),
        Err(e) => {
            b.note(format!("bridge {name}: {e}; ignored"));
            None
        }
    });
    let controllers = b
        .uuids("controller")
        .iter()
        .filter_map(|u| cols(ctx, "Controller", u))
        .filter_map(|c| c.string("target"))
        .collect();
    let mut ports: Vec<PortCfg> =
        b.uuids("ports").iter().filter_map(|u| cols(ctx, "Port", u)).map(|p| port(ctx, &p)).collect();
    ports.sort_by(|a, b| a.name.cmp(&b.name));
    let port_name =
        |u: &String| ctx.r.row("Port", u).and_then(|p| p.get("name")).and_then(|v| v.as_str()).map(str::to_string);
    let mirrors = b
        .uuids("mirrors")
        .iter()
        .filter_map(|u| cols(ctx, "Mirror", u))
        .map(|m| MirrorCfg {
            name: m.string("name").unwrap_or_default(),
            select_all: m.bool("select_all").unwrap_or(false),
            select_src_port: m.uuids("select_src_port").iter().filter_map(port_name).collect(),
            select_dst_port: m.uuids("select_dst_port").iter().filter_map(port_name).collect(),
            select_vlan: m.ints("select_vlan").into_iter().filter_map(|v| vlan(ctx, &name, v)).collect(),
            output_port: m.uuids("output_port").first().and_then(port_name),
            output_vlan: m.int("output_vlan").and_then(|v| vlan(ctx, &name, v)),
        })
        .collect();
    BridgeCfg {
        name,
        uuid: b.uuid.to_string(),
        datapath_type,
        fail_mode,
        protocols: b.strings("protocols"),
        datapath_id,
        hwaddr,
        controllers,
        ports,
        mirrors,
    }
}

fn vlan(ctx: &Ctx, owner: &str, v: i64) -> Option<u16> {
    match u16::try_from(v) {
        Ok(v) if v <= 4095 => Some(v),
        _ => {
            ctx.note(format!("{owner}: VLAN {v} out of range 0..4095; skipped"));
            None
        }
    }
}

fn port(ctx: &Ctx, p: &Cols) -> PortCfg {
    let name = p.string("name").unwrap_or_default();
    let vlan_mode = p.string("vlan_mode").and_then(|m| {
        let modes = [
            ("trunk", VlanMode::Trunk),
            ("access", VlanMode::Access),
            ("native-tagged", VlanMode::NativeTagged),
            ("native-untagged", VlanMode::NativeUntagged),
            ("dot1q-tunnel", VlanMode::Dot1qTunnel),
        ];
        one_of("vlan_mode", &m, &modes).map_err(|e| p.note(format!("port {name}: {e}; using the default"))).ok()
    });
    let mut interfaces: Vec<IfaceCfg> =
        p.uuids("interfaces").iter().filter_map(|u| cols(ctx, "Interface", u)).map(|i| iface(&i)).collect();
    interfaces.sort_by(|a, b| a.name.cmp(&b.name));
    PortCfg {
        tag: p.int("tag").and_then(|v| vlan(ctx, &name, v)),
        trunks: p.ints("trunks").into_iter().filter_map(|v| vlan(ctx, &name, v)).collect(),
        vlan_mode,
        interfaces,
        uuid: p.uuid.to_string(),
        name,
    }
}

fn iface(i: &Cols) -> IfaceCfg {
    let name = i.string("name").unwrap_or_default();
    let ty = i.string("type").unwrap_or_default();
    let vhost = ty.starts_with("dpdkvhostuser");
    let options = i.map("options");
    let ofport_request = i.int("ofport_request").and_then(|v| match u16::try_from(v) {
        Ok(v) if (1..=65279).contains(&v) => Some(v),
        _ => {
            i.note(format!("interface {name}: ofport_request: {v} is out of range 1..65279; ignored"));
            None
        }
    });
    if let Ok((_, warnings)) = tunnel::config::PortCfg::parse(&ty, &options) {
        for w in warnings {
            i.note(format!("interface {name}: {w}"));
        }
    }
    let bfd = i.map("bfd");
    let (kind, error) = match iface_kind(&ty, &options).and_then(|k| with_bfd(k, &bfd, &name, i)) {
        Ok(k) => (k, None),
        Err(e) => {
            i.note(format!("interface {name}: {e}"));
            (IfaceKind::Unsupported(ty), Some(e))
        }
    };
    let mtu_request = i.int("mtu_request").and_then(|v| match u32::try_from(v) {
        Ok(v) if (68..=65535).contains(&v) => Some(v),
        _ => {
            i.note(format!("interface {name}: mtu_request: {v} is out of range 68..65535; ignored"));
            None
        }
    });
    let mut error = error;
    let tx_retries_max = match options.get("tx-retries-max") {
        Some(v) if vhost => match v.parse::<u32>() {
            Ok(n) if n <= 32 => Some(n),
            _ => {
                let e = format!("options:tx-retries-max: {v:?} is not a number from 0 to 32");
                i.note(format!("interface {name}: {e}"));
                error.get_or_insert(e);
                None
            }
        },
        _ => None,
    };
    IfaceCfg { name, uuid: i.uuid.to_string(), kind, ofport_request, mtu_request, tx_retries_max, error }
}

/// The `bfd` column: on tunnel interfaces, their BFD session; elsewhere
/// noted as unsupported (the interface works without it).
fn with_bfd(kind: IfaceKind, bfd: &BTreeMap<String, String>, name: &str, i: &Cols) -> Result<IfaceKind, String> {
    if bfd.is_empty() {
        return Ok(kind);
    }
    let (cfg, warnings) = tunnel::bfd::Config::parse(bfd)?;
    for w in warnings {
        i.note(format!("interface {name}: {w}"));
    }
    match kind {
        IfaceKind::Tunnel(mut t) => {
            t.bfd = cfg;
            Ok(IfaceKind::Tunnel(t))
        }
        k => {
            if cfg.is_some() {
                i.note(format!("interface {name}: bfd: xvs runs BFD on tunnel interfaces only; ignored here"));
            }
            Ok(k)
        }
    }
}

/// The interface types xvs implements (also written to `iface_types`).
pub const IFACE_TYPES: &[&str] = &[
    "afxdp",
    "dpdkvhostuser",
    "dpdkvhostuserclient",
    "geneve",
    "gre",
    "internal",
    "ip6gre",
    "patch",
    "system",
    "tap",
    "vxlan",
];

fn iface_kind(ty: &str, options: &BTreeMap<String, String>) -> Result<IfaceKind, String> {
    match ty {
        "afxdp" => {
            let xdp_mode = match options.get("xdp-mode") {
                None => XdpMode::BestEffort,
                Some(v) => one_of(
                    "options:xdp-mode",
                    v,
                    &[
                        ("native", XdpMode::Native),
                        ("generic", XdpMode::Generic),
                        ("best-effort", XdpMode::BestEffort),
                        ("native-with-zerocopy", XdpMode::NativeWithZerocopy),
                    ],
                )?,
            };
            let need_wakeup = match options.get("use-need-wakeup") {
                None => true,
                Some(v) => parse_bool("options:use-need-wakeup", v)?,
            };
            let n_rxq = match options.get("n_rxq") {
                None => 1,
                Some(v) => match v.parse::<u16>() {
                    Ok(n) if (1..=1024).contains(&n) => n,
                    _ => return Err(format!("options:n_rxq: {v:?} is not a number of queues from 1 to 1024")),
                },
            };
            Ok(IfaceKind::Afxdp { xdp_mode, need_wakeup, n_rxq })
        }
        "" | "system" => Ok(IfaceKind::System),
        "internal" => Ok(IfaceKind::Internal),
        "tap" => Ok(IfaceKind::Tap),
        "patch" => match options.get("peer") {
            Some(p) if !p.is_empty() => Ok(IfaceKind::Patch { peer: p.clone() }),
            _ => Err("options:peer: a patch interface needs a peer".to_string()),
        },
        "dpdkvhostuserclient" | "dpdkvhostuser" => {
            if let Some(v) = options.get("vhost-postcopy-support") {
                if parse_bool("options:vhost-postcopy-support", v)? {
                    return Err("options:vhost-postcopy-support: postcopy live migration is not supported".into());
                }
            }
            if ty == "dpdkvhostuser" {
                return Ok(IfaceKind::VhostUser);
            }
            match options.get("vhost-server-path") {
                Some(p) if !p.is_empty() => Ok(IfaceKind::VhostUserClient { path: p.clone() }),
                _ => Err("options:vhost-server-path: a dpdkvhostuserclient interface needs the frontend's socket path"
                    .to_string()),
            }
        }
        "geneve" | "vxlan" | "gre" | "ip6gre" => {
            // Warnings (unknown options) are noted by the caller.
            Ok(IfaceKind::Tunnel(tunnel::config::PortCfg::parse(ty, options)?.0))
        }
        other => Err(format!("type: {other:?} is not one of {}", IFACE_TYPES.join(", "))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn replica() -> Replica {
        let mut r = Replica::new();
        r.apply_update(&json!({
            "Open_vSwitch": {"o": {"new": {"bridges": ["uuid", "b"], "next_cfg": 7,
                "other_config": ["map", [["pmd-cpu-mask", "0x6"], ["flow-restore-wait", "true"]]]}}},
            "Bridge": {"b": {"new": {"name": "br0", "datapath_type": "netdev", "fail_mode": "secure",
                "ports": ["set", [["uuid", "p0"], ["uuid", "p1"], ["uuid", "gone"]]],
                "protocols": ["set", ["OpenFlow10", "OpenFlow13"]], "controller": ["uuid", "c"],
                "other_config": ["map", [["datapath-id", "00000000000000aa"], ["hwaddr", "02:00:00:00:00:01"]]],
                "mirrors": ["set", []]}}},
            "Controller": {"c": {"new": {"target": "tcp:127.0.0.1:6653"}}},
            "Port": {
                "p0": {"new": {"name": "p0", "interfaces": ["uuid", "i0"], "tag": 10, "trunks": ["set", []],
                       "vlan_mode": ["set", []]}},
                "p1": {"new": {"name": "p1", "interfaces": ["uuid", "i1"], "tag": ["set", []],
                       "trunks": ["set", [10, 20]], "vlan_mode": "trunk"}}},
            "Interface": {
                "i0": {"new": {"name": "p0", "type": "afxdp", "ofport_request": 5,
                       "options": ["map", [["xdp-mode", "native"], ["n_rxq", "2"]]]}},
                "i1": {"new": {"name": "p1", "type": "afxdp", "ofport_request": ["set", []],
                       "options": ["map", [["xdp-mode", "bogus"]]]}}}
        }))
        .unwrap();
        r
    }

    #[test]
    fn typed_model() {
        let d = Desired::from_replica(&replica());
        assert_eq!(d.next_cfg, 7);
        assert_eq!(d.pmd_cpu_mask, Some(6));
        assert!(d.flow_restore_wait);
        let b = d.bridge("br0").unwrap();
        assert_eq!(b.fail_mode, FailMode::Secure);
        assert_eq!(b.datapath_id, Some(0xaa));
        assert_eq!(b.hwaddr, Some([2, 0, 0, 0, 0, 1]));
        assert_eq!(b.controllers, vec!["tcp:127.0.0.1:6653"]);
        assert_eq!(b.protocols, vec!["OpenFlow10", "OpenFlow13"]);
        assert_eq!(b.ports.len(), 2);
        assert_eq!(b.ports[0].tag, Some(10));
        assert_eq!(b.ports[1].trunks, vec![10, 20]);
        assert_eq!(b.ports[1].vlan_mode, Some(VlanMode::Trunk));
        let p0 = d.interface("p0").unwrap();
        assert_eq!(p0.kind, IfaceKind::Afxdp { xdp_mode: XdpMode::Native, need_wakeup: true, n_rxq: 2 });
        assert_eq!(p0.ofport_request, Some(5));
        let p1 = d.interface("p1").unwrap();
        assert_eq!(
            p1.error.as_deref(),
            Some("options:xdp-mode: \"bogus\" is not one of native, generic, best-effort, native-with-zerocopy")
        );
    }

    #[test]
    fn garbage_columns_are_skipped() {
        let mut r = replica();
        r.apply_update(&json!({"Port": {"p0": {"new": {"name": "p0", "interfaces": ["uuid", "i0"],
            "tag": ["bogus"], "trunks": {"x": 1}}}}}))
            .unwrap();
        let (d, notes) = Desired::from_replica_with_notes(&r);
        assert!(notes.iter().any(|n| n.starts_with("Port p0 column tag: ")), "{notes:?}");
        assert!(notes.iter().any(|n| n == "Port gone: dangling reference, skipped"), "{notes:?}");
        assert!(notes.iter().any(|n| n.starts_with("interface p1: options:xdp-mode")), "{notes:?}");
        let b = d.bridge("br0").unwrap();
        assert_eq!(b.ports[0].tag, None);
        assert!(b.ports[0].trunks.is_empty());
        assert_eq!(b.ports[0].interfaces.len(), 1);
    }

    /// The desired state, and its notes, of a database whose
    /// `Open_vSwitch` row has `other_config` `kv` (and one bridge).
    fn with_ovs_other_config(kv: &[(&str, &str)]) -> (Desired, Vec<String>) {
        let mut r = replica();
        let m: Vec<_> = kv.iter().map(|(k, v)| json!([k, v])).collect();
        r.apply_update(&json!({"Open_vSwitch": {"o": {"new": {"bridges": ["uuid", "b"], "next_cfg": 7,
            "other_config": ["map", m]}}}}))
            .unwrap();
        Desired::from_replica_with_notes(&r)
    }

    #[test]
    fn emc_insert_inv_prob_read_and_bad_values_named() {
        let set = with_ovs_other_config;
        assert_eq!(set(&[]).0.emc_insert_inv_prob, None);
        assert_eq!(set(&[("emc-insert-inv-prob", "0")]).0.emc_insert_inv_prob, Some(0));
        assert_eq!(set(&[("emc-insert-inv-prob", "1")]).0.emc_insert_inv_prob, Some(1));
        let (d, notes) = set(&[("emc-insert-inv-prob", "-1")]);
        assert_eq!(d.emc_insert_inv_prob, None);
        assert!(notes.iter().any(|n| n.contains("other_config:emc-insert-inv-prob: \"-1\"")), "{notes:?}");
    }

    #[test]
    fn pmd_maxsleep_under_both_names() {
        let set = with_ovs_other_config;
        assert_eq!(set(&[]).0.pmd_maxsleep_us, None);
        assert_eq!(set(&[("pmd-maxsleep", "0")]).0.pmd_maxsleep_us, Some(0));
        assert_eq!(set(&[("pmd-sleep-max", "50")]).0.pmd_maxsleep_us, Some(50));
        let (d, notes) = set(&[("pmd-maxsleep", "soon")]);
        assert_eq!(d.pmd_maxsleep_us, None);
        assert!(notes.iter().any(|n| n.contains("other_config:pmd-maxsleep: \"soon\"")), "{notes:?}");
        // The kernel fast path: on unless "false"; bad values named and ignored.
        assert!(set(&[]).0.xdp_offload);
        let (d, _) = set(&[("xdp-offload", "false"), ("xdp-offload-pps", "50")]);
        assert!(!d.xdp_offload);
        assert_eq!(d.xdp_offload_pps, Some(50));
        let (d, notes) = set(&[("xdp-offload", "no"), ("xdp-offload-pps", "0")]);
        assert!(d.xdp_offload && d.xdp_offload_pps.is_none());
        assert!(notes.iter().any(|n| n.contains("other_config:xdp-offload: \"no\" is not true or false")), "{notes:?}");
        assert!(notes.iter().any(|n| n.contains("other_config:xdp-offload-pps: \"0\"")), "{notes:?}");
        // NAPI threads: off unless "true"; a bad value is named and ignored.
        assert!(!set(&[]).0.xdp_napi_threads);
        assert!(set(&[("xdp-napi-threads", "true")]).0.xdp_napi_threads);
        let (d, notes) = set(&[("xdp-napi-threads", "yes")]);
        assert!(!d.xdp_napi_threads);
        assert!(
            notes.iter().any(|n| n.contains("other_config:xdp-napi-threads: \"yes\" is not true or false")),
            "{notes:?}"
        );
    }

    #[test]
    fn kinds() {
        let o = |kv: &[(&str, &str)]| kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        assert_eq!(iface_kind("patch", &o(&[("peer", "x")])), Ok(IfaceKind::Patch { peer: "x".into() }));
        assert!(iface_kind("patch", &o(&[])).unwrap_err().starts_with("options:peer"));
        assert!(iface_kind("vxlan", &o(&[])).unwrap_err().starts_with("options:remote_ip: missing"));
        assert!(matches!(iface_kind("geneve", &o(&[("remote_ip", "10.0.0.2")])), Ok(IfaceKind::Tunnel(_))));
        assert!(iface_kind("stt", &o(&[])).unwrap_err().starts_with("type: \"stt\" is not one of"));
        assert!(iface_kind("afxdp", &o(&[("use-need-wakeup", "maybe")])).unwrap_err().starts_with("options:use-need"));
        assert!(iface_kind("afxdp", &o(&[("n_rxq", "0")])).unwrap_err().starts_with("options:n_rxq"));
        assert_eq!(iface_kind("", &o(&[])), Ok(IfaceKind::System));
        assert_eq!(
            iface_kind("dpdkvhostuserclient", &o(&[("vhost-server-path", "/run/vm1.sock")])),
            Ok(IfaceKind::VhostUserClient { path: "/run/vm1.sock".into() })
        );
        assert!(iface_kind("dpdkvhostuserclient", &o(&[])).unwrap_err().starts_with("options:vhost-server-path"));
        let pc = o(&[("vhost-server-path", "/x"), ("vhost-postcopy-support", "true")]);
        assert!(iface_kind("dpdkvhostuserclient", &pc).unwrap_err().starts_with("options:vhost-postcopy-support"));
        assert_eq!(iface_kind("dpdkvhostuser", &o(&[])), Ok(IfaceKind::VhostUser));
        assert!(iface_kind("dpdkvhostuser", &pc).unwrap_err().starts_with("options:vhost-postcopy-support"));
        assert!(matches!(iface_kind("ip6gre", &o(&[("remote_ip", "fd00::2")])), Ok(IfaceKind::Tunnel(_))));
    }
}
