"""bench/gate_features.py: the signals line up position by position with the recording and a
real target's teacher-forced probabilities, the table counts exactly, and the fit finds the
weights that made the data."""

from __future__ import annotations

import numpy as np
import pytest

from edgespec.chat import chat_tokens
from tests.bench_scripts import load_bench_script


def load_module():
    return load_bench_script("gate_features.py", "bench_gate_features")


def test_signals_pair_each_draft_token_with_the_targets_previous_probability(tiny_pair):
    gate = load_module()
    from edgespec.runtimes.llamacpp import LlamaCppRuntime

    replay = load_bench_script("replay.py", "bench_replay")
    target = LlamaCppRuntime(tiny_pair[0], n_ctx=512)
    prompt = chat_tokens(target, [{"role": "user", "content": "the theme of the week"}])
    output = target.tokenize(" week of the theme", special=False)[:5]
    assert len(output) == 5
    _, target_p = replay.teacher_forced(target, prompt, output)
    recording = {
        "target": str(tiny_pair[0]),
        "cases": [
            {"suite": "open", "prompt": prompt, "output": output,
             "draft": [output[0], -1, *output[2:4], -1], "draft_p": [0.9, 0.2, 0.8, 0.6, 0.4]},
            {"suite": "edit", "prompt": prompt, "output": output,
             "draft": output, "draft_p": [1.0] * 5},
        ],
    }  # fmt: skip
    s = gate.signals(recording, {"open"}, threads=1)
    assert s["kept"].tolist() == [0, 1, 1, 0]  # positions 1..4 of the open case only
    assert s["kept_before"].tolist() == [1, 0, 1, 1]
    assert s["draft_p"].tolist() == [0.2, 0.8, 0.6, 0.4]
    assert s["target_p"].tolist() == pytest.approx(target_p[1:], abs=1e-4)
    assert s["target_p_before"].tolist() == pytest.approx(target_p[:-1], abs=1e-4)


def test_the_table_counts_acceptance_by_both_probabilities():
    gate = load_module()
    s = {
        "kept": np.array([1, 0, 1, 1, 0]),
        "draft_p": np.array([0.95, 0.95, 0.4, 0.4, 0.1]),
        "target_p_before": np.array([0.995, 0.995, 0.6, 0.6, 0.2]),
    }
    table = gate.acceptance_table(s)
    assert table[4][4] == (0.5, 2)  # draft >= 0.9, target >= 0.99
    assert table[1][1] == (1.0, 2)  # draft 0.3-0.5, target 0.5-0.7
    assert table[0][0] == (0.0, 1)
    assert sum(n for row in table for _, n in row) == 5


def test_the_fit_recovers_the_weights_and_an_unrelated_signal_adds_nothing():
    gate = load_module()
    rng = np.random.default_rng(0)
    draft_p = rng.uniform(0.05, 0.99, 40_000)
    noise = rng.uniform(0.05, 0.99, 40_000)
    z = 0.5 + 1.5 * gate.logit(draft_p)
    kept = (rng.uniform(size=z.size) < 1 / (1 + np.exp(-z))).astype(float)
    loss, weights = gate.fit_log_loss([gate.logit(draft_p)], kept)
    assert weights == pytest.approx([0.5, 1.5], abs=0.06)
    with_noise, w = gate.fit_log_loss([gate.logit(draft_p), gate.logit(noise)], kept)
    assert abs(w[2]) < 0.05 and loss - with_noise < 1e-3
    bias_only, _ = gate.fit_log_loss([], kept)
    assert bias_only - loss > 0.05  # the signal that made the data does explain it
