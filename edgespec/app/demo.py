"""`edgespec demo`: fetch the demo pair; plain and speculative decoding side by side, on the
back-end whose default kernels keep plain decoding's answer (ONNX Runtime on the CPU), else on
the one the cost model finds cheapest to verify on this machine (--backend auto)."""

from __future__ import annotations

import argparse
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from edgespec.app.bench_runs import RUNTIME_NAMES, Bench, Row, Run, inexact_note
from edgespec.app.models import fetch
from edgespec.app.options import add_runtime_args, runtime_options
from edgespec.app.suites import Prompt
from edgespec.backends import RuntimeOptions
from edgespec.controller import CostCurve, expected_tokens
from edgespec.controller.calibrate import cost_curve
from edgespec.errors import EdgespecError
from edgespec.pair import ModelPair, open_pair
from edgespec.plumbing.paths import edgespec_home
from edgespec.runtime import K_MAX

BACKENDS = ("auto", "llama", "onnx")
BACKEND_NAMES = {"llama": "llama.cpp", "onnx": "ONNX Runtime"}
REFERENCE_ACCEPTANCE = 0.7  # between open text (0.4-0.8) and edits (0.9): a middle demand
SHOWN_WIDTH = 5  # the verify width the message quotes (k = 4)
EXACT_CHOICE = (
    "back-end: ONNX Runtime, whose default kernels give plain decoding's answer token for token "
    "(llama.cpp's do with --exact, at a cost in speed); --backend llama runs llama.cpp"
)

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


@dataclass(frozen=True)
class BackendChoice:
    name: str  # llama | onnx
    rates: dict[str, float]  # modelled tok/s at REFERENCE_ACCEPTANCE, by back-end
    reason: str


def modelled_rate(curve: CostCurve, alpha: float, k_max: int) -> float:
    """Tokens per second the cost curve allows at acceptance alpha with a free drafter (prompt
    lookup), at the best k (k = 0: plain decoding)."""
    n = len(curve.target_s)
    return max(
        expected_tokens([alpha] * k) / curve.target(k + 1) for k in range(min(k_max, n - 1) + 1)
    )


def choose_backend(
    curves: dict[str, CostCurve], alpha: float = REFERENCE_ACCEPTANCE, k_max: int = K_MAX
) -> BackendChoice:
    """The back-end whose verify curve gives the most tokens per second at acceptance alpha
    (on a tie, the first), and a sentence that says why."""
    rates = {name: modelled_rate(curve, alpha, k_max) for name, curve in curves.items()}
    best = max(rates, key=lambda name: rates[name])

    def costs(name: str) -> str:
        curve = curves[name]
        ratio = curve.target(SHOWN_WIDTH) / curve.target(1)
        return f"one token {curve.target(1) * 1e3:.0f} ms, {SHOWN_WIDTH} tokens {ratio:.2f}x that"

    others = "; ".join(
        f"{BACKEND_NAMES[o]} {rates[o]:.1f} ({costs(o)})" for o in curves if o != best
    )
    flags = ", ".join(f"--backend {o}" for o in curves if o != best)
    reason = (
        f"back-end: {BACKEND_NAMES[best]}, the cheapest to verify on this machine by the cost "
        f"model: {costs(best)}; {rates[best]:.1f} tok/s modelled at {alpha:.0%} acceptance, "
        f"against {others}. {flags} runs the other"
    )
    return BackendChoice(best, rates, reason)


def demo_onnx_bundle(target: Path, draft: Path) -> Path:
    """The demo pair exported to ONNX once, kept in $EDGESPEC_HOME/demo-onnx (exported again
    where an older edgespec made it with the draft's whole output layer)."""
    from edgespec.bundle import read_bundle
    from edgespec.export.options import ExportOptions
    from edgespec.export.orchestrator import export_bundle

    out = edgespec_home() / "demo-onnx"
    stale = False
    if (out / "bundle.json").is_file():
        if "draft_vocab" in read_bundle(out, verify=False).policy:
            return out
        stale = True
    elif out.exists() and any(out.iterdir()):
        raise EdgespecError(f"{out} holds no bundle.json; remove the folder and run again")
    why = "again: the cached one predates --draft-vocab" if stale else "once (minutes)"
    print(f"exporting the demo pair to ONNX {why}, into {out}", file=sys.stderr)
    fresh = out.with_name(out.name + ".new")
    shutil.rmtree(fresh, ignore_errors=True)  # a run cut short before the swap below
    export_bundle(ExportOptions(target=target, out=fresh, draft=draft, format="onnx"))
    shutil.rmtree(out, ignore_errors=True)
    fresh.rename(out)
    return out


