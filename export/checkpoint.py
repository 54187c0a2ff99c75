"""A model's float weights, HF config and tokenizer, read from an HF folder or a GGUF file.

Every exporter reads its source here. An HF folder supplies config.json, tokenizer.json and
*.safetensors directly. A GGUF file (the only form the demo pair ships in) is read with the
gguf package: tensors are dequantized with gguf.quants, renamed through gguf's TensorNameMap
in reverse, and the byte-level BPE vocabulary becomes a tokenizer.json for the `tokenizers`
library with the pre-tokenizer llama.cpp names in `tokenizer.ggml.pre`. A quantized GGUF gives
the dequantized weights: requantizing them is a second rounding, which the docs state.

Weights are read a block of rows at a time (`LazyTensors.rows`) with plain file reads, never
a memory map, so an export holds a few blocks of one tensor at once whatever the model's size.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from edgespec.errors import ModelFileError
from edgespec.export.families import FAMILIES, GGUF_ARCHS, HF_ARCHS
from edgespec.export.gguf_tokenizer import gguf_tokenizer_json
from edgespec.export.rope import GGUF_FREQ_FACTORS, rope_notes
from edgespec.plumbing.jsonfile import json_kind, load_object, load_optional_object, parse_json
from edgespec.plumbing.schema import shown

AGAIN = "download or copy the checkpoint again"
CONFIG_MAX_BYTES = 64 << 20  # config.json, tokenizer_config.json (chat templates): kilobytes
TOKENIZER_MAX_BYTES = 512 << 20  # tokenizer.json: tens of megabytes for a large vocabulary
SAFETENSORS_MAX_HEADER = 100_000_000  # the format's own bound (the safetensors library's)
CORRUPT = "the file is corrupt (download or copy it again)"
REQUIRED_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json")
REQUIRED_CONFIG_KEYS = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "vocab_size",
)
SAFETENSORS_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16}
SAFETENSORS_INT_DTYPES = {"I64": np.int64, "I32": np.int32}  # index tensors (EAGLE-3's d2t)
SIZED_DTYPES = {**SAFETENSORS_DTYPES, **SAFETENSORS_INT_DTYPES}  # checked against the file
HF_LAYER_TENSORS = (
    "input_layernorm.weight", "post_attention_layernorm.weight",
    "pre_feedforward_layernorm.weight", "post_feedforward_layernorm.weight",
    "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
    "self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias",
    "self_attn.o_proj.weight", "self_attn.q_norm.weight", "self_attn.k_norm.weight",
    "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
)  # fmt: skip
FUSED_PARTS = {  # Family.fused: a fused layer tensor -> its parts, in the order it holds them
    "self_attn.qkv_proj.weight": HF_LAYER_TENSORS[4:7],
    "mlp.gate_up_proj.weight": HF_LAYER_TENSORS[13:15],
}
HF_MODEL_TENSORS = ("model.embed_tokens.weight", "model.norm.weight", "lm_head.weight")


@dataclass(frozen=True)
class Rows:
    """A float32 tensor read a block of rows (first-axis slices) at a time."""

    shape: tuple[int, ...]
    read: Callable[[int, int], np.ndarray]  # (start, stop) -> float32 [stop - start, ...]

    @staticmethod
    def of(array: np.ndarray) -> Rows:
        return Rows(tuple(array.shape), lambda start, stop: array[start:stop])

    @staticmethod
    def stack(parts: list[Rows]) -> Rows:
        """The parts one after another along the first axis (q, k, v -> one qkv matrix)."""
        bounds = np.cumsum([0] + [p.shape[0] for p in parts])

        def read(start: int, stop: int) -> np.ndarray:
            pieces = [
                p.read(max(start, lo) - lo, min(stop, hi) - lo)
                for p, lo, hi in zip(parts, bounds[:-1], bounds[1:])
                if start < hi and stop > lo
            ]
            return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)

        return Rows((int(bounds[-1]), *parts[0].shape[1:]), read)

    def take(self, ranges: Sequence[Sequence[int]]) -> Rows:
        """The rows of these [start, stop) ranges, one after another (a draft's output layer
        cut to some token ids)."""

        def part(start: int, stop: int) -> Rows:
            return Rows((stop - start, *self.shape[1:]),
                        lambda lo, hi: self.read(start + lo, start + hi))  # fmt: skip

        return Rows.stack([part(start, stop) for start, stop in ranges])

    @property
    def nbytes(self) -> int:  # as float32
        return 4 * math.prod(self.shape)

    def blocks(self, max_bytes: int) -> Iterator[tuple[int, int]]:
        """(start, stop) row ranges of at most max_bytes of float32 each (at least one row)."""
        row_bytes = 4 * math.prod(self.shape[1:])
        step = max(1, max_bytes // max(row_bytes, 1))
        for start in range(0, self.shape[0], step):
            yield start, min(start + step, self.shape[0])


@dataclass
class Checkpoint:
    """What an exporter reads: an HF config, float32 weights by HF name, tokenizer files."""

    source: Path
    config: dict
    weights: LazyTensors
    tokenizer_json: str
    tokenizer_config: dict
    generation_config: dict | None = None
    notes: list[str] = field(default_factory=list)  # what the reader had to approximate


class LazyTensors(Mapping[str, np.ndarray]):
    """Float32 tensors by name, each read only when asked for: `entries` says where each one
    is, `shape` and `read_rows` read its header and a block of its rows."""

    entries: dict

    def shape(self, name: str) -> tuple[int, ...]:
        raise NotImplementedError

    def read_rows(self, name: str, start: int, stop: int) -> np.ndarray:
        raise NotImplementedError

    def integers(self, name: str) -> np.ndarray:
        """A whole integer tensor as int64 (EAGLE-3's d2t), where the format holds one."""
        raise NotImplementedError

    def rows(self, name: str) -> Rows:
        return Rows(self.shape(name), lambda start, stop: self.read_rows(name, start, stop))

    def __getitem__(self, name: str) -> np.ndarray:  # the whole tensor: small ones only
        return self.read_rows(name, 0, self.shape(name)[0])

    def __contains__(self, name: object) -> bool:  # without reading the tensor
        return name in self.entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)


