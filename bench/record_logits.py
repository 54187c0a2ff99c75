"""Record a target's logits rows on real text, for bench/loop_overhead.py --logits.

For each of a few suite prompts (bench/data/*.jsonl), the target decodes greedily and every
decode step's full logits row is kept as float16 (exact enough for timing the sampling loop
on a real model's distributions; the rows are rounded once, here, and replayed as they are).
The rows go to one .npy file of shape [n, V] float16 (about 300 KB a row at V = 151,936:
keep it in a temporary folder, not in git) beside a small JSON of what was recorded.

    python bench/record_logits.py --target ~/.cache/edgespec/models/demo-target.gguf \
        --out /tmp/edgespec-logits [--per-prompt 64 --prompts 6]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from edgespec.backends import open_runtime
from edgespec.chat import chat_tokens

DATA = Path(__file__).with_name("data")
SUITES = ("chat.jsonl", "open.jsonl", "edit.jsonl")


def suite_prompts(n: int) -> list[tuple[str, list[dict]]]:
    """n prompts taken in turn from the suites (chat, open, edit, chat, ...)."""
    suites = [[json.loads(line) for line in (DATA / s).read_text().splitlines() if line]
              for s in SUITES]  # fmt: skip
    out = []
    for i in range(n):
        case = suites[i % len(suites)][i // len(suites)]
        out.append((case["id"], case["messages"]))
    return out


def record(target: str, n_prompts: int, per_prompt: int) -> tuple[np.ndarray, list[dict]]:
    rt = open_runtime(target)
    rows, meta = [], []
    for case_id, messages in suite_prompts(n_prompts):
        rt.reset()
        tokens = chat_tokens(rt, messages)
        row = rt.forward(tokens, last_only=True)[-1]
        for _ in range(per_prompt):
            rows.append(row.astype(np.float16))
            token = int(np.argmax(row))
            row = rt.forward([token], last_only=True)[-1]
        meta.append({"id": case_id, "prompt_tokens": len(tokens), "rows": per_prompt})
        print(f"{case_id}: {len(tokens)} prompt tokens, {per_prompt} rows")
    return np.stack(rows), meta


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", required=True, help="a .gguf (or ONNX bundle) target")
    ap.add_argument("--out", required=True, help="folder for logits.npy and logits.json")
    ap.add_argument("--prompts", type=int, default=6)
    ap.add_argument("--per-prompt", type=int, default=64, help="decode steps per prompt")
    args = ap.parse_args()
    rows, meta = record(args.target, args.prompts, args.per_prompt)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    np.save(out / "logits.npy", rows)
    info = {"target": str(args.target), "time": time.time(), "shape": list(rows.shape),
            "dtype": "float16", "prompts": meta}  # fmt: skip
    (out / "logits.json").write_text(json.dumps(info, indent=1))
    print(f"{rows.shape[0]} rows of {rows.shape[1]} logits -> {out / 'logits.npy'}")


if __name__ == "__main__":
    main()
