"""The verify cost curve of an exported ONNX model: seconds for a pass over n tokens (logits
for every row, as the verify step asks) and its ratio to one token, n = 1..9.

Speculation pays when t(k+1)/t(1) stays well under the tokens a step emits, so this curve,
together with acceptance, decides the k that the controller picks. With --gguf, the same
curve is measured on llama.cpp for comparison (same prefix, same random tokens).

    python bench/onnx_curve.py MODEL_DIR [--gguf model.gguf] [--threads N] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

from edgespec.calibrate import device_description, measure_curve
from edgespec.hugepages import reexec_with_tunable


def curve_entry(name: str, runtime, n_max: int, prefix: int, reps: int) -> dict:
    t0 = time.perf_counter()
    seconds = measure_curve(runtime, n_max, prefix=prefix, reps=reps)
    return {
        "runtime": name,
        "seconds": [round(s, 6) for s in seconds],
        "ratio": [round(s / seconds[0], 3) for s in seconds],
        "measured_in_s": round(time.perf_counter() - t0, 2),
    }


def print_entry(entry: dict) -> None:
    print(f"{entry['runtime']}: 1 token {entry['seconds'][0] * 1e3:.2f} ms")
    print("  n      " + " ".join(f"{n:>6d}" for n in range(1, len(entry["seconds"]) + 1)))
    print("  ms     " + " ".join(f"{s * 1e3:6.2f}" for s in entry["seconds"]))
    print("  t/t(1) " + " ".join(f"{r:6.2f}" for r in entry["ratio"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", type=Path, help="folder written by export_onnx")
    parser.add_argument("--gguf", type=Path, help="a GGUF of the same model, for comparison")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--n-max", type=int, default=9)
    parser.add_argument("--prefix", type=int, default=128, help="tokens in the cache first")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--cuda", action="store_true", help="CUDA EP (CUDA graphs on)")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    from edgespec.runtimes.onnxrt import OnnxRuntime

    providers = ["CUDAExecutionProvider", "CPUExecutionProvider"] if args.cuda else None
    onnx_rt = OnnxRuntime(args.model_dir, n_ctx=1024, n_threads=args.threads, providers=providers)
    results = [curve_entry("onnxruntime", onnx_rt, args.n_max, args.prefix, args.reps)]
    del onnx_rt
    if args.gguf:
        from edgespec.runtimes.llamacpp import LlamaCppRuntime

        llama = LlamaCppRuntime(args.gguf, n_ctx=1024, n_threads=args.threads)
        results.append(curve_entry("llama.cpp", llama, args.n_max, args.prefix, args.reps))
    for entry in results:
        print_entry(entry)
    if args.json:
        info = json.loads((args.model_dir / "model.json").read_text())
        report = {
            "model_dir": str(args.model_dir),
            "model": {k: info.get(k) for k in ("arch", "n_layer", "n_embd", "n_vocab", "quant")},
            "device": device_description(),
            "threads": args.threads,
            "prefix": args.prefix,
            "curves": results,
        }
        args.json.write_text(json.dumps(report, indent=1) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    reexec_with_tunable()  # time passes in the memory the edgespec command gives them
    main()
