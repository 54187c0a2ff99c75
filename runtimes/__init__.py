"""Back-ends behind the Runtime protocol, chosen by what the model file is."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from edgespec.runtimes.base import Runtime, VocabInfo, check_compatible

__all__ = ["Runtime", "RuntimeOptions", "VocabInfo", "check_compatible", "open_runtime"]


@dataclass(frozen=True)
class RuntimeOptions:
    n_ctx: int = 4096
    n_threads: int | None = None  # None = one per core, up to 8
    n_gpu_layers: int = 0


def open_runtime(path: str | Path, opts: RuntimeOptions = RuntimeOptions()) -> Runtime:
    from edgespec.errors import ModelFileError

    path = Path(path)
    if path.is_dir() and (path / "model.json").is_file():
        from edgespec.runtimes.onnxrt import OnnxRuntime

        gpu = ["CUDAExecutionProvider", "CPUExecutionProvider"] if opts.n_gpu_layers else None
        return OnnxRuntime(path, n_ctx=opts.n_ctx, n_threads=opts.n_threads, providers=gpu)
    if path.suffix == ".gguf" or starts_with(path, b"GGUF"):
        from edgespec.runtimes.llamacpp import LlamaCppRuntime

        return LlamaCppRuntime(
            path, n_ctx=opts.n_ctx, n_threads=opts.n_threads, n_gpu_layers=opts.n_gpu_layers
        )
    if not path.exists():
        raise ModelFileError(f"model file not found: {path}; check the path")
    raise ModelFileError(
        f"{path}: unknown model format (expected a .gguf file or an exported ONNX folder "
        "with model.json); convert it with `edgespec export`"
    )


def starts_with(path: Path, magic: bytes) -> bool:
    if not path.is_file():
        return False
    with path.open("rb") as f:
        return f.read(len(magic)) == magic
