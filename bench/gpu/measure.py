"""GPU kit measurements for one back-end and one target/draft pair; prints a table, writes JSON.

Random weights make real acceptance meaningless, so acceptance is controlled: an oracle drafter
proposes the target's own greedy continuation (from a plain run of the same prompt), wrong at
text positions chosen once per acceptance rate, so every k meets the same wrong positions.
It runs at zero draft cost (the ceiling the verify curve allows) and paying the real forward
passes of the draft model (what a user pays).

    python bench/gpu/measure.py --backend llama --device cuda --bundle B --label demo --json OUT
    python bench/gpu/measure.py --report OUT1.json OUT2.json ...   # one table over several

Measured, per back-end: each width's first pass against its second, on models fresh from
opening (what a process's first request pays per width); plain steps and n-token passes
alternating against each in a run of its own shape (llama.cpp's CUDA graph is rebuilt when
the shape changes); the target's verify cost curve
t(n)/t(1) for n = 1..17; the draft's per-token cost; where the bundle holds an EAGLE-3 head
(make_gguf.py --head beside a GGUF pair; an ONNX bundle exported with --head), the head's cost
per drafted token; the
loop's own time per step (greedy and
sampled) against the verify pass; speedup over plain decoding for acceptance 1.0/0.9/0.8/0.6
at k = 1..8 and with the adaptive controller; and whether every speculative output equals the
plain one token for token.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np

from edgespec.bundle import is_bundle, read_bundle, size_of
from edgespec.controller import AdaptivePolicy, CostCurve, FixedPolicy, Policy
from edgespec.controller.acceptance import ByPosition
from edgespec.controller.calibrate import measure_curve, replayed, time_pass, warm_at_prefix
from edgespec.drafters import Draft, ModelDrafter
from edgespec.drafters.base import Offer
from edgespec.drafters.model import STEP_SHAPES, common_prefix_len
from edgespec.engine import Result, SpeculativeDecoder
from edgespec.plumbing.machine import gpu_name
from edgespec.runtime import MAX_VERIFY_WIDTH, Runtime, forward_top
from edgespec.sampling import SamplingParams

sys.path.insert(0, str(Path(__file__).resolve().parent))  # PYTHONSAFEPATH (run.sh) drops it
from make_gguf import HEAD_FILE  # noqa: E402

ACCEPTANCE = (1.0, 0.9, 0.8, 0.6)
KS = tuple(range(1, 9))
# environment variables that choose kernels, recorded with a run: ggml-cuda's graphs
KERNEL_SWITCHES = ("GGML_CUDA_DISABLE_GRAPHS",)
SWITCH_SETTLE, SWITCH_AFTER = 8, 5  # plain steps before and after switch_recovery's pass
PROMPT = """Complete the module: keep the public names, add type hints and docstrings.

import json
from dataclasses import dataclass
from functools import partial


@dataclass
class Order:
    item: str
    quantity: int
    price: float


def total(orders):
    return sum(o.quantity * o.price for o in orders)


def load(path):
    with open(path) as f:
        return [Order(**row) for row in json.load(f)]
