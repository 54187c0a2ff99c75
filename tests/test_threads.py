"""Load-aware threads (runtimes/threads.py): what /proc/stat says, how often it is read, the
thread count it gives, and a real llama.cpp context that drops a thread beside busy processes,
takes it back when they stop, and computes the same logits at any thread count."""

from __future__ import annotations

import collections
import hashlib
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from edgespec.runtimes.threads import (
    LoadAwareThreads,
    OtherWork,
    autogroup_enabled,
    busy_seconds,
    cpu_cgroup,
    niced_work_competes,
    others_running_competing,
    others_running_niceness,
    own_running_tasks,
    sched_group,
    usable_cpus,
    yields_to_us,
)

TICK = 1 / 100  # SC_CLK_TCK on Linux
STAT = """cpu  900 90 300 5000 10 1 2 0 0 0
cpu0 {u0} {n0} 100 2500 5 1 1 0 0 0
cpu1 200 {n1} 50 2500 5 0 1 0 0 0
cpu2 7000 0 0 0 0 0 0 0 0 0
intr 12345
ctxt 99
"""


def stat(u0=100, n0=0, n1=0) -> str:
    return STAT.format(u0=u0, n0=n0, n1=n1)


def test_busy_time_counts_the_given_cpus_and_nice_only_when_asked(monkeypatch):
    monkeypatch.setattr("os.sysconf", lambda name: 100)
    # cpu0: user 100 + system 100 + irq 1 + softirq 1; cpu1: 200 + 50 + 0 + 1; cpu2 not ours
    assert busy_seconds(stat(), {0, 1}, count_nice=False) == pytest.approx(453 * TICK)
    assert busy_seconds(stat(n0=30, n1=20), {0, 1}, count_nice=False) == pytest.approx(4.53)
    assert busy_seconds(stat(n0=30, n1=20), {0, 1}, count_nice=True) == pytest.approx(5.03)
    assert busy_seconds(stat(), {1}, count_nice=False) == pytest.approx(2.51)


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def scripted_other_work(
    busy_ticks: list[int],
    own: list[float],
    clock: Clock,
    running: list[int] | None = None,
    ours_running: int = 1,
    competing: int | None = None,
    niced_ticks: list[int] | None = None,
    niced_competes: bool = False,
) -> OtherWork:
    """An OtherWork over cpu0 and cpu1 whose /proc/stat and own CPU time follow the scripts
    (niced_ticks: cpu1's nice column; niced_competes: what a scan of niced threads finds)."""
    reads = iter(busy_ticks)
    niced = iter(niced_ticks or [0] * len(busy_ticks))
    owns = iter(own)
    runs = iter(running or [1] * len(busy_ticks))
    work = OtherWork(
        {0, 1},
        window=0.25,
        read_stat=lambda: (
            f"cpu1 {next(reads)} {next(niced)} 0 0 0 0 0 0 0 0\nprocs_running {next(runs)}\n"
        ),
        own_seconds=lambda: next(owns),
        own_running=lambda: ours_running,
        # the scan of running tasks: `competing` of the others compete (default: all)
        others_competing=lambda limit: limit if competing is None else min(limit, competing),
        niced_competes=lambda: (work.scans.append(clock()), niced_competes)[1],
        clock=clock,
    )
    work.scans = []  # type: ignore[attr-defined]
    return work


def test_other_work_is_busy_time_less_our_own_and_read_once_a_window():
    clock = Clock()
    work = scripted_other_work([0, 50, 90], [0.0, 0.2, 0.2], clock)  # first read at start
    assert work.cores() == 0.0  # nothing measured yet
    clock.t += 0.5  # 0.5 s: 50 ticks busy, 0.2 s of them ours -> 0.3 s others = 0.6 cores
    assert work.cores() == pytest.approx(0.6)
    clock.t += 0.1  # inside the window: the figure stands, nothing is read
    assert work.cores() == pytest.approx(0.6)
    clock.t += 0.4  # 40 ticks in 0.5 s, none ours
    assert work.cores() == pytest.approx(0.8)


def test_after_a_long_gap_the_tasks_running_now_stand_in_for_the_average():
    clock = Clock()
    work = scripted_other_work([0, 300, 400, 400], [0.0] * 4, clock, running=[1, 1, 1, 4])
    clock.t += 3.0  # between requests: 3 s, a core busy for all of them, but one task now
    assert work.cores() == 0.0  # the reader alone runs now: nothing else
    clock.t += 0.5  # within the stale limit: the average again (100 ticks in 0.5 s)
    assert work.cores() == pytest.approx(2.0)
    clock.t += 1.5  # stale: four tasks run now, three besides us, on two cores
    assert work.cores() == 2.0


