//! The common OpenFlow header, stream framing and HELLO negotiation.

use crate::error::ErrorKind;

/// Versions xvs speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Version {
    Of10 = 0x01,
    Of13 = 0x04,
    Of14 = 0x05,
    Of15 = 0x06,
}

impl Version {
    pub const ALL: [Version; 4] = [Version::Of10, Version::Of13, Version::Of14, Version::Of15];

    pub fn from_wire(v: u8) -> Option<Version> {
        Version::ALL.into_iter().find(|x| *x as u8 == v)
    }

    pub fn name(self) -> &'static str {
        match self {
            Version::Of10 => "OpenFlow10",
            Version::Of13 => "OpenFlow13",
            Version::Of14 => "OpenFlow14",
            Version::Of15 => "OpenFlow15",
        }
    }
}

/// Message type numbers (one table for the crate, in [`crate::msg::t`]).
pub use crate::msg::t as msg;

pub const HEADER_LEN: usize = 8;
/// Largest message the framer accepts (the length field is 16 bits).
pub const MAX_LEN: usize = 65535;

/// The 8-byte header every OpenFlow message starts with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub version: u8,
    pub msg_type: u8,
    pub length: u16,
    pub xid: u32,
}

impl Header {
    pub fn parse(b: &[u8]) -> Option<Header> {
        if b.len() < HEADER_LEN {
            return None;
        }
        Some(Header {
            version: b[0],
            msg_type: b[1],
            length: u16::from_be_bytes([b[2], b[3]]),
            xid: u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
        })
    }

    pub fn emit(&self, out: &mut Vec<u8>) {
        out.push(self.version);
        out.push(self.msg_type);
        out.extend_from_slice(&self.length.to_be_bytes());
        out.extend_from_slice(&self.xid.to_be_bytes());
    }
}

/// One framed message: its header and its whole bytes (header included).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    pub header: Header,
    pub bytes: Vec<u8>,
}

/// Splits a byte stream into messages. A length below the header size is
/// unrecoverable (the stream has lost its framing): the framer reports it
/// once and the connection must be closed, as the spec requires.
#[derive(Default)]
pub struct Framer {
    buf: Vec<u8>,
    broken: bool,
}

impl Framer {
    /// Feeds received bytes.
    pub fn handle_bytes(&mut self, data: &[u8]) {
        if !self.broken {
            self.buf.extend_from_slice(data);
        }
    }

    /// The next complete message, `Ok(None)` when more bytes are needed,
    /// or `Err` (bad length) after which the connection is unusable.
    pub fn poll_message(&mut self) -> Result<Option<Message>, ErrorKind> {
        if self.broken {
            return Err(ErrorKind::BadLen);
        }
        let Some(h) = Header::parse(&self.buf) else { return Ok(None) };
        let len = h.length as usize;
        if len < HEADER_LEN {
            self.broken = true;
            self.buf.clear();
            return Err(ErrorKind::BadLen);
        }
        if self.buf.len() < len {
            return Ok(None);
        }
        let bytes: Vec<u8> = self.buf.drain(..len).collect();
        Ok(Some(Message { header: h, bytes }))
    }
}

/// HELLO element type carrying the version bitmap (OpenFlow 1.3.1+).
const HELLO_ELEM_VERSIONBITMAP: u16 = 1;

/// Builds our HELLO: the highest version we allow in the header and a
/// bitmap of all of them.
pub fn hello(allowed: &[Version], xid: u32) -> Vec<u8> {
    let max = allowed.iter().copied().max().unwrap_or(Version::Of15);
    let mut bitmap = 0u32;
    for v in allowed {
        bitmap |= 1 << (*v as u8);
    }
    let mut out = Vec::with_capacity(16);
    Header { version: max as u8, msg_type: msg::HELLO, length: 16, xid }.emit(&mut out);
    if max >= Version::Of13 {
        out.extend_from_slice(&HELLO_ELEM_VERSIONBITMAP.to_be_bytes());
        out.extend_from_slice(&8u16.to_be_bytes());
        out.extend_from_slice(&bitmap.to_be_bytes());
    } else {
        out.truncate(HEADER_LEN);
        out[2..4].copy_from_slice(&8u16.to_be_bytes());
    }
    out
}

