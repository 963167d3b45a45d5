//! Bidirectional Forwarding Detection (RFC 5880, asynchronous mode, one
//! hop) on a tunnel port, configured and reported as Open vSwitch does it:
//! the Interface `bfd` column (`enable`, `min_rx`, `min_tx`, `bfd_*_mac`,
//! `bfd_*_ip`, `check_tnl_key`) and the `bfd_status` column (`state`,
//! `forwarding`, `diagnostic`, `remote_state`, `remote_diagnostic`,
//! `flap_count`). OVN enables it on the tunnels between gateway chassis.
//!
//! Control packets travel inside the tunnel as Ethernet / IPv4 / UDP to
//! port 3784 with OVS's default addresses (`00:23:20:00:00:01`,
//! `169.254.1.1` -> `169.254.1.0`), TTL 255. Sans-IO: [`Session`] takes
//! received frames and the time, and hands back frames to send.
//!
//! Timers (RFC 5880 6.8): while the session is not up, the advertised
//! transmit interval is at least one second; the interval used is the
//! larger of ours and the peer's required receive interval, less 0-25%
//! jitter. A session goes down when nothing arrives for the peer's detect
//! multiplier times the larger of our receive interval and its transmit
//! interval. A Poll from the peer is answered with Final at once.

use std::collections::BTreeMap;

/// UDP destination port of single-hop BFD control packets.
pub const PORT: u16 = 3784;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    AdminDown = 0,
    Down = 1,
    Init = 2,
    Up = 3,
}

impl State {
    fn from_bits(b: u8) -> State {
        match b & 3 {
            0 => State::AdminDown,
            1 => State::Down,
            2 => State::Init,
            _ => State::Up,
        }
    }
    /// As `bfd_status:state` spells it.
    pub fn name(self) -> &'static str {
        match self {
            State::AdminDown => "admin_down",
            State::Down => "down",
            State::Init => "init",
            State::Up => "up",
        }
    }
}

/// Diagnostic codes (RFC 5880 4.1), as `bfd_status:diagnostic` spells them.
pub fn diag_name(d: u8) -> &'static str {
    match d {
        0 => "No Diagnostic",
        1 => "Control Detection Time Expired",
        2 => "Echo Function Failed",
        3 => "Neighbor Signaled Session Down",
        4 => "Forwarding Plane Reset",
        5 => "Path Down",
        6 => "Concatenated Path Down",
        7 => "Administratively Down",
        8 => "Reverse Concatenated Path Down",
        _ => "Invalid Diagnostic",
    }
}

const DIAG_EXPIRED: u8 = 1;
const DIAG_NEIGHBOR_DOWN: u8 = 3;

/// The `bfd` column of an Interface.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Config {
    /// Required minimum receive interval (ms; OVS's default 1000).
    pub min_rx_ms: u32,
    /// Desired minimum transmit interval while up (ms; default 100).
    pub min_tx_ms: u32,
    pub mult: u8,
    pub src_mac: Option<[u8; 6]>,
    pub dst_mac: [u8; 6],
    pub src_ip: u32,
    pub dst_ip: u32,
    /// Only packets with tunnel key 0 are BFD (OVS's `check_tnl_key`).
    pub check_tnl_key: bool,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            min_rx_ms: 1000,
            min_tx_ms: 100,
            mult: 3,
            src_mac: None,
            dst_mac: [0x00, 0x23, 0x20, 0x00, 0x00, 0x01],
            src_ip: 0xa9fe_0101,
            dst_ip: 0xa9fe_0100,
            check_tnl_key: false,
        }
    }
}

fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let v: Vec<u8> = s.split(':').map(|x| u8::from_str_radix(x, 16).ok()).collect::<Option<_>>()?;
    v.try_into().ok()
}

