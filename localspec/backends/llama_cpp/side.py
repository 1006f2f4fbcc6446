"""A second llama.cpp context that runs beside the target's and is fed rows as well as tokens: an EAGLE-3
head (its own GGUF model) or the target's own MTP layers (a context of type MTP on the target's model).
Both use llama.cpp's extended batch (``llama_batch_ext_*``, ``llama_process``): a token may carry a row of
the target's hidden states, and positions and outputs are set per row."""

from __future__ import annotations

import ctypes

import numpy as np

from localspec.errors import ModelError

ENCODE, DECODE = 0, 1  # enum llama_process_type
GGML_F32 = 0  # enum ggml_type
FLASH_ATTN_OFF = 0  # enum llama_flash_attn_type


def side_metadata(path, arch: str, what: str, how: str) -> tuple:
    """(checked path, metadata) of a GGUF that must be of architecture ``arch``; ``how``: where to get one."""
    from localspec.backends.gguf_meta import read_metadata
    from localspec.backends.llama_cpp.capi import check_gguf

    path = check_gguf(path)
    meta = read_metadata(path)
    found = meta.get("general.architecture")
    if found != arch:
        raise ModelError(f"{path.name} is a {found!r} model, not {what} (GGUF architecture {arch!r}); {how}")
    return path, meta


def side_params(target, n_ctx: int, n_seq_max: int = 1, mtp: bool = True):
    """Context parameters of a side context beside ``target``: its batch and threads, ``ctx_other`` = the
    target's context, of type MTP unless ``mtp`` is False."""
    from localspec.backends.llama_cpp.capi import context_params

    lib = target._lib
    cparams = context_params(lib, n_ctx, target.n_batch, n_seq_max, target.n_threads)
    if mtp:
        cparams.ctx_type = lib.LLAMA_CONTEXT_TYPE_MTP
    cparams.ctx_other = target._ctx
    return cparams


class SideContext:
    """The batch plumbing of such a context; ``what`` names it in errors ("the EAGLE-3 head")."""

    what = "the side context"
    _lib = _model = _ctx = _batch = _mem = None
    _lo = 0

    def _load_model(self, path, target) -> None:
        """The side context's own GGUF model, with the target's library and GPU layers."""
        from localspec.backends.llama_cpp.capi import last_error

        lib = self._lib = target._lib
        self._model = self._ctx = self._batch = None
        params = lib.llama_model_default_params()
        params.n_gpu_layers = target.info.gpu_layers
        self._model = lib.llama_model_load_from_file(str(path).encode(), params)
        if not self._model:
            raise ModelError(f"llama.cpp could not load {self.what} {path}: {last_error()}")

    # the first cache slot the drafter has filled; slots before it belong to an earlier context
    @property
    def lo(self) -> int:
        return self._lo

    @lo.setter
    def lo(self, value: int) -> None:
        if value != self._lo:
            self._lib.llama_memory_seq_rm(self._mem, 0, -1, -1)
        self._lo = value

    def _place(self, idx: int, pos: int, output: bool) -> None:
        lib = self._lib
        if idx < 0:
            raise ModelError(f"{self.what}'s batch refused a row ({idx})")
        lib.llama_batch_ext_set_pos(self._batch, idx, ctypes.byref(ctypes.c_int32(pos)))
        lib.llama_batch_ext_set_output_logits(self._batch, idx, output)

    def _add(self, token: int, row: np.ndarray, pos: int, output: bool, seq: int = 0) -> None:
        """A token with its hidden-state row at ``pos``."""
        lib = self._lib
        idx = lib.llama_batch_ext_add_token(self._batch, seq, int(token))
        if idx < 0 or not lib.llama_batch_ext_set_embd_token(self._batch, idx, embd(row)):
            raise ModelError(f"{self.what} refused the input at position {pos}")
        self._place(idx, pos, output)

    def _process(self, kind: int) -> None:
        from localspec.backends.llama_cpp.capi import last_error

        ret = self._lib.llama_process(self._ctx, kind, self._batch)
        if ret != 0:
            raise ModelError(f"{self.what}'s llama_process failed ({ret}): {last_error()}")

    def _rows(self, ptr, n: int, width: int) -> np.ndarray:
        if not ptr:
            raise ModelError(f"{self.what} returned no output rows")
        return np.ctypeslib.as_array(ptr, shape=(n, width)).copy()

    def _free_batch(self) -> None:
        if self._batch is not None:
            self._lib.llama_batch_ext_free(self._batch)
            self._batch = None


def embd(row: np.ndarray):
    """A llama_embd view of one float32 row (kept alive by the caller's array)."""
    import llama_cpp

    row = np.ascontiguousarray(row, dtype=np.float32)
    return llama_cpp.llama_embd(row.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), 1, row.shape[-1])
