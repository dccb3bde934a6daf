"""A real vLLM engine in a child process, driven line by line, for kvtier's end-to-end tests
and scripts/vllm-demo.sh; and a random-weight Llama written locally (no model hub).

    python -m kvtier.vllm.harness make-model DIR [--layers 2 --kv-heads 2 ...]
    python -m kvtier.vllm.harness serve SPEC_JSON

serve starts one engine (vLLM's LLM class, engine core in-process so the test can reach
the tier) as SPEC_JSON says, then reads JSON commands from stdin, one per line, and answers
each with one line "KVT> {json}" on stdout:
    {"op": "generate", "prompts": [[token ids], ...], "max_tokens": N}
        -> {"outputs": [[ids]], "cached": [num_cached_tokens], "seconds": [wall]}
           (prompts run one at a time: wall = that request's latency; with max_tokens 1
           it is the time to first token measured in the engine process)
    {"op": "stats"}  -> {"kvtier": kvtier store stats or null, "facts": where the tier
                        took the model's facts from ("vllm", "config.json")}, once the
                        tier's jobs submitted so far are over
    {"op": "quit"}   -> shuts the engine down (the tier's store is closed: write-behind
                        completes) and exits.
SPEC_JSON: {"model": DIR, "connector": "kvtier" | "vllm-fs" | "none", "tier": {extra
tier keys}, "block_size": 128, "cpu_bytes": N, "max_model_len": N, "kvcache_gib": 1}.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def make_model(path: str, layers: int = 2, kv_heads: int = 2, heads: int = 4,
               hidden: int = 256, head_dim: int = 64, vocab: int = 32000,
               intermediate: int = 512, seed: int = 0) -> str:
    """Write a random-weight Llama (bf16) with transformers' save_pretrained; fixed seed,
    so two calls write the same weights. Returns path."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    if os.path.exists(os.path.join(path, "config.json")):
        return path
    torch.manual_seed(seed)
    cfg = LlamaConfig(hidden_size=hidden, num_attention_heads=heads,
                      num_key_value_heads=kv_heads, head_dim=head_dim,
                      num_hidden_layers=layers, intermediate_size=intermediate,
                      vocab_size=vocab, max_position_embeddings=8192,
                      torch_dtype="bfloat16", tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    tmp = path + ".tmp"
    model.save_pretrained(tmp)
    os.replace(tmp, path)
    return path


def kv_transfer_config(spec: dict) -> dict | None:
    """The kv_transfer_config for one of the three set-ups compared."""
    conn = spec.get("connector", "none")
    if conn == "none":
        return None
    if conn == "kvtier":
        tier = {"type": "KvtierTier", "module_path": "kvtier.vllm", **spec.get("tier", {})}
    elif conn == "vllm-fs":
        tier = {"type": "fs", **spec.get("tier", {})}
    else:
        raise ValueError(f"unknown connector {conn!r}")
    return {"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
            "kv_connector_extra_config": {
                "spec_name": "CPUTieringSpec", "spec_module_path": "kvtier.vllm",
                "cpu_bytes_to_use": int(spec.get("cpu_bytes", 256 << 20)),
                "secondary_tiers": [tier]}}


def find_tier(llm):
    """The secondary tier object inside an in-process engine core (None if none)."""
    core = getattr(llm.llm_engine, "engine_core", None)
    core = getattr(core, "engine_core", core)
    sched = getattr(core, "scheduler", None)
    conn = getattr(sched, "connector", None)
    if conn is None:
        return None
    for cand in vars(conn).values():
        mgr = getattr(cand, "manager", None)
        tiers = getattr(mgr, "secondary_tiers", None)
        if tiers:
            return tiers[0]
    return None


def serve(spec: dict) -> None:
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(spec.get("kvcache_gib", 1)))
    from vllm import LLM, SamplingParams

    kw = {}
    ktc = kv_transfer_config(spec)
    if ktc is not None:
        kw["kv_transfer_config"] = ktc
    llm = LLM(model=spec["model"], skip_tokenizer_init=True, dtype="bfloat16",
              block_size=int(spec.get("block_size", 128)),
              max_model_len=int(spec.get("max_model_len", 4096)), enforce_eager=True,
              enable_prefix_caching=True, seed=0, max_num_seqs=8, **kw)
    tier = find_tier(llm)
    out = sys.stdout
    print("KVT> " + json.dumps({"ready": True, "tier": type(tier).__name__ if tier else None}),
          file=out, flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd.get("op")
        if op == "generate":
            res = {"outputs": [], "cached": [], "seconds": []}
            sp = SamplingParams(max_tokens=int(cmd.get("max_tokens", 8)), temperature=0.0,
                                detokenize=False)
            for p in cmd["prompts"]:
                t0 = time.perf_counter()
                r = llm.generate([{"prompt_token_ids": p}], sp, use_tqdm=False)[0]
                res["seconds"].append(time.perf_counter() - t0)
                res["outputs"].append(list(r.outputs[0].token_ids))
                res["cached"].append(int(r.num_cached_tokens or 0))
            print("KVT> " + json.dumps(res), file=out, flush=True)
        elif op == "stats":
            # after the jobs already submitted: a request's last store job may still run on
            # the tier's pool when generate returns, and its puts were then missed (CI
            # 2026-12-05: 3 of a prompt's 4 puts counted)
            if hasattr(tier, "drain_jobs"):
                tier.drain_jobs()
            st = tier.store_stats() if hasattr(tier, "store_stats") else None
            print("KVT> " + json.dumps({"kvtier": st, "facts": getattr(
                tier, "model_facts_source", None)}), file=out, flush=True)
        elif op == "quit":
            break
        else:
            print("KVT> " + json.dumps({"error": f"unknown op {op!r}"}), file=out, flush=True)
    core = getattr(llm.llm_engine, "engine_core", None)
    if core is not None and hasattr(core, "shutdown"):
        core.shutdown()
    print("KVT> " + json.dumps({"bye": True}), file=out, flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kvtier.vllm.harness")
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make-model")
    m.add_argument("dir")
    for a, d in (("layers", 2), ("kv-heads", 2), ("heads", 4), ("hidden", 256),
                 ("head-dim", 64), ("seed", 0)):
        m.add_argument("--" + a, type=int, default=d)
    s = sub.add_parser("serve")
    s.add_argument("spec")
    a = ap.parse_args(argv)
    if a.cmd == "make-model":
        print(make_model(a.dir, a.layers, a.kv_heads, a.heads, a.hidden, a.head_dim,
                         seed=a.seed))
        return 0
    with open(a.spec) as f:
        serve(json.load(f))
    return 0


if __name__ == "__main__":
    sys.exit(main())
