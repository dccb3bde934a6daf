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
# the server stops answering 1.2 s into the run (the working set is small: populating it
# takes a fraction of a second)
( sleep 1.2; kill -STOP "$REDIS_PID" ) &
stopper=$!
t0=$(date +%s%N)
KVTIER_REDIS_URL=$REDIS_URL timeout 60 "$KVT" bench --tier redis --chunk-bytes 64K \
	--set-bytes 8M --queue-depth 8 --seconds $SECONDS_RUN --read-pct 0 --rounds 1 --no-ref \
	--json >"$tmp/out" 2>"$tmp/err"
brc=$?
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
wait "$stopper"
echo "bench against a stopped Redis: exit $brc after $ms ms (--seconds $SECONDS_RUN)"
[ $brc = 124 ] && fail "bench did not return within 60 s"
# --seconds plus a few deadlines (each ~1 s, the default floor, once the tier is measured; the breaker
# skips the tier in between) plus start-up: 4 s of slack
[ "$ms" -lt $((SECONDS_RUN * 1000 + 4000)) ] || fail "took $ms ms"
j=$(tail -1 "$tmp/out")
echo "$j" | jqe '.tier == "redis" and .errors > 0 and .deadline_misses > 0 and .write_iops > 0' >/dev/null ||
	fail "no JSON with failures counted and writes before the stop: $j"
grep -q "operations failed" "$tmp/err" || fail "failures not reported: $(cat "$tmp/err")"
grep -q "missed its deadline" "$tmp/err" || fail "no deadline reported: $(cat "$tmp/err")"
echo "ok: $(echo "$j" | jq -c '{errors, write_iops}')"
