#!/bin/bash
# nvme_vs_fio.sh - the nvme tier against fio on the same directory, same block size and
# queue depth, in one run (a ratio, never a number from another day).
#   bench/nvme_vs_fio.sh [build_dir] [work_dir] [bs_bytes] [objects] [iodepth] [seconds]
# Builds bench/nvme_bench.c against build_dir/libkvtier_core.a. Prints MB/s of:
#   fio randwrite (overwrite of preallocated files), fio fresh-file write (create+write,
#   what the tier does per object), tier write (temp file + write + close + rename,
#   nvme.fsync=none), fio randread, tier read (whole objects, random keys), and tier write
#   into a full cache (each write evicts; same-size victims' files are overwritten in place,
#   so fio overwrite is the reference there).
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
B=${1:-$SRC/build}
W=${2:-/tmp/kvt-nvme-vs-fio}
BS=${3:-2097152}
N=${4:-2048}
QD=${5:-32}
SECS=${6:-10}
command -v fio >/dev/null || { echo "fio not installed"; exit 77; }
cc -O2 -D_GNU_SOURCE -I "$SRC/include" -I "$SRC/src" "$SRC/bench/nvme_bench.c" \
	"$B/libkvtier_core.a" $(pkg-config --libs liburing libisal libcrypto inih) -lpthread -lm \
	-o "$B/nvme_bench"
rm -rf "$W"
mkdir -p "$W/fio" "$W/fio-fresh" "$W/tier"
fio_mbps() { # rw extra... ; terse v3: field 7 read KB/s, field 48 write KB/s
	local rw=$1; shift
	fio --name=job --ioengine=io_uring --direct=1 --bs="$BS" --iodepth="$QD" --rw="$rw" --file_service_type=random \
		--nrfiles="$N" --filesize="$BS" --group_reporting --output-format=terse \
		--terse-version=3 "$@" | awk -F';' -v rw="$rw" \
		'{ printf "%.1f", (rw ~ /read/ ? $7 : $48) / 1000 }'
}
tier_mbps() { # phase [extra bench args]
	local ph=$1; shift
	"$B/nvme_bench" -d "$W/tier" -b "$BS" -n "$N" -q "$QD" -s "$SECS" -p "$ph" "$@" 2>/dev/null |
		sed -n 's/.*MBps=\([0-9.]*\).*/\1/p'
}
median() { tr ' ' '\n' | grep . | sort -g | awk '{v[NR]=$1} END{print v[int((NR+1)/2)]}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", a/b}'; }
# The disk may be shared and noisy: alternate fio and tier for ROUNDS rounds, report medians.
ROUNDS=${ROUNDS:-3}
FW="" FF="" TW="" FR="" TR="" TF=""
fio_mbps write --directory="$W/fio" >/dev/null # lay out fio's files once
for r in $(seq "$ROUNDS"); do
	rm -rf "$W/tier" "$W/fio-fresh"
	mkdir -p "$W/tier" "$W/fio-fresh"
	FW+=" $(fio_mbps randwrite --directory="$W/fio" --runtime="$SECS" --time_based)"
	FF+=" $(fio_mbps write --directory="$W/fio-fresh" --create_on_open=1 --fallocate=none \
		--unlink=1)"
	TW+=" $(tier_mbps write)"
	FR+=" $(fio_mbps randread --directory="$W/fio" --runtime="$SECS" --time_based)"
	TR+=" $(tier_mbps read)"
	# N more objects into a cache holding N: every write evicts (recycling the victim's file)
	TF+=" $(KVTIER_NVME_BYTES=$((N * BS)) tier_mbps write -k "$N")"
done
fw=$(echo $FW | median) ff=$(echo $FF | median) tw=$(echo $TW | median)
fr=$(echo $FR | median) tr=$(echo $TR | median) tf=$(echo $TF | median)
echo "nvme_vs_fio bs=$BS objects=$N qd=$QD rounds=$ROUNDS (median MB/s)"
echo "  write: fio overwrite $fw [$FW ], fio fresh files $ff [$FF ], tier $tw [$TW ]"
echo "         tier/fio-fresh $(ratio "$tw" "$ff"), tier/fio-overwrite $(ratio "$tw" "$fw")"
echo "  write, tier cache full (each write evicts): $tf [$TF ]," \
	"tier-full/fio-overwrite $(ratio "$tf" "$fw")"
echo "  read:  fio $fr [$FR ], tier $tr [$TR ], tier/fio $(ratio "$tr" "$fr")"
rm -rf "$W"
