"""The one owner of cost curves: what a target pass over n tokens costs, and a draft token.

cost_curve(pair) returns the curve for (models, runtime, device): from the tune store
($EDGESPEC_HOME/tune.json), else from the bundle when the bundle's curve was measured on
the same device and runtime, else measured now and stored. `edgespec run`, `edgespec tune`
and `edgespec export --tune` all go through it.

The controller needs the verify cost curve with logits for every row, as the verify step
asks for them; a last-token-only benchmark understates it.
"""

from __future__ import annotations

import hashlib
import logging
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from edgespec.backends import RuntimeOptions
from edgespec.bundle import Bundle, folder_files
from edgespec.controller.pricing import CostCurve
from edgespec.errors import BundleError, EdgespecError
from edgespec.pair import ModelPair, open_pair
from edgespec.plumbing.machine import device_description
from edgespec.plumbing.paths import edgespec_home, read_store, write_store
from edgespec.plumbing.progress import announce, progress
from edgespec.runtime import MAX_VERIFY_WIDTH, Runtime

log = logging.getLogger(__name__)


# What a stored or bundled curve was measured by; curves of another version are measured again
# (2: wide passes paired with one-token passes; 1, unmarked: each width's passes in a row).
CALIBRATION_VERSION = 2

# Samples of each width's ratio to a one-token pass: about SHORT_PASS_SAMPLES / n for width n
# (at least `reps`), so on a CPU, where a pass costs about its width, each width gets about the
# same time and the short passes that drafts use most are measured best.
SHORT_PASS_SAMPLES = 24


def time_pass(runtime: Runtime, n: int, rng: np.random.Generator, last_only: bool = False) -> float:
    """Seconds of one forward over n random tokens at the current position (then rolled back),
    returning every row (a verify pass) or the last (last_only: a draft's proposal)."""
    n0 = runtime.n_past
    tokens = rng.integers(0, runtime.n_vocab, size=n).tolist()
    t0 = time.perf_counter()
    runtime.forward(tokens, last_only=last_only)
    seconds = time.perf_counter() - t0
    runtime.rollback(n0)
    return seconds


def warm_at_prefix(runtime: Runtime, prefix: int, rng: np.random.Generator) -> None:
    """Reset, cache `prefix` random tokens and make two untimed one-token passes: the first
    passes allocate buffers."""
    runtime.reset()
    runtime.forward(rng.integers(0, runtime.n_vocab, size=prefix).tolist(), last_only=True)
    for _ in range(2):
        time_pass(runtime, 1, rng)


