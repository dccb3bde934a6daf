#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds, and runs every test against real
# files and real servers (started by the tests on 127.0.0.1), then the unit, integration
# and fuzz-corpus tests again under ASan+UBSan and the threaded ones under TSan.
#   KVT_QUICK=1   release build only (no sanitizer passes)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
KVT_WITH_CEPH=${KVT_WITH_CEPH:-1} "$ROOT/scripts/deps.sh"
export KVT_TEST_DIR=${KVT_TEST_DIR:-/var/tmp}
fail=0
B=$("$ROOT/scripts/build.sh" release)
echo "== release: every test"
(cd "$B" && ctest --output-on-failure -j2 --timeout 1200) || fail=1
echo "== Python package and vLLM end to end (tests/python; makes the pinned venv once)"
PY=$("$ROOT/scripts/vllm-env.sh" | tail -n 1) &&
	(cd "$ROOT" && timeout 2400 "$PY" -m pytest -q tests/python) || fail=1
if [ "${KVT_QUICK:-0}" != 1 ]; then
	B=$("$ROOT/scripts/build.sh" asan)
	echo "== ASan+UBSan: unit, integration (no servers), fuzz corpora"
	(cd "$B" && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
		ctest --output-on-failure -j2 --timeout 1200 -LE 'server|slow') || fail=1
	B=$("$ROOT/scripts/build.sh" tsan)
	echo "== TSan: threaded unit and integration tests"
	(cd "$B" && TSAN_OPTIONS=halt_on_error=1 \
		ctest --output-on-failure -j2 --timeout 1200 -LE 'server|slow|fuzz') || fail=1
fi
exit $fail
