"""The model families the ONNX exporter takes, each one's quirks stated once.

A Family says how its decoder differs from Llama's (RMSNorm, RoPE on halves, SwiGLU, q/k/v
then o, a pre-norm on each branch): the graph builder, the GGUF reader and the tests read
these traits, never the architecture's name. A family is keyed by its Hugging Face
`architectures[0]`; `gguf_arch` is llama.cpp's `general.architecture` for it where a GGUF of
it is read (the weights renamed to HF's by gguf's TensorNameMap, then made HF's again where
llama.cpp's converter changed them: `permuted_qk`).
"""

from __future__ import annotations

from dataclasses import dataclass

from edgespec.errors import ModelFileError


@dataclass(frozen=True)
class Family:
    arch: str  # model.json's name for it
    gguf_arch: str | None  # llama.cpp's general.architecture; None: not read from a GGUF
    permuted_qk: bool = False  # llama.cpp's converter interleaves q and k rows (Llama)
    qk_norm: bool = False  # an RMSNorm over each head of q and of k, before RoPE (Qwen3)


FAMILIES = {
    "LlamaForCausalLM": Family("llama", "llama", permuted_qk=True),
    "MistralForCausalLM": Family("mistral", None),  # a Mistral GGUF is a llama one
    "Qwen2ForCausalLM": Family("qwen2", "qwen2"),
    "Qwen3ForCausalLM": Family("qwen3", "qwen3", qk_norm=True),
}
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
