"""Replay the adaptive controller over recorded plain decoding, each pass charged by a curve.

Greedy decoding emits the target's own tokens whatever is drafted, so one plain run per prompt
decides the fate of every draft prompt lookup could make there. `record` saves those runs
(prompt and output token ids, llama.cpp or ONNX Runtime, any suite). `replay` runs the real
SpeculativeDecoder, NgramDrafter and AdaptivePolicy over a target that answers with the
recorded tokens, and charges every pass what a verify cost curve says a pass of its width
costs (in one-token passes). The result is the speedup the controller would get on that
curve, with no timing noise: a controller change shows its effect to the step, on a CPU's
steep curve and on a GPU's flat one alike. Replayed output must equal the recording, which
checks the replay itself.

What it leaves out: the draft model (its proposals were not recorded) and the loop's own
time; `edgespec bench` measures those. A real machine's noise is modelled only as bursts of
slow passes (--noise), met alike by plain decoding, `auto` and the oracle.

    python bench/replay.py record --target demo-target.gguf --suites edit=256,open,chat,code \
        --limit 40 --out rec.json
    python bench/replay.py replay --record rec.json [--curve llama-cpu] \
        [--curve my-gpu=1,1.01,1.03,...] [--believed llama-cpu] [--k-max 32] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from edgespec.app.bench import machine_info, token_budget
from edgespec.app.suites import load_suite
from edgespec.chat import chat_tokens
from edgespec.controller import CostCurve, FixedPolicy, Policy
from edgespec.drafters.base import Drafter
from edgespec.drafters.ngram import NgramDrafter
from edgespec.engine import SpeculativeDecoder
from edgespec.loader import SpecOptions, make_policy
from edgespec.pair import open_pair
from edgespec.runtimes import RuntimeOptions
from edgespec.runtimes.base import VocabInfo
from edgespec.sampling import SamplingParams

CURVES_FILE = Path(__file__).with_name("replay_curves.json")
DEFAULT_CURVES = ("llama-cpu", "onnx-cpu", "gpu-assumed")


# --- recording ------------------------------------------------------------------------------


def record(target: str, suites: dict[str, int], threads: int | None, limit: int | None) -> dict:
    """Plain greedy decoding of the suites' prompts (the first `limit` of each): prompt and
    output token ids."""
    pair = open_pair(target, None, RuntimeOptions(n_ctx=4096, n_threads=threads))
    decoder = SpeculativeDecoder(pair.target, [], FixedPolicy(None, 0))
    eog = sorted(pair.target.vocab_info().eog_ids)
    cases = []
    for suite, max_tokens in suites.items():
        for prompt in load_suite(suite, limit):
            tokens = chat_tokens(pair.target, prompt.messages)
            result = decoder.generate(tokens, max_tokens=token_budget(prompt, max_tokens))
            ended = [eog[0]] if result.finish_reason == "stop" else []
            cases.append(
                {
                    "suite": suite,
                    "id": prompt.id,
                    "category": prompt.category,
                    "prompt": tokens,
                    "output": result.tokens + ended,  # the stop token too, where one came
                    "eog": eog[0],
                }
            )
            print(f"{suite}/{prompt.id}: {len(result.tokens)} tokens", flush=True)
    return {"target": str(target), "machine": machine_info(), "cases": cases}


# --- the replay target ----------------------------------------------------------------------


class ReplayTarget:
    """A runtime whose every row's argmax is the recorded token at the next position.

    Token ids are renumbered densely (prompt lookup only compares ids), so a row is a few
    hundred logits, not the model's 150k; id 0 is the end-of-generation token.
    """

    def __init__(self, prompt: Sequence[int], output: Sequence[int], eog: int) -> None:
        ids: dict[int, int] = {eog: 0}
        dense = [ids.setdefault(t, len(ids)) for t in [*prompt, *output]]
        self.prompt = dense[: len(prompt)]
        self.output = dense[len(prompt) :]
        self.sequence = dense
        self.n_vocab = len(ids)
        self.n_ctx = len(dense) + 64
        self.cache: list[int] = []
        self.passes: list[int] = []  # width of every pass after the prompt's

    @property
    def n_past(self) -> int:
        return len(self.cache)

    def forward(self, tokens: Sequence[int], *, last_only: bool = False) -> np.ndarray:
        if self.cache:  # the prompt's pass is everyone's: left out of the charge
            self.passes.append(len(tokens))
        rows = np.zeros((len(tokens), self.n_vocab), dtype=np.float32)
        for i, token in enumerate(tokens):
            self.cache.append(int(token))
            at = len(self.cache)
            rows[i, self.sequence[at] if at < len(self.sequence) else 0] = 1.0
        return rows[-1:] if last_only else rows

    def rollback(self, n_past: int) -> None:
        del self.cache[n_past:]

    def reset(self) -> None:
        self.cache.clear()

    def detokenize(self, tokens: Sequence[int]) -> bytes:
        return b""

    def token_text(self, token: int) -> bytes:
        return b""

    def vocab_info(self) -> VocabInfo:
        return VocabInfo(self.n_vocab, "replay", None, 0, frozenset({0}), "replay")


class OraclePolicy:
    """Prompt lookup with foresight: each step drafts the k that gets the most tokens per
    unit of cost from what it knows will be accepted (the step's best, not the request's).
    The reference a controller's choices are measured against."""

    def __init__(self, target: ReplayTarget, ratios: Sequence[float], k_max: int) -> None:
        self.target, self.ratios, self.k_max = target, ratios, k_max
        self.drafter: Drafter | None = None

    def begin(self, drafters: Sequence[Drafter]) -> None:
        self.drafter = drafters[0]

    def plan(self, context: Sequence[int], sp: SamplingParams) -> tuple[Drafter | None, int]:
        assert self.drafter is not None
        offer = self.drafter.offer(context)
        k_max = min(offer.available, self.k_max)
        if not k_max:
            return None, 0
        draft = self.drafter.propose(context, k_max, sp).tokens.tolist()
        coming = self.target.sequence[len(context) : len(context) + k_max]
        right = next((i for i, (a, b) in enumerate(zip(draft, coming)) if a != b), len(coming))
        k = max(range(k_max + 1), key=lambda k: (min(k, right) + 1) / price(self.ratios, k + 1))
        return (self.drafter, k) if k else (None, 0)

    def to_sync(self, context: Sequence[int]) -> list[Drafter]:
        return []

    def observe(self, *args) -> None:
        pass


