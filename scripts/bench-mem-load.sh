#!/usr/bin/env bash
# Does the guest's own memory copying slow this machine's disk? fio alone, writing 2 MiB
# objects 32 in flight over preallocated files (kvtier bench's NVMe reference shape), then
# the same fio next to build/mem_load_bench at a 30 % and a 100 % duty of one core, in
# rotating order, ROUNDS times. One line per run: load, fio GiB/s. docs/BENCHMARKS.md
# ("The machine") has the numbers. No kvtier code runs in the measurement.
#   scripts/bench-mem-load.sh [ROUNDS] [DIR]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
ROUNDS=${1:-3}
D=$(mktemp -d "${2:-/var/tmp}/kvt-memload-XXXXXX")
trap 'rm -rf "$D"' EXIT
B=$("$ROOT/scripts/build.sh" release | tail -1)
BS=2101248 N=512
export GLIBC_TUNABLES=glibc.malloc.hugetlb=1
fio --name=layout --directory="$D" --ioengine=io_uring --direct=1 --bs=$BS --iodepth=32 \
	--rw=write --nrfiles=$N --filesize=$BS --size=$((BS * N)) --output-format=terse >/dev/null
run() {
	fio --name=ref --directory="$D" --ioengine=io_uring --direct=1 --bs=$BS --iodepth=32 \
		--rw=randwrite --nrfiles=$N --filesize=$BS --size=$((BS * N)) \
		--file_service_type=random --time_based --runtime=5s --ramp_time=0.5s \
		--output-format=json | jq -r '.jobs[0].write.bw_bytes / 1073741824'
}
for r in $(seq "$ROUNDS"); do
	for duty in 0 0.3 1.0; do
		pid=""
		if [ "$duty" != 0 ]; then
			"$B/mem_load_bench" 6.5 "$duty" >/dev/null &
			pid=$!
		fi
		printf '{"round":%d,"mem_load_duty":%s,"fio_write_gibps":%.3f}\n' "$r" "$duty" "$(run)"
		[ -n "$pid" ] && wait "$pid"
	done
done
