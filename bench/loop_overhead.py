"""The loop's own cost per verify step, with a runtime that costs nothing.

A zero-cost runtime hands back preallocated [k+1, V] logits, so what is timed is everything
edgespec does around the model: drafting bookkeeping, verification, rollback, detokenizing,
stop checks, stats. Greedy, temperature 0.8 alone, with top-k 40 + top-p 0.9, with top-p 0.9
and with min-p 0.05, and each sampled mode with each row's largest logits handed over by the
device ("dev": llama.cpp's backend sampler, --backend-sampling; with the share of steps a
row of which they cannot decide, where llama.cpp re-runs the pass), at k = 1, 4, 8, V =
151,936; every draft is accepted, so each step reaches all k+1 rows. Each figure is the
median of several runs (the machine's load average is printed with them). With --target, the
same k+1-token verify pass is timed on the real model for the share; with --verify-ms, a
given one (3.5: the H100's k = 4 pass on llama.cpp); the share is the loop's time over the
verify pass's, as the GPU kit reports it.

The rows: with --logits, a real model's (bench/record_logits.py records them: float16 rows
of decode steps on suite prompts), replayed by position; with --rows random, rows of
standard normal logits (what a random-weight model gives: flat, the GPU kit's case); by
default the spiked rows of FreeRuntime (one token at logit 30: a point mass). With replayed
rows the drafter is an oracle (plain decoding's own tokens, found first with the same seed),
so every Gumbel draft is accepted and each step reaches its k+1 rows.
Last, the adaptive controller's own cost per step where it plans plain steps (random text,
the H200's INT4 ONNX curve), against plain decoding: on that GPU it cost 2-3% of a 1.95 ms
step (measure.py's loop, docs/benchmarks.md).

    python bench/loop_overhead.py [--target model.gguf | --verify-ms 3.5] [--json out.json]
        [--logits /tmp/edgespec-logits [--cold] | --rows random] [--k 4] [--modes T0.8,...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np

from edgespec.controller import FixedPolicy
from edgespec.drafters import Draft
from edgespec.engine import SpeculativeDecoder
from edgespec.plumbing.hugepages import reexec_with_tunable
from edgespec.runtime import Runtime, VocabInfo
from edgespec.runtimes.sampling_head import Columns, spare_columns, spare_rows
from edgespec.sampling import SamplingParams, row_dists

V = 151_936
MODES = {
    "greedy": SamplingParams(),
    "T0.8": SamplingParams(0.8, seed=0),
    "T0.8 top-k40 top-p0.9": SamplingParams(0.8, top_k=40, top_p=0.9, seed=0),
    "T0.8 top-p0.9": SamplingParams(0.8, top_p=0.9, seed=0),
    "T0.8 min-p0.05": SamplingParams(0.8, min_p=0.05, seed=0),
}
# each sampled mode again with its rows' largest logits handed over, as llama.cpp's backend
# sampler gives them (LlamaOptions.backend_sampling): the reduction is the device's
ON_DEVICE = {f"{mode} dev" for mode, sp in MODES.items() if spare_columns(sp, V)}
MODES |= {f"{mode} dev": MODES[mode] for mode in sorted(m[:-4] for m in ON_DEVICE)}


class FreeRuntime(Runtime):
    """Logits whose argmax is always token 7, so every draft of 7s is accepted."""

    def __init__(self, n_vocab: int = V, n_ctx: int = 1 << 20) -> None:
        self.n_vocab, self.n_ctx, self.n_past = n_vocab, n_ctx, 0
        rng = np.random.default_rng(0)
        self.logits = rng.standard_normal((16, n_vocab)).astype(np.float32)
        self.logits[:, 7] = 30.0

    def forward(self, tokens, *, last_only=False):
        self.n_past += len(tokens)
        return self.logits[: 1 if last_only else len(tokens)].copy()  # a back-end copies too

    def rollback(self, n_past):
        self.n_past = n_past

    def reset(self):
        self.n_past = 0

    def tokenize(self, text, *, special):
        return [1, 2, 3]

    def detokenize(self, tokens):
        return b"ab" * len(tokens)

    def vocab_info(self):
        return VocabInfo(self.n_vocab, "bpe", None, 0, frozenset({0}), "-")


class ConstantDrafter:
    name = "const"

    def propose(self, context, k, sp):
        return Draft(np.full(k, 7, dtype=np.int32), None)

    def sync(self, context):
        pass

    def reset(self, rng):
        pass


class ReplayRuntime(FreeRuntime):
    """Rows replayed by position: the token forwarded at cache position c gets rows[c % n]
    (a real model's recorded rows, or random ones), whatever the token is. cold: a pass's
    rows are handed over where they lie (float32 rows, read-only), not copied: the loop's
    first read of them comes from memory, as a GPU's logits copied to the host do (the
    recordings, 233 MB, outgrow the caches); else copied, as a CPU back-end's are, which
    leaves them in cache."""

    def __init__(self, rows: np.ndarray, n_ctx: int = 1 << 20, cold: bool = False) -> None:
        self.rows = rows  # [n, V] float16 or float32
        self.n_vocab, self.n_ctx, self.n_past = rows.shape[1], n_ctx, 0
        self.cold = cold and rows.dtype == np.float32

    def forward(self, tokens, *, last_only=False):
        at = np.arange(self.n_past, self.n_past + len(tokens)) % len(self.rows)
        self.n_past += len(tokens)
        at = at[-1:] if last_only else at
        if self.cold and at[-1] - at[0] == len(at) - 1:  # in a row: where they lie
            rows = self.rows[at[0] : at[-1] + 1]
            rows.flags.writeable = False
            return rows
        return self.rows[at].astype(np.float32)  # a back-end copies

    def vocab_info(self):  # no stop token the rows can draw
        return VocabInfo(self.n_vocab, "bpe", None, 0, frozenset({self.n_vocab - 1}), "-")


class OracleDrafter:
    """Proposes the tokens plain decoding emits (a Gumbel draft: accepted while equal)."""

    name = "oracle"

    def __init__(self, text: list[int]) -> None:
        self.text = text

    def propose(self, context, k, sp):
        ahead = self.text[len(context) : len(context) + k]
        return Draft(np.array(ahead, dtype=np.int32), None, gumbel=True)

    def sync(self, context):
        pass

    def reset(self, rng):
        pass


PROMPT = [1, 2, 3]


def decoder_for(
    rows: np.ndarray | None,
    k: int,
    sp: SamplingParams,
    n: int,
    on_device: bool = False,
    cold: bool = False,
) -> SpeculativeDecoder:
    """A k-token speculative decoder whose drafts are all accepted: constant 7s on the spiked
    rows (greedy, or rows with replayed ones), else the oracle over plain decoding's n tokens
    (on_device: their largest columns handed over, DeviceRowsRuntime; cold: the replayed
    rows handed over uncopied, ReplayRuntime)."""
    if rows is None or sp.greedy:
        rt = FreeRuntime() if rows is None else ConstantArgmaxRuntime(rows, cold)
        return SpeculativeDecoder(rt, [ConstantDrafter()], FixedPolicy("const", k))
    runtime = DeviceRowsRuntime if on_device else ReplayRuntime
    plain = SpeculativeDecoder(runtime(rows), [], FixedPolicy(None, 0))
    text = PROMPT + plain.generate(PROMPT, max_tokens=n, sp=sp).tokens
    target = DeviceRowsRuntime(rows) if on_device else ReplayRuntime(rows, cold=cold)
    return SpeculativeDecoder(target, [OracleDrafter(text)], FixedPolicy("oracle", k))


class DeviceRowsRuntime(ReplayRuntime):
    """Replayed rows whose sampled steps hand over each row's largest logits, as
    LlamaCppRuntime.forward_dists does with backend_sampling (sampling_head.spare_columns:
    top_k + 1, or 4,097). They are found for every row up front, as the device finds them
    beside the pass: a top-k over the whole row in forward_dists took it out of the loop's
    time but left the host's caches cold for the loop (+100 us a step), which a GPU's
    reduction does not. They come in no order, as llama.cpp's top-k sampler gives them (on
    the CPU; CUDA's order unmeasured), and are read so (LlamaCppRuntime.read_columns): the
    spare rules order only what they need. A row they cannot decide reads its logits here
    for free, where llama.cpp re-runs the pass: steps_reread counts the steps that would."""

    def __init__(self, rows: np.ndarray, n_ctx: int = 1 << 20) -> None:
        super().__init__(rows, n_ctx)
        self.found: dict[int, Columns] = {}  # columns -> every row's
        self.steps = self.steps_reread = 0
        # seconds of edgespec's own work inside forward_dists (the spare rules' setup): host
        # work the loop's time counts, though the step times it as its verify pass's (the
        # device's reduction, here free, is not counted)
        self.host_s = 0.0

    @property
    def dists_on_device(self) -> bool:
        return True

    def candidates(self, columns: int) -> Columns:
        """Every row's `columns` largest logits and their ids, in no order (argpartition's)."""
        if columns not in self.found:
            rows = self.rows.astype(np.float32)
            top = np.argpartition(-rows, columns - 1, axis=1)[:, :columns]
            values = np.take_along_axis(rows, top, 1)
            self.found[columns] = Columns(values, top)
        return self.found[columns]

    def forward_dists(self, tokens, sp, *, last_only=False):
        columns = spare_columns(sp, self.rows.shape[1])
        if not columns:  # as llama.cpp's runtime: the logits
            return row_dists(self.forward(tokens, last_only=last_only), sp)
        at = np.arange(self.n_past, self.n_past + len(tokens)) % len(self.rows)
        at = at[-1:] if last_only else at
        self.n_past += len(tokens)
        every = self.candidates(columns)
        found = Columns(every.values[at], every.ids[at])  # what llama.cpp hands over
        t0 = time.perf_counter()
        self.steps += 1
        reread = [False]

        def read_row(i: int) -> np.ndarray:
            self.steps_reread += not reread[0]
            reread[0] = True
            return self.rows[at[i]].astype(np.float32)

        rows = spare_rows(found, read_row, self.rows.shape[1], sp)
        self.host_s += time.perf_counter() - t0
        return rows


class ConstantArgmaxRuntime(ReplayRuntime):
    """Replayed rows with token 7 lifted above each row's maximum: greedy accepts every 7."""

    def __init__(self, rows: np.ndarray, cold: bool = False) -> None:
        rows = rows.astype(np.float32)
        rows[:, 7] = rows.max(axis=1) + 1.0
        super().__init__(rows, cold=cold)


