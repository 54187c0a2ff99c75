"""How much one calibration of the verify cost curve varies: edgespec's measure_curve (each wide
pass right after a one-token pass, short widths sampled most) against timing each width's
passes in a row (calibration version 1), the two in turn --runs times on one loaded target.
The spread of a width's ratio t(n)/t(1) over the runs is what a single calibration may be off
by; the controller decides by those ratios.

    python bench/calibration_noise.py --target demo-target [--runs 7] [--n-max 17] \
        [--threads 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics

import numpy as np

from edgespec.app.bench import machine_info
from edgespec.app.models import resolve_model
from edgespec.backends import RuntimeOptions
from edgespec.calibrate import measure_curve, time_pass, warm_at_prefix
from edgespec.hugepages import reexec_with_tunable
from edgespec.pair import open_pair
from edgespec.runtime import Runtime

REPORTED_WIDTHS = (2, 3, 4, 8, 16, 17)


def in_a_row(runtime: Runtime, n_max: int, prefix: int = 128, reps: int = 3) -> list[float]:
    """Calibration version 1: each width's passes one after another, widths 1..n_max in order,
    the median of reps passes each."""
    rng = np.random.default_rng(0)
    warm_at_prefix(runtime, prefix, rng)
    curve = [
        statistics.median(time_pass(runtime, n, rng) for _ in range(reps))
        for n in range(1, n_max + 1)
    ]
    runtime.reset()
    return curve


def spread(runs: list[list[float]], n: int) -> dict[str, float]:
    ratios = [run[n - 1] / run[0] for run in runs]
    return {
        "median": statistics.median(ratios),
        "min": min(ratios),
        "max": max(ratios),
        "sd": statistics.pstdev(ratios),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", required=True)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--n-max", type=int, default=17)
    ap.add_argument("--threads", type=int)
    ap.add_argument("--json")
    args = ap.parse_args()
    target = resolve_model(args.target)
    pair = open_pair(target, None, RuntimeOptions(n_ctx=1024, n_threads=args.threads))
    methods = {
        "paired": lambda: measure_curve(pair.target, args.n_max),
        "in a row": lambda: in_a_row(pair.target, args.n_max),
    }
    curves: dict[str, list[list[float]]] = {name: [] for name in methods}
    for _ in range(args.runs):
        for name, measure in methods.items():
            curve = measure()
            curves[name].append(curve)
            ratios = " ".join(f"{t / curve[0]:.2f}" for t in curve)
            print(f"{name:>8}: t(1) {curve[0] * 1e3:.1f} ms, t(n)/t(1) {ratios}", flush=True)
    widths = [n for n in REPORTED_WIDTHS if n <= args.n_max]
    table = {name: {n: spread(runs, n) for n in widths} for name, runs in curves.items()}
    print(f"\n{args.runs} calibrations each; t(n)/t(1):")
    print("| width | method | median | min | max | sd |\n|---|---|---|---|---|---|")
    for n in widths:
        for name in methods:
            s = table[name][n]
            print(
                f"| {n} | {name} | {s['median']:.2f} | {s['min']:.2f} | {s['max']:.2f} "
                f"| {s['sd']:.3f} |"
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "target": str(target),
                    "machine": machine_info(),
                    "curves": curves,
                    "spread": table,
                },
                f,
                indent=1,
            )


if __name__ == "__main__":
    reexec_with_tunable()  # time passes in the memory the edgespec command gives them
    main()
