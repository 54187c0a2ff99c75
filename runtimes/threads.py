"""CPU threads for the back-ends: how many by default, how many a user may ask for, and how many
to use for the next pass, given the work other processes keep on this process's cores.

Why the last: llama.cpp's threads meet at a barrier after every op, so beside one busy process
on 2 cores, 2 threads keep only 18-31% of their quiet speed (one is descheduled, the other
waits for it), while 1 thread keeps 40-61% (docs/benchmarks.md, bench/load.py). So a pass
runs with a thread fewer for each core other work holds, and with every thread again once the
cores are free. Under --exact a token's logits do not depend on the count; with the default
kernels they can from 512 cached tokens on, a near-tie effect like a change of pass width
(docs/exactness.md).
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Collection, Iterable, Iterator
from pathlib import Path

PROC_STAT = Path("/proc/stat")
# How often other work is re-measured: /proc/stat counts in clock ticks (10 ms), so a shorter
# window reads mostly rounding; a longer one reacts later to a job that starts or stops.
WINDOW_SECONDS = 0.25
# An average over a longer gap (between requests) says little about now: then the processes
# running at this instant stand in for it (a request's first pass is its prefill).
STALE_SECONDS = 1.0


def usable_cores() -> int:
    """Cores this process may run on (its affinity, as a container or taskset sets it)."""
    return len(usable_cpus()) or os.cpu_count() or 1


def usable_cpus() -> frozenset[int]:
    try:
        return frozenset(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return frozenset()


def default_threads() -> int:
    return max(1, min(usable_cores(), 8))


def bounded_threads(n_threads: int) -> int:
    """At least 1, at most the cores this process may run on (more only thrash: 10,000 would
    start 10,000 threads), with a warning when cut."""
    from edgespec.errors import EdgespecError

    if n_threads < 1:
        raise EdgespecError(
            f"--threads must be >= 1, got {n_threads}; leave it out for one per core (up to 8)"
        )
    cores = usable_cores()
    if n_threads > cores:
        logging.getLogger("edgespec").warning(
            "--threads %d is more than the %d CPU cores this process can use; using %d",
            n_threads, cores, cores,
        )  # fmt: skip
        return cores
    return n_threads


def busy_seconds(stat_text: str, cpus: Collection[int], count_nice: bool) -> float:
    """CPU time the given CPUs have spent running anything, from /proc/stat's per-CPU lines.

    Time at nice > 0 counts only when count_nice: a niced process yields its core to an
    un-niced one, so it takes nothing from us unless we are niced too."""
    ticks = 0
    for line in stat_text.splitlines():
        name, _, fields = line.partition(" ")
        if not (name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus):
            continue
        user, nice, system, _idle, _iowait, irq, softirq = (int(f) for f in fields.split()[:7])
        ticks += user + system + irq + softirq + (nice if count_nice else 0)
    return ticks / os.sysconf("SC_CLK_TCK")


def running_now(stat_text: str) -> int:
    """Tasks running or runnable at this instant, the reader included (/proc/stat)."""
    for line in stat_text.splitlines():
        if line.startswith("procs_running "):
            return int(line.split()[1])
    return 1


def task_fields(stat: bytes) -> list[bytes]:
    """A /proc task stat's fields from the state on ("pid (name) state ppid ..."): the name
    may hold spaces and parentheses, the fields after it not."""
    return stat[stat.rindex(b")") + 2 :].split()


def running_threads(task_folder: str) -> Iterator[list[bytes]]:
    """The fields (task_fields) of each thread under task_folder running or runnable now."""
    try:
        tasks = list(os.scandir(task_folder))
    except OSError:  # the process ended
        return
    for task in tasks:
        try:
            fields = task_fields(Path(task.path, "stat").read_bytes())
        except (OSError, ValueError):  # the thread ended
            continue
        if fields[0] == b"R":
            yield fields


def own_running_tasks() -> int:
    """This process's threads running or runnable now, the asking one included (at least 1):
    right after a pass, llama.cpp's workers still spin at their barrier, and they are ours."""
    return max(1, sum(1 for _ in running_threads("/proc/self/task")))


NICE_FIELD = 16  # in task_fields: field 19 of proc(5)'s stat, counted from the state (3)


def others_running_niceness() -> Iterator[tuple[int, int]]:
    """(pid, nice) of each thread of another process running or runnable now."""
    own = str(os.getpid())
    try:
        pids = [p.name for p in os.scandir("/proc") if p.name.isdigit() and p.name != own]
    except OSError:
        return
    for pid in pids:
        for fields in running_threads(f"/proc/{pid}/task"):
            yield int(pid), int(fields[NICE_FIELD])


