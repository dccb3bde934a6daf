#!/usr/bin/env bash
# replay_checks.sh - `kvtier replay` on inputs a reviewer found it mishandling, each now
# either refused with one line and a non-zero exit, or honoured:
#   - generator knobs that never end a session (end_prob=1e-300 with turns of 0 tokens
#     hung; end_prob=1e-9 grew one session to gigabytes); --requests 0 or past 2^24 said
#     "generator: invalid argument";
#   - a trace whose hash ids are not prefix hashes (an id after two different ids): the
#     simulator's Belady "bound" was below LRU (0.1429 against 0.2857); such traces were
#     then refused, and are now simulated with each (id, parent) a block of its own (as
#     KV and the store's chained keys are), with one warning line;
#   - read bytes charged to where a block was after the store loop, not where the lookup
#     found it (a DRAM hit ratio of 0.25 with 0 bytes read from DRAM);
#   - all requests at one timestamp: load 0 %, no warning, one GPU under --gpus auto;
#   - dram.policy from the configuration ignored by the replay (always hda);
#   - --admit-freq / --admit-predict ignored without --simulate; --admit-oracle and
#     --no-leaf-first accepted there though the store has no such rule;
#   - --dram-tokens 2^61 wrapped to a 6.5 MB pool in real mode; --sweep's 4x of a huge
#     --dram-tokens overflowed; --save-trace wrote 1024-token blocks that --trace reads
#     as 512-token ones;
#   - --trace, --save-trace and --plot naming a FIFO without a peer blocked for ever in
#     open(); --plot's file name went into the gnuplot script unescaped (a quote broke
#     it, or ran the gnuplot commands after it);
#   - admission.doorkeeper and admission.sketch_counters ignored by --simulate;
#   - end_prob=1e-9 with the default 12,000 requests: one conversation of 15,064 turns,
#     105 M blocks, 2.3 GB and 150 s (a session now ends after KVT_GEN_MAX_TURNS turns).
# Exit 0 pass, 1 fail, 77 skip (no kvtier binary or no jq).
# kvt-test-labels: heavy (mostly the single-threaded simulator: 66 s under TSan on 2 cores,
# so scripts/test.sh leaves it out there; release and ASan run it)
set -u
. "$(dirname "$0")/lib/jq.sh"
K=${KVT_BIN:-build}/kvtier
[ -x "$K" ] || { echo "skip: $K not built"; exit 77; }
command -v jq >/dev/null || { echo "skip: jq missing"; exit 77; }
T=$(mktemp -d "${KVT_TEST_DIR:-/var/tmp}/kvt-replay-checks-XXXXXX")
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
# bad WHAT PATTERN ARGS...: fails within $TMO s with one line on stderr matching PATTERN
# Each command's bound: 30 s, or 120 s under a sanitizer (TSan at load 10 ran the
# generator past 30 s once in CI)
TMO=30
case "$KVT_BIN" in *asan* | *tsan*) TMO=120 ;; esac
bad() {
	local what=$1 pat=$2 rc=0
	shift 2
	timeout $TMO "$K" replay "$@" >"$T/out" 2>"$T/err" || rc=$?
	[ $rc = 124 ] && fail "$what: hangs"
	[ $rc != 0 ] || fail "$what: accepted"
	[ "$(wc -l <"$T/err")" = 1 ] || fail "$what: not one line: $(head -c 600 "$T/err")"
	grep -q -- "$pat" "$T/err" || fail "$what: '$(cat "$T/err")' does not say '$pat'"
}
# ok WHAT ARGS...: succeeds within $TMO s; its stdout in $T/out, stderr in $T/err
ok() {
	local what=$1 rc=0
	shift
	timeout $TMO "$K" replay "$@" >"$T/out" 2>"$T/err" || rc=$?
	[ $rc = 124 ] && fail "$what: hangs"
	[ $rc = 0 ] || fail "$what: exit $rc: $(cat "$T/err")"
}
last() { tail -1 "$T/out"; }

