"""The TensorRT builder: HF folders or GGUF files in, per role a standard-operator ONNX model
folder (export/onnx_standard.py) out, plus the engine build plan (engines/plan.json) and
build_engines.sh. Where TensorRT (or TensorRT for RTX) imports and a GPU is present, the
engines are built right after the bundle is written (export/trt_build.py); elsewhere the
bundle is complete without them: `edgespec run` falls back to ONNX Runtime on the same
ONNX, and build_engines.sh finishes the job on the device.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from edgespec.errors import EdgespecError
from edgespec.export.checkpoint import read_checkpoint
from edgespec.export.onnx_bundle import checkpoint_vocab, model_entry, notes
from edgespec.export.onnx_export import write_onnx_model
from edgespec.export.onnx_standard import StandardGraphBuilder
from edgespec.export.options import BuiltModels, ExportOptions
from edgespec.export.trt_plan import (
    DEFAULT_WIDTHS,
    PREFILL_MAX,
    build_script,
    parse_widths,
    plan_engine,
    precision_for_device,
)
from edgespec.quant.policy import PrecisionChoice, check_draft_precision
from edgespec.runtime import check_compatible

log = logging.getLogger(__name__)


def build_tensorrt(opts: ExportOptions, work_dir: Path, staging: Path) -> BuiltModels:
    from edgespec.runtimes.tensorrt import gpu_properties

    if opts.output_tensor_type:
        raise EdgespecError("--output-tensor-type applies to --format gguf only")
    widths = parse_widths(opts.verify_widths) if opts.verify_widths else DEFAULT_WIDTHS
    gpu = gpu_properties()
    device = precision_for_device(gpu[1] if gpu else None, opts.target_quant, opts.draft_quant)
    choice = PrecisionChoice(device.target, device.draft, None, device.reason)
    check_draft_precision(choice, opts.force)
    sources = {role: read_checkpoint(path) for role, path in opts.sources().items()}
    vocabs = {role: checkpoint_vocab(ckpt) for role, ckpt in sources.items()}
    if "draft" in vocabs:
        check_compatible(vocabs["target"], vocabs["draft"], str(opts.target), str(opts.draft))
    entries, errors, plans = [], {}, []
    for role, ckpt in sources.items():
        quant = choice.target_quant if role == "target" else choice.draft_quant
        folder = staging / f"{role}.{quant}"
        t0 = time.perf_counter()
        info = write_onnx_model(
            ckpt, folder, quant, "fp16", opts.int4_block, builder=StandardGraphBuilder
        )
        errors[role] = info.weight_error
        log.info("%s: %s -> %s in %.1fs", role, ckpt.source, folder.name, time.perf_counter() - t0)
        entry = model_entry(role, folder, quant, ckpt, vocabs[role])
        entries.append(type(entry)(**{**entry.__dict__, "format": "tensorrt"}))
        plans.append(plan_engine(staging, role, folder.name, widths))
    (staging / "engines").mkdir()
    (staging / "engines" / "plan.json").write_text(
        json.dumps([p.to_json() for p in plans], indent=1) + "\n"
    )
    script = staging / "build_engines.sh"
    script.write_text(build_script(plans))
    script.chmod(0o755)
    policy = {
        "compute": "fp16",
        "int4_block": opts.int4_block,
        "tensorrt": {
            "widths": list(widths),
            "capacity": min(p.capacity for p in plans),
            "prefill_max": PREFILL_MAX,
            "engines": {},  # filled where they are built (export/trt_build.py)
        },
        "notes": notes(sources),
        "weight_error": errors,
    }
    return BuiltModels(tuple(entries), vocabs["target"], choice, policy)


def finish_message(bundle_dir: Path, built: dict[str, dict] | None, why_not: str) -> str:
    """What the user reads after the export: the engines built, or how to build them."""
    if built:
        return "\n".join(
            f"  engine {role}: {m['engine']} ({m['flavour']} {m['version']}, {m['device']}, "
            f"sm {m['compute_capability']})"
            for role, m in built.items()
        )
    return (
        f"  engines: not built here ({why_not}); the bundle runs as is on ONNX Runtime. On the "
        f"device that will run it: bash {bundle_dir / 'build_engines.sh'}"
    )
