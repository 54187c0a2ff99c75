"""The package's layers: the core imports nothing from the application layer and reaches the
back-ends only through the one opener (edgespec.backends); the back-ends import nothing from
the exporter or the application layer; the plumbing imports nothing of edgespec but its
errors; no module takes part in an import cycle; and nothing in the core or a back-end probes
a runtime for a capability the Runtime protocol declares. Read from the source with ast
(function-level imports too), so a lazy import cannot hide an edge."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# where each installed package's source lives (pyproject's package-dir)
PACKAGES = {
    "edgespec": ROOT / "edgespec",
    "edgespec.runtimes": ROOT / "runtimes",
    "edgespec.export": ROOT / "export",
    "edgespec.quant": ROOT / "quant",
}
APP = "edgespec.app"
BACKENDS = "edgespec.runtimes"
EXPORT = "edgespec.export"
OPENER = "edgespec.backends"  # the one core module that may import a back-end
SERVER = "edgespec.server"  # the HTTP server: application code with a public import name
PLUMBING = "edgespec.plumbing"  # the bottom layer: stores, signals, sandbox, huge pages


def module_files() -> dict[str, Path]:
    modules = {}
    for package, folder in PACKAGES.items():
        for path in sorted(folder.rglob("*.py")):
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join((package, *parts))] = path
    return modules


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Modules of this repository that `name` imports, anywhere in its source."""
    found = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: the package, up level - 1 steps
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base]).strip(".")
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}
    return {m for m in found if m in modules and m != name}


def import_graph() -> dict[str, set[str]]:
    modules = module_files()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def is_app(module: str) -> bool:
    # `python -m edgespec` runs edgespec/__main__.py: the command's entry, like the console
    # script, so it belongs to the application layer wherever Python requires it to live
    return module in (APP, SERVER, "edgespec.__main__") or module.startswith(
        (APP + ".", SERVER + ".")
    )


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def in_package(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def is_core(module: str) -> bool:
    return in_package(module, "edgespec") and not (
        is_app(module) or any(in_package(module, p) for p in (BACKENDS, EXPORT, "edgespec.quant"))
    )


def test_the_graph_sees_lazy_imports_and_every_package():
    graph = import_graph()
    assert "edgespec.runtimes.llamacpp" in graph[OPENER]  # inside open_runtime
    assert "edgespec.app.bench_command" in graph["edgespec.app.cli"]  # inside optional_commands
    assert "edgespec.server.app" in graph["edgespec.server"]  # inside __getattr__
    assert {"edgespec.export.cli", "edgespec.quant.policy", "edgespec.loader"} <= set(graph)


def test_the_core_imports_nothing_from_the_application_layer():
    graph = import_graph()
    reaching = {m: sorted(filter(is_app, deps)) for m, deps in graph.items() if not is_app(m)}
    assert {m: deps for m, deps in reaching.items() if deps} == {}


def test_the_server_counts_as_the_application_layer():
    assert is_app("edgespec.server") and is_app("edgespec.server.app")
    assert not is_app("edgespec.serverless") and not is_app("edgespec.engine")


def test_no_import_cycles():
    assert [sorted(c) for c in cycles(import_graph())] == []


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]


def test_the_core_reaches_back_ends_only_through_the_opener():
    graph = import_graph()
    reaching = {
        m: sorted(d for d in deps if in_package(d, BACKENDS))
        for m, deps in graph.items()
        if is_core(m) and m != OPENER
    }
    assert {m: deps for m, deps in reaching.items() if deps} == {}
    assert is_core("edgespec.engine") and is_core("edgespec.runtime")
    assert not is_core("edgespec.runtimes.onnxrt") and not is_core("edgespec.app.cli")


def test_back_ends_import_nothing_from_the_exporter_or_the_application_layer():
    graph = import_graph()
    reaching = {
        m: sorted(d for d in deps if is_app(d) or in_package(d, EXPORT))
        for m, deps in graph.items()
        if in_package(m, BACKENDS)
    }
    assert {m: deps for m, deps in reaching.items() if deps} == {}


def test_the_plumbing_imports_nothing_of_edgespec_but_its_errors():
    """What the core, the back-ends and the command stand on knows none of them."""
    graph = import_graph()
    reaching = {
        m: sorted(d for d in deps if not in_package(d, PLUMBING) and d != "edgespec.errors")
        for m, deps in graph.items()
        if in_package(m, PLUMBING)
    }
    assert {m: deps for m, deps in reaching.items() if deps} == {}
    assert {"edgespec.plumbing.paths", "edgespec.plumbing.schema"} <= set(graph)


def runtime_members() -> set[str]:
    from edgespec.runtime import Runtime

    own = set(vars(Runtime)) | set(getattr(Runtime, "__annotations__", {}))
    return {name for name in own if not name.startswith("_")}


def capability_probes(path: Path, members: set[str]) -> list[str]:
    """getattr/hasattr calls in a file that name a Runtime member: a capability found by
    probing rather than read off the protocol."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        probe = isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
        if probe and node.func.id in ("getattr", "hasattr") and len(node.args) >= 2:
            name = node.args[1]
            if isinstance(name, ast.Constant) and name.value in members:
                where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
                found.append(f"{where}:{node.lineno} {name.value}")
    return found


def test_the_runtime_protocol_is_the_cores_and_no_capability_is_probed():
    from edgespec.runtime import Runtime

    assert Runtime.__module__ == "edgespec.runtime"
    members = runtime_members()
    assert {"top_outputs", "keeps_one_graph", "logit_ids", "capture_graphs"} <= members
    files = [p for folder in (ROOT / "edgespec", ROOT / "runtimes") for p in folder.rglob("*.py")]
    assert [f for path in sorted(files) for f in capability_probes(path, members)] == []


def test_the_probe_finder_finds_a_probe(tmp_path):
    (tmp_path / "x.py").write_text('ok = getattr(rt, "top_outputs", False)\n')
    found = capability_probes(tmp_path / "x.py", {"top_outputs"})
    assert len(found) == 1 and found[0].endswith(":1 top_outputs")
