#!/usr/bin/env bash
# Configures and builds one flavour. Usage: build.sh [release|asan|tsan]; prints the build dir.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
FLAVOUR=${1:-release}
case "$FLAVOUR" in
	release) B=$ROOT/build; ARGS=(-DCMAKE_BUILD_TYPE=RelWithDebInfo) ;;
	asan) B=$ROOT/build-asan; ARGS=(-DCMAKE_BUILD_TYPE=Debug -DKVT_SANITIZE=address,undefined -DKVT_CUDA=OFF) ;;
	tsan) B=$ROOT/build-tsan; ARGS=(-DCMAKE_BUILD_TYPE=Debug -DKVT_SANITIZE=thread -DKVT_CUDA=OFF) ;;
	*) echo "usage: $0 [release|asan|tsan]" >&2; exit 2 ;;
esac
cmake -S "$ROOT" -B "$B" "${ARGS[@]}" >/dev/null
cmake --build "$B" -j"$(nproc)" >&2
echo "$B"
