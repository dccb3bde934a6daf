#!/usr/bin/env bash
# bench_accounting.sh - `kvtier bench`'s arithmetic against its reference (issue #11: a ratio
# must compare like with like): (a) both sides' GiB/s count the same bytes per operation
# (the object, chunk + 4 KiB header, as fio's --bs; dram: the chunk, as memcpy), so GiB/s
# ratios are operation ratios - kvtier once counted the chunk alone, 5.9 % less at 64 KiB;
# (b) a reference round that fails or measures nothing is left out of the reference's mean
# and the round range, counted in ref_failed_rounds and the exit status - it once counted
# as 0 GiB/s, so one failed round of three raised the ratio 1.5x, exit 0; (c) a queue depth
# above half the working set is capped on both sides and said so - the phase once capped
# kvtier alone while fio ran at the depth asked for and the JSON claimed both had.
set -euo pipefail
. "$(dirname "$0")/lib/jq.sh"
K="${KVT_BIN:-build}/kvtier"
[ -x "$K" ] || { echo "skip: $K not built"; exit 77; }
for c in jq fio; do
	command -v $c >/dev/null || { echo "FAIL: $c missing (scripts/deps.sh installs it)"; exit 1; }
done
T=$(mktemp -d "${KVT_TEST_DIR:-/var/tmp}/kvt-bench-acct-XXXXXX")
trap 'rm -rf "$T"' EXIT
fail() { echo "bench_accounting: FAIL: $*"; exit 1; }

# (a) bytes per operation: GiB/s x 2^30 / op/s on each side, within 0.1 % of each other
j=$("$K" bench --tier nvme --dir "$T/a" --chunk-bytes 64K --set-bytes 16M --queue-depth 4 \
	--seconds 0.5 --rounds 1 --ramp 0.1 --read-pct 0 --fsync none --json 2>"$T/err" |
	tail -1) || fail "nvme bench: $(cat "$T/err")"
echo "$j" | jqe '.object_bytes == 69632 and .write_iops > 0 and .ref_write_iops > 0
	and ((.write_gibps * 1073741824 / .write_iops) / .object_bytes - 1 | fabs) < 0.001
	and ((.ref_write_gibps * 1073741824 / .ref_write_iops) / .object_bytes - 1 | fabs) < 0.001' \
	>/dev/null || fail "nvme: bytes per operation differ: $(echo "$j" |
	jq -c '{object_bytes, kvtier: (.write_gibps * 1073741824 / .write_iops),
		fio: (.ref_write_gibps * 1073741824 / .ref_write_iops)}')"
j=$("$K" bench --tier dram --chunk-bytes 64K --set-bytes 8M --seconds 0.2 --rounds 1 \
	--read-pct 0 --json 2>"$T/err" | tail -1) || fail "dram bench: $(cat "$T/err")"
echo "$j" | jqe '((.write_gibps * 1073741824 / .write_iops) / .chunk_bytes - 1 | fabs) < 0.001
	and ((.ref_write_gibps * 1073741824 / .ref_write_iops) / .chunk_bytes - 1 | fabs) < 0.001' \
	>/dev/null || fail "dram: bytes per operation differ: $j"

# (b) a fio first on PATH that answers for the measured runs (--output-format=json): round 1
# at exactly 1 GiB/s of writes, round 2 fails (exit 1), round 3 exits 0 having measured no
# write; the layout run (terse output) does nothing
mkdir -p "$T/shim"
cat >"$T/shim/fio" <<EOF
#!/bin/sh
case " \$* " in *" --output-format=json "*) ;; *) exit 0 ;; esac
n=\$(( \$(cat "$T/calls" 2>/dev/null || echo 0) + 1 ))
echo \$n >"$T/calls"
[ \$n = 2 ] && exit 1
bw=1073741824; [ \$n = 3 ] && bw=0
p='"lat_ns" : { "percentile" : { "50.000000" : 1000000, "99.000000" : 2000000, "99.900000" : 3000000 } }'
echo "{ \"jobs\" : [ { \"read\" : { \"bw_bytes\" : 0, \"iops\" : 0.0, \$p },"
echo "  \"write\" : { \"bw_bytes\" : \$bw, \"iops\" : \$((bw / 69632)).0, \$p } } ] }"
EOF
chmod +x "$T/shim/fio"
rc=0
PATH="$T/shim:$PATH" "$K" bench --tier nvme --dir "$T/b" --chunk-bytes 64K --set-bytes 16M \
	--queue-depth 4 --seconds 0.6 --rounds 3 --ramp 0.1 --read-pct 0 --fsync none --json \
	>"$T/out" 2>"$T/err" || rc=$?
[ "$(cat "$T/calls")" = 3 ] || fail "the fio shim ran $(cat "$T/calls") times, not 3"
j=$(tail -1 "$T/out")
echo "$j" | jqe '.ref_failed_rounds == 2 and .ref_write_gibps == 1 and .errors == 0
	and .run_round_ratio_min > 0 and .run_round_ratio_min == .run_round_ratio_max
	and (.write_ratio - .write_gibps | fabs) < 0.0002' >/dev/null ||
	fail "failed reference rounds: $j"
[ $rc = 1 ] || fail "exit $rc with two failed reference rounds, expected 1"
grep -q "did not measure writes in round 3" "$T/err" || fail "round 3 not reported: $(cat "$T/err")"

# (c) 8 objects in the working set, --queue-depth 8: 4 in flight on both sides, and said so
: >"$T/calls"
cat >"$T/shim/fio" <<EOF
#!/bin/sh
echo "fio \$*" >>"$T/fioargs"
exec "$(command -v fio)" "\$@"
EOF
j=$(PATH="$T/shim:$PATH" "$K" bench --tier nvme --dir "$T/c" --chunk-bytes 256K \
	--set-bytes 2M --queue-depth 8 --seconds 0.3 --rounds 1 --ramp 0.1 --read-pct 0 \
	--fsync none --json 2>"$T/err" | tail -1) || fail "capped bench: $(cat "$T/err")"
echo "$j" | jqe '.objects == 8 and .queue_depth == 4 and .bytes_in_flight == 4 * .object_bytes' \
	>/dev/null || fail "queue depth over half the working set: $j"
grep -- "--rw=randwrite" "$T/fioargs" | grep -q -- "--iodepth=4 " ||
	fail "fio not at iodepth 4: $(cat "$T/fioargs")"
grep -q "more than half the working set" "$T/err" || fail "the cap is not said: $(cat "$T/err")"
echo "bench_accounting: ok"
