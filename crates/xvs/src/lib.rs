//! # xvs: the daemon and its tools
//!
//! This crate wires the layers together: [`switch`] runs a bridge with its
//! poll threads over ports opened by [`ports`]; [`control`] serves the CLI
//! over a unix socket; [`ofconn`] speaks OpenFlow to ovs-ofctl and
//! controllers; [`commands`] formats what the CLI shows; [`demo`]
//! builds hosts in namespaces and sends real traffic through a switch;
//! [`trace`] translates packets offline; [`netns`] and [`util`] are the
//! namespace and traffic helpers the demo and tests share.
#![deny(unsafe_code)]

pub mod appctl;
pub mod commands;
pub mod config;
pub mod control;
pub mod ctcmd;
pub mod db;
pub mod demo;
pub mod metrics;
pub mod netns;
pub mod ofconn;
pub mod offload;
pub mod oflock;
pub mod ofout;
pub mod ovnmulti;
pub mod ovnref;
pub mod ovsref;
pub mod ports;
pub mod routes;
pub mod runfiles;
pub mod switch;
pub mod sysfs;
pub mod tnl;
pub mod tnlref;
pub mod trace;
pub mod util;

/// The CPU clock in MHz (from /proc/cpuinfo), to express times as cycles.
pub fn cpu_mhz() -> f64 {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("cpu MHz"))
                .and_then(|l| l.split(':').nth(1))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(1000.0)
}

/// A stable datapath id from a bridge name (as OVS derives one from a MAC).
pub fn default_dpid(bridge: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bridge.bytes() {
        h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
    }
    h & 0x0000_ffff_ffff_ffff
}
