#!/usr/bin/env bash
# kvt-test-labels: server
# The "fs" tier on a real CephFS: a private single-node Ceph (scripts/ceph/start-ceph.sh with
# WITH_CEPHFS=1 FUSE_MOUNT=1) on free loopback ports, its file system mounted twice with
# ceph-fuse - two clients, as two nodes would have. Against the mounts:
#  (a) every check of integ_tier_fs (round trips, batched lookups, two instances, racing
#      writers, SIGKILLed writers, close with work in flight), run under the CephFS mount;
#  (b) session migration: instance A saves a conversation through mount 1, instance B with
#      its own empty DRAM and NVMe resumes it bit-exact through mount 2, all 33 chunks from
#      the fs tier; the chunks really are objects in the cephfs_data pool;
#  (c) kvtier bench --tier fs on the mount runs with no errors.
# Skipped (exit 77) where /dev/fuse, ceph-fuse, ceph-mds or Ceph itself is missing. The
# cluster is stopped on every way out; WATCH_PID makes it stop itself if we are SIGKILLed.
set -euo pipefail
. "$(dirname "$0")/lib/jq.sh"
for b in ceph-fuse ceph-mds ceph-mon ceph-osd ceph jq; do
	command -v $b >/dev/null || { echo "SKIP: $b is not installed (KVT_WITH_CEPH=1 scripts/deps.sh)"; exit 77; }
done
[ -c /dev/fuse ] || { echo "SKIP: no /dev/fuse here, CephFS cannot be mounted with ceph-fuse"; exit 77; }
: "${KVT_BIN:?KVT_BIN (the build directory) is not set}"
SRC=${KVT_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
K="$KVT_BIN/kvtier"
[ -x "$K" ] && [ -x "$KVT_BIN/integ_tier_fs" ] || { echo "FAIL: build kvtier_cli and integ_tier_fs first"; exit 1; }
T=$(mktemp -d /tmp/kvt-cephfs-XXXXXX)
C=$T/ceph
cleanup() {
	"$SRC/scripts/ceph/stop-ceph.sh" "$C" >/dev/null 2>&1 || true
	# Never rm -rf through a mount that is still up: that would walk the file system.
	if ! grep -q " $T/" /proc/mounts && [ -z "${KVT_KEEP_CEPH:-}" ]; then rm -rf "$T"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ms() { echo $(( ${EPOCHREALTIME/./} / 1000 )); }
t0=$(ms)
rc=0
RGW=0 WITH_CEPHFS=1 FUSE_MOUNT=1 MON_V2=$(port) MON_V1=$(port) MEMSTORE_BYTES=2147483648 \
	WATCH_PID=$$ "$SRC/scripts/ceph/start-ceph.sh" "$C" > "$T/start.log" 2>&1 || rc=$?
if [ $rc != 0 ]; then
	cat "$T/start.log"
	[ $rc = 77 ] && { echo "SKIP: Ceph cannot start here"; exit 77; }
	echo "FAIL: start-ceph.sh exited $rc"; exit 1
fi
M1=$C/mnt M2=$C/mnt2
# A second client of the same file system, stopped (after unmounting) by stop-ceph.sh.
mkdir -p "$M2"
ceph-fuse -c "$C/ceph.conf" --id admin -f "$M2" > "$C/log/fuse2.out" 2>&1 &
echo $! > "$C/run/fuse2.pid"
for i in $(seq 60); do mountpoint -q "$M2" && break; sleep 0.5; done
mountpoint -q "$M2" || { cat "$C/log/fuse2.out"; echo "FAIL: second ceph-fuse mount"; exit 1; }
echo "cephfs: cluster up, mounted twice (ceph-fuse) in $(( $(ms) - t0 )) ms"
# One mount sees what the other wrote: the two are really one shared file system.
echo hello > "$M1/probe"
[ "$(cat "$M2/probe")" = hello ] || { echo "FAIL: $M2 does not see $M1/probe"; exit 1; }
rm -f "$M1/probe"

# (a) the fs tier's own checks, under the CephFS mount
t=$(ms)
KVT_FS_TEST_DIR=$M1 timeout 300 "$KVT_BIN/integ_tier_fs" > "$T/integ.log" 2>&1 ||
	{ cat "$T/integ.log"; echo "FAIL: integ_tier_fs on CephFS"; exit 1; }
grep -q '^PASS' "$T/integ.log" || { cat "$T/integ.log"; exit 1; }
echo "cephfs: (a) integ_tier_fs checks pass on CephFS in $(( $(ms) - t )) ms"

# (b) session migration: A writes through mount 1, B (empty DRAM and NVMe) reads through mount 2
SMALL=(--set model.layers=4 --set model.kv_heads=2 --set model.head_dim=64 --set dram.bytes=64MiB)
t=$(ms)
timeout 120 "$K" session save --synthetic 8400 --seed 7 --tiers dram,nvme,fs --dir "$T/a" \
	"${SMALL[@]}" --set fs.dir="$M1/kv" > "$T/save.log" 2>&1 || { cat "$T/save.log"; exit 1; }
ts=$(( $(ms) - t )); t=$(ms)
out=$(timeout 120 "$K" session resume --synthetic 8400 --seed 7 --tiers dram,nvme,fs --dir "$T/b" \
	"${SMALL[@]}" --set fs.dir="$M2/kv" --json)
tr=$(( $(ms) - t ))
echo "$out" | jqe '.hit_chunks == 33 and .prefill_tokens == 0 and .bad == 0 and .tiers.fs == 33' >/dev/null ||
	{ echo "FAIL: resume through the second mount: $out"; exit 1; }
# B kept a local copy: its next resume is served from its own NVMe.
out2=$(timeout 120 "$K" session resume --synthetic 8400 --seed 7 --tiers dram,nvme,fs --dir "$T/b" \
	"${SMALL[@]}" --set fs.dir="$M2/kv" --json)
echo "$out2" | jqe '.hit_chunks == 33 and .bad == 0 and .tiers.nvme == 33' >/dev/null ||
	{ echo "FAIL: second resume not from NVMe: $out2"; exit 1; }
files=$(find "$M2/kv" -type f | wc -l)
[ "$files" -ge 33 ] || { echo "FAIL: only $files files under $M2/kv"; exit 1; }
objs=$(rados -c "$C/ceph.conf" -p cephfs_data ls | wc -l)
[ "$objs" -ge 33 ] || { echo "FAIL: only $objs objects in pool cephfs_data"; exit 1; }
echo "cephfs: (b) session migrated across mounts: save ${ts} ms, resume ${tr} ms, 33/33 chunks from fs, bad 0 ($files files, $objs RADOS objects)"
echo "cephfs:     resume: $out"

# (c) the benchmark on the mount (a working set that fits the 2 GiB memstore OSD: a full
# cluster blocks writers in ceph-fuse instead of failing them)
t=$(ms)
b=$(timeout 180 "$K" bench --tier fs --dir "$M1/bench" --chunk-bytes 1M --seconds 2 --set-bytes 256M --json)
echo "$b" | jqe '.errors == 0 and .checksum_failures == 0 and .read_gibps > 0 and .write_gibps > 0' >/dev/null ||
	{ echo "FAIL: bench on CephFS: $b"; exit 1; }
echo "cephfs: (c) bench in $(( $(ms) - t )) ms: $(echo "$b" | jq -c '{read_gibps,write_gibps,read_p99_us,write_p99_us,ref_read_gibps,ref_write_gibps,read_ratio,write_ratio,errors}')"
echo "cephfs: PASS in $(( $(ms) - t0 )) ms"
