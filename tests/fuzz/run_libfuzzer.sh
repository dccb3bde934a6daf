#!/bin/bash
# run_libfuzzer.sh BINARY SECONDS CORPUS - one time-boxed libFuzzer run of a fuzz target,
# seeded from its checked-in corpus (read only: new inputs go to a temporary directory,
# so a run never edits the source tree). Exit 0 when the time ran out without a crash;
# libFuzzer's own non-zero exit (and its crash file, printed) otherwise.
set -u
bin=$1 secs=$2 corpus=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
	-artifact_prefix="$work/" "$work" "$corpus"
rc=$?
if [ $rc != 0 ]; then
	for f in "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-*; do
		[ -f "$f" ] && { echo "== $f (base64):"; base64 "$f"; }
	done
fi
exit $rc
