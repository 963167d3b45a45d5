#!/bin/bash
# Resident memory of OVS 3.1 (AF_XDP, netdev datapath) and xvs with the same N veth ports
# (one queue each), in the same run. Usage: bench/rss.sh [N] ; env XVS (binary), XVS_ARGS (extra switch args).
# Root; takes the shared OVS reference lock; removes what it made.
set -u
N=${1:-2}; XVS=${XVS:-${CARGO_TARGET_DIR:-target}/debug/xvs}; shift || true
exec 9>/tmp/xvs-ovsref.lock; flock 9
ip link del ovs-netdev 2>/dev/null
for i in $(seq 1 $N); do ip link del rssa$i 2>/dev/null; ip link add rssa$i type veth peer name rssb$i; ip link set rssa$i up; ip link set rssb$i up; done
d=/tmp/ovsrss.$$; rm -rf $d; mkdir -p $d
export OVS_RUNDIR=$d OVS_DBDIR=$d OVS_LOGDIR=$d
ovsdb-tool create $d/conf.db /usr/share/openvswitch/vswitch.ovsschema
ovsdb-server $d/conf.db --remote=punix:$d/db.sock --pidfile=$d/ovsdb-server.pid --detach --log-file=$d/ovsdb.log
ovs-vsctl --db=unix:$d/db.sock --no-wait init
ovs-vswitchd unix:$d/db.sock --pidfile=$d/ovs-vswitchd.pid --detach --log-file=$d/vswitchd.log
ovs-vsctl --db=unix:$d/db.sock add-br br0 -- set bridge br0 datapath_type=netdev
base=$(grep VmRSS /proc/$(cat $d/ovs-vswitchd.pid)/status | awk '{print $2}')
for i in $(seq 1 $N); do ovs-vsctl --db=unix:$d/db.sock add-port br0 rssa$i -- set interface rssa$i type=afxdp "$@"; done
sleep 3
ovs=$(grep VmRSS /proc/$(cat $d/ovs-vswitchd.pid)/status | awk '{print $2}')
kill -9 $(cat $d/ovs-vswitchd.pid) $(cat $d/ovsdb-server.pid); sleep 0.3; ip link del ovs-netdev 2>/dev/null; rm -rf $d
args=""; for i in $(seq 1 $N); do args="$args --port rssa$i"; done
$XVS switch --run-dir /tmp/xvsrss.$$ --bridge brrss --no-local-port $args ${XVS_ARGS:-} >/dev/null 2>&1 &
xp=$!; sleep 3
xvs=$(grep VmRSS /proc/$xp/status | awk '{print $2}')
kill $xp; wait $xp 2>/dev/null
$XVS switch --run-dir /tmp/xvsrss.$$ --bridge brrss --no-local-port ${XVS_ARGS:-} >/dev/null 2>&1 &
xp=$!; sleep 2
xbase=$(grep VmRSS /proc/$xp/status | awk '{print $2}')
kill $xp; wait $xp 2>/dev/null
for i in $(seq 1 $N); do ip link del rssa$i 2>/dev/null; done
rm -rf /tmp/xvsrss.$$
echo "ports=$N  OVS 3.1: ${ovs} kB (no ports ${base} kB; per port $(( (ovs-base)/N )) kB)  xvs: ${xvs} kB (no ports ${xbase} kB; per port $(( (xvs-xbase)/N )) kB)"
