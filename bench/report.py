"""Markdown tables from the JSON that `edgespec bench` and the bench/ scripts write.

python bench/report.py docs/results > docs/results/tables.md
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

COLUMNS = ("method", "k", "tok/s", "speedup [95% CI]", "over", "accept", "len", "plain steps",
           "identical", "departures (index: top-2 gap)")  # fmt: skip


def fmt(value: object, digits: int = 2) -> str:
    return (
        "-" if value is None else f"{value:.{digits}f}" if isinstance(value, float) else str(value)
    )


def speedup(row: dict) -> str:
    ci = row.get("speedup_ci95")
    text = fmt(row.get("speedup"))
    return f"{text} [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else text


def machine(m: dict | str) -> str:
    """Older reports hold a string; newer ones the CPU's model, cores and flags."""
    if isinstance(m, str):
        return m
    vector = [
        f for f in ("avx2", "fma", "avx512f", "avx512_vnni", "amx_tile", "neon") if f in m["flags"]
    ]
    return f"{m['cpu']}, {m['cores']} cores ({' '.join(vector) or 'no AVX2'})"


def suite_table(name: str, report: dict) -> str:
    lines = [
        f"### {name}: {len(report['prompts'])} prompts, max {report['max_tokens']} tokens",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    for r in report["rows"]:
        deps = ", ".join(f"{d['index']}: {fmt(d['top2_gap'])}" for d in r["departures"]) or "-"
        cells = (
            r["method"],
            r["k"],
            fmt(r["tokens_per_second"], 1),
            speedup(r),
            r.get("baseline") or "-",
            fmt(r["acceptance_rate"]),
            fmt(r["mean_acceptance_length"]),
            r["plain_steps"],
            f"{r['identical']}/{r['prompts']}",
            deps,
        )
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def main(folder: Path) -> None:
    for path in sorted(folder.glob("*.json")):
        doc = json.loads(path.read_text())
        if "suites" in doc:
            for name, report in doc["suites"].items():
                print(f"<!-- {path.name} -->\n{suite_table(name, report)}\n")
                print(f"Machine: {machine(report['machine'])}. Command: `{report['command']}`\n")
        elif "rows" in doc:
            keys = list(doc["rows"][0])
            print(f"<!-- {path.name} -->")
            print("| " + " | ".join(keys) + " |\n|" + "---|" * len(keys))
            for row in doc["rows"]:
                print("| " + " | ".join(fmt(row[k]) for k in keys) + " |")
            print()


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/results"))
