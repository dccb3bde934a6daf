#!/usr/bin/env bash
# gpu_check.sh - build kvtier with the CUDA device backend and check it on this machine's
# GPU: the emu test suite of the device layer, then bench/gpu_check.cu (byte-for-byte
# round trips of every layout and TP split, the dependency rule on a real event, and
# gather/scatter GiB/s against plain cudaMemcpyAsync in the same run).
#
# Usage: bench/gpu_check.sh [build-dir] [chunks]    (defaults: build-gpu, 128)
# Prints the program's one "gpu_check:" summary line last. Exit 0 pass, 1 fail, 77 no GPU.
# Budget: a few minutes on a 16-core machine (the build dominates); the check itself
# takes seconds.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build-gpu}
chunks=${2:-128}
export PATH=/usr/local/cuda/bin:$PATH

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
	echo "gpu_check: skipped=1 reason=no_gpu"
	exit 77
fi
nvidia-smi -L
jobs=$(nproc)
cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=Release -DKVT_CUDA=ON >"$build.cmake.log" 2>&1 ||
	{ cat "$build.cmake.log"; exit 1; }
grep -q "cuda device backend enabled" "$build.cmake.log" ||
	{ echo "gpu_check: cuda backend not enabled by cmake"; cat "$build.cmake.log"; exit 1; }
timeout 240 cmake --build "$build" -j"$jobs" --target kvt_gpu_check device_test
# The emu suite must still pass with the cuda backend compiled in (auto picks cuda now).
timeout 60 "$build/device_test" >"$build/device_test.log" 2>&1 ||
	{ cat "$build/device_test.log"; echo "gpu_check: ok=0 reason=device_test_failed"; exit 1; }
timeout 180 "$build/kvt_gpu_check" "$chunks"
