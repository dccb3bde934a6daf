"""kvtier: a tiered KV-cache store (libkvtier) from Python.

    import kvtier
    with kvtier.Store({"store.tiers": "dram,fs", "fs.dir": "/mnt/shared/kv",
                       "model.layers": 2, "model.kv_heads": 2, "model.head_dim": 64,
                       "model.chunk_tokens": 16}) as s:
        keys = kvtier.keys_from_tokens(s.ns_id, s.geometry.chunk_tokens, tokens)
        s.put(keys[0], chunk_bytes).result()
        print(s.lookup(keys).result().hits)

The vLLM secondary tier is kvtier.vllm (imported separately: it needs vLLM)."""

from ._lib import lib as _libc
from .config import Config
from .errors import (Busy, Canceled, Corrupt, InvalidArgument, KvtierError, NoSpace,
                     NotFound, TierTimeout)
from .keys import Geometry, key_next, keys_from_tokens, namespace_id, namespace_text
from .rows import Rows, RowsJob, RowsResult
from .store import GetResult, LookupResult, Store

__version__ = "0.1.0"


def version() -> str:
    """The library's version and compiled-in tiers, e.g. "0.1.0 tiers: dram nvme fs"."""
    return _libc.kvt_version().decode()


def strerror(err: int) -> str:
    """The library's text for an errno (either sign)."""
    return _libc.kvt_strerror(-abs(err)).decode()


__all__ = [
    "Busy", "Canceled", "Config", "Corrupt", "Geometry", "GetResult", "InvalidArgument",
    "KvtierError", "LookupResult", "NoSpace", "NotFound", "Rows", "RowsJob", "RowsResult", "Store",
    "TierTimeout", "key_next", "keys_from_tokens", "namespace_id", "namespace_text",
    "strerror", "version",
]
