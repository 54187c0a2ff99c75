"""Measure what a target pass over n tokens costs, and a draft token, on this device.

The controller needs the verify cost curve with logits for every row, as the verify step
asks for them; a last-token-only benchmark understates it. `edgespec tune` stores the
result keyed by model file, runtime settings and device, so a later run starts from it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np

from edgespec.controller import CostCurve
from edgespec.paths import edgespec_home
from edgespec.runtimes.base import Runtime

log = logging.getLogger(__name__)


def time_forward(runtime: Runtime, n: int, reps: int, rng: np.random.Generator) -> float:
    """Median seconds of a forward over n tokens at the current position (then rolled back)."""
    n0 = runtime.n_past
    times = []
    for _ in range(reps):
        tokens = rng.integers(0, runtime.n_vocab, size=n).tolist()
        t0 = time.perf_counter()
        runtime.forward(tokens)
        times.append(time.perf_counter() - t0)
        runtime.rollback(n0)
    return statistics.median(times)


def measure_curve(
    runtime: Runtime, n_max: int = 9, prefix: int = 128, reps: int = 3
) -> list[float]:
    """Seconds for n = 1..n_max tokens after a prefix of `prefix` tokens (random ids)."""
    rng = np.random.default_rng(0)
    runtime.reset()
    runtime.forward(rng.integers(0, runtime.n_vocab, size=prefix).tolist(), last_only=True)
    time_forward(runtime, 1, 2, rng)  # warm-up: first passes allocate buffers
    curve = [time_forward(runtime, n, reps, rng) for n in range(1, n_max + 1)]
    runtime.reset()
    return curve


def calibrate(target: Runtime, draft: Runtime | None, n_max: int = 9) -> CostCurve:
    t0 = time.perf_counter()
    target_s = measure_curve(target, n_max)
    draft_s = measure_curve(draft, 2)[0] if draft is not None else 0.0
    log.info("calibrated in %.1fs: %s", time.perf_counter() - t0, describe(target_s, draft_s))
    return CostCurve(target_s, draft_s)


def describe(target_s: list[float], draft_s: float) -> str:
    ratios = " ".join(f"{t / target_s[0]:.2f}" for t in target_s)
    return (
        f"target 1 token {target_s[0] * 1e3:.1f} ms, n=1..{len(target_s)} ratios {ratios}; "
        f"draft token {draft_s * 1e3:.1f} ms ({draft_s / target_s[0]:.2f}x)"
    )


# --- stored tune data ------------------------------------------------------------------------


def file_fingerprint(path: Path) -> str:
    """sha256 of size + first and last MiB: cheap at load, and changes when the file does.
    A model folder (ONNX) is fingerprinted over its files."""
    if path.is_dir():
        from edgespec.bundle import folder_files

        parts = "".join(f.name + file_fingerprint(f) for f in folder_files(path))
        return hashlib.sha256(parts.encode()).hexdigest()[:32]
    size = path.stat().st_size
    digest = hashlib.sha256(str(size).encode())
    with path.open("rb") as f:
        digest.update(f.read(1 << 20))
        f.seek(max(0, size - (1 << 20)))
        digest.update(f.read(1 << 20))
    return digest.hexdigest()[:32]


def device_description() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores"


def backend_names(target: Runtime, draft: Runtime | None) -> str:
    """ "LlamaCppRuntime+OnnxRuntime": the back-ends of a target and its draft."""
    return "+".join(type(rt).__name__ for rt in (target, draft) if rt is not None)


def tune_key(target: Path, draft: Path | None, runtime_desc: str) -> str:
    parts = [file_fingerprint(target), file_fingerprint(draft) if draft else "-", runtime_desc]
    return "|".join([*parts, device_description()])


def tune_store_path() -> Path:
    return edgespec_home() / "tune.json"


def load_tuned(key: str) -> CostCurve | None:
    try:
        entry = json.loads(tune_store_path().read_text())[key]
        return CostCurve(list(entry["target_s"]), float(entry["draft_s"]))
    except (OSError, KeyError, ValueError, TypeError):
        return None


def store_tuned(key: str, curve: CostCurve) -> Path:
    path = tune_store_path()
    try:
        store = json.loads(path.read_text())
    except (OSError, ValueError):
        store = {}
    store[key] = {"target_s": curve.target_s, "draft_s": curve.draft_s, "time": time.time()}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(store, indent=1))
    tmp.replace(path)
    return path
