"""Does this llama-cpp-python load a model whatever the process imported before it?

On GPU hosts whose CPUs have AMX, the kit's CUDA build of llama-cpp-python, compiled with
llama.cpp's native CPU flags and so with its AMX kernels, died with SIGSEGV inside
llama_model_load_from_file whenever numpy was imported before llama_cpp, with every layer on
the CPU too; llama_cpp first, or jinja2 first, loaded (bench/gpu/llama_load_check.py). Builds
without AMX kernels load in every order on the CPUs at hand. A crash kills the process, so
the load runs in a child: `edgespec doctor` asks it with numpy first, the tests in every
order.

The model is tiny (two layers of 64) with quantized matrices, Q4_0 in the first layer and
Q8_0 elsewhere (the crashing file was Q8_0): the weights llama.cpp's CPU "extra buffer types"
(AMX, repack) take, set up where the crash came. A float32 model would not go through them.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

IMPORT_ORDERS = {
    "numpy first": "import numpy",
    "llama_cpp first": "import llama_cpp",
    "edgespec first": "import edgespec.runtimes.llamacpp",
    "jinja2 first": "import jinja2",
}
PROMPT = [1, 2, 3]
# what a child runs after its first import: the product's own load and one pass
LOAD = (
    "from edgespec.runtimes.llamacpp import LlamaCppRuntime\n"
    "r = LlamaCppRuntime(PATH, n_ctx=64, n_threads=1, n_gpu_layers=NGL)\n"
    "print('LOGITS', __import__('json').dumps(list(r.forward(PROMPT).shape)))\n"
)
N_EMBD, N_FF, N_LAYER, N_HEAD, N_HEAD_KV = 64, 128, 2, 4, 2
# /proc/cpuinfo flag -> llama.cpp's CMake feature: scripts/llama_cpu_args.sh's table (a test
# holds the two equal), AMX left out on purpose
LLAMA_CPU_FEATURES = [
    ("avx", "AVX"), ("avx2", "AVX2"), ("fma", "FMA"), ("f16c", "F16C"), ("bmi2", "BMI2"),
    ("avx512f", "AVX512"), ("avx512vbmi", "AVX512_VBMI"), ("avx512_vnni", "AVX512_VNNI"),
    ("avx512_bf16", "AVX512_BF16"), ("avx_vnni", "AVX_VNNI"),
]  # fmt: skip
SPECIALS = ["<|endoftext|>", "<|im_end|>"]
# the chat template of the ChatML tokenizers generated models carry (tests, bench)
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@dataclass(frozen=True)
class LoadResult:
    first: str  # the child's first import, as in IMPORT_ORDERS
    returncode: int | None  # None: no answer within the timeout
    logits_shape: tuple[int, ...] | None  # [len(PROMPT), n_vocab] where the pass ran
    tail: str  # the end of the child's stderr

    @property
    def loaded(self) -> bool:
        return self.returncode == 0 and self.logits_shape is not None

    def why_not(self) -> str:
        if self.returncode is None:
            return "no answer within the timeout"
        if self.returncode < 0:
            try:
                name = signal.Signals(-self.returncode).name
            except ValueError:
                name = f"signal {-self.returncode}"
            return f"the load died with {name}"
        if self.returncode != 0:
            last = self.tail.strip().splitlines()[-1:] or ["no message"]
            return f"exit status {self.returncode}: {last[0]}"
        return "no logits came back"


def has_amx_kernels(system_info: bytes) -> bool:
    """Whether this llama.cpp was compiled with its AMX kernels (llama_print_system_info)."""
    return b"AMX_INT8 = 1" in system_info


def llama_cpu_cmake_args(flags: list[str], machine: str) -> str:
    """llama.cpp's CMake arguments for this x86 CPU's vector extensions without AMX, as
    scripts/setup.sh builds it; "" elsewhere (an Arm CPU has no AMX: native flags do)."""
    if machine.lower() not in ("x86_64", "amd64"):
        return ""
    wanted = [f"-DGGML_{feature}=ON" for flag, feature in LLAMA_CPU_FEATURES if flag in flags]
    return " ".join(["-DGGML_NATIVE=OFF", *wanted])


def byte_tokens() -> list[str]:
    """GPT-2's printable text of the 256 bytes (byte-level BPE token text), in byte order."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    keep += range(ord("®"), ord("ÿ") + 1)
    extra = iter(range(256, 512))
    return [chr(b) if b in keep else chr(next(extra)) for b in range(256)]