"""
SAMPLED = {
    "temperature 0.8, top-k 40, top-p 0.9": SamplingParams(0.8, 40, 0.9, seed=0),
    "temperature 0.8, top-p 0.9": SamplingParams(0.8, top_p=0.9, seed=0),  # OpenAI clients'
    "temperature 0.8": SamplingParams(0.8, seed=0),
}


@dataclass(frozen=True)
class Settings:
    max_tokens: int = 128
    repeats: int = 1  # each timed run is done this many times; the fastest counts
    curve_reps: int = 20
    curve_n: int = MAX_VERIFY_WIDTH
    acceptance: tuple[float, ...] = ACCEPTANCE
    ks: tuple[int, ...] = KS


SMOKE = Settings(max_tokens=12, repeats=1, curve_reps=2, curve_n=5, acceptance=(1.0, 0.6),
                 ks=(1, 4))  # fmt: skip


class OracleDrafter:
    """Drafts the reference continuation, wrong exactly at the text positions `wrong` marks.

    The adaptive controller prices and learns it as any drafter (a draft model's acceptance
    estimate). With `model` set it also runs that draft model's forward passes as ModelDrafter
    would (catch-up, then one token at a time), so its time is the real draft cost and its
    price starts from the model's calibrated token_s; the model's logits are ignored.
    """

    name = "model"

    def __init__(
        self,
        prompt: Sequence[int],
        reference: Sequence[int],
        wrong: np.ndarray,  # [len(reference)] bool: positions whose proposal is made wrong
        n_vocab: int,
        model: ModelDrafter | None = None,
    ) -> None:
        self.prompt_len = len(prompt)
        self.expected = list(prompt) + list(reference)
        self.wrong = wrong
        self.n_vocab = n_vocab
        self.model = model

    def propose(self, context: Sequence[int], k: int, sp: SamplingParams) -> Draft:
        k = min(k, len(self.expected) - len(context))
        if k <= 0:
            return Draft.empty()
        paid = self.pay_draft_cost(context, k)
        n = len(context)
        on_track = common_prefix_len(self.expected, context) == n
        tokens = np.empty(k, dtype=np.int32)
        for i in range(k):
            right = self.expected[n + i]
            bad = not on_track or self.wrong[n + i - self.prompt_len]
            tokens[i] = (right + 1) % self.n_vocab if bad else right
        if self.model is not None:  # its cache is taken to hold this proposal, as it would
            self.model.cached = list(context) + [int(t) for t in tokens[:-1]]
        return Draft(tokens, None, paid.t_catch_up, t_first=paid.t_first)

    def pay_draft_cost(self, context: Sequence[int], k: int) -> Draft:
        """The draft model's own greedy k-token proposal, its tokens discarded: the forward
        passes a model drafter makes, and what they took (t_catch_up, t_first)."""
        if self.model is None:
            return Draft.empty()
        return self.model.propose(context, k, SamplingParams())

    @property
    def token_s(self) -> float | None:
        return self.model.token_s if self.model is not None else None

    def offer(self, context: Sequence[int]) -> Offer:
        behind = self.model.behind(context) if self.model is not None else 0
        return Offer(max(0, len(self.expected) - len(context)), behind=behind)

    def acceptance(self) -> ByPosition:
        return ByPosition()

    def sync(self, context: Sequence[int]) -> None:
        if self.model is not None:  # the draft model's own catch-up pass
            self.model.sync(context)

    def reset(self, rng: np.random.Generator) -> None:
        if self.model is not None:
            self.model.reset(rng)


def wrong_positions(acceptance: float, n: int, seed: int = 0) -> np.ndarray:
    """[n] bool: each text position is wrong with probability 1 - acceptance, fixed per seed."""
    return np.random.default_rng([seed, int(acceptance * 1000)]).random(n) >= acceptance


@dataclass
class Run:
    """One generation's figures (the fastest of the repeats)."""

    tokens_per_second: float
    n_steps: int
    mean_acceptance_length: float
    acceptance_rate: float
    verify_ms_per_step: float
    draft_ms_per_step: float
    loop_us_per_step: float
    identical: bool

    @staticmethod
    def of(result: Result, reference: Sequence[int] | None) -> Run:
        s = result.stats
        steps = max(s.n_steps, 1)
        return Run(
            tokens_per_second=s.tokens_per_second,
            n_steps=s.n_steps,
            mean_acceptance_length=s.mean_acceptance_length,
            acceptance_rate=s.acceptance_rate,
            verify_ms_per_step=1e3 * s.t_verify / steps,
            draft_ms_per_step=1e3 * s.t_draft / steps,
            loop_us_per_step=1e6 * s.t_loop / steps,
            identical=reference is None or list(result.tokens) == list(reference),
        )


def fastest(runs: list[Run]) -> Run:
    return max(runs, key=lambda r: r.tokens_per_second)


