"""ctypes declarations of libkvtier's public API (include/kvtier.h, kvtier_layout.h), and
where the library is found. Kept in one place so every structure layout and prototype can be checked against
the header in one read; the Pythonic wrappers live in the other modules.

The library is looked for, in order: $KVTIER_LIB (a path), next to this file (where the
wheel built by scikit-build-core installs it), then the system's library path.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

KEY_BYTES = 32
NS_ID_BYTES = 32
MAX_TIERS = 8
MAX_LAYERS = 256
TIER_NONE = -1

DTYPES = {"bf16": 1, "fp16": 2, "fp8": 3, "fp32": 4}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}
KINDS = {"kv": 1, "mla": 2}
KIND_NAMES = {v: k for k, v in KINDS.items()}


class Geometry(ctypes.Structure):
    _fields_ = [
        ("layers", ctypes.c_uint32),
        ("kv_heads", ctypes.c_uint32),
        ("head_dim", ctypes.c_uint32),
        ("chunk_tokens", ctypes.c_uint32),
        ("dtype", ctypes.c_uint8),
        ("kind", ctypes.c_uint8),
    ]


class Key(ctypes.Structure):
    _fields_ = [("bytes", ctypes.c_uint8 * KEY_BYTES)]


class Namespace(ctypes.Structure):
    _fields_ = [
        ("model", ctypes.c_char_p),
        ("revision", ctypes.c_char_p),
        ("tenant", ctypes.c_char_p),
        ("geometry", Geometry),
    ]


class Result(ctypes.Structure):
    _fields_ = [
        ("status", ctypes.c_int),
        ("tier", ctypes.c_int),
        ("n_tokens", ctypes.c_uint32),
        ("bytes", ctypes.c_uint64),
        ("cause", ctypes.c_int),
    ]


class TierStats(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * 16)] + [
        (n, ctypes.c_uint64)
        for n in (
            "objects", "bytes", "capacity_bytes", "hits", "misses", "reads", "read_bytes",
            "writes", "write_bytes", "evictions", "checksum_failures", "errors",
            "writes_skipped", "removes", "deadline_misses", "write_budget_bytes",
            "write_budget_used_bytes", "reinsert_bytes", "pool_bytes", "pool_pending_bytes",
            "deadline_extensions",
        )
    ]


class Stats(ctypes.Structure):
    _fields_ = [
        ("n_tiers", ctypes.c_uint32),
        ("tier", TierStats * MAX_TIERS),
    ] + [
        (n, ctypes.c_uint64)
        for n in (
            "puts", "gets", "lookups", "prefetches", "lookup_chunks", "lookup_hit_chunks",
            "promotions", "write_behind_pending", "dram_alloc_bytes", "promotions_discarded",
            "evicted_unsaved",
        )
    ] + [
        ("late_held_bytes", ctypes.c_uint64 * MAX_TIERS),
        ("late_held_cap_bytes", ctypes.c_uint64),
    ]


class RowStrides(ctypes.Structure):  # include/kvtier_layout.h
    _fields_ = [(n, ctypes.c_int64)
                for n in ("offset", "layer", "block", "token", "rank", "head", "dim",
                          "token_tile", "token_tile_stride", "dim_tile", "dim_tile_stride")]


class RowLayoutC(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint32) for n in (
        "elem_bytes", "layers", "kv_heads", "head_dim", "block_tokens", "blocks_per_chunk",
        "heads_per_rank", "reserved")] + [
        ("row_bytes", ctypes.c_uint64), ("k", RowStrides), ("v", RowStrides)]


class RowsResult(ctypes.Structure):
    _fields_ = [("done", ctypes.c_uint32), ("failure", ctypes.c_int32),
                ("status", ctypes.c_int32), ("reserved", ctypes.c_uint32),
                ("wait_ns", ctypes.c_uint64), ("convert_ns", ctypes.c_uint64),
                ("submit_ns", ctypes.c_uint64)]


class Event(ctypes.Structure):  # struct kvt_event
    _fields_ = [("type", ctypes.c_uint32), ("reason", ctypes.c_uint32), ("tier", ctypes.c_int),
                ("n_tokens", ctypes.c_uint32), ("bytes", ctypes.c_uint64), ("key", Key),
                ("has_parent", ctypes.c_uint8), ("parent", Key)]


EVENT_STORED, EVENT_REMOVED = 1, 2

ROWS_FAILURES = {0: "", 1: "miss", 2: "corrupt", 3: "timeout", 4: "deadline", 5: "short",
                 6: "error"}

CB = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.POINTER(Result))
LOG_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p)

_P = ctypes.c_void_p
_KEYP = ctypes.POINTER(Key)
_GEOP = ctypes.POINTER(Geometry)
_ERRBUF = ctypes.c_char_p
_SZ = ctypes.c_size_t

_PROTOS = {
    "kvt_strerror": (ctypes.c_char_p, [ctypes.c_int]),
    "kvt_version": (ctypes.c_char_p, []),
    "kvt_geometry_check": (ctypes.c_int, [_GEOP]),
    "kvt_dtype_bytes": (ctypes.c_uint32, [ctypes.c_uint8]),
    "kvt_layer_bytes": (ctypes.c_uint64, [_GEOP, ctypes.c_uint32]),
    "kvt_payload_bytes": (ctypes.c_uint64, [_GEOP, ctypes.c_uint32]),
    "kvt_object_bytes": (ctypes.c_uint64, [_GEOP, ctypes.c_uint32]),
    "kvt_layer_offset": (ctypes.c_uint64, [_GEOP, ctypes.c_uint32, ctypes.c_uint32]),
    "kvt_namespace_text": (ctypes.c_int, [ctypes.POINTER(Namespace), ctypes.c_char_p, _SZ]),
    "kvt_namespace_id": (ctypes.c_int, [ctypes.POINTER(Namespace), ctypes.c_char_p]),
    "kvt_key_next": (None, [ctypes.c_char_p, _KEYP, ctypes.c_void_p, _SZ, _KEYP]),
    "kvt_keys_from_tokens": (
        ctypes.c_long, [ctypes.c_char_p, ctypes.c_uint32, ctypes.c_void_p, _SZ, _KEYP, _SZ]),
    "kvt_config_create": (ctypes.c_int, [ctypes.POINTER(_P)]),
    "kvt_config_destroy": (None, [_P]),
    "kvt_config_set": (ctypes.c_int, [_P, ctypes.c_char_p, ctypes.c_char_p, _ERRBUF, _SZ]),
    "kvt_config_get": (ctypes.c_int, [_P, ctypes.c_char_p, ctypes.c_char_p, _SZ]),
    "kvt_config_load_file": (ctypes.c_int, [_P, ctypes.c_char_p, _ERRBUF, _SZ]),
    "kvt_config_apply_env": (ctypes.c_int, [_P, _ERRBUF, _SZ]),
    "kvt_config_set_log": (None, [_P, LOG_FN, _P, ctypes.c_int]),
    "kvt_config_key_info": (
        ctypes.c_char_p,
        [ctypes.c_uint, ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_char_p)]),
    "kvt_store_open": (ctypes.c_int, [_P, ctypes.POINTER(_P)]),
    "kvt_store_close": (None, [_P]),
    "kvt_store_geometry": (_GEOP, [_P]),
    "kvt_store_ns_id": (ctypes.POINTER(ctypes.c_uint8), [_P]),
    "kvt_store_tier_count": (ctypes.c_int, [_P]),
    "kvt_store_tier_name": (ctypes.c_char_p, [_P, ctypes.c_int]),
    "kvt_store_fd": (ctypes.c_int, [_P]),
    "kvt_poll": (ctypes.c_int, [_P, ctypes.c_int]),
    "kvt_put": (ctypes.c_int, [_P, _KEYP, _KEYP, ctypes.c_uint32, _P, _SZ, CB, _P]),
    "kvt_lookup": (ctypes.c_int, [_P, _KEYP, _SZ, ctypes.POINTER(ctypes.c_int8), CB, _P]),
    "kvt_get": (ctypes.c_int,
                [_P, _KEYP, ctypes.c_uint32, ctypes.c_uint32, _P, _SZ, CB, _P]),
    "kvt_get_linked": (ctypes.c_int,
                       [_P, _KEYP, _KEYP, ctypes.c_uint32, ctypes.c_uint32, _P, _SZ, CB, _P]),
    "kvt_prefetch": (ctypes.c_int, [_P, _KEYP, _SZ, ctypes.c_uint64, CB, _P]),
    "kvt_remove": (ctypes.c_int, [_P, _KEYP, CB, _P]),
    "kvt_flush": (ctypes.c_int, [_P, CB, _P]),
    "kvt_stats": (ctypes.c_int, [_P, ctypes.POINTER(Stats)]),
    "kvt_store_set_events": (ctypes.c_int, [_P, _P, _P]),
    "kvt_storage_key": (None, [ctypes.c_char_p, _KEYP, _KEYP]),
    "kvt_event_queue_new": (_P, [ctypes.c_uint32]),
    "kvt_event_queue_drain": (ctypes.c_uint32, [_P, ctypes.POINTER(Event), ctypes.c_uint32,
                                                ctypes.POINTER(ctypes.c_uint64)]),
    "kvt_event_queue_free": (None, [_P]),
    "kvt_log_queue_new": (_P, [ctypes.c_uint32]),
    "kvt_log_queue_fd": (ctypes.c_int, [_P]),
    "kvt_log_queue_pop": (ctypes.c_int, [_P, ctypes.POINTER(ctypes.c_int), ctypes.c_char_p,
                                         ctypes.c_size_t, ctypes.POINTER(ctypes.c_uint64)]),
    "kvt_log_queue_free": (None, [_P]),
    "kvt_row_layout_check": (ctypes.c_int, [ctypes.POINTER(RowLayoutC)]),
    "kvt_row_from_canonical": (ctypes.c_int, [ctypes.POINTER(RowLayoutC), _P, _P]),
    "kvt_row_to_canonical": (ctypes.c_int, [ctypes.POINTER(RowLayoutC), _P, _P]),
    "kvt_rows_open": (ctypes.c_int, [_P, ctypes.POINTER(RowLayoutC), _P, ctypes.c_uint64,
                                     ctypes.c_uint32, ctypes.POINTER(_P)]),
    "kvt_rows_close": (None, [_P]),
    "kvt_rows_load": (ctypes.c_int, [_P, _KEYP, _P, _SZ, ctypes.c_uint64,
                                     ctypes.POINTER(RowsResult)]),
    "kvt_rows_load_start": (ctypes.c_int, [_P, _KEYP, _P, _SZ, ctypes.c_uint64,
                                           ctypes.POINTER(_P)]),
    "kvt_rows_load_start_linked": (ctypes.c_int, [_P, _KEYP, _P, _P, _SZ, ctypes.c_uint64,
                                                  ctypes.POINTER(_P)]),
    "kvt_rows_job_poll": (ctypes.c_int, [_P, ctypes.c_int, ctypes.POINTER(RowsResult)]),
    "kvt_rows_job_free": (None, [_P]),
    "kvt_rows_store": (ctypes.c_int, [_P, _KEYP, _KEYP, _P, _P, _SZ, ctypes.c_uint64,
                                      ctypes.POINTER(RowsResult)]),
    "kvt_rows_store_late": (_SZ, [_P, _KEYP, _SZ]),
}


def cstr(text: str | bytes, what: str) -> bytes:
    """text as a C string argument. A NUL byte is refused (ValueError): C would end the
    string there, so tenant "alice\\0bob" silently named tenant "alice"."""
    b = text.encode() if isinstance(text, str) else bytes(text)
    if b"\0" in b:
        raise ValueError(f"{what} contains a NUL byte")
    return b


def _find() -> str:
    env = os.environ.get("KVTIER_LIB")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    for name in sorted(os.listdir(here)):
        if name.startswith("libkvtier.so"):
            return os.path.join(here, name)
    found = ctypes.util.find_library("kvtier")
    if found:
        return found
    raise ImportError(
        "libkvtier not found: install the package with `pip install ./python` from a "
        "kvtier checkout, or set KVTIER_LIB to the path of libkvtier.so")


# Every structure above that crosses the API, by its C name: checked against the
# library's own sizeof at load (kvt_abi_sizeof), so a field added to the header and not
# here fails the import instead of letting the library write past a ctypes buffer. Field
# names are the C names: tests/python/test_store.py compiles the header and compares every
# field's offset and size (fields swapped or retyped keep the size).
MIRRORED = {
    "kvt_geometry": Geometry, "kvt_key": Key, "kvt_namespace": Namespace,
    "kvt_result": Result, "kvt_tier_stats": TierStats, "kvt_stats": Stats,
    "kvt_row_strides": RowStrides, "kvt_row_layout": RowLayoutC,
    "kvt_rows_result": RowsResult, "kvt_event": Event,
}


def check_abi(lib: ctypes.CDLL) -> None:
    """Raise ImportError, one line, if a mirrored structure's size differs from the
    library's."""
    sizeof = lib.kvt_abi_sizeof
    sizeof.restype = ctypes.c_size_t
    sizeof.argtypes = [ctypes.c_char_p]
    for cname, mirror in MIRRORED.items():
        theirs, ours = sizeof(cname.encode()), ctypes.sizeof(mirror)
        if theirs != ours:
            raise ImportError(
                f"libkvtier ({lib._name}) has struct {cname} of {theirs} bytes but this "
                f"package declares {ours}: the package and the library come from "
                "different kvtier builds")


def _load() -> ctypes.CDLL:
    lib = ctypes.CDLL(_find())
    check_abi(lib)
    for name, (res, args) in _PROTOS.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    return lib


lib = _load()
