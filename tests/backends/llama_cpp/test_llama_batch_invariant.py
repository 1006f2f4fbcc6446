"""Batch-invariant kernels on K-quant weights (a tiny random Q4_K llama written in the test): the matmul
paths SmolLM2's Q4_1 never takes — llama.cpp's repacked gemm from 4 tokens, its tiled matmul from 8."""

import platform

import numpy as np
import pytest
from support.tiny_gguf import write_tiny_llama

from localspec.backends.llama_cpp.backend import LlamaCppBackend
from localspec.engine.calibrate import window_differences

pytestmark = pytest.mark.model
X86 = platform.machine().lower() in ("x86_64", "amd64")


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    return write_tiny_llama(tmp_path_factory.mktemp("gguf") / "tiny-q4k.gguf")


def long_prompt(n=300):
    return [int(t) for t in np.random.default_rng(1).integers(0, 256, n)]


def test_default_kernels_on_q4_k_are_not_batch_invariant(tiny_path):
    """What the guard is for: repacked Q4_K weights (llama.cpp's default here) give 4-token windows other
    logits than 1-token steps; unrepacked ones differ from 8 tokens (the tiled matmul)."""
    if not X86:
        pytest.skip("the repacked and tiled kernels measured are x86 ones")
    with LlamaCppBackend(tiny_path, n_ctx=1024, n_threads=2) as repacked:
        worst = window_differences(repacked, long_prompt(40), 24, (2, 4, 9))
        assert worst[4] > 0 and worst[9] > 0
    with LlamaCppBackend(tiny_path, n_ctx=1024, n_threads=2, batch_invariant=True) as plain_weights:
        plain_weights.set_batch_invariant(False)
        assert window_differences(plain_weights, long_prompt(40), 24, (9,))[9] > 0


def test_batch_invariant_kernels_on_q4_k_equal_single_steps_bit_for_bit(tiny_path):
    with LlamaCppBackend(tiny_path, n_ctx=1024, n_threads=2, batch_invariant=True) as backend:
        assert backend.capabilities.batch_invariant and "repack off" in backend.build_id()
        backend.set_batch_invariant(True)
        worst = window_differences(backend, long_prompt(), 40, (2, 4, 9, 17, 65))
        assert worst == {2: 0.0, 4: 0.0, 9: 0.0, 17: 0.0, 65: 0.0}
        assert window_differences(backend, long_prompt(), 24, (9,), rollback=True) == {9: 0.0}
