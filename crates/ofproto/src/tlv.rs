//! The tunnel TLV map: which Geneve option (class, type, length) each
//! `tun_metadataN` field holds, as `ovs-ofctl add-tlv-map` sets it.
//!
//! The flow key has room for [`MAX_FIELDS`] fields of up to
//! [`MAX_OPTION_LEN`] bytes (`flow::key::loc::TUN_METADATA`), which is what
//! OVN asks for (one 4-byte option). A mapping beyond that is refused with
//! the error Open vSwitch gives for the same kind of problem, and the
//! request changes nothing (all or nothing, as in OVS).

/// One binding: option (class, type, length in bytes) to field `index`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TlvMapping {
    pub class: u16,
    pub ty: u8,
    pub len: u8,
    pub index: u16,
}

/// Fields the flow key holds (`tun_metadata0`, `tun_metadata1`).
pub const MAX_FIELDS: u16 = flow::key::loc::TUN_METADATA.len() as u16;
/// Bytes each holds.
pub const MAX_OPTION_LEN: u8 = 4;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlvError {
    /// The length is not a multiple of 4 in 4..=124, or more than a field holds.
    BadOptLen,
    /// Index 64 or more (OVS's field count).
    BadFieldIdx,
    /// A field index this switch does not have.
    TableFull,
    /// The field is mapped already.
    AlreadyMapped,
    /// The same option twice.
    DupEntry,
    /// A mapping that flows still use cannot be deleted.
    InUse,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlvTable {
    maps: Vec<TlvMapping>,
}

impl TlvTable {
    /// The bindings, by field index.
    pub fn mappings(&self) -> &[TlvMapping] {
        &self.maps
    }

    pub fn is_mapped(&self, index: u16) -> bool {
        self.maps.iter().any(|m| m.index == index)
    }

    /// The field an option is bound to.
    pub fn field_of(&self, class: u16, ty: u8) -> Option<&TlvMapping> {
        self.maps.iter().find(|m| m.class == class && m.ty == ty)
    }

    pub fn add(&mut self, new: &[TlvMapping]) -> Result<(), TlvError> {
        let mut next = self.maps.clone();
        for m in new {
            if m.len == 0 || m.len % 4 != 0 || m.len > 124 || m.len > MAX_OPTION_LEN {
                return Err(TlvError::BadOptLen);
            }
            if m.index >= 64 {
                return Err(TlvError::BadFieldIdx);
            }
            if m.index >= MAX_FIELDS {
                return Err(TlvError::TableFull);
            }
            if next.iter().any(|x| x.index == m.index) {
                return Err(TlvError::AlreadyMapped);
            }
            if next.iter().any(|x| x.class == m.class && x.ty == m.ty) {
                return Err(TlvError::DupEntry);
            }
            next.push(*m);
        }
        next.sort_by_key(|m| m.index);
        self.maps = next;
        Ok(())
    }

    /// Removes the bindings of the listed fields.
    pub fn delete(&mut self, gone: &[TlvMapping]) {
        self.maps.retain(|m| !gone.iter().any(|g| g.index == m.index));
    }

    pub fn clear(&mut self) {
        self.maps.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OVN: TlvMapping = TlvMapping { class: 0x102, ty: 0x80, len: 4, index: 0 };

    #[test]
    fn add_delete_clear_and_refusals() {
        let mut t = TlvTable::default();
        t.add(&[OVN]).unwrap();
        assert_eq!(t.field_of(0x102, 0x80), Some(&OVN));
        assert_eq!(t.add(&[OVN]), Err(TlvError::AlreadyMapped));
        assert_eq!(t.add(&[TlvMapping { index: 1, ..OVN }]), Err(TlvError::DupEntry));
        assert_eq!(t.add(&[TlvMapping { ty: 1, len: 8, index: 1, ..OVN }]), Err(TlvError::BadOptLen));
        assert_eq!(t.add(&[TlvMapping { ty: 1, len: 3, index: 1, ..OVN }]), Err(TlvError::BadOptLen));
        assert_eq!(t.add(&[TlvMapping { ty: 1, index: 2, ..OVN }]), Err(TlvError::TableFull));
        assert_eq!(t.add(&[TlvMapping { ty: 1, index: 64, ..OVN }]), Err(TlvError::BadFieldIdx));
        // All or nothing.
        let two = [TlvMapping { ty: 1, index: 1, ..OVN }, TlvMapping { ty: 2, index: 5, ..OVN }];
        assert_eq!(t.add(&two), Err(TlvError::TableFull));
        assert_eq!(t.mappings(), &[OVN]);
        t.add(&two[..1]).unwrap();
        assert_eq!(t.mappings().len(), 2);
        t.delete(&[OVN]);
        assert_eq!(t.mappings(), &two[..1]);
        t.clear();
        assert!(t.mappings().is_empty());
    }
}
