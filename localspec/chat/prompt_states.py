"""Conversation states kept in RAM for the server: an agent and an editor (or two chats) take turns, and each
one's next request should prefill only its new tokens, not the whole conversation again.

The backend holds one live cache. Before a request, the live cache is saved if the request would cut much of
it away, and a saved state that shares more of the prompt than the live cache is loaded instead (the engine
then prefills what follows it); a loaded state the prompt leaves early stays saved too (two prompts sharing a
system prompt and files, taking turns, each keep their own tail). States are dropped oldest first beyond
``budget_bytes`` (`serve --cache-ram`); a state that is a prefix of a newer one is dropped as redundant. A
drafter with a cache of its own (the MTP layer's) is saved and loaded with the target's state, so it need not
be handed the conversation again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from localspec.backends.base import Backend
from localspec.drafters.base import Drafter
from localspec.types import common_prefix

MIN_TOKENS = 32  # a state shorter than this (or a gain smaller) is cheaper to prefill than to copy


@dataclass
class Saved:
    tokens: tuple[int, ...]
    state: object  # bytes-like, the backend's save_state()
    drafter: Drafter | None = None  # whose drafter_state it is
    drafter_state: object = None  # its state (Drafter.state)

    @property
    def size(self) -> int:
        return len(self.state) + nbytes(self.drafter_state)


def nbytes(value) -> int:
    """Roughly the memory a drafter's saved state takes (its arrays and buffers)."""
    if value is None:
        return 0
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list | tuple):
        return sum(nbytes(v) for v in value)
    if isinstance(value, np.ndarray):
        return value.nbytes
    try:
        return memoryview(value).nbytes
    except TypeError:
        return 8


class PromptStates:
    def __init__(self, backend: Backend, budget_bytes: int) -> None:
        self.backend, self.budget = backend, budget_bytes
        self.saved: list[Saved] = []  # oldest first
        self.loads = 0  # saved states loaded back
        self.cutting = False  # the last request left the live conversation (prepare)

    @property
    def bytes(self) -> int:
        return sum(s.size for s in self.saved)

    def prepare(self, prompt: Sequence[int], drafter: Drafter | None = None) -> int:
        """Make the live cache (and ``drafter``'s) the best start for ``prompt``; returns how many of its
        tokens it holds."""
        prefix = prompt[:-1]  # the engine keeps the last prompt token pending
        live = self.backend.cached_tokens
        live_reuse = common_prefix(live, prefix)
        reuses = [(common_prefix(s.tokens, prefix), s) for s in self.saved]
        best_reuse, best = max(reuses, key=lambda pair: pair[0], default=(0, None))
        # a request that leaves the live conversation says the next may too: keep_live saves ahead of it
        self.cutting = len(live) - live_reuse >= MIN_TOKENS
        if best is not None and best_reuse >= live_reuse + MIN_TOKENS:
            self.cutting = True
            self._keep(live, drafter)
            self.saved.remove(best)
            if len(best.tokens) - best_reuse >= MIN_TOKENS:  # the prompt leaves it early: it stays saved, newest
                self.saved.append(best)
            self.backend.load_state(best.tokens, best.state)
            if drafter is not None:  # another drafter's state is of no use to it: it starts empty
                drafter.state = best.drafter_state if best.drafter is drafter else None
            self.loads += 1
            return best_reuse
        if self.cutting:  # this request cuts the live conversation: keep it
            self._keep(live, drafter)
        return live_reuse

    def keep_live(self, drafter: Drafter | None = None) -> None:
        """Save the live conversation now, while the server waits (worker.py), where the last request left the
        conversation before it (an editor's completions, clients taking turns): a next request that cuts it too
        then finds it saved and starts at once, instead of waiting for the copy (~20 ms for 1,200 tokens of a
        1.5B model; where the memory is new to the process, as on a VM whose host backs pages on first touch,
        ~0.1 s). Where the last request continued the conversation (a chat, an agent's loop), the next most
        likely does too and needs no copy: nothing is saved."""
        if self.cutting:
            self._keep(self.backend.cached_tokens, drafter)

    def _keep(self, tokens: tuple[int, ...], drafter: Drafter | None) -> None:
        if len(tokens) < MIN_TOKENS or self.budget <= 0:
            return
        held = next((s for s in self.saved if common_prefix(s.tokens, tokens) == len(tokens)), None)
        if held is not None:  # a saved state holds all of it already: it is the newest now
            self.saved.remove(held)
            self.saved.append(held)
            return
        self.saved = [s for s in self.saved if common_prefix(s.tokens, tokens) < len(s.tokens)]
        kept = drafter.state if drafter is not None else None
        self.saved.append(Saved(tokens, self.backend.save_state(), drafter, kept))
        while self.saved and self.bytes > self.budget:
            self.saved.pop(0)
