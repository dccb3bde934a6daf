#!/usr/bin/env bash
# start-ceph.sh DIR - a throwaway single-node Ceph for kvtier's tests and benchmarks: one
# monitor, one manager, OSDS object storage daemons (default 1; 3 for the erasure-code test),
# radosgw (S3) on loopback and an S3 user, and optionally CephFS (an MDS and a file system,
# mounted with ceph-fuse). Everything lives under DIR; /etc/ceph is never
# read; daemons run as the caller and their PIDs are recorded for stop-ceph.sh. Written
# after the recipe in ../shared/ceph (its pitfalls are noted inline).
#
# Environment: OSDS (1), RGW (1: start radosgw), RGW_PORT (7480), MON_V2 (3300), MON_V1
# (6789), OBJECTSTORE (memstore|bluestore), MEMSTORE_BYTES (1GiB per OSD), WITH_MGR (1),
# ACCESS_KEY, SECRET_KEY, EXTRA_CONF (lines appended to [global]), WATCH_PID (stop the
# cluster by itself once that process is gone: a test killed by a timeout leaks nothing;
# WATCH_RM=1 also removes DIR then), WITH_CEPHFS (0; 1: an MDS and the file system 'cephfs'
# on pools cephfs_metadata and cephfs_data), FUSE_MOUNT (0; 1: also mount it with
# ceph-fuse at DIR/mnt; needs /dev/fuse).
# Writes DIR/env (CEPH_CONF, KVTIER_S3_ENDPOINT, AWS_* ...) for clients to source.
set -euo pipefail
DIR=${1:?usage: $0 DIR}
OSDS=${OSDS:-1}; RGW=${RGW:-1}; WITH_CEPHFS=${WITH_CEPHFS:-0}; FUSE_MOUNT=${FUSE_MOUNT:-0}
RGW_PORT=${RGW_PORT:-7480}; MON_V2=${MON_V2:-3300}; MON_V1=${MON_V1:-6789}
OBJECTSTORE=${OBJECTSTORE:-memstore}; WITH_MGR=${WITH_MGR:-1}
MEMSTORE_BYTES=${MEMSTORE_BYTES:-1073741824}
ACCESS_KEY=${ACCESS_KEY:-0555b35654ad1656d804}
SECRET_KEY=${SECRET_KEY:-h7GhxuBLTrlhVUyxSPUKUV8r/2EI4ngqJxD7iBdBYLhwluN30JaT3Q==}
for b in ceph-mon ceph-osd ceph-authtool monmaptool ceph; do
  command -v $b >/dev/null || { echo "start-ceph.sh: $b not found (apt-get install -y ceph-mon ceph-osd ceph-mgr radosgw ceph-common)" >&2; exit 77; }
done
[ "$RGW" = 1 ] && ! command -v radosgw >/dev/null && { echo "start-ceph.sh: radosgw not found" >&2; exit 77; }
[ "$FUSE_MOUNT" = 1 ] && WITH_CEPHFS=1
[ "$WITH_CEPHFS" = 1 ] && ! command -v ceph-mds >/dev/null && { echo "start-ceph.sh: ceph-mds not found (apt-get install -y ceph-mds)" >&2; exit 77; }
if [ "$FUSE_MOUNT" = 1 ]; then
  command -v ceph-fuse >/dev/null || { echo "start-ceph.sh: ceph-fuse not found (apt-get install -y ceph-fuse)" >&2; exit 77; }
  [ -c /dev/fuse ] || { echo "start-ceph.sh: no /dev/fuse here, CephFS cannot be mounted" >&2; exit 77; }
