"""`edgespec bench`: every method on prompt suites, in turn per prompt; the table, JSON, a plot."""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from edgespec.app.bench_runs import (
    CI_METHOD,
    FIXED_K_METHODS,
    METHODS,
    PEER,
    PEER_PLAIN,
    PEER_PLAINS,
    Bench,
    Row,
    Run,
    inexact_note,
    machine_info,
    machine_line,
    paired_speedup,
    token_budget,
)
from edgespec.app.models import resolve_model
from edgespec.app.options import (
    DRAFT_HELP,
    HEAD_HELP,
    TARGET_HELP,
    add_draft_confidence_arg,
    add_runtime_args,
    add_sampling_args,
    runtime_options,
    sampling_params,
)
from edgespec.app.peer import PEER_KS, Peer, PeerLlama
from edgespec.app.peer_genai import DRAFT_K, GENAI_DRAFT, GENAI_NGRAM, GENAI_PLAIN, GenaiPeer
from edgespec.app.suites import SUITES, Prompt, load_suite
from edgespec.backends import RuntimeOptions, declares_mtp_layers
from edgespec.engine import Result, Stats
from edgespec.errors import EdgespecError
from edgespec.pair import ModelPair, open_pair
from edgespec.plumbing.progress import progress
from edgespec.runtime import K_MAX
from edgespec.sampling import SamplingParams

DEFAULT_METHODS = "plain,auto,ngram,model," + PEER


@dataclass(frozen=True)
class Variant:
    """One column of the comparison: a method at one k (None: auto or plain)."""

    method: str
    k: int | None = None

    @property
    def label(self) -> str:
        return self.method if self.k is None else f"{self.method} k={self.k}"

    @property
    def baseline(self) -> str:
        """The variant this one's speed is divided by: a peer against its own plain."""
        return PEER_PLAINS.get(self.method, "plain")


def plan_variants(methods: Sequence[str], ks: Sequence[int], peer_ks: Sequence[int]):
    """plain first (the reference), then each method at each k it takes; a peer brings
    its own plain (once), llama-cpp-python's prompt lookup one variant per peer k,
    onnxruntime-genai's draft decoding its default k, its n-gram decoding its adaptive k."""
    for m in methods:
        if m not in METHODS:
            raise EdgespecError(f"unknown method {m!r}; choose from {', '.join(METHODS)}")
    variants = [Variant("plain")]
    for m in dict.fromkeys(methods):
        if m in FIXED_K_METHODS:
            variants += [Variant(m, k) for k in ks]
        elif m == "auto":
            variants.append(Variant(m))
        elif m in PEER_PLAINS:
            if Variant(PEER_PLAINS[m]) not in variants:
                variants.append(Variant(PEER_PLAINS[m]))
            if m == PEER:
                variants += [Variant(PEER, k) for k in peer_ks]
            else:
                variants.append(Variant(m, DRAFT_K if m == GENAI_DRAFT else None))
    return variants


def turn_order(variants: Sequence[Variant], repeat: int) -> list[Variant]:
    """Forward on even repeats, backward on odd ones (A B B A): a drift that is linear in
    time then weighs on every method alike over two repeats."""
    return list(variants) if repeat % 2 == 0 else list(reversed(variants))


def check_bench_sampling(sp: SamplingParams, variants: Sequence[Variant]) -> None:
    """Greedy, or seeded sampling: plain and speculative runs share the seed, so their
    outputs can be compared token for token (unseeded draws could never be); the peers
    are measured greedy only."""
    if sp.greedy:
        return
    if sp.seed is None:
        raise EdgespecError("bench samples only with a seed: add --seed N to --temperature")
    for v in variants:
        if v.method in PEER_PLAINS:
            raise EdgespecError(
                f"method {v.method} is benchmarked greedy only; drop it or --temperature"
            )


def run_bench(target: str | Path, draft: str | Path | None, prompts: Sequence[Prompt], *args, **kw):
    """One suite's report: bench_suites with one suite (the same arguments after prompts)."""
    ((_, report),) = bench_suites(target, draft, {"suite": prompts}, *args, **kw)
    return report


