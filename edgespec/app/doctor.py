"""`edgespec doctor`: what this machine can run, and why not where it cannot."""

from __future__ import annotations

import argparse
import importlib
import os
import platform

from edgespec.plumbing import hugepages
from edgespec.plumbing.machine import device_description
from edgespec.plumbing.paths import edgespec_home


def module_version(name: str) -> str | None:
    try:
        module = importlib.import_module(name)
    except Exception:  # noqa: BLE001 - any import failure means "not usable"
        return None
    return str(getattr(module, "__version__", "installed"))


def report(model: str | None = None) -> list[tuple[str, str]]:
    rows = [
        ("python", platform.python_version()),
        ("device", device_description()),
        ("edgespec home", str(edgespec_home())),
        ("CPU threads", cpu_threads_status()),
        ("huge pages", hugepages.status()),
    ]
    llama = module_version("llama_cpp")
    rows.append(("llama-cpp-python", llama or "missing: pip install 'edgespec[llama]'"))
    if llama:
        import llama_cpp

        rows.append(("llama.cpp GPU offload", llama_gpu_status(llama_cpp)))
        rows.append(("llama.cpp rows on device", backend_sampling_status(llama_cpp)))
        rows.append(("llama.cpp after numpy", llama_numpy_first_status(llama_cpp)))
    ort = module_version("onnxruntime")
    rows.append(("onnxruntime", ort or "missing: pip install 'edgespec[onnx]'"))
    if ort:
        import onnxruntime

        from edgespec.runtimes.onnx_threads import thread_pool_status

        rows.append(("onnxruntime providers", ", ".join(onnxruntime.get_available_providers())))
        rows.append(("onnxruntime threads", thread_pool_status()))
        rows.append(("CUDA graphs", cuda_graph_status(onnxruntime, model)))
    return rows + tensorrt_report()


def llama_build_command(version: str | None, cuda: bool) -> str:
    """How this llama-cpp-python is rebuilt, for the GPU at hand where `cuda`, and on x86 for
    this CPU's vector extensions without AMX (GGML_NATIVE would add AMX kernels on a CPU that
    has it: issue 45). deploy/jetson/install.sh does it on a Jetson."""
    from edgespec.plumbing.machine import cpu_model_and_flags
    from edgespec.runtimes.llama_load_probe import llama_cpu_cmake_args

    gpu = "-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=native" if cuda else ""
    cpu = llama_cpu_cmake_args(cpu_model_and_flags()[1], platform.machine())
    pin = f"=={version}" if version else ""
    return (
        f'CMAKE_ARGS="{" ".join(filter(None, [gpu, cpu]))}" pip install '
        f"--force-reinstall --no-deps --no-binary llama-cpp-python llama-cpp-python{pin}"
    )


def llama_gpu_status(llama_cpp) -> str:
    """Whether this llama-cpp-python offloads to a GPU, and with CUDA graphs (one a context:
    a change of verify width costs a pass run uncaptured; docs/gpu.md)."""
    from edgespec.runtimes.llama_library import one_graph_build

    if not llama_cpp.llama_supports_gpu_offload():
        return (
            "no (CPU build; for CUDA: "
            f"{llama_build_command(getattr(llama_cpp, '__version__', None), cuda=True)})"
        )
    if one_graph_build(llama_cpp.llama_print_system_info(), os.environ):
        return (
            "yes, with CUDA graphs, one a context: a pass of a new width runs uncaptured, "
            "which the calibration measures and the controller prices"
        )
    return "yes, without CUDA graphs (this build, or GGML_CUDA_DISABLE_GRAPHS)"


def backend_sampling_status(llama_cpp) -> str:
    """Whether --backend-sampling can cut a pass's rows where it ran (docs/gpu.md)."""
    if not hasattr(llama_cpp, "llama_set_sampler"):
        return (
            f"no: llama-cpp-python {llama_cpp.__version__} has no backend sampling "
            "(llama_set_sampler, 0.3.36 and later)"
        )
    return (
        "with --backend-sampling: each row's largest logits only (greedy, top-k, top-p, "
        "min-p, temperature alone); off by default, not yet timed on a GPU"
    )


def llama_numpy_first_status(llama_cpp, timeout: float = 60.0) -> str:
    """Whether this llama-cpp-python loads a model in a process that imported numpy first, as
    every edgespec process does: a tiny model, loaded in a child (builds with AMX kernels died
    there with SIGSEGV on CPUs with AMX, issue 45)."""
    import tempfile
    from pathlib import Path

    from edgespec.runtimes.llama_load_probe import (
        has_amx_kernels,
        load_in_child,
        write_probe_gguf,
    )

    try:
        import gguf  # noqa: F401 - writes the probe model
    except ImportError:
        return "not checked: the gguf package is missing (pip install 'edgespec[llama]')"
    with tempfile.TemporaryDirectory(prefix="edgespec-probe-") as folder:
        result = load_in_child(
            write_probe_gguf(Path(folder) / "probe.gguf"), "numpy first", timeout=timeout
        )
    if result.loaded:
        return "loads a model (a tiny one, in a process that imported numpy first)"
    version = getattr(llama_cpp, "__version__", None)
    if has_amx_kernels(llama_cpp.llama_print_system_info()):
        cuda = bool(llama_cpp.llama_supports_gpu_offload())
        fix = f"rebuild it without AMX kernels: {llama_build_command(version, cuda)}"
    else:
        fix = "import llama_cpp before numpy, and report this line (edgespec issue 45)"
    return f"does not load a model: {result.why_not()} (fix: {fix})"


