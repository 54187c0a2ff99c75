"""TensorRT engines (export/trt_build.py) behind the Runtime protocol, with CUDA graphs.

NOT YET RUN ON A GPU: written against the TensorRT 10 / TensorRT for RTX Python API and
cuda-python's runtime bindings; tests/test_tensorrt.py holds the GPU checks (skipped here).

The engine is the standard-operator graph (export/onnx_standard.py): input_ids, the write
position and the logit rows in; the KV buffers in and out whole. So:

- two sets of KV buffers [1, n_kv_head, capacity, head_dim] per layer are allocated once for
  the whole context; each step reads one set and writes the other (the TensorRT-LLM Python
  runtime's pattern), so no step copies the cache back, and rollback is a length change;
- one execution context per optimization profile: profile 0 for prompt processing (any
  width, no graph), one per verify width w = 1..K+1 (every shape fixed);
- the step of width w that returns all w rows (verify, and the one-token draft step) is
  captured once per width and buffer parity with stream capture and replayed as a CUDA
  graph: a step costs three small host-to-device copies, one graph launch, and one copy of
  the logits rows the verifier reads (the graph computes only the rows asked for);
- the tokenizer and vocabulary are ExportedModelFolder's, as ONNX Runtime's are (the model
  folder is the same).

open_standard() picks this runtime for a TensorRT bundle's model where the engine, TensorRT
and a GPU are all present and match, and ONNX Runtime on the same ONNX elsewhere (saying so
once). An engine built for another GPU or TensorRT version is refused with the fix.
"""

from __future__ import annotations

import ctypes
import logging
import os
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from edgespec.bundle import sha256_file
from edgespec.errors import ModelFileError
from edgespec.plumbing.jsonfile import load_optional_object
from edgespec.runtimes.model_folder import ExportedModelFolder
from edgespec.runtimes.shared import forward_in_chunks

if TYPE_CHECKING:
    from edgespec.runtime import Runtime

log = logging.getLogger(__name__)
ENGINE_JSON_MAX_BYTES = 1 << 20  # a few sizes, widths and hashes
_fallback_said = False  # the fallback is announced once per process, not once per model


# --- choosing a back-end for a standard-flavour model ------------------------------------------


def open_standard(path: Path, n_ctx: int, n_threads: int | None, device: str) -> Runtime:
    """The TensorRT engine where it can run here (device cuda), else ONNX Runtime on the
    same graph."""
    from edgespec.runtimes.onnxrt_standard import StandardOnnxRuntime

    meta = engine_metadata(path)
    found = import_tensorrt() if meta else None
    gpu = gpu_properties() if found else None
    if meta and found and gpu and device == "cuda":
        check_engine(path, meta, found[1], str(found[0].__version__), gpu)
        return TensorRTRuntime(path, meta, found[0], n_ctx=n_ctx)
    why = (
        "it has no engine (run the bundle's build_engines.sh on the device)" if not meta
        else "TensorRT is not installed" if not found
        else "no CUDA GPU is visible" if not gpu
        else "the device is cpu (add --device cuda)"
    )  # fmt: skip
    global _fallback_said
    if not _fallback_said:
        log.warning("%s: running the TensorRT bundle's ONNX on ONNX Runtime: %s", path, why)
        _fallback_said = True
    gpu_ep = ["CUDAExecutionProvider", "CPUExecutionProvider"] if device == "cuda" else None
    return StandardOnnxRuntime(path, n_ctx=n_ctx, n_threads=n_threads, providers=gpu_ep)


def import_tensorrt() -> tuple[ModuleType, str] | None:
    """(module, flavour): TensorRT ("tensorrt") or TensorRT for RTX ("tensorrt_rtx")."""
    import importlib

    for name in ("tensorrt", "tensorrt_rtx"):
        try:
            return importlib.import_module(name), name
        except Exception:  # noqa: BLE001 - a broken install is as good as none
            continue
    return None


