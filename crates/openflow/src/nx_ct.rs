//! Connection-tracking actions on the wire: Nicira `NXAST_CT` (35), its
//! nested `NXAST_NAT` (36), and `NXAST_CT_CLEAR` (43), laid out as Open
//! vSwitch lays them out so `ovs-ofctl` and controllers interoperate:
//!
//! * `NXAST_CT`: after the 10-byte Nicira header, flags (16: commit 1,
//!   force 2), `zone_src` (32: 0 for an immediate zone), zone (16:
//!   immediate value, or offset/bits of `zone_src`), recirculation table (8:
//!   255 for none), 3 pad bytes, ALG port (16); then nested actions
//!   (`NXAST_NAT`, and `set_field` to `ct_mark`/`ct_label`), all counted in
//!   the length.
//! * `NXAST_NAT`: 2 pad bytes, flags (16: src 1, dst 2, persistent 4, hash
//!   8, random 16), a bitmap of the range fields present (16: IPv4 min 1,
//!   max 2, IPv6 min 4, max 8, port min 16, max 32), then those fields in
//!   that order, padded to 8 bytes.
//! * `NXAST_CT_CLEAR`: the header and 6 pad bytes.
//!
//! Nested `ct_mark`/`ct_label` writes are OpenFlow `set_field` actions
//! (1.2+) or `NXAST_REG_LOAD2` (1.0), carrying the NXM headers
//! `NXM_NX_CT_MARK` (0x0001d604, masked 0x0001d708) and `NXM_NX_CT_LABEL`
//! (0x0001d810, masked 0x0001d920).

use crate::action::{finish, nx_header};
use crate::bytes::{Rd, Wr};
use crate::error::ErrorKind;
use crate::header::Version;
use conntrack::{Nat, NatFlags, NatRange};
use ofp_types::ct::CtSpec;
use ofp_types::Action;

pub const CT: u16 = 35;
pub const NAT: u16 = 36;
pub const CT_CLEAR: u16 = 43;

const F_COMMIT: u16 = 1;
const F_FORCE: u16 = 2;
const NAT_SRC: u16 = 1;
const NAT_DST: u16 = 2;
const NAT_PERSISTENT: u16 = 4;
const NAT_HASH: u16 = 8;
const NAT_RANDOM: u16 = 16;
const R_V4_MIN: u16 = 1;
const R_V4_MAX: u16 = 2;
const R_V6_MIN: u16 = 4;
const R_V6_MAX: u16 = 8;
const R_P_MIN: u16 = 16;
const R_P_MAX: u16 = 32;

const CT_MARK: u32 = 0x0001_d604;
const CT_MARK_W: u32 = 0x0001_d708;
const CT_LABEL: u32 = 0x0001_d810;
const CT_LABEL_W: u32 = 0x0001_d920;
const REG_LOAD2: u16 = 33;
const REG_LOAD: u16 = 7;
const REG_MOVE: u16 = 6;

/// `NXAST_REG_LOAD` (OpenFlow 1.0's `load:V->NXM_NX_CT_MARK[a..b]`): a
/// value of up to 64 bits at an offset of `ct_mark` or `ct_label`.
fn ct_reg_load(a: &mut Rd, s: &mut CtSpec) -> Result<(), ErrorKind> {
    let ofs_nbits = a.u16()?;
    let dst = a.u32()?;
    let value = a.u64()? as u128;
    let (ofs, nbits) = ((ofs_nbits >> 6) as u32, (ofs_nbits & 0x3f) as u32 + 1);
    let width = match dst {
        CT_MARK => 32,
        CT_LABEL => 128,
        _ => return Err(ErrorKind::BadArgument),
    };
    if ofs + nbits > width || (nbits < 64 && value >> nbits != 0) {
        return Err(ErrorKind::BadArgument);
    }
    let mask = if nbits >= 128 { u128::MAX } else { ((1u128 << nbits) - 1) << ofs };
    let v = value << ofs;
    if dst == CT_MARK {
        let (ov, om) = s.mark.unwrap_or((0, 0));
        s.mark = Some(((ov & !(mask as u32)) | v as u32, om | mask as u32));
    } else {
        let (ov, om) = s.label.unwrap_or((0, 0));
        s.label = Some(((ov & !mask) | v, om | mask));
    }
    Ok(())
}

