"""kvtier.Store: a store opened from a configuration, with put/get/lookup/prefetch/remove/
flush returning concurrent.futures.Future objects.

Completions: the library queues them and signals an eventfd (kvt_store_fd); kvt_poll runs
them on the calling thread. With poller="thread" (the default) a daemon thread waits on
that eventfd and polls, so futures complete on their own. With poller="manual" no
completion runs until the owner calls poll() - for an event loop that owns the fd, or vLLM's
scheduler, which reaps completions at its own moments; only the library's log lines are
delivered by a small thread (kvtier-log) as they come.

Buffers handed to put/get are kept referenced until their operation completed, as the C
contract requires.
"""

from __future__ import annotations

import ctypes
import itertools
import logging
import operator
import os
import re
import select
import sys
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from . import _lib
from ._lib import lib
from .config import Config
from .errors import check, error
from .keys import Geometry, key_array, key_struct

log = logging.getLogger("kvtier")
_LEVELS = {0: logging.ERROR, 1: logging.WARNING, 2: logging.INFO, 3: logging.DEBUG}


@dataclass(frozen=True)
class GetResult:
    data: Any          # the buffer that was filled (the caller's, or a new bytearray)
    n_tokens: int      # tokens in the chunk
    tier: str          # tier the bytes came from ("dram", "fs", ...)
    tier_index: int
    bytes: int         # bytes delivered


@dataclass(frozen=True)
class LookupResult:
    hits: int              # length of the contiguous prefix present in some tier
    tiers: list[str]       # the fastest tier holding each of those chunks
    cause: int = 0         # when the prefix stops early: why the next chunk is not known
    #                        absent (positive errno: a tier failed, was late or skipped, or
    #                        kvtierd was unreachable); 0 when every tier said it lacks it


# scheme://user:SECRET@host -> scheme://user:***@host; the userinfo ends at the last "@"
# of the word, as in src/redact.c (kvt__redact_url), whose rule the library's own log lines
# already follow: this is a second guard for a line that reaches an exception
_URL_SECRET = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^\s:/@\[\]]*:)\S*@")


def _open_reason(lines: list[str]) -> str:
    """The library's first error line of a failed kvt_store_open, on one line, redacted."""
    if not lines:
        return ""
    return _URL_SECRET.sub(r"\1***@", " ".join(lines[0].split()))


def _u32(v, what: str) -> int:
    """An integer argument that goes to C as uint32_t: ctypes masks a larger one without a
    word (2**32 + 16 tokens went in as 16) and raises ArgumentError for a float. Anything
    with __index__ (numpy's integers too) is an integer."""
    try:
        n = operator.index(v)
    except TypeError:
        n = None
    if isinstance(v, bool) or n is None or not 0 <= n <= 0xFFFFFFFF:
        raise ValueError(f"{what}: {v!r} is not an integer in 0..2**32-1")
    return n


def _cause_text(cause: int) -> str:
    """Why a get missed, for its NotFound's message ('' for a plain absence)."""
    if cause >= 0:
        return ""
    return "a tier's copy: " + lib.kvt_strerror(cause).decode()


def _buffer(obj: Any, writable: bool) -> tuple[int, int, Any]:
    """(address, length, keepalive) of a contiguous buffer: anything with the buffer
    protocol, or a CPU torch tensor (through data_ptr)."""
    if hasattr(obj, "data_ptr") and hasattr(obj, "is_contiguous"):
        if getattr(obj.device, "type", "cpu") != "cpu":
            raise ValueError("tensor must be in host memory")
        if not obj.is_contiguous():
            raise ValueError("tensor must be contiguous")
        return obj.data_ptr(), obj.numel() * obj.element_size(), obj
    mv = memoryview(obj)
    if not mv.contiguous:
        raise ValueError("buffer must be contiguous")
    n = mv.nbytes
    if n == 0:
        return 0, 0, obj
    if not mv.readonly:
        c = (ctypes.c_char * n).from_buffer(mv.cast("B"))
        return ctypes.addressof(c), n, (obj, c)
    if writable:
        raise ValueError("buffer is read-only")
    if isinstance(obj, bytes):
        p = ctypes.c_char_p(obj)
        return ctypes.cast(p, ctypes.c_void_p).value, n, (obj, p)
    copy = bytearray(mv.cast("B"))
    c = (ctypes.c_char * n).from_buffer(copy)
    return ctypes.addressof(c), n, (copy, c)


