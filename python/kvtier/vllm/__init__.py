"""kvtier inside vLLM: the secondary offloading tier KvtierTier and CPUTieringSpec, the
tiering spec for vLLM's CPU platform. Imported by vLLM through module_path "kvtier.vllm"
(docs/VLLM.md)."""

from .spec import CPUTieringSpec
from .tier import KvtierTier

__all__ = ["CPUTieringSpec", "KvtierTier"]
