//! The kernel fast path's maps, as userspace sees them.
//!
//! The XDP program (`fast_path` in `xdp_redirect.c`) looks each frame up in
//! `xvs_flows` by an exact key of every field it parses ([`FastKey`]); a hit
//! whose generation equals `xvs_gen[0]` is rewritten as [`FastAction`] says
//! and redirected through the `xvs_tx` device map. This module writes those
//! entries, the generation and the device map, and reads the per-entry and
//! per-outcome counters. The layouts here mirror the C structs field for
//! field (`#[repr(C)]`, checked by size assertions).

use crate::Error;
use aya::maps::{Array, DevMapHash, HashMap, MapData, PerCpuArray};
use aya::Pod;

/// Capacity of the flow map (`XVS_FLOWS` in the C).
pub const FLOWS: u32 = 16384;

/// `struct xvs_fkey`. Integers in host order except the addresses, which
/// are as on the wire (IPv4 in the first four bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FastKey {
    pub ifindex: u32,
    /// The outer VLAN TCI with 0x1000 set when tagged, 0 when not.
    pub vlan_tci: u16,
    pub dl_type: u16,
    pub dl_dst: [u8; 6],
    pub dl_src: [u8; 6],
    pub nw_proto: u8,
    pub nw_tos: u8,
    pub nw_ttl: u8,
    pub pad: u8,
    pub tp_src: u16,
    pub tp_dst: u16,
    pub nw_src: [u8; 16],
    pub nw_dst: [u8; 16],
    pub ipv6_label: u32,
}

/// Action flags of [`FastAction`].
pub mod act {
    pub const POP_VLAN: u16 = 1;
    pub const PUSH_VLAN: u16 = 2;
    pub const SET_DL_SRC: u16 = 4;
    pub const SET_DL_DST: u16 = 8;
    pub const SET_TTL: u16 = 16;
    /// Push the outer headers of a tunnel (see [`super::FastAction::hdr`]).
    pub const ENCAP: u16 = 32;
    /// NAT of a tracked connection (IPv4 TCP/UDP; see
    /// [`super::FastAction::nat_src`]).
    pub const SET_NW_SRC: u16 = 64;
    pub const SET_NW_DST: u16 = 128;
    pub const SET_TP_SRC: u16 = 256;
    pub const SET_TP_DST: u16 = 512;
    pub const NAT: u16 = SET_NW_SRC | SET_NW_DST | SET_TP_SRC | SET_TP_DST;
    /// The entry serves a tracked connection: TCP segments with SYN, FIN or
    /// RST, or without ACK, go to userspace.
    pub const CT: u16 = 1024;
}

/// `xvs_conf[0]` bit: finish partial TCP/UDP checksums
/// (`XVS_CONF_FINISH_CSUM` in the C).
const CONF_FINISH_CSUM: u32 = 1;

/// Largest outer header an entry can push (`XVS_ENCAP_MAX` in the C).
pub const ENCAP_MAX: usize = 80;

/// `struct xvs_fact`: applied in the order pop VLAN, push VLAN, Ethernet
/// addresses, TTL, tunnel encapsulation; then the frame goes to
/// `out_ifindex`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FastAction {
    pub out_ifindex: u32,
    /// Index of this entry's counters in `xvs_fcounts`.
    pub slot: u32,
    pub gen: u64,
    pub flags: u16,
    pub vlan_tci: u16,
    pub dl_src: [u8; 6],
    pub dl_dst: [u8; 6],
    pub ttl: u8,
    /// With [`act::ENCAP`]: the offset of the outer UDP header in `hdr`
    /// (0 for GRE), the header's length, the longest inner frame that may
    /// be encapsulated (longer ones go to userspace), and the folded
    /// ones-complement sum of the outer IPv4 header with its total length,
    /// identification and checksum zero. `hdr` starts with Ethernet and
    /// IPv4 (at offset 14); the program fills total length, identification
    /// and checksum, and the UDP length.
    pub encap_udp: u8,
    pub encap_len: u16,
    pub encap_max: u16,
    pub encap_sum: u16,
    pub hdr: [u8; ENCAP_MAX],
    /// With [`act::NAT`] flags: the addresses (as on the wire) and ports
    /// (host order) to write; the program updates the IPv4 and TCP/UDP
    /// checksums (a partial one is finished first, in native mode; in
    /// generic mode such a frame goes to userspace).
    pub nat_src: [u8; 4],
    pub nat_dst: [u8; 4],
    pub nat_sport: u16,
    pub nat_dport: u16,
    pub pad_end: u32,
}

impl Default for FastAction {
    fn default() -> FastAction {
        FastAction {
            out_ifindex: 0,
            slot: 0,
            gen: 0,
            flags: 0,
            vlan_tci: 0,
            dl_src: [0; 6],
            dl_dst: [0; 6],
            ttl: 0,
            encap_udp: 0,
            encap_len: 0,
            encap_max: 0,
            encap_sum: 0,
            hdr: [0; ENCAP_MAX],
            nat_src: [0; 4],
            nat_dst: [0; 4],
            nat_sport: 0,
            nat_dport: 0,
            pad_end: 0,
        }
    }
}

