"""Tiny EAGLE-3 heads in each publisher's layout (export/eagle3_layouts.py's table), rewritten
from an EAGLE-layout folder (tests/test_eagle3_convert.write_hf_head): file format, tensor
names and prefixes, config nesting and fields as each publishes them. Also torch.save's zip
format written without torch (a pickle spelled out opcode by opcode), for pytorch_model.bin."""

from __future__ import annotations

import json
import struct
import zipfile
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file

STORAGE = {np.dtype(np.float32): "FloatStorage", np.dtype(np.float16): "HalfStorage",
           np.dtype(np.int64): "LongStorage", np.dtype(np.bool_): "BoolStorage"}  # fmt: skip


def pickled_string(s: str) -> bytes:
    raw = s.encode()
    return b"X" + struct.pack("<I", len(raw)) + raw  # BINUNICODE


def pickled_ints(values) -> bytes:
    return b"(" + b"".join(b"J" + struct.pack("<i", int(v)) for v in values) + b"t"


def torch_pickle(tensors: dict[str, np.ndarray], extra: bytes = b"") -> bytes:
    """The data.pkl torch.save writes for a state dict of contiguous tensors (protocol 2);
    extra: opcodes put in as one more entry's value (to test refusals)."""
    out = [b"\x80\x02", b"ccollections\nOrderedDict\n)R"]
    for key, (name, a) in enumerate(tensors.items()):
        strides = [int(np.prod(a.shape[i + 1 :])) for i in range(a.ndim)]
        storage = (b"(" + pickled_string("storage") + b"ctorch\n" + STORAGE[a.dtype].encode()
                   + b"\n" + pickled_string(str(key)) + pickled_string("cpu")
                   + b"J" + struct.pack("<i", a.size) + b"tQ")  # fmt: skip
        out += [pickled_string(name), b"ctorch._utils\n_rebuild_tensor_v2\n(", storage,
                b"J\x00\x00\x00\x00", pickled_ints(a.shape), pickled_ints(strides),
                b"\x89ccollections\nOrderedDict\n)RtRs"]  # fmt: skip
    if extra:
        out += [pickled_string("extra"), extra, b"s"]
    return b"".join(out) + b"."


