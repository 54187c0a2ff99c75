"""Progress on stderr for the export's long steps: a tqdm bar when stderr is a terminal and
tqdm is installed (the llama extra), nothing otherwise (logs and pipes stay clean)."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")


def progress(items: Iterable[T], desc: str, *, unit: str = "it") -> Iterator[T]:
    """items, unchanged; shown as a bar named desc while they are consumed."""
    if sys.stderr.isatty():
        try:
            from tqdm import tqdm
        except ImportError:
            pass
        else:
            yield from tqdm(items, desc=desc, unit=unit, file=sys.stderr, leave=False)
            return
    yield from items