def cores_after_a_gap(running_now: int, niced: bool = False, **kwargs) -> float:
    """Other work as read after more than STALE_SECONDS, `running_now` tasks in /proc/stat
    (niced: as when this process is niced)."""
    clock = Clock()
    work = scripted_other_work([0, 100], [0.0, 1.0], clock, running=[1, running_now], **kwargs)
    work.count_nice = niced or work.count_nice
    clock.t += 1.5
    return work.cores()


def test_after_a_long_gap_our_own_running_threads_are_not_other_work():
    """After a prefill, llama.cpp's two workers still spin: four tasks run, two of them ours
    and the reader's thread among them -- two others, not three."""
    assert cores_after_a_gap(4, ours_running=2) == 2.0
    assert cores_after_a_gap(2, ours_running=2) == 0.0  # (the reader alone as ours: 1.0)


def test_after_a_long_gap_niced_tasks_of_our_group_running_now_are_not_other_work():
    """A niced busy loop of our scheduling group yields its core to us: procs_running counts
    it, the scan does not (unless we are niced too, when it takes its share from us)."""
    assert cores_after_a_gap(2, competing=0) == 0.0
    assert cores_after_a_gap(3, competing=1) == 1.0  # two others run now, one of them niced
    assert cores_after_a_gap(2, competing=0, niced=True) == 1.0


def test_niced_time_counts_only_where_niced_work_competes_and_the_finding_stands_a_while():
    clock = Clock()
    # a core's worth of niced time in every 0.5 s window (50 ticks), nothing else
    ticks = [0, 50, 100, 150, 200, 250, 300, 350]
    own = [0.0] * len(ticks)
    for competes, figure in ((False, 0.0), (True, 1.0)):
        work = scripted_other_work([0] * 8, own, clock, niced_ticks=ticks, niced_competes=competes)
        for _ in range(6):  # 3 s of windows: one scan, then another after GROUP_SECONDS
            clock.t += 0.5
            assert work.cores() == pytest.approx(figure)
        assert len(work.scans) == 2 and work.scans[1] - work.scans[0] > 2.0
    quiet = scripted_other_work([0, 50], [0.0, 0.5], clock)  # no niced time: no scan at all
    clock.t += 0.5
    assert quiet.cores() == 0.0 and quiet.scans == []
    ours_niced = scripted_other_work([0, 0], [0.0, 0.0], clock, niced_ticks=[0, 50])
    ours_niced.count_nice = True  # we are niced: niced time competes, nothing to scan
    clock.t += 0.5
    assert ours_niced.cores() == pytest.approx(1.0) and ours_niced.scans == []


def test_our_running_threads_are_counted_from_proc():
    """A thread of ours hashing (GIL released) runs beside the asking one."""
    if not Path("/proc/self/task").is_dir():
        pytest.skip("no /proc/self/task here")
    assert own_running_tasks() == 1  # the asker alone
    stop_at = time.monotonic() + 0.3
    data = bytes(1 << 22)

    def hash_until_stopped():
        while time.monotonic() < stop_at:
            hashlib.sha256(data).digest()

    worker = threading.Thread(target=hash_until_stopped)
    worker.start()
    try:
        seen = max(own_running_tasks() for _ in range(50))
    finally:
        worker.join()
    assert seen == 2


def test_our_own_time_never_makes_other_work_negative():
    clock = Clock()
    work = scripted_other_work([0, 10], [0.0, 0.5], clock)  # ticks lag the process clock
    clock.t += 0.5
    assert work.cores() == 0.0


def test_without_proc_stat_nothing_is_measured_and_every_thread_stays():
    work = OtherWork({0, 1}, read_stat=lambda: None)
    assert not work.available and work.cores() == 0.0
    assert LoadAwareThreads(2, work).now() == 2


class Fixed:
    def __init__(self, cores: float, cpus: int) -> None:
        self.figure, self.cpus = cores, frozenset(range(cpus))

    def cores(self) -> float:
        return self.figure