class _Core:
    """What the completions, the poll thread and closing need: the C handle, the ctypes
    callbacks, the pending operations, the open Rows handles. It holds no reference to
    the Store, so the poll thread (whose target is _Core.poll_loop) does not keep a
    dropped Store alive: the Store is collected and its __del__ closes the store."""

    def __init__(self, log_fn):
        self.s = None                 # the C store; None once closed
        # its tier chain as last read - at open, by Store.tiers, at close: what tiers
        # answers once the store is closing or closed
        self.names_at_close: list[str] = []
        self.pending: dict[int, tuple[Future, Callable, Any]] = {}
        self.lock = threading.Lock()  # pending
        self.log_user = log_fn
        # The library's log lines go into a C queue that this side drains (the poll thread
        # watches its fd; Store.poll and close drain it too), never through a ctypes
        # callback: that ran on the library's own threads and waited there for the GIL, so
        # inside a busy engine a stalled tier's deadlines were answered one GIL hand-off
        # apart (the service thread logs each before it answers it).
        self.logq = lib.kvt_log_queue_new(1024)
        if not self.logq:
            raise MemoryError("kvt_log_queue_new")
        self.log_cb = ctypes.cast(lib.kvt_log_queue_push, _lib.LOG_FN)
        self.log_buf = ctypes.create_string_buffer(600)
        self.log_mu = threading.Lock()  # one drainer at a time: lines stay in order
        self.cb = _lib.CB(self._on_complete)
        self.thread: threading.Thread | None = None
        self.wake_r = self.wake_w = -1
        # poller="manual": a thread that only delivers log lines (log_loop), woken to end
        self.log_thread: threading.Thread | None = None
        self.log_wake_r = self.log_wake_w = -1
        self.rows: set = set()        # open Rows handles (rows._Handle), closed first
        self.event_queues: list = []  # C event queues installed (Store.events): freed after
        self.tls = threading.local()  # .depth: kvt_poll calls running on this thread
        # closing, owner, users (never held across a C call); notified when users drops
        self.state = threading.Condition()
        self.closing = False          # close() was called: no new operations
        self.users = 0                # Store calls inside a C call on s (enter/leave)
        self.owner = None             # the thread doing the real close
        self.closed = threading.Event()
        self.open_errors: list[str] | None = []  # error lines while kvt_store_open runs

    def drain_logs(self) -> None:
        """Deliver the log lines the library queued (see __init__), in order."""
        q = self.logq
        if not q:
            return
        level, lost = ctypes.c_int(), ctypes.c_uint64()
        with self.log_mu:
            while True:
                got = lib.kvt_log_queue_pop(q, ctypes.byref(level), self.log_buf,
                                            len(self.log_buf), ctypes.byref(lost))
                if lost.value:
                    self._on_log(None, 1, b"kvtier: %d log lines were dropped (the log "
                                 b"queue was full)" % lost.value)
                if got != 1:
                    return
                self._on_log(None, level.value, self.log_buf.value)

    def free_logs(self) -> None:
        """Once no store can push any more (closed, or never opened)."""
        self.drain_logs()
        with self.log_mu:
            q, self.logq = self.logq, None
        if q:
            lib.kvt_log_queue_free(q)

    def _on_log(self, _arg, level, msg):
        try:
            text = msg.decode(errors="replace")
            errs = self.open_errors
            if level == 0 and errs is not None and len(errs) < 8:
                errs.append(text)
            if self.log_user:
                self.log_user(level, text)
            else:
                log.log(_LEVELS.get(level, logging.INFO), "%s", text)
        except Exception:  # a logging failure must never unwind into C
            pass

    def _on_complete(self, arg, res_p):
        try:
            with self.lock:
                fut, finish, _keep = self.pending.pop(arg)
            r = res_p.contents
            try:
                fut.set_result(finish(r))
            except BaseException as e:  # finish raises the operation's KvtierError
                fut.set_exception(e)
        except Exception:
            log.exception("kvtier completion")

    def enter(self):
        """The C store for one call on it, which the store outlives: close() frees it only
        once every enter has had its leave."""
        with self.state:
            if self.s is None or self.closing:
                raise ValueError("store is closed")
            self.users += 1
            return self.s

    def leave(self) -> None:
        with self.state:
            self.users -= 1
            if not self.users:
                self.state.notify_all()

    def _wait_users(self) -> None:
        """Wait for the calls other threads are making on s (none can start any more). A
        poll waiting on the eventfd is woken by a write to it (kvt_poll takes that as a
        wake-up with nothing to run), again on each turn: several pollers share one."""
        fd = lib.kvt_store_fd(self.s)
        with self.state:
            while self.users:
                os.write(fd, (1).to_bytes(8, sys.byteorder))
                self.state.wait(0.01)

    def poll(self, timeout_ms: int) -> int:
        """kvt_poll, counted as running on this thread: a close() from a completion it
        runs is deferred until it returns."""
        tls = self.tls
        tls.depth = getattr(tls, "depth", 0) + 1
        try:
            return lib.kvt_poll(self.s, timeout_ms)
        finally:
            tls.depth -= 1

    def poll_loop(self):
        fd = lib.kvt_store_fd(self.s)
        # poll(), not select(): select() refuses a descriptor >= FD_SETSIZE (1024), which
        # a busy process's eventfd can be; the thread then died and no future completed
        p = select.poll()
        p.register(fd, select.POLLIN)
        p.register(self.wake_r, select.POLLIN)
        logfd = lib.kvt_log_queue_fd(self.logq)
        p.register(logfd, select.POLLIN)
        while True:
            r = [f for f, _ in p.poll()]
            if logfd in r:
                self.drain_logs()
                if len(r) == 1:
                    continue
            if self.wake_r not in r:
                self.poll(0)
                if not self.closing:
                    continue
            # woken by a close: finish it here when it was asked for on this thread (a
            # completion callback, a finalizer), else whoever closes joins this thread
            if self._own_close():
                self._finish_close()
            return

    def log_loop(self):
        """With a manual poller, the library's log lines as they come: a caller that polls
        only while it has work (vLLM's scheduler) would otherwise see an idle engine's
        write-behind failures at its next request, with past 1,024 of them dropped (until
        2026-12-06). Completions stay the caller's: only the log queue is drained here."""
        p = select.poll()
        logfd, wake = lib.kvt_log_queue_fd(self.logq), self.log_wake_r
        p.register(logfd, select.POLLIN)
        p.register(wake, select.POLLIN)
        while True:
            r = [f for f, _ in p.poll()]
            if logfd in r:
                self.drain_logs()
            if wake in r:
                # a close asked for on this thread (a log function, a finalizer) was
                # deferred (it cannot join itself, and drain_logs held log_mu): it is
                # finished here, now that drain_logs returned
                if self.closing and self._own_close():
                    self._finish_close()
                return

    def _stop_log_thread(self) -> None:
        t = self.log_thread
        if t is None:
            return
        if t.ident != threading.get_ident():
            os.write(self.log_wake_w, b"x")
            t.join()
        self.log_thread = None
        os.close(self.log_wake_r)
        os.close(self.log_wake_w)
        self.log_wake_r = self.log_wake_w = -1

    def _own_close(self) -> bool:
        with self.state:
            if self.owner is not None or self.s is None:
                return False
            self.owner = threading.get_ident()
            return True

    def close(self) -> None:
        me = threading.get_ident()
        on_thread = self.thread is not None and self.thread.ident == me
        on_log = self.log_thread is not None and self.log_thread.ident == me
        deferred = on_thread or on_log or getattr(self.tls, "depth", 0) > 0
        with self.state:
            if self.owner == me or (self.owner is None and self.s is None):
                return  # closed (never opened), or a completion run by our own close
            self.closing = True
            mine = self.owner is None and not deferred
            if mine:
                self.owner = me
        if mine:
            if self.thread is not None:
                os.write(self.wake_w, b"x")
                self.thread.join()
            self._finish_close()
        elif deferred:
            # Called from a completion callback (inside kvt_poll, which still uses the
            # store) or on the poll thread, which cannot join itself: no operation is
            # accepted from now on, and the real close happens as soon as that kvt_poll
            # returns (in Store.poll, or in the poll thread's loop, woken here).
            if on_thread and self.wake_w >= 0:
                os.write(self.wake_w, b"c")
            if on_log and self.log_wake_w >= 0:
                os.write(self.log_wake_w, b"c")
        else:  # another thread is closing it: return once it is closed
            if self.thread is not None:
                self.thread.join()
            self.closed.wait()

    def _finish_close(self) -> None:
        try:
            self._wait_users()
            self._stop_log_thread()  # before the queue it drains is freed
            for h in list(self.rows):  # before the store: they wait for I/O in flight
                h.close()
            self.rows.clear()
            # the chain's names as it closes, for the completions its close runs (and
            # Store.tiers after it): they named no tier ("none") once s was gone
            self.names_at_close = [lib.kvt_store_tier_name(self.s, i).decode(errors="replace")
                                   for i in range(lib.kvt_store_tier_count(self.s))]
            s, self.s = self.s, None
            lib.kvt_store_close(s)  # runs the completions still queued, here
            self.free_logs()  # the lines of the close too
            for q in self.event_queues:  # no library thread can push into them now
                q._free()
            self.event_queues.clear()
            if self.wake_r >= 0:
                os.close(self.wake_r)
                os.close(self.wake_w)
                self.wake_r = self.wake_w = -1
        finally:
            self.closed.set()


