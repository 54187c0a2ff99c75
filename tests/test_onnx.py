"""HF checkpoints -> ONNX -> OnnxRuntime, on tiny checkpoints made in the test (CPU EP).

Bounds, measured on these checkpoints (logits of magnitude ~15):
- fp32 graph vs the float64 numpy reference: max |diff| < 1e-4 (measured ~1e-5).
- fp8 graph vs the numpy reference over the same E4M3 per-channel weights: < 1e-4; vs the
  float32 weights only loosely (relative RMS < 0.15, measured ~0.07).
- int4 graph vs the numpy reference over the block weights it holds: < 1e-4 with float32
  activations (accuracy_level 0); relative RMS < 0.03 with int8 activations (level 4, the
  default; measured ~0.017); vs the float32 weights relative RMS < 0.4 (measured ~0.25).
- fp16 weights: < 0.05 (measured ~0.012); fp16 compute (the CUDA export) likewise.
- rollback, chunking and padded (CUDA-graph-shaped) steps vs one fresh pass: < 1e-5.
Greedy speculative output must equal plain greedy output token for token: float32 throughout.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest

from edgespec.backends import RuntimeOptions
from edgespec.controller import FixedPolicy
from edgespec.drafters import ModelDrafter, NgramDrafter
from edgespec.engine import SpeculativeDecoder
from edgespec.errors import EdgespecError, ModelFileError
from edgespec.loader import SpecOptions, build_decoder
from edgespec.pair import ModelPair
from edgespec.runtime import check_compatible
from edgespec.sampling import SamplingParams
from tests import numpy_reference

pytest.importorskip("onnxruntime", reason="the ONNX back-end needs onnxruntime (edgespec[onnx])")
pytest.importorskip("onnx", reason="the ONNX exporter needs onnx (edgespec[onnx])")

from edgespec.export.onnx_export import export_onnx  # noqa: E402
from edgespec.runtimes.onnxrt import (
    NO_GRAPH,
    OnnxOptions,
    OnnxRuntime,
    captured_graph_id,
    require_cuda_provider,
)  # noqa: E402
from tests.tiny_hf import make_tiny_hf  # noqa: E402

TOKENS = [5, 17, 42, 99, 150, 7, 33, 250, 12, 64]
PROMPT = (
    "<|im_start|>user\ndef add(a, b):\n    return a + b\n\nfor item in items:\n"
    "    total += item.price<|im_end|>\n<|im_start|>assistant\n"
)


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def checkpoint(request, tmp_path_factory) -> Path:
    return make_tiny_hf(tmp_path_factory.mktemp(request.param), arch=request.param, seed=3)


@pytest.fixture(scope="module")
def exported(checkpoint, tmp_path_factory) -> Path:
    return export_onnx(checkpoint, tmp_path_factory.mktemp("onnx"))


@pytest.fixture(scope="module")
def runtime(exported) -> OnnxRuntime:
    return OnnxRuntime(exported, n_ctx=256)


def rel_rms(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.sqrt(((a - b) ** 2).mean() / (b**2).mean()))


def half(w: np.ndarray) -> np.ndarray:
    return w.astype(np.float16).astype(np.float32)


def with_weights(checkpoint: Path, folder: Path, change, embedding=half) -> Path:
    """A copy of the checkpoint whose 2-D projection weights went through change(name, w),
    and whose embedding table went through embedding(w): half, as the fp8 graph stores it
    (and the int4 graph where the block does not divide the row)."""
    from safetensors.numpy import load_file, save_file

    shutil.copytree(checkpoint, folder)
    tensors = load_file(checkpoint / "model.safetensors")
    for name, w in tensors.items():
        if name == "model.embed_tokens.weight":
            tensors[name] = embedding(w)
        elif w.ndim == 2:
            tensors[name] = change(name, w).astype(np.float32)
    save_file(tensors, str(folder / "model.safetensors"))
    return folder


def fresh_logits(runtime: OnnxRuntime, tokens: list[int]) -> np.ndarray:
    runtime.reset()
    return runtime.forward(tokens)


# --- logits against the numpy reference ----------------------------------------------------


@pytest.mark.parametrize("arch", ["llama", "qwen2", "mistral"])
def test_fp32_logits_match_the_numpy_reference(arch, tmp_path):
    hf = make_tiny_hf(tmp_path / "hf", arch=arch, seed=3)
    got = OnnxRuntime(export_onnx(hf, tmp_path / "onnx"), n_ctx=64).forward(TOKENS)
    ref = numpy_reference.forward(hf, TOKENS)
    assert got.shape == ref.shape and got.dtype == np.float32
    assert np.abs(got - ref).max() < 1e-4


def test_an_exported_graph_carries_an_ir_version_onnxruntime_1_31_reads(exported):
    """onnx 1.23 stamps IR 14 on a new model; onnxruntime-gpu 1.31.1 refused such a graph on an
    H200 ("Unsupported model IR version: 14, max supported IR version: 13"): the export pins
    the IR that opset 21 came with."""
    import onnx

    model = onnx.load(exported / "model.onnx", load_external_data=False)
    assert model.ir_version == 10
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 21), ("com.microsoft", 1)]


def test_the_reference_comparison_would_notice_a_wrong_rope(checkpoint, tmp_path):
    config = json.loads((checkpoint / "config.json").read_text())
    shutil.copytree(checkpoint, tmp_path / "hf")
    config["rope_theta"] = 500.0
    (tmp_path / "hf" / "config.json").write_text(json.dumps(config))
    wrong = OnnxRuntime(export_onnx(tmp_path / "hf", tmp_path / "onnx"), n_ctx=64)
    assert np.abs(wrong.forward(TOKENS) - numpy_reference.forward(checkpoint, TOKENS)).max() > 0.1


def test_fp16_weights_stay_close(checkpoint, tmp_path):
    got = OnnxRuntime(export_onnx(checkpoint, tmp_path, quant="fp16"), n_ctx=64).forward(TOKENS)
    ref = numpy_reference.forward(checkpoint, TOKENS)
    assert np.abs(got - ref).max() < 0.05
    assert (got.argmax(-1) == ref.argmax(-1)).all()


def test_fp8_graph_computes_with_its_e4m3_weights(checkpoint, tmp_path):
    from edgespec.quant.fp8 import dequantize_fp8, quantize_fp8

    got = OnnxRuntime(export_onnx(checkpoint, tmp_path / "onnx", quant="fp8"), n_ctx=64)
    logits = got.forward(TOKENS)
    fake = with_weights(
        checkpoint, tmp_path / "fake", lambda _, w: dequantize_fp8(*quantize_fp8(w))
    )
    assert np.abs(logits - numpy_reference.forward(fake, TOKENS)).max() < 1e-4
    assert rel_rms(logits, numpy_reference.forward(checkpoint, TOKENS)) < 0.15


@pytest.mark.parametrize("block_size", [32, 128])
def test_int4_graph_computes_with_its_block_weights(checkpoint, tmp_path, block_size):
    """accuracy_level 0 (float32 activations) must reproduce the block weights exactly;
    level 4 (int8 activations, the fast CPU kernel) adds activation rounding only. The
    embedding rows (64 wide here) are INT4 blocks too where the block divides them."""

    def embedding(w):
        return ort_int4_roundtrip(w, block_size) if w.shape[1] % block_size == 0 else half(w)

    fake = with_weights(
        checkpoint, tmp_path / "fake", lambda _, w: ort_int4_roundtrip(w, block_size), embedding
    )
    fake_ref = numpy_reference.forward(fake, TOKENS)
    exact = export_onnx(
        checkpoint, tmp_path / "a0", quant="int4", block_size=block_size, accuracy_level=0
    )
    assert np.abs(OnnxRuntime(exact, n_ctx=64).forward(TOKENS) - fake_ref).max() < 1e-4
    fast = export_onnx(checkpoint, tmp_path / "a4", quant="int4", block_size=block_size)
    logits = OnnxRuntime(fast, n_ctx=64).forward(TOKENS)
    assert json.loads((fast / "model.json").read_text())["block_size"] == block_size
    assert rel_rms(logits, fake_ref) < 0.03
    assert rel_rms(logits, numpy_reference.forward(checkpoint, TOKENS)) < 0.4


@pytest.mark.parametrize("block_size", [32, 128])
def test_int8_graph_computes_with_its_block_weights(checkpoint, tmp_path, block_size):
    """--draft-quant int8: MatMulNBits bits=8 over the same blocks (a drafter kept above the
    target's INT4). accuracy_level 0 reproduces the 8-bit block weights exactly; the default
    level 4 adds activation rounding only; the embedding stays half."""
    fake = with_weights(
        checkpoint, tmp_path / "fake", lambda _, w: ort_int8_roundtrip(w, block_size)
    )
    fake_ref = numpy_reference.forward(fake, TOKENS)
    exact = export_onnx(
        checkpoint, tmp_path / "a0", quant="int8", block_size=block_size, accuracy_level=0
    )
    assert np.abs(OnnxRuntime(exact, n_ctx=64).forward(TOKENS) - fake_ref).max() < 1e-4
    fast = export_onnx(checkpoint, tmp_path / "a4", quant="int8", block_size=block_size)
    logits = OnnxRuntime(fast, n_ctx=64).forward(TOKENS)
    info = json.loads((fast / "model.json").read_text())
    assert (info["quant"], info["block_size"]) == ("int8", block_size)
    assert rel_rms(logits, fake_ref) < 0.03
    # 8 bits: far closer to the float32 weights than INT4's < 0.4
    assert rel_rms(logits, numpy_reference.forward(checkpoint, TOKENS)) < 0.05


@pytest.mark.parametrize("quant", ["fp16", "int4"])
def test_fp16_compute_graph_runs_with_a_half_cache(checkpoint, tmp_path, quant):
    """The CUDA-EP export (half activations and KV cache), run here through ORT's CPU casts."""
    onnx_dir = export_onnx(checkpoint, tmp_path / "onnx", quant=quant, compute="fp16")
    rt = OnnxRuntime(onnx_dir, n_ctx=64)
    assert rt.kv_dtype == np.float16
    logits = rt.forward(TOKENS)
    assert logits.dtype == np.float32
    if quant == "fp16":
        assert np.abs(logits - numpy_reference.forward(checkpoint, TOKENS)).max() < 0.05
    rt.rollback(4)
    assert np.abs(rt.forward(TOKENS[4:]) - logits[4:]).max() < 1e-2
    with pytest.raises(ValueError, match="fp16 compute needs"):
        export_onnx(checkpoint, tmp_path / "bad", quant="fp32", compute="fp16")


def ort_int4_roundtrip(w: np.ndarray, block: int) -> np.ndarray:
    """w [out, in] through ONNX Runtime's symmetric 4-bit block quantizer and back."""
    from onnxruntime.capi._pybind_state import quantize_matmul_4bits

    wt = np.ascontiguousarray(w.T.astype(np.float32))  # [K, N]: blocks run along K
    k, n = wt.shape
    n_blocks = -(-k // block)
    packed = np.zeros((n, n_blocks, block // 2), np.uint8)
    scales = np.zeros((n, n_blocks), np.float32)
    zero_points = np.zeros((n, (n_blocks + 1) // 2), np.uint8)
    quantize_matmul_4bits(packed, wt, scales, zero_points, block, n, k, True)
    codes = np.stack([packed & 0xF, packed >> 4], axis=-1).reshape(n, n_blocks, block)
    values = (codes.astype(np.float32) - 8) * scales[..., None]  # zero point 8: symmetric
    return values.reshape(n, -1)[:, :k]


def ort_int8_roundtrip(w: np.ndarray, block: int) -> np.ndarray:
    """w [out, in] through ONNX Runtime's symmetric 8-bit block quantizer and back."""
    from onnxruntime.capi._pybind_state import quantize_matmul_8bits

    wt = np.ascontiguousarray(w.T.astype(np.float32))  # [K, N]: blocks run along K
    k, n = wt.shape
    n_blocks = -(-k // block)
    codes = np.zeros((n, n_blocks, block), np.uint8)
    scales = np.zeros((n, n_blocks), np.float32)
    zero_points = np.zeros((n, n_blocks), np.uint8)
    quantize_matmul_8bits(codes, wt, scales, zero_points, block, n, k, True)
    values = (codes.astype(np.float32) - 128) * scales[..., None]  # zero point 128: symmetric
    return values.reshape(n, -1)[:, :k]


# --- the KV cache: incremental steps, rollback, padding ------------------------------------


def test_steps_in_pieces_equal_one_pass(runtime):
    whole = fresh_logits(runtime, TOKENS)
    runtime.reset()
    pieces = [runtime.forward(TOKENS[a:b]) for a, b in [(0, 3), (3, 4), (4, 9), (9, 10)]]
    assert runtime.n_past == len(TOKENS)
    assert np.abs(np.concatenate(pieces) - whole).max() < 1e-5
    runtime.reset()
    last = runtime.forward(TOKENS, last_only=True)
    assert last.shape == (1, runtime.n_vocab)
    assert np.abs(last - whole[-1:]).max() < 1e-5


def test_rollback_returns_the_same_logits_as_a_fresh_run(runtime):
    fresh = fresh_logits(runtime, TOKENS)
    runtime.reset()
    runtime.forward(TOKENS[:4])
    runtime.forward([300, 301, 302, 303, 304, 305])  # a rejected draft, written into the cache
    runtime.rollback(4)
    assert runtime.n_past == 4
    again = runtime.forward(TOKENS[4:])
    assert np.abs(again - fresh[4:]).max() < 1e-5
    with pytest.raises(ValueError):
        runtime.rollback(runtime.n_past + 1)


def test_chunked_prefill_equals_one_pass(exported, runtime):
    """n_batch=3 splits the prompt."""
    whole = fresh_logits(runtime, TOKENS)
    chunked = OnnxRuntime(exported, n_ctx=64, options=OnnxOptions(n_batch=3))
    assert np.abs(chunked.forward(TOKENS) - whole).max() < 1e-5


def test_the_steps_that_repeat_are_captured_each_as_a_graph_of_its_own():
    """Decode and verify steps (every row, up to max_graph_width tokens) and a draft's
    2-token re-forward (its last row) each have a CUDA graph of their own; prefill and
    catch-up chunks run uncaptured."""
    ids = {
        (width, rows): captured_graph_id(width, rows, 17)
        for width in range(1, 41)
        for rows in sorted({1, width})
    }
    captured = {shape: i for shape, i in ids.items() if i != NO_GRAPH}
    assert captured == {**{(w, w): w for w in range(1, 18)}, (2, 1): 19}
    assert len(set(captured.values())) == len(captured)


def test_a_captured_last_row_step_reads_the_logits_of_an_uncaptured_one(exported, runtime):
    """The captured shape's inputs (the whole cache as the total length, seqlens_k the real
    one), run on the CPU EP, which ignores the graph ids: the same rows as a plain pass, at
    several positions."""
    shaped = OnnxRuntime(exported, n_ctx=64)
    shaped.cuda_graph = True  # what the CUDA EP would capture; only the inputs differ here
    assert reforward_error(shaped, fresh_logits(runtime, TOKENS)) < 1e-5
    step = shaped.steps[(2, 1)]
    assert step.graph_id == 19 and int(step.total) == shaped.cache_len


def test_capturing_at_load_runs_each_captured_shape_once_and_keeps_the_cache(exported, runtime):
    whole = fresh_logits(runtime, TOKENS)
    assert OnnxRuntime(exported, n_ctx=64).capture_graphs([(1, 1), (2, 1)]) == 0  # no graphs
    shaped = OnnxRuntime(exported, n_ctx=20)
    shaped.cuda_graph = True  # what the CUDA EP would capture
    shaped.forward(TOKENS[:5])
    # (3, 1) is not captured; 16 tokens after 5 would overflow the context
    shapes = [(1, 1), (3, 3), (2, 1), (3, 1), (16, 16), (3, 3)]
    assert shaped.capture_graphs(shapes) == 3
    assert set(shaped.steps) == {(5, 5), (1, 1), (3, 3), (2, 1)} and shaped.n_past == 5
    assert shaped.capture_graphs(shapes) == 0  # captured already
    assert np.abs(shaped.forward(TOKENS[5:]) - whole[5:]).max() < 1e-5


def test_a_decoder_built_to_capture_runs_the_loops_shapes_at_load(exported, draft_runtime):
    """build_decoder(capture_graphs=True): the target's widths up to k + 1, every row, and
    the draft model's proposals (one token, and two re-forwarded), on runtimes set to
    capture; nothing on a pair without a draft model."""
    shaped = [OnnxRuntime(path, n_ctx=64) for path in (exported, draft_runtime.path)]
    for rt in shaped:
        rt.cuda_graph = True
    pair = ModelPair(*shaped, exported, draft_runtime.path, RuntimeOptions(n_ctx=64))
    build_decoder(pair, SpecOptions("model", 3), capture_graphs=True)
    assert set(shaped[0].steps) == {(1, 1), (2, 2), (3, 3), (4, 4)}
    assert set(shaped[1].steps) == {(1, 1), (2, 1)}
    assert shaped[0].n_past == shaped[1].n_past == 0
    plain_only = OnnxRuntime(exported, n_ctx=64)
    plain_only.cuda_graph = True
    pair = ModelPair(plain_only, None, exported, None, RuntimeOptions(n_ctx=64))
    build_decoder(pair, SpecOptions("none"), capture_graphs=True)
    assert set(plain_only.steps) == {(1, 1)}


def reforward_error(runtime: OnnxRuntime, whole: np.ndarray) -> float:
    """Largest difference from `whole` (the logits of TOKENS in one pass) of the rows read
    from 2-token last-row steps at several positions, as a draft model re-forwards [its last
    proposal, the bonus token]: the first one captured, the rest replayed."""
    runtime.reset()
    runtime.forward(TOKENS[:3])
    error = 0.0
    for end in (5, 7, 9, 5):
        runtime.rollback(end - 2)
        row = runtime.forward(TOKENS[end - 2 : end], last_only=True)
        error = max(error, float(np.abs(row - whole[end - 1 : end]).max()))
    return error


def test_forward_past_the_context_is_refused(exported):
    small = OnnxRuntime(exported, n_ctx=8)
    with pytest.raises(RuntimeError, match="overflows n_ctx=8"):
        small.forward(TOKENS)


# --- the engine over ONNX runtimes ----------------------------------------------------------


@pytest.fixture(scope="module")
def draft_runtime(checkpoint, tmp_path_factory) -> OnnxRuntime:
    """The target's weights plus noise: a draft that agrees often, not always."""
    rng = np.random.default_rng(7)
    folder = tmp_path_factory.mktemp("draft")

    def noisy(_, w):
        return w + 0.3 * w.std() * rng.standard_normal(w.shape)

    hf = with_weights(checkpoint, folder / "hf", noisy)
    return OnnxRuntime(export_onnx(hf, folder / "onnx"), n_ctx=256)


@pytest.fixture(scope="module")
def plain(runtime):
    tokens = runtime.tokenize(PROMPT, special=True)
    ref = SpeculativeDecoder(runtime).generate(tokens, max_tokens=40, speculative=False)
    assert len(ref.tokens) >= 10, "the tiny model should not stop at once"
    return tokens, ref


@pytest.mark.parametrize("kind", ["ngram", "model"])
def test_greedy_speculative_equals_plain(runtime, draft_runtime, plain, kind):
    tokens, ref = plain
    drafter = ModelDrafter(draft_runtime) if kind == "model" else NgramDrafter()
    out = SpeculativeDecoder(runtime, [drafter], FixedPolicy(kind, 4)).generate(
        tokens, max_tokens=40
    )
    assert out.tokens == ref.tokens
    assert out.stats.n_draft_tokens > 0
    if kind == "model":
        assert 0.0 < out.stats.acceptance_rate < 1.0


# --- --exact: batch-invariant kernels -------------------------------------------------------

WIDTHS = (*range(2, 10), 17)


@pytest.fixture(scope="module")
def exported_int4(checkpoint, tmp_path_factory) -> Path:
    """MatMulNBits with int8 activations (accuracy level 4): the export's default for int4."""
    return export_onnx(checkpoint, tmp_path_factory.mktemp("int4"), quant="int4")


def width_deltas(runtime, tokens: list[int]) -> dict[int, float]:
    """Per width n: max |logits of n tokens in one pass - the same tokens one at a time|."""
    runtime.reset()
    runtime.forward(tokens[:8], last_only=True)
    start, deltas = 8, {}
    for n in WIDTHS:
        together = runtime.forward(tokens[start : start + n])
        runtime.rollback(start)
        alone = np.stack([runtime.forward([t])[-1] for t in tokens[start : start + n]])
        deltas[n] = float(np.abs(together - alone).max())
        start += n
    runtime.reset()
    return deltas


def test_the_default_gives_a_token_the_same_logits_at_every_width_and_thread_count(
    exported_int4,
):
    """By default ONNX Runtime's CPU provider pads one-token passes to two rows, so every pass
    takes MLAS's GEMM path: the same bits at every width, at one thread or two. The fastest
    kernels (exact=False) differ (MatMulNBits' one-row path sums in another order; measured
    ~4e-6 on this model), so the test can fail."""
    from edgespec.backends import RuntimeOptions, open_runtime

    tokens = [int(t) for t in np.random.default_rng(0).integers(3, 250, 100)]
    default = open_runtime(exported_int4, RuntimeOptions(n_ctx=256))
    assert default.batch_invariant
    assert width_deltas(default, tokens) == dict.fromkeys(WIDTHS, 0.0)
    one_thread = open_runtime(exported_int4, RuntimeOptions(n_ctx=256, n_threads=1))
    assert np.array_equal(one_thread.forward(tokens[:9]), default.forward(tokens[:9]))
    fastest = open_runtime(exported_int4, RuntimeOptions(n_ctx=256, exact=False))
    assert not fastest.batch_invariant
    assert max(width_deltas(fastest, tokens).values()) > 0


@pytest.mark.parametrize("kind", ["ngram", "model"])
@pytest.mark.parametrize(
    "sp", [SamplingParams(), SamplingParams(0.7, top_p=0.9, seed=3)], ids=["greedy", "seeded"]
)
def test_default_speculative_output_is_plain_decodings(exported_int4, draft_runtime, kind, sp):
    from edgespec.backends import RuntimeOptions, open_runtime

    target = open_runtime(exported_int4, RuntimeOptions(n_ctx=256))
    tokens = target.tokenize(PROMPT, special=True)
    ref = SpeculativeDecoder(target).generate(tokens, max_tokens=40, sp=sp, speculative=False)
    drafter = ModelDrafter(draft_runtime) if kind == "model" else NgramDrafter()
    out = SpeculativeDecoder(target, [drafter], FixedPolicy(kind, 4)).generate(
        tokens, max_tokens=40, sp=sp
    )
    assert out.tokens == ref.tokens
    assert out.stats.n_draft_tokens > 0


def test_exact_refuses_the_cuda_provider(exported):
    from edgespec.backends import RuntimeOptions, open_runtime

    with pytest.raises(ModelFileError, match="CPU provider only .*drop --exact or --device cuda"):
        open_runtime(exported, RuntimeOptions(device="cuda", exact=True))


def test_fixed_threads_are_refused_where_onnx_runtime_fixes_them_anyway(exported):
    from edgespec.backends import open_runtime

    with pytest.raises(ModelFileError) as e:
        open_runtime(exported, RuntimeOptions(load_aware_threads=False))
    assert str(e.value) == (
        f"{exported} is an ONNX model, whose threads ONNX Runtime fixes at load: "
        "--fixed-threads is for GGUF models (llama.cpp); drop it"
    )


def test_padding_rows_have_room_at_the_end_of_the_context(exported):
    """min_width keeps cache rows past n_ctx for the padding row: the last token fits."""
    padded = OnnxRuntime(exported, n_ctx=len(TOKENS), options=OnnxOptions(min_width=2))
    plain_rt = OnnxRuntime(exported, n_ctx=len(TOKENS))
    assert padded.n_ctx == len(TOKENS)
    padded.forward(TOKENS[:-1])
    plain_rt.forward(TOKENS[:-1])
    assert np.abs(padded.forward(TOKENS[-1:]) - plain_rt.forward(TOKENS[-1:])).max() < 1e-5


def test_exact_pads_every_pass_to_an_even_number_of_rows(exported):
    """MLAS's AVX-512 int8 GEMM takes rows in pairs and the odd one out by its one-row path
    (the demo models moved by up to 0.79 at odd widths on an AVX-512 Xeon, docs/exactness.md):
    --exact pads every pass to even rows, and the padding row of a pass ending at n_ctx fits."""
    from edgespec.backends import EXACT_ONNX

    n_ctx = len(TOKENS)
    exact = OnnxRuntime(exported, n_ctx=n_ctx, options=OnnxOptions(**EXACT_ONNX))
    assert [exact.padded_width(n) for n in range(1, 10)] == [2, 2, 4, 4, 6, 6, 8, 8, 10]
    plain_rt = OnnxRuntime(exported, n_ctx=n_ctx)
    assert exact.n_ctx == n_ctx
    exact.forward(TOKENS[:-3])
    plain_rt.forward(TOKENS[:-3])
    assert np.abs(exact.forward(TOKENS[-3:]) - plain_rt.forward(TOKENS[-3:])).max() < 1e-5


# --- vocabulary ------------------------------------------------------------------------------


def test_vocab_info_and_tokenizer(runtime, draft_runtime, checkpoint):
    from tokenizers import Tokenizer

    info = runtime.vocab_info()
    assert info.vocab_type == "bpe" and info.n_vocab == runtime.n_vocab
    assert info.eos_id == runtime.tokenize("<|im_end|>", special=True)[0]
    assert info.eos_id in info.eog_ids
    check_compatible(info, draft_runtime.vocab_info(), "target", "draft")
    hf = Tokenizer.from_file(str(checkpoint / "tokenizer.json"))
    assert runtime.tokenize(PROMPT, special=True) == hf.encode(PROMPT).ids
    assert len(runtime.tokenize("<|im_start|>", special=False)) > 1  # as text, not the token
    text = "def add(a, b):\n    return a + b é\n"
    assert runtime.detokenize(runtime.tokenize(text, special=False)) == text.encode()
    assert runtime.detokenize(runtime.tokenize("<|im_end|>", special=True)) == b""
    assert "im_start" in (runtime.chat_template() or "")


def test_vocab_info_agrees_with_llama_cpp(runtime, checkpoint, tmp_path):
    """Same tokenizer through the GGUF exporter and llama.cpp: same ids, text hash, BOS, EOS
    and EOG set, so either back-end can draft for the other."""
    pytest.importorskip("llama_cpp", reason="needs llama-cpp-python to compare with")
    from edgespec.export.hf_to_gguf import convert_hf_to_gguf
    from edgespec.runtimes.llamacpp import LlamaCppRuntime

    gguf = LlamaCppRuntime(convert_hf_to_gguf(checkpoint, tmp_path / "m.gguf"), vocab_only=True)
    assert runtime.vocab_info() == gguf.vocab_info()
    assert runtime.tokenize(PROMPT, special=True) == gguf.tokenize(PROMPT, special=True)
    assert all(runtime.piece(t) == gguf.piece(t) for t in range(runtime.n_vocab))


# --- bad files -------------------------------------------------------------------------------


def test_a_corrupt_onnx_file_is_named(exported, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(exported, bad)
    data = (bad / "model.onnx").read_bytes()
    (bad / "model.onnx").write_bytes(data[: len(data) // 3])
    with pytest.raises(ModelFileError, match=str(bad / "model.onnx")):
        OnnxRuntime(bad)
    (bad / "model.onnx").write_bytes(b"\x00garbage" * 100)
    with pytest.raises(ModelFileError, match="corrupt"):
        OnnxRuntime(bad)


def test_truncated_weights_are_named(exported, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(exported, bad)
    data = (bad / "model.onnx.data").read_bytes()
    (bad / "model.onnx.data").write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelFileError, match=r"model\.onnx \(weights in model\.onnx\.data\)"):
        OnnxRuntime(bad)


def test_missing_files_are_named(exported, tmp_path):
    with pytest.raises(ModelFileError, match="not a folder"):
        OnnxRuntime(tmp_path / "nowhere")
    bare = tmp_path / "bare"
    shutil.copytree(exported, bare)
    (bare / "tokenizer.json").unlink()
    with pytest.raises(ModelFileError, match="tokenizer.json is missing"):
        OnnxRuntime(bare)
    (bare / "model.json").unlink()
    with pytest.raises(ModelFileError, match="model.json is missing"):
        OnnxRuntime(bare)


def test_unknown_quant_is_refused(checkpoint, tmp_path):
    with pytest.raises(ValueError, match="unknown quant"):
        export_onnx(checkpoint, tmp_path, quant="int3")


# --- CUDA ------------------------------------------------------------------------------------


def cuda_available() -> str | None:
    """None when the CUDA EP can run here, else why not."""
    import onnxruntime as ort

    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return (
            "no CUDA EP: this onnxruntime build offers "
            f"{ort.get_available_providers()}; install onnxruntime-gpu on a machine with a GPU"
        )
    return None


@pytest.mark.gpu
def test_cuda_graph_steps_match_the_cpu(checkpoint, runtime, draft_runtime, plain, tmp_path):
    """Decode and verify steps replayed as CUDA graphs (one per width) give the CPU's logits
    and the plain greedy output at every k."""
    reason = cuda_available()
    if reason:
        pytest.skip(f"CUDA-graph steps not tested: {reason}")
    onnx_dir = export_onnx(checkpoint, tmp_path / "fp16", quant="fp16", compute="fp16")
    gpu = OnnxRuntime(onnx_dir, n_ctx=256, providers=["CUDAExecutionProvider"])
    assert gpu.on_cuda and gpu.cuda_graph
    assert np.abs(fresh_logits(gpu, TOKENS) - fresh_logits(runtime, TOKENS)).max() < 0.05
    tokens, _ = plain
    ref = SpeculativeDecoder(gpu).generate(tokens, max_tokens=40, speculative=False)
    for k in (4, 2, 4):  # the second k=4 request replays graphs captured by the first
        out = SpeculativeDecoder(
            gpu, [ModelDrafter(draft_runtime)], FixedPolicy("model", k)
        ).generate(tokens, max_tokens=40)
        assert out.tokens == ref.tokens


@pytest.mark.gpu
def test_a_drafts_reforward_replayed_as_a_cuda_graph_gives_the_cpus_row(
    checkpoint, runtime, tmp_path
):
    reason = cuda_available()
    if reason:
        pytest.skip(f"CUDA-graph steps not tested: {reason}")
    onnx_dir = export_onnx(checkpoint, tmp_path / "fp16", quant="fp16", compute="fp16")
    whole = fresh_logits(runtime, TOKENS)
    gpu = OnnxRuntime(onnx_dir, n_ctx=64, providers=["CUDAExecutionProvider"])
    assert gpu.on_cuda and gpu.cuda_graph
    assert reforward_error(gpu, whole) < 0.05
    assert gpu.steps[(2, 1)].graph_id == 19
    at_load = OnnxRuntime(onnx_dir, n_ctx=64, providers=["CUDAExecutionProvider"])
    assert at_load.capture_graphs([(1, 1), (2, 1), (3, 3)]) == 3  # captured at position 0
    assert reforward_error(at_load, whole) < 0.05  # replayed at 3, 5, 7 and 3


def test_cuda_asked_of_an_onnxruntime_without_it_runs_on_the_cpu_and_says_how_to_get_it(
    exported, caplog
):
    import onnxruntime as ort

    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("this onnxruntime has the CUDA provider")
    with caplog.at_level(logging.WARNING, logger="edgespec.runtimes.onnxrt"):
        rt = OnnxRuntime(exported, n_ctx=64, providers=["CUDAExecutionProvider"])
    said = [r.getMessage() for r in caplog.records if "not available" in r.getMessage()]
    assert said == [
        f"{exported}: ONNX Runtime's CUDA execution provider is not available here, so this "
        "runs on the CPU; install edgespec[onnx-gpu] (onnxruntime-gpu) in place of "
        "onnxruntime, and see `edgespec doctor`"
    ]
    assert not rt.on_cuda and not rt.cuda_graph
    assert rt.forward(TOKENS[:3]).shape == (3, rt.n_vocab)
    # the GPU kit's measures stop on such a session rather than time the CPU
    with pytest.raises(EdgespecError) as refused:
        require_cuda_provider(rt.session, exported)
    assert str(refused.value) == (
        f"{exported}: ONNX Runtime's CUDA execution provider did not load (see the log above)"
    )


def test_only_an_x86_cpu_without_avx512_leaves_odd_widths_unpadded():
    """MLAS's AVX-512 int8 GEMM takes rows in pairs (docs/exactness.md); an unmeasured
    architecture keeps the even rows too."""
    from edgespec.backends import exact_onnx_options

    assert exact_onnx_options("x86_64", ["avx2", "fma"]) == {"min_width": 2, "row_multiple": 1}
    for arch, flags in (("x86_64", ["avx2", "avx512f"]), ("aarch64", ["asimd"])):
        assert exact_onnx_options(arch, flags) == {"min_width": 2, "row_multiple": 2}
