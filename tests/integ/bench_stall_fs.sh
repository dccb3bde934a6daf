#!/bin/bash
# kvt-test-labels: server
#
# bench_stall_fs.sh - `kvtier bench` on a real device that stops answering: the fs and
# nvme tiers on tests/fuse/slowfs, whose calls hang from 2 s into the run the way a
# dead NFS server's or disk's do (the tier's threads sit in the kernel; no signal gets
# them out). Before every tier call had a deadline and close a bound, such a run never
# printed its result. Now it must print its JSON within --seconds + ramp +
# store.sync_timeout_ms (close gives up on the stuck tier) + slack, with the failed
# operations and the deadline misses counted; the process itself exits once the mount
# answers again. Then a slow but working mount (every data call delayed 30 ms): the run
# completes with no failure (deadlines follow the measured latency).
# Exit 0 pass, 1 fail, 77 skip (no kvtier, jq, slowfs or /dev/fuse; a failure under
# CI=true, see CMakeLists.txt).
set -u
. "$(dirname "$0")/lib/jq.sh"
KVT_BIN=${KVT_BIN:-build}
KVT=$KVT_BIN/kvtier
[ -x "$KVT" ] || { echo "skip: $KVT not built"; exit 77; }
command -v jq >/dev/null || { echo "skip: jq missing"; exit 77; }
. "$(dirname "$0")/lib/slowfs.sh"
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d)
trap 'slowfs_stop; rm -rf "$tmp"' EXIT
SECONDS_RUN=4
SYNC_MS=2000
# Slack for a loaded machine: alone the fs run printed its JSON 8.2 s after t0 (4.5 s of
# run, 1.5 s for close's wait for the late removes, 2 s for close's sync, 0.2 s), next to
# two other tests in CI 10.5 s (2026-12-05, on a slower VM).
SLACK_MS=4000
# Under a sanitizer the store's start-up and the writes through FUSE before the stall are
# several times slower (ASan: 10.3 s against the 9.5 s bound, once in CI).
case "$KVT_BIN" in *asan* | *tsan*) SLACK_MS=6000 ;; esac
# Deadlines are capped (store.tier_timeout_ms) so the bound below is explicit: without the
# cap they grow with the latencies measured through FUSE, and a loaded machine's run took
# 10-19 s.
CAP_MS=1500
COMMON=(--chunk-bytes 64K --set-bytes 8M --queue-depth 8 --read-pct 0 --rounds 1 --no-ref
	--json --set store.sync_timeout_ms=$SYNC_MS --set store.tier_timeout_ms=$CAP_MS)

# A bench still running past the bound: where its threads are, for the failure's log
# (kernel stacks as root; user stacks if gdb is installed - non-stop, as an all-stop attach
# waits for threads stuck in the FUSE mount; a gdb stuck there too is killed 5 s after
# its 60 s), and what the bench said last.
dump_threads() {
	echo "--- the bench (pid $1) after 60 s: its threads"
	for t in /proc/$1/task/*; do
		echo "thread ${t##*/} $(cat $t/comm 2>/dev/null) wchan=$(cat $t/wchan 2>/dev/null)"
		sed 's/^/    /' $t/stack 2>/dev/null | head -12
	done
	command -v gdb >/dev/null && timeout -k 5 60 gdb -batch -ex "set non-stop on" -ex "attach $1" \
		-ex "interrupt -a" -ex "shell sleep 2" -ex "thread apply all bt" -ex "detach" 2>&1 |
		grep -E '^(Thread|#)' | head -150
	echo "--- its stderr (last 30 lines)"
	tail -30 "$tmp/err"
	echo "---"
}

start() { slowfs_start "$@"; local rc=$?; [ $rc = 77 ] && exit 77; [ $rc = 0 ] || fail "slowfs did not mount"; }

