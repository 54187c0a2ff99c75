"""HF checkpoint folder or GGUF file (Llama, Mistral, Qwen2) -> ONNX decoder graph, no torch.

Sources are read by export/checkpoint.py (a GGUF is dequantized and its tokenizer rebuilt).
The graph is written node by node with onnx.helper from the numpy weights. Attention is ONNX
Runtime's GroupQueryAttention (com.microsoft), as onnxruntime-genai uses it on CPU and CUDA:
it applies RoPE, handles GQA and causal masking, and — when the runtime binds the same
buffer to `past_key_values.{i}.key` and `present.{i}.key` — writes the new keys in place into a
cache allocated once for the whole context. Rollback is then only a smaller `seqlens_k`.

Inputs:  input_ids [1, n] int64; seqlens_k [1] int32 (= tokens in the cache after this call
         - 1); total_sequence_length [] int32; logits_start [1] int64 (first row whose logits
         are wanted: 0 = all, n - 1 = the last only); past_key_values.{i}.key/value
         [1, n_kv_head, n_ctx, head_dim] float32.
Outputs: logits [1, n - logits_start, V] float32; present.{i}.key/value (the same buffers);
         with top_outputs (the default for fp16 compute, the CUDA export) also top_id
         [1, n - logits_start] int64 and top_p [1, ...] float32: each row's argmax (the first
         maximum) and its softmax probability, so a greedy step copies those to the host
         instead of the logits. On the CPU they cost more than numpy's argmax saves.
         With hidden_layers (a trained draft head's extract layers), also hidden_states
         [1, n, len(hidden_layers) * n_embd] float32: the input of each of those layers (the
         residual stream entering it, as llama.cpp keeps for an EAGLE-3 head) at every row,
         the layers side by side in the order given.
The two scalars feed only kernels that read them on the host, so on the CUDA EP every node
stays on the GPU and a step can be captured as a CUDA graph.

quant (the weights): fp32; fp16; int4 (MatMulNBits, ONNX Runtime's own block quantizer,
symmetric); fp8 (E4M3 per-channel weights + DequantizeLinear). compute (activations and KV
cache): fp32 for the CPU EP; fp16 for the CUDA EP, whose GroupQueryAttention kernel exists in
fp16/bf16 only. RMSNorm runs in float32 either way, and logits leave the graph as float32.

This is the "ort" flavour. export/onnx_standard.py's StandardGraphBuilder overrides the
GraphBuilder methods that differ (inputs, attention, weights, kept rows) to write the same
decoder with standard operators only, for TensorRT; build_decoder serves both.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import BinaryIO

import numpy as np

from edgespec.export.checkpoint import (
    Checkpoint,
    LazyTensors,
    Rows,
    read_checkpoint,
    special_id,
)
from edgespec.export.families import FAMILIES, Family, family
from edgespec.export.rope import context_limit, rope_caches, rope_configs
from edgespec.plumbing.progress import progress
from edgespec.quant.reference import ErrorSum, TensorError, error_summary
from edgespec.runtimes.shared import check_logit_ranges

log = logging.getLogger(__name__)

OPSET = 21  # float8e4m3fn DequantizeLinear with a per-channel axis needs 19+
# onnx stamps its own newest IR version (onnx 1.23: 14), which onnxruntime 1.31 refuses
# (it reads up to 13): pin the IR that opset 21 came with
IR_VERSION = 10
QUANTS = ("fp32", "fp16", "int4", "int8", "fp8")
NBITS = {"int4": 4, "int8": 8}  # MatMulNBits block formats: bits per weight
COMPUTES = {"fp32": np.float32, "fp16": np.float16}
MODEL_FILE = "model.onnx"
DATA_FILE = "model.onnx.data"  # weights beside the graph: protobuf stops at 2 GiB
DATA_ALIGN = 4096  # page-aligned offsets let ONNX Runtime map the weights instead of reading
DATA_MIN_BYTES = 1024  # smaller constants stay inside model.onnx
BLOCK_BYTES = 64 << 20  # float32 rows of a weight read, quantized and written at a time
MAX_BLOCK = 128  # logits per block of first_max (Qwen2's 151,936: 1,187 blocks)


@dataclass(frozen=True)
class ModelInfo:
    """model.json: what the runtime needs to know without opening the graph."""

    arch: str
    n_layer: int
    n_head: int
    n_kv_head: int
    head_dim: int
    n_embd: int
    n_vocab: int
    context_length: int
    quant: str
    compute: str  # activations and KV cache: fp32 (CPU EP) or fp16 (CUDA EP)
    block_size: int | None  # int4/int8 only
    accuracy_level: int | None  # int4/int8 only: MatMulNBits compute type
    bos_id: int | None
    eos_id: int | None
    sliding_window: int | None  # the runtime caps n_ctx here: the graph attends to everything
    weight_error: dict | None = None  # mean and worst relative error of the stored weights
    # the token ids the logits' columns hold, as [start, stop) ranges in order: a draft whose
    # output layer keeps only its likeliest tokens (head_ranges); None: every id, column = id
    logit_ranges: list[list[int]] | None = None
    flavour: str = "ort"  # ort: ONNX Runtime's contrib ops; standard: TensorRT (onnx_standard)
    top_outputs: bool = False  # the graph also outputs top_id and top_p (see above)
    hidden_layers: list[int] | None = None  # the graph also outputs hidden_states (see above)
    model_file: str = MODEL_FILE
    format: str = "edgespec-onnx/1"


def export_onnx(
    source: Path | Checkpoint,
    out_dir: Path,
    *,
    quant: str = "fp32",
    compute: str = "fp32",
    block_size: int = 32,
    accuracy_level: int = 4,
    builder: type[GraphBuilder] | None = None,
    logit_ranges: Sequence[tuple[int, int]] | None = None,
    top_outputs: bool | None = None,
    hidden_layers: Sequence[int] | None = None,
) -> Path:
    """Write out_dir/{model.onnx, model.onnx.data, model.json, tokenizer files}; return out_dir.

    source: an HF checkpoint folder, a .gguf file, or a Checkpoint already read.
    int4/int8 only: block_size 32 or 128 weights per scale; accuracy_level is MatMulNBits' compute
    type (4 = int8 activations: on CPU the fast kernel for every width; 0 = float32, whose
    multi-row path dequantizes the whole weight per call and runs ~2.5x slower at n >= 2).
    builder: the graph's flavour: GraphBuilder (None; ONNX Runtime's contrib operators) or
    export/onnx_standard.py's StandardGraphBuilder (standard operators only, for TensorRT).
    logit_ranges: the token ids the output layer keeps, for a draft (head_ranges; None: all).
    top_outputs: also output each row's argmax and its probability (None: with fp16 compute,
    the CUDA export; the "ort" flavour only).
    hidden_layers: also output these layers' inputs at every row (hidden_states), for a
    trained draft head that reads them (an EAGLE-3 head's three extract layers).
    """
    check_choices(quant, compute, block_size)
    ckpt = source if isinstance(source, Checkpoint) else read_checkpoint(Path(source))
    write_onnx_model(
        ckpt, Path(out_dir), quant, compute, block_size, accuracy_level, builder, logit_ranges,
        top_outputs, hidden_layers,
    )  # fmt: skip
    return Path(out_dir)


def check_choices(quant: str, compute: str, block_size: int) -> None:
    if quant not in QUANTS:
        raise ValueError(f"unknown quant {quant!r}; choose one of {', '.join(QUANTS)}")
    if compute not in COMPUTES:
        raise ValueError(f"unknown compute {compute!r}; choose fp32 (CPU) or fp16 (CUDA)")
    if compute == "fp16" and quant == "fp32":
        raise ValueError("fp16 compute needs fp16, int4 or fp8 weights, not fp32")
    if block_size not in (32, 128):
        raise ValueError(f"int4 block size must be 32 or 128, got {block_size}")


def write_onnx_model(
    ckpt: Checkpoint,
    out_dir: Path,
    quant: str,
    compute: str,
    block_size: int,
    accuracy_level: int = 4,
    builder: type[GraphBuilder] | None = None,
    logit_ranges: Sequence[tuple[int, int]] | None = None,
    top_outputs: bool | None = None,
    hidden_layers: Sequence[int] | None = None,
) -> ModelInfo:
    """The model folder; returns what model.json holds (the weight-error report included).
    Each weight goes to the data file as it is quantized, a block of rows at a time."""
    import onnx

    check_choices(quant, compute, block_size)
    flavour = builder or GraphBuilder
    info = replace(model_info(ckpt, quant, compute, block_size, accuracy_level),
                   flavour=flavour.FLAVOUR,
                   top_outputs=wants_top_outputs(top_outputs, compute, flavour))  # fmt: skip
    if logit_ranges is not None:
        check_logit_ranges(logit_ranges, info.n_vocab)
        info = replace(info, logit_ranges=[[int(a), int(b)] for a, b in logit_ranges])
    if hidden_layers is not None:
        check_hidden_layers(hidden_layers, info.n_layer)
        info = replace(info, hidden_layers=[int(i) for i in hidden_layers])
    out_dir.mkdir(parents=True, exist_ok=True)
    with (out_dir / DATA_FILE).open("w+b") as data:  # w+: column blocks are placed by mmap
        g = flavour(quant, COMPUTES[compute], block_size, accuracy_level, data)
        build_decoder(g, info, ckpt.config, ckpt.weights, f"onnx {out_dir.name}")
    onnx.save_model(g.model(), str(out_dir / MODEL_FILE))
    info = replace(info, weight_error=error_summary(g.errors))  # quant/reference.py
    (out_dir / "tokenizer.json").write_text(ckpt.tokenizer_json, encoding="utf-8")
    (out_dir / "tokenizer_config.json").write_text(json.dumps(ckpt.tokenizer_config, indent=1))
    if ckpt.generation_config is not None:
        (out_dir / "generation_config.json").write_text(json.dumps(ckpt.generation_config))
    (out_dir / "model.json").write_text(json.dumps(asdict(info), indent=1) + "\n")
    log.info("exported %s (%s weights, %s compute) to %s", ckpt.source, quant, compute, out_dir)
    return info


def check_hidden_layers(layers: Sequence[int], n_layer: int) -> None:
    """Layers whose inputs the graph outputs, in the head's order: indices of this model's
    layers (one may repeat: llama.cpp's converter gives a target of under 6 layers
    (0, n // 2, n - 1))."""
    valid = all(isinstance(i, int) and not isinstance(i, bool) for i in layers)
    if not layers or not valid or not all(0 <= i < n_layer for i in layers):
        raise ValueError(
            f"hidden layers must be layer indices 0..{n_layer - 1}, got {list(layers)}; "
            "give the extract layers of the head that will read them"
        )


def wants_top_outputs(asked: bool | None, compute: str, flavour: type[GraphBuilder]) -> bool:
    """Top outputs by default where logits would cross from a GPU (fp16 compute); the
    TensorRT flavour's runtime binds logits alone."""
    if flavour.FLAVOUR != "ort":
        if asked:
            raise ValueError(f"top outputs are for the ONNX Runtime flavour, not {flavour.FLAVOUR}")
        return False
    return compute == "fp16" if asked is None else asked


def head_ranges(n_vocab: int, keep: int, always: Iterable[int]) -> list[tuple[int, int]]:
    """The token ids a draft's output layer keeps, as [start, stop) ranges: the `keep` lowest
    ids and every id in `always` (special and end-of-generation tokens).

    A BPE vocabulary numbers its tokens in merge order and a SentencePiece one by score, so
    low ids are the frequent ones: the demo target's outputs on the open, chat, edit and code
    suites are 99.4-99.7% ids below 98,304 (docs/decisions.md). A token the draft cannot
    propose is only a draft rejected there: the target's distribution is kept whatever the
    draft's is, so the cut trades acceptance for a cheaper draft token, never the output."""
    ids = sorted({i for i in always if keep <= i < n_vocab})
    ranges = [(0, min(keep, n_vocab))]
    for i in ids:
        if i == ranges[-1][1]:
            ranges[-1] = (ranges[-1][0], i + 1)
        else:
            ranges.append((i, i + 1))
    return ranges


def model_info(
    ckpt: Checkpoint, quant: str, compute: str, block_size: int, accuracy_level: int
) -> ModelInfo:
    config, tok_config = ckpt.config, ckpt.tokenizer_config
    n_head = config["num_attention_heads"]
    tokenizer = json.loads(ckpt.tokenizer_json)
    texts = {text: i for text, i in tokenizer["model"]["vocab"].items()}
    texts |= {t["content"]: t["id"] for t in tokenizer.get("added_tokens", [])}
    by_id = [""] * (max(texts.values()) + 1)
    for text, i in texts.items():
        by_id[i] = text
    bos, eos = (
        special_id(tok_config.get(f"{r}_token"), by_id, config.get(f"{r}_token_id"))
        for r in ("bos", "eos")
    )
    window = config.get("sliding_window") if config.get("use_sliding_window", True) else None
    if family(config).local_layers:  # the graph computes the window: nothing to cap
        window = None
    return ModelInfo(
        arch=family(config).arch,
        n_layer=config["num_hidden_layers"],
        n_head=n_head,
        n_kv_head=config.get("num_key_value_heads", n_head),
        head_dim=config.get("head_dim") or config["hidden_size"] // n_head,
        n_embd=config["hidden_size"],
        n_vocab=config["vocab_size"],
        context_length=context_limit(config),
        quant=quant,
        compute=compute,
        block_size=block_size if quant in NBITS else None,
        accuracy_level=accuracy_level if quant in NBITS else None,
        bos_id=bos,
        eos_id=eos,
        sliding_window=window,
    )


# --- the graph ------------------------------------------------------------------------------


class GraphBuilder:
    """Nodes, initializers and unique names; weights enter through matmul()/gather(). A
    subclass is a flavour of the one graph (export/onnx_standard.py)."""

    FLAVOUR = "ort"  # model.json's flavour: which runtime reads the graph

    def __init__(
        self,
        quant: str,
        dtype: type = np.float32,
        block_size: int = 32,
        accuracy_level: int = 4,
        data: BinaryIO | None = None,  # DATA_FILE, open for writing; None: all inside the graph
    ) -> None:
        from onnx import helper

        self.data = data
        self.quant, self.dtype = quant, dtype  # dtype: activations and KV cache
        self.onnx_type = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
        self.block_size, self.accuracy_level = block_size, accuracy_level
        self.nodes: list = []
        self.initializers: list = []
        self.inputs: list = []
        self.outputs: list = []
        self.count = 0
        self.errors: list[TensorError] = []  # each stored matmul weight's
        self.family: Family = FAMILIES["LlamaForCausalLM"]  # the model's (build_decoder)
        self.config: dict = {}  # its HF config
        self.local: list[bool] = []  # which layers are sliding-window ones

    def name(self, hint: str) -> str:
        self.count += 1
        return f"{hint}_{self.count}"

    def op(self, op: str, *inputs: str, **attrs) -> str:
        from onnx import helper

        out = self.name(op)
        domain = "com.microsoft" if op in ("MatMulNBits", "GatherBlockQuantized") else ""
        self.nodes.append(helper.make_node(op, list(inputs), [out], name=out, domain=domain,
                                           **attrs))  # fmt: skip
        return out

    def const(self, name: str, array: np.ndarray, onnx_type: int | None = None) -> str:
        """An initializer; large ones are appended to the data file, page-aligned."""
        stream = self.stream(name, array.shape, array.dtype, onnx_type)
        stream.write(array)
        return stream.close()

    def stream(
        self, name: str, shape: tuple[int, ...], dtype, onnx_type: int | None = None, axis: int = 0
    ) -> ConstStream:
        """An initializer written as its parts arrive (see ConstStream)."""
        return ConstStream(self, name, tuple(shape), np.dtype(dtype), onnx_type, axis)

    def cast(self, x: str, dtype: type) -> str:
        from onnx import helper

        return self.op("Cast", x, to=helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))

    def blocks(self, w: Rows) -> Iterator[np.ndarray]:
        """w's rows, BLOCK_BYTES of float32 at a time, as [in, rows] (the graph's layout)."""
        for start, stop in w.blocks(BLOCK_BYTES):
            yield np.ascontiguousarray(w.read(start, stop).T)

    def matmul(self, x: str, w: Rows, name: str) -> str:
        """x [1, n, in] @ w.T, w [out, in] float32 in the HF layout, stored as self.quant. w is
        read a block of output rows at a time; a block is a block of the stored columns."""
        from onnx import TensorProto

        if self.quant in NBITS:
            return self.matmul_nbits(x, w, name)
        n_out, n_in = w.shape
        errors = ErrorSum()
        if self.quant == "fp8":  # E4M3 bits, one scale per output channel
            from edgespec.quant.fp8 import dequantize_fp8, quantize_fp8

            bits = self.stream(name, (n_in, n_out), np.uint8, TensorProto.FLOAT8E4M3FN, axis=1)
            scales = []
            for wt in self.blocks(w):
                block_bits, block_scales = quantize_fp8(wt, axis=1)
                errors.add(wt, dequantize_fp8(block_bits, block_scales, axis=1))
                bits.write(block_bits)
                scales.append(block_scales)
            self.record_error(name, w, errors)
            q = bits.close()
            scale = self.const(name + ".scale", np.concatenate(scales).astype(self.dtype))
            return self.op("MatMul", x, self.op("DequantizeLinear", q, scale, axis=1))
        dtype = np.dtype(np.float16 if self.quant == "fp16" else self.dtype)
        weight = self.stream(name, (n_in, n_out), dtype, axis=1)
        for wt in self.blocks(w):
            stored = wt.astype(dtype)
            if self.quant == "fp16":
                errors.add(wt, stored.astype(np.float32))
            weight.write(stored)
        if self.quant == "fp32":
            return self.op("MatMul", x, weight.close())
        self.record_error(name, w, errors)
        weight_name = weight.close()
        if self.dtype != np.float16:  # stored half, computed float: ORT folds the Cast
            weight_name = self.cast(weight_name, self.dtype)
        return self.op("MatMul", x, weight_name)

    def matmul_nbits(self, x: str, w: Rows, name: str) -> str:
        """INT4 blocks along the input dimension, packed by ONNX Runtime's own quantizer kernel
        (what onnxruntime.quantization's MatMulNBitsQuantizer calls, without its onnx_ir
        dependency): symmetric, so no zero points (MatMulNBits then assumes 8)."""
        n, k = w.shape
        packed, scales = self.int4_rows(w, name, flat=False)
        b = packed.close()
        s = self.const(name + ".scales", scales.astype(self.dtype))
        return self.op(
            "MatMulNBits", x, b, s, K=k, N=n, bits=NBITS[self.quant], block_size=self.block_size,
            accuracy_level=self.accuracy_level,
        )  # fmt: skip

    def int4_rows(self, w: Rows, name: str, flat: bool) -> tuple[ConstStream, np.ndarray]:
        """w [N, K] in INT4 blocks along K: packed [N, K/block, block/2] uint8 ([N, K/2] if
        flat, as GatherBlockQuantized reads it) streamed to name.q4 a block of rows at a time,
        and scales [N, K/block] float32; the error of what is stored is recorded."""
        n, k = w.shape
        n_blocks = -(-k // self.block_size)
        bits = NBITS[self.quant]  # int8: the same blocks, a byte a weight
        block_bytes = self.block_size * bits // 8
        shape = (n, n_blocks * block_bytes) if flat else (n, n_blocks, block_bytes)
        packed = self.stream(name + f".q{bits}", shape, np.uint8)
        scales, errors = [], ErrorSum()
        quantize = self.int8_blocks if bits == 8 else self.int4_blocks
        for wt in self.blocks(w):
            block_packed, block_scales = quantize(wt, errors)
            packed.write(block_packed.reshape(len(block_packed), *shape[1:]))
            scales.append(block_scales)
        self.record_error(name, w, errors)
        return packed, np.concatenate(scales)

    def int4_blocks(self, wt: np.ndarray, errors: ErrorSum) -> tuple[np.ndarray, np.ndarray]:
        """wt [K, N] -> packed [N, K/block, block/2] uint8 (low nibble first, zero point 8)
        and scales [N, K/block] float32; the error of what is stored goes into errors. Each
        output column is quantized on its own, so a block of columns gives the same bytes."""
        from onnxruntime.capi._pybind_state import quantize_matmul_4bits

        k, n = wt.shape
        n_blocks = -(-k // self.block_size)
        padded = np.zeros((n_blocks * self.block_size, n), np.float32)
        padded[:k] = wt
        packed = np.zeros((n, n_blocks, self.block_size // 2), np.uint8)
        scales = np.zeros((n, n_blocks), np.float32)
        zero_points = np.zeros((n, (n_blocks + 1) // 2), np.uint8)  # unused: symmetric
        quantize_matmul_4bits(packed, padded, scales, zero_points, self.block_size, n, k, True)
        codes = np.stack([packed & 0xF, packed >> 4], axis=-1).reshape(n, n_blocks, -1)
        stored = (codes.astype(np.float32) - 8) * scales[..., None]  # symmetric: zero point 8
        errors.add(wt, stored.reshape(n, -1)[:, :k].T)
        return packed, scales

    def int8_blocks(self, wt: np.ndarray, errors: ErrorSum) -> tuple[np.ndarray, np.ndarray]:
        """int4_blocks at 8 bits (MatMulNBits bits=8, for a drafter kept above the target's
        INT4): packed [N, K/block, block] uint8 codes with zero point 128, by ONNX Runtime's
        own 8-bit quantizer."""
        from onnxruntime.capi._pybind_state import quantize_matmul_8bits

        k, n = wt.shape
        n_blocks = -(-k // self.block_size)
        padded = np.zeros((n_blocks * self.block_size, n), np.float32)
        padded[:k] = wt
        packed = np.zeros((n, n_blocks, self.block_size), np.uint8)
        scales = np.zeros((n, n_blocks), np.float32)
        zero_points = np.zeros((n, n_blocks), np.uint8)  # unused: symmetric
        quantize_matmul_8bits(packed, padded, scales, zero_points, self.block_size, n, k, True)
        stored = (packed.astype(np.float32) - 128) * scales[..., None]  # zero point 128
        errors.add(wt, stored.reshape(n, -1)[:, :k].T)
        return packed, scales

    def record_error(self, name: str, w: Rows, errors: ErrorSum) -> None:
        """The relative error of what the graph actually holds, for the export report."""
        self.errors.append(TensorError(name, w.shape, errors.value()))

    def gather(self, table: Rows, ids: str, name: str) -> str:
        """Embedding rows: float32 under fp32 weights; INT4 blocks under int4 weights
        (GatherBlockQuantized reads MatMulNBits' packing), where the row length allows;
        else half (cast up for fp32 compute). The table is read a row per token, so its
        precision costs no speed, and it is a large part of a small model's file (151,936
        rows in Qwen2): INT4 saves 0.34 GB on the 1.5B target against half."""
        if self.quant == "int4" and table.shape[1] % self.block_size == 0:
            packed, scales = self.int4_rows(table, name, flat=True)  # [V, D/2], [V, D/block]
            data = packed.close()
            s = self.const(name + ".scales", scales.astype(self.dtype))
            return self.op(
                "GatherBlockQuantized", data, ids, s, gather_axis=0, quantize_axis=1,
                block_size=self.block_size, bits=4,
            )  # fmt: skip
        return self.gather_float(table, ids, name)

    def gather_float(self, table: Rows, ids: str, name: str) -> str:
        """Embedding rows stored float32 under fp32 weights, else half."""
        stored = np.float32 if self.quant == "fp32" else np.float16
        rows = self.stream(name, table.shape, stored)
        for start, stop in table.blocks(BLOCK_BYTES):
            rows.write(table.read(start, stop).astype(stored))
        if self.quant == "fp32":
            return self.op("Gather", rows.close(), ids)
        gathered = self.op("Gather", rows.close(), ids)
        return gathered if self.dtype == np.float16 else self.cast(gathered, self.dtype)

    # --- what the flavours do differently (export/onnx_standard.py overrides these) ---------

    def step_inputs(self, info: ModelInfo) -> list:
        from onnx import TensorProto, helper

        return [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, "sequence_length"]),
            helper.make_tensor_value_info("seqlens_k", TensorProto.INT32, [1]),
            helper.make_tensor_value_info("total_sequence_length", TensorProto.INT32, []),
            helper.make_tensor_value_info("logits_start", TensorProto.INT64, [1]),
        ]

    def prepare(self, info: ModelInfo, config: dict) -> None:
        """Constants every layer's attention reads (here: GroupQueryAttention's RoPE caches)."""
        for suffix, cfg in rope_configs(config, self.local).items():
            cos, sin = rope_caches(cfg, info.head_dim, info.context_length, pairs_multiple=8)
            self.const("cos_cache" + suffix, cos.astype(self.dtype))
            self.const("sin_cache" + suffix, sin.astype(self.dtype))

    def attend(self, h: str, info: ModelInfo, w: LazyTensors, i: int) -> str:
        return attention(self, h, info, w, i)

    def keep_rows(self, x: str) -> str:
        """Only the rows the caller wants go through the final norm and the (large) lm_head."""
        self.const("int_max", np.array([np.iinfo(np.int64).max], np.int64))
        self.const("axis_seq", np.array([1], np.int64))
        return self.op("Slice", x, "logits_start", "int_max", "axis_seq")

    def model(self):
        from onnx import helper

        graph = helper.make_graph(
            self.nodes, "decoder", self.inputs, self.outputs, initializer=self.initializers
        )
        opsets = [helper.make_opsetid("", OPSET), helper.make_opsetid("com.microsoft", 1)]
        return helper.make_model(
            graph, opset_imports=opsets, producer_name="edgespec", ir_version=IR_VERSION
        )


class ConstStream:
    """One initializer written as its parts arrive. axis 0: parts are blocks of rows, appended
    to the data file in order. axis 1: parts are blocks of columns (a [in, out] weight whose
    output channels are read a block at a time), placed into the tensor's reserved region
    through a memory map that is dropped after each block, so its pages leave the resident
    set. Tensors under DATA_MIN_BYTES, or with no data file, stay inside the graph."""

    def __init__(
        self,
        g: GraphBuilder,
        name: str,
        shape: tuple[int, ...],
        dtype: np.dtype,
        onnx_type: int | None,
        axis: int,
    ) -> None:
        self.g, self.name, self.shape, self.dtype = g, name, shape, dtype
        self.onnx_type, self.axis = onnx_type, axis
        self.nbytes = dtype.itemsize * math.prod(shape)
        self.inline = g.data is None or self.nbytes < DATA_MIN_BYTES
        self.parts: list[np.ndarray] = []  # inline only
        self.done = 0  # rows (axis 0) or columns (axis 1) written
        self.offset = 0
        if not self.inline:
            assert g.data is not None
            self.offset = -g.data.tell() % DATA_ALIGN + g.data.tell()
            g.data.seek(self.offset)

    def write(self, part: np.ndarray) -> None:
        assert part.dtype == self.dtype, (self.name, part.dtype, self.dtype)
        if self.inline:
            self.parts.append(part)
        elif self.axis == 0:
            assert self.g.data is not None
            self.g.data.write(np.ascontiguousarray(part).tobytes())
        else:
            assert self.g.data is not None
            self.g.data.flush()
            region = np.memmap(self.g.data, self.dtype, "r+", self.offset, self.shape)
            region[:, self.done : self.done + part.shape[1]] = part
            region.flush()
            del region
        self.done += part.shape[self.axis] if part.ndim else 1

    def close(self) -> str:
        """Register the initializer (all parts written) and return its name."""
        from onnx import TensorProto, helper, numpy_helper

        assert self.done == (self.shape[self.axis] if self.shape else 1), (self.name, self.shape)
        if self.inline:
            array = self.parts[0] if len(self.parts) == 1 else np.concatenate(self.parts, self.axis)
            tensor = numpy_helper.from_array(array.reshape(self.shape), self.name)
            if self.onnx_type is not None:
                tensor.data_type = self.onnx_type
            self.g.initializers.append(tensor)
            return self.name
        assert self.g.data is not None
        self.g.data.seek(self.offset + self.nbytes)
        tensor = TensorProto(name=self.name, dims=self.shape, data_location=TensorProto.EXTERNAL)
        tensor.data_type = self.onnx_type or helper.np_dtype_to_tensor_dtype(self.dtype)
        location = {"location": DATA_FILE, "offset": str(self.offset), "length": str(self.nbytes)}
        for key, value in location.items():
            tensor.external_data.add(key=key, value=value)
        self.g.initializers.append(tensor)
        return self.name


def build_decoder(
    g: GraphBuilder, info: ModelInfo, config: dict, w: LazyTensors, desc: str = "onnx"
) -> None:
    """The decoder graph; weights are read, quantized and written one at a time (a progress
    bar per layer on a terminal)."""
    from onnx import TensorProto, helper

    eps = float(config.get("rms_norm_eps", 1e-6))
    g.family, g.config = family(config), config
    g.family.check(config, "config.json")
    g.local = g.family.sliding(config)
    g.inputs += g.step_inputs(info)
    g.prepare(info, config)
    norm_constants(g, eps)
    x = g.gather(w.rows("model.embed_tokens.weight"), "input_ids", "model.embed_tokens.weight")
    if g.family.embed_scale:
        root: np.ndarray = np.array(math.sqrt(info.n_embd), np.float32).astype(g.dtype)
        x = g.op("Mul", x, g.const("embed_scale", root))
    layer_inputs: dict[int, str] = {}
    for i in progress(range(info.n_layer), desc, unit="layer"):
        layer_inputs[i] = x
        x = decoder_layer(g, x, info, w, i)
    x = g.keep_rows(x)
    x = norm(g, x, w, "model.norm.weight")
    tied = "lm_head.weight" not in w
    head = w.rows("model.embed_tokens.weight" if tied else "lm_head.weight")
    if info.logit_ranges is not None:  # the input embedding keeps every row
        head = head.take(info.logit_ranges)
    logits = g.matmul(x, head, "lm_head.weight")
    if g.dtype != np.float32:
        logits = g.cast(logits, np.float32)
    g.nodes.append(helper.make_node("Identity", [logits], ["logits"], name="logits"))
    g.outputs.append(
        helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, "n_logits", head.shape[0]])
    )
    if info.top_outputs:
        top_outputs(g, logits, head.shape[0])
    if info.hidden_layers:
        hidden_states(g, [layer_inputs[i] for i in info.hidden_layers], info.n_embd)


def decoder_layer(g: GraphBuilder, x: str, info: ModelInfo, w: LazyTensors, i: int) -> str:
    """x + attention, then + the gated MLP, each branch's input normed (and, with sandwich
    norms, its output: Gemma's post_attention and post_feedforward norms)."""
    p = f"model.layers.{i}."
    sandwich = g.family.sandwich_norms
    attn = g.attend(norm(g, x, w, p + "input_layernorm.weight"), info, w, i)
    out = g.matmul(attn, w.rows(p + "self_attn.o_proj.weight"), p + "o_proj")
    if sandwich:
        out = norm(g, out, w, p + "post_attention_layernorm.weight")
    x = g.op("Add", x, out)
    pre = "pre_feedforward_layernorm" if sandwich else "post_attention_layernorm"
    out = gated_mlp(g, norm(g, x, w, p + pre + ".weight"), w, p)
    if sandwich:
        out = norm(g, out, w, p + "post_feedforward_layernorm.weight")
    return g.op("Add", x, out)


def norm(g: GraphBuilder, x: str, w: LazyTensors, name: str) -> str:
    """rms_norm by the named weight, plus the family's offset (Gemma scales by 1 + w)."""
    return rms_norm(g, x, w[name] + np.float32(g.family.norm_offset), name)


def hidden_states(g: GraphBuilder, layer_inputs: Sequence[str], n_embd: int) -> None:
    """The output hidden_states [1, n, len(layer_inputs) * n_embd] float32: each named layer
    input at every row (before keep_rows), side by side."""
    from onnx import TensorProto, helper

    joined = g.op("Concat", *layer_inputs, axis=-1) if len(layer_inputs) > 1 else layer_inputs[0]
    if g.dtype != np.float32:
        joined = g.cast(joined, np.float32)
    g.nodes.append(helper.make_node("Identity", [joined], ["hidden_states"], name="hidden_states"))
    width = len(layer_inputs) * n_embd
    g.outputs.append(
        helper.make_tensor_value_info("hidden_states", TensorProto.FLOAT, [1, "n_rows", width])
    )


def top_outputs(g: GraphBuilder, logits: str, n_columns: int) -> None:
    """top_id: each row's argmax, the first maximum (as np.argmax); top_p: its softmax
    probability, 1 / sum(exp(logits - max)). logits [1, rows, n_columns] float32. The max and
    argmax are taken in two stages (first_max); the sum is ReduceSum's, which has fast kernels
    of ONNX Runtime's own on CUDA for one row and for several."""
    from onnx import TensorProto, helper

    peak, top_id = first_max(g, logits, n_columns)  # [1, rows, 1] float32, [1, rows] int64
    total = g.op("ReduceSum", g.op("Exp", g.op("Sub", logits, peak)), "axis_last", keepdims=0)
    top = {"top_id": (top_id, TensorProto.INT64),
           "top_p": (g.op("Reciprocal", total), TensorProto.FLOAT)}  # fmt: skip
    for name, (value, dtype) in top.items():
        g.nodes.append(helper.make_node("Identity", [value], [name], name=name))
        g.outputs.append(helper.make_tensor_value_info(name, dtype, [1, "n_logits"]))


def first_max(g: GraphBuilder, x: str, n_columns: int) -> tuple[str, str]:
    """Each row's maximum [1, rows, 1] float32 and the column of its first occurrence [1, rows]
    int64, of x [1, rows, n_columns] float32, in blocks of MAX_BLOCK columns: each block's
    maximum, the first block holding the row's, then the first column of that block holding it.

    On ONNX Runtime's CUDA EP, ReduceMax and ArgMax always run cudnnReduceTensor (only the sums
    have ONNX Runtime's own kernels: reduction_ops.h's fast_reduction_), which takes a few long
    rows slowly: over 151,936 logits ReduceMax took ~80x as long at widths 2 to 9 as at
    width 1 (docs/decisions.md). Here no reduction is longer
    than max(MAX_BLOCK, blocks), and the first has rows x blocks outputs."""
    blocks = -(-n_columns // MAX_BLOCK)
    last = g.const(g.name("last_axis"), np.array([-1]))
    if blocks * MAX_BLOCK > n_columns:  # the last block padded with -inf: never a row's max
        pads = g.const(g.name("pads"), np.array([0, 0, 0, 0, 0, blocks * MAX_BLOCK - n_columns]))
        x = g.op("Pad", x, pads, g.const(g.name("minus_inf"), np.array(-np.inf, np.float32)))
    x = g.op("Reshape", x, g.const(g.name("blocks"), np.array([0, 0, blocks, MAX_BLOCK])))
    maxima = g.op("ReduceMax", x, last, keepdims=0)  # [1, rows, blocks]
    block = g.op("ArgMax", maxima, axis=-1, keepdims=1)  # [1, rows, 1] int64
    spread = g.const(g.name("block_row"), np.array([1, 1, 1, MAX_BLOCK]))
    where = g.op("Expand", g.op("Unsqueeze", block, last), spread)  # [1, rows, 1, MAX_BLOCK]
    held = g.op("GatherElements", x, where, axis=2)  # [1, rows, 1, MAX_BLOCK]: that block
    peak = g.op("ReduceMax", held, last, keepdims=0)  # [1, rows, 1]
    column = g.op("ArgMax", held, axis=-1, keepdims=0)  # [1, rows, 1] int64
    width = g.const(g.name("block_width"), np.array(MAX_BLOCK))
    first = g.op("Add", g.op("Mul", block, width), column)  # [1, rows, 1] int64
    return peak, g.op("Squeeze", first, last)


def norm_constants(g: GraphBuilder, eps: float) -> None:
    """The constants rms_norm reads by name: eps, two (the square's exponent), axis_last."""
    g.const("eps", np.array(eps, np.float32))
    g.const("two", np.array(2.0, np.float32))
    g.const("axis_last", np.array([-1], np.int64))


def rms_norm(g: GraphBuilder, x: str, weight: np.ndarray, name: str) -> str:
    """x / sqrt(mean(x^2) + eps) * weight in float32 (x^2 overflows half), in the pattern
    ONNX Runtime fuses into SimplifiedLayerNormalization (Pow, not Mul, for the square)."""
    half = g.dtype != np.float32
    x32 = g.cast(x, np.float32) if half else x
    mean = g.op("ReduceMean", g.op("Pow", x32, "two"), "axis_last", keepdims=1)
    normed = g.op("Div", x32, g.op("Sqrt", g.op("Add", mean, "eps")))
    if half:  # as HF does it: the weight multiplies in the model's dtype
        normed = g.cast(normed, g.dtype)
    return g.op("Mul", normed, g.const(name, weight.astype(g.dtype)))


def attention(g: GraphBuilder, h: str, info: ModelInfo, w: LazyTensors, i: int) -> str:
    """q, k, v in one packed projection (one matmul reads h once), then GQA over the cache."""
    from onnx import helper

    p = f"model.layers.{i}.self_attn."
    qkv = [qkv_projection(g, h, w, p), "", ""]  # packed: GroupQueryAttention splits it
    if g.family.qk_norm:
        q, k, v = split_qkv(g, qkv[0], info, p)
        q = normed_heads(g, q, info.n_head, info.head_dim, w, p + "q_norm.weight")
        qkv = [q, normed_heads(g, k, info.n_kv_head, info.head_dim, w, p + "k_norm.weight"), v]
    past = [f"past_key_values.{i}.key", f"past_key_values.{i}.value"]
    present = [f"present.{i}.key", f"present.{i}.value"]
    out = g.name(p + "gqa")
    # a sliding-window layer: its own RoPE, and a window ORT's local_window_size counts as HF's
    # sliding_window does (a query sees its last `window` positions, itself included)
    local = bool(g.local) and g.local[i]
    rope = ["cos_cache_local", "sin_cache_local"] if local else ["cos_cache", "sin_cache"]
    g.nodes.append(
        helper.make_node(
            "GroupQueryAttention",
            [*qkv, *past, "seqlens_k", "total_sequence_length", *rope],
            [out, *present], name=out, domain="com.microsoft",
            num_heads=info.n_head, kv_num_heads=info.n_kv_head, do_rotary=1,
            rotary_interleaved=0, scale=g.family.attention_scale(g.config, info.head_dim),
            local_window_size=g.config["sliding_window"] if local else -1,
        )
    )  # fmt: skip
    shape: list[str | int] = [1, info.n_kv_head, "max_sequence_length", info.head_dim]
    g.inputs += [helper.make_tensor_value_info(n, g.onnx_type, shape) for n in past]
    g.outputs += [helper.make_tensor_value_info(n, g.onnx_type, shape) for n in present]
    return out


def qkv_projection(g: GraphBuilder, h: str, w: LazyTensors, p: str) -> str:
    """[1, n, (nh + 2 nkv) hd]: q, k, v in one matmul (h is read once), Qwen2's bias added."""
    qkv = Rows.stack([w.rows(p + f"{n}_proj.weight") for n in "qkv"])  # [(nh + 2 nkv) hd, d]
    x = g.matmul(h, qkv, p + "qkv_proj")
    if p + "q_proj.bias" in w:  # Qwen2
        bias = np.concatenate([w[p + f"{n}_proj.bias"] for n in "qkv"])
        x = g.op("Add", x, g.const(p + "qkv_proj.bias", bias.astype(g.dtype)))
    return x


def split_qkv(g: GraphBuilder, qkv: str, info: ModelInfo, p: str) -> list[str]:
    """q [1, n, nh hd], k and v [1, n, nkv hd] of the packed projection."""
    from onnx import helper

    nh, nkv, hd = info.n_head, info.n_kv_head, info.head_dim
    sizes = g.const(g.name("qkv_sizes"), np.array([nh * hd, nkv * hd, nkv * hd]))
    parts = [g.name(f"{p}{n}") for n in "qkv"]
    g.nodes.append(helper.make_node("Split", [qkv, sizes], parts, axis=-1))
    return parts


def normed_heads(g: GraphBuilder, x: str, n_heads: int, hd: int, w: LazyTensors, name: str) -> str:
    """x [1, n, heads hd] with each head RMS-normed by the [hd] weight (Qwen3's q/k norms)."""
    heads = g.op("Reshape", x, g.const(g.name("heads"), np.array([1, -1, n_heads, hd])))
    normed = norm(g, heads, w, name)
    return g.op("Reshape", normed, g.const(g.name("flat"), np.array([1, -1, n_heads * hd])))


def gated_mlp(g: GraphBuilder, h: str, w: LazyTensors, p: str) -> str:
    """down(act(gate(h)) * up(h)): SwiGLU, or GeGLU with GELU's tanh form (Gemma)."""
    gate = g.matmul(h, w.rows(p + "mlp.gate_proj.weight"), p + "gate_proj")
    up = g.matmul(h, w.rows(p + "mlp.up_proj.weight"), p + "up_proj")
    act = gelu_tanh(g, gate) if g.family.gate == "gelu_tanh" else silu(g, gate)
    return g.matmul(g.op("Mul", act, up), w.rows(p + "mlp.down_proj.weight"), p + "down_proj")


def silu(g: GraphBuilder, x: str) -> str:
    return g.op("Mul", x, g.op("Sigmoid", x))


def gelu_tanh(g: GraphBuilder, x: str) -> str:
    """0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), in standard operators."""
    c = lambda name, v: g.const(g.name(name), np.array(v, np.float32).astype(g.dtype))  # noqa: E731
    inner = g.op("Add", x, g.op("Mul", g.op("Mul", g.op("Mul", x, x), x), c("k", 0.044715)))
    t = g.op("Tanh", g.op("Mul", inner, c("root", math.sqrt(2 / math.pi))))
    return g.op("Mul", g.op("Mul", x, c("half", 0.5)), g.op("Add", t, c("one", 1.0)))