@pytest.mark.parametrize(
    ("cpus", "n_max", "others", "threads"),
    [
        (2, 2, 0.0, 2),
        (2, 2, 0.49, 2),  # a part-time job is not worth a thread
        (2, 2, 0.51, 1),
        (2, 2, 1.0, 1),
        (2, 2, 2.0, 1),  # never fewer than one
        (8, 8, 1.2, 7),
        (8, 8, 2.6, 5),
        (8, 8, 1.5, 7),  # half a core free counts as a core
        (8, 4, 1.0, 4),  # free cores beyond --threads change nothing
        (8, 4, 4.6, 3),
    ],
)
def test_a_thread_fewer_per_core_other_work_holds(cpus, n_max, others, threads):
    assert LoadAwareThreads(n_max, Fixed(others, cpus)).now() == threads  # type: ignore[arg-type]


# --- on the real machine ----------------------------------------------------------------------

BUSY = "import time\nend = time.monotonic() + 30\nwhile time.monotonic() < end:\n    pass\n"
NICED_BUSY = "import os\nos.nice(19)\n" + BUSY
needs_two_cores = pytest.mark.skipif(len(usable_cpus()) < 2, reason="needs 2 usable cores")


def busy_everywhere() -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in usable_cpus()]


def stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.kill()
        p.wait()


def test_the_scan_counts_tasks_at_nice_0_or_below_and_niced_ones_that_do_not_yield():
    running = [(10, 19), (11, 0), (12, -5), (13, 1), (14, 0)]
    assert others_running_competing(8, running, yields=lambda pid: True) == 3
    assert others_running_competing(8, running, yields=lambda pid: pid != 13) == 4
    assert others_running_competing(2, iter(running), yields=lambda pid: True) == 2


def test_the_cpu_share_is_set_by_the_cpu_cgroup_of_v1_or_else_v2():
    v1 = "12:pids:/a\n4:cpu,cpuacct:/system.slice/camera.service\n0::/user.slice\n"
    assert cpu_cgroup(v1) == "/system.slice/camera.service"
    assert cpu_cgroup("0::/user.slice/user-1000.slice/session-3.scope\n") == (
        "/user.slice/user-1000.slice/session-3.scope"
    )


def test_a_niced_process_yields_only_inside_our_group_and_unreadable_ones_compete(monkeypatch):
    groups = {1: ("/", "/autogroup-7"), 2: ("/", "/autogroup-9"), 3: ("/x", "/autogroup-7")}
    monkeypatch.setattr("edgespec.runtimes.threads.sched_group", lambda pid: groups.get(pid))
    ours = ("/", "/autogroup-7")
    assert yields_to_us(1, ours)
    assert not yields_to_us(2, ours)  # another session: its own share, whatever its nice
    assert not yields_to_us(3, ours)  # another cgroup
    assert not yields_to_us(4, ours)  # gone, or unreadable
    assert not yields_to_us(1, None)
    groups[5] = ("/", "")  # init's session, whose autogroup has no name
    assert yields_to_us(5, ("/", ""))
    assert not yields_to_us(1, ("/", ""))


def test_a_new_session_is_a_named_autogroup_apart_from_ours_and_a_child_shares_ours():
    skip_unless_autogroup()
    child = subprocess.Popen([sys.executable, "-c", BUSY])
    apart = subprocess.Popen([sys.executable, "-c", BUSY], start_new_session=True)
    try:
        new = sched_group(apart.pid)
        assert new is not None and new[1].startswith("/autogroup-")
        assert new != sched_group() == sched_group(child.pid)  # ours may be init's, unnamed
    finally:
        stop([child, apart])


def test_the_scan_reads_each_running_task_s_niceness_from_proc():
    if not Path("/proc/self/task").is_dir():
        pytest.skip("no /proc here")
    plain = subprocess.Popen([sys.executable, "-c", BUSY])
    niced = subprocess.Popen([sys.executable, "-c", NICED_BUSY])
    try:
        seen: dict[int, int] = {}
        end = time.monotonic() + 5.0  # until both loops run (niced: once it has set its nice)
        while time.monotonic() < end and (seen.get(niced.pid) != 19 or plain.pid not in seen):
            seen.update(others_running_niceness())
        assert (seen[plain.pid], seen[niced.pid]) == (0, 19)
        assert os.getpid() not in seen  # ours are counted apart (own_running_tasks)
    finally:
        stop([plain, niced])


