//! Every raw system call of this crate, wrapped into safe functions, plus
//! the kernel ABI structures they use (`<linux/if_xdp.h>`,
//! `<linux/if_packet.h>`). Defined here rather than taken from `libc` so the
//! layout we rely on is visible in one place.

use std::ffi::CString;
use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;

// ---- AF_XDP ABI (<linux/if_xdp.h>) ----

pub const AF_XDP: libc::c_int = 44;
pub const SOL_XDP: libc::c_int = 283;

pub const XDP_SHARED_UMEM: u16 = 1 << 0;
pub const XDP_COPY: u16 = 1 << 1;
pub const XDP_ZEROCOPY: u16 = 1 << 2;
pub const XDP_USE_NEED_WAKEUP: u16 = 1 << 3;
/// Multi-buffer: a packet may span several descriptors (Linux 6.6+).
pub const XDP_USE_SG: u16 = 1 << 4;
/// Descriptor `options`: the packet continues in the next descriptor.
pub const XDP_PKT_CONTD: u32 = 1 << 0;
/// Descriptor `options`: `struct xsk_tx_metadata` precedes the packet in
/// its frame (Linux 6.8+).
pub const XDP_TX_METADATA: u32 = 1 << 1;
/// `xdp_umem_reg.flags`: `tx_metadata_len` is set.
pub const XDP_UMEM_TX_METADATA_LEN: u32 = 1 << 2;
/// `xsk_tx_metadata.flags`: fill the L4 checksum from `csum_start`.
pub const XDP_TXMD_FLAGS_CHECKSUM: u64 = 1 << 1;
/// `sizeof(struct xsk_tx_metadata)`: flags, then csum_start and
/// csum_offset (u16 each) and, since Linux 6.14, a u64 launch time.
pub const XSK_TX_METADATA_LEN: u32 = 24;

pub const XDP_RING_NEED_WAKEUP: u32 = 1 << 0;

pub const XDP_MMAP_OFFSETS: libc::c_int = 1;
pub const XDP_RX_RING: libc::c_int = 2;
pub const XDP_TX_RING: libc::c_int = 3;
pub const XDP_UMEM_REG: libc::c_int = 4;
pub const XDP_UMEM_FILL_RING: libc::c_int = 5;
pub const XDP_UMEM_COMPLETION_RING: libc::c_int = 6;
pub const XDP_STATISTICS: libc::c_int = 7;
pub const XDP_OPTIONS: libc::c_int = 8;
pub const XDP_OPTIONS_ZEROCOPY: u32 = 1 << 0;

pub const XDP_PGOFF_RX_RING: i64 = 0;
pub const XDP_PGOFF_TX_RING: i64 = 0x8000_0000;
pub const XDP_UMEM_PGOFF_FILL_RING: i64 = 0x1_0000_0000;
pub const XDP_UMEM_PGOFF_COMPLETION_RING: i64 = 0x1_8000_0000;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct SockaddrXdp {
    pub family: u16,
    pub flags: u16,
    pub ifindex: u32,
    pub queue_id: u32,
    pub shared_umem_fd: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct RingOffset {
    pub producer: u64,
    pub consumer: u64,
    pub desc: u64,
    pub flags: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct MmapOffsets {
    pub rx: RingOffset,
    pub tx: RingOffset,
    pub fr: RingOffset,
    pub cr: RingOffset,
}

/// `struct xdp_umem_reg` in its current (6.8+) size; older kernels accept
/// it as long as `tx_metadata_len` is 0 (it sits in what used to be padding).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct UmemReg {
    pub addr: u64,
    pub len: u64,
    pub chunk_size: u32,
    pub headroom: u32,
    pub flags: u32,
    pub tx_metadata_len: u32,
}

/// `struct xdp_desc`: one RX or TX descriptor.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XdpDesc {
    pub addr: u64,
    pub len: u32,
    pub options: u32,
}

/// `struct xdp_statistics`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XdpStatistics {
    pub rx_dropped: u64,
    pub rx_invalid_descs: u64,
    pub tx_invalid_descs: u64,
    pub rx_ring_full: u64,
    pub rx_fill_ring_empty_descs: u64,
    pub tx_ring_empty_descs: u64,
}

// ---- AF_PACKET ABI (<linux/if_packet.h>) ----

