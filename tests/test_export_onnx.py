"""`edgespec export --format onnx`: GGUF sources, bundles of ONNX folders, mixed back-ends.

Tiny HF checkpoints are made in the test and converted to float32 GGUF with our own exporter,
so each model exists in both forms. Bounds:
- ONNX from a float32 GGUF vs ONNX from its HF folder: max |diff| < 1e-5 (measured 0.0: the
  same float32 weights, q/k un-permuted back to HF's layout for Llama).
- ONNX fp32 from a q8_0 GGUF vs llama.cpp on that q8_0 file: relative RMS < 0.05 (llama.cpp
  also rounds activations to 8 bits; measured ~0.01).
Greedy speculative output must equal plain greedy output token for token on every pairing.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime", reason="the ONNX back-end needs onnxruntime (edgespec[onnx])")
pytest.importorskip("llama_cpp", reason="GGUF sources are compared with llama.cpp")

from edgespec.app.cli import main  # noqa: E402
from edgespec.bundle import read_bundle  # noqa: E402
from edgespec.engine import SpeculativeDecoder  # noqa: E402
from edgespec.errors import BundleError, EdgespecError, ModelFileError  # noqa: E402
from edgespec.export.hf_to_gguf import convert_hf_to_gguf  # noqa: E402
from edgespec.export.onnx_export import export_onnx  # noqa: E402
from edgespec.export.orchestrator import ExportOptions, export_bundle  # noqa: E402
from edgespec.loader import SpecOptions, load_decoder  # noqa: E402
from edgespec.runtimes.llamacpp import LlamaCppRuntime  # noqa: E402
from edgespec.runtimes.onnxrt import OnnxRuntime  # noqa: E402
from tests.tiny_hf import make_tiny_hf, noisy_copy  # noqa: E402

TOKENS = [5, 17, 42, 99, 150, 7, 33, 250, 12, 64]
PROMPT = "<|im_start|>user\ndef add(a, b):\n    return a + b\n<|im_end|>\n<|im_start|>assistant\n"
TEXTS = [PROMPT, "for item in items:\n    total += item.price  # héllo 12345\n", "  \n\n\tx"]


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def models(request, tmp_path_factory) -> dict[str, Path]:
    """The target and a noisy draft, each as an HF folder and a float32 GGUF."""
    root = tmp_path_factory.mktemp(request.param)
    hf = make_tiny_hf(root / "hf", arch=request.param, seed=5)
    draft_hf = noisy_copy(hf, root / "draft_hf")
    return {
        "hf": hf,
        "gguf": convert_hf_to_gguf(hf, root / "target.gguf", outtype="f32"),
        "draft_hf": draft_hf,
        "draft_gguf": convert_hf_to_gguf(draft_hf, root / "draft.gguf", outtype="f32"),
    }


def test_a_gguf_source_exports_the_graph_of_its_hf_folder(models, tmp_path):
    from_hf = OnnxRuntime(export_onnx(models["hf"], tmp_path / "a"), n_ctx=64)
    from_gguf = OnnxRuntime(export_onnx(models["gguf"], tmp_path / "b"), n_ctx=64)
    assert np.abs(from_hf.forward(TOKENS) - from_gguf.forward(TOKENS)).max() < 1e-5
    assert from_hf.vocab_info() == from_gguf.vocab_info()
    for text in TEXTS:
        assert from_gguf.tokenize(text, special=True) == from_hf.tokenize(text, special=True)


def test_a_gguf_source_tokenizes_and_stops_as_llama_cpp(models, tmp_path):
    onnx = OnnxRuntime(export_onnx(models["gguf"], tmp_path / "o"), n_ctx=64)
    llama = LlamaCppRuntime(models["gguf"], vocab_only=True)
    assert onnx.vocab_info() == llama.vocab_info()  # BOS, EOS, EOG set and token texts
    for text in TEXTS:
        for special in (True, False):
            assert onnx.tokenize(text, special=special) == llama.tokenize(text, special=special)
    assert all(onnx.piece(t) == llama.piece(t) for t in range(onnx.n_vocab))


def test_a_quantized_gguf_source_is_dequantized(models, tmp_path):
    from edgespec.quant.gguf_quant import quantize_gguf

    q8 = quantize_gguf(models["gguf"], tmp_path / "q8.gguf", "q8_0")
    onnx = OnnxRuntime(export_onnx(q8, tmp_path / "o"), n_ctx=64).forward(TOKENS)
    llama = LlamaCppRuntime(q8, n_ctx=64).forward(TOKENS)
    assert np.sqrt(((onnx - llama) ** 2).mean() / (llama**2).mean()) < 0.05


@pytest.mark.parametrize("target_kind", ["onnx", "gguf"])
def test_mixed_back_ends_decode_exactly(models, tmp_path, target_kind):
    """An ONNX target with a GGUF draft, and the reverse, through the loader."""
    onnx_target = export_onnx(models["hf"], tmp_path / "t")
    onnx_draft = export_onnx(models["draft_hf"], tmp_path / "d")
    pairs = {"onnx": (onnx_target, models["draft_gguf"]), "gguf": (models["gguf"], onnx_draft)}
    target, draft = pairs[target_kind]
    decoder = load_decoder(target, draft, SpecOptions(drafter="model", k=3))
    assert {type(decoder.target), type(decoder.drafters["model"].runtime)} == {
        OnnxRuntime,
        LlamaCppRuntime,
    }
    tokens = decoder.target.tokenize(PROMPT, special=True)
    plain = SpeculativeDecoder(decoder.target).generate(tokens, max_tokens=32, speculative=False)
    out = decoder.generate(tokens, max_tokens=32)
    assert out.tokens == plain.tokens
    assert out.stats.n_accepted > 0 and out.stats.n_draft_tokens > out.stats.n_accepted


def test_cli_exports_an_onnx_bundle_that_loads_and_decodes(models, tmp_path, capsys):
    out = tmp_path / "bundle"
    args = ["export", "--format", "onnx", "--target", str(models["gguf"]), "--draft",
            str(models["draft_hf"]), "--out", str(out)]  # fmt: skip
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert f"bundle: {out}" in printed
    # 2 layers x (qkv, o, gate, up, down) + lm_head, each reported with its INT4 error
    assert "  target weights: 11 tensors, mean relative error 0." in printed
    bundle = read_bundle(out)
    assert [(m.role, m.format, m.quant, m.path) for m in bundle.models] == [
        ("target", "onnx", "int4", "target.int4"),
        ("draft", "onnx", "int4", "draft.int4"),
    ]
    assert bundle.policy["compute"] == "fp32"
    errors = bundle.policy["weight_error"]
    assert errors["draft"]["n_tensors"] == 11 and 0.05 < errors["target"]["mean"] < 0.3
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == [
        "bundle.json", "draft.int4", "target.int4"
    ]  # fmt: skip
    decoder = load_decoder(out, spec=SpecOptions(drafter="model", k=3))
    tokens = decoder.target.tokenize(PROMPT, special=True)
    plain = SpeculativeDecoder(decoder.target).generate(tokens, max_tokens=24, speculative=False)
    assert decoder.generate(tokens, max_tokens=24).tokens == plain.tokens


def test_cli_exports_an_int8_draft_beside_an_int4_target(models, tmp_path):
    """--draft-quant int8: the drafter kept above the target's INT4 (MatMulNBits bits=8)."""
    out = tmp_path / "bundle"
    args = ["export", "--format", "onnx", "--target", str(models["hf"]), "--draft",
            str(models["draft_hf"]), "--draft-quant", "int8", "--out", str(out)]  # fmt: skip
    assert main(args) == 0
    bundle = read_bundle(out)
    assert [(m.role, m.quant, m.path) for m in bundle.models] == [
        ("target", "int4", "target.int4"),
        ("draft", "int8", "draft.int8"),
    ]
    errors = bundle.policy["weight_error"]
    assert errors["draft"]["n_tensors"] == 11
    assert errors["draft"]["mean"] < errors["target"]["mean"] / 8  # 4 more bits: ~16x finer
    decoder = load_decoder(out, spec=SpecOptions(drafter="model", k=3))
    tokens = decoder.target.tokenize(PROMPT, special=True)
    plain = SpeculativeDecoder(decoder.target).generate(tokens, max_tokens=24, speculative=False)
    out_tokens = decoder.generate(tokens, max_tokens=24)
    assert out_tokens.tokens == plain.tokens
    assert out_tokens.stats.n_draft_tokens > 0


