"""Namespace and chunk keys of kvtier objects stored by vLLM (docs/VLLM.md, "Keys").

vLLM's secondary tiers never see token ids: a chunk arrives as an OffloadKey, vLLM's
prefix-chained block hash (it covers every token before the chunk, plus LoRA, multimodal
and cache_salt extras) followed by a 4-byte KV-cache group index. kvtier keys its objects
by 32-byte content addresses inside a namespace (model, revision, geometry, dtype, chunk
size, tenant: docs/FORMAT.md). The key of a vLLM chunk is therefore

    key = SHA-256("kvtier-vllm-offload-v1" || ns_id || u32 len(ctx) || ctx || OffloadKey)

with ctx the vLLM-side facts the OffloadKey's bytes depend on but do not name: the block
hash algorithm, the tokens per hash, the per-request tenant salt if any, and a digest of
the engine settings that change KV values without changing the model's name, revision or
geometry (online quantization, hf_overrides, remote code's revision, layers kept out of an
fp8 KV cache), if any is set, and for a model with no revision a sample of its weights
files (weights_sample). Why hash
rather than use the OffloadKey bytes directly:
  - an OffloadKey is only unique within one model, block size and hash setting; the
    namespace id and ctx make two deployments that differ in any of those never collide,
    even when they share a directory, a bucket or a Redis;
  - objects are in kvtier's canonical layout (layout version = the domain tag), so the key
    deliberately does not include the attention backend or the tensor-parallel size: a
    CUDA writer and a CPU reader, or TP=2 and TP=1, share objects;
  - the result is a fixed 32-byte key whatever the hash algorithm's width.
Another engine that wants to share these objects must reproduce vLLM's block hashes (the
algorithm and its seed NONE_HASH, i.e. the same PYTHONHASHSEED for non-cryptographic
hashes) and this derivation; an engine that has token ids can instead use kvtier's own
token keys (kvt_keys_from_tokens), which a vLLM deployment would not find.
"""

from __future__ import annotations

import hashlib
import json
import os

DOMAIN = b"kvtier-vllm-offload-v1"


def context_bytes(hash_algo: str, tokens_per_hash: int, tenant: str = "",
                  weights: str = "") -> bytes:
    """The vLLM-side context of an OffloadKey, canonical text. weights: weights_digest()
    of the engine's settings that change KV values but not the model's name, revision or
    geometry ("" when there are none: the line is left out, so such deployments keep the
    keys they had)."""
    for name, v in (("hash_algo", hash_algo), ("tenant", tenant), ("weights", weights)):
        if any(ord(c) < 0x20 or ord(c) == 0x7F for c in v):
            raise ValueError(f"{name} may not contain control characters")
    return (f"vllm\nhash={hash_algo}\ntokens_per_hash={int(tokens_per_hash)}\n"
            f"tenant={tenant}\n" + (f"weights={weights}\n" if weights else "")).encode()


def weights_digest(settings: dict) -> str:
    """A hex SHA-256 of the KV-affecting settings that are set (None, "", {} and [] are
    left out, so a deployment that sets none gets ""), canonical JSON (sorted keys,
    values as their repr when JSON cannot hold them)."""
    kept = {k: v for k, v in settings.items() if v not in (None, "", {}, [], ())}
    if not kept:
        return ""
    text = json.dumps(kept, sort_keys=True, separators=(",", ":"), default=repr)
    return hashlib.sha256(text.encode()).hexdigest()


WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
SAMPLE_BYTES = 1 << 16


def weights_sample(path: str) -> str:
    """A hex SHA-256 standing for the weights in a local model directory: its config.json
    and, for each weight file (sorted by name, symlinks followed as in a Hugging Face
    snapshot), its name, size and four 64 KiB pieces (at 0, 1/3, 2/3 and the end). ""
    when path holds neither. Why sampled: two checkpoints of one architecture have the same
    names and sizes, and differ in every tensor, so a few pieces tell them apart; hashing
    whole files would read gigabytes at every engine start. Content, not mtimes: a copy of
    the same weights (another node, an image) keeps its keys. A path that is itself a weight
    file (a .gguf model) is sampled alone."""
    if not path:
        return ""
    h = hashlib.sha256(b"kvtier-weights-sample-v1\0")
    found = False
    if os.path.isfile(path) and path.endswith(WEIGHT_SUFFIXES):
        path, names = os.path.dirname(path), [os.path.basename(path)]
    elif os.path.isdir(path):
        names = sorted(os.listdir(path))
        cfg = os.path.join(path, "config.json")
        if os.path.isfile(cfg):
            with open(cfg, "rb") as f:
                h.update(b"config.json\0" + hashlib.sha256(f.read()).digest())
            found = True
    else:
        return ""
    for name in names:
        full = os.path.join(path, name)
        if not name.endswith(WEIGHT_SUFFIXES) or not os.path.isfile(full):
            continue
        size = os.path.getsize(full)
        h.update(name.encode() + b"\0" + size.to_bytes(8, "little"))
        with open(full, "rb") as f:
            for at in sorted({0, size // 3, 2 * size // 3, max(0, size - SAMPLE_BYTES)}):
                f.seek(at)
                h.update(f.read(SAMPLE_BYTES))
        found = True
    return h.hexdigest() if found else ""


def key_prefix(ns_id: bytes, ctx: bytes):
    """The SHA-256 state over what comes before the OffloadKey in every chunk key of one
    namespace and context. Made once per context and copied per key (key_from): hashing ctx
    again for each key cost a pass over it per chunk on vLLM's scheduler thread."""
    if len(ns_id) != 32:
        raise ValueError("ns_id must be 32 bytes")
    h = hashlib.sha256(DOMAIN)
    h.update(ns_id)
    h.update(len(ctx).to_bytes(4, "little"))
    h.update(ctx)
    return h


def key_from(prefix, offload_key: bytes) -> bytes:
    """The kvtier key (32 bytes) of one vLLM chunk, from its context's key_prefix."""
    h = prefix.copy()
    h.update(bytes(offload_key))
    return h.digest()


def chunk_key(ns_id: bytes, ctx: bytes, offload_key: bytes) -> bytes:
    """The kvtier key (32 bytes) of one vLLM chunk."""
    return key_from(key_prefix(ns_id, ctx), offload_key)
