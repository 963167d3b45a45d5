//! Typed configuration of a standalone switch, parsed once from the
//! command line. Errors name the offending field.

use anyhow::{bail, Result};
use ofproto::VlanMode;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortType {
    /// AF_XDP socket(s) on a kernel device.
    Afxdp,
    /// AF_XDP in best-effort mode, or AF_PACKET where XDP is refused.
    System,
    /// AF_PACKET only.
    AfPacket,
    /// A tap device the switch creates.
    Tap,
    /// The bridge's local port: a tap device named after the bridge.
    Internal,
    /// One end of an in-memory link to another bridge of this process
    /// (`peer` names the other end).
    Patch,
    /// A vhost-user port connecting to a VM frontend's socket
    /// (`vhost-server-path`), as OVS-DPDK's `dpdkvhostuserclient`.
    VhostUserClient,
    /// A vhost-user port whose socket (`vhost-server-path`) the switch
    /// creates and the frontend connects to, as OVS-DPDK's `dpdkvhostuser`.
    VhostUser,
    /// geneve, vxlan, gre (native tunneling; see [`crate::tnl`]).
    Tunnel,
}

impl PortType {
    /// Whether the port is a kernel network device of its name (held to
    /// a device name's length, with an MTU to set); patch, tunnel and
    /// vhost-user ports are not.
    pub fn is_kernel_device(self) -> bool {
        !matches!(self, PortType::Patch | PortType::Tunnel | PortType::VhostUserClient | PortType::VhostUser)
    }

