"""ONNX export of each family export/families.py names beyond Llama/Qwen2 (which
test_onnx.py covers): a tiny checkpoint in the publisher's layout, exported in both flavours,
its fp32 logits held to the float64 numpy reference of the family's forward pass (max |diff|
< 1e-4 on logits up to ~100: float32 rounding, measured ~3e-5), and its float32 GGUF, where
llama.cpp reads the family, to llama.cpp's logits (max |diff| < 0.2% of the largest logit:
llama.cpp's f16 KV cache, measured 0.015 of 52 on Qwen3, 0.021 of 114 on Gemma 3, 0.007 of 15
on Phi-3 mini, 0.030 of 90 on Phi-4 mini) and to the ONNX export of the HF folder (< 1e-5: the
same weights; Phi-4 mini's < 1e-4: its longrope factors and attention factor are float32 in
the GGUF, measured 2.3e-5)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests import numpy_reference
from tests.tiny_hf import make_tiny_hf

pytest.importorskip("onnxruntime", reason="the ONNX back-end needs onnxruntime (edgespec[onnx])")
pytest.importorskip("onnx", reason="the ONNX exporter needs onnx (edgespec[onnx])")

from edgespec.export.onnx_export import export_onnx  # noqa: E402
from edgespec.export.onnx_standard import StandardGraphBuilder  # noqa: E402
from edgespec.runtimes.onnxrt import OnnxRuntime  # noqa: E402
from edgespec.runtimes.onnxrt_standard import StandardOnnxRuntime  # noqa: E402

TOKENS = [5, 17, 42, 99, 150, 7, 33, 250, 12, 64]
FAMILIES = ["qwen3", "gemma3", "phi3", "phi4mini"]
REFERENCE = {"qwen3": numpy_reference.forward, "gemma3": numpy_reference.gemma3_forward,
             "phi3": numpy_reference.phi3_forward}  # fmt: skip
LAYERS = {"gemma3": 6}  # five sliding layers and a global one, as llama.cpp's pattern
# Phi-4 mini's heads (128 wide, 96 turned) at half size: ONNX Runtime's GroupQueryAttention
# turns a multiple of 16 dimensions, so 48 of 64
SHAPES = {"phi4mini": {"n_embd": 128, "n_head": 2, "n_head_kv": 1}}
# Llama 3.1's rope_scaling fields, its original context cut so that ten tokens feel it
LLAMA3_SCALING = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                  "original_max_position_embeddings": 8, "rope_type": "llama3"}  # fmt: skip


@pytest.fixture(scope="module", params=FAMILIES)
def checkpoint(request, tmp_path_factory) -> Path:
    arch = request.param
    folder = tmp_path_factory.mktemp(arch)
    return make_tiny_hf(folder, arch=arch, seed=3, n_layer=LAYERS.get(arch, 2),
                        **SHAPES.get(arch, {}))  # fmt: skip


def reference(checkpoint: Path, tokens: list[int]) -> np.ndarray:
    config = json.loads((checkpoint / "config.json").read_text())
    return REFERENCE[config["model_type"].removesuffix("_text")](checkpoint, tokens)


def test_fp32_logits_match_the_numpy_reference_in_both_flavours(checkpoint, tmp_path):
    """Ten tokens through a window of four: the sliding layers' window is held to it too,
    in one pass and a token at a time through the cache."""
    ref = reference(checkpoint, TOKENS)
    ort = OnnxRuntime(export_onnx(checkpoint, tmp_path / "ort"), n_ctx=64)
    standard = export_onnx(checkpoint, tmp_path / "std", builder=StandardGraphBuilder)
    for got in (ort.forward(TOKENS), StandardOnnxRuntime(standard, n_ctx=64).forward(TOKENS)):
        assert got.shape == ref.shape
        assert np.abs(got - ref).max() < 1e-4
    ort.reset()
    one_by_one = np.concatenate([ort.forward([t]) for t in TOKENS])
    assert np.abs(one_by_one - ref).max() < 1e-4


def test_its_gguf_gives_llama_cpps_logits_and_the_same_onnx_graph(checkpoint, tmp_path):
    pytest.importorskip("llama_cpp")
    from edgespec.export.hf_to_gguf import convert_hf_to_gguf
    from edgespec.runtimes.llamacpp import LlamaCppRuntime

    gguf = convert_hf_to_gguf(checkpoint, tmp_path / "m.gguf", outtype="f32")
    ref = reference(checkpoint, TOKENS)
    llama_cpp = LlamaCppRuntime(gguf, n_ctx=64).forward(TOKENS)
    assert np.abs(llama_cpp - ref).max() < 2e-3 * np.abs(ref).max()
    from_gguf = OnnxRuntime(export_onnx(gguf, tmp_path / "g"), n_ctx=64).forward(TOKENS)
    from_hf = OnnxRuntime(export_onnx(checkpoint, tmp_path / "h"), n_ctx=64).forward(TOKENS)
    config = json.loads((checkpoint / "config.json").read_text())
    assert np.abs(from_gguf - from_hf).max() < (1e-4 if config["rope_scaling"] else 1e-5)


def test_a_llama_3_gguf_keeps_its_rope_freqs(tmp_path):
    """Llama 3.1's llama3 RoPE scaling becomes llama.cpp's rope_freqs tensor in the GGUF, and
    the ONNX export of that GGUF applies it (the scaling, made to matter at ten tokens, moves
    the logits by far more than the bound)."""
    pytest.importorskip("llama_cpp")
    from edgespec.export.hf_to_gguf import convert_hf_to_gguf
    from edgespec.runtimes.llamacpp import LlamaCppRuntime

    hf = make_tiny_hf(tmp_path / "hf", arch="llama", seed=4, n_head=2, n_head_kv=1)
    plain = numpy_reference.forward(hf, TOKENS)
    config = json.loads((hf / "config.json").read_text())
    config["rope_scaling"] = LLAMA3_SCALING
    (hf / "config.json").write_text(json.dumps(config))
    ref = numpy_reference.forward(hf, TOKENS)
    assert np.abs(ref - plain).max() > 0.5
    gguf = convert_hf_to_gguf(hf, tmp_path / "m.gguf", outtype="f32")
    llama_cpp = LlamaCppRuntime(gguf, n_ctx=64).forward(TOKENS)
    assert np.abs(llama_cpp - ref).max() < 2e-3 * np.abs(ref).max()
    got = OnnxRuntime(export_onnx(gguf, tmp_path / "onnx"), n_ctx=64).forward(TOKENS)
    assert np.abs(got - ref).max() < 1e-4


def test_a_gguf_rope_scaling_the_exporter_does_not_compute_is_refused(tmp_path):
    pytest.importorskip("gguf")
    from edgespec.errors import ModelFileError
    from edgespec.export.checkpoint import read_checkpoint
    from tests.tiny_gguf import TinyConfig, random_weights, vocabulary, write_gguf

    def yarn(writer) -> None:
        writer.add_string("llama.rope.scaling.type", "yarn")

    cfg = TinyConfig()
    weights = random_weights(cfg, len(vocabulary()[0]), 0)
    path = write_gguf(tmp_path / "y.gguf", cfg, weights, more_metadata=yarn, pre="gpt-2")
    with pytest.raises(ModelFileError) as e:
        read_checkpoint(path)
    assert str(e.value) == (
        f"{path}: RoPE scaling 'yarn' in a GGUF is not supported by the ONNX exporter (linear "
        "and Llama 3's rope_freqs are); export from the HF checkpoint folder instead"
    )


def write_spm_gguf(path: Path, add_space_prefix: bool) -> Path:
    """A tiny Llama GGUF with a SentencePiece vocabulary (tokenizer.ggml.model "llama", as
    Gemma and Llama 2 ship): specials, the 256 byte tokens, and pieces with scores that make
    the merge order matter."""
    import gguf

    from tests.tiny_gguf import TinyConfig, add_hparams, random_weights, write_tensors

    pieces = list("\u2581abdehilnorstw,.") + [
        "th", "he", "\u2581t", "\u2581th", "\u2581the", "an", "nd", "\u2581a", "\u2581and",
        "or", "wo", "\u2581w", "\u2581wor", "ld", "rld", "\u2581world", "is", "\u2581is", "er",
    ]  # fmt: skip
    rng = np.random.default_rng(0)
    tokens = ["<pad>", "</s>", "<s>", "<unk>"] + [f"<0x{b:02X}>" for b in range(256)] + pieces
    types = [3, 3, 3, 2] + [6] * 256 + [1] * len(pieces)
    scores = [0.0] * 260 + [float(-len(p) * 0.1 - rng.random()) for p in pieces]
    cfg = TinyConfig()
    writer = gguf.GGUFWriter(str(path), "llama")
    add_hparams(writer, cfg, "edgespec-tiny-spm")
    writer.add_head_count_kv(cfg.n_head_kv)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(2)
    writer.add_eos_token_id(1)
    writer.add_unk_token_id(3)
    writer.add_add_bos_token(True)
    writer.add_add_space_prefix(add_space_prefix)
    return write_tensors(writer, random_weights(cfg, len(tokens), 0), path)


@pytest.mark.parametrize("add_space_prefix", [False, True])
def test_a_sentencepiece_gguf_tokenizes_as_llama_cpp_after_export(tmp_path, add_space_prefix):
    pytest.importorskip("llama_cpp")
    from edgespec.runtimes.llamacpp import LlamaCppRuntime

    gguf = write_spm_gguf(tmp_path / "spm.gguf", add_space_prefix)
    llama_cpp = LlamaCppRuntime(gguf, n_ctx=64)
    onnx = OnnxRuntime(export_onnx(gguf, tmp_path / "onnx"), n_ctx=64)
    texts = [
        "the world and the answer",
        " is the  world, or is it.",
        "Tallinn \u00fcn\u00efc\u00f6d\u00e9 \U0001f680",
        "</s>the",
    ]
    for text in texts:
        assert onnx.tokenize(text, special=True) == llama_cpp.tokenize(text, special=True)
    ids = llama_cpp.tokenize(texts[1], special=False)
    assert onnx.detokenize(ids) == llama_cpp.detokenize(ids)


@pytest.mark.parametrize("sampled", [False, True])
def test_speculative_output_is_plain_decodings_under_exact(checkpoint, tmp_path, sampled):
    """Greedy and seeded: prompt lookup and a draft model leave the output as it is, under
    --exact's padded passes."""
    from edgespec.backends import EXACT_ONNX
    from edgespec.controller import FixedPolicy
    from edgespec.drafters import ModelDrafter, NgramDrafter
    from edgespec.engine import SpeculativeDecoder
    from edgespec.runtimes.onnxrt import OnnxOptions
    from edgespec.sampling import SamplingParams
    from tests.tiny_hf import noisy_copy

    exact = OnnxOptions(**EXACT_ONNX)
    target = OnnxRuntime(export_onnx(checkpoint, tmp_path / "t"), n_ctx=256, options=exact)
    draft_hf = noisy_copy(checkpoint, tmp_path / "draft_hf")
    draft = OnnxRuntime(export_onnx(draft_hf, tmp_path / "d"), n_ctx=256, options=exact)
    sp = SamplingParams(temperature=0.8, seed=3) if sampled else SamplingParams()
    tokens = [5, 17, 42, 99, 5, 17, 42, 150, 7, 5, 17]
    plain = SpeculativeDecoder(target).generate(tokens, max_tokens=30, sp=sp, speculative=False)
    for kind, drafter in (("ngram", NgramDrafter()), ("model", ModelDrafter(draft))):
        policy = FixedPolicy(kind, 4)
        out = SpeculativeDecoder(target, [drafter], policy).generate(tokens, max_tokens=30, sp=sp)
        assert out.tokens == plain.tokens, kind
        assert out.stats.n_draft_tokens > 0