class Bench:
    def __init__(
        self, target: Runtime, draft: Runtime | None, settings: Settings, draft_token_s: float
    ) -> None:
        self.target, self.draft, self.settings = target, draft, settings
        self.draft_token_s = draft_token_s  # the calibrated price a ModelDrafter starts from
        # open_model gives an ONNX target on CUDA a sampling head; the runtime's default
        # (no head) is what every measurement but sampling_head's comparison runs
        self.head = getattr(target, "sampling_head", None)
        if self.head is not None:
            target.sampling_head = None  # type: ignore[attr-defined]
        # and a llama.cpp target on CUDA backend sampling, likewise (Bench.backend_sampling)
        self.backend_sampling_on = getattr(target, "backend_sampling", False)
        if self.backend_sampling_on:
            target.backend_sampling = False  # type: ignore[attr-defined]
        self.prompt = target.tokenize(PROMPT, special=True)

    def generate(
        self, drafters: list, policy: Policy, sp: SamplingParams = SamplingParams()
    ) -> Result:
        decoder = SpeculativeDecoder(self.target, drafters, policy)
        return decoder.generate(self.prompt, max_tokens=self.settings.max_tokens, sp=sp)

    def plain(self) -> tuple[list[int], Run]:
        runs, tokens = [], None
        for _ in range(self.settings.repeats + 1):  # the first allocates and captures: not timed
            result = self.generate([], FixedPolicy(None, 0))
            if tokens is not None:
                runs.append(Run.of(result, tokens))
            tokens = list(result.tokens)
        assert tokens is not None
        return tokens, fastest(runs)

    def oracle(self, reference: list[int], acceptance: float, real_cost: bool, policy_of) -> Run:
        wrong = wrong_positions(acceptance, len(reference))
        runs = []
        for _ in range(self.settings.repeats):
            model = None
            if real_cost and self.draft is not None:
                model = ModelDrafter(
                    self.draft, token_s=self.draft_token_s, n_ids=self.target.n_vocab
                )
            drafter = OracleDrafter(self.prompt, reference, wrong, self.target.n_vocab, model)
            runs.append(Run.of(self.generate([drafter], policy_of()), reference))
        return fastest(runs)

    def runs_at(self, k: int, reference: list[int], sp: SamplingParams = SamplingParams()):
        """repeats + 1 generations (the first binds and captures: not timed): plain (k = 0), or
        k = 4 drafts of the oracle at acceptance 0.8 and zero draft cost."""
        wrong = wrong_positions(0.8, len(reference))
        expected = reference if sp.greedy else None
        runs = []
        for _ in range(self.settings.repeats + 1):
            oracle = OracleDrafter(self.prompt, reference, wrong, self.target.n_vocab)
            policy = FixedPolicy("model", k) if k else FixedPolicy(None, 0)
            result = self.generate([oracle] if k else [], policy, sp)
            runs.append(Run.of(result, expected))
        return runs[1:] or runs

    def loop_overhead(self, reference: list[int]) -> dict[str, dict]:
        """The loop's own time per step at k = 4 (acceptance 0.8, zero draft cost), greedy and
        sampled, against the verify pass it wraps."""
        out = {}
        for name, sp in {"greedy": SamplingParams(), **SAMPLED}.items():
            run = min(self.runs_at(4, reference, sp), key=lambda r: r.loop_us_per_step)
            out[name] = {
                "loop_us_per_step": round(run.loop_us_per_step, 1),
                "verify_ms_per_step": round(run.verify_ms_per_step, 3),
                "share_of_verify": round(run.loop_us_per_step / 1e3 / run.verify_ms_per_step, 4),
            }
        return out

    def top_outputs(self, reference: list[int]) -> dict[str, dict] | None:
        """Greedy plain decoding and k = 4 (acceptance 0.8, zero draft cost), each row's argmax
        read where the rows are (an ONNX graph's top outputs, llama.cpp's logits buffer) and
        then with the logits copied to the host instead: what reading them in place saves a
        step. None where the target cannot (an ONNX graph without top outputs)."""
        if not self.target.top_outputs:
            return None
        out = {}
        for way in ("top outputs", "logits to host"):
            self.target.top_outputs = way == "top outputs"  # type: ignore[attr-defined]
            try:
                for k in (0, 4):
                    run = fastest(self.runs_at(k, reference))
                    out[f"{way}, k={k}"] = {
                        "tokens_per_second": round(run.tokens_per_second, 2),
                        "verify_ms_per_step": round(run.verify_ms_per_step, 3),
                        "loop_us_per_step": round(run.loop_us_per_step, 1),
                        "identical": run.identical,
                    }
            finally:
                self.target.top_outputs = True  # type: ignore[attr-defined]
        return out

    def sampling_head(self, reference: list[int]) -> dict[str, dict] | None:
        """Sampled plain decoding and k = 4 (acceptance 0.8, zero draft cost), each row's
        distribution from the sampling head's candidates and then from the logits copied to
        the host instead (the runtime's default): what the head saves or costs a step. None
        where the target has no head."""
        head = self.head
        if head is None:
            return None
        out = {}
        for name, sp in list(SAMPLED.items())[:2]:  # temperature alone takes every logit
            for way in ("sampling head", "logits to host"):
                self.target.sampling_head = head if way == "sampling head" else None  # type: ignore[attr-defined]
                try:
                    for k in (0, 4):
                        run = fastest(self.runs_at(k, reference, sp))
                        out[f"{name}, {way}, k={k}"] = {
                            "tokens_per_second": round(run.tokens_per_second, 2),
                            "verify_ms_per_step": round(run.verify_ms_per_step, 3),
                            "loop_us_per_step": round(run.loop_us_per_step, 1),
                        }
                finally:
                    self.target.sampling_head = None  # type: ignore[attr-defined]
        return out

    def backend_sampling(self, reference: list[int]) -> dict[str, dict] | None:
        """Greedy and sampled (every SAMPLED mode: top-k 40 + top-p 0.9, top-p 0.9, temperature
        0.8 alone) plain decoding and k = 4 (acceptance 0.8, zero draft cost), with the
        logits copied to the host (the default) and then each row's largest logits from
        llama.cpp's backend sampler (its top 2, greedy; its top 41; its top 4,097, the pass
        re-run for a row they cannot decide): what it saves or costs a step, and whether the
        output is the same. None where the target has no backend sampling."""
        if not self.backend_sampling_on:
            return None
        modes = {"greedy": SamplingParams(), **SAMPLED}
        out, host_tokens = {}, {}
        for way in ("logits to host", "backend sampling"):
            self.target.backend_sampling = way == "backend sampling"  # type: ignore[attr-defined]
            try:
                for (name, sp), k in ((m, k) for m in modes.items() for k in (0, 4)):
                    run = fastest(self.runs_at(k, reference, sp))
                    tokens = self.generate_tokens(k, reference, sp)
                    out[f"{name}, {way}, k={k}"] = {
                        "tokens_per_second": round(run.tokens_per_second, 2),
                        "verify_ms_per_step": round(run.verify_ms_per_step, 3),
                        "loop_us_per_step": round(run.loop_us_per_step, 1),
                        "identical": tokens == host_tokens.setdefault((name, k), tokens),
                    }
            finally:
                self.target.backend_sampling = False  # type: ignore[attr-defined]
        return out

    def top_k_cost(self, width: int = 5, reps: int = 8) -> list[dict] | None:
        """A verify pass of `width` tokens (every row) with llama.cpp's backend top-k sampler
        cut to each of TOP_K_COLUMNS (0: no sampler, the logits copied), each timed in a run
        of its own, so its graph is captured (ms, the median of the last reps - 2): what the
        device's top-k costs a pass, and how many columns a wide cut
        (sampling_head.WIDE_COLUMNS: 4,097 now) can afford. A row those columns leave
        undecided re-runs the whole pass (on the demo target's real rows, 6.6% of 5-row
        steps at T 1.0 with 4,097 columns, 2.6% with 8,193, 1.3% with 16,385). None where the
        target has no backend sampling."""
        if not self.backend_sampling_on:
            return None
        target, rng = self.target, np.random.default_rng(4)
        warm_at_prefix(target, 64, rng)
        start, tokens = target.n_past, rng.integers(0, target.n_vocab, size=width).tolist()
        out = []
        for columns in (c for c in TOP_K_COLUMNS if c < target.n_vocab):
            times = []
            for _ in range(reps):
                target.rollback(start)
                t0 = time.perf_counter()
                if columns:
                    target.sampled_pass(tokens, False, columns)  # type: ignore[attr-defined]
                else:
                    target.forward(tokens)
                times.append(1e3 * (time.perf_counter() - t0))
            out.append({"columns": columns, "ms": round(float(np.median(times[2:])), 4)})
        target.attach_top_k(0)  # type: ignore[attr-defined]  # the runtime's default again
        target.reset()
        return out

    def generate_tokens(self, k: int, reference: list[int], sp: SamplingParams) -> list[int]:
        """One generation of runs_at's (k = 0: plain), its tokens."""
        wrong = wrong_positions(0.8, len(reference))
        oracle = OracleDrafter(self.prompt, reference, wrong, self.target.n_vocab)
        policy = FixedPolicy("model", k) if k else FixedPolicy(None, 0)
        return list(self.generate([oracle] if k else [], policy, sp).tokens)


