"""How much a back-end's logits for a token change with the width of the pass it is in.

Speculative greedy output equals plain decoding exactly when a token's logits are the same
whether it is evaluated alone (plain) or among k+1 tokens (verify). For each width n, this
forwards n real tokens in one pass after a prefix, then the same tokens one at a time, and
reports the largest absolute logit difference and how often the argmax differs.

    python bench/batch_invariance.py MODEL [MODEL ...] [--widths 2,5,9] [--json F]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np


def measure(runtime, tokens: list[int], prefix: int, widths: list[int]) -> list[dict]:
    rows = []
    for n in widths:
        diffs, flips, count = [], 0, 0
        for start in range(prefix, len(tokens) - n, n):
            runtime.reset()
            runtime.forward(tokens[:start], last_only=True)
            together = runtime.forward(tokens[start : start + n])  # [n, V]
            runtime.rollback(start)
            alone = np.stack([runtime.forward([t])[-1] for t in tokens[start : start + n]])
            diffs.append(float(np.abs(together - alone).max()))
            flips += int((together.argmax(-1) != alone.argmax(-1)).sum())
            count += n
        rows.append({"width": n, "max_abs_diff": round(max(diffs), 4),
                     "median_max_abs_diff": round(float(np.median(diffs)), 4),
                     "argmax_flips": flips, "tokens": count})  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", type=Path)
    parser.add_argument("--widths", default="2,5,9")
    parser.add_argument("--tokens", type=int, default=192)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    from onnx_fidelity import source_text  # the same text, beside this script

    from edgespec.runtimes import RuntimeOptions, open_runtime

    widths = [int(w) for w in args.widths.split(",")]
    report = []
    for path in args.models:
        runtime = open_runtime(path, RuntimeOptions(n_ctx=args.tokens + 16))
        tokens = runtime.tokenize(source_text(), special=False)[: args.tokens]
        rows = measure(runtime, tokens, prefix=64, widths=widths)
        report.append({"model": str(path), "runtime": type(runtime).__name__, "rows": rows})
        for r in rows:
            name = type(runtime).__name__
            print(f"{name:<16} n={r['width']}: max |diff| {r['max_abs_diff']:.3f} (median "
                  f"{r['median_max_abs_diff']:.3f}), argmax flips {r['argmax_flips']}"
                  f"/{r['tokens']}")  # fmt: skip
        del runtime
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