def engine_metadata(model_dir: Path) -> dict | None:
    """engines/<model>.json beside the model folder (export/trt_build.py writes it)."""
    path = model_dir.parent / "engines" / f"{model_dir.name}.json"
    return load_optional_object(path, ENGINE_JSON_MAX_BYTES, "rebuild the engines", ModelFileError)


def check_engine(
    model_dir: Path, meta: dict, flavour: str, version: str, gpu: tuple[str, tuple[int, int]]
) -> None:
    """Refuse an engine built for another TensorRT or GPU: it would fail to deserialize, or
    run kernels tuned for another chip."""
    name, (major, minor) = gpu
    here = (flavour, version, f"{major}.{minor}")
    built = (meta.get("flavour"), meta.get("version"), meta.get("compute_capability"))
    if built != here:
        script = model_dir.parent / "build_engines.sh"
        raise ModelFileError(
            f"{model_dir.parent / 'engines' / str(meta.get('engine'))} was built with "
            f"{built[0]} {built[1]} for compute capability {built[2]} ({meta.get('device')}); "
            f"this machine has {flavour} {version} and compute capability {major}.{minor} "
            f"({name}): rebuild the engines here with bash {script}"
        )


def gpu_properties() -> tuple[str, tuple[int, int]] | None:
    """(name, compute capability) of GPU 0 through cuda-python, else nvidia-smi; None when
    no CUDA GPU is visible."""
    try:
        cudart = cuda_runtime()
        err, prop = cudart.cudaGetDeviceProperties(0)
        if int(err) == 0:
            name = prop.name.decode() if isinstance(prop.name, bytes) else str(prop.name)
            return name.strip("\x00 "), (int(prop.major), int(prop.minor))
    except Exception:  # noqa: BLE001 - no cuda-python, no driver, no device: try nvidia-smi
        pass
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.splitlines()  # fmt: skip
        name, cap = (part.strip() for part in out[0].rsplit(",", 1))
        major, minor = cap.split(".")
        return name, (int(major), int(minor))
    except Exception:  # noqa: BLE001 - absent, or a driver without compute_cap
        return None


def cuda_runtime() -> ModuleType:
    """cuda-python's runtime bindings: cuda.bindings.runtime (12.6+), else cuda.cudart."""
    try:
        from cuda.bindings import runtime  # type: ignore[import-not-found]

        return runtime
    except ImportError:
        from cuda import cudart  # type: ignore[import-not-found]

        return cudart


# --- the runtime -----------------------------------------------------------------------------


class Cuda:
    """The few CUDA runtime calls used here, each checked."""

    def __init__(self) -> None:
        self.rt = cuda_runtime()
        self.stream = self.call(self.rt.cudaStreamCreate())
        self.handle = int(self.stream)  # what TensorRT's execute_async_v3 takes

    def call(self, result: Any) -> Any:
        err, *values = result if isinstance(result, tuple) else (result,)
        if int(err) != 0:
            raise RuntimeError(f"CUDA error {err}")
        return values[0] if len(values) == 1 else values or None

    def malloc(self, nbytes: int, zero: bool = False) -> int:
        ptr = int(self.call(self.rt.cudaMalloc(nbytes)))
        if zero:  # no NaN garbage where the mask multiplies by 0
            self.call(self.rt.cudaMemsetAsync(ptr, 0, nbytes, self.stream))
        return ptr

    def to_device(self, dst: int, array: np.ndarray) -> None:
        kind = self.rt.cudaMemcpyKind.cudaMemcpyHostToDevice
        self.call(self.rt.cudaMemcpyAsync(dst, array.ctypes.data, array.nbytes, kind, self.stream))

    def to_host(self, dst: int, src: int, nbytes: int) -> None:
        kind = self.rt.cudaMemcpyKind.cudaMemcpyDeviceToHost
        self.call(self.rt.cudaMemcpyAsync(dst, src, nbytes, kind, self.stream))

    def sync(self) -> None:
        self.call(self.rt.cudaStreamSynchronize(self.stream))

    def capture(self, launch) -> Any:
        """launch() recorded on the stream as a CUDA graph; returns the executable graph."""
        mode = self.rt.cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal
        self.call(self.rt.cudaStreamBeginCapture(self.stream, mode))
        launch()
        graph = self.call(self.rt.cudaStreamEndCapture(self.stream))
        return self.call(self.rt.cudaGraphInstantiate(graph, 0))

    def replay(self, graph: Any) -> None:
        self.call(self.rt.cudaGraphLaunch(graph, self.stream))


