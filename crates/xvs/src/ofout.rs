//! The bounded outgoing buffer of one OpenFlow connection, written to a
//! non-blocking socket by the OpenFlow event loop, so that no peer can
//! block anyone else.
//!
//! Nothing ever waits on a peer: a message is appended here and written
//! as far as the socket takes it; the rest goes out when the socket is
//! writable again. Two kinds of message, as Open vSwitch's rconn backlog
//! treats them:
//! - asynchronous copies (snoop, packet-in, flow-removed, port-status,
//!   keepalive) are dropped when more than [`ASYNC_CAP`] bytes wait: the
//!   peer that does not read loses them, counted in [`OutBuf::dropped`]
//!   and logged at most once per [`LOG_EVERY`];
//! - replies to the peer's own requests are never dropped silently: past
//!   [`REPLY_CAP`] the connection is closed (a peer asking without
//!   reading). Below that, the event loop stops reading the peer's
//!   requests while more than [`READ_PAUSE`] bytes wait (flow control
//!   that only affects that peer).
//!
//! Caps are in bytes, not messages: a 100k-rule dump-flows reply is about
//! 10 MB and must fit in [`REPLY_CAP`]; 1 MiB of async copies is several
//! thousand packet-ins, plenty for a peer that reads at all.

use std::collections::VecDeque;
use std::io::{ErrorKind, Write};
use std::time::{Duration, Instant};

/// Queued bytes beyond which asynchronous messages are dropped.
pub const ASYNC_CAP: usize = 1 << 20;
/// Queued bytes beyond which a reply closes the connection.
pub const REPLY_CAP: usize = 64 << 20;
/// The peer's requests are not read while more than this many bytes wait.
pub const READ_PAUSE: usize = 4 << 20;
/// At most one "dropped" log line per connection per this interval.
pub const LOG_EVERY: Duration = Duration::from_secs(10);

/// One connection's outgoing bytes.
#[derive(Default)]
pub struct OutBuf {
    q: VecDeque<Vec<u8>>,
    /// Bytes of the front message already written.
    sent: usize,
    bytes: usize,
    last_log: Option<Instant>,
    /// Asynchronous messages dropped because the peer did not read.
    pub dropped: u64,
}

/// What [`OutBuf::push_reply`] / [`OutBuf::push_async`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Pushed {
    Queued,
    /// An async message dropped (buffer over [`ASYNC_CAP`]); `log` is set
    /// when the caller should write its rate-limited log line.
    Dropped {
        log: bool,
        total: u64,
    },
    /// A reply overflowed [`REPLY_CAP`]: the connection must close.
    Overflow,
}

impl OutBuf {
    pub fn queued_bytes(&self) -> usize {
        self.bytes
    }

    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }

    fn push(&mut self, b: &[u8], cap: usize, reply: bool) -> Pushed {
        if self.bytes + b.len() > cap && self.bytes > 0 {
            if reply {
                return Pushed::Overflow;
            }
            self.dropped += 1;
            let now = Instant::now();
            let log = self.last_log.is_none_or(|t| now.duration_since(t) >= LOG_EVERY);
            if log {
                self.last_log = Some(now);
            }
            return Pushed::Dropped { log, total: self.dropped };
        }
        self.bytes += b.len();
        self.q.push_back(b.to_vec());
        Pushed::Queued
    }

    /// Queues a reply to the peer's own request.
    pub fn push_reply(&mut self, b: &[u8]) -> Pushed {
        self.push(b, REPLY_CAP, true)
    }

    /// Queues an asynchronous message (dropped if the peer is behind).
    pub fn push_async(&mut self, b: &[u8]) -> Pushed {
        self.push(b, ASYNC_CAP, false)
    }

    /// Writes what `w` takes without blocking. `Ok(true)` when everything
    /// was written, `Ok(false)` when the socket is full (the rest waits
    /// for it to be writable), `Err` when the connection failed.
    pub fn flush_to(&mut self, w: &mut impl Write) -> std::io::Result<bool> {
        while let Some(front) = self.q.front() {
            match w.write(&front[self.sent..]) {
                Ok(0) => return Err(ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.sent += n;
                    self.bytes -= n;
                    if self.sent == front.len() {
                        self.q.pop_front();
                        self.sent = 0;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn async_dropped_past_cap_replies_overflow() {
        let mut q = OutBuf::default();
        let big = vec![0u8; ASYNC_CAP / 2];
        assert_eq!(q.push_async(&big), Pushed::Queued);
        assert_eq!(q.push_async(&big), Pushed::Queued);
        assert_eq!(q.push_async(&big), Pushed::Dropped { log: true, total: 1 });
        // The second drop within LOG_EVERY is counted but not logged.
        assert_eq!(q.push_async(&big), Pushed::Dropped { log: false, total: 2 });
        // Replies still fit up to REPLY_CAP.
        assert_eq!(q.push_reply(&big), Pushed::Queued);
        let huge = vec![0u8; REPLY_CAP];
        assert_eq!(q.push_reply(&huge), Pushed::Overflow);
    }

    #[test]
    fn a_single_message_larger_than_the_cap_goes_to_an_empty_buffer() {
        let mut q = OutBuf::default();
        assert_eq!(q.push_async(&vec![0u8; ASYNC_CAP + 1]), Pushed::Queued);
    }

    /// A socket that takes `room` bytes, then would block.
    struct Limited {
        got: Vec<u8>,
        room: usize,
    }

    impl Write for Limited {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            if self.room == 0 {
                return Err(ErrorKind::WouldBlock.into());
            }
            let n = b.len().min(self.room).min(3);
            self.got.extend_from_slice(&b[..n]);
            self.room -= n;
            Ok(n)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn partial_writes_resume_where_they_stopped_in_order() {
        let mut q = OutBuf::default();
        for i in 0..10u8 {
            q.push_reply(&[i, i, i, i, i]);
        }
        let mut w = Limited { got: Vec::new(), room: 17 };
        assert!(!q.flush_to(&mut w).unwrap(), "the socket filled up");
        assert_eq!(q.queued_bytes(), 50 - 17);
        w.room = usize::MAX;
        assert!(q.flush_to(&mut w).unwrap());
        assert!(q.is_empty());
        let want: Vec<u8> = (0..10u8).flat_map(|i| [i; 5]).collect();
        assert_eq!(w.got, want);
    }

    #[test]
    fn a_failed_write_is_an_error() {
        struct Broken;
        impl Write for Broken {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                Err(ErrorKind::BrokenPipe.into())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mut q = OutBuf::default();
        q.push_reply(b"hello");
        assert!(q.flush_to(&mut Broken).is_err());
    }
}
