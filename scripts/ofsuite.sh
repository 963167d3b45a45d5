#!/usr/bin/env bash
# OpenFlow conformance, measured with a third-party switch test suite: os-ken's
# switch tester (os_ken.tests.switch.tester, the OpenStack fork of Ryu's).
# The tester is a controller that both switches connect to: the "target" (the
# switch under test: xvs or OVS) and the "tester" (always an OVS userspace
# netdev bridge), joined by three veth links (target port N <-> tester port N).
# Each switch runs in its own network namespace; the controller listens in the
# root namespace and is reached over one control veth per switch.
# Usage: scripts/ofsuite.sh [xvs|ovs] [of10|of13|of14] [filter]
#   filter: a sub-directory of the suite (e.g. action/25_SET_FIELD, match) or a
#   substring of test file names; default: the whole suite of that version.
# Env: XVS=path to the xvs binary (default target/debug/xvs, built if missing),
#      OFSUITE_VENV (default /opt/xvs-ofsuite-venv), OFSUITE_OUT (default /tmp).
# Prints "N passed, M failed" and the failures grouped by reason; the full
# tester log and the grouped list are saved under $OFSUITE_OUT.
# A measuring tool: slow (minutes to an hour), not part of ./test.sh. Root.
set -uo pipefail
cd "$(dirname "$0")/.."
TARGET=${1:-xvs} VER=${2:-of13} FILTER=${3:-}
case $TARGET in xvs|ovs) ;; *) echo "target must be xvs or ovs, not '$TARGET'" >&2; exit 2 ;; esac
case $VER in of10) OFV=openflow10 OVSV=OpenFlow10 ;; of13) OFV=openflow13 OVSV=OpenFlow13 ;;
  of14) OFV=openflow14 OVSV=OpenFlow14 ;; *) echo "version must be of10, of13 or of14, not '$VER'" >&2; exit 2 ;; esac
VENV=${OFSUITE_VENV:-/opt/xvs-ofsuite-venv}
OUT=${OFSUITE_OUT:-/tmp}
mkdir -p "$OUT"
TAG=ofs$$                       # unique prefix for namespaces and links
NT=${TAG}t NS=${TAG}s           # namespaces: target, tester
PORT=$((20000 + $$ % 10000))    # controller port
WORK=$(mktemp -d /tmp/xvs-ofsuite.XXXX)
LOG=$OUT/ofsuite-$TARGET-$VER.log
REPORT=$OUT/ofsuite-$TARGET-$VER.failures

if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import os_ken' 2>/dev/null; then
  echo "installing os-ken into $VENV"
  python3 -m venv "$VENV" && "$VENV/bin/pip" install -q os-ken || { echo "pip install os-ken failed" >&2; exit 1; }
fi
SUITE=$("$VENV/bin/python" -c 'import os,os_ken.tests.switch as t; print(os.path.dirname(t.__file__))')/$VER
if [ "$TARGET" = xvs ]; then
  XVS=${XVS:-${CARGO_TARGET_DIR:-target}/debug/xvs}
  [ -x "$XVS" ] || cargo build -q -p xvs || exit 1
  XVS=$(realpath "$XVS")
fi

PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for d in "$WORK"/ovs-*; do
    for f in ovs-vswitchd ovsdb-server; do [ -f "$d/$f.pid" ] && kill -9 "$(cat "$d/$f.pid")" 2>/dev/null; done
  done
  sleep 0.3
  ip netns del $NT 2>/dev/null; ip netns del $NS 2>/dev/null
  ip link del ${TAG}ct 2>/dev/null; ip link del ${TAG}cs 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

ip netns add $NT && ip netns add $NS || exit 1
# No IPv6 on the links: router solicitations from the kernel would reach the
# tester as stray packets and fail whichever case is running.
for n in $NT $NS; do
  ip -n $n link set lo up
  ip netns exec $n sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
done
# Control links: root 172.31.251.1 <-> target .2, root .5 <-> tester .6.
ip link add ${TAG}ct type veth peer name ctl netns $NT
ip link add ${TAG}cs type veth peer name ctl netns $NS
ip addr add 172.31.251.1/30 dev ${TAG}ct; ip link set ${TAG}ct up
ip addr add 172.31.251.5/30 dev ${TAG}cs; ip link set ${TAG}cs up
ip -n $NT addr add 172.31.251.2/30 dev ctl; ip -n $NT link set ctl up
ip -n $NS addr add 172.31.251.6/30 dev ctl; ip -n $NS link set ctl up
# Data links: target pN <-> tester pN.
for i in 1 2 3; do
  ip -n $NT link add p$i type veth peer name p$i netns $NS
  ip -n $NT link set p$i up; ip -n $NS link set p$i up
  for n in $NT $NS; do ip netns exec $n ethtool -K p$i tx off rx off >/dev/null 2>&1; done  # why: the conformance tester sends and compares raw frames byte for byte, bad checksums included
done

