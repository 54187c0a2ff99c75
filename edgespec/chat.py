"""Chat messages -> prompt text with the model's own chat template, in a Jinja2 sandbox.

The template comes from the model file, so it is untrusted code: the immutable sandbox
lets it format strings and nothing else.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from edgespec.errors import EdgespecError

Message = dict[str, str]


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
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise EdgespecError(f"the chat template refused the messages: {message}")

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    try:
        return env.from_string(template).render(
            messages=list(messages),
            bos_token=bos_token,
            eos_token=eos_token,
            add_generation_prompt=add_generation_prompt,
        )
    except TemplateError as e:
        raise EdgespecError(f"the model's chat template failed to render: {e}") from e


def user_messages(prompt: str, system: str | None = None) -> list[Message]:
    messages = [{"role": "system", "content": system}] if system else []
    return [*messages, {"role": "user", "content": prompt}]
