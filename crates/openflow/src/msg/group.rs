//! Groups: GROUP_MOD, group stats, group descriptions and features.

use super::*;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bucket {
    pub weight: u16,
    pub watch_port: u32,
    pub watch_group: u32,
    pub actions: Vec<Action>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupMod {
    /// 0 add, 1 modify, 2 delete.
    pub cmd: u16,
    /// 0 all, 1 select, 2 indirect, 3 fast_failover.
    pub group_type: u8,
    pub group_id: u32,
    pub buckets: Vec<Bucket>,
}

pub(crate) fn decode_group_mod(v: Version, rd: &mut Rd) -> Result<GroupMod, ErrorKind> {
    let cmd = rd.u16()?;
    let group_type = rd.u8()?;
    rd.skip(1)?;
    let group_id = rd.u32()?;
    if cmd > 2 {
        return Err(ErrorKind::BadGroupCommand);
    }
    if group_type > 3 {
        return Err(ErrorKind::BadGroupType);
    }
    let mut buckets = Vec::new();
    if v >= Version::Of15 {
        let blen = rd.u16()? as usize;
        rd.skip(6)?; // pad, command_bucket_id
        let mut br = rd.sub(blen.min(rd.len()), ErrorKind::BadBucket)?;
        while !br.is_empty() {
            let len = br.u16()? as usize;
            let alen = br.u16()? as usize;
            let _id = br.u32()?;
            if len < 8 + alen {
                return Err(ErrorKind::BadBucket);
            }
            let ab = br.bytes(alen)?;
            let (actions, _) = action::decode_actions(v, ab)?;
            let mut props = br.sub(len - 8 - alen, ErrorKind::BadBucket)?;
            let (mut weight, mut watch_port, mut watch_group) = (0, OFPP_ANY, OFPG_ANY);
            while !props.is_empty() {
                let pt = props.u16()?;
                let pl = props.u16()? as usize;
                if pl < 4 {
                    return Err(ErrorKind::BadBucket);
                }
                let mut p = props.sub(pl - 4, ErrorKind::BadBucket)?;
                match pt {
                    0 => {
                        weight = p.u16()?;
                    }
                    1 => watch_port = port11(p.u32()?)?,
                    2 => watch_group = p.u32()?,
                    _ => {}
                }
            }
            buckets.push(Bucket { weight, watch_port, watch_group, actions });
        }
        return Ok(GroupMod { cmd, group_type, group_id, buckets });
    }
    while !rd.is_empty() {
        let len = rd.u16()? as usize;
        if len < 16 || len - 2 > rd.len() {
            return Err(ErrorKind::BadBucket);
        }
        let mut b = rd.sub(len - 2, ErrorKind::BadBucket)?;
        let weight = b.u16()?;
        let wp = b.u32()?;
        let watch_port = if wp == 0xffff_ffff { OFPP_ANY } else { port11(wp).map_err(|_| ErrorKind::BadWatch)? };
        let watch_group = b.u32()?;
        b.skip(4)?;
        let (actions, _) = action::decode_actions(v, b.rest())?;
        buckets.push(Bucket { weight, watch_port, watch_group, actions });
    }
    Ok(GroupMod { cmd, group_type, group_id, buckets })
}

/// Group stats entry.
pub fn encode_group_stats(
    v: Version,
    group_id: u32,
    ref_count: u32,
    packets: u64,
    bytes: u64,
    duration_ms: u64,
    buckets: &[(u64, u64)],
) -> Vec<u8> {
    let mut out = Vec::new();
    out.u16(0);
    out.zeros(2);
    out.u32(group_id);
    out.u32(ref_count);
    out.zeros(4);
    out.u64(packets);
    out.u64(bytes);
    let _ = v;
    out.u32((duration_ms / 1000) as u32);
    out.u32(((duration_ms % 1000) * 1_000_000) as u32);
    for (p, b) in buckets {
        out.u64(*p);
        out.u64(*b);
    }
    out.patch_len(0, 0);
    out
}

/// Group description entry.
pub fn encode_group_desc(v: Version, gm: &GroupMod) -> Vec<u8> {
    let mut out = Vec::new();
    out.u16(0);
    out.u8(gm.group_type);
    out.u8(0);
    out.u32(gm.group_id);
    if v >= Version::Of15 {
        let bl_at = out.len();
        out.u16(0);
        out.zeros(6);
        let bs = out.len();
        for (i, b) in gm.buckets.iter().enumerate() {
            let s = out.len();
            out.u16(0);
            let al_at = out.len();
            out.u16(0);
            out.u32(i as u32);
            let a0 = out.len();
            action::encode_actions(v, &b.actions, &mut out);
            let al = out.len() - a0;
            out[al_at..al_at + 2].copy_from_slice(&(al as u16).to_be_bytes());
            if gm.group_type == 1 {
                out.u16(0);
                out.u16(8);
                out.u16(b.weight);
                out.zeros(2);
            }
            if b.watch_port != OFPP_ANY {
                out.u16(1);
                out.u16(8);
                out.u32(port_to_of11(b.watch_port));
            }
            if b.watch_group != OFPG_ANY {
                out.u16(2);
                out.u16(8);
                out.u32(b.watch_group);
            }
            out.patch_len(s, s);
        }
        let bl = out.len() - bs;
        out[bl_at..bl_at + 2].copy_from_slice(&(bl as u16).to_be_bytes());
        out.patch_len(0, 0);
        return out;
    }
    for b in &gm.buckets {
        let s = out.len();
        out.u16(0);
        out.u16(b.weight);
        out.u32(if b.watch_port == OFPP_ANY { 0xffff_ffff } else { port_to_of11(b.watch_port) });
        out.u32(b.watch_group);
        out.zeros(4);
        action::encode_actions(v, &b.actions, &mut out);
        out.patch_len(s, s);
    }
    out.patch_len(0, 0);
    out
}

/// Group features: types all/select/indirect/ff, capabilities select-weight + liveness.
pub fn encode_group_features() -> Vec<u8> {
    let mut out = Vec::new();
    out.u32(0xf);
    out.u32(1 | 4);
    for _ in 0..4 {
        out.u32(65535);
    }
    for _ in 0..4 {
        // output, group, set_field, push/pop vlan, dec ttl...
        out.u32((1 << 0) | (1 << 17) | (1 << 18) | (1 << 21) | (1 << 22) | (1 << 23) | (1 << 24) | (1 << 25));
    }
    out
}

/// GROUP_MOD (for controllers and tests). Its body is laid out as a group
/// description entry with the command where the entry has its length (and,
/// in 1.5, the command bucket id where the entry has padding), so a group
/// is described exactly as it was installed.
pub fn encode_group_mod(v: Version, xid: u32, gm: &GroupMod) -> Vec<u8> {
    let mut body = encode_group_desc(v, gm);
    body[0..2].copy_from_slice(&gm.cmd.to_be_bytes());
    if v >= Version::Of15 {
        // OFPG_BUCKET_ALL: the command applies to every bucket.
        body[12..16].copy_from_slice(&0xffff_ffffu32.to_be_bytes());
    }
    let mut out = begin(v, t::GROUP_MOD, xid);
    out.extend_from_slice(&body);
    end(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ofp_types::OfPort;

    fn sample(group_type: u8) -> GroupMod {
        let weight = if group_type == 1 { 7 } else { 0 };
        GroupMod {
            cmd: 0,
            group_type,
            group_id: 42,
            buckets: vec![
                Bucket {
                    weight,
                    watch_port: if group_type == 3 { 3 } else { OFPP_ANY },
                    watch_group: OFPG_ANY,
                    actions: vec![Action::OutputMaxLen(OfPort::Port(3), 0xffe5)],
                },
                Bucket {
                    weight,
                    watch_port: if group_type == 3 { 4 } else { OFPP_ANY },
                    watch_group: OFPG_ANY,
                    actions: vec![
                        ofp_types::actions::parse_action("set_field:53->udp_src").unwrap(),
                        Action::Output(OfPort::Port(4)),
                    ],
                },
            ],
        }
    }

    /// A group mod decodes to what was encoded, and the group description
    /// (what a controller reads back) carries the same body.
    #[test]
    fn group_mod_round_trips_and_is_described_as_installed() {
        for v in [Version::Of13, Version::Of14, Version::Of15] {
            for ty in 0..=3 {
                let gm = sample(ty);
                let b = encode_group_mod(v, 9, &gm);
                let got = decode(&Ctx::new(v), &frame(&b)).unwrap_or_else(|e| panic!("{v:?} type {ty}: {e:?}"));
                assert_eq!(got, Msg::GroupMod(gm.clone()), "{v:?} type {ty}");
                let desc = encode_group_desc(v, &gm);
                assert_eq!(u16::from_be_bytes([desc[0], desc[1]]) as usize, desc.len());
                let mut body = desc.clone();
                body[0..2].copy_from_slice(&0u16.to_be_bytes());
                let back = decode_group_mod(v, &mut Rd::new(&body, ErrorKind::BadLen)).unwrap();
                assert_eq!(back, gm, "{v:?} type {ty}: description differs from the mod");
            }
        }
    }

    #[test]
    fn bad_group_command_and_type_are_refused() {
        let mut gm = sample(0);
        gm.cmd = 3;
        let b = encode_group_mod(Version::Of13, 1, &gm);
        assert_eq!(decode(&Ctx::new(Version::Of13), &frame(&b)), Err(ErrorKind::BadGroupCommand));
        let mut gm = sample(0);
        gm.group_type = 4;
        let b = encode_group_mod(Version::Of13, 1, &gm);
        assert_eq!(decode(&Ctx::new(Version::Of13), &frame(&b)), Err(ErrorKind::BadGroupType));
    }
}
