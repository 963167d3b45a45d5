//! Recirculation for the `ct` action: the frozen translation states a
//! `ct(table=N)` resumes from. The action itself ([`CtSpec`], its
//! ovs-ofctl syntax) lives in `ofp_types::ct`, shared with the codec.
//!
//! A packet comes back from the tracker with nothing but its bytes, its
//! datapath key and a recirculation id. Everything the pipeline knew that
//! the datapath does not carry (the table to resume in, in_port as the
//! pipeline left it, the OpenFlow metadata and the sixteen registers) is *frozen* under that id, as in
//! Open vSwitch: the id names one frozen state, and a different state gets
//! a different id, so the megaflows of the first pass (which end in
//! `recirc(id)`) stay exact about what the second pass will see.
//!
//! Ids are never freed: a pipeline that freezes per-packet values (a port
//! number moved into a register before `ct`) allocates one id per value.

use flow::key::{loc, FlowKey};
pub use ofp_types::ct::{parse_ct, CtSpec};
use std::collections::HashMap;
use std::sync::Mutex;

/// The pipeline state that survives a recirculation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Frozen {
    /// The table the recirculated packet is looked up in.
    pub table: u8,
    /// in_port as the pipeline left it (it may have rewritten it).
    pub in_port: u32,
    pub metadata: u64,
    /// reg0..reg15, two per word (the key's own layout).
    pub regs: [u64; 8],
    /// Actions frozen with the state (see [`RecircTable::id_with_actions`]):
    /// 0 for none (the pass resumes with a lookup in `table`), else one
    /// more than their index.
    pub actions: u32,
}

impl Frozen {
    /// Freezes `key`'s pipeline state, to resume in `table`.
    pub fn capture(table: u8, key: &FlowKey) -> Frozen {
        let mut regs = [0; 8];
        for (i, r) in regs.iter_mut().enumerate() {
            *r = loc::xreg(i).get(key) as u64;
        }
        Frozen { table, in_port: key.in_port(), metadata: key.metadata(), regs, actions: 0 }
    }

    /// Writes the frozen state back into a recirculated packet's key.
    pub fn restore(&self, key: &mut FlowKey) {
        key.set_in_port(self.in_port);
        key.set_metadata(self.metadata);
        for (i, r) in self.regs.iter().enumerate() {
            loc::xreg(i).set(key, *r as u128);
        }
    }
}

/// Actions a recirculated pass runs instead of a table lookup: the rest
/// of each rule the first pass was in (innermost first), its action set
/// and its push/pop stack (values and widths in bytes).
pub type FrozenActions = (Vec<ofp_types::Frozen>, Vec<ofp_types::Action>, Vec<(u128, u8)>);

/// Frozen translation states by recirculation id (id 0 is "not
/// recirculated"). Shared by every translation of a bridge.
#[derive(Debug, Default)]
pub struct RecircTable {
    inner: Mutex<(HashMap<Frozen, u32>, Vec<Frozen>)>,
    /// Frozen action lists, by their text (their identity), and in order.
    actions: Mutex<(HashMap<String, u32>, Vec<std::sync::Arc<FrozenActions>>)>,
}

impl RecircTable {
    /// The id of `state` (allocated on first use).
    pub fn id_for(&self, state: &Frozen) -> u32 {
        let mut g = self.inner.lock().expect("recirc table");
        if let Some(&id) = g.0.get(state) {
            return id;
        }
        g.1.push(*state);
        let id = g.1.len() as u32;
        g.0.insert(*state, id);
        id
    }

    /// The id of `state` with `frozen` to run on resume instead of a
    /// lookup: Open vSwitch's freezing of the rest of a translation. The
    /// same actions get the same id, so megaflows stay shared.
    pub fn id_with_actions(&self, mut state: Frozen, frozen: FrozenActions) -> u32 {
        let text = format!("{frozen:?}");
        {
            let mut g = self.actions.lock().expect("recirc actions");
            state.actions = match g.0.get(&text) {
                Some(&n) => n,
                None => {
                    g.1.push(std::sync::Arc::new(frozen));
                    let n = g.1.len() as u32;
                    g.0.insert(text, n);
                    n
                }
            };
        }
        self.id_for(&state)
    }

    /// The frozen actions of a state (its `actions`), if any.
    pub fn actions_of(&self, state: &Frozen) -> Option<std::sync::Arc<FrozenActions>> {
        let g = self.actions.lock().expect("recirc actions");
        (state.actions as usize).checked_sub(1).and_then(|i| g.1.get(i)).cloned()
    }

    /// The state a recirculated packet with `id` resumes from.
    pub fn frozen(&self, id: u32) -> Option<Frozen> {
        let g = self.inner.lock().expect("recirc table");
        (id as usize).checked_sub(1).and_then(|i| g.1.get(i)).copied()
    }

    /// Where a recirculated packet with `id` resumes.
    pub fn table_of(&self, id: u32) -> Option<u8> {
        self.frozen(id).map(|f| f.table)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn different_states_get_different_ids_and_come_back() {
        let t = RecircTable::default();
        let mut k = FlowKey::ZERO;
        loc::REGS[0].set(&mut k, 5);
        loc::REGS[15].set(&mut k, 9);
        k.set_metadata(0x77);
        let a = t.id_for(&Frozen::capture(1, &k));
        assert_eq!(t.id_for(&Frozen::capture(1, &k)), a);
        assert_ne!(t.id_for(&Frozen::capture(1, &FlowKey::ZERO)), a);
        loc::REGS[0].set(&mut k, 6);
        let b = t.id_for(&Frozen::capture(1, &k));
        assert_ne!(a, b);
        let mut back = FlowKey::ZERO;
        t.frozen(b).unwrap().restore(&mut back);
        assert_eq!((loc::REGS[0].get(&back), loc::REGS[15].get(&back), back.metadata()), (6, 9, 0x77));
        assert_eq!(t.table_of(a), Some(1));
        assert_eq!(t.frozen(0), None);
        assert_eq!(t.frozen(99), None);
    }
}
