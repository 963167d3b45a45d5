//! NORMAL switching: MAC learning with aging, flooding, VLAN access and
//! trunk ports.

use std::collections::HashMap;

/// How a port treats VLANs (OVS's `tag`/`trunks` model).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum VlanMode {
    /// Carries every VLAN: untagged frames are VLAN 0, tagged frames keep
    /// their tag. (OVS's default for a port with no tag and no trunks.)
    #[default]
    TrunkAll,
    /// Carries only the listed VLANs, tagged (VLAN 0 = untagged frames).
    Trunk(Vec<u16>),
    /// Untagged port in one VLAN: frames arrive untagged and get this VLAN;
    /// tagged frames are dropped (except priority tags, VLAN 0).
    Access(u16),
}

impl VlanMode {
    /// Whether frames of VLAN `vlan` may leave (or enter) through this port.
    pub fn carries(&self, vlan: u16) -> bool {
        match self {
            VlanMode::TrunkAll => true,
            VlanMode::Trunk(list) => list.contains(&vlan),
            VlanMode::Access(tag) => *tag == vlan,
        }
    }

    /// The VLAN of a frame arriving with TCI `tci` (0x1000 = tagged), or
    /// `None` if the port must drop it.
    pub fn input_vlan(&self, tci: u16) -> Option<u16> {
        let tagged = tci & flow::key::VLAN_PRESENT != 0;
        let vid = tci & 0xfff;
        match self {
            VlanMode::Access(tag) => (!tagged || vid == 0).then_some(*tag),
            _ => {
                let v = if tagged { vid } else { 0 };
                self.carries(v).then_some(v)
            }
        }
    }

    /// Whether frames of `vlan` leave this port tagged.
    pub fn output_tagged(&self, vlan: u16) -> bool {
        !matches!(self, VlanMode::Access(_)) && vlan != 0
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MacEntry {
    pub port: u32,
    pub used_ms: u64,
}

/// The MAC learning table: (MAC, VLAN) -> port, with aging.
#[derive(Debug)]
pub struct MacTable {
    entries: HashMap<(u64, u16), MacEntry>,
    pub aging_ms: u64,
    pub max_entries: usize,
}

/// What learning a source address changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Learned {
    /// Refreshed an entry that already pointed at this port.
    Refreshed,
    /// A new entry, or one that moved ports: forwarding decisions changed.
    Changed,
    /// The table is full; nothing learned.
    Full,
}

impl Default for MacTable {
    fn default() -> Self {
        MacTable { entries: HashMap::new(), aging_ms: 300_000, max_entries: 8192 }
    }
}

impl MacTable {
    pub fn learn(&mut self, mac: u64, vlan: u16, port: u32, now_ms: u64) -> Learned {
        let aging = self.aging_ms;
        let len = self.entries.len();
        match self.entries.get_mut(&(mac, vlan)) {
            Some(e) if e.port == port && now_ms.saturating_sub(e.used_ms) < aging => {
                e.used_ms = now_ms;
                Learned::Refreshed
            }
            Some(e) => {
                *e = MacEntry { port, used_ms: now_ms };
                Learned::Changed
            }
            None if len >= self.max_entries => Learned::Full,
            None => {
                self.entries.insert((mac, vlan), MacEntry { port, used_ms: now_ms });
                Learned::Changed
            }
        }
    }

    pub fn lookup(&self, mac: u64, vlan: u16, now_ms: u64) -> Option<u32> {
        self.entries.get(&(mac, vlan)).filter(|e| now_ms.saturating_sub(e.used_ms) < self.aging_ms).map(|e| e.port)
    }

    /// Removes aged-out entries; returns how many.
    pub fn expire(&mut self, now_ms: u64) -> usize {
        let before = self.entries.len();
        let aging = self.aging_ms;
        self.entries.retain(|_, e| now_ms.saturating_sub(e.used_ms) < aging);
        before - self.entries.len()
    }

    /// Forgets every entry on `port` (port removed or link down).
    pub fn flush_port(&mut self, port: u32) -> usize {
        let before = self.entries.len();
        self.entries.retain(|_, e| e.port != port);
        before - self.entries.len()
    }

    /// (MAC, VLAN, port, age in seconds) for `fdb/show`, sorted.
    pub fn dump(&self, now_ms: u64) -> Vec<(u64, u16, u32, u64)> {
        let mut v: Vec<_> = self
            .entries
            .iter()
            .filter(|(_, e)| now_ms.saturating_sub(e.used_ms) < self.aging_ms)
            .map(|(&(m, vl), e)| (m, vl, e.port, now_ms.saturating_sub(e.used_ms) / 1000))
            .collect();
        v.sort_by_key(|&(m, vl, p, _)| (p, vl, m));
        v
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

pub fn is_multicast(mac: u64) -> bool {
    (mac >> 40) & 1 == 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn learn_move_age() {
        let mut t = MacTable::default();
        assert_eq!(t.learn(0xa, 0, 1, 0), Learned::Changed);
        assert_eq!(t.learn(0xa, 0, 1, 10), Learned::Refreshed);
        assert_eq!(t.lookup(0xa, 0, 20), Some(1));
        assert_eq!(t.lookup(0xa, 5, 20), None);
        assert_eq!(t.learn(0xa, 0, 2, 30), Learned::Changed);
        assert_eq!(t.lookup(0xa, 0, 40), Some(2));
        assert_eq!(t.lookup(0xa, 0, 30 + 300_000), None);
        assert_eq!(t.expire(30 + 300_000), 1);
        assert!(t.is_empty());
    }

    #[test]
    fn vlan_modes() {
        let a = VlanMode::Access(10);
        assert_eq!(a.input_vlan(0), Some(10));
        assert_eq!(a.input_vlan(0x1000 | 20), None);
        assert_eq!(a.input_vlan(0x1000), Some(10)); // priority tag
        let t = VlanMode::Trunk(vec![10, 20]);
        assert_eq!(t.input_vlan(0x1000 | 20), Some(20));
        assert_eq!(t.input_vlan(0x1000 | 30), None);
        assert_eq!(t.input_vlan(0), None);
        assert!(VlanMode::TrunkAll.output_tagged(5));
        assert!(!VlanMode::TrunkAll.output_tagged(0));
        assert!(!a.output_tagged(10));
    }
}
