"""How far an ONNX export's logits sit from the GGUF it came from, teacher-forced on real text.

For each ONNX model folder: top-1 agreement with llama.cpp on the source GGUF, and the mean
KL divergence KL(gguf || onnx) per token, over the bench's own source files. This is how the
INT4 block size was chosen (docs/benchmarks.md): both exports requantize the demo's Q4_K_M.

    python bench/onnx_fidelity.py --gguf T.gguf ONNX_DIR [ONNX_DIR ...] [--tokens 512] [--json F]
"""

from __future__ import annotations

import argparse
import json
from importlib import resources
from pathlib import Path

import numpy as np


def source_text() -> str:
    src = resources.files("edgespec.bench_data") / "src"
    return "\n\n".join(f.read_text() for f in sorted(src.iterdir(), key=lambda f: f.name))


def log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


def compare(reference: np.ndarray, logits: np.ndarray) -> dict:
    p_log, q_log = log_softmax(reference.astype(np.float64)), log_softmax(logits.astype(np.float64))
    kl = (np.exp(p_log) * (p_log - q_log)).sum(-1)
    return {
        "top1_agreement": round(float((reference.argmax(-1) == logits.argmax(-1)).mean()), 4),
        "mean_kl": round(float(kl.mean()), 5),
        "max_kl": round(float(kl.max()), 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("onnx_dirs", type=Path, nargs="+")
    parser.add_argument("--gguf", type=Path, required=True)
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    from edgespec.runtimes.llamacpp import LlamaCppRuntime
    from edgespec.runtimes.onnxrt import OnnxRuntime

    n_ctx = args.tokens + 8
    llama = LlamaCppRuntime(args.gguf, n_ctx=n_ctx)
    tokens = llama.tokenize(source_text(), special=False)[: args.tokens]
    reference = llama.forward(tokens)
    del llama
    rows = []
    for folder in args.onnx_dirs:
        info = json.loads((folder / "model.json").read_text())
        row = {"model": str(folder), "quant": info["quant"], "block_size": info["block_size"]}
        row |= compare(reference, OnnxRuntime(folder, n_ctx=n_ctx).forward(tokens))
        row["weight_error_mean"] = (info.get("weight_error") or {}).get("mean")
        rows.append(row)
        print(
            f"{folder}: {row['quant']} block {row['block_size']}: top-1 agreement "
            f"{row['top1_agreement']:.3f}, mean KL {row['mean_kl']:.4f} (max {row['max_kl']:.2f}), "
            f"weight error {row['weight_error_mean']}"
        )
    if args.json:
        report = {"gguf": str(args.gguf), "tokens": len(tokens), "rows": rows}
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
