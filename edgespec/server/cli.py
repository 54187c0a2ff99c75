"""The `serve` sub-command: flags -> ServerConfig + a decoder -> uvicorn."""

from __future__ import annotations

import argparse
from pathlib import Path

from edgespec.app.options import (
    DRAFT_HELP,
    HEAD_HELP,
    TARGET_HELP,
    add_runtime_args,
    add_spec_args,
    context_size,
    model_args,
    runtime_options,
    spec_options,
    warn_context_cut,
)
from edgespec.errors import EdgespecError
from edgespec.server.config import ServerConfig


def add_serve_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve",
        help="serve a pair over an OpenAI-compatible HTTP API (and a page at /)",
        description="Serve BUNDLE (or --target/--draft) on http://HOST:PORT: /v1/completions, "
        "/v1/chat/completions, /v1/models, /health, /metrics, and a chat page at /.",
    )
    p.add_argument("bundle", nargs="?", help="a bundle folder (edgespec export); or --target")
    p.add_argument("--target", help=TARGET_HELP)
    p.add_argument("--draft", help=DRAFT_HELP)
    p.add_argument("--head", help=HEAD_HELP)
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--api-key", help="require 'Authorization: Bearer KEY' on /v1 routes")
    p.add_argument(
        "--model-id", help="the model name /v1/models lists (default: the file or folder name)"
    )
    p.add_argument(
        "--max-body-bytes",
        type=int,
        default=ServerConfig.max_body_bytes,
        help="larger request bodies get 413 (default 1 MiB)",
    )
    p.add_argument(
        "--max-queue", type=int, default=8, help="requests that may wait (more: 429), default 8"
    )
    p.add_argument(
        "--request-timeout",
        type=float,
        default=ServerConfig.request_timeout_s,
        metavar="SECONDS",
        help="a request (headers and body) not arrived whole this long after it began gets 408 "
        "and its connection is closed (default %(default)g)",
    )
    p.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="a web origin (http://host:port) whose pages may call the API (repeatable); "
        "others are refused and get no CORS headers",
    )
    p.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a Host name to accept besides loopback names and --host (repeatable; for a "
        "server bound to 0.0.0.0, the name clients use)",
    )
    p.add_argument(
        "--no-prompt-cache",
        action="store_true",
        help="prefill every request whole instead of reusing the KV caches of the last one",
    )
    p.add_argument(
        "--print-handoff",
        choices=("vllm", "llama-server"),
        help="print the command that serves this pair with the same speculative settings on "
        "that engine, and exit",
    )
    add_spec_args(p)
    add_runtime_args(p)
    p.set_defaults(func=cmd_serve)


def model_paths(args: argparse.Namespace) -> tuple[str, str | None]:
    if bool(args.bundle) == bool(args.target):
        raise EdgespecError("give a bundle folder or --target MODEL (one of them)")
    return model_args(args.bundle or args.target, args.draft)


def cmd_serve(args: argparse.Namespace) -> int:
    from edgespec.pair import resolve_bundle

    target, draft = model_paths(args)
    spec = spec_options(args)
    if args.print_handoff:
        from edgespec.server.handoff import handoff_command

        if args.head:
            raise EdgespecError(
                "--print-handoff hands over the draft model and prompt lookup, not a draft "
                "head; drop --head"
            )
        paths = resolve_bundle(target, draft)
        print(
            handoff_command(
                args.print_handoff,
                paths.target.resolve(),
                paths.draft.resolve() if paths.draft else None,
                spec,
                n_ctx=context_size(args),
                host=args.host,
                port=args.port,
            )
        )
        return 0
    try:
        import uvicorn

        from edgespec.server import create_app
        from edgespec.server.deadline import request_deadline_protocol
        from edgespec.server.shutdown import run_server
    except ImportError as e:
        raise EdgespecError(
            f"edgespec serve needs the serve extra ({e.name} is missing): "
            "pip install 'edgespec[serve]'"
        ) from e
    from edgespec.loader import load_decoder

    path = Path(target)
    config = ServerConfig(
        model_id=args.model_id or (path.stem if path.is_file() else path.name),
        host=args.host,
        allow_hosts=tuple(args.allow_host),
        allow_origins=tuple(args.allow_origin),
        api_key=args.api_key,
        max_queue=args.max_queue,
        max_body_bytes=args.max_body_bytes,
        request_timeout_s=args.request_timeout,
    )
    decoder = load_decoder(
        target,
        draft,
        spec,
        runtime_options(args),
        head=args.head,
        reuse_cache=not args.no_prompt_cache,
        capture_graphs=True,  # the first request pays no CUDA graph capture
        remember=not args.no_lessons,
    )
    warn_context_cut(args, decoder.target.n_ctx)
    app = create_app(decoder, config)
    http = request_deadline_protocol(config.request_timeout_s)
    served = uvicorn.Config(app, host=args.host, port=args.port, log_level="warning", http=http)
    return run_server(
        served,
        f"edgespec: serving {config.model_id} on http://{args.host}:{args.port}/ "
        "(OpenAI API under /v1)",
    )
