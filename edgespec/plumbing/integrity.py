"""Verified stamps: a full sha256 check, remembered by what a user cannot set back.

A stamp records the expected sha256 and each checked file's identity: inode, size, mtime and
ctime (in ns). Anyone can restore an mtime with os.utime, but the kernel sets ctime on every
write, chmod or utime and no call sets it back, so an edit always changes the identity and
forces a full re-hash. Stamps are written atomically beside the file they vouch for (a
temporary file renamed over them: a symlink planted at the stamp's name is replaced, never
followed).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path


def identity(files: Iterable[Path]) -> str:
    """The files' inode, size, mtime and ctime: any write to any of them changes it."""
    parts = []
    for f in files:
        st = f.stat()
        parts.append(f"{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}")
    return " ".join(parts)


def stamp_key(sha256: str, files: Iterable[Path]) -> str:
    return f"{sha256} {identity(files)}"


def stamp_matches(stamp: Path, key: str) -> bool:
    try:
        return not stamp.is_symlink() and stamp.read_text() == key
    except (OSError, UnicodeDecodeError):
        return False


def write_stamp(stamp: Path, key: str) -> None:
    """Atomically replace stamp with key; a folder we cannot write is left unstamped (it is
    then verified in full each time)."""
    try:
        fd, tmp = tempfile.mkstemp(dir=stamp.parent, prefix=stamp.name, suffix=".tmp")
    except OSError:
        return
    try:
        with os.fdopen(fd, "w") as f:
            f.write(key)
        os.replace(tmp, stamp)
    except OSError:
        Path(tmp).unlink(missing_ok=True)
