#!/usr/bin/env bash
# stop-ceph.sh DIR - stops the daemons start-ceph.sh started, by the PIDs it recorded
# (never by name: other clusters may run on the same machine). SIGTERM, then SIGKILL after
# STOP_GRACE seconds (radosgw is slow to stop). Safe to run twice or on a half-started DIR.
DIR=${1:?usage: $0 DIR}
GRACE=${STOP_GRACE:-5}
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
shopt -s nullglob
# The watchdog of start-ceph.sh (WATCH_PID) is not needed once we stop the cluster; when it
# is the watchdog that runs us, it is our parent and must not be killed.
if [ -f "$DIR/watchdog.pid" ]; then
  w=$(cat "$DIR/watchdog.pid"); rm -f "$DIR/watchdog.pid"
  [ "$w" != "$PPID" ] && kill "$w" 2>/dev/null
fi
stop_pids "$DIR/run/rgw.a.pid"
stop_pids "$DIR"/run/osd.*.pid
stop_pids "$DIR"/run/*.pid
exit 0
