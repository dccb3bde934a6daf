"""The kvtier binding against a real store on a temporary directory (and a real
redis-server): put/get/lookup/prefetch/remove/flush futures, keys, stats, errors."""

from __future__ import annotations

import errno
import os
import signal
import time

import numpy as np
import pytest

import kvtier

GEO = dict(layers=2, kv_heads=2, head_dim=64, chunk_tokens=16)


def cfg(**extra):
    c = {"store.tiers": "dram,fs", "dram.bytes": "32MiB", "dram.hugepages": False,
         "model.name": "test-model", "model.layers": 2, "model.kv_heads": 2,
         "model.head_dim": 64, "model.chunk_tokens": 16}
    c.update(extra)
    return c


def chunk(store, seed):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, store.payload_bytes(), dtype=np.uint8)


def test_version_and_strerror():
    assert kvtier.version().startswith("0.1.0")
    assert "not found" in kvtier.strerror(errno.ENOENT) or kvtier.strerror(errno.ENOENT)
    assert kvtier.strerror(-errno.EBADMSG) == kvtier.strerror(errno.EBADMSG)


def test_struct_mirrors_match_the_library():
    """Every ctypes mirror has the C structure's size (a header field added without its
    mirror let kvt_stats write past the buffer and abort the process), and a mismatch
    fails the import with one line instead."""
    import ctypes

    from kvtier import _lib
    sizeof = _lib.lib.kvt_abi_sizeof
    for cname, mirror in _lib.MIRRORED.items():
        assert sizeof(cname.encode()) == ctypes.sizeof(mirror) > 0, cname
    assert sizeof(b"kvt_no_such_struct") == 0

    class Short(ctypes.Structure):
        _fields_ = [("n_tiers", ctypes.c_uint32)]
    old = _lib.MIRRORED["kvt_stats"]
    _lib.MIRRORED["kvt_stats"] = Short
    try:
        with pytest.raises(ImportError, match="struct kvt_stats of .* declares 4"):
            _lib.check_abi(_lib.lib)
    finally:
        _lib.MIRRORED["kvt_stats"] = old


def test_struct_mirrors_match_field_by_field(tdir):
    """Every field of every ctypes mirror sits at the C field's offset with its size:
    equal sizes alone let two fields swapped or retyped in the header (or here) pass the
    load-time check and be read as each other. The offsets come from the C compiler on
    include/kvtier.h, the same header the library was built from."""
    import ctypes
    import shutil
    import subprocess

    from kvtier import _lib
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "a C compiler is needed to read the header's offsets"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "kvtier.h"',
             '#include "kvtier_layout.h"', "int main(void) {"]
    want = {}
    for cname, mirror in _lib.MIRRORED.items():
        for fname, _ in mirror._fields_:
            f = getattr(mirror, fname)
            want[f"{cname}.{fname}"] = (f.offset, f.size)
            lines.append(f'printf("{cname}.{fname} %zu %zu\\n", offsetof(struct {cname}, '
                         f'{fname}), sizeof(((struct {cname} *)0)->{fname}));')
    lines.append("return 0; }")
    src, exe = os.path.join(tdir, "offsets.c"), os.path.join(tdir, "offsets")
    with open(src, "w") as f:
        f.write("\n".join(lines) + "\n")
    subprocess.run([cc, "-std=c11", "-I", os.path.join(root, "include"), src, "-o", exe],
                   check=True, capture_output=True)
    got = {}
    for line in subprocess.run([exe], check=True, capture_output=True,
                               text=True).stdout.splitlines():
        name, off, size = line.split()
        got[name] = (int(off), int(size))
    assert len(want) > 60
    bad = {n: (want[n], got.get(n)) for n in want if want[n] != got.get(n)}
    assert not bad, f"mirror (offset, size) vs C: {bad}"


def test_stats_pool_counters(tdir):
    with kvtier.Store(cfg(**{"fs.dir": tdir})) as s:
        st = s.stats()
        assert st["tiers"][0]["pool_bytes"] == 0 and "pool_pending_bytes" in st["tiers"][0]
        # the last field of the C struct: a binding that mirrors it short would lose it
        assert st["tiers"][0]["deadline_extensions"] == 0
        # what late calls hold, per tier, and the bound on it (half the DRAM pool here)
        assert [t["late_held_bytes"] for t in st["tiers"]] == [0] * len(st["tiers"])
        assert st["late_held_cap_bytes"] > 0


