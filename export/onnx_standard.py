"""The standard-operator flavour of export/onnx_export.py's decoder graph, for TensorRT.

TensorRT parses standard ONNX only: no GroupQueryAttention, MatMulNBits or
GatherBlockQuantized (ONNX Runtime's contrib operators), and no `Attention` operator (it needs
TensorRT 10.14 or newer; JetPack 6 ships 10.3). The graph is the one onnx_export.build_decoder
writes; this builder changes what differs:

- attention is MatMul / Softmax over a fixed-capacity KV buffer, with a causal mask built
  from the write position; GQA by grouping the query heads, no repeated keys;
- the new K/V rows are scattered into the buffer inside the graph (ScatterElements at
  `position + i`): `present.*` is the whole buffer with them written, so the runtime can
  alternate two buffers (the TensorRT-LLM Python runtime's pattern) and roll back by length;
- RoPE with Gather / Mul / Concat on rotate-half halves;
- weights as explicit Q/DQ: INT4 block-quantized DequantizeLinear (opset 21, block_size,
  signed, no zero point: what TensorRT's IDequantizeLayer accepts), FP8 E4M3 per-channel DQ,
  or plain FP16; the embedding table is FP16 (a gather of INT4 rows is not a standard op).

Inputs:  input_ids [1, n] int32; position [1] int32 (tokens already in the cache: where the
         n new rows go); logit_rows [m] int32 (which of the n rows get logits: the last one
         for prefill and drafting, all of them for verify); past_key_values.{i}.key/value
         [1, n_kv_head, capacity, head_dim].
Outputs: logits [1, m, V] float32; present.{i}.key/value [1, n_kv_head, capacity, head_dim].
Every shape follows from input shapes (no value decides one), so each width is one
TensorRT optimization-profile point and one CUDA graph.
"""

from __future__ import annotations

import numpy as np

from edgespec.export.checkpoint import LazyTensors, Rows
from edgespec.export.onnx_export import (
    BLOCK_BYTES,
    GraphBuilder,
    ModelInfo,
    norm,
    qkv_projection,
    rope_caches,
    rope_configs,
    split_qkv,
)
from edgespec.quant.reference import ErrorSum

MASKED = -1e30  # added to a masked score in float32: exp() gives exactly 0


