"""A real uvicorn server on a loopback port in a thread, and instruments for server tests.

GatedRuntime wraps a real runtime: it logs every forward (n_past, tokens) and can hold
forwards at a gate, so a test decides when each verify step may run and counts steps
instead of timing them; it counts tokenize calls and can hold them too. DisconnectWatch
notes when the app receives http.disconnect.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Sequence

import uvicorn

from edgespec.controller import FixedPolicy
from edgespec.drafters import ModelDrafter
from edgespec.engine import SpeculativeDecoder
from edgespec.runtimes.llamacpp import LlamaCppRuntime
from edgespec.server.config import ServerConfig
from edgespec.server.deadline import request_deadline_protocol


class LiveServer:
    """`edgespec serve`'s uvicorn set-up (its protocol with a request deadline)."""

    def __init__(self, app, request_timeout_s: float = ServerConfig.request_timeout_s) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(
            app,
            log_level="warning",
            lifespan="off",
            timeout_keep_alive=1,
            http=request_deadline_protocol(request_timeout_s),
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [sock]}, daemon=True
        )
        self.thread.start()
        for _ in range(1000):
            if self.server.started:
                break
            threading.Event().wait(0.01)  # start-up poll, not a measurement
        assert self.server.started, "uvicorn did not start"

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)

    def __enter__(self) -> LiveServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class GatedRuntime:
    """A real runtime whose forwards are logged and, while the gate is shut, wait for leave."""

    def __init__(self, runtime: LlamaCppRuntime) -> None:
        self.runtime = runtime
        self.n_vocab = runtime.n_vocab
        self.n_ctx = runtime.n_ctx
        self.log: list[tuple[int, tuple[int, ...]]] = []  # (n_past, tokens) per forward
        self.cond = threading.Condition()
        self.permits: int | None = None  # None: open
        self.blocked = 0
        self.n_tokenize = 0  # tokenize calls: a request's template and tokenizer ran
        self.tokenize_open = threading.Event()  # cleared: tokenize calls wait for it
        self.tokenize_open.set()

    @property
    def n_past(self) -> int:
        return self.runtime.n_past

    def allow(self, permits: int | None) -> None:
        """None opens the gate; N lets N more forwards through, then holds the next."""
        with self.cond:
            self.permits = permits
            self.cond.notify_all()

    def wait_blocked(self, timeout: float = 60) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: self.blocked > 0, timeout), "no forward held"

    def forward(self, tokens: Sequence[int], *, last_only: bool = False):
        self.through_gate(tokens)
        return self.runtime.forward(tokens, last_only=last_only)

    def forward_top(self, tokens: Sequence[int], **options):
        """A greedy pass (llama.cpp reads its rows in place): gated and logged as forward."""
        self.through_gate(tokens)
        return self.runtime.forward_top(tokens, **options)

    def forward_dists(self, tokens: Sequence[int], sp, **options):
        """A sampled pass (llama.cpp reads its rows in place): gated and logged as forward."""
        self.through_gate(tokens)
        return self.runtime.forward_dists(tokens, sp, **options)

    def through_gate(self, tokens: Sequence[int]) -> None:
        """Wait while the gate holds passes, then log this one."""
        with self.cond:
            self.blocked += 1
            self.cond.notify_all()
            self.cond.wait_for(lambda: self.permits is None or self.permits > 0)
            self.blocked -= 1
            if self.permits is not None:
                self.permits -= 1
            self.log.append((self.runtime.n_past, tuple(int(t) for t in tokens)))

    def tokenize(self, text: str, *, special: bool) -> list[int]:
        with self.cond:
            self.n_tokenize += 1
            self.cond.notify_all()
        self.tokenize_open.wait()
        return self.runtime.tokenize(text, special=special)

    def wait_tokenizing(self, n: int = 1, timeout: float = 60) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: self.n_tokenize >= n, timeout), "no tokenize call"

    def __getattr__(self, name: str):
        return getattr(self.runtime, name)


class DisconnectWatch:
    """ASGI wrapper: sets `seen` when the app is told a client disconnected."""

    def __init__(self, app) -> None:
        self.app = app
        self.seen = threading.Event()

    async def __call__(self, scope, receive, send) -> None:
        async def watched():
            message = await receive()
            if message["type"] == "http.disconnect":
                self.seen.set()
            return message

        await self.app(scope, watched, send)


def tiny_decoder(pair, *, k: int = 3, reuse: bool = True, n_ctx: int = 512, gated: bool = False):
    """A decoder over fresh runtimes of the tiny pair (its own caches: the server is their
    only user, as prompt-cache reuse requires)."""
    target_path, draft_path = pair
    target = LlamaCppRuntime(target_path, n_ctx=n_ctx)
    draft = LlamaCppRuntime(draft_path, n_ctx=n_ctx)
    t = GatedRuntime(target) if gated else target
    drafter = ModelDrafter(draft, keep_cache=reuse)
    return SpeculativeDecoder(t, [drafter], FixedPolicy("model", k), reuse_cache=reuse)  # type: ignore[arg-type]
