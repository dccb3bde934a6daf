"""KvtierTier: a vLLM secondary offloading tier backed by a kvtier store.

Registered through kv_transfer_config (docs/VLLM.md):
    "secondary_tiers": [{"type": "KvtierTier", "module_path": "kvtier.vllm",
                         "config": {...kvtier keys...}}]          (or "config_file": PATH)

Every method runs on vLLM's scheduler thread and returns without waiting for I/O:
  - lookup: a chunk's verdict is cached per request; an unknown chunk gets a kvtier lookup
    at once, whose DRAM part completes inside the call (a DRAM hit or miss is answered
    immediately) and whose deeper-tier part answers RETRY until it completes (the store's
    tier deadline, store.tier_timeout_ms, bounds how long: a stopped server is a miss);
    completions are polled here, on the scheduler thread (lookup, on_schedule_end,
    get_finished_jobs, take_events), never by a poll thread: a thread that must take the
    GIL back from vLLM's busy step loop to hand over an answer waited 0.2-2 s per
    handoff, and a request behind a few of them took 5 s instead of the tier deadline;
  - submit_load starts the job with one non-blocking libkvtier call (kvtier.Rows: the
    reads, and the conversion of each verified chunk into vLLM's row layout, layout.py,
    run in C on the library's threads) and get_finished_jobs polls it, so no other Python
    thread (and no GIL handoff) stands between a finished read and vLLM; submit_store
    hands the job to the store thread, which makes one blocking libkvtier call for it;
  - a load whose chunk is missing, corrupt (kvtier verifies every checksum before a byte
    is served), or not complete by load_deadline_ms is reported failed with the chunks
    before it kept, so vLLM recomputes the rest.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import logging
import os
import queue
import sys
import time
from collections import OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from vllm.v1.kv_offload.base import (
    Locality,
    LookupResult,
    Medium,
    OffloadingCounterMetadata,
    OffloadingEvent,
    OffloadingGaugeMetadata,
    OffloadingMetricMetadata,
    OffloadKey,
    ReqContext,
    RequestOffloadingContext,
    ScheduleEndContext,
)
from vllm.v1.kv_offload.tiering.base import JobId, JobResult, SecondaryTierManager, TransferJob

import kvtier
from kvtier.config import flatten
from kvtier.keys import NS_FIELD_MAX

from . import options as opt
from .layout import LAYOUTS, RowLayout
from .naming import context_bytes, key_from, key_prefix, weights_digest, weights_sample

log = logging.getLogger("kvtier.vllm")
# KVTIER_VLLM_PROFILE=1: one line per transfer job on stderr with the time of each stage
# (queue wait, reads, layout conversion, reaping), to find where a restore spends its time.
_PROFILE = os.environ.get("KVTIER_VLLM_PROFILE", "") not in ("", "0")

_DTYPES = {"bfloat16": ("bf16", 2), "float16": ("fp16", 2), "half": ("fp16", 2),
           "float32": ("fp32", 4), "float": ("fp32", 4), "fp8": ("fp8", 1),
           "fp8_e4m3": ("fp8", 1), "float8_e4m3fn": ("fp8", 1)}


class M:
    """Metric names (Prometheus), all labelled by kvtier tier unless noted."""

    HITS = "vllm:kvtier_hits"
    MISSES = "vllm:kvtier_misses"
    READ_BYTES = "vllm:kvtier_read_bytes"
    WRITE_BYTES = "vllm:kvtier_write_bytes"
    EVICTIONS = "vllm:kvtier_evictions"
    CHECKSUM_FAILURES = "vllm:kvtier_checksum_failures"
    ERRORS = "vllm:kvtier_errors"
    WRITES_SKIPPED = "vllm:kvtier_writes_skipped"
    USED_BYTES = "vllm:kvtier_used_bytes"
    CAPACITY_BYTES = "vllm:kvtier_capacity_bytes"
    LOAD_FAILURES = "vllm:kvtier_load_failures"  # label: reason
    DEADLINE_MISSES = "vllm:kvtier_load_deadline_misses"  # no label


_COUNTERS = {
    M.HITS: "hits", M.MISSES: "misses", M.READ_BYTES: "read_bytes",
    M.WRITE_BYTES: "write_bytes", M.EVICTIONS: "evictions",
    M.CHECKSUM_FAILURES: "checksum_failures", M.ERRORS: "errors",
    M.WRITES_SKIPPED: "writes_skipped",
}


def _tiers_by_name(tiers):
    """(key, tier) per tier of a stats snapshot, the key its name and which of that
    name it is (a chain may repeat a kind), for pairing one interval's with the next."""
    seen: dict = {}
    for t in tiers:
        k = seen.get(t["name"], 0)
        seen[t["name"]] = k + 1
        yield (t["name"], k), t


@dataclass
class _Verdict:
    hit: bool | None = None
    reqs: set = field(default_factory=set)
    t0: float = field(default_factory=time.monotonic)
    told: bool = False


@dataclass
class _ReqTenant:
    prefix: Any  # key_prefix of its tenant's context; None: unusable, not cached


@dataclass
class _Done:
    job_id: JobId
    ok: int                      # leading chunks that succeeded
    n: int                       # chunks in the job
    is_load: bool
    seconds: float
    reason: str = ""             # why the first failed chunk failed
    stored: list = field(default_factory=list)  # OffloadKeys written (stores)
    prof: dict = field(default_factory=dict)     # stage -> seconds (KVTIER_VLLM_PROFILE)
    finished: float = 0.0                        # time.monotonic() when the job ended


def _engine_vllm_config():
    """vLLM's config of the engine creating this tier, or None. vLLM (0.32) builds the
    scheduler's connector, and with it this tier, without making its config current:
    get_current_vllm_config_or_none() is None there (measured 2026-12-05 in the end-to-end
    engines), and until then the tier silently fell back to config.json, so quantization,
    hf_overrides, the revision and skipped fp8 layers never reached the key. The engine
    that is creating the tier holds its config in a caller's frame (the connector
    factory's `config`, the scheduler's `self.vllm_config`): the nearest one is this
    engine's."""
    try:
        from vllm.config import VllmConfig, get_current_vllm_config_or_none
        vc = get_current_vllm_config_or_none()
    except Exception:  # an older or newer vLLM without them
        return None
    if vc is not None:
        return vc
    f = sys._getframe(1)
    for _ in range(64):
        if f is None:
            break
        for v in f.f_locals.values():
            if isinstance(v, VllmConfig):
                return v
            try:  # any object: its attribute lookup may raise anything
                inner = getattr(v, "vllm_config", None)
            except Exception:
                continue
            if isinstance(inner, VllmConfig):
                return inner
        f = f.f_back
    return None