fi
T0=${EPOCHREALTIME/./}
say() { local t=$(( ${EPOCHREALTIME/./} - T0 )); printf '[%3d.%01ds] %s\n' $((t/1000000)) $((t/100000%10)) "$*"; }
[ -e "$DIR/ceph.conf" ] && { echo "$DIR already holds a cluster; stop-ceph.sh it and remove it" >&2; exit 1; }
mkdir -p "$DIR"/{log,run,mon.a,mgr.x,rgw}
DIR=$(cd "$DIR" && pwd); HERE=$(cd "$(dirname "$0")" && pwd)
trap 'rc=$?; [ $rc = 0 ] || { echo "start-ceph.sh failed (rc=$rc); logs in $DIR/log; stopping daemons" >&2; "$HERE/stop-ceph.sh" "$DIR" >/dev/null; }' EXIT
CONF=$DIR/ceph.conf; KR=$DIR/keyring; FSID=$(uuidgen)
# Pitfalls: 'paxos propose interval = 0.1' cuts start-up from ~13 s to ~3 s; 'osd crush
# chooseleaf type = 0' makes the failure domain the OSD, so a k+m erasure-coded pool needs
# only k+m OSDs on one host; short heartbeat settings let a killed OSD be marked down fast.
cat > "$CONF" <<CONF
[global]
fsid = $FSID
mon host = [v2:127.0.0.1:$MON_V2,v1:127.0.0.1:$MON_V1]
mon initial members = a
public addr = 127.0.0.1
cluster addr = 127.0.0.1
ms bind ipv6 = false
keyring = $KR
run dir = $DIR/run
admin socket = $DIR/run/\$name.asok
pid file = $DIR/run/\$name.daemonpid
log file = $DIR/log/\$name.log
crash dir = $DIR/crash
mon data = $DIR/\$name
mgr data = $DIR/\$name
mds data = $DIR/\$name
osd data = $DIR/\$name
auth allow insecure global id reclaim = false
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
mon max pg per osd = 1000
paxos propose interval = 0.1
mon data avail warn = 2
mon data avail crit = 1
mon osd down out interval = 0
osd heartbeat interval = 1
osd heartbeat grace = 4
osd objectstore = $OBJECTSTORE
memstore device bytes = $MEMSTORE_BYTES
bluestore block create = true
bluestore block size = 10737418240
bluestore fsck on mount = false
osd memory target = 939524096
${EXTRA_CONF:-}
[client]
# Clients (the ceph CLI, tests, kvtier) share names: no admin socket for them.
admin socket =
[client.rgw.a]
rgw frontends = beast endpoint=127.0.0.1:$RGW_PORT
rgw data = $DIR/rgw
rgw dns name = localhost
CONF
ceph-authtool "$KR" --create-keyring --gen-key -n mon. --cap mon 'allow *' >/dev/null
ceph-authtool "$KR" --gen-key -n client.admin --cap mon 'allow *' --cap osd 'allow *' --cap mgr 'allow *' --cap mds 'allow *' >/dev/null
ceph-authtool "$KR" --gen-key -n mgr.x --cap mon 'allow profile mgr' --cap osd 'allow *' >/dev/null
[ "$WITH_CEPHFS" = 1 ] && ceph-authtool "$KR" --gen-key -n mds.a --cap mon 'allow profile mds' --cap osd 'allow rwx' --cap mds 'allow' --cap mgr 'allow profile mds' >/dev/null
ceph-authtool "$KR" --gen-key -n client.rgw.a --cap mon 'allow rw' --cap osd 'allow rwx' --cap mgr 'allow rw' >/dev/null
for i in $(seq 0 $((OSDS-1))); do
  mkdir -p "$DIR/osd.$i"
  ceph-authtool "$KR" --gen-key -n osd.$i --cap mon 'allow profile osd' --cap mgr 'allow profile osd' --cap osd 'allow *' >/dev/null
done
monmaptool --create --fsid "$FSID" --addv a "[v2:127.0.0.1:$MON_V2,v1:127.0.0.1:$MON_V1]" "$DIR/monmap" >/dev/null
ceph-mon -c "$CONF" --mkfs -i a --monmap "$DIR/monmap" --keyring "$KR"
start() { # name, command...: run in the foreground mode under our own PID file
  local n=$1; shift
  "$@" -c "$CONF" -f > "$DIR/log/$n.out" 2>&1 &
  echo $! > "$DIR/run/$n.pid"
}
C="ceph -c $CONF --connect-timeout 10"
start mon.a ceph-mon -i a
for i in $(seq 60); do kill -0 "$(cat "$DIR/run/mon.a.pid")" || break; $C mon stat >/dev/null 2>&1 && break; sleep 0.5; done
$C mon stat >/dev/null || { echo "mon did not come up; see $DIR/log" >&2; exit 1; }
say "mon up"
[ "$WITH_MGR" = 1 ] && start mgr.x ceph-mgr -i x
for i in $(seq 0 $((OSDS-1))); do
  U=$(uuidgen); ID=$($C osd new "$U")
  [ "$ID" = "$i" ] || { echo "unexpected osd id $ID (wanted $i)" >&2; exit 1; }
  ceph-osd -c "$CONF" -i "$i" --mkfs --osd-uuid "$U" > "$DIR/log/osd.$i.mkfs" 2>&1 || { tail "$DIR/log/osd.$i.mkfs" >&2; exit 1; }
  start osd.$i ceph-osd -i "$i"
