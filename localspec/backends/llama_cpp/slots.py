"""Several caches in one llama.cpp context, decoded together: what `serve --parallel N` runs on.

A slot (``Slot``) is the loaded model seen through one sequence of the context's unified KV cache: its own
tokens, its own range of leaf sequences for the trees it verifies, and 1/N of the context. Its requests run in a
greenlet on the engine thread (apps/server/slots.py); where the slot would call ``llama_decode`` it hands its
tokens to the ``Batcher`` and switches back to the scheduler, which decodes every slot's pending tokens in one
``llama_decode`` (in several where they exceed a batch) and resumes each slot with its own rows. So llama.cpp is
only ever called from the one OS thread (its OpenMP team belongs to it), and the generate loop, the drafters and
the Session run unchanged on a slot, as on the whole backend.

A slot prefills in chunks of ``PREFILL_CHUNK`` tokens: a long prompt shares each batch with the other slots'
verify windows instead of holding them up for the whole prompt. A slot used outside a greenlet (a test, a
warm-up) decodes at once, alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
from greenlet import greenlet

from localspec.backends.llama_cpp.capi import fill_batch
from localspec.errors import ConfigError

PREFILL_CHUNK = 128  # prompt tokens a slot puts into one batch beside the others' windows


@dataclass(eq=False)
class _Pending:
    slot: Slot
    fiber: greenlet
    tokens: Sequence[int]
    logits: bool
    positions: Sequence[int]
    seqs: Sequence[Sequence[int]]


class Batcher:
    """Collects the slots' decodes and runs them together (see the module doc)."""

    def __init__(self, owner) -> None:
        """``owner``: the LlamaCppBackend whose context the slots share."""
        self.owner, self.pending = owner, []
        self.decodes = self.batched = 0  # llama_decode calls, and those of them that held several slots

    def submit(self, slot: Slot, tokens, logits: bool, positions, seqs) -> int:
        """Hand a slot's tokens over; returns llama_decode's code for them once the batch ran (the slot's rows
        are then in ``slot.rows``)."""
        fiber = greenlet.getcurrent()
        self.pending.append(_Pending(slot, fiber, tokens, logits, positions, seqs))
        if fiber.parent is None:  # no scheduler above: this decode runs now, with whatever else waits
            self.flush()
        else:
            fiber.parent.switch()  # the scheduler runs the batch and switches back here
        return slot.ret

    def flush(self) -> list[greenlet]:
        """Decode everything pending, in one llama_decode per batch's worth; the greenlets to resume."""
        waiting, self.pending = self.pending, []
        for group in _groups(waiting, self.owner.n_batch):
            ret = self._decode(group)
            if ret != 0 and len(group) > 1:  # no room for all of them at once: each alone, each its own verdict
                for one in group:
                    self._decode([one])
        return [p.fiber for p in waiting if p.fiber.parent is not None]

    def _decode(self, group: list[_Pending]) -> int:
        owner = self.owner
        owner._let_go_of_rows()
        if owner._reference is not None:  # slots run the fast kernels (--exact runs one request at a time)
            owner._reference.set(False)
        fill_batch(owner._batch, [(p.tokens, p.logits, p.positions, p.seqs) for p in group])
        ret = owner._lib.llama_decode(owner._ctx, owner._batch)
        self.decodes += 1
        self.batched += len({id(p.slot) for p in group}) > 1
        rows = sum(len(p.tokens) for p in group if p.logits)
        logits = owner._logits(rows) if ret == 0 and rows else None
        at = 0
        for p in group:
            p.slot.ret, p.slot.rows = ret, None
            if p.logits and logits is not None:
                p.slot.rows = logits[at : at + len(p.tokens)].copy()  # the next decode overwrites the buffer
                at += len(p.tokens)
        return ret


def _groups(pending: list[_Pending], limit: int) -> list[list[_Pending]]:
    """Consecutive runs of ``pending`` of at most ``limit`` tokens each (an entry is never split)."""
    groups, size = [], 0
    for p in pending:
        if not groups or size + len(p.tokens) > limit:
            groups.append([])
            size = 0
        groups[-1].append(p)
        size += len(p.tokens)
    return groups


class Slot:
    """One sequence of a shared llama.cpp context (see the module doc), mixed into the owner's class (a
    LlamaCppBackend: this module is imported by it, so it does not import it). The owner keeps the model, the
    context and the batch, and frees them; a slot only clears its own cells when closed."""

    def __init__(self, owner, index: int, count: int, batcher: Batcher) -> None:
        self.__dict__.update(owner.__dict__)  # the model, vocabulary and context: shared, never freed here
        self._owner, self._batcher = owner, batcher
        self._tokens, self._held, self._tree, self._branches = [], None, None, 0
        self._checkpoint = self._turn_point = None
        self.rows: np.ndarray | None = None  # this slot's rows of the last batch
        self.ret = 0
        per = (owner.max_branches + 1 - count) // count  # each slot's share of the leaf sequences
        self._seq, self._branch0, self.max_branches = index, count + index * per, per
        self.n_ctx = owner.n_ctx // count
        self.n_batch = min(owner.n_batch, self.n_ctx)
        self.capabilities = replace(owner.capabilities, snapshots=False, tree_attention=per > 0)

    def _run(self, tokens, logits: bool, positions, seqs) -> int:
        return self._batcher.submit(self, tokens, logits, positions, seqs)

    def _logits(self, n: int) -> np.ndarray:
        return self.rows[:n]

    def _let_go_of_rows(self) -> None:
        self._held = None  # a slot's rows are its own copy

    def prefill(self, tokens, progress=None) -> None:
        for start in range(0, len(tokens), PREFILL_CHUNK):
            self._decode(tokens[start : start + PREFILL_CHUNK], logits=False)
            if progress is not None:
                progress(min(start + PREFILL_CHUNK, len(tokens)), len(tokens))

    def save_state(self):
        raise ConfigError("a slot keeps no conversation states (--parallel)")

    def slots(self, count: int):
        raise ConfigError("a slot cannot be split into slots")

    def close(self) -> None:
        if self._owner._ctx:
            self._drop_branches()
            self._lib.llama_memory_seq_rm(self._mem, self._seq, -1, -1)
        self._tokens = []

    def __del__(self) -> None:
        pass


_CLASSES: dict[type, type] = {}


def open_slots(owner, count: int) -> tuple[list[Slot], Callable[[], list[greenlet]]]:
    """``count`` slots of ``owner`` and the function that runs their pending decodes (Backend.slots)."""
    if count < 1:
        raise ConfigError(f"--parallel must be at least 1, got {count}")
    if owner.recurrent:
        raise ConfigError(f"{owner.path.name} has a recurrent state (one per sequence): it runs one request at a time")
    if count > owner.max_branches + 1:
        raise ConfigError(f"--parallel {count} is more sequences than this context holds ({owner.max_branches + 1})")
    if owner.n_ctx // count < 64:
        raise ConfigError(f"--ctx {owner.n_ctx} split {count} ways leaves too little for each; raise --ctx")
    batcher = Batcher(owner)
    owner.truncate(0)  # the owner's own sequence 0 is slot 0's now
    kind = _CLASSES.setdefault(type(owner), type("LlamaSlot", (Slot, type(owner)), {}))
    return [kind(owner, i, count, batcher) for i in range(count)], batcher.flush
