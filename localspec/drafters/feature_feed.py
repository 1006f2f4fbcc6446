"""The target's features on their way into a feature-fed drafter's head (EAGLE, DFlash): which context
positions the head's cache holds, and the features handed over but not yet put there.

Features come with every step's record (``Drafter.observe``, ``feed`` here); they are kept and put into the
head in one batched call when a draft is next asked for (``catch_up``), since a head pass per step that
drafts nothing costs more than one pass for several positions. The head's cache holds positions
``first .. first + fed - 1``; a new turn keeps the part of it whose tokens did not change.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np

from localspec.drafters.base import Costs
from localspec.types import Features, Step, common_prefix

# put(context, rows, end): put feature rows of positions end.. into the head; returns how many it took
Put = Callable[[Sequence[int], np.ndarray, int], int]


class FeatureFeed:
    def __init__(self) -> None:
        self.first: int | None = None  # the first position the head's cache holds
        self.fed = 0  # positions it holds from ``first`` on
        self.context: Sequence[int] = ()  # the context of the last feed (the engine's list: it grows)
        self.pending: list[Features] = []  # handed over, not yet put into the head
        self.catchup_s = 0.0  # seconds the last catch-up spent on more than one position
        self._per_row = 0.0  # seconds a batched catch-up took per position, last time

    @property
    def end(self) -> int:
        """The position after the last one the head holds."""
        return (self.first or 0) + self.fed

    def keep(self, prompt: Sequence[int], lookahead: int) -> None:
        """A new turn's prompt: keep the positions whose features are still valid, where the head's slot j
        also depends on token j + ``lookahead`` (EAGLE pairs feature j with token j+1)."""
        if self.first is not None:
            same = common_prefix(self.context, prompt)
            self.fed = max(0, min(self.fed, same - lookahead - self.first))

    def feed(self, context: Sequence[int], features: Features) -> None:
        self.context, self.catchup_s = context, 0.0
        last = self.pending[-1] if self.pending else None
        if last is not None and features.start == last.start + len(last.rows):  # contiguous: one batch
            self.pending[-1] = Features(last.start, np.concatenate([last.rows, features.rows]))
        else:
            self.pending.append(features)

    def estimate(self) -> float:
        """Seconds catching up on the pending positions would take (0 for one: drafting costs that anyway)."""
        behind = sum(len(f.rows) for f in self.pending)
        return behind * self._per_row if behind > 1 else 0.0

    def catch_up(self, put: Put) -> bool:
        """Put the pending features into the head; True when there were any."""
        pending, self.pending = self.pending, []
        self.catchup_s = 0.0
        if not pending:
            return False
        t0, rows = time.perf_counter(), sum(len(f.rows) for f in pending)
        for features in pending:
            self._put(features, put)
        if rows > 1:
            self.catchup_s = (time.perf_counter() - t0) * (rows - 1) / rows
            self._per_row = self.catchup_s / (rows - 1)
        return True

    def _put(self, features: Features, put: Put) -> None:
        pos, rows = features.start, features.rows
        if self.first is None:
            self.first = pos
        end = self.end
        if pos > end:  # positions the head never saw (steps without features): start over from here
            self.first, self.fed, end = pos, 0, pos
        elif self.first <= pos < end:  # features of positions it has (a re-prefilled prompt): feed them again
            self.fed, end = pos - self.first, pos
        rows = rows[end - pos :]
        if len(rows):
            self.fed += put(self.context, np.asarray(rows), end)


class FedByFeatures:
    """The drafter side of a FeatureFeed (EAGLE, DFlash): ``self.rows`` is the feed and ``self._put`` puts
    rows into the head. Features are kept as they come and put into the head in one batched call when a draft
    is next asked for (a head pass per step that drafts nothing, ~0.7 ms on SmolLM2's llama.cpp EAGLE head,
    is ~7% of its 9 ms step). A head's cost per drafted token is timed by the controller on its first (short)
    draft."""

    rows: FeatureFeed

    def observe(self, step: Step) -> None:
        if step.features is not None:
            self.rows.feed(step.context, step.features)

    def costs(self, context: Sequence[int]) -> Costs:
        return Costs(None, self.rows.estimate())

    def _catch_up(self) -> float:
        """Put the pending features into the head; the seconds it spent on more than one position."""
        self.rows.catch_up(self._put)
        return self.rows.catchup_s

    def _put(self, context: Sequence[int], rows: np.ndarray, end: int) -> int:
        raise NotImplementedError
