"""The target's own MTP (multi-token prediction, "nextn") layer run by llama.cpp: a second context of type
MTP on the target's model (Qwen3.5/3.6, GLM-4.5, DeepSeek-V3 GGUFs that carry the layer, loaded with
``load_mtp``). Its cache holds the MTP layer's keys and values only, so it is cut back at any position.

Slot P of that cache takes the pair (token P, the target's hidden row of position P - 1); its output is the
logits of the token after P and its own hidden row, which stands in for the target's when the layer drafts
the next position from its own guess.
"""

from __future__ import annotations

import time

import numpy as np

from localspec.backends.llama_side import DECODE, SideContext
from localspec.errors import ConfigError, ModelError

SLACK = 72  # cache cells past the target's context: a draft of up to 64 tokens and the pending one


class LlamaMtpHead(SideContext):
    what = "the MTP layer"

    def __init__(self, target) -> None:
        from localspec.backends.llama_cpp import _last_error
        from localspec.backends.llama_ext import ext

        if not getattr(target, "mtp_layers", 0):
            raise ConfigError(
                f"{target.model_name} has no MTP layers ({target.metadata('general.architecture')}."
                f"nextn_predict_layers is 0 in its GGUF): use a GGUF that keeps them (e.g. a Qwen3.5 '-MTP' "
                f"GGUF) or another drafter"
            )
        lib = self._lib = target._lib
        cparams = lib.llama_context_default_params()
        cparams.n_ctx = target.n_ctx + SLACK
        cparams.n_batch = cparams.n_ubatch = target.n_batch
        cparams.n_seq_max = 1
        cparams.n_threads = cparams.n_threads_batch = target.n_threads
        cparams.no_perf = True
        cparams.ctx_type = lib.LLAMA_CONTEXT_TYPE_MTP
        cparams.ctx_other = target._ctx
        self._ctx = lib.llama_init_from_model(target._model, cparams)
        if not self._ctx:
            raise ModelError(f"llama.cpp could not create the MTP context of {target.model_name}: {_last_error()}")
        try:
            self._mem = lib.llama_get_memory(self._ctx)
            ext("llama_set_embeddings_nextn")(self._ctx, True, True)  # rows of the output tokens only
            self._nextn = ext("llama_get_embeddings_nextn")
            self._batch = lib.llama_batch_ext_init(self._ctx)
            if not self._batch:
                raise ModelError(f"llama.cpp could not make a batch for the MTP context: {_last_error()}")
        except BaseException:
            self.close()
            raise
        self.n_batch, self.hidden_size, self.vocab_size = target.n_batch, target.hidden_size, target.vocab_size

    def feed(self, tokens, rows: np.ndarray, start: int) -> None:
        """Put the pairs (tokens[i], rows[i]) into slots start.., dropping whatever the cache held from
        ``start`` on; nothing is computed past the layer's keys and values."""
        lib = self._lib
        lib.llama_memory_seq_rm(self._mem, 0, start, -1)
        for begin in range(0, len(tokens), self.n_batch):
            lib.llama_batch_ext_clear(self._batch)
            for i in range(begin, min(len(tokens), begin + self.n_batch)):
                self._add(tokens[i], rows[i], start + i, False)
            self._process(DECODE)

    def step(self, token: int, row: np.ndarray, pos: int) -> tuple[np.ndarray, np.ndarray]:
        """The pair (token, row) at slot ``pos`` (the cache cut back to it): (logits [V], hidden row [H])."""
        lib = self._lib
        lib.llama_memory_seq_rm(self._mem, 0, pos, -1)
        lib.llama_batch_ext_clear(self._batch)
        self._add(token, row, pos, True)
        self._process(DECODE)
        logits = self._rows(lib.llama_get_logits(self._ctx), 1, self.vocab_size)[0]
        return logits, self._rows(self._nextn(self._ctx), 1, self.hidden_size)[0]

    def time_step(self) -> float:
        """Seconds of one drafted token, timed on a throwaway slot (the first call allocates: not timed)."""
        zero = np.zeros(self.hidden_size, np.float32)
        self.step(0, zero, 0)
        t0 = time.perf_counter()
        self.step(0, zero, 1)
        seconds = time.perf_counter() - t0
        self._lib.llama_memory_seq_rm(self._mem, 0, -1, -1)
        return seconds

    def close(self) -> None:
        self._free_batch()
        if self._ctx:
            self._lib.llama_free(self._ctx)  # the model is the target's
            self._ctx = None
