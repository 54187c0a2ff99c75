"""What the graph's top outputs cost where they run, against reducing the logits on the host.

A graph exported for the GPU also outputs each row's argmax and its probability (top_id,
top_p; export/onnx_export.top_outputs), so a greedy step copies [rows] numbers instead of
[rows, V] logits. This times exactly those nodes, on a graph of the logits alone, against
the host's way (numpy's argmax and probability of a copied row: base.top_of), per width, on
the CPU. There the logits are already on the host, so the nodes only add, and the export
leaves them out of float32 (CPU) graphs. On a GPU they save the copy: bench/gpu/measure.py's
`top_outputs` measures that on a whole model.

    python bench/top_outputs.py [--vocab 151936] [--widths 1,2,5,9] [--threads 2] \
        [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

from edgespec.app.bench import machine_info
from edgespec.export.onnx_export import GraphBuilder, top_outputs
from edgespec.hugepages import reexec_with_tunable
from edgespec.runtime import top_of


def logits_graph(vocab: int, with_top: bool):
    """logits [1, n, vocab] in, the same logits out (and top_id, top_p with with_top)."""
    from onnx import TensorProto, helper

    g = GraphBuilder("fp32")
    g.const("axis_last", np.array([-1], np.int64))
    g.inputs.append(helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "n", vocab]))
    g.nodes.append(helper.make_node("Identity", ["x"], ["logits"], name="logits"))
    g.outputs.append(helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, "n", vocab]))
    if with_top:
        top_outputs(g, "x")
    return g.model()


def session(vocab: int, with_top: bool, threads: int):
    import onnxruntime as ort

    from edgespec.runtimes.onnxrt import configure_threads, default_pool

    opts = ort.SessionOptions()
    configure_threads(opts, default_pool(), threads)  # the pool the runtime's sessions take
    opts.log_severity_level = 3
    model = logits_graph(vocab, with_top).SerializeToString()
    return ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])


def median_ms(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def ways(plain, top, x: np.ndarray) -> dict:
    """Each way of getting a greedy step's rows, as a call to time."""
    return {
        "graph": lambda: plain.run(None, {"x": x}),
        "graph + top outputs": lambda: top.run(None, {"x": x}),
        "host argmax + probability": lambda: top_of(x[0].copy()),
        "host argmax": lambda: top_of(x[0].copy(), False),
    }


def measure(vocab: int, widths: list[int], threads: int, repeats: int) -> list:
    plain, top = (session(vocab, t, threads) for t in (False, True))
    rows = []
    rng = np.random.default_rng(0)
    for n in widths:
        x = (3 * rng.standard_normal((1, n, vocab))).astype(np.float32)
        got = top.run(["top_id", "top_p"], {"x": x})
        want = top_of(x[0])
        assert got[0][0].tolist() == want.ids.tolist()
        ms: dict[str, list[float]] = {}
        for _ in range(3):  # rounds: the two graphs and the host take turns
            for name, fn in ways(plain, top, x).items():
                ms.setdefault(name, []).append(median_ms(fn, repeats))
        best = {name: round(min(v), 4) for name, v in ms.items()}
        best["top outputs add"] = round(best["graph + top outputs"] - best["graph"], 4)
        rows.append({"width": n, **best})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", type=int, default=151_936)
    ap.add_argument("--widths", default="1,2,5,9")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=100)
    ap.add_argument("--json")
    args = ap.parse_args()
    widths = [int(w) for w in args.widths.split(",")]
    rows = measure(args.vocab, widths, args.threads, args.repeats)
    names = [k for k in rows[0] if k != "width"]
    print(f"V = {args.vocab}, CPU, {args.threads} threads; median ms per call")
    print("| width | " + " | ".join(names) + " |")
    print("|---" * (len(names) + 1) + "|")
    for r in rows:
        print(f"| {r['width']} | " + " | ".join(f"{r[k]:.3f}" for k in names) + " |")
    if args.json:
        report = {"machine": machine_info(), "vocab": args.vocab, "threads": args.threads,
                  "rows": rows}  # fmt: skip
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    reexec_with_tunable()  # time passes in the memory the edgespec command gives them
    main()
