"""Sessions side by side on one model (`serve --parallel N`): each over a slot of the model's cache
(Backend.slots) with a drafter, a speculation-length policy and a plain baseline of its own, the same model and
settings; their forward passes run in one batch, each session's request a greenlet (engine/fibers.py).

What a slot's session does not have that a lone one has: conversation states in RAM (a slot keeps its own last
prompt in its cache), `--exact` (its batch-invariant kernels are per request), drafters that read the
target's features (EAGLE, MTP, DFlash) and tree drafters (lookahead): those are refused with what to do
instead. The cost curve a slot's controller starts from is the one measured alone, and is not saved from a slot
(batched steps cost otherwise).
"""

from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np

from localspec.drafters.memory import share_memory
from localspec.drafters.table import chain_members
from localspec.engine.baseline import PlainBaseline
from localspec.engine.fibers import Fibers
from localspec.errors import ConfigError
from localspec.session import Session


def slot_refusal(name: str, needs, exact: bool = False, alone: str = "--parallel 1") -> str | None:
    """Why a drafter ``name`` with ``needs`` (DrafterNeeds) cannot run in slots, or None where it can; ``alone``
    is the flag that runs one request at a time."""
    if exact:
        return f"--exact answers one request at a time (its kernels are per request); use {alone} or drop --exact"
    if needs.hidden_states:
        why = "reads the target's features, which slots do not hand out"
    elif needs.tree_attention:
        why = "verifies trees wider than a slot's share of the cache's sequences"
    else:
        return None
    return f"the {name} drafter {why}; use {alone}, or the suffix or ngram drafter"


def named_refusal(name: str, exact: bool = False, alone: str = "--parallel 1") -> str | None:
    """slot_refusal for the drafter (or chain) ``name`` by its table row, before any is built."""
    return next(filter(None, (slot_refusal(name, k.drafter.needs, exact, alone) for k in chain_members(name))), None)


def slot_sessions(session: Session, count: int, drafter: str | None = None, **options):
    """``count`` sessions over slots of ``session``'s model, and the Fibers that run them side by side; each slot
    drafts with ``drafter`` (default: the session's), ``options`` replacing its options (bench: a scratch
    suffix cache)."""
    if drafter is None:
        drafter = session.drafter.name
        refusal = slot_refusal(drafter, session.drafter.needs, session.exact.on)
    else:
        refusal = named_refusal(drafter, session.exact.on)
    if refusal:
        raise ConfigError(refusal)
    backends, flush = session.backend.slots(count)
    sessions, seeds = [], session.rng.integers(2**63, size=count)
    try:
        for backend, seed in zip(backends, seeds, strict=True):
            built = session.drafters.build(drafter, backend, **options)
            if sessions:  # one memory of past answers for every slot (the suffix cache), not N copies
                share_memory(built, sessions[0].drafter)
            sessions.append(
                replace(
                    session,
                    backend=backend,
                    drafter=built,
                    speclen=copy.deepcopy(session.speclen),  # what the session learnt so far; then its own
                    plain=PlainBaseline(),
                    states=None,
                    costs=None,  # the cost curve stays the one measured alone (the lone session saves it)
                    rng=np.random.default_rng(seed),
                )
            )
    except BaseException:
        for s in sessions:
            s.close()
        for backend in backends[len(sessions) :]:
            backend.close()
        raise
    return sessions, Fibers(flush)
