#!/usr/bin/env bash
# vhost-user -> AF_XDP and back through xvs, with DPDK's testpmd as the VM's
# virtio-net frontend (net_virtio_user, server mode: it owns the socket as
# QEMU does) and a namespace host behind a veth on an AF_XDP port.
# Prints testpmd's TX count, what reached the namespace, and the reverse
# direction (broadcast pings from the namespace counted by testpmd rxonly).
# Needs root, dpdk-testpmd (dpdk-dev) and a built xvs (XVS=path, default
# target/debug/xvs). testpmd runs with --no-huge: no hugepages to undo.
set -euo pipefail
cd "$(dirname "$0")/.."
X=${XVS:-${CARGO_TARGET_DIR:-target}/debug/xvs}
T=${SECS:-2}
NS=vhbench; A=vhbench-a; B=vhbench-b
S=/tmp/xvs-vhbench.sock; RD=/tmp/xvs-vhbench-rd; OUT=$(mktemp)
cleanup() {
  [ -n "${XP:-}" ] && kill "$XP" 2>/dev/null || true
  [ -n "${PP:-}" ] && kill "$PP" 2>/dev/null || true
  ip netns del $NS 2>/dev/null || true; ip link del $A 2>/dev/null || true
  rm -rf $RD $S /var/run/dpdk/vhbench "$OUT"
}
trap cleanup EXIT
cleanup
ip netns add $NS; ip link add $A type veth peer name $B; ip link set $B netns $NS
ip link set $A up; ip -n $NS link set $B up; ip -n $NS addr add 10.77.0.2/24 dev $B
rx_ns() { ip -n $NS -s link show $B | awk 'f {print $2; exit} /RX:/ {f=1}'; }
mkfifo "$OUT.in"
stdbuf -o0 dpdk-testpmd -l 0,1 --no-huge -m 256 --no-pci --file-prefix vhbench \
  --vdev net_virtio_user0,path=$S,server=1,queues=1 -- -i --total-num-mbufs=4096 \
  <"$OUT.in" >"$OUT" 2>&1 & PP=$!
exec 3>"$OUT.in"
"$X" switch --run-dir $RD --bridge brvhb --no-local-port \
  --port vhu1,type=dpdkvhostuserclient,vhost-server-path=$S --port $A,type=afxdp,xdp-mode=generic \
  >/dev/null 2>&1 & XP=$!
for _ in $(seq 100); do grep -q "testpmd>" "$OUT" && break; sleep 0.1; done
sleep 1
r0=$(rx_ns)
echo "set fwd txonly" >&3; echo start >&3; sleep "$T"; echo stop >&3; sleep 0.5
r1=$(rx_ns)
tx=$(grep -A2 "Accumulated forward statistics" "$OUT" | awk '/TX-packets/ {print $2; exit}')
echo "vhost -> afxdp: testpmd TX-packets $tx, namespace rx +$((r1 - r0)) in ${T}s: $(( (r1 - r0) / T )) pps"
echo "clear port stats 0" >&3; echo "set fwd rxonly" >&3; echo start >&3; sleep 0.5
ip netns exec $NS ping -b -c 100 -i 0.01 -W 1 10.77.0.255 >/dev/null 2>&1 || true
sleep 0.5
echo "show port stats 0" >&3; sleep 0.5
got=$(grep -A1 "NIC statistics for port 0  #" "$OUT" | awk '/RX-packets/ {print $2}' | tail -1)
echo "afxdp -> vhost: 100 broadcast pings from the namespace, testpmd RX-packets $got"
echo quit >&3
