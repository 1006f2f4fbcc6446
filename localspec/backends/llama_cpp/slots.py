"""Several caches in one llama.cpp context, decoded together: what `serve --parallel N` runs on.

A slot (``Slot``) is the loaded model seen through one sequence of the context's unified KV cache: its own
tokens, its own range of leaf sequences for the trees it verifies, and 1/N of the context. Its requests run in a
greenlet on the engine thread (apps/server/slots.py); where the slot would call ``llama_decode`` it hands its
tokens to the ``Batcher`` and switches back to the scheduler, which decodes every slot's pending tokens in one
``llama_decode`` (in several where they exceed a batch) and resumes each slot with its own rows. So llama.cpp is
only ever called from the one OS thread (its OpenMP team belongs to it), and the generate loop, the drafters and
the Session run unchanged on a slot, as on the whole backend.

A batch is filled as llama-server fills one: every slot's verify window first, then prompt tokens in arrival
order up to the batch size, so a long prompt shares each batch with the others' windows instead of holding them
up for the whole prompt, and the first prompt to arrive is the first to be answered. A batch that holds a
request's first window (its first token: llama-server samples it from the prompt's own pass) takes no prompt
tokens, so that token does not wait for another prompt's chunk. Each slot learns what the
others put into its last batch (``batch_load``; their drafted tokens left out, so no slot drafts because
the others did): its controller prices a window as the batch it joins. A slot
used outside a greenlet (a test, a warm-up) decodes at once.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
from greenlet import greenlet

from localspec.errors import ConfigError
from localspec.types import BatchLoad


@dataclass(eq=False)
class _Pending:
    slot: Slot
    fiber: greenlet
    tokens: Sequence[int]
    logits: bool
    positions: Sequence[int]
    seqs: Sequence[Sequence[int]]
    first: bool = False  # the request's first window: its first token


class Batcher:
    """Collects the slots' decodes and runs them together (see the module doc)."""

    def __init__(self, owner) -> None:
        """``owner``: the LlamaCppBackend whose context the slots share."""
        self.owner, self.pending = owner, []
        self.decodes = self.batched = 0  # llama_decode calls, and those of them that held several slots

    def submit(self, slot: Slot, tokens, logits: bool, positions, seqs) -> int:
        """Hand a slot's tokens over; returns llama_decode's code for them once they all ran (the slot's rows
        are then in ``slot.rows``)."""
        fiber, slot.ret = greenlet.getcurrent(), 0
        mine = _Pending(slot, fiber, tokens, logits, positions, seqs, first=logits and slot.fresh)
        slot.fresh = slot.fresh and not logits
        self.pending.append(mine)
        if fiber.parent is None:  # no scheduler above: this decode runs now, with whatever else waits
            while mine in self.pending:
                self.flush()
        else:
            fiber.parent.switch()  # the scheduler runs the batch and switches back here once they all ran
        return slot.ret

    def flush(self) -> list[greenlet]:
        """One batch, as llama-server fills one: every verify window, then prompt tokens in arrival order up to
        the batch size (a prompt that does not fit goes on in the next batch, where it left off); the
        greenlets whose tokens have all run, to resume."""
        windows = [p for p in self.pending if p.logits]
        prompts = sorted((p for p in self.pending if not p.logits), key=lambda p: p.slot.arrived)
        room = self.owner.n_batch - sum(len(p.tokens) for p in windows)
        if any(p.first for p in windows):  # a first token waits for no other prompt's chunk
            room = 0
        batch, self.pending = list(windows), []
        for p in prompts:
            if room <= 0:
                self.pending.append(p)
                continue
            if len(p.tokens) > room:  # its first `room` tokens now, the rest next time
                self.pending.append(_Pending(p.slot, p.fiber, p.tokens[room:], False, p.positions[room:],
                                             p.seqs[room:]))  # fmt: skip
                p = _Pending(p.slot, p.fiber, p.tokens[:room], False, p.positions[:room], p.seqs[:room])
            batch.append(p)
            room -= len(p.tokens)
        for group in _groups(batch, self.owner.n_batch):
            ret = self._decode(group)
            if ret != 0 and len(group) > 1:  # no room for all of them at once: each alone, each its own verdict
                for one in group:
                    self._decode([one])
        failed = {id(p.slot) for p in batch if p.slot.ret != 0}
        self.pending = [p for p in self.pending if id(p.slot) not in failed]  # a failed prompt stops there
        unfinished = {id(p.slot) for p in self.pending}
        resumed = {id(p.slot): p.fiber for p in batch if id(p.slot) not in unfinished}
        return [fiber for fiber in resumed.values() if fiber.parent is not None]

    def _decode(self, group: list[_Pending]) -> int:
        owner, start = self.owner, time.perf_counter()
        # slots run the fast kernels (--exact runs one request at a time)
        ret = owner._decode_entries([(p.tokens, p.logits, p.positions, p.seqs) for p in group], reference=False)
        self.decodes += 1
        slots = {id(p.slot) for p in group}
        self.batched += len(slots) > 1
        rows = sum(len(p.tokens) for p in group if p.logits)
        logits = owner._logits(rows) if ret == 0 and rows else None
        loads = BatchLoad.of_pass([(len(p.tokens), p.logits) for p in group], time.perf_counter() - start)
        at = 0
        for p, load in zip(group, loads, strict=True):  # a slot has one entry in a batch: this decode's verdict
            p.slot.ret, p.slot.rows, p.slot.load = ret, None, load  # (a retry alone's last)
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
        self.load = BatchLoad()  # what this slot's last batch held beside it
        self.arrived = 0  # when its last prompt started (prompts fill batches in that order)
        self.fresh = False  # prefilled, its first window not yet submitted
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

    def batch_load(self) -> BatchLoad:
        return self.load

    def prefill(self, tokens, progress=None) -> None:
        self.arrived = next(_ARRIVALS)  # its prompt's place in the batches' order
        super().prefill(tokens, progress)
        self.fresh = True

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
_ARRIVALS = itertools.count(1)


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
    owner.close_side_prefill()  # the slots' prompts share the batches of the others' windows instead
    kind = _CLASSES.setdefault(type(owner), type("LlamaSlot", (Slot, type(owner)), {}))
    return [kind(owner, i, count, batcher) for i in range(count)], batcher.flush
