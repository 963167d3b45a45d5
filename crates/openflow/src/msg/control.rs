//! Session control replies: features and switch config, roles (standard
//! and Nicira), bundle control.

use super::*;

pub(crate) fn nx_role(r: u32) -> Result<u32, ErrorKind> {
    // Nicira roles: 0 other(equal), 1 master, 2 slave.
    match r {
        0 => Ok(1),
        1 => Ok(2),
        2 => Ok(3),
        _ => Err(ErrorKind::BadRole),
    }
}

/// FEATURES_REPLY (1.0 includes the ports).
pub fn encode_features_reply(v: Version, xid: u32, dpid: u64, n_tables: u8, ports: &[PortDesc]) -> Vec<u8> {
    let mut out = begin(v, t::FEATURES_REPLY, xid);
    out.u64(dpid);
    out.u32(0); // n_buffers: no buffering
    out.u8(n_tables);
    if v == Version::Of10 {
        out.zeros(3);
        // capabilities: FLOW_STATS, TABLE_STATS, PORT_STATS, ARP_MATCH_IP
        out.u32(1 | 2 | 4 | 0x80);
        // actions: every 1.0 action but ENQUEUE... all of 0-11
        out.u32(0xfff);
        for p in ports {
            encode_port(v, p, &mut out);
        }
    } else {
        out.u8(0); // auxiliary_id
        out.zeros(2);
        // FLOW_STATS, TABLE_STATS, PORT_STATS, GROUP_STATS
        out.u32(1 | 2 | 4 | 8);
        out.u32(0);
    }
    end(out)
}

pub fn encode_get_config_reply(v: Version, xid: u32, flags: u16, miss_send_len: u16) -> Vec<u8> {
    let mut out = begin(v, t::GET_CONFIG_REPLY, xid);
    out.u16(flags);
    out.u16(miss_send_len);
    end(out)
}

/// ROLE_REPLY (1.2+) or the Nicira role reply (1.0).
pub fn encode_role_reply(v: Version, xid: u32, role: u32, generation_id: u64, nx: bool) -> Vec<u8> {
    if nx {
        let nxr: u32 = match role {
            2 => 1,
            3 => 2,
            _ => 0,
        };
        return encode_nx(v, xid, nxt::ROLE_REPLY, &nxr.to_be_bytes());
    }
    let mut out = begin(v, t::ROLE_REPLY, xid);
    out.u32(role);
    out.zeros(4);
    out.u64(generation_id);
    end(out)
}

pub(crate) fn decode_role_request(rd: &mut Rd) -> Result<Msg, ErrorKind> {
    let role = rd.u32()?;
    rd.skip(4)?;
    let generation_id = rd.u64()?;
    if role > 3 {
        return Err(ErrorKind::BadRole);
    }
    Ok(Msg::RoleRequest { role, generation_id, nx: false })
}

/// ROLE_REQUEST (1.2+; for controllers and tests).
pub fn encode_role_request(v: Version, xid: u32, role: u32, generation_id: u64) -> Vec<u8> {
    let mut out = begin(v, t::ROLE_REQUEST, xid);
    out.u32(role);
    out.zeros(4);
    out.u64(generation_id);
    end(out)
}

/// BUNDLE_CONTROL reply.
pub fn encode_bundle_reply(v: Version, xid: u32, bundle_id: u32, ctrl: u16, flags: u16) -> Vec<u8> {
    let mut out = begin(v, t::BUNDLE_CONTROL, xid);
    out.u32(bundle_id);
    out.u16(ctrl);
    out.u16(flags);
    end(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn role_request_round_trips_and_reply_matches() {
        for v in [Version::Of13, Version::Of14, Version::Of15] {
            for role in 0..=3 {
                let b = encode_role_request(v, 4, role, 77);
                assert_eq!(
                    decode(&Ctx::new(v), &frame(&b)).unwrap(),
                    Msg::RoleRequest { role, generation_id: 77, nx: false }
                );
                let r = encode_role_reply(v, 4, role, 77, false);
                assert_eq!(r[1], t::ROLE_REPLY);
                assert_eq!(r[8..], b[8..], "the reply carries the request's body");
            }
            let b = encode_role_request(v, 4, 4, 0);
            assert_eq!(decode(&Ctx::new(v), &frame(&b)), Err(ErrorKind::BadRole));
        }
    }

    #[test]
    fn nicira_role_numbers_map_both_ways() {
        // Nicira: 0 other, 1 master, 2 slave; standard: 1 equal, 2 master, 3 slave.
        for (nx, std) in [(0, 1), (1, 2), (2, 3)] {
            assert_eq!(nx_role(nx), Ok(std));
            let r = encode_role_reply(Version::Of10, 1, std, 0, true);
            assert_eq!(r[r.len() - 4..], (nx as u32).to_be_bytes());
        }
        assert_eq!(nx_role(3), Err(ErrorKind::BadRole));
    }

    #[test]
    fn bundle_control_reply_echoes_the_request() {
        let b = encode_bundle_reply(Version::Of14, 6, 0x1234, 1, 2);
        let m = frame(&b);
        assert_eq!(m.header.msg_type, t::BUNDLE_CONTROL);
        assert_eq!(b[8..], [0, 0, 0x12, 0x34, 0, 1, 0, 2]);
    }
}
