"""bundle.json: the manifest `edgespec export` writes and every loader trusts only after checking.

A bundle is one folder: the manifest plus the model files it names. Paths are relative and
stay inside the folder, symlinks included; every file's size and sha256 are checked at load
(the full hash once, then again whenever a file's inode, size, mtime or ctime changes: see
integrity.py). An ONNX model is a folder (graph, weights, tokenizer): its entry's size is the
folder's total and its sha256 is taken over the sorted lines "name size sha256" of the files
in it (the runtime loads only plain file names from it, so everything loaded is hashed).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from edgespec.errors import BundleError
from edgespec.plumbing.integrity import stamp_key, stamp_matches, write_stamp
from edgespec.plumbing.jsonfile import read_json_object
from edgespec.plumbing.schema import Field, check_fields

SCHEMA_VERSION = 1
MANIFEST = "bundle.json"
ROLES = ("target", "draft", "head")  # head: a trained draft head (EAGLE-3: GGUF, ONNX folder)
FORMATS = ("gguf", "onnx", "tensorrt")
FOLDER_FORMATS = ("onnx", "tensorrt")  # a model folder; tensorrt: the standard-operator ONNX
# (its engines, built on the device, live in engines/ beside it with their own sha256 and
# device metadata: policy.tensorrt.engines, checked by runtimes/tensorrt.py at load)


# field types as read (plumbing/schema.py): a wrong type is named with its file, not met later
BUNDLE_FIELDS = {
    "models": Field("list"),
    "tokenizer": Field("object", required=False, nullable=True),
    "policy": Field("object", required=False, nullable=True),
    "tune": Field("object", required=False, nullable=True),
}
ENTRY_FIELDS = {
    **{name: Field("str") for name in ("role", "format", "path", "quant", "sha256")},
    **{name: Field("str") for name in ("vocab_hash", "arch")},
    "size": Field("int", min=0),
    "n_vocab": Field("int", min=0, max=1 << 24),
    "n_ctx": Field("int", min=0, max=1 << 26),
}
MANIFEST_MAX_BYTES = 16 << 20  # a manifest names a few files; a larger one is not ours


@dataclass(frozen=True)
class ModelEntry:
    role: str  # target | draft | head
    format: str  # gguf | onnx | tensorrt (a standard-operator ONNX folder + engines/)
    path: str  # relative to the bundle folder, POSIX separators
    quant: str  # q4_k_m, q8_0, f16, int4, fp8, ...
    sha256: str
    size: int
    n_vocab: int
    vocab_hash: str  # sha256 over token texts: equal hashes = interchangeable token ids
    n_ctx: int
    arch: str


@dataclass(frozen=True)
class Bundle:
    folder: Path
    models: tuple[ModelEntry, ...]
    tokenizer: dict[str, Any] = field(default_factory=dict)
    policy: dict[str, Any] = field(default_factory=dict)
    tune: dict[str, Any] | None = None
    schema_version: int = SCHEMA_VERSION

    def model(self, role: str) -> ModelEntry | None:
        return next((m for m in self.models if m.role == role), None)

    def path(self, role: str) -> Path | None:
        entry = self.model(role)
        return self.folder / entry.path if entry else None


def is_bundle(path: str | Path) -> bool:
    """A folder with a manifest (whatever it is: read_bundle refuses one that is no file)."""
    return os.path.lexists(Path(path) / MANIFEST)


def sha256_path(path: Path) -> str:
    """A file's sha256, or a model folder's (over its files' names, sizes and hashes)."""
    if not path.is_dir():
        return sha256_file(path)
    lines = "".join(f"{f.name} {f.stat().st_size} {sha256_file(f)}\n" for f in folder_files(path))
    return hashlib.sha256(lines.encode()).hexdigest()


def size_of(path: Path) -> int:
    return sum(f.stat().st_size for f in model_files(path))


def model_files(path: Path) -> list[Path]:
    """The file a GGUF entry names, or the files of an ONNX model folder."""
    return folder_files(path) if path.is_dir() else [path]


def folder_files(folder: Path) -> list[Path]:
    """The files a model folder holds, hidden ones (our .verified stamps) left out."""
    return sorted(f for f in folder.iterdir() if f.is_file() and not f.name.startswith("."))


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def write_bundle(bundle: Bundle) -> Path:
    """Write bundle.json atomically (a crash leaves the old manifest or none, never half)."""
    check_entries(bundle.folder, bundle.models, verify_files=False)
    doc = {
        "schema_version": SCHEMA_VERSION,
        "models": [asdict(m) for m in bundle.models],
        "tokenizer": bundle.tokenizer,
        "policy": bundle.policy,
        "tune": bundle.tune,
    }
    out = bundle.folder / MANIFEST
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    os.replace(tmp, out)
    return out


def read_bundle(folder: str | Path, *, verify: bool = True) -> Bundle:
    folder = Path(folder)
    manifest = folder / MANIFEST
    try:
        doc = read_json_object(manifest, MANIFEST_MAX_BYTES)
    except FileNotFoundError:
        raise BundleError(
            f"{folder} is not a bundle: {MANIFEST} is missing; run `edgespec export`"
        ) from None
    except OSError as e:
        raise BundleError(f"{manifest} cannot be read ({e.strerror or e})") from None
    except ValueError as e:
        raise BundleError(f"{manifest} {e}; export the bundle again") from None
    check_fields(doc, BUNDLE_FIELDS, str(manifest), "export the bundle again", BundleError)
    version = doc.get("schema_version")
    if version != SCHEMA_VERSION:
        raise BundleError(
            f"{manifest}: schema_version {version!r} is not supported (this edgespec reads "
            f"{SCHEMA_VERSION}); export the bundle again with this version"
        )
    models = tuple(parse_entry(manifest, i, raw) for i, raw in enumerate(doc.get("models") or []))
    if not any(m.role == "target" for m in models):
        raise BundleError(f"{manifest}: no model with role 'target'")
    check_entries(folder, models, verify_files=verify)
    return Bundle(
        folder, models, doc.get("tokenizer") or {}, doc.get("policy") or {}, doc.get("tune")
    )


def parse_entry(manifest: Path, index: int, raw: Any) -> ModelEntry:
    where = f"{manifest}: models[{index}]"
    if not isinstance(raw, dict):
        raise BundleError(f"{where} is not an object; export the bundle again")
    fields = ModelEntry.__dataclass_fields__
    missing = [name for name in fields if name not in raw]
    if missing:
        raise BundleError(f"{where} lacks {', '.join(missing)}")
    check_fields(raw, ENTRY_FIELDS, where, "export the bundle again", BundleError)
    entry = ModelEntry(**{name: raw[name] for name in fields})
    if entry.role not in ROLES:
        raise BundleError(f"{where}: role {entry.role!r} is not one of {ROLES}")
    if entry.format not in FORMATS:
        raise BundleError(f"{where}: format {entry.format!r} is not one of {FORMATS}")
    return entry


def check_entries(folder: Path, models: tuple[ModelEntry, ...], *, verify_files: bool) -> None:
    roles = [m.role for m in models]
    if len(set(roles)) != len(roles):
        raise BundleError(f"{folder}: each role may appear once, got {roles}")
    for m in models:
        confined_path(folder, m.path)
    target = next((m for m in models if m.role == "target"), None)
    for other in models:
        if target and other.role != "target" and target.vocab_hash != other.vocab_hash:
            raise BundleError(
                f"{folder}: target and {other.role} vocabularies differ "
                f"({target.vocab_hash[:12]} vs {other.vocab_hash[:12]}); a {other.role} must "
                "share the target's tokenizer"
            )
    if verify_files:
        for m in models:
            verify_file(folder, m)


def confined_path(folder: Path, relative: str) -> Path:
    """The file a manifest path names, refusing absolute paths and escapes from the bundle."""
    pure = PurePosixPath(relative)
    if pure.is_absolute() or "\\" in relative or ".." in pure.parts or not pure.parts:
        raise BundleError(
            f"{folder / MANIFEST}: path {relative!r} must be relative and stay inside the bundle"
        )
    return folder / pure


def verify_file(folder: Path, m: ModelEntry) -> None:
    path = confined_path(folder, m.path)
    if not (path.is_dir() if m.format in FOLDER_FORMATS else path.is_file()):
        raise BundleError(f"bundle file missing: {path} (named in {folder / MANIFEST})")
    files = model_files(path)
    for f in (path, *files):
        check_inside(folder, f)
    size = sum(f.stat().st_size for f in files)
    if size != m.size:
        raise BundleError(
            f"bundle file {path} is {size:,} bytes, the manifest says {m.size:,}: "
            "truncated or replaced; export the bundle again"
        )
    real = path.resolve()
    stamp = real.parent / f".{real.name}.verified"  # inside the bundle: checked above
    key = stamp_key(m.sha256, files)
    if stamp_matches(stamp, key):
        return
    if sha256_path(path) != m.sha256:
        raise BundleError(
            f"bundle file {path} does not match its sha256 in the manifest: it was modified "
            "or corrupted; export the bundle again"
        )
    write_stamp(stamp, key)


def check_inside(folder: Path, path: Path) -> None:
    """Refuse a symlink (of the file or a folder on its way) that leads out of the bundle:
    what lies outside is not the bundle's to vouch for, nor a place to write stamps."""
    root = folder.resolve()
    if not path.resolve().is_relative_to(root):
        raise BundleError(
            f"bundle path {path} is a symlink to {path.resolve()}, outside the bundle {root}; "
            "copy the file into the bundle (or export the bundle again)"
        )
