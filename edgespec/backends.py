"""Opening a model by name: the one place the core reaches the back-ends (edgespec.runtimes),
each imported when a model of its kind is first opened.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from pathlib import Path

from edgespec.errors import EdgespecError, ModelFileError
from edgespec.runtime import K_MAX, Runtime

DEVICES = ("cpu", "cuda")


@dataclass(frozen=True)
class RuntimeOptions:
    n_ctx: int = 4096
    n_threads: int | None = None  # None = one per core, up to 8
    device: str = "cpu"  # cpu | cuda: where the model runs (ONNX Runtime: the CUDA provider)
    # llama.cpp only, partial offload: layers on the GPU (None: all on cuda, none on cpu)
    n_gpu_layers: int | None = None
    # batch-invariant kernels: a token's logits are the same bits in a one-token pass and at
    # every position of a verify pass, so speculative output equals plain decoding's, greedy
    # and seeded (docs/exactness.md). None: where they cost nothing measurable (ONNX Runtime's
    # CPU provider), not elsewhere; True: on every back-end that has them (llama.cpp's cost
    # speed: docs/benchmarks.md); False: the fastest kernels
    exact: bool | None = None
    # llama.cpp: each pass runs with a thread fewer per core other processes keep busy (one
    # descheduled thread stalls the rest at every op's barrier); False: n_threads always.
    # ONNX Runtime sizes its thread pool once, so it keeps n_threads either way.
    load_aware_threads: bool = True
    # llama.cpp: load the target's MTP layers where its GGUF has them (an MTP drafter may run;
    # they cost one layer's memory)
    mtp: bool = False
    # llama.cpp: the most tokens one rollback cuts cheaply (the longest draft): a recurrent or
    # hybrid model keeps that many copies of its state (LlamaOptions.snapshots)
    rollback: int = K_MAX
    # llama.cpp: a greedy or sampled step reads each row's largest logits from llama.cpp's
    # backend sampler where the pass ran, not the whole row
    # (LlamaOptions.backend_sampling); the target only: a draft model's catch-up passes would
    # detach its sampler every step, and its confidence reads the logits
    backend_sampling: bool = False

    def __post_init__(self) -> None:
        from edgespec.runtimes.threads import bounded_threads

        if self.device not in DEVICES:
            raise EdgespecError(f"device {self.device!r} is unknown; choose cpu or cuda")
        if self.n_ctx < 1:
            raise EdgespecError(f"--n-ctx must be >= 1, got {self.n_ctx}")
        if self.n_threads is not None:
            object.__setattr__(self, "n_threads", bounded_threads(self.n_threads))
        if self.n_gpu_layers and self.device != "cuda":
            raise EdgespecError(
                f"--n-gpu-layers {self.n_gpu_layers} offloads layers to the GPU, but the "
                "device is cpu; add --device cuda"
            )

    def gpu_layers(self) -> int:
        """llama.cpp's n_gpu_layers: as given, else every layer (-1) on cuda, none on cpu."""
        if self.n_gpu_layers is not None:
            return self.n_gpu_layers
        return -1 if self.device == "cuda" else 0


# llama.cpp's CPU kernels that give a token the same logits at every pass width (measured
# with bench/batch_invariance.py, docs/exactness.md): weights not repacked (the repacked GEMM
# takes over from 4 rows), ggml's tiled K-quant matmul off (from 8 rows), flash attention on
# (its one-chunk kernel serves 2..63 rows), and one-token passes padded to two (alone, from
# 512 cached tokens on, a token takes flash attention's split-KV kernel)
EXACT_LLAMA: dict = {"repack": False, "tiled": False, "flash_attn": True, "min_width": 2}
# ONNX Runtime's CPU kernels do the same once every pass is padded to an even number of rows:
# MLAS has one-row paths (MatMulNBits' M=1 kernels) that sum in another order than its GEMMs,
# and on AVX-512 its int8 GEMM takes rows in pairs, the odd one out by the one-row path (on
# AVX-512, odd widths moved by up to 0.79 until every width was padded: docs/exactness.md)
EXACT_ONNX: dict = {"min_width": 2, "row_multiple": 2}


