//! # bpf: the XDP side of AF_XDP ports
//!
//! One tiny XDP program ([`xdp_redirect.c`](../src/xdp_redirect.c), built
//! by `build.rs` with clang) redirects every frame to the AF_XDP socket
//! registered in its `XSKMAP` for the frame's receive queue, and passes the
//! frame to the kernel stack when that queue has no socket.
//!
//! In front of that redirect sits an optional **kernel fast path**
//! ([`fastpath`]): exact-match entries that userspace offloads for hot
//! flows, forwarded with `bpf_redirect_map` through a device map without
//! any AF_XDP socket, skb or `sendto`. It is off (generation 0) until
//! userspace enables it, and then costs a parse and one hash lookup per
//! frame; the soundness argument is at the top of the C program.
//! [`TestProgram`] runs frames through the program with
//! `BPF_PROG_TEST_RUN`, unattached.
//!
//! [`XdpProgram::attach`] loads a fresh copy of the program (so every device
//! has its own map) with aya and attaches it to a device. [`Attached`]
//! manages the map entries and detaches the program when dropped.
//!
//! ## Attachment: bpf_link, and what a restart after `kill -9` sees
//!
//! aya attaches through `BPF_LINK_CREATE` (a bpf_link). A bpf_link lives as
//! long as its file descriptor, so when the process dies for any reason,
//! including `kill -9`, the kernel detaches the program: nothing is left on
//! the device and the AF_XDP sockets die with the process too. A netlink
//! attachment (`IFLA_XDP_FD`) is a property of the device and would outlive
//! the process, leaving a program that redirects traffic into a map with no
//! sockets (harmless here thanks to the XDP_PASS fallback, but it blocks a
//! later attach in the other mode and confuses operators). We therefore use
//! bpf_link; aya falls back to netlink only on kernels without XDP links
//! (< 5.9). For such leftovers, and for programs other tools attached,
//! [`detach_any_xdp`] clears the device (a live bpf_link owned by another
//! running process cannot be removed that way: the kernel answers `EBUSY`,
//! which is the right outcome).

#![warn(clippy::undocumented_unsafe_blocks)]

pub mod fastpath;
mod netlink;

use aya::maps::{MapData, XskMap};
use aya::programs::{Xdp, XdpMode as AyaMode};
use aya::{Ebpf, EbpfLoader};
use std::ffi::CString;
use std::fmt;
use std::io;
use std::os::fd::RawFd;

pub use fastpath::{DecapKey, FastAction, FastKey, FastPath, FastStats};
pub use netlink::XdpHooks;

/// Maximum queue index + 1 the map can hold (`XVS_MAX_QUEUES` in the C).
pub const MAX_QUEUES: u32 = 64;

#[repr(C, align(8))]
struct Aligned<B: ?Sized> {
    bytes: B,
}

/// The compiled object, 8-byte aligned as the ELF parser expects.
static OBJECT: &Aligned<[u8]> = &Aligned { bytes: *include_bytes!(concat!(env!("OUT_DIR"), "/xdp_redirect.o")) };

/// The compiled XDP object (ELF), e.g. for `ip link set ... xdp obj`.
pub fn object_bytes() -> &'static [u8] {
    &OBJECT.bytes
}

const PROG: &str = "xvs_xsk_redirect";
const PROG_FRAGS: &str = "xvs_xsk_redirect_frags";
const MAP: &str = "xsks_map";

/// Requested XDP mode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum XdpMode {
    /// Driver (native) XDP; fail if the driver lacks it.
    Native,
    /// Generic (skb) XDP, which every device supports.
    Generic,
    /// Native if the driver supports it, generic otherwise.
    #[default]
    BestEffort,
}

/// The mode a program actually runs in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActiveMode {
    Native,
    Generic,
}

impl ActiveMode {
    pub fn as_str(self) -> &'static str {
        match self {
            ActiveMode::Native => "native",
            ActiveMode::Generic => "generic",
        }
    }
}

