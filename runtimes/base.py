"""The Runtime protocol: what the engine needs from a back-end.

A runtime owns one model and one KV cache for one sequence. The engine keeps the invariant
that the target's cache never holds the last emitted token (see docs/design.md).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from edgespec.sampling import SamplingParams, TokenDist, row_dists


@dataclass(frozen=True)
class VocabInfo:
    """What two runtimes must agree on before one may draft for the other."""

    n_vocab: int
    vocab_type: str  # e.g. "gpt2" (byte-level BPE), "llama" (SentencePiece)
    bos_id: int | None
    eos_id: int | None
    eog_ids: frozenset[int]  # every end-of-generation token (eos, eot, im_end, ...)
    token_text_hash: str  # sha256 over the text of every token, in id order, padding rows off


@runtime_checkable
class Runtime(Protocol):
    """A runtime may also have `logit_ids` (logit_ids() reads it): the token id of each
    logits column, where its output layer keeps only some token ids (a draft exported with
    `--draft-vocab`); its rows are then [len(logit_ids)] wide. Such a runtime only drafts.
    And `top_outputs` (forward_top() reads it): true where `forward_top(tokens, last_only)`
    returns TopRows with probabilities computed beside the logits, on the device."""

    n_vocab: int
    n_ctx: int
    n_past: int  # tokens in the KV cache

    def forward(self, tokens: Sequence[int], *, last_only: bool = False) -> np.ndarray:
        """Append tokens at n_past; return [len(tokens), n_vocab] float32 logits.

        last_only=True returns [1, n_vocab], the last token's row only (prefill, drafting):
        a back-end then computes and copies one row instead of len(tokens).
        """
        ...

    def rollback(self, n_past: int) -> None:
        """Drop the cache after the first n_past tokens."""
        ...

    def reset(self) -> None: ...

    def tokenize(self, text: str, *, special: bool) -> list[int]: ...

    def detokenize(self, tokens: Sequence[int]) -> bytes: ...

    def vocab_info(self) -> VocabInfo: ...

    def chat_template(self) -> str | None: ...

    def token_text(self, token: int) -> bytes: ...

    def special_token_text(self, token: int | None) -> str:
        """A special token's text as a chat template writes it ("" for None): BOS and EOS."""
        ...


# --- pieces every back-end shares -----------------------------------------------------------


@dataclass(frozen=True)
class TopRows:
    """What a greedy step needs of each logits row: its likeliest column and, where asked,
    that column's softmax probability (a draft's confidence)."""

    ids: np.ndarray  # [rows] int64: the first column holding the row's maximum
    prob: np.ndarray | None  # [rows] float32, or None where not asked for


def forward_top(
    runtime: Runtime,
    tokens: Sequence[int],
    *,
    last_only: bool = False,
    with_prob: bool = False,
    width: int | None = None,
) -> TopRows:
    """Runtime.forward's rows reduced to TopRows, over their first `width` columns (None:
    all). A runtime with `top_outputs` (an ONNX graph exported for the GPU) computes them
    where the logits are, so only [rows] ids and probabilities reach the host, not [rows, V]
    floats; any other runtime, or a cut to `width`, reduces the logits here."""
    if width is None and getattr(runtime, "top_outputs", False):
        return runtime.forward_top(tokens, last_only=last_only)  # type: ignore[attr-defined]
    return top_of(runtime.forward(tokens, last_only=last_only)[:, :width], with_prob)


def forward_dists(
    runtime: Runtime,
    tokens: Sequence[int],
    sp: SamplingParams,
    *,
    last_only: bool = False,
    width: int | None = None,
) -> Callable[[int], TokenDist]:
    """Runtime.forward's rows, over their first `width` columns (None: all), as i -> the
    distribution row i's token is drawn from (sampling.token_dist), each computed when first
    asked for. A runtime with a sampling head (ONNX Runtime on a GPU) reduces the rows where
    they are, so only each row's likeliest columns reach the host; any other runtime, or a
    cut to `width`, reduces the logits here."""
    if width is None and getattr(runtime, "sampling_head", None) is not None:
        return runtime.forward_dists(tokens, sp, last_only=last_only)  # type: ignore[attr-defined]
    return row_dists(runtime.forward(tokens, last_only=last_only)[:, :width], sp)


def keeps_one_graph(runtime: Runtime) -> bool:
    """Whether the runtime replays one CUDA graph per context (`keeps_one_graph`: llama.cpp
    on CUDA): a pass whose shape changed from the last one runs uncaptured, and the next of
    that shape captures the graph again (docs/gpu.md). The calibration then measures what a
    change costs (CostCurve.switch_s), and a draft model forwards one token a pass."""
    return bool(getattr(runtime, "keeps_one_graph", False))


def capture_graphs(runtime: Runtime, shapes: Iterable[tuple[int, int]]) -> int:
    """Where a runtime captures a CUDA graph per step shape (width, rows returned) on first
    use (`capture_graphs`: ONNX Runtime on CUDA), run each shape once now, so that no request
    pays a capture; the cache is left as it was. Returns how many were captured (0 on a
    runtime that captures nothing or keeps one graph, as llama.cpp does)."""
    capture = getattr(runtime, "capture_graphs", None)
    return capture(shapes) if capture is not None else 0


