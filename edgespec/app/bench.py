"""Is it faster on these prompts, and is the answer the same? The benchmark's measuring part.

Every method runs greedy on the same runtimes; plain decoding through the same loop is the
reference for both speed and output. The command (`edgespec bench`) is bench_cli.py, the
llama-cpp-python peer peer.py, the plots plot.py.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from edgespec.app.suites import Prompt
from edgespec.chat import chat_tokens
from edgespec.controller import AdaptivePolicy, FixedPolicy, Policy
from edgespec.engine import Result, SpeculativeDecoder
from edgespec.errors import EdgespecError
from edgespec.loader import SpecOptions, build_decoder
from edgespec.pair import ModelPair
from edgespec.progress import progress
from edgespec.runtimes import Runtime

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
    """Every method on one opened pair: the auto decoder's drafters, policy by method."""

    def __init__(self, pair: ModelPair, k_max: int = 16):
        self.pair = pair
        self.decoder = build_decoder(pair, SpecOptions("auto", None, k_max))
        self.target = pair.target
        policy = self.decoder.policy
        self.adaptive = policy if isinstance(policy, AdaptivePolicy) else None
        self.last_results: list[Result] = []

    def prompt_tokens(self, prompt: Prompt) -> list[int]:
        return chat_tokens(self.target, prompt.messages)

    def policy(self, method: str, k: int | None) -> Policy:
        if method == "plain":
            return FixedPolicy(None, 0)
        if method == "auto":
            if self.adaptive is None:
                raise EdgespecError("method auto needs the adaptive controller (drop --k)")
            return self.adaptive
        return FixedPolicy(method, k or 4)

    def run_method(self, method: str, k: int | None, prompts, tokens, max_tokens, reference) -> Row:
        drafters = self.decoder.drafters
        if method in ("model", "ngram") and method not in drafters:
            raise EdgespecError(f"method {method} needs its drafter: pass --draft for model")
        decoder = SpeculativeDecoder(self.target, list(drafters.values()), self.policy(method, k))
        runs, results = [], []
        cases = zip(prompts, tokens, reference or [None] * len(prompts))
        label = method if k is None or method in ("plain", "auto") else f"{method} k={k}"
        for prompt, toks, ref in progress(cases, label, unit="prompt", total=len(prompts)):
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
