"""`edgespec serve`'s uvicorn run, stopped cleanly by any number of Ctrl-Cs and SIGTERMs.

uvicorn.run catches the signals itself and, once stopped, raises each again under the handler
it found: ours (plumbing/interrupts), whose KeyboardInterrupt then lands inside the event
loop, so asyncio cancels the tasks still open and a second Ctrl-C printed a CancelledError
traceback; it also swallows the KeyboardInterrupt, so a stopped server exited 0. Here the
first SIGINT or SIGTERM starts uvicorn's graceful shutdown (requests in flight finish), the
next drops the connections still open (each generation stops after its step in flight, as
for a client that left), later ones change nothing. The handler only sets flags; the loop
acts on them. The process exits as every command does: 130 after Ctrl-C, 143 after SIGTERM.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from types import FrameType

import uvicorn

SIGNALS = (signal.SIGINT, signal.SIGTERM)
SHUTTING_DOWN = "edgespec: shutting down after the requests in flight; Ctrl-C again drops them"


class SignalledServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, announce: str) -> None:
        super().__init__(config)
        self.announce = announce
        self.first_signal: int | None = None
        self.drop_now = False

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.first_signal is None:
            self.first_signal = signum
            self.should_exit = True
        else:
            self.drop_now = True

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # the handlers are run_server's, installed before the loop starts

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:  # listening: a client told by this line can connect
            print(self.announce, file=sys.stderr, flush=True)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        print(SHUTTING_DOWN, file=sys.stderr, flush=True)
        dropper = asyncio.create_task(self.drop_when_asked())
        try:
            await super().shutdown(sockets)
        finally:
            dropper.cancel()
            with suppress(asyncio.CancelledError):
                await dropper

    async def drop_when_asked(self) -> None:
        """Close every open connection once a second signal came: the app sees each client
        leave, and uvicorn's wait for its tasks ends after their step in flight."""
        while not self.drop_now:
            await asyncio.sleep(0.02)  # the handler cannot touch transports: it polls a flag
        for connection in list(self.server_state.connections):
            connection.transport.abort()  # type: ignore[attr-defined]

    def exit_code(self) -> int:
        return 0 if self.first_signal is None else 128 + self.first_signal


def run_server(config: uvicorn.Config, announce: str) -> int:
    """Serve until a signal (main thread: signal handlers live there); print announce once
    listening."""
    server = SignalledServer(config, announce)
    saved = {s: signal.signal(s, server.on_signal) for s in SIGNALS}
    try:
        server.run()
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)
    return server.exit_code()
