"""The machine's identity, read in one place (edgespec.plumbing.machine)."""

from edgespec.plumbing import machine


def test_the_cpu_model_and_flags_of_an_x86_and_an_arm_cpuinfo(tmp_path):
    x86 = tmp_path / "x86"
    x86.write_text(
        "processor\t: 0\nmodel name\t: AMD EPYC 9R14\nflags\t\t: fpu avx2 avx512f\n\n"
        "processor\t: 1\nmodel name\t: AMD EPYC 9R14\nflags\t\t: fpu avx2 avx512f\n"
    )
    assert machine.cpu_model_and_flags(x86) == ("AMD EPYC 9R14", ["fpu", "avx2", "avx512f"])
    arm = tmp_path / "arm"
    arm.write_text("processor\t: 0\nFeatures\t: fp asimd sve\nCPU part\t: 0xd4f\n")
    assert machine.cpu_model_and_flags(arm) == ("0xd4f", ["fp", "asimd", "sve"])


def test_a_cuda_device_is_described_with_its_gpu(monkeypatch):
    monkeypatch.setattr(machine, "gpu_name", lambda: "NVIDIA H100 80GB HBM3")
    cpu = machine.device_description("cpu")
    assert machine.device_description("cuda") == f"{cpu}, NVIDIA H100 80GB HBM3"
    assert cpu.endswith(" cores") and "NVIDIA" not in cpu
