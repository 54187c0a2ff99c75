"""`edgespec serve --print-handoff vllm|llama-server`: the command line that serves the same
pair with the same speculative settings on an engine for bigger hardware.

Both engines draft a fixed number of tokens per step where edgespec chooses k per step
(k auto): the handoff then drafts up to --k-max on llama-server (which stops a draft early
when the draft model is unsure) and HANDOFF_K on vLLM.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from edgespec.errors import EdgespecError
from edgespec.loader import SpecOptions

ENGINES = ("vllm", "llama-server")
HANDOFF_K = 4  # vLLM's num_speculative_tokens when edgespec's k is chosen per step


def handoff_command(
    engine: str,
    target: Path,
    draft: Path | None,
    spec: SpecOptions,
    *,
    n_ctx: int,
    host: str,
    port: int,
) -> str:
    for path in (target, draft):
        if path is not None and path.suffix != ".gguf":
            raise EdgespecError(
                f"{path} is not a GGUF file: {engine} cannot load edgespec's ONNX folders; "
                "hand off a GGUF pair (edgespec export --format gguf)"
            )
    use_model = draft is not None and spec.uses_model
    use_ngram = spec.drafter in ("auto", "ngram")
    if engine == "llama-server":
        args = ["llama-server", "-m", str(target), "-c", str(n_ctx)]
        args += ["--host", host, "--port", str(port)]
        k = spec.k if spec.k is not None else spec.k_max
        if (use_model or use_ngram) and k > 0:
            if use_model:
                args += ["--model-draft", str(draft)]
            if use_ngram:
                args += ["--spec-type", "ngram-simple"]
            args += ["--draft-max", str(k), "--draft-min", "0"]
        return shlex.join(args)
    if engine == "vllm":
        args = ["vllm", "serve", str(target), "--max-model-len", str(n_ctx)]
        args += ["--host", host, "--port", str(port)]
        k = spec.k if spec.k is not None else HANDOFF_K
        config: dict[str, object] | None = None
        if use_model:  # vLLM runs one method: the draft model when there is one
            config = {"method": "draft_model", "model": str(draft), "num_speculative_tokens": k}
        elif use_ngram:
            config = {
                "method": "ngram",
                "num_speculative_tokens": k,
                "prompt_lookup_max": spec.max_ngram,
                "prompt_lookup_min": 1,
            }
        if config is not None and k > 0:
            args += ["--speculative-config", json.dumps(config)]
        return shlex.join(args)
    raise EdgespecError(f"unknown --print-handoff engine {engine!r}; choose {', '.join(ENGINES)}")
