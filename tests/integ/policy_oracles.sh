#!/usr/bin/env bash
# policy_oracles.sh - scripts/policy_oracles.py, the bound docs/COST_MODEL.md quotes for
# issue #12, models the replay faithfully: its "lru" equals `kvtier replay --policy lru`
# on the same saved trace to the fourth digit, at two capacities; an oracle that knows
# which conversations continue is above LRU; an unknown mode is one line and exit 1.
# Exit 0 pass, 1 fail, 77 skip (no kvtier binary).
set -u
K=${KVT_BIN:-build}/kvtier
SRC=${KVT_SRC:-.}
[ -x "$K" ] || { echo "skip: $K not built"; exit 77; }
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
for tokens in 262144 1000000; do
	# (the script models plain LRU: the replay's partial-block rule off)
	"$K" replay --workload conversation --requests 3000 --simulate --policy lru \
		--set dram.partial_first=false \
		--dram-tokens $tokens --nvme-tokens 0 --save-trace "$T/t.jsonl" >"$T/r" 2>&1 ||
		fail "replay: $(tail -1 "$T/r")"
	want=$(awk '$1 == "lru" { print $3 }' "$T/r")
	python3 "$SRC/scripts/policy_oracles.py" "$T/t.jsonl" $tokens lru cont >"$T/o" ||
		fail "policy_oracles.py exited $?"
	got=$(awk '$1 == "lru" { print $NF }' "$T/o")
	cont=$(awk '$1 == "cont" { print $NF }' "$T/o")
	echo "$tokens tokens: replay lru $want, script lru $got, oracle cont $cont"
	[ -n "$want" ] && [ "$want" = "$got" ] || fail "script's lru $got != replay's $want"
	awk -v c="$cont" -v l="$got" 'BEGIN { exit !(c > l) }' || fail "cont $cont not above lru $got"
done
python3 "$SRC/scripts/policy_oracles.py" "$T/t.jsonl" 1000 nope >"$T/e" 2>&1 && fail "mode nope accepted"
[ "$(wc -l <"$T/e")" = 1 ] && grep -q "unknown mode 'nope'" "$T/e" || fail "error: $(cat "$T/e")"
echo PASS
