#!/usr/bin/env bash
# kvtierd shared by separate processes (issue 13): one `kvtier session save` stores a
# conversation through the daemon and exits; another process resumes it - from the
# daemon's DRAM, bit-exact. A client of another tenant is refused with a clear error, not
# served. /metrics passes promtool and counts the DRAM hits and the nvme write budget. A client of a stopped daemon
# fails at once with an error, never hangs. Needs promtool (Debian package prometheus).
set -euo pipefail
. "$(dirname "$0")/lib/jq.sh"
K="$KVT_BIN/kvtier"
D="$KVT_BIN/kvtierd"
T=$(mktemp -d "${KVT_TEST_DIR:-/var/tmp}/kvt-daemon-XXXXXX")
cleanup() { for p in ${DPID:-} ${D2PID:-}; do kill -9 "$p" 2>/dev/null; done; rm -rf "$T"; }
trap cleanup EXIT
command -v promtool >/dev/null || { echo "promtool missing (scripts/deps.sh installs prometheus)"; exit 1; }
SMALL=(--set model.layers=4 --set model.kv_heads=2 --set model.head_dim=64 --set dram.bytes=64MiB)
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
S="$T/kvtierd.sock"
"$D" --dir "$T/data" --socket "$S" --metrics "127.0.0.1:$PORT" "${SMALL[@]}" --set nvme.write_budget=1GiB 2>"$T/daemon.log" &
DPID=$!
for i in $(seq 600); do [ -S "$S" ] && break; sleep 0.05; done
[ -S "$S" ] || { echo "daemon did not come up"; cat "$T/daemon.log"; exit 1; }
[ "$(stat -c %a "$S")" = 600 ] || { echo "socket mode $(stat -c %a "$S"), wanted 600"; exit 1; }

timeout 60 "$K" session save --synthetic 8400 --seed 7 "${SMALL[@]}" --set store.daemon="$S" --json >"$T/save.json"
jqe '.stored_chunks == 33' "$T/save.json" >/dev/null || { echo "save: $(cat "$T/save.json")"; exit 1; }
out=$(timeout 60 "$K" session resume --synthetic 8400 --seed 7 "${SMALL[@]}" --set store.daemon="$S" --json)
echo "$out" | jqe '.hit_chunks == 33 and .prefill_tokens == 0 and .bad == 0 and .tiers.dram == 33' >/dev/null ||
	{ echo "resume through the daemon: $out"; exit 1; }

# Another tenant: refused at open, with a reason.
if err=$(timeout 30 "$K" session resume --synthetic 8400 --seed 7 "${SMALL[@]}" --set model.tenant=other --set store.daemon="$S" --json 2>&1); then
	echo "a client of another tenant was served: $err"; exit 1
fi
grep -q "another model, geometry or tenant" <<<"$err" || { echo "unclear refusal: $err"; exit 1; }

# kvtier status: the two session processes left nothing behind.
st=$(timeout 30 "$K" status --daemon "$S" "${SMALL[@]}" --json)
echo "$st" | jqe '.connections == 0 and .ops_in_progress == 0 and .regions_mapped == 0 and .connections_total >= 3 and .tiers.dram.objects == 33 and .pinned_slots == 0 and .pinned_gets == 33 and .reserved_slots == 0 and .shared_puts == 33 and .lease_expired_pins == 0 and .lease_expired_reservations == 0 and .quarantined_slots == 0 and .quarantined_bytes == 0 and .tp_objects_open == 0 and .tp_objects_cancelled == 0' >/dev/null ||
	{ echo "status: $st"; exit 1; }
if timeout 10 "$K" status "${SMALL[@]}" 2>/dev/null; then echo "status without --daemon accepted"; exit 1; fi

