"""Hostile checkpoints into `edgespec export`: JSON files that are not JSON, a config.json
without the sizes the converter needs, truncated safetensors. Each is refused by name with
exit 2, no traceback, and nothing left beside --out."""

from __future__ import annotations

import json
import os
import shutil
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.hostile_cli import error_line, run_cli
from tests.tiny_hf import make_tiny_hf

AGAIN = "download or copy the checkpoint again"


@pytest.fixture(scope="module")
def tiny_hf(tmp_path_factory) -> Path:
    pytest.importorskip("safetensors")
    folder = tmp_path_factory.mktemp("hf") / "tiny"
    folder.mkdir()
    return make_tiny_hf(folder)


def write(name: str, data: bytes) -> Callable[[Path], None]:
    return lambda hf: (hf / name).write_bytes(data)


def edit_config(change: Callable[[dict], None]) -> Callable[[Path], None]:
    def apply(hf: Path) -> None:
        config = json.loads((hf / "config.json").read_text())
        change(config)
        (hf / "config.json").write_text(json.dumps(config))

    return apply


def truncate_weights(hf: Path) -> None:
    path = hf / "model.safetensors"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def huge_header(hf: Path) -> None:
    path = hf / "model.safetensors"
    path.write_bytes(struct.pack("<Q", 1 << 62) + path.read_bytes()[8:])


def expected_size(hf: Path) -> int:
    return (hf / "model.safetensors").stat().st_size


CASES = {
    "config not JSON": (
        write("config.json", b"{not json"),
        lambda hf: (
            f"{hf / 'config.json'} is not valid JSON (Expecting property name enclosed "
            f"in double quotes: line 1 column 2 (char 1)); {AGAIN}"
        ),
    ),
    "config binary": (
        write("config.json", b"\xff\xfe\x00garbage"),
        lambda hf: (  # a UTF-16 byte order mark: read as UTF-16, then not JSON
            f"{hf / 'config.json'} is not valid JSON (Expecting value: line 1 column 1 "
            f"(char 0)); {AGAIN}"
        ),
    ),
    "config a list": (
        write("config.json", b"[1, 2]"),
        lambda hf: f"{hf / 'config.json'} is not a JSON object (a list); {AGAIN}",
    ),
    "config lacks keys": (
        edit_config(lambda c: [c.pop("num_hidden_layers"), c.update(hidden_size="64")]),
        lambda hf: (
            f"{hf / 'config.json'} lacks hidden_size, num_hidden_layers (each a whole "
            f"number > 0); {AGAIN}"
        ),
    ),
    "tokenizer_config not JSON": (
        write("tokenizer_config.json", b"\x00\x01"),
        lambda hf: (
            f"{hf / 'tokenizer_config.json'} is not valid JSON (Expecting value: line 1 "
            f"column 1 (char 0)); {AGAIN}"
        ),
    ),
    "generation_config not JSON": (
        write("generation_config.json", b"{'eos': 2}"),
        lambda hf: (
            f"{hf / 'generation_config.json'} is not valid JSON (Expecting property "
            f"name enclosed in double quotes: line 1 column 2 (char 1)); {AGAIN}"
        ),
    ),
    "config a FIFO": (
        lambda hf: [(hf / "config.json").unlink(), os.mkfifo(hf / "config.json")],
        lambda hf: f"{hf / 'config.json'} is a FIFO, not a file; {AGAIN}",
    ),
    "generation_config /dev/zero": (
        lambda hf: (hf / "generation_config.json").symlink_to("/dev/zero"),
        lambda hf: f"{hf / 'generation_config.json'} is a character device, not a file; {AGAIN}",
    ),
    "tokenizer a folder": (
        lambda hf: [(hf / "tokenizer.json").unlink(), (hf / "tokenizer.json").mkdir()],
        lambda hf: f"{hf / 'tokenizer.json'} is a folder, not a file; {AGAIN}",
    ),
    "tokenizer not JSON": (
        write("tokenizer.json", b""),
        lambda hf: (
            f"{hf / 'tokenizer.json'} is not valid JSON (Expecting value: line 1 column "
            f"1 (char 0)); {AGAIN}"
        ),
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_a_broken_checkpoint_file_is_refused_by_name(tiny_hf, tmp_path, case):
    spoil, message = CASES[case]
    hf = tmp_path / "hf"
    shutil.copytree(tiny_hf, hf)
    spoil(hf)
    exports = tmp_path / "exports"
    exports.mkdir()
    o = run_cli(["export", "--target", str(hf), "--out", str(exports / "b")], tmp_path / "h", hf)
    assert error_line(o) == message(hf)
    assert list(exports.iterdir()) == []  # no bundle, no staging


@pytest.mark.parametrize("spoil", [truncate_weights, huge_header], ids=["halved", "2^62 header"])
def test_truncated_safetensors_are_refused_before_reading(tiny_hf, tmp_path, spoil):
    hf = tmp_path / "hf"
    shutil.copytree(tiny_hf, hf)
    full = expected_size(hf)
    spoil(hf)
    exports = tmp_path / "exports"
    exports.mkdir()
    o = run_cli(["export", "--target", str(hf), "--out", str(exports / "b")], tmp_path / "h", hf)
    size = expected_size(hf)
    needed = 8 + (1 << 62) if spoil is huge_header else full
    assert error_line(o) == (
        f"{hf / 'model.safetensors'} is truncated: it is {size:,} bytes and its header needs "
        f"{needed:,}; download or copy it again"
    )
    assert list(exports.iterdir()) == []