impl Config {
    /// The session's configuration, `None` when `enable` is not `true`, or
    /// an error naming the key. Keys OVS has and this does not use
    /// (`decay_min_rx`, `forwarding_if_rx`, `cpath_down`) come back as
    /// warnings.
    pub fn parse(bfd: &BTreeMap<String, String>) -> Result<(Option<Config>, Vec<String>), String> {
        let mut c = Config::default();
        let mut warnings = Vec::new();
        let mut enable = false;
        let ms = |k: &str, v: &str| -> Result<u32, String> {
            match v.parse::<u32>() {
                Ok(n) if n >= 1 => Ok(n),
                _ => Err(format!("bfd:{k}: {v:?} is not a number of milliseconds (1 or more)")),
            }
        };
        for (k, v) in bfd {
            match k.as_str() {
                "enable" => {
                    enable = match v.as_str() {
                        "true" => true,
                        "false" => false,
                        _ => return Err(format!("bfd:enable: {v:?} is not true or false")),
                    }
                }
                "min_rx" => c.min_rx_ms = ms(k, v)?,
                "min_tx" => c.min_tx_ms = ms(k, v)?,
                "bfd_src_mac" => c.src_mac = Some(parse_mac(v).ok_or(format!("bfd:{k}: {v:?} is not a MAC address"))?),
                "bfd_dst_mac" => c.dst_mac = parse_mac(v).ok_or(format!("bfd:{k}: {v:?} is not a MAC address"))?,
                "bfd_src_ip" | "bfd_dst_ip" => {
                    let a: std::net::Ipv4Addr =
                        v.parse().map_err(|_| format!("bfd:{k}: {v:?} is not an IPv4 address"))?;
                    if k == "bfd_src_ip" {
                        c.src_ip = a.into();
                    } else {
                        c.dst_ip = a.into();
                    }
                }
                "check_tnl_key" => c.check_tnl_key = v == "true",
                "decay_min_rx" | "forwarding_if_rx" | "cpath_down" | "oam" | "mult" => {
                    warnings.push(format!("bfd:{k}: not supported by xvs, ignored"))
                }
                _ => warnings.push(format!("bfd:{k}: unknown key, ignored")),
            }
        }
        Ok((enable.then_some(c), warnings))
    }
}

/// One BFD session.
#[derive(Clone, Debug)]
pub struct Session {
    cfg: Config,
    state: State,
    diag: u8,
    local_disc: u32,
    remote_disc: u32,
    remote_state: State,
    remote_diag: u8,
    /// The peer's required minimum receive and desired minimum transmit
    /// intervals (µs), and its detect multiplier.
    remote_min_rx_us: u32,
    remote_min_tx_us: u32,
    remote_mult: u8,
    last_rx_ms: Option<u64>,
    next_tx_ms: u64,
    /// Answer the peer's Poll with Final in the next packet.
    final_due: bool,
    flap_count: u64,
    src_port: u16,
    jitter: u32,
}

