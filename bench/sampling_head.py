"""What a sampled step's rows cost through the sampling head, against token_dist on the host.

Where the logits are on a GPU, the sampling head (runtimes/sampling_head.py) reduces each row
to its likeliest columns there, and sampling.candidate_dist makes the row's distribution from
them. This times, on the CPU, both ways of getting every row's distribution from [n, V] logits
already on the host: the head's graph plus candidate_dist, and token_dist over each whole row.
On the CPU nothing is copied, so this is the head's cost alone (why a CPU runtime leaves it
off); what it saves on a GPU, the copy and the host's passes over the vocabulary, the GPU
kit's measure.py measures on a whole model (`sampling_head` in its JSON).

Rows: a real model's, one per token of its greedy answer to a chat prompt (--model), or
made-up ones (a noisy floor and a dozen tokens far above it).

    python bench/sampling_head.py [--model BUNDLE_OR_GGUF] [--widths 1,2,5,9] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from top_outputs import median_ms  # noqa: E402

from edgespec.app.bench import machine_info
from edgespec.hugepages import reexec_with_tunable
from edgespec.sampling import SamplingParams, TokenDist, candidate_dist, token_dist

PROMPT = (
    "<|im_start|>user\nExplain in a short paragraph why the sky is blue, then give two "
    "everyday examples of the same effect.<|im_end|>\n<|im_start|>assistant\n"
)
PARAMS = {
    "T0.8 top-k 40 top-p 0.9": SamplingParams(0.8, top_k=40, top_p=0.9),
    "T0.8 top-p 0.9": SamplingParams(0.8, top_p=0.9),
}


def peaked(n: int, vocab: int, rng: np.random.Generator) -> np.ndarray:
    x = rng.standard_normal((n, vocab)).astype(np.float32) * 1.5
    for row in x:
        row[rng.choice(vocab, 12, replace=False)] += rng.uniform(6, 12, 12).astype(np.float32)
    return x


def by_head(head, value, x: np.ndarray, sp: SamplingParams) -> list[TokenDist]:
    """The runtime's way: the head's candidates, and a row they cannot decide read whole."""
    from edgespec.runtimes.sampling_head import head_dists

    dist = head_dists(head.run(value, sp.temperature), x.__getitem__, x.shape[-1], sp)
    return [dist(i) for i in range(len(x))]


def by_host(x: np.ndarray, sp: SamplingParams) -> list[TokenDist]:
    return [token_dist(row, sp) for row in x]


def measure(rows_by_width: dict[int, np.ndarray], repeats: int) -> list[dict]:
    """rows_by_width: width -> [width, V] float32 logits."""
    import onnxruntime as ort

    from edgespec.runtimes.sampling_head import SamplingHead

    vocab = next(iter(rows_by_width.values())).shape[-1]
    head = SamplingHead(ort, vocab, ["CPUExecutionProvider"])
    out = []
    for n, x in rows_by_width.items():
        value = ort.OrtValue.ortvalue_from_numpy(x[None])
        for name, sp in PARAMS.items():
            ways = {
                "head": partial(by_head, head, value, x, sp),
                "host": partial(by_host, x, sp),
            }
            found = head.run(value, sp.temperature)
            decided = sum(
                candidate_dist(found.values[i], found.ids[i], float(found.lse[i]), vocab, sp)
                is not None
                for i in range(n)
            )
            ms: dict[str, list[float]] = {way: [] for way in ways}
            for _ in range(3):  # rounds: the two ways take turns
                for way, fn in ways.items():
                    ms[way].append(median_ms(fn, repeats))
            out.append({"width": n, "params": name, "rows decided": f"{decided}/{n}",
                        **{way: round(min(v), 4) for way, v in ms.items()}})  # fmt: skip
    return out


COVERAGE = {  # sampling settings assistants use: the share of rows the candidates decide
    f"T{t} top-p {p}": SamplingParams(t, top_p=p) for t in (0.7, 1.0) for p in (0.9, 0.95)
} | {"T1.0 min-p 0.05": SamplingParams(1.0, min_p=0.05)}


def coverage(x: np.ndarray) -> dict[str, float]:
    """For each COVERAGE setting, the share of rows x [n, V] the head's candidates decide."""
    import onnxruntime as ort

    from edgespec.runtimes.sampling_head import SamplingHead

    head = SamplingHead(ort, x.shape[-1], ["CPUExecutionProvider"])
    value = ort.OrtValue.ortvalue_from_numpy(x[None])
    out = {}
    for name, sp in COVERAGE.items():
        found = head.run(value, sp.temperature)
        decided = [
            candidate_dist(found.values[i], found.ids[i], float(found.lse[i]), x.shape[-1], sp)
            is not None
            for i in range(len(x))
        ]
        out[name] = round(float(np.mean(decided)), 4)
    return out


def model_rows(bundle: str, prompt: str, n: int) -> np.ndarray:
    """[n, V] logits of a real model's greedy decoding: one row per generated token."""
    from edgespec.backends import RuntimeOptions, open_runtime

    rt = open_runtime(bundle, RuntimeOptions(n_ctx=2048, n_threads=2))
    tokens = rt.tokenize(prompt, special=True)
    rt.forward(tokens[:-1], last_only=True)
    rows, last = [], tokens[-1]
    for _ in range(n):
        row = rt.forward([last], last_only=True)[0]
        rows.append(row)
        last = int(np.argmax(row))
    return np.stack(rows).astype(np.float32)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", type=int, default=151_936)
    ap.add_argument("--widths", default="1,2,5,9")
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--model", help="rows of this model's greedy decoding instead of made-up ones")
    ap.add_argument("--prompt", default=PROMPT)
    ap.add_argument("--coverage-rows", type=int, default=128, help="--model rows to cover")
    ap.add_argument("--json")
    args = ap.parse_args()
    widths = [int(w) for w in args.widths.split(",")]
    shares = None
    if args.model:
        pool = model_rows(args.model, args.prompt, max(sum(widths), args.coverage_rows))
        ends = np.cumsum([0, *widths])
        by_width = {n: pool[ends[i] : ends[i + 1]] for i, n in enumerate(widths)}
        shares = coverage(pool)
    else:
        rng = np.random.default_rng(0)
        by_width = {n: peaked(n, args.vocab, rng) for n in widths}
    rows = measure(by_width, args.repeats)
    source = args.model or "made-up rows"
    print(f"{source}, CPU; median ms for every row's distribution")
    print("| width | sampling | rows the candidates decide | head (and whole rows) | token_dist |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['width']} | {r['params']} | {r['rows decided']} | {r['head']:.3f} | "
              f"{r['host']:.3f} |")  # fmt: skip
    if shares:
        print(f"rows the candidates decide, of the model's {len(pool)}: "
              + ", ".join(f"{name} {share:.0%}" for name, share in shares.items()))  # fmt: skip
    if args.json:
        report = {"machine": machine_info(), "rows": source, "prompt": args.prompt,
                  "table": rows, "coverage": shares}  # fmt: skip
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    reexec_with_tunable()  # time passes in the memory the edgespec command gives them
    main()
