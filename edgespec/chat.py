"""Chat messages -> prompt tokens with the model's own chat template, in a Jinja2 sandbox.

chat_tokens is the one place a chat request becomes a prompt (run, bench, demo, scripts).
The template comes from the model file, so it is untrusted code: the immutable sandbox
lets it format strings and nothing else.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from edgespec.errors import EdgespecError
from edgespec.runtimes.base import Runtime

Message = dict[str, str]


def chat_tokens(runtime: Runtime, messages: Sequence[Message]) -> list[int]:
    """The prompt tokens for messages: the rendered template and nothing else.

    The template gets the model's BOS and EOS text (Llama 3's and Gemma's start with
    `{{ bos_token }}`), and its text is tokenized with special tokens parsed and no BOS of the
    tokenizer's own, as Hugging Face's apply_chat_template and llama-cpp-python's chat
    handler do: one BOS where the template writes one, none where it does not.
    """
    info = runtime.vocab_info()
    text = render_chat(
        runtime.chat_template(),
        messages,
        bos_token=runtime.special_token_text(info.bos_id),
        eos_token=runtime.special_token_text(info.eos_id),
    )
    tokens = runtime.tokenize(text, special=True)
    added = runtime.tokenize("", special=True)  # what the tokenizer puts before any text
    return tokens[len(added) :] if added and tokens[: len(added)] == added else tokens


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