class Bursts:
    """Host noise: each pass starts, with probability `rate`, a burst of 5-29 passes that
    take `slow` times as long (another job running for a while). Seeded per prompt, so plain
    decoding, `auto` and the oracle meet the same bursts pass for pass; rate 0 is a quiet
    machine."""

    def __init__(self, rate: float, slow: float, seed: int) -> None:
        self.rate, self.slow = rate, slow
        self.rng = np.random.default_rng(seed)
        self.left = 0

    def factor(self) -> float:
        if not self.rate:
            return 1.0
        if self.left == 0 and self.rng.random() < self.rate:
            self.left = int(self.rng.integers(5, 30))
        slow, self.left = (self.slow if self.left else 1.0), max(self.left - 1, 0)
        return slow

    def charge(self, ratios: Sequence[float], widths: Sequence[int]) -> float:
        return sum(price(ratios, n) * self.factor() for n in widths)


class Charged:
    """The policy under test, told that each pass took what the curve says, times the host's
    noise (the loop's wall times here are microseconds, and the policy would learn its curve
    from them)."""

    def __init__(self, policy: Policy, ratios: Sequence[float], noise: Bursts) -> None:
        self.policy, self.ratios, self.noise = policy, ratios, noise

    def begin(self, drafters: Sequence[Drafter]) -> None:
        self.policy.begin(drafters)

    def plan(self, context: Sequence[int], sp: SamplingParams) -> tuple[Drafter | None, int]:
        return self.policy.plan(context, sp)

    def to_sync(self, context: Sequence[int]) -> list[Drafter]:
        return self.policy.to_sync(context)

    def observe(
        self, drafter: Drafter | None, k: int, n_accepted: int, t_draft: float, t_verify: float
    ) -> None:
        seconds = price(self.ratios, k + 1) * self.noise.factor()
        self.policy.observe(drafter, k, n_accepted, 0.0, seconds)


