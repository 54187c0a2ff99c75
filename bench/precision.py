"""Which precisions to export the demo pair at: acceptance, speed and agreement per combination.

For each (target quant, draft quant): export a bundle with `edgespec export` (requantizing the
demo files; the draft's "source" is the shipped file itself), then on the first prompts of the
edit suite measure, greedy:
- plain decode tok/s of the exported target and the verify cost ratio C(5)/C(1),
- acceptance rate of the model drafter at k = 4,
- agreement with the source target: share of prompts whose plain output is identical to the
  source model's, and the mean index of the first differing token where it differs.

    python bench/precision.py [--limit 4] [--max-tokens 128] [--json docs/results/precision.json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

from edgespec.app.bench import first_departure
from edgespec.app.models import model_path
from edgespec.app.suites import load_suite
from edgespec.calibrate import measure_curve
from edgespec.chat import chat_tokens
from edgespec.controller import FixedPolicy
from edgespec.drafters import ModelDrafter
from edgespec.engine import SpeculativeDecoder
from edgespec.export.orchestrator import ExportOptions, export_bundle
from edgespec.hugepages import reexec_with_tunable
from edgespec.runtimes.llamacpp import LlamaCppRuntime

COMBOS = [
    ("q4_k_m", "source", None),
    ("q4_k_m", "q8_0", None),
    ("q4_0", "q8_0", None),
    ("q4_0", "source", None),
    ("q4_k_m", "q8_0", "q4_0"),  # output projection at q4_0
]


def prompt_tokens(rt: LlamaCppRuntime, prompts) -> list[list[int]]:
    return [chat_tokens(rt, p.messages) for p in prompts]


def plain_outputs(rt, tokens, max_tokens):
    dec = SpeculativeDecoder(rt)
    results = [dec.generate(t, max_tokens=max_tokens, speculative=False) for t in tokens]
    tps = sum(r.stats.n_generated for r in results) / sum(r.stats.t_decode for r in results)
    return [r.tokens for r in results], tps


def measure(target: Path, draft: Path, tokens, source_outputs, max_tokens) -> dict:
    rt = LlamaCppRuntime(target, n_ctx=2048)
    outputs, tps = plain_outputs(rt, tokens, max_tokens)
    curve = measure_curve(rt, n_max=5)
    spec = SpeculativeDecoder(
        rt, [ModelDrafter(LlamaCppRuntime(draft, n_ctx=2048))], FixedPolicy("model", 4)
    )
    drafted = accepted = 0
    for t in tokens:
        s = spec.generate(t, max_tokens=max_tokens).stats
        drafted, accepted = drafted + s.n_draft_tokens, accepted + s.n_accepted
    departures = [first_departure(a, b) for a, b in zip(source_outputs, outputs)]
    differing = [d for d in departures if d is not None]
    return {
        "plain_tokens_per_second": round(tps, 2),
        "verify_ratio_5": round(curve[4] / curve[0], 2),
        "model_acceptance_k4": round(accepted / drafted, 4),
        "identical_to_source": f"{len(departures) - len(differing)}/{len(departures)}",
        "mean_first_difference": round(sum(differing) / len(differing), 1) if differing else None,
        "size_mb": round(target.stat().st_size / 1e6, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--json")
    args = ap.parse_args()
    source_target, source_draft = model_path("demo-target"), model_path("demo-draft")
    prompts = load_suite("edit", args.limit)
    source_rt = LlamaCppRuntime(source_target, n_ctx=2048)
    tokens = prompt_tokens(source_rt, prompts)
    source_outputs, source_tps = plain_outputs(source_rt, tokens, args.max_tokens)
    del source_rt
    rows = [
        {
            "target": "source (q4_k_m)",
            "draft": "source",
            **measure(source_target, source_draft, tokens, source_outputs, args.max_tokens),
        }
    ]
    print(json.dumps(rows[-1]))
    work = Path(tempfile.mkdtemp(prefix="edgespec-precision-"))
    try:
        for target_q, draft_q, output_q in COMBOS:
            out = work / f"{target_q}-{draft_q}-{output_q}"
            export_bundle(
                ExportOptions(
                    source_target,
                    out,
                    None if draft_q == "source" else source_draft,
                    target_quant=target_q,
                    draft_quant=None if draft_q == "source" else draft_q,
                    output_tensor_type=output_q,
                    force=True,
                )
            )
            target = out / f"target.{target_q}.gguf"
            draft = source_draft if draft_q == "source" else out / f"draft.{draft_q}.gguf"
            row = {
                "target": target_q + (f" (output {output_q})" if output_q else ""),
                "draft": draft_q,
                **measure(target, draft, tokens, source_outputs, args.max_tokens),
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        shutil.rmtree(work)
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {"prompts": [p.id for p in prompts], "max_tokens": args.max_tokens, "rows": rows},
                indent=1,
            )
        )


if __name__ == "__main__":
    reexec_with_tunable()  # time passes in the memory the edgespec command gives them
    main()
