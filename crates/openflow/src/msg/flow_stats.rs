//! Flow statistics and flow removal: the flow-stats and aggregate
//! requests, each installed flow reported back as it was installed
//! ([`FlowStats`]: 1.0, NXST, 1.3/1.4, 1.5 OXS), and FLOW_REMOVED.

use super::*;

pub(crate) fn decode_flow_stats_req(v: Version, rd: &mut Rd, aggregate: bool) -> Result<StatsReq, ErrorKind> {
    if v == Version::Of10 {
        let m = of10::decode(rd)?;
        let table = rd.u8()?;
        rd.skip(1)?;
        let out_port = port10(rd.u16()?);
        return Ok(StatsReq::Flow {
            aggregate,
            nx: false,
            table,
            out_port,
            out_group: OFPG_ANY,
            cookie: 0,
            cookie_mask: 0,
            matched: m,
        });
    }
    let table = rd.u8()?;
    rd.skip(3)?;
    let op = rd.u32()?;
    let out_port = if op == 0xffff_ffff { OFPP_ANY } else { port11(op)? };
    let out_group = rd.u32()?;
    rd.skip(4)?;
    let cookie = rd.u64()?;
    let cookie_mask = rd.u64()?;
    let m = oxm::decode_ofp_match(rd)?;
    Ok(StatsReq::Flow { aggregate, nx: false, table, out_port, out_group, cookie, cookie_mask, matched: m })
}

/// One flow's statistics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowStats {
    pub table: u8,
    pub priority: u16,
    pub idle_timeout: u16,
    pub hard_timeout: u16,
    pub flags: u16,
    pub importance: u16,
    pub cookie: u64,
    pub packets: u64,
    pub bytes: u64,
    pub duration_ms: u64,
    pub idle_age_s: u16,
    pub hard_age_s: u16,
    pub matched: Match,
    pub instructions: Vec<Instruction>,
}

/// One flow stats entry: 1.0 plain, NXST (Nicira, NXM match), 1.3/1.4, or
/// 1.5 (OXS statistics).
pub fn encode_flow_stats(v: Version, nx: bool, f: &FlowStats) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    let (sec, nsec) = ((f.duration_ms / 1000) as u32, ((f.duration_ms % 1000) * 1_000_000) as u32);
    if nx {
        out.u16(0);
        out.u8(f.table);
        out.u8(0);
        out.u32(sec);
        out.u32(nsec);
        out.u16(f.priority);
        out.u16(f.idle_timeout);
        out.u16(f.hard_timeout);
        let ml_at = out.len();
        out.u16(0);
        out.u16(f.idle_age_s.saturating_add(1));
        out.u16(f.hard_age_s.saturating_add(1));
        out.u64(f.cookie);
        out.u64(f.packets);
        out.u64(f.bytes);
        let ms = out.len();
        oxm::encode(&f.matched, Flavor::Nxm, &mut out);
        let ml = out.len() - ms;
        out[ml_at..ml_at + 2].copy_from_slice(&(ml as u16).to_be_bytes());
        out.pad8();
        action::encode_instructions(Version::Of10, &f.instructions, &mut out);
        out.patch_len(0, 0);
        return out;
    }
    match v {
        Version::Of10 => {
            out.u16(0);
            out.u8(f.table);
            out.u8(0);
            of10::encode(&f.matched, &mut out);
            out.u32(sec);
            out.u32(nsec);
            out.u16(f.priority);
            out.u16(f.idle_timeout);
            out.u16(f.hard_timeout);
            out.zeros(6);
            out.u64(f.cookie);
            out.u64(f.packets);
            out.u64(f.bytes);
            action::encode_instructions(v, &f.instructions, &mut out);
        }
        Version::Of13 | Version::Of14 => {
            out.u16(0);
            out.u8(f.table);
            out.u8(0);
            out.u32(sec);
            out.u32(nsec);
            out.u16(f.priority);
            out.u16(f.idle_timeout);
            out.u16(f.hard_timeout);
            out.u16(f.flags);
            if v == Version::Of14 {
                out.u16(f.importance);
                out.zeros(2);
            } else {
                out.zeros(4);
            }
            out.u64(f.cookie);
            out.u64(f.packets);
            out.u64(f.bytes);
            oxm::encode_ofp_match(&f.matched, &mut out);
            action::encode_instructions(v, &f.instructions, &mut out);
        }
        Version::Of15 => {
            out.u16(0);
            out.zeros(2);
            out.u8(f.table);
            out.u8(0); // reason: stats request
            out.u16(f.priority);
            out.u16(f.idle_timeout);
            out.u16(f.hard_timeout);
            out.u16(f.flags);
            out.u16(f.importance);
            out.u64(f.cookie);
            oxm::encode_ofp_match(&f.matched, &mut out);
            encode_oxs(&mut out, sec, nsec, Some(f.idle_age_s as u32), f.packets, f.bytes, None);
            action::encode_instructions(v, &f.instructions, &mut out);
        }
    }
    out.patch_len(0, 0);
    out
}

