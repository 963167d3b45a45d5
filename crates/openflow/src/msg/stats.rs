//! Multipart (stats) requests and the replies that are not about one
//! family: the request dispatcher ([`StatsReq`]), reply splitting
//! ([`encode_multipart`]), switch description, port and table stats,
//! table features.

use super::*;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StatsReq {
    Desc,
    /// Flow or aggregate stats; `table` 0xff means all.
    Flow {
        aggregate: bool,
        nx: bool,
        table: u8,
        out_port: u32,
        out_group: u32,
        cookie: u64,
        cookie_mask: u64,
        matched: Match,
    },
    Table,
    Port {
        port: u32,
    },
    PortDesc,
    Queue,
    Group {
        group: u32,
    },
    GroupDesc,
    GroupFeatures,
    Meter {
        meter: u32,
    },
    MeterConfig {
        meter: u32,
    },
    MeterFeatures,
    TableFeatures,
    TableDesc,
}

pub(crate) fn decode_stats(ctx: &Ctx, rd: &mut Rd) -> Result<StatsReq, ErrorKind> {
    let v = ctx.version;
    let st = rd.u16()?;
    let _flags = rd.u16()?;
    if v != Version::Of10 {
        rd.skip(4)?;
    }
    let port_any = |p: u32| if p == 0xffff_ffff { Ok(OFPP_ANY) } else { port11(p) };
    Ok(match st {
        mp::DESC => StatsReq::Desc,
        mp::FLOW => decode_flow_stats_req(v, rd, false)?,
        mp::AGGREGATE => decode_flow_stats_req(v, rd, true)?,
        mp::TABLE => StatsReq::Table,
        mp::PORT_STATS => {
            let port = if v == Version::Of10 { port10(rd.u16()?) } else { port_any(rd.u32()?)? };
            StatsReq::Port { port }
        }
        mp::QUEUE => StatsReq::Queue,
        mp::PORT_DESC => StatsReq::PortDesc,
        mp::GROUP if v != Version::Of10 => StatsReq::Group { group: rd.u32()? },
        mp::GROUP_DESC if v != Version::Of10 => StatsReq::GroupDesc,
        mp::GROUP_FEATURES if v != Version::Of10 => StatsReq::GroupFeatures,
        mp::METER if v != Version::Of10 => StatsReq::Meter { meter: rd.u32()? },
        mp::METER_CONFIG if v != Version::Of10 => StatsReq::MeterConfig { meter: rd.u32()? },
        mp::METER_FEATURES if v != Version::Of10 => StatsReq::MeterFeatures,
        mp::TABLE_FEATURES if v != Version::Of10 => StatsReq::TableFeatures,
        mp::TABLE_DESC if v >= Version::Of14 => StatsReq::TableDesc,
        mp::EXPERIMENTER => {
            let vendor = rd.u32()?;
            if vendor != NX_VENDOR {
                return Err(ErrorKind::BadExperimenter);
            }
            let sub = rd.u32()?;
            if v == Version::Of10 {
                rd.skip(4)?;
            }
            if sub > 1 {
                return Err(ErrorKind::BadExpType);
            }
            // NXST_FLOW / NXST_AGGREGATE request.
            let out_port = port10(rd.u16()?);
            let match_len = rd.u16()? as usize;
            let table = rd.u8()?;
            rd.skip(3)?;
            let mb = rd.bytes(match_len).map_err(|_| ErrorKind::BadMatchLen)?;
            let d = oxm::decode(mb)?;
            let (cookie, cookie_mask) = d.cookie.unwrap_or((0, 0));
            StatsReq::Flow {
                aggregate: sub == 1,
                nx: true,
                table,
                out_port,
                out_group: OFPG_ANY,
                cookie,
                cookie_mask,
                matched: d.matched,
            }
        }
        _ => return Err(ErrorKind::BadMultipart),
    })
}

