"""A GGUF model's vocabulary through llama.cpp: tokenize and detokenize, each token's text,
the vocabulary's identity (VocabInfo), the chat template and the metadata (LlamaCppRuntime's
part of the Runtime protocol that needs no context)."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from edgespec.errors import ModelFileError
from edgespec.runtime import VocabInfo
from edgespec.runtimes.llama_heads import model_metadata
from edgespec.runtimes.shared import token_text_hash

VOCAB_TYPES = {0: "none", 1: "spm", 2: "bpe", 3: "wpm", 4: "ugm", 5: "rwkv", 6: "plamo2"}


class LlamaVocabulary:
    """Mixed into LlamaCppRuntime, whose __init__ sets these."""

    llama: Any  # the llama_cpp module
    model: Any
    vocab: Any
    path: Path
    n_vocab: int
    _vocab_info: VocabInfo | None
    _pieces: dict[int, bytes]

    def tokenize(self, text: str, *, special: bool) -> list[int]:
        data = text.encode("utf-8")
        n_max = len(data) + 8
        buf = (self.llama.llama_token * n_max)()
        n = self.llama.llama_tokenize(self.vocab, data, len(data), buf, n_max, True, special)
        if n < 0:
            n_max = -n
            buf = (self.llama.llama_token * n_max)()
            n = self.llama.llama_tokenize(self.vocab, data, len(data), buf, n_max, True, special)
        return list(buf[:n])

    def detokenize(self, tokens: Sequence[int]) -> bytes:
        return b"".join(self.piece(int(t)) for t in tokens)

    def piece(self, token: int) -> bytes:
        """The bytes a token stands for in generated text (control tokens render as nothing)."""
        cached = self._pieces.get(token)
        if cached is None:
            buf = ctypes.create_string_buffer(64)
            n = self.llama.llama_token_to_piece(self.vocab, token, buf, 64, 0, False)
            if n < 0:
                buf = ctypes.create_string_buffer(-n)
                n = self.llama.llama_token_to_piece(self.vocab, token, buf, -n, 0, False)
            cached = self._pieces[token] = buf.raw[:n]
        return cached

    def token_text(self, token: int) -> bytes:
        return self.llama.llama_vocab_get_text(self.vocab, token) or b""

    def vocab_info(self) -> VocabInfo:
        if self._vocab_info is None:
            lib, v = self.llama, self.vocab
            eog = {t for t in range(self.n_vocab) if lib.llama_vocab_is_eog(v, t)}
            self._vocab_info = VocabInfo(
                n_vocab=self.n_vocab,
                vocab_type=VOCAB_TYPES.get(int(lib.llama_vocab_type(v)), "unknown"),
                bos_id=self.declared_bos(),
                eos_id=none_if_negative(lib.llama_vocab_eos(v)),
                eog_ids=frozenset(eog),
                token_text_hash=token_text_hash(self.token_text, self.n_vocab),
            )
        return self._vocab_info

    def declared_bos(self) -> int | None:
        """The GGUF's own BOS id. Where it names none, llama.cpp falls back to a fixed id (11
        for GPT-2-style BPE) that no tokenizer file knows, so it is not reported: a checkpoint
        exported to ONNX would otherwise seem to have a different vocabulary."""
        if self.metadata("tokenizer.ggml.bos_token_id") is None:
            return None
        return none_if_negative(self.llama.llama_vocab_bos(self.vocab))

    def chat_template(self) -> str | None:
        raw = self.llama.llama_model_chat_template(self.model, None)
        try:
            return raw.decode("utf-8") if raw else None
        except UnicodeDecodeError as e:
            raise ModelFileError(
                f"{self.path}: its chat template (tokenizer.chat_template) is not UTF-8 text "
                f"(byte {e.start:,} is {raw[e.start : e.start + 1]!r}); use a model with a sound "
                "template, or drop --chat and pass the prompt formatted as the model expects"
            ) from None

    def special_token_text(self, token: int | None) -> str:
        return "" if token is None else self.token_text(token).decode("utf-8", "replace")

    def metadata(self, key: str) -> str | None:
        return model_metadata(self.llama, self.model, key)


def none_if_negative(token: int) -> int | None:
    return int(token) if token >= 0 else None
