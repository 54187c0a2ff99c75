"""Ctrl-C, SIGTERM and SIGKILL at the moments they used to be swallowed or leave litter: each
ends promptly with exit 130 (143 for SIGTERM) and no traceback, and an export leaves no
staging folder behind (SIGKILL's is swept by the next export), nor a full disk a riddle."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from edgespec.errors import EdgespecError
from edgespec.export import orchestrator
from edgespec.export.options import ExportOptions
from tests.hostile_cli import (
    HANG_GUARD_S,
    ROOT,
    Outcome,
    assert_clean,
    cli_env,
    error_line,
    run_cli,
)
from tests.tiny_gguf import TinyConfig, random_weights, vocabulary, write_gguf

RUN = ["--prompt", "hi", "--max-tokens", "200", "--k", "2", "--drafter", "ngram"]


def interrupted_at(point: str, args: list[str], home: Path, cwd: Path) -> Outcome:
    """The CLI with SIGINT sent from inside llama.cpp at point (tests/interrupt_at.py)."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.interrupt_at", point, *args],
        cwd=cwd, env=cli_env(home), capture_output=True, text=True, timeout=HANG_GUARD_S,
    )  # fmt: skip
    return Outcome(done.returncode, done.stdout, done.stderr)


@pytest.mark.parametrize(
    "point, code", [("load", 130), ("decode", 130), ("load:TERM", 143), ("decode:TERM", 143)]
)
def test_a_signal_inside_llama_cpp_stops_the_run(tiny_pair, tmp_path, point, code):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    o = interrupted_at(point, ["run", "--target", str(tiny_pair[0]), *RUN], tmp_path / "h", cwd)
    assert_clean(o)
    assert o.code == code, o.err
    assert o.err == ""
    assert "[length]" not in o.err  # stopped, not run to the end
    assert list(cwd.iterdir()) == []


@pytest.fixture(scope="module")
def medium_gguf(tmp_path_factory) -> Path:
    """A float GGUF big enough that quantizing it takes a moment (about 95 MB)."""
    cfg = TinyConfig(n_layer=8, n_embd=512, n_head=8, n_head_kv=4, n_ff=1408)
    n_vocab = len(vocabulary()[0])
    path = tmp_path_factory.mktemp("medium") / "medium.gguf"
    return write_gguf(path, cfg, random_weights(cfg, n_vocab, 0))


def export_args(source: Path, out: Path) -> list[str]:
    return ["export", "--target", str(source), "--out", str(out), "--target-quant", "q4_k_m",
            "--threads", "1"]  # fmt: skip


def staging_folders(parent: Path) -> list[Path]:
    return sorted(parent.glob(".*edgespec-staging-*"))


def quantizers_of(partial_dir: Path) -> list[int]:
    """Pids of quantizer children still writing into partial_dir (Linux: /proc)."""
    pids: list[int] = []
    if not Path("/proc/self").is_dir():
        return pids
    for proc in Path("/proc").iterdir():
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"edgespec.quant.gguf_quant" in cmd and any(str(partial_dir).encode() in c for c in cmd):
            pids.append(int(proc.name))
    return pids