@dataclass(frozen=True)
class Event:
    """One of the store's KV events: a chunk stored in, or removed from, tier (a chain
    position). key is its storage key (Store.storage_key)."""
    stored: bool
    tier: int
    key: bytes


class EventQueue:
    """A store's events, queued in C as they happen (the library's threads never wait for
    Python) and taken out by drain(). Made by Store.events()."""

    def __init__(self, capacity: int):
        q = lib.kvt_event_queue_new(capacity)
        if not q:
            raise ValueError(f"event queue capacity {capacity}: 1..16777216, and memory")
        self._q = q
        self._buf = (_lib.Event * 1024)()
        self._lock = threading.Lock()

    def drain(self, max_events: int = 1 << 20) -> tuple[list[Event], int]:
        """(the events queued, oldest first, up to max_events; how many were dropped
        since the last drain because the queue was full). lost > 0: some changes were
        not seen, so whatever follows the store must look at it again."""
        out: list[Event] = []
        lost_total = 0
        lost = ctypes.c_uint64()
        with self._lock:
            while self._q and len(out) < max_events:
                n = lib.kvt_event_queue_drain(self._q, self._buf,
                                              min(1024, max_events - len(out)),
                                              ctypes.byref(lost))
                lost_total += lost.value
                out += [Event(e.type == _lib.EVENT_STORED, e.tier, bytes(e.key.bytes))
                        for e in self._buf[:n]]
                if n < 1024:
                    break
        return out, lost_total

    def _free(self) -> None:
        with self._lock:
            q, self._q = self._q, None
        if q:
            lib.kvt_event_queue_free(q)


