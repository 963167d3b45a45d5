//! OpenFlow error messages: the errors xvs sends, with their wire type and
//! code per version, carrying (up to 64 bytes of) the offending message.

use crate::header::{msg, Header, Version, HEADER_LEN};

/// Errors the switch reports, named after the spec's type and code. The
/// wire values differ between OpenFlow 1.0 and 1.1+; errors that 1.0 lacks
/// use the Nicira-extension codes Open vSwitch uses there (so ovs-ofctl
/// prints their names).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// HELLO_FAILED / INCOMPATIBLE: no version in common.
    HelloFailed,
    /// BAD_REQUEST / BAD_VERSION.
    BadVersion,
    /// BAD_REQUEST / BAD_TYPE: unknown message type.
    BadType,
    /// BAD_REQUEST / BAD_STAT (1.3: BAD_MULTIPART): unknown stats type.
    BadMultipart,
    /// BAD_REQUEST / BAD_EXPERIMENTER (1.0: BAD_VENDOR).
    BadExperimenter,
    /// BAD_REQUEST / BAD_EXP_TYPE (1.0: BAD_SUBTYPE).
    BadExpType,
    /// BAD_REQUEST / EPERM (e.g. a slave controller modifying state).
    BadRequestEperm,
    /// BAD_REQUEST / BAD_LEN: length field wrong for the message.
    BadLen,
    /// BAD_REQUEST / BUFFER_UNKNOWN: packet-out names a buffer we lack.
    BufferUnknown,
    /// BAD_REQUEST / BAD_TABLE_ID (multipart naming a missing table).
    BadRequestTableId,
    /// BAD_REQUEST / IS_SLAVE: the connection's role forbids this.
    IsSlave,
    /// BAD_REQUEST / BAD_PORT.
    BadRequestPort,
    /// BAD_REQUEST / BAD_PACKET: packet-out with a bad packet.
    BadPacket,
    /// BAD_ACTION / BAD_TYPE.
    BadActionType,
    /// BAD_ACTION / BAD_LEN.
    BadActionLen,
    /// BAD_ACTION / BAD_EXPERIMENTER (1.0: BAD_VENDOR).
    BadActionExperimenter,
    /// BAD_ACTION / BAD_EXP_TYPE (1.0: BAD_VENDOR_TYPE).
    BadActionExpType,
    /// BAD_ACTION / BAD_OUT_PORT.
    BadOutPort,
    /// BAD_ACTION / BAD_ARGUMENT.
    BadArgument,
    /// BAD_ACTION / BAD_OUT_GROUP.
    BadOutGroup,
    /// BAD_ACTION / BAD_SET_TYPE: set_field of a field we cannot write.
    BadSetType,
    /// BAD_ACTION / BAD_SET_ARGUMENT: set_field whose prerequisites fail.
    BadSetArgument,
    /// BAD_ACTION / MATCH_INCONSISTENT: an action names a field whose
    /// prerequisites the match lacks (load, move, output:reg).
    MatchInconsistent,
    /// BAD_INSTRUCTION / UNKNOWN_INST.
    UnknownInst,
    /// BAD_INSTRUCTION / BAD_TABLE_ID: goto_table to a missing or earlier table.
    BadInstTableId,
    /// BAD_INSTRUCTION / BAD_LEN.
    BadInstLen,
    /// BAD_MATCH / BAD_TYPE: match type we do not speak.
    BadMatchType,
    /// BAD_MATCH / BAD_LEN.
    BadMatchLen,
    /// BAD_MATCH / BAD_FIELD: unknown match field.
    BadField,
    /// BAD_MATCH / BAD_VALUE.
    BadValue,
    /// BAD_MATCH / BAD_MASK: a mask on an unmaskable field, or value bits outside the mask.
    BadMask,
    /// BAD_MATCH / BAD_PREREQ.
    BadPrereq,
    /// BAD_MATCH / DUP_FIELD.
    DupField,
    /// FLOW_MOD_FAILED / TABLE_FULL.
    TableFull,
    /// FLOW_MOD_FAILED / BAD_TABLE_ID.
    BadTableId,
    /// FLOW_MOD_FAILED / OVERLAP.
    Overlap,
    /// FLOW_MOD_FAILED / BAD_COMMAND.
    BadCommand,
    /// FLOW_MOD_FAILED / BAD_FLAGS.
    BadFlags,
    /// GROUP_MOD_FAILED / GROUP_EXISTS.
    GroupExists,
    /// GROUP_MOD_FAILED / INVALID_GROUP.
    InvalidGroup,
    /// GROUP_MOD_FAILED / LOOP.
    GroupLoop,
    /// GROUP_MOD_FAILED / UNKNOWN_GROUP.
    UnknownGroup,
    /// GROUP_MOD_FAILED / BAD_TYPE.
    BadGroupType,
    /// GROUP_MOD_FAILED / BAD_COMMAND.
    BadGroupCommand,
    /// GROUP_MOD_FAILED / BAD_BUCKET.
    BadBucket,
    /// GROUP_MOD_FAILED / BAD_WATCH.
    BadWatch,
    /// PORT_MOD_FAILED / BAD_PORT.
    BadPort,
    /// PORT_MOD_FAILED / BAD_HW_ADDR.
    BadHwAddr,
    /// ROLE_REQUEST_FAILED / STALE.
    RoleStale,
    /// ROLE_REQUEST_FAILED / BAD_ROLE.
    BadRole,
    /// METER_MOD_FAILED / METER_EXISTS.
    MeterExists,
    /// METER_MOD_FAILED / INVALID_METER.
    InvalidMeter,
    /// METER_MOD_FAILED / UNKNOWN_METER.
    UnknownMeter,
    /// METER_MOD_FAILED / BAD_COMMAND.
    BadMeterCommand,
    /// METER_MOD_FAILED / BAD_FLAGS.
    BadMeterFlags,
    /// METER_MOD_FAILED / BAD_RATE.
    BadRate,
    /// METER_MOD_FAILED / BAD_BAND.
    BadBand,
    /// BUNDLE_FAILED / BAD_ID (1.4+; ONF extension 2300.. on 1.3).
    BundleBadId,
    /// BUNDLE_FAILED / BUNDLE_CLOSED.
    BundleClosed,
    /// BUNDLE_FAILED / BAD_TYPE: a message that cannot be bundled.
    BundleBadType,
    /// BUNDLE_FAILED / MSG_FAILED: a bundled message failed; nothing applied.
    BundleMsgFailed,
    /// Nicira TLV table errors (NXTTMFC_*): Nicira experimenter errors in
    /// OpenFlow 1.2+; OpenFlow 1.0/1.1 get BAD_REQUEST/EPERM.
    TlvBadCommand,
    TlvBadOptLen,
    TlvBadFieldIdx,
    TlvTableFull,
    TlvAlreadyMapped,
    TlvDupEntry,
    /// NXTTMFC_INVALID_TLV_DEL: a mapping that flows still use.
    TlvInvalidDel,
    /// NXFMFC_INVALID_TLV_FIELD: a flow uses an unmapped tun_metadata field.
    InvalidTlvField,
}

