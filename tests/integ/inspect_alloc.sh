#!/usr/bin/env bash
# Inspection costs what it looks at, not what the configuration could ask for: `kvtier stat`
# of a small store with admission.sketch_counters at 2^28 used to build the admission sketch
# (9.4 GB, 16 s) although inspection admits nothing, and with dram.bytes = 900 TiB it built
# slot tables for a pool no machine holds (17.5 GB, 90 s) before failing. Now the first
# succeeds in little memory (a peak under 1.5 GiB) and the second fails at
# once with one line naming dram.bytes and the machine's memory.
set -euo pipefail
K="$KVT_BIN/kvtier"
T=$(mktemp -d "${KVT_TEST_DIR:-/var/tmp}/kvt-inspect-alloc-XXXXXX")
trap 'rm -rf "$T"' EXIT
fail() { echo "inspect_alloc: $*"; exit 1; }
SMALL=(--set model.layers=2 --set dram.bytes=64MiB --set dram.hugepages=false)
"$K" session save --synthetic 1024 --dir "$T/s" "${SMALL[@]}" >/dev/null

# the command's exit status and peak resident memory (KiB): an address-space limit would
# do, but sanitizer builds reserve terabytes of shadow memory
read -r rc kib < <(cd "$T" && python3 -c 'import resource, subprocess, sys
p = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=open("err", "w"), timeout=60)
print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)' \
	"$K" stat --dir "$T/s" "${SMALL[@]}" --set admission.sketch_counters=268435456 \
	--set admission.min_freq=2)
[ "$rc" = 0 ] || fail "stat with a huge admission sketch configured: exit $rc: $(head -3 "$T/err")"
[ "$kib" -lt 1572864 ] || fail "stat with a huge admission sketch configured peaked at $kib KiB"
echo "ok: stat with admission.sketch_counters=2^28: peak $((kib / 1024)) MiB"

rc=0
start=$(date +%s%N)
timeout 30 "$K" stat --dir "$T/s" --set model.layers=2 --set dram.bytes=900TiB \
	>"$T/out" 2>"$T/err" || rc=$?
ms=$(( ($(date +%s%N) - start) / 1000000 ))
[ $rc != 0 ] && [ $rc != 124 ] || fail "dram.bytes=900TiB: exit $rc after $ms ms"
[ $ms -lt 5000 ] || fail "dram.bytes=900TiB took $ms ms to fail"
grep -q "dram.bytes is .* more than this machine's memory" "$T/err" ||
	fail "dram.bytes=900TiB: '$(head -3 "$T/err")'"
echo "ok: dram.bytes=900TiB refused in $ms ms: $(grep -m1 'dram.bytes' "$T/err")"