/// Decodes the body of an `NXAST_CT` (after its subtype).
pub fn decode_ct(rd: &mut Rd) -> Result<Action, ErrorKind> {
    let flags = rd.u16()?;
    let zone_src = rd.u32()?;
    let zone = rd.u16()?;
    let table = rd.u8()?;
    rd.skip(3)?;
    let alg = rd.u16()?;
    // A zone from a field: `zone` holds the sub-field's ofs/n_bits.
    let zone_sf = if zone_src != 0 {
        let sf = crate::action::subfield(zone_src, (zone >> 6) as u32, (zone & 0x3f) as u32 + 1)?;
        if sf.n_bits != 16 {
            return Err(ErrorKind::BadArgument);
        }
        Some(sf)
    } else {
        None
    };
    // The helpers xvs has: FTP (21) and TFTP (69), as Open vSwitch.
    if !matches!(alg, 0 | 21 | 69) || flags & !(F_COMMIT | F_FORCE) != 0 {
        return Err(ErrorKind::BadArgument);
    }
    let mut s = CtSpec {
        commit: flags & F_COMMIT != 0,
        force: flags & F_FORCE != 0,
        zone: if zone_sf.is_some() { 0 } else { zone },
        zone_src: zone_sf,
        table: (table != 255).then_some(table),
        alg: (alg != 0).then_some(alg),
        ..CtSpec::default()
    };
    while !rd.is_empty() {
        let (ty, mut a) = crate::action::next_action(rd)?;
        match ty {
            0xffff => {
                if a.u32()? != crate::action::NX_VENDOR {
                    return Err(ErrorKind::BadActionExperimenter);
                }
                match a.u16()? {
                    NAT => {
                        s.nat = Some(decode_nat(&mut a)?);
                        s.nat_last = s.mark.is_some() || s.label.is_some();
                    }
                    REG_LOAD2 => ct_field(&mut a, &mut s)?,
                    REG_LOAD => ct_reg_load(&mut a, &mut s)?,
                    REG_MOVE => {
                        let (n_bits, src_ofs, dst_ofs) = (a.u16()?, a.u16()?, a.u16()?);
                        ct_move(crate::action::reg_move(n_bits, src_ofs, dst_ofs, &mut a)?, &mut s)?;
                    }
                    _ => return Err(ErrorKind::BadArgument),
                }
            }
            25 => ct_field(&mut a, &mut s)?,
            crate::action::OFPAT15_COPY_FIELD => {
                let (n_bits, src_ofs, dst_ofs) = (a.u16()?, a.u16()?, a.u16()?);
                a.skip(2)?;
                ct_move(crate::action::reg_move(n_bits, src_ofs, dst_ofs, &mut a)?, &mut s)?;
            }
            _ => return Err(ErrorKind::BadArgument),
        }
    }
    Ok(Action::Ct(s))
}

/// A nested `move` into `ct_mark` or `ct_label`.
fn ct_move(a: Action, s: &mut CtSpec) -> Result<(), ErrorKind> {
    match a {
        Action::Move { src, dst } if matches!(dst.field.name, "ct_mark" | "ct_label") => {
            s.moves.push((src, dst));
            Ok(())
        }
        _ => Err(ErrorKind::BadArgument),
    }
}

/// A nested write of `ct_mark` or `ct_label` (an NXM/OXM TLV).
fn ct_field(a: &mut Rd, s: &mut CtSpec) -> Result<(), ErrorKind> {
    let h = a.u32()?;
    match h {
        CT_MARK => s.mark = Some((a.u32()?, u32::MAX)),
        CT_MARK_W => {
            let v = a.u32()?;
            let m = a.u32()?;
            s.mark = Some((v & m, m));
        }
        CT_LABEL => s.label = Some((a.uint(16)?, u128::MAX)),
        CT_LABEL_W => {
            let v = a.uint(16)?;
            let m = a.uint(16)?;
            s.label = Some((v & m, m));
        }
        _ => return Err(ErrorKind::BadArgument),
    }
    Ok(())
}

