"""SpeculativeDecoder: draft k tokens, verify them in one target pass, keep the target's output.

One loop serves speculative and plain decoding: a plain step is a verify step with an empty
draft, so the reference decoder and the fast one share every line but the drafting.

Invariant: the target's cache never holds the last emitted token. Each step forwards
[last, *draft], and ends with rollback(n0 + 1 + n_accepted).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import overload

import numpy as np

from edgespec.controller import FixedPolicy, Policy
from edgespec.drafters.base import Draft, Drafter, Offer
from edgespec.drafters.model import common_prefix_len
from edgespec.drafters.ngram import NgramDrafter
from edgespec.errors import ContextOverflowError, EdgespecError
from edgespec.runtime import Runtime, TopRows, forward_dists, forward_top
from edgespec.sampling import PassRows, SamplingParams, request_params
from edgespec.textstream import TextStream
from edgespec.verify import Verdict, verify_greedy, verify_gumbel, verify_stochastic

log = logging.getLogger(__name__)

GUESS = "guess"  # the stats' name for padding_guess's tokens
# what padding_guess asks prompt lookup under: a draft judged by the Gumbel rule plain steps use
PLAIN_RULE = SamplingParams()


@dataclass
class Stats:
    n_prompt: int = 0
    n_cached: int = 0  # prompt tokens whose KV the target kept from the previous request
    n_generated: int = 0
    n_steps: int = 0  # target verify passes, plain ones included
    n_plain_steps: int = 0  # steps with nothing drafted
    n_draft_tokens: int = 0
    n_accepted: int = 0
    drafted_by_pos: list[int] = field(default_factory=list)
    accepted_by_pos: list[int] = field(default_factory=list)
    steps_by_drafter: dict[str, int] = field(default_factory=dict)
    drafted_by_drafter: dict[str, int] = field(default_factory=dict)  # draft tokens proposed
    accepted_by_drafter: dict[str, int] = field(default_factory=dict)  # ... and kept
    t_prefill: float = 0.0
    t_draft: float = 0.0
    t_verify: float = 0.0  # target forward passes after the prefill
    t_total: float = 0.0

    @property
    def n_drafts(self) -> int:
        return self.n_steps - self.n_plain_steps

    @property
    def acceptance_rate(self) -> float:
        return self.n_accepted / self.n_draft_tokens if self.n_draft_tokens else 0.0

    @property
    def mean_acceptance_length(self) -> float:
        """Tokens emitted per target pass (1.0 for plain decoding)."""
        return self.n_generated / self.n_steps if self.n_steps else 0.0

    @property
    def acceptance_by_pos(self) -> list[float]:
        return [a / d if d else 0.0 for a, d in zip(self.accepted_by_pos, self.drafted_by_pos)]

    @property
    def t_decode(self) -> float:
        return self.t_total - self.t_prefill

    @property
    def t_loop(self) -> float:
        """The loop's own time: verification maths, bookkeeping, detokenizing."""
        return self.t_decode - self.t_draft - self.t_verify

    @property
    def tokens_per_second(self) -> float:
        """Decode throughput, prefill excluded."""
        return self.n_generated / self.t_decode if self.t_decode > 0 else 0.0

    def record(self, drafter: str | None, k: int, n_accepted: int) -> None:
        self.n_steps += 1
        if k == 0:
            self.n_plain_steps += 1
            return
        assert drafter is not None
        self.steps_by_drafter[drafter] = self.steps_by_drafter.get(drafter, 0) + 1
        self.drafted_by_drafter[drafter] = self.drafted_by_drafter.get(drafter, 0) + k
        self.accepted_by_drafter[drafter] = self.accepted_by_drafter.get(drafter, 0) + n_accepted
        self.n_draft_tokens += k
        self.n_accepted += n_accepted
        grow = k - len(self.drafted_by_pos)
        if grow > 0:
            self.drafted_by_pos += [0] * grow
            self.accepted_by_pos += [0] * grow
        for i in range(k):
            self.drafted_by_pos[i] += 1
            self.accepted_by_pos[i] += i < n_accepted

    def as_dict(self) -> dict:
        return {
            "n_prompt": self.n_prompt,
            "n_cached": self.n_cached,
            "n_generated": self.n_generated,
            "n_steps": self.n_steps,
            "n_drafts": self.n_drafts,
            "n_plain_steps": self.n_plain_steps,
            "steps_by_drafter": dict(self.steps_by_drafter),
            "drafted_by_drafter": dict(self.drafted_by_drafter),
            "accepted_by_drafter": dict(self.accepted_by_drafter),
            "n_draft_tokens": self.n_draft_tokens,
            "n_accepted": self.n_accepted,
            "acceptance_rate": round(self.acceptance_rate, 4),
            "mean_acceptance_length": round(self.mean_acceptance_length, 4),
            "acceptance_by_pos": [round(a, 4) for a in self.acceptance_by_pos],
            "t_prefill_s": round(self.t_prefill, 6),
            "t_draft_s": round(self.t_draft, 6),
            "t_verify_s": round(self.t_verify, 6),
            "t_loop_s": round(self.t_loop, 6),
            "t_total_s": round(self.t_total, 6),
            "tokens_per_second": round(self.tokens_per_second, 3),
        }

    def summary(self) -> str:
        return (
            f"{self.n_generated} tokens, {self.tokens_per_second:.1f} tok/s, "
            f"acceptance {self.acceptance_rate:.0%}, "
            f"{self.mean_acceptance_length:.2f} tokens/step over {self.n_steps} steps "
            f"({self.n_plain_steps} plain); draft {self.t_draft:.2f}s, "
            f"verify {self.t_verify:.2f}s, loop {self.t_loop * 1e3:.0f}ms"
        )