impl fmt::Display for ActiveMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("no such network interface: {0}")]
    NoSuchInterface(String),
    #[error("loading the XDP object: {0}")]
    Load(#[from] aya::EbpfError),
    #[error("XDP program: {0}")]
    Program(#[from] aya::programs::ProgramError),
    #[error("XSKMAP: {0}")]
    Map(#[from] aya::maps::MapError),
    #[error("attaching XDP to {iface} in {mode} mode: {source}")]
    Attach {
        iface: String,
        mode: &'static str,
        #[source]
        source: aya::programs::ProgramError,
    },
    #[error("queue {0} is beyond the XSKMAP size {MAX_QUEUES}")]
    QueueOutOfRange(u32),
    #[error("{0}")]
    Io(#[from] io::Error),
}

impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        match e {
            Error::Io(e) => e,
            Error::NoSuchInterface(_) => io::Error::new(io::ErrorKind::NotFound, e.to_string()),
            other => io::Error::other(other.to_string()),
        }
    }
}

/// An interface by name or index.
#[derive(Clone, Debug)]
pub enum Iface {
    Name(String),
    Index(u32),
}

impl From<&str> for Iface {
    fn from(s: &str) -> Iface {
        Iface::Name(s.to_string())
    }
}

impl From<String> for Iface {
    fn from(s: String) -> Iface {
        Iface::Name(s)
    }
}

impl From<u32> for Iface {
    fn from(i: u32) -> Iface {
        Iface::Index(i)
    }
}

/// Interface index of `name`.
pub fn ifindex(name: &str) -> Result<u32, Error> {
    let c = CString::new(name).map_err(|_| Error::NoSuchInterface(name.to_string()))?;
    // SAFETY: `c` is a valid NUL-terminated string for the duration of the call.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if idx == 0 {
        return Err(Error::NoSuchInterface(name.to_string()));
    }
    Ok(idx)
}

