"""A family's models pad their output layers to different sizes: Qwen2.5 has 151,665 real
tokens, 151,936 rows up to 3B and 152,064 from 7B. The extra rows are padding ("[PADi]" in
the GGUF token list, no token in tokenizer.json), so the 0.5B model drafts for the 7B.

Real llama.cpp contexts and ONNX Runtime sessions on tiny models built here, the target's
padding rows made likely (their logits scaled up) so that verification meets ids the draft
has no row for.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from edgespec.app.cli import main
from edgespec.drafters import ModelDrafter
from edgespec.errors import VocabularyMismatchError
from edgespec.loader import SpecOptions, load_decoder
from edgespec.runtimes.llamacpp import LlamaCppRuntime
from edgespec.runtimes.shared import token_text_hash
from edgespec.sampling import SamplingParams
from tests import tiny_gguf
from tests.test_draft_vocab import decodes_as_plain, record_proposals
from tests.test_llamacpp import assert_first_tokens_follow_the_target
from tests.tiny_hf import make_tiny_hf, noisy_copy

PAD = 24  # padding rows the longer model has
GGUF_ROWS = ("token_embd.weight", "output.weight")
HF_ROWS = ("model.embed_tokens.weight", "lm_head.weight")
PROMPT = "<|im_start|>user\ndef the rest(a, b):\n    return a<|im_end|>\n<|im_start|>assistant\n"


def padded(
    tensors: dict[str, np.ndarray], names: tuple[str, str], rows: int, seed: int
) -> dict[str, np.ndarray]:
    """The model with `rows` more rows in its (embedding, output) tensors `names`: random, the
    output rows at 1.5x a real row's spread, so that their logits win now and then."""
    rng = np.random.default_rng(seed)
    out = dict(tensors)
    for name, scale in zip(names, (1.0, 1.5)):
        w = tensors[name]
        extra = (rng.standard_normal((rows, w.shape[1])) * w.std() * scale).astype(np.float32)
        out[name] = np.concatenate([w, extra])
    return out


@pytest.fixture(scope="module")
def gguf_models(tmp_path_factory) -> dict[str, Path]:
    """target (real rows only), target-padded, draft (real rows), draft-padded (2 x PAD)."""
    folder = tmp_path_factory.mktemp("padded")
    cfg = tiny_gguf.TinyConfig()
    n_real = len(tiny_gguf.vocabulary()[0])
    target = tiny_gguf.random_weights(cfg, n_real, seed=0)
    draft = tiny_gguf.noisy_weights(target, seed=1)

    def write(name: str, tensors: dict, rows: int) -> Path:
        weights = padded(tensors, GGUF_ROWS, rows, seed=2) if rows else tensors
        pad_to = n_real + rows if rows else None
        return tiny_gguf.write_gguf(folder / f"{name}.gguf", cfg, weights, pad_to=pad_to)

    return {
        "target": write("target", target, 0),
        "target-padded": write("target-padded", target, PAD),
        "draft": write("draft", draft, 0),
        "draft-padded": write("draft-padded", draft, 2 * PAD),
    }


def test_padding_rows_at_the_end_are_left_out_of_the_vocabulary_hash():
    texts = [b"a", b"b", b"<|im_end|>"]
    real = token_text_hash(lambda t: texts[t], 3)
    longer = [*texts, b"[PAD3]", b"[PAD4]"]
    assert token_text_hash(lambda t: longer[t], 5) == real
    # a real token after padding, or padding named for another id, is part of the vocabulary
    inner = [b"a", b"[PAD1]", b"<|im_end|>"]
    assert token_text_hash(lambda t: inner[t], 3) != token_text_hash(lambda t: inner[t], 2)
    misnamed = [*texts, b"[PAD9]"]
    assert token_text_hash(lambda t: misnamed[t], 4) != real


@pytest.mark.parametrize("target, draft", [("target-padded", "draft"), ("target", "draft-padded")])
def test_greedy_and_seeded_speculation_on_padded_pairs_equal_plain(gguf_models, target, draft):
    """The loader's route (`edgespec run --target T --draft D`): a draft with fewer rows
    than the target, and one with more, decode as plain decoding does, greedy and seeded,
    and every drafted token is one of the target's ids."""
    decoder = load_decoder(gguf_models[target], gguf_models[draft], SpecOptions("model", k=4))
    drafter = decoder.drafters["model"]
    n_target = decoder.target.n_vocab
    assert (drafter.n_ids, n_target) == (n_target, decoder.target.vocab_info().n_vocab)
    proposed = record_proposals(drafter)
    sps = [SamplingParams(0.0), SamplingParams(1.5, seed=3), SamplingParams(1.5, seed=4)]
    results = decodes_as_plain(decoder, sps, max_tokens=32, prompt=PROMPT)
    assert all(0.0 < got.stats.acceptance_rate < 1.0 for got in results)
    assert proposed and max(proposed) < n_target
    emitted = [t for got in results for t in got.tokens]
    if target == "target-padded":  # the target emits ids the draft has no row for
        assert max(emitted) >= n_target - PAD


@pytest.mark.parametrize("sampler", ["gumbel", "rejection"])
def test_sampling_with_a_draft_padded_less_matches_the_target_distribution(gguf_models, sampler):
    """The first three tokens' joint law under speculative sampling with a draft that lacks
    the target's padding rows at k = 3 (rejection sampling's residual then holds ids q has no
    row for) equals the target's exact one, whose support includes padding ids. Bound:
    tests.stats.assert_law (chi-square, false failure 1e-6), N = 500."""
    target = LlamaCppRuntime(gguf_models["target-padded"], n_ctx=128)
    draft = LlamaCppRuntime(gguf_models["draft"], n_ctx=128)
    sp = SamplingParams(temperature=1.5, top_k=3, sampler=sampler)
    drafter = ModelDrafter(draft, n_ids=target.n_vocab)
    law = assert_first_tokens_follow_the_target(target, drafter, sp)
    padding = target.n_vocab - PAD
    assert sum(m for cell, m in law.items() if max(cell) >= padding) > 0.1


def test_q_rows_are_the_targets_width_and_zero_past_the_drafts_ids(gguf_models):
    """Also: a context holding a padding id the target emitted is read by the draft (the
    sync of plain steps and the catch-up of a proposal) without a row for it."""
    draft = LlamaCppRuntime(gguf_models["draft"], n_ctx=64)
    drafter = ModelDrafter(draft, n_ids=draft.n_vocab + PAD)
    tokens = draft.tokenize("the cat", special=False)
    tokens = [*tokens, draft.n_vocab + 3, *tokens, draft.n_vocab]
    drafter.sync(tokens[:-2])
    drafter.sync(tokens)
    assert draft.n_past == len(tokens) - 1
    out = drafter.propose(tokens, 3, SamplingParams(1.5, sampler="rejection"))
    assert out.q is not None and out.q.shape == (3, draft.n_vocab + PAD)
    assert not out.q[:, draft.n_vocab :].any()
    np.testing.assert_allclose(out.q.sum(axis=1), 1.0, rtol=1e-5)


def test_real_tokens_that_differ_are_still_refused(gguf_models, tmp_path, monkeypatch):
    monkeypatch.setattr(tiny_gguf, "MERGES", [*tiny_gguf.MERGES[:-1], "Ġ b"])
    cfg = tiny_gguf.TinyConfig()
    n_real = len(tiny_gguf.vocabulary()[0])
    other = tiny_gguf.write_gguf(
        tmp_path / "other.gguf", cfg, tiny_gguf.random_weights(cfg, n_real + PAD, 5),
        pad_to=n_real + PAD,
    )  # fmt: skip
    with pytest.raises(VocabularyMismatchError) as e:
        load_decoder(gguf_models["target-padded"], other, SpecOptions(drafter="model", k=4))
    assert str(e.value).startswith(
        f"draft {other} cannot draft for target {gguf_models['target-padded']}: token text "
        "differs (target "
    )


def pad_checkpoint(hf: Path, out: Path, rows: int) -> Path:
    """A copy of an HF checkpoint with `rows` more embedding and lm_head rows (config's
    vocab_size grows; tokenizer.json keeps its tokens), as Qwen2.5-7B is padded."""
    from safetensors.numpy import load_file, save_file

    shutil.copytree(hf, out)
    tensors = padded(load_file(hf / "model.safetensors"), HF_ROWS, rows, seed=9)
    save_file(tensors, str(out / "model.safetensors"))
    config = json.loads((hf / "config.json").read_text())
    config["vocab_size"] += rows
    (out / "config.json").write_text(json.dumps(config))
    return out


def test_an_onnx_bundle_of_a_padded_target_and_its_draft_decodes_as_plain(tmp_path):
    """`edgespec export --format onnx` of a target padded as Qwen2.5-7B is, with a draft
    that is not: the bundle is written, verified on load, and decodes as plain decoding."""
    hf = make_tiny_hf(tmp_path / "hf", arch="qwen2", seed=5)
    draft = noisy_copy(hf, tmp_path / "draft")
    target = pad_checkpoint(hf, tmp_path / "target", PAD)
    out = tmp_path / "bundle"
    args = ["export", "--format", "onnx", "--target", str(target), "--draft", str(draft),
            "--out", str(out)]  # fmt: skip
    assert main(args) == 0
    decoder = load_decoder(out, spec=SpecOptions(drafter="model", k=3))
    n_target = decoder.target.n_vocab
    assert (n_target, decoder.drafters["model"].runtime.n_vocab) == (384 + PAD, 384)
    decodes_as_plain(decoder, [SamplingParams(0.0), SamplingParams(1.2, top_k=40, seed=11)])


def test_a_gguf_bundle_of_a_padded_target_and_its_draft_decodes_as_plain(gguf_models, tmp_path):
    from edgespec.export.orchestrator import ExportOptions, export_bundle

    out = export_bundle(
        ExportOptions(gguf_models["target-padded"], tmp_path / "b", gguf_models["draft"],
                      target_quant="q8_0", draft_quant="q8_0")
    )  # fmt: skip
    decoder = load_decoder(out, spec=SpecOptions(drafter="model", k=3))
    decodes_as_plain(decoder, [SamplingParams(0.0)])
