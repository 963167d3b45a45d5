//! A relay between the frontend's vhost-user socket and the device's
//! message loop (`vhost-user-backend`), which passes every message through
//! unchanged but one kind: `VHOST_USER_SET_VRING_ENABLE` that arrives
//! before `VHOST_USER_SET_FEATURES` has accepted
//! `VHOST_USER_F_PROTOCOL_FEATURES`.
//!
//! Why: QEMU (7.2, Debian 12's) enables the rings of a vhost-user net
//! device when it attaches the peer, right after connecting and before it
//! negotiates features; it checks only that the backend *offered* the
//! protocol-features bit. The `vhost` crate refuses the message unless the
//! bit was *accepted*, treats that as fatal, and drops the connection, so
//! QEMU could never use the port. DPDK's vhost library (OVS-DPDK) takes the
//! message at any time. The relay answers such an early message itself
//! (an acknowledgement if the frontend asked for one) and does not forward
//! it: until the bit is accepted the rings' state is not the message's to
//! set (without the bit, `SET_FEATURES` enables them; with it, the frontend
//! enables them again once it has started the device, which QEMU does).
//!
//! Replies and everything else are copied as they come; file descriptors
//! that ride with a frontend message (memory regions, eventfds) are passed
//! on with it. When either side closes, the relay closes both.
#![allow(unsafe_code)] // reason: receiving file descriptors (recvmsg with SCM_RIGHTS) is a raw syscall

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};

use vmm_sys_util::sock_ctrl_msg::ScmSocket;

const HDR_LEN: usize = 12;
const SET_FEATURES: u32 = 2;
const SET_VRING_ENABLE: u32 = 18;
/// Header flags: protocol version 1, a reply, a reply wanted.
const VERSION_1: u32 = 0x1;
const REPLY: u32 = 0x4;
const NEED_REPLY: u32 = 0x8;
/// `VHOST_USER_F_PROTOCOL_FEATURES` in `SET_FEATURES`' value.
const PROTOCOL_FEATURES: u64 = 1 << 30;
/// The most descriptors one message carries (a memory table: 8 regions).
const MAX_FDS: usize = 32;
/// The longest message body accepted (a memory table of 8 regions is 264
/// bytes; a config space 268).
const MAX_BODY: usize = 64 * 1024;

/// One message as read from a socket.
struct Msg {
    bytes: Vec<u8>,
    fds: Vec<OwnedFd>,
}

impl Msg {
    fn word(&self, at: usize) -> u32 {
        u32::from_le_bytes(self.bytes[at..at + 4].try_into().expect("4 bytes"))
    }
    fn request(&self) -> u32 {
        self.word(0)
    }
    fn flags(&self) -> u32 {
        self.word(4)
    }
    /// The body as a u64, if it is one.
    fn value(&self) -> Option<u64> {
        (self.bytes.len() == HDR_LEN + 8)
            .then(|| u64::from_le_bytes(self.bytes[HDR_LEN..].try_into().expect("8 bytes")))
    }
}

/// Reads one message (header, descriptors that came with it, body).
fn recv(sock: &UnixStream) -> io::Result<Msg> {
    let mut hdr = [0u8; HDR_LEN];
    let mut raw = [-1 as RawFd; MAX_FDS];
    let mut iov = [libc::iovec { iov_base: hdr.as_mut_ptr().cast(), iov_len: HDR_LEN }];
    // `iov` points at `hdr`, which lives and is borrowed mutably for the
    // call; any bytes may be written there.
    // SAFETY: the one iovec covers a live local buffer of its stated length.
    let (n, nfds) =
        unsafe { sock.recv_with_fds(&mut iov, &mut raw) }.map_err(|e| io::Error::from_raw_os_error(e.errno()))?;
    // The first `nfds` entries are descriptors the kernel just installed
    // for this process; nothing else owns them.
    // SAFETY: each is a fresh, open descriptor owned by no one else.
    let fds: Vec<OwnedFd> = raw[..nfds].iter().map(|&fd| unsafe { OwnedFd::from_raw_fd(fd) }).collect();
    if n == 0 {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    let mut sock_r = sock;
    if n < HDR_LEN {
        sock_r.read_exact(&mut hdr[n..])?;
    }
    let size = u32::from_le_bytes(hdr[8..12].try_into().expect("4 bytes")) as usize;
    if size > MAX_BODY {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("vhost-user message of {size} bytes")));
    }
    let mut bytes = hdr.to_vec();
    bytes.resize(HDR_LEN + size, 0);
    sock_r.read_exact(&mut bytes[HDR_LEN..])?;
    Ok(Msg { bytes, fds })
}

