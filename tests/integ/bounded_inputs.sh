#!/usr/bin/env bash
# Untrusted input files are bounded: `replay --trace`, `--config` and `session --tokens`
# given /dev/zero, a directory, a FIFO (so are `calibrate --out` and `crossover --plot`),
# an oversized file, an over-long line or a NUL byte inside a value each fail fast (under
# a timeout) with one printable line naming the file (once) and the reason - never a
# hang, an out-of-memory death, defaults applied silently, or a truncated value. So do an
# empty trace (no requests), a config file's indented continuation line (libinih would
# replace the value with it), a key set twice (last would win), a syntax error (its own
# line and reason, not a later line's), a value that is not UTF-8, and a token file with a
# negative or over-32-bit id or more ids than --synthetic; and replay's generator given a
# huge document count or documents per request. Input echoed in an error (a trace's field
# name, a config value) is scrubbed of control characters, C1 ones included.
set -euo pipefail
. "$(dirname "$0")/lib/jq.sh"
K="$KVT_BIN/kvtier"
T=$(mktemp -d "${KVT_TEST_DIR:-/var/tmp}/kvt-bounded-XXXXXX")
trap 'rm -rf "$T"' EXIT
fail() { echo "bounded_inputs: $*"; exit 1; }
# A hang is told from a slow run by a limit far above the run: 20 s, 60 s under a sanitizer
# (TSan read the 128 MiB token file below in 21 s: every byte's load is instrumented)
HANG_S=20
case "$KVT_BIN" in *asan* | *tsan*) HANG_S=60 ;; esac
# expect_err WHAT PATTERN CMD...: fails within HANG_S, exit 1, one printable line matching
expect_err() {
	local what=$1 pat=$2 rc=0
	shift 2
	timeout $HANG_S "$@" >"$T/out" 2>"$T/err" || rc=$?
	[ $rc = 124 ] && fail "$what: hangs"
	[ $rc != 0 ] || fail "$what: accepted"
	[ "$(wc -l <"$T/err")" = 1 ] || fail "$what: not one line: $(head -c 500 "$T/err" | od -c | head)"
	if LC_ALL=C grep -q '[^[:print:][:space:]]' "$T/err"; then fail "$what: unprintable bytes in the error"; fi
	grep -q -- "$pat" "$T/err" || fail "$what: '$(cat "$T/err")' does not say '$pat'"
}
mkdir "$T/dir"
mkfifo "$T/fifo"
printf '[s3]\nprefix = abc\0def\n' >"$T/nul.ini"
{ printf '[s3]\nprefix = '; head -c 20000 /dev/zero | tr '\0' a; printf '\n'; } >"$T/long.ini"
# longer than libinih's 200-byte line buffer, but a value: read whole (src/config.c)
{ printf '[s3]\nprefix =  '; head -c 300 /dev/zero | tr '\0' a; printf ' ; a comment\r\n'; } >"$T/longval.ini"
{ printf '[s3]\n'; for i in $(seq 1 60000); do printf '# padding line %05d\n' "$i"; done; } >"$T/big.ini"

expect_err "trace /dev/zero" "/dev/zero: line 1: line longer than 4194304 bytes" "$K" replay --trace /dev/zero --simulate
expect_err "trace directory" "^kvtier replay: $T/dir: is a directory, not a trace file$" "$K" replay --trace "$T/dir" --simulate
expect_err "trace missing" "^kvtier replay: $T/none.jsonl: No such file" "$K" replay --trace "$T/none.jsonl" --simulate
: >"$T/empty.jsonl"
# generator knobs: a shared-item count past its bound is refused; a prompt of 4e9
# documents stops growing at the longest request (it grew without bound: 4.2 GB in 23 s)
expect_err "gen docs" "docs, repos and sys_prompts at most 16777216" "$K" replay --simulate --workload rag --requests 1 --gen docs=200000000
# documents of 0 tokens never grow the prompt: 4e9 draws per request ran for hours
expect_err "gen empty docs" "generator: invalid argument" "$K" replay --simulate --workload rag \
	--requests 1 --gen docs_per_req=4294967295 --gen doc_min=0 --gen doc_max=0
# ... nor do doc_min=0's (refused since 2026-12-05: it ran past 60 s per request), and
# 1-token documents stop at a request's block count (4e9 of them: 0.4 s, 280 MB each)
expect_err "gen docs from 0" "generator: invalid argument" "$K" replay --simulate --workload rag \
	--requests 1 --seed 2 --gen docs=1 --gen doc_min=0 --gen doc_max=1 --gen docs_per_req=4000000000
