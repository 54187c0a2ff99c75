"""Is it faster on these prompts, and is the answer the same? The benchmark's measuring part.

Every method runs on the same runtimes with the same sampling (greedy, or seeded: one seed
for all, so outputs compare token for token); plain decoding through the same loop is the
reference for both speed and output. Methods take turns on each prompt (bench_command.run_bench),
so the machine's drift lands inside each pair, and a speedup is the geometric mean of
per-prompt paired ratios with a 95% Student t-interval (`paired_speedup`). The command
(`edgespec bench`) is bench_command.py, the llama-cpp-python peer peer.py, the onnxruntime-genai
peer peer_genai.py, the plots plot.py.
"""

from __future__ import annotations

import logging
import math
import os
import platform
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import metadata

import numpy as np

from edgespec.app.peer_genai import GENAI_DRAFT, GENAI_NGRAM, GENAI_PLAIN
from edgespec.app.suites import Prompt
from edgespec.chat import chat_tokens
from edgespec.controller import AdaptivePolicy, FixedPolicy, Policy
from edgespec.engine import Result, SpeculativeDecoder
from edgespec.errors import EdgespecError
from edgespec.loader import SpecOptions, build_decoder
from edgespec.pair import ModelPair
from edgespec.plumbing.machine import cpu_model_and_flags
from edgespec.plumbing.progress import progress
from edgespec.runtime import K_MAX, Runtime
from edgespec.runtimes.threads import usable_cpus
from edgespec.sampling import SamplingParams

log = logging.getLogger(__name__)

PEER = "llama-cpp-python-pld"
PEER_PLAIN = "llama-cpp-python"  # the peer's own plain decoding: PEER's baseline
# Each peer method and its own plain decoding, which it is divided by (peer.py, peer_genai.py)
PEER_PLAINS = {PEER: PEER_PLAIN, GENAI_DRAFT: GENAI_PLAIN, GENAI_NGRAM: GENAI_PLAIN}
METHODS = ("plain", "model", "eagle", "mtp", "ngram", "auto", *PEER_PLAINS)
FIXED_K_METHODS = ("model", "eagle", "mtp", "ngram")  # one drafter each, at each --k
CI_METHOD = (
    "geometric mean of per-prompt paired speedups (method tok/s / baseline tok/s, repeats "
    "pooled per prompt) with a 95% Student t-interval on their logarithms"
)
# Student t 0.975 quantiles for 1..30 degrees of freedom; beyond, a Cornish-Fisher series
T975 = (12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
        2.2010, 2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
        2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423)  # fmt: skip
VECTOR_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512_vnni", "avx512_bf16",
                "avx_vnni", "amx_tile", "amx_int8", "amx_bf16", "neon", "asimd", "sve")  # fmt: skip
# The most one logit moved between a one-token pass and a verify pass of width 2..9 with
# each back-end's default CPU kernels (docs/exactness.md, docs/decisions.md):
# llama.cpp 0.71 (demo target, Q4_K, AVX2), ONNX Runtime 0.63 (demo target, MatMulNBits int4 at
# accuracy level 4). With --exact (RuntimeOptions.exact) it is 0.
BATCH_NOISE = {"LlamaCppRuntime": 0.71, "OnnxRuntime": 0.63}


def near_tie(backend: str | None = None, exact: bool = False) -> float:
    """The top-two logit gap below which speculation may pick the other token than plain
    decoding: two logits that each move by up to d can swap only where their gap is below 2d.
    0 with batch-invariant kernels; a back-end not measured gets the largest figure."""
    if exact:
        return 0.0
    return 2 * BATCH_NOISE.get(backend or "", max(BATCH_NOISE.values()))


NEAR_TIE = near_tie()  # whatever the back-end, with its default kernels
RUNTIME_NAMES = {"LlamaCppRuntime": "llama.cpp", "OnnxRuntime": "ONNX Runtime"}


def inexact_note(runtime: str) -> str:
    """Why a back-end without batch-invariant kernels may part from plain decoding."""
    return (
        f"{RUNTIME_NAMES.get(runtime, runtime)} runs its fastest kernels, which round a logit "
        "differently in a one-token pass than in a verify pass: at a near tie the answers may "
        "part; --exact makes them identical, at a cost in speed (docs/exactness.md)"
    )


@dataclass
class Run:
    """One prompt under one method."""

    prompt_id: str
    n_generated: int
    t_decode: float
    identical: bool
    repeat: int = 0
    departure: int | None = None  # index of the first token that differs from plain
    departure_gap: float | None = None  # plain's top-two logit gap there
    near_tie: bool | None = None  # that gap is below the back-end's near_tie(): noise, not a bug
    stats: dict = field(default_factory=dict)


