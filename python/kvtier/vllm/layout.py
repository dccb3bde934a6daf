"""Conversion between a row of vLLM's CPU primary offload tier and kvtier's canonical chunk.

A primary-tier row (one offloaded chunk, as vLLM's workers write it) is, for each worker
rank r (its tensor-parallel slot), for each layer l, for each of the chunk's
blocks_per_chunk blocks j, that block's page of layer l as the attention backend stores
it. The page interior depends on the backend:

  "cpu-vec"  vLLM's CPU attention, "vec" ISA (LBHNC; kernel cpu_attn_reshape_and_cache):
             per head: K transposed [head_dim][block_tokens], then V [block_tokens][head_dim]
  "nhd"      vLLM 0.32 CUDA FlashAttention, the default LBNHC layout:
             [block_tokens][heads][K head_dim | V head_dim]
  "hnd"      LBHNC on CUDA (e.g. FlashInfer HND): [heads][block_tokens][K | V]

kvtier's canonical chunk (docs/FORMAT.md, the payload kvt_put takes) is, per layer, K then
V, each [tokens][all kv heads][head_dim]. Converting on the way in and out makes one
stored object serve any attention backend and any tensor-parallel size: a writer with TP=2
and a reader with TP=1 (or a CUDA writer and a CPU reader) exchange the same bytes.

Elements are moved as unsigned integers of the dtype's width: bit-exact, no float math.
Everything here is numpy only, so it is tested without vLLM (tests/python/test_layout.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

LAYOUTS = ("cpu-vec", "nhd", "hnd")
_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32}


@dataclass(frozen=True)
class RowLayout:
    layout: str            # one of LAYOUTS
    layers: int
    kv_heads: int          # all KV heads of the model
    head_dim: int
    block_tokens: int      # tokens per vLLM block (page)
    blocks_per_chunk: int  # blocks per offloaded chunk (row)
    tp: int = 1            # worker ranks, each holding kv_heads / tp heads
    itemsize: int = 2      # bytes per element (bf16/fp16: 2)
    page_bytes: int = 0    # bytes per page as allocated (padding allowed); 0: unpadded

    def __post_init__(self):
        if self.layout not in LAYOUTS:
            raise ValueError(f"unknown vLLM KV layout {self.layout!r} (one of {LAYOUTS})")
        if self.itemsize not in _UINT:
            raise ValueError(f"unsupported element size {self.itemsize}")
        if self.kv_heads % self.tp:
            raise ValueError(f"{self.kv_heads} KV heads do not split over TP={self.tp}")
        if self.page_bytes and self.page_bytes < self.unpadded_page_bytes:
            raise ValueError("page_bytes is smaller than one page's K and V")

    @property
    def chunk_tokens(self) -> int:
        return self.block_tokens * self.blocks_per_chunk

    @property
    def heads_per_rank(self) -> int:
        return self.kv_heads // self.tp

    @property
    def unpadded_page_bytes(self) -> int:
        return 2 * self.block_tokens * self.heads_per_rank * self.head_dim * self.itemsize

    @property
    def page(self) -> int:
        return self.page_bytes or self.unpadded_page_bytes

    @property
    def slot_bytes(self) -> int:
        """Bytes of one rank's part of a row."""
        return self.layers * self.blocks_per_chunk * self.page

    @property
    def row_bytes(self) -> int:
        """Bytes of a row that carry data (the row itself may be padded beyond)."""
        return self.tp * self.slot_bytes

    @property
    def payload_bytes(self) -> int:
        """Bytes of the canonical chunk (kvt_payload_bytes for a full chunk)."""
        return 2 * self.layers * self.chunk_tokens * self.kv_heads * self.head_dim * self.itemsize

    # ------------------------------------------------------------------ views
    def _kv_views(self, row: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Views of a row's K and V, each shaped (L, bpc, Tb, tp, Hr, D) in canonical axis
        order (strided: no copy; writing them writes the row)."""
        el = _UINT[self.itemsize]
        L, bpc, Tb, tp, Hr, D = (self.layers, self.blocks_per_chunk, self.block_tokens,
                                 self.tp, self.heads_per_rank, self.head_dim)
        r = _flat(row, self.row_bytes).view(el)
        pe = self.page // self.itemsize
        src = r.reshape(tp, L, bpc, pe, copy=False)[..., :self.unpadded_page_bytes // self.itemsize]
        if self.layout == "cpu-vec":
            p = src.reshape(tp, L, bpc, Hr, 2 * Tb * D, copy=False)
            k = p[..., :Tb * D].reshape(tp, L, bpc, Hr, D, Tb, copy=False)
            v = p[..., Tb * D:].reshape(tp, L, bpc, Hr, Tb, D, copy=False)
            return k.transpose(1, 2, 5, 0, 3, 4), v.transpose(1, 2, 4, 0, 3, 5)
        if self.layout == "nhd":
            p = src.reshape(tp, L, bpc, Tb, Hr, 2, D, copy=False)
            return (p[..., 0, :].transpose(1, 2, 3, 0, 4, 5),
                    p[..., 1, :].transpose(1, 2, 3, 0, 4, 5))
        p = src.reshape(tp, L, bpc, Hr, Tb, 2, D, copy=False)  # hnd
        return (p[..., 0, :].transpose(1, 2, 4, 0, 3, 5),
                p[..., 1, :].transpose(1, 2, 4, 0, 3, 5))

    def _canon_views(self, buf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        el = _UINT[self.itemsize]
        c = _flat(buf, self.payload_bytes).view(el).reshape(
            self.layers, 2, self.blocks_per_chunk, self.block_tokens, self.tp,
            self.heads_per_rank, self.head_dim, copy=False)
        return c[:, 0], c[:, 1]

    # ------------------------------------------------------------ conversions
    def row_to_canonical(self, row: np.ndarray, out: np.ndarray) -> None:
        """Write the canonical chunk of a primary-tier row into out (payload_bytes)."""
        rk, rv = self._kv_views(row)
        ck, cv = self._canon_views(out)
        np.copyto(ck, rk)
        np.copyto(cv, rv)

    def canonical_to_row(self, buf: np.ndarray, row: np.ndarray) -> None:
        """Write a canonical chunk into a primary-tier row (padding bytes untouched)."""
        rk, rv = self._kv_views(row)
        ck, cv = self._canon_views(buf)
        np.copyto(rk, ck)
        np.copyto(rv, cv)


def _flat(buf: np.ndarray, nbytes: int) -> np.ndarray:
    b = np.asarray(buf)
    if b.dtype != np.uint8:
        b = b.view(np.uint8)
    b = b.reshape(-1, copy=False)
    if b.size < nbytes:
        raise ValueError(f"buffer of {b.size} bytes is smaller than {nbytes}")
    return b[:nbytes]
