#!/usr/bin/env bash
# From nothing to the full test suite: install, fetch the demo pair for the `real` tests, test.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy edgespec runtimes export quant
.venv/bin/edgespec models fetch demo
export EDGESPEC_REQUIRE_REAL=1  # a missing real model fails the run instead of skipping
.venv/bin/python -m pytest -q -p no:cacheprovider "$@"
