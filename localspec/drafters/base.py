"""The drafter interface. A drafter proposes tokens to follow the context; the engine verifies them.

Lifecycle per turn: ``begin(prompt)``, then per step ``propose(context, max_tokens)`` and
``observe(verdict)``, then ``end()``. ``context`` is always the whole token sequence so far (prompt plus
emitted tokens); it only grows within a turn.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from localspec.sampling import SamplingParams
from localspec.types import EMPTY_DRAFT, Draft, Verdict


def match_confidence(match_len: int) -> float:
    """The confidence a copy drafter (n-gram, suffix) gives the tokens after a match of ``match_len``
    tokens: a longer match is stronger evidence that the text goes on as it did before. It only has to
    rank matches; the controller learns what each confidence level is really worth."""
    return match_len / (match_len + 4)


class Drafter:
    name = "none"
    needs_hidden_states = False
    sampling: SamplingParams | None = None  # the target's sampler settings, set by the engine per turn
    catchup_s = 0.0  # seconds the last propose spent catching up on context rather than drafting
    # seconds per drafted token, for the controller until it has timed drafting: 0 for a lookup (n-gram,
    # suffix), None when unknown (a network: the first call drafts a short window to find out)
    cost_per_token: float | None = 0.0

    def use_sampling(self, sampling: SamplingParams) -> None:
        """Drafters with their own distributions q draw them with the target's sampler settings."""
        self.sampling = sampling

    def begin(self, prompt: Sequence[int]) -> None:
        pass

    def propose(self, context: Sequence[int], max_tokens: int, hidden: np.ndarray | None = None) -> Draft:
        return EMPTY_DRAFT

    def catchup_estimate(self, context: Sequence[int]) -> float:
        """Seconds a proposal now would spend catching up on context before drafting (a draft model after
        steps without drafting); the controller weighs it before asking."""
        return 0.0

    def observe(self, verdict: Verdict) -> None:
        pass

    def end(self) -> None:
        pass

    def figures(self) -> dict:
        """The drafter's own figures for the turn's stats."""
        return {}

    def describe(self) -> str:
        """A few words on the drafter's setup for the load report ('' when its name says it all)."""
        return ""

    def close(self) -> None:
        pass


class NoDrafter(Drafter):
    """Plain decoding: proposes nothing, so every step is one ordinary target forward."""