/// OpenFlow 1.5 `ofp_stats` with OXS entries (duration, idle time,
/// packet/byte counts, flow count).
pub(crate) fn encode_oxs(
    out: &mut Vec<u8>,
    sec: u32,
    nsec: u32,
    idle_s: Option<u32>,
    pk: u64,
    by: u64,
    flows: Option<u32>,
) {
    let start = out.len();
    out.u16(0); // reserved
    out.u16(0); // length
    let oxs = |out: &mut Vec<u8>, field: u8, len: u8| out.u32((0x8002u32 << 16) | ((field as u32) << 9) | len as u32);
    if flows.is_none() {
        oxs(out, 0, 8);
        out.u32(sec);
        out.u32(nsec);
        if let Some(i) = idle_s {
            oxs(out, 1, 8);
            out.u32(i);
            out.u32(0);
        }
    }
    if let Some(n) = flows {
        oxs(out, 3, 4);
        out.u32(n);
    }
    oxs(out, 4, 8);
    out.u64(pk);
    oxs(out, 5, 8);
    out.u64(by);
    out.patch_len(start + 2, start);
    out.pad8();
}

pub fn encode_aggregate(v: Version, packets: u64, bytes: u64, flows: u32) -> Vec<u8> {
    let mut out = Vec::new();
    if v == Version::Of15 {
        encode_oxs(&mut out, 0, 0, None, packets, bytes, Some(flows));
        return out;
    }
    out.u64(packets);
    out.u64(bytes);
    out.u32(flows);
    out.zeros(4);
    out
}

