"""A trained draft head reading the target's own hidden states: an EAGLE-3 head, or the
target's own MTP layer (the same drafting, with features the target's final hidden state and
no fc layer: DraftHead.encode is the identity there).

The target keeps its extract layers' hidden states for every position its cache holds
(Runtime.hidden_states; the verify pass computes them for every row anyway). The head has a
KV cache of its own: at head position P it holds the pair (context[P + 1], g[P]), g[P] the
target's features at P through the head's fc layer. With context c of n tokens the target's
cache holds c[:-1], so positions 0..n-2 are known: the last of them, (c[n-1], g[n-2]), is
llama-server's "deferred boundary row"; here every row is written when a proposal needs it, so
nothing is deferred. Its logits give the first draft token; each further one is drafted at the
next position from (the token just drafted, the head's own pre-norm state at the position
before; its final norm's output for an EAGLE-3.1 head), as each was trained.

Rollback: `cached` lists the tokens c[P + 1] of the positions written from the target's
features. Draft positions (written from the head's own states) are never trusted: the next
proposal keeps the common prefix of cached and c[1:], rolls the head back to it and writes the
rest from the target's features, so every outcome of verification takes the same path.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np

from edgespec.controller.acceptance import ByPosition
from edgespec.drafters.base import Draft, Offer
from edgespec.drafters.model import CachedTokens
from edgespec.runtime import DraftHead, Runtime
from edgespec.sampling import SamplingParams, token_dist


class HeadDrafter(CachedTokens):
    def __init__(
        self,
        target: Runtime,
        head: DraftHead,
        *,
        token_s: float | None = None,
        seed: int | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        """target: the runtime whose hidden states the head reads (target.open_head(path)
        made the head); token_s: seconds per drafted token where calibrated, else learned."""
        self.target = target
        self.head = head
        self.name = head.kind  # "eagle" or "mtp"
        self.token_s = token_s
        self.clock = clock
        self.rng = np.random.default_rng(seed)
        self.cached = []  # c[P + 1] of each head position P written from features

    def reset(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.head.reset()
        self.cached = []

    def offer(self, context: Sequence[int]) -> Offer:
        room = min(self.head.n_ctx, self.target.n_ctx) - len(context)
        return Offer(max(0, room) if len(context) >= 2 else 0, behind=self.behind(context))

    def acceptance(self) -> ByPosition:
        return ByPosition()

    def behind(self, context: Sequence[int]) -> int:
        """Head positions a proposal must write from the target's features first."""
        return max(0, len(context) - 1 - self.common_prefix(context, offset=1))

    def sync(self, context: Sequence[int]) -> None:
        """Write what the head lacks of positions 0..n-3 (all but the boundary row, which the
        proposal writes for its logits) in batched passes."""
        if len(context) >= 3:
            self.catch_up(context, len(context) - 2)

    def catch_up(self, context: Sequence[int], end: int) -> tuple[np.ndarray, np.ndarray] | None:
        """Make head positions 0..end-1 hold (context[P + 1], g[P]); the last written row's
        (logits, pre-norm state), or None where nothing needed writing."""
        keep = min(self.common_prefix(context, offset=1), end)
        if keep == end and keep == len(self.cached) == self.head.n_past:
            return None
        self.head.rollback(keep)
        self.cached = self.cached[:keep]  # true whatever happens below
        out = None
        step = self.head.n_batch
        for start in range(keep, end, step):
            stop = min(start + step, end)
            g = self.head.encode(self.target.features(start, stop))
            out = self.head.decode(context[start + 1 : stop + 1], g)
            self.cached.extend(int(t) for t in context[start + 1 : stop + 1])
        return out

    def propose(self, context: Sequence[int], k: int, sp: SamplingParams) -> Draft:
        n = len(context)
        k = min(k, self.offer(context).available)
        if k <= 0 or self.target.n_past < n - 1:
            return Draft.empty()
        gumbel = not sp.greedy and sp.sampler == "gumbel"
        seed = sp.seed if sp.seed is not None else -1
        if gumbel and seed < 0:
            raise ValueError("Gumbel drafting needs the request's seed (request_params sets it)")
        t0 = self.clock()
        behind = self.behind(context)
        # the boundary row is always rewritten: it holds the logits of the first draft token
        self.cached = self.cached[: n - 2]
        last = self.catch_up(context, n - 1)
        assert last is not None
        logits, state = last
        t_first = self.clock() - t0  # the boundary row's fc and decode: the first token's
        t_catch_up = t_first if behind > 2 else 0.0
        tokens = np.empty(k, dtype=np.int32)
        n_vocab = self.target.n_vocab
        q = None if sp.greedy or gumbel else np.empty((k, n_vocab), dtype=np.float32)
        for i in range(k):
            if sp.greedy:
                tokens[i] = int(np.argmax(logits[:n_vocab]))
            else:
                dist = token_dist(logits[:n_vocab], sp)
                if q is None:  # argmax(log q + g) with the noise the target uses there
                    tokens[i] = dist.gumbel_max(seed, n + i)
                else:
                    q[i] = dist.dense(n_vocab)
                    tokens[i] = dist.sample(self.rng)
            if i + 1 < k:
                logits, state = self.head.decode([int(tokens[i])], state[None, :])
        # a catch-up pass is no first token's price (as ModelDrafter)
        return Draft(tokens, q, t_catch_up, gumbel, t_first=0.0 if t_catch_up else t_first)
