//! TCP state and sequence-window tracking.
//!
//! Each connection keeps one [`Peer`] per direction. The checks follow the
//! well-known stateful-filtering model that the Linux, BSD pf and Open
//! vSwitch trackers share (Guido van Rooij, "Real Stateful TCP Packet
//! Filtering in IP Filter"): a segment is accepted only if
//!
//! 1. its end (`seq + len`, plus one for SYN and for FIN) does not pass the
//!    highest sequence number the other side has allowed (its last ack plus
//!    its window) — `seqhi`;
//! 2. its start is not older than the highest end already sent minus the
//!    largest window the other side ever advertised;
//! 3. its acknowledgement is not more than a maximum window beyond, nor
//!    behind, what the other side has actually sent.
//!
//! Segments that fail are `+inv` and change nothing. While one side has not
//! been seen yet (a connection picked up mid-stream) or once both have
//! closed, a looser check applies, so the tracker can synchronise on an
//! existing flow and retransmissions around the close are not flagged.
//!
//! Flag combinations that no stack sends (SYN+FIN, SYN+RST, no flags at
//! all, FIN without ACK, ...) are `+inv` before any of this.

use crate::packet::{tcp_flags as f, TcpSeg};

/// Per-direction TCP states (the numbering orders them: later states are
/// larger).
pub mod st {
    pub const CLOSED: u8 = 0;
    pub const SYN_SENT: u8 = 2;
    pub const ESTABLISHED: u8 = 4;
    /// FIN sent, not yet acknowledged.
    pub const CLOSING: u8 = 7;
    /// FIN sent and acknowledged.
    pub const FIN_WAIT_2: u8 = 9;
    pub const TIME_WAIT: u8 = 10;

    pub fn name(s: u8) -> &'static str {
        match s {
            CLOSED => "CLOSED",
            SYN_SENT => "SYN_SENT",
            ESTABLISHED => "ESTABLISHED",
            CLOSING => "CLOSING",
            FIN_WAIT_2 => "FIN_WAIT_2",
            TIME_WAIT => "TIME_WAIT",
            _ => "UNKNOWN",
        }
    }
}

/// A window larger than any real one: the slack the acknowledgement check
/// allows (64 KiB plus a full-size segment).
const MAX_ACK_WINDOW: u32 = 65535 + 1500;

/// What one direction of a connection has shown.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Peer {
    pub state: u8,
    /// Highest sequence end this side has sent.
    pub seqlo: u32,
    /// Highest sequence end this side may send (the other side's ack plus
    /// window).
    pub seqhi: u32,
    /// Largest (scaled) window this side advertised.
    pub max_win: u32,
    /// Window scale from this side's SYN, if it sent one with the option.
    pub wscale: Option<u8>,
    /// Whether any segment of this side has been seen.
    pub seen: bool,
}

/// The result of one segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Update {
    Valid,
    Invalid,
    /// A SYN on a connection both sides have closed: the old connection
    /// ends and the SYN may start a new one.
    Reopen,
}

/// Whether a segment with these flags may start a connection.
pub fn valid_new(flags: u16) -> bool {
    valid_flags(flags) && !(flags & f::SYN != 0 && flags & f::ACK != 0) && flags & f::RST == 0
}

/// Flag combinations real stacks send (PSH, ECE and CWR ignored).
pub fn valid_flags(flags: u16) -> bool {
    let x = flags & (f::FIN | f::SYN | f::RST | f::ACK | f::URG);
    matches!(
        x,
        f::SYN
            | 0x22 // SYN|URG
            | 0x12 // SYN|ACK
            | f::RST
            | 0x14 // RST|ACK
            | 0x11 // FIN|ACK
            | 0x31 // FIN|ACK|URG
            | f::ACK
            | 0x30 // ACK|URG
    )
}

fn geq(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) >= 0
}
fn gt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

/// The two sides of a TCP connection; `peers[0]` is the originator.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpState {
    pub peers: [Peer; 2],
    /// Sequence windows are not checked (flags and states still are): set
    /// when the kernel fast path starts forwarding the connection's
    /// segments without the tracker, whose windows then fall behind (as
    /// Linux marks a connection it hands to a flowtable).
    pub liberal: bool,
}

