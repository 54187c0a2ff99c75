"""Replay the adaptive controller over recorded plain decoding, each pass charged by a curve.

Greedy decoding emits the target's own tokens whatever is drafted, so one plain run per prompt
decides the fate of every draft. `record` saves those runs (prompt and output token ids; with
a draft model, its teacher-forced greedy token and probability at every output position, and
the pair's cost curve and draft price). `replay` runs the real SpeculativeDecoder, drafters
and policy over runtimes that answer with the recording, every pass of either model charged
on a virtual clock (the engine's and the drafter's clock) what a cost curve says a pass of its
width costs, in one-token target passes: the speedup a controller gets on that curve (a CPU's,
a GPU kit run's), with no timing noise. Replayed output must equal the recording. Left out:
the loop's own time (`edgespec bench` measures it) and a machine's noise. The knobs of
finished experiments (--believed, --cold, --noise, --confidence, --untold, `calibration`)
are at commit f7269df.

    python bench/replay.py record --target demo-target.gguf --suites edit=256,open,chat,code \
        --limit 40 --out rec.json
    python bench/replay.py replay --record rec.json [--curve llama-cpu] \
        [--curve my-gpu=1,1.01,1.03,...] [--k-max 32] [--json out.json]
    python bench/replay.py replay --record r.json --kit RUN.json --policies auto,oracle,model=1

With --kit, the draft model is priced at the kit's draft token, and `auto`'s at that plus
its confidence (the kit's draft_confidence, where the run measured it).
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgespec.app.bench_runs import machine_info, token_budget
from edgespec.app.suites import load_suite
from edgespec.backends import RuntimeOptions
from edgespec.chat import chat_tokens
from edgespec.controller import AdaptivePolicy, CostCurve, FixedPolicy, Learned, Policy, taught
from edgespec.controller.calibrate import cost_curve
from edgespec.drafters.base import Drafter, Offer
from edgespec.drafters.model import ModelDrafter
from edgespec.drafters.ngram import NgramDrafter
from edgespec.engine import SpeculativeDecoder, Stats
from edgespec.loader import DRAFT_CONFIDENCE, SpecOptions, make_policy
from edgespec.pair import open_pair
from edgespec.plumbing.hugepages import reexec_with_tunable
from edgespec.runtime import Runtime, VocabInfo
from edgespec.sampling import SamplingParams

CURVES_FILE = Path(__file__).with_name("replay_curves.json")
DEFAULT_CURVES = ("llama-cpu", "onnx-cpu", "gpu-assumed")


# --- recording ------------------------------------------------------------------------------


def record(
    target: str,
    suites: dict[str, int],
    threads: int | None,
    limit: int | None,
    draft: str | None = None,
) -> dict:
    """Plain greedy decoding of the suites' prompts (the first `limit` of each): prompt and
    output token ids; with a draft model (given, or a bundle's), what it predicts at every
    output position and the pair's cost curve, so replay can draft with it."""
    pair = open_pair(target, draft, RuntimeOptions(n_ctx=4096, n_threads=threads))
    decoder = SpeculativeDecoder(pair.target, [], FixedPolicy(None, 0))
    eog = sorted(pair.target.vocab_info().eog_ids)
    cases = []
    for suite, max_tokens in suites.items():
        for prompt in load_suite(suite, limit):
            tokens = chat_tokens(pair.target, prompt.messages)
            result = decoder.generate(tokens, max_tokens=token_budget(prompt, max_tokens))
            ended = [eog[0]] if result.finish_reason == "stop" else []  # output ends with it
            case = {"suite": suite, "id": prompt.id, "category": prompt.category,
                    "prompt": tokens, "output": result.tokens + ended, "eog": eog[0]}  # fmt: skip
            if pair.draft is not None:
                case["draft"], case["draft_p"] = teacher_forced(pair.draft, tokens, case["output"])
            cases.append(case)
            print(f"{suite}/{prompt.id}: {len(result.tokens)} tokens", flush=True)
    out: dict[str, object] = {"target": str(target), "machine": machine_info(), "cases": cases}
    if pair.draft is not None:
        curve = cost_curve(pair, n_max=17)
        out["draft_path"] = str(pair.draft_path)
        out["curve"] = [round(r, 4) for r in curve.ratios()]
        out["draft_ratio"] = round(curve.draft_s / curve.target_s[0], 4)
    return out


def teacher_forced(
    draft: Runtime, prompt: Sequence[int], output: Sequence[int], chunk: int = 64
) -> tuple[list[int], list[float]]:
    """The draft model's greedy token and its probability at each output position, given the
    prompt and the recorded output before it. Greedy verification keeps a draft token only
    when every one before it matched the output, so these decide every draft the model would
    make on this output, whatever its length (later tokens of a draft that went wrong are
    never kept)."""
    draft.reset()
    draft.forward(prompt[:-1], last_only=True)
    context = [prompt[-1], *output[:-1]]
    tokens: list[int] = []
    probs: list[float] = []
    for i in range(0, len(context), chunk):
        logits = draft.forward(context[i : i + chunk]).astype(np.float64)
        top = logits.max(axis=1, keepdims=True)
        tokens += logits.argmax(axis=1).tolist()
        probs += (1.0 / np.exp(logits - top).sum(axis=1)).round(4).tolist()
    draft.reset()
    return tokens, probs


# --- the replay target ----------------------------------------------------------------------


class ReplayTarget(Runtime):
    """A runtime whose every row's argmax is the recorded token at the next position.

    Token ids are renumbered densely (prompt lookup only compares ids), so a row is a few
    hundred logits, not the model's 150k; id 0 is the end-of-generation token.
    """

    def __init__(
        self,
        prompt: Sequence[int],
        output: Sequence[int],
        eog: int,
        draft: Sequence[int] = (),
        draft_p: Sequence[float] = (),
    ) -> None:
        ids: dict[int, int] = {eog: 0}
        dense = [ids.setdefault(t, len(ids)) for t in [*prompt, *output]]
        self.prompt = dense[: len(prompt)]
        self.output = dense[len(prompt) :]
        self.sequence = dense
        self.draft = [ids.setdefault(t, len(ids)) for t in draft]  # in the same numbering
        self.draft_p = list(draft_p)  # the draft model's probability of each of its tokens
        self.n_vocab = len(ids)
        self.clock: Clock | None = None  # charged a pass's price, where set
        self.last_pass = 0.0  # what the clock charged for the last pass
        self.n_ctx = len(dense) + 64
        self.cache: list[int] = []
        self.passes: list[int] = []  # width of every pass after the prompt's
        self.keeps_one_graph = False  # as its runtime would (--one-graph)

    @property
    def n_past(self) -> int:
        return len(self.cache)

    def forward(self, tokens: Sequence[int], *, last_only: bool = False) -> np.ndarray:
        if self.cache:  # the prompt's pass is everyone's: left out of the charge
            self.passes.append(len(tokens))
        if self.clock is not None:
            self.last_pass = self.clock.charge(len(tokens), rows=1 if last_only else len(tokens))
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


class Clock:
    """Virtual seconds, in one-token target passes: each pass of either model advances it by
    what the curve says a pass of its width costs (the draft model's scaled by its price).
    The engine and the model drafter take its perf_counter as their clock, so the policy
    learns the costs the curve sets, the draft model's included."""

    def __init__(self, ratios: Sequence[float], one_graph: tuple[float, float] | None = None):
        self.ratios = ratios
        self.now = 0.0
        self.running = False  # off while the request's prompt is prefilled
        # each model's one CUDA graph, where its runtime keeps one (target, draft extras)
        self.graphs = {m: OneGraph(x) for m, x in zip(("target", "draft"), one_graph or ())}

    def perf_counter(self) -> float:
        return self.now

    def charge(self, width: int, scale: float = 1.0, model: str = "target", rows: int = 1) -> float:
        """Advance by a pass of `width` tokens of `model` returning `rows` rows, at `scale`
        times the target's price (and a OneGraph's surcharge); return it."""
        graph = self.graphs.get(model)
        surcharge = graph.surcharge((width, rows)) if graph else 0.0  # the prompt's pass too
        if not self.running:
            return 0.0
        seconds = scale * price(self.ratios, width) + surcharge
        self.now += seconds
        return seconds


class OneGraph:
    """A model whose runtime keeps one CUDA graph (ggml-cuda; docs/gpu.md): a pass whose
    shape (width, rows returned) differs from the last pass's runs uncaptured, the next pass
    of that shape captures the graph, and only later ones replay it. Each of the first two
    costs `extra` one-token target passes more than a replay: the kernel launches a graph
    saves, about the same at every width (on the H200: 1.94 ms, against a replayed plain
    step's 1.78)."""

    def __init__(self, extra: float) -> None:
        self.extra = extra
        self.shape: tuple[int, int] | None = None
        self.captured = False

    def would_charge(self, shape: tuple[int, int]) -> float:
        """What a pass of this shape would add now (surcharge, without taking the pass)."""
        return self.extra if shape != self.shape or not self.captured else 0.0

    def surcharge(self, shape: tuple[int, int]) -> float:
        if shape != self.shape:
            self.shape, self.captured = shape, False
            return self.extra
        if not self.captured:
            self.captured = True
            return self.extra
        return 0.0


class ReplayDraft(ReplayTarget):
    """The draft model as recorded: at each output position its greedy token given the
    recorded output before it, whatever its cache holds after that (a draft that went wrong
    is not kept past its first wrong token, so what follows it never matters). Its passes
    cost `ratio` times the target's of the same width."""

    def __init__(self, target: ReplayTarget, clock: Clock, ratio: float) -> None:
        self.n_prompt = len(target.prompt)
        self.predictions, self.probs = target.draft, target.draft_p
        self.n_vocab, self.n_ctx = target.n_vocab, target.n_ctx
        self.draft_clock, self.ratio = clock, ratio
        self.cache: list[int] = []

    def forward(self, tokens: Sequence[int], *, last_only: bool = False) -> np.ndarray:
        """Rows whose argmax is the recorded token and whose softmax gives it the recorded
        probability (where one was recorded)."""
        self.draft_clock.charge(len(tokens), self.ratio, "draft", 1 if last_only else len(tokens))
        rows = np.zeros((len(tokens), self.n_vocab), dtype=np.float32)
        for i, token in enumerate(tokens):
            self.cache.append(int(token))
            at = len(self.cache) - self.n_prompt  # the output position it predicts
            if not 0 <= at < len(self.predictions):
                rows[i, 0] = 1.0
                continue
            p = min(max(self.probs[at], 1e-4), 1 - 1e-6) if at < len(self.probs) else 0.5
            rows[i, self.predictions[at]] = np.log(p / (1 - p) * (self.n_vocab - 1))
        return rows[-1:] if last_only else rows


class OraclePolicy:
    """Each step drafts with the drafter and k that get the most tokens per unit of cost
    from what it knows will be accepted (the step's best, not the request's: it does not
    weigh what leaving the draft model behind costs later, nor the switches a width change
    brings the steps after). The reference a controller's choices are measured against.

    Where the target keeps one CUDA graph, each step's pass is charged what the clock will
    charge it (its OneGraph: a new width uncaptured, its second pass capturing), plain steps
    too. Unpriced, the oracle drafted wherever a token would be kept and paid switches the
    controller prices, so "of foresight" on one-graph curves compared the controller with a
    reference that lost to it (0.99 of foresight on chat at 0.997x against the oracle's
    0.994x on the H100 llama.cpp curve). The draft model's own graph is not priced (on a
    one-graph runtime it forwards one token a pass: one shape)."""

    def __init__(self, target: ReplayTarget, ratios: Sequence[float], k_max: int) -> None:
        self.target, self.ratios, self.k_max = target, ratios, k_max
        self.drafters: Sequence[Drafter] = ()
        clock = target.clock
        graphs = clock.graphs if clock is not None else {}
        self.graph, self.draft_graph = graphs.get("target"), graphs.get("draft")

    def switch(self, width: int) -> float:
        """What the target's one graph adds to a pass of width tokens now (0: none), as the
        controller prices it (AdaptivePolicy.switch_s): plain is never charged, leaving it
        is charged its own pass and the two plain passes back. Charged each step as the
        clock charges it, a plain pass after a verify pass cost a switch and the oracle
        took a 16-token draft model step at 0.83 tokens a pass over it (the two plain
        passes' switches buy every plain step after them, which one step cannot see)."""
        if self.graph is None or width == 1:
            return 0.0
        if self.graph.shape in (None, (1, 1)):
            return self.graph.would_charge((width, width)) + 2 * self.graph.extra
        return self.graph.would_charge((width, width))

    def begin(self, drafters: Sequence[Drafter], max_tokens: int | None = None) -> None:
        self.drafters = drafters
        self.prefill = True

    def to_sync(self, context: Sequence[int], offers: Sequence[Offer]) -> list[Drafter]:
        """The draft model, with the prompt (as the controller does); later, it catches up
        in the proposal that needs it, priced there."""
        due, self.prefill = self.prefill, False
        return [d for d in self.drafters if isinstance(d, ModelDrafter)] if due else []

    def plan(
        self, context: Sequence[int], sp: SamplingParams, offers: Sequence[Offer]
    ) -> tuple[Drafter | None, int]:
        best: tuple[float, Drafter | None, int] = (1.0, None, 0)  # plain: a token a pass
        for drafter, offer in zip(self.drafters, offers, strict=True):
            k_max = min(offer.available, self.k_max)
            if not k_max:
                continue
            draft, draft_s = self.foresee(drafter, context, k_max, sp)
            coming = self.target.sequence[len(context) : len(context) + k_max]
            right = next((i for i, (a, b) in enumerate(zip(draft, coming)) if a != b), len(coming))
            for k in range(1, k_max + 1):
                cost = draft_s[k - 1] + price(self.ratios, k + 1) + self.switch(k + 1)
                rate = (min(k, right) + 1) / cost
                if rate > best[0]:
                    best = (rate, drafter, k)
        return best[1], best[2]

    def foresee(
        self, drafter: Drafter, context: Sequence[int], k: int, sp: SamplingParams
    ) -> tuple[list[int], list[float]]:
        """The k tokens drafter would propose and what proposing 1..k of them costs: prompt
        lookup's are free; the draft model's are recorded, and cost its passes (draft_s)."""
        if isinstance(drafter, ModelDrafter):
            assert isinstance(drafter.runtime, ReplayDraft)
            at = len(context) - drafter.runtime.n_prompt
            return self.target.draft[at : at + k], self.draft_s(drafter, context, k)
        return drafter.propose(context, k, sp).tokens.tolist(), [0.0] * k

    def draft_s(self, drafter: ModelDrafter, context: Sequence[int], k: int) -> list[float]:
        """What proposing 1..k tokens costs the draft model, its passes as ModelDrafter makes
        them (what it is behind on first: on a one-graph runtime in a pass of its own, then a
        token a pass) charged as the clock will charge them (at its ratio, and its OneGraph's
        surcharge, read off a copy). Without its graph priced, a draft model far behind
        after a run of prompt lookup looked 3 switches cheaper than it was."""
        assert isinstance(drafter.runtime, ReplayDraft)
        ratio, behind = drafter.runtime.ratio, max(1, drafter.behind(context))
        graph = copy.copy(self.draft_graph) if self.draft_graph is not None else None
        apart = drafter.one_token_passes and behind > 1
        shapes = [(behind - 1, 1), (1, 1)] if apart else [(behind, 1)]
        costs, spent = [], 0.0
        for i in range(k):
            for width, rows in shapes if i == 0 else [(1, 1)]:
                spent += ratio * price(self.ratios, width)
                spent += graph.surcharge((width, rows)) if graph is not None else 0.0
            costs.append(spent)
        return costs

    def observe(self, *args) -> None:
        pass

    def end(self) -> None:
        pass


class Timed:
    """The policy under test (or the oracle), with the clock started once the prompt is in:
    the request's first to_sync is its prefill's (the draft model's prompt, beside the
    target's), left out of the charge as the target's prompt pass is."""

    def __init__(self, policy: Policy, clock: Clock, target: ReplayTarget) -> None:
        self.policy, self.clock, self.target = policy, clock, target
        self.syncs = 0  # to_sync calls this request

    def begin(self, drafters: Sequence[Drafter], max_tokens: int | None = None) -> None:
        self.clock.running, self.syncs = False, 0
        self.policy.begin(drafters, max_tokens)

    def plan(
        self, context: Sequence[int], sp: SamplingParams, offers: Sequence[Offer]
    ) -> tuple[Drafter | None, int]:
        self.clock.running = True
        return self.policy.plan(context, sp, offers)

    def to_sync(self, context: Sequence[int], offers: Sequence[Offer]) -> list[Drafter]:
        self.clock.running, self.syncs = self.syncs > 0, self.syncs + 1
        return self.policy.to_sync(context, offers)

    def observe(self, drafter, k, n_accepted, t_draft, t_verify, unsure_end=False, t_first=0.0):
        # the verify pass's charge itself: the clock's difference is off in its last bits,
        # and the controller's ties then break differently from run to run of a change
        self.policy.observe(drafter, k, n_accepted, t_draft, self.target.last_pass, unsure_end,
                            t_first)  # fmt: skip

    def end(self) -> None:
        self.policy.end()


def replay_case(
    case: dict,
    ratios: Sequence[float],
    spec: SpecOptions,
    policy_name: str = "auto",
    draft_ratio: float | None = None,
    confidence: float = 0.0,
    learned: dict[str, Learned] | None = None,
    one_graph: tuple[float, float] | None = None,
) -> dict:
    """One recorded case under the controller (or the oracle, or a fixed drafter and k) on a
    curve: its cost against plain decoding's. draft_ratio: the draft model's token in target
    tokens, to draft with the recorded draft model too (None: prompt lookup alone).
    learned: what the controller learned of each drafter (by name) in the cases before, which
    this case starts from and leaves what it learned in, as the loop does from one request to
    the next (replay_suite); None: from the drafters' own priors and the calibration's price.
    one_graph: the target's and the draft's OneGraph extra, where their runtime keeps one
    CUDA graph (plain decoding pays it too; the runtimes say so, keeps_one_graph). The row's
    "draft_price" is the draft model's learned price."""
    uses_model = draft_ratio is not None and "draft" in case
    target = ReplayTarget(
        case["prompt"],
        case["output"],
        case["eog"],
        case["draft"] if uses_model else (),
        case.get("draft_p", ()) if uses_model else (),
    )
    clock = Clock(ratios, one_graph)
    target.clock = clock
    target.keeps_one_graph = one_graph is not None
    drafters = replay_drafters(target, spec, draft_ratio if uses_model else None, confidence)
    policy = replay_policy(policy_name, target, drafters, ratios, spec, draft_ratio, one_graph)
    if learned is not None and isinstance(policy, AdaptivePolicy):
        policy.memory.learned = {id(d): learned[d.name] for d in drafters if d.name in learned}
    timed = Timed(policy, clock, target)
    decoder = SpeculativeDecoder(target, drafters, timed, clock=clock.perf_counter)  # type: ignore[arg-type]
    result = decoder.generate(target.prompt, max_tokens=len(target.output), sp=SamplingParams())
    if learned is not None and isinstance(policy, AdaptivePolicy):
        names = {id(d): d.name for d in drafters}
        learned.update({names[i]: lesson for i, lesson in taught(policy.estimates).items()})
    emitted = result.tokens + ([0] if result.finish_reason == "stop" else [])
    if emitted != target.output:
        raise AssertionError(f"{case['id']}: the replay departed from the recording")
    plain = plain_cost(ratios, len(target.output), one_graph)
    return row(case, target, ratios, result.stats, (plain, clock.now), policy)


def plain_cost(ratios: Sequence[float], n_tokens: int, one_graph: tuple | None) -> float:
    """Plain decoding's: a one-token pass per token, the stop token's included; with one
    graph, the first two after the prompt's pass run uncaptured and capture."""
    surcharges = [*([one_graph[0]] * 2 if one_graph else []), *[0.0] * n_tokens]
    return sum(price(ratios, 1) + x for x in surcharges[:n_tokens])


def replay_drafters(
    target: ReplayTarget, spec: SpecOptions, draft_ratio: float | None, confidence: float
) -> list[Drafter]:
    """The recorded draft model (where draft_ratio prices it) and prompt lookup."""
    drafters: list[Drafter] = []
    if draft_ratio is not None:
        assert target.clock is not None
        runtime = ReplayDraft(target, target.clock, draft_ratio)
        runtime.keeps_one_graph = target.keeps_one_graph  # ModelDrafter: a token a pass
        clock = target.clock.perf_counter
        model = ModelDrafter(runtime, token_s=draft_ratio, confidence=confidence, clock=clock)
        drafters.append(model)
    drafters.append(NgramDrafter(max_ngram=spec.max_ngram))
    return drafters


def replay_policy(
    name: str,
    target: ReplayTarget,
    drafters: list[Drafter],
    ratios: Sequence[float],
    spec: SpecOptions,
    draft_ratio: float | None,
    one_graph: tuple[float, float] | None,
) -> Policy:
    """auto (edgespec's controller, from the curve), oracle, llama-server[=N], or DRAFTER=K
    every step."""
    if name.partition("=")[0] == "llama-server":
        return llama_server_policy(name)
    if name == "oracle":
        return OraclePolicy(target, ratios, spec.k_max)
    if name == "auto":
        # a calibration on a one-graph runtime measures the switch as well (calibrate.py)
        switch_s = one_graph[0] if one_graph else 0.0
        curve = CostCurve(list(ratios), draft_s=draft_ratio or 0.0, switch_s=switch_s)
        return make_policy(spec, drafters, curve)
    return FixedPolicy(*parse_fixed(name))


# llama-server's draft settings at the vendored llama.cpp (llama-cpp-python 0.3.36's
# vendor/llama.cpp, common/common.h, common_params_speculative_draft): n_max 3, n_min 0, p_min 0
LLAMA_SERVER_DRAFT = {"n_max": 3, "n_min": 0, "p_min": 0.0}


def llama_server_policy(name: str) -> Policy:
    """llama-server's own draft mode ("llama-server", or "llama-server=N" for --spec-draft-n-max
    N): its draft model drafts n_max tokens every step (common/speculative.cpp: greedy, ending a
    draft only at a token under p_min, which at 0 ends none; a draft under n_min is dropped,
    which at 0 drops none), capped by the tokens left (server: n_remaining - 1, as the engine's
    room caps k); no prompt lookup beside it. So: the model drafter at a fixed k."""
    _, _, n = name.partition("=")
    if n and (not n.isdigit() or int(n) < 1):
        raise SystemExit(f"--policies {name}: give llama-server or llama-server=N (N >= 1)")
    return FixedPolicy("model", int(n) if n else LLAMA_SERVER_DRAFT["n_max"])


def row(
    case: dict,
    target: ReplayTarget,
    ratios: Sequence[float],
    stats: Stats,
    costs: tuple[float, float],
    policy: Policy,
) -> dict:
    """A replayed case's figures; costs: plain decoding's and the replay's."""
    plain, cost = costs
    wasted = sum(price(ratios, n) - 1 for n in target.passes if n > 1)
    return {
        "suite": case["suite"], "id": case["id"], "category": case["category"],
        "tokens": len(target.output), "plain_cost": round(plain, 4), "cost": round(cost, 4),
        "speedup": round(plain / cost, 4), "n_drafts": stats.n_drafts,
        "n_draft_tokens": stats.n_draft_tokens, "n_accepted": stats.n_accepted,
        "wasted_passes": round(wasted, 2), "model_steps": stats.steps_by_drafter.get("model", 0),
        "draft_price": learned_draft_price(policy),
    }  # fmt: skip


def learned_draft_price(policy: Policy) -> float | None:
    """The draft model's price as the adaptive controller left it (None: no such price)."""
    if not isinstance(policy, AdaptivePolicy):
        return None
    return next((e.token_s for e in policy.estimates if e.learns_cost), None)


def replay_suite(
    cases: Sequence[dict], ratios: Sequence[float], *args, fresh: bool = False, **kwargs
) -> list[dict]:
    """replay_case over cases in turn, what the controller learned of each drafter (price,
    acceptance) carried from one case to the next within a suite, as the loop carries it
    from one request to the next (AdaptivePolicy.begin) and as `edgespec bench` runs a
    suite: starting every case at the calibration's price let the draft model into requests
    the real loop kept it out of (docs/benchmarks.md, fifth session of 2026-11-25). fresh:
    every case from the priors instead, as a process's first request (`edgespec run`)."""
    rows: list[dict] = []
    learned: dict[str, Learned] = {}
    for case in cases:
        if fresh or not rows or rows[-1]["suite"] != case["suite"]:
            learned = {}
        rows.append(replay_case(case, ratios, *args, **kwargs, learned=learned))
    return rows


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
            "model_steps": sum(r["model_steps"] for r in mine),
            "acceptance": round(sum(r["n_accepted"] for r in mine) / drafted, 3) if drafted else 0,
            "by_category": by_category,
        }
    return out


