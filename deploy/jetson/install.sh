#!/usr/bin/env bash
# Install edgespec with a CUDA build of llama.cpp on a Jetson. Run from the repository root.
set -euo pipefail
PREFIX=${PREFIX:-/opt/edgespec}
CUDA_ARCH=${CUDA_ARCH:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null \
  | head -1 | tr -d . || echo 87)}
python3 -m venv "$PREFIX"
"$PREFIX/bin/pip" install -q --upgrade pip
CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCH}" \
  CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
  "$PREFIX/bin/pip" install --no-binary llama-cpp-python ".[llama]"
"$PREFIX/bin/edgespec" doctor
