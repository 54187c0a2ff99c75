"""A GGUF file's metadata read in Python and checked before llama.cpp sees the file.

llama.cpp aborts the whole process (GGML_ASSERT) on some metadata a file can declare: more
than 512 layers, more than 1024 experts, an unknown RoPE scaling type. A downloaded file
must not be able to do that, so those rules are checked here first, from the header alone
(counts and lengths bounded by the file's size, tensor data never read). The KV cache a
context would need is checked against the memory that is free.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

from edgespec.errors import EdgespecError, ModelFileError

MAX_LAYERS = 512  # LLAMA_MAX_LAYERS (llama-hparams.h)
MAX_EXPERTS = 1024  # LLAMA_MAX_EXPERTS
ROPE_SCALING_TYPES = ("none", "linear", "yarn", "longrope")  # LLAMA_ROPE_SCALING_TYPES
SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q",
           12: "d"}  # fmt: skip
STRING, ARRAY = 8, 9
FIX = (
    "the file may be truncated or corrupt (compare its size and sha256 with the source, or "
    "export it again)"
)


class Array(list):
    """An array value; string arrays are kept as their length only (the vocabulary)."""

    def __init__(self, items: list[Any], length: int) -> None:
        super().__init__(items)
        self.length = length


def read_metadata(path: Path, whole: tuple[str, ...] = ()) -> dict[str, Any]:
    """key -> value of a GGUF file's metadata (numbers, strings, arrays of numbers; arrays of
    strings as an empty Array with their length, and long arrays of numbers too, except
    under the keys in whole). ModelFileError on a malformed header."""
    return read_header(path, whole)[0]


def read_header(path: Path, whole: tuple[str, ...] = ()) -> tuple[dict[str, Any], set[str]]:
    """The metadata (read_metadata) and the names of the tensors the file holds."""
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        reader = HeaderReader(path, data, whole)
        return reader.read(), reader.tensor_names()


class HeaderReader:
    def __init__(self, path: Path, data: mmap.mmap, whole: tuple[str, ...] = ()) -> None:
        self.path, self.data, self.pos = path, data, 0
        self.endian = "<"
        self.whole = whole

    def fail(self, what: str) -> ModelFileError:
        return ModelFileError(f"cannot load {self.path}: {what}; {FIX}")

    def take(self, fmt: str) -> Any:
        size = struct.calcsize(self.endian + fmt)
        if self.pos + size > len(self.data):
            raise self.fail(f"the metadata runs past the end of the file at byte {self.pos:,}")
        (value,) = struct.unpack_from(self.endian + fmt, self.data, self.pos)
        self.pos += size
        return value

    def count(self, n: int, item_bytes: int, what: str) -> int:
        """A declared count, refused when its items could not fit in the rest of the file."""
        if n * item_bytes > len(self.data) - self.pos:
            raise self.fail(
                f"it declares {n:,} {what}, more than its {len(self.data):,} bytes can hold"
            )
        return n

    def string(self) -> str:
        n = self.count(self.take("Q"), 1, "bytes of text")
        raw = self.data[self.pos : self.pos + n]
        self.pos += n
        return raw.decode("utf-8", "replace")

    def read(self) -> dict[str, Any]:
        if self.data[:4] != b"GGUF":
            raise self.fail("it does not start with b'GGUF'")
        self.pos = 4
        version = self.take("I")
        if version & 0xFFFF == 0 and version != 0:  # written big-endian
            self.endian = ">"
            version = struct.unpack(">I", struct.pack("<I", version))[0]
        if version < 2:
            raise self.fail(f"GGUF version {version} is not supported (2 and later are)")
        self.n_tensors = self.count(self.take("Q"), 24, "tensors")
        n_kv = self.count(self.take("Q"), 12, "metadata entries")
        meta: dict[str, Any] = {}
        for _ in range(n_kv):
            key = self.string()
            meta[key] = self.value(self.take("I"), key in self.whole)
        return meta

    def tensor_names(self) -> set[str]:
        """The tensor infos after the metadata: names only (llama.cpp checks their shapes
        and bounds itself)."""
        names = set()
        for _ in range(self.n_tensors):
            names.add(self.string())
            n_dims = self.take("I")
            if n_dims > 4:  # GGML_MAX_DIMS
                raise self.fail(f"a tensor has {n_dims:,} dimensions")
            self.pos += 8 * n_dims + 4 + 8  # dims, type, offset
        return names

    def skip_strings(self, n: int) -> None:
        """Step over n strings (a vocabulary: the one loop here that runs 100,000s of times)."""
        u64, data, pos, end = struct.Struct(self.endian + "Q"), self.data, self.pos, len(self.data)
        for _ in range(n):
            if pos + 8 > end:
                break
            pos += 8 + u64.unpack_from(data, pos)[0]
        else:
            if pos <= end:
                self.pos = pos
                return
        raise self.fail("a string array runs past the end of the file")

    def value(self, kind: int, whole: bool = False) -> Any:
        if kind in SCALARS:
            return self.take(SCALARS[kind])
        if kind == STRING:
            return self.string()
        if kind != ARRAY:
            raise self.fail(f"a metadata value has unknown type {kind}")
        item_kind = self.take("I")
        n = self.take("Q")
        if item_kind == STRING:
            self.count(n, 8, "strings in an array")
            self.skip_strings(n)
            return Array([], n)
        if item_kind not in SCALARS:
            raise self.fail(f"a metadata array has items of type {item_kind}")
        fmt = SCALARS[item_kind]
        size = struct.calcsize(fmt)
        self.count(n, size, "numbers in an array")
        if n > 4 * MAX_LAYERS and not whole:  # token types, scores: length only
            self.pos += n * size
            return Array([], n)
        items = list(struct.unpack_from(f"{self.endian}{n}{fmt}", self.data, self.pos))
        self.pos += n * size
        return Array(items, n)


def check_gguf_metadata(path: Path, n_ctx: int, on_cpu: bool) -> tuple[dict, set[str]]:
    """Refuse metadata that would abort llama.cpp, and a context whose KV cache cannot fit in
    free memory (on_cpu: the cache lives in RAM). The header read: (metadata, tensor names)."""
    meta, tensors = read_header(path)
    arch = meta.get("general.architecture")
    if not isinstance(arch, str):
        return meta, tensors  # llama.cpp refuses a file without an architecture cleanly
    number = numbers(meta, arch)
    check_hparams(path, meta, arch, number)
    if on_cpu and number("attention.head_count"):  # attention (a recurrent model has none)
        check_kv_memory(path, meta, arch, n_ctx, number)
    return meta, tensors


def numbers(meta: dict[str, Any], arch: str) -> Callable[..., int]:
    def number(key: str, default: int = 0) -> int:
        """A per-model number, or the largest of a per-layer array."""
        value = meta.get(f"{arch}.{key}", default)
        if isinstance(value, Array):
            return max(value, default=default)
        return value if isinstance(value, int) and not isinstance(value, bool) else default

    return number


def refusal(path: Path) -> Callable[[str], ModelFileError]:
    return lambda what: ModelFileError(f"{path} declares {what}; {FIX}")


def check_hparams(path: Path, meta: dict[str, Any], arch: str, number) -> None:
    """llama.cpp's asserts on a model's hyperparameters (llama-model.cpp, load_hparams)."""
    refuse = refusal(path)
    n_layer = number("block_count")
    if not 0 < n_layer <= MAX_LAYERS:
        raise refuse(f"{n_layer:,} layers ({arch}.block_count); llama.cpp runs 1 to {MAX_LAYERS}")
    if number("nextn_predict_layers") > n_layer:
        raise refuse(f"more prediction layers than its {n_layer} layers")
    check_experts(
        number("expert_count"),
        number("expert_used_count"),
        number("expert_group_count"),
        number("expert_group_used_count"),
        refuse,
    )
    n_head, n_head_kv = number("attention.head_count"), number("attention.head_count_kv")
    if n_head_kv > n_head or n_head > max(number("embedding_length"), 1):
        raise refuse(
            f"{n_head:,} attention heads and {n_head_kv:,} KV heads for an embedding of "
            f"{number('embedding_length'):,}; KV heads are at most the heads, heads at most "
            "the embedding"
        )
    rope = meta.get(f"{arch}.rope.scaling.type", "linear")
    if rope not in ROPE_SCALING_TYPES:
        raise refuse(f"RoPE scaling type {rope!r}, not one of {', '.join(ROPE_SCALING_TYPES)}")


def check_experts(n_expert: int, n_used: int, n_groups: int, n_group_used: int, refuse) -> None:
    """llama.cpp's asserts on mixture-of-experts counts (llama-model.cpp, load_hparams)."""
    if n_expert > MAX_EXPERTS:
        raise refuse(f"{n_expert:,} experts; llama.cpp runs at most {MAX_EXPERTS}")
    if n_used > n_expert:
        raise refuse(f"{n_used:,} experts used per token of {n_expert:,}")
    if n_expert == 0:
        if n_groups:
            raise refuse(f"{n_groups:,} expert groups without experts")
        return
    if n_used == 0:
        raise refuse(f"{n_expert:,} experts but none used per token")
    if n_groups >= n_expert:
        raise refuse(f"{n_groups:,} expert groups for {n_expert:,} experts")
    if n_groups > 1 and (n_expert % n_groups or not 0 < n_group_used < n_groups):
        raise refuse(f"{n_groups:,} expert groups that do not divide {n_expert:,} experts")


