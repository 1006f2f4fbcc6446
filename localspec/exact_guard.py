"""Greedy output that never flips: a near-tie guard for verify windows (temperature 0).

llama.cpp's batched kernels round differently from its single-token ones, so a position's logits in a
verify window differ slightly from what a plain 1-token step computes there (0.2-1.3 logits measured on
Qwen2.5-Coder-1.5B). Where the top two candidates are closer than that, the window's argmax may not be
plain decoding's. The guard takes no token from a window row whose top-1/top-2 gap is below the margin:
the step keeps what the rows before it decided and the next step, a single-token one as plain decoding's,
decides that position. The margin comes from `localspec calibrate` (cached per model file, backend and
build), else the backend's default below. Margins can be given per window size, but the calibration
applies its largest to every window (see localspec/calibrate.margin_for).

What it cannot do: the single-token step decides over KV rows that windows wrote, which differ slightly
from plain decoding's, so a near-tie can still flip there (measured: README, "Exactness").
"""
from __future__ import annotations

from dataclasses import replace
from typing import Optional

import numpy as np

from localspec.types import Verdict

DEFAULT_MARGIN = {"llama.cpp": 2.6, "torch": 0.05, "mlx": 0.5}  # logits; llama.cpp: 2 x the 1.3 measured


class Margins:
    """The near-tie margin per verify window size: calibrated per size (a window uses the margin of the
    smallest calibrated size at least as wide, the widest beyond them), or one value for all."""

    def __init__(self, flat: float = 0.0, per_window: Optional[dict[int, float]] = None) -> None:
        self.flat = flat
        self.sizes = sorted(per_window or {})
        self.per_window = {int(n): float(m) for n, m in (per_window or {}).items()}

    def at(self, window: int) -> float:
        if not self.sizes:
            return self.flat
        for n in self.sizes:
            if n >= window:
                return self.per_window[n]
        return self.per_window[self.sizes[-1]]

    def describe(self):
        """A float (one margin for every window) or {window size: margin}."""
        return {str(n): self.per_window[n] for n in self.sizes} if self.sizes else self.flat


def as_margins(value) -> Optional[Margins]:
    """None (no guard), a number (that margin for every window) or Margins."""
    if value is None or isinstance(value, Margins):
        return value
    return Margins(float(value))


def top_gaps(rows: np.ndarray) -> np.ndarray:
    """top-1 minus top-2 logit of each row."""
    if rows.shape[1] < 2:
        return np.full(rows.shape[0], np.inf)
    top2 = np.partition(rows, -2, axis=1)[:, -2:]
    return np.abs(top2[:, 1] - top2[:, 0])


def guard(verdict: Verdict, logits: np.ndarray, margin: float) -> tuple[Verdict, Optional[float]]:
    """The verdict cut before the first emitted token whose deciding window row is a near-tie, with that
    row's gap; (verdict, None) when no row is. The cut verdict is ``held``: it emits only accepted draft
    tokens, and the undecided position goes to a single-token step."""
    rows = [0, *(i + 1 for i in verdict.path)]  # the row that decided each emitted token
    gaps = top_gaps(logits[rows])
    close = np.flatnonzero(gaps < margin)
    if not len(close):
        return verdict, None
    cut = int(close[0])
    return replace(verdict, accepted=cut, tokens=verdict.tokens[:cut], path=verdict.path[:cut], held=True), \
        float(gaps[cut])
