"""What an export is asked for (ExportOptions, mirrored by `edgespec export`'s flags) and what
a format's builder hands back to the orchestrator (BuiltModels)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from edgespec.bundle import ModelEntry
from edgespec.quant.policy import PrecisionChoice
from edgespec.runtime import VocabInfo


@dataclass(frozen=True)
class ExportOptions:
    target: Path
    out: Path
    draft: Path | None = None
    # a trained draft head (EAGLE-3) for the target, copied into the bundle as it is (GGUF)
    head: Path | None = None
    format: str = "gguf"
    target_quant: str | None = None  # None: the device's default (quant/policy.py)
    draft_quant: str | None = None
    output_tensor_type: str | None = None  # --format gguf only
    device: str = "cpu"
    force: bool = False  # allow a draft stored below the target's precision
    tune: bool = False  # measure the cost curve and store it in the bundle
    threads: int | None = None
    int4_block: int = 128  # --format onnx: weights per INT4 scale (32 or 128)
    # --format onnx: token ids the draft's output layer keeps (None: onnx_bundle.DRAFT_VOCAB;
    # 0: all of them)
    draft_vocab: int | None = None
    verify_widths: str | None = None  # --format tensorrt: "1..9" (None: 1..9)

    def sources(self) -> dict[str, Path]:
        """Role -> source path, target first."""
        return {"target": self.target} | ({"draft": self.draft} if self.draft else {})


@dataclass(frozen=True)
class BuiltModels:
    """A builder's result: the model files it wrote into the staging folder, described."""

    entries: tuple[ModelEntry, ...]  # target first
    vocab: VocabInfo  # the target's (the draft's was checked against it)
    choice: PrecisionChoice
    policy: dict[str, object]  # format-specific policy fields, weight_error last
