"""A drafter chain (`--drafter suffix+draft`): a copy drafter (n-gram, suffix: a lookup, free) and a model
drafter (a draft model, an EAGLE head: each drafted token costs a forward) under one controller.

Every step the copy drafter proposes first; the controller (``choose``, speclen/policy.py) then weighs that
proposal against what the model drafter is expected to bring, in tokens per second, and asks the model only
when it wins: the copy for repeated text (code edits, quotes), the model for new prose. llama-server mixes
drafter types by a fixed priority (a copy whenever there is one); at a fixed K the chain does the same.

The member that drafted a step sees its verdict; the other sees the emitted tokens as a step it did not
draft (``Verdict(0, 0, tokens)``), so a copy drafter's view of the answer and a draft model's sync point
stay right.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from localspec.drafters.base import Drafter, DrafterNeeds
from localspec.types import Draft, Features, Verdict


class ChainDrafter(Drafter):
    cost_per_token = 0.0  # the copy drafter is asked first; the model's own figure goes to policy.chain

    def __init__(self, copy: Drafter, model: Drafter) -> None:
        self.copy, self.model = copy, model
        self.name = f"{copy.name}+{model.name}"
        a, b = copy.needs, model.needs
        self.needs = DrafterNeeds(
            rollback=True,
            hidden_states=a.hidden_states or b.hidden_states,
            feature_layers=a.feature_layers or b.feature_layers,
            tree_attention=a.tree_attention or b.tree_attention,
        )
        self.rows_held = model.rows_held
        self.save_state, self.load_state = model.save_state, model.load_state  # the copy drafter keeps none
        self.draft = getattr(model, "draft", None)  # the draft model's backend, if it has one (the load report)
        self._policy = None
        self._drafted_by: Drafter | None = None

    def use_sampling(self, sampling) -> None:
        super().use_sampling(sampling)
        self.copy.use_sampling(sampling)
        self.model.use_sampling(sampling)

    def begin(self, prompt: Sequence[int]) -> None:
        self.copy.begin(prompt)
        self.model.begin(prompt)

    def bind(self, policy) -> None:
        self._policy = policy
        policy.chain(self.model.cost_per_token)

    def propose(self, context: Sequence[int], max_tokens: int, features: Features | None = None) -> Draft:
        self.catchup_s = 0.0
        copy = self.copy.propose(context, max_tokens).cut(max_tokens)
        k = self._policy.choose(copy, max_tokens, self.model.catchup_estimate(context)) if self._policy else 0
        if k == 0:
            self._drafted_by = self.copy
            if features is not None:  # keeping the model's cache whole is its cost, not the copy's drafting
                t0 = time.perf_counter()
                self.model.feed(context, features)
                self.catchup_s = time.perf_counter() - t0
            return copy
        self._drafted_by = self.model
        draft = self.model.propose(context, k, features)
        self.catchup_s = self.model.catchup_s
        return draft

    def feed(self, context: Sequence[int], features: Features) -> None:
        self.model.feed(context, features)

    def observe(self, verdict: Verdict) -> None:
        skipped = Verdict(0, 0, verdict.tokens)
        for member in (self.copy, self.model):
            member.observe(verdict if member is self._drafted_by else skipped)
        self._drafted_by = None

    def end(self) -> None:
        self.copy.end()
        self.model.end()

    def figures(self) -> dict:
        return {**self.copy.figures(), **self.model.figures()}

    def describe(self) -> str:
        parts = [f"{d.name}: {d.describe()}" for d in (self.copy, self.model) if d.describe()]
        return "; ".join(parts)

    def close(self) -> None:
        try:
            self.copy.close()
        finally:
            self.model.close()