class Store:
    """An open kvtier store. config: a Config, or a dict of kvtier keys ("fs.dir": ...,
    or nested {"fs": {"dir": ...}}); config_file: an INI file applied first; env: apply
    KVTIER_* variables."""

    def __init__(self, config: Config | Mapping[str, Any] | None = None, *,
                 config_file: str | os.PathLike | None = None, env: bool = False,
                 poller: str = "thread",
                 log_fn: Callable[[int, str], None] | None = None, log_level: int = 2):
        if poller not in ("thread", "manual"):
            raise ValueError("poller must be 'thread' or 'manual'")
        cfg = config if isinstance(config, Config) else Config(
            config or {}, file=config_file, env=env)
        if isinstance(config, Config) and (config_file or env):
            raise ValueError("pass config_file/env when building the Config, not here")
        core = self._core = _Core(log_fn)
        lib.kvt_config_set_log(cfg._ptr, core.log_cb, core.logq, log_level)
        p = ctypes.c_void_p()
        rc = lib.kvt_store_open(cfg._ptr, ctypes.byref(p))
        # the store copied the log setting: the caller's Config must not keep pointing at
        # this store's queue, which is freed with the store
        lib.kvt_config_set_log(cfg._ptr, _lib.LOG_FN(), None, log_level)
        if rc < 0:
            core.free_logs()  # no store pushes into it
        else:
            core.drain_logs()
        errs, core.open_errors = core.open_errors, None
        # the reason is only in the library's log: it goes into the exception too, so the
        # caller (vLLM) shows why, not just "invalid argument"
        check(rc, "kvt_store_open", _open_reason(errs))
        core.s = p
        self._ids = itertools.count(1)
        self.tiers  # the chain at open: what tiers answers while a close runs
        g = lib.kvt_store_geometry(p).contents
        self.geometry = Geometry._from_c(g)
        self.ns_id = bytes(ctypes.string_at(lib.kvt_store_ns_id(p), _lib.NS_ID_BYTES))
        if poller == "thread":
            core.wake_r, core.wake_w = os.pipe()
            # the target is the core's, not this Store's: a running thread whose target
            # held the Store kept every dropped, unclosed Store (threads, fds, DRAM) alive
            core.thread = threading.Thread(target=core.poll_loop, name="kvtier-poll",
                                           daemon=True)
            core.thread.start()
        else:
            core.log_wake_r, core.log_wake_w = os.pipe()
            core.log_thread = threading.Thread(target=core.log_loop, name="kvtier-log",
                                               daemon=True)
            core.log_thread.start()

    @property
    def _s(self):
        """The C store (None once closed)."""
        core = getattr(self, "_core", None)
        return core.s if core is not None else None

    @property
    def _thread(self):
        return self._core.thread

    # ------------------------------------------------------------ completions
    def poll(self, timeout_ms: int = 0) -> int:
        """Run waiting completions on this thread (waits up to timeout_ms for the first;
        -1 forever). Returns how many ran. A completion callback may close the store: the
        close then happens when this call returns."""
        core = self._core
        core.enter()
        try:
            n = core.poll(timeout_ms)
            # a manual poller's lines arrive here too: counted as running on this thread,
            # as kvt_poll is, so that a log function's close() is deferred to the finally
            # below (until 2026-12-06 it ran here, under the log lock and this call's own
            # enter(), and waited for itself for ever - a review)
            tls = core.tls
            tls.depth = getattr(tls, "depth", 0) + 1
            try:
                core.drain_logs()
            finally:
                tls.depth -= 1
        finally:
            core.leave()  # first: a close below waits for every call to have left
            if core.closing and not getattr(core.tls, "depth", 0):
                core.close()  # asked for by a completion: now that kvt_poll returned
        return check(n, "kvt_poll")

    def fileno(self) -> int:
        """The eventfd that is readable while completions wait for poll()."""
        s = self._core.enter()
        try:
            return lib.kvt_store_fd(s)
        finally:
            self._core.leave()

    @property
    def pending(self) -> int:
        """Operations submitted and not yet completed."""
        return len(self._core.pending)

    @property
    def tiers(self) -> list[str]:
        """The tier chain's names, in order, as the library names them now: in client
        mode (store.daemon) a restarted kvtierd may bring another chain, which the C
        client follows (until 2026-12-05 this list was read once at open, and a lookup
        after such a restart raised IndexError)."""
        core = getattr(self, "_core", None)
        if core is None:
            return []
        # a call on the store like any other: close() waits for it (until 2026-12-06 it
        # read core.s unguarded, and a close on another thread could free the store under
        # kvt_store_tier_name)
        try:
            s = core.enter()
        except ValueError:  # closed, or closing: the chain as last read
            return list(core.names_at_close)
        try:
            names = (lib.kvt_store_tier_name(s, i) for i in range(lib.kvt_store_tier_count(s)))
            core.names_at_close = [n.decode(errors="replace") if n else "none" for n in names]
            return list(core.names_at_close)
        finally:
            core.leave()

    def _tier_name(self, i: int) -> str:
        """Chain position i's name now, "none" for a position the chain lacks (-1: no
        tier served it)."""
        core = self._core
        if core.s is None:  # closed, or closing (a completion its close runs)
            names = core.names_at_close
            return names[i] if 0 <= i < len(names) else "none"
        name = lib.kvt_store_tier_name(core.s, i) if i >= 0 else None
        return name.decode(errors="replace") if name else "none"

    def _check_open(self):
        core = getattr(self, "_core", None)
        if core is None or core.s is None or core.closing:
            raise ValueError("store is closed")

    def _submit(self, what: str, call: Callable[[ctypes.c_void_p, ctypes.c_void_p], int],
                finish: Callable, keep: Any) -> Future:
        """call(s, arg): the submitting C call on the store s."""
        core = self._core
        fut: Future = Future()
        # running from the start: the C call owns the buffers until its callback, so a
        # cancel() that made the future done (the buffer free to reuse) while the call
        # still wrote into it must fail (until 2026-12-05 it succeeded)
        fut.set_running_or_notify_cancel()
        op = next(self._ids)
        s = core.enter()
        rc = None
        try:
            with core.lock:
                core.pending[op] = (fut, finish, keep)
            rc = call(s, ctypes.c_void_p(op))
        finally:
            core.leave()
            if rc is None or rc < 0:  # refused, or the call raised (ctypes' argument check)
                with core.lock:
                    core.pending.pop(op, None)
        if rc < 0:
            raise error(rc, what)
        return fut

    # ------------------------------------------------------------- operations
    def payload_bytes(self, n_tokens: int | None = None) -> int:
        return self.geometry.payload_bytes(n_tokens)

    def put(self, key: bytes, data: Any, n_tokens: int | None = None,
            parent: bytes | None = None) -> Future:
        """Store one dense chunk (layer-major, K then V [tokens][heads][dim]). n_tokens
        defaults to a full chunk. The future's result is the bytes accepted. Leave data
        unchanged until the future is done: a store without a DRAM tier may write it from
        where it is (store.zero_copy_puts)."""
        n = self.geometry.chunk_tokens if n_tokens is None else _u32(n_tokens, "n_tokens")
        addr, length, keep = _buffer(data, writable=False)
        k = key_struct(key)
        par = key_struct(parent) if parent is not None else None
        keep = (keep, k, par)

        def finish(r):
            if r.status < 0:
                raise error(r.status, "put")
            return r.bytes

        return self._submit(
            "put", lambda s, a: lib.kvt_put(s, ctypes.byref(k),
                                            ctypes.byref(par) if par is not None else None,
                                            n, addr, length, self._core.cb, a), finish, keep)

    def get(self, key: bytes, out: Any = None, layers: tuple[int, int] | None = None,
            parent: bytes | None = None) -> Future:
        """Read a chunk (or layers [begin, end)) into out (a writable buffer large enough
        for them; default: a new bytearray sized for a full chunk). Result: GetResult.
        A miss completes with NotFound, a corrupt object with Corrupt. A NotFound's .cause
        is why no tier served the key (0 absent everywhere, errno.EBADMSG a copy was
        corrupt and dropped, errno.ETIMEDOUT a tier missed its deadline). parent, the
        chunk before this one in its prompt (as put's): a hit in a deeper tier promoted
        into DRAM is linked as its child, so a chain restored chunk by chunk is evicted
        from its end, not from its first chunk (kvt_get_linked)."""
        lb, le = layers if layers is not None else (0, 0)
        lb, le = _u32(lb, "layers"), _u32(le, "layers")
        if out is None:
            nl = (le or self.geometry.layers) - lb
            out = bytearray(max(nl, 0) * self.geometry.layer_bytes(self.geometry.chunk_tokens))
        addr, length, keep = _buffer(out, writable=True)
        k = key_struct(key)
        par = key_struct(parent) if parent is not None else None
        keep = (keep, k, par)

        def finish(r):
            if r.status < 0:
                e = error(r.status, f"get {bytes(key).hex()[:16]}",
                          _cause_text(r.cause))
                e.cause = -r.cause  # positive errno, 0 for a plain miss
                raise e
            return GetResult(out, r.n_tokens, self._tier_name(r.tier), r.tier, r.bytes)

        return self._submit(
            "get", lambda s, a: lib.kvt_get_linked(
                s, ctypes.byref(k), ctypes.byref(par) if par is not None else None, lb, le,
                addr, length, self._core.cb, a), finish, keep)

    def lookup(self, keys: Sequence[bytes]) -> Future:
        """Longest contiguous prefix of keys present in some tier. Result: LookupResult. A
        tier that cannot answer counts as lacking the keys; .cause says one did."""
        arr = key_array(keys)
        n = len(keys)
        tiers = (ctypes.c_int8 * max(n, 1))()

        def finish(r):
            if r.status < 0:
                raise error(r.status, "lookup")
            return LookupResult(r.status, [self._tier_name(tiers[i]) for i in range(r.status)],
                                -r.cause)

        return self._submit("lookup", lambda s, a: lib.kvt_lookup(s, arr, n, tiers,
                                                                  self._core.cb, a),
                            finish, (arr, tiers))

    def prefetch(self, keys: Sequence[bytes], deadline_s: float | None = None) -> Future:
        """Stage chunks into DRAM, stopping at the first miss; deadline_s (seconds from now)
        drops what has not started by then. Result: chunks resident in DRAM."""
        arr = key_array(keys)
        dl = 0 if deadline_s is None else time.monotonic_ns() + int(deadline_s * 1e9)

        def finish(r):
            if r.status < 0:
                raise error(r.status, "prefetch")
            return r.status

        return self._submit("prefetch", lambda s, a: lib.kvt_prefetch(s, arr, len(keys), dl,
                                                                      self._core.cb, a),
                            finish, arr)

    def remove(self, key: bytes) -> Future:
        """Remove a chunk from every tier. Result: how many tiers held it."""
        k = key_struct(key)

        def finish(r):
            if r.status < 0:
                raise error(r.status, "remove")
            return r.status

        return self._submit("remove", lambda s, a: lib.kvt_remove(s, ctypes.byref(k),
                                                                  self._core.cb, a), finish, k)

    def flush(self) -> Future:
        """Completes when every write-behind submitted before it has finished."""

        def finish(r):
            if r.status < 0:
                raise error(r.status, "flush")
            return r.status

        return self._submit("flush", lambda s, a: lib.kvt_flush(s, self._core.cb, a),
                            finish, None)

    def storage_key(self, key: bytes) -> bytes:
        """The name the tiers hold key under, as the store's events carry it."""
        k, out = key_struct(key), _lib.Key()
        lib.kvt_storage_key(self.ns_id, ctypes.byref(k), ctypes.byref(out))
        return bytes(out.bytes)

    def events(self, capacity: int = 65536) -> "EventQueue":
        """Follow what the store holds: its KV events (include/kvtier.h, "KV events") go
        into a bounded queue that EventQueue.drain() empties on the caller's thread. One
        per store (the store has one event callback); not in client mode (store.daemon:
        kvtierd publishes its store's events), where this raises KvtierError."""
        q = EventQueue(capacity)
        s = self._core.enter()
        try:
            rc = lib.kvt_store_set_events(
                s, ctypes.cast(lib.kvt_event_queue_push, ctypes.c_void_p), q._q)
            if rc == 0:
                self._core.event_queues.append(q)  # freed after the store closes
        finally:
            self._core.leave()
        if rc < 0:
            q._free()
        check(rc, "kvt_store_set_events")
        return q

    def stats(self) -> dict:
        """The store's counters: {"tiers": [{"name": ..., "objects": ..., ...}], "puts": ...}."""
        st = _lib.Stats()
        s = self._core.enter()
        try:
            rc = lib.kvt_stats(s, ctypes.byref(st))
        finally:
            self._core.leave()
        check(rc, "kvt_stats")
        tiers = []
        for i in range(st.n_tiers):
            t = st.tier[i]
            d = {f: getattr(t, f) for f, _ in _lib.TierStats._fields_ if f != "name"}
            d["name"] = t.name.decode()
            d["late_held_bytes"] = st.late_held_bytes[i]
            tiers.append(d)
        out = {f: getattr(st, f) for f, _ in _lib.Stats._fields_
               if f not in ("n_tiers", "tier", "late_held_bytes")}
        out["tiers"] = tiers
        return out

    # ---------------------------------------------------------------- closing
    def close(self) -> None:
        """Close the Rows handles still open on the store, finish write-behind, cancel
        what is queued (those futures fail with Canceled) and free the store. Safe from a
        future's callback: the store refuses new operations at once and is freed when the
        poll running that callback returns. Safe while other threads use the store: it is
        freed once their calls have returned (a poll() waiting is woken and returns 0);
        their calls after that raise ValueError."""
        core = getattr(self, "_core", None)
        if core is not None:
            core.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
