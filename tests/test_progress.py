"""Progress bars: on stderr when it is a terminal, nothing at all otherwise."""

from __future__ import annotations

import io
import sys

from edgespec.controller.calibrate import measure_curve
from edgespec.plumbing.progress import progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_passes_items_through_and_is_silent_off_a_terminal(capsys):
    assert list(progress(iter([3, 1, 2]), "items", total=3)) == [3, 1, 2]
    assert capsys.readouterr().err == ""  # stderr is not a terminal under pytest


def test_progress_draws_a_bar_with_its_total_on_a_terminal(monkeypatch):
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert list(progress(iter("abcd"), "letters", unit="letter", total=4)) == list("abcd")
    assert "letters:   0%|          | 0/4 [" in terminal.getvalue()


def test_calibration_shows_its_rounds_on_a_terminal_only(tiny_runtimes, monkeypatch, capsys):
    target, _ = tiny_runtimes
    assert len(measure_curve(target, n_max=3, prefix=8, reps=1)) == 3
    assert capsys.readouterr().err == ""
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    measure_curve(target, n_max=3, prefix=8, reps=1)
    assert "timing the target:   0%|          | 0/12 [" in terminal.getvalue()  # rounds: 24 / 2


def test_a_first_calibration_says_what_it_measures_and_that_it_happens_once(
    tiny_pair, tmp_path, monkeypatch
):
    from edgespec.backends import RuntimeOptions
    from edgespec.controller.calibrate import cost_curve
    from edgespec.pair import open_pair

    monkeypatch.setenv("EDGESPEC_HOME", str(tmp_path))
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    pair = open_pair(*map(str, tiny_pair), RuntimeOptions(n_ctx=256))
    cost_curve(pair, n_max=3)
    shown = terminal.getvalue()
    assert shown.startswith(
        "edgespec: calibrating: timing passes of 1..3 tokens through these models on this "
        "device, which the controller prices drafts by; once, then kept in "
        f"{tmp_path / 'tune.json'}\n"
    )
    assert "timing the target:   0%" in shown and "timing the draft:   0%" in shown
    terminal.seek(0)
    terminal.truncate()
    cost_curve(pair, n_max=3)  # kept: nothing measured, nothing said
    assert terminal.getvalue() == ""
