//! A bounds-checked big-endian reader and a few writer helpers. Every read
//! past the end returns the error the caller names, so decoders never
//! index out of range.

use crate::error::ErrorKind;

#[derive(Clone, Copy)]
pub struct Rd<'a> {
    b: &'a [u8],
    /// The error a short read turns into.
    err: ErrorKind,
}

impl<'a> Rd<'a> {
    pub fn new(b: &'a [u8], err: ErrorKind) -> Rd<'a> {
        Rd { b, err }
    }
    pub fn len(&self) -> usize {
        self.b.len()
    }
    pub fn is_empty(&self) -> bool {
        self.b.is_empty()
    }
    pub fn rest(&self) -> &'a [u8] {
        self.b
    }
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], ErrorKind> {
        if self.b.len() < n {
            return Err(self.err);
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Ok(h)
    }
    pub fn skip(&mut self, n: usize) -> Result<(), ErrorKind> {
        self.bytes(n).map(|_| ())
    }
    pub fn u8(&mut self) -> Result<u8, ErrorKind> {
        Ok(self.bytes(1)?[0])
    }
    pub fn u16(&mut self) -> Result<u16, ErrorKind> {
        let b = self.bytes(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }
    pub fn u32(&mut self) -> Result<u32, ErrorKind> {
        let b = self.bytes(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    pub fn u64(&mut self) -> Result<u64, ErrorKind> {
        Ok(((self.u32()? as u64) << 32) | self.u32()? as u64)
    }
    /// A big-endian unsigned integer of `n` (0-16) bytes.
    pub fn uint(&mut self, n: usize) -> Result<u128, ErrorKind> {
        let b = self.bytes(n)?;
        Ok(be_uint(b))
    }
    /// Splits off a sub-reader of `n` bytes.
    pub fn sub(&mut self, n: usize, err: ErrorKind) -> Result<Rd<'a>, ErrorKind> {
        Ok(Rd { b: self.bytes(n)?, err })
    }
}

/// A big-endian unsigned integer from up to 16 bytes (longer inputs keep
/// their last 16 bytes).
pub fn be_uint(b: &[u8]) -> u128 {
    b.iter().fold(0u128, |a, &x| (a << 8) | x as u128)
}

pub trait Wr {
    fn u8(&mut self, v: u8);
    fn u16(&mut self, v: u16);
    fn u32(&mut self, v: u32);
    fn u64(&mut self, v: u64);
    fn zeros(&mut self, n: usize);
    /// The low `n` bytes of `v`, big-endian.
    fn uint(&mut self, v: u128, n: usize);
    /// Pads with zeros to a multiple of 8 bytes.
    fn pad8(&mut self);
    /// Writes a 16-bit length at `at` equal to the bytes since `at - off`.
    fn patch_len(&mut self, at: usize, start: usize);
    /// Writes a fixed-size, NUL-padded string.
    fn str_fixed(&mut self, s: &str, n: usize);
}

impl Wr for Vec<u8> {
    fn u8(&mut self, v: u8) {
        self.push(v)
    }
    fn u16(&mut self, v: u16) {
        self.extend_from_slice(&v.to_be_bytes())
    }
    fn u32(&mut self, v: u32) {
        self.extend_from_slice(&v.to_be_bytes())
    }
    fn u64(&mut self, v: u64) {
        self.extend_from_slice(&v.to_be_bytes())
    }
    fn zeros(&mut self, n: usize) {
        self.resize(self.len() + n, 0)
    }
    fn uint(&mut self, v: u128, n: usize) {
        let b = v.to_be_bytes();
        self.extend_from_slice(&b[16 - n..])
    }
    fn pad8(&mut self) {
        let n = self.len().div_ceil(8) * 8 - self.len();
        self.zeros(n)
    }
    fn patch_len(&mut self, at: usize, start: usize) {
        let len = (self.len() - start) as u16;
        self[at..at + 2].copy_from_slice(&len.to_be_bytes());
    }
    fn str_fixed(&mut self, s: &str, n: usize) {
        let b = s.as_bytes();
        let k = b.len().min(n - 1);
        self.extend_from_slice(&b[..k]);
        self.zeros(n - k);
    }
}

/// Reads a NUL-padded fixed-size string.
pub fn str_fixed(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}
