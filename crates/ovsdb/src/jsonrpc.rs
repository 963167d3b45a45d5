//! JSON-RPC 1.0 as OVSDB speaks it (RFC 7047 section 4): a sans-IO stream
//! codec and the three message kinds.
//!
//! OVSDB peers write JSON objects back to back with no delimiter, so the
//! [`Codec`] finds where one top-level value ends by scanning bytes: it
//! tracks nesting depth and whether it is inside a string (and after a
//! backslash there), and hands the complete slice to `serde_json`. The
//! scan is incremental: bytes that arrived in an earlier read are never
//! rescanned, so a large message split over many reads costs linear time.
//!
//! **Error policy.** A malformed value (bad JSON, a top-level value that is
//! not an object or array, or more than [`MAX_MESSAGE`] bytes) yields
//! [`CodecError`] and the codec *discards everything it had buffered* and
//! starts afresh with the next bytes fed to it. Resynchronising in the
//! middle of an undelimited stream cannot be done reliably, so the
//! [`crate::client`] and [`crate::appctl`] layers treat a codec error as
//! fatal for the connection: they log it and reset (the client then
//! reconnects with backoff). The codec itself never panics on any input.

use serde_json::{json, Value};

/// Largest single message accepted (the whole Open_vSwitch database of a
/// big deployment fits in a few MiB; this bounds memory on a bad peer).
pub const MAX_MESSAGE: usize = 64 << 20;

/// Why bytes could not be turned into a message.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CodecError {
    #[error("byte {0:#04x} cannot start a JSON-RPC message (expected '{{' or '[')")]
    BadStart(u8),
    #[error("message longer than {MAX_MESSAGE} bytes")]
    TooLong,
    #[error("malformed JSON: {0}")]
    Json(String),
}

/// Splits a byte stream into JSON values. Feed bytes with [`Codec::feed`],
/// then call [`Codec::next_value`] until it returns `None`.
#[derive(Debug, Default)]
pub struct Codec {
    buf: Vec<u8>,
    /// Bytes of `buf` already scanned (all belong to the value in progress).
    scanned: usize,
    /// Offset in `buf` where the value in progress starts, once seen.
    start: Option<usize>,
    depth: usize,
    in_string: bool,
    escaped: bool,
}

impl Codec {
    pub fn new() -> Codec {
        Codec::default()
    }

    /// Appends bytes read from the peer.
    pub fn feed(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes buffered but not yet returned as a value.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }

    fn reset(&mut self) {
        *self = Codec::default();
    }

    /// The next complete value, if one has arrived. After `Err` the buffer
    /// has been discarded (see the module docs).
    pub fn next_value(&mut self) -> Option<Result<Value, CodecError>> {
        let mut i = self.scanned;
        while i < self.buf.len() {
            let b = self.buf[i];
            if self.start.is_none() {
                match b {
                    b' ' | b'\t' | b'\r' | b'\n' => {
                        i += 1;
                        continue;
                    }
                    b'{' | b'[' => {
                        self.start = Some(i);
                        self.depth = 1;
                    }
                    _ => {
                        self.reset();
                        return Some(Err(CodecError::BadStart(b)));
                    }
                }
                i += 1;
                continue;
            }
            if self.in_string {
                if self.escaped {
                    self.escaped = false;
                } else if b == b'\\' {
                    self.escaped = true;
                } else if b == b'"' {
                    self.in_string = false;
                }
            } else {
                match b {
                    b'"' => self.in_string = true,
                    b'{' | b'[' => self.depth += 1,
                    b'}' | b']' => {
                        self.depth -= 1;
                        if self.depth == 0 {
                            let start = self.start.unwrap_or(0);
                            let parsed = serde_json::from_slice::<Value>(&self.buf[start..=i]);
                            self.buf.drain(..=i);
                            self.scanned = 0;
                            self.start = None;
                            return Some(match parsed {
                                Ok(v) => Ok(v),
                                Err(e) => {
                                    self.reset();
                                    Err(CodecError::Json(e.to_string()))
                                }
                            });
                        }
                    }
                    _ => {}
                }
            }
            i += 1;
        }
        if self.start.is_none() {
            // Only whitespace so far: drop it.
            self.buf.clear();
            self.scanned = 0;
        } else {
            self.scanned = i;
            if self.buf.len() - self.start.unwrap_or(0) > MAX_MESSAGE {
                self.reset();
                return Some(Err(CodecError::TooLong));
            }
        }
        None
    }
}

/// One JSON-RPC message (RFC 7047 section 4.1).
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// `{"method", "params", "id"}` with a non-null id: expects a response.
    Request { method: String, params: Vec<Value>, id: Value },
    /// `{"method", "params", "id": null}`: no response.
    Notification { method: String, params: Vec<Value> },
    /// `{"result", "error", "id"}`: `error` is null on success.
    Response { result: Value, error: Value, id: Value },
}