def skip_unless_autogroup() -> None:
    if not autogroup_enabled():
        pytest.skip("autogroup scheduling is off here: sessions are not groups of their own")


def niced_loops(apart: bool) -> list[subprocess.Popen]:
    """A niced busy loop per core, in this session or each in a session of its own."""
    cmd = [sys.executable, "-c", NICED_BUSY]
    return [subprocess.Popen(cmd, start_new_session=apart) for _ in usable_cpus()]


def test_a_niced_loop_started_in_another_session_competes_and_one_in_ours_yields():
    skip_unless_autogroup()
    ours = sched_group()  # ("/", "") in init's session (as CI runs), whose autogroup has no name
    assert ours is not None
    same = subprocess.Popen([sys.executable, "-c", NICED_BUSY])
    apart = subprocess.Popen([sys.executable, "-c", NICED_BUSY], start_new_session=True)
    try:
        assert yields_to_us(same.pid, ours)
        assert not yields_to_us(apart.pid, ours)
        end = time.monotonic() + 5.0  # until the loop apart is seen running niced
        while time.monotonic() < end and not niced_work_competes():
            time.sleep(0.01)
        assert niced_work_competes() or time.monotonic() < end
    finally:
        stop([same, apart])


@needs_two_cores
@pytest.mark.parametrize("apart", [False, True])
def test_niced_loops_are_other_work_only_when_started_in_another_session(apart):
    skip_unless_autogroup()
    skip_unless_quiet()
    work = OtherWork(window=0.25)
    procs = niced_loops(apart)
    try:
        time.sleep(0.6)
        work.cores()
        time.sleep(0.3)
        if apart:  # each its session's full share: beside them two threads kept 2-8%
            assert work.cores() >= len(work.cpus) - 1
        else:  # they yield to us: every thread stays
            assert work.cores() < 0.5
    finally:
        stop(procs)


def skip_unless_quiet() -> None:
    """The quiet halves below need a machine where nothing else runs (CI's): measured while
    this process sleeps, so a bug in subtracting our own time cannot cause the skip."""
    work = OtherWork(window=0.25)
    time.sleep(0.5)
    if (others := work.cores()) >= 0.5:
        pytest.skip(f"other processes keep {others:.1f} cores busy: this test needs them idle")


@needs_two_cores
def test_busy_processes_count_as_other_work_and_our_own_spinning_does_not():
    skip_unless_quiet()
    work = OtherWork(window=0.25)
    end = time.monotonic() + 0.6
    while time.monotonic() < end:  # this process keeps a core busy: that is not other work
        work.cores()
    assert work.cores() < 0.5
    procs = busy_everywhere()
    try:
        time.sleep(0.6)
        assert work.cores() >= len(work.cpus) - 1  # a loop per core, this process idle
    finally:
        stop(procs)


def decode_for(runtime, seconds: float, token: int) -> None:
    """One-token passes for about `seconds` (the cache rolled back to where it began)."""
    start = runtime.n_past
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        runtime.forward([token])
        if runtime.n_past >= runtime.n_ctx - 1:
            runtime.rollback(start)
    runtime.rollback(start)


def quiet_passes(runtime, token: int, windows: int = 3) -> collections.Counter:
    """Passes per thread count over a 0.6 s window of one-token passes in which at least 90% ran
    at 2 threads, or the last of `windows` tries. The host's own jobs (in the full suite, a
    window in which 44% of passes found a core taken) are not ours to stop: a quiet window is
    retried, while a policy that drops a thread on a quiet host fails every try."""
    for _ in range(windows):
        runtime.threads_used.clear()
        decode_for(runtime, 0.6, token)
        used = runtime.threads_used
        if used[2] >= 0.9 * used.total():
            break
    return used


@needs_two_cores
def test_llama_cpp_drops_a_thread_beside_busy_cores_and_takes_it_back(tiny_pair):
    from edgespec.runtimes.llamacpp import LlamaCppRuntime

    skip_unless_quiet()
    runtime = LlamaCppRuntime(tiny_pair[0], n_ctx=256, n_threads=2)
    token = runtime.tokenize("hello", special=False)[0]
    # quiet: every pass at 2 threads, but for a window in which the host ran something (in
    # the full suite, once, one window of 0.25 s: a few passes of hundreds)
    used = quiet_passes(runtime, token)
    assert runtime.threads_now == 2 and used[2] >= 0.9 * used.total(), used
    procs = busy_everywhere()
    try:
        time.sleep(0.5)
        decode_for(runtime, 0.8, token)
        assert runtime.threads_now == 1
    finally:
        stop(procs)
    time.sleep(0.5)
    used = quiet_passes(runtime, token)
    assert runtime.threads_now == 2 and used[2] >= 0.9 * used.total(), used


