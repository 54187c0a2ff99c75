"""A sampled step's logits reduced where they are: each row's likeliest columns, not [rows, V].

On a GPU a verify pass takes milliseconds, and a sampled step used to copy every row's
logits to the host ([k + 1, 151,936] float32: 3 MB at k = 4) and reduce them there. The
sampling head is a second ONNX graph without weights, run on the pass's logits in device
memory: each row's CANDIDATES + 1 largest logits with their columns, and log-sum-exp of the
row over the temperature. sampling.candidate_dist turns those into the row's distribution
where top-k, top-p or min-p confine it to the candidates (and says where they do not: the
row's logits are then copied as before).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from edgespec.sampling import (
    PassRows,
    SamplingParams,
    SpareNuclei,
    TokenDist,
    candidate_dist,
    spare_gumbel_maxes,
    spare_min_p_dist,
    spare_min_p_supports,
    supports_race,
    token_dist,
    top_k,
    top_k_rows_of,
)

CANDIDATES = 128  # columns a row's distribution may draw from without its whole row (top-k <= this)
OPSET = 17
MAX_BINDINGS = 64  # logits buffers the head keeps bound (a runtime caches 17 widths and so)


@dataclass(frozen=True)
class Columns:
    """Each row's m + 1 largest logits (values [rows, m + 1] float32) and their columns (ids
    int64), in any order: llama.cpp's backend top-k sampler hands them over unsorted, and
    the spare rules need no order (the smallest is the spare)."""

    values: np.ndarray
    ids: np.ndarray


@dataclass(frozen=True)
class Candidates(Columns):
    """A pass's rows as the head returns them: Columns with values [rows, CANDIDATES + 1]
    descending, and each row's log-sum-exp over the temperature."""

    lse: np.ndarray  # [rows] float32

    def rows(self, which: slice) -> Candidates:
        return Candidates(self.values[which], self.ids[which], self.lse[which])


