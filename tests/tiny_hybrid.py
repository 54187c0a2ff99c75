"""A tiny random LFM2-architecture ("lfm2") target, written in the test run (no downloads): a
hybrid of short-convolution layers (recurrent state: llama.cpp cannot cut it back token by
token, only through its state snapshots, n_rs_seq) and attention layers. Tokenizer and
trunk weights from tests/tiny_gguf."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.tiny_gguf import CHATML, TinyConfig, random_weights, vocabulary, write_tensors

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
    writer.add_name("edgespec-tiny-hybrid")
    writer.add_context_length(cfg.n_ctx)
    writer.add_embedding_length(cfg.n_embd)
    writer.add_block_count(cfg.n_layer)
    writer.add_feed_forward_length(cfg.n_ff)
    writer.add_head_count(cfg.n_head)
    # a layer without KV heads is a convolution layer
    writer.add_head_count_kv([0 if i in CONV_LAYERS else cfg.n_head_kv for i in range(cfg.n_layer)])
    writer.add_rope_dimension_count(cfg.n_embd // cfg.n_head)
    writer.add_rope_freq_base(cfg.rope_theta)
    writer.add_layer_norm_rms_eps(cfg.rms_eps)
    writer.add_uint32("lfm2.shortconv.l_cache", L_CACHE)
    writer.add_file_type(0)  # all float32
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(tokens.index("<|endoftext|>"))
    writer.add_eos_token_id(tokens.index("<|im_end|>"))
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHATML)
    return write_tensors(writer, hybrid_weights(cfg, len(tokens), seed), path)


# A tiny random Qwen3.5 ("qwen35"): gated-delta-net layers (recurrent) with a full-attention
# layer every fourth, and one MTP layer (a full-attention block behind nextn.*), as Qwen3.5's
# dense models carry. Seed 1: its greedy decoding of the tests' prompt runs 40 tokens.
QWEN35_LAYERS = 4
QWEN35_SEED = 1


def qwen35_weights(seed: int, n_vocab: int, mtp_layers: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    d, n_ff, n_head, n_kv, hd = 64, 128, 4, 2, 16
    # gated delta net: 2 key heads, 4 value heads of 16, a 4-wide convolution
    key_dim, value_dim, n_v_heads, d_conv = 2 * 16, 4 * 16, 4, 4
    conv_dim = 2 * key_dim + value_dim

    def w(*shape: int, scale: float = 1.0) -> np.ndarray:
        return (rng.standard_normal(shape) * scale / np.sqrt(shape[-1])).astype(np.float32)

    def ones(n: int) -> np.ndarray:
        return np.ones(n, np.float32)

    def block(i: int) -> dict[str, np.ndarray]:
        return {
            f"blk.{i}.attn_norm.weight": ones(d),
            f"blk.{i}.post_attention_norm.weight": ones(d),
            f"blk.{i}.ffn_gate.weight": w(n_ff, d),
            f"blk.{i}.ffn_up.weight": w(n_ff, d),
            f"blk.{i}.ffn_down.weight": w(d, n_ff),
        }

    def attention(i: int) -> dict[str, np.ndarray]:
        return {
            f"blk.{i}.attn_q.weight": w(2 * n_head * hd, d),  # the query and its gate
            f"blk.{i}.attn_k.weight": w(n_kv * hd, d),
            f"blk.{i}.attn_v.weight": w(n_kv * hd, d),
            f"blk.{i}.attn_output.weight": w(d, n_head * hd),
            f"blk.{i}.attn_q_norm.weight": ones(hd),
            f"blk.{i}.attn_k_norm.weight": ones(hd),
        }

    def delta_net(i: int) -> dict[str, np.ndarray]:
        return {
            f"blk.{i}.attn_qkv.weight": w(conv_dim, d),
            f"blk.{i}.attn_gate.weight": w(value_dim, d),
            f"blk.{i}.ssm_conv1d.weight": w(conv_dim, d_conv),
            f"blk.{i}.ssm_dt.bias": np.zeros(n_v_heads, np.float32),
            f"blk.{i}.ssm_a": -ones(n_v_heads),
            f"blk.{i}.ssm_beta.weight": w(n_v_heads, d),
            f"blk.{i}.ssm_alpha.weight": w(n_v_heads, d),
            f"blk.{i}.ssm_norm.weight": ones(16),
            f"blk.{i}.ssm_out.weight": w(d, value_dim),
        }

    tensors = {
        "token_embd.weight": w(n_vocab, d, scale=np.sqrt(d)),
        "output_norm.weight": ones(d),
        "output.weight": w(n_vocab, d, scale=6.0),
    }
    for i in range(QWEN35_LAYERS):
        tensors |= block(i) | (attention(i) if (i + 1) % 4 == 0 else delta_net(i))
    for i in range(QWEN35_LAYERS, QWEN35_LAYERS + mtp_layers):
        tensors |= (
            block(i)
            | attention(i)
            | {
                f"blk.{i}.nextn.eh_proj.weight": w(d, 2 * d),
                f"blk.{i}.nextn.enorm.weight": ones(d),
                f"blk.{i}.nextn.hnorm.weight": ones(d),
            }
        )
    return tensors


def write_qwen35_target(path: Path, mtp_layers: int = 1) -> Path:
    import gguf

    tokens, types, merges = vocabulary()
    arch = "qwen35"
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name("edgespec-tiny-qwen35")
    writer.add_context_length(512)
    writer.add_embedding_length(64)
    writer.add_block_count(QWEN35_LAYERS + mtp_layers)
    writer.add_uint32(f"{arch}.nextn_predict_layers", mtp_layers)
    writer.add_feed_forward_length(128)
    writer.add_head_count(4)
    writer.add_head_count_kv(2)
    writer.add_key_length(16)
    writer.add_value_length(16)
    writer.add_rope_dimension_count(16)
    writer.add_array(f"{arch}.rope.dimension_sections", [4, 2, 2, 0])
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_uint32(f"{arch}.ssm.conv_kernel", 4)
    writer.add_uint32(f"{arch}.ssm.inner_size", 64)
    writer.add_uint32(f"{arch}.ssm.state_size", 16)
    writer.add_uint32(f"{arch}.ssm.time_step_rank", 4)
    writer.add_uint32(f"{arch}.ssm.group_count", 2)
    writer.add_uint32(f"{arch}.full_attention_interval", 4)
    writer.add_file_type(0)  # all float32
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(tokens.index("<|endoftext|>"))
    writer.add_eos_token_id(tokens.index("<|im_end|>"))
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHATML)
    return write_tensors(writer, qwen35_weights(QWEN35_SEED, len(tokens), mtp_layers), path)
