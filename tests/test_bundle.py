"""bundle.json: written atomically, trusted only after its paths and checksums check out."""

import json

import pytest

from edgespec.bundle import Bundle, ModelEntry, read_bundle, sha256_file, write_bundle
from edgespec.errors import BundleError


def entry(folder, role, name, data=b"GGUF-model-bytes", vocab_hash="v1"):
    (folder / name).write_bytes(data)
    return ModelEntry(
        role,
        "gguf",
        name,
        "q8_0",
        sha256_file(folder / name),
        len(data),
        32,
        vocab_hash,
        512,
        "llama",
    )


@pytest.fixture
def bundle_dir(tmp_path):
    models = (entry(tmp_path, "target", "t.gguf"), entry(tmp_path, "draft", "d.gguf", b"draft"))
    write_bundle(Bundle(tmp_path, models, {"type": "bpe"}, {"target_quant": "q8_0"}))
    return tmp_path


def edit_manifest(folder, change):
    doc = json.loads((folder / "bundle.json").read_text())
    change(doc)
    (folder / "bundle.json").write_text(json.dumps(doc))


def test_round_trip(bundle_dir):
    b = read_bundle(bundle_dir)
    assert b.path("target") == bundle_dir / "t.gguf"
    assert b.model("draft").quant == "q8_0"
    assert b.policy == {"target_quant": "q8_0"}


def test_tampered_file_is_refused(bundle_dir):
    (bundle_dir / "d.gguf").write_bytes(b"DRAFT")  # same size, other bytes
    with pytest.raises(BundleError) as e:
        read_bundle(bundle_dir)
    assert str(e.value) == (
        f"bundle file {bundle_dir / 'd.gguf'} does not match its sha256 in the manifest: it was "
        "modified or corrupted; export the bundle again"
    )


def test_truncated_file_is_refused(bundle_dir):
    (bundle_dir / "t.gguf").write_bytes(b"GGUF")
    with pytest.raises(BundleError, match=r"is 4 bytes, the manifest says 16: truncated"):
        read_bundle(bundle_dir)


@pytest.mark.parametrize("bad", ["../outside.gguf", "/etc/passwd", "a/../../x.gguf", ""])
def test_paths_escaping_the_bundle_are_refused(bundle_dir, bad):
    edit_manifest(bundle_dir, lambda doc: doc["models"][1].update(path=bad))
    with pytest.raises(BundleError) as e:
        read_bundle(bundle_dir)
    assert str(e.value) == (
        f"{bundle_dir / 'bundle.json'}: path {bad!r} must be relative and stay inside the bundle"
    )


def test_different_vocabularies_are_refused(tmp_path):
    models = (entry(tmp_path, "target", "t.gguf"), entry(tmp_path, "draft", "d.gguf", b"x", "v2"))
    with pytest.raises(BundleError, match="target and draft vocabularies differ"):
        write_bundle(Bundle(tmp_path, models))


def test_broken_manifests(bundle_dir):
    manifest = bundle_dir / "bundle.json"
    manifest.write_text("{not json")
    with pytest.raises(BundleError, match=r"bundle.json is not valid JSON"):
        read_bundle(bundle_dir)
    manifest.write_text(json.dumps({"schema_version": 99, "models": []}))
    with pytest.raises(BundleError, match=r"schema_version 99 is not supported"):
        read_bundle(bundle_dir)
    manifest.write_text(json.dumps({"schema_version": 1, "models": [{"role": "target"}]}))
    with pytest.raises(BundleError, match=r"models\[0\] lacks format, path, quant, sha256"):
        read_bundle(bundle_dir)
    manifest.unlink()
    with pytest.raises(BundleError, match="bundle.json is missing; run `edgespec export`"):
        read_bundle(bundle_dir)
