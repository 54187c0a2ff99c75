"""calibrate.measure_curve on a machine whose speed drifts: what the controller decides by
is the ratio of a wide pass to a one-token pass, and that must not take the drift's shape."""

from __future__ import annotations

import types

import pytest

from edgespec.controller import calibrate
from edgespec.controller.calibrate import measure_curve, samples_per_width
from tests.fakes import FakeRuntime


class DriftingClock:
    """A pass of n tokens costs 1 + 0.5 (n - 1) units; every pass makes the next 0.5% slower
    (a host warming up, or a neighbour's job starting)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.speed = 1.0
        self.widths: list[int] = []

    def perf_counter(self) -> float:
        return self.now

    def passed(self, n: int) -> None:
        self.now += (1 + 0.5 * (n - 1)) * self.speed
        self.speed *= 1.005
        self.widths.append(n)


class TimedRuntime(FakeRuntime):
    def __init__(self, clock: DriftingClock) -> None:
        super().__init__(n_ctx=64)
        self.clock = clock

    def forward(self, tokens, *, last_only=False):
        self.clock.passed(len(tokens))
        return super().forward(tokens, last_only=last_only)


@pytest.fixture
def clock(monkeypatch):
    clock = DriftingClock()
    monkeypatch.setattr(calibrate, "time", types.SimpleNamespace(perf_counter=clock.perf_counter))
    return clock


def test_a_drifting_machine_leaves_the_measured_ratios_as_they_are(clock):
    """Timed one width after another (three passes each), the same drift made the 9-token
    ratio 13% too high: the widest passes came last. Paired with a one-token pass, each ratio
    is within the drift of one pass (0.5%)."""
    curve = measure_curve(TimedRuntime(clock), n_max=9, prefix=8, reps=3)
    for n, seconds in enumerate(curve, start=1):
        assert seconds / curve[0] == pytest.approx(1 + 0.5 * (n - 1), rel=0.006)


def test_short_widths_are_sampled_most_each_after_a_one_token_pass(clock):
    runtime = TimedRuntime(clock)
    measure_curve(runtime, n_max=9, prefix=8, reps=3)
    timed = clock.widths[3:]  # after the prefix and two warm-up passes
    wide = timed[1::2]
    assert timed[0::2] == [1] * len(wide)
    assert {n: wide.count(n) for n in range(2, 10)} == samples_per_width(9, 3)
    assert samples_per_width(9, 3) == {2: 12, 3: 8, 4: 6, 5: 5, 6: 4, 7: 4, 8: 3, 9: 3}
    assert samples_per_width(3, 20) == {2: 20, 3: 20}  # a GPU kit's reps: no fewer


def test_a_one_token_curve_times_one_token_passes_alone(clock):
    curve = measure_curve(TimedRuntime(clock), n_max=1, prefix=8, reps=3)
    assert len(curve) == 1 and set(clock.widths[3:]) == {1} and len(clock.widths) == 3 + 3


class OneGraphRuntime(FakeRuntime):
    """Passes cost 1 + 0.5 (n - 1) units replayed, and SWITCH more when their shape (width,
    rows) changed from the last pass's or the pass before changed it: ggml-cuda's one graph,
    run uncaptured, then captured (docs/gpu.md)."""

    keeps_one_graph = True
    SWITCH = 2.0

    def __init__(self, clock: DriftingClock) -> None:
        super().__init__(n_ctx=64)
        self.clock = clock
        self.shapes: list[tuple[int, int]] = []

    def forward(self, tokens, *, last_only=False):
        shape = (len(tokens), 1 if last_only else len(tokens))
        changed = self.shapes[-1:] != [shape] or self.shapes[-2:-1] != [shape]
        self.clock.now += 1 + 0.5 * (len(tokens) - 1) + (self.SWITCH if changed else 0.0)
        self.shapes.append(shape)
        return super().forward(tokens, last_only=last_only)


def test_on_a_one_graph_runtime_the_calibration_measures_what_a_switch_costs(clock):
    """measure_curve alternates widths, so every pass it times ran uncaptured; calibrate
    times one-token passes in a row as well, and keeps replayed passes in the curve and the
    difference as switch_s. A draft model that keeps one graph is priced by its one-token
    passes in a row: it forwards one token a pass (ModelDrafter)."""
    curve = calibrate.calibrate(OneGraphRuntime(clock), OneGraphRuntime(clock), n_max=5)
    assert curve.switch_s == pytest.approx(OneGraphRuntime.SWITCH)
    assert curve.target_s == pytest.approx([1.0, 1.5, 2.0, 2.5, 3.0])
    assert curve.draft_s == pytest.approx(1.0)
    plain = calibrate.calibrate(TimedRuntime(clock), None, n_max=2)  # any other runtime
    assert plain.switch_s == 0.0


class NoisyRuntime(TimedRuntime):
    """One-token passes that each take 3 units (a host's hiccup on every one), wider ones 1."""

    def forward(self, tokens, *, last_only=False):
        self.clock.now += 2.0 if len(tokens) == 1 else 0.0
        return super().forward(tokens, last_only=last_only)


def test_a_noisy_calibration_stores_no_wide_pass_cheaper_than_a_one_token_pass(clock):
    """Measured ratios under 1 (here 1/3 at two tokens) are the host's noise; stored below
    half a one-token pass, such a curve was refused at every later load (curve_problem) and
    measured again, with a warning each time."""
    curve = calibrate.calibrate(NoisyRuntime(clock), None, n_max=3)
    assert curve.target_s[1:] == [curve.target_s[0]] * 2
    entry = {**calibrate.curve_entry(curve), "time": 0.0}
    assert calibrate.curve_problem(entry) is None