def test_keys_match_format_spec():
    g = kvtier.Geometry(**GEO)
    ns = kvtier.namespace_id("m", g, revision="r", tenant="t")
    text = kvtier.namespace_text("m", g, revision="r", tenant="t")
    import hashlib
    assert hashlib.sha256(text.encode()).digest() == ns
    assert text.splitlines()[0] == "kvtier-ns-v1" and "tenant=t" in text
    tokens = list(range(40))
    keys = kvtier.keys_from_tokens(ns, 16, tokens)
    assert len(keys) == 3
    # FORMAT.md section 2, computed independently here
    prev = bytes(32)
    for i, k in enumerate(keys):
        part = tokens[i * 16:(i + 1) * 16]
        want = hashlib.sha256(b"kvtier-chunk-v1" + ns + prev +
                              b"".join(t.to_bytes(4, "little") for t in part)).digest()
        assert k == want
        assert kvtier.key_next(ns, None if i == 0 else keys[i - 1], part) == k
        prev = k
    # a different tenant gives different keys
    ns2 = kvtier.namespace_id("m", g, revision="r", tenant="u")
    assert kvtier.keys_from_tokens(ns2, 16, tokens)[0] != keys[0]


def test_bad_input_raises_with_library_text(tdir):
    with pytest.raises(kvtier.NotFound) as e:
        kvtier.Config({"no.such_key": 1})
    assert "no.such_key" in str(e.value)
    with pytest.raises(kvtier.InvalidArgument) as e:
        kvtier.Config({"dram.bytes": "lots"})
    assert "dram.bytes" in str(e.value)
    with pytest.raises(ValueError):
        kvtier.Geometry(2, 2, 64, 16, dtype="int4").check()
    with pytest.raises(kvtier.InvalidArgument):
        kvtier.Geometry(0, 2, 64, 16).check()
    with pytest.raises(ValueError):
        kvtier.keys_from_tokens(b"short", 16, [1, 2])
    with pytest.raises(ValueError):
        kvtier.keys_from_tokens(bytes(32), 16, [-1])
    bad = os.path.join(tdir, "bad.ini")
    with open(bad, "w") as f:
        f.write("[dram]\nbytes = 1GiB\nnonsense\n")
    with pytest.raises(kvtier.KvtierError) as e:
        kvtier.Config(file=bad)
    assert "bad.ini" in str(e.value)
    # the library's reason quotes the value: bytes that are not UTF-8 (a file's), or a
    # value cut inside a character, raised UnicodeDecodeError instead of its error
    with open(bad, "wb") as f:
        f.write(b"[dram]\nbytes = \xff\n")
    with pytest.raises(kvtier.InvalidArgument) as e:
        kvtier.Config(file=bad)
    assert "dram.bytes" in str(e.value) or "bytes" in str(e.value)
    for key in ("model.dtype", "cost.mfu"):
        with pytest.raises(kvtier.KvtierError) as e:
            kvtier.Config({key: "a" + "\u00e9" * 40})
        assert key in str(e.value)
    with kvtier.Store(cfg(**{"fs.dir": tdir})) as s:
        with pytest.raises(kvtier.InvalidArgument):  # wrong length: refused at submit
            s.put(bytes(32), b"x" * 10)
        with pytest.raises(ValueError):
            s.put(b"short", bytes(s.payload_bytes()))


def test_put_get_lookup_remove_roundtrip(tdir):
    with kvtier.Store(cfg(**{"fs.dir": tdir})) as s:
        assert s.tiers == ["dram", "fs"]
        assert s.geometry == kvtier.Geometry(**GEO)
        keys = kvtier.keys_from_tokens(s.ns_id, 16, list(range(64)))
        data = [chunk(s, i) for i in range(4)]
        futs = [s.put(k, d, parent=keys[i - 1] if i else None)
                for i, (k, d) in enumerate(zip(keys, data))]
        assert [f.result(10) for f in futs] == [s.payload_bytes()] * 4
        s.flush().result(10)
        lr = s.lookup(keys).result(10)
        assert lr.hits == 4 and lr.tiers == ["dram"] * 4
        out = np.zeros(s.payload_bytes(), dtype=np.uint8)
        r = s.get(keys[2], out=out).result(10)
        assert r.tier == "dram" and r.n_tokens == 16 and np.array_equal(out, data[2])
        # one layer only
        r = s.get(keys[1], layers=(1, 2)).result(10)
        half = s.payload_bytes() // 2
        assert bytes(r.data) == data[1][half:].tobytes()
        assert s.remove(keys[3]).result(10) == 2  # dram and fs held it
        assert s.lookup(keys).result(10).hits == 3
        with pytest.raises(kvtier.NotFound):
            s.get(keys[3]).result(10)
        st = s.stats()
        assert st["puts"] == 4 and st["tiers"][1]["name"] == "fs"
        assert st["tiers"][1]["writes"] >= 4
    # A fresh store on the same directory finds the chunks in fs, and a get promotes.
    with kvtier.Store(cfg(**{"fs.dir": tdir})) as s:
        lr = s.lookup(keys).result(10)
        assert lr.hits == 3 and lr.tiers == ["fs"] * 3
        assert s.prefetch(keys[:3], deadline_s=10).result(10) == 3
        assert s.lookup(keys[:1]).result(10).tiers == ["dram"]
        r = s.get(keys[0]).result(10)
        assert bytes(r.data) == data[0].tobytes()