curl -sf "127.0.0.1:$PORT/metrics" >"$T/metrics.txt"
promtool check metrics <"$T/metrics.txt"
grep -q '^kvtier_tier_hits_total{tier="dram"} 33$' "$T/metrics.txt" || { echo "dram hits not counted"; grep hits "$T/metrics.txt"; exit 1; }
grep -q '^kvtier_daemon_request_duration_seconds_count{op="get"} 33$' "$T/metrics.txt" || { echo "get latency histogram"; exit 1; }
# every resume get was copied by the client straight from the daemon's shared DRAM pool
grep -q '^kvtier_daemon_pinned_gets_total 33$' "$T/metrics.txt" || { echo "pinned gets"; grep pinned "$T/metrics.txt"; exit 1; }
grep -q '^kvtier_daemon_pinned_slots 0$' "$T/metrics.txt" || { echo "pins left"; exit 1; }
# and every save put was encoded by the client straight into a slot the daemon reserved
grep -q '^kvtier_daemon_shared_puts_total 33$' "$T/metrics.txt" || { echo "shared puts"; grep shared "$T/metrics.txt"; exit 1; }
grep -q '^kvtier_daemon_reserved_slots 0$' "$T/metrics.txt" || { echo "reservations left"; exit 1; }
# Leases (daemon.lease_ms, 10 s): none ran out in this quick session, nothing quarantined
# (daemon_leases tests them running out).
for m in lease_expired_pins_total lease_expired_reservations_total quarantined_slots quarantined_bytes tp_objects_open tp_objects_published_total tp_objects_cancelled_total; do
	grep -q "^kvtier_daemon_$m 0$" "$T/metrics.txt" || { echo "kvtier_daemon_$m"; grep "kvtier_daemon_$m" "$T/metrics.txt"; exit 1; }
done
# The write budget: its size, and every byte nvme wrote charged to it; deadline misses per tier.
grep -q '^kvtier_tier_write_budget_bytes{tier="nvme"} 1073741824$' "$T/metrics.txt" || { echo "write budget size"; grep budget "$T/metrics.txt"; exit 1; }
used=$(sed -n 's/^kvtier_tier_write_budget_used_bytes{tier="nvme"} //p' "$T/metrics.txt")
written=$(sed -n 's/^kvtier_tier_written_bytes_total{tier="nvme"} //p' "$T/metrics.txt")
[ -n "$used" ] && [ "$used" -gt 0 ] && [ "$used" = "$written" ] || { echo "budget used $used vs written $written"; exit 1; }
grep -q '^kvtier_tier_deadline_misses_total{tier="nvme"} 0$' "$T/metrics.txt" || { echo "deadline misses"; grep deadline "$T/metrics.txt"; exit 1; }
# nothing held past a deadline, and the bound on it is half the DRAM pool (> 0)
grep -q '^kvtier_tier_late_held_bytes{tier="nvme"} 0$' "$T/metrics.txt" || { echo "late held"; grep late_held "$T/metrics.txt"; exit 1; }
grep -q '^kvtier_late_held_cap_bytes [1-9][0-9]*$' "$T/metrics.txt" || { echo "late held cap"; grep late_held "$T/metrics.txt"; exit 1; }
[ "$(curl -s -o /dev/null -w '%{http_code}' "127.0.0.1:$PORT/other")" = 404 ] || { echo "unknown path not 404"; exit 1; }

# kvtier clear: the 33 chunks leave both tiers, and a resume finds nothing.
cl=$(timeout 30 "$K" clear --daemon "$S" "${SMALL[@]}" --json)
echo "$cl" | jqe '.removed == 33' >/dev/null || { echo "clear: $cl"; exit 1; }
st=$(timeout 30 "$K" status --daemon "$S" "${SMALL[@]}" --json)
echo "$st" | jqe '.tiers.dram.objects == 0 and .tiers.nvme.objects == 0' >/dev/null || { echo "after clear: $st"; exit 1; }
out=$(timeout 60 "$K" session resume --synthetic 8400 --seed 7 "${SMALL[@]}" --set store.daemon="$S" --json)
echo "$out" | jqe '.hit_chunks == 0' >/dev/null || { echo "resume after clear: $out"; exit 1; }
if timeout 10 "$K" clear "${SMALL[@]}" 2>/dev/null; then echo "clear without --daemon accepted"; exit 1; fi

