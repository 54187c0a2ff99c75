"""What, besides the draft model's own probability, says whether its token will be kept.

The draft-confidence gate ends a draft at the draft model's first token it gives less than
0.7. The gap between `auto` and the replay's oracle on open text is drafting tokens the
target then rejects, so a better predictor of rejection would close some of it. This takes a
replay recording with a draft model (`bench/replay.py record`), teacher-forces the recorded
target over the recorded outputs for its own probability at every position (known to the
loop one step late: the previous position's, from the last verify pass), and asks whether
that or the previous draft token's fate adds to the draft's probability. It prints the
acceptance of the draft's token by its probability against the target's previous-position
probability, and the log-loss of logistic fits of acceptance on each set of signals; the
last fit uses the target's probability at the token's own position, which no drafter knows
before verifying: a reference for what foresight would give.

    python bench/gate_features.py --record docs/results/s10-replay-record-onnx-xeon.json \
        --suites open,chat [--threads 2] [--json out.json]

It runs the target over every recorded output once (a few minutes for open and chat).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from replay import teacher_forced  # noqa: E402

from edgespec.backends import RuntimeOptions  # noqa: E402
from edgespec.pair import open_pair  # noqa: E402

DRAFT_EDGES = (0.0, 0.3, 0.5, 0.7, 0.9, 1.01)
TARGET_EDGES = (0.0, 0.5, 0.7, 0.9, 0.99, 1.01)


def signals(recording: dict, suites: set[str], threads: int | None) -> dict[str, np.ndarray]:
    """Per output position after the first, of the chosen suites: whether the draft model's
    token is the target's (`kept`), its probability, the previous position's draft outcome,
    and the target's probability at the previous and at this position."""
    pair = open_pair(recording["target"], None, RuntimeOptions(n_ctx=4096, n_threads=threads))
    cols: dict[str, list] = {k: [] for k in ("kept", "draft_p", "kept_before", "target_p_before",
                                             "target_p")}  # fmt: skip
    for case in recording["cases"]:
        if case["suite"] not in suites:
            continue
        _, target_p = teacher_forced(pair.target, case["prompt"], case["output"])
        kept = [int(d == t) for d, t in zip(case["draft"], case["output"], strict=True)]
        for i in range(1, len(kept)):
            cols["kept"].append(kept[i])
            cols["draft_p"].append(case["draft_p"][i])
            cols["kept_before"].append(kept[i - 1])
            cols["target_p_before"].append(target_p[i - 1])
            cols["target_p"].append(target_p[i])
    return {k: np.array(v, dtype=np.float64) for k, v in cols.items()}


def acceptance_table(s: dict[str, np.ndarray]) -> list[list[tuple[float, int]]]:
    """(acceptance, count) by draft probability (rows) and target's previous one (columns)."""
    table = []
    for d0, d1 in zip(DRAFT_EDGES, DRAFT_EDGES[1:]):
        row = []
        for t0, t1 in zip(TARGET_EDGES, TARGET_EDGES[1:]):
            m = (s["draft_p"] >= d0) & (s["draft_p"] < d1)
            m &= (s["target_p_before"] >= t0) & (s["target_p_before"] < t1)
            row.append((float(s["kept"][m].mean()) if m.any() else float("nan"), int(m.sum())))
        table.append(row)
    return table


def logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(p, 1e-4, 1 - 1e-4)
    return np.log(p / (1 - p))


def fit_log_loss(columns: list[np.ndarray], kept: np.ndarray) -> tuple[float, list[float]]:
    """Mean log-loss of a logistic regression of kept on the columns (Newton's method)."""
    x = np.column_stack([np.ones(len(kept)), *columns])
    w = np.zeros(x.shape[1])
    for _ in range(50):
        p = 1 / (1 + np.exp(-x @ w))
        hessian = (x * (p * (1 - p))[:, None]).T @ x + 1e-9 * np.eye(len(w))
        w -= np.linalg.solve(hessian, x.T @ (p - kept))
    p = np.clip(1 / (1 + np.exp(-x @ w)), 1e-12, 1 - 1e-12)
    loss = -np.mean(kept * np.log(p) + (1 - kept) * np.log(1 - p))
    return float(loss), [round(float(v), 4) for v in w]


FITS = {
    "draft p": ["draft_p"],
    "draft p + target p before": ["draft_p", "target_p_before"],
    "draft p + kept before": ["draft_p", "kept_before"],
    "draft p + both": ["draft_p", "target_p_before", "kept_before"],
    "draft p + target p at the token (foresight)": ["draft_p", "target_p"],
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--record", required=True, help="bench/replay.py record's output")
    ap.add_argument("--suites", default="open,chat")
    ap.add_argument("--threads", type=int)
    ap.add_argument("--json")
    args = ap.parse_args()
    recording = json.loads(Path(args.record).read_text())
    if not all("draft" in case for case in recording["cases"]):
        raise SystemExit(f"{args.record} holds no draft model's predictions")
    s = signals(recording, set(args.suites.split(",")), args.threads)
    kept = s["kept"]
    print(f"{len(kept)} positions of {args.suites}; draft token kept {kept.mean():.3f}")
    table = acceptance_table(s)
    heads = [f"{a:.2f}-{min(b, 1):.2f}" for a, b in zip(TARGET_EDGES, TARGET_EDGES[1:])]
    print("\n| draft p \\ target p before | " + " | ".join(heads) + " |")
    print("|---" * (len(heads) + 1) + "|")
    for (d0, d1), row in zip(zip(DRAFT_EDGES, DRAFT_EDGES[1:]), table):
        cells = [f"{a:.2f} ({n})" for a, n in row]
        print(f"| {d0:.1f}-{min(d1, 1):.1f} | " + " | ".join(cells) + " |")
    fits = {}
    print("\n| signals | log-loss | weights (bias first; probabilities as logits) |")
    print("|---|---|---|")
    for name, keys in FITS.items():
        cols = [logit(s[k]) if k != "kept_before" else s[k] for k in keys]
        loss, weights = fit_log_loss(cols, kept)
        fits[name] = {"log_loss": round(loss, 5), "weights": weights}
        print(f"| {name} | {loss:.4f} | {weights} |")
    if args.json:
        report = {"record": args.record, "suites": args.suites, "positions": len(kept),
                  "kept": round(float(kept.mean()), 4), "table": table, "fits": fits}  # fmt: skip
        Path(args.json).write_text(json.dumps(report, indent=1))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
