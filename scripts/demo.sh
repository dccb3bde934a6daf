#!/usr/bin/env bash
# The main job on the embedded default: a store on a local directory (DRAM + NVMe, no
# server needed). Installs what is missing, builds, then replays a built-in multi-turn chat
# workload with real bytes through the store (what each tier buys: hit ratios, bytes,
# TTFT against no cache), prints the restore-vs-recompute crossover table, and finishes
# with a short session save/resume and a verify of the directory. About a minute.
#   KVT_DEMO_DIR   where the store lives (default ./kvtier-data)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
"$ROOT/scripts/deps.sh"
B=$("$ROOT/scripts/build.sh" release)
K="$B/kvtier"
DIR=${KVT_DEMO_DIR:-$ROOT/kvtier-data}
mkdir -p "$DIR"
"$K" --version
"$ROOT/scripts/demo-replay.sh" "$K" "$DIR"
echo
echo "== a conversation saved in one instance and resumed by a fresh one on the same directory"
"$K" session save --synthetic 4096 --dir "$DIR/store"
"$K" session resume --synthetic 4096 --dir "$DIR/store"
"$K" verify --dir "$DIR/store" --json | tail -1
echo
echo "Benchmarks against memcpy / fio / redis-benchmark / curl / rados bench: scripts/bench-all.sh"
