"""`edgespec demo --backend auto`: the choice from given cost curves, and the sentence."""

from pathlib import Path

import pytest

from edgespec.app.bench_runs import Run, inexact_note, near_tie
from edgespec.app.cli import main
from edgespec.app.demo import choose_backend, demo_onnx_bundle, departure_note, modelled_rate
from edgespec.controller import CostCurve
from edgespec.errors import EdgespecError

LINEAR = CostCurve([0.1 * n for n in range(1, 10)])  # a verify of n tokens costs n tokens
FLAT = CostCurve([0.125] * 9)  # a verify of up to 9 tokens costs one token


def test_modelled_rate_takes_the_best_k():
    assert modelled_rate(LINEAR, 0.5, 8) == pytest.approx(10.0)  # plain: speculation never pays
    # k = 8: (1 + 0.5 + ... + 0.5**8) tokens in 0.125 s
    assert modelled_rate(FLAT, 0.5, 8) == pytest.approx((2 - 0.5**8) / 0.125)
    assert modelled_rate(FLAT, 0.5, 1) == pytest.approx(1.5 / 0.125)


def test_the_flat_verify_curve_wins_though_its_token_is_slower():
    choice = choose_backend({"llama": LINEAR, "onnx": FLAT}, alpha=0.5, k_max=8)
    assert choice.name == "onnx"
    assert choice.reason == (
        "back-end: ONNX Runtime, the cheapest to verify on this machine by the cost model: one "
        "token 125 ms, 5 tokens 1.00x that; 16.0 tok/s modelled at 50% acceptance, against "
        "llama.cpp 10.0 (one token 100 ms, 5 tokens 5.00x that). --backend llama runs the other"
    )


def test_without_speculation_the_faster_token_wins():
    choice = choose_backend({"llama": CostCurve([0.1, 0.2]), "onnx": CostCurve([0.12, 0.24])})
    assert choice.name == "llama"
    assert choice.rates == pytest.approx({"llama": 10.0, "onnx": 1 / 0.12})
    assert choice.reason.endswith("--backend onnx runs the other")


def test_a_folder_without_its_bundle_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGESPEC_HOME", str(tmp_path))
    (tmp_path / "demo-onnx").mkdir()
    (tmp_path / "demo-onnx" / "model.onnx").write_bytes(b"half")
    with pytest.raises(EdgespecError) as e:
        demo_onnx_bundle(Path("t.gguf"), Path("d.gguf"))
    assert str(e.value) == (
        f"{tmp_path / 'demo-onnx'} holds no bundle.json; remove the folder and run again"
    )


def departed(gap: float, runtime: str, exact: bool = False) -> tuple[Run, float]:
    bound = near_tie(runtime, exact)
    run = Run("code: palindrome", 179, 9.0, False, departure=115, departure_gap=gap)
    run.near_tie = gap < bound
    return run, bound


def test_a_departure_at_a_near_tie_is_explained_with_the_way_to_rule_it_out():
    run, bound = departed(0.0072, "OnnxRuntime")
    assert departure_note(run, "OnnxRuntime", bound) == (
        "  code: palindrome: departs from plain at token 115, where the target's top two logits "
        "were 0.007 apart: a near tie (ONNX Runtime rounds a logit up to 0.63 differently in a "
        "one-token pass than in a verify pass). --exact (batch-invariant kernels, slower plain "
        "decoding) makes the answers identical"
    )


def test_a_departure_beyond_the_rounding_is_called_a_bug():
    run, bound = departed(1.5, "LlamaCppRuntime")
    assert departure_note(run, "LlamaCppRuntime", bound) == (
        "  code: palindrome: departs from plain at token 115, where the target's top two logits "
        "were 1.500 apart: more than llama.cpp's rounding between pass widths explains (1.42). "
        "A bug: please report it with this output"
    )


def test_under_exact_any_departure_is_a_bug():
    run, bound = departed(0.001, "OnnxRuntime", exact=True)
    assert departure_note(run, "OnnxRuntime", bound).endswith(
        "more than ONNX Runtime's rounding between pass widths explains (0.00). "
        "A bug: please report it with this output"
    )


def test_the_demo_refuses_no_rounds(capsys):
    assert main(["demo", "--rounds", "0"]) == 2
    assert capsys.readouterr().err.strip() == (
        "edgespec: error: --rounds must be at least 1, got 0"
    )


def test_a_back_end_on_its_fastest_kernels_says_why_answers_may_part():
    assert inexact_note("LlamaCppRuntime") == (
        "llama.cpp runs its fastest kernels, which round a logit differently in a one-token "
        "pass than in a verify pass: at a near tie the answers may part; --exact makes them "
        "identical, at a cost in speed (docs/exactness.md)"
    )
