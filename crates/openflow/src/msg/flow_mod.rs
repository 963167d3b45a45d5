//! Flow mods: OFPT_FLOW_MOD (1.0, 1.1+) and Nicira's NXT_FLOW_MOD (1.0
//! with NXM matches), decoded into a [`FlowMod`] (command + [`FlowSpec`]
//! + the wire-level filters) and encoded back for controllers and tests.

use super::*;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowMod {
    pub cmd: FlowModCmd,
    pub spec: FlowSpec,
    pub buffer_id: u32,
    /// Our numbering; [`OFPP_ANY`] when absent.
    pub out_port: u32,
    pub out_group: u32,
    pub flags: u16,
    pub importance: u16,
}

pub(crate) fn flow_cmd(c: u8) -> Result<FlowModCmd, ErrorKind> {
    Ok(match c {
        0 => FlowModCmd::Add,
        1 => FlowModCmd::Modify,
        2 => FlowModCmd::ModifyStrict,
        3 => FlowModCmd::Delete,
        4 => FlowModCmd::DeleteStrict,
        _ => return Err(ErrorKind::BadCommand),
    })
}

pub(crate) fn spec(
    table: u8,
    priority: u16,
    cookie: u64,
    cookie_mask: u64,
    idle: u16,
    hard: u16,
    m: Match,
) -> FlowSpec {
    FlowSpec {
        table: if table == 0xff { 0 } else { table },
        priority: priority as u32,
        cookie,
        cookie_mask,
        idle_timeout: idle,
        hard_timeout: hard,
        matched: m,
        instructions: Vec::new(),
        has_actions: true,
        table_given: table != 0xff,
        flags: 0,
        importance: 0,
        out_port: None,
        out_group: None,
    }
}

/// Copies the wire-level filters and flags into the flow spec.
pub(crate) fn finish_flow_mod(mut fm: FlowMod) -> FlowMod {
    fm.spec.flags = fm.flags;
    fm.spec.importance = fm.importance;
    fm.spec.out_port = (fm.out_port != OFPP_ANY && fm.cmd != FlowModCmd::Add).then_some(fm.out_port);
    fm.spec.out_group = (fm.out_group != OFPG_ANY && fm.cmd != FlowModCmd::Add).then_some(fm.out_group);
    fm
}

pub(crate) fn decode_flow_mod(ctx: &Ctx, rd: &mut Rd) -> Result<FlowMod, ErrorKind> {
    let v = ctx.version;
    if v == Version::Of10 {
        let m = of10::decode(rd)?;
        let cookie = rd.u64()?;
        let command = rd.u16()?;
        let (table, cmd) =
            if ctx.flow_mod_table_id { ((command >> 8) as u8, command as u8) } else { (0xff, command as u8) };
        if !ctx.flow_mod_table_id && command > 0xff {
            return Err(ErrorKind::BadCommand);
        }
        let cmd = flow_cmd(cmd)?;
        let idle = rd.u16()?;
        let hard = rd.u16()?;
        let priority = rd.u16()?;
        let buffer_id = rd.u32()?;
        let out_port = port10(rd.u16()?);
        let flags = rd.u16()?;
        let mut s = spec(table, priority, cookie, if cmd == FlowModCmd::Add { 0 } else { u64::MAX }, idle, hard, m);
        if matches!(cmd, FlowModCmd::Modify | FlowModCmd::Delete) {
            // 1.0 modify/delete without a cookie mask match any cookie.
            s.cookie_mask = 0;
        }
        s.instructions = action::decode_instructions(v, rd.rest())?;
        return Ok(FlowMod { cmd, spec: s, buffer_id, out_port, out_group: OFPG_ANY, flags: flags & 3, importance: 0 });
    }
    let cookie = rd.u64()?;
    let cookie_mask = rd.u64()?;
    let table = rd.u8()?;
    let cmd = flow_cmd(rd.u8()?)?;
    let idle = rd.u16()?;
    let hard = rd.u16()?;
    let priority = rd.u16()?;
    let buffer_id = rd.u32()?;
    let out_port_raw = rd.u32()?;
    let out_port = if out_port_raw == 0xffff_ffff { OFPP_ANY } else { port11(out_port_raw)? };
    let out_group = rd.u32()?;
    let flags = rd.u16()?;
    let importance = rd.u16()?;
    let m = oxm::decode_ofp_match(rd)?;
    if table == 0xff && cmd == FlowModCmd::Add {
        return Err(ErrorKind::BadTableId);
    }
    if table > 254 && table != 0xff {
        return Err(ErrorKind::BadTableId);
    }
    let mut s = spec(table, priority, cookie, cookie_mask, idle, hard, m);
    if cmd == FlowModCmd::Add {
        s.cookie_mask = 0;
    }
    s.instructions = action::decode_instructions(v, rd.rest())?;
    Ok(FlowMod {
        cmd,
        spec: s,
        buffer_id,
        out_port,
        out_group,
        flags,
        importance: if v >= Version::Of14 { importance } else { 0 },
    })
}

