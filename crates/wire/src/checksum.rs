//! Internet checksum (RFC 1071), incremental updates (RFC 1624), CRC32c.
//!
//! All 16-bit quantities are host-order values of big-endian wire words:
//! `checksum(&[0x45, 0x00])` treats the bytes as the word `0x4500`, and the
//! result is meant to be written back with `to_be_bytes`.
//!
//! * [`checksum`] is the final, complemented value: write it into a header
//!   whose checksum field was zero, and [`checksum`] of the whole header is
//!   then 0.
//! * [`update16`], [`update32`] and [`update128`] patch an existing
//!   checksum when a 16-, 32- or 128-bit field (at an even offset) changes,
//!   without touching the rest of the data (RFC 1624, eqn. 3).
//! * [`l4_checksum_v4`] / [`l4_checksum_v6`] compute a TCP/UDP/ICMPv6
//!   checksum including the pseudo-header.
//! * [`crc32c`] is SCTP's checksum (table-driven, reflected Castagnoli).

/// One's-complement sum of `data` as big-endian 16-bit words (an odd final
/// byte is padded with a zero on the right), added to `acc`, returned
/// without the final fold or complement. The result is congruent to the
/// true sum modulo 0xffff, which is all [`fold`] needs.
#[inline]
pub fn sum(data: &[u8], acc: u32) -> u32 {
    fold64(sum64(data, acc as u64))
}

/// Folds a 32-bit one's-complement sum to 16 bits and complements it: the
/// value to store in a checksum field.
#[inline]
pub fn fold(mut s: u32) -> u16 {
    s = (s & 0xffff) + (s >> 16);
    s = (s & 0xffff) + (s >> 16);
    !(s as u16)
}

/// The internet checksum of `data`.
#[inline]
pub fn checksum(data: &[u8]) -> u16 {
    fold(sum(data, 0))
}

/// Sums big-endian 32-bit words into a 64-bit accumulator (2^16 ≡ 1 mod
/// 0xffff, so this is the 16-bit one's-complement sum in disguise).
#[inline]
fn sum64(data: &[u8], mut acc: u64) -> u64 {
    let mut words = data.chunks_exact(4);
    for w in &mut words {
        acc += u32::from_be_bytes([w[0], w[1], w[2], w[3]]) as u64;
    }
    let rest = words.remainder();
    let mut pairs = rest.chunks_exact(2);
    for p in &mut pairs {
        acc += u16::from_be_bytes([p[0], p[1]]) as u64;
    }
    if let [b] = pairs.remainder() {
        acc += (*b as u64) << 8;
    }
    acc
}

/// Folds a 64-bit accumulator to 32 bits with end-around carries
/// (congruence modulo 2^32 - 1, hence modulo 0xffff, is kept).
#[inline]
fn fold64(mut s: u64) -> u32 {
    s = (s & 0xffff_ffff) + (s >> 32);
    s = (s & 0xffff_ffff) + (s >> 32);
    s as u32
}

/// Patches checksum `c` given the one's-complement sums of the old and new
/// field words (each a sum of 16-bit words).
#[inline]
fn update_sums(c: u16, old_words: u64, new_words: u64, n_words: u64) -> u16 {
    // RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m'), where ~m summed over
    // n words is n * 0xffff - sum(m).
    let s = (!c) as u64 + (n_words * 0xffff - old_words) + new_words;
    fold(fold64(s))
}

/// RFC 1624 eqn. 3: checksum `c` after a 16-bit word changes `old` -> `new`.
#[inline]
pub fn update16(c: u16, old: u16, new: u16) -> u16 {
    update_sums(c, old as u64, new as u64, 1)
}

/// Checksum `c` after a 32-bit field (at an even offset) changes.
#[inline]
pub fn update32(c: u16, old: u32, new: u32) -> u16 {
    let w = |v: u32| (v >> 16) as u64 + (v & 0xffff) as u64;
    update_sums(c, w(old), w(new), 2)
}

/// Checksum `c` after a 128-bit field (an IPv6 address) changes.
#[inline]
pub fn update128(c: u16, old: u128, new: u128) -> u16 {
    let w = |v: u128| {
        let (hi, lo) = ((v >> 64) as u64, v as u64);
        let s32 = |x: u64| (x >> 32) + (x & 0xffff_ffff);
        let s = s32(hi) + s32(lo);
        // Sum of four 32-bit halves, reduced to a sum of 16-bit words.
        (s >> 48) + ((s >> 32) & 0xffff) + ((s >> 16) & 0xffff) + (s & 0xffff)
    };
    // The reduced sums are congruent mod 0xffff but may exceed 8 words'
    // worth; 8 * 0xffff still dominates them, so the subtraction is safe.
    update_sums(c, w(old), w(new), 8)
}

