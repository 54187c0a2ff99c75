"""GGUF models through llama-cpp-python's low-level API: one model, one context, one sequence.

The verify step decodes [last, *draft] as one batch and asks llama.cpp for logits of only the
rows it needs; rollback is llama.cpp's sequence removal, so no token is re-evaluated.
"""

from __future__ import annotations

import collections
import ctypes
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import edgespec.plumbing.interrupts as interrupts
from edgespec.errors import ModelFileError
from edgespec.runtime import K_MAX, Runtime, TopRows, VocabInfo, top_of
from edgespec.runtimes.gguf_meta import check_gguf_metadata, mtp_problem
from edgespec.runtimes.llama_heads import HeadFeatures
from edgespec.runtimes.llama_library import (
    check_gguf_file,
    clear_llama_log,
    import_llama_cpp,
    init_backend,
    last_llama_error,
    load_progress,
    one_graph_build,
)
from edgespec.runtimes.llama_vocab import LlamaVocabulary
from edgespec.runtimes.sampling_head import (
    CANDIDATES,
    Columns,
    largest_first,
    spare_columns,
    spare_rows,
)
from edgespec.runtimes.shared import (
    KeptFeatures,
    check_room,
    forward_in_chunks,
)
from edgespec.runtimes.threads import LoadAwareThreads, default_threads
from edgespec.sampling import PassRows, SamplingParams, row_dists

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LlamaOptions:
    """How LlamaCppRuntime runs its passes: the kernels (docs/exactness.md; --exact sets
    edgespec.backends.EXACT_LLAMA) and the batch.

    repack lets llama.cpp repack weights for its CPU GEMM kernels (its "extra buffer types");
    flash_attn None is llama.cpp's choice; a pass that returns all its rows is padded with
    dummy rows (dropped after it) to at least min_width tokens; tiled False turns off ggml's
    tiled K-quant matmul (taken from 8 rows up) through GGML_CPU_TILED_MM, which ggml reads
    once per process: it must be set before the process's first pass (None: as it is).
    n_batch: the most tokens one pass takes (longer prompts are decoded in chunks).
    mtp: load the model's MTP layers where its file has them (for open_mtp; they cost one
    layer's memory, so only where an MTP drafter may run). snapshots: the most tokens one
    rollback cuts cheaply on a recurrent or hybrid model: llama.cpp keeps that many copies
    of its recurrent state (n_rs_seq; 20 MB each on a Qwen3.5-2B), so the longest draft's
    (at least 1: --exact's padded one-token passes). backend_sampling: a pass's rows are
    reduced by llama.cpp's backend top-k sampler where the pass ran, and only each row's
    largest logits are copied to the host, not every logit: its top 2 for a greedy step
    (forward_top), its top-k + 1 or 4,097 for a sampled one (forward_dists,
    sampling_head.spare_columns); llama-cpp-python 0.3.36+."""

    repack: bool = True
    flash_attn: bool | None = None
    min_width: int = 1
    tiled: bool | None = None
    n_batch: int = 512
    mtp: bool = False
    snapshots: int = K_MAX
    backend_sampling: bool = False