@dataclass
class Row:
    method: str
    k: int | None
    runs: list[Run]
    baseline: str = "plain"  # the row whose runs this one's speed is divided by

    @property
    def label(self) -> str:
        return self.method if self.k is None else f"{self.method} k={self.k}"

    @property
    def tokens_per_second(self) -> float:
        t = sum(r.t_decode for r in self.runs)
        return sum(r.n_generated for r in self.runs) / t if t else 0.0

    def stat_sum(self, key: str) -> float:
        return sum(r.stats.get(key, 0) for r in self.runs)

    def as_dict(self, base: Row | None) -> dict:
        """Every number of this row; speedup over base (None: no speedup)."""
        drafted, steps = self.stat_sum("n_draft_tokens"), self.stat_sum("n_steps")
        t_decode = sum(r.t_decode for r in self.runs) or 1.0
        speedup = paired_speedup(self.runs, base.runs) if base is not None else None
        interval = [speedup.lo, speedup.hi] if speedup and speedup.lo is not None else None
        return {
            "method": self.method,
            "k": self.k if self.k is not None else ("auto" if self.method == "auto" else "-"),
            "baseline": self.baseline if base is not None else None,
            "tokens_per_second": round(self.tokens_per_second, 3),
            "speedup": speedup.gmean if speedup else None,
            "speedup_ci95": interval,
            "speedup_pooled": speedup.pooled if speedup else None,
            "acceptance_rate": round(self.stat_sum("n_accepted") / drafted, 4) if drafted else None,
            "mean_acceptance_length": (
                round(sum(r.n_generated for r in self.runs) / steps, 4) if steps else None
            ),
            "n_drafts": int(steps - self.stat_sum("n_plain_steps")) if steps else None,
            "draft_share": round(self.stat_sum("t_draft_s") / t_decode, 4),
            "verify_share": round(self.stat_sum("t_verify_s") / t_decode, 4),
            "plain_steps": int(self.stat_sum("n_plain_steps")),
            "identical": sum(r.identical for r in self.runs),
            "prompts": len(self.runs),
            "departures": [
                {
                    "prompt": r.prompt_id,
                    "repeat": r.repeat,
                    "index": r.departure,
                    "top2_gap": r.departure_gap,
                    "near_tie": r.near_tie,
                }
                for r in self.runs
                if not r.identical
            ],  # fmt: skip
            "acceptance_by_pos": acceptance_by_pos(self.runs),
            "runs": [r.__dict__ for r in self.runs],
        }


@dataclass(frozen=True)
class Speedup:
    gmean: float  # geometric mean of the per-prompt ratios
    lo: float | None  # 95% interval (None with fewer than two prompts)
    hi: float | None
    n: int  # prompts with tokens on both sides
    pooled: float  # all tokens over all seconds, method over baseline (weights long answers)


def paired_speedup(runs: Sequence[Run], base: Sequence[Run]) -> Speedup | None:
    """Each prompt's speedup is its tok/s over the baseline's on the same prompt (repeats
    pooled: their tokens over their seconds); the mean of their logs and a t-interval on it,
    exponentiated. Prompts are the sample: the interval holds prompt-to-prompt spread and
    timing noise alike, so a category of six prompts gets the wide interval it deserves."""
    mine, theirs = per_prompt_rates(runs), per_prompt_rates(base)
    logs = [math.log(mine[p] / theirs[p]) for p in mine if mine[p] > 0 and theirs.get(p, 0) > 0]
    if not logs:
        return None
    n = len(logs)
    mean = sum(logs) / n
    pooled = rate(runs) / rate(base) if rate(base) else 0.0
    if n < 2:
        return Speedup(round(math.exp(mean), 4), None, None, n, round(pooled, 4))
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (n - 1))
    half = t_quantile_975(n - 1) * sd / math.sqrt(n)
    return Speedup(
        round(math.exp(mean), 4),
        round(math.exp(mean - half), 4),
        round(math.exp(mean + half), 4),
        n,
        round(pooled, 4),
    )


def per_prompt_rates(runs: Sequence[Run]) -> dict[str, float]:
    tokens: dict[str, int] = {}
    seconds: dict[str, float] = {}
    for r in runs:
        tokens[r.prompt_id] = tokens.get(r.prompt_id, 0) + r.n_generated
        seconds[r.prompt_id] = seconds.get(r.prompt_id, 0.0) + r.t_decode
    return {p: tokens[p] / seconds[p] if seconds[p] > 0 else 0.0 for p in tokens}


def rate(runs: Sequence[Run]) -> float:
    t = sum(r.t_decode for r in runs)
    return sum(r.n_generated for r in runs) / t if t > 0 else 0.0


def t_quantile_975(df: int) -> float:
    """Student t's 0.975 quantile (a two-sided 95% interval): a table to 30 degrees of
    freedom, then the Cornish-Fisher expansion around the normal's 1.96 (error < 1e-4)."""
    if df < 1:
        raise ValueError("a t-interval needs at least one degree of freedom")
    if df <= len(T975):
        return T975[df - 1]
    z = 1.959964
    return (
        z
        + (z**3 + z) / (4 * df)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3)
    )