impl Session {
    /// A new session; `disc` (non-zero) is its local discriminator and
    /// also seeds the UDP source port and the jitter.
    pub fn new(cfg: Config, disc: u32, now_ms: u64) -> Session {
        let disc = disc.max(1);
        Session {
            cfg,
            state: State::Down,
            diag: 0,
            local_disc: disc,
            remote_disc: 0,
            remote_state: State::Down,
            remote_diag: 0,
            remote_min_rx_us: 1,
            remote_min_tx_us: 0,
            remote_mult: 0,
            last_rx_ms: None,
            next_tx_ms: now_ms,
            final_due: false,
            flap_count: 0,
            src_port: 49152 + (disc % 16384) as u16,
            jitter: disc,
        }
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Keeps the session, with a new configuration.
    pub fn reconfigure(&mut self, cfg: Config) {
        self.cfg = cfg;
    }

    pub fn state(&self) -> State {
        self.state
    }

    /// Whether traffic may use the tunnel: the session is up.
    pub fn forwarding(&self) -> bool {
        self.state == State::Up
    }

    /// Our desired minimum transmit interval (µs): at least a second
    /// while not up (RFC 5880 6.8.3).
    fn desired_tx_us(&self) -> u32 {
        let tx = self.cfg.min_tx_ms.saturating_mul(1000);
        if self.state == State::Up {
            tx
        } else {
            tx.max(1_000_000)
        }
    }

    fn required_rx_us(&self) -> u32 {
        self.cfg.min_rx_ms.saturating_mul(1000)
    }

    fn detect_ms(&self) -> u64 {
        let us = self.required_rx_us().max(self.remote_min_tx_us) as u64 * self.remote_mult.max(1) as u64;
        us.div_ceil(1000)
    }

    fn set_state(&mut self, s: State, diag: u8) {
        if s == self.state {
            return;
        }
        if self.state == State::Up || s == State::Up {
            self.flap_count += 1;
        }
        self.state = s;
        self.diag = diag;
        if s != State::Up {
            self.remote_disc = if s == State::Down { 0 } else { self.remote_disc };
        }
        // Tell the peer at once.
        self.next_tx_ms = 0;
    }

    /// Whether `frame` (an inner Ethernet frame received on the tunnel,
    /// with tunnel key `tun_id`) is a BFD control packet for this session.
    pub fn is_bfd(&self, frame: &[u8], tun_id: u64) -> bool {
        if self.cfg.check_tnl_key && tun_id != 0 {
            return false;
        }
        frame.len() >= 14 + 20 + 8 + 24
            && frame[0..6] == self.cfg.dst_mac
            && frame[12..14] == [0x08, 0x00]
            && frame[14] >> 4 == 4
            && frame[23] == 17
            && {
                let l4 = 14 + (frame[14] & 0xf) as usize * 4;
                frame.get(l4 + 2..l4 + 4) == Some(&PORT.to_be_bytes())
            }
    }

    /// Takes a received control packet (the whole frame, already known to
    /// be BFD by [`Session::is_bfd`]); returns whether it was valid.
    pub fn receive(&mut self, frame: &[u8], now_ms: u64) -> bool {
        let l4 = 14 + (frame[14] & 0xf) as usize * 4;
        let Some(p) = frame.get(l4 + 8..) else { return false };
        if p.len() < 24 {
            return false;
        }
        let (vers, len, mult) = (p[0] >> 5, p[3] as usize, p[2]);
        let my = u32::from_be_bytes([p[4], p[5], p[6], p[7]]);
        let your = u32::from_be_bytes([p[8], p[9], p[10], p[11]]);
        let st = State::from_bits(p[1] >> 6);
        let flags = p[1] & 0x3f;
        // Version 1, a sane length, no multipoint, a non-zero sender
        // discriminator; ours when it names one (RFC 5880 6.8.6).
        if vers != 1 || len < 24 || len > p.len() || mult == 0 || flags & 0x01 != 0 || my == 0 {
            return false;
        }
        if your != 0 && your != self.local_disc {
            return false;
        }
        if your == 0 && !matches!(st, State::Down | State::AdminDown) {
            return false;
        }
        self.remote_disc = my;
        self.remote_state = st;
        self.remote_diag = p[0] & 0x1f;
        self.remote_mult = mult;
        self.remote_min_tx_us = u32::from_be_bytes([p[12], p[13], p[14], p[15]]);
        self.remote_min_rx_us = u32::from_be_bytes([p[16], p[17], p[18], p[19]]).max(1);
        self.last_rx_ms = Some(now_ms);
        if flags & 0x20 != 0 {
            // Poll: answer with Final.
            self.final_due = true;
            self.next_tx_ms = 0;
        }
        match (self.state, st) {
            (State::Init | State::Up, State::AdminDown) => self.set_state(State::Down, DIAG_NEIGHBOR_DOWN),
            (_, State::AdminDown) => {}
            (State::Down, State::Down) => self.set_state(State::Init, 0),
            (State::Down, State::Init) | (State::Init, State::Init | State::Up) => self.set_state(State::Up, 0),
            (State::Up, State::Down) => self.set_state(State::Down, DIAG_NEIGHBOR_DOWN),
            _ => {}
        }
        true
    }

    /// Advances time: a session that heard nothing for its detection time
    /// goes down.
    pub fn run(&mut self, now_ms: u64) {
        if matches!(self.state, State::Init | State::Up) {
            if let Some(t) = self.last_rx_ms {
                if now_ms.saturating_sub(t) > self.detect_ms() {
                    self.set_state(State::Down, DIAG_EXPIRED);
                }
            }
        }
    }

    /// The control packet to send now, if one is due (`src_mac`: the
    /// port's, unless `bfd_src_mac` is set).
    pub fn poll_tx(&mut self, now_ms: u64, src_mac: [u8; 6]) -> Option<Vec<u8>> {
        self.run(now_ms);
        if now_ms < self.next_tx_ms {
            return None;
        }
        let interval_us = self.desired_tx_us().max(self.remote_min_rx_us) as u64;
        // 75-100% of the interval (RFC 5880 6.8.7).
        self.jitter = self.jitter.wrapping_mul(1_103_515_245).wrapping_add(12345);
        let pct = 75 + (self.jitter >> 16) % 26;
        self.next_tx_ms = now_ms + (interval_us * pct as u64 / 100).div_ceil(1000);
        let mut bfd = [0u8; 24];
        bfd[0] = 1 << 5 | self.diag;
        bfd[1] = (self.state as u8) << 6 | if self.final_due { 0x10 } else { 0 };
        self.final_due = false;
        bfd[2] = self.cfg.mult;
        bfd[3] = 24;
        bfd[4..8].copy_from_slice(&self.local_disc.to_be_bytes());
        bfd[8..12].copy_from_slice(&self.remote_disc.to_be_bytes());
        bfd[12..16].copy_from_slice(&self.desired_tx_us().to_be_bytes());
        bfd[16..20].copy_from_slice(&self.required_rx_us().to_be_bytes());
        let mut f = Vec::with_capacity(66);
        f.extend_from_slice(&self.cfg.dst_mac);
        f.extend_from_slice(&self.cfg.src_mac.unwrap_or(src_mac));
        f.extend_from_slice(&[0x08, 0x00]);
        let ip_len = 20 + 8 + 24u16;
        let mut ip = [0u8; 20];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
        ip[6] = 0x40; // DF
        ip[8] = 255;
        ip[9] = 17;
        ip[12..16].copy_from_slice(&self.cfg.src_ip.to_be_bytes());
        ip[16..20].copy_from_slice(&self.cfg.dst_ip.to_be_bytes());
        let c = wire::checksum::checksum(&ip);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        f.extend_from_slice(&ip);
        let mut udp = [0u8; 8];
        udp[0..2].copy_from_slice(&self.src_port.to_be_bytes());
        udp[2..4].copy_from_slice(&PORT.to_be_bytes());
        udp[4..6].copy_from_slice(&(8u16 + 24).to_be_bytes());
        let mut seg = udp.to_vec();
        seg.extend_from_slice(&bfd);
        let c = wire::checksum::l4_checksum_v4(self.cfg.src_ip, self.cfg.dst_ip, 17, &seg);
        seg[6..8].copy_from_slice(&(if c == 0 { 0xffff } else { c }).to_be_bytes());
        f.extend_from_slice(&seg);
        Some(f)
    }

    /// The `bfd_status` column, as OVS writes it.
    pub fn status(&self) -> BTreeMap<String, String> {
        let mut m = BTreeMap::new();
        m.insert("state".into(), self.state.name().into());
        m.insert("forwarding".into(), self.forwarding().to_string());
        m.insert("diagnostic".into(), diag_name(self.diag).into());
        m.insert("remote_state".into(), self.remote_state.name().into());
        m.insert("remote_diagnostic".into(), diag_name(self.remote_diag).into());
        m.insert("flap_count".into(), self.flap_count.to_string());
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fast() -> Config {
        Config { min_rx_ms: 300, min_tx_ms: 100, ..Config::default() }
    }

    /// Runs two sessions joined by a perfect link for `ms` milliseconds of
    /// simulated time (10 ms steps); `link` says whether a->b and b->a
    /// deliver at time t.
    fn run(a: &mut Session, b: &mut Session, from: u64, ms: u64, link: impl Fn(u64) -> (bool, bool)) {
        let mac = [2, 0, 0, 0, 0, 1];
        for t in (from..from + ms).step_by(10) {
            let (ab, ba) = link(t);
            if let Some(f) = a.poll_tx(t, mac) {
                assert!(b.is_bfd(&f, 0));
                if ab {
                    assert!(b.receive(&f, t));
                }
            }
            if let Some(f) = b.poll_tx(t, mac) {
                if ba {
                    assert!(a.receive(&f, t));
                }
            }
        }
    }

    #[test]
    fn two_sessions_come_up_and_detect_a_dead_peer() {
        let (mut a, mut b) = (Session::new(fast(), 7, 0), Session::new(fast(), 9, 0));
        run(&mut a, &mut b, 0, 4000, |_| (true, true));
        assert_eq!((a.state(), b.state()), (State::Up, State::Up));
        assert!(a.forwarding() && b.forwarding());
        assert_eq!(a.status()["remote_state"], "up");
        assert_eq!(a.status()["flap_count"], "1");
        // b falls silent: a goes down after 3 x 300 ms, and says why.
        run(&mut a, &mut b, 4000, 950, |_| (true, false));
        assert_eq!(a.state(), State::Down);
        assert_eq!(a.status()["diagnostic"], "Control Detection Time Expired");
        assert_eq!(a.status()["forwarding"], "false");
        // b hears a's Down and follows; both come back up.
        run(&mut a, &mut b, 4950, 4000, |_| (true, true));
        assert_eq!((a.state(), b.state()), (State::Up, State::Up));
        assert_eq!(a.status()["flap_count"], "3");
    }

    #[test]
    fn packets_for_another_session_or_malformed_are_ignored() {
        let mut a = Session::new(fast(), 7, 0);
        let mut b = Session::new(fast(), 9, 0);
        let f = b.poll_tx(0, [2, 0, 0, 0, 0, 2]).unwrap();
        // A "your discriminator" naming someone else.
        let mut g = f.clone();
        g[14 + 20 + 8 + 8..14 + 20 + 8 + 12].copy_from_slice(&5u32.to_be_bytes());
        assert!(!a.receive(&g, 0));
        // Version 0, zero multiplier, short.
        let mut g = f.clone();
        g[42] = 0;
        assert!(!a.receive(&g, 0));
        let mut g = f.clone();
        g[44] = 0;
        assert!(!a.receive(&g, 0));
        assert!(!a.receive(&f[..50], 0));
        assert_eq!(a.state(), State::Down);
        assert!(a.receive(&f, 0));
        assert_eq!(a.state(), State::Init);
        // Not BFD: another UDP port, another MAC.
        let mut g = f.clone();
        g[36..38].copy_from_slice(&3785u16.to_be_bytes());
        assert!(!a.is_bfd(&g, 0));
        let mut g = f;
        g[0] = 0xff;
        assert!(!a.is_bfd(&g, 0));
    }

    #[test]
    fn while_down_packets_go_out_at_most_once_a_second() {
        let mut a = Session::new(fast(), 7, 0);
        let sent = (0..5000).step_by(10).filter(|t| a.poll_tx(*t, [2, 0, 0, 0, 0, 1]).is_some()).count();
        assert!((5..=7).contains(&sent), "{sent} packets in 5 s while down");
    }

    #[test]
    fn config_as_ovs_spells_it() {
        let m = |kv: &[(&str, &str)]| kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        assert_eq!(Config::parse(&m(&[("min_rx", "300")])).unwrap().0, None, "not enabled");
        let (c, w) = Config::parse(&m(&[("enable", "true"), ("min_tx", "50"), ("decay_min_rx", "1000")])).unwrap();
        assert_eq!(c.unwrap().min_tx_ms, 50);
        assert_eq!(w, vec!["bfd:decay_min_rx: not supported by xvs, ignored"]);
        assert!(Config::parse(&m(&[("enable", "true"), ("min_rx", "fast")])).unwrap_err().starts_with("bfd:min_rx:"));
        assert!(Config::parse(&m(&[("enable", "maybe")])).unwrap_err().starts_with("bfd:enable:"));
    }
}
