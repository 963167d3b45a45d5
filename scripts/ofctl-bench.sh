#!/bin/bash
# Times `ovs-ofctl add-flows` of N rules and `ovs-ofctl dump-flows` of them
# against xvs and against Open vSwitch 3.1 (userspace netdev bridge, run
# from Debian's openvswitch-switch in a private directory), in the same
# run, so the ratio holds on a noisy machine.
#
# Usage: scripts/ofctl-bench.sh [N]   (default 100000; needs root)
set -euo pipefail
N=${1:-100000}
cd "$(dirname "$0")/.."
command -v ovs-ofctl >/dev/null || { echo "ovs-ofctl not installed (apt-get install openvswitch-switch)"; exit 1; }
cargo build --quiet -p xvs --bin xvs
XVS=target/debug/xvs
W=$(mktemp -d /tmp/ofctl-bench.XXXXXX)
cleanup() {
    [ -f "$W/xvs.pid" ] && kill "$(cat "$W/xvs.pid")" 2>/dev/null || true
    for p in ovs-vswitchd ovsdb-server; do
        [ -f "$W/$p.pid" ] && kill "$(cat "$W/$p.pid")" 2>/dev/null || true
    done
    sleep 0.5
    rm -rf "$W"
}
trap cleanup EXIT

python3 - "$N" > "$W/flows.txt" <<'EOF'
import sys
n = int(sys.argv[1])
for i in range(n):
    a, b = divmod(i, 65536)
    print(f"priority={100 + i % 7},tcp,nw_src=10.{a}.{b >> 8}.{b & 255},tp_dst={1 + i % 1000},actions=output:1")
EOF

t() { local s; s=$(date +%s.%N); "$@"; python3 -c "print(f'{$(date +%s.%N) - $s:.2f}')"; }

# xvs
$XVS switch --run-dir "$W/xvs" --bridge bx --no-local-port >"$W/xvs.log" 2>&1 &
echo $! > "$W/xvs.pid"
for _ in $(seq 100); do [ -S "$W/xvs/bx.mgmt" ] && break; sleep 0.05; done
X=unix:$W/xvs/bx.mgmt
ovs-ofctl del-flows "$X"
xa=$(t ovs-ofctl add-flows "$X" "$W/flows.txt")
xd=$(t sh -c "ovs-ofctl dump-flows $X > $W/xdump.txt")
xn=$(grep -c actions= "$W/xdump.txt")

# Open vSwitch 3.1, netdev datapath, private run/log/db directories.
export OVS_RUNDIR=$W/ovs OVS_LOGDIR=$W/ovs OVS_DBDIR=$W/ovs
mkdir -p "$W/ovs"
ovsdb-tool create "$W/ovs/conf.db" /usr/share/openvswitch/vswitch.ovsschema
ovsdb-server "$W/ovs/conf.db" --remote=punix:"$W/ovs/db.sock" --pidfile="$W/ovsdb-server.pid" --detach --log-file="$W/ovs/ovsdb.log"
ovs-vsctl --db=unix:"$W/ovs/db.sock" --no-wait init
ovs-vswitchd unix:"$W/ovs/db.sock" --pidfile="$W/ovs-vswitchd.pid" --detach --log-file="$W/ovs/vswitchd.log" 2>/dev/null
ovs-vsctl --db=unix:"$W/ovs/db.sock" --timeout=20 add-br bo -- set bridge bo datapath_type=netdev
O=unix:$W/ovs/bo.mgmt
for _ in $(seq 100); do [ -S "$W/ovs/bo.mgmt" ] && break; sleep 0.05; done
ovs-ofctl del-flows "$O"
oa=$(t ovs-ofctl add-flows "$O" "$W/flows.txt")
od=$(t sh -c "ovs-ofctl dump-flows $O > $W/odump.txt")
on=$(grep -c actions= "$W/odump.txt")

printf '%-28s %10s %10s\n' "$N rules" "xvs" "OVS 3.1"
printf '%-28s %9ss %9ss\n' "ovs-ofctl add-flows" "$xa" "$oa"
printf '%-28s %9ss %9ss\n' "ovs-ofctl dump-flows" "$xd" "$od"
printf '%-28s %10s %10s\n' "flows dumped" "$xn" "$on"
