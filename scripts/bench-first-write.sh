#!/usr/bin/env bash
# How a file's blocks are first written, and how fast they are overwritten afterwards.
# Lays out three sets of N files of one object each (2 MiB + 4 KiB) with fio, one way per
# set, then overwrites each set with the same fio job `kvtier bench`'s reference runs
# (io_uring, O_DIRECT, random files, one I/O = one file, iodepth 32), the sets in turn,
# ROUNDS times. Why: on the virtual disk of docs/BENCHMARKS.md ("How a slot is first
# written") the layout decided the overwrite speed, so kvtier's slots and fio's files
# must be laid out alike, and this shows which layout is fast on a given disk.
#   scripts/bench-first-write.sh [DIR (/var/tmp)] [N (1024)] [ROUNDS (3)] [SECONDS (4)]
# Prints one line per set and round: "<layout> <round> <MiB/s>".
set -euo pipefail
BASE=${1:-/var/tmp}
N=${2:-1024}
ROUNDS=${3:-3}
SECS=${4:-4}
BS=2101248
W=$(mktemp -d "$BASE/kvt-first-write-XXXXXX")
trap 'rm -rf "$W"' EXIT
export GLIBC_TUNABLES=glibc.malloc.hugetlb=1 # as kvtier bench runs fio
common=(--bs=$BS --rw=write --nrfiles="$N" --filesize=$BS --size=$((BS * N)) --output-format=terse)
layout() { # NAME FIO-ARGS...: one file set, laid out one way
	local name=$1; shift
	mkdir -p "$W/$name"
	fio --name=l --directory="$W/$name" "${common[@]}" "$@" >/dev/null
}
# O_DIRECT, one file at a time, each fdatasync'ed, blocks allocated by the write (how
# kvtier laid out its slots until 2026-12-07)
layout direct-sync --ioengine=psync --direct=1 --iomem_align=2m --fallocate=none --fdatasync=1
# the same through the page cache (how kvtier lays out its slots now, and the reference's
# files before its untimed O_DIRECT overwrite pass)
layout buffered-sync --ioengine=psync --fallocate=none --fdatasync=1
# O_DIRECT at queue depth 32 into fallocate'd files, no fsync (the reference's layout
# until 2026-12-07)
layout direct-qd32 --ioengine=io_uring --direct=1 --iomem_align=2m --iodepth=32
for r in $(seq "$ROUNDS"); do
	for name in direct-sync buffered-sync direct-qd32; do
		kib=$(fio --name=t --directory="$W/$name" --ioengine=io_uring --direct=1 \
			--iomem_align=2m --bs=$BS --iodepth=32 --rw=randwrite --nrfiles="$N" \
			--filesize=$BS --size=$((BS * N)) --file_service_type=random --time_based \
			--runtime="${SECS}s" --output-format=terse | tail -1 | cut -d';' -f48)
		echo "$name $r $((kib / 1024))"
	done
done
