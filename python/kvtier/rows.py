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
import itertools
import threading
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


class _Handle:
    """The C side of one Rows: its kvt_rows handle, the jobs started on it, and the rows
    array the handle borrows. The store keeps these (not the Rows) and closes them before
    it frees itself, so no handle outlives its store whatever order Python drops things
    in; it refers to no Rows and no Store, so it keeps neither alive."""

    def __init__(self, p: ctypes.c_void_p, rows: np.ndarray):
        self.p, self.rows = p, rows
        self.jobs: dict[int, ctypes.c_void_p] = {}
        self.lock = threading.Condition()  # p, jobs, users; notified when users drops
        self.users = 0  # C calls running on p or on one of its jobs (enter/leave)
        self.job_users: dict[int, int] = {}  # of those, the ones on each job
        self.state = "open"  # "closing" while one close frees it, then "closed"

    def enter(self, job_id: int | None = None, alone: bool = False):
        """The handle (or its job job_id) for one C call, which it outlives: close() frees
        them once every enter has had its leave. None when closed (or the job freed).
        alone: the call must be the job's only one (a poll: the C side finishes a job
        once, and two polls seeing it over freed it twice) - ValueError otherwise."""
        with self.lock:
            p = self.p if job_id is None else self.jobs.get(job_id)
            if p and alone and self.job_users.get(job_id):
                raise ValueError("job is being polled on another thread (one at a time)")
            if p:
                self.users += 1
                if job_id is not None:
                    self.job_users[job_id] = self.job_users.get(job_id, 0) + 1
            return p

    def leave(self, job_id: int | None = None) -> None:
        with self.lock:
            self.users -= 1
            if job_id is not None:
                self.job_users[job_id] -= 1
                if not self.job_users[job_id]:
                    del self.job_users[job_id]
            self.lock.notify_all()

    def free_job(self, job_id: int) -> None:
        """Free a job once no other thread is polling it (a poll is bounded by its timeout
        and the load's deadline)."""
        with self.lock:
            while self.job_users.get(job_id):
                self.lock.wait()
            j = self.jobs.pop(job_id, None)
            if j:
                # the free uses the handle (kvt_rows_job_free waits on its lock): a close
                # on another thread waits for it as for any user (until 2026-12-06 it did
                # not, the job being gone from jobs, and freed the handle under it)
                self.users += 1
        if j:
            try:
                lib.kvt_rows_job_free(j)
            finally:
                self.leave()

    def close(self) -> None:
        """Free the jobs still held (nothing is written into a row after that), then wait
        for the I/O in flight and free the handle. Idempotent: a close while another
        thread's is running returns once that one has freed everything (until 2026-12-06
        it returned at once, and a Store.close could then free the store under the first
        close's kvt_rows_close)."""
        with self.lock:
            if self.state != "open":
                while self.state != "closed":
                    self.lock.wait()
                return
            self.state = "closing"
            p, self.p = self.p, None
            try:
                while self.users:  # loads, stores and job polls of other threads (bounded
                    self.lock.wait()  # by their deadlines) still use the handle or a job
            except BaseException:  # interrupted (KeyboardInterrupt): open as before
                self.p, self.state = p, "open"
                self.lock.notify_all()
                raise
            jobs, self.jobs = list(self.jobs.values()), {}
        try:
            for j in jobs:
                lib.kvt_rows_job_free(j)
            if p:
                lib.kvt_rows_close(p)
        finally:
            with self.lock:
                self.rows = None
                self.state = "closed"
                self.lock.notify_all()


