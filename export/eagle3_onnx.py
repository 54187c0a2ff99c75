"""An EAGLE-3 head's GGUF (export/eagle3_gguf.py's layout) -> the ONNX folder ONNX Runtime
drafts with beside an ONNX target exported with the head's extract layers (hidden_layers).

Two graphs, as llama.cpp runs the head (runtimes/llama_heads.py):

    encode.onnx   features [1, n, 3 * n_embd_tgt] float32 -> g [1, n, n_embd] float32 (fc)
    model.onnx    the decoder, at head position P the pair (input_ids P, g P):
                  input_ids [1, n] int64, g [1, n, n_embd] float32, seqlens_k,
                  total_sequence_length, logits_start, past_key_values.0.key/value ->
                  logits [1, rows, n_out] float32 (n_out: the draft vocabulary, head.json's
                  d2t maps its columns to target ids), prenorm [1, rows, n_embd] float32
                  (the pre-norm state: the next position's g while drafting; the normed
                  one for EAGLE-3.1's norm_output), present.0.*

EAGLE-3.1's fc_norm (shared.FC_NORM_KEY) is an RMSNorm on each feature in encode.onnx.
The decoder normalizes the token embedding (attn_norm) and g (attn_norm_2), attends over
their concatenation [2 * n_embd] with GroupQueryAttention (its own cache, in place as the
target's), adds g back, then a Llama MLP; output_norm and the output layer on the kept rows.
The token embedding is the head's own where it has one, else the target's; the output layer
the head's, else the target's: their rows are written into the decoder, so the head needs
nothing from the target's graph. head_dim: eagle3.attention.key_length where the head sets it
(SpecForge's Qwen3 heads), else n_embd / n_head. q and k are
stored for llama.cpp's adjacent-pair RoPE; they are written back in Hugging Face's order for
GroupQueryAttention's rotate-half RoPE, as a GGUF target's are (export/checkpoint.py).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgespec.errors import ModelFileError
from edgespec.export.checkpoint import (
    Checkpoint,
    LazyTensors,
    Rows,
    unpermute_from_interleaved_rope,
)
from edgespec.export.eagle3_gguf import ARCH
from edgespec.export.onnx_export import (
    COMPUTES,
    DATA_FILE,
    MODEL_FILE,
    GraphBuilder,
    ModelInfo,
    attention,
    gated_mlp,
    norm_constants,
    rms_norm,
)
from edgespec.runtimes.onnx_heads import ENCODE_FILE, HEAD_JSON
from edgespec.runtimes.shared import (
    FC_NORM_KEY,
    NORM_OUTPUT_KEY,
    check_head_arch,
    check_head_fit,
    eagle31_norms,
)

HEAD_FORMAT = "edgespec-onnx-head/1"
# GGUF tensor -> the Hugging Face name attention() and gated_mlp() read (layer 0)
LAYER_NAMES = {
    "blk.0.attn_q.weight": "model.layers.0.self_attn.q_proj.weight",
    "blk.0.attn_k.weight": "model.layers.0.self_attn.k_proj.weight",
    "blk.0.attn_v.weight": "model.layers.0.self_attn.v_proj.weight",
    "blk.0.attn_output.weight": "model.layers.0.self_attn.o_proj.weight",
    "blk.0.ffn_gate.weight": "model.layers.0.mlp.gate_proj.weight",
    "blk.0.ffn_up.weight": "model.layers.0.mlp.up_proj.weight",
    "blk.0.ffn_down.weight": "model.layers.0.mlp.down_proj.weight",
}


@dataclass(frozen=True)
class HeadInfo:
    """head.json: what the runtime needs to know of a head folder."""

    layers: list[int]  # the target layers whose inputs it reads (eagle3.target_layers)
    n_embd: int
    n_embd_tgt: int
    n_head: int
    n_kv_head: int
    head_dim: int
    n_vocab: int  # the target's vocabulary
    n_out: int  # output columns (the draft vocabulary)
    d2t: list[int] | None  # each column's target token id; None: column = id
    context_length: int
    compute: str
    format: str = HEAD_FORMAT


class HeadTensors(LazyTensors):
    """The head's layer weights under the names attention() and gated_mlp() read, q and k back in
    Hugging Face's row order."""

    def __init__(self, weights: dict[str, np.ndarray], n_head: int, n_kv_head: int) -> None:
        self.entries = {hf: weights[name] for name, hf in LAYER_NAMES.items()}
        for kind, heads in (("q", n_head), ("k", n_kv_head)):
            name = f"model.layers.0.self_attn.{kind}_proj.weight"
            self.entries[name] = unpermute_from_interleaved_rope(self.entries[name], heads)

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self.entries[name].shape)

    def read_rows(self, name: str, start: int, stop: int) -> np.ndarray:
        return self.entries[name][start:stop]