/// TCP/UDP/ICMP-over-IPv4 checksum: the IPv4 pseudo-header (source,
/// destination, protocol, `l4.len()`) plus `l4`, with `l4`'s checksum field
/// taken as it is (zero it first to compute, or leave it to verify: a
/// correct segment gives 0).
pub fn l4_checksum_v4(src: u32, dst: u32, proto: u8, l4: &[u8]) -> u16 {
    let mut s = (src >> 16) as u64 + (src & 0xffff) as u64 + (dst >> 16) as u64 + (dst & 0xffff) as u64;
    s += proto as u64 + l4.len() as u64;
    fold(fold64(sum64(l4, s)))
}

/// TCP/UDP/ICMPv6 checksum over IPv6 (pseudo-header with 32-bit length).
pub fn l4_checksum_v6(src: u128, dst: u128, proto: u8, l4: &[u8]) -> u16 {
    let mut s = sum64(&src.to_be_bytes(), 0);
    s = sum64(&dst.to_be_bytes(), s);
    s += proto as u64 + l4.len() as u64;
    fold(fold64(sum64(l4, s)))
}

/// What a sender that leaves its TCP/UDP checksum to offload (Linux's
/// CHECKSUM_PARTIAL) puts in the checksum field over IPv4: the folded
/// pseudo-header sum (source, destination, protocol, L4 length), not
/// complemented. A frame carrying exactly this value has a checksum still
/// to be completed.
pub fn partial_v4(src: u32, dst: u32, proto: u8, l4_len: usize) -> u16 {
    let s = (src >> 16) as u64 + (src & 0xffff) as u64 + (dst >> 16) as u64 + (dst & 0xffff) as u64;
    !fold(fold64(s + proto as u64 + l4_len as u64))
}

/// [`partial_v4`] over IPv6.
pub fn partial_v6(src: u128, dst: u128, proto: u8, l4_len: usize) -> u16 {
    let s = sum64(&dst.to_be_bytes(), sum64(&src.to_be_bytes(), 0));
    !fold(fold64(s + proto as u64 + l4_len as u64))
}

/// The reflected CRC32c (Castagnoli) polynomial.
const CRC32C_POLY: u32 = 0x82f6_3b78;

const CRC32C_TABLE: [u32; 256] = {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { (c >> 1) ^ CRC32C_POLY } else { c >> 1 };
            k += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
};

