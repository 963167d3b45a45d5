//! The kernel's `netdev` generic-netlink family, for one fact: a device's
//! XDP features (`NETDEV_A_DEV_XDP_FEATURES`, Linux 6.3+). Among them,
//! `NETDEV_XDP_ACT_NDO_XMIT` says whether the device accepts frames that an
//! XDP program redirects to it right now. A veth sets it only while its
//! far end can take XDP frames (GRO on, or an XDP program there), so the
//! switch can see from its own side whether a redirect would be dropped.

use crate::sys;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::OnceLock;

const NETLINK_GENERIC: libc::c_int = 16;
const GENL_ID_CTRL: u16 = 0x10;
const CTRL_CMD_GETFAMILY: u8 = 3;
const CTRL_ATTR_FAMILY_ID: u16 = 1;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;
const NETDEV_CMD_DEV_GET: u8 = 1;
const NETDEV_A_DEV_IFINDEX: u16 = 1;
const NETDEV_A_DEV_XDP_FEATURES: u16 = 3;
const NLM_F_REQUEST: u16 = 1;
const NLMSG_ERROR: u16 = 2;

/// `NETDEV_XDP_ACT_NDO_XMIT`: the device takes redirected XDP frames.
pub const XDP_ACT_NDO_XMIT: u64 = 1 << 2;

/// A request: netlink header, generic-netlink header, one attribute.
fn request(ty: u16, cmd: u8, attr: u16, payload: &[u8]) -> Vec<u8> {
    let alen = 4 + payload.len();
    let len = 16 + 4 + alen.div_ceil(4) * 4;
    let mut m = Vec::with_capacity(len);
    m.extend_from_slice(&(len as u32).to_ne_bytes());
    m.extend_from_slice(&ty.to_ne_bytes());
    m.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    m.extend_from_slice(&1u32.to_ne_bytes()); // sequence
    m.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel's
    m.extend_from_slice(&[cmd, 1, 0, 0]); // command, version, reserved
    m.extend_from_slice(&(alen as u16).to_ne_bytes());
    m.extend_from_slice(&attr.to_ne_bytes());
    m.extend_from_slice(payload);
    m.resize(len, 0);
    m
}

/// Sends `req` and returns the attributes of the reply (after the
/// generic-netlink header), or the kernel's error.
fn transact(fd: &OwnedFd, req: &[u8]) -> io::Result<Vec<(u16, Vec<u8>)>> {
    sys::send(fd.as_raw_fd(), req)?;
    if !sys::poll_readable(fd.as_raw_fd(), 1000)? {
        return Err(io::Error::new(io::ErrorKind::TimedOut, "generic netlink: no reply"));
    }
    let mut buf = vec![0u8; 1 << 14];
    let n = sys::read(fd.as_raw_fd(), &mut buf)?;
    let b = &buf[..n];
    if b.len() < 16 {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "generic netlink: short reply"));
    }
    let len = (u32::from_ne_bytes(b[0..4].try_into().expect("4")) as usize).min(b.len());
    let ty = u16::from_ne_bytes(b[4..6].try_into().expect("2"));
    if ty == NLMSG_ERROR {
        let err = if len >= 20 { i32::from_ne_bytes(b[16..20].try_into().expect("4")) } else { -libc::EIO };
        return Err(io::Error::from_raw_os_error(-err));
    }
    let mut attrs = Vec::new();
    let mut i = 20;
    while i + 4 <= len {
        let alen = u16::from_ne_bytes(b[i..i + 2].try_into().expect("2")) as usize;
        let aty = u16::from_ne_bytes(b[i + 2..i + 4].try_into().expect("2")) & 0x3fff;
        if alen < 4 || i + alen > len {
            break;
        }
        attrs.push((aty, b[i + 4..i + alen].to_vec()));
        i += alen.div_ceil(4) * 4;
    }
    Ok(attrs)
}

fn open() -> io::Result<OwnedFd> {
    let fd = sys::socket(libc::AF_NETLINK, libc::SOCK_RAW, NETLINK_GENERIC)?;
    sys::bind(fd.as_raw_fd(), &sys::sockaddr_nl(0))?;
    Ok(fd)
}

/// The `netdev` family's id (resolved once; `None` on kernels without it).
fn family() -> Option<u16> {
    static ID: OnceLock<Option<u16>> = OnceLock::new();
    *ID.get_or_init(|| {
        let fd = open().ok()?;
        let attrs =
            transact(&fd, &request(GENL_ID_CTRL, CTRL_CMD_GETFAMILY, CTRL_ATTR_FAMILY_NAME, b"netdev\0")).ok()?;
        let (_, v) = attrs.iter().find(|(t, v)| *t == CTRL_ATTR_FAMILY_ID && v.len() >= 2)?;
        Some(u16::from_ne_bytes([v[0], v[1]]))
    })
}

/// The XDP features (`NETDEV_XDP_ACT_*` bits) device `ifindex` advertises
/// now. `Ok(None)` where the kernel cannot say (no `netdev` family).
pub fn xdp_features(ifindex: u32) -> io::Result<Option<u64>> {
    let Some(fam) = family() else { return Ok(None) };
    let fd = open()?;
    let attrs = transact(&fd, &request(fam, NETDEV_CMD_DEV_GET, NETDEV_A_DEV_IFINDEX, &ifindex.to_ne_bytes()))?;
    Ok(attrs
        .iter()
        .find(|(t, v)| *t == NETDEV_A_DEV_XDP_FEATURES && v.len() >= 8)
        .map(|(_, v)| u64::from_ne_bytes(v[..8].try_into().expect("8"))))
}

#[cfg(test)]
mod tests {
    /// Loopback takes no redirected frames; a device that does not exist
    /// is an error (ENODEV), not a guess.
    #[test]
    fn loopback_and_a_missing_device() {
        if let Ok(Some(f)) = super::xdp_features(1) {
            assert_eq!(f & super::XDP_ACT_NDO_XMIT, 0, "lo: {f:#x}");
        }
        if super::family().is_some() {
            assert!(super::xdp_features(0x7fff_fff0).is_err());
        }
    }
}