# -- generator bounds
ZERO=(--gen sys_tokens=0 --gen user_min=0 --gen user_max=0 --gen out_min=0 --gen out_max=0)
bad "empty prompts" "only 0 of 10 prompts have a token" --workload chat --simulate --requests 10 \
	--gen end_prob=1e-300 "${ZERO[@]}"
ok "endless session" --workload chat --simulate --requests 10 --gen end_prob=1e-300 "${ZERO[@]}" \
	--gen sys_tokens=1 --json
last | jqe '.requests == 10 and .input_tokens == 10' >/dev/null || fail "endless session: $(last)"
ok "end_prob 1e-9" --workload chat --simulate --requests 10 --gen end_prob=1e-9 --json
last | jqe '.requests == 10 and .blocks < 100000' >/dev/null || fail "end_prob 1e-9: $(last)"
# sessions end at KVT_GEN_MAX_TURNS (1000) turns: 3000 requests are three sessions (1.6 M
# blocks), not one of 3,814 turns (6.6 M blocks; at the default 12,000 requests one of
# 15,064 turns was 105 M blocks, 2.3 GB and 150 s)
ok "end_prob 1e-9, 3000 requests" --workload chat --simulate --requests 3000 --gen end_prob=1e-9 --json
last | jqe '.requests == 3000 and .blocks < 2000000' >/dev/null || fail "end_prob 1e-9, 3000: $(last)"
# a whole trace's ids are bounded (KVT_TRACE_MAX_IDS): long prompts for many requests fail
# at once, before the memory (4e9 documents per request: ~400 M ids, several GB, and on the
# old chain hash an id that followed two ids, refused only after 85 s)
bad "ids bound" "generator: the trace would hold more than 67108864 block ids" \
	--workload rag --simulate --gen docs_per_req=4000000000
ok "steps 4e9" --workload agent --simulate --requests 10 --gen steps=4000000000 --json
last | jqe '.requests == 10' >/dev/null || fail "steps 4e9: $(last)"
bad "requests 0" "^kvtier replay: --requests is 1..16777216 (got 0)$" --workload chat --simulate --requests 0
bad "requests 2e7" "--requests is 1..16777216 (got 20000000)" --workload chat --simulate --requests 20000000
bad "gen requests 0" "--gen requests=0: requests is 1..16777216" --workload chat --simulate --gen requests=0
bad "admit-freq 0" "--admit-freq is 1..255" --workload chat --simulate --admit-freq 0

# -- the prefix-hash contract (/tmp/review-t/belady_incons.jsonl)
printf '%s\n' '{"timestamp": 0, "input_length": 512, "output_length": 1, "hash_ids": [3]}' \
	'{"timestamp": 1000, "input_length": 1536, "output_length": 1, "hash_ids": [1, 0, 3]}' \
	'{"timestamp": 2000, "input_length": 512, "output_length": 1, "hash_ids": [0]}' \
	'{"timestamp": 3000, "input_length": 1024, "output_length": 1, "hash_ids": [1, 0]}' >"$T/incons.jsonl"
ok "ids not prefix hashes" --trace "$T/incons.jsonl" --simulate --policy lru,arc,hda \
	--dram-tokens 1024 --nvme-tokens 0 --belady --json
[ "$(wc -l <"$T/err")" = 1 ] && grep -q "incons.jsonl: the hash ids are not all prefix hashes (line 2: hash id 3 follows 0 here but starts hash_ids on line 1): 2 blocks" "$T/err" ||
	fail "ids not prefix hashes: no one-line warning: $(cat "$T/err")"
last | jqe '.rekeyed_blocks == 2 and ([.policies[].block_hit_ratio] | max) <= .belady_block_hit_ratio' \
	>/dev/null || fail "ids not prefix hashes: a policy above Belady's bound: $(last)"
printf '%s\n' '{"timestamp": 0, "input_length": 1536, "output_length": 1, "hash_ids": [4, 5, 4]}' >"$T/twice.jsonl"
ok "an id twice" --trace "$T/twice.jsonl" --simulate --json
grep -q "line 1: hash id 4 appears twice in hash_ids" "$T/err" || fail "an id twice: $(cat "$T/err")"