def export_head_onnx(
    head_gguf: Path,
    target: Checkpoint,
    out_dir: Path,
    *,
    quant: str = "fp32",
    compute: str = "fp32",
    block_size: int = 32,
) -> HeadInfo:
    """Write out_dir/{encode.onnx, model.onnx, model.onnx.data, head.json} for the head in
    head_gguf, checked against the target it drafts for (refused as one line, nothing
    written). quant: its weights' and its copy of the target's embedding (the bundle gives
    it the draft's precision: on the CPU INT4, whose embedding copy is 0.12 GB for Qwen2.5
    where float32 took 0.93)."""
    meta, weights = read_head(head_gguf)
    info = head_info(head_gguf, meta, weights, target, compute)
    out_dir.mkdir(parents=True, exist_ok=True)
    dtype = COMPUTES[compute]
    encode = GraphBuilder(quant, dtype, block_size)
    encode_graph(encode, weights["fc.weight"], meta["fc_norm"], meta["rms_eps"])
    save(encode, out_dir / ENCODE_FILE)
    with (out_dir / DATA_FILE).open("w+b") as data:
        decode = GraphBuilder(quant, dtype, block_size, data=data)
        config = {"rope_theta": meta["rope_theta"]}
        decode_graph(decode, info, config, meta["rms_eps"], weights, target,
                     carry_normed=meta["norm_output"] is not None)  # fmt: skip
    save(decode, out_dir / MODEL_FILE)
    (out_dir / HEAD_JSON).write_text(json.dumps(asdict(info)) + "\n")
    return info


def save(g: GraphBuilder, path: Path) -> None:
    import onnx

    onnx.save_model(g.model(), str(path))


def read_head(path: Path) -> tuple[dict, dict[str, np.ndarray]]:
    """The head GGUF's hyperparameters (head_metadata) and its tensors (float32; d2t
    int64)."""
    from edgespec.quant.gguf_quant import read_rows

    reader, meta = head_metadata(path)
    weights = {}
    for t in reader.tensors:
        if t.name == "d2t":
            weights[t.name] = np.array(t.data, dtype=np.int64).reshape(-1)
        else:
            shape = tuple(int(d) for d in reversed(t.shape.tolist()))
            weights[t.name] = read_rows(path, t, 0, t.data.shape[0]).reshape(shape)
    return meta, weights