NOT_COMPUTED = ", which the ONNX exporter does not compute for gemma3; export to GGUF instead"


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("final_logit_softcapping", 30.0,
         "config.json: final_logit_softcapping is 30.0" + NOT_COMPUTED),
        ("attn_logit_softcapping", 50.0,
         "config.json: attn_logit_softcapping is 50.0" + NOT_COMPUTED),
        ("use_bidirectional_attention", True,
         "config.json: use_bidirectional_attention is True" + NOT_COMPUTED),
        ("hidden_activation", "gelu",
         "config.json: activation 'gelu' is not gemma3's gelu_pytorch_tanh, the one the ONNX "
         "exporter computes for it; export to GGUF instead"),
        ("layer_types", ["sliding_attention"] * 5 + ["chunked_attention"],
         "layer_types ['sliding_attention', 'sliding_attention', 'sliding_attention', "
         "'sliding_attention', 'sliding_attention', 'chunked_attention'] is not one of "
         "sliding_attention / full_attention per layer; check config.json"),
    ],
)  # fmt: skip
def test_a_gemma3_field_the_graph_does_not_compute_is_refused(tmp_path, field, value, message):
    assert export_refusal(tmp_path, {field: value}, arch="gemma3", n_layer=6) == message


def export_refusal(tmp_path: Path, fields: dict, **tiny) -> str:
    """The one-line error exporting a tiny checkpoint (make_tiny_hf's **tiny) to ONNX gives,
    its config.json's fields set as given."""
    from edgespec.errors import ModelFileError

    hf = make_tiny_hf(tmp_path / "hf", **tiny)
    config = json.loads((hf / "config.json").read_text())
    (hf / "config.json").write_text(json.dumps(config | fields))
    with pytest.raises(ModelFileError) as e:
        export_onnx(hf, tmp_path / "onnx")
    return str(e.value)


