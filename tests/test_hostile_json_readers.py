"""The JSON files the last readers took unguarded (an exported folder's model.json, TensorRT's
engine metadata and plan input, an export's staging marker) and safetensors headers: a FIFO,
a device, a folder or a hostile value ends in one line naming the file and the field, at once.
"""

from __future__ import annotations

import json
import os
import struct
import time
from pathlib import Path

import pytest

from edgespec.errors import EdgespecError, ModelFileError
from tests.hostile_cli import HANG_GUARD_S, error_line, run_cli

AGAIN = "export the model again"
CORRUPT = "the file is corrupt (download or copy it again)"
MODEL_JSON = {"n_vocab": 100, "n_layer": 2, "n_kv_head": 2, "head_dim": 16,
              "context_length": 64}  # fmt: skip


def model_folder(tmp_path: Path, info: dict | None = None) -> Path:
    """An exported model folder as read_model_json sees it (the graph's bytes are not read)."""
    folder = tmp_path / "model"
    folder.mkdir()
    for name in ("model.onnx", "tokenizer.json"):
        (folder / name).write_bytes(b"x")
    if info is not None:
        (folder / "model.json").write_text(json.dumps(info))
    return folder


@pytest.mark.parametrize("field", ["bos_id", "eos_id"])
def test_special_ids_outside_the_vocabulary_are_refused(tmp_path, field):
    from edgespec.runtimes.model_folder import read_model_json

    folder = model_folder(tmp_path, {**MODEL_JSON, field: 100})
    with pytest.raises(ModelFileError) as e:
        read_model_json(folder)
    assert str(e.value) == (
        f"{folder / 'model.json'}: field '{field}' is 100, outside the vocabulary of 100 "
        f"tokens (n_vocab); {AGAIN}"
    )


def test_a_model_json_that_is_a_fifo_is_refused_by_the_cli_at_once(tmp_path):
    folder = model_folder(tmp_path)
    os.mkfifo(folder / "model.json")  # no writer: a blocking read would wait forever
    o = run_cli(["run", "--target", str(folder), "--prompt", "hi"], tmp_path / "h", tmp_path)
    assert error_line(o) == f"{folder / 'model.json'} is a FIFO, not a file; {AGAIN}"


def test_a_model_json_too_large_is_refused(tmp_path):
    from edgespec.runtimes.model_folder import FOLDER_JSON_MAX_BYTES, read_model_json

    folder = model_folder(tmp_path)
    with (folder / "model.json").open("wb") as f:
        f.truncate(FOLDER_JSON_MAX_BYTES + 1)  # sparse: no disk, and never read whole
    with pytest.raises(ModelFileError) as e:
        read_model_json(folder)
    assert str(e.value) == (
        f"{folder / 'model.json'} is larger than {FOLDER_JSON_MAX_BYTES:,} bytes; {AGAIN}"
    )


def test_engine_metadata_that_is_a_folder_is_refused(tmp_path):
    from edgespec.runtimes.tensorrt import engine_metadata

    folder = model_folder(tmp_path)
    meta = tmp_path / "engines" / "model.json"
    meta.mkdir(parents=True)
    with pytest.raises(ModelFileError) as e:
        engine_metadata(folder)
    assert str(e.value) == f"{meta} is a folder, not a file; rebuild the engines"
    meta.rmdir()
    assert engine_metadata(folder) is None  # none built: the ONNX Runtime fallback


def test_an_engine_plan_needs_a_checked_model_json(tmp_path):
    from edgespec.export.trt_plan import plan_engine

    model_folder(tmp_path, {**MODEL_JSON, "flavour": "standard", "context_length": None})
    with pytest.raises(EdgespecError) as e:
        plan_engine(tmp_path, "target", "model")
    assert str(e.value) == (
        f"{tmp_path / 'model' / 'model.json'} gives no context_length, which an engine's KV "
        f"buffers are sized by; {AGAIN}"
    )
    (tmp_path / "model" / "model.json").write_text(json.dumps({**MODEL_JSON, "n_layer": "2"}))
    with pytest.raises(ModelFileError, match=r"field 'n_layer' must be a whole number"):
        plan_engine(tmp_path, "target", "model")


