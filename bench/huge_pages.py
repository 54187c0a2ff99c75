"""What transparent huge pages for the weights' memory buy a CPU pass.

A one-token pass streams every weight once, and with 4 KiB pages that is a TLB miss per 4 KiB
of the ~1 GB the demo pair holds in anonymous memory (ONNX Runtime's prepacked MatMulNBits
weights; llama.cpp's repacked ones). glibc 2.35+ asks the kernel for 2 MiB pages for its
allocations under GLIBC_TUNABLES=glibc.malloc.hugetlb=1, which `edgespec` sets for its
model-loading commands (edgespec/hugepages.py). This times the demo pair's one-token passes in
child processes with the setting off and on, alternately, per back-end: the target and draft
each prefilled with 400 tokens, then rounds of one-token passes across the two, rolled back
after each round (bench/draft_vocab.timed_rounds). It prints the medians, their ratio and
each child's resident and huge-page memory.

    python bench/huge_pages.py [--backends onnx,llama] [--rounds 4] [--threads 2] [--json F]

The ONNX Runtime pair is the demo's export ($EDGESPEC_HOME/demo-onnx, `edgespec demo --backend
onnx` makes it); the llama.cpp pair is the demo GGUFs. Run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from draft_vocab import timed_rounds  # noqa: E402

from edgespec.app.bench import machine_info, machine_line  # noqa: E402
from edgespec.hugepages import TUNABLE, with_tunable  # noqa: E402
from edgespec.paths import edgespec_home  # noqa: E402

PASSES = 6  # one-token passes per model per round
ROUNDS = 12  # rounds per child; the first warms


def pair_paths(backend: str) -> dict[str, str]:
    home = edgespec_home()
    if backend == "onnx":
        return {role: str(home / "demo-onnx" / f"{role}.int4") for role in ("target", "draft")}
    return {role: str(home / "models" / f"demo-{role}.gguf") for role in ("target", "draft")}


def child(backend: str, threads: int | None) -> dict:
    """In this process: median one-token pass (ms) of each model, and memory."""
    from edgespec.backends import RuntimeOptions, open_runtime

    runtimes = {
        role: open_runtime(path, RuntimeOptions(n_ctx=4096, n_threads=threads))
        for role, path in pair_paths(backend).items()
    }
    timing = timed_rounds(runtimes, ROUNDS, PASSES)
    return {role: timing[role]["ms"] for role in runtimes} | memory_kib()


def memory_kib() -> dict[str, int]:
    wanted = {"Rss:": "rss_kib", "AnonHugePages:": "anon_huge_kib"}
    with open("/proc/self/smaps_rollup") as f:
        return {wanted[p[0]]: int(p[1]) for p in (line.split() for line in f) if p[0] in wanted}


def run_child(backend: str, huge: bool, threads: int | None) -> dict:
    bare = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    env = with_tunable(os.environ) if huge else bare
    cmd = [sys.executable, __file__, "--child", backend]
    if threads:
        cmd += ["--threads", str(threads)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--backends", default="onnx,llama")
    ap.add_argument("--rounds", type=int, default=4, help="child processes per setting")
    ap.add_argument("--threads", type=int)
    ap.add_argument("--json")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.threads)))
        return
    runs: dict[str, dict[str, list[dict]]] = {}
    for backend in args.backends.split(","):
        runs[backend] = {"off": [], "on": []}
        for r in range(args.rounds):
            for setting in ("off", "on") if r % 2 == 0 else ("on", "off"):
                runs[backend][setting].append(run_child(backend, setting == "on", args.threads))
    print(machine_line(machine_info()))
    print(f"huge pages: {TUNABLE}; medians of {args.rounds} children per setting")
    print("| back-end | model | off (ms) | on (ms) | on / off | RSS off, on (MiB) | huge (MiB) |")
    print("|---|---|---|---|---|---|---|")
    summary = {}
    for backend, by in runs.items():
        for role in ("target", "draft"):
            off = statistics.median(c[role] for c in by["off"])
            on = statistics.median(c[role] for c in by["on"])
            rss = [statistics.median(c["rss_kib"] for c in by[s]) / 1024 for s in ("off", "on")]
            huge = statistics.median(c["anon_huge_kib"] for c in by["on"]) / 1024
            summary[f"{backend}/{role}"] = {"off_ms": off, "on_ms": on, "ratio": round(on / off, 4)}
            print(f"| {backend} | {role} | {off:.2f} | {on:.2f} | {on / off:.3f} | "
                  f"{rss[0]:.0f}, {rss[1]:.0f} | {huge:.0f} |")  # fmt: skip
    if args.json:
        report = {"machine": machine_info(), "tunable": TUNABLE, "threads": args.threads,
                  "summary": summary, "runs": runs, "command": " ".join(sys.argv)}  # fmt: skip
        Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
