"""A GGUF's vocabulary as a tokenizer.json for the `tokenizers` library, so that an ONNX
export of it tokenizes as llama.cpp: byte-level BPE (tokenizer.ggml.model "gpt2") or
SentencePiece ("llama": Gemma, Llama 2).

llama.cpp's SentencePiece tokenizer starts from characters and keeps merging the adjacent
pair whose joined text is the highest-scoring token; a character no token holds becomes its
UTF-8 bytes (<0xNN> tokens). A BPE model whose merges are every split of each token into two
tokens, ranked by the joined token's score, with byte fallback, does the same. Spaces are
"▁" in the vocabulary (a leading one added where add_space_prefix says so).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Protocol

from edgespec.errors import ModelFileError

SPACE = "\u2581"
TOKEN_NORMAL, TOKEN_CONTROL, TOKEN_USER_DEFINED = 1, 3, 4  # tokenizer.ggml.token_type
# llama.cpp's tokenizer.ggml.pre -> the regex split HF tokenizers of that family use
PRE_TOKENIZER_REGEX = {
    "qwen2": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"
    r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "llama-bpe": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}"
    r"\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
}


class Metadata(Protocol):
    """A GGUF's metadata by key (checkpoint.GgufMetadata)."""

    def get(self, key: str) -> Any: ...


def added_tokens(tokens: list[str], types: list[int]) -> list[dict]:
    """tokenizer.json's added_tokens: the control and user-defined tokens, special if control."""
    return [
        {"id": i, "content": text, "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": kind == TOKEN_CONTROL}
        for i, (text, kind) in enumerate(zip(tokens, types))
        if kind in (TOKEN_CONTROL, TOKEN_USER_DEFINED)
    ]  # fmt: skip


def gguf_tokenizer_json(path: Path, reader, meta: Metadata, tokens: list[str]) -> str:
    """A `tokenizers` tokenizer.json equivalent to the GGUF's vocabulary: byte-level BPE, or
    SentencePiece (spm_tokenizer_json)."""
    model, pre = meta.get("tokenizer.ggml.model"), meta.get("tokenizer.ggml.pre")
    types = list(meta.get("tokenizer.ggml.token_type"))
    if model == "llama":
        scores = [float(x) for x in meta.get("tokenizer.ggml.scores")]
        prefix = meta.get("tokenizer.ggml.add_space_prefix")
        return spm_tokenizer_json(tokens, scores, types, bos_template(meta, tokens),
                                  add_space_prefix=prefix is None or bool(prefix))  # fmt: skip
    if model != "gpt2" or (pre not in PRE_TOKENIZER_REGEX and pre != "gpt-2"):
        raise ModelFileError(
            f"{path}: tokenizer {model}/{pre} cannot be rebuilt for ONNX (SentencePiece, and "
            f"byte-level BPE with pre-tokenizer gpt-2, {', '.join(PRE_TOKENIZER_REGEX)} can); "
            "export from the HF checkpoint folder, whose tokenizer.json travels as it is"
        )
    merges_field = reader.fields.get("tokenizer.ggml.merges")
    merges = [] if merges_field is None else list(merges_field.contents())
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                  "use_regex": pre == "gpt-2"}  # fmt: skip
    pre_tokenizer: dict = byte_level
    if pre in PRE_TOKENIZER_REGEX:
        split = {"type": "Split", "pattern": {"Regex": PRE_TOKENIZER_REGEX[pre]},
                 "behavior": "Isolated", "invert": False}  # fmt: skip
        pre_tokenizer = {"type": "Sequence", "pretokenizers": [split, byte_level]}
    added = added_tokens(tokens, types)
    post_processor = bos_template(meta, tokens) or byte_level
    return json.dumps({
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "NFC"} if pre == "qwen2" else None,
        "pre_tokenizer": pre_tokenizer, "post_processor": post_processor, "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": pre == "llama-bpe",
                  # added tokens too: `tokenizers` numbers an added token by its vocab entry,
                  # else after len(vocab), which is wrong wherever ids have gaps
                  "vocab": {t: i for i, (t, k) in enumerate(zip(tokens, types))
                            if k in (TOKEN_NORMAL, TOKEN_CONTROL, TOKEN_USER_DEFINED)},
                  "merges": merges},
    }, ensure_ascii=False)  # fmt: skip


def spm_tokenizer_json(
    tokens: list[str],
    scores: list[float],
    types: list[int],
    post_processor: dict | None,
    add_space_prefix: bool,
) -> str:
    """tokenizer.json for the vocabulary; post_processor: the BOS template, or None."""
    vocab = {t: i for i, t in enumerate(tokens)}
    unk = next((t for t, k in zip(tokens, types) if k == 2), None)  # llama.cpp's UNKNOWN type
    added = added_tokens(tokens, types)
    replace = {"type": "Replace", "pattern": {"String": " "}, "content": SPACE}
    normalizer: dict = replace
    decoders: list[dict] = [
        {"type": "Replace", "pattern": {"String": SPACE}, "content": " "},
        {"type": "ByteFallback"},
        {"type": "Fuse"},
    ]
    if add_space_prefix:
        normalizer = {"type": "Sequence",
                      "normalizers": [{"type": "Prepend", "prepend": SPACE}, replace]}  # fmt: skip
        decoders.append({"type": "Strip", "content": " ", "start": 1, "stop": 0})
    return json.dumps({
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": normalizer, "pre_tokenizer": None, "post_processor": post_processor,
        "decoder": {"type": "Sequence", "decoders": decoders},
        "model": {"type": "BPE", "dropout": None, "unk_token": unk,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": vocab, "merges": merges_by_score(tokens, scores, types)},
    }, ensure_ascii=False)  # fmt: skip


def merges_by_score(tokens: list[str], scores: list[float], types: list[int]) -> list[list[str]]:
    """Every split of each normal token into two tokens, the highest-scoring joins first
    (ties: the lower id, then the left part's id, as the tokens' own order)."""
    ids = {t: i for i, t in enumerate(tokens)}
    found = []
    for i, (text, kind) in enumerate(zip(tokens, types)):
        if kind != TOKEN_NORMAL or len(text) < 2:
            continue
        for cut in range(1, len(text)):
            left, right = text[:cut], text[cut:]
            if left in ids and right in ids:
                found.append((-scores[i], i, ids[left], left, right))
    found.sort()
    return [[left, right] for *_, left, right in found]


def bos_template(meta: Metadata, tokens: list[str]) -> dict | None:
    """The post-processor that adds BOS where the GGUF says to (add_bos_token); else None."""
    bos = meta.get("tokenizer.ggml.bos_token_id")
    if not meta.get("tokenizer.ggml.add_bos_token") or bos is None:
        return None
    return {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": tokens[bos], "type_id": 0}},
                   {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}},
                 {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {tokens[bos]: {"id": tokens[bos], "ids": [bos],
                                         "tokens": [tokens[bos]]}},
    }  # fmt: skip
