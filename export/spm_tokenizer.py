"""A GGUF's SentencePiece vocabulary (tokenizer.ggml.model "llama": Gemma, Llama 2) as a
tokenizer.json for the `tokenizers` library, so an ONNX export of it tokenizes as llama.cpp.

llama.cpp's SentencePiece tokenizer starts from characters and keeps merging the adjacent
pair whose joined text is the highest-scoring token; a character no token holds becomes its
UTF-8 bytes (<0xNN> tokens). A BPE model whose merges are every split of each token into two
tokens, ranked by the joined token's score, with byte fallback, does the same. Spaces are
"▁" in the vocabulary (a leading one added where add_space_prefix says so).
"""

from __future__ import annotations

import json

from edgespec.export.checkpoint import TOKEN_CONTROL, TOKEN_NORMAL, TOKEN_USER_DEFINED

SPACE = "\u2581"


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
    added = [
        {"id": i, "content": text, "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": kind == TOKEN_CONTROL}
        for i, (text, kind) in enumerate(zip(tokens, types))
        if kind in (TOKEN_CONTROL, TOKEN_USER_DEFINED)
    ]  # fmt: skip
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