fn decode_nat(a: &mut Rd) -> Result<Nat, ErrorKind> {
    a.skip(2)?;
    let flags = a.u16()?;
    let present = a.u16()?;
    let mut r = NatRange {
        addr_min: 0,
        addr_max: 0,
        port_min: 0,
        port_max: 0,
        v6: false,
        flags: NatFlags {
            persistent: flags & NAT_PERSISTENT != 0,
            hash: flags & NAT_HASH != 0,
            random: flags & NAT_RANDOM != 0,
        },
    };
    if present & R_V4_MIN != 0 {
        r.addr_min = a.u32()? as u128;
        r.addr_max = r.addr_min;
    }
    if present & R_V4_MAX != 0 {
        r.addr_max = a.u32()? as u128;
    }
    if present & R_V6_MIN != 0 {
        r.v6 = true;
        r.addr_min = a.uint(16)?;
        r.addr_max = r.addr_min;
    }
    if present & R_V6_MAX != 0 {
        r.addr_max = a.uint(16)?;
    }
    if present & R_P_MIN != 0 {
        r.port_min = a.u16()?;
        r.port_max = r.port_min;
    }
    if present & R_P_MAX != 0 {
        r.port_max = a.u16()?;
    }
    // A port range needs an address range (Open vSwitch answers
    // BAD_ARGUMENT to `nat(src=0.0.0.0:1024-2048)` too).
    let ports_only = present & (R_P_MIN | R_P_MAX) != 0 && present & (R_V4_MIN | R_V6_MIN) == 0;
    if ports_only || r.addr_max < r.addr_min || r.port_max < r.port_min || (r.flags.hash && r.flags.random) {
        return Err(ErrorKind::BadArgument);
    }
    Ok(match flags & (NAT_SRC | NAT_DST) {
        0 => Nat::Existing,
        NAT_SRC => Nat::Src(r),
        NAT_DST => Nat::Dst(r),
        _ => return Err(ErrorKind::BadArgument),
    })
}

/// Encodes `ct(...)` for `v`.
pub fn encode_ct(v: Version, s: &CtSpec, out: &mut Vec<u8>) {
    let start = nx_header(out, CT);
    let mut flags = 0;
    if s.commit {
        flags |= F_COMMIT;
    }
    if s.force {
        flags |= F_FORCE;
    }
    out.u16(flags);
    match s.zone_src.as_ref().and_then(|sf| crate::oxm::field_header(sf.field).map(|h| (h, sf))) {
        Some((h, sf)) => {
            out.u32(h);
            out.u16(((sf.ofs as u16) << 6) | (sf.n_bits as u16 - 1));
        }
        None => {
            out.u32(0);
            out.u16(s.zone);
        }
    }
    out.u8(s.table.unwrap_or(255));
    out.zeros(3);
    out.u16(s.alg.unwrap_or(0));
    // Nested actions, each padded to 8.
    let field = |out: &mut Vec<u8>, tlv: &[u8]| {
        let st = if v == Version::Of10 {
            nx_header(out, REG_LOAD2)
        } else {
            let st = out.len();
            out.u16(25);
            out.u16(0);
            st
        };
        out.extend_from_slice(tlv);
        finish(out, st);
    };
    if !s.nat_last {
        encode_nat(s, out);
    }
    if let Some((val, m)) = s.mark {
        let contiguous =
            m != 0 && (m >> m.trailing_zeros()).count_ones() == 32 - m.leading_zeros() - m.trailing_zeros();
        if v == Version::Of10 && contiguous {
            // OpenFlow 1.0: load:V->NXM_NX_CT_MARK[a..b], as ovs-ofctl sends it.
            let st = nx_header(out, REG_LOAD);
            let ofs = m.trailing_zeros();
            let nbits = 32 - m.leading_zeros() - ofs;
            out.u16(((ofs as u16) << 6) | (nbits as u16 - 1));
            out.u32(CT_MARK);
            out.u64(((val & m) >> ofs) as u64);
            finish(out, st);
        } else {
            let mut t = Vec::new();
            if m == u32::MAX {
                t.u32(CT_MARK);
                t.u32(val);
            } else {
                t.u32(CT_MARK_W);
                t.u32(val);
                t.u32(m);
            }
            field(out, &t);
        }
    }
    if let Some((val, m)) = s.label {
        // OpenFlow 1.0: a contiguous write of up to 64 bits is a Nicira
        // load (load:V->NXM_NX_CT_LABEL[a..b]), as ovs-ofctl sends it.
        let (ofs, nbits) = (m.trailing_zeros(), 128 - m.leading_zeros() - m.trailing_zeros());
        if v == Version::Of10 && m != 0 && nbits <= 64 && (m >> ofs).count_ones() == nbits {
            let st = nx_header(out, REG_LOAD);
            out.u16(((ofs as u16) << 6) | (nbits as u16 - 1));
            out.u32(CT_LABEL);
            out.u64(((val & m) >> ofs) as u64);
            finish(out, st);
            encode_moves(v, s, out);
            if s.nat_last {
                encode_nat(s, out);
            }
            out.patch_len(start + 2, start);
            return;
        }
        let mut t = Vec::new();
        t.u32(if m == u128::MAX { CT_LABEL } else { CT_LABEL_W });
        t.extend_from_slice(&val.to_be_bytes());
        if m != u128::MAX {
            t.extend_from_slice(&m.to_be_bytes());
        }
        field(out, &t);
    }
    encode_moves(v, s, out);
    if s.nat_last {
        encode_nat(s, out);
    }
    out.patch_len(start + 2, start);
}

