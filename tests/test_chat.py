"""A chat request becomes prompt tokens in one place (chat.chat_tokens), by the rule Hugging
Face's apply_chat_template and llama-cpp-python's chat handler follow: the rendered template
and nothing else, so one BOS where the template writes `{{ bos_token }}`, none where not."""

from __future__ import annotations

import pytest

from edgespec.chat import chat_tokens, user_messages

pytest.importorskip("llama_cpp")

BOS_CHATML = "{{ bos_token }}" + (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
MESSAGES = user_messages("the rest of it", system="be brief")


def tiny_runtime(folder, add_bos: bool, template: str):
    from edgespec.runtimes.llamacpp import LlamaCppRuntime
    from tests.tiny_gguf import TinyConfig, random_weights, vocabulary, write_gguf

    cfg = TinyConfig()
    path = folder / f"bos{int(add_bos)}-{len(template)}.gguf"
    weights = random_weights(cfg, len(vocabulary()[0]), 0)
    write_gguf(path, cfg, weights, add_bos=add_bos, chat_template=template)
    return LlamaCppRuntime(path, vocab_only=True)


def reference_tokens(rt, messages) -> list[int]:
    """llama-cpp-python's chat completion: Jinja2ChatFormatter, then tokenize(add_bos=False)."""
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    info = rt.vocab_info()
    formatter = Jinja2ChatFormatter(
        rt.chat_template(),
        eos_token=rt.special_token_text(info.eos_id),
        bos_token=rt.special_token_text(info.bos_id),
    )
    data = formatter(messages=list(messages)).prompt.encode()
    buf = (rt.llama.llama_token * (len(data) + 8))()
    n = rt.llama.llama_tokenize(rt.vocab, data, len(data), buf, len(buf), False, True)
    return list(buf[:n])


@pytest.mark.parametrize(
    "add_bos, template, n_bos",
    [
        (True, BOS_CHATML, 1),  # Llama 3 / Gemma: the template writes BOS, the model adds one
        (False, BOS_CHATML, 1),
        (True, None, 0),  # a ChatML template writes none: none, though the model adds one
        (False, None, 0),  # Qwen 2.5 (the demo pair)
    ],
)
def test_chat_tokens_are_the_rendered_template_alone(tmp_path, add_bos, template, n_bos):
    from tests.tiny_gguf import CHATML

    rt = tiny_runtime(tmp_path, add_bos, template or CHATML)
    bos = rt.vocab_info().bos_id
    tokens = chat_tokens(rt, MESSAGES)
    assert tokens == reference_tokens(rt, MESSAGES)
    assert tokens.count(bos) == n_bos
    assert rt.detokenize(tokens[n_bos:]).decode().startswith("system\nbe brief")
    assert (rt.tokenize("", special=True) == [bos]) == add_bos  # the tokenizer's own BOS


@pytest.mark.real
def test_chat_tokens_match_the_real_template(demo_runtimes):
    target, _ = demo_runtimes
    assert chat_tokens(target, MESSAGES) == reference_tokens(target, MESSAGES)
