"""Sizes and fields a model file declares (issue 16, parts 4 and 5): checked before anything
is allocated and before llama.cpp sees the file. A GGUF declaring 1e6 layers aborted the
whole process inside llama.cpp (GGML_ASSERT); model.json's n_layer or n_kv_head sized the
KV cache unchecked; a safetensors header length of 2^62 was allocated; bundle.json fields of
the wrong type surfaced as TypeErrors deep in a loader."""

from __future__ import annotations

import dataclasses
import json
import os
import struct
from pathlib import Path

import pytest

from edgespec.errors import BundleError, EdgespecError, ModelFileError
from tests.cli_subprocess import run_edgespec

pytest.importorskip("llama_cpp")

FIX = (
    "the file may be truncated or corrupt (compare its size and sha256 with the source, or "
    "export it again)"
)


def hostile_gguf(folder: Path, name: str, more=None, **config) -> Path:
    """The tiny model's weights under metadata that says something else."""
    from tests.tiny_gguf import TinyConfig, random_weights, vocabulary, write_gguf

    weights = random_weights(TinyConfig(), len(vocabulary()[0]), 0)
    folder.mkdir(parents=True, exist_ok=True)
    cfg = dataclasses.replace(TinyConfig(), **config)
    return write_gguf(folder / f"{name}.gguf", cfg, weights, more_metadata=more)


def experts(n: int, used: int):
    return lambda w: (w.add_expert_count(n), w.add_expert_used_count(used))


HOSTILE_GGUF = {
    "1e6 layers": (dict(n_layer=10**6), None,
                   "1,000,000 layers (llama.block_count); llama.cpp runs 1 to 512"),
    "600 layers": (dict(n_layer=600), None,
                   "600 layers (llama.block_count); llama.cpp runs 1 to 512"),
    "1e7 KV heads": (dict(n_head_kv=10**7), None,
                     "4 attention heads and 10,000,000 KV heads for an embedding of 64; KV "
                     "heads are at most the heads, heads at most the embedding"),
    "1e7 heads": (dict(n_head=10**7), None,
                  "10,000,000 attention heads and 2 KV heads for an embedding of 64; KV heads "
                  "are at most the heads, heads at most the embedding"),
    "2000 experts": ({}, experts(2000, 2), "2,000 experts; llama.cpp runs at most 1024"),
    "more used than experts": ({}, experts(4, 8), "8 experts used per token of 4"),
    "rope scaling": ({}, lambda w: w.add_string("llama.rope.scaling.type", "sideways"),
                     "RoPE scaling type 'sideways', not one of none, linear, yarn, longrope"),
}  # fmt: skip


@pytest.mark.parametrize("name", HOSTILE_GGUF)
def test_gguf_metadata_llama_cpp_would_abort_on_is_refused(tmp_path, name):
    from edgespec.runtimes.llamacpp import LlamaCppRuntime

    config, more, what = HOSTILE_GGUF[name]
    path = hostile_gguf(tmp_path, "m", more, **config)
    with pytest.raises(ModelFileError) as e:
        LlamaCppRuntime(path, n_ctx=64)
    assert str(e.value) == f"{path} declares {what}; {FIX}"


@pytest.mark.parametrize("name", ["1e6 layers", "2000 experts", "rope scaling"])
def test_the_cli_survives_metadata_that_aborts_llama_cpp(tmp_path, name):
    """In a process of its own: without the check llama.cpp's GGML_ASSERT kills it (134)."""
    config, more, what = HOSTILE_GGUF[name]
    models = tmp_path / "models"
    path = hostile_gguf(models, "m", more, **config)
    done = run_edgespec(
        tmp_path, "run", "--target", str(path), "--prompt", "hi", "--drafter", "none",
        "--n-ctx", "64", models=models,
    )  # fmt: skip
    assert done.error_line() == f"{path} declares {what}; {FIX}"


def test_a_kv_cache_larger_than_free_memory_is_refused_before_allocating(tmp_path):
    from edgespec.runtimes.llamacpp import LlamaCppRuntime

    path = hostile_gguf(tmp_path, "long", n_ctx=2**31)
    # 2 layers x 2^31 positions x 2 KV heads x (16 + 16) dims x 2 bytes = 512 GiB
    with pytest.raises(EdgespecError) as e:
        LlamaCppRuntime(path, n_ctx=2**31)
    assert str(e.value).startswith(
        f"a 2,147,483,648-token context for {path} needs 512.0 GiB of KV cache and "
    )
    assert str(e.value).endswith(" GiB of memory is free; lower --n-ctx (or free memory)")


