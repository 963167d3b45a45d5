//! A tunnel interface's configuration, from the `options` column of its
//! `Interface` row, with the option names and meanings Open vSwitch
//! documents for `geneve`, `vxlan` and `gre` interfaces
//! (`ovs-vswitchd.conf.db(5)`).
//!
//! A bad value is refused with a message that names the option, so it can
//! land in `Interface:error`. An option this switch does not know is not an
//! error (Open vSwitch only logs those too); [`PortCfg::parse`] returns it
//! as a warning.

use crate::encap::Kind;
use crate::route::{mapped, parse_addr};
use std::collections::BTreeMap;

/// A value fixed by configuration, or taken from the flow (`flow`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FromFlow<T> {
    Fixed(T),
    Flow,
}

/// `tos`/`ttl`: a number, or `inherit` (from the inner IP header).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Inherit {
    Fixed(u8),
    Inherit,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PortCfg {
    pub kind: Kind,
    /// The remote endpoint (IPv4 as a mapped address), or `flow` (tun_dst).
    pub remote: FromFlow<u128>,
    /// The local endpoint; `None`: the route's source address.
    pub local: Option<u128>,
    /// `local_ip=flow`: the source is the packet's `tun_src` /
    /// `tun_ipv6_src` (the route's source when the flow set none), and any
    /// local address is accepted on receive. Needs `remote_ip=flow`.
    pub local_flow: bool,
    /// The VNI / GRE key expected on receive; `None` for GRE without a key.
    pub in_key: Option<FromFlow<u64>>,
    /// The VNI / GRE key sent.
    pub out_key: Option<FromFlow<u64>>,
    /// UDP destination port (Geneve, VXLAN).
    pub dst_port: u16,
    pub csum: bool,
    pub tos: Inherit,
    pub ttl: Inherit,
    pub df_default: bool,
    /// VXLAN group-based policy (`exts=gbp`).
    pub gbp: bool,
    /// BFD on this tunnel (the Interface's `bfd` column, `enable=true`);
    /// set by the caller, see [`crate::bfd::Config::parse`].
    pub bfd: Option<crate::bfd::Config>,
}

impl PortCfg {
    pub fn remote_str(&self) -> String {
        match self.remote {
            FromFlow::Fixed(a) => crate::route::fmt_addr(a),
            FromFlow::Flow => "flow".into(),
        }
    }

