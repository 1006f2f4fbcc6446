"""The lookahead branch of lookahead decoding (Fu et al. 2024): a window of guesses that Jacobi iteration
improves, one target forward per step, and the n-grams it yields.

The window has ``levels`` rows of ``width`` guesses. With the context ending at index L - 1 (the pending
token), row l column j guesses the token at index L + l + j. Cell (l, j) is verified after the path

    row 0 columns 0..j, then rows 1..l of column j

so every cell is one node of a tree (row 0 is its trunk; each column's rows hang below the trunk's j-th
token) and the target's argmax there predicts index L + l + j + 1: the guess row l + 1 makes of column j.
After a verified step the rows move down (row l takes row l + 1), the top row takes the target's
predictions, and each column's last ``levels`` tokens plus its prediction form an n-gram of
``levels + 1`` tokens for the pool. Until the rows are filled (the first ``levels - 1`` steps of a turn)
the predictions become a new row instead. Columns whose guesses are now context (the step emitted more
than one token, or a step verified no window) are dropped at the front and fresh guesses, tokens drawn
from the context, appended at the back.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class JacobiWindow:
    def __init__(self, width: int, levels: int, rng: np.random.Generator) -> None:
        self.width, self.levels, self.rng = width, levels, rng
        self.rows: list[list[int]] = []

    def reset(self, context: Sequence[int]) -> None:
        """A new position: one row of guesses drawn from the context (no row is a prediction yet)."""
        self.rows = [self._fresh(context, self.width)]

    def _fresh(self, context: Sequence[int], n: int) -> list[int]:
        if not context or n <= 0:
            return [0] * max(n, 0)
        picks = self.rng.integers(0, len(context), size=n)
        return [int(context[i]) for i in picks]

    @property
    def filled(self) -> bool:
        return len(self.rows) == self.levels

    def paths(self) -> list[tuple[tuple[int, int], tuple[int, ...]]]:
        """Every cell (l, j) with its path from the pending token: row by row, so a cell's path prefixes
        come first."""
        out = []
        for level in range(len(self.rows)):
            for j in range(self.width):
                path = tuple(self.rows[0][: j + 1]) + tuple(self.rows[i][j] for i in range(1, level + 1))
                out.append(((level, j), path))
        return out

    def step(self, predicted: dict[tuple[int, int], int]) -> tuple[list[tuple[int, ...]], int]:
        """One Jacobi iteration from the target's argmax at the verified cells (missing cells keep their
        guess): the n-grams it completed (full rows only), and how many positions the rows moved (1 when
        they moved down, 0 while filling)."""
        top = len(self.rows) - 1
        new = [predicted.get((top, j), self.rows[top][j]) for j in range(self.width)]
        grams = []
        if self.filled:
            for j in range(self.width):
                if (top, j) in predicted:
                    grams.append((*(row[j] for row in self.rows), predicted[(top, j)]))
        self.rows.append(new)
        moved = 0
        if len(self.rows) > self.levels:
            self.rows.pop(0)
            moved = 1
        return grams, moved

    def advance(self, n: int, context: Sequence[int]) -> None:
        """The context grew by ``n`` tokens the rows do not account for: drop their columns."""
        n = min(max(n, 0), self.width)
        if n:
            self.rows = [row[n:] + self._fresh(context, n) for row in self.rows]