for tier in fs nvme; do
	start
	rm -f "$tmp/out" "$tmp/err" # the last tier's JSON must not count as this one's
	# Stall once the bench is writing: a fixed delay from launch ran into a loaded
	# machine's start-up (the store's open), which ends in an error, not in a result.
	# The time limit counts from the first object (fs: under v1/) or preallocated slot
	# (nvme: pool/*.slot) on the device, which only an open store writes: any file at all
	# included the lock file the open starts with, and a stall 1.5 s after it could still
	# catch the open on a slow machine.
	rm -f "$tmp/t0"
	( for _ in $(seq 1 600); do
		[ "$(find "$SLOWFS_BACK" -type f \( -path '*/v1/*' -o -name '*.slot' -o -name '*.kvt' \) \
			2>/dev/null | wc -l)" -ge 1 ] && break
		sleep 0.05
	  done; date +%s%N >"$tmp/t0"; sleep 1.5; slowfs_stall ) &
	stopper=$!
	"$KVT" bench --tier $tier --dir "$SLOWFS_MNT/b" --seconds $SECONDS_RUN "${COMMON[@]}" \
		>"$tmp/out" 2>"$tmp/err" &
	bench=$!
	for _ in $(seq 1 600); do # 60 s at most
		[ -s "$tmp/out" ] && break
		kill -0 $bench 2>/dev/null || break
		sleep 0.1
	done
	t0=$(cat "$tmp/t0" 2>/dev/null) || fail "$tier: the bench never wrote to the device"
	ms=$(( ($(date +%s%N) - t0) / 1000000 ))
	[ -s "$tmp/out" ] || ! kill -0 $bench 2>/dev/null || dump_threads $bench
	wait $stopper
	slowfs_resume
	wait $bench
	brc=$?
	echo "$tier: JSON after $ms ms (--seconds $SECONDS_RUN), exit $brc once the mount answered"
	# --seconds and its ramp (the run is as long whenever the stall comes), two capped
	# waits - the circuit breaker's probe (or the flush after the phase) still out when the
	# phase ends, and close's wait for the removes the stalled tier owes
	# (src/engine.c, close step 3b: the whole cap whenever a remove is late, as this write
	# phase's are) - then close giving up on the stuck tier (store.sync_timeout_ms), and
	# slack. (Until 2026-12-05 the bound had the stall's 1.5 s offset in place of the sync
	# timeout; until 2026-12-07 it had one cap, not two, and a loaded CI run took 12,083 ms
	# against its 12,000: the slack was absorbing a term of the design - a review.)
	[ "$ms" -lt $((SECONDS_RUN * 1000 + 500 + 2 * CAP_MS + SYNC_MS + SLACK_MS)) ] || fail "$tier: took $ms ms"
	j=$(tail -1 "$tmp/out")
	# (writes before the stall: objects on the device; write_iops can be 0 when a loaded
	# machine's start-up ran into the stall before the measured phase)
	[ "$(find "$SLOWFS_BACK" -type f | wc -l)" -gt 0 ] || fail "$tier: nothing written before the stall"
	echo "$j" | jqe --arg t $tier '.tier == $t and .errors > 0 and .deadline_misses > 0' >/dev/null ||
		fail "$tier: no JSON with failures and deadline misses counted: $j"
	[ $brc != 0 ] || fail "$tier: exit status 0 with failures"
	grep -q "missed its deadline" "$tmp/err" || fail "$tier: no deadline reported"
	echo "ok: $(echo "$j" | jq -c '{errors, deadline_misses, write_iops}')"
	slowfs_stop
done

# slow, not stalled: every data call takes 30 ms more; nothing may fail
start 30
"$KVT" bench --tier fs --dir "$SLOWFS_MNT/b" --seconds 1.5 "${COMMON[@]}" >"$tmp/out" 2>"$tmp/err" ||
	fail "slow mount: bench failed: $(tail -3 "$tmp/err")"
j=$(tail -1 "$tmp/out")
echo "$j" | jqe '.errors == 0 and .deadline_misses == 0 and .write_iops > 0' >/dev/null ||
	fail "slow mount: $j"
echo "slow mount ok: $(echo "$j" | jq -c '{write_iops, write_p99_us, errors}')"
slowfs_stop
echo "ok"
