"""What the adaptive controller learned of its drafters' acceptance, kept between processes.

A process's first request starts every drafter from its priors: that is every `edgespec
run`, where prompt lookup learns code's long copies and a draft model is tried afresh each
time (bench/replay.py --fresh: code 1-7% slower than a request after others). The store
keeps, per pair of models, runtime and device (calibrate.tune_key, as the tune store), each
drafter's outcomes (Acceptance.outcomes), how many tokens verify passes judged and a draft's
first token's price relative to its others', so that the next process starts where the last
left off.

Counts are capped (KEPT_OUTCOMES, scaled down alike), so older outcomes weigh less as new
ones come and a store never stiffens; each request's own moving average still follows its
text. A store that is unreadable, corrupt or too large is ignored with a warning (the
drafters start from their priors) and written afresh; one that cannot be written is
reported once and skipped.
"""

from __future__ import annotations

import atexit
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from edgespec.plumbing.paths import edgespec_home, read_store, write_store

log = logging.getLogger(__name__)

LESSONS_VERSION = 1
# outcomes kept per count: a count past it is scaled down with its kept ones (a moving
# memory of the last few thousand tokens judged)
KEPT_OUTCOMES = 2000
# seconds between writes of a long-lived process (a server): its first request's lessons
# are written at once (one `edgespec run`), later ones at most this often
WRITE_EVERY_S = 30.0
STORE_MAX_BYTES = 4 << 20  # hundreds of pairs; a larger file is not ours
STORE_MAX_PAIRS = 256  # the most recently written kept
MAX_RATIO = 100.0  # a first token's price over the others', either way
MAX_COUNTS = 64  # outcome counts a drafter keeps (a draft model 3, prompt lookup one a length)


@dataclass(frozen=True)
class Lesson:
    """What earlier processes taught of one drafter."""

    judged: int  # drafted tokens verify passes judged (AdaptivePolicy's trial counts them)
    outcomes: dict[str, tuple[int, int]]  # Acceptance.outcomes, capped
    # a draft's first token's price over its later tokens' (None: not learned), which the
    # calibration does not measure: priced as the others, a draft model whose first token
    # costs twice the others drafted where that first token made it lose. A
    # ratio, not seconds: a price learned on a busy or throttled device, kept, would price
    # the draft model out of every later run, where it is never observed again
    first_ratio: float | None = None


def lessons_path() -> Path:
    return edgespec_home() / "lessons.json"