def others_running_unniced(limit: int, running: Iterable[tuple[int, int]] | None = None) -> int:
    """Threads of other processes running now at nice <= 0, counted up to `limit` (the scan
    stops there). /proc/stat's procs_running counts niced ones too, which yield their core
    to us: beside a niced busy loop, reading it after each prefill put llama.cpp at one
    thread for the next pass (4 of 49 passes, docs/benchmarks.md). `running`: the (pid, nice)
    pairs to count instead of /proc's."""
    found = 0
    for _, nice in others_running_niceness() if running is None else running:
        found += nice <= 0
        if found >= limit:
            break
    return found


def read_proc_stat() -> str | None:
    try:
        return PROC_STAT.read_text()
    except OSError:  # not Linux, or /proc hidden
        return None


class OtherWork:
    """Cores other processes keep busy on this process's CPUs over the last window: the
    CPUs' busy time less this process's own CPU time. Re-measured at most once a window;
    between measurements the last figure stands, so asking costs a clock read. After a gap
    of more than STALE_SECONDS, the tasks running now other than this process's threads
    (and, unless this process is niced, other than niced ones)."""

    def __init__(
        self,
        cpus: Collection[int] | None = None,
        *,
        window: float = WINDOW_SECONDS,
        read_stat: Callable[[], str | None] = read_proc_stat,
        own_seconds: Callable[[], float] = time.process_time,
        own_running: Callable[[], int] = own_running_tasks,
        others_unniced: Callable[[int], int] = others_running_unniced,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cpus = frozenset(cpus) if cpus is not None else usable_cpus()
        self.window = window
        self.read_stat, self.own_seconds, self.clock = read_stat, own_seconds, clock
        self.own_running, self.others_unniced = own_running, others_unniced
        self.count_nice = niceness() > 0
        self.figure = 0.0
        self.last = self.sample() if self.cpus else None  # (clock, busy, own, running)

    @property
    def available(self) -> bool:
        """Whether other work can be measured here (a /proc/stat and a CPU affinity)."""
        return self.last is not None

    def sample(self) -> tuple[float, float, float, int] | None:
        text = self.read_stat()
        if text is None:
            return None
        busy = busy_seconds(text, self.cpus, self.count_nice)
        return self.clock(), busy, self.own_seconds(), running_now(text)

    def cores(self) -> float:
        """Cores held by other processes (0.0 where /proc/stat cannot be read)."""
        if self.last is None:  # not available
            return 0.0
        since = self.clock() - self.last[0]
        if since < self.window:
            return self.figure
        stale = since > STALE_SECONDS
        # our workers may stop spinning while /proc/stat is read: ours is the most seen
        ours_before = self.own_running() if stale else 0
        now = self.sample()
        if now is None:
            return self.figure
        (t0, busy0, own0, _), (t1, busy1, own1, running) = self.last, now
        if stale:
            ours = max(ours_before, self.own_running())
            others = max(0, running - ours)
            if others and not self.count_nice:  # niced ones yield to us: scan for them
                others = self.others_unniced(others)  # counts up to `others`
            self.figure = float(min(len(self.cpus), others))
        else:
            self.figure = max(0.0, (busy1 - busy0) - (own1 - own0)) / (t1 - t0)
        self.last = now
        return self.figure


def niceness() -> int:
    try:
        return os.getpriority(os.PRIO_PROCESS, 0)
    except (AttributeError, OSError):
        return 0


_other_work: OtherWork | None = None


def shared_other_work() -> OtherWork:
    """One measurement for the whole process: a target and its draft take turns on the same
    cores, so they see the same other work."""
    global _other_work
    if _other_work is None:
        _other_work = OtherWork()
    return _other_work


class LoadAwareThreads:
    """The threads for the next pass: n_max on a quiet machine, one fewer for each core that
    other work holds (rounded to the nearest core), never fewer than one."""

    def __init__(self, n_max: int, other_work: OtherWork | None = None) -> None:
        self.n_max = n_max
        self.other_work = other_work or shared_other_work()
        self.cores = len(self.other_work.cpus) or usable_cores()

    def now(self) -> int:
        free = self.cores - self.other_work.cores()
        return max(1, min(self.n_max, math.floor(free + 0.5)))
