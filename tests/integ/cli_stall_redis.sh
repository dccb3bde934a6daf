#!/bin/bash
# kvt-test-labels: server
#
# cli_stall_redis.sh - `kvtier ls` and `verify` on a Redis tier: they list its objects
# (SCAN under redis.prefix, src/tier_redis.c) and check them, and against a server that
# stops answering (SIGSTOP: connections accepted, nothing comes back) each reports the
# tier in an error line within store.sync_timeout_ms plus slack and exits non-zero -
# before, a Redis tier was silently skipped ("0 objects"). `kvtier stat` asks the tier once
# and names it in an error line, exit 1, when it does not answer (stopped or killed).
# Exit 0 pass, 1 fail, 77 skip (no kvtier, jq or redis-server; a failure under CI=true).
set -u
. "$(dirname "$0")/lib/jq.sh"
KVT=${KVT_BIN:-build}/kvtier
. "$(dirname "$0")/lib/redis.sh"
redis_test_setup
BOUND=1500
SLACK=3000 # close waits for the listing left running (up to the bound again), start-up
case "${KVT_BIN:-build}" in *asan* | *tsan*) SLACK=6000 ;; esac # start-up under a sanitizer

S=(--tiers redis --set redis.url=$REDIS_URL --set model.layers=4 --set model.kv_heads=2 --set model.head_dim=64)
"$KVT" session save --synthetic 4096 "${S[@]}" >/dev/null 2>&1 || fail "session save into Redis failed"
n=$("$KVT" ls "${S[@]}" --json | tail -1 | jq .objects)
[ "${n:-0}" -gt 0 ] || fail "ls listed nothing the session stored"
v=$("$KVT" verify "${S[@]}" --json | tail -1)
echo "$v" | jqe --argjson n "$n" '.objects == $n and .bad == 0' >/dev/null ||
	fail "verify: $v (ls: $n objects)"
echo "listed and verified $n objects"

kill -STOP "$REDIS_PID"
for c in ls verify; do
	t0=$(date +%s%N)
	timeout 60 "$KVT" $c "${S[@]}" --set store.sync_timeout_ms=$BOUND \
		--set redis.timeout_ms=30000 >"$tmp/out" 2>"$tmp/err"
	crc=$?
	ms=$(( ($(date +%s%N) - t0) / 1000000 ))
	echo "stopped server: kvtier $c exit $crc after $ms ms: $(grep "kvtier $c:" "$tmp/err")"
	[ $crc = 124 ] && fail "$c did not return within 60 s"
	[ $crc != 0 ] || fail "$c: exit status 0"
	[ "$ms" -lt $((2 * BOUND + SLACK)) ] || fail "$c took $ms ms"
	grep -q "kvtier $c: tier redis: listing failed" "$tmp/err" || fail "$c: $(cat "$tmp/err")"
done

# stat: counters alone cannot tell a dead server from an idle one (the tier connects on
# first use), so it asks the tier once and says which one does not answer
check_stat() { # what: stopped|killed
	t0=$(date +%s%N)
	timeout 60 "$KVT" stat "${S[@]}" --json --set store.sync_timeout_ms=$BOUND \
		--set redis.timeout_ms=30000 >"$tmp/out" 2>"$tmp/err"
	crc=$?
	ms=$(( ($(date +%s%N) - t0) / 1000000 ))
	echo "$1 server: kvtier stat exit $crc after $ms ms: $(grep "kvtier stat:" "$tmp/err")"
	[ $crc = 1 ] || fail "stat ($1): exit status $crc"
	[ "$ms" -lt $((BOUND + SLACK)) ] || fail "stat ($1) took $ms ms"
	grep -q "kvtier stat: tier redis does not answer" "$tmp/err" || fail "stat: $(cat "$tmp/err")"
	tail -1 "$tmp/out" | jqe '.tiers[] | select(.name == "redis") | .reachable == false' \
		>/dev/null || fail "stat ($1) JSON: $(cat "$tmp/out")"
}
check_stat stopped
kill -CONT "$REDIS_PID"
"$KVT" stat "${S[@]}" --json | tail -1 | jqe 'all(.tiers[]; .reachable)' >/dev/null ||
	fail "stat after SIGCONT: not every tier reachable"
redis_kill
check_stat killed
echo ok
