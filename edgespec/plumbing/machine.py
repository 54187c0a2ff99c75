"""What machine this is, read in one place: the CPU's model and flags, and the GPU's name.
A cost curve holds for one device (the tune store's key) and a benchmark figure for one
machine (its JSON records it)."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")
NVIDIA_GPUS = Path("/proc/driver/nvidia/gpus")
BOARD = Path("/proc/device-tree/model")  # a Jetson's board name


def cpu_model_and_flags(cpuinfo: Path = CPUINFO) -> tuple[str, list[str]]:
    """The CPU's model name and feature flags as lscpu reads them (x86: "model name" and
    "flags"; Arm: "Model" or "CPU part" and "Features")."""
    model, flags = platform.processor() or platform.machine(), list[str]()
    try:
        lines = cpuinfo.read_text().splitlines()
    except OSError:
        return model, flags
    for line in lines:
        key, _, value = line.partition(":")
        key = key.strip()
        if key in ("model name", "Model", "CPU part") and model in ("", platform.machine()):
            model = value.strip()
        elif key in ("flags", "Features") and not flags:
            flags = value.split()
    return model, flags


def gpu_name() -> str | None:
    """The NVIDIA GPU's model without loading a CUDA library: the driver's /proc entry, a
    Jetson's board, else nvidia-smi; None where none is found."""
    for info in sorted(NVIDIA_GPUS.glob("*/information")):
        for line in info.read_text().splitlines():
            if line.startswith("Model:"):
                return line.split(":", 1)[1].strip()
    if BOARD.is_file():
        return BOARD.read_text().strip("\x00 \n")
    try:
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return smi.stdout.strip().splitlines()[0] if smi.stdout.strip() else None


def device_description(device: str = "cpu") -> str:
    """The CPU and its cores; on cuda, the GPU too (a cost curve holds for one device)."""
    where = f"{cpu_model_and_flags()[0]}, {os.cpu_count()} cores"
    return f"{where}, {gpu_name() or 'GPU'}" if device == "cuda" else where
