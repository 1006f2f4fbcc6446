"""Several sequences of one torch model, their forward passes packed into one: what `serve --parallel N` runs
on the torch backend.

A slot is the loaded model seen through its own share of the KV cache: slot i keeps positions 0..n_ctx/N - 1
in cache slots i * n_ctx/N onwards, and attends from the start of its share only. Where a slot would run the
model it hands its tokens to the ``Batcher`` and its greenlet switches back to the scheduler
(engine/fibers.py), which runs every waiting slot's tokens as one pass (``Decoder.forward_packed``: the
projections and the MLP over all rows at once, attention per slot) and resumes each with its own logits. Only
the rows a slot asked logits of are put through the LM head. Slots verify chains (no trees, no hidden states:
localspec/slots.py refuses the drafters that need them); the fixed-shape CUDA-graph steps stay with the lone
backend. A slot used outside a greenlet (a test, a warm-up) runs its pass alone, at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from greenlet import greenlet

from localspec.errors import ConfigError
from localspec.types import BatchLoad


@dataclass(eq=False)
class _Pending:
    slot: TorchSlot
    fiber: greenlet
    tokens: Sequence[int]
    logits: bool
    position: int  # the slot's own position of the first token
    out: tuple = field(default=(None, {}))
    error: BaseException | None = None  # what the pass raised: raised again in this slot's request alone


class Batcher:
    """Collects the slots' passes and runs them as one (see the module doc)."""

    def __init__(self, owner) -> None:
        self.owner, self.pending = owner, []
        self.passes = self.batched = 0  # packed passes, and those of them that held several slots

    def submit(self, slot: TorchSlot, tokens: Sequence[int], logits: bool, position: int) -> tuple:
        """Hand a slot's tokens over; returns (logits or None, {}) once its pass ran."""
        fiber = greenlet.getcurrent()
        mine = _Pending(slot, fiber, tokens, logits, position)
        if fiber.parent is None:  # no scheduler above: this pass runs now, alone
            self._run([mine])
        else:
            self.pending.append(mine)
            fiber.parent.switch()  # the scheduler runs the batch and switches back here once it ran
        if mine.error is not None:
            raise mine.error
        return mine.out

    def flush(self) -> list[greenlet]:
        """Every waiting slot's tokens in one pass; the greenlets to resume."""
        batch, self.pending = self.pending, []
        if batch:
            try:
                self._run(batch)
            except Exception as exc:  # noqa: BLE001 - each waiting request gets it (and ends), not the scheduler
                for p in batch:
                    p.error = exc
        return [p.fiber for p in batch if p.fiber.parent is not None]

    def _run(self, batch: list[_Pending]) -> None:
        import torch

        owner, began = self.owner, time.perf_counter()
        device, segments, rows, at = owner.device, [], [], 0
        for p in batch:
            n, pos, base = len(p.tokens), p.position, p.slot.base
            segments.append((n, base + pos, base, torch.arange(pos, pos + n, device=device)))
            if p.logits:
                rows.extend(range(at, at + n))
            at += n
        ids = torch.tensor([int(t) for p in batch for t in p.tokens], dtype=torch.long, device=device)
        logits = owner.model.forward_packed(ids, segments, torch.tensor(rows, dtype=torch.long, device=device))
        if device.type == "cuda":  # the pass's time, not its launch's: the slots' cost curves learn from it
            torch.cuda.synchronize(device)
        loads = BatchLoad.of_pass([(len(p.tokens), p.logits) for p in batch], time.perf_counter() - began)
        self.passes += 1
        self.batched += len(batch) > 1
        taken = 0
        for p, load in zip(batch, loads, strict=True):
            p.slot.load = load
            if p.logits:
                p.out = (logits[taken : taken + len(p.tokens)], {})
                taken += len(p.tokens)


class TorchSlot:
    """One share of a torch model's cache (see the module doc), mixed into the owner's class (a TorchBackend:
    this module is imported by it, so it does not import it). The owner keeps the model and frees it."""

    def __init__(self, owner, index: int, count: int, batcher: Batcher) -> None:
        self.__dict__.update(owner.__dict__)  # the model, its cache and the tokenizer: shared
        self._owner, self._batcher = owner, batcher
        self._tokens = []
        self.n_ctx = owner.n_ctx // count
        self.base = index * self.n_ctx  # its first cache slot
        self.steps = None  # the fixed-shape steps run from cache slot 0: the lone backend's
        self.load = BatchLoad()
        self.capabilities = replace(
            owner.capabilities, snapshots=False, tree_attention=False, hidden_states=False, feature_layers=False
        )

    def _pass(self, tokens: Sequence[int], start: int, logits: bool, hidden: Sequence[int], positions, mask):
        if hidden or positions is not None:
            raise ConfigError("a slot runs chains without hidden states (--parallel)")
        return self._batcher.submit(self, tokens, logits, start)

    def batch_load(self) -> BatchLoad:
        return self.load

    def save_state(self):
        raise ConfigError("a slot keeps no conversation states (--parallel)")

    def slots(self, count: int):
        raise ConfigError("a slot cannot be split into slots")

    def close(self) -> None:
        self._tokens = []  # the owner frees the model and its cache


_CLASSES: dict[type, type] = {}


def open_slots(owner, count: int) -> tuple[list[TorchSlot], Callable[[], list[greenlet]]]:
    """``count`` slots of ``owner`` and the function that runs their pending passes (Backend.slots)."""
    if count < 1:
        raise ConfigError(f"--parallel must be at least 1, got {count}")
    if owner.n_ctx // count < 64:
        raise ConfigError(f"--ctx {owner.n_ctx} split {count} ways leaves too little for each; raise --ctx")
    batcher = Batcher(owner)
    owner.truncate(0)  # the owner's cache is the slots' now
    kind = _CLASSES.setdefault(type(owner), type("TorchSlotBackend", (TorchSlot, type(owner)), {}))
    return [kind(owner, i, count, batcher) for i in range(count)], batcher.flush
