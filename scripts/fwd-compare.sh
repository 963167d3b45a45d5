#!/usr/bin/env bash
# Forwarding rate of 64-byte UDP between two namespaces through xvs
# (shared UMEM vs copy, busy vs adaptive polling), OVS 3.1 with AF_XDP
# ports, and the Linux bridge, in one run on the same veth topology.
# Generator: a UDP socket sending as fast as it can (`xvs util udp-send`)
# on CPU 0; the switch's poll thread on CPU 1. (trafgen collapsed to ~30k
# pps into a veth with native XDP here, so the socket sender is used for
# every switch alike.)
# Usage: scripts/fwd-compare.sh [seconds per case]   (root; builds nothing:
# run `cargo build --release -p xvs` first)
set -uo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-5}
XVS=./target/release/xvs
G=xfgen S=xfsink GP=xfg0 SP=xfs0
RUN=/tmp/xvs-fwd-$$
cleanup() {
  [ -n "${XPID:-}" ] && kill -TERM "$XPID" 2>/dev/null && wait "$XPID" 2>/dev/null
  if [ -n "${OVSDIR:-}" ]; then
    for f in ovs-vswitchd ovsdb-server; do
      [ -f "$OVSDIR/$f.pid" ] && kill -9 "$(cat "$OVSDIR/$f.pid")" 2>/dev/null
    done
    sleep 0.3; ip link del br0 2>/dev/null; ip link del ovs-netdev 2>/dev/null
    cp "$OVSDIR/vswitchd.log" /tmp/xvs-ovs-last.log 2>/dev/null; rm -rf "$OVSDIR"; OVSDIR=
  fi
  ip link del xfbr 2>/dev/null
  ip netns del $G 2>/dev/null; ip netns del $S 2>/dev/null
  ip link del $GP 2>/dev/null; ip link del $SP 2>/dev/null
  rm -rf "$RUN"
}
trap cleanup EXIT INT TERM

ip netns add $G; ip netns add $S
ip link add $GP type veth peer name eth0 netns $G
ip link add $SP type veth peer name eth0 netns $S
for n in $G $S; do ip netns exec $n ip link set lo up; ip netns exec $n ip link set eth0 up; ip netns exec $n ethtool -K eth0 tx off >/dev/null; done  # why: OVS 3.1 runs here too and forwards partial checksums unfinished; xvs with tx on: bench/defaults.py
ip netns exec $G ip addr add 10.98.0.1/24 dev eth0
ip netns exec $S ip addr add 10.98.0.2/24 dev eth0
ip link set $GP up; ip link set $SP up
GMAC=$(ip netns exec $G cat /sys/class/net/eth0/address)
SMAC=$(ip netns exec $S cat /sys/class/net/eth0/address)
hexmac() { echo "$1" | sed 's/^/0x/; s/:/, 0x/g'; }
cat > /tmp/xfgen.cfg <<CFG
{ $(hexmac $SMAC), $(hexmac $GMAC), 0x08, 0x00,
  0x45, 0x00, 0x00, 0x2e, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, csumip(14, 33),
  10, 98, 0, 1, 10, 98, 0, 2,
  0x13, 0x88, 0x13, 0x89, 0x00, 0x1a, 0x00, 0x00,
  fill(0x00, 18) }
CFG

cnt() { ip netns exec "$1" cat /sys/class/net/eth0/statistics/"$2"; }
measure() { # name, extra-info command
  local name=$1
  ip netns exec $S ping -c1 -W1 10.98.0.1 >/dev/null 2>&1
  ip netns exec $G ping -c1 -W1 10.98.0.2 >/dev/null 2>&1
  local rx0 tx0 rx1 tx1
  rx0=$(cnt $S rx_packets); tx0=$(cnt $G tx_packets)
  timeout $SECS taskset -c 0 ip netns exec $G $XVS util udp-send --dst 10.98.0.2:5001 --count 100000000 >/dev/null 2>&1
  sleep 0.3
  rx1=$(cnt $S rx_packets); tx1=$(cnt $G tx_packets)
  local off=$(( (tx1 - tx0) / SECS )) got=$(( (rx1 - rx0) / SECS ))
  printf "%-34s offered %8d pps  forwarded %8d pps  (%5.1f%%)  %s\n" "$name" "$off" "$got" \
    "$(echo "100 * $got / ($off + 1)" | bc -l)" "${2:-}"
}