class StandardGraphBuilder(GraphBuilder):
    """GraphBuilder with standard operators only (module docstring)."""

    FLAVOUR = "standard"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.rope: dict[str, str] = {}
        self.head_dim = 0
        self.pairs: dict[str, int] = {}  # the pairs RoPE turns, by suffix (partial rotary: not all)
        self.positions = self.mask = self.mask_local = ""
        self.const("zero_axis", np.array([0], np.int64))
        self.const("score_zero", np.array(0.0, np.float32))
        self.const("score_masked", np.array(MASKED, np.float32))

    def step_inputs(self, info: ModelInfo) -> list:
        from onnx import TensorProto, helper

        return [
            helper.make_tensor_value_info("input_ids", TensorProto.INT32, [1, "sequence_length"]),
            helper.make_tensor_value_info("position", TensorProto.INT32, [1]),
            helper.make_tensor_value_info("logit_rows", TensorProto.INT32, ["n_logits"]),
        ]

    def prepare(self, info: ModelInfo, config: dict) -> None:
        """Per step, once for every layer: the positions of the new rows, their RoPE cos/sin,
        and the causal mask over the whole buffer [group * n, capacity] float32."""
        i64 = lambda name, v: self.const(name, np.array(v, np.int64))  # noqa: E731
        i64("idx1", [1])
        i64("idx2", [2])
        self.const("zero_i32", np.array(0, np.int32))  # Range in int32: older TensorRT
        self.const("one_i32", np.array(1, np.int32))  # versions fill int64 poorly
        width = self.op("Gather", self.op("Shape", "input_ids"), "idx1", axis=0)  # [1] n
        steps = self.range32(width)  # [n] int32
        self.positions = self.op("Add", "position", steps)  # [n] int32
        for suffix, cfg in rope_configs(config, self.local).items():
            cos, sin = rope_caches(cfg, info.head_dim, info.context_length)
            self.head_dim, self.pairs[suffix] = info.head_dim, cos.shape[1]
            for name, table in (("cos", cos), ("sin", sin)):
                rows = self.op("Gather", self.const(f"{name}_cache{suffix}",
                               table.astype(self.dtype)), self.positions, axis=0)  # fmt: skip
                self.rope[name + suffix] = self.op("Unsqueeze", rows, "idx1")  # [n, 1, hd/2]
        past0 = self.op("Shape", "past_key_values.0.key")
        slots = self.op("Unsqueeze", self.range32(self.op("Gather", past0, "idx2", axis=0)),
                        "zero_axis")  # fmt: skip  # [1, C] int32
        rows = self.op("Unsqueeze", self.positions, "idx1")  # [n, 1]
        visible = self.op("LessOrEqual", slots, rows)  # [n, C]
        tiles = i64("mask_tiles", [info.n_head // info.n_kv_head, 1])
        self.mask = self.op("Tile", self.op("Where", visible, "score_zero", "score_masked"), tiles)
        if any(self.local):  # a sliding layer sees its last `window` positions
            window = self.const("window", np.array(config["sliding_window"], np.int32))
            recent = self.op("Less", self.op("Sub", rows, slots), window)
            near = self.op("And", visible, recent)
            self.mask_local = self.op("Tile", self.op("Where", near, "score_zero",
                                                      "score_masked"), tiles)  # fmt: skip

    def range32(self, length: str) -> str:
        """0, 1, ..., length - 1 as int32, from a [1] int64 length (a Shape element)."""
        return self.op("Range", "zero_i32", self.cast(self.op("Squeeze", length), np.int32),
                       "one_i32")  # fmt: skip

    def attend(self, h: str, info: ModelInfo, w: LazyTensors, i: int) -> str:
        """softmax(q k^T / sqrt(hd) + mask) v over the buffer with this step's rows written."""

        nh, nkv, hd = info.n_head, info.n_kv_head, info.head_dim
        p = f"model.layers.{i}.self_attn."
        q, k, v = split_qkv(self, qkv_projection(self, h, w, p), info, p)
        q, k = self.split_heads(q, nh, hd), self.split_heads(k, nkv, hd)
        if self.family.qk_norm:
            q, k = (norm(self, x, w, p + f"{n}_norm.weight") for x, n in ((q, "q"), (k, "k")))
        local = bool(self.local) and self.local[i]
        suffix = "_local" if local else ""
        q = self.heads_first(self.rotate(q, suffix))  # [1, nh, n, hd]
        k = self.heads_first(self.rotate(k, suffix))  # [1, nkv, n, hd]
        v = self.heads_first(self.split_heads(v, nkv, hd))
        keys = self.scatter(f"past_key_values.{i}.key", k, f"present.{i}.key", info)
        values = self.scatter(f"past_key_values.{i}.value", v, f"present.{i}.value", info)
        grouped = self.const(self.name("grouped"), np.array([1, nkv, -1, hd]))
        q = self.op("Reshape", q, grouped)  # [1, nkv, group * n, hd]: head h = kv * group + j
        scores = self.op("MatMul", q, self.op("Transpose", keys, perm=[0, 1, 3, 2]))
        factor = self.family.attention_scale(self.config, hd)
        scale = self.const(self.name("scale"), np.array(factor, np.float32))
        if self.dtype != np.float32:  # scores and softmax in float32 (fp16 sums overflow)
            scores = self.cast(scores, np.float32)
        mask = self.mask_local if local else self.mask
        probs = self.op("Softmax", self.op("Add", self.op("Mul", scores, scale), mask),
                        axis=-1)  # fmt: skip
        if self.dtype != np.float32:
            probs = self.cast(probs, self.dtype)
        out = self.op("MatMul", probs, values)  # [1, nkv, group * n, hd]
        out = self.op("Reshape", out, self.const(self.name("heads"), np.array([1, nh, -1, hd])))
        out = self.op("Transpose", out, perm=[0, 2, 1, 3])  # [1, n, nh, hd]
        return self.op("Reshape", out, self.const(self.name("flat"), np.array([1, -1, nh * hd])))

    def split_heads(self, x: str, n_heads: int, hd: int) -> str:  # -> [1, n, heads, hd]
        return self.op("Reshape", x, self.const(self.name("heads"), np.array([1, -1, n_heads, hd])))

    def heads_first(self, x: str) -> str:  # [1, n, heads, hd] -> [1, heads, n, hd]
        return self.op("Transpose", x, perm=[0, 2, 1, 3])

    def rotate(self, x: str, suffix: str = "") -> str:
        """HF rotate-half RoPE on x [1, n, heads, hd]: (x1 cos - x2 sin, x2 cos + x1 sin), x1
        and x2 the halves of the turned dimensions; the unturned ones pass as they are."""
        from onnx import helper

        cos, sin = self.rope["cos" + suffix], self.rope["sin" + suffix]
        parts = [self.name("x1"), self.name("x2")]
        half = self.pairs[suffix]
        if 2 * half < self.head_dim:
            parts.append(self.name("unturned"))
            widths = np.array([half, half, self.head_dim - 2 * half])
            sizes = self.const(self.name("rope_parts"), widths)
            self.nodes.append(helper.make_node("Split", [x, sizes], parts, axis=-1))
        else:
            self.nodes.append(helper.make_node("Split", [x], parts, axis=-1, num_outputs=2))
        x1, x2 = parts[:2]
        first = self.op("Sub", self.op("Mul", x1, cos), self.op("Mul", x2, sin))
        second = self.op("Add", self.op("Mul", x2, cos), self.op("Mul", x1, sin))
        return self.op("Concat", first, second, *parts[2:], axis=-1)

    def scatter(self, past: str, new: str, present: str, info: ModelInfo) -> str:
        """past [1, nkv, C, hd] with new [1, nkv, n, hd] written at rows position..+n-1."""
        from onnx import helper

        rows = self.op("Reshape", self.positions, self.const(self.name("rows"),
                                                             np.array([1, 1, -1, 1])))  # fmt: skip
        index = self.op("Expand", rows, self.op("Shape", new))
        self.nodes.append(helper.make_node("ScatterElements", [past, index, new], [present],
                                           name=present, axis=2))  # fmt: skip
        shape: list[str | int] = [1, info.n_kv_head, "max_sequence_length", info.head_dim]
        self.inputs.append(helper.make_tensor_value_info(past, self.onnx_type, shape))
        self.outputs.append(helper.make_tensor_value_info(present, self.onnx_type, shape))
        return present

    def keep_rows(self, x: str) -> str:
        return self.op("Gather", x, "logit_rows", axis=1)  # [1, m, d]

    def gather(self, table: Rows, ids: str, name: str) -> str:
        return self.gather_float(table, ids, name)

    def matmul(self, x: str, w: Rows, name: str) -> str:
        n_out, n_in = w.shape
        if self.quant != "int4" or n_in % self.block_size or n_out % 2:
            return super().matmul(x, w, name)  # fp8 is already DQ; fp16 / fp32 plain
        return self.op("MatMul", x, self.int4_weight(w, name))

    def int4_weight(self, w: Rows, name: str) -> str:
        """DequantizeLinear(int4 [in, out], scales [in / block, out], axis 0, block_size):
        [in, out] in the compute dtype. Signed codes (-8..7, no zero point), two per byte
        along the output axis, low nibble first; read an even number of output rows at a
        time, so a block of rows is a whole-byte block of the stored columns."""
        from onnx import TensorProto

        n_out, n_in = w.shape
        bits = self.stream(name + ".q4", (n_in, n_out // 2), np.uint8, axis=1)
        step = max(2, BLOCK_BYTES // (4 * n_in) // 2 * 2)
        scales, errors = [], ErrorSum()
        for start in range(0, n_out, step):
            wt = np.ascontiguousarray(w.read(start, min(start + step, n_out)).T)  # [in, cols]
            packed, block_scales = self.int4_blocks(wt, errors)  # [cols, in/B, B/2], [cols, in/B]
            codes = np.stack([packed & 0xF, packed >> 4], -1).reshape(len(packed), -1)
            signed = (codes.T.astype(np.int16) - 8).astype(np.uint8) & 0xF  # [in, cols]
            bits.write(signed[:, 0::2] | (signed[:, 1::2] << 4))
            scales.append(block_scales.T)
        self.record_error(name, w, errors)
        q = bits.close()
        tensor = self.initializers[-1]
        assert tensor.name == q
        del tensor.dims[:]
        tensor.dims.extend([n_in, n_out])  # the logical shape: two codes per stored byte
        tensor.data_type = TensorProto.INT4
        scale = self.const(name + ".scales", np.concatenate(scales, axis=1).astype(self.dtype))
        return self.op("DequantizeLinear", q, scale, axis=0, block_size=self.block_size)

    def model(self):
        model = super().model()
        domains = [o for o in model.opset_import if o.domain == "com.microsoft"]
        for opset in domains:  # standard operators only: no contrib domain at all
            model.opset_import.remove(opset)
        return model