def bench_suites(
    target: str | Path,
    draft: str | Path | None,
    suites: Mapping[str, Sequence[Prompt]],
    methods: Sequence[str],
    ks: Sequence[int],
    max_tokens: int,
    opts: RuntimeOptions,
    k_max: int = K_MAX,
    repeat: int = 1,
    peer_ks: Sequence[int] = PEER_KS,
    sp: SamplingParams = SamplingParams(),
    draft_confidence: float | None = None,
    head: str | Path | None = None,
) -> Iterator[tuple[str, dict]]:
    """Each suite's JSON-ready report as it ends, all on one opened pair: each prompt under
    every variant in turn (plain, auto, ... then the next prompt), a suite `repeat` times.
    head: an EAGLE-3 head for the target (method eagle; auto chooses it among the rest);
    without one, a target's MTP layer is opened where it has one and method mtp or auto
    may draft with it."""
    if repeat < 1:
        raise EdgespecError(f"--repeat must be >= 1, got {repeat}")
    variants = plan_variants(methods, ks, peer_ks)
    check_bench_sampling(sp, variants)  # before the models load: minutes on a small CPU
    use_mtp = any(m in ("auto", "mtp") for m in methods)  # else its layer is not loaded
    pair = open_pair(target, draft, opts, head=head, use_mtp=use_mtp)
    check_peer_targets(pair, variants)
    bench = Bench(pair, k_max, sp, draft_confidence)
    peers = open_peers(bench, variants)
    try:
        for name, prompts in suites.items():
            rows, run_facts = bench_suite(bench, peers, prompts, variants, max_tokens, repeat)
            yield (
                name,
                {
                    **run_facts,
                    "target": str(target),
                    "draft": str(draft) if draft else None,
                    "head": str(pair.head_path) if pair.head_path else None,
                    "runtimes": pair.backend_names().split("+"),
                    "max_tokens": max_tokens,
                    "sampling": dataclasses.asdict(sp),
                    "repeat": repeat,
                    "prompts": [p.id for p in prompts],
                    "categories": {p.id: p.category for p in prompts},
                    "speedup_method": CI_METHOD,
                    "command": " ".join(shlex.quote(a) for a in sys.argv),
                    "rows": rows,
                },
            )
    finally:
        for peer in peers.values():
            peer.close()


def check_peer_targets(pair: ModelPair, variants: Sequence[Variant]) -> None:
    """Each peer runs one kind of model file: refuse the others before anything is timed."""
    for v in variants:
        if v.method == PEER and pair.target_path.suffix != ".gguf":
            raise EdgespecError(
                f"method {PEER} runs llama-cpp-python on a GGUF target, not {pair.target_path}; "
                "drop it from --methods"
            )
        if PEER_PLAINS.get(v.method) != GENAI_PLAIN:
            continue
        if not (pair.target_path / "model.json").is_file():
            raise EdgespecError(
                f"method {v.method} runs onnxruntime-genai on an ONNX export, not "
                f"{pair.target_path}; drop it from --methods"
            )
        if pair.options.device != "cpu":
            raise EdgespecError(
                f"method {v.method} runs onnxruntime-genai on the CPU only here; drop it from "
                "--methods or --device"
            )
        if v.method == GENAI_DRAFT and pair.draft_path is None:
            raise EdgespecError(f"method {GENAI_DRAFT} needs a draft model: pass --draft")


def open_peers(bench: Bench, variants: Sequence[Variant]) -> dict[str, Peer]:
    """The peers the variants name, by the name of their own plain decoding."""
    peers: dict[str, Peer] = {}
    plains = {v.method for v in variants} & set(PEER_PLAINS.values())
    if PEER_PLAIN in plains:
        peers[PEER_PLAIN] = PeerLlama(bench)
    if GENAI_PLAIN in plains:
        pair = bench.pair
        peers[GENAI_PLAIN] = GenaiPeer(
            pair.target_path,
            pair.draft_path,
            bench.decoder.eog_ids,
            bench.target.n_ctx,
            pair.options.n_threads,
        )
    return peers


def bench_suite(
    bench: Bench,
    peers: Mapping[str, Peer],
    prompts: Sequence[Prompt],
    variants: Sequence[Variant],
    max_tokens: int,
    repeat: int,
) -> tuple[list[dict], dict]:
    """One suite's rows, and the machine and turn order they ran under."""
    machine = machine_info()  # the load average before, and (loadavg_end) after the runs
    tokens = [bench.prompt_tokens(p) for p in prompts]
    runs: dict[Variant, list[Run]] = {v: [] for v in variants}
    order: list[str] = []
    cases = [(r, i) for r in range(repeat) for i in range(len(prompts))]
    for r, i in progress(cases, "bench", unit="prompt", total=len(cases)):
        prompt, toks = prompts[i], tokens[i]
        results = {}
        for v in turn_order(variants, r):
            order.append(f"{r}:{prompt.id}:{v.label}")
            results[v] = run_variant(bench, peers, v, prompt, toks, max_tokens)
        reference = results[variants[0]]
        for v, result in results.items():
            ref = None if v == variants[0] else reference
            runs[v].append(bench.compare(prompt, toks, result, ref, repeat=r))
    rows = [Row(v.method, v.k, runs[v], v.baseline) for v in variants]
    by_label = {row.label: row for row in rows}
    machine["loadavg_end"] = machine_info()["loadavg"]
    row_dicts = [
        row.as_dict(None if i == 0 else by_label[row.baseline]) for i, row in enumerate(rows)
    ]
    target = type(bench.target).__name__
    exact = bench.target.batch_invariant
    return row_dicts, {"machine": machine, "order": order, "target": target, "exact": exact}


