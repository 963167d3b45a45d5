//! OpenFlow meters, enforced in the datapath.
//!
//! A [`Meter`] is shared (by `Arc`) between the OpenFlow layer, which
//! configures it and reads its counters, and every poll thread, which runs
//! packets through it: translation emits `DpAction::Meter` carrying the
//! meter itself, so the fast path never looks a meter up by id. A modified
//! meter keeps its identity (the configuration is replaced in place), so
//! cached megaflows stay valid; a deleted meter takes its rules with it
//! (and so, through revalidation, its megaflows).
//!
//! Each band is a token bucket refilled at the band's rate (packets per
//! second, or kilobits per second), holding at most `burst_size` (packets
//! or kilobits) — or 100 ms worth of the rate when no burst is given. A
//! packet that finds a band's bucket short of its cost *exceeds* that
//! band; of the exceeded bands the one with the highest rate applies
//! (drop, or DSCP remark), as OpenFlow specifies. Time comes from the
//! caller (`now_ms`), so the meter is deterministic under test.
//!
//! Thread safety: the token state sits behind a mutex per meter (held for
//! a few arithmetic operations per packet); counters are relaxed atomics.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

/// Meter flags (OpenFlow values).
pub mod mf {
    pub const KBPS: u16 = 1;
    pub const PKTPS: u16 = 2;
    pub const BURST: u16 = 4;
    pub const STATS: u16 = 8;
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BandType {
    Drop,
    /// Raise the drop precedence of an AF-class DSCP by this many levels.
    DscpRemark(u8),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BandConfig {
    pub kind: BandType,
    /// Packets per second, or kilobits per second (per the meter's flags).
    pub rate: u32,
    /// Packets or kilobits; 0 = none given.
    pub burst_size: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct MeterConfig {
    pub flags: u16,
    pub bands: Vec<BandConfig>,
}

/// What the meter decided for a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    Drop,
    /// Pass with this many extra drop-precedence levels.
    Remark(u8),
}

struct State {
    cfg: MeterConfig,
    /// Per band: tokens in milli-units (milli-packets or bits) and capacity.
    tokens: Vec<u64>,
    cap: Vec<u64>,
    last_ms: Option<u64>,
}

pub struct Meter {
    pub id: u32,
    pub created_ms: u64,
    state: Mutex<State>,
    pub packets_in: AtomicU64,
    pub bytes_in: AtomicU64,
    /// Per band: packets and bytes the band applied to.
    pub band_packets: Vec<AtomicU64>,
    pub band_bytes: Vec<AtomicU64>,
}

fn capacity(flags: u16, b: &BandConfig) -> u64 {
    // Tokens are milli-packets for pktps (burst in packets) and bits for
    // kbps (burst in kilobits): 1000 per unit of burst either way.
    let per_unit = 1000;
    let burst = if b.burst_size > 0 { b.burst_size as u64 } else { (b.rate as u64 / 10).max(1) };
    let min = if flags & mf::KBPS != 0 { 12 } else { 1 }; // at least one full-size frame
    burst.max(min) * per_unit
}

impl Meter {
    pub fn new(id: u32, cfg: MeterConfig, now_ms: u64) -> Meter {
        let n = cfg.bands.len();
        let cap: Vec<u64> = cfg.bands.iter().map(|b| capacity(cfg.flags, b)).collect();
        Meter {
            id,
            created_ms: now_ms,
            state: Mutex::new(State { tokens: cap.clone(), cap, cfg, last_ms: None }),
            packets_in: AtomicU64::new(0),
            bytes_in: AtomicU64::new(0),
            band_packets: (0..n.max(8)).map(|_| AtomicU64::new(0)).collect(),
            band_bytes: (0..n.max(8)).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    pub fn config(&self) -> MeterConfig {
        self.state.lock().expect("meter").cfg.clone()
    }

    /// Replaces the configuration (meter modify); buckets start full.
    pub fn reconfigure(&self, cfg: MeterConfig) {
        let mut st = self.state.lock().expect("meter");
        st.cap = cfg.bands.iter().map(|b| capacity(cfg.flags, b)).collect();
        st.tokens = st.cap.clone();
        st.cfg = cfg;
    }

    /// Runs one packet of `len` bytes through the meter at `now_ms`.
    pub fn admit(&self, len: usize, now_ms: u64) -> Verdict {
        self.packets_in.fetch_add(1, Relaxed);
        self.bytes_in.fetch_add(len as u64, Relaxed);
        let mut st = self.state.lock().expect("meter");
        let kbps = st.cfg.flags & mf::KBPS != 0;
        let elapsed = match st.last_ms {
            Some(t) => now_ms.saturating_sub(t),
            None => 0,
        };
        st.last_ms = Some(now_ms.max(st.last_ms.unwrap_or(0)));
        let cost = if kbps { len as u64 * 8 } else { 1000 };
        let mut applied: Option<usize> = None;
        for i in 0..st.cfg.bands.len() {
            let rate = st.cfg.bands[i].rate as u64;
            // pktps: rate packets/s = rate milli-packets/ms; kbps: rate bits/ms.
            let refill = elapsed.saturating_mul(rate);
            st.tokens[i] = (st.tokens[i].saturating_add(refill)).min(st.cap[i]);
            if st.tokens[i] >= cost {
                st.tokens[i] -= cost;
            } else if applied.is_none_or(|a| st.cfg.bands[a].rate < st.cfg.bands[i].rate) {
                applied = Some(i);
            }
        }
        let Some(i) = applied else { return Verdict::Pass };
        self.band_packets[i].fetch_add(1, Relaxed);
        self.band_bytes[i].fetch_add(len as u64, Relaxed);
        match st.cfg.bands[i].kind {
            BandType::Drop => Verdict::Drop,
            BandType::DscpRemark(p) => Verdict::Remark(p),
        }
    }
}

impl std::fmt::Debug for Meter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "meter:{}", self.id)
    }
}

/// A shared handle on a [`Meter`]; equal when it is the same meter.
#[derive(Clone, Debug)]
pub struct MeterRef(pub Arc<Meter>);

impl PartialEq for MeterRef {
    fn eq(&self, o: &MeterRef) -> bool {
        Arc::ptr_eq(&self.0, &o.0)
    }
}
impl Eq for MeterRef {}

impl std::hash::Hash for MeterRef {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        (Arc::as_ptr(&self.0) as usize).hash(h)
    }
}

