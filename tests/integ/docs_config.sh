#!/usr/bin/env bash
# docs/CONFIG.md must document every key the library accepts, with its real default:
# the table there is `kvtier config --markdown`, and this test fails when they drift.
set -euo pipefail
K="$KVT_BIN/kvtier"
diff <("$K" config --markdown) <(sed -n '/^| key | default | meaning |$/,/^$/p' "$KVT_SRC/docs/CONFIG.md" | sed '/^$/d') \
	|| { echo "docs/CONFIG.md is out of date: regenerate its table with kvtier config --markdown"; exit 1; }
# A bad value is one clear line and a non-zero exit.
if out=$("$K" config --set nvme.queue_depth=zero 2>&1); then echo "bad value accepted"; exit 1; fi
[ "$(echo "$out" | wc -l)" = 1 ] && grep -q "nvme.queue_depth" <<<"$out" || { echo "unclear error: $out"; exit 1; }
if "$K" config --set no.such=1 >/dev/null 2>&1; then echo "unknown key accepted"; exit 1; fi
echo "docs_config: ok"