def test_a_changed_file_in_an_onnx_folder_is_refused(models, tmp_path):
    out = export_bundle(ExportOptions(models["hf"], tmp_path / "b", format="onnx"))
    read_bundle(out)  # verified once, stamped
    data = out / "target.int4" / "model.onnx.data"
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    data.write_bytes(bytes(raw))
    with pytest.raises(BundleError) as e:
        read_bundle(out)
    assert str(e.value) == (
        f"bundle file {out / 'target.int4'} does not match its sha256 in the manifest: it was "
        "modified or corrupted; export the bundle again"
    )
    data.write_bytes(bytes(raw[:-10]))
    with pytest.raises(BundleError, match="truncated or replaced"):
        read_bundle(out)


def test_gguf_precisions_are_refused_for_onnx(models, tmp_path):
    opts = ExportOptions(models["hf"], tmp_path / "b", format="onnx", target_quant="q4_k_m")
    with pytest.raises(EdgespecError) as e:
        export_bundle(opts)
    assert str(e.value) == (
        "precision 'q4_k_m' is not available for --format onnx; choose one of int4, int8, fp8, "
        "fp16, fp32"
    )
    assert list(tmp_path.iterdir()) == []


def test_an_onnx_draft_below_the_target_is_refused(models, tmp_path):
    opts = ExportOptions(models["hf"], tmp_path / "b", models["draft_hf"], format="onnx",
                         target_quant="fp16", draft_quant="int4")  # fmt: skip
    with pytest.raises(EdgespecError, match="the draft would be stored at int4, below the target"):
        export_bundle(opts)