pub const ETH_P_ALL: u16 = 0x0003;
pub const SOL_PACKET: libc::c_int = 263;
pub const PACKET_ADD_MEMBERSHIP: libc::c_int = 1;
pub const PACKET_AUXDATA: libc::c_int = 8;
pub const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
pub const PACKET_MR_PROMISC: u16 = 1;
pub const TP_STATUS_VLAN_VALID: u32 = 1 << 4;
pub const TP_STATUS_VLAN_TPID_VALID: u32 = 1 << 6;

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct PacketMreq {
    pub ifindex: i32,
    pub ty: u16,
    pub alen: u16,
    pub address: [u8; 8],
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct TpacketAuxdata {
    pub status: u32,
    pub len: u32,
    pub snaplen: u32,
    pub mac: u16,
    pub net: u16,
    pub vlan_tci: u16,
    pub vlan_tpid: u16,
}

// ---- helpers ----

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn cvt_size(r: libc::ssize_t) -> io::Result<usize> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

pub fn socket(domain: libc::c_int, ty: libc::c_int, proto: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: plain syscall; no pointers.
    let fd = cvt(unsafe { libc::socket(domain, ty | libc::SOCK_CLOEXEC, proto) })?;
    // SAFETY: `fd` was just returned by socket() and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `setsockopt` with a plain-old-data value.
pub fn setsockopt<T: Copy>(fd: RawFd, level: libc::c_int, name: libc::c_int, val: &T) -> io::Result<()> {
    // SAFETY: `val` points to a live `T` of the size passed.
    cvt(unsafe {
        libc::setsockopt(fd, level, name, val as *const T as *const libc::c_void, size_of::<T>() as libc::socklen_t)
    })?;
    Ok(())
}

/// `getsockopt` into a plain-old-data value (integers only, any bit pattern
/// valid); returns the value and the length the kernel wrote.
pub fn getsockopt<T: Copy + Default>(fd: RawFd, level: libc::c_int, name: libc::c_int) -> io::Result<(T, usize)> {
    let mut val = T::default();
    let mut len = size_of::<T>() as libc::socklen_t;
    // SAFETY: `val` is a writable `T` of `len` bytes; `len` is writable.
    cvt(unsafe { libc::getsockopt(fd, level, name, &mut val as *mut T as *mut libc::c_void, &mut len) })?;
    Ok((val, len as usize))
}

/// `bind` with a socket address structure `T`.
pub fn bind<T: Copy>(fd: RawFd, addr: &T) -> io::Result<()> {
    // SAFETY: `addr` points to a live `T` of the size passed.
    cvt(unsafe { libc::bind(fd, addr as *const T as *const libc::sockaddr, size_of::<T>() as libc::socklen_t) })?;
    Ok(())
}

/// Creates a socket inside the network namespace at `netns_path` (e.g.
/// `/run/netns/NAME`). A socket belongs to the namespace it was created in
/// for its whole life, so the calling thread's namespace is switched only
/// on a short-lived helper thread that creates the socket and exits.
pub fn socket_in_netns(
    netns_path: &str,
    domain: libc::c_int,
    ty: libc::c_int,
    proto: libc::c_int,
) -> io::Result<OwnedFd> {
    let ns = std::fs::File::open(netns_path)?;
    std::thread::scope(|s| {
        s.spawn(|| {
            use std::os::fd::AsRawFd;
            // SAFETY: plain syscall on a namespace file we hold open; it
            // changes only this (scoped, short-lived) thread's namespace.
            cvt(unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) })?;
            socket(domain, ty, proto)
        })
        .join()
        .map_err(|_| io::Error::other("netns helper thread panicked"))?
    })
}

/// A netlink socket address for the kernel, with multicast `groups`.
pub fn sockaddr_nl(groups: u32) -> libc::sockaddr_nl {
    // SAFETY: all-zero is a valid sockaddr_nl (its padding field included).
    let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    sa.nl_family = libc::AF_NETLINK as u16;
    sa.nl_groups = groups;
    sa
}

/// Wake the kernel's TX path of an AF_XDP socket (`sendto` with no data).
pub fn sendto_kick(fd: RawFd) -> io::Result<()> {
    // SAFETY: a NULL buffer of length 0 and a NULL address are allowed.
    cvt_size(unsafe { libc::sendto(fd, std::ptr::null(), 0, libc::MSG_DONTWAIT, std::ptr::null(), 0) }).map(|_| ())
}

