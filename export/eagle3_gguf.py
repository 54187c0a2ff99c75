"""The EAGLE-3 head's GGUF layout as llama.cpp reads it (src/models/eagle3.cpp at the vendored
commit): the one owner of what an eagle3 GGUF holds, for every writer of one (tests/tiny_eagle.py's
tiny heads, bench/gpu/make_gguf.py's shape-true random heads). runtimes/llama_heads.py reads it.

general.architecture "eagle3"; metadata eagle3.target_layers (3 ids: the target layers whose
inputs the head reads) and eagle3.target_hidden_size, beside the one decoder layer's
hyperparameters and the target's tokenizer. Tensors, in PyTorch (out, in) layout:

    fc.weight                      [n_embd, 3 * n_embd_tgt]   the target's features -> g
    blk.0.attn_norm.weight         [n_embd]                   on the token embedding
    blk.0.attn_norm_2.weight       [n_embd]                   on g
    blk.0.attn_q/k/v.weight        [heads * head_dim, 2 * n_embd]  over their concatenation
    blk.0.attn_output.weight       [n_embd, n_head * head_dim]
    blk.0.ffn_norm/gate/up/down    as a Llama layer's
    output_norm.weight, output.weight [n_draft_vocab, n_embd]
    d2t                            int64 [n_draft_vocab]: each output row's target token id,
                                   only where the draft vocabulary is smaller

EAGLE-3.1's weights (fc_norm, the carried state's norm) are metadata arrays, not tensors
(runtimes/shared.py FC_NORM_KEY): llama.cpp refuses a tensor it does not load.

No token_embd: the decoder borrows the target's (llama_context_params.ctx_other), so n_embd is
the target's hidden size in every published head.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

ARCH = "eagle3"
FILE_TYPES = {np.dtype(np.float32): 0, np.dtype(np.float16): 1}  # llama_ftype of the matrices


@dataclass(frozen=True)
class HeadShape:
    n_embd: int  # the head's width (the target's hidden size: it adds the target's embeddings)
    n_embd_tgt: int  # the target's hidden size: fc reads 3 * n_embd_tgt
    n_head: int
    n_head_kv: int
    n_ff: int
    n_vocab: int  # the target's vocabulary (its tokenizer's rows)
    layers: tuple[int, int, int]  # eagle3.target_layers
    n_draft_vocab: int | None = None  # output rows where fewer than n_vocab (d2t maps them)

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @property
    def n_out(self) -> int:
        return self.n_vocab if self.n_draft_vocab is None else self.n_draft_vocab


def default_layers(n_layer_tgt: int) -> tuple[int, int, int]:
    """llama.cpp's converter's choice where a checkpoint names none: (2, n // 2, n - 3); a
    target of fewer than 6 layers gets (0, n // 2, n - 1)."""
    if n_layer_tgt >= 6:
        return 2, n_layer_tgt // 2, n_layer_tgt - 3
    return 0, n_layer_tgt // 2, n_layer_tgt - 1


def tensor_plan(s: HeadShape) -> list[tuple[str, tuple[int, ...], float]]:
    """(GGUF name, PyTorch shape, std) of every float tensor; std 0 marks a norm (ones). The
    stds give a random head unit-variance activations and a clear top logit (the output layer's
    logits have sd 6), so f16 neither overflows nor ties."""
    qk, kv, d = s.n_head * s.head_dim, s.n_head_kv * s.head_dim, s.n_embd

    def mat(name: str, rows: int, cols: int, scale: float = 1.0):
        return (name, (rows, cols), scale / float(np.sqrt(cols)))

    return [
        mat("fc.weight", d, 3 * s.n_embd_tgt),
        ("blk.0.attn_norm.weight", (d,), 0.0),
        ("blk.0.attn_norm_2.weight", (d,), 0.0),
        mat("blk.0.attn_q.weight", qk, 2 * d),
        mat("blk.0.attn_k.weight", kv, 2 * d),
        mat("blk.0.attn_v.weight", kv, 2 * d),
        mat("blk.0.attn_output.weight", d, qk),
        ("blk.0.ffn_norm.weight", (d,), 0.0),
        mat("blk.0.ffn_gate.weight", s.n_ff, d),
        mat("blk.0.ffn_up.weight", s.n_ff, d),
        mat("blk.0.ffn_down.weight", d, s.n_ff),
        ("output_norm.weight", (d,), 0.0),
        mat("output.weight", s.n_out, d, scale=6.0),
    ]


def draft_to_target(s: HeadShape) -> np.ndarray | None:
    """d2t for a random head: output row i drafts target token i. None: no d2t."""
    return None if s.n_draft_vocab is None else np.arange(s.n_draft_vocab, dtype=np.int64)


def write_hparams(
    writer: Any,
    s: HeadShape,
    *,
    n_ctx: int,
    rope_theta: float,
    rms_eps: float,
    dtype: np.dtype,
    name: str,
) -> None:
    """The head's metadata, the tokenizer's excepted, on a gguf.GGUFWriter made for ARCH (or,
    to test refusals, another architecture: the keys follow writer.arch). dtype: the matrices'."""
    writer.add_name(name)
    writer.add_context_length(n_ctx)
    writer.add_embedding_length(s.n_embd)
    writer.add_block_count(1)
    writer.add_feed_forward_length(s.n_ff)
    writer.add_head_count(s.n_head)
    writer.add_head_count_kv(s.n_head_kv)
    writer.add_rope_dimension_count(s.head_dim)
    writer.add_rope_freq_base(rope_theta)
    writer.add_layer_norm_rms_eps(rms_eps)
    writer.add_file_type(FILE_TYPES[np.dtype(dtype)])
    writer.add_array(f"{writer.arch}.target_layers", list(s.layers))
    writer.add_uint32(f"{writer.arch}.target_hidden_size", s.n_embd_tgt)


# Other llama.cpp builds spell two names differently from the vendored one, which decides
# (its libllama reads "%s.target_layers" and "blk.%d.attn_norm_2"): a head converted by such a
# build is re-spelled before it is opened, never refused for a spelling.
OTHER_KEYS = {f"{ARCH}.extract_layers": f"{ARCH}.target_layers"}
OTHER_TENSORS = {"blk.0.hidden_norm.weight": "blk.0.attn_norm_2.weight"}


def respell(path: Any, out: Any, keys: dict[str, str], tensors: dict[str, str]) -> Any:
    """A copy of the GGUF at path with metadata keys and tensors renamed; path itself where
    it has none of those names."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    if not (set(keys) & set(reader.fields) or set(tensors) & {t.name for t in reader.tensors}):
        return path
    writer = gguf.GGUFWriter(str(out), str(reader.fields["general.architecture"].contents()))
    array = gguf.GGUFValueType.ARRAY
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        kind = field.types[0]
        writer.add_key_value(keys.get(key, key), field.contents(), kind,
                             sub_type=field.types[-1] if kind == array else None)  # fmt: skip
    for t in reader.tensors:
        writer.add_tensor(tensors.get(t.name, t.name), np.array(t.data), raw_dtype=t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


def vendored_spelling(path: Any, work: Any) -> Any:
    """The head at path as the vendored llama.cpp spells it (OTHER_KEYS, OTHER_TENSORS)."""
    from pathlib import Path

    return respell(path, Path(work) / f"respelled.{Path(path).name}", OTHER_KEYS, OTHER_TENSORS)
