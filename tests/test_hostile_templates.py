"""Hostile chat templates (issue 16, part 4): a template a model file carries is untrusted
code, and each of these once hung edgespec or took gigabytes. Each must end in one clear
error, in bounded memory (the CLI runs under RLIMIT_AS) and without hanging.

The budget (edgespec/plumbing/sandbox.py): values and output up to 1 MiB + 8 x the messages'
characters, 1,000,000 + 1,000 x messages template lines, 64 nested macro calls, ranges of
100,000 items, numbers of 1,024 bits.
"""

from __future__ import annotations

import pytest

from edgespec.chat import chat_tokens, render_chat, user_messages
from edgespec.errors import EdgespecError
from tests.cli_subprocess import run_edgespec

pytest.importorskip("llama_cpp")

FIX = (
    "the chat template in the model file is broken or hostile: use a model with a sound "
    "template, or drop --chat and pass the prompt formatted as the model expects"
)
MESSAGES = user_messages("hello")  # 23 counted (keys, values, items): a budget of 1,048,760
LIMIT = "1,048,760"

HOSTILE = {
    "range": ("{% for i in range(10**9) %}x{% endfor %}",
              "a range of 1,000,000,000 items, more than 100,000"),
    "macro recursion": ("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
                        "macros or recursive loops nested more than 64 deep"),
    "recursive loop": ("{% for x in [[1]] recursive %}{{ loop([x]) }}{% endfor %}",
                       "macros or recursive loops nested more than 64 deep"),
    "string doubling": ("{% set ns = namespace(s='ab') %}{% for i in range(64) %}"
                        "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}",
                        f"a joined string of 2,097,152 characters, more than {LIMIT}"),
    "doubling with +": ("{% set ns = namespace(s='ab') %}{% for i in range(64) %}"
                        "{% set ns.s = ns.s + ns.s %}{% endfor %}",
                        f"a sum of 2,097,152 characters, more than {LIMIT}"),
    "doubling with %": ("{% set ns = namespace(s='ab') %}{% for i in range(64) %}"
                        "{% set ns.s = '%s%s' % (ns.s, ns.s) %}{% endfor %}",
                        f"a formatted string of 2,097,156 characters, more than {LIMIT}"),
    "nested loops": ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}"
                     "{% endfor %}", "more than 1,001,000 steps"),
    "repeat": ("{{ 'a' * 10**10 }}",
               f"a repeated sequence of 10,000,000,000 characters, more than {LIMIT}"),
    "format width": ("{{ '{:>1000000000}'.format('a') }}",
                     f"a formatted string of 1,000,000,015 characters, more than {LIMIT}"),
    "center": ("{{ 'x'|center(1000000000) }}",
               f"an argument of 1,000,000,000, more than {LIMIT}"),
    "replace": ("{% set s = 'a' * 100000 %}{{ s.replace('', s) }}",
                f"a replaced string of 10,000,200,000 characters, more than {LIMIT}"),
    "join of references": ("{% set s = 'a' * 100000 %}{{ ([s] * 100)|join }}",
                           f"a repeated sequence of 10,000,100 characters, more than {LIMIT}"),
    "macro output": ("{% set s = 'a' * 1000000 %}{% macro m() %}{% for i in range(100000) %}"
                     "{{ s }}{% endfor %}{% endmacro %}{{ m() }}",
                     f"a block of text of 100,000,000,000 characters, more than {LIMIT}"),
    "power": ("{{ 2 ** 100000 }}", "a number of more than 1024 bits"),
    "indent": ("{{ ('\\n' * 100000)|indent(100000) }}",
               f"an indented string of 10,000,200,000 characters, more than {LIMIT}"),
    "slice": ("{{ range(10)|slice(1000000)|list }}",
              "a slice into 1,000,000 parts, more than 100,000"),
    "tojson indent": ("{{ messages|tojson(indent=1000000) }}",
                      "a tojson indent of 1000000, more than 16"),
    "output": ("{% for i in range(100000) %}{{ 'abcdefghijklmnopqrstuvwxyz' }}{% endfor %}",
               f"an output of 1,048,762 characters, more than {LIMIT}"),
}  # fmt: skip


@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_template_ends_in_one_clear_error(name):
    template, what = HOSTILE[name]
    with pytest.raises(EdgespecError) as e:
        render_chat(template, MESSAGES)
    assert str(e.value) == f"the model's chat template went past its limits: {what}; {FIX}"


