"""A draft whose output layer keeps only some token ids (`edgespec export --draft-vocab`).

The cut makes a draft token cheaper and must never change what the target says: the draft
proposes only kept ids, its q is zero elsewhere, and rejection sampling (and Gumbel coupling)
keep the target's law whatever q is. Bounds: the joint law of the first three tokens by
tests/stats.assert_law (chi-square, false failure 1e-6, N = 5,000 requests); logits of the
kept columns equal the full export's to 1e-5 (float32 weights: the same rows and dot products).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from edgespec.controller import FixedPolicy
from edgespec.drafters import ModelDrafter
from edgespec.engine import SpeculativeDecoder
from edgespec.export.onnx_export import head_ranges
from edgespec.sampling import SamplingParams
from tests.fakes import FakeRuntime, logits_to_probs
from tests.stats import assert_law
from tests.test_engine import JOINT_PROMPT, exact_joint, joint_counts

KEPT = np.array([0, 2, 3])  # of a 5-token vocabulary: 1 and 4 can never be drafted


class KeptColumnsRuntime(FakeRuntime):
    """A FakeRuntime whose logits hold only the columns of `logit_ids`."""

    def __init__(self, kept: np.ndarray, **kwargs) -> None:
        super().__init__(**kwargs)
        self.logit_ids = kept

    def forward(self, tokens, *, last_only=False):
        return super().forward(tokens, last_only=last_only)[:, self.logit_ids]


def test_head_ranges_keep_the_lowest_ids_and_every_special_one():
    assert head_ranges(384, 200, [381, 383, 5, 382, 100, 999]) == [(0, 200), (381, 384)]
    assert head_ranges(384, 200, [250, 252]) == [(0, 200), (250, 251), (252, 253)]
    assert head_ranges(100, 200, [3]) == [(0, 100)]


def test_the_draft_keeps_its_added_and_end_of_generation_tokens():
    from types import SimpleNamespace

    from edgespec.export.onnx_bundle import draft_head
    from edgespec.runtime import VocabInfo

    ckpt = SimpleNamespace(tokenizer_json=json.dumps({"added_tokens": [{"id": 350}, {"id": 3}]}))
    vocab = VocabInfo(384, "gpt2", None, 351, frozenset({300, 351}), "")
    assert draft_head(ckpt, vocab, 200) == [(0, 200), (300, 301), (350, 352)]
    assert draft_head(ckpt, vocab, 0) is None
    assert draft_head(ckpt, vocab, 384) is None


JOINT_CASES = [
    ("rejection", SamplingParams(1.0)),
    ("rejection", SamplingParams(0.7, top_k=2)),
    ("gumbel", SamplingParams(1.0)),
    ("gumbel", SamplingParams(1.3, top_p=0.8)),
]


@pytest.mark.parametrize("sampler, sp", JOINT_CASES, ids=[f"{a}-{b}" for a, b in JOINT_CASES])
def test_a_cut_draft_keeps_the_target_joint_law(sampler, sp):
    """k = 3 from a draft that keeps 3 of 5 token ids: the first three tokens, each from a
    draft position whenever accepted, follow the target's exact joint law, ids 1 and 4
    included (only the target's residual can emit them). A q indexed by column instead of
    token id, or a draft token left a column number, fails here."""
    n_vocab, n = 5, 5000
    rt = FakeRuntime(n_vocab=n_vocab, n_ctx=64, seed=7, scale=1.5)
    rt.eog = 999
    draft = ModelDrafter(KeptColumnsRuntime(KEPT, n_vocab=n_vocab, n_ctx=64, seed=8, scale=1.5))
    dec = SpeculativeDecoder(rt, [draft], FixedPolicy("model", 3))
    counts, drafted = joint_counts(dec, replace(sp, sampler=sampler), n, n_vocab)
    assert drafted[2] >= n
    exact = exact_joint(rt, JOINT_PROMPT, replace(sp, seed=0))
    cut = np.ones(n_vocab, bool)
    cut[KEPT] = False
    some_cut = cut[:, None, None] | cut[None, :, None] | cut[None, None, :]
    assert exact[some_cut].sum() > 0.2  # ids the draft cannot propose are often emitted
    assert_law(counts, exact)


def test_a_cut_draft_proposes_token_ids_with_q_on_them():
    """Greedy: the kept id of the largest logit. Sampled: q over the whole vocabulary, the
    draft's softmax over the kept ids and exactly 0 elsewhere."""
    full = FakeRuntime(n_vocab=5, n_ctx=64, seed=8, scale=1.5)
    drafter = ModelDrafter(KeptColumnsRuntime(KEPT, n_vocab=5, n_ctx=64, seed=8, scale=1.5))
    context = [1, 2, 1, 2]
    greedy = drafter.propose(context, 1, SamplingParams(0.0))
    assert int(greedy.tokens[0]) == KEPT[np.argmax(full.logits_after(context)[KEPT])]
    sp = SamplingParams(1.0, sampler="rejection")
    draft = drafter.propose(context, 1, sp)
    assert draft.q is not None and draft.q.shape == (1, 5)
    expected = np.zeros(5, np.float32)
    expected[KEPT] = logits_to_probs(full.logits_after(context)[KEPT], sp)
    np.testing.assert_allclose(draft.q[0], expected, rtol=1e-6)
    assert int(draft.tokens[0]) in KEPT


def test_a_cut_drafts_gumbel_token_is_the_masked_full_models():
    """Gumbel coupling: the cut draft's token is the one a full draft whose cut ids have
    logit -inf draws with the same seed and position (the noise of the token ids, not of the
    columns: otherwise the draft is rarely the target's own token)."""
    from edgespec.sampling import token_dist

    full = FakeRuntime(n_vocab=5, n_ctx=64, seed=8, scale=1.5)
    drafter = ModelDrafter(KeptColumnsRuntime(KEPT, n_vocab=5, n_ctx=64, seed=8, scale=1.5))
    context = [1, 2, 1, 2]
    masked = np.full(5, -np.inf, np.float32)
    masked[KEPT] = full.logits_after(context)[KEPT]
    for seed in range(200):
        sp = SamplingParams(1.0, seed=seed, sampler="gumbel")
        want = token_dist(masked, sp).gumbel_max(seed, len(context))
        assert int(drafter.propose(context, 1, sp).tokens[0]) == want


# --- the ONNX export and runtime (real ONNX Runtime sessions) --------------------------------

pytest.importorskip("onnxruntime", reason="the ONNX back-end needs onnxruntime (edgespec[onnx])")

from edgespec.app.cli import main  # noqa: E402
from edgespec.bundle import read_bundle  # noqa: E402
from edgespec.errors import EdgespecError, ModelFileError  # noqa: E402
from edgespec.export.onnx_export import export_onnx  # noqa: E402
from edgespec.export.orchestrator import ExportOptions, export_bundle  # noqa: E402
from edgespec.loader import SpecOptions, load_decoder  # noqa: E402
from edgespec.runtimes.onnxrt import OnnxRuntime  # noqa: E402
from tests.tiny_hf import make_tiny_hf, noisy_copy  # noqa: E402

TOKENS = [5, 17, 42, 99, 150, 7, 33, 250, 12, 64]
PROMPT = "<|im_start|>user\ndef add(a, b):\n    return a + b\n<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def hf_pair(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("hf")
    hf = make_tiny_hf(root / "target", arch="qwen2", seed=5)
    return hf, noisy_copy(hf, root / "draft")


def test_the_kept_columns_are_the_full_models_logits(hf_pair, tmp_path):
    ranges = [(0, 200), (250, 260)]
    full = OnnxRuntime(export_onnx(hf_pair[1], tmp_path / "full"), n_ctx=64)
    cut = OnnxRuntime(export_onnx(hf_pair[1], tmp_path / "cut", logit_ranges=ranges), n_ctx=64)
    kept = np.r_[0:200, 250:260]
    np.testing.assert_array_equal(cut.logit_ids, kept)
    assert (cut.n_vocab, cut.n_logits, full.n_vocab) == (full.n_vocab, 210, full.n_vocab)
    assert np.abs(cut.forward(TOKENS) - full.forward(TOKENS)[:, kept]).max() < 1e-5
    assert cut.forward(TOKENS[:3], last_only=True).shape == (1, 210)
    assert json.loads((tmp_path / "cut" / "model.json").read_text())["logit_ranges"] == [
        [0, 200], [250, 260]
    ]  # fmt: skip


def test_a_bundle_with_a_cut_draft_decodes_as_plain(hf_pair, tmp_path):
    """--draft-vocab 200 on a 384-token vocabulary: the bundle records what the draft keeps,
    greedy and seeded sampled outputs equal plain
    decoding's, and every drafted token is a kept id."""
    out = tmp_path / "bundle"
    args = ["export", "--format", "onnx", "--target", str(hf_pair[0]), "--draft",
            str(hf_pair[1]), "--draft-vocab", "200", "--out", str(out)]  # fmt: skip
    assert main(args) == 0
    bundle = read_bundle(out)
    draft_json = json.loads((out / "draft.int4" / "model.json").read_text())
    assert draft_json["logit_ranges"] == [[0, 200]]  # the tiny tokenizer's specials come first
    assert bundle.policy["draft_vocab"] == 200
    assert json.loads((out / "target.int4" / "model.json").read_text())["logit_ranges"] is None
    decoder = load_decoder(out, spec=SpecOptions(drafter="model", k=3))
    drafter = decoder.drafters["model"]
    kept = set(drafter.runtime.logit_ids.tolist())
    assert decoder.target.vocab_info().eog_ids <= kept
    proposed = record_proposals(drafter)
    decodes_as_plain(decoder, [SamplingParams(0.0), SamplingParams(0.9, top_k=40, seed=11)])
    assert proposed and set(proposed) <= kept


def record_proposals(drafter) -> list[int]:
    """The list every token the drafter proposes from now on is appended to."""
    proposed: list[int] = []
    propose = drafter.propose
    drafter.propose = lambda *a: proposed.extend((d := propose(*a)).tokens.tolist()) or d
    return proposed


def decodes_as_plain(decoder, sps, max_tokens: int = 24, prompt: str = PROMPT) -> list:
    """Asserts that each sampling setting's speculative output equals plain decoding's, with
    drafts made; returns the speculative results."""
    tokens = decoder.target.tokenize(prompt, special=True)
    plain = SpeculativeDecoder(decoder.target)
    results = []
    for sp in sps:
        want = plain.generate(tokens, max_tokens=max_tokens, sp=sp, speculative=False).tokens
        got = decoder.generate(tokens, max_tokens=max_tokens, sp=sp)
        assert got.tokens == want
        assert got.stats.n_draft_tokens > 0
        results.append(got)
    return results


def test_a_cut_draft_is_refused_as_a_target(hf_pair, tmp_path):
    draft = export_onnx(hf_pair[1], tmp_path / "d", logit_ranges=[(0, 200)])
    with pytest.raises(EdgespecError) as e:
        load_decoder(draft, spec=SpecOptions(drafter="ngram"))
    assert str(e.value) == (
        f"{draft} keeps 200 of 384 token ids in its output layer (exported as a draft, "
        "--draft-vocab), so it can only draft: pass it as --draft, and a model exported in "
        "full as --target"
    )


@pytest.mark.parametrize(
    "ranges, why",
    [
        ([[5, 3]], "logit ranges must be ascending, disjoint [start, stop) pairs of token ids, "
                   "got [5, 3] after 0"),
        ([[0, 10], [5, 20]], "logit ranges must be ascending, disjoint [start, stop) pairs of "
                             "token ids, got [5, 20] after 10"),
        ([[0, True]], "logit ranges must be ascending, disjoint [start, stop) pairs of token "
                      "ids, got [0, True] after 0"),
        ([[0, 1000]], "logit ranges end at 1000, past the vocabulary of 384 tokens"),
        ([], "logit ranges must be a non-empty list, got []"),
        ("0-200", "logit ranges must be a non-empty list, got '0-200'"),
    ],
)  # fmt: skip
def test_hostile_logit_ranges_are_refused(hf_pair, tmp_path, ranges, why):
    folder = export_onnx(hf_pair[1], tmp_path / "d", logit_ranges=[(0, 200)])
    info = json.loads((folder / "model.json").read_text())
    (folder / "model.json").write_text(json.dumps(info | {"logit_ranges": ranges}))
    with pytest.raises(ModelFileError) as e:
        OnnxRuntime(folder, n_ctx=64)
    assert str(e.value) == f"{folder / 'model.json'}: {why}; export the model again"


def test_ranges_that_disagree_with_the_graph_are_refused(hf_pair, tmp_path):
    folder = export_onnx(hf_pair[1], tmp_path / "d", logit_ranges=[(0, 200)])
    info = json.loads((folder / "model.json").read_text())
    (folder / "model.json").write_text(json.dumps(info | {"logit_ranges": [[0, 201]]}))
    with pytest.raises(ModelFileError) as e:
        OnnxRuntime(folder, n_ctx=64)
    assert str(e.value) == (
        f"{folder / 'model.json'} says logit_ranges' token count 201 but the graph has 200; "
        "the folder mixes files of different models: export the model again"
    )


@pytest.mark.parametrize(
    "fmt, value, why",
    [
        ("onnx", -1, "--draft-vocab must be >= 0 (0 keeps every token id), got -1"),
        ("gguf", 200, "--draft-vocab applies to --format onnx only"),
    ],
)
def test_bad_draft_vocab_options_are_refused_before_any_work(hf_pair, tmp_path, fmt, value, why):
    opts = ExportOptions(hf_pair[0], tmp_path / "b", hf_pair[1], format=fmt, draft_vocab=value)
    with pytest.raises(EdgespecError) as e:
        export_bundle(opts)
    assert str(e.value) == why
    assert list(tmp_path.iterdir()) == []


def test_draft_vocab_0_and_a_small_vocabulary_keep_the_whole_layer(hf_pair, tmp_path):
    for value, name in ((0, "zero"), (None, "default")):
        out = export_bundle(ExportOptions(hf_pair[0], tmp_path / name, hf_pair[1],
                                          format="onnx", draft_vocab=value))  # fmt: skip
        assert read_bundle(out).policy["draft_vocab"] is None
        assert json.loads((out / "draft.int4" / "model.json").read_text())["logit_ranges"] is None
