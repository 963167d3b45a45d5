//! The neighbour cache native tunneling resolves next hops with: IP to MAC,
//! learned from ARP replies and neighbour advertisements seen on the
//! switch's bridges (`tnl/neigh/show`, `tnl/arp/show`), and the ARP
//! requests and neighbour solicitations the switch sends for a missing one.
//!
//! Entries expire (Open vSwitch keeps them 15 minutes); a request for the
//! same address is not repeated more than once a second, so a burst of
//! packets to an unresolved remote sends one ARP, not one per packet.

use crate::route::{fmt_addr, mapped, unmapped};
use std::collections::HashMap;
use std::fmt::Write;

pub const ENTRY_TTL_MS: u64 = 15 * 60 * 1000;
const REQUEST_INTERVAL_MS: u64 = 1000;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Neighbour {
    pub mac: [u8; 6],
    pub bridge: String,
    pub expires_ms: u64,
}

#[derive(Debug, Default)]
pub struct NeighCache {
    entries: HashMap<u128, Neighbour>,
    /// When a request for an address was last sent.
    asked: HashMap<u128, u64>,
}

impl NeighCache {
    pub fn new() -> NeighCache {
        NeighCache::default()
    }

    pub fn learn(&mut self, ip: u128, mac: [u8; 6], bridge: &str, now_ms: u64) {
        if mac == [0; 6] || mac[0] & 1 != 0 {
            return;
        }
        self.asked.remove(&ip);
        self.entries.insert(ip, Neighbour { mac, bridge: bridge.to_string(), expires_ms: now_ms + ENTRY_TTL_MS });
    }

    pub fn lookup(&self, ip: u128, now_ms: u64) -> Option<&Neighbour> {
        self.entries.get(&ip).filter(|n| n.expires_ms > now_ms)
    }

    /// Whether to send a request for `ip` now (at most once a second).
    pub fn should_ask(&mut self, ip: u128, now_ms: u64) -> bool {
        match self.asked.get(&ip) {
            Some(&t) if now_ms < t + REQUEST_INTERVAL_MS => false,
            _ => {
                self.asked.insert(ip, now_ms);
                true
            }
        }
    }

    pub fn flush(&mut self) {
        self.entries.clear();
        self.asked.clear();
    }

    pub fn expire(&mut self, now_ms: u64) {
        self.entries.retain(|_, n| n.expires_ms > now_ms);
        self.asked.retain(|_, &mut t| now_ms < t + 10 * REQUEST_INTERVAL_MS);
    }

    /// Learns from a received frame if it is an ARP reply/request or an
    /// ND advertisement/solicitation carrying a link-layer address.
    pub fn snoop(&mut self, frame: &[u8], bridge: &str, now_ms: u64) -> bool {
        match learnable(frame) {
            Some((ip, mac)) => {
                self.learn(ip, mac, bridge, now_ms);
                true
            }
            None => false,
        }
    }

    /// `tnl/neigh/show`, in Open vSwitch's layout.
    pub fn show(&self, now_ms: u64) -> String {
        // Column widths as Open vSwitch prints them (MAC then three spaces).
        let mut s = format!("{:<45} {:<20}{}\n", "IP", "MAC", "Bridge");
        s.push_str(&"=".repeat(74));
        s.push('\n');
        let mut v: Vec<_> = self.entries.iter().filter(|(_, n)| n.expires_ms > now_ms).collect();
        v.sort_by_key(|(ip, _)| **ip);
        for (ip, n) in v {
            let m = n.mac;
            let mac = format!("{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", m[0], m[1], m[2], m[3], m[4], m[5]);
            let _ = writeln!(s, "{:<45} {:<20}{}", fmt_addr(*ip), mac, n.bridge);
        }
        s
    }
}

/// (IP, MAC) a frame announces: an ARP packet's sender, or an NA's target
/// link-layer address / an NS's source link-layer address.
pub fn learnable(f: &[u8]) -> Option<(u128, [u8; 6])> {
    let mut off = 12;
    let mut et = u16::from_be_bytes(f.get(off..off + 2)?.try_into().ok()?);
    if et == 0x8100 {
        off += 4;
        et = u16::from_be_bytes(f.get(off..off + 2)?.try_into().ok()?);
    }
    let l3 = off + 2;
    match et {
        0x0806 => {
            let a = f.get(l3..l3 + 28)?;
            if a[0..2] != [0, 1] || a[2..4] != [8, 0] || a[4] != 6 || a[5] != 4 {
                return None;
            }
            let sha: [u8; 6] = a[8..14].try_into().ok()?;
            let spa = u32::from_be_bytes(a[14..18].try_into().ok()?);
            (spa != 0).then_some((mapped(spa), sha))
        }
        0x86dd => {
            let h = f.get(l3..l3 + 40)?;
            if h[6] != 58 {
                return None;
            }
            let icmp = f.get(l3 + 40..)?;
            let ty = *icmp.first()?;
            if ty != 135 && ty != 136 {
                return None;
            }
            let target = u128::from_be_bytes(icmp.get(8..24)?.try_into().ok()?);
            let src = u128::from_be_bytes(h[8..24].try_into().ok()?);
            let want = if ty == 136 { 2 } else { 1 };
            let mut i = 24;
            while i + 8 <= icmp.len() {
                let (kind, len) = (icmp[i], icmp[i + 1] as usize * 8);
                if len == 0 {
                    return None;
                }
                if kind == want && len == 8 {
                    let mac: [u8; 6] = icmp[i + 2..i + 8].try_into().ok()?;
                    return Some((if ty == 136 { target } else { src }, mac));
                }
                i += len;
            }
            None
        }
        _ => None,
    }
}

/// An ARP request for `target` from `(src_mac, src_ip)`, or an IPv6
/// neighbour solicitation to the target's solicited-node address.
pub fn request(target: u128, src_mac: [u8; 6], src_ip: u128) -> Vec<u8> {
    let mut f = Vec::with_capacity(86);
    match (unmapped(target), unmapped(src_ip)) {
        (Some(tpa), Some(spa)) => {
            f.extend_from_slice(&[0xff; 6]);
            f.extend_from_slice(&src_mac);
            f.extend_from_slice(&[0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1]);
            f.extend_from_slice(&src_mac);
            f.extend_from_slice(&spa.to_be_bytes());
            f.extend_from_slice(&[0; 6]);
            f.extend_from_slice(&tpa.to_be_bytes());
        }
        _ => {
            // Solicited-node multicast ff02::1:ffXX:XXXX.
            let snm: u128 = 0xff02_0000_0000_0000_0000_0001_ff00_0000 | (target & 0xff_ffff);
            let b = snm.to_be_bytes();
            f.extend_from_slice(&[0x33, 0x33, b[12], b[13], b[14], b[15]]);
            f.extend_from_slice(&src_mac);
            f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0, 0, 32, 58, 255]);
            f.extend_from_slice(&src_ip.to_be_bytes());
            f.extend_from_slice(&snm.to_be_bytes());
            let mut icmp = vec![135, 0, 0, 0, 0, 0, 0, 0];
            icmp.extend_from_slice(&target.to_be_bytes());
            icmp.extend_from_slice(&[1, 1]);
            icmp.extend_from_slice(&src_mac);
            let c = wire::checksum::l4_checksum_v6(src_ip, snm, 58, &icmp);
            icmp[2..4].copy_from_slice(&c.to_be_bytes());
            f.extend_from_slice(&icmp);
        }
    }
    f
}
