"""A tiny random LFM2-architecture ("lfm2") target, written in the test run (no downloads): a
hybrid of short-convolution layers (recurrent state: llama.cpp cannot cut it back token by
token, only through its state snapshots, n_rs_seq) and attention layers. Tokenizer and
trunk weights from tests/tiny_gguf."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from tests.tiny_gguf import (
    TinyConfig,
    add_hparams,
    add_tokenizer,
    random_weights,
    vocabulary,
    write_tensors,
)

CFG = TinyConfig(n_layer=4)
CONV_LAYERS = (0, 2)  # the rest attend
L_CACHE = 3  # the convolution's width (two tokens of state)


def hybrid_weights(cfg: TinyConfig, n_vocab: int, seed: int) -> dict[str, np.ndarray]:
    base = random_weights(cfg, n_vocab, seed)
    rng = np.random.default_rng(seed + 5)
    d, hd = cfg.n_embd, cfg.n_embd // cfg.n_head

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)

    tensors = {
        "token_embd.weight": base["token_embd.weight"],
        "token_embd_norm.weight": base["output_norm.weight"],  # llama.cpp's name for it
        "output.weight": base["output.weight"],
    }
    for i in range(cfg.n_layer):
        for name in ("attn_norm", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"):
            tensors[f"blk.{i}.{name}.weight"] = base[f"blk.{i}.{name}.weight"]
        if i in CONV_LAYERS:
            tensors |= {
                f"blk.{i}.shortconv.conv.weight": w(d, L_CACHE),
                f"blk.{i}.shortconv.in_proj.weight": w(3 * d, d),
                f"blk.{i}.shortconv.out_proj.weight": w(d, d),
            }
        else:
            for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
                tensors[f"blk.{i}.{name}.weight"] = base[f"blk.{i}.{name}.weight"]
            tensors[f"blk.{i}.attn_q_norm.weight"] = np.ones(hd, np.float32)
            tensors[f"blk.{i}.attn_k_norm.weight"] = np.ones(hd, np.float32)
    return tensors


def write_hybrid_target(path: Path, cfg: TinyConfig = CFG, seed: int = 0) -> Path:
    import gguf

    tokens, types, merges = vocabulary()
    writer = gguf.GGUFWriter(str(path), "lfm2")
    add_hparams(writer, cfg, "edgespec-tiny-hybrid")
    # a layer without KV heads is a convolution layer
    writer.add_head_count_kv([0 if i in CONV_LAYERS else cfg.n_head_kv for i in range(cfg.n_layer)])
    writer.add_uint32("lfm2.shortconv.l_cache", L_CACHE)
    add_tokenizer(writer, (tokens, types, merges))
    return write_tensors(writer, hybrid_weights(cfg, len(tokens), seed), path)


# A tiny random Qwen3.5 ("qwen35", bench/hybrid_gguf.py's "tiny" shape): gated-delta-net
# layers with a full-attention layer every fourth, and one MTP layer, as Qwen3.5's dense models
# carry. QWEN35_SEED: its greedy decoding of the tests' prompt runs 40 tokens.
QWEN35_SEED = 1


def qwen35_writer():
    from tests.bench_scripts import load_bench_script

    return load_bench_script("hybrid_gguf.py", "bench_hybrid_gguf")


def qwen35_weights(mtp_layers: int = 1) -> dict[str, np.ndarray]:
    bench = qwen35_writer()
    shape = replace(bench.SHAPES["tiny"], mtp_layers=mtp_layers)
    return dict(bench.tensors(shape, len(vocabulary()[0]), QWEN35_SEED))


def write_qwen35_target(path: Path, mtp_layers: int = 1, seed: int = QWEN35_SEED) -> Path:
    bench = qwen35_writer()
    shape = replace(bench.SHAPES["tiny"], mtp_layers=mtp_layers)
    return bench.write_qwen35(path, shape, vocabulary=vocabulary(), seed=seed)
