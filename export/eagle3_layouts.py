"""Published EAGLE-3 head folders, as each publisher lays one out, read into the one form
export/eagle3_convert.py converts: a flat config (the decoder layer's hyperparameters and the
head's own fields) and tensors under EAGLE's names (fc, midlayer.*, norm, lm_head, d2t).

    publisher                 config.json                         weights, tensor names
    EAGLE (yuhuili/EAGLE3-*)  LlamaForCausalLMEagle3, flat        pytorch_model.bin; fc,
                                                                  midlayer.*, norm, lm_head,
                                                                  d2t, t2d
    AngelSlim                 the same, Qwen3 shapes, head_dim    pytorch_model.bin, the same
    SpecForge                 LlamaForCausalLMEagle3, ids and     model.safetensors (or shards
                              norm_before_fc under eagle_config   and an index); the same
    speculators (vLLM)        Eagle3Speculator / Eagle3DraftModel  model.safetensors;
                              with the layer in                   layers.0.* for midlayer.*,
                              transformer_layer_config            embed_tokens
    EAGLE-3.1 (SpecForge      LlamaForCausalLMEagle3, flat, with     model.safetensors; the
      export, vLLM's fields)  fc_norm and norm_output true           same and fc_norm.{0,1,2}
    transformers 5            rope_parameters for rope_theta and rope_scaling

Every config field is used, held to its one value, or refused by name (USED, ONLY,
INERT); none is dropped unread.

The extract-layer ids, the one rule (LAYER_IDS_RULE): EAGLE-3 reads three hidden states of
the target. llama.cpp's eagle3.target_layers names the inputs of target layers (layer 0's
input is the token embedding). Publishers name them by two conventions:

    eagle_config.eagle_aux_hidden_state_layer_ids   SpecForge writes them, SGLang reads them
        there as outputs of layers i (HF's hidden_states[i + 1]): written as i + 1
    eagle_aux_hidden_state_layer_ids (top level)    speculators writes them, vLLM reads them
        as inputs of layers i: written as given. SGLang (sglang#25454) reads a top-level list
        starting at 1 as outputs: there the engines disagree, and the config is refused
    none                                            EAGLE's own choice, inputs of
        [2, n // 2, n - 3] for an n-layer target (EAGLE, vLLM and llama.cpp default to it)

Both places given and naming different layers: refused by name.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from edgespec.errors import ModelFileError
from edgespec.export.checkpoint import LazyTensors, SafetensorsIndex, read_json

SPECULATORS_ARCHS = ("Eagle3Speculator", "Eagle3DraftModel")
EAGLE_ARCHS = ("LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM", *SPECULATORS_ARCHS)
# name prefixes -> EAGLE's: speculators' layer, SpecForge's and vLLM's "model." wrapper
PREFIXES = (("model.layers.0.", "midlayer."), ("layers.0.", "midlayer."), ("model.", ""))

# config.json fields: how each is taken. USED: read below. ONLY: the one value accepted
# (anything else changes the math llama.cpp's eagle3 computes). INERT: no bearing on the
# converted head (training, serving or bookkeeping fields; the tokenizer is the target's).
USED = (
    "architectures", "hidden_size", "intermediate_size", "num_attention_heads",
    "num_key_value_heads", "num_hidden_layers", "head_dim", "rms_norm_eps", "rope_theta",
    "rope_scaling", "rope_parameters", "max_position_embeddings", "vocab_size",
    "draft_vocab_size", "target_hidden_size", "eagle_aux_hidden_state_layer_ids",
    "norm_before_fc", "norm_before_residual", "norm_output", "fc_norm", "eagle_config",
    "transformer_layer_config", "speculators_model_type", "tie_word_embeddings",
)  # fmt: skip
ONLY = {"hidden_act": "silu", "attention_bias": False, "mlp_bias": False,
        "use_sliding_window": False, "sliding_window": None}  # fmt: skip
INERT = (
    "model_type", "torch_dtype", "dtype", "transformers_version", "_name_or_path",
    "bos_token_id", "eos_token_id", "pad_token_id", "initializer_range", "use_cache",
    "attention_dropout", "pretraining_tp", "max_window_layers", "layer_types",
    "speculators_config", "speculators_version", "embed_requires_grad",
)  # fmt: skip
EAGLE_CONFIG_FIELDS = ("eagle_aux_hidden_state_layer_ids", "norm_before_fc",
                       "use_aux_hidden_state")  # fmt: skip
ROPE_KINDS = {  # kind -> the parameters read (a scaling naming others is refused by name)
    "default": (),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor",
               "original_max_position_embeddings"),
    "yarn": ("factor", "original_max_position_embeddings", "beta_fast", "beta_slow"),
    "mrope": ("mrope_section", "mrope_interleaved"),
}  # fmt: skip


@dataclass(frozen=True)
class LayerIds:
    ids: list[int] | None  # inputs of these target layers; None: EAGLE's default for the target
    how: str  # where they came from, for messages ("" where given as inputs)


def read_weights(folder: Path) -> LazyTensors:
    """The head's tensors under EAGLE's names: *.safetensors (sharded ones checked against
    their index) or pytorch_model*.bin read without torch (export/torch_bin.py)."""
    if any(folder.glob("*.safetensors")):
        check_index(folder, "model.safetensors.index.json", "*.safetensors")
        return renamed(folder, SafetensorsIndex(folder))
    bins = sorted(folder.glob("pytorch_model*.bin"))
    if not bins:
        raise ModelFileError(
            f"{folder} has no *.safetensors or pytorch_model.bin; download the head's weights"
        )
    from edgespec.export.torch_bin import TorchBinTensors

    check_index(folder, "pytorch_model.bin.index.json", "pytorch_model*.bin")
    return renamed(folder, TorchBinTensors(bins))


def check_index(folder: Path, index: str, pattern: str) -> None:
    """A sharded checkpoint's index names files that are all here, and nothing else."""
    if not (folder / index).is_file():
        return
    doc = read_json(folder / index)
    files = set((doc.get("weight_map") or {}).values()) if isinstance(doc, dict) else set()
    here = {p.name for p in folder.glob(pattern)}
    if not files or not files <= here:
        missing = sorted(files - here) or ["(no weight_map)"]
        raise ModelFileError(
            f"{folder / index} names {missing[0]}, which is not in {folder}; download every "
            "shard of the head"
        )


