//! Meters: METER_MOD, meter stats, meter config and features.

use super::*;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Band {
    /// 1 drop, 2 dscp_remark.
    pub band_type: u16,
    pub rate: u32,
    pub burst_size: u32,
    pub prec_level: u8,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MeterMod {
    /// 0 add, 1 modify, 2 delete.
    pub cmd: u16,
    /// KBPS 1, PKTPS 2, BURST 4, STATS 8.
    pub flags: u16,
    pub meter_id: u32,
    pub bands: Vec<Band>,
}

pub(crate) fn decode_meter_mod(rd: &mut Rd) -> Result<MeterMod, ErrorKind> {
    let cmd = rd.u16()?;
    let flags = rd.u16()?;
    let meter_id = rd.u32()?;
    if cmd > 2 {
        return Err(ErrorKind::BadMeterCommand);
    }
    let mut bands = Vec::new();
    while !rd.is_empty() {
        let band_type = rd.u16()?;
        let len = rd.u16()? as usize;
        if len < 16 || len - 4 > rd.len() {
            return Err(ErrorKind::BadBand);
        }
        let mut b = rd.sub(len - 4, ErrorKind::BadBand)?;
        let rate = b.u32()?;
        let burst_size = b.u32()?;
        let prec_level = if band_type == 2 { b.u8()? } else { 0 };
        if band_type != 1 && band_type != 2 {
            return Err(ErrorKind::BadBand);
        }
        bands.push(Band { band_type, rate, burst_size, prec_level });
    }
    Ok(MeterMod { cmd, flags, meter_id, bands })
}

/// Meter stats entry.
pub fn encode_meter_stats(
    meter_id: u32,
    flows: u32,
    packets: u64,
    bytes: u64,
    duration_ms: u64,
    bands: &[(u64, u64)],
) -> Vec<u8> {
    let mut out = Vec::new();
    out.u32(meter_id);
    out.u16(0);
    out.zeros(6);
    out.u32(flows);
    out.u64(packets);
    out.u64(bytes);
    out.u32((duration_ms / 1000) as u32);
    out.u32(((duration_ms % 1000) * 1_000_000) as u32);
    for (p, b) in bands {
        out.u64(*p);
        out.u64(*b);
    }
    let len = out.len() as u16;
    out[4..6].copy_from_slice(&len.to_be_bytes());
    out
}

/// Meter config entry.
pub fn encode_meter_config(mm: &MeterMod) -> Vec<u8> {
    let mut out = Vec::new();
    out.u16(0);
    out.u16(mm.flags);
    out.u32(mm.meter_id);
    for b in &mm.bands {
        out.u16(b.band_type);
        out.u16(16);
        out.u32(b.rate);
        out.u32(b.burst_size);
        if b.band_type == 2 {
            out.u8(b.prec_level);
            out.zeros(3);
        } else {
            out.zeros(4);
        }
    }
    out.patch_len(0, 0);
    out
}

/// Meter features: max meters, band types (drop, dscp_remark), capabilities, max bands, max color.
pub fn encode_meter_features(max_meter: u32) -> Vec<u8> {
    let mut out = Vec::new();
    out.u32(max_meter);
    out.u32((1 << 1) | (1 << 2));
    out.u32(1 | 2 | 4 | 8);
    out.u8(8);
    out.u8(0);
    out.zeros(2);
    out
}

/// METER_MOD (for controllers and tests): the body is a meter config entry
/// with the command where the entry has its length, so a meter is
/// reported exactly as installed (flags, rates, burst sizes, precedence).
pub fn encode_meter_mod(v: Version, xid: u32, mm: &MeterMod) -> Vec<u8> {
    let mut body = encode_meter_config(mm);
    body[0..2].copy_from_slice(&mm.cmd.to_be_bytes());
    let mut out = begin(v, t::METER_MOD, xid);
    out.extend_from_slice(&body);
    end(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meter_mod_round_trips_and_config_echoes_it() {
        let mm = MeterMod {
            cmd: 0,
            flags: 1 | 4 | 8,
            meter_id: 5,
            bands: vec![
                Band { band_type: 1, rate: 1000, burst_size: 100, prec_level: 0 },
                Band { band_type: 2, rate: 500, burst_size: 50, prec_level: 1 },
            ],
        };
        for v in [Version::Of13, Version::Of14, Version::Of15] {
            let b = encode_meter_mod(v, 3, &mm);
            assert_eq!(b.len(), 8 + 8 + 2 * 16);
            assert_eq!(decode(&Ctx::new(v), &frame(&b)).unwrap(), Msg::MeterMod(mm.clone()));
            let cfg = encode_meter_config(&mm);
            assert_eq!(u16::from_be_bytes([cfg[0], cfg[1]]) as usize, cfg.len());
            assert_eq!(cfg[2..], b[10..], "config differs from the mod");
        }
    }

    #[test]
    fn unknown_band_is_refused() {
        let mm = MeterMod {
            cmd: 0,
            flags: 1,
            meter_id: 5,
            bands: vec![Band { band_type: 3, rate: 1, burst_size: 0, prec_level: 0 }],
        };
        let b = encode_meter_mod(Version::Of13, 3, &mm);
        assert_eq!(decode(&Ctx::new(Version::Of13), &frame(&b)), Err(ErrorKind::BadBand));
    }
}
