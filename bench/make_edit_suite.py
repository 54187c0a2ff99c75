"""Writes data/edit.jsonl from data/src/ and the edits below: python bench/make_edit_suite.py

Every snippet and edit was written for edgespec's benchmark; the edits are the copy-heavy kind
a coding assistant gets: rename, add type hints or docstrings, fix a stated bug, refactor.
"""

import json
from pathlib import Path

HERE = Path(__file__).parent / "data"
LANG = {".py": "python", ".js": "javascript", ".go": "go"}
REPLY = "Reply with the complete updated file in one code block and nothing else."

EDITS = [
    (
        "inventory.py",
        "rename",
        "Rename the method `low_stock` to `items_below` and its parameter `threshold` to `limit`.",
    ),
    ("inventory.py", "type-hints", "Add type hints to every method."),
    (
        "inventory.py",
        "comprehension",
        "Rewrite `total_value` and `low_stock` with a generator "
        "expression and a list comprehension; change nothing else.",
    ),
    ("csv_report.py", "docstrings", "Add a one-line docstring to each function."),
    ("csv_report.py", "rename", "Rename the parameter `value` of `summarize` to `column`."),
    ("csv_report.py", "type-hints", "Add type hints to every function."),
    ("lru.py", "fix-bug", "Fix the bug: the cache can hold one entry more than its capacity."),
    ("lru.py", "type-hints", "Add type hints; keys are str and values are int."),
    ("text_stats.py", "rename", "Rename the function `tokenize` to `split_words` everywhere."),
    ("text_stats.py", "docstrings", "Add a docstring to each function."),
    ("bank.py", "fix-bug", "Fix the bug: withdrawing exactly the whole balance must be allowed."),
    ("bank.py", "rename", "Rename the attribute `history` to `transactions` everywhere."),
    (
        "matrix.py",
        "comprehension",
        "Rewrite `zeros` and `identity` with list comprehensions; change nothing else.",
    ),
    ("matrix.py", "type-hints", "Add type hints, using `list[list[float]]` for matrices."),
    (
        "http_retry.py",
        "logging",
        "Log every failed attempt with the logging module (a "
        "module-level logger, warning level) before sleeping.",
    ),
    ("http_retry.py", "docstrings", "Add a docstring to each function."),
    (
        "todo.js",
        "array-methods",
        "Rewrite the loops in `complete`, `remaining` and `titles` with find, filter and map.",
    ),
    ("todo.js", "rename", "Rename the field `items` to `tasks` everywhere."),
    ("stack.go", "fix-bug", "Fix the bug in Peek: it reads past the end of the slice."),
    ("stack.go", "doc-comments", "Add a doc comment to every exported identifier."),
    ("config_loader.py", "type-hints", "Add type hints to both functions."),
    ("config_loader.py", "rename", "Rename `DEFAULTS` to `DEFAULT_CONFIG` everywhere."),
    ("grades.py", "docstrings", "Add a docstring to each function."),
    (
        "grades.py",
        "refactor",
        "Add a helper `average(scores)` and use it in `class_report`, `passing` and `histogram`.",
    ),
    ("queue_worker.py", "fix-bug", "Fix the race: appending to `results` must hold the lock."),
    ("queue_worker.py", "type-hints", "Add type hints to every method."),
]


def main() -> None:
    lines = []
    for filename, kind, instruction in EDITS:
        path = HERE / "src" / filename
        code = path.read_text()
        content = f"{instruction} {REPLY}\n\n```{LANG[path.suffix]}\n{code}```"
        lines.append(
            json.dumps(
                {
                    "id": f"{path.stem}-{kind}",
                    "messages": [{"role": "user", "content": content}],
                    "max_tokens": 512,
                }
            )
        )
    (HERE / "edit.jsonl").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
