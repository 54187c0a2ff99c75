"""Where an ONNX target's wider passes spend their time, by operator type.

The verify curve t(n)/t(1) sets how far speculation can go on a device. This opens an
exported ONNX model with ONNX Runtime's profiler on, fills its cache with a prefix, then runs
passes of each width (returning every row, as a verify pass does) in rounds across the widths,
rolling the cache back after each, and reports the median pass and each operator type's mean
time per width. (Its --accuracy, MatMulNBits' accuracy levels compared, is at commit f7269df.)

    python bench/gpu/verify_ops.py MODEL_DIR [--widths 1,2,3,4,5,8] [--rounds 10] \
        [--threads 2] [--json F]
    CUDA_LAUNCH_BLOCKING=1 python bench/gpu/verify_ops.py MODEL_DIR --device cuda --widths 1,2,5

On CUDA the passes run without CUDA graphs, and ONNX Runtime times an operator on the host:
with CUDA_LAUNCH_BLOCKING=1 each launch waits for its kernels, so that is the GPU's time
(every pass slower by the waits, alike at every width); without it, launches only.

Run it on a quiet machine: nothing else running.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

try:  # edgespec as installed: on the GPU kit's machine the checkout is not its package layout
    import edgespec  # noqa: F401
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from edgespec.app.bench_runs import machine_info, machine_line  # noqa: E402
from edgespec.plumbing.hugepages import reexec_with_tunable  # noqa: E402

PREFIX = 400  # tokens in the cache when passes are timed (a prompt and some output)
# the vocabulary reductions (top outputs: export/onnx_export.py first_max): each in the table
# at every width, so a run shows whether a wider pass still pays for a long row (issue 44)
REDUCTIONS = ("ReduceMax", "ArgMax", "GatherElements", "ReduceSum")


def profiled_runtime(model_dir: Path, threads: int, prefix: str, device: str = "cpu"):
    """The edgespec ONNX runtime with ONNX Runtime's profiler writing under `prefix`; on
    CUDA without graphs (a replayed graph has no operators to time)."""
    import onnxruntime as ort

    from edgespec.runtimes.onnxrt import OnnxOptions, OnnxRuntime, require_cuda_provider

    original = ort.InferenceSession

    def session(path, options, providers=None):
        options.enable_profiling = True
        options.profile_file_prefix = prefix
        return original(path, options, providers=providers)

    ort.InferenceSession = session
    try:
        where = (
            {"providers": ["CUDAExecutionProvider"], "options": OnnxOptions(cuda_graph=False)}
            if device == "cuda"
            else {"n_threads": threads}
        )
        runtime = OnnxRuntime(model_dir, n_ctx=PREFIX + 64, **where)
    finally:
        ort.InferenceSession = original
    if device == "cuda":
        require_cuda_provider(runtime.session, model_dir)
    return runtime


def run_rounds(runtime, widths: list[int], rounds: int) -> list[int]:
    """Passes of each width in rounds (the first round unrecorded); their widths in order."""
    n = runtime.n_vocab
    runtime.forward([(1000 + i) % n for i in range(PREFIX)], last_only=True)
    base = runtime.n_past
    order = []
    for r in range(rounds + 1):
        for width in widths:
            runtime.forward([(3000 + r + i) % n for i in range(width)])
            runtime.rollback(base)
            order.append(width)
    return order


def by_width(events: list[dict], order: list[int], skip: int) -> dict[int, dict]:
    """Each recorded pass's wall time and its operators' kernel times, grouped by width."""
    runs = sorted(
        (e for e in events if e.get("cat") == "Session" and e["name"] == "model_run"),
        key=lambda e: e["ts"],
    )[-len(order) :]
    nodes = sorted(
        (e for e in events if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")),
        key=lambda e: e["ts"],
    )
    walls: dict[int, list[float]] = collections.defaultdict(list)
    ops: dict[int, collections.Counter] = collections.defaultdict(collections.Counter)
    j = 0
    for i, (run, width) in enumerate(zip(runs, order)):
        while j < len(nodes) and nodes[j]["ts"] < run["ts"]:
            j += 1
        end = run["ts"] + run["dur"]
        while j < len(nodes) and nodes[j]["ts"] <= end:
            if i >= skip:
                ops[width][nodes[j]["args"]["op_name"]] += nodes[j]["dur"]
            j += 1
        if i >= skip:
            walls[width].append(run["dur"] / 1e3)
    out = {}
    for width, times in walls.items():
        n = len(times)
        out[width] = {
            "ms": statistics.median(times),
            "ops_ms": {op: us / n / 1e3 for op, us in ops[width].most_common()},
        }
    return out


def table(result: dict[int, dict], widths: list[int], top: int = 6) -> str:
    """The median pass by width, then the `top` operator types of the widest pass, then
    REDUCTIONS wherever a pass ran them, however little they cost."""
    first = result[widths[0]]["ms"]
    ops = list(result[widths[-1]]["ops_ms"])[:top]
    ran = {op for w in widths for op in result[w]["ops_ms"]}
    ops += [op for op in REDUCTIONS if op in ran and op not in ops]
    lines = [
        "| | " + " | ".join(f"width {w}" for w in widths) + " |",
        "|---" * (len(widths) + 1) + "|",
        "| pass (median ms) | " + " | ".join(f"{result[w]['ms']:.2f}" for w in widths) + " |",
        "| t(n)/t(1) | " + " | ".join(f"{result[w]['ms'] / first:.3f}" for w in widths) + " |",
    ]
    for op in ops:
        cells = " | ".join(f"{result[w]['ops_ms'].get(op, 0.0):.2f}" for w in widths)
        lines.append(f"| {op} (ms) | {cells} |")
    return "\n".join(lines)


def timing(args: argparse.Namespace, blocking: bool) -> str:
    """What the operator times are, for the table's heading."""
    if args.device == "cpu":
        return f"{args.threads} threads"
    if blocking:
        return "CUDA, each launch waited for (CUDA_LAUNCH_BLOCKING=1): operator times are the GPU's"
    return "CUDA: operator times are launches only (set CUDA_LAUNCH_BLOCKING=1)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", type=Path, help="an ONNX model folder (edgespec export)")
    ap.add_argument("--widths", default="1,2,3,4,5,8")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    widths = [int(w) for w in args.widths.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        runtime = profiled_runtime(
            args.model, args.threads, str(Path(tmp) / "profile"), args.device
        )
        order = run_rounds(runtime, widths, args.rounds)
        profile = runtime.session.end_profiling()
        events = json.loads(Path(profile).read_text())
    result = by_width(events, order, skip=len(widths))
    print(machine_line(machine_info()))
    blocking = os.environ.get("CUDA_LAUNCH_BLOCKING") == "1"
    print(f"{args.model}, {timing(args, blocking)}")
    print(table(result, widths))
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "machine": machine_info(),
                    "model": str(args.model),
                    "threads": args.threads,
                    "device": args.device,
                    "cuda_launch_blocking": blocking,
                    "rounds": args.rounds,
                    "widths": {str(w): result[w] for w in widths},
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    reexec_with_tunable()  # time passes in the memory the edgespec command gives them
    main()
