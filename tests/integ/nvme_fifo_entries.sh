#!/usr/bin/env bash
# A FIFO planted where the NVMe tier opens a file by name (a log segment, one past the
# cycle, log/head, .kvtier.chains, .kvtier.budget) must not hang an open: a blocking open of a
# FIFO waits for a writer that never comes. Until 2026-12-04 `kvtier ls/verify` (read-only
# opens) hung on a FIFO segment or head, and any read-write open hung on a FIFO
# .kvtier.chains; until 2026-12-05 one with nvme.write_budget on a FIFO .kvtier.budget. Also: a
# resume whose stored prefix is shorter than its fetch window read an uninitialised slot
# (`session resume` crashed on a log with a damaged record in the middle of a segment).
# A FIFO at log/head fails the open, saying "<path>: not a regular file" (until 2026-12-04
# "Illegal seek"); so does a directory there, read-only or read-write. And a regular file larger than the tier's capacity (a sparse or damaged
# one) is kept and reported, not indexed: until 2026-12-04 a 1 TB sparse file named as an
# object made the next read-write open evict every object to fit it.
set -euo pipefail
K="$KVT_BIN/kvtier"
T=$(mktemp -d "${KVT_TEST_DIR:-/var/tmp}/kvt-fifo-XXXXXX")
trap 'rm -rf "$T"' EXIT
fail() { echo "nvme_fifo_entries: $*"; exit 1; }
S=(--set model.layers=2 --set model.kv_heads=2 --set model.head_dim=32 --set dram.bytes=64MiB
	--set nvme.log_max=256KiB --set nvme.bytes=128MiB --set nvme.segment_bytes=16MiB
	--set nvme.write_budget=1TiB)
"$K" session save --synthetic 2560 --dir "$T/p" "${S[@]}" >/dev/null
[ -f "$T/p/log/0.kvl" ] && [ -f "$T/p/.kvtier.chains" ] || fail "no log or chains file"
# A FIFO at log/head fails the open with a line that says what it is (until 2026-12-04:
# "log/head: Illegal seek").
head_said() {
	[ "$what" = log/head ] || return 0
	[ "$2" != 0 ] || fail "$1 opens with a $kind at log/head"
	grep -q "$T/w/log/head: not a regular file" "$T/err" && ! grep -q "Illegal seek" "$T/err" ||
		fail "$1, $kind at log/head: $(head -1 "$T/err")"
}
kind=FIFO
for what in log/0.kvl log/7.kvl log/head .kvtier.chains .kvtier.budget; do
	rm -rf "$T/w"; cp -a "$T/p" "$T/w"; rm -f "$T/w/$what"; mkfifo "$T/w/$what"
	for cmd in ls verify; do
		rc=0; timeout 20 "$K" $cmd --dir "$T/w" "${S[@]}" >/dev/null 2>"$T/err" || rc=$?
		[ $rc != 124 ] || fail "$cmd hangs on a FIFO at $what"
		head_said "$cmd" $rc
	done
	rc=0
	timeout 20 "$K" session resume --synthetic 2560 --dir "$T/w" "${S[@]}" >/dev/null \
		2>"$T/err" || rc=$?
	[ $rc != 124 ] || fail "a read-write open hangs on a FIFO at $what"
	head_said resume $rc
	echo "ok: FIFO at $what (resume exit $rc)"
done
# A directory at log/head: every open fails the same way, read-only or read-write (until
# 2026-12-04 a read-write open got EISDIR, took it for "no head" and voided the log).
what=log/head kind=directory
rm -rf "$T/w"; cp -a "$T/p" "$T/w"; rm -f "$T/w/log/head"; mkdir "$T/w/log/head"
sum() { find "$T/w" -type f -print0 | sort -z | xargs -0 md5sum; }
before=$(sum)
for cmd in ls verify resume; do
	args=($cmd); [ $cmd = resume ] && args=(session resume --synthetic 2560)
	rc=0; timeout 20 "$K" "${args[@]}" --dir "$T/w" "${S[@]}" >/dev/null 2>"$T/err" || rc=$?
	[ $rc != 124 ] || fail "$cmd hangs on a directory at log/head"
	head_said "$cmd" $rc
done
[ "$(sum)" = "$before" ] || fail "an open with a directory at log/head changed the log"
echo "ok: directory at log/head"
# A short stored prefix (3 of 10 chunks): the resume gets it, no crash.
rm -rf "$T/w"; "$K" session save --synthetic 768 --dir "$T/w" "${S[@]}" >/dev/null
out=$("$K" session resume --synthetic 2560 --dir "$T/w" "${S[@]}" --json) ||
	fail "resume of a 3-chunk prefix failed"
grep -q '"hit_chunks":3' <<<"$out" || fail "resume of a 3-chunk prefix: $out"
echo "ok: short prefix"
# An object file made 1 TB (sparse): a read-write open keeps every other object.
rm -rf "$T/b"
B=(--set model.layers=2 --set model.kv_heads=2 --set model.head_dim=32 --set dram.bytes=64MiB
	--set nvme.log_max=0 --set nvme.bytes=128MiB)
"$K" session save --synthetic 2560 --dir "$T/b" "${B[@]}" >/dev/null
mapfile -t objs < <(find "$T/b" -name '*.kvt' | sort)
[ ${#objs[@]} -ge 4 ] || fail "no object files to work with (${#objs[@]})"
truncate -s 1T "${objs[0]}"
"$K" session resume --synthetic 2560 --dir "$T/b" "${B[@]}" >/dev/null 2>"$T/err" || true
left=0
for f in "${objs[@]}"; do [ -e "$f" ] && left=$((left + 1)); done
[ $left = ${#objs[@]} ] ||
	fail "a 1 TB file among ${#objs[@]} objects: $left left after a read-write open"
echo "ok: a 1 TB file among ${#objs[@]} objects, all kept"
