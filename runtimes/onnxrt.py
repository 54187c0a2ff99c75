"""Exported ONNX decoders (export/onnx_export.py) through ONNX Runtime, with IOBinding.

The KV cache is allocated once for the whole context, and each layer's buffer is bound as
both `past_key_values.{i}.*` and `present.{i}.*`: GroupQueryAttention then writes the new
entries in place at n_past, so a step copies no cache and rollback only lowers n_past.

Inputs, outputs and their bindings are made once per step width and reused (`Step`). On the
CUDA EP the steps that repeat are captured as CUDA graphs, each on first use, and replayed
after: every step of 1..max_graph_width tokens that returns all its rows (plain decode,
drafting, verify at any k), and a draft's 2-token step that returns its last row (its last
proposal and the target's bonus token, forwarded after every draft kept whole). A graph
fixes its host inputs, so captured steps pass the whole cache as total_sequence_length
(seqlens_k, on the device, says how much of it is real). One graph per width, rather than
padding every verify step to the widest, keeps k = 1 as cheap as it is.

A graph exported for the GPU also outputs each row's argmax and its probability (`top_id`,
`top_p`; export/onnx_export.py): a greedy step (forward_top) then copies [rows] numbers to
the host instead of [rows, V] logits.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgespec.errors import EdgespecError, ModelFileError
from edgespec.runtime import MAX_VERIFY_WIDTH, TopRows
from edgespec.runtimes.model_folder import (
    MODEL_JSON,
    ExportedModelFolder,
    read_logit_ranges,
)
from edgespec.runtimes.onnx_threads import configure_threads, default_pool
from edgespec.runtimes.sampling_head import SamplingHead, head_dists, top_k_of_candidates
from edgespec.runtimes.shared import (
    KeptFeatures,
    check_room,
    forward_in_chunks,
    kept_rows,
    logit_count,
    zeroed_value,
)
from edgespec.runtimes.threads import default_threads
from edgespec.sampling import PassRows, SamplingParams

log = logging.getLogger(__name__)

NO_GRAPH = -1  # "gpu_graph_id" of an uncaptured run (captured_graph_id gives the others)
MAX_GRAPH_WIDTH = MAX_VERIFY_WIDTH
# last-row steps captured up to this width: a draft's re-forward; wider ones seldom repeat
LAST_ROW_GRAPH_WIDTH = 2
CACHED_WIDTHS = 16  # steps up to this width keep their bindings between calls
TOP_OUTPUTS = {"top_id": np.int64, "top_p": np.float32}  # [1, rows] each, beside the logits
HIDDEN_STATES = "hidden_states"  # [1, width, F]: a head's extract layers' inputs, every row


def check_declared_sizes(path: Path, info: dict, session, n_ctx: int, on_cuda: bool) -> None:
    """model.json's layer count, KV shape and vocabulary must be the graph's, and the KV
    cache they size must fit in free memory (on the CPU), before it is allocated."""
    from edgespec.runtimes.gguf_meta import available_memory

    inputs = {i.name: i.shape for i in session.get_inputs()}
    layers = sum(1 for n in inputs if n.startswith("past_key_values.") and n.endswith(".key"))
    key = inputs.get("past_key_values.0.key") or []
    logits = {o.name: o.shape for o in session.get_outputs()}.get("logits") or []
    ranges = info.get("logit_ranges")
    columns = "n_vocab" if ranges is None else "logit_ranges' token count"
    declared = {
        "n_layer": (info["n_layer"], layers),
        "n_kv_head": (info["n_kv_head"], key[1] if len(key) == 4 else None),
        "head_dim": (info["head_dim"], key[3] if len(key) == 4 else None),
        columns: (
            info["n_vocab"] if ranges is None else logit_count(ranges),
            logits[-1] if logits else None,
        ),
    }
    for name, (says, graph) in declared.items():
        if isinstance(graph, int) and says != graph:
            raise ModelFileError(
                f"{path / MODEL_JSON} says {name} {says:,} but the graph has {graph:,}; the "
                "folder mixes files of different models: export the model again"
            )
    need = 2 * info["n_layer"] * info["n_kv_head"] * n_ctx * info["head_dim"] * 4
    free = available_memory()
    if not on_cuda and free is not None and need > free:
        raise EdgespecError(
            f"a {n_ctx:,}-token context for {path} needs {need / 2**30:,.1f} GiB of KV cache "
            f"and {free / 2**30:,.1f} GiB of memory is free; lower --n-ctx (or free memory)"
        )


@dataclass
class Step:
    """Everything bound for one step width: host arrays, the OrtValues over them, the binding."""

    width: int  # tokens the graph sees (padded up for a CUDA graph)
    rows: int  # logits rows it returns
    ids: np.ndarray  # [1, width] int64
    seqlens_k: np.ndarray  # [1] int32: tokens in the cache after the step, minus 1
    total: np.ndarray  # [] int32
    logits_start: np.ndarray  # [1] int64
    logits: np.ndarray | None  # [1, rows, V] float32 on the CPU EP (bound in place)
    values: dict[str, Any]  # OrtValues that must stay alive while bound
    binding: Any  # onnxruntime.IOBinding
    graph_id: int


@dataclass(frozen=True)
class OnnxOptions:
    """How OnnxRuntime runs its steps, beside where (providers) and how big (n_ctx).

    cuda_graph: on the CUDA EP, capture the steps that repeat as CUDA graphs (the GPU kit
    measures them off).
    min_width: pad narrower steps (one-token decode steps) to this many tokens, so that
    they take the same kernels as verify passes (MLAS has a one-row path); the cache
    keeps room for the padding rows.
    row_multiple: pad every step to a multiple of this many tokens (MLAS's AVX-512 int8
    kernels take rows in pairs and the odd one out by another path). With min_width, what
    --exact sets (runtimes/__init__.py's EXACT_ONNX).
    sampling_head: reduce a sampled step's logits to each row's likeliest columns where
    they are (runtimes/sampling_head.py). Off by default: on a GPU it cost more than copying
    the logits to the host (docs/decisions.md).
    n_batch: the most tokens one pass takes (longer prompts are forwarded in chunks)."""

    cuda_graph: bool = True
    min_width: int = 1
    row_multiple: int = 1
    sampling_head: bool = False
    n_batch: int = 512


class OnnxRuntime(ExportedModelFolder):
    """The Runtime protocol over an exported model folder (model.json, model.onnx, tokenizer):
    the model through ONNX Runtime, the tokenizer as ExportedModelFolder's."""

    binds_steps = True  # each step's outputs stay bound (Step): forward_dists reads them there

    def __init__(
        self,
        model_dir: str | os.PathLike[str],
        *,
        n_ctx: int = 2048,
        n_threads: int | None = None,
        providers: Sequence[str | tuple[str, dict]] | None = None,
        options: OnnxOptions = OnnxOptions(),
    ) -> None:
        """Its session's threads run in a pool of its own whose idle workers spin SPIN_US,
        or in the process's shared pool where that cannot be had (default_pool)."""
        import onnxruntime as ort

        self.ort = ort
        self.read_folder(model_dir)
        self.model_file = self.path / self.info.get("model_file", "model.onnx")
        # the token id of each logits column, where the output layer keeps some (a draft)
        self.logit_ids = read_logit_ranges(self.path / MODEL_JSON, self.info)
        self.n_logits = self.n_vocab if self.logit_ids is None else len(self.logit_ids)
        self.min_width = max(1, options.min_width)
        self.row_multiple = max(1, options.row_multiple)
        room = max(self.min_width, self.row_multiple) - 1  # rows past n_ctx only padding fills
        self.n_ctx = self.context_size(n_ctx + room) - room
        if self.n_ctx < 1:
            raise EdgespecError(f"min_width {options.min_width} or row_multiple leaves no context")
        self.cache_len = self.n_ctx + room
        self.n_batch = max(1, min(options.n_batch, self.n_ctx))
        self.n_past = 0
        self.max_graph_width = MAX_GRAPH_WIDTH  # the widest step captured as a CUDA graph
        wants_cuda = any(provider_name(p) == "CUDAExecutionProvider" for p in providers or ())
        if wants_cuda:
            preload_cuda_libraries(ort)
        self.cuda_graph = options.cuda_graph and wants_cuda and self.fp16_compute_for_cuda()
        self.providers = [
            with_cuda_graph(p) if self.cuda_graph else p
            for p in providers or ["CPUExecutionProvider"]
        ]
        self.pool = default_pool()
        self.session = self.open_session(n_threads)
        self.on_cuda = "CUDAExecutionProvider" in self.session.get_providers()
        if wants_cuda and not self.on_cuda:
            log.warning(
                "%s: ONNX Runtime's CUDA execution provider is not available here, so this "
                "runs on the CPU; install edgespec[onnx-gpu] (onnxruntime-gpu) in place of "
                "onnxruntime, and see `edgespec doctor`", self.path,
            )  # fmt: skip
            self.cuda_graph = False
        self.kv_dtype = kv_dtype(self.session)
        outputs = {o.name for o in self.session.get_outputs()}
        self.top_outputs = TOP_OUTPUTS.keys() <= outputs  # edgespec.runtime.forward_top reads them
        # a graph exported with hidden_layers outputs their inputs at every row (bound on
        # every step: a CUDA graph needs fixed outputs); from keep_features (open_head) on,
        # each pass's rows are copied out and kept by position (features)
        self.hidden_width = 0
        if HIDDEN_STATES in outputs:
            self.hidden_width = len(self.info["hidden_layers"]) * int(self.info["n_embd"])
        self.hidden_states = self.hidden_width > 0  # open_head: a head reads features
        self.kept: KeptFeatures | None = None
        self.sampling_head = None  # forward_dists runs it (dists_on_device)
        if options.sampling_head and self.binds_steps:
            head_providers = [without_cuda_graph(p) for p in self.providers]
            self.sampling_head = SamplingHead(ort, self.n_logits, head_providers)
        self.passes = 0  # graph runs so far: what a step's rows are read against
        check_declared_sizes(self.path, self.info, self.session, self.cache_len, self.on_cuda)
        self.kv = self.allocate_cache()  # name -> OrtValue [1, n_kv, n_ctx, hd]
        self.steps: dict[tuple[int, int], Step] = {}  # (width, rows) -> bound step
        self.run_options: dict[int, Any] = {}  # CUDA graph id -> RunOptions
        self.load_vocabulary()

    # --- loading -------------------------------------------------------------------------

    def fp16_compute_for_cuda(self) -> bool:
        if self.info.get("compute", "fp32") == "fp16":
            return True
        log.warning(
            "%s has float32 compute: ONNX Runtime's CUDA GroupQueryAttention exists in fp16/bf16 "
            "only, so attention runs on the CPU and CUDA graphs are off; export with "
            "compute='fp16' for the CUDA EP", self.path,
        )  # fmt: skip
        return False

    def open_session(self, n_threads: int | None):
        ort = self.ort
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        configure_threads(opts, self.pool, n_threads or default_threads())
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.log_severity_level = 3
        # fold DequantizeLinear of constant weights (fp8) into float32 at load, as Cast (fp16)
        # is folded: ORT's CPU has no fp8 matmul, and unfolded they cost 15x per pass
        opts.add_session_config_entry("session.disable_quant_qdq", "1")
        try:
            return ort.InferenceSession(str(self.model_file), opts, providers=self.providers)
        except Exception as e:  # noqa: BLE001 - ORT raises several pybind types for bad files
            if self.cuda_graph:  # a graph ORT cannot capture whole: run it uncaptured instead
                log.warning("%s: no CUDA graphs (%s); running without", self.model_file, e)
                self.cuda_graph = False
                self.providers = [without_cuda_graph(p) for p in self.providers]
                return self.open_session(n_threads)
            data = self.model_file.with_name(self.model_file.name + ".data")
            files = f"{self.model_file} (weights in {data.name})" if data.exists() else ""
            raise ModelFileError(
                f"cannot load {files or self.model_file}: {str(e).strip().splitlines()[0][:300]}; "
                "a file may be truncated or corrupt (export it again with `edgespec export "
                "--format onnx`)"
            ) from e

    def allocate_cache(self) -> dict[str, Any]:
        """One [1, n_kv, n_ctx, head_dim] buffer per layer and kind, zeroed once."""
        shape = (1, int(self.info["n_kv_head"]), self.cache_len, int(self.info["head_dim"]))
        return {
            f"{i}.{kind}": zeroed_value(self.ort, shape, self.kv_dtype, self.on_cuda)
            for i in range(int(self.info["n_layer"]))
            for kind in ("key", "value")
        }

    # --- the Runtime protocol ---------------------------------------------------------------

    def forward(self, tokens: Sequence[int], *, last_only: bool = False) -> np.ndarray:
        return forward_in_chunks(self, tokens, last_only, self.n_batch, self.run)

    @property
    def dists_on_device(self) -> bool:
        return self.sampling_head is not None

    def forward_top(
        self, tokens: Sequence[int], *, last_only: bool = False, with_prob: bool = False
    ) -> TopRows:
        """forward's rows as TopRows read from the graph's top_id and top_p outputs, the
        probability whether asked or not (only where top_outputs:
        edgespec.runtime.forward_top decides)."""
        step, real = self.last_step(tokens, last_only, "forward_top")
        ids, prob = (step.values[name].numpy()[0, real] for name in TOP_OUTPUTS)
        return TopRows(ids.copy(), prob.copy())

    def forward_dists(
        self, tokens: Sequence[int], sp: SamplingParams, *, last_only: bool = False
    ) -> PassRows:
        """forward's rows as the distributions sampling draws from, from the candidates the
        sampling head reduces them to where they are (only where dists_on_device:
        edgespec.runtime.forward_dists decides); a row the candidates cannot decide copies
        the logits. Rows are read before the runtime's next pass."""
        step, real = self.last_step(tokens, last_only, "forward_dists")
        assert self.sampling_head is not None
        found = self.sampling_head.run(step.values["logits"], sp.temperature)
        passes = self.passes
        copied: list[np.ndarray] = []  # the step's logits, once a row needs them

        def read_row(i: int) -> np.ndarray:
            if not copied:
                if self.passes != passes:
                    raise RuntimeError("a step's rows were read after the runtime's next pass")
                copied.append(np.array(self.read_logits(step)[real], dtype=np.float32))
            return copied[0][i]

        rows = found.rows(real)
        return top_k_of_candidates(rows, read_row, sp) or head_dists(
            rows, read_row, self.n_logits, sp
        )

    def last_step(self, tokens: Sequence[int], last_only: bool, caller: str) -> tuple[Step, slice]:
        """run_step over tokens whose rows are read where they are (forward_top,
        forward_dists): a long catch-up's head first, as prefill chunks."""
        check_room(self, len(tokens))
        if len(tokens) > self.n_batch:
            if not last_only:
                raise ValueError(f"{caller} returns at most n_batch={self.n_batch} rows")
            split = len(tokens) - self.n_batch
            self.forward(tokens[:split], last_only=True)
            tokens = tokens[split:]
        return self.run_step(tokens, 1 if last_only else len(tokens))

    def run(self, tokens: Sequence[int], rows: int) -> np.ndarray:
        """One graph run at n_past; returns the logits of the last `rows` tokens [rows, V]."""
        step, real = self.run_step(tokens, rows)
        return np.array(self.read_logits(step)[real], dtype=np.float32)

    def run_step(self, tokens: Sequence[int], rows: int) -> tuple[Step, slice]:
        """One graph run at n_past; returns its step and which of its output rows hold the
        last max(rows, 1) tokens' (padded steps return every row, the real ones first)."""
        n = len(tokens)
        width = self.padded_width(n)
        # rows=0 (a prefill chunk whose logits nobody reads) still computes one row: the graph
        # has no empty output; the last row is the cheapest choice that keeps shapes static
        wanted = max(rows, 1)
        keep = wanted if width == n else width
        step = self.step(width, keep)
        step.ids[0, :n] = tokens
        step.ids[0, n:] = 0
        step.seqlens_k[0] = self.n_past + width - 1
        whole_cache = step.graph_id != NO_GRAPH
        step.total[...] = self.cache_len if whole_cache else self.n_past + width
        self.launch(step)
        if self.kept is not None:  # the real rows come first; padding rows are dropped
            self.kept.write(self.n_past, step.values[HIDDEN_STATES].numpy()[0, :n])
        self.n_past += n
        return step, slice(n - wanted, n) if width != n else slice(0, wanted)

    def open_head(self, path: str):
        """An EAGLE-3 head folder (export/eagle3_onnx.py) whose extract layers are the ones
        this graph outputs (runtimes/onnx_heads.py)."""
        from edgespec.runtimes.onnx_heads import OnnxEagleHead, check_head_fits, read_head_json

        folder = Path(path)
        info = read_head_json(folder)
        check_head_fits(folder, info, self)
        head = OnnxEagleHead(folder, self, info, [without_cuda_graph(p) for p in self.providers])
        self.keep_features()
        return head

    def keep_features(self) -> None:
        """From now on keep every pass's hidden_states rows by position (open_head)."""
        if not self.hidden_width:
            raise ValueError(
                f"{self.path.name} outputs no hidden states; export it with hidden_layers"
            )
        if self.kept is None:
            self.kept = KeptFeatures(self.cache_len, self.hidden_width)

    def features(self, start: int, end: int) -> np.ndarray:
        """The graph's hidden_states rows at cache positions start..end-1 (Runtime.features)."""
        return kept_rows(self.kept, start, end, self.n_past)

    def capture_graphs(self, shapes: Iterable[tuple[int, int]]) -> int:
        """Run once each step shape (width, rows returned) this session captures and has not
        run, at n_past, then roll back: a graph is captured on its first run, and a request
        would otherwise pay each capture (0.44 s for the first, about 80 ms a width after).
        Returns how many were captured."""
        n_past = self.n_past
        todo = [
            (width, rows)
            for width, rows in dict.fromkeys(shapes)
            if self.graph_id(width, rows) != NO_GRAPH
            and (width, rows) not in self.steps
            and n_past + width <= self.n_ctx
        ]
        for width, rows in todo:
            self.run_step([0] * width, rows)
            self.rollback(n_past)
        return len(todo)

    def padded_width(self, n: int) -> int:
        n = max(n, self.min_width)
        return n + -n % self.row_multiple

    def rollback(self, n_past: int) -> None:
        if not 0 <= n_past <= self.n_past:
            raise ValueError(f"cannot roll back to {n_past}: the cache holds {self.n_past}")
        self.n_past = n_past  # entries beyond n_past are ignored, then overwritten

    def reset(self) -> None:
        self.n_past = 0

    # --- steps and bindings -----------------------------------------------------------------

    def step(self, width: int, rows: int) -> Step:
        step = self.steps.get((width, rows))
        if step is None:
            step = self.bind_step(width, rows)
            if width <= max(CACHED_WIDTHS, self.max_graph_width):
                self.steps[(width, rows)] = step
        return step

    def bind_step(self, width: int, rows: int) -> Step:
        ort = self.ort
        binding = self.session.io_binding()
        ids = np.zeros((1, width), np.int64)
        seqlens_k = np.zeros(1, np.int32)
        total = np.zeros((), np.int32)
        logits_start = np.array([width - rows], np.int64)
        values: dict[str, Any] = {}
        graph_id = self.graph_id(width, rows)
        # the two scalars are read on the host by their kernels: bound in host memory
        host: list[tuple[str, np.ndarray]] = [("total_sequence_length", total),
                                              ("logits_start", logits_start)]  # fmt: skip
        for name, array in host:
            values[name] = ort.OrtValue.ortvalue_from_numpy(array)
        device: list[tuple[str, np.ndarray]] = [("input_ids", ids), ("seqlens_k", seqlens_k)]
        for name, array in device:
            if self.on_cuda:
                values[name] = ort.OrtValue.ortvalue_from_shape_and_type(
                    array.shape, array.dtype, "cuda", 0
                )
            else:
                values[name] = ort.OrtValue.ortvalue_from_numpy(array)
        logits = None if self.on_cuda else np.empty((1, rows, self.n_logits), np.float32)
        values["logits"] = self.output_value((1, rows, self.n_logits), np.float32, logits)
        for name, dtype in TOP_OUTPUTS.items() if self.top_outputs else ():
            values[name] = self.output_value((1, rows), dtype)
        if self.hidden_width:
            hidden_shape = (1, width, self.hidden_width)
            values[HIDDEN_STATES] = self.output_value(hidden_shape, np.float32)
        for name, value in values.items():
            if name == "logits" or name in TOP_OUTPUTS or name == HIDDEN_STATES:
                binding.bind_ortvalue_output(name, value)
            else:
                binding.bind_ortvalue_input(name, value)
        for key, value in self.kv.items():  # the same buffer in and out: updated in place
            binding.bind_ortvalue_input(f"past_key_values.{key}", value)
            binding.bind_ortvalue_output(f"present.{key}", value)
        return Step(width, rows, ids, seqlens_k, total, logits_start, logits, values, binding,
                    graph_id)  # fmt: skip

    def output_value(self, shape: tuple[int, ...], dtype: type, host: np.ndarray | None = None):
        """An OrtValue to bind an output to: on the device (CUDA), else over a host array."""
        if self.on_cuda:
            return self.ort.OrtValue.ortvalue_from_shape_and_type(shape, dtype, "cuda", 0)
        array = np.empty(shape, dtype) if host is None else host
        return self.ort.OrtValue.ortvalue_from_numpy(array)

    def graph_id(self, width: int, rows: int) -> int:
        return captured_graph_id(width, rows, self.max_graph_width) if self.cuda_graph else NO_GRAPH

    def launch(self, step: Step) -> None:
        if self.on_cuda:  # device buffers at fixed addresses: copy the host values in
            step.values["input_ids"].update_inplace(step.ids)
            step.values["seqlens_k"].update_inplace(step.seqlens_k)
        options = self.run_options.get(step.graph_id)
        if options is None:
            options = self.run_options[step.graph_id] = self.ort.RunOptions()
            if self.cuda_graph:  # -1: run this width uncaptured
                options.add_run_config_entry("gpu_graph_id", str(step.graph_id))
        self.session.run_with_iobinding(step.binding, options)
        self.passes += 1

    def read_logits(self, step: Step) -> np.ndarray:
        if step.logits is not None:
            return step.logits[0]
        return step.values["logits"].numpy()[0]


def require_cuda_provider(session: Any, where: object) -> None:
    """Refuse a session the CUDA EP did not take: a GPU measurement on it would time the CPU."""
    if "CUDAExecutionProvider" not in session.get_providers():
        raise EdgespecError(
            f"{where}: ONNX Runtime's CUDA execution provider did not load (see the log above)"
        )


def preload_cuda_libraries(ort) -> None:
    """Load CUDA and cuDNN from pip's nvidia-* packages (PyTorch's, say) when the system has
    none: onnxruntime-gpu looks for them only on the library path otherwise."""
    preload = getattr(ort, "preload_dlls", None)  # onnxruntime-gpu >= 1.21
    if preload is None or "CUDAExecutionProvider" not in ort.get_available_providers():
        return
    try:
        preload()
    except Exception as e:  # noqa: BLE001 - best effort: the session reports what is missing
        log.info("could not preload CUDA libraries from nvidia packages: %s", e)


def captured_graph_id(width: int, rows: int, max_graph_width: int) -> int:
    """The CUDA graph a step of `width` tokens returning its last `rows` rows is captured as,
    each shape its own: the steps that repeat. Every row of up to max_graph_width tokens
    (decode and verify steps) is graph `width`; the last row of up to LAST_ROW_GRAPH_WIDTH
    (a draft's re-forward) graph max_graph_width + width; anything else (prefill and
    catch-up chunks) runs uncaptured (NO_GRAPH)."""
    if rows == width <= max_graph_width:
        return width
    if rows == 1 and width <= LAST_ROW_GRAPH_WIDTH:
        return max_graph_width + width
    return NO_GRAPH


def provider_name(provider: str | tuple[str, dict]) -> str:
    return provider if isinstance(provider, str) else provider[0]


def with_cuda_graph(provider: str | tuple[str, dict]) -> str | tuple[str, dict]:
    if provider_name(provider) != "CUDAExecutionProvider":
        return provider
    options = {} if isinstance(provider, str) else dict(provider[1])
    return ("CUDAExecutionProvider", {**options, "enable_cuda_graph": "1"})


def without_cuda_graph(provider: str | tuple[str, dict]) -> str | tuple[str, dict]:
    if isinstance(provider, str):
        return provider
    name, options = provider
    return (name, {k: v for k, v in options.items() if k != "enable_cuda_graph"})


def kv_dtype(session) -> type:
    kind = next(i.type for i in session.get_inputs() if i.name.startswith("past_key_values."))
    return np.float16 if kind == "tensor(float16)" else np.float32
