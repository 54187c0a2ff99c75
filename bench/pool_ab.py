"""`edgespec bench` with ONNX Runtime's thread pool chosen: the shared pool edgespec ran
before 5f96b4a, or today's default (a pool per session, idle workers asleep after 50 us).
An A/B of the pool over a whole suite, plain and `auto` interleaved per prompt as always:

    python bench/pool_ab.py shared bench --target ~/.cache/edgespec/demo-onnx \\
        --methods plain,auto --threads 2 --n-ctx 4096 --suite chat --json shared.json
    python bench/pool_ab.py default bench ... --json default.json
"""

from __future__ import annotations

import sys

from edgespec.hugepages import reexec_with_tunable


def main(argv: list[str]) -> int:
    from edgespec.app.cli import main as edgespec
    from edgespec.runtimes import onnxrt

    pool, *args = argv
    if pool not in ("shared", "default"):
        raise SystemExit(f"pool {pool!r}: shared or default, then edgespec's arguments")
    if pool == "shared":
        onnxrt.default_pool = lambda: onnxrt.SHARED_POOL
    return edgespec(args)


if __name__ == "__main__":
    reexec_with_tunable()  # as the edgespec command runs
    sys.exit(main(sys.argv[1:]))
