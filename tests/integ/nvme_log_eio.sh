#!/usr/bin/env bash
# kvt-test-labels: server
#
# nvme_log_eio.sh - a read of a log segment that fails with EIO (tests/fuse/slowfs
# --eio-path/--eio-at: a bad sector under the store) fails the open with one line naming
# the segment and offset, and changes nothing; the log reads whole once the error is gone.
# Until 2026-12-04 a failed read was the end of what was written: at a commit record
# mid-segment the walk stopped there (`kvtier ls` listed only the objects before it, exit
# 0); in an object of one of the newest batches the batch was taken for torn and a
# read-write open zeroed its record - objects lost to what may be a transient error.
# So does one in the look past a stop (a damaged newest record: is there a chain after
# it?).
# Exit 0 pass, 1 fail, 77 skip (no kvtier, slowfs or /dev/fuse; a failure under CI=true).
set -u
KVT_BIN=${KVT_BIN:-build}
K=$KVT_BIN/kvtier
[ -x "$K" ] || { echo "skip: $K not built"; exit 77; }
. "$(dirname "$0")/lib/slowfs.sh"
fail() { echo "FAIL: $*"; exit 1; }
T=$(mktemp -d "${KVT_TEST_DIR:-/var/tmp}/kvt-log-eio-XXXXXX")
trap 'slowfs_stop; rm -rf "$T"' EXIT
S=(--set model.layers=2 --set model.kv_heads=2 --set model.head_dim=32 --set dram.bytes=64MiB
	--set nvme.log_max=256KiB --set nvme.bytes=128MiB --set nvme.segment_bytes=16MiB)
"$K" session save --synthetic 16384 --dir "$T/p" "${S[@]}" >/dev/null || fail "save"
seg=$T/p/log/0.kvl
count() { "$K" ls --dir "$1" "${S[@]}" --json | tail -1 | jq .objects; }
all=$(count "$T/p")
# The commit records of 0.kvl: the first at 4096, each batch's length at +48 in its record.
recs=() off=4096
while [ "$(dd if="$seg" bs=1 skip=$off count=7 2>/dev/null | tr -d '\0')" = KVTREC1 ]; do
	recs+=($off)
	off=$((off + $(od -An -tu8 -j $((off + 48)) -N8 "$seg" | tr -d ' ')))
done
[ ${#recs[@]} -ge 4 ] && [ "${all:-0}" -ge 4 ] ||
	fail "want 4 batches and objects to work with: ${#recs[@]} batches, $all objects"
sum() { find "$SLOWFS_BACK/st" -type f -print0 | sort -z | xargs -0 md5sum; }
# A record mid-segment; the first object of the newest batch (read back at open).
for at in ${recs[2]} $((${recs[-1]} + 4096)); do
	slowfs_start "" "" --eio-path /log/0.kvl --eio-at $at; rc=$?
	[ $rc = 77 ] && exit 77
	[ $rc = 0 ] || fail "slowfs did not mount"
	cp -a "$T/p" "$SLOWFS_BACK/st"
	before=$(sum)
	for cmd in ls resume; do
		args=(ls); [ $cmd = resume ] && args=(session resume --synthetic 16384)
		rc=0
		timeout 60 "$K" "${args[@]}" --dir "$SLOWFS_MNT/st" "${S[@]}" >"$T/out" 2>"$T/err" ||
			rc=$?
		[ $rc != 124 ] || fail "$cmd hangs on EIO at $at"
		[ $rc != 0 ] || fail "$cmd opens with EIO at offset $at of 0.kvl: $(tail -1 "$T/out")"
		grep -q "log segment 0.kvl: reading [0-9]* bytes at offset $at: Input/output error" \
			"$T/err" || fail "$cmd, EIO at $at: $(head -3 "$T/err")"
		echo "  $cmd: $(grep "0.kvl" "$T/err" | head -1)"
		[ "$(sum)" = "$before" ] || fail "$cmd with EIO at $at changed the store"
	done
	n=$(count "$SLOWFS_BACK/st") # the error gone: every object is there
	[ "$n" = "$all" ] || fail "the store after EIO at $at: $n of $all objects"
	slowfs_stop
	echo "ok: EIO at offset $at of 0.kvl fails the open, nothing changed"
done
# The newest record's length damaged (one bit, as integ.nvme_log_damaged does), EIO on the
# block after it, which the look past the stop reads: the open fails as for any read of
# the log, read-only or not, and nothing changes. Briefly (2026-12-04) that EIO was taken
# for "nothing past the stop": a read-write open zeroed the record and served what was
# before it, and the next open without the error voided the log (found by review).
last=${recs[-1]}
cp -a "$T/p" "$T/q"
b=$(od -An -tu1 -j $((last + 49)) -N1 "$T/q/log/0.kvl" | tr -d ' ')
printf "\\x$(printf %02x $((b ^ 0x20)))" |
	dd of="$T/q/log/0.kvl" bs=1 seek=$((last + 49)) conv=notrunc 2>/dev/null
want=$(count "$T/q")
[ "${want:-0}" -ge 1 ] && [ "$want" -lt "$all" ] || fail "damaged newest record: $want of $all"
at=$((last + 4096))
slowfs_start "" "" --eio-path /log/0.kvl --eio-at $at || fail "slowfs did not mount"
cp -a "$T/q" "$SLOWFS_BACK/st"
before=$(sum)
for cmd in ls resume; do
	args=(ls); [ $cmd = resume ] && args=(session resume --synthetic 16384)
	rc=0
	timeout 60 "$K" "${args[@]}" --dir "$SLOWFS_MNT/st" "${S[@]}" >"$T/out" 2>"$T/err" || rc=$?
	[ $rc != 124 ] || fail "$cmd hangs on EIO past the stop"
	[ $rc != 0 ] || fail "$cmd opens with EIO past the stop at $last"
	grep -q "log segment 0.kvl: reading [0-9]* bytes at offset $at: Input/output error" \
		"$T/err" || fail "$cmd, EIO past the stop: $(head -3 "$T/err")"
	[ "$(sum)" = "$before" ] || fail "$cmd with EIO past a stop changed the store"
done
slowfs_stop
n=$(count "$T/q")
[ "$n" = "$want" ] || fail "after EIO past the stop: $n objects, want $want"
echo "ok: EIO past the stop at $last fails the open, nothing changed ($n of $all objects without it)"
