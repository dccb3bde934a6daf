#!/usr/bin/env bash
# Untrusted input files are bounded: `replay --trace` and `--config` given /dev/zero, a
# directory, a FIFO, an oversized file, an over-long line or a NUL byte inside a value each
# fail fast (under a timeout) with one printable line naming the file and the reason -
# never a hang, an out-of-memory death, defaults applied silently, or a truncated value.
set -euo pipefail
. "$(dirname "$0")/lib/jq.sh"
K="$KVT_BIN/kvtier"
T=$(mktemp -d "${KVT_TEST_DIR:-/var/tmp}/kvt-bounded-XXXXXX")
trap 'rm -rf "$T"' EXIT
fail() { echo "bounded_inputs: $*"; exit 1; }
# expect_err WHAT PATTERN CMD...: fails within 20 s, exit 1, one printable line matching
expect_err() {
	local what=$1 pat=$2 rc=0
	shift 2
	timeout 20 "$@" >"$T/out" 2>"$T/err" || rc=$?
	[ $rc = 124 ] && fail "$what: hangs"
	[ $rc != 0 ] || fail "$what: accepted"
	[ "$(wc -l <"$T/err")" = 1 ] || fail "$what: not one line: $(head -c 500 "$T/err" | od -c | head)"
	if LC_ALL=C grep -q '[^[:print:][:space:]]' "$T/err"; then fail "$what: unprintable bytes in the error"; fi
	grep -q -- "$pat" "$T/err" || fail "$what: '$(cat "$T/err")' does not say '$pat'"
}
mkdir "$T/dir"
mkfifo "$T/fifo"
printf '[s3]\nprefix = abc\0def\n' >"$T/nul.ini"
{ printf '[s3]\nprefix = '; head -c 300 /dev/zero | tr '\0' a; printf '\n'; } >"$T/long.ini"
{ printf '[s3]\n'; for i in $(seq 1 60000); do printf '# padding line %05d\n' "$i"; done; } >"$T/big.ini"

expect_err "trace /dev/zero" "/dev/zero: line 1: line longer than 4194304 bytes" "$K" replay --trace /dev/zero --simulate
expect_err "trace directory" "is a directory" "$K" replay --trace "$T/dir" --simulate
expect_err "config /dev/zero" "/dev/zero: not a regular file" "$K" config --config /dev/zero
expect_err "config directory" "dir: is a directory" "$K" config --config "$T/dir"
expect_err "config fifo" "fifo: not a regular file" "$K" stat --dir "$T/s" --config "$T/fifo"
expect_err "config NUL" "nul.ini:2: NUL byte" "$K" config --config "$T/nul.ini"
expect_err "config long line" "long.ini:2: line longer than" "$K" config --config "$T/long.ini"
expect_err "config too large" "big.ini: larger than 1048576 bytes" "$K" config --config "$T/big.ini"
# the s3 credentials file goes through the same bounded loader (the store then refuses to open)
rc=0
timeout 20 "$K" stat --dir "$T/s" --tiers dram,s3 --set s3.endpoint=http://127.0.0.1:1 \
	--set s3.bucket=kvt-bucket --set s3.credentials_file=/dev/zero >/dev/null 2>"$T/err" || rc=$?
[ $rc != 124 ] && [ $rc != 0 ] || fail "s3 credentials /dev/zero: exit $rc"
grep -q "credentials file /dev/zero: not a regular file" "$T/err" || fail "s3 credentials: $(cat "$T/err")"
# so does the cost profile
rc=0
timeout 20 "$K" crossover --set cost.profile=/dev/zero >/dev/null 2>"$T/err" || rc=$?
[ $rc != 124 ] && [ $rc != 0 ] || fail "cost.profile /dev/zero: exit $rc"
grep -q "/dev/zero: not a regular file" "$T/err" || fail "cost.profile: $(cat "$T/err")"
# what is within the bounds still loads
printf '[s3]\nprefix = abc\n' >"$T/ok.ini"
"$K" config --config "$T/ok.ini" --json | jqe '."s3.prefix" == "abc"' >/dev/null || fail "a good config no longer loads"
echo "bounded_inputs: ok"