def print_table(curve: str, summary: dict) -> None:
    print(f"\ncurve {curve}")
    print(
        "| suite | prompts | speedup | worst category | worst prompt | drafts | model steps "
        "| acceptance |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for suite, s in summary.items():
        (wc, wcs), (wp, wps) = s["worst_category"], s["worst_prompt"]
        print(
            f"| {suite} | {s['prompts']} | {s['speedup']:.3f}x | {wc} {wcs:.3f}x | "
            f"{wp} {wps:.3f}x | {s['drafts']} | {s['model_steps']} | {s['acceptance']:.2f} |"
        )


def cut_draft(recording: dict, keep: int) -> None:
    """The recorded draft model as exported with `--draft-vocab keep`: where it predicted the
    target's token and its output layer drops that id (at or above keep, not the stop token),
    it proposes another there, so its draft is wrong. Where a dropped prediction was wrong
    anyway its next choice (not recorded) might be right: the cut errs low there."""
    for case in recording["cases"]:
        draft = case["draft"]
        for i, token in enumerate(case["output"][: len(draft)]):
            if draft[i] == token and token >= keep and token != case["eog"]:
                draft[i] = token + 1


def load_curves(
    names: Sequence[str], recorded: list[float] | None = None
) -> dict[str, list[float]]:
    """Named curves of replay_curves.json, "recorded" (the recording's own calibration), or
    NAME=R1,R2,... given inline (t(n)/t(1) for n = 1, 2, ...: a GPU kit run's curve_ratio,
    say)."""
    known = json.loads(CURVES_FILE.read_text())
    curves = {}
    for name in names:
        name, _, inline = name.partition("=")
        if name == "recorded" and not inline:
            if recorded is None:
                raise SystemExit("curve recorded: this recording has no calibration")
            curves[name] = recorded
        elif inline:
            ratios = [float(r) for r in inline.split(",")]
            if len(ratios) < 2 or ratios[0] != 1.0 or min(ratios) <= 0:
                raise SystemExit(f"curve {name}: give t(n)/t(1) for n = 1, 2, ..., from 1.0")
            curves[name] = ratios
        elif name in known:
            curves[name] = known[name]["ratios"]
        else:
            raise SystemExit(f"unknown curve {name!r}: {CURVES_FILE} has {', '.join(known)}")
    return curves


@dataclass(frozen=True)
class KitRun:
    """A GPU kit run (bench/gpu/measure.py's JSON) as the replay reads it, all in replayed
    one-token target passes."""

    name: str  # its label, back-end and device
    ratios: list[float]  # t(n)/t(1) of replayed passes
    draft_ratio: float | None  # a draft token (None: the run had no draft)
    one_graph: tuple[float, float] | None  # where the target keeps one graph: the switch
    #                                        (the draft's taken as the target's: unmeasured)
    # what a draft token's confidence adds where `auto` drafts with it (the kit's
    # draft_confidence: on llama.cpp an exp and a sum over the vocabulary on the host; 0:
    # not measured), apart from draft_ratio, which the kit takes without it
    confidence_ratio: float = 0.0


def kit_run(path: str) -> KitRun:
    r = json.loads(Path(path).read_text())
    switch = float(r.get("switch_ms") or 0.0)
    replayed = [t - switch for t in r["curve_ms"]]  # the kit's curve alternates widths
    one = replayed[0]
    confidence_ms = max(0.0, float((r.get("draft_confidence") or {}).get("confidence_ms", 0.0)))
    return KitRun(
        f"{r['label']}-{r['backend']}-{r['device']}",
        [round(t / one, 4) for t in replayed],
        r["draft_token_ms"] / one if r.get("draft_token_ms") else None,
        (switch / one, switch / one) if switch else None,
        confidence_ms / one,
    )


def policy_draft_ratio(policy: str, draft_ratio: float | None, kit: KitRun | None) -> float | None:
    """The draft model's token as `policy` runs it, from the kit's price: `auto` drafts with
    its confidence (confidence_for), whose host time the kit measures apart."""
    if draft_ratio is None or kit is None or not confidence_for(policy):
        return draft_ratio
    return draft_ratio + kit.confidence_ratio


def confidence_for(policy: str) -> float:
    """The draft model's confidence under `policy`, as edgespec sets it: the controller's
    own for auto; a fixed k is drafted whole, and the oracle knows what is kept."""
    return DRAFT_CONFIDENCE if policy == "auto" else 0.0


def parse_fixed(text: str) -> tuple[str, int]:
    """ "model=1" -> ("model", 1): one drafter at a fixed k, every step."""
    name, _, k = text.partition("=")
    if name not in ("model", "ngram") or not k.isdigit() or int(k) < 1:
        raise SystemExit(f"--policies {text}: give auto, oracle, model=K or ngram=K (K >= 1)")
    return name, int(k)


def parse_pair(text: str) -> tuple[float, float]:
    try:
        first, second = (float(x) for x in text.split(","))
    except ValueError:
        raise SystemExit(f"give two numbers, A,B: got {text!r}") from None
    return first, second


def parse_suites(text: str) -> dict[str, int]:
    """edit=256,open -> {"edit": 256, "open": 128}"""
    suites = {}
    for part in text.split(","):
        name, _, tokens = part.partition("=")
        if tokens and (not tokens.isdigit() or int(tokens) == 0):
            raise SystemExit(f"--suites {text}: give SUITE or SUITE=MAX_TOKENS, e.g. edit=256")
        suites[name] = int(tokens) if tokens else 128
    return suites


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="plain greedy decoding of suites, token ids saved")
    rec.add_argument("--target", required=True)
    rec.add_argument("--draft", help="a draft model to record predictions of (default: a bundle's)")
    rec.add_argument("--suites", default="edit=256,open,chat,code")
    rec.add_argument("--threads", type=int)
    rec.add_argument("--limit", type=int, help="the first N prompts of each suite")
    rec.add_argument("--out", required=True)
    rep = sub.add_parser("replay", help="the controller over a recording, on cost curves")
    rep.add_argument("--record", required=True)
    rep.add_argument(
        "--kit",
        help="a GPU kit run's JSON (bench/gpu/measure.py --json): its curve (replayed passes), "
        "draft price and, where its target keeps one graph, --one-graph, unless given",
    )
    rep.add_argument(
        "--curve",
        action="append",
        help="a name in replay_curves.json, recorded (the recording's own), or NAME=1,R2,... "
        "(t(n)/t(1)); repeat for more (default: recorded, " + ", ".join(DEFAULT_CURVES) + ")",
    )
    rep.add_argument(
        "--policies",
        default="auto,oracle",
        help="comma-separated: auto (the controller), oracle (foresight: drafts only what it "
        "knows is kept), model=K or ngram=K (that drafter, K tokens every step), llama-server "
        "or llama-server=N (llama-server's draft mode: its defaults, draft-max 3, or N)",
    )
    rep.add_argument(
        "--one-graph",
        help="TARGET,DRAFT: each model's runtime keeps one CUDA graph (llama.cpp on CUDA): a "
        "pass whose shape changed, and the next like it, cost this many one-token target "
        "passes more than a replay (the H200: 1.09,0.95)",
    )
    rep.add_argument("--k-max", type=int, default=16)
    rep.add_argument(
        "--draft-ratio",
        type=float,
        help="a draft-model token in one-token target passes (default: the kit's, else the "
        "recording's calibration, where it recorded a draft model)",
    )
    rep.add_argument(
        "--draft-vocab",
        type=int,
        help="the draft model's output layer keeps the token ids below N (and the stop token), "
        "as `edgespec export --draft-vocab N` makes it (the demo bundle's: 98304)",
    )
    rep.add_argument(
        "--fresh",
        action="store_true",
        help="every case from the drafters' priors, as a process's first request starts (each "
        "`edgespec run`); default: what the controller learned carried from case to case",
    )
    rep.add_argument("--json")
    return ap


