"""An exported model folder: model.json read and checked, and what every runtime over such a
folder shares (ONNX Runtime's, TensorRT's): the context its model allows, and the Runtime
protocol's tokenizer and vocabulary methods over tokenizer.json, tokenizer_config.json and
generation_config.json.

`ExportedModelFolder` holds only those methods, so a runtime that runs the model its own way
(runtimes/tensorrt.py) takes them without inheriting another runtime's model code.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from edgespec.errors import ModelFileError
from edgespec.plumbing.jsonfile import load_optional_object
from edgespec.plumbing.schema import Field, check_fields
from edgespec.runtime import Runtime, VocabInfo
from edgespec.runtimes.shared import check_logit_ranges, padding_text, token_text_hash

log = logging.getLogger(__name__)

MODEL_JSON = "model.json"
AGAIN = "export the model again"
# model.json, tokenizer_config.json (chat templates), generation_config.json: kilobytes to a
# few megabytes; a larger file is not an export's
FOLDER_JSON_MAX_BYTES = 64 << 20
# token texts llama.cpp ends generation on, in any vocabulary entry (llama-vocab.cpp matches
# by text; the FIM pad/repo/file-separator tokens included): the same vocabulary must stop
# at the same tokens on either back-end
EOG_TEXTS = ("<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end|>",
             "<end_of_turn>", "<|end_of_text|>", "</s>", "<EOT>", "_<EOT>", "<|return|>",
             "<|call|>", "<end_of_utterance>", "<|fim_pad|>", "<|repo_name|>", "<|fim_repo|>",
             "<|file_sep|>")  # fmt: skip


def read_model_json(model_dir: Path) -> dict:
    if not model_dir.is_dir():
        raise ModelFileError(f"{model_dir} is not a folder; give an exported ONNX model folder")
    path = model_dir / MODEL_JSON
    info = load_optional_object(path, FOLDER_JSON_MAX_BYTES, AGAIN, ModelFileError)
    if info is None:
        raise ModelFileError(
            f"{path} is missing; export the model with `edgespec export --format onnx`"
        )
    check_model_file(path, info.get("model_file", "model.onnx"))  # where it may load from first
    check_fields(info, MODEL_JSON_FIELDS, str(path), AGAIN, ModelFileError)
    check_special_ids(path, info)
    for name in (info.get("model_file", "model.onnx"), "tokenizer.json"):
        if not (model_dir / name).is_file():
            raise ModelFileError(f"{model_dir / name} is missing; {AGAIN}")
    return info


def check_special_ids(path: Path, info: dict) -> None:
    """bos_id and eos_id index the vocabulary: one past it would index past a logits row."""
    for name in ("bos_id", "eos_id"):
        token = info.get(name)
        if token is not None and token >= info["n_vocab"]:
            raise ModelFileError(
                f"{path}: field '{name}' is {token}, outside the vocabulary of "
                f"{info['n_vocab']:,} tokens (n_vocab); {AGAIN}"
            )


# model.json as read: types and bounds before any size in it is used (edgespec/plumbing/schema.py)
MODEL_JSON_FIELDS = {
    "n_vocab": Field("int", min=1, max=1 << 24),
    "n_layer": Field("int", min=1, max=4096),
    "n_kv_head": Field("int", min=1, max=4096),
    "head_dim": Field("int", min=1, max=4096),
    "n_head": Field("int", required=False, min=1, max=4096),
    "n_embd": Field("int", required=False, min=1),
    "context_length": Field("int", required=False, nullable=True, min=1),
    "sliding_window": Field("int", required=False, nullable=True, min=1),
    "bos_id": Field("int", required=False, nullable=True, min=0),
    "eos_id": Field("int", required=False, nullable=True, min=0),
    "model_file": Field("str", required=False),
    "compute": Field("str", required=False, choices=("fp32", "fp16")),
    "quant": Field("str", required=False),
    "arch": Field("str", required=False),
}


def read_logit_ranges(model_json: Path, info: dict) -> np.ndarray | None:
    """model.json's logit_ranges as the token id of each logits column (None: column j is
    token j), refused unless ascending, disjoint [start, stop) pairs within n_vocab."""
    ranges = info.get("logit_ranges")
    if ranges is None:
        return None
    try:
        check_logit_ranges(ranges, int(info["n_vocab"]))
    except ValueError as e:
        raise ModelFileError(f"{model_json}: {e}; export the model again") from None
    return np.concatenate([np.arange(start, stop, dtype=np.int64) for start, stop in ranges])


def check_model_file(model_json: Path, name: object) -> None:
    """model_file must be a plain, visible file name in the folder: a bundle hashes exactly
    those files, so a path elsewhere (or a hidden name) would load weights nobody checked."""
    if (
        not isinstance(name, str)
        or not name
        or name != Path(name).name
        or name in (".", "..")
        or name.startswith(".")
        or "\\" in name
    ):
        raise ModelFileError(
            f"{model_json}: model_file {name!r} must be a file name in the model folder "
            "(no folders, no '..', not hidden); export the model again"
        )


class ExportedModelFolder(Runtime):
    """The context limit and the tokenizer and vocabulary methods of a runtime over an exported
    model folder. The runtime calls read_folder() first and load_vocabulary() once it has
    loaded the model."""

    path: Path
    info: dict  # model.json, checked (read_model_json)
    n_vocab: int

    def read_folder(self, model_dir: str | os.PathLike[str]) -> None:
        self.path = Path(model_dir)
        self.info = read_model_json(self.path)
        self.n_vocab = int(self.info["n_vocab"])

    def context_size(self, n_ctx: int) -> int:
        limit = int(self.info.get("context_length") or n_ctx)
        window = self.info.get("sliding_window")
        if window and window < limit:
            log.info("%s: context capped at the sliding window, %d tokens", self.path, window)
            limit = int(window)  # the graph attends to the whole cache: stay where that is exact
        return max(1, min(n_ctx, limit))

    def load_vocabulary(self) -> None:
        """The tokenizer and what the vocabulary methods cache."""
        self.tokenizer = self.load_tokenizer()
        self.added = self.tokenizer.get_added_tokens_decoder()  # id -> AddedToken
        self.kind = vocab_type(json.loads(self.tokenizer.to_str())["model"])
        self._pieces: dict[int, bytes] = {}
        self._vocab_info: VocabInfo | None = None

    def load_tokenizer(self):
        from tokenizers import Tokenizer

        path = self.path / "tokenizer.json"
        try:
            return Tokenizer.from_file(str(path))
        except Exception as e:  # noqa: BLE001 - tokenizers raises plain Exception
            raise ModelFileError(f"cannot read {path}: {e}; export the model again") from e

    def tokenize(self, text: str, *, special: bool) -> list[int]:
        """special=True parses special-token text (`<|im_start|>`) as those tokens."""
        self.tokenizer.encode_special_tokens = not special
        return list(self.tokenizer.encode(text, add_special_tokens=True).ids)

    def detokenize(self, tokens: Sequence[int]) -> bytes:
        """Control tokens render as nothing, as llama.cpp renders them. Pieces are cached as
        tokens appear: building all of them at once would cost ~0.2 s inside the first step."""
        pieces = self._pieces
        out = []
        for t in tokens:
            piece = pieces.get(t)
            if piece is None:
                piece = pieces[t] = self.piece(t) if 0 <= t < self.n_vocab else b""
            out.append(piece)
        return b"".join(out)

    def piece(self, token: int) -> bytes:
        added = self.added.get(token)
        if added is not None:
            return b"" if added.special else added.content.encode("utf-8")
        text = self.tokenizer.id_to_token(token)
        if text is None:
            return b""
        if self.kind == "spm":
            return spm_piece_bytes(text)
        return byte_level_bytes(text)

    def token_text(self, token: int) -> bytes:
        """The token's text as the vocabulary stores it (what llama.cpp's GGUF holds)."""
        return token_text_of(self.tokenizer, token)

    def special_token_text(self, token: int | None) -> str:
        return "" if token is None else self.token_text(token).decode("utf-8", "replace")

    def vocab_info(self) -> VocabInfo:
        if self._vocab_info is None:
            path = self.path / "generation_config.json"
            gen = load_optional_object(path, FOLDER_JSON_MAX_BYTES, AGAIN, ModelFileError)
            ids = (gen or {}).get("eos_token_id")
            if ids is not None and not all(map(is_id, ids if isinstance(ids, list) else [ids])):
                raise ModelFileError(
                    f"{path}: eos_token_id must be a token id or a list of them, got {ids!r}; "
                    "export the model again"
                )
            self._vocab_info = tokenizer_vocab_info(
                self.tokenizer,
                self.kind,
                self.n_vocab,
                self.info.get("bos_id"),
                self.info.get("eos_id"),
                gen,
            )
        return self._vocab_info

    def chat_template(self) -> str | None:
        path = self.path / "tokenizer_config.json"
        config = load_optional_object(path, FOLDER_JSON_MAX_BYTES, AGAIN, ModelFileError)
        template = (config or {}).get("chat_template")
        if isinstance(template, list):  # [{"name": "default", "template": ...}, ...]
            named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
            template = named.get("default")
        return template if isinstance(template, str) else None


def is_id(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def token_text_of(tokenizer, token: int) -> bytes:
    text = tokenizer.id_to_token(token)
    return text.encode("utf-8") if text is not None else padding_text(token)


def tokenizer_vocab_info(
    tokenizer,
    kind: str,
    n_vocab: int,
    bos: int | None,
    eos: int | None,
    generation_config: dict | None,
) -> VocabInfo:
    """What check_compatible compares, from a `tokenizers` tokenizer of vocab_type `kind`:
    the export checks a draft against its target with it before quantizing anything."""
    return VocabInfo(
        n_vocab=n_vocab,
        vocab_type=kind,
        bos_id=bos,
        eos_id=eos,
        eog_ids=frozenset(eog_ids(tokenizer, n_vocab, eos, generation_config)),
        token_text_hash=token_text_hash(lambda t: token_text_of(tokenizer, t), n_vocab),
    )


def eog_ids(tokenizer, n_vocab: int, eos: int | None, generation_config: dict | None) -> set[int]:
    """EOS, generation_config's eos ids, and the token texts llama.cpp treats as EOG."""
    eog = {eos} if eos is not None else set()
    ids = (generation_config or {}).get("eos_token_id")
    eog |= set(ids if isinstance(ids, list) else [ids] if isinstance(ids, int) else [])
    for text in EOG_TEXTS:
        token = tokenizer.token_to_id(text)
        if token is not None:
            eog.add(token)
    return {t for t in eog if 0 <= t < n_vocab}


