"""Shape-true Hugging Face checkpoints with random weights, for measuring speed without weights.

A verify pass costs what the model's shapes cost, whatever its weights hold, so a checkpoint
with Qwen2.5-Coder's exact architecture and sizes, random weights and the real tokenizer
measures the demo pair (and a 7B target) on a machine that cannot download them. Acceptance
is then meaningless: bench/gpu/measure.py controls it with an oracle drafter instead.

    python bench/gpu/make_models.py --save-tokenizer DIR        # from the demo GGUF (here)
    python bench/gpu/make_models.py --shape qwen2.5-1.5b --tokenizer DIR --out HF_DIR
    python bench/gpu/make_models.py --shape tiny --out HF_DIR   # trained toy tokenizer
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class Shape:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    tied: bool
    vocab: int = 151_936


# Qwen2.5-Coder's published configs, vocabulary rows included: 152,064 in the 7B, 151,936 in
# the smaller ones (the rows past the 151,665 tokens are padding; the 0.5B drafts for the 7B).
SHAPES = {
    "qwen2.5-0.5b": Shape(896, 24, 14, 2, 4864, tied=True),
    "qwen2.5-1.5b": Shape(1536, 28, 12, 2, 8960, tied=True),
    "qwen2.5-7b": Shape(3584, 28, 28, 4, 18944, tied=False, vocab=152_064),
    # a toy for the CPU smoke run: widths that every quantization (Q4_K, INT4 blocks) accepts
    "tiny": Shape(256, 2, 4, 2, 512, tied=False, vocab=0),
    "tiny-draft": Shape(256, 1, 4, 2, 512, tied=False, vocab=0),
}
POOL = 1 << 24  # random values generated once and reused, shifted, for every tensor


def save_tokenizer(gguf_path: Path, folder: Path) -> None:
    """The tokenizer files of a GGUF model (edgespec's own GGUF -> tokenizer.json rebuild)."""
    from edgespec.export.checkpoint import read_checkpoint

    ckpt = read_checkpoint(gguf_path)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tokenizer.json").write_text(ckpt.tokenizer_json)
    (folder / "tokenizer_config.json").write_text(json.dumps(ckpt.tokenizer_config))
    special = {k: ckpt.config.get(k) for k in ("bos_token_id", "eos_token_id")}
    (folder / "special_ids.json").write_text(json.dumps(special))


def random_tensors(shape: Shape, n_vocab: int, seed: int) -> dict[str, np.ndarray]:
    """float16 weights under the HF Qwen2 names, scaled like a trained model's (unit-variance
    activations, logits with a clear top token) so fp16 neither overflows nor ties."""
    rng = np.random.default_rng(seed)
    pool = rng.standard_normal(POOL, dtype=np.float32)
    offset = [0]

    def w(*dims: int, scale: float = 1.0) -> np.ndarray:
        n = int(np.prod(dims))
        offset[0] = (offset[0] + 7919 * 1031) % POOL
        values = np.resize(np.roll(pool, offset[0]), n).reshape(dims)
        return (values * (scale / np.sqrt(dims[-1]))).astype(np.float16)

    def ones(n: int) -> np.ndarray:
        return np.ones(n, np.float16)

    h, hd = shape.hidden, shape.hidden // shape.heads
    tensors = {
        "model.embed_tokens.weight": w(n_vocab, h, scale=np.sqrt(h)),
        "model.norm.weight": ones(h),
    }
    if not shape.tied:
        tensors["lm_head.weight"] = w(n_vocab, h, scale=4.0)
    for i in range(shape.layers):
        p = f"model.layers.{i}."
        tensors |= {
            p + "input_layernorm.weight": ones(h),
            p + "self_attn.q_proj.weight": w(shape.heads * hd, h, scale=2.0),
            p + "self_attn.q_proj.bias": w(shape.heads * hd, scale=0.1),
            p + "self_attn.k_proj.weight": w(shape.kv_heads * hd, h, scale=2.0),
            p + "self_attn.k_proj.bias": w(shape.kv_heads * hd, scale=0.1),
            p + "self_attn.v_proj.weight": w(shape.kv_heads * hd, h),
            p + "self_attn.v_proj.bias": w(shape.kv_heads * hd, scale=0.1),
            p + "self_attn.o_proj.weight": w(h, shape.heads * hd),
            p + "post_attention_layernorm.weight": ones(h),
            p + "mlp.gate_proj.weight": w(shape.intermediate, h),
            p + "mlp.up_proj.weight": w(shape.intermediate, h),
            p + "mlp.down_proj.weight": w(h, shape.intermediate),
        }
    return tensors


def hf_config(shape: Shape, n_vocab: int, special: dict) -> dict:
    return {
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": n_vocab,
        "hidden_size": shape.hidden, "intermediate_size": shape.intermediate,
        "num_hidden_layers": shape.layers, "num_attention_heads": shape.heads,
        "num_key_value_heads": shape.kv_heads, "max_position_embeddings": 32768,
        "rope_theta": 1000000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": shape.tied,
        "use_sliding_window": False, "torch_dtype": "float16", **special,
    }  # fmt: skip


def tokenizer_files(shape_name: str, tokenizer: Path | None, out: Path) -> tuple[int, dict]:
    """Copy (or, for the toy shapes, train) the tokenizer into out; return its size and ids."""
    import shutil

    if tokenizer is None:
        if not shape_name.startswith("tiny"):
            raise SystemExit(f"--shape {shape_name} needs --tokenizer (see --save-tokenizer)")
        sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
        from tiny_hf import make_tokenizer  # the test suite's toy BPE tokenizer

        return make_tokenizer(out), {"eos_token_id": None}
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tokenizer / name, out / name)
    special = json.loads((tokenizer / "special_ids.json").read_text())
    n_tokens = len(json.loads((tokenizer / "tokenizer.json").read_text())["model"]["vocab"])
    return n_tokens, special