def test_a_header_that_runs_past_the_file_is_refused(tmp_path):
    from edgespec.runtimes.gguf_meta import read_metadata

    path = tmp_path / "m.gguf"
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 10**12))
    with pytest.raises(ModelFileError) as e:
        read_metadata(path)
    assert str(e.value) == (
        f"cannot load {path}: it declares 1,000,000,000,000 metadata entries, more than its 24 "
        f"bytes can hold; {FIX}"
    )
    key = b"general.name"
    path.write_bytes(
        b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", len(key)) + key
        + struct.pack("<IQ", 8, 2**62)
    )  # fmt: skip
    with pytest.raises(ModelFileError, match="declares 4,611,686,018,427,387,904 bytes of text"):
        read_metadata(path)


def test_the_metadata_reader_reads_what_the_writer_wrote(tiny_pair):
    from edgespec.runtimes.gguf_meta import read_metadata
    from tests.tiny_gguf import vocabulary

    meta = read_metadata(tiny_pair[0])
    assert meta["general.architecture"] == "llama"
    assert (meta["llama.block_count"], meta["llama.attention.head_count_kv"]) == (2, 2)
    assert meta["tokenizer.ggml.tokens"].length == len(vocabulary()[0])


# --- ONNX model.json -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def onnx_model(tmp_path_factory) -> Path:
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from edgespec.export.onnx_export import export_onnx
    from tests.tiny_hf import make_tiny_hf

    folder = tmp_path_factory.mktemp("onnx")
    return export_onnx(make_tiny_hf(folder / "hf", arch="qwen2", seed=3), folder / "model")


@pytest.mark.parametrize(
    "change, message",
    [
        ({"n_layer": 10**6}, "field 'n_layer' must be a whole number from 1 to 4,096, got "
                             "1,000,000; export the model again"),
        ({"n_kv_head": 10**7}, "field 'n_kv_head' must be a whole number from 1 to 4,096, got "
                               "10,000,000; export the model again"),
        ({"head_dim": "16"}, "field 'head_dim' must be a whole number from 1 to 4,096, got a "
                             "string '16'; export the model again"),
        ({"n_vocab": True}, "field 'n_vocab' must be a whole number from 1 to 16,777,216, got "
                            "a boolean True; export the model again"),
        ({"sliding_window": [4]}, "field 'sliding_window' must be a whole number >= 1 or null, "
                                  "got a list [4]; export the model again"),
    ],
)  # fmt: skip
def test_model_json_fields_of_the_wrong_type_or_size_are_named(onnx_model, tmp_path, change,
                                                               message):  # fmt: skip
    from edgespec.runtimes.onnxrt import OnnxRuntime

    folder = copy_model(onnx_model, tmp_path, change)
    with pytest.raises(ModelFileError) as e:
        OnnxRuntime(folder, n_ctx=64)
    assert str(e.value) == f"{folder / 'model.json'}: {message}"


@pytest.mark.parametrize("field, value, graph", [("n_layer", 3, 2), ("n_kv_head", 4, 2),
                                                 ("head_dim", 8, 16)])  # fmt: skip
def test_model_json_sizes_must_be_the_graphs(onnx_model, tmp_path, field, value, graph):
    from edgespec.runtimes.onnxrt import OnnxRuntime

    folder = copy_model(onnx_model, tmp_path, {field: value})
    with pytest.raises(ModelFileError) as e:
        OnnxRuntime(folder, n_ctx=64)
    assert str(e.value) == (
        f"{folder / 'model.json'} says {field} {value:,} but the graph has {graph:,}; the "
        "folder mixes files of different models: export the model again"
    )


def test_an_onnx_kv_cache_larger_than_free_memory_is_refused(onnx_model, tmp_path):
    from edgespec.runtimes.onnxrt import OnnxRuntime

    folder = copy_model(onnx_model, tmp_path, {"context_length": 2**31})
    with pytest.raises(EdgespecError) as e:  # 2 x 2 layers x 2 heads x 2^31 x 16 x 4 bytes
        OnnxRuntime(folder, n_ctx=2**31)
    assert str(e.value).startswith(
        f"a 2,147,483,648-token context for {folder} needs 1,024.0 GiB of KV cache and "
    )


