#!/bin/bash
# fs_bench.sh - the fs tier against fio on the same directory in the same run: whole
# objects of SIZE bytes with INFLIGHT in flight (fio: psync, O_DIRECT, INFLIGHT jobs on
# one ~1 GiB file, bs=SIZE). The tier writes each object as a new file and links it into
# place (no fsync); fio overwrites blocks of one preallocated file - the tier's write side
# therefore pays file creation that fio does not. Prints one JSON line per size.
#   usage: fs_bench.sh BUILD_DIR DIR [SECONDS] [INFLIGHT] [SIZES...]
set -u
bin=${1:?build dir}/integ_tier_fs
dir=${2:?directory}
secs=${3:-5}
depth=${4:-8}
shift $(( $# < 4 ? $# : 4 ))
sizes=("$@")
[ ${#sizes[@]} -eq 0 ] && sizes=(1048576 8388608 33554432)
command -v fio >/dev/null || { echo "SKIP: fio missing" >&2; exit 77; }
mkdir -p "$dir"
for size in "${sizes[@]}"; do
	total=$(( (1073741824 / size) * size ))
	fio_out=$(fio --name=w --filename="$dir/fio.dat" --size="$total" --bs="$size" --direct=1 \
		--ioengine=psync --rw=write --numjobs="$depth" --offset_increment=$((total / depth / size * size)) \
		--io_size=$((total / depth)) --group_reporting --output-format=json 2>/dev/null \
		&& fio --name=r --filename="$dir/fio.dat" --size="$total" --bs="$size" --direct=1 \
		--ioengine=psync --rw=randread --numjobs="$depth" --time_based --runtime="$secs" \
		--group_reporting --output-format=json 2>/dev/null)
	fio_w=$(echo "$fio_out" | jq -s '.[0].jobs[0].write.bw_bytes / 1e6')
	fio_r=$(echo "$fio_out" | jq -s '.[1].jobs[0].read.bw_bytes / 1e6')
	rm -f "$dir/fio.dat"
	kv=$("$bin" --bench "$dir/tier" "$size" "$depth" "$secs") || exit 1
	rm -rf "$dir/tier"
	kv_w=$(echo "$kv" | jq .write_MBps)
	kv_r=$(echo "$kv" | jq .read_MBps)
	jq -cn --argjson s "$size" --argjson q "$depth" --argjson kw "$kv_w" --argjson kr "$kv_r" \
		--argjson fw "$fio_w" --argjson fr "$fio_r" \
		'{size:$s, inflight:$q, kvtier_write_MBps:$kw, fio_write_MBps:$fw,
		  write_ratio:(if $fw > 0 then ($kw/$fw*100|round/100) else 0 end),
		  kvtier_read_MBps:$kr, fio_read_MBps:$fr,
		  read_ratio:(if $fr > 0 then ($kr/$fr*100|round/100) else 0 end)}'
done
