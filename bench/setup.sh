#!/bin/sh
# Peers for bench/run.sh, from PyPI only:
#   bench/.venv   llama-cpp-python 0.3.36, built from source (it compiles llama.cpp) for this CPU
#   tools/.venv   torch + transformers (tools/requirements.txt), the naive per-cell sweep loop
# Idempotent: an existing, working venv is kept.
#
# llama.cpp is built with -march=native (all of this CPU's AVX-512 / VNNI / BF16 paths and its
# weight repacking) except AMX: on the machine these benchmarks were taken on, llama.cpp
# 0.3.36's AMX kernels crash (SIGSEGV in ggml_backend_amx_mul_mat on the first prompt), so the
# strongest configuration that runs is native minus AMX. kvprobe does not use AMX either.
set -eu
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
LLAMA_CPP_PYTHON=llama-cpp-python==0.3.36
NO_AMX="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"

if ! bench/.venv/bin/python -c "import llama_cpp" 2>/dev/null; then
    echo "bench setup: building $LLAMA_CPP_PYTHON (llama.cpp from source, a few minutes)"
    "$PY" -m venv bench/.venv
    CMAKE_ARGS="-DCMAKE_C_FLAGS='$NO_AMX' -DCMAKE_CXX_FLAGS='$NO_AMX'" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
        bench/.venv/bin/pip install -q --no-cache-dir "$LLAMA_CPP_PYTHON"
fi
# BENCH_NO_TORCH=1 (bench/run.sh --no-sweep): the naive sweep loop is not run, torch not needed.
if [ -z "${BENCH_NO_TORCH:-}" ] && ! tools/.venv/bin/python -c "import torch, transformers, gguf" 2>/dev/null; then
    echo "bench setup: installing tools/requirements.txt into tools/.venv (torch, transformers; large)"
    "$PY" -m venv tools/.venv
    tools/.venv/bin/pip install -q -r tools/requirements.txt
fi
