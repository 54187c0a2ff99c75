"""MTP drafting on llama.cpp (runtimes/llama_heads.py MtpHead, edgespec/drafters/head.py), on
a tiny random GLM-4.5-architecture target with one MTP layer made in the test: the target's
kept final states, the MTP layer against its graph in numpy, speculative output equal to
plain decoding (greedy and seeded, k = 1..8, --exact kernels), the layer's state after every
rollback equal to a fresh one's, the command line, and refusals."""

from pathlib import Path

import numpy as np
import pytest

from edgespec.backends import EXACT_LLAMA, RuntimeOptions
from edgespec.errors import EdgespecError, ModelFileError
from edgespec.loader import SpecOptions, load_decoder
from edgespec.runtimes.llamacpp import LlamaCppRuntime, LlamaOptions
from edgespec.sampling import SamplingParams
from tests.test_cli import run_cli
from tests.test_eagle import (
    check_output_equals_plain,
    check_rollback_leaves_a_fresh_state,
    plain_reference,
    put_target_at,
)
from tests.tiny_gguf import build_tiny_pair, vocabulary
from tests.tiny_mtp import TARGET, mtp_weights, reference_mtp, write_mtp_target

WEIGHTS = mtp_weights(TARGET, len(vocabulary()[0]), 0)


@pytest.fixture(scope="module")
def target_file(tmp_path_factory) -> Path:
    return write_mtp_target(tmp_path_factory.mktemp("mtp") / "glm.gguf")


def open_target(path: Path, mtp: bool = True) -> LlamaCppRuntime:
    options = LlamaOptions(**EXACT_LLAMA, mtp=mtp)
    return LlamaCppRuntime(path, n_ctx=256, n_threads=1, options=options)


@pytest.fixture(scope="module")
def pair(target_file):
    target = open_target(target_file)
    return target, target.open_mtp()


@pytest.fixture(scope="module")
def reference(pair):
    return plain_reference(pair[0])


def test_the_features_are_the_targets_final_state_by_position(pair, reference):
    """The final hidden state after output_norm, every row of every pass: the logits are the
    output layer over it; rows are kept at their positions across rollback."""
    target, _ = pair
    tokens = reference[0]
    target.reset()
    logits = target.forward(tokens)
    h = target.features(0, len(tokens))
    assert h.shape == (len(tokens), TARGET.n_embd)
    np.testing.assert_allclose(h @ WEIGHTS["output.weight"].T, logits, rtol=0, atol=0.02)
    target.rollback(3)
    target.forward(tokens[3:10], last_only=True)
    np.testing.assert_allclose(target.features(0, 10), h[:10], rtol=0, atol=1e-4)


def test_the_mtp_layer_equals_the_numpy_reference(pair, reference):
    """Pairs (token P + 1, h P) from the target's states in one pass and in two, then a
    drafting step from the layer's own state, against glm4-moe.cpp's graph_mtp in numpy."""
    target, head = pair
    tokens = reference[0]
    n = len(tokens)
    put_target_at(target, tokens)
    h = target.features(0, n - 1)
    want_logits, want_state = reference_mtp(WEIGHTS, tokens[1:], h.astype(np.float64))
    head.reset()
    logits, state = head.decode(tokens[1:], head.encode(h))
    np.testing.assert_allclose(logits, want_logits[-1], rtol=0, atol=0.02)
    np.testing.assert_allclose(state, want_state[-1], rtol=0, atol=2e-3)
    head.reset()
    head.decode(tokens[1:5], h[:4])
    logits, state = head.decode(tokens[5:], h[4:])
    np.testing.assert_allclose(logits, want_logits[-1], rtol=0, atol=0.02)
    drafted = int(np.argmax(logits))
    step, _ = head.decode([drafted], state[None, :])
    more_h = np.concatenate([h, state[None, :]]).astype(np.float64)
    want_step = reference_mtp(WEIGHTS, [*tokens[1:], drafted], more_h)[0][-1]
    np.testing.assert_allclose(step, want_step, rtol=0, atol=0.02)


@pytest.mark.parametrize("k", range(1, 9))
def test_greedy_and_seeded_output_equal_plain(pair, reference, k):
    target, head = pair
    check_output_equals_plain(target, head, *reference, k)


def test_rollback_at_every_position_leaves_a_fresh_layers_state(pair, reference):
    target, head = pair
    check_rollback_leaves_a_fresh_state(target, head, target.open_mtp(), reference,
                                        SamplingParams(0.0))  # fmt: skip
