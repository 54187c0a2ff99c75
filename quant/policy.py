"""Precision policy: quantize the target hard, keep the drafter gentle.

A quantized drafter loses acceptance faster than it gains speed, so the drafter is never
stored at lower precision than the target unless the user insists (--force).

Defaults per device come from measurements (docs/decisions.md):
- CPU (llama.cpp, 2-core, Qwen2.5-Coder-1.5B): with logits for every verified row,
  Q4_0 and Q4_K_M verify 5 tokens at the same ~3x one token, and Q4_K_M holds quality
  better, so the target defaults to q4_k_m. The output projection (151,936 x 1,536) is the
  largest single matrix: Q4_0 there instead of Q6_K decoded one token ~20% faster (29 vs
  35-38 ms), so on CPU the output tensor defaults to q4_0 when the vocabulary is large.
- GPU: decoding is memory-bound, so fewer bytes are faster: q4_k_m target, q8_0 draft.
"""

from __future__ import annotations

from dataclasses import dataclass

from edgespec.errors import EdgespecError

# Bits per weight, for ordering precisions (llama.cpp's block formats include their scales).
BITS_PER_WEIGHT = {
    "f32": 32.0, "fp32": 32.0, "f16": 16.0, "fp16": 16.0, "bf16": 16.0,
    "q8_0": 8.5, "fp8": 8.0, "q6_k": 6.56, "q5_k_m": 5.7, "q5_0": 5.5,
    "q4_k_m": 4.85, "q4_0": 4.5, "int4": 4.25, "int8": 8.25,
}  # fmt: skip
LARGE_VOCAB = 64_000  # above this the output projection is worth quantizing separately


@dataclass(frozen=True)
class PrecisionChoice:
    target_quant: str
    draft_quant: str
    output_tensor_type: str | None  # None: llama.cpp's own choice for the file type
    reason: str


def default_precision(device: str, n_vocab: int) -> PrecisionChoice:
    if device == "cpu":
        output = "q4_0" if n_vocab > LARGE_VOCAB else None
        why_output = (
            f"; output projection q4_0 ({n_vocab:,} rows: ~20% faster one-token decode)"
            if output
            else ""
        )
        return PrecisionChoice(
            "q4_k_m", "q8_0", output,
            "CPU: q4_k_m verifies as cheaply as q4_0 with logits for every row and keeps "
            "more quality" + why_output,
        )  # fmt: skip
    return PrecisionChoice(
        "q4_k_m", "q8_0", None, f"{device}: memory-bound decode, fewest bytes per weight"
    )


ONNX_QUANTS = ("int4", "int8", "fp8", "fp16", "fp32")


def default_onnx_precision(device: str) -> PrecisionChoice:
    """ONNX Runtime: MatMulNBits INT4 target everywhere. On the CPU EP an fp16 drafter is
    folded to float32 at load (4 bytes a weight per token), which costs more than its
    acceptance gains, so the drafter is INT4 too: the same precision as the target, so the
    drafter-precision rule holds. On CUDA the drafter stays fp16."""
    if device == "cpu":
        return PrecisionChoice(
            "int4", "int4", None,
            "ONNX CPU: INT4 MatMulNBits (int8 activations) verifies k+1 tokens cheapest; an "
            "fp16 drafter would run in float32 on the CPU EP, so it is INT4 like the target",
        )  # fmt: skip
    return PrecisionChoice(
        "int4", "fp16", None, f"ONNX {device}: INT4 target, fp16 drafter (fp16 compute)"
    )


def resolve_onnx_precision(
    device: str, target_quant: str | None, draft_quant: str | None, force: bool
) -> PrecisionChoice:
    base = default_onnx_precision(device)
    choice = PrecisionChoice(
        target_quant or base.target_quant,
        draft_quant or base.draft_quant,
        None,
        base.reason if not (target_quant or draft_quant) else "chosen on the command line",
    )
    for name in (choice.target_quant, choice.draft_quant):
        if name not in ONNX_QUANTS:
            raise EdgespecError(
                f"precision {name!r} is not available for --format onnx; choose one of "
                f"{', '.join(ONNX_QUANTS)}"
            )
    check_draft_precision(choice, force)
    return choice


def check_draft_precision(choice: PrecisionChoice, force: bool) -> None:
    if BITS_PER_WEIGHT[choice.draft_quant] < BITS_PER_WEIGHT[choice.target_quant] and not force:
        raise EdgespecError(
            f"the draft would be stored at {choice.draft_quant}, below the target's "
            f"{choice.target_quant}: a coarser drafter loses acceptance faster than it gains "
            "speed; pick a draft precision at least the target's, or pass --force"
        )


def resolve_precision(
    device: str,
    n_vocab: int,
    target_quant: str | None,
    draft_quant: str | None,
    output_tensor_type: str | None,
    force: bool,
) -> PrecisionChoice:
    """The user's choices where given, the device default elsewhere; the drafter-precision
    rule enforced unless forced."""
    base = default_precision(device, n_vocab)
    choice = PrecisionChoice(
        target_quant or base.target_quant,
        draft_quant or base.draft_quant,
        output_tensor_type if output_tensor_type else base.output_tensor_type,
        base.reason if not (target_quant or draft_quant) else "chosen on the command line",
    )
    for name in (choice.target_quant, choice.draft_quant):
        if name not in BITS_PER_WEIGHT:
            raise EdgespecError(
                f"unknown precision {name!r}; choose one of {', '.join(BITS_PER_WEIGHT)}"
            )
    check_draft_precision(choice, force)
    return choice
