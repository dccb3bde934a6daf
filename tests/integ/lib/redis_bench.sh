#!/bin/bash
# redis_bench.sh - the redis tier against redis-benchmark, measured in the same run on the
# same server: SET and GET of SIZE-byte values with INFLIGHT requests in flight over CONNS
# connections (redis-benchmark: -c CONNS -P INFLIGHT/CONNS). Prints one JSON line per size
# with both figures and their ratio.
#   usage: redis_bench.sh BUILD_DIR [SECONDS] [INFLIGHT] [CONNS] [SIZES...]
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/redis.sh"
bin=${1:?build dir}/integ_tier_redis
secs=${2:-3}
inflight=${3:-16}
conns=${4:-4}
shift $(( $# < 4 ? $# : 4 ))
sizes=("$@")
[ ${#sizes[@]} -eq 0 ] && sizes=(65536 1048576 8388608 33554432)
command -v redis-benchmark >/dev/null || { echo "SKIP: redis-benchmark missing" >&2; exit 77; }
redis_start || exit $?
trap redis_stop EXIT
pipe=$(( inflight / conns )); [ $pipe -lt 1 ] && pipe=1
for size in "${sizes[@]}"; do
	# about as many requests as the tier gets done in SECONDS
	n=$(( 1500000000 * secs / size / 2 )); [ $n -lt 200 ] && n=200; [ $n -gt 200000 ] && n=200000
	rb=$(redis-benchmark -h 127.0.0.1 -p "$REDIS_PORT" -c "$conns" -P "$pipe" -d "$size" \
		-n "$n" -t set,get --csv 2>/dev/null)
	rb_set=$(echo "$rb" | awk -F, '/"SET"/ {gsub(/"/,"",$2); print $2}')
	rb_get=$(echo "$rb" | awk -F, '/"GET"/ {gsub(/"/,"",$2); print $2}')
	redis-cli -p "$REDIS_PORT" flushall >/dev/null
	kv=$("$bin" --bench "$REDIS_URL" "$size" "$inflight" "$secs" "$conns") || exit 1
	kv_set=$(echo "$kv" | sed 's/.*"set_ops":\([0-9.]*\).*/\1/')
	kv_get=$(echo "$kv" | sed 's/.*"get_ops":\([0-9.]*\).*/\1/')
	redis-cli -p "$REDIS_PORT" flushall >/dev/null
	awk -v s="$size" -v q="$inflight" -v c="$conns" -v ks="$kv_set" -v kg="$kv_get" \
		-v rs="$rb_set" -v rg="$rb_get" 'BEGIN {
		printf "{\"size\":%d,\"inflight\":%d,\"conns\":%d,\"kvtier_set_ops\":%.1f,\"redis_benchmark_set_ops\":%.1f,\"set_ratio\":%.2f,\"kvtier_get_ops\":%.1f,\"redis_benchmark_get_ops\":%.1f,\"get_ratio\":%.2f,\"kvtier_get_MBps\":%.0f}\n",
		s, q, c, ks, rs, (rs > 0 ? ks / rs : 0), kg, rg, (rg > 0 ? kg / rg : 0), kg * s / 1e6 }'
done
