"""The `edgespec` command. Errors a user can cause print one line and exit 2."""

from __future__ import annotations

import argparse
import errno
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import edgespec.plumbing.interrupts as interrupts
from edgespec.app.options import (
    DRAFT_HELP,
    HEAD_HELP,
    TARGET_HELP,
    add_runtime_args,
    add_sampling_args,
    add_spec_args,
    model_args,
    runtime_options,
    sampling_params,
    spec_options,
    warn_context_cut,
)
from edgespec.errors import EdgespecError
from edgespec.plumbing import hugepages

log = logging.getLogger("edgespec")


# commands that load a model: the process starts again with huge pages (plumbing/hugepages.py);
# export too, for its --tune (its peak memory measured alike: 630 and 627 MB, the demo pair)
LOADS_MODELS = frozenset({"run", "tune", "bench", "demo", "serve", "doctor", "export"})
PROMPT_FILE_MAX_BYTES = 16 << 20  # millions of tokens: more than any context holds


def read_prompt(args: argparse.Namespace) -> str:
    if args.prompt_file:
        return read_prompt_file(args.prompt_file)
    return args.prompt


def read_prompt_file(name: str) -> str:
    """The file as UTF-8 text, read a chunk at a time: a binary file (NUL bytes), invalid
    UTF-8 or an endless one (/dev/zero, a FIFO that never closes) ends in a clear error."""
    chunks: list[bytes] = []
    size = 0
    try:
        with Path(name).open("rb") as f:
            while chunk := f.read(1 << 20):
                if b"\0" in chunk:
                    raise EdgespecError(
                        f"--prompt-file {name} holds NUL bytes: it is a binary file, not text; "
                        "give a UTF-8 text file"
                    )
                size += len(chunk)
                if size > PROMPT_FILE_MAX_BYTES:
                    raise EdgespecError(
                        f"--prompt-file {name} is larger than {PROMPT_FILE_MAX_BYTES >> 20} MiB, "
                        "more than any context holds; give a shorter file"
                    )
                chunks.append(chunk)
    except OSError as e:
        raise EdgespecError(f"cannot read --prompt-file {name}: {e.strerror}") from e
    data = b"".join(chunks)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise EdgespecError(
            f"--prompt-file {name} is not UTF-8 text (byte {e.start:,} is "
            f"{data[e.start : e.start + 1]!r}); convert it to UTF-8 (iconv -t UTF-8)"
        ) from None


def check_text_args(args: argparse.Namespace) -> None:
    """Text arguments must be UTF-8: a shell passes any bytes, which Python keeps as lone
    surrogates that no tokenizer can encode."""
    for flag in ("prompt", "system", "stop"):
        values = getattr(args, flag, None)
        for value in values if isinstance(values, list) else [values]:
            if isinstance(value, str):
                try:
                    value.encode("utf-8")
                except UnicodeEncodeError as e:
                    raise EdgespecError(
                        f"--{flag} holds bytes that are not UTF-8 text (at character "
                        f"{e.start}); pass UTF-8 text (or put it in a file for --prompt-file)"
                    ) from None


def cmd_run(args: argparse.Namespace) -> int:
    from edgespec.chat import chat_tokens, user_messages
    from edgespec.loader import load_decoder

    sp = sampling_params(args)
    check_text_args(args)
    text = read_prompt(args)
    spec = spec_options(args)
    if spec.lookup_history:
        raise EdgespecError(
            "--lookup-history drafts from earlier completions, and run makes one; drop it, "
            "or use it with edgespec serve"
        )
    target, draft = model_args(args.target, args.draft)
    decoder = load_decoder(
        target, draft, spec, runtime_options(args), head=args.head,
        remember=not args.no_lessons,
    )  # fmt: skip
    warn_context_cut(args, decoder.target.n_ctx)
    prompt: str | list[int] = text
    if args.chat or args.system:
        messages = user_messages(text, args.system)
        prompt = chat_tokens(
            decoder.target, messages, specials_in_messages=args.chat_special_tokens
        )
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
    from edgespec.controller.calibrate import cost_curve, tune_store_path
    from edgespec.pair import open_pair

    pair = open_pair(*model_args(args.target, args.draft), runtime_options(args))
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
    run.add_argument("--head", help=HEAD_HELP)
    source = run.add_mutually_exclusive_group(required=True)
    source.add_argument("--prompt", help="prompt text")
    source.add_argument("--prompt-file", help="file holding the prompt text")
    run.add_argument("--chat", action="store_true", help="format with the model's chat template")
    run.add_argument("--system", help="system message (implies --chat)")
    run.add_argument(
        "--chat-special-tokens",
        action="store_true",
        help="parse special-token text in the prompt and system message as control tokens "
        "(by default it stays text, so it cannot close a turn)",
    )
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
    from edgespec.app import bench_command, demo, doctor, models
    from edgespec.export import cli as export_cli
    from edgespec.server import cli as serve_cli

    return [
        models.add_models_parser,
        export_cli.add_export_parser,
        bench_command.add_bench_parser,
        demo.add_demo_parser,
        doctor.add_doctor_parser,
        serve_cli.add_serve_parser,
    ]


def main(argv: Sequence[str] | None = None) -> int:
    interrupts.install()  # Ctrl-C stops even inside llama.cpp: exit 130; SIGTERM: 143
    parser = build_parser()
    args = parser.parse_args(argv)
    if argv is None and args.command in LOADS_MODELS:  # the command line, not a caller's list
        hugepages.reexec_with_tunable()
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # here, where a closed pipe or a full disk can still be reported
        return code
    except EdgespecError as e:
        print(f"edgespec: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader went away (| head): stop quietly, as cat would
        discard_stdout()
        return 141  # 128 + SIGPIPE, a shell's status for a writer its pipe closed on
    except OSError as e:
        if e.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        discard_stdout()
        where = e.filename or "the output"
        print(f"edgespec: error: no space left writing {where}; free space and run again",
              file=sys.stderr)  # fmt: skip
        return 2


def discard_stdout() -> None:
    """Point stdout at /dev/null, so that the exit's flush of what is left raises nothing."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    sys.exit(main())
