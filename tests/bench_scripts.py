"""Import a bench/ script (not a package) as a module, for the tests of its parts."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]


def load_bench_script(relative: str, name: str) -> ModuleType:
    """bench/<relative> imported under `name` (registered, so dataclasses resolve it)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "bench" / relative)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
