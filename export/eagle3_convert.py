"""A Hugging Face EAGLE-3 head folder -> the GGUF that llama.cpp's eagle3 architecture loads.

Published EAGLE-3 heads (yuhuili/EAGLE3-LLaMA3.1-Instruct-8B, the Qwen ones) are one Llama
decoder layer: config.json (architectures LlamaForCausalLMEagle3) and safetensors holding
fc.weight [hidden, 3 * target hidden], midlayer.* (input_layernorm on the token embedding,
hidden_norm on the fused features, self_attn.{q,k,v,o}_proj with q/k/v over the concatenation
[2 * hidden], post_attention_layernorm, mlp.*), norm.weight, lm_head.weight [draft vocab,
hidden], and d2t / t2d, the draft vocabulary's mapping. The GGUF names and metadata are those
of the vendored llama.cpp (src/models/eagle3.cpp and its conversion/llama.py), which
runtimes/llama_heads.py loads:

    fc.weight -> fc.weight                 midlayer.input_layernorm -> blk.0.attn_norm
    midlayer.hidden_norm -> blk.0.attn_norm_2    midlayer.self_attn.{q,k,v,o}_proj ->
    blk.0.attn_{q,k,v,output}    midlayer.post_attention_layernorm -> blk.0.ffn_norm
    midlayer.mlp.{gate,up,down}_proj -> blk.0.ffn_{gate,up,down}    norm -> output_norm
    lm_head -> output    embed_tokens -> token_embd (a head with its own)
    input_norm -> enc.output_norm (norm_before_fc heads)
    d2t (HF: offsets, target id = draft id + d2t[draft id]) -> d2t int64 absolute target ids;
    llama.cpp scatters the draft logits into the target's vocabulary (-inf elsewhere)
    t2d (the inverse, a mask over the target vocabulary): not needed, not written
    EAGLE-3.1: fc_norm.{0,1,2} -> metadata edgespec.eagle3.fc_norm, and where norm_output is
    true norm -> edgespec.eagle3.norm_output too (runtimes/shared.py: the head applies them)

q and k are permuted from HF's rotate-halves RoPE to llama.cpp's adjacent pairs (eagle3 uses
LLAMA_ROPE_TYPE_NORM). The metadata eagle3.target_layers (the 3 target layers whose inputs the
head reads) is config.json's eagle_aux_hidden_state_layer_ids where given, else llama.cpp's
default [2, n // 2, n - 3] for an n-layer target (EAGLE-3's own choice). Given ids come in two
conventions: inputs of layers (the default's, llama.cpp's) and outputs of layers
(SpecForge-trained heads: [1, 17, 32] for a 36-layer Qwen3 names the states [2, 18, 33] does).
As SGLang decides (sgl-project/sglang#25454), ids starting at 1 name outputs and are written
plus one, others as given; the vendored llama.cpp's converter writes them all as given. The
tokenizer is the target's, copied from its GGUF: the head's vocabulary must be the target's.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgespec.errors import ModelFileError
from edgespec.export.checkpoint import (
    GgufMetadata,
    LazyTensors,
    Rows,
    open_gguf,
    permute_for_interleaved_rope,
)
from edgespec.export.eagle3_layouts import EAGLE_ARCHS, LayerIds, read_config, read_weights
from edgespec.export.hf_to_gguf import StreamedTensor
from edgespec.plumbing.progress import progress
from edgespec.runtimes.shared import FC_NORM_KEY, NORM_OUTPUT_KEY, HeadMismatchError

log = logging.getLogger(__name__)

ARCH = "eagle3"
LAYER = "midlayer."
LAYER_TENSORS = {  # HF name under midlayer. -> GGUF name under blk.0.
    "input_layernorm.weight": "attn_norm.weight",
    "hidden_norm.weight": "attn_norm_2.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}
TOP_TENSORS = {
    "fc.weight": "fc.weight",
    "norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
    "embed_tokens.weight": "token_embd.weight",
    "input_norm.weight": "enc.output_norm.weight",
}
NOT_WRITTEN = ("t2d",)  # the inverse of d2t; llama.cpp needs only d2t
OUTTYPES = {"f16": np.float16, "f32": np.float32}


@dataclass(frozen=True)
class Target:
    """What the head must fit, read from the target's GGUF metadata."""

    path: Path
    n_embd: int
    n_layer: int
    n_vocab: int
    tokenizer: dict[str, tuple[Any, list]]  # tokenizer.* key -> (value, GGUF value types)


