"""`edgespec bench` and `edgespec demo`: is it faster on these prompts, and is the answer the same?

Every method runs greedy on the same runtimes; plain decoding through the same loop is the
reference for both speed and output. llama-cpp-python's own prompt-lookup decoding runs as
the peer, on its own Llama object with the same model and thread settings.
"""

from __future__ import annotations

import argparse
import json
import logging
import shlex
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edgespec.calibrate import device_description
from edgespec.chat import render_chat
from edgespec.controller import AdaptivePolicy, FixedPolicy, Policy
from edgespec.engine import Result, SpeculativeDecoder
from edgespec.errors import EdgespecError
from edgespec.loader import SpecOptions, load_decoder
from edgespec.runtimes import Runtime, RuntimeOptions
from edgespec.suites import Prompt, load_suite

log = logging.getLogger(__name__)

PEER = "llama-cpp-python-pld"
METHODS = ("plain", "model", "ngram", "auto", PEER)
NEAR_TIE = 0.5  # logits; llama.cpp CPU batch-vs-single noise measured up to ~0.47


@dataclass
class Run:
    """One prompt under one method."""

    prompt_id: str
    n_generated: int
    t_decode: float
    identical: bool
    departure: int | None = None  # index of the first token that differs from plain
    departure_gap: float | None = None  # plain's top-two logit gap there
    stats: dict = field(default_factory=dict)


@dataclass
class Row:
    method: str
    k: int | None
    runs: list[Run]

    @property
    def tokens_per_second(self) -> float:
        t = sum(r.t_decode for r in self.runs)
        return sum(r.n_generated for r in self.runs) / t if t else 0.0

    def stat_sum(self, key: str) -> float:
        return sum(r.stats.get(key, 0) for r in self.runs)

    def as_dict(self, plain_tps: float) -> dict:
        drafted, steps = self.stat_sum("n_draft_tokens"), self.stat_sum("n_steps")
        t_decode = sum(r.t_decode for r in self.runs) or 1.0
        return {
            "method": self.method,
            "k": self.k if self.k is not None else ("-" if self.method == "plain" else "auto"),
            "tokens_per_second": round(self.tokens_per_second, 3),
            "speedup": round(self.tokens_per_second / plain_tps, 4) if plain_tps else None,
            "acceptance_rate": round(self.stat_sum("n_accepted") / drafted, 4) if drafted else None,
            "mean_acceptance_length": (
                round(sum(r.n_generated for r in self.runs) / steps, 4) if steps else None
            ),
            "draft_share": round(self.stat_sum("t_draft_s") / t_decode, 4),
            "verify_share": round(self.stat_sum("t_verify_s") / t_decode, 4),
            "plain_steps": int(self.stat_sum("n_plain_steps")),
            "identical": sum(r.identical for r in self.runs),
            "prompts": len(self.runs),
            "departures": [
                {"prompt": r.prompt_id, "index": r.departure, "top2_gap": r.departure_gap}
                for r in self.runs
                if not r.identical
            ],
            "acceptance_by_pos": acceptance_by_pos(self.runs),
            "runs": [r.__dict__ for r in self.runs],
        }


def acceptance_by_pos(runs: Sequence[Run]) -> list[float]:
    drafted: list[float] = []
    accepted: list[float] = []
    for r in runs:
        by_pos = r.stats.get("acceptance_by_pos", [])
        counts = r.stats.get("drafted_by_pos", [])
        for i, (a, d) in enumerate(zip(by_pos, counts)):
            if i >= len(drafted):
                drafted.append(0.0)
                accepted.append(0.0)
            drafted[i] += d
            accepted[i] += a * d
    return [round(a / d, 4) if d else 0.0 for a, d in zip(accepted, drafted)]


def token_budget(prompt: Prompt, max_tokens: int) -> int:
    """A request's own max_tokens caps it further; it never raises the run's limit."""
    return min(prompt.max_tokens or max_tokens, max_tokens)