pub(crate) fn decode_nx_flow_mod(ctx: &Ctx, rd: &mut Rd) -> Result<FlowMod, ErrorKind> {
    let cookie = rd.u64()?;
    let command = rd.u16()?;
    let (table, cmd) =
        if ctx.flow_mod_table_id { ((command >> 8) as u8, command as u8) } else { (0xff, command as u8) };
    let cmd = flow_cmd(cmd)?;
    let idle = rd.u16()?;
    let hard = rd.u16()?;
    let priority = rd.u16()?;
    let buffer_id = rd.u32()?;
    let out_port = port10(rd.u16()?);
    let flags = rd.u16()?;
    let match_len = rd.u16()? as usize;
    rd.skip(6)?;
    let mb = rd.bytes(match_len).map_err(|_| ErrorKind::BadMatchLen)?;
    rd.skip((match_len.div_ceil(8) * 8 - match_len).min(rd.len()))?;
    let d = oxm::decode(mb)?;
    let (ck, cm) = match (cmd, d.cookie) {
        (FlowModCmd::Add, _) => (cookie, 0),
        (_, Some((c, m))) => (c, m),
        (FlowModCmd::ModifyStrict | FlowModCmd::DeleteStrict, None) => (cookie, 0),
        (_, None) => (cookie, 0),
    };
    let mut s = spec(table, priority, ck, cm, idle, hard, d.matched);
    if cmd == FlowModCmd::Add {
        s.cookie = cookie;
    }
    s.instructions = action::decode_instructions(Version::Of10, rd.rest())?;
    Ok(FlowMod { cmd, spec: s, buffer_id, out_port, out_group: OFPG_ANY, flags: flags & 7, importance: 0 })
}

/// Encodes a flow mod (for tests and the tools side): 1.0 uses NXT_FLOW_MOD
/// (NXM), 1.1+ the standard message.
pub fn encode_flow_mod(v: Version, xid: u32, fm: &FlowMod) -> Vec<u8> {
    let cmd = match fm.cmd {
        FlowModCmd::Add => 0u8,
        FlowModCmd::Modify => 1,
        FlowModCmd::ModifyStrict => 2,
        FlowModCmd::Delete => 3,
        FlowModCmd::DeleteStrict => 4,
    };
    let s = &fm.spec;
    let table = if s.table_given || fm.cmd == FlowModCmd::Add { s.table } else { 0xff };
    if v == Version::Of10 {
        let mut out = begin(v, t::EXPERIMENTER, xid);
        out.u32(NX_VENDOR);
        out.u32(nxt::FLOW_MOD);
        out.u64(s.cookie);
        out.u16(((table as u16) << 8) | cmd as u16);
        out.u16(s.idle_timeout);
        out.u16(s.hard_timeout);
        out.u16(s.priority as u16);
        out.u32(fm.buffer_id);
        out.u16(fm.out_port as u16);
        out.u16(fm.flags);
        let ml_at = out.len();
        out.u16(0);
        out.zeros(6);
        let ms = out.len();
        oxm::encode(&s.matched, Flavor::Nxm, &mut out);
        if fm.cmd != FlowModCmd::Add {
            oxm::encode_cookie(s.cookie, s.cookie_mask, &mut out);
        }
        let ml = out.len() - ms;
        out[ml_at..ml_at + 2].copy_from_slice(&(ml as u16).to_be_bytes());
        out.pad8();
        action::encode_instructions(v, &s.instructions, &mut out);
        return end(out);
    }
    let mut out = begin(v, t::FLOW_MOD, xid);
    out.u64(s.cookie);
    out.u64(s.cookie_mask);
    out.u8(table);
    out.u8(cmd);
    out.u16(s.idle_timeout);
    out.u16(s.hard_timeout);
    out.u16(s.priority as u16);
    out.u32(fm.buffer_id);
    out.u32(if fm.out_port == OFPP_ANY { 0xffff_ffff } else { port_to_of11(fm.out_port) });
    out.u32(fm.out_group);
    out.u16(fm.flags);
    out.u16(fm.importance);
    oxm::encode_ofp_match(&s.matched, &mut out);
    action::encode_instructions(v, &s.instructions, &mut out);
    end(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flow_mod_round_trips() {
        for v in Version::ALL {
            for text in [
                "priority=100,tcp,nw_dst=10.0.0.0/8,tp_dst=80,actions=output:2",
                "table=3,cookie=0x5,idle_timeout=10,in_port=1,actions=drop",
                "udp6,ipv6_src=::1,actions=dec_ttl,resubmit(,4)",
            ] {
                let spec = ofp_types::parse_flow(text, ofp_types::Need::Actions).unwrap();
                let fm = FlowMod {
                    cmd: FlowModCmd::Add,
                    spec,
                    buffer_id: NO_BUFFER,
                    out_port: OFPP_ANY,
                    out_group: OFPG_ANY,
                    flags: ff::SEND_FLOW_REM,
                    importance: 0,
                };
                let b = encode_flow_mod(v, 7, &fm);
                let ctx = Ctx { version: v, flow_mod_table_id: true };
                let got = decode(&ctx, &frame(&b)).unwrap_or_else(|e| panic!("{text} {v:?}: {e:?}"));
                let Msg::FlowMod(g) = got else { panic!("not a flow mod") };
                assert_eq!(g.spec.matched, fm.spec.matched, "{text} {v:?}");
                assert_eq!(g.spec.priority, fm.spec.priority);
                assert_eq!(g.spec.table, fm.spec.table);
                assert_eq!(g.spec.cookie, fm.spec.cookie);
                assert_eq!(g.spec.idle_timeout, fm.spec.idle_timeout);
                assert_eq!(g.flags, ff::SEND_FLOW_REM);
            }
        }
    }
}