/// `exec(move:...)`: nested moves, encoded as any move is for `v`.
fn encode_moves(v: Version, s: &CtSpec, out: &mut Vec<u8>) {
    let moves: Vec<Action> = s.moves.iter().map(|(src, dst)| Action::Move { src: *src, dst: *dst }).collect();
    crate::action::encode_actions(v, &moves, out);
}

fn encode_nat(s: &CtSpec, out: &mut Vec<u8>) {
    if let Some(nat) = &s.nat {
        let st = nx_header(out, NAT);
        out.zeros(2);
        let (kind, r) = match nat {
            Nat::Existing => (0, None),
            Nat::Src(r) => (NAT_SRC, Some(r)),
            Nat::Dst(r) => (NAT_DST, Some(r)),
        };
        let mut flags = kind;
        let mut present = 0;
        if let Some(r) = r {
            if r.flags.persistent {
                flags |= NAT_PERSISTENT;
            }
            if r.flags.hash {
                flags |= NAT_HASH;
            }
            if r.flags.random {
                flags |= NAT_RANDOM;
            }
            let none = r.addr_min == 0 && r.addr_max == 0;
            if !none {
                present |= if r.v6 { R_V6_MIN } else { R_V4_MIN };
            }
            if !none && r.addr_max != r.addr_min {
                present |= if r.v6 { R_V6_MAX } else { R_V4_MAX };
            }
            if r.port_min != 0 || r.port_max != 0 {
                present |= R_P_MIN;
                if r.port_max != r.port_min {
                    present |= R_P_MAX;
                }
            }
        }
        out.u16(flags);
        out.u16(present);
        if let Some(r) = r.filter(|_| present & (R_V4_MIN | R_V6_MIN) != 0) {
            if r.v6 {
                out.extend_from_slice(&r.addr_min.to_be_bytes());
                if present & R_V6_MAX != 0 {
                    out.extend_from_slice(&r.addr_max.to_be_bytes());
                }
            } else {
                out.u32(r.addr_min as u32);
                if present & R_V4_MAX != 0 {
                    out.u32(r.addr_max as u32);
                }
            }
        }
        // Ports follow whether or not an address was given
        // (`nat(src=0.0.0.0:1024-2048)`, `nat(src=:1024-2048)`).
        if let Some(r) = r {
            if present & R_P_MIN != 0 {
                out.u16(r.port_min);
            }
            if present & R_P_MAX != 0 {
                out.u16(r.port_max);
            }
        }
        finish(out, st);
    }
}

/// Encodes `ct_clear`.
pub fn encode_ct_clear(out: &mut Vec<u8>) {
    let st = nx_header(out, CT_CLEAR);
    finish(out, st);
}
