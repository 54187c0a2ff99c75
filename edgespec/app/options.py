"""Command-line flags <-> the core's option dataclasses, shared by every sub-command.

Each flag mirrors one field of RuntimeOptions, SpecOptions or SamplingParams; the rules
(what k means, what the device implies) live in those dataclasses, not here.
"""

from __future__ import annotations

import argparse
import logging

from edgespec.app.models import resolve_model
from edgespec.backends import DEVICES, RuntimeOptions
from edgespec.errors import EdgespecError
from edgespec.loader import DRAFT_CONFIDENCE, DRAFTER_CHOICES, SpecOptions
from edgespec.runtime import K_MAX
from edgespec.sampling import CUTS, SAMPLERS, SamplingParams

TARGET_HELP = (
    "target model: a .gguf file, a bundle folder (edgespec export), an ONNX folder or a name "
    "`edgespec models list` shows (demo-target)"
)
DRAFT_HELP = (
    "draft model of the target's family: .gguf file, ONNX folder or a name `edgespec models "
    "list` shows (demo-draft); a bundle has one"
)
HEAD_HELP = (
    "an EAGLE-3 draft head trained for the target, as a .gguf file (llama.cpp targets; a bundle "
    "may carry one): drafted with beside the others, or alone with --drafter eagle"
)


def model_args(target: str, draft: str | None) -> tuple[str, str | None]:
    """--target and --draft as paths: a name `edgespec models` knows becomes its fetched file
    (an error saying how to fetch it when it is not), anything else stays as given."""
    return str(resolve_model(target)), str(resolve_model(draft)) if draft else None


def add_runtime_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: cores, <= 8)")
    p.add_argument(
        "--fixed-threads",
        action="store_true",
        help="llama.cpp: keep --threads even while other processes keep cores busy (default: "
        "a thread fewer per busy core, which keeps 2-3x the speed beside other work)",
    )
    p.add_argument(
        "--device", choices=DEVICES, default="cpu", help="where the models run (default cpu)"
    )
    p.add_argument(
        "--n-gpu-layers",
        type=int,
        default=None,
        help="GGUF (llama.cpp) partial offload: layers on the GPU (--device cuda: all)",
    )
    p.add_argument(
        "--n-ctx",
        type=int,
        default=None,
        help=f"context size in tokens (default {RuntimeOptions.n_ctx}, or the model's if smaller)",
    )
    p.add_argument(
        "--exact",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="batch-invariant kernels (CPU): speculative output equals plain decoding's, greedy "
        "and seeded (docs/exactness.md). The default on ONNX Runtime, where they cost nothing "
        "measurable; on llama.cpp they cost speed. --no-exact: the fastest kernels",
    )
    p.add_argument(
        "--backend-sampling",
        action="store_true",
        help="GGUF (llama.cpp) target: each pass's rows are reduced by llama.cpp's backend "
        "sampler where the pass ran (on the GPU), and only their largest logits reach the "
        "host: greedy, --top-k, --top-p, --min-p and temperature alone; the same output",
    )


def add_spec_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--drafter",
        choices=DRAFTER_CHOICES,
        default="auto",
        help="auto (default): the controller chooses per step among the draft model (--draft), "
        "the draft head (--head), prompt lookup and plain decoding; model, eagle (the head) or "
        "ngram: that drafter alone; none: plain decoding",
    )
    p.add_argument(
        "--k",
        default="auto",
        help="draft length. N: every step drafts N tokens (needs --drafter model, eagle or "
        "ngram); 'auto' (default): chosen per step (0 = plain), up to --k-max",
    )
    p.add_argument("--k-max", type=int, default=K_MAX, help="longest draft --k auto tries")
    add_draft_confidence_arg(p)
    p.add_argument(
        "--lookup-history",
        type=int,
        default=0,
        metavar="N",
        help="serve: prompt lookup also drafts from the completions of the last N requests "
        "(default 0: off, since it carries one client's text into another's drafts; never "
        "into output)",
    )
    p.add_argument(
        "--no-lessons",
        action="store_true",
        help="--k auto: start the drafters from their priors and keep nothing of what they "
        "show (default: start from what earlier runs of these models on this device and "
        "runtime learned of each drafter's acceptance, kept in lessons.json beside the "
        "tune store)",
    )


def add_draft_confidence_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--draft-confidence",
        type=float,
        default=None,
        help="--k auto: a draft model's draft ends at its first token it gives less than "
        "this probability (greedy; seeded sampling: by its Gumbel margin) (default "
        f"{DRAFT_CONFIDENCE}; 0: off)",
    )


def add_sampling_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    p.add_argument("--top-k", type=int, default=0)
    for cut in CUTS:
        flag = "--" + cut.name.replace("_", "-")
        p.add_argument(flag, type=float, default=cut.off, help=f"{cut.help} ({cut.off}: off)")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument(
        "--sampler",
        choices=SAMPLERS,
        default=SamplingParams.sampler,
        help="how drafts are judged when sampling: gumbel (default: the same output as plain "
        "decoding with the same --seed) or rejection (Leviathan et al.)",
    )


def runtime_options(args: argparse.Namespace) -> RuntimeOptions:
    return RuntimeOptions(
        n_ctx=context_size(args),
        n_threads=args.threads,
        load_aware_threads=not args.fixed_threads,
        device=args.device,
        n_gpu_layers=args.n_gpu_layers,
        exact=args.exact,  # None: each back-end's default
        backend_sampling=args.backend_sampling,
    )


def context_size(args: argparse.Namespace) -> int:
    return RuntimeOptions.n_ctx if args.n_ctx is None else args.n_ctx


def warn_context_cut(args: argparse.Namespace, n_ctx: int) -> None:
    """A runtime cuts the context to what its model holds (n_ctx, as opened); an --n-ctx
    given above it is reported (the default asks for up to 4096 and is cut without a word)."""
    if args.n_ctx is not None and n_ctx < args.n_ctx:
        logging.getLogger("edgespec").warning(
            "--n-ctx %d is more than the model's context holds; using %d", args.n_ctx, n_ctx
        )


def spec_options(args: argparse.Namespace) -> SpecOptions:
    if args.k == "auto":
        k = None
    else:
        try:
            k = int(args.k)
        except ValueError:
            raise EdgespecError(f"--k must be a whole number or 'auto', got {args.k!r}") from None
    return SpecOptions(
        drafter=args.drafter,
        k=k,
        k_max=args.k_max,
        draft_confidence=args.draft_confidence,
        lookup_history=args.lookup_history,
    )


def sampling_params(args: argparse.Namespace) -> SamplingParams:
    cuts = {cut.name: getattr(args, cut.name) for cut in CUTS}
    return SamplingParams(
        args.temperature, args.top_k, seed=args.seed, sampler=args.sampler, **cuts
    )
