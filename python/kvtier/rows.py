"""kvtier.Rows: an engine's host rows bound to a store (include/kvtier_layout.h), for
moving a whole batch of chunks with one call that holds no Python lock.

Why: converting and waiting chunk by chunk in Python needs the GIL many times per batch;
behind an engine loop that keeps the GIL busy (vLLM's step loop while requests wait for
KV) a restore then waited seconds for it. Here the reads, the waits (with the batch's
deadline) and the layout conversion all happen inside one ctypes call, which releases
the GIL for its whole duration.
"""

from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from . import _lib
from ._lib import lib
from .errors import check
from .keys import key_array


@dataclass(frozen=True)
class RowsResult:
    done: int          # leading chunks that succeeded
    reason: str        # why chunk `done` failed: "", miss, corrupt, timeout, deadline, short, error
    status: int        # its -errno (0 when every chunk succeeded)
    wait_s: float      # time spent waiting for the store
    convert_s: float   # layout conversion, summed over the threads that did it
    call_s: float = 0.0  # the whole libkvtier call (the GIL released)
    submit_s: float = 0.0  # in the store's submitting calls (and inline DRAM-hit conversions)


class Rows:
    """rows: a 2-D uint8 array (one row per chunk slot, rows of layout.row_bytes bytes,
    C-contiguous), kept referenced until close(). staging: chunk buffers of the handle
    (operations in flight at once). The store must stay open until close()."""

    def __init__(self, store, layout: _lib.RowLayoutC, rows: np.ndarray, staging: int):
        if rows.ndim != 2 or not rows.flags.c_contiguous or rows.dtype != np.uint8:
            raise ValueError("rows must be a C-contiguous 2-D uint8 array")
        if rows.shape[1] != layout.row_bytes:
            raise ValueError(f"rows of {rows.shape[1]} bytes, layout says {layout.row_bytes}")
        store._check_open()
        self._store, self._rows, self._layout = store, rows, layout
        p = ctypes.c_void_p()
        check(lib.kvt_rows_open(store._s, ctypes.byref(layout), rows.ctypes.data,
                                rows.shape[0], staging, ctypes.byref(p)), "kvt_rows_open")
        self._r = p

    @staticmethod
    def _result(n: int, res: _lib.RowsResult, call_s: float) -> RowsResult:
        check(n, "kvt_rows")
        return RowsResult(res.done, _lib.ROWS_FAILURES.get(res.failure, "error"), res.status,
                          res.wait_ns / 1e9, res.convert_ns / 1e9, call_s,
                          res.submit_ns / 1e9)

    def _ids(self, row_ids: Sequence[int]) -> np.ndarray:
        return np.ascontiguousarray(row_ids, dtype=np.uint64)

    def load(self, keys: Sequence[bytes], row_ids: Sequence[int],
             deadline: float | None = None) -> RowsResult:
        """Read chunks keys[i] into rows row_ids[i]; stops at the first that fails (rows
        after it are not written). deadline: time.monotonic() seconds (None: only the
        tiers' own deadlines)."""
        self._check()
        ids = self._ids(row_ids)
        karr = key_array(keys)
        res = _lib.RowsResult()
        dl = 0 if deadline is None else max(1, int(deadline * 1e9))
        t0 = time.monotonic()
        n = lib.kvt_rows_load(self._r, karr, ids.ctypes.data, len(keys), dl,
                              ctypes.byref(res))
        return self._result(n, res, time.monotonic() - t0)

    def load_start(self, keys: Sequence[bytes], row_ids: Sequence[int],
                   deadline: float | None = None) -> "RowsJob":
        """The same load without waiting: the reads are submitted now; poll the job."""
        self._check()
        ids = self._ids(row_ids)
        karr = key_array(keys)
        dl = 0 if deadline is None else max(1, int(deadline * 1e9))
        p = ctypes.c_void_p()
        check(lib.kvt_rows_load_start(self._r, karr, ids.ctypes.data, len(keys), dl,
                                      ctypes.byref(p)), "kvt_rows_load_start")
        return RowsJob(self, p)

    def store(self, keys: Sequence[bytes], row_ids: Sequence[int],
              parents: Sequence[bytes | None] | None = None,
              deadline: float | None = None) -> RowsResult:
        """Put rows row_ids[i] (converted to canonical chunks) under keys[i], parent
        parents[i] (None: none); stops at the first put that fails."""
        self._check()
        ids = self._ids(row_ids)
        karr = key_array(keys)
        parr = has = None
        if parents is not None:
            parr = key_array([p if p is not None else bytes(_lib.KEY_BYTES) for p in parents])
            has = np.array([p is not None for p in parents], dtype=np.uint8)
        res = _lib.RowsResult()
        dl = 0 if deadline is None else max(1, int(deadline * 1e9))
        t0 = time.monotonic()
        n = lib.kvt_rows_store(self._r, karr, parr, None if has is None else has.ctypes.data,
                               ids.ctypes.data, len(keys), dl, ctypes.byref(res))
        return self._result(n, res, time.monotonic() - t0)

    def _check(self):
        if not getattr(self, "_r", None):
            raise ValueError("rows handle is closed")

    def close(self) -> None:
        """Wait for reads and writes still in flight (bounded by the tiers' deadlines) and
        free the handle. Before the store's close."""
        r, self._r = getattr(self, "_r", None), None
        if r:
            lib.kvt_rows_close(r)

    def __enter__(self) -> "Rows":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class RowsJob:
    """A load in flight (Rows.load_start). poll() never blocks by default; free() gives
    it up if it is not over (no row is written after free returns). Free every job before
    the Rows handle's close()."""

    def __init__(self, rows: Rows, p: ctypes.c_void_p):
        self._rows, self._j = rows, p

    def poll(self, timeout_ms: int = 0) -> RowsResult | None:
        """The result once the load is over, else None (after waiting up to timeout_ms;
        -1: until it is over)."""
        if not self._j:
            raise ValueError("job is freed")
        res = _lib.RowsResult()
        if not check(lib.kvt_rows_job_poll(self._j, timeout_ms, ctypes.byref(res)),
                     "kvt_rows_job_poll"):
            return None
        return Rows._result(res.done, res, 0.0)

    def free(self) -> None:
        j, self._j = self._j, None
        if j:
            lib.kvt_rows_job_free(j)
