"""The GPU choice: what `make GPU=...` passes to llama.cpp's build, and the default --gpu-layers."""

import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from localspec.backends.llama_cpp.capi import ALL_LAYERS, gpu_layers, gpu_placement

ROOT = Path(__file__).resolve().parents[3]


def cmake_args(gpu: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "LOCALSPEC_GPU": gpu}
    return subprocess.run([str(ROOT / "scripts/llama_cmake_args.sh")], env=env, capture_output=True, text=True)


@pytest.mark.parametrize(
    "gpu,flag", [("cuda", "-DGGML_CUDA=ON"), ("metal", "-DGGML_METAL=ON"), ("vulkan", "-DGGML_VULKAN=ON")]
)
def test_each_gpu_choice_adds_its_backend_and_keeps_the_cpu_flags(gpu, flag):
    out = cmake_args(gpu)
    assert out.returncode == 0 and flag in out.stdout.split()
    cpu = cmake_args("cpu").stdout.split()
    assert set(cpu) <= set(out.stdout.split())  # the CPU flags (AMX off, the extensions this CPU has) stay
    assert not any(f.startswith(("-DGGML_CUDA", "-DGGML_VULKAN")) for f in cpu)


def test_a_wrong_gpu_choice_is_refused_by_the_script_and_by_make():
    out = cmake_args("rocm")
    assert out.returncode != 0 and "GPU must be cuda, metal, vulkan or cpu, got 'rocm'" in out.stderr
    made = subprocess.run(["make", "-n", "GPU=rocm", "setup"], cwd=ROOT, capture_output=True, text=True)
    assert made.returncode != 0 and "GPU must be cuda, metal, vulkan or cpu" in made.stderr


def test_make_passes_the_choice_and_rebuilds_past_pips_wheel_cache():
    dry = subprocess.run(["make", "-n", "-B", "GPU=cuda", "setup"], cwd=ROOT, capture_output=True, text=True).stdout
    assert "LOCALSPEC_GPU=cuda scripts/llama_cmake_args.sh" in dry
    assert "--force-reinstall --no-cache-dir --no-deps llama-cpp-python" in dry and ".installed-cuda" in dry
    plain = subprocess.run(["make", "-n", "-B", "setup"], cwd=ROOT, capture_output=True, text=True).stdout
    assert "--force-reinstall" not in plain and "touch .venv/.installed\n" in plain


def test_gpu_layers_default_to_all_on_a_gpu_build_and_none_on_a_cpu_build():
    gpu, cpu = (SimpleNamespace(llama_supports_gpu_offload=lambda v=v: v) for v in (True, False))
    assert gpu_layers(gpu, None) == ALL_LAYERS and gpu_layers(cpu, None) == 0
    assert gpu_layers(gpu, 10) == 10 and gpu_layers(cpu, -1) == ALL_LAYERS and gpu_layers(gpu, 0) == 0


def test_the_load_report_says_where_the_layers_went():
    from support.fakes import ScriptedBackend

    from localspec.backends.base import ModelInfo
    from localspec.drafters.base import NoDrafter
    from localspec.sampling import SamplingParams
    from localspec.session import Session

    backend = ScriptedBackend()
    session = Session(backend, NoDrafter(), SamplingParams(temperature=0.8), "scripted", max_tokens=8)
    assert "GPU" not in session.load_report()  # a CPU build, or another backend
    assert gpu_placement(0, 30) == ""
    backend.info = ModelInfo(placement=gpu_placement(ALL_LAYERS, 30))
    assert "30 of 30 layers on the GPU" in session.load_report()
    backend.info = ModelInfo(placement=gpu_placement(12, 30))
    assert "12 of 30 layers on the GPU" in session.load_report()


def test_macos_builds_metal_by_default_and_cpu_means_metal_off(tmp_path):
    """A faked macOS: `uname -s` says Darwin (the script reads nothing else of the platform there)."""
    fake = tmp_path / "uname"
    fake.write_text("#!/bin/sh\necho Darwin\n")
    fake.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "LOCALSPEC_GPU"}
    env["PATH"] = f"{tmp_path}:{env['PATH']}"
    script = [str(ROOT / "scripts/llama_cmake_args.sh")]
    default = subprocess.run(script, env=env, capture_output=True, text=True).stdout.split()
    assert default == ["-DGGML_METAL=ON"]  # llama.cpp's own CPU defaults on macOS: no x86 flags
    cpu = subprocess.run(script, env={**env, "LOCALSPEC_GPU": "cpu"}, capture_output=True, text=True).stdout.split()
    assert cpu == ["-DGGML_METAL=OFF"]
    linux = subprocess.run(script, env={**env, "PATH": os.environ["PATH"]}, capture_output=True, text=True).stdout
    assert "METAL" not in linux


def test_apple_silicon_is_macos_on_arm64(monkeypatch):
    from localspec.models import hub

    for system, machine, expected in (
        ("darwin", "arm64", True),
        ("darwin", "x86_64", False),
        ("linux", "arm64", False),
    ):
        monkeypatch.setattr(hub.sys, "platform", system)
        monkeypatch.setattr(hub.platform, "machine", lambda m=machine: m)
        assert hub.on_apple_silicon() is expected
