"""export/eagle3_convert.py: a Hugging Face EAGLE-3 head, written in the test from the weights of
tests/tiny_eagle.py under their HF names (q and k in HF's rotate-halves layout), converted for a
tiny target: the GGUF's tensors equal what tiny_eagle.write_head writes for the same weights,
the converted head drafts what tiny_eagle's head drafts, a reduced draft vocabulary maps
through d2t, and each head that does not fit is refused by its message, with nothing written."""

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from edgespec.controller import FixedPolicy
from edgespec.drafters.head import HeadDrafter
from edgespec.engine import SpeculativeDecoder
from edgespec.errors import ModelFileError
from edgespec.export.checkpoint import unpermute_from_interleaved_rope
from edgespec.export.eagle3_convert import convert_eagle3
from edgespec.runtimes.shared import HeadMismatchError
from edgespec.sampling import SamplingParams
from tests.test_eagle import CFG, PROMPT, SEEDED, open_target, put_target_at
from tests.tiny_eagle import head_weights, write_head
from tests.tiny_gguf import TinyConfig, random_weights, vocabulary, write_gguf

N_VOCAB = len(vocabulary()[0])  # 279
LAYERS = (2, 1, 3)  # inputs of these target layers (ids starting at 1 would name outputs)
HF_NAMES = {  # tiny_eagle's GGUF name -> the name a published EAGLE-3 checkpoint gives it
    "fc.weight": "fc.weight",
    "blk.0.attn_norm.weight": "midlayer.input_layernorm.weight",
    "blk.0.attn_norm_2.weight": "midlayer.hidden_norm.weight",
    "blk.0.attn_q.weight": "midlayer.self_attn.q_proj.weight",
    "blk.0.attn_k.weight": "midlayer.self_attn.k_proj.weight",
    "blk.0.attn_v.weight": "midlayer.self_attn.v_proj.weight",
    "blk.0.attn_output.weight": "midlayer.self_attn.o_proj.weight",
    "blk.0.ffn_norm.weight": "midlayer.post_attention_layernorm.weight",
    "blk.0.ffn_gate.weight": "midlayer.mlp.gate_proj.weight",
    "blk.0.ffn_up.weight": "midlayer.mlp.up_proj.weight",
    "blk.0.ffn_down.weight": "midlayer.mlp.down_proj.weight",
    "output_norm.weight": "norm.weight",
    "output.weight": "lm_head.weight",
}