def read_checkpoint(source: Path) -> Checkpoint:
    """An HF checkpoint folder or a .gguf file; anything else is refused by name."""
    source = Path(source)
    if not source.exists():
        raise ModelFileError(f"{source} not found; give an HF checkpoint folder or a .gguf file")
    ckpt = read_hf_checkpoint(source) if source.is_dir() else read_gguf_checkpoint(source)
    ckpt.notes += rope_notes(ckpt.config)
    return ckpt


def unfused(weights: LazyTensors, config: dict) -> LazyTensors:
    """The weights under the names the graph reads: a fused family's split (Unfused)."""
    if not FAMILIES[config["architectures"][0]].fused:
        return weights
    return Unfused(weights, config)


# --- fused weights (Family.fused) -----------------------------------------------------------
# Phi-3 stores q, k and v as one `qkv_proj` and the MLP's gate and up as one `gate_up_proj`
# (gate first: HF chunks it in two), and llama.cpp's converter keeps both fused (`attn_qkv`,
# `ffn_up`). Each part is a range of the fused tensor's rows, read only when asked for, so the
# graph builders, the numpy references and the GGUF writer's permutations see Llama's names.


def part_rows(config: dict, fused: str) -> list[int]:
    """Rows of each part, in the order the fused tensor holds them."""
    n_head = config["num_attention_heads"]
    n_kv = config.get("num_key_value_heads") or n_head
    head_dim = config.get("head_dim") or config["hidden_size"] // n_head
    if fused.endswith("qkv_proj.weight"):
        return [n_head * head_dim, n_kv * head_dim, n_kv * head_dim]
    return [config["intermediate_size"]] * 2


class Unfused(LazyTensors):
    """inner's tensors, each fused one replaced by its parts (row ranges of it)."""

    def __init__(self, inner: LazyTensors, config: dict) -> None:
        self.inner = inner
        self.parts: dict[str, tuple[str, int, int]] = {}  # part -> (fused, first row, rows)
        for name in inner.entries:
            fused = next((f for f in FUSED_PARTS if name.endswith(f)), None)
            if fused is not None:
                self.split(name, fused, config)
        self.entries = {
            n: e for n, e in inner.entries.items() if not n.endswith(tuple(FUSED_PARTS))
        }
        self.entries |= {part: inner.entries[f] for part, (f, _, _) in self.parts.items()}

    def split(self, name: str, fused: str, config: dict) -> None:
        sizes = part_rows(config, fused)
        rows = self.inner.shape(name)[0]
        if rows != sum(sizes):
            raise ModelFileError(
                f"{name} has {rows} rows where the config's heads and sizes need "
                f"{' + '.join(map(str, sizes))}; check config.json"
            )
        prefix, start = name.removesuffix(fused), 0
        for part, size in zip(FUSED_PARTS[fused], sizes):
            self.parts[prefix + part] = (name, start, size)
            start += size

    def shape(self, name: str) -> tuple[int, ...]:
        if name not in self.parts:
            return self.inner.shape(name)
        fused, _, rows = self.parts[name]
        return (rows, *self.inner.shape(fused)[1:])

    def read_rows(self, name: str, start: int, stop: int):
        if name not in self.parts:
            return self.inner.read_rows(name, start, stop)
        fused, first, _ = self.parts[name]
        return self.inner.read_rows(fused, first + start, first + stop)


