"""The Runtime protocol: what the core needs from a back-end, and the capabilities a back-end
may add, each declared here with its default.

A runtime owns one model and one KV cache for one sequence. The engine keeps the invariant
that the target's cache never holds the last emitted token (see docs/design.md). Back-ends
(edgespec.runtimes) subclass Runtime, so they inherit the defaults of what they lack; the
core reaches a back-end only through edgespec.backends.open_runtime.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from edgespec.errors import VocabularyMismatchError
from edgespec.sampling import PassRows, SamplingParams, row_dists

# The longest draft any policy asks for. A verify pass forwards the last token and the draft,
# so the widest pass a back-end must serve (and capture as a CUDA graph) is MAX_VERIFY_WIDTH.
K_MAX = 16
MAX_VERIFY_WIDTH = K_MAX + 1


@dataclass(frozen=True)
class VocabInfo:
    """What two runtimes must agree on before one may draft for the other."""

    n_vocab: int
    vocab_type: str  # e.g. "gpt2" (byte-level BPE), "llama" (SentencePiece)
    bos_id: int | None
    eos_id: int | None
    eog_ids: frozenset[int]  # every end-of-generation token (eos, eot, im_end, ...)
    token_text_hash: str  # sha256 over the text of every token, in id order, padding rows off


@dataclass(frozen=True)
class TopRows:
    """What a greedy step needs of each logits row: its likeliest column and, where asked,
    that column's softmax probability (a draft's confidence)."""

    ids: np.ndarray  # [rows] int64: the first column holding the row's maximum
    prob: np.ndarray | None  # [rows] float32, or None where not asked for


class Runtime(Protocol):
    n_vocab: int
    n_ctx: int
    n_past: int  # tokens in the KV cache

    # --- optional capabilities: a back-end that has one overrides its default ------------
    # the token id of each logits column, where the output layer keeps only some ids (a draft
    # exported with --draft-vocab: rows are then [len(logit_ids)] wide; it only drafts)
    logit_ids: np.ndarray | None = None
    # forward_top returns TopRows computed where the rows are, without copying [rows, V] floats
    # to the host's own arrays: on the device (ONNX top outputs, llama.cpp's backend sampler)
    # or in the back-end's logits buffer (llama.cpp)
    top_outputs: bool = False
    # one CUDA graph per context (llama.cpp on CUDA): a pass whose shape changed from the last
    # runs uncaptured and the next of that shape captures again; the calibration prices a
    # change (CostCurve.switch_s) and a draft model forwards one token a pass
    keeps_one_graph: bool = False
    # open_head: a trained draft head (EAGLE-3) that reads this runtime's hidden states at its
    # extract layers, kept for every position the cache holds (llama.cpp)
    hidden_states: bool = False
    # open_mtp: the multi-token-prediction layers the target's own file carries and this
    # back-end can run (llama.cpp, loaded with RuntimeOptions.mtp): 0 where none
    mtp_layers: int = 0
    # why the target's own MTP layers are left unused where it has some ("": none, or used)
    mtp_refused: str = ""
    # why the MTP layers its file declares cannot draft (a tensor missing, a count the
    # back-end refuses): they are then not loaded and mtp_layers is 0; None where none is wrong
    mtp_problem: str | None = None
    # the most tokens one rollback drops cheaply: None any (a KV cache); a recurrent or
    # hybrid model's state rolls back through its snapshots, this many (0: none, so each
    # rejected draft rebuilds the cache from the tokens: speculation cannot pay)
    max_rollback: int | None = None
    # the fewest rows a pass computes: a narrower one is padded (one-token passes take
    # kernels of their own that sum in another order: docs/exactness.md), so a plain step's
    # padding row carries a guess (engine.padding_guess) rather than a dead token
    min_width: int = 1
    # a token's logits are the same bits in a one-token pass and at every position of a
    # verify pass (docs/exactness.md): speculative output is plain decoding's, greedy and
    # seeded; set by whoever chose the kernels (backends.open_runtime)
    batch_invariant: bool = False

    @property
    def dists_on_device(self) -> bool:
        """Whether forward_dists reduces a sampled step's rows where they are, not copying
        [rows, V] floats to the host's own arrays: on the device (a sampling head: ONNX
        Runtime on a GPU; llama.cpp's backend sampler), so only each row's likeliest columns
        reach the host, or in the back-end's logits buffer (llama.cpp)."""
        return False

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

    def forward_top(
        self, tokens: Sequence[int], *, last_only: bool = False, with_prob: bool = False
    ) -> TopRows:
        """forward's rows as TopRows computed where they are, with each row's probability at
        least where with_prob asks; only where top_outputs."""
        raise NotImplementedError(f"{type(self).__name__} has no top outputs")

    def forward_dists(
        self, tokens: Sequence[int], sp: SamplingParams, *, last_only: bool = False
    ) -> PassRows:
        """forward's rows as i -> TokenDist, reduced where they are; only where
        dists_on_device."""
        raise NotImplementedError(f"{type(self).__name__} has no sampling head")

    def capture_graphs(self, shapes: Iterable[tuple[int, int]]) -> int:
        """Where a runtime captures a CUDA graph per step shape (width, rows returned) on first
        use (ONNX Runtime and TensorRT on CUDA), run each shape once now, so that no request
        pays a capture; the cache is left as it was. Returns how many were captured."""
        return 0

    def mark(self) -> None:
        """A position (n_past now) a later rollback may return to cheaply: a runtime whose
        cache cannot be cut back token by token past its snapshots (a recurrent state) keeps
        a copy of the state here, so such a cut re-reads only the tokens after the mark. A
        draft model calls it before its one-token drafting passes. Default: nothing to do."""

    def open_head(self, path: str) -> DraftHead:
        """A trained draft head for this target, fitted to it (hidden size, extract layers,
        vocabulary) or refused; from now on every pass keeps the head's extract layers' hidden
        states (features). Only where hidden_states."""
        raise NotImplementedError(f"{type(self).__name__} cannot run a trained draft head")

    def open_mtp(self) -> DraftHead:
        """The target's own first MTP layer as a draft head (kind "mtp"); from now on every
        pass keeps the target's final hidden state, the MTP layer's features. Only where
        mtp_layers, and not beside an open_head head (one head reads features at a time)."""
        raise NotImplementedError(f"{type(self).__name__} cannot run MTP layers")

    def features(self, start: int, end: int) -> np.ndarray:
        """The open head's features at cache positions start..end-1: an EAGLE-3 head's extract
        layers' hidden states side by side [end - start, n_layers * n_embd], an MTP layer's
        the final hidden state [end - start, n_embd]; float32. Only after open_head or
        open_mtp."""
        raise NotImplementedError(f"{type(self).__name__} keeps no hidden states")


