"""Geometry, namespaces and chunk keys (docs/FORMAT.md sections 1-3), computed by the
library so Python and C can never disagree about a key."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Sequence

from . import _lib
from ._lib import lib
from .errors import check


@dataclass(frozen=True)
class Geometry:
    """The shape of one model's KV cache, before tensor parallelism."""

    layers: int
    kv_heads: int
    head_dim: int
    chunk_tokens: int
    dtype: str = "bf16"
    kind: str = "kv"

    def _c(self) -> _lib.Geometry:
        if self.dtype not in _lib.DTYPES:
            raise ValueError(f"unknown dtype {self.dtype!r} (bf16, fp16, fp8, fp32)")
        if self.kind not in _lib.KINDS:
            raise ValueError(f"unknown kind {self.kind!r} (kv, mla)")
        return _lib.Geometry(self.layers, self.kv_heads, self.head_dim, self.chunk_tokens,
                             _lib.DTYPES[self.dtype], _lib.KINDS[self.kind])

    @classmethod
    def _from_c(cls, g: _lib.Geometry) -> "Geometry":
        return cls(g.layers, g.kv_heads, g.head_dim, g.chunk_tokens,
                   _lib.DTYPE_NAMES.get(g.dtype, str(g.dtype)),
                   _lib.KIND_NAMES.get(g.kind, str(g.kind)))

    def check(self) -> None:
        g = self._c()
        check(lib.kvt_geometry_check(ctypes.byref(g)), f"geometry {self}")

    @property
    def dtype_bytes(self) -> int:
        return lib.kvt_dtype_bytes(_lib.DTYPES[self.dtype])

    def layer_bytes(self, n_tokens: int) -> int:
        g = self._c()
        return lib.kvt_layer_bytes(ctypes.byref(g), n_tokens)

    def payload_bytes(self, n_tokens: int | None = None) -> int:
        """Bytes of a dense chunk as put/get take it (all layers, K then V)."""
        g = self._c()
        n = self.chunk_tokens if n_tokens is None else n_tokens
        return lib.kvt_payload_bytes(ctypes.byref(g), n)

    def object_bytes(self, n_tokens: int | None = None) -> int:
        """Bytes of the stored object (header + layers padded to 4 KiB)."""
        g = self._c()
        n = self.chunk_tokens if n_tokens is None else n_tokens
        return lib.kvt_object_bytes(ctypes.byref(g), n)

    def layer_offset(self, n_tokens: int, layer: int) -> int:
        g = self._c()
        return lib.kvt_layer_offset(ctypes.byref(g), n_tokens, layer)


NS_FIELD_MAX = 1024  # bytes of model, revision or tenant (src/keys.c NS_FIELD_MAX)


def ns_field(name: str, value: str) -> bytes:
    """A namespace's model, revision or tenant as the C API takes it, refused here with a
    ValueError naming it where FORMAT.md section 1 refuses it: a control byte (a NUL,
    which a C string would end at, included) or more than NS_FIELD_MAX bytes."""
    b = _lib.cstr(value, name)
    if any(c < 0x20 or c == 0x7F for c in b):
        raise ValueError(f"{name} may not contain control characters (docs/FORMAT.md "
                         "section 1)")
    if len(b) > NS_FIELD_MAX:
        raise ValueError(f"{name} is longer than {NS_FIELD_MAX} bytes")
    return b


def _ns(model: str, revision: str, tenant: str, geometry: Geometry) -> _lib.Namespace:
    return _lib.Namespace(ns_field("model", model), ns_field("revision", revision),
                          ns_field("tenant", tenant), geometry._c())


def namespace_text(model: str, geometry: Geometry, revision: str = "", tenant: str = "") -> str:
    """The canonical text of a namespace (FORMAT.md section 1)."""
    ns = _ns(model, revision, tenant, geometry)
    buf = ctypes.create_string_buffer(8192)
    n = check(lib.kvt_namespace_text(ctypes.byref(ns), buf, len(buf)), "kvt_namespace_text")
    return buf.raw[:n].decode()


def namespace_id(model: str, geometry: Geometry, revision: str = "", tenant: str = "") -> bytes:
    """ns_id = SHA-256 of the canonical text: 32 bytes."""
    ns = _ns(model, revision, tenant, geometry)
    out = ctypes.create_string_buffer(_lib.NS_ID_BYTES)
    check(lib.kvt_namespace_id(ctypes.byref(ns), out), "kvt_namespace_id")
    return out.raw


def _ns_id_arg(ns_id: bytes) -> bytes:
    if not isinstance(ns_id, (bytes, bytearray)) or len(ns_id) != _lib.NS_ID_BYTES:
        raise ValueError("ns_id must be 32 bytes")
    return bytes(ns_id)


def _tokens(tokens: Sequence[int]) -> ctypes.Array:
    # ctypes stores into c_uint32 without a range check (-1 became 0xFFFFFFFF, 2**32 + 5
    # became 5: another prompt's key, until 2026-12-06 for key_next - a review)
    try:
        if any(t < 0 or t > 0xFFFFFFFF for t in tokens):
            raise OverflowError("out of range")
        return (ctypes.c_uint32 * len(tokens))(*tokens)
    except (TypeError, OverflowError) as e:
        raise ValueError(f"tokens must be integers in 0..2^32-1: {e}") from None


def keys_from_tokens(ns_id: bytes, chunk_tokens: int, tokens: Sequence[int]) -> list[bytes]:
    """The key of every chunk of a prompt: ceil(len(tokens) / chunk_tokens) keys of 32
    bytes, the last over a partial chunk."""
    ns = _ns_id_arg(ns_id)
    arr = _tokens(tokens)
    n = -(-len(tokens) // chunk_tokens) if chunk_tokens > 0 else 0
    keys = (_lib.Key * max(n, 1))()
    got = check(lib.kvt_keys_from_tokens(ns, chunk_tokens, arr, len(tokens), keys, n),
                f"keys_from_tokens(chunk_tokens={chunk_tokens})")
    return [bytes(keys[i].bytes) for i in range(got)]


def key_next(ns_id: bytes, prev: bytes | None, tokens: Sequence[int]) -> bytes:
    """The key of one chunk after the chunk whose key is prev (None: the first chunk)."""
    ns = _ns_id_arg(ns_id)
    p = None
    if prev is not None:
        p = ctypes.byref(key_struct(prev))
    out = _lib.Key()
    lib.kvt_key_next(ns, p, _tokens(tokens), len(tokens), ctypes.byref(out))
    return bytes(out.bytes)


def key_struct(key: bytes) -> _lib.Key:
    if not isinstance(key, (bytes, bytearray, memoryview)) or len(key) != _lib.KEY_BYTES:
        raise ValueError("a key is 32 bytes")
    return _lib.Key.from_buffer_copy(bytes(key))


def key_array(keys: Sequence[bytes]) -> ctypes.Array:
    arr = (_lib.Key * max(len(keys), 1))()
    for i, k in enumerate(keys):
        if len(k) != _lib.KEY_BYTES:
            raise ValueError("a key is 32 bytes")
        ctypes.memmove(ctypes.byref(arr[i]), bytes(k), _lib.KEY_BYTES)
    return arr