def start_export_and_wait_for_quantizer(source: Path, out: Path, home: Path) -> tuple:
    """Start the export in its own session; return once llama.cpp's quantizer is writing."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "edgespec", *export_args(source, out)],
        cwd=out.parent, env=cli_env(home), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + HANG_GUARD_S
    while time.monotonic() < deadline:
        partial = list(out.parent.glob(".*edgespec-staging-*/bundle/*.partial"))
        if partial and partial[0].stat().st_size > 0:
            return proc, partial[0].parent
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.005)
    proc.kill()
    raise AssertionError("the quantizer never started")


def finish(proc: subprocess.Popen) -> Outcome:
    try:
        out, err = proc.communicate(timeout=HANG_GUARD_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError("still running long after the signal") from None
    return Outcome(proc.returncode, out, err)


def test_ctrl_c_during_quantization_stops_the_export_and_cleans_up(medium_gguf, tmp_path):
    out = tmp_path / "exports" / "b"
    out.parent.mkdir()
    proc, partial_dir = start_export_and_wait_for_quantizer(medium_gguf, out, tmp_path / "h")
    os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole process group
    o = finish(proc)
    assert_clean(o)
    assert o.code == 130, o.err
    assert o.err == ""
    assert sorted(out.parent.iterdir()) == []  # no bundle, no staging
    assert quantizers_of(partial_dir) == []


def test_sigterm_during_quantization_cleans_the_staging_folder(medium_gguf, tmp_path):
    out = tmp_path / "exports" / "b"
    out.parent.mkdir()
    proc, partial_dir = start_export_and_wait_for_quantizer(medium_gguf, out, tmp_path / "h")
    proc.send_signal(signal.SIGTERM)  # edgespec only: it must stop its quantizer itself
    o = finish(proc)
    assert_clean(o)
    assert o.code == 143, o.err
    assert sorted(out.parent.iterdir()) == []
    assert quantizers_of(partial_dir) == []


def test_sigkill_leaves_staging_that_the_next_export_sweeps(medium_gguf, tiny_pair, tmp_path):
    parent = tmp_path / "exports"
    parent.mkdir()
    proc, partial_dir = start_export_and_wait_for_quantizer(medium_gguf, parent / "b", tmp_path)
    proc.kill()
    proc.communicate()
    [stale] = staging_folders(parent)  # nothing can clean up after SIGKILL
    deadline = time.monotonic() + HANG_GUARD_S
    while quantizers_of(partial_dir) and time.monotonic() < deadline:
        time.sleep(0.05)  # the quantizer dies with its parent (PR_SET_PDEATHSIG)
    assert quantizers_of(partial_dir) == []
    in_use = parent / ".other.edgespec-staging-live"  # a live export's: kept
    in_use.mkdir()
    marker = {"pid": os.getpid(), "host": os.uname().nodename, "out": "x"}
    (in_use / orchestrator.STAGING_MARKER).write_text(json.dumps(marker))
    unmarked = parent / ".mine.edgespec-staging-user"  # not made by edgespec: kept
    unmarked.mkdir()

    o = run_cli(export_args(tiny_pair[0], parent / "c"), tmp_path / "h", parent)
    assert_clean(o)
    assert o.code == 0, o.err
    assert o.err == (
        f"WARNING edgespec.export.orchestrator: removed {stale}, left by an export (process "
        f"{proc.pid}) that did not finish\n"
    )
    assert sorted(p.name for p in parent.iterdir()) == sorted([in_use.name, unmarked.name, "c"])


def test_out_that_is_a_file_is_refused(tiny_pair, tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("keep")
    o = run_cli(export_args(tiny_pair[0], afile), tmp_path / "h", tmp_path)
    assert error_line(o) == f"--out {afile} is a file, not a folder; choose a new --out folder"
    assert afile.read_text() == "keep"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_out_under_a_file_is_refused(tiny_pair, tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("keep")
    o = run_cli(export_args(tiny_pair[0], afile / "sub" / "b"), tmp_path / "h", tmp_path)
    assert error_line(o) == (
        f"--out {afile / 'sub' / 'b'} is under {afile}, which is a file, not a folder; "
        "choose an --out folder elsewhere"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_a_full_disk_during_a_write_names_the_path_and_the_fix(tiny_pair, tmp_path, monkeypatch):
    def full(bundle):
        path = bundle.folder / "bundle.json"
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(orchestrator, "write_bundle", full)
    out = tmp_path / "b"
    opts = ExportOptions(target=tiny_pair[0], draft=None, out=out, target_quant="q8_0")
    with pytest.raises(EdgespecError) as e:
        orchestrator.export_bundle(opts)
    written = str(e.value).split(" writing ")[1].split(";")[0]  # in the random staging name
    assert written.startswith(str(tmp_path / ".b.edgespec-staging-"))
    assert str(e.value) == (
        f"no space left on device writing {written}; free some space on that disk or choose "
        "an --out folder on a disk with more room"
    )
    assert sorted(tmp_path.iterdir()) == []  # the staging folder is gone


def can_mount_tmpfs() -> bool:
    if not sys.platform.startswith("linux") or shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"],
        capture_output=True,
    )
    return probe.returncode == 0


@pytest.mark.skipif(not can_mount_tmpfs(), reason="needs a tmpfs mount (unshare -rm)")
def test_a_full_disk_during_quantization_says_no_space_left(tiny_pair, tmp_path):
    """A real full disk: a 64 KiB tmpfs (in a private mount namespace) under --out."""
    disk = tmp_path / "disk"
    disk.mkdir()
    out = disk / "b"
    script = (
        f"mount -t tmpfs -o size=64k tmpfs {disk} && cd {ROOT} && "
        f"{sys.executable} -m edgespec {' '.join(export_args(tiny_pair[0], out))}; "
        f"echo rc=$?; ls -A {disk}"
    )
    done = subprocess.run(
        ["unshare", "-rm", "sh", "-c", script], env=cli_env(tmp_path / "h"),
        capture_output=True, text=True, timeout=HANG_GUARD_S,
    )  # fmt: skip
    o = Outcome(2 if "rc=2" in done.stdout else -1, "", done.stderr)
    message = error_line(o)
    assert message.startswith(f"no space left on device writing {disk}/.b.edgespec-staging-")
    assert message.endswith(
        "/bundle/target.q4_k_m.gguf; free some space on that disk or choose an --out folder "
        "on a disk with more room"
    )
    assert done.stdout.strip() == "rc=2"  # and the tmpfs is empty: no staging left


@pytest.fixture
def handlers():
    """interrupts.install() for one test; Python's handlers put back after it."""
    from edgespec.plumbing import interrupts

    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    interrupts.install()
    yield interrupts
    interrupts.reset()
    for s, h in saved.items():
        signal.signal(s, h)


