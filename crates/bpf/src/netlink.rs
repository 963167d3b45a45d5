//! Minimal rtnetlink client for the XDP hook of a device: query what is
//! attached (`RTM_GETLINK`, `IFLA_XDP`) and detach it (`RTM_SETLINK` with
//! `IFLA_XDP_FD = -1`), the equivalent of `ip link set dev X xdp off`.

use std::io;
use std::mem::size_of;

const IFLA_XDP: u16 = 43;
const IFLA_XDP_FD: u16 = 1;
const IFLA_XDP_ATTACHED: u16 = 2;
const IFLA_XDP_FLAGS: u16 = 3;
const IFLA_XDP_PROG_ID: u16 = 4;
const IFLA_XDP_DRV_PROG_ID: u16 = 5;
const IFLA_XDP_SKB_PROG_ID: u16 = 6;
const IFLA_XDP_HW_PROG_ID: u16 = 7;
const NLA_F_NESTED: u16 = 1 << 15;
const NLA_TYPE_MASK: u16 = !(1 << 15 | 1 << 14);

pub(crate) const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
pub(crate) const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;
pub(crate) const XDP_FLAGS_HW_MODE: u32 = 1 << 3;

/// XDP programs attached to a device, by hook. A device can have a native
/// (driver) or a generic (skb) program, not both, plus an offloaded one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XdpHooks {
    pub native_prog_id: Option<u32>,
    pub generic_prog_id: Option<u32>,
    pub offload_prog_id: Option<u32>,
}

