"""Two vLLM instances, the second restoring the first's prefix through a shared directory:
time to first token measured in the real engine with kvtier, with vLLM's own fs tier and
with no cache (scripts/vllm-demo.sh runs this; docs/BENCHMARKS.md records it). With
--kvtierd, also through the node's kvtierd (store.daemon): the prefix then comes from the
daemon's DRAM, which outlives the engines.

For each cache mode, one fresh engine stores the prompt's prefix, then `runs` fresh engines
per mode (new processes: nothing in their memory; the modes interleaved) each run two
unrelated warm-up requests (the second hits the first's prefix in the engine's own cache,
so one-time costs of the prefix-hit path are paid before the measurement) and then the
prompt with max_tokens=1; the wall time of that request is its time to first token. The
median and minimum over the fresh engines are reported with the cached tokens vLLM reports.

    python -m kvtier.vllm.demo --workdir DIR [--geometry tiny,large] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys

from ..daemon import Kvtierd

GEOMETRIES = {
    # name: (layers, kv_heads, heads, hidden, head_dim)
    "tiny": (2, 2, 4, 256, 64),
    "large": (8, 8, 8, 1024, 128),
}


def _prompt(seed: int, n: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(100, 32000) for _ in range(n)]


def _engine(spec: dict, prompts: list[list[int]], workdir: str, name: str,
            max_tokens: int = 1) -> dict:
    """Run one fresh engine process over prompts, one request each; its answers."""
    spec_path = os.path.join(workdir, name + ".json")
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    cmds = "".join(json.dumps({"op": "generate", "prompts": [p], "max_tokens": max_tokens}) + "\n"
                   for p in prompts) + json.dumps({"op": "quit"}) + "\n"
    with open(os.path.join(workdir, name + ".log"), "w") as log:
        p = subprocess.run([sys.executable, "-m", "kvtier.vllm.harness", "serve", spec_path],
                           input=cmds, stdout=subprocess.PIPE, stderr=log, text=True,
                           timeout=1800)
    answers = [json.loads(line[5:]) for line in p.stdout.splitlines()
               if line.startswith("KVT> ")]
    gens = [a for a in answers if "outputs" in a]
    if p.returncode != 0 or len(gens) != len(prompts):
        raise RuntimeError(f"engine {name} failed (rc {p.returncode}); see "
                           f"{os.path.join(workdir, name + '.log')}")
    return {"seconds": [g["seconds"][0] for g in gens], "cached": [g["cached"][0] for g in gens],
            "outputs": [g["outputs"][0] for g in gens]}


def run(workdir: str, geometry: str, runs: int, prefix: int, block: int,
        kvtierd: str = "") -> list[dict]:
    from .harness import make_model
    layers, kv_heads, heads, hidden, head_dim = GEOMETRIES[geometry]
    gdir = os.path.join(workdir, geometry)
    os.makedirs(gdir, exist_ok=True)
    model = make_model(os.path.join(gdir, "model"), layers=layers, kv_heads=kv_heads,
                       heads=heads, hidden=hidden, head_dim=head_dim)
    kv_per_token = layers * 2 * kv_heads * head_dim * 2
    prompt = _prompt(7, prefix + 64)
    warm = _prompt(8, 256)
    cpu_bytes = max(256 << 20, 4 * kv_per_token * (prefix + 64))
    modes = {
        "no cache": {"connector": "none"},
        "vLLM fs tier": {"connector": "vllm-fs",
                         "tier": {"root_dir": os.path.join(gdir, "vllm-fs")}},
        # fs.direct off: read through the page cache, as vLLM's fs tier does (kvtier's
        # default, O_DIRECT, reads the disk every time: on this shared machine 1.5 MiB took
        # 2-380 ms that way against ~1 ms through the cache, which measured the disk's
        # other users, not the tier)
        "kvtier (fs tier)": {"connector": "kvtier", "tier": {"config": {
            "store.tiers": "dram,fs", "fs.dir": os.path.join(gdir, "kvtier-fs"),
            "fs.direct": os.environ.get("KVT_DEMO_FS_DIRECT", "off"),
            "fs.bytes": "1GiB",  # the capacity bound on (far above what the demo stores)
            "dram.bytes": max(64 << 20, 2 * kv_per_token * (prefix + 64)),
            "dram.hugepages": False}}},
    }
    daemon, log = None, None
    if kvtierd:  # the node's daemon, serving DRAM for this geometry's model
        shutil.rmtree(os.path.join(gdir, "kvtierd"), ignore_errors=True)
        log = open(os.path.join(gdir, "kvtierd.log"), "w")
        daemon = Kvtierd(kvtierd, gdir, {
            "store.tiers": "dram", "dram.hugepages": "false",
            "dram.bytes": max(64 << 20, 4 * kv_per_token * (prefix + 64)),
            "model.name": model, "model.layers": layers, "model.kv_heads": kv_heads,
            "model.head_dim": head_dim, "model.chunk_tokens": block, "model.dtype": "bf16"},
            log=log)
        modes["kvtier (kvtierd)"] = {"connector": "kvtier", "tier": {"config": {
            "store.daemon": daemon.sock}}}
    try:
        return _measure(modes, model, gdir, geometry, runs, prefix, block, prompt, warm,
                        cpu_bytes, kv_per_token)
    finally:
        if daemon:
            daemon.stop()
            log.close()


def _measure(modes, model, gdir, geometry, runs, prefix, block, prompt, warm, cpu_bytes,
             kv_per_token) -> list[dict]:
    # one storing engine per cached mode, then the fresh restoring engines with the modes
    # interleaved (run i of every mode, then run i+1), so a change in the host's load
    # (a shared machine) falls on every mode alike
    specs = {mode: {"model": model, "block_size": block, "cpu_bytes": cpu_bytes,
                    "max_model_len": 8192, **extra} for mode, extra in modes.items()}
    tags = {mode: mode.split()[0].lower() + ("d" if "kvtierd" in mode else "")
            for mode in modes}
    for d in ("vllm-fs", "kvtier-fs"):
        shutil.rmtree(os.path.join(gdir, d), ignore_errors=True)
    for mode, spec in specs.items():
        if spec["connector"] != "none":
            # a few decode steps: vLLM submits a request's stores at the next engine step
            st = _engine(spec, [prompt], gdir, f"{tags[mode]}-store", max_tokens=16)
            if st["cached"] != [0]:
                raise RuntimeError(f"{mode}: the storing engine found a cache already")
    # warm-up: a request, then one with a cached prefix (the engine's first prefix-hit
    # request pays one-time costs that are not the cache's)
    res: dict[str, list] = {mode: [] for mode in modes}
    for i in range(runs):
        for mode, spec in specs.items():
            res[mode].append(_engine(spec, [warm, warm + warm[:64], prompt], gdir,
                                     f"{tags[mode]}-restore{i}"))
    rows = []
    for mode in modes:
        ttft = [r["seconds"][2] for r in res[mode]]
        rows.append({"geometry": geometry, "mode": mode, "prompt_tokens": len(prompt),
                     "cached": [r["cached"][2] for r in res[mode]], "ttft_s": ttft,
                     "median_s": statistics.median(ttft), "min_s": min(ttft),
                     "first_token": res[mode][0]["outputs"][2][0],
                     "kv_mib": kv_per_token * prefix / 2**20})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kvtier.vllm.demo")
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--geometry", default="tiny,large")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--prefix", type=int, default=1536, help="tokens restored")
    ap.add_argument("--block", type=int, default=128, help="vLLM block size")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--kvtierd", default="", help="the kvtierd binary: adds the mode "
                    "'kvtier (kvtierd)', engines sharing one node daemon")
    a = ap.parse_args(argv)
    os.makedirs(a.workdir, exist_ok=True)
    allrows = []
    for g in a.geometry.split(","):
        L, H, _, _, D = GEOMETRIES[g]
        print(f"== {g}: {L} layers, {H} KV heads x {D}, bf16; restoring a {a.prefix}-token "
              f"prefix; median of {a.runs} fresh engines", flush=True)
        rows = run(a.workdir, g, a.runs, a.prefix, a.block, a.kvtierd)
        print(f"{'mode':<18} {'cached tokens':>14} {'TTFT median':>12} {'min':>8}   runs (s)")
        for r in rows:
            print(f"{r['mode']:<18} {r['cached'][0]:>14} {r['median_s']:>11.3f}s "
                  f"{r['min_s']:>7.3f}s   "
                  + " ".join(f"{s:.3f}" for s in r["ttft_s"]), flush=True)
        firsts = {r["first_token"] for r in rows}
        print("first generated token identical in every mode:", len(firsts) == 1, flush=True)
        allrows += rows
    if a.json:
        print(json.dumps(allrows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
