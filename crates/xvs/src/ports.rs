//! Opening ports from their typed configuration.

use crate::config::{PortSpec, PortType, XdpModeCfg};
use anyhow::{bail, Context, Result};
use netdev::Netdev;
use netdev_linux::{AfPacketPort, AfxdpConfig, AfxdpPort, TapPort, UmemConfig, UmemHandle, XdpMode};
use std::sync::Mutex;
use std::time::Duration;

/// One poll thread's UMEMs (shared with the same poll thread of the
/// process's other bridges: [`PatchRegistry::umem_slot`]). AF_XDP ports of
/// one group share a UMEM, so
/// forwarding between them moves descriptors, not bytes; a group is sized
/// for [`umem_frames`] frames, and a port whose queues do not fit in the
/// current group starts a new one (forwarding between groups copies).
/// Memory thus grows with the ports and queues instead of being reserved
/// up front: each queue holds up to [`FRAMES_PER_QUEUE`] frames (its
/// fill, RX, TX and completion rings).
#[derive(Default)]
pub struct UmemShare {
    groups: Vec<(UmemHandle, u32)>,
}

impl UmemShare {
    /// The group a port of `n_rxq` queues joins (made when none has room).
    fn group_for(&mut self, n_rxq: usize) -> Result<UmemHandle> {
        let need = FRAMES_PER_QUEUE * n_rxq.max(1) as u32;
        let size = umem_frames().max(need + IN_FLIGHT_FRAMES);
        if let Some((h, used)) = self.groups.iter_mut().find(|(_, used)| *used + need + IN_FLIGHT_FRAMES <= size) {
            *used += need;
            return Ok(h.clone());
        }
        let h = UmemHandle::new(UmemConfig { nframes: size, ..UmemConfig::default() })?;
        self.groups.push((h.clone(), need));
        Ok(h)
    }

    /// UMEM groups and their frames (for `memory/show`).
    pub fn sizes(&self) -> Vec<u32> {
        self.groups.iter().map(|(h, _)| h.config().nframes).collect()
    }
}

/// Frames one AF_XDP queue can hold: its fill and RX rings (1024 each)
/// and TX and completion rings (1024 each).
pub const FRAMES_PER_QUEUE: u32 = 4 * 1024;
/// Frames a group keeps for packets in flight in the datapath (batches,
/// parked packets, copies waiting for a TX slot).
pub const IN_FLIGHT_FRAMES: u32 = 1024;
/// The default size of a UMEM group: four queues' worth (68 MiB of 4 KiB
/// frames), so up to four single-queue ports share one UMEM.
pub const DEFAULT_UMEM_FRAMES: u32 = 4 * FRAMES_PER_QUEUE + IN_FLIGHT_FRAMES;

static UMEM_FRAMES: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(DEFAULT_UMEM_FRAMES);

/// Frames per UMEM group (`--umem-frames`, `other_config:xvs-umem-frames`);
/// applies to groups made from now on.
pub fn set_umem_frames(n: u32) {
    UMEM_FRAMES.store(n, std::sync::atomic::Ordering::Relaxed);
}

pub fn umem_frames() -> u32 {
    UMEM_FRAMES.load(std::sync::atomic::Ordering::Relaxed)
}

fn xdp_mode(m: XdpModeCfg) -> XdpMode {
    match m {
        XdpModeCfg::Native => XdpMode::Native,
        XdpModeCfg::Generic => XdpMode::Generic,
        XdpModeCfg::BestEffort => XdpMode::BestEffort,
    }
}

fn open_afxdp(spec: &PortSpec, mode: XdpModeCfg, umem: &Mutex<Option<UmemShare>>) -> Result<AfxdpPort> {
    let shared = if spec.shared_umem {
        let mut slot = umem.lock().expect("umem lock");
        let n_rxq =
            if spec.n_rxq == 0 { netdev_linux::afxdp::device_rx_queues(&spec.name).unwrap_or(1) } else { spec.n_rxq };
        Some(slot.get_or_insert_with(UmemShare::default).group_for(n_rxq)?)
    } else {
        None
    };
    let cfg = AfxdpConfig {
        xdp_mode: xdp_mode(mode),
        need_wakeup: spec.need_wakeup,
        n_rxq: spec.n_rxq,
        shared_umem: shared,
        tx_flush_us: spec.tx_flush_us,
        ..AfxdpConfig::default()
    };
    let port = AfxdpPort::open(&spec.name, cfg).map_err(|e| {
        if e.raw_os_error() == Some(16) {
            // EBUSY: say what it means here.
            anyhow::anyhow!(
                "port {}: the device already has an XDP program attached (a port of another xvs or OVS instance, \
                 or another XDP user): {e}",
                spec.name
            )
        } else {
            anyhow::Error::new(e).context(format!("port {}: opening AF_XDP", spec.name))
        }
    })?;
    if port.info().xdp_mode == "generic" {
        // Generic XDP sees an skb after the stack merged or never split
        // it: a sender's TSO/GSO segment or a GRO'd one, up to 64 KiB,
        // which no 4 KiB UMEM frame takes. Say so once, where users look.
        eprintln!(
            "xvs: port {}: generic XDP mode: frames longer than the MTU (a veth peer's TSO/GSO segments, GRO              super-frames) cannot be received and are dropped (rx_dropped in `xvs show`); native mode, the              default where the driver has it, does not have this limit, or turn TSO off at the sender",
            spec.name
        );
    }
    Ok(port)
}

