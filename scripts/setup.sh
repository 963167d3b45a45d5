#!/usr/bin/env bash
# Installs what building and running xvs needs on Debian 12, as root.
# Idempotent: skips apt when everything is already there.
set -euo pipefail

# openvswitch-switch: the real ovs-ofctl, ovs-vsctl, ovs-appctl and
# ovsdb-server (with the Open_vSwitch schema) that the tests drive xvs with.
# python3-prometheus-client: the real Prometheus text parser the metrics
# test reads xvs's /metrics with.
# dpdk-dev: dpdk-testpmd, the virtio-net frontend (net_virtio_user) the
# vhost-user port is tested against (it runs with --no-huge: no hugepages).
# ovn-central, ovn-host: ovn-northd and ovn-controller 23.03, which the OVN
# test runs unchanged on top of xvs.
# qemu-system-x86, busybox-static: a real QEMU virtual machine (a Debian
# kernel and a busybox initramfs) on a vhost-user port; the kernel is
# fetched below.
# openvswitch-switch-dpdk: OVS-DPDK, the reference the VM-port lifecycle
# suite also runs on (XVS_SWITCH=ovs-dpdk, tests/vhost_lifecycle.rs) and
# bench/vmports.py compares with. Run by its full path,
# /usr/lib/openvswitch-switch-dpdk/ovs-vswitchd-dpdk: the package registers
# only a lower-priority alternative, so plain ovs-vswitchd stays the default.
need_pkgs=(clang llvm libbpf-dev iproute2 ethtool iputils-ping tcpdump procps openvswitch-switch python3-prometheus-client dpdk-dev ovn-central ovn-host qemu-system-x86 busybox-static openvswitch-switch-dpdk)
missing=()
for p in "${need_pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Extra packages a caller asks for (e.g. openvswitch-switch for comparisons).
for p in ${XVS_EXTRA_PKGS:-}; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# Debian starts its own ovsdb-server and ovs-vswitchd with the package; xvs
# needs neither (tests start private ones), and an idle ovs-vswitchd only
# takes CPU from the benchmarks.
if [[ " ${missing[*]} " == *" openvswitch-switch "* ]]; then
  systemctl stop openvswitch-switch ovs-vswitchd ovsdb-server 2>/dev/null || true
  /usr/share/openvswitch/scripts/ovs-ctl stop >/dev/null 2>&1 || true
fi
# The same for OVN's packaged daemons: the tests run their own.
if [[ " ${missing[*]} " == *" ovn-"* ]]; then
  systemctl stop ovn-central ovn-host ovn-northd ovn-controller 2>/dev/null || true
  /usr/share/ovn/scripts/ovn-ctl stop_northd >/dev/null 2>&1 || true
  /usr/share/ovn/scripts/ovn-ctl stop_controller >/dev/null 2>&1 || true
fi

# The QEMU guest's kernel and its virtio-net modules, from Debian's kernel
# package (downloaded, unpacked here, not installed): /var/cache/xvs-guest.
# Best effort: without them the QEMU test says "skipped".
guest=/var/cache/xvs-guest
kpkg() { apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}' || true; }
fetch_guest() {
  local pkg tmp m f
  pkg=$(kpkg)
  # A machine whose package lists were never fetched knows no kernel yet.
  if [ -z "$pkg" ]; then apt-get update -qq || return 1; pkg=$(kpkg); fi
  [ -n "$pkg" ] || return 1
  tmp=$(mktemp -d)
  (cd "$tmp" && apt-get download -q "$pkg" >/dev/null 2>&1) && dpkg-deb -x "$tmp"/*.deb "$tmp/root" || { rm -rf "$tmp"; return 1; }
  mkdir -p "$guest.new"
  for m in drivers/virtio/virtio_ring drivers/virtio/virtio drivers/virtio/virtio_pci_modern_dev \
           drivers/virtio/virtio_pci_legacy_dev drivers/virtio/virtio_pci net/core/failover \
           drivers/net/net_failover drivers/net/virtio_net; do
    f=$(find "$tmp/root/lib/modules" -path "*/kernel/$m.ko" | head -1)
    [ -n "$f" ] && cp "$f" "$guest.new/" || { rm -rf "$tmp" "$guest.new"; return 1; }
  done
  cp "$tmp"/root/boot/vmlinuz-* "$guest.new/vmlinuz" || { rm -rf "$tmp" "$guest.new"; return 1; }
  rm -rf "$tmp" "$guest"
  mv "$guest.new" "$guest"
}
if [ ! -f "$guest/vmlinuz" ]; then
  fetch_guest || echo "setup: could not fetch a kernel for the QEMU guest test; it will be skipped" >&2
fi

if ! command -v cargo >/dev/null 2>&1; then
  [ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
fi
command -v cargo >/dev/null 2>&1 || { echo "setup: cargo (Rust >= 1.85) is required; install it with rustup" >&2; exit 1; }
if [ "$(id -u)" != 0 ]; then
  echo "setup: xvs needs root (network namespaces, XDP, AF_XDP)" >&2
  exit 1
fi