def samples_per_width(n_max: int, reps: int) -> dict[int, int]:
    return {n: max(reps, -(-SHORT_PASS_SAMPLES // n)) for n in range(2, n_max + 1)}


def measure_curve(
    runtime: Runtime, n_max: int = 9, prefix: int = 128, reps: int = 3, name: str = "target"
) -> list[float]:
    """Seconds for n = 1..n_max tokens after a prefix of `prefix` tokens (random ids), the
    prefix shortened so that the widest pass fits in the runtime's context.

    Each pass of n > 1 tokens is timed right after a one-token pass, and t(n) is t(1) times
    the median of those ratios, in rounds of the widths in shuffled order: the host's drift
    between passes cancels, and the controller decides by ratios (docs/decisions.md)."""
    if n_max > runtime.n_ctx:
        raise EdgespecError(
            f"a {runtime.n_ctx}-token context is too small to measure passes of {n_max} tokens; "
            f"use a larger --n-ctx or a smaller --k-max"
        )
    prefix = min(prefix, runtime.n_ctx - n_max)
    rng = np.random.default_rng(0)
    warm_at_prefix(runtime, prefix, rng)
    samples = samples_per_width(n_max, reps)
    one_token: list[float] = []
    ratios: dict[int, list[float]] = {n: [] for n in samples}
    rounds = max(samples.values(), default=reps)
    for r in progress(range(rounds), f"timing the {name}", unit="round", total=rounds):
        due = [n for n in samples if samples[n] > r]
        rng.shuffle(due)
        for n in due or [1]:  # n_max = 1: one-token passes alone
            one_token.append(time_pass(runtime, 1, rng))
            if n > 1:
                ratios[n].append(time_pass(runtime, n, rng) / one_token[-1])
    runtime.reset()
    t1 = statistics.median(one_token)
    return [t1] + [t1 * statistics.median(ratios[n]) for n in samples]


def cost_curve(
    pair: ModelPair, *, n_max: int = 9, remeasure: bool = False, key: str | None = None
) -> CostCurve:
    """The curve for n = 1..n_max (at least) for this pair on this runtime and device: stored,
    else the bundle's where it holds here, else measured now and stored (always if remeasure).
    key: the pair's tune_key where the caller has it (it reads the model files' ends and may
    ask nvidia-smi for the GPU's name)."""
    if n_max < 1:
        raise EdgespecError(f"--n-max must be >= 1 (the widest pass to time), got {n_max}")
    key = key or tune_key(pair)
    if not remeasure:
        stored = load_tuned(key, with_draft=pair.draft is not None)
        for source, curve in (("tune store", stored), ("bundle", bundle_curve(pair))):
            if curve is not None and len(curve.target_s) >= n_max:
                log.info("cost curve from the %s: %s", source, describe(curve))
                return curve
        announce(
            f"calibrating: timing passes of 1..{n_max} tokens through these models on this "
            f"device, which the controller prices drafts by; once, then kept in "
            f"{tune_store_path()}"
        )
    curve = calibrate(pair.target, pair.draft, n_max)
    store_tuned(key, curve)
    return curve


def bundle_curve(pair: ModelPair) -> CostCurve | None:
    """The bundle's curve, only where it was measured on this device and runtime: a curve
    from a CPU would keep the draft model off for good on a GPU (and the other way round)."""
    tune = pair.bundle_tune
    if not tune:
        return None
    if tune.get("calibration") != CALIBRATION_VERSION:
        log.info("the bundle's cost curve was measured by an older calibration; measuring here")
        return None
    here = {
        "device": device_description(pair.options.device),
        "runtime": pair.runtime_description(),
    }
    if tune.get("device") != here["device"] or tune.get("runtime") != here["runtime"]:
        log.info(
            "the bundle's cost curve is for %s, %s; measuring here",
            tune.get("device"),
            tune.get("runtime"),
        )
        return None
    problem = curve_problem(tune, with_draft=pair.draft is not None)
    if problem is not None:
        log.warning("ignoring the bundle's cost curve (%s); measuring here", problem)
        return None
    return valid_curve(tune)


def tune_bundle(bundle: Bundle, n_max: int = MAX_VERIFY_WIDTH) -> dict[str, object]:
    """What `export --tune` stores in bundle.json: the curve, and the device and runtime it
    holds for (loading elsewhere measures its own)."""
    target = bundle.path("target")
    if target is None:
        raise BundleError(f"{bundle.folder}: a bundle to tune needs a target model")
    pair = open_pair(target, bundle.path("draft"), RuntimeOptions(n_ctx=1024))
    curve = cost_curve(pair, n_max=n_max)
    return {
        **curve_entry(curve),
        "device": device_description(pair.options.device),
        "runtime": pair.runtime_description(),
    }


def calibrate(target: Runtime, draft: Runtime | None, n_max: int = 9) -> CostCurve:
    t0 = time.perf_counter()
    target_s, switch_s = replayed(target, measure_curve(target, n_max))
    # a pass over more tokens costs at least a one-token pass: a median ratio under 1 is the
    # host's noise (a tiny model's passes take microseconds), and stored under half of one
    # (curve_problem), it was refused and measured again at every later load
    target_s = [target_s[0]] + [max(t, target_s[0]) for t in target_s[1:]]
    draft_s = 0.0
    if draft is not None:  # one token a pass where it keeps one graph (ModelDrafter)
        draft_s = (
            steady_one_token(draft)
            if draft.keeps_one_graph
            else measure_curve(draft, 2, name="draft")[0]
        )
    curve = CostCurve(target_s, draft_s, switch_s=switch_s)
    log.info("calibrated in %.1fs: %s", time.perf_counter() - t0, describe(curve))
    return curve


def replayed(runtime: Runtime, target_s: list[float]) -> tuple[list[float], float]:
    """measure_curve's seconds as replayed passes, and the switch apart (CostCurve.switch_s),
    where the runtime keeps one CUDA graph: each pass measure_curve times follows one of
    another width, so all ran uncaptured; one-token passes in a row replay. Elsewhere as
    they are, and no switch."""
    if not runtime.keeps_one_graph:
        return target_s, 0.0
    switch_s = max(0.0, target_s[0] - steady_one_token(runtime))
    return [t - switch_s for t in target_s], switch_s


def steady_one_token(runtime: Runtime, reps: int = SHORT_PASS_SAMPLES, prefix: int = 128) -> float:
    """Seconds of a one-token pass among one-token passes (the median of reps after two
    untimed ones): on a runtime that keeps one CUDA graph, a replayed pass, where
    measure_curve's, each right after a wider one, run uncaptured (about half the time)."""
    rng = np.random.default_rng(1)
    warm_at_prefix(runtime, min(prefix, runtime.n_ctx - 1), rng)
    seconds = statistics.median(time_pass(runtime, 1, rng) for _ in range(reps))
    runtime.reset()
    return seconds


def describe(curve: CostCurve) -> str:
    target_s, draft_s = curve.target_s, curve.draft_s
    ratios = " ".join(f"{t / target_s[0]:.2f}" for t in target_s)
    switch = f"; a change of width {curve.switch_s * 1e3:.2f} ms" if curve.switch_s else ""
    return (
        f"target 1 token {target_s[0] * 1e3:.1f} ms, n=1..{len(target_s)} ratios {ratios}; "
        f"draft token {draft_s * 1e3:.1f} ms ({draft_s / target_s[0]:.2f}x){switch}"
    )


# --- stored tune data ------------------------------------------------------------------------


def file_fingerprint(path: Path) -> str:
    """sha256 of size + first and last MiB: cheap at load, and changes when the file does.
    A model folder (ONNX) is fingerprinted over its files."""
    if path.is_dir():
        parts = "".join(f.name + file_fingerprint(f) for f in folder_files(path))
        return hashlib.sha256(parts.encode()).hexdigest()[:32]
    size = path.stat().st_size
    digest = hashlib.sha256(str(size).encode())
    with path.open("rb") as f:
        digest.update(f.read(1 << 20))
        f.seek(max(0, size - (1 << 20)))
        digest.update(f.read(1 << 20))
    return digest.hexdigest()[:32]


def tune_key(pair: ModelPair) -> str:
    """Models (by content), runtime settings and device: a stored curve holds for these."""
    draft = file_fingerprint(pair.draft_path) if pair.draft_path else "-"
    parts = [file_fingerprint(pair.target_path), draft, pair.runtime_description()]
    return "|".join([*parts, device_description(pair.options.device)])


def tune_store_path() -> Path:
    return edgespec_home() / "tune.json"


def load_tuned(key: str, *, with_draft: bool = False) -> CostCurve | None:
    """The stored curve for key; one that is no curve (wrong shape, impossible costs: all
    zero once raised ZeroDivisionError) is ignored with a warning and measured again.
    with_draft: the curve prices a draft model (its draft token must cost something)."""
    entry = read_tune_store().get(key)
    if entry is None:
        return None
    if isinstance(entry, dict) and entry.get("calibration") != CALIBRATION_VERSION:
        log.info("the stored cost curve was measured by an older calibration; measuring again")
        return None
    problem = curve_problem(entry, with_draft)
    if problem is not None:
        log.warning(
            "ignoring the cost curve stored in %s for these models (%s); it will be measured again",
            tune_store_path(),
            problem,
        )
        return None
    return valid_curve(entry)


def curve_entry(curve: CostCurve) -> dict[str, object]:
    """A curve as the tune store and bundle.json keep it (valid_curve reads it back)."""
    return {
        "target_s": curve.target_s,
        "draft_s": curve.draft_s,
        "switch_s": curve.switch_s,
        "calibration": CALIBRATION_VERSION,
    }


def valid_curve(entry: object) -> CostCurve | None:
    """A stored entry as a curve, or None where curve_problem finds one (switch_s: 0 where
    absent, as stored before one-graph runtimes were priced: their key differs)."""
    if curve_problem(entry) is not None:
        return None
    assert isinstance(entry, dict)
    seconds = [*entry["target_s"], entry["draft_s"], entry.get("switch_s", 0.0)]
    *target, draft, switch = (float(t) for t in seconds)
    return CostCurve(target, draft, switch_s=switch)


def curve_problem(entry: object, with_draft: bool = False) -> str | None:
    """Why a stored entry cannot be a measured curve, or None: its seconds must be numbers
    from 0 to 1e6 (NaN and inf fail), a target pass must cost something, a pass over n
    tokens at least half a one-token pass (a calibration's noise moves a ratio by a few
    percent, not by half), and a draft model's token (with_draft) more than nothing."""
    if not isinstance(entry, dict):
        return "an entry that is not an object"
    target_s, draft_s = entry.get("target_s"), entry.get("draft_s")
    if not isinstance(target_s, list) or not target_s:
        return "target_s is not a list of seconds"
    seconds: list[Any] = [*target_s, draft_s, entry.get("switch_s", 0.0)]
    if not all(isinstance(t, (int, float)) and not isinstance(t, bool) for t in seconds):
        return "a cost that is not a number"
    if not all(0 <= t < 1e6 for t in seconds):  # NaN and inf fail too
        return "a cost that is negative, not finite or over 1e6 s"
    if target_s[0] <= 0:
        return "a target pass that costs nothing"
    if any(t < target_s[0] / 2 for t in target_s):
        return "a wider target pass that costs less than half a one-token pass"
    if with_draft and seconds[-2] <= 0:  # draft_s
        return "a draft token that costs nothing"
    return None


TUNE_STORE_MAX_BYTES = 16 << 20  # thousands of curves; a larger file is not ours


def read_tune_store() -> dict:
    """The stored curves by key; a store that is unreadable, corrupt (not JSON, all zeros,
    not an object) or too large is ignored with a warning: curves are measured again."""
    path = tune_store_path()
    try:
        return read_store(path, TUNE_STORE_MAX_BYTES)
    except ValueError as e:
        if path not in _warned_stores:  # once: reading, then rewriting it, says the same
            _warned_stores.add(path)
            log.warning(
                "ignoring the tune store %s: it %s; cost curves will be measured again", path, e
            )
        return {}


_warned_stores: set[Path] = set()


def store_tuned(key: str, curve: CostCurve) -> Path:
    """Add a curve to the store (written whole, atomically). A store that cannot be written
    (read-only, disk full) is reported and skipped: the curve is measured again next time."""
    path = tune_store_path()
    store = read_tune_store()
    store[key] = {**curve_entry(curve), "time": time.time()}
    try:
        write_store(path, store)
    except OSError as e:
        log.warning("cannot store the cost curve in %s (%s); it will be measured again", path, e)
    return path
