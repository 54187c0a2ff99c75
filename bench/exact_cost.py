"""What exactness costs on a back-end: plain decoding and `auto` with the default kernels
against the fastest (`--no-exact`), the two configurations taking turns prompt by prompt in
one process (so a change of load falls on both), each configuration's `auto` checked token
for token against its own plain decoding. Prints a table per suite and writes JSON.

    python bench/exact_cost.py --target ~/.cache/edgespec/demo-onnx --suite edit --suite chat
        [--draft DRAFT.gguf] [--limit 8] [--max-tokens 128] [--exact-kernels default|on]
        [--temperature 0.7 --top-p 0.9 --seed 1] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from edgespec.app.bench_runs import Bench, machine_info, machine_line
from edgespec.app.suites import load_suite
from edgespec.backends import RuntimeOptions
from edgespec.pair import open_pair
from edgespec.sampling import SamplingParams

METHODS = ("plain", "auto")


def measure(benches: dict[str, Bench], prompts, max_tokens: int) -> dict:
    """Per configuration and method: tokens, seconds, and the prompts whose auto output is
    its plain output; the configurations in turn, the first alternating by prompt."""
    totals = {c: {m: [0, 0.0] for m in METHODS} for c in benches}
    identical = dict.fromkeys(benches, 0)
    for i, prompt in enumerate(prompts):
        order = list(benches) if i % 2 == 0 else list(benches)[::-1]
        for config in order:
            bench = benches[config]
            tokens = [bench.prompt_tokens(prompt)]
            plain = bench.run_method("plain", None, [prompt], tokens, max_tokens, None)
            reference = bench.last_results
            auto = bench.run_method("auto", None, [prompt], tokens, max_tokens, reference)
            identical[config] += auto.runs[0].identical
            for method, row in zip(METHODS, (plain, auto)):
                totals[config][method][0] += row.runs[0].n_generated
                totals[config][method][1] += row.runs[0].t_decode
    return {
        c: {
            **{m: {"tokens": n, "seconds": round(s, 4), "tok_s": n / s} for m, (n, s) in t.items()},
            "identical": identical[c],
        }
        for c, t in totals.items()
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", required=True)
    ap.add_argument("--draft")
    ap.add_argument("--suite", action="append")
    ap.add_argument("--limit", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--exact-kernels", choices=("default", "on"), default="default")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json")
    args = ap.parse_args()
    sp = SamplingParams(args.temperature, top_p=args.top_p, seed=args.seed)
    exact = None if args.exact_kernels == "default" else True
    configs = {"exact": RuntimeOptions(exact=exact), "fastest": RuntimeOptions(exact=False)}
    benches = {c: Bench(open_pair(args.target, args.draft, o), 8, sp) for c, o in configs.items()}
    print(machine_line(machine_info()))
    report = {"machine": machine_info(), "sampling": repr(sp), "suites": {}}
    for suite in args.suite or ["edit"]:
        prompts = load_suite(suite, args.limit)
        found = measure(benches, prompts, args.max_tokens)
        report["suites"][suite] = found
        print(f"suite {suite} ({len(prompts)} prompts, {args.max_tokens} tokens)")
        print(f"{'method':<7} {'exact tok/s':>11} {'fastest tok/s':>13} {'ratio':>6} identical")
        for m in METHODS:
            e, f = found["exact"][m]["tok_s"], found["fastest"][m]["tok_s"]
            same = f"{found['exact']['identical']} / {found['fastest']['identical']}"
            print(f"{m:<7} {e:>11.2f} {f:>13.2f} {e / f:>6.3f} {same if m == 'auto' else ''}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