class Stale:
    """A clock 2 s further on at every reading: every measurement follows a long gap."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        self.t += 2.0
        return self.t


@needs_two_cores
def test_llama_cpp_workers_spinning_after_a_pass_are_not_other_work(tiny_pair):
    """A request's first passes after its prefill (a gap over STALE_SECONDS) found the workers
    still spinning, counted them as other work, and ran at 1 thread of 2 (4 passes a request,
    each 1.7x slower, on the demo target)."""
    from edgespec.runtimes.llamacpp import LlamaCppRuntime

    skip_unless_quiet()
    runtime = LlamaCppRuntime(tiny_pair[0], n_ctx=256, n_threads=2)
    runtime.thread_policy = LoadAwareThreads(2, OtherWork(clock=Stale()))
    token = runtime.tokenize("hello", special=False)[0]
    # an instant's count also catches a kernel thread now and then (1-2% of readings here);
    # with our workers counted as others, every pass ran at 1 thread
    used = quiet_passes(runtime, token)
    assert used[2] >= 0.9 * used.total(), used


@needs_two_cores
def test_fixed_threads_stay_beside_busy_cores(tiny_pair):
    from edgespec.runtimes.llamacpp import LlamaCppRuntime

    runtime = LlamaCppRuntime(tiny_pair[0], n_ctx=256, n_threads=2, load_aware_threads=False)
    token = runtime.tokenize("hello", special=False)[0]
    procs = busy_everywhere()
    try:
        time.sleep(0.5)
        decode_for(runtime, 0.8, token)
    finally:
        stop(procs)
    assert set(runtime.threads_used) == {2}


def logits_at_thread_counts(runtime, tokens: list[int]) -> dict[int, tuple]:
    """After a 600-token prefix: six one-token passes and a verify pass of width 6, per count."""
    logits = {}
    for n in (2, 1):
        runtime.reset()
        runtime.n_threads = n
        runtime.forward(tokens[:600], last_only=True)
        one = np.concatenate([runtime.forward([t]) for t in tokens[600:606]])
        logits[n] = (one, runtime.forward(tokens[606:612]))
        assert runtime.threads_now == n
    return logits


@needs_two_cores
def test_under_exact_the_thread_count_moves_no_logit(demo_target_path):
    """Load-aware threads may change the count between any two passes. Under --exact that moves
    no logit, even from 512 cached tokens on, where the default kernels' one-token pass (flash
    attention's split-KV) sums in an order that depends on the count (up to 0.49 measured)."""
    from edgespec.backends import RuntimeOptions, open_runtime

    opts = RuntimeOptions(n_ctx=1024, n_threads=2, exact=True, load_aware_threads=False)
    runtime = open_runtime(demo_target_path, opts)
    assert runtime.batch_invariant  # and by default llama.cpp runs its fastest kernels:
    assert not open_runtime(demo_target_path, RuntimeOptions(n_ctx=64)).batch_invariant
    text = " ".join(f"item {i}: {i * i % 97} apples," for i in range(200))
    tokens = runtime.tokenize(text, special=False)[:612]
    assert len(tokens) == 612
    logits = logits_at_thread_counts(runtime, tokens)
    for two, one in zip(logits[2], logits[1], strict=True):
        assert np.array_equal(two, one)


def test_doctor_says_how_many_threads_llama_cpp_would_run_now(monkeypatch):
    import re

    from edgespec.app.doctor import cpu_threads_status
    from edgespec.runtimes.threads import default_threads

    status = cpu_threads_status()
    pattern = (
        rf"{len(usable_cpus())} usable cores, \d+\.\d busy with other work now: llama.cpp "
        rf"would run \d+ of its {default_threads()} threads \(a thread fewer per busy core; "
        r"--fixed-threads keeps them all\)"
    )
    assert re.fullmatch(pattern, status), status
    monkeypatch.setattr("edgespec.runtimes.threads.PROC_STAT", Path("/nonexistent/stat"))
    assert cpu_threads_status() == (
        f"{default_threads()} by default; other work unmeasured here (no /proc/stat)"
    )
