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

Elements are moved as integers of the dtype's width: bit-exact, no float math. The copies
are torch's (Tensor.copy_ from a permuted view, zero-copy over the numpy buffers): about
twice numpy's speed for cpu-vec's transposed K, and multithreaded where torch has threads.
Nothing here needs vLLM, so it is tested without it (tests/python/test_layout.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import warnings

import numpy as np
import torch

# torch warns when it wraps a read-only buffer (a store's source row); the conversion only
# reads it
warnings.filterwarnings("ignore", message="The given NumPy array is not writable",
                        category=UserWarning)

LAYOUTS = ("cpu-vec", "nhd", "hnd")
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
        writes the rows)."""
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
        if self.layout == "nhd":
            p = src.view(n, tp, L, bpc, Tb, Hr, 2, D)
            return (p[..., 0, :].permute(0, 2, 3, 4, 1, 5, 6),
                    p[..., 1, :].permute(0, 2, 3, 4, 1, 5, 6))
        p = src.view(n, tp, L, bpc, Hr, Tb, 2, D)  # hnd
        return (p[..., 0, :].permute(0, 2, 3, 5, 1, 4, 6),
                p[..., 1, :].permute(0, 2, 3, 5, 1, 4, 6))

    def _canon_views(self, bufs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V of canonical chunks (an (N, >= payload elements) integer tensor)."""
        n = bufs.shape[0]
        c = bufs[:, :self.payload_bytes // self.itemsize].view(
            n, self.layers, 2, self.blocks_per_chunk, self.block_tokens, self.tp,
            self.heads_per_rank, self.head_dim)
        return c[:, :, 0], c[:, :, 1]

    def rows_tensor(self, view) -> torch.Tensor:
        """The primary tier's buffer (rows x row stride bytes, e.g. the tier's numpy view
        of primary_kv_view) as an integer tensor sharing its memory, for *_rows."""
        a = np.asarray(view)
        return torch.from_numpy(a.view(np.uint8).reshape(a.shape[0], -1)).view(
            _TINT[self.itemsize])

    def chunks_tensor(self, bufs) -> torch.Tensor:
        """Canonical chunks (n x >= payload_bytes, a numpy array) as an integer tensor."""
        a = np.asarray(bufs)
        return torch.from_numpy(a.view(np.uint8).reshape(a.shape[0], -1)).view(
            _TINT[self.itemsize])

    # ------------------------------------------------------------ conversions
    def row_to_canonical(self, row, out) -> None:
        """Write the canonical chunk of a primary-tier row into out (payload_bytes)."""
        rk, rv = self._kv_views(_tensor(row, self.row_bytes, self.itemsize)[None])
        ck, cv = self._canon_views(_tensor(out, self.payload_bytes, self.itemsize)[None])
        ck.copy_(rk)
        cv.copy_(rv)

    def canonical_to_row(self, buf, row) -> None:
        """Write a canonical chunk into a primary-tier row (padding bytes untouched)."""
        self.canonical_to_rows(_tensor(buf, self.payload_bytes, self.itemsize)[None],
                               _tensor(row, self.row_bytes, self.itemsize)[None], [0])

    def canonical_to_rows(self, chunks: torch.Tensor, rows: torch.Tensor,
                          ids: list[int]) -> None:
        """Write canonical chunks i (chunks_tensor) into rows ids[i] (rows_tensor): one copy
        for K and one for V when the ids are consecutive (vLLM allocates a request's rows
        so, usually), else one per chunk. Few large copies: each is one GIL release."""
        n = len(ids)
        ck, cv = self._canon_views(chunks[:n])
        if n and ids == list(range(ids[0], ids[0] + n)):
            rk, rv = self._kv_views(rows[ids[0]:ids[0] + n])
            rk.copy_(ck)
            rv.copy_(cv)
            return
        for i, r in enumerate(ids):
            rk, rv = self._kv_views(rows[r:r + 1])
            rk.copy_(ck[i:i + 1])
            rv.copy_(cv[i:i + 1])


def _tensor(buf, nbytes: int, itemsize: int) -> torch.Tensor:
    """The first nbytes of a buffer (numpy array, bytearray, memoryview) as a flat tensor
    of itemsize-wide integers sharing its memory."""
    return torch.from_numpy(_flat(buf, nbytes)).view(_TINT[itemsize])


def _flat(buf: np.ndarray, nbytes: int) -> np.ndarray:
    b = np.asarray(buf)
    if b.dtype != np.uint8:
        b = b.view(np.uint8)
    b = b.reshape(-1, copy=False)
    if b.size < nbytes:
        raise ValueError(f"buffer of {b.size} bytes is smaller than {nbytes}")
    return b[:nbytes]
