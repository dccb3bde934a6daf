#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds, and runs every test against real
# files and real servers (started by the tests on 127.0.0.1), then again under ASan+UBSan
# and under TSan - server tests included - and each fuzz target under libFuzzer for a
# fixed time. In CI (CI=true) a test whose server, tool or /dev/fuse is missing fails
# instead of skipping (CMakeLists.txt).
#   KVT_QUICK=1         release build only (no sanitizer or libFuzzer passes)
#   KVT_FUZZ_SECONDS=N  seconds of each libFuzzer run (default 25)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
KVT_WITH_CEPH=${KVT_WITH_CEPH:-1} "$ROOT/scripts/deps.sh"
export KVT_TEST_DIR=${KVT_TEST_DIR:-/var/tmp}
fail=0
t_start=$(date +%s)
stamp() { echo "== $1 finished after $(( $(date +%s) - t_start )) s"; }
B=$("$ROOT/scripts/build.sh" release)
echo "== release: every test"
(cd "$B" && ctest --output-on-failure -j2 --timeout 1200) || fail=1
stamp release
echo "== Python package and vLLM end to end (tests/python; makes the pinned venv once)"
PY=$("$ROOT/scripts/vllm-env.sh" | tail -n 1) &&
	(cd "$ROOT" && timeout 2400 "$PY" -m pytest -q tests/python) || fail=1
stamp python
if [ "${KVT_QUICK:-0}" != 1 ]; then
	B=$("$ROOT/scripts/build.sh" asan)
	echo "== ASan+UBSan: unit, integration (servers included), fuzz corpora"
	(cd "$B" && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
		ctest --output-on-failure -j2 --timeout 1200 -LE 'slow') || fail=1
	stamp asan
	B=$("$ROOT/scripts/build.sh" tsan)
	# A test labelled onethread starts no second thread: TSan has nothing to check there
	# (ASan does), and sim_test + evict_test alone took 17 min of TSan's time on 2 cores;
	# one labelled heavy runs a workload for its numbers (replay_real: 255 s under TSan),
	# whose threads the store and daemon tests check.
	echo "== TSan: threaded unit and integration tests (servers included)"
	(cd "$B" && TSAN_OPTIONS="halt_on_error=1 suppressions=$ROOT/tests/integ/tsan-ceph.supp" \
		ctest --output-on-failure -j2 --timeout 1200 -LE 'slow|fuzz|big|onethread|heavy') || fail=1
	stamp tsan
	echo "== libFuzzer: each fuzz target for ${KVT_FUZZ_SECONDS:-25} s from its corpus"
	F=$ROOT/build-fuzz
	cmake -S "$ROOT" -B "$F" -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Debug \
		"-DCMAKE_C_FLAGS_DEBUG=-g -O1" "-DCMAKE_CXX_FLAGS_DEBUG=-g -O1" -DKVT_LIBFUZZER=ON -DKVT_WERROR=OFF -DKVT_CUDA=OFF \
		-DKVT_FUZZ_SECONDS="${KVT_FUZZ_SECONDS:-25}" >/dev/null
	targets=$(cd "$ROOT/tests/fuzz" && ls *_fuzz.c | sed 's/\.c$/_libfuzzer/')
	# shellcheck disable=SC2086
	cmake --build "$F" -j2 --target $targets >&2
	(cd "$F" && ctest --output-on-failure -j2 -L libfuzzer) || fail=1
	stamp libfuzzer
fi
exit $fail