/// Ends of patch-port pairs whose peer has not been added yet, shared by
/// every bridge of a process: the first end added creates the pair and
/// parks the other end here under the peer's name.
///
/// It also holds the process's native-tunneling state ([`crate::tnl`]),
/// which the bridges share the same way, and the UMEM slots of their poll
/// threads ([`PatchRegistry::umem_slot`]).
#[derive(Default)]
pub struct PatchRegistry {
    parked: Mutex<std::collections::HashMap<String, netdev::patch::PatchPort>>,
    pub tnl: std::sync::Arc<crate::tnl::TnlEnv>,
    umems: Mutex<Vec<std::sync::Weak<Mutex<Option<UmemShare>>>>>,
}

/// A poll thread's UMEM groups (see [`UmemShare`]), shared by the poll
/// threads of that index of every bridge in the process.
pub type UmemSlot = std::sync::Arc<Mutex<Option<UmemShare>>>;

impl PatchRegistry {
    /// The end named `name` whose other end is `peer`.
    pub fn take(&self, name: &str, peer: &str) -> Result<netdev::patch::PatchPort> {
        let mut parked = self.parked.lock().expect("patch registry");
        if let Some(p) = parked.remove(name) {
            if p.peer() != peer {
                let other = p.peer().to_string();
                parked.insert(name.to_string(), p);
                bail!("patch port {name}: peer {peer} does not match its peer's setting ({other})");
            }
            return Ok(p);
        }
        let (mine, theirs) = netdev::patch::PatchPort::pair(name, peer);
        parked.insert(peer.to_string(), theirs);
        Ok(mine)
    }

    /// The UMEM slot of poll thread `pmd`, the same for every bridge of the
    /// process: a tunnel port's frames go from br-int's ports to br-phy's
    /// (and back) in one poll thread (`switch::run_peers`), and ports of
    /// one UMEM send each other's frames without a copy. The slot lives as
    /// long as a bridge holds it.
    pub fn umem_slot(&self, pmd: usize) -> UmemSlot {
        let mut v = self.umems.lock().expect("umem slots");
        if v.len() <= pmd {
            v.resize_with(pmd + 1, std::sync::Weak::new);
        }
        if let Some(s) = v[pmd].upgrade() {
            return s;
        }
        let s: UmemSlot = Default::default();
        v[pmd] = std::sync::Arc::downgrade(&s);
        s
    }
}