def replay_case(
    case: dict,
    ratios: Sequence[float],
    spec: SpecOptions,
    oracle: bool = False,
    noise: tuple[float, float] = (0.0, 1.0),
    believed: Sequence[float] | None = None,
) -> dict:
    """One recorded case under the controller (or the oracle) on a curve: its cost against
    plain decoding's, both under the same noise bursts (rate, slow). `believed`: the curve
    the controller starts from where it differs from the one passes are charged by (a
    calibration's error)."""
    target = ReplayTarget(case["prompt"], case["output"], case["eog"])
    drafters: list[Drafter] = [NgramDrafter(max_ngram=spec.max_ngram)]
    seed = zlib.crc32(case["id"].encode())
    policy: Policy
    if oracle:
        policy = OraclePolicy(target, ratios, spec.k_max)
    else:
        adaptive = make_policy(spec, drafters, CostCurve(list(believed or ratios)))
        policy = Charged(adaptive, ratios, Bursts(*noise, seed))
    decoder = SpeculativeDecoder(target, drafters, policy)  # type: ignore[arg-type]
    result = decoder.generate(target.prompt, max_tokens=len(target.output), sp=SamplingParams())
    emitted = result.tokens + ([0] if result.finish_reason == "stop" else [])
    if emitted != target.output:
        raise AssertionError(f"{case['id']}: the replay departed from the recording")
    cost = Bursts(*noise, seed).charge(ratios, target.passes)  # the bursts Charged met
    # one one-token pass per token, the stop token's included
    plain = Bursts(*noise, seed).charge(ratios, [1] * len(target.output))
    stats = result.stats
    return {
        "suite": case["suite"],
        "id": case["id"],
        "category": case["category"],
        "tokens": len(target.output),
        "plain_cost": round(plain, 4),
        "cost": round(cost, 4),
        "speedup": round(plain / cost, 4),
        "n_drafts": stats.n_drafts,
        "n_draft_tokens": stats.n_draft_tokens,
        "n_accepted": stats.n_accepted,
        "wasted_passes": round(sum(price(ratios, n) - 1 for n in target.passes if n > 1), 2),
    }


def price(ratios: Sequence[float], n: int) -> float:
    """A pass of n tokens in one-token passes; past the curve, linear in its last step."""
    return CostCurve(list(ratios)).target(n)


# --- report ---------------------------------------------------------------------------------


def summarise(rows: list[dict]) -> dict:
    """Per suite: the geometric-mean speedup, the worst category and the worst prompt."""
    out = {}
    for suite in dict.fromkeys(r["suite"] for r in rows):
        mine = [r for r in rows if r["suite"] == suite]
        categories: dict[str, list[float]] = {}
        for r in mine:
            categories.setdefault(r["category"] or suite, []).append(r["speedup"])
        by_category = {c: round(statistics.geometric_mean(v), 4) for c, v in categories.items()}
        worst = min(mine, key=lambda r: r["speedup"])
        drafted = sum(r["n_draft_tokens"] for r in mine)
        out[suite] = {
            "prompts": len(mine),
            "speedup": round(statistics.geometric_mean([r["speedup"] for r in mine]), 4),
            "worst_category": min(by_category.items(), key=lambda kv: kv[1]),
            "worst_prompt": (worst["id"], worst["speedup"]),
            "drafts": sum(r["n_drafts"] for r in mine),
            "acceptance": round(sum(r["n_accepted"] for r in mine) / drafted, 3) if drafted else 0,
            "by_category": by_category,
        }
    return out


def print_table(curve: str, summary: dict) -> None:
    print(f"\ncurve {curve}")
    print("| suite | prompts | speedup | worst category | worst prompt | drafts | acceptance |")
    print("|---|---|---|---|---|---|---|")
    for suite, s in summary.items():
        (wc, wcs), (wp, wps) = s["worst_category"], s["worst_prompt"]
        print(
            f"| {suite} | {s['prompts']} | {s['speedup']:.3f}x | {wc} {wcs:.3f}x | "
            f"{wp} {wps:.3f}x | {s['drafts']} | {s['acceptance']:.2f} |"
        )


