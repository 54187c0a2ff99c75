"""Which import order lets this llama-cpp-python build load a model? One fresh process each.

On an H200 (2026-11-26, llama-cpp-python 0.3.36 built with CUDA 13 on the lent machine's
image) LlamaCppRuntime crashed with a segmentation fault inside llama_model_load_from_file
whenever edgespec (and with it numpy) was imported before llama_cpp, at n_gpu_layers 0, 1 and
999 alike; the same file loaded, and decoded, when llama_cpp was imported first. The variants
below split that: numpy alone, jinja2 alone, llama-cpp-python's own Llama class, edgespec's
log callback. faulthandler's trace of each crash is kept.

    python bench/gpu/llama_load_check.py MODEL.gguf [--json OUT.json]

Exit status: 0 when the edgespec-first load works, 3 when only a llama_cpp-first load does
(run.sh then measures with llama_cpp imported first and says so), 1 when neither does.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

LOAD = (
    "r = L.LlamaCppRuntime(PATH, n_ctx=512, n_gpu_layers=NGL)\n"
    "assert r.forward([1, 2, 3]).shape[0] == 3\n"
)
LLAMA_CLASS = (
    "import llama_cpp\nllama_cpp.Llama(PATH, n_gpu_layers=999, n_ctx=512, verbose=False)\n"
)
EDGESPEC = "import edgespec.runtimes.llamacpp as L\n"
VARIANTS = {
    "edgespec first": (EDGESPEC + LOAD, 999),
    "edgespec first, on the CPU": (EDGESPEC + LOAD, 0),
    "edgespec first, no log callback": (
        EDGESPEC + "import llama_cpp\nllama_cpp.llama_log_set = lambda *a: None\n" + LOAD,
        999,
    ),
    "llama_cpp first": ("import llama_cpp\n" + EDGESPEC + LOAD, 999),
    "numpy, then llama_cpp, then edgespec": (
        "import numpy\nimport llama_cpp\n" + EDGESPEC + LOAD,
        999,
    ),
    "numpy first, llama-cpp-python's Llama": ("import numpy\n" + LLAMA_CLASS, 999),
    "jinja2 first, llama-cpp-python's Llama": ("import jinja2\n" + LLAMA_CLASS, 999),
    # where numpy first crashes, these two split the suspects (issue 45): llama.cpp's CPU extra
    # buffer types (AMX, repack: set up at load), and OpenBLAS's threads, started at numpy's import
    "numpy first, no extra buffer types": (
        EDGESPEC
        + LOAD.replace(
            "n_gpu_layers=NGL", "n_gpu_layers=NGL, options=L.LlamaOptions(repack=False)"
        ),
        999,
    ),
    "numpy first, OPENBLAS_NUM_THREADS=1": (
        "import os\nos.environ['OPENBLAS_NUM_THREADS'] = '1'\n" + EDGESPEC + LOAD,
        999,
    ),
}
SYSTEM_INFO = "import llama_cpp\nprint(llama_cpp.llama_print_system_info().decode())"


def run_variant(code: str, path: Path, n_gpu_layers: int) -> dict[str, object]:
    prelude = f"PATH = {str(path)!r}\nNGL = {n_gpu_layers}\n"
    proc = subprocess.run(
        [sys.executable, "-X", "faulthandler", "-c", prelude + code],
        capture_output=True,
        text=True,
        timeout=300,
    )
    noise = ("llama_model_loader: - ", "print_info", "load_tensors:", "llama_context", "llama_kv")
    lines = [ln for ln in proc.stderr.splitlines() if not ln.startswith(noise)]
    return {"loaded": proc.returncode == 0, "returncode": proc.returncode, "tail": lines[-14:]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", type=Path)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    results = {name: run_variant(code, args.model, ngl) for name, (code, ngl) in VARIANTS.items()}
    for name, r in results.items():
        print(f"{name:42} {'loaded' if r['loaded'] else 'FAILED, exit ' + str(r['returncode'])}")
    info = subprocess.run(
        [sys.executable, "-c", SYSTEM_INFO], capture_output=True, text=True, timeout=120
    ).stdout.strip()  # AMX_INT8 = 1 where the build has AMX kernels
    print(f"system info: {info}")
    if args.json:
        record = {"model": str(args.model), "system_info": info, "variants": results}
        args.json.write_text(json.dumps(record, indent=1))
    if results["edgespec first"]["loaded"]:
        sys.exit(0)
    sys.exit(3 if results["llama_cpp first"]["loaded"] else 1)


if __name__ == "__main__":
    main()
