#!/usr/bin/env bash
# readme_demo.sh - the README's first command runs the main job (scripts/demo.sh: the
# replay of scripts/demo-replay.sh, a session saved and resumed, a verify). No test ran
# it, so a flag renamed, a JSON field dropped or a jq filter gone wrong would have broken
# the first thing a new user runs without CI noticing. Here its steps run on the built
# binary (demo.sh's own deps.sh and build.sh are the test command's first steps anyway)
# with fewer requests, and what they print is checked:
#   - the table has both configurations, and NVMe bought hits DRAM alone did not;
#   - no checksum failure, no wrong bytes served;
#   - the crossover table is printed;
#   - a session saved by one instance is resumed whole by a fresh one, and verify finds
#     the directory sound.
# Exit 0 pass, 1 fail, 77 skip (no kvtier binary or no jq).
# kvt-test-labels: slow (release only: it checks the demo's scripts and output; the store
# code it runs is run under ASan and TSan by the other tests)
set -u
. "$(dirname "$0")/lib/jq.sh"
K=${KVT_BIN:-build}/kvtier
SRC=${KVT_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
[ -x "$K" ] || { echo "skip: $K not built"; exit 77; }
command -v jq >/dev/null || { echo "skip: no jq"; exit 77; }
D=$(mktemp -d "${KVT_TEST_DIR:-/var/tmp}/kvt-readme-demo-XXXXXX")
trap 'rm -rf "$D"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

out=$(KVT_DEMO_REQUESTS=400 "$SRC/scripts/demo-replay.sh" "$K" "$D" 2>&1) ||
	{ echo "$out"; fail "demo-replay.sh exited non-zero"; }
echo "$out"
row() { echo "$out" | awk -v c="$1" '$1 == c'; }
[ -n "$(row dram)" ] && [ -n "$(row dram+nvme)" ] || fail "the table lacks a configuration"
# columns: tiers blocks tokens dram nvme ...: NVMe's token hit ratio is column 5
nvme=$(row dram+nvme | awk '{print $5}')
dram_only=$(row dram | awk '{print $3}')
both=$(row dram+nvme | awk '{print $3}')
awk -v n="$nvme" 'BEGIN { exit !(n > 0) }' || fail "NVMe served no token ($nvme)"
awk -v a="$dram_only" -v b="$both" 'BEGIN { exit !(b > a) }' ||
	fail "DRAM + NVMe hit no more than DRAM alone ($b against $a)"
echo "$out" | grep -q "checksum failures 0, wrong bytes served 0" ||
	fail "checksum failures or wrong bytes in the demo"
echo "$out" | grep -q "== crossover" || fail "no crossover table"
echo "$out" | grep -qE "^nvme +[0-9]+us .* break-even|^nvme .*[0-9]+ tokens" ||
	fail "the crossover printed no NVMe row"

"$K" session save --synthetic 4096 --dir "$D/store" > "$D/save.out" 2>&1 ||
	{ cat "$D/save.out"; fail "session save"; }
"$K" session resume --synthetic 4096 --dir "$D/store" > "$D/resume.out" 2>&1 ||
	{ cat "$D/resume.out"; fail "session resume"; }
cat "$D/save.out" "$D/resume.out"
grep -q "resumed 4096 of 4096 tokens" "$D/resume.out" || fail "the session did not resume whole"
"$K" verify --dir "$D/store" --json | tail -1 > "$D/verify.json" || fail "verify"
cat "$D/verify.json"
jqe '.objects == 16 and .bad == 0 and .dropped == 0' "$D/verify.json" >/dev/null ||
	fail "verify: not the session's 16 sound objects"
echo "readme_demo: ok"
