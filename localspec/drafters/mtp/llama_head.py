"""MTP drafting contexts on llama.cpp.

The target's own MTP (multi-token prediction, "nextn") layer (LlamaMtpHead): a second context of type MTP
on the target's model (Qwen3.5/3.6, GLM-4.5, DeepSeek-V3 GGUFs that carry the layer, loaded with
``load_mtp``). Its cache holds the MTP layer's keys and values only, so it is cut back at any position.
Slot P of that cache takes the pair (token P, the target's hidden row of position P - 1); its output is the
logits of the token after P and its own hidden row, which stands in for the target's when the layer drafts
the next position from its own guess.

A model with several MTP layers (Step-3.5 and the other CHAINED_ARCHS: their llama.cpp graphs run the layer
picked by ``llama_set_nextn_layer_offset``) chains them as llama.cpp's own driver does: layer i
drafts token i + 1, so a draft is at most as long as the layers are many. Every layer's cache takes the
target's pairs (each feed runs once per layer), and draft step i decodes the whole draft so far under layer
i — the pending token with the target's row, then each draft token with the row of the layer that drafted
it — since that layer's cache has nothing in the draft's positions yet.

A Gemma-4 assistant (LlamaAssistantHead) is a small model of its own that reads the target's cache.
"""

from __future__ import annotations

import time

import numpy as np

from localspec.backends.llama_cpp.side import DECODE, SideContext, side_metadata, side_params
from localspec.errors import ConfigError, ModelError

SLACK = 72  # cache cells past the target's context: a draft of up to 64 tokens and the pending one
# GGUF architectures whose llama.cpp MTP graph runs the layer llama_set_nextn_layer_offset picks; the others
# run one MTP layer and abort on a model that declares more
CHAINED_ARCHS = frozenset({"step35", "deepseek32", "deepseek4", "glm-dsa", "glm4moe", "bailingmoe3", "hy_v3", "mimo2"})


