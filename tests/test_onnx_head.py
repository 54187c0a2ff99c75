"""EAGLE-3 heads on ONNX Runtime (export/eagle3_onnx.py, runtimes/onnx_heads.py): a tiny
random head exported beside a tiny target exported with the head's extract layers; the head's
fc and decoder against the numpy reference of llama.cpp's eagle3 graph, speculative output
equal to plain decoding (greedy and seeded, k = 1..8), the head's state after every rollback
equal to a fresh head's, and refusals."""

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

from edgespec.controller import FixedPolicy  # noqa: E402
from edgespec.drafters.head import HeadDrafter  # noqa: E402
from edgespec.engine import SpeculativeDecoder  # noqa: E402
from edgespec.errors import ModelFileError  # noqa: E402
from edgespec.export.checkpoint import read_checkpoint  # noqa: E402
from edgespec.export.eagle3_onnx import export_head_onnx  # noqa: E402
from edgespec.export.onnx_export import export_onnx  # noqa: E402
from edgespec.runtimes.onnxrt import OnnxRuntime  # noqa: E402
from edgespec.runtimes.shared import HeadMismatchError  # noqa: E402
from edgespec.sampling import SamplingParams  # noqa: E402
from tests.test_eagle import (  # noqa: E402
    PROMPT,
    SEEDED,
    check_head_matches_reference,
    check_output_equals_plain,
    check_rollback_leaves_a_fresh_state,
    plain_reference,
    put_target_at,
)
from tests.tiny_eagle import TARGET, write_head  # noqa: E402
from tests.tiny_gguf import random_weights, vocabulary, write_gguf  # noqa: E402

LAYERS = (1, 2, 3)  # write_head's default


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> tuple[Path, Path, Path]:
    """(target ONNX folder, head ONNX folder, head GGUF)."""
    root = tmp_path_factory.mktemp("onnx-head")
    weights = random_weights(TARGET, len(vocabulary()[0]), 0)
    gguf = write_gguf(root / "target.gguf", TARGET, weights, pre="gpt-2")
    head_gguf = write_head(root / "head.gguf", TARGET)
    target = export_onnx(gguf, root / "target", hidden_layers=LAYERS)
    export_head_onnx(head_gguf, read_checkpoint(gguf), root / "head")
    return target, root / "head", head_gguf


@pytest.fixture(scope="module")
def pair(folders):
    target = OnnxRuntime(folders[0], n_ctx=256, n_threads=1)
    return target, target.open_head(str(folders[1]))


@pytest.fixture(scope="module")
def reference(pair):
    return plain_reference(pair[0])


def test_the_head_passes_equal_the_numpy_reference(pair, reference):
    """fc and the decoder against eagle3.cpp's graph in numpy (float64; bound 1e-3: float32
    here, where llama.cpp's f16 K/V needs 0.02)."""
    check_head_matches_reference(*pair, reference[0], atol=1e-3)


@pytest.mark.parametrize("k", range(1, 9))
def test_greedy_and_seeded_output_equal_plain(pair, reference, k):
    check_output_equals_plain(*pair, *reference, k)


@pytest.mark.parametrize("sp", [SamplingParams(0.0), SEEDED[0]])
def test_rollback_at_every_position_leaves_a_fresh_heads_state(pair, folders, reference, sp):
    target, head = pair
    check_rollback_leaves_a_fresh_state(target, head, target.open_head(str(folders[1])),
                                        reference, sp)  # fmt: skip


def test_a_head_for_other_layers_is_refused(folders, tmp_path):
    """The target outputs the inputs of layers 1, 2, 3; a head reading 0, 1, 3 does not fit."""
    other = write_head(tmp_path / "other.gguf", TARGET, layers=(0, 1, 3))
    export_head_onnx(other, read_checkpoint(folders[2].with_name("target.gguf")), tmp_path / "h")
    target = OnnxRuntime(folders[0], n_ctx=64, n_threads=1)
    with pytest.raises(HeadMismatchError, match=r"^h extracts layers \[0, 1, 3\] but target "
                       r"outputs the inputs of layers \[1, 2, 3\]; export the target with "
                       r"this head$"):  # fmt: skip
        target.open_head(str(tmp_path / "h"))


