"""Offline drafter simulation: replay known answers through a drafter against a perfect oracle.

The oracle target accepts exactly the draft tokens that match the recorded answer and then emits the next
recorded token, as greedy verification would. No model runs, so a drafter can be judged on token
sequences alone: mean accepted tokens per step (tau) and acceptance rate.
"""
from __future__ import annotations

from typing import Iterable, Sequence

from localspec.drafters.base import Drafter
from localspec.stats import TurnStats
from localspec.types import EMPTY_DRAFT, Verdict


def simulate(drafter: Drafter, cases: Iterable[tuple[Sequence[int], Sequence[int]]], k: int) -> TurnStats:
    """``cases``: (prompt tokens, answer tokens) pairs, replayed in order (drafters may learn across them)."""
    total = TurnStats()
    for prompt, answer in cases:
        drafter.begin(list(prompt))
        context, done = list(prompt), 0
        while done < len(answer):
            budget = min(k, len(answer) - done - 1)
            draft = drafter.propose(context, budget) if budget > 0 else EMPTY_DRAFT
            tokens = draft.tokens[:budget]
            truth = answer[done:done + len(tokens)]
            accepted = next((i for i, (a, b) in enumerate(zip(tokens, truth)) if a != b), len(tokens))
            emitted = tuple(answer[done:done + accepted + 1])
            drafter.observe(Verdict(len(tokens), accepted, emitted))
            total.record_step(len(tokens), accepted, len(emitted))
            context.extend(emitted)
            done += len(emitted)
        drafter.end()
    return total


def summary(stats: TurnStats) -> dict:
    return {"steps": stats.steps, "tokens": stats.generated, "drafted": stats.drafted, "accepted": stats.accepted,
            "acceptance_rate": round(stats.acceptance_rate or 0.0, 4),
            "mean_accepted_tokens_per_step": round(stats.mean_accepted_length, 3)}
