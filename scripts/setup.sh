#!/usr/bin/env bash
# Create .venv and install edgespec with the llama.cpp back-end. Idempotent.
#
# llama-cpp-python is compiled here (~3-6 min on 2 cores) for this CPU's vector extensions,
# AMX excepted: llama.cpp's AMX kernels die with SIGILL on the first quantized matmul in
# the sandboxes tried (gVisor; a Firecracker VM where a one-thread AMX program runs: the
# fault is `tilezero` in a worker thread, docs/benchmarks.md). The wheel is kept in
# ~/.cache/edgespec/wheels/<flags>, so a fresh clone on the same CPU installs it in seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
LLAMA_VERSION=0.3.36  # the version every benchmark in docs/ was measured with
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip

source scripts/llama_cpu_args.sh  # cwd: the repository root (above)
wheels=${EDGESPEC_WHEELS:-$HOME/.cache/edgespec/wheels}/llama-$LLAMA_VERSION-$(echo "$cmake_args" | sha256sum | cut -c1-12)
if ! ls "$wheels"/llama_cpp_python-*.whl > /dev/null 2>&1; then
  echo "building llama-cpp-python $LLAMA_VERSION ($cmake_args)" >&2
  CMAKE_ARGS="$cmake_args" CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} \
    .venv/bin/python -m pip wheel -q --no-cache-dir --no-deps -w "$wheels" \
    "llama-cpp-python==$LLAMA_VERSION"
fi
.venv/bin/python -m pip install -q --find-links "$wheels" "llama-cpp-python==$LLAMA_VERSION"
.venv/bin/python -m pip install -q --find-links "$wheels" -e ".[llama,onnx,serve,dev,plot,peers]"