done
for i in $(seq 0 $((OSDS-1))); do
  for t in $(seq 120); do $C osd dump 2>/dev/null | grep -q "^osd.$i up" && break; sleep 0.5; done
  $C osd dump | grep -q "^osd.$i up" || { echo "osd.$i did not come up; see $DIR/log" >&2; exit 1; }
done
say "$OSDS osd(s) up"
if [ "$RGW" = 1 ]; then
  start rgw.a radosgw -n client.rgw.a
  for i in $(seq 240); do curl -sf -o /dev/null "http://127.0.0.1:$RGW_PORT/" && break; sleep 0.5; done
  curl -sf -o /dev/null "http://127.0.0.1:$RGW_PORT/" || { echo "radosgw did not come up; see $DIR/log" >&2; exit 1; }
  radosgw-admin -c "$CONF" user create --uid=test --display-name=test \
    --access-key="$ACCESS_KEY" --secret-key="$SECRET_KEY" > "$DIR/log/user-create.json"
  say "S3 ready at http://127.0.0.1:$RGW_PORT"
fi
if [ "$WITH_CEPHFS" = 1 ]; then
  # The pools first, then the file system, then the MDS that serves it.
  mkdir -p "$DIR/mds.a"
  { $C osd pool create cephfs_metadata 8 && $C osd pool create cephfs_data 8 &&
    $C fs new cephfs cephfs_metadata cephfs_data; } > "$DIR/log/fs-new.out" 2>&1 ||
    { cat "$DIR/log/fs-new.out" >&2; exit 1; }
  start mds.a ceph-mds -i a
  for i in $(seq 120); do $C mds stat 2>/dev/null | grep -q 'up:active' && break; sleep 0.5; done
  $C mds stat | grep -q 'up:active' || { echo "mds did not become active; see $DIR/log" >&2; exit 1; }
  say "CephFS up (mds.a active)"
  if [ "$FUSE_MOUNT" = 1 ]; then
    # ceph-fuse -f stays in the foreground, so its PID is ours to stop; it is stopped
    # (after unmounting) before the MDS and the OSDs by stop-ceph.sh.
    mkdir -p "$DIR/mnt"
    start fuse ceph-fuse --id admin --client-mountpoint=/ "$DIR/mnt"
    for i in $(seq 60); do mountpoint -q "$DIR/mnt" && break; kill -0 "$(cat "$DIR/run/fuse.pid")" || break; sleep 0.5; done
    mountpoint -q "$DIR/mnt" || { echo "ceph-fuse mount failed; see $DIR/log/fuse.out" >&2; exit 1; }
    say "CephFS mounted at $DIR/mnt"
  fi
fi
if [ -n "${WATCH_PID:-}" ]; then
  setsid bash -c 'while kill -0 '"$WATCH_PID"' 2>/dev/null && [ -d "$1/run" ]; do sleep 1; done
    "$2/stop-ceph.sh" "$1" >/dev/null 2>&1; [ "$3" = 1 ] && rm -rf "$1"' watchdog "$DIR" "$HERE" \
    "${WATCH_RM:-0}" </dev/null >/dev/null 2>&1 &
  echo $! > "$DIR/watchdog.pid"
fi
cat > "$DIR/env" <<ENV
export CEPH_CONF=$CONF
export CEPH_KEYRING=$KR
export KVTIER_S3_ENDPOINT=http://127.0.0.1:$RGW_PORT
export AWS_ACCESS_KEY_ID=$ACCESS_KEY
export AWS_SECRET_ACCESS_KEY=$SECRET_KEY
export AWS_DEFAULT_REGION=us-east-1
ENV
[ "$FUSE_MOUNT" = 1 ] && echo "export KVTIER_CEPHFS_MNT=$DIR/mnt" >> "$DIR/env"
echo "source $DIR/env for CEPH_CONF etc.; stop with: $HERE/stop-ceph.sh $DIR"
