#!/usr/bin/env bash
# The ONNX Runtime numbers in docs/benchmarks.md: the demo pair exported to ONNX INT4 (from
# its GGUF files, the only form it ships in), the verify cost curve next to llama.cpp's, and
# the speedups on the edit, code and chat suites. About 40 minutes on a 2-core CPU; run it on
# a quiet machine. Results: docs/results/onnx-*.json.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-docs/results}
BUNDLE=${BUNDLE:-$HOME/.cache/edgespec/onnx-demo}
mkdir -p "$OUT"
ES=".venv/bin/edgespec"
PY=".venv/bin/python"
TARGET=$($ES models path demo-target)
DRAFT=$($ES models path demo-draft)
if [ ! -f "$BUNDLE/bundle.json" ]; then
  $ES export --format onnx --target "$TARGET" --draft "$DRAFT" --out "$BUNDLE"
fi
$PY bench/onnx_curve.py "$BUNDLE/target.int4" --gguf "$TARGET" --n-max 17 \
  --json "$OUT/onnx-curve.json"
RUN="--target $BUNDLE --n-ctx 4096 --max-tokens 256"
$ES bench $RUN --suite edit --methods plain,auto --json "$OUT/onnx-edit.json"
$ES bench $RUN --suite code --limit 12 --methods plain,auto --json "$OUT/onnx-code.json"
$ES bench $RUN --suite chat --limit 12 --methods plain,auto --json "$OUT/onnx-chat.json"
