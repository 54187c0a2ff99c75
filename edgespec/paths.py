"""Where edgespec keeps what it downloads and measures: $EDGESPEC_HOME, else the XDG cache."""

from __future__ import annotations

import os
from pathlib import Path


def edgespec_home() -> Path:
    if os.environ.get("EDGESPEC_HOME"):
        return Path(os.environ["EDGESPEC_HOME"])
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "edgespec"
