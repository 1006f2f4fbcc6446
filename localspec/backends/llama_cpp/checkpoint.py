"""A saved recurrent state, the rollback of recurrent targets that llama.cpp keeps no per-position snapshots
for (Mamba, RWKV, Qwen3-Next and other architectures outside ``llm_arch_supports_rs_rollback``).

Before a verify window the backend saves the state of sequence 0 with ``llama_state_seq_get_data_ext`` and
the PARTIAL_ONLY flag, which copies the recurrent part alone (a hybrid model's attention cache is cut by
position as usual). A cut inside the window restores it, which puts the recurrent state back at the start
of the window, cuts the attention cache there, and feeds the kept positions again: one batched call of
the accepted tokens, instead of a prefill of the whole context.
"""

from __future__ import annotations

import ctypes

PARTIAL_ONLY = 1  # LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY: recurrent (and SWA) state only


class StateCheckpoint:
    def __init__(self, lib, ctx) -> None:
        self._lib, self._ctx = lib, ctx
        self._buffer: ctypes.Array | None = None
        self._written = 0
        self.position: int | None = None  # cached tokens when it was saved (None: nothing saved)

    @staticmethod
    def supported(lib) -> bool:
        """This llama-cpp-python binds the partial state calls (0.3.36 does)."""
        names = ("llama_state_seq_get_size_ext", "llama_state_seq_get_data_ext", "llama_state_seq_set_data_ext")
        return all(hasattr(lib, n) for n in names)

    def save(self, position: int) -> None:
        lib = self._lib
        size = lib.llama_state_seq_get_size_ext(self._ctx, 0, PARTIAL_ONLY)
        if self._buffer is None or len(self._buffer) < size:
            self._buffer = (ctypes.c_uint8 * size)()
        self._written = lib.llama_state_seq_get_data_ext(self._ctx, self._buffer, size, 0, PARTIAL_ONLY)
        self.position = position if self._written else None

    def restore(self) -> bool:
        """Put the saved state back; False if llama.cpp refused it (the caller prefills instead)."""
        if self.position is None:
            return False
        read = self._lib.llama_state_seq_set_data_ext(self._ctx, self._buffer, self._written, 0, PARTIAL_ONLY)
        return read == self._written

    def drop(self) -> None:
        self.position = None