xvs_case() { # name, port options, poll mode
  mkdir -p $RUN
  taskset -c 1 $XVS switch --run-dir $RUN --no-local-port --poll "$3" --pmd-cpus 1 \
    --port "$GP$2" --port "$SP$2" 2>/dev/null &
  XPID=$!
  for _ in $(seq 50); do [ -S $RUN/xvs.ctl ] && break; sleep 0.1; done
  measure "$1" ""
  local cyc
  cyc=$($XVS pmd-stats --run-dir $RUN --json | python3 -c 'import json,sys; p=json.load(sys.stdin)["pmds"][0]; print("%.0f cycles/pkt, busy %.0f%%" % (p["cycles_per_packet"], 100*p["busy_ns"]/max(1,p["busy_ns"]+p["idle_ns"])))')
  echo "    xvs pmd: $cyc"
  kill -TERM $XPID; wait $XPID 2>/dev/null; XPID=
}

echo "64-byte UDP, 1 flow, $SECS s per case; generator (UDP socket) on CPU 0, switch on CPU 1"
ip link add xfbr type bridge; ip link set $GP master xfbr; ip link set $SP master xfbr; ip link set xfbr up
measure "generator -> Linux bridge -> sink" ""
ip link del xfbr
xvs_case "xvs afxdp native, shared UMEM, busy" ",xdp-mode=native,umem=shared" busy
xvs_case "xvs afxdp native, copy, busy" ",xdp-mode=native,umem=copy" busy
xvs_case "xvs afxdp native, shared UMEM, adaptive" ",xdp-mode=native,umem=shared" adaptive
xvs_case "xvs afxdp generic, shared UMEM, busy" ",xdp-mode=generic,umem=shared" busy

if command -v ovs-vswitchd >/dev/null && ! pgrep -x ovs-vswitchd >/dev/null; then
  OVSDIR=$(mktemp -d /tmp/xvs-ovs.XXXX)
  export OVS_RUNDIR=$OVSDIR OVS_DBDIR=$OVSDIR OVS_LOGDIR=$OVSDIR
  ovsdb-tool create $OVSDIR/conf.db /usr/share/openvswitch/vswitch.ovsschema
  ovsdb-server $OVSDIR/conf.db --remote=punix:$OVSDIR/db.sock --pidfile=$OVSDIR/ovsdb-server.pid --detach --log-file=$OVSDIR/ovsdb.log
  VS="ovs-vsctl --db=unix:$OVSDIR/db.sock"
  $VS --no-wait init
  $VS --no-wait set Open_vSwitch . other_config:pmd-cpu-mask=0x2
  ovs-vswitchd unix:$OVSDIR/db.sock --pidfile=$OVSDIR/ovs-vswitchd.pid --detach --log-file=$OVSDIR/vswitchd.log
  $VS add-br br0 -- set bridge br0 datapath_type=netdev
  $VS add-port br0 $GP -- set interface $GP type=afxdp options:xdp-mode=native
  $VS add-port br0 $SP -- set interface $SP type=afxdp options:xdp-mode=native
  sleep 2
  if $VS get interface $GP error | grep -q '"'; then
    echo "    OVS: native XDP refused ($($VS get interface $GP error)); trying generic"
    $VS set interface $GP options:xdp-mode=generic-skb; $VS set interface $SP options:xdp-mode=generic-skb; sleep 2
  fi
  APPCTL="ovs-appctl -t $OVSDIR/ovs-vswitchd.$(cat $OVSDIR/ovs-vswitchd.pid).ctl"
  $APPCTL dpif-netdev/pmd-stats-clear >/dev/null
  measure "OVS $(ovs-vswitchd --version | head -1 | awk '{print $NF}') afxdp $($VS get interface $GP options:xdp-mode | tr -d '"')" ""
  echo "    ovs pmd: $($APPCTL dpif-netdev/pmd-stats-show | grep -E 'processing cycles per packet|avg cycles per packet' | head -2 | tr -s ' ' | tr '\n' ';')"
  errs=$($VS get interface $GP error); [ "$errs" != '[]' ] && echo "    ovs port error: $errs"
else
  echo "OVS not installed (apt-get install openvswitch-switch) or another ovs-vswitchd is running: skipped"
fi
