"""Acceptance of the two samplers (Gumbel-max coupling, rejection sampling) on real prompts.

For each prompt this decodes plain (seeded) and then, along that one trajectory, reads the
target's p and the draft model's q at every generated position (one pass of each model
over the whole sequence) and computes each sampler's exact acceptance probability there:

    rejection: sum_x min(p(x), q(x)) = 1 - TV(p, q)
    gumbel:    P(argmax(log p + g) = argmax(log q + g)) = sum_i 1 / sum_j max(p_j/p_i, q_j/q_i)

(the second: given E_i = e, token i wins both races iff every E_j > e max(p_j/p_i, q_j/q_i);
integrate over e ~ Exp(1)). Tokens i with the smallest min(p_i, q_i) are left out of the
outer sum until the left-out mass passes 1e-4 (at most 1024 kept), reported as `bound`:
gumbel's figure is exact to within it, from below.
Prompt lookup drafts a point mass, which both samplers accept with probability p(x).

With --runs, each sampler then drafts for real (fixed k, model and ngram drafters, the
same seeds): realized acceptance, tokens per step, tokens/s, and how many outputs equal
plain decoding's with the same seed. tokens/s means something on a quiet machine only.

    python bench/sampler_acceptance.py [--suites chat,code,edit] [--limit 4]
        [--temperatures 0.7,1.0] [--top-p 1.0] [--max-tokens 48] [--runs] [--k 4] [--json F]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from edgespec.sampling import SamplingParams, token_dist

LEFT_OUT = 1e-4  # largest sum of min(p, q) over tokens left out of the gumbel sum
MAX_KEPT = 1024  # ...unless that needs more tokens (long tails at T = 1): the bound says so


def acceptance(p: np.ndarray, q: np.ndarray) -> tuple[float, float, float]:
    """(rejection's, gumbel's, gumbel's left-out bound) for dense [V] p and q."""
    rejection = float(np.minimum(p, q).sum(dtype=np.float64))
    both = np.flatnonzero((p > 0) & (q > 0))
    m = np.minimum(p[both], q[both]).astype(np.float64)
    order = np.argsort(-m)
    tail = np.cumsum(m[order][::-1])[::-1]  # tail[r]: mass of ranks >= r
    keep = order[: min(MAX_KEPT, max(1, int(np.searchsorted(-tail, -LEFT_OUT))))]
    bound = float(m.sum() - m[keep].sum())
    union = np.flatnonzero((p > 0) | (q > 0))
    pu, qu = p[union].astype(np.float64), q[union].astype(np.float64)
    gumbel = 0.0
    for chunk in np.array_split(both[keep], max(1, len(keep) // 32)):
        ratios = np.maximum(pu[None, :] / p[chunk, None], qu[None, :] / q[chunk, None])
        gumbel += float((1.0 / ratios.sum(axis=1)).sum())
    return rejection, gumbel, bound


def trajectory_alphas(target, draft, prompt: list[int], generated: list[int], sp) -> list:
    """(rejection, gumbel, bound) at every generated position, p and q on the same prefix."""
    seq = prompt + generated
    rows = []
    for runtime in (target, draft):
        runtime.reset()
        runtime.forward(seq[: len(prompt) - 1], last_only=True)
        rows.append(runtime.forward(seq[len(prompt) - 1 : -1]))  # [len(generated), V]
        runtime.reset()
    out = []
    for t_row, d_row in zip(*rows):
        p = token_dist(t_row, sp).dense(len(t_row))
        q = token_dist(d_row, sp).dense(len(d_row))
        out.append(acceptance(p, q))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="demo-target")
    parser.add_argument("--draft", default="demo-draft")
    parser.add_argument("--suites", default="chat,code,edit")
    parser.add_argument("--limit", type=int, default=4, help="prompts per suite")
    parser.add_argument("--temperatures", default="0.7,1.0")
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--runs", action="store_true", help="also draft for real")
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    from edgespec.app.models import resolve_model
    from edgespec.app.suites import load_suite
    from edgespec.backends import RuntimeOptions, open_runtime
    from edgespec.chat import chat_tokens
    from edgespec.controller import FixedPolicy
    from edgespec.drafters import ModelDrafter, NgramDrafter
    from edgespec.engine import SpeculativeDecoder

    opts = RuntimeOptions(n_ctx=2048)
    target = open_runtime(resolve_model(args.target), opts)
    draft = open_runtime(resolve_model(args.draft), opts)
    report = []
    for suite in args.suites.split(","):
        prompts = [chat_tokens(target, list(p.messages)) for p in load_suite(suite, args.limit)]
        for temperature in (float(t) for t in args.temperatures.split(",")):
            sp = SamplingParams(temperature, top_p=args.top_p, seed=args.seed)
            plain = SpeculativeDecoder(target)
            refs = [plain.generate(t, max_tokens=args.max_tokens, sp=sp, speculative=False)
                    for t in prompts]  # fmt: skip
            alphas = [a for t, r in zip(prompts, refs)
                      for a in trajectory_alphas(target, draft, t, r.tokens, sp)]  # fmt: skip
            rej, gum, bound = (float(np.mean(c)) for c in zip(*alphas))
            row = {"suite": suite, "temperature": temperature, "top_p": args.top_p,
                   "positions": len(alphas), "alpha_rejection": round(rej, 4),
                   "alpha_gumbel": round(gum, 4), "gumbel_left_out": float(max(
                   a[2] for a in alphas)), "runs": []}  # fmt: skip
            print(
                f"{suite:<5} T={temperature:<4} top-p {args.top_p}: {len(alphas)} positions, "
                f"mean acceptance probability rejection {rej:.3f}, gumbel {gum:.3f} "
                f"(left out <= {row['gumbel_left_out']:.1e})",
                flush=True,
            )
            if args.runs:
                for name in ("model", "ngram"):
                    for sampler in ("gumbel", "rejection"):
                        d = ModelDrafter(draft) if name == "model" else NgramDrafter()
                        dec = SpeculativeDecoder(target, [d], FixedPolicy(name, args.k))
                        s = SamplingParams(temperature, top_p=args.top_p, seed=args.seed,
                                           sampler=sampler)  # fmt: skip
                        outs = [dec.generate(t, max_tokens=args.max_tokens, sp=s) for t in prompts]
                        drafted = sum(o.stats.n_draft_tokens for o in outs)
                        run = {"drafter": name, "sampler": sampler, "k": args.k,
                               "acceptance_rate": sum(o.stats.n_accepted for o in outs)
                               / max(drafted, 1),
                               "tokens_per_step": sum(o.stats.n_generated for o in outs)
                               / sum(o.stats.n_steps for o in outs),
                               "tokens_per_second": sum(o.stats.n_generated for o in outs)
                               / sum(o.stats.t_decode for o in outs),
                               "identical_to_plain": sum(o.tokens == r.tokens
                                                         for o, r in zip(outs, refs)),
                               "prompts": len(prompts)}  # fmt: skip
                        row["runs"].append(run)
                        print(
                            f"    {name:<5} {sampler:<9} k={args.k}: acceptance "
                            f"{run['acceptance_rate']:.3f}, {run['tokens_per_step']:.2f} "
                            f"tokens/step, {run['tokens_per_second']:.1f} tok/s, identical "
                            f"{run['identical_to_plain']}/{len(prompts)}",
                            flush=True,
                        )
            report.append(row)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
