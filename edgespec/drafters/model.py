"""A second, smaller model of the same family as drafter.

It keeps its own KV cache and resyncs from the context it is given: the common prefix of
what it has cached and the context stays, the rest is rolled back and re-forwarded, so
every outcome of verification (all accepted, early rejection) takes the same path.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

import numpy as np

from edgespec.controller.acceptance import ByPosition
from edgespec.drafters.base import Draft, Offer
from edgespec.runtime import Runtime, TopRows, forward_dists, forward_top
from edgespec.sampling import SamplingParams, TokenDist

STAND_IN = 0  # what the draft reads for a token id it has no row for (a padding id)
# the passes a proposal makes once in step (width, rows returned): the token after one it
# drafted, and, after a draft kept whole, its last proposal with the bonus token (in two
# one-token passes where the runtime keeps one graph)
STEP_SHAPES = ((1, 1), (2, 1))


class CachedTokens:
    """self.cached, the tokens a draft cache holds, with their common prefix with the engine's
    context found fast: the engine hands every step of a request the one list it appends to,
    so a prefix found equal stays equal and a step compares only what follows it (comparing
    the whole lists costs tens of microseconds a step at 8,000 tokens). Appending
    to cached in place keeps what is known; assigning a new list forgets it."""

    _cached: list[int]
    _known: tuple[Sequence[int], int] | None = None  # (context list, prefix length)

    @property
    def cached(self) -> list[int]:
        return self._cached

    @cached.setter
    def cached(self, tokens: list[int]) -> None:
        self._cached, self._known = tokens, None

    def cache_context(self, context: Sequence[int], n: int) -> None:
        """cached = context[:n], known to begin context."""
        self._cached, self._known = list(context[:n]), (context, n)

    def common_prefix(self, context: Sequence[int], offset: int = 0) -> int:
        """common_prefix_len(self.cached, context[offset:])."""
        start = 0
        if self._known is not None and self._known[0] is context:
            start = min(self._known[1], len(self._cached), len(context) - offset)
        tail = context[offset + start :] if start or offset else context
        n = start + common_prefix_len(self._cached[start:] if start else self._cached, tail)
        self._known = (context, n)
        return n


class ModelDrafter(CachedTokens):
    name = "model"

    def __init__(
        self,
        runtime: Runtime,
        *,
        token_s: float | None = None,
        seed: int | None = None,
        keep_cache: bool = False,
        confidence: float = 0.0,
        n_ids: int | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        """token_s: seconds per drafted token as calibrated (calibrate.cost_curve's draft_s).
        keep_cache: a new request keeps the draft's KV cache (prompt-cache reuse, as the
        engine's reuse_cache): the first proposal forwards only what follows the common
        prefix of the new context and what the cache holds.
        confidence > 0: a greedy draft ends with its first token the draft model gives less
        than this probability (Draft.unsure_end), before the k asked for, which is then a
        cap; a Gumbel draft with its first token whose perturbed score beats the runner-up's
        by less than log(confidence / (1 - confidence)), what a top probability of
        `confidence` against one rival gives (TokenDist.gumbel_max_margin). Unsure tokens
        are mostly rejected, and every token after a rejected one is, while sure ones are
        mostly kept (docs/decisions.md); the policy learns how often drafts go on and what
        sure and unsure tokens keep (ByPosition), and prices longer caps by it.
        n_ids: the target's vocabulary size (default: the draft's), the width of the q rows
        verification reads. A family's models may pad their output layers to different sizes
        (token_text_hash): a draft with more rows than n_ids proposes from the first n_ids.
        clock: seconds, read around a proposal's catch-up (a replay passes its virtual one)."""
        if not 0.0 <= confidence < 1.0:
            raise ValueError(f"confidence must be in [0, 1), got {confidence}")
        self.runtime = runtime
        self.columns = runtime.logit_ids  # the token id of each logits column (None: itself)
        self.n_ids = runtime.n_vocab if n_ids is None else n_ids
        # columns past the target's ids (a draft padded further): cut off every logits row
        self.width = self.n_ids if self.columns is None and self.n_ids < runtime.n_vocab else None
        # ids from here on the target has and the draft lacks (padding): see readable()
        self.foreign_from = runtime.n_vocab if runtime.n_vocab < self.n_ids else None
        self.token_s = token_s
        self.clock = clock
        self.keep_cache = keep_cache
        self.confidence = confidence
        self.margin = math.log(confidence / (1 - confidence)) if confidence > 0 else -math.inf
        self.rng = np.random.default_rng(seed)
        self.cached = []  # tokens in the draft runtime's KV cache
        # a runtime replaying one CUDA graph runs a pass whose width changed uncaptured and
        # captures on the next: there one token a pass, replayed, beats two in one
        self.one_token_passes = runtime.keeps_one_graph

    def reset(self, rng: np.random.Generator) -> None:
        self.rng = rng
        if not self.keep_cache:
            self.runtime.reset()
            self.cached = []
            return
        # trust only what the runtime still holds (a request cut short between a forward
        # and the bookkeeping after it leaves the two apart)
        self.cached = self.cached[: self.runtime.n_past]
        self.runtime.rollback(len(self.cached))

    def offer(self, context: Sequence[int]) -> Offer:
        """As many tokens as the draft cache has room for, after catching up on `behind`."""
        return Offer(max(0, self.runtime.n_ctx - len(context)), behind=self.behind(context))

    def acceptance(self) -> ByPosition:
        return ByPosition()

    def propose(self, context: Sequence[int], k: int, sp: SamplingParams) -> Draft:
        room = self.runtime.n_ctx - len(context)
        gumbel = not sp.greedy and sp.sampler == "gumbel"
        gated = self.confidence > 0 and (sp.greedy or gumbel)
        k = min(k, room)
        if k <= 0:
            return Draft.empty()
        unsure = False
        t0 = self.clock()
        keep = self.common_prefix(context)
        scores = self.catch_up(context, keep, sp, gated)
        # a step after a drafted step re-forwards the bonus token (and the draft's last one):
        # more than that is catching up after idle steps, not the price of drafting
        t_first = self.clock() - t0
        t_catch_up = t_first if len(context) - keep > 2 else 0.0
        seed = sp.seed if sp.seed is not None else -1
        if gumbel and seed < 0:
            raise ValueError("Gumbel drafting needs the request's seed (request_params sets it)")
        if k > 1:  # one-token passes follow: the next step cuts back into them
            self.runtime.mark()
        tokens = np.empty(k, dtype=np.int32)
        n_vocab = self.n_ids
        q = None if sp.greedy or gumbel else np.empty((k, n_vocab), dtype=np.float32)
        for i in range(k):
            if isinstance(scores, TopRows):  # greedy: the likeliest column, and how likely
                column = int(scores.ids[-1])
                tokens[i] = column if self.columns is None else self.columns[column]
                prob = scores.prob
                unsure = gated and prob is not None and bool(prob[-1] < self.confidence)
            else:
                dist = scores.on_ids(self.columns)
                if q is None:  # argmax(log q + g) with the noise the target uses there
                    tokens[i], margin = dist.gumbel_max_margin(seed, len(context) + i)
                    unsure = gated and margin < self.margin
                else:
                    q[i] = dist.dense(n_vocab)
                    tokens[i] = dist.sample(self.rng)
            if unsure or i + 1 == k:
                k = i + 1  # an unsure token is the draft's last
                break
            scores = self.score([int(tokens[i])], sp, gated)
        self.cached.extend(int(t) for t in tokens[: k - 1])
        t_first = 0.0 if t_catch_up else t_first  # a catch-up pass is no first token's price
        return Draft(tokens[:k], None if q is None else q[:k], t_catch_up, gumbel, unsure,
                     t_first)  # fmt: skip

    def sync(self, context: Sequence[int]) -> None:
        """Forward what the cache lacks of context but its last token, in one batched pass
        (the prompt at a request's start; what steps it did not draft emitted): the next
        proposal then forwards only the last token, as after a drafted step."""
        keep = min(self.common_prefix(context), len(context) - 1)
        if keep == len(context) - 1 and keep == len(self.cached):
            return
        self.runtime.rollback(keep)
        self.cached = self.cached[:keep]  # true whatever happens to the forward below
        if len(context) - 1 > keep:
            self.runtime.forward(self.readable(context[keep:-1]), last_only=True)
        self.cache_context(context, len(context) - 1)

    def behind(self, context: Sequence[int]) -> int:
        """Tokens of context the draft cache lacks: what the next proposal must forward."""
        return len(context) - self.common_prefix(context)

    def catch_up(
        self, context: Sequence[int], keep: int, sp: SamplingParams, gated: bool
    ) -> TokenDist | TopRows:
        """Make the cache hold context[:-1] plus the last token, keeping the first `keep`
        cached tokens (the common prefix); return the next token's scores (score)."""
        keep = min(keep, len(context) - 1)  # re-forward at least one token to get its logits
        self.runtime.rollback(keep)
        if self.one_token_passes and len(context) - keep > 1:
            self.cache_context(context, keep)  # true whatever happens to the forward below
            self.runtime.forward(self.readable(context[keep:-1]), last_only=True)
            keep = len(context) - 1
        scores = self.score(self.readable(context[keep:]), sp, gated)
        self.cache_context(context, len(context))
        return scores

    def score(self, tokens: Sequence[int], sp: SamplingParams, gated: bool) -> TokenDist | TopRows:
        """Forward tokens; the next token's distribution over the logits columns, or for a
        greedy draft only its likeliest column and (gated) that column's probability, each
        computed on the device where the runtime can (forward_dists, forward_top)."""
        if sp.greedy:
            return forward_top(
                self.runtime, tokens, last_only=True, with_prob=gated, width=self.width
            )
        return forward_dists(self.runtime, tokens, sp, last_only=True, width=self.width)(0)

    def readable(self, tokens: Sequence[int]) -> Sequence[int]:
        """tokens with the ids the draft has no row for as STAND_IN: the target's padding ids
        (it may emit them), which cost only the draft's guesses, never the output."""
        if self.foreign_from is None:
            return tokens
        return [t if t < self.foreign_from else STAND_IN for t in tokens]


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the common prefix. Called every step: the draft cache and the context
    usually differ only in their last few tokens, so the head is compared as whole lists."""
    n = min(len(a), len(b))
    head = max(0, n - 64)
    if list(a[:head]) != list(b[:head]):  # rare: a difference far back
        return int(np.flatnonzero(np.asarray(a[:head]) != np.asarray(b[:head]))[0])
    for i in range(head, n):
        if a[i] != b[i]:
            return i
    return n