/// OpenFlow 1.0 BAD_REQUEST type, under which OVS puts the Nicira codes.
const NX10: u16 = 1;

impl ErrorKind {
    /// (type, code) on the wire for `v`.
    pub fn wire(self, v: Version) -> (u16, u16) {
        use ErrorKind::*;
        if v == Version::Of10 {
            return match self {
                HelloFailed => (0, 0),
                BadVersion => (1, 0),
                BadType => (1, 1),
                BadMultipart => (1, 2),
                BadExperimenter => (1, 3),
                BadExpType => (1, 4),
                BadRequestEperm => (1, 5),
                BadLen => (1, 6),
                BufferUnknown => (1, 8),
                BadRequestTableId => (NX10, 512),
                IsSlave => (1, 5),
                BadRequestPort => (NX10, 514),
                BadPacket => (1, 5),
                BadActionType => (2, 0),
                BadActionLen => (2, 1),
                BadActionExperimenter => (2, 2),
                BadActionExpType => (2, 3),
                BadOutPort => (2, 4),
                BadArgument => (2, 5),
                BadSetType => (NX10, 523),
                BadSetArgument => (NX10, 525),
                MatchInconsistent => (NX10, 266),
                BadOutGroup => (2, 9),
                UnknownInst | BadInstLen => (2, 257),
                BadInstTableId => (NX10, 512),
                BadMatchType | BadMatchLen => (NX10, 256),
                BadField => (NX10, 257),
                BadValue => (NX10, 258),
                BadMask => (NX10, 259),
                BadPrereq => (NX10, 260),
                DupField => (NX10, 261),
                TableFull => (3, 0),
                Overlap => (3, 1),
                BadTableId => (5, 257),
                BadCommand => (3, 4),
                BadFlags => (3, 258),
                GroupExists => (6, 0),
                InvalidGroup => (6, 1),
                GroupLoop => (6, 7),
                UnknownGroup => (6, 8),
                BadGroupType => (6, 10),
                BadGroupCommand => (6, 11),
                BadBucket => (6, 12),
                BadWatch => (6, 13),
                BadPort => (4, 0),
                BadHwAddr => (4, 1),
                RoleStale | BadRole => (NX10, 513),
                MeterExists | InvalidMeter | UnknownMeter | BadMeterCommand | BadMeterFlags | BadRate | BadBand => {
                    (1, 1)
                }
                BundleBadId | BundleClosed | BundleBadType | BundleMsgFailed => (1, 1),
                TlvBadCommand | TlvBadOptLen | TlvBadFieldIdx | TlvTableFull | TlvAlreadyMapped | TlvDupEntry
                | TlvInvalidDel | InvalidTlvField => (1, 5),
            };
        }
        let of13 = v == Version::Of13;
        match self {
            HelloFailed => (0, 0),
            BadVersion => (1, 0),
            BadType => (1, 1),
            BadMultipart => (1, 2),
            BadExperimenter => (1, 3),
            BadExpType => (1, 4),
            BadRequestEperm => (1, 5),
            BadLen => (1, 6),
            BufferUnknown => (1, 8),
            BadRequestTableId => (1, 9),
            IsSlave => (1, 10),
            BadRequestPort => (1, 11),
            BadPacket => (1, 12),
            BadActionType => (2, 0),
            BadActionLen => (2, 1),
            BadActionExperimenter => (2, 2),
            BadActionExpType => (2, 3),
            BadOutPort => (2, 4),
            BadArgument => (2, 5),
            BadOutGroup => (2, 9),
            BadSetType => (2, 13),
            BadSetArgument => (2, 15),
            MatchInconsistent => (2, 12),
            UnknownInst => (3, 0),
            BadInstTableId => (3, 2),
            BadInstLen => (3, 7),
            BadMatchType => (4, 0),
            BadMatchLen => (4, 1),
            BadField => (4, 6),
            BadValue => (4, 7),
            BadMask => (4, 8),
            BadPrereq => (4, 9),
            DupField => (4, 10),
            TableFull => (5, 1),
            BadTableId => (5, 2),
            Overlap => (5, 3),
            BadCommand => (5, 6),
            BadFlags => (5, 7),
            GroupExists => (6, 0),
            InvalidGroup => (6, 1),
            GroupLoop => (6, 7),
            UnknownGroup => (6, 8),
            BadGroupType => (6, 10),
            BadGroupCommand => (6, 11),
            BadBucket => (6, 12),
            BadWatch => (6, 13),
            BadPort => (7, 0),
            BadHwAddr => (7, 1),
            RoleStale => (11, 0),
            BadRole => (11, 2),
            MeterExists => (12, 1),
            InvalidMeter => (12, 2),
            UnknownMeter => (12, 3),
            BadMeterCommand => (12, 4),
            BadMeterFlags => (12, 5),
            BadRate => (12, 6),
            BadBand => (12, 8),
            // OpenFlow 1.3 carries bundles as an ONF extension; its errors
            // are experimenter errors there (see `experimenter_error`).
            // OFPBFC_* (ONF's 2300 + code in 1.3): BAD_ID 2, BUNDLE_CLOSED 4,
            // BAD_TYPE 6, MSG_FAILED 13.
            BundleBadId => (if of13 { 0xffff } else { 17 }, if of13 { 2302 } else { 2 }),
            BundleClosed => (if of13 { 0xffff } else { 17 }, if of13 { 2304 } else { 4 }),
            BundleBadType => (if of13 { 0xffff } else { 17 }, if of13 { 2306 } else { 6 }),
            BundleMsgFailed => (if of13 { 0xffff } else { 17 }, if of13 { 2313 } else { 13 }),
            TlvBadCommand => (0xffff, 16),
            TlvBadOptLen => (0xffff, 17),
            TlvBadFieldIdx => (0xffff, 18),
            TlvTableFull => (0xffff, 19),
            TlvAlreadyMapped => (0xffff, 20),
            TlvDupEntry => (0xffff, 21),
            InvalidTlvField => (0xffff, 37),
            TlvInvalidDel => (0xffff, 38),
        }
    }
}

