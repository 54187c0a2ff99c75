"""What cutting a draft's output layer to its N lowest token ids buys and costs.

Buys: a cheaper draft token. Each N is exported as the ONNX bundle's draft is (INT4, blocks
of 128; the lowest N ids and every special one: export/onnx_bundle.draft_head), opened at
once, prefilled alike, and its one-token passes are timed in rounds across the N's (so the
machine's drift lands on all of them). Costs: drafts of the ids it drops. With a replay
recording (bench/replay.py record), the share of the target's output tokens each N keeps,
per suite.

    python bench/draft_vocab.py --draft $(edgespec models path demo-draft) \
        --keep 0,32768,65536,98304 [--record docs/results/s10-replay-record-onnx-xeon.json] \
        [--threads 2] [--rounds 10] [--json F]

keep 0 is the whole layer. Run it on a quiet machine: nothing else running.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import TypeVar

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from edgespec.app.bench import machine_info, machine_line  # noqa: E402
from edgespec.export.checkpoint import read_checkpoint  # noqa: E402
from edgespec.export.onnx_bundle import checkpoint_vocab, draft_head  # noqa: E402
from edgespec.export.onnx_export import write_onnx_model  # noqa: E402
from edgespec.hugepages import reexec_with_tunable  # noqa: E402
from edgespec.runtime import Runtime  # noqa: E402
from edgespec.runtimes.onnxrt import OnnxRuntime  # noqa: E402

K = TypeVar("K", int, str)  # what the models are keyed by: a keep, a name
PREFIX = 400  # tokens in the cache when passes are timed (a prompt and some output)
PASSES = 8  # one-token passes per model per round


def export_cuts(source: Path, keeps: list[int], folder: Path) -> dict[int, Path]:
    ckpt = read_checkpoint(source)
    vocab = checkpoint_vocab(ckpt)
    paths = {}
    for keep in keeps:
        out = folder / f"keep-{keep}"
        ranges = draft_head(ckpt, vocab, keep)
        write_onnx_model(ckpt, out, "int4", "fp32", 128, logit_ranges=ranges)
        paths[keep] = out
    return paths


def time_passes(paths: dict[K, Path], threads: int | None, rounds: int) -> dict[K, dict]:
    """timed_rounds of each ONNX model, and the columns of its output layer."""
    runtimes = {k: OnnxRuntime(p, n_ctx=4096, n_threads=threads) for k, p in paths.items()}
    timing = timed_rounds(runtimes, rounds)
    return {k: {"columns": runtimes[k].n_logits, **timing[k]} for k in runtimes}


def timed_rounds(runtimes: dict[K, Runtime], rounds: int, passes: int = PASSES) -> dict[K, dict]:
    """Median and quartiles of one-token pass times (ms) after a PREFIX-token prefill, in
    rounds of `passes` per model across the models. Each round starts one model later, so
    none always follows the same one. Run as a script, it runs with huge pages, as `edgespec`
    does: without them the model opened first ran ~7% slow here (one draft opened first and
    third: 15.9 and 14.9 ms; with them 14.3 and 14.4)."""
    n_vocab = min(rt.n_vocab for rt in runtimes.values())
    prompt = [(1000 + i) % n_vocab for i in range(PREFIX)]
    for rt in runtimes.values():
        rt.forward(prompt, last_only=True)
    times: dict[K, list[float]] = {k: [] for k in runtimes}
    order = list(runtimes)
    for r in range(rounds):
        for key in order[r % len(order) :] + order[: r % len(order)]:
            rt = runtimes[key]
            rt.rollback(PREFIX)
            for i in range(passes):
                t0 = time.perf_counter()
                rt.forward([(2000 + r * passes + i) % n_vocab], last_only=True)
                times[key].append(time.perf_counter() - t0)
    out = {}
    for key, ts in times.items():
        q1, med, q3 = np.percentile(np.asarray(ts[passes:]) * 1e3, [25, 50, 75])  # round 1 warms
        out[key] = {"ms": round(float(med), 3), "q1_ms": round(float(q1), 3),
                    "q3_ms": round(float(q3), 3)}  # fmt: skip
    return out


def coverage(record: dict, keeps: list[int]) -> dict[str, dict[int, float]]:
    """Per suite: the share of the target's output tokens below each keep (or its stop)."""
    by_suite: dict[str, list[int]] = {}
    eog = {}
    for case in record["cases"]:
        by_suite.setdefault(case["suite"], []).extend(case["output"])
        eog[case["suite"]] = case["eog"]
    result = {}
    for suite, tokens in by_suite.items():
        t = np.asarray(tokens)
        result[suite] = {
            keep: round(float(((t < keep) | (t == eog[suite])).mean()) if keep else 1.0, 4)
            for keep in keeps
        }
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--draft", required=True, help="the draft's HF folder or GGUF")
    ap.add_argument("--keep", default="0,32768,65536,98304")
    ap.add_argument("--record", help="a bench/replay.py recording: coverage per suite")
    ap.add_argument("--threads", type=int)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--json")
    args = ap.parse_args()
    keeps = [int(k) for k in args.keep.split(",")]
    with tempfile.TemporaryDirectory(prefix="draft-vocab-") as tmp:
        paths = export_cuts(Path(args.draft), keeps, Path(tmp))
        timing = time_passes(paths, args.threads, args.rounds)
    covered = coverage(json.loads(Path(args.record).read_text()), keeps) if args.record else {}
    full = timing[keeps[0]]["ms"]
    print(machine_line(machine_info()))
    print(f"{'keep':>7} {'columns':>8} {'ms/token':>9} {'vs first':>8}  " +
          " ".join(f"{s:>6}" for s in covered))  # fmt: skip
    for keep in keeps:
        row = timing[keep]
        print(f"{keep:>7} {row['columns']:>8} {row['ms']:>9.2f} {row['ms'] / full:>8.3f}  " +
              " ".join(f"{covered[s][keep]:>6.4f}" for s in covered))  # fmt: skip
    if args.json:
        report = {"machine": machine_info(), "draft": args.draft,
                  "threads": args.threads, "prefix": PREFIX, "timing": timing,
                  "coverage": covered, "command": " ".join(sys.argv)}  # fmt: skip
        Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    reexec_with_tunable()  # time passes in the memory the edgespec command gives them
    main()