/// Opens the device a port spec describes. `umem` is the owning poll
/// thread's shared UMEM slot.
pub fn open(
    spec: &PortSpec,
    bridge: &str,
    umem: &Mutex<Option<UmemShare>>,
    patches: &PatchRegistry,
) -> Result<Box<dyn Netdev>> {
    if matches!(spec.kind, PortType::Afxdp | PortType::System | PortType::AfPacket) {
        crate::runfiles::check_device(&spec.name)?;
    }
    Ok(match spec.kind {
        PortType::Patch => Box::new(patches.take(&spec.name, spec.peer.as_deref().unwrap_or(""))?),
        PortType::Afxdp => Box::new(open_afxdp(spec, spec.xdp_mode, umem)?),
        PortType::System => match open_afxdp(spec, XdpModeCfg::BestEffort, umem) {
            Ok(p) => Box::new(p),
            Err(e) => {
                eprintln!("xvs: port {}: AF_XDP refused ({e:#}); falling back to AF_PACKET", spec.name);
                Box::new(
                    AfPacketPort::open(&spec.name).with_context(|| format!("port {}: opening AF_PACKET", spec.name))?,
                )
            }
        },
        PortType::AfPacket => {
            Box::new(AfPacketPort::open(&spec.name).with_context(|| format!("port {}: opening AF_PACKET", spec.name))?)
        }
        PortType::Tap => {
            Box::new(TapPort::open(&spec.name).with_context(|| format!("port {}: opening tap", spec.name))?)
        }
        PortType::VhostUserClient => {
            let path = spec.vhost_server_path.as_deref().unwrap_or("");
            let mut p = netdev_vhost::VhostUserClientPort::new(&spec.name, std::path::Path::new(path))
                .context("opening vhost-user port")?;
            p.set_tx_retries_max(spec.tx_retries_max);
            Box::new(p)
        }
        PortType::VhostUser => {
            let path = spec.vhost_server_path.as_deref().unwrap_or("");
            let mut p = netdev_vhost::VhostUserClientPort::new_server(&spec.name, std::path::Path::new(path))
                .context("opening vhost-user server port")?;
            p.set_tx_retries_max(spec.tx_retries_max);
            Box::new(p)
        }
        PortType::Internal => {
            let name = if spec.name.is_empty() { bridge } else { &spec.name };
            let mut tap = TapPort::internal(name).with_context(|| format!("port {name}: opening internal port"))?;
            if PERSIST_INTERNAL.load(std::sync::atomic::Ordering::Relaxed) {
                if let Err(e) = tap.set_persistent(true) {
                    eprintln!("xvs: port {name}: cannot keep the device across restarts: {e}");
                }
            }
            let tap = Box::new(tap);
            if name == bridge {
                // The bridge's local port: where tunnel frames leave and arrive.
                Box::new(crate::tnl::LocalPort::new(tap, bridge, &patches.tnl))
            } else {
                tap
            }
        }
        PortType::Tunnel => {
            let cfg =
                spec.tunnel.clone().ok_or_else(|| anyhow::anyhow!("port {}: tunnel options missing", spec.name))?;
            Box::new(crate::tnl::TunnelPort::new(&spec.name, bridge, cfg, &patches.tnl))
        }
    })
}

/// Internal ports outlive the process (set by the database-driven daemon,
/// as ovs-vswitchd keeps them): a restart finds the bridge's local port with
/// its addresses and routes. Removing the port from the configuration
/// removes the device ([`release_device`]).
pub static PERSIST_INTERNAL: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Lets a port's kernel device go when the port closes (it was removed from
/// the configuration, not merely stopped).
pub fn release_device(dev: &mut dyn Netdev) {
    if let Some(t) = dev.as_any_mut().and_then(|a| a.downcast_mut::<TapPort>()) {
        let _ = t.set_persistent(false);
    }
}

/// Waits until one of `fds` is readable or `timeout_ms` passes.
pub fn poll_readable(fds: &[i32], timeout_ms: i32) {
    if netdev_linux::sys::poll_any(fds, timeout_ms).is_err() {
        std::thread::sleep(Duration::from_millis(timeout_ms.max(0) as u64));
    }
}

#[cfg(test)]
mod umem_group_tests {
    use super::*;

    /// Single-queue ports share a group until its rings are spoken for;
    /// a port wider than a group gets one of its own size.
    #[test]
    fn ports_fill_a_group_then_start_another() {
        let mut u = UmemShare::default();
        let ids: Vec<u64> = (0..5).map(|_| u.group_for(1).unwrap().id()).collect();
        assert!(ids[..4].iter().all(|&i| i == ids[0]), "four single-queue ports share the first group: {ids:?}");
        assert_ne!(ids[4], ids[0], "the fifth starts a second group");
        let wide = u.group_for(8).unwrap();
        assert!(wide.config().nframes >= 8 * FRAMES_PER_QUEUE + IN_FLIGHT_FRAMES);
        assert_eq!(u.sizes().len(), 3);
        assert_eq!(u.sizes()[0], DEFAULT_UMEM_FRAMES);
    }

    /// The bridges of one process get the same slot for a poll thread
    /// index (so tunnel traffic between them is not copied), another
    /// index gets another slot, and a slot no bridge holds any more is
    /// made afresh.
    #[test]
    fn bridges_share_a_poll_threads_umem_slot() {
        let reg = PatchRegistry::default();
        let (a0, b0, a1) = (reg.umem_slot(0), reg.umem_slot(0), reg.umem_slot(1));
        assert!(std::sync::Arc::ptr_eq(&a0, &b0));
        assert!(!std::sync::Arc::ptr_eq(&a0, &a1));
        *a0.lock().unwrap() = Some(UmemShare::default());
        assert!(b0.lock().unwrap().is_some(), "one slot seen from both bridges");
        drop((a0, b0));
        assert!(reg.umem_slot(0).lock().unwrap().is_none(), "released with its last bridge");
    }
}
