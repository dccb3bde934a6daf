#!/usr/bin/env bash
# stop-ceph.sh DIR - stops the daemons start-ceph.sh started, by the PIDs it recorded
# (never by name: other clusters may run on the same machine), after unmounting a ceph-fuse
# mount at DIR/mnt. SIGTERM, then SIGKILL after STOP_GRACE seconds (radosgw and the MDS are
# slow to stop). Safe to run twice or on a half-started DIR.
DIR=${1:?usage: $0 DIR}
GRACE=${STOP_GRACE:-5}
shopt -s nullglob
stop_pids() { # pidfiles...
  local pids=() f p i alive
  for f in "$@"; do [ -f "$f" ] || continue; p=$(cat "$f"); rm -f "$f"
    kill -0 "$p" 2>/dev/null && { kill "$p"; pids+=("$p"); }; done
  [ ${#pids[@]} = 0 ] && return 0
  for i in $(seq $((GRACE*2))); do alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break; sleep 0.5; done
  for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && { kill -9 "$p"; echo "SIGKILLed $p"; }; done
  echo "stopped: ${pids[*]}"
}
# The watchdog of start-ceph.sh (WATCH_PID) is not needed once we stop the cluster; when it
# is the watchdog that runs us, it is our parent and must not be killed.
if [ -f "$DIR/watchdog.pid" ]; then
  w=$(cat "$DIR/watchdog.pid"); rm -f "$DIR/watchdog.pid"
  [ "$w" != "$PPID" ] && kill "$w" 2>/dev/null
fi
# CephFS first: unmount DIR/mnt (and DIR/mnt* a test added, whose ceph-fuse PIDs it
# recorded as run/fuse*.pid) while the MDS and OSDs are still up, so ceph-fuse closes its
# session cleanly (lazily if something still holds the mount); then stop ceph-fuse and the
# MDS. fusermount -u works for callers that are not root too.
for m in "$DIR"/mnt*; do
  mountpoint -q "$m" 2>/dev/null || continue
  fusermount -u "$m" 2>/dev/null || umount "$m" 2>/dev/null ||
    umount -l "$m" 2>/dev/null || fusermount -uz "$m" 2>/dev/null
done
stop_pids "$DIR"/run/fuse*.pid
stop_pids "$DIR/run/mds.a.pid"
stop_pids "$DIR/run/rgw.a.pid"
stop_pids "$DIR"/run/osd.*.pid
stop_pids "$DIR"/run/*.pid
exit 0
