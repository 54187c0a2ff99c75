"""CPU threads for the back-ends: how many by default, how many a user may ask for, and how many
to use for the next pass, given the work other processes keep on this process's cores.

Why the last: llama.cpp's threads meet at a barrier after every op, so beside one busy process
on 2 cores, 2 threads keep only 18-31% of their quiet speed (one is descheduled, the other
waits for it), while 1 thread keeps 40-61% (docs/decisions.md). So a pass runs with a thread
fewer for each core other work holds, and with every thread again once the cores are free.
Under --exact a token's logits do not depend on the count; with the default kernels they can
from 512 cached tokens on, a near-tie effect like a change of pass width (docs/exactness.md).
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
# How long a finding that niced work does (not) compete with us stands: it takes a scan of
# /proc's running tasks (about 1 ms for 80 threads), made only while niced time shows.
GROUP_SECONDS = 2.0


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
    """CPU time the given CPUs have spent running anything, from /proc/stat's per-CPU lines;
    time at nice > 0 only when count_nice (OtherWork decides whether niced work competes)."""
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
AUTOGROUP = Path("/proc/sys/kernel/sched_autogroup_enabled")


def sched_group(pid: int | str = "self") -> tuple[str, str] | None:
    """What the kernel shares CPU time between for this process: its cpu cgroup and, where
    autogroup scheduling is on, its autogroup (a session: another terminal's, a service's).
    Nice only orders threads inside one such group; None where /proc cannot tell. Processes
    whose pairs differ are taken to be in different groups, also where the kernel would not
    weigh them apart (a cgroup v2 tree without the cpu controller, autogroups outside the
    root cgroup): the safe side, where a niced job costs a thread, not our speed. The
    autogroup of init's session, which the kernel leaves unnamed, reads as ""."""
    try:
        cgroup = cpu_cgroup(Path(f"/proc/{pid}/cgroup").read_text())
        autogroup = ""
        if autogroup_enabled():
            autogroup = Path(f"/proc/{pid}/autogroup").read_text().split(" ")[0]
    except OSError:  # the process ended, or no such files here
        return None
    return cgroup, autogroup


def autogroup_enabled() -> bool | None:
    """Whether the kernel schedules each session as one group (None: no such setting)."""
    try:
        return AUTOGROUP.read_text().strip() == "1"
    except OSError:
        return None


def cpu_cgroup(cgroup_text: str) -> str:
    """The cgroup path that sets a process's CPU share: cgroup v1's cpu controller line,
    else v2's unified one ("0::/path")."""
    unified = ""
    for line in cgroup_text.splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(","):
            return path
        if controllers == "":
            unified = path
    return unified


def yields_to_us(pid: int, ours: tuple[str, str] | None) -> bool:
    """Whether a niced process's threads yield their cores to ours: only inside our own
    scheduling group. A niced loop started from another terminal gets its session's full
    share (where autogroup scheduling is on, as in many distributions' kernels), and beside
    it two llama.cpp threads kept 2-8% of their speed (docs/decisions.md). Where
    either group cannot be read, it is taken to compete: a thread fewer costs far less than
    a collapse."""
    return ours is not None and sched_group(pid) == ours


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


def others_running_competing(
    limit: int,
    running: Iterable[tuple[int, int]] | None = None,
    yields: Callable[[int], bool] | None = None,
) -> int:
    """Threads of other processes running now that compete for our cores, counted up to
    `limit` (the scan stops there): those at nice <= 0, and niced ones outside our scheduling
    group (yields_to_us). /proc/stat's procs_running counts niced ones of our own group too,
    which yield their core to us: beside such a loop, reading it after each prefill put
    llama.cpp at one thread for the next pass (4 of 49 passes: docs/decisions.md).
    `running`: the (pid, nice) pairs to count instead of /proc's; `yields`: whether a
    niced pid yields (default: yields_to_us against this process's group)."""
    if yields is None:
        ours = sched_group()
        yields = lambda pid: yields_to_us(pid, ours)  # noqa: E731
    found = 0
    for pid, nice in others_running_niceness() if running is None else running:
        found += nice <= 0 or not yields(pid)
        if found >= limit:
            break
    return found


def niced_work_competes() -> bool:
    """Whether a thread of another process running niced now is outside our scheduling group
    (and so takes its share of the cores from us)."""
    ours = sched_group()
    return any(nice > 0 and not yields_to_us(pid, ours) for pid, nice in others_running_niceness())


def read_proc_stat() -> str | None:
    try:
        return PROC_STAT.read_text()
    except OSError:  # not Linux, or /proc hidden
        return None


class OtherWork:
    """Cores other processes keep busy on this process's CPUs over the last window: the
    CPUs' busy time less this process's own CPU time, niced time counted where niced work
    competes with us (this process is niced too, or a niced thread runs outside its
    scheduling group: yields_to_us, re-checked at most once every GROUP_SECONDS while niced
    time shows). Re-measured at most once a window; between measurements the last figure
    stands, so asking costs a clock read. After a gap of more than STALE_SECONDS, the tasks
    running now other than this process's threads and niced ones that yield to us."""

    def __init__(
        self,
        cpus: Collection[int] | None = None,
        *,
        window: float = WINDOW_SECONDS,
        read_stat: Callable[[], str | None] = read_proc_stat,
        own_seconds: Callable[[], float] = time.process_time,
        own_running: Callable[[], int] = own_running_tasks,
        others_competing: Callable[[int], int] = others_running_competing,
        niced_competes: Callable[[], bool] = niced_work_competes,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cpus = frozenset(cpus) if cpus is not None else usable_cpus()
        self.window = window
        self.read_stat, self.own_seconds, self.clock = read_stat, own_seconds, clock
        self.own_running, self.others_competing = own_running, others_competing
        self.niced_competes = niced_competes
        self.count_nice = niceness() > 0
        self.niced_checked: tuple[float, bool] | None = None  # (clock, verdict)
        self.figure = 0.0
        self.last = self.sample() if self.cpus else None  # (clock, busy, niced, own, running)

    @property
    def available(self) -> bool:
        """Whether other work can be measured here (a /proc/stat and a CPU affinity)."""
        return self.last is not None

    def sample(self) -> tuple[float, float, float, float, int] | None:
        text = self.read_stat()
        if text is None:
            return None
        busy = busy_seconds(text, self.cpus, count_nice=False)
        niced = busy_seconds(text, self.cpus, count_nice=True) - busy
        return self.clock(), busy, niced, self.own_seconds(), running_now(text)

    def niced_time_counts(self, niced_seconds: float) -> bool:
        """Whether the window's niced CPU time is other work that competes with us."""
        if self.count_nice:
            return True
        if niced_seconds <= 0:
            return False
        now = self.clock()
        if self.niced_checked is None or now - self.niced_checked[0] > GROUP_SECONDS:
            self.niced_checked = now, self.niced_competes()
        return self.niced_checked[1]

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
        (t0, busy0, niced0, own0, _), (t1, busy1, niced1, own1, running) = self.last, now
        if stale:
            ours = max(ours_before, self.own_running())
            others = max(0, running - ours)
            if others and not self.count_nice:  # niced ones of our group yield: scan for them
                others = self.others_competing(others)  # counts up to `others`
            self.figure = float(min(len(self.cpus), others))
        else:
            busy = busy1 - busy0
            if self.niced_time_counts(niced1 - niced0):
                busy += niced1 - niced0
            self.figure = max(0.0, busy - (own1 - own0)) / (t1 - t0)
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