/// Wake the kernel's RX/fill path of an AF_XDP socket (`recvfrom`, no data).
pub fn recvfrom_kick(fd: RawFd) -> io::Result<()> {
    // SAFETY: a NULL buffer of length 0 and NULL address pointers are allowed.
    cvt_size(unsafe {
        libc::recvfrom(fd, std::ptr::null_mut(), 0, libc::MSG_DONTWAIT, std::ptr::null_mut(), std::ptr::null_mut())
    })
    .map(|_| ())
}

/// Waits up to `timeout_ms` for `fd` to become readable.
pub fn poll_readable(fd: RawFd, timeout_ms: i32) -> io::Result<bool> {
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: `p` is one valid pollfd.
    let n = cvt(unsafe { libc::poll(&mut p, 1, timeout_ms) })?;
    Ok(n > 0 && p.revents & libc::POLLIN != 0)
}

/// Pins the calling thread to one CPU.
pub fn pin_current_thread(cpu: usize) -> io::Result<()> {
    set_thread_affinity(0, &[cpu]).map(|_| ())
}

/// Highest CPU number (exclusive) a `cpu_set_t` holds.
const CPU_SET_BITS: usize = 8 * size_of::<libc::cpu_set_t>();

/// Lets thread `tid` (0: the calling thread) run only on `cpus`. False if
/// the thread has exited.
pub fn set_thread_affinity(tid: i32, cpus: &[usize]) -> io::Result<bool> {
    // SAFETY: cpu_set_t is plain data; zeroed is the empty set.
    let mut set: libc::cpu_set_t = unsafe { zeroed() };
    for &cpu in cpus {
        if cpu >= CPU_SET_BITS {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "CPU number out of range"));
        }
        // SAFETY: `cpu` is within the set's capacity (checked above).
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: `set` is a valid cpu_set_t of the size passed; the kernel
    // only reads it, and checks `tid` itself (ESRCH if it is gone).
    match cvt(unsafe { libc::sched_setaffinity(tid, size_of::<libc::cpu_set_t>(), &set) }) {
        Ok(_) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Ok(false),
        Err(e) => Err(e),
    }
}

/// The CPUs thread `tid` (0: the calling thread) may run on.
pub fn thread_affinity(tid: i32) -> io::Result<Vec<usize>> {
    // SAFETY: cpu_set_t is plain data; zeroed is the empty set.
    let mut set: libc::cpu_set_t = unsafe { zeroed() };
    // SAFETY: `set` is a writable cpu_set_t of the size passed.
    cvt(unsafe { libc::sched_getaffinity(tid, size_of::<libc::cpu_set_t>(), &mut set) })?;
    // SAFETY: every index is below the set's capacity.
    Ok((0..CPU_SET_BITS).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) }).collect())
}

/// Takes a POSIX (fcntl) write lock on the whole of `fd`'s file, without
/// waiting. Pidfiles are locked this way so tools that check the lock
/// (ovs-appctl) know the process is alive. The lock lasts while the file
/// stays open.
pub fn lock_file(fd: RawFd) -> io::Result<()> {
    // SAFETY: flock is plain data; zeroed is a valid starting value.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    // SAFETY: `fl` is a valid flock for F_SETLK on an open descriptor.
    cvt(unsafe { libc::fcntl(fd, libc::F_SETLK, &fl) }).map(|_| ())
}

/// An exclusive `flock` on `fd`, waiting until it is free. Unlike the
/// record lock of [`lock_file`] it belongs to the open file, so two opens
/// of one file in the same process (threads) exclude each other too.
pub fn lock_file_wait(fd: RawFd) -> io::Result<()> {
    loop {
        // SAFETY: plain syscall on an open descriptor; no pointers.
        match cvt(unsafe { libc::flock(fd, libc::LOCK_EX) }) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            r => return r.map(|_| ()),
        }
    }
}

/// Hands freed heap memory back to the kernel (glibc's `malloc_trim`): a
/// process that just freed a large table (200,000 deleted rules) keeps its
/// pages otherwise. Returns whether any memory was released.
pub fn release_free_memory() -> bool {
    #[cfg(target_env = "gnu")]
    {
        // SAFETY: malloc_trim takes no pointers; it only walks the
        // allocator's own free lists, and is thread-safe.
        unsafe { libc::malloc_trim(0) != 0 }
    }
    #[cfg(not(target_env = "gnu"))]
    {
        false
    }
}

