"""The verify cost curve at several context lengths: does a pass's shape depend on how much is
cached before it? Each context is measured --rounds times, the contexts in turn, so drift lands
on all of them alike; the spread between rounds is a single calibration's noise.

    python bench/curve_by_context.py --target demo-target [--contexts 64,128,256,512,1024]
        [--n-max 17] [--rounds 2] [--threads 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics

from edgespec.app.models import resolve_model
from edgespec.backends import RuntimeOptions
from edgespec.calibrate import measure_curve
from edgespec.hugepages import reexec_with_tunable
from edgespec.pair import open_pair


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", required=True)
    ap.add_argument("--contexts", default="64,128,256,512,1024")
    ap.add_argument("--n-max", type=int, default=17)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int)
    ap.add_argument("--json")
    args = ap.parse_args()
    contexts = [int(c) for c in args.contexts.split(",")]
    n_ctx = max(contexts) + args.n_max + 1
    target = resolve_model(args.target)
    pair = open_pair(target, None, RuntimeOptions(n_ctx=n_ctx, n_threads=args.threads))
    curves: dict[int, list[list[float]]] = {c: [] for c in contexts}
    for _ in range(args.rounds):
        for c in contexts:
            curve = measure_curve(pair.target, args.n_max, prefix=c, reps=3)
            curves[c].append(curve)
            ratios = " ".join(f"{t / curve[0]:.2f}" for t in curve)
            print(f"after {c:>5}: t(1) {curve[0] * 1e3:.1f} ms, t(n)/t(1) {ratios}", flush=True)
    every = [[t / c[0] for t in c] for runs in curves.values() for c in runs]
    median = [round(statistics.median(r[i] for r in every), 2) for i in range(args.n_max)]
    print("median t(n)/t(1):", ",".join(map(str, median)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"target": str(target), "curves": curves, "median_ratios": median}, f)


if __name__ == "__main__":
    reexec_with_tunable()  # time passes in the memory the edgespec command gives them
    main()