def renamed(folder: Path, weights: LazyTensors) -> LazyTensors:
    """weights with EAGLE's names (PREFIXES), refused where two names meet."""
    entries = {}
    for name, where in weights.entries.items():
        new = name
        for prefix, eagle in PREFIXES:
            if name.startswith(prefix):
                new = eagle + name[len(prefix) :]
                break
        if new in entries:
            raise ModelFileError(
                f"{folder}: tensors {name} and another both name {new}; give one head's checkpoint"
            )
        entries[new] = where
    weights.entries = entries
    return weights


def read_config(folder: Path) -> tuple[dict, LayerIds]:
    """config.json as one flat dict of the fields FIELDS uses, each checked for its type
    and, where FIELDS fixes it, its value; and the extract-layer ids (LAYER_IDS_RULE)."""
    path = folder / "config.json"
    raw = read_json(path)
    layer = raw.get("transformer_layer_config")
    if layer is not None and not isinstance(layer, dict):
        raise field_error(path, "transformer_layer_config", layer, "an object")
    nested = raw.get("eagle_config")
    if nested is not None and not isinstance(nested, dict):
        raise field_error(path, "eagle_config", nested, "an object")
    for where, doc in (("", raw), ("transformer_layer_config.", layer or {})):
        for key, value in doc.items():
            check_field(path, where + key, key, value)
    for key in nested or {}:
        if key not in EAGLE_CONFIG_FIELDS:
            raise unknown_field(path, f"eagle_config.{key}")
    if (nested or {}).get("use_aux_hidden_state", True) is not True:
        raise ModelFileError(
            f"{path}: eagle_config.use_aux_hidden_state is not true: the head does not read "
            "the target's three hidden states (not EAGLE-3), so it cannot be converted"
        )
    config = dict(layer or {})
    config.update({k: v for k, v in raw.items() if v is not None or k not in config})
    config = {k: v for k, v in config.items() if k in USED}
    config["norm_before_fc"] = merged_flag(path, raw, nested or {}, "norm_before_fc")
    config.update(rope(path, config))
    check_types(path, config)
    speculators = is_speculators(raw)
    return config, layer_ids(path, raw.get("eagle_aux_hidden_state_layer_ids"),
                             (nested or {}).get("eagle_aux_hidden_state_layer_ids"),
                             speculators)  # fmt: skip