    /// Parses `options` for interface type `ty` (`geneve`, `vxlan`, `gre`).
    /// Returns the configuration and warnings (unknown options), or an
    /// error naming the offending option.
    pub fn parse(ty: &str, options: &BTreeMap<String, String>) -> Result<(PortCfg, Vec<String>), String> {
        let kind = match ty {
            "geneve" => Kind::Geneve,
            "vxlan" => Kind::Vxlan,
            // ip6gre: GRE whose endpoints are IPv6 addresses (checked below).
            "gre" | "ip6gre" => Kind::Gre,
            _ => return Err(format!("type: {ty:?} is not a tunnel type (geneve, vxlan, gre, ip6gre)")),
        };
        let mut warnings = Vec::new();
        let addr = |k: &str, v: &str| -> Result<u128, String> {
            match parse_addr(v) {
                Some(a) if a != mapped(0) && a != 0 => Ok(a),
                _ => Err(format!("options:{k}: {v:?} is not an IP address")),
            }
        };
        let key = |k: &str, v: &str| -> Result<FromFlow<u64>, String> {
            if v == "flow" {
                return Ok(FromFlow::Flow);
            }
            let n = if let Some(h) = v.strip_prefix("0x") { u64::from_str_radix(h, 16).ok() } else { v.parse().ok() };
            let max = if kind == Kind::Gre { u32::MAX as u64 } else { 0xff_ffff };
            match n {
                Some(n) if n <= max => Ok(FromFlow::Fixed(n)),
                _ => Err(format!("options:{k}: {v:?} is not 'flow' or a key from 0 to {max}")),
            }
        };
        let boolean = |k: &str, v: &str| -> Result<bool, String> {
            match v {
                "true" => Ok(true),
                "false" => Ok(false),
                _ => Err(format!("options:{k}: {v:?} is not true or false")),
            }
        };
        let byte = |k: &str, v: &str, max: u8| -> Result<Inherit, String> {
            if v == "inherit" {
                return Ok(Inherit::Inherit);
            }
            match v.parse::<u8>() {
                Ok(n) if n <= max => Ok(Inherit::Fixed(n)),
                _ => Err(format!("options:{k}: {v:?} is not 'inherit' or a number from 0 to {max}")),
            }
        };
        let mut c = PortCfg {
            kind,
            remote: FromFlow::Flow,
            local: None,
            local_flow: false,
            in_key: None,
            out_key: None,
            dst_port: kind.default_port(),
            csum: false,
            tos: Inherit::Fixed(0),
            ttl: Inherit::Fixed(64),
            df_default: true,
            gbp: false,
            bfd: None,
        };
        let mut remote = None;
        let mut key_all = None;
        for (k, v) in options {
            match k.as_str() {
                "remote_ip" => remote = Some(if v == "flow" { FromFlow::Flow } else { FromFlow::Fixed(addr(k, v)?) }),
                "local_ip" if v == "flow" => c.local_flow = true,
                "local_ip" => c.local = Some(addr(k, v)?),
                "key" => key_all = Some(key(k, v)?),
                "in_key" => c.in_key = Some(key(k, v)?),
                "out_key" => c.out_key = Some(key(k, v)?),
                "dst_port" => {
                    if kind == Kind::Gre {
                        return Err("options:dst_port: a gre interface has no UDP port".into());
                    }
                    c.dst_port = match v.parse::<u16>() {
                        Ok(p) if p > 0 => p,
                        _ => return Err(format!("options:dst_port: {v:?} is not a UDP port from 1 to 65535")),
                    }
                }
                "csum" => c.csum = boolean(k, v)?,
                "df_default" => c.df_default = boolean(k, v)?,
                "tos" => c.tos = byte(k, v, 255)?,
                "ttl" => {
                    c.ttl = byte(k, v, 255)?;
                    if c.ttl == Inherit::Fixed(0) {
                        return Err("options:ttl: 0 would never reach the remote".into());
                    }
                }
                "exts" => {
                    for e in v.split(',').map(str::trim).filter(|e| !e.is_empty()) {
                        match (e, kind) {
                            ("gbp", Kind::Vxlan) => c.gbp = true,
                            _ => {
                                return Err(format!(
                                    "options:exts: {e:?} is not an extension of {} (gbp for vxlan)",
                                    kind.name()
                                ))
                            }
                        }
                    }
                }
                // Accepted, meaningless here: the datapath type names no
                // packet type but Ethernet, and marks are the kernel's.
                "packet_type" if v == "legacy_l2" => {}
                _ => warnings.push(format!("options:{k}: unknown {} option, ignored", kind.name())),
            }
        }
        c.remote = remote
            .ok_or_else(|| "options:remote_ip: missing (the remote endpoint's address, or 'flow')".to_string())?;
        if c.local_flow && c.remote != FromFlow::Flow {
            return Err("options:local_ip: 'flow' needs options:remote_ip=flow too".into());
        }
        // `key` sets both directions unless in_key/out_key say otherwise;
        // Geneve and VXLAN always carry a VNI (0 unless configured).
        let default = if kind == Kind::Gre { None } else { Some(FromFlow::Fixed(0)) };
        c.in_key = c.in_key.or(key_all).or(default);
        c.out_key = c.out_key.or(key_all).or(default);
        if ty == "ip6gre" && matches!(c.remote, FromFlow::Fixed(r) if crate::route::unmapped(r).is_some()) {
            return Err("options:remote_ip: an ip6gre interface needs an IPv6 address (use type=gre for IPv4)".into());
        }
        if let (Some(l), FromFlow::Fixed(r)) = (c.local, c.remote) {
            if crate::route::unmapped(l).is_some() != crate::route::unmapped(r).is_some() {
                return Err("options:local_ip: not of the same address family as remote_ip".into());
            }
        }
        Ok((c, warnings))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn o(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn options_as_ovs_documents_them() {
        let (c, w) =
            PortCfg::parse("geneve", &o(&[("remote_ip", "172.31.0.2"), ("key", "flow"), ("csum", "true")])).unwrap();
        assert!(w.is_empty());
        assert_eq!(c.remote, FromFlow::Fixed(mapped(0xac1f_0002)));
        assert_eq!((c.in_key, c.out_key), (Some(FromFlow::Flow), Some(FromFlow::Flow)));
        assert!(c.csum && c.df_default);
        assert_eq!(c.dst_port, 6081);
        let (c, _) = PortCfg::parse("gre", &o(&[("remote_ip", "10.0.0.1"), ("in_key", "7")])).unwrap();
        assert_eq!((c.in_key, c.out_key), (Some(FromFlow::Fixed(7)), None));
        let (c, w) =
            PortCfg::parse("vxlan", &o(&[("remote_ip", "flow"), ("dst_port", "8472"), ("bogus", "1")])).unwrap();
        assert_eq!((c.remote, c.dst_port, c.out_key), (FromFlow::Flow, 8472, Some(FromFlow::Fixed(0))));
        assert_eq!(w, vec!["options:bogus: unknown vxlan option, ignored"]);
    }

    #[test]
    fn ipv6_endpoints() {
        let (c, _) = PortCfg::parse("geneve", &o(&[("remote_ip", "fd31:7::2"), ("local_ip", "fd31:7::1")])).unwrap();
        assert_eq!(c.remote, FromFlow::Fixed(0xfd31_0007_0000_0000_0000_0000_0000_0002));
        assert_eq!(c.remote_str(), "fd31:7::2");
        let (c, _) = PortCfg::parse("ip6gre", &o(&[("remote_ip", "fd31:7::2")])).unwrap();
        assert_eq!(c.kind, Kind::Gre);
        let e = PortCfg::parse("ip6gre", &o(&[("remote_ip", "10.0.0.2")])).unwrap_err();
        assert!(e.starts_with("options:remote_ip: an ip6gre interface needs an IPv6 address"), "{e}");
        let e = PortCfg::parse("vxlan", &o(&[("remote_ip", "fd31:7::2"), ("local_ip", "10.0.0.1")])).unwrap_err();
        assert!(e.starts_with("options:local_ip: not of the same address family"), "{e}");
        let (c, _) = PortCfg::parse("geneve", &o(&[("remote_ip", "flow"), ("local_ip", "flow")])).unwrap();
        assert!(c.local_flow && c.local.is_none());
        let e = PortCfg::parse("geneve", &o(&[("remote_ip", "10.0.0.2"), ("local_ip", "flow")])).unwrap_err();
        assert!(e.starts_with("options:local_ip: 'flow' needs options:remote_ip=flow"), "{e}");
    }

    #[test]
    fn errors_name_the_option() {
        let e = |ty: &str, kv: &[(&str, &str)]| PortCfg::parse(ty, &o(kv)).unwrap_err();
        assert!(e("geneve", &[]).starts_with("options:remote_ip: missing"));
        assert!(e("geneve", &[("remote_ip", "nowhere")]).starts_with("options:remote_ip:"));
        assert!(e("vxlan", &[("remote_ip", "1.2.3.4"), ("key", "16777216")]).starts_with("options:key:"));
        assert!(e("gre", &[("remote_ip", "1.2.3.4"), ("dst_port", "5")]).starts_with("options:dst_port:"));
        assert!(e("geneve", &[("remote_ip", "1.2.3.4"), ("csum", "yes")]).starts_with("options:csum:"));
        assert!(e("geneve", &[("remote_ip", "1.2.3.4"), ("ttl", "300")]).starts_with("options:ttl:"));
        assert!(e("geneve", &[("remote_ip", "1.2.3.4"), ("exts", "gbp")]).starts_with("options:exts:"));
    }
}
