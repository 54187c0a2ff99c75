"""The `edgespec` command. Errors a user can cause print one line and exit 2."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from edgespec.app.options import (
    DRAFT_HELP,
    TARGET_HELP,
    add_runtime_args,
    add_sampling_args,
    add_spec_args,
    runtime_options,
    sampling_params,
    spec_options,
)
from edgespec.errors import EdgespecError

log = logging.getLogger("edgespec")


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
    from edgespec.chat import chat_tokens, user_messages
    from edgespec.loader import load_decoder

    sp = sampling_params(args)
    text = read_prompt(args)
    spec = spec_options(args)
    decoder = load_decoder(args.target, args.draft, spec, runtime_options(args))
    prompt: str | list[int] = text
    if args.chat or args.system:
        prompt = chat_tokens(decoder.target, user_messages(text, args.system))
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


def cmd_tune(args: argparse.Namespace) -> int:
    from edgespec.calibrate import cost_curve, tune_store_path
    from edgespec.pair import open_pair

    pair = open_pair(args.target, args.draft, runtime_options(args))
    curve = cost_curve(pair, n_max=args.n_max, remeasure=True)
    print(f"{'n':>3} {'ms':>8} {'x one':>6}")
    for n, (t, r) in enumerate(zip(curve.target_s, curve.ratios()), start=1):
        print(f"{n:>3} {t * 1e3:>8.1f} {r:>6.2f}")
    if pair.draft is not None:
        print(
            f"draft token {curve.draft_s * 1e3:.1f} ms = {curve.draft_s / curve.target_s[0]:.2f}x"
        )
    print(f"stored in {tune_store_path()}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="edgespec", description="Lossless speculative decoding on one device."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="generate text from a prompt")
    run.add_argument("--target", required=True, help=TARGET_HELP)
    run.add_argument("--draft", help=DRAFT_HELP)
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
    tune.add_argument("--target", required=True, help=TARGET_HELP)
    tune.add_argument("--draft", help=DRAFT_HELP)
    tune.add_argument("--n-max", type=int, default=9, help="largest pass to time (tokens)")
    add_runtime_args(tune)
    tune.set_defaults(func=cmd_tune)

    for register in optional_commands():
        register(sub)
    return parser


def optional_commands():
    """Sub-commands that live in their own modules."""
    from edgespec.app import bench_cli, demo, doctor, models
    from edgespec.export import cli as export_cli
    from edgespec.server import cli as serve_cli

    return [
        models.add_models_parser,
        export_cli.add_export_parser,
        bench_cli.add_bench_parser,
        demo.add_demo_parser,
        doctor.add_doctor_parser,
        serve_cli.add_serve_parser,
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
