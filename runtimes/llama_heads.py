"""Trained draft heads on llama.cpp: an EAGLE-3 head or an MTP layer beside a LlamaCppRuntime
target, and the target's side of them (HeadFeatures: the features its passes keep).

What llama-cpp-python 0.3.36's Python bindings lack is bound here with ctypes, on the very
library handle llama_cpp loaded (llama_cpp.llama_cpp._lib). The vendored llama.cpp declares
these in src/llama-ext.h, a C++ staging header, not in include/llama.h: they are exported with
C++ (Itanium) mangled names. Each takes and returns only pointers, bools and 32-bit integers,
so the C calling convention ctypes uses is the one they were compiled with; the mangled name
encodes the argument types, so a changed signature in a later build is a missing symbol
(refused with HeadUnsupportedError), never a silent misuse.

    llama_model_target_layer_ids(const llama_model *)   -> const int32_t *  (the head's
    llama_model_target_layer_ids_n(const llama_model *) -> uint32_t           extract layers)
    llama_set_embeddings_layer_inp(llama_context *, uint32_t lid, bool)  the target context
        keeps the input of layer lid ([n_tokens, n_embd] float32, every row of each batch)
    llama_get_embeddings_layer_inp(llama_context *, uint32_t lid) -> float *
    llama_set_embeddings_nextn(llama_context *, bool value, bool masked)  the head context
        keeps its pre-norm hidden state (masked: output rows only)
    llama_get_embeddings_nextn(llama_context *) -> float *
    llama_get_embeddings_nextn_ith(llama_context *, int32_t i) -> float *  (i: batch row, -1
        the last output)
    llama_get_ctx_other(llama_context *) -> llama_context *  (what the head's context took
        from llama_context_params.ctx_other: tests check llama-cpp-python's struct layout)

An EAGLE-3 GGUF (general.architecture "eagle3", src/models/eagle3.cpp) holds `fc.weight`
[3 * target n_embd -> n_embd], one decoder layer (blk.0.attn_norm, blk.0.attn_norm_2 on the
fused features, attn_q/k/v over the concatenation [2 * n_embd], attn_output, ffn_*),
output_norm, and optionally output.weight, token_embd.weight and `d2t` (int64 [draft vocab]:
the target id of each draft logits column); metadata eagle3.target_layers (3 ids) and
eagle3.target_hidden_size. Its context needs llama_context_params.ctx_other = the target's
context (it borrows the target's token embeddings, and output layer where it has none).
llama_encode on the head runs the encoder graph (fc) over [n, 3 * n_embd_tgt] features and
leaves g [n, n_embd] in the nextn embeddings; llama_decode with a batch carrying both token
ids and embd rows runs the decoder: at head position P the pair (token[P + 1], g[P]).
"""

from __future__ import annotations

import ctypes
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edgespec.errors import ModelFileError
from edgespec.runtimes.gguf_meta import check_eagle_head, read_metadata
from edgespec.runtimes.llama_library import check_gguf_file, last_llama_error
from edgespec.runtimes.shared import (
    FC_NORM_KEY,
    NORM_OUTPUT_KEY,
    KeptFeatures,
    check_head_arch,
    check_head_fit,
    eagle31_norms,
    kept_rows,
    rms_norm_rows,
)

log = logging.getLogger(__name__)