@pytest.mark.parametrize(
    "template, message",
    [
        ("{{ 'a' + 1 }}", 'TypeError: can only concatenate str (not "int") to str'),
        ("{{ 1 / 0 }}", "ZeroDivisionError: division by zero"),
        ("{{ 10.0 ** 1000 }}", "OverflowError: (34, 'Numerical result out of range')"),
        ("{% for %}", "Expected an expression, got 'end of statement block'"),
        ("{% include 'other' %}", "TypeError: no loader for this environment specified"),
        ("{{ lipsum(10**5) }}", "'lipsum' is undefined"),
    ],
)
def test_a_template_that_fails_is_reported_without_a_traceback(template, message):
    with pytest.raises(EdgespecError) as e:
        render_chat(template, MESSAGES)
    assert str(e.value) == f"the model's chat template failed to render: {message}"


def test_a_template_that_recurses_past_python_is_reported():
    with pytest.raises(EdgespecError) as e:
        render_chat("{% block a %}{{ self.a() }}{% endblock %}", MESSAGES)
    assert str(e.value) == (
        f"the model's chat template nests too deeply (Python's recursion limit); {FIX}"
    )


def test_the_budget_grows_with_the_conversation():
    """A long conversation through an ordinary template is not mistaken for a hostile one."""
    from tests.tiny_gguf import CHATML

    x, y = "x" * 3_000_000, "y" * 500_000
    assert render_chat(CHATML, user_messages(x, system=y)) == (
        f"<|im_start|>system\n{y}<|im_end|>\n<|im_start|>user\n{x}<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_ordinary_template_features_still_work():
    template = (
        "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
        "{{ '%s:%d' % (m.role, loop.index) }} {{ m.content|trim|upper }}|{% endfor %}"
        "{{ messages|length * 2 }} {{ ns.n }} {{ '{}-{}'.format(1, 'b') }} "
        "{{ ['a', 'b']|join(',') }} {{ messages[0]|tojson }} {{ 'x y'.split()|list }}"
    )
    assert render_chat(template, user_messages(" hi ", system="sys")) == (
        'system:1 SYS|user:2 HI|4 2 1-b a,b {"content": "sys", "role": "system"} [\'x\', \'y\']'
    )


@pytest.mark.parametrize("name", ["string doubling", "nested loops", "range"])
def test_the_cli_refuses_a_model_with_a_hostile_template(tmp_path, name):
    """End to end: the template inside a GGUF, `run --chat`, exit 2, one line, no traceback,
    within the memory limit, nothing written outside the home."""
    from tests.tiny_gguf import TinyConfig, random_weights, vocabulary, write_gguf

    template, what = HOSTILE[name]
    models = tmp_path / "models"
    models.mkdir()
    cfg = TinyConfig()
    model = write_gguf(
        models / "hostile.gguf", cfg, random_weights(cfg, len(vocabulary()[0]), 0),
        chat_template=template,
    )  # fmt: skip
    done = run_edgespec(
        tmp_path, "run", "--target", str(model), "--chat", "--prompt", "hello",
        "--drafter", "none", "--max-tokens", "2", "--n-ctx", "64", models=models,
    )  # fmt: skip
    assert done.error_line() == f"the model's chat template went past its limits: {what}; {FIX}"


def test_the_cli_refuses_a_template_that_is_not_utf8(tmp_path):
    """GGUF strings are bytes: a template in Latin-1 raised UnicodeDecodeError."""
    from tests.tiny_gguf import TinyConfig, random_weights, vocabulary, write_gguf

    models = tmp_path / "models"
    models.mkdir()
    cfg = TinyConfig()
    model = write_gguf(
        models / "latin1.gguf", cfg, random_weights(cfg, len(vocabulary()[0]), 0),
        chat_template="",  # none: the key is written as raw bytes below
        more_metadata=lambda w: w.add_string("tokenizer.chat_template", b"{{ 'caf\xe9' }}"),
    )  # fmt: skip
    done = run_edgespec(
        tmp_path, "run", "--target", str(model), "--chat", "--prompt", "hello",
        "--drafter", "none", "--max-tokens", "2", "--n-ctx", "64", models=models,
    )  # fmt: skip
    assert done.error_line() == (
        f"{model}: its chat template (tokenizer.chat_template) is not UTF-8 text (byte 7 is "
        "b'\\xe9'); use a model with a sound template, or drop --chat and pass the prompt "
        "formatted as the model expects"
    )


def test_a_sound_template_renders_the_same_tokens(tiny_runtimes):
    target, _ = tiny_runtimes
    tokens = chat_tokens(target, MESSAGES)
    assert target.detokenize(tokens) == b"user\nhello\nassistant\n"