def top_of(logits: np.ndarray, with_prob: bool = True) -> TopRows:
    """TopRows of [rows, V] logits on the host (np.argmax: the first maximum, as ArgMax)."""
    ids = np.argmax(logits, axis=-1)
    if not with_prob:
        return TopRows(ids, None)
    peak = logits.max(axis=-1, keepdims=True)
    return TopRows(ids, (1.0 / np.exp(logits - peak).sum(axis=-1)).astype(np.float32))


def logit_ids(runtime: Runtime) -> np.ndarray | None:
    """The token id of each of runtime's logits columns; None: column j is token j."""
    return getattr(runtime, "logit_ids", None)


def check_logit_ranges(ranges: object, n_vocab: int) -> None:
    """Token-id ranges a draft's output layer keeps: a non-empty list of ascending, disjoint,
    non-empty [start, stop) pairs of ints within the vocabulary (ValueError if not)."""
    if not isinstance(ranges, (list, tuple)) or not ranges:
        raise ValueError(f"logit ranges must be a non-empty list, got {ranges!r:.80}")
    stop = 0
    for r in ranges:
        ints = isinstance(r, (list, tuple)) and len(r) == 2
        ints = ints and all(isinstance(x, int) and not isinstance(x, bool) for x in r)
        if not ints or not stop <= r[0] < r[1]:
            raise ValueError(
                "logit ranges must be ascending, disjoint [start, stop) pairs of token ids, "
                f"got {r!r:.40} after {stop}"
            )
        stop = r[1]
    if stop > n_vocab:
        raise ValueError(f"logit ranges end at {stop}, past the vocabulary of {n_vocab} tokens")


def logit_count(ranges: Sequence[Sequence[int]]) -> int:
    """Token ids in [start, stop) ranges (checked by check_logit_ranges)."""
    return sum(stop - start for start, stop in ranges)


def forward_in_chunks(
    runtime: Runtime,
    tokens: Sequence[int],
    last_only: bool,
    n_batch: int,
    run: Callable[[Sequence[int], int], np.ndarray],
) -> np.ndarray:
    """Runtime.forward in passes of at most n_batch tokens.

    run(chunk, rows) evaluates chunk at n_past and returns the logits of its last `rows`
    tokens ([rows, V]; rows = 0: none wanted, a prefill chunk before the last).
    """
    n = len(tokens)
    if n == 0:
        ids = logit_ids(runtime)
        return np.zeros((0, runtime.n_vocab if ids is None else len(ids)), dtype=np.float32)
    check_room(runtime, n)
    rows = []
    for start in range(0, n, n_batch):
        chunk = tokens[start : start + n_batch]
        last_chunk = start + len(chunk) == n
        if last_only and not last_chunk:
            run(chunk, 0)
        else:
            rows.append(run(chunk, 1 if last_only else len(chunk)))
    return rows[0] if len(rows) == 1 else np.concatenate(rows)


def check_room(runtime: Runtime, n: int) -> None:
    """RuntimeError where n more tokens at n_past would not fit in the context."""
    if runtime.n_past + n > runtime.n_ctx:
        raise RuntimeError(
            f"forward of {n} tokens at position {runtime.n_past} overflows n_ctx={runtime.n_ctx}"
        )


def padding_text(token: int) -> bytes:
    """The text of an output row no tokenizer token has: convert_hf_to_gguf writes it into
    the GGUF token list (type UNUSED), and the ONNX back-end reads it so from tokenizer.json."""
    return b"[PAD%d]" % token


def token_text_hash(token_text: Callable[[int], bytes], n_vocab: int) -> str:
    """sha256 over every token's text in id order, the padding rows at the end left out:
    equal hashes = interchangeable token ids. A family pads its output layer to different
    sizes (Qwen2.5: 151,936 rows up to 3B, 152,064 from 7B, 151,665 real tokens in both), so
    its 0.5B model drafts for its 7B; the ids a model has past the real ones are padding,
    which the other model can neither propose nor need (ModelDrafter.n_ids)."""
    texts = [token_text(t) for t in range(n_vocab)]
    while texts and texts[-1] == padding_text(len(texts) - 1):
        texts.pop()
    digest = hashlib.sha256()
    for text in texts:
        digest.update(text + b"\0")
    return digest.hexdigest()


def check_compatible(
    target: VocabInfo, draft: VocabInfo, target_name: str, draft_name: str
) -> None:
    """Refuse a draft whose token ids do not mean what the target's mean."""
    from edgespec.errors import VocabularyMismatchError

    def refuse(what: str, t: object, d: object) -> None:
        raise VocabularyMismatchError(
            f"draft {draft_name} cannot draft for target {target_name}: {what} differs "
            f"(target {t}, draft {d}); use a draft model from the target's family with the "
            "same tokenizer, or --drafter ngram"
        )

    # output layers may differ in padding rows only (token_text_hash leaves them off)
    if target.vocab_type != draft.vocab_type:
        refuse("vocabulary type", target.vocab_type, draft.vocab_type)
    if target.bos_id != draft.bos_id:
        refuse("BOS token", target.bos_id, draft.bos_id)
    if target.eos_id != draft.eos_id:
        refuse("EOS token", target.eos_id, draft.eos_id)
    if target.token_text_hash != draft.token_text_hash:
        refuse("token text", target.token_text_hash[:12], draft.token_text_hash[:12])