_c_float_p = ctypes.POINTER(ctypes.c_float)
# name -> (mangled symbol, argtypes, restype)
EXT_FUNCTIONS = {
    "target_layer_ids": (
        "_Z28llama_model_target_layer_idsPK11llama_model",
        [ctypes.c_void_p],
        ctypes.POINTER(ctypes.c_int32),
    ),
    "target_layer_ids_n": (
        "_Z30llama_model_target_layer_ids_nPK11llama_model",
        [ctypes.c_void_p],
        ctypes.c_uint32,
    ),
    "set_embeddings_layer_inp": (
        "_Z30llama_set_embeddings_layer_inpP13llama_contextjb",
        [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_bool],
        None,
    ),
    "get_embeddings_layer_inp": (
        "_Z30llama_get_embeddings_layer_inpP13llama_contextj",
        [ctypes.c_void_p, ctypes.c_uint32],
        _c_float_p,
    ),
    "set_embeddings_nextn": (
        "_Z26llama_set_embeddings_nextnP13llama_contextbb",
        [ctypes.c_void_p, ctypes.c_bool, ctypes.c_bool],
        None,
    ),
    "get_embeddings_nextn": (
        "_Z26llama_get_embeddings_nextnP13llama_context",
        [ctypes.c_void_p],
        _c_float_p,
    ),
    "get_embeddings_nextn_ith": (
        "_Z30llama_get_embeddings_nextn_ithP13llama_contexti",
        [ctypes.c_void_p, ctypes.c_int32],
        _c_float_p,
    ),
    "get_ctx_other": (
        "_Z19llama_get_ctx_otherP13llama_context",
        [ctypes.c_void_p],
        ctypes.c_void_p,
    ),
}


# The target architectures whose graph keeps each layer's input (llm_graph_result's
# t_layer_inp) in the llama.cpp llama-cpp-python 0.3.36 vendors: the models under its
# src/models/ that set it, by general.architecture. On any other (qwen2 among them) the first
# pass after a head asks for layer inputs aborts the process (GGML_ASSERT(t_layer_inp[il] !=
# nullptr)), so the target is refused before the head loads.
KEEPS_LAYER_INPUTS = frozenset({
    "bailingmoe3", "deepseek4", "gemma4", "gpt-oss", "hunyuan_vl", "lfm2", "llama", "mimo2",
    "minimax-01", "minimax-m2", "muse-glimmer", "nanbeige", "nemotron_h", "qwen3", "qwen35",
    "qwen35moe", "qwen3moe", "qwen3next", "qwen4exp",
})  # fmt: skip


def check_target_keeps_layer_inputs(arch: str | None, target: str, head: str) -> None:
    """Refuse a target whose llama.cpp graph keeps no layer inputs for a head to read."""
    if arch not in KEEPS_LAYER_INPUTS:
        raise HeadUnsupportedError(
            f"{head}: {target} is a {arch!r} model, whose inputs to each layer this llama.cpp "
            "does not keep, so no EAGLE-3 head can read them (it runs on llama, qwen3, "
            "gpt-oss and other targets); drop --head"
        )


class HeadUnsupportedError(ModelFileError):
    """This llama.cpp build cannot run trained draft heads (a symbol is missing)."""


class Ext:
    """The llama-ext.h functions, bound on llama_cpp's own library handle."""

    def __init__(self, llama_cpp) -> None:
        lib = llama_cpp.llama_cpp._lib
        for name, (symbol, argtypes, restype) in EXT_FUNCTIONS.items():
            try:
                f = getattr(lib, symbol)
            except AttributeError:
                raise HeadUnsupportedError(
                    f"this llama.cpp build cannot run draft heads: its libllama lacks {symbol} "
                    f"({name}, from llama-ext.h); install llama-cpp-python 0.3.36 (pip install "
                    "llama-cpp-python==0.3.36), or drop --head"
                ) from None
            f.argtypes, f.restype = argtypes, restype
            setattr(self, name, f)

    def layer_ids(self, model) -> list[int]:
        n = int(self.target_layer_ids_n(model))  # type: ignore[attr-defined]
        ids = self.target_layer_ids(model)  # type: ignore[attr-defined]
        return [int(ids[i]) for i in range(n)] if n and ids else []


_ext: Ext | None = None


def ext(llama_cpp) -> Ext:
    global _ext
    if _ext is None:
        _ext = Ext(llama_cpp)
    return _ext


def model_metadata(llama, model, key: str) -> str | None:
    """A loaded model's GGUF metadata value as text (None where it has no such key)."""
    buf = ctypes.create_string_buffer(256)
    n = llama.llama_model_meta_val_str(model, key.encode(), buf, 256)
    return buf.value.decode("utf-8", "replace") if n >= 0 else None


def rows(ptr, n: int, width: int) -> np.ndarray:
    """[n, width] float32 copied out of a llama.cpp buffer."""
    if not ptr:
        raise RuntimeError("llama.cpp returned no embeddings where they were asked for")
    return np.ctypeslib.as_array(ptr, shape=(n, width)).copy()