def machine_info() -> dict:
    """What the figures were measured on: the CPU's model and flags (/proc/cpuinfo, as lscpu
    reads them), cores, load, kernel and the back-end versions."""
    model, flags = cpu_model_and_flags()
    versions = {}
    for package in (
        "llama-cpp-python",
        "onnxruntime",
        "onnxruntime-gpu",
        "onnxruntime-genai",
        "numpy",
    ):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            pass
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "usable_cores": len(usable_cpus()) or None,  # None: no CPU affinity to read
        "flags": flags,
        "loadavg": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "kernel": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "versions": versions,
    }


def machine_line(machine: dict) -> str:
    vector = [f for f in VECTOR_FLAGS if f in machine["flags"]]
    load = machine.get("loadavg")
    load_text = f", load {load[0]:.2f}" if load else ""
    return (
        f"machine: {machine['cpu']}, {machine['cores']} cores{load_text}; "
        f"flags: {' '.join(vector) or '-'}"
    )


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

    def __init__(
        self,
        pair: ModelPair,
        k_max: int = K_MAX,
        sp: SamplingParams = SamplingParams(),
        draft_confidence: float | None = None,
    ):
        self.pair = pair
        self.sp = sp  # every method samples alike: greedy, or seeded (one seed for all)
        auto = SpecOptions("auto", None, k_max, draft_confidence=draft_confidence)
        # a CUDA graph's capture is paid once per process, not by the first prompt's method
        self.decoder = build_decoder(pair, auto, capture_graphs=True)
        self.target = pair.target
        self.near_tie = near_tie(type(pair.target).__name__, pair.target.batch_invariant)
        policy = self.decoder.policy
        self.adaptive = policy if isinstance(policy, AdaptivePolicy) else None
        self.decoders: dict[tuple[str, int | None], SpeculativeDecoder] = {}
        self.last_results: list[Result] = []

    def prompt_tokens(self, prompt: Prompt) -> list[int]:
        """A chat through the model's template; raw text as `edgespec run` reads it."""
        if prompt.text is not None:
            return self.decoder.prompt_tokens(prompt.text)
        return chat_tokens(self.target, prompt.messages)

    def policy(self, method: str, k: int | None) -> Policy:
        if method == "plain":
            return FixedPolicy(None, 0)
        if method == "auto":
            if self.adaptive is None:
                raise EdgespecError("method auto needs the adaptive controller (drop --k)")
            return self.adaptive
        return FixedPolicy(method, k or 4)

    def decoder_for(self, method: str, k: int | None) -> SpeculativeDecoder:
        """One decoder per method and k, made once: every decoder shares the runtimes and
        drafters (each request resets them), so methods can take turns prompt by prompt."""
        key = (method, k)
        if key not in self.decoders:
            drafters = self.decoder.drafters
            if method in FIXED_K_METHODS and method not in drafters:
                raise EdgespecError(
                    f"method {method} needs its drafter: pass --draft for model, --head for "
                    "eagle, a target with MTP layers for mtp"
                )
            policy = self.policy(method, k)
            self.decoders[key] = SpeculativeDecoder(self.target, list(drafters.values()), policy)
        return self.decoders[key]

    def generate(self, method: str, k: int | None, prompt: Prompt, toks, max_tokens) -> Result:
        decoder = self.decoder_for(method, k)
        return decoder.generate(toks, max_tokens=token_budget(prompt, max_tokens), sp=self.sp)

    def run_method(self, method: str, k: int | None, prompts, tokens, max_tokens, reference) -> Row:
        """All prompts under one method (the demo's single request per method)."""
        runs, results = [], []
        cases = zip(prompts, tokens, reference or [None] * len(prompts))
        label = method if k is None or method in ("plain", "auto") else f"{method} k={k}"
        for prompt, toks, ref in progress(cases, label, unit="prompt", total=len(prompts)):
            result = self.generate(method, k, prompt, toks, max_tokens)
            runs.append(self.compare(prompt, toks, result, ref))
            results.append(result)
        self.last_results = results
        return Row(method, k if method not in ("plain", "auto") else None, runs)

    def compare(
        self, prompt: Prompt, toks, result: Result, ref: Result | None, repeat: int = 0
    ) -> Run:
        stats = result.stats.as_dict()
        stats["drafted_by_pos"] = list(result.stats.drafted_by_pos)
        run = Run(
            prompt.id, result.stats.n_generated, result.stats.t_decode, True, repeat, stats=stats
        )
        if ref is not None:
            run.departure = first_departure(ref.tokens, result.tokens)
            run.identical = run.departure is None
            if run.departure is not None:  # at len(ref.tokens): plain ended, the other went on
                run.departure_gap = top2_gap(self.target, toks + ref.tokens[: run.departure])
                run.near_tie = run.departure_gap < self.near_tie
        return run
