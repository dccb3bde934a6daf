#!/bin/bash
# kvt-test-labels: server
#
# bench_stall_redis.sh - `kvtier bench` against a Redis that stops answering mid-run
# (SIGSTOP: connections stay open, nothing comes back). Before the engine put a deadline
# on every tier call, such a run never returned. Now it must finish within --seconds plus
# a few deadlines, print its JSON, and count the operations that failed.
# Exit 0 pass, 1 fail, 77 skip (no kvtier binary, jq or redis-server; a failure under
# CI=true, see CMakeLists.txt).
set -u
. "$(dirname "$0")/lib/jq.sh"
KVT=${KVT_BIN:-build}/kvtier
. "$(dirname "$0")/lib/redis.sh"
redis_test_setup

SECONDS_RUN=3
# The server stops answering once the bench is in its measured phase: after it stored its
# working set (8M of 64K objects: 128 keys; 100 seen, as replacements keep a few absent),
# plus 0.7 s of replacements. A fixed delay from
# launch landed in the store's start-up on a loaded CI box, or so late in the run that no
# deadline could pass before it ended. The engine's deadline (at most 1.5 s here) must be
# what gives up, not the Redis tier's own timeout: under a sanitizer the measured latency
# pushed the deadline past redis.timeout_ms, and failures were counted with no deadline miss.
t0=$(date +%s%N)
KVTIER_REDIS_URL=$REDIS_URL timeout 60 "$KVT" bench --tier redis --chunk-bytes 64K \
	--set-bytes 8M --queue-depth 8 --seconds $SECONDS_RUN --read-pct 0 --rounds 1 --no-ref \
	--set redis.timeout_ms=30000 --set store.tier_timeout_ms=1500 \
	--json >"$tmp/out" 2>"$tmp/err" &
bench=$!
for _ in $(seq 1 2000); do
	n=$(redis-cli -p "$REDIS_PORT" dbsize 2>/dev/null || echo 0)
	[ "${n:-0}" -ge 100 ] && break
	kill -0 "$bench" 2>/dev/null || break
	sleep 0.01
done
t_set=$(date +%s%N)
sleep 0.7
kill -STOP "$REDIS_PID"
wait "$bench"
brc=$?
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
ms_run=$(( ($(date +%s%N) - t_set) / 1000000 ))
echo "bench against a stopped Redis: exit $brc after $ms ms, $ms_run ms after its working set was stored (--seconds $SECONDS_RUN)"
[ $brc = 124 ] && fail "bench did not return within 60 s"
# --seconds plus a few deadlines (each ~1 s, the default floor, once the tier is measured; the breaker
# skips the tier in between) plus start-up: 4 s of slack
[ "$ms_run" -lt $((SECONDS_RUN * 1000 + 4000)) ] || fail "took $ms_run ms after the working set"
j=$(tail -1 "$tmp/out")
echo "$j" | jqe '.tier == "redis" and .errors > 0 and .deadline_misses > 0 and .write_iops > 0' >/dev/null ||
	fail "no JSON with failures counted and writes before the stop: $j"
grep -q "operations failed" "$tmp/err" || fail "failures not reported: $(cat "$tmp/err")"
grep -q "missed its deadline" "$tmp/err" || fail "no deadline reported: $(cat "$tmp/err")"
echo "ok: $(echo "$j" | jq -c '{errors, write_iops}')"
