#!/usr/bin/env bash
# Side-by-side benchmark: xvs, OVS 3.1 AF_XDP and the Linux bridge on one
# veth topology, in one run. Installs what it needs, builds, runs.
#   ./bench.sh            full matrix (about 20 minutes)
#   ./bench.sh --only tunnel   Geneve encap/decap, xvs and OVS (about 4 minutes)
#   ./bench.sh --only ovn      forwarding through the OVN pipeline, xvs and OVS (about 3 minutes)
#   ./bench.sh --only defaults hosts' own TCP/UDP with Linux's default offloads: bridge, OVS, xvs (about 2 minutes)
#   ./bench.sh --quick    a 2-minute subset
# Output: a table, bench-out/results.json and bench-out/chart.png.
set -euo pipefail
cd "$(dirname "$0")"
# openvswitch-switch-dpdk: OVS-DPDK for the VM rows (./bench.sh --only vm); it
# registers ovs-vswitchd-dpdk as a lower-priority alternative, so the plain
# ovs-vswitchd stays the default everywhere else.
XVS_EXTRA_PKGS="openvswitch-switch openvswitch-switch-dpdk python3-matplotlib" ./scripts/setup.sh
# The Debian service would start its own ovs-vswitchd; the bench runs its own.
systemctl stop openvswitch-switch 2>/dev/null || true
pkill -x ovs-vswitchd 2>/dev/null || true
pkill -x ovsdb-server 2>/dev/null || true
export PATH="$HOME/.cargo/bin:$PATH"
cargo build --release --locked -p xvs -p netdev-linux --examples --bins
# Debian's python3 (it has python3-matplotlib for the chart).
exec /usr/bin/python3 bench/run.py "$@"