def cpu_threads_status() -> str:
    """Cores, the work other processes hold on them now, and the threads llama.cpp would use."""
    import time

    from edgespec.runtimes.threads import LoadAwareThreads, OtherWork, default_threads

    work = OtherWork()
    if not work.available:
        return f"{default_threads()} by default; other work unmeasured here (no /proc/stat)"
    time.sleep(work.window)
    others = work.cores()
    now = LoadAwareThreads(default_threads(), work).now()
    return (
        f"{len(work.cpus)} usable cores, {others:.1f} busy with other work now: llama.cpp "
        f"would run {now} of its {default_threads()} threads (a thread fewer per busy core; "
        "--fixed-threads keeps them all)"
    )


def tensorrt_report() -> list[tuple[str, str]]:
    """TensorRT / TensorRT for RTX, cuda-python, the GPU, and the precisions an engine build
    (`edgespec export --format tensorrt`) would pick here, with the reason."""
    from edgespec.export.trt_plan import precision_for_device
    from edgespec.runtimes.tensorrt import gpu_properties

    trt, rtx = module_version("tensorrt"), module_version("tensorrt_rtx")
    cuda = module_version("cuda.bindings") or module_version("cuda")
    gpu = gpu_properties()
    rows = [
        ("tensorrt", trt or "missing: JetPack ships it (apt install nvidia-tensorrt on a bare "
         "system); not installable from PyPI alone"),
        ("tensorrt for RTX", rtx or "missing: on an RTX GPU, pip install tensorrt-rtx-cu13"),
        ("cuda-python", cuda or "missing: pip install cuda-python (the TensorRT runtime's "
         "device memory, streams and CUDA graphs)"),
        ("GPU", f"{gpu[0]}, compute capability {gpu[1][0]}.{gpu[1][1]}" if gpu
         else "none visible (no CUDA driver or device)"),
    ]  # fmt: skip
    choice = precision_for_device(gpu[1] if gpu else None)
    rows.append(("engine precision", f"target {choice.target}, draft {choice.draft}: "
                 f"{choice.reason}"))  # fmt: skip
    if not (trt or rtx) or not cuda or not gpu:
        rows.append(("TensorRT back-end", "inactive: a TensorRT bundle runs on ONNX Runtime "
                     "here (the same standard-operator ONNX)"))  # fmt: skip
    else:
        rows.append(("TensorRT back-end", "available: export with --format tensorrt, or build "
                     "a bundle's engines with its build_engines.sh"))  # fmt: skip
    return rows


def cuda_graph_status(ort, model: str | None) -> str:
    """Whether ONNX Runtime would capture the verify step as a CUDA graph here, or why not."""
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return (
            f"inactive: onnxruntime {ort.__version__} has no CUDA execution provider (the CPU "
            "build); install onnxruntime-gpu: pip install 'edgespec[onnx-gpu]'"
        )
    try:
        import numpy as np

        ort.OrtValue.ortvalue_from_shape_and_type((1,), np.float32, "cuda", 0)
    except Exception as e:  # noqa: BLE001 - ORT raises plain RuntimeError subclasses
        return f"inactive: the CUDA execution provider sees no usable GPU ({str(e)[:120]})"
    if model is None:
        return "available (run `edgespec doctor --model DIR` to check an exported model)"
    from edgespec.runtimes.onnxrt import OnnxRuntime

    providers = ["CUDAExecutionProvider", "CPUExecutionProvider"]
    runtime = OnnxRuntime(model, n_ctx=256, providers=providers)
    if runtime.cuda_graph:
        return (
            f"active for {model}: steps of 1..{runtime.max_graph_width} tokens are captured, "
            "one graph per width (and a draft's 2-token re-forward; `serve` captures them at "
            f"load); {greedy_rows_status(runtime)}; {sampled_rows_status(runtime)}"
        )
    if runtime.info.get("compute") != "fp16":
        return (
            f"inactive for {model}: it computes in float32, and ONNX Runtime's CUDA attention "
            "needs fp16; export it with --device cuda"
        )
    return f"inactive for {model}: ONNX Runtime could not capture its graph (see the log)"


def sampled_rows_status(runtime) -> str:
    """What a sampled step of this ONNX model copies from the device (docs/gpu.md)."""
    from edgespec.runtimes.sampling_head import CANDIDATES

    if runtime.sampling_head is None:
        return "sampled steps copy every row's logits to the host"
    return (
        f"sampled steps read each row's {CANDIDATES} likeliest logits from a sampling head "
        "(every logit where temperature alone, or a top-p wider than those, needs them)"
    )


def greedy_rows_status(runtime) -> str:
    """What a greedy step of this ONNX model copies from the device (docs/gpu.md)."""
    if runtime.top_outputs:
        return "greedy steps read each row's argmax from the graph"
    return (
        "greedy steps copy every row's logits to the host (it has no top outputs: export it "
        "again with --device cuda)"
    )


def cmd_doctor(args: argparse.Namespace) -> int:
    for name, value in report(args.model):
        print(f"{name:<24} {value}")
    return 0


def add_doctor_parser(sub) -> None:
    p = sub.add_parser("doctor", help="report back-ends, providers and devices")
    p.add_argument("--model", help="an exported ONNX folder: report whether CUDA graphs apply")
    p.set_defaults(func=cmd_doctor)
