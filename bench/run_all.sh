#!/usr/bin/env bash
# The numbers in docs/benchmarks.md: every suite and method on the demo pair, greedy.
# About 45 minutes on a 2-core CPU. Results: docs/results/*.json and *.png.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-docs/results}
mkdir -p "$OUT"
ES=".venv/bin/edgespec"
PAIR="--target demo-target --draft demo-draft --n-ctx 4096"
ALL="plain,auto,ngram,model,llama-cpp-python-pld"
$ES bench $PAIR --suite edit --methods $ALL --k 4 --max-tokens 256 \
  --json "$OUT/edit.json" --plot "$OUT/edit.png"
$ES bench $PAIR --suite edit --methods plain,ngram,llama-cpp-python-pld --k 2,8,10 \
  --max-tokens 256 --json "$OUT/edit-k.json"
$ES bench $PAIR --suite code --limit 24 --methods $ALL --k 4 --max-tokens 256 \
  --json "$OUT/code.json" --plot "$OUT/code.png"
$ES bench $PAIR --suite chat --methods plain,auto,ngram,llama-cpp-python-pld --k 4 \
  --max-tokens 256 --json "$OUT/chat.json"