def vocab_type(model: dict) -> str:
    """llama.cpp's names: "bpe" for byte-level BPE, "spm" for SentencePiece-style BPE
    (byte fallback), else the tokenizers model type in lower case."""
    if model.get("type") == "BPE":
        return "spm" if model.get("byte_fallback") else "bpe"
    return str(model.get("type", "unknown")).lower()


def byte_level_bytes(text: str) -> bytes:
    """GPT-2 byte-level token text -> the bytes it stands for."""
    table = byte_decoder()
    return bytes(table[c] for c in text if c in table)


_BYTE_DECODER: dict[str, int] = {}


def byte_decoder() -> dict[str, int]:
    """The inverse of GPT-2's reversible byte -> character map: printable Latin-1 bytes stand
    for themselves, the others take the characters 256, 257, ... in byte order."""
    if not _BYTE_DECODER:
        n_moved = 0
        for b in range(256):
            if 0x21 <= b <= 0x7E or 0xA1 <= b <= 0xAC or 0xAE <= b <= 0xFF:
                _BYTE_DECODER[chr(b)] = b
            else:
                _BYTE_DECODER[chr(256 + n_moved)] = b
                n_moved += 1
    return _BYTE_DECODER


def spm_piece_bytes(text: str) -> bytes:
    """SentencePiece-style piece -> bytes: "▁" is a space, "<0xAB>" is one raw byte."""
    if len(text) == 6 and text.startswith("<0x") and text.endswith(">"):
        return bytes([int(text[3:5], 16)])
    return text.replace("▁", " ").encode("utf-8")
