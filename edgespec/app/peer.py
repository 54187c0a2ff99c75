"""The peer: llama-cpp-python's own prompt-lookup decoding, run beside ours in `edgespec bench`."""

from __future__ import annotations

import time

from edgespec.app.bench import PEER, Bench, Row, token_budget
from edgespec.engine import Result


def run_peer(bench: Bench, k: int, prompts, tokens, max_tokens, reference) -> Row:
    """llama-cpp-python's prompt-lookup decoding on its own Llama object, same model and
    thread settings; greedy, compared with our plain run."""
    from llama_cpp import Llama
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    llm = Llama(
        str(bench.pair.target_path),
        n_ctx=bench.target.n_ctx,
        n_threads=bench.pair.options.n_threads or None,
        n_gpu_layers=bench.pair.options.gpu_layers(),
        draft_model=LlamaPromptLookupDecoding(num_pred_tokens=k),
        logits_all=True,  # it sizes its scores buffer by this argument, not by the draft
        verbose=False,
    )
    runs = []
    for prompt, toks, ref in zip(prompts, tokens, reference):
        llm.reset()  # each request from an empty cache, as ours run
        out: list[int] = []
        t_first = 0.0
        for token in llm.generate(toks, temp=0.0, top_k=1, reset=True):
            if not out:
                t_first = time.perf_counter()
            if llm.token_eos() == token or token in bench.decoder.eog_ids:
                break
            out.append(token)
            if len(out) >= (token_budget(prompt, max_tokens)):
                break
        t_end = time.perf_counter()
        run = bench.compare(prompt, toks, Result("", out, "stop", ref.stats), ref)
        # Decode time from the first token on: its prefill is not ours to measure.
        run.n_generated, run.t_decode, run.stats = len(out) - 1, t_end - t_first, {}
        runs.append(run)
    del llm
    return Row(PEER, k, runs)
