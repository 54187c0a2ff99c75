"""The standard-operator ONNX graph (export/onnx_standard.py) through ONNX Runtime.

What a TensorRT bundle runs on a machine without TensorRT: the same graph the engines are
built from. The tokenizer, vocabulary, session and context handling are OnnxRuntime's; only
the step differs. The graph writes the new K/V rows into a copy of the whole buffer
(`present.*`), so two buffer sets alternate, past -> present, and rollback stays a length
change. No CUDA graphs here: this path exists so one bundle runs everywhere, not for speed.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from edgespec.runtimes.onnxrt import HIDDEN_STATES, OnnxRuntime

log = logging.getLogger(__name__)


class StandardOnnxRuntime(OnnxRuntime):
    """The Runtime protocol over a standard-flavour model folder (model.json flavour
    "standard"), on ONNX Runtime's CPU or CUDA provider."""

    kv: dict[str, Any]  # the set that holds the cache (OnnxRuntime's name)
    binds_steps = False  # run() binds each pass afresh: no sampling head (OnnxRuntime)

    def __init__(self, model_dir: str | os.PathLike[str], **kwargs: Any) -> None:
        """OnnxRuntime's keywords (OnnxOptions' cuda_graph and sampling_head do nothing here)."""
        super().__init__(model_dir, **kwargs)
        self.spare: dict[str, Any] = self.allocate_cache()  # the set the next step writes

    def fp16_compute_for_cuda(self) -> bool:
        return False  # never captured: see the module docstring

    def run(self, tokens: Sequence[int], rows: int) -> np.ndarray:
        """One pass at n_past; the logits of the last `rows` tokens [rows, V] float32
        (rows = 0, a prefill chunk nobody reads, still computes one: no empty outputs)."""
        n, keep = len(tokens), max(rows, 1)
        feeds = {
            "input_ids": np.asarray(tokens, np.int32)[None, :],
            "position": np.array([self.n_past], np.int32),
            "logit_rows": np.arange(n - keep, n, dtype=np.int32),
        }
        binding = self.session.io_binding()
        for name, array in feeds.items():
            binding.bind_cpu_input(name, array)
        for key in self.kv:
            binding.bind_ortvalue_input(f"past_key_values.{key}", self.kv[key])
            binding.bind_ortvalue_output(f"present.{key}", self.spare[key])
        shape = (1, keep, self.n_vocab)
        if self.on_cuda:
            out = self.ort.OrtValue.ortvalue_from_shape_and_type(shape, np.float32, "cuda", 0)
        else:
            out = self.ort.OrtValue.ortvalue_from_numpy(np.empty(shape, np.float32))
        binding.bind_ortvalue_output("logits", out)
        hidden = None
        if self.hidden_width:
            hidden = self.output_value((1, n, self.hidden_width), np.float32)
            binding.bind_ortvalue_output(HIDDEN_STATES, hidden)
        self.session.run_with_iobinding(binding)
        logits = out.numpy()
        if hidden is not None and self.kept is not None:
            self.kept.write(self.n_past, hidden.numpy()[0])
        past = self.kv
        self.kv = self.spare  # this step's buffers hold the cache now
        self.spare = past
        self.n_past += n
        return np.array(logits[0], dtype=np.float32)