def is_speculators(raw: dict) -> bool:
    archs = raw.get("architectures") or []
    arch = archs[0] if isinstance(archs, list) and archs else archs
    return arch in SPECULATORS_ARCHS or raw.get("speculators_model_type") is not None


def check_field(path: Path, shown: str, key: str, value: object) -> None:
    if key not in USED and key not in ONLY and key not in INERT:
        raise unknown_field(path, shown)
    if key in ONLY and value != ONLY[key]:
        raise ModelFileError(
            f"{path}: {shown} is {json.dumps(value)}; llama.cpp's eagle3 computes "
            f"{json.dumps(ONLY[key])} only, so this head cannot be converted"
        )


def unknown_field(path: Path, shown: str) -> ModelFileError:
    return ModelFileError(
        f"{path}: field {shown} is not one edgespec's EAGLE-3 converter knows; it converts "
        "only what it can account for (remove the field if it has no bearing on the head)"
    )


def field_error(path: Path, name: str, value: object, what: str) -> ModelFileError:
    shown = json.dumps(value) if not isinstance(value, float) or math.isfinite(value) else value
    return ModelFileError(f"{path}: {name} is {shown}, not {what}; correct it in config.json")


def merged_flag(path: Path, raw: dict, nested: dict, name: str) -> bool:
    """A flag given at the top level or under eagle_config (SpecForge, NVIDIA's heads)."""
    values = {v for v in (raw.get(name), nested.get(name)) if v is not None}
    for v in values:
        if not isinstance(v, bool):
            raise field_error(path, name, v, "true or false")
    if len(values) > 1:
        raise ModelFileError(
            f"{path}: {name} and eagle_config.{name} disagree; keep the one the head was "
            "trained with"
        )
    return bool(values and values.pop())


def rope(path: Path, config: dict) -> dict:
    """rope_theta and rope_scaling, from transformers 5's rope_parameters where given (both
    spellings agreeing where both are given); the scaling kind one of ROPE_KINDS."""
    params = config.get("rope_parameters")
    out = {"rope_theta": config.get("rope_theta"), "rope_scaling": config.get("rope_scaling")}
    if params is not None:
        if not isinstance(params, dict):
            raise field_error(path, "rope_parameters", params, "an object")
        theta = params.get("rope_theta")
        if out["rope_theta"] is not None and theta is not None and theta != out["rope_theta"]:
            raise ModelFileError(
                f"{path}: rope_theta {out['rope_theta']} and rope_parameters.rope_theta "
                f"{theta} disagree; keep the one the head was trained with"
            )
        out["rope_theta"] = theta if theta is not None else out["rope_theta"]
        out["rope_scaling"] = {k: v for k, v in params.items() if k != "rope_theta"}
    scaling = out["rope_scaling"]
    if scaling is not None and not isinstance(scaling, dict):
        raise field_error(path, "rope_scaling", scaling, "an object or null")
    kind = (scaling or {}).get("rope_type") or (scaling or {}).get("type") or "default"
    if kind not in ROPE_KINDS:
        raise ModelFileError(
            f"{path}: RoPE scaling {kind!r} is not one llama.cpp's eagle3 computes "
            f"({', '.join(ROPE_KINDS)}); this head cannot be converted"
        )
    for key in scaling or {}:
        if key not in ("rope_type", "type", *ROPE_KINDS[kind]):
            raise unknown_field(path, f"rope_scaling.{key} ({kind})")
        value = (scaling or {})[key]
        if key.startswith(("factor", "low_", "high_", "beta_", "original_")) and not (
            isinstance(value, (int, float))
            and not isinstance(value, bool)
            and math.isfinite(value)
            and value > 0
        ):
            raise field_error(path, f"rope_scaling.{key}", value, "a finite number > 0")
    return out


