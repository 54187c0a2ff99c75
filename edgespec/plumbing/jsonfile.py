"""The one reader of a JSON file a user or a download hands us (bundle.json, head.json,
model.json, the stores): whatever sits at the path, it returns parsed JSON or says why not.

Only a regular file is read (symlinks followed; a FIFO, a device such as /dev/zero or a
folder is refused at once: it is opened non-blocking, so a FIFO without a writer cannot hang
the open, and never read). The size is capped before reading, integers longer than
MAX_INT_DIGITS are refused (Python's own limit raises a ValueError naming no file), and
nesting past Python's recursion limit is refused instead of raising RecursionError.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

MAX_INT_DIGITS = 100  # 2**256 has 78: no count, id, size or seed in our files is longer
NOT_REGULAR = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a folder",
}


def read_json(path: Path, max_bytes: int) -> Any:
    """The parsed JSON at path. ValueError saying why it cannot be (not a regular file, over
    max_bytes, not UTF-8, not JSON, nested too deeply, an integer too long); OSError where it
    cannot be opened or read (FileNotFoundError where nothing is there)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    try:
        kind = stat.S_IFMT(os.fstat(fd).st_mode)
        if kind != stat.S_IFREG:
            raise ValueError(f"is {NOT_REGULAR.get(kind, 'not a regular file')}, not a file")
        data = read_at_most(fd, max_bytes + 1)  # the file may grow after the fstat
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise ValueError(f"is larger than {max_bytes:,} bytes")
    return parse_json(data)


def read_at_most(fd: int, n: int) -> bytes:
    chunks: list[bytes] = []
    while n > 0 and (chunk := os.read(fd, min(n, 1 << 20))):
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def parse_json(data: bytes) -> Any:
    try:
        return json.loads(data, parse_int=bounded_int)
    except UnicodeDecodeError:
        raise ValueError("is not UTF-8 text") from None
    except RecursionError:
        raise ValueError("is nested deeper than JSON is read") from None
    except LongInteger as e:
        raise ValueError(f"holds {e}") from None
    except ValueError as e:  # json.JSONDecodeError, bounded_int's
        raise ValueError(f"is not valid JSON ({e})") from None


class LongInteger(ValueError):
    """An integer longer than MAX_INT_DIGITS."""


def bounded_int(digits: str) -> int:
    n = len(digits.lstrip("-"))
    if n > MAX_INT_DIGITS:
        raise LongInteger(f"an integer of {n:,} digits")
    return int(digits)


def read_json_object(path: Path, max_bytes: int) -> dict:
    """read_json, refusing anything but an object at the top (ValueError)."""
    doc = read_json(path, max_bytes)
    if not isinstance(doc, dict):
        raise ValueError(f"is not a JSON object (a {json_kind(doc)})")
    return doc


def json_kind(value: Any) -> str:
    names = {list: "list", str: "string", bool: "boolean", dict: "object"}
    return "null" if value is None else names.get(type(value), "number")


def load_object(path: Path, max_bytes: int, fix: str, error: type[Exception]) -> dict:
    """read_json_object for a file a command needs: every failure one `error` line naming the
    file and ending in fix ("... is missing; fix" where nothing is there)."""
    doc = load_optional_object(path, max_bytes, fix, error)
    if doc is None:
        raise error(f"{path} is missing; {fix}")
    return doc


def load_optional_object(
    path: Path, max_bytes: int, fix: str, error: type[Exception]
) -> dict | None:
    """load_object for a file that may be absent (None); anything else at the path that is
    not a JSON object (a FIFO, a folder, a huge file) is refused as load_object refuses it."""
    try:
        return read_json_object(path, max_bytes)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise error(f"{path} cannot be read ({e.strerror or e}); {fix}") from None
    except ValueError as e:
        raise error(f"{path} {e}; {fix}") from None
