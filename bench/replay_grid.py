"""The GPU kit's oracle grid (bench/gpu/measure.py) replayed on the CPU, on a virtual clock.

The kit's oracle drafter (its tokens wrong i.i.d. with probability 1 - acceptance, at text
positions fixed per rate) drafts over a target that answers with a fixed continuation; every
pass is charged by a kit run's curve and, where its target keeps one CUDA graph, its width
changes (bench/replay.py's ReplayTarget, Clock and OneGraph). Each run builds a fresh policy
as the kit does: fixed k = 1..8, and `auto` (AdaptivePolicy on the kit's curve and switch,
k_max 8). Zero draft cost is prompt lookup's price; real cost runs the recorded draft price
as a ModelDrafter's passes. Speedups are against plain decoding on the same clock.

    python bench/replay_grid.py --kit docs/results/gpu-h100-2026-11-26/demo-llama-graphs-on.json \
        [--tokens 128,1024] [--json out.json]

--curve replays a stored curve of bench/replay_curves.json instead of a kit run (a CPU's,
with --draft-ratio). --draft-ratio prices the real-cost drafter at that many one-token
target passes a token instead of the kit's draft model (a trained head: head_over_target of
the kit or bench/head_cost.py, issue 46's price goal), and --acceptance replays other rates
than the kit's (0.2, 0.4: a head on text it was not trained for):

    python bench/replay_grid.py --kit docs/results/gpu-h200-2026-11-26/7b-llama-graphs-on.json \
        --draft-ratio 0.1 --acceptance 1.0,0.6,0.4,0.2 --tokens 128,1024

--seeds N averages N realizations of the wrong positions (the first is the kit's): judge a
change to the controller on several, as one realization's first probes move a cell by 10%.
--requests N runs N generations in a row on one policy, as a server (or an app that keeps
its engine) serves them: `auto` starts each from what the ones before taught it, and each
cell adds the mean of the requests after the first ("later").
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE / "gpu")]

import measure  # noqa: E402  (bench/gpu/measure.py: the kit's oracle drafter)
import replay  # noqa: E402  (bench/replay.py: the virtual clock and the replay target)

from edgespec.controller import (  # noqa: E402
    AdaptivePolicy,
    CostCurve,
    FixedPolicy,
    Learned,
    Policy,
    taught,
)
from edgespec.drafters import ModelDrafter  # noqa: E402
from edgespec.engine import SpeculativeDecoder  # noqa: E402
from edgespec.sampling import SamplingParams  # noqa: E402

PROMPT_TOKENS = 200


def run_one(
    kit: replay.KitRun, acceptance: float, n_tokens: int, policy: str, real_cost: bool,
    k_max: int = 8, seed: int = 0, requests: int = 1,
) -> dict:  # fmt: skip
    """One generation of n_tokens under `policy` (auto or a fixed k): its speedup over plain
    decoding on the kit's clock, its steps and drafted tokens. seed: which realization of
    the wrong positions (0: the kit's). requests > 1: as many generations in a row on the one
    policy, each with wrong positions of its own, as a process serves them (what `auto`
    learned carried from one to the next); "later": their mean speedup after the first."""
    chosen: Policy
    if policy == "auto":
        switch_s = kit.one_graph[0] if kit.one_graph else 0.0
        chosen = AdaptivePolicy(CostCurve(list(kit.ratios), switch_s=switch_s), k_max=k_max)
    else:
        chosen = FixedPolicy("model", int(policy))
    learned: dict[str, Learned] = {}
    runs = [one_request(kit, acceptance, n_tokens, chosen, real_cost, request_seed(seed, r),
                        learned) for r in range(requests)]  # fmt: skip
    if requests > 1:
        runs[0]["later"] = round(float(np.mean([r["speedup"] for r in runs[1:]])), 4)
    return runs[0]


def request_seed(seed: int, request: int) -> int:
    """The wrong positions' realization of a later request: none of the first requests'."""
    return seed + LATER_SEEDS * request


LATER_SEEDS = 10_000  # realizations of first requests below this


def one_request(
    kit: replay.KitRun, acceptance: float, n_tokens: int, policy: Policy, real_cost: bool,
    seed: int, learned: dict[str, Learned],
) -> dict:  # fmt: skip
    """run_one's generation under `policy`, what an AdaptivePolicy learned of the drafter
    (by name) taken from and left in `learned`, as bench/replay.py's suites carry it."""
    rng = np.random.default_rng(0)
    prompt = rng.integers(1, 5000, PROMPT_TOKENS).tolist()
    output = rng.integers(1, 5000, n_tokens).tolist()
    target = replay.ReplayTarget(prompt, output, eog=0)
    clock = replay.Clock(kit.ratios, kit.one_graph)
    target.clock, target.keeps_one_graph = clock, kit.one_graph is not None
    model = None
    if real_cost:
        assert kit.draft_ratio is not None
        runtime = replay.ReplayDraft(target, clock, kit.draft_ratio)
        runtime.keeps_one_graph = target.keeps_one_graph
        model = ModelDrafter(runtime, token_s=kit.draft_ratio, clock=clock.perf_counter)
    wrong = measure.wrong_positions(acceptance, n_tokens, seed)
    drafter = measure.OracleDrafter(target.prompt, target.output, wrong, target.n_vocab, model)
    if isinstance(policy, AdaptivePolicy) and drafter.name in learned:
        policy.memory.learned = {id(drafter): learned[drafter.name]}
    timed = replay.Timed(policy, clock, target)
    decoder = SpeculativeDecoder(target, [drafter], timed, clock=clock.perf_counter)  # type: ignore[arg-type]
    result = decoder.generate(target.prompt, max_tokens=n_tokens, sp=SamplingParams())
    if result.tokens != target.output:
        raise AssertionError(f"{policy} at {acceptance}: the replay departed from the reference")
    if isinstance(policy, AdaptivePolicy):
        learned[drafter.name] = taught(policy.estimates)[id(drafter)]
    plain = replay.plain_cost(kit.ratios, n_tokens, kit.one_graph)
    s = result.stats
    return {"speedup": round(plain / clock.now, 4), "steps": s.n_steps,
            "drafted": s.n_draft_tokens, "accepted": s.n_accepted}  # fmt: skip


def run_mean(
    kit: replay.KitRun, acceptance: float, n_tokens: int, policy: str, real_cost: bool,
    seeds: int, requests: int = 1,
) -> dict:  # fmt: skip
    """run_one over realizations 0..seeds-1: the mean of each figure, and the worst speedup
    (one realization is the kit's run; the first probes' luck moves a 128-token cell by
    10%, so a change to the controller is judged on several)."""
    runs = [run_one(kit, acceptance, n_tokens, policy, real_cost, seed=s, requests=requests)
            for s in range(seeds)]  # fmt: skip
    if seeds == 1:
        return runs[0]
    mean = {key: round(float(np.mean([r[key] for r in runs])), 4) for key in runs[0]}
    return {**mean, "worst": min(r["speedup"] for r in runs)}


def grid(
    kit: replay.KitRun,
    n_tokens: int,
    acceptances: Sequence[float] = measure.ACCEPTANCE,
    ks: Sequence[int] = measure.KS,
    seeds: int = 1,
    requests: int = 1,
) -> list[dict]:
    """Each cell's fixed k and `auto`; requests > 1 adds "later": the same over the requests
    after each first (run_one)."""
    rows = []
    for real_cost in (False, True) if kit.draft_ratio else (False,):
        for acceptance in acceptances:
            runs = {str(k): run_mean(kit, acceptance, n_tokens, str(k), real_cost, seeds,
                                     requests) for k in ks}  # fmt: skip
            best = max(runs, key=lambda k: runs[k]["speedup"])
            auto = run_mean(kit, acceptance, n_tokens, "auto", real_cost, seeds, requests)
            row = {"tokens": n_tokens, "draft_cost": "real" if real_cost else "zero",
                   "acceptance": acceptance, "best_k": int(best),
                   "best": runs[best]["speedup"], "auto": auto,
                   "auto_of_best": round(auto["speedup"] / runs[best]["speedup"], 4),
                   "fixed": {k: r["speedup"] for k, r in runs.items()}}  # fmt: skip
            if requests > 1:
                later = max(runs, key=lambda k: runs[k]["later"])
                top = runs[later]["later"]
                row["later"] = {"best_k": int(later), "best": top, "auto": auto["later"],
                                "auto_of_best": round(auto["later"] / top, 4)}  # fmt: skip
            rows.append(row)
    return rows


def curve_run(name: str) -> replay.KitRun:
    """A stored curve (bench/replay_curves.json) as a kit run: its ratios, one graph none."""
    curves = json.loads(replay.CURVES_FILE.read_text())
    if name not in curves:
        raise SystemExit(f"--curve {name}: not in {replay.CURVES_FILE.name} ({', '.join(curves)})")
    return replay.KitRun(name, list(curves[name]["ratios"]), None, None)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--kit", help="a GPU kit run's JSON (bench/gpu/measure.py)")
    where.add_argument("--curve", help="a curve of bench/replay_curves.json (a CPU's: no "
                       "draft price of its own, give --draft-ratio)")  # fmt: skip
    ap.add_argument("--tokens", default="128", help="comma-separated generation lengths")
    ap.add_argument(
        "--draft-ratio",
        type=float,
        help="the drafter's token in one-token target passes (default: the kit's)",
    )
    ap.add_argument("--acceptance", help="comma-separated rates (default: the kit's grid)")
    ap.add_argument(
        "--seeds", type=int, default=1, help="realizations of the wrong positions (1: the kit's)"
    )
    ap.add_argument(
        "--requests", type=int, default=1,
        help="generations in a row on one policy (what `auto` learned carried, as a server "
        "runs): each cell adds the mean of those after the first",
    )  # fmt: skip
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    if args.requests < 1:
        raise SystemExit(f"--requests {args.requests}: give 1 or more")
    kit = replay.kit_run(args.kit) if args.kit else curve_run(args.curve)
    if args.draft_ratio is not None:
        kit = replace(kit, draft_ratio=args.draft_ratio)
    rates = (
        [float(a) for a in args.acceptance.split(",")] if args.acceptance else measure.ACCEPTANCE
    )
    runs = {"seeds": args.seeds, "requests": args.requests}
    rows = [r for n in args.tokens.split(",") for r in grid(kit, int(n), rates, **runs)]
    print(f"{kit.name}: draft {kit.draft_ratio and round(kit.draft_ratio, 3)} one-token passes, "
          f"one graph {kit.one_graph}, mean of {args.seeds} realization(s)")  # fmt: skip
    later = args.requests > 1
    print("| tokens | draft cost | acceptance | best fixed k | auto | auto / best | auto steps |"
          + (" later: best fixed k | auto | auto / best |" if later else ""))  # fmt: skip
    print("|---|---|---|---|---|---|---|" + ("---|---|---|" if later else ""))
    for r in rows:
        line = (f"| {r['tokens']} | {r['draft_cost']} | {r['acceptance']} | k={r['best_k']} "
                f"{r['best']:.3f}x | {r['auto']['speedup']:.3f}x | {r['auto_of_best']:.3f} | "
                f"{r['auto']['steps']} |")  # fmt: skip
        if later:
            x = r["later"]
            line += f" k={x['best_k']} {x['best']:.3f}x | {x['auto']:.3f}x |"
            line += f" {x['auto_of_best']:.3f} |"
        print(line)
    if args.json:
        Path(args.json).write_text(json.dumps({"kit": args.kit, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
