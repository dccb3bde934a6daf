#!/usr/bin/env bash
# Why: shows kvtier inside real vLLM engines (CPU platform) rather than in a model of them.
# Two vLLM instances: the first stores a prompt's prefix, fresh second instances restore it
# through a shared directory. Prints the cached tokens vLLM reports and the time to first
# token measured in the engine (wall clock of the request, median of 3 fresh processes)
# with kvtier, with vLLM's own fs tier and with no cache, for a tiny random-weight Llama
# and a larger geometry; with build/kvtierd built, also through the node daemon (fresh
# engines restoring from its DRAM). Makes the pinned venv first (scripts/vllm-env.sh).
#   scripts/vllm-demo.sh [--geometry tiny,large] [--runs 3] [--prefix 1536] [--json]
# KVT_DEMO_FS_DIRECT=auto runs kvtier's fs tier with O_DIRECT (default here: off, reading
# through the page cache as vLLM's fs tier does).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=$("$ROOT/scripts/vllm-env.sh" | tail -n 1)
WORK=${KVT_DEMO_DIR:-${TMPDIR:-/var/tmp}/kvtier-vllm-demo}
mkdir -p "$WORK"
# the node daemon's mode too, when this checkout has built it (scripts/build.sh)
if [ -x "$ROOT/build/kvtierd" ]; then
	set -- --kvtierd "$ROOT/build/kvtierd" "$@"
fi
exec "$PY" -m kvtier.vllm.demo --workdir "$WORK" "$@"
