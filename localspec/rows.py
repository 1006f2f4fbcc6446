"""A forward pass's logits, row by row, as verification reads them.

Verification visits only the rows of the accepted path and needs only each visited row's candidates (the
sampler's shortlist: the argmax at temperature 0, the top-k logits at T > 0); the lookahead drafter needs
every row's argmax and the near-tie guard the top-2 gap of the deciding rows. ``HostRows`` serves those
from a numpy array; a backend whose logits stay on an accelerator (backends/torch_rows.py) serves the same
answers computing the reductions where the logits are, so a 65-row window of a 128k vocabulary never has
to cross to the host whole. ``numpy()`` still gives the whole array to the callers that want it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import numpy as np

if TYPE_CHECKING:
    from localspec.sampling import SamplingParams


class Rows(Protocol):
    shape: tuple[int, int]

    def __len__(self) -> int: ...

    def candidates(self, i: int, sampler: SamplingParams) -> tuple[np.ndarray, np.ndarray]:
        """Row i's target distribution, sparse: what ``sampler.distribution`` gives for that row."""

    def argmax(self) -> np.ndarray:
        """Every row's argmax (the first index of the maximum)."""

    def top_gaps(self, index: list[int]) -> np.ndarray:
        """top-1 minus top-2 logit of the rows ``index``."""

    def row(self, i: int) -> np.ndarray:
        """One row, float32."""

    def numpy(self) -> np.ndarray:
        """Every row, float32 [rows, vocab]."""


class HostRows:
    """Rows of a float32 numpy array."""

    def __init__(self, logits: np.ndarray) -> None:
        self.logits = logits
        self.shape = logits.shape

    def __len__(self) -> int:
        return self.logits.shape[0]

    def candidates(self, i: int, sampler: SamplingParams) -> tuple[np.ndarray, np.ndarray]:
        return sampler.distribution(self.logits[i])

    def argmax(self) -> np.ndarray:
        return self.logits.argmax(axis=1)

    def top_gaps(self, index: list[int]) -> np.ndarray:
        return top_gaps(self.logits[index])

    def row(self, i: int) -> np.ndarray:
        return self.logits[i]

    def numpy(self) -> np.ndarray:
        return self.logits


class LiveRows(HostRows):
    """Rows read in place from a buffer the backend will overwrite (llama.cpp's logits, valid until its next
    decode): a verdict reads the few rows it visits, and no row is copied unless the backend is about to
    decode while the rows are still held (``detach``: one copy then) or a caller asks for the whole array."""

    def __init__(self, logits: np.ndarray) -> None:
        super().__init__(logits)
        self.live = True

    def detach(self) -> None:
        if self.live:
            self.logits, self.live = self.logits.copy(), False

    def row(self, i: int) -> np.ndarray:
        return self.logits[i].copy() if self.live else self.logits[i]

    def numpy(self) -> np.ndarray:
        self.detach()
        return self.logits


def top_gaps(rows: np.ndarray) -> np.ndarray:
    """top-1 minus top-2 logit of each row."""
    if rows.shape[1] < 2:
        return np.full(rows.shape[0], np.inf)
    top2 = np.partition(rows, -2, axis=1)[:, -2:]
    return np.abs(top2[:, 1] - top2[:, 0])


def as_rows(logits: np.ndarray | Rows) -> Rows:
    return HostRows(logits) if isinstance(logits, np.ndarray) else logits
