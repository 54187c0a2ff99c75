"""Running the CLI as a hostile user would: a real subprocess, its outcome checked in full.

Every case asserts the exit status, the one error line (problem and fix), that no Python
traceback and no native abort reached stderr, that it ended within a generous bound (a hang
guard, not a speed test), and that nothing was written outside the places it may write.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

HANG_GUARD_S = 120  # generous: a case that needs this long is a hang, not a slow machine
ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Outcome:
    code: int
    out: str
    err: str


def cli_env(home: Path) -> dict[str, str]:
    # the caller's PYTHONPATH first (scripts/mutants.py puts its mutated copy there); the
    # repository root after it, for tests.interrupt_at
    path = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = dict(os.environ, EDGESPEC_HOME=str(home), PYTHONPATH=os.pathsep.join([*path, str(ROOT)]))
    env.pop("PYTHONWARNINGS", None)
    return env


def run_cli(args: list[str], home: Path, cwd: Path) -> Outcome:
    done = subprocess.run(
        [sys.executable, "-m", "edgespec", *args],
        cwd=cwd,
        env=cli_env(home),
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
    )
    return Outcome(done.returncode, done.stdout, done.stderr)


def assert_clean(o: Outcome) -> None:
    """No traceback, no native abort."""
    assert "Traceback" not in o.err, o.err
    assert "Exception ignored" not in o.err, o.err
    assert "GGML_ASSERT" not in o.err and o.code not in (-6, 134), o.err


def error_line(o: Outcome) -> str:
    """The one `edgespec: error:` line of a refused input (exit 2)."""
    assert_clean(o)
    assert o.code == 2, (o.code, o.err)
    lines = [line for line in o.err.strip().splitlines() if not line.startswith("WARNING")]
    assert len(lines) == 1, o.err
    assert lines[0].startswith("edgespec: error: "), o.err
    return lines[0].removeprefix("edgespec: error: ")


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """Every path under folder with its size and mtime: compare two to see what was written."""
    return {
        str(p.relative_to(folder)): (p.lstat().st_size, p.lstat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
    }
