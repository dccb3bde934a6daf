#!/usr/bin/env bash
# The main job on the embedded default: a store on a local directory (DRAM + NVMe, no
# server needed). Installs what is missing, builds, then shows what the store does:
# benchmarks of the DRAM and NVMe tiers against memcpy and fio measured in the same run,
# a round trip through `kvtier ls` and `kvtier verify`.
#   KVT_DEMO_DIR   where the store lives (default ./kvtier-data)
#   KVT_DEMO_SECONDS per benchmark phase (default 3)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
"$ROOT/scripts/deps.sh"
B=$("$ROOT/scripts/build.sh" release)
K="$B/kvtier"
DIR=${KVT_DEMO_DIR:-$ROOT/kvtier-data}
SECS=${KVT_DEMO_SECONDS:-3}
mkdir -p "$DIR"
"$K" --version
if [ -x "$ROOT/scripts/demo-replay.sh" ]; then "$ROOT/scripts/demo-replay.sh" "$K" "$DIR"; fi
echo "== DRAM tier vs memcpy"
"$K" bench --tier dram --chunk-bytes 2M --seconds "$SECS"
echo "== NVMe tier (io_uring, O_DIRECT) vs fio, in $DIR"
"$K" bench --tier nvme --dir "$DIR/bench" --chunk-bytes 2M --queue-depth 32 --set-bytes 1G --seconds "$SECS"
rm -rf "$DIR/bench"
echo "== store contents"
"$K" stat --dir "$DIR"
"$K" verify --dir "$DIR" --json | tail -1
