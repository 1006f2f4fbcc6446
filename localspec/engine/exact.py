"""Output that no drafter changes: batch-invariant kernels, else a near-tie guard at temperature 0.

Under sampling, the same holds with a seed where the kernels are batch-invariant: each position's token is
drawn from its own stream (sampling.Streams) and a point-mass draft is accepted when it equals that draw, so
bit-identical rows give the same tokens whatever the drafter and window (tests/backends/llama_cpp). The
near-tie guard has no sampled counterpart: a backend without such kernels keeps its fast ones at T > 0.

Where the backend can compute a verify window bit for bit as 1-token steps (llama.cpp on the CPU,
localspec/backends/llama_cpp/exact.py), greedy turns run that way and need nothing else. Elsewhere
llama.cpp's batched kernels round differently from its single-token ones, so a position's logits in a
verify window differ slightly from what a plain 1-token step computes there (0.2-1.3 logits measured on
Qwen2.5-Coder-1.5B). Where the top two candidates are closer than that, the window's argmax may not be
plain decoding's. The guard takes no token from a window row whose top-1/top-2 gap is below the margin:
the step keeps what the rows before it decided and the next step, a single-token one as plain decoding's,
decides that position. The margin comes from `localspec calibrate` (cached per model file, backend and
build), else the backend's default below.

What the margin cannot do: the single-token step decides over KV rows that windows wrote, which differ slightly
from plain decoding's, so a near-tie can still flip there (measured: docs/exactness.md).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from localspec.cost_cache import KeyedCache, cost_key
from localspec.rows import Rows, as_rows
from localspec.types import Verdict

if TYPE_CHECKING:
    from localspec.backends.base import Backend
    from localspec.sampling import SamplingParams

DEFAULT_MARGIN = {"llama.cpp": 2.6, "torch": 0.05, "mlx": 0.5}  # logits; llama.cpp: 2 x the 1.3 measured


class MarginCache(KeyedCache):
    kind, what = "guard", "exact-guard margin"

    def check(self, data: dict) -> None:
        if not float(data["margin"]) > 0:
            raise ValueError("a margin that is not positive")


def margin_for(backend: Backend) -> tuple[float, str]:
    """(margin, 'calibrated' | 'default') for this backend's model and build: calibrated, twice the
    largest gap difference seen at any window size, for every window; else the backend's default.
    Not per window size: SmolLM2's windows of 2-33 tokens calibrated at a difference of 0.000, yet
    speculative runs diverged from plain there (rolled-back KV cells, longer contexts: what teacher-forced
    windows do not exercise), so one window size's calibration does not vouch for it."""
    saved = MarginCache(cost_key(backend)).load()
    if saved:
        return float(saved["margin"]), "calibrated"
    return DEFAULT_MARGIN.get(backend.name, max(DEFAULT_MARGIN.values())), "default"


@dataclass(frozen=True)
class Exact:
    """`--exact` for one loaded model: off, or on with the backend's batch-invariant kernels where it has them
    (every temperature), else greedy turns' near-tie guard. ``margin`` is set whenever it is on (the engine's
    ``exact_guard``: exact_mode below decides what it is used for), so it is on exactly when it has a margin."""

    kernels: bool = False  # batch-invariant kernels run (on, and the backend has them)
    margin: float | None = None  # the near-tie margin (None: off)
    source: str = ""  # where the margin comes from: 'calibrated' (`localspec calibrate`) or 'default'
    backend: str = ""  # the backend's name, for the words

    @property
    def on(self) -> bool:
        return self.margin is not None

    @classmethod
    def of(cls, backend: Backend, on: bool) -> Exact:
        """`--exact` ``on`` or off for ``backend``; on, the margin is the calibrated one for its model and build."""
        if not on:
            return cls(backend=backend.name)
        margin, source = margin_for(backend)
        return cls(backend.capabilities.batch_invariant, margin, source, backend.name)

    def describe(self) -> str:
        """Which mode greedy turns run, in words: what the load report, stats and TUI show."""
        if not self.on:
            return "fast (greedy may differ from plain decoding at near-ties; --exact for bit-identical)"
        if self.kernels:
            return "exact: batch-invariant kernels (greedy and seeded answers whatever the drafter)"
        return (
            f"exact: {self.backend} has no batch-invariant kernels here, so greedy turns take no token from "
            f"a verify row whose top two logits are within {self.margin:g} ({self.source}; "
            "`localspec calibrate` measures it): flips become rare, not impossible"
        )

    def notice(self) -> str:
        """One line where --exact cannot give bit-identical output on this backend, saying what it does instead."""
        return self.describe() if self.on and not self.kernels else ""


def exact_mode(backend: Backend, sampling: SamplingParams, margin: float | None) -> tuple[bool, float | None]:
    """How a turn keeps its output plain decoding's: (batch-invariant kernels, near-tie margin or None).
    ``margin`` None: `--exact` is off. A backend whose windows compute as 1-token steps bit for bit runs them at
    every temperature and needs no margin (localspec/backends/llama_cpp/exact.py); any other gets the margin at
    temperature 0 and nothing under sampling."""
    if margin is None:
        return False, None
    if backend.capabilities.batch_invariant:
        return True, None
    return False, margin if sampling.greedy else None


def guard(verdict: Verdict, logits: np.ndarray | Rows, margin: float) -> tuple[Verdict, float | None]:
    """The verdict cut before the first emitted token whose deciding window row is a near-tie, with that
    row's gap; (verdict, None) when no row is. The cut verdict is ``held``: it emits only accepted draft
    tokens, and the undecided position goes to a single-token step."""
    rows = [0, *(i + 1 for i in verdict.path)]  # the row that decided each emitted token
    gaps = as_rows(logits).top_gaps(rows)
    close = np.flatnonzero(gaps < margin)
    if not len(close):
        return verdict, None
    cut = int(close[0])
    return replace(
        verdict, accepted=cut, tokens=verdict.tokens[:cut], path=verdict.path[:cut], held=True, target_p=()
    ), float(gaps[cut])
