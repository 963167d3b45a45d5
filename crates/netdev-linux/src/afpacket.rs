//! AF_PACKET port: a raw socket bound to a device, for devices where XDP
//! is unavailable. It sees every frame the device receives (promiscuous),
//! not its own transmissions (`PACKET_IGNORE_OUTGOING`), and restores VLAN
//! tags the device stripped into metadata (`PACKET_AUXDATA`).

use crate::sys::{self, PacketMreq};
use netdev::{Netdev, Packet, PortInfo, PortStats};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

const MAX_FRAME: usize = 9022;

pub struct AfPacketPort {
    fd: OwnedFd,
    name: String,
    buf: Box<[u8]>,
    stats: PortStats,
}

impl AfPacketPort {
    pub fn open(ifname: &str) -> io::Result<AfPacketPort> {
        let ifindex = sys::if_nametoindex(ifname)?;
        let proto = sys::ETH_P_ALL.to_be();
        let fd = sys::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_NONBLOCK, proto as libc::c_int)?;
        let raw = fd.as_raw_fd();
        sys::setsockopt(raw, sys::SOL_PACKET, sys::PACKET_IGNORE_OUTGOING, &1 as &libc::c_int)?;
        sys::setsockopt(raw, sys::SOL_PACKET, sys::PACKET_AUXDATA, &1 as &libc::c_int)?;
        let mr = PacketMreq { ifindex: ifindex as i32, ty: sys::PACKET_MR_PROMISC, ..Default::default() };
        sys::setsockopt(raw, sys::SOL_PACKET, sys::PACKET_ADD_MEMBERSHIP, &mr)?;
        // SAFETY: an all-zero sockaddr_ll is valid; the fields that matter
        // are set below.
        let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sa.sll_family = libc::AF_PACKET as u16;
        sa.sll_protocol = proto;
        sa.sll_ifindex = ifindex as i32;
        sys::bind(raw, &sa)?;
        Ok(AfPacketPort {
            fd,
            name: ifname.to_string(),
            buf: vec![0u8; MAX_FRAME].into_boxed_slice(),
            stats: PortStats::default(),
        })
    }
}

impl Netdev for AfPacketPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn info(&self) -> PortInfo {
        PortInfo { kind: "system".into(), xdp_mode: String::new(), n_rxq: 1, detail: "af_packet".into() }
    }

    fn rx_batch(&mut self, _rxq: usize, out: &mut Vec<Packet>, max: usize) -> io::Result<usize> {
        let mut n = 0;
        while n < max {
            match sys::recv_packet_auxdata(self.fd.as_raw_fd(), &mut self.buf) {
                Ok((len, aux)) => {
                    if len > self.buf.len() {
                        // Truncated (MSG_TRUNC reports the real length).
                        self.stats.rx_dropped += 1;
                        continue;
                    }
                    let mut p = Packet::from_slice(&self.buf[..len]);
                    if let Some(a) = aux {
                        if a.status & sys::TP_STATUS_VLAN_VALID != 0 && len >= 12 {
                            let tpid =
                                if a.status & sys::TP_STATUS_VLAN_TPID_VALID != 0 { a.vlan_tpid } else { 0x8100 };
                            p.insert_bytes(12, 4);
                            p.data_mut()[12..14].copy_from_slice(&tpid.to_be_bytes());
                            p.data_mut()[14..16].copy_from_slice(&a.vlan_tci.to_be_bytes());
                        }
                    }
                    self.stats.rx_packets += 1;
                    self.stats.rx_bytes += p.len() as u64;
                    out.push(p);
                    n += 1;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return if n > 0 { Ok(n) } else { Err(e) },
            }
        }
        Ok(n)
    }

    fn tx_batch(&mut self, pkts: &mut Vec<Packet>) -> io::Result<()> {
        let fd = self.fd.as_raw_fd();
        crate::send_each(pkts, &mut self.stats, |d| sys::send(fd, d));
        Ok(())
    }

    fn stats(&self) -> PortStats {
        self.stats
    }

    fn rx_fd(&self, _rxq: usize) -> Option<i32> {
        Some(self.fd.as_raw_fd())
    }
}
