"""The drafter interface. A drafter proposes tokens to follow the context; the engine verifies them.

Lifecycle per turn: ``begin(prompt)``, then per step ``propose(context, max_tokens)`` and
``observe(verdict)``, then ``end()``. ``context`` is always the whole token sequence so far (prompt plus
emitted tokens); it only grows within a turn. A drafter whose ``needs`` include hidden states is handed the
target's features of the newly cached positions: with ``propose``, or by ``feed`` on a step it drafts nothing.

What a drafter requires of the target backend is declared in ``needs`` (``DrafterNeeds``) and compared with
the backend's ``Capabilities`` by ``check_fit``: by the engine before generating, and by a drafter that
takes the target in its constructor.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from localspec.errors import ConfigError
from localspec.sampling import SamplingParams
from localspec.types import EMPTY_DRAFT, Draft, Features, Verdict

if TYPE_CHECKING:
    from localspec.backends.base import Backend, Capabilities


def match_confidence(match_len: int) -> float:
    """The confidence a copy drafter (n-gram, suffix) gives the tokens after a match of ``match_len``
    tokens: a longer match is stronger evidence that the text goes on as it did before. It only has to
    rank matches; the controller learns what each confidence level is really worth."""
    return match_len / (match_len + 4)


@dataclass(frozen=True)
class DrafterNeeds:
    """What a drafter requires of the target backend (its ``Capabilities``, backends/base.py)."""

    rollback: bool = True  # the cache is cut back after rejected draft tokens (can_truncate): any drafting
    hidden_states: bool = False  # the target's features of every cached position (Features, via feed/propose)
    feature_layers: bool = False  # ... of the layers the drafter picks (set_feature_layers)
    tree_attention: bool = False  # tree drafts, verified by forward_tree and accept_path


def check_fit(backend: Backend | None, drafter: Drafter) -> None:
    """Raise ConfigError when ``backend`` lacks something ``drafter.needs``: what is missing, and what to do."""
    if backend is None:
        raise ConfigError(f"the {drafter.name} drafter needs a loaded target model")
    needs, caps = drafter.needs, backend.capabilities
    model = f"{backend.model_name}: " if backend.model_name else ""
    if needs.rollback and not caps.can_truncate:
        raise ConfigError(
            f"{model}the {backend.name} cache of this model cannot be rolled back, which speculative decoding "
            f"needs; use --drafter none"
        )
    lacks = _lacks_features(needs, caps)
    if lacks:
        raise ConfigError(
            f"{model}the {backend.name} backend {lacks}, which the {drafter.name} drafter needs; "
            f"use --backend torch (or mlx), or pick another drafter"
        )
    if needs.tree_attention and not caps.tree_attention:
        raise ConfigError(
            f"{model}the {backend.name} backend has no tree attention, which tree drafts need; draft chains "
            f"instead (--eagle-tree 0)"
        )


def _lacks_features(needs: DrafterNeeds, caps: Capabilities) -> str:
    """What the backend lacks of the features the drafter is fed, in words ('' when nothing)."""
    if needs.hidden_states and not caps.hidden_states:
        return "gives no hidden states"
    if needs.feature_layers and not caps.feature_layers:
        return "cannot pick the layers it gives hidden states of"
    return ""


class Drafter:
    name = "none"
    needs = DrafterNeeds()  # what it requires of the target backend, checked by check_fit
    sampling: SamplingParams | None = None  # the target's sampler settings, set by the engine per turn
    catchup_s = 0.0  # seconds the last propose spent catching up on context rather than drafting
    # seconds per drafted token, for the controller until it has timed drafting: 0 for a lookup (n-gram,
    # suffix), None when unknown (a network: the first call drafts a short window to find out)
    cost_per_token: float | None = 0.0
    wants_outputs = False  # handed the target's argmax after every verified draft token (see_outputs)

    def use_sampling(self, sampling: SamplingParams) -> None:
        """Drafters with their own distributions q draw them with the target's sampler settings."""
        self.sampling = sampling

    def begin(self, prompt: Sequence[int]) -> None:
        pass

    def bind(self, policy) -> None:
        """The turn's controller (speclen), for a drafter that asks it which of its members drafts a step
        (a chain); called by the engine after ``begin``."""

    def propose(self, context: Sequence[int], max_tokens: int, features: Features | None = None) -> Draft:
        """Up to ``max_tokens`` tokens to follow ``context``; ``features``: the target's features of the
        positions cached since the last hand-off (a drafter that needs hidden states), fed first."""
        return EMPTY_DRAFT

    def rows_held(self, context: Sequence[int]) -> int:
        """How many leading positions of ``context`` a feature-fed drafter needs no features of: the prefill
        recomputes the rest (its cache reused no further) to hand them over. By default all but the last
        prompt position; a drafter that keeps the target's rows itself says what it holds, so that a new turn
        need not recompute a cached prompt (on a recurrent target that cut can cost a whole prefill)."""
        return max(len(context) - 2, 0)

    def save_state(self) -> object | None:
        """What the drafter keeps of the conversation in its own cache, saved with the target's state when the
        server switches conversations (prompt_states.py); None when it keeps nothing."""
        return None

    def load_state(self, state: object | None) -> None:
        """Put back what ``save_state`` gave (None: nothing saved; a drafter with a cache starts it empty)."""

    def feed(self, context: Sequence[int], features: Features) -> None:
        """Take the target's features without drafting (a step that drafts nothing, the end of a turn), so a
        feature-fed drafter's cache stays complete."""

    def catchup_estimate(self, context: Sequence[int]) -> float:
        """Seconds a proposal now would spend catching up on context before drafting (a draft model after
        steps without drafting); the controller weighs it before asking."""
        return 0.0

    def see_outputs(self, draft: Draft, argmax) -> None:
        """A drafter that ``wants_outputs``: the target's argmax after the pending token (row 0) and after
        every token of the verified ``draft`` (row i + 1), before the verdict (lookahead's Jacobi step)."""

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

    needs = DrafterNeeds(rollback=False)