@dataclass
class WideOdds:
    """Whether a sampled pass without a small top-k is cut to its rows' largest logits now
    (sampling_head.spare_columns' WIDE_COLUMNS + 1). A wide pass that cannot decide a row
    re-runs for its logits, a whole pass, where a pass it decides saves
    the copy of every logit and the host's work on them (a fifth to a third of a GPU pass):
    so wide passes go on while fewer than MAX_RERUNS of them re-run (a moving average over
    about 8), and after that the logits are read for BACKOFF passes, twice as many each time
    the next wide passes re-run as often (a flat row, a high temperature)."""

    MAX_RERUNS = 0.2
    BACKOFF = 16
    MAX_BACKOFF = 1024
    rate: float = 0.0  # the moving average of re-runs a wide pass
    skip: int = 0  # passes left on the logits
    backoff: int = BACKOFF
    pending: bool = False  # a wide pass was made and not yet judged
    reran: bool = False  # ... and re-ran for a row's logits

    def wide_now(self) -> bool:
        """Whether the next sampled pass is wide (judging the last one first)."""
        if self.pending:
            self.rate += (float(self.reran) - self.rate) / 8
            self.pending = self.reran = False
            if self.rate > self.MAX_RERUNS:
                self.skip, self.rate = self.backoff, self.MAX_RERUNS / 2
                self.backoff = min(2 * self.backoff, self.MAX_BACKOFF)
            elif self.rate < self.MAX_RERUNS / 4:
                self.backoff = self.BACKOFF
        if self.skip:
            self.skip -= 1
            return False
        self.pending = True
        return True