class HeadContext:
    """A llama.cpp context of one sequence that drafts from the target's features: its KV
    cache, the decoder batch (token ids and embd rows together) and rollback. It never
    touches the target's cache. Subclasses load or borrow the model and make the context."""

    kind: str
    outputs_all_rows = True  # every decoded row an output (see fill)

    def __init__(self, target, model, n_embd: int) -> None:
        self.llama = target.llama
        self.ext = ext(self.llama)
        self.target = target
        self.model = model
        self.n_embd = n_embd
        self.n_vocab = int(self.llama.llama_vocab_n_tokens(self.llama.llama_model_get_vocab(model)))
        self.n_ctx = target.n_ctx
        self.n_batch = target.n_batch
        self.ctx: Any = None
        self.memory: Any = None
        self.dec_batch: Any = None
        self.n_past = 0

    def open_context(self, params: Any) -> None:
        """Create the context from params (n_ctx, batch and threads are set here) and the
        decoder batch."""
        lib = self.llama
        params.n_ctx = self.n_ctx
        params.n_batch = params.n_ubatch = self.n_batch
        params.n_seq_max = 1
        params.no_perf = True
        if self.target.flash_attn is not None:
            on, off = lib.LLAMA_FLASH_ATTN_TYPE_ENABLED, lib.LLAMA_FLASH_ATTN_TYPE_DISABLED
            params.flash_attn_type = on if self.target.flash_attn else off
        self.ctx = lib.llama_init_from_model(self.model, params)
        if not self.ctx:
            raise ModelFileError(f"cannot create a llama.cpp context for the {self.kind} head")
        self.memory = lib.llama_get_memory(self.ctx)
        # masked: the states of output rows only (all rows here), else of every row
        masked = self.outputs_all_rows
        self.ext.set_embeddings_nextn(self.ctx, True, masked)  # type: ignore[attr-defined]
        self.dec_batch = lib.llama_batch_init(self.n_batch, self.n_embd, 1)
        # llama_batch_init allocates embd or token, not both; the decoder reads both
        self.dec_tokens = (lib.llama_token * self.n_batch)()
        self.dec_batch.token = self.dec_tokens

    def fill(self, b: Any, embd: np.ndarray, tokens: Sequence[int] | None) -> None:
        """Put embd's rows (and tokens, where given) into batch b at n_past + i: llama.cpp
        checks positions against the head's cache. Every row an output where
        outputs_all_rows: with the last alone, this llama.cpp's eagle3 graph gives a multi-row
        pass's last row wrong logits (tests/test_eagle.py, the numpy reference)."""
        ctypes.memmove(b.embd, embd.ctypes.data, embd.nbytes)
        n = len(embd)
        for i in range(n):
            if tokens is not None:
                b.token[i] = int(tokens[i])
            b.pos[i] = self.n_past + i
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = 0
            b.logits[i] = self.outputs_all_rows or i == n - 1
        b.n_tokens = n

    def decode(self, tokens: Sequence[int], g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Append (tokens[i], g[i]) at n_past + i; the last row's logits [n_vocab] and hidden
        state [n_embd] (the next position's g when it drafts on)."""
        n = len(tokens)
        assert g.shape == (n, self.n_embd) and 0 < n <= self.n_batch
        g = np.ascontiguousarray(g, dtype=np.float32)
        b = self.dec_batch
        self.fill(b, g, tokens)
        status = self.llama.llama_decode(self.ctx, b)
        if status != 0:
            raise RuntimeError(f"llama_decode of the {self.kind} head failed with status {status}")
        self.n_past += n
        logits = rows(self.llama.llama_get_logits_ith(self.ctx, -1), 1, self.n_vocab)[0]
        last = -1 if self.outputs_all_rows else n - 1  # the last output, or the last row
        state = rows(self.ext.get_embeddings_nextn_ith(self.ctx, last), 1, self.n_embd)[0]  # type: ignore[attr-defined]
        return logits, state

    def rollback(self, n_past: int) -> None:
        if n_past < self.n_past:
            self.llama.llama_memory_seq_rm(self.memory, 0, n_past, -1)
            self.n_past = n_past

    def reset(self) -> None:
        self.llama.llama_memory_clear(self.memory, True)
        self.n_past = 0

    def close(self) -> None:
        if self.ctx:
            self.dec_batch.token = None  # ours, not llama_batch_init's: not freed by it
            self.llama.llama_batch_free(self.dec_batch)
            self.llama.llama_free(self.ctx)
            self.ctx = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


class EagleHead(HeadContext):
    """An EAGLE-3 head's model and context beside a LlamaCppRuntime target."""

    kind = "eagle"

    def __init__(
        self,
        path: str | os.PathLike[str],
        target,
        *,
        n_threads: int = 1,
        last_error: Callable[[], str | None] = lambda: None,
    ) -> None:
        """target: the LlamaCppRuntime (which checked path is a GGUF file); last_error: the
        first error llama.cpp logged (llama_library.last_llama_error)."""
        self.path = Path(path)
        lib = target.llama
        params = lib.llama_model_default_params()
        params.use_extra_bufts = target.repack
        # where the target is: llama.cpp's default offloads every layer on a GPU build, which
        # beside a target kept on the CPU would copy the features across every draft
        self.n_gpu_layers = params.n_gpu_layers = -1 if target.n_gpu_layers else 0
        model = lib.llama_model_load_from_file(str(self.path).encode(), params)
        if not model:
            self.ctx = self.model = None
            raise ModelFileError(
                f"cannot load the draft head {self.path}: "
                f"{last_error() or 'llama.cpp could not read it'}"
            )
        super().__init__(target, model, int(lib.llama_model_n_embd(model)))
        self.layers = self.ext.layer_ids(self.model)
        self.n_embd_tgt = target.n_embd
        self.check_fit()
        self.fc_norm, self.norm_output = self.eagle31_norms()
        self.eps = float(self.metadata("eagle3.attention.layer_norm_rms_epsilon") or 1e-6)
        params = lib.llama_context_default_params()
        params.n_threads = params.n_threads_batch = n_threads
        params.ctx_other = target.ctx  # the head borrows the target's token embeddings
        self.open_context(params)
        self.enc_batch = lib.llama_batch_init(self.n_batch, len(self.layers) * self.n_embd_tgt, 1)

    def check_fit(self) -> None:
        """Refuse a head that cannot read this target's hidden states or vocabulary."""
        check_head_arch(self.path.name, self.metadata("general.architecture"))
        check_head_fit(
            self.path.name, self.target.path.name,
            hidden=self.metadata("eagle3.target_hidden_size"), n_embd_tgt=self.n_embd_tgt,
            layers=self.layers, n_layer_tgt=int(self.llama.llama_model_n_layer(self.target.model)),
            n_vocab=self.n_vocab, n_vocab_tgt=self.target.n_vocab,
        )  # fmt: skip

    def metadata(self, key: str) -> str | None:
        return model_metadata(self.llama, self.model, key)

    def eagle31_norms(self) -> tuple[np.ndarray | None, np.ndarray | None]:
        """An EAGLE-3.1 head's fc_norm [3, n_embd_tgt] and carried-state norm [n_embd]
        (shared.FC_NORM_KEY), read from the header: llama.cpp's metadata API skips arrays."""
        meta = read_metadata(self.path, whole=(FC_NORM_KEY, NORM_OUTPUT_KEY))
        return eagle31_norms(self.path.name, meta, self.n_embd_tgt, self.n_embd)

    def encode(self, features: np.ndarray) -> np.ndarray:
        """features [n, 3 * n_embd_tgt] float32 -> g [n, n_embd] float32 (the fc layer; first
        each feature through its own RMSNorm where the head has fc_norm)."""
        n, width = features.shape
        assert width == len(self.layers) * self.n_embd_tgt and 0 < n <= self.n_batch
        features = np.ascontiguousarray(features, dtype=np.float32)
        if self.fc_norm is not None:  # [n, 3, n_embd_tgt], a weight row per feature
            grouped = features.reshape(n, len(self.layers), self.n_embd_tgt)
            features = rms_norm_rows(grouped, self.fc_norm, self.eps).reshape(n, width)
        b = self.enc_batch
        self.fill(b, features, None)
        status = self.llama.llama_encode(self.ctx, b)
        if status != 0:
            raise RuntimeError(f"llama_encode of the head failed with status {status}")
        return rows(self.ext.get_embeddings_nextn(self.ctx), n, self.n_embd)  # type: ignore[attr-defined]

    def decode(self, tokens: Sequence[int], g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """HeadContext.decode; an EAGLE-3.1 head (norm_output) carries its state through the
        final norm, as it was trained (its logits are already that norm's: unchanged)."""
        logits, state = super().decode(tokens, g)
        if self.norm_output is not None:
            state = rms_norm_rows(state, self.norm_output, self.eps)
        return logits, state

    def close(self) -> None:
        if self.ctx:
            self.llama.llama_batch_free(self.enc_batch)
        super().close()
        if self.model:
            self.llama.llama_model_free(self.model)
            self.model = None


# The target architectures whose MTP (NextN) layers this llama.cpp runs as a draft context
# (a graph_mtp in src/models/), whose converted GGUFs carry them (convert_hf_to_gguf.py; for
# deepseek2 only GLM-4.7-Flash's: DeepSeek-V2/V3's converter skips them, skip_mtp) and whose
# cache rolls back to a verified prefix: the attention ones, and Qwen3.5's hybrids, whose
# delta nets roll back through llama.cpp's state snapshots (qwen35 tested, qwen35moe the same
# delta-net code). Evidence for each: docs/design.md, "Trained heads on llama.cpp".
MTP_ARCHS = frozenset({
    "cohere2moe", "deepseek2", "deepseek32", "glm-dsa", "glm4moe", "hy_v3", "mimo2", "qwen35",
    "qwen35moe", "step35",
})  # fmt: skip

# The other architectures with a graph_mtp here, and why edgespec does not draft with their
# MTP layers (the target decodes on without them; --drafter mtp is refused with the reason).
MTP_LEFT_OUT = {
    "qwen3next": "this llama.cpp keeps no snapshots of its delta nets, so each rejected draft "
    "would rebuild the cache from the tokens",
    "nemotron_h_moe": "its hybrid cache's rollback is untested here",
    "bailingmoe3": "its hybrid cache's rollback is untested here",
    "deepseek4": "its MTP graph is untested here",
}


class MtpHead(HeadContext):
    """The target's own first MTP (NextN) layer as a draft head: a context of type MTP on the
    target's model (loaded with its MTP layers: LlamaOptions.mtp), so the weights are not
    loaded twice. At head position P it reads (token P + 1, h P), h the target's final hidden
    state (llama.cpp's h_nextn) at P, as DeepSeek-V3's MTP module was trained; while drafting,
    h is the MTP layer's own state at the position before (llama-server's draft-mtp). A target
    with several MTP layers (step35) drafts with the first alone."""

    kind = "mtp"
    # the output projection (vocabulary-wide) for the last row alone: its logits are right
    # (tested against the numpy reference); the states are read unmasked, by row, since this
    # llama.cpp's masked copy takes the graph's first rows, not the output rows
    outputs_all_rows = False

    def __init__(self, target, *, n_threads: int = 1) -> None:
        lib = target.llama
        super().__init__(target, target.model, target.n_embd)
        params = lib.llama_context_default_params()
        params.n_threads = params.n_threads_batch = n_threads
        params.ctx_type = lib.LLAMA_CONTEXT_TYPE_MTP
        self.open_context(params)

    def encode(self, features: np.ndarray) -> np.ndarray:
        """The MTP layer reads the target's final hidden state as it is: [n, n_embd]."""
        return features

    def close(self) -> None:
        super().close()
        self.model = None  # the target's, freed by it


class HeadFeatures:
    """Mixed into LlamaCppRuntime (whose __init__ sets these): the heads a target opens and
    the features its passes keep for them."""

    llama: Any  # the llama_cpp module
    model: Any
    ctx: Any
    path: Path
    n_ctx: int
    n_embd: int
    n_past: int
    n_threads: int
    min_width: int
    mtp_layers: int
    mtp_refused: str
    mtp_problem: str | None
    n_gpu_layers: int
    extracted: list[int]
    kept_for: object
    kept: KeptFeatures | None

    def open_head(self, path: str):
        """An EAGLE-3 head (EagleHead); this context keeps its layers' inputs."""
        check_gguf_file(Path(path))
        arch = model_metadata(self.llama, self.model, "general.architecture")
        check_target_keeps_layer_inputs(arch, self.path.name, Path(path).name)
        check_eagle_head(Path(path), self.n_ctx, on_cpu=not self.n_gpu_layers)
        head = EagleHead(path, self, n_threads=self.n_threads, last_error=last_llama_error)
        self.check_features_for(tuple(head.layers), Path(path).name)
        for lid in head.layers:
            ext(self.llama).set_embeddings_layer_inp(self.ctx, lid, True)  # type: ignore[attr-defined]
        self.extracted = head.layers
        self.kept = KeptFeatures(self.n_ctx + self.min_width, len(head.layers) * self.n_embd)
        return head

    def runnable_mtp_layers(self) -> int:
        """The MTP layers this llama.cpp can draft with on this target (MTP_ARCHS): none where
        its file's are broken (mtp_problem); layers of another architecture are left unused,
        the reason kept in mtp_refused and logged."""
        arch = model_metadata(self.llama, self.model, "general.architecture")
        n = 0 if self.mtp_problem else max(0, int(self.llama.llama_model_n_layer_nextn(self.model)))
        if arch in MTP_ARCHS or not n:
            return n
        reason = MTP_LEFT_OUT.get(arch or "", "edgespec has not tested its MTP graph")
        self.mtp_refused = (
            f"{self.path.name} carries MTP layers of a {arch!r} model, which edgespec does not "
            f"draft with: {reason}; choose another --drafter"
        )
        log.info("%s", self.mtp_refused)
        return 0

    def open_mtp(self):
        """The target's first MTP layer (MtpHead); this context keeps
        its final hidden state for every row of every pass."""
        if not self.mtp_layers:
            arch = model_metadata(self.llama, self.model, "general.architecture")
            raise ModelFileError(
                self.mtp_refused
                or f"{self.path.name} carries no MTP layers this llama.cpp drafts with (a "
                f"{arch!r} model; GGUFs of GLM-4.5, GLM-4.7-Flash, Qwen3.5 and the other "
                "llama_heads.MTP_ARCHS keep theirs, DeepSeek-V3's do not); drop --drafter mtp"
            )
        self.check_features_for("mtp", "its MTP layer")
        head = MtpHead(self, n_threads=self.n_threads)
        ext(self.llama).set_embeddings_nextn(self.ctx, True, False)  # type: ignore[attr-defined]
        self.kept = KeptFeatures(self.n_ctx + self.min_width, self.n_embd)
        return head

    def check_features_for(self, features: object, head: str) -> None:
        """Refuse a head that reads other features than an open one: each pass keeps one
        kind (the same extract layers, or the final state for MTP)."""
        if self.kept is not None and features != self.kept_for:
            raise ModelFileError(
                f"{head}: {self.path.name} already feeds a draft head that reads other hidden "
                "states; open one kind of head on a target"
            )
        self.kept_for = features

    def keep_states(self, n: int) -> None:
        """The open head's features of the pass just run, at positions n_past..+n: the
        extracted layers' inputs, or the final hidden state."""
        assert self.kept is not None
        lib, width = ext(self.llama), self.n_embd
        if self.kept_for == "mtp":
            ptr = lib.get_embeddings_nextn(self.ctx)  # type: ignore[attr-defined]
            self.kept.write(self.n_past, rows(ptr, n, width))
        for i, lid in enumerate(self.extracted):
            ptr = lib.get_embeddings_layer_inp(self.ctx, lid)  # type: ignore[attr-defined]
            self.kept.write(self.n_past, rows(ptr, n, width), column=i * width)

    def features(self, start: int, end: int) -> np.ndarray:
        return kept_rows(self.kept, start, end, self.n_past)