def replay(args: argparse.Namespace) -> dict:
    """Every policy on every curve asked for, over the recording: the report."""
    recording = json.loads(Path(args.record).read_text())
    kit = kit_run(args.kit) if args.kit else None
    one_graph = parse_pair(args.one_graph) if args.one_graph else (kit.one_graph if kit else None)
    draft_ratio = draft_price(args, recording, kit)
    if args.draft_vocab is not None and draft_ratio is not None:
        cut_draft(recording, args.draft_vocab)
    policies = args.policies.split(",")
    for policy in policies:
        if policy.partition("=")[0] == "llama-server":
            llama_server_policy(policy)  # refuses a malformed N before any replay
            if draft_ratio is None:
                raise SystemExit(f"--policies {policy}: replay with a draft model's recording")
        elif policy not in ("auto", "oracle") and parse_fixed(policy)[0] == "model":
            if draft_ratio is None:
                raise SystemExit(f"--policies {policy}: replay with a draft model's recording")
    recorded = recording.get("curve")
    default = (["recorded"] if recorded else []) + list(DEFAULT_CURVES)
    curves = load_curves(args.curve or ([] if kit else default), recorded)
    if kit:
        curves[kit.name] = kit.ratios
    spec = SpecOptions("ngram", None, args.k_max)
    priced_by_kit = kit if args.draft_ratio is None else None  # a given price is taken whole
    report: dict = {"record": args.record, "kit": args.kit, "k_max": args.k_max,
                    "draft_vocab": args.draft_vocab, "draft_ratio": draft_ratio,
                    "confidence_ratio": priced_by_kit.confidence_ratio if priced_by_kit else 0.0,
                    "one_graph": one_graph, "curves": {}}  # fmt: skip
    for name, ratios in curves.items():
        for policy in policies:
            ratio = policy_draft_ratio(policy, draft_ratio, priced_by_kit)
            rows = replay_suite(recording["cases"], ratios, spec, policy, ratio,
                                confidence_for(policy), one_graph=one_graph,
                                fresh=args.fresh)  # fmt: skip
            summary = summarise(rows)
            print_table(f"{name}, {policy}", summary)
            entry = report["curves"].setdefault(name, {"ratios": ratios})
            entry[policy] = {"summary": summary, "rows": rows}
    return report


def draft_price(args: argparse.Namespace, recording: dict, kit: KitRun | None) -> float | None:
    """What a draft-model token costs (None: the recording has no draft model's predictions,
    so prompt lookup drafts alone)."""
    if not all("draft" in case for case in recording["cases"]):
        if args.draft_ratio is not None:
            raise SystemExit(f"{args.record} holds no draft model's predictions: record with a "
                             "bundle or --draft")  # fmt: skip
        return None
    return args.draft_ratio or (kit and kit.draft_ratio) or recording.get("draft_ratio")


def main(argv: Sequence[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if args.command == "record":
        data = record(args.target, parse_suites(args.suites), args.threads, args.limit, args.draft)
        Path(args.out).write_text(json.dumps(data))
        return
    report = replay(args)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    reexec_with_tunable()  # time passes in the memory the edgespec command gives them
    main()