@dataclass
class Context:
    """One execution context: its profile's widths; graphs by KV buffer parity."""

    context: Any
    profile: int
    width: int | None  # None: the prompt profile (any width, run uncaptured)
    graphs: dict[int, Any]


class TensorRTRuntime(ExportedModelFolder):
    """The Runtime protocol over a TensorRT engine of a standard-flavour model folder: the
    model through TensorRT, the tokenizer as ExportedModelFolder's (the folder is the one
    ONNX Runtime reads; no ONNX Runtime session is opened)."""

    def __init__(self, model_dir: str | os.PathLike[str], meta: dict, trt: ModuleType,
                 *, n_ctx: int = 4096) -> None:  # fmt: skip
        self.read_folder(model_dir)
        self.capacity = int(meta["capacity"])
        self.n_ctx = min(self.context_size(n_ctx), self.capacity)
        self.n_batch = int(meta["prefill_max"])
        self.n_past = 0
        self.load_vocabulary()
        self.cuda = Cuda()
        engine_file = self.path.parent / "engines" / meta["engine"]
        if sha256_file(engine_file) != meta.get("sha256"):
            raise ModelFileError(
                f"{engine_file} does not match the sha256 its metadata records: rebuild the "
                f"engines with bash {self.path.parent / 'build_engines.sh'}"
            )
        self.trt_runtime = trt.Runtime(trt.Logger(trt.Logger.WARNING))
        self.engine = self.trt_runtime.deserialize_cuda_engine(engine_file.read_bytes())
        if self.engine is None:
            raise ModelFileError(f"TensorRT could not load {engine_file}; rebuild the engines")
        self.layers = int(self.info["n_layer"])
        kv_shape = (1, int(self.info["n_kv_head"]), self.capacity, int(self.info["head_dim"]))
        kv_bytes = 2 * int(np.prod(kv_shape))  # fp16
        self.kv_shape = kv_shape
        self.kv_sets = [  # two sets: kv_sets[parity][name] -> device pointer
            {f"{i}.{k}": self.cuda.malloc(kv_bytes, zero=True)
             for i in range(self.layers) for k in ("key", "value")}
            for _ in range(2)
        ]  # fmt: skip
        self.parity = 0  # the set that holds the cache now
        widest = max(self.n_batch, max(meta["widths"]))
        self.ids = self.cuda.malloc(4 * widest)
        self.position = self.cuda.malloc(4)
        self.rows = self.cuda.malloc(4 * widest)
        self.logits = self.cuda.malloc(4 * widest * self.n_vocab)
        host = self.cuda.call(self.cuda.rt.cudaMallocHost(4 * widest * self.n_vocab))
        self.host_logits = np.ctypeslib.as_array(
            (ctypes.c_float * (widest * self.n_vocab)).from_address(int(host))
        ).reshape(widest, self.n_vocab)  # pinned: the copy back runs at full speed
        self.contexts = [self.make_context(0, None)] + [
            self.make_context(i + 1, w) for i, w in enumerate(meta["widths"])
        ]
        self.by_width = {c.width: c for c in self.contexts if c.width is not None}

    def make_context(self, profile: int, width: int | None) -> Context:
        context = self.engine.create_execution_context()
        context.set_optimization_profile_async(profile, self.cuda.handle)
        for i in range(self.layers):
            for k in ("key", "value"):
                context.set_input_shape(f"past_key_values.{i}.{k}", self.kv_shape)
        context.set_input_shape("position", (1,))
        context.set_tensor_address("input_ids", self.ids)
        context.set_tensor_address("position", self.position)
        context.set_tensor_address("logit_rows", self.rows)
        context.set_tensor_address("logits", self.logits)
        if width is not None:
            context.set_input_shape("input_ids", (1, width))
            context.set_input_shape("logit_rows", (width,))
        return Context(context, profile, width, {})

    # --- the Runtime protocol ---------------------------------------------------------------

    def forward(self, tokens: Sequence[int], *, last_only: bool = False) -> np.ndarray:
        return forward_in_chunks(self, tokens, last_only, self.n_batch, self.run)

    def run(self, tokens: Sequence[int], rows: int) -> np.ndarray:
        n, keep = len(tokens), max(rows, 1)
        if self.n_past + n > self.n_ctx:
            raise ValueError(f"{self.n_past + n} tokens exceed the context of {self.n_ctx}")
        self.cuda.to_device(self.ids, np.asarray(tokens, np.int32))
        self.cuda.to_device(self.position, np.array([self.n_past], np.int32))
        self.cuda.to_device(self.rows, np.arange(n - keep, n, dtype=np.int32))
        ctx = self.by_width.get(n) if keep == n else None
        if ctx is None:  # prompt chunks, and steps that want fewer rows than tokens
            ctx = self.contexts[0]
            ctx.context.set_input_shape("input_ids", (1, n))
            ctx.context.set_input_shape("logit_rows", (keep,))
            self.bind_kv(ctx)
            if not ctx.context.execute_async_v3(self.cuda.handle):
                raise RuntimeError(f"TensorRT could not run {n} tokens")
        else:
            graph = ctx.graphs.get(self.parity)
            if graph is None:
                graph = ctx.graphs[self.parity] = self.capture(ctx)
            self.cuda.replay(graph)
        self.cuda.to_host(self.host_logits.ctypes.data, self.logits, 4 * keep * self.n_vocab)
        self.cuda.sync()
        self.parity ^= 1  # the set just written holds the cache now
        self.n_past += n
        return np.array(self.host_logits[:keep])

    def capture_graphs(self, shapes: Iterable[tuple[int, int]]) -> int:
        """Capture now each step shape's graphs that a request would otherwise capture on
        first use: a width returning every row, one graph per KV buffer parity, so each is
        run twice at n_past and rolled back (each run carries the cache's valid rows over to
        the other set, so the cache is as it was). Other shapes run uncaptured. Returns how
        many graphs were captured."""
        n_past, before = self.n_past, self.n_graphs()
        for width, rows in dict.fromkeys(shapes):
            ctx = self.by_width.get(width) if rows == width else None
            if ctx is None or n_past + width > self.n_ctx:
                continue
            for _ in range(2):  # run() captures the parity it meets, then flips it
                if len(ctx.graphs) < 2:
                    self.run([0] * width, rows)
                    self.rollback(n_past)
        return self.n_graphs() - before

    def n_graphs(self) -> int:
        return sum(len(ctx.graphs) for ctx in self.contexts)

    def bind_kv(self, ctx: Context) -> None:
        past, present = self.kv_sets[self.parity], self.kv_sets[self.parity ^ 1]
        for key in past:
            ctx.context.set_tensor_address(f"past_key_values.{key}", past[key])
            ctx.context.set_tensor_address(f"present.{key}", present[key])

    def capture(self, ctx: Context) -> Any:
        """This width and parity's step as a CUDA graph. One run first, uncaptured: TensorRT
        finishes its lazy set-up there (a capture must not allocate). That run computes the
        same step the graph then replays, over the same inputs, so it changes nothing."""
        self.bind_kv(ctx)
        if not ctx.context.execute_async_v3(self.cuda.handle):
            raise RuntimeError(f"TensorRT could not run width {ctx.width}")
        return self.cuda.capture(lambda: ctx.context.execute_async_v3(self.cuda.handle))

    def rollback(self, n_past: int) -> None:
        if not 0 <= n_past <= self.n_past:
            raise ValueError(f"cannot roll back to {n_past}: the cache holds {self.n_past}")
        self.n_past = n_past

    def reset(self) -> None:
        self.n_past = 0
