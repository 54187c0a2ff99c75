"""What dropping some of a draft model's layers buys and costs.

The replay says the draft's price is the lever left on a CPU's steep curve (docs/benchmarks.md,
seventh session), and 80% of the cut draft's weights are its layers. This exports the draft
as the ONNX bundle does (INT4, blocks of 128, the output layer cut to DRAFT_VOCAB ids), once
whole and once per set of layers left out (the rest renumbered, nothing retrained), and:

- times its one-token passes in rounds across the variants (bench/draft_vocab.time_passes);
- teacher-forces it over a replay recording's outputs (bench/replay.teacher_forced): how
  often its greedy token is the target's, per suite;
- replays `auto` on each suite with those predictions, its price scaled from the whole
  draft's by the measured pass times, what the controller learns carried from prompt to
  prompt as the loop carries it (bench/replay.replay_suite).

    python bench/draft_layers.py --draft $(edgespec models path demo-draft) \
        --record docs/results/s10-replay-record-onnx-xeon.json --suites open,chat \
        --drop 11,12 --drop 20,21 [--curve NAME=1,R2,...] [--draft-ratio 0.316] \
        [--threads 2] [--rounds 10] [--json F]

Run it on a quiet machine: nothing else running.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from draft_vocab import time_passes  # noqa: E402
from replay import confidence_for, load_curves, replay_suite, summarise, teacher_forced  # noqa: E402

from edgespec.app.bench import machine_info, machine_line  # noqa: E402
from edgespec.export.checkpoint import Checkpoint, LazyTensors, read_checkpoint  # noqa: E402
from edgespec.export.onnx_bundle import DRAFT_VOCAB, checkpoint_vocab, draft_head  # noqa: E402
from edgespec.export.onnx_export import write_onnx_model  # noqa: E402
from edgespec.hugepages import reexec_with_tunable  # noqa: E402
from edgespec.loader import SpecOptions  # noqa: E402
from edgespec.runtimes.onnxrt import OnnxRuntime  # noqa: E402

LAYER = re.compile(r"model\.layers\.(\d+)\.(.*)")


class KeptLayers(LazyTensors):
    """A checkpoint's tensors with only the `kept` layers, renumbered 0, 1, ... in order."""

    def __init__(self, inner: LazyTensors, kept: Sequence[int]) -> None:
        self.inner = inner
        self.names: dict[str, str] = {}  # new name -> the checkpoint's
        for name in inner.entries:
            m = LAYER.match(name)
            if m is None:
                self.names[name] = name
            elif int(m.group(1)) in kept:
                self.names[f"model.layers.{kept.index(int(m.group(1)))}.{m.group(2)}"] = name
        self.entries = {new: inner.entries[old] for new, old in self.names.items()}

    def shape(self, name: str) -> tuple[int, ...]:
        return self.inner.shape(self.names[name])

    def read_rows(self, name: str, start: int, stop: int) -> np.ndarray:
        return self.inner.read_rows(self.names[name], start, stop)


def without_layers(ckpt: Checkpoint, dropped: Sequence[int]) -> Checkpoint:
    n_layer = ckpt.config["num_hidden_layers"]
    if not set(dropped) <= set(range(n_layer)):
        raise SystemExit(f"--drop {dropped}: the draft has layers 0-{n_layer - 1}")
    kept = [i for i in range(n_layer) if i not in dropped]
    config = dict(ckpt.config, num_hidden_layers=len(kept))
    return replace(ckpt, config=config, weights=KeptLayers(ckpt.weights, kept))


def export_variants(source: Path, drops: list[tuple[int, ...]], folder: Path) -> dict[str, Path]:
    ckpt = read_checkpoint(source)
    ranges = draft_head(ckpt, checkpoint_vocab(ckpt), DRAFT_VOCAB)
    paths = {}
    for dropped in drops:
        name = label(dropped)
        paths[name] = folder / name
        write_onnx_model(without_layers(ckpt, dropped), paths[name], "int4", "fp32", 128,
                         logit_ranges=ranges)  # fmt: skip
    return paths