def first_departure(a: Sequence[int], b: Sequence[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def top2_gap(runtime: Runtime, context: Sequence[int]) -> float:
    """Gap between the two largest logits for the token after context (fresh evaluation)."""
    runtime.reset()
    logits = runtime.forward(list(context), last_only=True)[-1]
    runtime.reset()
    top2 = np.partition(logits, -2)[-2:]
    return float(top2[1] - top2[0])


class Bench:
    def __init__(self, decoder: SpeculativeDecoder, target_path: Path, opts: RuntimeOptions):
        self.decoder = decoder
        self.target = decoder.target
        self.target_path = target_path
        self.opts = opts
        self.adaptive = decoder.policy if isinstance(decoder.policy, AdaptivePolicy) else None

    def prompt_tokens(self, prompt: Prompt) -> list[int]:
        info = self.target.vocab_info()
        text = render_chat(
            self.target.chat_template(),
            prompt.messages,
            bos_token=self.target.special_token_text(info.bos_id),  # type: ignore[attr-defined]
            eos_token=self.target.special_token_text(info.eos_id),  # type: ignore[attr-defined]
        )
        return self.target.tokenize(text, special=True)

    def policy(self, method: str, k: int | None) -> Policy:
        if method == "plain":
            return FixedPolicy(None, 0)
        if method == "auto":
            if self.adaptive is None:
                raise EdgespecError("method auto needs the adaptive controller (drop --k)")
            return self.adaptive
        return FixedPolicy(method, k or 4)

    def run_method(self, method: str, k: int | None, prompts, tokens, max_tokens, reference):
        drafters = self.decoder.drafters
        if method in ("model", "ngram") and method not in drafters:
            raise EdgespecError(f"method {method} needs its drafter: pass --draft for model")
        decoder = SpeculativeDecoder(self.target, list(drafters.values()), self.policy(method, k))
        runs, results = [], []
        for prompt, toks, ref in zip(prompts, tokens, reference or [None] * len(prompts)):
            result = decoder.generate(toks, max_tokens=token_budget(prompt, max_tokens))
            runs.append(self.compare(prompt, toks, result, ref))
            results.append(result)
        self.last_results = results
        return Row(method, k if method not in ("plain", "auto") else None, runs)

    def compare(self, prompt: Prompt, toks, result: Result, ref: Result | None) -> Run:
        stats = result.stats.as_dict()
        stats["drafted_by_pos"] = list(result.stats.drafted_by_pos)
        run = Run(prompt.id, result.stats.n_generated, result.stats.t_decode, True, stats=stats)
        if ref is not None:
            run.departure = first_departure(ref.tokens, result.tokens)
            run.identical = run.departure is None
            if run.departure is not None and run.departure < len(ref.tokens):
                run.departure_gap = top2_gap(self.target, toks + ref.tokens[: run.departure])
        return run

    def run_peer(self, k: int, prompts, tokens, max_tokens, reference) -> Row:
        from llama_cpp import Llama
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        llm = Llama(
            str(self.target_path),
            n_ctx=self.target.n_ctx,
            n_threads=self.opts.n_threads or None,
            n_gpu_layers=self.opts.n_gpu_layers,
            draft_model=LlamaPromptLookupDecoding(num_pred_tokens=k),
            logits_all=True,  # it sizes its scores buffer by this argument, not by the draft
            verbose=False,
        )
        runs = []
        for prompt, toks, ref in zip(prompts, tokens, reference):
            llm.reset()  # each request from an empty cache, as ours run
            out: list[int] = []
            t_first = 0.0
            for token in llm.generate(toks, temp=0.0, top_k=1, reset=True):
                if not out:
                    t_first = time.perf_counter()
                if llm.token_eos() == token or token in self.decoder.eog_ids:
                    break
                out.append(token)
                if len(out) >= (token_budget(prompt, max_tokens)):
                    break
            t_end = time.perf_counter()
            run = self.compare(prompt, toks, Result("", out, "stop", ref.stats), ref)
            # Decode time from the first token on: its prefill is not ours to measure.
            run.n_generated, run.t_decode, run.stats = len(out) - 1, t_end - t_first, {}
            runs.append(run)
        del llm
        return Row(PEER, k, runs)


def run_bench(
    target: str | Path,
    draft: str | Path | None,
    prompts: Sequence[Prompt],
    methods: Sequence[str],
    ks: Sequence[int],
    max_tokens: int,
    opts: RuntimeOptions,
    k_max: int = 16,
    progress=None,
) -> dict:
    """Plain first (the reference), then every method x k; returns the JSON-ready report."""
    for m in methods:
        if m not in METHODS:
            raise EdgespecError(f"unknown method {m!r}; choose from {', '.join(METHODS)}")
    decoder = load_decoder(target, draft, SpecOptions("auto", None, k_max), opts)
    bench = Bench(decoder, Path(target), opts)
    tokens = [bench.prompt_tokens(p) for p in prompts]
    rows = [bench.run_method("plain", None, prompts, tokens, max_tokens, None)]
    refs = bench.last_results
    report_progress(progress, rows[0], rows[0])
    for method in methods:
        for k in ks if method in ("model", "ngram", PEER) else [None]:
            if method == "plain":
                break
            if method == PEER:
                row = bench.run_peer(k or 4, prompts, tokens, max_tokens, refs)
            else:
                row = bench.run_method(method, k, prompts, tokens, max_tokens, refs)
            rows.append(row)
            report_progress(progress, row, rows[0])
    plain_tps = rows[0].tokens_per_second
    return {
        "machine": device_description(),
        "target": str(target),
        "draft": str(draft) if draft else None,
        "runtimes": [type(decoder.target).__name__]
        + [type(d.runtime).__name__ for d in decoder.drafters.values() if hasattr(d, "runtime")],
        "max_tokens": max_tokens,
        "prompts": [p.id for p in prompts],
        "command": " ".join(shlex.quote(a) for a in sys.argv),
        "rows": [row.as_dict(plain_tps) for row in rows],
    }


def report_progress(progress, row: Row, plain: Row) -> None:
    if progress:
        progress(row.as_dict(plain.tokens_per_second))


TABLE = (
    ("method", "{method:<22}"),
    ("k", "{k!s:>4}"),
    ("tok/s", "{tokens_per_second:>7.1f}"),
    ("speedup", "{speedup:>7.2f}"),
    ("accept", "{acceptance_rate:>6}"),
    ("len", "{mean_acceptance_length:>5}"),
    ("draft%", "{draft_share:>6.0%}"),
    ("verify%", "{verify_share:>7.0%}"),
    ("plain", "{plain_steps:>5}"),
    ("same", "{identical:>3}/{prompts:<3}"),
)


def table_header() -> str:
    widths = [len(fmt.format(**SAMPLE_ROW)) for _, fmt in TABLE]
    return " ".join(
        f"{name:>{w}}" if i else f"{name:<{w}}"
        for i, ((name, _), w) in enumerate(zip(TABLE, widths))
    )


SAMPLE_ROW = {
    "method": "",
    "k": "",
    "tokens_per_second": 0.0,
    "speedup": 0.0,
    "acceptance_rate": "",
    "mean_acceptance_length": "",
    "draft_share": 0.0,
    "verify_share": 0.0,
    "plain_steps": 0,
    "identical": 0,
    "prompts": 0,
}


def table_line(row: dict) -> str:
    shown = dict(row)
    for key in ("acceptance_rate", "mean_acceptance_length"):
        shown[key] = "-" if row[key] is None else f"{row[key]:.2f}"
    return " ".join(fmt.format(**shown) for _, fmt in TABLE)


def parse_ks(text: str) -> list[int]:
    try:
        ks = [int(k) for k in text.split(",") if k]
    except ValueError:
        raise EdgespecError(f"--k takes numbers separated by commas, got {text!r}") from None
    if not ks or min(ks) < 1:
        raise EdgespecError(f"--k values must be >= 1, got {text!r}")
    return ks


def cmd_bench(args: argparse.Namespace) -> int:
    from edgespec.cli import runtime_options
    from edgespec.models import resolve_model

    target = resolve_model(args.target)
    draft = resolve_model(args.draft) if args.draft else None
    methods = [m for m in args.methods.split(",") if m]
    ks = parse_ks(args.k)
    all_rows = {}
    for suite in args.suite or ["edit"]:
        prompts = load_suite(suite, args.limit)
        print(f"suite {suite}: {len(prompts)} prompts, max {args.max_tokens} tokens")
        print(table_header())
        report = run_bench(
            target,
            draft,
            prompts,
            methods,
            ks,
            args.max_tokens,
            runtime_options(args),
            k_max=args.k_max,
            progress=lambda row: print(table_line(row), flush=True),
        )
        all_rows[suite] = report
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"suites": all_rows}, indent=1))
        print(f"wrote {args.json}")
    if args.plot:
        plot(all_rows, Path(args.plot))
        print(f"wrote {args.plot}")
    return 0