def add_byte_bpe_tokenizer(
    writer: Any,
    tokens: list[str],
    types: list[int],
    merges: list[str],
    *,
    pre: str = "default",
    add_bos: bool | None = None,
    chat_template: str | None = None,
) -> None:
    """A generated model's byte-level BPE tokenizer on a gguf.GGUFWriter: BOS <|endoftext|>,
    EOS <|im_end|>; add_bos and chat_template written where given."""
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(tokens.index("<|endoftext|>"))
    writer.add_eos_token_id(tokens.index("<|im_end|>"))
    if add_bos is not None:
        writer.add_add_bos_token(add_bos)
    if chat_template is not None:
        writer.add_chat_template(chat_template)


def write_probe_gguf(path: Path, seed: int = 0) -> Path:
    """A two-layer Llama-architecture GGUF with a byte-level vocabulary, its matrices Q4_0
    in layer 0 (repacked for the CPU's GEMM kernels where it has AVX2) and Q8_0 elsewhere."""
    import gguf
    import numpy as np

    tokens = [*byte_tokens(), "Ġt", *SPECIALS]
    types = [1] * (len(tokens) - len(SPECIALS)) + [3] * len(SPECIALS)
    rng = np.random.default_rng(seed)
    d, hd, n_vocab = N_EMBD, N_EMBD // N_HEAD, len(tokens)

    def matrix(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)

    tensors = {
        "token_embd.weight": matrix(n_vocab, d),
        "output_norm.weight": np.ones(d, np.float32),
        "output.weight": matrix(n_vocab, d),
    }
    for i in range(N_LAYER):
        tensors |= {
            f"blk.{i}.attn_norm.weight": np.ones(d, np.float32),
            f"blk.{i}.attn_q.weight": matrix(d, d),
            f"blk.{i}.attn_k.weight": matrix(N_HEAD_KV * hd, d),
            f"blk.{i}.attn_v.weight": matrix(N_HEAD_KV * hd, d),
            f"blk.{i}.attn_output.weight": matrix(d, d),
            f"blk.{i}.ffn_norm.weight": np.ones(d, np.float32),
            f"blk.{i}.ffn_gate.weight": matrix(N_FF, d),
            f"blk.{i}.ffn_up.weight": matrix(N_FF, d),
            f"blk.{i}.ffn_down.weight": matrix(d, N_FF),
        }
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_context_length(512)
    writer.add_embedding_length(d)
    writer.add_block_count(N_LAYER)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD_KV)
    writer.add_rope_dimension_count(hd)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    add_byte_bpe_tokenizer(writer, tokens, types, ["Ġ t"])
    q4, q8 = gguf.GGMLQuantizationType.Q4_0, gguf.GGMLQuantizationType.Q8_0
    for name, array in tensors.items():
        if array.ndim == 2:
            kind = q4 if name.startswith("blk.0.") else q8
            writer.add_tensor(name, gguf.quants.quantize(array, kind), raw_dtype=kind)
        else:
            writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def load_in_child(
    model: Path,
    first: str,
    *,
    n_gpu_layers: int = 0,
    timeout: float = 120.0,
    python: str = sys.executable,
    prelude: str = "",
) -> LoadResult:
    """Load `model` with LlamaCppRuntime and run one pass, in a fresh `python` whose first
    import is IMPORT_ORDERS[first]; `prelude` runs before that (the tests crash a child
    with it to show a crash is seen)."""
    code = (
        f"PATH = {str(model)!r}\nNGL = {n_gpu_layers}\nPROMPT = {PROMPT!r}\n"
        f"{prelude}{IMPORT_ORDERS[first]}\n{LOAD}"
    )
    try:
        proc = subprocess.run(
            [python, "-X", "faulthandler", "-c", code],
            capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode("utf-8", "replace") if isinstance(e.stderr, bytes) else ""
        return LoadResult(first, None, None, err[-2000:])
    shape = None
    for line in proc.stdout.splitlines():
        if line.startswith("LOGITS "):
            shape = tuple(json.loads(line.split(" ", 1)[1]))
    return LoadResult(first, proc.returncode, shape, proc.stderr[-2000:])