def write_hf_head(
    folder: Path,
    *,
    hidden: int = 64,
    layers: tuple[int, ...] | None = LAYERS,
    draft_ids: np.ndarray | None = None,
    config: dict | None = None,
    tensors: dict | None = None,
) -> Path:
    """tiny_eagle.head_weights(hidden, 279, 7) as an HF EAGLE-3 folder; layers: config's
    eagle_aux_hidden_state_layer_ids (None: not given). draft_ids: a reduced
    draft vocabulary (lm_head cut to those rows, d2t and t2d as HF stores them); config and
    tensors: entries replaced, a None value removed."""
    folder.mkdir()
    w = head_weights(hidden, N_VOCAB, 7)
    hf = {HF_NAMES[name]: a for name, a in w.items()}
    for name, n_head in (("q_proj", 4), ("k_proj", 2)):
        key = f"midlayer.self_attn.{name}.weight"
        hf[key] = np.ascontiguousarray(unpermute_from_interleaved_rope(hf[key], n_head))
    if draft_ids is not None:
        hf["lm_head.weight"] = hf["lm_head.weight"][draft_ids]
        hf["d2t"] = (draft_ids - np.arange(len(draft_ids))).astype(np.int64)
        hf["t2d"] = np.isin(np.arange(N_VOCAB), draft_ids)
    cfg = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_hidden_layers": 1,
        "max_position_embeddings": CFG.n_ctx,
        "rms_norm_eps": CFG.rms_eps,
        "rope_theta": CFG.rope_theta,
        "vocab_size": N_VOCAB,
        "draft_vocab_size": N_VOCAB if draft_ids is None else len(draft_ids),
        "target_hidden_size": hidden,
        "eagle_aux_hidden_state_layer_ids": list(layers) if layers else None,
    }
    for source, edits in ((cfg, config), (hf, tensors)):
        for key, value in (edits or {}).items():
            source[key] = value
    save_file({k: v for k, v in hf.items() if v is not None}, str(folder / "model.safetensors"))
    cfg = {k: v for k, v in cfg.items() if v is not None}
    (folder / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def target(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("convert")
    return write_gguf(folder / "target.gguf", CFG, random_weights(CFG, N_VOCAB, 0))


def gguf_file(path: Path):
    import gguf

    reader = gguf.GGUFReader(str(path))
    tensors = {t.name: np.array(t.data) for t in reader.tensors}
    fields = {k: f.contents() for k, f in reader.fields.items() if not k.startswith("GGUF.")}
    return tensors, fields


@pytest.mark.parametrize("outtype", ["f32", "f16"])
def test_the_gguf_holds_what_tiny_eagle_writes(target, tmp_path, outtype):
    """Same names and shapes; values equal (matrices rounded to f16 when asked); the metadata
    llama.cpp reads equal, the tokenizer the target's."""
    out = convert_eagle3(
        write_hf_head(tmp_path / "head"), target, tmp_path / "c.gguf", outtype=outtype
    )
    got, got_meta = gguf_file(out)
    want, want_meta = gguf_file(write_head(tmp_path / "tiny.gguf", CFG, layers=LAYERS))
    assert sorted(got) == sorted(want)
    for name, w in want.items():
        dtype = np.float16 if outtype == "f16" and w.ndim == 2 else np.float32
        assert got[name].dtype == dtype, name
        np.testing.assert_array_equal(got[name], w.astype(dtype), err_msg=name)
    for key in set(want_meta) - {"general.name", "general.file_type"}:
        assert got_meta[key] == want_meta[key], key
    assert got_meta["general.file_type"] == (1 if outtype == "f16" else 0)
    assert got_meta["general.name"] == "head"
    _, target_meta = gguf_file(target)
    assert {k: v for k, v in got_meta.items() if k.startswith("tokenizer.")} == {
        k: v for k, v in target_meta.items() if k.startswith("tokenizer.")
    }
    assert not (tmp_path / "c.gguf.part").exists()


@pytest.fixture(scope="module")
def heads(target, tmp_path_factory):
    """The target's runtime, tiny_eagle's head and the converted heads (f32, f16)."""
    folder = tmp_path_factory.mktemp("heads")
    hf = write_hf_head(folder / "head")
    rt = open_target(target)
    tiny = rt.open_head(str(write_head(folder / "tiny.gguf", CFG, layers=LAYERS)))
    converted = {
        outtype: rt.open_head(
            str(convert_eagle3(hf, target, folder / f"{outtype}.gguf", outtype=outtype))
        )
        for outtype in ("f32", "f16")
    }
    return rt, tiny, converted


@pytest.mark.parametrize("outtype", ["f32", "f16"])
@pytest.mark.parametrize("sp", [SamplingParams(0.0), SEEDED[0]], ids=["greedy", "seeded"])
def test_the_converted_head_drafts_what_tiny_eagles_drafts(heads, outtype, sp):
    rt, tiny, converted = heads
    tokens = rt.tokenize(PROMPT, special=True)
    plain = SpeculativeDecoder(rt).generate(tokens, max_tokens=24, speculative=False)
    for n in (0, 5, 12, 24):
        context = tokens + plain.tokens[:n]
        drafts = []
        for head in (tiny, converted[outtype]):
            put_target_at(rt, context)
            drafter = HeadDrafter(rt, head)
            drafter.reset(np.random.default_rng(0))
            drafts.append(drafter.propose(context, 8, sp).tokens.tolist())
        assert drafts[0] == drafts[1], n


def test_speculative_output_with_the_converted_head_equals_plain(heads):
    rt, _, converted = heads
    tokens = rt.tokenize(PROMPT, special=True)
    plain = SpeculativeDecoder(rt).generate(tokens, max_tokens=32, speculative=False)
    drafter = HeadDrafter(rt, converted["f16"])
    out = SpeculativeDecoder(rt, [drafter], FixedPolicy("eagle", 4)).generate(tokens, max_tokens=32)
    assert out.tokens == plain.tokens
    assert out.stats.n_draft_tokens > 0  # a random head: drafts are made, rarely accepted


def test_a_reduced_draft_vocabulary_maps_through_d2t(target, tmp_path):
    """HF's d2t offsets become absolute target ids; llama.cpp's logits are the full head's at
    those ids and -inf elsewhere, and speculative output still equals plain."""
    draft_ids = np.sort(np.random.default_rng(3).choice(N_VOCAB, 200, replace=False))
    hf = write_hf_head(tmp_path / "head", draft_ids=draft_ids)
    out = convert_eagle3(hf, target, tmp_path / "reduced.gguf", outtype="f32")
    tensors, _ = gguf_file(out)
    assert tensors["d2t"].dtype == np.int64
    np.testing.assert_array_equal(tensors["d2t"], draft_ids)
    assert tensors["output.weight"].shape == (200, 64)
    rt = open_target(target)
    reduced = rt.open_head(str(out))
    full = rt.open_head(str(write_head(tmp_path / "tiny.gguf", CFG, layers=LAYERS)))
    tokens = rt.tokenize(PROMPT, special=True)
    put_target_at(rt, tokens)
    features = rt.features(0, len(tokens) - 1)
    logits = []
    for head in (reduced, full):
        head.reset()
        logits.append(head.decode(tokens[1:], head.encode(features))[0])
    np.testing.assert_allclose(logits[0][draft_ids], logits[1][draft_ids], rtol=0, atol=1e-4)
    assert np.isneginf(np.delete(logits[0], draft_ids)).all()
    for sp in (SamplingParams(0.0), SEEDED[0]):
        plain = SpeculativeDecoder(rt).generate(tokens, max_tokens=24, sp=sp, speculative=False)
        out_tokens = (
            SpeculativeDecoder(rt, [HeadDrafter(rt, reduced)], FixedPolicy("eagle", 4))
            .generate(tokens, max_tokens=24, sp=sp)
            .tokens
        )
        assert out_tokens == plain.tokens, sp


def test_default_extract_layers_and_llama3_rope(target, tmp_path):
    """Without eagle_aux_hidden_state_layer_ids, llama.cpp's default [2, n // 2, n - 3]; Llama
    3.1's RoPE scaling as rope_freqs (1 for short wavelengths, the factor for long ones), and
    llama.cpp loads the head."""
    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}  # fmt: skip
    hf = write_hf_head(tmp_path / "head", layers=None, config={"rope_scaling": scaling})
    out = convert_eagle3(hf, target, tmp_path / "c.gguf")
    tensors, meta = gguf_file(out)
    assert meta["eagle3.target_layers"] == [2, 2, 1]
    # head_dim 16, theta 1e4: wavelengths 2 pi 1e4^(i / 16), i = 0, 2, .., 14; below 2048 for
    # i <= 10, between 2048 and 8192 for i = 12, above for i = 14
    smooth = (8192 / (2 * np.pi * 1e4**0.75) - 1) / 3
    want = [1, 1, 1, 1, 1, 1, 1 / ((1 - smooth) / 8 + smooth), 8]
    np.testing.assert_allclose(tensors["rope_freqs.weight"], want, rtol=1e-6)
    head = open_target(target).open_head(str(out))
    assert head.layers == [2, 2, 1]


@pytest.mark.parametrize(
    "config, written",
    [({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 1, 2]}}, [2, 2, 3]),
     ({"eagle_aux_hidden_state_layer_ids": [2, 1, 3]}, [2, 1, 3]),
     ({"eagle_aux_hidden_state_layer_ids": [1, 1, 2], "speculators_model_type": "eagle3"},
      [1, 1, 2])],
)  # fmt: skip
def test_layer_ids_naming_outputs_are_written_as_inputs(target, tmp_path, config, written):
    """eagle_config's ids name layers' outputs (SpecForge, read by SGLang): the head reads the
    inputs of the next layers; top-level ones (speculators, read by vLLM) are inputs."""
    out = convert_eagle3(
        write_hf_head(tmp_path / "head", layers=None, config=config), target, tmp_path / "c.gguf"
    )
    assert gguf_file(out)[1]["eagle3.target_layers"] == written