start_ovs() { # netns, name, dpid, controller ip, OpenFlow version
  local d=$WORK/ovs-$2
  mkdir -p "$d"
  local env="env OVS_RUNDIR=$d OVS_DBDIR=$d OVS_LOGDIR=$d"
  ovsdb-tool create "$d/conf.db" /usr/share/openvswitch/vswitch.ovsschema || return 1
  ip netns exec "$1" $env ovsdb-server "$d/conf.db" --remote=punix:"$d/db.sock" \
    --pidfile="$d/ovsdb-server.pid" --detach -vconsole:off --log-file="$d/ovsdb.log" || return 1
  local vs="ip netns exec $1 $env ovs-vsctl --db=unix:$d/db.sock"
  $vs --no-wait init
  ip netns exec "$1" $env ovs-vswitchd unix:"$d/db.sock" --pidfile="$d/ovs-vswitchd.pid" \
    --detach -vconsole:off --log-file="$d/vswitchd.log" || return 1
  $vs add-br "$2" -- set bridge "$2" datapath_type=netdev fail_mode=secure \
    protocols="$5" other-config:datapath-id="$3" \
    other-config:disable-in-band=true || return 1
  for i in 1 2 3; do $vs add-port "$2" p$i -- set interface p$i ofport_request=$i || return 1; done
  $vs set-controller "$2" tcp:"$4":$PORT
}

# The tester speaks OpenFlow 1.3 whatever the target's version (the tester
# app insists on it); each switch offers only its version, since the
# controller offers both and a switch takes the highest it shares.
start_ovs $NS tstbr 0000000000000002 172.31.251.5 OpenFlow13 || { echo "tester OVS failed to start" >&2; exit 1; }
if [ "$TARGET" = ovs ]; then
  start_ovs $NT tgtbr 0000000000000001 172.31.251.1 $OVSV || { echo "target OVS failed to start" >&2; exit 1; }
else
  mkdir -p "$WORK/xvs"
  ip netns exec $NT "$XVS" switch --run-dir "$WORK/xvs" --bridge tgtbr --no-local-port \
    --port p1,type=af_packet --port p2,type=af_packet --port p3,type=af_packet \
    --controller tcp:172.31.251.1:$PORT --fail-mode secure --datapath-id 0000000000000001 --protocols $OVSV \
    >"$WORK/xvs.log" 2>&1 &
  PIDS+=($!)
fi

# Suite directory: the whole version, or a filtered copy.
DIR=$SUITE
if [ -n "$FILTER" ]; then
  DIR=$WORK/suite
  mkdir -p "$DIR"
  if [ -d "$SUITE/$FILTER" ]; then
    cp -r "$SUITE/$FILTER" "$DIR/"
  else
    (cd "$SUITE" && find . -name '*.json' -path "*$FILTER*" -exec cp --parents {} "$DIR/" \;)
  fi
  [ -n "$(find "$DIR" -name '*.json')" ] || { echo "no test file matches '$FILTER'" >&2; exit 2; }
fi

# os-ken ships no manager script; this is the minimal equivalent. The eventlet
# hub is needed: with the default native hub the tester's reply timeouts never
# fire, so the first unanswered request hangs the run.
cat >"$WORK/run.py" <<'PY'
import sys
from os_ken.lib import hub
hub.patch(thread=False)
from os_ken import cfg, log
import os_ken.flags  # noqa: F401  (registers --test-switch-*)
from os_ken.base.app_manager import AppManager
import os_ken.controller.controller  # noqa: F401  (registers --ofp-*)
cfg.CONF(args=sys.argv[1:], project='os_ken')
log.init_log()
mgr = AppManager.get_instance()
mgr.load_apps(['os_ken.tests.switch.tester'])
hub.joinall(mgr.instantiate_apps(**mgr.create_contexts()))
PY
rm -f "$LOG"
echo "running $VER suite ($DIR) against $TARGET; log: $LOG"
(cd "$WORK" && OSKEN_HUB_TYPE=eventlet "$VENV/bin/python" run.py --ofp-listen-host 0.0.0.0 --ofp-tcp-listen-port $PORT \
  --log-file "$LOG" --test-switch-target 0000000000000001 --test-switch-tester 0000000000000002 \
  --test-switch-target-version $OFV --test-switch-tester-version openflow13 \
  --test-switch-dir "$DIR" >"$WORK/tester.out" 2>&1) &
TPID=$!
PIDS+=($TPID)
wait $TPID

# Result lines: "    <description>   OK|ERROR", an ERROR followed by its reason line.
"$VENV/bin/python" - "$LOG" "$REPORT" <<'PY'
import re, sys, collections
lines = open(sys.argv[1]).read().splitlines()
ok = bad = 0
reasons = collections.Counter()
for i, l in enumerate(lines):
    m = re.match(r'^    (\S.*?)\s+(OK|ERROR)$', l)
    if not m:
        continue
    if m.group(2) == 'OK':
        ok += 1
        continue
    bad += 1
    why = lines[i + 1].strip() if i + 1 < len(lines) and lines[i + 1].startswith('        ') else '?'
    # Group by the reason's text with packet dumps and numbers cut away.
    why = re.sub(r'\(.*', '(...)', why) if len(why) > 160 else why
    reasons[re.sub(r'0x[0-9a-f]+|\d+', 'N', why)[:200]] += 1
with open(sys.argv[2], 'w') as f:
    for why, n in reasons.most_common():
        f.write('%5d  %s\n' % (n, why))
print('%d passed, %d failed' % (ok, bad))
PY
echo "failures by reason ($REPORT):"
head -25 "$REPORT"
if [ "$(wc -l <"$REPORT")" -eq 0 ] && ! grep -q 'OK\|ERROR' "$LOG" 2>/dev/null; then
  echo "no results: tester output:"; tail -20 "$WORK/tester.out"; tail -5 "$LOG" 2>/dev/null
  [ -f "$WORK/xvs.log" ] && tail -10 "$WORK/xvs.log"
fi
