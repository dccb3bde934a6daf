#!/usr/bin/env bash
# The kvtier command as scripts use it: --help on every subcommand, one-line errors with a
# non-zero exit, a store opened with --dir alone, ls/stat/verify/rm with --json, and
# verify finding (and with --drop removing) a corrupted and a truncated object.
set -euo pipefail
. "$(dirname "$0")/lib/jq.sh"
K="$KVT_BIN/kvtier"
T=$(mktemp -d "${KVT_TEST_DIR:-/var/tmp}/kvt-cli-XXXXXX")
trap 'rm -rf "$T"' EXIT
fail() { echo "cli: $*"; exit 1; }
SMALL=(--set model.layers=4 --set model.kv_heads=2 --set model.head_dim=64 --set dram.bytes=64MiB)

for c in bench config ls rm session stat verify; do
	"$K" "$c" --help | grep -q usage || fail "$c --help"
done
"$K" --version | grep -q "tiers: dram nvme" || fail "--version"
for bad in "ls --bogus" "bench --tier tape" "bench --chunk-bytes 1000" "verify --dir" "rm nothex" "nosuchcmd"; do
	if out=$("$K" $bad 2>&1); then fail "'$bad' succeeded"; fi
	[ "$(printf '%s\n' "$out" | wc -l)" -le 2 ] || fail "'$bad' printed more than a short error: $out"
done
if "$K" stat --config "$T/missing.ini" 2>"$T/err"; then fail "missing config accepted"; fi
grep -q "missing.ini" "$T/err" || fail "config error does not name the file"
printf '[nvme]\nqueue_depth = many\n' > "$T/bad.ini"
if "$K" stat --config "$T/bad.ini" 2>"$T/err"; then fail "bad config accepted"; fi
grep -q "bad.ini:2" "$T/err" || fail "config error has no line number: $(cat "$T/err")"

# A store on one directory, filled through the public API.
"$K" session save --synthetic 2560 --dir "$T/s" "${SMALL[@]}" >/dev/null
n=$("$K" ls --dir "$T/s" "${SMALL[@]}" --tiers nvme --json | tail -1 | jq .objects)
[ "$n" = 10 ] || fail "ls: $n objects, wanted 10"
"$K" stat --dir "$T/s" "${SMALL[@]}" --json | jqe '.tiers[1].name == "nvme" and .tiers[1].objects == 10' >/dev/null || fail "stat"
"$K" verify --dir "$T/s" "${SMALL[@]}" --json | tail -1 | jqe '.objects == 10 and .bad == 0' >/dev/null || fail "verify clean"

# Corrupt one object's body and truncate another: verify reports both and exits 3.
mapfile -t files < <(find "$T/s" -type f -size +4k | sort | head -2)
printf '\xff\xff\xff\xff' | dd of="${files[0]}" bs=1 seek=5000 conv=notrunc status=none
truncate -s 8192 "${files[1]}"
set +e
out=$("$K" verify --dir "$T/s" "${SMALL[@]}" --json); rc=$?
set -e
[ $rc = 3 ] || fail "verify exit $rc with bad objects"
echo "$out" | tail -1 | jqe '.bad == 2 and .dropped == 0' >/dev/null || fail "verify: $out"
"$K" verify --dir "$T/s" "${SMALL[@]}" --drop --json >/dev/null || true
"$K" verify --dir "$T/s" "${SMALL[@]}" --json | tail -1 | jqe '.objects == 8 and .bad == 0' >/dev/null || fail "verify after --drop"
# resume serves only the intact prefix, never wrong bytes
out=$("$K" session resume --synthetic 2560 --dir "$T/s" "${SMALL[@]}" --json)
echo "$out" | jqe '.bad == 0 and .hit_chunks < 10' >/dev/null || fail "resume after damage: $out"

# Objects of another geometry in the same directory are sound, not corrupt.
"$K" session save --synthetic 1024 --dir "$T/s" --set model.layers=2 --set model.kv_heads=2 --set model.head_dim=64 --set dram.bytes=64MiB >/dev/null
"$K" verify --dir "$T/s" "${SMALL[@]}" --json | tail -1 | jqe '.objects == 12 and .bad == 0' >/dev/null || fail "verify with two geometries"

# rm by key
key=$("$K" ls --dir "$T/s" "${SMALL[@]}" --tiers nvme --json | sed -n 1p | jq -r .key)
"$K" rm --dir "$T/s" "${SMALL[@]}" "$key" | grep -q "removed from 1" || fail "rm"
if "$K" rm --dir "$T/s" "${SMALL[@]}" "$key" >/dev/null; then fail "rm of a missing key succeeded"; fi
echo "cli: ok"