def test_a_gguf_tokenizer_without_an_hf_equivalent_is_refused(tiny_pair, tmp_path):
    """The llama.cpp tiny pair uses pre-tokenizer "default", a multi-regex of llama.cpp's own."""
    with pytest.raises(ModelFileError) as e:
        export_onnx(tiny_pair[0], tmp_path / "o")
    assert str(e.value) == (
        f"{tiny_pair[0]}: tokenizer gpt2/default cannot be rebuilt for ONNX (SentencePiece, and "
        "byte-level BPE with pre-tokenizer gpt-2, qwen2, llama-bpe can); export from the HF "
        "checkpoint folder, whose tokenizer.json travels as it is"
    )


def test_a_corrupt_gguf_source_is_named(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 40)
    with pytest.raises(ModelFileError, match="is not a readable GGUF file"):
        export_onnx(bad, tmp_path / "o")
    assert not (tmp_path / "o").exists()


def test_a_gguf_only_option_is_refused_for_onnx(models, tmp_path):
    opts = ExportOptions(models["hf"], tmp_path / "b", format="onnx", output_tensor_type="q4_0")
    with pytest.raises(EdgespecError) as e:
        export_bundle(opts)
    assert str(e.value) == "--output-tensor-type applies to --format gguf only"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("quant", ["fp16", "int4", "fp8"])
def test_weights_written_a_block_at_a_time_give_the_same_files(
    models, tmp_path, monkeypatch, quant
):
    """Export memory is bounded by blocks of rows: with blocks of a few rows (every weight in
    many blocks, column blocks placed by mmap for fp16/fp8) the files are byte for byte those
    of one block per weight, from an HF folder and from a GGUF (q/k rows un-permuted)."""
    from edgespec.export import onnx_export

    def files(folder: Path) -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}

    for source in ("hf", "gguf"):
        whole = export_onnx(models[source], tmp_path / f"{source}-whole", quant=quant)
        monkeypatch.setattr(onnx_export, "BLOCK_BYTES", 3000)  # 11 rows of 64 floats
        blocks = export_onnx(models[source], tmp_path / f"{source}-blocks", quant=quant)
        monkeypatch.undo()
        assert files(blocks) == files(whole)


def test_progress_shows_on_a_terminal_only(models, tmp_path, monkeypatch, capsys):
    import io
    import sys

    args = ["export", "--format", "onnx", "--target", str(models["hf"]), "--out"]
    assert main([*args, str(tmp_path / "quiet")]) == 0
    assert capsys.readouterr().err == ""  # stderr is not a terminal under pytest

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert main([*args, str(tmp_path / "shown")]) == 0
    assert "\ronnx target.int4:   0%|          | 0/2 [" in terminal.getvalue()  # per layer
