"""A drafter chain (`--drafter suffix+draft`): a copy drafter (n-gram, suffix: a lookup, free) and a model
drafter (a draft model, an EAGLE head: each drafted token costs a forward) under one controller.

Every step the copy drafter proposes first; the controller (``choose``, speclen/policy.py) then weighs that
proposal against what the model drafter is expected to bring, in tokens per second, and asks the model only
when it wins: the copy for repeated text (code edits, quotes), the model for new prose. llama-server mixes
drafter types by a fixed priority (a copy whenever there is one); at a fixed K the chain does the same.

The member that drafted a step observes its record; the other observes it as a step it did not draft
(``Step.undrafted``: the emitted tokens and the target's features, no draft), so a copy drafter's view of
the answer, a draft model's sync point and a feature-fed model's cache stay right.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from localspec.drafters.base import DEFAULT_TURN, FREE, Costs, Drafter, DrafterNeeds, Turn
from localspec.types import EMPTY_DRAFT, Draft, Step


class ChainDrafter(Drafter):
    def __init__(self, copy: Drafter, model: Drafter) -> None:
        self.copy, self.model = copy, model
        self.name = f"{copy.name}+{model.name}"
        a, b = copy.needs, model.needs
        self.needs = DrafterNeeds(
            rollback=True,
            hidden_states=a.hidden_states or b.hidden_states,
            feature_layers=a.feature_layers or b.feature_layers,
            tree_attention=a.tree_attention or b.tree_attention,
            outputs=a.outputs or b.outputs,
        )
        self.draft = getattr(model, "draft", None)  # the draft model's backend, if it has one (the load report)
        self._policy = None
        self._drafted_by: Drafter | None = None

    @property
    def state(self):
        return self.model.state  # the copy drafter keeps none

    @state.setter
    def state(self, saved) -> None:
        self.model.state = saved

    def begin(self, prompt: Sequence[int], turn: Turn = DEFAULT_TURN) -> int | None:
        self.copy.begin(prompt, turn)
        held = self.model.begin(prompt, turn)
        self._policy = turn.policy
        if turn.policy is not None:  # the model's own figure: the copy drafter is asked first
            turn.policy.chain(self.model.costs(prompt).per_token)
        return held

    def costs(self, context: Sequence[int]) -> Costs:
        return FREE  # the copy drafter is asked first; the model's costs go to the controller's choose

    def propose(self, context: Sequence[int], max_tokens: int) -> Draft:
        if max_tokens <= 0:
            self._drafted_by = None
            return self._catch_up(context, EMPTY_DRAFT)
        copy = self.copy.propose(context, max_tokens).cut(max_tokens)
        k = self._policy.choose(copy, max_tokens, self.model.costs(context).catchup_s) if self._policy else 0
        if k == 0:
            self._drafted_by = self.copy
            return self._catch_up(context, copy)
        self._drafted_by = self.model
        return self.model.propose(context, k)

    def _catch_up(self, context: Sequence[int], draft: Draft) -> Draft:
        """``draft``, after a feature-fed model drafter caught up on what it observed: keeping its cache whole
        is its cost, not the copy's drafting."""
        if not self.model.needs.hidden_states:
            return draft
        t0 = time.perf_counter()
        self.model.propose(context, 0)
        return draft.with_catchup(time.perf_counter() - t0)

    def observe(self, step: Step) -> None:
        skipped = step.undrafted()
        for member in (self.copy, self.model):
            member.observe(step if member is self._drafted_by else skipped)
        self._drafted_by = None

    def end(self) -> dict:
        return {**self.copy.end(), **self.model.end()}

    def describe(self) -> str:
        parts = [f"{d.name}: {d.describe()}" for d in (self.copy, self.model) if d.describe()]
        return "; ".join(parts)

    def close(self) -> None:
        try:
            self.copy.close()
        finally:
            self.model.close()
