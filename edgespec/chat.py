"""Chat messages -> prompt tokens with the model's own chat template, in a bounded sandbox.

chat_tokens is the one place a chat request becomes a prompt (run, bench, demo, server,
scripts). The template comes from the model file, so it is untrusted code: the immutable
sandbox lets it format strings and nothing else, within a budget of time, memory and output
(edgespec/plumbing/sandbox.py). The messages are untrusted text: special-token text written in a
message (`<|im_end|>`) stays text, so it cannot close a turn or open a system message.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from edgespec.errors import EdgespecError
from edgespec.runtime import Runtime

Message = dict[str, Any]
TEMPLATE_FIX = (
    "the chat template in the model file is broken or hostile: use a model with a sound "
    "template, or drop --chat and pass the prompt formatted as the model expects"
)


def chat_tokens(
    runtime: Runtime, messages: Sequence[Message], *, specials_in_messages: bool = False
) -> list[int]:
    """The prompt tokens for messages: the rendered template and nothing else.

    The template gets the model's BOS and EOS text (Llama 3's and Gemma's start with
    `{{ bos_token }}`), and its text is tokenized with special tokens parsed and no BOS of the
    tokenizer's own, as Hugging Face's apply_chat_template and llama-cpp-python's chat
    handler do: one BOS where the template writes one, none where it does not.

    Special-token text inside the messages is tokenized as plain text (the template's own
    markup stays special), unless specials_in_messages (the behaviour of the tools above).
    A conversation without such text tokenizes exactly as they tokenize it.
    """
    info = runtime.vocab_info()
    template = runtime.chat_template()
    bos = runtime.special_token_text(info.bos_id)
    eos = runtime.special_token_text(info.eos_id)
    specials = set() if specials_in_messages else specials_in(runtime, messages)
    if not specials:
        text = render_chat(template, messages, bos_token=bos, eos_token=eos)
        return without_added(runtime, runtime.tokenize(text, special=True))
    # each special text in a message becomes a placeholder no template changes (digits in
    # private-use marks), tokenized as plain text after rendering
    nonce = secrets.randbelow(10**9)
    placeholders = {
        f"\U000f0000{nonce}.{i}\U000f0001": s
        for i, s in enumerate(sorted(specials, key=len, reverse=True))
    }
    escaped = map_strings(messages, lambda s: escape(s, placeholders))
    text = render_chat(template, escaped, bos_token=bos, eos_token=eos)
    tokens: list[int] = []
    pattern = "(" + "|".join(map(re.escape, placeholders)) + ")"
    for i, piece in enumerate(re.split(pattern, text)):
        if i % 2:  # a special text from a message
            tokens += without_added(runtime, runtime.tokenize(placeholders[piece], special=False))
        elif piece:  # the template's text around it
            tokens += without_added(runtime, runtime.tokenize(piece, special=True))
    return tokens


def without_added(runtime: Runtime, tokens: list[int]) -> list[int]:
    """tokens less what the tokenizer puts before any text (a BOS of its own)."""
    added = runtime.tokenize("", special=True)
    return tokens[len(added) :] if added and tokens[: len(added)] == added else tokens


def specials_in(runtime: Runtime, messages: Sequence[Message]) -> set[str]:
    """The control-token texts written in the messages' strings (roles and names included):
    tokens that parsing special text makes, plain tokenizing does not, and that print as
    nothing."""
    found: set[str] = set()

    def collect(s: str) -> str:
        with_specials = runtime.tokenize(s, special=True)
        plain = set(runtime.tokenize(s, special=False))
        for t in set(with_specials) - plain:
            text = runtime.token_text(t).decode("utf-8", "replace")
            if text and text in s and runtime.detokenize([t]) == b"":
                found.add(text)
        return s

    map_strings(messages, collect)
    return found


def escape(s: str, placeholders: dict[str, str]) -> str:
    for placeholder, special in placeholders.items():  # longest first
        s = s.replace(special, placeholder)
    return s


def map_strings(value: Any, f: Callable[[str], str]) -> Any:
    """value with f applied to every string in it, through lists and dicts."""
    if isinstance(value, str):
        return f(value)
    if isinstance(value, dict):
        return {k: map_strings(v, f) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [map_strings(v, f) for v in value]
    return value


def render_chat(
    template: str | None,
    messages: Sequence[Message],
    *,
    bos_token: str = "",
    eos_token: str = "",
    add_generation_prompt: bool = True,
) -> str:
    if not template:
        raise EdgespecError(
            "the model has no chat template (tokenizer.chat_template is missing from its "
            "metadata); drop --chat and pass the prompt text as the model expects it"
        )
    from jinja2 import TemplateError

    from edgespec.plumbing.sandbox import Budget, TemplateLimitError, render_bounded, size_of

    def raise_exception(message: str) -> None:
        raise EdgespecError(f"the chat template refused the messages: {message}")

    messages = list(messages)
    # the budget grows with the conversation: a sound template writes it once and a little
    budget = Budget(
        max_chars=(1 << 20) + 8 * size_of(messages, 1 << 62),
        max_steps=1_000_000 + 1_000 * len(messages),
    )
    context = dict(
        messages=messages,
        bos_token=bos_token,
        eos_token=eos_token,
        add_generation_prompt=add_generation_prompt,
    )
    functions = dict(
        raise_exception=raise_exception,
        strftime_now=lambda fmt: datetime.now().strftime(str(fmt)[:100]),
    )
    try:
        return render_bounded(template, budget, context, functions)
    except EdgespecError:
        raise
    except TemplateLimitError as e:
        raise EdgespecError(
            f"the model's chat template went past its limits: {e}; {TEMPLATE_FIX}"
        ) from None
    except RecursionError:
        raise EdgespecError(
            f"the model's chat template nests too deeply (Python's recursion limit); {TEMPLATE_FIX}"
        ) from None
    except MemoryError:
        raise EdgespecError(
            f"the model's chat template ran out of memory; {TEMPLATE_FIX}"
        ) from None
    except TemplateError as e:
        raise EdgespecError(f"the model's chat template failed to render: {e}") from e
    except Exception as e:  # noqa: BLE001 - template code can raise any Python error
        raise EdgespecError(
            f"the model's chat template failed to render: {type(e).__name__}: {e}"
        ) from e


def user_messages(prompt: str, system: str | None = None) -> list[Message]:
    messages = [{"role": "system", "content": system}] if system else []
    return [*messages, {"role": "user", "content": prompt}]