def check_kv_memory(path: Path, meta: dict[str, Any], arch: str, n_ctx: int, number) -> None:
    """The f16 KV cache of n_ctx tokens (capped by the trained context) must fit in free RAM."""
    trained = number("context_length")
    n_ctx = min(n_ctx, trained) if trained > 0 else n_ctx
    n_head = max(1, number("attention.head_count", 1))
    head_dim = number("embedding_length") // n_head
    kv_dims = number("attention.head_count_kv", n_head) * (
        number("attention.key_length", head_dim) + number("attention.value_length", head_dim)
    )
    need = number("block_count") * n_ctx * kv_dims * 2
    free = available_memory()
    if free is not None and need > free:
        raise EdgespecError(
            f"a {n_ctx:,}-token context for {path} needs {need / 2**30:,.1f} GiB of KV cache "
            f"and {free / 2**30:,.1f} GiB of memory is free; lower --n-ctx (or free memory)"
        )


def available_memory() -> int | None:
    """Bytes of memory free for new allocations (Linux: MemAvailable), None if unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


# MTP (NextN) drafting: llama.cpp asserts these tensors in each MTP graph it builds, and all
# but these architectures assert a single MTP layer (their graph_mtp in src/models/)
NEXTN_TENSORS = ("nextn.eh_proj.weight", "nextn.enorm.weight", "nextn.hnorm.weight")
SEVERAL_MTP_LAYERS = frozenset({"hy_v3", "mimo2", "step35"})


def mtp_problem(path: Path, meta: dict[str, Any], tensors: set[str]) -> str | None:
    """Why llama.cpp would abort drafting with the MTP layers a target declares (a count its
    graph refuses, a tensor a declared layer lacks); None where it would not."""
    arch = meta.get("general.architecture")
    if not isinstance(arch, str):
        return None
    number = numbers(meta, arch)
    n_mtp, n_layer = number("nextn_predict_layers"), number("block_count")
    key = f"{arch}.nextn_predict_layers"
    layers = f"{n_mtp} MTP layer{'s' if n_mtp != 1 else ''} ({key})"
    if n_mtp > 1 and arch not in SEVERAL_MTP_LAYERS:
        return f"{path.name} declares {layers}; this llama.cpp runs one"
    for il in range(n_layer - n_mtp, n_layer):
        for name in NEXTN_TENSORS:
            if f"blk.{il}.{name}" not in tensors:
                return f"{path.name} declares {layers} but holds no blk.{il}.{name}"
    return None


def check_eagle_head(path: Path, n_ctx: int, on_cpu: bool) -> None:
    """An EAGLE-3 head's GGUF: the target's rules (check_gguf_metadata), its block count the
    layers its tensors hold, its RoPE dimensions its heads' size (a head with none hung
    llama.cpp's first pass)."""
    meta, tensors = check_gguf_metadata(path, n_ctx, on_cpu)
    arch = meta.get("general.architecture")
    if not isinstance(arch, str):
        return
    number, refuse = numbers(meta, arch), refusal(path)
    blocks = {name.split(".")[1] for name in tensors if name.startswith("blk.")}
    if blocks != {str(i) for i in range(number("block_count"))}:
        held = ", ".join(sorted(blocks, key=lambda b: (len(b), b))) or "none"
        raise refuse(
            f"{number('block_count'):,} layers ({arch}.block_count) but its tensors hold "
            f"layers {held}"
        )
    head_dim = number("attention.key_length") or number("embedding_length") // max(
        1, number("attention.head_count")
    )
    rope_dims = number("rope.dimension_count", head_dim)
    if rope_dims != head_dim:
        raise refuse(
            f"{rope_dims:,} RoPE dimensions ({arch}.rope.dimension_count) for heads of "
            f"{head_dim:,}; an EAGLE-3 head rotates whole heads"
        )
