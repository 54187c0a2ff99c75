"""export/eagle3_layouts.py and export/torch_bin.py: a tiny head in each publisher's layout
(tests/published_heads.py) converts, loads on llama.cpp, drafts what the same weights in
EAGLE's layout draft, and gives plain decoding's output; the layer ids by LAYER_IDS_RULE; every
config field used or refused by name; a pickle that is not plain tensors refused, nothing run."""

import json
from pathlib import Path

import numpy as np
import pytest

from edgespec.controller import FixedPolicy
from edgespec.drafters.head import HeadDrafter
from edgespec.engine import SpeculativeDecoder
from edgespec.errors import ModelFileError
from edgespec.export.eagle3_convert import convert_eagle3
from edgespec.runtimes.shared import HeadMismatchError
from edgespec.sampling import SamplingParams
from tests.published_heads import relayout, save_torch_bin, torch_pickle
from tests.test_eagle import (
    CFG,
    PROMPT,
    SEEDED,
    check_output_equals_plain,
    open_target,
    plain_reference,
    put_target_at,
)
from tests.test_eagle3_convert import N_VOCAB, gguf_file, write_hf_head
from tests.tiny_eagle import head_weights, reference_draft, write_head
from tests.tiny_gguf import random_weights, write_gguf

LAYOUTS = {  # layout -> (ids as that publisher writes them, the inputs they name)
    "eagle": (None, [2, 2, 1]),  # EAGLE's default for the 4-layer target
    "angelslim": (None, [2, 2, 1]),
    "specforge": ([1, 0, 2], [2, 1, 3]),  # layer outputs, under eagle_config
    "speculators": ([2, 1, 3], [2, 1, 3]),  # layer inputs, at the top level
}