/// FLOW_REMOVED (reason: 0 idle timeout, 1 hard timeout, 2 delete, 3 group delete, 5 meter delete).
pub fn encode_flow_removed(v: Version, xid: u32, reason: u8, f: &FlowStats, nx: bool) -> Vec<u8> {
    let (sec, nsec) = ((f.duration_ms / 1000) as u32, ((f.duration_ms % 1000) * 1_000_000) as u32);
    if v == Version::Of10 && nx {
        let mut out = begin(v, t::EXPERIMENTER, xid);
        out.u32(NX_VENDOR);
        out.u32(nxt::FLOW_REMOVED);
        out.u64(f.cookie);
        out.u16(f.priority);
        out.u8(reason);
        out.u8(f.table);
        out.u32(sec);
        out.u32(nsec);
        out.u16(f.idle_timeout);
        let ml_at = out.len();
        out.u16(0);
        out.u64(f.packets);
        out.u64(f.bytes);
        let ms = out.len();
        oxm::encode(&f.matched, Flavor::Nxm, &mut out);
        let ml = out.len() - ms;
        out[ml_at..ml_at + 2].copy_from_slice(&(ml as u16).to_be_bytes());
        out.pad8();
        return end(out);
    }
    let mut out = begin(v, t::FLOW_REMOVED, xid);
    if v == Version::Of10 {
        of10::encode(&f.matched, &mut out);
        out.u64(f.cookie);
        out.u16(f.priority);
        out.u8(reason);
        out.u8(0);
        out.u32(sec);
        out.u32(nsec);
        out.u16(f.idle_timeout);
        out.zeros(2);
        out.u64(f.packets);
        out.u64(f.bytes);
        return end(out);
    }
    if v == Version::Of15 {
        out.u8(f.table);
        out.u8(reason);
        out.u16(f.priority);
        out.u16(f.idle_timeout);
        out.u16(f.hard_timeout);
        out.u64(f.cookie);
        oxm::encode_ofp_match(&f.matched, &mut out);
        encode_oxs(&mut out, sec, nsec, None, f.packets, f.bytes, None);
        return end(out);
    }
    out.u64(f.cookie);
    out.u16(f.priority);
    out.u8(reason);
    out.u8(f.table);
    out.u32(sec);
    out.u32(nsec);
    out.u16(f.idle_timeout);
    out.u16(f.hard_timeout);
    out.u64(f.packets);
    out.u64(f.bytes);
    oxm::encode_ofp_match(&f.matched, &mut out);
    end(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(text: &str) -> FlowStats {
        let s = ofp_types::parse_flow(text, ofp_types::Need::Actions).unwrap();
        FlowStats {
            table: s.table,
            priority: s.priority as u16,
            idle_timeout: s.idle_timeout,
            hard_timeout: s.hard_timeout,
            flags: ff::SEND_FLOW_REM,
            importance: 0,
            cookie: s.cookie,
            packets: 11,
            bytes: 1100,
            duration_ms: 2500,
            idle_age_s: 1,
            hard_age_s: 2,
            matched: s.matched,
            instructions: s.instructions,
        }
    }

    /// Reads a 1.3/1.4 `ofp_flow_stats` entry back into what a controller
    /// sees: every installed property, the match, and the instructions.
    fn read13(v: Version, b: &[u8]) -> FlowStats {
        let mut rd = Rd::new(b, ErrorKind::BadLen);
        assert_eq!(rd.u16().unwrap() as usize, b.len());
        let table = rd.u8().unwrap();
        rd.skip(1).unwrap();
        let (sec, nsec) = (rd.u32().unwrap(), rd.u32().unwrap());
        let priority = rd.u16().unwrap();
        let idle_timeout = rd.u16().unwrap();
        let hard_timeout = rd.u16().unwrap();
        let flags = rd.u16().unwrap();
        let importance = if v >= Version::Of14 { rd.u16().unwrap() } else { 0 };
        rd.skip(if v >= Version::Of14 { 2 } else { 4 }).unwrap();
        let cookie = rd.u64().unwrap();
        let packets = rd.u64().unwrap();
        let bytes = rd.u64().unwrap();
        let matched = oxm::decode_ofp_match(&mut rd).unwrap();
        let instructions = action::decode_instructions(v, rd.rest()).unwrap();
        FlowStats {
            table,
            priority,
            idle_timeout,
            hard_timeout,
            flags,
            importance,
            cookie,
            packets,
            bytes,
            duration_ms: sec as u64 * 1000 + nsec as u64 / 1_000_000,
            idle_age_s: 1,
            hard_age_s: 2,
            matched,
            instructions,
        }
    }

    /// The flow stats entry reports the flow bit for bit as installed:
    /// output max_len (OFPCML_MAX), set_field on udp/sctp/icmp/arp fields
    /// under their own names, goto_table, write_metadata, cookie, timeouts.
    #[test]
    fn flow_stats_entry_echoes_the_installed_flow() {
        for text in [
            "table=1,priority=7,cookie=0x99,idle_timeout=5,hard_timeout=9,udp,tp_dst=53,\
             actions=set_field:1000->udp_src,output:2",
            "sctp,actions=set_field:9->sctp_dst,goto_table:4",
            "icmp,actions=set_field:8->icmp_type,set_field:0->icmp_code,output:1",
            "arp,actions=set_field:2->arp_op,set_field:10.0.0.9->arp_spa,output:1",
            "icmp6,icmp_type=135,actions=set_field:00:11:22:33:44:55->nd_sll,output:1",
            "in_port=1,actions=write_metadata:0x5/0xff,goto_table:2",
        ] {
            for v in [Version::Of13, Version::Of14] {
                let f = stats(text);
                assert_eq!(read13(v, &encode_flow_stats(v, false, &f)), f, "{v:?} {text}");
            }
        }
        // A max_len built by hand (ovs-ofctl's own syntax never sets one
        // on a port output): 65509 = OFPCML_MAX comes back as 65509.
        let mut f = stats("in_port=1,actions=drop");
        f.instructions = vec![Instruction::Apply(vec![Action::OutputMaxLen(ofp_types::OfPort::Port(2), 0xffe5)])];
        for v in [Version::Of13, Version::Of14] {
            assert_eq!(read13(v, &encode_flow_stats(v, false, &f)), f, "{v:?}");
        }
    }
}
