#!/usr/bin/env bash
# Print how many MiB one upload may hold: a call to a lent GPU machine carries at most 64 MiB,
# the checkout included (tracked and untracked-not-ignored files: ~18 MiB in 2026-11, most of
# it docs/results), and 2 MiB are kept as margin. prepare.sh and trt.sh size their chunks so.
set -euo pipefail
cd "$(dirname "$0")/../.."
tree_bytes=$( (git ls-files -z; git ls-files -z -o --exclude-standard) | xargs -0 du -cb \
  | awk '$2 == "total" {s += $1} END {print s}')
echo $((62 - tree_bytes / 1048576 - 1))
