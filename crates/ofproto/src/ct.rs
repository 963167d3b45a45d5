//! Recirculation for the `ct` action: the frozen translation states a
//! `ct(table=N)` resumes from. The action itself ([`CtSpec`], its
//! ovs-ofctl syntax) lives in `ofp_types::ct`, shared with the codec.

pub use ofp_types::ct::{parse_ct, CtSpec};
use std::collections::HashMap;
use std::sync::Mutex;

/// Frozen translation states by recirculation id (id 0 is "not
/// recirculated"). Shared by every translation of a bridge.
#[derive(Debug, Default)]
pub struct RecircTable {
    inner: Mutex<(HashMap<u8, u32>, HashMap<u32, u8>)>,
}

impl RecircTable {
    /// The id that resumes in `table` (allocated on first use).
    pub fn id_for_table(&self, table: u8) -> u32 {
        let mut g = self.inner.lock().expect("recirc table");
        if let Some(&id) = g.0.get(&table) {
            return id;
        }
        let id = g.0.len() as u32 + 1;
        g.0.insert(table, id);
        g.1.insert(id, table);
        id
    }

    /// Where a recirculated packet with `id` resumes.
    pub fn table_of(&self, id: u32) -> Option<u8> {
        self.inner.lock().expect("recirc table").1.get(&id).copied()
    }
}
