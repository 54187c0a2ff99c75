"""`edgespec bench --plot`: speedup against k and acceptance by draft position, per suite."""

from __future__ import annotations

from pathlib import Path

from edgespec.errors import EdgespecError


def plot(reports: dict, out: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise EdgespecError("--plot needs matplotlib: pip install 'edgespec[plot]'") from None
    fig, axes = plt.subplots(len(reports), 2, figsize=(11, 4 * len(reports)), squeeze=False)
    for (suite, report), (ax_k, ax_pos) in zip(reports.items(), axes):
        for method in {r["method"] for r in report["rows"]}:
            rows = [
                r for r in report["rows"] if r["method"] == method and r["k"] not in ("auto", "-")
            ]
            if rows:
                ax_k.plot([r["k"] for r in rows], [r["speedup"] for r in rows], "o-", label=method)
            for r in report["rows"]:
                if r["method"] == method and r["acceptance_by_pos"]:
                    label = f"{method} k={r['k']}"
                    ax_pos.plot(
                        range(1, len(r["acceptance_by_pos"]) + 1),
                        r["acceptance_by_pos"],
                        ".-",
                        label=label,
                    )
        ax_k.axhline(1.0, color="grey", lw=0.8)
        ax_k.set(title=f"{suite}: speedup vs k", xlabel="k", ylabel="speedup over its baseline")
        ax_pos.set(
            title=f"{suite}: acceptance by draft position",
            xlabel="position",
            ylabel="acceptance rate",
        )
        ax_k.legend(fontsize=7)
        ax_pos.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
