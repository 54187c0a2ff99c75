"""Shape-true GGUF models with random weights written straight into their quantized blocks.

make_models.py writes an HF checkpoint that `edgespec export` converts to an f16 GGUF and
llama.cpp's quantizer then quantizes: three passes over the model, 15 GB of f16 twice for a 7B.
A pass costs what the shapes and the block types cost, whatever the weights hold, so this
writes the blocks themselves: random quants under per-tensor scales that give each weight the
spread make_models.py gives it (unit-variance activations, a clear top logit), in the types
llama.cpp's quantizer would choose (src/llama-quant.cpp at the vendored commit): Q4_K_M is
Q4_K with Q6_K for output.weight and for attn_v and ffn_down in the layers `use_more_bits`
picks; Q8_0 is Q8_0 throughout. An untied output layer holds the embedding's values
(OUTPUT_IS_EMBEDDING), so the embedding is written in the output's type. Norms and biases are
float32, as llama.cpp writes them. The vocabulary is the real tokenizer's (make_models.py
--save-tokenizer), padded to the shape's rows. One pass, one write: the cost is the disk's.

    python bench/gpu/make_gguf.py --shape qwen2.5-7b --quant q4_k_m --tokenizer DIR --out T.gguf
    python bench/gpu/make_gguf.py --pair 7b --tokenizer DIR --out BUNDLE   # target + draft
    python bench/gpu/make_gguf.py --pair tiny --head --out BUNDLE          # CPU smoke

--head also writes the target's shape-true EAGLE-3 head (HEAD_FILE in the bundle; with --shape,
the head alone): one decoder layer at the target's widths, fc from 3 * hidden, the 32,000-token
draft vocabulary of published heads mapped by d2t, f16 matrices as published heads ship
(bf16/f16), in the layout export/eagle3_gguf.py owns. About 0.8 GB for the 7B.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_models import SHAPES, Shape, hf_config, tokenizer_files  # noqa: E402

# (block bytes, weights per block) of the types written here
BLOCKS = {"Q8_0": (34, 32), "Q4_K": (144, 256), "Q6_K": (210, 256)}
# An untied output layer of random values gives logits whose top two are often a rounding
# apart: a 7B's hidden state moved by ~2 (logit sd 4) between llama.cpp's one-row and batched
# kernels, so a verify pass's argmax left plain decoding's within a few tokens and the kit's
# oracle grid measured a drafter that was never on track (H200, 2026-11-26: 72 of 72 runs
# departed). The embedding's values as the output layer, as in a tied model, give each
# row a clear top logit (the last token, by hundreds on the 7B) whatever the rounding.
OUTPUT_IS_EMBEDDING = {"output.weight": "token_embd.weight"}
PAIRS = {  # a pair's (target shape, quant), (draft shape, quant)
    "7b": (("qwen2.5-7b", "q4_k_m"), ("qwen2.5-0.5b", "q8_0")),
    "demo": (("qwen2.5-1.5b", "q4_k_m"), ("qwen2.5-0.5b", "q8_0")),
    "tiny": (("tiny", "q4_k_m"), ("tiny-draft", "q8_0")),
}
FILE_TYPES = {"q4_k_m": 15, "q8_0": 7}  # llama_ftype
HEAD_FILE = "head.eagle3.gguf"  # a pair's EAGLE-3 head in its bundle (measure.py looks for it)
# published EAGLE-3 heads draft from a reduced vocabulary (EAGLE3-LLaMA3.1-Instruct-8B, the
# Qwen3 heads: draft_vocab_size 32000) that d2t maps to the target's ids: the output's rows
DRAFT_VOCAB = 32_000
# llama.cpp (the vendored commit) keeps the layer inputs an EAGLE-3 head reads only where an
# architecture's graph records them (t_layer_inp: llama, qwen3, ...; not qwen2, whose target
# aborts on GGML_ASSERT "layer input tensor is null"). A target with a head is written as a
# Llama of the Qwen2.5 shape: the same tensors, q/k/v biases included (llama.cpp's Llama loads
# them), RoPE on adjacent pairs instead of halves: the same cost per pass.
HEAD_TARGET_ARCH = "llama"
POOL_BYTES = (1 << 24) + 7  # random bytes made once, reused at shifted offsets: odd, so no
# row of any tensor repeats another's bytes exactly (the logits would tie)


def use_more_bits(i_layer: int, n_layers: int) -> bool:
    """llama.cpp's choice of the Q4_K_M layers whose attn_v and ffn_down get Q6_K."""
    return (
        i_layer < n_layers // 8
        or i_layer >= 7 * n_layers // 8
        or ((i_layer - n_layers // 8) % 3 == 2)
    )


def tensor_plan(shape: Shape, n_vocab: int, quant: str) -> list[tuple[str, tuple, str, float]]:
    """(GGUF name, numpy shape [rows, row length], type, weight std) for every tensor, in
    llama.cpp's order; the stds as make_models.random_tensors scales them."""
    h, hd = shape.hidden, shape.hidden // shape.heads
    q, kv, ff = shape.heads * hd, shape.kv_heads * hd, shape.intermediate

    def mat(name: str, rows: int, cols: int, scale: float = 1.0, six: bool = False):
        if quant == "q8_0":
            kind = "Q8_0"
        else:
            kind = "Q6_K" if six else "Q4_K"
        return (name, (rows, cols), kind, scale / np.sqrt(cols))

    def vec(name: str, n: int, std: float):  # std 0: ones (a norm)
        return (name, (n,), "F32", std)

    # a tied output layer is the embedding: llama.cpp gives it the output's type. An untied one
    # holds the embedding's values too (OUTPUT_IS_EMBEDDING), so the embedding takes the
    # output's type (its row lookup costs the same in any type)
    plan = [mat("token_embd.weight", n_vocab, h, np.sqrt(h), six=quant == "q4_k_m")]
    for i in range(shape.layers):
        p, more = f"blk.{i}.", quant == "q4_k_m" and use_more_bits(i, shape.layers)
        plan += [
            vec(p + "attn_norm.weight", h, 0.0),
            mat(p + "attn_q.weight", q, h, 2.0), vec(p + "attn_q.bias", q, 0.1 / np.sqrt(q)),
            mat(p + "attn_k.weight", kv, h, 2.0), vec(p + "attn_k.bias", kv, 0.1 / np.sqrt(kv)),
            mat(p + "attn_v.weight", kv, h, six=more),
            vec(p + "attn_v.bias", kv, 0.1 / np.sqrt(kv)),
            mat(p + "attn_output.weight", h, q),
            vec(p + "ffn_norm.weight", h, 0.0),
            mat(p + "ffn_gate.weight", ff, h), mat(p + "ffn_up.weight", ff, h),
            mat(p + "ffn_down.weight", h, ff, six=more),
        ]  # fmt: skip
    plan.append(vec("output_norm.weight", h, 0.0))
    if not shape.tied:
        plan.append(("output.weight", *plan[0][1:]))
    return plan


def random_blocks(kind: str, rows: int, cols: int, std: float, pool: np.ndarray, offset: int):
    """[rows, cols // per_block * block_bytes] uint8: quants from the pool, scales set so the
    dequantized weights have mean ~0 and this std.
    Q8_0: d * q, q int8 uniform (sd 73.9). Q4_K: d*sc*q - dmin*m, q 4-bit uniform (sd 4.61,
    mean 7.5), sc = m = 1 (6-bit, packed), dmin = 7.5 d. Q6_K: d * scale * (q - 32), q 6-bit
    uniform (sd 18.47), scales 1."""
    size, per = BLOCKS[kind]
    if cols % per:
        raise SystemExit(f"{kind}: a row of {cols} is not whole blocks of {per}")
    n = rows * (cols // per)
    blocks = np.resize(np.roll(pool, -offset), n * size).reshape(n, size)
    if kind == "Q8_0":
        blocks[:, 0:2] = np.array([std / 73.9], np.float16).view(np.uint8)
        # the pool's bytes as int8: -128 too, which ggml's Q8_0 never writes, but reads fine
    elif kind == "Q4_K":
        d = np.float16(std / 4.61)
        header = np.array([d, np.float16(7.5 * d)], np.float16).view(np.uint8)
        blocks[:, 0:4] = header
        blocks[:, 4:12] = 1  # scales and mins of sub-blocks 0-3 / 4-7 (low 6 bits)
        blocks[:, 12:16] = 0x11  # sub-blocks 4-7: scale in the low nibble, min in the high
    else:  # Q6_K: ql[128] qh[64] scales[16] d
        blocks[:, 192:208] = 1
        blocks[:, 208:210] = np.array([std / 18.47], np.float16).view(np.uint8)
    return blocks.reshape(rows, -1)


def source_of(shape_name: str, tokenizer: Path | None) -> tuple[dict, SimpleNamespace]:
    """The shape's HF config (its vocabulary rows included) and what write_tokenizer reads."""
    shape = SHAPES[shape_name]
    with tempfile.TemporaryDirectory() as tmp:
        n_tokens, special = tokenizer_files(shape_name, tokenizer, Path(tmp))
        tok_json = (Path(tmp) / "tokenizer.json").read_text()
        tok_config = json.loads((Path(tmp) / "tokenizer_config.json").read_text())
    special = {k: v for k, v in special.items() if v is not None}
    config = hf_config(shape, shape.vocab or n_tokens, special)
    ckpt = SimpleNamespace(source=Path(shape_name), config=config, tokenizer_json=tok_json,
                           tokenizer_config=tok_config)  # fmt: skip
    return config, ckpt


def write_gguf(
    shape_name: str, quant: str, out: Path, tokenizer: Path | None, seed: int = 0, arch: str = ""
):
    """One model file; returns its path. arch: llama.cpp's architecture (default Qwen2's)."""
    import gguf

    from edgespec.export.hf_to_gguf import ARCHS, write_hparams, write_tokenizer

    shape = SHAPES[shape_name]
    config, ckpt = source_of(shape_name, tokenizer)
    n_vocab = config["vocab_size"]
    spec = ARCHS["Qwen2ForCausalLM"]
    writer = gguf.GGUFWriter(str(out), arch or spec.gguf_arch)
    write_hparams(writer, config, "f16")
    writer.kv_data[0].pop(gguf.Keys.General.FILE_TYPE)  # what it is, not f16
    writer.add_file_type(FILE_TYPES[quant])
    writer.add_name(f"{shape_name} random {quant} (bench/gpu/make_gguf.py)")
    write_tokenizer(writer, ckpt, spec)  # type: ignore[arg-type]
    plan = tensor_plan(shape, n_vocab, quant)
    for name, dims, kind, _ in plan:
        if kind == "F32":
            writer.add_tensor_info(name, dims, np.dtype(np.float32), 4 * dims[0])
        else:
            size, per = BLOCKS[kind]
            nbytes = dims[0] * dims[1] // per * size
            raw = gguf.GGMLQuantizationType[kind]
            writer.add_tensor_info(name, (dims[0], nbytes // dims[0]), np.dtype(np.uint8),
                                   nbytes, raw_dtype=raw)  # fmt: skip
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    rng = np.random.default_rng(seed)
    pool = rng.integers(0, 256, POOL_BYTES, dtype=np.uint8)
    normal = rng.standard_normal(1 << 16).astype(np.float32)
    index = {name: i for i, (name, *_) in enumerate(plan)}
    for name, dims, kind, std in plan:
        i = index[OUTPUT_IS_EMBEDDING.get(name, name)]  # the same i: the same values
        if kind == "F32":
            data = (np.ones(dims, np.float32) if std == 0.0
                    else np.resize(np.roll(normal, i), dims) * np.float32(std))  # fmt: skip
        else:
            data = random_blocks(kind, dims[0], dims[1], std, pool, (i * 7919 * 1031) % POOL_BYTES)
        writer.write_tensor_data(data)
    writer.close()
    return out


def head_shape(shape_name: str, n_vocab: int):
    """A published-style EAGLE-3 head for the shape: its widths, heads and feed-forward size,
    llama.cpp's default extract layers, DRAFT_VOCAB output rows (a toy vocabulary: half)."""
    from edgespec.export.eagle3_gguf import HeadShape, default_layers

    s = SHAPES[shape_name]
    n_draft = min(DRAFT_VOCAB, n_vocab // 2)
    return HeadShape(s.hidden, s.hidden, s.heads, s.kv_heads, s.intermediate, n_vocab,
                     default_layers(s.layers), n_draft)  # fmt: skip


def write_head(shape_name: str, out: Path, tokenizer: Path | None, seed: int = 3) -> Path:
    """The shape's random EAGLE-3 head (f16 matrices, f32 norms, int64 d2t); returns its path."""
    import gguf

    from edgespec.export import eagle3_gguf
    from edgespec.export.hf_to_gguf import ARCHS, write_tokenizer

    config, ckpt = source_of(shape_name, tokenizer)
    shape = head_shape(shape_name, config["vocab_size"])
    writer = gguf.GGUFWriter(str(out), eagle3_gguf.ARCH)
    eagle3_gguf.write_hparams(
        writer, shape, n_ctx=config["max_position_embeddings"], rope_theta=config["rope_theta"],
        rms_eps=config["rms_norm_eps"], dtype=np.dtype(np.float16),
        name=f"{shape_name} random EAGLE-3 head (bench/gpu/make_gguf.py)",
    )  # fmt: skip
    write_tokenizer(writer, ckpt, ARCHS["Qwen2ForCausalLM"])  # type: ignore[arg-type]
    plan = eagle3_gguf.tensor_plan(shape)
    for name, dims, std in plan:
        dtype = np.dtype(np.float32 if std == 0.0 else np.float16)
        writer.add_tensor_info(name, dims, dtype, int(np.prod(dims)) * dtype.itemsize)
    d2t = eagle3_gguf.draft_to_target(shape)
    if d2t is not None:
        writer.add_tensor_info("d2t", d2t.shape, d2t.dtype, d2t.nbytes)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    pool = np.random.default_rng(seed).standard_normal(POOL_BYTES, dtype=np.float32)
    for i, (_, dims, std) in enumerate(plan):
        if std == 0.0:
            data = np.ones(dims, np.float32)
        else:  # the pool at a shifted offset: odd-sized, so no two rows repeat exactly
            shifted = np.roll(pool, -(i * 7919 * 1031) % POOL_BYTES)
            data = (np.resize(shifted, dims) * np.float32(std)).astype(np.float16)
        writer.write_tensor_data(data)
    if d2t is not None:
        writer.write_tensor_data(d2t)
    writer.close()
    return out


def write_pair(pair: str, out: Path, tokenizer: Path | None, head: bool = False) -> Path:
    """A bundle folder (bundle.json, target, draft) as `edgespec export` would write it from
    trained models, and with head the target's EAGLE-3 head (HEAD_FILE beside bundle.json,
    which lists target and draft: measure.py finds the head by that name): measure.py
    --bundle reads it."""
    from edgespec.bundle import Bundle, write_bundle
    from edgespec.export.gguf_bundle import model_entry, read_source
    from edgespec.export.orchestrator import tokenizer_section

    out.mkdir(parents=True, exist_ok=True)
    entries, infos = [], []
    for role, (shape, quant), seed in zip(("target", "draft"), PAIRS[pair], (1, 2)):
        t0 = time.perf_counter()
        arch = HEAD_TARGET_ARCH if head and role == "target" else ""
        path = write_gguf(shape, quant, out / f"{role}.{quant}.gguf", tokenizer, seed, arch)
        made = time.perf_counter() - t0
        info = read_source(path)
        entries.append(model_entry(role, path, quant, info))
        infos.append(info)
        size = path.stat().st_size / 1e9
        print(f"{path}: {shape} {quant} ({arch or 'qwen2'}), {size:.2f} GB in {made:.1f} s",
              flush=True)  # fmt: skip
    if infos[0].vocab.token_text_hash != infos[1].vocab.token_text_hash:
        raise SystemExit(f"{out}: the target's and the draft's token texts differ")
    policy = {"target_quant": PAIRS[pair][0][1], "draft_quant": PAIRS[pair][1][1],
              "reason": "random weights in quantized blocks (bench/gpu/make_gguf.py)"}  # fmt: skip
    write_bundle(Bundle(out, tuple(entries), tokenizer_section(infos[0].vocab), policy))
    if head:
        t0 = time.perf_counter()
        path = write_head(PAIRS[pair][0][0], out / HEAD_FILE, tokenizer)
        size = path.stat().st_size / 1e9
        print(f"{path}: EAGLE-3 head, f16, {size:.2f} GB in {time.perf_counter() - t0:.1f} s",
              flush=True)  # fmt: skip
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", choices=sorted(SHAPES))
    ap.add_argument("--quant", choices=sorted(FILE_TYPES), default="q4_k_m")
    ap.add_argument("--pair", choices=sorted(PAIRS), help="a bundle of the pair's two models")
    ap.add_argument(
        "--tokenizer", type=Path, help="folder written by make_models.py --save-tokenizer"
    )
    ap.add_argument("--head", action="store_true",
                    help=f"with --pair also the target's EAGLE-3 head ({HEAD_FILE}); with "
                    "--shape the shape's head alone")  # fmt: skip
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    if args.pair:
        write_pair(args.pair, args.out, args.tokenizer, args.head)
    elif args.shape:
        t0 = time.perf_counter()
        if args.head:
            write_head(args.shape, args.out, args.tokenizer, args.seed)
        else:
            write_gguf(args.shape, args.quant, args.out, args.tokenizer, args.seed)
        print(f"{args.out}: {time.perf_counter() - t0:.1f} s", flush=True)
    else:
        ap.error("give --pair or --shape")


if __name__ == "__main__":
    main()
