#!/usr/bin/env bash
# Regenerates the key table of docs/CONFIG.md from the library's table (kvtier config
# --markdown); tests/integ/docs_config.sh fails when the two differ.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
K=${1:-$ROOT/build/kvtier}
DOC=$ROOT/docs/CONFIG.md
head=$(sed '/^| key | default | meaning |$/,$d' "$DOC")
{ printf '%s\n' "$head"; "$K" config --markdown; echo; } > "$DOC.tmp"
mv "$DOC.tmp" "$DOC"
