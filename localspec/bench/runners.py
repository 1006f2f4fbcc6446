"""The methods `localspec bench` times side by side: a drafter with a speculation-length policy of its own, run
on a session's model outside its chat, each answer prefilled from scratch as a new chat's is."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from localspec.cost_cache import CostCache
from localspec.drafters.base import Drafter
from localspec.engine.baseline import PlainBaseline
from localspec.engine.exact import Exact
from localspec.engine.loop import stream_generate
from localspec.engine.speclen import AdaptiveK, FixedK, make_policy
from localspec.engine.stats import TokenEvent
from localspec.errors import ConfigError
from localspec.session import Session


@dataclass
class Runner:
    label: str
    drafter: Drafter
    policy: FixedK | AdaptiveK
    exact: Exact = field(default_factory=Exact)  # NAME+exact: bit-identical greedy output, as the session's --exact
    plain: PlainBaseline = field(default_factory=PlainBaseline)  # its in-session speedup baseline


def make_runner(session: Session, label: str, drafter: str, draft_tokens, exact: bool = False, **options) -> Runner:
    """A fresh drafter ``drafter`` (its options replaced by ``options``) with its own controller, which starts
    from the machine's measured cost curve for the kernels it will run, as a user's chat does after its first
    session. ``exact``: bit-identical greedy output, which needs a session opened with --exact where the backend's
    weight layout is fixed at load."""
    backend = session.backend
    if exact and not session.exact.on and backend.reload_for_exact(True):
        raise ConfigError(
            f"{label}: bit-identical greedy output needs the model loaded for it ({backend.name} fixes its "
            "weight layout at load); add --exact to the bench command (the other methods then run the same "
            "weights with the default kernels)"
        )
    mode = (session.exact if session.exact.on else Exact.of(backend, True)) if exact else Exact(backend=backend.name)
    built = session.drafters.build(drafter, backend, **options)
    return Runner(label, built, make_policy(draft_tokens, CostCache.of(backend, mode.kernels).load()), mode)


def run_runner(session: Session, runner: Runner, prompt: list[int], max_tokens: int, seed: int) -> Iterator[TokenEvent]:
    """A runner's answer to a whole prompt, prefilled from scratch as a new chat's is."""
    session.backend.truncate(0)
    return stream_generate(
        session.backend,
        runner.drafter,
        prompt,
        session.sampling,
        max_tokens=max_tokens,
        draft_tokens=runner.policy,
        rng=np.random.default_rng(seed),
        plain=runner.plain,
        exact_guard=runner.exact.margin,
    )


def keep_costs(session: Session, runners: list[Runner]) -> None:
    """Save the cost curves the runners measured: per kernel choice, that of the runner that measured most
    window sizes."""
    by_kernels: dict[bool, list[AdaptiveK]] = {}
    for r in runners:
        if isinstance(r.policy, AdaptiveK):
            by_kernels.setdefault(r.exact.kernels, []).append(r.policy)
    for invariant, measured in by_kernels.items():
        best = max(measured, key=lambda p: len(p.costs()["verify_s"]))
        CostCache.of(session.backend, invariant).save(best.costs())


def draft_model_path(session: Session) -> str | None:
    """The draft model's file the draft drafter would load (--draft-model, else the model's first recommended
    draft), or None if there is none."""
    options, context = session.drafters.options_of("draft"), session.drafters.context
    if not options.model:
        return None
    return context.find_model(options.model) if context.find_model else options.model