impl TcpState {
    /// State for a connection whose first segment (from the originator) is
    /// `seg`, which must pass [`valid_new`].
    pub fn new(seg: &TcpSeg) -> TcpState {
        let mut s = TcpState::default();
        s.update(0, seg);
        s
    }

    /// Window scales apply only once both SYNs carried the option.
    fn scales(&self) -> (u32, u32) {
        match (self.peers[0].wscale, self.peers[1].wscale) {
            (Some(a), Some(b)) => (a as u32, b as u32),
            _ => (0, 0),
        }
    }

    /// Tracks a segment sent by side `dir` (0 originator, 1 replier).
    pub fn update(&mut self, dir: usize, seg: &TcpSeg) -> Update {
        if !valid_flags(seg.flags) {
            return Update::Invalid;
        }
        let syn = seg.flags & f::SYN != 0;
        let fin = seg.flags & f::FIN != 0;
        let ack_flag = seg.flags & f::ACK != 0;
        let rst = seg.flags & f::RST != 0;
        {
            let [a, b] = &self.peers;
            if syn && !ack_flag && a.state >= st::FIN_WAIT_2 && b.state >= st::FIN_WAIT_2 {
                return Update::Reopen;
            }
        }
        let liberal = self.liberal;
        let (sws, dws) = {
            let (s0, s1) = self.scales();
            if dir == 0 {
                (s0, s1)
            } else {
                (s1, s0)
            }
        };
        let (src, dst) = {
            let [p0, p1] = &mut self.peers;
            if dir == 0 {
                (p0, p1)
            } else {
                (p1, p0)
            }
        };
        let seq = seg.seq;
        let end = seq.wrapping_add(seg.len).wrapping_add(syn as u32).wrapping_add(fin as u32);
        // The window is not scaled on SYNs.
        let win = if syn { seg.win as u32 } else { (seg.win as u32) << sws };
        if !src.seen {
            // First segment from this side: take its numbers as they are.
            src.seen = true;
            if syn {
                // RFC 7323 caps the shift at 14.
                src.wscale = seg.wscale.map(|w| w.min(14));
            }
            src.seqlo = end;
            src.seqhi = end.wrapping_add(win.max(1));
            src.max_win = win.max(1);
        }
        let ack = if !ack_flag || (rst && seg.ack == 0) { dst.seqlo } else { seg.ack };
        let ackskew = dst.seqlo.wrapping_sub(ack) as i32;
        // max_win is stored scaled already.
        let dwin = dst.max_win.max(1);
        let strict = geq(src.seqhi, end)
            && geq(seq, src.seqlo.wrapping_sub(dwin))
            && (!dst.seen || (ackskew >= -(MAX_ACK_WINDOW as i32) << sws && ackskew <= (MAX_ACK_WINDOW as i32) << sws));
        let loose = !dst.seen
            || dst.state >= st::FIN_WAIT_2
            || src.state >= st::FIN_WAIT_2
            || (rst && geq(src.seqhi.wrapping_add(MAX_ACK_WINDOW), end));
        let ok = liberal
            || strict
            || (loose
                && geq(src.seqhi.wrapping_add(MAX_ACK_WINDOW << sws), end)
                && geq(seq, src.seqlo.wrapping_sub(MAX_ACK_WINDOW << dws)));
        if !ok {
            return Update::Invalid;
        }
        if win > src.max_win {
            src.max_win = win;
        }
        if gt(end, src.seqlo) {
            src.seqlo = end;
        }
        if ack_flag && dst.seen {
            let hi = ack.wrapping_add(win.max(1));
            if geq(hi, dst.seqhi) {
                dst.seqhi = hi;
            }
        } else if !dst.seen {
            // Until the other side speaks, let it send anything up to a
            // window past what it acknowledges.
            dst.seqhi = ack.wrapping_add(win.max(1));
        }
        if syn && src.state < st::SYN_SENT {
            src.state = st::SYN_SENT;
        }
        if fin && src.state < st::CLOSING {
            src.state = st::CLOSING;
        }
        if ack_flag {
            if dst.state == st::SYN_SENT {
                dst.state = st::ESTABLISHED;
            } else if dst.state == st::CLOSING && geq(ack, dst.seqlo) {
                dst.state = st::FIN_WAIT_2;
            }
        }
        if !syn && src.state < st::ESTABLISHED && src.state != st::SYN_SENT {
            // Picked up mid-stream: data without a SYN means established.
            src.state = st::ESTABLISHED;
        }
        // Both FINs acknowledged, or a reset: the connection is closed
        // (shown as TIME_WAIT, as Open vSwitch shows it).
        if rst || (src.state >= st::FIN_WAIT_2 && dst.state >= st::FIN_WAIT_2) {
            src.state = st::TIME_WAIT;
            dst.state = st::TIME_WAIT;
        }
        Update::Valid
    }