# --- HF folder ------------------------------------------------------------------------------


def read_hf_checkpoint(hf_dir: Path) -> Checkpoint:
    config = read_hf_config(hf_dir)
    generation = hf_dir / "generation_config.json"
    tokenizer = hf_dir / "tokenizer.json"
    read_json(tokenizer, TOKENIZER_MAX_BYTES)  # refused here, by name, if not a JSON object
    return Checkpoint(
        source=hf_dir,
        config=config,
        weights=unfused(SafetensorsIndex(hf_dir), config),
        tokenizer_json=tokenizer.read_text(encoding="utf-8"),
        tokenizer_config=read_json(hf_dir / "tokenizer_config.json"),
        generation_config=load_optional_object(generation, CONFIG_MAX_BYTES, AGAIN, ModelFileError),
    )


def read_json(path: Path, max_bytes: int = CONFIG_MAX_BYTES) -> dict:
    """A checkpoint's JSON file as an object; anything else is refused by name (a FIFO, a
    folder, a file over max_bytes, not JSON, not an object)."""
    return load_object(path, max_bytes, AGAIN, ModelFileError)


def read_hf_config(hf_dir: Path) -> dict:
    if not hf_dir.is_dir():
        raise ModelFileError(f"{hf_dir} is not a folder; give a Hugging Face checkpoint folder")
    missing = [f for f in REQUIRED_FILES if not (hf_dir / f).exists()]  # a FIFO: read_json's
    if not any(hf_dir.glob("*.safetensors")):
        missing.append("*.safetensors")
    if missing:
        raise ModelFileError(f"{hf_dir} is missing {', '.join(missing)}")
    config = read_json(hf_dir / "config.json")
    archs = config.get("architectures") or ["(none)"]
    if not isinstance(archs, list) or archs[0] not in HF_ARCHS:
        raise ModelFileError(
            f"{hf_dir}: architecture {archs[0] if isinstance(archs, list) else archs} is not "
            f"supported; supported: {', '.join(HF_ARCHS)}"
        )
    bad = [k for k in REQUIRED_CONFIG_KEYS if not positive_int(config.get(k))]
    if bad:
        raise ModelFileError(
            f"{hf_dir / 'config.json'} lacks {', '.join(bad)} (each a whole number > 0); "
            "download or copy the checkpoint again"
        )
    return config


def positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


class SafetensorsIndex(LazyTensors):
    """The tensors of a folder's *.safetensors files (bf16 widened exactly)."""

    def __init__(self, hf_dir: Path) -> None:
        self.entries: dict[str, tuple[Path, int, dict]] = {}
        for path in sorted(hf_dir.glob("*.safetensors")):
            header_len, header = read_safetensors_header(path)
            for name, info in header.items():
                if name != "__metadata__":
                    self.entries[name] = (path, 8 + header_len, info)

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self.entries[name][2]["shape"])

    def read_rows(self, name: str, start: int, stop: int) -> np.ndarray:
        path, offset, info = self.entries[name]
        if info["dtype"] not in SAFETENSORS_DTYPES:
            raise ModelFileError(f"{path}: tensor {name} has dtype {info['dtype']}; not supported")
        shape = (stop - start, *info["shape"][1:])
        if info["data_offsets"][1] == info["data_offsets"][0]:
            return np.zeros(shape, np.float32)
        dtype = np.dtype(SAFETENSORS_DTYPES[info["dtype"]])
        row = math.prod(shape[1:])
        first = offset + info["data_offsets"][0] + start * row * dtype.itemsize
        raw = np.fromfile(path, dtype=dtype, count=math.prod(shape), offset=first)
        if info["dtype"] == "BF16":
            raw = (raw.astype(np.uint32) << 16).view(np.float32)
        return raw.reshape(shape).astype(np.float32)

    def integers(self, name: str) -> np.ndarray:
        """A whole integer tensor, as int64 (a float32 read would round ids past 2**24)."""
        path, offset, info = self.entries[name]
        if info["dtype"] not in SAFETENSORS_INT_DTYPES:
            raise ModelFileError(
                f"{path}: tensor {name} has dtype {info['dtype']}, not an integer one (I64, I32)"
            )
        dtype = np.dtype(SAFETENSORS_INT_DTYPES[info["dtype"]])
        n = math.prod(info["shape"])
        raw = np.fromfile(path, dtype=dtype, count=n, offset=offset + info["data_offsets"][0])
        return raw.reshape(info["shape"]).astype(np.int64)


