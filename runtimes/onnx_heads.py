"""A trained draft head (EAGLE-3) on ONNX Runtime, beside an OnnxRuntime target that outputs
the head's extract layers' inputs (hidden_states): the DraftHead protocol over a head folder
written by export/eagle3_onnx.py (encode.onnx, model.onnx, head.json).

The head keeps its own cache of one layer, bound in place as the target's is (the same buffer
in and out of GroupQueryAttention), so rollback is only a shorter seqlens_k. Its output
columns are its draft vocabulary; head.json's d2t places them at their target ids, every
other id at -inf, as llama.cpp's eagle3 graph does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgespec.errors import ModelFileError
from edgespec.plumbing.jsonfile import read_json_object
from edgespec.plumbing.schema import Field, check_fields, shown
from edgespec.runtimes.model_folder import is_id
from edgespec.runtimes.shared import HeadMismatchError, check_head_fit, zeroed_value

# a head folder's files (export/eagle3_onnx.py writes them; edgespec.pair knows HEAD_JSON)
HEAD_JSON = "head.json"
ENCODE_FILE = "encode.onnx"
DECODE_FILE = "model.onnx"


HEAD_JSON_MAX_BYTES = 64 << 20  # d2t of a 262,144-token vocabulary is ~2 MiB of text
FIX = "export the head with its target: edgespec export --format onnx --head HEAD"
# head.json as read (export/eagle3_onnx.py HeadInfo): types and bounds before any size is used
HEAD_JSON_FIELDS = {
    "layers": Field("list"),
    "n_embd": Field("int", min=1, max=1 << 16),
    "n_embd_tgt": Field("int", min=1, max=1 << 16),
    "n_head": Field("int", min=1, max=4096),
    "n_kv_head": Field("int", min=1, max=4096),
    "head_dim": Field("int", min=1, max=4096),
    "n_vocab": Field("int", min=1, max=1 << 24),
    "n_out": Field("int", min=1, max=1 << 24),
    "d2t": Field("list", nullable=True),
    "context_length": Field("int", min=1, max=1 << 24),
    "compute": Field("str", choices=("fp32", "fp16")),
}


def read_head_json(folder: Path) -> dict:
    """head.json, every field checked (types, bounds, d2t's ids within the vocabulary)."""
    path = folder / HEAD_JSON
    try:
        info = read_json_object(path, HEAD_JSON_MAX_BYTES)
    except FileNotFoundError:
        raise ModelFileError(
            f"{folder.name} is not an ONNX draft head (no readable {HEAD_JSON}); {FIX}"
        ) from None
    except (OSError, ValueError) as e:
        why = f"cannot be read ({e.strerror or e})" if isinstance(e, OSError) else str(e)
        raise ModelFileError(f"{path} {why}; {FIX}") from None
    check_fields(info, HEAD_JSON_FIELDS, str(path), FIX, ModelFileError)
    if not all(is_id(i) for i in info["layers"]):
        raise ModelFileError(f"{path}: field 'layers' must be a list of layer numbers; {FIX}")
    check_d2t(path, info["d2t"], info["n_out"], info["n_vocab"])
    return info


def check_d2t(path: Path, d2t: list | None, n_out: int, n_vocab: int) -> None:
    """Each output column's target id: n_out of them, each a token id of the vocabulary."""
    if d2t is None:
        if n_out != n_vocab:
            raise ModelFileError(
                f"{path}: {n_out:,} output columns but no d2t for a vocabulary of "
                f"{n_vocab:,}; {FIX}"
            )
        return
    if len(d2t) != n_out:
        raise ModelFileError(f"{path}: d2t holds {len(d2t):,} ids for {n_out:,} columns; {FIX}")
    bad = next((i for i in d2t if not (is_id(i) and i < n_vocab)), None)
    if bad is not None or len(d2t) and len(set(d2t)) != len(d2t):
        what = "repeats an id" if bad is None else f"holds {shown(bad)}"
        raise ModelFileError(
            f"{path}: d2t {what}, not distinct token ids from 0 to {n_vocab - 1:,}; {FIX}"
        )


def check_head_fits(folder: Path, info: dict, target: Any) -> None:
    """Refuse a head folder whose extract layers, hidden size, vocabulary or compute are
    not the target's (target: an OnnxRuntime)."""
    name, target_name = folder.name, target.path.name
    if info.get("layers") != target.info.get("hidden_layers"):
        raise HeadMismatchError(
            f"{name} extracts layers {info.get('layers')} but {target_name} outputs the inputs "
            f"of layers {target.info.get('hidden_layers')}; export the target with this head"
        )
    check_head_fit(
        name, target_name,
        hidden=info.get("n_embd_tgt"), n_embd_tgt=int(target.info["n_embd"]),
        layers=info["layers"], n_layer_tgt=int(target.info["n_layer"]),
        n_vocab=info["n_vocab"], n_vocab_tgt=target.n_vocab,
    )  # fmt: skip
    if info.get("compute") != target.info.get("compute"):
        raise HeadMismatchError(
            f"{name} computes in {info.get('compute')} but {target_name} in "
            f"{target.info.get('compute')}; export the head with its target"
        )


def check_head_sizes(folder: Path, info: dict, decoder, need: int, on_cuda: bool) -> None:
    """head.json's KV shape and output columns must be the decoder graph's, and its cache
    (need bytes) must fit in free memory on the CPU, before it is allocated."""
    from edgespec.runtimes.gguf_meta import available_memory

    key = {i.name: i.shape for i in decoder.get_inputs()}.get("past_key_values.0.key") or []
    logits = {o.name: o.shape for o in decoder.get_outputs()}.get("logits") or []
    declared = {
        "n_kv_head": key[1] if len(key) == 4 else None,
        "head_dim": key[3] if len(key) == 4 else None,
        "n_out": logits[-1] if logits else None,
    }
    for name, graph in declared.items():
        if isinstance(graph, int) and info[name] != graph:
            raise ModelFileError(
                f"{folder / HEAD_JSON} says {name} {info[name]:,} but the graph has {graph:,}; "
                f"the folder mixes files of different heads; {FIX}"
            )
    free = available_memory()
    if not on_cuda and free is not None and need > free:
        raise ModelFileError(
            f"the draft head {folder} needs {need / 2**30:,.1f} GiB of KV cache and "
            f"{free / 2**30:,.1f} GiB of memory is free; lower --n-ctx (or free memory)"
        )


CACHED_ROWS = 17  # a proposal's one row, a catch-up of up to a verify pass's rows


@dataclass
class HeadStep:
    """The decoder bound for one row count: host arrays the OrtValues share, in and out."""

    ids: np.ndarray  # [1, n] int64
    g: np.ndarray  # [1, n, n_embd] float32
    seqlens_k: np.ndarray  # [1] int32: positions after the pass, minus 1
    total: np.ndarray  # [] int32
    logits: np.ndarray  # [1, 1, n_out] float32: the last row's
    prenorm: np.ndarray  # [1, 1, n_embd] float32
    values: list  # the OrtValues over them, alive while bound
    binding: Any


def bind_step(ort, decoder, n: int, n_embd: int, n_out: int, kv: dict) -> HeadStep:
    arrays: dict[str, np.ndarray] = {
        "input_ids": np.zeros((1, n), np.int64),
        "g": np.zeros((1, n, n_embd), np.float32),
        "seqlens_k": np.zeros(1, np.int32),
        "total_sequence_length": np.zeros((), np.int32),
        "logits_start": np.array([n - 1], np.int64),  # the last row's logits only
        "logits": np.empty((1, 1, n_out), np.float32),
        "prenorm": np.empty((1, 1, n_embd), np.float32),
    }
    binding = decoder.io_binding()
    values = []
    for name, array in arrays.items():
        value = ort.OrtValue.ortvalue_from_numpy(array)  # shares the array's memory
        values.append(value)
        if name in ("logits", "prenorm"):
            binding.bind_ortvalue_output(name, value)
        else:
            binding.bind_ortvalue_input(name, value)
    for kind, value in kv.items():  # the same buffer in and out: updated in place
        binding.bind_ortvalue_input(f"past_key_values.0.{kind}", value)
        binding.bind_ortvalue_output(f"present.0.{kind}", value)
    return HeadStep(arrays["input_ids"], arrays["g"], arrays["seqlens_k"],
                    arrays["total_sequence_length"], arrays["logits"], arrays["prenorm"],
                    values, binding)  # fmt: skip


def open_session(ort, path: Path, opts, providers: list):
    try:
        return ort.InferenceSession(str(path), opts, providers=providers)
    except Exception as e:  # noqa: BLE001 - ORT raises several pybind types for bad files
        raise ModelFileError(
            f"cannot load the draft head's {path.name} in {path.parent.name}: "
            f"{str(e).strip().splitlines()[0][:200]}; export the head again"
        ) from e


class OnnxEagleHead:
    """An EAGLE-3 head's two graphs on the target's providers, with its own KV cache."""

    kind = "eagle"

    def __init__(self, folder: Path, target: Any, info: dict, providers: list) -> None:
        """target: the OnnxRuntime whose hidden states the head reads (it checked the fit);
        providers: the target's, without CUDA graphs (the head's inputs are host arrays)."""
        ort = target.ort
        self.ort, self.path, self.info = ort, folder, info
        self.n_vocab = target.n_vocab
        self.n_ctx = min(target.n_ctx, int(info["context_length"]))
        self.n_batch = target.n_batch
        self.n_embd = int(info["n_embd"])
        self.layers = list(info["layers"])  # the target layers whose inputs it reads
        self.n_past = 0
        d2t = info.get("d2t")
        self.columns = None if d2t is None else np.asarray(d2t, dtype=np.int64)
        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        self.encoder, self.decoder = (
            open_session(ort, folder / name, opts, providers) for name in (ENCODE_FILE, DECODE_FILE)
        )
        shape = (1, int(info["n_kv_head"]), self.n_ctx, int(info["head_dim"]))
        kv_dtype = np.float32 if info["compute"] == "fp32" else np.float16
        check_head_sizes(folder, info, self.decoder, 2 * int(np.prod(shape)) * kv_dtype().itemsize,
                         on_cuda=target.on_cuda)  # fmt: skip
        self.kv = {
            kind: zeroed_value(ort, shape, kv_dtype, target.on_cuda) for kind in ("key", "value")
        }
        self.n_out = int(info["n_out"])
        self.steps: dict[int, HeadStep] = {}  # rows -> the decoder bound for them
        self.run_options = ort.RunOptions()

    def encode(self, features: np.ndarray) -> np.ndarray:
        """features [n, 3 * n_embd_tgt] float32 -> g [n, n_embd] float32 (the fc layer)."""
        x = np.ascontiguousarray(features, dtype=np.float32)[None]
        return self.encoder.run(["g"], {"features": x})[0][0]

    def decode(self, tokens: Sequence[int], g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Append (tokens[i], g[i]) at n_past + i; the last row's logits [n_vocab] (target ids)
        and pre-norm state [n_embd]."""
        n = len(tokens)
        if not 0 < n <= self.n_batch or self.n_past + n > self.n_ctx:
            raise ValueError(
                f"the head holds {self.n_ctx} positions: cannot add {n} at {self.n_past}"
            )
        step = self.step(n)
        step.ids[0] = tokens
        step.g[0] = g
        step.seqlens_k[0] = self.n_past + n - 1
        step.total[...] = self.n_past + n
        self.decoder.run_with_iobinding(step.binding, self.run_options)
        self.n_past += n
        return self.target_logits(step.logits[0, 0]), step.prenorm[0, 0].copy()

    def step(self, n: int) -> HeadStep:
        """The decoder bound for n rows, kept for the few widths a proposal and a short
        catch-up use: binding a pass afresh cost 57 of 110 us on a tiny head (a 2-core CPU),
        more than the run itself."""
        step = self.steps.get(n)
        if step is None:
            step = bind_step(self.ort, self.decoder, n, self.n_embd, self.n_out, self.kv)
            if n <= CACHED_ROWS:
                self.steps[n] = step
        return step

    def target_logits(self, row: np.ndarray) -> np.ndarray:
        """Output columns at their target ids ([n_vocab] float32, a fresh array; -inf where
        no column)."""
        if self.columns is None:
            return np.array(row, dtype=np.float32)
        out = np.full(self.n_vocab, -np.inf, dtype=np.float32)
        out[self.columns] = row
        return out

    def rollback(self, n_past: int) -> None:
        self.n_past = min(self.n_past, n_past)  # later entries are ignored, then overwritten

    def reset(self) -> None:
        self.n_past = 0