@pytest.fixture(scope="module")
def target(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("layouts")
    return write_gguf(folder / "target.gguf", CFG, random_weights(CFG, N_VOCAB, 0))


def published(folder: Path, layout: str, **kwargs) -> Path:
    given, inputs = LAYOUTS[layout]
    tensors = kwargs.pop("tensors", {})
    if layout == "speculators":  # its own copy of the target's embedding
        tensors["embed_tokens.weight"] = random_weights(CFG, N_VOCAB, 0)["token_embd.weight"]
    return relayout(write_hf_head(folder, layers=None, tensors=tensors, **kwargs), layout,
                    layers=given)  # fmt: skip


@pytest.mark.parametrize("layout", LAYOUTS)
def test_each_layout_converts_loads_and_drafts_as_eagles(target, tmp_path, layout):
    """The converted head reads the layers the publisher meant and drafts what tiny_eagle's
    head with the same weights drafts; speculative output equals plain, greedy and seeded."""
    out = convert_eagle3(published(tmp_path / layout, layout), target, tmp_path / "h.gguf")
    tensors, meta = gguf_file(out)
    inputs = LAYOUTS[layout][1]
    assert meta["eagle3.target_layers"] == inputs
    assert ("token_embd.weight" in tensors) == (layout == "speculators")
    rt, tiny_rt = open_target(target), open_target(target)
    head = rt.open_head(str(out))
    tiny = tiny_rt.open_head(str(write_head(tmp_path / "tiny.gguf", CFG, layers=tuple(inputs))))
    tokens = rt.tokenize(PROMPT, special=True)
    plain = SpeculativeDecoder(rt).generate(tokens, max_tokens=12, speculative=False)
    context = tokens + plain.tokens[:6]
    drafts = []
    for r, h in ((rt, head), (tiny_rt, tiny)):
        put_target_at(r, context)
        drafter = HeadDrafter(r, h)
        drafter.reset(np.random.default_rng(0))
        drafts.append(drafter.propose(context, 6, SamplingParams(0.0)).tokens.tolist())
    assert drafts[0] == drafts[1]
    for sp in (SamplingParams(0.0), SEEDED[0]):
        want = SpeculativeDecoder(rt).generate(tokens, max_tokens=16, sp=sp, speculative=False)
        got = SpeculativeDecoder(rt, [HeadDrafter(rt, head)], FixedPolicy("eagle", 3)).generate(
            tokens, max_tokens=16, sp=sp
        )
        assert got.tokens == want.tokens, sp
        assert got.stats.n_draft_tokens > 0


def test_transformers5_rope_parameters_and_yarn_reach_the_gguf(target, tmp_path):
    """rope_parameters (transformers 5) gives rope_theta and the scaling; YaRN's as llama.cpp's
    converter writes it; the head loads and drafts."""
    params = {"rope_type": "yarn", "rope_theta": 50000.0, "factor": 4.0,
              "original_max_position_embeddings": 128, "beta_fast": 32.0}  # fmt: skip
    hf = write_hf_head(tmp_path / "head", config={"rope_theta": None, "rope_parameters": params})
    tensors, meta = gguf_file(convert_eagle3(hf, target, tmp_path / "h.gguf"))
    assert meta["eagle3.rope.freq_base"] == 50000.0
    assert meta["eagle3.rope.scaling.type"] == "yarn"
    assert meta["eagle3.rope.scaling.factor"] == 4.0
    assert meta["eagle3.rope.scaling.original_context_length"] == 128
    assert meta["eagle3.rope.scaling.yarn_beta_fast"] == 32.0
    rt = open_target(target)
    head = rt.open_head(str(tmp_path / "h.gguf"))
    check_output_equals_plain(rt, head, *plain_reference(rt), 4)


def test_mrope_and_nested_norm_before_fc_convert(target, tmp_path):
    """mrope: text positions are equal in all three sections, so plain RoPE (no metadata);
    norm_before_fc under eagle_config (NVIDIA's heads) gives enc.output_norm, and loads."""
    hf = write_hf_head(
        tmp_path / "head",
        config={"rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]},
                "eagle_config": {"norm_before_fc": True}},
        tensors={"input_norm.weight": np.ones(3 * 64, np.float32)},
    )  # fmt: skip
    tensors, meta = gguf_file(convert_eagle3(hf, target, tmp_path / "h.gguf"))
    assert "eagle3.rope.scaling.type" not in meta and meta["eagle3.norm_before_fc"] is True
    assert tensors["enc.output_norm.weight"].shape == (192,)
    open_target(target).open_head(str(tmp_path / "h.gguf")).close()


def test_a_head_without_lm_head_uses_the_targets_output(target, tmp_path):
    hf = write_hf_head(tmp_path / "head", tensors={"lm_head.weight": None})
    tensors, _ = gguf_file(convert_eagle3(hf, target, tmp_path / "h.gguf"))
    assert "output.weight" not in tensors
    rt = open_target(target)
    head = rt.open_head(str(tmp_path / "h.gguf"))
    check_output_equals_plain(rt, head, *plain_reference(rt), 4)


def test_export_head_folder_in_the_eagle_bin_layout_runs_exact(target, tmp_path, capsys):
    """`edgespec export --head FOLDER` on yuhuili's layout (pytorch_model.bin), then `run
    --exact` with the head gives plain decoding's tokens."""
    from edgespec.app.cli import main

    hf = published(tmp_path / "hf", "eagle", draft_ids=np.arange(200))
    out = tmp_path / "bundle"
    argv = ["export", "--target", str(target), "--head", str(hf), "--out", str(out),
            "--target-quant", "q8_0"]  # fmt: skip
    assert main(argv) == 0
    capsys.readouterr()
    runs = []
    for drafter in (["--drafter", "none"], ["--drafter", "eagle", "--k", "4"]):
        args = ["run", "--target", str(out), "--threads", "1", "--prompt", PROMPT,
                "--max-tokens", "16", "--exact", "--json", *drafter]  # fmt: skip
        assert main(args) == 0
        runs.append(json.loads(capsys.readouterr().out))
    assert runs[1]["tokens"] == runs[0]["tokens"]
    assert runs[1]["stats"]["drafted_by_drafter"]["eagle"] > 0


def config_refusal(**config):
    return {"config": config}


IDS = "eagle_aux_hidden_state_layer_ids"
REFUSALS = [  # (write_hf_head arguments, message; {config}: the head's config.json)
    (config_refusal(fc_norm=True, eagle_config={"norm_before_fc": True}),
     "{folder}: fc_norm and norm_before_fc are both true (a norm on each hidden state and one "
     "on their concatenation), which no EAGLE-3 trainer combines; keep the one the head was "
     "trained with"),
    (config_refusal(fc_norm=True),
     "{folder} lacks tensor fc_norm.0.weight; download the head again"),
    (config_refusal(fc_norm="true"),
     '{config}: fc_norm is "true", not true or false; correct it in config.json'),
    (config_refusal(quantization_config={"quant_method": "fp8"}),
     "{config}: field quantization_config is not one edgespec's EAGLE-3 converter knows; it "
     "converts only what it can account for (remove the field if it has no bearing on the "
     "head)"),
    (config_refusal(eagle_config={"draft_layers": 2}),
     "{config}: field eagle_config.draft_layers is not one edgespec's EAGLE-3 converter knows; "
     "it converts only what it can account for (remove the field if it has no bearing on the "
     "head)"),
    (config_refusal(hidden_act="gelu"),
     '{config}: hidden_act is "gelu"; llama.cpp\'s eagle3 computes "silu" only, so this head '
     "cannot be converted"),
    (config_refusal(attention_bias=True),
     "{config}: attention_bias is true; llama.cpp's eagle3 computes false only, so this head "
     "cannot be converted"),
    (config_refusal(eagle_config={"use_aux_hidden_state": False}),
     "{config}: eagle_config.use_aux_hidden_state is not true: the head does not read the "
     "target's three hidden states (not EAGLE-3), so it cannot be converted"),
    (config_refusal(max_position_embeddings=float("inf")),
     "{config}: max_position_embeddings is inf, not a whole number > 0; correct it in "
     "config.json"),
    (config_refusal(hidden_size="64"),
     '{config}: hidden_size is "64", not a whole number > 0; correct it in config.json'),
    (config_refusal(rms_norm_eps="1e-5"),
     '{config}: rms_norm_eps is "1e-5", not a finite number > 0; correct it in config.json'),
    (config_refusal(rope_scaling="llama3"),
     '{config}: rope_scaling is "llama3", not an object or null; correct it in config.json'),
    (config_refusal(rope_scaling={"rope_type": "llama3", "factor": "8"}),
     '{config}: rope_scaling.factor is "8", not a finite number > 0; correct it in '
     "config.json"),
    (config_refusal(rope_scaling={"rope_type": "dynamic", "factor": 2.0}),
     "{config}: RoPE scaling 'dynamic' is not one llama.cpp's eagle3 computes (default, "
     "llama3, yarn, mrope); this head cannot be converted"),
    (config_refusal(rope_scaling={"rope_type": "yarn", "factor": 2.0, "mscale": 1.0,
                                  "original_max_position_embeddings": 64}),
     "{config}: field rope_scaling.mscale (yarn) is not one edgespec's EAGLE-3 converter "
     "knows; it converts only what it can account for (remove the field if it has no bearing "
     "on the head)"),
    (config_refusal(rope_scaling={"rope_type": "yarn", "factor": 2.0}),
     "{config}: rope_scaling.original_max_position_embeddings is None, not a whole number > 0; "
     "YaRN needs the trained context length"),
    (config_refusal(rope_theta=10000.0, rope_parameters={"rope_type": "default",
                                                          "rope_theta": 500000.0}),
     "{config}: rope_theta 10000.0 and rope_parameters.rope_theta 500000.0 disagree; keep the "
     "one the head was trained with"),
    (config_refusal(norm_before_fc=False, eagle_config={"norm_before_fc": True}),
     "{config}: norm_before_fc and eagle_config.norm_before_fc disagree; keep the one the head "
     "was trained with"),
    (config_refusal(norm_before_fc="yes"),
     '{config}: norm_before_fc is "yes", not true or false; correct it in config.json'),
    ({"layers": (1, 2, 3)},
     "{config}: eagle_aux_hidden_state_layer_ids [1, 2, 3] starts at 1, which vLLM reads as "
     "the inputs of those layers and SGLang as their outputs; move the list under eagle_config "
     'if the head was trained on outputs (SpecForge), else set "speculators_model_type": '
     '"eagle3"'),
    (config_refusal(**{IDS: [2, 1, 3], "eagle_config": {IDS: [0, 1, 2]}}),
     "{config}: eagle_aux_hidden_state_layer_ids [2, 1, 3] (layer inputs) and "
     "eagle_config.eagle_aux_hidden_state_layer_ids [0, 1, 2] (layer outputs: inputs [1, 2, "
     "3]) name different layers; keep the one the head was trained with"),
    (config_refusal(**{IDS: 2}),
     "{config}: eagle_aux_hidden_state_layer_ids is 2; llama.cpp's eagle3 takes exactly 3 "
     "layer ids (whole numbers >= 0)"),
    (config_refusal(transformer_layer_config=[1]),
     "{config}: transformer_layer_config is [1], not an object; correct it in config.json"),
]  # fmt: skip


@pytest.mark.parametrize("kwargs, message", REFUSALS)
def test_a_config_field_not_accounted_for_is_refused_by_name(target, tmp_path, kwargs, message):
    folder = write_hf_head(tmp_path / "head", **kwargs)
    with pytest.raises(ModelFileError) as e:
        convert_eagle3(folder, target, tmp_path / "out.gguf")
    assert str(e.value) == message.format(folder=folder, config=folder / "config.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["head"]


def test_a_layer_at_the_targets_last_boundary_is_refused(target, tmp_path):
    """gpt-oss-120b's heads read layer 36 of 36: the last layer's output, which llama.cpp
    keeps no input of (it aborts the process if asked): refused first."""
    folder = write_hf_head(tmp_path / "head", layers=(0, 2, 4))
    with pytest.raises(HeadMismatchError) as e:
        convert_eagle3(folder, target, tmp_path / "out.gguf")
    assert str(e.value) == (
        "head extracts layers [0, 2, 4]: layer 4 is the output of target.gguf's last layer, "
        "which this llama.cpp cannot tap (it keeps inputs of layers 0..3)"
    )


def test_a_pickle_that_is_not_plain_tensors_is_refused_unrun(target, tmp_path):
    """A pytorch_model.bin whose pickle names anything but the state dict's own types (here
    os.getcwd) is refused before anything is called; a shard missing from its index too."""
    folder = published(tmp_path / "head", "eagle")
    tensors = {"fc.weight": np.zeros((2, 2), np.float32)}
    evil = b"cos\ngetcwd\n)R"  # harmless, should a broken reader call it
    save_torch_bin(tensors, folder / "pytorch_model.bin", extra=evil)
    with pytest.raises(ModelFileError) as e:
        convert_eagle3(folder, target, tmp_path / "out.gguf")
    assert str(e.value) == (
        f"{folder}/pytorch_model.bin: its pickle is not plain tensors (it asks for os.getcwd); "
        "edgespec runs no code from a checkpoint: convert it to safetensors with torch where "
        "you trust it"
    )
    (folder / "pytorch_model.bin").write_bytes(b"\x80\x02}q\x00.")  # a pre-1.6 file
    with pytest.raises(ModelFileError) as e:
        convert_eagle3(folder, target, tmp_path / "out.gguf")
    assert str(e.value) == (
        f"{folder}/pytorch_model.bin is not a zip (a PyTorch file saved before 1.6, or "
        "corrupt); edgespec reads only zip .bin files: convert it to safetensors with torch"
    )
    sharded = published(tmp_path / "sharded", "angelslim")
    (sharded / "pytorch_model-00002-of-00002.bin").unlink()
    with pytest.raises(ModelFileError) as e:
        convert_eagle3(sharded, target, tmp_path / "out.gguf")
    assert str(e.value) == (
        f"{sharded}/pytorch_model.bin.index.json names pytorch_model-00002-of-00002.bin, which "
        f"is not in {sharded}; download every shard of the head"
    )


def test_the_torch_bin_reader_reads_what_torch_save_writes(tmp_path):
    """Values, dtypes (f16 widened, int64 ids) and rows read back exactly."""
    from edgespec.export.torch_bin import TorchBinTensors

    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    ids = np.array([5, -1, 7], np.int64)
    path = save_torch_bin({"a": a, "h": a.astype(np.float16), "d2t": ids}, tmp_path / "x.bin")
    t = TorchBinTensors([path])
    assert t.shape("a") == (3, 4)
    np.testing.assert_array_equal(t.read_rows("a", 1, 3), a[1:3])
    np.testing.assert_array_equal(t["h"], a)
    np.testing.assert_array_equal(t.integers("d2t"), ids)
    assert torch_pickle({"a": a}).startswith(b"\x80\x02")


def qwen3_like_head(folder: Path) -> Path:
    """SpecForge's Qwen3 shape: head_dim 32 where hidden / heads is 16 (Qwen3-4B: 128 for
    2560 / 32), its own token embedding (speculators), no lm_head (the target's)."""
    rng = np.random.default_rng(5)

    def mat(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)

    q, kv = 4 * 32, 2 * 32
    tensors = {
        "midlayer.self_attn.q_proj.weight": mat(q, 128),
        "midlayer.self_attn.k_proj.weight": mat(kv, 128),
        "midlayer.self_attn.v_proj.weight": mat(kv, 128),
        "midlayer.self_attn.o_proj.weight": mat(64, q),
        "lm_head.weight": None,
        "embed_tokens.weight": random_weights(CFG, N_VOCAB, 1)["token_embd.weight"],
    }
    return write_hf_head(folder, layers=(2, 1, 3), config={"head_dim": 32}, tensors=tensors)


def test_explicit_head_dim_own_embedding_and_no_lm_head_on_both_backends(tmp_path):
    """The GGUF carries key_length 32; llama.cpp and the ONNX head export (which reads
    head_dim, the head's embedding and the target's output layer) both draft, and both give
    plain decoding's output, greedy and seeded."""
    pytest.importorskip("onnxruntime")
    from edgespec.export.checkpoint import read_checkpoint
    from edgespec.export.eagle3_onnx import export_head_onnx
    from edgespec.export.onnx_export import export_onnx
    from edgespec.runtimes.onnxrt import OnnxRuntime

    target = write_gguf(tmp_path / "target.gguf", CFG, random_weights(CFG, N_VOCAB, 0),
                        pre="gpt-2")  # fmt: skip
    out = convert_eagle3(qwen3_like_head(tmp_path / "hf"), target, tmp_path / "h.gguf")
    tensors, meta = gguf_file(out)
    assert meta["eagle3.attention.key_length"] == 32
    assert "output.weight" not in tensors and "token_embd.weight" in tensors
    llama = open_target(target)
    onnx = OnnxRuntime(
        export_onnx(target, tmp_path / "t", hidden_layers=(2, 1, 3)), n_ctx=256, n_threads=1
    )
    export_head_onnx(out, read_checkpoint(target), tmp_path / "head")
    for rt, head_path in ((llama, out), (onnx, tmp_path / "head")):
        head = rt.open_head(str(head_path))
        tokens = rt.tokenize(PROMPT, special=True)
        for sp in (SamplingParams(0.0), SEEDED[0]):
            want = SpeculativeDecoder(rt).generate(tokens, max_tokens=16, sp=sp, speculative=False)
            spec = SpeculativeDecoder(rt, [HeadDrafter(rt, head)], FixedPolicy("eagle", 3))
            got = spec.generate(tokens, max_tokens=16, sp=sp)
            assert got.tokens == want.tokens, (rt, sp)
            assert got.stats.n_draft_tokens > 0


def test_a_gguf_head_in_another_builds_spelling_is_respelled_and_runs(target, tmp_path, capsys):
    """A head whose converter wrote eagle3.extract_layers and blk.0.hidden_norm (other
    llama.cpp builds): `export --head` re-spells it as the vendored llama.cpp reads it (the
    same tensors), and `run --exact` with it gives plain decoding's tokens."""
    from edgespec.app.cli import main
    from edgespec.export.eagle3_gguf import OTHER_KEYS, OTHER_TENSORS, respell

    ours = write_head(tmp_path / "ours.gguf", CFG, layers=(2, 1, 3))
    inverse = [{v: k for k, v in names.items()} for names in (OTHER_KEYS, OTHER_TENSORS)]
    theirs = respell(ours, tmp_path / "theirs.gguf", *inverse)
    tensors, meta = gguf_file(theirs)
    assert meta["eagle3.extract_layers"] == [2, 1, 3] and "blk.0.hidden_norm.weight" in tensors
    out = tmp_path / "bundle"
    argv = ["export", "--target", str(target), "--head", str(theirs), "--out", str(out),
            "--target-quant", "q8_0"]  # fmt: skip
    assert main(argv) == 0
    capsys.readouterr()
    got, got_meta = gguf_file(out / "head.f32.gguf")
    want, want_meta = gguf_file(ours)
    assert sorted(got) == sorted(want) and got_meta["eagle3.target_layers"] == [2, 1, 3]
    runs = []
    for drafter in (["--drafter", "none"], ["--drafter", "eagle", "--k", "4"]):
        args = ["run", "--target", str(out), "--threads", "1", "--prompt", PROMPT,
                "--max-tokens", "16", "--exact", "--json", *drafter]  # fmt: skip
        assert main(args) == 0
        runs.append(json.loads(capsys.readouterr().out))
    assert runs[1]["tokens"] == runs[0]["tokens"]


@pytest.fixture(scope="module")
def eagle31(target, tmp_path_factory) -> tuple[Path, Path]:
    """SpecForge's EAGLE-3.1 head as its export writes it (published_heads.eagle31_config), and
    its conversion (f32)."""
    folder = tmp_path_factory.mktemp("eagle31")
    embd = random_weights(CFG, N_VOCAB, 0)["token_embd.weight"]
    hf = relayout(write_hf_head(folder / "hf", layers=None,
                                tensors={"embed_tokens.weight": embd}), "eagle31")  # fmt: skip
    return hf, convert_eagle3(hf, target, folder / "h.gguf", outtype="f32")


def eagle31_reference(hf: Path, rt, context: list[int], k: int, **flags) -> np.ndarray:
    """reference_draft with the head's own weights (its fc_norm and final norm): [k, vocab]."""
    from safetensors.numpy import load_file

    saved = load_file(str(hf / "model.safetensors"))
    w = {**head_weights(64, N_VOCAB, 7), "output_norm.weight": saved["norm.weight"]}
    fc_norm = np.stack([saved[f"fc_norm.{i}.weight"] for i in range(3)])
    embd = random_weights(CFG, N_VOCAB, 0)["token_embd.weight"]
    features = rt.features(0, len(context) - 1)
    fc_norm = fc_norm if flags.get("fc_norm", True) else None
    return reference_draft(w, embd, context, features, CFG, k, fc_norm=fc_norm,
                           norm_output=flags.get("norm_output", True))  # fmt: skip


def head_draft_logits(head, rt, context: list[int], k: int) -> np.ndarray:
    """The head's logits at each of k greedy draft steps, as HeadDrafter drives it."""
    head.reset()
    logits, state = head.decode(context[1:], head.encode(rt.features(0, len(context) - 1)))
    out = [logits]
    for _ in range(k - 1):
        logits, state = head.decode([int(np.argmax(logits))], state[None, :])
        out.append(logits)
    return np.array(out)[:, :N_VOCAB]


def test_eagle31_converts_and_drafts_as_its_reference(target, eagle31):
    """fc_norm.{0,1,2} and the carried norm travel as metadata (no tensor llama.cpp would
    refuse); the head's logits at 4 draft steps equal the numpy EAGLE-3.1 reference within
    0.05 (float32 states carried against float64 ones: 0.009 at step 1, 0.022 at step 4; the
    logits' sd is 6), and are over 0.5 from the reference with either norm left out (4 to 19)."""
    from edgespec.runtimes.shared import FC_NORM_KEY, NORM_OUTPUT_KEY

    hf, out = eagle31
    tensors, meta = gguf_file(out)
    assert not any(name.startswith("fc_norm") for name in tensors)
    assert len(meta[FC_NORM_KEY]) == 3 * 64 and len(meta[NORM_OUTPUT_KEY]) == 64
    assert meta["eagle3.target_layers"] == [2, 2, 1]  # EAGLE's default: no ids given
    rt = open_target(target)
    head = rt.open_head(str(out))
    tokens = rt.tokenize(PROMPT, special=True)
    plain = SpeculativeDecoder(rt).generate(tokens, max_tokens=8, speculative=False)
    context = tokens + plain.tokens
    put_target_at(rt, context)
    got = head_draft_logits(head, rt, context, 4)
    np.testing.assert_allclose(got, eagle31_reference(hf, rt, context, 4), rtol=0, atol=0.05)
    for flag in ("fc_norm", "norm_output"):
        other = eagle31_reference(hf, rt, context, 4, **{flag: False})
        assert np.abs(got - other).max() > 0.5, flag


@pytest.mark.parametrize("k", [1, 4])
def test_eagle31_output_equals_plain_under_exact(target, eagle31, k):
    rt = open_target(target)
    head = rt.open_head(str(eagle31[1]))
    check_output_equals_plain(rt, head, *plain_reference(rt), k)


def test_eagle31_on_onnx_drafts_as_its_reference_and_exact(tmp_path, eagle31):
    """The ONNX head (fc_norm as nodes in encode.onnx, the normed state as its carried
    output) drafts the reference's logits within 0.05 and gives plain decoding's output."""
    pytest.importorskip("onnxruntime")
    from edgespec.export.checkpoint import read_checkpoint
    from edgespec.export.eagle3_onnx import export_head_onnx
    from edgespec.export.onnx_export import export_onnx
    from edgespec.runtimes.onnxrt import OnnxRuntime

    hf, out = eagle31
    target = write_gguf(tmp_path / "target.gguf", CFG, random_weights(CFG, N_VOCAB, 0),
                        pre="gpt-2")  # fmt: skip
    rt = OnnxRuntime(
        export_onnx(target, tmp_path / "t", hidden_layers=(2, 2, 1)), n_ctx=256, n_threads=1
    )
    export_head_onnx(out, read_checkpoint(target), tmp_path / "head")
    head = rt.open_head(str(tmp_path / "head"))
    tokens = rt.tokenize(PROMPT, special=True)
    plain = SpeculativeDecoder(rt).generate(tokens, max_tokens=8, speculative=False)
    context = tokens + plain.tokens
    put_target_at(rt, context)
    got = head_draft_logits(head, rt, context, 4)
    np.testing.assert_allclose(got, eagle31_reference(hf, rt, context, 4), rtol=0, atol=0.05)
    for sp in (SamplingParams(0.0), SEEDED[0]):
        want = SpeculativeDecoder(rt).generate(tokens, max_tokens=16, sp=sp, speculative=False)
        spec = SpeculativeDecoder(rt, [HeadDrafter(rt, head)], FixedPolicy("eagle", 4))
        got_out = spec.generate(tokens, max_tokens=16, sp=sp)
        assert got_out.tokens == want.tokens, sp
        assert got_out.stats.n_draft_tokens > 0


def test_long_eagle31_arrays_are_read_whole(tmp_path):
    """A real head's fc_norm (3 x 4096 weights) is longer than the arrays the header reader
    keeps by default (token scores: length only): read whole under its key, else refused."""
    import gguf

    from edgespec.runtimes.gguf_meta import read_metadata
    from edgespec.runtimes.shared import FC_NORM_KEY, eagle31_norms

    weights = np.random.default_rng(0).standard_normal(3 * 4096).astype(np.float32)
    writer = gguf.GGUFWriter(str(tmp_path / "h.gguf"), "eagle3")
    writer.add_array(FC_NORM_KEY, weights.tolist())
    for step in (writer.write_header_to_file, writer.write_kv_data_to_file,
                 writer.write_ti_data_to_file, writer.close):  # fmt: skip
        step()
    meta = read_metadata(tmp_path / "h.gguf", whole=(FC_NORM_KEY,))
    fc_norm, carried = eagle31_norms("h.gguf", meta, 4096, 64)
    np.testing.assert_array_equal(fc_norm, weights.reshape(3, 4096))
    assert carried is None
    with pytest.raises(ModelFileError, match="holds 0 weights, not 3 x 4096 finite ones"):
        eagle31_norms("h.gguf", read_metadata(tmp_path / "h.gguf"), 4096, 64)