(timeout $HANG_S "$K" replay --simulate --workload rag --requests 3 --gen docs=1 --gen doc_min=1 \
	--gen doc_max=1 --gen docs_per_req=4000000000 --json >"$T/out" 2>"$T/err") ||
	fail "gen 1-token docs: $(tail -2 "$T/err")"
# a [section] name libinih would cut to 49 bytes reaches the handler whole (it was cut:
# two sections alike in their first 49 bytes were one, and an AWS profile took another's
# keys; tests/integ/tier_s3_retry_fake.c)
long49=$(printf 'p%.0s' $(seq 1 49))
printf '[%sA]\nkey = 1\n' "$long49" >"$T/longname.ini"
expect_err "ini long section name" "unknown configuration key '${long49}A.key'" "$K" config --config "$T/longname.ini"
# decimal knobs take decimal only, as every other number (strtod took hex and signs)
expect_err "gen hex knob" "think_s=0x1p3: bad value" "$K" replay --simulate --workload chat \
	--requests 1 --gen think_s=0x1p3
expect_err "gen signed knob" "rate= +4: bad value" "$K" replay --simulate --workload chat \
	--requests 1 --gen 'rate= +4'
(timeout $((3 * HANG_S)) "$K" replay --simulate --workload rag --requests 1 --gen docs_per_req=4000000000 \
	--gen doc_min=4096 --gen doc_max=8192 --json >"$T/out" 2>"$T/err") || fail "gen docs_per_req=4e9: $(tail -2 "$T/err")"
tail -1 "$T/out" | jqe '.requests == 1 and .input_tokens == 16777216' >/dev/null || fail "gen docs_per_req=4e9: $(tail -c 300 "$T/out")"
expect_err "trace empty" "empty.jsonl: no requests (empty trace)" "$K" replay --trace "$T/empty.jsonl" --simulate
expect_err "trace /dev/null" "/dev/null: no requests (empty trace)" "$K" replay --trace /dev/null --simulate
expect_err "config /dev/zero" "/dev/zero: not a regular file" "$K" config --config /dev/zero
expect_err "config directory" "dir: is a directory" "$K" config --config "$T/dir"
expect_err "config fifo" "fifo: not a regular file" "$K" stat --dir "$T/s" --config "$T/fifo"
# a FIFO with no peer held these in open() for ever (replay's own: tests/integ/replay_checks.sh)
expect_err "tokens fifo" "^kvtier session: $T/fifo: a FIFO, not a token file$" "$K" session save --tokens "$T/fifo" --dir "$T/s"
expect_err "calibrate out fifo" "^kvtier calibrate: --out $T/fifo: a FIFO, not a regular file$" "$K" calibrate --out "$T/fifo" --dir "$T/cal"
expect_err "crossover plot fifo" "^kvtier crossover: --plot $T/fifo: a FIFO, not a regular file$" "$K" crossover --plot "$T/fifo"
expect_err "crossover plot pipe" "a name starting with '|' is a command to gnuplot" "$K" crossover --plot "|touch $T/pwned"
[ -e "$T/pwned" ] && fail "crossover plot pipe: gnuplot ran the command"
# a tier name carrying a newline: its title's line ended inside the quotes and gnuplot ran
# the next line, a '!' line, as a shell command (until 2026-12-05)
# (a name under 16 bytes: the command runs in gnuplot's directory, here $T)
rc=0; (cd "$T" && timeout $HANG_S "$K" crossover --tiers $'dram,a\n!touch Q;#' --plot x.png \
	>/dev/null 2>"$T/err") || rc=$?
