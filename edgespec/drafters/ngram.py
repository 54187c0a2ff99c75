"""Prompt lookup decoding: propose what followed an earlier occurrence of the context's suffix.

An index from n-gram to the position after its latest occurrence grows with the context, so
each step costs O(new tokens x n-gram sizes) of Python work, not O(context).

While the text keeps following the place a draft was copied from, the next draft continues
from there ("following"), instead of looking the suffix up again: in copy-heavy text a short
suffix often occurs in several places, and the one being copied is the best guess.

With history=N (a server's --lookup-history, off by default: it carries text from one
request into another), the completions of the last N requests are kept and looked up when
the context itself has no match. Earlier turns of a conversation need nothing of the kind:
they are in the context.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import numpy as np

from edgespec.controller.acceptance import ByMatchLength
from edgespec.drafters.base import Draft, Offer
from edgespec.runtime import K_MAX
from edgespec.sampling import SamplingParams

# how much of a proposal an offer previews: the longest draft the adaptive controller tries
# by default (SpecOptions.k_max); a longer draft is still learned from per token
PREVIEW_TOKENS = K_MAX


class NgramDrafter:
    name = "ngram"
    token_s = 0.0  # a dictionary lookup: free next to any target pass

    def __init__(self, max_ngram: int = 4, min_ngram: int = 1, history: int = 0) -> None:
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got {min_ngram}, {max_ngram}")
        if history < 0:
            raise ValueError(f"history must be >= 0, got {history}")
        self.sizes = range(max_ngram, min_ngram - 1, -1)  # longest match first
        self.following = max_ngram + 1  # the match length reported while following a source
        self.match_len = 0  # match length behind the last proposal (0 = no match)
        self.history: deque[tuple[int, ...]] = deque(maxlen=history)  # recent completions
        # n -> {n-gram: (completion, index of the token after its latest occurrence)}
        self.history_latest: dict[int, dict[tuple[int, ...], tuple[int, int]]] = {}
        self.prompt_len: int | None = None  # where this request's completion starts
        self.forget()

    def reset(self, rng: np.random.Generator) -> None:
        if self.history.maxlen and self.prompt_len is not None:
            completion = tuple(self.indexed[self.prompt_len :])
            if completion:
                self.history.append(completion)
                self.index_history()
        self.prompt_len = None
        self.forget()  # nothing here is random: rng is unused

    def index_history(self) -> None:
        """Rebuilt per request: the oldest completion may just have been dropped."""
        self.history_latest = {n: {} for n in self.sizes}
        for j, seq in enumerate(self.history):
            for i in range(1, len(seq)):
                for n in self.sizes:
                    if i >= n:
                        self.history_latest[n][seq[i - n : i]] = (j, i)

    def forget(self) -> None:
        self.indexed: list[int] = []
        # n -> {n-gram: index of the token that followed its latest occurrence}
        self.latest: dict[int, dict[tuple[int, ...], int]] = {n: {} for n in self.sizes}
        self.source: tuple[int, int] | None = None  # (context length, start) of the last draft
        self.synced: Sequence[int] | None = None  # the context object indexed last

    def propose(self, context: Sequence[int], k: int, sp: SamplingParams) -> Draft:
        self.match_len, seq, start = self.find(context)
        if not self.match_len:
            return Draft.empty()
        if seq is self.indexed:
            self.source = (len(self.indexed), start)
        tokens = np.asarray(seq[start : start + k], dtype=np.int32)
        return Draft(tokens, None, gumbel=sp.sampler == "gumbel")

    def offer(self, context: Sequence[int]) -> Offer:
        """The tokens after the match (none without one), keyed by the match length, with
        the first PREVIEW_TOKENS of them."""
        match_len, seq, start = self.find(context)
        if not match_len:
            return Offer(0, key=0)
        preview = tuple(seq[start : start + PREVIEW_TOKENS])
        return Offer(len(seq) - start, key=match_len, preview=preview)

    def acceptance(self) -> ByMatchLength:
        return ByMatchLength()

    def find(self, context: Sequence[int]) -> tuple[int, Sequence[int], int]:
        """(match length, the sequence holding the continuation, its start there): the
        context, else a recent completion (history); (0, context, 0) without a match."""
        self.sync(context)
        ctx = self.indexed
        if self.source is not None:
            then, start = self.source
            emitted = len(ctx) - then
            if 0 < emitted and ctx[then:] == ctx[start : start + emitted]:
                if start + emitted < len(ctx):
                    return self.following, ctx, start + emitted
        for n in self.sizes:
            if len(ctx) > n:
                found = self.latest[n].get(tuple(ctx[-n:]))
                if found is not None:
                    return n, ctx, found
        for n in self.sizes if self.history_latest else ():
            if len(ctx) >= n:
                hit = self.history_latest[n].get(tuple(ctx[-n:]))
                if hit is not None:
                    return n, self.history[hit[0]], hit[1]
        return 0, ctx, 0

    def sync(self, context: Sequence[int]) -> None:
        """Index context; a context that does not extend the indexed one starts afresh."""
        n_old = len(self.indexed)
        # The engine hands every step of a request the one list it appends to: comparing
        # that list's start with what was indexed would be a pass over the whole context a
        # step, growing with the context
        grown = context is self.synced and len(context) >= n_old
        if not grown and (len(context) < n_old or list(context[:n_old]) != self.indexed):
            self.forget()
            n_old = 0
        self.synced = context
        if self.prompt_len is None:  # the first context of a request is its prompt
            self.prompt_len = len(context)
        self.indexed.extend(int(t) for t in context[n_old:])
        ctx = self.indexed
        # Index each n-gram whose continuation is known: the one ending at position i - 1 for
        # every i < len(ctx). The context's own suffix (i = len) is left out, so never matches.
        for i in range(max(n_old, 1), len(ctx)):
            for n in self.sizes:
                if i >= n:
                    self.latest[n][tuple(ctx[i - n : i])] = i