@dataclass(frozen=True)
class Event:
    text: str  # new text, whole characters only
    tokens: tuple[int, ...]  # new token ids
    finish_reason: str | None = None  # "stop" | "length" on the last event
    stats: Stats | None = None  # on the last event
    # per token of `tokens`: True if it is a draft token the target accepted, False if the
    # target chose it (recovered, bonus or plain step)
    from_draft: tuple[bool, ...] = ()
    # per token of `tokens`: the text pushing it released (text is their concatenation, plus
    # on the last event what the stream held back until the end)
    pieces: tuple[str, ...] = ()
    n_drafted: int = 0  # draft tokens the step behind this event proposed (accepted or not)


@dataclass(frozen=True)
class Result:
    text: str
    tokens: list[int]
    finish_reason: str
    stats: Stats


@dataclass
class Emitted:
    """What one step added to the output: tokens, whether each was drafted, their text."""

    tokens: list[int] = field(default_factory=list)
    from_draft: list[bool] = field(default_factory=list)
    pieces: list[str] = field(default_factory=list)

    def event(self, tail: str, finish: str | None, stats: Stats | None, n_drafted: int) -> Event:
        text = "".join(self.pieces) + tail
        return Event(
            text,
            tuple(self.tokens),
            finish,
            stats,
            tuple(self.from_draft),
            tuple(self.pieces),
            n_drafted,
        )


class Offers(Sequence[Offer]):
    """Each drafter's Offer for one context, in the policy's order, asked of the drafter when
    the policy first reads it (a policy that reads none, FixedPolicy, costs none)."""

    def __init__(
        self, drafters: Sequence[Drafter], context: Sequence[int], dropped: Sequence[Drafter] = ()
    ) -> None:
        """dropped: drafters that failed this request: each offers nothing."""
        self.drafters, self.context, self.dropped = drafters, context, dropped
        self.known: dict[int, Offer] = {}

    def __len__(self) -> int:
        return len(self.drafters)

    @overload
    def __getitem__(self, i: int) -> Offer: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[Offer]: ...
    def __getitem__(self, i: int | slice) -> Offer | Sequence[Offer]:
        if isinstance(i, slice):
            return [self[j] for j in range(len(self))[i]]
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        i %= len(self)
        if i not in self.known:
            drafter = self.drafters[i]
            dropped = any(drafter is d for d in self.dropped)
            self.known[i] = Offer(0) if dropped else drafter.offer(self.context)
        return self.known[i]

    def after_sync(self, synced: Sequence[Drafter]) -> Offers:
        """The offers once `synced` caught up: theirs asked again, the others' kept."""
        after = Offers(self.drafters, self.context, self.dropped)
        after.known = {
            i: o for i, o in self.known.items() if not any(self.drafters[i] is d for d in synced)
        }
        return after


