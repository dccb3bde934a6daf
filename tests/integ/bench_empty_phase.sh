#!/usr/bin/env bash
# A bench phase with no reads (--read-pct 0) or no writes (--read-pct 100), with its
# memcpy reference: the latency lists of the missing kind are empty. qsort(NULL, 0, ...)
# on them is undefined behaviour, which the ASan+UBSan pass of this test aborts on.
set -euo pipefail
. "$(dirname "$0")/lib/jq.sh"
K="$KVT_BIN/kvtier"
T=$(mktemp -d "${KVT_TEST_DIR:-/var/tmp}/kvt-bench-empty-XXXXXX")
trap 'rm -rf "$T"' EXIT
fail() { echo "bench_empty_phase: $*"; exit 1; }
cd "$T"
for pct in 0 100; do
	out=$("$K" bench --tier dram --chunk-bytes 64K --set-bytes 8M --seconds 0.2 --rounds 1 \
		--read-pct "$pct" --json) || fail "--read-pct $pct exited $?"
	echo "$out" | tail -1 | jqe '.errors == 0' >/dev/null || fail "--read-pct $pct: $out"
	if [ "$pct" = 0 ]; then
		echo "$out" | tail -1 | jqe '.read_iops == 0 and .write_iops > 0' >/dev/null ||
			fail "write-only phase: $out"
	else
		echo "$out" | tail -1 | jqe '.write_iops == 0 and .read_iops > 0' >/dev/null ||
			fail "read-only phase: $out"
	fi
done
echo "bench_empty_phase: ok"
