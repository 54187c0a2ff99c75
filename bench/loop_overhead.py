"""The loop's own cost per verify step, with a runtime that costs nothing.

A zero-cost runtime hands back preallocated [k+1, V] logits, so what is timed is everything
edgespec does around the model: drafting bookkeeping, verification, rollback, detokenizing,
stop checks, stats. Greedy, temperature 0.8 + top-k 40 + top-p 0.9, and temperature 0.8 alone,
at k = 1, 4, 8, V = 151,936; every draft is accepted, so each step reaches all k+1 rows. Each
figure is the median of several runs (the machine's load average is printed with them).
With --target, the same k+1-token verify pass is timed on the real model for the share.

    python bench/loop_overhead.py [--target model.gguf] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np

from edgespec.controller import FixedPolicy
from edgespec.drafters import Draft
from edgespec.engine import SpeculativeDecoder
from edgespec.hugepages import reexec_with_tunable
from edgespec.runtimes.base import VocabInfo
from edgespec.sampling import SamplingParams

V = 151_936


class FreeRuntime:
    """Logits whose argmax is always token 7, so every draft of 7s is accepted."""

    def __init__(self, n_vocab: int = V, n_ctx: int = 1 << 20) -> None:
        self.n_vocab, self.n_ctx, self.n_past = n_vocab, n_ctx, 0
        rng = np.random.default_rng(0)
        self.logits = rng.standard_normal((16, n_vocab)).astype(np.float32)
        self.logits[:, 7] = 30.0

    def forward(self, tokens, *, last_only=False):
        self.n_past += len(tokens)
        return self.logits[: 1 if last_only else len(tokens)].copy()  # a back-end copies too

    def rollback(self, n_past):
        self.n_past = n_past

    def reset(self):
        self.n_past = 0

    def tokenize(self, text, *, special):
        return [1, 2, 3]

    def detokenize(self, tokens):
        return b"ab" * len(tokens)

    def vocab_info(self):
        return VocabInfo(self.n_vocab, "bpe", None, 0, frozenset({0}), "-")


class ConstantDrafter:
    name = "const"

    def propose(self, context, k, sp):
        return Draft(np.full(k, 7, dtype=np.int32), None)

    def accept(self, n):
        pass

    def sync(self, context):
        pass

    def reset(self, rng):
        pass


def loop_cost_us(k: int, sp: SamplingParams, steps: int = 60, runs: int = 9) -> float:
    """Median over runs of the mean cost per step of a run."""
    rt = FreeRuntime()
    dec = SpeculativeDecoder(rt, [ConstantDrafter()], FixedPolicy("const", k))
    dec.generate([1, 2, 3], max_tokens=5 * (k + 1), sp=sp)  # warm-up
    costs = []
    for _ in range(runs):
        s = dec.generate([1, 2, 3], max_tokens=steps * (k + 1), sp=sp).stats
        costs.append((s.t_decode - s.t_verify) / s.n_steps * 1e6)  # all but the model's pass
    return statistics.median(costs)


def verify_pass_us(target: str, k: int) -> float:
    from edgespec.calibrate import measure_curve
    from edgespec.runtimes import open_runtime

    return measure_curve(open_runtime(target), n_max=k + 1)[k] * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", help="a .gguf target to time the real verify pass")
    ap.add_argument("--json", help="write the table here")
    args = ap.parse_args()
    modes = {
        "greedy": SamplingParams(),
        "T0.8 top-k40 top-p0.9": SamplingParams(0.8, top_k=40, top_p=0.9, seed=0),
        "T0.8": SamplingParams(0.8, seed=0),
    }
    rows = []
    load = os.getloadavg()
    print(f"{os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"{'k':>3} {'mode':>22} {'loop us/step':>13} {'verify us':>10} {'share':>7}")
    for k in (1, 4, 8):
        verify = verify_pass_us(args.target, k) if args.target else None
        for mode, sp in modes.items():
            loop = loop_cost_us(k, sp)
            share = loop / (loop + verify) if verify else None
            rows.append(
                {"k": k, "mode": mode, "loop_us": loop, "verify_us": verify, "share": share}
            )
            shown = f"{verify:>10.0f} {share:>7.2%}" if verify else f"{'-':>10} {'-':>7}"
            print(f"{k:>3} {mode:>22} {loop:>13.0f} {shown}")
    if args.json:
        with open(args.json, "w") as f:
            record = {"vocab": V, "time": time.time(), "loadavg": load, "rows": rows}
            json.dump(record, f, indent=1)


if __name__ == "__main__":
    reexec_with_tunable()  # time passes in the memory the edgespec command gives them
    main()
