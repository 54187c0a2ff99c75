"""`edgespec serve` stopped by real signals, as many as a user sends: the first shuts down after
the requests in flight, the next drops them, later ones change nothing; no traceback (a second
Ctrl-C printed asyncio's CancelledError), exit 130 after Ctrl-C and 143 after SIGTERM, and
nothing written."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from edgespec.server.shutdown import SHUTTING_DOWN
from tests.hostile_cli import HANG_GUARD_S, Outcome, assert_clean, cli_env

SERVING = "edgespec: serving tiny-target on http://127.0.0.1:"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(target: Path, tmp_path: Path) -> tuple[subprocess.Popen, int]:
    """The server as a user starts it; returns once it says it serves."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    port = free_port()
    argv = ["serve", "--target", str(target), "--drafter", "none", "--port", str(port),
            "--request-timeout", str(HANG_GUARD_S)]  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "edgespec", *argv], cwd=cwd, env=cli_env(tmp_path / "h"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    guard = threading.Timer(HANG_GUARD_S, proc.kill)  # a hang guard: a blocked read ends
    guard.daemon = True
    guard.start()
    assert read_line(proc).startswith(SERVING)
    return proc, port


def read_line(proc: subprocess.Popen) -> str:
    assert proc.stderr is not None
    return proc.stderr.readline().rstrip("\n")


def hold_a_request(port: int) -> socket.socket:
    """A request whose body never comes: uvicorn's graceful shutdown waits for it. The
    server's 100 Continue says the app is reading the body, so the request is in flight."""
    conn = socket.create_connection(("127.0.0.1", port), timeout=HANG_GUARD_S)
    conn.sendall(
        b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
        b"\r\nContent-Length: 100\r\nExpect: 100-continue\r\n\r\n"
    )
    assert conn.recv(100).startswith(b"HTTP/1.1 100 ")
    conn.sendall(b'{"prompt": "hi", ')
    return conn


def finish(proc: subprocess.Popen) -> Outcome:
    try:
        out, err = proc.communicate(timeout=HANG_GUARD_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError("still serving long after the signals") from None
    return Outcome(proc.returncode, out, err)


@pytest.mark.parametrize(
    "first, then, code",
    [
        (signal.SIGINT, signal.SIGINT, 130),
        (signal.SIGINT, signal.SIGTERM, 130),
        (signal.SIGTERM, signal.SIGINT, 143),
    ],
)
def test_a_second_signal_drops_the_request_in_flight(tiny_pair, tmp_path, first, then, code):
    proc, port = start_server(tiny_pair[0], tmp_path)
    conn = hold_a_request(port)
    proc.send_signal(first)
    assert read_line(proc) == SHUTTING_DOWN
    assert proc.poll() is None  # still waiting for the request in flight
    proc.send_signal(then)
    proc.send_signal(then)  # and a third: nothing more to do
    o = finish(proc)
    assert conn.recv(100) == b""  # dropped: no answer
    conn.close()
    assert_clean(o)
    assert "CancelledError" not in o.err
    assert (o.code, o.err) == (code, "")
    assert list((tmp_path / "cwd").iterdir()) == []


def test_signals_back_to_back_stop_an_idle_server(tiny_pair, tmp_path):
    proc, _ = start_server(tiny_pair[0], tmp_path)
    for _ in range(3):
        proc.send_signal(signal.SIGINT)
    o = finish(proc)
    assert_clean(o)
    assert "CancelledError" not in o.err
    assert (o.code, o.err) == (130, SHUTTING_DOWN + "\n")