/// `struct xvs_dkey`: a tunnel frame the program decapsulates, by its
/// outer fields (Geneve without options or VXLAN over IPv4, no outer UDP
/// checksum) and its inner frame's [`FastKey`] (whose `ifindex` is the
/// receiving device). Addresses as on the wire, `dport` in host order.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DecapKey {
    pub inner: FastKey,
    pub dmac: [u8; 6],
    pub smac: [u8; 6],
    pub saddr: [u8; 4],
    pub daddr: [u8; 4],
    pub tos: u8,
    pub ttl: u8,
    /// 1 when the outer header has DF set.
    pub df: u8,
    pub pad: u8,
    pub dport: u16,
    pub pad2: u16,
    /// The 8-byte Geneve or VXLAN header as on the wire, then a Geneve
    /// frame's 8 bytes of options (zeros without options).
    pub th: [u8; 16],
}

/// Outer bytes the program removes when it decapsulates.
pub const DECAP_OUTER: usize = 50;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct FastCount {
    packets: u64,
    bytes: u64,
}

const _: () = assert!(std::mem::size_of::<FastKey>() == 64);
const _: () = assert!(std::mem::size_of::<FastAction>() == 40 + ENCAP_MAX + 16);
const _: () = assert!(std::mem::size_of::<FastCount>() == 16);
const _: () = assert!(std::mem::size_of::<DecapKey>() == 108);

// SAFETY: plain-old-data with no padding the kernel could leak: every byte
// of these repr(C) structs is a declared field (explicit `pad` fields), and
// any bit pattern is a valid value.
unsafe impl Pod for FastKey {}
// SAFETY: as above.
unsafe impl Pod for FastAction {}
// SAFETY: as above.
unsafe impl Pod for DecapKey {}
// SAFETY: as above.
unsafe impl Pod for FastCount {}

/// What happened to frames at the fast path, summed over CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FastStats {
    /// Forwarded by the kernel.
    pub hit: u64,
    /// No entry: to userspace.
    pub miss: u64,
    /// An entry of an older generation: to userspace.
    pub stale: u64,
    /// Not a frame the fast path parses (ARP, ND, fragments, QinQ, IPv6
    /// extension headers): to userspace.
    pub unparsed: u64,
    /// Dropped because a rewrite failed.
    pub error: u64,
    /// Too long to encapsulate within the underlay's MTU: to userspace.
    pub too_long: u64,
    /// A tracked connection's segment its tracker must see (SYN, FIN,
    /// RST, or no ACK), or, where the program does not finish checksums (generic
    /// mode), a partial checksum before NAT: to userspace.
    pub ct_slow: u64,
    /// A partial TCP/UDP checksum on an L4 segment longer than the program
    /// sums: to userspace, untouched.
    pub csum_too_long: u64,
    /// Partial TCP/UDP checksums (a local sender's offload) the program
    /// finished before forwarding the frame; also counted in `hit`.
    pub csum_finished: u64,
}

/// The fast-path maps of one attached program (one ingress device).
pub struct FastPath {
    flows: HashMap<MapData, FastKey, FastAction>,
    dflows: HashMap<MapData, DecapKey, FastAction>,
    dports: HashMap<MapData, u16, u8>,
    counts: PerCpuArray<MapData, FastCount>,
    gen: Array<MapData, u64>,
    /// Whether the program finishes partial checksums (native mode).
    finish_csum: bool,
    tx: DevMapHash<MapData>,
    stats: PerCpuArray<MapData, u64>,
}

impl FastPath {
    /// The maps of a loaded program. `finish_csum` says whether frames
    /// reach the program without their skb (native mode, and
    /// `BPF_PROG_TEST_RUN`): a redirect then forwards bare bytes, so the
    /// program must finish partial TCP/UDP checksums itself. In generic
    /// mode the skb, which still carries the sender's checksum offload,
    /// is what a redirect forwards, and the program leaves it as it is.
    pub(crate) fn from_ebpf(ebpf: &mut aya::Ebpf, finish_csum: bool) -> Result<FastPath, Error> {
        let mut take = |name: &str| {
            ebpf.take_map(name).ok_or_else(|| Error::Io(std::io::Error::other(format!("{name} missing from object"))))
        };
        let mut conf: Array<MapData, u32> = Array::try_from(take("xvs_conf")?)?;
        conf.set(0, if finish_csum { CONF_FINISH_CSUM } else { 0 }, 0)?;
        Ok(FastPath {
            finish_csum,
            flows: HashMap::try_from(take("xvs_flows")?)?,
            dflows: HashMap::try_from(take("xvs_dflows")?)?,
            dports: HashMap::try_from(take("xvs_dports")?)?,
            counts: PerCpuArray::try_from(take("xvs_fcounts")?)?,
            gen: Array::try_from(take("xvs_gen")?)?,
            tx: DevMapHash::try_from(take("xvs_tx")?)?,
            stats: PerCpuArray::try_from(take("xvs_fstats")?)?,
        })
    }