def read_safetensors_header(path: Path) -> tuple[int, dict]:
    """A safetensors file's header, checked against the file: a header or a tensor that ends
    past the end of the file (a truncated download) is refused before anything is read, and
    so is an entry whose dtype, shape or data_offsets is not what the format says."""
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(8)
        (header_len,) = struct.unpack("<Q", head) if len(head) == 8 else (size,)
        if header_len > size - 8:
            raise ModelFileError(truncated(path, size, 8 + header_len))
        if header_len > SAFETENSORS_MAX_HEADER:
            raise ModelFileError(
                f"{path}: the safetensors header is {header_len:,} bytes, more than the "
                f"format allows ({SAFETENSORS_MAX_HEADER:,}); {CORRUPT}"
            )
        try:
            header = parse_json(f.read(header_len))
        except ValueError as e:
            raise ModelFileError(f"{path}: the safetensors header {e}; {CORRUPT}") from None
    if not isinstance(header, dict):
        raise ModelFileError(
            f"{path}: the safetensors header is not a JSON object (a {json_kind(header)}); "
            f"{CORRUPT}"
        )
    end_of_data = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end, shape, dtype = tensor_entry(path, name, info)
        n = math.prod(shape)
        itemsize = np.dtype(SIZED_DTYPES.get(dtype, np.uint8)).itemsize
        end_of_data = max(end_of_data, end)
        if not start <= end or (dtype in SIZED_DTYPES and end - start != n * itemsize):
            raise ModelFileError(
                f"{path}: tensor {name} spans bytes {start}..{end}, which does not fit its shape "
                f"{shape} and dtype {dtype}; {CORRUPT}"
            )
    if 8 + header_len + end_of_data > size:
        raise ModelFileError(truncated(path, size, 8 + header_len + end_of_data))
    return header_len, header


def tensor_entry(path: Path, name: str, info: object) -> tuple[int, int, list[int], str]:
    """A header entry's data_offsets, shape and dtype, each of the type the format gives it
    (offsets as strings once reached the reads as text)."""
    if not isinstance(info, dict):
        raise ModelFileError(f"{path}: tensor {name} is not an object; {CORRUPT}")
    offsets, shape, dtype = info.get("data_offsets"), info.get("shape"), info.get("dtype")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(map(is_count, offsets))):
        why = f"data_offsets must be two whole numbers >= 0, got {shown(offsets)}"
    elif not (isinstance(shape, list) and all(map(is_count, shape))):
        why = f"shape must be a list of whole numbers >= 0, got {shown(shape)}"
    elif not isinstance(dtype, str):
        why = f"dtype must be a string, got {shown(dtype)}"
    else:
        return offsets[0], offsets[1], shape, dtype
    raise ModelFileError(f"{path}: tensor {name}: {why}; {CORRUPT}")


def is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def truncated(path: Path, size: int, needed: int) -> str:
    return (
        f"{path} is truncated: it is {size:,} bytes and its header needs {needed:,}; "
        "download or copy it again"
    )


# --- special tokens and RoPE layouts, shared by both readers and both writers -----------------


def special_id(token: object, tokens: list[str], fallback: object) -> int | None:
    """The id of a tokenizer_config special token (text or {"content": text})."""
    if isinstance(token, dict):
        token = token.get("content")
    if isinstance(token, str) and token in tokens:
        return tokens.index(token)
    return fallback if isinstance(fallback, int) else None


