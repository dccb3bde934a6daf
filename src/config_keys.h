/*
 * config_keys.h - every configuration key in one X-macro table: name, type, default,
 * bounds, enum choices, how it is shown, help. src/config.c builds its row table from it,
 * and src/config.h builds compile-time lookups from it, so a key name the library reads
 * that is not in this table (a typo) does not compile, in every build type.
 *
 * Row: X(k, name, type, default, min, max, choices, show, help)
 *   k        passed through (the key being looked up, for config.h's lookups)
 *   type     STR | U64 | SIZE | BOOL | DOUBLE | ENUM
 *   min/max  numeric bounds (U64, SIZE, DOUBLE)
 *   choices  ENUM: "a|b|c", else NULL
 *   show     PLAIN, or URL_SECRET: a URL whose password is printed as *** (src/redact.h)
 *
 * Adding a key: add a row here, read it with kvt__cfg_u64/str/bool/double(cfg, "name").
 */
#ifndef KVT_CONFIG_KEYS_H
#define KVT_CONFIG_KEYS_H

#include "internal.h" /* KVT_MAX_LAYERS */

/* clang-format off */
#define KVT_CONFIG_KEYS(X, k) \
	/* store */ \
	X(k, "store.tiers", STR, "dram,nvme", 0, 0, NULL, PLAIN, "ordered tier chain, fastest first: dram,nvme,fs,s3,rados,redis") \
	X(k, "store.write_policy", ENUM, "write-through", 0, 0, "write-through|write-back|selective", PLAIN, "when deeper tiers are written: at put (behind the DRAM copy), when DRAM evicts, or after store.selective_hits hits") \
	X(k, "store.selective_hits", U64, "2", 1, 1000000, NULL, PLAIN, "hits before a chunk is written deeper under the selective policy") \
	X(k, "store.zero_copy_puts", BOOL, "true", 0, 0, NULL, PLAIN, "without a DRAM tier, a put is written from the caller's buffer, no copy, where that buffer is 4 KiB-aligned (objects under 512 KiB) or on a 2 MiB boundary, as a huge-page allocation is (larger ones) (unprotected objects; tiers that support it: nvme)") \
	X(k, "store.promote", BOOL, "true", 0, 0, NULL, PLAIN, "copy a deeper-tier hit into DRAM") \
	X(k, "store.promote_local", BOOL, "true", 0, 0, NULL, PLAIN, "also write a hit from a deeper tier into the tiers above it (e.g. an s3 hit into nvme)") \
	X(k, "store.max_inflight", U64, "4096", 1, 1048576, NULL, PLAIN, "operations in flight before calls return -EAGAIN") \
	X(k, "store.tier_timeout_ms", U64, "10000", 1, 3600000, NULL, PLAIN, "ceiling of the deadline of every call to a deeper tier (read, lookup, write, remove, flush); below it the deadline is store.deadline_floor_ms + 4x what the call should cost from the tier's measured latency and bandwidth and the bytes queued ahead of it") \
	X(k, "store.sync_timeout_ms", U64, "30000", 1, 3600000, NULL, PLAIN, "limit on a tier's synchronous calls (open, close, listing for kvtier ls and verify): past it the call is reported and left running, so a hung device or server cannot hang the caller") \
	X(k, "store.deadline_floor_ms", U64, "1000", 1, 3600000, NULL, PLAIN, "allowance for jitter in the deadline of every call to a deeper tier: no call is given up on sooner") \
	X(k, "store.max_object_bytes", SIZE, "4GiB", 4096, 4294967296.0, NULL, PLAIN, "largest object a reader accepts") \
	X(k, "store.read_only", BOOL, "false", 0, 0, NULL, PLAIN, "open every tier for reading only: nothing is created, locked, cleaned up or written, and a missing store is an error (kvtier ls, stat and verify use it)") \
	X(k, "store.daemon", STR, "", 0, 0, NULL, PLAIN, "Unix socket of a kvtierd node daemon: when set, the store is a client of that daemon (its tiers, its DRAM) instead of opening tiers itself (docs/DAEMON.md)") \
	X(k, "store.daemon_timeout_ms", U64, "5000", 1, 3600000, NULL, PLAIN, "deadline of each exchange with kvtierd: a daemon that does not answer by then reads as an error or a miss, and is marked down: calls fail or miss at once for a backoff (this timeout, doubled by each retry that times out again, up to 30 s; reset by a request's answer, not by a reconnect's HELLO), then one call at a time tries it again; a get, put or pin asks the daemon to wait for its tiers at most seven eighths of it, and one the daemon cuts there misses or fails with -ETIME without marking it down") \
	/* kvtierd (the node daemon, docs/DAEMON.md) */ \
	X(k, "daemon.socket", STR, "/run/kvtier/kvtierd.sock", 0, 0, NULL, PLAIN, "kvtierd: the Unix socket clients attach to (mode 0600, so only its owner's processes)") \
	X(k, "daemon.metrics", STR, "", 0, 0, NULL, PLAIN, "kvtierd: serve Prometheus /metrics on this loopback ADDR:PORT (empty: off)") \
	X(k, "daemon.max_clients", U64, "256", 1, 65536, NULL, PLAIN, "kvtierd: connections at most; more are refused") \
	X(k, "daemon.shared_writes", BOOL, "true", 0, 0, NULL, PLAIN, "kvtierd: clients encode a put straight into a DRAM slot the daemon reserved (their mapping of the pool is writable; the daemon checks the header before publishing); false: puts are copied through the client's region and clients get the pool read-only") \
	X(k, "daemon.lease_ms", U64, "10000", 10, 3600000, NULL, PLAIN, "kvtierd: a client's pin (a get copying from the shared pool) or reservation (a put encoding into it) is a lease of this long; past it the pin is released and the reservation cancelled (its slot quarantined until the client process is gone, as it may still write there), so a hung or stopped client cannot starve the pool (its late unpin or commit is refused: the get retries, the put fails); a tensor-parallel partial object untouched this long with heads still claimed is cancelled too (its key free at once, its slot quarantined until the claiming ranks report or go)") \
	X(k, "daemon.events", STR, "", 0, 0, NULL, PLAIN, "kvtierd: publish KV events (stored, removed: evicted, removed, corrupt) on this ZeroMQ PUB endpoint, msgpack in vLLM's schema: tcp://ADDR:PORT (a loopback ADDR unless daemon.events_allow_remote) or ipc://PATH (empty: off)") \
	X(k, "daemon.events_replay", STR, "", 0, 0, NULL, PLAIN, "kvtierd: ZeroMQ ROUTER endpoint answering a replay request (8-byte big-endian start sequence) with the buffered batches from it, then sequence -1; one replay per peer at a time, a request during it answered -2 (busy); loopback or ipc:// as daemon.events (empty: no replay)") \
	X(k, "daemon.events_topic", STR, "", 0, 0, NULL, PLAIN, "kvtierd: the topic frame of every event message (subscribers filter on its prefix)") \
	X(k, "daemon.events_queue", U64, "65536", 16, 1048576, NULL, PLAIN, "kvtierd: events waiting for the publisher at most; past it events are dropped and counted") \
	X(k, "daemon.events_buffer", U64, "10000", 1, 1000000, NULL, PLAIN, "kvtierd: published batches kept for replay at most") \
	X(k, "daemon.events_buffer_bytes", SIZE, "64MiB", 65536, 68719476736.0, NULL, PLAIN, "kvtierd: bytes of published batches kept for replay at most (the oldest go first)") \
	X(k, "daemon.events_allow_remote", BOOL, "false", 0, 0, NULL, PLAIN, "kvtierd: allow daemon.events and daemon.events_replay on a tcp:// address that is not loopback (127.x.x.x, [::1], localhost): the events name the blocks every tenant has cached, so off by default") \
	/* model / geometry: part of the namespace, hence of every key */ \
	X(k, "model.name", STR, "llama3.1-8b", 0, 0, NULL, PLAIN, "model id, part of the namespace") \
	X(k, "model.revision", STR, "main", 0, 0, NULL, PLAIN, "model revision, part of the namespace") \
	X(k, "model.tenant", STR, "", 0, 0, NULL, PLAIN, "tenant salt: different tenants never share keys") \
	X(k, "model.layers", U64, "32", 1, KVT_MAX_LAYERS, NULL, PLAIN, "layers") \
	X(k, "model.kv_heads", U64, "8", 1, 4096, NULL, PLAIN, "KV heads of the whole model (before tensor parallelism); 1 for MLA") \
	X(k, "model.head_dim", U64, "128", 1, 65536, NULL, PLAIN, "head dimension (MLA: latent dimension)") \
	X(k, "model.dtype", ENUM, "bf16", 0, 0, "bf16|fp16|fp8|fp32", PLAIN, "KV element type") \
	X(k, "model.kind", ENUM, "kv", 0, 0, "kv|mla", PLAIN, "K+V per layer, or one MLA latent") \
	X(k, "model.chunk_tokens", U64, "256", 1, 65536, NULL, PLAIN, "tokens per chunk") \
	/* dram */ \
	X(k, "dram.bytes", SIZE, "1GiB", 4096, 1e15, NULL, PLAIN, "DRAM pool size") \
	X(k, "dram.policy", ENUM, "hda", 0, 0, "hda|hd|lru|arc|pslru|lru2", PLAIN, "DRAM eviction and admission policy (also the replay's default; docs/COST_MODEL.md)") \
	X(k, "dram.partial_first", BOOL, "true", 0, 0, NULL, PLAIN, "a chunk shorter than a full one (a prompt's partial last block, whose id the next turn replaces) is evicted from DRAM before any other until it is hit, whatever dram.policy (also the replay's; docs/COST_MODEL.md)") \
	X(k, "dram.hugepages", BOOL, "true", 0, 0, NULL, PLAIN, "back the pool with huge pages when available") \
	X(k, "dram.mlock", BOOL, "false", 0, 0, NULL, PLAIN, "lock the pool into memory") \
	X(k, "dram.prefault", BOOL, "false", 0, 0, NULL, PLAIN, "fault every page of the pool in at open, so first restores pay no page faults (kvtierd turns it on)") \
	X(k, "dram.shared", BOOL, "false", 0, 0, NULL, PLAIN, "back the pool with a memfd that can be mapped by other processes (kvtierd sets it: its clients map the pool read-only and copy DRAM hits straight out of the slot)") \
	/* nvme */ \
	X(k, "nvme.dirs", STR, "./kvtier-data", 0, 0, NULL, PLAIN, "comma-separated directories, one per drive; chunks are spread across them by key") \
	X(k, "nvme.bytes", SIZE, "16GiB", 4096, 1e18, NULL, PLAIN, "capacity across all directories; least recently used objects are evicted beyond it") \
	X(k, "nvme.queue_depth", U64, "64", 1, 4096, NULL, PLAIN, "I/Os in flight per ring") \
	X(k, "nvme.fsync", ENUM, "data", 0, 0, "none|data|full", PLAIN, "before publishing: none, fdatasync, or fdatasync plus directory fsync; a flush makes puts and removes before it durable in every mode (docs/TIERS.md)") \
	X(k, "nvme.direct", ENUM, "auto", 0, 0, "auto|on|off", PLAIN, "O_DIRECT: auto falls back to buffered I/O where refused (tmpfs)") \
	X(k, "nvme.write_budget", SIZE, "0", 0, 1e18, NULL, PLAIN, "bytes written per day at most (0: unlimited); admission skips writes past it") \
	X(k, "nvme.log_max", SIZE, "0", 0, 2093056, NULL, PLAIN, "objects up to this size are appended in batches to preallocated log segments instead of getting a file each (docs/NVME_LOG.md); 0: off") \
	X(k, "nvme.log_batch_bytes", SIZE, "0", 0, 2097152, NULL, PLAIN, "a log batch is sealed once its objects would pass this many bytes, so that several batches are at the device at once; 0: 256 KiB with nvme.fsync=none, 2 MiB (group commit: one fdatasync per batch) otherwise (docs/NVME_LOG.md)") \
	X(k, "nvme.segment_bytes", SIZE, "64MiB", 16777216, 1073741824, NULL, PLAIN, "size of one log segment file (nvme.log_max); segments are reused oldest first") \
	X(k, "nvme.log_layout", BOOL, "true", 0, 0, NULL, PLAIN, "with the log on, segments not yet created are laid out in the background (written once with zeros through the page cache, as fio lays out its files), so that the log's first lap overwrites blocks instead of converting fallocate'd ones (docs/NVME_LOG.md); stats.pool_pending_bytes counts what is left") \
	X(k, "nvme.log_reinsert_pct", U64, "50", 0, 75, NULL, PLAIN, "when a log segment is reused, its live objects are re-appended (those read since they were written first), up to this percent of a segment per reuse (bounds write amplification; docs/NVME_LOG.md); 0: evict them") \
	X(k, "nvme.log_spare_pct", U64, "100", 0, 400, NULL, PLAIN, "room in the log for dead objects, as a percent of the live ones: with the log on, its segments fit in nvme.bytes and the live capacity is what they hold (less two segments) over 1 + this; more spare, fewer live objects to re-append when a segment is reused (docs/NVME_LOG.md)") \
	X(k, "nvme.preallocate", SIZE, "0", 0, 1e18, NULL, PLAIN, "object size to lay out the capacity for: nvme.bytes is laid out in the background as files of this size, each written once, that writes of this size overwrite in place (first writes into new blocks are slower than overwrites; docs/TIERS.md); 0: off") \
	X(k, "nvme.open_files", U64, "1024", 1, 1000000, NULL, PLAIN, "read file descriptors kept open (at most RLIMIT_NOFILE less an eighth of it, or less 512 or half of it where that is more; past that, objects are opened per read)") \
	X(k, "nvme.file_mode", ENUM, "0600", 0, 0, "0600|0640|0660|0644", PLAIN, "permissions of the object files created (stored KV reveals prompts; the umask still applies)") \
	X(k, "nvme.dir_mode", ENUM, "0700", 0, 0, "0700|0750|0770|0755", PLAIN, "permissions of the directories created (the umask still applies)") \
	/* faulty: the test-only fault-injecting wrapper tier */ \
	X(k, "faulty.inner", STR, "nvme", 0, 0, NULL, PLAIN, "tests only: the tier the 'faulty' tier wraps") \
	X(k, "faulty.fail_pct", U64, "0", 0, 100, NULL, PLAIN, "tests only: percent of operations reported failed (-faulty.fail_errno)") \
	X(k, "faulty.fail_errno", U64, "5", 1, 4095, NULL, PLAIN, "tests only: the errno the failures of faulty.fail_pct report (5: EIO; 28 ENOSPC, 122 EDQUOT, 27 EFBIG: refusals)") \
	X(k, "faulty.corrupt_pct", U64, "0", 0, 100, NULL, PLAIN, "tests only: percent of reads returned with a flipped byte") \
	X(k, "faulty.delay_ms", U64, "0", 0, 600000, NULL, PLAIN, "tests only: delay of every completion") \
	X(k, "faulty.seed", U64, "1", 0, 1.8e19, NULL, PLAIN, "tests only: fault pattern seed") \
	X(k, "faulty.write_bytes_per_s", U64, "0", 0, 1.8e19, NULL, PLAIN, "tests only: writes pass one at a time at this rate, as a device with one write lane (0: off)") \
	/* ---- fs tier (shared POSIX directory): rows below ---- */ \
	X(k, "fs.dir", STR, "", 0, 0, NULL, PLAIN, "shared directory (CephFS, NFS, Lustre mount) holding objects under v1/ab/cd/<key>; instances pointing at the same directory share chunks") \
	X(k, "fs.threads", U64, "8", 1, 64, NULL, PLAIN, "worker threads running the blocking file system calls (lookups of a batch are spread over them)") \
	X(k, "fs.direct", ENUM, "auto", 0, 0, "auto|on|off", PLAIN, "O_DIRECT: auto falls back to buffered I/O where the file system refuses it") \
	X(k, "fs.fsync", ENUM, "data", 0, 0, "none|data|full", PLAIN, "before publishing: none (a flush then runs syncfs), fdatasync of the object (its leaf directory, and the parent of any directory a put made, fsynced at the next flush), or fdatasync plus fsync of its directory (and of a new directory's parent)") \
	X(k, "fs.bytes", SIZE, "0", 0, 1e18, NULL, PLAIN, "capacity of the shared directory (0: unbounded); every writing node removes the least recently used objects beyond it") \
	X(k, "fs.tmp_max_age_s", U64, "3600", 1, 1e9, NULL, PLAIN, "a temporary file that a writer's sweeps have seen unchanged for this long (by that node's own clock, whatever the file's dates) belongs to a dead writer and is removed; keep it well above the longest write") \
	X(k, "fs.tmp_grace_s", U64, "120", 1, 1e9, NULL, PLAIN, "a temporary dated older than fs.tmp_max_age_s by this node's clock is removed once a writer's sweeps have seen it unchanged for this long (at most fs.tmp_max_age_s): a restarted writer clears a dead one's debris in minutes; keep it well above the file system's attribute cache time (NFS: up to 60 s)") \
	X(k, "fs.live_dir", STR, "/dev/shm", 0, 0, NULL, PLAIN, "node-local directory where each writing instance holds a locked file for as long as it lives, so that this node's sweeps remove a dead writer's temporaries at once instead of after fs.tmp_max_age_s (\"\": off); only a file of the temporary's owner that is not locked counts as proof; on a file system not known to be node-local (NFS, CephFS, FUSE, ...) it is not used, with a warning") \
	X(k, "fs.file_mode", ENUM, "0600", 0, 0, "0600|0640|0660|0644", PLAIN, "permissions of the object files created; several users sharing the directory need group access (0660, with fs.dir_mode 0770 and a umask that allows it)") \
	X(k, "fs.dir_mode", ENUM, "0700", 0, 0, "0700|0750|0770|0755", PLAIN, "permissions of the directories created (the umask still applies)") \
	/* ---- end fs ---- */ \
	/* ---- s3 tier: rows below ---- */ \
	X(k, "s3.endpoint", STR, "", 0, 0, NULL, URL_SECRET, "S3 endpoint URL, http(s)://host[:port] (empty: KVTIER_S3_ENDPOINT)") \
	X(k, "s3.region", STR, "", 0, 0, NULL, PLAIN, "SigV4 signing region (empty: AWS_DEFAULT_REGION, else us-east-1)") \
	X(k, "s3.bucket", STR, "", 0, 0, NULL, PLAIN, "bucket holding the objects (empty: KVTIER_S3_BUCKET)") \
	X(k, "s3.prefix", STR, "kvtier/", 0, 0, NULL, PLAIN, "key prefix inside the bucket; objects are <prefix><64 hex digits>; letters, digits, -, _, ., ~ and / only, at most 960 of them (S3 names are at most 1024 bytes)") \
	X(k, "s3.addressing", ENUM, "path", 0, 0, "path|virtual", PLAIN, "path-style (endpoint/bucket/key) or virtual-hosted (bucket.endpoint/key) URLs") \
	X(k, "s3.credentials_file", STR, "", 0, 0, NULL, PLAIN, "AWS-style credentials file (empty: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY); refused if another user owns it or others can write it") \
	X(k, "s3.profile", STR, "default", 0, 0, NULL, PLAIN, "profile section of s3.credentials_file") \
	X(k, "s3.tls_verify", BOOL, "true", 0, 0, NULL, PLAIN, "verify the server's TLS certificate and host name") \
	X(k, "s3.ca_file", STR, "", 0, 0, NULL, PLAIN, "CA bundle for TLS verification (empty: the system's)") \
	X(k, "s3.sign_payload", BOOL, "false", 0, 0, NULL, PLAIN, "sign the body's SHA-256 instead of sending UNSIGNED-PAYLOAD (costs a hash per write)") \
	X(k, "s3.max_inflight", U64, "64", 1, 4096, NULL, PLAIN, "HTTP requests in flight at once (and keep-alive connections)") \
	X(k, "s3.retries", U64, "3", 0, 20, NULL, PLAIN, "retries of a request on 5xx, SlowDown, a broken connection or a connect past s3.connect_timeout_ms (exponential backoff with jitter, within s3.timeout_ms)") \
	X(k, "s3.timeout_ms", U64, "5000", 1, 3600000, NULL, PLAIN, "deadline of every operation, retries included") \
	X(k, "s3.connect_timeout_ms", U64, "2000", 1, 3600000, NULL, PLAIN, "TCP/TLS connection set-up limit") \
	X(k, "s3.create_bucket", BOOL, "true", 0, 0, NULL, PLAIN, "create the bucket at open if it does not exist") \
	/* ---- end s3 ---- */ \
	/* ---- rados tier: rows below ---- */ \
	X(k, "rados.conf", STR, "", 0, 0, NULL, PLAIN, "ceph.conf path (empty: CEPH_CONF, else Ceph's default search)") \
	X(k, "rados.pool", STR, "kvtier", 0, 0, NULL, PLAIN, "pool holding the objects (replicated or erasure-coded; env KVTIER_RADOS_POOL)") \
	X(k, "rados.namespace", STR, "", 0, 0, NULL, PLAIN, "RADOS namespace inside the pool") \
	X(k, "rados.user", STR, "admin", 0, 0, NULL, PLAIN, "Ceph client name without 'client.'") \
	X(k, "rados.keyring", STR, "", 0, 0, NULL, PLAIN, "keyring path (empty: from the ceph.conf or CEPH_KEYRING)") \
	X(k, "rados.create_pool", BOOL, "false", 0, 0, NULL, PLAIN, "create a replicated pool with the cluster's defaults if it does not exist") \
	X(k, "rados.max_inflight", U64, "256", 1, 65536, NULL, PLAIN, "RADOS operations in flight at once") \
	X(k, "rados.timeout_ms", U64, "5000", 1, 3600000, NULL, PLAIN, "deadline of every operation (an unreachable OSD or monitor gives -ETIMEDOUT)") \
	X(k, "rados.zero_copy", BOOL, "true", 0, 0, NULL, PLAIN, "send writes from the caller's buffer through librados' C++ API instead of a copy (only where kvtier was built with librados.hpp; else always a copy)") \
	/* ---- end rados ---- */ \
	/* ---- redis tier: rows below ---- */ \
	X(k, "redis.url", STR, "redis://127.0.0.1:6379", 0, 0, NULL, URL_SECRET, "redis://[:password@]host:port[/db] of a Redis or Valkey server (the password is never logged)") \
	X(k, "redis.prefix", STR, "kvt:", 0, 0, NULL, PLAIN, "prefix of every key the tier stores") \
	X(k, "redis.connections", U64, "4", 1, 64, NULL, PLAIN, "connections, each with its own I/O thread and a pipeline of requests in flight") \
	X(k, "redis.timeout_ms", U64, "2000", 1, 3600000, NULL, PLAIN, "the longest a request may wait for its reply, from when it was queued, a reconnect it waits for included, plus the time its value bytes and those of the requests ahead of it take at redis.min_bytes_per_s; past it the connection is dropped and its requests fail") \
	X(k, "redis.min_bytes_per_s", SIZE, "64MiB", 1024, 1e12, NULL, PLAIN, "the slowest rate, in bytes per second, at which a working server and link move value bytes: each request's deadline grows by the time its value bytes and those queued ahead of it on the connection take at this rate (so a long pipeline of large values is not cut); a server slower than this counts as one that does not answer") \
	/* ---- end redis ---- */ \
	/* ---- device layer (GPU/emu): rows below ---- */ \
	X(k, "device.backend", ENUM, "auto", 0, 0, "auto|emu|cuda", PLAIN, "transfer backend between an engine's GPU KV cache and chunks: auto picks cuda when a GPU is visible, else emu (host memory stands in for device memory)") \
	X(k, "device.emu_gbps", DOUBLE, "0", 0, 100000, NULL, PLAIN, "emu backend: throttle each copy direction to this many GB/s (10^9 bytes) to stand in for PCIe; 0 = unthrottled") \
	X(k, "device.emu_pageable", BOOL, "false", 0, 0, NULL, PLAIN, "emu backend: behave as CUDA does with host memory it has not pinned (kvt_device_host_register): a gather returns from its call only once its copy, and so its dependency, has completed") \
	/* ---- end device ---- */ \
	/* ---- cost model, admission, replay: rows below ---- */ \
	X(k, "cost.model", STR, "", 0, 0, NULL, PLAIN, "cost-model preset: llama3.2-3b, llama3.1-8b, llama3.1-70b, qwen2.5-7b, qwen3-32b, deepseek-v3, or custom (model.* geometry + cost.params_b); empty: model.name if it names a preset") \
	X(k, "cost.gpu", STR, "h100-sxm", 0, 0, NULL, PLAIN, "GPU preset: h100-sxm, h200, a100-80gb, l40s; any other name needs cost.gpu_tflops and cost.h2d_gbps") \
	X(k, "cost.mfu", DOUBLE, "0.5", 0.01, 1, NULL, PLAIN, "fraction of the GPU's dense bf16 peak a prefill reaches") \
	X(k, "cost.gpu_tflops", DOUBLE, "0", 0, 1e6, NULL, PLAIN, "effective prefill TFLOP/s of one GPU, overriding preset peak x cost.mfu (0: preset)") \
	X(k, "cost.h2d_gbps", DOUBLE, "0", 0, 1e5, NULL, PLAIN, "effective host-to-GPU GB/s of one GPU (0: preset)") \
	X(k, "cost.tp", U64, "1", 1, 1024, NULL, PLAIN, "GPUs that serve one prefill (tensor parallel): throughput and host-to-GPU bandwidth scale with it") \
	X(k, "cost.params_b", DOUBLE, "0", 0, 1e6, NULL, PLAIN, "parameters used per token, in billions (custom models; overrides a preset's when > 0)") \
	X(k, "cost.attn_width", U64, "0", 0, 1048576, NULL, PLAIN, "custom models: query heads x head dim (0: model.kv_heads x model.head_dim)") \
	X(k, "cost.restore_fixed_us", DOUBLE, "1000", 0, 1e7, NULL, PLAIN, "fixed cost of one restore that recomputing does not pay: the scheduler step it waits for and the block-table update (docs/COST_MODEL.md)") \
	X(k, "cost.layer_launch_us", DOUBLE, "10", 0, 1e6, NULL, PLAIN, "per layer of a restore: launching its K and V copies") \
	X(k, "cost.profile", STR, "", 0, 0, NULL, PLAIN, "tier profile written by kvtier calibrate (INI); tiers it does not list keep default numbers; an [engine] section (mfu, restore_fixed_us, layer_launch_us, h2d_gbps) overrides the cost.* keys") \
	X(k, "admission.min_freq", U64, "1", 1, 255, NULL, PLAIN, "accesses (frequency-sketch estimate) before a chunk is written to a deeper tier; 1 admits everything") \
	X(k, "admission.min_prefix_tokens", U64, "0", 0, 1e9, NULL, PLAIN, "do not write deeper a chunk that ends before this many prompt tokens") \
	X(k, "admission.doorkeeper", BOOL, "true", 0, 0, NULL, PLAIN, "a filter of recent first sightings in front of the sketch absorbs keys seen once") \
	X(k, "admission.sketch_counters", U64, "0", 0, 1073741824, NULL, PLAIN, "counters per row of the frequency sketch (0: 1M; replay --simulate: one per NVMe block, at least 1024)") \
	X(k, "admission.predict", ENUM, "off", 0, 0, "off|chain", PLAIN, "write deeper only chunks whose reuse is predicted: chain = seen before, or extending a reused chain (a conversation that came back); the replay's --admit-predict (docs/COST_MODEL.md)") \
	X(k, "admission.cost_check", BOOL, "true", 0, 0, NULL, PLAIN, "do not write a chunk to a tier from which restoring it is slower than recomputing it (the store applies it only with a measured cost.profile; replay always)") \
	/* ---- end cost ---- */ \
	/* ---- security: rows below ---- */ \
	X(k, "security.mac_key_file", STR, "", 0, 0, NULL, PLAIN, "file holding the key of a per-object HMAC-SHA-256 (32 raw bytes or 64 hex digits; mode 0600): every object written carries a MAC, and one without a valid MAC is never served (all writers of a shared tier need the key)") \
	X(k, "security.mac_key_env", STR, "", 0, 0, NULL, PLAIN, "name of an environment variable holding that MAC key as 64 hex digits (instead of a file)") \
	X(k, "security.encryption_key_file", STR, "", 0, 0, NULL, PLAIN, "this tenant's AES-256-GCM key file (32 raw bytes or 64 hex digits; mode 0600): objects are encrypted at rest, and without the key they are misses") \
	X(k, "security.encryption_key_env", STR, "", 0, 0, NULL, PLAIN, "name of an environment variable holding that encryption key as 64 hex digits (instead of a file)") \
	/* ---- end security ---- */
/* clang-format on */

#endif
