"""Every target pass of plain and `auto` on llama.cpp, timed, with its width and thread count.

Plain and `auto` take turns per prompt (the order reversed every other repeat). The summary
splits `auto`'s pass time into one-token passes at full threads, passes at fewer threads and
wider passes, against plain's: where `auto` spends what plain does not.

    python bench/pass_times.py --target demo.gguf --prompts translate-03,roleplay-02 \
        [--suite open] [--repeat 2] [--threads 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from edgespec.app.bench import Bench
from edgespec.app.suites import load_suite
from edgespec.pair import open_pair
from edgespec.runtimes import RuntimeOptions


def timed_runs(bench: Bench, prompts, repeat: int, max_tokens: int) -> list[tuple]:
    """(method, width, seconds, threads) per target pass; width 0 marks a request's start."""
    target = bench.target
    passes: list[tuple] = []
    method = ["plain"]
    run = target.run

    def timed_run(tokens, rows):
        t0 = time.perf_counter()
        out = run(tokens, rows)
        passes.append((method[0], len(tokens), time.perf_counter() - t0, target.threads_now))
        return out

    target.run = timed_run
    for r in range(repeat):
        for prompt in prompts:
            tokens = bench.prompt_tokens(prompt)
            for method[0] in ("plain", "auto") if r % 2 == 0 else ("auto", "plain"):
                passes.append((method[0], 0, 0.0, 0))
                stats = bench.generate(method[0], None, prompt, tokens, max_tokens).stats
                print(prompt.id, method[0], stats.summary(), flush=True)
    return passes


def summary(passes: list[tuple], n_threads: int) -> None:
    for method in ("plain", "auto"):
        mine = [p for p in passes if p[0] == method and p[1] > 0]
        full = [s for _, n, s, th in mine if n == 1 and th == n_threads]
        fewer = [s for _, n, s, th in mine if n == 1 and th < n_threads]
        wide = [s for _, n, s, _ in mine if 1 < n < 32]  # longer ones are prefills
        print(
            f"{method:<6} one-token at {n_threads} threads: {len(full)} passes, "
            f"{sum(full):.2f} s, median {1e3 * statistics.median(full):.1f} ms | "
            f"fewer threads: {len(fewer)}, {sum(fewer):.2f} s | wider: {len(wide)}, "
            f"{sum(wide):.2f} s"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", required=True)
    ap.add_argument("--prompts", required=True, help="comma-separated prompt ids")
    ap.add_argument("--suite", default="open")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--json")
    args = ap.parse_args()
    ids = set(args.prompts.split(","))
    prompts = [p for p in load_suite(args.suite) if p.id in ids]
    pair = open_pair(args.target, None, RuntimeOptions(n_ctx=4096, n_threads=args.threads))
    passes = timed_runs(Bench(pair), prompts, args.repeat, args.max_tokens)
    summary(passes, args.threads)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(passes, f)


if __name__ == "__main__":
    main()
