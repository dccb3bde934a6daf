# slowfs.sh - source this from a test script: mount tests/fuse/slowfs (built as
# $KVT_BIN/slowfs) over a fresh backing directory, make it stall and resume it.
#   slowfs_start [delay_ms [stall_only_op [more options...]]]  sets SLOWFS_MNT, SLOWFS_BACK,
#                            SLOWFS_PID (options: tests/fuse/slowfs.c); returns 77 when
#                            slowfs is not built or /dev/fuse is missing (a failure under
#                            CI=true, see CMakeLists.txt), 1 when the mount fails
#   slowfs_stall / slowfs_resume
#   slowfs_stop              resume, unmount, remove the directories
# A call caught by a stall waits uninterruptibly in the kernel (as on a hung NFS mount):
# a process with a thread in one cannot exit until slowfs_resume.
slowfs_start() {
	local bin=${KVT_BIN:-build}/slowfs
	[ -x "$bin" ] || { echo "SKIP: $bin not built (libfuse3-dev missing)" >&2; return 77; }
	[ -c /dev/fuse ] || { echo "SKIP: /dev/fuse missing" >&2; return 77; }
	local base=${KVT_TEST_DIR:-/var/tmp}
	SLOWFS_BACK=$(mktemp -d "$base/kvt-slowfs-back-XXXXXX")
	SLOWFS_MNT=$(mktemp -d "$base/kvt-slowfs-mnt-XXXXXX")
	local args=()
	[ -n "${1:-}" ] && args=(--delay-ms "$1")
	[ -n "${2:-}" ] && args+=(--stall-only "$2")
	[ $# -le 2 ] || args+=("${@:3}")
	"$bin" "$SLOWFS_BACK" "$SLOWFS_MNT" "${args[@]}" >"$SLOWFS_BACK.log" 2>&1 &
	SLOWFS_PID=$!
	for _ in $(seq 1 200); do
		grep -q " $SLOWFS_MNT fuse" /proc/mounts && return 0
		kill -0 "$SLOWFS_PID" 2>/dev/null || break
		sleep 0.02
	done
	echo "slowfs did not mount: $(cat "$SLOWFS_BACK.log")" >&2
	return 1
}

slowfs_stall() { kill -USR1 "$SLOWFS_PID"; }
slowfs_resume() { kill -USR2 "$SLOWFS_PID" 2>/dev/null; }

slowfs_stop() {
	[ -n "${SLOWFS_PID:-}" ] || return 0
	slowfs_resume
	fusermount3 -u "$SLOWFS_MNT" 2>/dev/null || umount -l "$SLOWFS_MNT" 2>/dev/null
	for _ in $(seq 1 100); do
		kill -0 "$SLOWFS_PID" 2>/dev/null || break
		sleep 0.02
	done
	kill "$SLOWFS_PID" 2>/dev/null
	wait "$SLOWFS_PID" 2>/dev/null
	rm -rf "$SLOWFS_BACK" "$SLOWFS_BACK.log"
	rmdir "$SLOWFS_MNT" 2>/dev/null
	SLOWFS_PID=
}
