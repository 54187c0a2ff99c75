"""The model families the ONNX exporter takes, each one's quirks stated once.

A Family says how its decoder differs from Llama's (RMSNorm, RoPE on halves, SwiGLU, q/k/v
then o, a pre-norm on each branch): the graph builder, the GGUF reader and the tests read
these traits, never the architecture's name. A family is keyed by its Hugging Face
`architectures[0]`; `gguf_arch` is llama.cpp's `general.architecture` for it where a GGUF of
it is read (the weights renamed to HF's by gguf's TensorNameMap, then made HF's again where
llama.cpp's converter changed them: `permuted_qk`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from edgespec.errors import ModelFileError

GATES = {"silu": "silu", "gelu_tanh": "gelu_pytorch_tanh"}  # the gate -> HF's hidden_act
Get = Callable[[str], Any]  # a GGUF metadata key (without the architecture prefix) -> value


@dataclass(frozen=True)
class Family:
    arch: str  # model.json's name for it
    gguf_arch: str | None  # llama.cpp's general.architecture; None: not read from a GGUF
    permuted_qk: bool = False  # llama.cpp's converter interleaves q and k rows (Llama)
    qk_norm: bool = False  # an RMSNorm over each head of q and of k, before RoPE (Qwen3)
    norm_offset: float = 0.0  # RMSNorm scales by offset + w (Gemma: 1; llama.cpp stores 1 + w)
    sandwich_norms: bool = False  # each branch's output normed too, its input by pre_feedforward
    embed_scale: bool = False  # embeddings times sqrt(hidden_size) (Gemma)
    gate: str = "silu"  # the gated MLP's activation: silu (SwiGLU) or gelu_tanh (GeGLU)
    local_layers: bool = False  # layer_types' sliding layers: a window, their own RoPE base
    fused: bool = False  # q, k, v stored as one qkv_proj, gate and up as one gate_up_proj (Phi-3)
    # config fields this family's exporter does not compute: refused unless null or false
    refused: tuple[str, ...] = ()
    gguf_fields: Callable[[Get, dict], dict] | None = None  # what a GGUF leaves implicit

    def check(self, config: dict, where: object) -> None:
        """Refuse what this family's graph would compute wrongly in silence."""
        act = config.get("hidden_activation") or config.get("hidden_act")
        if act not in (None, GATES[self.gate]):
            raise ModelFileError(
                f"{where}: activation {act!r} is not {self.arch}'s {GATES[self.gate]}, the one "
                "the ONNX exporter computes for it; export to GGUF instead"
            )
        for name in self.refused:
            if config.get(name):
                raise ModelFileError(
                    f"{where}: {name} is {config[name]!r}, which the ONNX exporter does not "
                    f"compute for {self.arch}; export to GGUF instead"
                )

    def sliding(self, config: dict) -> list[bool]:
        """Which layers attend through the sliding window (none outside local_layers)."""
        n = config["num_hidden_layers"]
        if not self.local_layers:
            return [False] * n
        types = config.get("layer_types")
        if types is None:  # older configs: every pattern-th layer is global
            pattern = config.get("sliding_window_pattern", config.get("_sliding_window_pattern"))
            if not isinstance(pattern, int) or pattern < 1:
                raise ModelFileError(
                    f"config.json has neither layer_types nor a sliding_window_pattern, which "
                    f"{self.arch} needs to tell sliding layers from global ones; check config.json"
                )
            types = ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention"
                     for i in range(n)]  # fmt: skip
        unknown = set(types) - {"sliding_attention", "full_attention"}
        if len(types) != n or unknown:
            raise ModelFileError(
                f"layer_types {types!r} is not one of sliding_attention / full_attention per "
                "layer; check config.json"
            )
        return [t == "sliding_attention" for t in types]

    def attention_scale(self, config: dict, head_dim: int) -> float:
        return float(config.get("query_pre_attn_scalar") or head_dim) ** -0.5


def gemma3_gguf_fields(get: Get, config: dict) -> dict:
    """What llama.cpp's gemma3 keeps in code, not in the GGUF: every sixth layer global, the
    local layers' RoPE base 10000, and its attention scale (n_embd / n_head for the 27B, of
    62 layers; head_dim otherwise)."""
    n_layer = config["num_hidden_layers"]
    scalar = config["head_dim"]
    if n_layer == 62:
        scalar = config["hidden_size"] // config["num_attention_heads"]
    return {
        "sliding_window": get("attention.sliding_window"),
        "sliding_window_pattern": 6,
        "rope_local_base_freq": 10000.0,
        "query_pre_attn_scalar": scalar,
        "hidden_activation": "gelu_pytorch_tanh",
    }


def phi3_gguf_fields(get: Get, config: dict) -> dict:
    """What llama.cpp's converter writes of Phi-3 beyond Llama's fields: the sliding window
    (0 where there is none, as Phi-4's) and longrope's original context."""
    return {
        "sliding_window": get("attention.sliding_window") or None,
        "use_sliding_window": True,
        "original_max_position_embeddings": get("rope.scaling.original_context_length"),
    }


FAMILIES = {
    "LlamaForCausalLM": Family("llama", "llama", permuted_qk=True),
    "MistralForCausalLM": Family("mistral", None),  # a Mistral GGUF is a llama one
    "Qwen2ForCausalLM": Family("qwen2", "qwen2"),
    "Qwen3ForCausalLM": Family("qwen3", "qwen3", qk_norm=True),
    "Gemma3ForCausalLM": Family(
        "gemma3", "gemma3", qk_norm=True, norm_offset=1.0, sandwich_norms=True,
        embed_scale=True, gate="gelu_tanh", local_layers=True,
        refused=("final_logit_softcapping", "attn_logit_softcapping",
                 "use_bidirectional_attention"),
        gguf_fields=gemma3_gguf_fields,
    ),
    # Phi-3 and Phi-4 (mini and 14B) alike; Microsoft's remote code reads these two biases
    "Phi3ForCausalLM": Family("phi3", "phi3", fused=True, refused=("lm_head_bias", "mlp_bias"),
                              gguf_fields=phi3_gguf_fields),
}  # fmt: skip
HF_ARCHS = tuple(FAMILIES)
GGUF_ARCHS = {f.gguf_arch: hf for hf, f in FAMILIES.items() if f.gguf_arch}


def family(config: dict) -> Family:
    """The family of an HF config (read_hf_config has refused any other)."""
    arch = config["architectures"][0]
    if arch not in FAMILIES:
        raise ModelFileError(
            f"architecture {arch} cannot be exported to ONNX (supported: {', '.join(HF_ARCHS)})"
        )
    return FAMILIES[arch]