def test_a_signal_during_a_native_call_is_raised_when_it_returns(handlers):
    reached = []
    with pytest.raises(KeyboardInterrupt):
        with handlers.native_call():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.01)  # Python code ran: the handler has run, and only recorded it
            reached.append(handlers.stop_requested())
    assert reached == [True]
    os.kill(os.getpid(), signal.SIGINT)  # a second one while stopping: ignored
    time.sleep(0.01)


def test_sigterm_becomes_exit_143(handlers):
    with pytest.raises(SystemExit) as e:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1)
    assert e.value.code == 143


def test_a_worker_threads_native_call_does_not_hold_the_main_threads_signal(handlers):
    import threading

    hold = threading.Event()

    def worker():
        with handlers.native_call():
            hold.wait(HANG_GUARD_S)

    t = threading.Thread(target=worker)
    t.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
    finally:
        hold.set()
        t.join()


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="mounts a tmpfs")
def test_no_space_is_judged_while_the_partial_file_still_fills_the_disk(
    tiny_pair, tmp_path, monkeypatch
):
    """On a big disk the partial file is what filled it: once it is deleted there is room
    again, so the verdict must come before the deletion."""
    from edgespec.quant import gguf_quant

    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], check=True)
    try:
        real = shutil.disk_usage

        def big_once_emptied(path):  # a disk with 1 GiB free once no partial file is on it
            usage = real(path)
            if not list(Path(path).glob("*.partial")):
                return usage._replace(free=usage.free + (1 << 30))
            return usage

        monkeypatch.setattr(gguf_quant.shutil, "disk_usage", big_once_emptied)
        dst = disk / "t.q8_0.gguf"
        with pytest.raises(EdgespecError) as e:
            gguf_quant.quantize_gguf(tiny_pair[0], dst, "q8_0", threads=1)
        assert str(e.value) == (
            f"no space left on device writing {dst}; free some space on that disk or choose an "
            "--out folder on a disk with more room"
        )
        assert list(disk.iterdir()) == []
    finally:
        subprocess.run(["umount", str(disk)], check=True)