/// Waits up to `timeout_ms` for any of `fds` to become readable; returns
/// how many are.
pub fn poll_any(fds: &[RawFd], timeout_ms: i32) -> io::Result<usize> {
    let mut ps: Vec<libc::pollfd> =
        fds.iter().map(|&fd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 }).collect();
    // SAFETY: `ps` is a valid array of `ps.len()` pollfds for the call.
    let n = cvt(unsafe { libc::poll(ps.as_mut_ptr(), ps.len() as libc::nfds_t, timeout_ms) })?;
    Ok(n as usize)
}

pub fn read(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` is writable for its length.
    cvt_size(unsafe { libc::read(fd, buf.as_mut_ptr() as *mut libc::c_void, buf.len()) })
}

pub fn write(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: `buf` is readable for its length.
    cvt_size(unsafe { libc::write(fd, buf.as_ptr() as *const libc::c_void, buf.len()) })
}

pub fn send(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: `buf` is readable for its length.
    cvt_size(unsafe { libc::send(fd, buf.as_ptr() as *const libc::c_void, buf.len(), libc::MSG_DONTWAIT) })
}

/// `recvmsg` of one frame on an AF_PACKET socket with `PACKET_AUXDATA`
/// enabled: returns the frame length and the auxdata, if any.
pub fn recv_packet_auxdata(fd: RawFd, buf: &mut [u8]) -> io::Result<(usize, Option<TpacketAuxdata>)> {
    // u64 storage keeps the control buffer aligned for cmsghdr.
    let mut cbuf = [0u64; 16];
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr() as *mut libc::c_void, iov_len: buf.len() };
    // SAFETY: an all-zero msghdr is a valid empty header.
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
    msg.msg_controllen = size_of::<[u64; 16]>();
    // SAFETY: msg points at `iov` (covering `buf`) and `cbuf`, all live and
    // writable for the lengths recorded in it.
    let n = cvt_size(unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_DONTWAIT | libc::MSG_TRUNC) })?;
    let mut aux = None;
    // CMSG_FIRSTHDR/NXTHDR walk the control buffer the kernel filled,
    // bounded by msg_controllen; each header is checked before its data is
    // read, and the data is read unaligned.
    // SAFETY: the conditions above hold.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == SOL_PACKET
                && (*c).cmsg_type == PACKET_AUXDATA
                && (*c).cmsg_len as usize >= libc::CMSG_LEN(size_of::<TpacketAuxdata>() as u32) as usize
            {
                aux = Some(std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const TpacketAuxdata));
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok((n, aux))
}

pub fn if_nametoindex(name: &str) -> io::Result<u32> {
    let c = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `c` is a valid NUL-terminated string.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if idx == 0 {
        return Err(io::Error::new(io::ErrorKind::NotFound, format!("no such interface: {name}")));
    }
    Ok(idx)
}

fn ifreq_with_name(name: &str) -> io::Result<libc::ifreq> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains('\0') {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("bad interface name {name:?}")));
    }
    // SAFETY: an all-zero ifreq is valid (empty name, zero union).
    let mut ifr: libc::ifreq = unsafe { zeroed() };
    for (d, s) in ifr.ifr_name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    Ok(ifr)
}

/// Opens `/dev/net/tun` and attaches it to tap device `name` (created if
/// needed), non-blocking, without the packet-info header.
pub fn open_tap(name: &str) -> io::Result<(OwnedFd, String)> {
    let path = c"/dev/net/tun";
    // SAFETY: `path` is a valid C string.
    let fd = cvt(unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC) })?;
    // SAFETY: `fd` was just returned by open() and nothing else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut ifr = ifreq_with_name(name)?;
    ifr.ifr_ifru.ifru_flags = (libc::IFF_TAP | libc::IFF_NO_PI) as libc::c_short;
    // SAFETY: TUNSETIFF reads and writes one ifreq, which `ifr` is.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF, &mut ifr) })?;
    let end = ifr.ifr_name.iter().position(|&c| c == 0).unwrap_or(libc::IFNAMSIZ);
    let actual: String = ifr.ifr_name[..end].iter().map(|&c| c as u8 as char).collect();
    Ok((fd, actual))
}

/// Makes the tap device `fd` is attached to outlive the descriptor (`on`),
/// or go with it (`!on`).
pub fn set_tap_persist(fd: i32, on: bool) -> io::Result<()> {
    // SAFETY: TUNSETPERSIST takes its argument by value; `fd` is an open tun
    // descriptor owned by the caller.
    cvt(unsafe { libc::ioctl(fd, libc::TUNSETPERSIST, on as libc::c_ulong) })?;
    Ok(())
}

/// Sets `IFF_UP` on interface `name`.
pub fn set_link_up(name: &str) -> io::Result<()> {
    let sock = socket(libc::AF_INET, libc::SOCK_DGRAM, 0)?;
    let mut ifr = ifreq_with_name(name)?;
    // SAFETY: SIOCGIFFLAGS fills the flags of one ifreq.
    cvt(unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut ifr) })?;
    // SAFETY: the kernel just wrote ifru_flags, the active union member.
    unsafe { ifr.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short };
    // SAFETY: SIOCSIFFLAGS reads one ifreq.
    cvt(unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &mut ifr) })?;
    Ok(())
}

/// Sets interface `name`'s MTU.
pub fn set_mtu(name: &str, mtu: u32) -> io::Result<()> {
    let sock = socket(libc::AF_INET, libc::SOCK_DGRAM, 0)?;
    let mut ifr = ifreq_with_name(name)?;
    ifr.ifr_ifru.ifru_mtu = mtu as libc::c_int;
    // SAFETY: SIOCSIFMTU reads one ifreq whose ifru_mtu was just set.
    cvt(unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFMTU, &mut ifr) })?;
    Ok(())
}

/// Sets interface `name`'s Ethernet address.
pub fn set_mac(name: &str, mac: [u8; 6]) -> io::Result<()> {
    let sock = socket(libc::AF_INET, libc::SOCK_DGRAM, 0)?;
    let mut ifr = ifreq_with_name(name)?;
    let mut sa: libc::sockaddr = unsafe_zeroed_sockaddr();
    sa.sa_family = libc::ARPHRD_ETHER;
    for (d, s) in sa.sa_data.iter_mut().zip(mac) {
        *d = s as libc::c_char;
    }
    ifr.ifr_ifru.ifru_hwaddr = sa;
    // SAFETY: SIOCSIFHWADDR reads one ifreq whose ifru_hwaddr was just set.
    cvt(unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFHWADDR, &mut ifr) })?;
    Ok(())
}

fn unsafe_zeroed_sockaddr() -> libc::sockaddr {
    // SAFETY: sockaddr is plain data; all zeroes is a valid value.
    unsafe { zeroed() }
}

/// A memory mapping, unmapped on drop.
pub struct Mmap {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory; synchronisation of its contents is
// the job of the types that hand out access to it (rings, UMEM frames).
unsafe impl Send for Mmap {}
// SAFETY: as above; `Mmap` itself only exposes the base pointer and length.
unsafe impl Sync for Mmap {}

impl Mmap {
    /// Anonymous, private, zeroed, read-write memory (a UMEM area).
    pub fn anonymous(len: usize) -> io::Result<Mmap> {
        // SAFETY: anonymous mapping at a kernel-chosen address; no aliasing.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        Self::from_result(p, len)
    }

    /// Shared mapping of `len` bytes of `fd` at `offset` (an AF_XDP ring).
    pub fn ring(fd: RawFd, len: usize, offset: i64) -> io::Result<Mmap> {
        // SAFETY: maps kernel ring memory at a kernel-chosen address.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd,
                offset,
            )
        };
        Self::from_result(p, len)
    }

    fn from_result(p: *mut libc::c_void, len: usize) -> io::Result<Mmap> {
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p as *mut u8).ok_or_else(|| io::Error::other("mmap returned NULL"))?;
        Ok(Mmap { ptr, len })
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub fn size(&self) -> usize {
        self.len
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // `ptr`/`len` describe a mapping this value created and
        // owns; nothing borrowed from it outlives it (rings and UMEM frames
        // keep their `Mmap` alive).
        // SAFETY: the conditions above hold.
        unsafe { libc::munmap(self.ptr.as_ptr() as *mut libc::c_void, self.len) };
    }
}