    /// The `protoinfo` state shown for the connection: the less advanced
    /// of the two sides, which is what an operator means by "the state".
    pub fn states(&self) -> (u8, u8) {
        (self.peers[0].state, self.peers[1].state)
    }

    /// The timeout class the connection is in.
    pub fn phase(&self) -> Phase {
        let (a, b) = self.states();
        if a >= st::FIN_WAIT_2 && b >= st::FIN_WAIT_2 {
            Phase::Closed
        } else if a >= st::CLOSING && b >= st::CLOSING {
            Phase::FinWait
        } else if a < st::ESTABLISHED || b < st::ESTABLISHED {
            Phase::Opening
        } else if a >= st::CLOSING || b >= st::CLOSING {
            Phase::Closing
        } else {
            Phase::Established
        }
    }
}

/// TCP timeout classes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Opening,
    Established,
    Closing,
    FinWait,
    Closed,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(seq: u32, ack: u32, flags: u16, len: u32) -> TcpSeg {
        TcpSeg { seq, ack, flags, win: 1000, len, wscale: None }
    }
    const S: u16 = f::SYN;
    const SA: u16 = f::SYN | f::ACK;
    const A: u16 = f::ACK;
    const FA: u16 = f::FIN | f::ACK;

    /// Handshake, data both ways, close from both sides.
    fn handshake() -> TcpState {
        let mut t = TcpState::new(&seg(100, 0, S, 0));
        assert_eq!(t.update(1, &seg(5000, 101, SA, 0)), Update::Valid);
        assert_eq!(t.update(0, &seg(101, 5001, A, 0)), Update::Valid);
        assert_eq!(t.states(), (st::ESTABLISHED, st::ESTABLISHED));
        t
    }

    #[test]
    fn handshake_data_and_close() {
        let mut t = handshake();
        assert_eq!(t.update(0, &seg(101, 5001, A, 500)), Update::Valid);
        assert_eq!(t.update(1, &seg(5001, 601, A, 300)), Update::Valid);
        assert_eq!(t.phase(), Phase::Established);
        assert_eq!(t.update(0, &seg(601, 5301, FA, 0)), Update::Valid);
        assert_eq!(t.phase(), Phase::Closing);
        assert_eq!(t.update(1, &seg(5301, 602, FA, 0)), Update::Valid);
        assert_eq!(t.states(), (st::FIN_WAIT_2, st::CLOSING));
        assert_eq!(t.update(0, &seg(602, 5302, A, 0)), Update::Valid);
        assert_eq!(t.phase(), Phase::Closed);
        assert_eq!(t.states(), (st::TIME_WAIT, st::TIME_WAIT));
        // A new SYN on the closed connection reopens it.
        assert_eq!(t.update(0, &seg(9000, 0, S, 0)), Update::Reopen);
    }

    #[test]
    fn retransmission_is_valid() {
        let mut t = handshake();
        assert_eq!(t.update(0, &seg(101, 5001, A, 500)), Update::Valid);
        assert_eq!(t.update(0, &seg(101, 5001, A, 500)), Update::Valid, "same segment again");
    }

    #[test]
    fn data_beyond_the_window_is_invalid() {
        let mut t = handshake();
        // The replier advertised 1000 bytes; 5000 bytes at once do not fit.
        assert_eq!(t.update(0, &seg(101, 5001, A, 5000)), Update::Invalid);
        // A segment far in the past.
        assert_eq!(t.update(0, &seg(101u32.wrapping_sub(100_000), 5001, A, 10)), Update::Invalid);
        // An ack for data the other side never sent.
        assert_eq!(t.update(0, &seg(101, 5001 + 200_000, A, 10)), Update::Invalid);
        // Nothing changed: an in-window segment still passes.
        assert_eq!(t.update(0, &seg(101, 5001, A, 100)), Update::Valid);
    }

    #[test]
    fn bad_flag_combinations() {
        for bad in [f::SYN | f::FIN, f::SYN | f::RST, 0, f::FIN, f::FIN | f::RST | f::ACK] {
            assert!(!valid_flags(bad) || !valid_new(bad), "{bad:#x}");
        }
        assert!(!valid_new(SA), "a SYN-ACK cannot start a connection");
        assert!(valid_new(A), "mid-stream pickup");
        let mut t = handshake();
        assert_eq!(t.update(0, &seg(101, 5001, f::SYN | f::FIN, 0)), Update::Invalid);
    }

    #[test]
    fn rst_closes_both_sides() {
        let mut t = handshake();
        assert_eq!(t.update(1, &seg(5001, 101, f::RST | f::ACK, 0)), Update::Valid);
        assert_eq!(t.phase(), Phase::Closed);
    }

    #[test]
    fn mid_stream_pickup_synchronises() {
        let mut t = TcpState::new(&seg(1_000_000, 2_000_000, A, 100));
        // More data before the other side is seen: loose.
        assert_eq!(t.update(0, &seg(1_000_100, 2_000_000, A, 100)), Update::Valid);
        assert_eq!(t.update(1, &seg(2_000_000, 1_000_200, A, 50)), Update::Valid);
        assert_eq!(t.states(), (st::ESTABLISHED, st::ESTABLISHED));
        // Now strict: an ack far ahead of what was sent is invalid.
        assert_eq!(t.update(1, &seg(2_000_050, 1_000_200 + 500_000, A, 0)), Update::Invalid);
    }

    #[test]
    fn large_scaled_windows_do_not_overflow() {
        let mut syn = seg(100, 0, S, 0);
        syn.wscale = Some(14);
        syn.win = 65535;
        let mut t = TcpState::new(&syn);
        let mut synack = seg(5000, 101, SA, 0);
        synack.wscale = Some(14);
        synack.win = 65535;
        assert_eq!(t.update(1, &synack), Update::Valid);
        let mut a = seg(101, 5001, A, 0);
        a.win = 65535;
        assert_eq!(t.update(0, &a), Update::Valid);
        let mut b = seg(5001, 101, A, 0);
        b.win = 65535;
        assert_eq!(t.update(1, &b), Update::Valid);
        let mut d = seg(101, 5001, A, 1_000_000);
        d.win = 65535;
        assert_eq!(t.update(0, &d), Update::Valid);
        assert_eq!(t.update(0, &d), Update::Valid, "retransmitted");
    }

    #[test]
    fn window_scaling_applies_after_both_syns() {
        let mut syn = seg(100, 0, S, 0);
        syn.wscale = Some(7);
        let mut t = TcpState::new(&syn);
        let mut synack = seg(5000, 101, SA, 0);
        synack.wscale = Some(7);
        assert_eq!(t.update(1, &synack), Update::Valid);
        // win 1000 << 7 = 128,000 bytes allowed.
        assert_eq!(t.update(0, &seg(101, 5001, A, 0)), Update::Valid);
        assert_eq!(t.update(1, &seg(5001, 101, A, 0)), Update::Valid);
        assert_eq!(t.update(0, &seg(101, 5001, A, 60_000)), Update::Valid, "fits the scaled window");
    }
}