def head_metadata(path: Path) -> tuple[Any, dict]:
    """The head GGUF's reader and hyperparameters, its tensors unread; refused as one line
    where it is not an EAGLE-3 head or asks for what the ONNX graphs do not compute."""
    import gguf

    try:
        reader = gguf.GGUFReader(str(path))
    except (OSError, ValueError) as e:
        raise ModelFileError(f"cannot read the draft head {path.name} as GGUF: {e}") from e

    def field(key: str):
        f = reader.fields.get(key)
        return None if f is None else f.contents()

    check_head_arch(path.name, field("general.architecture"))
    flags = [f for f in ("norm_before_fc", "norm_before_residual") if field(f"{ARCH}.{f}")]
    if flags:
        raise ModelFileError(
            f"{path.name} sets {', '.join(flags)}, which the ONNX head does not compute yet; "
            "draft with it on a llama.cpp target"
        )
    if any(t.name == "rope_freqs.weight" for t in reader.tensors):
        raise ModelFileError(
            f"{path.name} scales its RoPE (rope_freqs, Llama 3.1), which the ONNX head does not "
            "yet; draft with it on a llama.cpp target"
        )
    meta = {
        "layers": [int(i) for i in field(f"{ARCH}.target_layers") or []],
        "hidden": field(f"{ARCH}.target_hidden_size"),
        "n_head": int(field(f"{ARCH}.attention.head_count")),
        "head_dim": field(f"{ARCH}.attention.key_length"),  # where not n_embd / n_head
        "n_kv_head": int(field(f"{ARCH}.attention.head_count_kv")),
        "n_ctx": int(field(f"{ARCH}.context_length")),
        "rope_theta": float(field(f"{ARCH}.rope.freq_base") or 10000.0),
        "rms_eps": float(field(f"{ARCH}.attention.layer_norm_rms_epsilon")),
        "n_tokens": len(field("tokenizer.ggml.tokens") or []),
    }
    eagle31 = {key: field(key) for key in (FC_NORM_KEY, NORM_OUTPUT_KEY) if field(key)}
    n_embd = int(field(f"{ARCH}.embedding_length"))
    meta["fc_norm"], meta["norm_output"] = eagle31_norms(
        path.name, eagle31, int(meta["hidden"] or 0), n_embd
    )
    return reader, meta