class Rows:
    """rows: a 2-D uint8 array (one row per chunk slot, rows of layout.row_bytes bytes,
    C-contiguous), kept referenced until the handle is closed (close(), or Store.close()
    if it is still open), and not after: an engine can then release the memory under it
    (vLLM unmaps its primary tier). staging: chunk buffers of the handle (operations in
    flight at once). Any call after a close raises ValueError."""

    def __init__(self, store, layout: _lib.RowLayoutC, rows: np.ndarray, staging: int):
        if rows.ndim != 2 or not rows.flags.c_contiguous or rows.dtype != np.uint8:
            raise ValueError("rows must be a C-contiguous 2-D uint8 array")
        if rows.shape[1] != layout.row_bytes:
            raise ValueError(f"rows of {rows.shape[1]} bytes, layout says {layout.row_bytes}")
        self._store, self._layout = store, layout  # rows: only the handle holds them
        p = ctypes.c_void_p()
        core = store._core
        s = core.enter()  # registered before a concurrent Store.close() closes the handles
        try:
            check(lib.kvt_rows_open(s, ctypes.byref(layout), rows.ctypes.data,
                                    rows.shape[0], staging, ctypes.byref(p)), "kvt_rows_open")
            self._h = _Handle(p, rows)
            core.rows.add(self._h)  # Store.close() closes it first
        finally:
            core.leave()
        self._job_ids = itertools.count(1)

    @property
    def _r(self):
        """The C handle; None once this handle or its store is closed."""
        h = getattr(self, "_h", None)
        return h.p if h is not None else None

    @staticmethod
    def _result(n: int, res: _lib.RowsResult, call_s: float) -> RowsResult:
        check(n, "kvt_rows")
        return RowsResult(res.done, _lib.ROWS_FAILURES.get(res.failure, "error"), res.status,
                          res.wait_ns / 1e9, res.convert_ns / 1e9, call_s,
                          res.submit_ns / 1e9)

    @staticmethod
    def _ids(keys: Sequence[bytes], row_ids: Sequence[int]) -> np.ndarray:
        """row_ids as a uint64 array, one per key: the C side reads len(keys) of them."""
        ids = np.ascontiguousarray(row_ids, dtype=np.uint64)
        if ids.ndim != 1 or len(ids) != len(keys):
            raise ValueError(f"{len(keys)} keys but {ids.size} row ids "
                             "(one row id per key)")
        return ids

    def _check_writable(self):
        """Loads write into the rows: a read-only view of bytes was changed in place, and
        one of a read-only mapping crashed the process (SIGSEGV in the load's copy). Stores
        only read them, and may use such an array."""
        h = getattr(self, "_h", None)
        if h is not None and h.rows is not None and not h.rows.flags.writeable:
            raise ValueError("rows are read-only: loads write into them")

    def load(self, keys: Sequence[bytes], row_ids: Sequence[int],
             deadline: float | None = None) -> RowsResult:
        """Read chunks keys[i] into rows row_ids[i]; stops at the first that fails (rows
        after it are not written). deadline: time.monotonic() seconds (None: only the
        tiers' own deadlines)."""
        self._check()
        self._check_writable()
        ids = self._ids(keys, row_ids)
        karr = key_array(keys)
        res = _lib.RowsResult()
        dl = 0 if deadline is None else max(1, int(deadline * 1e9))
        t0 = time.monotonic()
        h, r = self._h, self._enter()
        try:
            n = lib.kvt_rows_load(r, karr, ids.ctypes.data, len(keys), dl, ctypes.byref(res))
        finally:
            h.leave()
        return self._result(n, res, time.monotonic() - t0)

    def load_start(self, keys: Sequence[bytes], row_ids: Sequence[int],
                   deadline: float | None = None,
                   linked: Sequence[bool] | None = None) -> "RowsJob":
        """The same load without waiting: the reads are submitted now; poll the job.
        linked[i] (i > 0): keys[i-1] is the chunk right before keys[i] in its prompt (None:
        every chunk after the first), the parent a promotion into DRAM names."""
        self._check()
        self._check_writable()
        ids = self._ids(keys, row_ids)
        karr = key_array(keys)
        lk = None
        if linked is not None:
            if len(linked) != len(keys):
                raise ValueError(f"{len(keys)} keys but {len(linked)} links")
            lk = np.array([bool(x) for x in linked], dtype=np.uint8)
        dl = 0 if deadline is None else max(1, int(deadline * 1e9))
        p = ctypes.c_void_p()
        h, r = self._h, self._enter()
        try:  # registered before a concurrent close (which waits for leave) takes the jobs
            check(lib.kvt_rows_load_start_linked(
                r, karr, None if lk is None else lk.ctypes.data, ids.ctypes.data, len(keys),
                dl, ctypes.byref(p)), "kvt_rows_load_start")
            with h.lock:
                job_id = next(self._job_ids)
                h.jobs[job_id] = p
        finally:
            h.leave()
        return RowsJob(self, job_id)

    def store(self, keys: Sequence[bytes], row_ids: Sequence[int],
              parents: Sequence[bytes | None] | None = None,
              deadline: float | None = None) -> RowsResult:
        """Put rows row_ids[i] (converted to canonical chunks) under keys[i], parent
        parents[i] (None: none); stops at the first put that fails."""
        self._check()
        ids = self._ids(keys, row_ids)
        karr = key_array(keys)
        parr = has = None
        if parents is not None:
            if len(parents) != len(keys):
                raise ValueError(f"{len(keys)} keys but {len(parents)} parents "
                                 "(one parent or None per key)")
            parr = key_array([p if p is not None else bytes(_lib.KEY_BYTES) for p in parents])
            has = np.array([p is not None for p in parents], dtype=np.uint8)
        res = _lib.RowsResult()
        dl = 0 if deadline is None else max(1, int(deadline * 1e9))
        t0 = time.monotonic()
        h, r = self._h, self._enter()
        try:
            n = lib.kvt_rows_store(r, karr, parr, None if has is None else has.ctypes.data,
                                   ids.ctypes.data, len(keys), dl, ctypes.byref(res))
        finally:
            h.leave()
        return self._result(n, res, time.monotonic() - t0)

    def store_late(self, max_keys: int = 1024) -> list[bytes]:
        """The keys of chunks a store() put but did not count in its result (done): puts
        still in flight when it returned (its deadline, an earlier chunk's failure) that
        succeeded since, and puts done out of order after the first chunk not done. Each is
        reported once, oldest first, up to max_keys per call. [] once closed. In client mode
        a put cut at the deadline that kvtierd stored since is found by a lookup after a
        later store() that went through (include/kvtier_layout.h)."""
        h = getattr(self, "_h", None)
        r = h.enter() if h is not None else None
        if not r:
            return []
        try:
            arr = (_lib.Key * max_keys)()
            n = lib.kvt_rows_store_late(r, arr, max_keys)
        finally:
            h.leave()
        return [bytes(arr[i].bytes) for i in range(n)]

    def _check(self):
        if not self._r:
            raise ValueError("rows handle is closed" if self._store._s else
                             "rows handle is closed (its store is closed)")
        self._store._check_open()  # a close asked for from a completion, not done yet

    def _enter(self):
        """The C handle, entered for one call (leave with self._h.leave())."""
        r = self._h.enter()
        if not r:  # closed by another thread since _check
            raise ValueError("rows handle is closed")
        return r

    def close(self) -> None:
        """Free the jobs not freed yet, wait for reads and writes still in flight (bounded
        by the tiers' deadlines) and free the handle. Idempotent."""
        h = getattr(self, "_h", None)
        if h is not None:
            h.close()
            self._store._core.rows.discard(h)

    def __enter__(self) -> "Rows":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class RowsJob:
    """A load in flight (Rows.load_start). poll() never blocks by default; free() gives
    it up if it is not over (no row is written after free returns). Rows.close() (and so
    Store.close()) frees the jobs still held; poll() after that raises ValueError."""

    def __init__(self, rows: Rows, job_id: int):
        self._rows, self._id = rows, job_id

    @property
    def _j(self):
        h = self._rows._h
        return h.jobs.get(self._id)

    def poll(self, timeout_ms: int = 0) -> RowsResult | None:
        """The result once the load is over, else None (after waiting up to timeout_ms;
        -1: until it is over)."""
        h = self._rows._h
        j = h.enter(self._id, alone=True)
        if not j:
            raise ValueError("job is freed" if self._rows._r else
                             "job is freed: its rows handle is closed")
        res = _lib.RowsResult()
        try:
            n = lib.kvt_rows_job_poll(j, timeout_ms, ctypes.byref(res))
        finally:
            h.leave(self._id)
        if not check(n, "kvt_rows_job_poll"):
            return None
        return Rows._result(res.done, res, 0.0)

    def free(self) -> None:
        self._rows._h.free_job(self._id)