def save_torch_bin(tensors: dict[str, np.ndarray], path: Path, extra: bytes = b"") -> Path:
    """tensors as torch.save would write them (archive folder "archive")."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", torch_pickle(tensors, extra))
        for key, a in enumerate(tensors.values()):
            z.writestr(f"archive/data/{key}", np.ascontiguousarray(a).tobytes())
        z.writestr("archive/version", "3\n")
    return path


HF_BOOKKEEPING = {  # fields every transformers config carries, with no bearing on the head
    "bos_token_id": 0, "eos_token_id": 1, "pad_token_id": None, "hidden_act": "silu",
    "initializer_range": 0.02, "tie_word_embeddings": False, "use_cache": True,
    "transformers_version": "4.51.0",
}  # fmt: skip


def relayout(folder: Path, layout: str, *, layers: list[int] | None = None) -> Path:
    """The EAGLE-layout head in folder rewritten in place as `layout` publishes it; layers:
    the ids in that publisher's own convention and place (None: none given)."""
    cfg = json.loads((folder / "config.json").read_text())
    cfg.pop("eagle_aux_hidden_state_layer_ids", None)
    tensors = load_file(str(folder / "model.safetensors"))
    (folder / "model.safetensors").unlink()
    cfg.update(HF_BOOKKEEPING)
    if layout == "eagle":  # yuhuili/EAGLE3-*: pytorch_model.bin, no ids, float16 config
        cfg.update(torch_dtype="float16")
        cfg.pop("target_hidden_size")
        save_torch_bin(tensors, folder / "pytorch_model.bin")
    elif layout == "angelslim":  # two .bin shards and their index, explicit head_dim
        cfg.update(head_dim=16, torch_dtype="bfloat16", attention_bias=False, mlp_bias=False)
        names = sorted(tensors)
        shards = {"pytorch_model-00001-of-00002.bin": names[::2],
                  "pytorch_model-00002-of-00002.bin": names[1::2]}  # fmt: skip
        for file, part in shards.items():
            save_torch_bin({n: tensors[n] for n in part}, folder / file)
        index = {"metadata": {}, "weight_map": {n: f for f, ns in shards.items() for n in ns}}
        (folder / "pytorch_model.bin.index.json").write_text(json.dumps(index))
    elif layout == "specforge":  # ids (layer outputs) under eagle_config, sharded safetensors
        cfg.update(head_dim=16, attention_bias=False, mlp_bias=False, pretraining_tp=1,
                   rope_scaling=None, torch_dtype="bfloat16")  # fmt: skip
        if layers is not None:
            cfg["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": layers,
                                   "use_aux_hidden_state": True}  # fmt: skip
        names = sorted(tensors)
        shards = {"model-00001-of-00002.safetensors": names[:6],
                  "model-00002-of-00002.safetensors": names[6:]}  # fmt: skip
        for file, part in shards.items():
            save_file({n: tensors[n] for n in part}, str(folder / file))
        index = {"metadata": {}, "weight_map": {n: f for f, ns in shards.items() for n in ns}}
        (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    elif layout == "speculators":  # Eagle3Speculator: the layer's config nested, layers.0.*
        layer_keys = ("hidden_size", "intermediate_size", "num_attention_heads",
                      "num_key_value_heads", "num_hidden_layers", "max_position_embeddings",
                      "rms_norm_eps", "rope_theta", "vocab_size", "hidden_act", "model_type",
                      "bos_token_id", "eos_token_id", "pad_token_id", "initializer_range",
                      "tie_word_embeddings", "use_cache")  # fmt: skip
        inner = {k: cfg.pop(k) for k in layer_keys if k in cfg}
        inner.update(architectures=["LlamaForCausalLM"], head_dim=16, attention_bias=False)
        cfg = {
            "architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3",
            "speculators_version": "0.2.0", "draft_vocab_size": cfg["draft_vocab_size"],
            "norm_before_residual": False, "target_hidden_size": None,
            "transformer_layer_config": inner, "torch_dtype": "float32",
            "transformers_version": "4.51.0",
            "speculators_config": {"algorithm": "eagle3", "default_proposal_method": "greedy",
                                   "proposal_methods": [{"proposal_type": "greedy",
                                                         "speculative_tokens": 5}],
                                   "verifier": {"name_or_path": "tiny", "architectures": [
                                       "LlamaForCausalLM"]}},
        }  # fmt: skip
        if layers is not None:
            cfg["eagle_aux_hidden_state_layer_ids"] = layers
        tensors = {n.replace("midlayer.", "layers.0."): a for n, a in tensors.items()}
        save_file(tensors, str(folder / "model.safetensors"))
    elif layout == "eagle31":
        cfg = eagle31_config(cfg)
        save_file({**tensors, **eagle31_tensors(tensors)}, str(folder / "model.safetensors"))
    else:
        raise ValueError(layout)
    (folder / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    return folder


def eagle31_config(cfg: dict) -> dict:
    """SpecForge's EAGLE-3.1 config (configs/qwen3-30B-A3B-eagle3.1.json), field for field,
    in the tiny head's sizes: flat, no layer ids, no target_hidden_size."""
    sizes = ("hidden_size", "intermediate_size", "max_position_embeddings",
             "num_attention_heads", "num_key_value_heads", "rms_norm_eps", "rope_theta",
             "vocab_size", "draft_vocab_size")  # fmt: skip
    return {
        "architectures": ["LlamaForCausalLMEagle3"], "attention_bias": False,
        "attention_dropout": 0.0, "bos_token_id": 0, "eos_token_id": 1, "fc_norm": True,
        "head_dim": 16, "hidden_act": "silu", "initializer_range": 0.02,
        "max_window_layers": 48, "model_type": "llama", "norm_output": True,
        "num_hidden_layers": 1, "rope_scaling": None, "sliding_window": None,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "transformers_version": "4.53.2", "use_cache": True, "use_sliding_window": False,
        **{k: cfg[k] for k in sizes},
    }  # fmt: skip


def eagle31_tensors(tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """What SpecForge's export adds for EAGLE-3.1: fc_norm.{0,1,2} (one RMSNorm per target
    feature), d2t and t2d (always written; here the identity); the final norm made unequal
    to ones, so a state carried through the wrong norm shows."""
    rng = np.random.default_rng(31)
    width = tensors["fc.weight"].shape[1] // 3
    n_vocab = tensors["lm_head.weight"].shape[0]
    out = {f"fc_norm.{i}.weight": (1 + 0.5 * rng.standard_normal(width)).astype(np.float32)
           for i in range(3)}  # fmt: skip
    out["norm.weight"] = (1 + 0.3 * rng.standard_normal(len(tensors["norm.weight"]))).astype(
        np.float32
    )
    out["d2t"] = np.zeros(n_vocab, np.int64)
    out["t2d"] = np.ones(n_vocab, np.bool_)
    return out