# -- read bytes by the lookup's tier (/tmp/review-t/readacct.jsonl)
printf '%s\n' '{"timestamp":0,"input_length":1024,"output_length":1,"hash_ids":[1,2]}' \
	'{"timestamp":1000,"input_length":1024,"output_length":1,"hash_ids":[1,2]}' >"$T/read.jsonl"
ok "read bytes" --trace "$T/read.jsonl" --simulate --dram-tokens 512 --nvme-tokens 8192 --json
last | jqe '.dram_hit_ratio == 0.25 and .nvme_hit_ratio == 0.25
	and .dram_read_bytes == .nvme_read_bytes and .dram_read_bytes > 0' >/dev/null ||
	fail "read bytes: $(last)"

# -- all at once: unbounded load, a warning, one GPU per request under auto
for i in $(seq 0 49); do
	printf '{"timestamp": 7, "input_length": 4096, "output_length": 1, "hash_ids": [%d]}\n' $((i + 1))
done >"$T/burst.jsonl"
ok "burst" --trace "$T/burst.jsonl" --simulate --json
grep -q "warning: all 50 requests arrive at the same time" "$T/err" || fail "burst: no warning: $(cat "$T/err")"
last | jqe '.gpus == 50 and .gpu_utilization == null and .nocache_gpu_utilization == null' \
	>/dev/null || fail "burst: $(last)"
grep -q "load unbounded" "$T/out" || fail "burst: $(cat "$T/out")"
ok "burst, 1 GPU" --trace "$T/burst.jsonl" --simulate --gpus 1 --json
grep -q "warning: all 50 requests" "$T/err" || fail "burst 1 GPU: no warning"
ok "burst, real" --trace "$T/burst.jsonl" --dram-tokens 65536 --nvme-tokens 0 --dir "$T/rb" --json
grep -q "warning: all 50 requests" "$T/err" || fail "burst real: no warning: $(cat "$T/err")"
last | jqe '.gpus == 50 and .gpu_utilization == null' >/dev/null || fail "burst real: $(last)"

# -- dram.policy is the replay's policy unless --policy names one, in both modes
ok "dram.policy sim" --trace "$T/read.jsonl" --simulate --set dram.policy=lru --json
last | jqe '.policy == "lru"' >/dev/null || fail "dram.policy sim: $(last)"
ok "dram.policy real" --trace "$T/read.jsonl" --set dram.policy=arc --dir "$T/rp" --json
last | jqe '.policy == "arc"' >/dev/null || fail "dram.policy real: $(last)"
ok "--policy wins" --trace "$T/read.jsonl" --set dram.policy=arc --policy lru2 --dir "$T/rp2" --json
last | jqe '.policy == "lru2"' >/dev/null || fail "--policy real: $(last)"

# -- admission flags in real mode are the store's keys; the simulator-only ones are refused
RA=(--workload chat --requests 60 --dram-tokens 8192 --nvme-tokens 262144 --json)
ok "real, admit all" "${RA[@]}" --dir "$T/a0"
all=$(last)
ok "real, --admit-freq 255" "${RA[@]}" --dir "$T/a1" --admit-freq 255
last | jqe --argjson all "$all" '.nvme_writes_skipped > 0 and .nvme_write_bytes < $all.nvme_write_bytes' \
	>/dev/null || fail "--admit-freq ignored in real mode: $(last) (all: $all)"
ok "real, --admit-predict chain" "${RA[@]}" --dir "$T/a2" --admit-predict chain
last | jqe --argjson all "$all" '.nvme_write_bytes < $all.nvme_write_bytes' >/dev/null ||
	fail "--admit-predict ignored in real mode: $(last) (all: $all)"
bad "oracle real" "^kvtier replay: --admit-oracle needs --simulate" --trace "$T/read.jsonl" --dir "$T/x" --admit-oracle
bad "no-leaf-first real" "^kvtier replay: --no-leaf-first needs --simulate" --trace "$T/read.jsonl" --dir "$T/x" --no-leaf-first