class DraftHead(Protocol):
    """A trained head with its own KV cache of one sequence: at head position P it reads the
    pair (token P + 1, g P), g being the target's features through encode (an EAGLE-3 head's
    fc layer; an MTP layer's identity) or, while drafting, the head's own state at P - 1."""

    kind: str  # the drafter's name: "eagle" (an EAGLE-3 head) or "mtp" (the target's MTP layer)
    n_vocab: int
    n_ctx: int
    n_batch: int  # the most rows one encode or decode takes
    n_past: int

    def encode(self, features: np.ndarray) -> np.ndarray: ...  # [n, F] -> g [n, D] float32

    def decode(self, tokens: Sequence[int], g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Append the pairs at n_past: the last row's logits [n_vocab] and pre-norm state [D]."""
        ...

    def rollback(self, n_past: int) -> None: ...

    def reset(self) -> None: ...

    def close(self) -> None:
        """Free the head's model and context now (before its target's)."""
        ...


def forward_top(
    runtime: Runtime,
    tokens: Sequence[int],
    *,
    last_only: bool = False,
    with_prob: bool = False,
    width: int | None = None,
) -> TopRows:
    """Runtime.forward's rows reduced to TopRows, over their first `width` columns (None:
    all): where the rows are if the runtime has top_outputs, so [rows, V] floats are not
    copied (from the device: only [rows] ids and probabilities reach the host); else, or cut
    to `width`, here."""
    if width is None and runtime.top_outputs:
        return runtime.forward_top(tokens, last_only=last_only, with_prob=with_prob)
    return top_of(runtime.forward(tokens, last_only=last_only)[:, :width], with_prob)


def forward_dists(
    runtime: Runtime,
    tokens: Sequence[int],
    sp: SamplingParams,
    *,
    last_only: bool = False,
    width: int | None = None,
) -> PassRows:
    """Runtime.forward's rows, over their first `width` columns (None: all), as i -> the
    distribution row i's token is drawn from (sampling.token_dist), each computed when first
    asked for: where the rows are if the runtime has dists_on_device, else, or cut to `width`,
    from the logits here."""
    if width is None and runtime.dists_on_device:
        return runtime.forward_dists(tokens, sp, last_only=last_only)
    return row_dists(runtime.forward(tokens, last_only=last_only)[:, :width], sp)


def top_of(logits: np.ndarray, with_prob: bool = True) -> TopRows:
    """TopRows of [rows, V] logits on the host (np.argmax: the first maximum, as ArgMax)."""
    ids = np.argmax(logits, axis=-1)
    if not with_prob:
        return TopRows(ids, None)
    peak = logits.max(axis=-1, keepdims=True)
    e = np.subtract(logits, peak, out=scratch(logits.shape, logits.dtype))
    np.exp(e, out=e)
    return TopRows(ids, (1.0 / e.sum(axis=-1)).astype(np.float32))


class Scratch(threading.local):
    """Arrays top_of reuses, per thread: (shape, dtype) -> one array (a few kept)."""

    def __init__(self) -> None:
        self.arrays: dict[tuple[tuple[int, ...], np.dtype], np.ndarray] = {}


SCRATCH = Scratch()


def scratch(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """An array of this shape and dtype, the same one at every call from this thread. A
    fresh array a vocabulary wide is a new mapping whose pages fault on first touch: a
    draft token's confidence (exp and sum over 152k logits) took 4x as long in fresh arrays
    as in one reused (docs/decisions.md)."""
    held, key = SCRATCH.arrays, (shape, np.dtype(dtype))
    if key not in held:
        if len(held) >= 8:
            held.clear()
        held[key] = np.empty(shape, dtype=dtype)
    return held[key]


def check_compatible(
    target: VocabInfo, draft: VocabInfo, target_name: str, draft_name: str
) -> None:
    """Refuse a draft whose token ids do not mean what the target's mean."""

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