# Bench.top_k_cost's cuts: none (the logits), greedy's top 2, top-k 40's 41, the wide cuts
TOP_K_COLUMNS = (0, 2, 41, 4_097, 8_193, 16_385)


def draft_confidence(draft: Runtime, reps: int = 12, prefix: int = 64) -> dict:
    """A draft model's one-token pass reduced to its top token (greedy drafting), without
    and with its probability (the confidence `auto` drafts with, DRAFT_CONFIDENCE: on
    llama.cpp an exp and a sum over the vocabulary on the host), ms, the median of the
    last reps - 2: what the confidence adds to a draft token. The kit's draft price
    (draft_token_ms) is taken without it."""
    rng = np.random.default_rng(5)
    warm_at_prefix(draft, prefix, rng)
    start, token = draft.n_past, [int(rng.integers(0, draft.n_vocab))]
    out = {}
    for with_prob in (False, True):
        times = []
        for _ in range(reps):
            draft.rollback(start)
            t0 = time.perf_counter()
            forward_top(draft, token, last_only=True, with_prob=with_prob)
            times.append(1e3 * (time.perf_counter() - t0))
        out["with_prob_ms" if with_prob else "token_ms"] = round(float(np.median(times[2:])), 4)
    out["confidence_ms"] = round(out["with_prob_ms"] - out["token_ms"], 4)
    draft.reset()
    return out


def first_passes(runtime: Runtime, n_max: int, last_only: bool, prefix: int = 64) -> list[dict]:
    """Each width's first pass against its second (ms), after a prefix, on a runtime fresh from
    opening: what a process's first request pays per width (ONNX Runtime's CUDA path captures
    a graph per width on first use), and what the controller must not keep as a price
    (controller.followed). The target's passes return every row, as a verify pass does; the
    draft's the last, as a proposal does."""
    rng = np.random.default_rng(1)
    prefix = min(prefix, runtime.n_ctx - n_max)
    runtime.reset()
    runtime.forward(rng.integers(0, runtime.n_vocab, size=prefix).tolist(), last_only=True)
    out = []
    for n in range(1, n_max + 1):
        ms = [1e3 * time_pass(runtime, n, rng, last_only) for _ in range(2)]
        out.append({"width": n, "first_ms": round(ms[0], 4), "second_ms": round(ms[1], 4),
                    "first_over_second": round(ms[0] / ms[1], 2)})  # fmt: skip
    runtime.reset()
    return out


def step_ms(runtime: Runtime, n: int, rng: np.random.Generator) -> float:
    """One loop step's pass, timed (ms): a plain step (one token, its row), or a verify pass
    of n tokens (every row)."""
    return 1e3 * time_pass(runtime, n, rng, last_only=n == 1)


def slowest_first_pass(passes: list[dict]) -> dict:
    """The width whose first pass cost the most times its second (first_passes' rows)."""
    return max(passes, key=lambda x: x["first_over_second"])


def width_switches(
    runtime: Runtime, widths: Sequence[int] = (2, 5, 9), reps: int = 6, prefix: int = 64
) -> list[dict]:
    """Plain steps (one token, the last row) and n-token verify passes (every row), each
    timed in a run of its own shape and then alternating with the other, as the adaptive
    loop alternates them (ms, median of the last reps - 2 of each). llama.cpp's CUDA back-end
    keeps one graph and rebuilds it when a pass's shape changes (it runs the pass uncaptured,
    and captures again on the second like it): on an H200 a one-token pass timed right after
    an n-token one took 3.72 ms against a steady plain step's 1.78 (docs/benchmarks.md)."""
    rng = np.random.default_rng(2)
    warm_at_prefix(runtime, min(prefix, runtime.n_ctx - max(widths)), rng)

    def settled(times: list[float]) -> float:
        return round(float(np.median(times[2:])), 4)  # the first two may capture a graph

    ms = partial(step_ms, runtime, rng=rng)

    out = []
    for n in widths:
        steady_plain = settled([ms(1) for _ in range(reps)])
        steady = settled([ms(n) for _ in range(reps)])
        pairs = [(ms(1), ms(n)) for _ in range(reps)]
        alternating_plain = settled([a for a, _ in pairs])
        alternating = settled([b for _, b in pairs])
        ratio = (alternating_plain + alternating) / (steady_plain + steady)
        out.append({"width": n, "steady_plain_ms": steady_plain, "steady_ms": steady,
                    "alternating_plain_ms": alternating_plain, "alternating_ms": alternating,
                    "alternating_over_steady": round(ratio, 2)})  # fmt: skip
    runtime.reset()
    return out


