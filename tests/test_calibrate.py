"""calibrate.cost_curve owns cost curves: stored ones are reused, missing ones measured and
stored, and a bundle's curve is used only on the device and runtime it was measured on."""

from __future__ import annotations

import dataclasses
import json

import pytest

from edgespec.controller import calibrate
from edgespec.controller.calibrate import cost_curve, tune_key
from edgespec.plumbing.machine import device_description
from edgespec.plumbing.paths import edgespec_home

pytest.importorskip("llama_cpp")


@pytest.fixture
def pair(tiny_pair, tmp_path, monkeypatch):
    from edgespec.backends import RuntimeOptions
    from edgespec.pair import open_pair

    monkeypatch.setenv("EDGESPEC_HOME", str(tmp_path))
    return open_pair(*tiny_pair, RuntimeOptions(n_ctx=256))


@pytest.fixture
def measured(monkeypatch):
    """The n_max of every measurement cost_curve makes."""
    calls: list[int] = []
    real = calibrate.calibrate

    def counting(target, draft, n_max=9):
        calls.append(n_max)
        return real(target, draft, n_max)

    monkeypatch.setattr(calibrate, "calibrate", counting)
    return calls


def test_a_missing_curve_is_measured_stored_and_then_reused(pair, measured):
    first = cost_curve(pair, n_max=3)
    assert measured == [3] and len(first.target_s) == 3 and first.draft_s > 0
    assert calibrate.load_tuned(tune_key(pair)) == first
    assert cost_curve(pair, n_max=2) == first  # stored and long enough: not measured again
    assert measured == [3]
    assert len(cost_curve(pair, n_max=5).target_s) == 5  # too short: measured again
    cost_curve(pair, n_max=2, remeasure=True)  # `edgespec tune`
    assert measured == [3, 5, 2]


def test_a_stored_curve_from_an_older_calibration_is_measured_again(pair, measured):
    stored = {"target_s": [0.5, 0.5, 0.5], "draft_s": 0.01, "time": 0.0}  # no "calibration"
    (edgespec_home() / "tune.json").write_text(json.dumps({tune_key(pair): stored}))
    curve = cost_curve(pair, n_max=3)
    assert measured == [3] and curve.target_s != [0.5, 0.5, 0.5]
    entry = json.loads((edgespec_home() / "tune.json").read_text())[tune_key(pair)]
    assert entry["calibration"] == calibrate.CALIBRATION_VERSION
    assert cost_curve(pair, n_max=3) == curve and measured == [3]  # now current: reused


def bundle_tune(pair, **changes) -> dict:
    tune = {
        "target_s": [0.5, 0.5, 0.5],
        "draft_s": 0.01,
        "calibration": calibrate.CALIBRATION_VERSION,
        "device": device_description(pair.options.device),
        "runtime": pair.runtime_description(),
    }
    return {**tune, **changes}


def test_a_bundle_curve_is_used_on_its_own_device_and_runtime(pair, measured):
    here = dataclasses.replace(pair, bundle_tune=bundle_tune(pair))
    curve = cost_curve(here, n_max=3)
    assert (curve.target_s, curve.draft_s, measured) == ([0.5, 0.5, 0.5], 0.01, [])


@pytest.mark.parametrize(
    "elsewhere",
    [
        {"device": "NVIDIA Jetson AGX Orin, 12 cores"},  # measured on another machine
        {"runtime": "LlamaCppRuntime+LlamaCppRuntime device=cuda threads=None gpu_layers=-1"},
        {"runtime": "LlamaCppRuntime+LlamaCppRuntime"},  # bundles before the device was stored
        {"device": None},
        {"calibration": None},  # measured by the first calibration, one width after another
    ],
)
def test_a_bundle_curve_from_another_device_or_runtime_is_measured_again(pair, measured, elsewhere):
    there = dataclasses.replace(pair, bundle_tune=bundle_tune(pair, **elsewhere))
    curve = cost_curve(there, n_max=3)
    assert measured == [3] and curve.target_s != [0.5, 0.5, 0.5]


def test_the_tune_key_names_models_runtime_and_device(pair):
    key = tune_key(pair)
    assert key.endswith(
        "|LlamaCppRuntime+LlamaCppRuntime device=cpu threads=None gpu_layers=0|"
        + device_description()
    )
    assert tune_key(dataclasses.replace(pair, draft=None, draft_path=None)) != key


def test_a_one_graph_runtimes_curve_keeps_its_switch_and_a_key_of_its_own(pair, measured):
    """A curve's switch_s is stored and read back (absent: 0, as stored before runtimes
    that keep one CUDA graph were priced); such a runtime's curves are keyed apart, so
    a curve measured for it without switch_s is never read for it."""
    key = tune_key(pair)
    assert " one-graph" not in key and pair.target.keeps_one_graph is False  # CPU build
    curve = dataclasses.replace(cost_curve(pair, n_max=2), switch_s=0.002)
    calibrate.store_tuned(key, curve)
    assert calibrate.load_tuned(key) == curve
    for switch_s in (-1.0, True, "0.002", float("nan")):
        assert calibrate.valid_curve({**calibrate.curve_entry(curve), "switch_s": switch_s}) is None
    old = {"target_s": [0.5, 0.5], "draft_s": 0.01}  # before switch_s
    assert calibrate.valid_curve(old) == calibrate.CostCurve([0.5, 0.5], 0.01)
    pair.target.keeps_one_graph = True
    try:
        assert tune_key(pair) == key.replace(" gpu_layers=0", " gpu_layers=0 one-graph")
    finally:
        pair.target.keeps_one_graph = False


def test_a_one_graph_pair_is_calibrated_with_its_switch_and_decodes_as_plain(pair, measured):
    """The whole path on real llama.cpp models said to keep one CUDA graph (on this CPU the
    switch measures about nothing): calibrated with the switch, stored under the one-graph
    key, priced by the policy, drafted a token a pass, and the output plain decoding's."""
    from edgespec.loader import SpecOptions, build_decoder

    pair.target.keeps_one_graph = pair.draft.keeps_one_graph = True
    try:
        decoder = build_decoder(pair, SpecOptions(k_max=4))
        curve = decoder.policy.curve
        assert measured == [5] and curve.switch_s >= 0.0
        assert calibrate.load_tuned(tune_key(pair)) == curve and " one-graph" in tune_key(pair)
        assert decoder.drafters["model"].one_token_passes
        prompt = pair.target.tokenize("the theme of the week, in the ether", special=True)
        plain = decoder.generate(prompt, max_tokens=24, speculative=False)
        assert decoder.generate(prompt, max_tokens=24).tokens == plain.tokens
    finally:
        pair.target.keeps_one_graph = pair.draft.keeps_one_graph = False
