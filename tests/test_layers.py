"""The package's layers: the core imports nothing from the application layer, and no module
takes part in an import cycle. Read from the source with ast (function-level imports too),
so a lazy import cannot hide an edge."""

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
SERVER = "edgespec.server"  # the HTTP server: application code with a public import name


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


def test_the_graph_sees_lazy_imports_and_every_package():
    graph = import_graph()
    assert "edgespec.runtimes.llamacpp" in graph["edgespec.runtimes"]  # inside open_runtime
    assert "edgespec.app.bench_cli" in graph["edgespec.app.cli"]  # inside optional_commands
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
