"""One import name: the top-level folders install under edgespec, nothing else lands."""

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_installs_only_the_edgespec_package(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
        check=True,
        capture_output=True,
    )
    wheel = next(tmp_path.glob("edgespec-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names}
    assert {t for t in top if not t.endswith(".dist-info")} == {"edgespec"}
    for sub in (
        "runtimes/llamacpp.py",
        "runtimes/shared.py",
        "runtime.py",
        "plumbing/paths.py",
        "export/__init__.py",
        "quant/__init__.py",
        "bench_data/edit.jsonl",
        "bench_data/chat.jsonl",
        "server/app.py",
        "server/page.html",
    ):
        assert f"edgespec/{sub}" in names, sub
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "edgespec = edgespec.app.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("/METADATA")))
    # the SPDX string form (PEP 639); the table form is deprecated and warns at every install
    assert "License-Expression: Apache-2.0" in metadata.decode().splitlines()


def test_subpackages_import_under_one_name():
    import edgespec.export
    import edgespec.quant
    import edgespec.runtimes.llamacpp

    assert Path(edgespec.runtimes.llamacpp.__file__).parent.name == "runtimes"
    assert edgespec.export.__name__ == "edgespec.export"
    assert edgespec.quant.__name__ == "edgespec.quant"


def test_importing_edgespec_loads_no_back_end():
    """What edgespec/__init__.py promises: the numpy core only, back-ends on first use."""
    code = (
        "import sys, edgespec; "
        "print(sorted({'llama_cpp', 'onnxruntime', 'onnx', 'gguf', 'edgespec.loader', "
        "'edgespec.runtimes'} "
        "& set(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
