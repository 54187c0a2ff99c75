"""How much a back-end's logits for a token change with the width of the pass it is in.

Speculative output equals plain decoding exactly when a token's logits are the same whether
it is evaluated alone (plain) or at any position of a verify pass of k+1 tokens. For each
width n this forwards n real tokens in one pass after a prefix, then the same tokens one at
a time from the same cache, and reports the largest absolute logit difference over every
row and how often the argmax differs. Windows follow each other (the one-token passes leave
the cache as plain decoding would), so the prefix is prefilled once.

Each --config is one way to open the model; several are compared in one table:

    python bench/batch_invariance.py MODEL [MODEL ...] [--widths 2-9] [--windows 6]
        [--config default --config repack=0 --config repack=0,fa=0 --config pad=4 ...]
        [--json F]

GGUF keys (llama.cpp): repack=0|1 (CPU weight repacking, llama.cpp's extra buffer types),
fa=0|1 (flash attention; default: llama.cpp's choice), pad=N (pad every pass to a multiple
of N tokens), min=N (pad narrower passes to N tokens), tiled=0|1|2 (ggml's tiled K-quant
matmul off, on from 8 rows (its default), forced at every width), threads=N, exact=1
(RuntimeOptions(exact=True): what --exact picks). Each config runs in a process of its own
(ggml reads its switches once per process). --prefix 600 reaches the one-token passes that
llama.cpp's flash attention splits over the KV cache from 512 cells on.
ONNX keys: accuracy=0|1|2|3|4 (MatMulNBits accuracy_level, rewritten into a copy of the
graph that shares the weights file), pad=N (OnnxRuntime pad_to_width), min=N (OnnxRuntime
min_width: one-token passes padded to N rows), multiple=N (OnnxRuntime row_multiple: every
pass padded to a multiple of N rows), threads=N, exact=1.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np


def measure(runtime, tokens: list[int], prefix: int, widths: list[int], windows: int) -> list:
    rows = []
    runtime.reset()
    runtime.forward(tokens[:prefix], last_only=True)
    start = prefix
    for n in widths:
        diffs, flips, count = [], 0, 0
        for _ in range(windows):
            if start + n > len(tokens):
                raise SystemExit(f"--tokens {len(tokens)} is too few for these widths")
            together = runtime.forward(tokens[start : start + n])  # [n, V]
            runtime.rollback(start)
            alone = np.stack([runtime.forward([t])[-1] for t in tokens[start : start + n]])
            diffs.append(float(np.abs(together - alone).max()))
            flips += int((together.argmax(-1) != alone.argmax(-1)).sum())
            count += n
            start += n
        rows.append({"width": n, "max_abs_diff": max(diffs),
                     "median_max_abs_diff": float(np.median(diffs)),
                     "argmax_flips": flips, "tokens": count})  # fmt: skip
    return rows


def parse_config(text: str) -> dict[str, int]:
    if text == "default":
        return {}
    out = {}
    for item in text.split(","):
        key, _, value = item.partition("=")
        out[key.strip()] = int(value)
    return out


def open_model(path: Path, config: dict[str, int], n_ctx: int, scratch: Path):
    from edgespec.backends import RuntimeOptions, open_runtime

    threads = config.get("threads")
    if config.get("exact"):
        return open_runtime(path, RuntimeOptions(n_ctx=n_ctx, n_threads=threads, exact=True))
    if path.is_dir():
        from edgespec.runtimes.onnxrt import OnnxRuntime

        folder = path
        if "accuracy" in config:
            folder = with_accuracy_level(path, config["accuracy"], scratch)
        return OnnxRuntime(folder, n_ctx=n_ctx, n_threads=threads, pad_to_width=config.get("pad"),
                           min_width=config.get("min", 1),
                           row_multiple=config.get("multiple", 1))  # fmt: skip
    from edgespec.runtimes.llamacpp import LlamaCppRuntime

    fa, tiled = config.get("fa"), config.get("tiled")
    if tiled == 2:
        os.environ["GGML_CPU_TILED_MM_FORCE"] = "1"
    return LlamaCppRuntime(path, n_ctx=n_ctx, n_threads=threads,
                           repack=bool(config.get("repack", 1)),
                           flash_attn=None if fa is None else bool(fa),
                           pad_to=config.get("pad", 1), min_width=config.get("min", 1),
                           tiled=None if tiled is None else bool(tiled))  # fmt: skip


def with_accuracy_level(model_dir: Path, level: int, scratch: Path) -> Path:
    """A copy of an exported ONNX folder whose MatMulNBits nodes compute at `level`: the
    graph is rewritten, every other file (the weights too) is hard-linked (ONNX Runtime
    refuses external data reached through a symlink out of the model's folder) or copied."""
    import onnx

    out = scratch / f"{model_dir.name}-accuracy{level}"
    if out.exists():
        return out
    out.mkdir(parents=True)
    info = json.loads((model_dir / "model.json").read_text())
    graph_file = info.get("model_file", "model.onnx")
    for f in model_dir.iterdir():
        if f.name != graph_file:
            link_or_copy(f.resolve(), out / f.name)
    model = onnx.load(str(model_dir / graph_file), load_external_data=False)
    for node in model.graph.node:
        if node.op_type == "MatMulNBits":
            for attr in node.attribute:
                if attr.name == "accuracy_level":
                    attr.i = level
    onnx.save(model, str(out / graph_file))
    return out


def link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:  # another file system
        shutil.copyfile(source, target)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", type=Path)
    parser.add_argument("--widths", default="2-9", help="e.g. 2-9 or 2,5,9")
    parser.add_argument("--config", action="append", help="see the module docstring")
    parser.add_argument("--tokens", type=int, default=256, help="text tokens to read")
    parser.add_argument("--prefix", type=int, default=64)
    parser.add_argument("--windows", type=int, default=6, help="passes per width")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: one model and config
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_one(args, args.models[0], args.one)))
        return
    report = []
    for path in args.models:
        for text in args.config or ["default"]:
            argv = [a for a in sys.argv[1:] if a != str(path)]
            argv = [sys.executable, __file__, str(path), *drop_options(argv), "--one", text]
            done = subprocess.run(argv, capture_output=True, text=True)
            if done.returncode:
                print(f"{path.name} [{text}]: failed\n{done.stderr[-2000:]}", flush=True)
                continue
            entry = json.loads(done.stdout.strip().splitlines()[-1])
            report.append(entry)
            rows = entry["rows"]
            moved = [r["width"] for r in rows if r["max_abs_diff"] > 0]
            print(f"{path.name} [{text}]: max |diff| "
                  + " ".join(f"n={r['width']}:{r['max_abs_diff']:.3g}" for r in rows)
                  + f"; argmax flips {sum(r['argmax_flips'] for r in rows)}"
                  + f"/{sum(r['tokens'] for r in rows)}; widths that move: {moved or 'none'}",
                  flush=True)  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


def drop_options(argv: list[str]) -> list[str]:
    """argv without --config/--json (and their values) and without the model paths."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a in ("--config", "--json"):
            skip = True
        elif not (a.startswith("--config=") or a.startswith("--json=") or Path(a).exists()):
            out.append(a)
    return out


def run_one(args: argparse.Namespace, path: Path, text: str) -> dict:
    from onnx_fidelity import source_text  # the same text, beside this script

    if "-" in args.widths:
        lo, hi = (int(w) for w in args.widths.split("-"))
        widths = list(range(lo, hi + 1))
    else:
        widths = [int(w) for w in args.widths.split(",")]
    scratch = Path(tempfile.mkdtemp(prefix="edgespec-invariance-"))
    try:
        runtime = open_model(path, parse_config(text), args.tokens + 32, scratch)
        tokens = runtime.tokenize(source_text(), special=False)[: args.tokens]
        rows = measure(runtime, tokens, args.prefix, widths, args.windows)
        return {"model": str(path), "runtime": type(runtime).__name__, "config": text,
                "prefix": args.prefix, "rows": rows}  # fmt: skip
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
