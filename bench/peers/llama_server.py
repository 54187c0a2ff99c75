"""llama.cpp's own speculative decoding as a peer: llama-server at the commit llama-cpp-python
vendors, through its HTTP API, each mode divided by its own plain run on the same prompts.

Modes (one server each, all started at once, taking turns per prompt as `edgespec bench`
does, A B B A over repeats): plain; ngram-mod (`--spec-type ngram-mod`, its documented
defaults); draft (`--model-draft DRAFT --spec-type draft-simple`, its defaults); and any
`--mode NAME='FLAGS'` you add. Every request is greedy (temperature 0), from an empty cache
(cache_prompt false), with the chat tokens edgespec builds for the same prompt, so prompts
are token for token those of `edgespec bench`. ngram-mod keeps one n-gram pool for the
server's life, across requests: it would draft a repeated prompt's whole answer from the
previous repeat, so its server is restarted before every request (--keep-state to see it
serve many requests, with --repeat 1). Speed is the server's own decode figure
(timings.predicted_n / predicted_ms: prefill excluded, as in edgespec bench).

    bench/peers/llama_server.sh          # build once (15-30 min on 2 cores), prints the path
    python bench/peers/llama_server.py --target demo-target --draft demo-draft \
        --suite edit --suite open --repeat 2 --threads 2 --by-category --json out.json
"""

from __future__ import annotations

import argparse
import json
import shlex
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from edgespec.app.bench_command import print_report
from edgespec.app.bench_runs import CI_METHOD, Row, Run, machine_info, token_budget
from edgespec.app.models import resolve_model
from edgespec.app.suites import load_suite
from edgespec.chat import chat_tokens
from edgespec.runtimes.llamacpp import LlamaCppRuntime

BUILD_SCRIPT = Path(__file__).with_name("llama_server.sh")
PLAIN = "llama-server"


def mode_flags(mode: str, draft: Path | None) -> list[str]:
    """The server flags of a built-in mode (docs/speculative.md at the vendored commit)."""
    if mode == "plain":
        return []
    if mode == "ngram-mod":
        return ["--spec-type", "ngram-mod"]
    if mode == "draft":
        if draft is None:
            raise SystemExit("mode draft needs --draft")
        return ["--model-draft", str(draft), "--spec-type", "draft-simple"]
    raise SystemExit(f"unknown mode {mode!r}; built in: plain, ngram-mod, draft")


def server_command(
    binary: Path, target: Path, flags: list[str], *, port: int, threads: int, n_ctx: int
) -> list[str]:
    return [
        str(binary), "-m", str(target), "--host", "127.0.0.1", "--port", str(port),
        "-c", str(n_ctx), "-t", str(threads), "-tb", str(threads), "-np", "1", "--no-ui",
        *flags,
    ]  # fmt: skip


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


STATEFUL = ("ngram-mod", "ngram-cache")  # spec types whose drafts learn across requests


def is_stateful(flags: list[str]) -> bool:
    return any(t in flag.split(",") for flag in flags for t in STATEFUL)


