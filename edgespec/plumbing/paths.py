"""Where edgespec keeps what it downloads and measures: $EDGESPEC_HOME, else the XDG cache."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from edgespec.plumbing.jsonfile import read_json_object


def edgespec_home() -> Path:
    """The folder; refused when it exists as something other than a folder."""
    if os.environ.get("EDGESPEC_HOME"):
        home = Path(os.environ["EDGESPEC_HOME"])
        where = "$EDGESPEC_HOME"
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        home = (Path(xdg) if xdg else Path.home() / ".cache") / "edgespec"
        where = "edgespec's cache folder"
    if home.exists() and not home.is_dir():
        from edgespec.errors import EdgespecError

        raise EdgespecError(
            f"{where} {home} is a file, not a folder; point EDGESPEC_HOME at a folder "
            "(or move the file away)"
        )
    return home


def read_store(path: Path, max_bytes: int) -> dict:
    """A store kept in the home (the tune store, the lessons): its JSON object, {} where
    nothing is at path; ValueError completing "it ..." with why it cannot be one (a FIFO, a
    device or a folder, over max_bytes, not UTF-8, not JSON, nested too deeply, not an
    object, unreadable)."""
    try:
        return read_json_object(path, max_bytes)
    except (FileNotFoundError, NotADirectoryError):  # nothing there (or a file above it)
        return {}
    except OSError as e:
        raise ValueError(f"cannot be read ({e.strerror or e})") from None


def write_store(path: Path, store: dict) -> None:
    """Write a store whole, atomically: a temporary file beside it (this process's), then
    renamed over it, so a reader sees the old store or the new one. OSError where it cannot
    be written (read-only, disk full); the temporary file is removed whatever stops the
    write (an interrupt included)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(store, indent=1))
        tmp.replace(path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise
