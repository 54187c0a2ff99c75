"""`edgespec export --format gguf` on tiny GGUF models built in the test run."""

import numpy as np
import pytest

from edgespec.app.cli import main
from edgespec.bundle import read_bundle
from edgespec.engine import SpeculativeDecoder
from edgespec.errors import EdgespecError, VocabularyMismatchError
from edgespec.export.orchestrator import ExportOptions, export_bundle
from edgespec.loader import SpecOptions, load_decoder
from edgespec.runtimes.llamacpp import LlamaCppRuntime


@pytest.fixture(scope="module")
def bundle(tiny_pair, tmp_path_factory):
    target, draft = tiny_pair
    out = tmp_path_factory.mktemp("export") / "bundle"
    return export_bundle(
        ExportOptions(target, out, draft, target_quant="q8_0", draft_quant="f16", tune=True)
    )


def test_bundle_holds_verified_models_and_policy(bundle):
    b = read_bundle(bundle)
    assert [(m.role, m.quant, m.path) for m in b.models] == [
        ("target", "q8_0", "target.q8_0.gguf"),
        ("draft", "f16", "draft.f16.gguf"),
    ]
    assert b.policy["reason"] == "chosen on the command line"
    errors = b.policy["weight_error"]  # q8_0: ~0.006 for Gaussian weights; f16: ~3e-4
    assert 0.001 < errors["target"]["mean"] < 0.01 and errors["draft"]["mean"] < 0.001
    assert errors["target"]["worst"][0][0].endswith(".weight")
    assert len(b.tune["target_s"]) == 17
    assert b.tokenizer["n_vocab"] == 279


def test_requantization_keeps_tokenizer_and_metadata(bundle, tiny_pair):
    src = LlamaCppRuntime(tiny_pair[0], vocab_only=True)
    out = LlamaCppRuntime(bundle / "target.q8_0.gguf", vocab_only=True)
    assert out.vocab_info() == src.vocab_info()
    assert out.chat_template() == src.chat_template()
    assert out.metadata("general.architecture") == "llama"
    assert out.n_ctx_train == src.n_ctx_train == 512


def test_q8_0_logits_stay_close_to_f32(bundle, tiny_pair):
    """Q8_0 (8-bit blocks of 32) on this tiny model: max |logit difference| below 0.75
    (measured 0.46; logits spread over about +-15), and the argmax agrees at >= 95% of
    positions."""
    tokens = list(range(40, 90))
    f32 = LlamaCppRuntime(tiny_pair[0], n_ctx=128).forward(tokens)
    q8 = LlamaCppRuntime(bundle / "target.q8_0.gguf", n_ctx=128).forward(tokens)
    assert np.abs(f32 - q8).max() < 0.75
    assert (f32.argmax(-1) == q8.argmax(-1)).mean() >= 0.95


def test_loading_a_bundle_generates_like_its_files(bundle):
    decoder = load_decoder(bundle, spec=SpecOptions(drafter="model", k=4))
    plain = SpeculativeDecoder(decoder.target).generate(
        [60, 61, 62], speculative=False, max_tokens=24
    )
    assert decoder.generate([60, 61, 62], max_tokens=24).tokens == plain.tokens


def test_draft_below_target_precision_is_refused(tiny_pair, tmp_path):
    opts = ExportOptions(
        tiny_pair[0], tmp_path / "b", tiny_pair[1], target_quant="q8_0", draft_quant="q4_0"
    )
    with pytest.raises(EdgespecError) as e:
        export_bundle(opts)
    assert str(e.value) == (
        "the draft would be stored at q4_0, below the target's q8_0: a coarser drafter loses "
        "acceptance faster than it gains speed; pick a draft precision at least the target's, "
        "or pass --force"
    )
    assert not (tmp_path / "b").exists()


def test_mismatched_vocabularies_are_refused_before_quantizing(tiny_pair, tmp_path, monkeypatch):
    from tests import tiny_gguf

    monkeypatch.setattr(tiny_gguf, "MERGES", [*tiny_gguf.MERGES[:-1], "Ġ b"])
    cfg = tiny_gguf.TinyConfig()
    other = tiny_gguf.write_gguf(tmp_path / "o.gguf", cfg, tiny_gguf.random_weights(cfg, 279, 2))
    with pytest.raises(VocabularyMismatchError, match="token text differs"):
        export_bundle(ExportOptions(tiny_pair[0], tmp_path / "b", other, target_quant="q8_0"))
    assert not (tmp_path / "b").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["o.gguf"]  # no staging left behind


def test_cli_export_refuses_a_non_empty_out(tiny_pair, tmp_path, capsys):
    (tmp_path / "keep.txt").write_text("mine")
    code = main(["export", "--target", str(tiny_pair[0]), "--out", str(tmp_path)])
    assert code == 2
    assert capsys.readouterr().err.strip() == (
        f"edgespec: error: {tmp_path} exists and is not empty; choose a new --out folder"
    )
    assert (tmp_path / "keep.txt").read_text() == "mine"


def test_tune_measures_a_bundle_and_stores_it_where_loading_finds_it(
    bundle, tmp_path, monkeypatch, capsys
):
    from edgespec.backends import RuntimeOptions
    from edgespec.controller.calibrate import load_tuned, tune_key
    from edgespec.pair import open_pair

    monkeypatch.setenv("EDGESPEC_HOME", str(tmp_path))
    assert main(["tune", "--target", str(bundle), "--n-max", "3", "--n-ctx", "256"]) == 0
    assert f"stored in {tmp_path / 'tune.json'}" in capsys.readouterr().out
    pair = open_pair(bundle, None, RuntimeOptions(n_ctx=256))
    assert (pair.target_path, pair.draft_path) == (
        bundle / "target.q8_0.gguf",
        bundle / "draft.f16.gguf",
    )
    curve = load_tuned(tune_key(pair))
    assert curve is not None and len(curve.target_s) == 3 and curve.draft_s > 0
