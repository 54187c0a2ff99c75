#!/usr/bin/env bash
# The numbers in docs/benchmarks.md: the demo pair, greedy. About 45 minutes on a 2-core CPU;
# run it on a quiet machine. Results: docs/results/*.json and *.png.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-docs/results}
mkdir -p "$OUT"
ES=".venv/bin/edgespec"
PAIR="--target demo-target --draft demo-draft --n-ctx 4096 --max-tokens 256"
PEER="llama-cpp-python-pld"
$ES bench $PAIR --suite edit --methods plain,auto,$PEER --k 4 --json "$OUT/edit.json"
$ES bench $PAIR --suite code --limit 12 --methods plain,auto,$PEER --k 4 --json "$OUT/code.json"
$ES bench $PAIR --suite chat --limit 12 --methods plain,auto,$PEER --k 4 --json "$OUT/chat.json"
$ES bench $PAIR --suite edit --limit 4 --methods plain,model,ngram --k 2,4,8 \
  --json "$OUT/edit-k.json" --plot "$OUT/edit-k.png"
.venv/bin/python bench/loop_overhead.py --target "$($ES models path demo-target)" \
  --json "$OUT/loop_overhead.json"
.venv/bin/python bench/precision.py --json "$OUT/precision.json"
