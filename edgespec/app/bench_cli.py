"""`edgespec bench`: every method on prompt suites; a table as it goes, JSON and a plot."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from edgespec.app.bench import METHODS, PEER, Bench, Row
from edgespec.app.models import resolve_model
from edgespec.app.options import DRAFT_HELP, TARGET_HELP, add_runtime_args, runtime_options
from edgespec.app.peer import run_peer
from edgespec.app.suites import Prompt, load_suite
from edgespec.calibrate import device_description
from edgespec.errors import EdgespecError
from edgespec.pair import open_pair
from edgespec.runtimes import RuntimeOptions


def run_bench(
    target: str | Path,
    draft: str | Path | None,
    prompts: Sequence[Prompt],
    methods: Sequence[str],
    ks: Sequence[int],
    max_tokens: int,
    opts: RuntimeOptions,
    k_max: int = 16,
    progress: Callable[[dict], None] | None = None,
) -> dict:
    """Plain first (the reference), then every method x k; returns the JSON-ready report."""
    for m in methods:
        if m not in METHODS:
            raise EdgespecError(f"unknown method {m!r}; choose from {', '.join(METHODS)}")
    pair = open_pair(target, draft, opts)
    bench = Bench(pair, k_max)
    tokens = [bench.prompt_tokens(p) for p in prompts]
    rows = [bench.run_method("plain", None, prompts, tokens, max_tokens, None)]
    refs = bench.last_results
    report_progress(progress, rows[0], rows[0])
    for method in methods:
        for k in ks if method in ("model", "ngram", PEER) else [None]:
            if method == "plain":
                break
            if method == PEER:
                row = run_peer(bench, k or 4, prompts, tokens, max_tokens, refs)
            else:
                row = bench.run_method(method, k, prompts, tokens, max_tokens, refs)
            rows.append(row)
            report_progress(progress, row, rows[0])
    plain_tps = rows[0].tokens_per_second
    return {
        "machine": device_description(),
        "target": str(target),
        "draft": str(draft) if draft else None,
        "runtimes": pair.backend_names().split("+"),
        "max_tokens": max_tokens,
        "prompts": [p.id for p in prompts],
        "command": " ".join(shlex.quote(a) for a in sys.argv),
        "rows": [row.as_dict(plain_tps) for row in rows],
    }


def report_progress(progress: Callable[[dict], None] | None, row: Row, plain: Row) -> None:
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
        from edgespec.app.plot import plot

        plot(all_rows, Path(args.plot))
        print(f"wrote {args.plot}")
    return 0


def add_bench_parser(sub) -> None:
    p = sub.add_parser("bench", help="speed and exactness of each method on prompt suites")
    p.add_argument("--target", required=True, help=TARGET_HELP + ", or demo-target")
    p.add_argument("--draft", help=DRAFT_HELP + ", or demo-draft")
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
