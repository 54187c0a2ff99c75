"""ONNX Runtime's intra-op thread pools: a pool per session whose idle workers sleep after
SPIN_US, or the process's one shared pool where the installed ONNX Runtime cannot bound the
spinning (or the shared pool already exists: ONNX Runtime then refuses any other)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

log = logging.getLogger(__name__)

# an idle worker spins this long, then sleeps: awake between a pass's kernels, not beyond
SPIN_US = 50
SPIN_US_SINCE = (1, 26)  # session.intra_op.spin_duration_us appeared in ONNX Runtime 1.26


@dataclass(frozen=True, kw_only=True)
class ThreadPool:
    """Where a session's intra-op threads run and how they wait between tasks.

    shared: the process's one pool, which ONNX Runtime makes once with the first session's
    thread count and which spins by its own count; otherwise a pool of the session's own,
    spinning at most spin_us microseconds (0: never; None: ONNX Runtime's count)."""

    shared: bool = False
    spin_us: int | None = SPIN_US

    def __post_init__(self) -> None:
        if self.shared and self.spin_us is not None:
            raise ValueError("the shared pool spins by ONNX Runtime's count: give spin_us=None")
        if self.spin_us is not None and self.spin_us < 0:
            raise ValueError(f"spin_us must be 0 or more, not {self.spin_us}")


SHARED_POOL = ThreadPool(shared=True, spin_us=None)


def default_pool() -> ThreadPool:
    """A pool of the session's own with bounded spinning, where ONNX Runtime can bound it and
    this process has not made the shared pool (ONNX Runtime then refuses any other)."""
    if _shared_pool_threads or not spin_can_be_bounded():
        return SHARED_POOL
    return ThreadPool()


def thread_pool_status() -> str:
    """What `doctor` says of the pool edgespec's sessions would take in a new process."""
    import onnxruntime as ort

    if not spin_can_be_bounded():
        return (
            f"one shared pool, its idle workers spinning for milliseconds: onnxruntime "
            f"{ort.__version__} cannot bound that, and beside other work they lose their cores; "
            f"onnxruntime 1.26+ lets them sleep after {SPIN_US} us: pip install -U onnxruntime"
        )
    return f"a pool per model, its idle workers asleep after {SPIN_US} us"


def spin_can_be_bounded() -> bool:
    """Whether the installed ONNX Runtime takes session.intra_op.spin_duration_us (older ones
    accept the key and spin by their own count)."""
    import onnxruntime as ort

    major, minor = (ort.__version__.split(".") + ["0"])[:2]
    version = int(major), int("".join(c for c in minor if c.isdigit()) or 0)
    return version >= SPIN_US_SINCE


def configure_threads(opts, pool: ThreadPool, n_threads: int) -> None:
    """Put the session (its SessionOptions) on the pool."""
    if pool.shared and use_shared_thread_pool(n_threads):
        opts.use_per_session_threads = False
    else:
        opts.intra_op_num_threads = n_threads
        opts.inter_op_num_threads = 1
        spin = "0" if pool.spin_us == 0 else "1"
        opts.add_session_config_entry("session.intra_op.allow_spinning", spin)
        opts.add_session_config_entry("session.inter_op.allow_spinning", spin)
        if pool.spin_us:
            opts.add_session_config_entry("session.intra_op.spin_duration_us", str(pool.spin_us))


_shared_pool_threads: int | None = None  # the process-wide pool's size, once made


def use_shared_thread_pool(n_threads: int) -> bool:
    """The process's one intra-op thread pool (ThreadPool.shared), made on first use.

    ONNX Runtime sizes that pool once per process (the first runtime's n_threads wins) and
    refuses a session a pool of its own once it exists."""
    global _shared_pool_threads
    if _shared_pool_threads is None:
        from onnxruntime.capi._pybind_state import set_global_thread_pool_sizes

        try:
            set_global_thread_pool_sizes(n_threads, 1)
        except Exception as e:  # noqa: BLE001 - e.g. another library made the pool first
            log.info("no shared ONNX Runtime thread pool (%s); one pool per session", e)
            _shared_pool_threads = 0
            return False
        _shared_pool_threads = n_threads
    elif n_threads != _shared_pool_threads:
        log.info("the shared thread pool has %d threads, not %d", _shared_pool_threads, n_threads)
    return _shared_pool_threads > 0
