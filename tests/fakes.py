"""A small deterministic runtime for unit tests of the loop's logic (never the only test).

Its logits are a fixed function of the last two tokens and the position, so a fresh runtime
fed the same tokens gives the same logits, exactly as a real model's cache should.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from edgespec.controller.acceptance import ByPosition
from edgespec.drafters.base import Draft, Offer
from edgespec.runtime import Runtime, VocabInfo
from edgespec.sampling import SamplingParams, token_dist


class FakeRuntime(Runtime):
    def __init__(self, n_vocab: int = 16, n_ctx: int = 64, seed: int = 0, scale: float = 2.0):
        self.n_vocab = n_vocab
        self.n_ctx = n_ctx
        self.seed = seed
        self.scale = scale
        self.cache: list[int] = []
        self.eog = n_vocab - 1
        self.forward_calls: list[int] = []  # widths of forward passes, for tests of the loop
        self.memo: dict[tuple, np.ndarray] = {}

    @property
    def n_past(self) -> int:
        return len(self.cache)

    def logits_after(self, prefix: Sequence[int]) -> np.ndarray:
        key = (self.seed, len(prefix), *prefix[-2:])
        logits = self.memo.get(key)
        if logits is None:  # remembered: statistical tests run the loop many thousand times
            rng = np.random.default_rng(abs(hash(key)) % (2**32))
            logits = (rng.standard_normal(self.n_vocab) * self.scale).astype(np.float32)
            logits.flags.writeable = False
            self.memo[key] = logits
        return logits

    def forward(self, tokens: Sequence[int], *, last_only: bool = False) -> np.ndarray:
        if self.n_past + len(tokens) > self.n_ctx:
            raise RuntimeError("fake runtime: context overflow")
        self.forward_calls.append(len(tokens))
        rows = []
        for t in tokens:
            self.cache.append(int(t))
            rows.append(self.logits_after(self.cache))
        out = np.stack(rows)
        return out[-1:] if last_only else out

    def rollback(self, n_past: int) -> None:
        del self.cache[n_past:]

    def reset(self) -> None:
        self.cache.clear()

    def tokenize(self, text: str, *, special: bool) -> list[int]:
        return [ord(c) % (self.n_vocab - 1) for c in text]

    def detokenize(self, tokens: Sequence[int]) -> bytes:
        return b"".join(bytes([97 + t % 26]) for t in tokens)

    def token_text(self, token: int) -> bytes:
        return self.detokenize([token])

    def vocab_info(self) -> VocabInfo:
        return VocabInfo(self.n_vocab, "fake", None, self.eog, frozenset({self.eog}), "fake")

    def chat_template(self) -> str | None:
        return None

    def special_token_text(self, token: int | None) -> str:
        return "" if token is None else self.token_text(token).decode()


class ScriptedDrafter:
    """Proposes the target's greedy continuation, wrong exactly at draft position `wrong_at`.

    A third kind of drafter beside the model and prompt lookup: whatever it is called and
    priced, the policy must treat it by the protocol alone."""

    name = "scripted"

    def __init__(
        self,
        oracle: FakeRuntime,
        wrong_at: int | None,
        *,
        token_s: float | None = 0.01,
        behind: int = 0,
        name: str | None = None,
    ) -> None:
        self.oracle = oracle
        self.wrong_at = wrong_at
        self.token_s = token_s
        self.behind = behind
        self.name = name or type(self).name
        self.proposals: list[int] = []  # k of each proposal, for tests
        self.syncs: list[int] = []  # context length at each sync, for tests

    def offer(self, context: Sequence[int]) -> Offer:
        return Offer(available=1 << 20, behind=self.behind)

    def acceptance(self) -> ByPosition:
        return ByPosition()

    def propose(self, context: Sequence[int], k: int, sp: SamplingParams) -> Draft:
        self.proposals.append(k)
        ctx = list(context)
        out = []
        for i in range(k):
            best = int(np.argmax(self.oracle.logits_after(ctx)))
            token = (best + 1) % self.oracle.n_vocab if i == self.wrong_at else best
            out.append(token)
            ctx.append(token)
        return Draft(np.asarray(out, dtype=np.int32), None)

    def sync(self, context: Sequence[int]) -> None:
        self.syncs.append(len(context))
        self.behind = 0

    def reset(self, rng: np.random.Generator) -> None:
        pass


def logits_to_probs(logits: np.ndarray, sp: SamplingParams) -> np.ndarray:
    """[n, V] or [V] float logits -> float32 probabilities of the same shape: token_dist
    made dense, for tests that compare whole distributions.

    Tokens cut by top-k, top-p or min-p get probability exactly 0.
    """
    rows = np.atleast_2d(np.asarray(logits, dtype=np.float32))
    probs = np.stack([token_dist(row, sp).dense(rows.shape[-1]) for row in rows])
    return probs[0] if np.ndim(logits) == 1 else probs
