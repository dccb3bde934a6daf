"""kvtier inside real vLLM engines (CPU platform), end to end: two fresh engine processes
share chunks through kvtier over (a) a shared fs directory, (b) Redis, (c) S3 on the test
Ceph, (d) one node's kvtierd. Each engine is a separate process (kvtier.vllm.harness), so a hit in the second one
can only come from what the first one stored.

Engines are expensive on this machine (tens of seconds to start), so one pair per backend
serves several assertions."""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import threading
import time

import numpy as np
import pytest

import kvtier
from engine import DiskSampler, Engine, objects, prompt, read_object

pytestmark = pytest.mark.vllm

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BLOCK = 128
A, B, C = prompt(1), prompt(2), prompt(3)
FILL = [prompt(10 + i) for i in range(4)]
PREFIX = 512  # full 128-token chunks of a 600-token prompt
GEO = kvtier.Geometry(layers=2, kv_heads=2, head_dim=64, chunk_tokens=BLOCK)
OBJ = GEO.object_bytes()


@pytest.fixture(scope="module")
def work():
    base = os.environ.get("KVT_TEST_DIR", "/var/tmp")
    d = os.path.join(base, f"kvt-vllm-e2e-{os.getpid()}")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    yield d
    if not os.environ.get("KVT_KEEP"):
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def model(work):
    from kvtier.vllm.harness import make_model
    return make_model(os.path.join(work, "tiny-llama"))


def kvtier_spec(model, **cfg):
    base = {"dram.bytes": "64MiB", "dram.hugepages": False}
    base.update(cfg)
    return {"model": model, "connector": "kvtier", "block_size": BLOCK,
            "tier": {"config": base}}


@pytest.fixture(scope="module")
def reference(work, model):
    """Greedy outputs with no connector at all."""
    with Engine(work, "ref", {"model": model, "connector": "none", "block_size": BLOCK}) as e:
        r = e.generate([A, B, C])
    assert r["cached"] == [0, 0, 0]
    return dict(zip("ABC", r["outputs"]))


def transformers_kv(model: str, tokens: list[int]) -> np.ndarray:
    """K (after RoPE) and V of every layer for tokens, by transformers on CPU in bf16:
    (layers, 2, tokens, heads, dim) as float32."""
    import torch
    from transformers import LlamaForCausalLM
    m = LlamaForCausalLM.from_pretrained(model, torch_dtype=torch.bfloat16)
    with torch.no_grad():
        out = m(torch.tensor([tokens]), use_cache=True)
    pkv = out.past_key_values
    layers = []
    for l in range(m.config.num_hidden_layers):
        if hasattr(pkv, "layers"):
            k, v = pkv.layers[l].keys, pkv.layers[l].values
        else:
            k, v = pkv[l]
        layers.append(torch.stack([k[0].transpose(0, 1), v[0].transpose(0, 1)]))
    return torch.stack(layers).float().numpy()


def bf16(u16: np.ndarray) -> np.ndarray:
    return (u16.astype(np.uint32) << 16).view(np.float32)


