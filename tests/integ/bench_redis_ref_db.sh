#!/bin/bash
# kvt-test-labels: server
#
# bench_redis_ref_db.sh - `kvtier bench --tier redis` measures redis-benchmark as its
# reference, which writes keys "key:<digits>" into a database and must clean up after
# itself without touching anything it did not write. It used to run in db 15 and FLUSHDB
# it afterwards: a store in db 15 lost all its objects, and any other key there went too.
# Here the tier uses db 15 and holds a saved session plus an unrelated key, db 14 holds an
# unrelated key: after the bench all of them are still there, the reference ran (a ratio
# in the JSON) in db 13, the highest empty database that is not the tier's, and left
# nothing there. The same with a URL without "redis://", as the tier takes it.
# Exit 0 pass, 1 fail, 77 skip (no kvtier binary, jq or redis-server; a failure under
# CI=true, see CMakeLists.txt).
set -u
. "$(dirname "$0")/lib/jq.sh"
KVT=${KVT_BIN:-build}/kvtier
. "$(dirname "$0")/lib/redis.sh"
redis_test_setup

url="$REDIS_URL/15"
cli() { redis-cli -p "$REDIS_PORT" "$@"; }
"$KVT" session save --synthetic 1024 --tiers redis --set redis.url="$url" \
	--set model.layers=2 >"$tmp/save" 2>&1 || fail "session save: $(cat "$tmp/save")"
cli -n 15 set unrelated:key keep >/dev/null
cli -n 14 set other:key keep >/dev/null
before15=$(cli -n 15 dbsize)
[ "$before15" -ge 2 ] || fail "db 15 holds $before15 keys before the bench"
# A short write bench of the tier at URL $1 and its reference: fails unless both ran.
bench_with_ref() {
	timeout 120 "$KVT" bench --tier redis --set redis.url="$1" --chunk-bytes 64K \
		--set-bytes 4M --queue-depth 8 --seconds 0.5 --ramp 0 --read-pct 0 --rounds 1 \
		--json >"$tmp/out" 2>"$tmp/err" || fail "bench of $1: $(cat "$tmp/err")"
	j=$(tail -1 "$tmp/out")
	echo "$j" | jqe '.tier == "redis" and .ref_write_gibps > 0' >/dev/null ||
		fail "no reference measured for $1: $j / $(cat "$tmp/err")"
}
bench_with_ref "$url"
[ "$(cli -n 15 get unrelated:key)" = keep ] || fail "db 15's unrelated key is gone"
[ "$(cli -n 14 get other:key)" = keep ] || fail "db 14's key is gone"
"$KVT" session resume --synthetic 1024 --tiers redis --set redis.url="$url" \
	--set model.layers=2 >"$tmp/resume" 2>&1 || fail "the saved session is gone: $(cat "$tmp/resume")"
left=$(cli -n 13 dbsize)
[ "$left" = 0 ] || fail "the reference left $left keys in db 13"

# The reference reads redis.url as the tier does (src/redis_url.c): it once parsed its own
# way and found no server in a URL without "redis://", which the tier takes.
bench_with_ref "127.0.0.1:$REDIS_PORT/15"
[ "$(cli -n 15 get unrelated:key)" = keep ] || fail "db 15's unrelated key is gone (second bench)"
left=$(cli -n 13 dbsize)
[ "$left" = 0 ] || fail "the second reference left $left keys in db 13"
echo "ok: db 15 kept its $before15 keys' worth (session resumed), db 14 its key, db 13 clean; a URL without the scheme measured too"