@pytest.mark.parametrize(
    "name, content, chat, why",
    [
        ("generation_config.json", b'{"eos_token_id": [1, 2', False,
         " is not valid JSON (Expecting ',' delimiter: line 1 column 23 (char 22))"),
        ("generation_config.json", b"[1, 2]", False, " is not a JSON object (a list)"),
        ("generation_config.json", b'{"eos_token_id": ["</s>"]}', False,
         ": eos_token_id must be a token id or a list of them, got ['</s>']"),
        ("tokenizer_config.json", b'{"chat_template": "{{ x }}', True,
         " is not valid JSON (Unterminated string starting at: line 1 column 19 (char 18))"),
        ("tokenizer_config.json", b'{"chat_template": "caf\xe9"}', True, " is not UTF-8 text"),
        ("tokenizer_config.json", b'"a template"', True, " is not a JSON object (a string)"),
        ("generation_config.json", "fifo", False, " is a FIFO, not a file"),
        ("tokenizer_config.json", "folder", True, " is a folder, not a file"),
    ],
    ids=["gen truncated", "gen a list", "gen eos text", "tok truncated", "tok latin-1",
         "tok a string", "gen a fifo", "tok a folder"],
)  # fmt: skip
def test_a_malformed_json_file_of_an_onnx_folder_is_refused_by_name(onnx_model, tmp_path, name,
                                                                   content, chat, why):  # fmt: skip
    """generation_config.json is read for the end-of-generation ids, tokenizer_config.json for
    the chat template (--chat): JSONDecodeError tracebacks."""
    folder = copy_model(onnx_model, tmp_path, {})
    plant(folder / name, content)
    argv = ["run", "--target", str(folder), "--prompt", "hi", "--drafter", "none",
            "--max-tokens", "2", "--n-ctx", "64", *(["--chat"] if chat else [])]  # fmt: skip
    done = run_edgespec(tmp_path, *argv, models=folder)
    assert done.error_line() == f"{folder / name}{why}; export the model again"


def plant(path: Path, content: bytes | str) -> None:
    """content at path; "fifo" a FIFO without a writer, "folder" a folder."""
    path.unlink(missing_ok=True)
    if content == "fifo":
        os.mkfifo(path)
    elif content == "folder":
        path.mkdir()
    else:
        assert isinstance(content, bytes)
        path.write_bytes(content)


def copy_model(source: Path, tmp_path: Path, change: dict) -> Path:
    import shutil

    folder = tmp_path / "model"
    shutil.copytree(source, folder)
    info = json.loads((folder / "model.json").read_text())
    (folder / "model.json").write_text(json.dumps({**info, **change}))
    return folder


# --- safetensors and bundle.json ------------------------------------------------------------


def test_a_safetensors_header_length_of_2_62_is_refused(tmp_path):
    from edgespec.export.checkpoint import SafetensorsIndex

    path = tmp_path / "model.safetensors"
    path.write_bytes(struct.pack("<Q", 2**62) + b"{}")
    with pytest.raises(ModelFileError) as e:
        SafetensorsIndex(tmp_path)
    assert str(e.value) == (
        f"{path} is truncated: it is 10 bytes and its header needs 4,611,686,018,427,387,912; "
        "download or copy it again"
    )


ENTRY = {"role": "target", "format": "gguf", "path": "t.gguf", "quant": "f32", "sha256": "0",
         "size": 1, "n_vocab": 279, "vocab_hash": "h", "n_ctx": 512, "arch": "llama"}  # fmt: skip


@pytest.mark.parametrize(
    "doc, message",
    [
        ({"models": "t.gguf"}, "field 'models' must be a list, got a string 't.gguf'; export "
                               "the bundle again"),
        ({"models": [ENTRY], "tune": [1]}, "field 'tune' must be an object or null, got a list "
                                           "[1]; export the bundle again"),
        ({"models": [{**ENTRY, "path": ["t.gguf"]}]}, "models[0]: field 'path' must be a string, "
                                                      "got a list ['t.gguf']; export the bundle "
                                                      "again"),
        ({"models": [{**ENTRY, "size": "1"}]}, "models[0]: field 'size' must be a whole number "
                                               ">= 0, got a string '1'; export the bundle again"),
    ],
)  # fmt: skip
def test_bundle_json_fields_of_the_wrong_type_are_named(tmp_path, doc, message):
    from edgespec.bundle import read_bundle

    manifest = tmp_path / "bundle.json"
    manifest.write_text(json.dumps({"schema_version": 1, **doc}))
    with pytest.raises(BundleError) as e:
        read_bundle(tmp_path)
    assert str(e.value) == f"{manifest}: {message}"