impl ErrorKind {
    /// Errors that are Nicira experimenter errors in OpenFlow 1.2+.
    fn is_nicira(self) -> bool {
        use ErrorKind::*;
        matches!(
            self,
            TlvBadCommand
                | TlvBadOptLen
                | TlvBadFieldIdx
                | TlvTableFull
                | TlvAlreadyMapped
                | TlvDupEntry
                | TlvInvalidDel
                | InvalidTlvField
        )
    }
}

/// ONF's experimenter id (bundles in OpenFlow 1.3).
pub const ONF_EXPERIMENTER: u32 = 0x4f4e4600;

/// An ERROR message answering `offending` (its xid, and at least its first
/// 64 bytes as the spec asks).
pub fn error_reply(v: Version, kind: ErrorKind, offending: &[u8]) -> Vec<u8> {
    let xid = Header::parse(offending).map(|h| h.xid).unwrap_or(0);
    let data = &offending[..offending.len().min(64)];
    let (ty, code) = kind.wire(v);
    let mut out = Vec::with_capacity(HEADER_LEN + 12 + data.len());
    Header { version: v as u8, msg_type: msg::ERROR, length: 0, xid }.emit(&mut out);
    out.extend_from_slice(&ty.to_be_bytes());
    if ty == 0xffff {
        // Experimenter error: exp_code, then the experimenter id (Nicira's
        // for its own errors, ONF's for bundles in 1.3).
        out.extend_from_slice(&code.to_be_bytes());
        let exp = if kind.is_nicira() { crate::action::NX_VENDOR } else { ONF_EXPERIMENTER };
        out.extend_from_slice(&exp.to_be_bytes());
    } else {
        out.extend_from_slice(&code.to_be_bytes());
    }
    out.extend_from_slice(data);
    let len = out.len() as u16;
    out[2..4].copy_from_slice(&len.to_be_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_carries_the_offending_bytes() {
        let bad = [0x04, 0x63, 0, 8, 0, 0, 0x12, 0x34];
        let e = error_reply(Version::Of13, ErrorKind::BadType, &bad);
        let h = Header::parse(&e).unwrap();
        assert_eq!((h.msg_type, h.xid, h.length as usize), (msg::ERROR, 0x1234, e.len()));
        assert_eq!(&e[8..12], &[0, 1, 0, 1]);
        assert_eq!(&e[12..], &bad);
        let big = vec![0u8; 300];
        assert_eq!(error_reply(Version::Of10, ErrorKind::BadLen, &big).len(), 8 + 4 + 64);
    }
}
