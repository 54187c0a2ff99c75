#!/usr/bin/env bash
# Deliberate bugs (scripts/mutants.py), one at a time, on a scratch copy of the package: each
# must make a fast test fail. Prints a table; exit 1 if any mutant survived.
set -euo pipefail
cd "$(dirname "$0")/.."
exec "${PYTHON:-.venv/bin/python}" scripts/mutants.py "$@"
