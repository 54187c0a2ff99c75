"""Tiny Hugging Face checkpoint folders (Llama, Mistral, Qwen2, Qwen3, Gemma 3, Phi-3 and
Phi-4 mini) made in the test run.

A real byte-level BPE tokenizer trained with the `tokenizers` library on a small corpus, and
random float32 weights under the HF tensor names, written as model.safetensors.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from edgespec.runtimes.llama_load_probe import CHATML

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CORPUS = [
    "def add(a, b):\n    return a + b\n",
    "for item in items:\n    total += item.price * item.quantity\n",
    "The quick brown fox jumps over the lazy dog. The dog sleeps.",
    "class Stack:\n    def push(self, value):\n        self.items.append(value)\n",
    "Speculative decoding drafts tokens and the target model verifies them.",
    "import numpy as np\nx = np.zeros((3, 4), dtype=np.float32)\n",
] * 20
HF_ARCH = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM",
           "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
           "gemma3": "Gemma3ForCausalLM", "phi3": "Phi3ForCausalLM",
           "phi4mini": "Phi3ForCausalLM"}  # fmt: skip
# Qwen3's config.json fields beyond Llama's, as Qwen/Qwen3-0.6B publishes them (head_dim is
# not hidden_size / heads there: 128 against 1024 / 16)
QWEN3_FIELDS = {"attention_bias": False, "attention_dropout": 0.0, "hidden_act": "silu",
                "max_window_layers": 28, "rope_scaling": None, "sliding_window": None,
                "use_sliding_window": False, "tie_word_embeddings": True,
                "torch_dtype": "bfloat16"}  # fmt: skip
# google/gemma-3-270m's config.json fields beyond Llama's (its window cut to 4 tokens and its
# pattern to llama.cpp's: five sliding layers, then a global one)
GEMMA3_FIELDS = {"_sliding_window_pattern": 6, "attention_bias": False,
                 "attn_logit_softcapping": None, "final_logit_softcapping": None,
                 "hidden_activation": "gelu_pytorch_tanh", "model_type": "gemma3_text",
                 "rope_local_base_freq": 10000.0,
                 "rope_scaling": None, "rope_theta": 1000000.0, "sliding_window": 4,
                 "use_bidirectional_attention": False, "torch_dtype": "bfloat16",
                 "layer_types": ["sliding_attention"] * 5 + ["full_attention"]}  # fmt: skip
# microsoft/Phi-3-mini-4k-instruct's config.json fields beyond Llama's
PHI3_FIELDS = {"attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 1,
               "embd_pdrop": 0.0, "hidden_act": "silu", "initializer_range": 0.02,
               "model_type": "phi3", "original_max_position_embeddings": 4096,
               "pad_token_id": 32000, "resid_pdrop": 0.0, "rms_norm_eps": 1e-05,
               "max_position_embeddings": 4096, "rope_scaling": None, "sliding_window": 2047,
               "torch_dtype": "bfloat16",
               "use_cache": True}  # fmt: skip
# microsoft/Phi-4-mini-instruct's (longrope's factors one per rotated pair of a head of 64, 48
# of them turned; its contexts cut, their ratio, 2 here, kept above 1: attention_factor 1.06)
PHI4_MINI_FIELDS = {"attention_bias": False, "attention_dropout": 0.0, "embd_pdrop": 0.0,
                    "full_attn_mod": 1, "hidden_act": "silu", "initializer_range": 0.02,
                    "interpolate_factor": 1, "lm_head_bias": False, "mlp_bias": False,
                    "model_type": "phi3", "original_max_position_embeddings": 256,
                    "partial_rotary_factor": 0.75, "resid_pdrop": 0.0, "rms_norm_eps": 1e-05,
                    "rope_scaling": {"long_factor": [round(1.2**i, 4) for i in range(24)],
                                     "short_factor": [round(1.05**i, 4) for i in range(24)],
                                     "type": "longrope"},
                    "sliding_window": 262144, "tie_word_embeddings": True,
                    "torch_dtype": "bfloat16", "use_cache": True}  # fmt: skip
WIDE_HEADS = {"qwen3": 2, "gemma3": 2}  # head_dim / (hidden_size / heads), as published


def make_tokenizer(folder: Path, vocab_size: int = 384) -> int:
    """Train and save tokenizer.json + tokenizer_config.json; return the vocabulary size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS, trainer)
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    config = {
        "eos_token": "<|im_end|>",
        "bos_token": None,
        "add_bos_token": False,
        "chat_template": CHATML,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return tok.get_vocab_size()


def make_tiny_hf(
    folder: Path,
    arch: str = "llama",
    *,
    seed: int = 0,
    n_layer: int = 2,
    n_embd: int = 64,
    n_head: int = 4,
    n_head_kv: int = 2,
    n_ff: int = 96,
    rope_theta: float = 10000.0,
) -> Path:
    """A checkpoint folder: config.json, model.safetensors, tokenizer files."""
    from safetensors.numpy import save_file

    n_vocab = make_tokenizer(folder)
    rng = np.random.default_rng(seed)
    hd = WIDE_HEADS.get(arch, 1) * n_embd // n_head

    def w(*shape: int, scale: float = 1.0) -> np.ndarray:
        return (rng.standard_normal(shape) * scale / np.sqrt(shape[-1])).astype(np.float32)

    tensors = {
        "model.embed_tokens.weight": w(n_vocab, n_embd, scale=np.sqrt(n_embd)),
        "model.norm.weight": (1 + 0.1 * rng.standard_normal(n_embd)).astype(np.float32),
        "lm_head.weight": w(n_vocab, n_embd, scale=4.0),
    }
    if arch in WIDE_HEADS or arch == "phi4mini":  # tied: the output layer is the embedding
        del tensors["lm_head.weight"]
    offset = 0.0 if arch == "gemma3" else 1.0  # Gemma's norms scale by 1 + w

    def norm(n: int) -> np.ndarray:
        return (offset + 0.2 * rng.standard_normal(n)).astype(np.float32)

    for i in range(n_layer):
        p = f"model.layers.{i}."
        if arch in WIDE_HEADS:
            tensors[p + "self_attn.q_norm.weight"] = norm(hd)
            tensors[p + "self_attn.k_norm.weight"] = norm(hd)
        if arch == "gemma3":
            for name in ("pre_feedforward_layernorm", "post_feedforward_layernorm"):
                tensors[p + name + ".weight"] = norm(n_embd)
        tensors |= {
            p + "input_layernorm.weight": (1 + 0.1 * rng.standard_normal(n_embd)).astype(
                np.float32
            ),
            p + "self_attn.q_proj.weight": w(n_head * hd, n_embd, scale=2.0),
            p + "self_attn.k_proj.weight": w(n_head_kv * hd, n_embd, scale=2.0),
            p + "self_attn.v_proj.weight": w(n_head_kv * hd, n_embd),
            p + "self_attn.o_proj.weight": w(n_embd, n_head * hd),
            p + "post_attention_layernorm.weight": np.ones(n_embd, np.float32),
            p + "mlp.gate_proj.weight": w(n_ff, n_embd),
            p + "mlp.up_proj.weight": w(n_ff, n_embd),
            p + "mlp.down_proj.weight": w(n_embd, n_ff),
        }
        if arch == "qwen2":  # Qwen2 has biases on q, k and v
            for name, rows in (("q", n_head * hd), ("k", n_head_kv * hd), ("v", n_head_kv * hd)):
                tensors[p + f"self_attn.{name}_proj.bias"] = (
                    0.1 * rng.standard_normal(rows)
                ).astype(np.float32)
    if arch.startswith("phi"):
        tensors = fuse(tensors, n_layer)
    save_file(tensors, str(folder / "model.safetensors"))
    config = {
        "architectures": [HF_ARCH[arch]], "model_type": arch, "vocab_size": n_vocab,
        "hidden_size": n_embd, "intermediate_size": n_ff, "num_hidden_layers": n_layer,
        "num_attention_heads": n_head, "num_key_value_heads": n_head_kv,
        "max_position_embeddings": 512, "rope_theta": rope_theta, "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False, "eos_token_id": 2,
    }  # fmt: skip
    if arch == "qwen3":
        config |= QWEN3_FIELDS | {"head_dim": hd}
    if arch == "gemma3":
        config |= GEMMA3_FIELDS | {"head_dim": hd, "query_pre_attn_scalar": hd}
    if arch.startswith("phi"):
        config |= PHI4_MINI_FIELDS if arch == "phi4mini" else PHI3_FIELDS
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    return folder


def fuse(tensors: dict[str, np.ndarray], n_layer: int) -> dict[str, np.ndarray]:
    """Phi-3's layout: q, k, v as one qkv_proj, gate and up as one gate_up_proj (gate first)."""
    for i in range(n_layer):
        p = f"model.layers.{i}."
        for fused, parts in (("self_attn.qkv_proj", ["self_attn.q_proj", "self_attn.k_proj",
                                                     "self_attn.v_proj"]),
                             ("mlp.gate_up_proj", ["mlp.gate_proj", "mlp.up_proj"])):  # fmt: skip
            rows = [tensors.pop(p + part + ".weight") for part in parts]
            tensors[p + fused + ".weight"] = np.concatenate(rows)
    return tensors


def noisy_copy(hf_dir: Path, folder: Path, *, seed: int = 7, noise: float = 0.3) -> Path:
    """The checkpoint with noise on every 2-D weight: a draft that agrees often, not always."""
    import shutil

    from safetensors.numpy import load_file, save_file

    shutil.copytree(hf_dir, folder)
    rng = np.random.default_rng(seed)
    tensors = load_file(hf_dir / "model.safetensors")
    for name, w in tensors.items():
        if w.ndim == 2:
            tensors[name] = (w + noise * w.std() * rng.standard_normal(w.shape)).astype(np.float32)
    save_file(tensors, str(folder / "model.safetensors"))
    return folder