def capture_at_load(args: argparse.Namespace, n_max: int) -> dict | None:
    """On models opened afresh: the seconds capturing the loop's step shapes at load takes
    (Runtime.capture_graphs, as `serve` does: the target's widths 1..n_max every row,
    the draft's STEP_SHAPES), then each width's first pass against its second, which the
    capture should bring to about 1x. None where the target captures nothing (llama.cpp)."""
    target, draft = open_bundle(args)
    if type(target).capture_graphs is Runtime.capture_graphs:  # the protocol's: captures none
        return None
    out: dict = {}
    for name, runtime, shapes in (("target", target, [(n, n) for n in range(1, n_max + 1)]),
                                  ("draft", draft, STEP_SHAPES)):  # fmt: skip
        if runtime is None:
            continue
        t0 = time.perf_counter()
        graphs = runtime.capture_graphs(shapes)
        out[name] = {"graphs": graphs, "seconds": round(time.perf_counter() - t0, 3)}
    out["first_passes_after"] = {"target": first_passes(target, n_max, last_only=False)}
    if draft is not None:
        out["first_passes_after"]["draft"] = first_passes(draft, 2, last_only=True)
    return out


def switch_recovery(
    runtime: Runtime, widths: Sequence[int] = (2, 5, 9), reps: int = 5, prefix: int = 64
) -> list[dict]:
    """Plain steps in a run, one n-token pass (every row), then SWITCH_AFTER plain steps,
    each timed (ms, the median over reps): what one verify step costs beyond its own pass
    where a runtime keeps one CUDA graph. ggml-cuda (llama-cpp-python 0.3.36) runs a pass
    whose shape changed uncaptured and captures on the next like it, so a verify step would
    cost the next two plain steps a graph each; a runtime with a graph per width (ONNX
    Runtime) shows no such tail."""
    rng = np.random.default_rng(3)
    warm_at_prefix(runtime, min(prefix, runtime.n_ctx - max(widths)), rng)
    ms = partial(step_ms, runtime, rng=rng)

    out = []
    for n in widths:
        runs = []
        for _ in range(reps):
            for _ in range(SWITCH_SETTLE):
                ms(1)
            runs.append([ms(1), ms(n), *(ms(1) for _ in range(SWITCH_AFTER))])
        steady, wide, *after = (round(float(x), 4) for x in np.median(runs, axis=0))
        out.append({"width": n, "steady_plain_ms": steady, "wide_ms": wide,
                    "plain_after_ms": after,
                    "extra_after_ms": round(sum(a - steady for a in after), 4)})  # fmt: skip
    runtime.reset()
    return out


def bundle_head(bundle: Path) -> Path | None:
    """The bundle's EAGLE-3 head: make_gguf.py's HEAD_FILE beside a GGUF pair, or the head
    an export wrote (an ONNX bundle's head folder); None where it has none."""
    if (bundle / HEAD_FILE).is_file():
        return bundle / HEAD_FILE
    return read_bundle(bundle).path("head") if is_bundle(bundle) else None


def head_cost(target: Runtime, path: Path | None, context: Sequence[int], reps: int) -> dict:
    """A draft head's proposals of k = 1..8 tokens through HeadDrafter at one context (path:
    an EAGLE-3 head; None: the target's own MTP layer, opened where it was loaded),
    each k timed reps times after a warm-up round (ms, medians): a proposal rewrites the
    boundary row from the target's features (fc, then one decoder row: the first token) and
    decodes k - 1 rows more, so the fitted line's slope is the cost per drafted token. Then the
    target's one-token pass while it keeps the head's layers' inputs (as it must beside the
    head). Last: from open_head on, every target pass copies those inputs out."""
    from edgespec.drafters.head import HeadDrafter

    head = target.open_mtp() if path is None else target.open_head(str(path))
    drafter = HeadDrafter(target, head)
    context = list(context)[: target.n_ctx - max(KS) - 2]
    target.reset()
    target.forward(context[:-1], last_only=True)  # as the engine leaves it before a proposal
    drafter.reset(np.random.default_rng(0))
    drafter.sync(context)
    greedy = SamplingParams()
    for k in KS:  # warm-up: each shape's first pass
        drafter.propose(context, k, greedy)
    times: dict[int, list[float]] = {k: [] for k in KS}
    for _ in range(reps):
        for k in KS:
            t0 = time.perf_counter()
            drafter.propose(context, k, greedy)
            times[k].append(1e3 * (time.perf_counter() - t0))
    by_k = [float(np.median(times[k])) for k in KS]
    slope, intercept = np.polyfit(KS, by_k, 1)
    with_head = 1e3 * measure_curve(target, 1, reps=reps)[0]
    target.reset()
    return {
        "kind": head.kind, "file": path.name if path else None,
        "gigabytes": round(size_of(path) / 1e9, 3) if path else None,
        "layers": list(head.layers) if head.kind == "eagle" else [],  # type: ignore[attr-defined]
        "n_embd": head.n_embd,  # type: ignore[attr-defined]
        "propose_ms_by_k": [round(t, 4) for t in by_k],
        "token_ms": round(float(slope), 4), "first_ms": round(float(slope + intercept), 4),
        "target_token_ms_keeping_layers": round(with_head, 4),
    }  # fmt: skip


