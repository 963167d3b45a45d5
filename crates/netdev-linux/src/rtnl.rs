//! An rtnetlink socket: dumps of the kernel's routes and addresses, and
//! their change notifications, as raw netlink bytes. Decoding them is the
//! caller's (the `tunnel` crate's `netlink` module), so this stays the thin
//! system-call edge.

use crate::sys;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

const NETLINK_ROUTE: libc::c_int = 0;
const NLMSG_DONE: u16 = 3;
const NLMSG_ERROR: u16 = 2;

pub struct RouteSocket {
    fd: OwnedFd,
    seq: u32,
    buf: Vec<u8>,
}

impl RouteSocket {
    /// Opens a socket in the current namespace (or in `netns`, a path such
    /// as `/run/netns/NAME`), subscribed to `groups` (RTMGRP_* bits; 0 for
    /// dumps only). Non-blocking.
    pub fn open(netns: Option<&str>, groups: u32) -> io::Result<RouteSocket> {
        let (dom, ty) = (libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_NONBLOCK);
        let fd = match netns {
            Some(p) => sys::socket_in_netns(p, dom, ty, NETLINK_ROUTE)?,
            None => sys::socket(dom, ty, NETLINK_ROUTE)?,
        };
        let sa = sys::sockaddr_nl(groups);
        sys::bind(fd.as_raw_fd(), &sa)?;
        Ok(RouteSocket { fd, seq: 1, buf: vec![0; 1 << 16] })
    }

    pub fn fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    /// Sends a dump request (built by the caller, its sequence number
    /// replaced) and collects every reply message up to NLMSG_DONE, waiting
    /// at most `timeout_ms` in total.
    pub fn dump(&mut self, request: &[u8], timeout_ms: i32) -> io::Result<Vec<u8>> {
        self.seq = self.seq.wrapping_add(1);
        let mut req = request.to_vec();
        if req.len() >= 12 {
            req[8..12].copy_from_slice(&self.seq.to_ne_bytes());
        }
        sys::send(self.fd.as_raw_fd(), &req)?;
        let mut out = Vec::new();
        let deadline = std::time::Instant::now() + std::time::Duration::from_millis(timeout_ms.max(0) as u64);
        loop {
            let n = match sys::read(self.fd.as_raw_fd(), &mut self.buf) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let left = deadline.saturating_duration_since(std::time::Instant::now());
                    if left.is_zero() {
                        return Err(io::Error::new(io::ErrorKind::TimedOut, "rtnetlink dump timed out"));
                    }
                    sys::poll_readable(self.fd.as_raw_fd(), left.as_millis() as i32)?;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let chunk = &self.buf[..n];
            let mut done = false;
            let mut i = 0;
            while i + 16 <= chunk.len() {
                let len = u32::from_ne_bytes(chunk[i..i + 4].try_into().expect("4")) as usize;
                let ty = u16::from_ne_bytes(chunk[i + 4..i + 6].try_into().expect("2"));
                let seq = u32::from_ne_bytes(chunk[i + 8..i + 12].try_into().expect("4"));
                if len < 16 || i + len > chunk.len() {
                    break;
                }
                if seq == self.seq {
                    if ty == NLMSG_ERROR && len >= 20 {
                        let err = i32::from_ne_bytes(chunk[i + 16..i + 20].try_into().expect("4"));
                        if err != 0 {
                            return Err(io::Error::from_raw_os_error(-err));
                        }
                    }
                    if ty == NLMSG_DONE {
                        done = true;
                    }
                    out.extend_from_slice(&chunk[i..i + len]);
                }
                i += (len + 3) & !3;
            }
            if done {
                return Ok(out);
            }
        }
    }

    /// Reads whatever notifications are queued (empty when none).
    pub fn recv(&mut self) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        loop {
            match sys::read(self.fd.as_raw_fd(), &mut self.buf) {
                Ok(n) => out.extend_from_slice(&self.buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(out),
                Err(e) => return Err(e),
            }
        }
    }
}
