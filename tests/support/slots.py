"""Scripted slots for the batching logic: the real ``Batcher`` (backends/llama_cpp/slots.py) over a scripted
shared cache, so the chi-square tests can run several generations side by side on known distributions.

``ScriptedContext`` plays the llama.cpp context the Batcher decodes into: cells per sequence and position, and
each logits row computed from its own sequence's cells up to its position (a row sees nothing of another
sequence, nothing past itself). ``ScriptedSlot`` plays a slot: its prefill and forward hand their tokens to the
batcher with the positions and the sequence id a llama.cpp slot would, and its rows are the ones the batcher
gives it back. A bug that hands a slot another slot's rows changes the answers' distribution, which is what a
canary proves the chi-square sees.
"""

from __future__ import annotations

import itertools

import numpy as np

from localspec.backends.llama_cpp.slots import Batcher
from localspec.engine.fibers import Fibers
from localspec.types import BatchLoad, ForwardOut
from support.fakes import ScriptedBackend

_ARRIVALS = itertools.count(1)


class ScriptedContext:
    """The shared cache (see the module doc); ``n_batch`` is small so prompts and windows split over batches."""

    def __init__(self, model: ScriptedBackend, n_batch: int) -> None:
        self.model, self.n_batch = model, n_batch
        self.cells: dict[int, dict[int, int]] = {}
        self.batches: list[list[tuple[int, bool, int]]] = []  # each decode's entries: (sequence, logits, tokens)
        self._rows = np.zeros((0, model.vocab_size), dtype=np.float32)

    def _decode_entries(self, entries, reference: bool) -> int:
        assert sum(len(tokens) for tokens, *_ in entries) <= self.n_batch, "a batch over n_batch"
        for tokens, _, positions, seqs in entries:  # every token's cells first: a batch is one causal pass
            for token, pos, ids in zip(tokens, positions, seqs, strict=True):
                for seq in ids:
                    self.cells.setdefault(seq, {})[pos] = int(token)
        rows = []
        for _, logits, positions, seqs in entries:
            if logits:
                for pos, ids in zip(positions, seqs, strict=True):
                    cells = self.cells[ids[0]]
                    rows.append(self.model.logits_after([cells[p] for p in range(pos + 1)]))
        self._rows = np.array(rows, dtype=np.float32).reshape(len(rows), self.model.vocab_size)
        self.batches.append([(seqs[0][0], logits, len(tokens)) for tokens, logits, _, seqs in entries])
        return 0

    def _logits(self, n: int) -> np.ndarray:
        return self._rows[:n]

    def remove(self, seq: int, start: int) -> None:
        for pos in [p for p in self.cells.get(seq, {}) if p >= start]:
            del self.cells[seq][pos]


class ScriptedSlot(ScriptedBackend):
    """One sequence of a ScriptedContext, decoded through the batcher (see the module doc)."""

    def __init__(self, context: ScriptedContext, batcher: Batcher, seq: int) -> None:
        model = context.model
        super().__init__(vocab_size=model.vocab_size, order=model.order, scale=model.scale, seed=model.seed)
        self.context, self.batcher, self.seq = context, batcher, seq
        self.rows, self.ret, self.load, self.arrived, self.fresh = None, 0, BatchLoad(), 0, False

    def _submit(self, tokens, logits: bool) -> None:
        start = len(self._tokens)
        self._tokens.extend(int(t) for t in tokens)
        positions = range(start, start + len(tokens))
        assert self.batcher.submit(self, list(tokens), logits, list(positions), [(self.seq,)] * len(tokens)) == 0

    def truncate(self, keep: int) -> None:
        super().truncate(keep)
        self.context.remove(self.seq, max(0, keep))

    def prefill(self, tokens, progress=None) -> None:
        self.arrived = next(_ARRIVALS)
        if len(tokens):
            self._submit(tokens, logits=False)
        self.fresh = True

    def forward(self, tokens, return_hidden: bool = False) -> ForwardOut:
        self.forward_calls.append(len(tokens))
        self._submit(tokens, logits=True)
        return ForwardOut(self.rows.copy())

    def batch_load(self) -> BatchLoad:
        return self.load


def scripted_slots(model: ScriptedBackend, count: int, n_batch: int = 8):
    """``count`` slots of one ScriptedContext (slot i on sequence i), the context and their Fibers."""
    context = ScriptedContext(model, n_batch)
    batcher = Batcher(context)
    slots = [ScriptedSlot(context, batcher, seq) for seq in range(count)]
    return slots, context, Fibers(batcher.flush)
