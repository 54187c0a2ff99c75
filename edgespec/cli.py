"""The `edgespec` command. Errors a user can cause print one line and exit 2."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from edgespec.errors import EdgespecError

log = logging.getLogger("edgespec")


def add_runtime_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: cores, <= 8)")
    p.add_argument("--n-gpu-layers", type=int, default=0, help="layers to offload (GPU builds)")
    p.add_argument("--n-ctx", type=int, default=4096, help="context size in tokens")


def add_spec_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--drafter", choices=["auto", "model", "ngram", "none"], default="auto")
    p.add_argument("--k", default="auto", help="draft length, or 'auto' (chosen per step)")
    p.add_argument("--k-max", type=int, default=16, help="longest draft the controller tries")


def add_sampling_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--min-p", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=None)


def runtime_options(args: argparse.Namespace):
    from edgespec.runtimes import RuntimeOptions

    return RuntimeOptions(n_ctx=args.n_ctx, n_threads=args.threads, n_gpu_layers=args.n_gpu_layers)


def spec_options(args: argparse.Namespace):
    from edgespec.loader import SpecOptions

    if args.k == "auto":
        k = None
    else:
        try:
            k = int(args.k)
        except ValueError:
            raise EdgespecError(f"--k must be a whole number or 'auto', got {args.k!r}") from None
        if k < 0:
            raise EdgespecError(f"--k must be >= 0, got {k}")
    return SpecOptions(drafter=args.drafter, k=k, k_max=k if k else args.k_max)


def sampling_params(args: argparse.Namespace):
    from edgespec.sampling import SamplingParams

    return SamplingParams(args.temperature, args.top_k, args.top_p, args.min_p, args.seed)


def read_prompt(args: argparse.Namespace) -> str:
    if args.prompt_file:
        try:
            return Path(args.prompt_file).read_text(encoding="utf-8")
        except OSError as e:
            raise EdgespecError(
                f"cannot read --prompt-file {args.prompt_file}: {e.strerror}"
            ) from e
    return args.prompt


def cmd_run(args: argparse.Namespace) -> int:
    from edgespec.chat import render_chat, user_messages
    from edgespec.loader import load_decoder

    sp = sampling_params(args)
    prompt = read_prompt(args)
    decoder = load_decoder(args.target, args.draft, spec_options(args), runtime_options(args))
    if args.chat or args.system:
        prompt = chat_prompt(decoder.target, user_messages(prompt, args.system), render_chat)
    kwargs = dict(max_tokens=args.max_tokens, sp=sp, stop=args.stop or ())
    if args.json:
        result = decoder.generate(prompt, **kwargs)
        out = {
            "text": result.text,
            "tokens": result.tokens,
            "finish_reason": result.finish_reason,
            "stats": result.stats.as_dict(),
        }
        print(json.dumps(out))
        return 0
    for event in decoder.stream(prompt, **kwargs):
        sys.stdout.write(event.text)
        sys.stdout.flush()
    sys.stdout.write("\n")
    assert event.stats is not None
    print(f"[{event.finish_reason}] {event.stats.summary()}", file=sys.stderr)
    return 0


def chat_prompt(target, messages, render_chat) -> str:
    info = target.vocab_info()
    return render_chat(
        target.chat_template(),
        messages,
        bos_token=target.special_token_text(info.bos_id),
        eos_token=target.special_token_text(info.eos_id),
    )


def cmd_tune(args: argparse.Namespace) -> int:
    from edgespec.calibrate import calibrate, store_tuned, tune_key
    from edgespec.loader import resolve_bundle, runtime_description
    from edgespec.runtimes import check_compatible, open_runtime

    opts = runtime_options(args)
    target_path, draft_path, _ = resolve_bundle(args.target, args.draft)
    target = open_runtime(target_path, opts)
    draft = open_runtime(draft_path, opts) if draft_path else None
    if draft is not None:
        check_compatible(target.vocab_info(), draft.vocab_info(), str(target_path), str(draft_path))
    curve = calibrate(target, draft, n_max=args.n_max)
    print(f"{'n':>3} {'ms':>8} {'x one':>6}")
    for n, (t, r) in enumerate(zip(curve.target_s, curve.ratios()), start=1):
        print(f"{n:>3} {t * 1e3:>8.1f} {r:>6.2f}")
    if draft is not None:
        print(
            f"draft token {curve.draft_s * 1e3:.1f} ms = {curve.draft_s / curve.target_s[0]:.2f}x"
        )
    key = tune_key(target_path, draft_path, runtime_description(opts, target, draft))
    print(f"stored in {store_tuned(key, curve)}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="edgespec", description="Lossless speculative decoding on one device."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="generate text from a prompt")
    run.add_argument("--target", required=True, help="target model (.gguf)")
    run.add_argument("--draft", help="draft model of the same family (.gguf)")
    source = run.add_mutually_exclusive_group(required=True)
    source.add_argument("--prompt", help="prompt text")
    source.add_argument("--prompt-file", help="file holding the prompt text")
    run.add_argument("--chat", action="store_true", help="format with the model's chat template")
    run.add_argument("--system", help="system message (implies --chat)")
    run.add_argument("--max-tokens", type=int, default=256)
    run.add_argument("--stop", action="append", help="stop string (repeatable)")
    run.add_argument("--json", action="store_true", help="print one JSON object at the end")
    add_sampling_args(run)
    add_spec_args(run)
    add_runtime_args(run)
    run.set_defaults(func=cmd_run)

    tune = sub.add_parser("tune", help="measure the verify cost curve and store it")
    tune.add_argument("--target", required=True)
    tune.add_argument("--draft")
    tune.add_argument("--n-max", type=int, default=9, help="largest pass to time (tokens)")
    add_runtime_args(tune)
    tune.set_defaults(func=cmd_tune)

    for register in optional_commands():
        register(sub)
    return parser


def optional_commands():
    """Sub-commands that live in their own modules."""
    from edgespec import bench, doctor, models
    from edgespec.export import cli as export_cli

    return [
        models.add_models_parser,
        export_cli.add_export_parser,
        bench.add_bench_parser,
        bench.add_demo_parser,
        doctor.add_doctor_parser,
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.func(args) or 0)
    except EdgespecError as e:
        print(f"edgespec: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
