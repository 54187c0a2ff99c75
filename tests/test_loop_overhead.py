"""bench/loop_overhead.py's replayed rows: every draft is accepted (each step reaches its
k + 1 rows) in every sampling mode, on recorded-like rows; record_logits takes its prompts
from the suites in turn. No timing is asserted."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


def bench_module(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


loop_overhead = bench_module("loop_overhead")


@pytest.mark.parametrize("mode", list(loop_overhead.MODES))
def test_replayed_rows_accept_every_draft(mode):
    rows = (np.random.default_rng(0).standard_normal((16, 9_000)) * 3).astype(np.float16)
    # loop_cost_us asserts that every step was a full k = 4 step
    sp, on_device = loop_overhead.MODES[mode], mode in loop_overhead.ON_DEVICE
    loop, reread = loop_overhead.loop_cost_us(4, sp, 6, 1, rows=rows, on_device=on_device)
    assert loop > 0 and (reread is not None) == on_device


def test_float16_recordings_replay_as_float32_rows_that_round_to_them():
    """as_float32_rows spreads each float16 logit over the float32 values that round back to
    it, powers of two (an uneven gap each side), zero and the largest included: every one
    rounds to its recording, and the ties a float16 row holds are gone."""
    rng = np.random.default_rng(4)
    special = np.array([0.0, -0.0, 1.0, -2.0, 0.5, 65504.0, -65504.0, 6e-8, 1024.0], np.float16)
    recorded = np.concatenate([special, (rng.standard_normal(20_000) * 8).astype(np.float16)])
    rows = loop_overhead.as_float32_rows(np.tile(recorded, (3, 1)))
    assert rows.dtype == np.float32
    assert (rows.astype(np.float16) == recorded).all()
    assert len(np.unique(rows)) > 0.99 * rows.size and len(np.unique(recorded)) < 10_000


def test_replay_runtime_answers_by_position():
    rows = np.arange(6 * 3, dtype=np.float16).reshape(6, 3)
    rt = loop_overhead.ReplayRuntime(rows)
    assert rt.forward([9, 9, 9], last_only=True).tolist() == [rows[2].tolist()]
    rt.rollback(1)
    assert rt.forward([9, 9]).tolist() == rows[1:3].tolist()
    rt.rollback(5)
    assert rt.forward([9, 9]).tolist() == [rows[5].tolist(), rows[0].tolist()]  # wraps


def test_cold_rows_are_handed_over_where_they_lie_and_decode_alike():
    """--cold: a pass's rows in a row are a read-only view of the recordings (what a GPU's
    copied logits are to the host), a wrapped pass's a copy; the loop emits the same tokens
    either way, every sampled mode."""
    rows = (np.random.default_rng(0).standard_normal((16, 9_000)) * 3).astype(np.float32)
    rt = loop_overhead.ReplayRuntime(rows, cold=True)
    rt.rollback(2)
    view = rt.forward([9, 9, 9])
    assert np.shares_memory(view, rows) and not view.flags.writeable
    assert view.tolist() == rows[2:5].tolist()
    rt.rollback(15)
    assert not np.shares_memory(rt.forward([9, 9]), rows)  # 15, 0: wrapped
    for mode, sp in loop_overhead.MODES.items():
        if mode in loop_overhead.ON_DEVICE:
            continue
        outs = []
        for cold in (False, True):
            dec = loop_overhead.decoder_for(rows, 4, sp, 30, cold=cold)
            outs.append(dec.generate(loop_overhead.PROMPT, max_tokens=30, sp=sp).tokens)
        assert outs[0] == outs[1], mode


def test_record_logits_takes_prompts_from_the_suites_in_turn():
    record_logits = bench_module("record_logits")
    cases = record_logits.suite_prompts(6)
    assert [case_id.split("-")[0] for case_id, _ in cases][:3] != ["chat"] * 3
    assert len({case_id for case_id, _ in cases}) == 6
    assert all(messages and messages[0]["role"] == "user" for _, messages in cases)
