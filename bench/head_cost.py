"""A trained draft head's cost per drafted token against its target's one-token pass, on this
machine: the GPU kit's head measure (bench/gpu/measure.py head_cost) on any bundle that holds
a head, or any target (bundle or GGUF) with MTP layers (their first is the head), on the CPU
(or a GPU) without the rest of the kit.

The bundle's target and head are opened as `edgespec run` opens them (edgespec.pair); the
head proposes k = 1..8 tokens at one real context through HeadDrafter, each k timed after a
warm-up; the fitted slope is the cost of a drafted token, the intercept plus one slope the
first token's (which also rewrites the boundary row from the target's features). Prints a
table and writes JSON.

    python bench/head_cost.py BUNDLE|TARGET.gguf [--device cpu|cuda] [--threads N] [--reps 20]
        [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE / "gpu")]

import measure  # noqa: E402  (bench/gpu/measure.py: head_cost)

from edgespec.backends import RuntimeOptions  # noqa: E402
from edgespec.controller.calibrate import measure_curve  # noqa: E402
from edgespec.pair import open_pair  # noqa: E402
from edgespec.plumbing.machine import device_description  # noqa: E402

PROMPT = (
    "<|im_start|>user\nWrite a Python function that returns the n-th Fibonacci number, "
    "with a docstring and a short example.<|im_end|>\n<|im_start|>assistant\n"
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bundle", help="a bundle exported with --head, or a target with MTP layers")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--threads", type=int)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--json")
    args = ap.parse_args()
    options = RuntimeOptions(n_ctx=1024, n_threads=args.threads, device=args.device)
    bundle = Path(args.bundle)
    head_path = measure.bundle_head(bundle) if bundle.is_dir() else None
    pair = open_pair(bundle, None, options, open_draft=False, use_head=False,
                     use_mtp=head_path is None)  # fmt: skip
    target = pair.target
    if head_path is None and not target.mtp_layers:
        raise SystemExit(f"{args.bundle} holds no draft head nor MTP layers; export it with --head")
    context = target.tokenize(PROMPT * 3, special=True)
    plain_ms = round(1e3 * measure_curve(target, 1, reps=args.reps)[0], 4)
    head = measure.head_cost(target, head_path, context, args.reps)
    report = {"bundle": args.bundle, "machine": device_description(), "cpus": os.cpu_count(),
              "target_token_ms": plain_ms, **head,
              "head_over_target": round(head["token_ms"] / plain_ms, 4)}  # fmt: skip
    print(f"{report['machine']}, {report['cpus']} CPUs: {args.bundle}")
    print("| target t(1) ms | t(1) keeping layers | head first token ms | head token ms | "
          "head / t(1) |")  # fmt: skip
    print("|---|---|---|---|---|")
    print(
        f"| {plain_ms:.2f} | {head['target_token_ms_keeping_layers']:.2f} | "
        f"{head['first_ms']:.2f} | {head['token_ms']:.2f} | {report['head_over_target']:.3f} |"
    )
    print("proposals by k (ms):", head["propose_ms_by_k"])
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