def test_a_staging_marker_that_is_a_fifo_is_passed_over_at_once(tmp_path):
    from edgespec.export.orchestrator import STAGING_MARKER, sweep_stale_staging

    staging = tmp_path / ".b.edgespec-staging-x"
    staging.mkdir()
    os.mkfifo(staging / STAGING_MARKER)
    t0 = time.monotonic()
    assert sweep_stale_staging(tmp_path) == []
    assert time.monotonic() - t0 < HANG_GUARD_S
    assert staging.is_dir()  # not known to be edgespec's stale folder: kept


# --- safetensors headers ----------------------------------------------------------------------


def safetensors(folder: Path, header: object, data: bytes = b"", length: int | None = None):
    raw = json.dumps(header).encode()
    path = folder / "model.safetensors"
    path.write_bytes(struct.pack("<Q", len(raw) if length is None else length) + raw + data)
    return path


ENTRY = {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}


@pytest.mark.parametrize(
    "header, why",
    [
        ([ENTRY], "the safetensors header is not a JSON object (a list)"),
        ({"w": {**ENTRY, "data_offsets": ["0", "4"]}},
         "tensor w: data_offsets must be two whole numbers >= 0, got ['0', '4']"),
        ({"w": {**ENTRY, "shape": [True]}},
         "tensor w: shape must be a list of whole numbers >= 0, got [True]"),
        ({"w": {**ENTRY, "dtype": 4}}, "tensor w: dtype must be a string, got 4"),
        ({"w": [0, 4]}, "tensor w is not an object"),
        ({"w": {**ENTRY, "shape": [2]}},
         "tensor w spans bytes 0..4, which does not fit its shape [2] and dtype F32"),
    ],
    ids=["a list", "offsets as strings", "shape of booleans", "dtype a number", "entry a list",
         "shape past its bytes"],
)  # fmt: skip
def test_a_hostile_safetensors_header_is_named(tmp_path, header, why):
    from edgespec.export.checkpoint import SafetensorsIndex

    path = safetensors(tmp_path, header, b"\0" * 4)
    with pytest.raises(ModelFileError) as e:
        SafetensorsIndex(tmp_path)
    assert str(e.value) == f"{path}: {why}; {CORRUPT}"


def test_a_safetensors_header_past_the_formats_bound_is_not_read(tmp_path):
    from edgespec.export.checkpoint import SAFETENSORS_MAX_HEADER, SafetensorsIndex

    path = safetensors(tmp_path, {}, length=SAFETENSORS_MAX_HEADER + 1)
    with path.open("r+b") as f:
        f.truncate(8 + SAFETENSORS_MAX_HEADER + 1)  # sparse: the file holds what it claims
    with pytest.raises(ModelFileError) as e:
        SafetensorsIndex(tmp_path)
    assert str(e.value) == (
        f"{path}: the safetensors header is 100,000,001 bytes, more than the format allows "
        f"(100,000,000); {CORRUPT}"
    )


def test_a_scalar_fc_weight_is_refused_by_the_head_converter(tmp_path):
    from edgespec.export.checkpoint import SafetensorsIndex
    from edgespec.export.eagle3_convert import HeadShape

    safetensors(tmp_path, {"fc.weight": {"dtype": "F32", "shape": [], "data_offsets": [0, 4]}},
                b"\0" * 4)  # fmt: skip
    with pytest.raises(ModelFileError) as e:
        HeadShape.of(tmp_path, {}, SafetensorsIndex(tmp_path))
    assert str(e.value) == (
        f"{tmp_path}: tensor fc.weight has shape [], not a matrix; download the head again"
    )
