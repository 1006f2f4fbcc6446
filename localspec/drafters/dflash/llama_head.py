"""A DFlash / DSpark head in llama.cpp's GGUF layout (architecture `dflash`), run beside a llama.cpp target.

The head is a second model with its own context whose ``ctx_other`` is the target's (its token embedding and
LM head). One DECODE graph, two modes by batch kind: a batch of feature rows (the inputs of the target
layers `dflash.target_layers`, concatenated) at positions j.. goes through ``fc`` and ``enc.output_norm``
and writes every layer's keys and values at those positions (``inject``); a batch of tokens
[anchor, mask, ...] at P.. runs the block with the context's keys and the block's own, bidirectionally
(``llama_set_causal_attn(ctx, false)``), and gives logits for every row (``block``). With a Markov head
(DSpark, `markov_w1`) llama.cpp adds each row's bias in the graph along the argmax chain, and a
confidence head's sigmoid comes back as the rows' "nextn" embeddings. The block's cells are removed
after it, so the cache holds the context only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from localspec.backends.llama_cpp.side import (
    DECODE,
    FLASH_ATTN_OFF,
    GGML_F32,
    SideContext,
    embd,
    side_metadata,
    side_params,
)
from localspec.drafters.dflash.layout import DFlashLayout
from localspec.errors import ConfigError, ModelError


@dataclass(frozen=True)
class LlamaBlock:
    """A drafted block's rows: logits [rows, V] (Markov bias included) and DSpark's confidences."""

    logits: np.ndarray
    confidence: np.ndarray | None
    first: int  # the row of the first drafted token

    def row(self, i: int, prev: int) -> tuple[np.ndarray, float | None]:
        """The i-th drafted token's logits and confidence; llama.cpp conditioned them on the argmax chain."""
        conf = None if self.confidence is None else float(self.confidence[self.first + i])
        return self.logits[self.first + i], conf


class LlamaDFlashHead(SideContext):
    what = "the DFlash head"

    def __init__(self, path: Path, target) -> None:
        from localspec.backends.gguf_meta import read_tensor_names
        from localspec.backends.llama_cpp.capi import last_error
        from localspec.backends.llama_cpp.ext import ext, target_layer_ids

        how = "`localspec convert-dflash` writes one from a Hugging Face DFlash/DSpark folder"
        self.path, meta = side_metadata(path, "dflash", "a DFlash/DSpark head", how)
        _, names = read_tensor_names(self.path)
        refused = [n for n in ("selector_hidden.weight", "hc_head_fn.weight") if n in names]
        if refused:
            raise ConfigError(f"{self.path.name} is a DFlash2 or DeepSeek-V4 DSpark head, which localspec does not run")
        self._load_model(self.path, target)
        lib = self._lib
        vocab = lib.llama_model_get_vocab(self._model)
        try:
            if lib.llama_vocab_n_tokens(vocab) != target.vocab_size:
                raise ConfigError(
                    f"{self.path.name} has a {lib.llama_vocab_n_tokens(vocab)}-token vocabulary, "
                    f"{target.model_name} {target.vocab_size}: the head belongs to another model"
                )
            hidden = lib.llama_model_n_embd(self._model)
            layers = tuple(target_layer_ids(self._model))
            if hidden != target.hidden_size or not layers or not all(0 <= i < target.n_layers for i in layers):
                raise ConfigError(
                    f"{self.path.name} is {hidden} wide and reads the inputs of layers {list(layers)}; "
                    f"{target.model_name} is {target.hidden_size} wide with layers 0..{target.n_layers - 1}: "
                    f"the head belongs to another model"
                )
            markov = "markov_w1.weight" in names
            self.layout = DFlashLayout(
                kind="dspark" if markov else "dflash",
                block_size=int(meta.get("dflash.block_size", 16)),
                mask_token=int(lib.llama_vocab_mask(vocab)),
                extract_layers=layers,
                n_layers=lib.llama_model_n_layer(self._model),
                hidden=hidden,
                sample_from_anchor=markov and str(meta.get("dflash.sample_from_anchor", True)).lower() == "true",
                causal=str(meta.get("dflash.attention.causal", False)).lower() == "true",
                markov_rank=1 if markov else 0,
                confidence=markov and "conf_proj.weight" in names,
            )
            if not 0 <= self.layout.mask_token < target.vocab_size:
                raise ConfigError(f"{self.path.name} names no mask token (tokenizer.ggml.mask_token_id)")
        except ConfigError:
            self.close()
            raise
        self.feature_layers = layers
        self.width = len(layers) * target.hidden_size
        cparams = side_params(target, target.n_ctx + self.layout.block_size, 1, mtp=False)
        cparams.type_k = cparams.type_v = GGML_F32  # small: a float32 cache computes as the torch head does
        cparams.flash_attn_type = FLASH_ATTN_OFF
        self._ctx = lib.llama_init_from_model(self._model, cparams)
        if not self._ctx:
            self.close()
            raise ModelError(f"llama.cpp could not create a context for the DFlash head: {last_error()}")
        lib.llama_set_causal_attn(self._ctx, self.layout.causal)
        self._mem = lib.llama_get_memory(self._ctx)
        self._nextn = ext("llama_get_embeddings_nextn") if self.layout.confidence else None
        if self._nextn is not None:
            ext("llama_set_embeddings_nextn")(self._ctx, True, True)
        self._batch = lib.llama_batch_ext_init(self._ctx)
        self.n_batch, self.vocab_size = target.n_batch, target.vocab_size
        self._lo = 0

    def inject(self, rows: np.ndarray, start: int) -> None:
        """The target's features [n, width] of positions start.. into the head's cache."""
        rows = np.ascontiguousarray(rows, dtype=np.float32)
        if rows.shape[1] != self.width:
            raise ModelError(f"{self.what} reads {self.width}-wide features, got {rows.shape[1]}")
        lib = self._lib
        lib.llama_memory_seq_rm(self._mem, 0, start, -1)
        for begin in range(0, len(rows), self.n_batch):
            lib.llama_batch_ext_clear(self._batch)
            for i, row in enumerate(rows[begin : begin + self.n_batch]):
                idx = lib.llama_batch_ext_add_embd(self._batch, 0, embd(row))
                self._place(idx, start + begin + i, False)
            self._process(DECODE)

    def block(self, anchor: int, pos: int, rows: int) -> LlamaBlock:
        """Run [anchor, mask x (rows-1)] at positions pos..; every row is an output (the graph selects none)."""
        lib = self._lib
        lib.llama_memory_seq_rm(self._mem, 0, pos, -1)
        lib.llama_batch_ext_clear(self._batch)
        for i in range(rows):
            idx = lib.llama_batch_ext_add_token(self._batch, 0, anchor if i == 0 else self.layout.mask_token)
            self._place(idx, pos + i, True)
        try:
            self._process(DECODE)
            logits = self._rows(lib.llama_get_logits(self._ctx), rows, self.vocab_size)
            conf = None
            if self._nextn is not None:
                conf = self._rows(self._nextn(self._ctx), rows, self.layout.hidden)[:, 0]
        finally:
            lib.llama_memory_seq_rm(self._mem, 0, pos, -1)
        return LlamaBlock(logits, conf, 0 if self.layout.sample_from_anchor else 1)

    def close(self) -> None:
        from localspec.backends.llama_cpp.capi import free

        self._free_batch()
        free(self)
