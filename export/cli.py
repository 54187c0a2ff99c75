"""`edgespec export`: one build step from checkpoints to a bundle the runtime trusts."""

from __future__ import annotations

import argparse
from pathlib import Path

from edgespec.export.orchestrator import ExportOptions, export_bundle


def cmd_export(args: argparse.Namespace) -> int:
    from edgespec.bundle import read_bundle

    opts = ExportOptions(
        target=Path(args.target),
        draft=Path(args.draft) if args.draft else None,
        head=Path(args.head) if args.head else None,
        out=Path(args.out),
        format=args.format,
        target_quant=args.target_quant,
        draft_quant=args.draft_quant,
        output_tensor_type=args.output_tensor_type,
        device=args.device,
        force=args.force,
        tune=args.tune,
        threads=args.threads,
        int4_block=args.int4_block,
        verify_widths=args.verify_widths,
        draft_vocab=args.draft_vocab,
    )
    bundle = read_bundle(export_bundle(opts))
    print(f"bundle: {bundle.folder}")
    print(f"policy: {bundle.policy['reason']}")
    for m in bundle.models:
        print(f"  {m.role:<6} {m.quant:<7} {m.size / 1e6:8.1f} MB  {m.path}")
    for role, summary in (bundle.policy.get("weight_error") or {}).items():
        if summary:
            name, worst = summary["worst"][0]
            print(
                f"  {role} weights: {summary['n_tensors']} tensors, mean relative error "
                f"{summary['mean']:.4f}, worst {worst:.4f} ({name})"
            )
    if opts.format == "tensorrt":
        print(engines_message(bundle.folder))
    if bundle.tune:
        ratios = [t / bundle.tune["target_s"][0] for t in bundle.tune["target_s"]]
        print(
            "  tune: verify cost n=1..9 over one token: " + " ".join(f"{r:.2f}" for r in ratios[:9])
        )
    return 0


def engines_message(bundle_dir: Path) -> str:
    """Build the engines where TensorRT and a GPU are here; else say how to finish."""
    from edgespec.export.trt_build import build_bundle_engines
    from edgespec.export.trt_bundle import finish_message
    from edgespec.runtimes.tensorrt import gpu_properties, import_tensorrt

    if import_tensorrt() is None:
        return finish_message(bundle_dir, None, "neither tensorrt nor tensorrt_rtx imports")
    if gpu_properties() is None:
        return finish_message(bundle_dir, None, "no CUDA GPU is visible")
    return finish_message(bundle_dir, build_bundle_engines(bundle_dir), "")


def add_export_parser(sub) -> None:
    p = sub.add_parser("export", help="HF folder or GGUF in, quantized bundle out")
    p.add_argument("--target", required=True, help="HF checkpoint folder or .gguf")
    p.add_argument("--draft", help="HF checkpoint folder or .gguf (omit: prompt lookup only)")
    p.add_argument(
        "--head",
        help="an EAGLE-3 draft head for the target: a .gguf file, or a Hugging Face EAGLE-3 "
        "checkpoint folder (converted to GGUF f16); checked against the target and put into "
        "the bundle (--format gguf: as GGUF; --format onnx: as ONNX graphs, the target "
        "exported with outputs for the head's layers)",
    )
    p.add_argument("--out", required=True, help="bundle folder to create")
    p.add_argument("--format", default="gguf", choices=["gguf", "onnx", "tensorrt"])
    p.add_argument(
        "--target-quant",
        help="gguf: q4_0 | q4_k_m | q5_k_m | q8_0 | f16; onnx: int4 | int8 | fp8 | fp16 | fp32; "
        "tensorrt: fp8 | int4 | fp16 (default: the device's)",
    )
    p.add_argument(
        "--draft-quant",
        help="gguf: q8_0 | f16 | ...; onnx: int8 | int4 | ...; tensorrt: fp16 | fp8",
    )
    p.add_argument(
        "--verify-widths", metavar="1..K+1",
        help="--format tensorrt: the verify widths that get an engine profile and a CUDA graph "
        "(default 1..9, k up to 8)",
    )  # fmt: skip
    p.add_argument("--output-tensor-type", help="type of the target's output projection")
    p.add_argument("--device", default="cpu", help="where the bundle will run: cpu | cuda")
    p.add_argument("--force", action="store_true", help="allow a draft below target precision")
    p.add_argument("--tune", action="store_true", help="measure the cost curve into the bundle")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument(
        "--int4-block", type=int, choices=[32, 128], default=128,
        help="--format onnx: weights per INT4 scale; 128 verifies faster on CPU (edit suite "
        "2.17x against 1.86x with 32 on a 2-core CPU), 32 is closer to the source weights",
    )  # fmt: skip
    p.add_argument(
        "--draft-vocab", type=int, metavar="N",
        help="--format onnx: the draft's output layer keeps the N lowest token ids (the frequent "
        "ones) and every special token, for a cheaper draft token; outputs are unchanged "
        "(default 98304; 0 keeps all)",
    )  # fmt: skip
    p.set_defaults(func=cmd_export)
