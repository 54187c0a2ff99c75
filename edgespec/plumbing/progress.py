"""Progress on stderr for anything that takes more than a few seconds (export, calibration,
bench): a tqdm bar when stderr is a terminal and tqdm is installed (the llama extra), nothing
otherwise, so logs and pipes stay clean. tqdm is imported only when a bar is shown."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")
log = logging.getLogger(__name__)


def announce(line: str) -> None:
    """One line on stderr before a slow step, for the person at a terminal (the bar that follows
    says how far it is); logged at info level otherwise, so logs and pipes stay clean."""
    if sys.stderr.isatty():
        print(f"edgespec: {line}", file=sys.stderr, flush=True)
    else:
        log.info("%s", line)


def progress(
    items: Iterable[T], desc: str, *, unit: str = "it", total: int | None = None
) -> Iterator[T]:
    """items, unchanged; shown as a bar named desc while they are consumed (total: their
    count, where items is an iterator that cannot say)."""
    if sys.stderr.isatty():
        try:
            from tqdm import tqdm
        except ImportError:
            pass
        else:
            bar = tqdm(items, desc=desc, unit=unit, total=total, file=sys.stderr, leave=False)
            yield from bar
            return
    yield from items
