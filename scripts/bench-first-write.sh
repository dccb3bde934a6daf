#!/usr/bin/env bash
# How a file's blocks are first written, and how fast they are overwritten afterwards.
# Lays out two sets of N files of one object each (2 MiB + 4 KiB), one file at a time,
# each fdatasync'ed once written:
#   direct    one O_DIRECT write per file (from 4 KiB pages, blocks allocated by the
#             write): how kvtier laid out its preallocated slots until 2026-12-07
#   buffered  one write through the page cache: how kvtier lays them out now, and how
#             `kvtier bench` lays out fio's files
# then overwrites each set with the job `kvtier bench`'s reference runs (fio, io_uring,
# O_DIRECT, random files, one I/O = one file, iodepth 32), the sets in turn, ROUNDS times.
# Why: on the virtual disk of docs/BENCHMARKS.md ("How a slot is first written") the way
# a slot was first written decided its overwrite speed ever after. (fio's own O_DIRECT
# layouts - psync or io_uring, hugepage or 4 KiB buffers - did not show it: the layout is
# written here by Python, as the reproduction that did.)
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
for how in direct buffered; do
	python3 - "$W/$how" "$how" "$N" "$BS" <<'PY'
import mmap, os, sys
d, how, n, bs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
os.makedirs(d)
buf = mmap.mmap(-1, bs)  # page-aligned zeros, as O_DIRECT needs
flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY | (os.O_DIRECT if how == "direct" else 0)
for i in range(n):
    fd = os.open(f"{d}/ref.0.{i}", flags, 0o600)
    if os.pwrite(fd, buf, 0) != bs:
        sys.exit(f"short write to {d}/ref.0.{i}")
    os.fdatasync(fd)
    os.close(fd)
PY
done
sync
sleep 3 # the disk settles after gigabytes first written (kvtier bench --settle)
export GLIBC_TUNABLES=glibc.malloc.hugetlb=1 # as kvtier bench runs fio
for r in $(seq "$ROUNDS"); do
	for how in direct buffered; do
		kib=$(fio --name=ref --directory="$W/$how" --ioengine=io_uring --direct=1 \
			--iomem_align=2m --bs=$BS --iodepth=32 --rw=randwrite --nrfiles="$N" \
			--filesize=$BS --size=$((BS * N)) --file_service_type=random --time_based \
			--runtime="${SECS}s" --output-format=terse | tail -1 | cut -d';' -f48)
		echo "$how $r $((kib / 1024))"
	done
done
