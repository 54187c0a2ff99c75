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
    if bundle.tune:
        ratios = [t / bundle.tune["target_s"][0] for t in bundle.tune["target_s"]]
        print(
            "  tune: verify cost n=1..9 over one token: " + " ".join(f"{r:.2f}" for r in ratios[:9])
        )
    return 0


def add_export_parser(sub) -> None:
    p = sub.add_parser("export", help="HF folder or GGUF in, quantized bundle out")
    p.add_argument("--target", required=True, help="HF checkpoint folder or .gguf")
    p.add_argument("--draft", help="HF checkpoint folder or .gguf (omit: prompt lookup only)")
    p.add_argument("--out", required=True, help="bundle folder to create")
    p.add_argument("--format", default="gguf", choices=["gguf", "onnx"])
    p.add_argument("--target-quant", help="q4_0 | q4_k_m | q5_k_m | q8_0 | f16 (default: device)")
    p.add_argument("--draft-quant", help="q8_0 | f16 | ... (default: q8_0)")
    p.add_argument("--output-tensor-type", help="type of the target's output projection")
    p.add_argument("--device", default="cpu", help="where the bundle will run: cpu | cuda")
    p.add_argument("--force", action="store_true", help="allow a draft below target precision")
    p.add_argument("--tune", action="store_true", help="measure the cost curve into the bundle")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument(
        "--int4-block", type=int, choices=[32, 128], default=128,
        help="--format onnx: weights per INT4 scale; 128 verifies faster on CPU (edit suite "
        "2.17x against 1.86x with 32), 32 is closer to the source weights (docs/benchmarks.md)",
    )  # fmt: skip
    p.set_defaults(func=cmd_export)