def loop_cost_us(
    k: int,
    sp: SamplingParams,
    steps: int = 60,
    runs: int = 9,
    rows: np.ndarray | None = None,
    on_device: bool = False,
    cold: bool = False,
) -> tuple[float, float | None]:
    """Median over runs of the mean cost per step of a run, and (on_device: decoder_for's)
    the share of steps whose rows were not all decided by their columns (None: off device)."""
    dec = decoder_for(rows, k, sp, steps * (k + 1), on_device, cold)
    dec.generate(PROMPT, max_tokens=5 * (k + 1), sp=sp)  # warm-up
    costs = []
    target = dec.target
    device = target if isinstance(target, DeviceRowsRuntime) else None
    for _ in range(runs):
        host_before = device.host_s if device else 0.0
        s = dec.generate(PROMPT, max_tokens=steps * (k + 1), sp=sp).stats
        assert s.n_steps == steps, f"drafts were rejected: {s.n_steps} steps, not {steps}"
        host_s = device.host_s - host_before if device else 0.0
        # all but the model's pass, and edgespec's work inside it
        costs.append((s.t_decode - s.t_verify + host_s) / s.n_steps * 1e6)
    reread = device.steps_reread / device.steps if device else None
    return statistics.median(costs), reread


class RandomTextRuntime(FreeRuntime):
    """Each row's argmax drawn from 64 tokens by a seeded generator: text no drafter
    predicts, so the adaptive controller plans plain steps (and prompt lookup's matches are
    judged wrong in shadow)."""

    def __init__(self, n_vocab: int = V, n_ctx: int = 1 << 20) -> None:
        super().__init__(n_vocab, n_ctx)
        self.pool = np.random.default_rng(1).standard_normal((64, n_vocab)).astype(np.float32)
        self.pool[np.arange(64), np.arange(64) + 10] = 30.0
        self.rng = np.random.default_rng(2)

    def forward(self, tokens, *, last_only=False):
        self.n_past += len(tokens)
        return self.pool[self.rng.integers(0, 64, size=1 if last_only else len(tokens))]


