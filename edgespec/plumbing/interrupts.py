"""Ctrl-C and SIGTERM that stop edgespec promptly, even inside llama.cpp.

Python runs a signal handler between bytecodes of the main thread. During a native call that
is inside whatever Python callback the library makes (llama.cpp's log, its load progress),
where an exception is printed and dropped ("Exception ignored on calling ctypes callback")
and the call runs to its end: Ctrl-C was swallowed. So install() sets handlers that, while a
native call runs (native_call()), only record the signal; callbacks that can stop their call
ask stop_requested(), and the call's wrapper raises the signal once the call returns:
KeyboardInterrupt for SIGINT (the CLI exits 130), SystemExit(143) for SIGTERM. Outside a
native call the signal is raised at once. A second signal while the first is being handled
is ignored, so cleanup (a staging folder's removal) is not cut short.

Library code that never calls install() keeps Python's own handlers; its callbacks still
catch a KeyboardInterrupt and record it (record()), so it is raised after the call.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

_depth = 0  # native calls in progress on the main thread
_pending: int | None = None  # the signal received and not yet raised
_raised = False  # one was raised: the process is stopping


def install() -> None:
    """Route SIGINT and SIGTERM through on_signal (main thread only; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        return
    reset()
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)


def on_signal(signum: int, frame: FrameType | None) -> None:
    if _raised or _pending is not None:
        return  # already stopping
    record(signum)
    if _depth == 0:
        raise_if_requested()


def record(signum: int = signal.SIGINT) -> None:
    """Note a signal to raise when the native call in progress returns."""
    global _pending
    if not _raised and _pending is None:
        _pending = signum


def stop_requested() -> bool:
    """For callbacks that can end their native call early (llama.cpp's load progress)."""
    return _pending is not None or _raised


def raise_if_requested() -> None:
    global _pending, _raised
    signum, _pending = _pending, None
    if signum is None:
        return
    _raised = True
    if signum == signal.SIGTERM:
        raise SystemExit(128 + signal.SIGTERM)
    raise KeyboardInterrupt


@contextmanager
def native_call() -> Iterator[None]:
    """Around a call into native code: a signal during it is raised when it returns. Only the
    main thread's calls count (signals are handled there); other threads run as they are."""
    global _depth
    if threading.get_ident() != threading.main_thread().ident:
        yield
        return
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
    if _depth == 0:
        raise_if_requested()


def reset() -> None:
    """Forget a handled signal (tests; a long-lived process that caught it)."""
    global _pending, _raised
    _pending, _raised = None, False
