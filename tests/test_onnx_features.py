"""A target exported to ONNX with hidden_layers (export/onnx_export.py) outputs those layers'
inputs at every row, and OnnxRuntime keeps them by cache position (Runtime.features): what
an EAGLE-3 head reads. Checked against llama.cpp's own layer inputs for the same tiny GGUF
target (runtimes/llama_heads.py), on both graph flavours, across verify passes and rollback."""

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

from edgespec.backends import EXACT_LLAMA  # noqa: E402
from edgespec.export.onnx_export import export_onnx  # noqa: E402
from edgespec.export.onnx_standard import StandardGraphBuilder  # noqa: E402
from edgespec.runtimes.llamacpp import LlamaCppRuntime, LlamaOptions  # noqa: E402
from edgespec.runtimes.onnxrt import OnnxRuntime  # noqa: E402
from edgespec.runtimes.onnxrt_standard import StandardOnnxRuntime  # noqa: E402
from tests.tiny_eagle import TARGET, write_head  # noqa: E402
from tests.tiny_gguf import random_weights, vocabulary, write_gguf  # noqa: E402

PROMPT = "<|im_start|>user\ndef the rest(a, b):\n    return a<|im_end|>\n<|im_start|>assistant\n"
LAYERS = (0, 1, 3)
# Relative RMS of each later layer's input against llama.cpp's: llama.cpp keeps K/V in float16,
# ONNX Runtime in float32 (measured 2.8e-4 at layer 1, 4.6e-4 at layer 3; the input of
# another layer differs by ~1). Layer 0's input, the token embedding, is exact.
BOUND = 2e-3


def assert_same_layer_inputs(got: np.ndarray, expected: np.ndarray) -> None:
    d = TARGET.n_embd
    np.testing.assert_array_equal(got[:, :d], expected[:, :d])
    for i in range(1, len(LAYERS)):
        a, e = got[:, i * d : (i + 1) * d], expected[:, i * d : (i + 1) * d]
        rel_rms = float(np.sqrt(((a - e) ** 2).mean() / (e**2).mean()))
        assert rel_rms < BOUND, f"layer {LAYERS[i]}'s input: relative RMS {rel_rms:.2e}"


@pytest.fixture(scope="module")
def target_gguf(tmp_path_factory) -> Path:
    """tiny_eagle's target, its tokenizer's pre-tokenizer named one ONNX export rebuilds."""
    weights = random_weights(TARGET, len(vocabulary()[0]), 0)
    return write_gguf(tmp_path_factory.mktemp("features") / "t.gguf", TARGET, weights, pre="gpt-2")


@pytest.fixture(scope="module")
def llama_features(target_gguf, tmp_path_factory) -> tuple[list[int], np.ndarray]:
    """The prompt's tokens and llama.cpp's inputs of LAYERS at each of them."""
    options = LlamaOptions(**EXACT_LLAMA)
    target = LlamaCppRuntime(target_gguf, n_ctx=128, n_threads=1, options=options)
    head = write_head(tmp_path_factory.mktemp("head") / "h.gguf", TARGET, layers=LAYERS)
    target.open_head(str(head))
    tokens = target.tokenize(PROMPT, special=True)
    target.forward(tokens)
    return tokens, target.features(0, len(tokens))


FLAVOURS = {"ort": (None, OnnxRuntime), "standard": (StandardGraphBuilder, StandardOnnxRuntime)}


@pytest.fixture(scope="module", params=list(FLAVOURS))
def exported(request, target_gguf, tmp_path_factory) -> OnnxRuntime:
    builder, runtime = FLAVOURS[request.param]
    folder = tmp_path_factory.mktemp(f"onnx-{request.param}")
    export_onnx(target_gguf, folder, builder=builder, hidden_layers=LAYERS)
    rt = runtime(folder, n_ctx=128, n_threads=1)
    with pytest.raises(ValueError, match=r"^no hidden states kept for positions 0\.\.0$"):
        rt.features(0, 1)  # nothing is copied out before a head asks (open_head)
    rt.keep_features()
    return rt


def test_hidden_states_equal_llama_cpps_layer_inputs_at_every_row(exported, llama_features):
    tokens, expected = llama_features
    exported.reset()
    exported.forward(tokens, last_only=True)  # every row is kept, whatever rows are returned
    got = exported.features(0, len(tokens))
    assert got.shape == (len(tokens), len(LAYERS) * TARGET.n_embd)
    embd = random_weights(TARGET, len(vocabulary()[0]), 0)["token_embd.weight"]
    np.testing.assert_allclose(got[:, : TARGET.n_embd], embd[tokens], rtol=0, atol=1e-6)
    assert_same_layer_inputs(got, expected)


def test_verify_passes_and_rollback_keep_each_position_s_rows(exported, llama_features):
    """A prompt pass, then verify-width passes rolled back to a shorter accepted prefix, as
    the loop runs them: the kept rows equal one pass's at every position."""
    tokens, expected = llama_features
    exported.reset()
    exported.forward(tokens[:6], last_only=True)
    exported.forward(tokens[6:11] + [5, 9])  # a verify pass of 7 whose last 2 are rejected
    exported.rollback(11)
    exported.forward(tokens[11:12])  # plain
    exported.forward(tokens[12:16])
    assert_same_layer_inputs(exported.features(0, 16), expected[:16])
    with pytest.raises(ValueError, match="no hidden states kept for positions 10..16"):
        exported.features(10, 17)


def test_a_graph_without_hidden_layers_says_how_to_get_them(target_gguf, tmp_path):
    runtime = OnnxRuntime(export_onnx(target_gguf, tmp_path), n_ctx=64, n_threads=1)
    with pytest.raises(ValueError, match=f"^{tmp_path.name} outputs no hidden states; export it "
                       "with hidden_layers$"):  # fmt: skip
        runtime.keep_features()
    assert not runtime.hidden_states  # so no head opens on it


@pytest.mark.parametrize("layers", [(0, 4), (-1,), (), (True,)])
def test_hidden_layers_outside_the_model_are_refused_before_writing(target_gguf, tmp_path, layers):
    refusal = (r"^hidden layers must be layer indices 0\.\.3, got .*; give the extract "
               r"layers of the head that will read them$")  # fmt: skip
    with pytest.raises(ValueError, match=refusal):
        export_onnx(target_gguf, tmp_path / "out", hidden_layers=layers)
    assert not (tmp_path / "out").exists()