def head_model(n_columns: int, candidates: int = CANDIDATES) -> bytes:
    """The head's graph: logits [1, rows, n_columns] float32 and inv_temperature [1] in;
    values, ids [1, rows, candidates + 1] and lse [1, rows] out. lse is computed as
    max + log(sum(exp(z - max))): a sum of exp(z) alone overflows at low temperatures.

    No ReduceMax over the row: on ONNX Runtime's CUDA EP it runs cudnnReduceTensor, slow on a
    few long rows (export/onnx_export.py first_max). TopK's first value is the row's largest
    logit, and z = logit * inv_temperature (> 0) keeps the order under rounding, so that
    value times inv_temperature is max(z) exactly. TopK runs one thread block per row
    (RadixTopK) and ReduceSum ONNX Runtime's own row kernels: neither slows with the rows."""
    from onnx import TensorProto, helper

    rows = "rows"
    k = min(candidates + 1, n_columns)
    nodes = [
        helper.make_node("TopK", ["logits", "k"], ["values", "ids"], axis=-1, largest=1, sorted=1),
        helper.make_node("Mul", ["logits", "inv_temperature"], ["z"]),  # [1, rows, n_columns]
        helper.make_node("Slice", ["values", "zero", "one", "last_axis"], ["largest"]),
        helper.make_node("Mul", ["largest", "inv_temperature"], ["z_max"]),  # [1, rows, 1]
        helper.make_node("Sub", ["z", "z_max"], ["shifted"]),
        helper.make_node("Exp", ["shifted"], ["e"]),
        helper.make_node("ReduceSum", ["e", "last_axis"], ["total"], keepdims=0),
        helper.make_node("Log", ["total"], ["log_total"]),
        helper.make_node("Squeeze", ["z_max", "last_axis"], ["z_max_row"]),
        helper.make_node("Add", ["log_total", "z_max_row"], ["lse"]),
    ]
    graph = helper.make_graph(
        nodes,
        "edgespec_sampling_head",
        [
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, rows, n_columns]),
            helper.make_tensor_value_info("inv_temperature", TensorProto.FLOAT, [1]),
        ],
        [
            helper.make_tensor_value_info("values", TensorProto.FLOAT, [1, rows, k]),
            helper.make_tensor_value_info("ids", TensorProto.INT64, [1, rows, k]),
            helper.make_tensor_value_info("lse", TensorProto.FLOAT, [1, rows]),
        ],
        initializer=[
            helper.make_tensor("k", TensorProto.INT64, [1], [k]),
            helper.make_tensor("last_axis", TensorProto.INT64, [1], [-1]),
            helper.make_tensor("zero", TensorProto.INT64, [1], [0]),
            helper.make_tensor("one", TensorProto.INT64, [1], [1]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8  # what onnxruntime 1.20+ reads
    return model.SerializeToString()


def largest_first(values: np.ndarray, ids: np.ndarray) -> Candidates:
    """A device's columns ([rows, m] values and their ids, in any order: llama.cpp's top-k
    sampler gives them unsorted) sorted largest first (ties as given), as candidate_dist
    reads them; no log-sum-exp."""
    order = np.argsort(-values, axis=1, kind="stable")
    values, ids = np.take_along_axis(values, order, 1), np.take_along_axis(ids, order, 1)
    return Candidates(values, ids, np.full(len(values), np.nan, dtype=np.float32))


def head_dists(
    found: Candidates, read_row: Callable[[int], np.ndarray], n_columns: int, sp: SamplingParams
) -> PassRows:
    """i -> row i's distribution (sampling.token_dist), from its candidates where they decide
    it (candidate_dist), else from read_row(i), the row's logits copied to the host."""

    def dist(i: int) -> TokenDist:
        lse = float(found.lse[i])
        row = candidate_dist(found.values[i], found.ids[i], lse, n_columns, sp)
        return token_dist(read_row(i), sp) if row is None else row

    return PassRows(len(found.values), dist)


def top_k_of_candidates(
    found: Columns, read_row: Callable[[int], np.ndarray], sp: SamplingParams
) -> PassRows | None:
    """Every row's top-k distribution at once (sampling.top_k_rows_of), as token_dist gives each:
    the top k of its m + 1 columns (in any order) by z = value / temperature, ties by the
    lowest id, or, for a row whose two smallest columns tie in z (the smallest is the
    spare: a token left out may tie with a kept one), or that holds a NaN, the top k of
    its logits (read_row). None where top-k is off or beyond the m (then row by row:
    head_dists)."""
    temperature = np.float32(sp.temperature)
    z = np.divide(found.values, temperature, dtype=np.float32)  # the host's row / temperature
    if not 0 < sp.top_k < z.shape[1]:
        return None
    smallest = np.partition(z, 1, axis=1)
    tied = ~(smallest[:, 1] > smallest[:, 0]) | np.isnan(z).any(axis=1)
    ids = found.ids  # the spare is never among the top k where it is alone at the bottom
    top = np.lexsort((ids, -z), axis=-1)[:, : sp.top_k]  # z descending, then ids ascending
    ids, z = np.take_along_axis(ids, top, 1), np.take_along_axis(z, top, 1)
    by_id = np.argsort(ids, axis=1)
    ids, z = np.take_along_axis(ids, by_id, 1), np.take_along_axis(z, by_id, 1)
    for i in np.flatnonzero(tied).tolist():
        ids[i], z[i] = top_k(np.asarray(read_row(i), dtype=np.float32), sp.top_k, temperature)
    return top_k_rows_of(ids, z, sp)


# the columns a row is cut to where top-k is off or above CANDIDATES (spare_columns): enough
# that the spare decides nearly every real row's token (docs/decisions.md)
WIDE_COLUMNS = 4096


def spare_columns(sp: SamplingParams, n_columns: int) -> int:
    """How many of a row's largest logits a device hands over for a sampled step, the spare
    included (0: none, the logits): top_k + 1 up to CANDIDATES; else WIDE_COLUMNS + 1 for
    temperature alone and top-p without min-p (drawn by their Gumbel-max token: the rejection
    sampler's p is the whole row, or a nucleus whose edge the spare may not decide), min-p
    and a top-k up to WIDE_COLUMNS."""
    if sp.greedy:
        return 0
    if 0 < sp.top_k <= CANDIDATES:
        return sp.top_k + 1 if sp.top_k < n_columns else 0
    if sp.top_k > WIDE_COLUMNS or 2 * WIDE_COLUMNS >= n_columns or sp.host_only:
        return 0
    raced = sp.top_k == 0 and sp.min_p <= 0.0  # temperature alone, or top-p without min-p:
    # the Gumbel race decides a nucleus's edge the spare leaves open
    return 0 if raced and sp.sampler != "gumbel" else WIDE_COLUMNS + 1


def spare_rows(
    found: Columns, read_row: Callable[[int], np.ndarray], n_columns: int, sp: SamplingParams
) -> PassRows:
    """A step's rows from the columns spare_columns asked for (in any order, no
    log-sum-exp): top-k's by top_k_of_candidates; with top-k off, top-p's nuclei by
    sampling.SpareNuclei, min-p's supports by sampling.spare_min_p_supports, temperature
    alone's Gumbel-max tokens by sampling.spare_gumbel_maxes, all rows at once; a row they
    cannot decide from its logits (read_row). Temperature alone's distribution itself (the
    rejection sampler's p) is the row's: its logits."""
    if sp.top_k:
        rows = top_k_of_candidates(found, read_row, sp)
        return rows or head_dists(largest_first(found.values, found.ids), read_row, n_columns, sp)
    values, ids = found.values, found.ids
    nuclei = SpareNuclei(values, ids, n_columns, sp) if sp.top_p < 1.0 else None
    alone = nuclei is None and sp.min_p <= 0.0

    def dist(i: int) -> TokenDist:
        if nuclei is not None:
            row = nuclei.dist(i)
        else:
            row = None if alone else spare_min_p_dist(values[i], ids[i], sp)
        return token_dist(read_row(i), sp) if row is None else row

    def maxes(seed: int, position: int) -> np.ndarray:
        if nuclei is not None:
            return nuclei.gumbel_maxes(seed, position)
        if alone:
            return spare_gumbel_maxes(values, ids, n_columns, sp, seed, position)
        _, sizes, kept_ids, probs = spare_min_p_supports(values, ids, sp)
        return supports_race(kept_ids, probs, sizes, seed, position)

    return PassRows(len(values), dist, maxes)


class SamplingHead:
    """The head as a session of its own on the providers of the model it serves (without
    CUDA graphs: its shapes change with the pass width)."""

    def __init__(
        self,
        ort: Any,
        n_columns: int,
        providers: Sequence[str | tuple[str, dict]],
        candidates: int = CANDIDATES,
    ) -> None:
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1  # a few ops over [rows, V]; on a GPU, none on the CPU
        self.ort = ort
        self.n_columns = n_columns
        self.session = ort.InferenceSession(
            head_model(n_columns, candidates), options, providers=list(providers)
        )
        self.inv_temperature = np.zeros(1, np.float32)
        self.temperature_value = ort.OrtValue.ortvalue_from_numpy(self.inv_temperature)
        self.bindings: dict[int, tuple[Any, Any]] = {}  # id(logits) -> (logits, its binding)

    def run(self, logits: Any, temperature: float) -> Candidates:
        """Candidates of logits (an OrtValue [1, rows, n_columns], on the device or the
        host); only they are copied to the host."""
        self.inv_temperature[0] = 1.0 / np.float32(temperature)  # temperature_value's memory
        binding = self.binding_for(logits)
        self.session.run_with_iobinding(binding)
        values, ids, lse = (np.array(v.numpy()[0]) for v in binding.get_outputs())
        return Candidates(values, ids, lse)

    def binding_for(self, logits: Any) -> Any:
        """The head bound to a logits buffer, made once: a runtime's steps keep their
        buffers (one per width), so a step binds nothing."""
        held = self.bindings.get(id(logits))
        if held is None:
            if len(self.bindings) >= MAX_BINDINGS:  # uncached widths: each a new buffer
                self.bindings.clear()
            binding = self.session.io_binding()
            binding.bind_ortvalue_input("logits", logits)
            binding.bind_ortvalue_input("inv_temperature", self.temperature_value)
            for name in ("values", "ids", "lse"):
                binding.bind_output(name, "cpu")
            held = self.bindings[id(logits)] = (logits, binding)  # logits held: ids stay unique
        return held[1]