/// Why a JSON value is not a JSON-RPC message.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MessageError {
    #[error("JSON-RPC message is not an object")]
    NotObject,
    #[error("JSON-RPC message has neither \"method\" nor \"result\"/\"error\"")]
    Unrecognised,
    #[error("JSON-RPC \"method\" is not a string")]
    MethodNotString,
    #[error("JSON-RPC \"params\" is not an array")]
    ParamsNotArray,
    #[error("JSON-RPC response has no \"id\"")]
    NoId,
}

impl Message {
    /// Classifies a decoded value.
    pub fn from_value(v: Value) -> Result<Message, MessageError> {
        let Value::Object(mut o) = v else { return Err(MessageError::NotObject) };
        if let Some(m) = o.remove("method") {
            let Value::String(method) = m else { return Err(MessageError::MethodNotString) };
            let params = match o.remove("params") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::Array(a)) => a,
                Some(_) => return Err(MessageError::ParamsNotArray),
            };
            return Ok(match o.remove("id") {
                None | Some(Value::Null) => Message::Notification { method, params },
                Some(id) => Message::Request { method, params, id },
            });
        }
        if o.contains_key("result") || o.contains_key("error") {
            let id = o.remove("id").ok_or(MessageError::NoId)?;
            let result = o.remove("result").unwrap_or(Value::Null);
            let error = o.remove("error").unwrap_or(Value::Null);
            return Ok(Message::Response { result, error, id });
        }
        Err(MessageError::Unrecognised)
    }

    /// The JSON form, ready for [`encode`].
    pub fn to_value(&self) -> Value {
        match self {
            Message::Request { method, params, id } => json!({"method": method, "params": params, "id": id}),
            Message::Notification { method, params } => json!({"method": method, "params": params, "id": null}),
            Message::Response { result, error, id } => json!({"result": result, "error": error, "id": id}),
        }
    }

    /// Serialised bytes.
    pub fn encode(&self) -> Vec<u8> {
        encode(&self.to_value())
    }
}

/// Serialises one value for the wire.
pub fn encode(v: &Value) -> Vec<u8> {
    // Serialising a `Value` cannot fail (all keys are strings).
    serde_json::to_vec(v).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(c: &mut Codec) -> Vec<Result<Value, CodecError>> {
        std::iter::from_fn(|| c.next_value()).collect()
    }

    #[test]
    fn concatenated_values_and_split_reads() {
        let stream = br#"{"id":1,"result":"a}\"{"}  [1,[2]]{"method":"echo","params":[],"id":"x"}"#;
        for split in 0..stream.len() {
            let mut c = Codec::new();
            c.feed(&stream[..split]);
            let mut got = all(&mut c);
            c.feed(&stream[split..]);
            got.extend(all(&mut c));
            assert_eq!(got.len(), 3, "split at {split}");
            assert_eq!(got[0].as_ref().unwrap()["result"], "a}\"{");
            assert_eq!(got[1].as_ref().unwrap(), &json!([1, [2]]));
        }
    }

    #[test]
    fn byte_at_a_time() {
        let stream = br#"{"a":"\\"}{"b":{"c":[]}}"#;
        let mut c = Codec::new();
        let mut got = Vec::new();
        for b in stream {
            c.feed(&[*b]);
            got.extend(all(&mut c));
        }
        assert_eq!(got, vec![Ok(json!({"a":"\\"})), Ok(json!({"b":{"c":[]}}))]);
    }

    #[test]
    fn malformed_resets_then_recovers() {
        let mut c = Codec::new();
        c.feed(b"{\"a\":tru}");
        assert!(matches!(c.next_value(), Some(Err(CodecError::Json(_)))));
        assert_eq!(c.pending(), 0);
        c.feed(b"xyz");
        assert_eq!(c.next_value(), Some(Err(CodecError::BadStart(b'x'))));
        c.feed(b"{\"ok\":1}");
        assert_eq!(c.next_value(), Some(Ok(json!({"ok":1}))));
    }

    #[test]
    fn classify() {
        let m = Message::from_value(json!({"method":"update","params":[null,{}],"id":null})).unwrap();
        assert!(matches!(m, Message::Notification { .. }));
        let m = Message::from_value(json!({"method":"echo","params":[],"id":"echo"})).unwrap();
        assert!(matches!(m, Message::Request { .. }));
        let m = Message::from_value(json!({"result":[],"error":null,"id":3})).unwrap();
        assert_eq!(m, Message::Response { result: json!([]), error: Value::Null, id: json!(3) });
        assert_eq!(Message::from_value(json!([1])), Err(MessageError::NotObject));
        assert_eq!(Message::from_value(json!({"x":1})), Err(MessageError::Unrecognised));
        assert_eq!(Message::from_value(json!({"method":1})), Err(MessageError::MethodNotString));
    }
}