/// CRC32c (Castagnoli), as SCTP uses it: initial value and final XOR all
/// ones. SCTP stores the result in little-endian byte order
/// (`to_le_bytes`), computed with the checksum field zeroed.
pub fn crc32c(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc = CRC32C_TABLE[((crc ^ b as u32) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic xorshift64* so the randomized tests need no crates.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        fn bytes(&mut self, n: usize) -> Vec<u8> {
            (0..n).map(|_| self.next() as u8).collect()
        }
    }

    /// RFC 1071 done the obvious way, as the reference.
    fn reference(data: &[u8]) -> u16 {
        let mut s: u64 = 0;
        for (i, &b) in data.iter().enumerate() {
            s += if i % 2 == 0 { (b as u64) << 8 } else { b as u64 };
        }
        while s >> 16 != 0 {
            s = (s & 0xffff) + (s >> 16);
        }
        !(s as u16)
    }

    #[test]
    fn full_matches_reference() {
        let mut r = Rng(0x1234_5678);
        for n in 0..300 {
            let d = r.bytes(n);
            assert_eq!(checksum(&d), reference(&d), "len {n}");
        }
        // Large all-ones input: no overflow in the accumulator.
        let d = vec![0xffu8; 200_001];
        assert_eq!(checksum(&d), reference(&d));
        assert_eq!(checksum(&[]), 0xffff);
        // RFC 1071 section 3 example: words 0001 f203 f4f5 f6f7 sum to ddf2.
        assert_eq!(checksum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]), !0xddf2);
    }

    #[test]
    fn header_with_checksum_verifies_to_zero() {
        let mut h = [0x45u8, 0, 0, 28, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2];
        let c = checksum(&h);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        assert_eq!(checksum(&h), 0);
    }

    #[test]
    fn incremental_equals_full_randomized() {
        let mut r = Rng(0xdead_beef_cafe);
        for round in 0..20_000 {
            let words = 10 + (r.next() % 40) as usize;
            let mut d = r.bytes(words * 2);
            // The checksum field lives at word 0; it is part of the data,
            // as in a real header.
            d[0] = 0;
            d[1] = 0;
            let c = checksum(&d);
            d[0..2].copy_from_slice(&c.to_be_bytes());
            let kind = round % 3;
            let width = [2usize, 4, 16][kind];
            let pos = 2 + 2 * (r.next() as usize % ((d.len() - 2 - width) / 2 + 1));
            let newb = if round % 97 == 0 { vec![0xff; width] } else { r.bytes(width) };
            let oldb = d[pos..pos + width].to_vec();
            d[pos..pos + width].copy_from_slice(&newb);
            let upd = match kind {
                0 => update16(c, u16::from_be_bytes([oldb[0], oldb[1]]), u16::from_be_bytes([newb[0], newb[1]])),
                1 => update32(
                    c,
                    u32::from_be_bytes(oldb[..4].try_into().unwrap()),
                    u32::from_be_bytes(newb[..4].try_into().unwrap()),
                ),
                _ => update128(
                    c,
                    u128::from_be_bytes(oldb[..].try_into().unwrap()),
                    u128::from_be_bytes(newb[..].try_into().unwrap()),
                ),
            };
            // Recompute over the new data with the checksum field zeroed.
            let mut z = d.clone();
            z[0] = 0;
            z[1] = 0;
            assert_eq!(upd, checksum(&z), "round {round} kind {kind}");
            // And the patched header verifies.
            d[0..2].copy_from_slice(&upd.to_be_bytes());
            assert_eq!(checksum(&d), 0);
        }
    }

    #[test]
    fn incremental_edge_values() {
        for (old, new) in [(0u16, 0xffffu16), (0xffff, 0), (0x1234, 0x1234), (0, 0)] {
            let mut d = vec![0x12, 0x34, 0, 0, (old >> 8) as u8, old as u8];
            let c = checksum(&d);
            d[4..6].copy_from_slice(&new.to_be_bytes());
            assert_eq!(update16(c, old, new), checksum(&d), "{old:#x} -> {new:#x}");
        }
        let d = [0xffu8; 16];
        let c = checksum(&[0x12, 0x34, 0xff, 0xff, 0xff, 0xff]);
        assert_eq!(update32(c, u32::MAX, 0), checksum(&[0x12, 0x34, 0, 0, 0, 0]));
        let mut w = vec![0x12u8, 0x34];
        w.extend_from_slice(&d);
        let c = checksum(&w);
        w[2..].fill(0);
        w[17] = 1;
        assert_eq!(update128(c, u128::MAX, 1), checksum(&w));
    }

    #[test]
    fn pseudo_header_checksums() {
        let mut r = Rng(99);
        for n in [8usize, 9, 20, 33, 1480] {
            let mut l4 = r.bytes(n);
            l4[6] = 0;
            l4[7] = 0;
            let (s4, d4) = (r.next() as u32, r.next() as u32);
            let mut ph = Vec::new();
            ph.extend_from_slice(&s4.to_be_bytes());
            ph.extend_from_slice(&d4.to_be_bytes());
            ph.extend_from_slice(&[0, 17]);
            ph.extend_from_slice(&(n as u16).to_be_bytes());
            ph.extend_from_slice(&l4);
            let c = l4_checksum_v4(s4, d4, 17, &l4);
            assert_eq!(c, reference(&ph));
            l4[6..8].copy_from_slice(&c.to_be_bytes());
            assert_eq!(l4_checksum_v4(s4, d4, 17, &l4), 0);

            let (s6, d6) = ((r.next() as u128) << 64 | r.next() as u128, (r.next() as u128) << 64 | 7);
            l4[6] = 0;
            l4[7] = 0;
            let mut ph = Vec::new();
            ph.extend_from_slice(&s6.to_be_bytes());
            ph.extend_from_slice(&d6.to_be_bytes());
            ph.extend_from_slice(&(n as u32).to_be_bytes());
            ph.extend_from_slice(&[0, 0, 0, 58]);
            ph.extend_from_slice(&l4);
            assert_eq!(l4_checksum_v6(s6, d6, 58, &l4), reference(&ph));
        }
    }

    #[test]
    fn crc32c_vectors() {
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(crc32c(b""), 0);
        // RFC 3720 B.4: 32 bytes of zeros, and of 0xff.
        assert_eq!(crc32c(&[0u8; 32]), 0x8a91_36aa);
        assert_eq!(crc32c(&[0xffu8; 32]), 0x62a8_ab43);
        // Against the bitwise definition.
        let mut r = Rng(5);
        let d = r.bytes(1000);
        let mut crc = !0u32;
        for &b in &d {
            crc ^= b as u32;
            for _ in 0..8 {
                crc = if crc & 1 != 0 { (crc >> 1) ^ CRC32C_POLY } else { crc >> 1 };
            }
        }
        assert_eq!(crc32c(&d), !crc);
    }
}