# the H200's ONNX Runtime INT4 curve (replay_curves.json, where measured curves are kept), on
# which the controller keeps to plain steps: what it costs a step there is its own overhead
H200_ONNX_INT4 = json.loads(Path(__file__).with_name("replay_curves.json").read_text())[
    "h200-onnx-int4"
]["ratios"][:9]


def controller_cost_us(steps: int = 200, runs: int = 9) -> tuple[float, float]:
    """Median loop cost per step (us) of plain decoding and of the adaptive controller with
    prompt lookup and a (free) draft model, on random text: the controller's own share."""
    from edgespec.controller import AdaptivePolicy, CostCurve
    from edgespec.drafters import ModelDrafter, NgramDrafter

    def decoder(adaptive: bool) -> SpeculativeDecoder:
        target = RandomTextRuntime()
        if not adaptive:
            return SpeculativeDecoder(target, [], FixedPolicy(None, 0))
        curve = CostCurve([1e-3 * r for r in H200_ONNX_INT4], draft_s=0.74e-3)
        drafters = [NgramDrafter(), ModelDrafter(RandomTextRuntime(), token_s=0.74e-3)]
        return SpeculativeDecoder(target, drafters, AdaptivePolicy(curve, k_max=8))

    prompt = list(range(100, 400))
    medians = []
    for adaptive in (False, True):
        costs = []
        for _ in range(runs):
            s = decoder(adaptive).generate(prompt, max_tokens=steps).stats
            costs.append((s.t_decode - s.t_verify) / s.n_steps * 1e6)
        medians.append(statistics.median(costs))
    return medians[0], medians[1]


