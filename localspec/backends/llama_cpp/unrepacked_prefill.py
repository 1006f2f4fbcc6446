"""Prompts prefilled on the file's own weight layout, decoded on the repacked one.

llama.cpp repacks Q4_K weights at load for its fastest 1-token kernels, and on some CPUs those repacked kernels
prefill a prompt far slower than the kernels that read the file's own layout: on a 2-core AVX-512 EPYC,
Qwen2.5-Coder-1.5B Q4_K_M prefilled 600 tokens in 5.7 s repacked and 3.1 s as in the file, while one decode step
took 43 ms repacked and 54 ms as in the file (benchmarks/kernel_costs.py, 2026-12-07). Where
localspec/backends/llama_cpp/layout.json says unrepacked prefill wins for this CPU kind and quantization, the
backend loads the file a second time, unrepacked and memory-mapped (its weights are the file's own pages, not a
copy), with a context of its own. A run of prompt tokens long enough to pay for the copies (``takes``) is
prefilled there, and the sequence's cache (its keys and values: about 10 ms for 500 tokens of a 1.5B model) is
then copied into the main context, which decodes on.

The second context mirrors the main one's cache: what it already holds of it is kept, anything else is copied
over from the main context first (an agent's long prompt grows by a few hundred tokens a round). The two
layouts round differently, so an answer may differ from one prefilled on repacked weights where two tokens
tie to within that rounding, as it would between two builds; `--exact` loads unrepacked weights for everything
and never uses this.
"""

from __future__ import annotations

from collections.abc import Sequence

from localspec.backends.llama_cpp.capi import (
    context_params,
    fill_batch,
    free,
    last_error,
    load_failed,
    seq_state,
    set_seq_state,
)
from localspec.errors import ModelError
from localspec.types import common_prefix

MIN_TOKENS = 32  # a shorter run of prompt tokens is prefilled in the main context (the copies would cost more)
# ...as is one shorter than 1/COPY_RATIO of the context it ends: the whole sequence's cache is copied back (and first
# over, where the second context lacks some of it: 0.1 s for 8,000 tokens of a 1.5B model), while what the
# unrepacked layout saves shrinks as attention over a long context takes over (2-core EPYC: 4,096 prompt tokens
# 24 s against 32-37 s, but 400 tokens after 8,000 cached 5.5-6.5 s against 5.9-6.6 s)
COPY_RATIO = 10
SHARE = 0.15  # the second context's cache takes at most this share of the memory available at load
MIN_CTX = 1024  # ...and is made only where at least this many tokens fit
MAX_CTX = 16384  # ...and holds at most this many (a bigger one took 2-3 s more to load, at 32768, on a 2-core EPYC)


def prefill_ctx(main_ctx: int, kv_bytes_per_token: int, available: int | None) -> int:
    """The second context's size beside a main context of ``main_ctx`` tokens: as large, at most MAX_CTX, its cache
    in SHARE of the ``available`` memory (unknown: not bounded by it); 0 where fewer than MIN_CTX tokens (and
    fewer than the main context's) fit."""
    fits = int(SHARE * available // kv_bytes_per_token) if available and kv_bytes_per_token > 0 else main_ctx
    n_ctx = min(main_ctx, MAX_CTX, fits // 256 * 256)
    return 0 if n_ctx < MIN_CTX and n_ctx < main_ctx else n_ctx


class UnrepackedPrefill:
    """The model loaded again as in its file, and a context that prefills prompts for the main one."""

    def __init__(self, lib, path, n_ctx: int, n_batch: int, threads: int) -> None:
        self._lib, self._ctx, self._model, self._batch = lib, None, None, None
        self._scratch: list = [None]  # the buffer each copy between the two contexts goes through (capi.seq_state)
        mparams = lib.llama_model_default_params()
        mparams.n_gpu_layers, mparams.use_extra_bufts = 0, False
        self._model = lib.llama_model_load_from_file(str(path).encode(), mparams)
        if not self._model:
            raise load_failed(path)
        cparams = context_params(lib, n_ctx, n_batch, 1, threads)
        cparams.kv_unified = True  # as the main context's cache: the sequence's state is copied between them
        self._ctx = lib.llama_init_from_model(self._model, cparams)
        if not self._ctx:
            self.close()
            raise ModelError(f"llama.cpp could not create a prefill context of {n_ctx} tokens: {last_error()}")
        self._mem = lib.llama_get_memory(self._ctx)
        self._batch = lib.llama_batch_init(n_batch, 0, 1)
        self.n_ctx, self.n_batch = n_ctx, n_batch
        self.tokens: list[int] = []  # what its cache holds

    def takes(self, cached: Sequence[int], tokens: Sequence[int]) -> bool:
        """Whether prefilling ``tokens`` after ``cached`` pays here (and fits)."""
        total = len(cached) + len(tokens)
        return self._ctx is not None and len(tokens) >= max(MIN_TOKENS, total / COPY_RATIO) and total <= self.n_ctx

    def prefill(self, main_ctx, cached: Sequence[int], tokens: Sequence[int], progress=None):
        """Prefill ``tokens`` after ``cached`` (what the main context ``main_ctx`` holds in sequence 0); the
        sequence's state for the main context (capi.seq_state: in this object's scratch buffer, valid until its
        next copy)."""
        lib = self._lib
        keep = common_prefix(self.tokens, cached)
        self._cut(keep if keep == len(cached) else 0)
        if keep < len(cached):  # the main context holds what this one lacks (an answer decoded there)
            if not set_seq_state(lib, self._ctx, seq_state(lib, main_ctx, self._scratch)):
                self._cut(0)
                raise ModelError("llama.cpp could not copy the cache into the prefill context")
            self.tokens = [int(t) for t in cached]
        done = 0
        for begin in range(0, len(tokens), self.n_batch):
            chunk = tokens[begin : begin + self.n_batch]
            start = len(self.tokens)
            fill_batch(self._batch, [(chunk, False, range(start, start + len(chunk)), [(0,)] * len(chunk))])
            ret = lib.llama_decode(self._ctx, self._batch)
            if ret != 0:
                self._cut(start)
                raise ModelError(f"llama_decode failed with code {ret} in the prefill context: {last_error()}")
            self.tokens.extend(int(t) for t in chunk)
            done += len(chunk)
            if progress is not None:
                progress(done, len(tokens))
        return seq_state(lib, self._ctx, self._scratch)

    def _cut(self, keep: int) -> None:
        self._lib.llama_memory_seq_rm(self._mem, 0, keep, -1)
        del self.tokens[keep:]

    def close(self) -> None:
        if self._batch is not None:
            self._lib.llama_batch_free(self._batch)
            self._batch = None
        self._scratch = [None]
        free(self)
