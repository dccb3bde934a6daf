#!/usr/bin/env bash
# A misspelt configuration key in the library's code must not compile (it used to read the
# first row of the table in release builds): compiles three small files against
# src/config.h - a known key (compiles), a misspelt one and a type mismatch (both fail with
# the table's message) - at -O0 and -O2, with cc and, where installed, clang.
set -euo pipefail
T=$(mktemp -d "${KVT_TEST_DIR:-/var/tmp}/kvt-cfgtypo-XXXXXX")
trap 'rm -rf "$T"' EXIT
fail() { echo "config_key_typo: $*"; exit 1; }
src() { printf '#include "config.h"\nunsigned long long f(const struct kvt_config *c) { return %s; }\n' "$1" >"$T/t.c"; }
compilers=(cc)
command -v clang >/dev/null && compilers+=(clang)
for c in "${compilers[@]}"; do
	for o in -O0 -O2; do
		cc_() { "$c" -std=gnu11 "$o" -D_GNU_SOURCE -I"$KVT_SRC/src" -I"$KVT_SRC/include" -fsyntax-only "$T/t.c" 2>"$T/err"; }
		src 'kvt__cfg_u64(c, "store.max_inflight") + kvt__cfg_str(c, "nvme.direct")[0] + kvt__cfg_bool(c, "store.promote") + (unsigned long long)kvt__cfg_double(c, "cost.mfu")'
		cc_ || fail "$c $o: a known key does not compile: $(cat "$T/err")"
		src 'kvt__cfg_u64(c, "store.max_inflihgt")'
		if cc_; then fail "$c $o: a misspelt key compiles"; fi
		grep -q 'unknown configuration key store.max_inflihgt' "$T/err" || fail "$c $o: no clear message: $(cat "$T/err")"
		src 'kvt__cfg_u64(c, "store.tiers")'
		if cc_; then fail "$c $o: u64 of a string key compiles"; fi
		grep -q 'read with an accessor of another type' "$T/err" || fail "$c $o: no clear type message: $(cat "$T/err")"
	done
done
echo "config_key_typo: ok (${compilers[*]})"
