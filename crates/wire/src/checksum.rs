//! Internet checksum (RFC 1071), incremental updates (RFC 1624), CRC32c.

/// One's-complement sum of `data` as 16-bit big-endian words, not folded.
pub fn sum(data: &[u8], mut acc: u32) -> u32 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        acc = acc.wrapping_add(u16::from_be_bytes([c[0], c[1]]) as u32);
    }
    if let [b] = chunks.remainder() {
        acc = acc.wrapping_add((*b as u32) << 8);
    }
    acc
}

/// Folds a 32-bit sum to 16 bits and complements it.
pub fn fold(mut s: u32) -> u16 {
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// The internet checksum of `data`.
pub fn checksum(data: &[u8]) -> u16 {
    fold(sum(data, 0))
}

/// RFC 1624 eqn. 3: checksum `c` after a 16-bit word changes `old` -> `new`.
#[inline]
pub fn update16(c: u16, old: u16, new: u16) -> u16 {
    let mut s = (!c as u32) + (!old as u32) + new as u32;
    s = (s & 0xffff) + (s >> 16);
    s = (s & 0xffff) + (s >> 16);
    !(s as u16)
}

#[inline]
pub fn update32(c: u16, old: u32, new: u32) -> u16 {
    update16(update16(c, (old >> 16) as u16, (new >> 16) as u16), old as u16, new as u16)
}

pub fn update128(mut c: u16, old: u128, new: u128) -> u16 {
    for i in 0..8 {
        c = update16(c, (old >> (i * 16)) as u16, (new >> (i * 16)) as u16);
    }
    c
}

/// TCP/UDP checksum over IPv4 (pseudo-header + `l4` with its checksum
/// field included as it is).
pub fn l4_checksum_v4(src: u32, dst: u32, proto: u8, l4: &[u8]) -> u16 {
    let mut s = sum(&src.to_be_bytes(), 0);
    s = sum(&dst.to_be_bytes(), s);
    s = s.wrapping_add(proto as u32).wrapping_add(l4.len() as u32);
    fold(sum(l4, s))
}

/// TCP/UDP/ICMPv6 checksum over IPv6.
pub fn l4_checksum_v6(src: u128, dst: u128, proto: u8, l4: &[u8]) -> u16 {
    let mut s = sum(&src.to_be_bytes(), 0);
    s = sum(&dst.to_be_bytes(), s);
    s = s.wrapping_add(proto as u32).wrapping_add(l4.len() as u32);
    fold(sum(l4, s))
}

/// CRC32c (Castagnoli), as SCTP uses it.
pub fn crc32c(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ 0x82f6_3b78 } else { crc >> 1 };
        }
    }
    !crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn incremental_equals_full() {
        let mut data: Vec<u8> = (0..40u8).map(|i| i.wrapping_mul(37)).collect();
        let c = checksum(&data);
        let old = u32::from_be_bytes([data[12], data[13], data[14], data[15]]);
        let new = 0x0a0b_0c0du32;
        data[12..16].copy_from_slice(&new.to_be_bytes());
        assert_eq!(update32(c, old, new), checksum(&data));
        // A header with its checksum field filled in sums to zero.
        let mut h = [0x45u8, 0, 0, 28, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2];
        let c = checksum(&h);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        assert_eq!(checksum(&h), 0);
    }

    #[test]
    fn crc32c_vector() {
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
    }
}