@pytest.mark.parametrize(
    "content, message",
    [
        (b"[" * 200_000, "is nested deeper than JSON is read"),
        (b'{"schema_version": 1, "models": [], "n": ' + b"1" * 100_000 + b"}",
         "holds an integer of 100,000 digits"),
        (b"[1, 2]", "is not a JSON object (a list)"),
        (b'{"schema_version": 1, "models": [' + json.dumps(ENTRY).encode().replace(
            b'"n_vocab": 279', b'"n_vocab": 1000000000') + b"]}",
         ": models[0]: field 'n_vocab' must be a whole number from 0 to 16,777,216, got "
         "1,000,000,000"),
        (b'{"schema_version": 1, "models": [[1]]}', ": models[0] is not an object"),
    ],
    ids=["deep", "long integer", "list", "absurd vocabulary", "list entry"],
)  # fmt: skip
def test_a_hostile_bundle_json_is_refused_in_one_line(tmp_path, content, message):
    from edgespec.bundle import read_bundle

    manifest = tmp_path / "bundle.json"
    manifest.write_bytes(content)
    with pytest.raises(BundleError) as e:
        read_bundle(tmp_path)
    space = "" if message[0] == ":" else " "
    assert str(e.value) == f"{manifest}{space}{message}; export the bundle again"


@pytest.mark.parametrize("kind", ["fifo", "dev zero"])
def test_the_cli_refuses_a_bundle_json_that_is_no_file_at_once(tmp_path, kind):
    """A FIFO as bundle.json would block the read forever; /dev/zero would fill memory."""
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    manifest = bundle / "bundle.json"
    os.mkfifo(manifest) if kind == "fifo" else manifest.symlink_to("/dev/zero")
    done = run_edgespec(tmp_path, "run", "--target", str(bundle), "--prompt", "hi")
    what = "a FIFO" if kind == "fifo" else "a character device"
    assert done.error_line() == f"{manifest} is {what}, not a file; export the bundle again"


# --- a draft head's GGUF and an MTP target's layers ------------------------------------------


def replaced(key: str, value, kind: str = "uint32"):
    """A head's metadata key written again with another value."""

    def more(writer):
        writer.kv_data[0].pop(key, None)
        getattr(writer, f"add_{kind}")(key, value)

    return more


HOSTILE_HEADS = {
    "rope scaling": (dict(more_metadata=replaced("eagle3.rope.scaling.type", "sideways", "string")),
                     "RoPE scaling type 'sideways', not one of none, linear, yarn, longrope"),
    "1e6 layers": (dict(more_metadata=replaced("eagle3.block_count", 10**6)),
                   "1,000,000 layers (eagle3.block_count); llama.cpp runs 1 to 512"),
    "layers not the tensors'": (dict(more_metadata=replaced("eagle3.block_count", 2)),
                                "2 layers (eagle3.block_count) but its tensors hold layers 0"),
    "no RoPE dimensions": (dict(more_metadata=replaced("eagle3.rope.dimension_count", 0)),
                           "0 RoPE dimensions (eagle3.rope.dimension_count) for heads of 16; an "
                           "EAGLE-3 head rotates whole heads"),
}  # fmt: skip


@pytest.fixture(scope="module")
def head_target(tmp_path_factory) -> Path:
    from tests.tiny_eagle import TARGET
    from tests.tiny_gguf import random_weights, vocabulary, write_gguf

    folder = tmp_path_factory.mktemp("head-target")
    weights = random_weights(TARGET, len(vocabulary()[0]), 0)
    return write_gguf(folder / "target.gguf", TARGET, weights)


