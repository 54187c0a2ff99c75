"""`edgespec demo`: fetch the demo pair; plain and speculative decoding side by side."""

from __future__ import annotations

import argparse

from edgespec.app.bench import Bench
from edgespec.app.models import fetch
from edgespec.app.options import add_runtime_args, runtime_options
from edgespec.app.suites import Prompt
from edgespec.pair import open_pair

DEMO_EDIT = """Add type hints to this function and change nothing else. Reply with the code only.

```python
def moving_average(values, window):
    if window <= 0:
        raise ValueError("window must be positive")
    averages = []
    total = 0.0
    for i, value in enumerate(values):
        total += value
        if i >= window:
            total -= values[i - window]
        if i >= window - 1:
            averages.append(total / window)
    return averages
```"""

DEMO_CODE = "Write a Python function that checks whether a string is a palindrome, ignoring case."

DEMO_PROMPTS = (
    Prompt("edit: add type hints", ({"role": "user", "content": DEMO_EDIT},), None),
    Prompt("code: palindrome", ({"role": "user", "content": DEMO_CODE},), None),
)


def cmd_demo(args: argparse.Namespace) -> int:
    target, draft = fetch("demo")
    bench = Bench(open_pair(target, draft, runtime_options(args)), args.k_max)
    print(
        f"{'request':<22} {'method':<7} {'tokens':>6} {'tok/s':>6} {'speedup':>7} "
        f"{'accept':>6} {'len':>5} {'identical':>9}"
    )
    for prompt in DEMO_PROMPTS:
        tokens = [bench.prompt_tokens(prompt)]
        plain = bench.run_method("plain", None, [prompt], tokens, args.max_tokens, None)
        ref = bench.last_results
        spec = bench.run_method("auto", None, [prompt], tokens, args.max_tokens, ref)
        for row in (plain, spec):
            d = row.as_dict(plain)
            same = "yes" if d["identical"] == 1 else "NO"
            print(
                f"{prompt.id:<22} {d['method']:<7} {row.runs[0].n_generated:>6} "
                f"{d['tokens_per_second']:>6.1f} {d['speedup']:>7.2f} "
                f"{fmt(d['acceptance_rate']):>6} {fmt(d['mean_acceptance_length']):>5} "
                f"{same if row is spec else '-':>9}"
            )
        if args.show:
            print(bench.last_results[0].text.rstrip() + "\n")
    return 0


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def add_demo_parser(sub) -> None:
    p = sub.add_parser("demo", help="fetch the demo pair; plain vs speculative, side by side")
    p.add_argument("--max-tokens", type=int, default=192)
    p.add_argument("--k-max", type=int, default=16)
    p.add_argument("--show", action="store_true", help="print the generated text too")
    add_runtime_args(p)
    p.set_defaults(func=cmd_demo, n_ctx=2048)
