"""Batch-invariant llama.cpp on the CPU: a verify window computes each position bit for bit as a 1-token step.

Why greedy speculative output could differ from plain decoding on llama.cpp: its CPU backend computes a
1-token step and a k-token window with different kernels, which round differently (measured, build of
llama-cpp-python 0.3.36 on x86):
- weights repacked at load (Q4_K, Q4_0, IQ4_NL): a gemv for 1-3 tokens, a gemm for 4 or more;
- K-quant weights not repacked: vec_dot for fewer than 8 tokens, a tiled matmul for 8 or more;
- flash attention: a KV-split kernel for a 1-token step once 512 KV cells are in view (any context past
  256 tokens), a tiled kernel for 64 or more query tokens, a row-by-row one otherwise.
So windows differed from plain steps by up to 1.7 logits from a window of 4 tokens (Qwen2.5-Coder-1.5B
Q4_K_M) or from position 256 (every model), and greedy output flipped at near-ties.

ggml's CPU backend has a reference mode (``ggml_backend_cpu_set_use_ref``) that computes every matmul by
vec_dot and attention row by row, whatever the batch; with weights left unrepacked, a window's rows equal a
1-token step's bit for bit at every size and context length
(tests/backends/llama_cpp/test_llama_batch_invariant.py). The mode is switched per decode, so prompt
prefills keep the fast kernels: both plain and speculative decoding prefill the same tokens the same way.
Its price is in wide windows on K-quant weights (Qwen2.5-Coder-1.5B Q4_K_M: 1.1-1.5x at 4-17 tokens, 1.8x
at 33, 2.2x at 65 against llama.cpp's defaults; SmolLM2's Q4_1 about 1.0x); 1-token steps cost the same
(benchmarks/kernel_costs.py; docs/exactness.md).

llama.cpp reaches the context's CPU backend only through ``llama_context::get_sched()``, a C++ member
function libllama exports; where it or the CPU backend's switch is missing this returns None and the
exact guard's near-tie margin stands in (localspec/engine/exact.py).
"""

from __future__ import annotations

import ctypes

_GET_SCHED = (
    "_ZNK13llama_context9get_schedEv",  # Itanium C++ ABI (Linux, macOS)
    "?get_sched@llama_context@@QEBAPEAUggml_backend_sched@@XZ",
)  # MSVC x64


class CpuReferenceMode:
    """The use_ref switch of one llama.cpp context's CPU backends."""

    def __init__(self, set_use_ref, backends: list[int]) -> None:
        self._set_use_ref, self._backends, self.on = set_use_ref, backends, False

    def set(self, on: bool) -> None:
        if on != self.on:
            for backend in self._backends:
                self._set_use_ref(backend, on)
            self.on = on


def cpu_reference_mode(ctx) -> CpuReferenceMode | None:
    """The switch for context ``ctx`` (a llama_context pointer), or None where this build lacks a piece."""
    from llama_cpp import _ggml, llama_cpp

    ggml, llama_lib = _ggml.libggml, llama_cpp._lib
    get_sched = next((getattr(llama_lib, name) for name in _GET_SCHED if hasattr(llama_lib, name)), None)
    if get_sched is None or not hasattr(ggml, "ggml_backend_reg_get_proc_address"):
        return None
    get_sched.argtypes, get_sched.restype = [ctypes.c_void_p], ctypes.c_void_p
    for name, args, res in (
        ("ggml_backend_sched_get_n_backends", [ctypes.c_void_p], ctypes.c_int),
        ("ggml_backend_sched_get_backend", [ctypes.c_void_p, ctypes.c_int], ctypes.c_void_p),
        ("ggml_backend_name", [ctypes.c_void_p], ctypes.c_char_p),
        ("ggml_backend_reg_by_name", [ctypes.c_char_p], ctypes.c_void_p),
        ("ggml_backend_reg_get_proc_address", [ctypes.c_void_p, ctypes.c_char_p], ctypes.c_void_p),
    ):
        fn = getattr(ggml, name)
        fn.argtypes, fn.restype = args, res
    reg = ggml.ggml_backend_reg_by_name(b"CPU")
    address = ggml.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_cpu_set_use_ref") if reg else None
    sched = get_sched(ctypes.cast(ctx, ctypes.c_void_p).value)
    if not address or not sched:
        return None
    set_use_ref = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_bool)(address)
    backends = [
        ggml.ggml_backend_sched_get_backend(sched, i) for i in range(ggml.ggml_backend_sched_get_n_backends(sched))
    ]
    cpus = [b for b in backends if b and ggml.ggml_backend_name(b) == b"CPU"]
    if len(cpus) != len(backends):  # a GPU computes part of the graph; its kernels are not batch-invariant
        return None
    return CpuReferenceMode(set_use_ref, cpus)
