"""Every pass of plain and `auto`, timed, with its model, width and thread count.

Plain and `auto` take turns per prompt (the order reversed every other repeat). The summary
splits `auto`'s target time into one-token passes at full threads, passes at fewer threads
and wider passes, against plain's; then, per model and width, what `auto`'s passes cost
against plain's one-token pass (the cost curve as the loop meets it, the draft's passes
included), and `auto`'s decode time as target passes + draft passes + the loop's own time.
Any back-end (llama.cpp reports its thread count per pass; ONNX Runtime's is fixed).

    python bench/pass_times.py --target demo.gguf --prompts translate-03,roleplay-02 \
        [--suite open] [--repeat 2] [--threads 2] [--json out.json]
    python bench/pass_times.py --target ~/.cache/edgespec/demo-onnx --suite open --limit 24 \
        --repeat 1
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import defaultdict

from edgespec.app.bench import Bench
from edgespec.app.suites import load_suite
from edgespec.backends import RuntimeOptions
from edgespec.hugepages import reexec_with_tunable
from edgespec.pair import open_pair

METHODS = ("plain", "auto")


def timed_runs(bench: Bench, prompts, repeat: int, max_tokens: int) -> tuple[list, dict]:
    """(method, model, width, seconds, threads) per pass, width 0 marking a request's start
    and method "plain-prefill" or "auto-prefill" a pass of its prompt; and each method's
    decode seconds and tokens."""
    passes: list[tuple] = []
    method = ["plain"]
    for name in METHODS:  # a request's prompt passes (begin) are labelled apart
        decoder = bench.decoder_for(name, None)

        def begin(*args, begin=decoder.begin, name=name, **kwargs):
            method[0] = f"{name}-prefill"
            try:
                return begin(*args, **kwargs)
            finally:
                method[0] = name

        decoder.begin = begin  # type: ignore[method-assign]

    def time_passes(runtime, model: str) -> None:
        run = runtime.run

        def timed_run(tokens, rows):
            t0 = time.perf_counter()
            out = run(tokens, rows)
            seconds = time.perf_counter() - t0
            passes.append((method[0], model, len(tokens), seconds, threads_now(runtime)))
            return out

        runtime.run = timed_run

    time_passes(bench.target, "target")
    if bench.pair.draft is not None:
        time_passes(bench.pair.draft, "draft")
    decode = {m: [0.0, 0] for m in METHODS}
    for r in range(repeat):
        for prompt in prompts:
            tokens = bench.prompt_tokens(prompt)
            for method[0] in METHODS if r % 2 == 0 else METHODS[::-1]:
                passes.append((method[0], "target", 0, 0.0, 0))
                stats = bench.generate(method[0], None, prompt, tokens, max_tokens).stats
                decode[method[0]][0] += stats.t_decode
                decode[method[0]][1] += stats.n_generated
                print(prompt.id, method[0], stats.summary(), flush=True)
    return passes, decode


def threads_now(runtime) -> int:
    return getattr(runtime, "threads_now", 0)  # 0: the back-end's pool is fixed (ONNX)


def summary(passes: list[tuple], decode: dict, n_threads: int) -> dict:
    for method in METHODS:
        mine = [p for p in passes if p[0] == method and p[1] == "target" and p[2] > 0]
        full = [s for *_, n, s, th in mine if n == 1 and th in (0, n_threads)]
        fewer = [s for *_, n, s, th in mine if n == 1 and 0 < th < n_threads]
        wide = [s for *_, n, s, _ in mine if n > 1]
        print(
            f"{method:<6} one-token at {n_threads} threads: {len(full)} passes, "
            f"{sum(full):.2f} s, median {1e3 * statistics.median(full):.1f} ms | "
            f"fewer threads: {len(fewer)}, {sum(fewer):.2f} s | wider: {len(wide)}, "
            f"{sum(wide):.2f} s"
        )
    return by_width(passes, decode)


def by_width(passes: list[tuple], decode: dict) -> dict:
    """auto's passes per model and width against plain's one-token target pass, and its
    decode time split (the prompt's passes left out, as from decode time)."""
    one = statistics.median(
        s for m, model, n, s, _ in passes if (m, model, n) == ("plain", "target", 1)
    )
    groups = defaultdict(list)
    for m, model, n, s, _ in passes:
        if m == "auto" and n > 0:
            groups[(model, n)].append(s)
    print(f"auto's passes (plain's one-token target pass: {1e3 * one:.2f} ms)")
    rows = []
    for (model, n), seconds in sorted(groups.items()):
        median = statistics.median(seconds)
        rows.append({"model": model, "width": n, "passes": len(seconds),
                     "median_ms": round(1e3 * median, 2), "ratio": round(median / one, 4),
                     "seconds": round(sum(seconds), 3)})  # fmt: skip
        print(f"  {model:<6} width {n:>2}: {len(seconds):>5} passes, median "
              f"{1e3 * median:6.2f} ms = {median / one:.3f} x, {sum(seconds):7.2f} s")  # fmt: skip
    spent = {model: sum(sum(v) for (m, _), v in groups.items() if m == model)
             for model in ("target", "draft")}  # fmt: skip
    t_auto, n_auto = decode["auto"]
    t_plain, n_plain = decode["plain"]
    split = {"decode_s": round(t_auto, 4), "target_s": round(spent["target"], 4),
             "draft_s": round(spent["draft"], 4),
             "loop_s": round(t_auto - spent["target"] - spent["draft"], 4),
             "speedup": round((n_auto / t_auto) / (n_plain / t_plain), 4)}  # fmt: skip
    print("auto's decode: " + ", ".join(f"{k} {v}" for k, v in split.items()))
    return {"plain_one_token_ms": round(1e3 * one, 2), "auto_passes": rows, "auto": split}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", required=True)
    ap.add_argument("--prompts", help="comma-separated prompt ids (default: --limit of them)")
    ap.add_argument("--limit", type=int, help="the suite's first N prompts")
    ap.add_argument("--suite", default="open")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--json")
    args = ap.parse_args()
    prompts = load_suite(args.suite, None if args.prompts else args.limit)
    if args.prompts:
        ids = set(args.prompts.split(","))
        prompts = [p for p in prompts if p.id in ids]
    pair = open_pair(args.target, None, RuntimeOptions(n_ctx=4096, n_threads=args.threads))
    passes, decode = timed_runs(Bench(pair), prompts, args.repeat, args.max_tokens)
    report = summary(passes, decode, args.threads)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**report, "passes": passes}, f)


if __name__ == "__main__":
    reexec_with_tunable()  # time passes in the memory the edgespec command gives them
    main()