class LessonStore:
    """The lessons of one pair of models on one runtime and device (`key`)."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.written_at: float | None = None  # monotonic seconds of this process's last write
        self.failed = False  # a write failed: reported once, not retried
        # lessons kept since the last write (a server's last 30 s), written at exit (flush)
        self.pending: dict[str, Lesson] | None = None

    def recall(self) -> dict[str, Lesson]:
        """The stored lessons by drafter name ({} where none, or where they cannot be read)."""
        entry = read_lessons().get(self.key)
        if entry is None:
            return {}
        try:
            return parse_entry(entry)
        except ValueError as e:
            log.warning(
                "ignoring the lessons stored in %s for these models (%s); the drafters start "
                "from their priors",
                lessons_path(),
                e,
            )
            return {}

    def keep(self, lessons: dict[str, Lesson], *, force: bool = False) -> None:
        """Store lessons (written whole, atomically) unless the last write was under
        WRITE_EVERY_S ago (force: whatever the time); those are written by the next write,
        or as the process exits (flush)."""
        now = time.monotonic()
        due = self.written_at is None or now - self.written_at >= WRITE_EVERY_S
        if self.failed:
            return
        if not (due or force):
            if self.pending is None:
                atexit.register(self.flush)
            self.pending = lessons
            return
        if self.pending is not None:
            atexit.unregister(self.flush)
        self.written_at, self.pending = now, None
        store = read_lessons()
        store[self.key] = {"version": LESSONS_VERSION, "time": time.time(),
                           "drafters": {name: entry_of(lesson)
                                        for name, lesson in lessons.items()}}  # fmt: skip
        newest = sorted(store, key=lambda k: entry_time(store[k]), reverse=True)
        store = {k: store[k] for k in newest[:STORE_MAX_PAIRS]}
        path = lessons_path()
        try:
            write_store(path, store)
        except OSError as e:
            self.failed = True
            log.warning("cannot store what the drafters learned in %s (%s)", path, e)

    def flush(self) -> None:
        """Write the lessons kept since the last write, if any (at exit: a server stopped)."""
        if self.pending is not None:
            self.keep(self.pending, force=True)


def entry_of(lesson: Lesson) -> dict:
    outcomes = {name: list(capped(*counts)) for name, counts in lesson.outcomes.items()}
    entry: dict[str, object] = {"judged": lesson.judged, "outcomes": outcomes}
    if lesson.first_ratio is not None:  # within what parse_lesson takes back
        entry["first_ratio"] = min(max(lesson.first_ratio, 1 / MAX_RATIO), MAX_RATIO)
    return entry


def capped(kept: int, judged: int) -> tuple[int, int]:
    """(kept, judged) scaled down to at most KEPT_OUTCOMES judged, the rate kept."""
    if judged <= KEPT_OUTCOMES:
        return kept, judged
    return round(kept * KEPT_OUTCOMES / judged), KEPT_OUTCOMES


def entry_time(entry: object) -> float:
    """When an entry was written (0 for one that does not say)."""
    t = entry.get("time") if isinstance(entry, dict) else None
    return float(t) if isinstance(t, (int, float)) and not isinstance(t, bool) else 0.0


def parse_entry(entry: object) -> dict[str, Lesson]:
    """A stored entry's lessons; ValueError naming what is wrong with it."""
    if not isinstance(entry, dict) or entry.get("version") != LESSONS_VERSION:
        raise ValueError(f"not a version {LESSONS_VERSION} entry")
    drafters = entry.get("drafters")
    if not isinstance(drafters, dict):
        raise ValueError("drafters is not an object")
    return {name: parse_lesson(name, lesson) for name, lesson in drafters.items()}


def parse_lesson(name: str, lesson: object) -> Lesson:
    if not isinstance(lesson, dict) or not is_count(lesson.get("judged")):
        raise ValueError(f"{name}: judged is not a count")
    outcomes = lesson.get("outcomes")
    if not isinstance(outcomes, dict):
        raise ValueError(f"{name}: outcomes is not an object")
    if len(outcomes) > MAX_COUNTS:
        raise ValueError(f"{name}: more than {MAX_COUNTS} outcome counts")
    parsed = {}
    for key, counts in outcomes.items():
        ok = isinstance(counts, list) and len(counts) == 2 and all(map(is_count, counts))
        if not ok or not counts[0] <= counts[1] <= KEPT_OUTCOMES:
            raise ValueError(
                f"{name}: outcomes[{key!r}] is not [kept, judged] with kept <= judged <= "
                f"{KEPT_OUTCOMES}"
            )
        parsed[key] = (counts[0], counts[1])
    ratio = lesson.get("first_ratio")
    if ratio is not None and not is_ratio(ratio):
        raise ValueError(f"{name}: first_ratio is not a number from {1 / MAX_RATIO} to {MAX_RATIO}")
    return Lesson(lesson["judged"], parsed, ratio)


def is_ratio(x: object) -> bool:
    if not isinstance(x, (int, float)) or isinstance(x, bool):
        return False
    return 1 / MAX_RATIO <= x <= MAX_RATIO  # NaN fails


def is_count(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def read_lessons() -> dict:
    """Every pair's stored lessons by key; {} (with a warning, once) where the file is
    unreadable, corrupt or too large: it is written afresh."""
    path = lessons_path()
    try:
        return read_store(path, STORE_MAX_BYTES)
    except ValueError as e:
        if path not in _warned:
            _warned.add(path)
            log.warning(
                "ignoring the lessons store %s: it %s; the drafters start from their priors",
                path,
                e,
            )
        return {}


_warned: set[Path] = set()