def load_curves(names: Sequence[str]) -> dict[str, list[float]]:
    """Named curves of replay_curves.json, or NAME=R1,R2,... given inline (t(n)/t(1) for
    n = 1, 2, ...: a GPU kit run's curve_ratio, say)."""
    known = json.loads(CURVES_FILE.read_text())
    curves = {}
    for name in names:
        name, _, inline = name.partition("=")
        if inline:
            ratios = [float(r) for r in inline.split(",")]
            if len(ratios) < 2 or ratios[0] != 1.0 or min(ratios) <= 0:
                raise SystemExit(f"curve {name}: give t(n)/t(1) for n = 1, 2, ..., from 1.0")
            curves[name] = ratios
        elif name in known:
            curves[name] = known[name]["ratios"]
        else:
            raise SystemExit(f"unknown curve {name!r}: {CURVES_FILE} has {', '.join(known)}")
    return curves


def parse_noise(text: str) -> tuple[float, float]:
    """ "0.03,2" -> (0.03, 2.0): the chance a pass starts a burst, and how slow a burst is."""
    try:
        rate, slow = (float(x) for x in text.split(","))
    except ValueError:
        rate = slow = -1.0
    if not (0.0 <= rate <= 1.0 and slow > 0.0):
        raise SystemExit(f"--noise {text}: give RATE,SLOW with 0 <= RATE <= 1 and SLOW > 0")
    return rate, slow


def parse_suites(text: str) -> dict[str, int]:
    """edit=256,open -> {"edit": 256, "open": 128}"""
    suites = {}
    for part in text.split(","):
        name, _, tokens = part.partition("=")
        if tokens and (not tokens.isdigit() or int(tokens) == 0):
            raise SystemExit(f"--suites {text}: give SUITE or SUITE=MAX_TOKENS, e.g. edit=256")
        suites[name] = int(tokens) if tokens else 128
    return suites


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="plain greedy decoding of suites, token ids saved")
    rec.add_argument("--target", required=True)
    rec.add_argument("--suites", default="edit=256,open,chat,code")
    rec.add_argument("--threads", type=int)
    rec.add_argument("--limit", type=int, help="the first N prompts of each suite")
    rec.add_argument("--out", required=True)
    rep = sub.add_parser("replay", help="the controller over a recording, on cost curves")
    rep.add_argument("--record", required=True)
    rep.add_argument(
        "--curve",
        action="append",
        help="a name in replay_curves.json, or NAME=1,R2,R3,... (t(n)/t(1)); repeat for more "
        "(default: " + ", ".join(DEFAULT_CURVES) + ")",
    )
    rep.add_argument("--k-max", type=int, default=16)
    rep.add_argument(
        "--noise",
        default="0,1",
        help="RATE,SLOW: each pass starts a burst of 5-29 passes at SLOW x with probability "
        "RATE (default 0,1: a quiet machine)",
    )
    rep.add_argument(
        "--believed",
        help="the curve the controller starts from (a name or NAME=1,R2,...), while passes "
        "are charged by --curve: what a calibration's error costs (default: the charged one)",
    )
    rep.add_argument("--json")
    args = ap.parse_args()
    if args.command == "record":
        data = record(args.target, parse_suites(args.suites), args.threads, args.limit)
        Path(args.out).write_text(json.dumps(data))
        return
    recording = json.loads(Path(args.record).read_text())
    spec = SpecOptions("ngram", None, args.k_max)
    noise = parse_noise(args.noise)
    believed = [*load_curves([args.believed]).values()][0] if args.believed else None
    report = {
        "record": args.record,
        "k_max": args.k_max,
        "noise": noise,
        "believed": believed,
        "curves": {},
    }
    for name, ratios in load_curves(args.curve or DEFAULT_CURVES).items():
        for policy in ("auto", "oracle"):
            cases = recording["cases"]
            rows = [
                replay_case(case, ratios, spec, policy == "oracle", noise, believed)
                for case in cases
            ]
            summary = summarise(rows)
            print_table(f"{name}, {policy}", summary)
            report["curves"].setdefault(name, {"ratios": ratios})[policy] = {
                "summary": summary,
                "rows": rows,
            }
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
