"""The plain-decoding speed a turn's speedup is measured against: this session's own plain steps.

A step that verifies nothing (K = 0: no proposal, or the controller declined it) is an ordinary decoding
step, and the controller takes such steps anyway. Their cost is kept with the context length they ran at;
the baseline for a context of L tokens is the trimmed mean (TRIM of the slowest and of the fastest left
out) of the plain steps between 0.75 L and 1.25 L — a mean, as a turn's decode speed is one — and
there is none until MIN_STEPS of them were measured (so a busy first second cannot make up a speedup).
A turn is compared at its mean context length (the prompt plus half the answer so far), since its decode
speed is the mean over all its steps.
The figure shown is also capped at tau * (1 + EPS): a step emitting tau tokens can at best cost one plain
step, so anything above that is noise in the baseline, not speed.
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass
from statistics import fmean

from localspec.types import Step

MIN_STEPS = 16  # plain steps near the current context length before a speedup is shown
SPAN = 0.25  # "near": within this share of the current context length
EPS = 0.05  # the speedup is shown at most tau * (1 + EPS)
KEEP = 2048  # most recent plain steps kept
TRIM = 0.1  # share of the slowest and of the fastest plain steps the mean leaves out
REFRESH_STEPS = 8  # a median is worked out again after this many new plain steps (none yet: after each)...
REFRESH_SPAN = 0.05  # ...or when the context has grown by this share


@dataclass(frozen=True)
class PlainSpeed:
    tok_s: float  # plain decoding speed near this context length
    steps: int  # plain steps it is measured from
    newest_at: float  # perf_counter time of the newest of them

    def age_s(self) -> float:
        return max(0.0, time.perf_counter() - self.newest_at)

    def to_dict(self) -> dict:
        return {"tok_s": round(self.tok_s, 2), "steps": self.steps, "age_s": round(self.age_s(), 1)}


class PlainBaseline:
    """Plain step costs by context length, kept across the turns of a session."""

    def __init__(self) -> None:
        self._steps: deque[tuple[int, float, float]] = deque(maxlen=KEEP)  # (context length, seconds, when)
        self._recorded = 0
        self._cached: tuple[int, int, PlainSpeed | None] | None = None  # (length, recorded, answer)

    def record(self, step: Step) -> None:
        """A step that verified no draft is an ordinary decoding step but for the proposal: its wall time since
        the step before, less the proposal, at the context length it ran at."""
        if step.draft.tokens:
            return
        seconds = step.end - step.since - (step.proposed - step.planned)
        if seconds > 0:
            self._steps.append((len(step.context) - len(step.emitted), seconds, step.end))
            self._recorded += 1

    def at(self, context_len: int) -> PlainSpeed | None:
        """Plain decoding speed at about this context length, or None while fewer than MIN_STEPS plain
        steps were measured near it."""
        cached = self._cached
        if (
            cached is not None
            and abs(context_len - cached[0]) <= REFRESH_SPAN * cached[0]
            and self._recorded - cached[1] < (REFRESH_STEPS if cached[2] else 1)
        ):
            return cached[2]
        low, high = math.floor((1 - SPAN) * context_len), math.ceil((1 + SPAN) * context_len)
        near = [(s, when) for n, s, when in self._steps if low <= n <= high]
        answer = None
        if len(near) >= MIN_STEPS:
            answer = PlainSpeed(1.0 / trimmed_mean([s for s, _ in near]), len(near), max(when for _, when in near))
        self._cached = (context_len, self._recorded, answer)
        return answer


def trimmed_mean(values: list[float]) -> float:
    values = sorted(values)
    cut = int(TRIM * len(values))
    return fmean(values[cut : len(values) - cut])


def speedup(decode_tok_s: float, tau: float, plain: PlainSpeed | None) -> float | None:
    """Decode speed over in-session plain decoding, capped at tau * (1 + EPS); None without a baseline."""
    if plain is None or decode_tok_s <= 0:
        return None
    return min(decode_tok_s / plain.tok_s, tau * (1 + EPS))
