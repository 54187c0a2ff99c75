"""The docs name only what exists: every link inside the repository, every path written in
backticks, and every file of docs/design.md's map of the code (a file the code lost, or a
script that left bench/, must leave the docs too; git keeps the rest: `git show COMMIT:PATH`)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOP = ("edgespec/", "runtimes/", "export/", "quant/", "tests/", "bench/", "scripts/", "deploy/",
       "docs/", ".ci/")  # fmt: skip
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
TICKED = re.compile(r"(?<![\w:])`([^`\s]+)`")


def doc_files() -> list[Path]:
    found = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    found += [p for p in (ROOT / "bench/gpu/README.md", ROOT / "deploy/jetson/README.md")]
    return [p for p in found if p.is_file()]


def named_paths(doc: Path, root: Path = ROOT) -> set[str]:
    """Paths a doc names: relative links, and backticked words that start at a top folder
    (a path after `git show COMMIT:` is history, not a claim about today's tree)."""
    text = doc.read_text()
    names = set()
    for target in LINK.findall(text):
        if "://" not in target and not target.startswith("mailto:"):
            names.add(str((doc.parent / target).resolve().relative_to(root.resolve())))
    for word in TICKED.findall(text):
        word = word.rstrip(".,;:)")
        # a folder named in capitals (RUN/, gpu-MACHINE-DATE/) stands for one the reader makes
        placeholder = any("." not in p and re.search("[A-Z]{2}", p) for p in word.split("/"))
        if word.startswith(TOP) and not placeholder and not any(c in word for c in "*?<>$={}|"):
            names.add(word.split(":")[0])
    return names


def map_paths(design: Path) -> set[str]:
    """The files of design.md's map: the first code block, a folder per indentation level."""
    block = design.read_text().split("```")[1]
    stack: list[tuple[int, str]] = []
    names = set()
    for line in block.splitlines():
        m = re.match(r"^( *)(\S+)", line)
        if not m or not re.fullmatch(r"[\w.\-/]+\.(py|sh|html|md|json)|[\w.\-]+/", m.group(2)):
            continue
        indent, name = len(m.group(1)), m.group(2)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if stack and indent - stack[-1][0] != 2:
            continue  # a description's continuation line, not an entry
        path = "".join(p for _, p in stack) + name
        names.add(path)
        if name.endswith("/"):
            stack.append((indent, name))
    return names


def test_every_path_the_docs_name_exists():
    missing = {
        f"{doc.relative_to(ROOT)}: {name}"
        for doc in doc_files()
        for name in named_paths(doc)
        if not (ROOT / name).exists()
    }
    assert sorted(missing) == []


def test_every_file_of_the_design_map_exists():
    names = map_paths(ROOT / "docs/design.md")
    assert "edgespec/engine.py" in names and "runtimes/llamacpp.py" in names
    assert sorted(n for n in names if not (ROOT / n).exists()) == []


def test_the_path_finders_find_a_missing_path(tmp_path):
    (tmp_path / "docs").mkdir()
    doc = tmp_path / "docs" / "d.md"
    doc.write_text(
        "see `bench/gone.py`, `git show f7269df:bench/old.py`, `docs/results/GPU-DATE/` and "
        "[x](../README.md)\n"
    )
    assert named_paths(doc, tmp_path) == {"bench/gone.py", "README.md"}
    design = tmp_path / "design.md"
    tree = "edgespec/  core\n  engine.py  the loop\n  app/  cli\n    cli.py  x\n"
    design.write_text(f"```\n{tree}```\n")
    assert map_paths(design) == {"edgespec/", "edgespec/engine.py", "edgespec/app/",
                                 "edgespec/app/cli.py"}  # fmt: skip
