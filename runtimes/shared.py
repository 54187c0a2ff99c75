"""What the back-ends share beneath the Runtime protocol (edgespec.runtime): passes in
chunks, the context check, the token-text hash two vocabularies are compared by, the
token-id ranges a cut draft keeps, and the hidden states kept by cache position for a head."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

import numpy as np

from edgespec.errors import ModelFileError
from edgespec.plumbing.hugepages import lazy_zeros
from edgespec.runtime import Runtime


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


class HeadMismatchError(ModelFileError):
    """A draft head that does not fit its target (hidden size, layers, vocabulary)."""


def check_head_arch(name: str, arch: object) -> None:
    """Refuse a GGUF that is not an EAGLE-3 head (general.architecture "eagle3")."""
    if arch != "eagle3":
        raise HeadMismatchError(
            f"{name} is a {arch!r} model, not an EAGLE-3 head (general.architecture "
            "'eagle3'); give the head's GGUF"
        )


def check_head_fit(
    name: str,
    target_name: str,
    *,
    hidden: int | str | None,
    n_embd_tgt: int,
    layers: Sequence[int],
    n_layer_tgt: int,
    n_vocab: int,
    n_vocab_tgt: int,
) -> None:
    """Refuse a head that cannot read its target's hidden states or vocabulary: its
    eagle3.target_hidden_size (hidden), its three extract layers, its vocabulary size. The one
    rule llama.cpp's EagleHead and the ONNX head export judge a head by."""
    if hidden is None or int(hidden) != n_embd_tgt:
        raise HeadMismatchError(
            f"{name} reads hidden states of size {hidden} but {target_name} has {n_embd_tgt}; "
            "use the head trained for this target"
        )
    if len(layers) != 3 or not all(0 <= i < n_layer_tgt for i in layers):
        raise HeadMismatchError(
            f"{name} extracts layers {list(layers)} but {target_name} has layers "
            f"0..{n_layer_tgt - 1}; use the head trained for this target"
        )
    if n_vocab != n_vocab_tgt:
        raise HeadMismatchError(
            f"{name} has a vocabulary of {n_vocab} tokens but {target_name} has {n_vocab_tgt}; "
            "use the head trained for this target"
        )


# EAGLE-3.1 (vLLM's fc_norm and norm_output fields; speculators' Eagle3 config): two RMSNorms
# the vendored llama.cpp's eagle3 does not compute. The converter writes their weights as
# metadata (float32 arrays), never as tensors (llama.cpp refuses a tensor it does not load),
# and the head applies them around llama.cpp's passes; the ONNX head puts them in its graphs.
FC_NORM_KEY = "edgespec.eagle3.fc_norm"  # [3 * n_embd_tgt]: fc_norm.0..2, one per feature
NORM_OUTPUT_KEY = "edgespec.eagle3.norm_output"  # [n_embd]: the head's norm (output_norm)


def eagle31_norms(
    name: str, meta: dict, n_embd_tgt: int, n_embd: int
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """A head's EAGLE-3.1 weights from its metadata (meta: key -> list of floats): fc_norm
    [3, n_embd_tgt] and the norm whose output it carries [n_embd] (float32; None where the
    head has none), refused as one line where misshapen or not finite."""
    out: list[np.ndarray | None] = []
    for key, shape in ((FC_NORM_KEY, (3, n_embd_tgt)), (NORM_OUTPUT_KEY, (n_embd,))):
        value = meta.get(key)
        w = None if value is None else np.asarray(value, dtype=np.float32).reshape(-1)
        if w is not None and (w.size != int(np.prod(shape)) or not np.isfinite(w).all()):
            raise ModelFileError(
                f"{name}: {key} holds {w.size} weights, not {' x '.join(map(str, shape))} "
                "finite ones; convert the head again (edgespec export --head FOLDER)"
            )
        out.append(None if w is None else w.reshape(shape))
    return out[0], out[1]


def rms_norm_rows(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """x [..., m] float32 / sqrt(mean(x^2) + eps) * weight [m], as ggml's rms_norm (the sum
    of squares in double, the scale and product in float32)."""
    x64 = x.astype(np.float64)
    scale = (1.0 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + eps)).astype(np.float32)
    return (x * scale) * weight


class KeptFeatures:
    """A head's extract layers' hidden states by cache position, [positions, width] float32:
    every pass writes its rows at the positions they took, so rollback needs nothing (rows
    past n_past are stale, never read, then overwritten)."""

    def __init__(self, positions: int, width: int) -> None:
        self.rows = np.zeros((positions, width), dtype=np.float32)

    def write(self, n_past: int, rows: np.ndarray, column: int = 0) -> None:
        """A pass's rows, the first at cache position n_past (from `column` on: one layer's
        block of a runtime that reads its layers apart)."""
        self.rows[n_past : n_past + len(rows), column : column + rows.shape[1]] = rows


def kept_rows(kept: KeptFeatures | None, start: int, end: int, n_past: int) -> np.ndarray:
    """Runtime.features: positions start..end-1, all inside the cache's n_past, of what a
    runtime keeps (None: nothing yet, no head open)."""
    if kept is None or not 0 <= start <= end <= n_past:
        raise ValueError(f"no hidden states kept for positions {start}..{end - 1}")
    return kept.rows[start:end].copy()


def zeroed_value(ort, shape: tuple[int, ...], dtype: type, on_cuda: bool):
    """A zeroed OrtValue where the model runs (a cache buffer, written in place): on CUDA
    device memory, zeroed once, so there is no NaN garbage beyond n_past, ever."""
    zeros: np.ndarray = lazy_zeros(shape, dtype)
    if not on_cuda:
        return ort.OrtValue.ortvalue_from_numpy(zeros)
    value = ort.OrtValue.ortvalue_from_shape_and_type(shape, dtype, "cuda", 0)
    value.update_inplace(zeros)
    return value


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
        ids = runtime.logit_ids
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