[ $rc != 0 ] && [ $rc != 124 ] || fail "crossover with a newline in a tier name: exit $rc"
[ -e "$T/Q" ] && fail "crossover: a tier name ran a shell command through gnuplot"
expect_err "config NUL" "nul.ini:2: NUL byte" "$K" config --config "$T/nul.ini"
expect_err "config long line" "long.ini:2: line longer than 16383 bytes" "$K" config --config "$T/long.ini"
[ "$("$K" config --config "$T/longval.ini" | awk '$1 == "s3.prefix" { print length($3) }')" = 300 ] ||
	fail "config long value: s3.prefix is not the 300 bytes of longval.ini"
{ printf '[s3]\n['; head -c 300 /dev/zero | tr '\0' a; printf ']\n'; } >"$T/longsec.ini"
expect_err "config long section" "longsec.ini:2: section line longer than 198 bytes" "$K" config --config "$T/longsec.ini"
# a line of 199 bytes: libinih reads it and its newline as two lines, so the line numbers
# after it were one too high ("five.ini:5")
{ printf '[s3]\nprefix = '; head -c 190 /dev/zero | tr '\0' a; printf '\n[nvme]\nqueue_depth = many\n'; } >"$T/five.ini"
expect_err "config after a 199-byte line" "five.ini:4: nvme.queue_depth: 'many'" "$K" config --config "$T/five.ini"
# a long value that is all inline comment is empty, as libinih makes a short one
{ printf '[s3]\nprefix = ; '; head -c 300 /dev/zero | tr '\0' c; printf '\n'; } >"$T/comment.ini"
[ -z "$("$K" config --config "$T/comment.ini" | awk '$1 == "s3.prefix" && $3 != "#" { print $3 }')" ] ||
	fail "config long comment value: s3.prefix is not empty"
printf '[s3]\nprefix = a\001b\n' >"$T/ctl.ini"
expect_err "config 0x01" "ctl.ini:2: control (0x01) byte in the line" "$K" config --config "$T/ctl.ini"
expect_err "config too large" "big.ini: larger than 1048576 bytes" "$K" config --config "$T/big.ini"
printf '[nvme]\ndirs = /a,\n  /b\n' >"$T/cont.ini"
expect_err "config continuation" "cont.ini:3: nvme.dirs: continuation lines are not supported" "$K" config --config "$T/cont.ini"
printf '[nvme]\nbytes = 1TiB\n; a comment\n\n  # an indented one\n[dram]\nbytes = 1GiB\n[nvme]\nbytes = 4GiB\n' >"$T/dup.ini"
expect_err "config key twice" "dup.ini:9: nvme.bytes set twice" "$K" config --config "$T/dup.ini"
printf '[dram\nbytes = 8GiB\n' >"$T/bracket.ini"
expect_err "config no ]" "bracket.ini:1: '\[' without a closing '\]'" "$K" config --config "$T/bracket.ini"
# text after a section's ']' (libinih drops it: "[nvme] bytes = 4G" set nothing, exit 0)
printf '[nvme] bytes = 4G\n' >"$T/after.ini"
expect_err "config text after ]" "after.ini:1: text after \[nvme\]: 'bytes ...'" "$K" config --config "$T/after.ini"
printf '[nvme] ; a comment may follow\nbytes = 4GiB\n' >"$T/aftercomment.ini"
out=$("$K" config --config "$T/aftercomment.ini")
grep -q '^nvme.bytes *= 4294967296 ' <<<"$out" || { echo "a comment after [nvme] broke the section"; exit 1; }
printf '[dram]\nbytes = 8GiB\npolicy arc\n[nvme]\nqueue_depth = many\n' >"$T/noeq.ini"
expect_err "config no =" "noeq.ini:3: neither a \[section\] nor name = value" "$K" config --config "$T/noeq.ini"
printf '[nvme]\nqueue_depth = many\n[store]\nmax_inflight = lots\n' >"$T/two.ini"
expect_err "config first bad value" "two.ini:2: nvme.queue_depth: 'many'" "$K" config --config "$T/two.ini"
printf '[model]\nname = caf\xe9\n' >"$T/latin1.ini"
expect_err "config not UTF-8" "latin1.ini:2: model.name: not valid UTF-8" "$K" config --config "$T/latin1.ini"
expect_err "--set not UTF-8" "model.tenant: not valid UTF-8" "$K" config --set model.tenant=$'\xc0\xaf'
expect_err "tokens /dev/zero" "/dev/zero: token 1: .* is not a token id" "$K" session save --tokens /dev/zero --dir "$T/s"
printf '1 2 -18446744073709551615\n' >"$T/neg.tok"
expect_err "tokens negative" "neg.tok: token 3: '-18446744073709551615' is not a token id" "$K" session save --tokens "$T/neg.tok" --dir "$T/s"
printf '1 4294967296\n' >"$T/big.tok"
expect_err "tokens over 32 bits" "big.tok: token 2: '4294967296' is not a token id" "$K" session save --tokens "$T/big.tok" --dir "$T/s"
: >"$T/empty.tok"
expect_err "tokens empty" "empty.tok: no token ids" "$K" session save --tokens "$T/empty.tok" --dir "$T/s"
expect_err "tokens directory" "^kvtier session: $T/dir: Is a directory$" "$K" session save --tokens "$T/dir" --dir "$T/s"
head -n $(((1 << 26) + 1)) < <(yes 7) >"$T/many.tok" # 128 MiB
expect_err "tokens too many" "many.tok: more than 67108864 token ids" "$K" session save --tokens "$T/many.tok" --dir "$T/s"
rm -f "$T/many.tok"
# the s3 credentials file goes through the same bounded loader (the store then refuses to open)
rc=0
timeout $HANG_S "$K" stat --dir "$T/s" --tiers dram,s3 --set s3.endpoint=http://127.0.0.1:1 \
	--set s3.bucket=kvt-bucket --set s3.credentials_file=/dev/zero >/dev/null 2>"$T/err" || rc=$?
[ $rc != 124 ] && [ $rc != 0 ] || fail "s3 credentials /dev/zero: exit $rc"
grep -q "credentials file /dev/zero: not a regular file" "$T/err" || fail "s3 credentials: $(cat "$T/err")"
# so does the cost profile
rc=0
timeout $HANG_S "$K" crossover --set cost.profile=/dev/zero >/dev/null 2>"$T/err" || rc=$?
[ $rc != 124 ] && [ $rc != 0 ] || fail "cost.profile /dev/zero: exit $rc"
grep -q "/dev/zero: not a regular file" "$T/err" || fail "cost.profile: $(cat "$T/err")"
# input echoed in an error carries no control character out of it (until 2026-12-06 a
# trace's field name or a config value could put a newline or a terminal escape into the
# operator's terminal): expect_err checks the one printable line
printf '{"\\u001b[31mRED\\nsecond" 5}\n' >"$T/esc.jsonl"
expect_err "trace escape in a field name" 'expected .:. after "?\[31mRED?second"' "$K" replay --trace "$T/esc.jsonl" --simulate
printf '[dram]\nbytes = 4G\033]0;pwned\007\n' >"$T/esc.ini"
expect_err "config escape in a value" "is not a size" "$K" config --config "$T/esc.ini"
expect_err "--set with a newline" "is not a size" "$K" config --set "dram.bytes=4G
second line"
expect_err "--set with a C1 control" "is not a size" "$K" config --set "dram.bytes=4G$(printf '\xc2\x9b')2J"
expect_err "--set with a raw 0x9b" "is not a size" "$K" config --set "nvme.bytes=$(printf '\x9b')31mX"
# ... while UTF-8 that is no control is echoed as it is
rc=0; "$K" config --set "dram.bytes=4$(printf '\xe2\x82\xac')" >/dev/null 2>"$T/err" || rc=$?
[ $rc != 0 ] && grep -q "'4$(printf '\xe2\x82\xac')' is not a size" "$T/err" || fail "a UTF-8 value in an error: $(cat "$T/err")"
# a benchmark working set no machine holds (its DRAM pool's size wrapped past 2^64)
expect_err "bench huge set" "more than this benchmark can hold" "$K" bench --tier dram --chunk-bytes 4K --set-bytes 8388608TiB --no-ref
# what is within the bounds still loads
printf '[s3]\nprefix = abc\n' >"$T/ok.ini"
"$K" config --config "$T/ok.ini" --json | jqe '."s3.prefix" == "abc"' >/dev/null || fail "a good config no longer loads"
# a byte order mark, comments (indented too), blank lines, an indented first key of a
# section and a UTF-8 value are all fine
printf '\xef\xbb\xbf[s3]\nprefix = caf\xc3\xa9 ; inline\n; c\n  # c\n\n[nvme]\n  bytes = 1GiB\n' >"$T/ok2.ini"
"$K" config --config "$T/ok2.ini" --json | jqe '."s3.prefix" == "caf\u00e9" and ."nvme.bytes" == "1073741824"' >/dev/null ||
	fail "a good config with comments and a BOM no longer loads"
printf '1 2\n3\t4 5 \n' >"$T/ok.tok"
"$K" session save --tokens "$T/ok.tok" --dir "$T/s" --set model.layers=4 --set model.kv_heads=2 \
	--set model.head_dim=64 --set dram.bytes=64MiB --json | jqe '.tokens == 5' >/dev/null || fail "a good token file"
echo "bounded_inputs: ok"