class Server:
    def __init__(self, name: str, command: list[str], log_dir: Path):
        self.name = name
        self.command = command
        self.log = (log_dir / f"{name}.log").open("a")
        self.start()

    def start(self) -> None:
        self.port = free_port()
        i = self.command.index("--port")
        self.command[i + 1] = str(self.port)
        self.proc = subprocess.Popen(self.command, stdout=self.log, stderr=subprocess.STDOUT)

    def restart(self) -> None:
        """A fresh server: nothing learned from earlier requests."""
        self.terminate()
        self.start()
        self.wait_ready()

    def wait_ready(self, timeout: float = 300.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"llama-server {self.name} exited; see {self.log.name}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=5):
                    return
            except (urllib.error.URLError, OSError):
                time.sleep(0.5)
        raise SystemExit(f"llama-server {self.name} not ready after {timeout:.0f} s")

    def complete(self, tokens: list[int], n_predict: int) -> dict:
        body = {
            "prompt": tokens,
            "n_predict": n_predict,
            "temperature": 0.0,
            "cache_prompt": False,
            "return_tokens": True,
            "stream": False,
        }
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/completion",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=3600) as response:
            return json.loads(response.read())

    def terminate(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()

    def stop(self) -> None:
        self.terminate()
        self.log.close()


def to_run(prompt_id: str, repeat: int, answer: dict, reference: list[int] | None) -> Run:
    timings = answer.get("timings", {})
    tokens = list(answer.get("tokens", []))
    stats = {
        "n_draft_tokens": int(timings.get("draft_n", 0)),
        "n_accepted": int(timings.get("draft_n_accepted", 0)),
    }
    run = Run(
        prompt_id,
        int(timings.get("predicted_n", 0)),
        float(timings.get("predicted_ms", 0.0)) / 1e3,
        reference is None or tokens == reference,
        repeat,
        stats=stats,
    )
    return run


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", required=True, help="GGUF (or demo-target)")
    p.add_argument("--draft", help="GGUF draft for mode draft (or demo-draft)")
    p.add_argument("--suite", action="append", help="edit | chat | open | code | FILE.jsonl")
    p.add_argument("--modes", default="plain,ngram-mod,draft")
    p.add_argument("--mode", action="append", default=[], help="NAME='server flags' (extra)")
    p.add_argument("--server", help="llama-server binary (default: build/find with the script)")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--limit", type=int)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--n-ctx", type=int, default=4096)
    p.add_argument("--by-category", action="store_true")
    p.add_argument(
        "--keep-state",
        action="store_true",
        help=f"do not restart {', '.join(STATEFUL)} servers between requests",
    )
    p.add_argument("--json")
    args = p.parse_args(argv)

    target = resolve_model(args.target)
    draft = resolve_model(args.draft) if args.draft else None
    binary = Path(args.server or subprocess.check_output(["bash", str(BUILD_SCRIPT)], text=True)
                  .strip().splitlines()[-1])  # fmt: skip
    modes = {m: mode_flags(m, draft) for m in args.modes.split(",") if m}
    for extra in args.mode:
        name, _, flags = extra.partition("=")
        modes[name] = shlex.split(flags)
    if "plain" not in modes:
        raise SystemExit("the modes need plain: every mode is divided by it")
    names = ["plain"] + [m for m in modes if m != "plain"]
    vocab = LlamaCppRuntime(target, vocab_only=True)
    log_dir = Path(tempfile.mkdtemp(prefix="llama-server-logs-"))
    servers = {}
    try:
        for name in names:
            command = server_command(
                binary, target, modes[name], port=0, threads=args.threads, n_ctx=args.n_ctx
            )
            servers[name] = Server(name, command, log_dir)
        for server in servers.values():
            server.wait_ready()
        reports = {}
        for suite in args.suite or ["edit"]:
            reports[suite] = run_suite(suite, args, names, servers, vocab)
            reports[suite]["server_flags"] = {n: modes[n] for n in names}
            reports[suite]["server"] = str(binary)
    finally:
        for server in servers.values():
            server.stop()
    if args.json:
        Path(args.json).write_text(json.dumps({"suites": reports}, indent=1))
        print(f"wrote {args.json}")
    return 0


def run_suite(suite: str, args, names: list[str], servers: dict, vocab) -> dict:
    prompts = load_suite(suite, args.limit)
    tokens = [chat_tokens(vocab, p.messages) for p in prompts]
    runs: dict[str, list[Run]] = {n: [] for n in names}
    order = []
    for r in range(args.repeat):
        for prompt, toks in zip(prompts, tokens):
            budget = token_budget(prompt, args.max_tokens)
            answers = {}
            for name in names if r % 2 == 0 else list(reversed(names)):
                order.append(f"{r}:{prompt.id}:{name}")
                fresh = is_stateful(servers[name].command) and not args.keep_state
                if fresh and (r or prompt is not prompts[0]):
                    servers[name].restart()
                answers[name] = servers[name].complete(toks, budget)
            reference = list(answers["plain"].get("tokens", []))
            for name in names:
                ref = None if name == "plain" else reference
                runs[name].append(to_run(prompt.id, r, answers[name], ref))
        print(f"  {suite}: repeat {r + 1}/{args.repeat} done", file=sys.stderr)
    rows = [Row(PLAIN if n == "plain" else f"{PLAIN}-{n}", None, runs[n], PLAIN) for n in names]
    report = {
        "machine": machine_info(),
        "max_tokens": args.max_tokens,
        "repeat": args.repeat,
        "threads": args.threads,
        "restarted_per_request": [
            n for n in names if is_stateful(servers[n].command) and not args.keep_state
        ],
        "prompts": [p.id for p in prompts],
        "categories": {p.id: p.category for p in prompts},
        "speedup_method": CI_METHOD,
        "order": order,
        "command": " ".join(shlex.quote(a) for a in sys.argv),
        "rows": [row.as_dict(None if i == 0 else rows[0]) for i, row in enumerate(rows)],
    }
    print(f"suite {suite}: {len(prompts)} prompts x {args.repeat}, llama-server modes in turn")
    print_report(report, args.by_category)
    return report


if __name__ == "__main__":
    sys.exit(main())
