"""A family's fused weights seen as the separate ones the graph reads (Family.fused).

Phi-3 stores q, k and v as one `qkv_proj` and the MLP's gate and up as one `gate_up_proj`
(gate first: HF chunks it in two), and llama.cpp's converter keeps both fused (`attn_qkv`,
`ffn_up`). Each part is a range of the fused tensor's rows, read only when asked for, so the
graph builders, the numpy references and the GGUF writer's permutations see Llama's names.
"""

from __future__ import annotations

from edgespec.errors import ModelFileError
from edgespec.export.checkpoint import FUSED_PARTS as PARTS
from edgespec.export.checkpoint import LazyTensors


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
            fused = next((f for f in PARTS if name.endswith(f)), None)
            if fused is not None:
                self.split(name, fused, config)
        self.entries = {n: e for n, e in inner.entries.items() if not n.endswith(tuple(PARTS))}
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
        for part, size in zip(PARTS[fused], sizes):
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
