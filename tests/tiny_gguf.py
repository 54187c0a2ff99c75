"""Tiny float32 Llama-architecture GGUF models written in the test run (no downloads).

A real byte-level BPE vocabulary (256 byte tokens, a few merges, ChatML special tokens) and
random weights, written with the gguf package's writer and tensor names. Target and draft
share the tokenizer; the draft is the target with noise added, so it agrees often, not always.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgespec.runtimes.llama_load_probe import CHATML, add_byte_bpe_tokenizer

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGES = [
    "Ġ t",
    "h e",
    "Ġ a",
    "i n",
    "Ġt he",
    "e r",
    "o n",
    "Ġ s",
    "r e",
    "Ġ w",
    "a t",
    "e n",
    "Ġ (",
    ") :",
    "Ġ =",
    "Ġ Ġ",
    "ĠĠ ĠĠ",
    "d e",
    "Ġ f",
    "Ġ r",
]


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map (byte-level BPE token text)."""
    keep = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    chars = list(keep)
    extra = 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + extra)
            extra += 1
    return dict(zip(keep, (chr(c) for c in chars)))


def vocabulary() -> tuple[list[str], list[int], list[str]]:
    """Token texts, token types (1 normal, 3 control), merges."""
    tokens = sorted(bytes_to_unicode().values(), key=lambda ch: ord(ch))
    for merge in MERGES:
        tokens.append(merge.replace(" ", ""))
    types = [1] * len(tokens) + [3] * len(SPECIALS)
    return tokens + SPECIALS, types, MERGES


@dataclass(frozen=True)
class TinyConfig:
    n_layer: int = 2
    n_embd: int = 64
    n_head: int = 4
    n_head_kv: int = 2
    n_ff: int = 128
    n_ctx: int = 512
    rope_theta: float = 10000.0
    rms_eps: float = 1e-5


def random_weights(cfg: TinyConfig, n_vocab: int, seed: int) -> dict[str, np.ndarray]:
    """GGUF tensor name -> float32 array in PyTorch (out, in) layout."""
    rng = np.random.default_rng(seed)
    d, hd = cfg.n_embd, cfg.n_embd // cfg.n_head

    def w(*shape: int, scale: float = 1.0) -> np.ndarray:
        return (rng.standard_normal(shape) * scale / np.sqrt(shape[-1])).astype(np.float32)

    tensors = {
        "token_embd.weight": w(n_vocab, d, scale=np.sqrt(d)),
        "output_norm.weight": np.ones(d, np.float32),
        "output.weight": w(n_vocab, d, scale=6.0),  # peaked distributions, clear argmaxes
    }
    for i in range(cfg.n_layer):
        tensors |= {
            f"blk.{i}.attn_norm.weight": np.ones(d, np.float32),
            f"blk.{i}.attn_q.weight": w(d, d),
            f"blk.{i}.attn_k.weight": w(cfg.n_head_kv * hd, d),
            f"blk.{i}.attn_v.weight": w(cfg.n_head_kv * hd, d),
            f"blk.{i}.attn_output.weight": w(d, d),
            f"blk.{i}.ffn_norm.weight": np.ones(d, np.float32),
            f"blk.{i}.ffn_gate.weight": w(cfg.n_ff, d),
            f"blk.{i}.ffn_up.weight": w(cfg.n_ff, d),
            f"blk.{i}.ffn_down.weight": w(d, cfg.n_ff),
        }
    return tensors


def write_gguf(
    path: Path,
    cfg: TinyConfig,
    tensors: dict[str, np.ndarray],
    *,
    add_bos: bool = False,
    chat_template: str = CHATML,
    more_metadata=None,  # writer -> None: adds keys (tests of hostile metadata)
    pad_to: int | None = None,
    pre: str = "default",
) -> Path:
    """pad_to: rows past the real tokens, named as convert_hf_to_gguf names them ("[PADi]",
    type UNUSED): tensors then have pad_to vocabulary rows. pre: tokenizer.ggml.pre ("gpt-2"
    for a target exported to ONNX, whose tokenizer is rebuilt from it)."""
    import gguf

    tokens, types, merges = vocabulary()
    if pad_to is not None:
        types = types + [5] * (pad_to - len(tokens))
        tokens = tokens + [f"[PAD{i}]" for i in range(len(tokens), pad_to)]
    writer = gguf.GGUFWriter(str(path), "llama")
    add_hparams(writer, cfg, "edgespec-tiny")
    writer.add_head_count_kv(cfg.n_head_kv)
    add_tokenizer(writer, (tokens, types, merges), pre=pre, add_bos=add_bos,
                  chat_template=chat_template)  # fmt: skip
    if more_metadata is not None:
        more_metadata(writer)
    return write_tensors(writer, tensors, path)


def add_hparams(writer: Any, cfg: TinyConfig, name: str, n_layer: int | None = None) -> None:
    """A tiny model's shape (every float32; n_layer: the block count, default cfg's)."""
    writer.add_name(name)
    writer.add_context_length(cfg.n_ctx)
    writer.add_embedding_length(cfg.n_embd)
    writer.add_block_count(cfg.n_layer if n_layer is None else n_layer)
    writer.add_feed_forward_length(cfg.n_ff)
    writer.add_head_count(cfg.n_head)
    writer.add_rope_dimension_count(cfg.n_embd // cfg.n_head)
    writer.add_rope_freq_base(cfg.rope_theta)
    writer.add_layer_norm_rms_eps(cfg.rms_eps)
    writer.add_file_type(0)  # all float32


def add_tokenizer(
    writer: Any,
    vocab: tuple[list[str], list[int], list[str]],
    *,
    pre: str = "default",
    add_bos: bool = False,
    chat_template: str = CHATML,
) -> None:
    """The tests' tokenizer (vocabulary()'s, or padded): ChatML, no BOS added."""
    add_byte_bpe_tokenizer(writer, *vocab, pre=pre, add_bos=add_bos, chat_template=chat_template)


def write_tensors(writer: Any, tensors: dict[str, np.ndarray], path: Path) -> Path:
    """Add the tensors to a GGUFWriter whose metadata is set, write the file, return path."""
    for name, array in tensors.items():
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def noisy_weights(
    tensors: dict[str, np.ndarray], seed: int, noise: float = 0.3
) -> dict[str, np.ndarray]:
    """Every 2-D weight plus noise relative to its spread: a draft that agrees often, not
    always."""
    rng = np.random.default_rng(seed)
    return {
        name: (a + noise * a.std() * rng.standard_normal(a.shape)).astype(np.float32)
        if a.ndim == 2
        else a
        for name, a in tensors.items()
    }


def build_tiny_pair(folder: Path, seed: int = 0, noise: float = 0.3) -> tuple[Path, Path]:
    """(target.gguf, draft.gguf): the draft is the target's weights plus relative noise."""
    cfg = TinyConfig()
    n_vocab = len(vocabulary()[0])
    target = random_weights(cfg, n_vocab, seed)
    draft = noisy_weights(target, seed + 1, noise)
    folder.mkdir(parents=True, exist_ok=True)
    return (
        write_gguf(folder / "tiny-target.gguf", cfg, target),
        write_gguf(folder / "tiny-draft.gguf", cfg, draft),
    )