def plot(reports: dict, out: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise EdgespecError("--plot needs matplotlib: pip install 'edgespec[plot]'") from None
    fig, axes = plt.subplots(len(reports), 2, figsize=(11, 4 * len(reports)), squeeze=False)
    for (suite, report), (ax_k, ax_pos) in zip(reports.items(), axes):
        for method in {r["method"] for r in report["rows"]}:
            rows = [r for r in report["rows"] if r["method"] == method and r["k"] != "auto"]
            if rows:
                ax_k.plot([r["k"] for r in rows], [r["speedup"] for r in rows], "o-", label=method)
            for r in report["rows"]:
                if r["method"] == method and r["acceptance_by_pos"]:
                    label = f"{method} k={r['k']}"
                    ax_pos.plot(
                        range(1, len(r["acceptance_by_pos"]) + 1),
                        r["acceptance_by_pos"],
                        ".-",
                        label=label,
                    )
        ax_k.axhline(1.0, color="grey", lw=0.8)
        ax_k.set(title=f"{suite}: speedup vs k", xlabel="k", ylabel="speedup over plain")
        ax_pos.set(
            title=f"{suite}: acceptance by draft position",
            xlabel="position",
            ylabel="acceptance rate",
        )
        ax_k.legend(fontsize=7)
        ax_pos.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def add_bench_parser(sub) -> None:
    from edgespec.cli import add_runtime_args

    p = sub.add_parser("bench", help="speed and exactness of each method on prompt suites")
    p.add_argument("--target", required=True, help="target .gguf, or demo-target")
    p.add_argument("--draft", help="draft .gguf, or demo-draft")
    p.add_argument(
        "--suite",
        action="append",
        default=None,
        help="code | edit | chat | FILE.jsonl (repeatable; default edit)",
    )
    p.add_argument("--methods", default="plain,auto,ngram,model," + PEER)
    p.add_argument("--k", default="4", help="draft lengths for fixed-k methods, e.g. 1,2,4,8")
    p.add_argument("--k-max", type=int, default=16, help="longest draft for method auto")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--limit", type=int, default=None, help="first N prompts of each suite")
    p.add_argument("--json", help="write every number here")
    p.add_argument("--plot", help="write a PNG: speedup vs k, acceptance by position")
    add_runtime_args(p)
    p.set_defaults(func=cmd_bench)


# --- edgespec demo ---------------------------------------------------------------------------

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
    from edgespec.cli import runtime_options
    from edgespec.models import fetch

    target, draft = fetch("demo")
    decoder = load_decoder(
        target, draft, SpecOptions("auto", None, args.k_max), runtime_options(args)
    )
    bench = Bench(decoder, Path(target), runtime_options(args))
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
            d = row.as_dict(plain.tokens_per_second)
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
    from edgespec.cli import add_runtime_args

    p = sub.add_parser("demo", help="fetch the demo pair; plain vs speculative, side by side")
    p.add_argument("--max-tokens", type=int, default=192)
    p.add_argument("--k-max", type=int, default=16)
    p.add_argument("--show", action="store_true", help="print the generated text too")
    add_runtime_args(p)
    p.set_defaults(func=cmd_demo, n_ctx=2048)