def run_variant(
    bench: Bench, peers: Mapping[str, Peer], v: Variant, prompt: Prompt, toks, max_tokens: int
) -> Result:
    peer = peers.get(PEER_PLAINS.get(v.method, v.method))
    if peer is None:
        return bench.generate(v.method, v.k, prompt, toks, max_tokens)
    out, seconds, stats = peer.generate(v.method, v.k, toks, token_budget(prompt, max_tokens))
    return Result(
        "", out, "stop", Stats(n_generated=max(len(out) - 1, 0), t_total=seconds, **stats)
    )


def by_category(report: dict) -> dict[str, list[dict]]:
    """Each category's rows: speedup and interval over that category's prompts alone."""
    categories = report["categories"]
    names = sorted({c for c in categories.values() if c})
    out: dict[str, list[dict]] = {}
    for name in names:
        ids = {p for p, c in categories.items() if c == name}
        out[name] = []
        for r in report["rows"][1:]:
            base = next(b for b in report["rows"] if label_of(b) == r["baseline"])
            mine = [run_from(x) for x in r["runs"] if x["prompt_id"] in ids]
            theirs = [run_from(x) for x in base["runs"] if x["prompt_id"] in ids]
            s = paired_speedup(mine, theirs)
            drafted = sum(x.stats.get("n_draft_tokens", 0) for x in mine)
            accepted = sum(x.stats.get("n_accepted", 0) for x in mine)
            out[name].append(
                {
                    "method": r["method"],
                    "k": r["k"],
                    "baseline": r["baseline"],
                    "prompts": len(ids),
                    "speedup": s.gmean if s else None,
                    "speedup_ci95": [s.lo, s.hi] if s and s.lo is not None else None,
                    "acceptance_rate": round(accepted / drafted, 4) if drafted else None,
                    "n_drafts": sum(
                        x.stats.get("n_steps", 0) - x.stats.get("n_plain_steps", 0) for x in mine
                    ),
                }
            )
    return out


def label_of(row: dict) -> str:
    return (
        row["method"]
        if row["k"] in ("-", "auto") or row["k"] is None
        else (f"{row['method']} k={row['k']}")
    )


def run_from(d: dict) -> Run:
    return Run(**d)


TABLE = (
    ("method", "{label:<26}"),
    ("tok/s", "{tokens_per_second:>7.1f}"),
    ("speedup [95% CI]", "{speedup_text:>19}"),
    ("over", "{baseline_text:<16}"),
    ("accept", "{acceptance_rate:>6}"),
    ("len", "{mean_acceptance_length:>5}"),
    ("draft%", "{draft_share:>6.0%}"),
    ("verify%", "{verify_share:>7.0%}"),
    ("plain", "{plain_steps:>5}"),
    ("same", "{identical:>4}/{prompts:<4}"),
)
SAMPLE_ROW = {
    "label": "",
    "tokens_per_second": 0.0,
    "speedup_text": "",
    "baseline_text": "",
    "acceptance_rate": "",
    "mean_acceptance_length": "",
    "draft_share": 0.0,
    "verify_share": 0.0,
    "plain_steps": 0,
    "identical": 0,
    "prompts": 0,
}


def table_header() -> str:
    widths = [len(fmt.format(**SAMPLE_ROW)) for _, fmt in TABLE]
    return " ".join(
        f"{name:>{w}}" if 0 < i and "<" not in fmt else f"{name:<{w}}"
        for i, ((name, fmt), w) in enumerate(zip(TABLE, widths))
    )


def speedup_text(row: dict) -> str:
    if row.get("speedup") is None:
        return "-"
    ci = row.get("speedup_ci95")
    point = f"{row['speedup']:.2f}"
    return f"{point} [{ratio(ci[0])},{ratio(ci[1])}]" if ci else point


def ratio(x: float) -> str:
    return f"{x:.2f}" if x < 100 else ">100"


def table_line(row: dict) -> str:
    shown = dict(row, label=label_of(row), speedup_text=speedup_text(row))
    shown["baseline_text"] = row["baseline"] or "-"
    for key in ("acceptance_rate", "mean_acceptance_length"):
        shown[key] = "-" if row[key] is None else f"{row[key]:.2f}"
    return " ".join(fmt.format(**shown) for _, fmt in TABLE)


def category_table(report: dict) -> list[str]:
    lines = [
        f"{'category':<14} {'method':<26} {'n':>3} {'speedup [95% CI]':>19} {'accept':>6} "
        f"{'drafts':>6}"
    ]
    for name, rows in by_category(report).items():
        for r in rows:
            accept = "-" if r["acceptance_rate"] is None else f"{r['acceptance_rate']:.2f}"
            lines.append(
                f"{name:<14} {label_of(r):<26} {r['prompts']:>3} {speedup_text(r):>19} "
                f"{accept:>6} {r['n_drafts']:>6}"
            )
    return lines


