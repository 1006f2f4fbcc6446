"""An EAGLE-3 head in llama.cpp's GGUF layout (architecture `eagle3`), run by llama.cpp beside the target.

The head is a second llama.cpp model with its own context whose ``ctx_other`` is the target's, so it reads
the target's token embedding (and LM head) when it has none of its own. Two graphs:
- ENCODE: the target's features (inputs of three layers, concatenated) through ``fc`` give g rows;
- DECODE: slot P of the head's KV cache takes the pair (token P+1, g P) at position P; the output is the
  next-token logits over the target's vocabulary (outside the draft vocabulary: -inf, via ``d2t``) and the
  pre-norm state, which is the g of the next drafted position.

The same interface as the torch heads (eagle_heads.py): ``fuse``, ``step``, ``logits``, ``top``, ``tree``,
``lo``; so the one EAGLE drafter (eagle.py) drives both. A step keeps only its last row (the drafter reads
no other). The context is sequence 0 of the head's cache; an EAGLE-2 tree gives each expanded node a
sequence of its own, a copy of its parent's (the context and the node's ancestors) plus the node, so that a
node sees just what tree attention would show it; they are all removed when the tree is drafted, and never
before, so that no node lands in a freed cell ahead of a cell it attends to (a llama.cpp hazard measured
in backends/llama_cpp.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from localspec.backends.llama_cpp.side import (
    DECODE,
    ENCODE,
    FLASH_ATTN_OFF,
    GGML_F32,
    SideContext,
    embd,
    side_metadata,
    side_params,
)
from localspec.errors import ConfigError, ModelError

TREE_SEQS = 63  # expanded tree nodes the head's cache holds (a sequence each, beside sequence 0)
SLACK = TREE_SEQS + 1  # head cache cells past the target's context (a drafted chain or tree)


@dataclass(frozen=True)
class HeadOut:
    """The head's output after one position: pre-norm state [1, H] and logits [1, V]."""

    hidden: np.ndarray
    logits: np.ndarray

    def __getitem__(self, index) -> HeadOut:
        return HeadOut(self.hidden[index], self.logits[index])