def test_a_folder_without_head_json_is_not_a_head(folders):
    target = OnnxRuntime(folders[0], n_ctx=64, n_threads=1)
    with pytest.raises(ModelFileError, match=r"^target is not an ONNX draft head \(no readable "
                       r"head\.json\)"):  # fmt: skip
        target.open_head(str(folders[0]))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"hidden": 32}, r"^bad\.gguf reads hidden states of size 32 but target\.gguf has 64"),
        (
            {"layers": (1, 2, 4)},
            r"^bad\.gguf extracts layers \[1, 2, 4\] but target\.gguf has "
            r"layers 0\.\.3",
        ),  # fmt: skip
        ({"n_vocab": 270}, r"^bad\.gguf has a vocabulary of 270 tokens but target\.gguf has 279"),
    ],
)
def test_exporting_a_head_that_does_not_fit_is_refused_before_writing(folders, tmp_path, kwargs,
                                                                      message):  # fmt: skip
    bad = write_head(tmp_path / "bad.gguf", TARGET, **kwargs)
    with pytest.raises(ModelFileError, match=message):
        export_head_onnx(bad, read_checkpoint(folders[2].with_name("target.gguf")), tmp_path / "o")
    assert not (tmp_path / "o").exists()


def test_a_reduced_draft_vocabulary_maps_through_d2t(folders, tmp_path):
    """A head drafting over 200 of the 279 ids (an HF head converted, then exported): its
    logits are the full head's at those ids and -inf elsewhere; output still equals plain.
    Layers (2, 1, 3), as tests/test_eagle3_convert.py's HF heads name them."""
    from edgespec.export.eagle3_convert import convert_eagle3
    from tests.test_eagle3_convert import LAYERS as HF_LAYERS
    from tests.test_eagle3_convert import write_hf_head

    gguf = folders[2].with_name("target.gguf")
    ckpt = read_checkpoint(gguf)
    target = OnnxRuntime(export_onnx(gguf, tmp_path / "t", hidden_layers=HF_LAYERS), n_ctx=256,
                         n_threads=1)  # fmt: skip
    draft_ids = np.sort(np.random.default_rng(3).choice(target.n_vocab, 200, replace=False))
    hf = write_hf_head(tmp_path / "hf", layers=HF_LAYERS, draft_ids=draft_ids)
    reduced_gguf = convert_eagle3(hf, gguf, tmp_path / "reduced.gguf", outtype="f32")
    full_gguf = write_head(tmp_path / "full.gguf", TARGET, layers=HF_LAYERS)
    heads = []
    for name, head_gguf in (("reduced", reduced_gguf), ("full", full_gguf)):
        export_head_onnx(head_gguf, ckpt, tmp_path / name)
        heads.append(target.open_head(str(tmp_path / name)))
    tokens = target.tokenize(PROMPT, special=True)
    put_target_at(target, tokens)
    features = target.features(0, len(tokens) - 1)
    logits = []
    for head in heads:
        head.reset()
        logits.append(head.decode(tokens[1:], head.encode(features))[0])
    np.testing.assert_allclose(logits[0][draft_ids], logits[1][draft_ids], rtol=0, atol=1e-4)
    assert np.isneginf(np.delete(logits[0], draft_ids)).all()
    plain = SpeculativeDecoder(target).generate(tokens, max_tokens=32, speculative=False)
    spec = SpeculativeDecoder(target, [HeadDrafter(target, heads[0])], FixedPolicy("eagle", 4))
    assert spec.generate(tokens, max_tokens=32).tokens == plain.tokens


def test_a_head_folder_missing_a_graph_is_refused_in_one_line(folders, tmp_path):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(folders[1], broken)
    (broken / "encode.onnx").unlink()
    target = OnnxRuntime(folders[0], n_ctx=64, n_threads=1)
    with pytest.raises(ModelFileError, match=r"^cannot load the draft head's encode\.onnx in "
                       r"broken: .*; export the head again$"):  # fmt: skip
        target.open_head(str(broken))


