"""Conversion between a row of vLLM's CPU primary offload tier and kvtier's canonical chunk.

A primary-tier row (one offloaded chunk, as vLLM's workers write it) is, for each worker
rank r (its tensor-parallel slot), for each layer l, for each of the chunk's
blocks_per_chunk blocks j, that block's page of layer l as the attention backend stores
it. The page interior depends on the backend:

  "cpu-vec"  vLLM's CPU attention, "vec" and "vec16" ISAs (LBHNC; kernel
             cpu_attn_reshape_and_cache): per head: K transposed [head_dim][block_tokens],
             then V [block_tokens][head_dim]
  "cpu-amx"  the same kernel, "amx" ISA (bf16 on a CPU with AMX, block_tokens a multiple
             of 32), packed for AMX tiles: per head, K is [block_tokens/16][head_dim/2]
             tiles of [16 tokens][2 dims], then V [head_dim/16][block_tokens/2] tiles of
             [16 dims][2 tokens]
  "nhd"      vLLM 0.32 CUDA FlashAttention, the default LBNHC layout:
             [block_tokens][heads][K head_dim | V head_dim]
  "hnd"      LBHNC on CUDA (e.g. FlashInfer HND): [heads][block_tokens][K | V]

kvtier's canonical chunk (docs/FORMAT.md, the payload kvt_put takes) is, per layer, K then
V, each [tokens][all kv heads][head_dim]. Converting on the way in and out makes one
stored object serve any attention backend and any tensor-parallel size: a writer with TP=2
and a reader with TP=1 (or a CUDA writer and a CPU reader) exchange the same bytes.

Elements are moved as integers of the dtype's width: bit-exact, no float math. The copies
are libkvtier's (kvt_row_from_canonical / kvt_row_to_canonical, include/kvtier_layout.h),
driven by a stride set this module derives from the torch views below (_kv_views, on a
meta tensor: no memory): the same strides drive the tier's one-call-per-job loads and
stores (kvtier.rows.Rows), which run without the GIL.
Nothing here needs vLLM, so it is tested without it (tests/python/test_layout.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import ctypes
from functools import lru_cache

import numpy as np
import torch

from kvtier import _lib
from kvtier._lib import lib

LAYOUTS = ("cpu-vec", "cpu-amx", "nhd", "hnd")
_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32}
_TINT = {1: torch.uint8, 2: torch.int16, 4: torch.int32}


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
        if self.layout == "cpu-amx" and (self.block_tokens % 16 or self.head_dim % 16):
            raise ValueError("cpu-amx pages need block_tokens and head_dim multiples of 16 "
                             f"(got {self.block_tokens}, {self.head_dim})")

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
    def _kv_views(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Views of K and V of rows (an (N, >= row elements) integer tensor), each shaped
        (N, L, bpc, Tb, tp, Hr, D) in canonical axis order (strided: no copy; writing them
        writes the rows); for a tiled page (cpu-amx) with the token and dim axes split into
        (tiles, within a tile): (N, L, bpc, Tb/tt, tt, tp, Hr, D/dt, dt)."""
        L, bpc, Tb, tp, Hr, D = (self.layers, self.blocks_per_chunk, self.block_tokens,
                                 self.tp, self.heads_per_rank, self.head_dim)
        n = rows.shape[0]
        pe = self.page // self.itemsize
        src = rows[:, :self.row_bytes // self.itemsize].view(n, tp, L, bpc, pe)
        src = src[..., :self.unpadded_page_bytes // self.itemsize]
        if self.layout == "cpu-vec":
            p = src.view(n, tp, L, bpc, Hr, 2 * Tb * D)
            k = p[..., :Tb * D].view(n, tp, L, bpc, Hr, D, Tb)
            v = p[..., Tb * D:].view(n, tp, L, bpc, Hr, Tb, D)
            return k.permute(0, 2, 3, 6, 1, 4, 5), v.permute(0, 2, 3, 5, 1, 4, 6)
        if self.layout == "cpu-amx":
            p = src.view(n, tp, L, bpc, Hr, 2 * Tb * D)
            # K: (tiles of 16 tokens, pairs of dims, token, dim within the pair)
            k = p[..., :Tb * D].view(n, tp, L, bpc, Hr, Tb // 16, D // 2, 16, 2)
            # V: (tiles of 16 dims, pairs of tokens, dim, token within the pair)
            v = p[..., Tb * D:].view(n, tp, L, bpc, Hr, D // 16, Tb // 2, 16, 2)
            return (k.permute(0, 2, 3, 5, 7, 1, 4, 6, 8),
                    v.permute(0, 2, 3, 6, 8, 1, 4, 5, 7))
        if self.layout == "nhd":
            p = src.view(n, tp, L, bpc, Tb, Hr, 2, D)
            return (p[..., 0, :].permute(0, 2, 3, 4, 1, 5, 6),
                    p[..., 1, :].permute(0, 2, 3, 4, 1, 5, 6))
        p = src.view(n, tp, L, bpc, Hr, Tb, 2, D)  # hnd
        return (p[..., 0, :].permute(0, 2, 3, 5, 1, 4, 6),
                p[..., 1, :].permute(0, 2, 3, 5, 1, 4, 6))

    def c_layout(self, row_bytes: int = 0) -> _lib.RowLayoutC:
        """The libkvtier description of this layout (kvtier_layout.h): strides in
        elements of K and V read off the views of _kv_views; row_bytes: the distance
        between rows (default: row_bytes, the bytes that carry data)."""
        return _c_layout(self, row_bytes or self.row_bytes)

    # ------------------------------------------------------------ conversions
    def row_to_canonical(self, row, out) -> None:
        """Write the canonical chunk of a primary-tier row into out (payload_bytes)."""
        src = _flat(row, self.row_bytes)
        dst = _flat(out, self.payload_bytes, writable=True)
        rc = lib.kvt_row_to_canonical(ctypes.byref(self.c_layout()), src.ctypes.data,
                                      dst.ctypes.data)
        if rc < 0:
            raise ValueError(f"kvt_row_to_canonical: {lib.kvt_strerror(rc).decode()}")

    def canonical_to_row(self, buf, row) -> None:
        """Write a canonical chunk into a primary-tier row (padding bytes untouched)."""
        src = _flat(buf, self.payload_bytes)
        dst = _flat(row, self.row_bytes, writable=True)
        rc = lib.kvt_row_from_canonical(ctypes.byref(self.c_layout()), src.ctypes.data,
                                        dst.ctypes.data)
        if rc < 0:
            raise ValueError(f"kvt_row_from_canonical: {lib.kvt_strerror(rc).decode()}")


@lru_cache(maxsize=16)
def _c_layout(rl: RowLayout, row_bytes: int) -> _lib.RowLayoutC:
    if row_bytes < rl.row_bytes:
        raise ValueError(f"rows of {row_bytes} bytes cannot hold {rl.row_bytes}")
    meta = torch.empty((1, rl.row_bytes // rl.itemsize), dtype=_TINT[rl.itemsize],
                       device="meta")
    c = _lib.RowLayoutC(elem_bytes=rl.itemsize, layers=rl.layers, kv_heads=rl.kv_heads,
                        head_dim=rl.head_dim, block_tokens=rl.block_tokens,
                        blocks_per_chunk=rl.blocks_per_chunk,
                        heads_per_rank=rl.heads_per_rank, row_bytes=row_bytes)
    for name, v in zip(("k", "v"), rl._kv_views(meta)):
        # v: (1, L, bpc, Tb, tp, Hr, D) over the row, or tiled (see _kv_views)
        st = v.stride()
        if v.dim() == 7:
            setattr(c, name, _lib.RowStrides(v.storage_offset(), *st[1:]))
        else:
            setattr(c, name, _lib.RowStrides(
                v.storage_offset(), st[1], st[2], st[4], st[5], st[6], st[8],
                token_tile=v.shape[4], token_tile_stride=st[3],
                dim_tile=v.shape[8], dim_tile_stride=st[7]))
    rc = lib.kvt_row_layout_check(ctypes.byref(c))
    if rc < 0:
        raise ValueError(f"layout {rl} has no valid stride set: {lib.kvt_strerror(rc).decode()}")
    return c


def _flat(buf, nbytes: int, writable: bool = False) -> np.ndarray:
    """The first nbytes of a buffer (numpy array, bytearray, memoryview) as a contiguous
    uint8 array sharing its memory."""
    b = np.asarray(buf)
    if b.dtype != np.uint8:
        b = b.view(np.uint8)
    b = b.reshape(-1, copy=False)
    if b.size < nbytes:
        raise ValueError(f"buffer of {b.size} bytes is smaller than {nbytes}")
    if writable and not b.flags.writeable:
        raise ValueError("buffer is read-only")
    return b[:nbytes]
