"""The grammar drafter: under structured output, the tokens the grammar forces (a JSON key and its quotes, a
closing brace) are drafted for free in front of another drafter (``grammar+suffix``).

Each step the inner drafter proposes as usual. When the grammar forces tokens next and the inner proposal does
not already begin with them (a point-mass chain), the forced tokens are the draft instead, at full confidence;
either way the engine verifies them whatever the controller would plan (``Costs.sure``). They are verified like any
draft, never emitted unverified: a forced token in a tokenisation the model would not choose is simply rejected.
The inner drafter then observes the step as one it did not draft.
"""

from __future__ import annotations

from collections.abc import Sequence

from localspec.drafters.base import DEFAULT_TURN, Costs, Drafter, Turn
from localspec.types import Draft, Step


class GrammarDrafter(Drafter):
    def __init__(self, inner: Drafter) -> None:
        self.inner = inner
        self.name = f"grammar+{inner.name}"
        self.needs = inner.needs
        self.constraint = None
        self._drafted = False  # whether this step's draft is the forced tokens (their counts: the constraint's)

    def begin(self, prompt: Sequence[int], turn: Turn = DEFAULT_TURN) -> int | None:
        self.constraint = turn.constraint
        return self.inner.begin(prompt, turn)

    def propose(self, context: Sequence[int], max_tokens: int) -> Draft:
        draft = self.inner.propose(context, max_tokens)
        self._drafted = False
        if max_tokens <= 0 or self.constraint is None:
            return draft
        forced = self.constraint.forced()[:max_tokens]
        carried = draft.is_chain and draft.q is None and list(draft.tokens[: len(forced)]) == forced
        if not forced or carried:
            return draft
        self._drafted = True
        self.constraint.forced_drafted += len(forced)
        return Draft.chain(forced, confidence=[1.0] * len(forced))

    def observe(self, step: Step) -> None:
        if self._drafted:
            self.constraint.forced_accepted += step.accepted
        self.inner.observe(step.undrafted() if self._drafted else step)
        self._drafted = False

    def end(self) -> dict:
        return self.inner.end()

    def costs(self, context: Sequence[int]) -> Costs:
        costs = self.inner.costs(context)
        return costs._replace(sure=len(self.constraint.forced())) if self.constraint is not None else costs

    @property
    def state(self):
        return self.inner.state

    @state.setter
    def state(self, saved) -> None:
        self.inner.state = saved

    def describe(self) -> str:
        return self.inner.describe()

    def close(self) -> None:
        self.inner.close()
