"""HF checkpoint folders -> GGUF: llama.cpp's logits equal a numpy reference forward."""

import json

import numpy as np
import pytest

from edgespec.errors import ModelFileError
from edgespec.export.hf_to_gguf import convert_hf_to_gguf
from edgespec.runtimes.llamacpp import LlamaCppRuntime
from tests import numpy_reference
from tests.tiny_hf import make_tiny_hf

TOKENS = [5, 17, 42, 99, 150, 7, 33, 250, 12, 64]


@pytest.fixture(scope="module", params=["llama", "qwen2", "mistral"])
def checkpoint(request, tmp_path_factory):
    return make_tiny_hf(tmp_path_factory.mktemp(request.param), request.param, seed=3)


def llama_logits(gguf_path):
    return LlamaCppRuntime(gguf_path, n_ctx=64).forward(TOKENS)


def test_f32_export_matches_the_numpy_reference(checkpoint, tmp_path):
    """float32 weights vs float64 numpy: max |logit difference| < 0.02 on logits of O(10);
    the residue is llama.cpp's f16 KV cache (measured ~0.009)."""
    ref = numpy_reference.forward(checkpoint, TOKENS)
    got = llama_logits(convert_hf_to_gguf(checkpoint, tmp_path / "m.gguf", outtype="f32"))
    assert np.abs(got - ref).max() < 0.02


def test_f16_export_stays_within_a_looser_bound(checkpoint, tmp_path):
    """f16 weights: max |logit difference| < 0.1, argmax unchanged at every position."""
    ref = numpy_reference.forward(checkpoint, TOKENS)
    got = llama_logits(convert_hf_to_gguf(checkpoint, tmp_path / "m.gguf", outtype="f16"))
    assert np.abs(got - ref).max() < 0.1
    assert (got.argmax(-1) == ref.argmax(-1)).all()


def test_the_reference_would_notice_a_wrong_rope(checkpoint, tmp_path):
    """The comparison can fail: the same weights under another rope theta miss by > 0.2."""
    config = json.loads((checkpoint / "config.json").read_text())
    ref = numpy_reference.forward(checkpoint, TOKENS)
    got = llama_logits(convert_hf_to_gguf(checkpoint, tmp_path / "m.gguf", outtype="f32"))
    (tmp_path / "c").mkdir()
    for f in checkpoint.iterdir():
        (tmp_path / "c" / f.name).write_bytes(f.read_bytes())
    config["rope_theta"] = 500.0
    (tmp_path / "c" / "config.json").write_text(json.dumps(config))
    wrong = llama_logits(convert_hf_to_gguf(tmp_path / "c", tmp_path / "w.gguf", outtype="f32"))
    assert np.abs(wrong - ref).max() > 0.2 > 0.02 > np.abs(got - ref).max()


def test_tokenizer_and_chat_template_travel(checkpoint, tmp_path):
    from tokenizers import Tokenizer

    rt = LlamaCppRuntime(convert_hf_to_gguf(checkpoint, tmp_path / "m.gguf"), vocab_only=True)
    hf = Tokenizer.from_file(str(checkpoint / "tokenizer.json"))
    text = "def add(a, b):\n    return a + b"
    assert rt.tokenize(text, special=False) == hf.encode(text).ids
    assert rt.chat_template().startswith("{% for m in messages %}")
    assert rt.vocab_info().eos_id == 2


def test_missing_files_and_unknown_architectures(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"]}))
    with pytest.raises(ModelFileError) as e:
        convert_hf_to_gguf(tmp_path, tmp_path / "x.gguf")
    assert str(e.value) == (
        f"{tmp_path} is missing tokenizer.json, tokenizer_config.json, *.safetensors"
    )
    for name in ("tokenizer.json", "tokenizer_config.json", "model.safetensors"):
        (tmp_path / name).write_text("{}")
    with pytest.raises(ModelFileError) as e:
        convert_hf_to_gguf(tmp_path, tmp_path / "x.gguf")
    assert str(e.value) == (
        f"{tmp_path}: architecture GPT2LMHeadModel is not supported; supported: "
        "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, "
        "Gemma3ForCausalLM, Phi3ForCausalLM"
    )


def test_export_from_hf_folders_to_a_bundle(tmp_path):
    from edgespec.bundle import read_bundle
    from edgespec.export.orchestrator import ExportOptions, export_bundle

    target = make_tiny_hf(tmp_path / "t", "qwen2", seed=1)
    draft = make_tiny_hf(tmp_path / "d", "qwen2", seed=2, n_layer=1)
    out = export_bundle(ExportOptions(target, tmp_path / "bundle", draft, target_quant="q8_0"))
    b = read_bundle(out)
    assert [(m.role, m.quant, m.arch) for m in b.models] == [
        ("target", "q8_0", "qwen2"),
        ("draft", "q8_0", "qwen2"),
    ]
    ref = numpy_reference.forward(target, TOKENS)
    got = llama_logits(b.path("target"))
    assert np.abs(got - ref).max() < 0.5  # q8_0 weights, measured ~0.1


def test_tensors_written_a_block_at_a_time_give_the_same_file(checkpoint, tmp_path, monkeypatch):
    from edgespec.export import hf_to_gguf

    whole = convert_hf_to_gguf(checkpoint, tmp_path / "whole.gguf", outtype="f16")
    monkeypatch.setattr(hf_to_gguf, "BLOCK_BYTES", 1000)  # a few rows per block
    blocks = convert_hf_to_gguf(checkpoint, tmp_path / "blocks.gguf", outtype="f16")
    assert blocks.read_bytes() == whole.read_bytes()
