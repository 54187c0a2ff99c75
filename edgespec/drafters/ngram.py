"""Prompt lookup decoding: propose what followed an earlier occurrence of the context's suffix.

An index from n-gram to the position after its latest occurrence grows with the context, so
each step costs O(new tokens x n-gram sizes) of Python work, not O(context).

While the text keeps following the place a draft was copied from, the next draft continues
from there ("following"), instead of looking the suffix up again: in copy-heavy text a short
suffix often occurs in several places, and the one being copied is the best guess.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from edgespec.acceptance import ByMatchLength
from edgespec.drafters.base import Draft, Offer
from edgespec.sampling import SamplingParams, uses_gumbel


class NgramDrafter:
    name = "ngram"
    token_s = 0.0  # a dictionary lookup: free next to any target pass
    # a point mass is accepted with probability p(x) by either sampler; Gumbel also emits
    # plain decoding's own tokens (docs/exactness.md)
    sampler = "gumbel"

    def __init__(self, max_ngram: int = 4, min_ngram: int = 1) -> None:
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got {min_ngram}, {max_ngram}")
        self.sizes = range(max_ngram, min_ngram - 1, -1)  # longest match first
        self.following = max_ngram + 1  # the match length reported while following a source
        self.match_len = 0  # match length behind the last proposal (0 = no match)
        self.forget()

    def reset(self, rng: np.random.Generator) -> None:
        self.forget()  # nothing here is random: rng is unused

    def forget(self) -> None:
        self.indexed: list[int] = []
        # n -> {n-gram: index of the token that followed its latest occurrence}
        self.latest: dict[int, dict[tuple[int, ...], int]] = {n: {} for n in self.sizes}
        self.source: tuple[int, int] | None = None  # (context length, start) of the last draft

    def propose(self, context: Sequence[int], k: int, sp: SamplingParams) -> Draft:
        self.match_len, start = self.find(context)
        if not self.match_len:
            return Draft.empty()
        self.source = (len(self.indexed), start)
        tokens = np.asarray(self.indexed[start : start + k], dtype=np.int32)
        return Draft(tokens, None, gumbel=uses_gumbel(sp, self.sampler))

    def offer(self, context: Sequence[int]) -> Offer:
        """The tokens after the match (none without one), keyed by the match length."""
        match_len, start = self.find(context)
        return Offer((len(self.indexed) - start) if match_len else 0, key=match_len)

    def acceptance(self) -> ByMatchLength:
        return ByMatchLength()

    def accept(self, n_accepted: int) -> None:
        pass

    def find(self, context: Sequence[int]) -> tuple[int, int]:
        """(match length, start of the continuation in the context), or (0, 0)."""
        self.sync(context)
        ctx = self.indexed
        if self.source is not None:
            then, start = self.source
            emitted = len(ctx) - then
            if 0 < emitted and ctx[then:] == ctx[start : start + emitted]:
                if start + emitted < len(ctx):
                    return self.following, start + emitted
        for n in self.sizes:
            if len(ctx) > n:
                found = self.latest[n].get(tuple(ctx[-n:]))
                if found is not None:
                    return n, found
        return 0, 0

    def sync(self, context: Sequence[int]) -> None:
        """Index context; a context that does not extend the indexed one starts afresh."""
        n_old = len(self.indexed)
        if len(context) < n_old or list(context[:n_old]) != self.indexed:
            self.forget()
            n_old = 0
        self.indexed.extend(int(t) for t in context[n_old:])
        ctx = self.indexed
        # Index each n-gram whose continuation is known: the one ending at position i - 1 for
        # every i < len(ctx). The context's own suffix (i = len) is left out, so never matches.
        for i in range(max(n_old, 1), len(ctx)):
            for n in self.sizes:
                if i >= n:
                    self.latest[n][tuple(ctx[i - n : i])] = i
