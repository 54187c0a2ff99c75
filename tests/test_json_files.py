"""The one reader of JSON files a user or a download hands us (edgespec/plumbing/jsonfile.py):
whatever sits at the path, it returns the parsed JSON or a reason, at once and in bounded
memory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from edgespec.plumbing.jsonfile import read_json, read_json_object


def planted(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / "x.json"
    if kind == "fifo":
        os.mkfifo(path)  # no writer: a blocking open or read would wait forever
    elif kind == "dev zero":
        path.symlink_to("/dev/zero")  # endless: a read without a bound fills memory
    elif kind == "folder":
        path.mkdir()
    elif kind == "deep":
        path.write_bytes(b"[" * 200_000 + b"]" * 200_000)
    elif kind == "long integer":
        path.write_bytes(b'{"n": ' + b"9" * 100_000 + b"}")
    elif kind == "not utf-8":
        path.write_bytes(b'{"a": "\xff"}')
    elif kind == "too large":
        path.write_bytes(b" " * 1001 + b"{}")
    return path


@pytest.mark.parametrize(
    "kind, why",
    [
        ("fifo", "is a FIFO, not a file"),
        ("dev zero", "is a character device, not a file"),
        ("folder", "is a folder, not a file"),
        ("deep", "is nested deeper than JSON is read"),
        ("long integer", "holds an integer of 100,000 digits"),
        ("not utf-8", "is not UTF-8 text"),
        ("too large", "is larger than 1,000 bytes"),
    ],
)
def test_what_is_not_a_json_file_is_refused_with_the_reason(tmp_path, kind, why):
    with pytest.raises(ValueError) as e:
        read_json(planted(tmp_path, kind), 1000 if kind == "too large" else 1 << 20)
    assert str(e.value) == why


def test_a_symlink_loop_and_a_missing_file_are_os_errors(tmp_path):
    loop = tmp_path / "loop.json"
    loop.symlink_to(loop)
    with pytest.raises(OSError):
        read_json(loop, 1000)
    with pytest.raises(FileNotFoundError):
        read_json(tmp_path / "none.json", 1000)


def test_an_object_is_read_and_anything_else_named(tmp_path):
    path = tmp_path / "x.json"
    path.write_text('{"a": [1, -2, 2.5, "x", null], "b": ' + "9" * 100 + "}")
    assert read_json_object(path, 1000) == {"a": [1, -2, 2.5, "x", None], "b": int("9" * 100)}
    path.write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"^is not a JSON object \(a list\)$"):
        read_json_object(path, 1000)