def test_manual_poller_and_eventfd(tdir):
    import select
    s = kvtier.Store(cfg(**{"fs.dir": tdir}), poller="manual")
    try:
        k = kvtier.keys_from_tokens(s.ns_id, 16, list(range(16)))[0]
        f = s.put(k, chunk(s, 9))
        assert not f.done()  # nothing runs until poll()
        r, _, _ = select.select([s.fileno()], [], [], 5)
        assert r, "eventfd did not become readable"
        deadline = time.monotonic() + 5
        while not f.done() and time.monotonic() < deadline:
            s.poll(100)
        assert f.result(0) == s.payload_bytes()
        assert s.pending == 0
    finally:
        s.close()


def test_corrupt_object_is_a_miss_not_bad_bytes(tdir):
    with kvtier.Store(cfg(**{"store.tiers": "fs", "fs.dir": tdir})) as s:
        k = kvtier.keys_from_tokens(s.ns_id, 16, list(range(16)))[0]
        s.put(k, chunk(s, 1)).result(10)
        s.flush().result(10)
    # the one object file (its name is the tier's storage key, derived from k)
    paths = [os.path.join(dp, f) for dp, _, fs in os.walk(tdir) for f in fs
             if len(f) == 64 and not f.startswith(".")]
    assert len(paths) == 1, paths
    with open(paths[0], "r+b") as f:
        f.seek(4096 + 100)
        b = f.read(1)
        f.seek(4096 + 100)
        f.write(bytes([b[0] ^ 0xFF]))
    logs = []
    with kvtier.Store(cfg(**{"store.tiers": "fs", "fs.dir": tdir}),
                      log_fn=lambda lvl, msg: logs.append(msg)) as s:
        with pytest.raises(kvtier.NotFound) as e:
            s.get(k).result(10)
        # a miss (no tier holds a sound copy) that says why: the fs copy was corrupt
        assert e.value.cause == errno.EBADMSG, e.value
        assert "corrupt" in str(e.value) or "checksum" in str(e.value).lower(), e.value
        assert any("corrupt" in m for m in logs), logs
        s.flush().result(10)
    # dropped from the tier, never served again (the fs tier's stats do not count it:
    # its checksum_failures stays 0, a library bug reported separately)
    assert not os.path.exists(paths[0])


