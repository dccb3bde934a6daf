"""CPUTieringSpec: vLLM's tiered offloading (TieringOffloadingSpec) on the CPU platform.

vLLM's stock spec refuses to build its worker outside CUDA/XPU ("CPU Offloading is
currently only supported on CUDA-alike and XPU GPUs"): its worker moves blocks with CUDA
streams and events. On the CPU platform the "device" KV cache already lives in host
memory, so a worker that copies blocks synchronously between the engine's KV tensors and
the primary tier's shared region is all that is missing. Everything else (the scheduler
side, the CPU primary tier, the secondary tiers such as kvtier.vllm.KvtierTier or vLLM's
own "fs") is vLLM's unchanged.

The row layout written here is the one vLLM's CUDA worker writes (the "direct" layout of
SharedOffloadRegion.create_next_worker_view): per worker slot, per KV tensor, the
blocks_per_chunk block pages of that tensor back to back. So a secondary tier sees the
same row structure on CPU and on CUDA; only the page interior differs (kvtier.vllm.layout).

On CUDA use the stock "TieringOffloadingSpec".
"""

from __future__ import annotations

import time

import numpy as np
import torch

from vllm.platforms import current_platform
from vllm.v1.kv_offload.base import (
    BlockIDsLoadStoreSpec,
    CanonicalKVCaches,
    GPULoadStoreSpec,
    LoadStoreSpec,
    OffloadingWorker,
    TransferResult,
)
from vllm.v1.kv_offload.cpu.shared_offload_region import SharedOffloadRegion
from vllm.v1.kv_offload.tiering.spec import TieringOffloadingSpec


class CPUHostCopyWorker(OffloadingWorker):
    """Synchronous host-to-host block copies between the engine's KV tensors (CPU memory)
    and the primary tier's rows. A copy is complete when submit_* returns; its result is
    reported by the next get_finished()."""

    def __init__(self, kv_caches: CanonicalKVCaches, blocks_per_chunk: int,
                 region: SharedOffloadRegion):
        self._region = region
        self._bpc = blocks_per_chunk
        self._dev: list[torch.Tensor] = []   # (num_blocks, page) int8
        self._host: list[torch.Tensor] = []  # (num_chunks, bpc, page) int8 views of rows
        for t in kv_caches.tensors:
            page = t.page_size_bytes
            dev = t.tensor.view(torch.int8).view(-1, page)
            if dev.device.type != "cpu":
                raise RuntimeError("CPUTieringSpec needs the KV cache in host memory; "
                                   "on GPUs use TieringOffloadingSpec")
            host = region.create_next_worker_view(page * blocks_per_chunk)
            self._dev.append(dev)
            self._host.append(host.view(host.shape[0], blocks_per_chunk, page))
        self._groups = [[ref.tensor_idx for ref in refs] for refs in kv_caches.group_data_refs]
        self._finished: list[TransferResult] = []

    def _positions(self, gpu_spec: GPULoadStoreSpec, cpu_spec: BlockIDsLoadStoreSpec):
        """(group, device block ids, host chunk ids, sub-block index) per group: the
        k-th device block of a group is logical block block_indices[g] + k, which lives in
        host chunk (logical // bpc) counted from the group's first chunk."""
        out = []
        dev_off = 0
        cpu_off = 0
        for g, (size, first) in enumerate(zip(gpu_spec.group_sizes, gpu_spec.block_indices)):
            if size == 0:
                continue
            logical = first + np.arange(size)
            chunk_rel = logical // self._bpc - first // self._bpc
            n_chunks = int(chunk_rel[-1]) + 1
            dev_ids = gpu_spec.block_ids[dev_off:dev_off + size]
            cpu_ids = cpu_spec.block_ids[cpu_off:cpu_off + n_chunks][chunk_rel]
            out.append((g, dev_ids.astype(np.int64), cpu_ids.astype(np.int64),
                        (logical % self._bpc).astype(np.int64)))
            dev_off += size
            cpu_off += n_chunks
        return out

    def _copy(self, job_id, gpu_spec, cpu_spec, to_host: bool) -> bool:
        t0 = time.perf_counter()
        nbytes = 0
        with torch.inference_mode():
            for g, dev_ids, cpu_ids, sub in self._positions(gpu_spec, cpu_spec):
                # one page copy per block and tensor (as vLLM's CUDA worker issues one
                # descriptor each): measured faster here than advanced indexing, which
                # gathers into a temporary first
                pairs = list(zip(dev_ids.tolist(), cpu_ids.tolist(), sub.tolist()))
                for ti in self._groups[g]:
                    dev, host = self._dev[ti], self._host[ti]
                    for d, c, j in pairs:
                        if to_host:
                            host[c, j].copy_(dev[d])
                        else:
                            dev[d].copy_(host[c, j])
                    nbytes += len(pairs) * dev.shape[1]
        self._finished.append(TransferResult(job_id=job_id, success=True,
                                             transfer_size=nbytes,
                                             transfer_time=time.perf_counter() - t0))
        return True

    def submit_store(self, job_id: int, src_spec: GPULoadStoreSpec,
                     dst_spec: LoadStoreSpec) -> bool:
        assert isinstance(dst_spec, BlockIDsLoadStoreSpec)
        return self._copy(job_id, src_spec, dst_spec, to_host=True)

    def submit_load(self, job_id: int, src_spec: LoadStoreSpec,
                    dst_spec: GPULoadStoreSpec) -> bool:
        assert isinstance(src_spec, BlockIDsLoadStoreSpec)
        return self._copy(job_id, dst_spec, src_spec, to_host=False)

    def get_finished(self) -> list[TransferResult]:
        out, self._finished = self._finished, []
        return out

    def wait(self, job_ids: set[int]) -> None:
        return  # every copy completed inside its submit call

    def shutdown(self) -> None:
        self._dev.clear()
        self._host.clear()
        if self._region is not None:
            self._region.cleanup()
            self._region = None


class CPUTieringSpec(TieringOffloadingSpec):
    """TieringOffloadingSpec whose worker runs on vLLM's CPU platform. Use as
    {"spec_name": "CPUTieringSpec", "spec_module_path": "kvtier.vllm", ...}."""

    def get_worker(self, kv_caches: CanonicalKVCaches) -> OffloadingWorker:
        if current_platform.is_cuda_alike() or current_platform.is_xpu():
            return super().get_worker(kv_caches)
        if self._worker is None:
            if self.config.canonical_layout:
                raise RuntimeError("CPUTieringSpec does not implement vLLM's "
                                   "canonical_layout; remove it from the extra config")
            rank = 0 if self.replicated_layout else self.config.parallel.rank
            region = SharedOffloadRegion(
                engine_id=self._engine_id, num_chunks=self.num_chunks, rank=rank,
                kv_bytes_per_chunk=self.kv_bytes_per_chunk,
                cpu_page_size=self.cpu_page_size_per_worker)
            try:
                self._worker = CPUHostCopyWorker(kv_caches, self.blocks_per_chunk, region)
            except Exception:
                region.cleanup()
                raise
        return self._worker