def permute_for_interleaved_rope(w: np.ndarray, n_head: int) -> np.ndarray:
    """[n_head * head_dim, in]: within each head, rows (first half, second half) become pairs
    (HF rotates halves; llama.cpp's Llama architecture rotates interleaved pairs)."""
    rows = w.shape[0]
    return w.reshape(n_head, 2, rows // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def unpermute_from_interleaved_rope(w: np.ndarray, n_head: int) -> np.ndarray:
    """The inverse of permute_for_interleaved_rope: llama.cpp's pairs back to HF's halves."""
    rows = w.shape[0]
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


# --- GGUF ----------------------------------------------------------------------------------


def read_gguf_checkpoint(path: Path) -> Checkpoint:
    reader = open_gguf(path)
    meta = GgufMetadata(reader)
    arch = meta.get("general.architecture")
    if arch not in GGUF_ARCHS:
        raise ModelFileError(
            f"{path}: architecture {arch!r} cannot be exported to ONNX (supported: "
            f"{', '.join(GGUF_ARCHS)})"
        )
    tokens = list(meta.get("tokenizer.ggml.tokens") or [])
    config = gguf_config(path, reader, meta, arch, len(tokens))
    tokenizer_json = gguf_tokenizer_json(path, reader, meta, tokens)
    add_bos = bool(meta.get("tokenizer.ggml.add_bos_token"))
    tok_config: dict[str, object] = {"add_bos_token": add_bos}
    for role in ("bos", "eos"):
        token_id = meta.get(f"tokenizer.ggml.{role}_token_id")
        tok_config[f"{role}_token"] = tokens[token_id] if token_id is not None else None
        config[f"{role}_token_id"] = token_id
    if meta.get("tokenizer.chat_template"):
        tok_config["chat_template"] = meta.get("tokenizer.chat_template")
    return Checkpoint(
        source=path,
        config=config,
        weights=unfused(GgufWeights(path, reader, arch, config), config),
        tokenizer_json=tokenizer_json,
        tokenizer_config=tok_config,
        notes=["weights dequantized from GGUF"] if quantized(reader) else [],
    )


def open_gguf(path: Path):
    import gguf

    try:
        return gguf.GGUFReader(str(path))
    except Exception as e:  # noqa: BLE001 - the reader raises ValueError, KeyError, struct errors
        raise ModelFileError(
            f"{path} is not a readable GGUF file ({str(e).splitlines()[0][:200]}); the file may "
            "be truncated or corrupt"
        ) from e


class GgufMetadata:
    def __init__(self, reader) -> None:
        self.fields = reader.fields

    def get(self, key: str):
        field = self.fields.get(key)
        return None if field is None else field.contents()


def gguf_config(path: Path, reader, meta: GgufMetadata, arch: str, n_vocab: int) -> dict:
    def need(key: str):
        value = meta.get(f"{arch}.{key}")
        if value is None:
            raise ModelFileError(f"{path}: metadata {arch}.{key} is missing; not a complete GGUF")
        return value

    scaling = gguf_rope_scaling(path, reader, meta, arch)
    n_head = need("attention.head_count")
    head_dim = meta.get(f"{arch}.attention.key_length") or need("embedding_length") // n_head
    config = {
        "architectures": [GGUF_ARCHS[arch]],
        "num_hidden_layers": need("block_count"),
        "hidden_size": need("embedding_length"),
        "intermediate_size": need("feed_forward_length"),
        "num_attention_heads": n_head,
        "num_key_value_heads": meta.get(f"{arch}.attention.head_count_kv") or n_head,
        "head_dim": head_dim,
        "max_position_embeddings": need("context_length"),
        "rms_norm_eps": need("attention.layer_norm_rms_epsilon"),
        "rope_theta": meta.get(f"{arch}.rope.freq_base") or 10000.0,
        "rope_scaling": scaling,
        "partial_rotary_factor": (meta.get(f"{arch}.rope.dimension_count") or head_dim) / head_dim,
        "vocab_size": n_vocab,
        "use_sliding_window": False,
    }
    family = FAMILIES[GGUF_ARCHS[arch]]
    if family.gguf_fields is not None:
        config |= family.gguf_fields(lambda key: meta.get(f"{arch}.{key}"), config)
    return config


def gguf_rope_scaling(path: Path, reader, meta: GgufMetadata, arch: str) -> dict | None:
    """The GGUF's RoPE scaling as an HF rope_scaling entry: linear (a factor), the
    per-frequency divisors llama.cpp's converter writes as the rope_freqs tensor for Llama
    3.x's llama3 scaling, or Phi-3's longrope (its two factor tensors and attention factor);
    any other kind is refused by name."""
    kind = meta.get(f"{arch}.rope.scaling.type")
    by_name = {t.name: t for t in reader.tensors}
    freqs = by_name.get("rope_freqs.weight")
    if kind in (None, "none") and "rope_factors_short.weight" in by_name:  # Phi-3's longrope
        factors = {f"{w}_factor": read_factors(path, by_name[f"rope_factors_{w}.weight"])
                   for w in ("short", "long")}  # fmt: skip
        attention = meta.get(f"{arch}.rope.scaling.attn_factor")
        return {"rope_type": "longrope", "attention_factor": attention, **factors}
    if kind in (None, "none") and freqs is None:
        return None
    if freqs is not None and kind in (None, "none"):
        return {"rope_type": GGUF_FREQ_FACTORS, "factors": read_factors(path, freqs)}
    if kind == "linear" and freqs is None:
        return {"rope_type": "linear", "factor": float(meta.get(f"{arch}.rope.scaling.factor"))}
    raise ModelFileError(
        f"{path}: RoPE scaling {kind!r}{' with rope_freqs' if freqs is not None else ''} in a "
        "GGUF is not supported by the ONNX exporter (linear and Llama 3's rope_freqs are); "
        "export from the HF checkpoint folder instead"
    )


def read_factors(path: Path, tensor) -> list[float]:
    """A GGUF's 1-D RoPE factor tensor (rope_freqs, rope_factors_short/long) as floats."""
    from edgespec.quant.gguf_quant import read_rows

    return [float(f) for f in read_rows(path, tensor, 0, int(tensor.shape[-1])).reshape(-1)]


def quantized(reader) -> bool:
    import gguf

    floats = {gguf.GGMLQuantizationType[name] for name in ("F32", "F16", "BF16")}
    return any(t.tensor_type not in floats for t in reader.tensors)


class GgufWeights(LazyTensors):
    """HF-named float32 weights of a GGUF, dequantized a block of rows at a time."""

    def __init__(self, path: Path, reader, arch: str, config: dict) -> None:
        import gguf

        family = FAMILIES[GGUF_ARCHS[arch]]
        self.path, self.config, self.permute = path, config, family.permuted_qk
        self.norm_offset = np.float32(family.norm_offset)  # llama.cpp stores Gemma's 1 + w
        arch_id = next(k for k, v in gguf.MODEL_ARCH_NAMES.items() if v == arch)
        names = gguf.TensorNameMap(arch_id, config["num_hidden_layers"])
        # a fused family's tensors first: llama.cpp names one part as the fused tensor (Phi-3's
        # up_proj and gate_up_proj are both ffn_up), and a GGUF tensor is read under one name
        layer = (tuple(FUSED_PARTS) if family.fused else ()) + HF_LAYER_TENSORS
        wanted = list(HF_MODEL_TENSORS) + [
            f"model.layers.{i}.{t}" for i in range(config["num_hidden_layers"]) for t in layer
        ]
        by_gguf = {t.name: t for t in reader.tensors}
        self.entries: dict[str, Any] = {}
        for hf_name in wanted:
            gguf_name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
            if gguf_name in by_gguf:
                self.entries[hf_name] = by_gguf.pop(gguf_name)

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(int(d) for d in reversed(self.entries[name].shape.tolist()))

    def read_rows(self, name: str, start: int, stop: int) -> np.ndarray:
        if self.permute and name.endswith(("q_proj.weight", "k_proj.weight")):
            return self.read_unpermuted(name, start, stop)
        if name.endswith("norm.weight"):
            return self.read_stored(name, start, stop) - self.norm_offset
        return self.read_stored(name, start, stop)

    def read_stored(self, name: str, start: int, stop: int) -> np.ndarray:
        """Rows as the file stores them, dequantized (plain file reads, no memory map)."""
        from edgespec.quant.gguf_quant import read_rows

        return read_rows(self.path, self.entries[name], start, stop)

    def read_unpermuted(self, name: str, start: int, stop: int) -> np.ndarray:
        """HF rows of a llama.cpp-interleaved q or k: each comes from a stored row of its head."""
        heads = self.config["num_attention_heads"]
        if name.endswith("k_proj.weight"):
            heads = self.config["num_key_value_heads"]
        n_rows = self.shape(name)[0]
        source = unpermute_from_interleaved_rope(np.arange(n_rows), heads)[start:stop]
        lo, hi = int(source.min()), int(source.max()) + 1
        return self.read_stored(name, lo, hi)[source - lo]
