"""The peer: llama-cpp-python's own prompt-lookup decoding, run beside ours in `edgespec bench`.

It runs as its documentation shows it (`Llama(..., draft_model=LlamaPromptLookupDecoding(
num_pred_tokens=N))`; N = 10, "2 performs better for cpu-only machines"), and its speed is
divided by its own plain decoding (the same Llama settings without a draft model) on the
same prompts, in turn with ours, so each side is compared with itself.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Protocol

from edgespec.app.bench_runs import PEER_PLAIN, Bench

PEER_KS = (2, 10)  # the two num_pred_tokens its README recommends (CPU, GPU)


class Peer(Protocol):
    """Another runtime's decoding, run beside ours: its plain decoding and its methods
    (bench.PEER_PLAINS names each method's plain decoding)."""

    def generate(
        self, method: str, k: int | None, toks: Sequence[int], budget: int
    ) -> tuple[list[int], float, dict]:
        """Greedy tokens, decode seconds (prefill excluded), and engine.Stats fields."""
        ...

    def close(self) -> None: ...


class PeerLlama:
    """llama-cpp-python's high-level Llama on the target's GGUF: one plain, one per draft k."""

    def __init__(self, bench: Bench):
        from llama_cpp import Llama

        self.bench = bench
        self.Llama = Llama
        self.plain = self.open(None)
        self.with_draft: dict[int, object] = {}

    def open(self, k: int | None):
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        options = self.bench.pair.options
        extra: dict = {}
        if k is not None:
            extra["draft_model"] = LlamaPromptLookupDecoding(num_pred_tokens=k)
            # With a draft model it computes every row's logits anyway (its _logits_all is
            # forced on); this argument only sizes its scores buffer to the context, without
            # which a request past n_batch (512) tokens fails on a shape mismatch.
            extra["logits_all"] = True
        return self.Llama(
            str(self.bench.pair.target_path),
            n_ctx=self.bench.target.n_ctx,
            n_threads=options.n_threads or None,
            n_gpu_layers=options.gpu_layers(),
            verbose=False,
            **extra,
        )

    def llm(self, k: int | None):
        if k is None:
            return self.plain
        if k not in self.with_draft:
            self.with_draft[k] = self.open(k)
        return self.with_draft[k]

    def generate(
        self, method: str, k: int | None, toks: Sequence[int], budget: int
    ) -> tuple[list[int], float, dict]:
        """Greedy tokens (end of generation excluded), seconds from the first token to the
        last (the first token's prefill is not ours to time, as ours is not timed either), and
        no statistics: it reports none."""
        llm = self.llm(None if method == PEER_PLAIN else k)
        llm.reset()  # each request from an empty cache, as ours run
        out: list[int] = []
        t_first = t_end = 0.0
        for token in llm.generate(list(toks), temp=0.0, top_k=1, reset=True):
            now = time.perf_counter()
            if not out:
                t_first = now
            if token == llm.token_eos() or token in self.bench.decoder.eog_ids:
                break
            out.append(token)
            t_end = now
            if len(out) >= budget:
                break
        return out, t_end - t_first, {}

    def close(self) -> None:
        for llm in (self.plain, *self.with_draft.values()):
            llm.close()  # type: ignore[attr-defined]