def verify_pass_us(target: str, k: int) -> float:
    from edgespec.backends import open_runtime
    from edgespec.controller.calibrate import measure_curve

    return measure_curve(open_runtime(target), n_max=k + 1)[k] * 1e6


def as_float32_rows(recorded: np.ndarray) -> np.ndarray:
    """Recorded float16 rows as float32 rows they could have come from: each logit spread
    uniformly (seeded) over the values that round to it (half the gap to each neighbour,
    a little less, as a tie rounds to even). float16 ties where the model's float32 logits
    do not (26 of the demo target's 384 rows tie at their 40th and 41st largest logits,
    which made a quarter of top-k 40's steps re-run their pass); float32 rows pass as they
    are."""
    if recorded.dtype != np.float16:
        return recorded
    size = np.abs(recorded)
    with np.errstate(over="ignore"):  # the largest float16's next is inf
        above = (np.nextafter(size, np.float16(np.inf)) - size).astype(np.float32)
    below = (size - np.nextafter(size, np.float16(0))).astype(np.float32)
    below[size == 0] = above[size == 0]  # zero's neighbours lie either side
    top = np.isinf(above)  # the largest float16: its upper half-gap is as wide as its lower
    above[top] = below[top]
    u = np.random.default_rng(5).random(recorded.shape, dtype=np.float32) - np.float32(0.5)
    spread = np.where(u < 0, below, above) * (u * np.float32(0.998))
    return np.copysign(size.astype(np.float32) + spread, recorded.astype(np.float32))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", help="a .gguf target to time the real verify pass")
    ap.add_argument("--verify-ms", type=float, help="a verify pass's time, for the share")
    ap.add_argument("--logits", help="a folder of recorded rows (bench/record_logits.py)")
    ap.add_argument("--rows", choices=("spiked", "random"), default="spiked")
    ap.add_argument("--k", default="1,4,8", help="draft lengths, comma-separated")
    ap.add_argument("--modes", help=f"comma-separated, of {', '.join(MODES)} (default all)")
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument(
        "--cold", action="store_true",
        help="hand the replayed rows over uncopied, unread by the host (a GPU's logits)",
    )  # fmt: skip
    ap.add_argument("--no-controller", action="store_true", help="skip the controller's cost")
    ap.add_argument("--json", help="write the table here")
    args = ap.parse_args()
    modes = {m: MODES[m] for m in args.modes.split(",")} if args.modes else MODES
    replayed = None
    if args.logits:
        replayed = as_float32_rows(np.load(Path(args.logits) / "logits.npy"))
    elif args.rows == "random":
        replayed = np.random.default_rng(3).standard_normal((256, V)).astype(np.float32)
    source = args.logits or args.rows
    rows = []
    load = os.getloadavg()
    print(f"{os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"rows: {source}")
    print(f"{'k':>3} {'mode':>26} {'loop us/step':>13} {'verify us':>10} {'share':>7} re-read")
    for k in map(int, args.k.split(",")):
        verify = verify_pass_us(args.target, k) if args.target else None
        if args.verify_ms:
            verify = args.verify_ms * 1e3
        for mode, sp in modes.items():
            on_device = mode in ON_DEVICE and replayed is not None
            loop, reread = loop_cost_us(
                k, sp, runs=args.runs, rows=replayed, on_device=on_device, cold=args.cold
            )
            share = loop / verify if verify else None
            rows.append(
                {"k": k, "mode": mode, "rows": source, "cold": args.cold, "loop_us": loop,
                 "verify_us": verify, "share": share, "steps_reread": reread}
            )  # fmt: skip
            shown = f"{verify:>10.0f} {share:>7.2%}" if verify else f"{'-':>10} {'-':>7}"
            reread_shown = "" if reread is None else f" {reread:.1%}"
            print(f"{k:>3} {mode:>26} {loop:>13.0f} {shown}{reread_shown}")
    controller = None
    if not args.no_controller:
        plain_us, adaptive_us = controller_cost_us()
        extra = adaptive_us - plain_us
        print(f"random text, plain steps: {plain_us:.0f} us/step plain decoding, "
              f"{adaptive_us:.0f} with the adaptive controller (+{extra:.0f})")  # fmt: skip
        controller = {"plain_us": plain_us, "adaptive_us": adaptive_us}
    if args.json:
        with open(args.json, "w") as f:
            record = {"vocab": V, "time": time.time(), "loadavg": load, "rows": rows,
                      "controller": controller}  # fmt: skip
            json.dump(record, f, indent=1)


if __name__ == "__main__":
    reexec_with_tunable()  # time passes in the memory the edgespec command gives them
    main()