def test_phi4_minis_rope_is_computed_and_cuts_the_context(tmp_path):
    """Partial rotary and longrope move the logits by far more than the bound the references
    hold them to; the export's context stops at the original one, and says so."""
    hf = make_tiny_hf(tmp_path / "hf", arch="phi4mini", seed=3, **SHAPES["phi4mini"])
    ref = numpy_reference.phi3_forward(hf, TOKENS)
    config = json.loads((hf / "config.json").read_text())
    plain = config | {"rope_scaling": None, "partial_rotary_factor": 1.0}
    (hf / "config.json").write_text(json.dumps(plain))
    assert np.abs(numpy_reference.phi3_forward(hf, TOKENS) - ref).max() > 1.0
    (hf / "config.json").write_text(json.dumps(config))
    from edgespec.export.checkpoint import read_checkpoint

    assert read_checkpoint(hf).notes == [
        "context 512 cut to 256: longrope's long factors are not computed"
    ]
    info = json.loads((export_onnx(hf, tmp_path / "onnx") / "model.json").read_text())
    assert info["context_length"] == 256


GQA_TURNS = (
    "partial_rotary_factor 0.375 turns 24 of 64 dimensions of a head, and ONNX "
    "Runtime's GroupQueryAttention turns a multiple of 16; export with --format tensorrt or "
    "to GGUF instead"
)


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("lm_head_bias", True, "config.json: lm_head_bias is True, which the ONNX exporter does "
         "not compute for phi3; export to GGUF instead"),
        ("mlp_bias", True, "config.json: mlp_bias is True, which the ONNX exporter does not "
         "compute for phi3; export to GGUF instead"),
        ("rope_scaling", {"type": "yarn", "factor": 2.0}, "rope_scaling type 'yarn' is not "
         "supported by the ONNX exporter (default, linear, llama3, longrope are); export to "
         "GGUF instead"),
        ("rope_scaling", {"type": "longrope", "short_factor": [1.0] * 23, "long_factor": [1.0]},
         "rope_scaling short_factor has 23 entries where the rotary dimension needs 24 (one per "
         "rotated pair); check config.json"),
        ("partial_rotary_factor", 0.375, GQA_TURNS),
    ],
)  # fmt: skip
def test_a_phi3_field_the_graph_does_not_compute_is_refused(tmp_path, field, value, message):
    tiny = {"arch": "phi4mini", "n_layer": 1, **SHAPES["phi4mini"]}
    assert export_refusal(tmp_path, {field: value}, **tiny) == message