class LlamaCppRuntime(LlamaVocabulary, HeadFeatures, Runtime):
    """The Runtime protocol over a GGUF file."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        n_gpu_layers: int = 0,
        vocab_only: bool = False,
        load_aware_threads: bool = True,
        options: LlamaOptions = LlamaOptions(),
    ) -> None:
        """vocab_only=True reads the tokenizer and metadata only (no weights, no context):
        enough for vocab_info, tokenize, metadata; forward is then unavailable.
        load_aware_threads: each pass runs with a thread fewer per core that other processes
        keep busy (runtimes/threads.py); False keeps n_threads whatever else runs."""
        if options.tiled is not None:
            os.environ["GGML_CPU_TILED_MM"] = "1" if options.tiled else "0"
        self.path = Path(path)
        check_gguf_file(self.path)
        init_backend()
        self.llama = import_llama_cpp()
        n_gpu_layers = self.offloadable(n_gpu_layers)
        # the Runtime attribute: why the MTP layers it declares cannot draft (then not loaded)
        self.mtp_problem: str | None = None
        if not vocab_only:  # a vocab-only load reads no hyperparameters
            meta, tensors = check_gguf_metadata(self.path, n_ctx, on_cpu=n_gpu_layers == 0)
            self.mtp_problem = mtp_problem(self.path, meta, tensors) if options.mtp else None
        self.ctx = None
        self.repack, self.flash_attn = options.repack, options.flash_attn
        self.snapshots = max(1, options.snapshots)
        self.backend_sampling = options.backend_sampling and not vocab_only
        # the Runtime capability: forward_top reads its rows where llama.cpp left them
        self.top_outputs = not vocab_only
        if self.backend_sampling and not hasattr(self.llama, "llama_set_sampler"):
            raise ModelFileError(
                f"{self.path.name}: backend sampling needs llama.cpp's llama_set_sampler, "
                "which this llama-cpp-python lacks; upgrade it to 0.3.36 or later, or drop "
                "--backend-sampling"
            )
        self.top_k_sampler = None  # llama.cpp's backend top-k sampler the context holds
        self.attached = 0  # its columns (0: none)
        self.wide_odds = WideOdds()  # whether a sampled pass is cut to WIDE_COLUMNS now
        self.passes = 0  # decode calls so far: a step's rows are read before the next
        self.min_width = max(1, options.min_width)
        self.n_gpu_layers = n_gpu_layers  # as loaded (0: every layer on the CPU)
        self.model = self.load_model(n_gpu_layers, vocab_only, options.mtp and not self.mtp_problem)
        self.keeps_one_graph = n_gpu_layers != 0 and one_graph_build(
            self.llama.llama_print_system_info(), os.environ
        )  # the Runtime capability
        self.vocab = self.llama.llama_model_get_vocab(self.model)
        self.n_embd = 0 if vocab_only else int(self.llama.llama_model_n_embd(self.model))
        self.n_vocab = int(self.llama.llama_vocab_n_tokens(self.vocab))
        self.n_ctx_train = n_train = self.context_length(vocab_only)
        self.n_ctx = min(n_ctx, n_train) if n_train > 0 else n_ctx
        self.n_batch = min(options.n_batch, self.n_ctx)
        self.n_threads = n_threads or default_threads()
        self.thread_policy = LoadAwareThreads(self.n_threads) if load_aware_threads else None
        self.threads_used: collections.Counter[int] = collections.Counter()  # passes per count
        self.n_past = 0
        self._vocab_info: VocabInfo | None = None
        self._pieces: dict[int, bytes] = {}
        self.threads_now = self.n_threads  # what the context runs with
        self.hidden_states = not vocab_only  # the Runtime capability (open_head)
        self.extracted: list[int] = []  # layers whose input every pass keeps (open_head)
        # the open heads' features: their extract layers, or "mtp" (the final hidden state)
        self.kept_for: object = None
        self.kept: KeptFeatures | None = None  # their rows by position (open_head, open_mtp)
        self.mtp_layers = self.runnable_mtp_layers() if options.mtp and not vocab_only else 0
        self.recurrent = not vocab_only and (
            self.llama.llama_model_is_recurrent(self.model)
            or self.llama.llama_model_is_hybrid(self.model)
        )
        self.max_rollback: int | None = None  # the Runtime capability: any, or (recurrent) this
        self.snapshot_reach = 0  # tokens a rollback may cut now without a replay
        self.marked_state: ctypes.Array | None = None  # the recurrent state at marked_at (mark)
        self.marked_at: int | None = None
        self.marked_size = 0
        if not vocab_only:
            self.ctx = self.new_context()
            self.memory = self.llama.llama_get_memory(self.ctx)
            self.batch = self.llama.llama_batch_init(self.n_batch, 0, 1)
            if self.recurrent:
                self.max_rollback = int(self.llama.llama_n_rs_seq(self.ctx))
            # the tokens the cache holds (the first n_past): replayed where a recurrent
            # state cannot be cut back (rollback)
            self.cached = np.zeros(self.n_ctx + self.min_width, dtype=np.int32)

    # --- loading -------------------------------------------------------------------------

    def offloadable(self, n_gpu_layers: int) -> int:
        """n_gpu_layers, or 0 with a warning where this llama-cpp-python build has no GPU
        back-end: llama.cpp would run every layer on the CPU without a word."""
        if n_gpu_layers != 0 and not self.llama.llama_supports_gpu_offload():
            log.warning(
                "%s: layers were asked for on the GPU, but this llama-cpp-python build has no "
                "GPU back-end, so everything runs on the CPU; `edgespec doctor` says how to "
                "build it with CUDA", self.path.name,
            )  # fmt: skip
            return 0
        return n_gpu_layers

    def load_model(self, n_gpu_layers: int, vocab_only: bool, mtp: bool):
        params = self.llama.llama_model_default_params()
        params.n_gpu_layers = n_gpu_layers
        params.vocab_only = vocab_only
        params.load_mtp = mtp
        params.progress_callback = progress = load_progress(self.llama)
        params.use_extra_bufts = self.repack
        clear_llama_log()
        with interrupts.native_call():  # Ctrl-C stops the load (progress) and is raised here
            model = self.llama.llama_model_load_from_file(str(self.path).encode(), params)
        del progress
        if not model:
            reason = last_llama_error() or "llama.cpp could not read it"
            raise ModelFileError(
                f"cannot load {self.path}: {reason}; the file may be truncated or corrupt "
                "(compare its size and sha256 with the source, or export it again)"
            )
        return model

    def context_length(self, vocab_only: bool) -> int:
        """The context the model was trained for (a vocab-only load has no hyperparameters,
        so it is read from the metadata)."""
        if not vocab_only:
            return int(self.llama.llama_model_n_ctx_train(self.model))
        arch = self.metadata("general.architecture")
        value = self.metadata(f"{arch}.context_length") if arch else None
        return int(value) if value and value.isdigit() else 0

    def new_context(self):
        params = self.llama.llama_context_default_params()
        params.n_ctx = self.n_ctx + self.min_width - 1  # room for padding
        params.n_batch = self.n_batch
        params.n_ubatch = self.n_batch
        params.n_seq_max = 1
        params.n_threads = self.n_threads
        params.n_threads_batch = self.n_threads
        params.no_perf = True
        if self.recurrent:  # state snapshots for the rollback after a verify pass
            params.n_rs_seq = self.snapshots
        if self.backend_sampling:  # a backend sampler takes one row a sequence unless told more
            params.n_outputs_max_per_seq = self.n_batch
        if self.flash_attn is not None:
            on, off = (
                self.llama.LLAMA_FLASH_ATTN_TYPE_ENABLED,
                self.llama.LLAMA_FLASH_ATTN_TYPE_DISABLED,
            )
            params.flash_attn_type = on if self.flash_attn else off
        with interrupts.native_call():
            ctx = self.llama.llama_init_from_model(self.model, params)
        if not ctx:
            raise ModelFileError(
                f"cannot create a llama.cpp context for {self.path} with n_ctx={self.n_ctx}: "
                f"{last_llama_error() or 'out of memory?'}; try a smaller --n-ctx"
            )
        return ctx

    def close(self) -> None:
        if getattr(self, "ctx", None):
            self.llama.llama_batch_free(self.batch)
            self.llama.llama_free(self.ctx)
            self.ctx = None
        if getattr(self, "top_k_sampler", None) is not None:
            self.free_top_k_sampler()  # after the context that held it
        if getattr(self, "model", None):
            self.llama.llama_model_free(self.model)
            self.model = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    # --- the Runtime protocol ---------------------------------------------------------------

    def forward(self, tokens: Sequence[int], *, last_only: bool = False) -> np.ndarray:
        self.attach_top_k(0)  # every column wanted
        return forward_in_chunks(self, tokens, last_only, self.n_batch, self.run)

    @property
    def dists_on_device(self) -> bool:
        return self.top_outputs  # reduced where the rows are, as forward_top's

    def forward_top(
        self, tokens: Sequence[int], *, last_only: bool = False, with_prob: bool = False
    ) -> TopRows:
        """forward's rows as TopRows, reduced where llama.cpp left them (edgespec.runtime.
        forward_top decides): with backend_sampling and no probability asked, from each row's
        two largest logits, found by its backend top-k sampler where the pass ran (the
        larger's column, or where the two tie, the first column holding the maximum in the
        row's logits, np.argmax's, the pass re-run for them); else in llama.cpp's logits
        buffer, not a copy of it (forward's copy of the rows cost ~2% of a GPU's verify pass,
        before the argmax read them again)."""
        if not tokens or len(tokens) > self.n_batch:
            return top_of(self.forward(tokens, last_only=last_only), with_prob)
        if not self.backend_sampling or with_prob:
            return top_of(self.decode_in_place(tokens, last_only), with_prob)
        columns, read_row = self.sampled_pass(tokens, last_only, columns=2)
        found = largest_first(columns.values, columns.ids)
        ids = found.ids[:, 0].copy()
        for i in np.flatnonzero(~(found.values[:, 0] > found.values[:, 1])).tolist():
            ids[i] = int(np.argmax(read_row(i)))
        return TopRows(ids, None)

    def forward_dists(
        self, tokens: Sequence[int], sp: SamplingParams, *, last_only: bool = False
    ) -> PassRows:
        """forward's rows as the distributions sampling draws from (edgespec.runtime.
        forward_dists decides), with backend_sampling reduced by llama.cpp's backend top-k
        sampler where the pass ran, so that only each row's largest logits
        reach the host (sampling_head.spare_columns: with top-k on, its top_k + 1, whose spare
        shows no token left out ties with a kept one; without top-k, its top 4,097, from which
        sampling's spare rules decide the token, min-p's cut or top-p's nucleus). A row they
        cannot decide re-runs the pass for its logits. Without backend_sampling, or while
        WideOdds backs off wide passes, the rows are read in llama.cpp's logits buffer, not
        a copy of it (row_dists given the buffer's validity: copying 5 rows costs ~2% of a
        GPU's verify pass). A catch-up longer than a pass takes the logits."""
        if not tokens or len(tokens) > self.n_batch:
            return row_dists(self.forward(tokens, last_only=last_only), sp)
        columns = self.backend_columns(sp)
        if not columns:
            return self.buffer_rows(tokens, last_only, sp)
        found, read_row = self.sampled_pass(tokens, last_only, columns)
        return spare_rows(found, read_row, self.n_vocab, sp)

    def buffer_rows(self, tokens: Sequence[int], last_only: bool, sp: SamplingParams) -> PassRows:
        """Decode tokens (at most n_batch); their rows as PassRows over llama.cpp's logits
        buffer, valid until the runtime's next pass."""
        logits, passes = self.decode_in_place(tokens, last_only), self.passes
        return row_dists(logits, sp, lambda: self.passes == passes)

    def decode_in_place(self, tokens: Sequence[int], last_only: bool) -> np.ndarray:
        """Decode tokens (at most n_batch) without a sampler; their rows (the last, or all) in
        llama.cpp's logits buffer, not a copy (logits_buffer: valid until the next pass)."""
        check_room(self, len(tokens))
        n_rows = 1 if last_only else len(tokens)
        self.attach_top_k(0)  # the logits, read in llama.cpp's buffer
        self.decode_rows(tokens, n_rows)
        return self.logits_buffer(n_rows)

    def backend_columns(self, sp: SamplingParams) -> int:
        """spare_columns, and none without backend_sampling or while WideOdds backs off wide
        passes."""
        if not self.backend_sampling:
            return 0
        columns = spare_columns(sp, self.n_vocab)
        if columns > CANDIDATES + 1 and not self.wide_odds.wide_now():
            return 0
        return columns

    def sampled_pass(
        self, tokens: Sequence[int], last_only: bool, columns: int
    ) -> tuple[Columns, Callable[[int], np.ndarray]]:
        """Decode tokens (at most n_batch) with the backend top-k sampler of `columns`: each
        row's columns largest logits, and read_row(i), row i's logits, for a row they cannot
        decide: the pass re-run without the sampler (once for every row), before the
        runtime's next pass."""
        check_room(self, len(tokens))
        start, n_rows = self.n_past, 1 if last_only else len(tokens)
        self.attach_top_k(columns)
        self.decode_rows(tokens, n_rows)
        found, passes = self.read_columns(len(tokens), n_rows), self.passes
        copied: list[np.ndarray] = []  # the pass's logits, once a row needs them

        def read_row(i: int) -> np.ndarray:
            if not copied:
                if self.passes != passes:
                    raise RuntimeError("a step's rows were read after the runtime's next pass")
                if columns > CANDIDATES + 1:
                    self.wide_odds.reran = True
                self.rollback(start)  # the same tokens again, every column this time
                copied.append(self.forward(tokens, last_only=last_only))
            return copied[0][i]

        return found, read_row

    def attach_top_k(self, columns: int) -> None:
        """Give the context a backend top-k sampler of `columns`, or none (0): each pass then
        returns those columns a row, or the logits. A sampler is made for each attachment
        (llama.cpp initializes one on its back-end once) and freed once detached."""
        if columns == self.attached:
            return
        sampler = None
        if columns:
            sampler = self.llama.llama_sampler_chain_init(
                self.llama.llama_sampler_chain_default_params()
            )
            self.llama.llama_sampler_chain_add(
                sampler, self.llama.llama_sampler_init_top_k(columns)
            )
        if not self.llama.llama_set_sampler(self.ctx, 0, sampler):
            raise RuntimeError(f"llama.cpp refused a backend top-k sampler of {columns} columns")
        self.free_top_k_sampler()
        self.top_k_sampler, self.attached = sampler, columns

    def free_top_k_sampler(self) -> None:
        """Free the top-k sampler the context no longer holds (it only borrowed it)."""
        if self.top_k_sampler is not None:
            self.llama.llama_sampler_free(self.top_k_sampler)
            self.top_k_sampler = None

    def read_columns(self, n_tokens: int, n_rows: int) -> Columns:
        """The attached top-k sampler's columns for the last n_rows of the n_tokens just
        decoded, as it gives them (in no order: the spare rules need none): values and ids
        [n_rows, columns]."""
        columns, lib = self.attached, self.llama
        values = np.empty((n_rows, columns), dtype=np.float32)
        ids = np.empty((n_rows, columns), dtype=np.int64)
        for row, i in enumerate(range(n_tokens - n_rows, n_tokens)):
            count = int(lib.llama_get_sampled_candidates_count_ith(self.ctx, i))
            n_logits = int(lib.llama_get_sampled_logits_count_ith(self.ctx, i))
            if count != columns or n_logits != count:
                raise RuntimeError(f"llama.cpp's top-k sampler gave {count} of {columns} columns")
            logits = lib.llama_get_sampled_logits_ith(self.ctx, i)
            found = lib.llama_get_sampled_candidates_ith(self.ctx, i)
            values[row] = np.ctypeslib.as_array(logits, shape=(count,))
            ids[row] = np.ctypeslib.as_array(found, shape=(count,))
        return Columns(values, ids)

    def run(self, tokens: Sequence[int], rows: int) -> np.ndarray:
        """Decode tokens at n_past; logits of the last `rows` of them: [rows, V]."""
        self.decode_rows(tokens, rows)
        return self.read_logits(rows)

    def decode_rows(self, tokens: Sequence[int], rows: int) -> None:
        """Decode tokens at n_past with outputs for the last `rows` of them."""
        n = len(tokens)
        pad = max(self.min_width - n, 0) if rows == n else 0
        if pad and n + pad <= self.n_batch:
            # the same kernels for every width: dummy rows after the real ones (causal
            # attention keeps them out of the real rows), then dropped from the cache
            self.decode([*tokens, *[tokens[-1]] * pad], all_rows=False, last_row=False, real=n)
            self.rollback(self.n_past - pad)
            return
        self.decode(tokens, all_rows=rows == n, last_row=rows > 0)

    def decode(
        self, tokens: Sequence[int], *, all_rows: bool, last_row: bool, real: int = 0
    ) -> None:
        """real > 0: only the first `real` tokens' logits are wanted (the rest are padding)."""
        b = self.batch
        n = len(tokens)
        for i, token in enumerate(tokens):
            b.token[i] = int(token)
            b.pos[i] = self.n_past + i
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = 0
            b.logits[i] = all_rows or (last_row and i == n - 1) or i < real
        b.n_tokens = n
        self.cached[self.n_past : self.n_past + n] = tokens
        self.choose_threads()
        with interrupts.native_call():
            status = self.llama.llama_decode(self.ctx, b)
        self.passes += 1
        if status != 0:
            raise RuntimeError(f"llama_decode failed with status {status} at n_past={self.n_past}")
        if self.kept is not None:
            self.keep_states(n)
        self.n_past += n
        # a recurrent state goes back through the snapshots of this pass's rows (but its
        # first), once: llama.cpp accepts cuts past them and gives a stale state there
        if self.recurrent:
            self.snapshot_reach = min(n - 1, self.max_rollback or 0)

    def choose_threads(self) -> None:
        """Threads for this pass (--exact: the same logits at any count; docs/exactness.md)."""
        n = self.thread_policy.now() if self.thread_policy else self.n_threads
        if n != self.threads_now:
            self.llama.llama_set_n_threads(self.ctx, n, n)
            log.debug("%s: %d threads (other work holds cores)", self.path.name, n)
            self.threads_now = n
        self.threads_used[n] += 1

    def read_logits(self, n_rows: int) -> np.ndarray:
        """The rows llama.cpp just computed, copied out of its buffer: [n_rows, V] float32."""
        return self.logits_buffer(n_rows).copy()

    def logits_buffer(self, n_rows: int) -> np.ndarray:
        """The rows llama.cpp just computed, in its own buffer (valid until the next pass)."""
        ptr = self.llama.llama_get_logits(self.ctx)
        return np.ctypeslib.as_array(ptr, shape=(n_rows, self.n_vocab))

    def rollback(self, n_past: int) -> None:
        if not 0 <= n_past <= self.n_past:
            raise ValueError(f"cannot roll back to {n_past}: the cache holds {self.n_past}")
        if n_past < self.n_past:
            beyond = self.recurrent and self.n_past - n_past > self.snapshot_reach
            if beyond or not self.llama.llama_memory_seq_rm(self.memory, 0, n_past, -1):
                self.rebuild(n_past)
            self.snapshot_reach = 0
            self.n_past = n_past

    def mark(self) -> None:
        """Keep a copy of the recurrent state at n_past (Runtime.mark): llama.cpp's partial
        sequence state, the recurrent layers' alone (a small copy beside a KV cache's). A cut
        below the mark never goes through a snapshot (they reach back to the last pass's
        first row, at or after the mark), so it rebuilds from nothing and forgets the mark."""
        if not self.recurrent or self.ctx is None:
            return
        flags = self.llama.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY
        size = int(self.llama.llama_state_seq_get_size_ext(self.ctx, 0, flags))
        if self.marked_state is None or len(self.marked_state) < size:
            self.marked_state = (ctypes.c_uint8 * size)()
        written = self.llama.llama_state_seq_get_data_ext(
            self.ctx, self.marked_state, size, 0, flags
        )
        self.marked_size = size
        self.marked_at = self.n_past if written == size else None

    def rebuild(self, n_past: int) -> None:
        """The cache cut back to n_past where llama.cpp could not cut it: from the mark where
        it is at or before n_past (the state put back, the KV cache cut there, the tokens
        after it re-read), else from nothing (replay)."""
        at, state = self.marked_at, self.marked_state
        self.marked_at = None  # used once: the state moves on from it
        if at is None or state is None or at > n_past:
            self.replay(n_past)
            return
        flags = self.llama.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY
        size = self.marked_size  # the buffer may be larger: an earlier, larger state's
        restored = self.llama.llama_state_seq_set_data_ext(self.ctx, state, size, 0, flags)
        if not restored or not self.llama.llama_memory_seq_rm(self.memory, 0, at, -1):
            self.replay(n_past)
            return
        log.debug("%s: the state is rebuilt from its mark at %d", self.path.name, at)
        self.n_past = at
        self.reread(n_past)

    def replay(self, n_past: int) -> None:
        """Rebuild the cache from its first n_past tokens: a recurrent state llama.cpp could
        not cut back (further than its snapshots reach, or twice between passes)."""
        log.debug("%s: the state is rebuilt from %d tokens", self.path.name, n_past)
        self.reset()
        self.reread(n_past)

    def reread(self, end: int) -> None:
        """Decode the kept tokens n_past..end-1 again, in batches, no logits wanted."""
        tokens = self.cached[self.n_past : end].tolist()
        for start in range(0, len(tokens), self.n_batch):
            self.decode(tokens[start : start + self.n_batch], all_rows=False, last_row=False)

    def reset(self) -> None:
        self.llama.llama_memory_clear(self.memory, True)
        self.n_past = 0
        self.marked_at = None
