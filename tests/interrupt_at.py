"""`python -m tests.interrupt_at POINT ARGS...`: the CLI, with SIGINT sent to itself at one
point inside llama.cpp, where a Ctrl-C used to be swallowed:

- load: from inside llama.cpp's log callback, at the model loader's first line;
- decode: from inside llama_decode (its abort callback) at the third decode.

POINT:TERM sends SIGTERM instead.

The signal is real and reaches the real handlers; only the moment is chosen here.
"""

from __future__ import annotations

import collections
import ctypes
import os
import signal
import sys

from edgespec.app.cli import main
from edgespec.runtimes import llama_library, llamacpp

SIGNAL = signal.SIGINT  # or SIGTERM: POINT:TERM


def signal_self() -> None:
    os.kill(os.getpid(), SIGNAL)


class SignalAtLine(collections.deque):
    """llama.cpp's recent-log buffer, signalling at the first line holding marker."""

    def __init__(self, marker: str) -> None:
        super().__init__(maxlen=20)
        self.marker, self.fired = marker, False

    def append(self, line: str) -> None:
        super().append(line)
        if not self.fired and self.marker in line:
            self.fired = True
            signal_self()


def signal_in_decode(nth: int) -> None:
    """At the nth llama_decode, signal from inside it (ggml calls the abort callback while
    computing the graph); the callback never asks to abort."""
    new_context = llamacpp.LlamaCppRuntime.new_context
    calls = {"n": 0}

    @ctypes.CFUNCTYPE(ctypes.c_bool, ctypes.c_void_p)
    def on_abort_check(data) -> bool:
        if calls["n"] == nth:
            calls["n"] += 1
            signal_self()
        return False

    def with_callback(self):
        ctx = new_context(self)
        self.llama.llama_set_abort_callback(ctx, on_abort_check, None)
        return ctx

    decode = llamacpp.LlamaCppRuntime.decode

    def counted(self, tokens, **kw):
        calls["n"] += calls["n"] < nth
        return decode(self, tokens, **kw)

    llamacpp.LlamaCppRuntime.new_context = with_callback  # type: ignore[method-assign]
    llamacpp.LlamaCppRuntime.decode = counted  # type: ignore[method-assign]
    signal_in_decode.keep = on_abort_check  # type: ignore[attr-defined]


if __name__ == "__main__":
    point, *argv = sys.argv[1:]
    point, _, name = point.partition(":")
    SIGNAL = signal.SIGTERM if name == "TERM" else signal.SIGINT
    if point == "load":
        llama_library._recent_llama_log = SignalAtLine("llama_model_loader: loaded meta data")
    elif point == "decode":
        signal_in_decode(3)
    sys.exit(main(argv))
