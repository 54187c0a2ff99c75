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


# --- the command line, bundles and refusals -----------------------------------------------

COMMON = ["--max-tokens", "40", "--json", "--exact", "--n-ctx", "256", "--threads", "1"]
PROMPT = "<|im_start|>user\ndef the rest(a, b):\n    return a<|im_end|>\n<|im_start|>assistant\n"


def run_json(capsys, target: Path, *argv: str) -> dict:
    import json

    from edgespec.app.cli import main

    code = main(["run", "--target", str(target), "--prompt", PROMPT, *COMMON, *argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("sampling", [[], ["--temperature", "1.0", "--seed", "2"]],
                         ids=["greedy", "seeded"])  # fmt: skip
def test_run_drafts_with_the_mtp_layer_and_gives_plain_decodings_tokens(
    capsys, target_file, sampling
):
    """--drafter mtp at a fixed k, and --drafter auto (which opens the MTP layer beside
    prompt lookup): plain decoding's tokens."""
    want = run_json(capsys, target_file, *sampling, "--drafter", "none")["tokens"]
    assert len(want) >= 16
    for k in ("1", "5"):
        fixed = run_json(capsys, target_file, *sampling, "--drafter", "mtp", "--k", k)
        assert fixed["tokens"] == want, k
        assert set(fixed["stats"]["steps_by_drafter"]) == {"mtp"}
        assert fixed["stats"]["drafted_by_drafter"]["mtp"] > 0
    assert run_json(capsys, target_file, *sampling)["tokens"] == want


def test_auto_chooses_among_the_mtp_layer_and_prompt_lookup(target_file):
    opts = RuntimeOptions(n_ctx=256, n_threads=1)
    auto = load_decoder(target_file, None, SpecOptions(), opts)
    assert list(auto.drafters) == ["mtp", "ngram"]
    assert auto.target.mtp_layers == 1
    ngram = load_decoder(target_file, None, SpecOptions("ngram", k=3), opts)
    assert list(ngram.drafters) == ["ngram"]
    assert ngram.target.mtp_layers == 0  # not loaded where no MTP drafter may run


def test_an_exported_bundle_keeps_the_mtp_layer_and_drafts_with_it(capsys, target_file, tmp_path):
    """`edgespec export` of a GGUF target with an MTP layer: llama.cpp's quantizer keeps the
    layer, and the bundle's target drafts with it."""
    from edgespec.app.cli import main

    out = tmp_path / "bundle"
    argv = ["export", "--target", str(target_file), "--out", str(out), "--target-quant", "q8_0"]
    assert main(argv) == 0
    capsys.readouterr()
    want = run_json(capsys, out, "--drafter", "none")["tokens"]
    fixed = run_json(capsys, out, "--drafter", "mtp", "--k", "3")
    assert fixed["tokens"] == want
    assert fixed["stats"]["drafted_by_drafter"]["mtp"] > 0


@pytest.fixture(scope="module")
def no_mtp_files(tmp_path_factory) -> list[Path]:
    """A glm4moe target without its MTP layer and a Llama target (no MTP architecture)."""
    folder = tmp_path_factory.mktemp("nomtp")
    return [write_mtp_target(folder / "trunk.gguf", mtp_layers=0),
            build_tiny_pair(folder)[0]]  # fmt: skip


@pytest.mark.parametrize("which, arch", [(0, "glm4moe"), (1, "llama")])
def test_mtp_on_a_target_without_mtp_layers_is_refused_by_name(no_mtp_files, which, arch):
    path = no_mtp_files[which]
    with pytest.raises(EdgespecError) as caught:
        load_decoder(path, None, SpecOptions("mtp", k=3), RuntimeOptions(n_ctx=256, n_threads=1))
    assert str(caught.value) == (
        f"--drafter mtp needs a target with MTP layers: {path.name} has none this llama.cpp "
        "drafts with (GLM-4.5, GLM-4.7-Flash and Qwen3.5 GGUFs keep theirs, DeepSeek-V3's do "
        "not); choose another --drafter"
    )
    target = open_target(path)
    with pytest.raises(ModelFileError) as caught:
        target.open_mtp()
    assert str(caught.value) == (
        f"{path.name} carries no MTP layers this llama.cpp drafts with (a {arch!r} model; GGUFs "
        "of GLM-4.5, GLM-4.7-Flash, Qwen3.5 and the other llama_heads.MTP_ARCHS keep theirs, "
        "DeepSeek-V3's do not); drop --drafter mtp"
    )


def test_mtp_layers_of_an_architecture_left_out_are_refused_with_the_reason(
    target_file, monkeypatch, caplog
):
    """A GGUF that carries MTP layers of an architecture outside MTP_ARCHS (here glm4moe taken
    out, as qwen3next is): --drafter mtp is refused naming the reason, --drafter auto decodes
    on without the layers and logs the same line."""
    from edgespec.runtimes import llama_heads

    monkeypatch.setattr(llama_heads, "MTP_ARCHS", llama_heads.MTP_ARCHS - {"glm4moe"})
    monkeypatch.setitem(llama_heads.MTP_LEFT_OUT, "glm4moe", "a reason")
    want = (
        "glm.gguf carries MTP layers of a 'glm4moe' model, which edgespec does not draft with: "
        "a reason; choose another --drafter"
    )
    opts = RuntimeOptions(n_ctx=256, n_threads=1)
    with pytest.raises(EdgespecError) as caught:
        load_decoder(target_file, None, SpecOptions("mtp", k=3), opts)
    assert str(caught.value) == want
    with caplog.at_level("INFO", logger="edgespec.runtimes.llama_heads"):
        auto = load_decoder(target_file, None, SpecOptions(), opts)
    assert list(auto.drafters) == ["ngram"] and auto.target.mtp_layers == 0
    assert [r.getMessage() for r in caplog.records] == [want]
    with pytest.raises(ModelFileError, match=f"^{want}$"):
        auto.target.open_mtp()


def test_a_target_loaded_without_its_mtp_layer_refuses_to_draft_with_it(target_file):
    """The layer's weights are skipped unless asked for (LlamaOptions.mtp): no MTP context
    is made on a model without them (llama.cpp would abort on its missing tensors)."""
    target = open_target(target_file, mtp=False)
    assert target.mtp_layers == 0
    with pytest.raises(ModelFileError, match="carries no MTP layers this llama.cpp drafts with"):
        target.open_mtp()


def test_one_kind_of_head_reads_a_target(target_file, tmp_path):
    """A target feeds one kind of features: an MTP layer's final states or an EAGLE-3 head's
    extract layers, not both."""
    target = open_target(target_file)
    target.open_mtp()
    target.open_mtp()  # a second MTP head reads the same
    assert target.kept_for == "mtp"
    with pytest.raises(ModelFileError) as caught:
        target.check_features_for((0, 1, 1), "head.gguf")
    assert str(caught.value) == (
        "head.gguf: glm.gguf already feeds a draft head that reads other hidden states; open "
        "one kind of head on a target"
    )


def test_closing_the_mtp_head_leaves_the_target_whole(target_file, reference):
    """The MTP context borrows the target's model: closing it frees the context alone."""
    target = open_target(target_file)
    head = target.open_mtp()
    head.close()
    assert head.model is None and target.model
    tokens = reference[0]
    assert target.forward(tokens, last_only=True).shape == (1, target.n_vocab)


# --- a hybrid target: Qwen3.5's MTP layer -------------------------------------------------


@pytest.fixture(scope="module")
def qwen_pair(tmp_path_factory):
    """A tiny Qwen3.5 (gated delta nets, test_recurrent.py) with its MTP layer open."""
    from tests.tiny_hybrid import write_qwen35_target

    target = open_target(write_qwen35_target(tmp_path_factory.mktemp("q35") / "qwen35.gguf"))
    return target, target.open_mtp()


def test_a_qwen35_targets_features_are_its_final_state(qwen_pair):
    from tests.tiny_hybrid import qwen35_weights

    target, _ = qwen_pair
    tokens = target.tokenize(PROMPT, special=True)
    target.reset()
    logits = target.forward(tokens)
    output = qwen35_weights()["output.weight"]
    np.testing.assert_allclose(target.features(0, len(tokens)) @ output.T, logits, atol=0.02)


@pytest.mark.parametrize("k", [1, 3, 8])
def test_qwen35_mtp_output_equals_plain(qwen_pair, k):
    """Every rejected draft rolls the delta nets' state back through llama.cpp's snapshots."""
    target, head = qwen_pair
    check_output_equals_plain(target, head, *plain_reference(target), k)


def test_qwen35_mtp_rollback_at_every_position_leaves_a_fresh_state(qwen_pair):
    target, head = qwen_pair
    check_rollback_leaves_a_fresh_state(target, head, target.open_mtp(), plain_reference(target),
                                        SamplingParams(0.0))  # fmt: skip


def test_bench_runs_the_mtp_layer_as_method_mtp_and_within_auto(target_file):
    from edgespec.app.bench_command import run_bench
    from edgespec.app.suites import Prompt

    prompts = [Prompt("code-01", ({"role": "user", "content": "def the rest(a, b):"},))]
    opts = RuntimeOptions(n_ctx=256, n_threads=1, exact=True)
    report = run_bench(target_file, None, prompts, ["mtp", "auto"], [2, 4], 24, opts)
    rows = {(r["method"], r["k"]): r for r in report["rows"]}
    assert list(rows) == [("plain", "-"), ("mtp", 2), ("mtp", 4), ("auto", "auto")]
    assert all(r["identical"] == 1 for r in rows.values())
    assert rows[("mtp", 4)]["n_drafts"] > 0


def test_serve_drafts_with_qwen35s_mtp_layer_across_requests(capsys, tmp_path):
    """A server keeps the target's cache from request to request: the second request cuts
    the hybrid's cache back to the shared prompt (past its snapshots: the state is rebuilt)
    and drafts with the MTP layer; each answer is plain decoding's."""
    pytest.importorskip("uvicorn", reason="edgespec serve needs edgespec[serve]")
    from tests.test_head_cli import check_served_across_requests
    from tests.tiny_hybrid import write_qwen35_target

    target = write_qwen35_target(tmp_path / "qwen35.gguf")
    opts = RuntimeOptions(n_ctx=256, n_threads=1, exact=True)
    decoder = load_decoder(target, None, SpecOptions("mtp", k=3), opts, reuse_cache=True)
    prompts = [PROMPT, PROMPT + "def"]
    want = [run_json(capsys, target, "--drafter", "none", "--prompt", p)["tokens"]
            for p in prompts]  # fmt: skip
    check_served_across_requests(decoder, prompts, want)


def test_bench_head_cost_times_a_targets_mtp_layer(target_file, tmp_path, monkeypatch):
    """bench/head_cost.py on a GGUF target with an MTP layer (timings are not asserted)."""
    from tests.test_head_cli import run_head_cost

    report = run_head_cost(target_file, tmp_path, monkeypatch)
    assert (report["kind"], report["file"], report["layers"]) == ("mtp", None, [])
    assert len(report["propose_ms_by_k"]) == 8 and report["n_embd"] == TARGET.n_embd


def test_bench_adds_method_mtp_by_default_for_a_target_with_mtp_layers(target_file, no_mtp_files):
    from edgespec.app.bench_command import default_methods

    assert default_methods(target_file, None) == [
        "plain", "auto", "ngram", "mtp", "model", "llama-cpp-python-pld",
    ]  # fmt: skip
    for path in no_mtp_files:  # glm4moe without its layer; a Llama
        assert "mtp" not in default_methods(path, None)
    assert "mtp" not in default_methods(target_file, "head.gguf")  # the head is measured