def test_redis_tier_and_stopped_server(tdir, redis_server):
    c = cfg(**{"store.tiers": "dram,redis", "redis.url": redis_server.url,
               # the engine's deadline (500 ms), not the client's own timeout, bounds calls
               "redis.timeout_ms": 5000, "store.tier_timeout_ms": 500})
    with kvtier.Store(c) as s:
        keys = kvtier.keys_from_tokens(s.ns_id, 16, list(range(32)))
        d = chunk(s, 3)
        s.put(keys[0], d).result(10)
        s.flush().result(10)
    with kvtier.Store(c) as s:
        assert s.lookup(keys).result(10).tiers == ["redis"]
        assert bytes(s.get(keys[0]).result(10).data) == d.tobytes()
        # A stopped server: the answer is a miss within the deadline, never a hang.
        os.kill(redis_server.proc.pid, signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            assert s.lookup([keys[1]]).result(10).hits == 0
            assert time.monotonic() - t0 < 3
            # counted where an engine can alert on it
            assert s.stats()["tiers"][1]["deadline_misses"] >= 1
            assert s.stats()["tiers"][0]["deadline_misses"] == 0
        finally:
            os.kill(redis_server.proc.pid, signal.SIGCONT)


def test_close_completes_every_future(tdir):
    s = kvtier.Store(cfg(**{"fs.dir": tdir}))
    k = kvtier.keys_from_tokens(s.ns_id, 16, list(range(16)))[0]
    data = chunk(s, 5)
    f = s.put(k, data)
    s.close()
    assert f.done()  # completed (or canceled) by close, never left pending
    s.close()  # idempotent
    with pytest.raises(ValueError):
        s.put(k, data)


def _track_poll_and_close(monkeypatch):
    """Wrap kvt_poll and kvt_store_close: a list that gets an entry whenever the store is
    freed while a kvt_poll (which keeps using it) is still running on some thread."""
    from kvtier import store as store_mod
    lib = store_mod.lib
    real_poll, real_close = lib.kvt_poll, lib.kvt_store_close
    inside, bad = [0], []

    def poll(s, timeout_ms):
        inside[0] += 1
        try:
            return real_poll(s, timeout_ms)
        finally:
            inside[0] -= 1

    def close(s):
        if inside[0]:
            bad.append("kvt_store_close inside kvt_poll")
        return real_close(s)

    monkeypatch.setattr(lib, "kvt_poll", poll)
    monkeypatch.setattr(lib, "kvt_store_close", close)
    return bad


def test_close_from_a_callback_manual_poller(tdir, monkeypatch):
    """A future's callback that closes the store runs inside poll(), i.e. inside kvt_poll:
    the store must not be freed under it (use after free). It refuses new operations at
    once and is freed when poll returns; the other completions still run."""
    bad = _track_poll_and_close(monkeypatch)
    s = kvtier.Store(cfg(**{"fs.dir": tdir}), poller="manual")
    keys = kvtier.keys_from_tokens(s.ns_id, 16, list(range(32)))
    data = chunk(s, 1)
    seen = []

    def cb(_f):
        s.close()
        with pytest.raises(ValueError, match="closed"):
            s.put(keys[1], data)
        seen.append(True)

    f1, f2 = s.put(keys[0], data), s.put(keys[1], data)
    f1.add_done_callback(cb)
    deadline = time.monotonic() + 10
    while not (f1.done() and f2.done()) and time.monotonic() < deadline:
        s.poll(100)
        if s._s is None:
            break
    assert seen == [True]
    assert not bad, bad
    assert s._s is None and f2.done()  # closed once poll returned; nothing left pending
    with pytest.raises(ValueError, match="closed"):
        s.poll(0)
    s.close()  # idempotent


def test_close_from_a_callback_thread_poller(tdir, monkeypatch):
    """The same on the poll thread: the close cannot join that thread, so it happens there
    once kvt_poll returns; the store ends closed (not open with a dead poll thread) and
    later operations fail at once instead of never completing."""
    bad = _track_poll_and_close(monkeypatch)
    s = kvtier.Store(cfg(**{"fs.dir": tdir}))
    k = kvtier.keys_from_tokens(s.ns_id, 16, list(range(16)))[0]
    errors = []

    def cb(_f):
        try:
            s.close()
        except BaseException as e:  # a failed close is the bug: keep it for the assert
            errors.append(e)

    f = s.put(k, chunk(s, 2))
    f.add_done_callback(cb)
    f.result(10)
    deadline = time.monotonic() + 10
    while s._s is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not errors, errors
    assert s._s is None, "the store stayed open"
    assert not bad, bad
    s._thread.join(5)
    assert not s._thread.is_alive()
    with pytest.raises(ValueError, match="closed"):
        s.get(k)
    s.close()


@pytest.mark.parametrize("op", ["poll", "put", "get", "flush", "stats", "fileno"])
def test_close_from_another_thread_waits_for_calls_on_the_store(tdir, monkeypatch, op):
    """close() on one thread while another is inside a C call on the store (a manual
    poller blocked in kvt_poll, or a submit/stats caught mid-call): the store must not be
    freed under that call (use after free). A blocked poll is woken and returns, the
    other calls finish, and only then is the store freed; later calls raise ValueError."""
    from free_race import FreeRace
    from kvtier import store as store_mod
    race = FreeRace(monkeypatch, store_mod.lib,
                    ["kvt_poll", "kvt_put", "kvt_get_linked", "kvt_flush", "kvt_stats", "kvt_store_fd"],
                    "kvt_store_close", no_hold=("kvt_poll",))  # a real poll blocks by itself
    s = kvtier.Store(cfg(**{"fs.dir": tdir}), poller="manual")
    k = kvtier.keys_from_tokens(s.ns_id, 16, list(range(16)))[0]
    data = chunk(s, 4)
    calls = {"poll": lambda: s.poll(-1), "put": lambda: s.put(k, data),
             "get": lambda: s.get(k), "flush": s.flush, "stats": s.stats,
             "fileno": s.fileno}
    out = race.run(calls[op], s.close, settle=0.05)  # settle: the poll is in its wait
    if op in ("put", "get", "flush"):
        assert out.done()  # completed (or canceled) by the close
    assert s._s is None
    with pytest.raises(ValueError, match="closed"):
        calls[op]()


def test_tiers_while_another_thread_closes(tdir, monkeypatch):
    """Store.tiers on one thread while another closes the store: the store is freed only
    after the call on it returns (until 2026-12-06 tiers called into C on the store without
    counting as a user, and kvt_store_close could land inside kvt_store_tier_name)."""
    from free_race import FreeRace
    from kvtier import store as store_mod
    race = FreeRace(monkeypatch, store_mod.lib, ["kvt_store_tier_count", "kvt_store_tier_name"],
                    "kvt_store_close")
    s = kvtier.Store(cfg(**{"fs.dir": tdir}), poller="manual")
    names = s.tiers
    assert race.run(lambda: s.tiers, s.close) == names
    assert s._s is None
    assert s.tiers == names  # the chain as it closed


def test_manual_poller_delivers_log_lines_without_a_poll(tdir):
    """With poller="manual", a line the library logs on its own threads (a stalled tier's
    missed deadline, logged by the service thread) reaches the log function while the owner
    does not poll: an idle vLLM scheduler polls nothing, and until 2026-12-06 such lines
    waited for its next request (past 1,024 of them, dropped)."""
    import threading
    lines = []
    s = kvtier.Store(cfg(**{"store.tiers": "dram,faulty", "faulty.inner": "fs",
                            "fs.dir": tdir, "faulty.delay_ms": "3000",
                            "store.tier_timeout_ms": "100", "store.deadline_floor_ms": "100"}),
                     poller="manual", log_fn=lambda lvl, msg: lines.append(msg))
    try:
        k = kvtier.keys_from_tokens(s.ns_id, 16, list(range(16)))[0]
        s.lookup([k])  # a DRAM miss, then the stalled tier: its deadline passes at 100 ms
        t0 = time.monotonic()
        while not any("missed its deadline" in m for m in lines) and \
                time.monotonic() - t0 < 5:
            time.sleep(0.05)
        assert any("missed its deadline" in m for m in lines), lines
        assert any(t.name == "kvtier-log" for t in threading.enumerate())
    finally:
        s.close()
    assert not any(t.name == "kvtier-log" for t in threading.enumerate())


def test_a_log_function_may_close_a_manual_store(tdir):
    """A log function that closes the store, run on the manual poller's log thread: the
    close is finished there once the line is delivered (it held the log lock, and a close
    there deadlocked on it, or left the thread spinning on closed descriptors)."""
    import threading
    box = {}

    def log_fn(level, msg):
        if "missed its deadline" in msg and "s" in box:
            box["s"].close()
            box["closed_on"] = threading.current_thread().name

    s = box["s"] = kvtier.Store(cfg(**{"store.tiers": "dram,faulty", "faulty.inner": "fs",
                                       "fs.dir": tdir, "faulty.delay_ms": "3000",
                                       "store.tier_timeout_ms": "100",
                                       "store.deadline_floor_ms": "100"}),
                                poller="manual", log_fn=log_fn)
    names = s.tiers
    k = kvtier.keys_from_tokens(s.ns_id, 16, list(range(16)))[0]
    s.lookup([k])
    t0 = time.monotonic()
    while s._s is not None and time.monotonic() - t0 < 10:
        time.sleep(0.05)
    assert s._s is None, "the close asked for by the log function never finished"
    assert box["closed_on"] == "kvtier-log"
    assert s.tiers == names
    t0 = time.monotonic()
    while any(t.name == "kvtier-log" for t in threading.enumerate()) and \
            time.monotonic() - t0 < 5:
        time.sleep(0.05)
    assert not any(t.name == "kvtier-log" for t in threading.enumerate())


def test_dropped_store_is_collected(tdir):
    """An unclosed Store that is dropped is collected and closed by __del__: its poll
    thread does not keep it alive (that leaked a thread, fds and the DRAM pool each)."""
    import gc
    import weakref
    s = kvtier.Store(cfg(**{"fs.dir": tdir}))
    k = kvtier.keys_from_tokens(s.ns_id, 16, list(range(16)))[0]
    s.put(k, chunk(s, 3)).result(10)
    ref, thread = weakref.ref(s), s._thread
    del s
    gc.collect()
    assert ref() is None, "a dropped Store was never collected"
    assert not thread.is_alive()  # its poll thread ended (close joined it)
    # and its write-behind was finished by that close
    with kvtier.Store(cfg(**{"store.tiers": "fs", "fs.dir": tdir})) as s2:
        assert s2.lookup([k]).result(10).hits == 1


def test_poll_thread_serves_an_eventfd_above_1024(tdir):
    """The poll thread waited with select(), which refuses a descriptor >= FD_SETSIZE
    (1024): in a process with many files open it died at once and no future completed."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert hard >= 2048, "this test needs 1100 descriptors"
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        with kvtier.Store(cfg(**{"fs.dir": tdir})) as s:
            assert s.fileno() >= 1024
            k = kvtier.keys_from_tokens(s.ns_id, 16, list(range(16)))[0]
            assert s.put(k, chunk(s, 4)).result(10) == s.payload_bytes()  # TimeoutError
            assert s._thread.is_alive()
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_nul_in_a_namespace_or_config_value_is_refused():
    """A C string ends at a NUL byte: tenant "alice\\0bob" named tenant "alice"'s namespace
    (and any config value was silently cut). Refused with a ValueError naming the field."""
    g = kvtier.Geometry(**GEO)
    for field in ("model", "revision", "tenant"):
        args = {"model": "m", "revision": "", "tenant": "", field: "alice\x00bob"}
        with pytest.raises(ValueError, match=f"{field} contains a NUL byte"):
            kvtier.namespace_id(args.pop("model"), g, **args)
    with pytest.raises(ValueError, match="tenant may not contain control characters"):
        kvtier.namespace_text("m", g, tenant="a\nb")
    for key in ("model.tenant", "model.name", "model.revision", "redis.url"):
        with pytest.raises(ValueError, match=f"config key {key}.*NUL byte"):
            kvtier.Config({key: "alice\x00bob"})
    c = kvtier.Config({"model.tenant": "alice"})
    with pytest.raises(ValueError, match="NUL byte"):
        c.set("model.tenant", "alice\x00bob")
    assert c.get("model.tenant") == "alice"


def test_store_open_failure_says_why_in_one_line_without_secrets(tdir):
    """A failed open raised only "kvt_store_open: invalid argument"; the reason went to the
    log alone. It is in the exception now, on one line, with no password in it."""
    with pytest.raises(kvtier.InvalidArgument) as e:
        kvtier.Store(cfg(**{"store.tiers": "dram,redis",
                            "redis.url": "redis://:PWSECRET1@127.0.0.1:notaport"}))
    msg = str(e.value)
    assert "redis.url is not" in msg and "\n" not in msg, msg
    assert "PWSECRET1" not in msg
    with pytest.raises(kvtier.KvtierError) as e:
        kvtier.Store(cfg(**{"store.daemon": os.path.join(tdir, "no.sock")}))
    assert "no.sock: cannot attach" in str(e.value), str(e.value)
    # a secret in a URL the library's line would carry is hidden here too
    from kvtier.store import _open_reason
    line = _open_reason(["s3: http://user:S3CRET@x@host:9000 unreachable\n(again)"])
    assert line == "s3: http://user:***@host:9000 unreachable (again)"


def test_a_call_in_flight_cannot_be_cancelled(tdir):
    """A future's cancel() succeeded while its C call still owned the buffer: the future was
    done (the buffer free to reuse, by the docstrings' promise) and the get wrote into it
    afterwards. Futures are running from submission now: cancel() is refused and the
    result arrives."""
    c = cfg(**{"store.tiers": "faulty", "faulty.inner": "fs", "fs.dir": tdir,
               "faulty.delay_ms": 300})
    with kvtier.Store(c) as s:
        k = kvtier.keys_from_tokens(s.ns_id, 16, list(range(16)))[0]
        s.put(k, chunk(s, 1)).result(10)
        buf = bytearray(s.payload_bytes())
        g = s.get(k, buf)
        assert g.cancel() is False and not g.done()  # was: True, done, written later
        assert g.result(10).n_tokens == 16
        assert bytes(buf) == chunk(s, 1).tobytes()


def test_integer_arguments_are_checked_not_masked(tdir):
    """ctypes masks an int to a uint32_t without a word (2**32 + 16 tokens went in as 16)
    and raises ArgumentError for a float after the op was registered, which then stayed
    pending until close."""
    with kvtier.Store(cfg(**{"fs.dir": tdir})) as s:
        k = kvtier.keys_from_tokens(s.ns_id, 16, list(range(16)))[0]
        for bad in (2**32 + 16, 16.0, "16", -1):
            with pytest.raises(ValueError):
                s.put(k, chunk(s, 1), n_tokens=bad)
        with pytest.raises(ValueError):
            s.get(k, layers=(0, 2**32 + 1))
        assert s.pending == 0
        # numpy's integers are integers (ctypes took them, and so does the check)
        assert s.put(k, chunk(s, 1), n_tokens=np.int64(16)).result(10) > 0
        assert s.get(k, layers=(np.int64(0), np.uint32(2))).result(10).n_tokens == 16


def test_a_log_function_may_close_the_store_from_poll(tdir, monkeypatch):
    """A log line delivered by Store.poll() (it drains the log queue too) whose log function
    closes the store: the close is finished when poll() returns. It used to run inside
    poll(), under the log lock and poll's own use of the store, and wait for itself for
    ever. The kvtier-log thread is kept from draining, so that poll() delivers the line."""
    import select
    import threading
    monkeypatch.setattr(kvtier.store._Core, "log_loop",
                        lambda self: select.select([self.log_wake_r], [], []))
    box = {}

    def log_fn(level, msg):
        if "missed its deadline" in msg and "s" in box:
            box["s"].close()
            box["closed"] = True

    s = box["s"] = kvtier.Store(cfg(**{"store.tiers": "dram,faulty", "faulty.inner": "fs",
                                       "fs.dir": tdir, "faulty.delay_ms": "3000",
                                       "store.tier_timeout_ms": "100",
                                       "store.deadline_floor_ms": "100"}),
                                poller="manual", log_fn=log_fn)
    s.lookup([kvtier.keys_from_tokens(s.ns_id, 16, list(range(16)))[0]])
    time.sleep(0.5)  # the deadline's line is queued
    t = threading.Thread(target=lambda: s.poll(0), daemon=True)
    t.start()
    t.join(10)
    assert not t.is_alive(), "a close from a log function inside Store.poll() hung"
    assert box.get("closed")
    assert s._s is None


@pytest.mark.parametrize("tok", [-1, 2**32 + 5, 1.5])
def test_token_ids_out_of_range_are_refused_by_both_key_functions(tok):
    """ctypes stores into a c_uint32 array without a range check: key_next took 2**32 + 5
    as 5 (and -1 as 0xFFFFFFFF), another prompt's key, where keys_from_tokens refused it."""
    ns = bytes(32)
    with pytest.raises(ValueError):
        kvtier.key_next(ns, None, [tok])
    with pytest.raises(ValueError):
        kvtier.keys_from_tokens(ns, 16, [tok])
    assert kvtier.key_next(ns, None, [5]) != kvtier.key_next(ns, None, [0xFFFFFFFF])


def test_results_completed_by_close_name_their_tier(tdir):
    """Store.close() runs the completions still queued; their tier was named "none" once
    the C store was gone (and Store.tiers was empty after close)."""
    s = kvtier.Store(cfg(**{"fs.dir": tdir}), poller="manual")
    k = kvtier.keys_from_tokens(s.ns_id, 16, list(range(16)))[0]
    f = s.put(k, chunk(s, 2))
    while not f.done():
        s.poll(100)
    g = s.get(k)
    s.close()
    assert g.result(10).tier == "dram"
    assert s.tiers == ["dram", "fs"]


def test_tier_names_follow_a_restarted_daemon(tdir, kvtierd):
    """Store.tiers was read once at open; the C client follows a kvtierd restarted with
    another tier chain, and a lookup then indexed the stale list (IndexError) and a get
    named the wrong tier. Names are the library's at each result now."""
    geo = {"model.name": "test-model", "model.layers": 2, "model.kv_heads": 2,
           "model.head_dim": 64, "model.chunk_tokens": 16}
    d = kvtierd({**geo, "store.tiers": "nvme"})
    s = kvtier.Store({**geo, "store.daemon": d.sock, "store.daemon_timeout_ms": 2000})
    try:
        assert s.tiers == ["nvme"]
        k = kvtier.keys_from_tokens(s.ns_id, 16, list(range(16)))[0]
        s.put(k, chunk(s, 3)).result(10)
        s.flush().result(10)
        d.stop()
        kvtierd({**geo, "store.tiers": "dram,nvme"})
        for _ in range(50):  # the first calls may meet the reconnect's backoff
            try:
                lr = s.lookup([k]).result(10)
                if lr.hits == 1:
                    break
            except kvtier.KvtierError:
                pass
            time.sleep(0.1)
        assert s.tiers == ["dram", "nvme"]
        assert lr.hits == 1 and lr.tiers[0] in s.tiers
        assert s.get(k).result(10).tier in s.tiers
    finally:
        s.close()


def test_daemon_helper_waits_for_a_daemon_that_listens(tdir):
    """kvtier.daemon.Kvtierd returned once the socket file existed: one a killed daemon
    left behind made it return at once, before the new daemon listened, and even when it
    failed to start. It waits for a connection now, and a daemon that exits raises."""
    import socket
    from conftest import _kvtierd_exe
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    stale.bind(os.path.join(tdir, "kvtierd.sock"))  # what a SIGKILLed daemon leaves
    stale.close()
    with pytest.raises(RuntimeError, match="exited at start"):
        kvtier.daemon.Kvtierd(_kvtierd_exe(), tdir, {"no.such_key": "1"}, start_timeout=10)


def test_a_busy_interpreter_does_not_delay_a_stalled_tiers_deadlines(tdir):
    """The library called the Python log function on its own threads, where it waited for
    the GIL; the service thread logs each missed deadline before it answers the call, so
    while an engine's thread held the GIL (its step loop, in C) a stalled tier's calls were
    not answered at their deadline but when the GIL came free, and the service thread's
    other work waited too. Lines now go through a C queue this side drains. Here the test's
    own thread holds the GIL while it waits in kvt_poll (a PyDLL call keeps the GIL) for the
    answers to 16 lookups on a tier that answers after 5 s, at a 100 ms deadline: they
    arrive at the deadline (before: none in 1.5 s - the service thread waited for us)."""
    import ctypes
    from kvtier import _lib
    c = cfg(**{"store.tiers": "faulty", "faulty.inner": "fs", "fs.dir": tdir,
               "faulty.delay_ms": 5000, "store.tier_timeout_ms": 100})
    lines = []
    s = kvtier.Store(c, poller="manual", log_fn=lambda lv, t: lines.append((lv, t)))
    try:
        keys = kvtier.keys_from_tokens(s.ns_id, 16, list(range(16 * 16)))
        holding = ctypes.PyDLL(_lib.lib._name)
        holding.kvt_poll.argtypes = [ctypes.c_void_p, ctypes.c_int]
        futs = [s.lookup([k]) for k in keys]
        t0 = time.monotonic()
        n = 0
        while n < len(futs) and time.monotonic() - t0 < 1.5:
            n += holding.kvt_poll(s._s, 1500)  # runs the completions, GIL held throughout
        took = time.monotonic() - t0
        assert n == len(futs), f"{n} of {len(futs)} answered in {took:.2f} s"
        assert took < 1.0, took
        assert all(f.result().hits == 0 for f in futs)
        s.poll(0)  # the lines still arrive (a manual poller's at its poll), as warnings
        assert any("missed its deadline" in t for lv, t in lines if lv == 1), lines
    finally:
        s.close()


@pytest.mark.parametrize("linked", [True, False])
def test_get_with_parent_evicts_a_restored_chain_from_its_end(tdir, linked):
    """get(key, parent=...) (kvt_get_linked): a chain restored chunk by chunk from fs is
    linked in DRAM as a put links it, so DRAM (LRU) evicts it from its end and a lookup
    still finds its start in DRAM. get without a parent is the contrast: its promotions
    are not linked, and LRU takes the chain's first chunk first."""
    c = cfg(**{"fs.dir": tdir, "dram.bytes": "256KiB", "dram.policy": "lru",
               "store.write_policy": "write-through"})
    with kvtier.Store(c) as s:
        data = chunk(s, 1)

        def put(k, parent=None):  # a slot still held by its fs write: told to retry
            for _ in range(1000):
                try:
                    return s.put(k, data, parent=parent).result(10)
                except kvtier.Busy:
                    time.sleep(0.005)
            raise AssertionError("put refused for 5 s")
        # DRAM's slots, counted: it holds that many after more puts than it can hold
        filler = kvtier.keys_from_tokens(s.ns_id, 16, list(range(1000, 1000 + 16 * 64)))
        for k in filler:
            put(k)
        s.flush().result(10)
        slots = s.stats()["tiers"][0]["objects"]
        assert 3 < slots < 40, slots
        a = kvtier.keys_from_tokens(s.ns_id, 16, list(range(48)))
        for i, k in enumerate(a):
            put(k, a[i - 1] if i else None)
        s.flush().result(10)
        others = kvtier.keys_from_tokens(s.ns_id, 16, list(range(5000, 5000 + 16 * 2 * slots)))
        for k in others[:slots]:  # push A out of DRAM: it stays in fs
            put(k)
        s.flush().result(10)
        assert s.lookup(a).result(10).tiers == ["fs"] * 3
        for i, k in enumerate(a):  # restored chunk by chunk, each promoted into DRAM
            r = s.get(k, parent=(a[i - 1] if i else None) if linked else None).result(10)
            assert r.tier == "fs" and bytes(r.data) == data.tobytes()
        # slots - 3 puts fill DRAM's free slots' worth of older chunks, then one more
        # evicts one of A's: its last when linked, its first when not
        for k in others[slots:2 * slots - 2]:
            put(k)
        s.flush().result(10)
        tiers = [s.lookup([k]).result(10).tiers[0] for k in a]
        if linked:
            assert tiers == ["dram", "dram", "fs"], tiers
        else:  # promoted all the same, but evicted from the chain's start
            assert tiers == ["fs", "dram", "dram"], tiers