def exact_onnx_options(arch: str | None = None, flags: list[str] | None = None) -> dict:
    """EXACT_ONNX, without the even rows where MLAS takes no rows in pairs: an x86 CPU
    without AVX-512 (where every width is exact from two rows on, docs/exactness.md). arch and
    flags: this machine's where None."""
    from edgespec.plumbing.machine import cpu_model_and_flags

    arch = (platform.machine() if arch is None else arch).lower()
    flags = cpu_model_and_flags()[1] if flags is None else flags
    pairs = arch not in ("x86_64", "amd64") or "avx512f" in flags
    return EXACT_ONNX if pairs else {**EXACT_ONNX, "row_multiple": 1}


def open_runtime(path: str | Path, opts: RuntimeOptions = RuntimeOptions()) -> Runtime:
    """The runtime of a model file (GGUF: llama.cpp) or exported folder (model.json: ONNX
    Runtime, or TensorRT for a standard-operator model), its back-end imported here."""
    path = Path(path)
    if is_model_folder(path):
        from edgespec.runtimes.model_folder import read_model_json
        from edgespec.runtimes.onnxrt import OnnxOptions, OnnxRuntime

        if opts.n_gpu_layers is not None:
            raise ModelFileError(
                f"{path} is an ONNX model: --n-gpu-layers is for GGUF models (llama.cpp); "
                "run it on the GPU with --device cuda"
            )
        if not opts.load_aware_threads:
            raise ModelFileError(
                f"{path} is an ONNX model, whose threads ONNX Runtime fixes at load: "
                "--fixed-threads is for GGUF models (llama.cpp); drop it"
            )
        standard = read_model_json(path).get("flavour") == "standard"
        exact = (not standard and opts.device == "cpu") if opts.exact is None else opts.exact
        if opts.exact and (standard or opts.device != "cpu"):
            raise ModelFileError(
                f"{path}: --exact has a batch-invariant configuration for ONNX Runtime's CPU "
                "provider only (docs/exactness.md); drop --exact or --device cuda"
            )
        if standard:  # a TensorRT bundle's model
            from edgespec.runtimes.tensorrt import open_standard

            return open_standard(path, opts.n_ctx, opts.n_threads, opts.device)
        gpu = ["CUDAExecutionProvider", "CPUExecutionProvider"] if opts.device == "cuda" else None
        runtime = OnnxRuntime(
            path,
            n_ctx=opts.n_ctx,
            n_threads=opts.n_threads,
            providers=gpu,
            options=OnnxOptions(**(exact_onnx_options() if exact else {})),
        )
        runtime.batch_invariant = exact
        return runtime
    if path.suffix == ".gguf" or starts_with(path, b"GGUF"):
        from edgespec.runtimes.llamacpp import LlamaCppRuntime, LlamaOptions

        llama = LlamaCppRuntime(
            path,
            n_ctx=opts.n_ctx,
            n_threads=opts.n_threads,
            n_gpu_layers=opts.gpu_layers(),
            load_aware_threads=opts.load_aware_threads,
            options=LlamaOptions(
                **(EXACT_LLAMA if opts.exact else {}),
                mtp=opts.mtp,
                snapshots=opts.rollback,
                backend_sampling=opts.backend_sampling,
            ),
        )
        llama.batch_invariant = bool(opts.exact)
        return llama
    if not path.exists():
        raise ModelFileError(f"model file not found: {path}; check the path")
    raise ModelFileError(
        f"{path}: unknown model format (expected a .gguf file or an exported ONNX folder "
        "with model.json); convert it with `edgespec export`"
    )


def declares_mtp_layers(path: Path) -> bool:
    """Whether a GGUF target's metadata declares MTP layers of an architecture llama.cpp
    drafts with (llama_heads.MTP_ARCHS), read without loading it: False for anything else."""
    if path.suffix != ".gguf" or not path.is_file():
        return False
    from edgespec.runtimes.gguf_meta import read_metadata
    from edgespec.runtimes.llama_heads import MTP_ARCHS

    try:
        meta = read_metadata(path)
    except ModelFileError:
        return False  # the run refuses it, with the reason
    arch = meta.get("general.architecture")
    return arch in MTP_ARCHS and int(meta.get(f"{arch}.nextn_predict_layers", 0) or 0) > 0


def is_model_folder(path: Path) -> bool:
    """An exported model folder (ONNX Runtime or TensorRT), not a GGUF file."""
    # anything named model.json: read_model_json names what it is when it is no file
    return path.is_dir() and (path / "model.json").exists()


def starts_with(path: Path, magic: bytes) -> bool:
    if not path.is_file():
        return False
    with path.open("rb") as f:
        return f.read(len(magic)) == magic