/// The DSCP an AF-class codepoint gets with `levels` more drop precedence
/// (AFxy: class x 1-4, drop precedence y 1-3, capped at 3); other
/// codepoints are unchanged.
pub fn remark_dscp(dscp: u8, levels: u8) -> u8 {
    let class = dscp >> 3;
    let dp = (dscp >> 1) & 3;
    if (1..=4).contains(&class) && dscp & 1 == 0 && (1..=3).contains(&dp) {
        (class << 3) | ((dp + levels).min(3) << 1)
    } else {
        dscp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meter(flags: u16, rate: u32, burst: u32, kind: BandType) -> Meter {
        Meter::new(1, MeterConfig { flags, bands: vec![BandConfig { kind, rate, burst_size: burst }] }, 0)
    }

    #[test]
    fn pktps_passes_rate_times_time_plus_burst() {
        let m = meter(mf::PKTPS | mf::BURST, 100, 10, BandType::Drop);
        // 1000 packets spread over 1 s (one per ms).
        let passed = (0..1000u64).filter(|t| m.admit(64, *t) == Verdict::Pass).count();
        // 10 from the burst + 100 per second.
        assert!((105..=112).contains(&passed), "passed {passed}");
        assert_eq!(m.packets_in.load(Relaxed), 1000);
        assert_eq!(m.band_packets[0].load(Relaxed) as usize, 1000 - passed);
    }

    #[test]
    fn kbps_limits_bytes() {
        // 800 kbit/s = 100 kB/s; 1000-byte packets every ms (1 MB/s) for 1 s.
        let m = meter(mf::KBPS | mf::BURST, 800, 80, BandType::Drop);
        let passed = (0..1000u64).filter(|t| m.admit(1000, *t) == Verdict::Pass).count();
        // 80 kbit burst = 10 packets, plus 100 packets per second.
        assert!((105..=112).contains(&passed), "passed {passed}");
    }

    #[test]
    fn highest_rate_exceeded_band_applies_and_remark_is_af_only() {
        let m = Meter::new(
            2,
            MeterConfig {
                flags: mf::PKTPS | mf::BURST,
                bands: vec![
                    BandConfig { kind: BandType::Drop, rate: 10, burst_size: 1 },
                    BandConfig { kind: BandType::DscpRemark(1), rate: 20, burst_size: 1 },
                ],
            },
            0,
        );
        assert_eq!(m.admit(64, 0), Verdict::Pass);
        // Both buckets empty now: both bands exceeded, the 20 pkt/s one applies.
        assert_eq!(m.admit(64, 0), Verdict::Remark(1));
        assert_eq!(remark_dscp(10, 1), 12); // AF11 -> AF12
        assert_eq!(remark_dscp(14, 2), 14); // AF13 stays
        assert_eq!(remark_dscp(46, 1), 46); // EF unchanged
    }

    #[test]
    fn reconfigure_keeps_identity_and_refills() {
        let m = meter(mf::PKTPS | mf::BURST, 1, 1, BandType::Drop);
        assert_eq!(m.admit(64, 0), Verdict::Pass);
        assert_eq!(m.admit(64, 0), Verdict::Drop);
        m.reconfigure(MeterConfig {
            flags: mf::PKTPS | mf::BURST,
            bands: vec![BandConfig { kind: BandType::Drop, rate: 1000, burst_size: 100 }],
        });
        assert_eq!(m.admit(64, 0), Verdict::Pass);
    }
}