def measure(args: argparse.Namespace) -> dict:
    settings = SMOKE if args.smoke else Settings()
    target, draft = open_bundle(args)
    t0 = time.perf_counter()
    first = {"target": first_passes(target, settings.curve_n, last_only=False)}
    if draft is not None:
        first["draft"] = first_passes(draft, 2, last_only=True)
    switch_widths = [n for n in (2, 5, 9) if n <= settings.curve_n]
    switches = width_switches(target, switch_widths)
    recovery = switch_recovery(target, switch_widths)
    curve = measure_curve(target, settings.curve_n, reps=settings.curve_reps)
    # where the target keeps one CUDA graph (llama.cpp), measure_curve's passes ran
    # uncaptured: the controller gets replayed passes and the switch, as calibrate() does
    policy_curve, switch_s = replayed(target, curve)
    draft_token_s = measure_curve(draft, 1, reps=settings.curve_reps)[0] if draft else 0.0
    bench = Bench(target, draft, settings, draft_token_s)
    reference, plain = bench.plain()
    report: dict = {
        "label": args.label, "backend": args.backend, "device": args.device,
        "cuda_graphs": args.graphs, "machine": machine(), "bundle": str(args.bundle),
        "environment": {k: os.environ[k] for k in KERNEL_SWITCHES if k in os.environ},
        "settings": settings.__dict__, "prompt_tokens": len(bench.prompt),
        "curve_ms": [round(1e3 * t, 4) for t in curve],
        "curve_ratio": [round(t / curve[0], 4) for t in curve],
        "draft_token_ms": round(1e3 * draft_token_s, 4),
        "draft_over_target": round(draft_token_s / curve[0], 4),
        "switch_ms": round(1e3 * switch_s, 4),
        "first_passes": first, "width_switches": switches, "switch_recovery": recovery,
        "plain": plain.__dict__, "loop": bench.loop_overhead(reference), "oracle": [],
        "top_outputs": bench.top_outputs(reference),
        "sampling_head": bench.sampling_head(reference),
        "backend_sampling": bench.backend_sampling(reference),
        "backend_top_k_ms": bench.top_k_cost(),
        "draft_confidence": draft_confidence(draft) if draft is not None else None,
    }  # fmt: skip
    for acceptance in settings.acceptance if args.grid == "full" else ():
        for real_cost in (False, True) if draft else (False,):
            policies: dict[int | str, Callable[[], Policy]] = {
                k: partial(FixedPolicy, "model", k) for k in settings.ks
            }
            policies["auto"] = lambda: AdaptivePolicy(
                CostCurve(list(policy_curve), switch_s=switch_s), k_max=8
            )
            for k, policy_of in policies.items():
                run = bench.oracle(reference, acceptance, real_cost, policy_of)
                report["oracle"].append({
                    "acceptance": acceptance, "draft_cost": "real" if real_cost else "zero",
                    "k": k, "speedup": round(run.tokens_per_second / plain.tokens_per_second, 4),
                    **run.__dict__,
                })  # fmt: skip
    head_path = bundle_head(Path(args.bundle))
    if head_path is not None:
        head = head_cost(target, head_path, bench.prompt + reference, settings.curve_reps)
        report["head"] = head
        report["head_token_ms"] = head["token_ms"]
        report["head_over_target"] = round(head["token_ms"] / report["curve_ms"][0], 4)
    report["capture_at_load"] = capture_at_load(args, settings.curve_n)
    report["goals"] = goals(report)
    report["seconds"] = round(time.perf_counter() - t0, 1)
    return report


def open_bundle(args: argparse.Namespace) -> tuple[Runtime, Runtime | None]:
    """The bundle's target and draft on the back-end and device asked for. Not
    edgespec.pair.open_pair: RuntimeOptions has no switch for CUDA graphs, which this varies."""
    bundle = read_bundle(args.bundle)
    paths = bundle.path("target"), bundle.path("draft")
    assert paths[0] is not None
    return open_model(paths[0], args), (open_model(paths[1], args) if paths[1] else None)


