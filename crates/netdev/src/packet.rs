//! Packet buffers.
//!
//! A [`Packet`] is the bytes of one frame plus the metadata the datapath
//! keeps beside it (input port, receive hash). Its storage is either a heap
//! buffer with headroom, or (for AF_XDP) a frame of a UMEM, so forwarding
//! between ports that share a UMEM moves a descriptor, not bytes.
//!
//! Ownership: whoever holds a `Packet` owns its buffer. Handing it to
//! [`crate::Netdev::tx_batch`] gives it to the port; dropping it frees (or
//! recycles) the buffer.

/// Bytes kept free in front of heap packets so a VLAN push (or a later
/// tunnel header) does not move the payload.
pub const HEADROOM: usize = 64;

pub struct Packet {
    buf: Box<[u8]>,
    start: usize,
    len: usize,
    /// Datapath port number the packet arrived on.
    pub in_port: u32,
    /// Receive hash from the NIC/XDP metadata, if the port supplied one.
    pub rx_hash: Option<u32>,
}

impl Packet {
    /// A heap packet holding a copy of `data`.
    pub fn from_slice(data: &[u8]) -> Packet {
        let mut buf = vec![0u8; HEADROOM + data.len()].into_boxed_slice();
        buf[HEADROOM..].copy_from_slice(data);
        Packet { buf, start: HEADROOM, len: data.len(), in_port: 0, rx_hash: None }
    }

    #[inline]
    pub fn data(&self) -> &[u8] {
        &self.buf[self.start..self.start + self.len]
    }

    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.start..self.start + self.len]
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Inserts `n` zero bytes at `offset` (e.g. a VLAN tag at 12), moving
    /// the first `offset` bytes into the headroom.
    pub fn insert_bytes(&mut self, offset: usize, n: usize) {
        let offset = offset.min(self.len);
        if self.start < n {
            // Grow: reallocate with fresh headroom.
            let mut nb = vec![0u8; HEADROOM + n + self.len].into_boxed_slice();
            nb[HEADROOM + n..HEADROOM + n + self.len].copy_from_slice(self.data());
            self.buf = nb;
            self.start = HEADROOM + n;
        }
        let s = self.start;
        self.buf.copy_within(s..s + offset, s - n);
        self.buf[s - n + offset..s + offset].fill(0);
        self.start -= n;
        self.len += n;
    }

    /// Removes `n` bytes at `offset` (e.g. a VLAN tag at 12).
    pub fn remove_bytes(&mut self, offset: usize, n: usize) {
        if offset + n > self.len {
            return;
        }
        let s = self.start;
        self.buf.copy_within(s..s + offset, s + n);
        self.start += n;
        self.len -= n;
    }

    /// Shortens the packet to `len` bytes.
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }
}

impl Clone for Packet {
    /// A heap copy (used when one packet goes to several ports).
    fn clone(&self) -> Packet {
        let mut p = Packet::from_slice(self.data());
        p.in_port = self.in_port;
        p.rx_hash = self.rx_hash;
        p
    }
}

impl std::fmt::Debug for Packet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Packet(in_port={}, len={})", self.in_port, self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn insert_remove() {
        let mut p = Packet::from_slice(&[1, 2, 3, 4, 5, 6]);
        p.insert_bytes(2, 4);
        assert_eq!(p.data(), &[1, 2, 0, 0, 0, 0, 3, 4, 5, 6]);
        p.data_mut()[2] = 9;
        p.remove_bytes(2, 4);
        assert_eq!(p.data(), &[1, 2, 3, 4, 5, 6]);
        for _ in 0..40 {
            p.insert_bytes(0, 4);
        }
        assert_eq!(p.len(), 166);
        assert_eq!(&p.data()[160..], &[1, 2, 3, 4, 5, 6]);
    }
}