def check_types(path: Path, config: dict) -> None:
    """Each field read has its type: a one-line refusal naming it otherwise."""
    for name in ("hidden_size", "intermediate_size", "num_attention_heads", "num_hidden_layers"):
        if name not in config:
            raise ModelFileError(
                f"{path} lacks {name} (a whole number > 0); download the head's config again"
            )
    ints = ("hidden_size", "intermediate_size", "num_attention_heads", "num_hidden_layers",
            "num_key_value_heads", "head_dim", "vocab_size", "draft_vocab_size",
            "target_hidden_size", "max_position_embeddings")  # fmt: skip
    for name in ints:
        value = config.get(name)
        if value is not None and not whole(value):
            raise field_error(path, name, value, "a whole number > 0")
    for name in ("rms_norm_eps", "rope_theta"):
        value = config.get(name)
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if value is not None and not (ok and math.isfinite(value) and value > 0):
            raise field_error(path, name, value, "a finite number > 0")
    for name in ("norm_before_residual", "norm_output", "fc_norm", "tie_word_embeddings"):
        value = config.get(name)
        if value is not None and not isinstance(value, bool):
            raise field_error(path, name, value, "true or false")


def whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def layer_ids(path: Path, top: object, nested: object, speculators: bool) -> LayerIds:
    """The extract layers as inputs of target layers, by LAYER_IDS_RULE (module docstring)."""
    for name, ids in (("eagle_aux_hidden_state_layer_ids", top),
                      ("eagle_config.eagle_aux_hidden_state_layer_ids", nested)):  # fmt: skip
        if ids is not None and not (
            isinstance(ids, list)
            and len(ids) == 3
            and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids)
        ):
            raise ModelFileError(
                f"{path}: {name} is {json.dumps(ids)}; llama.cpp's eagle3 takes exactly 3 "
                "layer ids (whole numbers >= 0)"
            )
    assert top is None or isinstance(top, list)
    assert nested is None or isinstance(nested, list)
    from_nested = None if nested is None else [i + 1 for i in nested]
    if top is not None and not speculators and top[0] == 1:
        raise ModelFileError(
            f"{path}: eagle_aux_hidden_state_layer_ids {top} starts at 1, which vLLM reads as "
            "the inputs of those layers and SGLang as their outputs; move the list under "
            "eagle_config if the head was trained on outputs (SpecForge), else set "
            '"speculators_model_type": "eagle3"'
        )
    if top is not None and from_nested is not None and top != from_nested:
        raise ModelFileError(
            f"{path}: eagle_aux_hidden_state_layer_ids {top} (layer inputs) and "
            f"eagle_config.eagle_aux_hidden_state_layer_ids {nested} (layer outputs: inputs "
            f"{from_nested}) name different layers; keep the one the head was trained with"
        )
    if from_nested is not None:
        return LayerIds(from_nested, f" (eagle_config's {nested}: outputs of those layers, "
                                     "inputs of these)")  # fmt: skip
    return LayerIds(top, "")
