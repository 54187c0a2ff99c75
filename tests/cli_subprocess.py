"""`python -m edgespec ...` as a user runs it, for the hostile-input suite: a separate process
(a native abort kills it, not the test run), bounded memory (RLIMIT_AS) and time (a hang
fails the test instead of blocking it), and a check that nothing was written outside
$EDGESPEC_HOME (the working folder stays empty, the model folder unchanged)."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

MEMORY_LIMIT = 6 << 30  # address space: a hostile input that tries to allocate more fails
HANG_LIMIT_S = 300  # not a timing assertion: a process still running then is hung


@dataclass
class Done:
    returncode: int
    stdout: str
    stderr: str

    def error_line(self) -> str:
        """The one `edgespec: error:` line, its prefix removed; asserts there is exactly one,
        no traceback and exit status 2."""
        assert self.returncode == 2, (self.returncode, self.stderr)
        assert "Traceback" not in self.stderr, self.stderr
        errors = [line for line in self.stderr.splitlines() if line.startswith("edgespec: error:")]
        assert len(errors) == 1, self.stderr
        return errors[0].removeprefix("edgespec: error: ")

    def warnings(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.startswith("WARNING ")]


def limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in folder.rglob("*")
        if p.is_file()
    }


def run_edgespec(
    tmp_path: Path,
    *argv: str | bytes,
    models: Path | None = None,
    stdout=subprocess.PIPE,
    env: dict[str, str] | None = None,
) -> Done:
    """Run the CLI with $EDGESPEC_HOME = tmp_path/home, in an empty tmp_path/cwd; assert it
    was not killed by a signal (a native abort) and wrote nothing outside the home."""
    home, cwd = tmp_path / "home", tmp_path / "cwd"
    cwd.mkdir(exist_ok=True)
    before = snapshot(models) if models else {}
    repo = Path(__file__).resolve().parent.parent
    # the caller's PYTHONPATH first (scripts/mutants.py puts its mutated copy there)
    path = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    environment = {
        **os.environ,
        "EDGESPEC_HOME": str(home),
        "PYTHONPATH": os.pathsep.join([*path, str(repo)]),
        **(env or {}),
    }
    done = subprocess.run(
        [sys.executable, "-m", "edgespec", *argv],
        cwd=cwd,
        env=environment,
        stdout=stdout,
        stderr=subprocess.PIPE,
        preexec_fn=limit_memory,
        timeout=HANG_LIMIT_S,
    )
    out = done.stdout.decode("utf-8", "replace") if done.stdout else ""
    result = Done(done.returncode, out, done.stderr.decode("utf-8", "replace"))
    assert done.returncode >= 0 and done.returncode != 134, f"killed: {result.stderr[-2000:]}"
    assert "GGML_ASSERT" not in result.stderr and "Segmentation" not in result.stderr
    assert not any(cwd.iterdir()), f"wrote into the working folder: {list(cwd.iterdir())}"
    if models:
        assert snapshot(models) == before, "changed the model folder"
    return result
