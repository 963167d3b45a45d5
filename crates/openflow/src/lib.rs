//! # openflow: the OpenFlow wire codec (sans-IO)
//!
//! Bytes in, messages out, and back; no sockets. This first layer covers
//! what every connection needs before any flow table is touched:
//!
//! * [`Header`] framing: splitting a byte stream into messages
//!   ([`Framer`]), with the length checks the spec requires;
//! * version negotiation through HELLO, including the OpenFlow 1.3.1+
//!   version bitmap element ([`negotiate`]);
//! * ECHO, FEATURES, BARRIER, and ERROR replies that carry the offending
//!   bytes ([`error_reply`]), with the error types and codes of OpenFlow
//!   1.0 and 1.3+ ([`ErrorKind`]).
//!
//! Versions: 1.0 (0x01), 1.3 (0x04), 1.4 (0x05), 1.5 (0x06).
//! Correctness property: decoding never panics on any input; every
//! malformed message maps to the error the spec names.
#![deny(unsafe_code)]

pub mod action;
pub mod bytes;
pub mod error;
pub mod header;
pub mod msg;
pub mod nx_ct;
pub mod nx_learn;
pub mod of10;
pub mod oxm;

pub use error::{error_reply, ErrorKind};
pub use header::{negotiate, Framer, Header, Message, Version};

/// Frames `data` and decodes every message in every connection state,
/// checking the properties the fuzz target and the corpus test rely on:
/// no panic, and every refusal yields a well-formed ERROR that carries the
/// offending message's xid and first bytes.
pub fn check_decode(data: &[u8]) {
    let mut f = Framer::default();
    f.handle_bytes(data);
    while let Ok(Some(m)) = f.poll_message() {
        let v = Version::from_wire(m.header.version).unwrap_or(Version::Of13);
        for tid in [false, true] {
            let ctx = msg::Ctx { version: v, flow_mod_table_id: tid };
            if let Err(k) = msg::decode(&ctx, &m) {
                let e = error_reply(v, k, &m.bytes);
                let h = Header::parse(&e).expect("error header");
                assert_eq!(h.msg_type, header::msg::ERROR);
                assert_eq!(h.length as usize, e.len());
                assert_eq!(h.xid, m.header.xid);
                let n = m.bytes.len().min(64);
                assert_eq!(&e[e.len() - n..], &m.bytes[..n]);
            }
        }
    }
}
