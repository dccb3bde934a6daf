"""vLLM row layouts <-> kvtier's canonical chunk (kvtier/vllm/layout.py), each checked
against an independent construction: an element-by-element loop over the documented
index formula, torch.einsum permutations, and for the CPU layout vLLM's own CPU attention
kernel (cpu_attn_reshape_and_cache) writing the cache."""

from __future__ import annotations

import itertools
import time

import numpy as np
import pytest
import torch

import kvtier
from kvtier.vllm.layout import RowLayout


def canonical(L, T, H, D, seed=0):
    """Random canonical chunk as uint16 (bf16 bits): (L, 2, T, H, D)."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, 1 << 16, size=(L, 2, T, H, D), dtype=np.uint16)


def row_by_loops(rl: RowLayout, canon: np.ndarray) -> np.ndarray:
    """The row, element by element, from the layouts' definitions (docs/VLLM.md)."""
    L, H, D, Tb, bpc, tp = (rl.layers, rl.kv_heads, rl.head_dim, rl.block_tokens,
                           rl.blocks_per_chunk, rl.tp)
    Hr = H // tp
    pe = rl.page // 2
    row = np.zeros(rl.row_bytes // 2, dtype=np.uint16)
    for r, l, j, t, h, kv, d in itertools.product(range(tp), range(L), range(bpc), range(Tb),
                                                  range(Hr), range(2), range(D)):
        page = ((r * L + l) * bpc + j) * pe
        if rl.layout == "cpu-vec":
            off = h * 2 * Tb * D + (d * Tb + t if kv == 0 else Tb * D + t * D + d)
        elif rl.layout == "cpu-amx":  # the formula fitted to vLLM's kernel (test below)
            off = h * 2 * Tb * D + (
                ((t // 16) * (D // 2) + d // 2) * 32 + (t % 16) * 2 + d % 2 if kv == 0 else
                Tb * D + ((d // 16) * (Tb // 2) + t // 2) * 32 + (d % 16) * 2 + t % 2)
        elif rl.layout == "nhd":
            off = ((t * Hr + h) * 2 + kv) * D + d
        else:  # hnd
            off = ((h * Tb + t) * 2 + kv) * D + d
        row[page + off] = canon[l, kv, j * Tb + t, r * Hr + h, d]
    return row.view(np.uint8)


@pytest.mark.parametrize("layout", ["cpu-vec", "cpu-amx", "nhd", "hnd"])
@pytest.mark.parametrize("tp,bpc,pad", [(1, 1, 0), (2, 2, 0), (1, 2, 64)])
def test_layout_matches_definition(layout, tp, bpc, pad):
    L, H, D, Tb = (2, 4, 16, 32) if layout == "cpu-amx" else (2, 4, 8, 4)
    unpadded = 2 * Tb * (H // tp) * D * 2
    rl = RowLayout(layout, L, H, D, Tb, bpc, tp, 2, unpadded + pad if pad else 0)
    canon = canonical(L, Tb * bpc, H, D)
    want = row_by_loops(rl, canon)
    out = np.zeros(rl.payload_bytes, dtype=np.uint8)
    rl.row_to_canonical(want, out)
    assert np.array_equal(out.view(np.uint16).reshape(canon.shape), canon)
    # and back, into a row whose padding must stay untouched
    row = np.full(rl.row_bytes + 100, 0xAB, dtype=np.uint8)
    rl.canonical_to_row(canon.reshape(-1).view(np.uint8), row)
    data = np.ones(rl.row_bytes, dtype=bool)
    if pad:
        pages = data.reshape(tp * L * bpc, rl.page)
        pages[:, unpadded:] = False
    assert np.array_equal(row[:rl.row_bytes][data], want[data])
    assert (row[:rl.row_bytes][~data] == 0xAB).all() and (row[rl.row_bytes:] == 0xAB).all()


def test_nhd_against_einsum_and_flash_attention_view():
    """nhd as vLLM's FlashAttention forward reads it: the physical LBNHC page
    (B, N, H, 2D) seen logically as (B, H, N, 2D), transpose(1, 2).split(D) -> K, V."""
    L, H, D, Tb, bpc = 3, 2, 16, 8, 2
    T = Tb * bpc
    K = torch.randn(L, T, H, D).to(torch.bfloat16)
    V = torch.randn(L, T, H, D).to(torch.bfloat16)
    blocks = [3, 1]
    rows = []
    for l in range(L):
        phys = torch.zeros(5, Tb, H, 2 * D, dtype=torch.bfloat16)  # LBNHC physical
        logical = phys.permute(0, 2, 1, 3)                            # (B, H, N, 2D)
        kc, vc = logical.transpose(1, 2).split(D, dim=-1)             # FA's own view
        for j, b in enumerate(blocks):
            kc[b] = K[l, j * Tb:(j + 1) * Tb]
            vc[b] = V[l, j * Tb:(j + 1) * Tb]
        rows.append(phys[blocks].reshape(-1))
    row = torch.cat(rows).view(torch.uint8).numpy()
    rl = RowLayout("nhd", L, H, D, Tb, bpc)
    out = np.zeros(rl.payload_bytes, dtype=np.uint8)
    rl.row_to_canonical(row, out)
    got = torch.from_numpy(out.view(np.int16).copy()).view(torch.bfloat16).reshape(L, 2, T, H, D)
    assert torch.equal(got, torch.stack([K, V], 1))
    # and by an einsum permutation of the engine-side bytes themselves
    pages = torch.stack([r.view(torch.bfloat16) for r in rows]).reshape(L, bpc, Tb, H, 2, D)
    want = torch.einsum("ljthkd->lkjthd", pages).reshape(L, 2, T, H, D)
    assert torch.equal(got, want)


def kernel_rows(isa: str, L: int, H: int, D: int, Tb: int, bpc: int):
    """Random K and V, (L, Tb*bpc, H, D) in bf16, written by vLLM's CPU attention kernel
    (cpu_attn_reshape_and_cache with the given ISA) into its cache, and the row that holds
    the chunk's blocks (two of six, out of order), as bytes: (row, rows per layer, K, V)."""
    import vllm._custom_ops as ops
    T = Tb * bpc
    K = torch.randn(L, T, H, D).to(torch.bfloat16)
    V = torch.randn(L, T, H, D).to(torch.bfloat16)
    blocks = [4, 1]
    rows = []
    for l in range(L):
        cache = torch.zeros(6, H, 2 * Tb, D, dtype=torch.bfloat16)  # vLLM's CPU view
        kc, vc = cache.chunk(2, dim=2)
        slots = torch.tensor([blocks[t // Tb] * Tb + t % Tb for t in range(T)])
        ops.cpu_attn_reshape_and_cache(K[l].contiguous(), V[l].contiguous(), kc, vc,
                                       slots, isa)
        rows.append(cache[blocks].reshape(-1))
    return torch.cat(rows).view(torch.uint8).numpy(), rows, K, V


@pytest.mark.parametrize("isa,Tb", [("vec", 32), ("vec16", 32), ("vec16", 16)])
def test_cpu_vec_against_vllm_kernel(isa, Tb):
    """The CPU layout as vLLM's CPU attention kernel writes it ("vec" ISA; "vec16", taken
    when the block or head size is not a multiple of 32, writes the same pages)."""
    L, H, D, bpc = 2, 2, 64, 2
    T = Tb * bpc
    row, rows, K, V = kernel_rows(isa, L, H, D, Tb, bpc)
    rl = RowLayout("cpu-vec", L, H, D, Tb, bpc)
    out = np.zeros(rl.payload_bytes, dtype=np.uint8)
    rl.row_to_canonical(row, out)
    want = torch.stack([K, V], 1).contiguous()
    assert np.array_equal(out, want.view(torch.uint8).reshape(-1).numpy())
    # by einsum over the kernel's cache bytes: K region per head is [D][Tb], V [Tb][D]
    sel = torch.stack([r.view(torch.bfloat16) for r in rows]).reshape(L, bpc, H, 2 * Tb, D)
    k = torch.einsum("ljhdt->ljthd", sel[:, :, :, :Tb, :].reshape(L, bpc, H, D, Tb))
    v = torch.einsum("ljhtd->ljthd", sel[:, :, :, Tb:, :])
    got = torch.from_numpy(out.view(np.int16).copy()).view(torch.bfloat16).reshape(L, 2, T, H, D)
    assert torch.equal(got[:, 0], k.reshape(L, T, H, D))
    assert torch.equal(got[:, 1], v.reshape(L, T, H, D))
    back = np.zeros_like(row)
    rl.canonical_to_row(out, back)
    assert np.array_equal(back, row)


@pytest.mark.parametrize("Tb,D", [(32, 64), (64, 96), (32, 128)])
def test_cpu_amx_against_vllm_kernel(Tb, D):
    """The "amx" pages (vLLM's CPU attention in bf16 on a CPU with AMX, block sizes that
    are multiples of 32) as the kernel itself writes them: rows it wrote convert to the
    canonical chunk, and back to the same bytes. (The kernel's cache write is a plain copy:
    it runs on AVX-512 CPUs without AMX too, not on AVX2-only ones.) Until 2026-12-05 the
    tier refused these pages, so on a Sapphire Rapids host no engine with kvtier could
    start."""
    L, H, bpc = 2, 2, 2
    try:
        row, _, K, V = kernel_rows("amx", L, H, D, Tb, bpc)
    except RuntimeError as e:
        # vLLM's CPU build dispatches its "amx" cache write by the CPU it runs on: an
        # AVX-512 host without AMX runs it (the earlier CI machines), an AVX2-only one (AMD
        # EPYC without AVX-512, 2026-12-06) refuses it - and vLLM itself then never picks
        # these pages, so there is nothing of vLLM's to compare with on this host. The
        # layout is still checked against its definition (test_layout_matches_definition).
        if "Unsupported CPU attention configuration" not in str(e):
            raise
        pytest.skip(f"this CPU cannot run vLLM's amx kernel: {e}")
    rl = RowLayout("cpu-amx", L, H, D, Tb, bpc)
    out = np.zeros(rl.payload_bytes, dtype=np.uint8)
    rl.row_to_canonical(row, out)
    want = torch.stack([K, V], 1).contiguous()
    assert np.array_equal(out, want.view(torch.uint8).reshape(-1).numpy())
    back = np.zeros_like(row)
    rl.canonical_to_row(out, back)
    assert np.array_equal(back, row)
    assert np.array_equal(row_by_loops(rl, want.view(torch.int16).numpy().view(np.uint16)),
                          row)


def test_bad_layouts_refused():
    with pytest.raises(ValueError):
        RowLayout("nchw", 2, 2, 64, 16, 1)
    with pytest.raises(ValueError):
        RowLayout("nhd", 2, 3, 64, 16, 1, tp=2)
    with pytest.raises(ValueError):
        RowLayout("nhd", 2, 2, 64, 16, 1, page_bytes=100)
    with pytest.raises(ValueError, match="multiples of 16"):
        RowLayout("cpu-amx", 2, 2, 64, 8, 1)
    rl = RowLayout("nhd", 2, 2, 64, 16, 1)
    with pytest.raises(ValueError):
        rl.row_to_canonical(np.zeros(10, np.uint8), np.zeros(rl.payload_bytes, np.uint8))


@pytest.mark.parametrize("layout", ["cpu-vec", "cpu-amx", "nhd", "hnd"])
@pytest.mark.parametrize("ids", [[3, 4, 5], [5, 1, 3]])
def test_rows_store_and_load_match_single_rows(layout, ids, tdir):
    """kvtier.Rows (the tier's path: one libkvtier call per job) stores rows as the
    canonical chunks row_to_canonical (checked above against the definition) makes, and
    loads them into other rows exactly as canonical_to_row writes them, leaving the
    other rows and the rows' padding untouched; a missing chunk ends the load there."""
    L, H, D, Tb, bpc, tp = 2, 4, 8, 4, 2, 2
    if layout == "cpu-amx":
        D, Tb = 16, 16
    unpadded = 2 * Tb * (H // tp) * D * 2
    rl = RowLayout(layout, L, H, D, Tb, bpc, tp, 2, unpadded + 64)
    stride = rl.row_bytes + 96  # rows of the primary tier are padded beyond row_bytes too
    chunks = [canonical(L, Tb * bpc, H, D, seed=i).reshape(-1).view(np.uint8)
              for i in range(len(ids))]
    src = np.full((8, stride), 0xCD, dtype=np.uint8)
    src_ids = [7 - r for r in ids]
    for c, r in zip(chunks, src_ids):
        rl.canonical_to_row(c, src[r])
    cfg = {"store.tiers": "dram,nvme", "nvme.dirs": tdir, "dram.bytes": "4MiB",
           "dram.hugepages": False, "nvme.fsync": "none", "model.layers": L,
           "model.kv_heads": H, "model.head_dim": D, "model.chunk_tokens": Tb * bpc}
    keys = [bytes([9, i]) * 16 for i in range(len(ids))]
    with kvtier.Store(cfg) as s:
        with kvtier.Rows(s, rl.c_layout(stride), src, staging=2) as rows:
            r = rows.store(keys, src_ids, parents=[None] + keys[:-1])
            assert (r.done, r.reason) == (len(ids), "")
        for k, c in zip(keys, chunks):
            assert bytes(s.get(k).result(10).data) == c.tobytes()
        got = np.full((8, stride), 0xCD, dtype=np.uint8)
        with kvtier.Rows(s, rl.c_layout(stride), got, staging=2) as rows:
            r = rows.load(keys, ids, deadline=time.monotonic() + 10)
            assert (r.done, r.reason) == (len(ids), "")
            want = np.full((8, stride), 0xCD, dtype=np.uint8)
            for c, i in zip(chunks, ids):
                rl.canonical_to_row(c, want[i])
            assert np.array_equal(got, want)
            assert (got[[i for i in range(8) if i not in ids]] == 0xCD).all()
            got[:] = 0xCD
            r = rows.load([keys[0], bytes(32), keys[2]], ids)
            assert (r.done, r.reason) == (1, "miss")
            assert np.array_equal(got[ids[0]], want[ids[0]])
            assert (got[ids[1]] == 0xCD).all()  # the missing chunk's row: never written
            # a later chunk read before the miss was known: its row is exact or untouched
            assert (got[ids[2]] == 0xCD).all() or np.array_equal(got[ids[2]], want[ids[2]])


def _small_rows_store():
    L, H, D, Tb = 2, 2, 64, 16
    rl = RowLayout("cpu-vec", L, H, D, Tb, 1, itemsize=2)
    s = kvtier.Store({"store.tiers": "dram", "dram.bytes": "8MiB", "dram.hugepages": False,
                      "model.layers": L, "model.kv_heads": H, "model.head_dim": D,
                      "model.chunk_tokens": Tb})
    rows = np.random.default_rng(0).integers(0, 256, (8, rl.row_bytes), dtype=np.uint8)
    return s, rl, rows


def test_rows_load_refuses_read_only_arrays():
    """Loads write into the rows: a read-only view of bytes was changed in place, and one of
    a read-only mapping crashed the process (SIGSEGV in the load's copy). A load into
    read-only rows is refused; storing from them works."""
    s, rl, rows = _small_rows_store()
    ro = np.frombuffer(rows.tobytes(), np.uint8).reshape(rows.shape)
    with s, kvtier.Rows(s, rl.c_layout(), ro, 2) as r:
        keys = kvtier.keys_from_tokens(s.ns_id, 16, list(range(32)))
        assert r.store(keys, [0, 1]).done == 2
        with pytest.raises(ValueError, match="read-only"):
            r.load(keys, [2, 3])
        with pytest.raises(ValueError, match="read-only"):
            r.load_start(keys, [2, 3])
        assert ro.tobytes() == rows.tobytes()


def test_rows_refuse_mismatched_lengths():
    """The C side reads len(keys) row ids (and parents): fewer of them made it read past
    the arrays and write rows the caller never named. Refused before any I/O."""
    s, rl, rows = _small_rows_store()
    with s, kvtier.Rows(s, rl.c_layout(), rows, 4) as r:
        keys = [bytes([i]) * 32 for i in range(3)]
        backing = np.array([0, 1, 2, 7], dtype=np.uint64)  # what a C read past [:1] finds
        with pytest.raises(ValueError, match="row id"):
            r.store(keys, backing[:1])
        assert s.stats()["puts"] == 0
        assert r.store(keys, [0, 1, 2]).done == 3
        before = rows.copy()
        with pytest.raises(ValueError, match="row id"):
            r.load(keys, np.array([5, 6, 7], dtype=np.uint64)[:1])
        with pytest.raises(ValueError, match="row id"):
            r.load_start(keys, np.array([5, 6, 7], dtype=np.uint64)[:2])
        with pytest.raises(ValueError, match="row id"):
            r.load(keys[:1], [5, 6])
        assert np.array_equal(rows, before), "a refused load wrote rows"
        with pytest.raises(ValueError, match="parent"):
            r.store(keys, [0, 1, 2], parents=[None])


def test_rows_and_jobs_after_close_refuse():
    """Store.close() closes the Rows handles still open on it (before freeing the store),
    and Rows.close() frees its jobs: later calls raise instead of using freed memory."""
    s, rl, rows = _small_rows_store()
    r = kvtier.Rows(s, rl.c_layout(), rows, 2)
    k = bytes([1]) * 32
    assert r.store([k], [0]).done == 1
    s.close()
    assert r._r is None, "the Rows handle outlived its store"
    with pytest.raises(ValueError, match="closed"):
        r.store([k], [0])
    with pytest.raises(ValueError, match="closed"):
        r.load([k], [1])
    with pytest.raises(ValueError, match="closed"):
        r.load_start([k], [1])
    r.close()  # idempotent

    s, rl, rows = _small_rows_store()
    with s:
        r = kvtier.Rows(s, rl.c_layout(), rows, 2)
        assert r.store([k], [0]).done == 1
        job = r.load_start([k], [1])
        r.close()
        assert not job._j, "a job outlived its Rows handle"
        with pytest.raises(ValueError, match="closed"):
            job.poll(0)
        job.free()  # harmless


def _started_load(s, rl, rows):
    """A Rows handle on s with one chunk stored (row 0) and a load of it started (row 1)."""
    r = kvtier.Rows(s, rl.c_layout(), rows, 2)
    k = bytes([1]) * 32
    assert r.store([k], [0]).done == 1
    return r, r.load_start([k], [1])


@pytest.mark.parametrize("op", ["load", "store", "job_poll"])
def test_store_close_from_another_thread_waits_for_rows_calls(op, monkeypatch):
    """Store.close() (which closes its Rows handles) on one thread while another is inside
    a Rows call: kvt_rows_close freed the handle under a load still converting into rows
    (use after free). The close waits for the call; calls after it raise ValueError."""
    from free_race import FreeRace
    from kvtier import rows as rows_mod
    race = FreeRace(monkeypatch, rows_mod.lib,
                    ["kvt_rows_load", "kvt_rows_store", "kvt_rows_job_poll"], "kvt_rows_close")
    s, rl, rows = _small_rows_store()
    r = kvtier.Rows(s, rl.c_layout(), rows, 2)
    k = bytes([1]) * 32
    assert r.store([k], [0]).done == 1
    job = r.load_start([k], [1])
    calls = {"load": lambda: r.load([k], [2]), "store": lambda: r.store([k], [3]),
             "job_poll": lambda: job.poll(-1)}
    assert race.run(calls[op], s.close) is not None
    with pytest.raises(ValueError, match="closed"):
        calls[op]()


def test_job_free_from_another_thread_waits_for_its_poll(monkeypatch):
    """RowsJob.free() on one thread while another polls the same job: the job was freed
    under the poll (use after free). free() now waits for the poll to return."""
    from free_race import FreeRace
    from kvtier import rows as rows_mod
    race = FreeRace(monkeypatch, rows_mod.lib, ["kvt_rows_job_poll"], "kvt_rows_job_free")
    s, rl, rows = _small_rows_store()
    try:
        r, job = _started_load(s, rl, rows)
        assert race.run(lambda: job.poll(-1), job.free) is not None
        with pytest.raises(ValueError, match="freed"):
            job.poll(0)
    finally:
        s.close()


def test_rows_close_from_another_thread_waits_for_a_job_free(monkeypatch):
    """RowsJob.free() on one thread while Rows.close() runs on another: the job was taken
    out of the handle's jobs before kvt_rows_job_free ran, so the close did not wait for it
    and freed the handle under it (kvt_rows_job_free takes the handle's lock). The close now
    waits for the free as for any call."""
    from free_race import FreeRace
    from kvtier import rows as rows_mod
    race = FreeRace(monkeypatch, rows_mod.lib, ["kvt_rows_job_free"], "kvt_rows_close")
    s, rl, rows = _small_rows_store()
    try:
        r, job = _started_load(s, rl, rows)
        race.run(job.free, r.close)
    finally:
        s.close()


def test_store_close_waits_for_a_rows_close_on_another_thread(monkeypatch):
    """Rows.close() on one thread (freeing a job still held, then the handle) while
    Store.close() runs on another: the store's close of the same handle found it being
    closed and returned at once, and the store was freed under the first close's
    kvt_rows_job_free / kvt_rows_close. A second close now waits for the first."""
    from free_race import FreeRace
    from kvtier import rows as rows_mod
    race = FreeRace(monkeypatch, rows_mod.lib, ["kvt_rows_job_free", "kvt_rows_close"],
                    "kvt_store_close")
    s, rl, rows = _small_rows_store()
    r, job = _started_load(s, rl, rows)
    race.run(r.close, s.close)
    assert s._s is None


def test_a_job_is_polled_by_one_thread_at_a_time(monkeypatch):
    """Two threads polling one load job: the C side finishes a job once, and two polls that
    both saw it over freed it twice (kvt_layout.h: one thread at a time polls a job). The
    wrapper guarded free and close against polls but not a poll against a poll; the second
    now raises ValueError while the first is inside C, and polls again after it."""
    from free_race import FreeRace
    from kvtier import rows as rows_mod
    race = FreeRace(monkeypatch, rows_mod.lib, ["kvt_rows_job_poll"], "kvt_rows_job_free")
    s, rl, rows = _small_rows_store()
    try:
        r, job = _started_load(s, rl, rows)
        second = []

        def poll_again():
            try:
                job.poll(0)
                second.append("polled")
            except ValueError as e:
                second.append(str(e))

        assert race.run(lambda: job.poll(-1), poll_again) is not None
        assert second and "another thread" in second[0], second
        assert job.poll(0) is not None  # alone again: the result
        job.free()
    finally:
        s.close()