def _model_facts(offloading_spec, override: dict | None, vc) -> dict:
    """layers, kv_heads, head_dim, revision, hash_algo and weights (weights_digest of the
    settings that change KV values beyond the model's name, revision and geometry) of the
    served model: from the tier's "model" override, else vLLM's current config, else the
    model's config.json."""
    oc = offloading_spec.config
    facts = {"revision": "", "hash_algo": "", "weights": "", "source": "vllm"}
    if vc is not None and vc.model_config is not None:
        mc = vc.model_config
        facts.update(layers=mc.get_total_num_hidden_layers(),
                     kv_heads=mc.get_total_num_kv_heads(), head_dim=mc.get_head_size(),
                     revision=mc.revision or "",
                     hash_algo=str(vc.cache_config.prefix_caching_hash_algo),
                     weights=_weights(mc, vc.cache_config))
    else:
        facts["source"] = "config.json"
        log.warning("kvtier: vLLM's config is not reachable from the tier: the model's "
                    "geometry comes from %s/config.json, and its quantization, hf_overrides "
                    "and revision are not in the keys (engines that differ only there "
                    "must not share a store)", oc.model.name)
        path = os.path.join(oc.model.name, "config.json")
        if os.path.exists(path):
            with open(path) as f:
                hf = json.load(f)
            hf = hf.get("text_config", hf)
            heads = hf.get("num_attention_heads")
            facts.update(layers=hf.get("num_hidden_layers"),
                         kv_heads=hf.get("num_key_value_heads", heads),
                         head_dim=hf.get("head_dim") or (hf["hidden_size"] // heads))
    for k, v in (override or {}).items():
        # vLLM's own config is what its KV tensors were sized from: a "model" option that
        # contradicts it would convert rows at the wrong offsets (until 2026-12-05 it won)
        if k in ("layers", "kv_heads", "head_dim") and facts.get(k) and int(v) != int(facts[k]):
            raise ValueError(f"KvtierTier: model {k} = {v} in the tier config, but the served "
                             f"model has {facts[k]}")
        facts[k] = v
    missing = [k for k in ("layers", "kv_heads", "head_dim") if not facts.get(k)]
    if missing:
        raise ValueError(f"KvtierTier: cannot tell the model's {', '.join(missing)}; "
                         "pass them as \"model\": {\"layers\": ..., \"kv_heads\": ..., "
                         "\"head_dim\": ...} in the tier config")
    if not facts["hash_algo"]:
        facts["hash_algo"] = "sha256"
    return facts


def _weights(mc, cc) -> str:
    """The digest of what changes the KV of one model name, revision and geometry: two
    engines that differ here must not load each other's chunks (their bytes are whole, so
    no checksum would catch it). Online quantization, hf_overrides (rope scaling, ...),
    the remote code's revision and the layers an fp8 KV cache skips; the KV dtype itself
    is in the namespace already, as resolved, so "auto" and its resolved name still
    share. Until 2026-12-04 none of these was in the key."""
    hf = getattr(mc, "hf_overrides", None)
    if callable(hf):  # a function by its name: its repr holds an address, new each process
        hf = f"{getattr(hf, '__module__', '')}.{getattr(hf, '__qualname__', type(hf).__name__)}"
    return weights_digest({
        "quantization": getattr(mc, "quantization", None),
        "hf_overrides": hf,
        "code_revision": getattr(mc, "code_revision", None),
        "kv_cache_dtype_skip_layers": getattr(cc, "kv_cache_dtype_skip_layers", None),
        "fp8_encoding": _fp8_encoding(cc),
    })


def _fp8_encoding(cc) -> str | None:
    """The platform's encoding of an fp8 KV cache when it is not the usual e4m3fn: vLLM
    writes e4m3fnuz on AMD MI300 (another exponent bias: the same bytes are other values),
    and both are kvtier's "fp8", so a store shared across platforms would serve one's KV to
    the other (since 2026-12-05 in the key; None where keys stay as they were)."""
    if not str(getattr(cc, "cache_dtype", "") or "").startswith("fp8"):
        return None
    try:
        from vllm.platforms import current_platform
        enc = str(current_platform.fp8_dtype()).removeprefix("torch.")
    except Exception:  # a platform without fp8
        return None
    return None if enc == "float8_e4m3fn" else enc


def _is_commit(revision: str) -> bool:
    """A Hugging Face commit id, the only revision that names fixed weights (a branch or a
    tag moves)."""
    return len(revision) == 40 and all(c in "0123456789abcdef" for c in revision)


def _model_dir(name: str, revision: str = "", cache_dir: str | None = None) -> str:
    """Where the weights of model `name` (at `revision`, a branch or tag; "" for the
    default) are read from: name itself if it is a directory or a file (a .gguf), else the
    Hugging Face cache's snapshot of it (local lookup only, no network; "" when it is not
    cached there) - in cache_dir when vLLM downloads there (--download-dir; until
    2026-12-06 the default cache was sampled, which may hold another snapshot)."""
    if os.path.exists(name):
        return name
    try:
        from huggingface_hub import try_to_load_from_cache
        hit = try_to_load_from_cache(name, "config.json", revision=revision or None,
                                     cache_dir=cache_dir or None)
    except Exception:  # not an id the hub library takes, or no such library
        return ""
    return os.path.dirname(hit) if isinstance(hit, str) else ""


def _detect_layout(oc, dtype_name: str, block_tokens: int, head_dim: int, vc=None) -> str:
    from vllm.platforms import current_platform
    if current_platform.is_cpu():
        import torch
        from vllm.v1.attention.backends.cpu_attn import _get_attn_isa
        if _DTYPES.get(dtype_name, ("", 0))[1] == 1:
            raise ValueError("KvtierTier: an fp8 KV cache on vLLM's CPU backend is not "
                             "supported (its pages are not converted)")
        # The ISA as vLLM's CPU backend picks it: from the model's dtype and the cache
        # dtype (a float16 cache of a bf16 model on an AMX CPU is "amx"; asked with the
        # KV dtype alone, as until 2026-12-05, the tier took it for "vec")
        model_dtype = getattr(getattr(vc, "model_config", None), "dtype", None)
        cache_dtype = getattr(getattr(vc, "cache_config", None), "cache_dtype", None)
        if not isinstance(model_dtype, torch.dtype):
            model_dtype, cache_dtype = getattr(torch, dtype_name), None
        isa = _get_attn_isa(model_dtype, block_tokens, head_dim, cache_dtype)
        # vec16 writes vec's pages; amx its own tiles (tests/python/test_layout.py checks
        # both against the kernel). Until 2026-12-05 amx was refused: on a CPU with AMX
        # (Sapphire Rapids and later) no bf16 engine with kvtier could start.
        layout = {"vec": "cpu-vec", "vec16": "cpu-vec", "amx": "cpu-amx"}.get(isa)
        if layout is None:
            raise ValueError(f"KvtierTier: CPU attention ISA {isa!r} stores KV in a layout "
                             "this tier does not convert (vec, vec16, amx)")
        return layout
    layout = {"LBNHC": "nhd", "LBHNC": "hnd"}.get(oc.kv_cache_layout or "LBNHC")
    if layout is None:
        raise ValueError(f"KvtierTier: KV cache layout {oc.kv_cache_layout} is not "
                         "supported (LBNHC, LBHNC)")
    return layout


class KvtierTier(SecondaryTierManager):
    """Secondary tier storing vLLM chunks in a kvtier store (any kvtier tier chain:
    dram, nvme with a capacity bound, a shared fs directory, S3, RADOS, Redis)."""

    medium: ClassVar[Medium] = Medium.STORAGE
    STAGING_BYTES: ClassVar[int] = 32 << 20  # canonical chunks in flight, all loads together
    EVENTS_QUEUED: ClassVar[int] = 1 << 16  # store events between two take_events (~6 MiB)

    def __init__(self, offloading_spec, primary_kv_view: memoryview, tier_type: str,
                 config: dict | None = None, config_file: str | None = None,
                 model: dict | None = None, layout: str | None = None, tenant: str = "",
                 load_deadline_ms: int = 5000, enable_kv_events: bool = False,
                 events_reconcile_s: float = 5.0, locality: str | None = None,
                 backpressure_detector=None):
        try:
            self._start(offloading_spec, primary_kv_view, tier_type, config, config_file,
                        model, layout, tenant, load_deadline_ms, enable_kv_events,
                        events_reconcile_s, locality, backpressure_detector)
        except BaseException:
            # a start that failed after the store opened (the weights unreadable, the rows
            # handle refused, an event queue without memory) left the store - its DRAM
            # pool, threads, tier files and locks - to the garbage collector (until
            # 2026-12-06): a retry in the same process then found the NVMe tier locked
            pool = getattr(self, "_store_pool", None)
            if pool is not None:
                pool.shutdown(wait=False)
            store = getattr(self, "_store", None)
            check = getattr(self, "_check_store", None)
            if check is not None and check is not store:
                check.close()
            if store is not None:
                store.close()  # closes its Rows handles first
                self._store = None
            raise

    def _start(self, offloading_spec, primary_kv_view, tier_type, config, config_file, model,
               layout, tenant, load_deadline_ms, enable_kv_events, events_reconcile_s,
               locality, backpressure_detector):
        # checked before anything is opened: each bad option is one line naming it
        config, config_file = opt.config(config), opt.config_file(config_file)
        model, tenant = opt.model(model), opt.text("tenant", tenant, none_ok=False)
        layout = opt.choice("layout", layout, LAYOUTS)
        locality = opt.choice("locality", locality, tuple(x.value for x in Locality))
        load_deadline_ms = opt.number("load_deadline_ms", load_deadline_ms, "milliseconds")
        events_reconcile_s = opt.number("events_reconcile_s", events_reconcile_s, "seconds",
                                        zero_ok=True)
        enable_kv_events = opt.flag("enable_kv_events", enable_kv_events)
        super().__init__(offloading_spec, primary_kv_view, tier_type, backpressure_detector)
        self.locality = Locality(locality) if locality is not None else None
        oc = offloading_spec.config
        if oc.canonical_layout:
            # vLLM then writes one page per tensor holding every head, but a row is read
            # as one slot per TP rank: the sizes match, so engines of other TP sizes
            # sharing a store would exchange KV with its heads shuffled, unnoticed
            raise ValueError("KvtierTier does not implement vLLM's canonical_layout; "
                             "remove it from the extra config")
        if len(oc.groups) != 1:
            raise ValueError("KvtierTier supports models with one KV cache group "
                             f"(this one has {len(oc.groups)})")
        par = oc.parallel
        if par.pp_size != 1 or par.pcp_size != 1 or par.dcp_size != 1:
            raise ValueError("KvtierTier supports tensor parallelism only "
                             "(pipeline / context parallel sizes must be 1)")
        dt = _DTYPES.get(oc.model.dtype)
        if dt is None:
            raise ValueError(f"KvtierTier: KV dtype {oc.model.dtype} is not supported")
        kvt_dtype, itemsize = dt
        vc = _engine_vllm_config()
        if itemsize == 1 and getattr(getattr(vc, "cache_config", None),
                                     "kv_cache_dtype_skip_layers", None):
            # the skipped layers keep the model's dtype: pages of two sizes in one group,
            # which the single page size below would read at the wrong offsets
            raise ValueError("KvtierTier: an fp8 KV cache with kv_cache_dtype_skip_layers "
                             "(layers of two page sizes) is not supported")
        if itemsize == 1 and getattr(getattr(vc, "cache_config", None),
                                     "calculate_kv_scales", False):
            # the scales come from each engine's first batch: the same fp8 bytes decode to
            # other values in another process (a restart, another node), unseen by any CRC
            raise ValueError("KvtierTier: an fp8 KV cache with calculate_kv_scales (scales "
                             "measured per process) is not supported: use the "
                             "checkpoint's scales")
        if getattr(vc, "lora_config", None) is not None:
            # vLLM's block hash names an adapter by name and path, not by its contents
            # (docs/VLLM.md, "What the key does not cover")
            log.warning("kvtier tier %s: LoRA is enabled and chunk keys cover an adapter "
                        "by its name and path only: an adapter retrained in place restores "
                        "the old one's KV from this store; give each adapter version a path "
                        "of its own", tier_type)
        facts = _model_facts(offloading_spec, model, vc)
        self.model_facts_source = facts["source"]  # "vllm" or "config.json"
        block_tokens = oc.groups[0].tokens_per_block
        bpc = offloading_spec.blocks_per_chunk
        layers = int(facts["layers"])
        kv_heads, head_dim = int(facts["kv_heads"]), int(facts["head_dim"])
        group_layers = len(oc.groups[0].layer_names)
        if group_layers and group_layers != layers:
            # a page per KV tensor of the group: a drafter's layer in it (EAGLE), or a wrong
            # layer count, made the remainder look like page padding - rows converted at
            # the wrong offsets, restored KV silently wrong (until 2026-12-05)
            raise ValueError(f"KvtierTier: vLLM's KV cache group holds {group_layers} "
                             f"layers' tensors, the model has {layers} layers; a group with "
                             "other layers in it (a speculative drafter's) is not supported")
        need = layers * 2 * block_tokens * (kv_heads // max(par.tp_size, 1)) * head_dim * itemsize
        # Exactly: with one KV cache group of one page per layer, vLLM's pages are unpadded
        # (it pads only to unify the groups of hybrid models). A geometry needing fewer bytes
        # than vLLM allocates (KV heads given per rank, a head_dim that is not hidden_size /
        # heads) made the rest of each page look like padding: rows stored and restored in
        # part, the rest of a restored page stale, the load reported whole (until
        # 2026-12-06, found by review).
        if oc.worker_kv_bytes_per_block % layers or need != oc.worker_kv_bytes_per_block \
                or kv_heads % max(par.tp_size, 1):
            raise ValueError(
                f"KvtierTier: a geometry of {layers} layers, {kv_heads} KV heads x {head_dim} "
                f"over TP={par.tp_size} needs {need} bytes per {block_tokens}-token block; "
                f"vLLM allocates {oc.worker_kv_bytes_per_block}")
        self.layout = RowLayout(
            layout=layout or _detect_layout(oc, oc.model.dtype, block_tokens,
                                            int(facts["head_dim"]), vc),
            layers=layers, kv_heads=int(facts["kv_heads"]), head_dim=int(facts["head_dim"]),
            block_tokens=block_tokens, blocks_per_chunk=bpc, tp=par.tp_size,
            itemsize=itemsize, page_bytes=oc.worker_kv_bytes_per_block // layers)
        if self.layout.row_bytes > self.block_size_bytes:
            raise ValueError(f"KvtierTier: geometry {facts} needs {self.layout.row_bytes} "
                             f"bytes per chunk, the primary tier's rows hold "
                             f"{self.block_size_bytes}")

        derived = {"model.layers": layers, "model.kv_heads": self.layout.kv_heads,
                   "model.head_dim": self.layout.head_dim, "model.dtype": kvt_dtype,
                   "model.kind": "kv", "model.chunk_tokens": self.layout.chunk_tokens}
        user = flatten(config or {})
        cfg = kvtier.Config(user, file=config_file)
        defaults = {name: d for name, d, _ in kvtier.Config.keys()}
        for k, v in derived.items():
            have = cfg.get(k)
            if have != defaults.get(k) and have != str(v) and (k in user or config_file):
                raise ValueError(f"KvtierTier: {k} = {have} in the kvtier config, but the "
                                 f"served model has {v}")
            cfg.set(k, v)
        if "model.name" not in user and cfg.get("model.name") == defaults.get("model.name"):
            cfg.set("model.name", oc.model.name)
        # a revision the kvtier config pins, inline or in config_file (until 2026-12-06
        # only inline counted: a file's pin was overwritten by vLLM's revision and the
        # weights sampled anyway, so engines configured either way never shared chunks)
        pinned = ("model.revision" in user or
                  cfg.get("model.revision") != defaults.get("model.revision"))
        if not pinned and facts["revision"]:
            cfg.set("model.revision", facts["revision"])
        if tenant:
            cfg.set("model.tenant", tenant)
        self._store = kvtier.Store(cfg, poller="manual")  # polled on the scheduler thread
        self.ns_id = self._store.ns_id
        self._tokens_per_hash = oc.cache.tokens_per_hash
        self._hash_algo = facts["hash_algo"]
        self._weights = facts["weights"]
        if pinned and _is_commit(facts["revision"]) and \
                facts["revision"] != cfg.get("model.revision"):
            # A pin names the weights for kvtier, but a commit id vLLM loaded is a fact
            # the pin cannot override: engines pinned alike that load other commits
            # shared keys - whole bytes of other weights' KV (until 2026-12-06). A branch
            # vLLM follows ("main") still yields to the pin.
            self._weights = weights_digest({"settings": self._weights,
                                            "vllm_commit": facts["revision"]})
        if not _is_commit(facts["revision"]) and not pinned:
            # Nothing pins the weights: the same name (a local path, an id resolved to
            # whatever the cache holds) may serve other weights tomorrow, or on another
            # node, and their chunks would be whole bytes of other KV under the same keys.
            # A branch or tag (vLLM's --revision main) moves too: until 2026-12-05 any
            # revision counted as a pin.
            sample = weights_sample(_model_dir(
                oc.model.name, facts["revision"],
                getattr(getattr(vc, "load_config", None), "download_dir", None)))
            if sample:
                self._weights = weights_digest({"settings": self._weights,
                                                "weights_sample": sample})
            else:
                log.warning("kvtier tier %s: model %s has no commit id as its revision and "
                            "its weights were not found to sample: pin it (model.revision) before "
                            "another engine shares this store", tier_type, oc.model.name)
        self._prefix = key_prefix(self.ns_id, context_bytes(
            self._hash_algo, self._tokens_per_hash, weights=self._weights))
        self._tier_names = list(self._store.tiers)
        self._payload = self._store.payload_bytes()
        assert self._payload == self.layout.payload_bytes, "geometry mismatch"
        self._view = np.asarray(primary_kv_view).view(np.uint8).reshape(
            -1, self.block_size_bytes)
        self._deadline_s = load_deadline_ms / 1000.0

        # A request's context is shared by every secondary tier of the engine, and keeps one
        # state per class: a class of this instance's own, so that two kvtier tiers (other
        # stores, other namespaces) each keep their own tenant prefix for a request (until
        # 2026-12-05 the second tier's on_new_request replaced the first's).
        self._tenant_state = type("_ReqTenant", (_ReqTenant,), {})

        # scheduler-thread state
        self._verdicts: dict[bytes, _Verdict] = {}
        self._req_keys: dict[str, set[bytes]] = {}
        self._lookups: queue.SimpleQueue = queue.SimpleQueue()  # (key, verdict, hit) answered
        self._jobs: dict[JobId, tuple[cf.Future | None, TransferJob, bool]] = {}
        self._done: queue.SimpleQueue = queue.SimpleQueue()  # _Done of the jobs over
        # loads and stores: one libkvtier call per job (kvtier.Rows), which reads, waits
        # with the job's deadline and converts between the rows and canonical chunks in C
        # without holding the GIL (a busy vLLM step loop starved the per-chunk Python
        # path for seconds). The handles own their staging buffers (made and touched
        # here, not on a restore's path): STAGING_BYTES of chunks in flight for loads.
        lay_c = self.layout.c_layout(self.block_size_bytes)
        staging = max(2, min(64, self.STAGING_BYTES // self._payload))
        self._load_rows = kvtier.Rows(self._store, lay_c, self._view, staging)
        self._store_rows = kvtier.Rows(self._store, lay_c, self._view, 2)
        self._store_pool = cf.ThreadPoolExecutor(1, thread_name_prefix="kvtier-store")
        # loads: started and polled on the scheduler thread (submit_load)
        # job_id -> (RowsJob, TransferJob, t submitted, t started, _stores_reaped then)
        self._load_jobs: dict = {}
        self._client_mode = bool(cfg.get("store.daemon"))

        # events and metrics
        self._events: list[OffloadingEvent] | None = None
        if enable_kv_events:
            if offloading_spec.kv_events_config.enable_kv_cache_events:
                self._events = []
            else:
                log.warning("enable_kv_events is set on tier %s but KV cache events are "
                            "disabled globally; no events", tier_type)
        self._announced: dict[bytes, OffloadKey] = {}  # kvtier key -> OffloadKey
        # When each announced chunk was last stored (a count of stores reaped): a check's
        # lookup sent before that store may answer a miss for what the store then wrote,
        # which must not announce it removed (until 2026-12-06 it did: _reconcile_step).
        self._stores_reaped = 0
        self._stored_at: dict[bytes, int] = {}
        # kvtier keys announced per OffloadKey: with per-request tenants several kvtier
        # keys (one per tenant) share one OffloadKey, which is held while any of them is
        # (until 2026-12-06 losing one tenant's copy announced the OffloadKey removed).
        self._okey_held: dict[OffloadKey, int] = {}
        # Events name this tier as their owner and say a removal will follow a store, as
        # vLLM's own secondary tiers' do: vLLM then keeps a stored chunk's block hashes
        # until the removal, which fans out to them (without it the primary tier's drop
        # discarded them first and the removal carried only the OffloadKey's hash).
        self._owner = tier_type
        # In process, the store's own events say which announced chunks left a tier: only
        # those are checked (a lookup each: another tier may still hold it), not every
        # announced chunk at every events_reconcile_s - one lookup per chunk kvtier holds
        # per pass, millions for a large NVMe tier (until 2026-12-05). A tier whose
        # evictions the store cannot see (another process's, a server's own: fs, S3,
        # RADOS, Redis), or a client-mode store (kvtierd publishes its events itself),
        # keeps the periodic check of everything; so does a queue that overflowed, once.
        self._evq = None
        self._by_skey: dict[bytes, bytes] = {}  # storage key -> kvtier key, announced ones
        self._suspects: dict[bytes, None] = {}  # announced chunks a tier let go, to check
        # storage keys of the latest removals of chunks not announced (yet): a tier can let
        # a chunk go between its store job's end and the job's reap, which then checks it.
        # Oldest first, at most EVENTS_QUEUED (an older one costs a needless lookup, never
        # a missed one: the check asks the store)
        self._unannounced_gone: dict[bytes, None] = {}
        # Chunks of store jobs over that may yet land (their put was in flight when the job
        # ended, or done out of order after the first chunk not done): kvtier key ->
        # OffloadKey until the rows handle reports it stored (_take_late); and such reports
        # that came before their job was reaped. Both oldest first, at most EVENTS_QUEUED
        # (a put that failed is never reported: its entry waits to be pushed out).
        # (ordered dicts: the oldest goes first when one is full, in O(1) - a plain dict's
        # next(iter()) walks the holes its deletions left, on the scheduler's thread)
        self._late: OrderedDict[bytes, OffloadKey] = OrderedDict()
        self._landed: OrderedDict[bytes, None] = OrderedDict()
        # suspects whose check said nothing (a tier failed, was late, or the lookup could
        # not be sent): asked again at _deferred_at, when no full check will
        self._deferred: dict[bytes, None] = {}
        self._deferred_at = 0.0
        self._full_check = True
        self._full_check_due = False
        self._reconcile_full = False  # the check running is one of every announced chunk
        if self._events is not None and not self._client_mode:
            try:
                self._evq = self._store.events(self.EVENTS_QUEUED)
                self._full_check = not all(n in ("dram", "nvme") for n in self._tier_names)
            except (kvtier.KvtierError, ValueError) as e:  # ValueError: no memory for it
                log.warning("kvtier: no store events (%s): announced chunks are checked "
                            "every events_reconcile_s", e)
        self._reconcile_s = events_reconcile_s
        self._reconcile_at = time.monotonic() + events_reconcile_s
        # a check of the announced chunks: the lookups in flight (None: no check running)
        # and the keys still to ask about; at most _reconcile_cap lookups at once, so the
        # scheduler's own lookups keep room under store.max_inflight
        self._reconcile: list[tuple[bytes, cf.Future, int]] | None = None
        self._reconcile_todo: deque[bytes] = deque()
        self._reconcile_cap = max(1, min(64, int(cfg.get("store.max_inflight")) // 4))
        # The check's lookups go to this store. In client mode it is a second connection to
        # kvtierd: the store's own runs its calls one exchange at a time, in order, so a
        # request's lookup made during a check waited behind every check lookup queued
        # before it (until 2026-12-06: 24 lookups of a 100 ms tier held one for 2.5 s,
        # vLLM getting RETRY meanwhile); kvtierd serves each connection on its own thread.
        self._check_store = self._store
        if self._events is not None and self._client_mode:
            try:
                self._check_store = kvtier.Store(cfg, poller="manual")
            except kvtier.KvtierError as e:
                log.warning("kvtier: no connection of its own for the check of announced "
                            "chunks (%s): its lookups share the store's", e)
        self._last_stats = self._store.stats()
        self._stats_pool: cf.ThreadPoolExecutor | None = None  # client mode: see _stats_now
        self._stats_future: cf.Future | None = None
        self._stats_warned = 0.0
        self._load_failures: dict[str, int] = {}
        self._deadline_misses = 0
        log.info("kvtier tier %s: tiers %s, layout %s, geometry %s, ns %s", tier_type,
                 ",".join(self._tier_names), self.layout.layout, self._store.geometry,
                 self.ns_id.hex()[:16])

    # ------------------------------------------------------------------ keys
    def _key(self, okey: OffloadKey, rc: ReqContext | None) -> bytes:
        st = rc.get_state(self._tenant_state) if rc is not None else None
        return key_from(st.prefix if st else self._prefix, okey)

    def _uncached(self, rc: ReqContext | None) -> bool:
        """A request whose kvtier_tenant cannot be used (on_new_request): it gets no kvtier
        caching, neither lookups nor loads nor stores. So does one that names a tenant but
        was never seen by on_new_request (no state): fail closed, since _key would give it
        the untenanted namespace (until 2026-12-06 it did)."""
        st = rc.get_state(self._tenant_state) if rc is not None else None
        if st is None:
            params = getattr(rc, "kv_transfer_params", None)
            return isinstance(params, dict) and "kvtier_tenant" in params
        return st.prefix is None

    def on_new_request(self, req_context: ReqContext) -> RequestOffloadingContext:
        params = req_context.kv_transfer_params
        if isinstance(params, dict) and "kvtier_tenant" in params:
            t = params["kvtier_tenant"]
            try:
                # only a non-empty str: "" (or 0, False, None) fell back to the untenanted
                # namespace, and str() made 1 and "1" one tenant
                if not isinstance(t, str) or not t:
                    raise TypeError("not a non-empty string")
                # a namespace field's limit (docs/FORMAT.md section 1), checked before
                # anything reads the whole string: each request's keys hash it on this
                # thread (8 MiB cost ~12 s per 32k-token prompt, stalling every request)
                if len(t) > NS_FIELD_MAX or len(t.encode()) > NS_FIELD_MAX:
                    raise OverflowError(f"longer than {NS_FIELD_MAX} bytes")
                prefix = key_prefix(self.ns_id, context_bytes(
                    self._hash_algo, self._tokens_per_hash, t, weights=self._weights))
            except Exception as e:  # never raise into vLLM's scheduler
                # kv_transfer_params come from the API client. A tenant that cannot be
                # written into the key context (not a non-empty string; too long;
                # control characters; a lone surrogate, which is not UTF-8) makes the
                # request uncached rather than escaped or ignored: ignoring it would serve
                # the request from (and store it into) the shared untenanted namespace,
                # defeating the isolation the salt asks for;
                # an escaping would be a second spelling of the documented derivation
                # (docs/VLLM.md) that other engines sharing the store do not reproduce,
                # for a value that is a malformed or hostile client input. Serving it
                # without the cache is always correct: vLLM recomputes.
                prefix = None
                try:  # ascii(): control characters are shown escaped, never written
                    shown = (f"of {len(t)} characters" if isinstance(e, OverflowError) else
                             ascii(t[:64] if isinstance(t, str) else t)[:80])
                except Exception:
                    shown = "(unprintable)"
                reason = (str(e) if isinstance(e, OverflowError) else
                          "not valid Unicode" if isinstance(e, UnicodeError) else
                          "control characters" if isinstance(e, ValueError) else
                          "not a non-empty string" if isinstance(e, TypeError) else
                          type(e).__name__)
                log.warning("kvtier: request %s: kvtier_tenant %s is not usable (%s); "
                            "the request gets no kvtier caching",
                            ascii(str(req_context.req_id)[:64]), shown, reason)
            req_context.set_state(self._tenant_state(prefix))
        return RequestOffloadingContext()

    # ---------------------------------------------------------------- lookup
    def _drain_lookups(self) -> None:
        while True:
            try:
                k, v, hit = self._lookups.get_nowait()
            except queue.Empty:
                return
            # only the verdict the lookup was asked for: one set otherwise (a store's
            # completion, a failed load) can be dropped and a newer lookup of the key
            # started before this answer comes, which it must not settle: it may be older
            # than what happened since (until 2026-12-05 a late miss or hit was taken)
            if self._verdicts.get(k) is not v:
                continue
            if v.hit is None:
                v.hit = hit
            if not v.reqs:
                del self._verdicts[k]

    def _on_lookup(self, k: bytes, v: _Verdict, fut: cf.Future) -> None:
        try:
            hit = fut.result().hits == 1
        except Exception:
            hit = False
        self._lookups.put((k, v, hit))

    def lookup(self, key: OffloadKey, req_context: ReqContext) -> LookupResult:
        self._drain_lookups()
        if self._uncached(req_context):
            return LookupResult.MISS
        k = self._key(key, req_context)
        v = self._verdicts.get(k)
        if v is None:
            try:
                fut = self._store.lookup([k])
            except kvtier.KvtierError as e:  # back-pressure: ask again next step
                log.debug("kvtier lookup not submitted: %s", e)
                return LookupResult.RETRY
            except Exception as e:  # noqa: BLE001 - never raise into vLLM's scheduler
                # (a store closing under us): a miss, and no verdict left unanswered,
                # which would answer RETRY for this chunk for good
                log.warning("kvtier lookup failed: %s", e)
                return LookupResult.MISS
            v = self._verdicts[k] = _Verdict()
            # the request holds the verdict (and it is recorded as the request's, so its
            # end releases it) before its answer is taken: _drain_lookups drops an
            # answered verdict no request holds (a DRAM answer comes just below); until
            # 2026-12-06 a poll that raised here left the verdict held for good
            v.reqs.add(req_context.req_id)
            self._req_keys.setdefault(req_context.req_id, set()).add(k)
            try:
                self._store.poll(0)  # a DRAM answer completes now
            except Exception as e:  # noqa: BLE001 - the answer comes with a later poll
                log.warning("kvtier poll failed: %s", e)
            if fut.done():
                self._on_lookup(k, v, fut)
                self._drain_lookups()
            else:
                fut.add_done_callback(lambda f, k=k, v=v: self._on_lookup(k, v, f))
        v.reqs.add(req_context.req_id)
        self._req_keys.setdefault(req_context.req_id, set()).add(k)
        if v.hit is None:
            return LookupResult.RETRY
        if _PROFILE and not v.told:
            v.told = True
            print(f"kvtier-profile lookup {k.hex()[:8]}: {'hit' if v.hit else 'miss'} "
                  f"answered {(time.monotonic() - v.t0) * 1e3:.1f} ms after the first ask",
                  file=sys.stderr, flush=True)
        return LookupResult.HIT if v.hit else LookupResult.MISS

    def on_request_finished(self, req_context: ReqContext) -> None:
        for k in self._req_keys.pop(req_context.req_id, ()):
            v = self._verdicts.get(k)
            if v is None:
                continue
            v.reqs.discard(req_context.req_id)
            if not v.reqs and v.hit is not None:
                del self._verdicts[k]

    def on_schedule_end(self, context: ScheduleEndContext) -> None:
        self._store.poll(0)
        self._drain_lookups()

    # ------------------------------------------------------------ transfers
    def _parents(self, job: TransferJob, keys: list[bytes]) -> list[bytes | None]:
        """The key of the chunk before each one when it is in the same job and directly
        precedes it (positions from the scheduler), so kvtier's DRAM evicts suffixes
        first."""
        rc = job.req_context
        out: list[bytes | None] = [None] * len(keys)
        okeys = list(job.keys)
        for i in range(1, len(okeys)):
            a = rc.get_offload_key_position(okeys[i - 1])
            b = rc.get_offload_key_position(okeys[i])
            if a is not None and b is not None and b - a == self.layout.chunk_tokens:
                out[i] = keys[i - 1]
        return out

    def _run_store(self, job: TransferJob, keys: list[bytes], parents) -> _Done:
        """One call: the rows are converted into canonical chunks and put, in C. Its
        deadline counts from vLLM's submission, as a load's does: counted from when this
        thread took the job, each job behind a stalled tier waited out a whole deadline
        after the one before it (100 queued jobs: ~500 s at the default), while vLLM kept
        their rows busy; now a job whose time ran out in the queue ends at once."""
        t0 = time.monotonic()
        r = self._store_rows.store(keys, [int(c) for c in job.chunk_ids], parents,
                                   deadline=job.submit_time + self._deadline_s)
        t1 = time.monotonic()
        stored = list(job.keys)[:r.done]
        if r.reason:
            log.warning("kvtier store of chunk %d/%d failed: %s (%s)", r.done + 1, len(keys),
                        r.reason, kvtier.strerror(r.status))
            return _Done(job.job_id, r.done, len(keys), False, t1 - t0, r.reason, stored)
        return _Done(job.job_id, len(keys), len(keys), False, t1 - t0, stored=stored,
                     prof={"wait": t0 - job.submit_time, "run": t1 - t0,
                           "convert": r.convert_s},
                     finished=t1)

    def _run(self, fn, job: TransferJob, *args, is_load: bool) -> None:
        """Run fn and queue its _Done, on the pool's thread, before the job's future is
        done: a done-callback runs after Future.set_result has woken its waiters, so
        drain_jobs could return before a job it waited for was queued, and vLLM's
        reset_cache then found the job still pending."""
        try:
            d = fn(job, *args)
        except Exception as e:  # a bug, not an I/O failure: fail the job, keep serving
            log.exception("kvtier job %d raised", job.job_id)
            d = _Done(job.job_id, 0, len(list(job.keys)), is_load, 0.0, type(e).__name__)
        self._done.put(d)

    def _submit(self, pool, job: TransferJob, fn, *args, is_load: bool) -> None:
        # registered before it can run: its _Done may be queued before submit returns
        self._jobs[job.job_id] = (None, job, is_load)
        fut = pool.submit(self._run, fn, job, *args, is_load=is_load)
        self._jobs[job.job_id] = (fut, job, is_load)

    def _refuse(self, job: TransferJob, is_load: bool) -> None:
        """Complete a job of an uncached request at once, failed, with nothing moved."""
        self._jobs[job.job_id] = (None, job, is_load)
        self._done.put(_Done(job.job_id, 0, len(list(job.keys)), is_load, 0.0, "tenant"))

    def submit_store(self, job_metadata: TransferJob) -> None:
        if self._uncached(job_metadata.req_context):
            return self._refuse(job_metadata, is_load=False)
        keys = [self._key(k, job_metadata.req_context) for k in job_metadata.keys]
        self._submit(self._store_pool, job_metadata, self._run_store, keys,
                     self._parents(job_metadata, keys), is_load=False)

    def submit_load(self, job_metadata: TransferJob) -> None:
        """Started here, on the scheduler thread, in one non-blocking libkvtier call, and
        polled by get_finished_jobs: no other Python thread takes part, so no GIL handoff
        (each of which can wait behind vLLM's busy step loop) stands between a finished
        read and vLLM. In client mode (store.daemon) the job is run by the rows handle's
        two C worker threads, in arrival order (one blocking call to kvtierd per chunk);
        until 2026-12-04 it ran on a Python load thread, which needed the GIL back to
        report."""
        if self._uncached(job_metadata.req_context):
            return self._refuse(job_metadata, is_load=True)
        keys = [self._key(k, job_metadata.req_context) for k in job_metadata.keys]
        t0 = time.monotonic()
        try:
            # a load names only what the primary tier misses: chunk i's parent is the one
            # before it only where that one directly precedes it (until 2026-12-06 every
            # chunk was linked to the one before, and [k1, k3] promoted k3 as k1's child)
            linked = [p is not None for p in self._parents(job_metadata, keys)]
            rj = self._load_rows.load_start(
                keys, [int(c) for c in job_metadata.chunk_ids],
                deadline=job_metadata.submit_time + self._deadline_s, linked=linked)
        except Exception as e:  # a bug, not an I/O failure: fail the job, never the
            log.warning("kvtier load job %d not started: %s",  # scheduler
                        job_metadata.job_id, e)
            rj = None
        self._load_jobs[job_metadata.job_id] = (rj, job_metadata, t0, time.monotonic(),
                                                self._stores_reaped)

    def has_pending_work(self) -> bool:
        return bool(self._jobs or self._load_jobs)

    def _poll_loads(self, timeout_ms: int = 0) -> list:
        """(job_id, _Done, job, stores reaped at its start) of the started loads that are
        over."""
        out = []
        for job_id, (rj, job, t0, t1, since) in list(self._load_jobs.items()):
            try:
                r = rj.poll(timeout_ms) if rj is not None else None
            except Exception as e:  # a bug or a closing store: fail this job, not the rest
                log.warning("kvtier load job %d: poll raised %s", job_id, e)
                try:  # else the rows handle holds it until shutdown
                    rj.free()
                except Exception:  # never into vLLM's scheduler
                    pass
                r, rj = None, None
            if rj is not None and r is None:
                continue
            now = time.monotonic()
            del self._load_jobs[job_id]
            n = len(list(job.keys))
            if r is None:
                d = _Done(job_id, 0, n, True, 0.0, "error")
            else:
                rj.free()
                d = _Done(job_id, r.done, n, True, now - t0, r.reason,
                          prof={"job to submit_load": t0 - job.submit_time,
                                "start call": t1 - t0, "over after": now - t0,
                                "submits": r.submit_s, "read wait": r.wait_s,
                                "convert": r.convert_s},
                          finished=now)
                if r.reason:
                    log.info("kvtier load of chunk %d/%d: %s; vLLM recomputes from there",
                             r.done + 1, n, r.reason)
            out.append((job_id, d, job, since))
        return out

    def get_finished_jobs(self) -> Iterable[JobResult]:
        self._store.poll(0)  # lookups' completions, on this thread
        results = [self._reap(job_id, d, job, True, since)
                   for job_id, d, job, since in self._poll_loads()]
        while True:
            try:
                d: _Done = self._done.get_nowait()
            except queue.Empty:
                break
            _, job, is_load = self._jobs.pop(d.job_id)
            results.append(self._reap(d.job_id, d, job, is_load))
        self._take_late()
        return results

    def _reap(self, job_id: JobId, d: _Done, job: TransferJob, is_load: bool,
              since: int | None = None) -> JobResult:
        """since: for a load, _stores_reaped when it started - a chunk whose store was
        reaped after that is held again whatever the load found."""
        okeys = list(job.keys)
        ok = d.ok == d.n
        if _PROFILE:
            print(f"kvtier-profile {'load' if is_load else 'store'} job {job_id}: "
                  f"{d.n} chunks, " + ", ".join(f"{k} {v * 1e3:.1f} ms"
                                                for k, v in d.prof.items())
                  + f", reaped {(time.monotonic() - d.finished) * 1e3:.1f} ms after",
                  file=sys.stderr, flush=True)
        nbytes = d.ok * self.block_size_bytes
        if is_load and not ok:
            self._load_failures[d.reason] = self._load_failures.get(d.reason, 0) + 1
            if d.reason == "deadline":
                self._deadline_misses += 1
            failed = okeys[d.ok:] if not self._uncached(job.req_context) else ()
            # A chunk stored again since the load started (another request recomputed it,
            # its store reaped first) is held whatever the load found: neither a miss nor
            # removed. Until 2026-12-06 the load's late answer announced it removed while
            # kvtier held it, and nothing announced it again (a review's reproducer).
            def renewed(k: bytes) -> bool:
                return since is not None and self._stored_at.get(k, 0) > since
            for okey in failed:  # a failed load marks its chunks a miss
                k = self._key(okey, job.req_context)
                v = self._verdicts.get(k)
                if v is not None and not renewed(k):
                    v.hit = False
            # A removed event only for what is known to be gone: the chunk the load found
            # absent or corrupt (dropped). A tier past its deadline or failing still holds
            # its chunks, and the chunks after the failed one were not even asked for:
            # announcing them removed told routers kvtier had lost what it still serves
            # (the periodic check catches any that really went).
            if failed and d.reason in ("miss", "corrupt"):
                k = self._key(failed[0], job.req_context)
                if not renewed(k):
                    self._announce_removed(k)
        if not is_load and d.stored:
            self._note_stored([(okey, self._key(okey, job.req_context))
                               for okey in d.stored])
        if not is_load and d.ok < d.n and not self._uncached(job.req_context):
            # The chunks after the first not stored may be stored all the same: a put in
            # flight at the deadline (or when an earlier chunk failed) lands later, and one
            # done out of order was not counted. The rows handle reports each such chunk
            # (_take_late); until 2026-12-06 none was ever announced or marked a hit, so
            # kvtier held chunks no router was told of.
            for okey in okeys[d.ok:]:
                k = self._key(okey, job.req_context)
                if self._landed.pop(k, 0) is None:  # reported before this reap
                    self._note_stored([(okey, k)])
                else:
                    self._late.pop(k, None)
                    self._late[k] = okey
                    if len(self._late) > self.EVENTS_QUEUED:
                        self._late.popitem(last=False)
        return JobResult(
            job_id=job_id, success=ok,
            successful_keys=tuple(okeys[:d.ok]) if (is_load and not ok and d.ok) else None,
            transfer_time=d.seconds, transfer_bytes=nbytes or None)

    def _note_stored(self, stored: list) -> None:
        """(OffloadKey, kvtier key) pairs kvtier now holds: their verdicts say hit, and
        with events on they are announced (one stored event)."""
        for okey, k in stored:
            v = self._verdicts.get(k)
            if v is not None:
                v.hit = True
            if self._events is not None:
                if self._announced.get(k) is None:
                    self._okey_held[okey] = self._okey_held.get(okey, 0) + 1
                self._announced[k] = okey
                self._stores_reaped += 1
                self._stored_at[k] = self._stores_reaped
                if self._evq is not None:
                    sk = self._store.storage_key(k)
                    self._by_skey[sk] = k
                    if self._unannounced_gone.pop(sk, 0) is None:  # gone before this
                        self._suspects[k] = None
        if self._events is not None and stored:
            self._events.append(OffloadingEvent(
                keys=[okey for okey, _ in stored], medium=self.medium, removed=False,
                locality=self.locality, ownership=self._owner,
                removal_expected=True))

    def _take_late(self) -> None:
        """Store chunks that landed after their job was over (Rows.store_late): each one
        a reaped job left in _late is noted stored now; one whose job is not reaped yet
        (it landed between the job's end and its reap) waits in _landed for that reap."""
        try:
            while True:
                ks = self._store_rows.store_late()
                for k in ks:
                    okey = self._late.pop(k, None)
                    if okey is not None:
                        self._note_stored([(okey, k)])
                    else:
                        self._landed.pop(k, None)
                        self._landed[k] = None
                        if len(self._landed) > self.EVENTS_QUEUED:
                            self._landed.popitem(last=False)
                if len(ks) < 1024:
                    return
        except Exception as e:  # noqa: BLE001 - never raise into vLLM's scheduler
            log.warning("kvtier: late stores not taken: %s", e)

    def drain_jobs(self) -> None:
        cf.wait([f for f, _, _ in list(self._jobs.values()) if f is not None])
        for rj, *_ in list(self._load_jobs.values()):
            if rj is not None:
                rj.poll(-1)  # over (its result stays for get_finished_jobs)

    # ---------------------------------------------------------------- events
    def _announce_removed(self, k: bytes) -> None:
        if self._events is None:
            return
        okey = self._announced.pop(k, None)
        self._stored_at.pop(k, None)
        if okey is not None:
            if self._evq is not None:
                self._by_skey.pop(self._store.storage_key(k), None)
            held = self._okey_held.get(okey, 1) - 1
            if held > 0:  # another tenant's copy of the chunk is still held
                self._okey_held[okey] = held
                return
            self._okey_held.pop(okey, None)
            self._events.append(OffloadingEvent(keys=[okey], medium=self.medium,
                                                removed=True, locality=self.locality,
                                                ownership=self._owner, removal_expected=True))

    def take_events(self) -> Iterable[OffloadingEvent]:
        """Stored events when kvtier holds a chunk; removed events when it no longer does:
        a failed load, or the periodic check of announced chunks (kvtier evicts on its
        own: DRAM pressure, the NVMe capacity bound)."""
        if self._events is None:
            return
        self._store.poll(0)
        if self._check_store is not self._store:
            self._check_store.poll(0)  # the reconcile lookups' completions
        self._take_late()  # stores that landed after their job, announced with this batch
        now = time.monotonic()
        if self._evq is not None:
            evs, lost = self._evq.drain()
            for e in evs:
                if not e.stored:
                    k = self._by_skey.get(e.key)
                    if k is not None:
                        self._suspects[k] = None
                    else:  # perhaps stored by a job not reaped yet
                        self._unannounced_gone.pop(e.key, None)
                        self._unannounced_gone[e.key] = None
                        if len(self._unannounced_gone) > self.EVENTS_QUEUED:
                            del self._unannounced_gone[next(iter(self._unannounced_gone))]
            if lost:
                log.warning("kvtier: %d store events dropped (queue full): checking every "
                            "announced chunk once", lost)
                self._full_check_due = True
        if self._deferred and now >= self._deferred_at:
            self._suspects.update(self._deferred)
            self._deferred.clear()
        if self._reconcile is None and self._announced:
            if self._full_check_due or (self._full_check and now >= self._reconcile_at):
                self._full_check_due = False
                self._suspects.clear()
                self._deferred.clear()
                self._reconcile_full = True
                self._reconcile, self._reconcile_todo = [], deque(self._announced)
            elif self._suspects:
                todo, self._suspects = deque(self._suspects), {}
                self._reconcile_full = False
                self._reconcile, self._reconcile_todo = [], todo
        if self._reconcile is not None:
            self._reconcile_step(now)
        yield from self._events
        self._events.clear()

    def _reconcile_step(self, now: float) -> None:
        """Take the answers of the check's lookups that completed and submit more: one
        lookup per announced chunk, at most _reconcile_cap in flight; when the store is at
        store.max_inflight (kvtier.Busy) the rest waits for the next call."""
        waiting = []
        for k, f, sent_at in self._reconcile:
            if not f.done():
                waiting.append((k, f, sent_at))
                continue
            if self._stored_at.get(k, 0) > sent_at:
                continue  # stored again after the lookup was sent: its miss is stale
            try:
                r = f.result()
                # a tier that failed, was late or skipped (or kvtierd unreachable) may
                # still hold it: only a miss every tier answered is proof of removal
                gone = r.hits == 0 and not r.cause
                unsure = r.hits == 0 and bool(r.cause)
            except Exception:
                gone, unsure = False, True  # an unreachable tier is not proof of removal
            if gone:
                self._announce_removed(k)
            elif unsure:
                self._check_later(k, now)
        self._reconcile = waiting
        todo = self._reconcile_todo
        while todo and len(waiting) < self._reconcile_cap:
            k = todo[0]
            if k not in self._announced:  # removed since the check began
                todo.popleft()
                continue
            try:
                f = self._check_store.lookup([k])
            except kvtier.Busy:  # back-pressure: the rest on a later call
                break
            except kvtier.KvtierError as e:  # not checkable now: later
                log.debug("kvtier reconcile lookup not submitted: %s", e)
                todo.popleft()
                self._check_later(k, now)
                continue
            todo.popleft()
            waiting.append((k, f, self._stores_reaped))
        if not waiting and not todo:
            self._reconcile = None
            # the next full check is events_reconcile_s after the last full one ended: a
            # check of a few suspects must not put it off (until 2026-12-05 each did, so
            # under steady evictions the full check - the one thing that sees removals the
            # store cannot report - never came)
            if self._reconcile_full:
                self._reconcile_at = now + self._reconcile_s

    def _check_later(self, k: bytes, now: float) -> None:
        """A check of k said nothing (a tier failed or was late; the lookup was refused):
        ask again events_reconcile_s from now, unless a periodic full check will."""
        if self._full_check:
            return
        if not self._deferred:
            self._deferred_at = now + self._reconcile_s
        self._deferred[k] = None

    # --------------------------------------------------------------- metrics
    @classmethod
    def build_metric_definitions(cls, extra_config: dict[str, Any]
                                 ) -> dict[str, OffloadingMetricMetadata]:
        defs: dict[str, OffloadingMetricMetadata] = {
            name: OffloadingCounterMetadata(
                documentation=f"kvtier: {field_} per kvtier tier (dram, nvme, fs, ...).",
                labelnames=("kvtier_tier",))
            for name, field_ in _COUNTERS.items()
        }
        defs[M.USED_BYTES] = OffloadingGaugeMetadata(
            documentation="kvtier: bytes resident per kvtier tier (0 where the tier "
                          "cannot know, e.g. a shared fs directory).",
            labelnames=("kvtier_tier",))
        defs[M.CAPACITY_BYTES] = OffloadingGaugeMetadata(
            documentation="kvtier: configured capacity per kvtier tier (0: unbounded).",
            labelnames=("kvtier_tier",))
        defs[M.LOAD_FAILURES] = OffloadingCounterMetadata(
            documentation="kvtier: loads reported failed to vLLM (then recomputed), by "
                          "reason: miss, corrupt, timeout, deadline, error.",
            labelnames=("reason",))
        defs[M.DEADLINE_MISSES] = OffloadingCounterMetadata(
            documentation="kvtier: loads not complete within load_deadline_ms.")
        return defs

    def get_stats(self):
        from vllm.distributed.kv_transfer.kv_connector.v1.offloading.metrics import (
            OffloadingConnectorStats,
        )
        now = self._stats_now()
        out = OffloadingConnectorStats()
        # paired by name, not position: a kvtierd restarted with another tier chain (in
        # client mode) would otherwise credit one tier's counts to another; a tier new
        # since the last interval counts from 0
        before = dict(_tiers_by_name(self._last_stats["tiers"]))
        for key, t_now in _tiers_by_name(now["tiers"] if now else ()):
            t_old = before.get(key)
            lv = (t_now["name"],)
            for name, f in _COUNTERS.items():
                # less than before: the counter restarted from 0 (kvtierd restarted, in
                # client mode) and the new value is the count since; a negative increase
                # raised ValueError from vLLM's Prometheus Counter.inc into its output loop
                old = t_old[f] if t_old is not None else 0
                d = t_now[f] - old if t_now[f] >= old else t_now[f]
                if d:
                    out.increase_counter(name, d, lv)
            out.set_gauge(M.USED_BYTES, t_now["bytes"], lv)
            out.set_gauge(M.CAPACITY_BYTES, t_now["capacity_bytes"], lv)
        for reason, n in self._load_failures.items():
            out.increase_counter(M.LOAD_FAILURES, n, (reason,))
        if self._deadline_misses:
            out.increase_counter(M.DEADLINE_MISSES, self._deadline_misses)
        self._load_failures = {}
        self._deadline_misses = 0
        if now:
            self._last_stats = now
        return out

    def _stats_now(self) -> dict | None:
        """kvtier's counters for get_stats, which runs on the scheduler thread and must
        neither block it nor raise into it. A local store's are read from memory. A
        client's (store.daemon) are a call to kvtierd that waits up to
        daemon_timeout_ms and raises once the daemon is gone: it runs on a thread of
        its own, and each get_stats takes the newest answer (None: none new; the
        counters then wait for the next interval). Until 2026-12-04 get_stats made that
        call itself: 2-5 s on the scheduler thread per interval with the daemon down,
        then an exception into vLLM's stats path."""
        try:
            if not self._client_mode:
                return self._store.stats()
            f, snap = self._stats_future, None
            if f is not None:
                if not f.done():
                    return None
                snap = f.result()  # raises what the call raised
        except Exception as e:  # noqa: BLE001 - a failed stats read is no engine failure
            now = time.monotonic()
            if now - self._stats_warned >= 60:
                self._stats_warned = now
                log.warning("kvtier stats unavailable: %s (metrics paused)", e)
        if self._client_mode:
            if self._stats_pool is None:
                self._stats_pool = cf.ThreadPoolExecutor(1, thread_name_prefix="kvtier-stats")
            self._stats_future = self._stats_pool.submit(self._store.stats)
            return snap
        return None

    def store_stats(self) -> dict:
        """kvtier's own counters (kvtier.Store.stats()), for tests and tools."""
        return self._store.stats()

    # -------------------------------------------------------------- shutdown
    def shutdown(self) -> None:
        """Finish the jobs in flight, then close the store (write-behind completes)."""
        if getattr(self, "_store", None) is None:
            return
        self.drain_jobs()
        self._store_pool.shutdown(wait=True)
        if self._stats_pool is not None:  # a daemon call ends by its own timeout
            self._stats_pool.shutdown(wait=True)
        for rj, *_ in self._load_jobs.values():
            if rj is not None:
                rj.free()
        self._load_jobs.clear()
        self._load_rows.close()  # before the store: they wait for reads still in flight
        self._store_rows.close()
        if self._check_store is not self._store:
            self._check_store.close()
        self._check_store = None
        self._store.close()
        self._store = None
        self._view = None  # release the primary tier's buffer before vLLM unmaps it
