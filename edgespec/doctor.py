"""`edgespec doctor`: what this machine can run, and why not where it cannot."""

from __future__ import annotations

import argparse
import importlib
import platform

from edgespec.calibrate import device_description
from edgespec.paths import edgespec_home


def module_version(name: str) -> str | None:
    try:
        module = importlib.import_module(name)
    except Exception:  # noqa: BLE001 - any import failure means "not usable"
        return None
    return str(getattr(module, "__version__", "installed"))


def report() -> list[tuple[str, str]]:
    rows = [
        ("python", platform.python_version()),
        ("device", device_description()),
        ("edgespec home", str(edgespec_home())),
    ]
    llama = module_version("llama_cpp")
    rows.append(("llama-cpp-python", llama or "missing: pip install 'edgespec[llama]'"))
    if llama:
        import llama_cpp

        gpu = bool(llama_cpp.llama_supports_gpu_offload())
        rows.append(("llama.cpp GPU offload", "yes" if gpu else "no (CPU build)"))
    ort = module_version("onnxruntime")
    rows.append(("onnxruntime", ort or "missing: pip install 'edgespec[onnx]'"))
    if ort:
        import onnxruntime

        providers = onnxruntime.get_available_providers()
        rows.append(("onnxruntime providers", ", ".join(providers)))
        cuda = "CUDAExecutionProvider" in providers
        rows.append(
            ("CUDA graphs", "available" if cuda else "inactive: no CUDA execution provider")
        )
    rows.append(("tensorrt", module_version("tensorrt") or "missing: pip install 'edgespec[trt]'"))
    return rows


def cmd_doctor(args: argparse.Namespace) -> int:
    for name, value in report():
        print(f"{name:<24} {value}")
    return 0


def add_doctor_parser(sub) -> None:
    p = sub.add_parser("doctor", help="report back-ends, providers and devices")
    p.set_defaults(func=cmd_doctor)