/// Picks the version for a connection from the peer's HELLO: the highest
/// version both allow, using the peer's bitmap when it sent one, else the
/// lower of the two header versions. `Err(HelloFailed)` when none is shared.
pub fn negotiate(ours: &[Version], peer_hello: &Message) -> Result<Version, ErrorKind> {
    let h = peer_hello.header;
    let mut peer_bitmap: Option<u32> = None;
    let b = &peer_hello.bytes;
    let mut off = HEADER_LEN;
    while off + 4 <= b.len() {
        let ty = u16::from_be_bytes([b[off], b[off + 1]]);
        let len = u16::from_be_bytes([b[off + 2], b[off + 3]]) as usize;
        if len < 4 || off + len > b.len() {
            break;
        }
        if ty == HELLO_ELEM_VERSIONBITMAP && len >= 8 {
            peer_bitmap = Some(u32::from_be_bytes([b[off + 4], b[off + 5], b[off + 6], b[off + 7]]));
        }
        off += len.div_ceil(8) * 8;
    }
    let shared = |v: &Version| match peer_bitmap {
        Some(bm) => bm & (1 << (*v as u8)) != 0,
        None => (*v as u8) <= h.version,
    };
    ours.iter().copied().filter(shared).max().ok_or(ErrorKind::HelloFailed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any byte stream, fed in any chunks, frames without panicking
        /// and every message it yields has the length its header says.
        #[test]
        fn framer_never_panics(data in prop::collection::vec(any::<u8>(), 0..300), cut in 0usize..300) {
            let mut f = Framer::default();
            let cut = cut.min(data.len());
            f.handle_bytes(&data[..cut]);
            f.handle_bytes(&data[cut..]);
            while let Ok(Some(m)) = f.poll_message() {
                prop_assert_eq!(m.bytes.len(), m.header.length as usize);
            }
            let ours = Version::ALL;
            if let Some(h) = Header::parse(&data) {
                let _ = negotiate(&ours, &Message { header: h, bytes: data.clone() });
            }
        }
    }

    fn msg(b: &[u8]) -> Message {
        Message { header: Header::parse(b).unwrap(), bytes: b.to_vec() }
    }

    #[test]
    fn framing_splits_and_waits() {
        let mut f = Framer::default();
        let h1 = hello(&Version::ALL, 7);
        let mut stream = h1.clone();
        stream.extend_from_slice(&[0x04, 2, 0, 8, 0, 0, 0, 9]);
        f.handle_bytes(&stream[..5]);
        assert_eq!(f.poll_message().unwrap(), None);
        f.handle_bytes(&stream[5..]);
        assert_eq!(f.poll_message().unwrap().unwrap().bytes, h1);
        let echo = f.poll_message().unwrap().unwrap();
        assert_eq!((echo.header.msg_type, echo.header.xid), (msg::ECHO_REQUEST, 9));
        assert_eq!(f.poll_message().unwrap(), None);
    }

    #[test]
    fn bad_length_breaks_the_stream() {
        let mut f = Framer::default();
        f.handle_bytes(&[0x04, 0, 0, 4, 0, 0, 0, 1]);
        assert_eq!(f.poll_message(), Err(ErrorKind::BadLen));
        f.handle_bytes(&hello(&Version::ALL, 1));
        assert_eq!(f.poll_message(), Err(ErrorKind::BadLen));
    }

    #[test]
    fn negotiation() {
        let ours = [Version::Of10, Version::Of13, Version::Of14, Version::Of15];
        // A 1.5 peer with a bitmap of {1.0, 1.3}.
        let mut h = hello(&[Version::Of10, Version::Of13], 1);
        h[0] = 0x06;
        assert_eq!(negotiate(&ours, &msg(&h)), Ok(Version::Of13));
        // A plain 1.0 hello (ovs-ofctl without -O).
        assert_eq!(negotiate(&ours, &msg(&[0x01, 0, 0, 8, 0, 0, 0, 1])), Ok(Version::Of10));
        // A 1.4 peer without a bitmap: the lower of the two.
        assert_eq!(negotiate(&ours, &msg(&[0x05, 0, 0, 8, 0, 0, 0, 1])), Ok(Version::Of14));
        // Nothing shared.
        assert_eq!(negotiate(&[Version::Of15], &msg(&[0x01, 0, 0, 8, 0, 0, 0, 1])), Err(ErrorKind::HelloFailed));
        // Our hello round-trips through our own negotiation.
        assert_eq!(negotiate(&ours, &msg(&hello(&ours, 3))), Ok(Version::Of15));
    }
}