def stream_rng(seed: int | None, stream: int) -> np.random.Generator:
    """Independent random streams from one seed: the drafter's draws must not repeat the
    verifier's, or acceptance would correlate with the draft token and bias the output."""
    return np.random.default_rng(None if seed is None else [seed, stream])


class SpeculativeDecoder:
    def __init__(
        self,
        target: Runtime,
        drafters: Sequence[Drafter] = (),
        policy: Policy | None = None,
        *,
        reuse_cache: bool = False,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        """reuse_cache: keep the target's KV cache across requests and prefill only what
        follows the common prefix with the last request (prompt-cache reuse). It trusts that
        nothing but this decoder drives the target between requests.
        clock: seconds, read around each part of a step (the stats and what the policy
        learns); a replay passes its virtual clock."""
        self.target = target
        self.reuse_cache = reuse_cache
        self.clock = clock
        self.context: list[int] = []  # the last request's tokens; see reusable()
        self.drafters = {d.name: d for d in drafters}  # names label stats: one drafter each
        if len(self.drafters) < len(drafters):
            raise ValueError(f"drafter names must differ, got {[d.name for d in drafters]}")
        if policy is None:
            policy = FixedPolicy(drafters[0].name if drafters else None, 4 if drafters else 0)
        self.policy = policy
        self.eog_ids = target.vocab_info().eog_ids
        # where every pass computes two rows or more, a plain step's second row is free: it
        # carries prompt lookup's best guess, however short its match (padding_guess)
        self.guesser = NgramDrafter() if target.min_width > 1 else None
        self.dropped: list[Drafter] = []  # drafters that failed this request (guarded)

    def generate(self, prompt: str | Sequence[int], **kwargs) -> Result:
        text: list[str] = []
        tokens: list[int] = []
        for event in self.stream(prompt, **kwargs):
            text.append(event.text)
            tokens.extend(event.tokens)
        assert event.finish_reason is not None and event.stats is not None
        return Result("".join(text), tokens, event.finish_reason, event.stats)

    def stream(
        self,
        prompt: str | Sequence[int],
        *,
        max_tokens: int = 256,
        sp: SamplingParams = SamplingParams(),
        stop: Sequence[str] = (),
        speculative: bool = True,
    ) -> Generator[Event, None, None]:
        """Yield an Event per target pass; the last one carries finish_reason and stats.
        Closing it early (a client gone) leaves the caches fit for reuse (see reusable)."""
        if max_tokens < 1:
            raise EdgespecError(f"max_tokens must be >= 1, got {max_tokens}")
        tokens = self.prompt_tokens(prompt)
        stats = Stats(n_prompt=len(tokens))
        sp = request_params(sp)  # a seed always: the randomness is keyed to it and to positions
        rng = stream_rng(sp.seed, 0)  # the rejection sampler's own stream
        text = TextStream(stop)
        t_start = self.clock()
        stats.n_cached = self.begin(tokens, sp, speculative, max_tokens)
        stats.t_prefill = self.clock() - t_start
        finish: str | None = None
        try:
            while finish is None:
                room = min(max_tokens - stats.n_generated, self.target.n_ctx - self.target.n_past)
                n_drafted = stats.n_draft_tokens
                if room <= 0:
                    finish = "length"
                    out = Emitted()
                else:
                    verdict = self.step(tokens, sp, rng, stats, room, speculative)
                    out, finish = self.emit(verdict, tokens, text, stats, max_tokens)
                n_drafted = stats.n_draft_tokens - n_drafted
                if finish is not None:
                    tail = text.finish()
                    stats.t_total = self.clock() - t_start
                    yield out.event(tail, finish, stats, n_drafted)
                elif out.tokens:
                    yield out.event("", None, None, n_drafted)
        finally:  # a client gone or a failed step: what the steps taught holds all the same
            self.policy.end()

    def begin(
        self,
        tokens: list[int],
        sp: SamplingParams,
        speculative: bool = True,
        max_tokens: int | None = None,
    ) -> int:
        """Reset per-request state and make the target's cache hold all but the last prompt
        token (and a draft model's, where the policy will want it in step); return how many
        of them the target kept from the previous request (reuse_cache). max_tokens: the
        most the request emits, which bounds what the policy's probes may cost."""
        keep = self.reusable(tokens) if self.reuse_cache else 0
        if keep:
            self.target.rollback(keep)
        else:
            self.target.reset()
        self.context = tokens  # grows as tokens are emitted: the cache holds its first n_past
        self.dropped = []
        for i, drafter in enumerate(self.drafters.values()):
            drafter.reset(stream_rng(sp.seed, 1 + i))  # stream 0 is the verifier's
        if self.guesser is not None:
            self.guesser.reset(stream_rng(sp.seed, 0))  # draws nothing
        self.policy.begin(list(self.drafters.values()), max_tokens)
        if len(tokens) - 1 > keep:
            self.target.forward(tokens[keep:-1], last_only=True)
        if speculative:
            self.sync_drafters(tokens)
        return keep

    def sync_drafters(self, tokens: list[int]) -> Offers:
        """Let the drafters the policy names catch up on tokens, one batched pass each: the
        prompt when a request begins, what idle steps emitted before a step. Return the
        drafters' offers for tokens, in step now, for the policy's plan. The engine is the one
        caller of the drafters (offer, sync, propose, reset); the policy only decides."""
        drafters = list(self.drafters.values())
        offers = Offers(drafters, tokens, self.dropped)
        synced = [d for d in self.policy.to_sync(tokens, offers) if d not in self.dropped]
        for drafter in synced:
            self.guarded(drafter, drafter.sync, tokens)
        return offers.after_sync(synced)

    def guarded(self, drafter: Drafter, call, *args):
        """call(*args), or None where it fails: a drafter's failure (NaN logits from a broken
        head, a pass that errs) must never cost the target's answer, so the drafter is
        dropped for the rest of the request with one warning and the target decodes on."""
        try:
            return call(*args)
        except Exception as e:  # noqa: BLE001 - whatever a drafter raises, the target goes on
            self.dropped.append(drafter)
            why = (str(e).strip().splitlines() or [type(e).__name__])[0]
            log.warning("the %s drafter failed (%s); decoding on without it", drafter.name, why)
            return None

    def reusable(self, tokens: list[int]) -> int:
        """Prompt tokens the target's cache already holds: the common prefix of tokens[:-1]
        and what the last request left in the cache. A step ending early (stop, length) can
        leave accepted draft tokens in the cache past the context's end: only the first
        n_past context tokens are trusted, and anything past the prefix is rolled back."""
        held = self.context[: self.target.n_past]
        return common_prefix_len(held, tokens[:-1])

    def step(
        self,
        tokens: list[int],
        sp: SamplingParams,
        rng: np.random.Generator,
        stats: Stats,
        room: int,
        speculative: bool,
    ) -> Verdict:
        """One draft-verify step; room bounds 1 + k by max_tokens and the context."""
        n0 = self.target.n_past
        t_sync = self.clock()
        # catching up is drafting time, but no drafter's per-token price
        offers = self.sync_drafters(tokens) if speculative else []
        t_plan = self.clock()
        drafter, k = self.policy.plan(tokens, sp, offers) if speculative else (None, 0)
        k = min(k, room - 1)
        # planning is the loop's own time, paid by every step, plain ones too: charged to the
        # drafter chosen, its 0.17 ms (median here) would price a draft model on a GPU (a token
        # in 1-2 ms) about 10-20% dearer than it is
        t0 = self.clock()
        if drafter in self.dropped:
            drafter, k = None, 0
        proposed = self.guarded(drafter, drafter.propose, tokens, k, sp) if drafter and k else None
        if proposed is not None and drafter is not None:
            draft, name = proposed, drafter.name
        else:
            draft, name = self.padding_guess(tokens, room), GUESS
        t1 = self.clock()
        rows = [tokens[-1], *draft.tokens.tolist()]
        # greedy reads each row's argmax, sampling its likeliest columns: reduced on the
        # device where the runtime can
        if sp.greedy:
            scored: TopRows | PassRows = forward_top(self.target, rows)
        else:
            scored = forward_dists(self.target, rows, sp)
        t2 = self.clock()
        verdict = judge(draft, scored, sp, rng, len(tokens))
        self.target.rollback(n0 + 1 + verdict.n_accepted)
        k = len(draft.tokens)
        stats.record(name if k else None, k, verdict.n_accepted)
        drafted = drafter if k and name != GUESS else None
        if drafted is None:  # the policy chose a plain step: a guess is the padding's gain
            k = 0
        t_draft = t1 - t0 - draft.t_catch_up
        self.policy.observe(
            drafted, k, verdict.n_accepted, t_draft, t2 - t1, draft.unsure_end, draft.t_first
        )
        stats.t_draft += (t_plan - t_sync) + (t1 - t0)
        stats.t_verify += t2 - t1
        return verdict

    def padding_guess(self, tokens: list[int], room: int) -> Draft:
        """A plain step's draft: none, or where the target pads a one-token pass to two rows,
        one token in the padding row (prompt lookup's, matched on as little as the last
        token), verified by the Gumbel rule every plain step uses: it changes no token, and
        each one kept saves a pass."""
        if self.guesser is None or room < 2:
            return Draft.empty()
        return self.guesser.propose(tokens, 1, PLAIN_RULE)

    def emit(
        self, verdict: Verdict, tokens: list[int], text: TextStream, stats: Stats, max_tokens: int
    ) -> tuple[Emitted, str | None]:
        """Append the verdict's tokens until a stop condition; return them (with their text
        and whether each came from the draft) and why it stopped."""
        out = Emitted()
        for j, token in enumerate(verdict.tokens.tolist()):
            tokens.append(token)
            if token in self.eog_ids:
                return out, "stop"
            out.tokens.append(token)
            out.from_draft.append(j < verdict.n_accepted)
            stats.n_generated += 1
            out.pieces.append(text.push(self.target.detokenize([token])))
            if text.stopped:
                return out, "stop"
            if stats.n_generated >= max_tokens:
                return out, "length"
        return out, None

    def prompt_tokens(self, prompt: str | Sequence[int]) -> list[int]:
        if isinstance(prompt, str):
            tokens = self.target.tokenize(prompt, special=True)
        else:
            tokens = [int(t) for t in prompt]
        if not tokens:
            raise EdgespecError("the prompt is empty; give at least one token of text")
        if len(tokens) >= self.target.n_ctx:
            raise ContextOverflowError(
                f"the prompt is {len(tokens)} tokens but the context holds {self.target.n_ctx}; "
                "shorten the prompt or raise the context size (--n-ctx)"
            )
        bad = [t for t in tokens if not 0 <= t < self.target.n_vocab]
        if bad:
            raise EdgespecError(
                f"token id {bad[0]} is outside the vocabulary (0..{self.target.n_vocab - 1})"
            )
        return tokens


def judge(
    draft: Draft,
    scored: TopRows | PassRows,
    sp: SamplingParams,
    rng: np.random.Generator,
    position: int,
) -> Verdict:
    """Verify draft against the target's rows (TopRows when greedy, else i -> row i's
    distribution, runtime.forward_dists):
    greedy compares argmaxes; a plain step or a Gumbel draft takes each position's
    Gumbel-max; a draft with q, rejection sampling. position: where row 0's token goes."""
    if isinstance(scored, TopRows):
        return verify_greedy(draft.tokens, scored.ids)
    if draft.gumbel or not len(draft.tokens):
        assert sp.seed is not None  # request_params
        return verify_gumbel(draft.tokens, scored, sp.seed, position)
    return verify_stochastic(draft.tokens, draft.q, scored, rng)
