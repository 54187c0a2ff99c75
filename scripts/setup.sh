#!/usr/bin/env bash
# Create .venv and install edgespec with the llama.cpp back-end (compiles llama.cpp: ~6 min on
# 2 cores the first time; pip caches the wheel after that). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} \
  .venv/bin/python -m pip install -q -e ".[llama,onnx,dev,plot]"