def head_info(
    path: Path, meta: dict, weights: dict[str, np.ndarray], target: Checkpoint, compute: str
) -> HeadInfo:
    """The head's shape, refused where it does not fit the target (check_head_fit)."""
    config = target.config
    check_head_fit(
        path.name, Path(target.source).name,
        hidden=meta["hidden"], n_embd_tgt=config["hidden_size"],
        layers=meta["layers"], n_layer_tgt=config["num_hidden_layers"],
        n_vocab=meta["n_tokens"], n_vocab_tgt=config["vocab_size"],
    )  # fmt: skip
    n_embd, n_out = weights["fc.weight"].shape[0], output_rows(weights, target).shape[0]
    d2t = weights.get("d2t")
    return HeadInfo(
        layers=meta["layers"],
        n_embd=int(n_embd),
        n_embd_tgt=int(config["hidden_size"]),
        n_head=meta["n_head"],
        n_kv_head=meta["n_kv_head"],
        head_dim=int(meta["head_dim"] or int(n_embd) // meta["n_head"]),
        n_vocab=int(config["vocab_size"]),
        n_out=int(n_out),
        d2t=None if d2t is None else [int(i) for i in d2t],
        context_length=meta["n_ctx"],
        compute=compute,
    )


def embedding_rows(weights: dict[str, np.ndarray], target: Checkpoint) -> Rows:
    """The head's own token embedding where it has one (speculators' heads), else the
    target's, as llama.cpp's eagle3 takes them."""
    own = weights.get("token_embd.weight")
    return Rows.of(own) if own is not None else target.weights.rows("model.embed_tokens.weight")


def output_rows(weights: dict[str, np.ndarray], target: Checkpoint) -> Rows:
    """The head's output layer, else the target's (lm_head, or its tied embedding): a head
    published without lm_head drafts over the target's vocabulary, as on llama.cpp."""
    if "output.weight" in weights:
        return Rows.of(weights["output.weight"])
    name = "lm_head.weight" if "lm_head.weight" in target.weights else "model.embed_tokens.weight"
    return target.weights.rows(name)


def encode_graph(g: GraphBuilder, fc: np.ndarray, fc_norm: np.ndarray | None, eps: float) -> None:
    """features [1, n, 3 * n_embd_tgt] float32 -> g [1, n, n_embd] float32; fc_norm
    [3, n_embd_tgt] (EAGLE-3.1): first an RMSNorm on each feature, a weight row each."""
    from onnx import TensorProto, helper

    g.inputs.append(
        helper.make_tensor_value_info("features", TensorProto.FLOAT, [1, "n", fc.shape[1]])
    )
    x = "features" if g.dtype == np.float32 else g.cast("features", g.dtype)
    if fc_norm is not None:  # [1, n, 3, n_embd_tgt] normed over the last axis, then flat again
        norm_constants(g, eps)
        grouped = g.op(
            "Reshape", x, g.const("grouped", np.array([1, -1, *fc_norm.shape], np.int64))
        )
        normed = rms_norm(g, grouped, fc_norm, "fc_norm.weight")
        x = g.op("Reshape", normed, g.const("flat", np.array([1, -1, fc_norm.size], np.int64)))
    out = g.matmul(x, Rows.of(fc), "fc.weight")
    out = out if g.dtype == np.float32 else g.cast(out, np.float32)
    g.nodes.append(helper.make_node("Identity", [out], ["g"], name="g"))
    g.outputs.append(helper.make_tensor_value_info("g", TensorProto.FLOAT, [1, "n", fc.shape[0]]))


def decode_graph(
    g: GraphBuilder,
    info: HeadInfo,
    config: dict,
    eps: float,
    weights: dict[str, np.ndarray],
    target: Checkpoint,
    *,
    carry_normed: bool = False,
) -> None:
    """The head's decoder layer, norm and output layer (module docstring); carry_normed
    (EAGLE-3.1's norm_output): the state output is the norm's, not the layer's."""
    from onnx import TensorProto, helper

    d = info.n_embd
    layer = ModelInfo(
        arch=ARCH, n_layer=1, n_head=info.n_head, n_kv_head=info.n_kv_head,
        head_dim=info.head_dim, n_embd=d, n_vocab=info.n_vocab,
        context_length=info.context_length, quant=g.quant, compute=info.compute,
        block_size=None, accuracy_level=None, bos_id=None, eos_id=None, sliding_window=None,
    )  # fmt: skip
    g.inputs += g.step_inputs(layer)
    g.inputs.append(
        helper.make_tensor_value_info("g", TensorProto.FLOAT, [1, "sequence_length", d])
    )
    g.prepare(layer, config)
    norm_constants(g, eps)
    embd = g.gather(embedding_rows(weights, target), "input_ids", "model.embed_tokens.weight")
    state = "g" if g.dtype == np.float32 else g.cast("g", g.dtype)
    x = rms_norm(g, embd, weights["blk.0.attn_norm.weight"], "attn_norm.weight")
    fused = rms_norm(g, state, weights["blk.0.attn_norm_2.weight"], "attn_norm_2.weight")
    w = HeadTensors(weights, info.n_head, info.n_kv_head)
    attn = attention(g, g.op("Concat", x, fused, axis=-1), layer, w, 0)
    o_proj = g.matmul(attn, w.rows("model.layers.0.self_attn.o_proj.weight"), "o_proj")
    ffn_inp = g.op("Add", o_proj, state)
    h = rms_norm(g, ffn_inp, weights["blk.0.ffn_norm.weight"], "ffn_norm.weight")
    out = g.keep_rows(g.op("Add", ffn_inp, gated_mlp(g, h, w, "model.layers.0.")))
    normed = rms_norm(g, out, weights["output_norm.weight"], "output_norm.weight")
    logits = g.matmul(normed, output_rows(weights, target), "output.weight")
    carried = normed if carry_normed else out
    for name, value, width in (("logits", logits, info.n_out), ("prenorm", carried, d)):
        value = value if g.dtype == np.float32 else g.cast(value, np.float32)
        g.nodes.append(helper.make_node("Identity", [value], [name], name=name))
        g.outputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, "rows", width]))