# -- sizes that overflow, and a block size the file cannot carry
bad "dram tokens 2^61" "--dram-tokens 2305843009213699072 is too large" --trace "$T/read.jsonl" --dir "$T/x" \
	--dram-tokens 2305843009213699072
bad "nvme tokens 2^64-1" "--nvme-tokens 18446744073709551615 is too large" --trace "$T/read.jsonl" --dir "$T/x" \
	--nvme-tokens 18446744073709551615
bad "sweep 2^64-1" "--sweep: --dram-tokens 18446744073709551615 is too large" --workload chat --requests 50 \
	--simulate --sweep --dram-tokens 18446744073709551615
bad "save-trace block_tokens" "--save-trace needs --gen block_tokens=512" --workload chat --requests 50 \
	--simulate --gen block_tokens=1024 --save-trace "$T/bt.jsonl"
[ -e "$T/bt.jsonl" ] && fail "save-trace block_tokens: $T/bt.jsonl written"

# -- a FIFO with nobody at the other end: refused at once, not waited on in open()
mkfifo "$T/fifo"
bad "trace fifo" "^kvtier replay: $T/fifo: a FIFO, not a trace file (give '-' to read a pipe from stdin)$" \
	--trace "$T/fifo" --simulate
bad "save-trace fifo" "^kvtier replay: --save-trace $T/fifo: a FIFO, not a regular file$" \
	--workload chat --requests 50 --simulate --save-trace "$T/fifo"
bad "plot fifo" "^kvtier replay: --plot $T/fifo: a FIFO, not a regular file$" \
	--workload chat --requests 50 --simulate --plot "$T/fifo"
# what a trace reads from a pipe: stdin
ok "trace stdin" --trace - --simulate --json <"$T/read.jsonl"
last | jqe '.requests == 2' >/dev/null || fail "trace stdin: $(last)"

# -- --plot's file name is a gnuplot string: a quote or backslash is written literally,
# never ends the string (gnuplot ran what followed: system('touch pwned'))
command -v gnuplot >/dev/null || fail "gnuplot missing (scripts/deps.sh installs it)"
name="x'; system('touch pwned'); y='\\.png"
(cd "$T" && timeout 60 "$K" replay --workload chat --requests 200 --simulate --plot "$T/$name" \
	>"$T/out" 2>"$T/err") || fail "plot quote: $(cat "$T/err")"
[ -e "$T/pwned" ] && fail "plot quote: gnuplot ran a command from the file name"
[ "$(head -c 4 "$T/$name" | od -An -c | tr -d ' ')" = "211PNG" ] || fail "plot quote: no PNG at '$T/$name'"
# a name starting with '|' is gnuplot's pipe to a command, quoted or not: refused (it ran
# the command, review 2026-12-03)
bad "plot pipe" "a name starting with '|' is a command to gnuplot" \
	--workload chat --requests 50 --simulate --plot "|touch $T/pwned2"
[ -e "$T/pwned2" ] && fail "plot pipe: gnuplot ran the command"
bad "plot newline" "^kvtier replay: --plot: a control character in the file name" \
	--workload chat --requests 50 --simulate --plot "$T/a
b.png"

# -- the sketch keys reach the simulator (the store reads them: src/engine.c): a tiny sketch,
# and the default one without its doorkeeper, admit differently from the default sketch
SK=(--workload chat --requests 3000 --simulate --dram-tokens 32768 --nvme-tokens 2097152
	--admit-freq 2 --json)
ok "sketch default" "${SK[@]}"
def=$(last | jq -c '[.nvme_write_bytes, .nvme_writes_skipped]')
ok "sketch_counters" "${SK[@]}" --set admission.sketch_counters=64
[ "$(last | jq -c '[.nvme_write_bytes, .nvme_writes_skipped]')" != "$def" ] ||
	fail "admission.sketch_counters=64 ignored by --simulate: $def both times"
ok "doorkeeper" "${SK[@]}" --set admission.doorkeeper=false
[ "$(last | jq -c '[.nvme_write_bytes, .nvme_writes_skipped]')" != "$def" ] ||
	fail "admission.doorkeeper=false ignored by --simulate: $def both times"
echo "pass"
exit 0
