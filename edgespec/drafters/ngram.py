"""Prompt lookup decoding: propose what followed the last occurrence of the context's suffix.

An index from n-gram to the position after its latest occurrence grows with the context, so
each step costs O(new tokens x n-gram sizes) of Python work, not O(context).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from edgespec.drafters.base import Draft
from edgespec.sampling import SamplingParams


class NgramDrafter:
    name = "ngram"

    def __init__(self, max_ngram: int = 4, min_ngram: int = 1) -> None:
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got {min_ngram}, {max_ngram}")
        self.sizes = range(max_ngram, min_ngram - 1, -1)  # longest match first
        self.match_len = 0  # n-gram length behind the last proposal (0 = no match)
        self.reset()

    def reset(self) -> None:
        self.indexed: list[int] = []
        # n -> {n-gram: index of the token that followed its latest occurrence}
        self.latest: dict[int, dict[tuple[int, ...], int]] = {n: {} for n in self.sizes}

    def propose(self, context: Sequence[int], k: int, sp: SamplingParams) -> Draft:
        self.sync(context)
        self.match_len = 0
        ctx = self.indexed
        for n in self.sizes:
            if len(ctx) <= n:
                continue
            start = self.latest[n].get(tuple(ctx[-n:]))
            if start is not None:
                self.match_len = n
                return Draft(np.asarray(ctx[start : start + k], dtype=np.int32), None)
        return Draft.empty()

    def lookahead(self, context: Sequence[int]) -> tuple[int, int]:
        """(match length, tokens available to propose) of the longest suffix match, or (0, 0).

        The controller asks this before it chooses k, so it knows what a proposal would be.
        """
        self.sync(context)
        ctx = self.indexed
        for n in self.sizes:
            if len(ctx) > n:
                start = self.latest[n].get(tuple(ctx[-n:]))
                if start is not None:
                    return n, len(ctx) - start
        return 0, 0

    def accept(self, n_accepted: int) -> None:
        pass

    def sync(self, context: Sequence[int]) -> None:
        """Index context; a context that does not extend the indexed one starts afresh."""
        n_old = len(self.indexed)
        if len(context) < n_old or list(context[:n_old]) != self.indexed:
            self.reset()
            n_old = 0
        self.indexed.extend(int(t) for t in context[n_old:])
        ctx = self.indexed
        # Index each n-gram whose continuation is known: the one ending at position i - 1 for
        # every i < len(ctx). The context's own suffix (i = len) is left out, so never matches.
        for i in range(max(n_old, 1), len(ctx)):
            for n in self.sizes:
                if i >= n:
                    self.latest[n][tuple(ctx[i - n : i])] = i
