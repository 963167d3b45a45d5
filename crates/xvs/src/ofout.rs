//! The bounded outgoing queue of one OpenFlow connection, drained by the
//! connection's own writer thread, so that no peer can block anyone else.
//!
//! Before, every sender wrote to the peer's socket itself, under the
//! connection's writer lock: a snoop client that stopped reading (an
//! `ovs-ofctl snoop` in a terminal that was suspended) blocked the read
//! loop of whichever connection was being snooped (its `add-flows` never
//! finished), and a stalled `ovs-ofctl monitor` blocked the housekeeping
//! thread that delivers flow-removed / port-status, and with it rule
//! expiry and link tracking.
//!
//! Now senders only append to this queue; one writer thread per
//! connection does the blocking writes. Two kinds of message, as Open
//! vSwitch's rconn backlog treats them:
//! - asynchronous copies (snoop, packet-in, flow-removed, port-status)
//!   are dropped when more than [`ASYNC_CAP`] bytes wait: the peer that
//!   does not read loses them, counted in [`OutQueue::dropped`] and logged
//!   at most once per [`LOG_EVERY`];
//! - replies to the peer's own requests are never dropped silently: past
//!   [`REPLY_CAP`] the connection is closed (a peer asking without
//!   reading). Below that, the connection's read loop waits for the queue
//!   to drain under [`READ_PAUSE`] before reading more requests (flow
//!   control that only affects that peer).
//!
//! Caps are in bytes, not messages: a 100k-rule dump-flows reply is about
//! 10 MB and must fit in [`REPLY_CAP`]; 1 MiB of async copies is several
//! thousand packet-ins, plenty for a peer that reads at all.

use std::collections::VecDeque;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// Queued bytes beyond which asynchronous messages are dropped.
pub const ASYNC_CAP: usize = 1 << 20;
/// Queued bytes beyond which a reply closes the connection.
pub const REPLY_CAP: usize = 64 << 20;
/// The read loop pauses while more than this many bytes wait.
pub const READ_PAUSE: usize = 4 << 20;
/// At most one "dropped" log line per connection per this interval.
pub const LOG_EVERY: Duration = Duration::from_secs(10);

#[derive(Default)]
struct Inner {
    q: VecDeque<Vec<u8>>,
    bytes: usize,
    last_log: Option<Instant>,
}

/// One connection's outgoing queue.
#[derive(Default)]
pub struct OutQueue {
    inner: Mutex<Inner>,
    cv: Condvar,
    closed: AtomicBool,
    /// Asynchronous messages dropped because the peer did not read.
    pub dropped: AtomicU64,
}

/// What [`OutQueue::push_reply`] / [`OutQueue::push_async`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Pushed {
    Queued,
    /// An async message dropped (queue over [`ASYNC_CAP`]); `log` is set
    /// when the caller should write its rate-limited log line.
    Dropped {
        log: bool,
        total: u64,
    },
    /// A reply overflowed [`REPLY_CAP`]: the queue is closed.
    Overflow,
    Closed,
}

impl OutQueue {
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Closes the queue and wakes the writer and any paused reader.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        let _g = self.inner.lock().expect("out queue");
        self.cv.notify_all();
    }

    pub fn queued_bytes(&self) -> usize {
        self.inner.lock().expect("out queue").bytes
    }

    fn push(&self, b: &[u8], cap: usize, reply: bool) -> Pushed {
        if self.is_closed() {
            return Pushed::Closed;
        }
        let mut g = self.inner.lock().expect("out queue");
        if g.bytes + b.len() > cap && g.bytes > 0 {
            if reply {
                drop(g);
                self.close();
                return Pushed::Overflow;
            }
            let total = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            let now = Instant::now();
            let log = g.last_log.is_none_or(|t| now.duration_since(t) >= LOG_EVERY);
            if log {
                g.last_log = Some(now);
            }
            return Pushed::Dropped { log, total };
        }
        g.bytes += b.len();
        g.q.push_back(b.to_vec());
        self.cv.notify_all();
        Pushed::Queued
    }

    /// Queues a reply to the peer's own request.
    pub fn push_reply(&self, b: &[u8]) -> Pushed {
        self.push(b, REPLY_CAP, true)
    }

    /// Queues an asynchronous message (dropped if the peer is behind).
    pub fn push_async(&self, b: &[u8]) -> Pushed {
        self.push(b, ASYNC_CAP, false)
    }

    /// Blocks the caller (a connection's own read loop) while more than
    /// [`READ_PAUSE`] bytes wait, or until `timeout`. Returns whether the
    /// queue is still open.
    pub fn wait_below_pause(&self, timeout: Duration) -> bool {
        let mut g = self.inner.lock().expect("out queue");
        let until = Instant::now() + timeout;
        while g.bytes > READ_PAUSE && !self.is_closed() {
            let now = Instant::now();
            if now >= until {
                break;
            }
            g = self.cv.wait_timeout(g, until - now).expect("out queue").0;
        }
        !self.is_closed()
    }

    /// The writer thread's loop: writes queued messages to `w` until the
    /// queue is closed (then flushes what is left, best effort) or a write
    /// fails (then closes the queue).
    pub fn run_writer(&self, w: &mut impl Write) {
        loop {
            let batch: Vec<Vec<u8>> = {
                let mut g = self.inner.lock().expect("out queue");
                while g.q.is_empty() && !self.is_closed() {
                    g = self.cv.wait(g).expect("out queue");
                }
                if g.q.is_empty() {
                    return;
                }
                g.q.drain(..).collect()
            };
            let mut written = 0;
            for b in &batch {
                if w.write_all(b).is_err() {
                    self.close();
                    return;
                }
                written += b.len();
            }
            let mut g = self.inner.lock().expect("out queue");
            g.bytes -= written;
            self.cv.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn async_dropped_past_cap_replies_close() {
        let q = OutQueue::default();
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
        assert!(q.is_closed());
        assert_eq!(q.push_reply(b"x"), Pushed::Closed);
    }

    #[test]
    fn a_single_message_larger_than_the_cap_goes_to_an_empty_queue() {
        let q = OutQueue::default();
        assert_eq!(q.push_async(&vec![0u8; ASYNC_CAP + 1]), Pushed::Queued);
    }

    #[test]
    fn writer_drains_in_order_and_stops_on_close() {
        let q = Arc::new(OutQueue::default());
        let q2 = Arc::clone(&q);
        let h = std::thread::spawn(move || {
            let mut out = Vec::new();
            q2.run_writer(&mut out);
            out
        });
        for i in 0..100u8 {
            q.push_reply(&[i]);
        }
        assert!(q.wait_below_pause(Duration::from_secs(1)));
        q.close();
        let out = h.join().unwrap();
        assert_eq!(out, (0..100u8).collect::<Vec<_>>());
    }

    #[test]
    fn a_failed_write_closes_the_queue() {
        struct Broken;
        impl Write for Broken {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                Err(std::io::ErrorKind::BrokenPipe.into())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let q = OutQueue::default();
        q.push_reply(b"hello");
        q.run_writer(&mut Broken);
        assert!(q.is_closed());
    }
}
