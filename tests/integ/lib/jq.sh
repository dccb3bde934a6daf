# jq.sh - source this from a test script: jqe, an assertion on JSON that fails on no input.
# jq 1.6 (Debian 12) exits 0 from `jq -e` when its input is empty, so a command that printed
# nothing passed every `... | jq -e 'cond'` check. jqe takes jq's arguments (filter, files),
# prints jq's output, and returns 4 when jq produced no result at all.
jqe() {
	local out
	out=$(jq -e "$@") || return $?
	[ -n "$out" ] || { echo "jqe: no JSON to check" >&2; return 4; }
	printf '%s\n' "$out"
}