/// Writes `m` whole, with its descriptors.
fn send(sock: &UnixStream, m: &Msg) -> io::Result<()> {
    let raw: Vec<RawFd> = m.fds.iter().map(|f| f.as_raw_fd()).collect();
    let n = sock.send_with_fds(&[&m.bytes[..]], &raw).map_err(|e| io::Error::from_raw_os_error(e.errno()))?;
    let mut w = sock;
    w.write_all(&m.bytes[n..])
}

/// What the relay does with a frontend message.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// Forwarded, followed by these messages of the relay's own.
    Forward(Vec<Vec<u8>>),
    /// Not forwarded; answered with this acknowledgement if `Some`.
    Answer(Option<Vec<u8>>),
}

/// The frontend-to-device direction's state: whether `SET_FEATURES` has
/// accepted the protocol-features bit, and the ring states asked for
/// before it did (ring index -> enable).
#[derive(Default)]
struct Filter {
    protocol_features: bool,
    early: std::collections::BTreeMap<u32, u32>,
}

/// A whole message's bytes: header, then `body`.
fn message(request: u32, flags: u32, body: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(HDR_LEN + body.len());
    m.extend_from_slice(&request.to_le_bytes());
    m.extend_from_slice(&flags.to_le_bytes());
    m.extend_from_slice(&(body.len() as u32).to_le_bytes());
    m.extend_from_slice(body);
    m
}

impl Filter {
    fn judge(&mut self, m: &Msg) -> Verdict {
        match m.request() {
            SET_FEATURES => {
                self.protocol_features = m.value().is_some_and(|v| v & PROTOCOL_FEATURES != 0);
                let early = std::mem::take(&mut self.early);
                if !self.protocol_features {
                    return Verdict::Forward(Vec::new());
                }
                // The kept ring states, as the frontend would have sent them
                // now (no reply asked: the frontend had its answer).
                let replay = early
                    .into_iter()
                    .map(|(index, num)| {
                        message(SET_VRING_ENABLE, VERSION_1, &[index.to_le_bytes(), num.to_le_bytes()].concat())
                    })
                    .collect();
                Verdict::Forward(replay)
            }
            SET_VRING_ENABLE if !self.protocol_features => {
                if m.bytes.len() == HDR_LEN + 8 {
                    let index = m.word(HDR_LEN);
                    // At most one entry per ring the protocol can name.
                    if index < 1024 {
                        self.early.insert(index, m.word(HDR_LEN + 4));
                    }
                }
                let ack = (m.flags() & NEED_REPLY != 0)
                    .then(|| message(SET_VRING_ENABLE, VERSION_1 | REPLY, &0u64.to_le_bytes()));
                Verdict::Answer(ack)
            }
            _ => Verdict::Forward(Vec::new()),
        }
    }
}

