"""Offline drafter simulation: replay known answers through a drafter against a perfect oracle.

The oracle target accepts exactly the draft tokens that match the recorded answer and then emits the next
recorded token, as greedy verification would. No model runs, so a drafter can be judged on token
sequences alone: mean accepted tokens per step (tau) and acceptance rate.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from localspec.drafters.base import Drafter
from localspec.engine.speclen import AdaptiveK
from localspec.engine.stats import TurnStats
from localspec.types import EMPTY_DRAFT, Step, Verdict


def simulate(
    drafter: Drafter,
    cases: Iterable[tuple[Sequence[int], Sequence[int]]],
    k: int,
    step_cost: Callable[[int], float] | None = None,
    policy: AdaptiveK | None = None,
) -> TurnStats:
    """``cases``: (prompt tokens, answer tokens) pairs, replayed in order (drafters may learn across them).
    With ``step_cost`` (seconds of one target forward over n tokens) the stats' verify time is the time the
    target would have spent, so ``predicted_speedup`` can compare against plain decoding. With ``policy`` (a
    controller, and ``step_cost`` its virtual clock) the controller plans and trims every proposal of at
    most k tokens, as the engine's loop has it do; without, all of each proposal is verified."""
    total = TurnStats()
    for prompt, answer in cases:
        drafter.begin(list(prompt))
        if policy is not None:
            policy.begin_turn(0.0)
        context, done = list(prompt), 0
        while done < len(answer):
            budget = min(k, len(answer) - done - 1)
            if policy is not None and budget > 0:
                budget = policy.plan(budget)
            draft = drafter.propose(context, budget).cut(budget) if budget > 0 else EMPTY_DRAFT
            if policy is not None:
                draft = draft.cut(policy.trim(draft, 0.0))
            tokens = draft.tokens
            truth = answer[done : done + len(tokens)]
            accepted = next((i for i, (a, b) in enumerate(zip(tokens, truth, strict=False)) if a != b), len(tokens))
            emitted = tuple(answer[done : done + accepted + 1])
            context.extend(emitted)
            seconds = step_cost(len(tokens) + 1) if step_cost is not None else 0.0  # the target's virtual forward
            verdict = Verdict(len(tokens), accepted, emitted)
            step = Step(context, draft=draft, judged=len(tokens), verdict=verdict, emitted=emitted, accepted=accepted)
            step.verified = step.end = seconds
            drafter.observe(step)
            total.record(step)
            if policy is not None and step_cost is not None:
                policy.record(step)
            done += len(emitted)
        total.method, total.drafter = drafter.name, drafter.end()
    return total


def summary(stats: TurnStats, step_cost: Callable[[int], float] | None = None) -> dict:
    out = {
        "steps": stats.steps,
        "tokens": stats.generated,
        "drafted": stats.drafted,
        "accepted": stats.accepted,
        "acceptance_rate": round(stats.acceptance_rate or 0.0, 4),
        "mean_accepted_tokens_per_step": round(stats.mean_accepted_length, 3),
    }
    if step_cost is not None and stats.verify_s > 0:
        out["predicted_speedup"] = round(stats.generated * step_cost(1) / stats.verify_s, 3)
    return out


def cost_curve(ms_by_k: dict) -> Callable[[int], float]:
    """A step-cost function from measured forward times {k: ms} (benchmarks/verify_cost.py), linear between
    the measured points and beyond the last one."""
    ks = sorted(int(k) for k in ms_by_k)
    ms = [float(ms_by_k[str(k)] if str(k) in ms_by_k else ms_by_k[k]) for k in ks]

    def cost(n: int) -> float:
        if n <= ks[0]:
            return ms[0] / 1e3
        for (k0, m0), (k1, m1) in zip(zip(ks, ms, strict=False), zip(ks[1:], ms[1:], strict=False), strict=False):
            if n <= k1:
                return (m0 + (m1 - m0) * (n - k0) / (k1 - k0)) / 1e3
        slope = (ms[-1] - ms[-2]) / (ks[-1] - ks[-2]) if len(ks) > 1 else ms[-1]
        return (ms[-1] + slope * (n - ks[-1])) / 1e3

    return cost
