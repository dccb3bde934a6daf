# table.jq - one markdown table row per `kvtier bench --json` line of scripts/bench-all.sh
# (docs/BENCHMARKS.md): jq -r -f bench/table.jq all.jsonl
def f(x): (x*100|round)/100;
def g(x): (x*1000|round)/1000;
def ms(x): (x/100|round)/10;
def kib(x): if x == null then "-" else (x|round) end;
"| \(.run) | \(.object_bytes) B, \(.queue_depth) in flight (\(.bytes_in_flight/1048576|floor) MiB) | \(if .fsync == "" then "-" else .fsync end) / \(.reference) | \(g(.write_gibps)) (\(g(.ref_write_gibps))) | **\(f(.write_ratio))** [\(f(.write_round_ratio_min // .run_round_ratio_min // 0))–\(f(.write_round_ratio_max // .run_round_ratio_max // 0))] | \(g(.read_gibps)) (\(g(.ref_read_gibps))) | **\(f(.read_ratio))** [\(f(.read_round_ratio_min // 0))–\(f(.read_round_ratio_max // 0))] | \(f(.mixed_ratio // 0)) [\(f(.mixed_round_ratio_min // 0))–\(f(.mixed_round_ratio_max // 0))] | \(ms(.write_p50_us))/\(ms(.write_p99_us)) (\(ms(.ref_write_p50_us))/\(ms(.ref_write_p99_us))) | \(ms(.read_p50_us))/\(ms(.read_p99_us)) (\(ms(.ref_read_p50_us))/\(ms(.ref_read_p99_us))) | \(if .dev_write_req_kib then "\(kib(.dev_write_req_kib))/\(kib(.read_phase_dev_read_req_kib)) (\(kib(.ref_dev_write_req_kib))/\(kib(.read_phase_ref_dev_read_req_kib)))" else "-" end) | \(if .write_amplification then g(.write_amplification) else "-" end) | \(.errors) |"