impl XdpHooks {
    pub fn is_empty(&self) -> bool {
        self.native_prog_id.is_none() && self.generic_prog_id.is_none() && self.offload_prog_id.is_none()
    }
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct NlMsgHdr {
    len: u32,
    ty: u16,
    flags: u16,
    seq: u32,
    pid: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct IfInfoMsg {
    family: u8,
    pad: u8,
    ty: u16,
    index: i32,
    flags: u32,
    change: u32,
}

struct Socket(libc::c_int);

impl Drop for Socket {
    fn drop(&mut self) {
        // SAFETY: the descriptor was returned by socket() and is owned here.
        unsafe { libc::close(self.0) };
    }
}

impl Socket {
    fn open() -> io::Result<Socket> {
        // SAFETY: plain syscall with constant arguments.
        let fd = unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, libc::NETLINK_ROUTE) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let s = Socket(fd);
        let one: libc::c_int = 1;
        // SAFETY: `one` outlives the call and its size is passed.
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_NETLINK,
                libc::NETLINK_EXT_ACK,
                &one as *const _ as *const libc::c_void,
                size_of::<libc::c_int>() as u32,
            )
        };
        Ok(s)
    }

    fn send(&self, msg: &[u8]) -> io::Result<()> {
        // SAFETY: a zeroed sockaddr_nl is valid; family set below.
        let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        sa.nl_family = libc::AF_NETLINK as u16;
        // SAFETY: `msg` and `sa` are valid for the lengths passed.
        let n = unsafe {
            libc::sendto(
                self.0,
                msg.as_ptr() as *const libc::c_void,
                msg.len(),
                0,
                &sa as *const _ as *const libc::sockaddr,
                size_of::<libc::sockaddr_nl>() as u32,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: `buf` is valid for writes of its length.
        let n = unsafe { libc::recv(self.0, buf.as_mut_ptr() as *mut libc::c_void, buf.len(), 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n as usize)
    }
}

fn push_hdr(buf: &mut Vec<u8>, ty: u16, flags: u16, ifindex: u32) {
    let h = NlMsgHdr { len: 0, ty, flags, seq: 1, pid: 0 };
    push_pod(buf, &h.len.to_ne_bytes());
    push_pod(buf, &h.ty.to_ne_bytes());
    push_pod(buf, &h.flags.to_ne_bytes());
    push_pod(buf, &h.seq.to_ne_bytes());
    push_pod(buf, &h.pid.to_ne_bytes());
    let ifi = IfInfoMsg { family: libc::AF_UNSPEC as u8, index: ifindex as i32, ..Default::default() };
    buf.push(ifi.family);
    buf.push(ifi.pad);
    push_pod(buf, &ifi.ty.to_ne_bytes());
    push_pod(buf, &ifi.index.to_ne_bytes());
    push_pod(buf, &ifi.flags.to_ne_bytes());
    push_pod(buf, &ifi.change.to_ne_bytes());
}

fn push_pod(buf: &mut Vec<u8>, b: &[u8]) {
    buf.extend_from_slice(b);
}

fn push_attr(buf: &mut Vec<u8>, ty: u16, payload: &[u8]) {
    let len = 4 + payload.len();
    push_pod(buf, &(len as u16).to_ne_bytes());
    push_pod(buf, &ty.to_ne_bytes());
    buf.extend_from_slice(payload);
    while buf.len() & 3 != 0 {
        buf.push(0);
    }
}

fn finish(buf: &mut [u8]) {
    let len = buf.len() as u32;
    buf[0..4].copy_from_slice(&len.to_ne_bytes());
}

fn rd_u16(b: &[u8], off: usize) -> u16 {
    u16::from_ne_bytes([b[off], b[off + 1]])
}

fn rd_u32(b: &[u8], off: usize) -> u32 {
    u32::from_ne_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

/// Iterates netlink attributes in `b` as (type, payload).
fn attrs(mut b: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        if b.len() < 4 {
            return None;
        }
        let len = rd_u16(b, 0) as usize;
        let ty = rd_u16(b, 2) & NLA_TYPE_MASK;
        if len < 4 || len > b.len() {
            return None;
        }
        let payload = &b[4..len];
        let adv = (len + 3) & !3;
        b = &b[adv.min(b.len())..];
        Some((ty, payload))
    })
}

const HDR: usize = size_of::<NlMsgHdr>();
const IFI: usize = size_of::<IfInfoMsg>();

/// Reads the reply to a request; returns the payload of the first
/// RTM_NEWLINK, or `None` for an ACK. Errors carry the kernel's errno.
fn read_reply(sock: &Socket) -> io::Result<Option<Vec<u8>>> {
    let mut buf = vec![0u8; 65536];
    let n = sock.recv(&mut buf)?;
    let mut off = 0;
    while off + HDR <= n {
        let len = rd_u32(&buf, off) as usize;
        let ty = rd_u16(&buf, off + 4);
        if len < HDR || off + len > n {
            break;
        }
        if ty == libc::NLMSG_ERROR as u16 {
            let err = rd_u32(&buf, off + HDR) as i32;
            if err == 0 {
                return Ok(None);
            }
            return Err(io::Error::from_raw_os_error(-err));
        }
        if ty == libc::RTM_NEWLINK {
            return Ok(Some(buf[off..off + len].to_vec()));
        }
        off += (len + 3) & !3;
    }
    Err(io::Error::new(io::ErrorKind::InvalidData, "unexpected netlink reply"))
}

/// The XDP programs attached to interface `ifindex`.
pub fn query(ifindex: u32) -> io::Result<XdpHooks> {
    let sock = Socket::open()?;
    let mut msg = Vec::with_capacity(64);
    push_hdr(&mut msg, libc::RTM_GETLINK, libc::NLM_F_REQUEST as u16, ifindex);
    finish(&mut msg);
    sock.send(&msg)?;
    let reply = read_reply(&sock)?.ok_or_else(|| io::Error::other("no RTM_NEWLINK in reply"))?;
    let mut hooks = XdpHooks::default();
    let mut attached = 0u8;
    let mut prog_id = None;
    for (ty, payload) in attrs(&reply[HDR + IFI..]) {
        if ty != IFLA_XDP {
            continue;
        }
        for (xty, p) in attrs(payload) {
            let id = if p.len() >= 4 { Some(rd_u32(p, 0)) } else { None };
            match xty {
                IFLA_XDP_ATTACHED if !p.is_empty() => attached = p[0],
                IFLA_XDP_PROG_ID => prog_id = id,
                IFLA_XDP_DRV_PROG_ID => hooks.native_prog_id = id,
                IFLA_XDP_SKB_PROG_ID => hooks.generic_prog_id = id,
                IFLA_XDP_HW_PROG_ID => hooks.offload_prog_id = id,
                _ => {}
            }
        }
    }
    // With a single program the kernel reports only ATTACHED + PROG_ID.
    match attached {
        1 => hooks.native_prog_id = hooks.native_prog_id.or(prog_id),
        2 => hooks.generic_prog_id = hooks.generic_prog_id.or(prog_id),
        3 => hooks.offload_prog_id = hooks.offload_prog_id.or(prog_id),
        _ => {}
    }
    Ok(hooks)
}

/// Detaches whatever program sits on the hook selected by `mode_flag`
/// (one of the XDP_FLAGS_*_MODE values).
pub fn detach(ifindex: u32, mode_flag: u32) -> io::Result<()> {
    let sock = Socket::open()?;
    let mut msg = Vec::with_capacity(64);
    push_hdr(&mut msg, libc::RTM_SETLINK, (libc::NLM_F_REQUEST | libc::NLM_F_ACK) as u16, ifindex);
    let mut nested = Vec::new();
    push_attr(&mut nested, IFLA_XDP_FD, &(-1i32).to_ne_bytes());
    push_attr(&mut nested, IFLA_XDP_FLAGS, &mode_flag.to_ne_bytes());
    push_attr(&mut msg, IFLA_XDP | NLA_F_NESTED, &nested);
    finish(&mut msg);
    sock.send(&msg)?;
    read_reply(&sock).map(|_| ())
}
