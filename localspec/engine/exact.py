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

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from localspec.rows import Rows, as_rows
from localspec.types import Verdict

if TYPE_CHECKING:
    from localspec.backends.base import Backend
    from localspec.sampling import SamplingParams

DEFAULT_MARGIN = {"llama.cpp": 2.6, "torch": 0.05, "mlx": 0.5}  # logits; llama.cpp: 2 x the 1.3 measured


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
