//! The run directory and what lives in it (sockets, the instance lock),
//! and the names that become file and device names.
//!
//! Permissions are set explicitly, never left to the umask of whoever
//! started the daemon: a run directory xvs creates is `0750`, every socket
//! `0770` (connecting needs write permission; the directory already keeps
//! other users out, and the group is the one `--group` names, else root's),
//! as Open vSwitch forces `0770` on its sockets. A directory that already
//! existed keeps its mode (pointing `--run-dir` at /tmp must not lock
//! everyone out of /tmp).
//!
//! One instance per run directory: `xvs.pid` holds the pid under an
//! exclusive lock taken before any device is touched; a second instance
//! stops there, with the first one's pid, and removes nothing.
//!
//! Names: a bridge's name becomes socket file names (`<bridge>.mgmt`) and
//! the name of its local port device; a port's name is a device name. So
//! both follow Linux's device name rules (at most 15 bytes, IFNAMSIZ less
//! the NUL; no `/`, no whitespace or control characters, not `.` or
//! `..`), which also rules out every path traversal. Open vSwitch takes
//! longer bridge names for bridges whose local port is never created in the
//! kernel; xvs always can create it, so it keeps the device rule.

use anyhow::{bail, Context, Result};
use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

/// Mode of a run directory xvs creates.
pub const DIR_MODE: u32 = 0o750;
/// Mode of every socket.
pub const SOCKET_MODE: u32 = 0o770;

/// Longest device (and bridge) name: IFNAMSIZ (16) less the NUL.
pub const MAX_NAME: usize = 15;

/// Longest name of a port that is not a kernel device (patch, tunnel,
/// vhost-user), such as OVN's `patch-br-int-to-ln-outside`.
pub const MAX_VPORT_NAME: usize = 255;

/// Checks a bridge or port name; `what` names it in the error.
pub fn check_name(what: &str, name: &str) -> Result<()> {
    check_port_name(what, name, true)
}

/// Checks a port name; one that is not a kernel `device` may be longer
/// than a Linux device name.
pub fn check_port_name(what: &str, name: &str, device: bool) -> Result<()> {
    let bad = |why: &str| -> Result<()> { bail!("{what} name {name:?}: {why}") };
    if name.is_empty() {
        return bad("is empty");
    }
    if device && name.len() > MAX_NAME {
        return bad(&format!("is longer than {MAX_NAME} bytes (a Linux device name)"));
    }
    if name.len() > MAX_VPORT_NAME {
        return bad(&format!("is longer than {MAX_VPORT_NAME} bytes"));
    }
    if name == "." || name == ".." {
        return bad("is not a usable name");
    }
    if let Some(c) = name.chars().find(|c| *c == '/' || *c == ':' || c.is_whitespace() || c.is_control()) {
        return bad(&format!("has {c:?}, which a device or file name cannot have"));
    }
    Ok(())
}

/// The group named `--group` (a name or a number), as a gid.
pub fn group_id(group: &str) -> Result<u32> {
    if let Ok(n) = group.parse::<u32>() {
        return Ok(n);
    }
    let text = std::fs::read_to_string("/etc/group").context("reading /etc/group")?;
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.len() >= 3 && f[0] == group).then(|| f[2].parse().ok()).flatten()
        })
        .next()
        .with_context(|| format!("--group: no group named {group}"))
}

/// The run directory, made ready before anything else: refused if it is
/// not a directory; created `0750` (and given to `group`) if missing.
pub fn prepare_dir(dir: &Path, group: Option<u32>) -> Result<()> {
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => bail!("--run-dir {}: exists and is not a directory", dir.display()),
        Err(_) => {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(DIR_MODE)
                .create(dir)
                .with_context(|| format!("creating run directory {}", dir.display()))?;
            // The umask may have taken bits away (or DirBuilder's mode
            // kept some the umask let through): set it exactly.
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(DIR_MODE))?;
            if let Some(g) = group {
                std::os::unix::fs::chown(dir, None, Some(g)).with_context(|| format!("chown {}", dir.display()))?;
            }
        }
    }
    Ok(())
}

/// The group sockets are given to (set once at start by `--group`).
static GROUP: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();

pub fn set_group(g: Option<u32>) {
    let _ = GROUP.set(g);
}

/// Binds a unix socket at `path` with [`SOCKET_MODE`] (and the `--group`
/// group), whatever the umask. A stale socket file at `path` is replaced;
/// anything else there (a regular file, a directory, a live socket) is
/// refused and left alone. The listener is blocking, as bind makes it.
pub fn bind_socket(path: &Path) -> Result<UnixListener> {
    if let Ok(m) = std::fs::symlink_metadata(path) {
        use std::os::unix::fs::FileTypeExt;
        if !m.file_type().is_socket() {
            bail!("{}: exists and is not a socket; not replacing it", path.display());
        }
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            bail!("{}: another process is serving this socket", path.display());
        }
        std::fs::remove_file(path).with_context(|| format!("removing stale {}", path.display()))?;
    }
    let l = UnixListener::bind(path).with_context(|| format!("binding {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(SOCKET_MODE))
        .with_context(|| format!("chmod {}", path.display()))?;
    if let Some(Some(g)) = GROUP.get() {
        std::os::unix::fs::chown(path, None, Some(*g)).with_context(|| format!("chown {}", path.display()))?;
    }
    Ok(l)
}

/// The instance lock: `<run-dir>/xvs.pid`, locked while this process runs.
pub struct InstanceLock {
    path: PathBuf,
    _file: File,
}

impl InstanceLock {
    /// Takes the lock, or says which process holds it.
    pub fn acquire(dir: &Path) -> Result<InstanceLock> {
        let path = dir.join("xvs.pid");
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        use std::os::fd::AsRawFd;
        if netdev_linux::sys::lock_file(f.as_raw_fd()).is_err() {
            let mut pid = String::new();
            let _ = f.read_to_string(&mut pid);
            bail!(
                "another xvs (pid {}) is running with run directory {}; stop it first or use another --run-dir",
                pid.trim(),
                dir.display()
            );
        }
        f.set_len(0)?;
        f.write_all(format!("{}\n", std::process::id()).as_bytes())?;
        let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640));
        Ok(InstanceLock { path, _file: f })
    }
}

impl Drop for InstanceLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Why a device cannot be a port of type afxdp/system/af_packet, if so:
/// it must exist, and not be a loopback device.
pub fn check_device(name: &str) -> Result<()> {
    let sys = Path::new("/sys/class/net").join(name);
    if !sys.exists() {
        bail!("port {name}: no such network device");
    }
    let flags = std::fs::read_to_string(sys.join("flags")).unwrap_or_default();
    let flags = u32::from_str_radix(flags.trim().trim_start_matches("0x"), 16).unwrap_or(0);
    let kind = std::fs::read_to_string(sys.join("type")).unwrap_or_default();
    // IFF_LOOPBACK, or ARPHRD_LOOPBACK.
    if flags & 0x8 != 0 || kind.trim() == "772" {
        bail!("port {name}: a loopback device cannot be a switch port (its traffic never leaves the host)");
    }
    Ok(())
}
