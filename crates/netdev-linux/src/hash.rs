//! Software receive hash.
//!
//! A symmetric hash of a raw frame's flow: for IPv4
//! and IPv6, the addresses, the protocol and (TCP, UDP, SCTP) the ports,
//! with source and destination ordered so both directions of a connection
//! hash alike; for other frames, the two MAC addresses (ordered) and the
//! EtherType. VLAN tags are skipped. Getting the NIC's RSS hash through XDP
//! metadata needs a device-bound program, which aya 0.14 cannot load; this
//! costs a few nanoseconds per packet instead.

#[inline]
fn mix(mut h: u32, v: u32) -> u32 {
    // murmur3 block mix.
    let mut k = v.wrapping_mul(0xcc9e_2d51);
    k = k.rotate_left(15).wrapping_mul(0x1b87_3593);
    h ^= k;
    h.rotate_left(13).wrapping_mul(5).wrapping_add(0xe654_6b64)
}

#[inline]
fn finish(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

fn words(b: &[u8]) -> impl Iterator<Item = u32> + '_ {
    b.chunks(4).map(|c| {
        let mut w = [0u8; 4];
        w[..c.len()].copy_from_slice(c);
        u32::from_be_bytes(w)
    })
}

fn mix_pair(mut h: u32, a: &[u8], b: &[u8]) -> u32 {
    let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
    for w in words(lo).chain(words(hi)) {
        h = mix(h, w);
    }
    h
}

/// Symmetric flow hash of an Ethernet frame.
pub fn flow_hash(f: &[u8]) -> u32 {
    if f.len() < 14 {
        return finish(mix(0, f.len() as u32));
    }
    let mut off = 12;
    let mut ethertype = u16::from_be_bytes([f[12], f[13]]);
    while (ethertype == 0x8100 || ethertype == 0x88a8) && f.len() >= off + 6 {
        off += 4;
        ethertype = u16::from_be_bytes([f[off], f[off + 1]]);
    }
    let l3 = off + 2;
    let (proto, l4, h) = match ethertype {
        0x0800 if f.len() >= l3 + 20 => {
            let ihl = (f[l3] & 0x0f) as usize * 4;
            let frag = u16::from_be_bytes([f[l3 + 6], f[l3 + 7]]) & 0x3fff != 0;
            let proto = f[l3 + 9];
            let h = mix_pair(mix(0, 4), &f[l3 + 12..l3 + 16], &f[l3 + 16..l3 + 20]);
            (proto, if frag || ihl < 20 { None } else { Some(l3 + ihl) }, h)
        }
        0x86dd if f.len() >= l3 + 40 => {
            let proto = f[l3 + 6];
            let h = mix_pair(mix(0, 6), &f[l3 + 8..l3 + 24], &f[l3 + 24..l3 + 40]);
            (proto, Some(l3 + 40), h)
        }
        _ => {
            let h = mix_pair(mix(0, ethertype as u32), &f[0..6], &f[6..12]);
            return finish(h);
        }
    };
    let mut h = mix(h, proto as u32);
    if let (6 | 17 | 132, Some(l4)) = (proto, l4) {
        if f.len() >= l4 + 4 {
            h = mix_pair(h, &f[l4..l4 + 2], &f[l4 + 2..l4 + 4]);
        }
    }
    finish(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn udp4(src: [u8; 4], dst: [u8; 4], sp: u16, dp: u16) -> Vec<u8> {
        let mut f = vec![0u8; 42];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[23] = 17;
        f[26..30].copy_from_slice(&src);
        f[30..34].copy_from_slice(&dst);
        f[34..36].copy_from_slice(&sp.to_be_bytes());
        f[36..38].copy_from_slice(&dp.to_be_bytes());
        f
    }

    #[test]
    fn symmetric_and_port_sensitive() {
        let a = udp4([10, 0, 0, 1], [10, 0, 0, 2], 1000, 53);
        let b = udp4([10, 0, 0, 2], [10, 0, 0, 1], 53, 1000);
        let c = udp4([10, 0, 0, 1], [10, 0, 0, 2], 1001, 53);
        assert_eq!(flow_hash(&a), flow_hash(&b));
        assert_ne!(flow_hash(&a), flow_hash(&c));
        assert_ne!(flow_hash(&[]), flow_hash(&[1, 2, 3]));
        let mut arp = vec![0u8; 42];
        arp[0..6].copy_from_slice(&[0xff; 6]);
        arp[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        let _ = flow_hash(&arp);
    }
}