def fit(**kwargs):
    return kwargs


REFUSALS = [  # (write_hf_head arguments, error, message: {folder} the head's folder)
    (fit(hidden=32), HeadMismatchError,
     "head reads hidden states of size 32 but target.gguf has 64; use the head trained for "
     "this target"),
    (fit(layers=(2, 2, 5)), HeadMismatchError,
     "head extracts layers [2, 2, 5] but target.gguf has layers 0..3; use the head trained for "
     "this target"),
    (fit(layers=None, config={"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 4]}}),
     HeadMismatchError,
     "head extracts layers [2, 3, 5] (eagle_config's [1, 2, 4]: outputs of those layers, "
     "inputs of these) but target.gguf has layers 0..3; use the head trained for this target"),
    (fit(layers=(1, 2)), ModelFileError,
     "{folder}/config.json: eagle_aux_hidden_state_layer_ids is [1, 2]; llama.cpp's eagle3 "
     "takes exactly 3 layer ids (whole numbers >= 0)"),
    (fit(config={"vocab_size": 270}), HeadMismatchError,
     "head was trained for a vocabulary of 270 tokens but target.gguf has 279; use the head "
     "trained for this target"),
    (fit(tensors={"lm_head.weight": head_weights(64, N_VOCAB, 7)["output.weight"][:200]}),
     HeadMismatchError,
     "head drafts over 200 tokens and has no d2t mapping them to target.gguf's 279; download "
     "the head's complete checkpoint (with d2t)"),
    (fit(draft_ids=np.arange(200), tensors={"d2t": np.r_[np.zeros(199), 101].astype(np.int64)}),
     HeadMismatchError,
     "head: d2t maps draft token 199 to id 300, outside target.gguf's vocabulary 0..278; use "
     "the head trained for this target"),
    (fit(draft_ids=np.arange(200), tensors={"d2t": np.r_[[0] * 5, -2, [0] * 194].astype(np.int64)}),
     ModelFileError,
     "{folder}: d2t maps draft tokens 3 and 5 both to target id 3; the checkpoint is corrupt "
     "(download it again)"),
    (fit(draft_ids=np.arange(200), tensors={"d2t": np.zeros(150, np.int64)}), ModelFileError,
     "{folder}: d2t maps 150 draft tokens, lm_head.weight has 200 rows and draft_vocab_size is "
     "200; the checkpoint is inconsistent (download it again)"),
    (fit(config={"architectures": ["LlamaForCausalLM"], "draft_vocab_size": None}),
     ModelFileError,
     "{folder}: architecture LlamaForCausalLM is not an EAGLE-3 head (supported: "
     "LlamaForCausalLMEagle3, Eagle3LlamaForCausalLM, Eagle3Speculator, Eagle3DraftModel); "
     "give the head's folder, not the target's"),
    (fit(config={"num_hidden_layers": 2}), ModelFileError,
     "{folder}: the head has 2 decoder layers; llama.cpp's eagle3 runs heads of exactly one "
     "(EAGLE-3 as published)"),
    (fit(tensors={"midlayer.hidden_norm.weight": None}), ModelFileError,
     "{folder} lacks tensor midlayer.hidden_norm.weight; download the head again"),
    (fit(tensors={"midlayer.self_attn.q_norm.weight": np.ones(16, np.float32)}), ModelFileError,
     "{folder}: tensor midlayer.self_attn.q_norm.weight has no place in llama.cpp's eagle3 "
     "head; give an EAGLE-3 head's folder (fc, midlayer.*, norm, lm_head, d2t)"),
    (fit(config={"intermediate_size": 96}), ModelFileError,
     "{folder}: tensor midlayer.mlp.gate_proj.weight has shape [128, 64] but config.json "
     "implies [96, 64]; the checkpoint is inconsistent"),
]  # fmt: skip


@pytest.mark.parametrize("kwargs, error, message", REFUSALS)
def test_a_head_that_does_not_fit_is_refused(target, tmp_path, kwargs, error, message):
    folder = write_hf_head(tmp_path / "head", **kwargs)
    with pytest.raises(error) as e:
        convert_eagle3(folder, target, tmp_path / "out.gguf")
    assert str(e.value) == message.format(folder=folder)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["head"]  # nothing written


def test_default_layers_beyond_a_small_target_are_refused(tmp_path):
    small = TinyConfig(n_layer=2)
    target = write_gguf(tmp_path / "small.gguf", small, random_weights(small, N_VOCAB, 0))
    folder = write_hf_head(tmp_path / "head", layers=None)
    with pytest.raises(HeadMismatchError) as e:
        convert_eagle3(folder, target, tmp_path / "out.gguf")
    assert str(e.value) == (
        "head extracts layers [2, 1, -1] (llama.cpp's default for a 2-layer target) but "
        "small.gguf has layers 0..1; use the head trained for this target"
    )


def test_a_head_as_target_is_refused(target, tmp_path):
    head = write_head(tmp_path / "tiny.gguf", CFG, layers=LAYERS)
    with pytest.raises(ModelFileError) as e:
        convert_eagle3(write_hf_head(tmp_path / "head"), head, tmp_path / "out.gguf")
    assert str(e.value) == (
        f"{head} is an EAGLE-3 head, not a target; give the GGUF of the model it drafts for"
    )


def test_export_converts_a_hugging_face_head_into_the_bundle_and_run_uses_it(
    target, tmp_path, capsys
):
    """`edgespec export --head FOLDER`: the converted head in the bundle (role head, f16),
    and `run BUNDLE --exact` greedy gives plain decoding's tokens with the head drafting."""
    from edgespec.app.cli import main
    from edgespec.bundle import read_bundle

    hf = write_hf_head(tmp_path / "hf")
    out = tmp_path / "bundle"
    argv = ["export", "--target", str(target), "--head", str(hf), "--out", str(out),
            "--target-quant", "q8_0"]  # fmt: skip
    assert main(argv) == 0
    capsys.readouterr()
    entry = read_bundle(out).model("head")
    assert (entry.path, entry.quant, entry.arch) == ("head.f16.gguf", "f16", "eagle3")

    def run(*extra: str) -> dict:
        args = ["run", "--target", str(out), "--threads", "1", "--prompt", PROMPT,
                "--max-tokens", "24", "--exact", "--json"]  # fmt: skip
        assert main([*args, *extra]) == 0
        return json.loads(capsys.readouterr().out)

    plain = run("--drafter", "none")
    with_head = run("--drafter", "eagle", "--k", "4")
    assert with_head["tokens"] == plain["tokens"]
    assert with_head["stats"]["drafted_by_drafter"]["eagle"] > 0