def open_model(path: Path, args: argparse.Namespace) -> Runtime:
    n_ctx = 1024
    if args.backend == "llama":
        from edgespec.runtimes.llama_library import import_llama_cpp
        from edgespec.runtimes.llamacpp import LlamaCppRuntime, LlamaOptions

        layers = -1 if args.device == "cuda" else 0  # -1: every layer
        if args.graphs == "off":  # read by ggml-cuda at its first graph, after this
            os.environ["GGML_CUDA_DISABLE_GRAPHS"] = "1"
        # for Bench.backend_sampling's comparison only, where this llama.cpp samples on its back-end
        on_device = args.device == "cuda" and hasattr(import_llama_cpp(), "llama_set_sampler")
        options = LlamaOptions(backend_sampling=on_device)
        return LlamaCppRuntime(path, n_ctx=n_ctx, n_gpu_layers=layers, options=options)
    if args.backend == "tensorrt":  # a --format tensorrt bundle; its engines always use graphs
        from edgespec.backends import RuntimeOptions, open_runtime
        from edgespec.runtimes.tensorrt import TensorRTRuntime

        trt = open_runtime(path, RuntimeOptions(n_ctx=n_ctx, device=args.device))
        if args.device == "cuda" and not isinstance(trt, TensorRTRuntime):
            raise SystemExit(f"{path}: no TensorRT engine ran (see the warning above)")
        return trt
    from edgespec.runtimes.onnxrt import OnnxOptions, OnnxRuntime, require_cuda_provider

    providers = ["CUDAExecutionProvider"] if args.device == "cuda" else None
    options = OnnxOptions(
        cuda_graph=args.graphs == "on",
        sampling_head=args.device == "cuda",  # for Bench.sampling_head's comparison only
    )
    rt = OnnxRuntime(path, n_ctx=n_ctx, providers=providers, options=options)
    if args.device == "cuda":
        require_cuda_provider(rt.session, path)
    return rt


def goals(r: dict) -> dict:
    """The issue's goals, each with the measured figure and whether it is met."""
    verify_1 = r["curve_ms"][0]
    rows = {(o["acceptance"], o["draft_cost"], o["k"]): o for o in r["oracle"]}
    out: dict = {}
    share = max(v["share_of_verify"] for v in r["loop"].values())
    out["loop_overhead_at_most_5pct_of_verify"] = {"worst_share": share, "met": share <= 0.05}
    ceiling_row = rows.get((1.0, "zero", 4))
    if ceiling_row and len(r["curve_ms"]) >= 5:
        ceiling = 5 / (r["curve_ms"][4] / verify_1)
        got = ceiling_row["speedup"]
        out["k4_within_10pct_of_curve_ceiling"] = {
            "speedup": got, "ceiling": round(ceiling, 3), "ratio": round(got / ceiling, 3),
            "met": got >= 0.9 * ceiling,
        }  # fmt: skip
    fixed = [o for (a, c, k), o in rows.items() if a == 0.8 and c == "real" and k != "auto"]
    auto = rows.get((0.8, "real", "auto"))
    if fixed and auto:
        best = max(fixed, key=lambda o: o["speedup"])
        out["auto_within_5pct_of_best_k_at_0.8_real_cost"] = {
            "auto": auto["speedup"], "best_k": best["k"], "best": best["speedup"],
            "met": auto["speedup"] >= 0.95 * best["speedup"] and auto["speedup"] >= 1.0,
        }  # fmt: skip
    if "head_over_target" in r:  # issue 46: a head's token <= 0.1 of a 7B target's
        out["head_token_at_most_0.1_of_target"] = {
            "head_token_ms": r["head_token_ms"], "head_over_target": r["head_over_target"],
            "met": r["head_over_target"] <= 0.1,
        }  # fmt: skip
    if not r["oracle"]:
        return out
    out["all_outputs_identical_to_plain"] = {
        "departed": sum(not o["identical"] for o in r["oracle"]),
        "met": all(o["identical"] for o in r["oracle"]),
    }
    return out


def machine() -> dict:
    info: dict[str, str | None] = {
        "python": platform.python_version(),
        "processor": platform.processor(),
    }
    info["gpu"] = gpu_name()
    return info


# --- the table --------------------------------------------------------------------------------


