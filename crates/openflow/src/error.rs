//! OpenFlow error messages: the errors xvs sends, with their wire type and
//! code per version, carrying (up to 64 bytes of) the offending message.

use crate::header::{msg, Header, Version, HEADER_LEN};

/// Errors the switch reports. Wire values differ between 1.0 and 1.3+.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// HELLO_FAILED / INCOMPATIBLE: no version in common.
    HelloFailed,
    /// BAD_REQUEST / BAD_VERSION.
    BadVersion,
    /// BAD_REQUEST / BAD_TYPE: unknown message type.
    BadType,
    /// BAD_REQUEST / BAD_LEN: length field wrong for the message.
    BadLen,
    /// BAD_REQUEST / BAD_EXPERIMENTER (1.0: BAD_VENDOR).
    BadExperimenter,
    /// BAD_MATCH / BAD_PREREQ (1.3+). OpenFlow 1.0 has no such code; there
    /// the switch answers FLOW_MOD_FAILED / EPERM, as OVS does.
    BadPrereq,
    /// FLOW_MOD_FAILED / BAD_TABLE_ID (1.3+).
    BadTableId,
    /// FLOW_MOD_FAILED / OVERLAP.
    Overlap,
}

impl ErrorKind {
    /// (type, code) on the wire for `v`.
    pub fn wire(self, v: Version) -> (u16, u16) {
        let of10 = v == Version::Of10;
        match self {
            ErrorKind::HelloFailed => (0, 0),
            ErrorKind::BadVersion => (1, 0),
            ErrorKind::BadType => (1, 1),
            ErrorKind::BadLen => (1, 6),
            ErrorKind::BadExperimenter => (1, 3),
            ErrorKind::BadPrereq => {
                if of10 {
                    (3, 5) // FLOW_MOD_FAILED / EPERM
                } else {
                    (4, 4) // BAD_MATCH / BAD_PREREQ
                }
            }
            ErrorKind::BadTableId => {
                if of10 {
                    (3, 5)
                } else {
                    (5, 2) // FLOW_MOD_FAILED / BAD_TABLE_ID
                }
            }
            ErrorKind::Overlap => {
                if of10 {
                    (3, 1)
                } else {
                    (5, 3)
                }
            }
        }
    }
}

/// An ERROR message answering `offending` (its xid, and at least its first
/// 64 bytes as the spec asks).
pub fn error_reply(v: Version, kind: ErrorKind, offending: &[u8]) -> Vec<u8> {
    let xid = Header::parse(offending).map(|h| h.xid).unwrap_or(0);
    let data = &offending[..offending.len().min(64)];
    let (ty, code) = kind.wire(v);
    let len = HEADER_LEN + 4 + data.len();
    let mut out = Vec::with_capacity(len);
    Header { version: v as u8, msg_type: msg::ERROR, length: len as u16, xid }.emit(&mut out);
    out.extend_from_slice(&ty.to_be_bytes());
    out.extend_from_slice(&code.to_be_bytes());
    out.extend_from_slice(data);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_carries_the_offending_bytes() {
        let bad = [0x04, 0x63, 0, 8, 0, 0, 0x12, 0x34];
        let e = error_reply(Version::Of13, ErrorKind::BadType, &bad);
        let h = Header::parse(&e).unwrap();
        assert_eq!((h.msg_type, h.xid, h.length as usize), (msg::ERROR, 0x1234, e.len()));
        assert_eq!(&e[8..12], &[0, 1, 0, 1]);
        assert_eq!(&e[12..], &bad);
        let big = vec![0u8; 300];
        assert_eq!(error_reply(Version::Of10, ErrorKind::BadLen, &big).len(), 8 + 4 + 64);
    }
}
