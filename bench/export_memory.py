"""Peak resident memory of `edgespec export --format onnx` on a 7B-shaped checkpoint.

Writes an HF folder with Qwen2.5-7B's shapes (hidden 3584, 28 heads / 4 KV heads,
intermediate 18944, vocab 152064, untied lm_head) and random fp16 weights, a shard per few
layers, each tensor generated and written a block of rows at a time (the writer itself stays
small); then runs the export under `/usr/bin/time -v` and prints its maximum resident set
size. --layers N keeps every width and N layers: the export holds a few blocks of one tensor
at a time, so its peak does not depend on the layer count (the vocabulary-sized embedding
and lm_head are the largest tensors, and they are here whatever N is).

    python bench/export_memory.py --layers 4 [--quant int4] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

QWEN25_7B = {
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 152064,
    "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
    "num_attention_heads": 28, "num_key_value_heads": 4, "max_position_embeddings": 32768,
    "rope_theta": 1000000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
    "use_sliding_window": False, "eos_token_id": 258,
}  # fmt: skip
BLOCK_ROWS = 4096
LAYERS_PER_SHARD = 4


def tensor_shapes(config: dict, layers: range) -> dict[str, tuple[int, ...]]:
    d, ff = config["hidden_size"], config["intermediate_size"]
    hd = d // config["num_attention_heads"]
    kv = config["num_key_value_heads"] * hd
    shapes: dict[str, tuple[int, ...]] = {}
    for i in layers:
        p = f"model.layers.{i}."
        shapes |= {
            p + "input_layernorm.weight": (d,), p + "post_attention_layernorm.weight": (d,),
            p + "self_attn.q_proj.weight": (d, d), p + "self_attn.q_proj.bias": (d,),
            p + "self_attn.k_proj.weight": (kv, d), p + "self_attn.k_proj.bias": (kv,),
            p + "self_attn.v_proj.weight": (kv, d), p + "self_attn.v_proj.bias": (kv,),
            p + "self_attn.o_proj.weight": (d, d),
            p + "mlp.gate_proj.weight": (ff, d), p + "mlp.up_proj.weight": (ff, d),
            p + "mlp.down_proj.weight": (d, ff),
        }  # fmt: skip
    return shapes


def write_shard(path: Path, shapes: dict[str, tuple[int, ...]], rng: np.random.Generator) -> None:
    """A safetensors file of random fp16 tensors, written a block of rows at a time."""
    header, offset = {}, 0
    for name, shape in shapes.items():
        nbytes = 2 * int(np.prod(shape))
        span = [offset, offset + nbytes]
        header[name] = {"dtype": "F16", "shape": list(shape), "data_offsets": span}
        offset += nbytes
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with path.open("wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        for name, shape in shapes.items():
            scale = 1.0 if name.endswith("norm.weight") else 1 / np.sqrt(shape[-1])
            for start in range(0, shape[0], BLOCK_ROWS):
                rows = (min(start + BLOCK_ROWS, shape[0]) - start, *shape[1:])
                block = rng.standard_normal(rows, dtype=np.float32) * scale
                if name.endswith("norm.weight"):
                    block += 1
                block.astype(np.float16).tofile(f)


def write_tokenizer(folder: Path) -> None:
    """Byte-level BPE with the 256 byte tokens and two specials (no merges): enough for the
    export, which reads the tokenizer but never trains or runs it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tok = Tokenizer(models.BPE({c: i for i, c in enumerate(alphabet)}, []))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<|endoftext|>", "<|im_end|>"])
    tok.save(str(folder / "tokenizer.json"))
    config = {"eos_token": "<|im_end|>", "bos_token": None, "add_bos_token": False}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))


def make_checkpoint(folder: Path, n_layers: int, seed: int = 0) -> Path:
    config = QWEN25_7B | {"num_hidden_layers": n_layers}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    write_tokenizer(folder)
    rng = np.random.default_rng(seed)
    d, v = config["hidden_size"], config["vocab_size"]
    top = {"model.embed_tokens.weight": (v, d), "model.norm.weight": (d,), "lm_head.weight": (v, d)}
    write_shard(folder / "model-00000.safetensors", top, rng)
    for first in range(0, n_layers, LAYERS_PER_SHARD):
        layers = range(first, min(first + LAYERS_PER_SHARD, n_layers))
        shard = folder / f"model-{first + 1:05d}.safetensors"
        write_shard(shard, tensor_shapes(config, layers), rng)
    return folder


def peak_rss_of_export(hf_dir: Path, out: Path, quant: str) -> tuple[int, str]:
    """(maximum resident set size in kB, the export's stdout) of one export in a child."""
    cmd = ["/usr/bin/time", "-v", sys.executable, "-m", "edgespec", "export",
           "--format", "onnx", "--target", str(hf_dir), "--out", str(out),
           "--target-quant", quant]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"export failed ({done.returncode}):\n{done.stderr[-3000:]}")
    peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    assert peak is not None, done.stderr[-2000:]
    return int(peak.group(1)), done.stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=28, help="layers kept (all widths stay 7B's)")
    ap.add_argument("--quant", default="int4", help="target precision: int4 | fp8 | fp16")
    ap.add_argument("--keep", type=Path, help="write here and keep (default: a temp folder)")
    args = ap.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="edgespec-7b-"))
    try:
        hf_dir = make_checkpoint(root / "hf", args.layers)
        size = sum(p.stat().st_size for p in hf_dir.iterdir())
        print(f"checkpoint: {args.layers} layers, {size / 1e9:.2f} GB fp16 in {hf_dir}")
        peak_kb, out = peak_rss_of_export(hf_dir, root / "bundle", args.quant)
        bundle = sum(p.stat().st_size for p in (root / "bundle").rglob("*") if p.is_file())
        print(out.rstrip())
        print(f"export --format onnx ({args.quant}): bundle {bundle / 1e9:.2f} GB, "
              f"peak resident {peak_kb / 1e6:.2f} GB ({peak_kb} kB, /usr/bin/time -v)")  # fmt: skip
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
