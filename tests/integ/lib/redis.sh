# redis.sh - source this from a test or benchmark script: start a real redis-server on
# 127.0.0.1, on a free port, in a temporary directory, without persistence.
#   redis_start [password]   sets REDIS_PORT, REDIS_PID, REDIS_DIR, REDIS_URL; returns 77
#                            if redis-server is not installed
#   redis_kill               SIGKILL it (REDIS_PORT stays for a restart)
#   redis_restart            start again on the same port
#   redis_stop               stop it and remove its directory
redis_free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null ||
		echo $((20000 + RANDOM % 30000))
}

redis_launch() {
	local args=(--port "$REDIS_PORT" --bind 127.0.0.1 --dir "$REDIS_DIR" --save ''
		--appendonly no --daemonize no --protected-mode yes)
	[ -n "$REDIS_PASS" ] && args+=(--requirepass "$REDIS_PASS")
	redis-server "${args[@]}" >>"$REDIS_DIR/redis.log" 2>&1 &
	REDIS_PID=$!
	local auth=()
	[ -n "$REDIS_PASS" ] && auth=(--no-auth-warning -a "$REDIS_PASS")
	for _ in $(seq 1 500); do
		if [ "$(redis-cli -h 127.0.0.1 -p "$REDIS_PORT" "${auth[@]}" ping 2>/dev/null)" = PONG ]; then
			return 0
		fi
		kill -0 "$REDIS_PID" 2>/dev/null || return 1
		sleep 0.01
	done
	return 1
}

redis_start() {
	command -v redis-server >/dev/null || { echo "SKIP: redis-server is not installed" >&2; return 77; }
	REDIS_PASS=${1:-}
	REDIS_DIR=$(mktemp -d /tmp/kvt-redis-XXXXXX)
	for _ in 1 2 3 4 5; do
		REDIS_PORT=$(redis_free_port)
		if redis_launch; then
			if [ -n "$REDIS_PASS" ]; then
				REDIS_URL="redis://:$REDIS_PASS@127.0.0.1:$REDIS_PORT"
			else
				REDIS_URL="redis://127.0.0.1:$REDIS_PORT"
			fi
			return 0
		fi
		kill -9 "$REDIS_PID" 2>/dev/null; wait "$REDIS_PID" 2>/dev/null
	done
	echo "redis-server did not start; log:" >&2
	cat "$REDIS_DIR/redis.log" >&2
	return 1
}

redis_kill() {
	kill -9 "$REDIS_PID" 2>/dev/null
	wait "$REDIS_PID" 2>/dev/null
}

redis_restart() {
	redis_launch
}

redis_stop() {
	kill "$REDIS_PID" 2>/dev/null
	wait "$REDIS_PID" 2>/dev/null
	[ -n "$REDIS_DIR" ] && rm -rf "$REDIS_DIR"
}

# redis_test_setup - the opening of a shell test against one Redis: needs $KVT built and
# jq, starts the server (exit 77 when redis-server is missing, 1 when it does not start),
# makes $tmp, and on exit resumes a stopped server, stops it and removes $tmp. Defines
# fail(). Tests that SIGSTOP the server rely on the SIGCONT in the trap.
redis_test_setup() {
	[ -x "$KVT" ] || { echo "skip: $KVT not built"; exit 77; }
	command -v jq >/dev/null || { echo "skip: jq missing"; exit 77; }
	redis_start
	local rc=$?
	[ $rc = 77 ] && exit 77
	[ $rc = 0 ] || { echo "FAIL: redis-server did not start"; exit 1; }
	tmp=$(mktemp -d)
	trap 'kill -CONT "$REDIS_PID" 2>/dev/null; redis_stop 2>/dev/null; rm -rf "$tmp"' EXIT
}
fail() { echo "FAIL: $*"; exit 1; }