class LlamaEagle3Head(SideContext):
    version = 3
    what = "the EAGLE-3 head"

    def __init__(self, path: Path, target) -> None:
        from localspec.backends.llama_cpp.capi import last_error
        from localspec.backends.llama_cpp.ext import ext, target_layer_ids

        how = "`localspec convert-eagle` writes one from a Hugging Face EAGLE-3 folder"
        self.path, meta = side_metadata(path, "eagle3", "an EAGLE-3 head", how)
        width = int(meta.get("eagle3.target_hidden_size", 0))
        if width != target.hidden_size:
            raise ConfigError(
                f"{self.path.name} was made for a target of hidden size {width}; {target.model_name} has "
                f"{target.hidden_size}: the head belongs to another model"
            )
        self._load_model(self.path, target)
        lib = self._lib
        vocab = lib.llama_vocab_n_tokens(lib.llama_model_get_vocab(self._model))
        if vocab != target.vocab_size:
            self.close()
            raise ConfigError(
                f"{self.path.name} has a {vocab}-token vocabulary, {target.model_name} {target.vocab_size}: "
                f"the head belongs to another model"
            )
        self.hidden_size = lib.llama_model_n_embd(self._model)
        self.feature_layers = tuple(target_layer_ids(self._model))
        bad = [i for i in self.feature_layers if not 0 <= i < target.n_layers]
        if len(self.feature_layers) != 3 or bad:
            self.close()
            raise ConfigError(
                f"{self.path.name} reads the inputs of layers {list(self.feature_layers)}; {target.model_name} "
                f"has layers 0..{target.n_layers - 1}: the head belongs to another model"
            )
        if self.hidden_size != target.hidden_size:
            self.close()
            raise ConfigError(
                f"{self.path.name} is {self.hidden_size} wide, {target.model_name} {target.hidden_size}: "
                f"the head belongs to another model"
            )
        cparams = side_params(target, target.n_ctx + SLACK, 1 + TREE_SEQS, mtp=False)
        cparams.kv_unified = True  # tree sequences share the context's cells
        # one layer: a float32 cache and plain attention cost little, and compute as the torch head does
        # (llama.cpp's flash attention rounds the queries to half precision: 1e-4..1e-3 off)
        cparams.type_k = cparams.type_v = GGML_F32
        cparams.flash_attn_type = FLASH_ATTN_OFF
        self._ctx = lib.llama_init_from_model(self._model, cparams)
        if not self._ctx:
            self.close()
            raise ModelError(f"llama.cpp could not create a context for the EAGLE-3 head: {last_error()}")
        self._mem = lib.llama_get_memory(self._ctx)
        ext("llama_set_embeddings_nextn")(self._ctx, True, True)  # pre-norm rows of the output tokens
        self._nextn = ext("llama_get_embeddings_nextn")
        self._batch = lib.llama_batch_ext_init(self._ctx)
        self.n_batch, self.vocab_size = target.n_batch, target.vocab_size
        self._lo = 0

    def fuse(self, rows) -> np.ndarray:
        """g rows [n, H] for target features [n, 3 x target hidden]."""
        rows = np.ascontiguousarray(rows, dtype=np.float32)
        out = np.empty((len(rows), self.hidden_size), np.float32)
        lib = self._lib
        for start in range(0, len(rows), self.n_batch):
            chunk = rows[start : start + self.n_batch]
            lib.llama_batch_ext_clear(self._batch)
            pos = lib.llama_memory_seq_pos_max(self._mem, 0) + 1  # the encoder ignores positions
            for i, row in enumerate(chunk):
                idx = lib.llama_batch_ext_add_embd(self._batch, 0, embd(row))
                self._place(idx, pos + i, True)
            self._process(ENCODE)
            out[start : start + len(chunk)] = self._rows(self._nextn(self._ctx), len(chunk), self.hidden_size)
        return out

    def step(self, tokens: Sequence[int], hidden, start: int) -> HeadOut:
        """Put the pairs (tokens[i], hidden[i]) into slots start.. and return the output after the last."""
        rows = np.ascontiguousarray(hidden.hidden if isinstance(hidden, HeadOut) else hidden, dtype=np.float32)
        lib = self._lib
        lib.llama_memory_seq_rm(self._mem, 0, start, -1)
        n = len(tokens)
        # the eagle3 graph selects no output rows: an output flag copies its first rows, so the last row,
        # the one whose output is read, goes in a batch of its own
        for begin, end in [*((b, min(n - 1, b + self.n_batch)) for b in range(0, n - 1, self.n_batch)), (n - 1, n)]:
            lib.llama_batch_ext_clear(self._batch)
            for i in range(begin, end):
                self._add(tokens[i], rows[i], start + i, i == n - 1)
            self._process(DECODE)
        logits = self._rows(lib.llama_get_logits(self._ctx), 1, self.vocab_size)
        return HeadOut(self._rows(self._nextn(self._ctx), 1, self.hidden_size), logits)

    def logits(self, out: HeadOut) -> np.ndarray:
        return out.logits

    def top(self, out: HeadOut, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The k best next tokens after each row: (log-probabilities, token ids), [rows, k] each, best first."""
        logits = out.logits
        peak = logits.max(-1, keepdims=True)
        lp = logits - peak - np.log(np.exp(logits - peak).sum(-1, keepdims=True))
        ids = np.argpartition(-lp, k - 1, axis=-1)[:, :k]
        ids = np.take_along_axis(ids, np.argsort(-np.take_along_axis(lp, ids, -1), axis=-1), -1)
        return np.take_along_axis(lp, ids, -1), ids

    @staticmethod
    def max_tree_depth(width: int) -> int:
        return 1 + TREE_SEQS // width  # the first depth needs no head step

    def tree(self, base: int) -> LlamaTree:
        return LlamaTree(self)

    def close(self) -> None:
        from localspec.backends.llama_cpp.capi import free

        self._free_batch()
        free(self)


class LlamaTree:
    """One tree's expansion: each expanded node is decoded in a new sequence, a copy of its parent's."""

    def __init__(self, head: LlamaEagle3Head) -> None:
        self.head = head
        self.seq_of: dict[int, int] = {}  # expanded node -> its sequence

    def step(self, tokens: Sequence[int], inputs: Sequence[HeadOut], nodes, parents, position: int) -> HeadOut:
        head, lib = self.head, self.head._lib
        if len(self.seq_of) + len(nodes) > TREE_SEQS:
            raise ModelError(f"an EAGLE tree expands more than {TREE_SEQS} nodes on llama.cpp")
        rows = np.ascontiguousarray(np.concatenate([x.hidden for x in inputs]), dtype=np.float32)
        lib.llama_batch_ext_clear(head._batch)
        for r, node in enumerate(nodes):
            seq = self.seq_of[node] = len(self.seq_of) + 1
            parent = parents[node]
            lib.llama_memory_seq_cp(head._mem, 0 if parent < 0 else self.seq_of[parent], seq, -1, -1)
            head._add(tokens[r], rows[r], position, True, seq)
        head._process(DECODE)
        n = len(nodes)
        logits = head._rows(lib.llama_get_logits(head._ctx), n, head.vocab_size)
        return HeadOut(head._rows(head._nextn(head._ctx), n, head.hidden_size), logits)

    def end(self) -> None:
        for seq in self.seq_of.values():
            self.head._lib.llama_memory_seq_rm(self.head._mem, seq, -1, -1)
        self.seq_of.clear()