/// Name of interface `index`.
pub fn ifname(index: u32) -> Result<String, Error> {
    let mut buf = [0u8; libc::IF_NAMESIZE];
    // SAFETY: `buf` has the IF_NAMESIZE bytes if_indextoname may write.
    let p = unsafe { libc::if_indextoname(index, buf.as_mut_ptr() as *mut libc::c_char) };
    if p.is_null() {
        return Err(Error::NoSuchInterface(format!("ifindex {index}")));
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Ok(String::from_utf8_lossy(&buf[..end]).into_owned())
}

fn resolve(iface: Iface) -> Result<(u32, String), Error> {
    match iface {
        Iface::Name(n) => Ok((ifindex(&n)?, n)),
        Iface::Index(i) => Ok((i, ifname(i)?)),
    }
}

/// Loader for the redirect program.
pub struct XdpProgram;

impl XdpProgram {
    /// Loads the program and attaches it to `iface` in `mode`.
    pub fn attach(iface: impl Into<Iface>, mode: XdpMode) -> Result<Attached, Error> {
        Self::attach_with(iface, mode, false)
    }

    /// As [`XdpProgram::attach`], with the multi-buffer (`xdp.frags`)
    /// variant, required on devices whose MTU exceeds one page; sockets
    /// must then bind with `XDP_USE_SG`.
    pub fn attach_frags(iface: impl Into<Iface>, mode: XdpMode) -> Result<Attached, Error> {
        Self::attach_with(iface, mode, true)
    }

    fn attach_with(iface: impl Into<Iface>, mode: XdpMode, frags: bool) -> Result<Attached, Error> {
        let (ifindex, ifname) = resolve(iface.into())?;
        let mut ebpf = EbpfLoader::new().load(&OBJECT.bytes)?;
        let name = if frags { PROG_FRAGS } else { PROG };
        let prog: &mut Xdp = ebpf
            .program_mut(name)
            .ok_or_else(|| Error::Io(io::Error::other(format!("program {name} missing from object"))))?
            .try_into()?;
        load_xdp(prog)?;
        let try_mode = |prog: &mut Xdp, m: ActiveMode| {
            let aya_mode = match m {
                ActiveMode::Native => AyaMode::Driver,
                ActiveMode::Generic => AyaMode::Skb,
            };
            prog.attach_to_if_index(ifindex, aya_mode).map(|_| m).map_err(|source| Error::Attach {
                iface: ifname.clone(),
                mode: m.as_str(),
                source,
            })
        };
        let active = match mode {
            XdpMode::Native => try_mode(prog, ActiveMode::Native)?,
            XdpMode::Generic => try_mode(prog, ActiveMode::Generic)?,
            XdpMode::BestEffort => match try_mode(prog, ActiveMode::Native) {
                Ok(m) => m,
                Err(_) => try_mode(prog, ActiveMode::Generic)?,
            },
        };
        let map = ebpf.take_map(MAP).ok_or_else(|| Error::Io(io::Error::other("xsks_map missing from object")))?;
        let map = XskMap::try_from(map)?;
        // The fast path runs in the single-buffer program only.
        let fast = if frags { None } else { Some(FastPath::from_ebpf(&mut ebpf, active == ActiveMode::Native)?) };
        Ok(Attached { ebpf: Some(ebpf), map, ifindex, ifname, mode: active, frags, fast })
    }
}

/// A counting sink for benchmarks: an XDP program that counts every frame
/// arriving on a device and drops it. Dropping the sink detaches it.
pub struct XdpSink {
    ebpf: Ebpf,
    mode: ActiveMode,
}

impl XdpSink {
    pub fn attach(iface: impl Into<Iface>, mode: XdpMode) -> Result<XdpSink, Error> {
        let (ifindex, ifname) = resolve(iface.into())?;
        let mut ebpf = EbpfLoader::new().load(&OBJECT.bytes)?;
        let prog: &mut Xdp = ebpf
            .program_mut("xvs_count_drop")
            .ok_or_else(|| Error::Io(io::Error::other("program xvs_count_drop missing from object")))?
            .try_into()?;
        load_xdp(prog)?;
        let mut attach = |m: ActiveMode| {
            let aya_mode = if m == ActiveMode::Native { AyaMode::Driver } else { AyaMode::Skb };
            prog.attach_to_if_index(ifindex, aya_mode).map(|_| m).map_err(|source| Error::Attach {
                iface: ifname.clone(),
                mode: m.as_str(),
                source,
            })
        };
        let mode = match mode {
            XdpMode::Native => attach(ActiveMode::Native)?,
            XdpMode::Generic => attach(ActiveMode::Generic)?,
            XdpMode::BestEffort => match attach(ActiveMode::Native) {
                Ok(m) => m,
                Err(_) => attach(ActiveMode::Generic)?,
            },
        };
        Ok(XdpSink { ebpf, mode })
    }

    pub fn mode(&self) -> ActiveMode {
        self.mode
    }

    /// (packets, bytes) counted so far, summed over CPUs.
    pub fn counts(&self) -> Result<(u64, u64), Error> {
        let map = self.ebpf.map("xvs_counters").ok_or_else(|| Error::Io(io::Error::other("xvs_counters missing")))?;
        let arr: aya::maps::PerCpuArray<&MapData, u64> = aya::maps::PerCpuArray::try_from(map)?;
        let sum = |i: u32| -> Result<u64, Error> { Ok(arr.get(&i, 0)?.iter().sum()) };
        Ok((sum(0)?, sum(1)?))
    }
}

/// A program attached to a device. Dropping it detaches the program.
pub struct Attached {
    // Holds the program and its link; dropped (detached) explicitly.
    ebpf: Option<Ebpf>,
    map: XskMap<MapData>,
    ifindex: u32,
    ifname: String,
    mode: ActiveMode,
    frags: bool,
    fast: Option<FastPath>,
}

impl Attached {
    /// The kernel fast path of this device's program (`None` for the
    /// multi-buffer variant, which always hands frames to the socket).
    pub fn fast_path(&mut self) -> Option<&mut FastPath> {
        self.fast.as_mut()
    }

    /// Hands the fast-path maps to their manager. The maps stay in use by
    /// the attached program; the handle keeps working after this.
    pub fn take_fast_path(&mut self) -> Option<FastPath> {
        self.fast.take()
    }

    /// Registers AF_XDP socket `fd` for receive queue `queue`.
    pub fn insert_socket(&mut self, queue: u32, fd: RawFd) -> Result<(), Error> {
        if queue >= MAX_QUEUES {
            return Err(Error::QueueOutOfRange(queue));
        }
        self.map.set(queue, fd, 0)?;
        Ok(())
    }

    /// Removes the socket of `queue`; its frames go to the stack again.
    pub fn remove_socket(&mut self, queue: u32) -> Result<(), Error> {
        if queue >= MAX_QUEUES {
            return Err(Error::QueueOutOfRange(queue));
        }
        match self.map.unset(queue) {
            Ok(()) => Ok(()),
            // Not present: nothing to remove.
            Err(aya::maps::MapError::SyscallError(e)) if e.io_error.raw_os_error() == Some(libc::ENOENT) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    pub fn mode(&self) -> ActiveMode {
        self.mode
    }

    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    pub fn ifname(&self) -> &str {
        &self.ifname
    }

    /// Whether the multi-buffer variant is attached.
    pub fn frags(&self) -> bool {
        self.frags
    }

    /// Detaches now (also done on drop).
    pub fn detach(mut self) {
        self.ebpf.take();
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        // Dropping the Ebpf drops the program, which detaches its links
        // (closing the bpf_link fd) and unloads it.
        self.ebpf.take();
    }
}

impl fmt::Debug for Attached {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Attached").field("ifname", &self.ifname).field("mode", &self.mode).finish()
    }
}

/// The XDP programs attached to `ifname`, by hook.
pub fn xdp_hooks(ifname: &str) -> Result<XdpHooks, Error> {
    Ok(netlink::query(ifindex(ifname)?)?)
}

/// Removes every XDP program attached to `ifname` through netlink (the
/// equivalent of `ip link set dev IFNAME xdp off` for each hook), e.g. one
/// left by an earlier process. Returns what was attached before. Fails with
/// `EBUSY` if a live bpf_link (a running process) holds the hook.
pub fn detach_any_xdp(ifname: &str) -> Result<XdpHooks, Error> {
    let idx = ifindex(ifname)?;
    let before = netlink::query(idx)?;
    if before.native_prog_id.is_some() {
        netlink::detach(idx, netlink::XDP_FLAGS_DRV_MODE)?;
    }
    if before.generic_prog_id.is_some() {
        netlink::detach(idx, netlink::XDP_FLAGS_SKB_MODE)?;
    }
    if before.offload_prog_id.is_some() {
        netlink::detach(idx, netlink::XDP_FLAGS_HW_MODE)?;
    }
    Ok(before)
}

/// The redirect program loaded but not attached, to run frames through it
/// with `BPF_PROG_TEST_RUN` (the differential tests of the fast path).
pub struct TestProgram {
    ebpf: Ebpf,
    pub fast: FastPath,
}

/// `struct xdp_md` as `BPF_PROG_TEST_RUN` takes it for the context.
#[repr(C)]
#[derive(Default)]
struct XdpMd {
    data: u32,
    data_end: u32,
    data_meta: u32,
    ingress_ifindex: u32,
    rx_queue_index: u32,
    egress_ifindex: u32,
}

impl TestProgram {
    /// The program as a native-mode port runs it: a test run hands it an
    /// xdp_buff with no skb behind it, so it finishes partial checksums.
    pub fn load() -> Result<TestProgram, Error> {
        Self::load_with(true)
    }

    /// The program with its partial-checksum setting as for a port in
    /// native (`true`) or generic (`false`) mode.
    pub fn load_with(finish_csum: bool) -> Result<TestProgram, Error> {
        let mut ebpf = EbpfLoader::new().load(&OBJECT.bytes)?;
        let prog: &mut Xdp = ebpf
            .program_mut(PROG)
            .ok_or_else(|| Error::Io(io::Error::other(format!("program {PROG} missing from object"))))?
            .try_into()?;
        load_xdp(prog)?;
        let fast = FastPath::from_ebpf(&mut ebpf, finish_csum)?;
        Ok(TestProgram { ebpf, fast })
    }

    /// Runs one frame as if received on `ingress_ifindex` (a real device,
    /// queue 0); returns the XDP verdict and the frame as the program left
    /// it.
    pub fn run(&mut self, frame: &[u8], ingress_ifindex: u32) -> Result<(u32, Vec<u8>), Error> {
        use aya::programs::{TestRun, TestRunOptions};
        let prog: &Xdp =
            self.ebpf.program(PROG).ok_or_else(|| Error::Io(io::Error::other("program missing")))?.try_into()?;
        let md = XdpMd { data_end: frame.len() as u32, ingress_ifindex, ..XdpMd::default() };
        let ctx: Vec<u8> =
            [md.data, md.data_end, md.data_meta, md.ingress_ifindex, md.rx_queue_index, md.egress_ifindex]
                .iter()
                .flat_map(|v| v.to_ne_bytes())
                .collect();
        let mut out = vec![0u8; frame.len() + 256];
        let r = prog.test_run(TestRunOptions {
            data_in: Some(frame),
            data_out: Some(&mut out),
            ctx_in: Some(&ctx),
            ..TestRunOptions::default()
        })?;
        out.truncate(r.data_size_out as usize);
        Ok((r.return_value, out))
    }
}

/// Bytes of each template [`XdpGen`] writes over a frame (`XVS_GEN_HDR` in
/// the C).
pub const GEN_HDR: usize = 256;

/// A benchmark generator that transmits from inside the kernel: the
/// `xvs_pktgen` program, run unattached with `BPF_PROG_TEST_RUN` in live-frames
/// mode, redirects each repetition's frame to a device, cycling through up to
/// millions of templates. Into a veth whose peer runs XDP (an AF_XDP port)
/// no skb is built, so one core offers several times what a packet socket
/// can: enough to make the switch, not the generator, the bottleneck.
///
/// All templates have one length, and may differ only in their first
/// [`GEN_HDR`] bytes (headers: addresses, ports, tunnel fields); the rest of
/// every frame is the first template's.
pub struct XdpGen {
    ebpf: Ebpf,
    first: Vec<u8>,
}

impl XdpGen {
    /// Loads the program with `frames` as templates, sending to `ifindex`
    /// (in the caller's network namespace).
    pub fn load(ifindex: u32, frames: &[Vec<u8>]) -> Result<XdpGen, Error> {
        let bad = |m: String| Error::Io(io::Error::new(io::ErrorKind::InvalidInput, m));
        let first = frames.first().ok_or_else(|| bad("no frames to send".into()))?.clone();
        let len = first.len();
        if !(14..=3000).contains(&len) {
            return Err(bad(format!("frame length {len}: must be 14-3000 bytes")));
        }
        // The program copies whole 8-byte words within the frame: the bytes
        // after the last full word come from the first template only.
        let words_end = (len.min(GEN_HDR)) & !7;
        let mut copy = 0usize;
        for (i, f) in frames.iter().enumerate() {
            if f.len() != len {
                return Err(bad(format!("frame {i} is {} bytes, frame 0 is {len}: all must be one length", f.len())));
            }
            if let Some(last) = (0..len).rev().find(|&b| f[b] != first[b]) {
                if last >= words_end {
                    return Err(bad(format!(
                        "frame {i} differs from frame 0 at byte {last}: templates may differ only in their first {words_end} bytes"
                    )));
                }
                copy = copy.max((last + 1).next_multiple_of(8));
            }
        }
        let n = u32::try_from(frames.len()).map_err(|_| bad("too many frames".into()))?;
        let mut ebpf = EbpfLoader::new().map_max_entries("xvs_gen_frames", n).load(&OBJECT.bytes)?;
        let prog: &mut Xdp = ebpf
            .program_mut("xvs_pktgen")
            .ok_or_else(|| Error::Io(io::Error::other("program xvs_pktgen missing from object")))?
            .try_into()?;
        load_xdp(prog)?;
        if n > 1 {
            let map =
                ebpf.map_mut("xvs_gen_frames").ok_or_else(|| Error::Io(io::Error::other("xvs_gen_frames missing")))?;
            let mut arr: aya::maps::Array<&mut MapData, [u8; GEN_HDR]> = aya::maps::Array::try_from(map)?;
            for (i, f) in frames.iter().enumerate() {
                let mut v = [0u8; GEN_HDR];
                let k = len.min(GEN_HDR);
                v[..k].copy_from_slice(&f[..k]);
                arr.set(i as u32, v, 0)?;
            }
        }
        let map = ebpf.map_mut("xvs_gen_conf").ok_or_else(|| Error::Io(io::Error::other("xvs_gen_conf missing")))?;
        let mut conf: aya::maps::Array<&mut MapData, [u32; 4]> = aya::maps::Array::try_from(map)?;
        conf.set(0, [ifindex, n, copy as u32, 0], 0)?;
        Ok(XdpGen { ebpf, first })
    }

    /// Sends `count` frames in the calling thread (which the kernel keeps on
    /// its CPU for the call), `batch` at a time (0: the kernel's default,
    /// 64). Frames the device refuses (its peer's ring full) are dropped
    /// by the kernel uncounted here: count at the receiver.
    pub fn send(&mut self, count: u32, batch: u32) -> Result<(), Error> {
        use aya::programs::{TestRun, TestRunAttrs, TestRunOptions};
        let prog: &Xdp = self
            .ebpf
            .program("xvs_pktgen")
            .ok_or_else(|| Error::Io(io::Error::other("program missing")))?
            .try_into()?;
        prog.test_run(TestRunOptions {
            data_in: Some(&self.first),
            repeat: count,
            attrs: TestRunAttrs::new().xdp_live_frames(batch),
            ..TestRunOptions::default()
        })?;
        Ok(())
    }
}

/// Loads `prog`, again if its verification was interrupted: the verifier
/// stops with EAGAIN when a signal reaches the loading thread while it
/// works (the fast-path program takes it a while, and a test process has
/// children), and the load then only needs another try, as libbpf retries
/// it.
fn load_xdp(prog: &mut Xdp) -> Result<(), aya::programs::ProgramError> {
    let mut tries = 0;
    loop {
        match prog.load() {
            Err(aya::programs::ProgramError::LoadError { io_error, .. })
                if io_error.raw_os_error() == Some(libc::EAGAIN) && tries < 10 =>
            {
                tries += 1;
            }
            r => return r,
        }
    }
}