    /// Makes every entry written with another generation stale at once.
    /// Generation 0 turns the fast path off (frames skip it entirely).
    pub fn set_generation(&mut self, gen: u64) -> Result<(), Error> {
        self.gen.set(0, gen, 0)?;
        Ok(())
    }

    pub fn generation(&self) -> Result<u64, Error> {
        Ok(self.gen.get(&0, 0)?)
    }

    /// Allows redirects to device `ifindex`.
    pub fn add_output(&mut self, ifindex: u32) -> Result<(), Error> {
        self.tx
            .insert(ifindex, ifindex, None, 0)
            .map_err(|e| Error::Io(std::io::Error::other(format!("xvs_tx: {e}"))))?;
        Ok(())
    }

    pub fn remove_output(&mut self, ifindex: u32) -> Result<(), Error> {
        absent_ok(self.tx.remove(ifindex))
    }

    /// Installs an entry; its counters (slot `a.slot`) start from zero.
    pub fn insert(&mut self, k: &FastKey, a: &FastAction) -> Result<(), Error> {
        self.reset_counts(a.slot)?;
        self.flows.insert(k, a, 0)?;
        Ok(())
    }

    /// Zeroes the counters of `slot` for an entry about to use it.
    fn reset_counts(&mut self, slot: u32) -> Result<(), Error> {
        if slot >= FLOWS {
            return Err(Error::Io(std::io::Error::other(format!("slot {slot} out of range"))));
        }
        let zero = aya::maps::PerCpuValues::try_from(vec![
            FastCount::default();
            aya::util::nr_cpus().map_err(|(_, e)| Error::Io(e))?
        ])?;
        self.counts.set(slot, zero, 0)?;
        Ok(())
    }

    /// Installs a decapsulating entry (its counters start from zero) and
    /// lets the program look at frames to its UDP port.
    pub fn insert_decap(&mut self, k: &DecapKey, a: &FastAction) -> Result<(), Error> {
        self.reset_counts(a.slot)?;
        // Geneve (its version bits 0, and the key's options, if any, as
        // long as its length field says): the program reads the options'
        // length from the frame. VXLAN's header is always 8 bytes.
        let geneve = k.th[0] & 0xc0 == 0 && k.th[1] & 0x80 == 0 && k.th[2..4] == [0x65, 0x58];
        self.dports.insert(k.dport, if geneve { 2 } else { 1 }, 0)?;
        self.dflows.insert(k, a, 0)?;
        Ok(())
    }

    pub fn remove_decap(&mut self, k: &DecapKey) -> Result<(), Error> {
        absent_ok(self.dflows.remove(k))
    }

    pub fn remove(&mut self, k: &FastKey) -> Result<(), Error> {
        absent_ok(self.flows.remove(k))
    }

    /// Removes every entry.
    pub fn clear(&mut self) -> Result<usize, Error> {
        let keys: Vec<FastKey> = self.flows.keys().filter_map(|k| k.ok()).collect();
        for k in &keys {
            self.remove(k)?;
        }
        let dkeys: Vec<DecapKey> = self.dflows.keys().filter_map(|k| k.ok()).collect();
        for k in &dkeys {
            self.remove_decap(k)?;
        }
        Ok(keys.len() + dkeys.len())
    }

    pub fn len(&self) -> usize {
        self.flows.keys().filter(|k| k.is_ok()).count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// (packets, bytes) the kernel forwarded for the entry in `slot`.
    pub fn counts(&self, slot: u32) -> Result<(u64, u64), Error> {
        let v = self.counts.get(&slot, 0)?;
        Ok(v.iter().fold((0, 0), |(p, b), c| (p + c.packets, b + c.bytes)))
    }

    pub fn stats(&self) -> Result<FastStats, Error> {
        let s = |i: u32| -> Result<u64, Error> { Ok(self.stats.get(&i, 0)?.iter().sum()) };
        Ok(FastStats {
            hit: s(0)?,
            miss: s(1)?,
            stale: s(2)?,
            unparsed: s(3)?,
            error: s(4)?,
            too_long: s(5)?,
            ct_slow: s(6)?,
            csum_too_long: s(7)?,
            csum_finished: s(8)?,
        })
    }

    /// Whether the program finishes partial checksums (see
    /// [`FastPath::from_ebpf`]).
    pub fn finishes_checksums(&self) -> bool {
        self.finish_csum
    }
}

/// A removal's result, where the key not being there is no error.
fn absent_ok(r: Result<(), aya::maps::MapError>) -> Result<(), Error> {
    match r {
        Ok(()) | Err(aya::maps::MapError::KeyNotFound) => Ok(()),
        Err(aya::maps::MapError::SyscallError(e)) if e.io_error.raw_os_error() == Some(libc::ENOENT) => Ok(()),
        Err(e) => Err(e.into()),
    }
}