class _RowHead(SideContext):
    """What both share: a context made beside the target that reads (token, hidden row) pairs and gives
    logits and a row of the target's width for its output token."""

    same_position = False  # every draft step at the pending token's position (else one position each)
    own_cache = True  # it keeps the layer's own keys and values (else it reads the target's cache)
    max_draft: int | None = None  # the longest draft it makes (chained MTP layers: one token each)

    def _open(self, model, cparams, target) -> None:
        from localspec.backends.llama_cpp.capi import last_error
        from localspec.backends.llama_cpp.ext import ext

        lib = self._lib
        self._ctx = lib.llama_init_from_model(model, cparams)
        if not self._ctx:
            raise ModelError(f"llama.cpp could not create the context of {self.what}: {last_error()}")
        self._mem = lib.llama_get_memory(self._ctx)
        ext("llama_set_embeddings_nextn")(self._ctx, True, True)  # rows of the output tokens only
        self._nextn = ext("llama_get_embeddings_nextn")
        self._batch = lib.llama_batch_ext_init(self._ctx)
        if not self._batch:
            raise ModelError(f"llama.cpp could not make a batch for {self.what}: {last_error()}")
        self.target = target
        self.n_batch, self.hidden_size, self.vocab_size = target.n_batch, target.hidden_size, target.vocab_size

    def step(self, token: int, row: np.ndarray, pos: int, index: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """Draft step ``index``: the pair (token, row) at slot ``pos``, its cache cut back to it: (logits [V],
        its row [H])."""
        lib = self._lib
        lib.llama_memory_seq_rm(self._mem, 0, pos, -1)
        lib.llama_batch_ext_clear(self._batch)
        self._add(token, row, pos, True)
        self._process(DECODE)
        return self._outputs()

    def _outputs(self) -> tuple[np.ndarray, np.ndarray]:
        logits = self._rows(self._lib.llama_get_logits(self._ctx), 1, self.vocab_size)[0]
        return logits, self._rows(self._nextn(self._ctx), 1, self.hidden_size)[0]

    def time_step(self) -> float:
        """Seconds of one drafted token, at the target's next position (the first call allocates: not timed)."""
        zero, pos = np.zeros(self.hidden_size, np.float32), len(self.target.cached_tokens)
        self.step(0, zero, pos)
        t0 = time.perf_counter()
        self.step(0, zero, pos)
        return time.perf_counter() - t0


class LlamaMtpHead(_RowHead):
    what = "the MTP layer"

    def __init__(self, target) -> None:
        layers = target.capabilities.mtp_layers
        if not layers:
            raise ConfigError(
                f"{target.model_name} has no MTP layers ({target.metadata('general.architecture')}."
                f"nextn_predict_layers is 0 in its GGUF): use a GGUF that keeps them (e.g. a Qwen3.5 '-MTP' "
                f"GGUF) or another drafter"
            )
        arch = target.metadata("general.architecture")
        if layers > 1 and arch not in CHAINED_ARCHS:
            raise ConfigError(
                f"{target.model_name} declares {layers} MTP layers, but llama.cpp runs one MTP layer "
                f"of a {arch} model (chained layers: {', '.join(sorted(CHAINED_ARCHS))}); use another drafter"
            )
        self._lib = target.lib
        try:
            self._open(target.model_handle, side_params(target, target.n_ctx + SLACK), target)
        except BaseException:
            self.close()
            raise
        self.target_layers = layers
        if self.target_layers > 1:
            from localspec.backends.llama_cpp.ext import ext

            self._layer = ext("llama_set_nextn_layer_offset")
            self.max_draft = self.target_layers
        self._draft: list = []  # chained layers: the pairs (token, row) of the draft being made

    def _use_layer(self, index: int) -> None:
        if self.max_draft:
            self._layer(self._ctx, index)

    def feed(self, tokens, rows: np.ndarray, start: int) -> None:
        """Put the pairs (tokens[i], rows[i]) into slots start.. of every layer's cache, dropping whatever it
        held from ``start`` on; nothing is computed past the layers' keys and values."""
        lib = self._lib
        for layer in range(self.max_draft or 1):
            self._use_layer(layer)
            lib.llama_memory_seq_rm(self._mem, 0, start, -1)
            for begin in range(0, len(tokens), self.n_batch):
                lib.llama_batch_ext_clear(self._batch)
                for i in range(begin, min(len(tokens), begin + self.n_batch)):
                    self._add(tokens[i], rows[i], start + i, False)
                self._process(DECODE)
        self._use_layer(0)

    def step(self, token: int, row: np.ndarray, pos: int, index: int = 0) -> tuple[np.ndarray, np.ndarray]:
        if not self.max_draft:
            return super().step(token, row, pos, index)
        if index >= self.max_draft:
            raise ValueError(f"draft step {index}: the model has {self.max_draft} MTP layers")
        self._draft = [*self._draft[:index], (token, row)]
        start, lib = pos - index, self._lib
        lib.llama_memory_seq_rm(self._mem, 0, start, -1)
        lib.llama_batch_ext_clear(self._batch)
        for i, (tok, r) in enumerate(self._draft):
            self._add(tok, r, start + i, i == index)
        self._use_layer(index)
        try:
            self._process(DECODE)
        finally:
            self._use_layer(0)
        return self._outputs()

    def save(self):
        from localspec.backends.llama_cpp.capi import seq_state

        return seq_state(self._lib, self._ctx)

    def load(self, state) -> bool:
        """Its cache as ``save`` left it (True), or emptied (False: None given, or llama.cpp refused it)."""
        from localspec.backends.llama_cpp.capi import set_seq_state

        self._lib.llama_memory_seq_rm(self._mem, 0, -1, -1)
        if state is None:
            return False
        if set_seq_state(self._lib, self._ctx, state):
            return True
        self._lib.llama_memory_seq_rm(self._mem, 0, -1, -1)  # whatever a refused state left
        return False

    def describe(self) -> str:
        if self.max_draft:
            return f"{self.target_layers} chained MTP layers of the target (drafts of up to {self.max_draft})"
        return "the MTP layer of the target"

    def close(self) -> None:
        self._free_batch()
        if self._ctx:
            self._lib.llama_free(self._ctx)  # the model is the target's
            self._ctx = None


class LlamaAssistantHead(_RowHead):
    """A Gemma-4 assistant drafter (GGUF architecture `gemma4-assistant`): its own small model whose context
    shares the target's KV cache (``ctx_other``: it has no keys or values of its own, its cache operations
    do nothing, and every cut of the target's cache is its cut too). It reads [target embedding of the
    token; target hidden row] and gives logits and a row of the target's width; every draft step sits at
    the pending token's position (its queries see the target's cache up to there), chaining on its row."""

    what = "the Gemma-4 assistant"
    same_position = True
    own_cache = False

    def __init__(self, path, target) -> None:
        from localspec.backends.llama_cpp.capi import last_error

        how = "--mtp-assistant takes the assistant GGUF published beside a Gemma-4 model"
        self.path, meta = side_metadata(path, "gemma4-assistant", "a Gemma-4 assistant", how)
        width = int(meta.get("gemma4-assistant.embedding_length_out", 0))
        arch = target.metadata("general.architecture")
        if arch != "gemma4" or width != target.hidden_size:
            raise ConfigError(
                f"{self.path.name} drafts for a Gemma-4 model {width} wide; {target.model_name} is a {arch} "
                f"model {target.hidden_size} wide: it belongs to another"
            )
        lib = self._lib = target.lib
        params = lib.llama_model_default_params()
        params.n_gpu_layers = target.info.gpu_layers
        self._model = lib.llama_model_load_from_file(str(self.path).encode(), params)
        if not self._model:
            raise ModelError(f"llama.cpp could not load the assistant {self.path}: {last_error()}")
        try:
            vocab = lib.llama_vocab_n_tokens(lib.llama_model_get_vocab(self._model))
            if vocab != target.vocab_size:
                raise ConfigError(
                    f"{self.path.name} has a {vocab}-token vocabulary, {target.model_name} {target.vocab_size}: "
                    f"it belongs to another model"
                )
            cparams = side_params(target, target.n_ctx, target.max_branches + 1)  # the shared cache's layout
            cparams.kv_unified = True
            self._open(self._model, cparams, target)
        except BaseException:
            self.close()
            raise

    def feed(self, tokens, rows, start: int) -> None:
        pass  # it reads the target's cache: nothing of its own to keep up

    def save(self):
        return None

    def load(self, state) -> bool:
        return True  # nothing of its own: the target's state is its state

    def describe(self) -> str:
        return f"Gemma-4 assistant {self.path.name}"

    def close(self) -> None:
        from localspec.backends.llama_cpp.capi import free

        self._free_batch()
        free(self)