def convert_eagle3(hf_folder: Path, target_gguf: Path, out: Path, *, outtype: str = "f16") -> Path:
    """Write the EAGLE-3 head in hf_folder as a GGUF for llama.cpp's eagle3 architecture,
    checked against the target it drafts for; return out.

    hf_folder: a Hugging Face EAGLE-3 head (config.json with architectures
    LlamaForCausalLMEagle3 or Eagle3LlamaForCausalLM, or a one-layer Llama config with
    draft_vocab_size; weights in *.safetensors). target_gguf: the target's GGUF (float or
    quantized; only its metadata is read). out: the GGUF to write (written beside as
    out.part, then renamed, so a failed conversion leaves no out). outtype: "f16" (matrices
    in f16, norms in f32, d2t int64) or "f32".

    Raises ModelFileError (HeadMismatchError where the head does not fit the target) with a
    one-line message naming the problem and the fix, before anything is written, for: a
    folder that is not an EAGLE-3 head or holds only pytorch_model.bin; a missing, unknown or
    misshapen tensor; RoPE scaling other than none or llama3; hidden size, extract layers or
    vocabulary (config vocab_size, lm_head rows, d2t size, range and uniqueness) that do not
    fit the target. Reads the head's tensors one at a time and the target's metadata only.
    """
    import gguf

    if outtype not in OUTTYPES:
        raise ValueError(f"outtype {outtype!r} is not one of {', '.join(OUTTYPES)}")
    hf_folder, target_gguf, out = Path(hf_folder), Path(target_gguf), Path(out)
    config, ids, weights = read_head(hf_folder)
    target = read_target(target_gguf)
    head = HeadShape.of(hf_folder, config, weights)
    layers = check_fit(hf_folder, config, ids, head, target)
    d2t = draft_mapping(hf_folder, config, weights, target)
    tensors = plan_tensors(hf_folder, weights, head, target, d2t)
    rope_freqs = llama3_rope_factors(hf_folder, config, head.head_dim)

    part = out.with_name(out.name + ".part")
    writer = gguf.GGUFWriter(str(part), ARCH)
    write_metadata(writer, hf_folder, config, head, layers, target, outtype)
    for key, values in eagle31_metadata(weights, head).items():
        writer.add_array(key, values.astype(np.float32).tolist())
    streams: list[tuple[str, Rows, np.dtype]] = []
    for name, rows in tensors.items():
        dtype = np.dtype(OUTTYPES[outtype] if len(rows.shape) == 2 else np.float32)
        if name.endswith(("attn_q.weight", "attn_k.weight")):
            n = head.n_head if name.endswith("attn_q.weight") else head.n_head_kv
            rows = Rows.of(permute_for_interleaved_rope(rows.read(0, rows.shape[0]), n))
        streams.append((name, rows, dtype))
    if rope_freqs is not None:
        streams.append(("rope_freqs.weight", Rows.of(rope_freqs), np.dtype(np.float32)))
    if d2t is not None:
        streams.append(("d2t", Rows.of(d2t), np.dtype(np.int64)))
    for name, rows, dtype in streams:
        writer.add_tensor_info(name, rows.shape, dtype, dtype.itemsize * rows.nbytes // 4)
    try:
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for _, rows, dtype in progress(streams, f"gguf {out.name}", unit="tensor"):
            writer.write_tensor_data(StreamedTensor(rows, dtype))  # type: ignore[arg-type]
        writer.close()
        os.replace(part, out)
    finally:
        part.unlink(missing_ok=True)
    log.info("wrote the EAGLE-3 head %s (extract layers %s)", out, layers)
    return out


def read_head(folder: Path) -> tuple[dict, LayerIds, LazyTensors]:
    """The head's flat config, extract-layer ids and tensors (export/eagle3_layouts.py reads
    every published layout), refused where it is not a one-layer EAGLE-3 head."""
    if not folder.is_dir():
        raise ModelFileError(
            f"{folder} is not a folder; give the EAGLE-3 head's Hugging Face folder "
            "(config.json and *.safetensors or pytorch_model.bin)"
        )
    if not (folder / "config.json").is_file():
        raise ModelFileError(f"{folder} is missing config.json; download the head's config")
    config, ids = read_config(folder)
    archs = config.get("architectures") or ["(none)"]
    arch = archs[0] if isinstance(archs, list) else archs
    one_layer_draft = "draft_vocab_size" in config and config.get("num_hidden_layers") == 1
    if arch not in EAGLE_ARCHS and not (arch == "LlamaForCausalLM" and one_layer_draft):
        raise ModelFileError(
            f"{folder}: architecture {arch} is not an EAGLE-3 head (supported: "
            f"{', '.join(EAGLE_ARCHS)}); give the head's folder, not the target's"
        )
    if config["num_hidden_layers"] != 1:
        raise ModelFileError(
            f"{folder}: the head has {config['num_hidden_layers']} decoder layers; llama.cpp's "
            "eagle3 runs heads of exactly one (EAGLE-3 as published)"
        )
    if config.get("fc_norm") and config.get("norm_before_fc"):
        raise ModelFileError(
            f"{folder}: fc_norm and norm_before_fc are both true (a norm on each hidden state "
            "and one on their concatenation), which no EAGLE-3 trainer combines; keep the one "
            "the head was trained with"
        )
    return config, ids, read_weights(folder)


def read_target(path: Path) -> Target:
    if not path.is_file():
        raise ModelFileError(f"{path} does not exist; give the target's GGUF file")
    meta = GgufMetadata(open_gguf(path))
    arch = meta.get("general.architecture")
    if arch == ARCH:
        raise ModelFileError(
            f"{path} is an EAGLE-3 head, not a target; give the GGUF of the model it drafts for"
        )
    values = {}
    for key in (f"{arch}.embedding_length", f"{arch}.block_count", "tokenizer.ggml.tokens"):
        values[key] = meta.get(key)
        if values[key] is None:
            raise ModelFileError(
                f"{path}: metadata {key} is missing; give the target's GGUF (a complete model)"
            )
    tokenizer = {
        key: (field.contents(), list(field.types))
        for key, field in meta.fields.items()
        if key.startswith("tokenizer.")
    }
    return Target(
        path,
        int(values[f"{arch}.embedding_length"]),
        int(values[f"{arch}.block_count"]),
        len(values["tokenizer.ggml.tokens"]),
        tokenizer,
    )


@dataclass(frozen=True)
class HeadShape:
    hidden: int
    n_ff: int
    n_head: int
    n_head_kv: int
    head_dim: int
    target_hidden: int  # config's target_hidden_size, else fc.weight's input / 3
    norm_before_fc: bool  # an RMSNorm (input_norm) on the features before fc
    fc_norm: bool = False  # EAGLE-3.1: an RMSNorm (fc_norm.i) on each of the three features
    norm_output: bool = False  # EAGLE-3.1: the state carried to the next step is norm's output

    @staticmethod
    def of(folder: Path, config: dict, weights: LazyTensors) -> HeadShape:
        if "fc.weight" not in weights:
            raise ModelFileError(f"{folder} lacks tensor fc.weight; download the head again")
        if len(weights.shape("fc.weight")) != 2:  # its width below, its rows in plan_tensors
            raise ModelFileError(
                f"{folder}: tensor fc.weight has shape {list(weights.shape('fc.weight'))}, not "
                "a matrix; download the head again"
            )
        hidden, n_head = config["hidden_size"], config["num_attention_heads"]
        target_hidden = config.get("target_hidden_size") or weights.shape("fc.weight")[-1] // 3
        return HeadShape(
            hidden,
            config["intermediate_size"],
            n_head,
            config.get("num_key_value_heads") or n_head,
            config.get("head_dim") or hidden // n_head,
            int(target_hidden),
            bool(config.get("norm_before_fc")),
            bool(config.get("fc_norm")),
            bool(config.get("norm_output")),
        )


def check_fit(
    folder: Path, config: dict, ids: LayerIds, head: HeadShape, target: Target
) -> list[int]:
    """Refuse a head that cannot read this target's hidden states; its extract layers."""
    name, tname = folder.name, target.path.name
    if head.target_hidden != target.n_embd:
        raise HeadMismatchError(
            f"{name} reads hidden states of size {head.target_hidden} but {tname} has "
            f"{target.n_embd}; use the head trained for this target"
        )
    n = target.n_layer
    layers, how = ids.ids, ids.how
    if layers is None:
        layers, how = [2, n // 2, n - 3], f" (llama.cpp's default for a {n}-layer target)"
    # layer n: the last layer's output, no layer's input (what llama.cpp taps)
    if n in layers and all(0 <= i <= n for i in layers):
        raise HeadMismatchError(
            f"{name} extracts layers {layers}{how}: layer {n} is the output of {tname}'s last "
            f"layer, which this llama.cpp cannot tap (it keeps inputs of layers 0..{n - 1})"
        )
    if not all(0 <= i < n for i in layers):
        raise HeadMismatchError(
            f"{name} extracts layers {layers}{how} but {tname} has layers 0..{n - 1}; "
            "use the head trained for this target"
        )
    vocab = config.get("vocab_size")
    if vocab is not None and vocab != target.n_vocab:
        raise HeadMismatchError(
            f"{name} was trained for a vocabulary of {vocab} tokens but {tname} has "
            f"{target.n_vocab}; use the head trained for this target"
        )
    return layers


def draft_mapping(
    folder: Path, config: dict, weights: LazyTensors, target: Target
) -> np.ndarray | None:
    """d2t as absolute target ids [draft vocab] int64, checked; None where the head has none
    (its lm_head then covers the target's whole vocabulary)."""
    name, tname = folder.name, target.path.name
    rows = weights.shape("lm_head.weight")[0] if "lm_head.weight" in weights else None
    if "d2t" not in weights:
        if rows is not None and rows != target.n_vocab:
            raise HeadMismatchError(
                f"{name} drafts over {rows} tokens and has no d2t mapping them to {tname}'s "
                f"{target.n_vocab}; download the head's complete checkpoint (with d2t)"
            )
        return None
    offsets = weights.integers("d2t").reshape(-1)
    if rows is None:
        raise ModelFileError(
            f"{folder} has d2t but no lm_head.weight; download the head's complete checkpoint"
        )
    draft_vocab = config.get("draft_vocab_size", rows)
    if not len(offsets) == rows == draft_vocab:
        raise ModelFileError(
            f"{folder}: d2t maps {len(offsets)} draft tokens, lm_head.weight has {rows} rows and "
            f"draft_vocab_size is {draft_vocab}; the checkpoint is inconsistent (download it "
            "again)"
        )
    ids = offsets + np.arange(len(offsets), dtype=np.int64)
    outside = np.flatnonzero((ids < 0) | (ids >= target.n_vocab))
    if len(outside):
        i = int(outside[0])
        raise HeadMismatchError(
            f"{name}: d2t maps draft token {i} to id {ids[i]}, outside {tname}'s vocabulary "
            f"0..{target.n_vocab - 1}; use the head trained for this target"
        )
    order = np.argsort(ids, kind="stable")
    same = np.flatnonzero(ids[order][1:] == ids[order][:-1])
    if len(same):
        i, j = sorted(int(x) for x in order[same[0] : same[0] + 2])
        raise ModelFileError(
            f"{folder}: d2t maps draft tokens {i} and {j} both to target id {ids[i]}; the "
            "checkpoint is corrupt (download it again)"
        )
    return ids


def plan_tensors(
    folder: Path,
    weights: LazyTensors,
    head: HeadShape,
    target: Target,
    d2t: np.ndarray | None,
) -> dict[str, Rows]:
    """GGUF name -> the HF tensor's rows, each present and shaped as config.json implies."""
    h, hd, ff = head.hidden, head.head_dim, head.n_ff
    q, kv = head.n_head * hd, head.n_head_kv * hd
    expected: dict[str, tuple[int, ...]] = {
        "fc.weight": (h, 3 * head.target_hidden),
        "midlayer.input_layernorm.weight": (h,),
        "midlayer.hidden_norm.weight": (h,),
        "midlayer.self_attn.q_proj.weight": (q, 2 * h),
        "midlayer.self_attn.k_proj.weight": (kv, 2 * h),
        "midlayer.self_attn.v_proj.weight": (kv, 2 * h),
        "midlayer.self_attn.o_proj.weight": (h, q),
        "midlayer.post_attention_layernorm.weight": (h,),
        "midlayer.mlp.gate_proj.weight": (ff, h),
        "midlayer.mlp.up_proj.weight": (ff, h),
        "midlayer.mlp.down_proj.weight": (h, ff),
        "norm.weight": (h,),
    }
    if head.norm_before_fc:  # llama.cpp loads enc.output_norm exactly when the flag is set
        expected["input_norm.weight"] = (3 * head.target_hidden,)
    for i in range(3 if head.fc_norm else 0):  # checked here, written as metadata (EAGLE31)
        expected[f"fc_norm.{i}.weight"] = (head.target_hidden,)
    optional = {
        "lm_head.weight": (target.n_vocab if d2t is None else len(d2t), h),
        "embed_tokens.weight": (target.n_vocab, h),
    }
    for hf_name in weights:
        known = hf_name in expected or hf_name in optional or hf_name in ("d2t", *NOT_WRITTEN)
        if not known and not hf_name.endswith("rotary_emb.inv_freq"):
            raise ModelFileError(
                f"{folder}: tensor {hf_name} has no place in llama.cpp's eagle3 head; give an "
                "EAGLE-3 head's folder (fc, midlayer.*, norm, lm_head, d2t)"
            )
    missing = [n for n in expected if n not in weights]
    if missing:
        raise ModelFileError(f"{folder} lacks tensor {missing[0]}; download the head again")
    plan = {}
    for hf_name, shape in [*expected.items(), *optional.items()]:
        if hf_name not in weights:
            continue
        if weights.shape(hf_name) != shape:
            raise ModelFileError(
                f"{folder}: tensor {hf_name} has shape {list(weights.shape(hf_name))} but "
                f"config.json implies {list(shape)}; the checkpoint is inconsistent"
            )
        if not hf_name.startswith("fc_norm."):
            plan[gguf_name(hf_name)] = weights.rows(hf_name)
    return plan


def eagle31_metadata(weights: LazyTensors, head: HeadShape) -> dict[str, np.ndarray]:
    """EAGLE-3.1's weights, written as metadata (shared.FC_NORM_KEY): fc_norm.0..2 in the
    order of the extract layers, and norm.weight, the norm whose output the head carries."""
    out = {}
    if head.fc_norm:
        out[FC_NORM_KEY] = np.concatenate([weights[f"fc_norm.{i}.weight"] for i in range(3)])
    if head.norm_output:
        out[NORM_OUTPUT_KEY] = weights["norm.weight"]
    return out


def gguf_name(hf_name: str) -> str:
    if hf_name.startswith(LAYER):
        return "blk.0." + LAYER_TENSORS[hf_name[len(LAYER) :]]
    return TOP_TENSORS[hf_name]


def llama3_rope_factors(folder: Path, config: dict, head_dim: int) -> np.ndarray | None:
    """Llama 3.1's RoPE scaling as llama.cpp takes it (rope_freqs, a factor per frequency);
    None for the other kinds (eagle3_layouts.ROPE_KINDS; yarn goes in the metadata)."""
    kind, scaling = rope_kind(config)
    if kind != "llama3":
        return None
    factor = float(scaling.get("factor", 8.0))
    low, high = (
        float(scaling.get("low_freq_factor", 1.0)),
        float(scaling.get("high_freq_factor", 4.0)),
    )
    trained = float(scaling.get("original_max_position_embeddings", 8192))
    theta = float(config.get("rope_theta") or 10000.0)
    wavelength = 2 * np.pi * theta ** (np.arange(0, head_dim, 2) / head_dim)
    smooth = (trained / wavelength - low) / (high - low)
    between = 1 / ((1 - smooth) / factor + smooth)
    long = np.where(wavelength > trained / low, factor, between)
    return np.where(wavelength < trained / high, 1.0, long).astype(np.float32)


def rope_kind(config: dict) -> tuple[str, dict]:
    """The RoPE scaling's kind (eagle3_layouts checked it) and its parameters."""
    scaling = config.get("rope_scaling") or {}
    return scaling.get("rope_type") or scaling.get("type") or "default", scaling


def write_yarn(writer: Any, folder: Path, config: dict) -> None:
    """YaRN as llama.cpp's converter writes it; the attention factor llama.cpp derives. mrope
    needs nothing: the head sees text, whose three position sections are equal (plain RoPE)."""
    import gguf

    kind, scaling = rope_kind(config)
    if kind != "yarn":
        return
    trained = scaling.get("original_max_position_embeddings")
    if not isinstance(trained, int) or isinstance(trained, bool) or trained <= 0:
        raise ModelFileError(
            f"{folder / 'config.json'}: rope_scaling.original_max_position_embeddings is "
            f"{trained}, not a whole number > 0; YaRN needs the trained context length"
        )
    writer.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    writer.add_rope_scaling_factor(float(scaling.get("factor", 1.0)))
    writer.add_rope_scaling_orig_ctx_len(trained)
    for key, add in (("beta_fast", writer.add_rope_scaling_yarn_beta_fast),
                     ("beta_slow", writer.add_rope_scaling_yarn_beta_slow)):  # fmt: skip
        if key in scaling:
            add(float(scaling[key]))


def write_metadata(
    writer: Any,
    folder: Path,
    config: dict,
    head: HeadShape,
    layers: list[int],
    target: Target,
    outtype: str,
) -> None:
    import gguf

    writer.add_name(folder.name)
    writer.add_context_length(int(config.get("max_position_embeddings") or 4096))
    writer.add_embedding_length(head.hidden)
    writer.add_block_count(1)
    writer.add_feed_forward_length(head.n_ff)
    writer.add_head_count(head.n_head)
    writer.add_head_count_kv(head.n_head_kv)
    if head.head_dim != head.hidden // head.n_head:
        writer.add_key_length(head.head_dim)
        writer.add_value_length(head.head_dim)
    writer.add_rope_dimension_count(head.head_dim)
    writer.add_rope_freq_base(float(config.get("rope_theta") or 10000.0))
    write_yarn(writer, folder, config)
    writer.add_layer_norm_rms_eps(float(config.get("rms_norm_eps") or 1e-6))
    writer.add_file_type(1 if outtype == "f16" else 0)
    writer.add_array(f"{ARCH}.target_layers", layers)
    writer.add_uint32(f"{ARCH}.target_hidden_size", head.target_hidden)
    for flag in ("norm_before_residual", "norm_before_fc"):
        if config.get(flag):
            writer.add_bool(f"{ARCH}.{flag}", True)
    array = gguf.GGUFValueType.ARRAY
    for key, (value, types) in target.tokenizer.items():
        writer.add_key_value(
            key, value, types[0], sub_type=types[-1] if types[0] == array else None
        )