def chunk_objects(paths, ref: np.ndarray) -> dict[int, str]:
    """Which stored object holds which chunk of a prompt, by content: the object whose
    K/V equal the reference chunk to bf16 rounding."""
    found = {}
    for i in range(ref.shape[2] // BLOCK):
        want = ref[:, :, i * BLOCK:(i + 1) * BLOCK]
        for p in paths:
            got = bf16(read_object(p, GEO))
            scale = np.abs(want).max()
            if np.abs(got - want).max() <= 0.02 * scale + 0.02:
                found[i] = p
                break
    return found


# ---------------------------------------------------------------- (a) fs
def test_fs_shared_directory(work, model, reference):
    shared = os.path.join(work, "shared-fs")
    nvme1, nvme2 = os.path.join(work, "nvme1"), os.path.join(work, "nvme2")
    cap = 4 * OBJ + OBJ // 2  # room for 4 chunks of the 20 the first engine stores
    chain = {"store.tiers": "dram,nvme,fs", "fs.dir": shared, "nvme.bytes": cap,
             "nvme.fsync": "none", "fs.fsync": "none"}

    # First engine: stores A, B and four more prompts; its local NVMe tier is bounded.
    disk = DiskSampler(nvme1)
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            disk.sample()
            time.sleep(0.005)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    try:
        with Engine(work, "fs-store", kvtier_spec(model, **chain,
                                                  **{"nvme.dirs": nvme1})) as e:
            r = e.generate([A, B] + FILL)
            st = e.cmd(op="stats")["kvtier"]
    finally:
        stop.set()
        t.join()
    disk.sample()
    disk.sample()
    assert r["cached"] == [0] * 6
    assert r["outputs"][:2] == [reference["A"], reference["B"]]
    assert st["puts"] == 6 * 4
    nv = [x for x in st["tiers"] if x["name"] == "nvme"][0]
    assert nv["capacity_bytes"] == cap and nv["evictions"] > 0
    # the configured capacity was never exceeded by the objects on disk (sampled every
    # few ms); files of evicted objects whose unlink is still in flight (the nvme tier
    # unlinks asynchronously) may add at most a few objects' worth
    print(f"nvme capacity {cap}: peak published {disk.peak_objects}, "
          f"peak incl. temp and pending unlinks {disk.peak_total}")
    assert 0 < disk.peak_objects <= cap, (disk.peak_objects, cap)
    assert disk.peak_total <= cap + 2 * OBJ, (disk.peak_total, cap)
    stored = objects(shared)
    assert len(stored) == 6 * 4

    # The stored objects are the K/V an independent implementation computes.
    ref_a = transformers_kv(model, A[:PREFIX])
    ref_b = transformers_kv(model, B[:PREFIX])
    objs_a = chunk_objects(stored, ref_a)
    objs_b = chunk_objects(stored, ref_b)
    assert sorted(objs_a) == [0, 1, 2, 3], "prompt A's chunks are not all stored as computed"
    assert sorted(objs_b) == [0, 1, 2, 3]
    # Corrupt B's third chunk (one byte of layer 1's V): kvtier's checksums must catch it.
    with open(objs_b[2], "r+b") as f:
        off = GEO.layer_offset(BLOCK, 1) + GEO.layer_bytes(BLOCK) - 7
        f.seek(off)
        byte = f.read(1)[0]
        f.seek(off)
        f.write(bytes([byte ^ 0x5A]))

    # Second engine (fresh process, empty local tiers): restores A fully; B only up to the
    # corrupt chunk; outputs equal the no-connector engine's.
    with Engine(work, "fs-load", kvtier_spec(model, **chain, **{"nvme.dirs": nvme2})) as e:
        r = e.generate([A, B])
        st = e.cmd(op="stats")["kvtier"]
    assert r["cached"] == [PREFIX, 2 * BLOCK]
    assert r["outputs"] == [reference["A"], reference["B"]]
    fs = [x for x in st["tiers"] if x["name"] == "fs"][0]
    assert fs["hits"] >= 6 and fs["read_bytes"] >= 6 * (OBJ - 4096)
    # the corrupt object was dropped, and the chunk vLLM recomputed was stored again:
    # the file at that key holds the right K/V now
    assert chunk_objects([objs_b[2]], ref_b[:, :, 2 * BLOCK:]) == {0: objs_b[2]}


def test_vllm_own_fs_tier_same_outputs(work, model, reference):
    """vLLM's own fs tier, same engines, same prompts: the same outputs and hits."""
    root = os.path.join(work, "vllm-fs")
    spec = {"model": model, "connector": "vllm-fs", "block_size": BLOCK,
            "tier": {"root_dir": root}}
    with Engine(work, "vfs-store", spec) as e:
        r1 = e.generate([A])
    with Engine(work, "vfs-load", spec) as e:
        r2 = e.generate([A])
    assert r1["cached"] == [0] and r2["cached"] == [PREFIX]
    assert r1["outputs"] == r2["outputs"] == [reference["A"]]


# ------------------------------------------------------------- (b) Redis
def test_redis_shared_and_stopped(work, model, reference, redis_server):
    deadline_ms = 500
    chain = {"store.tiers": "dram,redis", "redis.url": redis_server.url,
             "redis.timeout_ms": deadline_ms, "store.tier_timeout_ms": deadline_ms}
    with Engine(work, "redis-store", kvtier_spec(model, **chain)) as e:
        r = e.generate([A, B])
    assert r["cached"] == [0, 0]
    with Engine(work, "redis-load", kvtier_spec(model, **chain)) as e:
        r = e.generate([A])
        assert r["cached"] == [PREFIX] and r["outputs"] == [reference["A"]]
        # Redis stops answering mid-run: B (stored) and C (never stored) still finish, each
        # within the tier deadline plus its recompute, with the right output.
        base = e.generate([prompt(99)], max_tokens=16)["seconds"][0]
        os.kill(redis_server.proc.pid, signal.SIGSTOP)
        try:
            r = e.generate([B, C], max_tokens=16, timeout=120)
        finally:
            os.kill(redis_server.proc.pid, signal.SIGCONT)
        assert r["outputs"] == [reference["B"], reference["C"]]
        assert r["cached"] == [0, 0]
        print(f"redis stopped: request seconds {r['seconds']} (no-cache request {base:.3f} s)")
        for s in r["seconds"]:
            assert s < 3 * deadline_ms / 1000 + 4 * base + 2.0, (s, base)
        # and it keeps serving once Redis is back
        r = e.generate([prompt(98)], max_tokens=4)
        assert len(r["outputs"][0]) == 4


# ------------------------------------------------------------ (c) S3/Ceph
@pytest.fixture(scope="module")
def ceph(work):
    """The test Ceph (scripts/ceph/start-ceph.sh) with radosgw, under the shared lock so
    no two test runs start Ceph at once. Its env file gives the S3 endpoint and keys."""
    lock = open("/tmp/kvt-ceph.lock", "w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    d = os.path.join(work, "ceph")
    env = dict(os.environ, WATCH_PID=str(os.getpid()))
    try:
        subprocess.run([os.path.join(ROOT, "scripts/ceph/start-ceph.sh"), d], check=True,
                       env=env, stdout=subprocess.DEVNULL, timeout=300)
        vals = {}
        out = subprocess.run(["bash", "-c", f"set -a; . {d}/env; env"], check=True,
                             capture_output=True, text=True).stdout
        for line in out.splitlines():
            k, _, v = line.partition("=")
            if k.startswith(("KVTIER_S3", "AWS_")):
                vals[k] = v
        yield vals
    finally:
        subprocess.run([os.path.join(ROOT, "scripts/ceph/stop-ceph.sh"), d],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
        fcntl.flock(lock, fcntl.LOCK_UN)
        lock.close()


@pytest.mark.ceph
def test_s3_on_ceph(work, model, reference, ceph):
    chain = {"store.tiers": "dram,s3", "s3.endpoint": ceph["KVTIER_S3_ENDPOINT"],
             "s3.bucket": "kvtier-vllm", "s3.prefix": "e2e/"}
    env = {k: v for k, v in ceph.items() if k.startswith("AWS_")}
    with Engine(work, "s3-store", kvtier_spec(model, **chain), env=env) as e:
        r = e.generate([A])
    assert r["cached"] == [0]
    with Engine(work, "s3-load", kvtier_spec(model, **chain), env=env) as e:
        r = e.generate([A])
        st = e.cmd(op="stats")["kvtier"]
    assert r["cached"] == [PREFIX] and r["outputs"] == [reference["A"]]
    s3 = [x for x in st["tiers"] if x["name"] == "s3"][0]
    assert s3["hits"] == PREFIX // BLOCK


# ------------------------------------------------- (d) one node's kvtierd
def test_daemon_shared_two_engines(work, model, reference, kvtierd):
    """Two engine processes on one node sharing one kvtierd (store.daemon, client mode):
    the second restores what the first stored, through the daemon's DRAM. Then the daemon
    stops answering mid-run (SIGSTOP: alive, its socket accepting): requests still finish
    with the right outputs, each within the client's deadlines plus its recompute, and
    serving goes on once the daemon runs again."""
    d = kvtierd({"model.layers": GEO.layers, "model.kv_heads": GEO.kv_heads,
                 "model.head_dim": GEO.head_dim, "model.chunk_tokens": BLOCK,
                 "model.name": model, "model.dtype": "bf16", "dram.bytes": "64MiB"})
    timeout_ms = 1000
    spec = kvtier_spec(model, **{"store.daemon": d.sock,
                                 "store.daemon_timeout_ms": timeout_ms})
    spec["tier"]["load_deadline_ms"] = 500
    with Engine(work, "daemon-store", spec) as e:
        r = e.generate([A, B])
    assert r["cached"] == [0, 0]
    assert r["outputs"] == [reference["A"], reference["B"]]
    with Engine(work, "daemon-load", spec) as e:
        r = e.generate([A])
        stats = e.cmd(op="stats")
        # the model's facts (quantization, overrides, revision: in the key) come from the
        # engine's own config; until 2026-12-05 the tier could not reach it there and read
        # config.json
        assert stats["facts"] == "vllm"
        st = stats["kvtier"]  # the daemon's counters
        assert r["cached"] == [PREFIX] and r["outputs"] == [reference["A"]]
        assert st["puts"] >= 2 * PREFIX // BLOCK
        dram = [x for x in st["tiers"] if x["name"] == "dram"][0]
        assert dram["hits"] >= PREFIX // BLOCK
        base = e.generate([prompt(97)], max_tokens=16)["seconds"][0]
        d.proc.send_signal(signal.SIGSTOP)
        try:
            r = e.generate([B, C], max_tokens=16, timeout=120)
        finally:
            d.proc.send_signal(signal.SIGCONT)
        assert r["outputs"] == [reference["B"], reference["C"]]
        print(f"kvtierd stopped: request seconds {r['seconds']} (no-cache request "
              f"{base:.3f} s)")
        for s in r["seconds"]:
            assert s < 3 * timeout_ms / 1000 + 4 * base + 2.0, (s, base)
        # running again (after the client's backoff, at most 2 timeouts): C, stored by
        # nobody while the daemon was stopped, is stored now, and the daemon counts it
        time.sleep(2.5 * timeout_ms / 1000)
        puts = e.cmd(op="stats")["kvtier"]["puts"]
        r = e.generate([prompt(96)], max_tokens=4)
        assert len(r["outputs"][0]) == 4
        assert e.cmd(op="stats")["kvtier"]["puts"] >= puts + PREFIX // BLOCK