def table(reports: list[dict]) -> str:
    lines = []
    for r in reports:
        env = "".join(f", {k}={v}" for k, v in (r.get("environment") or {}).items())
        gpu = r["machine"].get("gpu") or "no GPU"
        lines.append(f"\n## {r['label']} on {r['backend']} ({r['device']}, CUDA graphs "
                     f"{r['cuda_graphs']}{env}) — {gpu}")  # fmt: skip
        lines.append("verify cost t(n)/t(1), n=1..: "
                     + " ".join(f"{x:.2f}" for x in r["curve_ratio"])
                     + f"   t(1) = {r['curve_ms'][0]:.2f} ms; draft token {r['draft_token_ms']:.2f}"
                     f" ms ({r['draft_over_target']:.2f} of a target token)"
                     + (f"; a change of width {r['switch_ms']:.2f} ms (one graph)"
                        if r.get("switch_ms") else ""))  # fmt: skip
        if r.get("head"):
            h = r["head"]
            lines.append(f"EAGLE-3 head ({h['file']}, {h['gigabytes']:.2f} GB): a drafted token "
                         f"{h['token_ms']:.3f} ms ({r['head_over_target']:.3f} of a target token),"
                         f" the first {h['first_ms']:.3f} ms; k = 1..8 "
                         + " ".join(f"{t:.2f}" for t in h["propose_ms_by_k"])
                         + " ms; target t(1) keeping its layers "
                         f"{h['target_token_ms_keeping_layers']:.2f} ms")  # fmt: skip
        for model, passes in (r.get("first_passes") or {}).items():
            worst = slowest_first_pass(passes)
            lines.append(f"first pass / second, {model}: up to {worst['first_over_second']:.1f}x "
                         f"(width {worst['width']}: {worst['first_ms']:.2f} against "
                         f"{worst['second_ms']:.2f} ms)")  # fmt: skip
        for w in r.get("switch_recovery") or ():
            lines.append(f"plain steps around one {w['width']}-token pass: "
                         f"{w['steady_plain_ms']:.2f} ms, then {w['wide_ms']:.2f}, then "
                         + " ".join(f"{a:.2f}" for a in w["plain_after_ms"])
                         + f" ms ({w['extra_after_ms']:+.2f} ms over steady after it)")  # fmt: skip
        capture = r.get("capture_at_load") or {}
        for model, passes in (capture.get("first_passes_after") or {}).items():
            worst = slowest_first_pass(passes)
            lines.append(f"captured at load, {model}: {capture[model]['graphs']} graphs in "
                         f"{capture[model]['seconds']:.2f} s; first pass / second after: up to "
                         f"{worst['first_over_second']:.1f}x (width {worst['width']})")  # fmt: skip
        for w in r.get("width_switches") or ():
            lines.append(f"plain + {w['width']}-token pass: {w['alternating_plain_ms']:.2f} + "
                         f"{w['alternating_ms']:.2f} ms alternating, {w['steady_plain_ms']:.2f} + "
                         f"{w['steady_ms']:.2f} ms each in a run of its own "
                         f"({w['alternating_over_steady']:.2f}x)")  # fmt: skip
        p = r["plain"]
        lines.append(f"plain: {p['tokens_per_second']:.1f} tok/s, verify "
                     f"{p['verify_ms_per_step']:.2f} ms/step, loop {p['loop_us_per_step']:.0f}"
                     " us/step")  # fmt: skip
        for name, v in r["loop"].items():
            lines.append(f"loop, {name}: {v['loop_us_per_step']:.0f} us/step = "
                         f"{100 * v['share_of_verify']:.1f}% of a {v['verify_ms_per_step']:.2f} ms"
                         " verify (k=4)")  # fmt: skip
        for name, v in (r.get("top_outputs") or {}).items():
            lines.append(f"greedy, {name}: {v['tokens_per_second']:.1f} tok/s, verify "
                         f"{v['verify_ms_per_step']:.2f} ms/step, loop {v['loop_us_per_step']:.0f}"
                         " us/step" + ("" if v["identical"] else " *"))  # fmt: skip
        for name, v in (r.get("sampling_head") or {}).items():
            lines.append(f"sampled, {name}: {v['tokens_per_second']:.1f} tok/s, verify "
                         f"{v['verify_ms_per_step']:.2f} ms/step, loop {v['loop_us_per_step']:.0f}"
                         " us/step")  # fmt: skip
        for name, v in (r.get("backend_sampling") or {}).items():
            lines.append(f"backend sampling: {name}: {v['tokens_per_second']:.1f} tok/s, verify "
                         f"{v['verify_ms_per_step']:.2f} ms/step, loop {v['loop_us_per_step']:.0f}"
                         " us/step" + ("" if v["identical"] else " *"))  # fmt: skip
        if r.get("backend_top_k_ms"):
            cuts = ", ".join(f"{x['columns']}: {x['ms']:.3f}" for x in r["backend_top_k_ms"])
            lines.append(f"5-token pass by backend top-k columns (0: logits), ms: {cuts}")
        if r.get("draft_confidence"):
            c = r["draft_confidence"]
            lines.append(f"draft token {c['token_ms']:.3f} ms, with its confidence "
                         f"{c['with_prob_ms']:.3f} ms (+{c['confidence_ms']:.3f})")  # fmt: skip
        ks = [k for k in r["settings"]["ks"]] + ["auto"]
        if r["oracle"]:
            lines.append("speedup over plain | " + " | ".join(f"k={k}" for k in ks))
        for a in r["settings"]["acceptance"]:
            for cost in ("zero", "real"):
                row = [o for o in r["oracle"] if o["acceptance"] == a and o["draft_cost"] == cost]
                if not row:
                    continue
                cells = [f"{o['speedup']:.2f}" + ("" if o["identical"] else "*") for o in row]
                lines.append(f"a={a} {cost:>4} draft | " + " | ".join(cells))
        for name, g in r["goals"].items():
            figures = ", ".join(f"{k}={v}" for k, v in g.items() if k != "met")
            lines.append(f"goal {name}: {'met' if g['met'] else 'NOT met'} ({figures})")
    lines.append("(* = output departed from plain decoding)")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bundle", type=Path)
    ap.add_argument("--backend", choices=["llama", "onnx", "tensorrt"], default="llama")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument(
        "--graphs",
        choices=["on", "off"],
        default="on",
        help="CUDA graphs (ONNX Runtime's, or llama.cpp's own)",
    )
    ap.add_argument(
        "--grid",
        choices=["full", "quick"],
        default="full",
        help="quick: the cost curve, plain decoding and the loop only",
    )
    ap.add_argument("--label", default="pair")
    ap.add_argument("--smoke", action="store_true", help="tiny settings for a CPU check")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--report", type=Path, nargs="+", help="print the table of these JSON files")
    args = ap.parse_args()  # fmt: skip
    if args.report:
        print(table([json.loads(p.read_text()) for p in args.report]))
        return
    if args.bundle is None:
        ap.error("give --bundle (or --report JSON...)")
    report = measure(args)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1))
    print(table([report]))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