def demo_pair(backend: str, opts: RuntimeOptions, k_max: int) -> tuple[ModelPair, str]:
    """The pair the demo runs on, and a line saying which back-end and why."""
    target, draft = fetch("demo")
    if backend == "llama":
        return open_pair(target, draft, opts), "back-end: llama.cpp (--backend llama)"
    onnx = open_pair(demo_onnx_bundle(target, draft), None, opts)
    if backend == "onnx":
        return onnx, "back-end: ONNX Runtime (--backend onnx)"
    if onnx.target.batch_invariant and not opts.exact:
        return onnx, EXACT_CHOICE
    llama = open_pair(target, draft, opts)
    pairs = {"llama": llama, "onnx": onnx}
    curves = {name: cost_curve(pair, n_max=k_max + 1) for name, pair in pairs.items()}
    choice = choose_backend(curves, k_max=k_max)
    return pairs[choice.name], choice.reason


def cmd_demo(args: argparse.Namespace) -> int:
    if args.rounds < 1:
        raise EdgespecError(f"--rounds must be at least 1, got {args.rounds}")
    pair, reason = demo_pair(args.backend, runtime_options(args), args.k_max)
    print(reason)
    if not pair.target.batch_invariant:
        print(inexact_note(type(pair.target).__name__))
    bench = Bench(pair, args.k_max)
    if args.rounds > 1:
        print(f"each method's faster of {args.rounds} runs, the methods taking turns")
    print(
        f"{'request':<22} {'method':<7} {'tokens':>6} {'tok/s':>6} {'speedup':>7} "
        f"{'accept':>6} {'len':>5} {'identical':>9}"
    )
    for prompt in DEMO_PROMPTS:
        plain, spec, departed = side_by_side(bench, prompt, args.max_tokens, args.rounds)
        for row in (plain, spec):
            d = row.as_dict(plain)
            same = "yes" if departed is None else "near tie" if departed.near_tie else "NO"
            print(
                f"{prompt.id:<22} {d['method']:<7} {row.runs[0].n_generated:>6} "
                f"{d['tokens_per_second']:>6.1f} {d['speedup']:>7.2f} "
                f"{fmt(d['acceptance_rate']):>6} {fmt(d['mean_acceptance_length']):>5} "
                f"{same if row is spec else '-':>9}"
            )
        if departed is not None:
            print(departure_note(departed, type(bench.target).__name__, bench.near_tie))
        if args.show:
            print(bench.last_results[0].text.rstrip() + "\n")
    return 0


def side_by_side(bench: Bench, prompt: Prompt, max_tokens: int, rounds: int):
    """Plain and `auto` in turn, `rounds` times: each method's fastest run (a burst of other
    work on the machine slows a run, never speeds one up), and the first speculative run that
    left plain decoding's answer (None: every one kept it)."""
    tokens = [bench.prompt_tokens(prompt)]
    plains: list[Row] = []
    specs: list[Row] = []
    for _ in range(rounds):
        plains.append(bench.run_method("plain", None, [prompt], tokens, max_tokens, None))
        plain_answer = bench.last_results
        specs.append(bench.run_method("auto", None, [prompt], tokens, max_tokens, plain_answer))
    departed = next((row.runs[0] for row in specs if not row.runs[0].identical), None)
    return fastest(plains), fastest(specs), departed


def fastest(rows: list[Row]) -> Row:
    return max(rows, key=lambda row: row.tokens_per_second)


def departure_note(run: Run, runtime: str, near_tie: float) -> str:
    """Why a speculative answer left plain decoding's: a near tie that the kernels' rounding
    at different pass widths can flip (and how to rule that out), or a gap no rounding explains."""
    name = RUNTIME_NAMES.get(runtime, runtime)
    where = (
        f"  {run.prompt_id}: departs from plain at token {run.departure}, where the target's "
        f"top two logits were {run.departure_gap:.3f} apart"
    )
    if not run.near_tie:
        return (
            f"{where}: more than {name}'s rounding between pass widths explains "
            f"({near_tie:.2f}). A bug: please report it with this output"
        )
    return (  # the bound is twice the most one logit moves: two logits, each moving
        f"{where}: a near tie ({name} rounds a logit up to {near_tie / 2:.2f} differently in a "
        "one-token pass than in a verify pass). --exact (batch-invariant kernels, slower plain "
        "decoding) makes the answers identical"
    )


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def add_demo_parser(sub) -> None:
    p = sub.add_parser("demo", help="fetch the demo pair; plain vs speculative, side by side")
    p.add_argument("--max-tokens", type=int, default=192)
    p.add_argument("--k-max", type=int, default=K_MAX)
    p.add_argument("--show", action="store_true", help="print the generated text too")
    p.add_argument(
        "--rounds",
        type=int,
        default=2,
        help="runs of each method per request, in turn; the faster is shown (default 2)",
    )
    p.add_argument(
        "--backend",
        choices=BACKENDS,
        default="auto",
        help="auto (default): ONNX Runtime on the CPU, whose default kernels keep plain "
        "decoding's answer (exports the demo pair to ONNX once), else the back-end the cost "
        "model finds cheapest here; llama: llama.cpp on the GGUF files; onnx: ONNX Runtime",
    )
    add_runtime_args(p)
    p.set_defaults(func=cmd_demo, n_ctx=2048)