def parse_ks(text: str) -> list[int]:
    try:
        ks = [int(k) for k in text.split(",") if k]
    except ValueError:
        raise EdgespecError(f"--k takes numbers separated by commas, got {text!r}") from None
    if not ks or min(ks) < 1:
        raise EdgespecError(f"--k values must be >= 1, got {text!r}")
    return ks


def default_methods(target: Path, head: str | None) -> list[str]:
    """DEFAULT_METHODS for this target: the peer on GGUF files only (a bundle: name it in
    --methods), eagle where a head is given, mtp where the target declares MTP layers."""
    methods = DEFAULT_METHODS.split(",")
    if target.suffix != ".gguf":
        methods.remove(PEER)
    if head:
        methods.insert(methods.index("model"), "eagle")
    elif declares_mtp_layers(target):
        methods.insert(methods.index("model"), "mtp")
    return methods


def cmd_bench(args: argparse.Namespace) -> int:
    target = resolve_model(args.target)
    draft = resolve_model(args.draft) if args.draft else None
    methods = (
        default_methods(target, args.head)
        if args.methods is None
        else [m for m in args.methods.split(",") if m]
    )
    ks = parse_ks(args.k)
    peer_ks = parse_ks(args.peer_k)
    suites = {suite: load_suite(suite, args.limit) for suite in args.suite or ["edit"]}
    print(
        f"suites {', '.join(f'{name} ({len(p)} prompts)' for name, p in suites.items())}: "
        f"x {args.repeat}, max {args.max_tokens} tokens, methods in turn per prompt",
        flush=True,
    )
    reports = bench_suites(
        target,
        draft,
        suites,
        methods,
        ks,
        args.max_tokens,
        runtime_options(args),
        k_max=args.k_max,
        repeat=args.repeat,
        peer_ks=peer_ks,
        sp=sampling_params(args),
        draft_confidence=args.draft_confidence,
        head=args.head,
    )
    all_rows = {}
    for suite, report in reports:
        print(f"suite {suite}")
        print_report(report, args.by_category)
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


def print_report(report: dict, with_categories: bool) -> None:
    """A suite's machine, table and (with_categories) category table; adds by_category."""
    print(machine_line(report["machine"]))
    if not report.get("exact", True):
        print(inexact_note(report["target"]))
    print(f"speedup: {CI_METHOD}")
    print(table_header())
    for row in report["rows"]:
        print(table_line(row))
    if with_categories:
        if any(report["categories"].values()):
            report["by_category"] = by_category(report)
            print("\n".join(category_table(report)))
        else:
            print("this suite's ids carry no category (<category>-<number>)")
    print(flush=True)


def add_bench_parser(sub) -> None:
    p = sub.add_parser("bench", help="speed and exactness of each method on prompt suites")
    p.add_argument("--target", required=True, help=TARGET_HELP + ", or demo-target")
    p.add_argument("--draft", help=DRAFT_HELP + ", or demo-draft")
    p.add_argument("--head", help=HEAD_HELP + " (adds method eagle to the default methods)")
    p.add_argument(
        "--suite",
        action="append",
        default=None,
        help=f"{' | '.join(SUITES)} | FILE.jsonl (repeatable; default edit)",
    )
    p.add_argument(
        "--methods",
        default=None,
        help=f"comma-separated, from {', '.join(METHODS)} (default {DEFAULT_METHODS}; "
        f"{PEER} on GGUF targets only; {GENAI_DRAFT} and {GENAI_NGRAM} on ONNX exports, "
        "with edgespec[peers])",
    )
    p.add_argument("--k", default="4", help="draft lengths for fixed-k methods, e.g. 1,2,4,8")
    p.add_argument(
        "--peer-k",
        default=",".join(map(str, PEER_KS)),
        help="num_pred_tokens for llama-cpp-python's prompt lookup (its README: 10, or 2 on CPUs)",
    )
    p.add_argument("--k-max", type=int, default=K_MAX, help="longest draft for method auto")
    add_draft_confidence_arg(p)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--limit", type=int, default=None, help="first N prompts of each suite")
    p.add_argument(
        "--repeat", type=int, default=1, help="run the suite N times (methods in turn per prompt)"
    )
    p.add_argument(
        "--by-category",
        action="store_true",
        help="a table per category too (ids <category>-<number>, e.g. the open suite)",
    )
    p.add_argument("--json", help="write every number here")
    p.add_argument("--plot", help="write a PNG: speedup vs k, acceptance by position")
    add_runtime_args(p)
    add_sampling_args(p)
    p.set_defaults(func=cmd_bench)