# A clear that takes longer than the client waits for one answer (3,125 chunks of 16 tokens,
# ~0.4 s, against a 100 ms store.daemon_timeout_ms): the daemon clears in steps, each
# answered within the client's time, and the client asks until nothing is left. Before
# 2026-12-06 it was one call: the client timed out and reported an error while the daemon
# went on clearing.
S2="$T/k2.sock"
TINY=("${SMALL[@]}" --set model.chunk_tokens=16)
PORT2=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$D" --dir "$T/data2" --socket "$S2" --metrics "127.0.0.1:$PORT2" "${TINY[@]}" 2>"$T/daemon2.log" &
D2PID=$!
for i in $(seq 600); do [ -S "$S2" ] && break; sleep 0.05; done
[ -S "$S2" ] || { echo "second daemon did not come up"; cat "$T/daemon2.log"; exit 1; }
timeout 120 "$K" session save --synthetic 50000 --seed 7 "${TINY[@]}" --set store.daemon="$S2" --json >"$T/save2.json"
jqe '.stored_chunks == 3125' "$T/save2.json" >/dev/null || { echo "save: $(cat "$T/save2.json")"; exit 1; }
calls() { curl -sf "127.0.0.1:$PORT2/metrics" | sed -n 's/^kvtier_daemon_request_duration_seconds_count{op="other"} //p'; }
before=$(calls)
# 100 ms per exchange; 250 under a sanitizer, where each step's listing of what is left
# alone can take most of 100 ms (the whole clear still takes well over one step's 125 ms)
DTMO=100
case "$KVT_BIN" in *asan* | *tsan*) DTMO=250 ;; esac
cl=$(timeout 60 "$K" clear --daemon "$S2" "${TINY[@]}" --set store.daemon_timeout_ms=$DTMO --json) ||
	{ echo "clear of 3,125 chunks with a $DTMO ms timeout failed"; exit 1; }
after=$(calls)
echo "$cl" | jqe '.removed == 3125' >/dev/null || { echo "stepped clear: $cl"; exit 1; }
[ $((after - before)) -ge 2 ] || { echo "the clear took $((after - before)) calls, expected steps"; exit 1; }
st=$(timeout 30 "$K" status --daemon "$S2" "${TINY[@]}" --json)
echo "$st" | jqe '.tiers.dram.objects == 0 and .tiers.nvme.objects == 0' >/dev/null || { echo "after the stepped clear: $st"; exit 1; }
echo "stepped clear: 3125 chunks in $((after - before)) calls"
kill -TERM "$D2PID"; wait "$D2PID"; D2PID=

# Bad metrics addresses are refused with one line.
if "$D" --dir "$T/x" --socket "$T/x.sock" --metrics 0.0.0.0:9 2>"$T/bad.log"; then echo "non-loopback metrics accepted"; exit 1; fi
grep -q "not an IPv4 loopback" "$T/bad.log" || { cat "$T/bad.log"; exit 1; }
# A second daemon on a live socket is refused, the first keeps serving.
if "$D" --dir "$T/y" --socket "$S" 2>"$T/dup.log"; then echo "second daemon took a live socket"; exit 1; fi
grep -q "in use by a running daemon" "$T/dup.log" || { cat "$T/dup.log"; exit 1; }

# --config FILE: the same daemon from an INI file ([daemon] socket, the model keys).
cat >"$T/kvtierd.ini" <<INI
[store]
tiers = dram
[model]
layers = 4
kv_heads = 2
head_dim = 64
[dram]
bytes = 8MiB
[daemon]
socket = $T/c.sock
INI
"$D" --config "$T/kvtierd.ini" 2>"$T/c.log" &
CPID=$!
for i in $(seq 600); do [ -S "$T/c.sock" ] && break; sleep 0.05; done
st=$(timeout 30 "$K" status --daemon "$T/c.sock" "${SMALL[@]}" --json) || { cat "$T/c.log"; exit 1; }
echo "$st" | jqe '.connections == 0 and (.tiers | keys) == ["dram"]' >/dev/null || { echo "--config daemon: $st"; exit 1; }
kill -TERM "$CPID"; wait "$CPID"

# Clean shutdown removes the socket; then a client fails fast instead of hanging.
kill -TERM "$DPID"; wait "$DPID"; DPID=
[ ! -e "$S" ] || { echo "socket left behind"; exit 1; }
if err=$(timeout 10 "$K" session resume --synthetic 8400 --seed 7 "${SMALL[@]}" --set store.daemon="$S" --json 2>&1); then
	echo "resume without a daemon succeeded: $err"; exit 1
fi
grep -q "cannot attach" <<<"$err" || { echo "no clear error without a daemon: $err"; exit 1; }
echo "daemon_session: ok"
