#!/usr/bin/env bash
# The kvtier command as scripts use it: --help on every subcommand, one-line errors with a
# non-zero exit, a negative number refused wherever an unsigned one is read (config --set,
# KVTIER_* variables, replay, session, crossover, bench: strtoull reads " -N" as 2^64 - N;
# strtol and strtod take "+8", "0x10" and "inf"), --json
# always valid UTF-8 JSON (a Latin-1 byte in a path becomes U+FFFD), a store opened with
# --dir alone, ls/stat/verify/rm with --json, verify finding (and with --drop removing) a
# corrupted and a truncated object, and session resume reading every chunk at one read
# in flight.
set -euo pipefail
. "$(dirname "$0")/lib/jq.sh"
K="$KVT_BIN/kvtier"
T=$(mktemp -d "${KVT_TEST_DIR:-/var/tmp}/kvt-cli-XXXXXX")
trap 'rm -rf "$T"' EXIT
fail() { echo "cli: $*"; exit 1; }
SMALL=(--set model.layers=4 --set model.kv_heads=2 --set model.head_dim=64 --set dram.bytes=64MiB)

for c in bench config ls rm session stat verify; do
	grep -q usage <<<"$("$K" "$c" --help)" || fail "$c --help"
done
grep -q "tiers: dram nvme" <<<"$("$K" --version)" || fail "--version"
for bad in "ls --bogus" "bench --tier tape" "bench --chunk-bytes 1000" "verify --dir" "rm nothex" "nosuchcmd"; do
	if out=$("$K" $bad 2>&1); then fail "'$bad' succeeded"; fi
	[ "$(printf '%s\n' "$out" | wc -l)" -le 2 ] || fail "'$bad' printed more than a short error: $out"
done
if "$K" stat --config "$T/missing.ini" 2>"$T/err"; then fail "missing config accepted"; fi
grep -q "missing.ini" "$T/err" || fail "config error does not name the file"
printf '[nvme]\nqueue_depth = many\n' > "$T/bad.ini"
if "$K" stat --config "$T/bad.ini" 2>"$T/err"; then fail "bad config accepted"; fi
grep -q "bad.ini:2" "$T/err" || fail "config error has no line number: $(cat "$T/err")"

# Unsigned numbers are digits after optional blanks, no sign: " -18446744073709551615" was 1.
neg=' -18446744073709551615'
no_sign() {
	local rc=0
	"$@" >"$T/out" 2>"$T/err" || rc=$?
	[ $rc != 0 ] || fail "'$*' accepted: $(cat "$T/out" | head -c 300)"
	[ "$(wc -l <"$T/err")" = 1 ] && grep -q "is not a non-negative integer\|is not a size\|is not in\|is not 1\.\.\|bad value\|is not a number in\|is not 1, 2 or 3" "$T/err" ||
		fail "'$*': unclear error: $(cat "$T/err")"
}
no_sign "$K" config --set "store.max_inflight=$neg"
no_sign env KVTIER_MODEL_LAYERS=' -18446744073709551584' "$K" config
no_sign "$K" config --set "dram.bytes=+64MiB"
no_sign "$K" replay --workload chat --requests 10 --simulate --dram-tokens ' -1'
no_sign "$K" replay --workload chat --requests 10 --simulate --seed "$neg"
no_sign "$K" replay --workload chat --requests 10 --simulate --gen "requests=$neg"
no_sign "$K" session save --synthetic 10 --seed ' -1' --dir "$T/neg"
no_sign "$K" session save --synthetic "$neg" --dir "$T/neg"
no_sign "$K" crossover --max-tokens "$neg"
# Signed, hexadecimal and infinite numbers too, where strtol/strtod alone take them; each
# command is one that finishes quickly (in $T) should the value be taken.
QUICK=(bench --tier dram --no-ref --set-bytes 8M --chunk-bytes 64K --rounds 1 --seconds 0.1 --ramp 0)
MLQ=(bench --workload mlperf-kv --seconds 0.1 --scale 0.01 --users 2 --dir "$T/ml" --nvme-bytes 64M)
no_sign "$K" "${QUICK[@]}" --queue-depth +8
no_sign "$K" "${QUICK[@]}" --read-pct +5
no_sign "$K" "${QUICK[@]}" --rounds +1
no_sign "$K" "${QUICK[@]}" --seconds 0x10
no_sign "$K" "${QUICK[@]}" --seconds inf
no_sign "$K" "${QUICK[@]}" --ramp -0
no_sign "$K" "${MLQ[@]}" --users +5
no_sign "$K" "${MLQ[@]}" --option +1
no_sign "$K" "${MLQ[@]}" --queue-depth ' +4'
no_sign "$K" "${MLQ[@]}" --scale 0x0.1
no_sign "$K" "${MLQ[@]}" --seconds nan
no_sign "$K" config --set cost.mfu=+0.5
no_sign "$K" config --set cost.mfu=0x0.8p0
no_sign "$K" config --set cost.gpu_tflops=infinity
# A fraction of a byte is refused, not cut to 0 (0 is "unlimited" or "off" for these);
# with a unit the bytes are rounded down
no_sign "$K" config --set nvme.write_budget=0.5
no_sign "$K" config --set nvme.log_max=0.9
"$K" config --set 'dram.bytes=1.5GiB' --json | jqe '."dram.bytes" == "1610612736"' >/dev/null || fail "1.5GiB"
"$K" config --set 'cost.mfu= 0.25' --json | jqe '."cost.mfu" == "0.25"' >/dev/null || fail "a blank before a decimal number"
"$K" config --set 'store.max_inflight= 8' --json | jqe '."store.max_inflight" == "8"' >/dev/null || fail "a blank before a number"

# --json is valid JSON in UTF-8 whatever bytes it quotes
printf '{"timestamp": 0, "input_length": 100, "output_length": 1, "hash_ids": [1]}\n' >"$T/caf"$'\xe9'.jsonl
utf8_json() { python3 -c 'import json, sys; print(json.loads(sys.stdin.buffer.read().decode("utf-8"))[sys.argv[1]])' "$1"; }
out=$("$K" replay --trace "$T/caf"$'\xe9'.jsonl --simulate --json | tail -1 | utf8_json source) || fail "replay --json of a Latin-1 path is not UTF-8 JSON"
[ "$out" = "$T/caf"$'\xef\xbf\xbd'.jsonl ] || fail "replay --json source: $out"
out=$("$K" config --set model.tenant=$'t\xc3\xa9n\tant\x7f"' --json | utf8_json model.tenant) || fail "config --json is not JSON"
[ "$out" = $'t\xc3\xa9n\tant\x7f"' ] || fail "config --json model.tenant: $out"

# A store on one directory, filled through the public API.
"$K" session save --synthetic 2560 --dir "$T/s" "${SMALL[@]}" >/dev/null
# resume gets every chunk when the store takes one read at a time (it used to count a
# read told to retry, -EAGAIN, as a hole: 1 of 10 chunks, exit 0)
out=$("$K" session resume --synthetic 2560 --dir "$T/s" "${SMALL[@]}" --set store.max_inflight=1 --json)
echo "$out" | jqe '.hit_chunks == 10 and .bad == 0' >/dev/null || fail "resume, one read in flight: $out"
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
grep -q "removed from 1" <<<"$("$K" rm --dir "$T/s" "${SMALL[@]}" "$key")" || fail "rm"
if "$K" rm --dir "$T/s" "${SMALL[@]}" "$key" >/dev/null; then fail "rm of a missing key succeeded"; fi
echo "cli: ok"
