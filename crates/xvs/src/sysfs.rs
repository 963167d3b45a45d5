//! What the kernel says about a device, read from sysfs by name. Only
//! the control plane reads these, never under a port's lock.

pub fn read_sys(dev: &str, what: &str) -> Option<String> {
    std::fs::read_to_string(format!("/sys/class/net/{dev}/{what}")).ok().map(|s| s.trim().to_string())
}

/// A device's carrier: `None` when it is not known, which callers treat
/// as "no change". The kernel answers EINVAL for a device that is
/// administratively down (no carrier); any other failure (EMFILE when
/// many peers hold descriptors, ENOMEM) says nothing about the link and
/// must not turn into "link down".
pub fn read_carrier(dev: &str) -> Option<bool> {
    match std::fs::read_to_string(format!("/sys/class/net/{dev}/carrier")) {
        Ok(s) => Some(s.trim() == "1"),
        Err(e) if e.raw_os_error() == Some(22) => Some(false),
        Err(_) => None,
    }
}

pub fn read_mac(dev: &str) -> Option<[u8; 6]> {
    let s = read_sys(dev, "address")?;
    let mut mac = [0u8; 6];
    for (i, p) in s.split(':').enumerate().take(6) {
        mac[i] = u8::from_str_radix(p, 16).ok()?;
    }
    Some(mac)
}

pub fn read_speed(dev: &str) -> u64 {
    read_sys(dev, "speed").and_then(|s| s.parse::<i64>().ok()).filter(|&s| s > 0).unwrap_or(10_000) as u64
}

/// The device's interface index, `None` when no device has this name
/// (deleted, or moved to another network namespace).
pub fn read_ifindex(dev: &str) -> Option<u32> {
    read_sys(dev, "ifindex")?.parse().ok()
}