def make_checkpoint(shape_name: str, out: Path, tokenizer: Path | None, seed: int) -> None:
    from safetensors.numpy import save_file

    shape = SHAPES[shape_name]
    out.mkdir(parents=True, exist_ok=True)
    n_tokens, special = tokenizer_files(shape_name, tokenizer, out)
    n_vocab = shape.vocab or n_tokens
    if n_vocab < n_tokens:
        raise SystemExit(f"{shape_name}: {n_vocab} embedding rows < {n_tokens} tokens")
    special = {k: v for k, v in special.items() if v is not None}
    tensors = random_tensors(shape, n_vocab, seed)
    save_file(tensors, str(out / "model.safetensors"))
    (out / "config.json").write_text(json.dumps(hf_config(shape, n_vocab, special), indent=1))
    n_params = sum(t.size for t in tensors.values())
    print(f"{out}: {shape_name}, {n_params / 1e9:.2f}B parameters, vocab {n_vocab}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", choices=sorted(SHAPES))
    ap.add_argument("--out", type=Path)
    ap.add_argument("--tokenizer", type=Path, help="folder written by --save-tokenizer")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--save-tokenizer", type=Path, metavar="DIR",
                    help="write the demo draft's tokenizer files to DIR and exit")  # fmt: skip
    ap.add_argument("--gguf", type=Path, help="GGUF to take the tokenizer from (default: demo)")
    args = ap.parse_args()
    if args.save_tokenizer:
        gguf = args.gguf
        if gguf is None:
            from edgespec.app.models import model_path

            gguf = model_path("demo-draft")
        save_tokenizer(Path(gguf), args.save_tokenizer)
        return
    if not args.shape or not args.out:
        ap.error("give --shape and --out (or --save-tokenizer DIR)")
    make_checkpoint(args.shape, args.out, args.tokenizer, args.seed)


if __name__ == "__main__":
    main()
