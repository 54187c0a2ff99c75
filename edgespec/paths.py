"""Where edgespec keeps what it downloads and measures: $EDGESPEC_HOME, else the XDG cache."""

from __future__ import annotations

import os
from pathlib import Path


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