    /// Whether frames sent to the port leave the switch there; patch,
    /// tunnel and local (internal) ports lead into a bridge's pipeline of
    /// their own.
    pub fn leaves_the_switch(self) -> bool {
        !matches!(self, PortType::Patch | PortType::Tunnel | PortType::Internal)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XdpModeCfg {
    Native,
    Generic,
    BestEffort,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortSpec {
    pub name: String,
    pub kind: PortType,
    pub xdp_mode: XdpModeCfg,
    pub need_wakeup: bool,
    pub n_rxq: usize,
    /// Share one UMEM with the poll thread's other AF_XDP ports (default)
    /// or copy every forwarded frame.
    pub shared_umem: bool,
    pub ofport: Option<u32>,
    pub vlan: VlanMode,
    /// For patch ports: the peer port's name.
    pub peer: Option<String>,
    /// AF_XDP transmit flush interval in µs (0: kick after every batch).
    pub tx_flush_us: u32,
    /// For dpdkvhostuserclient ports: the frontend's socket.
    pub vhost_server_path: Option<String>,
    /// vhost-user ports: how often a frame for a full guest receive queue
    /// is tried again before it is dropped (OVS's `tx-retries-max`).
    pub tx_retries_max: u32,
    /// A tunnel port's options (`PortType::Tunnel`).
    pub tunnel: Option<tunnel::config::PortCfg>,
}

impl PortSpec {
    pub fn new(name: &str) -> PortSpec {
        PortSpec {
            name: name.into(),
            kind: PortType::Afxdp,
            xdp_mode: XdpModeCfg::BestEffort,
            need_wakeup: true,
            n_rxq: 1,
            shared_umem: true,
            ofport: None,
            vlan: VlanMode::TrunkAll,
            peer: None,
            tx_flush_us: 0,
            tx_retries_max: 8,
            vhost_server_path: None,
            tunnel: None,
        }
    }

    /// Parses `IFACE[,key=value]...`.
    pub fn parse(s: &str) -> Result<PortSpec> {
        let mut parts = s.split(',');
        let name = parts.next().unwrap_or("").trim();
        crate::runfiles::check_port_name("port", name, false)?;
        if name.contains('=') {
            bail!("port '{s}': interface name must not contain '='");
        }
        let mut p = PortSpec::new(name);
        for kv in parts {
            let (k, v) = kv.split_once('=').ok_or_else(|| anyhow::anyhow!("port {name}: '{kv}' is not key=value"))?;
            let bad = |what: &str| anyhow::anyhow!("port {name}: bad {k} '{v}' ({what})");
            match k {
                "type" => {
                    p.kind = match v {
                        "afxdp" => PortType::Afxdp,
                        "system" => PortType::System,
                        "af_packet" | "afpacket" => PortType::AfPacket,
                        "tap" => PortType::Tap,
                        "internal" => PortType::Internal,
                        "patch" => PortType::Patch,
                        "dpdkvhostuserclient" => PortType::VhostUserClient,
                        "dpdkvhostuser" => PortType::VhostUser,
                        _ => return Err(bad("afxdp, system, af_packet, tap, internal, patch or dpdkvhostuserclient")),
                    }
                }
                "xdp-mode" => {
                    p.xdp_mode = match v {
                        "native" | "native-with-zerocopy" => XdpModeCfg::Native,
                        "generic" | "generic-skb" => XdpModeCfg::Generic,
                        "best-effort" => XdpModeCfg::BestEffort,
                        _ => return Err(bad("native, generic or best-effort")),
                    }
                }
                "need-wakeup" | "use-need-wakeup" => {
                    p.need_wakeup = parse_bool(v).ok_or_else(|| bad("true or false"))?
                }
                "n-rxq" | "n_rxq" => {
                    p.n_rxq = v.parse().ok().filter(|&n: &usize| (1..=64).contains(&n)).ok_or_else(|| bad("1-64"))?
                }
                "umem" => {
                    p.shared_umem = match v {
                        "shared" => true,
                        "copy" => false,
                        _ => return Err(bad("shared or copy")),
                    }
                }
                "ofport" => {
                    p.ofport =
                        Some(v.parse().ok().filter(|&n: &u32| (1..0xff00).contains(&n)).ok_or_else(|| bad("1-65279"))?)
                }
                "tag" => {
                    let t: u16 = v.parse().ok().filter(|&n: &u16| n < 4096).ok_or_else(|| bad("VLAN 0-4095"))?;
                    p.vlan = VlanMode::Access(t);
                }
                "trunks" => {
                    let mut list = Vec::new();
                    for t in v.split(':') {
                        list.push(
                            t.parse()
                                .ok()
                                .filter(|&n: &u16| n < 4096)
                                .ok_or_else(|| bad("VLANs 0-4095 separated by ':'"))?,
                        );
                    }
                    p.vlan = VlanMode::Trunk(list);
                }
                "tx-retries-max" => {
                    p.tx_retries_max = v.parse().ok().filter(|&n: &u32| n <= 32).ok_or_else(|| bad("0-32"))?
                }
                "tx-flush-us" => {
                    p.tx_flush_us = v.parse().ok().filter(|&n: &u32| n <= 1000).ok_or_else(|| bad("0-1000"))?
                }
                "vhost-server-path" => {
                    if v.is_empty() {
                        return Err(bad("the frontend's socket path"));
                    }
                    p.vhost_server_path = Some(v.to_string());
                }
                "peer" => {
                    if v.is_empty() || v.len() > 15 {
                        return Err(bad("a port name of 1-15 characters"));
                    }
                    p.peer = Some(v.to_string());
                }
                _ => bail!(
                    "port {name}: unknown option '{k}' (type, xdp-mode, need-wakeup, n-rxq, umem, ofport, tag, trunks, peer, tx-flush-us, vhost-server-path)"
                ),
            }
        }
        if p.kind == PortType::Patch && p.peer.is_none() {
            bail!("port {name}: type=patch needs peer=PORT");
        }
        if matches!(p.kind, PortType::VhostUserClient | PortType::VhostUser) && p.vhost_server_path.is_none() {
            bail!("port {name}: type=dpdkvhostuserclient or dpdkvhostuser needs vhost-server-path=PATH");
        }
        if p.vhost_server_path.is_some() && !matches!(p.kind, PortType::VhostUserClient | PortType::VhostUser) {
            bail!("port {name}: vhost-server-path is only for type=dpdkvhostuserclient or dpdkvhostuser");
        }
        if p.peer.is_some() && p.kind != PortType::Patch {
            bail!("port {name}: peer is only for type=patch");
        }
        crate::runfiles::check_port_name("port", name, p.kind.is_kernel_device())?;
        Ok(p)
    }
}

fn parse_bool(v: &str) -> Option<bool> {
    match v {
        "true" | "yes" | "on" | "1" => Some(true),
        "false" | "no" | "off" | "0" => Some(false),
        _ => None,
    }
}

/// How poll threads wait when their queues are empty.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PollMode {
    /// Spin at 100% of a core: lowest latency.
    Busy,
    /// Spin while traffic flows; after a short idle period, sleep in
    /// poll(2) on the ports' descriptors (or a 1 ms tick) until a packet
    /// arrives.
    Adaptive,
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn parse_ports() {
        let p = PortSpec::parse("veth0,type=afxdp,xdp-mode=generic,need-wakeup=false,n-rxq=2,ofport=7,tag=10").unwrap();
        assert_eq!(p.kind, PortType::Afxdp);
        assert_eq!(p.xdp_mode, XdpModeCfg::Generic);
        assert!(!p.need_wakeup);
        assert_eq!(p.n_rxq, 2);
        assert_eq!(p.ofport, Some(7));
        assert_eq!(p.vlan, VlanMode::Access(10));
        let e = PortSpec::parse("veth0,xdp-mode=bogus").unwrap_err().to_string();
        assert!(e.contains("xdp-mode") && e.contains("bogus"), "{e}");
        assert!(PortSpec::parse("veth0,n-rxq=0").unwrap_err().to_string().contains("n-rxq"));
        assert!(PortSpec::parse("veth0,colour=blue").unwrap_err().to_string().contains("colour"));
        assert_eq!(PortSpec::parse("a,trunks=1:2").unwrap().vlan, VlanMode::Trunk(vec![1, 2]));
        let v = PortSpec::parse("vhu1,type=dpdkvhostuserclient,vhost-server-path=/run/vm1.sock").unwrap();
        assert_eq!((v.kind, v.vhost_server_path.as_deref()), (PortType::VhostUserClient, Some("/run/vm1.sock")));
        let e = PortSpec::parse("vhu1,type=dpdkvhostuserclient").unwrap_err().to_string();
        assert!(e.contains("vhost-server-path"), "{e}");
        assert!(PortSpec::parse("veth0,vhost-server-path=/x").unwrap_err().to_string().contains("vhost-server-path"));
    }
}
