"""`edgespec export`: options in, a verified bundle out, whatever the format.

The orchestrator owns what every format shares: the staging folder beside --out (moved into
place only when complete, so a failed export never leaves half a bundle; removed on errors,
Ctrl-C and SIGTERM; one left by a killed export is swept by the next export there), the bundle
manifest (tokenizer and policy sections), and the one tuning call. Each format has one
builder that writes its model files into the staging folder and describes them
(BuiltModels): export/gguf_bundle.py, export/onnx_bundle.py, export/trt_bundle.py (its
engines are built after the bundle is in place, where TensorRT and a GPU are: export/cli.py).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import socket
import tempfile
from collections.abc import Callable
from pathlib import Path

from edgespec.bundle import Bundle, write_bundle
from edgespec.errors import EdgespecError
from edgespec.export.options import BuiltModels, ExportOptions
from edgespec.plumbing.jsonfile import read_json_object
from edgespec.quant.gguf_quant import no_space_message
from edgespec.quant.policy import PrecisionChoice
from edgespec.runtime import VocabInfo

log = logging.getLogger(__name__)

FORMATS = ("gguf", "onnx", "tensorrt")
STAGING_TAG = "edgespec-staging-"
STAGING_MARKER = "edgespec-staging.json"
MARKER_MAX_BYTES = 4096  # a pid, a host name and a path
Builder = Callable[[ExportOptions, Path, Path], BuiltModels]  # (opts, work_dir, staging)


def export_bundle(opts: ExportOptions) -> Path:
    """Build the bundle in a staging folder beside --out; move it into place when complete."""
    build = builder(opts.format)
    check_draft_vocab(opts)
    check_head(opts)
    out = opts.out
    check_out(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        sweep_stale_staging(out.parent)
        work_dir = new_staging(out)
        try:
            build_in(work_dir, build, opts)
        finally:  # also on Ctrl-C and SIGTERM (plumbing/interrupts.py); SIGKILL: swept later
            shutil.rmtree(work_dir, ignore_errors=True)
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            where = Path(e.filename) if e.filename else out.parent
            raise EdgespecError(no_space_message(where)) from None
        raise
    return out


def check_draft_vocab(opts: ExportOptions) -> None:
    if opts.draft_vocab is None:
        return
    if opts.draft_vocab < 0:
        raise EdgespecError(
            f"--draft-vocab must be >= 0 (0 keeps every token id), got {opts.draft_vocab}"
        )
    if opts.format != "onnx":
        raise EdgespecError("--draft-vocab applies to --format onnx only")


def check_head(opts: ExportOptions) -> None:
    if opts.head is not None and opts.format == "tensorrt":
        raise EdgespecError(
            f"--head {opts.head}: heads run on llama.cpp and ONNX Runtime, not TensorRT yet; "
            "export with --format gguf or onnx, or drop --head"
        )


def build_in(work_dir: Path, build: Builder, opts: ExportOptions) -> None:
    """Build the bundle in work_dir/bundle, write its manifest, and move it to --out."""
    staging = work_dir / "bundle"
    staging.mkdir()
    built = build(opts, work_dir, staging)
    policy = policy_section(built.choice, opts) | built.policy
    bundle = Bundle(staging, built.entries, tokenizer_section(built.vocab), policy)
    if opts.tune:
        bundle = Bundle(staging, bundle.models, bundle.tokenizer, policy, tune(bundle))
    write_bundle(bundle)
    if opts.out.exists():
        opts.out.rmdir()  # empty, checked before
    staging.replace(opts.out)


def check_out(out: Path) -> None:
    """--out must be a new or empty folder whose parents are folders."""
    for parent in reversed(out.parents):
        if parent.exists() and not parent.is_dir():
            raise EdgespecError(
                f"--out {out} is under {parent}, which is a file, not a folder; "
                "choose an --out folder elsewhere"
            )
    if out.exists() and not out.is_dir():
        raise EdgespecError(f"--out {out} is a file, not a folder; choose a new --out folder")
    if out.exists() and any(out.iterdir()):
        raise EdgespecError(f"{out} exists and is not empty; choose a new --out folder")


def new_staging(out: Path) -> Path:
    """A hidden folder beside --out, marked with this process's id so a later export can tell
    a stale one (its process gone: killed by SIGKILL or a power cut) from one in use."""
    work_dir = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.{STAGING_TAG}"))
    marker = {"pid": os.getpid(), "host": socket.gethostname(), "out": str(out)}
    try:
        (work_dir / STAGING_MARKER).write_text(json.dumps(marker) + "\n")
    except BaseException:
        shutil.rmtree(work_dir, ignore_errors=True)
        raise
    return work_dir


def sweep_stale_staging(folder: Path) -> list[Path]:
    """Remove staging folders an export left in folder whose process is gone. Only folders
    edgespec made (named so, holding its marker), made on this host, are ever removed."""
    removed = []
    for path in folder.glob(f".*.{STAGING_TAG}*"):
        marker = path / STAGING_MARKER
        if path.is_symlink() or not marker.is_file():
            continue
        try:
            doc = read_json_object(marker, MARKER_MAX_BYTES)  # a FIFO there cannot hang it
            pid, host = int(doc["pid"]), doc["host"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if host != socket.gethostname() or process_alive(pid):
            continue
        shutil.rmtree(path, ignore_errors=True)
        log.warning("removed %s, left by an export (process %d) that did not finish", path, pid)
        removed.append(path)
    return removed


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True


def builder(fmt: str) -> Builder:
    """The format's builder, imported only when asked for (each needs its own extra)."""
    if fmt == "gguf":
        from edgespec.export.gguf_bundle import build_gguf

        return build_gguf
    if fmt == "onnx":
        from edgespec.export.onnx_bundle import build_onnx

        return build_onnx
    if fmt == "tensorrt":
        from edgespec.export.trt_bundle import build_tensorrt

        return build_tensorrt
    raise EdgespecError(f"format {fmt!r} is not available; use {' or '.join(FORMATS)}")


def tune(bundle: Bundle) -> dict[str, object]:
    """The export's one tuning call: the cost curve of the bundle's own files, measured here
    and stored in bundle.json with the device and runtime it holds for (calibrate.py owns
    measuring, storing and describing)."""
    from edgespec.controller.calibrate import tune_bundle

    return tune_bundle(bundle)


def tokenizer_section(vocab: VocabInfo) -> dict[str, object]:
    return {
        "type": vocab.vocab_type,
        "n_vocab": vocab.n_vocab,
        "bos_id": vocab.bos_id,
        "eos_id": vocab.eos_id,
        "eog_ids": sorted(vocab.eog_ids),
        "vocab_hash": vocab.token_text_hash,
    }


def policy_section(choice: PrecisionChoice, opts: ExportOptions) -> dict[str, object]:
    return {
        "device": opts.device,
        "target_quant": choice.target_quant,
        "draft_quant": choice.draft_quant,
        "output_tensor_type": choice.output_tensor_type,
        "reason": choice.reason,
        "forced": opts.force,
    }