@pytest.mark.parametrize("name", HOSTILE_HEADS)
def test_head_metadata_llama_cpp_would_abort_or_hang_on_is_refused(tmp_path, head_target, name):
    """In a process of its own: unchecked, llama.cpp aborts (134) on the first three and
    never ends the first pass of the last."""
    from tests.tiny_eagle import TARGET, write_head

    kwargs, what = HOSTILE_HEADS[name]
    models = tmp_path / "models"
    models.mkdir()
    head = write_head(models / "head.gguf", TARGET, **kwargs)
    done = run_edgespec(
        tmp_path, "run", "--target", str(head_target), "--head", str(head), "--prompt", "hi",
        "--drafter", "eagle", "--k", "2", "--max-tokens", "4", "--n-ctx", "64", models=models,
    )  # fmt: skip
    assert done.error_line() == f"{head} declares {what}; {FIX}"


def test_export_refuses_a_hostile_head_and_leaves_nothing_behind(tmp_path, head_target):
    from tests.tiny_eagle import TARGET, write_head

    kwargs, what = HOSTILE_HEADS["rope scaling"]
    models = tmp_path / "models"
    models.mkdir()
    head = write_head(models / "head.gguf", TARGET, **kwargs)
    out = tmp_path / "out"
    done = run_edgespec(
        tmp_path, "export", "--target", str(head_target), "--head", str(head), "--out", str(out),
        "--target-quant", "q8_0", models=models,
    )  # fmt: skip
    assert done.error_line() == f"{head} declares {what}; {FIX}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cwd", "models"]  # no staging left


MTP_FIX = "convert the model again with its MTP layers, or choose another --drafter"
HOSTILE_MTP = {
    "no MTP block": (dict(drop=("blk.2.",)),
                     "declares 1 MTP layer (glm4moe.nextn_predict_layers) but holds no "
                     "blk.2.nextn.eh_proj.weight"),
    "two MTP layers": (dict(declared=2),
                       "declares 2 MTP layers (glm4moe.nextn_predict_layers); this llama.cpp "
                       "runs one"),
}  # fmt: skip


@pytest.mark.parametrize("name", HOSTILE_MTP)
def test_mtp_layers_llama_cpp_would_abort_on_are_refused_or_left_out(tmp_path, name):
    """--drafter mtp: refused in one line; --drafter auto: a warning, and plain decoding's
    tokens (unchecked, llama.cpp aborted building the MTP graph under both)."""
    from tests.tiny_mtp import write_mtp_target

    kwargs, what = HOSTILE_MTP[name]
    models = tmp_path / "models"
    models.mkdir()
    path = write_mtp_target(models / "glm.gguf", **kwargs)
    argv = ("run", "--target", str(path), "--prompt", "hi", "--max-tokens", "6", "--n-ctx", "64",
            "--json")  # fmt: skip
    done = run_edgespec(tmp_path, *argv, "--drafter", "mtp", "--k", "2", models=models)
    assert done.error_line() == f"--drafter mtp: {path.name} {what}; {MTP_FIX}"
    auto = run_edgespec(tmp_path, *argv, models=models)
    assert auto.returncode == 0, auto.stderr
    assert auto.warnings() == [
        f"WARNING edgespec.loader: {path.name} {what}; drafting without its MTP layers"
    ]
    plain = run_edgespec(tmp_path, *argv, "--drafter", "none", models=models)
    assert json.loads(auto.stdout)["tokens"] == json.loads(plain.stdout)["tokens"]


def test_a_head_that_fails_at_run_time_is_dropped_and_the_target_answers(tmp_path, head_target):
    """A head with NaN weights under sampling ended the run ("the model's logits hold NaN")
    although only the draft head was broken: the drafter is dropped for the request with one
    warning and the output is plain decoding's, token for token."""
    from tests.tiny_eagle import TARGET, write_head

    models = tmp_path / "models"
    models.mkdir()
    head = write_head(models / "head.gguf", TARGET, nan=True)
    argv = ("run", "--target", str(head_target), "--prompt", "hi", "--max-tokens", "12",
            "--n-ctx", "64", "--temperature", "0.8", "--seed", "3", "--json")  # fmt: skip
    plain = run_edgespec(tmp_path, *argv, "--drafter", "none", models=models)
    done = run_edgespec(tmp_path, *argv, "--head", str(head), "--drafter", "eagle", "--k", "3",
                        models=models)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.warnings() == [
        "WARNING edgespec.engine: the eagle drafter failed (the model's logits hold NaN, so no "
        "token can be drawn; the model file or its back-end is broken: check it with `edgespec "
        "doctor`); decoding on without it"
    ]
    assert json.loads(done.stdout)["tokens"] == json.loads(plain.stdout)["tokens"]