def test_a_head_exported_for_another_compute_is_refused(folders, tmp_path):
    """A float16-compute head (the CUDA export's) beside a float32 target."""
    gguf = folders[2].with_name("target.gguf")
    export_head_onnx(folders[2], read_checkpoint(gguf), tmp_path / "h16", compute="fp16")
    target = OnnxRuntime(folders[0], n_ctx=64, n_threads=1)
    with pytest.raises(HeadMismatchError, match=r"^h16 computes in fp16 but target in fp32; "
                       r"export the head with its target$"):  # fmt: skip
        target.open_head(str(tmp_path / "h16"))


def test_a_head_with_a_norm_flag_is_refused(folders, tmp_path):
    """norm_before_fc (an RMSNorm on the features before fc) is not in the ONNX graphs yet:
    refused by name rather than drafted wrong."""
    import gguf

    reader = gguf.GGUFReader(str(folders[2]))
    head = tmp_path / "flagged.gguf"
    writer = gguf.GGUFWriter(str(head), "eagle3")
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        kind = field.types[0]
        sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(key, field.contents(), kind, sub_type=sub)
    writer.add_bool("eagle3.norm_before_fc", True)
    for t in reader.tensors:
        writer.add_tensor(t.name, np.array(t.data))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    refusal = (r"^flagged\.gguf sets norm_before_fc, which the ONNX head does not compute "
               r"yet; draft with it on a llama\.cpp target$")  # fmt: skip
    with pytest.raises(ModelFileError, match=refusal):
        export_head_onnx(head, read_checkpoint(folders[2].with_name("target.gguf")), tmp_path / "o")


def spoiled_head(folders, tmp_path: Path, change: dict | None = None, text: str | None = None):
    """A copy of the head folder whose head.json has fields changed, or is text."""
    import json
    import shutil

    folder = tmp_path / "spoiled"
    shutil.copytree(folders[1], folder)
    info = json.loads((folder / "head.json").read_text())
    (folder / "head.json").write_text(text if text is not None else json.dumps(info | change))
    return folder


HEAD_FIX = "export the head with its target: edgespec export --format onnx --head HEAD"


@pytest.mark.parametrize(
    "change, text, message",
    [
        (None, "[" * 200_000, "head.json is nested deeper than JSON is read"),
        (None, '{"n_embd": ' + "9" * 100_000 + "}", "head.json holds an integer of 100,000 digits"),
        (None, "[1, 2]", "head.json is not a JSON object (a list)"),
        ({"layers": {"0": 1}}, None, "head.json: field 'layers' must be a list, got an object "
                                     "{'0': 1}"),
        ({"n_kv_head": 10**9}, None, "head.json: field 'n_kv_head' must be a whole number from 1 "
                                     "to 4,096, got 1,000,000,000"),
        ({"head_dim": "16"}, None, "head.json: field 'head_dim' must be a whole number from 1 to "
                                   "4,096, got a string '16'"),
        ({"n_out": 2, "d2t": [0, 10**6]}, None, "head.json: d2t holds 1000000, not distinct token "
                                                "ids from 0 to 278"),
        ({"n_out": 2, "d2t": [-1, 3]}, None, "head.json: d2t holds -1, not distinct token ids "
                                             "from 0 to 278"),
        ({"n_out": 2, "d2t": [3, 3]}, None, "head.json: d2t repeats an id, not distinct token "
                                            "ids from 0 to 278"),
        ({"n_out": 3, "d2t": [0, 1]}, None, "head.json: d2t holds 2 ids for 3 columns"),
        ({"n_kv_head": 4}, None, "head.json says n_kv_head 4 but the graph has 2; the folder "
                                 "mixes files of different heads"),
    ],
    ids=["deep", "long integer", "list", "layers object", "kv heads", "string", "id too large",
         "negative id", "repeated id", "d2t short", "kv heads not the graph's"],
)  # fmt: skip
def test_a_hostile_head_json_is_refused_in_one_line(folders, tmp_path, change, text, message):
    folder = spoiled_head(folders, tmp_path, change, text)
    target = OnnxRuntime(folders[0], n_ctx=64, n_threads=1)
    with pytest.raises(ModelFileError) as e:
        target.open_head(str(folder))
    assert str(e.value) == f"{folder}/{message}; {HEAD_FIX}"