def label(dropped: Sequence[int]) -> str:
    return "-" + ",".join(map(str, dropped)) if dropped else "whole"


def forced(path: Path, cases: list[dict], threads: int | None) -> tuple[list[dict], dict]:
    """The cases with this draft's teacher-forced predictions; its agreement per suite."""
    runtime = OnnxRuntime(path, n_ctx=4096, n_threads=threads)
    out = []
    hits: dict[str, int] = {}
    totals: dict[str, int] = {}
    for case in cases:
        tokens, probs = teacher_forced(runtime, case["prompt"], case["output"])
        out.append(dict(case, draft=tokens, draft_p=probs))
        s = case["suite"]
        hits[s] = hits.get(s, 0) + sum(a == b for a, b in zip(tokens, case["output"]))
        totals[s] = totals.get(s, 0) + len(case["output"])
    return out, {s: round(hits[s] / totals[s], 4) for s in totals}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--draft", required=True, help="the draft's HF folder or GGUF")
    ap.add_argument("--record", required=True, help="a bench/replay.py recording")
    ap.add_argument("--suites", default="open,chat")
    ap.add_argument("--drop", action="append", default=[], help="layers left out, e.g. 11,12")
    ap.add_argument("--curve", help="NAME=1,R2,... (default: the recording's calibration)")
    ap.add_argument(
        "--draft-ratio",
        type=float,
        help="the whole draft's token in target tokens (default: the recording's)",
    )
    ap.add_argument("--threads", type=int)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--json")
    args = ap.parse_args()
    recording = json.loads(Path(args.record).read_text())
    suites = args.suites.split(",")
    cases = [c for c in recording["cases"] if c["suite"] in suites]
    ratios = [*load_curves([args.curve or "recorded"], recording.get("curve")).values()][0]
    whole_ratio = args.draft_ratio or recording["draft_ratio"]
    drops = [()] + [tuple(int(i) for i in d.split(",")) for d in args.drop]
    spec = SpecOptions("ngram", None, 16)
    with tempfile.TemporaryDirectory(prefix="draft-layers-") as tmp:
        paths = export_variants(Path(args.draft), drops, Path(tmp))
        timing = time_passes(paths, args.threads, args.rounds)
        results = {}
        for name, path in paths.items():
            mine, agreement = forced(path, cases, args.threads)
            ratio = whole_ratio * timing[name]["ms"] / timing["whole"]["ms"]
            rows = replay_suite(mine, ratios, spec, "auto", draft_ratio=ratio,
                                confidence=confidence_for("auto", None))  # fmt: skip
            summary = summarise(rows)
            results[name] = {"draft_ratio": round(ratio, 4), "agreement": agreement,
                             "speedup": {s: summary[s]["speedup"] for s in suites}}  # fmt: skip
    print(machine_line(machine_info()))
    head = " ".join(f"{'agree ' + s:>12}" for s in suites) + " " + " ".join(
        f"{'replay ' + s:>12}" for s in suites)  # fmt: skip
    print(f"{'dropped':>12} {'ms/token':>9} {'price':>6} {head}")
    for name, r in results.items():
        print(f"{name:>12} {timing[name]['ms']:>9.2f} {r['draft_ratio']:>6.3f} "
              + " ".join(f"{r['agreement'][s]:>12.4f}" for s in suites) + " "
              + " ".join(f"{r['speedup'][s]:>11.3f}x" for s in suites))  # fmt: skip
    if args.json:
        report = {"machine": machine_info(), "draft": args.draft, "record": args.record,
                  "curve": ratios, "whole_draft_ratio": whole_ratio, "timing": timing,
                  "results": results, "command": " ".join(sys.argv)}  # fmt: skip
        Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    reexec_with_tunable()  # time passes in the memory the edgespec command gives them
    main()
