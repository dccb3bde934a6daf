#!/usr/bin/env bash
# nvme_ro_race.sh - `kvtier verify` (a read-only open, which takes no lock) on an NVMe store
# that a writer is filling and evicting at the same time reports no damage. Until
# 2026-12-04 it called most objects "corrupt header" and exited 3: a writer recycles an
# evicted object's file for the next write, or reuses a log segment, while the inspection
# still reads the object through its index. The tier now checks after each read-only read
# that the object's name still holds the file read (or the segment its lap) and answers a
# miss otherwise (tier_nvme_ops.c, ro_read_current). Per-file objects, then the log; the
# writer is `kvtier bench` (16 KiB objects, 48 MiB working set in 96 MiB, writes only).
# Per file the race is rare here (the old code passed that half); nvme_ro_live.c makes both
# cases happen every time. Once the writer has stopped, verify checks every object ls lists
# (a check that took sound objects for gone would show there).
# Exit 0 pass, 1 fail, 77 skip (no kvtier binary).
set -u
K=${KVT_BIN:-build}/kvtier
[ -x "$K" ] || { echo "skip: $K not built"; exit 77; }
T=$(mktemp -d /var/tmp/kvt-ro-race-XXXXXX); W=
trap '[ -n "$W" ] && kill $W 2>/dev/null; wait 2>/dev/null; rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
jnum() { sed -n "s/.*\"$1\":\([0-9]*\).*/\1/p" | tail -1; }

race() { # name, then the store's --set options
	local name=$1; shift
	local d=$T/$name
	mkdir "$d"
	"$K" bench --tier nvme --dir "$d" --chunk-bytes 16K --queue-depth 16 --set-bytes 48M \
		--seconds ${KVT_RACE_SECONDS:-8} --rounds 1 --no-ref --read-pct 0 --fsync none \
		--set nvme.bytes=96M "$@" >"$T/w.$name" 2>&1 &
	W=$!
	local runs=0 seen=0 i
	for i in $(seq 200); do # the store exists once the writer has opened it
		[ -e "$d/.kvtier.lock" ] || [ -d "$d/log" ] && break
		kill -0 $W 2>/dev/null || break
		sleep 0.1
	done
	while kill -0 $W 2>/dev/null; do
		timeout 60 "$K" verify --dir "$d" --set nvme.bytes=96M "$@" --json >"$T/v" 2>&1
		local rc=$? bad objs
		bad=$(jnum bad <"$T/v"); objs=$(jnum objects <"$T/v")
		[ -z "$bad" ] && ! kill -0 $W 2>/dev/null && break # the bench ended mid-open
		[ $rc = 0 ] && [ "$bad" = 0 ] ||
			fail "$name: verify during writes: exit $rc, $(grep -c '"error"' "$T/v") bad, e.g. $(grep -m1 error "$T/v")"
		runs=$((runs + 1)); seen=$((seen + ${objs:-0}))
		timeout 60 "$K" ls --dir "$d" --set nvme.bytes=96M "$@" >/dev/null 2>"$T/ls" ||
			fail "$name: ls during writes: $(head -1 "$T/ls")"
	done
	wait $W || fail "$name: the writer failed: $(tail -2 "$T/w.$name")"
	W=
	echo "$name: $runs verify runs while writing, $seen objects checked, 0 bad"
	[ $runs -ge 1 ] && [ $seen -gt 0 ] || fail "$name: too few checks to mean anything"
	"$K" verify --dir "$d" --set nvme.bytes=96M "$@" --json >"$T/v" 2>&1 ||
		fail "$name: verify after the writer: $(tail -1 "$T/v")"
	local listed
	listed=$("$K" ls --dir "$d" --set nvme.bytes=96M "$@" 2>/dev/null | wc -l)
	[ "$(jnum objects <"$T/v")" -gt 0 ] || fail "$name: nothing stored"
	[ "$(jnum objects <"$T/v")" = "$listed" ] ||
		fail "$name: verify checked $(jnum objects <"$T/v") of the $listed objects ls lists"
}

race files
race log --set nvme.log_max=256K --set nvme.segment_bytes=16M
echo PASS