/// Relays between `frontend` and `device` on two threads until either side
/// closes; counts the messages it answered itself in `answered`.
pub(crate) fn spawn(
    frontend: UnixStream,
    device: UnixStream,
    answered: Arc<std::sync::atomic::AtomicU64>,
) -> io::Result<()> {
    let to_front = Arc::new(Mutex::new(frontend.try_clone()?));
    let (front_in, dev_out) = (frontend, device.try_clone()?);
    let dev_in = device;
    let close = |a: &UnixStream, b: &UnixStream| {
        let _ = a.shutdown(std::net::Shutdown::Both);
        let _ = b.shutdown(std::net::Shutdown::Both);
    };
    let tf = to_front.clone();
    std::thread::Builder::new().name("vhost-relay-in".into()).spawn(move || {
        let mut filter = Filter::default();
        loop {
            let Ok(m) = recv(&front_in) else { break };
            let ok = match filter.judge(&m) {
                Verdict::Forward(then) => {
                    send(&dev_out, &m).is_ok()
                        && then.into_iter().all(|b| send(&dev_out, &Msg { bytes: b, fds: Vec::new() }).is_ok())
                }
                Verdict::Answer(ack) => {
                    answered.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    match ack {
                        Some(r) => tf.lock().unwrap_or_else(|e| e.into_inner()).write_all(&r).is_ok(),
                        None => true,
                    }
                }
            };
            if !ok {
                break;
            }
        }
        close(&front_in, &dev_out);
    })?;
    std::thread::Builder::new().name("vhost-relay-out".into()).spawn(move || {
        loop {
            let Ok(m) = recv(&dev_in) else { break };
            let front = to_front.lock().unwrap_or_else(|e| e.into_inner());
            if send(&front, &m).is_err() {
                let _ = front.shutdown(std::net::Shutdown::Both);
                break;
            }
        }
        let front = to_front.lock().unwrap_or_else(|e| e.into_inner());
        close(&front, &dev_in);
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(req: u32, flags: u32, body: &[u8]) -> Msg {
        Msg { bytes: message(req, flags, body), fds: Vec::new() }
    }

    fn enable_ring(flags: u32, index: u32, num: u32) -> Msg {
        let mut body = index.to_le_bytes().to_vec();
        body.extend_from_slice(&num.to_le_bytes());
        msg(SET_VRING_ENABLE, flags, &body)
    }

    fn enable(flags: u32) -> Msg {
        enable_ring(flags, 0, 1)
    }

    fn features(v: u64) -> Msg {
        msg(SET_FEATURES, VERSION_1, &v.to_le_bytes())
    }

    #[test]
    fn early_ring_enables_are_answered_then_handed_over_after_the_features() {
        let mut f = Filter::default();
        // Before any SET_FEATURES: not forwarded; acknowledged if asked.
        assert_eq!(f.judge(&enable(VERSION_1)), Verdict::Answer(None));
        let Verdict::Answer(Some(ack)) = f.judge(&enable(VERSION_1 | NEED_REPLY)) else { panic!("no ack") };
        assert_eq!(ack, msg(SET_VRING_ENABLE, VERSION_1 | REPLY, &0u64.to_le_bytes()).bytes);
        // Ring 1 enabled, then ring 3 enabled and disabled: the last word
        // for each ring is what the device gets, in ring order, right
        // after the SET_FEATURES that accepts the protocol-features bit.
        f.judge(&enable_ring(VERSION_1, 1, 1));
        f.judge(&enable_ring(VERSION_1, 3, 1));
        f.judge(&enable_ring(VERSION_1, 3, 0));
        let Verdict::Forward(then) = f.judge(&features(PROTOCOL_FEATURES | 1 << 32)) else { panic!("not forwarded") };
        let want: Vec<Vec<u8>> =
            [(0, 1), (1, 1), (3, 0)].iter().map(|&(i, n)| enable_ring(VERSION_1, i, n).bytes).collect();
        assert_eq!(then, want);
        // From then on every message passes, enables included.
        assert_eq!(f.judge(&enable(VERSION_1 | NEED_REPLY)), Verdict::Forward(vec![]));
        assert_eq!(f.judge(&msg(1, VERSION_1, &[])), Verdict::Forward(vec![]));
    }

    #[test]
    fn without_the_protocol_bit_early_enables_are_dropped() {
        let mut f = Filter::default();
        assert_eq!(f.judge(&enable(VERSION_1)), Verdict::Answer(None));
        // SET_FEATURES without the bit enables the rings itself.
        assert_eq!(f.judge(&features(1 << 32)), Verdict::Forward(vec![]));
        assert_eq!(f.judge(&enable(VERSION_1)), Verdict::Answer(None));
    }

    #[test]
    fn messages_and_descriptors_cross_the_relay() {
        // frontend <-> relay <-> device, over socket pairs.
        let (front, relay_front) = UnixStream::pair().unwrap();
        let (relay_dev, dev) = UnixStream::pair().unwrap();
        let answered = Arc::new(std::sync::atomic::AtomicU64::new(0));
        spawn(relay_front, relay_dev, answered.clone()).unwrap();
        // An early enable wanting a reply: answered by the relay.
        send(&front, &enable(VERSION_1 | NEED_REPLY)).unwrap();
        let r = recv(&front).unwrap();
        assert_eq!((r.request(), r.flags(), r.value()), (SET_VRING_ENABLE, VERSION_1 | REPLY, Some(0)));
        // A message with a descriptor reaches the device with it.
        let (a, b) = UnixStream::pair().unwrap();
        let mut m = msg(13, VERSION_1, &0u64.to_le_bytes());
        m.fds.push(OwnedFd::from(a));
        send(&front, &m).unwrap();
        let got = recv(&dev).unwrap();
        assert_eq!((got.request(), got.value(), got.fds.len()), (13, Some(0), 1));
        // The descriptor is the same socket: what goes in comes out of b.
        let mut passed = UnixStream::from(got.fds.into_iter().next().unwrap());
        passed.write_all(b"hi").unwrap();
        let mut buf = [0u8; 2];
        (&b).read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"hi");
        // The device's reply comes back; closing the device closes the
        // frontend's side.
        send(&dev, &msg(1, VERSION_1 | REPLY, &7u64.to_le_bytes())).unwrap();
        assert_eq!(recv(&front).unwrap().value(), Some(7));
        drop(dev);
        assert!(recv(&front).is_err());
        assert_eq!(answered.load(std::sync::atomic::Ordering::Relaxed), 1);
    }
}