/// A multipart (stats) reply carrying `items`, split into messages of at
/// most 64 kB with the MORE flag on all but the last. `nx` is the Nicira
/// stats subtype for NXST replies.
pub fn encode_multipart(v: Version, xid: u32, st: u16, nx: Option<u32>, items: &[Vec<u8>]) -> Vec<Vec<u8>> {
    const LIMIT: usize = 65000;
    let mut msgs = Vec::new();
    let head = |more: bool| {
        let mut out = begin(v, t::MULTIPART_REPLY, xid);
        out.u16(st);
        out.u16(more as u16);
        if v != Version::Of10 {
            out.zeros(4);
        }
        if let Some(sub) = nx {
            out.u32(NX_VENDOR);
            out.u32(sub);
            if v == Version::Of10 {
                out.zeros(4);
            }
        }
        out
    };
    let mut cur = head(false);
    let base = cur.len();
    for it in items {
        if cur.len() > base && cur.len() + it.len() > LIMIT {
            cur[10..12].copy_from_slice(&1u16.to_be_bytes());
            msgs.push(end(std::mem::replace(&mut cur, head(false))));
        }
        cur.extend_from_slice(it);
    }
    msgs.push(end(cur));
    msgs
}

pub fn encode_desc(mfr: &str, hw: &str, sw: &str, serial: &str, dp: &str) -> Vec<u8> {
    let mut out = Vec::new();
    out.str_fixed(mfr, 256);
    out.str_fixed(hw, 256);
    out.str_fixed(sw, 256);
    out.str_fixed(serial, 32);
    out.str_fixed(dp, 256);
    out
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PortStats {
    pub port_no: u32,
    pub rx_packets: u64,
    pub tx_packets: u64,
    pub rx_bytes: u64,
    pub tx_bytes: u64,
    pub rx_dropped: u64,
    pub tx_dropped: u64,
    pub rx_errors: u64,
    pub tx_errors: u64,
    pub duration_ms: u64,
}

pub fn encode_port_stats(v: Version, s: &PortStats) -> Vec<u8> {
    let mut out = Vec::with_capacity(112);
    let (sec, nsec) = ((s.duration_ms / 1000) as u32, ((s.duration_ms % 1000) * 1_000_000) as u32);
    let counters = |out: &mut Vec<u8>, ext: bool| {
        for c in
            [s.rx_packets, s.tx_packets, s.rx_bytes, s.tx_bytes, s.rx_dropped, s.tx_dropped, s.rx_errors, s.tx_errors]
        {
            out.u64(c);
        }
        if ext {
            for _ in 0..4 {
                out.u64(0); // frame, overrun, crc, collisions
            }
        }
    };
    match v {
        Version::Of10 => {
            out.u16(s.port_no as u16);
            out.zeros(6);
            counters(&mut out, true);
        }
        Version::Of13 => {
            out.u32(port_to_of11(s.port_no));
            out.zeros(4);
            counters(&mut out, true);
            out.u32(sec);
            out.u32(nsec);
        }
        Version::Of14 | Version::Of15 => {
            out.u16(0);
            out.zeros(2);
            out.u32(port_to_of11(s.port_no));
            out.u32(sec);
            out.u32(nsec);
            counters(&mut out, false);
            // Ethernet property: frame_err, over_err, crc_err, collisions.
            out.u16(0);
            out.u16(40);
            out.zeros(4);
            for _ in 0..4 {
                out.u64(0);
            }
            out.patch_len(0, 0);
        }
    }
    out
}

/// One table's statistics.
pub fn encode_table_stats(v: Version, table: u8, active: u32, lookups: u64, matched: u64) -> Vec<u8> {
    let mut out = Vec::new();
    out.u8(table);
    out.zeros(3);
    if v == Version::Of10 {
        out.str_fixed(&format!("table{table}"), 32);
        out.u32(0x3fffff); // wildcards: all
        out.u32(1_000_000);
    }
    out.u32(active);
    out.u64(lookups);
    out.u64(matched);
    out
}

/// One table's features (OpenFlow 1.3+): name, metadata bits, max
/// entries, and the next-tables property (every later table).
pub fn encode_table_features(table: u8, n_tables: u8) -> Vec<u8> {
    let mut out = Vec::new();
    out.u16(0);
    out.u8(table);
    out.zeros(5);
    out.str_fixed(&format!("table{table}"), 32);
    out.u64(u64::MAX);
    out.u64(u64::MAX);
    out.u32(0);
    out.u32(1_000_000);
    let prop = |out: &mut Vec<u8>, ty: u16, body: &dyn Fn(&mut Vec<u8>)| {
        let s = out.len();
        out.u16(ty);
        out.u16(0);
        body(out);
        let len = (out.len() - s) as u16;
        out[s + 2..s + 4].copy_from_slice(&len.to_be_bytes());
        out.pad8();
    };
    let headers = |out: &mut Vec<u8>, types: &[u16]| {
        for t in types {
            out.u16(*t);
            out.u16(4);
        }
    };
    // OXM basic fields we match and set (see `oxm`).
    let fields: &[(u8, u8)] = &[
        (0, 4),
        (2, 8),
        (3, 6),
        (4, 6),
        (5, 2),
        (6, 2),
        (7, 1),
        (8, 1),
        (9, 1),
        (10, 1),
        (11, 4),
        (12, 4),
        (13, 2),
        (14, 2),
        (15, 2),
        (16, 2),
        (17, 2),
        (18, 2),
        (19, 1),
        (20, 1),
        (21, 2),
        (22, 4),
        (23, 4),
        (24, 6),
        (25, 6),
        (26, 16),
        (27, 16),
        (28, 4),
        (29, 1),
        (30, 1),
        (31, 16),
        (32, 6),
        (33, 6),
        (38, 8),
    ];
    let oxms = |out: &mut Vec<u8>| {
        for (f, len) in fields {
            out.u32((0x8000u32 << 16) | ((*f as u32) << 9) | *len as u32);
        }
    };
    let actions: &[u16] = &[0, 17, 18, 21, 22, 23, 24, 25];
    prop(&mut out, 0, &|o| headers(o, &[1, 2, 3, 4, 5, 6]));
    // OFPTFPT_NEXT_TABLES: the tables goto_table may name.
    prop(&mut out, 2, &|o| {
        for t in table.saturating_add(1)..n_tables {
            o.u8(t);
        }
    });
    prop(&mut out, 4, &|o| headers(o, actions));
    prop(&mut out, 6, &|o| headers(o, actions));
    prop(&mut out, 8, &oxms);
    prop(&mut out, 10, &oxms);
    prop(&mut out, 12, &oxms);
    prop(&mut out, 14, &oxms);
    out.patch_len(0, 0);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Replies too large for one message are split, every part but the
    /// last flagged OFPMPF_REPLY_MORE, no item cut in two, none lost.
    #[test]
    fn multipart_reply_splits_with_more_flag() {
        let items: Vec<Vec<u8>> = (0..300u16).map(|i| vec![(i % 251) as u8; 1000]).collect();
        for v in Version::ALL {
            let msgs = encode_multipart(v, 8, mp::FLOW, None, &items);
            assert!(msgs.len() >= 5, "{v:?}: {} messages", msgs.len());
            let head = if v == Version::Of10 { 12 } else { 16 };
            let mut body = Vec::new();
            for (i, m) in msgs.iter().enumerate() {
                let f = frame(m);
                assert_eq!(f.header.length as usize, m.len());
                assert_eq!(f.header.msg_type, ty(v, t::MULTIPART_REPLY));
                assert_eq!(u16::from_be_bytes([m[8], m[9]]), mp::FLOW);
                let more = u16::from_be_bytes([m[10], m[11]]) & 1 == 1;
                assert_eq!(more, i + 1 < msgs.len(), "{v:?} part {i}");
                assert_eq!((m.len() - head) % 1000, 0, "an item was cut");
                body.extend_from_slice(&m[head..]);
            }
            assert_eq!(body, items.concat(), "{v:?}");
        }
    }

    #[test]
    fn stats_requests_decode_per_version() {
        // 1.3 port stats request for port 3, and for OFPP_ANY.
        for (wire, want) in [(3u32, 3u32), (0xffff_ffff, OFPP_ANY)] {
            let mut b = begin(Version::Of13, t::MULTIPART_REQUEST, 1);
            b.u16(mp::PORT_STATS);
            b.u16(0);
            b.zeros(4);
            b.u32(wire);
            b.zeros(4);
            let got = decode(&Ctx::new(Version::Of13), &frame(&end(b))).unwrap();
            assert_eq!(got, Msg::Stats(StatsReq::Port { port: want }));
        }
        // An unknown multipart type gets BAD_MULTIPART (BAD_STAT in 1.0).
        let mut b = begin(Version::Of13, t::MULTIPART_REQUEST, 1);
        b.u16(0x7777);
        b.u16(0);
        b.zeros(4);
        assert_eq!(decode(&Ctx::new(Version::Of13), &frame(&end(b))), Err(ErrorKind::BadMultipart));
    }
}
